/*
 * db.h — SQLite work off the loop: a job's fn runs on one of the
 * SANDGATE_DB_WORKERS threads, each with its own connection to
 * <SANDGATE_DATA_DIR>/sandgate.db (store.h), and its done runs back on the
 * loop (common/workq.h).
 */
#ifndef SANDGATE_GW_DB_H
#define SANDGATE_GW_DB_H

#include "store.h"
#include "workq.h"

/* A unit of SQLite work: fn runs on a DB thread with that thread's store
 * (rc = -1 and err set if the store could not be opened), then done runs on
 * the loop and owns the job. */
typedef struct sg_gw_job sg_gw_job_t;
struct sg_gw_job {
    sg_job_t super;
    void (*fn)(sg_gw_job_t *job, sg_store_t *st);
    void (*done)(sg_gw_job_t *job);
    int rc;
    char err[256];
};
/* Loop thread. After shutdown has stopped the DB threads, done runs at
 * once with rc = -1 ("the gateway is shutting down"). */
void sg_gw_db_submit(sg_gw_job_t *job);
/* Submits job with fn and done (the usual start of a job). Loop thread. */
void sg_gw_db_run(sg_gw_job_t *job, void (*fn)(sg_gw_job_t *job, sg_store_t *st), void (*done)(sg_gw_job_t *job));

#endif
