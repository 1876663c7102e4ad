/*
 * store_templates.c — the templates table and tenant deletion (store.h).
 * Rare calls: each prepares its statement, on the store's connection.
 */
#include "store_sql.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

#define TEMPLATE_COLS "id, tenant_id, COALESCE(name, ''), COALESCE(session_id, ''), created_at, size_bytes"

static sqlite3_stmt *prepare(sg_store_t *st, const char *sql, char *err, size_t errlen)
{
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(sg_store_db(st), sql, -1, &s, NULL) != SQLITE_OK) {
        sg_store__db_err(st, "prepare", err, errlen);
        return NULL;
    }
    return s;
}

/* Runs a statement that returns no row; the number of rows changed, or -1. */
static int run(sg_store_t *st, sqlite3_stmt *s, const char *what, char *err, size_t errlen)
{
    int rc;
    if (s == NULL)
        return -1;
    rc = sqlite3_step(s);
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE)
        return sg_store__db_err(st, what, err, errlen);
    return sqlite3_changes(sg_store_db(st));
}

static int exec(sg_store_t *st, const char *sql, char *err, size_t errlen)
{
    char *msg = NULL;
    if (sqlite3_exec(sg_store_db(st), sql, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(err, errlen, "%s: %s", sql, msg != NULL ? msg : "error");
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static void read_template(sqlite3_stmt *s, void *out)
{
    sg_template_rec_t *t = out;
    memset(t, 0, sizeof(*t));
    t->id = sqlite3_column_int64(s, 0);
    t->tenant_id = sqlite3_column_int64(s, 1);
    snprintf(t->name, sizeof(t->name), "%s", (const char *)sqlite3_column_text(s, 2));
    snprintf(t->session_id, sizeof(t->session_id), "%s", (const char *)sqlite3_column_text(s, 3));
    t->created_at = sqlite3_column_int64(s, 4);
    t->size_bytes = sqlite3_column_int64(s, 5);
}

/* A slot counts while it is a kept template, its session is open, or it is
 * younger than the grace period (the create, or the record of its session,
 * is still on its way). */
#define SLOT_LIVE                                                                                                      \
    "(name IS NOT NULL OR created_at > ?2 OR EXISTS (SELECT 1 FROM sessions s WHERE s.id = templates.session_id"       \
    " AND s.closed_at IS NULL))"

int sg_store_template_reserve(sg_store_t *st, int64_t tenant_id, long max, int64_t grace_s, int64_t *row, char *err,
                              size_t errlen)
{
    sqlite3_stmt *s;
    int64_t now = sg_wall_s(), n = 0;
    int ret = -1;

    if (exec(st, "BEGIN IMMEDIATE", err, errlen) != 0)
        return -1;
    s = prepare(st, "DELETE FROM templates WHERE tenant_id = ?1 AND NOT " SLOT_LIVE, err, errlen);
    if (s == NULL)
        goto Exit;
    sqlite3_bind_int64(s, 1, tenant_id);
    sqlite3_bind_int64(s, 2, now - grace_s);
    if (run(st, s, "template slots", err, errlen) < 0)
        goto Exit;
    s = prepare(st, "SELECT COUNT(*) FROM templates WHERE tenant_id = ?1", err, errlen);
    if (s == NULL)
        goto Exit;
    sqlite3_bind_int64(s, 1, tenant_id);
    if (sqlite3_step(s) == SQLITE_ROW)
        n = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    if (n >= max) {
        ret = 0;
        goto Exit;
    }
    s = prepare(st, "INSERT INTO templates (tenant_id, created_at) VALUES (?1, ?2)", err, errlen);
    if (s == NULL)
        goto Exit;
    sqlite3_bind_int64(s, 1, tenant_id);
    sqlite3_bind_int64(s, 2, now);
    if (run(st, s, "template reserve", err, errlen) < 0)
        goto Exit;
    *row = sqlite3_last_insert_rowid(sg_store_db(st));
    if (exec(st, "COMMIT", err, errlen) != 0)
        goto Exit;
    return 1;
Exit:
    sqlite3_exec(sg_store_db(st), "ROLLBACK", NULL, NULL, NULL);
    return ret;
}

int sg_store_template_bind(sg_store_t *st, int64_t row, const char *session_id, char *err, size_t errlen)
{
    sqlite3_stmt *s = prepare(st, "UPDATE templates SET session_id = ?2 WHERE id = ?1", err, errlen);
    if (s == NULL)
        return -1;
    sqlite3_bind_int64(s, 1, row);
    sqlite3_bind_text(s, 2, session_id, -1, SQLITE_STATIC);
    return run(st, s, "template bind", err, errlen) < 0 ? -1 : 0;
}

int sg_store_template_release(sg_store_t *st, int64_t row, char *err, size_t errlen)
{
    sqlite3_stmt *s = prepare(st, "DELETE FROM templates WHERE id = ?1 AND name IS NULL", err, errlen);
    if (s == NULL)
        return -1;
    sqlite3_bind_int64(s, 1, row);
    return run(st, s, "template release", err, errlen) < 0 ? -1 : 0;
}

int sg_store_template_closed(sg_store_t *st, int64_t tenant_id, const char *session_id, const char *name,
                             int64_t size_bytes, char *err, size_t errlen)
{
    sqlite3_stmt *s;
    if (name == NULL) {
        s = prepare(st, "DELETE FROM templates WHERE session_id = ?1 AND name IS NULL", err, errlen);
        if (s == NULL)
            return -1;
        sqlite3_bind_text(s, 1, session_id, -1, SQLITE_STATIC);
        return run(st, s, "template not kept", err, errlen) < 0 ? -1 : 0;
    }
    s = prepare(
        st,
        "INSERT INTO templates (tenant_id, session_id, name, created_at, size_bytes) VALUES (?1, ?2, ?3, ?4, ?5)"
        " ON CONFLICT(session_id) DO UPDATE SET name = excluded.name, created_at = excluded.created_at,"
        " size_bytes = excluded.size_bytes",
        err, errlen);
    if (s == NULL)
        return -1;
    sqlite3_bind_int64(s, 1, tenant_id);
    sqlite3_bind_text(s, 2, session_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 4, sg_wall_s());
    sqlite3_bind_int64(s, 5, size_bytes);
    return run(st, s, "template kept", err, errlen) < 0 ? -1 : 0;
}

int sg_store_template_get(sg_store_t *st, const char *name, sg_template_rec_t *out, char *err, size_t errlen)
{
    sqlite3_stmt *s = prepare(st, "SELECT " TEMPLATE_COLS " FROM templates WHERE name = ?1", err, errlen);
    int ret;
    if (s == NULL)
        return -1;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    ret = sg_store__get(st, s, read_template, out, "template get", err, errlen);
    sqlite3_finalize(s);
    return ret;
}

int sg_store_template_list(sg_store_t *st, int64_t tenant_id, void (*fn)(const sg_template_rec_t *t, void *data),
                           void *data, char *err, size_t errlen)
{
    sqlite3_stmt *s =
        prepare(st,
                "SELECT " TEMPLATE_COLS " FROM templates WHERE name IS NOT NULL AND (?1 = 0 OR tenant_id = ?1)"
                " ORDER BY created_at, id",
                err, errlen);
    sg_template_rec_t t;
    int rc;
    if (s == NULL)
        return -1;
    sqlite3_bind_int64(s, 1, tenant_id);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        read_template(s, &t);
        fn(&t, data);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? 0 : sg_store__db_err(st, "template list", err, errlen);
}

int sg_store_template_delete(sg_store_t *st, const char *name, char *err, size_t errlen)
{
    sqlite3_stmt *s = prepare(st, "DELETE FROM templates WHERE name = ?1", err, errlen);
    int n;
    if (s == NULL)
        return -1;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    n = run(st, s, "template delete", err, errlen);
    return n < 0 ? -1 : n > 0;
}

/* ---- tenant deletion ---- */

int sg_store_tenant_mark_deleting(sg_store_t *st, int64_t id, char *err, size_t errlen)
{
    sqlite3_stmt *s = prepare(st, "UPDATE tenants SET deleting = 1, disabled = 1 WHERE id = ?1", err, errlen);
    int n;
    if (s == NULL)
        return -1;
    sqlite3_bind_int64(s, 1, id);
    n = run(st, s, "tenant delete", err, errlen);
    return n < 0 ? -1 : n > 0;
}

int sg_store_tenant_list_deleting(sg_store_t *st, void (*fn)(const sg_tenant_t *t, void *data), void *data, char *err,
                                  size_t errlen)
{
    sqlite3_stmt *s = prepare(st, "SELECT id FROM tenants WHERE deleting = 1 ORDER BY id", err, errlen);
    int64_t ids[64];
    size_t n = 0;
    int rc;
    if (s == NULL)
        return -1;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW && n < sizeof(ids) / sizeof(ids[0]))
        ids[n++] = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return sg_store__db_err(st, "tenant list", err, errlen);
    for (size_t i = 0; i < n; i++) {
        sg_tenant_t t;
        if (sg_store_tenant_get(st, ids[i], &t, err, errlen) == 1)
            fn(&t, data);
    }
    return 0;
}

int sg_store_tenant_purge(sg_store_t *st, int64_t id, char *err, size_t errlen)
{
    static const char *const sql[] = {
        "DELETE FROM templates WHERE tenant_id = ?1", "DELETE FROM tokens WHERE tenant_id = ?1",
        "DELETE FROM usage WHERE tenant_id = ?1",     "DELETE FROM sessions WHERE tenant_id = ?1",
        "DELETE FROM tenants WHERE id = ?1",
    };
    int n = 0;
    if (exec(st, "BEGIN IMMEDIATE", err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < sizeof(sql) / sizeof(sql[0]); i++) {
        sqlite3_stmt *s = prepare(st, sql[i], err, errlen);
        if (s == NULL)
            goto Error;
        sqlite3_bind_int64(s, 1, id);
        if ((n = run(st, s, "tenant purge", err, errlen)) < 0)
            goto Error;
    }
    if (exec(st, "COMMIT", err, errlen) != 0)
        goto Error;
    return n > 0;
Error:
    sqlite3_exec(sg_store_db(st), "ROLLBACK", NULL, NULL, NULL);
    return -1;
}
