/*
 * test_proxy_api.c — sandgate-proxy's HTTP API (docs/proxy-api.md) against
 * a real proxy process, the real Docker engine and the real sandbox images:
 * the seed's README, languages, details, commands, errors, timeouts,
 * files, concurrency. Output caps and the sandbox's hardening:
 * test_proxy_limits.c.
 *
 * One proxy serves the whole group (proxy_api_suite.h; test_proxy_pool.c
 * covers the pool). Every test closes the sessions it opens; the group
 * teardown checks that nothing is left and force-removes whatever a failed
 * test leaked.
 */
#include "proxy_api_suite.h"
#include "sgrun.h"

/* ------------------------------------------------------------------------
 * Seed 003's README, in order
 * ------------------------------------------------------------------------ */

static void test_seed_readme_examples(void **state)
{
    /* Health check. */
    sgtest_reply_t r;
    sgtest_call(suite.proxy, "GET", "/", NULL, &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    SG_CHECK(json_object_object_length(o) == 1 && strcmp(SG_STR(o, "status"), "ok") == 0, o,
             "GET / must be exactly {\"status\":\"ok\"}");
    json_object_put(o);
    sgtest_reply_free(&r);

    /* 1. Create a session ({"lang":"python"} exactly as the README sends it). */
    sgtest_call(suite.proxy, "POST", "/sessions", "{\"lang\": \"python\"}", &r);
    o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    SG_CHECK(strcmp(SG_STR(o, "status"), "active") == 0, o, "status");
    char *sid = strdup(SG_STR(o, "session_id"));
    SG_CHECK(*sid != '\0', o, "empty session_id");
    json_object_put(o);
    char *cid = session_container(sid);

    /* 2. Execute code in the session. */
    const char *numpy[] = {"numpy", NULL};
    sgtest_expect_ok(run_code_t(sid, "import numpy as np\nprint(np.array([1,2,3]).mean())", numpy, 0, NULL), "2.0\n");

    /* 3. More code in the same session (state persistence is a later issue). */
    o = run_code(sid, "print(\"Previous imports are still available\")");
    sgtest_expect_stdout(o, "Previous imports are still available\n");
    SG_CHECK(SG_INT(o, "exit_code") == 0, o, "exit_code");
    json_object_put(o);

    /* Ephemeral execution; its container goes right after the reply. */
    o = run_ephemeral("python", "import sys\nprint(f\"Python {sys.version}\")", NULL);
    SG_CHECK(strncmp(SG_STR(o, "stdout"), "Python 3.", 9) == 0, o, "stdout");
    sgtest_expect_success(o);
    json_object_put(o);

    /* With error handling. */
    o = run_ephemeral("python", "print(undefined_variable)", NULL);
    SG_CHECK(SG_INT(o, "exit_code") == 1, o, "exit_code");
    SG_CHECK(strstr(SG_STR(o, "stderr"), "NameError: name 'undefined_variable' is not defined") != NULL, o, "stderr");
    SG_CHECK(!SG_BOOL(o, "success"), o, "success");
    sgtest_expect_stdout(o, "");
    json_object_put(o);

    /* List sessions. */
    SG_CHECK(listed(sid), NULL, "session %s is not listed", sid);

    /* 4. Clean up. */
    close_session(sid);
    SG_CHECK(!listed(sid), NULL, "closed session %s is still listed", sid);
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s", sid);
    SG_CALL_ERROR(suite.proxy, "GET", path, NULL, 404, NULL);
    SG_CHECK(sgtest_docker_exists(cid) == 0, NULL, "container %s of closed session remains", cid);
    free(cid);
    SG_CHECK(sglibs_count_labelled(suite.proxy_id, "sandgate.kind=session") == 0, NULL, "session containers remain");
    expect_no_ephemeral_left();
    free(sid);
}

/* ------------------------------------------------------------------------
 * Languages, details, commands
 * ------------------------------------------------------------------------ */

static void test_javascript(void **state)
{
    char *sid = create_session("javascript");
    sgtest_expect_ok(run_code(sid, "console.log(1+1)"), "2\n");
    json_object *d = session_details(sid);
    SG_CHECK(strcmp(SG_STR(d, "lang"), "javascript") == 0, d, "lang");
    SG_CHECK(strcmp(SG_STR(d, "image"), sgtest_image("javascript")) == 0, d, "image");
    json_object_put(d);
    session_done(sid);

    sgtest_expect_ok(run_ephemeral("javascript", "console.log('js ' + [1, 2, 3].length)", NULL), "js 3\n");
    expect_no_ephemeral_left();
}

static void test_session_details(void **state)
{
    json_object *created = NULL;
    json_object *extra = json_object_new_object();
    json_object_object_add(extra, "timeout", json_object_new_int(7));
    json_object_object_add(extra, "memory_mb", json_object_new_int(256));
    char *sid = sgtest_create_session(suite.proxy, "python", extra, &created);
    time_t now = time(NULL);

    /* The create reply carries the contract's fields too. */
    SG_CHECK(strcmp(SG_STR(created, "lang"), "python") == 0, created, "lang");
    SG_CHECK(strcmp(SG_STR(created, "image"), sgtest_image("python")) == 0, created, "image");
    SG_STR(created, "created_at");
    SG_OBJ(created, "limits");
    json_object_put(created);

    json_object *d = session_details(sid);
    SG_CHECK(strcmp(SG_STR(d, "session_id"), sid) == 0, d, "session_id");
    SG_CHECK(strcmp(SG_STR(d, "status"), "active") == 0, d, "status");
    SG_CHECK(strcmp(SG_STR(d, "lang"), "python") == 0, d, "lang");
    SG_CHECK(strcmp(SG_STR(d, "image"), sgtest_image("python")) == 0, d, "image");
    time_t created_at, last_used;
    SG_CHECK(parse_rfc3339(SG_STR(d, "created_at"), &created_at), d, "created_at not RFC 3339");
    SG_CHECK(created_at > now - 300 && created_at <= now + 5, d, "created_at is not about now (%ld)", (long)now);
    SG_CHECK(parse_rfc3339(SG_STR(d, "last_used_at"), &last_used), d, "last_used_at not RFC 3339");
    SG_CHECK(SG_INT(d, "executions") == 0, d, "a new session has executions 0");
    SG_CHECK(!SG_BOOL(d, "keep_template"), d, "keep_template");
    json_object *lim = SG_OBJ(d, "limits");
    SG_CHECK(SG_DBL(lim, "timeout") == 7.0, d, "limits.timeout from the create request");
    SG_CHECK(SG_INT(lim, "memory_mb") == 256, d, "limits.memory_mb from the create request");
    SG_CHECK(SG_DBL(lim, "cpus") > 0, d, "limits.cpus");
    SG_CHECK(!SG_BOOL(lim, "network"), d, "limits.network defaults to false");
    SG_CHECK(SG_INT(lim, "pids") > 0, d, "limits.pids");
    SG_CHECK(SG_INT(lim, "output_bytes") == OUTPUT_LIMIT, d, "limits.output_bytes must follow SANDGATE_OUTPUT_LIMIT=%d",
             OUTPUT_LIMIT);

    /* The image the details name is the image the container runs. */
    json_object *c = inspect_session(sid);
    json_object *img = sgtest_jpath(c, "Config.Image");
    SG_CHECK(img != NULL && strcmp(json_object_get_string(img), SG_STR(d, "image")) == 0, c,
             "container image differs from the session's");
    json_object_put(c);
    json_object_put(d);

    for (int i = 1; i <= 2; i++) {
        json_object *o = run_code(sid, "print('x')");
        sgtest_expect_success(o);
        json_object_put(o);
        d = session_details(sid);
        SG_CHECK(SG_INT(d, "executions") == i, d, "executions after %d execute(s)", i);
        SG_CHECK(parse_rfc3339(SG_STR(d, "last_used_at"), &last_used) && last_used >= created_at, d, "last_used_at");
        json_object_put(d);
    }
    session_done(sid);
}

static void test_command_non_root(void **state)
{
    char *sid = create_session("python");
    sgtest_expect_ok(run_cmd(sid, "echo hello && id -u"), "hello\n1000\n");
    /* A failing command reports its status. */
    json_object *o = run_cmd(sid, "echo oops >&2; exit 3");
    SG_CHECK(SG_INT(o, "exit_code") == 3, o, "exit_code");
    SG_CHECK(strcmp(SG_STR(o, "stderr"), "oops\n") == 0, o, "stderr");
    SG_CHECK(!SG_BOOL(o, "success"), o, "success");
    json_object_put(o);
    session_done(sid);
}

static void test_unknown_library(void **state)
{
    const char *libs[] = {"sgtest_no_such_package_xyz", NULL};
    json_object *o = run_ephemeral("python", "print('never')", libs);
    SG_CHECK(strcmp(SG_STR(o, "reason"), "setup_failed") == 0, o, "reason");
    SG_CHECK(strcmp(SG_STR(o, "stage"), "libraries") == 0, o, "stage");
    SG_CHECK(strstr(SG_STR(o, "stderr"), "sgtest_no_such_package_xyz") != NULL, o, "stderr names the missing library");
    SG_CHECK(strstr(SG_STR(o, "stdout"), "never") == NULL, o, "the code must not run");
    SG_CHECK(!SG_BOOL(o, "success"), o, "success");
    json_object_put(o);
    expect_no_ephemeral_left();
}

/* ------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------ */

static void expect_call_error(const char *method, const char *path, const char *body, long status, const char *code,
                              const char *detail_names)
{
    sgtest_reply_t r;
    sgtest_call(suite.proxy, method, path, body, &r);
    json_object *o = SG_EXPECT_ERROR(&r, status, code);
    sgtest_reply_free(&r);
    if (detail_names != NULL && strstr(SG_STR(o, "detail"), detail_names) == NULL)
        SG_FAIL(o, "%s %s: detail must name \"%s\"", method, path, detail_names);
    json_object_put(o);
}

static void test_errors(void **state)
{
    const char *nobody = "00000000-0000-4000-8000-000000000000";
    char path[256];
    json_object *before = list_sessions();
    int sessions_before = (int)json_object_array_length(SG_ARR(before, "sessions"));
    json_object_put(before);
    int containers_before = sgtest_docker_count(suite.proxy_id);

    expect_call_error("POST", "/sessions", "{not json", 400, "bad_json", NULL);
    expect_call_error("POST", "/execute", "{\"code\": \"print(1)\", \"lang\": ", 400, "bad_json", NULL);
    expect_call_error("POST", "/execute", "[1, 2]", 400, NULL, NULL);
    expect_call_error("POST", "/execute", "{\"lang\": \"python\"}", 400, "bad_field", "code");
    expect_call_error("POST", "/execute", "{\"code\": 5, \"lang\": \"python\"}", 400, "bad_field", "code");
    expect_call_error("POST", "/execute", "{\"code\": \"print(1)\", \"lang\": \"python\", \"libraries\": \"numpy\"}",
                      400, "bad_field", "libraries");
    expect_call_error("POST", "/execute", "{\"code\": \"print(1)\", \"lang\": \"python\", \"timeout\": -1}", 400,
                      "bad_field", "timeout");
    expect_call_error("POST", "/sessions", "{\"lang\": \"cobol\"}", 400, "unknown_language", NULL);
    expect_call_error("POST", "/execute", "{\"code\": \"x\", \"lang\": \"cobol\"}", 400, "unknown_language", NULL);

    pathf(path, sizeof(path), "/sessions/%s/execute", nobody);
    expect_call_error("POST", path, "{\"code\": \"print(1)\"}", 404, "no_such_session", NULL);
    pathf(path, sizeof(path), "/sessions/%s/commands", nobody);
    expect_call_error("POST", path, "{\"command\": \"true\"}", 404, "no_such_session", NULL);
    pathf(path, sizeof(path), "/sessions/%s", nobody);
    expect_call_error("GET", path, NULL, 404, "no_such_session", NULL);
    expect_call_error("DELETE", path, NULL, 404, "no_such_session", NULL);
    pathf(path, sizeof(path), "/sessions/%s/files?path=x", nobody);
    expect_call_error("GET", path, NULL, 404, "no_such_session", NULL);

    expect_call_error("GET", "/no/such/route", NULL, 404, "not_found", NULL);
    expect_call_error("POST", "/nothing-here", "{}", 404, "not_found", NULL);

    expect_call_error("DELETE", "/", NULL, 405, "method_not_allowed", NULL);
    expect_call_error("GET", "/execute", NULL, 405, "method_not_allowed", NULL);
    expect_call_error("PATCH", "/sessions", "{}", 405, "method_not_allowed", NULL);

    /* A failed request changes nothing. */
    json_object *l = list_sessions();
    SG_CHECK(json_object_array_length(SG_ARR(l, "sessions")) == (size_t)sessions_before, l,
             "errors must not open sessions");
    json_object_put(l);
    SG_CHECK(sgtest_docker_count(suite.proxy_id) <= containers_before, NULL, "errors must not create containers");
}

/* ------------------------------------------------------------------------
 * Timeouts
 * ------------------------------------------------------------------------ */

static void expect_timed_out(json_object *o, double seconds, int timeout)
{
    SG_CHECK(SG_BOOL(o, "timed_out"), o, "timed_out");
    SG_CHECK(strcmp(SG_STR(o, "reason"), "timeout") == 0, o, "reason");
    SG_CHECK(!SG_BOOL(o, "success"), o, "success");
    SG_CHECK(seconds < timeout + SLACK_S, o, "reply after %.2f s for a %d s timeout", seconds, timeout);
    SG_CHECK(SG_DBL(o, "execution_time") >= timeout * 0.9, o, "ended after %.3f s, before its %d s timeout",
             SG_DBL(o, "execution_time"), timeout);
}

static void test_timeout_code(void **state)
{
    char *sid = create_session("python");
    double secs;
    json_object *o = run_code_t(sid, "while True: pass", NULL, 2, &secs);
    expect_timed_out(o, secs, 2);
    json_object_put(o);

    sgtest_expect_ok(run_code(sid, "print(1)"), "1\n");
    session_done(sid);

    /* A session's own default timeout applies when execute names none. */
    json_object *extra = json_object_new_object();
    json_object_object_add(extra, "timeout", json_object_new_int(2));
    sid = sgtest_create_session(suite.proxy, "python", extra, NULL);
    o = run_code_t(sid, "while True: pass", NULL, 0, &secs);
    expect_timed_out(o, secs, 2);
    json_object_put(o);
    session_done(sid);
}

static void test_timeout_command(void **state)
{
    char *sid = create_session("python");
    double secs;
    json_object *o = run_cmd_t(sid, "sleep 1000", 2, &secs);
    expect_timed_out(o, secs, 2);
    json_object_put(o);
    expect_cmd_prints(sid, "echo still here", "still here\n");
    session_done(sid);
}

static void test_timeout_kills_process_tree(void **state)
{
    char *sid = create_session("python");
    /* Three sleeps escape the shell's process group in different ways; the
     * shell waits until /proc shows all of them (two processes a look: under
     * gVisor every fork costs), says so, then sleeps. The timeout leaves
     * that wait room on a loaded machine. */
    const char *cmd = "setsid sh -c 'sleep 1000' &\n"
                      "(sleep 1000 &) &\n"
                      "sleep 1000 &\n"
                      "while [ \"$(cat /proc/[0-9]*/comm 2>/dev/null | grep -cx sleep)\" -lt 3 ]; do :; done\n"
                      "echo started\n"
                      "wait\n";
    double secs;
    json_object *o = run_cmd_t(sid, cmd, 8, &secs);
    expect_timed_out(o, secs, 8);
    SG_CHECK(strstr(SG_STR(o, "stdout"), "started") != NULL, o,
             "the sleeps never all ran, so the check below would prove nothing");
    json_object_put(o);

    sgtest_expect_ok(run_cmd(sid, LIST_SLEEPS), "");
    session_done(sid);
}

/* ------------------------------------------------------------------------
 * Files
 * ------------------------------------------------------------------------ */

static void files_url(char *buf, size_t len, const char *sid, const char *path)
{
    char *enc = sgtest_urlencode(path);
    assert_non_null(enc);
    pathf(buf, len, "%s/sessions/%s/files?path=%s", sgtest_proxy_url(suite.proxy), sid, enc);
    free(enc);
}

static void put_file(const char *sid, const char *path, const void *data, size_t len, sgtest_reply_t *r)
{
    char url[1024];
    files_url(url, sizeof(url), sid, path);
    sgtest_http("PUT", url, data, len, "application/octet-stream", 0, r);
}

static void get_file(const char *sid, const char *path, sgtest_reply_t *r)
{
    char url[1024];
    files_url(url, sizeof(url), sid, path);
    sgtest_http("GET", url, NULL, 0, NULL, 0, r);
}

static void test_files_roundtrip(void **state)
{
    char *sid = create_session("python");
    unsigned char data[512];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (unsigned char)(i * 7 + 3);
    data[0] = 0x00;
    data[1] = 0xff;
    data[2] = 0xfe;
    data[sizeof(data) - 1] = 0x00;

    sgtest_reply_t r;
    put_file(sid, "data/in.bin", data, sizeof(data), &r);
    json_object *o = SG_TAKE_JSON(&r, 200);
    SG_CHECK(strcmp(SG_STR(o, "path"), "data/in.bin") == 0, o, "path");
    SG_CHECK(SG_INT(o, "size") == (int64_t)sizeof(data), o, "size");
    json_object_put(o);

    get_file(sid, "data/in.bin", &r);
    SG_ASSERT_STATUS(&r, 200);
    char *ct = sgtest_reply_header(&r, "Content-Type");
    SG_CHECK(ct && strncmp(ct, "application/octet-stream", 24) == 0, NULL, "Content-Type %s", ct ? ct : "(none)");
    free(ct);
    SG_CHECK(r.body_len == sizeof(data) && memcmp(r.body, data, sizeof(data)) == 0, NULL,
             "downloaded %zu bytes differ from the %zu uploaded", r.body_len, sizeof(data));
    sgtest_reply_free(&r);

    /* Absolute inside /sandbox is the same file. */
    get_file(sid, "/sandbox/data/in.bin", &r);
    SG_ASSERT_STATUS(&r, 200);
    SG_CHECK(r.body_len == sizeof(data) && memcmp(r.body, data, sizeof(data)) == 0, NULL,
             "absolute path inside /sandbox");
    sgtest_reply_free(&r);

    /* Code in the sandbox sees it, and writes files we can read back. */
    expect_cmd_prints(sid, "wc -c data/in.bin", "512 data/in.bin\n");
    o = run_code(sid, "open('out.txt', 'w').write('from python\\n')");
    sgtest_expect_success(o);
    json_object_put(o);
    get_file(sid, "out.txt", &r);
    SG_ASSERT_STATUS(&r, 200);
    SG_CHECK(r.body_len == 12 && memcmp(r.body, "from python\n", 12) == 0, NULL, "out.txt: %s", r.body);
    sgtest_reply_free(&r);

    /* Overwrite. */
    put_file(sid, "data/in.bin", "v2", 2, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    get_file(sid, "data/in.bin", &r);
    SG_ASSERT_STATUS(&r, 200);
    SG_CHECK(r.body_len == 2 && memcmp(r.body, "v2", 2) == 0, NULL, "overwritten file");
    sgtest_reply_free(&r);

    session_done(sid);
}

static void test_files_refused(void **state)
{
    char *sid = create_session("python");
    const char *bad[] = {"../etc/passwd", "/etc/passwd", "a/../../x", "/sandbox/../etc/passwd", NULL};
    sgtest_reply_t r;
    for (size_t i = 0; bad[i] != NULL; i++) {
        get_file(sid, bad[i], &r);
        SG_TAKE_ERROR(&r, 400, "bad_path");
        put_file(sid, bad[i], "x", 1, &r);
        SG_TAKE_ERROR(&r, 400, "bad_path");
    }

    /* A symlink on the way out of the sandbox. */
    json_object *o = run_cmd(sid, "ln -s /etc esc && ln -s /etc/passwd pw && mkdir -p d");
    sgtest_expect_success(o);
    json_object_put(o);
    get_file(sid, "esc/passwd", &r);
    SG_TAKE_ERROR(&r, 400, "bad_path");
    get_file(sid, "pw", &r);
    SG_TAKE_ERROR(&r, 400, "bad_path");
    put_file(sid, "esc/sgtest", "x", 1, &r);
    SG_TAKE_ERROR(&r, 400, "bad_path");
    /* Not a regular file. */
    get_file(sid, "d", &r);
    SG_TAKE_ERROR(&r, 400, "bad_path");

    /* Missing. */
    get_file(sid, "no/such/file.txt", &r);
    SG_TAKE_ERROR(&r, 404, "no_such_file");
    session_done(sid);
}

static void test_files_too_large(void **state)
{
    char *sid = create_session("python");
    char *big = malloc(MAX_FILE_BYTES + 1);
    assert_non_null(big);
    memset(big, 'a', MAX_FILE_BYTES + 1);

    sgtest_reply_t r;
    put_file(sid, "big.txt", big, MAX_FILE_BYTES + 1, &r);
    SG_TAKE_ERROR(&r, 413, "too_large");
    get_file(sid, "big.txt", &r);
    SG_TAKE_ERROR(&r, 404, "no_such_file");

    /* Exactly the cap is fine. */
    put_file(sid, "big.txt", big, MAX_FILE_BYTES, &r);
    json_object *o = SG_TAKE_JSON(&r, 200);
    SG_CHECK(SG_INT(o, "size") == MAX_FILE_BYTES, o, "size");
    json_object_put(o);
    get_file(sid, "big.txt", &r);
    SG_ASSERT_STATUS(&r, 200);
    SG_CHECK(r.body_len == MAX_FILE_BYTES && memcmp(r.body, big, MAX_FILE_BYTES) == 0, NULL,
             "file at the cap comes back whole");
    sgtest_reply_free(&r);
    free(big);
    session_done(sid);
}

/* ------------------------------------------------------------------------
 * Concurrency
 * ------------------------------------------------------------------------ */

#define NPAR 8

/* The shape of the proxy's execution result, for sgtest_batch_expect_ok. */
static void result_shape(json_object *r)
{
    SG_CHECK_RESULT_SHAPE(r);
}

static void test_concurrency(void **state)
{
    char url[NPAR][256];
    char body[NPAR][256];
    sgtest_par_req_t q[NPAR];
    char *sid[NPAR];

    /* Eight sessions, created at once. */
    memset(q, 0, sizeof(q));
    for (int i = 0; i < NPAR; i++) {
        pathf(url[i], sizeof(url[i]), "%s/sessions", sgtest_proxy_url(suite.proxy));
        pathf(body[i], sizeof(body[i]), "{\"lang\":\"python\",\"keep_template\":false}");
        q[i] = (sgtest_par_req_t){.method = "POST",
                                  .url = url[i],
                                  .body = body[i],
                                  .body_len = strlen(body[i]),
                                  .content_type = "application/json"};
    }
    SG_CHECK(sgtest_parallel(q, NPAR) == 0, NULL, "cannot start threads");
    for (int i = 0; i < NPAR; i++) {
        sid[i] = SG_TAKE_ID(SG_TAKE_JSON(&q[i].reply, 200), "session_id", NULL);
        for (int j = 0; j < i; j++)
            SG_CHECK(strcmp(sid[i], sid[j]) != 0, NULL, "two sessions got the id %s", sid[i]);
    }
    /* Each kernel started first, as the pool's are (a cold start is ~750 ms
     * under runsc, and eight at once on a small machine would be timed
     * below as if the proxy serialised). */
    for (int i = 0; i < NPAR; i++)
        sgtest_expect_ok(run_code(sid[i], "print(0)"), "0\n");

    /* Eight one-second executes must overlap. */
    memset(q, 0, sizeof(q));
    for (int i = 0; i < NPAR; i++) {
        pathf(url[i], sizeof(url[i]), "%s/sessions/%s/execute", sgtest_proxy_url(suite.proxy), sid[i]);
        pathf(body[i], sizeof(body[i]),
              "{\"code\":\"import time; time.sleep(1); print(\\\"done\\\")\",\"timeout\":30}");
        q[i] = (sgtest_par_req_t){.method = "POST",
                                  .url = url[i],
                                  .body = body[i],
                                  .body_len = strlen(body[i]),
                                  .content_type = "application/json"};
    }
    sgtest_batch_t *b = sgtest_batch_start(q, NPAR);
    SG_CHECK(b != NULL, NULL, "cannot start threads");
    int sent = sgtest_batch_wait_sent(b, 10.0);

    /* Mid-batch, the event loop must still answer at once. */
    sgtest_reply_t h;
    sgtest_call(suite.proxy, "GET", "/", NULL, &h);
    double health_done = sgtest_now();
    sgtest_batch_join(b);

    SG_CHECK(sent == 0, NULL, "the batch was not sent within 10 s");
    SG_ASSERT_STATUS(&h, 200);
    SG_CHECK(h.seconds < 0.5, NULL, "GET / took %.3f s while executes ran", h.seconds);
    sgtest_reply_free(&h);

    sgtest_span_t span = sgtest_batch_span(q, NPAR);
    sgtest_batch_expect_ok(q, NPAR, result_shape, "done\n");
    double wall = span.last_end - span.first_start;
    SG_CHECK(wall < 3.0, NULL, "%d parallel 1 s executes took %.2f s: the proxy serialises", NPAR, wall);
    SG_CHECK(health_done < span.first_end, NULL, "GET / was not answered while the executes were running");

    for (int i = 0; i < NPAR; i++) {
        close_session(sid[i]);
        free(sid[i]);
    }
}

/* ------------------------------------------------------------------------
 * Last: nothing is left
 * ------------------------------------------------------------------------ */

static void test_zz_nothing_left(void **state)
{
    /* Close what failed tests may have left, through the API only. */
    sgtest_close_all_sessions(suite.proxy);
    json_object *l = list_sessions();
    SG_CHECK(json_object_array_length(SG_ARR(l, "sessions")) == 0, l, "sessions remain after closing every listed one");
    json_object_put(l);
    char l1[192];
    snprintf(l1, sizeof(l1), "sandgate.proxy=%s", suite.proxy_id);
    const char *labels[] = {l1, NULL};
    int n = sgtest_docker_wait_count(labels, 0, REMOVAL_S);
    SG_CHECK(n == 0, NULL,
             "%d container(s) labelled sandgate.proxy=%s remain %.0f s after every "
             "session was closed",
             n, suite.proxy_id, REMOVAL_S);
}

int main(void)
{
    return SG_RUN_TESTS("proxy_api", group_setup, sgtest_suite_group_teardown, NULL, sgtest_suite_teardown,
                        test_seed_readme_examples, test_javascript, test_session_details, test_command_non_root,
                        test_unknown_library, test_errors, test_timeout_code, test_timeout_command,
                        test_timeout_kills_process_tree, test_files_roundtrip, test_files_refused, test_files_too_large,
                        test_concurrency, test_zz_nothing_left);
}
