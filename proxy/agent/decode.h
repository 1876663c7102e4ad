/*
 * decode.h — what the agent accepts from a request (agent_proto.h): the
 * decoders of the EXEC, PUT_FILE and GET_FILE payloads. Apart from the
 * agent's loop so that unit tests and the fuzz targets (fuzz/) reach them
 * without running an agent; paths.h confines the file paths they carry.
 *
 * Only libc, like the agent. A failure fills an sg_agent_fail_t (agent.h)
 * with the error code and the sentence of the ERROR reply the agent sends
 * for it.
 */
#ifndef SANDGATE_AGENT_DECODE_H
#define SANDGATE_AGENT_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "agent.h"

/* An EXEC payload. The strings are malloc'd, NUL-terminated and contain no
 * NUL; code points into the payload. Free with sg_agent_exec_req_free. */
typedef struct {
    uint32_t timeout_ms;
    uint32_t output_cap;
    char *setup_cmd;
    char *setup_stage;
    char *run_cmd;
    char *file_path;
    char *kernel_cmd;
    const uint8_t *code;
    size_t code_len;
} sg_agent_exec_req_t;

/* 0, or -1 with f filled (BAD_REQUEST for a malformed payload or a NUL in
 * a string) and nothing left to free. */
int sg_agent_exec_req_decode(const uint8_t *payload, size_t len, sg_agent_exec_req_t *x, sg_agent_fail_t *f);
void sg_agent_exec_req_free(sg_agent_exec_req_t *x);

/* A PUT_FILE payload; path malloc'd (not empty, no NUL), data points into
 * the payload. Free path. */
typedef struct {
    char *path;
    uint32_t mode;
    const uint8_t *data;
    size_t data_len;
} sg_agent_put_req_t;

int sg_agent_put_req_decode(const uint8_t *payload, size_t len, sg_agent_put_req_t *p, sg_agent_fail_t *f);

/* A GET_FILE payload (nothing may follow max_bytes); max_bytes is clamped
 * to SG_AGENT_MAX_PAYLOAD, so that the reply fits in one message. Free path. */
typedef struct {
    char *path;
    uint32_t max_bytes;
} sg_agent_get_req_t;

int sg_agent_get_req_decode(const uint8_t *payload, size_t len, sg_agent_get_req_t *g, sg_agent_fail_t *f);

#endif
