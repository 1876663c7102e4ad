/*
 * kernel.h — the session's kernel (stateful EXECs, kernel_cmd not empty):
 * one long-lived interpreter kept across EXECs, that the agent talks to
 * over its fds 3 and 4 as agent_proto.h describes.
 *
 * The kernel is the one process the end-of-run kill spares (its children
 * are killed like any other); it dies with a timeout, an output limit, a
 * malformed answer, a different kernel_cmd, or the agent itself. The
 * process forked for it must be the interpreter, so kernel_cmd has to
 * `exec` it: a shell left in between would be the spared process, and the
 * interpreter under it would be killed after every run. Between EXECs the
 * idle loop (loop.c) reads and discards whatever the kernel writes, so a
 * background thread that prints never blocks on a full pipe.
 *
 * There is at most one kernel, owned by this room, from its start until an
 * EXEC finds it gone or ends it.
 */
#ifndef SANDGATE_AGENT_KERNEL_H
#define SANDGATE_AGENT_KERNEL_H

#include <stdint.h>
#include <sys/types.h>

#include "run.h"

/* The live kernel's pid, or -1: the process a run's kill must spare. */
pid_t kernel_live_pid(void);

/* Before a stateful EXEC uses the kernel: one that died since the last
 * EXEC, can no longer take requests or answer them, or was started with
 * another kernel_cmd is ended and cleaned away, with whatever it left
 * behind. Returns 1 when a kernel was lost that way. */
int kernel_reconcile(const char *cmd);

/* What the EXIT reports (sg_agent_state_t) when the EXEC ends before
 * reaching the kernel; lost: a kernel was lost since the last EXIT. */
uint32_t kernel_idle_state(int lost);

/* The stateful part of an EXEC, after setup: start the kernel if there is
 * none, run x's code in it, and send the EXIT. */
void kernel_exec(run_t *x, int lost);

/* Between EXECs: the fds the idle loop polls (its stdout, stderr, answer
 * and result pipes; -1 for none), and the reading and throwing away of what
 * the kernel wrote (at most DRAIN_LIMIT bytes per pipe, so that a chatty
 * kernel cannot starve stdin; a pipe at EOF is closed). */
#define KERNEL_IDLE_FDS 4
void kernel_idle_fds(int fds[KERNEL_IDLE_FDS]);
void kernel_discard(void);

#endif
