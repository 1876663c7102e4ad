/*
 * usage_hdr.h — what an execution used, as the proxy states it in its
 * reply's X-Sandgate-Usage header, so that the gateway records the run
 * without parsing the reply's body (whose stdout and stderr can be
 * megabytes of a tenant's output, on the gateway's one loop):
 *
 *   X-Sandgate-Usage: wall=0.001064; exit=0; timed_out=0; output=2; runtime=runc
 *
 * wall: the proxy's wall time of the run in seconds (the body's
 * "wall_time", printed the same way); exit: its "exit_code"; timed_out: 0
 * or 1; output: the lengths of the body's "stdout" and "stderr" strings
 * (as sent: after UTF-8 repair), summed; runtime (optional): the body's
 * "runtime". Keys may come in any order; unknown keys are skipped (for a
 * newer proxy); a value out of its range, a key twice or a missing key
 * make the whole header invalid, and the body is read instead.
 */
#ifndef SANDGATE_USAGE_HDR_H
#define SANDGATE_USAGE_HDR_H

#include <stddef.h>
#include <stdint.h>

#define SG_USAGE_HDR_NAME "x-sandgate-usage"
#define SG_USAGE_HDR_MAX 160 /* longest value written or read */

typedef struct {
    double wall_s;
    int exit_code;
    int timed_out;
    int64_t output_bytes;
    char runtime[32]; /* "" when not stated */
} sg_usage_hdr_t;

/* The header's value into out (at least SG_USAGE_HDR_MAX bytes). */
void sg_usage_hdr_format(const sg_usage_hdr_t *u, char *out, size_t outlen);
/* 0 and *u filled, or -1 when the value is not a valid statement. */
int sg_usage_hdr_parse(const char *v, size_t len, sg_usage_hdr_t *u);

#endif
