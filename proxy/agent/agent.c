/*
 * agent.c — sandgate-agent, PID 1 of every sandbox container.
 *
 * It reads requests (agent_proto.h) from stdin, answers on stdout and logs one
 * line per event on stderr. It runs as the same unprivileged user as the code
 * it starts, so it protects itself by what the kernel gives any process:
 *   - it is not dumpable, so user code cannot open /proc/<agent>/fd/{0,1} and
 *     read requests or forge replies;
 *   - as PID 1 of its namespace it cannot be killed from inside; elsewhere (in
 *     tests) it is a child subreaper, so orphans still come back to it; a
 *     termination signal counts only from outside, with a sender the kernel
 *     wrote (handle_signals);
 *   - every run is under a system call filter that refuses prlimit() on
 *     another process, so user code cannot lower the agent's limits;
 *   - user code gets oom_score_adj 1000, so the OOM killer picks it first;
 *   - after every run, every descendant is found through /proc and killed,
 *     including those that called setsid() and double-forked.
 *
 * Stateful mode (kernel_cmd not empty) keeps one long-lived interpreter, the
 * kernel, across EXECs and talks to it over its fds 3 and 4 as agent_proto.h
 * describes. The kernel is the one process the end-of-run kill spares (its
 * children are killed like any other); it dies with a timeout, an output
 * limit, a malformed answer, a different kernel_cmd, or the agent itself.
 * The process forked for it must be the interpreter, so kernel_cmd has to
 * `exec` it: a shell left in between would be the spared process, and the
 * interpreter under it would be killed after every run. Between EXECs the
 * idle loop reads and discards whatever the kernel writes, so a background
 * thread that prints never blocks on a full pipe.
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
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_proto.h"
#include "request.h"

#define DEFAULT_WORKDIR "/sandbox"
#define KILL_BUDGET_NS (2000LL * 1000 * 1000) /* give up killing after 2 s */
#define IDLE_POLL_MS 1000                      /* reap at least this often */
#define DRAIN_LIMIT (1u << 20)                 /* bytes read per stream after exit */
#define KERNEL_GRACE_NS (200LL * 1000 * 1000)  /* for a kernel whose pipes closed to exit */

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

/* The session's kernel (stateful mode): from its start until an EXEC finds
 * it gone or ends it. reap() records its status like the watched child's. */
typedef struct {
    pid_t pid;          /* -1: there is none */
    int done;           /* reaped; status is valid */
    int status;
    char *cmd;          /* the kernel_cmd it was started with */
    int out_fd, err_fd; /* read ends of its stdout and stderr */
    int req_fd;         /* write end of its fd 3 */
    int ans_fd;         /* read end of its fd 4 */
} kernel_t;

static kernel_t kern = {-1, 0, 0, NULL, -1, -1, -1, -1};

static int kernel_alive(void)
{
    return kern.pid > 0 && !kern.done;
}

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
        if (p == kern.pid && !kern.done) {
            kern.status = st;
            kern.done = 1;
        }
    }
}

typedef struct {
    pid_t pid;
    pid_t ppid;
    char state; /* 'Z' for a zombie */
} proc_t;

static int cmp_proc(const void *a, const void *b)
{
    pid_t x = ((const proc_t *)a)->pid, y = ((const proc_t *)b)->pid;

    return x < y ? -1 : x > y;
}

/* Parent and state of a process; -1 when it is gone. */
static int read_stat(pid_t pid, pid_t *ppid_out, char *state)
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
    if (p == NULL || sscanf(p + 1, " %c %d", state, &ppid) != 2)
        return -1;
    *ppid_out = (pid_t)ppid;
    return 0;
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
        char state;

        if (*end != '\0' || pid <= 0)
            continue;
        if (read_stat((pid_t)pid, &ppid, &state) != 0)
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
        v[n].state = state;
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
        proc_t key = {pid, 0, 0}, *p;

        if (pid == self_pid)
            return 1;
        p = bsearch(&key, v, n, sizeof(*v), cmp_proc);
        if (p == NULL)
            return 0;
        pid = p->ppid;
    }
    return 0;
}

/* SIGKILL every descendant seen in one /proc scan except `keep` (-1: none);
 * the descendants of `keep` are killed too. Returns how many there were, or
 * -1. Zombies count, since they still have to be reaped, except those whose
 * parent is `keep`: only it can reap them, and it lives on. */
static int kill_descendants(pid_t keep)
{
    proc_t *v;
    size_t n, i;
    int found = 0;

    if (scan_procs(&v, &n) != 0)
        return -1;
    for (i = 0; i < n; i++) {
        if (v[i].pid == self_pid || v[i].pid == keep || !descends_from_self(v, n, v[i].pid))
            continue;
        if (v[i].state == 'Z' && keep > 0 && v[i].ppid == keep)
            continue;
        kill(v[i].pid, SIGKILL);
        found++;
    }
    free(v);
    return found;
}

/* Kill everything the agent started except `keep` (the kernel to spare, or
 * -1), until a scan finds nothing left. A fork bomb converges because a
 * killed process cannot fork again; the budget only guards against
 * processes stuck in a system call. */
static int kill_tree(pid_t keep)
{
    int64_t start = now_ns();
    long pause = 1000000;
    int found;

    for (;;) {
        /* The group is the quickest first strike, but only while its leader
         * is unreaped: until then its pid cannot be reused by a stranger. */
        if (watched_pid > 0 && !watched_done)
            kill(-watched_pid, SIGKILL);
        if (kernel_alive() && kern.pid != keep)
            kill(-kern.pid, SIGKILL);
        found = kill_descendants(keep);
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
    proc_t *v, key = {pid, 0, 0};
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

/* The kernel too: nothing the agent started outlives it. */
static void quit(int code)
{
    kill_tree(-1);
    exit(code);
}

/* Whether the kernel itself filled in the sender of a signal. kill() and
 * tgkill() (SI_USER, SI_TKILL) and the kernel's own signals (SI_KERNEL) do;
 * with sigqueue() and rt_sigqueueinfo() (negative codes) the sender writes
 * si_pid itself, so any process could claim to be an outsider (0). */
static int sender_is_known(const struct signalfd_siginfo *si)
{
    return si->ssi_code == SI_USER || si->ssi_code == SI_TKILL || si->ssi_code == SI_KERNEL;
}

/* Drain the signalfd. SIGCHLD needs nothing more than reap(). A termination
 * signal is honoured only from outside: user code runs under our uid and
 * could otherwise end the sandbox with `kill 1`. ssi_pid is 0 when the
 * sender lives outside our pid namespace (docker stop), and is believed
 * only when the kernel wrote it. */
static void handle_signals(void)
{
    struct signalfd_siginfo si;

    while (read(sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGCHLD)
            continue;
        if (!sender_is_known(&si)) {
            logmsg("ignoring signal %u with a sender it chose itself (code %d, pid %u)", si.ssi_signo, si.ssi_code,
                   si.ssi_pid);
            continue;
        }
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

/* ---- files (request.h decodes and confines the paths) ---------------- */

static void send_fail(uint32_t id, const sg_agent_fail_t *f)
{
    send_error(id, f->code, "%s", f->msg);
}

static void handle_put(uint32_t id, const uint8_t *payload, size_t len)
{
    sg_agent_put_req_t q;
    sg_agent_fail_t f;
    const char *path;
    char leaf[NAME_MAX + 1];
    int dfd = -1, fd = -1;
    struct stat st;

    if (sg_agent_put_req_decode(payload, len, &q, &f) != 0) {
        send_fail(id, &f);
        goto Exit;
    }
    path = q.path;
    if ((dfd = sg_agent_open_parent(workdir, path, 1, leaf, sizeof(leaf), &f)) < 0) {
        send_fail(id, &f);
        goto Exit;
    }
    /* O_NONBLOCK: opening a FIFO must fail (ENXIO), never hang the agent. */
    fd = openat(dfd, leaf, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, (mode_t)(q.mode & 0777));
    if (fd < 0) {
        sg_agent_path_fail(&f, path, errno);
        send_fail(id, &f);
        goto Exit;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        send_error(id, SG_AGENT_ERR_PATH, "The path \"%.200s\" is not a regular file.", path);
        goto Exit;
    }
    /* The umask and an existing file's mode must not win over the request. */
    fchmod(fd, (mode_t)(q.mode & 0777));
    if (write_full(fd, q.data, q.data_len) != 0) {
        send_error(id, SG_AGENT_ERR_IO, "Cannot write \"%.200s\": %s.", path, strerror(errno));
        goto Exit;
    }
    send_ok(id, q.data_len);

Exit:
    if (fd >= 0)
        close(fd);
    if (dfd >= 0)
        close(dfd);
    free(q.path);
}

static void handle_get(uint32_t id, const uint8_t *payload, size_t len)
{
    sg_agent_get_req_t q;
    sg_agent_fail_t f;
    size_t got = 0;
    uint32_t max_bytes;
    const char *path;
    char leaf[NAME_MAX + 1];
    uint8_t *data = NULL;
    int dfd = -1, fd = -1, rr;
    struct stat st;
    size_t start;

    if (sg_agent_get_req_decode(payload, len, &q, &f) != 0) {
        send_fail(id, &f);
        goto Exit;
    }
    path = q.path;
    max_bytes = q.max_bytes;
    if ((dfd = sg_agent_open_parent(workdir, path, 0, leaf, sizeof(leaf), &f)) < 0) {
        send_fail(id, &f);
        goto Exit;
    }
    fd = openat(dfd, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        sg_agent_path_fail(&f, path, errno);
        send_fail(id, &f);
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
    free(q.path);
}

/* ---- EXEC ------------------------------------------------------------ */

typedef struct {
    uint32_t id;
    uint32_t output_cap;
    char *setup_cmd;
    char *setup_stage;
    char *run_cmd;
    char *file_path;
    char *kernel_cmd;
    const uint8_t *code;
    size_t code_len;
    char **envp;
    int64_t deadline;   /* CLOCK_MONOTONIC ns */
    int64_t started;    /* first fork, 0 until then */
    uint64_t sent[3];   /* bytes forwarded, by stream */
    uint32_t exit_flags;
    uint32_t state;     /* sg_agent_state_t, for EXIT */
    long long oom_before; /* -1 when the counter cannot be read */
} exec_t;

typedef struct {
    int status;       /* wait status, valid when have_status */
    int have_status;
    uint32_t reason;  /* EXITED unless the agent ended the run */
    int64_t ended;
} run_t;

/* The oom_kill counter of our memory cgroup: cgroup v2 memory.events, or the
 * v1 memory.oom_control of Linux versions that have it. -1 when neither exists. */
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

static int is_own_var(const char *var)
{
    return strncmp(var, "SANDGATE_FILE=", 14) == 0 || strncmp(var, "SANDGATE_WORKDIR=", 17) == 0;
}

/* The environment of every command and kernel: ours, with SANDGATE_FILE and
 * SANDGATE_WORKDIR set by us (the two strings the array owns). */
static char **build_env(const char *file_path)
{
    size_t n = 0, i, j = 0;
    char **envp, *file_var, *work_var;

    while (environ[n] != NULL)
        n++;
    envp = calloc(n + 3, sizeof(*envp));
    file_var = malloc(strlen(file_path) + sizeof("SANDGATE_FILE="));
    work_var = malloc(strlen(workdir) + sizeof("SANDGATE_WORKDIR="));
    if (envp == NULL || file_var == NULL || work_var == NULL) {
        free(envp);
        free(file_var);
        free(work_var);
        return NULL;
    }
    strcpy(file_var, "SANDGATE_FILE=");
    strcat(file_var, file_path);
    strcpy(work_var, "SANDGATE_WORKDIR=");
    strcat(work_var, workdir);
    for (i = 0; i < n; i++) {
        if (!is_own_var(environ[i]))
            envp[j++] = environ[i];
    }
    envp[j++] = file_var;
    envp[j++] = work_var;
    envp[j] = NULL;
    return envp;
}

static void free_env(char **envp)
{
    size_t i;

    if (envp == NULL)
        return;
    for (i = 0; envp[i] != NULL; i++) {
        if (is_own_var(envp[i]))
            free(envp[i]);
    }
    free(envp);
}

/* ---- the system call filter of user code ------------------------------- */

/* prlimit() on another process needs only the same uid and gid, and user
 * code runs as the agent's user: without this filter it could lower the
 * agent's limits (RLIMIT_NOFILE: no pipe for the next run; RLIMIT_CPU: a
 * SIGKILL from the kernel, which even PID 1 takes). The filter, inherited by
 * every descendant, refuses prlimit64 with a pid other than 0 ("myself",
 * what setrlimit and getrlimit use) with EPERM, on the native system call
 * table and on the compat one a 64-bit process can still reach. */
#if defined(__x86_64__)
#define FILTER_ARCH AUDIT_ARCH_X86_64
#define FILTER_COMPAT_ARCH AUDIT_ARCH_I386
#define FILTER_COMPAT_NR_PRLIMIT64 340
#define FILTER_NR_MASK 0xbfffffffu /* x32 numbers are the native ones with bit 30 set */
#elif defined(__aarch64__)
#define FILTER_ARCH AUDIT_ARCH_AARCH64
#define FILTER_COMPAT_ARCH AUDIT_ARCH_ARM
#define FILTER_COMPAT_NR_PRLIMIT64 369
#define FILTER_NR_MASK 0xffffffffu
#endif

#ifdef FILTER_ARCH
static int install_filter(void)
{
    struct sock_filter prog[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, FILTER_ARCH, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, FILTER_COMPAT_ARCH, 4, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        /* native */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_STMT(BPF_ALU | BPF_AND | BPF_K, FILTER_NR_MASK),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_prlimit64, 3, 5),
        /* compat */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, FILTER_COMPAT_NR_PRLIMIT64, 1, 3),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW), /* not reached */
        /* prlimit64: the pid is an int, the low half of the first argument */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
                                               + 4
#endif
                 ),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    };
    struct sock_fprog fprog = {(unsigned short)(sizeof(prog) / sizeof(prog[0])), prog};

    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0, 0);
}
#else
static int install_filter(void)
{
    return 0; /* no filter for this architecture yet */
}
#endif

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

/* Once a run has ended, take what is already in its stdout and stderr pipes,
 * but do not wait for writers that still hold them open. Returns 1 when a
 * stream passed the cap. */
static int drain(exec_t *x, const int *fds)
{
    int i;

    for (i = 0; i < 2; i++) {
        size_t total = 0;
        int rc = PUMP_DATA;

        while (fds[i] >= 0 && rc == PUMP_DATA && total < DRAIN_LIMIT)
            rc = pump(x, fds[i], (uint32_t)i + 1, &total);
        if (rc == PUMP_CAP)
            return 1;
    }
    return 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Close every fd from `low` up. */
static void close_from(int low)
{
    long max, fd;

    if (close_range((unsigned)low, ~0u, 0) == 0)
        return;
    max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536)
        max = 65536;
    for (fd = low; fd < max; fd++)
        close((int)fd);
}

/* In the forked child: become the leader of a new group, put /dev/null on
 * fd 0 and fds[i] on fd i + 1, close every other fd, volunteer for the OOM
 * killer, and exec the shell. The agent is single-threaded, so libc is
 * safe to use after fork; this function never returns.
 *
 * The order matters: while the child still holds the agent's channel (its
 * fds 0 and 1 are the container's stdin and stdout, through which the
 * proxy reads the protocol) it stays non-dumpable as the agent is, so no
 * other process of the sandbox's user may open /proc/<child>/fd/1 and
 * write forged messages into the channel. Only once every descriptor is
 * final does it become dumpable (needed to write its own oom_score_adj). */
static void child_exec(exec_t *x, const char *cmd, const int *fds, int nfds)
{
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    struct sigaction sa;
    sigset_t none;
    int fd, i, moved[5];

    setpgid(0, 0);
    /* Move every source above the targets first, so that no dup2 below
     * overwrites a source still to be placed (the agent's own signalfd and
     * /dev/null are likely to sit on fds 3 and 4). */
    for (i = 0; i <= nfds; i++) {
        moved[i] = fcntl(i == 0 ? devnull_fd : fds[i - 1], F_DUPFD_CLOEXEC, 16);
        if (moved[i] < 0)
            _exit(127);
    }
    for (i = 0; i <= nfds; i++) {
        if (dup2(moved[i], i) < 0) /* the copy on fd i is not close-on-exec */
            _exit(127);
    }
    close_from(nfds + 1);
    /* The descriptors are final: nothing of the agent's is left. The agent
     * is not dumpable, which makes /proc/self/ files root-owned; become
     * dumpable so the write is allowed (exec resets it anyway). */
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, "1000", 4) < 0) {
            /* best effort */
        }
        close(fd);
    }
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
    if (install_filter() != 0) {
        dprintf(2, "sandgate-agent: cannot install the system call filter: %s\n", strerror(errno));
        _exit(127);
    }
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
 * filled, or -1 when it could not be started (explained on stderr). A live
 * kernel is spared by the kill that ends the run. */
static int run_one(exec_t *x, const char *cmd, run_t *res)
{
    int outp[2] = {-1, -1}, errp[2] = {-1, -1};
    int fds[2];
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
    if (pid == 0) {
        int child_fds[2] = {outp[1], errp[1]};

        child_exec(x, cmd, child_fds, 2);
    }
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
            rc = pump(x, fds[i], (uint32_t)i + 1, NULL);
            if (rc == PUMP_EOF)
                close_fd(&fds[i]);
            else if (rc == PUMP_CAP)
                capped = 1;
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

    /* The shell is gone; take what is already in the pipes. */
    if (res->reason == SG_AGENT_REASON_EXITED && drain(x, fds))
        res->reason = SG_AGENT_REASON_OUTPUT_LIMIT;
    kill_tree(kernel_alive() ? kern.pid : -1);
    for (i = 0; i < 2; i++)
        close_fd(&fds[i]);
    res->have_status = watched_done;
    res->status = watched_status;
    watched_pid = -1;
    return 0;

Error:
    for (i = 0; i < 2; i++) {
        close_fd(&outp[i]);
        close_fd(&errp[i]);
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
    r |= sg_agent_put_u32(&out, x->state);
    sg_agent_msg_end(&out, 0);
    flush_out(r);
    logmsg("exec %u: %s ended: %s, code %d, signal %u, kernel %s", x->id, stage, sg_agent_reason_name(reason),
           (int)code, sig, sg_agent_state_name(x->state));
}

/* Exit code and signal of a process from its wait status, and the reason
 * to report when `reason` says it ended by itself (EXITED): a signal the
 * agent did not send is KILLED, or OOM when the OOM killer is the likely
 * sender. Without a status it was still being killed: SIGKILL. */
static uint32_t classify(exec_t *x, int have_status, int status, uint32_t reason, int32_t *code, uint32_t *sig)
{
    long long oom_now;
    int oom_seen;

    *code = -1;
    *sig = 0;
    if (!have_status)
        *sig = SIGKILL;
    else if (WIFEXITED(status))
        *code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        *sig = (uint32_t)WTERMSIG(status);
    if (reason != SG_AGENT_REASON_EXITED)
        return reason;

    oom_now = x->oom_before >= 0 ? read_oom_kills() : -1;
    oom_seen = oom_now > x->oom_before;
    if (*sig != 0) {
        /* SIGKILL is what the OOM killer uses; without a counter to ask,
         * it is the likeliest sender. */
        if (*sig == SIGKILL && (x->oom_before < 0 || oom_now < 0 || oom_seen))
            return SG_AGENT_REASON_OOM;
        return SG_AGENT_REASON_KILLED;
    }
    if (*code == 128 + SIGKILL && x->oom_before >= 0 && oom_seen)
        return SG_AGENT_REASON_OOM; /* the shell outlived the program the OOM killer took */
    return SG_AGENT_REASON_EXITED;
}

/* Turn a finished run into the EXIT message. Returns 1 when the EXEC is over
 * (EXIT sent), 0 when a successful setup lets the run go on. */
static int finish(exec_t *x, run_t *res, const char *stage, int is_setup)
{
    int32_t code;
    uint32_t sig, reason = classify(x, res->have_status, res->status, res->reason, &code, &sig);

    if (is_setup && reason == SG_AGENT_REASON_EXITED) {
        if (code == 0)
            return 0;
        reason = SG_AGENT_REASON_SETUP_FAILED;
    }
    send_exit(x, code, sig, reason, stage, res->ended);
    return 1;
}

/* ---- kernels --------------------------------------------------------- */

/* Close our ends of a kernel that is gone (or killed and reaped). */
static void kernel_forget(void)
{
    close_fd(&kern.out_fd);
    close_fd(&kern.err_fd);
    close_fd(&kern.req_fd);
    close_fd(&kern.ans_fd);
    free(kern.cmd);
    kern.cmd = NULL;
    kern.pid = -1;
    kern.done = 0;
}

/* Read and throw away whatever the kernel has written so far, at most
 * DRAIN_LIMIT bytes per pipe so that a chatty kernel cannot starve stdin.
 * A pipe at EOF is closed. */
static void kernel_discard(void)
{
    static uint8_t buf[SG_AGENT_OUTPUT_CHUNK];
    int *fds[3] = {&kern.out_fd, &kern.err_fd, &kern.ans_fd};
    int i;

    for (i = 0; i < 3; i++) {
        size_t total = 0;

        while (*fds[i] >= 0 && total < DRAIN_LIMIT) {
            ssize_t n = read(*fds[i], buf, sizeof(buf));

            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                close_fd(fds[i]);
            if (n <= 0)
                break;
            total += (size_t)n;
        }
    }
}

/* Before a stateful EXEC uses the kernel: one that died since the last EXEC,
 * can no longer take requests or answer them, or was started with another
 * kernel_cmd is ended and cleaned away, with whatever it left behind.
 * Returns 1 when a kernel was lost that way. */
static int kernel_reconcile(const char *cmd)
{
    if (kern.pid < 0)
        return 0;
    if (!kern.done && kern.req_fd >= 0 && kern.ans_fd >= 0 && strcmp(kern.cmd, cmd) == 0)
        return 0;
    logmsg("kernel %d is %s; it is replaced", (int)kern.pid,
           kern.done ? "gone" : kern.req_fd < 0 || kern.ans_fd < 0 ? "unable to take requests" : "of another command");
    kill_tree(-1);
    kernel_forget();
    return 1;
}

/* What the EXIT reports when the EXEC ends before reaching the kernel. */
static uint32_t kernel_idle_state(int lost)
{
    if (kernel_alive())
        return SG_AGENT_STATE_KEPT;
    return lost ? SG_AGENT_STATE_LOST : SG_AGENT_STATE_NONE;
}

/* Start kernel_cmd with the pipes of agent_proto.h on its fds 1 to 4. Returns
 * 0, or -1 when it could not be started (explained on stderr). */
static int kernel_start(exec_t *x)
{
    int p[4][2], ours[4], i;
    pid_t pid;

    for (i = 0; i < 4; i++)
        p[i][0] = p[i][1] = -1;
    for (i = 0; i < 4; i++) {
        if (pipe2(p[i], O_CLOEXEC) != 0) {
            start_failed_output(x, "pipe");
            goto Error;
        }
    }
    /* stdout, stderr and answers are read by us, requests written by us. */
    ours[0] = p[0][0];
    ours[1] = p[1][0];
    ours[2] = p[2][1];
    ours[3] = p[3][0];
    for (i = 0; i < 4; i++)
        fcntl(ours[i], F_SETFL, O_NONBLOCK);
    kern.cmd = strdup(x->kernel_cmd);
    if (kern.cmd == NULL) {
        start_failed_output(x, "memory");
        goto Error;
    }

    if (x->started == 0)
        x->started = now_ns();
    pid = fork();
    if (pid < 0) {
        start_failed_output(x, "fork");
        goto Error;
    }
    if (pid == 0) {
        int child_fds[4] = {p[0][1], p[1][1], p[2][0], p[3][1]};

        child_exec(x, x->kernel_cmd, child_fds, 4);
    }
    setpgid(pid, pid);
    close(p[0][1]);
    close(p[1][1]);
    close(p[2][0]);
    close(p[3][1]);
    kern.pid = pid;
    kern.done = 0;
    kern.out_fd = ours[0];
    kern.err_fd = ours[1];
    kern.req_fd = ours[2];
    kern.ans_fd = ours[3];
    logmsg("exec %u: kernel started, pid %d", x->id, (int)pid);
    return 0;

Error:
    for (i = 0; i < 4; i++) {
        close_fd(&p[i][0]);
        close_fd(&p[i][1]);
    }
    free(kern.cmd);
    kern.cmd = NULL;
    return -1;
}

enum { KERNEL_ANSWERED, KERNEL_ENDED, KERNEL_TIMEOUT, KERNEL_CAPPED, KERNEL_BROKEN };

typedef struct {
    int outcome;        /* KERNEL_* */
    int32_t answer;     /* the exit code, for ANSWERED */
    const char *broken; /* why, for BROKEN */
    int64_t ended;
} kernel_res_t;

/* "<decimal>" with an optional '-', within i32; 0 or -1. */
static int parse_answer(const char *s, size_t len, int32_t *code)
{
    size_t i = s[0] == '-' ? 1 : 0;
    long long v = 0;

    if (len == i || len - i > 10)
        return -1;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    v = s[0] == '-' ? -v : v;
    if (v < INT32_MIN || v > INT32_MAX)
        return -1;
    *code = (int32_t)v;
    return 0;
}

/* Write as much of "<len>\n<code>" as the pipe takes; 0, or -1 when the
 * kernel no longer reads its requests. */
static int write_request(exec_t *x, const char *head, size_t hlen, size_t *done)
{
    while (*done < hlen + x->code_len) {
        const void *p = *done < hlen ? (const void *)(head + *done) : (const void *)(x->code + (*done - hlen));
        size_t len = *done < hlen ? hlen - *done : x->code_len - (*done - hlen);
        ssize_t n = write(kern.req_fd, p, len);

        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        *done += (size_t)n;
    }
    return 0;
}

/* Hand the code to the live kernel and follow it until it answers, ends, or
 * must be ended. Output is forwarded; nothing is killed here. */
static void kernel_run(exec_t *x, kernel_res_t *kr)
{
    char head[32], ans[32];
    size_t hlen, written = 0, alen = 0;
    int64_t doomed_at = 0; /* when its request or answer pipe closed */
    const char *doomed = NULL;
    int i;

    hlen = (size_t)snprintf(head, sizeof(head), "%zu\n", x->code_len);
    if (x->started == 0)
        x->started = now_ns();
    kr->outcome = -1;
    kr->answer = 0;
    kr->broken = NULL;

    while (kr->outcome < 0) {
        int *fds[4] = {&kern.out_fd, &kern.err_fd, &kern.ans_fd, &kern.req_fd};
        struct pollfd pfd[5];
        int idx[4] = {-1, -1, -1, -1}, n = 0, ms;
        int64_t now = now_ns(), left = x->deadline - now;

        if (doomed == NULL && kern.ans_fd < 0) {
            doomed = "closed its answer pipe";
            doomed_at = now;
        }
        if (left <= 0) {
            kr->outcome = KERNEL_TIMEOUT;
            break;
        }
        if (doomed != NULL && now - doomed_at > KERNEL_GRACE_NS) {
            kr->outcome = KERNEL_BROKEN;
            kr->broken = doomed;
            break;
        }
        ms = (int)((left + 999999) / 1000000);
        if (ms > IDLE_POLL_MS)
            ms = IDLE_POLL_MS;
        if (doomed != NULL && ms > 10)
            ms = 10;
        for (i = 0; i < 4; i++) {
            if (*fds[i] < 0 || (i == 3 && (written == hlen + x->code_len || doomed != NULL)))
                continue;
            idx[i] = n;
            pfd[n].fd = *fds[i];
            pfd[n].events = i == 3 ? POLLOUT : POLLIN;
            pfd[n].revents = 0;
            n++;
        }
        pfd[n].fd = sig_fd;
        pfd[n].events = POLLIN;
        pfd[n].revents = 0;
        if (poll(pfd, (nfds_t)n + 1, ms) < 0 && errno != EINTR) {
            logmsg("poll: %s", strerror(errno));
            sleep_ns(10000000);
        }

        /* Output first: what the kernel wrote before answering comes first. */
        for (i = 0; i < 2; i++) {
            int rc;

            if (idx[i] < 0 || pfd[idx[i]].revents == 0)
                continue;
            rc = pump(x, *fds[i], (uint32_t)i + 1, NULL);
            if (rc == PUMP_EOF)
                close_fd(fds[i]);
            else if (rc == PUMP_CAP)
                kr->outcome = KERNEL_CAPPED;
        }
        if (kr->outcome >= 0)
            break;
        if (idx[3] >= 0 && pfd[idx[3]].revents != 0 && write_request(x, head, hlen, &written) != 0 && doomed == NULL) {
            doomed = "stopped reading its requests";
            doomed_at = now_ns();
        }
        if (idx[2] >= 0 && pfd[idx[2]].revents != 0) {
            ssize_t r = read(kern.ans_fd, ans + alen, sizeof(ans) - 1 - alen);
            char *nl;

            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                close_fd(&kern.ans_fd); /* the kernel is ending, or can no longer answer */
            } else if (r > 0) {
                alen += (size_t)r;
                nl = memchr(ans, '\n', alen);
                if (nl != NULL && parse_answer(ans, (size_t)(nl - ans), &kr->answer) != 0) {
                    kr->outcome = KERNEL_BROKEN;
                    kr->broken = "wrote a malformed answer";
                } else if (nl != NULL && written < hlen + x->code_len) {
                    kr->outcome = KERNEL_BROKEN;
                    kr->broken = "answered before reading the whole request";
                } else if (nl != NULL) {
                    kr->outcome = KERNEL_ANSWERED;
                } else if (alen == sizeof(ans) - 1) {
                    kr->outcome = KERNEL_BROKEN;
                    kr->broken = "wrote a malformed answer";
                }
            }
        }
        if (pfd[n].revents != 0)
            handle_signals();
        reap();
        if (kr->outcome < 0 && kern.done)
            kr->outcome = KERNEL_ENDED;
    }
    kr->ended = now_ns();
}

/* The stateful part of an EXEC, after setup: start the kernel if there is
 * none, run the code in it, and send the EXIT. `lost` says whether a kernel
 * was lost since the last EXIT (for a failed start). */
static void exec_in_kernel(exec_t *x, int lost)
{
    kernel_res_t kr;
    int fds[2];
    int32_t code = -1;
    uint32_t sig = 0, reason = SG_AGENT_REASON_EXITED;
    int keep = 0;

    if (kernel_alive()) {
        /* What it wrote since the last EXEC is not ours; reading it may
         * also reveal that it can no longer answer. */
        kernel_discard();
        lost |= kernel_reconcile(x->kernel_cmd);
    }
    if (kernel_alive()) {
        x->state = SG_AGENT_STATE_KEPT;
    } else if (kernel_start(x) == 0) {
        x->state = SG_AGENT_STATE_NEW;
    } else {
        x->state = kernel_idle_state(lost);
        send_exit(x, -1, 0, SG_AGENT_REASON_START_FAILED, "run", now_ns());
        return;
    }

    kernel_run(x, &kr);
    fds[0] = kern.out_fd;
    fds[1] = kern.err_fd;
    switch (kr.outcome) {
    case KERNEL_ANSWERED:
        code = kr.answer;
        if (drain(x, fds))
            reason = SG_AGENT_REASON_OUTPUT_LIMIT;
        else
            keep = 1;
        break;
    case KERNEL_ENDED:
        if (drain(x, fds))
            reason = SG_AGENT_REASON_OUTPUT_LIMIT;
        break;
    case KERNEL_TIMEOUT:
        reason = SG_AGENT_REASON_TIMEOUT;
        break;
    case KERNEL_CAPPED:
        reason = SG_AGENT_REASON_OUTPUT_LIMIT;
        break;
    case KERNEL_BROKEN: {
        char why[256];

        snprintf(why, sizeof(why), "sandgate-agent: the kernel %s; it was stopped, and the next run starts a new one\n",
                 kr.broken);
        forward(x, 2, (const uint8_t *)why, strlen(why));
        reason = SG_AGENT_REASON_KILLED;
        break;
    }
    }

    kill_tree(keep && kernel_alive() ? kern.pid : -1);
    if (keep && kernel_alive()) {
        send_exit(x, code, 0, reason, "run", kr.ended);
        return;
    }
    /* The kernel is gone, ended by itself (its status tells how) or by us. */
    if (kr.outcome == KERNEL_BROKEN) {
        code = -1;
        sig = SIGKILL;
    } else if (kr.outcome != KERNEL_ANSWERED) {
        reason = classify(x, kern.done, kern.status, reason, &code, &sig);
    }
    x->state = SG_AGENT_STATE_LOST;
    kernel_forget();
    send_exit(x, code, sig, reason, "run", kr.ended);
}

static void handle_exec(uint32_t id, const uint8_t *payload, size_t len)
{
    sg_agent_exec_req_t q;
    sg_agent_fail_t f;
    exec_t x;
    run_t res;
    uint32_t timeout_ms;
    char why[PATH_MAX + 128];
    int stateful, lost = 0;

    memset(&x, 0, sizeof(x));
    x.id = id;
    x.state = SG_AGENT_STATE_NONE;
    if (sg_agent_exec_req_decode(payload, len, &q, &f) != 0) {
        send_fail(id, &f);
        goto Exit;
    }
    timeout_ms = q.timeout_ms;
    x.output_cap = q.output_cap;
    x.setup_cmd = q.setup_cmd;
    x.setup_stage = q.setup_stage;
    x.run_cmd = q.run_cmd;
    x.file_path = q.file_path;
    x.kernel_cmd = q.kernel_cmd;
    x.code = q.code;
    x.code_len = q.code_len;
    stateful = x.kernel_cmd[0] != '\0';
    x.envp = build_env(x.file_path);
    if (x.envp == NULL) {
        send_error(id, SG_AGENT_ERR_IO, "Out of memory.");
        goto Exit;
    }
    x.oom_before = read_oom_kills();
    /* The budget starts now: writing the file is part of the run's cost. */
    x.deadline = now_ns() + (int64_t)timeout_ms * 1000000;
    if (stateful) {
        lost = kernel_reconcile(x.kernel_cmd);
        x.state = kernel_idle_state(lost);
    }

    if (!stateful && x.file_path[0] != '\0' && write_code(&x, why, sizeof(why)) != 0) {
        forward(&x, 2, (const uint8_t *)why, strlen(why));
        send_exit(&x, -1, 0, SG_AGENT_REASON_START_FAILED, "run", now_ns());
        goto Exit;
    }
    if (x.setup_cmd[0] != '\0') {
        const char *stage = x.setup_stage[0] != '\0' ? x.setup_stage : "setup";
        int rc = run_one(&x, x.setup_cmd, &res);

        if (stateful) {
            /* Setup spares the kernel, but may have killed it itself. */
            lost |= kernel_reconcile(x.kernel_cmd);
            x.state = kernel_idle_state(lost);
        }
        if (rc != 0) {
            send_exit(&x, -1, 0, SG_AGENT_REASON_START_FAILED, stage, now_ns());
            goto Exit;
        }
        if (finish(&x, &res, stage, 1))
            goto Exit;
    }
    if (stateful) {
        exec_in_kernel(&x, lost);
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
    free(x.kernel_cmd);
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
        struct pollfd pfd[5] = {{.fd = 0, .events = POLLIN}, {.fd = sig_fd, .events = POLLIN}};
        int kfds[3] = {kern.out_fd, kern.err_fd, kern.ans_fd};
        nfds_t n = 2;
        int i, kernel_wrote = 0;

        /* A kernel between EXECs: what it writes is read and discarded. */
        for (i = 0; i < 3; i++) {
            if (kfds[i] >= 0) {
                pfd[n].fd = kfds[i];
                pfd[n].events = POLLIN;
                n++;
            }
        }
        reap();
        if (poll(pfd, n, IDLE_POLL_MS) < 0) {
            if (errno != EINTR) {
                logmsg("poll: %s", strerror(errno));
                sleep_ns(10000000);
            }
            continue;
        }
        for (i = 2; i < (int)n; i++)
            kernel_wrote |= pfd[i].revents != 0;
        if (kernel_wrote)
            kernel_discard();
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
