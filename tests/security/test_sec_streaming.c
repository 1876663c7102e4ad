/*
 * test_sec_streaming.c — streamed executions lose nothing.
 *
 * A program writes stdout and stderr interleaved, in writes of 1 to 65537
 * bytes, with 2-, 3- and 4-byte UTF-8 characters that the writes cut in
 * two, for outputs of 1 byte to 1 MiB and one past the output limit; the
 * same program runs once streamed (SSE: the "stream" field, or Accept:
 * text/event-stream) and once buffered, in python and javascript, through
 * the proxy directly and through the gateway. The stdout and stderr events,
 * concatenated, must equal the buffered result byte for byte, and the
 * stream must end with one result event. The SSE reader is the test's own
 * (tests/support/sgsse.h), checked first against splits at every byte.
 */
#include "sggw.h"
#include "sgsse.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REMOVAL_S 15.0
#define OUTPUT_LIMIT (1u << 20) /* the proxy's default SANDGATE_OUTPUT_LIMIT */

/* The unit the outputs repeat: a, é (2 bytes), € (3), 😀 (4), b, newline:
 * 12 bytes, so that every write size below cuts characters somewhere. */
static const char TEXT_UNIT[] = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"
                                "b\n";
/* Control characters: each is 6 bytes in JSON ("\u0001"), the largest
 * events and queues a byte of output can make. */
static const char CTRL_UNIT[] = "\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\x0e\x0f";
#define UNIT_LEN 12
static const char *unit = TEXT_UNIT;

static sggw_stack_t stack;
static char *tenant_token;

static int group_setup(void **state)
{
    (void)state;
    sggw_stack_opts_t o = {.redis = false};
    return sggw_stack_start(&stack, &o);
}

static int after_test(void **state)
{
    (void)state;
    unit = TEXT_UNIT;
    int rc = sggw_stack_after_test(&stack);
    if (stack.gw_restarted) {
        free(tenant_token); /* the new gateway has a data directory of its own */
        tenant_token = NULL;
    }
    return rc;
}

static int group_teardown(void **state)
{
    (void)state;
    free(tenant_token);
    return sggw_stack_end(&stack);
}

/* ------------------------------------------------------------------------
 * The test's SSE reader
 * ------------------------------------------------------------------------ */

static const char CANNED[] = ": a comment\r\n"
                             "event: stdout\n"
                             "data: {\"data\": \"a\"}\n"
                             "\n"
                             "event: stdout\r"
                             "data: {\"data\":\r"
                             "data:  \"b\"}\r"
                             "\r"
                             "event: result\r\n"
                             "data: {\"exit_code\": 0}\r\n"
                             "\r\n";

static void check_canned(const sgsse_result_t *r, const char *how)
{
    SG_CHECK(!r->oom && !r->unterminated && r->nev == 3, NULL, "%s: %zu events", how, r->nev);
    SG_CHECK(strcmp(r->ev[0].name, "stdout") == 0 && strcmp(r->ev[0].data, "{\"data\": \"a\"}") == 0, NULL,
             "%s: event 0 is %s %s", how, r->ev[0].name, r->ev[0].data);
    SG_CHECK(strcmp(r->ev[1].name, "stdout") == 0 && strcmp(r->ev[1].data, "{\"data\":\n \"b\"}") == 0, NULL,
             "%s: event 1 (two data lines) is %s %s", how, r->ev[1].name, r->ev[1].data);
    SG_CHECK(strcmp(r->ev[2].name, "result") == 0 && strcmp(r->ev[2].data, "{\"exit_code\": 0}") == 0, NULL,
             "%s: event 2 is %s %s", how, r->ev[2].name, r->ev[2].data);
    char *out;
    size_t len;
    SG_CHECK(sgsse_concat(r, "stdout", &out, &len) == 0 && len == 2 && memcmp(out, "ab", 2) == 0, NULL,
             "%s: stdout concatenated", how);
    free(out);
}

SGGW_TEST(test_reader_splits)
{
    size_t n = sizeof(CANNED) - 1;
    for (size_t cut = 0; cut <= n; cut++) {
        sgsse_result_t r = {0};
        sgsse_parser_t *p = sgsse_parser_new(&r);
        sgsse_parser_feed(p, CANNED, cut);
        sgsse_parser_feed(p, CANNED + cut, n - cut);
        sgsse_parser_finish(p);
        sgsse_parser_free(p);
        char how[64];
        snprintf(how, sizeof(how), "split at %zu", cut);
        check_canned(&r, how);
        sgsse_result_free(&r);
    }
    sgsse_result_t r = {0};
    sgsse_parser_t *p = sgsse_parser_new(&r);
    for (size_t i = 0; i < n; i++)
        sgsse_parser_feed(p, CANNED + i, 1);
    sgsse_parser_finish(p);
    sgsse_parser_free(p);
    check_canned(&r, "byte by byte");
    sgsse_result_free(&r);
    /* a stream cut inside an event is seen as cut */
    p = sgsse_parser_new(&r);
    sgsse_parser_feed(p, CANNED, n - 3);
    sgsse_parser_finish(p);
    sgsse_parser_free(p);
    SG_CHECK(r.unterminated && r.nev == 2, NULL, "a cut stream: %zu events, unterminated %d", r.nev,
             (int)r.unterminated);
    sgsse_result_free(&r);
}

/* ------------------------------------------------------------------------
 * The programs
 * ------------------------------------------------------------------------ */

static void expected(size_t n, size_t off, char *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = unit[(i + off) % UNIT_LEN];
}

static void unit_hex(char out[2 * UNIT_LEN + 1])
{
    for (size_t i = 0; i < UNIT_LEN; i++)
        snprintf(out + 2 * i, 3, "%02x", (unsigned char)unit[i]);
}

/* The length of the longest prefix of s[0..n) that ends on a character. */
static size_t whole_chars(const char *s, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xc0) == 0x80)
            continue;
        size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

static const char PY[] = "import sys\n"
                         "U = bytes.fromhex('%s')\n"
                         "def gen(n, off):\n"
                         "    return (U * ((n + off) // len(U) + 1))[off:off + n]\n"
                         "out, err = gen(%zu, 0), gen(%zu, 6)\n"
                         "sizes = [1, 2, 3, 5, 16, 17, 4095, 4096, 65537, 15]\n"
                         "i = j = k = 0\n"
                         "while i < len(out) or j < len(err):\n"
                         "    s = sizes[k %% len(sizes)]\n"
                         "    t = sizes[(k * 7 + 3) %% len(sizes)]\n"
                         "    k += 1\n"
                         "    if i < len(out):\n"
                         "        sys.stdout.buffer.write(out[i:i + s]); sys.stdout.buffer.flush(); i += s\n"
                         "    if j < len(err):\n"
                         "        sys.stderr.buffer.write(err[j:j + t]); sys.stderr.buffer.flush(); j += t\n";

/* one block scope: the session's kernel runs every piece in one context */
static const char JS[] = "(() => {\n"
                         "const U = Buffer.from('%s', 'hex');\n"
                         "function gen(n, off) {\n"
                         "  const b = Buffer.alloc(n);\n"
                         "  for (let i = 0; i < n; i++) b[i] = U[(i + off) %% U.length];\n"
                         "  return b;\n"
                         "}\n"
                         "const out = gen(%zu, 0), err = gen(%zu, 6);\n"
                         "const sizes = [1, 2, 3, 5, 16, 17, 4095, 4096, 65537, 15];\n"
                         "let i = 0, j = 0, k = 0;\n"
                         "while (i < out.length || j < err.length) {\n"
                         "  const s = sizes[k %% sizes.length], t = sizes[(k * 7 + 3) %% sizes.length];\n"
                         "  k++;\n"
                         "  if (i < out.length) { process.stdout.write(out.subarray(i, i + s)); i += s; }\n"
                         "  if (j < err.length) { process.stderr.write(err.subarray(j, j + t)); j += t; }\n"
                         "}\n"
                         "})();\n";

static json_object *program_body(const char *lang, size_t nout, size_t nerr, int stream_field)
{
    char code[4096], hex[2 * UNIT_LEN + 1];
    unit_hex(hex);
    snprintf(code, sizeof(code), strcmp(lang, "python") == 0 ? PY : JS, hex, nout, nerr);
    json_object *b = json_object_new_object();
    json_object_object_add(b, "code", json_object_new_string(code));
    json_object_object_add(b, "timeout", json_object_new_int(60));
    if (stream_field)
        json_object_object_add(b, "stream", json_object_new_boolean(1));
    return b;
}

/* ------------------------------------------------------------------------
 * Streamed against buffered
 * ------------------------------------------------------------------------ */

typedef struct {
    const char *base;  /* server URL */
    const char *token; /* NULL: the proxy */
    const char *sid;
    const char *lang;
} target_t;

static json_object *run_buffered(const target_t *t, size_t nout, size_t nerr)
{
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s/execute", t->sid);
    json_object *body = program_body(t->lang, nout, nerr, 0);
    if (t->token != NULL)
        return sggw_post_result(stack.gw, t->token, path, body);
    return sgtest_post_result(stack.proxy, path, body, NULL);
}

static void run_streamed(const target_t *t, size_t nout, size_t nerr, int use_accept, sgsse_result_t *r)
{
    char url[512];
    pathf(url, sizeof(url), "%s/sessions/%s/execute", t->base, t->sid);
    json_object *body = program_body(t->lang, nout, nerr, !use_accept);
    const char *hdrs[] = {"Accept: text/event-stream", NULL};
    int rc = sgsse_post(url, t->token, json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN),
                        use_accept ? hdrs : NULL, 120, r);
    json_object_put(body);
    SG_CHECK(rc == 0 && r->status == 200 && strncmp(r->ctype, "text/event-stream", 17) == 0, NULL,
             "streamed %s run of %zu bytes: curl \"%s\", HTTP %ld, %s", t->lang, nout, r->error, r->status, r->ctype);
    SG_CHECK(!r->oom && !r->unterminated && r->nev >= 1, NULL, "a whole event stream (%zu events)", r->nev);
}

static void compare_one(const target_t *t, size_t nout, size_t nerr, int use_accept)
{
    char how[160];
    snprintf(how, sizeof(how), "%s via %s, stdout %zu bytes, stderr %zu bytes, %s", t->lang,
             t->token != NULL ? "the gateway" : "the proxy", nout, nerr, use_accept ? "Accept" : "\"stream\"");
    json_object *buf = run_buffered(t, nout, nerr);
    sgsse_result_t r;
    run_streamed(t, nout, nerr, use_accept, &r);

    const sgsse_event_t *last = &r.ev[r.nev - 1];
    SG_CHECK(strcmp(last->name, "result") == 0, NULL, "%s: the stream ends with %s, not result", how, last->name);
    for (size_t i = 0; i + 1 < r.nev; i++)
        SG_CHECK(strcmp(r.ev[i].name, "stdout") == 0 || strcmp(r.ev[i].name, "stderr") == 0, NULL,
                 "%s: event %zu is %s", how, i, r.ev[i].name);
    json_object *res = json_tokener_parse(last->data);
    SG_CHECK(res != NULL, NULL, "%s: the result event is not JSON: %.200s", how, last->data);
    SG_CHECK(strcmp(SG_STR(res, "stdout"), "") == 0 && strcmp(SG_STR(res, "stderr"), "") == 0, res,
             "%s: the result event's stdout and stderr are empty (they were streamed)", how);
    /* a run stopped at the output limit is killed wherever it got to: its
     * exit status is the kill's, not the program's */
    SG_CHECK(strcmp(SG_STR(res, "reason"), SG_STR(buf, "reason")) == 0 &&
                 SG_BOOL(res, "truncated") == SG_BOOL(buf, "truncated") &&
                 (nout > OUTPUT_LIMIT || SG_INT(res, "exit_code") == SG_INT(buf, "exit_code")),
             res, "%s: the streamed result agrees with the buffered one", how);

    char *sout, *serr;
    size_t lout, lerr;
    SG_CHECK(sgsse_concat(&r, "stdout", &sout, &lout) == 0 && sgsse_concat(&r, "stderr", &serr, &lerr) == 0, NULL,
             "%s: every output event is {\"data\": string}", how);
    json_object *bo, *be;
    json_object_object_get_ex(buf, "stdout", &bo);
    json_object_object_get_ex(buf, "stderr", &be);
    size_t blout = (size_t)json_object_get_string_len(bo), blerr = (size_t)json_object_get_string_len(be);
    const char *bout = json_object_get_string(bo), *berr = json_object_get_string(be);
    size_t nev = r.nev;
    sgsse_result_free(&r);

    int truncated = nout > OUTPUT_LIMIT;
    size_t first_diff = 0;
    while (first_diff < lout && first_diff < blout && sout[first_diff] == bout[first_diff])
        first_diff++;
    SG_CHECK(lout == blout && first_diff == lout, res,
             "%s: streamed stdout (%zu bytes in %zu events) differs from the buffered one (%zu bytes) at byte %zu", how,
             lout, nev, blout, first_diff);

    /* and both are what the program wrote */
    size_t want_out = truncated ? OUTPUT_LIMIT : nout;
    char *exp = malloc((nout > nerr ? nout : nerr) + 1);
    expected(want_out, 0, exp);
    size_t whole = whole_chars(exp, want_out);
    SG_CHECK(lout >= whole && memcmp(sout, exp, whole) == 0, res, "%s: stdout is not what the program wrote", how);
    SG_CHECK(SG_BOOL(buf, "truncated") == truncated, buf, "%s: truncated", how);
    if (!truncated) {
        SG_CHECK(lerr == blerr && memcmp(serr, berr, lerr) == 0, res,
                 "%s: streamed stderr (%zu bytes) differs from the buffered one (%zu bytes)", how, lerr, blerr);
        expected(nerr, 6, exp);
        whole = whole_chars(exp, nerr);
        SG_CHECK(lerr >= whole && memcmp(serr, exp, whole) == 0, res, "%s: stderr is not what the program wrote", how);
    } else {
        /* the run was stopped at the limit: stderr is where the program had
         * got to, in each run a prefix of what it writes */
        expected(nerr, 6, exp);
        size_t k = lerr;
        if (k >= 3 && memcmp(serr + k - 3, "\xef\xbf\xbd", 3) == 0)
            k -= 3; /* a character the kill cut, sent as U+FFFD */
        SG_CHECK(k <= nerr && memcmp(serr, exp, k) == 0, res,
                 "%s: streamed stderr is not a prefix of what the program wrote", how);
    }
    free(exp);
    free(sout);
    free(serr);
    json_object_put(res);
    json_object_put(buf);
}

static const size_t SIZES[] = {1, 15, 16, 17, 4095, 4096, 65537, 1u << 20, (1u << 20) + 4099};

static void all_sizes(const target_t *t)
{
    for (size_t i = 0; i < sizeof(SIZES) / sizeof(SIZES[0]); i++) {
        size_t nout = SIZES[i], nerr = SIZES[i] > OUTPUT_LIMIT ? OUTPUT_LIMIT / 2 : SIZES[i] / 2 + 1;
        compare_one(t, nout, nerr, (int)(i % 2));
    }
}

static char *proxy_session(const char *lang)
{
    char body[64];
    sgtest_reply_t r;
    pathf(body, sizeof(body), "{\"lang\": \"%s\"}", lang);
    sgtest_call(stack.proxy, "POST", "/sessions", body, &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    char *sid = strdup(SG_STR(o, "session_id"));
    json_object_put(o);
    return sid;
}

static void through_proxy(const char *lang)
{
    char *sid = proxy_session(lang);
    target_t t = {sgtest_proxy_url(stack.proxy), NULL, sid, lang};
    all_sizes(&t);
    sgtest_close_session(stack.proxy, stack.proxy_id, sid, NULL, REMOVAL_S);
    free(sid);
}

static const char *token(void)
{
    if (tenant_token == NULL)
        tenant_token = sggw_new_tenant(sggw_gateway_data_dir(stack.gw), "streaming", NULL);
    return tenant_token;
}

static void through_gateway(const char *lang)
{
    char body[64];
    pathf(body, sizeof(body), "{\"lang\": \"%s\"}", lang);
    char *sid = sggw_create_session(stack.gw, token(), body, NULL);
    target_t t = {sggw_gateway_url(stack.gw), token(), sid, lang};
    all_sizes(&t);
    sggw_delete_session(stack.gw, token(), sid);
    free(sid);
}

SGGW_TEST(test_python_through_proxy)
{
    through_proxy("python");
}

SGGW_TEST(test_javascript_through_proxy)
{
    through_proxy("javascript");
}

SGGW_TEST(test_python_through_gateway)
{
    through_gateway("python");
}

SGGW_TEST(test_javascript_through_gateway)
{
    through_gateway("javascript");
}

/* A megabyte of control characters on each stream, in writes of up to
 * 64 KiB: the largest events there are (6 bytes of JSON per byte), through
 * both hops at once. */
SGGW_TEST(test_control_characters)
{
    unit = CTRL_UNIT;
    char *psid = proxy_session("python");
    target_t tp = {sgtest_proxy_url(stack.proxy), NULL, psid, "python"};
    compare_one(&tp, OUTPUT_LIMIT, OUTPUT_LIMIT, 0);
    sgtest_close_session(stack.proxy, stack.proxy_id, psid, NULL, REMOVAL_S);
    free(psid);
    char *sid = sggw_create_session(stack.gw, token(), "{\"lang\": \"javascript\"}", NULL);
    target_t t = {sggw_gateway_url(stack.gw), token(), sid, "javascript"};
    compare_one(&t, OUTPUT_LIMIT, OUTPUT_LIMIT, 1);
    sggw_delete_session(stack.gw, token(), sid);
    free(sid);
    unit = TEXT_UNIT;
}

/* One-shot runs stream too (a container of their own each). */
SGGW_TEST(test_one_shot)
{
    static const char *const langs[] = {"python", "javascript"};
    static const size_t sizes[] = {17, 65537};
    for (size_t l = 0; l < 2; l++) {
        for (size_t k = 0; k < 2; k++) {
            for (int via_gw = 0; via_gw < 2; via_gw++) {
                json_object *body = program_body(langs[l], sizes[k], sizes[k] / 2, 0);
                json_object_object_add(body, "lang", json_object_new_string(langs[l]));
                const char *js = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
                json_object *buf = via_gw ? sggw_post_result(stack.gw, token(), "/execute", json_object_get(body))
                                          : sgtest_post_result(stack.proxy, "/execute", json_object_get(body), NULL);
                char url[256];
                pathf(url, sizeof(url), "%s/execute",
                      via_gw ? sggw_gateway_url(stack.gw) : sgtest_proxy_url(stack.proxy));
                const char *hdrs[] = {"Accept: text/event-stream", NULL};
                sgsse_result_t r;
                int rc = sgsse_post(url, via_gw ? token() : NULL, js, hdrs, 120, &r);
                json_object_put(body);
                SG_CHECK(rc == 0 && r.status == 200 && strncmp(r.ctype, "text/event-stream", 17) == 0 &&
                             !r.unterminated && r.nev >= 1 && strcmp(r.ev[r.nev - 1].name, "result") == 0,
                         buf, "one-shot %s via the %s: curl \"%s\", HTTP %ld, %s, %zu events", langs[l],
                         via_gw ? "gateway" : "proxy", r.error, r.status, r.ctype, r.nev);
                char *sout, *serr;
                size_t lout, lerr;
                SG_CHECK(sgsse_concat(&r, "stdout", &sout, &lout) == 0 && sgsse_concat(&r, "stderr", &serr, &lerr) == 0,
                         NULL, "output events are {\"data\": string}");
                sgsse_result_free(&r);
                const char *bout = SG_STR(buf, "stdout"), *berr = SG_STR(buf, "stderr");
                SG_CHECK(lout == strlen(bout) && memcmp(sout, bout, lout) == 0 && lerr == strlen(berr) &&
                             memcmp(serr, berr, lerr) == 0,
                         NULL, "one-shot %s via the %s, %zu bytes: streamed output differs from the buffered one",
                         langs[l], via_gw ? "gateway" : "proxy", sizes[k]);
                free(sout);
                free(serr);
                json_object_put(buf);
            }
        }
    }
}

/* After all that, a fresh session still works, streamed and not. */
SGGW_TEST(test_service_still_works)
{
    char *sid = sggw_create_session(stack.gw, token(), "{\"lang\": \"python\"}", NULL);
    json_object *o = sggw_execute(stack.gw, token(), sid, "print('still here')", 0);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "still here\n") == 0, o, "a fresh session answers");
    json_object_put(o);
    target_t t = {sggw_gateway_url(stack.gw), token(), sid, "python"};
    compare_one(&t, 100, 10, 1);
    sggw_delete_session(stack.gw, token(), sid);
    free(sid);
}

int main(void)
{
    return SG_RUN_TESTS("sec_streaming", group_setup, group_teardown, NULL, after_test, test_reader_splits,
                        test_python_through_proxy, test_javascript_through_proxy, test_python_through_gateway,
                        test_javascript_through_gateway, test_control_characters, test_one_shot,
                        test_service_still_works);
}
