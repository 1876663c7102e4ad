/*
 * test_state.c — gateway/state.h against both backends: the same
 * behavioural suite runs on the memory backend and on a real redis-server
 * this test starts (on a free loopback port, in a private temporary
 * directory, without persistence) and drives through an h2o evloop.
 *
 * Redis only: scripts flushed under the gateway (NOSCRIPT), redis-server
 * killed and started again on the same port, redis-server stopped with
 * SIGSTOP (a hang: calls must still complete, with available = 0).
 *
 * The server is killed at the end, whatever failed (teardown, atexit, and
 * PR_SET_PDEATHSIG should this process die).
 */
#include "sggw.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "state.h"
#include "util.h"

#define WAIT_S 5.0 /* a callback of a working backend comes within this */

/* ---- the redis-server under test (sggw.h) -------------------------------------- */

static sggw_redis_t *redis;

static bool server_ping(void)
{
    int ok;
    char *v = sggw_redis_cmd(redis, &ok, "PING");
    bool pong = ok && v != NULL && strcmp(v, "PONG") == 0;
    free(v);
    return pong;
}

/* Runs one command; 0 if it answered without error. */
static int server_command(const char *cmd)
{
    int ok;
    free(sggw_redis_cmd(redis, &ok, cmd));
    return ok ? 0 : -1;
}

/* ---- fixture ------------------------------------------------------------------------ */

typedef enum { BACKEND_MEMORY, BACKEND_REDIS } backend_t;
static backend_t group_backend;
static h2o_loop_t *group_loop;

typedef struct {
    h2o_loop_t *loop;
    sg_state_t *st;
    int fds; /* open before the test */
} fixture_t;

static int count_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        n += fcntl(fd, F_GETFD) != -1;
    return n;
}

static char redis_url[64];

static void run_for(fixture_t *f, double seconds)
{
    double end = sgtest_now() + seconds;
    while (sgtest_now() < end)
        h2o_evloop_run(f->loop, 10);
}

/* Runs the loop until *flag is set or timeout_s pass; asserts it was set. */
#define RUN_UNTIL(f, flag, timeout_s)                                                                                  \
    do {                                                                                                               \
        double deadline_ = sgtest_now() + (timeout_s);                                                                 \
        while (!(flag) && sgtest_now() < deadline_)                                                                    \
            h2o_evloop_run((f)->loop, 10);                                                                             \
        if (!(flag))                                                                                                   \
            fail_msg("no callback within %.1f s (%s)", (double)(timeout_s), #flag);                                    \
    } while (0)

static int wait_available(fixture_t *f, double timeout_s)
{
    double deadline = sgtest_now() + timeout_s;
    while (!sg_state_available(f->st) && sgtest_now() < deadline)
        h2o_evloop_run(f->loop, 10);
    return sg_state_available(f->st);
}

/* One loop per group: h2o 2.2.5's h2o_evloop_destroy leaks the epoll fd,
 * which would hide a leak of ours from the per-test fd count. */
static int group_setup_memory(void **state)
{
    group_backend = BACKEND_MEMORY;
    group_loop = h2o_evloop_create();
    return 0;
}

static int group_teardown(void **state)
{
    h2o_evloop_destroy(group_loop);
    group_loop = NULL;
    sggw_redis_stop(redis);
    redis = NULL;
    return 0;
}

static int group_setup_redis(void **state)
{
    group_backend = BACKEND_REDIS;
    group_loop = h2o_evloop_create();
    if ((redis = sggw_redis_start()) == NULL)
        return -1;
    snprintf(redis_url, sizeof(redis_url), "%s/0", sggw_redis_url(redis));
    return 0;
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -1;
    *state = f;
    f->fds = count_fds();
    f->loop = group_loop;
    if (group_backend == BACKEND_MEMORY) {
        f->st = sg_state_create_memory(f->loop);
        return f->st != NULL ? 0 : -1;
    }
    /* a test before may have left the server stopped or dead */
    sggw_redis_resume(redis);
    if (!server_ping() && sggw_redis_restart(redis) != 0)
        return -1;
    if (server_command("FLUSHALL") != 0)
        return -1;
    char err[256];
    f->st = sg_state_create_redis(f->loop, redis_url, err, sizeof(err));
    if (f->st == NULL) {
        fprintf(stderr, "sg_state_create_redis: %s\n", err);
        return -1;
    }
    if (!wait_available(f, WAIT_S)) {
        fprintf(stderr, "the redis backend did not become available\n");
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    if (redis != NULL)
        sggw_redis_resume(redis);
    sg_state_destroy(f->st);
    /* closed sockets are freed by the loop's next round */
    h2o_evloop_run(f->loop, 0);
    int fds = count_fds(), before = f->fds;
    free(f);
    if (fds != before) {
        fprintf(stderr, "teardown: %d file descriptors open, %d before the test\n", fds, before);
        return -1;
    }
    return 0;
}

/* ---- waiting for callbacks ----------------------------------------------------------- */

/* A waiter for a callback that hands over one result: name##_wait_t holds
 * it and counts the calls, on_##name is the callback. */
#define RESULT_WAITER(name, type)                                                                                      \
    typedef struct {                                                                                                   \
        int done;                                                                                                      \
        type r;                                                                                                        \
    } name##_wait_t;                                                                                                   \
    static void on_##name(void *data, const type *r)                                                                   \
    {                                                                                                                  \
        name##_wait_t *w = data;                                                                                       \
        w->r = *r;                                                                                                     \
        w->done++;                                                                                                     \
    }
RESULT_WAITER(rate, sg_rate_result_t)
RESULT_WAITER(state, sg_state_result_t)

typedef struct {
    int done, available, found;
    sg_live_session_t s;
} get_wait_t;

static void on_get(void *data, int available, const sg_live_session_t *s)
{
    get_wait_t *w = data;
    w->available = available;
    w->found = s != NULL;
    if (s != NULL)
        w->s = *s;
    w->done++;
}

#define MAXN 32
typedef struct {
    int done, available;
    size_t n;
    char sids[MAXN][37];
    char reasons[MAXN][16];
    int64_t tenants[MAXN];
} expired_wait_t;

static void on_expired(void *data, int available, size_t n, const char *const *sids, const char *const *reasons,
                       const int64_t *tenants)
{
    expired_wait_t *w = data;
    w->available = available;
    w->n = n;
    for (size_t i = 0; i < n && i < MAXN; i++) {
        snprintf(w->sids[i], sizeof(w->sids[i]), "%s", sids[i]);
        snprintf(w->reasons[i], sizeof(w->reasons[i]), "%s", reasons[i]);
        w->tenants[i] = tenants[i];
    }
    w->done++;
}

typedef struct {
    int done, available;
    size_t n;
    sg_live_session_t list[MAXN];
} list_wait_t;

static void on_list(void *data, int available, size_t n, const sg_live_session_t *list)
{
    list_wait_t *w = data;
    w->available = available;
    w->n = n;
    for (size_t i = 0; i < n && i < MAXN; i++)
        w->list[i] = list[i];
    w->done++;
}

typedef struct {
    int done, available;
    sg_quota_status_t status;
    int64_t execs;
    double seconds;
} quota_wait_t;

static void on_quota(void *data, int available, sg_quota_status_t status, int64_t execs, double seconds)
{
    quota_wait_t *w = data;
    w->available = available;
    w->status = status;
    w->execs = execs;
    w->seconds = seconds;
    w->done++;
}

/* Synchronous wrappers: call, run the loop until the callback, assert it
 * came once and (for the ones named do_) that the backend was available. */
static sg_rate_result_t rate(fixture_t *f, int64_t tenant, long per_min, long burst)
{
    rate_wait_t w = {0};
    sg_state_rate_check(f->st, tenant, per_min, burst, on_rate, &w);
    RUN_UNTIL(f, w.done, WAIT_S);
    assert_int_equal(w.done, 1);
    return w.r;
}

static sg_state_result_t check_state(fixture_t *f, state_wait_t *w)
{
    RUN_UNTIL(f, w->done, WAIT_S);
    assert_int_equal(w->done, 1);
    assert_int_equal(w->r.available, 1);
    return w->r;
}

/* Calls fn(f->st, args..., on_state, &w) and returns check_state()'s
 * result: the body of every synchronous wrapper below. */
#define STATE_CALL(f, fn, ...)                                                                                         \
    do {                                                                                                               \
        state_wait_t w_ = {0};                                                                                         \
        fn((f)->st, __VA_ARGS__, on_state, &w_);                                                                       \
        return check_state((f), &w_);                                                                                  \
    } while (0)

static sg_state_result_t reserve(fixture_t *f, int64_t tenant, long max, const char *token)
{
    STATE_CALL(f, sg_state_session_reserve, tenant, max, token);
}

static sg_state_result_t unreserve(fixture_t *f, int64_t tenant, const char *token)
{
    STATE_CALL(f, sg_state_session_unreserve, tenant, token);
}

static sg_state_result_t exec_acquire(fixture_t *f, int64_t tenant, long max, const char *token, long lease_s)
{
    STATE_CALL(f, sg_state_exec_acquire, tenant, max, token, lease_s);
}

static sg_state_result_t exec_release(fixture_t *f, int64_t tenant, const char *token)
{
    STATE_CALL(f, sg_state_exec_release, tenant, token);
}

static sg_state_result_t commit(fixture_t *f, const char *token, const sg_live_session_t *s)
{
    STATE_CALL(f, sg_state_session_commit, token, s);
}

static sg_state_result_t touch(fixture_t *f, const char *sid, int64_t now, long idle, int add)
{
    STATE_CALL(f, sg_state_session_touch, sid, now, idle, add);
}

static sg_state_result_t remove_session(fixture_t *f, const char *sid, int64_t tenant)
{
    STATE_CALL(f, sg_state_session_remove, sid, tenant);
}

static sg_state_result_t restore(fixture_t *f, const sg_live_session_t *s)
{
    STATE_CALL(f, sg_state_session_restore, s);
}

static get_wait_t get(fixture_t *f, const char *sid)
{
    get_wait_t w = {0};
    sg_state_session_get(f->st, sid, on_get, &w);
    RUN_UNTIL(f, w.done, WAIT_S);
    assert_int_equal(w.done, 1);
    assert_int_equal(w.available, 1);
    return w;
}

static void expired(fixture_t *f, int64_t now, size_t limit, expired_wait_t *w)
{
    memset(w, 0, sizeof(*w));
    sg_state_sessions_expired(f->st, now, limit, on_expired, w);
    RUN_UNTIL(f, w->done, WAIT_S);
    assert_int_equal(w->done, 1);
    assert_int_equal(w->available, 1);
}

static void list(fixture_t *f, int64_t tenant, list_wait_t *w)
{
    memset(w, 0, sizeof(*w));
    sg_state_sessions_list(f->st, tenant, on_list, w);
    RUN_UNTIL(f, w->done, WAIT_S);
    assert_int_equal(w->done, 1);
    assert_int_equal(w->available, 1);
}

static quota_wait_t quota(fixture_t *f, int64_t tenant, const char *day, long max_execs, double max_seconds)
{
    quota_wait_t w = {0};
    sg_state_quota_reserve(f->st, tenant, day, max_execs, max_seconds, on_quota, &w);
    RUN_UNTIL(f, w.done, WAIT_S);
    assert_int_equal(w.done, 1);
    assert_int_equal(w.available, 1);
    return w;
}

static sg_state_result_t seed(fixture_t *f, int64_t tenant, const char *day, int64_t execs, double seconds)
{
    STATE_CALL(f, sg_state_quota_seed, tenant, day, execs, seconds);
}

static sg_state_result_t add_seconds(fixture_t *f, int64_t tenant, const char *day, double seconds)
{
    STATE_CALL(f, sg_state_quota_add_seconds, tenant, day, seconds);
}

static sg_live_session_t make_session(int64_t tenant, const char *lang, int64_t now, long idle, long lifetime)
{
    sg_live_session_t s;
    memset(&s, 0, sizeof(s));
    assert_int_equal(sg_uuid4(s.id), 0);
    s.tenant_id = tenant;
    snprintf(s.lang, sizeof(s.lang), "%s", lang);
    s.created_at = now;
    s.last_used_at = now;
    s.idle_deadline = now + idle;
    s.lifetime_deadline = now + lifetime;
    return s;
}

static void assert_near(double got, double want)
{
    if (got < want - 1e-6 || got > want + 1e-6)
        fail_msg("%.9f, expected %.9f", got, want);
}

/* ---- the behavioural suite (both backends) ----------------------------------------------- */

static void test_backend_name(void **state)
{
    fixture_t *f = *state;
    assert_string_equal(sg_state_backend(f->st), group_backend == BACKEND_MEMORY ? "memory" : "redis");
    assert_int_equal(sg_state_available(f->st), 1);
}

static void test_rate_exact(void **state)
{
    fixture_t *f = *state;
    /* 60/min: T = 1 s, so the test's own pace cannot refill the bucket */
    for (long i = 0; i < 5; i++) {
        sg_rate_result_t r = rate(f, 101, 60, 5);
        assert_int_equal(r.available, 1);
        assert_true(r.allowed);
        assert_int_equal(r.limit, 5);
        assert_int_equal(r.remaining, 4 - i);
    }
    sg_rate_result_t r = rate(f, 101, 60, 5);
    assert_int_equal(r.available, 1);
    assert_false(r.allowed);
    assert_int_equal(r.remaining, 0);
    assert_true(r.retry_after_s > 0 && r.retry_after_s <= 1.0);
    assert_true(r.reset_s > 4.0 && r.reset_s <= 5.0);
    /* denials are free: still denied, and retry_after did not grow */
    sg_rate_result_t again = rate(f, 101, 60, 5);
    assert_false(again.allowed);
    assert_true(again.retry_after_s <= r.retry_after_s);
    /* another tenant has its own bucket */
    r = rate(f, 102, 60, 5);
    assert_true(r.allowed);
    assert_int_equal(r.remaining, 4);

    /* 20 checks issued at once: exactly burst pass */
    rate_wait_t w[20];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 20; i++)
        sg_state_rate_check(f->st, 103, 60, 7, on_rate, &w[i]);
    int allowed = 0;
    for (int i = 0; i < 20; i++) {
        RUN_UNTIL(f, w[i].done, WAIT_S);
        assert_int_equal(w[i].r.available, 1);
        allowed += w[i].r.allowed;
    }
    assert_int_equal(allowed, 7);
}

/* A call's result has ok and count as given. */
#define EXPECT_RESULT(call, ok_, count_)                                                                               \
    do {                                                                                                               \
        sg_state_result_t res_ = (call);                                                                               \
        assert_int_equal(res_.ok, (ok_));                                                                              \
        assert_int_equal(res_.count, (count_));                                                                        \
    } while (0)

/* Tenant's 2 session slots taken by "a" and "b"; "c" is refused. */
static void fill_two(fixture_t *f, int64_t tenant)
{
    assert_int_equal(reserve(f, tenant, 2, "a").ok, 1);
    assert_int_equal(reserve(f, tenant, 2, "b").ok, 1);
    assert_int_equal(reserve(f, tenant, 2, "c").ok, 0);
}

static void test_reserve_concurrent(void **state)
{
    fixture_t *f = *state;
    state_wait_t w[20];
    char tokens[20][40];
    memset(w, 0, sizeof(w));
    /* all 20 issued before any reply is read */
    for (int i = 0; i < 20; i++) {
        snprintf(tokens[i], sizeof(tokens[i]), "tok-%d", i);
        sg_state_session_reserve(f->st, 201, 5, tokens[i], on_state, &w[i]);
    }
    int ok = 0;
    long max_count = 0;
    for (int i = 0; i < 20; i++) {
        RUN_UNTIL(f, w[i].done, WAIT_S);
        assert_int_equal(w[i].done, 1);
        assert_int_equal(w[i].r.available, 1);
        ok += w[i].r.ok;
        if (w[i].r.count > max_count)
            max_count = w[i].r.count;
        assert_true(w[i].r.count <= 5);
    }
    assert_int_equal(ok, 5);
    assert_int_equal(max_count, 5);
    /* and still full */
    EXPECT_RESULT(reserve(f, 201, 5, "late"), 0, 5);
    /* another tenant is not affected */
    EXPECT_RESULT(reserve(f, 202, 5, "tok-0"), 1, 1);
}

static void test_unreserve(void **state)
{
    fixture_t *f = *state;
    fill_two(f, 301); /* "a" and "b" hold the 2 slots, "c" is refused */
    EXPECT_RESULT(unreserve(f, 301, "a"), 1, 1);
    EXPECT_RESULT(unreserve(f, 301, "a"), 0, 1);
    assert_int_equal(unreserve(f, 301, "never").ok, 0);
    EXPECT_RESULT(reserve(f, 301, 2, "c"), 1, 2);
}

static void test_reservation_expires(void **state)
{
    fixture_t *f = *state;
    fill_two(f, 351); /* "a" and "b" hold the 2 slots, "c" is refused */
    /* a reservation holds its slot for 120 s, counted in whole seconds: 118 s
     * later it holds whatever second boundary the test crossed meanwhile */
    sg_state_set_clock_skew_ms(f->st, 118 * 1000);
    assert_int_equal(reserve(f, 351, 2, "c").ok, 0);
    sg_state_set_clock_skew_ms(f->st, 121 * 1000);
    EXPECT_RESULT(reserve(f, 351, 2, "c"), 1, 1);
}

/* max_concurrent_execs: 40 acquires issued at once (none answered before
 * the last is sent), 3 slots: exactly 3 get one, whatever the interleaving;
 * the count never passes 3; another tenant is untouched. */
static void test_exec_concurrent(void **state)
{
    fixture_t *f = *state;
    state_wait_t w[40];
    char tokens[40][16];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 40; i++) {
        snprintf(tokens[i], sizeof(tokens[i]), "x-%d", i);
        sg_state_exec_acquire(f->st, 501, 3, tokens[i], 60, on_state, &w[i]);
    }
    int ok = 0;
    for (int i = 0; i < 40; i++) {
        RUN_UNTIL(f, w[i].done, WAIT_S);
        assert_int_equal(w[i].done, 1);
        assert_int_equal(w[i].r.available, 1);
        ok += w[i].r.ok;
        assert_true(w[i].r.count <= 3);
    }
    assert_int_equal(ok, 3);
    EXPECT_RESULT(exec_acquire(f, 501, 3, "late", 60), 0, 3);
    /* another tenant, and the session slots of the same tenant, are apart */
    assert_int_equal(exec_acquire(f, 502, 3, "x-0", 60).ok, 1);
    assert_int_equal(reserve(f, 501, 1, "session").ok, 1);

    /* releasing one lets exactly one more in; a release of a token not held
     * (twice, or never taken) frees nothing */
    int first = -1;
    for (int i = 0; i < 40 && first < 0; i++)
        if (w[i].r.ok)
            first = i;
    EXPECT_RESULT(exec_release(f, 501, tokens[first]), 1, 2);
    EXPECT_RESULT(exec_release(f, 501, tokens[first]), 0, 2);
    assert_int_equal(exec_release(f, 501, "never").ok, 0);
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 10; i++)
        sg_state_exec_acquire(f->st, 501, 3, tokens[20 + i], 60, on_state, &w[i]);
    ok = 0;
    for (int i = 0; i < 10; i++) {
        RUN_UNTIL(f, w[i].done, WAIT_S);
        assert_int_equal(w[i].r.available, 1);
        ok += w[i].r.ok;
    }
    assert_int_equal(ok, 1);

    /* max 0: nothing runs */
    EXPECT_RESULT(exec_acquire(f, 503, 0, "a", 60), 0, 0);
}

/* A slot whose holder never released it (a gateway killed mid-execution)
 * comes back when its lease runs out, not before; a token acquired again
 * renews its lease and stays one slot. */
static void test_exec_lease_expires(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(exec_acquire(f, 551, 2, "a", 30).ok, 1);
    assert_int_equal(exec_acquire(f, 551, 2, "b", 100).ok, 1);
    assert_int_equal(exec_acquire(f, 551, 2, "c", 30).ok, 0);
    sg_state_result_t r = exec_acquire(f, 551, 2, "b", 100); /* renewed, not a third */
    assert_int_equal(r.ok, 1);
    assert_int_equal(r.count, 2);
    /* 28 s later both still hold (whatever second boundary was crossed) */
    sg_state_set_clock_skew_ms(f->st, 28 * 1000);
    assert_int_equal(exec_acquire(f, 551, 2, "c", 30).ok, 0);
    /* 31 s: "a" ran out, "b" (100 s) did not */
    sg_state_set_clock_skew_ms(f->st, 31 * 1000);
    EXPECT_RESULT(exec_acquire(f, 551, 2, "c", 30), 1, 2);
    assert_int_equal(exec_acquire(f, 551, 2, "d", 30).ok, 0);
    /* 102 s: "b" ran out too, and so did "c" (31 + 30) */
    sg_state_set_clock_skew_ms(f->st, 102 * 1000);
    EXPECT_RESULT(exec_acquire(f, 551, 2, "d", 30), 1, 1);
}

static void test_commit_get_touch(void **state)
{
    fixture_t *f = *state;
    int64_t now = sg_wall_s();
    assert_int_equal(reserve(f, 401, 3, "t1").ok, 1);
    sg_live_session_t s = make_session(401, "python", now, 900, 14400);
    sg_state_result_t r = commit(f, "t1", &s);
    assert_int_equal(r.ok, 1);
    assert_int_equal(r.count, 1); /* the reservation became the session */

    get_wait_t g = get(f, s.id);
    assert_true(g.found);
    assert_string_equal(g.s.id, s.id);
    assert_int_equal(g.s.tenant_id, 401);
    assert_string_equal(g.s.lang, "python");
    assert_int_equal(g.s.created_at, now);
    assert_int_equal(g.s.last_used_at, now);
    assert_int_equal(g.s.idle_deadline, now + 900);
    assert_int_equal(g.s.lifetime_deadline, now + 14400);
    assert_int_equal(g.s.executions, 0);

    r = touch(f, s.id, now + 10, 900, 1);
    assert_int_equal(r.ok, 1);
    assert_int_equal(r.count, 1); /* executions so far */
    EXPECT_RESULT(touch(f, s.id, now + 20, 600, 2), 1, 3);
    g = get(f, s.id);
    assert_true(g.found);
    assert_int_equal(g.s.last_used_at, now + 20);
    assert_int_equal(g.s.idle_deadline, now + 620);
    assert_int_equal(g.s.lifetime_deadline, now + 14400);
    assert_int_equal(g.s.created_at, now);
    assert_int_equal(g.s.executions, 3);

    /* the idle index follows the touch: not idle at the old deadline */
    expired_wait_t e;
    expired(f, now + 610, 10, &e);
    assert_int_equal(e.n, 0);
    expired(f, now + 620, 10, &e);
    assert_int_equal(e.n, 1);

    char other[37];
    assert_int_equal(sg_uuid4(other), 0);
    r = touch(f, other, now, 900, 1);
    assert_int_equal(r.ok, 0);
    g = get(f, other);
    assert_false(g.found);
    /* touching an unknown id did not create it */
    list_wait_t l;
    list(f, 0, &l);
    assert_int_equal(l.n, 1);
}

static void test_remove_once(void **state)
{
    fixture_t *f = *state;
    int64_t now = sg_wall_s();
    assert_int_equal(reserve(f, 501, 1, "t").ok, 1);
    sg_live_session_t s = make_session(501, "bash", now, 900, 14400);
    assert_int_equal(commit(f, "t", &s).ok, 1);
    assert_int_equal(reserve(f, 501, 1, "u").ok, 0); /* the session holds the only slot */

    EXPECT_RESULT(remove_session(f, s.id, 501), 1, 0);
    assert_int_equal(remove_session(f, s.id, 501).ok, 0);

    /* two at once: exactly one wins */
    sg_live_session_t s2 = make_session(501, "bash", now, 900, 14400);
    assert_int_equal(commit(f, NULL, &s2).ok, 1);
    state_wait_t w1 = {0}, w2 = {0};
    sg_state_session_remove(f->st, s2.id, 501, on_state, &w1);
    sg_state_session_remove(f->st, s2.id, 501, on_state, &w2);
    RUN_UNTIL(f, w1.done && w2.done, WAIT_S);
    assert_int_equal(w1.r.ok + w2.r.ok, 1);

    /* gone everywhere */
    assert_false(get(f, s.id).found);
    list_wait_t l;
    list(f, 501, &l);
    assert_int_equal(l.n, 0);
    expired_wait_t e;
    expired(f, now + 100000, 10, &e);
    assert_int_equal(e.n, 0);
    assert_int_equal(reserve(f, 501, 1, "u").ok, 1); /* the slot is free again */
}

/* The rebuild's call: puts back what the ledger says is open, but never
 * over a live record, and never a session that was closed (its close may
 * not be in the ledger yet). */
static void test_restore(void **state)
{
    fixture_t *f = *state;
    int64_t now = sg_wall_s();
    sg_live_session_t s = make_session(601, "python", now, 900, 14400);
    EXPECT_RESULT(restore(f, &s), 1, 1);
    get_wait_t g = get(f, s.id);
    assert_true(g.found);
    assert_int_equal(g.s.tenant_id, 601);
    assert_int_equal(g.s.idle_deadline, now + 900);
    assert_int_equal(g.s.lifetime_deadline, now + 14400);
    expired_wait_t e;
    expired(f, now + 900, 10, &e);
    assert_int_equal(e.n, 1);
    assert_int_equal(reserve(f, 601, 1, "t").ok, 0); /* it holds the tenant's slot */

    /* live already: the record stays as it is */
    assert_int_equal(touch(f, s.id, now + 5, 900, 2).ok, 1);
    EXPECT_RESULT(restore(f, &s), 0, 1);
    g = get(f, s.id);
    assert_int_equal(g.s.executions, 2);
    assert_int_equal(g.s.last_used_at, now + 5);

    /* closed: it stays closed */
    assert_int_equal(remove_session(f, s.id, 601).ok, 1);
    EXPECT_RESULT(restore(f, &s), 0, 0);
    assert_false(get(f, s.id).found);
    list_wait_t l;
    list(f, 601, &l);
    assert_int_equal(l.n, 0);

    /* also when the remove found nothing (another gateway removed it first) */
    sg_live_session_t t = make_session(601, "python", now, 900, 14400);
    assert_int_equal(remove_session(f, t.id, 601).ok, 0);
    assert_int_equal(restore(f, &t).ok, 0);

    if (group_backend == BACKEND_MEMORY) {
        /* the mark lasts SG_STATE_CLOSED_TTL (in Redis it is the key's TTL:
         * test_key_schema) */
        sg_state_set_clock_skew_ms(f->st, (SG_STATE_CLOSED_TTL - 2) * 1000LL);
        assert_int_equal(restore(f, &t).ok, 0);
        sg_state_set_clock_skew_ms(f->st, (SG_STATE_CLOSED_TTL + 1) * 1000LL);
        assert_int_equal(restore(f, &t).ok, 1);
    }
}

static int find_expired(const expired_wait_t *e, const char *sid)
{
    for (size_t i = 0; i < e->n; i++) {
        if (strcmp(e->sids[i], sid) == 0)
            return (int)i;
    }
    return -1;
}

typedef struct {
    sg_state_t *st;
    int done, removed, won;
} reap_t;

static void on_reaped(void *data, const sg_state_result_t *r)
{
    reap_t *reap = data;
    reap->removed++;
    reap->won += r->available && r->ok;
}

/* What the gateway's reaper does: remove each from inside the callback. */
static void on_expired_reap(void *data, int available, size_t n, const char *const *sids, const char *const *reasons,
                            const int64_t *tenants)
{
    reap_t *reap = data;
    for (size_t i = 0; i < n; i++)
        sg_state_session_remove(reap->st, sids[i], tenants[i], on_reaped, reap);
    reap->done = 1;
}

static void test_expired(void **state)
{
    fixture_t *f = *state;
    int64_t base = sg_wall_s();
    sg_live_session_t a = make_session(601, "python", base, 100, 1000);  /* idle at +100 */
    sg_live_session_t b = make_session(602, "python", base, 500, 600);   /* lifetime at +600 */
    sg_live_session_t c = make_session(601, "node", base, 5000, 6000);   /* later */
    assert_int_equal(commit(f, NULL, &a).ok, 1);
    assert_int_equal(commit(f, NULL, &b).ok, 1);
    assert_int_equal(commit(f, NULL, &c).ok, 1);

    expired_wait_t e;
    expired(f, base + 99, 10, &e);
    assert_int_equal(e.n, 0);

    expired(f, base + 100, 10, &e);
    assert_int_equal(e.n, 1);
    assert_string_equal(e.sids[0], a.id);
    assert_string_equal(e.reasons[0], "idle");
    assert_int_equal(e.tenants[0], 601);

    /* b: both deadlines passed; lifetime is the one reported */
    expired(f, base + 600, 10, &e);
    assert_int_equal(e.n, 2);
    int ia = find_expired(&e, a.id), ib = find_expired(&e, b.id);
    assert_true(ia >= 0 && ib >= 0);
    assert_string_equal(e.reasons[ia], "idle");
    assert_string_equal(e.reasons[ib], "lifetime");
    assert_int_equal(e.tenants[ib], 602);

    /* at most limit */
    expired(f, base + 600, 1, &e);
    assert_int_equal(e.n, 1);
    expired(f, base + 600, 0, &e);
    assert_int_equal(e.n, 0);

    /* a touch moves a out of the idle set */
    assert_int_equal(touch(f, a.id, base + 100, 400, 0).ok, 1);
    expired(f, base + 499, 10, &e);
    assert_int_equal(e.n, 0);
    /* lifetime is not moved by use */
    expired(f, base + 1000, 10, &e);
    ia = find_expired(&e, a.id);
    assert_true(ia >= 0);
    assert_string_equal(e.reasons[ia], "lifetime");

    /* everything, once it is all past */
    expired(f, base + 10000, 10, &e);
    assert_int_equal(e.n, 3);
    assert_true(find_expired(&e, c.id) >= 0);
    assert_string_equal(e.reasons[find_expired(&e, c.id)], "lifetime");

    /* the reaper removes from inside the callback: removed ones are gone */
    reap_t reap = {.st = f->st};
    sg_state_sessions_expired(f->st, base + 10000, 10, on_expired_reap, &reap);
    RUN_UNTIL(f, reap.done && reap.removed == 3, WAIT_S);
    assert_int_equal(reap.won, 3);
    expired(f, base + 10000, 10, &e);
    assert_int_equal(e.n, 0);
    list_wait_t l;
    list(f, 0, &l);
    assert_int_equal(l.n, 0);
}

static int find_listed(const list_wait_t *l, const char *sid)
{
    for (size_t i = 0; i < l->n; i++) {
        if (strcmp(l->list[i].id, sid) == 0)
            return (int)i;
    }
    return -1;
}

static void test_list(void **state)
{
    fixture_t *f = *state;
    int64_t now = sg_wall_s();
    list_wait_t l;
    list(f, 0, &l);
    assert_int_equal(l.n, 0);

    sg_live_session_t a1 = make_session(701, "python", now, 900, 14400);
    sg_live_session_t a2 = make_session(701, "node", now, 900, 14400);
    sg_live_session_t b1 = make_session(702, "bash", now, 900, 14400);
    assert_int_equal(reserve(f, 701, 10, "pending-one").ok, 1); /* reservations are not listed */
    assert_int_equal(commit(f, NULL, &a1).ok, 1);
    assert_int_equal(commit(f, NULL, &a2).ok, 1);
    assert_int_equal(commit(f, NULL, &b1).ok, 1);
    assert_int_equal(touch(f, a2.id, now + 5, 900, 4).ok, 1);

    list(f, 701, &l);
    assert_int_equal(l.n, 2);
    int i1 = find_listed(&l, a1.id), i2 = find_listed(&l, a2.id);
    assert_true(i1 >= 0 && i2 >= 0);
    assert_string_equal(l.list[i1].lang, "python");
    assert_int_equal(l.list[i1].tenant_id, 701);
    assert_int_equal(l.list[i2].executions, 4);
    assert_int_equal(l.list[i2].last_used_at, now + 5);
    assert_int_equal(l.list[i2].lifetime_deadline, now + 14400);

    list(f, 702, &l);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.list[0].id, b1.id);
    assert_string_equal(l.list[0].lang, "bash");

    list(f, 703, &l);
    assert_int_equal(l.n, 0);

    list(f, 0, &l);
    assert_int_equal(l.n, 3);
    assert_true(find_listed(&l, b1.id) >= 0);
}

static void test_quota_flow(void **state)
{
    fixture_t *f = *state;
    quota_wait_t q = quota(f, 801, "20260102", 4, 1000);
    assert_int_equal(q.status, SG_QUOTA_UNSEEDED);

    sg_state_result_t r = seed(f, 801, "20260102", 2, 1.5);
    assert_int_equal(r.ok, 1);
    /* a second seed (another gateway, late) changes nothing */
    r = seed(f, 801, "20260102", 0, 0);
    assert_int_equal(r.ok, 0);

    q = quota(f, 801, "20260102", 4, 1000);
    assert_int_equal(q.status, SG_QUOTA_OK);
    assert_int_equal(q.execs, 3);
    assert_near(q.seconds, 1.5);
    q = quota(f, 801, "20260102", 4, 1000);
    assert_int_equal(q.status, SG_QUOTA_OK);
    assert_int_equal(q.execs, 4);
    q = quota(f, 801, "20260102", 4, 1000);
    assert_int_equal(q.status, SG_QUOTA_EXECS);
    assert_int_equal(q.execs, 4); /* a refusal counts nothing */
    q = quota(f, 801, "20260102", 4, 1000);
    assert_int_equal(q.status, SG_QUOTA_EXECS);
    assert_int_equal(q.execs, 4);
    /* a higher limit lets more through */
    q = quota(f, 801, "20260102", 5, 1000);
    assert_int_equal(q.status, SG_QUOTA_OK);
    assert_int_equal(q.execs, 5);

    /* days and tenants are separate */
    assert_int_equal(quota(f, 801, "20260103", 4, 1000).status, SG_QUOTA_UNSEEDED);
    assert_int_equal(quota(f, 802, "20260102", 4, 1000).status, SG_QUOTA_UNSEEDED);

    /* 0 means none */
    assert_int_equal(seed(f, 803, "20260102", 0, 0).ok, 1);
    assert_int_equal(quota(f, 803, "20260102", 0, 1000).status, SG_QUOTA_EXECS);

    /* 20 at once against a limit: exactly up to the limit */
    assert_int_equal(seed(f, 804, "20260102", 0, 0).ok, 1);
    quota_wait_t w[20];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 20; i++)
        sg_state_quota_reserve(f->st, 804, "20260102", 7, 1000, on_quota, &w[i]);
    int ok = 0;
    for (int i = 0; i < 20; i++) {
        RUN_UNTIL(f, w[i].done, WAIT_S);
        assert_int_equal(w[i].available, 1);
        ok += w[i].status == SG_QUOTA_OK;
    }
    assert_int_equal(ok, 7);
}

static void test_quota_seconds(void **state)
{
    fixture_t *f = *state;
    /* not seeded: nothing is added (the ledger has it; the seed will too) */
    assert_int_equal(add_seconds(f, 901, "20260102", 5).ok, 0);
    assert_int_equal(quota(f, 901, "20260102", 100, 20).status, SG_QUOTA_UNSEEDED);

    assert_int_equal(seed(f, 901, "20260102", 0, 10.5).ok, 1);
    assert_int_equal(add_seconds(f, 901, "20260102", 5.25).ok, 1);
    quota_wait_t q = quota(f, 901, "20260102", 100, 20);
    assert_int_equal(q.status, SG_QUOTA_OK);
    assert_int_equal(q.execs, 1);
    assert_near(q.seconds, 15.75);

    assert_int_equal(add_seconds(f, 901, "20260102", 4.25).ok, 1); /* 20.0: used up */
    q = quota(f, 901, "20260102", 100, 20);
    assert_int_equal(q.status, SG_QUOTA_SECONDS);
    assert_int_equal(q.execs, 1);
    assert_near(q.seconds, 20.0);
    /* executions are checked first */
    q = quota(f, 901, "20260102", 1, 20);
    assert_int_equal(q.status, SG_QUOTA_EXECS);
    /* and seconds stay as they were */
    q = quota(f, 901, "20260102", 100, 20.5);
    assert_int_equal(q.status, SG_QUOTA_OK);
    assert_near(q.seconds, 20.0);
}

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
    for (int i = 0; i < 10; i++) {
        RUN_UNTIL(f, w[i].done, WAIT_S);
        assert_int_equal(w[i].r.available, 1);
        ok += w[i].r.ok;
    }
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

#define SUITE(setup_, teardown_)                                                                                       \
    cmocka_unit_test_setup_teardown(test_backend_name, setup_, teardown_),                                             \
        cmocka_unit_test_setup_teardown(test_rate_exact, setup_, teardown_),                                           \
        cmocka_unit_test_setup_teardown(test_reserve_concurrent, setup_, teardown_),                                   \
        cmocka_unit_test_setup_teardown(test_unreserve, setup_, teardown_),                                            \
        cmocka_unit_test_setup_teardown(test_reservation_expires, setup_, teardown_),                                  \
        cmocka_unit_test_setup_teardown(test_exec_concurrent, setup_, teardown_),                                      \
        cmocka_unit_test_setup_teardown(test_exec_lease_expires, setup_, teardown_),                                   \
        cmocka_unit_test_setup_teardown(test_commit_get_touch, setup_, teardown_),                                     \
        cmocka_unit_test_setup_teardown(test_remove_once, setup_, teardown_),                                          \
        cmocka_unit_test_setup_teardown(test_restore, setup_, teardown_),                                              \
        cmocka_unit_test_setup_teardown(test_expired, setup_, teardown_),                                              \
        cmocka_unit_test_setup_teardown(test_list, setup_, teardown_),                                                 \
        cmocka_unit_test_setup_teardown(test_quota_flow, setup_, teardown_),                                           \
        cmocka_unit_test_setup_teardown(test_quota_seconds, setup_, teardown_)

int main(void)
{
    const struct CMUnitTest memory_tests[] = {SUITE(setup, teardown)};
    const struct CMUnitTest redis_tests[] = {
        SUITE(setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_urls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unreachable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_schema, setup, teardown),
        cmocka_unit_test_setup_teardown(test_db_select, setup, teardown),
        cmocka_unit_test_setup_teardown(test_destroy_inflight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_noscript, setup, teardown),
        cmocka_unit_test_setup_teardown(test_redis_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_redis_hang, setup, teardown),
    };
    signal(SIGPIPE, SIG_IGN);
    int failed = cmocka_run_group_tests_name("state: memory backend", memory_tests, group_setup_memory, group_teardown);
    failed += cmocka_run_group_tests_name("state: redis backend", redis_tests, group_setup_redis, group_teardown);
    return failed;
}
