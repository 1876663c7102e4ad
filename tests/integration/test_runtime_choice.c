/*
 * test_runtime_choice.c — a runtime per request and per tenant (README
 * "Runtimes"): the proxy's session create and one-shot execute take
 * "runtime" (runc | runsc; unknown 400 invalid_runtime, one the engine
 * lacks 503 runtime_unavailable); its warm pool is kept per language and
 * runtime, so that a session never gets a container of another runtime; a
 * tenant pinned to a runtime gets it through the gateway (container label
 * and HostConfig.Runtime checked on the engine), an unpinned one the
 * proxy's default, a client cannot choose, and a change of the pin applies
 * to new sessions only; the metrics of both tiers carry the runtime.
 *
 * One stack for the suite: a proxy whose default is runc (set here,
 * whatever the environment says) with SANDGATE_POOL_SIZE=1, and a gateway
 * on it. The engine's runsc is the other runtime; where the engine lacks
 * it, the tests check that asking for it is refused as it must be.
 */
#include "sggw.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REMOVAL_S 20.0
#define FILL_S 90.0 /* a pool is full within this (runsc containers start slower) */

static sggw_stack_t stack;
static int engine_runsc; /* whether the engine offers runsc */

static int group_setup(void **state)
{
    static const char *const proxy_env[] = {"SANDGATE_RUNTIME=runc", "SANDGATE_POOL_SIZE=1", NULL};
    sggw_stack_opts_t o = {.redis = false, .proxy_env = proxy_env};
    if (sggw_stack_start(&stack, &o) != 0)
        return -1;
    sgtest_reply_t r;
    if (sgtest_call(stack.proxy, "GET", "/health", NULL, &r) != 0 || r.status != 200) {
        fprintf(stderr, "GET /health of the proxy failed\n");
        sgtest_reply_free(&r);
        return -1;
    }
    json_object *h = json_tokener_parse(r.body), *rts;
    sgtest_reply_free(&r);
    engine_runsc =
        h != NULL && json_object_object_get_ex(h, "runtimes", &rts) && sgtest_json_array_has_string(rts, "runsc");
    json_object_put(h);
    fprintf(stderr, "the engine %s runsc\n", engine_runsc ? "offers" : "does not offer");
    *state = &stack;
    return 0;
}

/* ---- helpers ---- */

/* The runtime of a session's container, as the engine has it: HostConfig.Runtime
 * and the sandgate.runtime label must agree and be `want`. Returns its
 * sandgate.kind label ("pool" or "session"; malloc'd) and its id (*cid,
 * malloc'd, when cid is not NULL). */
static char *expect_container_runtime(const char *sid, const char *want, char **cid)
{
    char *id = sgtest_docker_session_container(stack.proxy_id, sid);
    SG_CHECK(id != NULL, NULL, "no container for session %s", sid);
    json_object *c = sgtest_docker_inspect(id, NULL);
    SG_CHECK(c != NULL, NULL, "cannot inspect the container of %s", sid);
    json_object *hrt = sgtest_jpath(c, "HostConfig.Runtime"), *labels = sgtest_jpath(c, "Config.Labels");
    json_object *lrt = NULL, *kind = NULL;
    if (labels != NULL) {
        json_object_object_get_ex(labels, "sandgate.runtime", &lrt);
        json_object_object_get_ex(labels, "sandgate.kind", &kind);
    }
    SG_CHECK(hrt != NULL && strcmp(json_object_get_string(hrt), want) == 0, c, "HostConfig.Runtime is not %s", want);
    SG_CHECK(lrt != NULL && strcmp(json_object_get_string(lrt), want) == 0, c, "label sandgate.runtime is not %s",
             want);
    SG_CHECK(kind != NULL, c, "no sandgate.kind label");
    char *k = strdup(json_object_get_string(kind));
    json_object_put(c);
    if (cid != NULL)
        *cid = id;
    else
        free(id);
    return k;
}

/* The pool containers of lang on runtime that the engine lists (ready or
 * starting, or taken by a session since). */
static char **pool_containers(const char *lang, const char *runtime)
{
    char p[128], l[64], r[64];
    snprintf(p, sizeof(p), "sandgate.proxy=%s", stack.proxy_id);
    snprintf(l, sizeof(l), "sandgate.lang=%s", lang);
    snprintf(r, sizeof(r), "sandgate.runtime=%s", runtime);
    const char *labels[] = {p, "sandgate.kind=pool", l, r, NULL};
    char **v = sgtest_docker_ids(labels);
    SG_CHECK(v != NULL, NULL, "cannot list containers");
    return v;
}

static char *proxy_metrics(void)
{
    sgtest_reply_t r;
    sgtest_call(stack.proxy, "GET", "/metrics", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    char *text = strdup(r.body);
    sgtest_reply_free(&r);
    return text;
}

/* Polls the proxy's metrics until the sample has value want. */
static void wait_metric(const char *name, const char *labels, double want, double timeout_s)
{
    double deadline = sgtest_now() + timeout_s, v;
    for (;;) {
        char *text = proxy_metrics();
        v = sggw_metric(text, name, labels);
        free(text);
        if (v == want)
            return;
        SG_CHECK(sgtest_now() < deadline, NULL, "%s{%s} is %g, not %g, after %.0f s", name, labels, v, want, timeout_s);
        usleep(100 * 1000);
    }
}

static char *proxy_session(const char *body, const char *want_runtime)
{
    json_object *o = SG_CALL_JSON(stack.proxy, "POST", "/sessions", body, 200);
    SG_CHECK(strcmp(SG_STR(o, "runtime"), want_runtime) == 0, o, "the session's runtime is not %s", want_runtime);
    return SG_TAKE_ID(o, "session_id", NULL);
}

static void proxy_close(char *sid)
{
    sgtest_close_session(stack.proxy, stack.proxy_id, sid, NULL, REMOVAL_S);
    free(sid);
}

/* ---- the proxy ---- */

static void test_proxy_field(void **state)
{
    /* refused: not runc or runsc, whatever the shape */
    static const char *const bad[] = {
        "{\"lang\":\"python\",\"runtime\":\"kata\"}",
        "{\"lang\":\"python\",\"runtime\":\"RUNSC\"}",
        "{\"lang\":\"python\",\"runtime\":\"\"}",
        "{\"lang\":\"python\",\"runtime\":5}",
        "{\"lang\":\"python\",\"runtime\":[\"runc\"]}",
        "{\"lang\":\"python\",\"runtime\":\"runsc\\u0000\"}",
        "{\"lang\":\"python\",\"runtime\":\"io.containerd.runc.v2\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        SG_CALL_ERROR(stack.proxy, "POST", "/sessions", bad[i], 400, "invalid_runtime");
        SG_CALL_ERROR(stack.proxy, "POST", "/execute", bad[i], 400, "invalid_runtime");
    }
    SG_CHECK(sgtest_docker_count(stack.proxy_id) >= 0, NULL, "docker");

    /* absent or null: the proxy's default, runc here */
    char *sid = proxy_session("{\"lang\":\"python\"}", "runc");
    free(expect_container_runtime(sid, "runc", NULL));
    proxy_close(sid);
    sid = proxy_session("{\"lang\":\"python\",\"runtime\":null}", "runc");
    proxy_close(sid);

    json_object *h = SG_CALL_JSON(stack.proxy, "GET", "/health", NULL, 200);
    SG_CHECK(strcmp(SG_STR(h, "runtime"), "runc") == 0, h, "the default is runc");
    json_object_put(h);

    if (!engine_runsc) {
        SG_CALL_ERROR(stack.proxy, "POST", "/sessions", "{\"lang\":\"python\",\"runtime\":\"runsc\"}", 503,
                      "runtime_unavailable");
        SG_CALL_ERROR(stack.proxy, "POST", "/execute", "{\"lang\":\"python\",\"code\":\"1\",\"runtime\":\"runsc\"}",
                      503, "runtime_unavailable");
        return;
    }
    /* a one-shot run on runsc: gVisor's kernel answers, and the result says so */
    json_object *r = SG_CALL_JSON(
        stack.proxy, "POST", "/execute",
        "{\"lang\":\"python\",\"runtime\":\"runsc\",\"code\":\"import platform; print(platform.release())\"}", 200);
    SG_CHECK(strcmp(SG_STR(r, "runtime"), "runsc") == 0, r, "the result's runtime");
    sgtest_expect_ok(r, "4.4.0\n");
    r = SG_CALL_JSON(stack.proxy, "POST", "/execute",
                     "{\"lang\":\"python\",\"code\":\"import platform; print(platform.release())\"}", 200);
    SG_CHECK(strcmp(SG_STR(r, "runtime"), "runc") == 0, r, "the default one-shot runs on runc");
    SG_CHECK(strcmp(SG_STR(r, "stdout"), "4.4.0\n") != 0, r, "runc runs on the host's kernel");
    json_object_put(r);
}

/* The pools are per language and runtime: the other runtime's fills only
 * once asked for, and for the language asked for; each session gets a
 * container of its own runtime from its own pool. */
static void test_pools_do_not_mix(void **state)
{
    if (!engine_runsc) {
        print_message("the engine lacks runsc: one runtime, one pool\n");
        return;
    }
    /* runc, the default, fills from the start; runsc's javascript pool not
     * before a request names both: the first such session is made cold,
     * then the pool fills */
    wait_metric("sandgate_proxy_pool_ready", "lang=\"python\",runtime=\"runc\"", 1, FILL_S);
    char **js_runsc = pool_containers("javascript", "runsc");
    SG_CHECK(sgtest_strv_len(js_runsc) == 0, NULL, "a runsc javascript pool filled before anyone asked for one");
    sgtest_strv_free(js_runsc);
    char *sid = proxy_session("{\"lang\":\"javascript\",\"runtime\":\"runsc\"}", "runsc");
    char *kind = expect_container_runtime(sid, "runsc", NULL);
    SG_CHECK(strcmp(kind, "session") == 0, NULL, "the first runsc javascript session came from a pool (%s)", kind);
    free(kind);
    proxy_close(sid);
    wait_metric("sandgate_proxy_pool_ready", "lang=\"javascript\",runtime=\"runsc\"", 1, FILL_S);
    char **runc_pool = pool_containers("python", "runc");

    /* runsc python (asked for before, or now) */
    proxy_close(proxy_session("{\"lang\":\"python\",\"runtime\":\"runsc\"}", "runsc"));
    wait_metric("sandgate_proxy_pool_ready", "lang=\"python\",runtime=\"runsc\"", 1, FILL_S);
    char **runsc_pool = pool_containers("python", "runsc");
    SG_CHECK(sgtest_strv_len(runsc_pool) >= 1, NULL, "no runsc python pool container");

    /* a runsc session takes the runsc one, and leaves runc's alone */
    char *cid = NULL;
    sid = proxy_session("{\"lang\":\"python\",\"runtime\":\"runsc\"}", "runsc");
    kind = expect_container_runtime(sid, "runsc", &cid);
    SG_CHECK(strcmp(kind, "pool") == 0, NULL, "the runsc session was made cold (%s) with a runsc pool ready", kind);
    SG_CHECK(sgtest_strv_has(runsc_pool, cid), NULL, "the runsc session got a container outside the runsc pool");
    free(kind);
    free(cid);
    for (size_t i = 0; runc_pool[i] != NULL; i++)
        SG_CHECK(sgtest_docker_exists(runc_pool[i]) == 1, NULL, "a runc pool container went for a runsc session");
    /* its kernel was started by the pool, and it keeps state */
    json_object *r = sgtest_run_code(stack.proxy, sid, "x = 41", NULL, 0, NULL);
    SG_CHECK(strcmp(SG_STR(r, "state"), "kept") == 0, r, "the pooled runsc kernel was not started");
    json_object_put(r);
    sgtest_expect_ok(sgtest_run_code(stack.proxy, sid, "print(x + 1)", NULL, 0, NULL), "42\n");
    wait_metric("sandgate_proxy_live_sessions", "runtime=\"runsc\"", 1, 5);

    /* a runc session takes runc's, never the runsc container that refills */
    char *sid2 = proxy_session("{\"lang\":\"python\",\"runtime\":\"runc\"}", "runc");
    kind = expect_container_runtime(sid2, "runc", &cid);
    SG_CHECK(strcmp(kind, "pool") == 0, NULL, "the runc session was made cold (%s) with a runc pool ready", kind);
    SG_CHECK(sgtest_strv_has(runc_pool, cid), NULL, "the runc session got a container outside the runc pool");
    free(kind);
    free(cid);
    wait_metric("sandgate_proxy_live_sessions", "runtime=\"runc\"", 1, 5);

    char *text = proxy_metrics();
    SG_CHECK(sggw_metric(text, "sandgate_proxy_executions_total",
                         "lang=\"python\",runtime=\"runsc\",outcome=\"success\"") >= 2,
             NULL, "executions on runsc are not counted as such:\n%s", text);
    free(text);
    proxy_close(sid);
    proxy_close(sid2);
    sgtest_strv_free(runc_pool);
    sgtest_strv_free(runsc_pool);

    /* the container cap counts exactly what the engine holds, pools of both
     * runtimes included, once the refills are done */
    wait_metric("sandgate_proxy_pool_ready", "lang=\"python\",runtime=\"runsc\"", 1, FILL_S);
    wait_metric("sandgate_proxy_pool_ready", "lang=\"python\",runtime=\"runc\"", 1, FILL_S);
    double deadline = sgtest_now() + REMOVAL_S;
    for (;;) {
        json_object *h = SG_CALL_JSON(stack.proxy, "GET", "/health", NULL, 200);
        int64_t held = SG_INT(h, "containers");
        json_object_put(h);
        int listed = sgtest_docker_count(stack.proxy_id);
        if (held == listed)
            break;
        SG_CHECK(sgtest_now() < deadline, NULL, "the proxy counts %lld containers, the engine lists %d",
                 (long long)held, listed);
        usleep(100 * 1000);
    }
}

/* SANDGATE_POOL_RUNTIMES warms the listed runtimes' pools from the start;
 * a name that is not a runtime stops the proxy from starting. */
static void test_pool_runtimes_setting(void **state)
{
    char *id = sgtest_new_proxy_id();
    const char *bad[] = {"SANDGATE_RUNTIME=runc", "SANDGATE_POOL_RUNTIMES=runc,kata", NULL};
    sgtest_proxy_t *p = sgtest_proxy_start(id, bad);
    SG_CHECK(p == NULL, NULL, "SANDGATE_POOL_RUNTIMES=runc,kata must not start");
    free(id);
    if (!engine_runsc)
        return;
    id = sgtest_new_proxy_id();
    const char *env[] = {"SANDGATE_RUNTIME=runc", "SANDGATE_POOL_SIZE=1", "SANDGATE_POOL_RUNTIMES=runsc", NULL};
    p = sgtest_proxy_start(id, env);
    SG_CHECK(p != NULL, NULL, "the proxy did not start with SANDGATE_POOL_RUNTIMES=runsc");
    char pl[128];
    snprintf(pl, sizeof(pl), "sandgate.proxy=%s", id);
    const char *labels[] = {pl, "sandgate.kind=pool", "sandgate.lang=javascript", "sandgate.runtime=runsc", NULL};
    int got = sgtest_docker_wait_count(labels, 1, FILL_S);
    sgtest_proxy_stop(p);
    sgtest_docker_remove_all(id);
    free(id);
    SG_CHECK(got == 1, NULL, "no runsc javascript pool container without a request (%d)", got);
}

/* ---- the gateway ---- */

static const char *data_dir(void)
{
    return sggw_gateway_data_dir(stack.gw);
}

static char *gw_session(const char *tok, const char *want)
{
    json_object *o = NULL;
    char *sid = sggw_create_session(stack.gw, tok, "{\"lang\":\"python\"}", &o);
    SG_CHECK(strcmp(SG_STR(o, "runtime"), want) == 0, o, "the gateway's session is not on %s", want);
    json_object_put(o);
    free(expect_container_runtime(sid, want, NULL));
    char path[128];
    pathf(path, sizeof(path), "/sessions/%s", sid);
    o = SGGW_CALL_JSON(stack.gw, tok, "GET", path, NULL, 200);
    SG_CHECK(strcmp(SG_STR(o, "runtime"), want) == 0, o, "the gateway's session details");
    json_object_put(o);
    char *row =
        sggw_db_row(data_dir(), "SELECT runtime FROM sessions WHERE id = ?1", (const char *const[]){sid, NULL}, NULL);
    SG_CHECK(row != NULL && strcmp(row, want) == 0, NULL, "the session's record says %s", row ? row : "nothing");
    free(row);
    return sid;
}

/* Polls the gateway's metrics until the sample is at least min. */
static void gw_wait_metric(const char *name, const char *labels, double min, double timeout_s)
{
    double deadline = sgtest_now() + timeout_s, v;
    for (;;) {
        sgtest_reply_t r;
        sggw_call(stack.gw, NULL, "GET", "/metrics", NULL, &r);
        SG_ASSERT_STATUS(&r, 200);
        v = sggw_metric(r.body, name, labels);
        sgtest_reply_free(&r);
        if (v >= min)
            return;
        SG_CHECK(sgtest_now() < deadline, NULL, "the gateway's %s{%s} is %g, not at least %g", name, labels, v, min);
        usleep(100 * 1000);
    }
}

static void test_gateway_tenants(void **state)
{
    /* pinned with sandgate-admin, with the admin API, and not at all */
    char *tok_runsc = sggw_new_tenant(data_dir(), "rt-runsc", (const char *const[]){"runtime=runsc", NULL});
    json_object *t =
        SGGW_ADMIN_JSON(stack.gw, "POST", "/admin/tenants", "{\"name\":\"rt-runc\",\"runtime\":\"runc\"}", 201);
    SG_CHECK(strcmp(SG_STR(t, "runtime"), "runc") == 0, t, "the admin API's tenant");
    json_object_put(t);
    char *tok_runc = sggw_new_token(data_dir(), "rt-runc");
    char *tok_free = sggw_new_tenant(data_dir(), "rt-free", NULL);
    t = SGGW_ADMIN_JSON(stack.gw, "GET", "/admin/tenants/rt-free", NULL, 200);
    json_object *v = NULL;
    SG_CHECK(json_object_object_get_ex(t, "runtime", &v) && v == NULL, t, "an unpinned tenant's runtime is null");
    json_object_put(t);

    /* invalid values: 400 on every path, nothing changed */
    SGGW_ADMIN_ERROR(stack.gw, "POST", "/admin/tenants", "{\"name\":\"rt-bad\",\"runtime\":\"kata\"}", 400,
                     "bad_field");
    SGGW_ADMIN_ERROR(stack.gw, "GET", "/admin/tenants/rt-bad", NULL, 404, NULL);
    SGGW_ADMIN_ERROR(stack.gw, "PATCH", "/admin/tenants/rt-runc", "{\"runtime\":5}", 400, "bad_field");
    SGGW_ADMIN_ERROR(stack.gw, "PATCH", "/admin/tenants/rt-runc", "{\"runtime\":\"runsc,runc\"}", 400, "bad_field");
    char *out = NULL;
    SG_CHECK(sggw_admin(data_dir(), &out, "tenant", "set", "rt-runc", "runtime=gvisor", NULL) == 1, NULL,
             "sandgate-admin took runtime=gvisor");
    free(out);
    t = SGGW_ADMIN_JSON(stack.gw, "GET", "/admin/tenants/rt-runc", NULL, 200);
    SG_CHECK(strcmp(SG_STR(t, "runtime"), "runc") == 0, t, "a refused change changed the tenant");
    json_object_put(t);

    /* a client does not choose */
    SGGW_CALL_ERROR(stack.gw, tok_free, "POST", "/sessions", "{\"lang\":\"python\",\"runtime\":\"runsc\"}", 400,
                    "runtime_not_allowed");
    SGGW_CALL_ERROR(stack.gw, tok_runsc, "POST", "/execute",
                    "{\"lang\":\"python\",\"code\":\"1\",\"runtime\":\"runc\"}", 400, "runtime_not_allowed");

    if (!engine_runsc) {
        SGGW_CALL_ERROR(stack.gw, tok_runsc, "POST", "/sessions", "{\"lang\":\"python\"}", 503, "runtime_unavailable");
    } else {
        char *sid = gw_session(tok_runsc, "runsc");
        sgtest_expect_ok(sggw_execute(stack.gw, tok_runsc, sid, "import platform; print(platform.release())", 0),
                         "4.4.0\n");
        sggw_delete_session(stack.gw, tok_runsc, sid);
        free(sid);
        json_object *r = sggw_post_result(
            stack.gw, tok_runsc, "/execute",
            json_tokener_parse("{\"lang\":\"python\",\"code\":\"import platform; print(platform.release())\"}"));
        SG_CHECK(strcmp(SG_STR(r, "runtime"), "runsc") == 0, r, "a pinned tenant's one-shot run");
        sgtest_expect_ok(r, "4.4.0\n");
    }
    char *sid_free = gw_session(tok_free, "runc");
    char *sid_runc = gw_session(tok_runc, "runc");

    /* re-pinned: new sessions only */
    if (engine_runsc) {
        t = SGGW_ADMIN_JSON(stack.gw, "PATCH", "/admin/tenants/rt-runc", "{\"runtime\":\"runsc\"}", 200);
        SG_CHECK(strcmp(SG_STR(t, "runtime"), "runsc") == 0, t, "patched");
        json_object_put(t);
        char *sid_new = gw_session(tok_runc, "runsc");
        free(expect_container_runtime(sid_runc, "runc", NULL));
        /* the gateway's live sessions by runtime (from the session records) */
        gw_wait_metric("sandgate_live_sessions_by_runtime", "runtime=\"runsc\"", 1, 10);
        gw_wait_metric("sandgate_live_sessions_by_runtime", "runtime=\"runc\"", 2, 10);
        sgtest_expect_ok(sggw_execute(stack.gw, tok_runc, sid_runc, "print(7)", 0), "7\n");
        sggw_delete_session(stack.gw, tok_runc, sid_new);
        free(sid_new);
    }
    /* and back to the proxy's default with null */
    t = SGGW_ADMIN_JSON(stack.gw, "PATCH", "/admin/tenants/rt-runc", "{\"runtime\":null}", 200);
    SG_CHECK(json_object_object_get_ex(t, "runtime", &v) && v == NULL, t, "null unpins");
    json_object_put(t);
    char *sid_back = gw_session(tok_runc, "runc");

    /* the gateway's metrics count executions by runtime */
    sgtest_reply_t r;
    sggw_call(stack.gw, NULL, "GET", "/metrics", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    if (engine_runsc)
        SG_CHECK(sggw_metric(r.body, "sandgate_executions_total",
                             "lang=\"python\",outcome=\"success\",runtime=\"runsc\"") >= 2,
                 NULL, "the gateway's runsc executions:\n%s", r.body);
    SG_CHECK(sggw_metric(r.body, "sandgate_executions_total", "lang=\"python\",outcome=\"success\",runtime=\"runc\"") >=
                 1,
             NULL, "the gateway's runc executions:\n%s", r.body);
    sgtest_reply_free(&r);

    sggw_delete_session(stack.gw, tok_runc, sid_back);
    sggw_delete_session(stack.gw, tok_runc, sid_runc);
    sggw_session_done(stack.gw, tok_free, sid_free);
    free(sid_back);
    free(sid_runc);
    free(tok_runc);
    free(tok_runsc);
}

int main(void)
{
    return SG_RUN_TESTS("runtime_choice", group_setup, sggw_stack_group_teardown, NULL, sggw_stack_teardown,
                        test_proxy_field, test_pools_do_not_mix, test_pool_runtimes_setting, test_gateway_tenants);
}
