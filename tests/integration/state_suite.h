/*
 * state_suite.h — what the state suites share (test_state.c, the
 * behavioural suite on both backends; test_state_redis.c, Redis only): a
 * real redis-server (sggw.h), one h2o loop per group, a fixture per test
 * that counts file descriptors, waiters for the callbacks and synchronous
 * wrappers of gateway/state/state.h. Each suite includes it once.
 */
#ifndef SANDGATE_STATE_SUITE_H
#define SANDGATE_STATE_SUITE_H

#include "http.h"
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

static inline bool server_ping(void)
{
    int ok;
    char *v = sggw_redis_cmd(redis, &ok, "PING");
    bool pong = ok && v != NULL && strcmp(v, "PONG") == 0;
    free(v);
    return pong;
}

/* Runs one command; 0 if it answered without error. */
static inline int server_command(const char *cmd)
{
    int ok;
    free(sggw_redis_cmd(redis, &ok, cmd));
    return ok ? 0 : -1;
}

/* ---- fixture ------------------------------------------------------------------------ */

typedef enum { BACKEND_MEMORY, BACKEND_REDIS } backend_t;
static backend_t group_backend;
static h2o_loop_t *group_loop;
static int group_solo; /* redis: each test's backend asks for the solo lease and holds it first */

typedef struct {
    h2o_loop_t *loop;
    sg_state_t *st;
    int fds; /* open before the test */
} fixture_t;

static inline int count_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        n += fcntl(fd, F_GETFD) != -1;
    return n;
}

static char redis_url[64];

static inline void run_for(fixture_t *f, double seconds)
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

static inline int wait_available(fixture_t *f, double timeout_s)
{
    double deadline = sgtest_now() + timeout_s;
    while (!sg_state_available(f->st) && sgtest_now() < deadline)
        h2o_evloop_run(f->loop, 10);
    return sg_state_available(f->st);
}

/* One loop per group: h2o 2.2.5's h2o_evloop_destroy leaks the epoll fd,
 * which would hide a leak of ours from the per-test fd count. */
static inline int group_setup_memory(void **state)
{
    group_backend = BACKEND_MEMORY;
    group_loop = h2o_evloop_create();
    return 0;
}

static inline int group_teardown(void **state)
{
    sg_loop_forget(group_loop); /* the state's Redis adapter wrote through it */
    h2o_evloop_destroy(group_loop);
    group_loop = NULL;
    sggw_redis_stop(redis);
    redis = NULL;
    group_solo = 0;
    return 0;
}

static inline int group_setup_redis(void **state)
{
    group_backend = BACKEND_REDIS;
    group_loop = h2o_evloop_create();
    if ((redis = sggw_redis_start()) == NULL)
        return -1;
    snprintf(redis_url, sizeof(redis_url), "%s/0", sggw_redis_url(redis));
    return 0;
}

static inline int setup(void **state)
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
    if (group_solo) {
        sg_state_redis_stats_t solo = {0};
        double deadline = sgtest_now() + WAIT_S;
        sg_state_redis_solo(f->st, 1);
        while (!solo.holds && sgtest_now() < deadline) {
            h2o_evloop_run(f->loop, 10);
            sg_state_redis_stats(f->st, &solo);
        }
        if (!solo.holds) {
            fprintf(stderr, "the redis backend did not take the solo lease\n");
            return -1;
        }
    }
    return 0;
}

/* The solo group: as the redis group, each backend holding the lease. */
static inline int group_setup_redis_solo(void **state)
{
    group_solo = 1;
    return group_setup_redis(state);
}

static inline int teardown(void **state)
{
    fixture_t *f = *state;
    if (redis != NULL)
        sggw_redis_resume(redis);
    if (group_solo) {
        /* Redis answered every admission the copy made as the copy did */
        sg_state_redis_stats_t solo;
        sg_state_redis_stats(f->st, &solo);
        if (solo.mismatches != 0) {
            fprintf(stderr, "teardown: %llu admissions from the copy that Redis answered otherwise\n",
                    (unsigned long long)solo.mismatches);
            sg_state_destroy(f->st);
            free(f);
            return -1;
        }
    }
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
    static inline void on_##name(void *data, const type *r)                                                            \
    {                                                                                                                  \
        name##_wait_t *w = data;                                                                                       \
        w->r = *r;                                                                                                     \
        w->done++;                                                                                                     \
    }
RESULT_WAITER(rate, sg_rate_result_t)
RESULT_WAITER(state, sg_state_result_t)
RESULT_WAITER(admit, sg_admit_result_t)

typedef struct {
    int done, available, found;
    sg_live_session_t s;
} get_wait_t;

static inline void on_get(void *data, int available, const sg_live_session_t *s)
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

static inline void on_expired(void *data, int available, size_t n, const char *const *sids, const char *const *reasons,
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

static inline void on_list(void *data, int available, size_t n, const sg_live_session_t *list)
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

static inline void on_quota(void *data, int available, sg_quota_status_t status, int64_t execs, double seconds)
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
static inline sg_rate_result_t rate(fixture_t *f, int64_t tenant, long per_min, long burst)
{
    rate_wait_t w = {0};
    sg_state_rate_check(f->st, tenant, per_min, burst, on_rate, &w);
    RUN_UNTIL(f, w.done, WAIT_S);
    assert_int_equal(w.done, 1);
    return w.r;
}

static inline sg_state_result_t check_state(fixture_t *f, state_wait_t *w)
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

static inline sg_state_result_t reserve(fixture_t *f, int64_t tenant, long max, const char *token)
{
    STATE_CALL(f, sg_state_session_reserve, tenant, max, token);
}

static inline sg_state_result_t unreserve(fixture_t *f, int64_t tenant, const char *token)
{
    STATE_CALL(f, sg_state_session_unreserve, tenant, token);
}

static inline sg_state_result_t exec_acquire(fixture_t *f, int64_t tenant, long max, const char *token, long lease_s)
{
    STATE_CALL(f, sg_state_exec_acquire, tenant, max, token, lease_s);
}

static inline sg_state_result_t exec_release(fixture_t *f, int64_t tenant, const char *token)
{
    STATE_CALL(f, sg_state_exec_release, tenant, token);
}

static inline sg_state_result_t mcp_open(fixture_t *f, int64_t tenant, long max, const char *id, long idle_s)
{
    STATE_CALL(f, sg_state_mcp_open, tenant, max, id, idle_s);
}

static inline sg_state_result_t mcp_touch(fixture_t *f, int64_t tenant, const char *id, long idle_s)
{
    STATE_CALL(f, sg_state_mcp_touch, tenant, id, idle_s);
}

static inline sg_state_result_t mcp_close(fixture_t *f, int64_t tenant, const char *id)
{
    STATE_CALL(f, sg_state_mcp_close, tenant, id);
}

static inline sg_state_result_t commit(fixture_t *f, const char *token, const sg_live_session_t *s)
{
    STATE_CALL(f, sg_state_session_commit, token, s);
}

static inline sg_state_result_t touch(fixture_t *f, const char *sid, int64_t now, long idle, int add)
{
    STATE_CALL(f, sg_state_session_touch, sid, now, idle, add);
}

static inline sg_state_result_t remove_session(fixture_t *f, const char *sid, int64_t tenant)
{
    STATE_CALL(f, sg_state_session_remove, sid, tenant);
}

static inline sg_state_result_t restore(fixture_t *f, const sg_live_session_t *s)
{
    STATE_CALL(f, sg_state_session_restore, s);
}

static inline get_wait_t get(fixture_t *f, const char *sid)
{
    get_wait_t w = {0};
    sg_state_session_get(f->st, sid, on_get, &w);
    RUN_UNTIL(f, w.done, WAIT_S);
    assert_int_equal(w.done, 1);
    assert_int_equal(w.available, 1);
    return w;
}

static inline void expired(fixture_t *f, int64_t now, size_t limit, expired_wait_t *w)
{
    memset(w, 0, sizeof(*w));
    sg_state_sessions_expired(f->st, now, limit, on_expired, w);
    RUN_UNTIL(f, w->done, WAIT_S);
    assert_int_equal(w->done, 1);
    assert_int_equal(w->available, 1);
}

static inline void list(fixture_t *f, int64_t tenant, list_wait_t *w)
{
    memset(w, 0, sizeof(*w));
    sg_state_sessions_list(f->st, tenant, on_list, w);
    RUN_UNTIL(f, w->done, WAIT_S);
    assert_int_equal(w->done, 1);
    assert_int_equal(w->available, 1);
}

static inline quota_wait_t quota(fixture_t *f, int64_t tenant, const char *day, long max_execs, double max_seconds)
{
    quota_wait_t w = {0};
    sg_state_quota_reserve(f->st, tenant, day, max_execs, max_seconds, on_quota, &w);
    RUN_UNTIL(f, w.done, WAIT_S);
    assert_int_equal(w.done, 1);
    assert_int_equal(w.available, 1);
    return w;
}

static inline sg_state_result_t seed(fixture_t *f, int64_t tenant, const char *day, int64_t execs, double seconds)
{
    STATE_CALL(f, sg_state_quota_seed, tenant, day, execs, seconds);
}

static inline sg_state_result_t add_seconds(fixture_t *f, int64_t tenant, const char *day, double seconds)
{
    STATE_CALL(f, sg_state_quota_add_seconds, tenant, day, seconds);
}

static inline sg_live_session_t make_session(int64_t tenant, const char *lang, int64_t now, long idle, long lifetime)
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

static inline void assert_near(double got, double want)
{
    if (got < want - 1e-6 || got > want + 1e-6)
        fail_msg("%.9f, expected %.9f", got, want);
}

#endif
