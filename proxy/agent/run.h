/*
 * run.h — one EXEC as the proxy sees it while it runs: its output, forwarded
 * in OUTPUT messages under the cap; the one pump loop that follows a process
 * (a one-shot command, exec.c, or the kernel, kernel.c) until it ends, must
 * be ended, or the deadline passes; and the EXIT that ends the EXEC.
 *
 * run_t belongs to the EXEC's handler (exec_handle), which fills it from the
 * request and frees it; exec.c and kernel.c update it as the EXEC goes.
 */
#ifndef SANDGATE_AGENT_RUN_H
#define SANDGATE_AGENT_RUN_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "decode.h"

typedef struct {
    uint32_t id;
    sg_agent_exec_req_t req; /* as decoded */
    char **envp;             /* of its commands and kernel */
    int64_t deadline;        /* CLOCK_MONOTONIC ns */
    int64_t started;         /* first fork, 0 until then */
    uint64_t sent[3];        /* bytes forwarded, by stream */
    uint32_t exit_flags;
    uint32_t state;       /* sg_agent_state_t, for EXIT */
    long long oom_before; /* -1 when the counter cannot be read */
} run_t;

/* Forward what fits under the cap on stream (1 stdout, 2 stderr), setting
 * the stream's TRUNCATED flag when it passed. Returns 1 when the cap was
 * passed. */
int run_forward(run_t *x, uint32_t stream, const uint8_t *p, size_t n);

/* "sandgate-agent: cannot start the command (what): <errno>" on stderr. */
void run_start_failed(run_t *x, const char *what);

/* How run_pump ends. A follower's own outcomes are RUN_OWN and above. */
enum { RUN_ENDED, RUN_TIMEOUT, RUN_CAPPED, RUN_OWN };

#define RUN_EXTRA_FDS 3

/* What run_pump follows besides the output pipes; ctx is the follower's. */
typedef struct {
    /* Before each poll, once the deadline is known not to have passed (now
     * is the time of that check): an outcome ends the loop; -1 goes on,
     * after adding at most RUN_EXTRA_FDS entries at pfd[0..*n) and lowering
     * *ms if it must. May be NULL. */
    int (*before_poll)(void *ctx, int64_t now, struct pollfd *pfd, int *n, int *ms);
    /* After the output was read, the entries added above with their
     * revents: an outcome ends the loop once signals are handled and
     * children reaped; -1 goes on. May be NULL. */
    int (*after_poll)(void *ctx, const struct pollfd *pfd, int n);
    /* After reaping: whether the process followed has ended (RUN_ENDED). */
    int (*ended)(void *ctx);
} run_follower_t;

/* The one pump loop. Polls the read ends fds[0] (stdout) and fds[1]
 * (stderr) of a process (-1: closed; one at EOF is closed and set to -1),
 * forwarding what they carry under the cap, with the agent's signals, until
 * the deadline passes (RUN_TIMEOUT), a stream passes the cap (RUN_CAPPED),
 * the follower says so (its outcome) or the process ends (RUN_ENDED).
 * Nothing is killed here. *ended is when the loop ended. */
int run_pump(run_t *x, int *fds, const run_follower_t *f, void *ctx, int64_t *ended);

/* Once a process has ended, take what is already in its stdout and stderr
 * pipes (at most DRAIN_LIMIT bytes each), but do not wait for writers that
 * still hold them open. Returns 1 when a stream passed the cap. */
int run_drain(run_t *x, const int *fds);

/* The oom_kill counter of the agent's memory cgroup, or -1. */
long long run_oom_kills(void);

/* Exit code and signal of a process from its wait status, and the reason
 * to report when `reason` says it ended by itself (EXITED): a signal the
 * agent did not send is KILLED, or OOM when the OOM killer is the likely
 * sender. Without a status it was still being killed: SIGKILL. */
uint32_t run_classify(run_t *x, int have_status, int status, uint32_t reason, int32_t *code, uint32_t *sig);

/* The EXIT that ends the EXEC (and its log line). `end` is when the run
 * ended, before the cleanup that follows it. */
void run_send_exit(run_t *x, int32_t code, uint32_t sig, uint32_t reason, const char *stage, int64_t end);

#endif
