/*
 * proc.c — the agent's processes (see proc.h): spawning user code under its
 * protections, reaping, the kill of the whole tree, and signals.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"
#include "creds.h"
#include "proc.h"

#define KILL_BUDGET_NS ((long long)SG_AGENT_KILL_BUDGET_MS * 1000 * 1000) /* give up killing after 2 s */

int proc_sig_fd = -1;
int proc_resync;
static pid_t self_pid;
static int devnull_fd = -1;
static proc_child_t *followed[2];

void proc_follow(proc_child_t *c)
{
    size_t i;

    for (i = 0; i < sizeof(followed) / sizeof(followed[0]); i++) {
        if (followed[i] == c)
            return;
        if (followed[i] == NULL) {
            followed[i] = c;
            return;
        }
    }
    agent_log("internal error: more than %zu children followed", sizeof(followed) / sizeof(followed[0]));
    abort();
}

void proc_reap(void)
{
    pid_t p;
    int st;
    size_t i;

    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
        for (i = 0; i < sizeof(followed) / sizeof(followed[0]); i++) {
            if (followed[i] != NULL && p == followed[i]->pid && !followed[i]->done) {
                followed[i]->status = st;
                followed[i]->done = 1;
            }
        }
    }
}

/* ---- the process tree, as /proc shows it -------------------------------- */

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

/* The pids /proc lists, in a vector kept between calls. /proc stays open
 * too: under gVisor each system call costs tens of microseconds, and this
 * runs after every EXEC. */
static struct {
    pid_t *v;
    size_t n, cap;
} pids;

static int add_pid(void *ctx, const char *name)
{
    char *end;
    long pid = strtol(name, &end, 10);

    (void)ctx;
    if (*end != '\0' || pid <= 0)
        return 0;
    if (pids.n == pids.cap) {
        pids.cap = pids.cap != 0 ? pids.cap * 2 : 256;
        pids.v = agent_xrealloc(pids.v, pids.cap * sizeof(*pids.v));
    }
    pids.v[pids.n++] = (pid_t)pid;
    return 0;
}

/* Lists /proc into pids: 0, or -1 when it cannot be read. */
static int list_pids(void)
{
    static int proc_fd = -1;
    /* aligned for the records getdents64 writes into it */
    static union {
        struct dirent64 align;
        char bytes[8192];
    } buf;

    pids.n = 0;
    if (proc_fd < 0 && (proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return -1;
    if (lseek(proc_fd, 0, SEEK_SET) != 0)
        return -1;
    return agent_dir_each(proc_fd, buf.bytes, sizeof(buf.bytes), add_pid, NULL);
}

/* Whether pids holds a process other than this one and `keep` (-1: none).
 * In a sandbox, where the agent is PID 1 of its own pid namespace, none is
 * the usual end of a run, told by the listing alone, without reading every
 * process's stat. */
static int others_listed(pid_t keep)
{
    for (size_t i = 0; i < pids.n; i++)
        if (pids.v[i] != self_pid && pids.v[i] != keep)
            return 1;
    return 0;
}

/* Snapshot of the processes of the last list_pids() that still exist,
 * sorted by pid. */
static void stat_procs(proc_t **list, size_t *count)
{
    /* Allocated up front so qsort/bsearch never see NULL, even when empty. */
    proc_t *v = agent_xmalloc((pids.n + 1) * sizeof(*v));
    size_t n = 0;

    for (size_t i = 0; i < pids.n; i++) {
        pid_t ppid;
        char state;

        if (read_stat(pids.v[i], &ppid, &state) != 0)
            continue; /* gone already */
        v[n].pid = pids.v[i];
        v[n].ppid = ppid;
        v[n].state = state;
        n++;
    }
    qsort(v, n, sizeof(*v), cmp_proc);
    *list = v;
    *count = n;
}

/* Snapshot of every process we can see, sorted by pid; -1 without /proc. */
static int scan_procs(proc_t **list, size_t *count)
{
    if (list_pids() != 0)
        return -1;
    stat_procs(list, count);
    return 0;
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

    /* one listing of /proc: each process's stat is read only when there
     * are others than us and `keep` */
    if (list_pids() != 0)
        return -1;
    if (!others_listed(keep))
        return 0;
    stat_procs(&v, &n);
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

static int tree_left;

int proc_tree_left(void)
{
    return tree_left;
}

/* A fork bomb converges because a killed process cannot fork again; the
 * budget only guards against processes stuck in a system call, and keeps
 * the reply of the run that ends from waiting on a slow convergence (the
 * main loop goes on: proc_tree_left). */
int proc_kill_tree(pid_t keep)
{
    int64_t start = agent_now_ns();
    long pause = 1000000;
    size_t i;
    int found, struck;

    for (;;) {
        /* A group is the quickest first strike, but only while its leader
         * is unreaped: until then its pid cannot be reused by a stranger. */
        struck = 0;
        for (i = 0; i < sizeof(followed) / sizeof(followed[0]); i++) {
            if (followed[i] != NULL && followed[i]->pid > 0 && !followed[i]->done && followed[i]->pid != keep) {
                kill(-followed[i]->pid, SIGKILL);
                struck = 1;
            }
        }
        found = kill_descendants(keep);
        if (found >= 0)
            tree_left = 0;
        if (found == 0 && !struck)
            return 0; /* nothing to kill, nothing to reap (the usual end of a kernel's run) */
        proc_reap();
        if (found == 0)
            return 0;
        if (found < 0) {
            /* Without /proc only the group kill above was possible. */
            agent_log("cannot scan /proc to find descendants: %s", strerror(errno));
            return -1;
        }
        if (agent_now_ns() - start > KILL_BUDGET_NS) {
            agent_log("could not kill every descendant within 2 s (%d left)", found);
            tree_left = 1;
            return -1;
        }
        agent_sleep_ns(pause);
        if (pause < 20000000)
            pause *= 2;
    }
}

void proc_finish_kill(pid_t keep)
{
    for (int i = 0; i < SG_AGENT_KILL_MORE && tree_left; i++)
        proc_kill_tree(keep);
    if (tree_left) {
        agent_log("processes of the last run resist being killed; they are left to the next run's kill");
        tree_left = 0;
    }
}

static void kill_all_at_exit(void)
{
    proc_kill_tree(-1);
}

/* ---- signals --------------------------------------------------------- */

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

/* Whether the kernel itself filled in the sender of a signal. kill() and
 * tgkill() (SI_USER, SI_TKILL) and the kernel's own signals (SI_KERNEL) do;
 * with sigqueue() and rt_sigqueueinfo() (negative codes) the sender writes
 * si_pid itself, so any process could claim to be an outsider (0). */
static int sender_is_known(const struct signalfd_siginfo *si)
{
    return si->ssi_code == SI_USER || si->ssi_code == SI_TKILL || si->ssi_code == SI_KERNEL;
}

/* A termination signal is honoured only from outside: user code runs under
 * our uid and could otherwise end the sandbox with `kill 1`. ssi_pid is 0
 * when the sender lives outside our pid namespace (docker stop), and is
 * believed only when the kernel wrote it. */
void proc_handle_signals(void)
{
    struct signalfd_siginfo si;

    while (read(proc_sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGCHLD)
            continue;
        if (!sender_is_known(&si)) {
            agent_log("ignoring signal %u with a sender it chose itself (code %d, pid %u)", si.ssi_signo, si.ssi_code,
                      si.ssi_pid);
            continue;
        }
        if (si.ssi_pid != 0 && is_descendant((pid_t)si.ssi_pid)) {
            agent_log("ignoring signal %u from sandboxed process %u", si.ssi_signo, si.ssi_pid);
            continue;
        }
        if (si.ssi_signo == SIGUSR1) {
            /* a proxy that re-attaches (agent_proto.h, "Resynchronisation") */
            agent_log("signal %u received: a new proxy resynchronises", si.ssi_signo);
            proc_resync = 1;
            continue;
        }
        agent_log("signal %u received, exiting", si.ssi_signo);
        agent_exit(0);
    }
    proc_reap();
}

int proc_init(void)
{
    sigset_t mask;

    self_pid = getpid();
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);

    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGUSR1);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    proc_sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (proc_sig_fd < 0) {
        agent_log("signalfd: %s", strerror(errno));
        return -1;
    }
    devnull_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull_fd < 0) {
        /* No /dev/null: an empty pipe gives the same immediate EOF. */
        int p[2];
        if (pipe2(p, O_CLOEXEC) != 0) {
            agent_log("no /dev/null and no pipe: %s", strerror(errno));
            return -1;
        }
        close(p[1]);
        devnull_fd = p[0];
    }
    atexit(kill_all_at_exit);
    return 0;
}

/* ---- the system call filter of user code ------------------------------- */

/* prlimit() on another process needs only the same uid and gid: an agent
 * started as the sandbox user (proc.h) could otherwise have its limits
 * lowered by user code (RLIMIT_NOFILE: no pipe for the next run; RLIMIT_CPU:
 * a SIGKILL from the kernel, which even PID 1 takes). The filter, inherited
 * by every descendant, refuses prlimit64 with a pid other than 0 ("myself",
 * what setrlimit and getrlimit use) with EPERM, on the native system call
 * table and on the compat one a 64-bit process can still reach.
 *
 * It also refuses new namespaces (unshare, setns, clone with a CLONE_NEW*
 * flag: EPERM; clone3, whose flags a filter cannot read: ENOSYS, on which
 * libc falls back to clone), as Docker's own filter does under runc: under
 * runsc that filter is not loaded and gVisor's kernel gives a new user
 * namespace full capabilities over it (chroot, mounts of its own). Native
 * table only: gVisor runs no 32-bit system calls, and under runc Docker's
 * filter covers both tables. */
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
#ifndef __NR_clone3
#define __NR_clone3 435
#endif
/* CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET */
#define FILTER_CLONE_NEW 0x7e020000u

#ifdef FILTER_ARCH
/* The low half of the first argument: prlimit64's pid, clone's flags. */
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define FILTER_ARG0_LO (offsetof(struct seccomp_data, args[0]) + 4)
#else
#define FILTER_ARG0_LO offsetof(struct seccomp_data, args[0])
#endif

static int install_filter(void)
{
    struct sock_filter prog[] = {
        /* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        /* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, FILTER_ARCH, 0, 7), /* else 9: compat */
                                                                        /* native */
        /* 2 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        /* 3 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, FILTER_NR_MASK),
        /* 4 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_prlimit64, 9, 0),     /* 14 */
        /* 5 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_unshare, 11, 0),      /* 17 */
        /* 6 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setns, 10, 0),        /* 17 */
        /* 7 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 10, 0),       /* 18 */
        /* 8 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 3, 7),         /* 12, else 16 */
                                                                               /* compat */
        /* 9 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, FILTER_COMPAT_ARCH, 0, 6), /* else 16 */
        /* 10 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        /* 11 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, FILTER_COMPAT_NR_PRLIMIT64, 2, 4), /* 14, else 16 */
                                                                                        /* clone: its flags */
        /* 12 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, FILTER_ARG0_LO),
        /* 13 */ BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, FILTER_CLONE_NEW, 3, 2), /* 17, else 16 */
                                                                               /* prlimit64: its pid */
        /* 14 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, FILTER_ARG0_LO),
        /* 15 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1), /* 16, else 17 */
        /* 16 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        /* 17 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        /* 18 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
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

/* ---- spawning -------------------------------------------------------- */

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

/* In the forked child. The agent is single-threaded, so libc is safe to
 * use after fork; this function never returns.
 *
 * The order matters: while the child still holds the agent's channel (its
 * fds 0 and 1 are the container's stdin and stdout, through which the
 * proxy reads the protocol) it stays non-dumpable as the agent is, so no
 * other process of the sandbox's user may open /proc/<child>/fd/1 and
 * write forged messages into the channel. Only once every descriptor is
 * final does it become dumpable (needed to write its own oom_score_adj). */
static void child_exec(const char *cmd, char **envp, const int *fds, int nfds)
{
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    struct sigaction sa;
    sigset_t none;
    int fd, i, moved[6];

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
    /* The descriptors are final: nothing of the agent's is left. Now the
     * sandbox user for good (creds.h), which also leaves it non-dumpable. */
    if (creds_drop_for_good() != 0) {
        dprintf(2, "sandgate-agent: cannot become the sandbox user: %s\n", strerror(errno));
        _exit(127);
    }
    /* Non-dumpable makes /proc/self/ files root-owned; become dumpable so
     * the write is allowed (exec resets it anyway). */
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, "1000", 4) < 0) {
            /* best effort */
        }
        close(fd);
    }
    if (chdir(agent_workdir) != 0) {
        dprintf(2, "sandgate-agent: cannot enter the work directory %s: %s\n", agent_workdir, strerror(errno));
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
    execve("/bin/sh", argv, envp);
    dprintf(2, "sandgate-agent: cannot run /bin/sh: %s\n", strerror(errno));
    _exit(127);
}

pid_t proc_spawn(const char *cmd, char **envp, const int *fds, int nfds)
{
    pid_t pid = fork();

    if (pid < 0)
        return -1;
    if (pid == 0)
        child_exec(cmd, envp, fds, nfds);
    setpgid(pid, pid); /* also here, so kill(-pid) works before the child runs */
    return pid;
}
