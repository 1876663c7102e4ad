/*
 * db.c — SQLite work on the DB threads (db.h): each thread opens its own
 * store on its first job and keeps it.
 */
#include "db.h"
#include "gateway.h"

#include <stdio.h>

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

void sg_gw_db_run(sg_gw_job_t *job, void (*fn)(sg_gw_job_t *job, sg_store_t *st), void (*done)(sg_gw_job_t *job))
{
    job->fn = fn;
    job->done = done;
    sg_gw_db_submit(job);
}
