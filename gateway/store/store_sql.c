/*
 * store_sql.c — the store's connection (store.h): open, its hooks (the
 * generations' signal, the checkpoints), schema, the
 * prepared statements, and the row helpers its SQL files share
 * (store_sql.h); the tables' calls are in store_tenants.c, store_ledger.c
 * and store_templates.c.
 *
 * One sg_store_t is one connection with every statement prepared once at
 * open and reset after each use. The schema is versioned by PRAGMA
 * user_version: migrations[i] takes a database from version i to i + 1 and
 * runs in one IMMEDIATE transaction, so two processes opening a new file at
 * once do not both create it. Nullable columns (revoked_at, closed_at,
 * close_reason, session_id, runtime) are NULL in SQL where the structs say 0
 * or "".
 */
#include "store_sql.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define SG_STORE_FILE "sandgate.db"
#define SG_BUSY_TIMEOUT_MS 5000

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
    /* 2 -> 3: the runtime a tenant's sandboxes run on (NULL: the proxy's
     * default), and the one each session got */
    "ALTER TABLE tenants ADD COLUMN runtime TEXT; ALTER TABLE sessions ADD COLUMN runtime TEXT;",
    /* 3 -> 4: generations (store_gen.c), moved by every writer of what the
     * gateways cache: a token or tenant changed (auth), a session closed or
     * gone (sessions) */
    "CREATE TABLE IF NOT EXISTS generations (id INTEGER PRIMARY KEY CHECK (id = 1), auth INTEGER NOT NULL,"
    " sessions INTEGER NOT NULL);"
    "INSERT OR IGNORE INTO generations VALUES (1, 0, 0);"
    "CREATE TRIGGER IF NOT EXISTS gen_token_update AFTER UPDATE ON tokens BEGIN UPDATE generations SET auth = auth + "
    "1; END;"
    "CREATE TRIGGER IF NOT EXISTS gen_token_delete AFTER DELETE ON tokens BEGIN UPDATE generations SET auth = auth + "
    "1; END;"
    "CREATE TRIGGER IF NOT EXISTS gen_tenant_update AFTER UPDATE ON tenants BEGIN UPDATE generations SET auth = auth + "
    "1; END;"
    "CREATE TRIGGER IF NOT EXISTS gen_tenant_delete AFTER DELETE ON tenants BEGIN UPDATE generations SET auth = auth + "
    "1; END;"
    "CREATE TRIGGER IF NOT EXISTS gen_session_close AFTER UPDATE OF closed_at ON sessions"
    " BEGIN UPDATE generations SET sessions = sessions + 1; END;"
    "CREATE TRIGGER IF NOT EXISTS gen_session_delete AFTER DELETE ON sessions"
    " BEGIN UPDATE generations SET sessions = sessions + 1; END;",
    /* 4 -> 5: the proxy each session was placed on (its URL as configured,
     * normalised; NULL: before placement, the first configured) */
    "ALTER TABLE sessions ADD COLUMN proxy TEXT;",
    /* 5 -> 6: how far each file of the usage journal is in the ledger
     * (store_journal.c); a row outlives its file */
    "CREATE TABLE usage_journal (name TEXT PRIMARY KEY, imported INTEGER NOT NULL) WITHOUT ROWID;",
};
#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

/* ---- statements ---- */

#define USAGE_COLS "tenant_id, session_id, lang, kind, started_at, duration, exit_code, timed_out, output_bytes"
#define SESSION_COLS "id, tenant_id, lang, created_at, closed_at, close_reason, executions, runtime, proxy"

/* NULL where the SQL is made from sg_tenant_fields at open. */
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
    [S_USAGE_RECENT] = "SELECT " USAGE_COLS " FROM usage ORDER BY started_at DESC, id DESC LIMIT ?1",
    /* a day's rows by the time index; the rows added after a given id by the
     * rowid alone (NOT INDEXED: else the planner walks a whole index for the
     * GROUP BY) */
    [S_USAGE_TOTALS_BY_TENANT] = "SELECT tenant_id, COUNT(*), TOTAL(duration), MAX(id) FROM usage"
                                 " WHERE started_at >= ?1 AND started_at < ?2 GROUP BY tenant_id ORDER BY tenant_id",
    [S_USAGE_TOTALS_SINCE] = "SELECT tenant_id, COUNT(*), TOTAL(duration), MAX(id) FROM usage NOT INDEXED"
                             " WHERE id > ?3 AND started_at >= ?1 AND started_at < ?2 GROUP BY tenant_id"
                             " ORDER BY tenant_id",
    [S_SESSION_INSERT] = "INSERT INTO sessions (id, tenant_id, lang, created_at, executions, runtime, proxy) VALUES "
                         "(?1, ?2, ?3, ?4, ?5, ?6, "
                         "?7)",
    [S_SESSION_CLOSE] = "UPDATE sessions SET closed_at = ?2, close_reason = ?3 WHERE id = ?1 AND closed_at IS NULL",
    [S_SESSION_COUNT_EXEC] = "UPDATE sessions SET executions = executions + ?2 WHERE id = ?1",
    [S_SESSION_GET] = "SELECT " SESSION_COLS " FROM sessions WHERE id = ?1",
    [S_SESSION_OPEN_TENANT] = "SELECT " SESSION_COLS " FROM sessions WHERE tenant_id = ?1 AND closed_at IS NULL"
                              " ORDER BY created_at, id",
    [S_SESSION_OPEN_ALL] = "SELECT " SESSION_COLS " FROM sessions WHERE closed_at IS NULL ORDER BY created_at, id",
    [S_GENERATIONS] = "SELECT auth, sessions FROM generations WHERE id = 1",
    [S_JOURNAL_GET] = "SELECT imported FROM usage_journal WHERE name = ?1",
    [S_JOURNAL_SET] = "INSERT INTO usage_journal (name, imported) VALUES (?1, ?2)"
                      " ON CONFLICT(name) DO UPDATE SET imported = excluded.imported",
    [S_BEGIN] = "BEGIN IMMEDIATE",
    [S_COMMIT] = "COMMIT",
    [S_ROLLBACK] = "ROLLBACK",
};

/* "p.id, p.name, p.created_at, p.disabled, ..." for prefix "p." */
static void tenant_cols(char *buf, size_t len, const char *prefix)
{
    size_t off = (size_t)snprintf(buf, len, "%sid, %sname, %screated_at", prefix, prefix, prefix);
    for (size_t i = 0; i < sg_tenant_nfields && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, ", %s%s", prefix, sg_tenant_fields[i].name);
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
    for (size_t i = 0; i < sg_tenant_nfields; i++)
        off += (size_t)snprintf(sql[S_TENANT_INSERT] + off, sizeof(sql[0]) - off, ", %s", sg_tenant_fields[i].name);
    off += (size_t)snprintf(sql[S_TENANT_INSERT] + off, sizeof(sql[0]) - off, ") VALUES (?1, ?2");
    for (size_t i = 0; i < sg_tenant_nfields; i++)
        off += (size_t)snprintf(sql[S_TENANT_INSERT] + off, sizeof(sql[0]) - off, ", ?%zu", i + 3);
    snprintf(sql[S_TENANT_INSERT] + off, sizeof(sql[0]) - off, ")");
    /* UPDATE SET field = ?(i + 3) ... WHERE id = ?1 (same numbering as the insert) */
    off = (size_t)snprintf(sql[S_TENANT_UPDATE], sizeof(sql[0]), "UPDATE tenants SET");
    for (size_t i = 0; i < sg_tenant_nfields; i++)
        off += (size_t)snprintf(sql[S_TENANT_UPDATE] + off, sizeof(sql[0]) - off, "%s %s = ?%zu", i ? "," : "",
                                sg_tenant_fields[i].name, i + 3);
    snprintf(sql[S_TENANT_UPDATE] + off, sizeof(sql[0]) - off, " WHERE id = ?1");
    text[S_TENANT_GET] = sql[S_TENANT_GET];
    text[S_TENANT_BY_NAME] = sql[S_TENANT_BY_NAME];
    text[S_TENANT_LIST] = sql[S_TENANT_LIST];
    text[S_TOKEN_AUTH] = sql[S_TOKEN_AUTH];
    text[S_TENANT_INSERT] = sql[S_TENANT_INSERT];
    text[S_TENANT_UPDATE] = sql[S_TENANT_UPDATE];

    for (int i = 0; i < S__COUNT; i++) {
        if (sqlite3_prepare_v3(st->db, text[i], -1, SQLITE_PREPARE_PERSISTENT, &st->stmt[i], NULL) != SQLITE_OK) {
            sg_store__errf(err, errlen, "%s: preparing statement %d: %s", st->path, i, sqlite3_errmsg(st->db));
            return -1;
        }
    }
    return 0;
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
        sg_store__errf(err, errlen, "%s: %s: %s", st->path, sql, msg != NULL ? msg : sqlite3_errmsg(st->db));
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
        sg_store__errf(err, errlen, "%s: %s: %s", st->path, sql, sqlite3_errmsg(st->db));
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
        sg_store__errf(err, errlen, "%s: cannot use WAL mode (journal_mode is %s)", st->path, mode);
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
        sg_store__errf(err, errlen, "%s: schema version %d is newer than this program's (%d)", st->path, version,
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
        sg_store__errf(err, errlen, "data directory \"%s\": bad path", dir);
        return -1;
    }
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        path[i] = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            sg_store__errf(err, errlen, "data directory %s: %s", path, strerror(errno));
            return -1;
        }
        if (i < n)
            path[i] = '/';
    }
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        sg_store__errf(err, errlen, "data directory %s: not a directory", dir);
        return -1;
    }
    return 0;
}

/* ---- the connection's hooks ----
 *
 * The generations' signal (store.h, store_gen.c): the file <path>-gen
 * mapped, one counter moved after each commit that moved the generations.
 * The connection learns that a transaction moved their row from SQLite's
 * update hook (it sees the triggers' writes too), and that the
 * transaction is in from the WAL hook, which SQLite calls after the commit
 * with the write lock released: a reader that sees the counter moved and
 * then reads the row sees the change. A WAL hook takes the place of
 * SQLite's automatic checkpoint, so this one does that too, as SQLite
 * would (st->checkpoint; 0 on the loop's connection, sg_store_no_wait). */

/* SQLite's own wal_autocheckpoint default. */
#define CHECKPOINT_FRAMES 1000

static void on_update(void *arg, int op, const char *db, const char *table, sqlite3_int64 rowid)
{
    sg_store_t *st = arg;
    (void)op;
    (void)db;
    (void)rowid;
    if (strcmp(table, "generations") == 0)
        st->gen_moved = 1;
}

static void on_rollback(void *arg)
{
    ((sg_store_t *)arg)->gen_moved = 0;
}

static int on_commit(void *arg, sqlite3 *db, const char *name, int frames)
{
    sg_store_t *st = arg;
    if (st->gen_moved) {
        st->gen_moved = 0;
        __atomic_add_fetch(st->gen_seq, 1, __ATOMIC_RELEASE);
    }
    if (st->checkpoint > 0 && frames >= st->checkpoint)
        sqlite3_wal_checkpoint(db, name);
    return SQLITE_OK;
}

static int hook(sg_store_t *st, char *err, size_t errlen)
{
    char *path = sg_store__cat(st->path, "-gen");
    struct stat sb;
    int fd;

    /* no POSIX lock is ever taken on this file: closing it drops none */
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || fstat(fd, &sb) != 0) {
        sg_store__errf(err, errlen, "%s: %s", path, strerror(errno));
        goto Error;
    }
    if (!S_ISREG(sb.st_mode)) {
        sg_store__errf(err, errlen, "%s: not a regular file", path);
        goto Error;
    }
    if (sb.st_size < (off_t)sizeof(uint64_t) && ftruncate(fd, sizeof(uint64_t)) != 0) {
        sg_store__errf(err, errlen, "%s: %s", path, strerror(errno));
        goto Error;
    }
    void *m = mmap(NULL, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        sg_store__errf(err, errlen, "%s: mmap: %s", path, strerror(errno));
        goto Error;
    }
    close(fd);
    free(path);
    st->gen_seq = m;
    st->checkpoint = CHECKPOINT_FRAMES;
    sqlite3_update_hook(st->db, on_update, st);
    sqlite3_rollback_hook(st->db, on_rollback, st);
    sqlite3_wal_hook(st->db, on_commit, st);
    return 0;

Error:
    if (fd >= 0)
        close(fd);
    free(path);
    return -1;
}

sg_store_t *sg_store_open(const char *data_dir, char *err, size_t errlen)
{
    sg_store_t *st;
    uint64_t deadline;
    int fd;

    if (data_dir == NULL || data_dir[0] == '\0') {
        sg_store__errf(err, errlen, "no data directory");
        return NULL;
    }
    if (mkdir_p(data_dir, err, errlen) != 0)
        return NULL;
    st = sg_xcalloc(1, sizeof(*st));
    st->path = sg_store__cat(data_dir, "/" SG_STORE_FILE);
    st->journal_dir = sg_store__journal_dir(data_dir);

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
        sg_store__errf(err, errlen, "%s: %s", st->path, strerror(errno));
        goto Error;
    }
    if (sqlite3_open_v2(st->path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        sg_store__errf(err, errlen, "%s: %s", st->path, st->db != NULL ? sqlite3_errmsg(st->db) : "out of memory");
        goto Error;
    }
    sqlite3_extended_result_codes(st->db, 1);
    sqlite3_busy_timeout(st->db, SG_BUSY_TIMEOUT_MS);
    if (hook(st, err, errlen) != 0)
        goto Error;
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
    if (st->gen_seq != NULL)
        munmap(st->gen_seq, sizeof(uint64_t));
    free(st->path);
    free(st->journal_dir);
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

/* ---- tenant rows ---- */

/* Reads the columns tenant_cols() lists, starting at col. */
void sg_store__read_tenant(sqlite3_stmt *s, int col, sg_tenant_t *t)
{
    memset(t, 0, sizeof(*t));
    t->id = sqlite3_column_int64(s, col);
    sg_store__col_text(s, col + 1, t->name, sizeof(t->name));
    t->created_at = sqlite3_column_int64(s, col + 2);
    col += 3;
    for (size_t i = 0; i < sg_tenant_nfields; i++, col++) {
        const sg_tenant_field_t *f = &sg_tenant_fields[i];
        char *p = (char *)t + f->off;
        switch (f->type) {
        case SG_TF_LONG:
            *(long *)p = (long)sqlite3_column_int64(s, col);
            break;
        case SG_TF_DOUBLE:
            *(double *)p = sqlite3_column_double(s, col);
            break;
        case SG_TF_BOOL:
            *(int *)p = sqlite3_column_int(s, col) != 0;
            break;
        case SG_TF_LANGS:
            sg_store__col_text(s, col, p, SG_LANGS_MAX);
            break;
        case SG_TF_RUNTIME:
            sg_store__col_text(s, col, p, SG_RUNTIME_NAME_MAX);
            break;
        }
    }
}

/* Binds every tenant field as ?3, ?4, ... */
void sg_store__bind_tenant_fields(sqlite3_stmt *s, const sg_tenant_t *t)
{
    for (size_t i = 0; i < sg_tenant_nfields; i++) {
        const sg_tenant_field_t *f = &sg_tenant_fields[i];
        const char *p = (const char *)t + f->off;
        int idx = (int)i + 3;
        switch (f->type) {
        case SG_TF_LONG:
            sqlite3_bind_int64(s, idx, *(const long *)p);
            break;
        case SG_TF_DOUBLE:
            sqlite3_bind_double(s, idx, *(const double *)p);
            break;
        case SG_TF_BOOL:
            sqlite3_bind_int(s, idx, *(const int *)p);
            break;
        case SG_TF_LANGS:
            sqlite3_bind_text(s, idx, p, -1, SQLITE_STATIC);
            break;
        case SG_TF_RUNTIME:
            if (p[0] != '\0')
                sqlite3_bind_text(s, idx, p, -1, SQLITE_STATIC);
            else
                sqlite3_bind_null(s, idx);
            break;
        }
    }
}

int sg_store__get(sg_store_t *st, sqlite3_stmt *s, void (*read)(sqlite3_stmt *s, void *out), void *out,
                  const char *what, char *err, size_t errlen)
{
    int rc = sqlite3_step(s), ret;
    if (rc == SQLITE_ROW) {
        if (out != NULL)
            read(s, out);
        ret = 1;
    } else if (rc == SQLITE_DONE) {
        ret = 0;
    } else {
        ret = sg_store__db_err(st, what, err, errlen);
    }
    sg_store__done(s);
    return ret;
}

void sg_store__read_tenant_row(sqlite3_stmt *s, void *out)
{
    sg_store__read_tenant(s, 0, out);
}
