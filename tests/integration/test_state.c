/*
 * test_state.c — gateway/state/state.h against both backends: the same
 * behavioural suite runs on the memory backend and on a real redis-server
 * this test starts (on a free loopback port, in a private temporary
 * directory, without persistence) and drives through an h2o evloop
 * (state_suite.h). What only Redis has: test_state_redis.c.
 *
 * The server is killed at the end, whatever failed (teardown, atexit, and
 * PR_SET_PDEATHSIG should this process die).
 */
#include "state_suite.h"

/* ---- the behavioural suite (both backends) ----------------------------------------------- */

static void test_backend_name(void **state)
{
    fixture_t *f = *state;
    assert_string_equal(sg_state_backend(f->st), group_backend == BACKEND_MEMORY ? "memory" : "redis");
    assert_int_equal(sg_state_available(f->st), 1);
}

static void test_rate_exact(void **state)
{
    fixture_t *f = *state;
    /* 60/min: T = 1 s, so the test's own pace cannot refill the bucket */
    for (long i = 0; i < 5; i++) {
        sg_rate_result_t r = rate(f, 101, 60, 5);
        assert_int_equal(r.available, 1);
        assert_true(r.allowed);
        assert_int_equal(r.limit, 5);
        assert_int_equal(r.remaining, 4 - i);
    }
    sg_rate_result_t r = rate(f, 101, 60, 5);
    assert_int_equal(r.available, 1);
    assert_false(r.allowed);
    assert_int_equal(r.remaining, 0);
    assert_true(r.retry_after_s > 0 && r.retry_after_s <= 1.0);
    assert_true(r.reset_s > 4.0 && r.reset_s <= 5.0);
    /* denials are free: still denied, and retry_after did not grow */
    sg_rate_result_t again = rate(f, 101, 60, 5);
    assert_false(again.allowed);
    assert_true(again.retry_after_s <= r.retry_after_s);
    /* another tenant has its own bucket */
    r = rate(f, 102, 60, 5);
    assert_true(r.allowed);
    assert_int_equal(r.remaining, 4);

    /* 20 checks issued at once: exactly burst pass */
    rate_wait_t w[20];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 20; i++)
        sg_state_rate_check(f->st, 103, 60, 7, on_rate, &w[i]);
    int allowed = 0;
    for (int i = 0; i < 20; i++) {
        RUN_UNTIL(f, w[i].done, WAIT_S);
        assert_int_equal(w[i].r.available, 1);
        allowed += w[i].r.allowed;
    }
    assert_int_equal(allowed, 7);
}

/* A call's result has ok and count as given. */
#define EXPECT_RESULT(call, ok_, count_)                                                                               \
    do {                                                                                                               \
        sg_state_result_t res_ = (call);                                                                               \
        assert_int_equal(res_.ok, (ok_));                                                                              \
        assert_int_equal(res_.count, (count_));                                                                        \
    } while (0)

/* Tenant's 2 session slots taken by "a" and "b"; "c" is refused. */
static void fill_two(fixture_t *f, int64_t tenant)
{
    assert_int_equal(reserve(f, tenant, 2, "a").ok, 1);
    assert_int_equal(reserve(f, tenant, 2, "b").ok, 1);
    assert_int_equal(reserve(f, tenant, 2, "c").ok, 0);
}

static void test_reserve_concurrent(void **state)
{
    fixture_t *f = *state;
    state_wait_t w[20];
    char tokens[20][40];
    memset(w, 0, sizeof(w));
    /* all 20 issued before any reply is read */
    for (int i = 0; i < 20; i++) {
        snprintf(tokens[i], sizeof(tokens[i]), "tok-%d", i);
        sg_state_session_reserve(f->st, 201, 5, tokens[i], on_state, &w[i]);
    }
    int ok = 0;
    long max_count = 0;
    for (int i = 0; i < 20; i++) {
        sg_state_result_t r = check_state(f, &w[i]);
        ok += r.ok;
        if (r.count > max_count)
            max_count = r.count;
        assert_true(r.count <= 5);
    }
    assert_int_equal(ok, 5);
    assert_int_equal(max_count, 5);
    /* and still full */
    EXPECT_RESULT(reserve(f, 201, 5, "late"), 0, 5);
    /* another tenant is not affected */
    EXPECT_RESULT(reserve(f, 202, 5, "tok-0"), 1, 1);
}

static void test_unreserve(void **state)
{
    fixture_t *f = *state;
    fill_two(f, 301); /* "a" and "b" hold the 2 slots, "c" is refused */
    EXPECT_RESULT(unreserve(f, 301, "a"), 1, 1);
    EXPECT_RESULT(unreserve(f, 301, "a"), 0, 1);
    assert_int_equal(unreserve(f, 301, "never").ok, 0);
    EXPECT_RESULT(reserve(f, 301, 2, "c"), 1, 2);
}

static void test_reservation_expires(void **state)
{
    fixture_t *f = *state;
    fill_two(f, 351); /* "a" and "b" hold the 2 slots, "c" is refused */
    /* a reservation holds its slot for 120 s, counted in whole seconds: 118 s
     * later it holds whatever second boundary the test crossed meanwhile */
    sg_state_set_clock_skew_ms(f->st, 118 * 1000);
    assert_int_equal(reserve(f, 351, 2, "c").ok, 0);
    sg_state_set_clock_skew_ms(f->st, 121 * 1000);
    EXPECT_RESULT(reserve(f, 351, 2, "c"), 1, 1);
}

/* max_concurrent_execs: 40 acquires issued at once (none answered before
 * the last is sent), 3 slots: exactly 3 get one, whatever the interleaving;
 * the count never passes 3; another tenant is untouched. */
static void test_exec_concurrent(void **state)
{
    fixture_t *f = *state;
    state_wait_t w[40];
    char tokens[40][16];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 40; i++) {
        snprintf(tokens[i], sizeof(tokens[i]), "x-%d", i);
        sg_state_exec_acquire(f->st, 501, 3, tokens[i], 60, on_state, &w[i]);
    }
    int ok = 0;
    for (int i = 0; i < 40; i++) {
        sg_state_result_t r = check_state(f, &w[i]);
        ok += r.ok;
        assert_true(r.count <= 3);
    }
    assert_int_equal(ok, 3);
    EXPECT_RESULT(exec_acquire(f, 501, 3, "late", 60), 0, 3);
    /* another tenant, and the session slots of the same tenant, are apart */
    assert_int_equal(exec_acquire(f, 502, 3, "x-0", 60).ok, 1);
    assert_int_equal(reserve(f, 501, 1, "session").ok, 1);

    /* releasing one lets exactly one more in; a release of a token not held
     * (twice, or never taken) frees nothing */
    int first = -1;
    for (int i = 0; i < 40 && first < 0; i++)
        if (w[i].r.ok)
            first = i;
    EXPECT_RESULT(exec_release(f, 501, tokens[first]), 1, 2);
    EXPECT_RESULT(exec_release(f, 501, tokens[first]), 0, 2);
    assert_int_equal(exec_release(f, 501, "never").ok, 0);
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 10; i++)
        sg_state_exec_acquire(f->st, 501, 3, tokens[20 + i], 60, on_state, &w[i]);
    ok = 0;
    for (int i = 0; i < 10; i++)
        ok += check_state(f, &w[i]).ok;
    assert_int_equal(ok, 1);

    /* max 0: nothing runs */
    EXPECT_RESULT(exec_acquire(f, 503, 0, "a", 60), 0, 0);
}

/* A slot whose holder never released it (a gateway killed mid-execution)
 * comes back when its lease runs out, not before; a token acquired again
 * renews its lease and stays one slot. */
static void test_exec_lease_expires(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(exec_acquire(f, 551, 2, "a", 30).ok, 1);
    assert_int_equal(exec_acquire(f, 551, 2, "b", 100).ok, 1);
    assert_int_equal(exec_acquire(f, 551, 2, "c", 30).ok, 0);
    sg_state_result_t r = exec_acquire(f, 551, 2, "b", 100); /* renewed, not a third */
    assert_int_equal(r.ok, 1);
    assert_int_equal(r.count, 2);
    /* 28 s later both still hold (whatever second boundary was crossed) */
    sg_state_set_clock_skew_ms(f->st, 28 * 1000);
    assert_int_equal(exec_acquire(f, 551, 2, "c", 30).ok, 0);
    /* 31 s: "a" ran out, "b" (100 s) did not */
    sg_state_set_clock_skew_ms(f->st, 31 * 1000);
    EXPECT_RESULT(exec_acquire(f, 551, 2, "c", 30), 1, 2);
    assert_int_equal(exec_acquire(f, 551, 2, "d", 30).ok, 0);
    /* 102 s: "b" ran out too, and so did "c" (31 + 30) */
    sg_state_set_clock_skew_ms(f->st, 102 * 1000);
    EXPECT_RESULT(exec_acquire(f, 551, 2, "d", 30), 1, 1);
}

/* MCP sessions (handler/mcp.c): at most max per tenant; a use renews one
 * for idle_s; another tenant can neither use nor end one; one unused for
 * idle_s is gone, and its place comes back. */
static void test_mcp_sessions(void **state)
{
    fixture_t *f = *state;
    EXPECT_RESULT(mcp_open(f, 601, 2, "m1", 10), 1, 1);
    EXPECT_RESULT(mcp_open(f, 601, 2, "m2", 10), 1, 2);
    EXPECT_RESULT(mcp_open(f, 601, 2, "m3", 10), 0, 2);
    assert_int_equal(mcp_open(f, 602, 2, "n1", 10).ok, 1); /* another tenant's count */
    /* another tenant's id: unknown to this one, and not ended by it */
    assert_int_equal(mcp_touch(f, 602, "m1", 10).ok, 0);
    assert_int_equal(mcp_close(f, 602, "m1").ok, 0);
    assert_int_equal(mcp_touch(f, 601, "m1", 10).ok, 1);
    /* a touch never adds: unknown ids stay unknown */
    EXPECT_RESULT(mcp_touch(f, 601, "nope", 10), 0, 2);
    /* 8 s on, m1 is used (renewed to 18 s); at 12 s m2 has expired, m1 not */
    sg_state_set_clock_skew_ms(f->st, 8 * 1000);
    assert_int_equal(mcp_touch(f, 601, "m1", 10).ok, 1);
    sg_state_set_clock_skew_ms(f->st, 12 * 1000);
    assert_int_equal(mcp_touch(f, 601, "m2", 10).ok, 0);
    EXPECT_RESULT(mcp_open(f, 601, 2, "m3", 10), 1, 2);
    /* ended: gone, once */
    assert_int_equal(mcp_close(f, 601, "m1").ok, 1);
    assert_int_equal(mcp_close(f, 601, "m1").ok, 0);
    assert_int_equal(mcp_touch(f, 601, "m1", 10).ok, 0);
    assert_int_equal(mcp_touch(f, 601, "m3", 10).ok, 1);
}

static void test_commit_get_touch(void **state)
{
    fixture_t *f = *state;
    int64_t now = sg_wall_s();
    assert_int_equal(reserve(f, 401, 3, "t1").ok, 1);
    sg_live_session_t s = make_session(401, "python", now, 900, 14400);
    sg_state_result_t r = commit(f, "t1", &s);
    assert_int_equal(r.ok, 1);
    assert_int_equal(r.count, 1); /* the reservation became the session */

    get_wait_t g = get(f, s.id);
    assert_true(g.found);
    assert_string_equal(g.s.id, s.id);
    assert_int_equal(g.s.tenant_id, 401);
    assert_string_equal(g.s.lang, "python");
    assert_int_equal(g.s.created_at, now);
    assert_int_equal(g.s.last_used_at, now);
    assert_int_equal(g.s.idle_deadline, now + 900);
    assert_int_equal(g.s.lifetime_deadline, now + 14400);
    assert_int_equal(g.s.executions, 0);

    r = touch(f, s.id, now + 10, 900, 1);
    assert_int_equal(r.ok, 1);
    assert_int_equal(r.count, 1); /* executions so far */
    EXPECT_RESULT(touch(f, s.id, now + 20, 600, 2), 1, 3);
    g = get(f, s.id);
    assert_true(g.found);
    assert_int_equal(g.s.last_used_at, now + 20);
    assert_int_equal(g.s.idle_deadline, now + 620);
    assert_int_equal(g.s.lifetime_deadline, now + 14400);
    assert_int_equal(g.s.created_at, now);
    assert_int_equal(g.s.executions, 3);

    /* the idle index follows the touch: not idle at the old deadline */
    expired_wait_t e;
    expired(f, now + 610, 10, &e);
    assert_int_equal(e.n, 0);
    expired(f, now + 620, 10, &e);
    assert_int_equal(e.n, 1);

    char other[37];
    assert_int_equal(sg_uuid4(other), 0);
    r = touch(f, other, now, 900, 1);
    assert_int_equal(r.ok, 0);
    g = get(f, other);
    assert_false(g.found);
    /* touching an unknown id did not create it */
    list_wait_t l;
    list(f, 0, &l);
    assert_int_equal(l.n, 1);
}

/* A session with an execution in flight (a live lease whose token is
 * "<sid>/...") is not idle, whatever its idle deadline; its lifetime still
 * ends it; a lease of another session, or one past, does not hold it. */
static void test_busy_not_idle(void **state)
{
    fixture_t *f = *state;
    int64_t now = sg_wall_s();
    char mine[80], other[80];
    sg_live_session_t s = make_session(451, "python", now, 900, 14400);
    sg_live_session_t o = make_session(451, "python", now, 900, 14400);
    assert_int_equal(commit(f, NULL, &s).ok, 1);
    assert_int_equal(commit(f, NULL, &o).ok, 1);
    snprintf(mine, sizeof(mine), "%s/0123456789abcdef01234567", s.id);
    snprintf(other, sizeof(other), "%s0123456789abcdef01234567", o.id); /* no '/': not a session's */
    assert_int_equal(exec_acquire(f, 451, 5, mine, 2000).ok, 1);
    assert_int_equal(exec_acquire(f, 451, 5, other, 2000).ok, 1);

    expired_wait_t e;
    expired(f, now + 1000, 10, &e); /* both past idle; s is busy */
    assert_int_equal(e.n, 1);
    assert_string_equal(e.sids[0], o.id);
    assert_string_equal(e.reasons[0], "idle");
    expired(f, now + 14400, 10, &e); /* the lifetime ends it, busy or not */
    assert_int_equal(e.n, 2);
    assert_string_equal(e.reasons[0], "lifetime");
    assert_string_equal(e.reasons[1], "lifetime");
    expired(f, now + 3000, 10, &e); /* the lease has run out by then */
    assert_int_equal(e.n, 2);

    exec_release(f, 451, mine);
    expired(f, now + 1010, 10, &e); /* given back: idle again */
    assert_int_equal(e.n, 2);
    assert_string_equal(e.reasons[0], "idle");
    assert_string_equal(e.reasons[1], "idle");
    exec_release(f, 451, other);
}

static void test_remove_once(void **state)
{
    fixture_t *f = *state;
    int64_t now = sg_wall_s();
    assert_int_equal(reserve(f, 501, 1, "t").ok, 1);
    sg_live_session_t s = make_session(501, "bash", now, 900, 14400);
    assert_int_equal(commit(f, "t", &s).ok, 1);
    assert_int_equal(reserve(f, 501, 1, "u").ok, 0); /* the session holds the only slot */

    EXPECT_RESULT(remove_session(f, s.id, 501), 1, 0);
    assert_int_equal(remove_session(f, s.id, 501).ok, 0);

    /* two at once: exactly one wins */
    sg_live_session_t s2 = make_session(501, "bash", now, 900, 14400);
    assert_int_equal(commit(f, NULL, &s2).ok, 1);
    state_wait_t w1 = {0}, w2 = {0};
    sg_state_session_remove(f->st, s2.id, 501, on_state, &w1);
    sg_state_session_remove(f->st, s2.id, 501, on_state, &w2);
    RUN_UNTIL(f, w1.done && w2.done, WAIT_S);
    assert_int_equal(w1.r.ok + w2.r.ok, 1);

    /* gone everywhere */
    assert_false(get(f, s.id).found);
    list_wait_t l;
    list(f, 501, &l);
    assert_int_equal(l.n, 0);
    expired_wait_t e;
    expired(f, now + 100000, 10, &e);
    assert_int_equal(e.n, 0);
    assert_int_equal(reserve(f, 501, 1, "u").ok, 1); /* the slot is free again */
}

/* The rebuild's call: puts back what the ledger says is open, but never
 * over a live record, and never a session that was closed (its close may
 * not be in the ledger yet). */
static void test_restore(void **state)
{
    fixture_t *f = *state;
    int64_t now = sg_wall_s();
    sg_live_session_t s = make_session(601, "python", now, 900, 14400);
    EXPECT_RESULT(restore(f, &s), 1, 1);
    get_wait_t g = get(f, s.id);
    assert_true(g.found);
    assert_int_equal(g.s.tenant_id, 601);
    assert_int_equal(g.s.idle_deadline, now + 900);
    assert_int_equal(g.s.lifetime_deadline, now + 14400);
    expired_wait_t e;
    expired(f, now + 900, 10, &e);
    assert_int_equal(e.n, 1);
    assert_int_equal(reserve(f, 601, 1, "t").ok, 0); /* it holds the tenant's slot */

    /* live already: the record stays as it is */
    assert_int_equal(touch(f, s.id, now + 5, 900, 2).ok, 1);
    EXPECT_RESULT(restore(f, &s), 0, 1);
    g = get(f, s.id);
    assert_int_equal(g.s.executions, 2);
    assert_int_equal(g.s.last_used_at, now + 5);

    /* closed: it stays closed */
    assert_int_equal(remove_session(f, s.id, 601).ok, 1);
    EXPECT_RESULT(restore(f, &s), 0, 0);
    assert_false(get(f, s.id).found);
    list_wait_t l;
    list(f, 601, &l);
    assert_int_equal(l.n, 0);

    /* also when the remove found nothing (another gateway removed it first) */
    sg_live_session_t t = make_session(601, "python", now, 900, 14400);
    assert_int_equal(remove_session(f, t.id, 601).ok, 0);
    assert_int_equal(restore(f, &t).ok, 0);

    if (group_backend == BACKEND_MEMORY) {
        /* the mark lasts SG_STATE_CLOSED_TTL (in Redis it is the key's TTL:
         * test_key_schema) */
        sg_state_set_clock_skew_ms(f->st, (SG_STATE_CLOSED_TTL - 2) * 1000LL);
        assert_int_equal(restore(f, &t).ok, 0);
        sg_state_set_clock_skew_ms(f->st, (SG_STATE_CLOSED_TTL + 1) * 1000LL);
        assert_int_equal(restore(f, &t).ok, 1);
    }
}

/* A delete through another gateway can reach Redis before the commit of
 * the create it follows (the create's reply does not wait for the commit):
 * the commit then does not bring the session back, and its reservation is
 * given back. */
static void test_commit_after_remove(void **state)
{
    fixture_t *f = *state;
    int64_t now = sg_wall_s();
    sg_live_session_t s = make_session(611, "python", now, 900, 14400);
    EXPECT_RESULT(reserve(f, 611, 2, "r1"), 1, 1);
    assert_int_equal(remove_session(f, s.id, 611).ok, 0); /* nothing there yet */
    EXPECT_RESULT(commit(f, "r1", &s), 0, 0);
    assert_false(get(f, s.id).found);
    list_wait_t l;
    list(f, 611, &l);
    assert_int_equal(l.n, 0);
    expired_wait_t e;
    expired(f, now + 14400 + 1, 10, &e);
    assert_int_equal(e.n, 0);
    /* both slots free again; a session committed after is kept */
    EXPECT_RESULT(reserve(f, 611, 2, "r2"), 1, 1);
    EXPECT_RESULT(reserve(f, 611, 2, "r3"), 1, 2);
    sg_live_session_t t = make_session(611, "python", now, 900, 14400);
    EXPECT_RESULT(commit(f, "r2", &t), 1, 2);
    assert_true(get(f, t.id).found);
}

static int find_expired(const expired_wait_t *e, const char *sid)
{
    for (size_t i = 0; i < e->n; i++) {
        if (strcmp(e->sids[i], sid) == 0)
            return (int)i;
    }
    return -1;
}

typedef struct {
    sg_state_t *st;
    int done, removed, won;
} reap_t;

static void on_reaped(void *data, const sg_state_result_t *r)
{
    reap_t *reap = data;
    reap->removed++;
    reap->won += r->available && r->ok;
}

/* What the gateway's reaper does: remove each from inside the callback. */
static void on_expired_reap(void *data, int available, size_t n, const char *const *sids, const char *const *reasons,
                            const int64_t *tenants)
{
    reap_t *reap = data;
    for (size_t i = 0; i < n; i++)
        sg_state_session_remove(reap->st, sids[i], tenants[i], on_reaped, reap);
    reap->done = 1;
}

static void test_expired(void **state)
{
    fixture_t *f = *state;
    int64_t base = sg_wall_s();
    sg_live_session_t a = make_session(601, "python", base, 100, 1000); /* idle at +100 */
    sg_live_session_t b = make_session(602, "python", base, 500, 600);  /* lifetime at +600 */
    sg_live_session_t c = make_session(601, "node", base, 5000, 6000);  /* later */
    assert_int_equal(commit(f, NULL, &a).ok, 1);
    assert_int_equal(commit(f, NULL, &b).ok, 1);
    assert_int_equal(commit(f, NULL, &c).ok, 1);

    expired_wait_t e;
    expired(f, base + 99, 10, &e);
    assert_int_equal(e.n, 0);

    expired(f, base + 100, 10, &e);
    assert_int_equal(e.n, 1);
    assert_string_equal(e.sids[0], a.id);
    assert_string_equal(e.reasons[0], "idle");
    assert_int_equal(e.tenants[0], 601);

    /* b: both deadlines passed; lifetime is the one reported */
    expired(f, base + 600, 10, &e);
    assert_int_equal(e.n, 2);
    int ia = find_expired(&e, a.id), ib = find_expired(&e, b.id);
    assert_true(ia >= 0 && ib >= 0);
    assert_string_equal(e.reasons[ia], "idle");
    assert_string_equal(e.reasons[ib], "lifetime");
    assert_int_equal(e.tenants[ib], 602);

    /* at most limit */
    expired(f, base + 600, 1, &e);
    assert_int_equal(e.n, 1);
    expired(f, base + 600, 0, &e);
    assert_int_equal(e.n, 0);

    /* a touch moves a out of the idle set */
    assert_int_equal(touch(f, a.id, base + 100, 400, 0).ok, 1);
    expired(f, base + 499, 10, &e);
    assert_int_equal(e.n, 0);
    /* lifetime is not moved by use */
    expired(f, base + 1000, 10, &e);
    ia = find_expired(&e, a.id);
    assert_true(ia >= 0);
    assert_string_equal(e.reasons[ia], "lifetime");

    /* everything, once it is all past */
    expired(f, base + 10000, 10, &e);
    assert_int_equal(e.n, 3);
    assert_true(find_expired(&e, c.id) >= 0);
    assert_string_equal(e.reasons[find_expired(&e, c.id)], "lifetime");

    /* the reaper removes from inside the callback: removed ones are gone */
    reap_t reap = {.st = f->st};
    sg_state_sessions_expired(f->st, base + 10000, 10, on_expired_reap, &reap);
    RUN_UNTIL(f, reap.done && reap.removed == 3, WAIT_S);
    assert_int_equal(reap.won, 3);
    expired(f, base + 10000, 10, &e);
    assert_int_equal(e.n, 0);
    list_wait_t l;
    list(f, 0, &l);
    assert_int_equal(l.n, 0);
}

static int find_listed(const list_wait_t *l, const char *sid)
{
    for (size_t i = 0; i < l->n; i++) {
        if (strcmp(l->list[i].id, sid) == 0)
            return (int)i;
    }
    return -1;
}

static void test_list(void **state)
{
    fixture_t *f = *state;
    int64_t now = sg_wall_s();
    list_wait_t l;
    list(f, 0, &l);
    assert_int_equal(l.n, 0);

    sg_live_session_t a1 = make_session(701, "python", now, 900, 14400);
    sg_live_session_t a2 = make_session(701, "node", now, 900, 14400);
    sg_live_session_t b1 = make_session(702, "bash", now, 900, 14400);
    assert_int_equal(reserve(f, 701, 10, "pending-one").ok, 1); /* reservations are not listed */
    assert_int_equal(commit(f, NULL, &a1).ok, 1);
    assert_int_equal(commit(f, NULL, &a2).ok, 1);
    assert_int_equal(commit(f, NULL, &b1).ok, 1);
    assert_int_equal(touch(f, a2.id, now + 5, 900, 4).ok, 1);

    list(f, 701, &l);
    assert_int_equal(l.n, 2);
    int i1 = find_listed(&l, a1.id), i2 = find_listed(&l, a2.id);
    assert_true(i1 >= 0 && i2 >= 0);
    assert_string_equal(l.list[i1].lang, "python");
    assert_int_equal(l.list[i1].tenant_id, 701);
    assert_int_equal(l.list[i2].executions, 4);
    assert_int_equal(l.list[i2].last_used_at, now + 5);
    assert_int_equal(l.list[i2].lifetime_deadline, now + 14400);

    list(f, 702, &l);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.list[0].id, b1.id);
    assert_string_equal(l.list[0].lang, "bash");

    list(f, 703, &l);
    assert_int_equal(l.n, 0);

    list(f, 0, &l);
    assert_int_equal(l.n, 3);
    assert_true(find_listed(&l, b1.id) >= 0);
}

static void test_quota_flow(void **state)
{
    fixture_t *f = *state;
    quota_wait_t q = quota(f, 801, "20260102", 4, 1000);
    assert_int_equal(q.status, SG_QUOTA_UNSEEDED);

    sg_state_result_t r = seed(f, 801, "20260102", 2, 1.5);
    assert_int_equal(r.ok, 1);
    /* a second seed (another gateway, late) changes nothing */
    r = seed(f, 801, "20260102", 0, 0);
    assert_int_equal(r.ok, 0);

    q = quota(f, 801, "20260102", 4, 1000);
    assert_int_equal(q.status, SG_QUOTA_OK);
    assert_int_equal(q.execs, 3);
    assert_near(q.seconds, 1.5);
    q = quota(f, 801, "20260102", 4, 1000);
    assert_int_equal(q.status, SG_QUOTA_OK);
    assert_int_equal(q.execs, 4);
    q = quota(f, 801, "20260102", 4, 1000);
    assert_int_equal(q.status, SG_QUOTA_EXECS);
    assert_int_equal(q.execs, 4); /* a refusal counts nothing */
    q = quota(f, 801, "20260102", 4, 1000);
    assert_int_equal(q.status, SG_QUOTA_EXECS);
    assert_int_equal(q.execs, 4);
    /* a higher limit lets more through */
    q = quota(f, 801, "20260102", 5, 1000);
    assert_int_equal(q.status, SG_QUOTA_OK);
    assert_int_equal(q.execs, 5);

    /* days and tenants are separate */
    assert_int_equal(quota(f, 801, "20260103", 4, 1000).status, SG_QUOTA_UNSEEDED);
    assert_int_equal(quota(f, 802, "20260102", 4, 1000).status, SG_QUOTA_UNSEEDED);

    /* 0 means none */
    assert_int_equal(seed(f, 803, "20260102", 0, 0).ok, 1);
    assert_int_equal(quota(f, 803, "20260102", 0, 1000).status, SG_QUOTA_EXECS);

    /* 20 at once against a limit: exactly up to the limit */
    assert_int_equal(seed(f, 804, "20260102", 0, 0).ok, 1);
    quota_wait_t w[20];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 20; i++)
        sg_state_quota_reserve(f->st, 804, "20260102", 7, 1000, on_quota, &w[i]);
    int ok = 0;
    for (int i = 0; i < 20; i++) {
        RUN_UNTIL(f, w[i].done, WAIT_S);
        assert_int_equal(w[i].available, 1);
        ok += w[i].status == SG_QUOTA_OK;
    }
    assert_int_equal(ok, 7);
}

static void test_quota_seconds(void **state)
{
    fixture_t *f = *state;
    /* not seeded: nothing is added (the ledger has it; the seed will too) */
    assert_int_equal(add_seconds(f, 901, "20260102", 5).ok, 0);
    assert_int_equal(quota(f, 901, "20260102", 100, 20).status, SG_QUOTA_UNSEEDED);

    assert_int_equal(seed(f, 901, "20260102", 0, 10.5).ok, 1);
    assert_int_equal(add_seconds(f, 901, "20260102", 5.25).ok, 1);
    quota_wait_t q = quota(f, 901, "20260102", 100, 20);
    assert_int_equal(q.status, SG_QUOTA_OK);
    assert_int_equal(q.execs, 1);
    assert_near(q.seconds, 15.75);

    assert_int_equal(add_seconds(f, 901, "20260102", 4.25).ok, 1); /* 20.0: used up */
    q = quota(f, 901, "20260102", 100, 20);
    assert_int_equal(q.status, SG_QUOTA_SECONDS);
    assert_int_equal(q.execs, 1);
    assert_near(q.seconds, 20.0);
    /* executions are checked first */
    q = quota(f, 901, "20260102", 1, 20);
    assert_int_equal(q.status, SG_QUOTA_EXECS);
    /* and seconds stay as they were */
    q = quota(f, 901, "20260102", 100, 20.5);
    assert_int_equal(q.status, SG_QUOTA_OK);
    assert_near(q.seconds, 20.0);
}

/* An execution's admission (sg_state_exec_admit): rate, slot, quota in one
 * call, each only past the one before, exact when many are issued at once
 * (none answered before the last is sent). */
typedef struct {
    int rated, slotted, counted, quota_refused;
} admit_counts_t;

/* n admissions of tenant at once (tokens "<tenant>-<i>"); the outcomes. */
static admit_counts_t admit_many(fixture_t *f, int64_t tenant, int n, long burst, long slots, const char *day,
                                 long per_day)
{
    admit_wait_t w[30];
    char tokens[30][32];
    admit_counts_t c = {0};

    assert_true(n <= 30);
    memset(w, 0, sizeof(w));
    for (int i = 0; i < n; i++) {
        snprintf(tokens[i], sizeof(tokens[i]), "%lld-%d", (long long)tenant, i);
        sg_admit_args_t a = {.rate_per_min = 1,
                             .burst = burst,
                             .max_execs = slots,
                             .token = tokens[i],
                             .lease_s = 60,
                             .day = day,
                             .execs_per_day = per_day,
                             .seconds_per_day = 1000};
        sg_state_exec_admit(f->st, tenant, &a, on_admit, &w[i]);
    }
    for (int i = 0; i < n; i++) {
        RUN_UNTIL(f, w[i].done, WAIT_S);
        assert_int_equal(w[i].done, 1);
        assert_int_equal(w[i].r.available, 1);
        if (!w[i].r.rate.allowed)
            continue;
        c.rated++;
        if (!w[i].r.slot)
            continue;
        c.slotted++;
        if (w[i].r.quota == SG_QUOTA_OK)
            c.counted++;
        else if (w[i].r.quota == SG_QUOTA_EXECS)
            c.quota_refused++;
        else
            fail_msg("admission %d: quota status %d", i, (int)w[i].r.quota);
    }
    return c;
}

static void test_exec_admit(void **state)
{
    fixture_t *f = *state;
    const char *day = "20260103";

    /* the slot cap: 30 at once, burst 20, 5 slots, quota to spare */
    assert_int_equal(seed(f, 950, day, 0, 0).ok, 1);
    admit_counts_t c = admit_many(f, 950, 30, 20, 5, day, 1000);
    assert_int_equal(c.rated, 20);
    assert_int_equal(c.slotted, 5);
    assert_int_equal(c.counted, 5);
    EXPECT_RESULT(exec_acquire(f, 950, 5, "late", 60), 0, 5);

    /* the quota: 4 left today; whoever it refuses gives the slot back, so
     * the next one gets a slot and is refused in turn */
    assert_int_equal(seed(f, 951, day, 6, 0).ok, 1);
    c = admit_many(f, 951, 30, 20, 5, day, 10);
    assert_int_equal(c.rated, 20);
    assert_int_equal(c.counted, 4);
    assert_int_equal(c.quota_refused, c.slotted - 4);
    /* the slots held are the 4 counted ones */
    EXPECT_RESULT(exec_acquire(f, 951, 5, "extra", 60), 1, 5);
    EXPECT_RESULT(exec_acquire(f, 951, 5, "extra2", 60), 0, 5);
    quota_wait_t q = quota(f, 951, day, 100, 1000);
    assert_int_equal(q.execs, 11); /* 6 + 4 counted + this one */

    /* unseeded: the slot is held, nothing counted, the caller seeds */
    admit_wait_t u = {0};
    sg_admit_args_t a = {.rate_per_min = 0,
                         .burst = 1,
                         .max_execs = 1,
                         .token = "u",
                         .lease_s = 60,
                         .day = "20260104",
                         .execs_per_day = 10,
                         .seconds_per_day = 10};
    sg_state_exec_admit(f->st, 952, &a, on_admit, &u);
    RUN_UNTIL(f, u.done, WAIT_S);
    assert_int_equal(u.r.rate.allowed, 1);
    assert_int_equal(u.r.slot, 1);
    assert_int_equal(u.r.quota, SG_QUOTA_UNSEEDED);
    EXPECT_RESULT(exec_acquire(f, 952, 1, "v", 60), 0, 1);
}

/* An execution's end (sg_state_exec_finish): its slot back, its session
 * touched, its seconds added to the day's, all in one call; without a
 * session or seconds, only the slot. */
static void test_exec_finish(void **state)
{
    fixture_t *f = *state;
    int64_t now = sg_wall_s();
    const char *day = "20260105";
    state_wait_t w = {0};

    assert_int_equal(reserve(f, 960, 3, "r").ok, 1);
    sg_live_session_t s = make_session(960, "python", now, 900, 14400);
    assert_int_equal(commit(f, "r", &s).ok, 1);
    assert_int_equal(seed(f, 960, day, 0, 1.0).ok, 1);
    assert_int_equal(exec_acquire(f, 960, 1, "f", 60).ok, 1);
    assert_int_equal(exec_acquire(f, 960, 1, "g", 60).ok, 0);

    sg_finish_args_t a = {
        .token = "f", .sid = s.id, .now = now + 5, .idle_timeout = 50, .add_exec = 1, .day = day, .seconds = 2.5};
    sg_state_exec_finish(f->st, 960, &a, on_state, &w);
    assert_int_equal(check_state(f, &w).ok, 1);
    assert_int_equal(exec_acquire(f, 960, 1, "g", 60).ok, 1); /* the slot came back */
    get_wait_t g = get(f, s.id);
    assert_true(g.found);
    assert_int_equal(g.s.last_used_at, now + 5);
    assert_int_equal(g.s.idle_deadline, now + 55);
    assert_int_equal(g.s.executions, 1);
    quota_wait_t q = quota(f, 960, day, 100, 1000);
    assert_near(q.seconds, 3.5);

    /* a one-shot: no session, no seconds (a run that never started) */
    sg_finish_args_t b = {.token = "g", .day = day, .seconds = -1};
    memset(&w, 0, sizeof(w));
    sg_state_exec_finish(f->st, 960, &b, on_state, &w);
    assert_int_equal(check_state(f, &w).ok, 1);
    EXPECT_RESULT(exec_acquire(f, 960, 1, "h", 60), 1, 1);
    q = quota(f, 960, day, 100, 1000);
    assert_near(q.seconds, 3.5);
}

/* A session create's admission (sg_state_session_admit): the rate, then a
 * reservation; of 10 at once with burst 4 and 3 slots, exactly 4 pass the
 * rate and 3 reserve; a rate refusal reserves nothing. */
static void test_session_admit(void **state)
{
    fixture_t *f = *state;
    admit_wait_t w[10];
    char tokens[10][16];
    int rated = 0, reserved = 0;

    memset(w, 0, sizeof(w));
    for (int i = 0; i < 10; i++) {
        snprintf(tokens[i], sizeof(tokens[i]), "s-%d", i);
        sg_state_session_admit(f->st, 970, 1, 4, 3, tokens[i], on_admit, &w[i]);
    }
    for (int i = 0; i < 10; i++) {
        RUN_UNTIL(f, w[i].done, WAIT_S);
        assert_int_equal(w[i].done, 1);
        assert_int_equal(w[i].r.available, 1);
        rated += w[i].r.rate.allowed;
        reserved += w[i].r.slot;
        assert_true(w[i].r.rate.allowed || !w[i].r.slot);
    }
    assert_int_equal(rated, 4);
    assert_int_equal(reserved, 3);
    EXPECT_RESULT(reserve(f, 970, 3, "late"), 0, 3);
    /* a reservation it made is an ordinary one: given back like any */
    for (int i = 0; i < 10; i++)
        if (w[i].r.slot) {
            EXPECT_RESULT(unreserve(f, 970, tokens[i]), 1, 2);
            break;
        }
}

#define SUITE(setup_, teardown_)                                                                                       \
    cmocka_unit_test_setup_teardown(test_backend_name, setup_, teardown_),                                             \
        cmocka_unit_test_setup_teardown(test_rate_exact, setup_, teardown_),                                           \
        cmocka_unit_test_setup_teardown(test_reserve_concurrent, setup_, teardown_),                                   \
        cmocka_unit_test_setup_teardown(test_unreserve, setup_, teardown_),                                            \
        cmocka_unit_test_setup_teardown(test_reservation_expires, setup_, teardown_),                                  \
        cmocka_unit_test_setup_teardown(test_exec_concurrent, setup_, teardown_),                                      \
        cmocka_unit_test_setup_teardown(test_exec_lease_expires, setup_, teardown_),                                   \
        cmocka_unit_test_setup_teardown(test_exec_admit, setup_, teardown_),                                           \
        cmocka_unit_test_setup_teardown(test_exec_finish, setup_, teardown_),                                          \
        cmocka_unit_test_setup_teardown(test_busy_not_idle, setup_, teardown_),                                        \
        cmocka_unit_test_setup_teardown(test_session_admit, setup_, teardown_),                                        \
        cmocka_unit_test_setup_teardown(test_mcp_sessions, setup_, teardown_),                                         \
        cmocka_unit_test_setup_teardown(test_commit_get_touch, setup_, teardown_),                                     \
        cmocka_unit_test_setup_teardown(test_remove_once, setup_, teardown_),                                          \
        cmocka_unit_test_setup_teardown(test_restore, setup_, teardown_),                                              \
        cmocka_unit_test_setup_teardown(test_commit_after_remove, setup_, teardown_),                                  \
        cmocka_unit_test_setup_teardown(test_expired, setup_, teardown_),                                              \
        cmocka_unit_test_setup_teardown(test_list, setup_, teardown_),                                                 \
        cmocka_unit_test_setup_teardown(test_quota_flow, setup_, teardown_),                                           \
        cmocka_unit_test_setup_teardown(test_quota_seconds, setup_, teardown_)

int main(void)
{
    const struct CMUnitTest memory_tests[] = {SUITE(setup, teardown)};
    const struct CMUnitTest redis_tests[] = {SUITE(setup, teardown)};
    const struct CMUnitTest solo_tests[] = {SUITE(setup, teardown)};
    signal(SIGPIPE, SIG_IGN);
    int failed = cmocka_run_group_tests_name("state: memory backend", memory_tests, group_setup_memory, group_teardown);
    failed += cmocka_run_group_tests_name("state: redis backend", redis_tests, group_setup_redis, group_teardown);
    /* the same, every admission this gateway can decide from its copy
     * decided there (redis.c, "solo"), Redis checking each after */
    failed +=
        cmocka_run_group_tests_name("state: redis backend, solo", solo_tests, group_setup_redis_solo, group_teardown);
    return failed;
}
