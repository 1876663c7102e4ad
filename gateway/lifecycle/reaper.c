/*
 * reaper.c — the gateway's periodic round (reaper.h).
 */
#include "reaper.h"
#include "close.h"
#include "db.h"
#include "gateway.h"
#include "metrics.h"
#include "purge.h"
#include "rebuild.h"
#include "sweep.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

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
        /* one under way, or waiting for its retry, is left to that */
        if (!sg_gw_close_under_way(sids[i]))
            sg_gw_close_session(sids[i], tenants[i], reasons[i], NULL, NULL);
    }
}

static void on_live_listed(void *data, int available, size_t n, const sg_live_session_t *list)
{
    if (available)
        sg_metrics_set_live_sessions((long)n);
}

/* Open sessions by runtime, from the session records (the metrics). */
typedef struct {
    sg_gw_job_t job;
    long n[SG_METRICS_RUNTIMES];
} runtimes_job_t;

static void count_runtime(const sg_session_rec_t *s, void *data)
{
    ((runtimes_job_t *)data)->n[sg_metrics_runtime_index(s->runtime)]++;
}

static void runtimes_fn(sg_gw_job_t *job, sg_store_t *st)
{
    job->rc = sg_store_session_list_open(st, 0, count_runtime, job, job->err, sizeof(job->err));
}

static void runtimes_done(sg_gw_job_t *job)
{
    runtimes_job_t *j = (runtimes_job_t *)job;
    if (job->rc == 0)
        sg_metrics_set_live_by_runtime(j->n);
    free(j);
}

static void on_reaper_tick(h2o_timeout_entry_t *e)
{
    if (!reaper_busy) {
        reaper_busy = 1;
        sg_state_sessions_expired(sg_gw.state, sg_wall_s(), 100, on_expired, NULL);
    }
    sg_gw_closes_retry();
    if (reaper_rounds % 5 == 0) {
        sg_state_sessions_list(sg_gw.state, 0, on_live_listed, NULL);
        sg_gw_db_run(sg_xcalloc(1, sizeof(runtimes_job_t)), runtimes_fn, runtimes_done);
    }
    if (reaper_rounds % 10 == 0) {
        sg_gw_rebuild_sessions();
        sg_gw_sweep_proxies(); /* sandboxes of closed sessions that a proxy re-adopted */
        sg_gw_purge_sweep();   /* tenants sandgate-admin marked for deletion */
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
