/*
 * test_solo.c — the copy a lone gateway keeps of a tenant's admission keys
 * (gateway/state/solo.c): the edges where it must not decide (a refusal of
 * any step, another day, a quota key about to expire, seconds within a
 * rounding of the limit, a token too long for a slot) leave it unchanged;
 * the admissions it does decide change it as SCRIPT_EXEC_ADMIT changes
 * Redis (leases run out at their second, a token held is renewed, not
 * counted twice); the refusals it decides (at the cap, by the day's
 * quota, a session at the cap) change it as the script changes Redis, and
 * a slot of the token's own that has lapsed is not held. That Redis answers every admission as the copy did is
 * tests/integration/test_state.c's solo group, against a real redis-server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "solo.h"
#include "sgrun.h"

#define DAY "20260301"

static sg_solo_admit_t args(const char *token, int64_t now_s)
{
    sg_solo_admit_t a = {.now_ms = now_s * 1000,
                         .now_s = now_s,
                         .mono_ms = 1000,
                         .interval_ms = 0,
                         .burst = 1,
                         .max_execs = 2,
                         .token = token,
                         .until_s = now_s + 60,
                         .day = DAY,
                         .execs_per_day = 10,
                         .seconds_per_day = 100};
    return a;
}

/* A copy as SCRIPT_SOLO_SEED reads it: no rate key, the day's counters. */
static void load(sg_solo_tenant_t *t, int64_t execs, double seconds, int64_t pttl_ms)
{
    memset(t, 0, sizeof(*t));
    sg_solo_load(t, 0, pttl_ms, DAY, execs, seconds, 1000);
}

/* The state that matters, to see that a call left it as it was. */
static void snapshot(const sg_solo_tenant_t *t, char *out, size_t len)
{
    int n = snprintf(out, len, "tat %lld execs %lld seconds %.17g slots %zu:", (long long)t->tat_ms,
                     (long long)t->execs, t->seconds, t->nslots);
    for (size_t i = 0; i < t->nslots && n > 0 && (size_t)n < len; i++)
        n += snprintf(out + n, len - (size_t)n, " %s@%lld", t->slots[i].token, (long long)t->slots[i].until_s);
}

static int admit(sg_solo_tenant_t *t, const sg_solo_admit_t *a)
{
    int64_t stored, execs;
    long n;
    double seconds;
    return sg_solo_admit(t, a, &stored, &n, &execs, &seconds);
}

/* Not certain: refused by admit, and the copy exactly as it was. */
static void expect_left_to_redis(sg_solo_tenant_t *t, const sg_solo_admit_t *a)
{
    char before[512], after[512];
    snapshot(t, before, sizeof(before));
    assert_int_equal(admit(t, a), 0);
    snapshot(t, after, sizeof(after));
    assert_string_equal(before, after);
}

static void test_admits_and_counts(void **state)
{
    sg_solo_tenant_t t;
    int64_t stored, execs;
    long n;
    double seconds;
    load(&t, 3, 1.5, -1);
    sg_solo_admit_t a = args("s/a", 5000);
    assert_int_equal(sg_solo_admit(&t, &a, &stored, &n, &execs, &seconds), 1);
    assert_int_equal(n, 1);
    assert_int_equal(execs, 4);
    assert_true(seconds == 1.5);
    /* the same token again is a renewal: still one slot */
    a.until_s = 5100;
    assert_int_equal(sg_solo_admit(&t, &a, &stored, &n, &execs, &seconds), 1);
    assert_int_equal(n, 1);
    assert_int_equal(t.slots[0].until_s, 5100);
    /* a second token fills the cap of 2; a third is Redis's to refuse */
    sg_solo_admit_t b = args("s/b", 5000);
    assert_int_equal(admit(&t, &b), 1);
    sg_solo_admit_t c = args("s/c", 5000);
    expect_left_to_redis(&t, &c);
    /* ...which refuses it at the cap for certain: taken as the script takes
     * it (the slots as they were), answered {1, tat, 0, 2} */
    assert_int_equal(sg_solo_admit_full(&t, &c, &stored, &n), 1);
    assert_int_equal(n, 2);
    assert_int_equal(t.nslots, 2);
    /* not for a token that holds a live slot (a renewal), nor below the cap */
    assert_int_equal(sg_solo_admit_full(&t, &b, &stored, &n), 0);
    sg_solo_admit_t wide = c;
    wide.max_execs = 3;
    assert_int_equal(sg_solo_admit_full(&t, &wide, &stored, &n), 0);
    /* one given back: the third fits */
    assert_int_equal(sg_solo_release(&t, "s/b"), 1);
    assert_int_equal(sg_solo_release(&t, "s/b"), 0);
    assert_int_equal(admit(&t, &c), 1);
    sg_solo_free(&t);
}

/* ZREMRANGEBYSCORE -inf now: a lease whose second has come is gone. */
static void test_leases_run_out(void **state)
{
    sg_solo_tenant_t t;
    load(&t, 0, 0, -1);
    assert_int_equal(sg_solo_add_slot(&t, "old/1", 6000), 0);
    assert_int_equal(sg_solo_add_slot(&t, "old/2", 6001), 0);
    sg_solo_admit_t a = args("new/1", 6000);
    /* at 6000 the first has run out, the second has not: 2 with the new one */
    assert_int_equal(admit(&t, &a), 1);
    assert_int_equal(t.nslots, 2);
    sg_solo_admit_t b = args("new/2", 6000);
    expect_left_to_redis(&t, &b);
    sg_solo_free(&t);
}

/* The sessions set: snapshot of the members, with the rate key. */
static void snapshot_sessions(const sg_solo_tenant_t *t, char *out, size_t len)
{
    int n = snprintf(out, len, "tat %lld sessions %zu:", (long long)t->tat_ms, t->nsessions);
    for (size_t i = 0; i < t->nsessions && n > 0 && (size_t)n < len; i++)
        n += snprintf(out + n, len - (size_t)n, " %s@%lld", t->sessions[i].token, (long long)t->sessions[i].until_s);
}

static sg_solo_session_admit_t session_args(const char *member, int64_t now_s, long max)
{
    sg_solo_session_admit_t a = {.now_ms = now_s * 1000,
                                 .now_s = now_s,
                                 .interval_ms = 0,
                                 .burst = 1,
                                 .max = max,
                                 .member = member,
                                 .until_s = now_s + 30};
    return a;
}

/* Certain: 1, and the tenant's sessions then count; the stored tat. */
static int64_t expect_session_admitted(sg_solo_tenant_t *t, const sg_solo_session_admit_t *a, long count)
{
    int64_t stored;
    long n;
    assert_int_equal(sg_solo_session_admit(t, a, &stored, &n), 1);
    assert_int_equal(n, count);
    return stored;
}

/* Not certain (or a refusal): 0, and the copy exactly as it was. */
static void expect_session_left_to_redis(sg_solo_tenant_t *t, const sg_solo_session_admit_t *a)
{
    char before[512], after[512];
    int64_t stored;
    long count;
    snapshot_sessions(t, before, sizeof(before));
    assert_int_equal(sg_solo_session_admit(t, a, &stored, &count), 0);
    snapshot_sessions(t, after, sizeof(after));
    assert_string_equal(before, after);
}

/* SCRIPT_SESSION_ADMIT on the copy: reservations up to the cap, counted as
 * ZCARD after ZREMRANGEBYSCORE -inf now; a member already there, a refusal
 * at the cap or by the rate, a member too long: Redis's. */
static void test_sessions(void **state)
{
    sg_solo_tenant_t t;
    load(&t, 0, 0, -1);
    /* a session whose lifetime ends at 8000, one at 9000 */
    assert_int_equal(sg_solo_add_session(&t, "sid-1", 8000), 0);
    assert_int_equal(sg_solo_add_session(&t, "sid-2", 9000), 0);
    sg_solo_session_admit_t a = session_args("pending:a", 7000, 3);
    a.until_s = 8500;
    expect_session_admitted(&t, &a, 3);
    /* at the cap: Redis refuses, the copy unchanged */
    sg_solo_session_admit_t b = session_args("pending:b", 7000, 3);
    expect_session_left_to_redis(&t, &b);
    /* the reservation again: left to Redis (it would not count twice) */
    expect_session_left_to_redis(&t, &a);
    /* at 8000 sid-1's lifetime is over: b fits beside sid-2 and a, and sid-1 is gone */
    b.now_s = 8000;
    b.now_ms = 8000000;
    b.until_s = 8030;
    expect_session_admitted(&t, &b, 3);
    assert_int_equal(sg_solo_remove_session(&t, "sid-1"), 0);
    /* a session committed replaces its reservation; one removed frees a slot */
    assert_int_equal(sg_solo_remove_session(&t, "pending:a"), 1);
    assert_int_equal(sg_solo_add_session(&t, "sid-3", 9500), 0);
    assert_int_equal(sg_solo_remove_session(&t, "sid-2"), 1);
    sg_solo_session_admit_t c = session_args("pending:c", 8000, 3);
    expect_session_admitted(&t, &c, 3);
    /* a rate of 60/min with burst 1: the first passes, the second at once is refused */
    sg_solo_session_admit_t d = session_args("pending:d", 8000, 10);
    d.interval_ms = 1000;
    assert_int_equal(expect_session_admitted(&t, &d, 4), 0);
    sg_solo_session_admit_t e = session_args("pending:e", 8000, 10);
    e.interval_ms = 1000;
    expect_session_left_to_redis(&t, &e);
    /* a member too long for the copy */
    char longer[100];
    memset(longer, 'x', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    sg_solo_session_admit_t g = session_args(longer, 8000, 10);
    expect_session_left_to_redis(&t, &g);
    assert_int_equal(sg_solo_add_session(&t, longer, 9000), -1);
    sg_solo_free(&t);
}

static void test_rate(void **state)
{
    sg_solo_tenant_t t;
    load(&t, 0, 0, -1);
    /* 60/min, burst 2: two at once, the third refused */
    sg_solo_admit_t a = args("r/1", 7000);
    a.interval_ms = 1000;
    a.burst = 2;
    a.max_execs = 100;
    assert_int_equal(admit(&t, &a), 1);
    assert_int_equal(t.tat_ms, 7001000);
    a.token = "r/2";
    assert_int_equal(admit(&t, &a), 1);
    a.token = "r/3";
    expect_left_to_redis(&t, &a);
    int64_t full_tat;
    long full_n;
    assert_int_equal(sg_solo_admit_full(&t, &a, &full_tat, &full_n), 0); /* past the rate: not the cap's */
    /* ...for certain by the rate: the scripts' refusal, with the stored
     * arrival time, the mirror unchanged; not one ms later than the edge */
    int64_t stored = 0, tat = t.tat_ms;
    assert_int_equal(sg_solo_rate_refused(&t, a.now_ms, 1000, 2, &stored), 1);
    assert_int_equal(stored, tat);
    assert_int_equal(t.tat_ms, tat);
    assert_int_equal(sg_solo_rate_refused(&t, a.now_ms + 999, 1000, 2, &stored), 1);
    assert_int_equal(sg_solo_rate_refused(&t, a.now_ms + 1000, 1000, 2, &stored), 0);
    assert_int_equal(sg_solo_rate_refused(&t, a.now_ms, 0, 2, &stored), 0); /* no rate: never */
    /* a second later, one more */
    a.now_ms += 1000;
    assert_int_equal(admit(&t, &a), 1);
    assert_int_equal(sg_solo_rate(&t, a.now_ms, 1000, 2, &stored), 0);
    assert_int_equal(sg_solo_rate(&t, a.now_ms + 1000, 1000, 2, &stored), 1);
    assert_int_equal(sg_solo_rate(&t, a.now_ms + 1000, 0, 2, &stored), 0); /* no rate: nothing to copy */
    sg_solo_free(&t);
}

static void test_quota_edges(void **state)
{
    sg_solo_tenant_t t;
    sg_solo_admit_t a = args("q/1", 8000);

    load(&t, 10, 0, -1); /* the day's 10 used */
    expect_left_to_redis(&t, &a);
    sg_solo_free(&t);

    load(&t, 0, 100, -1); /* the seconds used */
    expect_left_to_redis(&t, &a);
    sg_solo_free(&t);

    load(&t, 0, 100 - 1e-12, -1); /* within a rounding of the limit */
    expect_left_to_redis(&t, &a);
    sg_solo_free(&t);

    load(&t, 0, 99.9, -1);
    assert_int_equal(admit(&t, &a), 1);
    sg_solo_add_seconds(&t, DAY, 0.1); /* now at the limit */
    a.token = "q/2";
    expect_left_to_redis(&t, &a);
    sg_solo_add_seconds(&t, "20260302", 50); /* another day's: not this copy's */
    assert_true(t.seconds < 100.01);
    sg_solo_free(&t);

    load(&t, 0, 0, -2); /* the key is absent: Redis seeds it from the ledger */
    expect_left_to_redis(&t, &a);
    sg_solo_free(&t);

    load(&t, 0, 0, 4000); /* expires within the edge (5 s) */
    expect_left_to_redis(&t, &a);
    sg_solo_free(&t);

    load(&t, 0, 0, 60000); /* expires later: trusted until 5 s before */
    assert_int_equal(admit(&t, &a), 1);
    a.token = "q/3";
    a.mono_ms = 1000 + 60000 - 5000;
    expect_left_to_redis(&t, &a);
    sg_solo_free(&t);

    load(&t, 0, 0, -1);
    a = args("q/4", 8000);
    a.day = "20260302"; /* another day */
    expect_left_to_redis(&t, &a);
    sg_solo_free(&t);
}

/* SCRIPT_EXEC_ADMIT's refusal by the day's quota, certain on the copy:
 * past the rate and slot steps, with the day's key known. The script
 * takes the rate step, drops the lapsed slots, takes the token's slot and
 * gives it back; its answer carries the status and the day's counters. */
static void test_quota_refusals(void **state)
{
    sg_solo_tenant_t t;
    int64_t stored, execs;
    long n;
    int status;
    double seconds;
    char before[512], after[512];

    load(&t, 10, 3.5, -1);                                    /* the day's 10 used */
    assert_int_equal(sg_solo_add_slot(&t, "old/1", 8000), 0); /* lapsed at 8000 */
    assert_int_equal(sg_solo_add_slot(&t, "q/1", 8100), 0);   /* the token's own, live */
    sg_solo_admit_t a = args("q/1", 8000);
    a.interval_ms = 1000;
    a.burst = 5;
    assert_int_equal(sg_solo_admit_quota(&t, &a, &stored, &n, &status, &execs, &seconds), 1);
    assert_int_equal(status, SG_QUOTA_EXECS);
    assert_int_equal(execs, 10);
    assert_true(seconds == 3.5);
    assert_int_equal(stored, 0);                    /* no rate key before */
    assert_int_equal(t.tat_ms, 8000 * 1000 + 1000); /* the rate step taken */
    assert_int_equal(n, 0);                         /* old/1 lapsed, q/1 given back */
    assert_int_equal(t.nslots, 0);
    assert_int_equal(t.execs, 10);
    sg_solo_free(&t);

    load(&t, 0, 100.5, -1); /* the day's seconds used */
    a = args("q/2", 8000);
    assert_int_equal(sg_solo_admit_quota(&t, &a, &stored, &n, &status, &execs, &seconds), 1);
    assert_int_equal(status, SG_QUOTA_SECONDS);
    sg_solo_free(&t);

    /* not certain, or not the quota's: the copy as it was */
    const struct {
        int64_t execs;
        double seconds;
        int64_t pttl_ms;
        const char *day;
        long max_execs;
        int64_t interval_ms;
    } left[] = {
        {10, 0, -1, "20260302", 2, 0},                          /* another day */
        {10, 0, -2, DAY, 2, 0},                                 /* no key: Redis seeds it */
        {10, 0, 4000, DAY, 2, 0},                               /* about to expire */
        {0, 100, -1, DAY, 2, 0},                                /* seconds at the limit: within its rounding */
        {0, 100 + 1e-12, -1, DAY, 2, 0}, {9, 0, -1, DAY, 2, 0}, /* inside the limits: an admission */
        {10, 0, -1, DAY, 0, 0},                                 /* at the cap: the cap's refusal, which comes first */
        {10, 0, -1, DAY, 2, 1000},                              /* past the rate (the tat below) */
    };
    for (size_t i = 0; i < sizeof(left) / sizeof(left[0]); i++) {
        load(&t, left[i].execs, left[i].seconds, left[i].pttl_ms);
        t.tat_ms = 8000 * 1000 + 5000;
        a = args("q/3", 8000);
        a.day = left[i].day;
        a.max_execs = left[i].max_execs;
        a.interval_ms = left[i].interval_ms;
        snapshot(&t, before, sizeof(before));
        assert_int_equal(sg_solo_admit_quota(&t, &a, &stored, &n, &status, &execs, &seconds), 0);
        snapshot(&t, after, sizeof(after));
        assert_string_equal(before, after);
        sg_solo_free(&t);
    }
}

/* A slot of the token's own that has lapsed is dropped before the script
 * looks the token up: it does not hold the slot, and at the cap the
 * script refuses it. */
static void test_lapsed_own_slot(void **state)
{
    sg_solo_tenant_t t;
    int64_t stored;
    long n;
    load(&t, 0, 0, -1);
    assert_int_equal(sg_solo_add_slot(&t, "s/a", 5000), 0);
    assert_int_equal(sg_solo_add_slot(&t, "s/b", 6000), 0);
    sg_solo_admit_t a = args("s/a", 5000);
    a.max_execs = 1;
    expect_left_to_redis(&t, &a);
    assert_int_equal(sg_solo_admit_full(&t, &a, &stored, &n), 1);
    assert_int_equal(n, 1);
    assert_int_equal(t.nslots, 1);
    assert_string_equal(t.slots[0].token, "s/b");
    sg_solo_free(&t);
}

/* SCRIPT_SESSION_ADMIT's refusal at the cap, certain on the copy: the
 * rate step taken, the lapsed members dropped, the count answered. */
static void test_session_full(void **state)
{
    sg_solo_tenant_t t;
    int64_t stored;
    long count;
    char before[512], after[512];
    load(&t, 0, 0, -1);
    assert_int_equal(sg_solo_add_session(&t, "sid-1", 7000), 0); /* lapsed at 7000 */
    assert_int_equal(sg_solo_add_session(&t, "sid-2", 9000), 0);
    assert_int_equal(sg_solo_add_session(&t, "pending:x", 7030), 0);
    sg_solo_session_admit_t a = session_args("pending:a", 7000, 2);
    a.interval_ms = 1000;
    a.burst = 5;
    assert_int_equal(sg_solo_session_full(&t, &a, &stored, &count), 1);
    assert_int_equal(count, 2);
    assert_int_equal(t.nsessions, 2);
    assert_int_equal(t.tat_ms, 7000 * 1000 + 1000);
    /* below the cap, the member already there, past the rate: not this */
    sg_solo_session_admit_t left[3] = {session_args("pending:a", 7000, 3), session_args("pending:x", 7000, 2),
                                       session_args("pending:b", 7000, 2)};
    left[2].interval_ms = 1000; /* burst 1, the tat a second ahead */
    for (int i = 0; i < 3; i++) {
        snapshot_sessions(&t, before, sizeof(before));
        assert_int_equal(sg_solo_session_full(&t, &left[i], &stored, &count), 0);
        snapshot_sessions(&t, after, sizeof(after));
        assert_string_equal(before, after);
    }
    sg_solo_free(&t);
}

static void test_long_token(void **state)
{
    sg_solo_tenant_t t;
    char token[100];
    memset(token, 'x', sizeof(token) - 1);
    token[sizeof(token) - 1] = '\0';
    load(&t, 0, 0, -1);
    sg_solo_admit_t a = args(token, 9000);
    expect_left_to_redis(&t, &a);
    assert_int_equal(sg_solo_add_slot(&t, token, 9100), -1);
    sg_solo_free(&t);
}

int main(void)
{
    return SG_RUN_TESTS("solo", NULL, NULL, NULL, NULL, test_admits_and_counts, test_leases_run_out, test_rate,
                        test_quota_edges, test_long_token, test_sessions, test_quota_refusals, test_lapsed_own_slot,
                        test_session_full);
}
