/*
 * test_gateway_limits.c — what sandgate-gateway refuses and how it holds up,
 * against a real gateway process (memory state: no Redis), its real SQLite
 * file, a real sandgate-proxy and the real Docker engine: bad input, file,
 * body and header sizes, the tenant's caps, the memory state's limits,
 * /metrics, the event loop staying responsive under load, streaming and
 * the libraries route through the gateway.
 *
 * The same fixture as test_gateway_api.c (gateway_api_suite.h): one proxy
 * and one gateway with SANDGATE_MAX_FILE_BYTES=65536 so the size limits are
 * cheap to reach; the group teardown checks that nothing is left.
 */
#include "gateway_api_suite.h"
#include "sgrun.h"

#include <time.h>

/* ------------------------------------------------------------------------
 * 4. Bad input
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_bad_input)
{
    sggw_auth_t auth;
    char *tok = sggw_new_tenant_auth(&auth, data_dir(), "bad-input");
    char path[256];
    sgtest_reply_t r;
    json_object *o;

    /* malformed JSON */
    const char *broken[] = {"{\"lang\":", "not json", "{\"lang\":\"python\"} trailing", "[1,2]", "\"python\""};
    for (size_t i = 0; i < sizeof(broken) / sizeof(broken[0]); i++) {
        call_hdr("POST", "/sessions", auth.h, broken[i], "application/json", &r);
        if (r.status != 400)
            fprintf(stderr, "body %s:\n", broken[i]);
        SG_TAKE_ERROR(&r, 400, "bad_json");
    }
    call_hdr("POST", "/execute", auth.h, "{\"code\": \"print(1)\"", "application/json", &r);
    SG_TAKE_ERROR(&r, 400, "bad_json");
    /* ill-typed fields */
    call_hdr("POST", "/execute", auth.h, "{\"code\":\"print(1)\",\"timeout\":\"ten\"}", "application/json", &r);
    expect_bad_field(&r, "timeout");
    sgtest_reply_free(&r);
    call_hdr("POST", "/sessions", auth.h, "{\"lang\":7}", "application/json", &r);
    expect_bad_field(&r, "lang");
    sgtest_reply_free(&r);

    /* wrong content type */
    call_hdr("POST", "/sessions", auth.h, "{\"lang\":\"python\"}", "text/plain", &r);
    SG_TAKE_ERROR(&r, 415, NULL);
    call_hdr("POST", "/execute", auth.h, "{\"code\":\"print(1)\"}", "application/x-www-form-urlencoded", &r);
    SG_TAKE_ERROR(&r, 415, NULL);

    /* unknown routes: 404; known paths with a wrong method: 405 with Allow */
    const char *unknown[] = {"/nope", "/sessions/a/b/c/d", "/session", "/executes", "/sessions/x/run"};
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        call_hdr("GET", unknown[i], auth.h, NULL, NULL, &r);
        if (r.status != 404)
            fprintf(stderr, "GET %s:\n", unknown[i]);
        SG_TAKE_ERROR(&r, 404, NULL);
    }
    char nosuch[37];
    random_uuid(nosuch);
    pathf(path, sizeof(path), "/sessions/%s", nosuch);
    call_hdr("GET", path, auth.h, NULL, NULL, &r);
    SG_TAKE_ERROR(&r, 404, NULL);
    call_hdr("GET", "/sessions/not-a-session-id", auth.h, NULL, NULL, &r);
    SG_TAKE_ERROR(&r, 404, NULL);
    struct {
        const char *method, *path;
    } wrong[] = {{"PUT", "/sessions"},
                 {"DELETE", "/execute"},
                 {"GET", "/execute"},
                 {"POST", "/"},
                 {"POST", "/sessions/%s"},
                 {"GET", "/sessions/%s/execute"},
                 {"DELETE", "/sessions/%s/files?path=a"},
                 {"POST", "/metrics"}};
    for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
        pathf(path, sizeof(path), wrong[i].path, nosuch);
        call_hdr(wrong[i].method, path, auth.h, NULL, NULL, &r);
        if (r.status != 405)
            fprintf(stderr, "%s %s:\n", wrong[i].method, path);
        o = SG_EXPECT_ERROR(&r, 405, NULL);
        char *allow = sgtest_reply_header(&r, "Allow");
        SG_CHECK(allow != NULL && *allow != '\0', o, "a 405 must carry Allow");
        free(allow);
        sgtest_reply_free(&r);
        json_object_put(o);
    }

    free(tok);
}

/* A file above the gateway's SANDGATE_MAX_FILE_BYTES is refused with 413
 * (the proxy behind it takes more); one at the cap is accepted. */
SGGW_TEST(test_file_cap)
{
    sggw_auth_t auth;
    char *tok = sggw_new_tenant_auth(&auth, data_dir(), "file-cap");
    char url[512];
    sgtest_reply_t r;
    json_object *o;

    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    size_t n = GW_MAX_FILE_BYTES + 1;
    char *blob = malloc(n);
    memset(blob, 'z', n);
    pathf(url, sizeof(url), "%s/sessions/%s/files?path=at_cap.bin", sggw_gateway_url(stack.gw), sid);
    sggw_http("PUT", url, blob, GW_MAX_FILE_BYTES, "application/octet-stream", auth.h, 0, &r);
    o = SG_EXPECT_JSON(&r, 200);
    SG_CHECK(SG_INT(o, "size") == GW_MAX_FILE_BYTES, o, "size");
    sgtest_reply_free(&r);
    json_object_put(o);
    pathf(url, sizeof(url), "%s/sessions/%s/files?path=above_cap.bin", sggw_gateway_url(stack.gw), sid);
    sggw_http("PUT", url, blob, n, "application/octet-stream", auth.h, 0, &r);
    free(blob);
    if (r.status != 413)
        fprintf(stderr, "a file of SANDGATE_MAX_FILE_BYTES + 1 = %zu bytes through the gateway:\n", n);
    SG_TAKE_ERROR(&r, 413, NULL);
    sggw_session_done(stack.gw, tok, sid);
}

/* Percent-encodes every byte of s onto the end of url. */
static void append_encoded(char *url, size_t cap, const char *s)
{
    size_t n = strlen(url);
    for (; *s != '\0'; s++) {
        SG_CHECK(n + 4 < cap, NULL, "url buffer");
        n += (size_t)snprintf(url + n, cap - n, "%%%02X", (unsigned char)*s);
    }
}

/* A files path the proxy takes (at most 1024 bytes) arrives whole however
 * long its percent-encoded query is: a non-ASCII name of 600 bytes is an
 * 1800-byte query, which the gateway once cut at 1099 bytes (and wrote a
 * file of another name). Past what any valid path needs: 400, nothing cut. */
SGGW_TEST(test_files_long_path)
{
    sggw_auth_t auth;
    char *tok = sggw_new_tenant_auth(&auth, data_dir(), "files-long-path");
    char rel[1200] = "", *url = malloc(8192);
    sgtest_reply_t r;
    json_object *o;
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);

    /* three directories of 100 "é" (200 bytes each, under NAME_MAX), then a file */
    for (int d = 0; d < 3; d++) {
        for (int i = 0; i < 100; i++)
            strcat(rel, "\xc3\xa9");
        strcat(rel, "/");
    }
    strcat(rel, "f.txt");
    pathf(url, 8192, "%s/sessions/%s/files?path=", sggw_gateway_url(stack.gw), sid);
    append_encoded(url, 8192, rel);
    sggw_http("PUT", url, "long name", 9, "application/octet-stream", auth.h, 0, &r);
    o = SG_EXPECT_JSON(&r, 200);
    SG_CHECK(strcmp(SG_STR(o, "path"), rel) == 0, o, "the file written is the one named (%zu bytes)", strlen(rel));
    SG_CHECK(SG_INT(o, "size") == 9, o, "size");
    sgtest_reply_free(&r);
    json_object_put(o);
    sggw_http("GET", url, NULL, 0, NULL, auth.h, 0, &r);
    SG_CHECK(r.status == 200 && r.body_len == 9 && memcmp(r.body, "long name", 9) == 0, NULL,
             "GET of the long name: %ld %.*s", r.status, (int)r.body_len, r.body);
    sgtest_reply_free(&r);

    /* 1100 bytes, every one encoded: longer than any path the proxy takes */
    pathf(url, 8192, "%s/sessions/%s/files?path=", sggw_gateway_url(stack.gw), sid);
    memset(rel, 'a', 1100);
    rel[1100] = '\0';
    append_encoded(url, 8192, rel);
    sggw_http("PUT", url, "x", 1, "application/octet-stream", auth.h, 0, &r);
    SG_TAKE_ERROR(&r, 400, "bad_path");

    /* the session works on */
    pathf(url, 8192, "%s/sessions/%s/files?path=short.txt", sggw_gateway_url(stack.gw), sid);
    sggw_http("PUT", url, "ok", 2, "application/octet-stream", auth.h, 0, &r);
    json_object_put(SG_EXPECT_JSON(&r, 200));
    sgtest_reply_free(&r);
    sggw_delete_session(stack.gw, tok, sid);
    free(sid);
    free(url);
    free(tok);
}

/* A JSON body above SANDGATE_MAX_BODY_BYTES (default 4 MiB): 413, as JSON
 * like every error. */
SGGW_TEST(test_json_body_too_large)
{
    sggw_auth_t auth;
    char *tok = sggw_new_tenant_auth(&auth, data_dir(), "json-too-large");
    char url[512];
    sgtest_reply_t r;
    size_t big = ((size_t)4 << 20) + 4096;
    char *body = malloc(big + 1);
    memset(body, ' ', big);
    memcpy(body, "{\"code\":\"#", 10);
    memset(body + 10, 'x', big - 20);
    memcpy(body + big - 10, "\"}", 2);
    body[big] = '\0';
    pathf(url, sizeof(url), "%s/execute", sggw_gateway_url(stack.gw));
    sggw_http("POST", url, body, big, "application/json", auth.h, 0, &r);
    free(body);
    json_object *o = SG_EXPECT_ERROR(&r, 413, NULL);
    sgtest_reply_free(&r);
    json_object_put(o);
    sggw_call(stack.gw, tok, "GET", "/sessions", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    free(tok);
}

/* Oversized headers get an error status (only the status is asserted:
 * h2o answers such requests itself), and the gateway serves on: 1 MiB (more
 * than h2o reads at all), then 100 KB. */
static void big_header_request(size_t hl, const char *tok, sgtest_reply_t *r)
{
    char auth[128], url[512];
    pathf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
    char *hbig = malloc(hl + 16);
    memcpy(hbig, "X-Filler: ", 10);
    memset(hbig + 10, 'a', hl);
    hbig[10 + hl] = '\0';
    const char *hh[] = {auth, hbig, NULL};
    pathf(url, sizeof(url), "%s/sessions", sggw_gateway_url(stack.gw));
    sggw_http("GET", url, NULL, 0, NULL, hh, 30, r);
    free(hbig);
}

SGGW_TEST(test_oversized_header)
{
    char *tok = sggw_new_tenant(data_dir(), "big-header", NULL);
    sgtest_reply_t r;
    size_t sizes[] = {1 << 20, 100 * 1024};
    for (size_t i = 0; i < 2; i++) {
        big_header_request(sizes[i], tok, &r);
        SG_CHECK(r.status >= 400 && r.status < 500, NULL,
                 "a request with a %zu KiB header must get a 4xx; got HTTP %ld (%s)", sizes[i] >> 10, r.status,
                 r.error);
        sgtest_reply_free(&r);
        sggw_call(stack.gw, tok, "GET", "/sessions", NULL, &r);
        SG_ASSERT_STATUS(&r, 200);
        sgtest_reply_free(&r);
    }
    free(tok);
}

/* Every limit applies on its own: a JSON body above SANDGATE_MAX_BODY_BYTES
 * is refused even when SANDGATE_MAX_FILE_BYTES is larger. */
SGGW_TEST(test_body_cap_own_limit)
{
    const char *env[] = {"SANDGATE_MAX_BODY_BYTES=4096", "SANDGATE_MAX_FILE_BYTES=65536", NULL};
    sggw_opts_t opts = {.proxy_url = stack.proxy_url, .env = env};
    sggw_gateway_t *g2 = stack.extra_gw = sggw_gateway_start(&opts);
    SG_CHECK(g2 != NULL, NULL, "cannot start a second gateway");
    char *tok = sggw_new_tenant(sggw_gateway_data_dir(g2), "body-cap", NULL);
    sgtest_reply_t r;

    size_t n = 8192;
    char *body = malloc(n + 1);
    memset(body, 'x', n);
    memcpy(body, "{\"code\":\"#", 10);
    memcpy(body + n - 2, "\"}", 2);
    body[n] = '\0';
    sggw_call(g2, tok, "POST", "/execute", body, &r);
    if (r.status != 413)
        fprintf(stderr, "an 8 KiB JSON body with SANDGATE_MAX_BODY_BYTES=4096:\n");
    json_object *o = SG_EXPECT_ERROR(&r, 413, NULL);
    sgtest_reply_free(&r);
    json_object_put(o);
    free(body);

    sggw_call(g2, tok, "GET", "/sessions", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    SG_CHECK(sggw_gateway_alive(g2), NULL, "the gateway died");
    free(tok);
    sggw_stack_stop_extra(&stack, "the second gateway");
}

/* ------------------------------------------------------------------------
 * 5. The tenant's caps
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_caps)
{
    const char *caps[] = {"max_timeout=5",        "max_memory_mb=256", "max_cpus=1",
                          "allowed_langs=python", "network_allowed=0", NULL};
    char *tok = sggw_new_tenant(data_dir(), "capped", caps);
    sgtest_reply_t r;
    char path[256];

    /* over each cap: 400 naming the field */
    static const struct {
        const char *path, *body, *field;
    } over[] = {
        {"/sessions", "{\"lang\":\"python\",\"timeout\":10}", "timeout"},
        {"/sessions", "{\"lang\":\"python\",\"memory_mb\":512}", "memory_mb"},
        {"/sessions", "{\"lang\":\"python\",\"cpus\":2}", "cpus"},
        {"/sessions", "{\"lang\":\"javascript\"}", "lang"},
        {"/sessions", "{\"lang\":\"python\",\"network\":true}", "network"},
        {"/execute", "{\"code\":\"console.log(1)\",\"lang\":\"javascript\"}", "lang"},
        {"/execute", "{\"code\":\"print(1)\",\"timeout\":10}", "timeout"},
    };
    for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++) {
        sggw_call(stack.gw, tok, "POST", over[i].path, over[i].body, &r);
        expect_bad_field(&r, over[i].field);
        sgtest_reply_free(&r);
    }
    json_object *l = sggw_list_sessions(stack.gw, tok);
    SG_CHECK(json_object_array_length(SG_ARR(l, "sessions")) == 0, l, "a refused create left a session");
    json_object_put(l);

    /* at the caps: accepted, and the container really has them */
    json_object *created = NULL;
    char *sid = sggw_create_session(stack.gw, tok, "{\"lang\":\"python\",\"timeout\":5,\"memory_mb\":256,\"cpus\":1}",
                                    &created);
    json_object_put(created);
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    sggw_call(stack.gw, tok, "POST", path, "{\"code\":\"print(1)\",\"timeout\":10}", &r);
    expect_bad_field(&r, "timeout");
    sgtest_reply_free(&r);
    json_object *o = sggw_execute(stack.gw, tok, sid, "print('ok')", 5);
    sgtest_expect_stdout(o, "ok\n");
    json_object_put(o);
    char *cid = sgtest_docker_session_container(stack.proxy_id, sid);
    SG_CHECK(cid != NULL, NULL, "no container for session %s", sid);
    json_object *c = sgtest_docker_inspect(cid, NULL);
    SG_CHECK(c != NULL, NULL, "cannot inspect %s", cid);
    json_object *mem = sgtest_jpath(c, "HostConfig.Memory");
    SG_CHECK(mem != NULL && json_object_get_int64(mem) == 256LL << 20, sgtest_jpath(c, "HostConfig"),
             "the container must have 256 MiB");
    SG_CHECK(strcmp(json_object_get_string(sgtest_jpath(c, "HostConfig.NetworkMode")), "none") == 0,
             sgtest_jpath(c, "HostConfig"), "no network");
    json_object_put(c);
    free(cid);
    sggw_delete_session(stack.gw, tok, sid);
    free(sid);

    /* without fields, the defaults are capped by the tenant's caps */
    sid = sggw_create_session(stack.gw, tok, "{\"lang\":\"python\"}", &created);
    json_object *lim = SG_OBJ(created, "limits");
    SG_CHECK(SG_INT(lim, "memory_mb") <= 256, created, "default memory must be capped at 256 MiB");
    SG_CHECK(SG_DBL(lim, "timeout") <= 5, created, "default timeout must be capped at 5 s");
    SG_CHECK(SG_DBL(lim, "cpus") <= 1, created, "default cpus must be capped at 1");
    json_object_put(created);
    /* a run longer than the cap is cut at the cap */
    double t0 = sgtest_now();
    o = sggw_execute(stack.gw, tok, sid, "import time\ntime.sleep(30)", 0);
    double took = sgtest_now() - t0;
    SG_CHECK(SG_BOOL(o, "timed_out"), o, "a 30 s sleep must time out at the tenant's 5 s cap");
    SG_CHECK(took < 5 + 10, o, "took %.1f s", took);
    json_object_put(o);
    sggw_session_done(stack.gw, tok, sid);
}

/* ------------------------------------------------------------------------
 * 11. Limits without Redis (this gateway keeps its state in memory)
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_memory_state_limits)
{
    const char *q[] = {"rate_per_min=60", "burst=3", "max_sessions=2", NULL};
    char *tok = sggw_new_tenant(data_dir(), "mem-limits", q);
    char url[256];
    enum { N = 10 };
    sggw_par_req_t reqs[N];

    snprintf(url, sizeof(url), "%s/sessions", sggw_gateway_url(stack.gw));
    sggw_parallel_get(reqs, N, url, tok);
    int ok = 0, limited = 0;
    sgtest_span_t span = sgtest_batch_span(reqs, N);
    for (int i = 0; i < N; i++) {
        ok += reqs[i].reply.status == 200;
        limited += reqs[i].reply.status == 429;
    }
    SG_CHECK(span.last_end - span.first_start < 1.0, NULL, "the batch took %.2f s: a token came back meanwhile",
             span.last_end - span.first_start);
    SG_CHECK(ok == 3 && limited == 7, NULL, "burst 3: expected 3 x 200 and 7 x 429, got %d and %d", ok, limited);
    for (int i = 0; i < N; i++)
        sgtest_reply_free(&reqs[i].reply);

    /* the session cap, with a fresh bucket */
    const char *q2[] = {"rate_per_min=600", "burst=60", NULL};
    sggw_tenant_set(data_dir(), "mem-limits", q2);
    char body[] = "{\"lang\":\"python\"}";
    enum { M = 5 };
    sggw_par_req_t creates[M];
    sggw_par_posts(creates, M, url, tok, body, 60);
    /* the rate bucket of burst 3 may still be empty: wait until a request passes */
    sggw_wait_allowed(stack.gw, tok, 10, 0); /* the rate limit lets a request through */
    SG_CHECK(sggw_parallel(creates, M) == 0, NULL, "cannot start threads");
    char *sids[M];
    int made = 0, refused = 0;
    for (int i = 0; i < M; i++) {
        if (creates[i].reply.status == 200) {
            json_object *o = SG_JSON(&creates[i].reply);
            sids[made++] = strdup(SG_STR(o, "session_id"));
            json_object_put(o);
        } else if (creates[i].reply.status == 429) {
            json_object *o = SG_EXPECT_ERROR(&creates[i].reply, 429, NULL);
            json_object_put(o);
            refused++;
        } else {
            SG_ASSERT_STATUS(&creates[i].reply, 200);
        }
        sgtest_reply_free(&creates[i].reply);
    }
    SG_CHECK(made == 2 && refused == 3, NULL, "max_sessions 2: expected 2 created and 3 x 429, got %d and %d", made,
             refused);
    sggw_delete_session(stack.gw, tok, sids[0]);
    char *again = sggw_create_session(stack.gw, tok, NULL, NULL);
    sggw_delete_session(stack.gw, tok, again);
    free(again);
    for (int i = 0; i < made; i++) {
        if (i > 0)
            sggw_delete_session(stack.gw, tok, sids[i]);
        free(sids[i]);
    }
    free(tok);
}

/* ------------------------------------------------------------------------
 * 14. /metrics, and 502 when the proxy is gone
 * ------------------------------------------------------------------------ */

static char *get_metrics(sggw_gateway_t *g)
{
    sgtest_reply_t r;
    sggw_call(g, NULL, "GET", "/metrics", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    char *ct = sgtest_reply_header(&r, "Content-Type");
    SG_CHECK(ct != NULL && strncmp(ct, "text/plain", 10) == 0, NULL, "/metrics must be text/plain, not %s",
             ct ? ct : "none");
    free(ct);
    char *text = r.body;
    r.body = NULL;
    sgtest_reply_free(&r);
    return text;
}

static void expect_metric(const char *text, const char *name, const char *labels, double want)
{
    double got = sggw_metric(text, name, labels);
    if (got != want) {
        fprintf(stderr, "---- /metrics ----\n%s----\n", text);
        SG_FAIL(NULL, "%s{%s} is %g, expected %g", name, labels, got, want);
    }
}

SGGW_TEST(test_metrics)
{
    /* a proxy and a gateway of its own: counts are exact, and the proxy can go */
    double t0 = (double)time(NULL);
    char *pid2 = extra_proxy_id = sgtest_new_proxy_id();
    const char *penv[] = {"SANDGATE_POOL_SIZE=0", NULL};
    sgtest_proxy_t *p2 = extra_proxy = sgtest_proxy_start(pid2, penv);
    SG_CHECK(p2 != NULL, NULL, "cannot start a second proxy");
    sggw_opts_t opts = {.proxy_url = sgtest_proxy_url(p2)};
    sggw_gateway_t *g2 = stack.extra_gw = sggw_gateway_start(&opts);
    SG_CHECK(g2 != NULL, NULL, "cannot start a second gateway");
    const char *q[] = {"max_sessions=1", NULL};
    char *tok = sggw_new_tenant(sggw_gateway_data_dir(g2), "metrics", q);
    const char *qr[] = {"rate_per_min=1", "burst=1", NULL};
    char *slow = sggw_new_tenant(sggw_gateway_data_dir(g2), "metrics-slow", qr);
    sgtest_reply_t r;

    char *text = get_metrics(g2);
    double cpu0 = sggw_check_metrics(text, t0);
    SG_CHECK(strstr(text, "# TYPE sandgate_requests_total counter") != NULL, NULL, "TYPE line");
    SG_CHECK(strstr(text, "# TYPE sandgate_execution_duration_seconds histogram") != NULL, NULL, "TYPE line");
    expect_metric(text, "sandgate_execution_duration_seconds_count", "", 0);
    free(text);

    json_object *o = ephemeral(g2, tok, "{\"code\":\"print(1)\",\"lang\":\"python\"}");
    sgtest_expect_success(o);
    /* the runtime the proxy ran it on labels its count */
    char ran_on[64];
    snprintf(ran_on, sizeof(ran_on), "%s", SG_STR(o, "runtime"));
    json_object_put(o);
    o = ephemeral(g2, tok, "{\"code\":\"import sys; sys.exit(3)\",\"lang\":\"python\"}");
    SG_CHECK(SG_INT(o, "exit_code") == 3, o, "exit code 3");
    json_object_put(o);
    sggw_call(g2, slow, "GET", "/sessions", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    SGGW_CALL_ERROR(g2, slow, "GET", "/sessions", NULL, 429, NULL);

    /* the live-session gauge follows (it is refreshed by the reaper) */
    char *sid = sggw_create_session(g2, tok, NULL, NULL);
    double deadline = sgtest_now() + 5;
    for (;;) {
        text = get_metrics(g2);
        double live = sggw_metric(text, "sandgate_live_sessions", "");
        free(text);
        if (live == 1)
            break;
        SG_CHECK(sgtest_now() < deadline, NULL, "sandgate_live_sessions did not become 1 (is %g)", live);
        usleep(100000);
    }
    sggw_delete_session(g2, tok, sid);
    free(sid);

    /* the proxy's own, read by the same parser */
    char url[512];
    snprintf(url, sizeof(url), "%s/metrics", sgtest_proxy_url(p2));
    SG_CHECK(sgtest_http("GET", url, NULL, 0, NULL, 0, &r) == 0 && r.status == 200, NULL, "GET %s: %ld", url, r.status);
    sggw_check_metrics(r.body, t0);
    sgtest_reply_free(&r);

    /* the proxy goes away */
    extra_proxy = NULL;
    SG_CHECK(sgtest_proxy_stop(p2) == 0, NULL, "the second proxy did not stop cleanly");
    SGGW_CALL_ERROR(g2, tok, "POST", "/execute", "{\"code\":\"print(1)\",\"lang\":\"python\"}", 502,
                    "proxy_unavailable");
    /* a failed create gives its slot back: max_sessions 1, twice 502, not 429 */
    for (int i = 0; i < 2; i++) {
        SGGW_CALL_ERROR(g2, tok, "POST", "/sessions", "{\"lang\":\"python\"}", 502, "proxy_unavailable");
    }

    text = get_metrics(g2);
    expect_metric(text, "sandgate_requests_total", "route=\"ephemeral_execute\",status=\"200\"", 2);
    expect_metric(text, "sandgate_requests_total", "route=\"ephemeral_execute\",status=\"502\"", 1);
    expect_metric(text, "sandgate_requests_total", "route=\"create_session\",status=\"502\"", 2);
    expect_metric(text, "sandgate_requests_total", "route=\"list_sessions\",status=\"429\"", 1);
    char labels[128];
    snprintf(labels, sizeof(labels), "lang=\"python\",outcome=\"success\",runtime=\"%s\"", ran_on);
    expect_metric(text, "sandgate_executions_total", labels, 1);
    snprintf(labels, sizeof(labels), "lang=\"python\",outcome=\"error\",runtime=\"%s\"", ran_on);
    expect_metric(text, "sandgate_executions_total", labels, 1);
    expect_metric(text, "sandgate_execution_duration_seconds_bucket", "le=\"+Inf\"", 2);
    expect_metric(text, "sandgate_execution_duration_seconds_count", "", 2);
    expect_metric(text, "sandgate_quota_rejections_total", "limit=\"rate\"", 1);
    expect_metric(text, "sandgate_upstream_errors_total", "kind=\"unreachable\"", 3);
    SG_CHECK(sggw_metric(text, "sandgate_live_sessions", "") >= 0, NULL, "sandgate_live_sessions is missing");
    /* the requests above took the gateway's CPU */
    double cpu1 = sggw_check_metrics(text, t0);
    SG_CHECK(cpu1 > cpu0, NULL, "process_cpu_seconds_total went from %g to %g", cpu0, cpu1);
    free(text);

    free(tok);
    free(slow);
    sggw_stack_stop_extra(&stack, "the second gateway");
    int left = sgtest_docker_count(pid2);
    SG_CHECK(left == 0, NULL, "%d container(s) of %s remain", left, pid2); /* after_test removes them */
}

/* ------------------------------------------------------------------------
 * 13. The event loop answers at once while executions are in flight
 * ------------------------------------------------------------------------ */

/* GET path with token: a status other than want is kept in *bad, the
 * slowest answer in *worst. */
static void probe(const char *token, const char *path, long want, long *bad, double *worst)
{
    sgtest_reply_t r;
    sggw_call(stack.gw, token, "GET", path, NULL, &r);
    if (r.status != want)
        *bad = r.status;
    if (r.seconds > *worst)
        *worst = r.seconds;
    sgtest_reply_free(&r);
}

SGGW_TEST(test_loop_health)
{
    enum { NS = 10, NX = 20, PROBES = 10 };
    /* 20 executions in flight at once: above the default max_concurrent_execs */
    const char *q[] = {"max_sessions=12", "max_concurrent_execs=20", NULL};
    char *tok = sggw_new_tenant(data_dir(), "health", q);
    char url[256], xurl[NS][256];
    sggw_par_req_t creates[NS], execs[NX];
    const char cbody[] = "{\"lang\":\"python\"}";
    const char xbody[] = "{\"code\":\"import time\\ntime.sleep(2)\\nprint('ok')\",\"timeout\":20}";
    char *sids[NS];

    snprintf(url, sizeof(url), "%s/sessions", sggw_gateway_url(stack.gw));
    sggw_par_posts(creates, NS, url, tok, cbody, 120);
    SG_CHECK(sggw_parallel(creates, NS) == 0, NULL, "cannot start threads");
    for (int i = 0; i < NS; i++) {
        sids[i] = SG_TAKE_ID(SG_TAKE_JSON(&creates[i].reply, 200), "session_id", NULL);
        snprintf(xurl[i], sizeof(xurl[i]), "%s/sessions/%s/execute", sggw_gateway_url(stack.gw), sids[i]);
    }
    /* every kernel started first, as the pool's are: ten cold starts at once
     * (~750 ms of CPU each under runsc) would be what the probes below
     * measure, not the loop */
    const char warm[] = "{\"code\":\"print('ok')\",\"timeout\":60}";
    for (int i = 0; i < NS; i++)
        execs[i] = sggw_par_post(xurl[i], tok, warm, 120);
    SG_CHECK(sggw_parallel(execs, NS) == 0, NULL, "cannot start threads");
    sgtest_batch_expect_ok(execs, NS, sggw_check_result, "ok\n");

    for (int i = 0; i < NX; i++)
        execs[i] = sggw_par_post(xurl[i % NS], tok, xbody, 60);
    sggw_batch_t *b = sggw_batch_start(execs, NX);
    SG_CHECK(b != NULL, NULL, "cannot start threads");
    usleep(300000); /* let them reach the gateway; checked below: every probe ends before any execute */
    double worst_root = 0, worst_401 = 0, probes_end = 0;
    long bad_root = 0, bad_401 = 0;
    char *fake = sggw_fake_token(NULL);
    for (int i = 0; i < PROBES; i++) {
        probe(NULL, "/", 200, &bad_root, &worst_root);
        probe(fake, "/sessions", 401, &bad_401, &worst_401);
        probes_end = sgtest_now();
    }
    free(fake);
    sggw_batch_join(b);

    sgtest_span_t span = sgtest_batch_span(execs, NX);
    sgtest_batch_expect_ok(execs, NX, sggw_check_result, "ok\n");
    SG_CHECK(bad_root == 0, NULL, "GET / answered %ld under load", bad_root);
    SG_CHECK(bad_401 == 0, NULL, "a bad token got %ld under load, not 401", bad_401);
    SG_CHECK(probes_end < span.first_end, NULL, "the probes did not all run while the executions were in flight");
    SG_CHECK(worst_root < FAST_S, NULL, "GET / took %.3f s with %d executions in flight", worst_root, NX);
    SG_CHECK(worst_401 < FAST_S, NULL, "a 401 took %.3f s with %d executions in flight", worst_401, NX);

    for (int i = 0; i < NS; i++) {
        sggw_delete_session(stack.gw, tok, sids[i]);
        free(sids[i]);
    }
    free(tok);
}

/* ------------------------------------------------------------------------
 * Streaming through the gateway: Server-Sent Events as the code prints,
 * passed through as they come, and the execution still recorded.
 * ------------------------------------------------------------------------ */

typedef struct {
    char *data;
    size_t len;
    double first_stdout; /* when the first stdout event arrived, s since start */
    double t0;
} sse_read_t;

static size_t on_sse(char *p, size_t size, size_t n, void *arg)
{
    sse_read_t *rd = arg;
    size_t len = size * n;
    char *d = realloc(rd->data, rd->len + len + 1);
    if (d == NULL)
        return 0;
    memcpy(d + rd->len, p, len);
    rd->data = d;
    rd->len += len;
    d[rd->len] = '\0';
    if (rd->first_stdout == 0 && strstr(d, "event: stdout") != NULL)
        rd->first_stdout = sgtest_now() - rd->t0;
    return len;
}

SGGW_TEST(test_streaming_through_gateway)
{
    char *tok = sggw_new_tenant(data_dir(), "streaming", NULL);
    char *sid = sggw_create_session(stack.gw, tok, "{\"lang\": \"python\"}", NULL);
    char url[512], auth[160];
    pathf(url, sizeof(url), "%s/sessions/%s/execute", sggw_gateway_url(stack.gw), sid);
    pathf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
    const char *body =
        "{\"code\": \"import time\\nfor i in range(3):\\n    print(i, flush=True)\\n    time.sleep(0.5)\"}";

    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    h = curl_slist_append(h, auth);
    h = curl_slist_append(h, "Content-Type: application/json");
    h = curl_slist_append(h, "Accept: text/event-stream");
    sse_read_t rd = {0};
    rd.t0 = sgtest_now();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_sse);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &rd);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    CURLcode rc = curl_easy_perform(c);
    double total = sgtest_now() - rd.t0;
    long status = 0;
    char *ctype = NULL;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ctype);
    SG_CHECK(rc == CURLE_OK && status == 200, NULL, "streamed execute: curl %d, status %ld", (int)rc, status);
    SG_CHECK(ctype != NULL && strncmp(ctype, "text/event-stream", 17) == 0, NULL, "content type %s",
             ctype ? ctype : "(none)");
    curl_slist_free_all(h);
    curl_easy_cleanup(c);

    /* the first line came while the code still ran: before the last 0.5 s sleeps */
    SG_CHECK(rd.first_stdout > 0 && total - rd.first_stdout > 0.8, NULL,
             "first stdout event at %.2f s of %.2f s: not passed through as it came", rd.first_stdout, total);
    char *res = strstr(rd.data, "event: result\ndata: ");
    SG_CHECK(res != NULL, NULL, "no result event in: %s", rd.data);
    json_object *o = json_tokener_parse(res + strlen("event: result\ndata: "));
    SG_CHECK(o != NULL && SG_INT(o, "exit_code") == 0 && SG_BOOL(o, "success"), o, "the result event");
    json_object_put(o);
    size_t n0 = 0;
    for (const char *q = rd.data; (q = strstr(q, "event: stdout")) != NULL; q++)
        n0++;
    SG_CHECK(n0 == 3, NULL, "%zu stdout events in: %s", n0, rd.data);
    free(rd.data);

    /* recorded like any execution */
    sgtest_reply_t r;
    sggw_admin_call(stack.gw, "GET", "/admin/usage?tenant=streaming", NULL, &r);
    o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    SG_CHECK(SG_INT(o, "executions") == 1, o, "one usage row for the streamed execution");
    json_object_put(o);
    sggw_session_done(stack.gw, tok, sid);
}

/* POST /sessions/{id}/libraries through the gateway: the proxy's answer
 * passed back (this proxy has installs off: success false, with a reason),
 * a refused name is the proxy's 400, another tenant's session a 404. */
SGGW_TEST(test_libraries_route)
{
    char *tok = sggw_new_tenant(data_dir(), "libs-a", NULL), *other = sggw_new_tenant(data_dir(), "libs-b", NULL);
    char *sid = sggw_create_session(stack.gw, tok, "{\"lang\": \"python\"}", NULL);
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s/libraries", sid);

    json_object *o =
        SGGW_CALL_JSON(stack.gw, tok, "POST", path, "{\"package\": \"sgtest-nowhere\", \"version\": \"1.0\"}", 200);
    SG_CHECK(!SG_BOOL(o, "success"), o, "success");
    SG_CHECK(strstr(SG_STR(o, "message"), "sgtest-nowhere") != NULL, o, "the message names the package");
    (void)SG_DBL(o, "installation_time");
    json_object_put(o);

    SGGW_CALL_ERROR(stack.gw, tok, "POST", path, "{\"package\": \"os\"}", 400, "bad_library");
    SGGW_CALL_ERROR(stack.gw, tok, "POST", path, "not json", 400, "bad_json");
    SGGW_CALL_ERROR(stack.gw, other, "POST", path, "{\"package\": \"requests\"}", 404, "no_such_session");
    SGGW_CALL_ERROR(stack.gw, tok, "GET", path, NULL, 405, NULL);

    sggw_session_done(stack.gw, tok, sid);
    free(other);
}

int main(void)
{
    return SG_RUN_TESTS("gateway_limits", group_setup, sggw_stack_group_teardown, NULL, after_test, test_bad_input,
                        test_file_cap, test_files_long_path, test_json_body_too_large, test_oversized_header,
                        test_body_cap_own_limit, test_caps, test_memory_state_limits, test_metrics, test_loop_health,
                        test_streaming_through_gateway, test_libraries_route);
}
