/*
 * store_gen.c — the generations (store.h): two counters in one row that
 * triggers move inside the transaction of every change to what a gateway
 * caches, whoever writes it (a gateway, sandgate-admin).
 */
#include "store_sql.h"

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

/* Replaces the automatic checkpoint (which would run, with its fsync, in
 * the commit that crossed the threshold): only the length is kept. */
static int on_wal_commit(void *data, sqlite3 *db, const char *name, int frames)
{
    sg_store_t *st = data;
    (void)db;
    (void)name;
    st->wal_frames = frames;
    return SQLITE_OK;
}

void sg_store_no_wait(sg_store_t *st)
{
    sqlite3_busy_timeout(st->db, 0);
    sqlite3_wal_hook(st->db, on_wal_commit, st);
}

int sg_store_wal_frames(const sg_store_t *st)
{
    return st->wal_frames;
}

int sg_store_checkpoint(sg_store_t *st, char *err, size_t errlen)
{
    int rc = sqlite3_wal_checkpoint_v2(st->db, NULL, SQLITE_CHECKPOINT_RESTART, NULL, NULL);
    if (rc != SQLITE_OK && rc != SQLITE_BUSY) {
        sg_store__db_err(st, "checkpoint", err, errlen);
        return -1;
    }
    return 0;
}
