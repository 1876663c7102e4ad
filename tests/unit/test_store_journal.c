/*
 * test_store_journal.c — the usage journal (gateway/store/store_journal.c,
 * store.h) on real files in a temporary directory: rows appended by
 * sg_usage_journal_append and moved into the ledger by
 * sg_store_usage_catch_up exactly as written and exactly once (a second
 * catch-up, two connections catching up at once while rows are appended);
 * the ledger's reads catching up by themselves; the files a catch-up finds
 * as a dead or a live writer leaves them (only whole appends moved: an
 * unfinished one dropped or left to be finished; malformed lines skipped;
 * unborn ".new" files), rows the ledger refuses (no such tenant), rows
 * append refuses, a failed write cut back (RLIMIT_FSIZE) and none of its
 * rows moved by a catch-up that reads the file before the cut, and
 * rotation past 4 MB. Writers are simulated by hand where it matters:
 * plain open/write, with or without flock.
 */
#include "store_fixture.h"
#include "sgrun.h"
#include "buf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

static const char *const sid = "0f8fad5b-d9cb-469f-a165-70867728950e";

STORE_LIST(usage, sg_usage_t, 16)

/* ---- helpers ---- */

/* <dir>/usage-journal */
static void journal_dir(char *out, size_t len, const char *dir)
{
    snprintf(out, len, "%s/" SG_USAGE_JOURNAL_DIR, dir);
}

/* What a journal directory holds (every entry but "." and ".."). */
typedef struct {
    int n;
    char name[8][256];
    int64_t size[8];
} jfiles_t;

static jfiles_t list_files(const char *dir)
{
    char jdir[300], path[600];
    jfiles_t f;
    struct dirent *e;
    struct stat sb;

    memset(&f, 0, sizeof(f));
    journal_dir(jdir, sizeof(jdir), dir);
    DIR *d = opendir(jdir);
    if (d == NULL) {
        assert_int_equal(errno, ENOENT);
        return f;
    }
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (f.n < 8) {
            snprintf(f.name[f.n], sizeof(f.name[0]), "%s", e->d_name);
            snprintf(path, sizeof(path), "%s/%s", jdir, e->d_name);
            assert_int_equal(stat(path, &sb), 0);
            f.size[f.n] = (int64_t)sb.st_size;
        }
        f.n++;
    }
    closedir(d);
    return f;
}

/* Whether the journal directory of dir has an entry `name`. */
static int has_file(const char *dir, const char *name)
{
    jfiles_t f = list_files(dir);
    for (int i = 0; i < f.n && i < 8; i++) {
        if (strcmp(f.name[i], name) == 0)
            return 1;
    }
    return 0;
}

/* The one *.usage file of dir (its name in name, its size returned). */
static int64_t only_usage_file(const char *dir, char *name, size_t len)
{
    jfiles_t f = list_files(dir);
    assert_int_equal(f.n, 1);
    assert_non_null(strstr(f.name[0], ".usage"));
    if (name != NULL)
        snprintf(name, len, "%s", f.name[0]);
    return f.size[0];
}

/* The line that ends each append (store_journal.c): only whole appends
 * are moved. */
#define APPEND_END "=\n"

/* A row with its two times printed as time_fmt: "%a" as store_journal.c's
 * append writes it, "%.17g" as older gateways did. */
static size_t row_line_as(char *buf, size_t len, const sg_usage_t *u, int count_session, const char *time_fmt)
{
    char t[2][64];
    snprintf(t[0], sizeof(t[0]), time_fmt, u->started_at);
    snprintf(t[1], sizeof(t[1]), time_fmt, u->duration);
    int n = snprintf(buf, len, "%lld %d %s %s %s %s %s %d %d %lld\n", (long long)u->tenant_id, count_session,
                     u->session_id[0] ? u->session_id : "-", u->lang, u->kind, t[0], t[1], u->exit_code, u->timed_out,
                     (long long)u->output_bytes);
    assert_true(n > 0 && (size_t)n < len);
    return (size_t)n;
}

static size_t row_line(char *buf, size_t len, const sg_usage_t *u, int count_session)
{
    return row_line_as(buf, len, u, count_session, "%a");
}

static void write_all(int fd, const char *s, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, s, len);
        assert_true(w > 0);
        s += w;
        len -= (size_t)w;
    }
}

static void write_str(int fd, const char *s)
{
    write_all(fd, s, strlen(s));
}

/* A journal file made by hand, as a writer would leave it: <dir>/usage-
 * journal/<name>, opened for appending (the directory made if missing). */
static int hand_file(const char *dir, const char *name)
{
    char jdir[300], path[600];
    journal_dir(jdir, sizeof(jdir), dir);
    assert_true(mkdir(jdir, 0700) == 0 || errno == EEXIST);
    snprintf(path, sizeof(path), "%s/%s", jdir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    return fd;
}

static sg_usage_journal_t *journal_ok(const char *dir)
{
    char err[256] = "";
    sg_usage_journal_t *j = sg_usage_journal_open(dir, err, sizeof(err));
    if (j == NULL)
        fail_msg("sg_usage_journal_open(%s): %s", dir, err);
    return j;
}

static void append_ok(sg_usage_journal_t *j, const sg_usage_t *rows, const int *count, size_t n)
{
    const sg_usage_t *p[256];
    char err[256] = "";
    assert_true(n <= 256);
    for (size_t i = 0; i < n; i++)
        p[i] = &rows[i];
    if (sg_usage_journal_append(j, p, count, n, err, sizeof(err)) != 0)
        fail_msg("sg_usage_journal_append: %s", err);
}

/* append fails (-1, with err). */
static void append_refused(sg_usage_journal_t *j, const sg_usage_t *rows, const int *count, size_t n)
{
    const sg_usage_t *p[256];
    char err[256] = "";
    assert_true(n <= 256);
    for (size_t i = 0; i < n; i++)
        p[i] = &rows[i];
    assert_int_equal(sg_usage_journal_append(j, p, count, n, err, sizeof(err)), -1);
    assert_true(err[0] != '\0');
}

static sg_usage_catch_up_t catch_up_ok(sg_store_t *st)
{
    sg_usage_catch_up_t out;
    char err[256] = "";
    memset(&out, 0x55, sizeof(out)); /* every field set by the catch-up */
    if (sg_store_usage_catch_up(st, &out, err, sizeof(err)) != 0)
        fail_msg("sg_store_usage_catch_up: %s", err);
    return out;
}

/* A one-number query, straight on the connection (no catch-up first). */
static int64_t query_int(sg_store_t *st, const char *sql)
{
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(sg_store_db(st), sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

static int64_t usage_rows(sg_store_t *st)
{
    return query_int(st, "SELECT COUNT(*) FROM usage");
}

/* How far the ledger has the file `name` on record (-1: no record). */
static int64_t journal_record(sg_store_t *st, const char *name)
{
    char sql[512];
    snprintf(sql, sizeof(sql), "SELECT COALESCE((SELECT imported FROM usage_journal WHERE name = '%s'), -1)", name);
    return query_int(st, sql);
}

static void open_session(sg_store_t *st, const char *id, int64_t tenant)
{
    char err[256] = "";
    sg_session_rec_t r;
    memset(&r, 0, sizeof(r));
    snprintf(r.id, sizeof(r.id), "%s", id);
    r.tenant_id = tenant;
    strcpy(r.lang, "python");
    r.created_at = 1000;
    if (sg_store_session_open(st, &r, err, sizeof(err)) != 0)
        fail_msg("sg_store_session_open: %s", err);
}

static int64_t executions(sg_store_t *st, const char *id)
{
    char err[256] = "";
    sg_session_rec_t r;
    assert_int_equal(sg_store_session_get(st, id, &r, err, sizeof(err)), 1);
    return r.executions;
}

static void assert_usage_equal(const sg_usage_t *got, const sg_usage_t *want)
{
    assert_int_equal(got->tenant_id, want->tenant_id);
    assert_string_equal(got->session_id, want->session_id);
    assert_string_equal(got->lang, want->lang);
    assert_string_equal(got->kind, want->kind);
    if (!(got->started_at == want->started_at))
        fail_msg("started_at %.17g, want %.17g", got->started_at, want->started_at);
    if (!(got->duration == want->duration))
        fail_msg("duration %.17g, want %.17g", got->duration, want->duration);
    assert_int_equal(got->exit_code, want->exit_code);
    assert_int_equal(got->timed_out, want->timed_out);
    assert_int_equal(got->output_bytes, want->output_bytes);
}

/* ---- round trip ---- */

static void test_round_trip_exact_and_once(void **state)
{
    char dir[256], err[256], name[256];
    sg_tenant_t a, b;
    usage_list_t l = {0};
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "round-trip", &a, &b);
    open_session(st, sid, a.id);

    /* increasing started_at: the list gives them back in this order */
    const double t0 = 1732912345.123456789;
    sg_usage_t rows[6] = {
        usage(a.id, sid, t0, 0.1 + 0.2, 0, 4096),
        usage(a.id, "", nextafter(t0, INFINITY), 1.0 / 3.0, 1, 0),
        usage(b.id, "", t0 + 1.5, 5e-324, 0, (int64_t)1 << 40),
        usage(a.id, sid, t0 + 2.25, 1e-9, 0, 1),
        usage(a.id, sid, t0 + 3.0, 86400.000000001, 1, 0), /* a row of the session, not counted */
        usage(b.id, "", t0 + 4.0, 0.0, 0, 7),
    };
    const int count[6] = {1, 0, 0, 1, 0, 0};
    strcpy(rows[1].lang, "c++");
    rows[1].exit_code = 137;
    strcpy(rows[3].kind, "command");
    rows[3].exit_code = -2;
    strcpy(rows[4].lang, "node.js_20");

    sg_usage_journal_t *j = journal_ok(dir);
    append_ok(j, rows, count, 2);
    append_ok(j, rows + 2, count + 2, 3);
    append_ok(j, rows + 5, count + 5, 1);
    assert_int_equal(usage_rows(st), 0); /* in the journal only */

    sg_usage_catch_up_t out = catch_up_ok(st);
    assert_int_equal(out.imported, 6);
    assert_int_equal(out.dropped, 0);
    assert_int_equal(out.torn, 0);
    assert_int_equal(usage_rows(st), 6);
    assert_int_equal(sg_store_usage_list(st, 0, 0, 1e12, 0, collect_usage, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 6);
    for (int i = 0; i < 6; i++)
        assert_usage_equal(&l.item[i], &rows[i]);
    assert_int_equal(executions(st, sid), 2);

    /* once: a second catch-up finds nothing new; the file is the live
     * writer's and stays, on record to its end */
    int64_t size = only_usage_file(dir, name, sizeof(name));
    out = catch_up_ok(st);
    assert_int_equal(out.imported, 0);
    assert_int_equal(out.dropped, 0);
    assert_int_equal(out.torn, 0);
    assert_int_equal(usage_rows(st), 6);
    assert_int_equal(executions(st, sid), 2);
    assert_int_equal(only_usage_file(dir, NULL, 0), size);
    assert_int_equal(journal_record(st, name), size);

    /* the writer gone, the next catch-up removes the file and moves nothing */
    sg_usage_journal_close(j);
    assert_int_equal(list_files(dir).n, 1);
    out = catch_up_ok(st);
    assert_int_equal(out.imported, 0);
    assert_int_equal(out.torn, 0);
    assert_int_equal(list_files(dir).n, 0);
    assert_int_equal(usage_rows(st), 6);
    assert_int_equal(executions(st, sid), 2);
    sg_store_close(st);
}

/* The whole of a journal file (malloc'd, NUL-terminated). */
static char *file_text(const char *dir, const char *name)
{
    char jdir[300], path[600];
    journal_dir(jdir, sizeof(jdir), dir);
    snprintf(path, sizeof(path), "%s/%s", jdir, name);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    sg_buf_t b;
    char chunk[4096];
    sg_buf_init(&b, 16 << 20);
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), fp)) > 0)
        sg_buf_append(&b, chunk, n);
    fclose(fp);
    assert_non_null(b.base);
    return b.base;
}

/* Times of every kind of double (random bits, the finite ones) are
 * written as "%a" prints them, byte for byte, and read back exact. */
static void test_times_as_hex_floats(void **state)
{
    enum { ROWS = 1000, PER_APPEND = 250 };
    char dir[256], name[256], line[256];
    sg_tenant_t a, b;
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "hex-times", &a, &b);
    static sg_usage_t rows[ROWS];
    static int count[ROWS];
    sg_buf_t want;

    for (int i = 0; i < ROWS; i++) {
        double t[2];
        for (int k = 0; k < 2; k++) {
            do {
                uint64_t bits;
                assert_int_equal(sg_random_bytes(&bits, sizeof(bits)), 0);
                memcpy(&t[k], &bits, sizeof(t[k]));
            } while (!isfinite(t[k]));
        }
        /* and the edges: zeros, the smallest and largest, whole numbers */
        const double edge[] = {0.0, -0.0, 5e-324, -5e-324, DBL_MIN, DBL_MAX, -DBL_MAX, 1.0, 1732912345.0, 0.5};
        if (i < (int)(sizeof(edge) / sizeof(edge[0])))
            t[0] = edge[i];
        rows[i] = usage(a.id, "", t[0], t[1], i % 2, i);
    }
    sg_buf_init(&want, 16 << 20);
    sg_usage_journal_t *j = journal_ok(dir);
    for (int i = 0; i < ROWS; i += PER_APPEND) {
        append_ok(j, rows + i, count + i, PER_APPEND);
        for (int k = i; k < i + PER_APPEND; k++)
            sg_buf_append(&want, line, row_line(line, sizeof(line), &rows[k], 0));
        sg_buf_append(&want, APPEND_END, strlen(APPEND_END));
    }
    only_usage_file(dir, name, sizeof(name));
    char *got = file_text(dir, name);
    assert_string_equal(got, want.base);
    free(got);
    sg_buf_free(&want);

    assert_int_equal(catch_up_ok(st).imported, ROWS);
    sqlite3_stmt *q;
    assert_int_equal(
        sqlite3_prepare_v2(sg_store_db(st), "SELECT started_at, duration FROM usage ORDER BY id", -1, &q, NULL),
        SQLITE_OK);
    for (int i = 0; i < ROWS; i++) {
        assert_int_equal(sqlite3_step(q), SQLITE_ROW);
        double t0 = sqlite3_column_double(q, 0), t1 = sqlite3_column_double(q, 1);
        /* == : exact, but for zero's sign, which SQLite's REAL does not keep */
        if (!(t0 == rows[i].started_at && t1 == rows[i].duration))
            fail_msg("row %d: %a %a, want %a %a", i, t0, t1, rows[i].started_at, rows[i].duration);
    }
    assert_int_equal(sqlite3_step(q), SQLITE_DONE);
    sqlite3_finalize(q);
    sg_usage_journal_close(j);
    sg_store_close(st);
}

/* An import counts each session's executions once per session: with more
 * sessions than it groups at once (64), rows of each spread over the
 * appends and some not counted, every session ends with its own count. */
static void test_session_counts_grouped(void **state)
{
    enum { SESSIONS = 150, ROUNDS = 3 };
    char dir[256], ids[SESSIONS][37];
    sg_tenant_t a, b;
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "counts", &a, &b);
    static sg_usage_t rows[SESSIONS * ROUNDS];
    static int count[SESSIONS * ROUNDS];

    for (int i = 0; i < SESSIONS; i++) {
        snprintf(ids[i], sizeof(ids[i]), "00000000-0000-4000-8000-%012d", i);
        open_session(st, ids[i], a.id);
    }
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < SESSIONS; i++) {
            int k = r * SESSIONS + i;
            rows[k] = usage(a.id, "", 1000 + k, 0.5, 0, 1);
            memcpy(rows[k].session_id, ids[i], sizeof(ids[i]));
            strcpy(rows[k].kind, "execute");
            count[k] = r < 2 || i % 3 == 0; /* the third round: every third session's row counts */
        }
    }
    sg_usage_journal_t *j = journal_ok(dir);
    for (int k = 0; k < SESSIONS * ROUNDS; k += 150)
        append_ok(j, rows + k, count + k, 150);
    assert_int_equal(catch_up_ok(st).imported, SESSIONS * ROUNDS);
    for (int i = 0; i < SESSIONS; i++)
        assert_int_equal(executions(st, ids[i]), 2 + (i % 3 == 0));
    assert_int_equal(usage_rows(st), SESSIONS * ROUNDS);
    sg_usage_journal_close(j);
    sg_store_close(st);
}

/* A file an older gateway left, its times as %.17g: read back the same. */
static void test_older_decimal_times(void **state)
{
    char dir[256], err[256], line[256];
    sg_tenant_t a, b;
    usage_list_t l = {0};
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "decimal-times", &a, &b);
    sg_usage_t r1 = usage(a.id, "", 1732912345.123456789, 0.1 + 0.2, 0, 3),
               r2 = usage(b.id, "", nextafter(1732912346.0, 0), 1.0 / 3.0, 1, 4);

    int fd = hand_file(dir, "old.usage");
    write_all(fd, line, row_line_as(line, sizeof(line), &r1, 0, "%.17g"));
    write_all(fd, line, row_line_as(line, sizeof(line), &r2, 0, "%.17g"));
    write_str(fd, APPEND_END);
    close(fd);
    assert_int_equal(catch_up_ok(st).imported, 2);
    assert_int_equal(sg_store_usage_list(st, 0, 0, 1e12, 0, collect_usage, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 2);
    assert_usage_equal(&l.item[0], &r1);
    assert_usage_equal(&l.item[1], &r2);
    sg_store_close(st);
}

/* ---- the reads catch up first ---- */

static void count_recent(const sg_usage_t *u, void *data)
{
    (*(int *)data)++;
}

typedef struct {
    int64_t tenant_id;
    int64_t executions;
    double seconds;
} tenant_total_t;

static void collect_total(int64_t tenant_id, const sg_usage_total_t *t, void *data)
{
    tenant_total_t *r = data;
    r->tenant_id = tenant_id;
    r->executions = t->executions;
    r->seconds = t->seconds;
}

static void test_reads_catch_up_first(void **state)
{
    char dir[256], err[256];
    sg_tenant_t a, b;
    sg_usage_total_t tot;
    usage_list_t l = {0};
    tenant_total_t tt = {0};
    int n = 0;
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "reads", &a, &b);
    sg_usage_journal_t *j = journal_ok(dir);
    const int count[3] = {0, 0, 0};

    sg_usage_t r1[3] = {usage(a.id, "", 100, 1.5, 0, 10), usage(a.id, "", 101, 2.0, 1, 20),
                        usage(a.id, "", 102, 0.25, 0, 30)};
    append_ok(j, r1, count, 3);
    assert_int_equal(usage_rows(st), 0);
    assert_int_equal(sg_store_usage_total(st, a.id, 0, 1e12, &tot, err, sizeof(err)), 0);
    assert_int_equal(tot.executions, 3);
    assert_true(tot.seconds == 3.75);
    assert_int_equal(tot.output_bytes, 60);
    assert_int_equal(tot.timed_out, 1);

    sg_usage_t r2 = usage(a.id, "", 103, 1, 0, 1);
    append_ok(j, &r2, count, 1);
    assert_int_equal(sg_store_usage_recent(st, 100, count_recent, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 4);

    sg_usage_t r3 = usage(a.id, "", 104, 1, 0, 1);
    append_ok(j, &r3, count, 1);
    assert_int_equal(sg_store_usage_list(st, a.id, 0, 1e12, 0, collect_usage, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 5);
    assert_usage_equal(&l.item[4], &r3);

    sg_usage_t r4 = usage(b.id, "", 105, 8.0, 0, 1);
    append_ok(j, &r4, count, 1);
    assert_int_equal(sg_store_usage_totals_by_tenant(st, 0, 1e12, 0, NULL, collect_total, &tt, err, sizeof(err)), 0);
    assert_int_equal(tt.tenant_id, b.id); /* the last called: b after a */
    assert_int_equal(tt.executions, 1);
    assert_true(tt.seconds == 8.0);

    assert_int_equal(usage_rows(st), 6); /* each moved once */
    sg_usage_journal_close(j);
    sg_store_close(st);
}

/* ---- what writers leave ---- */

static void test_dead_writer_torn_tail_dropped(void **state)
{
    char dir[256], err[256], line[256];
    sg_tenant_t a, b;
    usage_list_t l = {0};
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "torn", &a, &b);
    sg_usage_t r1 = usage(a.id, "", 1000.25, 0.5, 0, 3), r2 = usage(b.id, "", 1001.5, 0.75, 1, 4),
               r3 = usage(a.id, "", 1002, 0.5, 0, 5);
    const char *partial = "1 0 - python ephemeral 1002.5 0.2";

    /* an append, then one its writer died inside of: a whole line (never
     * answered: its append has no end) and a partial one */
    int fd = hand_file(dir, "x.usage");
    write_all(fd, line, row_line(line, sizeof(line), &r1, 0));
    write_all(fd, line, row_line(line, sizeof(line), &r2, 0));
    write_str(fd, APPEND_END);
    size_t n3 = row_line(line, sizeof(line), &r3, 0);
    write_all(fd, line, n3);
    write_str(fd, partial);
    close(fd); /* no lock held: its writer is gone */

    sg_usage_catch_up_t out = catch_up_ok(st);
    assert_int_equal(out.imported, 2);
    assert_int_equal(out.dropped, 0);
    assert_int_equal(out.torn, (long)(n3 + strlen(partial)));
    assert_int_equal(list_files(dir).n, 0);
    assert_int_equal(sg_store_usage_list(st, 0, 0, 1e12, 0, collect_usage, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 2);
    assert_usage_equal(&l.item[0], &r1);
    assert_usage_equal(&l.item[1], &r2);
    out = catch_up_ok(st);
    assert_int_equal(out.imported, 0);
    assert_int_equal(out.torn, 0);
    sg_store_close(st);
}

static void test_live_writer_partial_line_waits(void **state)
{
    char dir[256], err[256], l1[256], l2[256], l3[256];
    sg_tenant_t a, b;
    usage_list_t l = {0};
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "live", &a, &b);
    sg_usage_t r1 = usage(a.id, "", 1000, 0.5, 0, 3), r2 = usage(a.id, "", 1001, 0.5, 0, 4),
               r3 = usage(b.id, "", 1002.125, 0.3, 0, 5);
    size_t n1 = row_line(l1, sizeof(l1), &r1, 0), n2 = row_line(l2, sizeof(l2), &r2, 0),
           n3 = row_line(l3, sizeof(l3), &r3, 0);

    /* a writer holding its lock, in the middle of its second append */
    int fd = hand_file(dir, "x.usage");
    assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
    write_all(fd, l1, n1);
    write_all(fd, l2, n2);
    write_str(fd, APPEND_END);
    write_all(fd, l3, n3 / 2);

    sg_usage_catch_up_t out = catch_up_ok(st);
    assert_int_equal(out.imported, 2);
    assert_int_equal(out.torn, 0);
    assert_true(has_file(dir, "x.usage"));
    /* on record: the whole append */
    assert_int_equal(journal_record(st, "x.usage"), (int64_t)(n1 + n2 + strlen(APPEND_END)));
    /* nothing new: still waiting */
    out = catch_up_ok(st);
    assert_int_equal(out.imported, 0);
    assert_int_equal(out.torn, 0);
    assert_true(has_file(dir, "x.usage"));

    /* the line finished, its append not yet: still waiting */
    write_all(fd, l3 + n3 / 2, n3 - n3 / 2);
    out = catch_up_ok(st);
    assert_int_equal(out.imported, 0);
    assert_int_equal(out.torn, 0);
    /* the append finished */
    write_str(fd, APPEND_END);
    out = catch_up_ok(st);
    assert_int_equal(out.imported, 1);
    assert_int_equal(out.torn, 0);
    assert_true(has_file(dir, "x.usage"));
    assert_int_equal(sg_store_usage_list(st, 0, 0, 1e12, 0, collect_usage, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 3);
    assert_usage_equal(&l.item[2], &r3);

    /* the writer gone: removed, nothing more */
    assert_int_equal(flock(fd, LOCK_UN), 0);
    out = catch_up_ok(st);
    assert_int_equal(out.imported, 0);
    assert_int_equal(out.torn, 0);
    assert_false(has_file(dir, "x.usage"));
    assert_int_equal(usage_rows(st), 3);
    close(fd);
    sg_store_close(st);
}

static void test_malformed_lines_skipped(void **state)
{
    char dir[256], err[256], line[256];
    sg_tenant_t a, b;
    usage_list_t l = {0};
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "malformed", &a, &b);
    sg_usage_t r1 = usage(a.id, "", 1000, 0.5, 0, 3), r2 = usage(a.id, "", 1001, 0.5, 0, 4),
               r3 = usage(b.id, "", 1002, 0.5, 0, 5);
    const char *bad[] = {
        "garbage\n",
        "\n",
        "1 0 - py thon ephemeral 1003 0.5 0 0 1\n",                                    /* a space in lang */
        "1 0 - python ephemeral 1003 nan 0 0 1\n",                                     /* duration not finite */
        "1 0 - python ephemeral inf 0.5 0 0 1\n",                                      /* started_at not finite */
        "1 2 - python ephemeral 1003 0.5 0 0 1\n",                                     /* count_session 2 */
        "1 0 - python ephemeral 1003 0.5 0 2 1\n",                                     /* timed_out 2 */
        "1 0 - python ephemeral 1003 0.5 0 0 -1\n",                                    /* output_bytes < 0 */
        "0 0 - python ephemeral 1003 0.5 0 0 1\n",                                     /* tenant 0 */
        "1 0 - python ephemeral 1003 0.5 0 0 1 x\n",                                   /* a word too many */
        "1 0 - python ephemeral 1003 0.5 0 0\n",                                       /* a word short */
        "1 0 - python ephemeral 1003 0.5 0 0 1 \n",                                    /* a trailing space */
        "1  0 - python ephemeral 1003 0.5 0 0 1\n",                                    /* two spaces */
        " 1 0 - python ephemeral 1003 0.5 0 0 1\n",                                    /* a leading space */
        "1x 0 - python ephemeral 1003 0.5 0 0 1\n",                                    /* a number and more */
        "1 0 - python ephemeral 1003s 0.5 0 0 1\n",                                    /* a time and more */
        "1 0 - python ephemeral 1003 0.5 4294967296 0 1\n",                            /* exit_code past an int */
        "99999999999999999999 0 - python ephemeral 1003 0.5 0 0 1\n",                  /* tenant past 64 bits */
        "1 0 - python ephemeral 1003 1e999 0 0 1\n",                                   /* a time past a double */
        "1 0 0123456789012345678901234567890123456 python ephemeral 1003 0.5 0 0 1\n", /* a session id of 37 */
        "1 0 - python ephemeral-kind-too-long 1003 0.5 0 0 1\n",                       /* a kind of 16 */
    };
    long torn = 0;

    int fd = hand_file(dir, "m.usage");
    write_all(fd, line, row_line(line, sizeof(line), &r1, 0));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_str(fd, bad[i]);
        torn += (long)strlen(bad[i]);
        if (i == 5)
            write_all(fd, line, row_line(line, sizeof(line), &r2, 0));
    }
    write_all(fd, line, row_line(line, sizeof(line), &r3, 0));
    write_str(fd, APPEND_END);
    close(fd);

    sg_usage_catch_up_t out = catch_up_ok(st);
    assert_int_equal(out.imported, 3);
    assert_int_equal(out.dropped, 0);
    assert_int_equal(out.torn, torn);
    assert_int_equal(list_files(dir).n, 0);
    assert_int_equal(sg_store_usage_list(st, 0, 0, 1e12, 0, collect_usage, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 3);
    assert_usage_equal(&l.item[0], &r1);
    assert_usage_equal(&l.item[1], &r2);
    assert_usage_equal(&l.item[2], &r3);
    sg_store_close(st);
}

/* ---- rows refused ---- */

static void test_unknown_tenant_rows_dropped(void **state)
{
    char dir[256], err[256];
    sg_tenant_t a, b;
    usage_list_t l = {0};
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "dropped", &a, &b);
    open_session(st, sid, a.id);
    sg_usage_t rows[4] = {
        usage(a.id, sid, 1000, 1, 0, 1),
        usage(999999, "", 1001, 1, 0, 1),
        usage(b.id, "", 1002, 1, 0, 1),
        usage(999999, sid, 1003, 1, 0, 1),
    };
    const int count[4] = {1, 0, 0, 1};

    sg_usage_journal_t *j = journal_ok(dir);
    append_ok(j, rows, count, 4);
    sg_usage_catch_up_t out = catch_up_ok(st);
    assert_int_equal(out.imported, 2);
    assert_int_equal(out.dropped, 2);
    assert_int_equal(out.torn, 0);
    assert_true(out.drop_err[0] != '\0');
    assert_non_null(strstr(out.drop_err, "999999"));
    assert_int_equal(sg_store_usage_list(st, 0, 0, 1e12, 0, collect_usage, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 2);
    assert_usage_equal(&l.item[0], &rows[0]);
    assert_usage_equal(&l.item[1], &rows[2]);
    /* the dropped row of the session did not count it */
    assert_int_equal(executions(st, sid), 1);
    /* dropped once: not tried again */
    out = catch_up_ok(st);
    assert_int_equal(out.imported, 0);
    assert_int_equal(out.dropped, 0);
    sg_usage_journal_close(j);
    out = catch_up_ok(st);
    assert_int_equal(out.dropped, 0);
    assert_int_equal(list_files(dir).n, 0);
    sg_store_close(st);
}

static void test_append_refuses_unwritable_rows(void **state)
{
    char dir[256];
    sg_tenant_t a, b;
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "refused", &a, &b);
    sg_usage_journal_t *j = journal_ok(dir);
    const int count[2] = {0, 0}, count2[2] = {0, 2};

    sg_usage_t first = usage(a.id, "", 999, 1, 0, 1);
    append_ok(j, &first, count, 1);
    int64_t size = only_usage_file(dir, NULL, 0);
    assert_true(size > 0);

    /* each batch: a good row, then one that cannot be a line */
    sg_usage_t rows[2] = {usage(a.id, "", 1000, 1, 0, 1), usage(a.id, "", 1001, 1, 0, 1)};
    strcpy(rows[1].lang, "py thon");
    append_refused(j, rows, count, 2);
    assert_int_equal(only_usage_file(dir, NULL, 0), size);

    rows[1] = usage(a.id, "", 1001, 1, 0, 1);
    rows[1].kind[0] = '\0';
    append_refused(j, rows, count, 2);
    assert_int_equal(only_usage_file(dir, NULL, 0), size);

    rows[1] = usage(a.id, "", 1001, 1, 0, 1);
    strcpy(rows[1].session_id, "-"); /* the word of "no session" */
    append_refused(j, rows, count, 2);
    rows[1] = usage(a.id, "", 1001, NAN, 0, 1);
    append_refused(j, rows, count, 2);
    rows[1] = usage(0, "", 1001, 1, 0, 1);
    append_refused(j, rows, count, 2);
    rows[1] = usage(a.id, "", 1001, 1, 0, 1);
    append_refused(j, rows, count2, 2);
    assert_int_equal(only_usage_file(dir, NULL, 0), size);

    /* only the first append's row is in the journal */
    sg_usage_catch_up_t out = catch_up_ok(st);
    assert_int_equal(out.imported, 1);
    assert_int_equal(out.torn, 0);
    assert_int_equal(usage_rows(st), 1);
    sg_usage_journal_close(j);
    sg_store_close(st);
}

static void test_failed_write_cut_back(void **state)
{
    char dir[256];
    sg_tenant_t a, b;
    struct rlimit old, lim;
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "cut-back", &a, &b);
    sg_usage_journal_t *j = journal_ok(dir);
    sg_usage_t rows[10];
    int count[10] = {0};

    for (int i = 0; i < 10; i++)
        rows[i] = usage(a.id, "", 1000 + i, 1, 0, i);
    append_ok(j, rows, count, 3);
    int64_t size = only_usage_file(dir, NULL, 0);

    /* the file may grow by 60 bytes: the batch of 10 is written in part */
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)size + 60;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    const sg_usage_t *p[10];
    char err[256] = "";
    for (int i = 0; i < 10; i++)
        p[i] = &rows[i];
    int rc = sg_usage_journal_append(j, p, count, 10, err, sizeof(err));
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(rc, -1);
    assert_true(err[0] != '\0');
    /* cut back to where it was */
    assert_int_equal(only_usage_file(dir, NULL, 0), size);

    for (int i = 0; i < 4; i++)
        rows[i] = usage(b.id, "", 2000 + i, 1, 0, i);
    append_ok(j, rows, count, 4);
    sg_usage_catch_up_t out = catch_up_ok(st);
    assert_int_equal(out.imported, 7);
    assert_int_equal(out.torn, 0);
    assert_int_equal(out.dropped, 0);
    assert_int_equal(usage_rows(st), 7);
    assert_int_equal(query_int(st, "SELECT COUNT(*) FROM usage WHERE started_at >= 1003 AND started_at < 2000"), 0);
    sg_usage_journal_close(j);
    sg_store_close(st);
}

/* What the catch-up run from SIGXFSZ saw (test_catch_up_during_failed_write). */
static struct {
    sg_store_t *st;
    const char *dir;
    int runs;
    int rc;
    int64_t size; /* the file's as the catch-up found it */
    sg_usage_catch_up_t out;
    char err[256];
} mid;

/* Runs where the failed write of an append leaves its process: after the
 * part of the rows that fit was written and before the append cuts it
 * back (the signal comes with the write that fails; the append is in no
 * library call then). A catch-up of another connection could come there. */
static void catch_up_mid_write(int sig)
{
    struct rlimit lim, open_lim;
    if (mid.runs++ != 0)
        return;
    getrlimit(RLIMIT_FSIZE, &lim);
    open_lim = lim;
    open_lim.rlim_cur = open_lim.rlim_max; /* the catch-up's own writes (the WAL) unbounded */
    setrlimit(RLIMIT_FSIZE, &open_lim);
    jfiles_t f = list_files(mid.dir);
    mid.size = f.n == 1 ? f.size[0] : -1;
    mid.rc = sg_store_usage_catch_up(mid.st, &mid.out, mid.err, sizeof(mid.err));
    setrlimit(RLIMIT_FSIZE, &lim);
}

static void test_catch_up_during_failed_write(void **state)
{
    char dir[256], line[256];
    sg_tenant_t a, b;
    struct rlimit old, lim;
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "mid-write", &a, &b);
    sg_usage_journal_t *j = journal_ok(dir);
    sg_usage_t rows[10];
    const sg_usage_t *p[10];
    int count[10] = {0};
    char err[256] = "";

    for (int i = 0; i < 10; i++) {
        rows[i] = usage(a.id, "", 1000 + i, 1, 0, i);
        p[i] = &rows[i];
    }
    append_ok(j, rows, count, 3);
    assert_int_equal(catch_up_ok(st).imported, 3);
    int64_t size = only_usage_file(dir, NULL, 0);
    size_t one = row_line(line, sizeof(line), &rows[0], 0);

    /* room for a few whole lines of the batch of 10, not for all */
    memset(&mid, 0, sizeof(mid));
    mid.st = open_ok(dir);
    mid.dir = dir;
    for (int i = 0; i < 10; i++)
        rows[i] = usage(a.id, "", 2000 + i, 1, 0, i);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)size + 4 * one + one / 2;
    void (*old_handler)(int) = signal(SIGXFSZ, catch_up_mid_write);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = sg_usage_journal_append(j, p, count, 10, err, sizeof(err));
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(rc, -1);
    assert_int_equal(mid.runs, 1);
    if (mid.rc != 0)
        fail_msg("catch-up in the middle of the write: %s", mid.err);
    /* it found whole lines of the failed append, and took none of them */
    assert_true(mid.size >= size + 4 * (int64_t)one);
    assert_int_equal(mid.out.imported, 0);
    assert_int_equal(mid.out.torn, 0);
    assert_int_equal(only_usage_file(dir, NULL, 0), size);

    /* the rows appended next are moved, all of them, once */
    for (int i = 0; i < 4; i++)
        rows[i] = usage(b.id, "", 3000 + i, 1, 0, i);
    append_ok(j, rows, count, 4);
    sg_usage_catch_up_t out = catch_up_ok(st);
    assert_int_equal(out.imported, 4);
    assert_int_equal(out.torn, 0);
    sg_usage_journal_close(j);
    out = catch_up_ok(mid.st);
    assert_int_equal(out.imported, 0);
    assert_int_equal(out.torn, 0);
    assert_int_equal(list_files(dir).n, 0);
    assert_int_equal(usage_rows(st), 7);
    assert_int_equal(query_int(st, "SELECT COUNT(*) FROM usage WHERE started_at >= 2000 AND started_at < 3000"), 0);
    sg_store_close(mid.st);
    sg_store_close(st);
}

/* ---- two connections ---- */

typedef struct {
    sg_store_t *st;
    atomic_int *stop;
    atomic_long rounds;
    long imported, dropped, torn;
    int failed;
    char err[256];
} catcher_t;

/* Catches up on its connection until told to stop. */
static void *catcher(void *arg)
{
    catcher_t *c = arg;
    while (!atomic_load(c->stop)) {
        sg_usage_catch_up_t out;
        if (sg_store_usage_catch_up(c->st, &out, c->err, sizeof(c->err)) != 0) {
            c->failed = 1;
            break;
        }
        c->imported += out.imported;
        c->dropped += out.dropped;
        c->torn += out.torn;
        atomic_fetch_add(&c->rounds, 1);
    }
    return NULL;
}

static void test_two_connections_catch_up_at_once(void **state)
{
    enum { WRITERS = 4, APPENDS = 200, PER = 10, TOTAL = APPENDS * PER };
    char dir[256];
    sg_tenant_t a, b;
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "concurrent", &a, &b);
    sg_store_t *other = open_ok(dir);
    sg_usage_journal_t *j[WRITERS];
    atomic_int stop = 0;
    catcher_t c[2];
    pthread_t th[2];
    sg_usage_t rows[PER];
    int count[PER];
    int64_t counted = 0;

    open_session(st, sid, a.id);
    /* four writers (as four gateways), made before the catch-ups start */
    for (int w = 0; w < WRITERS; w++)
        j[w] = journal_ok(dir);
    for (int i = 0; i < 2; i++) {
        memset(&c[i], 0, sizeof(c[i]));
        c[i].st = i == 0 ? st : other;
        c[i].stop = &stop;
        atomic_init(&c[i].rounds, 0);
        assert_int_equal(pthread_create(&th[i], NULL, catcher, &c[i]), 0);
    }

    for (int k = 0; k < APPENDS; k++) {
        for (int i = 0; i < PER; i++) {
            int n = k * PER + i;
            rows[i] = usage(n % 3 ? a.id : b.id, n % 2 ? sid : "", 1000 + n, 0.5, 0, n);
            count[i] = n % 6 == 1; /* some of the session's rows */
            counted += count[i];
        }
        /* the first writer gone halfway (its file removed while rows
         * still come to the others) */
        int w = k % WRITERS;
        if (k > APPENDS / 2 && w == 0)
            w = 1 + k % (WRITERS - 1);
        append_ok(j[w], rows, count, PER);
        if (k == APPENDS / 2)
            sg_usage_journal_close(j[0]);
    }
    for (int w = 1; w < WRITERS; w++)
        sg_usage_journal_close(j[w]);

    /* both have done a whole catch-up that began after the last append */
    long r0 = atomic_load(&c[0].rounds), r1 = atomic_load(&c[1].rounds);
    while ((atomic_load(&c[0].rounds) < r0 + 2 && !c[0].failed) || (atomic_load(&c[1].rounds) < r1 + 2 && !c[1].failed))
        sched_yield();
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        if (c[i].failed)
            fail_msg("catch-up on connection %d: %s", i, c[i].err);
    }

    /* every row moved exactly once, by one or the other */
    assert_int_equal(c[0].imported + c[1].imported, TOTAL);
    assert_int_equal(c[0].dropped + c[1].dropped, 0);
    assert_int_equal(c[0].torn + c[1].torn, 0);
    sg_usage_catch_up_t out = catch_up_ok(st);
    assert_int_equal(out.imported, 0);
    assert_int_equal(list_files(dir).n, 0);
    assert_int_equal(usage_rows(st), TOTAL);
    assert_int_equal(query_int(st, "SELECT COUNT(DISTINCT output_bytes) FROM usage"), TOTAL);
    assert_int_equal(executions(st, sid), counted);
    sg_store_close(other);
    sg_store_close(st);
}

/* ---- rotation ---- */

static void test_rotation(void **state)
{
    enum { BATCH = 256 };
    char dir[256], err[256], first[256] = "", live[256] = "";
    sg_tenant_t a, b;
    sg_usage_total_t tot;
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "rotation", &a, &b);
    sg_usage_journal_t *j = journal_ok(dir);
    static sg_usage_t rows[BATCH];
    int count[BATCH];
    int64_t n = 0, sum = 0, counted = 0;
    jfiles_t f;

    open_session(st, sid, a.id);
    only_usage_file(dir, first, sizeof(first));
    /* batches until the append after the one that passes 4 MB has begun a
     * second file */
    for (;;) {
        for (int i = 0; i < BATCH; i++, n++) {
            rows[i] = usage(a.id, sid, 1000 + (double)n / 4, 0.125, 0, n);
            count[i] = n % 2 == 0;
            counted += count[i];
            sum += n;
        }
        append_ok(j, rows, count, BATCH);
        f = list_files(dir);
        if (f.n != 1)
            break;
        assert_true(f.size[0] < (int64_t)(4 << 20) + 256 * 200); /* past 4 MB by one batch at most */
        assert_true(n < 100000);
    }
    assert_int_equal(f.n, 2);
    for (int i = 0; i < 2; i++) {
        assert_non_null(strstr(f.name[i], ".usage"));
        if (strcmp(f.name[i], first) == 0)
            assert_true(f.size[i] >= (int64_t)(4 << 20));
        else
            snprintf(live, sizeof(live), "%s", f.name[i]);
    }
    assert_true(has_file(dir, first));
    assert_true(live[0] != '\0');

    sg_usage_catch_up_t out = catch_up_ok(st);
    assert_int_equal(out.imported, n);
    assert_int_equal(out.torn, 0);
    assert_int_equal(out.dropped, 0);
    /* the given-up file removed, the live one kept */
    f = list_files(dir);
    assert_int_equal(f.n, 1);
    assert_string_equal(f.name[0], live);
    assert_int_equal(sg_store_usage_total(st, a.id, 0, 1e12, &tot, err, sizeof(err)), 0);
    assert_int_equal(tot.executions, n);
    assert_int_equal(tot.output_bytes, sum);
    assert_int_equal(executions(st, sid), counted);

    sg_usage_journal_close(j);
    out = catch_up_ok(st);
    assert_int_equal(out.imported, 0);
    assert_int_equal(list_files(dir).n, 0);
    assert_int_equal(usage_rows(st), n);
    sg_store_close(st);
}

/* ---- unborn files ---- */

static void test_unborn_files(void **state)
{
    char dir[256];
    sg_tenant_t a, b;
    sg_store_t *st = open_with_a_and_b(dir, sizeof(dir), "unborn", &a, &b);

    /* a maker that died before its rename (a minute and more ago); one
     * still holding its file; one between its open and its lock (just
     * made, not locked) */
    int dead = hand_file(dir, ".abc.new");
    int held = hand_file(dir, ".def.new");
    struct timespec old[2] = {{.tv_sec = time(NULL) - 120}, {.tv_sec = time(NULL) - 120}};
    assert_int_equal(futimens(dead, old), 0);
    assert_int_equal(futimens(held, old), 0);
    close(dead);
    close(hand_file(dir, ".ghi.new"));
    assert_int_equal(flock(held, LOCK_EX | LOCK_NB), 0);
    assert_int_equal(list_files(dir).n, 3);

    sg_usage_catch_up_t out = catch_up_ok(st);
    assert_int_equal(out.imported, 0);
    assert_int_equal(out.torn, 0);
    assert_false(has_file(dir, ".abc.new"));
    assert_true(has_file(dir, ".def.new"));
    assert_true(has_file(dir, ".ghi.new"));
    assert_int_equal(list_files(dir).n, 2);

    /* let go of, the old one goes too; the young one stays */
    close(held);
    catch_up_ok(st);
    assert_false(has_file(dir, ".def.new"));
    assert_true(has_file(dir, ".ghi.new"));
    assert_int_equal(list_files(dir).n, 1);
    sg_store_close(st);
}

int main(void)
{
    return SG_RUN_TESTS(
        "store_journal", group_setup, group_teardown, NULL, NULL, test_round_trip_exact_and_once,
        test_times_as_hex_floats, test_session_counts_grouped, test_older_decimal_times, test_reads_catch_up_first,
        test_dead_writer_torn_tail_dropped, test_live_writer_partial_line_waits, test_malformed_lines_skipped,
        test_unknown_tenant_rows_dropped, test_append_refuses_unwritable_rows, test_failed_write_cut_back,
        test_catch_up_during_failed_write, test_two_connections_catch_up_at_once, test_rotation, test_unborn_files);
}
