/*
 * test_sec_sessions.c — attacks on a session's life and on its queue,
 * through the public API with an ordinary tenant token:
 *
 *  - a file path that spells an error code (no_such_session) must not
 *    close the session's records while its container runs: errors cross
 *    the tiers as typed codes (X-Sandgate-Error), never as text;
 *  - every way the gateway closes a session (idle, lifetime, DELETE, the
 *    admin's force-close, a proxy that lost it) removes the container
 *    before the tenant's slot is freed, and a close the proxy cannot
 *    confirm (it does not answer) is retried, the slot kept meanwhile;
 *  - one session's queue is bounded (16 waiting; past it 429
 *    session_busy), requests whose client hung up never run and free
 *    their place, and the gateway cancels its call to the proxy when its
 *    own client hangs up — a run that had started is still billed.
 *
 * Real components: a private redis-server, sandgate-gateway on it, a
 * sandgate-proxy (small warm pool) on the Docker engine.
 */
#include "sgsec.h"
#include "sgrun.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REMOVAL_S 20.0
#define QUEUE 16 /* SANDGATE_SESSION_QUEUE's default */

static sggw_stack_t stack;
static bool proxy_stopped; /* SIGSTOPped by a test: after_test resumes it */

static const char *data_dir(void)
{
    return sggw_gateway_data_dir(stack.gw);
}

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

/* A tenant whose rate and daily quotas never get in the way. */
static char *new_tenant(const char *name, const char *extra1, const char *extra2)
{
    const char *q[] = {
        "rate_per_min=100000", "burst=10000", "execs_per_day=100000", "max_concurrent_execs=64", extra1, extra2, NULL};
    return sggw_new_tenant(data_dir(), name, q);
}

static char *container_of(const char *sid)
{
    char *cid = sgtest_docker_session_container(stack.proxy_id, sid);
    SG_CHECK(cid != NULL, NULL, "no container labelled with session %s", sid);
    return cid;
}

static void expect_container_gone(const char *cid, const char *sid, const char *how)
{
    SG_CHECK(sgtest_docker_wait_gone(cid, REMOVAL_S, NULL) == 0, NULL,
             "%s: the container %.12s of session %s still exists %.0f s later", how, cid, sid, REMOVAL_S);
}

static bool db_open(const char *sid)
{
    const char *params[] = {sid, NULL};
    char err[256];
    char *row = sggw_db_row(data_dir(), "SELECT coalesce(closed_at, 0) FROM sessions WHERE id = ?1", params, err);
    bool open = row != NULL && strcmp(row, "0") == 0;
    free(row);
    return open;
}

/* POST /sessions: the status, and the id (malloc'd) on 200. */
static long try_create(const char *tok, char **sid)
{
    sgtest_reply_t r;
    *sid = NULL;
    sggw_call(stack.gw, tok, "POST", "/sessions", "{\"lang\":\"python\"}", &r);
    long st = r.status;
    if (st == 200) {
        json_object *o = SG_JSON(&r);
        *sid = strdup(SG_STR(o, "session_id"));
        json_object_put(o);
    } else {
        json_object_put(SG_EXPECT_ERROR(&r, st, NULL));
    }
    sgtest_reply_free(&r);
    return st;
}

/* A session closed on record: its container gone (how), its row closed
 * with `reason`; frees cid and sid. */
static void expect_closed(char *cid, char *sid, const char *how, const char *reason)
{
    expect_container_gone(cid, sid, how);
    sggw_expect_db_closed(data_dir(), sid, reason);
    free(cid);
    free(sid);
}

/* The tenant's slot is free again (why: what it means when not): a new
 * session is created, then deleted. */
static void expect_slot_free(const char *tok, const char *why)
{
    char *other = NULL;
    SG_CHECK(try_create(tok, &other) == 200, NULL, "%s", why);
    sggw_delete_session(stack.gw, tok, other);
    free(other);
}

/* The service and a fresh session work: a new session runs code, and goes. */
static void expect_service_works(const char *tok)
{
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    json_object *res = sggw_execute(stack.gw, tok, sid, "print(6 * 7)", 10);
    SG_CHECK(strcmp(SG_STR(res, "stdout"), "42\n") == 0, res, "a fresh session must run code");
    json_object_put(res);
    char *cid = container_of(sid);
    sggw_delete_session(stack.gw, tok, sid);
    expect_container_gone(cid, sid, "DELETE");
    free(cid);
    free(sid);
}

/* A number of the proxy's view of a session (GET /sessions/{id} on the
 * proxy): "waiting" (requests admitted, not started) or "executions"
 * (finished ones). */
static long proxy_field(const char *sid, const char *field)
{
    char path[128];
    sgtest_reply_t r;
    pathf(path, sizeof(path), "/sessions/%s", sid);
    sgtest_call(stack.proxy, "GET", path, NULL, &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    long n = (long)SG_INT(o, field);
    json_object_put(o);
    return n;
}

static long proxy_waiting(const char *sid)
{
    return proxy_field(sid, "waiting");
}

/* Polls until the proxy says `want` requests wait on sid; fails after timeout_s. */
static void wait_waiting(const char *sid, long want, double timeout_s)
{
    double deadline = sgtest_now() + timeout_s;
    long n;
    while ((n = proxy_waiting(sid)) != want) {
        SG_CHECK(sgtest_now() < deadline, NULL, "session %s: %ld requests wait, expected %ld", sid, n, want);
        usleep(20000);
    }
}

/* Polls (the container's process list) until a process whose command line
 * holds `needle` runs in it: the session's agent has started that run. */
static void wait_running(const char *cid, const char *needle, double timeout_s)
{
    double deadline = sgtest_now() + timeout_s;
    while (!sgtest_docker_container_runs(cid, needle)) {
        SG_CHECK(sgtest_now() < deadline, NULL, "no process \"%s\" runs in %.12s after %.0f s", needle, cid, timeout_s);
        usleep(50000);
    }
}

/* The lines of /sandbox/<name> (through the gateway), "" when it is empty. */
static char *read_file(const char *tok, const char *sid, const char *name)
{
    char path[256];
    sgtest_reply_t r;
    pathf(path, sizeof(path), "/sessions/%s/files?path=%s", sid, name);
    sggw_call(stack.gw, tok, "GET", path, NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    char *s = strdup(r.body);
    sgtest_reply_free(&r);
    return s;
}

static int count_lines(const char *s, const char *line)
{
    int n = 0;
    size_t len = strlen(line);
    for (const char *p = s; (p = strstr(p, line)) != NULL; p += len)
        if ((p == s || p[-1] == '\n') && p[len] == '\n')
            n++;
    return n;
}

static int64_t usage_executions(const char *tenant)
{
    json_object *o = SGSEC_ADMIN_GET(stack.gw, "/admin/usage?tenant=%s", tenant);
    int64_t n = SG_INT(o, "executions");
    json_object_put(o);
    return n;
}

/* ------------------------------------------------------------------------
 * Fixtures
 * ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
    *state = &stack;
    /* calls to the proxy give up after 5 s: the test of a proxy that does
     * not answer waits that long */
    const char *penv[] = {"SANDGATE_POOL_SIZE=2", NULL};
    const char *genv[] = {"SANDGATE_CALL_TIMEOUT_MS=5000", NULL};
    sggw_stack_opts_t o = {.redis = true, .proxy_env = penv, .gateway_env = genv};
    /* (with calls cut at 5 s, the first create must not be a cold start
     * competing with the whole pool's: sggw_stack_start waits for it) */
    return sggw_stack_start(&stack, &o);
}

static int after_test(void **state)
{
    if (proxy_stopped) {
        kill(sgtest_proxy_pid(stack.proxy), SIGCONT);
        proxy_stopped = false;
    }
    return sggw_stack_after_test(&stack);
}

/* The end of a test on session sid (container cid) of tenant tok: DELETE
 * removes the container, a fresh session works; frees the three. */
static void close_and_check(char *tok, char *sid, char *cid)
{
    sggw_delete_session(stack.gw, tok, sid);
    expect_container_gone(cid, sid, "DELETE");
    expect_service_works(tok);
    free(cid);
    free(sid);
    free(tok);
}

/* ------------------------------------------------------------------------
 * Error text is not an error type
 * ------------------------------------------------------------------------ */

/* GET /sessions/{id}/files?path=no_such_session: the proxy's "no such file"
 * echoes the path. It used to close the session's records (the gateway
 * searched the 404's body for "no_such_session") and free the tenant's
 * slot while the container ran on, unbilled and unreaped; repeated, that
 * filled the proxy. Now: 404 no_such_file, and nothing else happens. */
SGGW_TEST(test_error_text_does_not_close_the_session)
{
    char *tok = new_tenant("errtext", "max_sessions=2", NULL);
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    char *cid = container_of(sid);
    /* paths spelling the code, alone, in JSON, as the body's whole error */
    const char *paths[] = {"no_such_session", "x\",\"code\":\"no_such_session",
                           "{\"detail\":\"x\",\"code\":\"no_such_session\"}",
                           "/sandbox/no_such_session/no_such_session"};
    char path[512];

    for (int round = 0; round < 50; round++) {
        const char *p = paths[round % 4];
        char *enc = sgtest_urlencode(p);
        sgtest_reply_t r;
        pathf(path, sizeof(path), "/sessions/%s/files?path=%s", sid, enc);
        free(enc);
        sggw_call(stack.gw, tok, "GET", path, NULL, &r);
        json_object_put(SG_EXPECT_ERROR(&r, 404, "no_such_file"));
        sgtest_reply_free(&r);
        /* and a fresh session each round: the tenant's cap is 2, one is used */
        if (round % 10 == 9) {
            char *extra = NULL;
            long st = try_create(tok, &extra);
            SG_CHECK(st == 200, NULL, "round %d: the second slot must be free (got %ld)", round, st);
            char *extra2 = NULL;
            st = try_create(tok, &extra2);
            SG_CHECK(st == 429, NULL, "round %d: a third session must be refused (got %ld): the attack freed a slot",
                     round, st);
            free(extra2);
            sggw_delete_session(stack.gw, tok, extra);
            free(extra);
        }
    }
    /* the session is untouched: listed, live, open, its container running and working */
    SG_CHECK(sggw_lists(stack.gw, tok, sid), NULL, "GET /sessions no longer lists %s", sid);
    SG_CHECK(sggw_admin_lists(stack.gw, "errtext", sid), NULL, "the live state lost %s", sid);
    SG_CHECK(db_open(sid), NULL, "the ledger closed %s", sid);
    SG_CHECK(sgtest_docker_exists(cid) == 1, NULL, "the container of %s is gone", sid);
    json_object *res = sggw_execute(stack.gw, tok, sid, "print('still here')", 10);
    SG_CHECK(strcmp(SG_STR(res, "stdout"), "still here\n") == 0, res, "the session must still run code");
    json_object_put(res);
    /* the proxy has exactly the sessions the gateway counts: nothing unbilled */
    sgtest_reply_t r;
    sgtest_call(stack.proxy, "GET", "/sessions", NULL, &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    json_object *a = SG_ARR(o, "sessions");
    SG_CHECK(json_object_array_length(a) == 1 && sgtest_json_array_has_string(a, sid), o,
             "the proxy must hold this session alone");
    json_object_put(o);

    close_and_check(tok, sid, cid);
}

/* ------------------------------------------------------------------------
 * Every close removes the container before the slot is freed
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_every_close_removes_the_container)
{
    char *tok_idle = new_tenant("close-idle", "idle_timeout=2", "max_sessions=1");
    char *tok_life = new_tenant("close-life", "max_lifetime=3", "max_sessions=1");
    char *tok = new_tenant("close-other", "max_sessions=1", NULL);
    char *sid;

    /* the idle reaper */
    sid = sggw_create_session(stack.gw, tok_idle, NULL, NULL);
    char *cid = container_of(sid);
    expect_closed(cid, sid, "idle", "idle");
    expect_slot_free(tok_idle, "the idle session's slot must be free once it is gone");

    /* the lifetime, though used */
    sid = sggw_create_session(stack.gw, tok_life, NULL, NULL);
    cid = container_of(sid);
    json_object_put(sggw_execute(stack.gw, tok_life, sid, "print(1)", 10));
    expect_closed(cid, sid, "lifetime", "lifetime");
    expect_slot_free(tok_life, "the expired session's slot must be free once it is gone");

    /* DELETE */
    sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    cid = container_of(sid);
    sggw_delete_session(stack.gw, tok, sid);
    expect_closed(cid, sid, "DELETE", "deleted");

    /* the admin's force-close */
    sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    cid = container_of(sid);
    char path[256];
    sgtest_reply_t r;
    pathf(path, sizeof(path), "/admin/sessions/%s", sid);
    sggw_admin_call(stack.gw, "DELETE", path, NULL, &r);
    json_object_put(SG_EXPECT_JSON(&r, 200));
    sgtest_reply_free(&r);
    expect_closed(cid, sid, "admin force-close", "admin");

    /* a proxy that lost the session (removed behind the gateway's back):
     * the typed 404 no_such_session closes the records, the slot comes back */
    sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    cid = container_of(sid);
    pathf(path, sizeof(path), "/sessions/%s", sid);
    sgtest_call(stack.proxy, "DELETE", path, NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    expect_container_gone(cid, sid, "removed on the proxy");
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    sggw_call(stack.gw, tok, "POST", path, "{\"code\":\"print(1)\"}", &r);
    json_object_put(SG_EXPECT_ERROR(&r, 404, "no_such_session"));
    sgtest_reply_free(&r);
    sggw_expect_db_closed(data_dir(), sid, "proxy_lost");
    expect_slot_free(tok, "the lost session's slot must come back");
    free(cid);
    free(sid);

    expect_service_works(tok);
    free(tok_idle);
    free(tok_life);
    free(tok);
}

/* The proxy does not answer when a session is closed (SIGSTOP): the close
 * is not on record, the session stays live and counted (its container
 * runs); once the proxy answers again, the retried close removes the
 * container, then frees the slot. */
SGGW_TEST(test_close_is_retried_until_the_proxy_confirms)
{
    char *tok = new_tenant("close-retry", "max_sessions=1", NULL);
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL), *other = NULL;
    char *cid = container_of(sid);
    char path[256];
    sgtest_reply_t r;

    SG_CHECK(kill(sgtest_proxy_pid(stack.proxy), SIGSTOP) == 0, NULL, "cannot stop the proxy");
    proxy_stopped = true;
    pathf(path, sizeof(path), "/admin/sessions/%s", sid);
    sggw_admin_call(stack.gw, "DELETE", path, NULL, &r);
    json_object_put(SG_EXPECT_ERROR(&r, 502, "proxy_unavailable"));
    sgtest_reply_free(&r);
    /* nothing let go: live, open, counted, and the container is there */
    SG_CHECK(sggw_admin_lists(stack.gw, "close-retry", sid), NULL, "the live state let %s go unconfirmed", sid);
    SG_CHECK(db_open(sid), NULL, "the ledger closed %s unconfirmed", sid);
    SG_CHECK(try_create(tok, &other) == 429, NULL, "the tenant's only slot must still be taken");
    SG_CHECK(sgtest_docker_exists(cid) == 1, NULL, "the container went without the proxy?");

    SG_CHECK(kill(sgtest_proxy_pid(stack.proxy), SIGCONT) == 0, NULL, "cannot resume the proxy");
    proxy_stopped = false;
    expect_container_gone(cid, sid, "a retried close");
    sggw_expect_db_closed(data_dir(), sid, "admin");
    double deadline = sgtest_now() + 10;
    while (sggw_admin_lists(stack.gw, "close-retry", sid)) {
        SG_CHECK(sgtest_now() < deadline, NULL, "%s is still live after its container went", sid);
        usleep(50000);
    }
    expect_service_works(tok);
    free(cid);
    free(sid);
    free(tok);
}

/* ------------------------------------------------------------------------
 * One session's queue
 * ------------------------------------------------------------------------ */

typedef struct {
    sggw_par_req_t req;
    char path[128];
    char *body;
} call_t;

static void call_init(call_t *c, const char *tok, const char *sid, const char *code, long timeout_s)
{
    json_object *b = json_object_new_object();
    json_object_object_add(b, "code", json_object_new_string(code));
    json_object_object_add(b, "timeout", json_object_new_int(30));
    c->body = strdup(json_object_to_json_string(b));
    json_object_put(b);
    snprintf(c->path, sizeof(c->path), "%s/sessions/%s/execute", sggw_gateway_url(stack.gw), sid);
    c->req.method = "POST";
    c->req.url = c->path;
    c->req.token = tok;
    c->req.body = c->body;
    c->req.body_len = strlen(c->body);
    c->req.content_type = "application/json";
    c->req.timeout_s = timeout_s;
}

#define LONG_RUN "import subprocess; subprocess.run(['sleep', '6'])"

/* Starts LONG_RUN in session sid (container cid) on a thread of its own
 * and waits until it runs; sggw_batch_join() the result. */
static sggw_batch_t *start_long_run(call_t *lng, const char *tok, const char *sid, const char *cid)
{
    memset(lng, 0, sizeof(*lng));
    call_init(lng, tok, sid, LONG_RUN, 60);
    sggw_batch_t *lb = sggw_batch_start(&lng->req, 1);
    SG_CHECK(lb != NULL, NULL, "cannot start a thread");
    wait_running(cid, "sleep 6", 15);
    return lb;
}

/* A session of a tenant of its own (its container cid) with LONG_RUN
 * running in it on a thread of its own (lb: sggw_batch_join() it, or
 * long_run_ended()); the proxy's count of the session's executions before
 * it. */
typedef struct {
    char *tok, *sid, *cid;
    call_t lng;
    sggw_batch_t *lb;
    long done_before;
} busy_t;

/* The tenant `name`, its session (with an empty /sandbox/log when
 * with_log), *billed (if not NULL) its executions in the ledger, then the
 * long run. */
static void busy_start(busy_t *b, const char *name, bool with_log, int64_t *billed)
{
    memset(b, 0, sizeof(*b));
    b->tok = new_tenant(name, NULL, NULL);
    b->sid = sggw_create_session(stack.gw, b->tok, NULL, NULL);
    b->cid = container_of(b->sid);
    if (with_log)
        json_object_put(sggw_execute(stack.gw, b->tok, b->sid, "open('/sandbox/log', 'w').close()", 10));
    if (billed != NULL)
        *billed = usage_executions(name);
    b->lb = start_long_run(&b->lng, b->tok, b->sid, b->cid);
    b->done_before = proxy_field(b->sid, "executions");
}

/* The long run ended with a 200. */
static void long_run_ended(busy_t *b)
{
    sggw_batch_join(b->lb);
    SG_ASSERT_STATUS(&b->lng.req.reply, 200);
    sgtest_reply_free(&b->lng.req.reply);
    free(b->lng.body);
}

/* 40 requests at once on a session whose one run takes 6 s: 16 wait, the
 * rest are refused at once with 429 session_busy and Retry-After; the
 * waiting ones run afterwards, and the service still works. */
SGGW_TEST(test_session_queue_is_bounded)
{
    enum { N = 40 };
    static busy_t sess;
    busy_start(&sess, "queue", false, NULL);
    static call_t calls[N];
    sggw_par_req_t reqs[N];

    for (int i = 0; i < N; i++) {
        memset(&calls[i], 0, sizeof(calls[i]));
        call_init(&calls[i], sess.tok, sess.sid, "print(1)", 60);
        reqs[i] = calls[i].req;
    }
    sggw_batch_t *b = sggw_batch_start(reqs, N);
    SG_CHECK(b != NULL, NULL, "cannot start the threads");
    sggw_batch_join(b);
    sggw_batch_join(sess.lb);
    SG_ASSERT_STATUS(&sess.lng.req.reply, 200);

    int ok = 0, busy = 0;
    for (int i = 0; i < N; i++) {
        sgtest_reply_t *r = &reqs[i].reply;
        SG_CHECK(reqs[i].rc == 0, NULL, "request %d failed: %s", i, r->error);
        if (r->status == 200) {
            ok++;
        } else {
            json_object_put(SG_EXPECT_ERROR(r, 429, "session_busy"));
            char *ra = sgtest_reply_header(r, "Retry-After");
            SG_CHECK(ra != NULL && atoi(ra) >= 1, NULL, "a 429 session_busy needs Retry-After");
            free(ra);
            /* at once: not after the run they would have waited for */
            SG_CHECK(reqs[i].finished < sess.lng.req.finished, NULL,
                     "a refusal came %.1f s after the running one ended", reqs[i].finished - sess.lng.req.finished);
            busy++;
        }
    }
    SG_CHECK(ok <= QUEUE, NULL, "%d requests waited and ran; at most %d may wait", ok, QUEUE);
    SG_CHECK(ok + busy == N && busy >= N - QUEUE, NULL, "%d ran, %d refused", ok, busy);
    for (int i = 0; i < N; i++) {
        sgtest_reply_free(&reqs[i].reply);
        free(calls[i].body);
    }
    sgtest_reply_free(&sess.lng.req.reply);
    free(sess.lng.body);
    SG_CHECK(proxy_waiting(sess.sid) == 0, NULL, "nothing waits any more");

    json_object *res = sggw_execute(stack.gw, sess.tok, sess.sid, "print('after')", 10);
    SG_CHECK(strcmp(SG_STR(res, "stdout"), "after\n") == 0, res, "the session must work afterwards");
    json_object_put(res);
    close_and_check(sess.tok, sess.sid, sess.cid);
}

/* A direct client of the proxy queues 16 requests behind a long run and
 * hangs up: they never run (each would have added a line to a file), the
 * proxy frees their places at once (16 others are admitted while the long
 * run still runs), and the requests that stayed run. */
SGGW_TEST(test_abandoned_requests_never_run)
{
    static busy_t sess;
    busy_start(&sess, "abandon", true, NULL);
    char url[256], body[256];
    int fds[QUEUE], kept[2];

    pathf(url, sizeof(url), "%s/sessions/%s/execute", sgtest_proxy_url(stack.proxy), sess.sid);
    pathf(body, sizeof(body), "{\"code\": \"open('/sandbox/log', 'a').write('abandoned\\\\n')\"}");
    for (int i = 0; i < QUEUE; i++) {
        fds[i] = sggw_http_open("POST", url, body, NULL);
        SG_CHECK(fds[i] >= 0, NULL, "cannot send request %d", i);
    }
    wait_waiting(sess.sid, QUEUE, 5);
    /* full: one more is refused */
    sgtest_reply_t r;
    sgtest_call(stack.proxy, "POST", url + strlen(sgtest_proxy_url(stack.proxy)), body, &r);
    json_object_put(SG_EXPECT_ERROR(&r, 429, "session_busy"));
    sgtest_reply_free(&r);
    for (int i = 0; i < QUEUE; i++)
        close(fds[i]);
    /* freed while the long run still runs */
    wait_waiting(sess.sid, 0, 5);
    SG_CHECK(proxy_field(sess.sid, "executions") == sess.done_before, NULL,
             "the hung-up requests were freed only after the long run ended");

    pathf(body, sizeof(body), "{\"code\": \"open('/sandbox/log', 'a').write('kept\\\\n')\"}");
    for (int i = 0; i < 2; i++) {
        kept[i] = sggw_http_open("POST", url, body, NULL);
        SG_CHECK(kept[i] >= 0, NULL, "cannot send kept request %d", i);
    }
    long_run_ended(&sess);
    for (int i = 0; i < 2; i++) {
        SG_CHECK(sggw_http_read_reply(kept[i], 30, &r) == 0, NULL, "kept request %d: %s", i, r.error);
        SG_ASSERT_STATUS(&r, 200);
        sgtest_reply_free(&r);
    }
    char *log = read_file(sess.tok, sess.sid, "log");
    SG_CHECK(count_lines(log, "abandoned") == 0, NULL, "%d abandoned requests ran:\n%s", count_lines(log, "abandoned"),
             log);
    SG_CHECK(count_lines(log, "kept") == 2, NULL, "the 2 kept requests must have run:\n%s", log);
    free(log);

    close_and_check(sess.tok, sess.sid, sess.cid);
}

/* A client of the gateway hangs up while its execute waits behind a long
 * run: the gateway cancels its call, and the proxy drops the waiting op
 * (it never runs, it is not billed). A client that hangs up once its run
 * has started: the run goes on and is billed. */
SGGW_TEST(test_gateway_cancels_for_a_client_that_left)
{
    static busy_t sess;
    int64_t billed;
    busy_start(&sess, "cancel", true, &billed);
    char url[256], auth[256];
    sgtest_reply_t r;

    pathf(url, sizeof(url), "%s/sessions/%s/execute", sggw_gateway_url(stack.gw), sess.sid);
    pathf(auth, sizeof(auth), "Authorization: Bearer %s", sess.tok);
    const char *headers[] = {auth, NULL};
    int fd = sggw_http_open("POST", url, "{\"code\": \"open('/sandbox/log', 'a').write('abandoned\\\\n')\"}", headers);
    SG_CHECK(fd >= 0, NULL, "cannot send the request");
    wait_waiting(sess.sid, 1, 5); /* forwarded: it waits at the proxy */
    close(fd);
    wait_waiting(sess.sid, 0, 5); /* the gateway cancelled it */
    SG_CHECK(proxy_field(sess.sid, "executions") == sess.done_before, NULL,
             "the cancel came only after the long run ended");

    long_run_ended(&sess);
    char *log = read_file(sess.tok, sess.sid, "log");
    SG_CHECK(count_lines(log, "abandoned") == 0, NULL, "the cancelled request ran:\n%s", log);
    free(log);
    /* billed: the long run, not the cancelled one */
    double deadline = sgtest_now() + 5;
    while (usage_executions("cancel") < billed + 1) {
        SG_CHECK(sgtest_now() < deadline, NULL, "the long run is not in the ledger");
        usleep(50000);
    }
    SG_CHECK(usage_executions("cancel") == billed + 1, NULL, "the cancelled request was billed");

    /* a run that started, then its client left: it ends and is billed */
    fd = sggw_http_open("POST", url, "{\"code\": \"import subprocess; subprocess.run(['sleep', '2'])\"}", headers);
    SG_CHECK(fd >= 0, NULL, "cannot send the request");
    wait_running(sess.cid, "sleep 2", 10);
    close(fd);
    deadline = sgtest_now() + 15;
    while (usage_executions("cancel") < billed + 2) {
        SG_CHECK(sgtest_now() < deadline, NULL, "a started run whose client left is not billed");
        usleep(100000);
    }

    pathf(url, sizeof(url), "/sessions/%s", sess.sid);
    sgtest_call(stack.proxy, "GET", url, NULL, &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    SG_CHECK(SG_INT(o, "waiting") == 0, o, "nothing waits");
    json_object_put(o);
    close_and_check(sess.tok, sess.sid, sess.cid);
}

int main(void)
{
    return SG_RUN_TESTS("sec_sessions", group_setup, sggw_stack_group_teardown, NULL, after_test,
                        test_error_text_does_not_close_the_session, test_every_close_removes_the_container,
                        test_close_is_retried_until_the_proxy_confirms, test_session_queue_is_bounded,
                        test_abandoned_requests_never_run, test_gateway_cancels_for_a_client_that_left);
}
