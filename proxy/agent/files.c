/*
 * files.c — PUT_FILE and GET_FILE (see files.h); decode.h decodes them,
 * paths.h confines their paths.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "files.h"
#include "paths.h"
#include "decode.h"

/* Open the file path names (paths.h: create makes the missing directories
 * on the way) with flags, O_NOFOLLOW and O_NONBLOCK (a FIFO must fail with
 * ENXIO, never hang the agent), and check that it is a regular file. The
 * fd with *st filled, or -1 with f filled. */
static int open_regular(const char *path, int create, int flags, mode_t mode, struct stat *st, sg_agent_fail_t *f)
{
    char leaf[NAME_MAX + 1];
    int dfd, fd;

    if ((dfd = sg_agent_open_parent(agent_workdir, path, create, leaf, sizeof(leaf), f)) < 0)
        return -1;
    fd = openat(dfd, leaf, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
    if (fd < 0) {
        sg_agent_path_fail(f, path, errno);
        goto Error;
    }
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        agent_fail(f, SG_AGENT_ERR_PATH, "The path \"%.200s\" is not a regular file.", path);
        goto Error;
    }
    close(dfd);
    return fd;

Error:
    if (fd >= 0)
        close(fd);
    close(dfd);
    return -1;
}

void files_put(uint32_t id, const uint8_t *payload, size_t len)
{
    sg_agent_put_req_t q;
    sg_agent_fail_t f;
    int fd = -1;
    struct stat st;

    if (sg_agent_put_req_decode(payload, len, &q, &f) != 0) {
        agent_send_fail(id, &f);
        goto Exit;
    }
    fd = open_regular(q.path, 1, O_WRONLY | O_CREAT | O_TRUNC, (mode_t)(q.mode & 0777), &st, &f);
    if (fd < 0) {
        agent_send_fail(id, &f);
        goto Exit;
    }
    /* The umask and an existing file's mode must not win over the request. */
    fchmod(fd, (mode_t)(q.mode & 0777));
    if (agent_write_full(fd, q.data, q.data_len) != 0) {
        agent_send_error(id, SG_AGENT_ERR_IO, "Cannot write \"%.200s\": %s.", q.path, strerror(errno));
        goto Exit;
    }
    agent_send_ok(id, q.data_len);

Exit:
    if (fd >= 0)
        close(fd);
    free(q.path);
}

void files_get(uint32_t id, const uint8_t *payload, size_t len)
{
    sg_agent_get_req_t q;
    sg_agent_fail_t f;
    size_t got = 0, start;
    const char *path;
    uint8_t *data = NULL;
    int fd = -1, rr;
    struct stat st;

    if (sg_agent_get_req_decode(payload, len, &q, &f) != 0) {
        agent_send_fail(id, &f);
        goto Exit;
    }
    path = q.path;
    fd = open_regular(path, 0, O_RDONLY, 0, &st, &f);
    if (fd < 0) {
        agent_send_fail(id, &f);
        goto Exit;
    }
    if ((uint64_t)st.st_size > q.max_bytes) {
        agent_send_error(id, SG_AGENT_ERR_TOO_LARGE, "The file \"%.200s\" is %llu bytes, more than the %u allowed.",
                         path, (unsigned long long)st.st_size, q.max_bytes);
        goto Exit;
    }

    /* Read straight into the reply. */
    start = agent_out.len;
    if (sg_agent_msg_begin(&agent_out, SG_AGENT_FILE, id) != 0)
        agent_oom();
    if (st.st_size > 0)
        data = agent_xmalloc((size_t)st.st_size);
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, data + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            agent_out.len = start;
            agent_send_error(id, SG_AGENT_ERR_IO, "Cannot read \"%.200s\": %s.", path, strerror(errno));
            goto Exit;
        }
        if (n == 0)
            break; /* shrank meanwhile: send what there is */
        got += (size_t)n;
    }
    rr = sg_agent_put_rest(&agent_out, data, got);
    sg_agent_msg_end(&agent_out, start);
    agent_flush(rr);

Exit:
    free(data);
    if (fd >= 0)
        close(fd);
    free(q.path);
}
