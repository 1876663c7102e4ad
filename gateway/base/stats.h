/*
 * stats.h — what the ops dashboard draws that no other module keeps, per
 * gateway process and in bounded memory:
 *
 *   executions per second over the last SG_STATS_SECONDS seconds, with their
 *   latency (p50, p99): a ring of one-second slots, each a histogram of
 *   log-spaced buckets (every bucket 25 % wider than the one below, from
 *   0.1 ms to about 760 s), so a percentile is the upper bound of its bucket:
 *   never below the true value, at most 25 % above it;
 *
 *   rejections (429s) per tenant and limit since the process started: for
 *   up to three quarters of SG_STATS_TENANTS tenants, further ones counted
 *   together under tenant 0.
 *
 * The admin API serves them (handler/admin_dash.c). Loop thread only.
 */
#ifndef SANDGATE_STATS_H
#define SANDGATE_STATS_H

#include <stddef.h>
#include <stdint.h>

#define SG_STATS_SECONDS 600
#define SG_STATS_TENANTS 4096

/* One execution answered at now_s (unix seconds) after latency_s seconds
 * (negative or not finite: counted, no latency). */
void sg_stats_execution(int64_t now_s, double latency_s);

/* The limits a rejection is counted under, in this order; any other name
 * counts as "other" (the last). */
#define SG_STATS_NLIMITS 7
extern const char *const sg_stats_limits[SG_STATS_NLIMITS];
/* A 429 of tenant for limit (as sg_gw_reply_429 names it). */
void sg_stats_rejection(int64_t tenant, const char *limit);
/* The tenant's rejections since start, per limit (sg_stats_limits' order). */
void sg_stats_rejections(int64_t tenant, uint64_t out[SG_STATS_NLIMITS]);

/* The second now_s - n + 1 .. now_s, oldest first: out[i] for second
 * now_s - n + 1 + i; p50 and p99 in seconds, -1 for a second with no
 * latency. n at most SG_STATS_SECONDS. */
typedef struct {
    uint32_t executions;
    double p50, p99;
} sg_stats_point_t;
void sg_stats_series(int64_t now_s, size_t n, sg_stats_point_t *out);

/* Marks the start of the counting (the gateway's start), and when it was. */
void sg_stats_init(int64_t now_s);
int64_t sg_stats_since(void);

/* Tests only: forgets everything. */
void sg_stats_reset(void);

#endif
