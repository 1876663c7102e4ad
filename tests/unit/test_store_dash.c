/*
 * test_store_dash.c — the ledger reads of the ops dashboard, on real
 * SQLite files: the newest rows of every tenant (sg_store_usage_recent,
 * newest first, limited), and a day's totals per tenant in full and as
 * increments since an id (sg_store_usage_totals_by_tenant), whose sum is
 * the full count.
 */
#include "store_fixture.h"
#include "sgrun.h"

#define DAY 1800000000.0 /* a UTC midnight's unix time will do: any instant */

typedef struct {
    int n;
    int64_t tenant[8], execs[8];
    double seconds[8];
} totals_t;

static void collect_total(int64_t tenant_id, const sg_usage_total_t *t, void *data)
{
    totals_t *x = data;
    assert_true(x->n < 8);
    x->tenant[x->n] = tenant_id;
    x->execs[x->n] = t->executions;
    x->seconds[x->n] = t->seconds;
    x->n++;
}

STORE_LIST(usage, sg_usage_t, 16)

static void add(sg_store_t *st, int64_t tenant, double at, double dur)
{
    char err[256];
    sg_usage_t u = usage(tenant, "", at, dur, 0, 1);
    assert_int_equal(sg_store_usage_add(st, &u, err, sizeof(err)), 0);
}

static void test_recent(void **state)
{
    char dir[128], err[256];
    sg_tenant_t a, b;
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "recent", &a, &b);
    usage_list_t l = {0};

    assert_int_equal(sg_store_usage_recent(st, 5, collect_usage, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 0);
    for (int i = 0; i < 10; i++)
        add(st, i % 2 ? b.id : a.id, DAY + i, 0.5);
    add(st, a.id, DAY - 100, 0.5); /* late: an older run recorded last */
    assert_int_equal(sg_store_usage_recent(st, 3, collect_usage, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 3);
    /* by start time, newest first, whoever's */
    assert_true(l.item[0].started_at == DAY + 9 && l.item[0].tenant_id == b.id);
    assert_true(l.item[1].started_at == DAY + 8 && l.item[1].tenant_id == a.id);
    assert_true(l.item[2].started_at == DAY + 7);
    sg_store_close(st);
}

static void test_totals_full_and_since(void **state)
{
    char dir[128], err[256];
    sg_tenant_t a, b;
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "totals", &a, &b);
    totals_t t = {0};
    int64_t top = -1;

    assert_int_equal(
        sg_store_usage_totals_by_tenant(st, DAY, DAY + 86400, 0, &top, collect_total, &t, err, sizeof(err)), 0);
    assert_int_equal(t.n, 0);
    assert_int_equal(top, 0);

    add(st, a.id, DAY - 1, 100); /* yesterday: never counted */
    add(st, a.id, DAY + 1, 1.5);
    add(st, b.id, DAY + 2, 2);
    add(st, a.id, DAY + 3, 0.5);
    add(st, a.id, DAY + 86400, 100); /* tomorrow */
    assert_int_equal(
        sg_store_usage_totals_by_tenant(st, DAY, DAY + 86400, 0, &top, collect_total, &t, err, sizeof(err)), 0);
    assert_int_equal(t.n, 2);
    assert_int_equal(t.tenant[0], a.id);
    assert_int_equal(t.execs[0], 2);
    assert_true(t.seconds[0] == 2.0);
    assert_int_equal(t.tenant[1], b.id);
    assert_int_equal(t.execs[1], 1);
    assert_true(t.seconds[1] == 2.0);
    int64_t seen = top;
    assert_true(seen >= 3);

    /* nothing new: no row, the same id */
    t.n = 0;
    assert_int_equal(
        sg_store_usage_totals_by_tenant(st, DAY, DAY + 86400, seen, &top, collect_total, &t, err, sizeof(err)), 0);
    assert_int_equal(t.n, 0);
    assert_int_equal(top, seen);

    /* the rows added since: only those, of today */
    add(st, b.id, DAY + 10, 4);
    add(st, b.id, DAY - 5, 9); /* a run of yesterday recorded now */
    add(st, a.id, DAY + 11, 1);
    t.n = 0;
    assert_int_equal(
        sg_store_usage_totals_by_tenant(st, DAY, DAY + 86400, seen, &top, collect_total, &t, err, sizeof(err)), 0);
    assert_int_equal(t.n, 2);
    assert_int_equal(t.tenant[0], a.id);
    assert_int_equal(t.execs[0], 1);
    assert_int_equal(t.tenant[1], b.id);
    assert_int_equal(t.execs[1], 1);
    assert_true(t.seconds[1] == 4.0);
    assert_true(top > seen);

    /* full count = the first count + the increments */
    t.n = 0;
    assert_int_equal(
        sg_store_usage_totals_by_tenant(st, DAY, DAY + 86400, 0, NULL, collect_total, &t, err, sizeof(err)), 0);
    assert_int_equal(t.execs[0], 3);
    assert_int_equal(t.execs[1], 2);
    assert_true(t.seconds[1] == 6.0);
    sg_store_close(st);
}

int main(void)
{
    return SG_RUN_TESTS("store_dash", group_setup, group_teardown, NULL, NULL, test_recent, test_totals_full_and_since);
}
