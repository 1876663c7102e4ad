/*
 * store_sql.h — private to gateway/store/: what the store's SQL files
 * share: the connection with its prepared statements (store_sql.c
 * prepares them at open) and the helpers that read and write rows.
 */
#ifndef SANDGATE_STORE_SQL_H
#define SANDGATE_STORE_SQL_H

#include <sqlite3.h>
#include <string.h>

#include "store.h"
#include "store_err.h"
#include "util.h"

/* The statements prepared once at open (store_sql.c), by what they do. */
enum {
    S_TENANT_INSERT,
    S_TENANT_GET,
    S_TENANT_BY_NAME,
    S_TENANT_UPDATE,
    S_TENANT_LIST,
    S_TOKEN_INSERT,
    S_TOKEN_AUTH,
    S_TOKEN_HASH,
    S_TOKEN_REVOKE,
    S_TOKEN_LIST,
    S_USAGE_INSERT,
    S_USAGE_TOTAL,
    S_USAGE_LIST_TENANT,
    S_USAGE_LIST_ALL,
    S_USAGE_RECENT,
    S_USAGE_TOTALS_BY_TENANT,
    S_USAGE_TOTALS_SINCE,
    S_SESSION_INSERT,
    S_SESSION_CLOSE,
    S_SESSION_COUNT_EXEC,
    S_SESSION_GET,
    S_SESSION_OPEN_TENANT,
    S_SESSION_OPEN_ALL,
    S_GENERATIONS,
    S_JOURNAL_GET,
    S_JOURNAL_SET,
    S_BEGIN, /* BEGIN IMMEDIATE */
    S_COMMIT,
    S_ROLLBACK,
    S__COUNT
};

struct sg_store {
    sqlite3 *db;
    char *path;
    char *journal_dir; /* <data dir>/SG_USAGE_JOURNAL_DIR (store_journal.c) */
    int busy;          /* the last setup step failed on a lock */
    sqlite3_stmt *stmt[S__COUNT];
    /* The generations' signal (store.h): the file <path>-gen mapped, one
     * counter that every connection on this database, in any process,
     * moves after a commit that moved the generations (store_sql.c's
     * hooks). */
    uint64_t *gen_seq;
    int gen_moved;  /* this transaction moved them (update hook) */
    int checkpoint; /* a commit that leaves the WAL this many frames long checkpoints; 0: never */
};

/* a followed by b, malloc'd: the store's paths. */
static inline char *sg_store__cat(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    char *s = sg_xmalloc(na + nb + 1);
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
    return s;
}

/* <data_dir>/SG_USAGE_JOURNAL_DIR, malloc'd: where the writers
 * (sg_usage_journal_open) and the catch-ups (st->journal_dir) look. */
static inline char *sg_store__journal_dir(const char *data_dir)
{
    return sg_store__cat(data_dir, "/" SG_USAGE_JOURNAL_DIR);
}

/* Resets a cached statement for its next use. */
static inline void sg_store__done(sqlite3_stmt *s)
{
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
}

static inline int sg_store__db_err(sg_store_t *st, const char *what, char *err, size_t errlen)
{
    sg_store__errf(err, errlen, "%s: %s", what, sqlite3_errmsg(st->db));
    return -1;
}

/* The end of a statement run to its end (a list, a write): rc SQLITE_DONE
 * is 0, anything else -1 with err naming what failed; s is reset either
 * way. */
static inline int sg_store__finish(sg_store_t *st, sqlite3_stmt *s, int rc, const char *what, char *err, size_t errlen)
{
    int ret = rc == SQLITE_DONE ? 0 : sg_store__db_err(st, what, err, errlen);
    sg_store__done(s);
    return ret;
}

/* A transaction's BEGIN IMMEDIATE (S_BEGIN), COMMIT or ROLLBACK, prepared
 * once (the usage journal's catch-up begins and ends one every few tens of
 * milliseconds under load): 0, or -1 with err naming what failed. */
static inline int sg_store__tx(sg_store_t *st, int which, const char *what, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[which];
    return sg_store__finish(st, s, sqlite3_step(s), what, err, errlen);
}

/* Runs a statement that returns no row to its end: the number of rows it
 * changed, or -1 with err naming what failed; s is reset either way. */
static inline int sg_store__run(sg_store_t *st, sqlite3_stmt *s, const char *what, char *err, size_t errlen)
{
    if (sg_store__finish(st, s, sqlite3_step(s), what, err, errlen) != 0)
        return -1;
    return sqlite3_changes(st->db);
}

static inline void sg_store__col_text(sqlite3_stmt *s, int col, char *buf, size_t size)
{
    const unsigned char *p = sqlite3_column_text(s, col);
    size_t n = p != NULL ? (size_t)sqlite3_column_bytes(s, col) : 0;
    if (n >= size)
        n = size - 1;
    if (n > 0)
        memcpy(buf, p, n);
    buf[n] = '\0';
}

/* A text parameter, NULL when s is NULL or "". */
static inline void sg_store__bind_text_or_null(sqlite3_stmt *s, int idx, const char *v)
{
    if (v == NULL || v[0] == '\0')
        sqlite3_bind_null(s, idx);
    else
        sqlite3_bind_text(s, idx, v, -1, SQLITE_STATIC);
}

/* Reads the tenant columns (id, name, created_at, then every field of
 * sg_tenant_fields) starting at col. */
void sg_store__read_tenant(sqlite3_stmt *s, int col, sg_tenant_t *t);
/* Binds every tenant field as ?3, ?4, ... */
void sg_store__bind_tenant_fields(sqlite3_stmt *s, const sg_tenant_t *t);
/* Runs a one-row lookup: 1 found (read(s, out) has filled *out, unless out
 * is NULL), 0 not found, -1 with err naming what failed; s is reset. */
int sg_store__get(sg_store_t *st, sqlite3_stmt *s, void (*read)(sqlite3_stmt *s, void *out), void *out,
                  const char *what, char *err, size_t errlen);
/* A read for sg_store__get of a row that starts with the tenant columns. */
void sg_store__read_tenant_row(sqlite3_stmt *s, void *out);

#endif
