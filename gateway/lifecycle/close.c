/*
 * close.c — closing a session everywhere (close.h).
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
 * (the reaper lists sessions past a deadline until they are removed).
 */
#include "close.h"
#include "db.h"
#include "gateway.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
#include "placement.h"
#include "templates.h"
#include "upstream.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    char proxy[SG_PROXY_URL_MAX]; /* the session's proxy, once known */
    int proxy_known;
    h2o_timeout_entry_t soon; /* a proxy call that could not start, answered from the loop */
    int busy;                 /* a step is under way */
    unsigned attempts;        /* proxy removals that failed */
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

static void on_template_recorded(void *data)
{
    close_t *c = data;
    sg_state_session_remove(sg_gw.state, c->sid, c->tenant, on_state_removed, c);
}

/* The session's proxy is no longer configured, or out of placement past
 * the grace: nobody can confirm more, and nobody can reach its sandbox. */
static int proxy_gone(const close_t *c)
{
    sg_proxy_t *p = sg_proxies_count() == 1 ? sg_proxies_at(0) : sg_proxies_find(c->proxy);
    return p == NULL || sg_proxy_lost(p, NULL);
}

static void on_proxy_deleted(void *data, const sg_upstream_reply_t *r)
{
    close_t *c = data;
    int gone = r->status == 404 && (strcmp(r->code, "no_such_session") == 0 || strcmp(r->code, "session_lost") == 0);
    if (r->status == 0 && proxy_gone(c)) {
        sg_warn("session %s: its proxy %s is gone; closed without its confirmation", c->sid,
                c->proxy[0] ? c->proxy : "(the first)");
        gone = 1;
    }
    if (r->status == 200 || gone) {
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
            c->sid, r->status,
            r->status == 0 ? r->err
            : r->code[0]   ? r->code
                           : "no error code",
            (unsigned long long)(c->retry_at_ms - sg_now_ms()));
    close_notify(c, 0);
}

static void on_start_failed(h2o_timeout_entry_t *e)
{
    close_t *c = H2O_STRUCT_FROM_MEMBER(close_t, soon, e);
    sg_upstream_reply_t fail = {
        .err = "cannot start a request to the proxy", .body = "", .content_type = "", .retry_after = "", .code = ""};
    on_proxy_deleted(c, &fail);
}

static void close_step(close_t *c);

static void lookup_fn(sg_gw_job_t *job, sg_store_t *st)
{
    close_t *c = (close_t *)job;
    sg_session_rec_t rec;
    job->rc = sg_store_session_get(st, c->sid, &rec, job->err, sizeof(job->err)) == 1 ? 0 : -1;
    if (job->rc == 0)
        snprintf(c->proxy, sizeof(c->proxy), "%s", rec.proxy);
}

static void lookup_done(sg_gw_job_t *job)
{
    close_t *c = (close_t *)job;
    c->job.fn = close_fn;
    c->job.done = close_db_done;
    /* an unknown row: the first proxy, as a session from before placement */
    c->proxy_known = 1;
    close_step(c);
}

static void close_step(close_t *c)
{
    char path[64];
    c->busy = 1;
    if (!c->proxy_known && sg_proxies_count() > 1) {
        c->job.fn = lookup_fn;
        c->job.done = lookup_done;
        sg_gw_db_submit(&c->job);
        return;
    }
    sg_proxy_t *p = sg_proxies_count() == 1 ? sg_proxies_at(0) : sg_proxies_find(c->proxy);
    snprintf(path, sizeof(path), "/sessions/%s", c->sid);
    if (p == NULL || sg_upstream_start(p->up, "DELETE", path, NULL, 0, NULL, sg_gw.call_timeout_ms, NULL, NULL,
                                       on_proxy_deleted, c) == NULL) {
        /* answered from the loop as the proxy's answer would be: waiters
         * never hear of it before sg_gw_close_session returns */
        c->soon.cb = on_start_failed;
        sg_loop_soon(sg_gw.loop, &c->soon);
    }
}

void sg_gw_close_session(const char *sid, int64_t tenant, const char *reason, void (*done)(void *data, int closed),
                         void *data)
{
    sg_gw_close_session_at(sid, tenant, NULL, reason, done, data);
}

void sg_gw_close_session_at(const char *sid, int64_t tenant, const char *proxy, const char *reason,
                            void (*done)(void *data, int closed), void *data)
{
    close_t *c = close_find(sid);
    if (c == NULL) {
        c = sg_xcalloc(1, sizeof(*c));
        snprintf(c->sid, sizeof(c->sid), "%s", sid);
        if (proxy != NULL) {
            snprintf(c->proxy, sizeof(c->proxy), "%s", proxy);
            c->proxy_known = 1;
        }
        c->tenant = tenant;
        snprintf(c->reason, sizeof(c->reason), "%s", reason);
        c->job.fn = close_fn;
        c->job.done = close_db_done;
        h2o_linklist_insert(&closes, &c->link);
    }
    if (done != NULL) {
        close_waiter_t *w = sg_xcalloc(1, sizeof(*w));
        w->done = done;
        w->data = data;
        w->next = c->waiters;
        c->waiters = w;
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

int sg_gw_close_under_way(const char *sid)
{
    return close_find(sid) != NULL;
}

void sg_gw_closes_retry(void)
{
    uint64_t now = sg_now_ms();
    for (h2o_linklist_t *l = closes.next; l != &closes;) {
        close_t *c = H2O_STRUCT_FROM_MEMBER(close_t, link, l);
        l = l->next;
        if (!c->busy && c->attempts != 0 && now >= c->retry_at_ms)
            close_step(c); /* calls back later, never from here */
    }
}
