/*
 * test_store_gen.c — what the gateway's cache of tokens and sessions
 * (core/auth.c) relies on in the store, on real SQLite files: the
 * generations move, seen from another connection, with every change to a
 * token or tenant (auth) and every session closed or deleted (sessions),
 * whoever writes them (also sandgate-admin's kind of writes through the
 * same functions), and not with the hot-path writes (usage rows, a
 * session's count); and the group commit of usage rows
 * (sg_store_usage_add_batch), a bad row not costing the others theirs.
 */
#include "store_fixture.h"
#include "sgrun.h"

static sg_store_gen_t gen(sg_store_t *st)
{
    char err[256];
    sg_store_gen_t g;
    if (sg_store_generations(st, &g, err, sizeof(err)) != 0)
        fail_msg("sg_store_generations: %s", err);
    return g;
}

/* The generations of reader moved by (auth, sessions) since before. */
static void expect_moved(sg_store_t *reader, sg_store_gen_t *before, int auth, int sessions, const char *what)
{
    sg_store_gen_t now = gen(reader);
    if ((now.auth != before->auth) != auth || (now.sessions != before->sessions) != sessions)
        fail_msg("%s: auth %lld -> %lld, sessions %lld -> %lld (expected auth %s, sessions %s)", what,
                 (long long)before->auth, (long long)now.auth, (long long)before->sessions, (long long)now.sessions,
                 auth ? "moved" : "unchanged", sessions ? "moved" : "unchanged");
    *before = now;
}

static void test_generations(void **state)
{
    char dir[256], err[256], tok[SG_TOKEN_MAX];
    sg_tenant_t a, b;
    sg_token_t info;
    sg_store_t *w = open_with_a_and_b(dir, sizeof(dir), "gen", &a, &b);
    sg_store_t *r = open_ok(dir); /* the gateway's loop connection */
    sg_store_no_wait(r);
    sg_store_gen_t g = gen(r);

    /* a new token: nothing cached can be stale (unknown tokens are never kept) */
    assert_int_equal(sg_store_token_create(w, a.id, "x", tok, &info, err, sizeof(err)), 0);
    expect_moved(r, &g, 0, 0, "token created");
    assert_int_equal(sg_store_token_revoke(w, info.public_id, err, sizeof(err)), 1);
    expect_moved(r, &g, 1, 0, "token revoked");
    a.disabled = 1;
    assert_int_equal(sg_store_tenant_update(w, &a, err, sizeof(err)), 0);
    expect_moved(r, &g, 1, 0, "tenant disabled");
    b.max_timeout = 2;
    assert_int_equal(sg_store_tenant_update(w, &b, err, sizeof(err)), 0);
    expect_moved(r, &g, 1, 0, "a cap changed");

    sg_session_rec_t s;
    memset(&s, 0, sizeof(s));
    snprintf(s.id, sizeof(s.id), "11111111-2222-4333-8444-555555555555");
    s.tenant_id = b.id;
    strcpy(s.lang, "python");
    assert_int_equal(sg_store_session_open(w, &s, err, sizeof(err)), 0);
    expect_moved(r, &g, 0, 0, "session opened");
    /* the hot path's writes move nothing */
    for (int i = 0; i < 3; i++) {
        sg_usage_t u = usage(b.id, s.id, 100 + i, 1, 0, 1);
        assert_int_equal(sg_store_usage_add(w, &u, err, sizeof(err)), 0);
        assert_int_equal(sg_store_session_count_exec(w, s.id, err, sizeof(err)), 0);
    }
    expect_moved(r, &g, 0, 0, "usage rows and counts");
    assert_int_equal(sg_store_session_close(w, s.id, 0, "deleted", err, sizeof(err)), 0);
    expect_moved(r, &g, 0, 1, "session closed");
    sg_store_close(r);
    sg_store_close(w);
}

static void test_usage_batch(void **state)
{
    char dir[256], err[256];
    sg_tenant_t a, b;
    sg_usage_total_t tot;
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "batch", &a, &b);
    sg_usage_t rows[5];
    const sg_usage_t *p[5];
    int count[5] = {0}, failed[5];

    for (int i = 0; i < 5; i++) {
        rows[i] = usage(i == 3 ? 9999 : a.id, "", 10 + i, 0.5, 0, 10); /* row 3: no such tenant */
        p[i] = &rows[i];
    }
    /* all good: one transaction */
    assert_int_equal(sg_store_usage_add_batch(st, p, count, 3, failed, err, sizeof(err)), 0);
    assert_int_equal(sg_store_usage_total(st, a.id, 0, 1000, &tot, err, sizeof(err)), 0);
    assert_int_equal(tot.executions, 3);
    /* one bad row: the others are written alone, the bad one says so */
    assert_int_equal(sg_store_usage_add_batch(st, p, count, 5, failed, err, sizeof(err)), 1);
    assert_int_equal(failed[3], 1);
    assert_int_equal(failed[0] + failed[1] + failed[2] + failed[4], 0);
    assert_int_equal(sg_store_usage_total(st, a.id, 0, 1000, &tot, err, sizeof(err)), 0);
    assert_int_equal(tot.executions, 3 + 4);
    assert_int_equal(sg_store_usage_add_batch(st, p, count, 0, failed, err, sizeof(err)), 0);
    sg_store_close(st);
}

int main(void)
{
    return SG_RUN_TESTS("store_gen", group_setup, group_teardown, NULL, NULL, test_generations, test_usage_batch);
}
