/*
 * test_gateway_quota.c — the gateway's limits, exactly, with Redis holding
 * the shared state (as in production): the request rate under parallel
 * load, the concurrent-session cap, daily execution and execution-second
 * quotas, and the usage ledger matching what the replies said.
 *
 * Real components: a private redis-server, a sandgate-gateway on it, its
 * SQLite file, a sandgate-proxy (small warm pool) on the Docker engine.
 * Every tenant is new, so no test sees another's counters.
 */
#include "sggw.h"
#include "sgrun.h"
#include "usage_hdr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* (no libm: the sanitizer build links without it) */
static double absd(double d)
{
    return d < 0 ? -d : d;
}

static sggw_stack_t stack;

static const char *data_dir(void)
{
    return sggw_gateway_data_dir(stack.gw);
}

/* A 429 of a quota or rate limit: JSON quota_exceeded and Retry-After >= 1. */
static long expect_429(const sgtest_reply_t *r)
{
    json_object *o = SG_EXPECT_ERROR(r, 429, "quota_exceeded");
    json_object_put(o);
    return sggw_int_header(r, "Retry-After", 1);
}

/* ------------------------------------------------------------------------
 * Fixtures
 * ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
    *state = &stack;
    return sggw_stack_start_pool(&stack, true, 2);
}

/* ------------------------------------------------------------------------
 * 6. The request rate, under parallel load
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_rate_limit_exact)
{
    const char *q[] = {"rate_per_min=60", "burst=5", NULL};
    char *tok = sggw_new_tenant(data_dir(), "rate-exact", q);
    enum { N = 20 };
    sggw_par_req_t reqs[N];
    char url[256];

    pathf(url, sizeof(url), "%s/sessions", sggw_gateway_url(stack.gw));
    sggw_parallel_get(reqs, N, url, tok);

    int ok = 0, limited = 0;
    sgtest_span_t span = sgtest_batch_span(reqs, N);
    long max_retry = 0;
    for (int i = 0; i < N; i++) {
        sgtest_reply_t *r = &reqs[i].reply;
        if (r->status == 200) {
            ok++;
        } else if (r->status == 429) {
            limited++;
            long ra = expect_429(r);
            if (ra > max_retry)
                max_retry = ra;
        } else {
            SG_ASSERT_STATUS(r, 200);
        }
        /* every answer says where the tenant stands */
        long limit = sggw_int_header(r, "X-RateLimit-Limit", 0);
        long remaining = sggw_int_header(r, "X-RateLimit-Remaining", 0);
        sggw_int_header(r, "X-RateLimit-Reset", 0);
        SG_CHECK(limit == 5, NULL, "X-RateLimit-Limit must be the burst, 5 (got %ld)", limit);
        SG_CHECK(remaining <= 5, NULL, "X-RateLimit-Remaining %ld is above the burst", remaining);
        if (r->status == 429)
            SG_CHECK(remaining == 0, NULL, "a 429 must say X-RateLimit-Remaining: 0 (got %ld)", remaining);
    }
    SG_CHECK(span.last_end - span.first_start < 1.0, NULL,
             "the batch took %.2f s: at 60/min a token came back meanwhile", span.last_end - span.first_start);
    SG_CHECK(ok == 5 && limited == 15, NULL, "burst 5: expected exactly 5 x 200 and 15 x 429, got %d and %d", ok,
             limited);
    SG_CHECK(max_retry <= 2, NULL, "at 60/min the next request is allowed within 1 s, yet Retry-After says %ld",
             max_retry);
    for (int i = 0; i < N; i++)
        sgtest_reply_free(&reqs[i].reply);

    /* one token comes back each second */
    sggw_wait_allowed(stack.gw, tok, 3, 429); /* at 60/min */
    free(tok);
}

/* ------------------------------------------------------------------------
 * 6. The concurrent-session cap
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_session_cap_exact)
{
    const char *q[] = {"max_sessions=3", NULL};
    char *tok = sggw_new_tenant(data_dir(), "cap-exact", q);
    enum { N = 8 };
    sggw_par_req_t reqs[N];
    char url[256];
    const char body[] = "{\"lang\":\"python\"}";
    char *sids[N];
    int made = 0, refused = 0;

    pathf(url, sizeof(url), "%s/sessions", sggw_gateway_url(stack.gw));
    sggw_par_posts(reqs, N, url, tok, body, 60);
    SG_CHECK(sggw_parallel(reqs, N) == 0, NULL, "cannot start threads");
    for (int i = 0; i < N; i++) {
        sgtest_reply_t *r = &reqs[i].reply;
        if (r->status == 200) {
            json_object *o = SG_EXPECT_JSON(r, 200);
            sids[made++] = strdup(SG_STR(o, "session_id"));
            json_object_put(o);
        } else if (r->status == 429) {
            expect_429(r);
            refused++;
        } else {
            SG_ASSERT_STATUS(r, 200);
        }
        sgtest_reply_free(r);
    }
    SG_CHECK(made == 3 && refused == 5, NULL, "max_sessions 3: expected exactly 3 x 200 and 5 x 429, got %d and %d",
             made, refused);
    json_object *l = sggw_list_sessions(stack.gw, tok);
    SG_CHECK(json_object_array_length(SG_ARR(l, "sessions")) == 3, l, "GET /sessions must list the 3 sessions");
    json_object_put(l);

    /* at the cap: refused; one deleted: a new one fits, and then no more */
    sgtest_reply_t r;
    sggw_call(stack.gw, tok, "POST", "/sessions", body, &r);
    expect_429(&r);
    sgtest_reply_free(&r);
    sggw_delete_session(stack.gw, tok, sids[0]);
    free(sids[0]);
    sids[0] = sggw_create_session(stack.gw, tok, body, NULL);
    sggw_call(stack.gw, tok, "POST", "/sessions", body, &r);
    expect_429(&r);
    sgtest_reply_free(&r);

    for (int i = 0; i < made; i++) {
        sggw_delete_session(stack.gw, tok, sids[i]);
        free(sids[i]);
    }
    free(tok);
}

/* ------------------------------------------------------------------------
 * 7. Daily quotas
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_daily_execs_quota)
{
    const char *q[] = {"execs_per_day=3", NULL};
    char *tok = sggw_new_tenant(data_dir(), "execs-quota", q);
    char *other = sggw_new_tenant(data_dir(), "execs-quota-other", q);
    char path[256];
    sgtest_reply_t r;

    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    json_object *o = sggw_execute(stack.gw, tok, sid, "print(1)", 0);
    json_object_put(o);
    pathf(path, sizeof(path), "/sessions/%s/commands", sid);
    o = sggw_post_result(stack.gw, tok, path, json_tokener_parse("{\"command\":\"echo two\"}"));
    json_object_put(o);
    o = sggw_post_result(stack.gw, tok, "/execute", json_tokener_parse("{\"code\":\"print(3)\",\"lang\":\"python\"}"));
    json_object_put(o);

    /* the 4th, of any kind: 429 until the end of the UTC day */
    time_t now = time(NULL);
    long to_midnight = 86400 - (long)(now % 86400);
    const char *kinds[][2] = {{"execute", "{\"code\":\"print(4)\"}"},
                              {"commands", "{\"command\":\"echo 4\"}"},
                              {NULL, "{\"code\":\"print(4)\",\"lang\":\"python\"}"}};
    for (size_t i = 0; i < 3; i++) {
        if (kinds[i][0] != NULL)
            pathf(path, sizeof(path), "/sessions/%s/%s", sid, kinds[i][0]);
        else
            pathf(path, sizeof(path), "/execute");
        sggw_call(stack.gw, tok, "POST", path, kinds[i][1], &r);
        if (r.status != 429)
            fprintf(stderr, "POST %s after 3 of execs_per_day=3:\n", path);
        long ra = expect_429(&r);
        SG_CHECK(ra <= to_midnight + 5 && ra >= to_midnight - 60, NULL,
                 "Retry-After %ld must point at the next UTC midnight (%ld s away)", ra, to_midnight);
        sgtest_reply_free(&r);
    }
    /* other requests and other tenants are not affected */
    json_object *l = sggw_list_sessions(stack.gw, tok);
    json_object_put(l);
    o = sggw_post_result(stack.gw, other, "/execute",
                         json_tokener_parse("{\"code\":\"print(1)\",\"lang\":\"python\"}"));
    json_object_put(o);

    /* the ledger holds exactly the 3 that ran */
    sggw_expect_ledger_execs(data_dir(), "execs-quota", 3, 5);
    sggw_session_done(stack.gw, tok, sid);
    free(other);
}

SGGW_TEST(test_daily_seconds_quota)
{
    const char *q[] = {"exec_seconds_per_day=1", NULL};
    char *tok = sggw_new_tenant(data_dir(), "seconds-quota", q);
    sgtest_reply_t r;

    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    json_object *o = sggw_execute(stack.gw, tok, sid, "import time\ntime.sleep(1.2)\nprint('slept')", 10);
    SG_CHECK(SG_DBL(o, "execution_time") >= 1.2 && SG_DBL(o, "wall_time") >= 1.2, o, "the run must have taken 1.2 s");
    json_object_put(o);
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    sggw_call(stack.gw, tok, "POST", path, "{\"code\":\"print(1)\"}", &r);
    if (r.status != 429)
        fprintf(stderr, "an execute after 1.2 of exec_seconds_per_day=1:\n");
    expect_429(&r);
    sgtest_reply_free(&r);
    sggw_call(stack.gw, tok, "POST", "/execute", "{\"code\":\"print(1)\",\"lang\":\"python\"}", &r);
    expect_429(&r);
    sgtest_reply_free(&r);
    sggw_session_done(stack.gw, tok, sid);
}

/* ------------------------------------------------------------------------
 * 9. The usage ledger matches the replies
 * ------------------------------------------------------------------------ */

/* sandgate_usage_from_body_total of the stack's gateway. */
static double usage_from_body(void)
{
    sgtest_reply_t r;
    sggw_call(stack.gw, NULL, "GET", "/metrics", NULL, &r);
    double v = r.status == 200 ? sggw_metric(r.body, "sandgate_usage_from_body_total", "") : -1;
    sgtest_reply_free(&r);
    SG_CHECK(v >= 0, NULL, "GET /metrics: no sandgate_usage_from_body_total");
    return v;
}

typedef struct {
    const char *kind; /* execute, command, ephemeral */
    const char *body;
    /* from the reply */
    int64_t exit_code;
    bool timed_out;
    double duration;
    size_t output_bytes;
} run_t;

SGGW_TEST(test_usage_matches_replies)
{
    char *sid, *tok = sggw_tenant_session(stack.gw, "usage-match", NULL, &sid);
    run_t runs[] = {
        {"execute", "{\"code\":\"print('hello')\"}"},
        {"execute", "{\"code\":\"import sys\\nprint('to stderr', file=sys.stderr)\\nsys.exit(2)\"}"},
        {"command", "{\"command\":\"echo cmd; exit 3\"}"},
        {"ephemeral", "{\"code\":\"print('eph')\",\"lang\":\"python\"}"},
        {"execute", "{\"code\":\"import time\\ntime.sleep(30)\",\"timeout\":1}"},
        {"command", "{\"command\":\"ls /sandbox\"}"},
        {"ephemeral", "{\"code\":\"raise ValueError('x')\",\"lang\":\"python\"}"},
    };
    size_t n = sizeof(runs) / sizeof(runs[0]);
    double sum = 0;
    size_t bytes = 0;
    int timeouts = 0;
    char path[256];
    double from_body0 = usage_from_body();

    for (size_t i = 0; i < n; i++) {
        if (strcmp(runs[i].kind, "ephemeral") == 0)
            pathf(path, sizeof(path), "/execute");
        else
            pathf(path, sizeof(path), "/sessions/%s/%s", sid,
                  strcmp(runs[i].kind, "command") == 0 ? "commands" : "execute");
        json_object *o = sggw_post_result(stack.gw, tok, path, json_tokener_parse(runs[i].body));
        runs[i].exit_code = SG_INT(o, "exit_code");
        runs[i].timed_out = SG_BOOL(o, "timed_out");
        runs[i].duration = SG_DBL(o, "wall_time"); /* billed: the proxy's measure, not the sandbox's */
        runs[i].output_bytes = strlen(SG_STR(o, "stdout")) + strlen(SG_STR(o, "stderr"));
        sum += runs[i].duration;
        bytes += runs[i].output_bytes;
        timeouts += runs[i].timed_out;
        json_object_put(o);
    }
    SG_CHECK(timeouts == 1 && runs[4].timed_out, NULL, "the 30 s sleep with timeout 1 must have timed out");
    /* every one recorded from the proxy's X-Sandgate-Usage, none by parsing its result */
    SG_CHECK(usage_from_body() == from_body0, NULL, "%.0f of the %zu runs were read from their result's JSON",
             usage_from_body() - from_body0, n);
    SG_CHECK(runs[1].exit_code == 2 && runs[2].exit_code == 3, NULL, "exit codes 2 and 3 expected");

    /* the admin API: totals and one row per execution, in order */
    char apath[256];
    pathf(apath, sizeof(apath), "/admin/usage?tenant=usage-match");
    json_object *u = NULL;
    double deadline = sgtest_now() + 5;
    for (;;) {
        sgtest_reply_t r;
        sggw_admin_call(stack.gw, "GET", apath, NULL, &r);
        u = SG_EXPECT_JSON(&r, 200);
        sgtest_reply_free(&r);
        if (SG_INT(u, "executions") == (int64_t)n)
            break;
        SG_CHECK(sgtest_now() < deadline, u, "GET /admin/usage must show %zu executions within 5 s", n);
        json_object_put(u);
        usleep(100000);
    }
    SG_CHECK(SG_INT(u, "timed_out") == 1, u, "timed_out total");
    SG_CHECK(absd(SG_DBL(u, "seconds") - sum) < 0.01, u, "seconds total must be the sum of wall_time, %.6f", sum);
    SG_CHECK(SG_INT(u, "output_bytes") == (int64_t)bytes, u, "output_bytes total must be %zu", bytes);
    json_object *rows = SG_ARR(u, "rows");
    SG_CHECK(json_object_array_length(rows) == n, u, "%zu rows expected", n);
    for (size_t i = 0; i < n; i++) {
        json_object *row = json_object_array_get_idx(rows, i);
        SG_CHECK(strcmp(SG_STR(row, "kind"), runs[i].kind) == 0, row, "row %zu: kind %s", i, runs[i].kind);
        SG_CHECK(strcmp(SG_STR(row, "lang"), "python") == 0, row, "row %zu: lang", i);
        SG_CHECK(SG_INT(row, "exit_code") == runs[i].exit_code, row, "row %zu: exit_code %lld", i,
                 (long long)runs[i].exit_code);
        SG_CHECK(SG_BOOL(row, "timed_out") == runs[i].timed_out, row, "row %zu: timed_out", i);
        SG_CHECK(absd(SG_DBL(row, "duration") - runs[i].duration) < 1e-5, row, "row %zu: duration %.6f", i,
                 runs[i].duration);
        SG_CHECK(SG_INT(row, "output_bytes") == (int64_t)runs[i].output_bytes, row, "row %zu: output_bytes %zu", i,
                 runs[i].output_bytes);
        json_object *sv = NULL;
        json_object_object_get_ex(row, "session_id", &sv);
        if (strcmp(runs[i].kind, "ephemeral") == 0)
            SG_CHECK(sv == NULL, row, "row %zu: an ephemeral run has no session", i);
        else
            SG_CHECK(sv != NULL && strcmp(json_object_get_string(sv), sid) == 0, row, "row %zu: session %s", i, sid);
        if (i > 0)
            SG_CHECK(SG_DBL(row, "started_at") >= SG_DBL(json_object_array_get_idx(rows, i - 1), "started_at"), rows,
                     "rows must come oldest first");
    }
    json_object_put(u);

    /* sandgate-admin agrees */
    char *out = NULL;
    SG_CHECK(sggw_admin(data_dir(), &out, "usage", "usage-match", NULL) == 0, NULL, "sandgate-admin usage failed");
    char want[128];
    pathf(want, sizeof(want), "executions=%zu ", n);
    SG_CHECK(strstr(out, want) != NULL && strstr(out, " timed_out=1") != NULL, NULL,
             "sandgate-admin usage must say %s and timed_out=1:\n%s", want, out);
    char bytes_s[64];
    pathf(bytes_s, sizeof(bytes_s), "output_bytes=%zu ", bytes);
    SG_CHECK(strstr(out, bytes_s) != NULL, NULL, "sandgate-admin usage must say %s:\n%s", bytes_s, out);
    free(out);
    SG_CHECK(sggw_admin(data_dir(), &out, "--json", "usage", "usage-match", NULL) == 0, NULL, "usage --json failed");
    json_object *j = json_tokener_parse(out);
    free(out);
    SG_CHECK(j != NULL && SG_INT(j, "executions") == (int64_t)n && absd(SG_DBL(j, "seconds") - sum) < 0.01, j,
             "sandgate-admin usage --json must agree");
    json_object_put(j);

    /* and the session's history counts its executions */
    const char *params[] = {sid, NULL};
    char err[256];
    char *row = sggw_ledger_row(data_dir(), "SELECT executions FROM sessions WHERE id = ?1", params, err);
    SG_CHECK(row != NULL && atoi(row) == 5, NULL, "the sessions row must count 5 executions (got %s %s)",
             row ? row : "no row", err);
    free(row);

    sggw_session_done(stack.gw, tok, sid);
}

/* The proxy states what a run used in X-Sandgate-Usage, exactly as its
 * result's JSON says it: output of multibyte text, bytes that are not
 * UTF-8 (counted as sent, repaired) and stderr, an exit code, the wall time
 * to the digit. A streamed run's usage is read from its last event. */
SGGW_TEST(test_usage_header_states_the_result)
{
    char *sid, *tok = sggw_tenant_session(stack.gw, "usage-header", NULL, &sid);
    char path[256];
    sgtest_reply_t r;
    sg_usage_hdr_t u;

    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    const char *code = "{\"code\":\"import sys\\nsys.stdout.write('\\u00e9\\u4e2d' * 40000)\\n"
                       "sys.stdout.flush()\\nsys.stdout.buffer.write(b'\\\\xff\\\\xfe ok')\\n"
                       "sys.stdout.flush()\\nprint('err', file=sys.stderr)\\nsys.exit(3)\"}";
    SG_CHECK(sgtest_call(stack.proxy, "POST", path, code, &r) == 0 && r.status == 200, NULL, "execute: %ld %s",
             r.status, r.body);
    char *h = sgtest_reply_header(&r, "X-Sandgate-Usage");
    json_object *o = json_tokener_parse(r.body);
    SG_CHECK(h != NULL && o != NULL, o, "no X-Sandgate-Usage header, or no JSON result");
    SG_CHECK(sg_usage_hdr_parse(h, strlen(h), &u) == 0, o, "X-Sandgate-Usage does not parse: %s", h);
    size_t out_len = strlen(SG_STR(o, "stdout")), err_len = strlen(SG_STR(o, "stderr"));
    SG_CHECK(out_len > 200000 && strstr(SG_STR(o, "stdout"), " ok") != NULL, o, "stdout of %zu bytes", out_len);
    SG_CHECK(u.output_bytes == (int64_t)(out_len + err_len), o, "%s: output %lld, the result's %zu", h,
             (long long)u.output_bytes, out_len + err_len);
    SG_CHECK(u.exit_code == 3 && SG_INT(o, "exit_code") == 3 && u.timed_out == 0, o, "%s", h);
    SG_CHECK(u.wall_s == SG_DBL(o, "wall_time"), o, "%s: wall %.9f, the result's %.9f", h, u.wall_s,
             SG_DBL(o, "wall_time"));
    SG_CHECK(strcmp(u.runtime, SG_STR(o, "runtime")) == 0, o, "%s: runtime", h);
    free(h);
    sgtest_reply_free(&r);

    /* the same through the gateway: the result passed on byte for byte
     * (the proxy's body kept for the reply, not copied) */
    sggw_call(stack.gw, tok, "POST", path, code, &r);
    json_object *g = r.status == 200 ? json_tokener_parse(r.body) : NULL;
    SG_CHECK(g != NULL && strcmp(SG_STR(g, "stdout"), SG_STR(o, "stdout")) == 0 &&
                 strcmp(SG_STR(g, "stderr"), SG_STR(o, "stderr")) == 0,
             g, "through the gateway: %ld, not the proxy's output", r.status);
    json_object_put(g);
    json_object_put(o);
    sgtest_reply_free(&r);

    /* megabyte results, several at once: each whole */
    sggw_par_req_t reqs[4];
    char url[512];
    pathf(url, sizeof(url), "%s%s", sggw_gateway_url(stack.gw), path);
    sggw_par_posts(reqs, 4, url, tok, "{\"code\":\"import sys; sys.stdout.write('y' * 1000000)\"}", 60);
    SG_CHECK(sggw_parallel(reqs, 4) == 0, NULL, "batch");
    for (int i = 0; i < 4; i++) {
        json_object *m = reqs[i].reply.status == 200 ? json_tokener_parse(reqs[i].reply.body) : NULL;
        const char *s = m != NULL ? SG_STR(m, "stdout") : "";
        size_t ys = strspn(s, "y");
        SG_CHECK(ys == 1000000 && s[ys] == '\0', m, "result %d: %ld, %zu bytes of y", i, reqs[i].reply.status, ys);
        json_object_put(m);
        sgtest_reply_free(&reqs[i].reply);
    }

    /* a streamed run through the gateway: its result event is read */
    double from_body0 = usage_from_body();
    sggw_call(stack.gw, tok, "POST", path, "{\"code\":\"print(1)\",\"stream\":true}", &r);
    SG_CHECK(r.status == 200 && strstr(r.body, "event: result") != NULL, NULL, "streamed: %ld %s", r.status, r.body);
    sgtest_reply_free(&r);
    SG_CHECK(usage_from_body() == from_body0 + 1, NULL, "the streamed run was not read from its result event");
    sggw_session_done(stack.gw, tok, sid);
}

int main(void)
{
    return SG_RUN_TESTS("gateway_quota", group_setup, sggw_stack_group_teardown, NULL, sggw_stack_teardown,
                        test_rate_limit_exact, test_session_cap_exact, test_daily_execs_quota, test_daily_seconds_quota,
                        test_usage_matches_replies, test_usage_header_states_the_result);
}
