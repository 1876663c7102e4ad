/*
 * exec.h — the EXEC request: the code written where the commands expect it,
 * setup_cmd run first, then run_cmd as a one-shot command, or the code
 * handed to the session's kernel (kernel.h) when kernel_cmd is not empty.
 * Answers with OUTPUT messages, then exactly one EXIT (agent_proto.h).
 *
 * A one-shot command is /bin/sh -c in a process group of its own
 * (proc_spawn), followed by the pump loop (run.h) to its end; then every
 * process it started is killed, a live kernel excepted.
 */
#ifndef SANDGATE_AGENT_EXEC_H
#define SANDGATE_AGENT_EXEC_H

#include <stddef.h>
#include <stdint.h>

void exec_handle(uint32_t id, const uint8_t *payload, size_t len);

#endif
