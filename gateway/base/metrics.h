/*
 * metrics.h — the gateway's counters, rendered in Prometheus text format at
 * GET /metrics. Loop thread only. Label values are static strings (route
 * names, limit names, languages from the proxy's table); a fixed number of
 * series is kept, later new ones are counted under "other".
 *
 * Seed 004's names are rendered from the same counters, so they cannot
 * drift: sandbox_executions_total and sandbox_execution_duration_seconds
 * are the executions that ran (the histogram's count), sandbox_errors_total
 * {type} sums the error series of the families (executions that failed or
 * timed out, calls to the proxy that failed, installs that failed or were
 * refused), sandbox_package_installs_total the installs.
 */
#ifndef SANDGATE_METRICS_H
#define SANDGATE_METRICS_H

#include "buf.h"

#include <stddef.h>

void sg_metrics_request(const char *route, int status);
/* outcome: "success", "error", "timeout", "failed" (no result),
 * "cancelled"; runtime: "runc", "runsc" or "unknown". */
void sg_metrics_execution(const char *lang, const char *runtime, const char *outcome, double seconds);
/* limit: "rate", "sessions", "execs_per_day", "exec_seconds_per_day". */
void sg_metrics_quota_rejection(const char *limit);
/* kind: "unreachable", "timeout", "bad_reply", "5xx". */
void sg_metrics_upstream_error(const char *kind);
/* An execution whose usage was read from its result's JSON (a streamed
 * run, or a proxy that does not state X-Sandgate-Usage), not its header. */
void sg_metrics_usage_from_body(void);
void sg_metrics_set_live_sessions(long n);
/* Open sessions by runtime: index 0 runc, 1 runsc, 2 unknown (a record
 * without one: opened before the runtime was kept). */
#define SG_METRICS_RUNTIMES 3
size_t sg_metrics_runtime_index(const char *runtime);
void sg_metrics_set_live_by_runtime(const long n[SG_METRICS_RUNTIMES]);
void sg_metrics_session_closed(const char *reason);
void sg_metrics_set_redis_up(int up);
/* A library install the proxy answered (POST /pip_install, POST
 * /sessions/{id}/libraries): success 1 or 0. */
void sg_metrics_package_install(int success);
/* An error no other counter holds, by type (static string): "package_refused". */
void sg_metrics_error(const char *type);
int sg_metrics_render(sg_buf_t *out);

#endif
