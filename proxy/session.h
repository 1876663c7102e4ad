/*
 * session.h — sandbox sessions: one container each, with the connection to
 * the sandgate-agent inside it (agent_proto.h over the Docker attach stream).
 *
 * Threading: everything here runs on the event-loop thread, except the
 * Docker calls, which run as workq jobs on worker threads.
 *
 * Ownership: a session is reference counted. The table holds one reference
 * while the session is listed; each queued op and each Docker job holds one.
 * Operations on one session run one at a time, in the order submitted.
 */
#ifndef SANDGATE_SESSION_H
#define SANDGATE_SESSION_H

/* The default Docker network of sessions with the network: never Docker's
 * default bridge, where containers reach each other. */
#define SG_SANDBOX_NETWORK "sandgate-sandbox"

#include <h2o.h>
#include <json-c/json.h>
#include <stdint.h>

#include "agent_proto.h"
#include "buf.h"
#include "docker_stream.h"
#include "lang.h"
#include "policy.h"
#include "workq.h"

typedef struct sg_session sg_session_t;
typedef struct sg_op sg_op_t;

/* What sessions need from the proxy's configuration and the loop (the rest
 * is the proxy's context, proxy.h). Set up once by main() with
 * sg_sessions_init; read-only afterwards. */
typedef struct {
    h2o_loop_t *loop;
    sg_workq_t *workq;
    const char *proxy_id;
    const char *image_prefix; /* "sandgate/" -> "sandgate/python:latest" */
    const char *template_repo; /* keep_template images: "<repo>:<session id>" */
    long max_sessions;
    long pool_size;           /* ready containers kept per language */
    sg_limits_t pool_limits;  /* the limits pooled containers are made with */
    int agent_start_timeout_ms;
    const char *store_volume;     /* the package store (install.h), mounted read-only; "" or NULL: none */
    const char *sandbox_network;  /* NetworkMode of sessions with the network (isolated, see main.c);
                                   * NULL: SG_SANDBOX_NETWORK */
    /* custom images (not built by sandgate): the static agent comes from this
     * volume, mounted read-only at /opt/sandgate/bin; "" when none allowed */
    const char *agent_volume;
    /* the OCI runtime of every sandbox (runtime.h): "runsc" or "runc" */
    const char *runtime;
} sg_sessions_conf_t;

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
    sg_limits_t limits;
    int keep_template;
    int ephemeral;
    int foreign;        /* a custom image: the agent is mounted in, code runs one-shot */
    int from_template;  /* made from a keep_template image: its work dir is copied in at start */
    char owner[65];     /* the create's "owner" ("" if none): a template is labelled with it */
    char base_image[256]; /* what a template of this session is built on (set once the container starts) */
    int64_t created_at;
    int64_t last_used_at;
    uint64_t executions;
    sg_session_state_t state;
    unsigned waiting;   /* client requests admitted and not yet started (api.c keeps it) */

    /* private */
    unsigned _refcnt;
    h2o_linklist_t _link; /* in the table while listed */
    h2o_socket_t *_sock;
    sg_docker_demux_t _demux;
    sg_buf_t _inbuf;      /* agent stdout until a whole message is there */
    h2o_linklist_t _ops;  /* first one is in flight */
    uint32_t _next_id;
    int _op_sent;
    int _overflow;
    int _close_requested;
    int _where; /* SG_IN_NONE, SG_IN_TABLE or SG_IN_POOL: which list _link is on */
    int _pooled; /* made by the pool: labelled sandgate.kind=pool */
    int _has_slot; /* holds one of SANDGATE_MAX_CONTAINERS (capacity.h) until its container is gone */
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
    /* optional: called once when the op is handed to the agent (it starts) */
    void (*on_start)(sg_op_t *op);

    /* result */
    int failed;         /* the agent died, answered garbage or not at all, or cancelled */
    int fail_status;    /* HTTP status for a failure: 502 or 504; 409 cancelled (sg_op_cancel) */
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
    uint32_t state;     /* sg_agent_state_t */
    sg_buf_t file;      /* GET_FILE data */
    uint64_t ok_value;

    /* private */
    h2o_linklist_t _link;
    uint32_t _id;
    sg_agent_buf_t _req;
    uint64_t _deadline_ms;
    uint64_t _started_us;
};

/* Callback of session creation: s is NULL on failure, with status, code and
 * detail set. The session, when given, is listed (unless ephemeral) and the
 * callee gets one reference. */
typedef void (*sg_session_ready_cb)(void *data, sg_session_t *s, int status, const char *code, const char *detail);

void sg_sessions_init(const sg_sessions_conf_t *conf);
/* The runtime every sandbox runs on: conf.runtime, or "runc" when unset. */
const char *sg_sessions_runtime(void);
/* The runtime of one session's container: the proxy's, except runc for a
 * session with the network (README "Sandboxes"). */
const char *sg_session_runtime(const sg_session_t *s);

/* Starts a container for a session and connects to its agent (or takes
 * one from the pool). At SANDGATE_MAX_CONTAINERS it waits for a slot that
 * is on its way back (sg_slot_await); when there is none, cb gets 503
 * no_capacity. */
void sg_session_create(const sg_create_req_t *req, int ephemeral, sg_session_ready_cb cb, void *data);
sg_session_t *sg_session_find(const char *id, size_t len);
size_t sg_session_count(void);
/* Calls fn for every listed session. */
void sg_session_foreach(void (*fn)(sg_session_t *s, void *data), void *data);
void sg_session_ref(sg_session_t *s);
void sg_session_unref(sg_session_t *s);

/* Unlists the session and removes its container (keeping its work dir
 * first as a template image when keep_template: docs/architecture.md).
 * Pending ops fail. cb gets the template image name (or NULL), the bytes
 * the template adds to its base image, and an error (or NULL); it may be
 * NULL. */
typedef void (*sg_session_closed_cb)(void *data, const char *template_image, int64_t template_size, const char *err);
void sg_session_close(sg_session_t *s, sg_session_closed_cb cb, void *data);

/* The warm pool: pool_size ready containers per language, made with
 * pool_limits. sg_session_create takes from it when the request's container
 * settings equal pool_limits; a taken container is never pooled again.
 * sg_pool_fill starts what is missing; it is called after every take and
 * from sg_sessions_tick (a language whose start failed waits a while). */
void sg_pool_fill(void);
/* The pool yields to requests: removes one ready pooled container and, once
 * it is gone, calls cb with its container slot (capacity.h) handed to the
 * caller, who must give it back when done. 0, or -1 (cb not called) when
 * the pool has nothing ready. The pool itself fills only while a quarter
 * of the cap stays free. */
int sg_pool_yield(void (*cb)(void *data), void *data);
/* For a request that found the cap reached: the slot of a container whose
 * removal is under way already (a one-shot's just answered, a closed
 * session's) goes to it once that container is gone, else a ready pooled
 * container is removed for it (sg_pool_yield); cb then runs with the slot,
 * which the caller must give back when done. 0, or -1 (cb not called) when
 * no slot can come: the caller answers no_capacity. A slot on its way back
 * is claimed by one request at most, so waiting is bounded by removals. */
int sg_slot_await(void (*cb)(void *data), void *data);
size_t sg_pool_ready(const sg_lang_t *lang);

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

/* Watchdog: fails ops whose agent did not answer in time. Call about once a
 * second from the loop. */
void sg_sessions_tick(void);

/* The container configuration for a session (pure; unit tested). */
json_object *sg_session_container_config(const sg_session_t *s, const char *proxy_id);

#endif
