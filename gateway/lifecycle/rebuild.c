/*
 * rebuild.c — the live-session state brought back in line with the
 * ledger (rebuild.h).
 */
#include "rebuild.h"
#include "clock.h"
#include "db.h"
#include "gateway.h"
#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    sg_live_session_t s;
    long idle_timeout;
} rebuild_item_t;

typedef struct {
    sg_gw_job_t job;
    rebuild_item_t *items;
    size_t n, cap;
    sg_store_t *st;     /* during fn only */
    sg_tenant_t tenant; /* the last one looked up */
} rebuild_job_t;

static void add_open(const sg_session_rec_t *r, void *data)
{
    rebuild_job_t *j = data;
    if (j->n == j->cap) {
        j->cap = j->cap ? j->cap * 2 : 32;
        j->items = sg_xrealloc(j->items, j->cap * sizeof(*j->items));
    }
    rebuild_item_t *it = &j->items[j->n++];
    memset(it, 0, sizeof(*it));
    snprintf(it->s.id, sizeof(it->s.id), "%s", r->id);
    it->s.tenant_id = r->tenant_id;
    snprintf(it->s.lang, sizeof(it->s.lang), "%s", r->lang);
    it->s.created_at = it->s.last_used_at = r->created_at;
    it->s.executions = r->executions;
    snprintf(it->s.proxy, sizeof(it->s.proxy), "%s", r->proxy);
}

static void rebuild_fn(sg_gw_job_t *job, sg_store_t *st)
{
    rebuild_job_t *j = (rebuild_job_t *)job;
    /* the sessions' execution counts as the ledger has them */
    job->rc = sg_store_usage_catch_up(st, NULL, job->err, sizeof(job->err));
    if (job->rc == 0)
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
        rebuild_one_t *one = sg_xmalloc(sizeof(*one));
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
    rebuild_job_t *j = sg_xcalloc(1, sizeof(*j));
    uint64_t deadline = sg_now_ms() + (uint64_t)timeout_ms;
    rebuild_fn(&j->job, st);
    rebuild_done(&j->job);
    while (rebuild_pending != 0 && sg_now_ms() < deadline)
        h2o_evloop_run(sg_gw.loop, 10);
    return rebuild_pending == 0 ? 0 : -1;
}

void sg_gw_rebuild_sessions(void)
{
    rebuild_job_t *j = sg_xcalloc(1, sizeof(*j));
    sg_gw_db_run(&j->job, rebuild_fn, rebuild_done);
}
