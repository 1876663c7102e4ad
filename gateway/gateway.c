/*
 * gateway.c — shared pieces of the gateway: DB jobs, closing sessions, the
 * reaper of expired sessions, small helpers.
 */
#include "gateway.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
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
    job->super.work = db_work;
    job->super.done = db_done;
    sg_workq_submit(sg_gw.dbq, &job->super);
}

/* ---- helpers ---- */

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
} close_t;

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
    free(c);
}

static void on_proxy_deleted(void *data, const sg_upstream_reply_t *r)
{
    close_t *c = data;
    if (r->status != 200 && r->status != 404)
        sg_warn("session %s: the proxy did not delete it (%ld %s)", c->sid, r->status, r->err ? r->err : r->body);
    /* the ledger records the close whatever the proxy said */
    sg_gw_db_submit(&c->job);
}

static void on_state_removed(void *data, const sg_state_result_t *r)
{
    close_t *c = data;
    char path[64];

    if (r->available && !r->ok && strcmp(c->reason, "deleted") != 0 && strcmp(c->reason, "admin") != 0 &&
        strcmp(c->reason, "proxy_lost") != 0) {
        /* the reaper of another gateway got there first */
        free(c);
        return;
    }
    sg_info("session %s: closing (%s)", c->sid, c->reason);
    sg_metrics_session_closed(c->reason);
    if (strcmp(c->reason, "deleted") == 0 || strcmp(c->reason, "proxy_lost") == 0) {
        /* the proxy has no container for it any more */
        sg_gw_db_submit(&c->job);
        return;
    }
    snprintf(path, sizeof(path), "/sessions/%s", c->sid);
    if (sg_upstream_start(sg_gw.upstream, "DELETE", path, NULL, 0, NULL, sg_gw.call_timeout_ms, NULL, NULL,
                          on_proxy_deleted, c) == NULL)
        sg_gw_db_submit(&c->job);
}

void sg_gw_close_session(const char *sid, int64_t tenant, const char *reason)
{
    close_t *c = calloc(1, sizeof(*c));
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
        sg_gw_close_session(sids[i], tenants[i], reasons[i]);
}

static void on_live_listed(void *data, int available, size_t n, const sg_live_session_t *list)
{
    if (available)
        sg_metrics_set_live_sessions((long)n);
}

static void on_reaper_tick(h2o_timeout_entry_t *e)
{
    if (!reaper_busy) {
        reaper_busy = 1;
        sg_state_sessions_expired(sg_gw.state, sg_wall_s(), 100, on_expired, NULL);
    }
    if (reaper_rounds++ % 5 == 0)
        sg_state_sessions_list(sg_gw.state, 0, on_live_listed, NULL);
    h2o_timeout_link(sg_gw.loop, &reaper_timeout, &reaper_entry);
}

void sg_gw_reaper_start(void)
{
    h2o_timeout_init(sg_gw.loop, &reaper_timeout, (uint64_t)sg_gw.reaper_interval_ms);
    reaper_entry.cb = on_reaper_tick;
    h2o_timeout_link(sg_gw.loop, &reaper_timeout, &reaper_entry);
}
