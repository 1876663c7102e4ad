/*
 * gateway.h — the gateway's process-wide context, set once by main and
 * read-only afterwards (but `stopping`).
 *
 * Threads: one event-loop thread owns h2o, the state backend and the
 * upstream; SANDGATE_DB_WORKERS threads run SQLite work (db.h), each with
 * its own connection to <SANDGATE_DATA_DIR>/sandgate.db, and hand results
 * back to the loop (common/workq.h).
 *
 * The rooms below gateway/: core/ (db jobs, clocks, credentials, the
 * request's path), handler/ (one file per route family), lifecycle/
 * (close, reaper, rebuild, templates, purge), state/ (Redis or in-process
 * counters and live sessions), store/ (the tenant model, SQLite, tokens).
 */
#ifndef SANDGATE_GATEWAY_H
#define SANDGATE_GATEWAY_H

#include <h2o.h>

#include "state.h"
#include "store.h"
#include "workq.h"

/* Held here, defined in core/ (upstream.h, throttle.h), whose request path
 * reads this context: those who use them include their headers. */
struct sg_upstream;
struct sg_throttle;

typedef struct {
    h2o_loop_t *loop;
    sg_workq_t *dbq;
    sg_state_t *state;
    struct sg_upstream *upstream;
    const char *data_dir;
    const char *admin_token; /* "" disables the admin API */
    int redis_configured;
    double default_timeout; /* execution timeout when a request names none, capped by the tenant's */
    long default_memory_mb; /* likewise for a new session's memory */
    double default_cpus;
    long upstream_grace_ms;  /* added to an execution's timeout for the call to the proxy */
    long call_timeout_ms;    /* every other call to the proxy */
    long library_timeout_ms; /* a library install through the proxy */
    long reaper_interval_ms;
    long usage_import_ms;  /* a usage row waits this long in the journal before a DB thread moves it (core/ledger.c) */
    size_t max_body;       /* JSON bodies */
    size_t max_file_bytes; /* file uploads */
    size_t max_header_bytes;            /* all request headers together */
    long mcp_sessions;                  /* MCP sessions per tenant (handler/mcp.c) */
    long mcp_idle_s;                    /* an MCP session's idle expiry */
    const char *mcp_origins;            /* Origins /mcp accepts besides its own, comma-separated */
    int stopping;                       /* shutting down: no new DB work */
    struct sg_throttle *admin_throttle; /* wrong admin tokens per client address */
} sg_gw_t;

extern sg_gw_t sg_gw;

#endif
