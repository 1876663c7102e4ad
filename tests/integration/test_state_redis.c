/*
 * test_state_redis.c — gateway/state/state.h's Redis backend against a real
 * redis-server (state_suite.h): bad and unreachable URLs, the documented
 * key schema, database selection, destroying with calls in flight, scripts
 * flushed under the gateway (NOSCRIPT), redis-server killed and started
 * again on the same port, redis-server stopped with SIGSTOP (a hang: calls
 * must still complete, with available = 0).
 *
 * The server is killed at the end, whatever failed (teardown, atexit, and
 * PR_SET_PDEATHSIG should this process die).
 */
#include <math.h>

#include "state_suite.h"
#include "sgrun.h"
#include "redis_int.h" /* MIRROR_BUCKETS */

/* ---- redis only ---------------------------------------------------------------------------- */

static void test_bad_urls(void **state)
{
    fixture_t *f = *state;
    static const char *const bad[] = {"",
                                      "127.0.0.1:6379",
                                      "http://127.0.0.1:6379",
                                      "redis://",
                                      "redis://:6379",
                                      "redis://127.0.0.1:0",
                                      "redis://127.0.0.1:65536",
                                      "redis://127.0.0.1:x",
                                      "redis://127.0.0.1:6379/x",
                                      "redis://127.0.0.1:6379/1/2",
                                      "redis://user:pw@127.0.0.1:6379",
                                      "redis://[::1:6379"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[256] = "";
        sg_state_t *st = sg_state_create_redis(f->loop, bad[i], err, sizeof(err));
        if (st != NULL)
            fail_msg("\"%s\" was accepted", bad[i]);
        assert_true(err[0] != '\0');
    }
}

static void test_unreachable(void **state)
{
    fixture_t *f = *state;
    int port = sgtest_free_port(); /* nobody listens there */
    char url[64], err[256];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    sg_state_t *st = sg_state_create_redis(f->loop, url, err, sizeof(err));
    assert_non_null(st);
    assert_string_equal(sg_state_backend(st), "redis");
    run_for(f, 0.3);
    assert_int_equal(sg_state_available(st), 0);

    double t0 = sgtest_now();
    rate_wait_t w = {0};
    sg_state_rate_check(st, 1, 60, 5, on_rate, &w);
    RUN_UNTIL(f, w.done, 3.0);
    assert_int_equal(w.r.available, 0);
    assert_false(w.r.allowed);
    get_wait_t g = {0};
    sg_state_session_get(st, "x", on_get, &g);
    RUN_UNTIL(f, g.done, 3.0);
    assert_int_equal(g.available, 0);
    quota_wait_t q = {0};
    sg_state_quota_reserve(st, 1, "20260102", 1, 1, on_quota, &q);
    RUN_UNTIL(f, q.done, 3.0);
    assert_int_equal(q.available, 0);
    assert_true(sgtest_now() - t0 < 1.0);
    sg_state_destroy(st);
}

/* A command's answer on a fresh connection to db 0 (caller frees); the
 * command must have been answered. */
static char *server_query(const char *fmt, const char *arg1, const char *arg2)
{
    int ok;
    char *v = sggw_redis_cmd(redis, &ok, fmt, arg1, arg2);
    assert_true(ok || v != NULL); /* an answer: a value, nil or an error */
    return ok ? v : (free(v), NULL);
}

static long long query_int(const char *fmt, const char *arg1, const char *arg2)
{
    char *v = server_query(fmt, arg1, arg2);
    long long n = v != NULL ? strtoll(v, NULL, 10) : LLONG_MIN;
    free(v);
    return n;
}

/* The text of a command's answer is want. */
static void query_is(const char *cmd, const char *key, const char *want)
{
    char *v = server_query(cmd, key, NULL);
    assert_non_null(v);
    assert_string_equal(v, want);
    free(v);
}

/* The keys dashboards read (state.h): names, types, scores, expiry. */
static void test_key_schema(void **state)
{
    fixture_t *f = *state;
    int64_t now = sg_wall_s();
    assert_int_equal(reserve(f, 42, 5, "tok-a").ok, 1);
    assert_int_equal(reserve(f, 42, 5, "tok-b").ok, 1);
    long long score = query_int("ZSCORE sg:tenant:42:sessions %s", "pending:tok-a", NULL);
    assert_true(score >= now + 120 && score <= now + 122);

    sg_live_session_t s = make_session(42, "python", now, 900, 14400);
    assert_int_equal(commit(f, "tok-a", &s).ok, 1);
    assert_int_equal(touch(f, s.id, now + 1, 900, 3).ok, 1);
    char key[64];
    snprintf(key, sizeof(key), "sg:session:%s", s.id);
    query_is("TYPE %s", key, "hash");
    assert_int_equal(query_int("HGET %s %s", key, "tenant"), 42);
    assert_int_equal(query_int("HGET %s %s", key, "created_at"), now);
    assert_int_equal(query_int("HGET %s %s", key, "last_used_at"), now + 1);
    assert_int_equal(query_int("HGET %s %s", key, "idle_deadline"), now + 901);
    assert_int_equal(query_int("HGET %s %s", key, "lifetime_deadline"), now + 14400);
    assert_int_equal(query_int("HGET %s %s", key, "executions"), 3);
    query_is("HGET %s lang", key, "python");
    assert_int_equal(query_int("ZSCORE sg:tenant:42:sessions %s", s.id, NULL), now + 14400);
    assert_int_equal(query_int("ZSCORE sg:tenant:42:sessions %s", "pending:tok-b", NULL), score);
    assert_int_equal(query_int("ZCARD sg:tenant:42:sessions", NULL, NULL), 2); /* tok-a became the session */
    assert_int_equal(query_int("ZSCORE sg:sessions:idle %s", s.id, NULL), now + 901);
    assert_int_equal(query_int("ZSCORE sg:sessions:lifetime %s", s.id, NULL), now + 14400);

    int64_t before_ms = (int64_t)sg_wall_s() * 1000;
    assert_true(rate(f, 42, 60, 5).allowed);
    long long tat = query_int("GET sg:rate:42", NULL, NULL);
    assert_true(tat >= before_ms && tat <= before_ms + 1000 + 2000);
    long long pttl = query_int("PTTL sg:rate:42", NULL, NULL);
    assert_true(pttl > 0 && pttl <= 1000);

    assert_int_equal(seed(f, 42, "20260102", 7, 2.5).ok, 1);
    assert_int_equal(query_int("HGET sg:quota:42:20260102 execs", NULL, NULL), 7);
    char *secs = server_query("HGET sg:quota:42:20260102 seconds", NULL, NULL);
    assert_non_null(secs);
    assert_near(strtod(secs, NULL), 2.5);
    free(secs);
    long long ttl = query_int("TTL sg:quota:42:20260102", NULL, NULL);
    assert_true(ttl > 3 * 86400 - 10 && ttl <= 3 * 86400);

    assert_int_equal(remove_session(f, s.id, 42).ok, 1);
    assert_int_equal(query_int("EXISTS %s", key, NULL), 0);
    snprintf(key, sizeof(key), "sg:closed:%s", s.id);
    ttl = query_int("TTL %s", key, NULL);
    assert_true(ttl > SG_STATE_CLOSED_TTL - 10 && ttl <= SG_STATE_CLOSED_TTL);
    assert_int_equal(query_int("ZCARD sg:tenant:42:sessions", NULL, NULL), 1);
    assert_int_equal(query_int("ZCARD sg:sessions:idle", NULL, NULL), 0);
    assert_int_equal(query_int("ZCARD sg:sessions:lifetime", NULL, NULL), 0);

    /* executions in flight: a zset of tokens scored by lease deadline,
     * expiring a minute after the last lease */
    assert_int_equal(exec_acquire(f, 42, 8, "run-1", 100).ok, 1);
    assert_int_equal(exec_acquire(f, 42, 8, "run-2", 40).ok, 1);
    query_is("TYPE %s", "sg:tenant:42:execs", "zset");
    score = query_int("ZSCORE sg:tenant:42:execs %s", "run-1", NULL);
    assert_true(score >= now + 100 && score <= now + 102);
    ttl = query_int("TTL sg:tenant:42:execs", NULL, NULL);
    assert_true(ttl > 100 + 60 - 10 && ttl <= 102 + 60); /* the key outlives its last lease by 60 s */
    assert_int_equal(exec_release(f, 42, "run-1").ok, 1);
    assert_int_equal(exec_release(f, 42, "run-2").ok, 1);
    assert_int_equal(query_int("EXISTS sg:tenant:42:execs", NULL, NULL), 0);
}

/* redis://host:port/<db> selects that database. */
static void test_db_select(void **state)
{
    fixture_t *f = *state;
    char url[64], err[256];
    snprintf(url, sizeof(url), "%s/5", sggw_redis_url(redis));
    sg_state_t *st5 = sg_state_create_redis(f->loop, url, err, sizeof(err));
    assert_non_null(st5);
    sg_state_t *st0 = f->st;
    f->st = st5;
    int up = wait_available(f, WAIT_S);
    if (up)
        up = seed(f, 7, "20260102", 1, 0).ok;
    f->st = st0;
    sg_state_destroy(st5);
    assert_true(up);
    assert_int_equal(query_int("EXISTS sg:quota:7:20260102", NULL, NULL), 0);
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", sggw_redis_port(redis), tv);
    assert_true(c != NULL && c->err == 0);
    redisReply *r = redisCommand(c, "SELECT 5");
    assert_non_null(r);
    freeReplyObject(r);
    r = redisCommand(c, "EXISTS sg:quota:7:20260102");
    assert_non_null(r);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    redisFree(c);
    /* and the default backend still sees db 0 only */
    assert_int_equal(quota(f, 7, "20260102", 5, 5).status, SG_QUOTA_UNSEEDED);
}

/* Destroying the backend with calls in flight completes them, at once. */
static void test_destroy_inflight(void **state)
{
    fixture_t *f = *state;
    state_wait_t w[5];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 5; i++)
        sg_state_session_reserve(f->st, 1301, 10, "x", on_state, &w[i]);
    h2o_evloop_run(f->loop, 0); /* sent, most likely not yet answered */
    sg_state_destroy(f->st);
    f->st = NULL;
    for (int i = 0; i < 5; i++)
        assert_int_equal(w[i].done, 1);
}

static void test_noscript(void **state)
{
    fixture_t *f = *state;
    assert_true(rate(f, 1001, 60, 3).allowed);
    assert_int_equal(reserve(f, 1001, 2, "a").ok, 1);

    assert_int_equal(server_command("SCRIPT FLUSH"), 0);
    /* EVALSHA now answers NOSCRIPT; the backend sends the script itself */
    sg_rate_result_t r = rate(f, 1001, 60, 3);
    assert_int_equal(r.available, 1);
    assert_true(r.allowed);
    assert_int_equal(r.remaining, 1);
    sg_state_result_t s = reserve(f, 1001, 2, "b");
    assert_int_equal(s.ok, 1);
    assert_int_equal(s.count, 2);

    /* flushed again with many calls in flight: all of them come through */
    assert_int_equal(server_command("SCRIPT FLUSH"), 0);
    state_wait_t w[10];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 10; i++)
        sg_state_session_reserve(f->st, 1002, 4, i % 2 ? "odd" : "even", on_state, &w[i]);
    int ok = 0;
    for (int i = 0; i < 10; i++)
        ok += check_state(f, &w[i]).ok;
    assert_int_equal(ok, 10); /* two tokens, re-reserved: 2 slots of 4 */
    assert_int_equal(w[9].r.count, 2);
    assert_int_equal(sg_state_available(f->st), 1);
}

/* Rate checks of tenant (each answered within call_s) until the backend
 * answers available again, for up to timeout_s: whether it did. */
static int wait_back(fixture_t *f, int64_t tenant, double timeout_s, double call_s)
{
    double t0 = sgtest_now();
    int back = 0;
    while (!back && sgtest_now() - t0 < timeout_s) {
        rate_wait_t w = {0};
        sg_state_rate_check(f->st, tenant, 60, 3, on_rate, &w);
        RUN_UNTIL(f, w.done, call_s);
        back = w.r.available;
        if (!back)
            run_for(f, 0.2);
    }
    return back;
}

static void test_redis_restart(void **state)
{
    fixture_t *f = *state;
    assert_true(rate(f, 1101, 60, 3).allowed);

    /* calls issued, then the server dies before they are even sent */
    state_wait_t inflight[5];
    memset(inflight, 0, sizeof(inflight));
    for (int i = 0; i < 5; i++)
        sg_state_session_reserve(f->st, 1101, 10, "x", on_state, &inflight[i]);
    sggw_redis_kill(redis);
    double t0 = sgtest_now();
    for (int i = 0; i < 5; i++) {
        RUN_UNTIL(f, inflight[i].done, 3.0);
        assert_int_equal(inflight[i].done, 1);
        assert_int_equal(inflight[i].r.available, 0);
    }
    assert_true(sgtest_now() - t0 < 3.0);
    assert_int_equal(sg_state_available(f->st), 0);

    /* while it is down, every call answers at once with available = 0 */
    for (int i = 0; i < 3; i++) {
        run_for(f, 0.3);
        t0 = sgtest_now();
        rate_wait_t w = {0};
        sg_state_rate_check(f->st, 1101, 60, 3, on_rate, &w);
        RUN_UNTIL(f, w.done, 3.0);
        assert_int_equal(w.r.available, 0);
        assert_true(sgtest_now() - t0 < 0.5);
        assert_int_equal(sg_state_available(f->st), 0);
    }

    /* back on the same port (empty: no persistence): calls work again */
    assert_int_equal(sggw_redis_restart(redis), 0);
    t0 = sgtest_now();
    assert_true(wait_back(f, 1101, 10.0, 3.0));
    fprintf(stderr, "    redis answered again %.2f s after its restart\n", sgtest_now() - t0);
    assert_int_equal(sg_state_available(f->st), 1);
    /* the scripts were loaded again (a new server has none) */
    assert_int_equal(reserve(f, 1101, 1, "y").ok, 1);
    assert_int_equal(reserve(f, 1101, 1, "z").ok, 0);
}

static void test_redis_hang(void **state)
{
    fixture_t *f = *state;
    assert_true(rate(f, 1201, 60, 3).allowed);

    assert_int_equal(sggw_redis_pause(redis), 0);
    double t0 = sgtest_now();
    state_wait_t w1 = {0}, w2 = {0};
    rate_wait_t w3 = {0};
    sg_state_session_reserve(f->st, 1201, 10, "x", on_state, &w1);
    sg_state_session_reserve(f->st, 1201, 10, "y", on_state, &w2);
    sg_state_rate_check(f->st, 1201, 60, 3, on_rate, &w3);
    RUN_UNTIL(f, w1.done && w2.done && w3.done, 3.5);
    double took = sgtest_now() - t0;
    fprintf(stderr, "    calls to a stopped redis answered after %.2f s\n", took);
    assert_int_equal(w1.r.available, 0);
    assert_int_equal(w2.r.available, 0);
    assert_int_equal(w3.r.available, 0);
    assert_true(took >= 1.5 && took < 3.5);
    assert_int_equal(sg_state_available(f->st), 0);

    /* while it hangs, calls do not queue up behind the dead connection */
    run_for(f, 0.2);
    t0 = sgtest_now();
    get_wait_t g = {0};
    sg_state_session_get(f->st, "x", on_get, &g);
    RUN_UNTIL(f, g.done, 3.5);
    assert_int_equal(g.available, 0);
    assert_true(sgtest_now() - t0 < 3.5);

    assert_int_equal(sggw_redis_resume(redis), 0);
    t0 = sgtest_now();
    assert_true(wait_back(f, 1201, 15.0, 3.5));
    fprintf(stderr, "    redis answered again %.2f s after SIGCONT\n", sgtest_now() - t0);
}

/* ---- solo (redis.c): the only gateway admits from its copy ------------------------------- */

static sg_state_redis_stats_t solo_of(sg_state_t *st)
{
    sg_state_redis_stats_t s;
    sg_state_redis_stats(st, &s);
    return s;
}

/* Runs the loop until st holds the lease (want 1) or not (0); the time it took. */
static double wait_solo(fixture_t *f, sg_state_t *st, int want, double timeout_s)
{
    double t0 = sgtest_now();
    while (solo_of(st).holds != want && sgtest_now() - t0 < timeout_s)
        h2o_evloop_run(f->loop, 5);
    if (solo_of(st).holds != want)
        fail_msg("the backend %s the solo lease after %.1f s", want ? "did not take" : "still holds", timeout_s);
    return sgtest_now() - t0;
}

static sg_admit_args_t admit_args(const char *token, long slots, const char *day, long per_day)
{
    sg_admit_args_t a = {.rate_per_min = 0,
                         .burst = 1,
                         .max_execs = slots,
                         .token = token,
                         .lease_s = 60,
                         .day = day,
                         .execs_per_day = per_day,
                         .seconds_per_day = 1000};
    return a;
}

/* An execution's end that touches sid (idle timeout 900 s) and counts one
 * execution; seconds < 0: none added. */
static sg_finish_args_t finish_args(const char *token, const char *sid, int64_t now, const char *day, double seconds)
{
    sg_finish_args_t a = {
        .token = token, .sid = sid, .now = now, .idle_timeout = 900, .add_exec = 1, .day = day, .seconds = seconds};
    return a;
}

static long redis_int(const char *cmd)
{
    int ok;
    char *v = sggw_redis_cmd(redis, &ok, cmd);
    long n = ok && v != NULL ? strtol(v, NULL, 10) : -1;
    free(v);
    return n;
}

/* Redis's own count of the calls of cmd (INFO commandstats), 0 if none yet. */
static long commandstat_calls(const char *cmd)
{
    int ok;
    char *v = sggw_redis_cmd(redis, &ok, "INFO commandstats");
    assert_true(ok && v != NULL);
    char field[64];
    snprintf(field, sizeof(field), "cmdstat_%s:calls=", cmd);
    const char *p = strstr(v, field);
    long n = p != NULL ? strtol(p + strlen(field), NULL, 10) : 0;
    free(v);
    return n;
}

/* Held: admissions are answered before the call returns (no round trip),
 * exactly as Redis answers them after, and Redis ends with the same keys. */
static void test_solo_admits_from_copy(void **state)
{
    fixture_t *f = *state;
    const char *day = "20260201";
    char tokens[12][32];
    admit_wait_t w[12];

    sg_state_redis_solo(f->st, 1);
    wait_solo(f, f->st, 1, 3.0);
    assert_int_equal(seed(f, 1301, day, 0, 0).ok, 1);
    memset(w, 0, sizeof(w));
    /* the first makes the copy (Redis decides it, the copy is read behind it) */
    snprintf(tokens[0], sizeof(tokens[0]), "t-0");
    sg_admit_args_t a = admit_args(tokens[0], 4, day, 6);
    sg_state_exec_admit(f->st, 1301, &a, on_admit, &w[0]);
    RUN_UNTIL(f, w[0].done, WAIT_S);
    run_for(f, 0.05); /* the seed's answer */
    uint64_t local0 = solo_of(f->st).local_admits;
    /* the next three at once are answered before the call returns */
    for (int i = 1; i < 4; i++) {
        snprintf(tokens[i], sizeof(tokens[i]), "t-%d", i);
        a = admit_args(tokens[i], 4, day, 6);
        sg_state_exec_admit(f->st, 1301, &a, on_admit, &w[i]);
        assert_int_equal(w[i].done, 1);
        assert_int_equal(w[i].r.slot, 1);
        assert_int_equal(w[i].r.in_flight, i + 1);
        assert_int_equal(w[i].r.execs, i + 1);
    }
    assert_int_equal(solo_of(f->st).local_admits, local0 + 3);
    /* the fifth is refused at the cap (4 slots), from the copy too: the
     * script goes behind it (its rate step), and Redis agrees */
    uint64_t refused0 = solo_of(f->st).local_refusals;
    snprintf(tokens[4], sizeof(tokens[4]), "t-4");
    a = admit_args(tokens[4], 4, day, 6);
    sg_state_exec_admit(f->st, 1301, &a, on_admit, &w[4]);
    assert_int_equal(w[4].done, 1);
    assert_int_equal(w[4].r.available, 1);
    assert_int_equal(w[4].r.rate.allowed, 1);
    assert_int_equal(w[4].r.slot, 0);
    assert_int_equal(w[4].r.in_flight, 4);
    assert_int_equal(solo_of(f->st).local_refusals, refused0 + 1);
    run_for(f, 0.05);
    assert_int_equal(solo_of(f->st).mismatches, 0);
    assert_int_equal(redis_int("ZCARD sg:tenant:1301:execs"), 4);
    /* two end (finish, release): two more fit, then the day's 6 are used */
    sg_finish_args_t fa = {.token = tokens[0], .sid = NULL, .now = 0, .idle_timeout = 60, .day = day, .seconds = 1.5};
    sg_state_exec_finish(f->st, 1301, &fa, NULL, NULL);
    sg_state_result_t rel = exec_release(f, 1301, tokens[1]);
    assert_int_equal(rel.ok, 1);
    assert_int_equal(rel.count, 2);
    refused0 = solo_of(f->st).local_refusals;
    for (int i = 5; i < 8; i++) { /* (now 5 slots: the last is refused by the day's count, not a slot) */
        snprintf(tokens[i], sizeof(tokens[i]), "t-%d", i);
        a = admit_args(tokens[i], 5, day, 6);
        sg_state_exec_admit(f->st, 1301, &a, on_admit, &w[i]);
        assert_int_equal(w[i].done, 1); /* all three from the copy */
    }
    assert_int_equal(w[5].r.quota, SG_QUOTA_OK);
    assert_int_equal(w[6].r.quota, SG_QUOTA_OK);
    /* the refusal by the day's count, as Redis answers it: the slot taken
     * and given back, the day's 6 */
    assert_int_equal(w[7].r.rate.allowed, 1);
    assert_int_equal(w[7].r.slot, 1);
    assert_int_equal(w[7].r.quota, SG_QUOTA_EXECS);
    assert_int_equal(w[7].r.execs, 6);
    assert_int_equal(w[7].r.in_flight, 4);
    assert_int_equal(solo_of(f->st).local_refusals, refused0 + 1);
    run_for(f, 0.1);
    /* Redis holds what the answers said */
    assert_int_equal(redis_int("ZCARD sg:tenant:1301:execs"), 4);
    assert_int_equal(redis_int("ZRANK sg:tenant:1301:execs t-7"), -1);
    assert_int_equal(redis_int("HGET sg:quota:1301:20260201 execs"), 6);
    assert_int_equal(solo_of(f->st).mismatches, 0);
}

/* A second gateway on the same Redis: the holder stops admitting from its
 * copy and gives the lease back; the second's admissions wait for that,
 * then both decide through Redis, and the cap holds across both. */
static void test_solo_second_gateway(void **state)
{
    fixture_t *f = *state;
    const char *day = "20260202";
    char err[256], tokens[10][32];
    admit_wait_t w[10];

    sg_state_redis_solo(f->st, 1);
    wait_solo(f, f->st, 1, 3.0);
    assert_int_equal(seed(f, 1302, day, 0, 0).ok, 1);
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 3; i++) { /* A: one through Redis, then from its copy */
        snprintf(tokens[i], sizeof(tokens[i]), "a-%d", i);
        sg_admit_args_t a = admit_args(tokens[i], 5, day, 100);
        sg_state_exec_admit(f->st, 1302, &a, on_admit, &w[i]);
        RUN_UNTIL(f, w[i].done, WAIT_S);
        run_for(f, 0.02);
    }
    assert_true(solo_of(f->st).local_admits >= 1);

    sg_state_t *b = sg_state_create_redis(f->loop, redis_url, err, sizeof(err));
    assert_non_null(b);
    sg_state_redis_solo(b, 1);
    double t0 = sgtest_now();
    /* B asks at once: held back until A has let go */
    snprintf(tokens[3], sizeof(tokens[3]), "b-0");
    sg_admit_args_t a = admit_args(tokens[3], 5, day, 100);
    while (!sg_state_available(b) && sgtest_now() - t0 < WAIT_S)
        h2o_evloop_run(f->loop, 5);
    sg_state_exec_admit(b, 1302, &a, on_admit, &w[3]);
    RUN_UNTIL(f, w[3].done, WAIT_S);
    double waited = sgtest_now() - t0;
    fprintf(stderr, "    the second gateway's first admission: %.3f s\n", waited);
    assert_true(waited < 1.5);
    assert_int_equal(w[3].r.available, 1);
    assert_int_equal(w[3].r.slot, 1);
    assert_int_equal(w[3].r.in_flight, 4);
    assert_int_equal(solo_of(f->st).holds, 0);
    assert_int_equal(solo_of(b).holds, 0); /* two beat: neither holds */
    /* the cap of 5 across both, asked at once from both */
    for (int i = 4; i < 10; i++) {
        snprintf(tokens[i], sizeof(tokens[i]), "x-%d", i);
        sg_admit_args_t x = admit_args(tokens[i], 5, day, 100);
        sg_state_exec_admit(i % 2 ? b : f->st, 1302, &x, on_admit, &w[i]);
    }
    int granted = 0;
    for (int i = 4; i < 10; i++) {
        RUN_UNTIL(f, w[i].done, WAIT_S);
        granted += w[i].r.slot;
    }
    if (granted != 1)
        fprintf(stderr, "    granted %d: %d %d %d %d %d %d (in flight %ld %ld %ld)\n", granted, w[4].r.slot,
                w[5].r.slot, w[6].r.slot, w[7].r.slot, w[8].r.slot, w[9].r.slot, w[4].r.in_flight, w[5].r.in_flight,
                w[6].r.in_flight);
    assert_int_equal(granted, 1);
    assert_int_equal(redis_int("ZCARD sg:tenant:1302:execs"), 5);
    /* B goes: A is alone again and takes the lease */
    sg_state_destroy(b);
    h2o_evloop_run(f->loop, 0);
    double took = wait_solo(f, f->st, 1, 3.0);
    fprintf(stderr, "    the lease taken again %.3f s after the second gateway left\n", took);
    assert_int_equal(solo_of(f->st).mismatches, 0);
}

/* A holder that died without giving the lease back (its key left as it
 * was): another gateway's admissions wait until the key runs out, then
 * go on; never longer than the lease's time. */
static void test_solo_dead_holder(void **state)
{
    fixture_t *f = *state;
    const char *day = "20260203";
    admit_wait_t w = {0};

    assert_int_equal(seed(f, 1303, day, 0, 0).ok, 1);
    assert_int_equal(server_command("SET sg:solo deadbeef PX 700"), 0);
    double t0 = sgtest_now();
    sg_admit_args_t a = admit_args("d-0", 5, day, 100);
    sg_state_exec_admit(f->st, 1303, &a, on_admit, &w);
    RUN_UNTIL(f, w.done, WAIT_S);
    double waited = sgtest_now() - t0;
    fprintf(stderr, "    admitted %.3f s after, the dead holder's key set for 0.7 s\n", waited);
    assert_true(waited >= 0.5);
    assert_true(waited < 1.5);
    assert_int_equal(w.r.available, 1);
    assert_int_equal(w.r.slot, 1);
}

/* Held: what the copy decided (and the finishes) reach Redis in order, the
 * calls of several turns in one write (SG_LOOP_LATER_MS), all of them
 * before a call sent after them, and on their own within a few ms. */
static void test_solo_writes_gathered(void **state)
{
    fixture_t *f = *state;
    const char *day = "20260205";
    enum { K = 40 };
    char tokens[K][32];
    admit_wait_t w[K];

    sg_state_redis_solo(f->st, 1);
    wait_solo(f, f->st, 1, 3.0);
    assert_int_equal(seed(f, 1305, day, 0, 0).ok, 1);
    memset(w, 0, sizeof(w));
    snprintf(tokens[0], sizeof(tokens[0]), "g-0");
    sg_admit_args_t a = admit_args(tokens[0], K, day, 1000);
    sg_state_exec_admit(f->st, 1305, &a, on_admit, &w[0]);
    RUN_UNTIL(f, w[0].done, WAIT_S);
    run_for(f, 0.05); /* the copy's seed */
    uint64_t local0 = solo_of(f->st).local_admits;

    /* one admission per turn of the loop, none waited for */
    uint64_t writes0 = solo_of(f->st).writes;
    double t0 = sgtest_now();
    for (int i = 1; i < K; i++) {
        snprintf(tokens[i], sizeof(tokens[i]), "g-%d", i);
        a = admit_args(tokens[i], K, day, 1000);
        sg_state_exec_admit(f->st, 1305, &a, on_admit, &w[i]);
        assert_int_equal(w[i].done, 1);
        assert_int_equal(w[i].r.in_flight, i + 1);
        h2o_evloop_run(f->loop, 0);
    }
    double took_ms = (sgtest_now() - t0) * 1000;
    assert_int_equal(solo_of(f->st).local_admits, local0 + K - 1);
    /* a call whose answer is waited for goes after them all: Redis counts
     * the K slots, less the one it gives back */
    sg_state_result_t rel = exec_release(f, 1305, tokens[0]);
    assert_int_equal(rel.ok, 1);
    assert_int_equal(rel.count, K - 1);
    /* written once per SG_LOOP_LATER_MS at most, not once per turn (the
     * release, and a beat should one fall due, are written too) */
    long long writes = (long long)(solo_of(f->st).writes - writes0);
    long long bound = 2 + (long long)(took_ms / SG_LOOP_LATER_MS) + 1 + (long long)(took_ms / 200);
    fprintf(stderr, "    %d admissions over %.2f ms of turns: %lld writes to Redis (at most %lld)\n", K - 1, took_ms,
            writes, bound);
    assert_true(writes <= bound);
    assert_true(writes < K - 1 || took_ms >= (K - 1) * SG_LOOP_LATER_MS);

    /* alone, lazy calls (a finish) reach Redis within a few ms */
    sg_finish_args_t fa = {.token = tokens[1], .sid = NULL, .now = 0, .idle_timeout = 60, .day = day, .seconds = 2.5};
    sg_state_exec_finish(f->st, 1305, &fa, NULL, NULL);
    double t1 = sgtest_now();
    while (redis_int("ZCARD sg:tenant:1305:execs") != K - 2 && sgtest_now() - t1 < 1.0)
        h2o_evloop_run(f->loop, 1);
    assert_int_equal(redis_int("ZCARD sg:tenant:1305:execs"), K - 2);
    fprintf(stderr, "    a finish alone reached Redis in %.1f ms\n", (sgtest_now() - t1) * 1000);
    char *secs = server_query("HGET sg:quota:1305:20260205 seconds", NULL, NULL);
    assert_non_null(secs);
    assert_string_equal(secs, "2.5");
    free(secs);
    assert_int_equal(redis_int("HGET sg:quota:1305:20260205 execs"), K);
    assert_int_equal(solo_of(f->st).mismatches, 0);
}

/* Two tenants whose copies share a list (ids MIRROR_BUCKETS apart): each
 * admits from its own, and dropping one (a difference Redis found) leaves
 * the other whole. */
static void test_solo_copies_share_a_list(void **state)
{
    fixture_t *f = *state;
    const char *day = "20260206";
    const int64_t ta = 1306, tb = 1306 + MIRROR_BUCKETS;
    admit_wait_t w[8];

    sg_state_redis_solo(f->st, 1);
    wait_solo(f, f->st, 1, 3.0);
    assert_int_equal(seed(f, ta, day, 0, 0).ok, 1);
    assert_int_equal(seed(f, tb, day, 0, 0).ok, 1);
    memset(w, 0, sizeof(w));
    sg_admit_args_t a = admit_args("s-a0", 5, day, 10);
    sg_state_exec_admit(f->st, ta, &a, on_admit, &w[0]);
    a = admit_args("s-b0", 5, day, 10);
    sg_state_exec_admit(f->st, tb, &a, on_admit, &w[1]);
    RUN_UNTIL(f, w[0].done && w[1].done, WAIT_S);
    run_for(f, 0.05); /* both copies' seeds */
    uint64_t local0 = solo_of(f->st).local_admits;
    a = admit_args("s-a1", 5, day, 10);
    sg_state_exec_admit(f->st, ta, &a, on_admit, &w[2]);
    a = admit_args("s-b1", 5, day, 10);
    sg_state_exec_admit(f->st, tb, &a, on_admit, &w[3]);
    assert_true(w[2].done && w[3].done); /* both from their copies */
    assert_int_equal(w[2].r.in_flight, 2);
    assert_int_equal(w[3].r.in_flight, 2);
    assert_int_equal(solo_of(f->st).local_admits, local0 + 2);
    run_for(f, 0.05); /* their checks reach Redis (within SG_LOOP_LATER_MS) and agree */
    assert_int_equal(solo_of(f->st).mismatches, 0);
    /* behind a's copy, its day is used up: a's next is a difference */
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "HSET sg:quota:%lld:%s execs 10", (long long)ta, day);
    assert_int_equal(server_command(cmd), 0);
    a = admit_args("s-a2", 5, day, 10);
    sg_state_exec_admit(f->st, ta, &a, on_admit, &w[4]);
    assert_int_equal(w[4].done, 1);
    run_for(f, 0.1);
    assert_int_equal(solo_of(f->st).mismatches, 1);
    /* b's copy is whole: its next is from it, as Redis then agrees */
    a = admit_args("s-b2", 5, day, 10);
    sg_state_exec_admit(f->st, tb, &a, on_admit, &w[5]);
    assert_int_equal(w[5].done, 1);
    assert_int_equal(w[5].r.in_flight, 3);
    assert_int_equal(w[5].r.execs, 3);
    /* a's is Redis's: the day's count is used up */
    a = admit_args("s-a3", 5, day, 10);
    sg_state_exec_admit(f->st, ta, &a, on_admit, &w[6]);
    RUN_UNTIL(f, w[6].done, WAIT_S);
    assert_int_equal(w[6].r.quota, SG_QUOTA_EXECS);
    run_for(f, 0.1);
    assert_int_equal(solo_of(f->st).mismatches, 1);
    assert_int_equal(solo_of(f->st).local_admits, local0 + 4);
}

/* Held: a session's admission is answered from the copy too (its
 * reservation kept there), up to the tenant's cap; a refusal is Redis's; a
 * session committed keeps its slot, one removed frees it; Redis ends with
 * the same set, and answered every admission as the copy had. */
static void test_solo_sessions_from_copy(void **state)
{
    fixture_t *f = *state;
    const int64_t tenant = 1307;
    char tokens[6][32];
    admit_wait_t w[6];
    sg_live_session_t s[3];
    int64_t now = (int64_t)time(NULL);

    sg_state_redis_solo(f->st, 1);
    wait_solo(f, f->st, 1, 3.0);
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 6; i++)
        snprintf(tokens[i], sizeof(tokens[i]), "r-%d", i);
    /* the first makes the copy (Redis decides, the copy is read behind it) */
    sg_state_session_admit(f->st, tenant, 0, 1, 3, tokens[0], on_admit, &w[0]);
    RUN_UNTIL(f, w[0].done, WAIT_S);
    assert_int_equal(w[0].r.slot, 1);
    run_for(f, 0.05);
    uint64_t local0 = solo_of(f->st).local_admits;
    /* the next two: from the copy, before the call returns */
    for (int i = 1; i < 3; i++) {
        sg_state_session_admit(f->st, tenant, 0, 1, 3, tokens[i], on_admit, &w[i]);
        assert_int_equal(w[i].done, 1);
        assert_int_equal(w[i].r.slot, 1);
        assert_int_equal(w[i].r.in_flight, i + 1);
    }
    assert_int_equal(solo_of(f->st).local_admits, local0 + 2);
    /* the fourth is refused at the cap: from the copy too, the script behind it */
    uint64_t refused0 = solo_of(f->st).local_refusals;
    sg_state_session_admit(f->st, tenant, 0, 1, 3, tokens[3], on_admit, &w[3]);
    assert_int_equal(w[3].done, 1);
    assert_int_equal(w[3].r.rate.allowed, 1);
    assert_int_equal(w[3].r.slot, 0);
    assert_int_equal(w[3].r.in_flight, 3);
    assert_int_equal(solo_of(f->st).local_refusals, refused0 + 1);
    run_for(f, 0.05); /* Redis's answer, checked */
    assert_int_equal(solo_of(f->st).mismatches, 0);
    /* the three become sessions (their reservations replaced), one ends */
    for (int i = 0; i < 3; i++) {
        s[i] = make_session(tenant, "python", now, 600, 3600);
        sg_state_result_t c = commit(f, tokens[i], &s[i]);
        assert_int_equal(c.ok, 1);
        assert_int_equal(c.count, 3);
    }
    sg_state_result_t rm = remove_session(f, s[1].id, tenant);
    assert_int_equal(rm.ok, 1);
    assert_int_equal(rm.count, 2);
    /* one slot: the copy admits one more, then the cap again (the copy's refusal) */
    local0 = solo_of(f->st).local_admits;
    sg_state_session_admit(f->st, tenant, 0, 1, 3, tokens[4], on_admit, &w[4]);
    assert_int_equal(w[4].done, 1);
    assert_int_equal(w[4].r.slot, 1);
    assert_int_equal(w[4].r.in_flight, 3);
    assert_int_equal(solo_of(f->st).local_admits, local0 + 1);
    sg_state_session_admit(f->st, tenant, 0, 1, 3, tokens[5], on_admit, &w[5]);
    assert_int_equal(w[5].done, 1);
    assert_int_equal(w[5].r.slot, 0);
    run_for(f, 0.1);
    assert_int_equal(redis_int("ZCARD sg:tenant:1307:sessions"), 3);
    assert_int_equal(redis_int("ZRANK sg:tenant:1307:sessions pending:r-3"), -1);
    assert_int_equal(redis_int("ZRANK sg:tenant:1307:sessions pending:r-5"), -1);
    assert_int_equal(solo_of(f->st).mismatches, 0);
}

/* Redis changed behind the copy (an operator's write): the copy admits,
 * Redis refuses, the difference is counted and the copy dropped; the next
 * admission is Redis's to decide. */
static void test_solo_mismatch_drops_copy(void **state)
{
    fixture_t *f = *state;
    const char *day = "20260204";
    admit_wait_t w[3];

    sg_state_redis_solo(f->st, 1);
    wait_solo(f, f->st, 1, 3.0);
    assert_int_equal(seed(f, 1304, day, 0, 0).ok, 1);
    memset(w, 0, sizeof(w));
    sg_admit_args_t a = admit_args("m-0", 5, day, 10);
    sg_state_exec_admit(f->st, 1304, &a, on_admit, &w[0]);
    RUN_UNTIL(f, w[0].done, WAIT_S);
    run_for(f, 0.05);
    assert_int_equal(server_command("HSET sg:quota:1304:20260204 execs 10"), 0);
    a = admit_args("m-1", 5, day, 10);
    sg_state_exec_admit(f->st, 1304, &a, on_admit, &w[1]);
    assert_int_equal(w[1].done, 1); /* from the copy */
    run_for(f, 0.1);
    assert_int_equal(solo_of(f->st).mismatches, 1);
    a = admit_args("m-2", 5, day, 10);
    sg_state_exec_admit(f->st, 1304, &a, on_admit, &w[2]);
    RUN_UNTIL(f, w[2].done, WAIT_S);
    assert_int_equal(w[2].r.quota, SG_QUOTA_EXECS);
}

/* Held: a call past its tenant's rate is refused from the copy, before the
 * call returns and with nothing sent (RATE_STEP writes nothing when it
 * refuses): an execution's admission, a rate check and a session's
 * admission. The copy stays (the next admission is answered from it), the
 * rate key in Redis is as the admissions left it, and Redis, asked the
 * same once the lease is given up, refuses with the same wait. */
static void test_solo_refuses_rate_from_copy(void **state)
{
    fixture_t *f = *state;
    const char *day = "20260207";
    admit_wait_t w[6];
    rate_wait_t rw = {0};
    sg_admit_args_t a;

    sg_state_redis_solo(f->st, 1);
    wait_solo(f, f->st, 1, 3.0);
    assert_int_equal(seed(f, 1307, day, 0, 0).ok, 1);
    memset(w, 0, sizeof(w));
    /* one a minute, burst 2: the first makes the copy, the second is from it */
    for (int i = 0; i < 2; i++) {
        a = admit_args(i == 0 ? "r-0" : "r-1", 8, day, 100);
        a.rate_per_min = 1;
        a.burst = 2;
        sg_state_exec_admit(f->st, 1307, &a, on_admit, &w[i]);
        RUN_UNTIL(f, w[i].done, WAIT_S);
        assert_int_equal(w[i].r.rate.allowed, 1);
        run_for(f, 0.05); /* the seed's answer, the write behind */
    }
    char *tat = server_query("GET sg:rate:1307", NULL, NULL);
    assert_non_null(tat);
    sg_state_redis_stats_t before = solo_of(f->st);

    a = admit_args("r-2", 8, day, 100);
    a.rate_per_min = 1;
    a.burst = 2;
    sg_state_exec_admit(f->st, 1307, &a, on_admit, &w[2]);
    assert_int_equal(w[2].done, 1);
    assert_int_equal(w[2].r.available, 1);
    assert_int_equal(w[2].r.rate.allowed, 0);
    assert_int_equal(w[2].r.slot, 0);
    assert_true(w[2].r.rate.retry_after_s > 50 && w[2].r.rate.retry_after_s <= 60);
    sg_state_rate_check(f->st, 1307, 1, 2, on_rate, &rw);
    assert_int_equal(rw.done, 1);
    assert_int_equal(rw.r.allowed, 0);
    sg_state_session_admit(f->st, 1307, 1, 2, 5, "s-0", on_admit, &w[3]);
    assert_int_equal(w[3].done, 1);
    assert_int_equal(w[3].r.rate.allowed, 0);
    assert_int_equal(w[3].r.slot, 0);
    assert_int_equal(solo_of(f->st).local_refusals, before.local_refusals + 3);

    /* the copy stays: without a rate, the next is answered from it */
    a = admit_args("r-3", 8, day, 100);
    sg_state_exec_admit(f->st, 1307, &a, on_admit, &w[4]);
    assert_int_equal(w[4].done, 1);
    assert_int_equal(w[4].r.in_flight, 3);
    assert_int_equal(solo_of(f->st).local_admits, before.local_admits + 1);
    run_for(f, 0.1);
    char *tat_after = server_query("GET sg:rate:1307", NULL, NULL);
    assert_non_null(tat_after);
    assert_string_equal(tat_after, tat); /* no rate step reached Redis but the two admissions' */
    assert_int_equal(redis_int("ZCARD sg:tenant:1307:execs"), 3);
    assert_int_equal(solo_of(f->st).mismatches, 0);

    /* Redis itself, once the lease is given up, refuses with the same wait */
    sg_state_redis_solo(f->st, 0);
    wait_solo(f, f->st, 0, 3.0);
    a = admit_args("r-4", 8, day, 100);
    a.rate_per_min = 1;
    a.burst = 2;
    sg_state_exec_admit(f->st, 1307, &a, on_admit, &w[5]);
    RUN_UNTIL(f, w[5].done, WAIT_S);
    assert_int_equal(w[5].r.rate.allowed, 0);
    assert_int_equal(w[5].r.slot, 0);
    assert_true(fabs(w[5].r.rate.retry_after_s - w[2].r.rate.retry_after_s) < 5.0);
    assert_int_equal(solo_of(f->st).local_refusals, before.local_refusals + 3);
    free(tat);
    free(tat_after);
}

/* Runs the loop until the backend has counted `want` mismatches (at most 2 s). */
static void wait_mismatch(fixture_t *f, uint64_t want)
{
    RUN_UNTIL(f, solo_of(f->st).mismatches >= want, 2.0);
    assert_int_equal(solo_of(f->st).mismatches, want);
}

/* A refusal at the cap from a copy gone wrong (a slot taken out of Redis
 * behind the gateway's back): the tenant's apply finds one in flight where
 * the copy holds two, the difference is counted and the copy dropped.
 * Redis ran no admission for the refusal: no slot is taken for it, and the
 * day's count is the two that were admitted. */
static void test_solo_full_mismatch_takes_nothing(void **state)
{
    fixture_t *f = *state;
    const char *day = "20260208";
    admit_wait_t w[3];
    sg_admit_args_t a;

    sg_state_redis_solo(f->st, 1);
    wait_solo(f, f->st, 1, 3.0);
    assert_int_equal(seed(f, 1308, day, 0, 0).ok, 1);
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 2; i++) { /* the cap of 2 held: one through Redis, one from the copy */
        a = admit_args(i == 0 ? "f-0" : "f-1", 2, day, 100);
        sg_state_exec_admit(f->st, 1308, &a, on_admit, &w[i]);
        RUN_UNTIL(f, w[i].done, WAIT_S);
        assert_int_equal(w[i].r.slot, 1);
        run_for(f, 0.05);
    }
    uint64_t mismatches0 = solo_of(f->st).mismatches;
    assert_int_equal(redis_int("ZREM sg:tenant:1308:execs f-0"), 1);
    a = admit_args("f-2", 2, day, 100);
    sg_state_exec_admit(f->st, 1308, &a, on_admit, &w[2]);
    assert_int_equal(w[2].done, 1); /* the copy refused at once */
    assert_int_equal(w[2].r.slot, 0);
    wait_mismatch(f, mismatches0 + 1);
    run_for(f, 0.1);
    assert_int_equal(redis_int("ZCARD sg:tenant:1308:execs"), 1);
    assert_int_equal(redis_int("ZRANK sg:tenant:1308:execs f-1"), 0);
    assert_int_equal(redis_int("HGET sg:quota:1308:20260208 execs"), 2);
}

/* Refusals from a copy gone wrong, Redis changed behind the gateway's
 * back: the day's count lowered, the day's key deleted, a session's member
 * taken out. The copy refuses by the day's quota and at the session cap.
 * An execution's refusal goes with the tenant's apply, which finds the
 * day's count other than the copy's: counted, the copy dropped, no slot
 * taken for it. A session's refusal is still sent alone: Redis reserves
 * instead, the difference is counted, the copy dropped, and the
 * reservation given back, nothing using it. */
static void test_solo_refusal_mismatch_gives_back(void **state)
{
    fixture_t *f = *state;
    const char *day = "20260209";
    const int64_t tenant = 1309;
    admit_wait_t w[6];
    sg_admit_args_t a;

    sg_state_redis_solo(f->st, 1);
    wait_solo(f, f->st, 1, 3.0);
    assert_int_equal(seed(f, tenant, day, 0, 0).ok, 1);
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 2; i++) { /* the day's 2 used: one through Redis, one from the copy */
        a = admit_args(i == 0 ? "g-0" : "g-1", 8, day, 2);
        sg_state_exec_admit(f->st, tenant, &a, on_admit, &w[i]);
        RUN_UNTIL(f, w[i].done, WAIT_S);
        assert_int_equal(w[i].r.quota, SG_QUOTA_OK);
        run_for(f, 0.05);
    }
    uint64_t mismatches0 = solo_of(f->st).mismatches;
    assert_int_equal(server_command("HSET sg:quota:1309:20260209 execs 0"), 0);
    a = admit_args("g-2", 8, day, 2);
    sg_state_exec_admit(f->st, tenant, &a, on_admit, &w[2]);
    assert_int_equal(w[2].done, 1); /* the copy refused at once */
    assert_int_equal(w[2].r.quota, SG_QUOTA_EXECS);
    wait_mismatch(f, mismatches0 + 1);
    run_for(f, 0.1);
    assert_int_equal(redis_int("ZRANK sg:tenant:1309:execs g-2"), -1);
    assert_int_equal(redis_int("ZCARD sg:tenant:1309:execs"), 2);
    assert_int_equal(redis_int("HGET sg:quota:1309:20260209 execs"), 0);

    /* the day's key gone behind the copy (read again, at its limit): the
     * apply finds no key where the copy trusts one */
    assert_int_equal(server_command("HSET sg:quota:1309:20260209 execs 1"), 0);
    memset(&w[0], 0, sizeof(w[0]));
    a = admit_args("g-6", 8, day, 1);
    sg_state_exec_admit(f->st, tenant, &a, on_admit, &w[0]);
    RUN_UNTIL(f, w[0].done, WAIT_S); /* through Redis (the copy was dropped), refused: the copy read */
    assert_int_equal(w[0].r.quota, SG_QUOTA_EXECS);
    run_for(f, 0.05);
    mismatches0 = solo_of(f->st).mismatches;
    assert_int_equal(server_command("DEL sg:quota:1309:20260209"), 0);
    memset(&w[0], 0, sizeof(w[0]));
    a = admit_args("g-7", 8, day, 1);
    sg_state_exec_admit(f->st, tenant, &a, on_admit, &w[0]);
    assert_int_equal(w[0].done, 1); /* the copy refused at once */
    assert_int_equal(w[0].r.quota, SG_QUOTA_EXECS);
    wait_mismatch(f, mismatches0 + 1);
    run_for(f, 0.1);
    assert_int_equal(redis_int("ZRANK sg:tenant:1309:execs g-7"), -1);
    assert_int_equal(redis_int("ZCARD sg:tenant:1309:execs"), 2);

    /* sessions: a cap of 2 held (one through Redis, one from the copy) */
    for (int i = 3; i < 5; i++) {
        sg_state_session_admit(f->st, tenant, 0, 1, 2, i == 3 ? "p-3" : "p-4", on_admit, &w[i]);
        RUN_UNTIL(f, w[i].done, WAIT_S);
        assert_int_equal(w[i].r.slot, 1);
        run_for(f, 0.05);
    }
    mismatches0 = solo_of(f->st).mismatches;
    assert_int_equal(redis_int("ZREM sg:tenant:1309:sessions pending:p-3"), 1);
    sg_state_session_admit(f->st, tenant, 0, 1, 2, "p-5", on_admit, &w[5]);
    assert_int_equal(w[5].done, 1); /* the copy refused at once */
    assert_int_equal(w[5].r.slot, 0);
    wait_mismatch(f, mismatches0 + 1);
    run_for(f, 0.1); /* the reservation given back */
    assert_int_equal(redis_int("ZRANK sg:tenant:1309:sessions pending:p-5"), -1);
    assert_int_equal(redis_int("ZCARD sg:tenant:1309:sessions"), 1);
}

/* Under the lease: the tenant's day seeded, a session committed, and its
 * run 0 (token0, "<sid>/0") admitted through Redis with slots slots, the
 * tenant's copy read behind it (w, cleared, its wait). */
static sg_live_session_t solo_session(fixture_t *f, int64_t tenant, const char *day, long slots, int64_t now,
                                      char token0[64], admit_wait_t *w)
{
    sg_state_redis_solo(f->st, 1);
    wait_solo(f, f->st, 1, 3.0);
    assert_int_equal(seed(f, tenant, day, 0, 0).ok, 1);
    sg_live_session_t s = make_session(tenant, "python", now, 900, 14400);
    assert_int_equal(commit(f, NULL, &s).ok, 1);
    snprintf(token0, 64, "%s/0", s.id);
    sg_admit_args_t a = admit_args(token0, slots, day, 1000);
    sg_state_exec_admit(f->st, tenant, &a, on_admit, w);
    RUN_UNTIL(f, w->done, WAIT_S); /* through Redis; the copy read behind it */
    run_for(f, 0.05);
    return s;
}

/* Run i of session sid (token, "<sid>/<i>") admitted from the copy: at
 * once, with no call to Redis waited for. */
static void admit_from_copy(fixture_t *f, int64_t tenant, const char *day, long slots, const char *sid, int i,
                            char token[64], admit_wait_t *w)
{
    snprintf(token, 64, "%s/%d", sid, i);
    sg_admit_args_t a = admit_args(token, slots, day, 1000);
    sg_state_exec_admit(f->st, tenant, &a, on_admit, w);
    assert_int_equal(w->done, 1);
}

/* Under the lease, what the copy decides about executions and their ends
 * reaches Redis in one call per tenant (SCRIPT_SOLO_APPLY), and leaves
 * what the calls one by one would: 19 admissions and 15 ends in one turn
 * are one call, which increments the day's executions and the session's
 * once each in Redis's own count (one by one: 34 times); the slots still held, the day's
 * executions and seconds, the session's executions, last use and idle
 * deadline are all there after it. An end of a slot Redis already holds
 * takes it out there. */
static void test_solo_apply_one_call(void **state)
{
    fixture_t *f = *state;
    const char *day = "20260210";
    const int64_t tenant = 1310;
    enum { K = 20, ENDED = 15 };
    char tokens[K][64];
    admit_wait_t w[K];

    int64_t now = sg_wall_s();
    memset(w, 0, sizeof(w));
    sg_live_session_t s = solo_session(f, tenant, day, K, now, tokens[0], &w[0]);

    sg_state_redis_stats_t before = solo_of(f->st);
    long hincrby0 = commandstat_calls("hincrby");
    for (int i = 1; i < K; i++) {
        admit_from_copy(f, tenant, day, K, s.id, i, tokens[i], &w[i]);
        assert_int_equal(w[i].r.in_flight, i + 1);
    }
    /* the ends of runs 1..15, in the same turn: none of them went to Redis alone */
    for (int i = 1; i <= ENDED; i++) {
        sg_finish_args_t fa = finish_args(tokens[i], s.id, now + 5, day, 0.5);
        sg_state_exec_finish(f->st, tenant, &fa, NULL, NULL);
    }
    run_for(f, 0.05);
    assert_int_equal(solo_of(f->st).applies, before.applies + 1);
    assert_int_equal(commandstat_calls("hincrby"), hincrby0 + 2);
    assert_int_equal(solo_of(f->st).local_admits, before.local_admits + K - 1);
    assert_int_equal(solo_of(f->st).mismatches, before.mismatches);
    /* the slot of run 0 (through Redis) and runs 16..19 are held */
    assert_int_equal(redis_int("ZCARD sg:tenant:1310:execs"), 1 + K - 1 - ENDED);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "ZRANK sg:tenant:1310:execs %s", tokens[ENDED]);
    assert_int_equal(redis_int(cmd), -1);
    snprintf(cmd, sizeof(cmd), "ZRANK sg:tenant:1310:execs %s", tokens[K - 1]);
    assert_true(redis_int(cmd) >= 0);
    assert_int_equal(redis_int("HGET sg:quota:1310:20260210 execs"), K);
    char *secs = server_query("HGET sg:quota:1310:20260210 seconds", NULL, NULL);
    assert_non_null(secs);
    assert_string_equal(secs, "7.5");
    free(secs);
    char key[64];
    snprintf(key, sizeof(key), "sg:session:%s", s.id);
    assert_int_equal(query_int("HGET %s %s", key, "executions"), ENDED);
    assert_int_equal(query_int("HGET %s %s", key, "last_used_at"), now + 5);
    assert_int_equal(query_int("HGET %s %s", key, "idle_deadline"), now + 905);
    assert_int_equal(query_int("ZSCORE sg:sessions:idle %s", s.id, NULL), now + 905);

    /* run 0's slot, which Redis took itself, and the others': given back */
    for (int i = 0; i < K; i++) {
        if (i >= 1 && i <= ENDED)
            continue;
        sg_finish_args_t fa = finish_args(tokens[i], s.id, now + 6, day, -1);
        sg_state_exec_finish(f->st, tenant, &fa, NULL, NULL);
        h2o_evloop_run(f->loop, 0);
    }
    run_for(f, 0.05);
    assert_int_equal(redis_int("ZCARD sg:tenant:1310:execs"), 0);
    assert_int_equal(query_int("HGET %s %s", key, "executions"), K);
    assert_int_equal(query_int("HGET %s %s", key, "idle_deadline"), now + 906);
    assert_int_equal(solo_of(f->st).mismatches, before.mismatches);
}

/* Runs the loop's turns without blocking for ms: its timers fire when due. */
static void spin_ms(fixture_t *f, double ms)
{
    double end = sgtest_now() + ms / 1000;
    while (sgtest_now() < end)
        h2o_evloop_run(f->loop, 0);
}

/* Decisions a millisecond apart gather in one apply per SOLO_APPLY_MS
 * (redis_int.h), not one per turn: an admission and an end every 1 ms
 * for ~80 ms make at most one call per SOLO_APPLY_MS and per beat (a beat
 * sends the apply first), however slowly the turns go. At 2 ms, as
 * before, they made about 40. */
static void test_solo_apply_window(void **state)
{
    fixture_t *f = *state;
    const char *day = "20260212";
    const int64_t tenant = 1312;
    enum { K = 41 };
    char tokens[K][64];
    admit_wait_t w[K];

    int64_t now = sg_wall_s();
    memset(w, 0, sizeof(w));
    sg_live_session_t s = solo_session(f, tenant, day, K, now, tokens[0], &w[0]);

    sg_state_redis_stats_t before = solo_of(f->st);
    double t0 = sgtest_now();
    for (int i = 1; i < K; i++) {
        admit_from_copy(f, tenant, day, K, s.id, i, tokens[i], &w[i]);
        spin_ms(f, 1);
        sg_finish_args_t fa = finish_args(tokens[i], s.id, now + 5, day, 0.25);
        sg_state_exec_finish(f->st, tenant, &fa, NULL, NULL);
        spin_ms(f, 1);
    }
    double took_ms = (sgtest_now() - t0) * 1000;
    run_for(f, 0.05);
    long long applies = (long long)(solo_of(f->st).applies - before.applies);
    /* n applies take (n - 1) windows at least; a beat may fall due in between */
    long long bound = 2 + (long long)(took_ms / SOLO_APPLY_MS) + 1 + (long long)(took_ms / SOLO_BEAT_MS);
    fprintf(stderr, "    %d admissions and ends over %.1f ms: %lld applies (at most %lld)\n", K - 1, took_ms, applies,
            bound);
    assert_true(applies >= 1);
    assert_true(applies <= bound);
    assert_int_equal(solo_of(f->st).local_admits, before.local_admits + K - 1);
    assert_int_equal(solo_of(f->st).mismatches, before.mismatches);
    /* Redis holds what the calls one by one would have left */
    assert_int_equal(redis_int("ZCARD sg:tenant:1312:execs"), 1);
    assert_int_equal(redis_int("HGET sg:quota:1312:20260212 execs"), K);
    char *secs = server_query("HGET sg:quota:1312:20260212 seconds", NULL, NULL);
    assert_non_null(secs);
    assert_string_equal(secs, "10");
    free(secs);
    char key[64];
    snprintf(key, sizeof(key), "sg:session:%s", s.id);
    assert_int_equal(query_int("HGET %s %s", key, "executions"), K - 1);
    sg_finish_args_t fa = finish_args(tokens[0], s.id, now + 6, day, -1);
    sg_state_exec_finish(f->st, tenant, &fa, NULL, NULL);
    run_for(f, 0.05);
    assert_int_equal(redis_int("ZCARD sg:tenant:1312:execs"), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    return SG_RUN_TESTS("state: redis backend only", group_setup_redis, group_teardown, setup, teardown, test_bad_urls,
                        test_unreachable, test_key_schema, test_db_select, test_destroy_inflight, test_noscript,
                        test_redis_restart, test_redis_hang, test_solo_admits_from_copy, test_solo_second_gateway,
                        test_solo_dead_holder, test_solo_mismatch_drops_copy, test_solo_writes_gathered,
                        test_solo_copies_share_a_list, test_solo_sessions_from_copy, test_solo_refuses_rate_from_copy,
                        test_solo_full_mismatch_takes_nothing, test_solo_refusal_mismatch_gives_back,
                        test_solo_apply_one_call, test_solo_apply_window);
}
