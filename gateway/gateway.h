/*
 * gateway.h — what the gateway's modules share: the process-wide context
 * (set once by main, read-only afterwards) and DB jobs.
 *
 * Threads: one event-loop thread owns h2o, the state backend and the
 * upstream; SANDGATE_DB_WORKERS threads run SQLite work, each with its own
 * connection to <SANDGATE_DATA_DIR>/sandgate.db, and hand results back to
 * the loop (common/workq.h).
 */
#ifndef SANDGATE_GATEWAY_H
#define SANDGATE_GATEWAY_H

#include <h2o.h>

#include "state.h"
#include "throttle.h"
#include "store.h"
#include "upstream.h"
#include "workq.h"

typedef struct {
    h2o_loop_t *loop;
    sg_workq_t *dbq;
    sg_state_t *state;
    sg_upstream_t *upstream;
    const char *data_dir;
    const char *admin_token;  /* "" disables the admin API */
    int redis_configured;
    double default_timeout;   /* execution timeout when a request names none, capped by the tenant's */
    long default_memory_mb;   /* likewise for a new session's memory */
    double default_cpus;
    long upstream_grace_ms;   /* added to an execution's timeout for the call to the proxy */
    long call_timeout_ms;     /* every other call to the proxy */
    long library_timeout_ms;  /* a library install through the proxy */
    long reaper_interval_ms;
    size_t max_body;          /* JSON bodies */
    size_t max_file_bytes;    /* file uploads */
    size_t max_header_bytes;  /* all request headers together */
    int stopping;             /* shutting down: no new DB work */
    sg_throttle_t *admin_throttle; /* wrong admin tokens per client address */
} sg_gw_t;

extern sg_gw_t sg_gw;

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
void sg_gw_db_submit(sg_gw_job_t *job);

/* Closes a session everywhere, for a reason ("deleted", "idle",
 * "lifetime", "admin", "proxy_lost"), used by DELETE, the reaper, the admin
 * API and a proxy that lost the session. The proxy removes the container
 * first, or confirms it has none (404, code no_such_session); only then is
 * the session taken out of the live state (its slot freed) and closed in
 * the ledger. A removal the proxy does not confirm is tried again from the
 * reaper (1 s, 2 s, ... 30 s apart) until it is; the session keeps its
 * slot meanwhile. done (may be NULL) runs with closed = 1 once the close
 * is on record, or with closed = 0 when the proxy did not confirm this
 * attempt (the close goes on in the background; done is not called
 * again). Asked again while one is under way, it joins that one. */
void sg_gw_close_session(const char *sid, int64_t tenant, const char *reason, void (*done)(void *data, int closed),
                         void *data);
/* Closes under way or waiting for a retry (metrics, tests). */
size_t sg_gw_closes_pending(void);
/* The reaper: every reaper_interval_ms, closes sessions past their idle or
 * lifetime deadline. */
void sg_gw_reaper_start(void);

/* Brings the live-session state back in line with SQLite: an open session
 * the state does not know (the gateway restarted without Redis, or Redis
 * restarted empty) is put back, with a full idle period and its lifetime
 * deadline, so that it is reaped and counted again. Runs at start and every
 * ten reaper rounds. */
void sg_gw_rebuild_sessions(void);
/* The same at start, before requests are taken: on the calling thread with
 * st, driving the loop until the state has answered (or timeout_ms). */
int sg_gw_rebuild_sessions_now(sg_store_t *st, int timeout_ms);

/* The wall clock in whole seconds, rounded up: deadlines computed from it
 * are never early. */
int64_t sg_gw_now_up(void);
/* "yyyymmdd" of a unix time, UTC. */
void sg_gw_day(int64_t unix_s, char out[9]);
/* Constant-time comparison of a presented secret with the expected one. */
int sg_gw_secret_equal(const char *given, size_t len, const char *expected);
/* The bearer token of a request, or {NULL,0}. */
h2o_iovec_t sg_gw_bearer(h2o_req_t *req);

#endif
