/*
 * results.c — the result channel's framing and the out directory's listing
 * (see results.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "paths.h"
#include "results.h"

enum { RES_HEAD, RES_BODY, RES_SKIP, RES_BROKEN };

#define HEAD_DIGITS 10 /* "<decimal length>": up to 9999999999 */

void results_begin(results_t *r)
{
    memset(r, 0, sizeof(*r));
    r->state = RES_HEAD;
}

static void dropped(run_t *x)
{
    x->exit_flags |= SG_AGENT_EXIT_RESULTS_DROPPED;
}

/* The channel's framing is lost for this EXEC: everything else is thrown away. */
static void broken(results_t *r, run_t *x)
{
    sg_agent_buf_free(&r->msg);
    r->state = RES_BROKEN;
    dropped(x);
}

/* The record is whole: its RESULT goes out, and its memory with it. */
static void send_result(results_t *r)
{
    sg_agent_msg_end(&r->msg, 0);
    agent_send_buf(&r->msg, r->failed);
    sg_agent_buf_free(&r->msg);
    r->count++;
    r->bytes += r->need;
}

/* A whole length line: keep the record, or skip it. */
static void start_record(results_t *r, run_t *x)
{
    uint64_t len = 0;
    size_t i;

    for (i = 0; i < r->hlen; i++)
        len = len * 10 + (uint64_t)(r->head[i] - '0');
    r->hlen = 0;
    if (len == 0) {
        dropped(x);
        return;
    }
    if (r->count >= SG_AGENT_RESULTS_MAX || len > SG_AGENT_RESULTS_MAX_BYTES - r->bytes) {
        r->skip = len;
        r->state = RES_SKIP;
        dropped(x);
        return;
    }
    /* the message is built as the record comes: one copy of it, never two */
    sg_agent_buf_free(&r->msg);
    r->failed = sg_agent_msg_begin(&r->msg, SG_AGENT_RESULT, x->id);
    r->need = (size_t)len;
    r->got = 0;
    r->state = RES_BODY;
}

void results_feed(results_t *r, run_t *x, const uint8_t *p, size_t n)
{
    while (n > 0) {
        size_t take;

        switch (r->state) {
        case RES_HEAD:
            if (*p == '\n' && r->hlen > 0) {
                start_record(r, x);
            } else if (*p < '0' || *p > '9' || r->hlen == HEAD_DIGITS) {
                broken(r, x);
                return;
            } else {
                r->head[r->hlen++] = (char)*p;
            }
            p++;
            n--;
            break;
        case RES_BODY:
            take = n < r->need - r->got ? n : r->need - r->got;
            r->failed |= sg_agent_put_rest(&r->msg, p, take);
            r->got += take;
            p += take;
            n -= take;
            if (r->got == r->need) {
                send_result(r);
                r->state = RES_HEAD;
            }
            break;
        case RES_SKIP:
            take = (uint64_t)n < r->skip ? n : (size_t)r->skip;
            r->skip -= take;
            p += take;
            n -= take;
            if (r->skip == 0)
                r->state = RES_HEAD;
            break;
        default: /* RES_BROKEN */
            return;
        }
    }
}

int results_read(results_t *r, run_t *x, int fd)
{
    static uint8_t buf[SG_AGENT_OUTPUT_CHUNK];
    ssize_t n = read(fd, buf, sizeof(buf));

    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    if (n == 0)
        return -1;
    results_feed(r, x, buf, (size_t)n);
    return 1;
}

int results_drain(results_t *r, run_t *x, int fd)
{
    uint64_t total = 0;
    int rc;

    while (total < (uint64_t)SG_AGENT_RESULTS_MAX_BYTES + DRAIN_LIMIT) {
        rc = results_read(r, x, fd);
        if (rc <= 0)
            return rc;
        total += SG_AGENT_OUTPUT_CHUNK; /* at most that much per read */
    }
    return 0;
}

void results_end(results_t *r, run_t *x)
{
    if (r->state == RES_BODY || r->state == RES_SKIP || (r->state == RES_HEAD && r->hlen > 0))
        dropped(x); /* cut off by the end of the run */
    sg_agent_buf_free(&r->msg);
}

/* ---- the out directory ------------------------------------------------ */

#define VISIT_MAX 20000 /* directory entries looked at, at most */

typedef struct {
    char *path;
    uint64_t size;
} entry_t;

typedef struct {
    entry_t *v;
    size_t n;
    uint32_t flags;
    size_t visited;
} listing_t;

/* A directory below the out directory: no symbolic link followed, nothing
 * but a directory opened (O_DIRECTORY: a FIFO is refused, not opened). */
static int open_subdir(int dfd, const char *name)
{
    return openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

typedef struct {
    listing_t *l;
    int dfd;
    char *path; /* path[0..plen) is dfd's */
    size_t plen;
    int depth;
} walk_t;

static void walk(listing_t *l, int dfd, char *path, size_t plen, int depth);

/* One entry of a directory walk() lists: 0 to go on, 1 to stop. */
static int walk_entry(void *ctx, const char *name)
{
    walk_t *w = ctx;
    listing_t *l = w->l;
    struct stat st;
    size_t nlen = strlen(name);
    int sub;

    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return 0;
    if (++l->visited > VISIT_MAX) {
        l->flags |= SG_AGENT_FILES_MORE;
        return 1;
    }
    if (fstatat(w->dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return 0; /* gone meanwhile */
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        return 0; /* links, FIFOs, sockets, devices: not files out */
    if (w->plen + 1 + nlen > SG_AGENT_FILES_PATH_MAX) {
        l->flags |= SG_AGENT_FILES_MORE;
        return 0;
    }
    w->path[w->plen] = '/';
    memcpy(w->path + w->plen + 1, name, nlen + 1);
    if (S_ISREG(st.st_mode)) {
        if (l->n == SG_AGENT_FILES_MAX) {
            l->flags |= SG_AGENT_FILES_MORE;
        } else {
            l->v[l->n].path = agent_xstrdup(w->path);
            l->v[l->n].size = (uint64_t)st.st_size;
            l->n++;
        }
    } else if (w->depth == SG_AGENT_FILES_MAX_DEPTH) {
        l->flags |= SG_AGENT_FILES_MORE;
    } else if ((sub = open_subdir(w->dfd, name)) >= 0) {
        walk(l, sub, w->path, w->plen + 1 + nlen, w->depth + 1);
    }
    w->path[w->plen] = '\0';
    return 0;
}

/* The regular files below the directory dfd (consumed), whose path is
 * path[0..plen), listed with agent_dir_each: this runs after every EXEC
 * (under gVisor each system call costs tens of microseconds). */
static void walk(listing_t *l, int dfd, char *path, size_t plen, int depth)
{
    /* one buffer per depth: a directory's listing goes on after its
     * subdirectories' */
    static union {
        struct dirent64 align;
        char bytes[32768];
    } bufs[SG_AGENT_FILES_MAX_DEPTH + 1];
    walk_t w = {l, dfd, path, plen, depth};

    agent_dir_each(dfd, bufs[depth].bytes, sizeof(bufs[depth].bytes), walk_entry, &w);
    close(dfd);
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const entry_t *)a)->path, ((const entry_t *)b)->path);
}

void results_send_files(run_t *x)
{
    char path[SG_AGENT_FILES_PATH_MAX + NAME_MAX + 2];
    listing_t l;
    int dfd, rc;
    size_t i;

    /* the work dir, opened once: a root-owned mount point in a sandbox
     * (under gVisor every open and close costs) */
    static int wfd = -1;
    if (wfd < 0 && (wfd = open(agent_workdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return;
    dfd = open_subdir(wfd, SG_AGENT_OUT_DIR);
    if (dfd < 0)
        return; /* no out directory (or not a directory): no FILES */
    memset(&l, 0, sizeof(l));
    l.v = agent_xcalloc(SG_AGENT_FILES_MAX, sizeof(*l.v));
    /* "/sandbox/out"; a work dir "/" gives "/out" */
    snprintf(path, sizeof(path), "%s/%s", strcmp(agent_workdir, "/") == 0 ? "" : agent_workdir, SG_AGENT_OUT_DIR);
    walk(&l, dfd, path, strlen(path), 0);
    qsort(l.v, l.n, sizeof(*l.v), cmp_entry);

    size_t start = agent_out.len;
    rc = sg_agent_msg_begin(&agent_out, SG_AGENT_FILES, x->id);
    rc |= sg_agent_put_u32(&agent_out, l.flags);
    rc |= sg_agent_put_u32(&agent_out, (uint32_t)l.n);
    for (i = 0; i < l.n; i++) {
        rc |= sg_agent_put_str(&agent_out, l.v[i].path, strlen(l.v[i].path));
        rc |= sg_agent_put_u64(&agent_out, l.v[i].size);
        free(l.v[i].path);
    }
    sg_agent_msg_end(&agent_out, start);
    if (rc != 0)
        agent_oom();
    /* left in agent_out: it goes with the EXIT that follows, in one write */
    free(l.v);
}
