/*
 * test_sec_concurrency.c — one tenant must not be able to occupy the host
 * by running many things at once (issue 9, item 4).
 *
 * The attacks, through the public API with an ordinary tenant token:
 *   - a flood of parallel one-shot POST /execute, each a 512 MiB container
 *     sleeping: the tenant's max_concurrent_execs holds exactly (429
 *     concurrency_limit with Retry-After past it), Docker never holds more
 *     of its one-shot containers than the cap (sampled while the flood
 *     runs), another tenant runs meanwhile, and the slots come back;
 *     with the state in Redis and in the gateway's process;
 *   - the same cap reached by mixing in-session executes, commands and
 *     one-shots;
 *   - a client that hangs up, a proxy that does not answer: the slot comes
 *     back (once the hung-up run is over), never leaks;
 *   - a tenant whose cap is 0 runs nothing (executes, commands, one-shots,
 *     library installs), but still creates sessions and moves files;
 *   - a flood past the proxy's own SANDGATE_MAX_CONTAINERS (every tenant's
 *     containers together): never more containers than the cap (sampled),
 *     503 no_capacity with Retry-After for the rest, passed through the
 *     gateway; the warm pool, which counts against that cap, gives its
 *     ready containers up to requests instead of starving them; library
 *     installer containers count too.
 * After each: the service and a fresh session still work.
 *
 * Real components: sandgate-proxy processes on the Docker engine (their own
 * ids), a redis-server, sandgate-gateway processes, their SQLite files.
 */
#include "sgsec.h"
#include "sgrun.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sgtest_proxy_t *proxy; /* pool 0: every one-shot container is labelled ephemeral */
static char *proxy_id;
static sggw_redis_t *redis;
static sggw_gateway_t *gw_redis; /* the state in Redis */
static sggw_gateway_t *gw_mem;   /* the state in the gateway's process */
/* the proxy-cap tests' own small proxy and gateway */
static sgtest_proxy_t *small_proxy;
static char *small_id;
static sggw_gateway_t *small_gw;

static const char sleep_body[] = "{\"code\":\"import time; time.sleep(2)\",\"lang\":\"python\",\"timeout\":60}";
static const char print_body[] = "{\"code\":\"print(6 * 7)\",\"lang\":\"python\"}";

/* ------------------------------------------------------------------------
 * Counting containers while a batch runs
 * ------------------------------------------------------------------------ */

/* A thread that lists the containers carrying `labels` every 20 ms and
 * keeps the largest count it saw. */
typedef struct {
    const char *labels[4];
    char buf[2][192];
    pthread_t thread;
    int stop;     /* __atomic */
    int max_seen; /* read after join */
    int samples;
    int errors;
} sampler_t;

static void *sampler_main(void *arg)
{
    sampler_t *s = arg;
    while (!__atomic_load_n(&s->stop, __ATOMIC_SEQ_CST)) {
        json_object *l = sgtest_docker_list(s->labels);
        if (l == NULL) {
            s->errors++;
        } else {
            int n = (int)json_object_array_length(l);
            if (n > s->max_seen)
                s->max_seen = n;
            s->samples++;
            json_object_put(l);
        }
        usleep(20000);
    }
    return NULL;
}

/* kind NULL: every container of the proxy. */
static void sampler_start(sampler_t *s, const char *pid, const char *kind)
{
    memset(s, 0, sizeof(*s));
    pathf(s->buf[0], sizeof(s->buf[0]), "sandgate.proxy=%s", pid);
    s->labels[0] = s->buf[0];
    if (kind != NULL) {
        pathf(s->buf[1], sizeof(s->buf[1]), "sandgate.kind=%s", kind);
        s->labels[1] = s->buf[1];
    }
    SG_CHECK(pthread_create(&s->thread, NULL, sampler_main, s) == 0, NULL, "cannot start the sampler thread");
}

static void sampler_stop(sampler_t *s)
{
    __atomic_store_n(&s->stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(s->thread, NULL);
    SG_CHECK(s->samples >= 10 && s->errors == 0, NULL, "the sampler listed containers %d times (%d errors)", s->samples,
             s->errors);
}

/* ------------------------------------------------------------------------
 * Replies
 * ------------------------------------------------------------------------ */

/* 429 concurrency_limit, with Retry-After and the rate headers the other
 * 429s have (absent only while Redis is down: the rate limit fails open). */
static void expect_429_rate(const sgtest_reply_t *r, bool rate_headers)
{
    json_object_put(SG_EXPECT_ERROR(r, 429, "concurrency_limit"));
    sggw_int_header(r, "Retry-After", 1);
    if (rate_headers)
        sggw_int_header(r, "X-RateLimit-Limit", 1);
}

static void expect_concurrency_429(const sgtest_reply_t *r)
{
    expect_429_rate(r, true);
}

/* The same while Redis is down (no rate headers). */
static void expect_concurrency_429_redis_down(const sgtest_reply_t *r)
{
    expect_429_rate(r, false);
}

/* 503 no_capacity from the proxy, passed through, with Retry-After. */
static void expect_no_capacity(const sgtest_reply_t *r)
{
    json_object_put(SG_EXPECT_ERROR(r, 503, "no_capacity"));
    sggw_int_header(r, "Retry-After", 1);
}

/* A successful execution result whose stdout is `out` (NULL: any). */
static void expect_result(const sgtest_reply_t *r, const char *out)
{
    json_object *o = SG_EXPECT_JSON(r, 200);
    sggw_check_result(o);
    SG_CHECK(SG_INT(o, "exit_code") == 0, o, "the run must succeed");
    if (out != NULL)
        SG_CHECK(strcmp(SG_STR(o, "stdout"), out) == 0, o, "stdout must be \"%s\"", out);
    json_object_put(o);
}

/* The replies of reqs[0..n): a 200 must be a successful result with empty
 * stdout, anything else the refusal that `refused` asserts. Frees them;
 * returns the number of 200s. */
static int count_ok(sggw_par_req_t *reqs, int n, void (*refused)(const sgtest_reply_t *))
{
    int ok = 0;
    for (int i = 0; i < n; i++) {
        sgtest_reply_t *r = &reqs[i].reply;
        if (r->status == 200) {
            expect_result(r, "");
            ok++;
        } else {
            refused(r);
        }
        sgtest_reply_free(r);
    }
    return ok;
}

/* n requests POST body as tok to the gateway g's path (its URL kept in
 * url, which the requests point to). */
static void fill_posts(sggw_par_req_t *q, int n, char url[256], sggw_gateway_t *g, const char *path, const char *tok,
                       const char *body)
{
    pathf(url, 256, "%s%s", sggw_gateway_url(g), path);
    sggw_par_posts(q, n, url, tok, body, 120);
}

/* n parallel one-shot print(6 * 7): all must succeed. */
static void one_shots_succeed(sggw_gateway_t *g, const char *tok, int n)
{
    sggw_par_req_t q[8];
    char url[256];
    SG_CHECK(n <= 8, NULL, "at most 8");
    fill_posts(q, n, url, g, "/execute", tok, print_body);
    SG_CHECK(sggw_parallel(q, (size_t)n) == 0, NULL, "cannot start threads");
    for (int i = 0; i < n; i++) {
        expect_result(&q[i].reply, "42\n");
        sgtest_reply_free(&q[i].reply);
    }
}

/* A fresh session works: create, execute, delete. */
static void fresh_session_works(sggw_gateway_t *g, const char *tok)
{
    sgsec_fresh_session_runs(g, tok, NULL, "print('fresh')", 0, "fresh\n");
}

/* The tenant (its id, *(int64_t *)id) holds no slot in Redis. */
static bool redis_execs_empty(void *id)
{
    int ok = 0;
    char *n = sggw_redis_cmd(redis, &ok, "ZCARD sg:tenant:%lld:execs", (long long)*(int64_t *)id);
    bool empty = ok && n != NULL && strcmp(n, "0") == 0;
    free(n);
    return empty;
}

/* Redis only: the tenant's in-flight set is empty again (the releases are
 * on their way right after the replies). */
static void redis_execs_drained(sggw_gateway_t *g, const char *tenant)
{
    int64_t id = sggw_tenant_id(sggw_gateway_data_dir(g), tenant);
    SG_CHECK(sgsec_poll(redis_execs_empty, &id, 3, 50) == 0, NULL,
             "sg:tenant:%lld:execs still holds slots 3 s after the replies", (long long)id);
}

/* ------------------------------------------------------------------------
 * Fixtures
 * ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
    proxy_id = sgtest_new_proxy_id();
    const char *env[] = {"SANDGATE_POOL_SIZE=0", NULL};
    if (proxy_id == NULL || (proxy = sgtest_proxy_start(proxy_id, env)) == NULL)
        return -1;
    if ((redis = sggw_redis_start()) == NULL)
        return -1;
    sggw_opts_t o = {.proxy_url = sgtest_proxy_url(proxy), .redis_url = sggw_redis_url(redis)};
    if ((gw_redis = sggw_gateway_start(&o)) == NULL)
        return -1;
    sggw_opts_t m = {.proxy_url = sgtest_proxy_url(proxy)};
    gw_mem = sggw_gateway_start(&m);
    return gw_mem != NULL ? 0 : -1;
}

/* Stops the small proxy and its gateway; the proxy removes its containers
 * at SIGTERM, and none may remain. */
static int small_stack_stop(void)
{
    int rc = 0;
    if (small_gw != NULL && sggw_gateway_stop(small_gw) != 0)
        rc = -1;
    small_gw = NULL;
    if (small_proxy != NULL && sgtest_proxy_stop(small_proxy) != 0)
        rc = -1;
    small_proxy = NULL;
    if (small_id != NULL && sgtest_docker_remove_all(small_id) != 0) {
        fprintf(stderr, "teardown: containers of %s remained after its proxy stopped\n", small_id);
        rc = -1;
    }
    free(small_id);
    small_id = NULL;
    return rc;
}

/* The gateway (g) says its Redis is up (GET /metrics). */
static bool redis_up(void *g)
{
    sgtest_reply_t r;
    sggw_call(g, NULL, "GET", "/metrics", NULL, &r);
    bool up = r.status == 200 && sggw_metric(r.body, "sandgate_redis_up", "") == 1;
    sgtest_reply_free(&r);
    return up;
}

/* 0 once the gateway says its Redis is up, -1 after timeout_s. */
static int wait_redis_up(sggw_gateway_t *g, double timeout_s)
{
    return sgsec_poll(redis_up, g, timeout_s, 100);
}

static int after_test(void **state)
{
    sggw_after_test();
    int rc = small_stack_stop();
    if (redis != NULL && !sggw_redis_running(redis)) {
        /* a test that killed it failed before starting it again */
        fprintf(stderr, "redis-server was down after the test: starting it again\n");
        if (sggw_redis_restart(redis) != 0 || wait_redis_up(gw_redis, 20) != 0)
            return -1;
        rc = -1;
    }
    if (!sgtest_proxy_alive(proxy) || !sggw_gateway_alive(gw_redis) || !sggw_gateway_alive(gw_mem) ||
        !sggw_redis_running(redis)) {
        fprintf(stderr, "a server died during this test\n");
        sggw_print_logs(80);
        rc = -1;
    }
    return rc;
}

static int group_teardown(void **state)
{
    int rc = 0;
    if (gw_mem != NULL && (sggw_gateway_quiesce(gw_mem) != 0 || sggw_gateway_stop(gw_mem) != 0))
        rc = -1;
    gw_mem = NULL;
    if (sggw_stack_stop(&gw_redis, &redis, &proxy, proxy_id) != 0)
        rc = -1;
    free(proxy_id);
    return rc;
}

/* ------------------------------------------------------------------------
 * 1. A flood of one-shot executions
 * ------------------------------------------------------------------------ */

static void oneshot_flood(sggw_gateway_t *g, const char *tenant, const char *other_tenant)
{
    const char *dir = sggw_gateway_data_dir(g);
    const char *q[] = {"max_concurrent_execs=3", NULL};
    char *tok = sggw_new_tenant(dir, tenant, q);
    char *other = sggw_new_tenant(dir, other_tenant, NULL);
    char *other_sid = sggw_create_session(g, other, NULL, NULL);
    char *own_sid = sggw_create_session(g, tok, NULL, NULL);
    enum { N = 20 };
    sggw_par_req_t reqs[N];
    char url[256];
    sampler_t smp;

    fill_posts(reqs, N, url, g, "/execute", tok, sleep_body);
    sampler_start(&smp, proxy_id, "ephemeral");
    sggw_batch_t *b = sggw_batch_start(reqs, N);
    SG_CHECK(b != NULL, NULL, "cannot start threads");

    /* while the flood's runs sleep: the flooding tenant itself is at its
     * cap in its session too; the other tenant runs as if nothing happened */
    double deadline = sgtest_now() + 30;
    while (smp.max_seen == 0 && sgtest_now() < deadline)
        usleep(20000);
    SG_CHECK(smp.max_seen > 0, NULL, "no one-shot container appeared within 30 s");
    sgtest_reply_t r;
    char path[128];
    pathf(path, sizeof(path), "/sessions/%s/execute", own_sid);
    sggw_call(g, tok, "POST", path, "{\"code\":\"print(1)\"}", &r);
    bool own_refused = r.status == 429;
    if (own_refused)
        expect_concurrency_429(&r);
    sgtest_reply_free(&r);
    double t0 = sgtest_now();
    json_object *o = sggw_execute(g, other, other_sid, "print('other tenant')", 0);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "other tenant\n") == 0, o, "the other tenant's execute must run");
    json_object_put(o);
    pathf(path, sizeof(path), "/sessions/%s/commands", other_sid);
    sggw_call(g, other, "POST", path, "{\"command\":\"echo still\"}", &r);
    expect_result(&r, "still\n");
    sgtest_reply_free(&r);
    double other_took = sgtest_now() - t0;
    bool flood_running = b != NULL && smp.max_seen > 0;

    sggw_batch_join(b);
    sampler_stop(&smp);

    int ok = count_ok(reqs, N, expect_concurrency_429), limited = N - ok;
    fprintf(stderr,
            "    %s: %d x 200, %d x 429; at most %d one-shot containers seen in %d samples; "
            "the other tenant's execute + command took %.2f s\n",
            tenant, ok, limited, smp.max_seen, smp.samples, other_took);
    SG_CHECK(ok == 3 && limited == N - 3, NULL,
             "max_concurrent_execs 3, 20 parallel one-shots: expected exactly 3 x 200 and 17 x 429, got %d and %d", ok,
             limited);
    SG_CHECK(smp.max_seen <= 3, NULL, "Docker held %d one-shot containers of the tenant at once (cap 3)", smp.max_seen);
    SG_CHECK(flood_running && own_refused, NULL,
             "while its 3 runs slept, the tenant's own in-session execute must be refused too");

    /* the slots come back: the cap's worth of runs at once, all served */
    if (sggw_redis_url(redis) != NULL && g == gw_redis)
        redis_execs_drained(g, tenant);
    one_shots_succeed(g, tok, 3);
    o = sggw_execute(g, tok, own_sid, "print('after')", 0);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "after\n") == 0, o, "the tenant's session must run again");
    json_object_put(o);
    fresh_session_works(g, tok);

    sggw_delete_session(g, tok, own_sid);
    sggw_delete_session(g, other, other_sid);
    free(own_sid);
    free(other_sid);
    free(other);
    free(tok);
}

SGGW_TEST(test_oneshot_flood_redis)
{
    oneshot_flood(gw_redis, "flood-r", "bystander-r");
}

SGGW_TEST(test_oneshot_flood_memory)
{
    oneshot_flood(gw_mem, "flood-m", "bystander-m");
}

/* ------------------------------------------------------------------------
 * 2. The same cap reached through sessions: executes and commands count
 *    like one-shots
 * ------------------------------------------------------------------------ */

static void mixed_flood(sggw_gateway_t *g, const char *tenant)
{
    const char *q[] = {"max_concurrent_execs=3", NULL};
    char *tok = sggw_new_tenant(sggw_gateway_data_dir(g), tenant, q);
    char *sid[3];
    for (int i = 0; i < 3; i++)
        sid[i] = sggw_create_session(g, tok, NULL, NULL);
    enum { N = 8 };
    sggw_par_req_t reqs[N];
    char urls[4][256];
    const char *cmd_body = "{\"command\":\"sleep 2\",\"timeout\":60}";
    const char *exec_body = "{\"code\":\"import time; time.sleep(2)\",\"timeout\":60}";

    pathf(urls[0], sizeof(urls[0]), "%s/sessions/%s/execute", sggw_gateway_url(g), sid[0]);
    pathf(urls[1], sizeof(urls[1]), "%s/sessions/%s/commands", sggw_gateway_url(g), sid[1]);
    pathf(urls[2], sizeof(urls[2]), "%s/sessions/%s/execute", sggw_gateway_url(g), sid[2]);
    pathf(urls[3], sizeof(urls[3]), "%s/execute", sggw_gateway_url(g));
    /* 4 in sessions (2 executes, 2 commands) and 4 one-shots */
    reqs[0] = sggw_par_post(urls[0], tok, exec_body, 120);
    reqs[1] = sggw_par_post(urls[1], tok, cmd_body, 120);
    reqs[2] = sggw_par_post(urls[2], tok, exec_body, 120);
    reqs[3] = sggw_par_post(urls[1], tok, cmd_body, 120);
    for (int i = 4; i < N; i++)
        reqs[i] = sggw_par_post(urls[3], tok, sleep_body, 120);
    SG_CHECK(sggw_parallel(reqs, N) == 0, NULL, "cannot start threads");

    int ok = 0, limited = 0, session_ok = 0, session_limited = 0;
    for (int i = 0; i < N; i++) {
        sgtest_reply_t *r = &reqs[i].reply;
        if (r->status == 200) {
            expect_result(r, "");
            ok++;
            session_ok += i < 4;
        } else {
            expect_concurrency_429(r);
            limited++;
            session_limited += i < 4;
        }
        sgtest_reply_free(r);
    }
    fprintf(stderr, "    %s: %d x 200 (%d in sessions), %d x 429 (%d in sessions)\n", tenant, ok, session_ok, limited,
            session_limited);
    /* were session runs not counted, all 4 of them would have run */
    SG_CHECK(ok == 3 && limited == 5, NULL,
             "max_concurrent_execs 3, 8 parallel runs (4 in sessions): expected 3 x 200 and 5 x 429, got %d and %d", ok,
             limited);

    one_shots_succeed(g, tok, 3);
    for (int i = 0; i < 3; i++) {
        sggw_delete_session(g, tok, sid[i]);
        free(sid[i]);
    }
    fresh_session_works(g, tok);
    free(tok);
}

SGGW_TEST(test_mixed_flood_redis)
{
    mixed_flood(gw_redis, "mixed-r");
}

SGGW_TEST(test_mixed_flood_memory)
{
    mixed_flood(gw_mem, "mixed-m");
}

/* With Redis down the cap is kept by the gateway's own count (README,
 * "When Redis is unreachable"): executions go on, the flood is still cut
 * at 3; with Redis back, the shared count applies again. */
SGGW_TEST(test_cap_holds_while_redis_down)
{
    sggw_gateway_t *g = gw_redis;
    const char *q[] = {"max_concurrent_execs=3", NULL};
    char *tok = sggw_new_tenant(sggw_gateway_data_dir(g), "outage", q);
    enum { N = 10 };
    sggw_par_req_t reqs[N];
    char url[256];

    sggw_redis_kill(redis);
    fill_posts(reqs, N, url, g, "/execute", tok, sleep_body);
    SG_CHECK(sggw_parallel(reqs, N) == 0, NULL, "cannot start threads");
    int ok = count_ok(reqs, N, expect_concurrency_429_redis_down), limited = N - ok;
    SG_CHECK(ok == 3 && limited == N - 3, NULL,
             "Redis down, max_concurrent_execs 3, 10 parallel one-shots: expected 3 x 200 and 7 x 429, got %d and %d",
             ok, limited);
    one_shots_succeed(g, tok, 3);

    /* back: the slots live in Redis once more */
    SG_CHECK(sggw_redis_restart(redis) == 0, NULL, "cannot start redis-server again");
    SG_CHECK(wait_redis_up(g, 20) == 0, NULL, "the gateway did not use Redis again within 20 s");
    char *sid = sggw_create_session(g, tok, NULL, NULL);
    pathf(url, sizeof(url), "%s/sessions/%s/execute", sggw_gateway_url(g), sid);
    const char *exec_body = "{\"code\":\"import time; time.sleep(2)\",\"timeout\":60}";
    for (int i = 0; i < N; i++)
        reqs[i] = sggw_par_post(url, tok, exec_body, 120);
    /* one at a time runs in the session; the cap still admits 3 */
    SG_CHECK(sggw_parallel(reqs, 5) == 0, NULL, "cannot start threads");
    ok = count_ok(reqs, 5, expect_concurrency_429);
    limited = 5 - ok;
    SG_CHECK(ok == 3 && limited == 2, NULL, "Redis back: expected 3 x 200 and 2 x 429, got %d and %d", ok, limited);
    redis_execs_drained(g, "outage");
    sggw_delete_session(g, tok, sid);
    free(sid);
    fresh_session_works(g, tok);
    free(tok);
}

/* A slot comes back however its request ends: a client that hangs up
 * (once the run it started is over: the container was busy until then),
 * a proxy that does not answer. */
SGGW_TEST(test_slots_come_back)
{
    sggw_gateway_t *g = gw_redis;
    const char *q[] = {"max_concurrent_execs=1", NULL};
    char *tok = sggw_new_tenant(sggw_gateway_data_dir(g), "hangup", q);
    char url[256];
    sgtest_reply_t r;

    /* the client gives up after 2 s, once its run has surely started (a
     * one-shot sandbox under runsc on a busy machine can take over 1 s to
     * get there); the run goes on for 3 s more */
    static const char long_sleep_body[] =
        "{\"code\":\"import time; time.sleep(5)\",\"lang\":\"python\",\"timeout\":60}";
    pathf(url, sizeof(url), "%s/execute", sggw_gateway_url(g));
    sggw_par_req_t hang;
    hang = sggw_par_post(url, tok, long_sleep_body, 2);
    SG_CHECK(sggw_parallel(&hang, 1) == 0, NULL, "cannot start a thread");
    SG_CHECK(hang.reply.status == 0, NULL, "the client was to give up before the reply (got HTTP %ld)",
             hang.reply.status);
    sgtest_reply_free(&hang.reply);
    sggw_call(g, tok, "POST", "/execute", print_body, &r);
    expect_concurrency_429(&r); /* still running */
    sgtest_reply_free(&r);
    double deadline = sgtest_now() + 30;
    for (;;) {
        sggw_call(g, tok, "POST", "/execute", print_body, &r);
        if (r.status == 200)
            break;
        expect_concurrency_429(&r);
        sgtest_reply_free(&r);
        SG_CHECK(sgtest_now() < deadline, NULL, "the slot of a client that hung up did not come back in 30 s");
        usleep(200000);
    }
    expect_result(&r, "42\n");
    sgtest_reply_free(&r);
    redis_execs_drained(g, "hangup");

    /* a gateway whose proxy does not answer: 502 every time, never 429 */
    sggw_opts_t o = {.proxy_url = "http://127.0.0.1:9"};
    sggw_gateway_t *dead = sggw_gateway_start(&o);
    SG_CHECK(dead != NULL, NULL, "cannot start a gateway");
    char *tok2 = sggw_new_tenant(sggw_gateway_data_dir(dead), "no-proxy", q);
    for (int i = 0; i < 3; i++) {
        sggw_call(dead, tok2, "POST", "/execute", print_body, &r);
        json_object_put(SG_EXPECT_ERROR(&r, 502, "proxy_unavailable"));
        sgtest_reply_free(&r);
    }
    free(tok2);
    SG_CHECK(sggw_gateway_stop(dead) == 0, NULL, "the gateway did not exit with status 0");
    fresh_session_works(g, tok);
    free(tok);
}

/* ------------------------------------------------------------------------
 * 3. A cap of 0: nothing that runs code, whatever the route
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_zero_cap_runs_nothing)
{
    sggw_gateway_t *g = gw_redis;
    const char *dir = sggw_gateway_data_dir(g);
    const char *q[] = {"max_concurrent_execs=0", NULL};
    char *tok = sggw_new_tenant(dir, "zero", q);
    sgtest_reply_t r;
    char path[160];

    /* creating a session and its files do not run code */
    char *sid = sggw_create_session(g, tok, NULL, NULL);
    pathf(path, sizeof(path), "/sessions/%s/files?path=a.txt", sid);
    {
        char url[512];
        pathf(url, sizeof(url), "%s%s", sggw_gateway_url(g), path);
        char auth[400];
        pathf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
        const char *h[] = {auth, NULL};
        sggw_http("PUT", url, "hello", 5, "application/octet-stream", h, 30, &r);
        SG_ASSERT_STATUS(&r, 200);
        sgtest_reply_free(&r);
    }
    /* everything that runs code is refused: path (%s: the session), body */
    const struct {
        const char *path, *body;
    } runs[] = {
        {"/execute", print_body},
        {"/sessions/%s/execute", "{\"code\":\"print(1)\"}"},
        {"/sessions/%s/commands", "{\"command\":\"cat a.txt\"}"},
        {"/sessions/%s/libraries", "{\"package\":\"tabulate\"}"},
    };
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        pathf(path, sizeof(path), runs[i].path, sid);
        sggw_call(g, tok, "POST", path, runs[i].body, &r);
        expect_concurrency_429(&r);
        sgtest_reply_free(&r);
    }
    /* refused runs are not billed: the ledger has none */
    char *out = NULL;
    SG_CHECK(sggw_admin(dir, &out, "--json", "usage", "zero", NULL) == 0, NULL, "usage failed");
    json_object *u = json_tokener_parse(out);
    free(out);
    SG_CHECK(u != NULL && SG_INT(u, "executions") == 0, u, "refused runs must not be in the ledger");
    json_object_put(u);

    /* the quota comes fresh with every request: raised, the session runs */
    const char *kv[] = {"max_concurrent_execs=1", NULL};
    sggw_tenant_set(dir, "zero", kv);
    pathf(path, sizeof(path), "/sessions/%s/commands", sid);
    sggw_call(g, tok, "POST", path, "{\"command\":\"cat a.txt\"}", &r);
    expect_result(&r, "hello");
    sgtest_reply_free(&r);

    /* the admin API reads and sets it too */
    sggw_admin_call(g, "PATCH", "/admin/tenants/zero", "{\"max_concurrent_execs\":5}", &r);
    json_object *t = SG_EXPECT_JSON(&r, 200);
    SG_CHECK(SG_INT(t, "max_concurrent_execs") == 5, t, "PATCH must set max_concurrent_execs");
    json_object_put(t);
    sgtest_reply_free(&r);
    sggw_admin_call(g, "GET", "/admin/tenants/zero", NULL, &r);
    t = SG_EXPECT_JSON(&r, 200);
    SG_CHECK(SG_INT(t, "max_concurrent_execs") == 5, t, "GET must show max_concurrent_execs");
    json_object_put(t);
    sgtest_reply_free(&r);
    sggw_admin_call(g, "PATCH", "/admin/tenants/zero", "{\"max_concurrent_execs\":-1}", &r);
    json_object_put(SG_EXPECT_ERROR(&r, 400, NULL));
    sgtest_reply_free(&r);

    sggw_delete_session(g, tok, sid);
    free(sid);
    fresh_session_works(g, tok);
    free(tok);
}

/* ------------------------------------------------------------------------
 * 4. The proxy's own cap on containers (every tenant together)
 * ------------------------------------------------------------------------ */

/* A proxy of its own with SANDGATE_MAX_CONTAINERS=4 (and `more` settings,
 * NULL-terminated, may be NULL) and a gateway on it. */
static void small_stack_start(const char *pool_size, const char *const *more)
{
    char pool[64];
    const char *env[8] = {"SANDGATE_MAX_CONTAINERS=4", pool};
    pathf(pool, sizeof(pool), "SANDGATE_POOL_SIZE=%s", pool_size);
    for (size_t i = 0; more != NULL && more[i] != NULL; i++) {
        SG_CHECK(i + 3 < sizeof(env) / sizeof(env[0]), NULL, "too many settings");
        env[i + 2] = more[i];
    }
    small_id = sgtest_new_proxy_id();
    SG_CHECK(small_id != NULL, NULL, "no proxy id");
    small_proxy = sgtest_proxy_start(small_id, env);
    SG_CHECK(small_proxy != NULL, NULL, "cannot start a proxy with SANDGATE_MAX_CONTAINERS=4");
    sggw_opts_t o = {.proxy_url = sgtest_proxy_url(small_proxy)};
    small_gw = sggw_gateway_start(&o);
    SG_CHECK(small_gw != NULL, NULL, "cannot start a gateway on it");
}

/* GET /health of the small proxy: its "containers" count. */
static int64_t small_containers(void)
{
    sgtest_reply_t r;
    sgtest_call(small_proxy, "GET", "/health", NULL, &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    SG_CHECK(SG_INT(o, "max_containers") == 4, o, "the proxy must report its cap");
    int64_t n = SG_INT(o, "containers");
    json_object_put(o);
    sgtest_reply_free(&r);
    return n;
}

static void wait_containers(int64_t want, double timeout_s)
{
    double deadline = sgtest_now() + timeout_s;
    int64_t n;
    while ((n = small_containers()) != want) {
        SG_CHECK(sgtest_now() < deadline, NULL, "the proxy counts %lld containers, %lld expected within %.0f s",
                 (long long)n, (long long)want, timeout_s);
        usleep(100000);
    }
}

SGGW_TEST(test_proxy_container_cap)
{
    small_stack_start("0", NULL);
    const char *dir = sggw_gateway_data_dir(small_gw);
    /* the tenant's own cap is not what stops this flood */
    const char *q[] = {"max_concurrent_execs=50", NULL};
    char *tok = sggw_new_tenant(dir, "wide", q);
    enum { N = 10 };
    sggw_par_req_t reqs[N];
    char url[256];
    sampler_t smp;

    fill_posts(reqs, N, url, small_gw, "/execute", tok, sleep_body);
    sampler_start(&smp, small_id, NULL);
    SG_CHECK(sggw_parallel(reqs, N) == 0, NULL, "cannot start threads");
    /* the last containers go right after the replies: keep sampling until
     * the proxy has let go of every one */
    wait_containers(0, 30);
    sampler_stop(&smp);

    int ok = count_ok(reqs, N, expect_no_capacity), full = N - ok;
    fprintf(stderr, "    %d x 200, %d x 503; at most %d containers seen in %d samples\n", ok, full, smp.max_seen,
            smp.samples);
    SG_CHECK(smp.max_seen <= 4, NULL, "Docker held %d containers of a proxy whose cap is 4", smp.max_seen);
    SG_CHECK(ok == 4 && full == N - 4, NULL,
             "SANDGATE_MAX_CONTAINERS 4, 10 parallel one-shots: expected 4 x 200 and 6 x 503, got %d and %d", ok, full);
    SG_CHECK(sgtest_docker_count(small_id) == 0, NULL, "no container may remain after the one-shots");

    /* afterwards everything works: as many at once as the cap, and a session */
    one_shots_succeed(small_gw, tok, 4);
    /* at once again: the containers of the last ones are still being
     * removed, and their slots go to these (never a fifth container) */
    sampler_start(&smp, small_id, NULL);
    one_shots_succeed(small_gw, tok, 4);
    fresh_session_works(small_gw, tok);
    sampler_stop(&smp);
    SG_CHECK(smp.max_seen <= 4, NULL, "Docker held %d containers of a proxy whose cap is 4", smp.max_seen);
    wait_containers(0, 30);
    free(tok);
}

/* The warm pool counts against the cap but never starves a request: it
 * fills only while a quarter of the cap stays free, and a request that
 * finds the cap reached takes the place of a ready pooled container. */
SGGW_TEST(test_pool_yields_to_requests)
{
    small_stack_start("2", NULL);
    /* python 2, then javascript 1: the fourth slot stays free */
    wait_containers(3, 120);
    char l0[192];
    pathf(l0, sizeof(l0), "sandgate.proxy=%s", small_id);
    const char *pool_labels[] = {l0, "sandgate.kind=pool", NULL};
    SG_CHECK(sgtest_docker_wait_count(pool_labels, 3, 30) == 3, NULL, "Docker must hold the 3 pooled containers");

    const char *dir = sggw_gateway_data_dir(small_gw);
    char *tok = sggw_new_tenant(dir, "pool-yield", NULL);
    sampler_t smp;
    sampler_start(&smp, small_id, NULL);
    /* sessions the pool cannot serve (other memory): the first takes the
     * free slot, each of the next three the place of a pooled container */
    char *sid[4];
    for (int i = 0; i < 4; i++)
        sid[i] = sggw_create_session(small_gw, tok, "{\"lang\":\"python\",\"memory_mb\":256}", NULL);
    sgtest_reply_t r;
    sggw_call(small_gw, tok, "POST", "/sessions", "{\"lang\":\"python\",\"memory_mb\":256}", &r);
    expect_no_capacity(&r);
    sgtest_reply_free(&r);
    sampler_stop(&smp);
    SG_CHECK(smp.max_seen <= 4, NULL, "Docker held %d containers of a proxy whose cap is 4", smp.max_seen);
    SG_CHECK(sgtest_docker_wait_count(pool_labels, 0, 30) == 0, NULL, "the pool must have given up its containers");
    for (int i = 0; i < 4; i++) {
        json_object *o = sggw_execute(small_gw, tok, sid[i], "print('mine')", 0);
        SG_CHECK(strcmp(SG_STR(o, "stdout"), "mine\n") == 0, o, "each session must run");
        json_object_put(o);
    }
    for (int i = 0; i < 4; i++) {
        sggw_delete_session(small_gw, tok, sid[i]);
        free(sid[i]);
    }
    /* the pool fills again, to its share, and a fresh session works */
    wait_containers(3, 120);
    fresh_session_works(small_gw, tok);
    free(tok);
}

/* Installer containers count too: with every slot taken by sessions, a
 * library that must be fetched is refused (503 no_capacity, nothing
 * started); with a slot free, the installer runs (and, its index being
 * unreachable here, reports that) and is gone afterwards. */
SGGW_TEST(test_installers_count)
{
    char store[200], store_kv[240];
    pathf(store, sizeof(store), "sgtest-caps-store-%d", (int)getpid());
    pathf(store_kv, sizeof(store_kv), "SANDGATE_STORE_VOLUME=%s", store);
    /* nothing listens on port 9: a fetch fails at once */
    const char *more[] = {store_kv, "SANDGATE_INSTALL_NETWORK=host", "SANDGATE_PIP_INDEX_URL=http://127.0.0.1:9/simple",
                          NULL};
    small_stack_start("0", more);
    char *tok = sggw_new_tenant(sggw_gateway_data_dir(small_gw), "installs", NULL);
    char *sid[4];
    for (int i = 0; i < 4; i++)
        sid[i] = sggw_create_session(small_gw, tok, NULL, NULL);
    wait_containers(4, 10);

    sampler_t smp;
    sampler_start(&smp, small_id, NULL);
    sgtest_reply_t r;
    char path[128];
    pathf(path, sizeof(path), "/sessions/%s/libraries", sid[0]);
    sggw_call(small_gw, tok, "POST", path, "{\"package\":\"tabulate\"}", &r);
    expect_no_capacity(&r);
    sgtest_reply_free(&r);
    /* an execute naming the library fails the same way, and runs nothing */
    pathf(path, sizeof(path), "/sessions/%s/execute", sid[1]);
    sggw_call(small_gw, tok, "POST", path, "{\"code\":\"print(1)\",\"libraries\":[\"tabulate\"]}", &r);
    expect_no_capacity(&r);
    sgtest_reply_free(&r);

    /* a slot free: the installer starts, fails to reach the index, goes */
    sggw_delete_session(small_gw, tok, sid[3]);
    free(sid[3]);
    wait_containers(3, 30);
    pathf(path, sizeof(path), "/sessions/%s/libraries", sid[0]);
    sggw_call(small_gw, tok, "POST", path, "{\"package\":\"tabulate\"}", &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    SG_CHECK(!SG_BOOL(o, "success") && strstr(SG_STR(o, "message"), "package index") != NULL, o,
             "with a slot free the installer must run (and fail on the unreachable index)");
    json_object_put(o);
    sgtest_reply_free(&r);
    wait_containers(3, 30);
    sampler_stop(&smp);
    SG_CHECK(smp.max_seen <= 4, NULL, "Docker held %d containers of a proxy whose cap is 4", smp.max_seen);

    for (int i = 0; i < 3; i++) {
        sggw_delete_session(small_gw, tok, sid[i]);
        free(sid[i]);
    }
    fresh_session_works(small_gw, tok);
    free(tok);
    SG_CHECK(small_stack_stop() == 0, NULL, "the small stack did not stop cleanly");
    pathf(path, sizeof(path), "/volumes/%s?force=1", store);
    sgtest_docker_call("DELETE", path, NULL, &r);
    SG_CHECK(r.status == 204 || r.status == 404, NULL, "DELETE /volumes/%s: HTTP %ld", store, r.status);
    sgtest_reply_free(&r);
}

int main(void)
{
    return SG_RUN_TESTS("sec_concurrency", group_setup, group_teardown, NULL, after_test, test_oneshot_flood_redis,
                        test_oneshot_flood_memory, test_mixed_flood_redis, test_mixed_flood_memory,
                        test_cap_holds_while_redis_down, test_slots_come_back, test_zero_cap_runs_nothing,
                        test_proxy_container_cap, test_pool_yields_to_requests, test_installers_count);
}
