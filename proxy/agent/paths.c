/*
 * paths.c — the confinement of request paths to the work dir (see
 * paths.h), moved out of request.c unchanged in behaviour: the same checks,
 * in the same order, with the same ERROR codes and sentences.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_proto.h"
#include "paths.h"

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
        agent_fail(f, code, "The file \"%.200s\" does not exist.", path);
    else if (e == EISDIR)
        agent_fail(f, code, "The path \"%.200s\" names a directory, not a file.", path);
    else if (code == SG_AGENT_ERR_PATH)
        agent_fail(f, code, "The path \"%.200s\" goes through a symbolic link or something that is not a directory.",
                   path);
    else
        agent_fail(f, code, "Cannot open \"%.200s\": %s.", path, strerror(e));
}

/* openat(dfd, name, O_DIRECTORY | O_NOFOLLOW), which gVisor (runsc, at
 * least its 2022 builds) gets wrong: with O_DIRECTORY it follows a symbolic
 * link. Without O_DIRECTORY it refuses one (ELOOP) like Linux, so the
 * directory check is made on the open file instead (O_NONBLOCK: a FIFO
 * there must not block the open). */
int sg_agent_open_dir_nofollow(int dfd, const char *name)
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
            agent_fail(f, SG_AGENT_ERR_PATH, "The path \"%.200s\" is outside the work directory %s.", path, workdir);
            goto Error;
        }
    }
    /* Refuse ".." anywhere before touching the file system. */
    for (dots = rel; (dots = strstr(dots, "..")) != NULL; dots += 2) {
        if ((dots == rel || dots[-1] == '/') && (dots[2] == '/' || dots[2] == '\0')) {
            agent_fail(f, SG_AGENT_ERR_PATH,
                       "The path \"%.200s\" contains \"..\"; paths must stay inside the work directory.", path);
            goto Error;
        }
    }
    walk = agent_xstrdup(rel);
    dfd = open(workdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        agent_fail(f, SG_AGENT_ERR_IO, "Cannot open the work directory %s: %s.", workdir, strerror(errno));
        goto Error;
    }

    leaf[0] = '\0';
    for (comp = strtok_r(walk, "/", &next); comp != NULL; comp = after) {
        after = strtok_r(NULL, "/", &next);
        if (strcmp(comp, ".") == 0)
            continue;
        if (after == NULL) {
            if (strlen(comp) >= leafsz) {
                agent_fail(f, SG_AGENT_ERR_PATH, "The path \"%.200s\" has a name that is too long.", path);
                goto Error;
            }
            strcpy(leaf, comp);
            break;
        }
        nfd = sg_agent_open_dir_nofollow(dfd, comp);
        if (nfd < 0 && errno == ENOENT && create) {
            if (mkdirat(dfd, comp, 0755) != 0 && errno != EEXIST) {
                agent_fail(f, SG_AGENT_ERR_IO, "Cannot create the directory \"%.200s\" for \"%.200s\": %s.", comp, path,
                           strerror(errno));
                goto Error;
            }
            nfd = sg_agent_open_dir_nofollow(dfd, comp);
        }
        if (nfd < 0) {
            sg_agent_path_fail(f, path, errno);
            goto Error;
        }
        close(dfd);
        dfd = nfd;
    }
    if (leaf[0] == '\0') {
        agent_fail(f, SG_AGENT_ERR_PATH, "The path \"%.200s\" names a directory, not a file.", path);
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
