/*
 * agent.c — sandgate-agent, PID 1 of every sandbox container.
 *
 * It reads requests (agent_proto.h) from stdin, answers on stdout and logs one
 * line per event on stderr. It runs as the same unprivileged user as the code
 * it starts, so it protects itself by what the kernel gives any process:
 *   - it is not dumpable, so user code cannot open /proc/<agent>/fd/{0,1} and
 *     read requests or forge replies;
 *   - as PID 1 of its namespace it cannot be killed from inside; elsewhere (in
 *     tests) it is a child subreaper, so orphans still come back to it;
 *   - user code gets oom_score_adj 1000, so the OOM killer picks it first;
 *   - after every run, every descendant is found through /proc and killed,
 *     including those that called setsid() and double-forked.
 *
 * Single-threaded. Signals (SIGCHLD, SIGTERM, SIGINT, SIGHUP) are blocked and
 * read from a signalfd, so every wait is one poll() and nothing runs in a
 * signal handler.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_proto.h"

#define DEFAULT_WORKDIR "/sandbox"
#define KILL_BUDGET_NS (2000LL * 1000 * 1000) /* give up killing after 2 s */
#define IDLE_POLL_MS 1000                      /* reap at least this often */
#define DRAIN_LIMIT (1u << 20)                 /* bytes read per stream after exit */

extern char **environ;

static const char *workdir; /* no trailing slash, except "/" itself */
static pid_t self_pid;
static int sig_fd = -1;
static int devnull_fd = -1;
static sg_agent_buf_t out; /* the message being built; sent whole */

/* The child whose status matters right now; reap() records it because any
 * waitpid(-1) in the agent may be the one that collects it. */
static pid_t watched_pid = -1;
static int watched_status;
static int watched_done;

static void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One write per line so lines from the agent never interleave. */
static void logmsg(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    int n;

    memcpy(line, "sandgate-agent: ", 16);
    va_start(ap, fmt);
    n = vsnprintf(line + 16, sizeof(line) - 17, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof(line) - 18)
        n = (int)(sizeof(line) - 18);
    line[16 + n] = '\n';
    if (write(2, line, 16 + (size_t)n + 1) < 0) {
        /* nowhere left to complain */
    }
}

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ns(long ns)
{
    struct timespec ts = {0, ns};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- processes ------------------------------------------------------- */

static void reap(void)
{
    pid_t p;
    int st;

    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
        if (p == watched_pid && !watched_done) {
            watched_status = st;
            watched_done = 1;
        }
    }
}

typedef struct {
    pid_t pid;
    pid_t ppid;
} proc_t;

static int cmp_proc(const void *a, const void *b)
{
    pid_t x = ((const proc_t *)a)->pid, y = ((const proc_t *)b)->pid;

    return x < y ? -1 : x > y;
}

static pid_t read_ppid(pid_t pid)
{
    char path[64], buf[512], *p;
    int fd;
    ssize_t n;
    int ppid;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* "pid (comm) state ppid ...": comm may hold spaces and ')' itself. */
    p = strrchr(buf, ')');
    if (p == NULL || sscanf(p + 1, " %*c %d", &ppid) != 1)
        return -1;
    return (pid_t)ppid;
}

/* Snapshot of every process we can see, sorted by pid. */
static int scan_procs(proc_t **list, size_t *count)
{
    DIR *d;
    struct dirent *e;
    proc_t *v, *nv;
    size_t n = 0, cap = 256;

    /* Allocated up front so qsort/bsearch never see NULL, even when empty. */
    v = malloc(cap * sizeof(*v));
    if (v == NULL)
        return -1;
    d = opendir("/proc");
    if (d == NULL)
        goto Error;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        pid_t ppid;

        if (*end != '\0' || pid <= 0)
            continue;
        ppid = read_ppid((pid_t)pid);
        if (ppid < 0)
            continue; /* gone already */
        if (n == cap) {
            cap *= 2;
            nv = realloc(v, cap * sizeof(*v));
            if (nv == NULL)
                goto Error;
            v = nv;
        }
        v[n].pid = (pid_t)pid;
        v[n].ppid = ppid;
        n++;
    }
    closedir(d);
    qsort(v, n, sizeof(*v), cmp_proc);
    *list = v;
    *count = n;
    return 0;

Error:
    if (d != NULL)
        closedir(d);
    free(v);
    return -1;
}

static int descends_from_self(const proc_t *v, size_t n, pid_t pid)
{
    size_t hops;

    /* Walk up the parent chain; hops bound it even if the snapshot, taken
     * while processes come and go, happens to contain a cycle. */
    for (hops = 0; hops <= n && pid > 0; hops++) {
        proc_t key = {pid, 0}, *p;

        if (pid == self_pid)
            return 1;
        p = bsearch(&key, v, n, sizeof(*v), cmp_proc);
        if (p == NULL)
            return 0;
        pid = p->ppid;
    }
    return 0;
}

/* SIGKILL every descendant seen in one /proc scan; returns how many there
 * were (zombies included, since they still have to be reaped), or -1. */
static int kill_descendants(void)
{
    proc_t *v;
    size_t n, i;
    int found = 0;

    if (scan_procs(&v, &n) != 0)
        return -1;
    for (i = 0; i < n; i++) {
        if (v[i].pid == self_pid || !descends_from_self(v, n, v[i].pid))
            continue;
        kill(v[i].pid, SIGKILL);
        found++;
    }
    free(v);
    return found;
}

/* Kill everything the agent started, until a scan finds nothing left. A fork
 * bomb converges because a killed process cannot fork again; the budget only
 * guards against processes stuck in the kernel. */
static int kill_tree(void)
{
    int64_t start = now_ns();
    long pause = 1000000;
    int found;

    for (;;) {
        /* The group is the quickest first strike, but only while its leader
         * is unreaped: until then its pid cannot be reused by a stranger. */
        if (watched_pid > 0 && !watched_done)
            kill(-watched_pid, SIGKILL);
        found = kill_descendants();
        reap();
        if (found == 0)
            return 0;
        if (found < 0) {
            /* Without /proc only the group kill above was possible. */
            logmsg("cannot scan /proc to find descendants: %s", strerror(errno));
            return -1;
        }
        if (now_ns() - start > KILL_BUDGET_NS) {
            logmsg("could not kill every descendant within 2 s (%d left)", found);
            return -1;
        }
        sleep_ns(pause);
        if (pause < 20000000)
            pause *= 2;
    }
}

/* Whether a signal sender is one of ours. A sender that is already gone
 * counts as ours: outsiders (the test harness, the container runtime) are
 * either still alive or invisible (ssi_pid 0), while user code can signal and
 * exit at once. */
static int is_descendant(pid_t pid)
{
    proc_t *v, key = {pid, 0};
    size_t n;
    int r;

    if (scan_procs(&v, &n) != 0)
        return 1;
    if (bsearch(&key, v, n, sizeof(*v), cmp_proc) == NULL)
        r = 1;
    else
        r = pid != self_pid && descends_from_self(v, n, pid);
    free(v);
    return r;
}

static void quit(int code)
{
    kill_tree();
    exit(code);
}

/* Drain the signalfd. SIGCHLD needs nothing more than reap(). A termination
 * signal is honoured only from outside: user code runs under our uid and
 * could otherwise end the sandbox with `kill 1`. ssi_pid is 0 when the
 * sender lives outside our pid namespace (docker stop). */
static void handle_signals(void)
{
    struct signalfd_siginfo si;

    while (read(sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGCHLD)
            continue;
        if (si.ssi_pid != 0 && is_descendant((pid_t)si.ssi_pid)) {
            logmsg("ignoring signal %u from sandboxed process %u", si.ssi_signo, si.ssi_pid);
            continue;
        }
        logmsg("signal %u received, exiting", si.ssi_signo);
        quit(0);
    }
    reap();
}

/* ---- stdout ---------------------------------------------------------- */

static int write_full(int fd, const void *p, size_t len)
{
    const uint8_t *s = p;

    while (len != 0) {
        ssize_t n = write(fd, s, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        s += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Send the message built in `out`. If stdout is gone, so is the proxy, and
 * nothing the agent does later can be reported to anyone. */
static void flush_out(int build_failed)
{
    if (build_failed) {
        logmsg("out of memory building a reply");
        quit(1);
    }
    if (write_full(1, out.base, out.len) != 0) {
        logmsg("cannot write to stdout: %s", strerror(errno));
        quit(1);
    }
    out.len = 0;
}

static void send_ok(uint32_t id, uint64_t value)
{
    int r = sg_agent_msg_begin(&out, SG_AGENT_OK, id);

    r |= sg_agent_put_u64(&out, value);
    sg_agent_msg_end(&out, 0);
    flush_out(r);
}

static void send_error(uint32_t id, uint32_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void send_error(uint32_t id, uint32_t code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    int r;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    r = sg_agent_msg_begin(&out, SG_AGENT_ERROR, id);
    r |= sg_agent_put_u32(&out, code);
    r |= sg_agent_put_str(&out, msg, strlen(msg));
    sg_agent_msg_end(&out, 0);
    flush_out(r);
}

static void send_output(uint32_t id, uint32_t stream, const uint8_t *p, size_t len)
{
    while (len != 0) {
        size_t n = len < SG_AGENT_OUTPUT_CHUNK ? len : SG_AGENT_OUTPUT_CHUNK;
        int r = sg_agent_msg_begin(&out, SG_AGENT_OUTPUT, id);

        r |= sg_agent_put_u32(&out, stream);
        r |= sg_agent_put_rest(&out, p, n);
        sg_agent_msg_end(&out, 0);
        flush_out(r);
        p += n;
        len -= n;
    }
}

/* ---- paths ----------------------------------------------------------- */

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

static void send_path_error(uint32_t id, const char *path, int e)
{
    uint32_t code = errno_to_err(e);

    if (code == SG_AGENT_ERR_NOT_FOUND)
        send_error(id, code, "The file \"%.200s\" does not exist.", path);
    else if (e == EISDIR)
        send_error(id, code, "The path \"%.200s\" names a directory, not a file.", path);
    else if (code == SG_AGENT_ERR_PATH)
        send_error(id, code, "The path \"%.200s\" goes through a symbolic link or something that is not a directory.",
                   path);
    else
        send_error(id, code, "Cannot open \"%.200s\": %s.", path, strerror(e));
}

/* Open the directory that will hold the last component of `path`, starting
 * from the work dir and refusing to follow any symlink on the way. On success
 * the last component is copied to `leaf` and the fd is returned; on failure
 * an ERROR has been sent and -1 is returned. */
static int open_parent(uint32_t id, const char *path, int create, char *leaf, size_t leafsz)
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
            send_error(id, SG_AGENT_ERR_PATH, "The path \"%.200s\" is outside the work directory %s.", path, workdir);
            goto Error;
        }
    }
    /* Refuse ".." anywhere before touching the file system. */
    for (dots = rel; (dots = strstr(dots, "..")) != NULL; dots += 2) {
        if ((dots == rel || dots[-1] == '/') && (dots[2] == '/' || dots[2] == '\0')) {
            send_error(id, SG_AGENT_ERR_PATH,
                       "The path \"%.200s\" contains \"..\"; paths must stay inside the work directory.", path);
            goto Error;
        }
    }
    if ((walk = strdup(rel)) == NULL) {
        send_error(id, SG_AGENT_ERR_IO, "Out of memory.");
        goto Error;
    }
    dfd = open(workdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        send_error(id, SG_AGENT_ERR_IO, "Cannot open the work directory %s: %s.", workdir, strerror(errno));
        goto Error;
    }

    leaf[0] = '\0';
    for (comp = strtok_r(walk, "/", &next); comp != NULL; comp = after) {
        after = strtok_r(NULL, "/", &next);
        if (strcmp(comp, ".") == 0)
            continue;
        if (after == NULL) {
            if (strlen(comp) >= leafsz) {
                send_error(id, SG_AGENT_ERR_PATH, "The path \"%.200s\" has a name that is too long.", path);
                goto Error;
            }
            strcpy(leaf, comp);
            break;
        }
        nfd = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0 && errno == ENOENT && create) {
            if (mkdirat(dfd, comp, 0755) != 0 && errno != EEXIST) {
                send_error(id, SG_AGENT_ERR_IO, "Cannot create the directory \"%.200s\" for \"%.200s\": %s.", comp,
                           path, strerror(errno));
                goto Error;
            }
            nfd = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (nfd < 0) {
            send_path_error(id, path, errno);
            goto Error;
        }
        close(dfd);
        dfd = nfd;
    }
    if (leaf[0] == '\0') {
        send_error(id, SG_AGENT_ERR_PATH, "The path \"%.200s\" names a directory, not a file.", path);
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

/* Checks shared by PUT_FILE and GET_FILE; returns a NUL-terminated copy. */
static char *take_path(uint32_t id, const uint8_t *s, size_t len)
{
    char *path;

    if (len == 0) {
        send_error(id, SG_AGENT_ERR_PATH, "The path is empty.");
        return NULL;
    }
    if (memchr(s, '\0', len) != NULL) {
        send_error(id, SG_AGENT_ERR_PATH, "The path contains a NUL byte.");
        return NULL;
    }
    path = dup_field(s, len);
    if (path == NULL)
        send_error(id, SG_AGENT_ERR_IO, "Out of memory.");
    return path;
}

static void handle_put(uint32_t id, const uint8_t *payload, size_t len)
{
    sg_agent_reader_t r;
    const uint8_t *ps, *data;
    size_t plen, dlen;
    uint32_t mode;
    char *path = NULL, leaf[NAME_MAX + 1];
    int dfd = -1, fd = -1;
    struct stat st;

    sg_agent_reader_init(&r, payload, len);
    sg_agent_get_str(&r, &ps, &plen);
    sg_agent_get_u32(&r, &mode);
    sg_agent_get_rest(&r, &data, &dlen);
    if (r.failed) {
        send_error(id, SG_AGENT_ERR_BAD_REQUEST, "The PUT_FILE request is malformed.");
        goto Exit;
    }
    if ((path = take_path(id, ps, plen)) == NULL)
        goto Exit;
    if ((dfd = open_parent(id, path, 1, leaf, sizeof(leaf))) < 0)
        goto Exit;
    /* O_NONBLOCK: opening a FIFO must fail (ENXIO), never hang the agent. */
    fd = openat(dfd, leaf, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, (mode_t)(mode & 0777));
    if (fd < 0) {
        send_path_error(id, path, errno);
        goto Exit;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        send_error(id, SG_AGENT_ERR_PATH, "The path \"%.200s\" is not a regular file.", path);
        goto Exit;
    }
    /* The umask and an existing file's mode must not win over the request. */
    fchmod(fd, (mode_t)(mode & 0777));
    if (write_full(fd, data, dlen) != 0) {
        send_error(id, SG_AGENT_ERR_IO, "Cannot write \"%.200s\": %s.", path, strerror(errno));
        goto Exit;
    }
    send_ok(id, dlen);

Exit:
    if (fd >= 0)
        close(fd);
    if (dfd >= 0)
        close(dfd);
    free(path);
}

static void handle_get(uint32_t id, const uint8_t *payload, size_t len)
{
    sg_agent_reader_t r;
    const uint8_t *ps;
    size_t plen, got = 0;
    uint32_t max_bytes;
    char *path = NULL, leaf[NAME_MAX + 1];
    uint8_t *data = NULL;
    int dfd = -1, fd = -1, rr;
    struct stat st;
    size_t start;

    sg_agent_reader_init(&r, payload, len);
    sg_agent_get_str(&r, &ps, &plen);
    sg_agent_get_u32(&r, &max_bytes);
    if (r.failed || r.off != r.len) {
        send_error(id, SG_AGENT_ERR_BAD_REQUEST, "The GET_FILE request is malformed.");
        goto Exit;
    }
    if (max_bytes > SG_AGENT_MAX_PAYLOAD)
        max_bytes = SG_AGENT_MAX_PAYLOAD; /* the reply must fit in one message */
    if ((path = take_path(id, ps, plen)) == NULL)
        goto Exit;
    if ((dfd = open_parent(id, path, 0, leaf, sizeof(leaf))) < 0)
        goto Exit;
    fd = openat(dfd, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        send_path_error(id, path, errno);
        goto Exit;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        send_error(id, SG_AGENT_ERR_PATH, "The path \"%.200s\" is not a regular file.", path);
        goto Exit;
    }
    if ((uint64_t)st.st_size > max_bytes) {
        send_error(id, SG_AGENT_ERR_TOO_LARGE, "The file \"%.200s\" is %llu bytes, more than the %u allowed.", path,
                   (unsigned long long)st.st_size, max_bytes);
        goto Exit;
    }

    /* Read straight into the reply. */
    start = out.len;
    rr = sg_agent_msg_begin(&out, SG_AGENT_FILE, id);
    if (rr == 0 && st.st_size > 0) {
        data = malloc((size_t)st.st_size);
        if (data == NULL)
            rr = -1;
    }
    if (rr != 0) {
        out.len = start;
        send_error(id, SG_AGENT_ERR_IO, "Out of memory reading \"%.200s\".", path);
        goto Exit;
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, data + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            out.len = start;
            send_error(id, SG_AGENT_ERR_IO, "Cannot read \"%.200s\": %s.", path, strerror(errno));
            goto Exit;
        }
        if (n == 0)
            break; /* shrank meanwhile: send what there is */
        got += (size_t)n;
    }
    rr = sg_agent_put_rest(&out, data, got);
    sg_agent_msg_end(&out, start);
    flush_out(rr);

Exit:
    free(data);
    if (fd >= 0)
        close(fd);
    if (dfd >= 0)
        close(dfd);
    free(path);
}

/* ---- EXEC ------------------------------------------------------------ */

typedef struct {
    uint32_t id;
    uint32_t output_cap;
    char *setup_cmd;
    char *setup_stage;
    char *run_cmd;
    char *file_path;
    const uint8_t *code;
    size_t code_len;
    char **envp;
    int64_t deadline;   /* CLOCK_MONOTONIC ns */
    int64_t started;    /* first fork, 0 until then */
    uint64_t sent[3];   /* bytes forwarded, by stream */
    uint32_t exit_flags;
    long long oom_before; /* -1 when the counter cannot be read */
} exec_t;

typedef struct {
    int status;       /* wait status, valid when have_status */
    int have_status;
    uint32_t reason;  /* EXITED unless the agent ended the run */
    int64_t ended;
} run_t;

/* The oom_kill counter of our memory cgroup: cgroup v2 memory.events, or the
 * v1 memory.oom_control of kernels that have it. -1 when neither exists. */
static long long read_oom_kills(void)
{
    static const char *const files[] = {"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"};
    char buf[1024], *p;
    size_t i;

    for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        int fd = open(files[i], O_RDONLY | O_CLOEXEC);
        ssize_t n;

        if (fd < 0)
            continue;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        for (p = buf; p != NULL; p = strchr(p, '\n')) {
            if (*p == '\n')
                p++;
            if (strncmp(p, "oom_kill ", 9) == 0)
                return strtoll(p + 9, NULL, 10);
        }
    }
    return -1;
}

/* The environment of every command: ours, with SANDGATE_FILE replaced. */
static char **build_env(const char *file_path)
{
    size_t n = 0, i, j = 0;
    char **envp, *var;

    while (environ[n] != NULL)
        n++;
    envp = calloc(n + 2, sizeof(*envp));
    var = malloc(strlen(file_path) + sizeof("SANDGATE_FILE="));
    if (envp == NULL || var == NULL) {
        free(envp);
        free(var);
        return NULL;
    }
    strcpy(var, "SANDGATE_FILE=");
    strcat(var, file_path);
    for (i = 0; i < n; i++) {
        if (strncmp(environ[i], "SANDGATE_FILE=", 14) != 0)
            envp[j++] = environ[i];
    }
    envp[j++] = var;
    envp[j] = NULL;
    return envp;
}

static void free_env(char **envp)
{
    size_t i;

    if (envp == NULL)
        return;
    for (i = 0; envp[i] != NULL; i++) {
        if (strncmp(envp[i], "SANDGATE_FILE=", 14) == 0)
            free(envp[i]);
    }
    free(envp);
}

static int mkdir_parents(const char *path)
{
    char buf[PATH_MAX], *p;

    if (strlen(path) >= sizeof(buf)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(buf, path);
    for (p = buf + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            struct stat st;
            int e = errno;

            /* A read-only parent may still hold the directory we need. */
            if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) {
                errno = e;
                return -1;
            }
        }
        *p = '/';
    }
    return 0;
}

/* Write the submitted code where the commands expect it. The agent's cwd is
 * the work dir, so a relative file_path lands there too. */
static int write_code(exec_t *x, char *why, size_t whylen)
{
    int fd = -1;

    if (mkdir_parents(x->file_path) != 0) {
        snprintf(why, whylen, "sandgate-agent: cannot create the directories for %s: %s\n", x->file_path, strerror(errno));
        goto Error;
    }
    fd = open(x->file_path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(why, whylen, "sandgate-agent: cannot create %s: %s\n", x->file_path, strerror(errno));
        goto Error;
    }
    fchmod(fd, 0644);
    if (write_full(fd, x->code, x->code_len) != 0) {
        snprintf(why, whylen, "sandgate-agent: cannot write %s: %s\n", x->file_path, strerror(errno));
        goto Error;
    }
    if (close(fd) != 0) {
        fd = -1;
        snprintf(why, whylen, "sandgate-agent: cannot write %s: %s\n", x->file_path, strerror(errno));
        goto Error;
    }
    return 0;

Error:
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Forward what fits under the cap. Returns 1 when the cap was passed. */
static int forward(exec_t *x, uint32_t stream, const uint8_t *p, size_t n)
{
    uint64_t room = x->output_cap - x->sent[stream];

    if (n > room) {
        send_output(x->id, stream, p, (size_t)room);
        x->sent[stream] += room;
        x->exit_flags |= stream == 1 ? SG_AGENT_EXIT_STDOUT_TRUNCATED : SG_AGENT_EXIT_STDERR_TRUNCATED;
        return 1;
    }
    send_output(x->id, stream, p, n);
    x->sent[stream] += n;
    return 0;
}

enum { PUMP_DATA, PUMP_AGAIN, PUMP_EOF, PUMP_CAP };

static int pump(exec_t *x, int fd, uint32_t stream, size_t *total)
{
    static uint8_t buf[SG_AGENT_OUTPUT_CHUNK];
    ssize_t n = read(fd, buf, sizeof(buf));

    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? PUMP_AGAIN : PUMP_EOF;
    if (n == 0)
        return PUMP_EOF;
    if (total != NULL)
        *total += (size_t)n;
    return forward(x, stream, buf, (size_t)n) ? PUMP_CAP : PUMP_DATA;
}

/* In the forked child: become the leader of a new group, volunteer for the
 * OOM killer, wire up stdio and exec the shell. The agent is single-threaded,
 * so libc is safe to use after fork; this function never returns. */
static void child_exec(exec_t *x, const char *cmd, int out_w, int err_w)
{
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    struct sigaction sa;
    sigset_t none;
    int fd, i;

    setpgid(0, 0);
    /* The agent is not dumpable, which makes /proc/self/ files root-owned;
     * become dumpable first so the write is allowed (exec resets it anyway). */
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, "1000", 4) < 0) {
            /* best effort */
        }
        close(fd);
    }
    if (dup2(devnull_fd, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
        _exit(127);
    if (chdir(workdir) != 0) {
        dprintf(2, "sandgate-agent: cannot enter the work directory %s: %s\n", workdir, strerror(errno));
        _exit(127);
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    for (i = 1; i < NSIG; i++)
        sigaction(i, &sa, NULL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve("/bin/sh", argv, x->envp);
    dprintf(2, "sandgate-agent: cannot run /bin/sh: %s\n", strerror(errno));
    _exit(127);
}

static void start_failed_output(exec_t *x, const char *what)
{
    char why[512];

    snprintf(why, sizeof(why), "sandgate-agent: cannot start the command (%s): %s\n", what, strerror(errno));
    forward(x, 2, (const uint8_t *)why, strlen(why));
}

/* Run one command to its end, forwarding its output. Returns 0 with *res
 * filled, or -1 when it could not be started (explained on stderr). */
static int run_one(exec_t *x, const char *cmd, run_t *res)
{
    int outp[2] = {-1, -1}, errp[2] = {-1, -1};
    int fds[2];
    uint32_t streams[2] = {1, 2};
    pid_t pid;
    int i;

    memset(res, 0, sizeof(*res));
    res->reason = SG_AGENT_REASON_EXITED;
    if (pipe2(outp, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0) {
        start_failed_output(x, "pipe");
        goto Error;
    }
    /* Only our ends: the child must see ordinary blocking pipes. */
    fcntl(outp[0], F_SETFL, O_NONBLOCK);
    fcntl(errp[0], F_SETFL, O_NONBLOCK);

    if (x->started == 0)
        x->started = now_ns();
    pid = fork();
    if (pid < 0) {
        start_failed_output(x, "fork");
        goto Error;
    }
    if (pid == 0)
        child_exec(x, cmd, outp[1], errp[1]);
    setpgid(pid, pid); /* also here, so kill(-pid) works before the child runs */
    watched_pid = pid;
    watched_done = 0;
    close(outp[1]);
    close(errp[1]);
    outp[1] = errp[1] = -1;
    fds[0] = outp[0];
    fds[1] = errp[0];

    for (;;) {
        struct pollfd pfd[3];
        int n = 0, idx[2] = {-1, -1}, capped = 0;
        int64_t left = x->deadline - now_ns();
        int ms;

        if (left <= 0) {
            res->reason = SG_AGENT_REASON_TIMEOUT;
            break;
        }
        ms = (int)((left + 999999) / 1000000);
        if (ms > IDLE_POLL_MS)
            ms = IDLE_POLL_MS;
        for (i = 0; i < 2; i++) {
            if (fds[i] >= 0) {
                idx[i] = n;
                pfd[n].fd = fds[i];
                pfd[n].events = POLLIN;
                pfd[n].revents = 0;
                n++;
            }
        }
        pfd[n].fd = sig_fd;
        pfd[n].events = POLLIN;
        pfd[n].revents = 0;
        if (poll(pfd, (nfds_t)n + 1, ms) < 0 && errno != EINTR) {
            logmsg("poll: %s", strerror(errno));
            sleep_ns(10000000);
        }
        for (i = 0; i < 2; i++) {
            int rc;

            if (idx[i] < 0 || pfd[idx[i]].revents == 0)
                continue;
            rc = pump(x, fds[i], streams[i], NULL);
            if (rc == PUMP_EOF) {
                close(fds[i]);
                fds[i] = -1;
            } else if (rc == PUMP_CAP) {
                capped = 1;
            }
        }
        if (capped) {
            res->reason = SG_AGENT_REASON_OUTPUT_LIMIT;
            break;
        }
        if (pfd[n].revents != 0)
            handle_signals();
        reap();
        if (watched_done)
            break;
    }
    res->ended = now_ns();

    if (res->reason == SG_AGENT_REASON_EXITED) {
        /* The shell is gone; take what is already in the pipes, but do not
         * wait for background processes that still hold them open. */
        for (i = 0; i < 2 && res->reason == SG_AGENT_REASON_EXITED; i++) {
            size_t total = 0;
            int rc = PUMP_DATA;

            while (fds[i] >= 0 && rc == PUMP_DATA && total < DRAIN_LIMIT)
                rc = pump(x, fds[i], streams[i], &total);
            if (rc == PUMP_CAP)
                res->reason = SG_AGENT_REASON_OUTPUT_LIMIT;
        }
    }
    kill_tree();
    for (i = 0; i < 2; i++) {
        if (fds[i] >= 0)
            close(fds[i]);
    }
    res->have_status = watched_done;
    res->status = watched_status;
    watched_pid = -1;
    return 0;

Error:
    for (i = 0; i < 2; i++) {
        if (outp[i] >= 0)
            close(outp[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
    return -1;
}

/* `end` is when the run ended, before the cleanup that follows it. */
static void send_exit(exec_t *x, int32_t code, uint32_t sig, uint32_t reason, const char *stage, int64_t end)
{
    uint64_t dur = x->started != 0 && end > x->started ? (uint64_t)(end - x->started) / 1000 : 0;
    int r;

    r = sg_agent_msg_begin(&out, SG_AGENT_EXIT, x->id);
    r |= sg_agent_put_i32(&out, code);
    r |= sg_agent_put_u32(&out, sig);
    r |= sg_agent_put_u32(&out, reason);
    r |= sg_agent_put_u64(&out, dur);
    r |= sg_agent_put_u32(&out, x->exit_flags);
    r |= sg_agent_put_str(&out, stage, strlen(stage));
    sg_agent_msg_end(&out, 0);
    flush_out(r);
    logmsg("exec %u: %s ended: %s, code %d, signal %u", x->id, stage, sg_agent_reason_name(reason), (int)code, sig);
}

/* Turn a finished run into the EXIT message. Returns 1 when the EXEC is over
 * (EXIT sent), 0 when a successful setup lets the run go on. */
static int finish(exec_t *x, run_t *res, const char *stage, int is_setup)
{
    int32_t code = -1;
    uint32_t sig = 0, reason = res->reason;

    if (!res->have_status) {
        sig = SIGKILL; /* could not collect it: it was still being killed */
    } else if (WIFEXITED(res->status)) {
        code = WEXITSTATUS(res->status);
    } else if (WIFSIGNALED(res->status)) {
        sig = (uint32_t)WTERMSIG(res->status);
    }

    if (reason == SG_AGENT_REASON_EXITED) {
        long long oom_now = x->oom_before >= 0 ? read_oom_kills() : -1;
        int oom_seen = oom_now > x->oom_before;

        if (sig != 0) {
            /* A signal we did not send. SIGKILL is what the OOM killer uses;
             * without a counter to ask, it is the likeliest sender. */
            if (sig == SIGKILL && (x->oom_before < 0 || oom_now < 0 || oom_seen))
                reason = SG_AGENT_REASON_OOM;
            else
                reason = SG_AGENT_REASON_KILLED;
        } else if (code == 128 + SIGKILL && x->oom_before >= 0 && oom_seen) {
            /* The shell outlived the program the OOM killer took. */
            reason = SG_AGENT_REASON_OOM;
        } else if (is_setup && code != 0) {
            reason = SG_AGENT_REASON_SETUP_FAILED;
        } else if (is_setup) {
            return 0;
        }
    }
    send_exit(x, code, sig, reason, stage, res->ended);
    return 1;
}

static void handle_exec(uint32_t id, const uint8_t *payload, size_t len)
{
    sg_agent_reader_t r;
    exec_t x;
    run_t res;
    const uint8_t *s[4];
    size_t sl[4];
    uint32_t timeout_ms;
    char why[PATH_MAX + 128];
    int i;

    memset(&x, 0, sizeof(x));
    x.id = id;
    sg_agent_reader_init(&r, payload, len);
    sg_agent_get_u32(&r, &timeout_ms);
    sg_agent_get_u32(&r, &x.output_cap);
    for (i = 0; i < 4; i++)
        sg_agent_get_str(&r, &s[i], &sl[i]);
    sg_agent_get_rest(&r, &x.code, &x.code_len);
    if (r.failed) {
        send_error(id, SG_AGENT_ERR_BAD_REQUEST, "The EXEC request is malformed.");
        goto Exit;
    }
    x.setup_cmd = dup_field(s[0], sl[0]);
    x.setup_stage = dup_field(s[1], sl[1]);
    x.run_cmd = dup_field(s[2], sl[2]);
    x.file_path = dup_field(s[3], sl[3]);
    if (x.setup_cmd == NULL || x.setup_stage == NULL || x.run_cmd == NULL || x.file_path == NULL) {
        send_error(id, SG_AGENT_ERR_BAD_REQUEST, "The EXEC request has a command, stage or path containing a NUL byte.");
        goto Exit;
    }
    x.envp = build_env(x.file_path);
    if (x.envp == NULL) {
        send_error(id, SG_AGENT_ERR_IO, "Out of memory.");
        goto Exit;
    }
    x.oom_before = read_oom_kills();
    /* The budget starts now: writing the file is part of the run's cost. */
    x.deadline = now_ns() + (int64_t)timeout_ms * 1000000;

    if (x.file_path[0] != '\0' && write_code(&x, why, sizeof(why)) != 0) {
        forward(&x, 2, (const uint8_t *)why, strlen(why));
        send_exit(&x, -1, 0, SG_AGENT_REASON_START_FAILED, "run", now_ns());
        goto Exit;
    }
    if (x.setup_cmd[0] != '\0') {
        const char *stage = x.setup_stage[0] != '\0' ? x.setup_stage : "setup";

        if (run_one(&x, x.setup_cmd, &res) != 0) {
            send_exit(&x, -1, 0, SG_AGENT_REASON_START_FAILED, stage, now_ns());
            goto Exit;
        }
        if (finish(&x, &res, stage, 1))
            goto Exit;
    }
    if (run_one(&x, x.run_cmd, &res) != 0) {
        send_exit(&x, -1, 0, SG_AGENT_REASON_START_FAILED, "run", now_ns());
        goto Exit;
    }
    finish(&x, &res, "run", 0);

Exit:
    free_env(x.envp);
    free(x.setup_cmd);
    free(x.setup_stage);
    free(x.run_cmd);
    free(x.file_path);
}

/* ---- request loop ---------------------------------------------------- */

/* Returns 0, 1 on EOF before the first byte, -1 on error or EOF midway. */
static int read_full(int fd, void *p, size_t len)
{
    uint8_t *d = p;
    size_t got = 0;

    while (got < len) {
        ssize_t n = read(fd, d + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            return got == 0 ? 1 : -1;
        got += (size_t)n;
    }
    return 0;
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Read and dispatch one request. Exits on EOF or when the stream is beyond
 * repair (truncated, or a length we refuse to buffer). */
static void serve_one(void)
{
    uint8_t raw[SG_AGENT_HEADER_SIZE];
    sg_agent_header_t h;
    uint8_t *payload = NULL;
    uint32_t len, id;
    int rc;

    rc = read_full(0, raw, sizeof(raw));
    if (rc == 1) {
        logmsg("stdin closed, exiting");
        quit(0);
    }
    if (rc != 0) {
        logmsg("stdin ended inside a message header, exiting");
        quit(0);
    }
    id = rd32(raw + 4);
    len = rd32(raw + 8);
    if (len > SG_AGENT_MAX_PAYLOAD) {
        logmsg("request %u announces %u payload bytes, more than %u; cannot resynchronise, exiting", id, len,
               SG_AGENT_MAX_PAYLOAD);
        quit(1);
    }
    payload = malloc(len != 0 ? len : 1);
    if (payload == NULL) {
        logmsg("out of memory for a %u byte request, exiting", len);
        quit(1);
    }
    if (read_full(0, payload, len) != 0) {
        logmsg("stdin ended inside a request payload, exiting");
        quit(0);
    }
    if (sg_agent_header_decode(raw, &h) != 0) {
        send_error(id, SG_AGENT_ERR_BAD_REQUEST, "The message header has non-zero flags or reserved bytes.");
        goto Exit;
    }

    switch (h.type) {
    case SG_AGENT_EXEC:
        handle_exec(h.id, payload, h.len);
        break;
    case SG_AGENT_PUT_FILE:
        handle_put(h.id, payload, h.len);
        break;
    case SG_AGENT_GET_FILE:
        handle_get(h.id, payload, h.len);
        break;
    case SG_AGENT_PING:
        if (h.len != 0)
            send_error(h.id, SG_AGENT_ERR_BAD_REQUEST, "A PING request has no payload.");
        else
            send_ok(h.id, 0);
        break;
    default:
        send_error(h.id, SG_AGENT_ERR_BAD_REQUEST, "Unknown request type %u.", h.type);
        break;
    }

Exit:
    free(payload);
}

static void normalise_workdir(void)
{
    const char *env = getenv("SANDGATE_WORKDIR");
    char *w;
    size_t n;

    if (env == NULL || env[0] == '\0')
        env = DEFAULT_WORKDIR;
    w = strdup(env);
    if (w == NULL) {
        workdir = DEFAULT_WORKDIR;
        return;
    }
    n = strlen(w);
    while (n > 1 && w[n - 1] == '/')
        w[--n] = '\0';
    workdir = w;
}

int main(void)
{
    sigset_t mask;
    int r;

    self_pid = getpid();
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);

    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sig_fd < 0) {
        logmsg("signalfd: %s", strerror(errno));
        return 1;
    }
    devnull_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull_fd < 0) {
        /* No /dev/null: an empty pipe gives the same immediate EOF. */
        int p[2];
        if (pipe2(p, O_CLOEXEC) != 0) {
            logmsg("no /dev/null and no pipe: %s", strerror(errno));
            return 1;
        }
        close(p[1]);
        devnull_fd = p[0];
    }

    normalise_workdir();
    if (chdir(workdir) != 0)
        logmsg("cannot enter the work directory %s: %s", workdir, strerror(errno));

    sg_agent_buf_init(&out);
    r = sg_agent_msg_begin(&out, SG_AGENT_READY, 0);
    r |= sg_agent_put_u32(&out, SG_AGENT_PROTO_VERSION);
    r |= sg_agent_put_str(&out, workdir, strlen(workdir));
    sg_agent_msg_end(&out, 0);
    flush_out(r);
    logmsg("ready, pid %d, work dir %s", (int)self_pid, workdir);

    for (;;) {
        struct pollfd pfd[2] = {{.fd = 0, .events = POLLIN}, {.fd = sig_fd, .events = POLLIN}};

        reap();
        if (poll(pfd, 2, IDLE_POLL_MS) < 0) {
            if (errno != EINTR) {
                logmsg("poll: %s", strerror(errno));
                sleep_ns(10000000);
            }
            continue;
        }
        if (pfd[1].revents != 0)
            handle_signals();
        if (pfd[0].revents & POLLNVAL) {
            logmsg("stdin is not open, exiting");
            quit(1);
        }
        if (pfd[0].revents != 0)
            serve_one();
    }
}
