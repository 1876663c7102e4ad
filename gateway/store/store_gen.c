/*
 * store_gen.c — the generations (store.h): two counters in one row that
 * triggers move inside the transaction of every change to what a gateway
 * caches, whoever writes it (a gateway, sandgate-admin); and their signal,
 * a counter in a small file beside the database (<path>-gen) that every
 * connection opened here maps and moves after a commit that moved them,
 * so that a reader need not read the row while the counter stands still.
 *
 * The connection learns that a transaction moved the row from SQLite's
 * update hook (it sees the triggers' writes too), and that the
 * transaction is in from the WAL hook, which SQLite calls after the commit
 * with the write lock released: a reader that sees the counter moved and
 * then reads the row sees the change. Setting a WAL hook takes the place
 * of SQLite's automatic checkpoint, so the hook does that too, as SQLite
 * would (SG_STORE_CHECKPOINT_FRAMES).
 */
#include "store_sql.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* SQLite's own wal_autocheckpoint default. */
#define SG_STORE_CHECKPOINT_FRAMES 1000

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

int sg_store__gen_open(sg_store_t *st, char *err, size_t errlen)
{
    size_t n = strlen(st->path) + sizeof("-gen");
    char *path = sg_xmalloc(n);
    struct stat sb;
    int fd;

    snprintf(path, n, "%s-gen", st->path);
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
    st->checkpoint = SG_STORE_CHECKPOINT_FRAMES;
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

void sg_store__gen_close(sg_store_t *st)
{
    if (st->gen_seq != NULL)
        munmap(st->gen_seq, sizeof(uint64_t));
    st->gen_seq = NULL;
}

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
