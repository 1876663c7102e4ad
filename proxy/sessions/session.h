/*
 * session.h — a sandbox session: one container, with the connection to the
 * sandgate-agent inside it (agent_proto.h over the Docker attach stream)
 * and the ops queued on it. How sessions start, are listed and close is
 * session_life.h; where they come from (the warm pool, a free container
 * slot) is pool.h.
 *
 * Threading: everything here runs on the event-loop thread.
 *
 * Ownership: a session is reference counted. The table holds one reference
 * while the session is listed; each queued op and each Docker job holds one.
 * Operations on one session run one at a time, in the order submitted.
 */
#ifndef SANDGATE_SESSION_H
#define SANDGATE_SESSION_H

#include <h2o.h>
#include <stdint.h>

#include "agent_proto.h"
#include "buf.h"
#include "docker_stream.h"
#include "lang.h"
#include "policy.h"
#include "results.h"

typedef struct sg_session sg_session_t;
typedef struct sg_op sg_op_t;

/* Which list a session's _link is on. */
enum { SG_IN_NONE, SG_IN_TABLE, SG_IN_POOL };

typedef enum {
    SG_SESSION_STARTING,
    SG_SESSION_ACTIVE,
    SG_SESSION_CLOSING,
    SG_SESSION_DEAD,
} sg_session_state_t;

struct sg_session {
    char id[37];
    char container_id[72];
    char image[256];
    const sg_lang_t *lang;
    const char *runtime; /* its container's OCI runtime: "runc" or "runsc" (static, runtime.h) */
    sg_limits_t limits;
    int keep_template;
    int ephemeral;
    int foreign;          /* a custom image: the agent is mounted in, code runs one-shot */
    int from_template;    /* made from a keep_template image: its work dir is copied in at start */
    char owner[65];       /* the create's "owner" ("" if none): a template is labelled with it */
    char base_image[256]; /* what a template of this session is built on (set once the container starts) */
    int64_t created_at;
    int64_t last_used_at;
    uint64_t executions;
    sg_session_state_t state;
    unsigned waiting; /* client requests admitted and not yet started (api_core.c keeps it) */

    /* private */
    unsigned _refcnt;
    h2o_linklist_t _link; /* in the table while listed */
    h2o_socket_t *_sock;
    sg_docker_demux_t _demux;
    sg_buf_t _inbuf;     /* agent stdout until a whole message is there */
    h2o_linklist_t _ops; /* first one is in flight */
    uint32_t _next_id;
    int _op_sent;
    int _overflow;
    int _close_requested;
    int _where;                   /* SG_IN_NONE, SG_IN_TABLE or SG_IN_POOL: which list _link is on */
    int _pooled;                  /* made by the pool: labelled sandgate.kind=pool */
    int _adopting;                /* left by an earlier proxy, its agent being resynchronised (adopt.h):
                                   * ops wait in the queue meanwhile */
    int _has_slot;                /* holds one of SANDGATE_MAX_CONTAINERS (capacity.h) until its container is gone */
    h2o_linklist_t _closing_link; /* in `closing` while its container is removed with its slot unclaimed */
    /* the request its slot goes to once the container is gone (not back), or NULL */
    void (*_handover_cb)(void *data);
    void *_handover_data;
};

typedef enum { SG_OP_EXEC, SG_OP_PUT_FILE, SG_OP_GET_FILE } sg_op_kind_t;

typedef void (*sg_op_cb)(sg_op_t *op);

struct sg_op {
    sg_op_kind_t kind;
    sg_session_t *session;
    sg_op_cb cb; /* called once, on the loop thread; then free with sg_op_free */
    void *data;
    /* optional: called for each piece of output as it arrives (EXEC), before
     * it is added to out[] */
    void (*on_output)(sg_op_t *op, int stream, const uint8_t *p, size_t len);
    /* optional: called for each rich result kept, as it arrives (EXEC) */
    void (*on_result)(sg_op_t *op, json_object *result);
    /* optional: called once when the op is handed to the agent (it starts) */
    void (*on_start)(sg_op_t *op);

    /* result */
    int failed;      /* the agent died, answered garbage or not at all, or cancelled */
    int fail_status; /* HTTP status for a failure: 502 or 504; 409 cancelled (sg_op_cancel) */
    char errmsg[256];
    uint32_t agent_err; /* ERROR reply: sg_agent_err_t, else 0 */
    sg_buf_t out[2];    /* stdout, stderr (EXEC) */
    int32_t exit_code;
    uint32_t signal;
    uint32_t reason;
    uint32_t flags;
    uint64_t duration_us; /* as the agent reported it: the sandbox could forge it */
    uint64_t wall_us;     /* as the proxy measured it: from sending the op to the agent
                           * to its answer (0 if never sent); what billing uses */
    char stage[32];
    uint32_t state;       /* sg_agent_state_t */
    sg_buf_t file;        /* GET_FILE data */
    sg_results_t results; /* EXEC: rich results and files out, checked and capped */
    uint64_t ok_value;

    /* private */
    h2o_linklist_t _link;
    uint32_t _id;
    sg_agent_buf_t _req;
    uint64_t _deadline_ms;
    uint64_t _started_us;
};

void sg_session_ref(sg_session_t *s);
/* The last reference frees it. */
void sg_session_unref(sg_session_t *s);

/* Ops: create, then submit; the callback gets the result. */
/* kernel_cmd non-NULL: stateful mode, the code runs in the session's kernel. */
sg_op_t *sg_op_exec(sg_session_t *s, const char *setup_cmd, const char *setup_stage, const char *run_cmd,
                    const char *file_path, const char *kernel_cmd, const char *code, size_t code_len, double timeout_s);
sg_op_t *sg_op_put_file(sg_session_t *s, const char *path, const void *data, size_t len);
sg_op_t *sg_op_get_file(sg_session_t *s, const char *path, uint32_t max_bytes);
void sg_op_submit(sg_op_t *op, sg_op_cb cb, void *data);
/* Takes a submitted op that still waits in its session's queue out of it:
 * it never reaches the agent, and its cb runs now (failed, fail_status
 * 409). Returns 0, or -1 when the op has started already (or is done):
 * then nothing changes. */
int sg_op_cancel(sg_op_t *op);
void sg_op_free(sg_op_t *op);

/* ---- internal to the session rooms (session_life.c, pool.c) ---- */

/* Called when a session's agent dies or breaks the protocol (the session
 * is then DEAD, its ops failed): session_life.c closes it. */
void sg__session_on_broken(void (*cb)(sg_session_t *s));
/* The agent answered READY on fd (the attach stream, demux its decoder
 * state, early the bytes read past READY): the session is active and its
 * agent's messages are read, on loop, from now on. */
void sg__agent_connect(sg_session_t *s, h2o_loop_t *loop, int fd, const sg_docker_demux_t *demux, const uint8_t *early,
                       size_t early_len);
/* Handles the agent's whole messages already read. */
void sg__agent_process(sg_session_t *s);
/* Closes the connection to the agent, if any. */
void sg__agent_close(sg_session_t *s);
/* Fails every op queued on s (the one in flight too) with status and why. */
void sg__ops_fail(sg_session_t *s, int status, const char *why);
/* Declares the session broken when its agent has not answered the op in
 * flight by its deadline (now, ms). */
void sg__session_watchdog(sg_session_t *s, uint64_t now);

#endif
