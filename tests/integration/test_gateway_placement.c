/*
 * test_gateway_placement.c — one gateway tier over several proxies (issue
 * 16, the gateway's side), against real sandgate-proxy processes (two,
 * each with its own SANDGATE_PROXY_ID, on the one Docker engine), two
 * real gateways sharing one SQLite file and one redis-server, both
 * configured with SANDGATE_PROXY_URL listing both proxies:
 *   - sessions created through either gateway spread over both proxies;
 *     each proxy's own GET /sessions lists those placed there, and the
 *     session's SQLite row names that proxy; every later call for a
 *     session reaches its proxy through either gateway (its interpreter
 *     state is there); the Redis record names it too, once the create is
 *     answered; a one-shot execution goes to the less loaded proxy;
 *   - a proxy killed (SIGKILL) mid-execution: that execution answers 502
 *     at once; its sessions answer 410 session_lost within the checks
 *     (3 s) + the grace (SANDGATE_PROXY_GRACE_MS) + a margin, and no call
 *     for them hangs meanwhile; new sessions all go to the other proxy;
 *     the proxy started again (same id and port, a new state) is back in
 *     placement and new sessions land there again.
 */
#include "sggw.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GRACE_MS 2000
#define CHECKS_S 3.0 /* SG_PROXY_DOWN_AFTER checks, SG_PROXY_CHECK_MS apart */
#define MARGIN_S 3.0

static struct {
    sggw_redis_t *redis;
    sggw_pair_t pp;
    char *dir;
    sggw_gateway_t *gw[2];
} S;

static int group_setup(void **state)
{
    char list[300], grace[64];
    (void)state;
    S.redis = sggw_redis_start();
    S.dir = sggw_mkdtemp("sgplace");
    if (S.redis == NULL || S.dir == NULL || sggw_pair_start(&S.pp) != 0)
        return -1;
    sggw_pair_urls(&S.pp, ", ", list, sizeof(list));
    strcat(list, "/");
    snprintf(grace, sizeof(grace), "SANDGATE_PROXY_GRACE_MS=%d", GRACE_MS);
    const char *env[] = {grace, NULL};
    for (int i = 0; i < 2; i++) {
        sggw_opts_t o = {.proxy_url = list,
                         .redis_url = sggw_redis_url(S.redis),
                         .data_dir = S.dir,
                         .admin_token = i == 0 ? NULL : sggw_gateway_admin_token(S.gw[0]),
                         .env = env};
        if ((S.gw[i] = sggw_gateway_start(&o)) == NULL)
            return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    int rc = 0;
    for (int i = 1; i >= 0; i--) {
        if (S.gw[i] != NULL && sggw_gateway_quiesce(S.gw[i]) != 0)
            fprintf(stderr, "teardown: live sessions remain in the state\n");
        if (S.gw[i] != NULL && sggw_gateway_stop(S.gw[i]) != 0) {
            fprintf(stderr, "teardown: gateway %d did not exit 0 on SIGTERM\n", i);
            rc = -1;
        }
    }
    /* a proxy a test killed and did not start again reconciles its leftovers */
    if (sggw_pair_end(&S.pp, true) != 0)
        rc = -1;
    sggw_redis_stop(S.redis);
    sggw_rmtree(S.dir);
    free(S.dir);
    return rc;
}

/* ---- where things are ---- */

static void expect_recorded_on(const char *sid, int i)
{
    const char *params[] = {sid, NULL};
    char err[256];
    char *row = sggw_db_row(S.dir, "SELECT proxy FROM sessions WHERE id = ?1", params, err);
    SG_CHECK(row != NULL, NULL, "no row for session %s: %s", sid, err);
    SG_CHECK(strcmp(row, sgtest_proxy_url(S.pp.proxy[i])) == 0, NULL, "session %s: recorded on \"%s\", placed on %s",
             sid, row, sgtest_proxy_url(S.pp.proxy[i]));
    free(row);
    /* and in its live record, for dashboards (written right after the
     * answer) */
    char *h = sggw_redis_poll(S.redis, 5, "HGET sg:session:%s proxy", sid);
    SG_CHECK(h != NULL && strcmp(h, sgtest_proxy_url(S.pp.proxy[i])) == 0, NULL,
             "session %s: its Redis record names proxy \"%s\"", sid, h != NULL ? h : "(none)");
    free(h);
}

/* Executions and commands proxy i has run (the sum of its counter). */
static double proxy_execs(int i)
{
    sgtest_reply_t r;
    double sum = 0;
    const char *name = "sandgate_proxy_executions_total{";
    sgtest_call(S.pp.proxy[i], "GET", "/metrics", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    for (const char *l = r.body; l != NULL && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, name, strlen(name)) == 0) {
            const char *sp = strchr(l, ' ');
            if (sp != NULL)
                sum += atof(sp + 1);
        }
    }
    sgtest_reply_free(&r);
    return sum;
}

/* GET /health of gateway g: proxy i's "up" and "sessions" (-1 when absent). */
static int gw_proxy_up(const sggw_gateway_t *g, int i, long *sessions)
{
    sgtest_reply_t r;
    json_object *o, *arr, *p, *v;
    int up = -1;
    sggw_call(g, NULL, "GET", "/health", NULL, &r);
    SG_CHECK(r.status == 200 || r.status == 503, NULL, "GET /health: %ld", r.status);
    o = SG_JSON(&r);
    SG_CHECK(json_object_object_get_ex(o, "proxies", &arr) && json_object_array_length(arr) == 2, o,
             "GET /health lists no two proxies");
    p = json_object_array_get_idx(arr, (size_t)i);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", S.pp.port[i]);
    SG_CHECK(json_object_object_get_ex(p, "url", &v) && strcmp(json_object_get_string(v), url) == 0, o,
             "GET /health: proxy %d is not %s", i, url);
    if (json_object_object_get_ex(p, "up", &v))
        up = json_object_get_boolean(v);
    if (sessions != NULL)
        *sessions = json_object_object_get_ex(p, "sessions", &v) ? json_object_get_int64(v) : -1;
    json_object_put(o);
    sgtest_reply_free(&r);
    return up;
}

/* ---- tests ---- */

SGGW_TEST(test_spread_and_routing)
{
    const char *quotas[] = {"max_sessions=30", NULL};
    char *tok = sggw_new_tenant(S.dir, "place-spread", quotas);
    char *sid[8], code[64], want[16];
    int n[2] = {0, 0}, at[8];

    /* sessions through either gateway go to both proxies */
    for (int i = 0; i < 8; i++) {
        sid[i] = sggw_create_session(S.gw[i % 2], tok, NULL, NULL);
        at[i] = sggw_pair_where(&S.pp, sid[i]);
        SG_CHECK(at[i] >= 0, NULL, "session %s is listed by no proxy", sid[i]);
        expect_recorded_on(sid[i], at[i]);
        n[at[i]]++;
    }
    fprintf(stderr, "placement: %d sessions on proxy 0, %d on proxy 1\n", n[0], n[1]);
    SG_CHECK(n[0] >= 2 && n[1] >= 2, NULL, "8 sessions placed %d / %d", n[0], n[1]);

    /* every later call reaches the session's proxy, through either gateway:
     * a variable set through one is there through the other */
    for (int i = 0; i < 8; i++) {
        snprintf(code, sizeof(code), "x = %d", 100 + i);
        json_object_put(sggw_execute(S.gw[i % 2], tok, sid[i], code, 0));
        json_object *r = sggw_execute(S.gw[(i + 1) % 2], tok, sid[i], "print(x)", 0);
        json_object *v;
        snprintf(want, sizeof(want), "%d\n", 100 + i);
        SG_CHECK(json_object_object_get_ex(r, "stdout", &v) && strcmp(json_object_get_string(v), want) == 0, r,
                 "session %s: the state set through one gateway is not there through the other", sid[i]);
        json_object_put(r);
        /* files too */
        char path[128];
        sgtest_reply_t rr;
        snprintf(path, sizeof(path), "/sessions/%s", sid[i]);
        sggw_call(S.gw[(i + 1) % 2], tok, "GET", path, NULL, &rr);
        SG_ASSERT_STATUS(&rr, 200);
        sgtest_reply_free(&rr);
    }
    for (int i = 0; i < 8; i++)
        SG_CHECK(sggw_lists(S.gw[0], tok, sid[i]) && sggw_lists(S.gw[1], tok, sid[i]), NULL,
                 "session %s not listed by both gateways", sid[i]);

    /* a delete through the other gateway removes it on its own proxy */
    for (int i = 0; i < 8; i++) {
        sggw_delete_session(S.gw[(i + 1) % 2], tok, sid[i]);
        SG_CHECK(sggw_pair_where(&S.pp, sid[i]) == -1, NULL, "session %s still on proxy %d after its delete", sid[i],
                 at[i]);
        free(sid[i]);
    }
    free(tok);
}

static bool proxy0_reported_busy(void *ctx)
{
    long s0 = -1, s1 = -1;
    for (int g = 0; g < 2; g++) {
        gw_proxy_up(S.gw[g], 0, &s0);
        gw_proxy_up(S.gw[g], 1, &s1);
        if (!(s0 >= 3 && s1 == 0))
            return false;
    }
    return true;
}

SGGW_TEST(test_one_shot_least_loaded)
{
    const char *quotas[] = {"max_sessions=30", NULL};
    char *tok = sggw_new_tenant(S.dir, "place-oneshot", quotas);
    char *direct[3];
    sgtest_reply_t r;

    /* proxy 0 busy with sessions of its own (made on it directly), proxy 1 idle */
    for (int i = 0; i < 3; i++)
        direct[i] = sgtest_create_session(S.pp.proxy[0], "python", NULL, NULL);
    SG_CHECK(sgtest_poll(proxy0_reported_busy, NULL, 10, 0.1) == 0, NULL,
             "the gateways' health checks did not see proxy 0's sessions");
    double before[2] = {proxy_execs(0), proxy_execs(1)};
    for (int i = 0; i < 4; i++) {
        sggw_call(S.gw[i % 2], tok, "POST", "/execute", "{\"lang\":\"python\",\"code\":\"print(7)\"}", &r);
        SG_ASSERT_STATUS(&r, 200);
        sgtest_reply_free(&r);
    }
    double after[2] = {proxy_execs(0), proxy_execs(1)};
    fprintf(stderr, "one-shot: proxy 0 ran %.0f, proxy 1 ran %.0f\n", after[0] - before[0], after[1] - before[1]);
    SG_CHECK(after[1] - before[1] == 4 && after[0] == before[0], NULL,
             "one-shot executions went to the busier proxy (%.0f there, %.0f on the idle one)", after[0] - before[0],
             after[1] - before[1]);
    for (int i = 0; i < 3; i++) {
        sgtest_close_session(S.pp.proxy[0], S.pp.proxy_id[0], direct[i], NULL, 20);
        free(direct[i]);
    }
    free(tok);
}

typedef struct {
    int i;
    int want;
} up_ctx_t;

static bool proxy_state_is(void *ctx)
{
    up_ctx_t *c = ctx;
    return gw_proxy_up(S.gw[0], c->i, NULL) == c->want && gw_proxy_up(S.gw[1], c->i, NULL) == c->want;
}

SGGW_TEST(test_proxy_lost_and_back)
{
    const char *quotas[] = {"max_sessions=30", NULL};
    char *tok = sggw_new_tenant(S.dir, "place-lost", quotas);
    char *on1[4] = {0}, *on0[8] = {0}, *sid, url[256], body[160], path[160];
    int n1 = 0, n0 = 0;
    sgtest_reply_t r;

    /* sessions on both proxies */
    for (int k = 0; k < 12 && (n1 < 2 || n0 < 1); k++) {
        sid = sggw_create_session(S.gw[k % 2], tok, NULL, NULL);
        int at = sggw_pair_where(&S.pp, sid);
        if (at == 1 && n1 < 4) {
            on1[n1++] = sid;
        } else if (at == 0 && n0 < 4) {
            on0[n0++] = sid;
        } else {
            sggw_delete_session(S.gw[k % 2], tok, sid);
            free(sid);
        }
    }
    SG_CHECK(n1 >= 2 && n0 >= 1, NULL, "no sessions on both proxies (%d, %d)", n0, n1);

    /* an execution in flight on proxy 1 when it dies: a clear 502, promptly */
    snprintf(url, sizeof(url), "%s/sessions/%s/execute", sggw_gateway_url(S.gw[0]), on1[0]);
    snprintf(body, sizeof(body), "{\"code\":\"import time\\ntime.sleep(20)\",\"timeout\":30}");
    sggw_par_req_t req = sggw_par_post(url, tok, body, 40);
    sggw_batch_t *b = sggw_batch_start(&req, 1);
    SG_CHECK(b != NULL && sgtest_batch_wait_sent(b, 10) == 0, NULL, "the execute was not sent");
    usleep(300000); /* on its way to the sandbox: either way it is in flight */
    double t0 = sgtest_now();
    sggw_pair_kill9(&S.pp, 1);
    sggw_batch_join(b);
    fprintf(stderr, "in flight: answered %ld after %.3f s\n", req.reply.status, req.finished - t0);
    SG_CHECK(req.reply.status == 502, NULL, "the execution in flight answered %ld: %s", req.reply.status,
             req.reply.body);
    SG_CHECK(req.finished - t0 < 3, NULL, "the execution in flight answered only %.3f s after the kill",
             req.finished - t0);
    sgtest_reply_free(&req.reply);

    /* its sessions: 502 (not yet out of placement), waits bounded by the
     * grace, then 410 session_lost — never a hang */
    for (int k = 0; k < n1; k++) {
        snprintf(path, sizeof(path), "/sessions/%s/execute", on1[k]);
        for (;;) {
            sggw_call(S.gw[k % 2], tok, "POST", path, "{\"code\":\"print(1)\"}", &r);
            double t = sgtest_now() - t0;
            SG_CHECK(r.seconds <= GRACE_MS / 1000.0 + 1.5, NULL, "a call for a lost session took %.3f s", r.seconds);
            if (r.status == 410) {
                SG_CHECK(strstr(r.body, "\"session_lost\"") != NULL, NULL, "410 without session_lost: %s", r.body);
                fprintf(stderr, "session %d of the dead proxy: 410 session_lost %.3f s after the kill\n", k, t);
                sgtest_reply_free(&r);
                break;
            }
            SG_CHECK(r.status == 502, NULL, "a session of the dead proxy answered %ld: %s", r.status, r.body);
            SG_CHECK(t <= CHECKS_S + GRACE_MS / 1000.0 + MARGIN_S, NULL, "still no session_lost %.3f s after the kill",
                     t);
            sgtest_reply_free(&r);
            usleep(100000);
        }
        sggw_expect_db_closed(S.dir, on1[k], "session_lost");
        SG_CHECK(!sggw_lists(S.gw[0], tok, on1[k]), NULL, "a lost session is still listed");
    }

    /* the other proxy's sessions go on; new sessions all go there */
    json_object_put(sggw_execute(S.gw[1], tok, on0[0], "print(2)", 0));
    for (int k = 0; k < 4; k++) {
        sid = sggw_create_session(S.gw[k % 2], tok, NULL, NULL);
        SG_CHECK(sggw_pair_where(&S.pp, sid) == 0, NULL, "a new session went elsewhere than the live proxy");
        SG_CHECK(n0 < 8, NULL, "too many");
        on0[n0++] = sid;
    }
    sggw_call(S.gw[0], NULL, "GET", "/health", NULL, &r);
    SG_ASSERT_STATUS(&r, 200); /* one proxy up is enough */
    sgtest_reply_free(&r);
    sggw_call(S.gw[1], NULL, "GET", "/metrics", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    char labels[300];
    snprintf(labels, sizeof(labels), "proxy=\"http://127.0.0.1:%d\"", S.pp.port[1]);
    SG_CHECK(sggw_metric(r.body, "sandgate_proxy_up", labels) == 0, NULL, "sandgate_proxy_up of the dead one is not 0");
    snprintf(labels, sizeof(labels), "proxy=\"http://127.0.0.1:%d\"", S.pp.port[0]);
    SG_CHECK(sggw_metric(r.body, "sandgate_proxy_up", labels) == 1, NULL, "sandgate_proxy_up of the live one is not 1");
    sgtest_reply_free(&r);

    /* started again (same id and port, a new state): back in placement */
    sggw_pair_restart(&S.pp, 1);
    SG_CHECK(S.pp.proxy[1] != NULL, NULL, "proxy 1 did not start again");
    up_ctx_t up = {.i = 1, .want = 1};
    SG_CHECK(sgtest_poll(proxy_state_is, &up, 5, 0.1) == 0, NULL, "proxy 1 is not back in placement within 5 s");
    int landed = 0;
    for (int k = 0; k < 8 && !landed; k++) {
        sid = sggw_create_session(S.gw[k % 2], tok, NULL, NULL);
        if (sggw_pair_where(&S.pp, sid) == 1) {
            landed = 1;
            expect_recorded_on(sid, 1);
            json_object_put(sggw_execute(S.gw[(k + 1) % 2], tok, sid, "print(3)", 0));
        }
        sggw_delete_session(S.gw[k % 2], tok, sid);
        free(sid);
    }
    SG_CHECK(landed, NULL, "no new session landed on the proxy back in placement");

    for (int k = 0; k < n0; k++) {
        sggw_delete_session(S.gw[k % 2], tok, on0[k]);
        free(on0[k]);
    }
    for (int k = 0; k < n1; k++)
        free(on1[k]);
    free(tok);
}

static int after_test(void **state)
{
    return sggw_after_test();
}

int main(void)
{
    return SG_RUN_TESTS("gateway_placement", group_setup, group_teardown, NULL, after_test, test_spread_and_routing,
                        test_one_shot_least_loaded, test_proxy_lost_and_back);
}
