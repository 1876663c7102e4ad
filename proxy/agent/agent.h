/*
 * agent.h — what every room of sandgate-agent shares: its settings, its log,
 * its clock, its failure policy and the reply channel (its stdout).
 *
 * The agent, PID 1 of every sandbox container, is in rooms, each a .c with
 * the .h that is its contract:
 *   loop.c      main: start-up, reading requests, dispatch, the idle wait
 *   exec.c      EXEC: the code's file, setup, one-shot runs (exec.h)
 *   kernel.c    the persistent kernel of stateful EXECs (kernel.h)
 *   run.c       one EXEC's output under its cap, the one pump loop that
 *               follows a process, the EXIT that ends it (run.h)
 *   results.c   what an EXEC gives back besides output: the kernel's result
 *               channel, the out directory's listing (results.h)
 *   proc.c      processes: spawning user code, reaping, killing the tree,
 *               signals (proc.h)
 *   creds.c     the uid split: the agent root, user code the sandbox user
 *               for good (creds.h)
 *   files.c     PUT_FILE and GET_FILE (files.h)
 *   paths.c     confinement of request paths to the work dir (paths.h)
 *   decode.c    decoders of the request payloads (decode.h)
 *   agent_proto.c  the wire format, shared with the proxy (agent_proto.h)
 *   agent.c     this header
 * Only libc, linked static. Single-threaded: nothing here is locked.
 *
 * Failure policy: running out of memory is fatal (agent_oom: one log line,
 * then agent_exit(1)); every other failure is reported to the proxy as an
 * ERROR or in an EXEC's stderr, identified by its sg_agent_err_t or
 * sg_agent_reason_t code. Whatever way the agent exits, nothing it started
 * outlives it (proc_init).
 */
#ifndef SANDGATE_AGENT_AGENT_H
#define SANDGATE_AGENT_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "agent_proto.h"

#define IDLE_POLL_MS 1000      /* reap at least this often */
#define DRAIN_LIMIT (1u << 20) /* bytes read per stream after a run ended */

/* The work dir: absolute, no trailing slash except for "/" itself. Set once
 * at start-up (loop.c), read-only afterwards. */
extern const char *agent_workdir;

/* One line on stderr, "sandgate-agent: " first; one write per line so lines
 * never interleave. */
void agent_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

int64_t agent_now_ns(void); /* CLOCK_MONOTONIC */
void agent_sleep_ns(long ns);

/* Exits with code; the only way the agent exits (see proc_init). */
void agent_exit(int code) __attribute__((noreturn));
/* Out of memory: logs it and exits with 1. */
void agent_oom(void) __attribute__((noreturn));
/* Allocation that never returns NULL: failure is agent_oom(). */
void *agent_xmalloc(size_t n);
void *agent_xcalloc(size_t n, size_t size);
void *agent_xrealloc(void *p, size_t n);
char *agent_xstrdup(const char *s);

/* write() all of it, through EINTR; 0 or -1 (errno). */
int agent_write_full(int fd, const void *p, size_t len);

/* One look, without waiting, at the n pipes fds[] (a negative fd is left
 * out): bit i of the result is set for each that has something, or an end,
 * to tell; every bit of the n when poll() fails, so that the caller reads
 * them all. Idle pipes then cost one system call together, not a read each
 * (under gVisor every system call costs tens of microseconds). Precondition:
 * 0 <= n <= AGENT_POLL_NOW_MAX (its callers look at 2 pipes, run_drain, and
 * KERNEL_IDLE_FDS, kernel_discard, which checks it at compile time). */
#define AGENT_POLL_NOW_MAX 8
uint32_t agent_poll_now(const int *fds, int n);

/* Calls each(ctx, name) for the entries of the directory dfd from its
 * current offset, read with getdents64 itself into buf (len bytes, aligned
 * for struct dirent64; the caller's, so that each may list another
 * directory meanwhile): readdir's fdopendir costs three more system calls
 * per directory. each returns 0 to go on, another value to stop, which is
 * returned. 0 at the end, -1 when the directory cannot be read. */
int agent_dir_each(int dfd, void *buf, size_t len, int (*each)(void *ctx, const char *name), void *ctx);

/* The reply channel. agent_out holds the message being built, sent whole by
 * agent_flush; a caller may build straight into it (GET_FILE). build_failed
 * is the OR of the sg_agent_* encoder results: non-zero means memory ran
 * out (agent_oom). If stdout is gone, so is the proxy, and nothing the
 * agent does later could be reported: the agent exits. */
extern sg_agent_buf_t agent_out;
void agent_flush(int build_failed);
/* The same for messages built whole in a buffer of their own (a RESULT,
 * filled as its record arrives between other messages). */
void agent_send_buf(sg_agent_buf_t *b, int build_failed);
void agent_send_ok(uint32_t id, uint64_t value);
void agent_send_error(uint32_t id, uint32_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* OUTPUT messages of at most SG_AGENT_OUTPUT_CHUNK bytes each. */
void agent_send_output(uint32_t id, uint32_t stream, const uint8_t *p, size_t len);

/* A request refused: the code (sg_agent_err_t) and the sentence of the
 * ERROR that reports it. agent_fail fills f and returns -1. */
typedef struct {
    uint32_t code;
    char msg[512]; /* as the ERROR reply carries it (its cap too) */
} sg_agent_fail_t;

int agent_fail(sg_agent_fail_t *f, uint32_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void agent_send_fail(uint32_t id, const sg_agent_fail_t *f);

#endif
