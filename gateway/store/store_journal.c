/*
 * store_journal.c — the usage journal (store.h): the rows of executions
 * appended to a file of the gateway's own before their answers, and moved
 * into the ledger behind them.
 *
 * A row is one line of words separated by one space:
 *   tenant_id count_session session_id|- lang kind started_at duration exit_code timed_out output_bytes
 * the two times as C's hexadecimal floating constants (what "%a" prints,
 * read back to the same double; older files have them as %.17g, which
 * reads back the same way). An append's rows
 * end with the line "=": only whole appends count, so that a write that
 * failed half way (its rows then go to SQLite another way) has put none of
 * its rows in the ledger, even when a catch-up read the file meanwhile.
 */
#include "store_sql.h"
#include "buf.h"
#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define JOURNAL_EXT ".usage"
#define JOURNAL_NEW_EXT ".new" /* "." + name + this: a file not yet renamed in */
/* A file this long is given up for a new one at the next append. */
#define JOURNAL_ROTATE_BYTES (4 << 20)
/* No line is longer, and no append has more rows than APPEND_MAX_ROWS: what
 * a read finds longer than their product with no end of an append in it
 * is no row. */
#define LINE_MAX_BYTES 256
#define APPEND_MAX_ROWS 1024
#define APPEND_END "=\n"
#define READ_CHUNK (1 << 20)
/* A catch-up looks at this many files at most; the rest at the next. */
#define CATCH_UP_FILES 1024

struct sg_usage_journal {
    char *dir;
    int fd; /* -1: none (the next append makes one) */
    int64_t size;
    sg_buf_t line;
};

/* A word of a row: 1..max-1 bytes of [A-Za-z0-9._+-]. */
static int word_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n >= max)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!isalnum((unsigned char)s[i]) && strchr("._+-", s[i]) == NULL)
            return 0;
    }
    return 1;
}

/* What a line can carry and be read back as it was. */
static int row_ok(const sg_usage_t *u, int count_session)
{
    return u->tenant_id > 0 && (count_session == 0 || count_session == 1) &&
           (u->session_id[0] == '\0' ||
            (word_ok(u->session_id, sizeof(u->session_id)) && strcmp(u->session_id, "-"))) &&
           word_ok(u->lang, sizeof(u->lang)) && word_ok(u->kind, sizeof(u->kind)) && isfinite(u->started_at) &&
           isfinite(u->duration) && (u->timed_out == 0 || u->timed_out == 1) && u->output_bytes >= 0;
}

/* ---- the writer ---- */

/* A line is put together by hand: snprintf's format machinery, "%a"
 * included, costs more than the rest of an append. */
static char *put_int(char *p, int64_t v)
{
    p += sg_fmt_i64(p, v);
    *p++ = ' ';
    return p;
}

static char *put_word(char *p, const char *s)
{
    size_t n = strlen(s);
    memcpy(p, s, n);
    p[n] = ' ';
    return p + n + 1;
}

/* x (finite) exactly, as "%a" prints it: [-]0x1.<hex>p<exp> (0x0.<hex>p-1022
 * below the normal range, 0x0p+0 for zero), the hex digits cut after the
 * last that is not 0. */
static char *put_double(char *p, double x)
{
    static const char digits[] = "0123456789abcdef";
    uint64_t b;
    memcpy(&b, &x, sizeof(b));
    int biased = (int)(b >> 52 & 0x7ff);
    uint64_t m = b & ((UINT64_C(1) << 52) - 1);
    int e = biased != 0 ? biased - 1023 : m != 0 ? -1022 : 0;

    if (b >> 63)
        *p++ = '-';
    memcpy(p, biased != 0 ? "0x1" : "0x0", 3);
    p += 3;
    if (m != 0) {
        *p++ = '.';
        for (int at = 48; at >= 0 && (m & ((UINT64_C(1) << (at + 4)) - 1)) != 0; at -= 4)
            *p++ = digits[m >> at & 15];
    }
    *p++ = 'p';
    *p++ = e < 0 ? '-' : '+';
    return p + sg_fmt_i64(p, e < 0 ? -e : e);
}

/* u (row_ok) as its line, into line[LINE_MAX_BYTES]: the words fit in
 * their fields, the numbers in 20 bytes and the times in 24 each. */
static size_t row_line(char *line, const sg_usage_t *u, int count_session)
{
    char *p = line;
    p = put_int(p, u->tenant_id);
    p = put_int(p, count_session);
    p = put_word(p, u->session_id[0] ? u->session_id : "-");
    p = put_word(p, u->lang);
    p = put_word(p, u->kind);
    p = put_double(p, u->started_at);
    *p++ = ' ';
    p = put_double(p, u->duration);
    *p++ = ' ';
    p = put_int(p, u->exit_code);
    p = put_int(p, u->timed_out);
    p += sg_fmt_i64(p, u->output_bytes);
    *p++ = '\n';
    return (size_t)(p - line);
}

/* A new file: made under a name no catch-up reads, locked, then renamed
 * in, so that no catch-up finds it unlocked while it is in use. */
static int journal_file(sg_usage_journal_t *j, char *err, size_t errlen)
{
    unsigned char r[8];
    char base[96], tmp[4200], path[4200];

    sg_random_bytes(r, sizeof(r));
    snprintf(base, sizeof(base), "%lld-%ld-%02x%02x%02x%02x%02x%02x%02x%02x", (long long)sg_wall_s(), (long)getpid(),
             r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
    snprintf(tmp, sizeof(tmp), "%s/.%s" JOURNAL_NEW_EXT, j->dir, base);
    snprintf(path, sizeof(path), "%s/%s" JOURNAL_EXT, j->dir, base);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
        sg_store__errf(err, errlen, "usage journal %s: %s", tmp, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || rename(tmp, path) != 0) {
        sg_store__errf(err, errlen, "usage journal %s: %s", path, strerror(errno));
        unlink(tmp);
        close(fd);
        return -1;
    }
    j->fd = fd;
    j->size = 0;
    return 0;
}

sg_usage_journal_t *sg_usage_journal_open(const char *data_dir, char *err, size_t errlen)
{
    sg_usage_journal_t *j = sg_xcalloc(1, sizeof(*j));

    j->fd = -1;
    j->dir = sg_store__journal_dir(data_dir);
    sg_buf_init(&j->line, (size_t)LINE_MAX_BYTES * (APPEND_MAX_ROWS + 1));
    if (mkdir(j->dir, 0700) != 0 && errno != EEXIST) {
        sg_store__errf(err, errlen, "usage journal %s: %s", j->dir, strerror(errno));
        sg_usage_journal_close(j);
        return NULL;
    }
    if (journal_file(j, err, errlen) != 0) {
        sg_usage_journal_close(j);
        return NULL;
    }
    return j;
}

void sg_usage_journal_close(sg_usage_journal_t *j)
{
    if (j == NULL)
        return;
    if (j->fd >= 0)
        close(j->fd);
    sg_buf_free(&j->line);
    free(j->dir);
    free(j);
}

int sg_usage_journal_append(sg_usage_journal_t *j, const sg_usage_t *const *rows, const int *count_session, size_t n,
                            char *err, size_t errlen)
{
    if (n > APPEND_MAX_ROWS) {
        sg_store__errf(err, errlen, "usage journal: %zu rows in one append, at most %d", n, APPEND_MAX_ROWS);
        return -1;
    }
    if (j->fd >= 0 && j->size >= JOURNAL_ROTATE_BYTES) {
        close(j->fd);
        j->fd = -1;
    }
    if (j->fd < 0 && journal_file(j, err, errlen) != 0)
        return -1;
    sg_buf_reset(&j->line);
    for (size_t i = 0; i < n; i++) {
        const sg_usage_t *u = rows[i];
        if (!row_ok(u, count_session[i])) {
            sg_store__errf(err, errlen, "usage journal: a row of tenant %lld cannot be written as a line",
                           (long long)u->tenant_id);
            return -1;
        }
        char line[LINE_MAX_BYTES];
        sg_buf_append(&j->line, line, row_line(line, u, count_session[i]));
    }
    sg_buf_append(&j->line, APPEND_END, sizeof(APPEND_END) - 1);
    for (size_t off = 0; off < j->line.len;) {
        ssize_t w = write(j->fd, j->line.base + off, j->line.len - off);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        sg_store__errf(err, errlen, "usage journal: write: %s", w < 0 ? strerror(errno) : "nothing written");
        /* none of it stays: cut back, or given up (the next append makes a
         * new file; a catch-up drops the append with no end, its writer
         * gone) */
        if (ftruncate(j->fd, (off_t)j->size) != 0) {
            close(j->fd);
            j->fd = -1;
        }
        return -1;
    }
    j->size += (int64_t)j->line.len;
    return 0;
}

/* ---- the catch-up ---- */

/* A line's words are read by hand, as they are written: sscanf's format
 * machinery costs more than the rest of a row's import. Each takes all of
 * w[0, n) (a word ends at a space or the line's end, where strto* stop):
 * 0, or -1. */
static int word_i64(const char *w, size_t n, int64_t *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(w, &end, 10);
    if (n == 0 || end != w + n || errno != 0)
        return -1;
    *v = x;
    return 0;
}

static int word_int(const char *w, size_t n, int *v)
{
    int64_t x;
    if (word_i64(w, n, &x) != 0 || x < INT_MIN || x > INT_MAX)
        return -1;
    *v = (int)x;
    return 0;
}

static int word_double(const char *w, size_t n, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(w, &end);
    return n != 0 && end == w + n && errno == 0 ? 0 : -1;
}

static int word_copy(const char *w, size_t n, char *out, size_t cap)
{
    if (n == 0 || n >= cap)
        return -1;
    memcpy(out, w, n);
    out[n] = '\0';
    return 0;
}

/* A line (its '\n' cut) as a row: 0, or -1 when it is no row. */
static int parse_row(const char *line, sg_usage_t *u, int *count_session)
{
    const char *w[10];
    size_t n[10], k = 0;

    memset(u, 0, sizeof(*u));
    for (const char *p = line;; p++) {
        const char *sp = strchr(p, ' ');
        if (k == 10)
            return -1;
        w[k] = p;
        n[k++] = sp != NULL ? (size_t)(sp - p) : strlen(p);
        if (sp == NULL)
            break;
        p = sp;
    }
    if (k != 10 || word_i64(w[0], n[0], &u->tenant_id) != 0 || word_int(w[1], n[1], count_session) != 0 ||
        word_copy(w[2], n[2], u->session_id, sizeof(u->session_id)) != 0 ||
        word_copy(w[3], n[3], u->lang, sizeof(u->lang)) != 0 || word_copy(w[4], n[4], u->kind, sizeof(u->kind)) != 0 ||
        word_double(w[5], n[5], &u->started_at) != 0 || word_double(w[6], n[6], &u->duration) != 0 ||
        word_int(w[7], n[7], &u->exit_code) != 0 || word_int(w[8], n[8], &u->timed_out) != 0 ||
        word_i64(w[9], n[9], &u->output_bytes) != 0)
        return -1;
    if (strcmp(u->session_id, "-") == 0)
        u->session_id[0] = '\0';
    return row_ok(u, *count_session) ? 0 : -1;
}

static int journal_get(sg_store_t *st, const char *name, int64_t *at, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_JOURNAL_GET];
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    *at = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    return sg_store__finish(st, s, rc == SQLITE_ROW ? SQLITE_DONE : rc, "usage journal", err, errlen);
}

/* The executions an import counts for sessions, one UPDATE per session
 * (not per row) when flushed, in the import's transaction. */
#define COUNTS_MAX 64
typedef struct {
    int n;
    struct {
        char sid[sizeof(((sg_usage_t *)0)->session_id)];
        int64_t n;
    } s[COUNTS_MAX];
} counts_t;

static int counts_flush(sg_store_t *st, counts_t *c, char *err, size_t errlen)
{
    for (int i = 0; i < c->n; i++) {
        if (sg_store_session_count_exec(st, c->s[i].sid, c->s[i].n, err, errlen) != 0)
            return -1;
    }
    c->n = 0;
    return 0;
}

static int counts_add(sg_store_t *st, counts_t *c, const char *sid, char *err, size_t errlen)
{
    for (int i = 0; i < c->n; i++) {
        if (strcmp(c->s[i].sid, sid) == 0) {
            c->s[i].n++;
            return 0;
        }
    }
    if (c->n == COUNTS_MAX && counts_flush(st, c, err, errlen) != 0)
        return -1;
    strcpy(c->s[c->n].sid, sid);
    c->s[c->n++].n = 1;
    return 0;
}

/* One whole line into the ledger: 0 (also for a line that is no row, or a
 * row the ledger refuses: counted), -1 when the database failed. */
static int import_line(sg_store_t *st, const char *line, size_t len, counts_t *counts, sg_usage_catch_up_t *out,
                       char *err, size_t errlen)
{
    sg_usage_t u;
    int count;

    if (parse_row(line, &u, &count) != 0) {
        out->torn += (long)len + 1;
        return 0;
    }
    if (sg_store_usage_add(st, &u, out->drop_err, sizeof(out->drop_err)) != 0) {
        if ((sqlite3_extended_errcode(st->db) & 0xff) != SQLITE_CONSTRAINT) {
            sg_store__errf(err, errlen, "%s", out->drop_err);
            return -1;
        }
        out->dropped++;
        return 0;
    }
    if (count && counts_add(st, counts, u.session_id, err, errlen) != 0)
        return -1;
    out->imported++;
    return 0;
}

/* The length of the whole appends at the start of buf[0, len): up to the
 * end of the last line "=". */
static size_t whole_appends(const char *buf, size_t len)
{
    for (size_t i = len; i >= 2; i--) {
        if (buf[i - 1] == '\n' && buf[i - 2] == '=' && (i == 2 || buf[i - 3] == '\n'))
            return i;
    }
    return 0;
}

/* Moves the whole appends of fd from where the ledger has it to size (and,
 * writer_gone, drops a broken end), in one transaction: 0 with *at where
 * the file now is on record, or -1 (nothing moved). */
static int import_file(sg_store_t *st, const char *name, int fd, int64_t size, int writer_gone, int64_t *at,
                       sg_usage_catch_up_t *out, char *err, size_t errlen)
{
    char *buf = NULL;
    int64_t pos;
    counts_t counts = {.n = 0};

    if (sg_store__tx(st, S_BEGIN, "usage journal", err, errlen) != 0)
        return -1;
    if (journal_get(st, name, &pos, err, errlen) != 0)
        goto Error;
    buf = sg_xmalloc(READ_CHUNK + 1);
    while (pos < size) {
        size_t want = size - pos < READ_CHUNK ? (size_t)(size - pos) : READ_CHUNK;
        ssize_t r = pread(fd, buf, want, (off_t)pos);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            sg_store__errf(err, errlen, "usage journal %s: %s", name, strerror(errno));
            goto Error;
        }
        size_t used = whole_appends(buf, (size_t)r);
        if (used == 0 && (size_t)r > (size_t)LINE_MAX_BYTES * APPEND_MAX_ROWS) {
            out->torn += (long)r; /* no append is that long */
            pos += r;
            continue;
        }
        if (used == 0)
            break; /* the rest of an append still being written */
        for (size_t at = 0; at < used;) {
            char *nl = memchr(buf + at, '\n', used - at);
            *nl = '\0';
            if (strcmp(buf + at, "=") != 0 &&
                import_line(st, buf + at, (size_t)(nl - buf) - at, &counts, out, err, errlen) != 0)
                goto Error;
            at = (size_t)(nl - buf) + 1;
        }
        pos += (int64_t)used;
    }
    if (pos < size && writer_gone) {
        out->torn += (long)(size - pos); /* its writer died inside a write: never answered */
        pos = size;
    }
    if (counts_flush(st, &counts, err, errlen) != 0)
        goto Error;
    sqlite3_stmt *s = st->stmt[S_JOURNAL_SET];
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, pos);
    if (sg_store__run(st, s, "usage journal", err, errlen) < 0 ||
        sg_store__tx(st, S_COMMIT, "usage journal", err, errlen) != 0)
        goto Error;
    free(buf);
    *at = pos;
    return 0;
Error:
    free(buf);
    sg_store__tx(st, S_ROLLBACK, "usage journal", NULL, 0);
    return -1;
}

/* One file of the journal: what is not on record moved; removed once all
 * of it is and its writer is gone (then nobody will add to it). */
static int catch_up_file(sg_store_t *st, const char *name, sg_usage_catch_up_t *out, char *err, size_t errlen)
{
    char path[4200];
    struct stat sb;
    int64_t at;
    int rc = 0;

    snprintf(path, sizeof(path), "%s/%s", st->journal_dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0; /* removed by another catch-up */
        sg_store__errf(err, errlen, "usage journal %s: %s", path, strerror(errno));
        return -1;
    }
    /* its writer holds LOCK_EX while it writes: once this is ours, the
     * size is final */
    int writer_gone = flock(fd, LOCK_SH | LOCK_NB) == 0;
    if (fstat(fd, &sb) != 0) {
        sg_store__errf(err, errlen, "usage journal %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    rc = journal_get(st, name, &at, err, errlen);
    if (rc == 0 && at < (int64_t)sb.st_size)
        rc = import_file(st, name, fd, (int64_t)sb.st_size, writer_gone, &at, out, err, errlen);
    if (rc == 0 && writer_gone && at >= (int64_t)sb.st_size)
        unlink(path); /* its row in usage_journal stays: a catch-up that
                       * opened the file before must find it on record */
    close(fd);
    return rc;
}

/* A file made and never renamed in (its maker died between the two):
 * empty, and removed once it is UNBORN_S old and nobody holds it. A
 * younger one may be a maker's between its open and its lock. */
#define UNBORN_S 60
static void drop_unborn(sg_store_t *st, const char *name)
{
    char path[4200];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/%s", st->journal_dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    if (fstat(fd, &sb) == 0 && sb.st_mtime < sg_wall_s() - UNBORN_S && flock(fd, LOCK_EX | LOCK_NB) == 0)
        unlink(path);
    close(fd);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

int sg_store_usage_catch_up(sg_store_t *st, sg_usage_catch_up_t *out, char *err, size_t errlen)
{
    sg_usage_catch_up_t local;
    char *names[CATCH_UP_FILES];
    size_t n = 0;
    struct dirent *e;
    int rc = 0;

    if (out == NULL)
        out = &local;
    memset(out, 0, sizeof(*out));
    DIR *d = opendir(st->journal_dir);
    if (d == NULL) {
        if (errno == ENOENT)
            return 0; /* no gateway has written one here */
        sg_store__errf(err, errlen, "usage journal %s: %s", st->journal_dir, strerror(errno));
        return -1;
    }
    while (n < CATCH_UP_FILES && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' && has_suffix(e->d_name, JOURNAL_NEW_EXT))
            drop_unborn(st, e->d_name);
        else if (e->d_name[0] != '.' && has_suffix(e->d_name, JOURNAL_EXT))
            names[n++] = sg_xstrdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof(names[0]), by_name); /* oldest first */
    for (size_t i = 0; i < n; i++) {
        if (rc == 0)
            rc = catch_up_file(st, names[i], out, err, errlen);
        free(names[i]);
    }
    return rc;
}
