/*
 * request.h — what the agent accepts from a request (agent_proto.h): the
 * decoders of the EXEC, PUT_FILE and GET_FILE payloads, and the confinement
 * of file paths to the work dir. Apart from the agent's loop so that unit
 * tests and the fuzz targets (fuzz/) reach them without running an agent.
 *
 * Only libc, like the agent. A failure fills an sg_agent_fail_t with the
 * error code and the sentence of the ERROR reply the agent sends for it.
 */
#ifndef SANDGATE_AGENT_REQUEST_H
#define SANDGATE_AGENT_REQUEST_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t code;  /* sg_agent_err_t */
    char msg[512];  /* as the ERROR reply carries it (its cap too) */
} sg_agent_fail_t;

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

/* Opens the directory that holds the last component of path (as a request
 * gave it: relative to workdir, or absolute inside it), walking from
 * workdir one component at a time without following any symlink and
 * refusing ".." before touching the file system; with create, missing
 * directories on the way are made (0755). workdir is absolute, without a
 * trailing slash unless it is "/". On success the last component (never
 * empty, ".", nor "..", no '/') is in leaf and the directory's fd
 * (O_CLOEXEC) is returned: it is workdir or a directory under it. -1 with f
 * filled otherwise. */
int sg_agent_open_parent(const char *workdir, const char *path, int create, char *leaf, size_t leafsz,
                         sg_agent_fail_t *f);

/* The ERROR for a file operation on path that failed with errno e. */
void sg_agent_path_fail(sg_agent_fail_t *f, const char *path, int e);

#endif
