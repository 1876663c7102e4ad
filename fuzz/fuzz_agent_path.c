/*
 * fuzz_agent_path — the agent's confinement of file paths
 * (sg_agent_open_parent, proxy/agent/request.c: PUT_FILE and GET_FILE),
 * against a real directory tree built once in a private temporary
 * directory: a work dir holding files, directories and symlinks that point
 * out of it (relative, absolute, to a directory, to a file), beside a
 * directory that must stay out of reach.
 *
 * Input: one byte of choices (create missing directories; prefix the work
 * dir's absolute path), then the path. Invariants: a directory handed back
 * is the work dir or lies under it (checked through /proc/self/fd, after
 * symlinks), the leaf is one plain name (not empty, ".", "..", no '/');
 * a refusal names a known error code and a sentence; no descriptor leaks.
 * With create, the directories made are removed after each input.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent_proto.h"
#include "fuzz.h"
#include "request.h"

static char root[PATH_MAX];
/* Directories the confinement made (in create mode), removed again after
 * each input, newest first: the writable work dir is back as it was. */
static char **made;
static size_t n_made, cap_made;

int mkdirat(int dfd, const char *path, mode_t mode)
{
    char at[64], dir[PATH_MAX];
    int rc = (int)syscall(SYS_mkdirat, dfd, path, mode);
    if (rc == 0) {
        snprintf(at, sizeof(at), "/proc/self/fd/%d", dfd);
        ssize_t n = readlink(at, dir, sizeof(dir) - 1);
        CHECK(n > 0);
        dir[n] = '\0';
        if (n_made == cap_made) {
            cap_made = cap_made ? cap_made * 2 : 16;
            made = realloc(made, cap_made * sizeof(*made));
        }
        made[n_made] = malloc(strlen(dir) + strlen(path) + 2);
        sprintf(made[n_made++], "%s/%s", dir, path);
    }
    return rc;
}

static char work_ro[PATH_MAX], work_rw[PATH_MAX];
static char real_ro[PATH_MAX], real_rw[PATH_MAX];

static void must(int ok, const char *what)
{
    if (!ok) {
        perror(what);
        abort();
    }
}

static void mkfile(const char *dir, const char *name)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    must(fd >= 0, p);
    must(write(fd, "x\n", 2) == 2, p);
    close(fd);
}

static void mk(const char *dir, const char *name)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    must(mkdir(p, 0755) == 0 || errno == EEXIST, p);
}

static void ln(const char *dir, const char *target, const char *name)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    must(symlink(target, p) == 0, p);
}

/* The same tree in both work dirs. */
static void populate(const char *w)
{
    mk(w, "a");
    mk(w, "a/b");
    mk(w, "...");
    mkfile(w, "a/b/c.txt");
    mkfile(w, "file");
    ln(w, "../outside", "up");
    ln(w, "/", "slash");
    ln(w, "/etc", "etc");
    ln(w, "a", "alias");
    ln(w, "../outside/secret", "secret");
    ln(w, "a/../../outside", "a/b/back");
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof(root), "%s/sgfuzz-path.XXXXXX", tmp != NULL && tmp[0] ? tmp : "/tmp");
    must(mkdtemp(root) != NULL, "mkdtemp");
    mk(root, "outside");
    mk(root, "outside/dir");
    mkfile(root, "outside/secret");
    snprintf(work_ro, sizeof(work_ro), "%s/sandbox", root);
    snprintf(work_rw, sizeof(work_rw), "%s/sandbox-rw", root);
    mk(work_ro, "");
    mk(work_rw, "");
    populate(work_ro);
    populate(work_rw);
    must(realpath(work_ro, real_ro) != NULL, "realpath");
    must(realpath(work_rw, real_rw) != NULL, "realpath");
    return 0;
}

/* The tree stays behind when libFuzzer exits at a crash; fuzz/run.sh runs
 * every target with TMPDIR in its scratch directory and removes that. */

static int under(const char *p, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(p, dir, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    uint8_t how = fuzz_u8(&in);
    int create = how & 1;
    const char *work = create ? work_rw : work_ro, *real = create ? real_rw : real_ro;
    char path[PATH_MAX * 2], leaf[NAME_MAX + 1], fdlink[64], resolved[PATH_MAX];
    size_t n = 0, plen;
    sg_agent_fail_t f;
    int fd, probe_before, probe_after;

    if (in.len >= PATH_MAX)
        return 0;
    if (how & 2)
        n = (size_t)snprintf(path, sizeof(path), "%s/", work);
    plen = strnlen((const char *)in.p, in.len); /* a NUL ends it, as take_path refuses one */
    memcpy(path + n, in.p, plen);
    path[n + plen] = '\0';
    if (path[0] == '\0')
        return 0; /* take_path refuses an empty path */

    probe_before = dup(2);
    close(probe_before);
    memset(&f, 0, sizeof(f));
    fd = sg_agent_open_parent(work, path, create, leaf, sizeof(leaf), &f);
    if (fd >= 0) {
        struct stat st;
        CHECK(fstat(fd, &st) == 0 && S_ISDIR(st.st_mode));
        snprintf(fdlink, sizeof(fdlink), "/proc/self/fd/%d", fd);
        ssize_t r = readlink(fdlink, resolved, sizeof(resolved) - 1);
        CHECK(r > 0);
        resolved[r] = '\0';
        if (!under(resolved, real)) {
            fprintf(stderr, "path \"%s\" escaped to \"%s\"\n", path, resolved);
            CHECK(!"the directory is inside the work dir");
        }
        CHECK(leaf[0] != '\0' && strchr(leaf, '/') == NULL);
        CHECK(strcmp(leaf, ".") != 0 && strcmp(leaf, "..") != 0);
        close(fd);
    } else {
        CHECK(f.code >= SG_AGENT_ERR_BAD_REQUEST && f.code <= SG_AGENT_ERR_IO);
        CHECK(f.msg[0] != '\0' && memchr(f.msg, '\0', sizeof(f.msg)) != NULL);
    }
    probe_after = dup(2);
    close(probe_after);
    CHECK(probe_after == probe_before);
    while (n_made > 0) {
        n_made--;
        CHECK(rmdir(made[n_made]) == 0);
        free(made[n_made]);
    }
    return 0;
}
