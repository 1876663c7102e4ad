/*
 * sggw_api.c — the gateway's public API as the gateway suites call it
 * (bearer tokens, asserting helpers), read-only looks into its SQLite file,
 * and a suite's whole stack: proxy, redis-server and gateway started
 * together, checked after every test, stopped at the end (see sggw.h).
 */
#include "sggw.h"
#include "sgtest_int.h"
#include "store.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

/* ------------------------------------------------------------------------
 * Calls with a bearer token
 * ------------------------------------------------------------------------ */

const char *const *sggw_auth(sggw_auth_t *a, const char *token)
{
    snprintf(a->line, sizeof(a->line), "Authorization: Bearer %s", token);
    a->h[0] = a->line;
    a->h[1] = NULL;
    return a->h;
}

char *sggw_new_tenant_auth(sggw_auth_t *a, const char *data_dir, const char *name)
{
    char *tok = sggw_new_tenant(data_dir, name, NULL);
    sggw_auth(a, tok);
    return tok;
}

static int call_with_token(const char *base, const char *token, const char *method, const char *path, const char *body,
                           size_t len, const char *ctype, long timeout_s, sgtest_reply_t *out)
{
    char *url = malloc(strlen(base) + strlen(path) + 1);
    char *auth = token != NULL ? malloc(strlen(token) + 32) : NULL;
    if (url == NULL || (token != NULL && auth == NULL)) {
        free(url);
        free(auth);
        memset(out, 0, sizeof(*out));
        out->body = calloc(1, 1);
        out->headers = calloc(1, 1);
        snprintf(out->error, sizeof(out->error), "out of memory");
        return -1;
    }
    sprintf(url, "%s%s", base, path);
    const char *hdrs[2] = {NULL, NULL};
    if (token != NULL) {
        sprintf(auth, "Authorization: Bearer %s", token);
        hdrs[0] = auth;
    }
    int rc = sggw_http(method, url, body, len, ctype, hdrs, timeout_s, out);
    free(url);
    free(auth);
    return rc;
}

int sggw_call(const sggw_gateway_t *g, const char *token, const char *method, const char *path, const char *json_body,
              sgtest_reply_t *out)
{
    return call_with_token(sggw_gateway_url(g), token, method, path, json_body, json_body ? strlen(json_body) : 0,
                           json_body ? "application/json" : NULL, 0, out);
}

int sggw_call_json(const sggw_gateway_t *g, const char *token, const char *method, const char *path, json_object *body,
                   long timeout_s, sgtest_reply_t *out)
{
    const char *s = body != NULL ? json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN) : NULL;
    return call_with_token(sggw_gateway_url(g), token, method, path, s, s ? strlen(s) : 0,
                           s ? "application/json" : NULL, timeout_s, out);
}

json_object *sggw__call_take(const sggw_gateway_t *g, const char *token, const char *method, const char *path,
                             const char *json_body, long status, const char *code, int error, const char *file,
                             int line)
{
    sgtest_reply_t r;
    sggw_call(g, token, method, path, json_body, &r);
    if (!error)
        return sgtest__take_json(&r, status, file, line);
    sgtest__take_error(&r, status, code, file, line);
    return NULL;
}

int sggw_admin_call(const sggw_gateway_t *g, const char *method, const char *path, const char *json_body,
                    sgtest_reply_t *out)
{
    return sggw_call(g, sggw_gateway_admin_token(g), method, path, json_body, out);
}

/* ------------------------------------------------------------------------
 * SQLite, read-only
 * ------------------------------------------------------------------------ */

char *sggw_db_row(const char *data_dir, const char *sql, const char *const *params, char *err)
{
    char path[700], local[256];
    char *e = err != NULL ? err : local;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    char *row = NULL;

    e[0] = '\0';
    snprintf(path, sizeof(path), "%s/sandgate.db", data_dir);
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        snprintf(e, 256, "open %.180s: %.60s", path, db != NULL ? sqlite3_errmsg(db) : "out of memory");
        goto Exit;
    }
    sqlite3_busy_timeout(db, 5000);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        snprintf(e, 256, "prepare: %s", sqlite3_errmsg(db));
        goto Exit;
    }
    for (int i = 0; params != NULL && params[i] != NULL; i++)
        sqlite3_bind_text(st, i + 1, params[i], -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        size_t cap = 1;
        int ncol = sqlite3_column_count(st);
        row = calloc(1, 1);
        for (int i = 0; row != NULL && i < ncol; i++) {
            const char *t = (const char *)sqlite3_column_text(st, i);
            size_t tl = t != NULL ? strlen(t) : 0;
            char *nr = realloc(row, cap + tl + 1);
            if (nr == NULL) {
                free(row);
                row = NULL;
                break;
            }
            row = nr;
            if (i > 0)
                strcat(row, "|");
            if (t != NULL)
                strcat(row, t);
            cap += tl + 1;
        }
    } else if (rc != SQLITE_DONE) {
        snprintf(e, 256, "step: %s", sqlite3_errmsg(db));
    }
Exit:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return row;
}

char *sggw_ledger_row(const char *data_dir, const char *sql, const char *const *params, char *err)
{
    char local[256];
    char *e = err != NULL ? err : local;
    sg_store_t *st = sg_store_open(data_dir, e, 256);
    int rc = st != NULL ? sg_store_usage_catch_up(st, NULL, e, 256) : -1;
    sg_store_close(st);
    return rc == 0 ? sggw_db_row(data_dir, sql, params, err) : NULL;
}

struct sggw_db_writer {
    sqlite3 *db;
    pthread_t thread;
    bool holding;
    double hold_s;
};

static void *on_writer(void *ud)
{
    sggw_db_writer_t *w = ud;
    usleep((useconds_t)(w->hold_s * 1e6));
    sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
    return NULL;
}

sggw_db_writer_t *sggw_db_writer_open(const char *data_dir)
{
    char path[700];
    sggw_db_writer_t *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    snprintf(path, sizeof(path), "%s/sandgate.db", data_dir);
    if (sqlite3_open_v2(path, &w->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        fprintf(stderr, "sggw: open %s: %s\n", path, w->db ? sqlite3_errmsg(w->db) : "out of memory");
        sqlite3_close(w->db);
        free(w);
        return NULL;
    }
    sqlite3_busy_timeout(w->db, 5000);
    return w;
}

static void writer_wait(sggw_db_writer_t *w)
{
    if (w->holding)
        pthread_join(w->thread, NULL);
    w->holding = false;
}

int sggw_db_writer_hold(sggw_db_writer_t *w, double hold_s)
{
    writer_wait(w);
    w->hold_s = hold_s;
    if (sqlite3_exec(w->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        fprintf(stderr, "sggw: BEGIN IMMEDIATE: %s\n", sqlite3_errmsg(w->db));
        return -1;
    }
    if (pthread_create(&w->thread, NULL, on_writer, w) != 0) {
        sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
        return -1;
    }
    w->holding = true;
    return 0;
}

void sggw_db_writer_close(sggw_db_writer_t *w)
{
    if (w == NULL)
        return;
    writer_wait(w);
    sqlite3_close(w->db);
    free(w);
}

/* ------------------------------------------------------------------------
 * Misc
 * ------------------------------------------------------------------------ */

char *sggw_fake_token(const char *public_id)
{
    static const char pub_chars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    char hex[128];
    sgtest__random_hex(hex, 51);
    char *t = malloc(57);
    if (t == NULL)
        return NULL;
    memcpy(t, "sgk_", 4);
    for (int i = 0; i < 8; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        t[4 + i] = public_id != NULL ? public_id[i] : pub_chars[v % 36];
    }
    t[12] = '_';
    for (int i = 0; i < 43; i++) {
        unsigned v;
        sscanf(hex + 2 * (8 + i), "%2x", &v);
        t[13 + i] = b64[v % 64];
    }
    t[56] = '\0';
    return t;
}

double sggw_metric(const char *text, const char *name, const char *labels)
{
    char want[512];
    snprintf(want, sizeof(want), "%s%s%s%s ", name, labels[0] ? "{" : "", labels, labels[0] ? "}" : "");
    size_t wl = strlen(want);
    for (const char *line = text; line != NULL && *line != '\0';) {
        if (strncmp(line, want, wl) == 0)
            return strtod(line + wl, NULL);
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    return -1;
}

/* Prints "name type value" for each sample of the families of process_*,
 * or the parser's complaint (and exits 1). */
static const char prom_parse_py[] = "import sys\n"
                                    "from prometheus_client.parser import text_string_to_metric_families\n"
                                    "try:\n"
                                    "    fams = list(text_string_to_metric_families(sys.stdin.read()))\n"
                                    "except Exception as e:\n"
                                    "    print('unparsable: %r' % (e,))\n"
                                    "    sys.exit(1)\n"
                                    "for f in fams:\n"
                                    "    for s in f.samples:\n"
                                    "        if s.name.startswith('process_'):\n"
                                    "            print(s.name, f.type, repr(float(s.value)))\n";

double sggw_check_metrics(const char *text, double started_after)
{
    static const struct {
        const char *name, *type;
    } want[] = {{"process_cpu_seconds_total", "counter"},
                {"process_resident_memory_bytes", "gauge"},
                {"process_virtual_memory_bytes", "gauge"},
                {"process_open_fds", "gauge"},
                {"process_max_fds", "gauge"},
                {"process_start_time_seconds", "gauge"}};
    enum { N = sizeof(want) / sizeof(want[0]) };
    double v[N];
    int seen[N] = {0};
    char path[] = "/tmp/sgtest-metrics-XXXXXX", py[] = "/tmp/sgtest-promparse-XXXXXX", cmd[256], line[512],
         out[2048] = "";
    int fd = mkstemp(path), pfd = mkstemp(py);
    SG_CHECK(fd >= 0 && pfd >= 0, NULL, "mkstemp");
    SG_CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text) &&
                 write(pfd, prom_parse_py, sizeof(prom_parse_py) - 1) == (ssize_t)sizeof(prom_parse_py) - 1,
             NULL, "writing the metrics and the parser's script");
    close(fd);
    close(pfd);
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s < %s 2>&1", py, path);
    FILE *f = popen(cmd, "r");
    SG_CHECK(f != NULL, NULL, "cannot run python3");
    while (fgets(line, sizeof(line), f) != NULL) {
        char name[128], type[32];
        double val;
        if (strlen(out) + strlen(line) < sizeof(out))
            strcat(out, line);
        if (sscanf(line, "%127s %31s %lf", name, type, &val) != 3)
            continue;
        for (int i = 0; i < N; i++) {
            if (strcmp(name, want[i].name) != 0)
                continue;
            SG_CHECK(strcmp(type, want[i].type) == 0, NULL, "%s is a %s, not a %s", name, type, want[i].type);
            seen[i]++;
            v[i] = val;
        }
    }
    int rc = pclose(f);
    unlink(path);
    unlink(py);
    if (rc != 0)
        fprintf(stderr, "---- /metrics ----\n%s----\n", text);
    SG_CHECK(rc == 0, NULL, "the Prometheus parser refused the metrics: %s", out);
    for (int i = 0; i < N; i++)
        SG_CHECK(seen[i] == 1, NULL, "%s: %d samples, not 1 (parser: %s)", want[i].name, seen[i], out);
    double now = (double)time(NULL);
    SG_CHECK(v[0] > 0, NULL, "no CPU time: %g", v[0]);
    SG_CHECK(v[1] >= 1 << 20 && v[2] >= v[1], NULL, "memory: %g resident of %g", v[1], v[2]);
    SG_CHECK(v[3] >= 3 && v[3] <= v[4], NULL, "%g descriptors open of %g", v[3], v[4]);
    /* the kernel's boot time is whole seconds: a start may read up to 1 s early */
    SG_CHECK(v[5] >= started_after - 1 && v[5] <= now + 1, NULL, "started at %.2f, not in [%.0f, %.0f]", v[5],
             started_after, now);
    return v[0];
}

/* ------------------------------------------------------------------------
 * Public API helpers
 * ------------------------------------------------------------------------ */

char *sggw_create_session(const sggw_gateway_t *g, const char *token, const char *json_body, json_object **reply)
{
    sgtest_reply_t r;
    sggw_call(g, token, "POST", "/sessions", json_body != NULL ? json_body : "{\"lang\":\"python\"}", &r);
    json_object *o = SG_TAKE_JSON(&r, 200);
    SG_CHECK(strlen(SG_STR(o, "session_id")) == 36, o, "session_id is not a 36-char uuid");
    SG_CHECK(strcmp(SG_STR(o, "status"), "active") == 0, o, "a new session must be \"active\"");
    return SG_TAKE_ID(o, "session_id", reply);
}

void sggw_check_result(json_object *r)
{
    SG_STR(r, "stdout");
    SG_STR(r, "stderr");
    int64_t exit_code = SG_INT(r, "exit_code");
    double t = SG_DBL(r, "execution_time");
    bool success = SG_BOOL(r, "success");
    bool timed_out = SG_BOOL(r, "timed_out");
    bool truncated = SG_BOOL(r, "truncated");
    SG_CHECK(t >= 0, r, "execution_time is negative");
    SG_CHECK(SG_DBL(r, "wall_time") >= 0, r, "wall_time is negative");
    SG_CHECK(success == (exit_code == 0 && !timed_out && !truncated), r,
             "success must be exit_code == 0 and not cut short");
}

json_object *sggw_post_result(const sggw_gateway_t *g, const char *token, const char *path, json_object *body)
{
    sgtest_reply_t r;
    sggw_call_json(g, token, "POST", path, body, 0, &r);
    json_object_put(body);
    json_object *o = SG_TAKE_JSON(&r, 200);
    sggw_check_result(o);
    return o;
}

json_object *sggw_execute(const sggw_gateway_t *g, const char *token, const char *sid, const char *code, double timeout)
{
    char path[128];
    json_object *b = json_object_new_object();
    json_object_object_add(b, "code", json_object_new_string(code));
    if (timeout > 0)
        json_object_object_add(b, "timeout", json_object_new_double(timeout));
    snprintf(path, sizeof(path), "/sessions/%s/execute", sid);
    return sggw_post_result(g, token, path, b);
}

void sggw_delete_session(const sggw_gateway_t *g, const char *token, const char *sid)
{
    char path[128];
    sgtest_reply_t r;
    snprintf(path, sizeof(path), "/sessions/%s", sid);
    sggw_call(g, token, "DELETE", path, NULL, &r);
    json_object *o = SG_TAKE_JSON(&r, 200);
    SG_CHECK(strcmp(SG_STR(o, "status"), "closed") == 0, o, "DELETE must answer {\"status\":\"closed\"}");
    json_object_put(o);
}

void sggw_session_done(const sggw_gateway_t *g, char *token, char *sid)
{
    sggw_delete_session(g, token, sid);
    free(sid);
    free(token);
}

json_object *sggw_list_sessions(const sggw_gateway_t *g, const char *token)
{
    sgtest_reply_t r;
    sggw_call(g, token, "GET", "/sessions", NULL, &r);
    json_object *o = SG_TAKE_JSON(&r, 200);
    json_object *a = SG_ARR(o, "sessions");
    for (size_t i = 0; i < json_object_array_length(a); i++)
        SG_CHECK(json_object_is_type(json_object_array_get_idx(a, i), json_type_string), o,
                 "\"sessions\" must hold strings");
    return o;
}

void sggw_proxy_close_all(sgtest_proxy_t *p)
{
    sgtest_close_all_sessions(p);
}

bool sggw_lists(const sggw_gateway_t *g, const char *token, const char *sid)
{
    json_object *o = sggw_list_sessions(g, token);
    bool has = sgtest_json_array_has_string(SG_ARR(o, "sessions"), sid);
    json_object_put(o);
    return has;
}

long sggw_int_header(const sgtest_reply_t *r, const char *name, long min)
{
    char *v = sgtest_reply_header(r, name);
    bool ok = v != NULL && *v != '\0' && strspn(v, "0123456789") == strlen(v);
    long n = ok ? strtol(v, NULL, 10) : -1;
    if (!ok || n < min) {
        fprintf(stderr, "headers:\n%s\n", r->headers);
        SG_FAIL(NULL, "%s must be an integer >= %ld (got \"%s\")", name, min, v ? v : "(none)");
    }
    free(v);
    return n;
}

bool sggw_admin_lists(const sggw_gateway_t *g, const char *tenant, const char *sid)
{
    char path[256];
    sgtest_reply_t r;
    pathf(path, sizeof(path), "/admin/sessions?tenant=%s", tenant);
    sggw_admin_call(g, "GET", path, NULL, &r);
    json_object *o = SG_TAKE_JSON(&r, 200);
    json_object *a = SG_ARR(o, "sessions");
    bool found = false;
    for (size_t i = 0; i < json_object_array_length(a) && !found; i++)
        found = strcmp(SG_STR(json_object_array_get_idx(a, i), "session_id"), sid) == 0;
    json_object_put(o);
    return found;
}

void sggw_expect_db_closed(const char *data_dir, const char *sid, const char *reason)
{
    const char *params[] = {sid, NULL};
    char err[256];
    char *row = NULL;
    double deadline = sgtest_now() + 10;
    for (;;) {
        free(row);
        row = sggw_db_row(data_dir,
                          "SELECT coalesce(closed_at, 0), coalesce(close_reason, '') FROM sessions WHERE id = ?1",
                          params, err);
        SG_CHECK(row != NULL, NULL, "no sessions row for %s in the SQLite file (%s)", sid, err);
        if (strncmp(row, "0|", 2) != 0)
            break;
        SG_CHECK(sgtest_now() < deadline, NULL, "the sessions row of %s is still open 10 s after it closed", sid);
        usleep(50000);
    }
    char *bar = strchr(row, '|');
    SG_CHECK(bar != NULL && strcmp(bar + 1, reason) == 0, NULL, "session %s: close_reason \"%s\", expected \"%s\"", sid,
             bar ? bar + 1 : row, reason);
    SG_CHECK(atoll(row) > 1000000000LL, NULL, "session %s: closed_at %s is no unix time", sid, row);
    free(row);
}

const char *const sggw_idle_2s[] = {"idle_timeout=2", "max_lifetime=600", NULL};

char *sggw_tenant_session(const sggw_gateway_t *g, const char *name, const char *const *quotas, char **sid)
{
    char *tok = sggw_new_tenant(sggw_gateway_data_dir(g), name, quotas);
    *sid = sggw_create_session(g, tok, NULL, NULL);
    return tok;
}

void sggw_parallel_get(sggw_par_req_t *reqs, size_t n, const char *url, const char *token)
{
    memset(reqs, 0, n * sizeof(*reqs));
    for (size_t i = 0; i < n; i++)
        reqs[i] = (sggw_par_req_t){.method = "GET", .url = url, .token = token, .timeout_s = 30};
    SG_CHECK(sggw_parallel(reqs, n) == 0, NULL, "cannot start threads");
}

sggw_par_req_t sggw_par_post(const char *url, const char *token, const char *body, long timeout_s)
{
    return (sggw_par_req_t){.method = "POST",
                            .url = url,
                            .token = token,
                            .body = body,
                            .body_len = strlen(body),
                            .content_type = "application/json",
                            .timeout_s = timeout_s};
}

void sggw_par_posts(sggw_par_req_t *reqs, size_t n, const char *url, const char *token, const char *body,
                    long timeout_s)
{
    for (size_t i = 0; i < n; i++)
        reqs[i] = sggw_par_post(url, token, body, timeout_s);
}

void sggw_wait_allowed(const sggw_gateway_t *g, const char *token, double timeout_s, long meanwhile)
{
    double deadline = sgtest_now() + timeout_s;
    for (;;) {
        sgtest_reply_t r;
        sggw_call(g, token, "GET", "/sessions", NULL, &r);
        long st = r.status;
        sgtest_reply_free(&r);
        if (st == 200)
            break;
        SG_CHECK(meanwhile == 0 || st == meanwhile, NULL, "expected 200 or %ld, got %ld", meanwhile, st);
        SG_CHECK(sgtest_now() < deadline, NULL, "no request was allowed within %.0f s", timeout_s);
        usleep(100000);
    }
}

void sggw_expect_ledger_execs(const char *data_dir, const char *tenant, int64_t want, double timeout_s)
{
    double deadline = sgtest_now() + timeout_s;
    for (;;) {
        char *out = NULL;
        SG_CHECK(sggw_admin(data_dir, &out, "--json", "usage", tenant, NULL) == 0, NULL, "usage failed");
        json_object *u = json_tokener_parse(out);
        free(out);
        int64_t n = u != NULL ? SG_INT(u, "executions") : -1;
        json_object_put(u);
        if (n == want)
            break;
        SG_CHECK(n < want && sgtest_now() < deadline, NULL, "the ledger of %s shows %lld executions, expected %lld",
                 tenant, (long long)n, (long long)want);
        usleep(100000);
    }
}

int sggw_test_ok = 1;

int sggw_after_test(void)
{
    if (sggw_test_ok)
        return 0;
    fprintf(stderr, "---- the test failed; logs of what it ran against: ----\n");
    sggw_print_logs(60);
    sggw_test_ok = 1;
    return 1;
}

int sggw_stack_stop(sggw_gateway_t **gw, sggw_redis_t **redis, sgtest_proxy_t **proxy, const char *proxy_id)
{
    int rc = 0;
    if (*gw != NULL && sggw_gateway_quiesce(*gw) != 0)
        fprintf(stderr, "teardown: live sessions remain in the gateway's state\n");
    if (*gw != NULL && sggw_gateway_stop(*gw) != 0) {
        fprintf(stderr, "teardown: the gateway did not exit with status 0 on SIGTERM\n");
        rc = -1;
    }
    *gw = NULL;
    sggw_redis_stop(*redis);
    *redis = NULL;
    if (*proxy != NULL) {
        sggw_proxy_close_all(*proxy);
        sgtest_proxy_stop(*proxy);
        *proxy = NULL;
    }
    int left = sgtest_docker_count(proxy_id);
    if (left != 0) {
        fprintf(stderr, "teardown: %d container(s) of %s remain after the proxy stopped\n", left, proxy_id);
        sgtest_docker_remove_all(proxy_id);
        rc = -1;
    }
    return rc;
}

/* ------------------------------------------------------------------------
 * A suite's stack
 * ------------------------------------------------------------------------ */

static int stack_copy_env(char **dst, const char *const *src, const char *what)
{
    size_t n = 0;
    for (; src != NULL && src[n] != NULL; n++) {
        if (n >= SGGW_STACK_MAX_ENV) {
            fprintf(stderr, "sggw_stack_start: more than %d %s settings\n", SGGW_STACK_MAX_ENV, what);
            return -1;
        }
        if ((dst[n] = strdup(src[n])) == NULL)
            return -1;
    }
    dst[n] = NULL;
    return 0;
}

static void stack_free_env(char **env)
{
    for (size_t i = 0; env[i] != NULL; i++) {
        free(env[i]);
        env[i] = NULL;
    }
}

static sgtest_proxy_t *stack_proxy_start(sggw_stack_t *st)
{
    return sgtest_proxy_start(st->proxy_id, (const char *const *)st->proxy_env);
}

static sggw_gateway_t *stack_gateway_start(sggw_stack_t *st)
{
    sggw_opts_t o = {.proxy_url = st->proxy_url,
                     .redis_url = st->redis != NULL ? sggw_redis_url(st->redis) : NULL,
                     .env = (const char *const *)st->gateway_env};
    return sggw_gateway_start(&o);
}

int sggw_stack_start(sggw_stack_t *st, const sggw_stack_opts_t *o)
{
    static const char *const default_proxy_env[] = {"SANDGATE_POOL_SIZE=1", NULL};

    memset(st, 0, sizeof(*st));
    if (stack_copy_env(st->proxy_env, o->proxy_env != NULL ? o->proxy_env : default_proxy_env, "proxy") != 0 ||
        stack_copy_env(st->gateway_env, o->gateway_env, "gateway") != 0 ||
        (st->sock_dir = sggw_mkdtemp("sgsock")) == NULL)
        return -1;
    size_t n = 0;
    while (st->proxy_env[n] != NULL)
        n++;
    snprintf(st->proxy_sock, sizeof(st->proxy_sock), "%s/proxy.sock", st->sock_dir);
    snprintf(st->proxy_url, sizeof(st->proxy_url), "http://[unix:%s]", st->proxy_sock);
    if (asprintf(&st->proxy_env[n], "SANDGATE_PROXY_SOCKET=%s", st->proxy_sock) < 0)
        return -1;
    st->proxy_env[n + 1] = NULL;
    st->proxy_id = o->proxy_id != NULL ? strdup(o->proxy_id) : sgtest_new_proxy_id();
    if (st->proxy_id == NULL || (st->proxy = stack_proxy_start(st)) == NULL)
        return -1;
    if (o->redis && (st->redis = sggw_redis_start()) == NULL)
        return -1;
    st->gw = stack_gateway_start(st);
    return st->gw != NULL ? sgtest_proxy_pools_full(st->proxy, SGTEST_POOLS_FULL_S) : -1;
}

int sggw_stack_start_pool(sggw_stack_t *st, bool redis, int pool)
{
    char pool_kv[48];
    snprintf(pool_kv, sizeof(pool_kv), "SANDGATE_POOL_SIZE=%d", pool);
    const char *env[] = {pool_kv, NULL};
    sggw_stack_opts_t o = {.redis = redis, .proxy_env = env};
    return sggw_stack_start(st, &o);
}

void sggw_stack_stop_extra(sggw_stack_t *st, const char *what)
{
    sggw_gateway_t *g = st->extra_gw;
    st->extra_gw = NULL;
    SG_CHECK(sggw_gateway_stop(g) == 0, NULL, "%s did not exit with status 0 on SIGTERM", what);
}

static void stack_drop_extras(sggw_stack_t *st)
{
    sggw_gateway_stop(st->extra_gw);
    st->extra_gw = NULL;
    sggw_redis_stop(st->extra_redis);
    st->extra_redis = NULL;
    if (st->extra_dir != NULL) {
        sggw_rmtree(st->extra_dir);
        free(st->extra_dir);
        st->extra_dir = NULL;
    }
}

int sggw_stack_after_test(sggw_stack_t *st)
{
    int rc = sggw_after_test() ? -1 : 0;
    stack_drop_extras(st);
    st->gw_restarted = false;
    if (st->redis != NULL && !sggw_redis_running(st->redis)) {
        fprintf(stderr, "redis-server died during this test\n");
        sggw_redis_print_log(st->redis, 40);
        sggw_redis_kill(st->redis);
        if (sggw_redis_restart(st->redis) != 0)
            fprintf(stderr, "redis-server did not start again\n");
        rc = -1;
    }
    if (st->proxy != NULL && !sgtest_proxy_alive(st->proxy)) {
        fprintf(stderr, "the proxy died during this test\n");
        sgtest_proxy_print_log(st->proxy, 60);
        sgtest_proxy_kill9(st->proxy);
        st->proxy = stack_proxy_start(st);
        rc = -1;
    }
    if (!sggw_gateway_alive(st->gw)) {
        fprintf(stderr, "the gateway died during this test\n");
        sggw_gateway_print_log(st->gw, 80);
        sggw_gateway_kill9(st->gw);
        st->gw = stack_gateway_start(st);
        st->gw_restarted = true;
        rc = -1;
    }
    return rc;
}

int sggw_stack_end(sggw_stack_t *st)
{
    stack_drop_extras(st);
    int rc = sggw_stack_stop(&st->gw, &st->redis, &st->proxy, st->proxy_id);
    free(st->proxy_id);
    st->proxy_id = NULL;
    stack_free_env(st->proxy_env);
    stack_free_env(st->gateway_env);
    if (st->sock_dir != NULL) {
        /* the proxy removed its socket when it stopped */
        struct stat sb;
        if (lstat(st->proxy_sock, &sb) == 0) {
            fprintf(stderr, "teardown: the proxy's socket %s is still there after it stopped\n", st->proxy_sock);
            rc = -1;
        }
        sggw_rmtree(st->sock_dir);
        free(st->sock_dir);
        st->sock_dir = NULL;
    }
    return rc;
}

int sggw_stack_teardown(void **state)
{
    return sggw_stack_after_test(*state);
}

int sggw_stack_group_teardown(void **state)
{
    return sggw_stack_end(*state);
}

/* ------------------------------------------------------------------------
 * Two proxies
 * ------------------------------------------------------------------------ */

sgtest_proxy_t *sggw_pair_restart(sggw_pair_t *pp, int i)
{
    char port_kv[32];
    const char *env[8];
    size_t n = 0;

    env[n++] = "SANDGATE_POOL_SIZE=1";
    for (size_t k = 0; pp->env[i] != NULL && pp->env[i][k] != NULL && n < 7; k++)
        env[n++] = pp->env[i][k];
    snprintf(port_kv, sizeof(port_kv), "PORT=%d", pp->port[i]);
    if (pp->port[i] > 0 && n < 7)
        env[n++] = port_kv;
    env[n] = NULL;
    pp->proxy[i] = sgtest_proxy_start(pp->proxy_id[i], env);
    if (pp->proxy[i] != NULL)
        pp->port[i] = atoi(strrchr(sgtest_proxy_url(pp->proxy[i]), ':') + 1);
    return pp->proxy[i];
}

int sggw_pair_start(sggw_pair_t *pp)
{
    for (int i = 0; i < 2; i++) {
        if ((pp->proxy_id[i] = sgtest_new_proxy_id()) == NULL || sggw_pair_restart(pp, i) == NULL) {
            fprintf(stderr, "cannot start proxy %d\n", i);
            return -1;
        }
    }
    for (int i = 0; i < 2; i++)
        if (sgtest_proxy_pools_full(pp->proxy[i], SGTEST_POOLS_FULL_S) != 0)
            return -1;
    return 0;
}

void sggw_pair_kill9(sggw_pair_t *pp, int i)
{
    sgtest_proxy_kill9(pp->proxy[i]);
    pp->proxy[i] = NULL;
}

int sggw_pair_where(const sggw_pair_t *pp, const char *sid)
{
    int at = -1;
    for (int i = 0; i < 2; i++) {
        if (pp->proxy[i] == NULL)
            continue;
        char **v = sgtest_listed_sessions(pp->proxy[i]);
        for (size_t k = 0; v[k] != NULL; k++)
            if (strcmp(v[k], sid) == 0) {
                SG_CHECK(at == -1, NULL, "session %s is listed by both proxies", sid);
                at = i;
            }
        sgtest_strv_free(v);
    }
    return at;
}

void sggw_pair_urls(const sggw_pair_t *pp, const char *sep, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s%s", sgtest_proxy_url(pp->proxy[0]), sep, sgtest_proxy_url(pp->proxy[1]));
}

int sggw_pair_end(sggw_pair_t *pp, bool restart)
{
    int rc = 0;
    for (int i = 0; i < 2; i++) {
        if (pp->proxy_id[i] == NULL)
            continue;
        if (pp->proxy[i] == NULL && restart)
            sggw_pair_restart(pp, i);
        if (pp->proxy[i] != NULL) {
            sggw_proxy_close_all(pp->proxy[i]);
            if (sgtest_proxy_stop(pp->proxy[i]) != 0) {
                fprintf(stderr, "teardown: proxy %d did not exit 0 on SIGTERM\n", i);
                rc = -1;
            }
            pp->proxy[i] = NULL;
        }
        int left = sgtest_docker_count(pp->proxy_id[i]);
        if (left != 0) {
            fprintf(stderr, "teardown: %d container(s) of %s remain after the proxy stopped\n", left, pp->proxy_id[i]);
            sgtest_docker_remove_all(pp->proxy_id[i]);
            rc = -1;
        }
        free(pp->proxy_id[i]);
        pp->proxy_id[i] = NULL;
    }
    return rc;
}
