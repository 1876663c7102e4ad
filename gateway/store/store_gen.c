/*
 * store_gen.c — the generations (store.h): two counters in one row that
 * triggers move inside the transaction of every change to what a gateway
 * caches, whoever writes it (a gateway, sandgate-admin); and their signal,
 * a counter in a small file beside the database (<path>-gen) that every
 * connection maps and moves after a commit that moved them (store_sql.c,
 * the connection's hooks), so that a reader need not read the row while
 * the counter stands still.
 */
#include "store_sql.h"

uint64_t sg_store_generations_signal(const sg_store_t *st)
{
    return __atomic_load_n(st->gen_seq, __ATOMIC_ACQUIRE);
}

int sg_store_generations(sg_store_t *st, sg_store_gen_t *out, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_GENERATIONS];
    int rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        sg_store__db_err(st, "generations", err, errlen);
        sg_store__done(s);
        return -1;
    }
    out->auth = sqlite3_column_int64(s, 0);
    out->sessions = sqlite3_column_int64(s, 1);
    sg_store__done(s);
    return 0;
}

void sg_store_no_wait(sg_store_t *st)
{
    sqlite3_busy_timeout(st->db, 0);
    st->checkpoint = 0; /* never in a commit of the loop's */
}
