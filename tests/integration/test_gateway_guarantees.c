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
 *     execute it answered 200 in the ledger.
 */
#include "sggw.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
static sggw_gateway_t *second_gateway(void)
{
    sggw_opts_t opts = {.proxy_url = sgtest_proxy_url(stack.proxy),
                        .redis_url = sggw_redis_url(stack.redis),
                        .data_dir = data_dir(),
                        .admin_token = sggw_gateway_admin_token(stack.gw)};
    sggw_gateway_t *g = stack.extra_gw = sggw_gateway_start(&opts);
    SG_CHECK(g != NULL, NULL, "cannot start a second gateway");
    return g;
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
    char *v = sggw_db_row(data_dir(),
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
    char *v = sggw_db_row(data_dir(), "SELECT COUNT(*) FROM usage WHERE session_id = ?1", p, err);
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

/* "<gateway i % 2>" + path: the batches below go to both gateways at once. */
static void gw_url(char *out, size_t len, sggw_gateway_t *const gws[2], int i, const char *path)
{
    snprintf(out, len, "%s%s", sggw_gateway_url(gws[i % 2]), path);
}

SGGW_TEST(test_limits_exact_under_load)
{
    sggw_gateway_t *gws[2] = {stack.gw, second_gateway()};
    sggw_par_req_t reqs[16];
    char url[16][256], path[128];

    /* the rate: burst 6, then one a minute — of 16 executes at once through
     * two gateways, exactly 5 run (the create took one; the rate is counted
     * in the one admission script) */
    const char *rq[] = {"rate_per_min=1", "burst=6", NULL};
    char *tok = sggw_new_tenant(data_dir(), "guar-rate", rq);
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    snprintf(path, sizeof(path), "/sessions/%s/execute", sid);
    for (int i = 0; i < 16; i++) {
        gw_url(url[i], sizeof(url[i]), gws, i, path);
        reqs[i] = sggw_par_post(url[i], tok, "{\"code\":\"print(1)\"}", 60);
    }
    int ok = count_ok(reqs, 16, "rate limit");
    SG_CHECK(ok == 5, NULL, "burst 6 (one used by the create): %d of 16 executes ran", ok);
    /* and GET /sessions (the rate alone) of a fresh tenant */
    const char *rq2[] = {"rate_per_min=1", "burst=7", NULL};
    char *tok2 = sggw_new_tenant(data_dir(), "guar-rate2", rq2);
    for (int i = 0; i < 16; i++) {
        gw_url(url[i], sizeof(url[i]), gws, i, "/sessions");
        reqs[i] = (sggw_par_req_t){.method = "GET", .url = url[i], .token = tok2, .timeout_s = 30};
    }
    ok = count_ok(reqs, 16, "rate limit");
    SG_CHECK(ok == 7, NULL, "burst 7: %d of 16 lists answered", ok);
    free(tok2);
    /* the rate back (its stored arrival time is minutes ahead) for the delete */
    const char *open_rate[] = {"rate_per_min=1000000", "burst=1000000", NULL};
    sggw_tenant_set(data_dir(), "guar-rate", open_rate);
    sggw_delete_session(stack.gw, tok, sid);
    free(sid);

    /* executions in flight: cap 3, 12 at once that each take a while,
     * spread over three sessions and both gateways */
    const char *cq[] = {"max_concurrent_execs=3", NULL};
    char *tok3 = sggw_new_tenant(data_dir(), "guar-conc", cq);
    char *sids[3];
    for (int s = 0; s < 3; s++)
        sids[s] = sggw_create_session(stack.gw, tok3, NULL, NULL);
    for (int i = 0; i < 12; i++) {
        snprintf(path, sizeof(path), "/sessions/%s/execute", sids[i % 3]);
        gw_url(url[i], sizeof(url[i]), gws, i / 3, path);
        reqs[i] = sggw_par_post(url[i], tok3, "{\"code\":\"import time; time.sleep(2)\"}", 60);
    }
    ok = count_ok(reqs, 12, "concurrency_limit");
    SG_CHECK(ok == 3, NULL, "cap 3: %d of 12 executes ran", ok);
    for (int s = 0; s < 3; s++) {
        sggw_delete_session(stack.gw, tok3, sids[s]);
        free(sids[s]);
    }

    /* session slots: 2, of 8 creates at once through both gateways */
    const char *sq[] = {"max_sessions=2", NULL};
    char *tok4 = sggw_new_tenant(data_dir(), "guar-slots", sq);
    for (int i = 0; i < 8; i++) {
        gw_url(url[i], sizeof(url[i]), gws, i, "/sessions");
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
    sggw_stack_stop_extra(&stack, "the second gateway");
    free(tok);
    free(tok3);
    free(tok4);
}

#define KILL_CLIENTS 16

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
    for (int s = 0; s < 4; s++) {
        sggw_delete_session(stack.gw, tok, sid[s]);
        free(sid[s]);
    }
    free(tok);
}

static int after_test(void **state)
{
    return sggw_stack_after_test(&stack);
}

int main(void)
{
    return SG_RUN_TESTS("gateway_guarantees", group_setup, sggw_stack_group_teardown, NULL, after_test,
                        test_revocation_reaches_every_gateway, test_answered_is_in_ledger, test_limits_exact_under_load,
                        test_kill9_loses_no_answered_row);
}
