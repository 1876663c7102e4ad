/*
 * api.c — the public API: every request is authenticated with a tenant's
 * token, rate limited, checked against the tenant's quotas and caps, then
 * forwarded to the proxy; the answer is recorded (usage, session state)
 * and passed back unchanged.
 *
 * A request's journey, all on the loop thread except the DB steps:
 *   route -> [DB] token + session owner -> [state] rate -> route handler
 *   -> [state] quota / session slot -> [upstream] proxy -> [DB, state] records
 */
#include "clock.h"
#include "close.h"
#include "concurrency.h"
#include "credentials.h"
#include "db.h"
#include "fields.h"
#include "gateway.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "metrics.h"
#include "sse_tail.h"
#include "templates.h"
#include "upstream.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The files route's query string: "?path=" and a path the proxy takes
 * (SG_MAX_PATH, 1024 bytes) with every byte percent-encoded, and some room.
 * A longer one is refused, never cut: a cut query names another file. */
#define FILES_QUERY_MAX 3200

#define SSE_MAX_QUEUED (8u << 20)
#define STREAM_EVENT_MAX (64u << 10) /* the result event is a few hundred bytes */

typedef enum {
    R_CREATE,   /* POST /sessions */
    R_LIST,     /* GET /sessions */
    R_GET,      /* GET /sessions/{id} */
    R_DELETE,   /* DELETE /sessions/{id} */
    R_EXECUTE,  /* POST /sessions/{id}/execute */
    R_COMMAND,  /* POST /sessions/{id}/commands */
    R_FILES,    /* PUT, GET /sessions/{id}/files */
    R_EPHEMERAL, /* POST /execute */
    R_LIBRARIES, /* POST /sessions/{id}/libraries */
    R_TEMPLATES, /* GET /templates */
    R_TEMPLATE_DELETE /* DELETE /templates/{name} */
} route_t;

static const char *const route_names[] = {"create_session", "list_sessions", "get_session",       "delete_session",
                                          "execute",        "command",       "files",             "ephemeral_execute",
                                          "install_library", "list_templates", "delete_template"};

typedef struct {
    sg_gw_job_t job; /* the auth job; first member */
    sg_http_hold_t *hold;
    route_t route;
    char method[8];
    char sid[37];
    char template_name[256]; /* DELETE /templates/{name} */
    int64_t template_row;    /* a keep_template create's slot (templates.h), 0 if none */
    char token[SG_TOKEN_MAX + 1];
    char query[FILES_QUERY_MAX]; /* "?path=..." for files */
    char *body;            /* a copy of the request body */
    size_t body_len;
    char content_type[128];
    int want_stream;

    sg_tenant_t tenant;
    int authed;
    sg_session_rec_t sess;
    int sess_found;

    sg_rate_result_t rate;
    int rate_known;

    json_object *json;     /* the parsed body, rewritten before forwarding */
    char lang[32];
    double timeout;        /* seconds, the execution's */
    char reservation[40];
    sg_exec_slot_t slot;   /* one of the tenant's max_concurrent_execs, while held */
    char day[9];
    double started_at;
    uint64_t started_us;   /* monotonic, when the run was sent to the proxy */

    sg_http_stream_t *stream;
    sg_sse_tail_t tail;    /* a streamed reply, parsed as it passes for its result event */
    long up_status;

    sg_upstream_req_t *up;        /* the call to the proxy while in flight */
    sg_upstream_done_cb up_done;  /* its callback */
    sg_upstream_req_t *cancel_up; /* DELETE /requests/{rid} while in flight */
    char rid[33];                 /* names an execution to the proxy (X-Sandgate-Request-Id) */
    h2o_timeout_entry_t cancel_retry; /* the proxy did not have the request yet */
    int cancel_tries;
    char up_retry_after[16]; /* the proxy's Retry-After, passed on with its 429 / 503 */
} gw_req_t;

/* Every request ends here, whatever the path (reply, upstream failure,
 * client gone, stream end): an execution slot it holds is given back. */
static void gw_free(gw_req_t *g)
{
    sg_upstream_cancel(g->up);
    sg_upstream_cancel(g->cancel_up);
    if (h2o_timeout_is_linked(&g->cancel_retry))
        h2o_timeout_unlink(&g->cancel_retry);
    sg_exec_slot_release(&g->slot);
    sg_http_hold_release(g->hold);
    free(g->body);
    json_object_put(g->json);
    sg_sse_tail_free(&g->tail);
    free(g);
}

static h2o_req_t *gw_http(gw_req_t *g)
{
    return sg_http_hold_req(g->hold);
}

/* ---- replies ------------------------------------------------------------------ */

static void add_rate_headers(h2o_req_t *req, const sg_rate_result_t *r)
{
    char v[32];
    snprintf(v, sizeof(v), "%ld", r->limit);
    sg_http_add_header(req, "x-ratelimit-limit", v);
    snprintf(v, sizeof(v), "%ld", r->remaining);
    sg_http_add_header(req, "x-ratelimit-remaining", v);
    snprintf(v, sizeof(v), "%.0f", ceil(r->reset_s));
    sg_http_add_header(req, "x-ratelimit-reset", v);
}

static void reply_prepare(gw_req_t *g, h2o_req_t *req, int status)
{
    if (g->rate_known)
        add_rate_headers(req, &g->rate);
    if ((status == 429 || status == 503) && g->up_retry_after[0])
        sg_http_add_header(req, "retry-after", g->up_retry_after);
    sg_metrics_request(route_names[g->route], status);
}

static void reply_error(gw_req_t *g, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void reply_error(gw_req_t *g, int status, const char *code, const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    h2o_req_t *req = gw_http(g);
    if (req == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    reply_prepare(g, req, status);
    sg_http_send_error(req, status, code, "%s", detail);
}

static void reply_json(gw_req_t *g, int status, json_object *o)
{
    h2o_req_t *req = gw_http(g);
    if (req == NULL) {
        json_object_put(o);
        return;
    }
    reply_prepare(g, req, status);
    sg_http_send_json(req, status, o);
}

static void reply_raw(gw_req_t *g, int status, const char *ctype, const char *body, size_t len)
{
    h2o_req_t *req = gw_http(g);
    if (req == NULL)
        return;
    reply_prepare(g, req, status);
    sg_http_send_body(req, status, ctype[0] ? ctype : "application/json", body, len);
}

static void vreply_429(gw_req_t *g, const char *code, const char *limit, double retry_after, const char *fmt,
                       va_list ap)
{
    char detail[512], v[32];
    h2o_req_t *req = gw_http(g);
    sg_metrics_quota_rejection(limit);
    if (req == NULL)
        return;
    vsnprintf(detail, sizeof(detail), fmt, ap);
    snprintf(v, sizeof(v), "%.0f", ceil(retry_after) < 1 ? 1 : ceil(retry_after));
    sg_http_add_header(req, "retry-after", v);
    reply_prepare(g, req, 429);
    sg_http_send_error(req, 429, code, "%s", detail);
}

static void reply_too_many(gw_req_t *g, const char *limit, double retry_after, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void reply_too_many(gw_req_t *g, const char *limit, double retry_after, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreply_429(g, "quota_exceeded", limit, retry_after, fmt, ap);
    va_end(ap);
}

/* An upstream failure with no reply from the proxy. */
static void reply_upstream_failure(gw_req_t *g, const sg_upstream_reply_t *r)
{
    if (sg_http_hold_gone(g->hold)) {
        reply_error(g, 499, "client_closed", "the client went away");
    } else if (r->timed_out) {
        sg_metrics_upstream_error("timeout");
        reply_error(g, 504, "upstream_timeout", "the sandbox service did not answer in time");
    } else {
        sg_metrics_upstream_error("unreachable");
        reply_error(g, 502, "proxy_unavailable", "the sandbox service is unavailable: %s",
                    r->err != NULL ? r->err : "no reply");
    }
}

/* ---- forwarding ----------------------------------------------------------------- */

static void forward(gw_req_t *g, const char *method, const char *path, long timeout_ms, sg_upstream_done_cb done);

static void forward_body(gw_req_t *g, const char **body, size_t *len, const char **ctype)
{
    if (g->json != NULL) {
        *body = json_object_to_json_string_length(g->json, JSON_C_TO_STRING_PLAIN, len);
        *ctype = "application/json";
    } else {
        *body = g->body;
        *len = g->body_len;
        *ctype = g->content_type[0] ? g->content_type : NULL;
    }
}

static void on_stream_head(void *data, long status, const char *content_type)
{
    gw_req_t *g = data;
    h2o_req_t *req = gw_http(g);
    g->up_status = status;
    if (req == NULL)
        return;
    reply_prepare(g, req, (int)status);
    g->stream = sg_http_stream_start(req, (int)status, content_type[0] ? content_type : "text/event-stream",
                                     SSE_MAX_QUEUED);
}

static void on_stream_data(void *data, const char *p, size_t len)
{
    gw_req_t *g = data;
    sg_sse_tail_feed(&g->tail, p, len);
    if (gw_http(g) != NULL && g->stream != NULL)
        sg_http_stream_write(g->stream, p, len);
}

/* Keeps what the reply to the client passes on from the proxy's headers
 * (its Retry-After), then hands the reply to the route's callback. */
static void on_forwarded(void *data, const sg_upstream_reply_t *r)
{
    gw_req_t *g = data;
    g->up = NULL;
    snprintf(g->up_retry_after, sizeof(g->up_retry_after), "%s", r->retry_after != NULL ? r->retry_after : "");
    g->up_done(g, r);
}

/* Sends the request on to the proxy; done gets the reply, or a failure
 * (status 0) when the call cannot be made or the client has gone already. */
static void forward(gw_req_t *g, const char *method, const char *path, long timeout_ms, sg_upstream_done_cb done)
{
    const char *body = NULL, *ctype = NULL;
    const char *headers[2] = {NULL, NULL};
    char rid_header[64];
    size_t len = 0;
    char full[FILES_QUERY_MAX + 128];

    g->up_done = done;
    if (sg_http_hold_gone(g->hold)) {
        sg_upstream_reply_t fail = {.err = "the client went away", .body = "", .content_type = "", .retry_after = "",
                                    .code = ""};
        done(g, &fail);
        return;
    }
    if (strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0)
        forward_body(g, &body, &len, &ctype);
    if (g->rid[0]) {
        snprintf(rid_header, sizeof(rid_header), "X-Sandgate-Request-Id: %s", g->rid);
        headers[0] = rid_header;
    }
    snprintf(full, sizeof(full), "%s%s", path, g->query);
    g->up = sg_upstream_start_with_headers(sg_gw.upstream, method, full, headers, body, len, ctype, timeout_ms,
                                           g->want_stream ? on_stream_head : NULL,
                                           g->want_stream ? on_stream_data : NULL, on_forwarded, g);
    if (g->up == NULL) {
        sg_upstream_reply_t fail = {.err = "cannot start a request to the proxy", .body = "", .content_type = "",
                                    .retry_after = "", .code = ""};
        done(g, &fail);
    }
}

/* ---- records after an execution ---------------------------------------------- */

/* An execution is answered only once its usage row is on record in
 * SQLite: a client that has its result finds it in the ledger, and a
 * gateway that dies after answering has lost nothing billable. The job
 * carries the answer (a copy of the proxy's reply, or, streamed, only the
 * end of the stream) to usage_done, which sends it. */
typedef struct {
    sg_gw_job_t job;
    sg_usage_t usage;
    int count_session;
    gw_req_t *g;
    int status;
    char ctype[128];
    char *body;
    size_t body_len;
} usage_job_t;

static void usage_fn(sg_gw_job_t *job, sg_store_t *st)
{
    usage_job_t *j = (usage_job_t *)job;
    job->rc = sg_store_usage_add(st, &j->usage, job->err, sizeof(job->err));
    if (job->rc == 0 && j->count_session)
        job->rc = sg_store_session_count_exec(st, j->usage.session_id, job->err, sizeof(job->err));
}

static void noop_state_cb(void *data, const sg_state_result_t *r)
{
}

static void touch_session(gw_req_t *g, int add_exec)
{
    if (g->route != R_EPHEMERAL && g->sid[0])
        sg_state_session_touch(sg_gw.state, g->sid, sg_gw_now_up(), g->tenant.idle_timeout, add_exec, noop_state_cb,
                               NULL);
}

/* Sends what the proxy answered to an execution (or ends the stream that
 * already carried it) and lets the request go. */
static void exec_answer(gw_req_t *g, int status, const char *ctype, const char *body, size_t len)
{
    if (g->want_stream) {
        if (gw_http(g) != NULL && g->stream != NULL && status != 0)
            sg_http_stream_finish(g->stream);
        else if (gw_http(g) != NULL && g->stream != NULL)
            sg_http_stream_abort(g->stream); /* the proxy's stream broke off */
    } else {
        reply_raw(g, status, ctype, body, len);
    }
    touch_session(g, status == 200);
    gw_free(g);
}

static void usage_done(sg_gw_job_t *job)
{
    usage_job_t *j = (usage_job_t *)job;
    if (job->rc != 0) {
        /* The client still gets its result: the run happened. */
        sg_error("usage: cannot record an execution of tenant %lld: %s", (long long)j->usage.tenant_id, job->err);
    }
    exec_answer(j->g, j->status, j->ctype, j->body != NULL ? j->body : "", j->body_len);
    free(j->body);
    free(j);
}

/* The seconds an execution is billed: the wall time the proxy measured
 * (from handing the run to the sandbox's agent to its end), never the
 * duration the sandbox reported, which code inside it could forge. It
 * cannot exceed what the gateway itself waited; when the reply has no
 * usable wall_time (a stream that broke off), the gateway's own measure. */
static double bill_seconds(const gw_req_t *g, double proxy_wall)
{
    double waited = (double)(sg_now_us() - g->started_us) / 1e6;
    if (!isfinite(proxy_wall) || proxy_wall < 0 || proxy_wall > waited)
        return waited;
    return proxy_wall;
}

/* Records what the proxy said about one execution (`result`, its result
 * object): ledger row, the day's seconds, metrics; the answer follows once
 * the row is written. Returns -1 when out of memory (nothing submitted). */
static int record_execution(gw_req_t *g, const char *result, size_t result_len, const sg_upstream_reply_t *r)
{
    char *text = strndup(result, result_len);
    json_object *o = text != NULL ? json_tokener_parse(text) : NULL, *v;
    usage_job_t *j = calloc(1, sizeof(*j));
    double duration = -1; /* none yet: bill_seconds falls back to the gateway's measure */

    free(text);
    if (j == NULL || (!g->want_stream && (j->body = malloc(r->body_len + 1)) == NULL)) {
        if (j != NULL)
            free(j);
        json_object_put(o);
        return -1;
    }
    j->g = g;
    j->status = (int)r->status;
    snprintf(j->ctype, sizeof(j->ctype), "%s", r->content_type);
    if (j->body != NULL) {
        memcpy(j->body, r->body, r->body_len);
        j->body[r->body_len] = '\0';
        j->body_len = r->body_len;
    }
    j->usage.tenant_id = g->tenant.id;
    snprintf(j->usage.session_id, sizeof(j->usage.session_id), "%s", g->route == R_EPHEMERAL ? "" : g->sid);
    snprintf(j->usage.lang, sizeof(j->usage.lang), "%s", g->lang);
    snprintf(j->usage.kind, sizeof(j->usage.kind), "%s",
             g->route == R_EPHEMERAL ? "ephemeral" : g->route == R_COMMAND ? "command" : "execute");
    j->usage.started_at = g->started_at;
    j->usage.exit_code = -1;
    if (o != NULL) {
        if (json_object_object_get_ex(o, "wall_time", &v) &&
            (json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
            duration = json_object_get_double(v);
        if (json_object_object_get_ex(o, "exit_code", &v))
            j->usage.exit_code = json_object_get_int(v);
        if (json_object_object_get_ex(o, "timed_out", &v))
            j->usage.timed_out = json_object_get_boolean(v);
        if (json_object_object_get_ex(o, "stdout", &v))
            j->usage.output_bytes += json_object_get_string_len(v);
        if (json_object_object_get_ex(o, "stderr", &v))
            j->usage.output_bytes += json_object_get_string_len(v);
    }
    j->usage.duration = bill_seconds(g, duration);
    duration = j->usage.duration;
    j->count_session = g->route != R_EPHEMERAL;
    j->job.fn = usage_fn;
    j->job.done = usage_done;

    sg_metrics_execution(g->lang[0] ? g->lang : "unknown",
                         j->usage.timed_out ? "timeout" : j->usage.exit_code == 0 ? "success" : "error", duration);
    sg_state_quota_add_seconds(sg_gw.state, g->tenant.id, g->day, duration, noop_state_cb, NULL);
    json_object_put(o);
    sg_gw_db_submit(&j->job);
    return 0;
}

/* The proxy no longer knows a session the records say is live (it was
 * restarted): close the records so that the tenant's slot comes back. Only
 * the error's type says so — the body's text may echo what the client sent
 * (a file path). The close asks the proxy once more and frees the slot only
 * on its answer. */
static void maybe_session_lost(gw_req_t *g, const sg_upstream_reply_t *r)
{
    if (r->status == 404 && g->sid[0] && g->route != R_EPHEMERAL && strcmp(r->code, "no_such_session") == 0)
        sg_gw_close_session(g->sid, g->tenant.id, "proxy_lost", NULL, NULL);
}

static void on_exec_reply(void *data, const sg_upstream_reply_t *r)
{
    gw_req_t *g = data;
    const char *result = NULL;
    size_t len = 0;

    if (r->status == 0 && g->want_stream && g->up_status == 200 && !g->tail.saw_error) {
        /* the proxy's stream broke off after the run began: the run still
         * counts (at the gateway's own measure), and the client's stream is
         * ended as broken, not as complete */
        sg_warn("usage: a streamed execution of tenant %lld broke off: %s", (long long)g->tenant.id,
                r->err != NULL ? r->err : "no reason");
        if (record_execution(g, "{}", 2, r) == 0)
            return; /* ended by usage_done */
    }
    if (r->status == 0) {
        sg_metrics_execution(g->lang[0] ? g->lang : "unknown", "failed", -1);
        if (g->stream == NULL)
            reply_upstream_failure(g, r);
        else if (gw_http(g) != NULL)
            sg_http_stream_abort(g->stream);
        gw_free(g);
        return;
    }
    if (r->status == 200 && g->want_stream) {
        result = sg_sse_tail_result(&g->tail, &len);
        if (result == NULL && !g->tail.saw_error) {
            /* the stream ended without its result: the run still counts */
            sg_warn("usage: a streamed execution of tenant %lld ended without its result event",
                    (long long)g->tenant.id);
            result = "{}";
            len = 2;
        }
    } else if (r->status == 200) {
        result = r->body;
        len = r->body_len;
    } else {
        if (r->status >= 500)
            sg_metrics_upstream_error("5xx");
        maybe_session_lost(g, r);
    }
    if (result != NULL && record_execution(g, result, len, r) == 0)
        return; /* answered by usage_done */
    if (result != NULL)
        sg_error("usage: out of memory; an execution of tenant %lld is not recorded", (long long)g->tenant.id);
    exec_answer(g, (int)r->status, r->content_type, r->body, r->body_len);
}

/* ---- daily quotas ------------------------------------------------------------------ */

typedef struct {
    sg_gw_job_t job;
    gw_req_t *g;
    sg_usage_total_t total;
} seed_job_t;

static void quota_reserve(gw_req_t *g);

static void seed_fn(sg_gw_job_t *job, sg_store_t *st)
{
    seed_job_t *j = (seed_job_t *)job;
    int64_t now = sg_wall_s();
    int64_t day_start = now - now % 86400;
    job->rc = sg_store_usage_total(st, j->g->tenant.id, (double)day_start, (double)day_start + 86400, &j->total,
                                   job->err, sizeof(job->err));
}

static void on_seeded(void *data, const sg_state_result_t *r)
{
    quota_reserve(data);
}

static void seed_done(sg_gw_job_t *job)
{
    seed_job_t *j = (seed_job_t *)job;
    gw_req_t *g = j->g;
    if (job->rc != 0) {
        reply_error(g, 500, "internal", "the usage ledger cannot be read: %s", job->err);
        gw_free(g);
    } else {
        sg_state_quota_seed(sg_gw.state, g->tenant.id, g->day, j->total.executions, j->total.seconds, on_seeded, g);
    }
    free(j);
}

static void start_execution(gw_req_t *g)
{
    char path[128];
    long timeout_ms = (long)(g->timeout * 1000) + sg_gw.upstream_grace_ms;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    g->started_at = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    g->started_us = sg_now_us();
    if (g->route == R_EPHEMERAL)
        snprintf(path, sizeof(path), "/execute");
    else
        snprintf(path, sizeof(path), "/sessions/%s/%s", g->sid, g->route == R_COMMAND ? "commands" : "execute");
    forward(g, "POST", path, timeout_ms, on_exec_reply);
}

static void on_quota(void *data, int available, sg_quota_status_t status, int64_t execs, double seconds)
{
    gw_req_t *g = data;
    if (!available) {
        /* fail open: the ledger in SQLite still records every execution */
        start_execution(g);
        return;
    }
    switch (status) {
    case SG_QUOTA_UNSEEDED: {
        seed_job_t *j = calloc(1, sizeof(*j));
        j->g = g;
        j->job.fn = seed_fn;
        j->job.done = seed_done;
        sg_gw_db_submit(&j->job);
        return;
    }
    case SG_QUOTA_EXECS:
        reply_too_many(g, "execs_per_day", 86400 - sg_wall_s() % 86400,
                       "the tenant's %ld executions for today (UTC) are used up", g->tenant.execs_per_day);
        gw_free(g);
        return;
    case SG_QUOTA_SECONDS:
        reply_too_many(g, "exec_seconds_per_day", 86400 - sg_wall_s() % 86400,
                       "the tenant's %.0f execution seconds for today (UTC) are used up", g->tenant.exec_seconds_per_day);
        gw_free(g);
        return;
    case SG_QUOTA_OK:
        break;
    }
    start_execution(g);
}

static void quota_reserve(gw_req_t *g)
{
    sg_state_quota_reserve(sg_gw.state, g->tenant.id, g->day, g->tenant.execs_per_day, g->tenant.exec_seconds_per_day,
                           on_quota, g);
}

/* ---- executions in flight ------------------------------------------------------------- */

typedef struct {
    gw_req_t *g;
    void (*next)(gw_req_t *g);
} slot_wait_t;

static void reply_concurrency_limit(gw_req_t *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reply_concurrency_limit(gw_req_t *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    /* a slot frees when one of the tenant's runs ends */
    vreply_429(g, "concurrency_limit", "concurrent_execs", 1, fmt, ap);
    va_end(ap);
}

static void on_exec_slot(void *data, int granted, long in_flight)
{
    slot_wait_t w = *(slot_wait_t *)data;
    free(data);
    if (!granted) {
        reply_concurrency_limit(w.g, "the tenant already has %ld executions in flight, its limit of %ld", in_flight,
                                w.g->tenant.max_concurrent_execs);
        gw_free(w.g);
        return;
    }
    w.next(w.g);
}

/* Takes one of the tenant's max_concurrent_execs for a call to the proxy
 * that waits at most wait_ms, then runs next; past the cap: 429
 * concurrency_limit. The slot goes back in gw_free. */
static void exec_slot_take(gw_req_t *g, long wait_ms, void (*next)(gw_req_t *g))
{
    slot_wait_t *w = malloc(sizeof(*w));
    if (w == NULL) {
        reply_error(g, 500, "internal", "out of memory");
        gw_free(g);
        return;
    }
    w->g = g;
    w->next = next;
    sg_exec_slot_acquire(&g->slot, g->tenant.id, g->tenant.max_concurrent_execs,
                         (wait_ms + 999) / 1000 + SG_EXEC_LEASE_MARGIN_S, on_exec_slot, w);
}

/* ---- caps ---------------------------------------------------------------------------- */

/* Parses the body (400 on failure) into g->json. */
static int parse_json_body(gw_req_t *g)
{
    char err[256];
    if (g->content_type[0] && strncasecmp(g->content_type, "application/json", 16) != 0) {
        reply_error(g, 415, "unsupported_media_type", "the request body must be application/json, not %s",
                    g->content_type);
        return -1;
    }
    g->json = sg_json_parse_object(g->body, g->body_len, err, sizeof(err));
    if (g->json == NULL) {
        reply_error(g, 400, "bad_json", "%s", err);
        return -1;
    }
    return 0;
}

/* A number field of the body (fields.h): 0 with *out its value (def,
 * capped, when absent), or -1 after replying 400 naming the field. */
static int cap_number(gw_req_t *g, const char *field, double above, int whole, double cap, double def, double *out)
{
    const char *code;
    char detail[256];
    int r = sg_gw_number_field(g->json, field, above, whole, cap, out, &code, detail, sizeof(detail));
    if (r < 0) {
        reply_error(g, 400, code, "%s", detail);
        return -1;
    }
    if (r == 0)
        *out = def < cap ? def : cap;
    return 0;
}

static int check_lang(gw_req_t *g)
{
    const char *lang = "python";
    json_object *v;
    if (json_object_object_get_ex(g->json, "lang", &v) && v != NULL) {
        if (!json_object_is_type(v, json_type_string)) {
            reply_error(g, 400, "bad_field", "field \"lang\" must be a string");
            return -1;
        }
        lang = json_object_get_string(v);
    }
    snprintf(g->lang, sizeof(g->lang), "%s", lang);
    if (!sg_tenant_lang_allowed(&g->tenant, g->lang, strlen(g->lang))) {
        reply_error(g, 400, "language_not_allowed", "field \"lang\": \"%s\" is not allowed for this tenant (allowed: %s)",
                    g->lang, g->tenant.allowed_langs);
        return -1;
    }
    return 0;
}

/* ---- routes after authentication ---------------------------------------------------------- */

static void on_create_reply(void *data, const sg_upstream_reply_t *r);

static void on_reserved(void *data, const sg_state_result_t *r)
{
    gw_req_t *g = data;
    if (!r->available) {
        /* fail closed: without the shared count the cap cannot be kept */
        sg_metrics_upstream_error("redis");
        reply_error(g, 503, "state_unavailable", "session accounting is unavailable (Redis does not answer); try again");
        sg_gw_template_release(g->template_row);
        gw_free(g);
        return;
    }
    if (!r->ok) {
        reply_too_many(g, "sessions", 5, "the tenant already has %ld live sessions, its limit", g->tenant.max_sessions);
        sg_gw_template_release(g->template_row);
        gw_free(g);
        return;
    }
    forward(g, "POST", "/sessions", sg_gw.call_timeout_ms, on_create_reply);
}

typedef struct {
    sg_gw_job_t job;
    sg_session_rec_t rec;
    gw_req_t *g;
    json_object *reply;
} open_job_t;

static void open_fn(sg_gw_job_t *job, sg_store_t *st)
{
    open_job_t *j = (open_job_t *)job;
    job->rc = sg_store_session_open(st, &j->rec, job->err, sizeof(job->err));
    if (job->rc == 0 && j->g->template_row != 0 &&
        sg_store_template_bind(st, j->g->template_row, j->rec.id, job->err, sizeof(job->err)) != 0)
        sg_error("session %s: cannot bind its template slot: %s", j->rec.id, job->err);
}

/* The reply goes out once the session is on record: the client's next
 * request (which looks the owner up there) must find it. */
static void open_done(sg_gw_job_t *job)
{
    open_job_t *j = (open_job_t *)job;
    if (job->rc != 0) {
        sg_error("session %s: cannot record it: %s", j->rec.id, job->err);
        json_object_put(j->reply);
        reply_error(j->g, 500, "internal", "the session could not be recorded: %s", job->err);
        /* the proxy has a container for it: removed like any other */
        sg_gw_close_session(j->rec.id, j->rec.tenant_id, "deleted", NULL, NULL);
    } else {
        reply_json(j->g, 200, j->reply);
    }
    gw_free(j->g);
    free(j);
}

static void on_create_reply(void *data, const sg_upstream_reply_t *r)
{
    gw_req_t *g = data;
    json_object *o = NULL, *v;
    const char *sid = NULL;

    if (r->status == 200 && (o = json_tokener_parse(r->body)) != NULL && json_object_object_get_ex(o, "session_id", &v))
        sid = json_object_get_string(v);
    if (sid == NULL || strlen(sid) != 36) {
        sg_state_session_unreserve(sg_gw.state, g->tenant.id, g->reservation, noop_state_cb, NULL);
        sg_gw_template_release(g->template_row);
        if (r->status == 0)
            reply_upstream_failure(g, r);
        else if (r->status == 200)
            reply_error(g, 502, "bad_upstream_reply", "the sandbox service's reply had no session id");
        else
            reply_raw(g, (int)r->status, r->content_type, r->body, r->body_len);
        json_object_put(o);
        gw_free(g);
        return;
    }
    int64_t now = sg_gw_now_up();
    sg_live_session_t live = {0};
    snprintf(live.id, sizeof(live.id), "%s", sid);
    live.tenant_id = g->tenant.id;
    snprintf(live.lang, sizeof(live.lang), "%s", g->lang);
    live.created_at = live.last_used_at = now;
    live.idle_deadline = now + g->tenant.idle_timeout;
    live.lifetime_deadline = now + g->tenant.max_lifetime;
    sg_state_session_commit(sg_gw.state, g->reservation, &live, noop_state_cb, NULL);

    open_job_t *j = calloc(1, sizeof(*j));
    snprintf(j->rec.id, sizeof(j->rec.id), "%s", sid);
    j->rec.tenant_id = g->tenant.id;
    snprintf(j->rec.lang, sizeof(j->rec.lang), "%s", g->lang);
    j->rec.created_at = now;
    j->job.fn = open_fn;
    j->job.done = open_done;
    /* the proxy's reply, with the deadlines the gateway keeps */
    json_object_object_add(o, "idle_timeout", json_object_new_int64(g->tenant.idle_timeout));
    json_object_object_add(o, "expires_at", json_object_new_int64(live.lifetime_deadline));
    j->g = g;
    j->reply = o;
    sg_gw_db_submit(&j->job);
}

static void reserve_session(gw_req_t *g);
static void on_admitted(void *data, int status, const char *code, const char *detail, int64_t row);

static void route_create(gw_req_t *g)
{
    double d;
    json_object *v;

    if (parse_json_body(g) != 0 || check_lang(g) != 0)
        goto Done;
    if (cap_number(g, "timeout", 0, 0, g->tenant.max_timeout, sg_gw.default_timeout, &d) != 0)
        goto Done;
    json_object_object_add(g->json, "timeout", json_object_new_double(d));
    if (cap_number(g, "memory_mb", 0, 1, (double)g->tenant.max_memory_mb, (double)sg_gw.default_memory_mb, &d) != 0)
        goto Done;
    json_object_object_add(g->json, "memory_mb", json_object_new_int64((int64_t)d));
    if (cap_number(g, "cpus", 0, 0, g->tenant.max_cpus, sg_gw.default_cpus, &d) != 0)
        goto Done;
    json_object_object_add(g->json, "cpus", json_object_new_double(d));
    if (json_object_object_get_ex(g->json, "network", &v) && json_object_get_boolean(v) && !g->tenant.network_allowed) {
        reply_error(g, 400, "network_not_allowed", "field \"network\": this tenant may not use the network");
        goto Done;
    }
    /* a template (templates.h) is the only image a tenant may name, and only its own */
    const char *image = NULL;
    if (json_object_object_get_ex(g->json, "image", &v) && v != NULL) {
        if (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v) == 0 ||
            json_object_get_string_len(v) > 255) {
            reply_error(g, 400, "bad_field", "field \"image\" must be the name of one of this tenant's templates");
            goto Done;
        }
        image = json_object_get_string(v);
    }
    int keep = json_object_object_get_ex(g->json, "keep_template", &v) && json_object_is_type(v, json_type_boolean) &&
               json_object_get_boolean(v);
    /* the proxy labels a template with its owner, and starts one only for it */
    json_object_object_add(g->json, "owner", json_object_new_string(g->tenant.name));
    if (image != NULL || keep) {
        sg_gw_templates_admit(&g->tenant, image, keep, on_admitted, g);
        return;
    }
    reserve_session(g);
    return;
Done:
    gw_free(g);
}

/* A slot among the tenant's live sessions, then the create goes to the proxy. */
static void reserve_session(gw_req_t *g)
{
    unsigned char rnd[12];
    sg_random_bytes(rnd, sizeof(rnd));
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(g->reservation + i * 2, 3, "%02x", rnd[i]);
    sg_state_session_reserve(sg_gw.state, g->tenant.id, g->tenant.max_sessions, g->reservation, on_reserved, g);
}

static void on_admitted(void *data, int status, const char *code, const char *detail, int64_t row)
{
    gw_req_t *g = data;
    if (status != 0) {
        if (status == 429)
            reply_too_many(g, "templates", 60, "%s", detail);
        else
            reply_error(g, status, code, "%s", detail);
        gw_free(g);
        return;
    }
    g->template_row = row;
    reserve_session(g);
}

static void route_execution(gw_req_t *g)
{
    double d;
    json_object *v;

    if (parse_json_body(g) != 0)
        goto Done;
    if (g->route == R_EPHEMERAL) {
        if (check_lang(g) != 0)
            goto Done;
    } else {
        snprintf(g->lang, sizeof(g->lang), "%s", g->sess.lang);
    }
    if (cap_number(g, "timeout", 0, 0, g->tenant.max_timeout, sg_gw.default_timeout, &d) != 0)
        goto Done;
    if (!json_object_object_get_ex(g->json, "timeout", &v) || v == NULL) {
        /* a session's own default (set at create, already capped) applies */
        if (g->route == R_EPHEMERAL)
            json_object_object_add(g->json, "timeout", json_object_new_double(d));
        else
            d = g->tenant.max_timeout;
    }
    g->timeout = d;
    {
        unsigned char rnd[16];
        sg_random_bytes(rnd, sizeof(rnd));
        for (size_t i = 0; i < sizeof(rnd); i++)
            snprintf(g->rid + i * 2, 3, "%02x", rnd[i]);
    }
    if (json_object_object_get_ex(g->json, "stream", &v) && json_object_get_boolean(v))
        g->want_stream = 1;
    if (g->want_stream) /* asked by Accept: the proxy is asked in the body */
        json_object_object_add(g->json, "stream", json_object_new_boolean(1));
    sg_gw_day(sg_wall_s(), g->day);
    /* the slot first: a run refused for concurrency does not use the day's quota */
    exec_slot_take(g, (long)(g->timeout * 1000) + sg_gw.upstream_grace_ms, quota_reserve);
    return;
Done:
    gw_free(g);
}

static void on_plain_reply(void *data, const sg_upstream_reply_t *r)
{
    gw_req_t *g = data;
    if (r->status == 0) {
        reply_upstream_failure(g, r);
    } else {
        maybe_session_lost(g, r);
        if ((g->route == R_FILES || g->route == R_LIBRARIES) && r->status == 200)
            touch_session(g, 0);
        reply_raw(g, (int)r->status, r->content_type, r->body, r->body_len);
    }
    gw_free(g);
}

typedef struct {
    sg_gw_job_t job;
    gw_req_t *g;
    json_object *ids;
} list_job_t;

static void add_open_id(const sg_session_rec_t *s, void *data)
{
    json_object_array_add(data, json_object_new_string(s->id));
}

static void list_fn(sg_gw_job_t *job, sg_store_t *st)
{
    list_job_t *j = (list_job_t *)job;
    job->rc = sg_store_session_list_open(st, j->g->tenant.id, add_open_id, j->ids, job->err, sizeof(job->err));
}

static void list_done(sg_gw_job_t *job)
{
    list_job_t *j = (list_job_t *)job;
    if (job->rc != 0) {
        reply_error(j->g, 500, "internal", "cannot list sessions: %s", job->err);
        json_object_put(j->ids);
    } else {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "sessions", j->ids);
        reply_json(j->g, 200, o);
    }
    gw_free(j->g);
    free(j);
}

/* The reply to a DELETE goes out once the close is on record: a GET
 * /sessions right after must not list the session. The close removes the
 * container on the proxy first; when the proxy does not confirm it, the
 * session stays (open, counted) and the close is retried in the
 * background. */
static void on_delete_closed(void *data, int closed)
{
    gw_req_t *g = data;
    if (closed) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "status", json_object_new_string("closed"));
        reply_json(g, 200, o);
    } else {
        sg_metrics_upstream_error("unreachable");
        reply_error(g, 502, "proxy_unavailable",
                    "the sandbox service did not confirm that the session's container is removed; the session stays "
                    "open and counted until it does (the close is retried)");
    }
    gw_free(g);
}

/* A library install runs pip / npm in the sandbox (and may start an
 * installer container): it holds an execution slot like a run of code. */
static void forward_library(gw_req_t *g)
{
    char path[128];
    snprintf(path, sizeof(path), "/sessions/%s/libraries", g->sid);
    forward(g, "POST", path, sg_gw.library_timeout_ms, on_plain_reply);
}

static void on_template_reply(void *data, int status, const char *code, const char *detail, json_object *reply)
{
    gw_req_t *g = data;
    if (reply != NULL)
        reply_json(g, status, reply);
    else
        reply_error(g, status, code, "%s", detail);
    gw_free(g);
}

static void dispatch(gw_req_t *g)
{
    char path[128];
    switch (g->route) {
    case R_CREATE:
        route_create(g);
        return;
    case R_LIST: {
        list_job_t *j = calloc(1, sizeof(*j));
        j->g = g;
        j->ids = json_object_new_array();
        j->job.fn = list_fn;
        j->job.done = list_done;
        sg_gw_db_submit(&j->job);
        return;
    }
    case R_GET:
        snprintf(path, sizeof(path), "/sessions/%s", g->sid);
        forward(g, "GET", path, sg_gw.call_timeout_ms, on_plain_reply);
        return;
    case R_DELETE:
        sg_gw_close_session(g->sid, g->tenant.id, "deleted", on_delete_closed, g);
        return;
    case R_FILES:
        snprintf(path, sizeof(path), "/sessions/%s/files", g->sid);
        forward(g, g->method, path, sg_gw.call_timeout_ms, on_plain_reply);
        return;
    case R_LIBRARIES:
        if (parse_json_body(g) != 0) {
            gw_free(g);
            return;
        }
        exec_slot_take(g, sg_gw.library_timeout_ms, forward_library);
        return;
    case R_EXECUTE:
    case R_COMMAND:
    case R_EPHEMERAL:
        route_execution(g);
        return;
    case R_TEMPLATES:
        sg_gw_templates_list(g->tenant.id, on_template_reply, g);
        return;
    case R_TEMPLATE_DELETE:
        sg_gw_template_delete(g->tenant.id, g->template_name, on_template_reply, g);
        return;
    }
}

/* ---- authentication and the rate limit ------------------------------------------------- */

static void on_rate(void *data, const sg_rate_result_t *r)
{
    gw_req_t *g = data;
    if (r->available) {
        g->rate = *r;
        g->rate_known = 1;
        if (!r->allowed) {
            reply_too_many(g, "rate", r->retry_after_s, "rate limit: %ld requests per minute (burst %ld) exceeded",
                           g->tenant.rate_per_min, g->tenant.burst);
            gw_free(g);
            return;
        }
    }
    /* else fail open: a Redis outage must not stop the API */
    dispatch(g);
}

static void auth_fn(sg_gw_job_t *job, sg_store_t *st)
{
    gw_req_t *g = (gw_req_t *)job;
    int rc = sg_store_token_auth(st, g->token, strlen(g->token), &g->tenant, job->err, sizeof(job->err));
    if (rc < 0) {
        job->rc = -1;
        return;
    }
    g->authed = rc == 1;
    if (g->authed && g->sid[0]) {
        rc = sg_store_session_get(st, g->sid, &g->sess, job->err, sizeof(job->err));
        if (rc < 0) {
            job->rc = -1;
            return;
        }
        g->sess_found = rc == 1;
    }
}

static void auth_done(sg_gw_job_t *job)
{
    gw_req_t *g = (gw_req_t *)job;
    h2o_req_t *req = gw_http(g);

    if (job->rc != 0) {
        reply_error(g, 500, "internal", "the tenant database cannot be read: %s", job->err);
        goto Free;
    }
    if (!g->authed) {
        if (req != NULL)
            sg_http_add_header(req, "www-authenticate", "Bearer realm=\"sandgate\", error=\"invalid_token\"");
        reply_error(g, 401, "unauthorized", "the API token is unknown or revoked");
        goto Free;
    }
    /* a session of another tenant is answered as one that does not exist */
    if (g->sid[0] && (!g->sess_found || g->sess.tenant_id != g->tenant.id || g->sess.closed_at != 0)) {
        reply_error(g, 404, "no_such_session", "no session with id \"%s\"", g->sid);
        goto Free;
    }
    sg_state_rate_check(sg_gw.state, g->tenant.id, g->tenant.rate_per_min, g->tenant.burst, on_rate, g);
    return;
Free:
    gw_free(g);
}

/* ---- a client that goes away ------------------------------------------------------------
 * Noticed while its request waits (sg_http_hold_watch). Before the proxy is
 * called, forward() sees it and calls nothing. A call in flight:
 *  - an execution asks the proxy first (DELETE /requests/{rid}): an
 *    operation still waiting in the session's queue is dropped there (200),
 *    and the transfer is cut; one that has started (409 request_started) or
 *    is over (404) runs to its end, and its usage row is written as for any
 *    other — a run that happened is billed;
 *  - a file transfer, a library install, a session's details: the transfer
 *    is cut; the proxy sees its client go and drops the operation if it
 *    still waits (nothing of these is billed);
 *  - creating and deleting a session run to their end: a session the proxy
 *    made must be on record, and a close must finish. */

static void answer_gone(gw_req_t *g)
{
    /* to nobody: h2o then finds the connection closed and frees it */
    reply_error(g, 499, "client_closed", "the client went away");
    gw_free(g);
}

#define CANCEL_TRIES 5
#define CANCEL_RETRY_MS 100

static void ask_cancel(gw_req_t *g);

static void on_cancel_reply(void *data, const sg_upstream_reply_t *r)
{
    static h2o_timeout_t retry_timeout;
    gw_req_t *g = data;
    g->cancel_up = NULL;
    if (r->status == 200 && g->up != NULL) {
        sg_metrics_execution(g->lang[0] ? g->lang : "unknown", "cancelled", -1);
        sg_upstream_cancel(g->up);
        g->up = NULL;
        answer_gone(g);
    } else if (r->status == 404 && strcmp(r->code, "no_such_request") == 0 && g->up != NULL &&
               g->cancel_tries < CANCEL_TRIES) {
        /* not there yet (still on its way to the proxy), or over (its reply
         * on its way back): ask again shortly while the call lasts */
        if (retry_timeout.timeout == 0)
            h2o_timeout_init(sg_gw.loop, &retry_timeout, CANCEL_RETRY_MS);
        h2o_timeout_link(sg_gw.loop, &retry_timeout, &g->cancel_retry);
    }
    /* else the run goes on: on_exec_reply records it */
}

static void on_cancel_retry(h2o_timeout_entry_t *e)
{
    gw_req_t *g = H2O_STRUCT_FROM_MEMBER(gw_req_t, cancel_retry, e);
    if (g->up != NULL)
        ask_cancel(g);
}

static void ask_cancel(gw_req_t *g)
{
    char path[80];
    g->cancel_tries++;
    g->cancel_retry.cb = on_cancel_retry;
    snprintf(path, sizeof(path), "/requests/%s", g->rid);
    g->cancel_up = sg_upstream_start(sg_gw.upstream, "DELETE", path, NULL, 0, NULL, sg_gw.call_timeout_ms, NULL, NULL,
                                     on_cancel_reply, g);
}

static void on_client_gone(void *data)
{
    gw_req_t *g = data;

    if (g->up == NULL || g->cancel_up != NULL || g->cancel_tries != 0)
        return; /* not forwarded yet (forward() will see it), or asked already */
    switch (g->route) {
    case R_EXECUTE:
    case R_COMMAND:
    case R_EPHEMERAL:
        ask_cancel(g);
        return;
    case R_GET:
    case R_FILES:
    case R_LIBRARIES:
        sg_upstream_cancel(g->up);
        g->up = NULL;
        answer_gone(g);
        return;
    default:
        return;
    }
}

/* ---- entry -------------------------------------------------------------------------------- */

static int simple_error(h2o_req_t *req, const char *route, int status, const char *code, const char *detail)
{
    sg_metrics_request(route, status);
    sg_http_send_error(req, status, code, "%s", detail);
    return 0;
}

static int method_not_allowed(h2o_req_t *req, const char *allowed)
{
    sg_http_add_header(req, "allow", allowed);
    return simple_error(req, "other", 405, "method_not_allowed", "this method is not allowed here");
}

static void wants_stream_header(gw_req_t *g, h2o_req_t *req)
{
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_ACCEPT, -1);
    if (i >= 0 && h2o_strstr(req->headers.entries[i].value.base, req->headers.entries[i].value.len,
                             H2O_STRLIT("text/event-stream")) != SIZE_MAX)
        g->want_stream = 1;
}

static int get_root(h2o_req_t *req)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "status", json_object_new_string("ok"));
    sg_metrics_request("root", 200);
    sg_http_send_json(req, 200, o);
    return 0;
}

static int get_metrics(h2o_req_t *req)
{
    sg_buf_t out;
    sg_buf_init(&out, 4 << 20);
    sg_metrics_set_redis_up(sg_gw.redis_configured ? sg_state_available(sg_gw.state) : -1);
    sg_metrics_render(&out);
    sg_metrics_request("metrics", 200);
    sg_http_send_body(req, 200, "text/plain; version=0.0.4", out.base != NULL ? out.base : "", out.len);
    sg_buf_free(&out);
    return 0;
}

int sg_gw_handle(void *app, h2o_req_t *req)
{
    h2o_iovec_t path = sg_http_path(req), seg[4];
    int n = sg_http_split_path(path.base, path.len, seg, 4);
    route_t route;

#define IS(i, lit) h2o_memis(seg[i].base, seg[i].len, H2O_STRLIT(lit))
#define METHOD(m) sg_http_method_is(req, m)

    if (n == 0)
        return METHOD("GET") || METHOD("HEAD") ? get_root(req) : method_not_allowed(req, "GET");
    if (n == 1 && IS(0, "metrics"))
        return METHOD("GET") ? get_metrics(req) : method_not_allowed(req, "GET");
    if (n >= 1 && IS(0, "admin"))
        return sg_gw_admin_handle(req, seg, n);
    if (n == 1 && IS(0, "execute")) {
        if (!METHOD("POST"))
            return method_not_allowed(req, "POST");
        route = R_EPHEMERAL;
    } else if (n == 1 && IS(0, "sessions")) {
        if (METHOD("POST"))
            route = R_CREATE;
        else if (METHOD("GET"))
            route = R_LIST;
        else
            return method_not_allowed(req, "GET, POST");
    } else if (n == 2 && IS(0, "sessions")) {
        if (METHOD("GET"))
            route = R_GET;
        else if (METHOD("DELETE"))
            route = R_DELETE;
        else
            return method_not_allowed(req, "GET, DELETE");
    } else if (n == 3 && IS(0, "sessions") && (IS(2, "execute") || IS(2, "commands"))) {
        if (!METHOD("POST"))
            return method_not_allowed(req, "POST");
        route = IS(2, "execute") ? R_EXECUTE : R_COMMAND;
    } else if (n == 3 && IS(0, "sessions") && IS(2, "files")) {
        if (!METHOD("GET") && !METHOD("PUT"))
            return method_not_allowed(req, "GET, PUT");
        route = R_FILES;
    } else if (n == 3 && IS(0, "sessions") && IS(2, "libraries")) {
        if (!METHOD("POST"))
            return method_not_allowed(req, "POST");
        route = R_LIBRARIES;
    } else if (n == 1 && IS(0, "templates")) {
        if (!METHOD("GET"))
            return method_not_allowed(req, "GET");
        route = R_TEMPLATES;
    } else if (n == 2 && IS(0, "templates")) {
        if (!METHOD("DELETE"))
            return method_not_allowed(req, "DELETE");
        route = R_TEMPLATE_DELETE;
    } else {
        char detail[300];
        snprintf(detail, sizeof(detail), "no route for %.*s %.*s", (int)req->method.len, req->method.base,
                 (int)(path.len > 200 ? 200 : path.len), path.base);
        return simple_error(req, "other", 404, "not_found", detail);
    }

    size_t header_bytes = 0;
    for (size_t i = 0; i < req->headers.size; i++)
        header_bytes += req->headers.entries[i].name->len + req->headers.entries[i].value.len + 4;
    if (header_bytes > sg_gw.max_header_bytes) {
        char detail[160];
        snprintf(detail, sizeof(detail), "the request headers are %zu bytes, above the limit of %zu", header_bytes,
                 sg_gw.max_header_bytes);
        return simple_error(req, route_names[route], 431, "headers_too_large", detail);
    }
    size_t body_cap = route == R_FILES ? sg_gw.max_file_bytes : sg_gw.max_body;
    if (req->entity.len > body_cap) {
        char detail[160];
        snprintf(detail, sizeof(detail), "the request body is %zu bytes, above the limit of %zu", req->entity.len,
                 body_cap);
        return simple_error(req, route_names[route], 413, "too_large", detail);
    }

    h2o_iovec_t token = sg_gw_bearer(req);
    if (token.base == NULL || token.len == 0 || token.len > SG_TOKEN_MAX) {
        sg_http_add_header(req, "www-authenticate", "Bearer realm=\"sandgate\"");
        return simple_error(req, route_names[route], 401, "unauthorized",
                            "an API token is required: Authorization: Bearer <token>");
    }
    char template_name[256] = "";
    if (route == R_TEMPLATE_DELETE && sg_gw_template_name(seg[1], template_name, sizeof(template_name)) != 0) {
        char detail[160];
        snprintf(detail, sizeof(detail), "no template named \"%.*s\"", (int)(seg[1].len > 64 ? 64 : seg[1].len),
                 seg[1].base);
        return simple_error(req, route_names[route], 404, "no_such_template", detail);
    }
    if (n >= 2 && route != R_TEMPLATE_DELETE && (seg[1].len != 36 || !sg_is_uuid(seg[1].base, seg[1].len))) {
        char detail[160];
        snprintf(detail, sizeof(detail), "no session with id \"%.*s\"", (int)(seg[1].len > 64 ? 64 : seg[1].len),
                 seg[1].base);
        return simple_error(req, route_names[route], 404, "no_such_session", detail);
    }

    if (route == R_FILES && req->query_at != SIZE_MAX && req->path.len - req->query_at >= FILES_QUERY_MAX) {
        char detail[160];
        snprintf(detail, sizeof(detail), "the query string is %zu bytes, above the limit of %d",
                 req->path.len - req->query_at, FILES_QUERY_MAX - 1);
        return simple_error(req, route_names[route], 400, "bad_path", detail);
    }

    gw_req_t *g = calloc(1, sizeof(*g));
    g->hold = sg_http_hold(req);
    sg_http_hold_watch(g->hold, on_client_gone, g);
    g->route = route;
    snprintf(g->method, sizeof(g->method), "%.*s", (int)req->method.len, req->method.base);
    memcpy(g->token, token.base, token.len);
    if (route == R_TEMPLATE_DELETE)
        memcpy(g->template_name, template_name, sizeof(template_name));
    else if (n >= 2)
        memcpy(g->sid, seg[1].base, 36);
    if (route == R_FILES && req->query_at != SIZE_MAX)
        snprintf(g->query, sizeof(g->query), "%.*s", (int)(req->path.len - req->query_at),
                 req->path.base + req->query_at);
    if (req->entity.base != NULL && req->entity.len != 0) {
        g->body = malloc(req->entity.len + 1);
        memcpy(g->body, req->entity.base, req->entity.len);
        g->body[req->entity.len] = '\0';
        g->body_len = req->entity.len;
    }
    ssize_t ct = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
    if (ct >= 0)
        snprintf(g->content_type, sizeof(g->content_type), "%.*s", (int)req->headers.entries[ct].value.len,
                 req->headers.entries[ct].value.base);
    if (route == R_EXECUTE || route == R_COMMAND || route == R_EPHEMERAL)
        wants_stream_header(g, req);
    sg_sse_tail_init(&g->tail, STREAM_EVENT_MAX);
    g->job.fn = auth_fn;
    g->job.done = auth_done;
    sg_gw_db_submit(&g->job);
    return 0;
#undef IS
#undef METHOD
}
