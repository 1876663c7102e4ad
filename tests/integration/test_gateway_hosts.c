/*
 * test_gateway_hosts.c — one gateway over two Docker engines, one of them
 * remote over TLS, and sessions that outlive their proxy (issue 16, end to
 * end through the public API).
 *
 * Real components: a redis-server, a sandgate-gateway whose
 * SANDGATE_PROXY_URL lists two sandgate-proxy processes: proxy 0 on the
 * engine's unix socket, proxy 1 on the same engine reached as a remote one,
 * DOCKER_HOST=tcp://… with DOCKER_TLS_VERIFY and DOCKER_CERT_PATH, through
 * socat's TLS listener with certificates the test makes (sgtls.h).
 *   - sessions land on both engines and keep their interpreter state;
 *   - proxy 1 killed with SIGKILL under live sessions and started again
 *     (same id, port and state directory, as its supervisor does): every
 *     one of its sessions answers again through the gateway with the state
 *     it had (a variable and a file), and proxy 0's never noticed;
 *   - proxy 1 killed and left down past the gateway's grace: its sessions
 *     answer 410 session_lost; started again, it re-adopts their sandboxes,
 *     which the gateway's sweep (lifecycle/sweep.h) removes, since the
 *     ledger has them closed: no container of a closed session stays.
 */
#include "sggw.h"
#include "sgrun.h"
#include "sgtls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GRACE_MS 5000 /* the default, and the most it may be */
#define CHECKS_S 3.0  /* SG_PROXY_DOWN_AFTER checks, SG_PROXY_CHECK_MS apart */
#define MARGIN_S 4.0
#define BACK_S 60.0 /* a restarted proxy's sessions answer again within this (adoption) */

static struct {
    sgtls_engine_t tls;
    sggw_redis_t *redis;
    sggw_pair_t pp; /* proxy 0 on the local engine, proxy 1 on the TLS one */
    char cert_kv[600];
    const char *remote_env[4];
    char *dir;
    sggw_gateway_t *gw;
} S;

static int group_setup(void **state)
{
    char list[300], grace[64];
    (void)state;
    if (sgtls_engine_start(&S.tls) != 0)
        return -1;
    S.redis = sggw_redis_start();
    S.dir = sggw_mkdtemp("sghosts");
    if (S.redis == NULL || S.dir == NULL)
        return -1;
    snprintf(S.cert_kv, sizeof(S.cert_kv), "DOCKER_CERT_PATH=%s/client", S.tls.dir);
    S.remote_env[0] = S.tls.docker_host;
    S.remote_env[1] = "DOCKER_TLS_VERIFY=1";
    S.remote_env[2] = S.cert_kv;
    S.pp.env[1] = S.remote_env;
    if (sggw_pair_start(&S.pp) != 0)
        return -1;
    sggw_pair_urls(&S.pp, ",", list, sizeof(list));
    snprintf(grace, sizeof(grace), "SANDGATE_PROXY_GRACE_MS=%d", GRACE_MS);
    const char *env[] = {grace, NULL};
    sggw_opts_t o = {.proxy_url = list, .redis_url = sggw_redis_url(S.redis), .data_dir = S.dir, .env = env};
    return (S.gw = sggw_gateway_start(&o)) != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    int rc = 0;
    (void)state;
    if (S.gw != NULL && sggw_gateway_quiesce(S.gw) != 0)
        fprintf(stderr, "teardown: live sessions remain in the state\n");
    if (S.gw != NULL && sggw_gateway_stop(S.gw) != 0) {
        fprintf(stderr, "teardown: the gateway did not exit 0 on SIGTERM\n");
        rc = -1;
    }
    /* a proxy a test killed is started again while its engine is there */
    if (sggw_pair_end(&S.pp, S.tls.pid > 0) != 0)
        rc = -1;
    if (sgtls_engine_stop(&S.tls) != 0)
        rc = -1;
    sggw_redis_stop(S.redis);
    sggw_rmtree(S.dir);
    free(S.dir);
    return rc;
}

typedef struct {
    char *sid;
    int at;  /* the proxy it was placed on */
    int val; /* the value of its variable x, also in its file x.txt */
} sess_t;

/* At least two sessions on each proxy, each with its own state. */
static size_t make_sessions(const char *tok, sess_t *s, size_t max)
{
    size_t n = 0, on[2] = {0, 0};
    char code[96];
    for (int k = 0; k < 16 && (on[0] < 2 || on[1] < 2) && n < max; k++) {
        char *sid = sggw_create_session(S.gw, tok, NULL, NULL);
        int at = sggw_pair_where(&S.pp, sid);
        SG_CHECK(at >= 0, NULL, "session %s is listed by neither proxy", sid);
        if (on[at] >= 2) {
            sggw_delete_session(S.gw, tok, sid);
            free(sid);
            continue;
        }
        on[at]++;
        s[n] = (sess_t){.sid = sid, .at = at, .val = 1000 + k};
        snprintf(code, sizeof(code), "x = %d\nopen('x.txt', 'w').write(str(x))", s[n].val);
        json_object_put(sggw_execute(S.gw, tok, sid, code, 0));
        n++;
    }
    SG_CHECK(on[0] >= 2 && on[1] >= 2, NULL, "placement put %zu and %zu sessions on the two engines", on[0], on[1]);
    return n;
}

/* The session's variable and file, through the gateway. */
static void expect_state(const char *tok, const sess_t *s)
{
    char want[64];
    snprintf(want, sizeof(want), "%d %d\n", s->val, s->val);
    json_object *o = sggw_execute(S.gw, tok, s->sid, "print(x, open('x.txt').read())", 0);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), want) == 0, o, "session %s on proxy %d lost its state", s->sid, s->at);
    SG_CHECK(strcmp(SG_STR(o, "state"), "kept") == 0, o, "session %s: the interpreter was not kept", s->sid);
    json_object_put(o);
}

SGGW_TEST(test_restart_keeps_state)
{
    const char *quotas[] = {"max_sessions=30", NULL};
    char *tok = sggw_new_tenant(S.dir, "hosts-keep", quotas);
    sess_t s[8];
    size_t n = make_sessions(tok, s, 8);
    for (size_t k = 0; k < n; k++)
        expect_state(tok, &s[k]);

    /* proxy 1 (the TLS engine's) dies under its live sessions, and its
     * supervisor starts it again */
    sggw_pair_kill9(&S.pp, 1);
    sggw_pair_restart(&S.pp, 1);
    SG_CHECK(S.pp.proxy[1] != NULL, NULL, "proxy 1 did not start again");

    char path[160];
    for (size_t k = 0; k < n; k++) {
        if (s[k].at != 1)
            continue;
        /* a call may meet the proxy still adopting (502 while the gateway's
         * connection is refused): the session itself is never lost */
        double until = sgtest_now() + BACK_S;
        snprintf(path, sizeof(path), "/sessions/%s/execute", s[k].sid);
        for (;;) {
            sgtest_reply_t r;
            sggw_call(S.gw, tok, "POST", path, "{\"code\":\"print(x)\"}", &r);
            SG_CHECK(r.status != 410 && r.status != 404, NULL, "session %s was lost across the restart: %ld %s",
                     s[k].sid, r.status, r.body);
            long status = r.status;
            sgtest_reply_free(&r);
            if (status == 200)
                break;
            SG_CHECK(status == 502 && sgtest_now() < until, NULL, "session %s answers %ld after the restart", s[k].sid,
                     status);
            usleep(200000);
        }
    }
    for (size_t k = 0; k < n; k++) {
        expect_state(tok, &s[k]);
        SG_CHECK(sggw_pair_where(&S.pp, s[k].sid) == s[k].at, NULL, "session %s is no longer on proxy %d", s[k].sid,
                 s[k].at);
    }
    for (size_t k = 0; k < n; k++) {
        sggw_delete_session(S.gw, tok, s[k].sid);
        free(s[k].sid);
    }
    free(tok);
}

SGGW_TEST(test_lost_then_swept)
{
    const char *quotas[] = {"max_sessions=30", NULL};
    char *tok = sggw_new_tenant(S.dir, "hosts-lost", quotas);
    sess_t s[8];
    size_t n = make_sessions(tok, s, 8);
    char path[160];

    sggw_pair_kill9(&S.pp, 1);
    double t0 = sgtest_now();
    for (size_t k = 0; k < n; k++) {
        if (s[k].at != 1)
            continue;
        snprintf(path, sizeof(path), "/sessions/%s/execute", s[k].sid);
        for (;;) {
            sgtest_reply_t r;
            sggw_call(S.gw, tok, "POST", path, "{\"code\":\"print(1)\"}", &r);
            long status = r.status;
            bool lost = status == 410 && strstr(r.body, "\"session_lost\"") != NULL;
            sgtest_reply_free(&r);
            if (lost)
                break;
            SG_CHECK(status == 502, NULL, "a session of the dead proxy answered %ld", status);
            SG_CHECK(sgtest_now() - t0 < CHECKS_S + GRACE_MS / 1000.0 + MARGIN_S, NULL,
                     "no session_lost %.1f s after the kill", sgtest_now() - t0);
            usleep(100000);
        }
        sggw_expect_db_closed(S.dir, s[k].sid, "session_lost");
    }
    for (size_t k = 0; k < n; k++)
        if (s[k].at == 0)
            expect_state(tok, &s[k]); /* the other engine's sessions go on */

    /* back (same id and state directory): it re-adopts the sandboxes of
     * sessions the ledger has closed; the gateway's sweep removes them */
    sggw_pair_restart(&S.pp, 1);
    SG_CHECK(S.pp.proxy[1] != NULL, NULL, "proxy 1 did not start again");
    for (size_t k = 0; k < n; k++) {
        if (s[k].at != 1)
            continue;
        double until = sgtest_now() + 30;
        while (sggw_pair_where(&S.pp, s[k].sid) == 1) {
            SG_CHECK(sgtest_now() < until, NULL, "the sandbox of closed session %s still runs on proxy 1 30 s later",
                     s[k].sid);
            usleep(200000);
        }
        char *cid = sgtest_docker_session_container(S.pp.proxy_id[1], s[k].sid);
        if (cid != NULL)
            SG_CHECK(sgtest_docker_wait_gone(cid, 15, NULL) == 0, NULL, "container %s of closed session %s stays", cid,
                     s[k].sid);
        free(cid);
    }
    for (size_t k = 0; k < n; k++) {
        if (s[k].at == 0)
            sggw_delete_session(S.gw, tok, s[k].sid);
        free(s[k].sid);
    }
    free(tok);
}

static int after_test(void **state)
{
    return sggw_after_test();
}

int main(void)
{
    return SG_RUN_TESTS("gateway_hosts", group_setup, group_teardown, NULL, after_test, test_restart_keeps_state,
                        test_lost_then_swept);
}
