/*
 * ledger.c — what an execution costs the tenant (request.h): one of its
 * executions in flight (concurrency.h), one of the day's executions and
 * seconds (the state's daily counters, seeded from SQLite), and the usage
 * row in SQLite that every run that happened leaves.
 */
#include "request.h"
#include "log.h"
#include "metrics.h"
#include "stats.h"
#include "util.h"
#include "db.h"
#include "tenant.h"
#include "upstream.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- executions in flight ------------------------------------------------------------- */

static void on_exec_slot(void *data, int granted, long in_flight)
{
    sg_gw_req_t *g = data;
    if (!granted) {
        /* a slot frees when one of the tenant's runs ends */
        sg_gw_reply_429(g, "concurrency_limit", "concurrent_execs", 1,
                        "the tenant already has %ld executions in flight, its limit of %ld", in_flight,
                        g->tenant.max_concurrent_execs);
        sg_gw_req_free(g);
        return;
    }
    g->after_slot(g);
}

void sg_gw_exec_slot_take(sg_gw_req_t *g, long wait_ms, void (*next)(sg_gw_req_t *g))
{
    g->after_slot = next;
    sg_exec_slot_acquire(&g->slot, g->tenant.id, g->tenant.max_concurrent_execs,
                         (wait_ms + 999) / 1000 + SG_EXEC_LEASE_MARGIN_S, on_exec_slot, g);
}

/* ---- daily quotas ------------------------------------------------------------------ */

/* The day's counters start from the ledger when the state has none (a new
 * day, or Redis restarted empty). */
typedef struct {
    sg_gw_job_t job;
    sg_gw_req_t *g;
    sg_usage_total_t total;
} seed_job_t;

static void quota_reserve(sg_gw_req_t *g);

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
    sg_gw_req_t *g = j->g;
    if (job->rc != 0) {
        sg_gw_reply_error(g, 500, "internal", "the usage ledger cannot be read: %s", job->err);
        sg_gw_req_free(g);
    } else {
        sg_state_quota_seed(sg_gw.state, g->tenant.id, g->day, j->total.executions, j->total.seconds, on_seeded, g);
    }
    free(j);
}

static void on_quota(void *data, int available, sg_quota_status_t status, int64_t execs, double seconds)
{
    sg_gw_req_t *g = data;
    if (!available) {
        /* fail open: the ledger in SQLite still records every execution */
        g->after_quota(g);
        return;
    }
    switch (status) {
    case SG_QUOTA_UNSEEDED: {
        seed_job_t *j = sg_xcalloc(1, sizeof(*j));
        j->g = g;
        sg_gw_db_run(&j->job, seed_fn, seed_done);
        return;
    }
    case SG_QUOTA_EXECS:
        sg_gw_reply_429(g, "quota_exceeded", "execs_per_day", 86400 - sg_wall_s() % 86400,
                        "the tenant's %ld executions for today (UTC) are used up", g->tenant.execs_per_day);
        sg_gw_req_free(g);
        return;
    case SG_QUOTA_SECONDS:
        sg_gw_reply_429(g, "quota_exceeded", "exec_seconds_per_day", 86400 - sg_wall_s() % 86400,
                        "the tenant's %.0f execution seconds for today (UTC) are used up",
                        g->tenant.exec_seconds_per_day);
        sg_gw_req_free(g);
        return;
    case SG_QUOTA_OK:
        break;
    }
    g->after_quota(g);
}

static void quota_reserve(sg_gw_req_t *g)
{
    sg_state_quota_reserve(sg_gw.state, g->tenant.id, g->day, g->tenant.execs_per_day, g->tenant.exec_seconds_per_day,
                           on_quota, g);
}

void sg_gw_quota_reserve(sg_gw_req_t *g, void (*next)(sg_gw_req_t *g))
{
    g->after_quota = next;
    quota_reserve(g);
}

/* ---- the usage row ---------------------------------------------------------------------- */

/* An execution is answered only once its usage row is on record in
 * SQLite: a client that has its result finds it in the ledger, and a
 * gateway that dies after answering has lost nothing billable. The job
 * carries the answer (a copy of the proxy's reply, or, streamed, only the
 * end of the stream) to usage_done, which sends it. */
typedef struct {
    sg_gw_job_t job;
    sg_usage_t usage;
    int count_session;
    sg_gw_req_t *g;
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

void sg_gw_exec_answer(sg_gw_req_t *g, int status, const char *ctype, const char *body, size_t len)
{
    if (g->want_stream) {
        if (sg_gw_req_http(g) != NULL && g->stream != NULL && status != 0)
            sg_http_stream_finish(g->stream);
        else if (sg_gw_req_http(g) != NULL && g->stream != NULL)
            sg_http_stream_abort(g->stream); /* the proxy's stream broke off */
    } else {
        sg_gw_reply_raw(g, status, ctype, body, len);
    }
    sg_gw_touch_session(g, status == 200);
    sg_gw_req_free(g);
}

static void usage_done(sg_gw_job_t *job)
{
    usage_job_t *j = (usage_job_t *)job;
    if (job->rc != 0) {
        /* The client still gets its result: the run happened. */
        sg_error("usage: cannot record an execution of tenant %lld: %s", (long long)j->usage.tenant_id, job->err);
    }
    sg_gw_exec_answer(j->g, j->status, j->ctype, j->body != NULL ? j->body : "", j->body_len);
    free(j->body);
    free(j);
}

/* The seconds an execution is billed: the wall time the proxy measured
 * (from handing the run to the sandbox's agent to its end), never the
 * duration the sandbox reported, which code inside it could forge. It
 * cannot exceed what the gateway itself waited; when the reply has no
 * usable wall_time (a stream that broke off), the gateway's own measure. */
static double bill_seconds(const sg_gw_req_t *g, double proxy_wall)
{
    double waited = (double)(sg_now_us() - g->started_us) / 1e6;
    if (!isfinite(proxy_wall) || proxy_wall < 0 || proxy_wall > waited)
        return waited;
    return proxy_wall;
}

/* The row's figures from the proxy's result object (o may be NULL: the
 * figures stay unknown); returns the wall time the proxy measured, or -1. */
static double read_result(json_object *o, sg_usage_t *u)
{
    json_object *v;
    double wall = -1;
    u->exit_code = -1;
    if (o == NULL)
        return wall;
    if (json_object_object_get_ex(o, "wall_time", &v) &&
        (json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
        wall = json_object_get_double(v);
    if (json_object_object_get_ex(o, "exit_code", &v))
        u->exit_code = json_object_get_int(v);
    if (json_object_object_get_ex(o, "timed_out", &v))
        u->timed_out = json_object_get_boolean(v);
    if (json_object_object_get_ex(o, "stdout", &v))
        u->output_bytes += json_object_get_string_len(v);
    if (json_object_object_get_ex(o, "stderr", &v))
        u->output_bytes += json_object_get_string_len(v);
    return wall;
}

void sg_gw_record_execution(sg_gw_req_t *g, const char *result, size_t result_len, const sg_upstream_reply_t *r)
{
    char *text = sg_xstrndup(result, result_len);
    json_object *o = json_tokener_parse(text);
    usage_job_t *j = sg_xcalloc(1, sizeof(*j));
    double duration;

    free(text);
    j->g = g;
    j->status = (int)r->status;
    snprintf(j->ctype, sizeof(j->ctype), "%s", r->content_type);
    if (!g->want_stream) {
        j->body = sg_xmalloc(r->body_len + 1);
        memcpy(j->body, r->body, r->body_len);
        j->body[r->body_len] = '\0';
        j->body_len = r->body_len;
    }
    j->usage.tenant_id = g->tenant.id;
    snprintf(j->usage.session_id, sizeof(j->usage.session_id), "%s", g->route == SG_GW_R_EPHEMERAL ? "" : g->sid);
    snprintf(j->usage.lang, sizeof(j->usage.lang), "%s", g->lang);
    snprintf(j->usage.kind, sizeof(j->usage.kind), "%s",
             g->route == SG_GW_R_EPHEMERAL ? "ephemeral"
             : g->route == SG_GW_R_COMMAND ? "command"
                                           : "execute");
    j->usage.started_at = g->started_at;
    /* none from the proxy: bill_seconds falls back to the gateway's measure */
    duration = bill_seconds(g, read_result(o, &j->usage));
    j->usage.duration = duration;
    j->count_session = g->route != SG_GW_R_EPHEMERAL;
    j->job.fn = usage_fn;
    j->job.done = usage_done;

    json_object *rt = NULL;
    const char *runtime = o != NULL && json_object_object_get_ex(o, "runtime", &rt) &&
                                  json_object_is_type(rt, json_type_string) && json_object_get_string_len(rt) > 0 &&
                                  sg_tenant_runtime_valid(json_object_get_string(rt))
                              ? json_object_get_string(rt)
                              : sg_gw_runtime_label(g);
    sg_metrics_execution(g->lang[0] ? g->lang : "unknown", runtime,
                         j->usage.timed_out        ? "timeout"
                         : j->usage.exit_code == 0 ? "success"
                                                   : "error",
                         duration);
    sg_stats_execution(sg_wall_s(), (double)(sg_now_us() - g->started_us) / 1e6);
    sg_state_quota_add_seconds(sg_gw.state, g->tenant.id, g->day, duration, sg_gw_state_ignore, NULL);
    json_object_put(o);
    sg_gw_db_submit(&j->job);
}
