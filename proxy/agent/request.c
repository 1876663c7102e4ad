/*
 * request.c — the agent's request decoders and path confinement (see
 * request.h). Moved out of agent.c unchanged in behaviour: the same checks,
 * in the same order, with the same ERROR codes and sentences.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_proto.h"
#include "request.h"

static int fail(sg_agent_fail_t *f, uint32_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(sg_agent_fail_t *f, uint32_t code, const char *fmt, ...)
{
    va_list ap;

    f->code = code;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof(f->msg), fmt, ap);
    va_end(ap);
    return -1;
}

/* A NUL-terminated copy of a string field; NULL if it holds a NUL (or
 * memory runs out). */
static char *dup_field(const uint8_t *s, size_t len)
{
    char *p;

    if (memchr(s, '\0', len) != NULL)
        return NULL;
    p = malloc(len + 1);
    if (p == NULL)
        return NULL;
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

/* ---- payloads -------------------------------------------------------- */

void sg_agent_exec_req_free(sg_agent_exec_req_t *x)
{
    free(x->setup_cmd);
    free(x->setup_stage);
    free(x->run_cmd);
    free(x->file_path);
    free(x->kernel_cmd);
    x->setup_cmd = x->setup_stage = x->run_cmd = x->file_path = x->kernel_cmd = NULL;
}

int sg_agent_exec_req_decode(const uint8_t *payload, size_t len, sg_agent_exec_req_t *x, sg_agent_fail_t *f)
{
    sg_agent_reader_t r;
    const uint8_t *s[5];
    size_t sl[5];
    int i;

    memset(x, 0, sizeof(*x));
    sg_agent_reader_init(&r, payload, len);
    sg_agent_get_u32(&r, &x->timeout_ms);
    sg_agent_get_u32(&r, &x->output_cap);
    for (i = 0; i < 5; i++)
        sg_agent_get_str(&r, &s[i], &sl[i]);
    sg_agent_get_rest(&r, &x->code, &x->code_len);
    if (r.failed)
        return fail(f, SG_AGENT_ERR_BAD_REQUEST, "The EXEC request is malformed.");
    x->setup_cmd = dup_field(s[0], sl[0]);
    x->setup_stage = dup_field(s[1], sl[1]);
    x->run_cmd = dup_field(s[2], sl[2]);
    x->file_path = dup_field(s[3], sl[3]);
    x->kernel_cmd = dup_field(s[4], sl[4]);
    if (x->setup_cmd == NULL || x->setup_stage == NULL || x->run_cmd == NULL || x->file_path == NULL ||
        x->kernel_cmd == NULL) {
        sg_agent_exec_req_free(x);
        return fail(f, SG_AGENT_ERR_BAD_REQUEST, "The EXEC request has a command, stage or path containing a NUL byte.");
    }
    return 0;
}

/* Checks shared by PUT_FILE and GET_FILE; a NUL-terminated copy. */
static char *take_path(const uint8_t *s, size_t len, sg_agent_fail_t *f)
{
    char *path;

    if (len == 0) {
        fail(f, SG_AGENT_ERR_PATH, "The path is empty.");
        return NULL;
    }
    if (memchr(s, '\0', len) != NULL) {
        fail(f, SG_AGENT_ERR_PATH, "The path contains a NUL byte.");
        return NULL;
    }
    path = dup_field(s, len);
    if (path == NULL)
        fail(f, SG_AGENT_ERR_IO, "Out of memory.");
    return path;
}

int sg_agent_put_req_decode(const uint8_t *payload, size_t len, sg_agent_put_req_t *p, sg_agent_fail_t *f)
{
    sg_agent_reader_t r;
    const uint8_t *ps;
    size_t plen;

    memset(p, 0, sizeof(*p));
    sg_agent_reader_init(&r, payload, len);
    sg_agent_get_str(&r, &ps, &plen);
    sg_agent_get_u32(&r, &p->mode);
    sg_agent_get_rest(&r, &p->data, &p->data_len);
    if (r.failed)
        return fail(f, SG_AGENT_ERR_BAD_REQUEST, "The PUT_FILE request is malformed.");
    if ((p->path = take_path(ps, plen, f)) == NULL)
        return -1;
    return 0;
}

int sg_agent_get_req_decode(const uint8_t *payload, size_t len, sg_agent_get_req_t *g, sg_agent_fail_t *f)
{
    sg_agent_reader_t r;
    const uint8_t *ps;
    size_t plen;

    memset(g, 0, sizeof(*g));
    sg_agent_reader_init(&r, payload, len);
    sg_agent_get_str(&r, &ps, &plen);
    sg_agent_get_u32(&r, &g->max_bytes);
    if (r.failed || r.off != r.len)
        return fail(f, SG_AGENT_ERR_BAD_REQUEST, "The GET_FILE request is malformed.");
    if (g->max_bytes > SG_AGENT_MAX_PAYLOAD)
        g->max_bytes = SG_AGENT_MAX_PAYLOAD;
    if ((g->path = take_path(ps, plen, f)) == NULL)
        return -1;
    return 0;
}

/* ---- paths ----------------------------------------------------------- */

static uint32_t errno_to_err(int e)
{
    switch (e) {
    case ENOENT:
        return SG_AGENT_ERR_NOT_FOUND;
    case ELOOP:
    case ENOTDIR:
    case EISDIR:
    case ENAMETOOLONG:
    case ENXIO: /* O_NONBLOCK open of a FIFO without reader */
        return SG_AGENT_ERR_PATH;
    }
    return SG_AGENT_ERR_IO;
}

void sg_agent_path_fail(sg_agent_fail_t *f, const char *path, int e)
{
    uint32_t code = errno_to_err(e);

    if (code == SG_AGENT_ERR_NOT_FOUND)
        fail(f, code, "The file \"%.200s\" does not exist.", path);
    else if (e == EISDIR)
        fail(f, code, "The path \"%.200s\" names a directory, not a file.", path);
    else if (code == SG_AGENT_ERR_PATH)
        fail(f, code, "The path \"%.200s\" goes through a symbolic link or something that is not a directory.", path);
    else
        fail(f, code, "Cannot open \"%.200s\": %s.", path, strerror(e));
}

/* openat(dfd, name, O_DIRECTORY | O_NOFOLLOW), which gVisor (runsc, at
 * least its 2022 builds) gets wrong: with O_DIRECTORY it follows a symbolic
 * link. Without O_DIRECTORY it refuses one (ELOOP) like Linux, so the
 * directory check is made on the open file instead (O_NONBLOCK: a FIFO
 * there must not block the open). */
static int open_dir_nofollow(int dfd, const char *name)
{
    struct stat st;
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) {
        close(fd);
        errno = ENOTDIR;
        return -1;
    }
    return fd;
}

int sg_agent_open_parent(const char *workdir, const char *path, int create, char *leaf, size_t leafsz,
                         sg_agent_fail_t *f)
{
    size_t wlen = strlen(workdir);
    const char *rel = path, *dots;
    char *walk = NULL, *comp, *next, *after;
    int dfd = -1, nfd;

    if (*path == '/') {
        if (strcmp(workdir, "/") == 0) {
            rel = path + 1;
        } else if (strncmp(path, workdir, wlen) == 0 && (path[wlen] == '/' || path[wlen] == '\0')) {
            rel = path + wlen;
        } else {
            fail(f, SG_AGENT_ERR_PATH, "The path \"%.200s\" is outside the work directory %s.", path, workdir);
            goto Error;
        }
    }
    /* Refuse ".." anywhere before touching the file system. */
    for (dots = rel; (dots = strstr(dots, "..")) != NULL; dots += 2) {
        if ((dots == rel || dots[-1] == '/') && (dots[2] == '/' || dots[2] == '\0')) {
            fail(f, SG_AGENT_ERR_PATH, "The path \"%.200s\" contains \"..\"; paths must stay inside the work directory.",
                 path);
            goto Error;
        }
    }
    if ((walk = strdup(rel)) == NULL) {
        fail(f, SG_AGENT_ERR_IO, "Out of memory.");
        goto Error;
    }
    dfd = open(workdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        fail(f, SG_AGENT_ERR_IO, "Cannot open the work directory %s: %s.", workdir, strerror(errno));
        goto Error;
    }

    leaf[0] = '\0';
    for (comp = strtok_r(walk, "/", &next); comp != NULL; comp = after) {
        after = strtok_r(NULL, "/", &next);
        if (strcmp(comp, ".") == 0)
            continue;
        if (after == NULL) {
            if (strlen(comp) >= leafsz) {
                fail(f, SG_AGENT_ERR_PATH, "The path \"%.200s\" has a name that is too long.", path);
                goto Error;
            }
            strcpy(leaf, comp);
            break;
        }
        nfd = open_dir_nofollow(dfd, comp);
        if (nfd < 0 && errno == ENOENT && create) {
            if (mkdirat(dfd, comp, 0755) != 0 && errno != EEXIST) {
                fail(f, SG_AGENT_ERR_IO, "Cannot create the directory \"%.200s\" for \"%.200s\": %s.", comp, path,
                     strerror(errno));
                goto Error;
            }
            nfd = open_dir_nofollow(dfd, comp);
        }
        if (nfd < 0) {
            sg_agent_path_fail(f, path, errno);
            goto Error;
        }
        close(dfd);
        dfd = nfd;
    }
    if (leaf[0] == '\0') {
        fail(f, SG_AGENT_ERR_PATH, "The path \"%.200s\" names a directory, not a file.", path);
        goto Error;
    }
    free(walk);
    return dfd;

Error:
    free(walk);
    if (dfd >= 0)
        close(dfd);
    return -1;
}
