/*
 * test_rich_results.c — rich results and files out (docs/proxy-api.md,
 * "Rich results"), against the real proxy, the real images and the real
 * gateway: a matplotlib figure comes back as a PNG that decodes, of the
 * size asked for; the value of a last expression comes back as
 * execute_result does (text/plain, text/html for a DataFrame, image/png for
 * a PIL image) and is not printed; javascript's completion value; 200
 * figures capped with results_truncated; a one-shot execute's figures;
 * streamed results as "display" events; a file written to /sandbox/out
 * listed with its size and downloaded byte for byte; and the same chart
 * drawn through the gateway coming back as an image.
 *
 * One stack (proxy with a warm pool of one per language, gateway with
 * memory state) for the group; every test closes its sessions.
 */
#include "sggw.h"
#include "sgrich.h"
#include "sgsse.h"

#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIMEOUT 60     /* seconds: the first import of matplotlib or pandas on a busy machine */
#define MAX_RESULTS 64 /* the proxy's default SANDGATE_MAX_RESULTS */

static sggw_stack_t stack;

/* A tenant of the gateway's own for one test (its token, malloc'd). */
static char *tenant(const char *name)
{
    return sggw_new_tenant(sggw_gateway_data_dir(stack.gw), name, NULL);
}

static int after_test(void **state)
{
    (void)state;
    sggw_proxy_close_all(stack.proxy);
    return sggw_stack_after_test(&stack);
}

static int group_setup(void **state)
{
    (void)state;
    return sggw_stack_start_pool(&stack, false, 1);
}

static int group_teardown(void **state)
{
    (void)state;
    return sggw_stack_end(&stack);
}

/* A 4 x 3 inch figure at 50 dpi: 200 x 150 pixels. */
#define FIGURE_CODE                                                                                                    \
    "import matplotlib.pyplot as plt\n"                                                                                \
    "fig, ax = plt.subplots(figsize=(4, 3), dpi=50)\n"                                                                 \
    "ax.plot([1, 3, 2])\n"                                                                                             \
    "ax.set_title('sales')\n"                                                                                          \
    "print('drawn')\n"

static json_object *run(const char *sid, const char *code)
{
    json_object *r = sgtest_run_code(stack.proxy, sid, code, NULL, TIMEOUT, NULL);
    sgrich_check(r);
    return r;
}

static const char *text_of(json_object *r, const char *mime, int main)
{
    SG_CHECK(sgrich_count(r, mime, main) == 1, r, "one %s result (main %d)", mime, main);
    return sgrich_data(r, mime, 0);
}

/* ------------------------------------------------------------------------ */

SGGW_TEST(test_figure_and_values)
{
    char *sid = sgtest_create_session(stack.proxy, "python", NULL, NULL);
    json_object *r;

    /* a figure left open: one PNG, 200 x 150, not main; stdout as printed */
    r = run(sid, FIGURE_CODE);
    sgtest_expect_stdout(r, "drawn\n");
    SG_CHECK(json_object_array_length(SG_ARR(r, "results")) == 1, r, "one result");
    SG_CHECK(sgrich_count(r, "image/png", 0) == 1, r, "a figure is not the main result");
    sgrich_expect_png(r, 0, 200, 150);
    SG_CHECK(!SG_BOOL(r, "results_truncated"), r, "nothing dropped");
    json_object_put(r);
    /* it was closed: the next run sends nothing */
    r = run(sid, "x = 1");
    SG_CHECK(json_object_array_length(SG_ARR(r, "results")) == 0, r, "the figure went with its run");
    json_object_put(r);

    /* plt.show() sends at once; a figure drawn after it too */
    r = run(sid, "plt.figure(figsize=(2, 1), dpi=30); plt.plot([1]); plt.show()\nprint('after')\n"
                 "plt.figure(figsize=(1, 1), dpi=40)\nplt.plot([2])\nNone");
    sgtest_expect_stdout(r, "after\n");
    sgrich_expect_png(r, 0, 60, 30);
    sgrich_expect_png(r, 1, 40, 40);
    json_object_put(r);

    /* the last expression: its value, not printed */
    r = run(sid, "y = 41\n1 + 1");
    sgtest_expect_stdout(r, "");
    SG_CHECK(strcmp(text_of(r, "text/plain", 1), "2") == 0, r, "1 + 1 is \"2\"");
    json_object_put(r);
    r = run(sid, "print(y + 1)\ny;");
    sgtest_expect_stdout(r, "42\n");
    SG_CHECK(json_object_array_length(SG_ARR(r, "results")) == 0, r, "a semicolon keeps it quiet");
    json_object_put(r);

    /* a DataFrame: text and HTML */
    r = run(sid, "import pandas as pd\npd.DataFrame({'city': ['Oslo', 'Lima'], 'temp': [3, 19]})");
    sgtest_expect_stdout(r, "");
    SG_CHECK(strstr(text_of(r, "text/plain", 1), "Oslo") != NULL, r, "the DataFrame's text");
    SG_CHECK(strstr(text_of(r, "text/html", 1), "<table") != NULL, r, "the DataFrame's HTML");
    json_object_put(r);

    /* a PIL image displayed: a PNG of its size */
    r = run(sid, "from PIL import Image\nImage.new('RGB', (37, 23), (200, 10, 10))");
    SG_CHECK(sgrich_count(r, "image/png", 1) == 1, r, "the image is the main result");
    sgrich_expect_png(r, 0, 37, 23);
    json_object_put(r);

    /* an error: no value, a traceback, the session goes on */
    r = sgtest_run_code(stack.proxy, sid, "1 / 0\n2", NULL, TIMEOUT, NULL);
    sgrich_check(r);
    SG_CHECK(SG_INT(r, "exit_code") == 1 && json_object_array_length(SG_ARR(r, "results")) == 0, r, "no value");
    json_object_put(r);
    sgtest_close_session(stack.proxy, stack.proxy_id, sid, NULL, 15);
    free(sid);
}

SGGW_TEST(test_javascript_value)
{
    char *sid = sgtest_create_session(stack.proxy, "javascript", NULL, NULL);
    json_object *r = run(sid, "const xs = [1, 2];\nxs.map((x) => x * 21)");

    sgtest_expect_stdout(r, "");
    SG_CHECK(strcmp(text_of(r, "text/plain", 1), "[ 21, 42 ]") == 0, r, "the completion value");
    json_object_put(r);
    r = run(sid, "console.log('only output')");
    sgtest_expect_stdout(r, "only output\n");
    SG_CHECK(json_object_array_length(SG_ARR(r, "results")) == 0, r, "undefined is no result");
    json_object_put(r);
    sgtest_close_session(stack.proxy, stack.proxy_id, sid, NULL, 15);
    free(sid);
}

/* 200 figures: the first SANDGATE_MAX_RESULTS come back, and the result
 * says the rest were dropped; the next run is whole again. */
SGGW_TEST(test_results_capped)
{
    char *sid = sgtest_create_session(stack.proxy, "python", NULL, NULL);
    json_object *r = run(sid, "import matplotlib.pyplot as plt\n"
                              "for i in range(200):\n"
                              "    fig = plt.figure(figsize=(1, 1), dpi=20)\n"
                              "    fig.text(0.5, 0.5, str(i))\n"
                              "    plt.show()\n"
                              "print('done')");

    sgtest_expect_stdout(r, "done\n");
    SG_CHECK(json_object_array_length(SG_ARR(r, "results")) == MAX_RESULTS, r, "capped at %d", MAX_RESULTS);
    SG_CHECK(SG_BOOL(r, "results_truncated"), r, "results_truncated");
    for (size_t i = 0; i < MAX_RESULTS; i += 21)
        sgrich_expect_png(r, i, 20, 20);
    json_object_put(r);
    r = run(sid, "2 + 2");
    SG_CHECK(strcmp(text_of(r, "text/plain", 1), "4") == 0 && !SG_BOOL(r, "results_truncated"), r, "whole again");
    json_object_put(r);
    sgtest_close_session(stack.proxy, stack.proxy_id, sid, NULL, 15);
    free(sid);
}

SGGW_TEST(test_one_shot)
{
    json_object *r = sgtest_run_ephemeral(stack.proxy, "python", FIGURE_CODE "'total'", NULL, TIMEOUT, NULL);

    sgrich_check(r);
    sgtest_expect_stdout(r, "drawn\n");
    SG_CHECK(strcmp(text_of(r, "text/plain", 1), "'total'") == 0, r, "the value");
    sgrich_expect_png(r, 0, 200, 150);
    json_object_put(r);
}

/* Streamed: each result is a "display" event as it comes; the result
 * event's "results" is empty (they were streamed). */
static void check_streamed(const char *base, const char *token, const char *path)
{
    char url[512], body[512];
    sgsse_result_t s = {0};
    size_t images = 0, values = 0;

    pathf(body, sizeof(body),
          "{\"stream\": true, %s\"code\": \"import matplotlib.pyplot as plt\\n"
          "plt.figure(figsize=(3, 2), dpi=40); plt.plot([1, 2]); plt.show()\\n"
          "print('between')\\nplt.figure(figsize=(1, 2), dpi=40); plt.plot([2])\\n6 * 7\"}",
          strcmp(path, "/execute") == 0 ? "\"lang\": \"python\", " : "");
    pathf(url, sizeof(url), "%s%s", base, path);
    SG_CHECK(sgsse_post(url, token, body, NULL, TIMEOUT, &s) == 0 && s.status == 200, NULL, "the stream: %s", s.error);
    for (size_t i = 0; i < s.nev; i++) {
        if (strcmp(s.ev[i].name, "display") != 0)
            continue;
        json_object *res = json_tokener_parse(s.ev[i].data), *wrap = json_object_new_object(), *arr;
        SG_CHECK(res != NULL, NULL, "a display event is JSON: %s", s.ev[i].data);
        sgrich_check_one(res);
        /* as a result of its own, for the PNG checks */
        arr = json_object_new_array();
        json_object_array_add(arr, res);
        json_object_object_add(wrap, "results", arr);
        json_object_object_add(wrap, "results_truncated", json_object_new_boolean(0));
        json_object_object_add(wrap, "files", json_object_new_array());
        json_object_object_add(wrap, "files_truncated", json_object_new_boolean(0));
        if (sgrich_count(wrap, "image/png", 0) == 1) {
            sgrich_expect_png(wrap, 0, images == 0 ? 120 : 40, images == 0 ? 80 : 80);
            images++;
        } else if (sgrich_count(wrap, "text/plain", 1) == 1) {
            SG_CHECK(strcmp(sgrich_data(wrap, "text/plain", 0), "42") == 0, wrap, "the value");
            values++;
        }
        json_object_put(wrap);
    }
    SG_CHECK(images == 2 && values == 1, NULL, "%zu images and %zu values streamed", images, values);
    const sgsse_event_t *last = sgsse_last(&s, "result");
    SG_CHECK(last != NULL && last == &s.ev[s.nev - 1], NULL, "the result event ends the stream");
    json_object *r = json_tokener_parse(last->data);
    SG_CHECK(r != NULL, NULL, "the result event is JSON");
    SG_CHECK(json_object_array_length(sgrich_check(r)) == 0 && !SG_BOOL(r, "results_truncated"), r,
             "streamed results are not repeated");
    json_object_put(r);
    char *out;
    size_t len;
    SG_CHECK(sgsse_concat(&s, "stdout", &out, &len) == 0 && strcmp(out, "between\n") == 0, NULL, "stdout");
    free(out);
    sgsse_result_free(&s);
}

SGGW_TEST(test_streamed)
{
    char path[128];
    char *sid = sgtest_create_session(stack.proxy, "python", NULL, NULL);

    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    check_streamed(sgtest_proxy_url(stack.proxy), NULL, path);
    sgtest_close_session(stack.proxy, stack.proxy_id, sid, NULL, 15);
    free(sid);
    /* through the gateway, one-shot */
    char *tok = tenant("rich-stream");
    check_streamed(sggw_gateway_url(stack.gw), tok, "/execute");
    free(tok);
}

/* 1 MiB of random bytes written to /sandbox/out: listed with its size, and
 * GET .../files gives the very bytes (their SHA-256 as the sandbox says). */
#define FILE_CODE                                                                                                      \
    "import os, hashlib\n"                                                                                             \
    "data = os.urandom(1 << 20)\n"                                                                                     \
    "os.makedirs('/sandbox/out/run1', exist_ok=True)\n"                                                                \
    "open('/sandbox/out/run1/data.bin', 'wb').write(data)\n"                                                           \
    "os.symlink('/etc/passwd', '/sandbox/out/passwd')\n"                                                               \
    "print(hashlib.sha256(data).hexdigest())"

static void check_file(json_object *r, const char *base, const char *token, const char *sid)
{
    json_object *files = SG_ARR(r, "files"), *f;
    const char *want = SG_STR(r, "stdout");
    char url[512], hex[2 * SHA256_DIGEST_LENGTH + 2];
    unsigned char md[SHA256_DIGEST_LENGTH];
    const char *const *hdrs = NULL;
    char auth[256];
    const char *h[2] = {auth, NULL};
    sgtest_reply_t d;

    SG_CHECK(json_object_array_length(files) == 1, r, "one file listed (the link is not)");
    f = json_object_array_get_idx(files, 0);
    SG_CHECK(strcmp(SG_STR(f, "path"), "/sandbox/out/run1/data.bin") == 0 && SG_INT(f, "size") == 1 << 20, r,
             "its path and size");
    SG_CHECK(!SG_BOOL(r, "files_truncated"), r, "all listed");
    if (token != NULL) {
        pathf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        hdrs = h;
    }
    pathf(url, sizeof(url), "%s/sessions/%s/files?path=/sandbox/out/run1/data.bin", base, sid);
    SG_CHECK(sggw_http("GET", url, NULL, 0, NULL, hdrs, TIMEOUT, &d) == 0 && d.status == 200, NULL, "download: %ld %s",
             d.status, d.error);
    SG_CHECK(d.body_len == 1 << 20, NULL, "%zu bytes downloaded", d.body_len);
    SHA256((const unsigned char *)d.body, d.body_len, md);
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    hex[2 * SHA256_DIGEST_LENGTH] = '\n';
    hex[2 * SHA256_DIGEST_LENGTH + 1] = '\0';
    SG_CHECK(strcmp(hex, want) == 0, r, "the download is the file the sandbox wrote (sha256 %s)", hex);
    sgtest_reply_free(&d);
}

SGGW_TEST(test_files_out)
{
    char *sid = sgtest_create_session(stack.proxy, "python", NULL, NULL);
    json_object *r = run(sid, FILE_CODE);

    check_file(r, sgtest_proxy_url(stack.proxy), NULL, sid);
    json_object_put(r);
    /* a later run lists what is there still */
    r = run(sid, "print('again')");
    SG_CHECK(json_object_array_length(SG_ARR(r, "files")) == 1, r, "still listed");
    json_object_put(r);
    sgtest_close_session(stack.proxy, stack.proxy_id, sid, NULL, 15);
    free(sid);
}

/* Done when a matplotlib chart drawn by code sent through the gateway
 * comes back as an image in the reply; its files too. */
SGGW_TEST(test_through_gateway)
{
    char *tok = tenant("rich-gateway");
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    json_object *r = sggw_execute(stack.gw, tok, sid, FIGURE_CODE "'chart'", TIMEOUT);

    sgrich_check(r);
    sgtest_expect_stdout(r, "drawn\n");
    sgrich_expect_png(r, 0, 200, 150);
    SG_CHECK(strcmp(text_of(r, "text/plain", 1), "'chart'") == 0, r, "the value");
    json_object_put(r);
    r = sggw_execute(stack.gw, tok, sid, FILE_CODE, TIMEOUT);
    sgrich_check(r);
    check_file(r, sggw_gateway_url(stack.gw), tok, sid);
    json_object_put(r);
    sggw_session_done(stack.gw, tok, sid);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_figure_and_values, after_test),
        cmocka_unit_test_teardown(test_javascript_value, after_test),
        cmocka_unit_test_teardown(test_results_capped, after_test),
        cmocka_unit_test_teardown(test_one_shot, after_test),
        cmocka_unit_test_teardown(test_streamed, after_test),
        cmocka_unit_test_teardown(test_files_out, after_test),
        cmocka_unit_test_teardown(test_through_gateway, after_test),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
