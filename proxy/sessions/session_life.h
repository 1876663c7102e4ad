/*
 * session_life.h — a session's life: its container started and its agent
 * connected, its listing in the table, its close (keeping its work dir as
 * a template image when asked: docs/architecture.md). The session itself
 * and its ops are session.h; where a new session comes from is pool.h.
 *
 * Threading: the loop thread, except the Docker calls, which run as workq
 * jobs on worker threads.
 */
#ifndef SANDGATE_SESSION_LIFE_H
#define SANDGATE_SESSION_LIFE_H

#include <json-c/json.h>

#include "session.h"
#include "workq.h"

/* The default Docker network of sessions with the network: never Docker's
 * default bridge, where containers reach each other. */
#define SG_SANDBOX_NETWORK "sandgate-sandbox"

/* What sessions need from the proxy's configuration and the loop (the rest
 * is the proxy's context, proxy.h). Set up once by main() with
 * sg_sessions_init; read-only afterwards. */
typedef struct {
    h2o_loop_t *loop;
    sg_workq_t *workq;
    const char *proxy_id;
    const char *image_prefix;  /* "sandgate/" -> "sandgate/python:latest" */
    const char *template_repo; /* keep_template images: "<repo>:<session id>" */
    long max_sessions;
    long pool_size;            /* ready containers kept per language */
    long pool_refill_delay_ms; /* a take delays its pool's refill by this (pool.c) */
    sg_limits_t pool_limits;   /* the limits pooled containers are made with */
    int agent_start_timeout_ms;
    const char *store_volume;    /* the package store (install.h), mounted read-only; "" or NULL: none */
    const char *sandbox_network; /* NetworkMode of sessions with the network (isolated, see main.c);
                                  * NULL: SG_SANDBOX_NETWORK */
    /* custom images (not built by sandgate): the static agent comes from this
     * volume, mounted read-only at /opt/sandgate/bin; "" when none allowed */
    const char *agent_volume;
    /* the default OCI runtime of sandboxes (runtime.h): "runsc" or "runc" */
    const char *runtime;
    /* the runtimes the engine offers, as bits 1 << sg_runtime_index (0: the
     * default's alone); a request naming another is refused */
    unsigned runtimes_offered;
    /* runtimes whose pools fill from the start besides the default's
     * (SANDGATE_POOL_RUNTIMES), as the same bits */
    unsigned pool_runtimes;
    /* called when a session is listed or unlisted (its successor's state
     * file, adopt.h, is written then); NULL: nothing */
    void (*on_listed_change)(void);
} sg_sessions_conf_t;

/* Callback of session creation: s is NULL on failure, with status, code and
 * detail set. The session, when given, is listed in the table (unless
 * ephemeral, or pooled: the pool lists it) and the callee gets one
 * reference. */
typedef void (*sg_session_ready_cb)(void *data, sg_session_t *s, int status, const char *code, const char *detail);

void sg_sessions_init(const sg_sessions_conf_t *conf);
/* The default runtime of sandboxes: conf.runtime, or "runc" when unset. */
const char *sg_sessions_runtime(void);
/* 1 if the engine offers runtime (a name of runtime.h). */
int sg_sessions_runtime_offered(const char *runtime);
/* The runtime a create request gets: the one it names, else the default,
 * except runc for a session with the network (README "Runtimes": runsc's
 * entry has its network off). A static string. */
const char *sg_sessions_runtime_for(const sg_create_req_t *req);
/* The runtime of one session's container (its runtime field). */
const char *sg_session_runtime(const sg_session_t *s);

sg_session_t *sg_session_find(const char *id, size_t len);
size_t sg_session_count(void);
/* Calls fn for every listed session. */
void sg_session_foreach(void (*fn)(sg_session_t *s, void *data), void *data);
/* Unlists the session and removes its container (keeping its work dir
 * first as a template image when keep_template: docs/architecture.md).
 * Pending ops fail. cb gets the template image name (or NULL), the bytes
 * the template adds to its base image, and an error (or NULL); it may be
 * NULL. */
typedef void (*sg_session_closed_cb)(void *data, const char *template_image, int64_t template_size, const char *err);
void sg_session_close(sg_session_t *s, sg_session_closed_cb cb, void *data);

/* The container configuration for a session (pure; unit tested). */
json_object *sg_session_container_config(const sg_session_t *s, const char *proxy_id);

/* ---- internal to the session rooms (pool.c) ---- */

const sg_sessions_conf_t *sg__sessions_conf(void);
/* Starts a container for a session made from req; the caller has taken a
 * container slot for it (capacity.h). cb (may be NULL) gets the session:
 * listed in the table unless pooled. 0, or -1 when nothing was started
 * (the slot is given back, cb told). */
int sg__session_start(const sg_create_req_t *req, int ephemeral, int pooled, sg_session_ready_cb cb, void *data);
/* Lists s in the table, taking a reference. */
void sg__session_list(sg_session_t *s);
/* Takes s off its list (the table or the pool's), dropping that reference. */
void sg__session_unlist(sg_session_t *s);
/* The slot of a container being removed (a closed session's) goes to cb
 * once it is gone: 0, or -1 when no removal is under way. */
int sg__slot_claim_closing(void (*cb)(void *data), void *data);

#endif
