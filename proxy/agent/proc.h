/*
 * proc.h — the agent's processes: starting user code, collecting exit
 * statuses, killing everything the agent started, and the signals it takes.
 *
 * Started as root, the agent keeps uid 0 as its real and saved uid and
 * user code runs as the sandbox user for good (creds.h): user code may then
 * not signal, trace or open the agent at all, on either runtime. Started as
 * any other user it runs as the same user as the code it starts. Under
 * either start it also protects itself by what the kernel gives any process:
 *   - it is not dumpable, so user code cannot open /proc/<agent>/fd/{0,1}
 *     and read requests or forge replies;
 *   - as PID 1 of its namespace it cannot be killed from inside; elsewhere
 *     (in tests) it is a child subreaper, so orphans still come back to it;
 *     a termination signal counts only from outside, with a sender the
 *     kernel wrote (proc_handle_signals);
 *   - every command and kernel runs under a system call filter that refuses
 *     prlimit() on another process, so user code cannot lower the agent's
 *     limits, and new namespaces (which gVisor's kernel would grant);
 *   - user code gets oom_score_adj 1000, so the OOM killer picks it first;
 *   - after every run, every descendant is found through /proc and killed,
 *     including those that called setsid() and double-forked.
 *
 * Signals (SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1) are blocked and read from a
 * signalfd, proc_sig_fd, that every wait of the agent polls; nothing runs in
 * a signal handler.
 */
#ifndef SANDGATE_AGENT_PROC_H
#define SANDGATE_AGENT_PROC_H

#include <sys/types.h>

/* A child whose exit status matters: the command being run (exec.c), the
 * session's kernel (kernel.c). The owner sets pid (-1: none) and clears
 * done when it starts one; proc_reap records the status, because any
 * waitpid(-1) of the agent may be the one that collects it. */
typedef struct {
    pid_t pid;
    int done; /* reaped: status is valid */
    int status;
} proc_child_t;

extern int proc_sig_fd; /* the signalfd, for the agent's polls */
/* Set by a SIGUSR1 from outside (a proxy that re-attaches): the request
 * being read, if any, and every byte already readable on stdin are to be
 * dropped before the next header (loop.c). Cleared by the reader. */
extern int proc_resync;

/* Start-up, before anything else: the agent's protections above, the
 * signalfd, /dev/null for the children's stdin, and the kill of every
 * descendant at exit, so that whatever way the agent exits (agent_exit),
 * nothing it started outlives it. 0, or -1 (logged). */
int proc_init(void);

/* Follow c from now on (proc_reap, proc_kill_tree); at most two. */
void proc_follow(proc_child_t *c);

/* Collect every exited child without blocking. */
void proc_reap(void);

/* Drain the signalfd: SIGCHLD reaps; SIGUSR1 from outside sets
 * proc_resync; a termination signal from outside ends the agent
 * (agent_exit(0)). */
void proc_handle_signals(void);

/* Kill everything the agent started except `keep` (the kernel to spare, or
 * -1) and reap it, until a /proc scan finds nothing left; the descendants of
 * `keep` are killed too. 0, or -1 when /proc cannot be scanned or some
 * process resists for 2 s (logged). */
int proc_kill_tree(pid_t keep);
/* Whether the last proc_kill_tree() gave up with processes left (its
 * budget spent): the main loop then calls proc_finish_kill() before it
 * serves the next request. */
int proc_tree_left(void);
/* Up to SG_AGENT_KILL_MORE more budgets of proc_kill_tree() for what the last one left;
 * then what resists (a process stuck in the kernel) is logged and left to
 * the next run's kill, so that the agent never stops serving. */
void proc_finish_kill(pid_t keep);

/* Fork `/bin/sh -c cmd` with envp as the leader of a new process group,
 * /dev/null on fd 0 and fds[i] on fd i + 1 (nfds at most 5), no other fd,
 * oom_score_adj 1000, in the work dir, under the system call filter. The
 * fds stay open in the agent. The pid, or -1 (errno) when fork failed; a
 * failure in the child is reported on its stderr and ends it with 127. */
pid_t proc_spawn(const char *cmd, char **envp, const int *fds, int nfds);

#endif
