/*
 * test_gateway_redis.c — the gateway and its Redis: the documented key
 * schema (state.h; dashboards read it), and every kind of outage: Redis
 * killed (and started again on the same port, empty, without its scripts),
 * SCRIPT FLUSH under a running gateway, Redis hung (SIGSTOP), Redis down
 * when the gateway starts.
 *
 * The documented policies during an outage: GET / and authenticated
 * requests are served (the rate limit fails open), executions in existing
 * sessions run (the daily quota fails open: the SQLite ledger still records
 * them), creating a session is refused with 503 state_unavailable (the
 * session cap cannot be kept without the shared count). When Redis is back
 * everything works again without a gateway restart.
 *
 * Real components: a private redis-server (killed, stopped, started again
 * by the tests), a sandgate-gateway, its SQLite file, a sandgate-proxy.
 */
#include "sggw.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RECOVER_S 15.0 /* the gateway reconnects with a backoff of at most 5 s */

static sggw_stack_t stack;

static const char *data_dir(void)
{
    return sggw_gateway_data_dir(stack.gw);
}

static char *rcmd(sggw_redis_t *r, const char *fmt, const char *a, const char *b)
{
    int ok;
    char *v = sggw_redis_cmd(r, &ok, fmt, a, b);
    SG_CHECK(ok, NULL, "redis: %s failed: %s", fmt, v ? v : "no answer");
    return v;
}

/* Field f of hash key as an integer (asserts it is one). */
static int64_t hget_int(sggw_redis_t *r, const char *key, const char *f)
{
    char *v = rcmd(r, "HGET %s %s", key, f);
    SG_CHECK(v != NULL && *v != '\0' && strspn(v, "0123456789-") == strlen(v), NULL, "HGET %s %s is \"%s\"", key, f,
             v ? v : "(nil)");
    int64_t n = atoll(v);
    free(v);
    return n;
}

/* Polls (up to 2 s) until key of redis r exists (there) or is gone. */
static void wait_key(sggw_redis_t *r, const char *key, bool there)
{
    double deadline = sgtest_now() + 2;
    for (;;) {
        char *v = rcmd(r, "EXISTS %s", key, NULL);
        bool done = v != NULL && strcmp(v, there ? "1" : "0") == 0;
        free(v);
        if (done)
            return;
        SG_CHECK(sgtest_now() < deadline, NULL, "%s %s 2 s after the reply", key,
                 there ? "does not exist" : "is still there");
        usleep(10000);
    }
}

static double zscore(sggw_redis_t *r, const char *key, const char *member)
{
    char *v = rcmd(r, "ZSCORE %s %s", key, member);
    SG_CHECK(v != NULL, NULL, "%s does not hold %s", key, member);
    double d = strtod(v, NULL);
    free(v);
    return d;
}

/* Polls POST /sessions until it is answered 200 (returns the id) or
 * timeout_s pass; every answer meanwhile must be 503 state_unavailable. */
static char *create_when_back(sggw_gateway_t *g, const char *tok, double timeout_s, double *took)
{
    double t0 = sgtest_now(), deadline = t0 + timeout_s;
    for (;;) {
        sgtest_reply_t r;
        sggw_call(g, tok, "POST", "/sessions", "{\"lang\":\"python\"}", &r);
        if (r.status == 200) {
            json_object *o = SG_EXPECT_JSON(&r, 200);
            char *sid = strdup(SG_STR(o, "session_id"));
            json_object_put(o);
            sgtest_reply_free(&r);
            if (took != NULL)
                *took = sgtest_now() - t0;
            return sid;
        }
        SG_TAKE_ERROR(&r, 503, "state_unavailable");
        SG_CHECK(sgtest_now() < deadline, NULL, "session creation did not work again within %.0f s", timeout_s);
        usleep(200000);
    }
}

static void admin_close(const char *sid)
{
    char path[128];
    sgtest_reply_t r;
    pathf(path, sizeof(path), "/admin/sessions/%s", sid);
    sggw_admin_call(stack.gw, "DELETE", path, NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
}

/* n sequential GET /sessions: how many were allowed (200) and limited (429). */
static void count_rate(sggw_gateway_t *g, const char *tok, int n, int *ok, int *limited)
{
    *ok = *limited = 0;
    for (int i = 0; i < n; i++) {
        sgtest_reply_t r;
        sggw_call(g, tok, "GET", "/sessions", NULL, &r);
        if (r.status == 200)
            (*ok)++;
        else if (r.status == 429)
            (*limited)++;
        else
            SG_ASSERT_STATUS(&r, 200);
        sgtest_reply_free(&r);
    }
}

/* ------------------------------------------------------------------------
 * Fixtures
 * ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
    *state = &stack;
    return sggw_stack_start_pool(&stack, true, 2);
}

/* After every test: Redis runs again (a test may have killed or stopped
 * it), the gateway and the proxy lived through it. */
static int after_test(void **state)
{
    sggw_after_test();
    int rc = 0;
    sggw_redis_resume(stack.redis);
    if (!sggw_redis_running(stack.redis) && sggw_redis_restart(stack.redis) != 0)
        rc = -1;
    return sggw_stack_after_test(&stack) != 0 ? -1 : rc;
}

/* ------------------------------------------------------------------------
 * The key schema
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_key_schema)
{
    /* rate_per_min=6: each request moves the GCRA time 10 s on, so the rate
     * key (which expires when that time is reached) outlives the checks
     * below however slow the machine; at the default 600 it lived 100 ms
     * past the last request, and a loaded machine read it gone */
    const char *q[] = {"idle_timeout=300", "max_lifetime=3600", "rate_per_min=6", NULL};
    char *tok = sggw_new_tenant(data_dir(), "schema", q);
    int64_t tid = sggw_tenant_id(data_dir(), "schema");
    char key[128], tkey[128], stid[32];
    snprintf(stid, sizeof(stid), "%lld", (long long)tid);

    int64_t before = (int64_t)sggw_wall();
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    int64_t after = (int64_t)sggw_wall() + 1;

    /* sg:session:<sid> HASH tenant, lang, created_at, last_used_at,
     * idle_deadline, lifetime_deadline, executions. It is written right
     * after the reply (the gateway does not wait for Redis): poll briefly. */
    pathf(key, sizeof(key), "sg:session:%s", sid);
    wait_key(stack.redis, key, true);
    char *type = rcmd(stack.redis, "TYPE %s", key, NULL);
    SG_CHECK(type != NULL && strcmp(type, "hash") == 0, NULL, "%s must be a hash (is %s)", key, type ? type : "?");
    free(type);
    SG_CHECK(hget_int(stack.redis, key, "tenant") == tid, NULL, "%s tenant", key);
    char *lang = rcmd(stack.redis, "HGET %s %s", key, "lang");
    SG_CHECK(lang != NULL && strcmp(lang, "python") == 0, NULL, "%s lang must be python", key);
    free(lang);
    int64_t created = hget_int(stack.redis, key, "created_at");
    SG_CHECK(created >= before && created <= after, NULL, "%s created_at %lld not in [%lld, %lld]", key,
             (long long)created, (long long)before, (long long)after);
    SG_CHECK(hget_int(stack.redis, key, "last_used_at") == created, NULL, "last_used_at of a new session");
    int64_t idle = hget_int(stack.redis, key, "idle_deadline");
    int64_t life = hget_int(stack.redis, key, "lifetime_deadline");
    SG_CHECK(idle == created + 300, NULL, "idle_deadline must be created_at + idle_timeout");
    SG_CHECK(life == created + 3600, NULL, "lifetime_deadline must be created_at + max_lifetime");
    SG_CHECK(hget_int(stack.redis, key, "executions") == 0, NULL, "executions of a new session");

    /* the indexes: per-tenant set scored by lifetime, idle and lifetime zsets */
    pathf(tkey, sizeof(tkey), "sg:tenant:%s:sessions", stid);
    SG_CHECK(zscore(stack.redis, tkey, sid) == (double)life, NULL, "%s must score %s by its lifetime deadline", tkey,
             sid);
    SG_CHECK(zscore(stack.redis, "sg:sessions:idle", sid) == (double)idle, NULL, "sg:sessions:idle score");
    SG_CHECK(zscore(stack.redis, "sg:sessions:lifetime", sid) == (double)life, NULL, "sg:sessions:lifetime score");
    char *card = rcmd(stack.redis, "ZCARD %s", tkey, NULL);
    SG_CHECK(card != NULL && strcmp(card, "1") == 0, NULL, "%s must hold exactly the one session (no reservation left)",
             tkey);
    free(card);

    /* a use moves last_used_at, the idle deadline and the count */
    sleep(1); /* deadlines are whole seconds: let one pass so the move shows */
    json_object_put(sggw_execute(stack.gw, tok, sid, "print(1)", 0));
    double deadline = sgtest_now() + 2;
    while (hget_int(stack.redis, key, "executions") != 1) {
        SG_CHECK(sgtest_now() < deadline, NULL, "%s executions is not 1 2 s after an execute", key);
        usleep(10000);
    }
    int64_t used = hget_int(stack.redis, key, "last_used_at");
    SG_CHECK(used > created, NULL, "last_used_at must move on a use");
    SG_CHECK(hget_int(stack.redis, key, "idle_deadline") == used + 300, NULL, "idle_deadline = last_used_at + 300");
    SG_CHECK(zscore(stack.redis, "sg:sessions:idle", sid) == (double)(used + 300), NULL, "the idle index follows");
    SG_CHECK(hget_int(stack.redis, key, "lifetime_deadline") == life, NULL, "a use does not move the lifetime");

    /* sg:rate:<tid> STRING (GCRA time, ms) with an expiry */
    char rkey[64];
    pathf(rkey, sizeof(rkey), "sg:rate:%s", stid);
    type = rcmd(stack.redis, "TYPE %s", rkey, NULL);
    SG_CHECK(type != NULL && strcmp(type, "string") == 0, NULL, "%s must be a string (is %s)", rkey, type ? type : "?");
    free(type);
    char *tat = rcmd(stack.redis, "GET %s", rkey, NULL);
    SG_CHECK(tat != NULL && strspn(tat, "0123456789") == strlen(tat) && atoll(tat) > before * 1000LL, NULL,
             "%s must hold a time in ms (is %s)", rkey, tat ? tat : "(nil)");
    free(tat);
    char *pttl = rcmd(stack.redis, "PTTL %s", rkey, NULL);
    SG_CHECK(pttl != NULL && atoll(pttl) > 0, NULL, "%s must expire (PTTL %s)", rkey, pttl ? pttl : "?");
    free(pttl);

    /* sg:quota:<tid>:<yyyymmdd> HASH execs, seconds; expires within 3 days
     * (the seconds are added after the reply: poll) */
    char day[16], qkey[96];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(day, sizeof(day), "%Y%m%d", &tm);
    pathf(qkey, sizeof(qkey), "sg:quota:%s:%s", stid, day);
    SG_CHECK(hget_int(stack.redis, qkey, "execs") == 1, NULL, "%s execs must be 1", qkey);
    char *secs = NULL;
    deadline = sgtest_now() + 2;
    for (;;) {
        secs = rcmd(stack.redis, "HGET %s %s", qkey, "seconds");
        if ((secs != NULL && strtod(secs, NULL) > 0) || sgtest_now() > deadline)
            break;
        free(secs);
        usleep(10000);
    }
    SG_CHECK(secs != NULL && strtod(secs, NULL) > 0, NULL, "%s seconds must be > 0 (is %s)", qkey,
             secs ? secs : "(nil)");
    free(secs);
    char *ttl = rcmd(stack.redis, "TTL %s", qkey, NULL);
    SG_CHECK(ttl != NULL && atoll(ttl) > 0 && atoll(ttl) <= 3 * 86400, NULL, "%s TTL %s must be in (0, 3 days]", qkey,
             ttl ? ttl : "?");
    free(ttl);

    /* closed: no trace (removed right after the reply: poll briefly) */
    sggw_delete_session(stack.gw, tok, sid);
    deadline = sgtest_now() + 2;
    for (;;) {
        char *ex = rcmd(stack.redis, "EXISTS %s", key, NULL);
        bool gone = ex != NULL && strcmp(ex, "0") == 0;
        free(ex);
        if (gone)
            break;
        SG_CHECK(sgtest_now() < deadline, NULL, "%s must be gone after DELETE", key);
        usleep(10000);
    }
    const char *zs[] = {tkey, "sg:sessions:idle", "sg:sessions:lifetime"};
    for (int i = 0; i < 3; i++) {
        char *v = rcmd(stack.redis, "ZSCORE %s %s", zs[i], sid);
        SG_CHECK(v == NULL, NULL, "%s still holds %s after DELETE", zs[i], sid);
    }
    free(sid);
    free(tok);
}

/* ------------------------------------------------------------------------
 * 10. Redis killed, then started again (empty, without scripts)
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_redis_outage)
{
    const char *q[] = {"rate_per_min=60", "burst=5", NULL};
    char *tok = sggw_new_tenant(data_dir(), "outage", q);
    sgtest_reply_t r;
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    json_object_put(sggw_execute(stack.gw, tok, sid, "x = 'before'", 0));

    sggw_redis_kill(stack.redis);

    /* served: GET /, and (rate limit open) more requests than the burst */
    sggw_call(stack.gw, NULL, "GET", "/", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    int ok, limited;
    count_rate(stack.gw, tok, 8, &ok, &limited);
    SG_CHECK(ok == 8, NULL, "with Redis down the rate limit fails open: 8 of 8 expected, %d allowed, %d limited", ok,
             limited);
    /* executions in the existing session run, and are recorded */
    json_object *o = sggw_execute(stack.gw, tok, sid, "print(x)", 0);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "before\n") == 0, o, "the session must still work");
    json_object_put(o);
    json_object_put(
        sggw_post_result(stack.gw, tok, "/execute", json_tokener_parse("{\"code\":\"print(1)\",\"lang\":\"python\"}")));
    /* creating a session: 503 state_unavailable */
    SGGW_CALL_ERROR(stack.gw, tok, "POST", "/sessions", "{\"lang\":\"python\"}", 503, "state_unavailable");
    /* metrics say so */
    sggw_call(stack.gw, NULL, "GET", "/metrics", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    SG_CHECK(sggw_metric(r.body, "sandgate_redis_up", "") == 0, NULL, "sandgate_redis_up must be 0");
    sgtest_reply_free(&r);

    /* back, empty, on the same port: creating works again */
    SG_CHECK(sggw_redis_restart(stack.redis) == 0, NULL, "cannot start redis-server again on port %d",
             sggw_redis_port(stack.redis));
    double took = 0;
    char *sid2 = create_when_back(stack.gw, tok, RECOVER_S, &took);
    /* the scripts were loaded again: the rate limit applies once more (the
     * new Redis starts with a full bucket of 5; the create took one) */
    count_rate(stack.gw, tok, 8, &ok, &limited);
    SG_CHECK(ok >= 4 && ok <= 5 && ok + limited == 8, NULL,
             "after Redis came back the burst of 5 must apply again: %d allowed, %d limited (create after %.1f s)", ok,
             limited, took);
    sggw_call(stack.gw, NULL, "GET", "/metrics", NULL, &r);
    SG_CHECK(sggw_metric(r.body, "sandgate_redis_up", "") == 1, NULL, "sandgate_redis_up must be 1 again");
    sgtest_reply_free(&r);

    /* the ledger has every execution, those during the outage included */
    sggw_expect_ledger_execs(data_dir(), "outage", 3, 5);

    /* clean up through the admin API (the tenant's bucket is empty now) */
    admin_close(sid2);
    admin_close(sid);
    free(sid2);
    free(sid);
    free(tok);
}

/* README: "session timeouts: the reaper waits for Redis; sessions are
 * closed when it returns", and Redis "holds only what can be rebuilt". A
 * session opened before Redis was lost (restarted empty: no persistence)
 * is still closed by its idle timeout once Redis is back. */
SGGW_TEST(test_timeouts_survive_redis_restart)
{
    char *sid, *tok = sggw_tenant_session(stack.gw, "rebuilt", sggw_idle_2s, &sid);
    char *cid = sgtest_docker_session_container(stack.proxy_id, sid);
    SG_CHECK(cid != NULL, NULL, "no container for %s", sid);

    sggw_redis_kill(stack.redis);
    SG_CHECK(sggw_redis_restart(stack.redis) == 0, NULL, "cannot start redis-server again");
    char *probe = create_when_back(stack.gw, tok, RECOVER_S, NULL);
    admin_close(probe);
    free(probe);

    /* idle since its creation: closed within 2 s + slack of Redis being back */
    double deadline = sgtest_now() + 2 + 5;
    while (sggw_lists(stack.gw, tok, sid)) {
        SG_CHECK(sgtest_now() < deadline, NULL,
                 "session %s (idle_timeout 2) is still open 7 s after Redis came back (it was restarted empty)", sid);
        usleep(100000);
    }
    SG_CHECK(sgtest_docker_wait_gone(cid, 15, NULL) == 0, NULL, "the container of %s remains", sid);
    const char *params[] = {sid, NULL};
    char *row = sggw_db_row(data_dir(), "SELECT close_reason FROM sessions WHERE id = ?1", params, NULL);
    SG_CHECK(row != NULL && strcmp(row, "idle") == 0, NULL, "close_reason \"%s\", expected \"idle\"",
             row ? row : "(no row)");
    free(row);
    free(cid);
    free(sid);
    free(tok);
}

/* ------------------------------------------------------------------------
 * Scripts flushed under a running gateway
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_script_flush)
{
    const char *q[] = {"rate_per_min=6", "burst=3", "execs_per_day=1000", NULL};
    char *tok = sggw_new_tenant(data_dir(), "flush", q);
    int ok;

    char *v = sggw_redis_cmd(stack.redis, &ok, "SCRIPT FLUSH");
    SG_CHECK(ok, NULL, "SCRIPT FLUSH failed");
    free(v);
    /* every script of the gateway is needed again: reserve + commit, touch,
     * quota, rate */
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    v = sggw_redis_cmd(stack.redis, &ok, "SCRIPT FLUSH");
    free(v);
    json_object *o = sggw_execute(stack.gw, tok, sid, "print('after flush')", 0);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "after flush\n") == 0, o, "execute after SCRIPT FLUSH");
    json_object_put(o);
    /* two requests used, one left of the burst of 3 */
    v = sggw_redis_cmd(stack.redis, &ok, "SCRIPT FLUSH");
    free(v);
    int allowed, limited;
    count_rate(stack.gw, tok, 3, &allowed, &limited);
    SG_CHECK(allowed == 1 && limited == 2, NULL,
             "burst 3 after 2 requests: 1 allowed and 2 limited expected, got %d and %d", allowed, limited);
    /* the counters are the real ones, not fresh: the record counted the execute */
    char key[128];
    pathf(key, sizeof(key), "sg:session:%s", sid);
    SG_CHECK(hget_int(stack.redis, key, "executions") == 1, NULL, "%s executions must be 1", key);

    /* the tenant's bucket is empty: close through the admin API */
    admin_close(sid);
    free(sid);
    free(tok);
}

/* ------------------------------------------------------------------------
 * Redis hung (SIGSTOP)
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_redis_hang)
{
    char *sid, *tok = sggw_tenant_session(stack.gw, "hang", NULL, &sid);
    sgtest_reply_t r;

    SG_CHECK(sggw_redis_pause(stack.redis) == 0, NULL, "SIGSTOP redis-server");
    /* the loop does not wait for Redis */
    sggw_call(stack.gw, NULL, "GET", "/", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    SG_CHECK(r.seconds < 0.5, NULL, "GET / took %.2f s while Redis hangs", r.seconds);
    sgtest_reply_free(&r);
    /* a request that needs Redis is answered, within its 2 s command timeout */
    sggw_call(stack.gw, tok, "GET", "/sessions", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    SG_CHECK(r.seconds < 5, NULL, "GET /sessions took %.2f s while Redis hangs", r.seconds);
    sgtest_reply_free(&r);
    sggw_call(stack.gw, tok, "POST", "/sessions", "{\"lang\":\"python\"}", &r);
    json_object_put(SG_EXPECT_ERROR(&r, 503, "state_unavailable"));
    SG_CHECK(r.seconds < 5, NULL, "POST /sessions took %.2f s while Redis hangs", r.seconds);
    sgtest_reply_free(&r);
    json_object *o = sggw_execute(stack.gw, tok, sid, "print('still')", 0);
    json_object_put(o);

    SG_CHECK(sggw_redis_resume(stack.redis) == 0, NULL, "SIGCONT redis-server");
    char *sid2 = create_when_back(stack.gw, tok, RECOVER_S, NULL);
    sggw_delete_session(stack.gw, tok, sid2);
    sggw_delete_session(stack.gw, tok, sid);
    free(sid2);
    free(sid);
    free(tok);
}

/* ------------------------------------------------------------------------
 * Redis down when the gateway starts
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_redis_down_at_start)
{
    stack.extra_redis = sggw_redis_start();
    SG_CHECK(stack.extra_redis != NULL, NULL, "cannot start a second redis-server");
    sggw_redis_kill(stack.extra_redis);
    sggw_opts_t opts = {.proxy_url = stack.proxy_url, .redis_url = sggw_redis_url(stack.extra_redis)};
    sggw_gateway_t *g = stack.extra_gw = sggw_gateway_start(&opts);
    SG_CHECK(g != NULL, NULL, "the gateway must start (and answer GET /) while its Redis is down");
    char *tok = sggw_new_tenant(sggw_gateway_data_dir(g), "late-redis", NULL);
    sgtest_reply_t r;
    sggw_call(g, tok, "GET", "/sessions", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    SGGW_CALL_ERROR(g, tok, "POST", "/sessions", "{\"lang\":\"python\"}", 503, "state_unavailable");

    SG_CHECK(sggw_redis_restart(stack.extra_redis) == 0, NULL, "cannot start the second redis-server");
    char *sid = create_when_back(g, tok, RECOVER_S, NULL);
    sggw_delete_session(g, tok, sid);
    /* the record goes right after the reply; stop once it has (a stop with
     * a Redis call in flight is test_shutdown_with_redis_call_in_flight) */
    char skey[96];
    pathf(skey, sizeof(skey), "sg:session:%s", sid);
    wait_key(stack.extra_redis, skey, false); /* after DELETE */
    free(sid);
    free(tok);
    sggw_stack_stop_extra(&stack, "the gateway");
}

/* ------------------------------------------------------------------------
 * Shutdown while a Redis call is in flight
 * ------------------------------------------------------------------------ */

/* SIGTERM while a request waits for Redis (hung): the gateway completes
 * what is in flight (state.h: sg_state_destroy completes pending calls with
 * available = 0) and exits with status 0 — whatever those completions do. */
SGGW_TEST(test_shutdown_with_redis_call_in_flight)
{
    stack.extra_redis = sggw_redis_start();
    SG_CHECK(stack.extra_redis != NULL, NULL, "cannot start a second redis-server");
    sggw_opts_t opts = {.proxy_url = stack.proxy_url, .redis_url = sggw_redis_url(stack.extra_redis)};
    sggw_gateway_t *g = stack.extra_gw = sggw_gateway_start(&opts);
    SG_CHECK(g != NULL, NULL, "cannot start a gateway");
    char *warm = sggw_new_tenant(sggw_gateway_data_dir(g), "in-flight-warm", NULL);
    char *tok = sggw_new_tenant(sggw_gateway_data_dir(g), "in-flight", NULL);
    sgtest_reply_t r;
    sggw_call(g, warm, "GET", "/sessions", NULL, &r); /* connected, scripts loaded */
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    free(warm);

    SG_CHECK(sggw_redis_pause(stack.extra_redis) == 0, NULL, "SIGSTOP redis-server");
    char url[256];
    pathf(url, sizeof(url), "%s/sessions", sggw_gateway_url(g));
    /* a create, the first request of its tenant: Redis decides its
     * admission (alone on its Redis, the gateway decides from its copy of a
     * tenant once it has one: another tenant warmed the connection) */
    sggw_par_req_t q = sggw_par_post(url, tok, "{\"lang\":\"python\"}", 30);
    sggw_batch_t *b = sggw_batch_start(&q, 1);
    SG_CHECK(b != NULL, NULL, "cannot start a thread");
    /* the token check takes a millisecond; then the request waits on the
     * stopped Redis for its 2 s command timeout */
    usleep(500000);
    bool in_flight = q.finished == 0;
    stack.extra_gw = NULL;
    int st = sggw_gateway_stop(g);
    sggw_batch_join(b);
    sgtest_reply_free(&q.reply);
    SG_CHECK(in_flight, NULL, "the request was answered before the stop (the hang did not hold it)");
    SG_CHECK(st == 0, NULL, "SIGTERM with a Redis call in flight: the gateway must exit with status 0 (wait status %d)",
             st);
    free(tok);
}

int main(void)
{
    return SG_RUN_TESTS("gateway_redis", group_setup, sggw_stack_group_teardown, NULL, after_test, test_key_schema,
                        test_redis_outage, test_timeouts_survive_redis_restart, test_script_flush, test_redis_hang,
                        test_redis_down_at_start, test_shutdown_with_redis_call_in_flight);
}
