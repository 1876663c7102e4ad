/*
 * gateway.c — shared pieces of the gateway: DB jobs, closing sessions, the
 * reaper of expired sessions, small helpers.
 */
#include "gateway.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
#include "purge.h"
#include "templates.h"
#include "util.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

sg_gw_t sg_gw;

/* ---- DB jobs ---- */

static void db_work(sg_job_t *job)
{
    sg_gw_job_t *j = (sg_gw_job_t *)job;
    sg_store_t *st = sg_workq_thread_data();
    if (st == NULL) {
        st = sg_store_open(sg_gw.data_dir, j->err, sizeof(j->err));
        if (st == NULL) {
            j->rc = -1; /* fn does not run; done sees rc and err */
            return;
        }
        sg_workq_set_thread_data(st, (void (*)(void *))sg_store_close);
    }
    j->fn(j, st);
}

static void db_done(sg_job_t *job)
{
    sg_gw_job_t *j = (sg_gw_job_t *)job;
    j->done(j);
}

void sg_gw_db_submit(sg_gw_job_t *job)
{
    if (sg_gw.stopping && sg_gw.dbq == NULL) {
        /* after the DB threads stopped: nothing can run it any more */
        job->rc = -1;
        snprintf(job->err, sizeof(job->err), "the gateway is shutting down");
        job->done(job);
        return;
    }
    job->super.work = db_work;
    job->super.done = db_done;
    sg_workq_submit(sg_gw.dbq, &job->super);
}

/* ---- helpers ---- */

int64_t sg_gw_now_up(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec + (ts.tv_nsec != 0);
}

void sg_gw_day(int64_t unix_s, char out[9])
{
    time_t t = (time_t)unix_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 9, "%Y%m%d", &tm);
}

int sg_gw_secret_equal(const char *given, size_t len, const char *expected)
{
    size_t el = strlen(expected);
    if (len != el || el == 0)
        return 0;
    return CRYPTO_memcmp(given, expected, el) == 0;
}

h2o_iovec_t sg_gw_bearer(h2o_req_t *req)
{
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
    if (i < 0)
        return h2o_iovec_init(NULL, 0);
    h2o_iovec_t v = req->headers.entries[i].value;
    if (v.len < 7 || !h2o_lcstris(v.base, 7, H2O_STRLIT("bearer ")))
        return h2o_iovec_init(NULL, 0);
    v.base += 7;
    v.len -= 7;
    while (v.len != 0 && v.base[0] == ' ')
        v.base++, v.len--;
    while (v.len != 0 && v.base[v.len - 1] == ' ')
        v.len--;
    return v;
}

/* ---- closing sessions ---- */

typedef struct {
    sg_gw_job_t job;
    char sid[37];
    int64_t tenant;
    char reason[32];
    void (*done)(void *data);
    void *data;
} close_t;

static void close_free(close_t *c)
{
    if (c->done != NULL)
        c->done(c->data);
    free(c);
}

static void close_fn(sg_gw_job_t *job, sg_store_t *st)
{
    close_t *c = (close_t *)job;
    job->rc = sg_store_session_close(st, c->sid, sg_wall_s(), c->reason, job->err, sizeof(job->err));
}

static void close_db_done(sg_gw_job_t *job)
{
    close_t *c = (close_t *)job;
    if (job->rc != 0)
        sg_error("session %s: cannot record its close: %s", c->sid, job->err);
    close_free(c);
}

static void submit_close(void *data)
{
    close_t *c = data;
    sg_gw_db_submit(&c->job);
}

static void on_proxy_deleted(void *data, const sg_upstream_reply_t *r)
{
    close_t *c = data;
    if (r->status != 200 && r->status != 404)
        sg_warn("session %s: the proxy did not delete it (%ld %s)", c->sid, r->status, r->err ? r->err : r->body);
    /* the template it kept (if any) on record first, then the close, which
     * the ledger records whatever the proxy said */
    sg_gw_template_closed(c->tenant, c->sid, r->status == 200 ? r->body : NULL, r->status == 200 ? r->body_len : 0,
                          submit_close, c);
}

static void on_state_removed(void *data, const sg_state_result_t *r)
{
    close_t *c = data;
    char path[64];

    if (r->available && !r->ok && strcmp(c->reason, "deleted") != 0 && strcmp(c->reason, "admin") != 0 &&
        strcmp(c->reason, "proxy_lost") != 0) {
        /* the reaper of another gateway got there first */
        close_free(c);
        return;
    }
    sg_info("session %s: closing (%s)", c->sid, c->reason);
    sg_metrics_session_closed(c->reason);
    if (strcmp(c->reason, "proxy_lost") == 0) {
        /* the proxy has no container for it any more: nothing was kept */
        sg_gw_template_closed(c->tenant, c->sid, NULL, 0, submit_close, c);
        return;
    }
    if (strcmp(c->reason, "deleted") == 0) {
        /* the proxy answered the DELETE already (and its template is on record) */
        sg_gw_db_submit(&c->job);
        return;
    }
    snprintf(path, sizeof(path), "/sessions/%s", c->sid);
    if (sg_upstream_start(sg_gw.upstream, "DELETE", path, NULL, 0, NULL, sg_gw.call_timeout_ms, NULL, NULL,
                          on_proxy_deleted, c) == NULL)
        sg_gw_db_submit(&c->job);
}

void sg_gw_close_session(const char *sid, int64_t tenant, const char *reason, void (*done)(void *data), void *data)
{
    close_t *c = calloc(1, sizeof(*c));
    c->done = done;
    c->data = data;
    snprintf(c->sid, sizeof(c->sid), "%s", sid);
    c->tenant = tenant;
    snprintf(c->reason, sizeof(c->reason), "%s", reason);
    c->job.fn = close_fn;
    c->job.done = close_db_done;
    sg_state_session_remove(sg_gw.state, sid, tenant, on_state_removed, c);
}

/* ---- the reaper ---- */

static h2o_timeout_t reaper_timeout;
static h2o_timeout_entry_t reaper_entry;
static int reaper_busy;
static unsigned reaper_rounds;

static void on_expired(void *data, int available, size_t n, const char *const *sids, const char *const *reasons,
                       const int64_t *tenants)
{
    reaper_busy = 0;
    if (!available)
        return; /* Redis is down: try again next round */
    for (size_t i = 0; i < n; i++)
        sg_gw_close_session(sids[i], tenants[i], reasons[i], NULL, NULL);
}

static void on_live_listed(void *data, int available, size_t n, const sg_live_session_t *list)
{
    if (available)
        sg_metrics_set_live_sessions((long)n);
}

/* ---- rebuilding the live-session state from SQLite ---- */

typedef struct {
    sg_live_session_t s;
    long idle_timeout;
} rebuild_item_t;

typedef struct {
    sg_gw_job_t job;
    rebuild_item_t *items;
    size_t n, cap;
    sg_store_t *st; /* during fn only */
    sg_tenant_t tenant; /* the last one looked up */
} rebuild_job_t;

static void add_open(const sg_session_rec_t *r, void *data)
{
    rebuild_job_t *j = data;
    if (j->n == j->cap) {
        size_t cap = j->cap ? j->cap * 2 : 32;
        rebuild_item_t *items = realloc(j->items, cap * sizeof(*items));
        if (items == NULL)
            return;
        j->items = items;
        j->cap = cap;
    }
    rebuild_item_t *it = &j->items[j->n++];
    memset(it, 0, sizeof(*it));
    snprintf(it->s.id, sizeof(it->s.id), "%s", r->id);
    it->s.tenant_id = r->tenant_id;
    snprintf(it->s.lang, sizeof(it->s.lang), "%s", r->lang);
    it->s.created_at = it->s.last_used_at = r->created_at;
    it->s.executions = r->executions;
}

static void rebuild_fn(sg_gw_job_t *job, sg_store_t *st)
{
    rebuild_job_t *j = (rebuild_job_t *)job;
    job->rc = sg_store_session_list_open(st, 0, add_open, j, job->err, sizeof(job->err));
    for (size_t i = 0; job->rc == 0 && i < j->n; i++) {
        rebuild_item_t *it = &j->items[i];
        if (j->tenant.id != it->s.tenant_id &&
            sg_store_tenant_get(st, it->s.tenant_id, &j->tenant, job->err, sizeof(job->err)) != 1) {
            sg_tenant_defaults(&j->tenant);
            j->tenant.id = it->s.tenant_id;
        }
        it->idle_timeout = j->tenant.idle_timeout;
        it->s.lifetime_deadline = it->s.created_at + j->tenant.max_lifetime;
    }
}

static size_t rebuild_pending; /* state calls of rebuilds under way */

typedef struct {
    char sid[37];
} rebuild_one_t;

static void on_restored(void *data, const sg_state_result_t *r)
{
    rebuild_one_t *one = data;
    rebuild_pending--;
    if (r->available && r->ok)
        sg_info("session %s: back in the live state (it was open in the ledger only)", one->sid);
    free(one);
}

/* Each session open in the ledger goes back into the live state unless it
 * is there already or is being closed (sg_state_session_restore). */
static void rebuild_done(sg_gw_job_t *job)
{
    rebuild_job_t *j = (rebuild_job_t *)job;
    if (job->rc != 0)
        sg_error("rebuilding live sessions: %s", job->err);
    for (size_t i = 0; job->rc == 0 && i < j->n; i++) {
        rebuild_item_t *it = &j->items[i];
        rebuild_one_t *one = malloc(sizeof(*one));
        if (one == NULL)
            break;
        snprintf(one->sid, sizeof(one->sid), "%s", it->s.id);
        it->s.idle_deadline = sg_gw_now_up() + it->idle_timeout;
        rebuild_pending++;
        sg_state_session_restore(sg_gw.state, &it->s, on_restored, one);
    }
    free(j->items);
    free(j);
}

int sg_gw_rebuild_sessions_now(sg_store_t *st, int timeout_ms)
{
    rebuild_job_t *j = calloc(1, sizeof(*j));
    uint64_t deadline = sg_now_ms() + (uint64_t)timeout_ms;
    rebuild_fn(&j->job, st);
    rebuild_done(&j->job);
    while (rebuild_pending != 0 && sg_now_ms() < deadline)
        h2o_evloop_run(sg_gw.loop, 10);
    return rebuild_pending == 0 ? 0 : -1;
}

void sg_gw_rebuild_sessions(void)
{
    rebuild_job_t *j = calloc(1, sizeof(*j));
    j->job.fn = rebuild_fn;
    j->job.done = rebuild_done;
    sg_gw_db_submit(&j->job);
}

static void on_reaper_tick(h2o_timeout_entry_t *e)
{
    if (!reaper_busy) {
        reaper_busy = 1;
        sg_state_sessions_expired(sg_gw.state, sg_wall_s(), 100, on_expired, NULL);
    }
    if (reaper_rounds % 5 == 0)
        sg_state_sessions_list(sg_gw.state, 0, on_live_listed, NULL);
    if (reaper_rounds % 10 == 0) {
        sg_gw_rebuild_sessions();
        sg_gw_purge_sweep(); /* tenants sandgate-admin marked for deletion */
    }
    reaper_rounds++;
    h2o_timeout_link(sg_gw.loop, &reaper_timeout, &reaper_entry);
}

void sg_gw_reaper_start(void)
{
    h2o_timeout_init(sg_gw.loop, &reaper_timeout, (uint64_t)sg_gw.reaper_interval_ms);
    reaper_entry.cb = on_reaper_tick;
    h2o_timeout_link(sg_gw.loop, &reaper_timeout, &reaper_entry);
}
