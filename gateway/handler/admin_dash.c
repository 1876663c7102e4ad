/*
 * admin_dash.c — what the ops dashboard (GET /dashboard, docs/dashboard.md)
 * reads, in the admin API behind SANDGATE_ADMIN_TOKEN:
 *
 *   GET /admin/overview             tenants (live sessions, executions and
 *                                   execution seconds today against their
 *                                   quotas, rejections) and live sessions
 *                                   (tenant, language, runtime, deadlines)
 *   GET /admin/stats[?seconds=N]    executions per second and their latency
 *                                   (p50, p99) over the last N s (1..600, 300)
 *   GET /admin/executions[?limit=N] the newest N rows of the usage ledger
 *                                   (1..200, 20), with tenant and outcome
 *   GET /admin/health               the proxy, its Docker engine and warm
 *                                   pools, the state backend, SQLite
 *   GET /dashboard                  the page itself: static files from
 *                                   SANDGATE_WWW_DIR/dashboard (routes.c, sg_gw_www_dirs)
 *
 * Every reply is bounded: at most DASH_MAX_TENANTS tenants and
 * DASH_MAX_SESSIONS sessions (with the totals, so a cut list says so).
 * The routes table (routes.c) checks the admin token first.
 */
#include "db.h"
#include "gateway.h"
#include "handlers.h"
#include "http.h"
#include "json.h"
#include "metrics.h"
#include "placement.h"
#include "stats.h"
#include "upstream.h"
#include "util.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DASH_MAX_TENANTS 1000
#define DASH_MAX_SESSIONS 1000
#define DASH_PROXY_TIMEOUT_MS 3000
#define DASH_DAY_TENANTS 4096 /* tenants whose day totals are kept between polls */

static int dash_error(h2o_req_t *req, int status, const char *code, const char *detail)
{
    sg_metrics_request("admin", status);
    sg_http_send_error(req, status, code, "%s", detail);
    return 0;
}

static void dash_reply(sg_http_hold_t *hold, json_object *o)
{
    h2o_req_t *req = sg_http_hold_req(hold);
    if (req == NULL) {
        json_object_put(o);
        return;
    }
    sg_metrics_request("admin", 200);
    sg_http_send_json(req, 200, o);
}

/* A query parameter that must be an integer in [min, max]; def when absent.
 * 0, or -1 (answered 400 naming it). */
static int query_int(h2o_req_t *req, const char *name, long min, long max, long def, long *out)
{
    h2o_iovec_t v = sg_http_query_param(req, name);
    char detail[160];
    *out = def;
    if (v.base == NULL)
        return 0;
    long n = 0;
    size_t i = 0;
    for (; i < v.len && i < 9 && v.base[i] >= '0' && v.base[i] <= '9'; i++)
        n = n * 10 + (v.base[i] - '0');
    if (v.len == 0 || i != v.len || n < min || n > max) {
        snprintf(detail, sizeof(detail), "query parameter \"%s\" must be an integer from %ld to %ld", name, min, max);
        dash_error(req, 400, "bad_field", detail);
        return -1;
    }
    *out = n;
    return 0;
}

/* The proxy's JSON reply as an object, or NULL (no reply, not JSON). */
static json_object *proxy_json(const sg_upstream_reply_t *r)
{
    if (r->status == 0 || r->body_len == 0)
        return NULL;
    char err[128];
    return sg_json_parse_object(r->body, r->body_len, err, sizeof(err));
}

json_object *sg_gw_live_session_json(const sg_live_session_t *s)
{
    json_object *e = json_object_new_object();
    json_object_object_add(e, "session_id", json_object_new_string(s->id));
    json_object_object_add(e, "tenant_id", json_object_new_int64(s->tenant_id));
    json_object_object_add(e, "lang", json_object_new_string(s->lang));
    json_object_object_add(e, "created_at", json_object_new_int64(s->created_at));
    json_object_object_add(e, "last_used_at", json_object_new_int64(s->last_used_at));
    json_object_object_add(e, "idle_deadline", json_object_new_int64(s->idle_deadline));
    json_object_object_add(e, "lifetime_deadline", json_object_new_int64(s->lifetime_deadline));
    json_object_object_add(e, "executions", json_object_new_int64(s->executions));
    return e;
}

json_object *sg_gw_usage_row_json(const sg_usage_t *u)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "session_id", u->session_id[0] ? json_object_new_string(u->session_id) : NULL);
    json_object_object_add(o, "lang", json_object_new_string(u->lang));
    json_object_object_add(o, "kind", json_object_new_string(u->kind));
    json_object_object_add(o, "started_at", sg_json_new_double(u->started_at, 3));
    json_object_object_add(o, "duration", sg_json_new_double(u->duration, 6));
    json_object_object_add(o, "exit_code", json_object_new_int(u->exit_code));
    json_object_object_add(o, "timed_out", json_object_new_boolean(u->timed_out));
    json_object_object_add(o, "output_bytes", json_object_new_int64(u->output_bytes));
    return o;
}

/* ---- GET /admin/overview -------------------------------------------------------------- */

typedef struct {
    sg_gw_job_t job;
    sg_http_hold_t *hold;
    int64_t now, day_start;
    /* made on the DB thread: the tenants (id order) and their ids */
    json_object *tenants;
    int64_t *ids;
    size_t ntenants, total_tenants;
    /* the live sessions, from the state */
    int state_available;
    json_object *sessions;
    size_t total_sessions;
    long *live; /* live sessions per tenant (the tenants' order) */
    int full;   /* the day's totals were counted in full (day_totals) */
    /* session id -> runtime, from every proxy's GET /sessions?details=1 */
    json_object *runtimes;
    size_t proxies_pending;
} overview_t;

static void overview_free(overview_t *o)
{
    sg_http_hold_release(o->hold);
    json_object_put(o->tenants);
    json_object_put(o->sessions);
    json_object_put(o->runtimes);
    free(o->ids);
    free(o->live);
    free(o);
}

static void add_overview_tenant(const sg_tenant_t *t, void *data)
{
    overview_t *o = data;
    o->total_tenants++;
    if (o->ntenants == DASH_MAX_TENANTS)
        return;
    json_object *e = json_object_new_object();
    json_object_object_add(e, "id", json_object_new_int64(t->id));
    json_object_object_add(e, "name", json_object_new_string(t->name));
    json_object_object_add(e, "disabled", json_object_new_boolean(t->disabled));
    json_object_object_add(e, "max_sessions", json_object_new_int64(t->max_sessions));
    json_object_object_add(e, "max_concurrent_execs", json_object_new_int64(t->max_concurrent_execs));
    json_object_object_add(e, "execs_per_day", json_object_new_int64(t->execs_per_day));
    json_object_object_add(e, "exec_seconds_per_day", sg_json_new_double(t->exec_seconds_per_day, 3));
    json_object_object_add(e, "executions_today", json_object_new_int64(0));
    json_object_object_add(e, "exec_seconds_today", sg_json_new_double(0, 3));
    json_object_array_add(o->tenants, e);
    o->ids = sg_xrealloc(o->ids, (o->ntenants + 1) * sizeof(*o->ids));
    o->ids[o->ntenants++] = t->id;
}

/* The index of tenant id in o's tenants (in id order), or -1. */
static long tenant_index(const overview_t *o, int64_t id)
{
    size_t lo = 0, hi = o->ntenants;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (o->ids[mid] == id)
            return (long)mid;
        if (o->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static void set_day_total(overview_t *o, int64_t tenant_id, int64_t execs, double seconds)
{
    long i = tenant_index(o, tenant_id);
    if (i < 0)
        return;
    json_object *e = json_object_array_get_idx(o->tenants, (size_t)i);
    json_object_object_add(e, "executions_today", json_object_new_int64(execs));
    json_object_object_add(e, "exec_seconds_today", sg_json_new_double(seconds, 3));
}

/* Today's executions and seconds per tenant, from the ledger, for every
 * dashboard that polls: counted in full at most once a minute (and on a
 * new UTC day), and in between only the rows added since (by rowid), so a
 * poll costs little however large the day is. The full count also mends
 * what the increments cannot see (rows deleted with their tenant). Shared
 * by the DB threads, under its lock. */
typedef struct {
    int64_t tenant, execs;
    double seconds;
} day_total_t;

static struct {
    pthread_mutex_t lock;
    int64_t day_start, last_id, full_at;
    int overflow; /* more tenants than rows: counted in full every time */
    size_t n;
    day_total_t rows[DASH_DAY_TENANTS]; /* by tenant id */
} day = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void day_add(int64_t tenant_id, const sg_usage_total_t *t, void *data)
{
    overview_t *o = data;
    size_t lo = 0, hi = day.n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (day.rows[mid].tenant < tenant_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == day.n || day.rows[lo].tenant != tenant_id) {
        if (day.n == DASH_DAY_TENANTS) {
            day.overflow = 1;
            if (o->full) /* the count goes straight to the reply */
                set_day_total(o, tenant_id, t->executions, t->seconds);
            return;
        }
        memmove(&day.rows[lo + 1], &day.rows[lo], (day.n - lo) * sizeof(day.rows[0]));
        day.rows[lo] = (day_total_t){tenant_id, 0, 0};
        day.n++;
    }
    day.rows[lo].execs += t->executions;
    day.rows[lo].seconds += t->seconds;
}

static int day_totals(overview_t *o, sg_store_t *st, char *err, size_t errlen)
{
    int rc;
    pthread_mutex_lock(&day.lock);
    o->full = day.day_start != o->day_start || o->now - day.full_at >= 60 || day.overflow;
    if (o->full) {
        day.n = 0;
        day.overflow = 0;
        day.last_id = 0;
        day.day_start = o->day_start;
        day.full_at = o->now;
    }
    rc = sg_store_usage_totals_by_tenant(st, (double)o->day_start, (double)o->day_start + 86400, day.last_id,
                                         &day.last_id, day_add, o, err, errlen);
    if (rc != 0)
        day.full_at = 0; /* counted in full next time */
    for (size_t i = 0; rc == 0 && i < day.n; i++)
        set_day_total(o, day.rows[i].tenant, day.rows[i].execs, day.rows[i].seconds);
    pthread_mutex_unlock(&day.lock);
    return rc;
}

static void overview_fn(sg_gw_job_t *job, sg_store_t *st)
{
    overview_t *o = (overview_t *)job;
    o->tenants = json_object_new_array();
    if (sg_store_tenant_list(st, add_overview_tenant, o, job->err, sizeof(job->err)) != 0 ||
        day_totals(o, st, job->err, sizeof(job->err)) != 0)
        job->rc = -1;
}

static void overview_send(overview_t *o, json_object *runtimes)
{
    json_object *reply = json_object_new_object(), *state = json_object_new_object();
    uint64_t rej[SG_STATS_NLIMITS];

    for (size_t i = 0; i < o->ntenants; i++) {
        json_object *e = json_object_array_get_idx(o->tenants, i), *r = json_object_new_object();
        uint64_t total = 0;
        json_object_object_add(e, "live_sessions", o->state_available ? json_object_new_int64(o->live[i]) : NULL);
        sg_stats_rejections(o->ids[i], rej);
        for (size_t k = 0; k < SG_STATS_NLIMITS; k++) {
            json_object_object_add(r, sg_stats_limits[k], json_object_new_int64((int64_t)rej[k]));
            total += rej[k];
        }
        json_object_object_add(e, "rejections", r);
        json_object_object_add(e, "rejections_total", json_object_new_int64((int64_t)total));
    }
    /* the runtime each session runs on, as the proxy says (absent when it
     * did not answer) */
    size_t n = o->sessions != NULL ? json_object_array_length(o->sessions) : 0;
    for (size_t i = 0; i < n && runtimes != NULL; i++) {
        json_object *s = json_object_array_get_idx(o->sessions, i), *id, *rt;
        if (json_object_object_get_ex(s, "session_id", &id) &&
            json_object_object_get_ex(runtimes, json_object_get_string(id), &rt))
            json_object_object_add(s, "runtime", json_object_get(rt));
    }
    json_object_object_add(reply, "now", json_object_new_int64(o->now));
    json_object_object_add(reply, "day_start", json_object_new_int64(o->day_start));
    json_object_object_add(state, "backend", json_object_new_string(sg_state_backend(sg_gw.state)));
    json_object_object_add(state, "available", json_object_new_boolean(o->state_available));
    json_object_object_add(reply, "state", state);
    json_object_object_add(reply, "tenants", o->tenants);
    json_object_object_add(reply, "tenants_total", json_object_new_int64((int64_t)o->total_tenants));
    json_object_object_add(reply, "sessions", o->sessions);
    json_object_object_add(reply, "sessions_total",
                           o->state_available ? json_object_new_int64((int64_t)o->total_sessions) : NULL);
    json_object_object_add(reply, "rejections_since", json_object_new_int64(sg_stats_since()));
    o->tenants = o->sessions = NULL;
    dash_reply(o->hold, reply);
}

/* A proxy's sessions with their details: session id -> runtime, into
 * o->runtimes; the overview goes once every proxy has answered. */
static void on_proxy_sessions(void *data, const sg_upstream_reply_t *r)
{
    overview_t *o = data;
    json_object *body = r->status == 200 ? proxy_json(r) : NULL, *details;
    if (body != NULL && json_object_object_get_ex(body, "details", &details) &&
        json_object_is_type(details, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(details); i++) {
            json_object *d = json_object_array_get_idx(details, i), *id, *rt;
            if (json_object_object_get_ex(d, "session_id", &id) && json_object_is_type(id, json_type_string) &&
                json_object_object_get_ex(d, "runtime", &rt) && json_object_is_type(rt, json_type_string) &&
                json_object_get_string_len(rt) <= 32)
                json_object_object_add(o->runtimes, json_object_get_string(id), json_object_get(rt));
        }
    }
    json_object_put(body);
    if (--o->proxies_pending != 0)
        return;
    overview_send(o, json_object_object_length(o->runtimes) != 0 ? o->runtimes : NULL);
    overview_free(o);
}

static void on_live_sessions(void *data, int available, size_t n, const sg_live_session_t *list)
{
    overview_t *o = data;
    o->state_available = available;
    o->live = sg_xcalloc(o->ntenants + 1, sizeof(*o->live));
    o->sessions = json_object_new_array();
    o->total_sessions = available ? n : 0;
    for (size_t i = 0; available && i < n; i++) {
        const sg_live_session_t *s = &list[i];
        long t = tenant_index(o, s->tenant_id);
        if (t >= 0)
            o->live[t]++;
        if (i >= DASH_MAX_SESSIONS)
            continue;
        json_object *e = sg_gw_live_session_json(s);
        json_object_object_add(
            e, "tenant",
            t >= 0 ? json_object_get(json_object_object_get(json_object_array_get_idx(o->tenants, (size_t)t), "name"))
                   : NULL);
        json_object_array_add(o->sessions, e);
    }
    if (sg_http_hold_req(o->hold) == NULL || json_object_array_length(o->sessions) == 0) {
        overview_send(o, NULL);
        overview_free(o);
        return;
    }
    /* every proxy is asked (one more pending while they are started) */
    o->runtimes = json_object_new_object();
    o->proxies_pending = sg_proxies_count() + 1;
    for (size_t i = 0; i < sg_proxies_count(); i++)
        if (sg_upstream_start(sg_proxies_at(i)->up, "GET", "/sessions?details=1", NULL, 0, NULL, DASH_PROXY_TIMEOUT_MS,
                              NULL, NULL, on_proxy_sessions, o) == NULL)
            o->proxies_pending--;
    static const sg_upstream_reply_t none = {.err = "", .body = ""};
    on_proxy_sessions(o, &none);
}

static void overview_done(sg_gw_job_t *job)
{
    overview_t *o = (overview_t *)job;
    h2o_req_t *req = sg_http_hold_req(o->hold);
    if (job->rc != 0 || req == NULL) {
        if (req != NULL)
            dash_error(req, 500, "internal", job->err);
        overview_free(o);
        return;
    }
    /* the callback may run before this returns (the memory backend) */
    sg_state_sessions_list(sg_gw.state, 0, on_live_sessions, o);
}

int sg_gw_admin_on_overview(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    overview_t *o = sg_xcalloc(1, sizeof(*o));
    o->hold = sg_http_hold(req);
    o->now = sg_wall_s();
    o->day_start = o->now - o->now % 86400;
    sg_gw_db_run(&o->job, overview_fn, overview_done);
    return 0;
}

/* ---- GET /admin/stats ---------------------------------------------------------------- */

static json_object *ms_or_null(double s)
{
    return s < 0 ? NULL : sg_json_new_double(s * 1000, 3);
}

int sg_gw_admin_on_stats(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    long seconds;
    if (query_int(req, "seconds", 1, SG_STATS_SECONDS, 300, &seconds) != 0)
        return 0;
    sg_stats_point_t *pts = sg_xcalloc((size_t)seconds, sizeof(*pts));
    int64_t now = sg_wall_s();
    json_object *o = json_object_new_object(), *ex = json_object_new_array(), *p50 = json_object_new_array(),
                *p99 = json_object_new_array();
    uint64_t total = 0;

    sg_stats_series(now, (size_t)seconds, pts);
    for (long i = 0; i < seconds; i++) {
        json_object_array_add(ex, json_object_new_int64(pts[i].executions));
        json_object_array_add(p50, ms_or_null(pts[i].p50));
        json_object_array_add(p99, ms_or_null(pts[i].p99));
        total += pts[i].executions;
    }
    free(pts);
    json_object_object_add(o, "now", json_object_new_int64(now));
    json_object_object_add(o, "start", json_object_new_int64(now - seconds + 1));
    json_object_object_add(o, "seconds", json_object_new_int64(seconds));
    json_object_object_add(o, "executions_total", json_object_new_int64((int64_t)total));
    json_object_object_add(o, "executions", ex);
    json_object_object_add(o, "p50_ms", p50);
    json_object_object_add(o, "p99_ms", p99);
    sg_metrics_request("admin", 200);
    sg_http_send_json(req, 200, o);
    return 0;
}

/* ---- GET /admin/executions ------------------------------------------------------------ */

typedef struct {
    sg_gw_job_t job;
    sg_http_hold_t *hold;
    int limit;
    sg_store_t *st; /* during fn only */
    json_object *rows;
    /* tenant names met so far (few: at most limit) */
    int64_t ids[200];
    char names[200][SG_TENANT_NAME_MAX + 1];
    size_t nnames;
} execs_t;

static const char *tenant_name(execs_t *x, int64_t id)
{
    sg_tenant_t t;
    char err[256];
    for (size_t i = 0; i < x->nnames; i++)
        if (x->ids[i] == id)
            return x->names[i];
    if (x->nnames == sizeof(x->ids) / sizeof(x->ids[0]) || sg_store_tenant_get(x->st, id, &t, err, sizeof(err)) != 1)
        return NULL;
    x->ids[x->nnames] = id;
    snprintf(x->names[x->nnames], sizeof(x->names[0]), "%s", t.name);
    return x->names[x->nnames++];
}

/* What became of a run, from the ledger's row. */
static const char *outcome(const sg_usage_t *u)
{
    return u->timed_out ? "timeout" : u->exit_code == 0 ? "success" : "error";
}

static void add_exec_row(const sg_usage_t *u, void *data)
{
    execs_t *x = data;
    const char *name = tenant_name(x, u->tenant_id);
    json_object *o = sg_gw_usage_row_json(u);
    json_object_object_add(o, "tenant", name != NULL ? json_object_new_string(name) : NULL);
    json_object_object_add(o, "tenant_id", json_object_new_int64(u->tenant_id));
    json_object_object_add(o, "outcome", json_object_new_string(outcome(u)));
    json_object_array_add(x->rows, o);
}

static void execs_fn(sg_gw_job_t *job, sg_store_t *st)
{
    execs_t *x = (execs_t *)job;
    x->st = st;
    x->rows = json_object_new_array();
    job->rc = sg_store_usage_recent(st, x->limit, add_exec_row, x, job->err, sizeof(job->err));
    x->st = NULL;
}

static void execs_done(sg_gw_job_t *job)
{
    execs_t *x = (execs_t *)job;
    h2o_req_t *req = sg_http_hold_req(x->hold);
    if (req != NULL && job->rc != 0) {
        dash_error(req, 500, "internal", job->err);
    } else if (req != NULL) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "executions", x->rows);
        x->rows = NULL;
        dash_reply(x->hold, o);
    }
    json_object_put(x->rows);
    sg_http_hold_release(x->hold);
    free(x);
}

int sg_gw_admin_on_executions(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    long limit;
    if (query_int(req, "limit", 1, 200, 20, &limit) != 0)
        return 0;
    execs_t *x = sg_xcalloc(1, sizeof(*x));
    x->hold = sg_http_hold(req);
    x->limit = (int)limit;
    sg_gw_db_run(&x->job, execs_fn, execs_done);
    return 0;
}

/* ---- GET /admin/health ---------------------------------------------------------------- */

typedef struct {
    sg_gw_job_t job;
    sg_http_hold_t *hold;
    uint64_t proxy_t0; /* when the call to the proxy started */
    double sqlite_ms;
} health_t;

static void health_fn(sg_gw_job_t *job, sg_store_t *st)
{
    health_t *h = (health_t *)job;
    sg_tenant_t t;
    uint64_t t0 = sg_now_us();
    /* a read that reaches the file: no tenant has id 0 */
    if (sg_store_tenant_get(st, 0, &t, job->err, sizeof(job->err)) < 0)
        job->rc = -1;
    h->sqlite_ms = (double)(sg_now_us() - t0) / 1000;
}

/* Copies member name of src into dst when it has type (strings at most 128
 * bytes): the proxy's reply is data, taken field by field. */
static void copy_field(json_object *dst, json_object *src, const char *name, json_type type)
{
    json_object *v;
    if (src == NULL || !json_object_object_get_ex(src, name, &v) || !json_object_is_type(v, type))
        return;
    if (type == json_type_string && json_object_get_string_len(v) > 128)
        return;
    json_object_object_add(dst, name, json_object_get(v));
}

static void on_proxy_health(void *data, const sg_upstream_reply_t *r)
{
    health_t *h = data;
    json_object *body = proxy_json(r), *o = json_object_new_object(), *proxy = json_object_new_object(),
                *docker = json_object_new_object(), *state = json_object_new_object(),
                *sqlite = json_object_new_object(), *pools = json_object_new_object(), *v;
    int proxy_ok = body != NULL && (r->status == 200 || r->status == 503);
    int docker_ok = proxy_ok && json_object_object_get_ex(body, "docker", &v) && json_object_get_boolean(v);
    int state_ok = sg_state_available(sg_gw.state), sqlite_ok = h->job.rc == 0;

    json_object_object_add(proxy, "reachable", json_object_new_boolean(proxy_ok));
    json_object_object_add(proxy, "ms", sg_json_new_double((double)(sg_now_us() - h->proxy_t0) / 1000, 3));
    if (!proxy_ok)
        json_object_object_add(proxy, "detail",
                               json_object_new_string(r->err != NULL ? r->err : "the proxy's reply is not JSON"));
    copy_field(proxy, body, "status", json_type_string);
    copy_field(proxy, body, "runtime", json_type_string);
    copy_field(proxy, body, "warning", json_type_string);
    copy_field(proxy, body, "sessions", json_type_int);
    copy_field(proxy, body, "containers", json_type_int);
    copy_field(proxy, body, "max_containers", json_type_int);
    copy_field(proxy, body, "pool_size", json_type_int);
    json_object_object_add(docker, "ok", json_object_new_boolean(docker_ok));
    copy_field(docker, body, "docker_version", json_type_string);
    copy_field(docker, body, "api_version", json_type_string);
    if (proxy_ok && !docker_ok)
        copy_field(docker, body, "detail", json_type_string);
    if (body != NULL && json_object_object_get_ex(body, "pools", &v) && json_object_is_type(v, json_type_object)) {
        json_object_object_foreach(v, lang, ready)
        {
            if (strlen(lang) <= 32 && json_object_is_type(ready, json_type_int))
                json_object_object_add(pools, lang, json_object_get(ready));
        }
    }
    json_object_object_add(state, "backend", json_object_new_string(sg_state_backend(sg_gw.state)));
    json_object_object_add(state, "available", json_object_new_boolean(state_ok));
    json_object_object_add(sqlite, "ok", json_object_new_boolean(sqlite_ok));
    json_object_object_add(sqlite, "ms", sg_json_new_double(h->sqlite_ms, 3));
    if (!sqlite_ok)
        json_object_object_add(sqlite, "detail", json_object_new_string(h->job.err));

    json_object_object_add(o, "status",
                           json_object_new_string(proxy_ok && docker_ok && state_ok && sqlite_ok ? "ok" : "degraded"));
    json_object_object_add(o, "gateway_started_at", json_object_new_int64(sg_stats_since()));
    json_object_object_add(o, "proxy", proxy);
    json_object_object_add(o, "docker", docker);
    json_object_object_add(o, "state", state);
    json_object_object_add(o, "sqlite", sqlite);
    json_object_object_add(o, "pools", pools);
    json_object_object_add(o, "proxies", sg_gw_proxies_json());
    dash_reply(h->hold, o);
    json_object_put(body);
    sg_http_hold_release(h->hold);
    free(h);
}

static void health_done(sg_gw_job_t *job)
{
    health_t *h = (health_t *)job;
    static const sg_upstream_reply_t none = {.err = "the gateway could not start the call", .body = ""};
    h->proxy_t0 = sg_now_us();
    if (sg_http_hold_req(h->hold) == NULL ||
        sg_upstream_start(sg_gw.upstream, "GET", "/health", NULL, 0, NULL, DASH_PROXY_TIMEOUT_MS, NULL, NULL,
                          on_proxy_health, h) == NULL)
        on_proxy_health(h, &none);
}

int sg_gw_admin_on_health(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    health_t *h = sg_xcalloc(1, sizeof(*h));
    h->hold = sg_http_hold(req);
    sg_gw_db_run(&h->job, health_fn, health_done);
    return 0;
}

/* ---- GET /dashboard -------------------------------------------------------------------- */

/* The page runs only its own files: scripts, styles, images and calls to
 * this origin, nothing inline, in no frame; no referrer leaves it. */
const char *const sg_gw_dashboard_headers[] = {
    "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options: nosniff",
    "X-Frame-Options: DENY",
    "Referrer-Policy: no-referrer",
    "Cache-Control: no-cache",
    NULL,
};
