/*
 * test_gateway_api.c — sandgate-gateway's public and admin API against a
 * real gateway process (memory state: no Redis), its real SQLite file, a
 * real sandgate-proxy and the real Docker engine.
 *
 * Authentication (every route, every kind of bad token, revocation and
 * disabled tenants taking effect at once), tenant isolation, and the seed
 * READMEs' examples through the gateway. Bad input, sizes, the tenant's
 * caps, /metrics and the event loop under load: test_gateway_limits.c.
 *
 * One proxy (small warm pool) and one gateway serve the group
 * (gateway_api_suite.h). Every test closes the sessions it opens; the group
 * teardown closes whatever a failed test left, stops both servers (the
 * gateway must exit 0) and checks that no container of this run's proxy id
 * remains.
 */
#include "gateway_api_suite.h"
#include "sgrun.h"

/* ------------------------------------------------------------------------
 * 1. Authentication
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_auth_matrix)
{
    char *tok = sggw_new_tenant(data_dir(), "auth-a", NULL);
    char u[37], path[256], hdr[512];
    sgtest_reply_t r;
    random_uuid(u);

    /* GET / needs no token */
    json_object *o = SGGW_CALL_JSON(stack.gw, NULL, "GET", "/", NULL, 200);
    SG_CHECK(strcmp(SG_STR(o, "status"), "ok") == 0, o, "GET / must answer {\"status\":\"ok\"}");
    json_object_put(o);

    /* every other public route: 401 without a token */
    struct {
        const char *method, *path, *body;
    } routes[] = {
        {"GET", "/sessions", NULL},
        {"POST", "/sessions", "{\"lang\":\"python\"}"},
        {"GET", "/sessions/%s", NULL},
        {"DELETE", "/sessions/%s", NULL},
        {"POST", "/sessions/%s/execute", "{\"code\":\"print(1)\"}"},
        {"POST", "/sessions/%s/commands", "{\"command\":\"ls\"}"},
        {"GET", "/sessions/%s/files?path=a.txt", NULL},
        {"PUT", "/sessions/%s/files?path=a.txt", "hello"},
        {"POST", "/execute", "{\"code\":\"print(1)\",\"lang\":\"python\"}"},
    };
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        pathf(path, sizeof(path), routes[i].path, u);
        sggw_call(stack.gw, NULL, routes[i].method, path, routes[i].body, &r);
        if (r.status != 401)
            fprintf(stderr, "route %s %s:\n", routes[i].method, path);
        EXPECT_401(&r);
        sgtest_reply_free(&r);
    }

    /* the token works, with the scheme in any case */
    sggw_call(stack.gw, tok, "GET", "/sessions", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    pathf(hdr, sizeof(hdr), "Authorization: bearer %s", tok);
    const char *lower[] = {hdr, NULL};
    call_hdr("GET", "/sessions", lower, NULL, NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);

    /* malformed and unknown tokens */
    char *fake = sggw_fake_token(NULL);
    char pub[9];
    memcpy(pub, tok + 4, 8);
    pub[8] = '\0';
    char *wrong_secret = sggw_fake_token(pub);
    char long_tok[300];
    memset(long_tok, 'a', sizeof(long_tok) - 1);
    long_tok[sizeof(long_tok) - 1] = '\0';
    memcpy(long_tok, "sgk_", 4);
    char truncated[64];
    snprintf(truncated, sizeof(truncated), "%.*s", 55, tok);
    const char *bad[] = {"Authorization: Bearer",
                         "Authorization: Bearer ",
                         "Authorization: Basic dXNlcjpwYXNz",
                         "Authorization: Bearer not-a-token",
                         NULL,
                         NULL,
                         NULL,
                         NULL,
                         NULL};
    char b1[400], b2[400], b3[400], b4[400], b5[400];
    pathf(b1, sizeof(b1), "Authorization: Bearer %s", fake);
    pathf(b2, sizeof(b2), "Authorization: Bearer %s", wrong_secret);
    pathf(b3, sizeof(b3), "Authorization: Bearer %s", long_tok);
    pathf(b4, sizeof(b4), "Authorization: Bearer %s", truncated);
    pathf(b5, sizeof(b5), "Authorization: %s", tok); /* no scheme */
    const char *more[] = {b1, b2, b3, b4, b5};
    size_t nbad = 4;
    for (size_t i = 0; i < 5; i++)
        bad[nbad++] = more[i];
    for (size_t i = 0; i < nbad; i++) {
        const char *h[] = {bad[i], NULL};
        call_hdr("GET", "/sessions", h, NULL, NULL, &r);
        if (r.status != 401)
            fprintf(stderr, "header \"%.80s\":\n", bad[i]);
        EXPECT_401(&r);
        sgtest_reply_free(&r);
        /* nothing runs on a bad token */
        call_hdr("POST", "/execute", h, "{\"code\":\"print(1)\"}", "application/json", &r);
        EXPECT_401(&r);
        sgtest_reply_free(&r);
    }
    free(fake);
    free(wrong_secret);

    /* revocation takes effect at once, token by token */
    char *t2 = sggw_new_token(data_dir(), "auth-a");
    char *t3 = sggw_new_token(data_dir(), "auth-a");
    char *t4 = sggw_new_token(data_dir(), "auth-a");
    sggw_call(stack.gw, t2, "GET", "/sessions", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    char pub2[9];
    snprintf(pub2, sizeof(pub2), "%.8s", t2 + 4);
    char *out = NULL;
    SG_CHECK(sggw_admin(data_dir(), &out, "token", "revoke", pub2, NULL) == 0, NULL, "token revoke %s failed", pub2);
    free(out);
    sggw_call(stack.gw, t2, "GET", "/sessions", NULL, &r);
    EXPECT_401(&r);
    sgtest_reply_free(&r);
    /* by the whole token */
    SG_CHECK(sggw_admin(data_dir(), &out, "token", "revoke", t3, NULL) == 0, NULL, "token revoke <token> failed");
    free(out);
    sggw_call(stack.gw, t3, "POST", "/execute", "{\"code\":\"print(1)\"}", &r);
    EXPECT_401(&r);
    sgtest_reply_free(&r);
    /* through the admin API */
    char pub4[9];
    snprintf(pub4, sizeof(pub4), "%.8s", t4 + 4);
    pathf(path, sizeof(path), "/admin/tokens/%s", pub4);
    sggw_admin_call(stack.gw, "DELETE", path, NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    sggw_call(stack.gw, t4, "GET", "/sessions", NULL, &r);
    EXPECT_401(&r);
    sgtest_reply_free(&r);
    /* the others of the tenant still work */
    sggw_call(stack.gw, tok, "GET", "/sessions", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    /* `token list` shows the revocations */
    SG_CHECK(sggw_admin(data_dir(), &out, "token", "list", "auth-a", NULL) == 0, NULL, "token list failed");
    char needle[64];
    pathf(needle, sizeof(needle), "public_id=%s created=", pub2);
    char *line = strstr(out, needle);
    SG_CHECK(line != NULL && strstr(line, "revoked=-") != strstr(line, "revoked="), NULL,
             "token list must show %s revoked:\n%s", pub2, out);
    free(out);

    /* a disabled tenant is locked out at once, and back when enabled */
    const char *off[] = {"disabled=1", NULL}, *on[] = {"disabled=0", NULL};
    sggw_tenant_set(data_dir(), "auth-a", off);
    sggw_call(stack.gw, tok, "GET", "/sessions", NULL, &r);
    EXPECT_401(&r);
    sgtest_reply_free(&r);
    sggw_call(stack.gw, tok, "POST", "/execute", "{\"code\":\"print(1)\"}", &r);
    EXPECT_401(&r);
    sgtest_reply_free(&r);
    sggw_tenant_set(data_dir(), "auth-a", on);
    sggw_call(stack.gw, tok, "GET", "/sessions", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);

    /* admin routes: no token, a wrong one, a tenant's one -> 401; the right one -> 200 */
    struct {
        const char *method, *path, *body;
        long ok;
    } admin[] = {
        {"GET", "/admin/tenants", NULL, 200},
        {"GET", "/admin/tenants/auth-a", NULL, 200},
        {"GET", "/admin/tenants/auth-a/tokens", NULL, 200},
        {"GET", "/admin/sessions", NULL, 200},
        {"GET", "/admin/sessions?tenant=auth-a", NULL, 200},
        {"GET", "/admin/usage?tenant=auth-a", NULL, 200},
        {"PATCH", "/admin/tenants/auth-a", "{\"burst\":61}", 200},
        {"POST", "/admin/tenants", "{\"name\":\"auth-admin-made\"}", 201},
        {"POST", "/admin/tenants/auth-a/tokens", "{\"label\":\"x\"}", 201},
    };
    char *wrong_admin = sggw_fake_token(NULL);
    for (size_t i = 0; i < sizeof(admin) / sizeof(admin[0]); i++) {
        const char *who[] = {NULL, wrong_admin, tok};
        for (size_t k = 0; k < 3; k++) {
            sggw_call(stack.gw, who[k], admin[i].method, admin[i].path, admin[i].body, &r);
            if (r.status != 401)
                fprintf(stderr, "admin route %s %s, token %zu:\n", admin[i].method, admin[i].path, k);
            EXPECT_401(&r);
            sgtest_reply_free(&r);
        }
        sggw_admin_call(stack.gw, admin[i].method, admin[i].path, admin[i].body, &r);
        if (r.status != admin[i].ok)
            fprintf(stderr, "admin route %s %s with the admin token:\n", admin[i].method, admin[i].path);
        o = SG_EXPECT_JSON(&r, admin[i].ok);
        sgtest_reply_free(&r);
        json_object_put(o);
    }
    free(wrong_admin);
    /* and the admin token is no tenant token */
    sggw_call(stack.gw, sggw_gateway_admin_token(stack.gw), "GET", "/sessions", NULL, &r);
    EXPECT_401(&r);
    sgtest_reply_free(&r);

    free(t2);
    free(t3);
    free(t4);
    free(tok);
}

/* A gateway of the test's own (extra_gw: after_test stops it) with two DB
 * threads, in front of the suite's proxy, into *g2; a tenant `name` of it,
 * whose token is returned (made before the gateway's DB threads open the
 * file), and `writer`: another writer of its SQLite file. */
static char *two_db_threads_tenant(const char *name, sggw_gateway_t **g2)
{
    const char *env[] = {"SANDGATE_DB_WORKERS=2", NULL};
    sggw_opts_t opts = {.proxy_url = stack.proxy_url, .env = env};
    *g2 = stack.extra_gw = sggw_gateway_start(&opts);
    SG_CHECK(*g2 != NULL, NULL, "cannot start a gateway");
    char *tok = sggw_new_tenant(sggw_gateway_data_dir(*g2), name, NULL);
    writer = sggw_db_writer_open(sggw_gateway_data_dir(*g2));
    SG_CHECK(writer != NULL, NULL, "cannot open the SQLite file");
    return tok;
}

/* What sandgate-admin changes in the SQLite file reaches a running gateway
 * at once, and what the gateway writes reaches the file, with the default
 * number of DB threads (2). */
SGGW_TEST(test_admin_changes_reach_gateway)
{
    sggw_gateway_t *g2;
    char *tok = two_db_threads_tenant("live-admin", &g2);
    const char *dir = sggw_gateway_data_dir(g2);
    char url[256];
    sgtest_reply_t r;

    /* both DB threads open their connection, one after the other: the first
     * is kept busy by a write that waits for another writer's lock, so the
     * next request goes to the second */
    SG_CHECK(sggw_db_writer_hold(writer, 1.0) == 0, NULL, "cannot take the SQLite write lock");
    pathf(url, sizeof(url), "%s/admin/tenants", sggw_gateway_url(g2));
    const char tbody[] = "{\"name\":\"live-admin-2\"}";
    sggw_par_req_t q = sggw_par_post(url, sggw_gateway_admin_token(g2), tbody, 30);
    sggw_batch_t *b = sggw_batch_start(&q, 1);
    SG_CHECK(b != NULL, NULL, "cannot start a thread");
    usleep(200000); /* the admin write reaches its DB thread and waits there for the lock */
    sggw_call(g2, tok, "GET", "/sessions", NULL, &r); /* (its thread opens the file once the lock is free) */
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    sggw_batch_join(b);
    json_object_put(SG_EXPECT_JSON(&q.reply, 201));
    sgtest_reply_free(&q.reply);
    sggw_db_writer_close(writer); /* like any sandgate-admin run, it closes its connection */
    writer = NULL;

    /* a token made now works at once, on every request */
    char *t2 = sggw_new_token(dir, "live-admin");
    for (int i = 0; i < 10; i++) {
        sggw_call(g2, t2, "GET", "/sessions", NULL, &r);
        if (r.status != 200)
            fprintf(stderr, "request %d with a token sandgate-admin made while the gateway runs:\n", i + 1);
        SG_ASSERT_STATUS(&r, 200);
        sgtest_reply_free(&r);
    }
    /* a revocation applies at once, on every request */
    char *out = NULL;
    SG_CHECK(sggw_admin(dir, &out, "token", "revoke", tok, NULL) == 0, NULL, "token revoke failed");
    free(out);
    for (int i = 0; i < 10; i++) {
        sggw_call(g2, tok, "GET", "/sessions", NULL, &r);
        if (r.status != 401)
            fprintf(stderr, "request %d with a token revoked by sandgate-admin:\n", i + 1);
        EXPECT_401(&r);
        sgtest_reply_free(&r);
    }
    /* a new cap applies at once */
    const char *cap[] = {"max_timeout=2", NULL};
    sggw_tenant_set(dir, "live-admin", cap);
    for (int i = 0; i < 4; i++) {
        sggw_call(g2, t2, "POST", "/execute", "{\"code\":\"print(1)\",\"timeout\":5}", &r);
        expect_bad_field(&r, "timeout");
        sgtest_reply_free(&r);
    }
    /* and the gateway's own writes reach the file */
    json_object *o = ephemeral(g2, t2, "{\"code\":\"print(1)\",\"lang\":\"python\"}");
    json_object_put(o);
    double deadline = sgtest_now() + 5;
    for (;;) {
        SG_CHECK(sggw_admin(dir, &out, "--json", "usage", "live-admin", NULL) == 0, NULL, "usage failed");
        json_object *u = json_tokener_parse(out);
        free(out);
        SG_CHECK(u != NULL, NULL, "usage --json printed no JSON");
        int64_t n = SG_INT(u, "executions");
        json_object_put(u);
        if (n == 1)
            break;
        SG_CHECK(sgtest_now() < deadline, NULL,
                 "sandgate-admin usage shows %lld executions 5 s after the gateway answered one", (long long)n);
        usleep(100000);
    }
    free(t2);
    free(tok);
    sggw_stack_stop_extra(&stack, "the gateway");
}

/* A session is usable, listed, and then gone, at once: the reply to
 * POST /sessions (and to DELETE) means the next request sees it so. With
 * the default 2 DB threads the next request's token check may run while
 * the session's record is still waiting to be written: the file's write
 * lock is busy now and then (the other DB thread writing usage rows,
 * sandgate-admin). The test holds that lock for 0.5 s around the calls,
 * then repeats them a few times without it. (Tenant and token are made
 * before the gateway's DB threads open the file.) */
SGGW_TEST(test_create_then_use_at_once)
{
    sggw_gateway_t *g2;
    char *tok = two_db_threads_tenant("at-once", &g2);
    char path[256];
    sgtest_reply_t r;

    for (int i = 0; i < 7; i++) {
        if (i == 0)
            SG_CHECK(sggw_db_writer_hold(writer, 0.5) == 0, NULL, "cannot take the SQLite write lock");
        char *sid = sggw_create_session(g2, tok, NULL, NULL);
        pathf(path, sizeof(path), "/sessions/%s/execute", sid);
        sggw_call(g2, tok, "POST", path, "{\"code\":\"print(1)\"}", &r);
        if (r.status != 200)
            fprintf(stderr, "round %d%s: an execute right after the create:\n", i + 1,
                    i == 0 ? " (another writer holds the lock for 0.5 s)" : "");
        SG_ASSERT_STATUS(&r, 200);
        sgtest_reply_free(&r);
        SG_CHECK(sggw_lists(g2, tok, sid), NULL, "round %d: GET /sessions right after the create must list %s", i + 1,
                 sid);
        if (i == 0) /* once more: the lock around DELETE */
            SG_CHECK(sggw_db_writer_hold(writer, 0.5) == 0, NULL, "cannot take the SQLite write lock");
        sggw_delete_session(g2, tok, sid);
        SG_CHECK(!sggw_lists(g2, tok, sid), NULL, "round %d: GET /sessions right after DELETE still lists %s", i + 1,
                 sid);
        free(sid);
    }
    free(tok);
    sggw_stack_stop_extra(&stack, "the gateway");
    sggw_db_writer_close(writer);
    writer = NULL;
}

/* Every reply's headers are well formed: the rate-limit headers carry
 * numbers, and a libcurl client can read every reply. */
SGGW_TEST(test_reply_headers_well_formed)
{
    char *tok = sggw_new_tenant(data_dir(), "headers", NULL);
    sgtest_reply_t r;
    sggw_call(stack.gw, tok, "GET", "/sessions", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    const char *names[] = {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"};
    for (size_t i = 0; i < 3; i++) {
        char *v = sgtest_reply_header(&r, names[i]);
        SG_CHECK(v != NULL && *v != '\0' && strspn(v, "0123456789") == strlen(v), NULL,
                 "%s must be a decimal number; the reply's headers:\n%s", names[i], r.headers);
        if (i == 0)
            SG_CHECK(strcmp(v, "60") == 0, NULL, "X-RateLimit-Limit must be the burst, 60 (got %s)", v);
        free(v);
    }
    sgtest_reply_free(&r);

    char url[256], auth[128];
    snprintf(url, sizeof(url), "%s/sessions", sggw_gateway_url(stack.gw));
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
    const char *h[] = {auth, NULL};
    for (int i = 0; i < 30; i++) {
        sggw_http_curl("GET", url, NULL, 0, NULL, h, 30, &r);
        if (r.status != 200)
            fprintf(stderr, "libcurl, request %d: %s\n", i + 1, r.error);
        SG_ASSERT_STATUS(&r, 200);
        sgtest_reply_free(&r);
    }
    free(tok);
}

/* ------------------------------------------------------------------------
 * 2. Tenants cannot see each other
 * ------------------------------------------------------------------------ */

/* An answer of tenant B about A's session must look exactly like one
 * about a session that never existed. */
static void expect_like_missing(const char *tok, const char *method, const char *fmt, const char *body,
                                const char *ctype, const char *sid, const char *nosuch)
{
    char p1[256], p2[256];
    sgtest_reply_t r1, r2;
    pathf(p1, sizeof(p1), fmt, sid);
    pathf(p2, sizeof(p2), fmt, nosuch);
    char auth[128];
    pathf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
    const char *h[] = {auth, NULL};
    call_hdr(method, p1, h, body, ctype, &r1);
    call_hdr(method, p2, h, body, ctype, &r2);
    if (r1.status != 404)
        fprintf(stderr, "%s %s as another tenant:\n", method, p1);
    json_object *o1 = SG_EXPECT_ERROR(&r1, 404, NULL);
    json_object *o2 = SG_EXPECT_ERROR(&r2, 404, NULL);
    SG_CHECK(strcmp(SG_STR(o1, "code"), SG_STR(o2, "code")) == 0, o1,
             "another tenant's session must answer like a missing one (code \"%s\")", SG_STR(o2, "code"));
    json_object_put(o1);
    json_object_put(o2);
    sgtest_reply_free(&r1);
    sgtest_reply_free(&r2);
}

SGGW_TEST(test_cross_tenant)
{
    char *ta = sggw_new_tenant(data_dir(), "iso-a", NULL);
    char *tb = sggw_new_tenant(data_dir(), "iso-b", NULL);
    char nosuch[37], path[256];
    sgtest_reply_t r;
    random_uuid(nosuch);

    char *sa = sggw_create_session(stack.gw, ta, NULL, NULL);
    json_object *o = sggw_execute(stack.gw, ta, sa, "secret = 42\nprint('set')", 0);
    sgtest_expect_stdout(o, "set\n");
    json_object_put(o);

    expect_like_missing(tb, "GET", "/sessions/%s", NULL, NULL, sa, nosuch);
    expect_like_missing(tb, "POST", "/sessions/%s/execute", "{\"code\":\"print(secret)\"}", "application/json", sa,
                        nosuch);
    expect_like_missing(tb, "POST", "/sessions/%s/commands", "{\"command\":\"echo hi > /sandbox/b.txt\"}",
                        "application/json", sa, nosuch);
    expect_like_missing(tb, "PUT", "/sessions/%s/files?path=b.txt", "from b", "application/octet-stream", sa, nosuch);
    expect_like_missing(tb, "GET", "/sessions/%s/files?path=b.txt", NULL, NULL, sa, nosuch);
    expect_like_missing(tb, "DELETE", "/sessions/%s", NULL, NULL, sa, nosuch);

    /* A's session is untouched: alive, its state kept, no file from B */
    o = sggw_execute(stack.gw, ta, sa, "print(secret)", 0);
    sgtest_expect_stdout(o, "42\n");
    json_object_put(o);
    pathf(path, sizeof(path), "/sessions/%s/files?path=b.txt", sa);
    SGGW_CALL_ERROR(stack.gw, ta, "GET", path, NULL, 404, NULL);
    pathf(path, sizeof(path), "/sessions/%s", sa);
    sggw_call(stack.gw, ta, "GET", path, NULL, &r);
    o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    SG_CHECK(strcmp(SG_STR(o, "session_id"), sa) == 0, o, "GET /sessions/{id} names another session");
    json_object_put(o);

    /* each tenant lists only its own */
    char *sb = sggw_create_session(stack.gw, tb, NULL, NULL);
    json_object *la = sggw_list_sessions(stack.gw, ta), *lb = sggw_list_sessions(stack.gw, tb);
    SG_CHECK(sgtest_json_array_has_string(SG_ARR(la, "sessions"), sa), la, "A does not list its session %s", sa);
    SG_CHECK(!sgtest_json_array_has_string(SG_ARR(la, "sessions"), sb), la, "A lists B's session %s", sb);
    SG_CHECK(json_object_array_length(SG_ARR(la, "sessions")) == 1, la, "A has exactly one session");
    SG_CHECK(sgtest_json_array_has_string(SG_ARR(lb, "sessions"), sb), lb, "B does not list its session %s", sb);
    SG_CHECK(json_object_array_length(SG_ARR(lb, "sessions")) == 1, lb, "B has exactly one session");
    json_object_put(la);
    json_object_put(lb);

    /* the admin view agrees */
    sggw_admin_call(stack.gw, "GET", "/admin/sessions?tenant=iso-a", NULL, &r);
    o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    json_object *arr = SG_ARR(o, "sessions");
    SG_CHECK(json_object_array_length(arr) == 1 &&
                 strcmp(SG_STR(json_object_array_get_idx(arr, 0), "session_id"), sa) == 0,
             o, "GET /admin/sessions?tenant=iso-a must list exactly %s", sa);
    json_object_put(o);

    sggw_delete_session(stack.gw, tb, sb);
    sggw_delete_session(stack.gw, ta, sa);
    SG_CHECK(!sggw_lists(stack.gw, ta, sa), NULL, "A still lists %s after DELETE", sa);
    free(sa);
    free(sb);
    free(ta);
    free(tb);
}

/* ------------------------------------------------------------------------
 * 3. The seeds' README examples, through the gateway
 * ------------------------------------------------------------------------ */

/* The README's session example: a python session of tok (returned; path its
 * execute path) that imported numpy and printed a mean. */
static char *numpy_session(const char *tok, char *path, size_t size)
{
    char *sid = sggw_create_session(stack.gw, tok, "{\"lang\": \"python\"}", NULL);
    pathf(path, size, "/sessions/%s/execute", sid);
    sgtest_expect_ok(
        sggw_post_result(stack.gw, tok, path,
                         json_tokener_parse("{\"code\": \"import numpy as np\\nprint(np.array([1,2,3]).mean())\","
                                            " \"libraries\": [\"numpy\"]}")),
        "2.0\n");
    return sid;
}

SGGW_TEST(test_seed003_examples)
{
    char *tok = sggw_new_tenant(data_dir(), "seed003", NULL);
    char path[256];

    /* Health Check */
    json_object *o = SGGW_CALL_JSON(stack.gw, tok, "GET", "/", NULL, 200);
    SG_CHECK(strcmp(SG_STR(o, "status"), "ok") == 0, o, "GET /");
    json_object_put(o);

    /* Create Session, as documented */
    char *doc = sggw_create_session(stack.gw, tok, "{\"lang\": \"python\", \"keep_template\": false}", NULL);
    /* Execute Code in Session, as documented */
    pathf(path, sizeof(path), "/sessions/%s/execute", doc);
    o = sggw_post_result(stack.gw, tok, path,
                         json_tokener_parse("{\"code\": \"print('Hello, World!')\", \"libraries\": [\"numpy\"]}"));
    sgtest_expect_stdout(o, "Hello, World!\n");
    SG_CHECK(strcmp(SG_STR(o, "stderr"), "") == 0 && SG_INT(o, "exit_code") == 0, o, "documented reply");
    json_object_put(o);

    /* Example Usage: Session-based Execution */
    char *sid = numpy_session(tok, path, sizeof(path));
    /* 3. state is preserved: np is still defined */
    o = sggw_post_result(stack.gw, tok, path,
                         json_tokener_parse("{\"code\": \"print(\\\"Previous imports are still available\\\")\\n"
                                            "print(np.__version__)\"}"));
    sgtest_expect_success(o);
    const char *out = SG_STR(o, "stdout");
    const char *first = "Previous imports are still available\n";
    SG_CHECK(strncmp(out, first, strlen(first)) == 0, o, "the first line");
    const char *ver = out + strlen(first);
    SG_CHECK(ver[0] >= '1' && ver[0] <= '9' && strchr(ver, '.') != NULL && ver[strlen(ver) - 1] == '\n', o,
             "np.__version__ must print a version: np is still defined in the session");
    json_object_put(o);

    /* List Sessions */
    json_object *l = sggw_list_sessions(stack.gw, tok);
    SG_CHECK(sgtest_json_array_has_string(SG_ARR(l, "sessions"), sid), l, "GET /sessions must list %s", sid);
    SG_CHECK(sgtest_json_array_has_string(SG_ARR(l, "sessions"), doc), l, "GET /sessions must list %s", doc);
    json_object_put(l);

    /* 4. Clean up: Close Session -> {"status": "closed"} */
    sggw_delete_session(stack.gw, tok, sid);
    sggw_delete_session(stack.gw, tok, doc);
    l = sggw_list_sessions(stack.gw, tok);
    SG_CHECK(!sgtest_json_array_has_string(SG_ARR(l, "sessions"), sid), l, "a closed session is still listed");
    SG_CHECK(json_object_array_length(SG_ARR(l, "sessions")) == 0, l, "no sessions are left");
    json_object_put(l);
    char *cid = sgtest_docker_session_container(stack.proxy_id, sid);
    SG_CHECK(cid == NULL || sgtest_docker_wait_gone(cid, REMOVAL_S, NULL) == 0, NULL,
             "the container of closed session %s remains", sid);
    free(cid);
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    SGGW_CALL_ERROR(stack.gw, tok, "POST", path, "{\"code\":\"print(1)\"}", 404, NULL);

    /* Execute Code (Ephemeral), as documented */
    o = ephemeral(stack.gw, tok,
                  "{\"code\": \"print('Hello, World!')\", \"lang\": \"python\", \"keep_template\": false,"
                  " \"libraries\": []}");
    sgtest_expect_stdout(o, "Hello, World!\n");
    SG_CHECK(strcmp(SG_STR(o, "stderr"), "") == 0 && SG_INT(o, "exit_code") == 0, o, "documented reply");
    json_object_put(o);
    /* Ephemeral Execution example */
    o = ephemeral(stack.gw, tok,
                  "{\"code\": \"import sys\\nprint(f\\\"Python {sys.version}\\\")\", \"lang\": \"python\"}");
    sgtest_expect_success(o);
    SG_CHECK(strncmp(SG_STR(o, "stdout"), "Python 3.", 9) == 0, o, "stdout must start with \"Python 3.\"");
    json_object_put(o);
    /* With Error Handling */
    o = ephemeral(stack.gw, tok, "{\"code\": \"print(undefined_variable)\", \"lang\": \"python\"}");
    SG_CHECK(SG_INT(o, "exit_code") == 1, o, "exit_code must be 1");
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "") == 0, o, "stdout must be empty");
    SG_CHECK(strstr(SG_STR(o, "stderr"), "NameError: name 'undefined_variable' is not defined") != NULL, o,
             "stderr must hold the NameError");
    SG_CHECK(!SG_BOOL(o, "success"), o, "a failed run is no success");
    json_object_put(o);
    free(sid);
    free(doc);
    free(tok);
}

SGGW_TEST(test_seed000_examples)
{
    char *tok = sggw_new_tenant(data_dir(), "seed000", NULL);
    char path[256];

    /* Create Session / Execute Code / List Sessions / Stop Session */
    json_object *created = NULL;
    char *sid = sggw_create_session(stack.gw, tok, "{\"lang\": \"python\", \"keep_template\": false}", &created);
    SG_CHECK(strcmp(SG_STR(created, "session_id"), sid) == 0, created, "session_id");
    json_object_put(created);
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    json_object *o = sggw_post_result(
        stack.gw, tok, path, json_tokener_parse("{\"code\": \"print('Hello, World!')\", \"libraries\": [\"numpy\"]}"));
    sgtest_expect_stdout(o, "Hello, World!\n");
    SG_CHECK(strcmp(SG_STR(o, "stderr"), "") == 0 && SG_INT(o, "exit_code") == 0, o, "documented reply");
    json_object_put(o);
    json_object *l = sggw_list_sessions(stack.gw, tok);
    SG_CHECK(json_object_array_length(SG_ARR(l, "sessions")) == 1 &&
                 sgtest_json_array_has_string(SG_ARR(l, "sessions"), sid),
             l, "GET /sessions must list exactly %s", sid);
    json_object_put(l);
    sggw_delete_session(stack.gw, tok, sid);
    free(sid);

    /* Example Usage: create, numpy, clean up */
    sid = numpy_session(tok, path, sizeof(path));
    sggw_delete_session(stack.gw, tok, sid);
    SG_CHECK(!sggw_lists(stack.gw, tok, sid), NULL, "%s is still listed after DELETE", sid);
    free(sid);
    free(tok);
}

int main(void)
{
    return SG_RUN_TESTS("gateway_api", group_setup, sggw_stack_group_teardown, NULL, after_test, test_auth_matrix,
                        test_admin_changes_reach_gateway, test_reply_headers_well_formed, test_create_then_use_at_once,
                        test_cross_tenant, test_seed003_examples, test_seed000_examples);
}
