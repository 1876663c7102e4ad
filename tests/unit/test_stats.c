/*
 * test_stats.c — the dashboard's own figures (gateway/base/stats.c): the
 * per-second ring (counts, p50 and p99 never below the true value and at
 * most 25 % above it, old seconds forgotten, the window's edges), and the
 * rejections per tenant (limits by name, unknown ones as "other", the
 * table's overflow counted under tenant 0).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "sgrun.h"
#include "stats.h"

#define T0 1800000000LL

static int reset(void **state)
{
    sg_stats_reset();
    return 0;
}

/* got is the upper bound of the bucket holding want: want <= got <= 1.25 want. */
static void assert_bound(double got, double want)
{
    if (!(got >= want * (1 - 1e-12) && got <= want * 1.25 * (1 + 1e-12)))
        fail_msg("%.9f s for a true value of %.9f s", got, want);
}

static void test_counts_per_second(void **state)
{
    sg_stats_point_t p[5];
    for (int i = 0; i < 3; i++)
        sg_stats_execution(T0, 0.002);
    sg_stats_execution(T0 + 2, 0.5);
    sg_stats_execution(T0 + 2, NAN); /* counted, no latency */
    sg_stats_series(T0 + 3, 5, p);
    /* seconds T0-1 .. T0+3 */
    assert_int_equal(p[0].executions, 0);
    assert_true(p[0].p50 < 0 && p[0].p99 < 0);
    assert_int_equal(p[1].executions, 3);
    assert_bound(p[1].p50, 0.002);
    assert_int_equal(p[2].executions, 0);
    assert_int_equal(p[3].executions, 2);
    assert_bound(p[3].p50, 0.5);
    assert_bound(p[3].p99, 0.5);
    assert_int_equal(p[4].executions, 0);
}

static void test_percentiles(void **state)
{
    sg_stats_point_t p;
    /* 1..1000 ms: p50 is 500 ms, p99 990 ms */
    for (int i = 1; i <= 1000; i++)
        sg_stats_execution(T0, i / 1000.0);
    sg_stats_series(T0, 1, &p);
    assert_int_equal(p.executions, 1000);
    assert_bound(p.p50, 0.500);
    assert_bound(p.p99, 0.990);
    /* one slow run among fast ones moves p99 only when it is more than 1 % */
    sg_stats_reset();
    for (int i = 0; i < 99; i++)
        sg_stats_execution(T0, 0.001);
    sg_stats_execution(T0, 30);
    sg_stats_series(T0, 1, &p);
    assert_bound(p.p50, 0.001);
    assert_bound(p.p99, 0.001);
    sg_stats_execution(T0, 30);
    sg_stats_series(T0, 1, &p);
    assert_bound(p.p99, 30);
}

static void test_extremes(void **state)
{
    sg_stats_point_t p;
    sg_stats_execution(T0, 0);       /* below the first bucket */
    sg_stats_execution(T0 + 1, 1e9); /* above the last: the last bucket */
    sg_stats_execution(T0 + 2, -1);  /* no latency */
    sg_stats_execution(0, 1);        /* no time: ignored */
    sg_stats_series(T0, 1, &p);
    assert_true(p.p50 > 0 && p.p50 <= 1e-4);
    sg_stats_series(T0 + 1, 1, &p);
    assert_true(p.p99 > 100 && p.p99 < 1e9);
    sg_stats_series(T0 + 2, 1, &p);
    assert_int_equal(p.executions, 1);
    assert_true(p.p50 < 0);
}

static void test_ring_forgets(void **state)
{
    sg_stats_point_t *p = calloc(SG_STATS_SECONDS, sizeof(*p));
    sg_stats_execution(T0, 0.01);
    /* a whole window later the same slot holds a new second */
    sg_stats_execution(T0 + SG_STATS_SECONDS, 0.02);
    sg_stats_series(T0 + SG_STATS_SECONDS, SG_STATS_SECONDS, p);
    uint64_t total = 0;
    for (size_t i = 0; i < SG_STATS_SECONDS; i++)
        total += p[i].executions;
    assert_int_equal(total, 1);
    assert_int_equal(p[SG_STATS_SECONDS - 1].executions, 1);
    assert_bound(p[SG_STATS_SECONDS - 1].p50, 0.02);
    /* the series asked past now: nothing, and more than the window is cut to it */
    sg_stats_series(T0 + 3 * SG_STATS_SECONDS, SG_STATS_SECONDS + 10, p);
    for (size_t i = 0; i < SG_STATS_SECONDS; i++)
        assert_int_equal(p[i].executions, 0);
    free(p);
}

static void test_rejections(void **state)
{
    uint64_t r[SG_STATS_NLIMITS];
    sg_stats_rejection(7, "rate");
    sg_stats_rejection(7, "rate");
    sg_stats_rejection(7, "concurrent_execs");
    sg_stats_rejection(7, "made_up");
    sg_stats_rejection(8, "sessions");
    sg_stats_rejections(7, r);
    assert_int_equal(r[0], 2); /* rate */
    assert_int_equal(r[1], 0);
    assert_int_equal(r[2], 1);
    assert_int_equal(r[SG_STATS_NLIMITS - 1], 1); /* other */
    sg_stats_rejections(8, r);
    assert_int_equal(r[1], 1);
    sg_stats_rejections(9, r); /* none */
    for (size_t i = 0; i < SG_STATS_NLIMITS; i++)
        assert_int_equal(r[i], 0);
    assert_string_equal(sg_stats_limits[SG_STATS_NLIMITS - 1], "other");
}

static void test_rejections_overflow(void **state)
{
    uint64_t r[SG_STATS_NLIMITS];
    int64_t n = SG_STATS_TENANTS; /* more tenants than the table keeps */
    for (int64_t t = 1; t <= n; t++)
        sg_stats_rejection(t, "execs_per_day");
    uint64_t kept = 0;
    for (int64_t t = 1; t <= n; t++) {
        sg_stats_rejections(t, r);
        assert_true(r[3] <= 1);
        kept += r[3];
    }
    sg_stats_rejections(0, r);
    assert_int_equal(kept + r[3], (uint64_t)n); /* every rejection counted once */
    assert_true(kept >= SG_STATS_TENANTS / 2);
    assert_true(r[3] > 0);
}

int main(void)
{
    return SG_RUN_TESTS("stats", NULL, NULL, reset, NULL, test_counts_per_second, test_percentiles, test_extremes,
                        test_ring_forgets, test_rejections, test_rejections_overflow);
}
