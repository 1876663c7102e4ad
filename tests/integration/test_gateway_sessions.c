/*
 * test_gateway_sessions.c — the session timeouts the gateway owns (idle and
 * maximum lifetime), what closing a session leaves behind (nothing: no
 * container, no Redis record, a closed SQLite row with its reason), the
 * admin's force-close, and a gateway restart (tenants, tokens, usage and
 * open sessions survive it; timeouts still apply afterwards).
 *
 * Real components: a private redis-server, sandgate-gateway processes on
 * it (SANDGATE_REAPER_INTERVAL_MS=200), their SQLite files, a sandgate-proxy
 * (small warm pool) on the Docker engine. Tenants get timeouts of a few
 * seconds so the whole file runs in well under a minute.
 */
#include "sggw.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REAP_SLACK_S 3.0 /* a session is closed within its deadline + this */
#define REMOVAL_S 15.0

static sggw_stack_t stack;
/* a test's own gateway and data directory; after_test cleans them up */

static const char *data_dir(void)
{
    return sggw_gateway_data_dir(stack.gw);
}

/* Polls (every 50 ms, without using the session) until the gateway no
 * longer has sid live; returns the wall time it was first seen gone, or
 * fails after timeout_s. */
static double wait_closed(sggw_gateway_t *g, const char *tenant, const char *sid, double timeout_s)
{
    double deadline = sgtest_now() + timeout_s;
    while (sggw_admin_lists(g, tenant, sid)) {
        SG_CHECK(sgtest_now() < deadline, NULL, "session %s is still live after %.1f s", sid, timeout_s);
        usleep(50000);
    }
    return sggw_wall();
}

/* No trace of sid in Redis. */
static void expect_redis_clean(const char *sid, int64_t tenant_id)
{
    int ok;
    char *v = sggw_redis_cmd(stack.redis, &ok, "EXISTS sg:session:%s", sid);
    SG_CHECK(ok && v != NULL && strcmp(v, "0") == 0, NULL, "sg:session:%s still exists", sid);
    free(v);
    const char *zsets[] = {"sg:sessions:idle", "sg:sessions:lifetime"};
    for (int i = 0; i < 2; i++) {
        v = sggw_redis_cmd(stack.redis, &ok, "ZSCORE %s %s", zsets[i], sid);
        SG_CHECK(ok && v == NULL, NULL, "%s still holds %s", zsets[i], sid);
    }
    v = sggw_redis_cmd(stack.redis, &ok, "ZSCORE sg:tenant:%lld:sessions %s", (long long)tenant_id, sid);
    SG_CHECK(ok && v == NULL, NULL, "sg:tenant:%lld:sessions still holds %s", (long long)tenant_id, sid);
}

static void expect_container_gone(char *cid, const char *sid)
{
    SG_CHECK(cid != NULL, NULL, "session %s had no container", sid);
    SG_CHECK(sgtest_docker_wait_gone(cid, REMOVAL_S, NULL) == 0, NULL,
             "the container %s of closed session %s still exists %.0f s later", cid, sid, REMOVAL_S);
}

/* An execute in a closed session: 404, like one that never existed. */
static void expect_gone_for_client(sggw_gateway_t *g, const char *tok, const char *sid)
{
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    SGGW_CALL_ERROR(g, tok, "POST", path, "{\"code\":\"print(1)\"}", 404, NULL);
    SG_CHECK(!sggw_lists(g, tok, sid), NULL, "GET /sessions still lists closed session %s", sid);
}

/* Sleeps until the wall clock's fraction of a second is `frac`. */
static void align_wall(double frac)
{
    double w = sggw_wall();
    double wait = frac - (w - (double)(int64_t)w);
    if (wait < 0.05)
        wait += 1;
    usleep((useconds_t)(wait * 1e6));
}

/* ------------------------------------------------------------------------
 * Fixtures
 * ------------------------------------------------------------------------ */

static sggw_gateway_t *start_gateway(const char *dir, const char *redis_url)
{
    sggw_opts_t o = {.proxy_url = sgtest_proxy_url(stack.proxy), .redis_url = redis_url, .data_dir = dir};
    return sggw_gateway_start(&o);
}

static int group_setup(void **state)
{
    *state = &stack;
    return sggw_stack_start_pool(&stack, true, 2);
}

static int after_test(void **state)
{
    return sggw_stack_after_test(&stack);
}

/* ------------------------------------------------------------------------
 * 8. Idle timeout
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_idle_timeout_closes)
{
    char *tok = sggw_new_tenant(data_dir(), "idle", sggw_idle_2s);
    int64_t tid = sggw_tenant_id(data_dir(), "idle");

    json_object *created = NULL;
    char *sid = sggw_create_session(stack.gw, tok, NULL, &created);
    SG_CHECK(SG_INT(created, "idle_timeout") == 2, created, "the reply must say idle_timeout 2");
    json_object_put(created);
    /* the record reaches Redis right after the answer (written before it) */
    char *v = sggw_redis_poll(stack.redis, 5, "HGET sg:session:%s tenant", sid);
    SG_CHECK(v != NULL && atoll(v) == tid, NULL, "sg:session:%s names tenant %s, not %lld", sid,
             v != NULL ? v : "(none)", (long long)tid);
    free(v);
    double t0 = sggw_wall();
    char *cid = sgtest_docker_session_container(stack.proxy_id, sid);
    SG_CHECK(cid != NULL, NULL, "no container labelled sandgate.session=%s", sid);

    /* the reaper closes it: unlisted, container gone, Redis clean, row closed "idle" */
    double deadline = sgtest_now() + 2 + REAP_SLACK_S;
    while (sggw_lists(stack.gw, tok, sid)) {
        SG_CHECK(sgtest_now() < deadline, NULL, "session %s is still listed %.1f s after its last use (idle 2 s)", sid,
                 sggw_wall() - t0);
        usleep(50000);
    }
    expect_container_gone(cid, sid);
    sggw_expect_db_closed(data_dir(), sid, "idle");
    expect_redis_clean(sid, tid);
    SG_CHECK(!sggw_admin_lists(stack.gw, "idle", sid), NULL, "the admin API still lists %s", sid);
    expect_gone_for_client(stack.gw, tok, sid);
    free(cid);
    free(sid);
    free(tok);
}

/* Every use pushes the idle deadline: executes, commands and file uploads. */
SGGW_TEST(test_use_keeps_session)
{
    char *sid, *tok = sggw_tenant_session(stack.gw, "busy", sggw_idle_2s, &sid);
    char path[256];
    sgtest_reply_t r;

    /* 4.5 s of use, one every 0.5 s: more than twice the idle timeout.
     * (Deadlines are whole seconds: a gap of a whole second may cost one.) */
    double end = sgtest_now() + 4.5;
    int i = 0;
    while (sgtest_now() < end) {
        if (i % 3 == 0) {
            json_object *o = sggw_execute(stack.gw, tok, sid, "print('tick')", 0);
            json_object_put(o);
        } else if (i % 3 == 1) {
            pathf(path, sizeof(path), "/sessions/%s/commands", sid);
            json_object_put(sggw_post_result(stack.gw, tok, path, json_tokener_parse("{\"command\":\"true\"}")));
        } else {
            pathf(path, sizeof(path), "/sessions/%s/files?path=t.txt", sid);
            sggw_call(stack.gw, tok, "PUT", path, "tick", &r);
            SG_ASSERT_STATUS(&r, 200);
            sgtest_reply_free(&r);
        }
        i++;
        usleep(500000);
    }
    SG_CHECK(sggw_lists(stack.gw, tok, sid), NULL, "a session used every 0.5 s was closed (idle 2 s)");
    SG_CHECK(sggw_admin_lists(stack.gw, "busy", sid), NULL, "a session used every 0.5 s is no longer live");
    sggw_delete_session(stack.gw, tok, sid);
    sggw_expect_db_closed(data_dir(), sid, "deleted");
    free(sid);
    free(tok);
}

/* A run longer than the idle timeout is not idleness: the execution in
 * flight holds the session (its slot's lease names it), with Redis and
 * without; once it has ended, the idle timeout counts from its end. */
static void long_run_not_idle(sggw_gateway_t *g, const char *dir, const char *tenant)
{
    const char *q[] = {"idle_timeout=2", "max_lifetime=600", NULL};
    char *tok = sggw_new_tenant(dir, tenant, q);
    char *sid = sggw_create_session(g, tok, NULL, NULL);
    json_object_put(sggw_execute(g, tok, sid, "x = 41", 0));

    /* 5 s of one execution, more than twice the idle timeout, and a
     * command of 4 s after it */
    json_object *o = sggw_execute(g, tok, sid, "import time\ntime.sleep(5)\nx += 1\nprint(x)", 20);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "42\n") == 0, o, "a 5 s execution in a session idle after 2 s must finish");
    json_object_put(o);
    SG_CHECK(sggw_admin_lists(g, tenant, sid), NULL, "the session was closed while an execution ran in it (idle 2 s)");
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s/commands", sid);
    o = sggw_post_result(g, tok, path, json_tokener_parse("{\"command\":\"sleep 4; echo slept\",\"timeout\":20}"));
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "slept\n") == 0, o, "a 4 s command must finish");
    json_object_put(o);
    o = sggw_execute(g, tok, sid, "print(x)", 0);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "42\n") == 0, o, "the session's state must be there after the long runs");
    json_object_put(o);

    /* left alone now, it is closed by its idle timeout */
    double deadline = sgtest_now() + 2 + REAP_SLACK_S;
    while (sggw_admin_lists(g, tenant, sid)) {
        SG_CHECK(sgtest_now() < deadline, NULL, "session %s is still open %.0f s after its last run ended (idle 2 s)",
                 sid, 2 + REAP_SLACK_S);
        usleep(50000);
    }
    sggw_expect_db_closed(dir, sid, "idle");
    free(sid);
    free(tok);
}

SGGW_TEST(test_long_run_not_idle)
{
    long_run_not_idle(stack.gw, data_dir(), "long-run");
}

SGGW_TEST(test_long_run_not_idle_memory)
{
    stack.extra_dir = sggw_mkdtemp("sggw-long-mem");
    SG_CHECK(stack.extra_dir != NULL, NULL, "mkdtemp");
    stack.extra_gw = start_gateway(stack.extra_dir, NULL);
    SG_CHECK(stack.extra_gw != NULL, NULL, "cannot start a gateway without Redis");
    long_run_not_idle(stack.extra_gw, stack.extra_dir, "long-run-mem");
    sggw_stack_stop_extra(&stack, "gateway without Redis");
}

/* ------------------------------------------------------------------------
 * 8. Maximum lifetime
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_lifetime_closes_even_when_used)
{
    const char *q[] = {"idle_timeout=60", "max_lifetime=3", NULL};
    char *tok = sggw_new_tenant(data_dir(), "lifetime", q);
    int64_t tid = sggw_tenant_id(data_dir(), "lifetime");
    double t0 = sggw_wall();
    json_object *created = NULL;
    char *sid = sggw_create_session(stack.gw, tok, NULL, &created);
    int64_t expires = SG_INT(created, "expires_at");
    SG_CHECK(expires >= (int64_t)t0 + 3 - 1 && expires <= (int64_t)t0 + 3 + 1, created,
             "expires_at must be creation + 3 s");
    json_object_put(created);
    char *cid = sgtest_docker_session_container(stack.proxy_id, sid);
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);

    /* used every 0.3 s until it is gone */
    double closed_at = 0;
    while (closed_at == 0) {
        SG_CHECK(sggw_wall() - t0 < 3 + REAP_SLACK_S, NULL, "session %s still runs %.1f s after creation (lifetime 3)",
                 sid, sggw_wall() - t0);
        sgtest_reply_t r;
        sggw_call(stack.gw, tok, "POST", path, "{\"code\":\"print(1)\"}", &r);
        /* 404 once it is closed; an execution in flight when the lifetime
         * ends is cut, and says so */
        if (r.status == 404 || (r.status == 502 && r.body != NULL && strstr(r.body, "\"sandbox_failed\"") != NULL &&
                                strstr(r.body, "the session was closed while this operation ran") != NULL))
            closed_at = sggw_wall();
        else
            SG_ASSERT_STATUS(&r, 200);
        sgtest_reply_free(&r);
        usleep(300000);
    }
    SG_CHECK(closed_at - t0 > 1.0, NULL, "closed after %.2f s, long before its lifetime of 3 s", closed_at - t0);
    expect_container_gone(cid, sid);
    sggw_expect_db_closed(data_dir(), sid, "lifetime");
    expect_redis_clean(sid, tid);
    free(cid);
    free(sid);
    free(tok);
}

/* A session is closed no earlier than its timeouts say: idle 2 s after the
 * last use, 2 s of lifetime after creation — whatever the fraction of the
 * second at which that use or creation happened. */
SGGW_TEST(test_deadlines_not_early)
{
    char *sid, *tok = sggw_tenant_session(stack.gw, "not-early", sggw_idle_2s, &sid);
    align_wall(0.85);
    json_object_put(sggw_execute(stack.gw, tok, sid, "print('last use')", 0));
    double used = sggw_wall(); /* the gateway saw the use no later than this */
    double gone = wait_closed(stack.gw, "not-early", sid, 2 + REAP_SLACK_S);
    SG_CHECK(gone - used >= 2.0 - 0.1, NULL, "idle_timeout 2: closed %.2f s after its last use", gone - used);
    free(sid);

    const char *q2[] = {"idle_timeout=600", "max_lifetime=2", NULL};
    sggw_tenant_set(data_dir(), "not-early", q2);
    align_wall(0.85);
    double asked = sggw_wall(); /* the gateway created it no earlier than this */
    sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    gone = wait_closed(stack.gw, "not-early", sid, 2 + REAP_SLACK_S);
    SG_CHECK(gone - asked >= 2.0 - 0.1, NULL, "max_lifetime 2: closed %.2f s after it was created", gone - asked);
    free(sid);
    free(tok);
}

/* ------------------------------------------------------------------------
 * The admin's force-close
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_admin_force_close)
{
    char *tok = sggw_new_tenant(data_dir(), "forced", NULL);
    int64_t tid = sggw_tenant_id(data_dir(), "forced");
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    char *cid = sgtest_docker_session_container(stack.proxy_id, sid);
    char path[256];

    pathf(path, sizeof(path), "/admin/sessions/%s", sid);
    json_object *o = SGGW_ADMIN_JSON(stack.gw, "DELETE", path, NULL, 200);
    SG_CHECK(strcmp(SG_STR(o, "status"), "closed") == 0, o, "force-close answers {\"status\":\"closed\"}");
    json_object_put(o);
    expect_container_gone(cid, sid);
    sggw_expect_db_closed(data_dir(), sid, "admin");
    expect_redis_clean(sid, tid);
    expect_gone_for_client(stack.gw, tok, sid);
    /* again: it is no longer live */
    SGGW_ADMIN_ERROR(stack.gw, "DELETE", path, NULL, 404, NULL);
    free(cid);
    free(sid);
    free(tok);
}

/* ------------------------------------------------------------------------
 * 12. A gateway restart
 * ------------------------------------------------------------------------ */

static void wait_usage(sggw_gateway_t *g, const char *tenant, int64_t want)
{
    char path[128];
    pathf(path, sizeof(path), "/admin/usage?tenant=%s", tenant);
    double deadline = sgtest_now() + 5;
    for (;;) {
        json_object *o = SGGW_ADMIN_JSON(g, "GET", path, NULL, 200);
        int64_t n = SG_INT(o, "executions");
        json_object_put(o);
        if (n == want)
            return;
        SG_CHECK(n < want && sgtest_now() < deadline, NULL, "the ledger shows %lld executions, expected %lld",
                 (long long)n, (long long)want);
        usleep(100000);
    }
}

/* With Redis: tenants, tokens, usage and the open session survive; the
 * session is still closed when idle afterwards. (A Redis of its own:
 * gateways that share a Redis must share the SQLite file too — tenant ids
 * are the keys — and the group's gateway has another file.) */
SGGW_TEST(test_restart_keeps_state)
{
    stack.extra_dir = sggw_mkdtemp("sggw-restart");
    SG_CHECK(stack.extra_dir != NULL, NULL, "mkdtemp");
    stack.extra_redis = sggw_redis_start();
    SG_CHECK(stack.extra_redis != NULL, NULL, "cannot start a redis-server");
    sggw_gateway_t *a = stack.extra_gw = start_gateway(stack.extra_dir, sggw_redis_url(stack.extra_redis));
    SG_CHECK(a != NULL, NULL, "cannot start gateway A");
    const char *q[] = {"idle_timeout=4", "max_lifetime=600", NULL};
    char *tok = sggw_new_tenant(stack.extra_dir, "restart", q);
    char *sid = sggw_create_session(a, tok, NULL, NULL);
    json_object_put(sggw_execute(a, tok, sid, "x = 41", 0));
    json_object_put(sggw_execute(a, tok, sid, "print(x + 1)", 0));
    wait_usage(a, "restart", 2);

    sggw_stack_stop_extra(&stack, "gateway A");
    sggw_gateway_t *b = stack.extra_gw = start_gateway(stack.extra_dir, sggw_redis_url(stack.extra_redis));
    SG_CHECK(b != NULL, NULL, "cannot start gateway B on the same data directory");

    /* the same token, the same session and its interpreter state */
    SG_CHECK(sggw_lists(b, tok, sid), NULL, "after the restart, GET /sessions must still list %s", sid);
    json_object *o = sggw_execute(b, tok, sid, "print(x + 1)", 0);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "42\n") == 0, o, "the session's state must have survived");
    json_object_put(o);
    wait_usage(b, "restart", 3);
    char *out = NULL;
    SG_CHECK(sggw_admin(stack.extra_dir, &out, "usage", "restart", NULL) == 0, NULL, "usage failed");
    SG_CHECK(strstr(out, "executions=3 ") != NULL, NULL, "sandgate-admin usage must say executions=3:\n%s", out);
    free(out);
    sgtest_reply_t r;
    sggw_admin_call(b, "GET", "/admin/tenants/restart", NULL, &r);
    o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    SG_CHECK(SG_INT(o, "idle_timeout") == 4, o, "the tenant's quotas survive");
    json_object_put(o);

    /* and its timeout still applies */
    char *cid = sgtest_docker_session_container(stack.proxy_id, sid);
    wait_closed(b, "restart", sid, 4 + REAP_SLACK_S);
    expect_container_gone(cid, sid);
    sggw_expect_db_closed(stack.extra_dir, sid, "idle");
    free(cid);
    free(sid);
    free(tok);
    sggw_stack_stop_extra(&stack, "gateway B");
}

/* Without Redis (state in memory): after a restart the open session is
 * still listed and usable, still counts against max_sessions, and is still
 * closed when idle — a restart must not make sessions immortal. */
SGGW_TEST(test_restart_memory_state)
{
    stack.extra_dir = sggw_mkdtemp("sggw-restart-mem");
    SG_CHECK(stack.extra_dir != NULL, NULL, "mkdtemp");
    sggw_gateway_t *a = stack.extra_gw = start_gateway(stack.extra_dir, NULL);
    SG_CHECK(a != NULL, NULL, "cannot start gateway A");
    const char *q[] = {"idle_timeout=3", "max_lifetime=600", "max_sessions=1", NULL};
    char *tok = sggw_new_tenant(stack.extra_dir, "restart-mem", q);
    char *sid = sggw_create_session(a, tok, NULL, NULL);
    json_object_put(sggw_execute(a, tok, sid, "x = 7", 0));
    sggw_stack_stop_extra(&stack, "gateway A");
    sggw_gateway_t *b = stack.extra_gw = start_gateway(stack.extra_dir, NULL);
    SG_CHECK(b != NULL, NULL, "cannot start gateway B on the same data directory");

    SG_CHECK(sggw_lists(b, tok, sid), NULL, "after the restart, GET /sessions must still list %s", sid);
    json_object *o = sggw_execute(b, tok, sid, "print(x)", 0);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "7\n") == 0, o, "the session's state must have survived");
    json_object_put(o);

    /* left alone, it is closed by its idle timeout */
    char *cid = sgtest_docker_session_container(stack.proxy_id, sid);
    double deadline = sgtest_now() + 3 + REAP_SLACK_S;
    while (sggw_lists(b, tok, sid)) {
        SG_CHECK(sgtest_now() < deadline, NULL,
                 "after a restart without Redis, session %s is still open %.0f s after its last use (idle 3 s)", sid,
                 3 + REAP_SLACK_S);
        usleep(100000);
    }
    expect_container_gone(cid, sid);
    sggw_expect_db_closed(stack.extra_dir, sid, "idle");
    free(cid);
    free(sid);

    /* and the cap counts what was open before the restart */
    sid = sggw_create_session(b, tok, NULL, NULL);
    sggw_stack_stop_extra(&stack, "gateway B");
    sggw_gateway_t *c = stack.extra_gw = start_gateway(stack.extra_dir, NULL);
    SG_CHECK(c != NULL, NULL, "cannot start gateway C");
    sgtest_reply_t r;
    sggw_call(c, tok, "POST", "/sessions", "{\"lang\":\"python\"}", &r);
    if (r.status == 200) {
        json_object *made = SG_JSON(&r);
        sggw_delete_session(c, tok, SG_STR(made, "session_id"));
        json_object_put(made);
    }
    SG_CHECK(r.status == 429, NULL,
             "max_sessions 1 with a session open before the restart: a new create must get 429, got %ld", r.status);
    sgtest_reply_free(&r);
    sggw_session_done(c, tok, sid);
    sggw_stack_stop_extra(&stack, "gateway C");
}

int main(void)
{
    return SG_RUN_TESTS("gateway_sessions", group_setup, sggw_stack_group_teardown, NULL, after_test,
                        test_idle_timeout_closes, test_use_keeps_session, test_long_run_not_idle,
                        test_long_run_not_idle_memory, test_lifetime_closes_even_when_used, test_deadlines_not_early,
                        test_admin_force_close, test_restart_keeps_state, test_restart_memory_state);
}
