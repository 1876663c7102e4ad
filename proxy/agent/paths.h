/*
 * paths.h — the confinement of a request's file path to the work dir
 * (PUT_FILE, GET_FILE). Apart from the agent's loop and libc only, so that
 * unit tests and the fuzz targets (fuzz/) reach it without running an agent.
 */
#ifndef SANDGATE_AGENT_PATHS_H
#define SANDGATE_AGENT_PATHS_H

#include <stddef.h>

#include "agent.h"

/* Opens the directory that holds the last component of path (as a request
 * gave it: relative to workdir, or absolute inside it), walking from
 * workdir one component at a time without following any symlink and
 * refusing ".." before touching the file system; with create, missing
 * directories on the way are made (0755). workdir is absolute, without a
 * trailing slash unless it is "/". On success the last component (never
 * empty, ".", nor "..", no '/') is in leaf and the directory's fd
 * (O_CLOEXEC) is returned: it is workdir or a directory under it. -1 with f
 * filled otherwise. */
int sg_agent_open_parent(const char *workdir, const char *path, int create, char *leaf, size_t leafsz,
                         sg_agent_fail_t *f);

/* The directory name in dfd, opened (O_RDONLY | O_CLOEXEC) only if it is
 * one and no symbolic link; -1 (errno; ENOTDIR for something else) otherwise.
 * gVisor-proof: see paths.c. */
int sg_agent_open_dir_nofollow(int dfd, const char *name);

/* The ERROR for a file operation on path that failed with errno e. */
void sg_agent_path_fail(sg_agent_fail_t *f, const char *path, int e);

#endif
