/*
 * store.c — SQLite records of the gateway (see store.h).
 *
 * One sg_store_t is one connection with every statement prepared once at
 * open and reset after each use. The schema is versioned by PRAGMA
 * user_version: migrations[i] takes a database from version i to i + 1 and
 * runs in one IMMEDIATE transaction, so two processes opening a new file at
 * once do not both create it. Nullable columns (revoked_at, closed_at,
 * close_reason, session_id) are NULL in SQL where the structs say 0 or "".
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <openssl/crypto.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "token.h"
#include "util.h"

#define SG_STORE_FILE "sandgate.db"
#define SG_BUSY_TIMEOUT_MS 5000

/* ---- tenant fields: one table for SQL columns, parsing, ranges, output ---- */

typedef enum { F_LONG, F_DOUBLE, F_BOOL, F_LANGS } field_type_t;

typedef struct {
    const char *name; /* also the SQL column */
    field_type_t type;
    size_t off;
    double min, max;
} tenant_field_t;

#define TF(n, t, lo, hi) {#n, t, offsetof(sg_tenant_t, n), lo, hi}
static const tenant_field_t tenant_fields[] = {
    TF(disabled, F_BOOL, 0, 1),
    TF(rate_per_min, F_LONG, 1, 1e9),
    TF(burst, F_LONG, 1, 1e9),
    TF(max_sessions, F_LONG, 0, 1e6),
    TF(max_concurrent_execs, F_LONG, 0, 1e6),
    TF(execs_per_day, F_LONG, 0, 1e12),
    TF(exec_seconds_per_day, F_DOUBLE, 0, 1e12),
    TF(max_timeout, F_DOUBLE, 0.1, 86400),
    TF(max_memory_mb, F_LONG, 16, 1048576),
    TF(max_cpus, F_DOUBLE, 0.01, 1024),
    TF(allowed_langs, F_LANGS, 0, 0),
    TF(network_allowed, F_BOOL, 0, 1),
    TF(idle_timeout, F_LONG, 1, 1e9),
    TF(max_lifetime, F_LONG, 1, 1e9),
    TF(max_templates, F_LONG, 0, 1e6),
};
#undef TF
#define N_TENANT_FIELDS (sizeof(tenant_fields) / sizeof(tenant_fields[0]))

#define LANG_NAME_MAX 31

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (err == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void sg_tenant_defaults(sg_tenant_t *t)
{
    memset(t, 0, sizeof(*t));
    t->rate_per_min = 600;
    t->burst = 60;
    t->max_sessions = 10;
    t->max_concurrent_execs = 8;
    t->execs_per_day = 10000;
    t->exec_seconds_per_day = 36000;
    t->max_timeout = 300;
    t->max_memory_mb = 1024;
    t->max_cpus = 2;
    strcpy(t->allowed_langs, "*");
    t->network_allowed = 0;
    t->idle_timeout = 900;
    t->max_lifetime = 14400;
    t->max_templates = 5;
}

int sg_tenant_name_valid(const char *name)
{
    size_t n = name != NULL ? strlen(name) : 0;
    if (n == 0 || n > SG_TENANT_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return 0;
    }
    return 1;
}

static int is_lang_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '+' || c == '-';
}

/* "*" or comma-separated names of [a-z0-9_+-]{1,31}, shorter than SG_LANGS_MAX. */
static int langs_valid(const char *s)
{
    size_t n = strlen(s), run = 0;
    if (strcmp(s, "*") == 0)
        return 1;
    if (n == 0 || n >= SG_LANGS_MAX)
        return 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == ',') {
            if (run == 0 || run > LANG_NAME_MAX)
                return 0;
            run = 0;
        } else if (is_lang_char(s[i])) {
            run++;
        } else {
            return 0;
        }
    }
    return 1;
}

int sg_tenant_lang_allowed(const sg_tenant_t *t, const char *lang, size_t len)
{
    const char *p = t->allowed_langs;
    if (strcmp(p, "*") == 0)
        return 1;
    if (len == 0)
        return 0;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        if (n == len && memcmp(p, lang, len) == 0)
            return 1;
        if (end == NULL)
            break;
        p = end + 1;
    }
    return 0;
}

static const tenant_field_t *find_field(const char *key)
{
    for (size_t i = 0; i < N_TENANT_FIELDS; i++) {
        if (strcmp(tenant_fields[i].name, key) == 0)
            return &tenant_fields[i];
    }
    return NULL;
}

static void field_range_err(const tenant_field_t *f, const char *got, char *err, size_t errlen)
{
    switch (f->type) {
    case F_LONG:
        set_err(err, errlen, "%s: must be an integer from %.0f to %.0f (got \"%s\")", f->name, f->min, f->max, got);
        break;
    case F_DOUBLE:
        set_err(err, errlen, "%s: must be a number from %g to %.0f (got \"%s\")", f->name, f->min, f->max, got);
        break;
    case F_BOOL:
        set_err(err, errlen, "%s: must be 0 or 1 (got \"%s\")", f->name, got);
        break;
    case F_LANGS:
        set_err(err, errlen,
                "%s: must be \"*\" or a comma-separated list of language names of [a-z0-9_+-] (got \"%s\")", f->name,
                got);
        break;
    }
}

int sg_tenant_set_field(sg_tenant_t *t, const char *key, const char *value, char *err, size_t errlen)
{
    const tenant_field_t *f = find_field(key);
    char *end;

    if (f == NULL) {
        char names[512];
        size_t off = 0;
        names[0] = '\0';
        for (size_t i = 0; i < N_TENANT_FIELDS && off < sizeof(names); i++)
            off += (size_t)snprintf(names + off, sizeof(names) - off, "%s%s", i ? ", " : "", tenant_fields[i].name);
        set_err(err, errlen, "%s: unknown key (keys: %s)", key, names);
        return -1;
    }
    switch (f->type) {
    case F_LONG: {
        long long v;
        if (!(value[0] == '-' || (value[0] >= '0' && value[0] <= '9')))
            goto Bad;
        errno = 0;
        v = strtoll(value, &end, 10);
        if (value[0] == '\0' || *end != '\0' || errno != 0 || (double)v < f->min || (double)v > f->max)
            goto Bad;
        *(long *)((char *)t + f->off) = (long)v;
        return 0;
    }
    case F_DOUBLE: {
        double v;
        if (!(value[0] == '-' || value[0] == '.' || (value[0] >= '0' && value[0] <= '9')))
            goto Bad;
        errno = 0;
        v = strtod(value, &end);
        if (value[0] == '\0' || *end != '\0' || errno != 0 || !isfinite(v) || v < f->min || v > f->max)
            goto Bad;
        *(double *)((char *)t + f->off) = v;
        return 0;
    }
    case F_BOOL: {
        int v;
        if (strcmp(value, "1") == 0 || strcasecmp(value, "true") == 0 || strcasecmp(value, "yes") == 0 ||
            strcasecmp(value, "on") == 0)
            v = 1;
        else if (strcmp(value, "0") == 0 || strcasecmp(value, "false") == 0 || strcasecmp(value, "no") == 0 ||
                 strcasecmp(value, "off") == 0)
            v = 0;
        else
            goto Bad;
        *(int *)((char *)t + f->off) = v;
        return 0;
    }
    case F_LANGS:
        if (!langs_valid(value))
            goto Bad;
        snprintf((char *)t + f->off, SG_LANGS_MAX, "%s", value);
        return 0;
    }
Bad:
    field_range_err(f, value, err, errlen);
    return -1;
}

int sg_tenant_validate(const sg_tenant_t *t, char *err, size_t errlen)
{
    char got[64];

    for (size_t i = 0; i < N_TENANT_FIELDS; i++) {
        const tenant_field_t *f = &tenant_fields[i];
        const char *p = (const char *)t + f->off;
        switch (f->type) {
        case F_LONG: {
            long v = *(const long *)p;
            if ((double)v < f->min || (double)v > f->max) {
                snprintf(got, sizeof(got), "%ld", v);
                goto Bad;
            }
            break;
        }
        case F_DOUBLE: {
            double v = *(const double *)p;
            if (!isfinite(v) || v < f->min || v > f->max) {
                snprintf(got, sizeof(got), "%g", v);
                goto Bad;
            }
            break;
        }
        case F_BOOL: {
            int v = *(const int *)p;
            if (v != 0 && v != 1) {
                snprintf(got, sizeof(got), "%d", v);
                goto Bad;
            }
            break;
        }
        case F_LANGS:
            if (memchr(p, '\0', SG_LANGS_MAX) == NULL || !langs_valid(p)) {
                snprintf(got, sizeof(got), "%.60s", memchr(p, '\0', SG_LANGS_MAX) != NULL ? p : "(unterminated)");
                goto Bad;
            }
            break;
        }
        continue;
    Bad:
        field_range_err(f, got, err, errlen);
        return -1;
    }
    return 0;
}

/* Shortest of %.6f without trailing zeros: 2 -> "2", 0.25 -> "0.25". */
static void fmt_double(double v, char out[48])
{
    char *dot;
    snprintf(out, 48, "%.6f", v);
    dot = strchr(out, '.');
    if (dot != NULL) {
        char *e = out + strlen(out) - 1;
        while (e > dot && *e == '0')
            *e-- = '\0';
        if (e == dot)
            *e = '\0';
    }
}

int sg_tenant_format(const sg_tenant_t *t, char *buf, size_t len)
{
    size_t off = 0;
    int total = 0;

    if (len > 0)
        buf[0] = '\0';
    for (size_t i = 0; i < N_TENANT_FIELDS; i++) {
        const tenant_field_t *f = &tenant_fields[i];
        const char *p = (const char *)t + f->off;
        char v[48];
        int n;
        switch (f->type) {
        case F_LONG:
            snprintf(v, sizeof(v), "%ld", *(const long *)p);
            break;
        case F_DOUBLE:
            fmt_double(*(const double *)p, v);
            break;
        case F_BOOL:
            snprintf(v, sizeof(v), "%d", *(const int *)p);
            break;
        case F_LANGS:
            v[0] = '\0';
            break;
        }
        n = snprintf(buf + off, off < len ? len - off : 0, "%s%s=%s", i ? " " : "", f->name,
                     f->type == F_LANGS ? p : v);
        total += n;
        off += (size_t)n;
        if (off > len)
            off = len;
    }
    return total;
}

json_object *sg_tenant_to_json(const sg_tenant_t *t)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "id", json_object_new_int64(t->id));
    json_object_object_add(o, "name", json_object_new_string(t->name));
    json_object_object_add(o, "created_at", json_object_new_int64(t->created_at));
    for (size_t i = 0; i < N_TENANT_FIELDS; i++) {
        const tenant_field_t *f = &tenant_fields[i];
        const char *p = (const char *)t + f->off;
        json_object *v = NULL;
        switch (f->type) {
        case F_LONG:
            v = json_object_new_int64(*(const long *)p);
            break;
        case F_DOUBLE: {
            char num[48];
            fmt_double(*(const double *)p, num);
            v = json_object_new_double_s(*(const double *)p, num);
            break;
        }
        case F_BOOL:
            v = json_object_new_boolean(*(const int *)p);
            break;
        case F_LANGS:
            v = json_object_new_string(p);
            break;
        }
        json_object_object_add(o, f->name, v);
    }
    return o;
}

/* ---- schema ---- */

static const char *const migrations[] = {
    /* 0 -> 1 */
    "CREATE TABLE tenants ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " name TEXT NOT NULL UNIQUE,"
    " created_at INTEGER NOT NULL,"
    " disabled INTEGER NOT NULL DEFAULT 0,"
    " rate_per_min INTEGER NOT NULL,"
    " burst INTEGER NOT NULL,"
    " max_sessions INTEGER NOT NULL,"
    " execs_per_day INTEGER NOT NULL,"
    " exec_seconds_per_day REAL NOT NULL,"
    " max_timeout REAL NOT NULL,"
    " max_memory_mb INTEGER NOT NULL,"
    " max_cpus REAL NOT NULL,"
    " allowed_langs TEXT NOT NULL,"
    " network_allowed INTEGER NOT NULL,"
    " idle_timeout INTEGER NOT NULL,"
    " max_lifetime INTEGER NOT NULL);"
    "CREATE TABLE tokens ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " public_id TEXT NOT NULL UNIQUE,"
    " hash BLOB NOT NULL,"
    " tenant_id INTEGER NOT NULL REFERENCES tenants(id),"
    " label TEXT NOT NULL DEFAULT '',"
    " created_at INTEGER NOT NULL,"
    " revoked_at INTEGER);"
    "CREATE INDEX tokens_tenant ON tokens(tenant_id);"
    "CREATE TABLE usage ("
    " id INTEGER PRIMARY KEY,"
    " tenant_id INTEGER NOT NULL REFERENCES tenants(id),"
    " session_id TEXT,"
    " lang TEXT NOT NULL,"
    " kind TEXT NOT NULL,"
    " started_at REAL NOT NULL,"
    " duration REAL NOT NULL,"
    " exit_code INTEGER NOT NULL,"
    " timed_out INTEGER NOT NULL,"
    " output_bytes INTEGER NOT NULL);"
    "CREATE INDEX usage_tenant_time ON usage(tenant_id, started_at);"
    "CREATE INDEX usage_time ON usage(started_at);"
    "CREATE TABLE sessions ("
    " id TEXT PRIMARY KEY,"
    " tenant_id INTEGER NOT NULL REFERENCES tenants(id),"
    " lang TEXT NOT NULL,"
    " created_at INTEGER NOT NULL,"
    " closed_at INTEGER,"
    " close_reason TEXT,"
    " executions INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX sessions_tenant ON sessions(tenant_id, created_at);"
    "CREATE INDEX sessions_open ON sessions(tenant_id, created_at) WHERE closed_at IS NULL;",
    /* 1 -> 2: executions in flight per tenant; templates (store_templates.c)
     * and their quota; tenant deletion */
    "ALTER TABLE tenants ADD COLUMN max_concurrent_execs INTEGER NOT NULL DEFAULT 8;"
    "ALTER TABLE tenants ADD COLUMN max_templates INTEGER NOT NULL DEFAULT 5;"
    "ALTER TABLE tenants ADD COLUMN deleting INTEGER NOT NULL DEFAULT 0;"
    "CREATE TABLE templates ("
    " id INTEGER PRIMARY KEY,"
    " tenant_id INTEGER NOT NULL REFERENCES tenants(id),"
    " session_id TEXT UNIQUE,"
    " name TEXT UNIQUE,"
    " created_at INTEGER NOT NULL,"
    " size_bytes INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX templates_tenant ON templates(tenant_id);",
};
#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

/* ---- statements ---- */

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
    S_SESSION_INSERT,
    S_SESSION_CLOSE,
    S_SESSION_COUNT_EXEC,
    S_SESSION_GET,
    S_SESSION_OPEN_TENANT,
    S_SESSION_OPEN_ALL,
    S__COUNT
};

#define USAGE_COLS "tenant_id, session_id, lang, kind, started_at, duration, exit_code, timed_out, output_bytes"
#define SESSION_COLS "id, tenant_id, lang, created_at, closed_at, close_reason, executions"

/* NULL where the SQL is made from tenant_fields at open. */
static const char *const fixed_sql[S__COUNT] = {
    [S_TOKEN_INSERT] = "INSERT INTO tokens (public_id, hash, tenant_id, label, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
    [S_TOKEN_HASH] = "SELECT hash FROM tokens WHERE public_id = ?1",
    [S_TOKEN_REVOKE] = "UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?2) WHERE public_id = ?1",
    [S_TOKEN_LIST] = "SELECT id, tenant_id, public_id, label, created_at, revoked_at FROM tokens"
                     " WHERE tenant_id = ?1 ORDER BY id",
    [S_USAGE_INSERT] = "INSERT INTO usage (" USAGE_COLS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    [S_USAGE_TOTAL] = "SELECT COUNT(*), TOTAL(duration), COALESCE(SUM(output_bytes), 0), COALESCE(SUM(timed_out), 0)"
                      " FROM usage WHERE tenant_id = ?1 AND started_at >= ?2 AND started_at < ?3",
    [S_USAGE_LIST_TENANT] = "SELECT " USAGE_COLS " FROM usage WHERE tenant_id = ?1 AND started_at >= ?2"
                            " AND started_at < ?3 ORDER BY started_at, id LIMIT ?4",
    [S_USAGE_LIST_ALL] = "SELECT " USAGE_COLS " FROM usage WHERE started_at >= ?2 AND started_at < ?3"
                         " ORDER BY started_at, id LIMIT ?4",
    [S_SESSION_INSERT] = "INSERT INTO sessions (id, tenant_id, lang, created_at, executions) VALUES (?1, ?2, ?3, ?4, ?5)",
    [S_SESSION_CLOSE] = "UPDATE sessions SET closed_at = ?2, close_reason = ?3 WHERE id = ?1 AND closed_at IS NULL",
    [S_SESSION_COUNT_EXEC] = "UPDATE sessions SET executions = executions + 1 WHERE id = ?1",
    [S_SESSION_GET] = "SELECT " SESSION_COLS " FROM sessions WHERE id = ?1",
    [S_SESSION_OPEN_TENANT] = "SELECT " SESSION_COLS " FROM sessions WHERE tenant_id = ?1 AND closed_at IS NULL"
                              " ORDER BY created_at, id",
    [S_SESSION_OPEN_ALL] = "SELECT " SESSION_COLS " FROM sessions WHERE closed_at IS NULL ORDER BY created_at, id",
};

struct sg_store {
    sqlite3 *db;
    char *path;
    int busy; /* the last setup step failed on a lock */
    sqlite3_stmt *stmt[S__COUNT];
};

/* "p.id, p.name, p.created_at, p.disabled, ..." for prefix "p." */
static void tenant_cols(char *buf, size_t len, const char *prefix)
{
    size_t off = (size_t)snprintf(buf, len, "%sid, %sname, %screated_at", prefix, prefix, prefix);
    for (size_t i = 0; i < N_TENANT_FIELDS && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, ", %s%s", prefix, tenant_fields[i].name);
}

static int prepare_all(sg_store_t *st, char *err, size_t errlen)
{
    char cols[1024], sql[S__COUNT][2048];
    const char *text[S__COUNT];
    size_t off;

    memcpy(text, fixed_sql, sizeof(text));
    tenant_cols(cols, sizeof(cols), "");
    snprintf(sql[S_TENANT_GET], sizeof(sql[0]), "SELECT %s FROM tenants WHERE id = ?1", cols);
    snprintf(sql[S_TENANT_BY_NAME], sizeof(sql[0]), "SELECT %s FROM tenants WHERE name = ?1", cols);
    snprintf(sql[S_TENANT_LIST], sizeof(sql[0]), "SELECT %s FROM tenants ORDER BY id", cols);
    tenant_cols(cols, sizeof(cols), "n.");
    snprintf(sql[S_TOKEN_AUTH], sizeof(sql[0]),
             "SELECT k.hash, k.revoked_at, %s FROM tokens k JOIN tenants n ON n.id = k.tenant_id"
             " WHERE k.public_id = ?1",
             cols);
    /* INSERT (name, created_at, fields...) VALUES (?1, ?2, ?3...) */
    off = (size_t)snprintf(sql[S_TENANT_INSERT], sizeof(sql[0]), "INSERT INTO tenants (name, created_at");
    for (size_t i = 0; i < N_TENANT_FIELDS; i++)
        off += (size_t)snprintf(sql[S_TENANT_INSERT] + off, sizeof(sql[0]) - off, ", %s", tenant_fields[i].name);
    off += (size_t)snprintf(sql[S_TENANT_INSERT] + off, sizeof(sql[0]) - off, ") VALUES (?1, ?2");
    for (size_t i = 0; i < N_TENANT_FIELDS; i++)
        off += (size_t)snprintf(sql[S_TENANT_INSERT] + off, sizeof(sql[0]) - off, ", ?%zu", i + 3);
    snprintf(sql[S_TENANT_INSERT] + off, sizeof(sql[0]) - off, ")");
    /* UPDATE SET field = ?(i + 3) ... WHERE id = ?1 (same numbering as the insert) */
    off = (size_t)snprintf(sql[S_TENANT_UPDATE], sizeof(sql[0]), "UPDATE tenants SET");
    for (size_t i = 0; i < N_TENANT_FIELDS; i++)
        off += (size_t)snprintf(sql[S_TENANT_UPDATE] + off, sizeof(sql[0]) - off, "%s %s = ?%zu", i ? "," : "",
                                tenant_fields[i].name, i + 3);
    snprintf(sql[S_TENANT_UPDATE] + off, sizeof(sql[0]) - off, " WHERE id = ?1");
    text[S_TENANT_GET] = sql[S_TENANT_GET];
    text[S_TENANT_BY_NAME] = sql[S_TENANT_BY_NAME];
    text[S_TENANT_LIST] = sql[S_TENANT_LIST];
    text[S_TOKEN_AUTH] = sql[S_TOKEN_AUTH];
    text[S_TENANT_INSERT] = sql[S_TENANT_INSERT];
    text[S_TENANT_UPDATE] = sql[S_TENANT_UPDATE];

    for (int i = 0; i < S__COUNT; i++) {
        if (sqlite3_prepare_v3(st->db, text[i], -1, SQLITE_PREPARE_PERSISTENT, &st->stmt[i], NULL) != SQLITE_OK) {
            set_err(err, errlen, "%s: preparing statement %d: %s", st->path, i, sqlite3_errmsg(st->db));
            return -1;
        }
    }
    return 0;
}

/* Resets a cached statement for its next use. */
static void done(sqlite3_stmt *s)
{
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
}

static int db_err(sg_store_t *st, const char *what, char *err, size_t errlen)
{
    set_err(err, errlen, "%s: %s", what, sqlite3_errmsg(st->db));
    return -1;
}

/* SQLite returns BUSY without waiting where waiting could deadlock: two
 * connections that both read the new file and then both want to change it
 * (the switch to WAL, the first schema). The open retries those. */
static int is_busy(int rc)
{
    rc &= 0xff;
    return rc == SQLITE_BUSY || rc == SQLITE_LOCKED;
}

static int exec_sql(sg_store_t *st, const char *sql, char *err, size_t errlen)
{
    char *msg = NULL;
    int rc = sqlite3_exec(st->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        st->busy = is_busy(rc);
        set_err(err, errlen, "%s: %s: %s", st->path, sql, msg != NULL ? msg : sqlite3_errmsg(st->db));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

/* The first column of the one row that sql returns, as text, into out. */
static int query_text(sg_store_t *st, const char *sql, char *out, size_t len, char *err, size_t errlen)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);

    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        st->busy = is_busy(rc);
        set_err(err, errlen, "%s: %s: %s", st->path, sql, sqlite3_errmsg(st->db));
        sqlite3_finalize(s);
        return -1;
    }
    snprintf(out, len, "%s", sqlite3_column_text(s, 0) != NULL ? (const char *)sqlite3_column_text(s, 0) : "");
    sqlite3_finalize(s);
    return 0;
}

static int set_wal(sg_store_t *st, char *err, size_t errlen)
{
    char mode[32];

    if (query_text(st, "PRAGMA journal_mode=WAL", mode, sizeof(mode), err, errlen) != 0)
        return -1;
    if (strcasecmp(mode, "wal") != 0) {
        set_err(err, errlen, "%s: cannot use WAL mode (journal_mode is %s)", st->path, mode);
        return -1;
    }
    return 0;
}

static int migrate(sg_store_t *st, char *err, size_t errlen)
{
    int version;
    char sql[64], v[32];

    if (exec_sql(st, "BEGIN IMMEDIATE", err, errlen) != 0)
        return -1;
    if (query_text(st, "PRAGMA user_version", v, sizeof(v), err, errlen) != 0)
        goto Error;
    version = atoi(v);
    if (version > SCHEMA_VERSION) {
        set_err(err, errlen, "%s: schema version %d is newer than this program's (%d)", st->path, version,
                SCHEMA_VERSION);
        goto Error;
    }
    for (; version < SCHEMA_VERSION; version++) {
        if (exec_sql(st, migrations[version], err, errlen) != 0)
            goto Error;
    }
    snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", SCHEMA_VERSION);
    if (exec_sql(st, sql, err, errlen) != 0 || exec_sql(st, "COMMIT", err, errlen) != 0)
        goto Error;
    return 0;
Error:
    sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    return -1;
}

/* WAL, pragmas, schema: each step may be repeated. */
static int setup(sg_store_t *st, char *err, size_t errlen)
{
    st->busy = 0;
    if (set_wal(st, err, errlen) != 0 ||
        exec_sql(st, "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON", err, errlen) != 0 ||
        migrate(st, err, errlen) != 0)
        return -1;
    return 0;
}

/* mkdir -p; the directories it makes are 0700. */
static int mkdir_p(const char *dir, char *err, size_t errlen)
{
    char path[4096];
    size_t n = strlen(dir);
    struct stat sb;

    if (n == 0 || n >= sizeof(path)) {
        set_err(err, errlen, "data directory \"%s\": bad path", dir);
        return -1;
    }
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        path[i] = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            set_err(err, errlen, "data directory %s: %s", path, strerror(errno));
            return -1;
        }
        if (i < n)
            path[i] = '/';
    }
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        set_err(err, errlen, "data directory %s: not a directory", dir);
        return -1;
    }
    return 0;
}

sg_store_t *sg_store_open(const char *data_dir, char *err, size_t errlen)
{
    sg_store_t *st;
    uint64_t deadline;
    size_t n;
    int fd;

    if (data_dir == NULL || data_dir[0] == '\0') {
        set_err(err, errlen, "no data directory");
        return NULL;
    }
    if (mkdir_p(data_dir, err, errlen) != 0)
        return NULL;
    if ((st = calloc(1, sizeof(*st))) == NULL)
        goto NoMem;
    n = strlen(data_dir) + sizeof("/" SG_STORE_FILE);
    if ((st->path = malloc(n)) == NULL)
        goto NoMem;
    snprintf(st->path, n, "%s/" SG_STORE_FILE, data_dir);

    /* Create the file ourselves so that it is 0600 whatever the umask (SQLite
     * gives the -wal and -shm files the database file's mode) — but only when
     * it does not exist: closing any descriptor of a file drops every POSIX
     * lock this process holds on it, the locks of SQLite connections that
     * other threads have open included. The gateway opens its store once
     * before its DB threads start, so the file exists by then. */
    fd = open(st->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
        close(fd);
    } else if (errno != EEXIST) {
        set_err(err, errlen, "%s: %s", st->path, strerror(errno));
        goto Error;
    }
    if (sqlite3_open_v2(st->path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        set_err(err, errlen, "%s: %s", st->path, st->db != NULL ? sqlite3_errmsg(st->db) : "out of memory");
        goto Error;
    }
    sqlite3_extended_result_codes(st->db, 1);
    sqlite3_busy_timeout(st->db, SG_BUSY_TIMEOUT_MS);
    deadline = sg_now_ms() + SG_BUSY_TIMEOUT_MS;
    while (setup(st, err, errlen) != 0) {
        unsigned char r;
        if (!st->busy || sg_now_ms() >= deadline)
            goto Error;
        sg_random_bytes(&r, 1);
        usleep(2000 + (useconds_t)r * 80); /* 2..22 ms, so that the openers spread out */
    }
    if (prepare_all(st, err, errlen) != 0)
        goto Error;
    return st;

NoMem:
    set_err(err, errlen, "out of memory");
Error:
    sg_store_close(st);
    return NULL;
}

void sg_store_close(sg_store_t *st)
{
    if (st == NULL)
        return;
    for (int i = 0; i < S__COUNT; i++)
        sqlite3_finalize(st->stmt[i]);
    sqlite3_close_v2(st->db);
    free(st->path);
    free(st);
}

const char *sg_store_path(const sg_store_t *st)
{
    return st->path;
}

struct sqlite3 *sg_store_db(sg_store_t *st)
{
    return st->db;
}

/* ---- row helpers ---- */

static void col_text(sqlite3_stmt *s, int col, char *buf, size_t size)
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
static void bind_text_or_null(sqlite3_stmt *s, int idx, const char *v)
{
    if (v == NULL || v[0] == '\0')
        sqlite3_bind_null(s, idx);
    else
        sqlite3_bind_text(s, idx, v, -1, SQLITE_STATIC);
}

/* Reads the columns tenant_cols() lists, starting at col. */
static void read_tenant(sqlite3_stmt *s, int col, sg_tenant_t *t)
{
    memset(t, 0, sizeof(*t));
    t->id = sqlite3_column_int64(s, col);
    col_text(s, col + 1, t->name, sizeof(t->name));
    t->created_at = sqlite3_column_int64(s, col + 2);
    col += 3;
    for (size_t i = 0; i < N_TENANT_FIELDS; i++, col++) {
        const tenant_field_t *f = &tenant_fields[i];
        char *p = (char *)t + f->off;
        switch (f->type) {
        case F_LONG:
            *(long *)p = (long)sqlite3_column_int64(s, col);
            break;
        case F_DOUBLE:
            *(double *)p = sqlite3_column_double(s, col);
            break;
        case F_BOOL:
            *(int *)p = sqlite3_column_int(s, col) != 0;
            break;
        case F_LANGS:
            col_text(s, col, p, SG_LANGS_MAX);
            break;
        }
    }
}

/* Binds every tenant field as ?3, ?4, ... */
static void bind_tenant_fields(sqlite3_stmt *s, const sg_tenant_t *t)
{
    for (size_t i = 0; i < N_TENANT_FIELDS; i++) {
        const tenant_field_t *f = &tenant_fields[i];
        const char *p = (const char *)t + f->off;
        int idx = (int)i + 3;
        switch (f->type) {
        case F_LONG:
            sqlite3_bind_int64(s, idx, *(const long *)p);
            break;
        case F_DOUBLE:
            sqlite3_bind_double(s, idx, *(const double *)p);
            break;
        case F_BOOL:
            sqlite3_bind_int(s, idx, *(const int *)p);
            break;
        case F_LANGS:
            sqlite3_bind_text(s, idx, p, -1, SQLITE_STATIC);
            break;
        }
    }
}

/* Runs a one-row lookup whose result starts with the tenant columns. */
static int tenant_lookup(sg_store_t *st, sqlite3_stmt *s, sg_tenant_t *out, char *err, size_t errlen)
{
    int rc = sqlite3_step(s), ret;
    if (rc == SQLITE_ROW) {
        if (out != NULL)
            read_tenant(s, 0, out);
        ret = 1;
    } else if (rc == SQLITE_DONE) {
        ret = 0;
    } else {
        ret = db_err(st, "tenant lookup", err, errlen);
    }
    done(s);
    return ret;
}

/* ---- tenants ---- */

int sg_store_tenant_create(sg_store_t *st, const char *name, sg_tenant_t *out, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_TENANT_INSERT];
    sg_tenant_t t;
    int rc;

    if (!sg_tenant_name_valid(name)) {
        set_err(err, errlen, "tenant name must be 1 to %d characters of A-Z a-z 0-9 . _ -", SG_TENANT_NAME_MAX);
        return -1;
    }
    sg_tenant_defaults(&t);
    snprintf(t.name, sizeof(t.name), "%s", name);
    t.created_at = sg_wall_s();
    sqlite3_bind_text(s, 1, t.name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, t.created_at);
    bind_tenant_fields(s, &t);
    rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) {
        if (rc == SQLITE_CONSTRAINT_UNIQUE)
            set_err(err, errlen, "tenant \"%s\" already exists", name);
        else
            db_err(st, "tenant create", err, errlen);
        done(s);
        return -1;
    }
    t.id = sqlite3_last_insert_rowid(st->db);
    done(s);
    if (out != NULL)
        *out = t;
    return 0;
}

int sg_store_tenant_get(sg_store_t *st, int64_t id, sg_tenant_t *out, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_TENANT_GET];
    sqlite3_bind_int64(s, 1, id);
    return tenant_lookup(st, s, out, err, errlen);
}

int sg_store_tenant_by_name(sg_store_t *st, const char *name, sg_tenant_t *out, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_TENANT_BY_NAME];
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    return tenant_lookup(st, s, out, err, errlen);
}

int sg_store_tenant_update(sg_store_t *st, const sg_tenant_t *t, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_TENANT_UPDATE];
    int rc;

    if (sg_tenant_validate(t, err, errlen) != 0)
        return -1;
    sqlite3_bind_int64(s, 1, t->id);
    bind_tenant_fields(s, t);
    rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) {
        db_err(st, "tenant update", err, errlen);
        done(s);
        return -1;
    }
    done(s);
    if (sqlite3_changes(st->db) == 0) {
        set_err(err, errlen, "no tenant with id %lld", (long long)t->id);
        return -1;
    }
    return 0;
}

int sg_store_tenant_list(sg_store_t *st, void (*fn)(const sg_tenant_t *t, void *data), void *data, char *err,
                         size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_TENANT_LIST];
    sg_tenant_t t;
    int rc;

    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        read_tenant(s, 0, &t);
        fn(&t, data);
    }
    if (rc != SQLITE_DONE) {
        db_err(st, "tenant list", err, errlen);
        done(s);
        return -1;
    }
    done(s);
    return 0;
}

/* ---- tokens ---- */

static int label_valid(const char *label)
{
    size_t n = strlen(label);
    if (n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)label[i] < 0x20 || (unsigned char)label[i] > 0x7e)
            return 0;
    }
    return 1;
}

int sg_store_token_create(sg_store_t *st, int64_t tenant_id, const char *label, char *token_out, sg_token_t *out,
                          char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_TOKEN_INSERT];
    char token[SG_TOKEN_LEN + 1], pub[SG_TOKEN_PUBLIC_LEN + 1];
    unsigned char hash[SG_TOKEN_HASH_LEN];
    int64_t now = sg_wall_s();
    int rc, found;

    if (label == NULL)
        label = "";
    if (!label_valid(label)) {
        set_err(err, errlen, "label must be at most 64 printable ASCII characters");
        return -1;
    }
    found = sg_store_tenant_get(st, tenant_id, NULL, err, errlen);
    if (found <= 0) {
        if (found == 0)
            set_err(err, errlen, "no tenant with id %lld", (long long)tenant_id);
        return -1;
    }
    /* a public id already taken (one chance in 36^8 per token) is drawn again */
    for (int attempt = 0;; attempt++) {
        if (sg_token_generate(token, pub) != 0 || sg_token_hash(token, SG_TOKEN_LEN, hash) != 0) {
            set_err(err, errlen, "cannot generate a token: %s", strerror(errno));
            return -1;
        }
        sqlite3_bind_text(s, 1, pub, -1, SQLITE_STATIC);
        sqlite3_bind_blob(s, 2, hash, sizeof(hash), SQLITE_STATIC);
        sqlite3_bind_int64(s, 3, tenant_id);
        sqlite3_bind_text(s, 4, label, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 5, now);
        rc = sqlite3_step(s);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_CONSTRAINT_UNIQUE || attempt == 4) {
            db_err(st, "token create", err, errlen);
            done(s);
            return -1;
        }
        done(s);
    }
    if (out != NULL) {
        memset(out, 0, sizeof(*out));
        out->id = sqlite3_last_insert_rowid(st->db);
        out->tenant_id = tenant_id;
        memcpy(out->public_id, pub, sizeof(out->public_id));
        snprintf(out->label, sizeof(out->label), "%s", label);
        out->created_at = now;
    }
    done(s);
    memcpy(token_out, token, sizeof(token));
    OPENSSL_cleanse(token, sizeof(token));
    return 0;
}

int sg_store_token_auth(sg_store_t *st, const char *token, size_t len, sg_tenant_t *tenant, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_TOKEN_AUTH];
    char pub[SG_TOKEN_PUBLIC_LEN + 1];
    unsigned char hash[SG_TOKEN_HASH_LEN];
    int rc, ret = 0;

    if (sg_token_parse(token, len, pub) != 0)
        return 0;
    if (sg_token_hash(token, len, hash) != 0) {
        set_err(err, errlen, "cannot hash the token");
        return -1;
    }
    sqlite3_bind_text(s, 1, pub, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        const void *stored = sqlite3_column_blob(s, 0);
        int stored_len = sqlite3_column_bytes(s, 0);
        int revoked = sqlite3_column_type(s, 1) != SQLITE_NULL;
        if (stored != NULL && stored_len == SG_TOKEN_HASH_LEN && sg_token_hash_equal(stored, hash) && !revoked) {
            sg_tenant_t t;
            read_tenant(s, 2, &t);
            if (!t.disabled) {
                if (tenant != NULL)
                    *tenant = t;
                ret = 1;
            }
        }
    } else if (rc != SQLITE_DONE) {
        ret = db_err(st, "token auth", err, errlen);
    }
    done(s);
    return ret;
}

int sg_store_token_revoke(sg_store_t *st, const char *public_id, char *err, size_t errlen)
{
    char pub[SG_TOKEN_PUBLIC_LEN + 1];
    size_t len = public_id != NULL ? strlen(public_id) : 0;
    sqlite3_stmt *s;
    int rc;

    if (sg_token_is_public_id(public_id, len)) {
        memcpy(pub, public_id, sizeof(pub));
    } else if (sg_token_parse(public_id, len, pub) == 0) {
        /* a whole token names its row only if its secret matches */
        unsigned char hash[SG_TOKEN_HASH_LEN];
        int match = 0;
        if (sg_token_hash(public_id, len, hash) != 0) {
            set_err(err, errlen, "cannot hash the token");
            return -1;
        }
        s = st->stmt[S_TOKEN_HASH];
        sqlite3_bind_text(s, 1, pub, -1, SQLITE_STATIC);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
            match = sqlite3_column_bytes(s, 0) == SG_TOKEN_HASH_LEN && sqlite3_column_blob(s, 0) != NULL &&
                    sg_token_hash_equal(sqlite3_column_blob(s, 0), hash);
        } else if (rc != SQLITE_DONE) {
            db_err(st, "token revoke", err, errlen);
            done(s);
            return -1;
        }
        done(s);
        if (!match)
            return 0;
    } else {
        return 0;
    }
    s = st->stmt[S_TOKEN_REVOKE];
    sqlite3_bind_text(s, 1, pub, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, sg_wall_s());
    rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) {
        db_err(st, "token revoke", err, errlen);
        done(s);
        return -1;
    }
    done(s);
    return sqlite3_changes(st->db) > 0 ? 1 : 0;
}

int sg_store_token_list(sg_store_t *st, int64_t tenant_id, void (*fn)(const sg_token_t *t, void *data), void *data,
                        char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_TOKEN_LIST];
    sg_token_t t;
    int rc;

    sqlite3_bind_int64(s, 1, tenant_id);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        memset(&t, 0, sizeof(t));
        t.id = sqlite3_column_int64(s, 0);
        t.tenant_id = sqlite3_column_int64(s, 1);
        col_text(s, 2, t.public_id, sizeof(t.public_id));
        col_text(s, 3, t.label, sizeof(t.label));
        t.created_at = sqlite3_column_int64(s, 4);
        t.revoked_at = sqlite3_column_int64(s, 5);
        fn(&t, data);
    }
    if (rc != SQLITE_DONE) {
        db_err(st, "token list", err, errlen);
        done(s);
        return -1;
    }
    done(s);
    return 0;
}

/* ---- usage ---- */

int sg_store_usage_add(sg_store_t *st, const sg_usage_t *u, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_USAGE_INSERT];
    int rc;

    sqlite3_bind_int64(s, 1, u->tenant_id);
    bind_text_or_null(s, 2, u->session_id);
    sqlite3_bind_text(s, 3, u->lang, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, u->kind, -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 5, u->started_at);
    sqlite3_bind_double(s, 6, u->duration);
    sqlite3_bind_int(s, 7, u->exit_code);
    sqlite3_bind_int(s, 8, u->timed_out != 0);
    sqlite3_bind_int64(s, 9, u->output_bytes);
    rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) {
        if (rc == SQLITE_CONSTRAINT_FOREIGNKEY)
            set_err(err, errlen, "usage add: no tenant with id %lld", (long long)u->tenant_id);
        else
            db_err(st, "usage add", err, errlen);
        done(s);
        return -1;
    }
    done(s);
    return 0;
}

int sg_store_usage_total(sg_store_t *st, int64_t tenant_id, double from, double to, sg_usage_total_t *out, char *err,
                         size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_USAGE_TOTAL];
    int rc;

    memset(out, 0, sizeof(*out));
    sqlite3_bind_int64(s, 1, tenant_id);
    sqlite3_bind_double(s, 2, from);
    sqlite3_bind_double(s, 3, to);
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        db_err(st, "usage total", err, errlen);
        done(s);
        return -1;
    }
    out->executions = sqlite3_column_int64(s, 0);
    out->seconds = sqlite3_column_double(s, 1);
    out->output_bytes = sqlite3_column_int64(s, 2);
    out->timed_out = sqlite3_column_int64(s, 3);
    done(s);
    return 0;
}

int sg_store_usage_list(sg_store_t *st, int64_t tenant_id, double from, double to, int limit,
                        void (*fn)(const sg_usage_t *u, void *data), void *data, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[tenant_id != 0 ? S_USAGE_LIST_TENANT : S_USAGE_LIST_ALL];
    sg_usage_t u;
    int rc;

    if (tenant_id != 0)
        sqlite3_bind_int64(s, 1, tenant_id);
    sqlite3_bind_double(s, 2, from);
    sqlite3_bind_double(s, 3, to);
    sqlite3_bind_int(s, 4, limit > 0 ? limit : -1);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        memset(&u, 0, sizeof(u));
        u.tenant_id = sqlite3_column_int64(s, 0);
        col_text(s, 1, u.session_id, sizeof(u.session_id));
        col_text(s, 2, u.lang, sizeof(u.lang));
        col_text(s, 3, u.kind, sizeof(u.kind));
        u.started_at = sqlite3_column_double(s, 4);
        u.duration = sqlite3_column_double(s, 5);
        u.exit_code = sqlite3_column_int(s, 6);
        u.timed_out = sqlite3_column_int(s, 7);
        u.output_bytes = sqlite3_column_int64(s, 8);
        fn(&u, data);
    }
    if (rc != SQLITE_DONE) {
        db_err(st, "usage list", err, errlen);
        done(s);
        return -1;
    }
    done(s);
    return 0;
}

/* ---- sessions ---- */

static void read_session(sqlite3_stmt *s, sg_session_rec_t *r)
{
    memset(r, 0, sizeof(*r));
    col_text(s, 0, r->id, sizeof(r->id));
    r->tenant_id = sqlite3_column_int64(s, 1);
    col_text(s, 2, r->lang, sizeof(r->lang));
    r->created_at = sqlite3_column_int64(s, 3);
    r->closed_at = sqlite3_column_int64(s, 4);
    col_text(s, 5, r->close_reason, sizeof(r->close_reason));
    r->executions = sqlite3_column_int64(s, 6);
}

int sg_store_session_open(sg_store_t *st, const sg_session_rec_t *r, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_SESSION_INSERT];
    int rc;

    if (r->id[0] == '\0') {
        set_err(err, errlen, "session open: empty session id");
        return -1;
    }
    sqlite3_bind_text(s, 1, r->id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, r->tenant_id);
    sqlite3_bind_text(s, 3, r->lang, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 4, r->created_at != 0 ? r->created_at : sg_wall_s());
    sqlite3_bind_int64(s, 5, r->executions);
    rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) {
        if (rc == SQLITE_CONSTRAINT_PRIMARYKEY || rc == SQLITE_CONSTRAINT_UNIQUE)
            set_err(err, errlen, "session open: session %s already recorded", r->id);
        else if (rc == SQLITE_CONSTRAINT_FOREIGNKEY)
            set_err(err, errlen, "session open: no tenant with id %lld", (long long)r->tenant_id);
        else
            db_err(st, "session open", err, errlen);
        done(s);
        return -1;
    }
    done(s);
    return 0;
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
    if (rc != SQLITE_DONE)
        db_err(st, "session close", err, errlen);
    done(s);
    return rc == SQLITE_DONE ? 0 : -1;
}

int sg_store_session_count_exec(sg_store_t *st, const char *id, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_SESSION_COUNT_EXEC];
    int rc;

    sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc != SQLITE_DONE)
        db_err(st, "session count", err, errlen);
    done(s);
    return rc == SQLITE_DONE ? 0 : -1;
}

int sg_store_session_get(sg_store_t *st, const char *id, sg_session_rec_t *out, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_SESSION_GET];
    int rc, ret;

    sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        if (out != NULL)
            read_session(s, out);
        ret = 1;
    } else if (rc == SQLITE_DONE) {
        ret = 0;
    } else {
        ret = db_err(st, "session get", err, errlen);
    }
    done(s);
    return ret;
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
    if (rc != SQLITE_DONE) {
        db_err(st, "session list", err, errlen);
        done(s);
        return -1;
    }
    done(s);
    return 0;
}
