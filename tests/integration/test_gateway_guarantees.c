/*
 * test_gateway_guarantees.c — what the gateway's fast path (issue 15: tokens
 * and sessions cached, rate + slot + quota in one Redis script, usage rows
 * group-committed) must not give up, against real gateway processes sharing
 * one redis-server and one SQLite file, a real sandgate-proxy and the real
 * Docker engine:
 *   - a token revoked, a tenant disabled through one gateway is refused by
 *     another within 1 s (polled, the bound asserted), for a token and a
 *     session both gateways had just used (so cached);
 *   - a client that has its result finds the execution in the ledger at
 *     once, with many clients at the same time;
 *   - the rate limit, the session slots and the concurrent-execution cap
 *     are exact under parallel load through two gateways (successes ==
 *     limit);
 *   - a gateway killed (SIGKILL) during a load of executes has every
 *     execute it answered 200 in the ledger;
 *   - while another writer holds the SQLite file's write lock, executes
 *     run but none is answered; once it is given up, all are, and the
 *     ledger has exactly their rows (GET /admin/usage agreeing);
 *   - the WAL stays bounded under a steady load of executes (the loop's
 *     commits never checkpoint; a DB thread restarts the WAL), and every
 *     execute answered 200 is in the ledger.
 */
#include "sggw.h"
#include "sgrun.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define BOUND_S 1.0 /* the bound for a revocation to apply everywhere */

static sggw_stack_t stack;

static const char *data_dir(void)
{
    return sggw_gateway_data_dir(stack.gw);
}

static int group_setup(void **state)
{
    const char *penv[] = {"SANDGATE_POOL_SIZE=2", NULL};
    sggw_stack_opts_t o = {.redis = true, .proxy_env = penv};
    *state = &stack;
    return sggw_stack_start(&stack, &o);
}

/* A second gateway on the suite's SQLite file and Redis. */
/* A second gateway on the stack's proxy and data, with the Redis at
 * redis_url (stack.extra_gw). */
static sggw_gateway_t *second_gateway_on(const char *redis_url)
{
    sggw_opts_t opts = {.proxy_url = stack.proxy_url,
                        .redis_url = redis_url,
                        .data_dir = data_dir(),
                        .admin_token = sggw_gateway_admin_token(stack.gw)};
    sggw_gateway_t *g = stack.extra_gw = sggw_gateway_start(&opts);
    SG_CHECK(g != NULL, NULL, "cannot start a second gateway (Redis %s)", redis_url);
    return g;
}

/* ... on the stack's Redis too. */
static sggw_gateway_t *second_gateway(void)
{
    return second_gateway_on(sggw_redis_url(stack.redis));
}

static long status_of(const sggw_gateway_t *g, const char *token, const char *method, const char *path,
                      const char *body)
{
    sgtest_reply_t r;
    sggw_call(g, token, method, path, body, &r);
    long st = r.status;
    sgtest_reply_free(&r);
    return st;
}

/* Polls (method path on g) until it is answered 401; asserts that it was
 * within BOUND_S of since, and that nothing but 200 came before. */
static void expect_refused_within(const sggw_gateway_t *g, const char *token, const char *method, const char *path,
                                  const char *body, double since, const char *what)
{
    for (;;) {
        long st = status_of(g, token, method, path, body);
        double t = sgtest_now() - since;
        if (st == 401) {
            fprintf(stderr, "%s: refused by the other gateway after %.3f s\n", what, t);
            return;
        }
        SG_CHECK(st == 200, NULL, "%s: %s %s answered %ld meanwhile", what, method, path, st);
        SG_CHECK(t <= BOUND_S, NULL, "%s: still accepted by the other gateway %.3f s later", what, t);
        usleep(5000);
    }
}

SGGW_TEST(test_revocation_reaches_every_gateway)
{
    sggw_gateway_t *g2 = second_gateway();
    char path[160], exec_path[160];
    sgtest_reply_t r;

    /* a token: both gateways have it cached (several uses each) */
    char *tok = sggw_new_tenant(data_dir(), "guar-revoke", NULL);
    char *sid = sggw_create_session(g2, tok, NULL, NULL);
    snprintf(exec_path, sizeof(exec_path), "/sessions/%s/execute", sid);
    for (int i = 0; i < 3; i++) {
        json_object_put(sggw_execute(stack.gw, tok, sid, "print(1)", 0));
        json_object_put(sggw_execute(g2, tok, sid, "print(1)", 0));
    }
    char pub[9];
    snprintf(pub, sizeof(pub), "%.8s", tok + 4);
    snprintf(path, sizeof(path), "/admin/tokens/%s", pub);
    double t0 = sgtest_now();
    sggw_admin_call(stack.gw, "DELETE", path, NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    expect_refused_within(g2, tok, "POST", exec_path, "{\"code\":\"print(1)\"}", t0, "token revoked");
    SG_CHECK(status_of(stack.gw, tok, "GET", "/sessions", NULL) == 401, NULL, "the revoking gateway still takes it");

    /* a tenant disabled: every token of it, also on the other gateway */
    char *tok2 = sggw_new_token(data_dir(), "guar-revoke");
    for (int i = 0; i < 3; i++) {
        SG_CHECK(status_of(g2, tok2, "POST", exec_path, "{\"code\":\"print(2)\"}") == 200, NULL, "execute");
        SG_CHECK(status_of(stack.gw, tok2, "GET", "/sessions", NULL) == 200, NULL, "list");
    }
    t0 = sgtest_now();
    sggw_admin_call(stack.gw, "PATCH", "/admin/tenants/guar-revoke", "{\"disabled\":true}", &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    expect_refused_within(g2, tok2, "POST", exec_path, "{\"code\":\"print(3)\"}", t0, "tenant disabled");
    expect_refused_within(g2, tok2, "GET", "/sessions", NULL, t0, "tenant disabled (list)");
    /* and back */
    sggw_admin_call(stack.gw, "PATCH", "/admin/tenants/guar-revoke", "{\"disabled\":false}", &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    SG_CHECK(status_of(g2, tok2, "GET", "/sessions", NULL) == 200, NULL, "enabled again: refused");
    sggw_delete_session(g2, tok2, sid);
    /* a session closed through one gateway is gone on the other at once */
    free(sid);
    sid = sggw_create_session(stack.gw, tok2, NULL, NULL);
    json_object_put(sggw_execute(g2, tok2, sid, "print(1)", 0));
    sggw_delete_session(stack.gw, tok2, sid);
    snprintf(exec_path, sizeof(exec_path), "/sessions/%s/execute", sid);
    sggw_call(g2, tok2, "POST", exec_path, "{\"code\":\"print(1)\"}", &r);
    SG_TAKE_ERROR(&r, 404, "no_such_session");
    sggw_stack_stop_extra(&stack, "the second gateway");
    free(sid);
    free(tok);
    free(tok2);
}

static int64_t ledger_rows(const char *tenant)
{
    char err[256];
    const char *p[] = {tenant, NULL};
    char *v = sggw_ledger_row(data_dir(),
                              "SELECT COUNT(*) FROM usage u JOIN tenants t ON t.id = u.tenant_id"
                              " WHERE t.name = ?1",
                              p, err);
    SG_CHECK(v != NULL, NULL, "usage count: %s", err);
    int64_t n = atoll(v);
    free(v);
    return n;
}

static int64_t session_rows(const char *sid)
{
    char err[256];
    const char *p[] = {sid, NULL};
    char *v = sggw_ledger_row(data_dir(), "SELECT COUNT(*) FROM usage WHERE session_id = ?1", p, err);
    SG_CHECK(v != NULL, NULL, "usage count: %s", err);
    int64_t n = atoll(v);
    free(v);
    return n;
}

#define CLIENTS 24

SGGW_TEST(test_answered_is_in_ledger)
{
    const char *q[] = {"max_concurrent_execs=64", "rate_per_min=100000", "burst=100000", NULL};
    char *tok = sggw_new_tenant(data_dir(), "guar-ledger", q);
    char *sid[3], url[3][256];
    sggw_par_req_t reqs[CLIENTS];

    for (int s = 0; s < 3; s++) {
        sid[s] = sggw_create_session(stack.gw, tok, NULL, NULL);
        snprintf(url[s], sizeof(url[s]), "%s/sessions/%s/execute", sggw_gateway_url(stack.gw), sid[s]);
    }
    for (int round = 0; round < 3; round++) {
        int64_t before = ledger_rows("guar-ledger");
        for (int i = 0; i < CLIENTS; i++)
            reqs[i] = sggw_par_post(url[i % 3], tok, "{\"code\":\"print('x' * 1000)\"}", 60);
        SG_CHECK(sggw_parallel(reqs, CLIENTS) == 0, NULL, "batch");
        /* every reply is in: the rows of all of them are, at once (no wait) */
        int64_t rows = ledger_rows("guar-ledger");
        int ok = 0;
        for (int i = 0; i < CLIENTS; i++) {
            ok += reqs[i].reply.status == 200;
            if (reqs[i].reply.status != 200)
                fprintf(stderr, "execute %d: %ld %.200s\n", i, reqs[i].reply.status, reqs[i].reply.body);
            sgtest_reply_free(&reqs[i].reply);
        }
        SG_CHECK(ok == CLIENTS, NULL, "round %d: %d of %d executes answered 200", round, ok, CLIENTS);
        SG_CHECK(rows - before == ok, NULL, "round %d: %d answered, %lld in the ledger", round, ok,
                 (long long)(rows - before));
    }
    for (int s = 0; s < 3; s++)
        sggw_delete_session(stack.gw, tok, sid[s]);
    for (int s = 0; s < 3; s++)
        free(sid[s]);
    free(tok);
}

/* n requests at once; returns how many got 200, and checks that every other
 * one was refused 429 with code. */
static int count_ok(sggw_par_req_t *reqs, size_t n, const char *code)
{
    int ok = 0;
    SG_CHECK(sggw_parallel(reqs, n) == 0, NULL, "batch");
    for (size_t i = 0; i < n; i++) {
        if (reqs[i].reply.status == 200) {
            ok++;
        } else {
            SG_CHECK(reqs[i].reply.status == 429 && strstr(reqs[i].reply.body, code) != NULL, NULL,
                     "request %zu: %ld %s (expected 200 or 429 %s)", i, reqs[i].reply.status, reqs[i].reply.body, code);
        }
        sgtest_reply_free(&reqs[i].reply);
    }
    return ok;
}

/* "<gateway i % n>" + path: the batches below go to every gateway at once. */
static void gw_url(char *out, size_t len, sggw_gateway_t *const *gws, int n, int i, const char *path)
{
    snprintf(out, len, "%s%s", sggw_gateway_url(gws[i % n]), path);
}

/* The rate (of executes, and of GET /sessions alone), the concurrency cap
 * and the session slots, each of a fresh tenant (names from prefix), asked
 * many at once through the n gateways: exactly the limit passes. */
static void rate_and_cap_exact(sggw_gateway_t *const *gws, int n, const char *prefix)
{
    sggw_par_req_t reqs[16];
    char url[16][256], path[128], name[64];

    /* the rate: burst 6, then one a minute — of 16 executes at once,
     * exactly 5 run (the create took one; the rate is counted in the one
     * admission script) */
    const char *rq[] = {"rate_per_min=1", "burst=6", NULL};
    snprintf(name, sizeof(name), "%s-rate", prefix);
    char *tok = sggw_new_tenant(data_dir(), name, rq);
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    snprintf(path, sizeof(path), "/sessions/%s/execute", sid);
    for (int i = 0; i < 16; i++) {
        gw_url(url[i], sizeof(url[i]), gws, n, i, path);
        reqs[i] = sggw_par_post(url[i], tok, "{\"code\":\"print(1)\"}", 60);
    }
    int ok = count_ok(reqs, 16, "rate limit");
    SG_CHECK(ok == 5, NULL, "burst 6 (one used by the create): %d of 16 executes ran", ok);
    /* and GET /sessions (the rate alone) of a fresh tenant */
    const char *rq2[] = {"rate_per_min=1", "burst=7", NULL};
    snprintf(name, sizeof(name), "%s-rate2", prefix);
    char *tok2 = sggw_new_tenant(data_dir(), name, rq2);
    for (int i = 0; i < 16; i++) {
        gw_url(url[i], sizeof(url[i]), gws, n, i, "/sessions");
        reqs[i] = (sggw_par_req_t){.method = "GET", .url = url[i], .token = tok2, .timeout_s = 30};
    }
    ok = count_ok(reqs, 16, "rate limit");
    SG_CHECK(ok == 7, NULL, "burst 7: %d of 16 lists answered", ok);
    free(tok2);
    /* the rate back (its stored arrival time is minutes ahead) for the delete */
    const char *open_rate[] = {"rate_per_min=1000000", "burst=1000000", NULL};
    snprintf(name, sizeof(name), "%s-rate", prefix);
    sggw_tenant_set(data_dir(), name, open_rate);
    sggw_delete_session(stack.gw, tok, sid);
    free(sid);
    free(tok);

    /* executions in flight: cap 3, 12 at once that each take a while,
     * spread over three sessions and the gateways; one more once they end */
    const char *cq[] = {"max_concurrent_execs=3", NULL};
    snprintf(name, sizeof(name), "%s-conc", prefix);
    char *tok3 = sggw_new_tenant(data_dir(), name, cq);
    char *sids[3];
    for (int s = 0; s < 3; s++)
        sids[s] = sggw_create_session(stack.gw, tok3, NULL, NULL);
    for (int i = 0; i < 12; i++) {
        snprintf(path, sizeof(path), "/sessions/%s/execute", sids[i % 3]);
        gw_url(url[i], sizeof(url[i]), gws, n, i / 3, path);
        reqs[i] = sggw_par_post(url[i], tok3, "{\"code\":\"import time; time.sleep(2)\"}", 60);
    }
    ok = count_ok(reqs, 12, "concurrency_limit");
    SG_CHECK(ok == 3, NULL, "cap 3: %d of 12 executes ran", ok);
    sgtest_reply_t r;
    snprintf(path, sizeof(path), "/sessions/%s/execute", sids[0]);
    sggw_call(gws[n - 1], tok3, "POST", path, "{\"code\":\"print(2)\"}", &r);
    SG_CHECK(r.status == 200, NULL, "an execute after the cap's three: %ld %s", r.status, r.body);
    sgtest_reply_free(&r);
    for (int s = 0; s < 3; s++) {
        sggw_delete_session(stack.gw, tok3, sids[s]);
        free(sids[s]);
    }
    free(tok3);
    /* session slots: 2, of 8 creates at once through the gateways */
    const char *sq[] = {"max_sessions=2", NULL};
    snprintf(name, sizeof(name), "%s-slots", prefix);
    char *tok4 = sggw_new_tenant(data_dir(), name, sq);
    for (int i = 0; i < 8; i++) {
        gw_url(url[i], sizeof(url[i]), gws, n, i, "/sessions");
        reqs[i] = sggw_par_post(url[i], tok4, "{\"lang\":\"python\"}", 120);
    }
    SG_CHECK(sggw_parallel(reqs, 8) == 0, NULL, "batch");
    ok = 0;
    for (int i = 0; i < 8; i++) {
        if (reqs[i].reply.status == 200) {
            json_object *o = json_tokener_parse(reqs[i].reply.body);
            json_object *v;
            SG_CHECK(o != NULL && json_object_object_get_ex(o, "session_id", &v), o, "create reply");
            sggw_delete_session(stack.gw, tok4, json_object_get_string(v));
            json_object_put(o);
            ok++;
        } else {
            SG_CHECK(reqs[i].reply.status == 429, NULL, "create %d: %ld %s", i, reqs[i].reply.status,
                     reqs[i].reply.body);
        }
        sgtest_reply_free(&reqs[i].reply);
    }
    SG_CHECK(ok == 2, NULL, "max_sessions 2: %d of 8 creates succeeded", ok);
    free(tok4);
}

SGGW_TEST(test_limits_exact_under_load)
{
    sggw_gateway_t *gws[2] = {stack.gw, second_gateway()};

    rate_and_cap_exact(gws, 2, "guar");
    sggw_stack_stop_extra(&stack, "the second gateway");
}

/* ---- one gateway alone: admissions from its own copy (state/redis.c, "solo") ------------ */

/* A counter or gauge of g's /metrics with no labels (-1 when GET /metrics
 * fails or it is not there). */
static double metric(const sggw_gateway_t *g, const char *name)
{
    sgtest_reply_t r;
    double v = -1;
    size_t n = strlen(name);
    sggw_call(g, NULL, "GET", "/metrics", NULL, &r);
    for (const char *line = r.status == 200 ? r.body : NULL; line != NULL && *line != '\0';) {
        if (strncmp(line, name, n) == 0 && line[n] == ' ')
            v = strtod(line + n + 1, NULL);
        const char *end = strchr(line, '\n');
        line = end != NULL ? end + 1 : NULL;
    }
    sgtest_reply_free(&r);
    return v;
}

static void wait_solo(const sggw_gateway_t *g, double want)
{
    double deadline = sgtest_now() + 3.0;
    while (metric(g, "sandgate_state_solo") != want && sgtest_now() < deadline)
        usleep(20000);
    SG_CHECK(metric(g, "sandgate_state_solo") == want, NULL, "sandgate_state_solo is not %g after 3 s", want);
}

/* Alone on its Redis, the gateway admits from its copy, and refuses from
 * it what is past the rate: the rate (of executes and of GET /sessions)
 * and the concurrency cap stay exact under parallel load, and Redis,
 * checking each admission after, answers none otherwise. A second gateway on the same Redis ends it: the first stops
 * within a beat, the second's first execute is answered at once. */
SGGW_TEST(test_solo_limits_exact)
{
    sggw_gateway_t *gws[1] = {stack.gw};
    sgtest_reply_t r;
    char path[128];

    wait_solo(stack.gw, 1);
    double admitted0 = metric(stack.gw, "sandgate_state_solo_admissions_total");
    double mismatches0 = metric(stack.gw, "sandgate_state_solo_mismatches_total");
    double refused0 = metric(stack.gw, "sandgate_state_solo_refusals_total");
    rate_and_cap_exact(gws, 1, "solo");
    double admitted = metric(stack.gw, "sandgate_state_solo_admissions_total") - admitted0;
    double refused = metric(stack.gw, "sandgate_state_solo_refusals_total") - refused0;
    fprintf(stderr, "solo: %.0f admissions from the copy, %.0f refusals from it (rate, cap)\n", admitted, refused);
    SG_CHECK(admitted >= 3, NULL, "only %.0f admissions from the copy", admitted);
    /* of the 11 executes and 9 lists past their tenants' rates, those that
     * came after the copy was read were refused from it, nothing sent */
    SG_CHECK(refused >= 1, NULL, "no refusal by the rate from the copy");
    SG_CHECK(metric(stack.gw, "sandgate_state_solo_mismatches_total") == mismatches0, NULL,
             "Redis answered an admission from the copy otherwise");

    /* a second gateway: the first lets go, the second is answered at once */
    char *tok = sggw_new_tenant(data_dir(), "solo-second", NULL);
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    /* the session's first execute starts its interpreter (up to seconds on
     * a loaded machine); run it here so that what is timed below is the
     * second gateway's wait for the lease, not the interpreter's start */
    snprintf(path, sizeof(path), "/sessions/%s/execute", sid);
    sggw_call(stack.gw, tok, "POST", path, "{\"code\":\"print(2)\"}", &r);
    SG_CHECK(r.status == 200, NULL, "the warm-up execute: %ld %s", r.status, r.body);
    sgtest_reply_free(&r);
    sggw_gateway_t *g2 = second_gateway();
    double t0 = sgtest_now();
    sggw_call(g2, tok, "POST", path, "{\"code\":\"print(3)\"}", &r);
    double took = sgtest_now() - t0;
    fprintf(stderr, "solo: the second gateway's first execute: %ld in %.3f s\n", r.status, took);
    SG_CHECK(r.status == 200, NULL, "through the second gateway: %ld %s", r.status, r.body);
    sgtest_reply_free(&r);
    SG_CHECK(took < 1.5, NULL, "the second gateway's first execute took %.3f s", took);
    wait_solo(stack.gw, 0);
    SG_CHECK(metric(g2, "sandgate_state_solo") == 0, NULL, "the second gateway holds the lease beside the first");
    sggw_stack_stop_extra(&stack, "the second gateway");
    wait_solo(stack.gw, 1); /* alone again */
    sggw_delete_session(stack.gw, tok, sid);
    free(sid);
    free(tok);
}

/* Alone on its Redis, the gateway refuses from its copy a tenant past its
 * day's executions and a tenant at its cap of sessions, many at once: each
 * refused 429 with its reason, all of them counted as the copy's refusals,
 * none answered otherwise by Redis; nothing more runs or is counted, and
 * no slot or reservation is left behind (the next create after a delete
 * gets the slot). */
SGGW_TEST(test_solo_refuses_quota_and_cap_from_copy)
{
    const char *q[] = {"execs_per_day=3", "max_sessions=1", NULL};
    sggw_par_req_t reqs[8];
    char url[256];

    wait_solo(stack.gw, 1);
    char *tok = sggw_new_tenant(data_dir(), "solo-quota", q);
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    for (int i = 0; i < 3; i++) /* the day's 3 (the first seeds the day's counters and the copy) */
        json_object_put(sggw_execute(stack.gw, tok, sid, "print(1)", 0));
    double refused0 = metric(stack.gw, "sandgate_state_solo_refusals_total");
    double mismatches0 = metric(stack.gw, "sandgate_state_solo_mismatches_total");
    snprintf(url, sizeof(url), "%s/sessions/%s/execute", sggw_gateway_url(stack.gw), sid);
    sggw_par_posts(reqs, 8, url, tok, "{\"code\":\"print(2)\"}", 60);
    int ok = count_ok(reqs, 8, "executions for today");
    SG_CHECK(ok == 0, NULL, "%d executes ran past the day's 3", ok);
    double refused = metric(stack.gw, "sandgate_state_solo_refusals_total") - refused0;
    SG_CHECK(refused == 8, NULL, "%.0f of 8 refusals by the day's quota came from the copy", refused);

    snprintf(url, sizeof(url), "%s/sessions", sggw_gateway_url(stack.gw));
    sggw_par_posts(reqs, 6, url, tok, "{\"lang\":\"python\"}", 60);
    ok = count_ok(reqs, 6, "live sessions, its limit");
    SG_CHECK(ok == 0, NULL, "%d creates past the cap of 1", ok);
    refused = metric(stack.gw, "sandgate_state_solo_refusals_total") - refused0;
    SG_CHECK(refused == 14, NULL, "%.0f of 6 refusals at the session cap came from the copy", refused - 8);
    SG_CHECK(metric(stack.gw, "sandgate_state_solo_mismatches_total") == mismatches0, NULL,
             "Redis answered a refusal from the copy otherwise");
    SG_CHECK(ledger_rows("solo-quota") == 3, NULL, "%lld rows in the ledger, not the day's 3",
             (long long)ledger_rows("solo-quota"));
    /* the slot is free: after the delete, one create succeeds */
    sggw_delete_session(stack.gw, tok, sid);
    free(sid);
    sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    sggw_delete_session(stack.gw, tok, sid);
    free(sid);
    free(tok);
}

/* A session's create is answered once the session is in the ledger,
 * without waiting for Redis to take its live record: alone on its Redis
 * the gateway admits the create from its copy, and with Redis holding
 * every write back for PAUSE_MS (CLIENT PAUSE WRITE) the answer comes
 * while the pause lasts, the record not yet in Redis; once the pause ends
 * it is there, naming its proxy and among its tenant's live sessions (the
 * commit was sent before the answer). A delete that reaches Redis before
 * the commit is test_state's test_commit_after_remove. One create at least
 * must have been admitted from the copy and answered within the pause (a
 * lease that lapsed under a loaded machine sends the admission to Redis,
 * which then waits), so up to ATTEMPTS are made. */
#define PAUSE_MS 1500 /* below the gateway's 2 s timeout of a Redis call (redis_conn.c) */
#define ATTEMPTS 5
SGGW_TEST(test_create_answered_before_redis_takes_it)
{
    int ok, shown = 0;
    wait_solo(stack.gw, 1);
    char *tok = sggw_new_tenant(data_dir(), "solo-commit", NULL);
    long long tid = (long long)sggw_tenant_id(data_dir(), "solo-commit");
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL); /* the tenant's copy is read */
    sggw_delete_session(stack.gw, tok, sid);
    free(sid);
    for (int k = 0; k < ATTEMPTS && !shown; k++) {
        wait_solo(stack.gw, 1);
        double admitted0 = metric(stack.gw, "sandgate_state_solo_admissions_total");
        char *v = sggw_redis_cmd(stack.redis, &ok, "CLIENT PAUSE %d WRITE", PAUSE_MS);
        SG_CHECK(ok, NULL, "CLIENT PAUSE: %s", v != NULL ? v : "no answer");
        free(v);
        double t0 = sgtest_now();
        sid = sggw_create_session(stack.gw, tok, NULL, NULL);
        double took = sgtest_now() - t0;
        int from_copy = metric(stack.gw, "sandgate_state_solo_admissions_total") > admitted0;
        char *during = sggw_redis_cmd(stack.redis, NULL, "HGET sg:session:%s proxy", sid); /* reads go on */
        int within = sgtest_now() - t0 < PAUSE_MS / 1000.0 - 0.2;
        fprintf(stderr, "create during a %d ms pause of Redis's writes: answered after %.3f s (admitted %s)%s\n",
                PAUSE_MS, took, from_copy ? "from the copy" : "by Redis", within ? "" : ", after the pause");
        if (from_copy && within) {
            SG_CHECK(during == NULL, NULL, "session %s: its live record was in Redis while Redis took no writes", sid);
            shown = 1;
        }
        free(during);
        /* the commit is taken once the pause ends */
        char *proxy = NULL, *score = NULL;
        double deadline = t0 + PAUSE_MS / 1000.0 + 10;
        while ((proxy = sggw_redis_cmd(stack.redis, NULL, "HGET sg:session:%s proxy", sid)) == NULL &&
               sgtest_now() < deadline)
            usleep(10000);
        score = sggw_redis_cmd(stack.redis, NULL, "ZSCORE sg:tenant:%lld:sessions %s", tid, sid);
        SG_CHECK(proxy != NULL && strcmp(proxy, stack.proxy_url) == 0, NULL,
                 "session %s has no live record naming its proxy (\"%s\") 10 s after the pause", sid,
                 proxy != NULL ? proxy : "(none)");
        SG_CHECK(score != NULL, NULL, "session %s is not among its tenant's live sessions", sid);
        free(proxy);
        free(score);
        sggw_delete_session(stack.gw, tok, sid);
        free(sid);
    }
    SG_CHECK(shown, NULL, "none of %d creates was admitted from the copy and answered within the pause", ATTEMPTS);
    free(tok);
}

/* A gateway stopped (SIGTERM) while Redis holds back the commits of the
 * sessions it has just created exits only once Redis has taken them: alone
 * on a Redis of its own that holds writes back (CLIENT PAUSE WRITE), the
 * gateway admits NCREATES creates from its copy, the proxy makes them and
 * they are answered 200 while the pause lasts; the stop comes then, within
 * the pause. The gateway exits 0, not before the pause ended, and each
 * session's record is in Redis when it has. */
#define NCREATES 2 /* the stack proxy's pool (group_setup) */
SGGW_TEST(test_stop_waits_for_the_commits)
{
    int ok;
    char url[256];
    sggw_par_req_t reqs[NCREATES];
    stack.extra_redis = sggw_redis_start();
    SG_CHECK(stack.extra_redis != NULL, NULL, "cannot start a second redis-server");
    sggw_gateway_t *g = second_gateway_on(sggw_redis_url(stack.extra_redis));
    wait_solo(g, 1);
    char *tok = sggw_new_tenant(data_dir(), "stop-creates", NULL);
    char *sid = sggw_create_session(g, tok, NULL, NULL); /* the tenant's copy is read */
    sggw_delete_session(g, tok, sid);
    free(sid);
    /* the creates take ready containers: made in milliseconds, well within
     * the pause */
    SG_CHECK(sgtest_proxy_pools_full(stack.proxy, 60) == 0, NULL, "the proxy's pool did not fill");
    double admitted0 = metric(g, "sandgate_state_solo_admissions_total");

    char *v = sggw_redis_cmd(stack.extra_redis, &ok, "CLIENT PAUSE %d WRITE", PAUSE_MS);
    SG_CHECK(ok, NULL, "CLIENT PAUSE: %s", v != NULL ? v : "no answer");
    free(v);
    double t0 = sgtest_now();
    snprintf(url, sizeof(url), "%s/sessions", sggw_gateway_url(g));
    for (int i = 0; i < NCREATES; i++)
        reqs[i] = sggw_par_post(url, tok, "{\"lang\":\"python\"}", 30);
    sggw_batch_t *b = sggw_batch_start(reqs, NCREATES);
    SG_CHECK(b != NULL, NULL, "the creates could not start");
    sggw_batch_join(b);
    double answered = sgtest_now() - t0;
    double from_copy = metric(g, "sandgate_state_solo_admissions_total") - admitted0;
    SG_CHECK(answered < PAUSE_MS / 1000.0 - 0.2 && from_copy == NCREATES, NULL,
             "the creates were answered after %.3f s, %.0f of %d admitted from the copy: the stop would not come "
             "within the pause",
             answered, from_copy, NCREATES);
    stack.extra_gw = NULL;
    int stopped = sggw_gateway_stop(g);
    double exited = sgtest_now() - t0;
    fprintf(stderr,
            "%d creates answered %.3f s into a %d ms pause of Redis's writes; the stop after them exited %d at %.3f "
            "s\n",
            NCREATES, answered, PAUSE_MS, stopped, exited);
    SG_CHECK(stopped == 0, NULL, "the gateway did not exit 0 on SIGTERM");
    SG_CHECK(exited >= PAUSE_MS / 1000.0 - 0.05, NULL,
             "the gateway exited %.3f s into the pause: it did not wait for its commits", exited);
    for (int i = 0; i < NCREATES; i++) {
        json_object *o = reqs[i].reply.status == 200 ? json_tokener_parse(reqs[i].reply.body) : NULL, *id;
        SG_CHECK(o != NULL && json_object_object_get_ex(o, "session_id", &id), o,
                 "a create during the pause was answered %ld: %s", reqs[i].reply.status,
                 reqs[i].reply.body != NULL ? reqs[i].reply.body : "");
        v = sggw_redis_cmd(stack.extra_redis, &ok, "HGET sg:session:%s proxy", json_object_get_string(id));
        SG_CHECK(ok && v != NULL, o, "session %s has no live record once its gateway exited",
                 json_object_get_string(id));
        free(v);
        sggw_delete_session(stack.gw, tok, json_object_get_string(id));
        json_object_put(o);
        sgtest_reply_free(&reqs[i].reply);
    }
    free(tok);
}

/* Stopped normally right after its last answer, a gateway alone on its
 * Redis leaves nothing unsent: the ends of its executions (written to Redis
 * a little after their replies) are there before it exits, every slot given
 * back and every execution counted, and the solo lease is given back. */
SGGW_TEST(test_solo_stop_leaves_nothing_unsent)
{
    int ok;
    stack.extra_redis = sggw_redis_start();
    SG_CHECK(stack.extra_redis != NULL, NULL, "cannot start a second redis-server");
    sggw_gateway_t *g = second_gateway_on(sggw_redis_url(stack.extra_redis));
    wait_solo(g, 1);
    char *tok = sggw_new_tenant(data_dir(), "solo-stop", NULL);
    char *sid = sggw_create_session(g, tok, NULL, NULL);
    for (int i = 0; i < 6; i++)
        json_object_put(sggw_execute(g, tok, sid, "print(1)", 0));
    SG_CHECK(metric(g, "sandgate_state_solo_admissions_total") >= 3, NULL,
             "the executions were not admitted from the copy");
    stack.extra_gw = NULL;
    SG_CHECK(sggw_gateway_stop(g) == 0, NULL, "the gateway did not stop cleanly");

    char *v = sggw_redis_cmd(stack.extra_redis, &ok, "EVAL %s 0",
                             "local n = 0 for _, k in ipairs(redis.call('KEYS', 'sg:tenant:*:execs')) do "
                             "n = n + redis.call('ZCARD', k) end return n");
    SG_CHECK(ok && v != NULL && strcmp(v, "0") == 0, NULL, "slots still held in Redis after the stop: %s", v ? v : "?");
    free(v);
    v = sggw_redis_cmd(stack.extra_redis, &ok, "HGET sg:session:%s executions", sid);
    SG_CHECK(ok && v != NULL && strcmp(v, "6") == 0, NULL, "Redis counts %s executions of the session, not 6",
             v ? v : "no");
    free(v);
    v = sggw_redis_cmd(stack.extra_redis, &ok, "EXISTS sg:solo");
    SG_CHECK(ok && v != NULL && strcmp(v, "0") == 0, NULL, "the solo lease is still held after the stop");
    free(v);

    char path[128];
    snprintf(path, sizeof(path), "/sessions/%s", sid);
    json_object_put(SG_CALL_JSON(stack.proxy, "DELETE", path, NULL, 200));
    free(sid);
    free(tok);
}

#define KILL_CLIENTS 16

/* The files of the usage journal in the stack's data directory. */
static int journal_files(void)
{
    char path[700];
    int n = 0;
    snprintf(path, sizeof(path), "%s/usage-journal", data_dir());
    DIR *d = opendir(path);
    SG_CHECK(d != NULL, NULL, "opendir %s", path);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        n += e->d_name[0] != '.' && len > 6 && strcmp(e->d_name + len - 6, ".usage") == 0;
    }
    closedir(d);
    return n;
}

SGGW_TEST(test_kill9_loses_no_answered_row)
{
    const char *q[] = {"max_concurrent_execs=64", "rate_per_min=100000", "burst=100000", NULL};
    char *tok = sggw_new_tenant(data_dir(), "guar-kill", q);
    sggw_gateway_t *g2 = second_gateway();
    char *sid[4], url[4][256];
    sggw_par_req_t reqs[KILL_CLIENTS];

    for (int s = 0; s < 4; s++) {
        sid[s] = sggw_create_session(stack.gw, tok, NULL, NULL);
        snprintf(url[s], sizeof(url[s]), "%s/sessions/%s/execute", sggw_gateway_url(g2), sid[s]);
    }
    int64_t before = ledger_rows("guar-kill");
    int answered[4] = {0}, total = 0;
    /* executes through g2, each 50 ms long, 4 queued per session: the kill
     * lands once the first rows are in, with others in flight */
    for (int i = 0; i < KILL_CLIENTS; i++)
        reqs[i] = sggw_par_post(url[i % 4], tok, "{\"code\":\"import time; time.sleep(0.05); print(1)\"}", 60);
    sggw_batch_t *b = sggw_batch_start(reqs, KILL_CLIENTS);
    SG_CHECK(b != NULL, NULL, "batch");
    double deadline = sgtest_now() + 30;
    while (ledger_rows("guar-kill") - before < 5) {
        SG_CHECK(sgtest_now() < deadline, NULL, "no execution reached the ledger in 30 s");
        usleep(2000);
    }
    sggw_gateway_kill9(g2);
    stack.extra_gw = NULL;
    sggw_batch_join(b);
    for (int i = 0; i < KILL_CLIENTS; i++) {
        answered[i % 4] += reqs[i].reply.status == 200;
        sgtest_reply_free(&reqs[i].reply);
    }
    /* session by session: every execute answered 200 has its row */
    for (int s = 0; s < 4; s++) {
        int64_t rows = session_rows(sid[s]);
        fprintf(stderr, "kill -9: session %d: %d executes answered 200, %lld rows in the ledger\n", s, answered[s],
                (long long)rows);
        SG_CHECK(rows >= answered[s], NULL, "session %d: %d executes answered 200 but only %lld rows in the ledger", s,
                 answered[s], (long long)rows);
        total += answered[s];
    }
    SG_CHECK(total > 0, NULL, "no execute was answered before the kill");
    /* its journal, moved in by those reads, is removed (no writer left);
     * the stack's gateway's own stays */
    SG_CHECK(journal_files() == 1, NULL, "%d files in the usage journal, only the live gateway's expected",
             journal_files());
    for (int s = 0; s < 4; s++) {
        sggw_delete_session(stack.gw, tok, sid[s]);
        free(sid[s]);
    }
    free(tok);
}

/* ---- a busy database: the replies come from the journal ------------------------------- */

static char *db_text(const char *dir, const char *sql, const char *const *params)
{
    char err[256];
    char *v = sggw_ledger_row(dir, sql, params, err);
    SG_CHECK(v != NULL, NULL, "%s: %s", sql, err);
    return v;
}

static int64_t db_int(const char *dir, const char *sql, const char *const *params)
{
    char *v = db_text(dir, sql, params);
    int64_t n = atoll(v);
    free(v);
    return n;
}

/* GET /admin/usage lists at most this many rows (gateway/handler/admin.c). */
#define USAGE_LIST_MAX 1000

/* The ledger of tenant agrees with itself: GET /admin/usage (executions,
 * and a row each, up to USAGE_LIST_MAX), the usage rows, and the sessions'
 * execution counts. Returns the number of rows. */
static int64_t expect_usage_agrees(const sggw_gateway_t *g, const char *tenant)
{
    char path[160];
    sgtest_reply_t r;
    const char *p[] = {tenant, NULL};
    const char *dir = sggw_gateway_data_dir(g);

    snprintf(path, sizeof(path), "/admin/usage?tenant=%s", tenant);
    sggw_admin_call(g, "GET", path, NULL, &r);
    json_object *u = SG_TAKE_JSON(&r, 200);
    int64_t rows = db_int(dir,
                          "SELECT COUNT(*) FROM usage u JOIN tenants t ON t.id = u.tenant_id"
                          " WHERE t.name = ?1",
                          p);
    int64_t counted = db_int(dir,
                             "SELECT coalesce(SUM(s.executions), 0) FROM sessions s JOIN tenants t ON t.id = "
                             "s.tenant_id WHERE t.name = ?1",
                             p);
    SG_CHECK(SG_INT(u, "executions") == rows, u, "%s: GET /admin/usage says %lld executions, the ledger has %lld rows",
             tenant, (long long)SG_INT(u, "executions"), (long long)rows);
    int64_t listed = rows < USAGE_LIST_MAX ? rows : USAGE_LIST_MAX;
    SG_CHECK((int64_t)json_object_array_length(SG_ARR(u, "rows")) == listed, u,
             "%s: GET /admin/usage lists %zu rows, %lld expected", tenant, json_object_array_length(SG_ARR(u, "rows")),
             (long long)listed);
    SG_CHECK(counted == rows, u, "%s: the sessions count %lld executions, the ledger has %lld rows", tenant,
             (long long)counted, (long long)rows);
    json_object_put(u);
    return rows;
}

#define HELD_EXECS 8
/* How long the other writer may hold the lock while the executes run; the
 * gateway's move of the journal into SQLite waits for it up to the
 * store's busy timeout (SG_BUSY_TIMEOUT_MS, 5 s, gateway/store/store_sql.c)
 * at a time, and tries again after. */
#define HOLD_MAX_S 4.0
/* From the lock given up to the rows in SQLite, moved by the gateway. */
#define MOVED_WITHIN_S 10.0

/* 8 executes in 2 sessions (4 queued in each), then in 4 (2 in each). */
static const struct {
    const char *tenant;
    int sessions;
} held_cases[] = {{"guar-held2", 2}, {"guar-held4", 4}};

/* The tenant's rows in the SQLite file as it is: nothing moved first. */
static int64_t ledger_rows_as_is(const char *tenant)
{
    char err[256];
    const char *p[] = {tenant, NULL};
    char *v = sggw_db_row(
        data_dir(), "SELECT COUNT(*) FROM usage u JOIN tenants t ON t.id = u.tenant_id WHERE t.name = ?1", p, err);
    int64_t n = v != NULL ? atoll(v) : -1;
    if (v == NULL)
        fprintf(stderr, "usage count: %s\n", err);
    free(v);
    return n;
}

/* Another writer holds the SQLite file's write lock (BEGIN IMMEDIATE, on a
 * connection of the test's own) while executes run: their rows go to the
 * gateway's usage journal, so every execute is answered, 200 with its own
 * stdout, while the lock is held, and none of their rows is in SQLite yet
 * (the gateway's move waits for the lock). Once it is given up, the
 * gateway itself moves them in (the file read as it is, with no catch-up
 * of the test's), and the ledger has exactly their rows. */
SGGW_TEST(test_busy_ledger_answers_from_the_journal)
{
    const char *q[] = {"max_concurrent_execs=64", "rate_per_min=100000", "burst=100000", NULL};
    char dbpath[700];
    snprintf(dbpath, sizeof(dbpath), "%s/sandgate.db", data_dir());

    for (size_t c = 0; c < sizeof(held_cases) / sizeof(held_cases[0]); c++) {
        const char *tenant = held_cases[c].tenant;
        int ns = held_cases[c].sessions;
        char *tok = sggw_new_tenant(data_dir(), tenant, q);
        char *sid[4], url[4][256], body[HELD_EXECS][64], want[HELD_EXECS][32];
        sggw_par_req_t reqs[HELD_EXECS];

        /* the sessions made and used once: token and sessions are cached */
        for (int s = 0; s < ns; s++) {
            sid[s] = sggw_create_session(stack.gw, tok, NULL, NULL);
            snprintf(url[s], sizeof(url[s]), "%s/sessions/%s/execute", sggw_gateway_url(stack.gw), sid[s]);
            json_object_put(sggw_execute(stack.gw, tok, sid[s], "print(0)", 0));
        }
        int64_t before = ledger_rows(tenant);
        for (int i = 0; i < HELD_EXECS; i++) {
            snprintf(body[i], sizeof(body[i]), "{\"code\":\"print('held-%d')\"}", i);
            snprintf(want[i], sizeof(want[i]), "held-%d\n", i);
            reqs[i] = sggw_par_post(url[i % ns], tok, body[i], 60);
        }

        sqlite3 *w = NULL;
        SG_CHECK(sqlite3_open_v2(dbpath, &w, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK, NULL, "open %s", dbpath);
        sqlite3_busy_timeout(w, 5000);
        SG_CHECK(sqlite3_exec(w, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK, NULL, "BEGIN IMMEDIATE: %s",
                 sqlite3_errmsg(w));
        double t_lock = sgtest_now();
        sggw_batch_t *b = sggw_batch_start(reqs, HELD_EXECS);
        /* no SG_CHECK while the lock is held (a failure would leave it held
         * for the rest of the suite): what went wrong is noted, the lock
         * given up, then asserted */
        const char *broke = NULL;
        size_t answered = 0;
        while (b != NULL && (answered = sgtest_batch_finished(b)) < HELD_EXECS) {
            if (sgtest_now() - t_lock >= HOLD_MAX_S) {
                broke = "the executes were not all answered while another writer held the lock";
                break;
            }
            usleep(10000);
        }
        double t_answered = sgtest_now() - t_lock;
        int64_t rows_held = ledger_rows_as_is(tenant);
        double t_release = sgtest_now();
        int rolled_back = sqlite3_exec(w, "ROLLBACK", NULL, NULL, NULL) == SQLITE_OK;
        sqlite3_close(w);
        if (b != NULL)
            sggw_batch_join(b);
        SG_CHECK(rolled_back, NULL, "ROLLBACK failed");
        SG_CHECK(b != NULL, NULL, "batch");
        SG_CHECK(broke == NULL, NULL, "%s (%s: %zu of %d answered in %.3f s)", broke, tenant, answered, HELD_EXECS,
                 t_answered);
        SG_CHECK(rows_held == before, NULL, "%s: %lld rows in SQLite while the lock was held, %lld before", tenant,
                 (long long)rows_held, (long long)before);

        /* every reply before the release, 200 with its own stdout */
        int64_t out_bytes = 0;
        for (int i = 0; i < HELD_EXECS; i++) {
            SG_CHECK(reqs[i].finished <= t_release, NULL, "%s: execute %d answered after the lock was given up", tenant,
                     i);
            json_object *o = SG_EXPECT_JSON(&reqs[i].reply, 200);
            sggw_check_result(o);
            out_bytes += (int64_t)strlen(SG_STR(o, "stdout")) + (int64_t)strlen(SG_STR(o, "stderr"));
            sgtest_expect_ok(o, want[i]);
            sgtest_reply_free(&reqs[i].reply);
        }
        /* the gateway moves them in once the lock is free */
        int64_t moved;
        while ((moved = ledger_rows_as_is(tenant)) != before + HELD_EXECS) {
            SG_CHECK(moved >= before && moved < before + HELD_EXECS, NULL, "%s: %lld rows in SQLite, %lld before",
                     tenant, (long long)moved, (long long)before);
            SG_CHECK(sgtest_now() - t_release < MOVED_WITHIN_S, NULL,
                     "%s: %lld of %d rows in SQLite %.0f s after the lock was given up", tenant,
                     (long long)(moved - before), HELD_EXECS, MOVED_WITHIN_S);
            usleep(10000);
        }
        fprintf(stderr,
                "%s: all %d executes answered %.3f s after another writer took the lock, which it held %.3f s; their "
                "rows in SQLite %.3f s after it was given up\n",
                tenant, HELD_EXECS, t_answered, t_release - t_lock, sgtest_now() - t_release);

        /* the ledger: exactly those rows, as many in each session */
        int64_t rows = expect_usage_agrees(stack.gw, tenant);
        SG_CHECK(rows == before + HELD_EXECS, NULL, "%s: %lld rows after the release, %lld before (+%d expected)",
                 tenant, (long long)rows, (long long)before, HELD_EXECS);
        for (int s = 0; s < ns; s++)
            SG_CHECK(session_rows(sid[s]) == 1 + HELD_EXECS / ns, NULL, "%s: session %d has %lld rows, %d expected",
                     tenant, s, (long long)session_rows(sid[s]), 1 + HELD_EXECS / ns);
        const char *p[] = {tenant, NULL};
        char sql[320];
        snprintf(sql, sizeof(sql),
                 "SELECT COUNT(*), SUM(u.exit_code = 0 AND u.kind = 'execute'), SUM(u.output_bytes) FROM"
                 " (SELECT * FROM usage WHERE tenant_id = (SELECT id FROM tenants WHERE name = ?1)"
                 " ORDER BY id DESC LIMIT %d) u",
                 HELD_EXECS);
        char *v = db_text(data_dir(), sql, p);
        char expect[96];
        snprintf(expect, sizeof(expect), "%d|%d|%lld", HELD_EXECS, HELD_EXECS, (long long)out_bytes);
        SG_CHECK(strcmp(v, expect) == 0, NULL, "%s: the last %d rows (count|ok executes|output bytes) are %s, not %s",
                 tenant, HELD_EXECS, v, expect);
        free(v);
        for (int s = 0; s < ns; s++) {
            sggw_delete_session(stack.gw, tok, sid[s]);
            free(sid[s]);
        }
        free(tok);
    }
}

/* ---- the WAL stays bounded ------------------------------------------------------------- */

/* What the WAL file shows: its size, and from its header (the SQLite file
 * format: 32 bytes, big-endian) the page size and salt-1, which every
 * restart of the WAL (a writer starting it again from its beginning once
 * a checkpoint has copied all of it back) adds one to. */
typedef struct {
    int64_t size;
    uint32_t page_size, salt1;
} wal_look_t;

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* 0, or -1 when there is no WAL file (yet) or no header in it. */
static int wal_look(const char *path, wal_look_t *out)
{
    unsigned char h[32];
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int ok = fstat(fd, &sb) == 0 && pread(fd, h, sizeof(h), 0) == (ssize_t)sizeof(h);
    close(fd);
    if (!ok || (be32(h) & 0xfffffffe) != 0x377f0682) /* the WAL magic */
        return -1;
    out->size = sb.st_size;
    out->page_size = be32(h + 8);
    out->salt1 = be32(h + 16);
    return 0;
}

#define WAL_CLIENTS 8
#define WAL_SESSIONS 4

/* Executes [first, total) by WAL_CLIENTS clients, each sending its next one
 * as soon as it has the reply to the last, to the sessions in turn. */
typedef struct {
    char url[WAL_SESSIONS][256];
    const char *token;
    int first, total;
    atomic_int next, done;
    long *status; /* [total] */
    bool *ok;     /* [total]: 200 and stdout "<i>\n" */
} wal_load_t;

static void *wal_client(void *ud)
{
    wal_load_t *l = ud;
    sggw_auth_t a;
    const char *const *h = sggw_auth(&a, l->token);
    for (int i; (i = atomic_fetch_add(&l->next, 1)) < l->total;) {
        char body[64], want[32];
        sgtest_reply_t r;
        snprintf(body, sizeof(body), "{\"code\":\"print(%d)\"}", i);
        snprintf(want, sizeof(want), "%d\n", i);
        sggw_http("POST", l->url[i % WAL_SESSIONS], body, strlen(body), "application/json", h, 60, &r);
        l->status[i] = r.status;
        json_object *o = r.status == 200 ? json_tokener_parse(r.body) : NULL;
        json_object *v;
        l->ok[i] =
            o != NULL && json_object_object_get_ex(o, "stdout", &v) && strcmp(json_object_get_string(v), want) == 0;
        if (!l->ok[i])
            fprintf(stderr, "execute %d: %ld %.300s\n", i, r.status, r.body != NULL ? r.body : "");
        json_object_put(o);
        sgtest_reply_free(&r);
        atomic_fetch_add(&l->done, 1);
    }
    return NULL;
}

/* Runs executes [l->first, total) (l->next set to first); meanwhile looks
 * at the WAL every 5 ms: *restarts gets how many times it restarted, *max
 * its largest size. Returns the seconds it took. */
static double wal_run(wal_load_t *l, int total, const char *wal, int *restarts, int64_t *max)
{
    pthread_t th[WAL_CLIENTS];
    wal_look_t w, prev;
    bool have = wal_look(wal, &prev) == 0;
    double t0 = sgtest_now();

    l->total = total;
    atomic_store(&l->next, l->first);
    atomic_store(&l->done, l->first);
    for (int c = 0; c < WAL_CLIENTS; c++)
        SG_CHECK(pthread_create(&th[c], NULL, wal_client, l) == 0, NULL, "cannot start a client");
    for (bool last = false; !last; usleep(5000)) {
        last = atomic_load(&l->done) >= total;
        if (wal_look(wal, &w) != 0)
            continue;
        if (have && w.salt1 != prev.salt1)
            *restarts += (int)(w.salt1 - prev.salt1);
        *max = w.size > *max ? w.size : *max;
        prev = w;
        have = true;
    }
    for (int c = 0; c < WAL_CLIENTS; c++)
        pthread_join(th[c], NULL);
    double took = sgtest_now() - t0;
    l->first = total;
    return took;
}

/* SQLite's own threshold (wal_autocheckpoint): the loop's connection never
 * checkpoints (gateway/store/store_gen.c); the DB threads' connections,
 * which move the usage journal into the file, run a checkpoint after a
 * commit that leaves the WAL this long, and the next writer starts the WAL
 * again from its beginning once all of it is copied back. */
#define CHECKPOINT_FRAMES 1000
/* The moves of the journal into SQLite are each a transaction of a few
 * frames whatever their rows: this test's gateway moves it every 20 ms
 * (SANDGATE_USAGE_IMPORT_MS; 100 by default), so that the load writes the
 * frames below in seconds. */
#define WAL_IMPORT_MS "20"
/* The bound asserted, in frames: the commits past the threshold are each a
 * few frames (the rows of WAL_IMPORT_MS of executions: the usage
 * table's pages, its two indexes', the sessions'), and a checkpoint that
 * found a reader in the way is tried again at the next. Measured here:
 * 0.45-1 frames per execute (fewer the faster the executes come: more
 * rows in one move) at 600-750 executes/s, the WAL at most ~1010 frames
 * long. A WAL that is never checkpointed grows by every frame
 * written: the load writes WAL_TARGET_FRAMES (at least WAL_MIN_FRAMES by
 * the measure), more than the bound. */
#define WAL_BOUND_FRAMES (2 * CHECKPOINT_FRAMES)
#define WAL_MIN_FRAMES 2200
#define WAL_TARGET_FRAMES 2600 /* what the load is sized for, from the measure */
#define WAL_WARMUP 96          /* executes that measure the frames per execute */
#define WAL_MAX_EXECS 12000    /* room for ~0.22 frames per execute */

/* A gateway of the test's own (the stack's proxy and Redis; data_dir NULL:
 * a directory of its own), a tenant on it without limits in the way,
 * WAL_SESSIONS sessions, and a load of at most max executes ready to run
 * (wal_run). */
typedef struct {
    sggw_gateway_t *g;
    char *tok;
    char *sid[WAL_SESSIONS];
    char wal[760]; /* the SQLite file's WAL */
    wal_load_t l;
} own_load_t;

static void own_load_start(own_load_t *o, const char *data_dir, const char *const *env, const char *tenant, int max)
{
    sggw_opts_t opts = {
        .proxy_url = stack.proxy_url, .redis_url = sggw_redis_url(stack.redis), .data_dir = data_dir, .env = env};
    const char *q[] = {"max_concurrent_execs=64", "rate_per_min=1000000", "burst=1000000", NULL};

    memset(o, 0, sizeof(*o));
    o->g = stack.extra_gw = sggw_gateway_start(&opts);
    SG_CHECK(o->g != NULL, NULL, "cannot start a gateway");
    const char *dir = sggw_gateway_data_dir(o->g);
    o->tok = sggw_new_tenant(dir, tenant, q);
    o->l.token = o->tok;
    snprintf(o->wal, sizeof(o->wal), "%s/sandgate.db-wal", dir);
    for (int s = 0; s < WAL_SESSIONS; s++) {
        o->sid[s] = sggw_create_session(o->g, o->tok, NULL, NULL);
        snprintf(o->l.url[s], sizeof(o->l.url[s]), "%s/sessions/%s/execute", sggw_gateway_url(o->g), o->sid[s]);
    }
    o->l.status = calloc((size_t)max, sizeof(*o->l.status));
    o->l.ok = calloc((size_t)max, sizeof(*o->l.ok));
    SG_CHECK(o->l.status != NULL && o->l.ok != NULL, NULL, "out of memory");
}

/* The executes of [0, total) answered 200 with their stdout. */
static int own_load_ok(const own_load_t *o, int total)
{
    int ok = 0;
    for (int i = 0; i < total; i++)
        ok += o->l.ok[i];
    return ok;
}

/* The sessions deleted, the gateway stopped (SIGTERM, status 0). */
static void own_load_end(own_load_t *o)
{
    free(o->l.status);
    free(o->l.ok);
    for (int s = 0; s < WAL_SESSIONS; s++) {
        sggw_delete_session(o->g, o->tok, o->sid[s]);
        free(o->sid[s]);
    }
    free(o->tok);
    sggw_stack_stop_extra(&stack, "the gateway");
}

/* Many executes through a gateway of the test's own (its own SQLite file,
 * so the WAL starts empty), 8 clients at once: the WAL file (its size
 * never shrinks: SQLite writes a restarted WAL over its beginning) never
 * grows past WAL_BOUND_FRAMES, it restarts, and every execute answered 200
 * is in the ledger. */
SGGW_TEST(test_wal_stays_bounded)
{
    own_load_t o;
    const char *fast_imports[] = {"SANDGATE_USAGE_IMPORT_MS=" WAL_IMPORT_MS, NULL};
    own_load_start(&o, NULL, fast_imports, "guar-wal", WAL_MAX_EXECS);
    const char *wal = o.wal;

    /* the measure: the WAL's growth over WAL_WARMUP executes (short of a
     * checkpoint: the whole WAL stays under CHECKPOINT_FRAMES) */
    wal_look_t w0, w1;
    SG_CHECK(wal_look(wal, &w0) == 0, NULL, "no WAL file at %s", wal);
    int restarts = 0;
    int64_t max = w0.size;
    double took = wal_run(&o.l, WAL_WARMUP, wal, &restarts, &max);
    SG_CHECK(wal_look(wal, &w1) == 0, NULL, "no WAL file at %s", wal);
    int64_t frame = (int64_t)w1.page_size + 24;
    double per_exec = (double)(w1.size - w0.size) / (double)frame / WAL_WARMUP;
    fprintf(stderr,
            "WAL: %d executes in %.2f s wrote %.0f frames of %lld bytes (%.2f per execute; the WAL %lld frames "
            "long, %d restarts)\n",
            WAL_WARMUP, took, (double)(w1.size - w0.size) / (double)frame, (long long)frame, per_exec,
            (long long)((w1.size - 32) / frame), restarts);
    SG_CHECK(per_exec > 0, NULL, "the executes wrote nothing to the WAL");
    int total = WAL_WARMUP + (int)(WAL_TARGET_FRAMES / per_exec) + 1;
    SG_CHECK(total <= WAL_MAX_EXECS && per_exec * (total - WAL_WARMUP) >= WAL_MIN_FRAMES, NULL,
             "%.2f frames per execute: %d executes for %d frames", per_exec, total, WAL_TARGET_FRAMES);

    /* the load */
    took = wal_run(&o.l, total, wal, &restarts, &max);
    int64_t bound = 32 + WAL_BOUND_FRAMES * frame;
    fprintf(stderr,
            "WAL: %d executes in %.2f s (%.0f/s), ~%.0f frames written; the WAL restarted %d times, at most %lld "
            "bytes = %lld frames (bound %lld bytes = %d frames)\n",
            total - WAL_WARMUP, took, (total - WAL_WARMUP) / took, per_exec * (total - WAL_WARMUP), restarts,
            (long long)max, (long long)((max - 32) / frame), (long long)bound, WAL_BOUND_FRAMES);
    int ok = own_load_ok(&o, total);
    SG_CHECK(ok == total, NULL, "%d of %d executes answered 200 with their stdout", ok, total);
    SG_CHECK(max <= bound, NULL, "the WAL grew to %lld bytes (%lld frames), past %lld (%d frames)", (long long)max,
             (long long)((max - 32) / frame), (long long)bound, WAL_BOUND_FRAMES);
    SG_CHECK(restarts >= 1, NULL, "the WAL never restarted");

    /* every execute answered 200 is in the ledger (and in its session's count) */
    int64_t rows = expect_usage_agrees(o.g, "guar-wal");
    SG_CHECK(rows == ok, NULL, "%d executes answered 200, %lld rows in the ledger", ok, (long long)rows);
    own_load_end(&o);
}

/* ---- the journal's file system full ------------------------------------------------------ */

/* The journal's directory of a gateway of the test's own is a tmpfs this
 * small: about 160 rows fill it. */
#define FULL_FS_OPTS "size=16k,mode=0700"
#define FULL_EXECS 400
static char full_mount[700]; /* mounted: after_test unmounts it too */

/* Executes through a gateway whose usage journal fills its file system
 * (ENOSPC): every execute is answered 200 with its stdout (the rows that
 * no longer fit go to SQLite on a DB thread, each answer after its
 * commit), the file system is full, and the ledger has exactly one row
 * per execute — none lost, and none twice from an append cut back. */
SGGW_TEST(test_full_journal_falls_back_to_the_database)
{
    char *dir = sggw_mkdtemp("sggw-full");
    SG_CHECK(dir != NULL, NULL, "mkdtemp");
    snprintf(full_mount, sizeof(full_mount), "%s/usage-journal", dir);
    SG_CHECK(mkdir(full_mount, 0700) == 0, NULL, "mkdir %s: %s", full_mount, strerror(errno));
    SG_CHECK(mount("tmpfs", full_mount, "tmpfs", 0, FULL_FS_OPTS) == 0, NULL, "mount a tmpfs (%s) on %s: %s",
             FULL_FS_OPTS, full_mount, strerror(errno));
    own_load_t o;
    own_load_start(&o, dir, NULL, "guar-full", FULL_EXECS);
    int restarts = 0;
    int64_t max = 0;
    double took = wal_run(&o.l, FULL_EXECS, o.wal, &restarts, &max);

    int ok = own_load_ok(&o, FULL_EXECS);
    struct statvfs vfs;
    SG_CHECK(statvfs(full_mount, &vfs) == 0, NULL, "statvfs %s: %s", full_mount, strerror(errno));
    fprintf(stderr, "full journal: %d executes in %.2f s, %d answered 200 with their stdout; %lu of %lu blocks free\n",
            FULL_EXECS, took, ok, (unsigned long)vfs.f_bfree, (unsigned long)vfs.f_blocks);
    SG_CHECK(ok == FULL_EXECS, NULL, "%d of %d executes answered 200 with their stdout", ok, FULL_EXECS);
    SG_CHECK(vfs.f_bfree == 0, NULL, "the journal's file system is not full (%lu blocks free): nothing fell back",
             (unsigned long)vfs.f_bfree);
    int64_t rows = expect_usage_agrees(o.g, "guar-full");
    SG_CHECK(rows == FULL_EXECS, NULL, "%d executes answered, %lld rows in the ledger", FULL_EXECS, (long long)rows);

    own_load_end(&o);
    SG_CHECK(umount2(full_mount, MNT_DETACH) == 0, NULL, "umount %s: %s", full_mount, strerror(errno));
    full_mount[0] = '\0';
    sggw_rmtree(dir);
    free(dir);
}

static int after_test(void **state)
{
    if (full_mount[0] != '\0' && umount2(full_mount, MNT_DETACH) != 0)
        fprintf(stderr, "umount %s: %s\n", full_mount, strerror(errno));
    full_mount[0] = '\0';
    return sggw_stack_after_test(&stack);
}

int main(void)
{
    return SG_RUN_TESTS("gateway_guarantees", group_setup, sggw_stack_group_teardown, NULL, after_test,
                        test_revocation_reaches_every_gateway, test_answered_is_in_ledger, test_limits_exact_under_load,
                        test_solo_limits_exact, test_solo_refuses_quota_and_cap_from_copy,
                        test_create_answered_before_redis_takes_it, test_stop_waits_for_the_commits,
                        test_solo_stop_leaves_nothing_unsent, test_kill9_loses_no_answered_row,
                        test_busy_ledger_answers_from_the_journal, test_wal_stays_bounded,
                        test_full_journal_falls_back_to_the_database);
}
