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
#include "clock.h"
#include "tenant.h"
#include "upstream.h"
#include "usage_hdr.h"

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

static void on_quota(void *data, int available, sg_quota_status_t status, int64_t execs, double seconds);

static int runs_code(const sg_gw_req_t *g)
{
    return g->route == SG_GW_R_EXECUTE || g->route == SG_GW_R_COMMAND || g->route == SG_GW_R_EPHEMERAL;
}

/* The session an execution runs in, named in its slot's token: while the
 * lease lives, the idle reaper leaves the session alone (a run longer than
 * the idle timeout is not an idle session). */
static const char *slot_sid(const sg_gw_req_t *g)
{
    return g->route != SG_GW_R_EPHEMERAL ? g->sid : NULL;
}

/* An execution's slot lease: its timeout and the upstream's grace, and a
 * margin (the wait of sg_gw_exec_slot_take for the routes that run code). */
static long run_lease_s(const sg_gw_req_t *g)
{
    long wait_ms = (long)(g->timeout * 1000) + sg_gw.upstream_grace_ms;
    return (wait_ms + 999) / 1000 + SG_EXEC_LEASE_MARGIN_S;
}

/* The routes that run code (auth.c) come here before their rate is
 * counted: rate, slot and the day's execution in one state call. */
static void on_admit(void *data, const sg_admit_result_t *r)
{
    sg_gw_req_t *g = data;

    if (!r->available) {
        /* Redis is not answering: as the three calls would each do, the rate
         * fails open, the slot falls back to this gateway's count, and the
         * quota (asked next) fails open; the ledger still gets every row */
        sg_exec_slot_acquire(&g->slot, g->tenant.id, slot_sid(g), g->tenant.max_concurrent_execs, run_lease_s(g),
                             on_exec_slot, g);
        return;
    }
    g->rate = r->rate;
    g->rate_known = 1;
    if (!r->rate.allowed) {
        sg_gw_reply_429(g, "quota_exceeded", "rate", r->rate.retry_after_s,
                        "rate limit: %ld requests per minute (burst %ld) exceeded", g->tenant.rate_per_min,
                        g->tenant.burst);
        sg_gw_req_free(g);
        return;
    }
    if (!r->slot) {
        on_exec_slot(g, 0, r->in_flight);
        return;
    }
    if (r->quota == SG_QUOTA_EXECS || r->quota == SG_QUOTA_SECONDS) {
        /* the script gave the slot back */
        on_quota(g, 1, r->quota, r->execs, r->seconds);
        return;
    }
    g->slot.held = SG_EXEC_SLOT_SHARED;
    /* UNSEEDED: the day's counters come from the ledger first, then the
     * quota is asked alone (sg_gw_quota_reserve) */
    g->quota_taken = r->quota == SG_QUOTA_OK;
    g->after_slot(g);
}

void sg_gw_exec_slot_take(sg_gw_req_t *g, long wait_ms, void (*next)(sg_gw_req_t *g))
{
    g->after_slot = next;
    if (runs_code(g)) {
        /* the rate was left for here (auth.c): one state call for all three */
        sg_exec_slot_init(&g->slot, g->tenant.id, slot_sid(g));
        sg_admit_args_t a = {
            .rate_per_min = g->rerun ? 0 : g->tenant.rate_per_min, /* a rerun's request was counted */
            .burst = g->tenant.burst,
            .max_execs = g->tenant.max_concurrent_execs,
            .token = g->slot.token,
            .lease_s = run_lease_s(g),
            .day = g->day,
            .execs_per_day = g->tenant.execs_per_day,
            .seconds_per_day = g->tenant.exec_seconds_per_day,
        };
        sg_state_exec_admit(sg_gw.state, g->tenant.id, &a, on_admit, g);
        return;
    }
    sg_exec_slot_acquire(&g->slot, g->tenant.id, slot_sid(g), g->tenant.max_concurrent_execs,
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
    if (g->quota_taken) {
        next(g); /* counted with the slot (on_admit) */
        return;
    }
    quota_reserve(g);
}

/* ---- the usage row ---------------------------------------------------------------------- */

/* An execution is answered only once its usage row is on record: a client
 * that has its result finds it in the ledger, and a gateway that dies
 * after answering has lost nothing billable. The rows of the executions
 * that end in one turn of the loop are appended at its end to the
 * gateway's usage journal with one write (store.h), then answered; a DB
 * thread moves them into SQLite behind, usage_import_ms after the first
 * row it has not moved, many in one transaction (and every read of the
 * ledger moves first what the journal holds). When the journal cannot be
 * written (no file, the disk full), the rows go to SQLite on a DB thread
 * as one transaction, which waits for the lock, and are answered after
 * its commit; the rows that end meanwhile wait here and go in the next.
 * Each row's answer is a copy of the proxy's reply, or, streamed, only the
 * end of the stream. */
typedef struct usage_row usage_row_t;
struct usage_row {
    usage_row_t *next;
    sg_usage_t usage;
    int count_session;
    sg_gw_req_t *g;
    int status;
    char ctype[128];
    char *body;
    size_t body_len;
};

/* At most this many rows per write or transaction: the answers of the
 * first rows do not wait for the writing of very many. */
#define BATCH_MAX 256

typedef struct {
    sg_gw_job_t job;
    size_t n;
    usage_row_t *rows[BATCH_MAX];
    int failed[BATCH_MAX];
} batch_job_t;

static usage_row_t *pending, **pending_tail = &pending;
static int batch_running;               /* a batch is on a DB thread */
static h2o_timeout_entry_t flush_entry; /* linked: a flush at the end of this turn */

static sg_usage_journal_t *journal; /* NULL: every batch to a DB thread */
static int journal_failing;         /* the last append failed (warned once) */

/* ---- moving the journal into SQLite ---- */

static h2o_timeout_t import_timeout;
static h2o_timeout_entry_t import_entry;
static int import_timeout_ready, import_running, import_again;

typedef struct {
    sg_gw_job_t job;
    sg_usage_catch_up_t r;
} import_job_t;

static void import_fn(sg_gw_job_t *job, sg_store_t *st)
{
    import_job_t *j = (import_job_t *)job;
    job->rc = sg_store_usage_catch_up(st, &j->r, job->err, sizeof(job->err));
}

static void import_soon(void);

static void import_done(sg_gw_job_t *job)
{
    import_job_t *j = (import_job_t *)job;
    static int failing; /* warned once until one succeeds */
    if (job->rc != 0 && !failing)
        sg_warn("usage: the journal cannot be moved into the database yet (tried again with the next rows, and "
                "by every read of the ledger): %s",
                job->err);
    else if (job->rc == 0 && failing)
        sg_info("usage: the journal is moved into the database again");
    failing = job->rc != 0;
    if (j->r.dropped != 0)
        sg_error("usage: %ld rows of the journal refused by the database (their tenant deleted?): %s", j->r.dropped,
                 j->r.drop_err);
    if (j->r.torn != 0)
        sg_warn("usage: %ld bytes of the journal were no whole append (a gateway died inside a write)", j->r.torn);
    import_running = 0;
    if (import_again) {
        import_again = 0;
        import_soon();
    }
    free(j);
}

static void on_import_due(h2o_timeout_entry_t *e)
{
    (void)e;
    if (sg_gw.stopping)
        return; /* the DB threads are gone: the last catch-up (main.c) moves it */
    import_running = 1;
    sg_gw_db_run(sg_xcalloc(1, sizeof(import_job_t)), import_fn, import_done);
}

static void import_soon(void)
{
    if (import_running) {
        import_again = 1; /* after this one, for what it may not have seen */
        return;
    }
    if (h2o_timeout_is_linked(&import_entry))
        return;
    if (!import_timeout_ready) {
        h2o_timeout_init(sg_gw.loop, &import_timeout, (uint64_t)sg_gw.usage_import_ms);
        import_timeout_ready = 1;
    }
    import_entry.cb = on_import_due;
    h2o_timeout_link(sg_gw.loop, &import_timeout, &import_entry);
}

int sg_gw_ledger_open(const char *data_dir, char *err, size_t errlen)
{
    journal = sg_usage_journal_open(data_dir, err, errlen);
    return journal != NULL ? 0 : -1;
}

void sg_gw_ledger_close(void)
{
    if (h2o_timeout_is_linked(&import_entry))
        h2o_timeout_unlink(&import_entry);
    sg_usage_journal_close(journal);
    journal = NULL;
}

/* ---- the batch of a turn ---- */

/* The batch's rows as the store takes them. */
static void batch_rows(const batch_job_t *b, const sg_usage_t **rows, int *count)
{
    for (size_t i = 0; i < b->n; i++) {
        rows[i] = &b->rows[i]->usage;
        count[i] = b->rows[i]->count_session;
    }
}

/* On the loop: the rows in the journal, or -1 (then to a DB thread). */
static int batch_journal(batch_job_t *b)
{
    const sg_usage_t *rows[BATCH_MAX];
    int count[BATCH_MAX];
    char err[256];

    if (journal == NULL)
        return -1;
    batch_rows(b, rows, count);
    if (sg_usage_journal_append(journal, rows, count, b->n, err, sizeof(err)) != 0) {
        if (!journal_failing)
            sg_warn("usage: %s; rows go to the database directly until the journal can be written again", err);
        journal_failing = 1;
        return -1;
    }
    if (journal_failing)
        sg_info("usage: the journal is written again");
    journal_failing = 0;
    import_soon();
    return 0;
}

static void batch_fn(sg_gw_job_t *job, sg_store_t *st)
{
    batch_job_t *b = (batch_job_t *)job;
    const sg_usage_t *rows[BATCH_MAX];
    int count[BATCH_MAX];

    batch_rows(b, rows, count);
    job->rc = sg_store_usage_add_batch(st, rows, count, b->n, b->failed, job->err, sizeof(job->err)) == 0 ? 0 : -1;
}

static void batch_flush(void);

static void batch_done(sg_gw_job_t *job)
{
    batch_job_t *b = (batch_job_t *)job;
    int marked = 0; /* rows that failed alone; none when the store could not even be opened */

    for (size_t i = 0; i < b->n; i++)
        marked += b->failed[i];
    batch_running = 0;
    batch_flush(); /* the next batch is written while these are answered */
    for (size_t i = 0; i < b->n; i++) {
        usage_row_t *j = b->rows[i];
        if (job->rc != 0 && (b->failed[i] || marked == 0)) {
            /* the client still gets its result: the run happened */
            sg_error("usage: cannot record an execution of tenant %lld: %s", (long long)j->usage.tenant_id, job->err);
        }
        sg_gw_exec_answer(j->g, j->status, j->ctype, j->body != NULL ? j->body : "", j->body_len);
        free(j->body);
        free(j);
    }
    free(b);
}

static void batch_flush(void)
{
    if (batch_running || pending == NULL)
        return;
    batch_job_t *b = sg_xcalloc(1, sizeof(*b));
    while (pending != NULL && b->n < BATCH_MAX) {
        b->rows[b->n++] = pending;
        pending = pending->next;
    }
    if (pending == NULL)
        pending_tail = &pending;
    if (batch_journal(b) == 0) {
        batch_done(&b->job);
        return;
    }
    batch_running = 1;
    sg_gw_db_run(&b->job, batch_fn, batch_done);
}

static void on_turn_end(h2o_timeout_entry_t *e)
{
    (void)e;
    batch_flush();
}

static void usage_queue(usage_row_t *j)
{
    j->next = NULL;
    *pending_tail = j;
    pending_tail = &j->next;
    if (batch_running || h2o_timeout_is_linked(&flush_entry))
        return; /* in the next batch */
    flush_entry.cb = on_turn_end;
    sg_loop_soon(sg_gw.loop, &flush_entry);
}

/* The state's side of an execution's end, nobody waiting: its slot back,
 * its session touched, its seconds added to the day's — in one call when
 * the slot is in the shared state (sg_state_exec_finish), else apart. */
static void finish(sg_gw_req_t *g, int add_exec)
{
    int session = g->route != SG_GW_R_EPHEMERAL && g->sid[0];

    if (g->slot.held == SG_EXEC_SLOT_SHARED) {
        sg_finish_args_t a = {.token = g->slot.token,
                              .sid = session ? g->sid : NULL,
                              .now = sg_gw_now_up(),
                              .idle_timeout = g->tenant.idle_timeout,
                              .add_exec = add_exec,
                              .day = g->day,
                              .seconds = g->billed ? g->billed_s : -1};
        sg_state_exec_finish(sg_gw.state, g->tenant.id, &a, NULL, NULL);
        g->slot.held = 0; /* given back: sg_gw_req_free has nothing left to do */
        return;
    }
    sg_gw_touch_session(g, add_exec);
    if (g->billed)
        sg_state_quota_add_seconds(sg_gw.state, g->tenant.id, g->day, g->billed_s, sg_gw_state_ignore, NULL);
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
    finish(g, status == 200);
    sg_gw_req_free(g);
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

/* What the run used, from the proxy's X-Sandgate-Usage header when the
 * reply is the result itself and states it; else (a streamed run, whose
 * result came last in its stream, or an older proxy) from the result's
 * JSON, parsed here. The wall time, -1 if none; *runtime "" if unknown. */
static double read_usage(const char *result, size_t result_len, const sg_upstream_reply_t *r, sg_usage_t *u,
                         char *runtime, size_t runtime_len)
{
    sg_usage_hdr_t h;
    runtime[0] = '\0';
    if (result == r->body && r->usage != NULL && r->usage[0] != '\0' &&
        sg_usage_hdr_parse(r->usage, strlen(r->usage), &h) == 0) {
        u->exit_code = h.exit_code;
        u->timed_out = h.timed_out;
        u->output_bytes = h.output_bytes;
        snprintf(runtime, runtime_len, "%s", h.runtime);
        return h.wall_s;
    }
    sg_metrics_usage_from_body();
    char *text = sg_xstrndup(result, result_len);
    json_object *o = json_tokener_parse(text), *rt = NULL;
    free(text);
    double wall = read_result(o, u);
    if (o != NULL && json_object_object_get_ex(o, "runtime", &rt) && json_object_is_type(rt, json_type_string))
        snprintf(runtime, runtime_len, "%s", json_object_get_string(rt));
    json_object_put(o);
    return wall;
}

void sg_gw_record_execution(sg_gw_req_t *g, const char *result, size_t result_len, const sg_upstream_reply_t *r)
{
    usage_row_t *j = sg_xcalloc(1, sizeof(*j));
    double duration;
    char runtime[32];

    j->g = g;
    j->status = (int)r->status;
    sg_copy(j->ctype, sizeof(j->ctype), r->content_type, strlen(r->content_type));
    if (!g->want_stream) {
        j->body = sg_xmalloc(r->body_len + 1);
        memcpy(j->body, r->body, r->body_len);
        j->body[r->body_len] = '\0';
        j->body_len = r->body_len;
    }
    j->usage.tenant_id = g->tenant.id;
    if (g->route != SG_GW_R_EPHEMERAL)
        sg_copy(j->usage.session_id, sizeof(j->usage.session_id), g->sid, strlen(g->sid));
    sg_copy(j->usage.lang, sizeof(j->usage.lang), g->lang, strlen(g->lang));
    const char *kind = g->route == SG_GW_R_EPHEMERAL ? "ephemeral"
                       : g->route == SG_GW_R_COMMAND ? "command"
                                                     : "execute";
    sg_copy(j->usage.kind, sizeof(j->usage.kind), kind, strlen(kind));
    j->usage.started_at = g->started_at;
    /* none from the proxy: bill_seconds falls back to the gateway's measure */
    duration = bill_seconds(g, read_usage(result, result_len, r, &j->usage, runtime, sizeof(runtime)));
    j->usage.duration = duration;
    j->count_session = g->route != SG_GW_R_EPHEMERAL;

    sg_metrics_execution(g->lang[0] ? g->lang : "unknown",
                         runtime[0] != '\0' && sg_tenant_runtime_valid(runtime) ? runtime : sg_gw_runtime_label(g),
                         j->usage.timed_out        ? "timeout"
                         : j->usage.exit_code == 0 ? "success"
                                                   : "error",
                         duration);
    sg_stats_execution(sg_wall_s(), (double)(sg_now_us() - g->started_us) / 1e6);
    g->billed = 1; /* added to the day's with the execution's end (finish) */
    g->billed_s = duration;
    usage_queue(j);
}
