/*
 * store_usage.c — the usage ledger's reads (store.h): each moves the
 * usage journal into the ledger first (store_journal.c), which writes
 * through store_ledger.c.
 */
#include "store_sql.h"

#include <string.h>

int sg_store_usage_total(sg_store_t *st, int64_t tenant_id, double from, double to, sg_usage_total_t *out, char *err,
                         size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_USAGE_TOTAL];
    int rc;

    memset(out, 0, sizeof(*out));
    if (sg_store_usage_catch_up(st, NULL, err, errlen) != 0)
        return -1;
    sqlite3_bind_int64(s, 1, tenant_id);
    sqlite3_bind_double(s, 2, from);
    sqlite3_bind_double(s, 3, to);
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        sg_store__db_err(st, "usage total", err, errlen);
        sg_store__done(s);
        return -1;
    }
    out->executions = sqlite3_column_int64(s, 0);
    out->seconds = sqlite3_column_double(s, 1);
    out->output_bytes = sqlite3_column_int64(s, 2);
    out->timed_out = sqlite3_column_int64(s, 3);
    sg_store__done(s);
    return 0;
}

/* A row of USAGE_COLS. */
static void read_usage(sqlite3_stmt *s, sg_usage_t *u)
{
    memset(u, 0, sizeof(*u));
    u->tenant_id = sqlite3_column_int64(s, 0);
    sg_store__col_text(s, 1, u->session_id, sizeof(u->session_id));
    sg_store__col_text(s, 2, u->lang, sizeof(u->lang));
    sg_store__col_text(s, 3, u->kind, sizeof(u->kind));
    u->started_at = sqlite3_column_double(s, 4);
    u->duration = sqlite3_column_double(s, 5);
    u->exit_code = sqlite3_column_int(s, 6);
    u->timed_out = sqlite3_column_int(s, 7);
    u->output_bytes = sqlite3_column_int64(s, 8);
}

int sg_store_usage_list(sg_store_t *st, int64_t tenant_id, double from, double to, int limit,
                        void (*fn)(const sg_usage_t *u, void *data), void *data, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[tenant_id != 0 ? S_USAGE_LIST_TENANT : S_USAGE_LIST_ALL];
    sg_usage_t u;
    int rc;

    if (sg_store_usage_catch_up(st, NULL, err, errlen) != 0)
        return -1;
    if (tenant_id != 0)
        sqlite3_bind_int64(s, 1, tenant_id);
    sqlite3_bind_double(s, 2, from);
    sqlite3_bind_double(s, 3, to);
    sqlite3_bind_int(s, 4, limit > 0 ? limit : -1);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        read_usage(s, &u);
        fn(&u, data);
    }
    return sg_store__finish(st, s, rc, "usage list", err, errlen);
}

int sg_store_usage_recent(sg_store_t *st, int limit, void (*fn)(const sg_usage_t *u, void *data), void *data, char *err,
                          size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_USAGE_RECENT];
    sg_usage_t u;
    int rc;

    if (sg_store_usage_catch_up(st, NULL, err, errlen) != 0)
        return -1;
    sqlite3_bind_int(s, 1, limit);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        read_usage(s, &u);
        fn(&u, data);
    }
    return sg_store__finish(st, s, rc, "usage recent", err, errlen);
}

int sg_store_usage_totals_by_tenant(sg_store_t *st, double from, double to, int64_t after_id, int64_t *max_id,
                                    void (*fn)(int64_t tenant_id, const sg_usage_total_t *t, void *data), void *data,
                                    char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[after_id > 0 ? S_USAGE_TOTALS_SINCE : S_USAGE_TOTALS_BY_TENANT];
    sg_usage_total_t t;
    int64_t top = after_id;
    int rc;

    if (sg_store_usage_catch_up(st, NULL, err, errlen) != 0)
        return -1;
    sqlite3_bind_double(s, 1, from);
    sqlite3_bind_double(s, 2, to);
    if (after_id > 0)
        sqlite3_bind_int64(s, 3, after_id);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        memset(&t, 0, sizeof(t));
        t.executions = sqlite3_column_int64(s, 1);
        t.seconds = sqlite3_column_double(s, 2);
        if (sqlite3_column_int64(s, 3) > top)
            top = sqlite3_column_int64(s, 3);
        fn(sqlite3_column_int64(s, 0), &t, data);
    }
    if (max_id != NULL)
        *max_id = top;
    return sg_store__finish(st, s, rc, "usage totals", err, errlen);
}
