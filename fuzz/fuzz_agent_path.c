/*
 * fuzz_agent_path — the agent's confinement of file paths
 * (sg_agent_open_parent, proxy/agent/paths.c: PUT_FILE and GET_FILE),
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
 * With create, the directories made (real directories, empty but for each
 * other, on the input's own path) are removed after each input.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_proto.h"
#include "fuzz.h"
#include "paths.h"

static char root[PATH_MAX];
static char work_ro[PATH_MAX], work_rw[PATH_MAX];
static char real_ro[PATH_MAX], real_rw[PATH_MAX];
static int work_rw_fd = -1;

/* What populate() builds, relative to a work dir; the directories first. */
static const char *const tree_dirs[] = {"a", "a/b", "..."};
static const char *const tree_others[] = {"a/b/c.txt", "file", "up", "slash", "etc", "alias", "secret", "a/b/back"};

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
    work_rw_fd = open(work_rw, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    must(work_rw_fd >= 0, work_rw);
    return 0;
}

/* The tree stays behind when libFuzzer exits at a crash; fuzz/run.sh runs
 * every target with TMPDIR in its scratch directory and removes that. */

static int under(const char *p, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(p, dir, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

static int in_list(const char *rel, const char *const *list, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (strcmp(rel, list[i]) == 0)
            return 1;
    }
    return 0;
}

/* After an input in create mode: the directories it made are prefixes of
 * its path (the confinement walks no symlink), so each prefix of the path
 * inside the writable work dir that is a real directory populate() did not
 * make is one of them, until the first that is none. They are removed,
 * deepest first, and must be empty but for each other. */
static void remove_made(const char *path)
{
    size_t wlen = strlen(work_rw), n = 0, len = 0, i;
    const char *rel = path;
    char walk[PATH_MAX * 2], prefix[PATH_MAX * 2], *comp, *next, *made[PATH_MAX];

    if (*path == '/') {
        if (strncmp(path, work_rw, wlen) != 0 || (path[wlen] != '/' && path[wlen] != '\0'))
            return; /* refused before anything was touched */
        rel = path + wlen;
    }
    snprintf(walk, sizeof(walk), "%s", rel);
    for (comp = strtok_r(walk, "/", &next); comp != NULL; comp = strtok_r(NULL, "/", &next)) {
        struct stat st;

        if (strcmp(comp, ".") == 0)
            continue;
        if (strcmp(comp, "..") == 0)
            break; /* refused before anything was touched */
        len += (size_t)snprintf(prefix + len, sizeof(prefix) - len, "%s%s", len != 0 ? "/" : "", comp);
        if (in_list(prefix, tree_dirs, sizeof(tree_dirs) / sizeof(tree_dirs[0])))
            continue;
        if (in_list(prefix, tree_others, sizeof(tree_others) / sizeof(tree_others[0])))
            break;
        if (fstatat(work_rw_fd, prefix, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
            break;
        made[n] = strdup(prefix);
        CHECK(made[n] != NULL);
        n++;
    }
    for (i = n; i-- > 0;) {
        if (unlinkat(work_rw_fd, made[i], AT_REMOVEDIR) != 0) {
            fprintf(stderr, "cannot remove \"%s\" (made for \"%s\"): %s\n", made[i], path, strerror(errno));
            CHECK(!"a directory made is empty but for the others made");
        }
        free(made[i]);
    }
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
    if (create)
        remove_made(path);
    return 0;
}
