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

/* ---- closing sessions ----
 *
 * The order is what keeps a tenant's slot honest: first the proxy removes
 * the container (DELETE answered 200) or confirms it has none (404 with the
 * code no_such_session); only then does the live state let the session go
 * (its slot is freed) and the ledger record the close. A close the proxy
 * did not confirm (unreachable, timed out, 5xx) stays in `closes` and is
 * tried again from the reaper with a growing delay; meanwhile the session
 * keeps its slot and its records. Should this gateway stop first, nothing
 * was released: the session is still live in the state and open in the
 * ledger, so its idle or lifetime deadline brings it to a reaper again
 * (the reaper lists sessions past a deadline until they are removed). */

typedef struct close_waiter {
    void (*done)(void *data, int closed);
    void *data;
    struct close_waiter *next;
} close_waiter_t;

typedef struct {
    sg_gw_job_t job;
    h2o_linklist_t link; /* in closes while under way */
    char sid[37];
    int64_t tenant;
    char reason[32];
    int busy;            /* a step is under way */
    unsigned attempts;   /* proxy removals that failed */
    uint64_t retry_at_ms;
    close_waiter_t *waiters;
} close_t;

static h2o_linklist_t closes = {&closes, &closes};

#define CLOSE_RETRY_MAX_MS 30000

static close_t *close_find(const char *sid)
{
    for (h2o_linklist_t *l = closes.next; l != &closes; l = l->next) {
        close_t *c = H2O_STRUCT_FROM_MEMBER(close_t, link, l);
        if (strcmp(c->sid, sid) == 0)
            return c;
    }
    return NULL;
}

/* Tells every waiter (closed: 1 on record, 0 not confirmed yet); with
 * closed, the close is over and c goes. */
static void close_notify(close_t *c, int closed)
{
    close_waiter_t *w = c->waiters;
    c->waiters = NULL;
    if (closed)
        h2o_linklist_unlink(&c->link);
    while (w != NULL) {
        close_waiter_t *next = w->next;
        w->done(w->data, closed);
        free(w);
        w = next;
    }
    if (closed)
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
    close_notify(c, 1);
}

static void on_state_removed(void *data, const sg_state_result_t *r)
{
    close_t *c = data;

    if (r->available && r->ok) {
        sg_info("session %s: closed (%s)", c->sid, c->reason);
        sg_metrics_session_closed(c->reason);
    }
    /* Recorded whoever removed it from the state (closing a closed row
     * changes nothing): a session the state had lost is closed in the
     * ledger too. With Redis down the live record stays there; once Redis
     * is back, the reaper finds it past its deadline, the proxy answers
     * no_such_session, and the state lets it go. */
    sg_gw_db_submit(&c->job);
}

static void close_step(close_t *c);

static void on_template_recorded(void *data)
{
    close_t *c = data;
    sg_state_session_remove(sg_gw.state, c->sid, c->tenant, on_state_removed, c);
}

static void on_proxy_deleted(void *data, const sg_upstream_reply_t *r)
{
    close_t *c = data;
    if (r->status == 200 || (r->status == 404 && strcmp(r->code, "no_such_session") == 0)) {
        /* no container any more: the template it kept (if any) on record,
         * then the slot may go */
        sg_gw_template_closed(c->tenant, c->sid, r->status == 200 ? r->body : NULL, r->status == 200 ? r->body_len : 0,
                              on_template_recorded, c);
        return;
    }
    c->busy = 0;
    c->attempts++;
    uint64_t delay = 1000ull << (c->attempts < 6 ? c->attempts - 1 : 5);
    c->retry_at_ms = sg_now_ms() + (delay < CLOSE_RETRY_MAX_MS ? delay : CLOSE_RETRY_MAX_MS);
    sg_warn("session %s: the proxy did not remove it (%ld %s); it stays open and counted, tried again in %llu ms",
            c->sid, r->status, r->status == 0 ? r->err : r->code[0] ? r->code : "no error code",
            (unsigned long long)(c->retry_at_ms - sg_now_ms()));
    close_notify(c, 0);
}

static void close_step(close_t *c)
{
    char path[64];
    c->busy = 1;
    snprintf(path, sizeof(path), "/sessions/%s", c->sid);
    if (sg_upstream_start(sg_gw.upstream, "DELETE", path, NULL, 0, NULL, sg_gw.call_timeout_ms, NULL, NULL,
                          on_proxy_deleted, c) == NULL) {
        sg_upstream_reply_t fail = {.err = "cannot start a request to the proxy", .body = "", .content_type = "",
                                    .retry_after = "", .code = ""};
        on_proxy_deleted(c, &fail);
    }
}

void sg_gw_close_session(const char *sid, int64_t tenant, const char *reason, void (*done)(void *data, int closed),
                         void *data)
{
    close_t *c = close_find(sid);
    if (c == NULL) {
        if ((c = calloc(1, sizeof(*c))) == NULL) {
            sg_error("session %s: out of memory closing it", sid);
            if (done != NULL)
                done(data, 0);
            return;
        }
        snprintf(c->sid, sizeof(c->sid), "%s", sid);
        c->tenant = tenant;
        snprintf(c->reason, sizeof(c->reason), "%s", reason);
        c->job.fn = close_fn;
        c->job.done = close_db_done;
        h2o_linklist_insert(&closes, &c->link);
    }
    if (done != NULL) {
        close_waiter_t *w = calloc(1, sizeof(*w));
        if (w == NULL) {
            done(data, 0);
        } else {
            w->done = done;
            w->data = data;
            w->next = c->waiters;
            c->waiters = w;
        }
    }
    if (!c->busy) {
        /* a waiting retry is tried at once when asked again */
        sg_info("session %s: closing (%s)", c->sid, c->reason);
        close_step(c);
    }
}

size_t sg_gw_closes_pending(void)
{
    size_t n = 0;
    for (h2o_linklist_t *l = closes.next; l != &closes; l = l->next)
        n++;
    return n;
}

/* From the reaper: closes whose proxy removal failed, once their delay is over. */
static void closes_retry(void)
{
    uint64_t now = sg_now_ms();
    for (h2o_linklist_t *l = closes.next; l != &closes;) {
        close_t *c = H2O_STRUCT_FROM_MEMBER(close_t, link, l);
        l = l->next;
        if (!c->busy && c->attempts != 0 && now >= c->retry_at_ms)
            close_step(c); /* calls back later, never from here */
    }
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
    for (size_t i = 0; i < n; i++) {
        close_t *c = close_find(sids[i]);
        /* one under way, or waiting for its retry, is left to that */
        if (c == NULL)
            sg_gw_close_session(sids[i], tenants[i], reasons[i], NULL, NULL);
    }
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
    closes_retry();
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
