/*
 * store_ledger.c — the usage ledger's writes (one row per execution) and
 * session history in SQLite (store.h); the ledger's reads are
 * store_usage.c.
 */
#include "store_sql.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

/* Runs the bound insert s of a row of tenant_id (and, for a session, its
 * id): 0, or -1 with what failed in err, "<what>: ..." (the tenant missing,
 * the session already recorded, or the database's own message). */
static int step_insert(sg_store_t *st, sqlite3_stmt *s, const char *what, int64_t tenant_id, const char *session_id,
                       char *err, size_t errlen)
{
    int rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) {
        if (session_id != NULL && (rc == SQLITE_CONSTRAINT_PRIMARYKEY || rc == SQLITE_CONSTRAINT_UNIQUE))
            sg_store__errf(err, errlen, "%s: session %s already recorded", what, session_id);
        else if (rc == SQLITE_CONSTRAINT_FOREIGNKEY)
            sg_store__errf(err, errlen, "%s: no tenant with id %lld", what, (long long)tenant_id);
        else
            sg_store__db_err(st, what, err, errlen);
        sg_store__done(s);
        return -1;
    }
    sg_store__done(s);
    return 0;
}

/* ---- usage ---- */

int sg_store_usage_add(sg_store_t *st, const sg_usage_t *u, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_USAGE_INSERT];

    sqlite3_bind_int64(s, 1, u->tenant_id);
    sg_store__bind_text_or_null(s, 2, u->session_id);
    sqlite3_bind_text(s, 3, u->lang, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, u->kind, -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 5, u->started_at);
    sqlite3_bind_double(s, 6, u->duration);
    sqlite3_bind_int(s, 7, u->exit_code);
    sqlite3_bind_int(s, 8, u->timed_out != 0);
    sqlite3_bind_int64(s, 9, u->output_bytes);
    return step_insert(st, s, "usage add", u->tenant_id, NULL, err, errlen);
}

/* One row and its session's count, in the caller's transaction or alone. */
static int add_one(sg_store_t *st, const sg_usage_t *u, int count_session, char *err, size_t errlen)
{
    if (sg_store_usage_add(st, u, err, errlen) != 0)
        return -1;
    if (count_session && sg_store_session_count_exec(st, u->session_id, 1, err, errlen) != 0)
        return -1;
    return 0;
}

/* The rows in one transaction, or none of them: 0 when committed, -1 when
 * nothing was written. */
static int try_batch(sg_store_t *st, const sg_usage_t *const *rows, const int *count_session, size_t n, char *err,
                     size_t errlen)
{
    size_t i;

    if (sg_store__tx(st, S_BEGIN, "usage batch", err, errlen) != 0)
        return -1;
    for (i = 0; i < n; i++) {
        if (add_one(st, rows[i], count_session[i], err, errlen) != 0)
            break;
    }
    if (i == n && sg_store__tx(st, S_COMMIT, "usage batch", err, errlen) == 0)
        return 0;
    sg_store__tx(st, S_ROLLBACK, "usage batch", NULL, 0);
    return -1;
}

int sg_store_usage_add_batch(sg_store_t *st, const sg_usage_t *const *rows, const int *count_session, size_t n,
                             int *failed, char *err, size_t errlen)
{
    int nfailed = 0;
    size_t i;

    if (failed != NULL)
        memset(failed, 0, n * sizeof(*failed));
    if (n == 0 || try_batch(st, rows, count_session, n, err, errlen) == 0)
        return 0;
    /* one bad row (a tenant deleted meanwhile) must not cost the others
     * theirs: each alone, in its own transaction */
    for (i = 0; i < n; i++) {
        if (add_one(st, rows[i], count_session[i], err, errlen) != 0) {
            nfailed++;
            if (failed != NULL)
                failed[i] = 1;
        }
    }
    return nfailed;
}

/* ---- sessions ---- */

static void read_session(sqlite3_stmt *s, void *out)
{
    sg_session_rec_t *r = out;
    memset(r, 0, sizeof(*r));
    sg_store__col_text(s, 0, r->id, sizeof(r->id));
    r->tenant_id = sqlite3_column_int64(s, 1);
    sg_store__col_text(s, 2, r->lang, sizeof(r->lang));
    r->created_at = sqlite3_column_int64(s, 3);
    r->closed_at = sqlite3_column_int64(s, 4);
    sg_store__col_text(s, 5, r->close_reason, sizeof(r->close_reason));
    r->executions = sqlite3_column_int64(s, 6);
    sg_store__col_text(s, 7, r->runtime, sizeof(r->runtime));
    sg_store__col_text(s, 8, r->proxy, sizeof(r->proxy));
}

int sg_store_session_open(sg_store_t *st, const sg_session_rec_t *r, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_SESSION_INSERT];

    if (r->id[0] == '\0') {
        sg_store__errf(err, errlen, "session open: empty session id");
        return -1;
    }
    sqlite3_bind_text(s, 1, r->id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, r->tenant_id);
    sqlite3_bind_text(s, 3, r->lang, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 4, r->created_at != 0 ? r->created_at : sg_wall_s());
    sqlite3_bind_int64(s, 5, r->executions);
    if (r->runtime[0] != '\0')
        sqlite3_bind_text(s, 6, r->runtime, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(s, 6);
    if (r->proxy[0] != '\0')
        sqlite3_bind_text(s, 7, r->proxy, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(s, 7);
    return step_insert(st, s, "session open", r->tenant_id, r->id, err, errlen);
}

int sg_store_session_close(sg_store_t *st, const char *id, int64_t closed_at, const char *reason, char *err,
                           size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_SESSION_CLOSE];
    int rc;

    sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, closed_at != 0 ? closed_at : sg_wall_s());
    sqlite3_bind_text(s, 3, reason != NULL ? reason : "", -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    return sg_store__finish(st, s, rc, "session close", err, errlen);
}

int sg_store_session_count_exec(sg_store_t *st, const char *id, int64_t n, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_SESSION_COUNT_EXEC];
    int rc;

    sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, n);
    rc = sqlite3_step(s);
    return sg_store__finish(st, s, rc, "session count", err, errlen);
}

int sg_store_session_get(sg_store_t *st, const char *id, sg_session_rec_t *out, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_SESSION_GET];
    sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
    return sg_store__get(st, s, read_session, out, "session get", err, errlen);
}

int sg_store_session_list_open(sg_store_t *st, int64_t tenant_id, void (*fn)(const sg_session_rec_t *s, void *data),
                               void *data, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[tenant_id != 0 ? S_SESSION_OPEN_TENANT : S_SESSION_OPEN_ALL];
    sg_session_rec_t r;
    int rc;

    if (tenant_id != 0)
        sqlite3_bind_int64(s, 1, tenant_id);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        read_session(s, &r);
        fn(&r, data);
    }
    return sg_store__finish(st, s, rc, "session list", err, errlen);
}
