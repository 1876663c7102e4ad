/*
 * test_store_gen.c — what the gateway's cache of tokens and sessions
 * (core/auth.c) relies on in the store, on real SQLite files: the
 * generations move, seen from another connection, with every change to a
 * token or tenant (auth) and every session closed or deleted (sessions),
 * whoever writes them (also sandgate-admin's kind of writes through the
 * same functions), and not with the hot-path writes (usage rows, a
 * session's count); their signal (sandgate.db-gen) moving, seen through
 * another mapping and from another process, after exactly the commits
 * that moved them, and the connections that may checkpoint still doing so
 * with the hook that moves it in SQLite's place; and the group commit of
 * usage rows (sg_store_usage_add_batch), a bad row not costing the others
 * theirs.
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

/* What a reader has seen: the generations and their signal. */
typedef struct {
    sg_store_gen_t gen;
    uint64_t signal;
} seen_t;

static seen_t seen(sg_store_t *st)
{
    seen_t s = {.signal = sg_store_generations_signal(st)};
    s.gen = gen(st);
    return s;
}

/* The generations of reader moved by (auth, sessions) since before, and
 * their signal with them (only then). */
static void expect_moved(sg_store_t *reader, seen_t *before, int auth, int sessions, const char *what)
{
    seen_t now = seen(reader);
    if ((now.gen.auth != before->gen.auth) != auth || (now.gen.sessions != before->gen.sessions) != sessions)
        fail_msg("%s: auth %lld -> %lld, sessions %lld -> %lld (expected auth %s, sessions %s)", what,
                 (long long)before->gen.auth, (long long)now.gen.auth, (long long)before->gen.sessions,
                 (long long)now.gen.sessions, auth ? "moved" : "unchanged", sessions ? "moved" : "unchanged");
    if ((now.signal != before->signal) != (auth || sessions))
        fail_msg("%s: the signal went %llu -> %llu (expected it %s)", what, (unsigned long long)before->signal,
                 (unsigned long long)now.signal, auth || sessions ? "moved" : "unchanged");
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
    seen_t g = seen(r);

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
        assert_int_equal(sg_store_session_count_exec(w, s.id, 1, err, sizeof(err)), 0);
    }
    expect_moved(r, &g, 0, 0, "usage rows and counts");
    assert_int_equal(sg_store_session_close(w, s.id, 0, "deleted", err, sizeof(err)), 0);
    expect_moved(r, &g, 0, 1, "session closed");
    sg_store_close(r);
    sg_store_close(w);
}

/* A file's size, -1 when it is not there. */
static off_t size_of(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? sb.st_size : -1;
}

/* n commits of a usage row each through st. */
static void commit_rows(sg_store_t *st, int64_t tenant, int n)
{
    char err[256];
    for (int i = 0; i < n; i++) {
        sg_usage_t u = usage(tenant, "", 1000 + i, 0.5, 0, 10);
        if (sg_store_usage_add(st, &u, err, sizeof(err)) != 0)
            fail_msg("usage row %d: %s", i, err);
    }
}

static void test_generations_signal(void **state)
{
    char dir[256], path[300], err[256], tok[SG_TOKEN_MAX];
    sg_tenant_t a, b;
    sg_token_t info;
    struct stat sb;
    sg_store_t *w = open_with_a_and_b(dir, sizeof(dir), "signal", &a, &b);
    sg_store_t *r = open_ok(dir);
    sg_store_no_wait(r);

    /* the file: beside the database, the database's mode */
    snprintf(path, sizeof(path), "%s/sandgate.db-gen", dir);
    assert_int_equal(stat(path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    assert_int_equal(sb.st_mode & 0777, 0600);

    /* a write by another process (sandgate-admin's kind), through its own
     * mapping: seen here */
    assert_int_equal(sg_store_token_create(w, a.id, "x", tok, &info, err, sizeof(err)), 0);
    seen_t g = seen(r);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sg_store_t *other = sg_store_open(dir, err, sizeof(err));
        _exit(other != NULL && sg_store_token_revoke(other, info.public_id, err, sizeof(err)) == 1 ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    expect_moved(r, &g, 1, 0, "token revoked by another process");

    /* a transaction rolled back moves nothing, nor does the next commit
     * that changes no generation */
    assert_int_equal(sqlite3_exec(sg_store_db(w), "BEGIN; UPDATE tenants SET disabled = 1; ROLLBACK", NULL, NULL, NULL),
                     SQLITE_OK);
    commit_rows(w, a.id, 1);
    expect_moved(r, &g, 0, 0, "rolled back, then a usage row");

    /* the loop's connection (no wait) moves it with its own writes too */
    sg_tenant_t mine = b;
    mine.max_timeout = 7;
    assert_int_equal(sg_store_tenant_update(r, &mine, err, sizeof(err)), 0);
    seen_t by_w = {.signal = g.signal, .gen = g.gen};
    expect_moved(w, &by_w, 1, 0, "a cap changed on the loop's connection, seen by the other");

    /* checkpoints: a connection that may checkpoints as SQLite would, past
     * 1000 frames — so the WAL never grows much past that — and the loop's
     * never does */
    int page = 4096;
    {
        char v[32];
        sqlite3_stmt *q;
        assert_int_equal(sqlite3_prepare_v2(sg_store_db(w), "PRAGMA page_size", -1, &q, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_step(q), SQLITE_ROW);
        snprintf(v, sizeof(v), "%s", (const char *)sqlite3_column_text(q, 0));
        sqlite3_finalize(q);
        page = atoi(v);
    }
    off_t bound = 32 + (off_t)1100 * (page + 24);
    snprintf(path, sizeof(path), "%s/sandgate.db-wal", dir);
    commit_rows(w, a.id, 3000);
    if (size_of(path) > bound)
        fail_msg("3000 commits that may checkpoint: the WAL is %lld bytes (bound %lld)", (long long)size_of(path),
                 (long long)bound);
    assert_int_equal(sqlite3_wal_checkpoint_v2(sg_store_db(w), NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL),
                     SQLITE_OK);
    commit_rows(r, a.id, 3000);
    if (size_of(path) <= bound)
        fail_msg("3000 commits on the loop's connection: the WAL is %lld bytes, it was checkpointed",
                 (long long)size_of(path));
    sg_store_close(r);
    sg_store_close(w);

    /* a signal that is not a regular file: the store does not open */
    data_dir(dir, sizeof(dir), "signal-dir");
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof(path), "%s/sandgate.db-gen", dir);
    assert_int_equal(mkdir(path, 0700), 0);
    err[0] = '\0';
    assert_null(sg_store_open(dir, err, sizeof(err)));
    assert_non_null(strstr(err, "sandgate.db-gen"));
    /* nor one that is a link (to a file elsewhere) */
    data_dir(dir, sizeof(dir), "signal-link");
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof(path), "%s/sandgate.db-gen", dir);
    assert_int_equal(symlink("/etc/hostname", path), 0);
    err[0] = '\0';
    assert_null(sg_store_open(dir, err, sizeof(err)));
    assert_non_null(strstr(err, "sandgate.db-gen"));
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
    return SG_RUN_TESTS("store_gen", group_setup, group_teardown, NULL, NULL, test_generations, test_generations_signal,
                        test_usage_batch);
}
