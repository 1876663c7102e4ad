/*
 * test_gcra.c — sg_gcra, the rate limiter both state backends share:
 * burst from idle, the steady rate afterwards, exact retry_after,
 * remaining and reset, and what a change of rate or burst does.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "state.h"
#include "sgrun.h"

#define NOW 1700000000000LL /* ms; any instant will do */

static void assert_seconds(double got, double want)
{
    if (fabs(got - want) > 1e-9)
        fail_msg("%.6f s, expected %.6f s", got, want);
}

/* One request against *tat (updated when allowed). */
static sg_rate_result_t step(int64_t now, int64_t *tat, long rate, long burst)
{
    sg_rate_result_t r;
    int64_t next;
    sg_gcra(now, *tat, rate, burst, &r, &next);
    assert_int_equal(r.available, 1);
    if (!r.allowed)
        assert_int_equal(next, *tat); /* a denial changes nothing */
    *tat = next;
    return r;
}

static void test_burst_from_idle(void **state)
{
    int64_t tat = 0; /* never seen */
    for (long i = 0; i < 5; i++) {
        sg_rate_result_t r = step(NOW, &tat, 60, 5);
        assert_true(r.allowed);
        assert_int_equal(r.limit, 5);
        assert_int_equal(r.remaining, 4 - i); /* counts down to 0 */
    }
    sg_rate_result_t r = step(NOW, &tat, 60, 5);
    assert_false(r.allowed);
    assert_int_equal(r.remaining, 0);
    assert_int_equal(tat, NOW + 5 * 1000);

    /* a stale tat in the past is the same as idle */
    tat = NOW - 3600 * 1000;
    for (int i = 0; i < 5; i++)
        assert_true(step(NOW, &tat, 60, 5).allowed);
    assert_false(step(NOW, &tat, 60, 5).allowed);
}

static void test_steady_rate(void **state)
{
    int64_t tat = 0;
    for (int i = 0; i < 3; i++)
        assert_true(step(NOW, &tat, 120, 3).allowed); /* T = 500 ms */
    assert_false(step(NOW, &tat, 120, 3).allowed);
    /* then exactly one per T, never two */
    for (int k = 1; k <= 20; k++) {
        int64_t now = NOW + k * 500;
        sg_rate_result_t r = step(now, &tat, 120, 3);
        assert_true(r.allowed);
        assert_int_equal(r.remaining, 0);
        r = step(now, &tat, 120, 3);
        assert_false(r.allowed);
        assert_seconds(r.retry_after_s, 0.5);
    }
    /* a long pause refills the bucket, to burst and no further */
    int64_t later = NOW + 20 * 500 + 3600 * 1000;
    sg_rate_result_t r = step(later, &tat, 120, 3);
    assert_true(r.allowed);
    assert_int_equal(r.remaining, 2);
}

static void test_retry_after_exact(void **state)
{
    int64_t tat = 0;
    for (int i = 0; i < 2; i++)
        step(NOW, &tat, 60, 2); /* T = 1000 ms */
    /* then asked at these times: the answer and its retry_after */
    static const struct {
        int64_t after_ms;
        int allowed;
        double retry_after_s;
    } asks[] = {
        {0, 0, 1.0}, {250, 0, 0.75}, {999, 0, 0.001}, {1000, 1, 0}, /* exactly when retry_after said */
    };
    for (size_t i = 0; i < sizeof(asks) / sizeof(asks[0]); i++) {
        sg_rate_result_t r = step(NOW + asks[i].after_ms, &tat, 60, 2);
        assert_int_equal(!!r.allowed, asks[i].allowed);
        assert_seconds(r.retry_after_s, asks[i].retry_after_s);
    }
}

static void test_remaining_refills(void **state)
{
    int64_t tat = 0;
    for (int i = 0; i < 10; i++)
        step(NOW, &tat, 600, 10); /* T = 100 ms */
    assert_false(step(NOW, &tat, 600, 10).allowed);
    /* after 350 ms, 3 requests' worth came back: one is used now, 2 remain */
    sg_rate_result_t r = step(NOW + 350, &tat, 600, 10);
    assert_true(r.allowed);
    assert_int_equal(r.remaining, 2);
    assert_int_equal(step(NOW + 350, &tat, 600, 10).remaining, 1);
    assert_int_equal(step(NOW + 350, &tat, 600, 10).remaining, 0);
    assert_false(step(NOW + 350, &tat, 600, 10).allowed);
}

static void test_reset_time(void **state)
{
    int64_t tat = 0;
    sg_rate_result_t r = step(NOW, &tat, 60, 5);
    assert_seconds(r.reset_s, 1.0); /* one request drains in one T */
    r = step(NOW, &tat, 60, 5);
    assert_seconds(r.reset_s, 2.0);
    r = step(NOW + 500, &tat, 60, 5);
    assert_seconds(r.reset_s, 2.5);
    for (int i = 0; i < 2; i++)
        step(NOW + 500, &tat, 60, 5);
    r = step(NOW + 500, &tat, 60, 5);
    assert_false(r.allowed);
    assert_seconds(r.reset_s, 4.5); /* tat - now, nothing added by the denial */
    assert_seconds(r.retry_after_s, 0.5);
    /* after reset the bucket is full: burst requests pass */
    int64_t full = NOW + 500 + 4500;
    for (long i = 0; i < 5; i++)
        assert_int_equal(step(full, &tat, 60, 5).remaining, 4 - i);
}

static void test_rate_change(void **state)
{
    /* exhausted at 60/min, burst 5 (T = 1 s): tat = now + 5 s */
    int64_t tat = 0;
    for (int i = 0; i < 5; i++)
        step(NOW, &tat, 60, 5);
    assert_false(step(NOW, &tat, 60, 5).allowed);

    /* raised to 6000/min (T = 10 ms, bucket 50 ms): what was let through
     * stays paid for; the next request may go once tat - 40 ms is reached */
    sg_rate_result_t r = step(NOW, &tat, 6000, 5);
    assert_false(r.allowed);
    assert_seconds(r.retry_after_s, 4.960);
    assert_seconds(r.reset_s, 5.0);
    r = step(NOW + 4960, &tat, 6000, 5);
    assert_true(r.allowed);
    assert_int_equal(r.remaining, 0);
    assert_int_equal(tat, NOW + 5010);
    /* from then on the new rate: one per 10 ms */
    assert_false(step(NOW + 4969, &tat, 6000, 5).allowed);
    assert_true(step(NOW + 4970, &tat, 6000, 5).allowed);
    /* idle for a bucket's time: a full burst of the new setting */
    for (long i = 0; i < 5; i++)
        assert_int_equal(step(NOW + 4980 + 50, &tat, 6000, 5).remaining, 4 - i);

    /* lowered to 6/min, burst 5 (T = 10 s, bucket 50 s): the 50 ms of debt
     * is small in the new bucket: 4 requests left after this one */
    r = step(NOW + 5030, &tat, 6, 5);
    assert_true(r.allowed);
    assert_int_equal(tat, NOW + 5080 + 10000);
    assert_int_equal(r.remaining, 3); /* floor((50 s - 10.05 s) / 10 s) */

    /* a burst shrunk below what was spent denies until the debt drains */
    tat = 0;
    for (int i = 0; i < 10; i++)
        step(NOW, &tat, 60, 10);
    r = step(NOW, &tat, 60, 2);
    assert_false(r.allowed);
    assert_seconds(r.retry_after_s, 9.0); /* tat + T - 2 T - now = 10 + 1 - 2 */
    assert_true(step(NOW + 9000, &tat, 60, 2).allowed);
}

static void test_uneven_interval(void **state)
{
    /* 7/min: T = ceil(60000 / 7) = 8572 ms; never more than 7 a minute */
    int64_t tat = 0;
    int allowed = 0;
    for (int64_t now = NOW; now < NOW + 60000; now += 100)
        allowed += step(now, &tat, 7, 1).allowed;
    assert_int_equal(allowed, 7);
    /* a huge rate still has a 1 ms interval */
    tat = 0;
    assert_true(step(NOW, &tat, 10000000, 1).allowed);
    sg_rate_result_t r = step(NOW, &tat, 10000000, 1);
    assert_false(r.allowed);
    assert_seconds(r.retry_after_s, 0.001);
}

static void test_edges(void **state)
{
    int64_t tat = 0;
    /* burst below 1 behaves as 1 */
    sg_rate_result_t r = step(NOW, &tat, 60, 0);
    assert_true(r.allowed);
    assert_int_equal(r.limit, 1);
    assert_int_equal(r.remaining, 0);
    assert_false(step(NOW, &tat, 60, 0).allowed);
    /* no rate: nothing limited, nothing stored */
    tat = 12345;
    for (int i = 0; i < 100; i++) {
        r = step(NOW, &tat, 0, 5);
        assert_true(r.allowed);
        assert_int_equal(r.remaining, 5);
    }
    assert_int_equal(tat, 12345);
}

int main(void)
{
    return SG_RUN_TESTS("gcra", NULL, NULL, NULL, NULL, test_burst_from_idle, test_steady_rate, test_retry_after_exact,
                        test_remaining_refills, test_reset_time, test_rate_change, test_uneven_interval, test_edges);
}
