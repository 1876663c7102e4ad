/*
 * request.h — the request core of the public API: one sg_gw_req_t from the
 * route's handler (handler/) to its reply.
 *
 * A request's journey, all on the loop thread except the DB steps:
 *   handler -> sg_gw_req_accept (auth.c): caps on headers, body and path, the bearer
 *   -> token + session owner (the cache, else [DB]) -> [state] rate (routes
 *   that run code: with their slot) -> the route's run() -> caps on the
 *   body (request.c) -> [state] rate, execution slot, day's quota in one
 *   call (ledger.c) -> [upstream] proxy (forward.c) -> [DB] the usage row,
 *   group-committed (ledger.c) -> reply -> [state] slot, session, seconds.
 *
 * Ownership: the request is the caller's from run() on; every path ends in
 * exactly one sg_gw_req_free, after at most one reply (sg_gw_reply_*). A
 * reply to a client that has gone goes nowhere; the request is still
 * freed. Loop thread only.
 */
#ifndef SANDGATE_GW_REQUEST_H
#define SANDGATE_GW_REQUEST_H

#include <h2o.h>
#include <json-c/json.h>

#include "concurrency.h"
#include "gateway.h"
#include "http.h"
#include "route.h"
#include "sse_tail.h"
#include "db.h"
#include "placement.h"
#include "upstream.h"

/* The files route's query string: "?path=" and a path the proxy takes
 * (SG_MAX_PATH, 1024 bytes) with every byte percent-encoded, and some room.
 * A longer one is refused, never cut: a cut query names another file. */
#define SG_GW_QUERY_MAX 3200

/* The routes of the public API, as the metrics name them. */
typedef enum {
    SG_GW_R_CREATE,          /* POST /sessions */
    SG_GW_R_LIST,            /* GET /sessions */
    SG_GW_R_GET,             /* GET /sessions/{id} */
    SG_GW_R_DELETE,          /* DELETE /sessions/{id} */
    SG_GW_R_EXECUTE,         /* POST /sessions/{id}/execute */
    SG_GW_R_COMMAND,         /* POST /sessions/{id}/commands */
    SG_GW_R_FILES,           /* PUT, GET /sessions/{id}/files */
    SG_GW_R_EPHEMERAL,       /* POST /execute */
    SG_GW_R_LIBRARIES,       /* POST /sessions/{id}/libraries */
    SG_GW_R_TEMPLATES,       /* GET /templates */
    SG_GW_R_TEMPLATE_DELETE, /* DELETE /templates/{name} */
    SG_GW_R_PIP_INSTALL,     /* POST /pip_install (seed 004) */
    SG_GW_R_MCP              /* POST, DELETE /mcp (handler/mcp.c) */
} sg_gw_route_t;

/* What a client that goes away while the proxy is called does to the call. */
typedef enum {
    SG_GW_GONE_FINISH, /* it runs to its end: a session the proxy made must be on record, a close must finish */
    SG_GW_GONE_CUT,    /* the transfer is cut; the proxy sees its client go and drops the operation if it
                        * still waits (nothing of it is billed) */
    SG_GW_GONE_CANCEL  /* the proxy is asked first (DELETE /requests/{rid}): an operation still queued is
                        * dropped; one that started runs to its end and is billed */
} sg_gw_gone_t;

/* The largest body of a route whose session is named in its body
 * (SG_GW_ARG_BODY_SESSION): the door parses it before the token is looked
 * up, so it is kept small (a pip_install body is a few dozen bytes). */
#define SG_GW_BODY_SESSION_MAX (64u << 10)

/* What the path's "*" names (sg_route_match_t arg[0]); SG_GW_ARG_BODY_SESSION:
 * an optional session named by the JSON body's "session_id" instead, held
 * to the same checks (a UUID, the caller's own) when present. */
typedef enum { SG_GW_ARG_NONE, SG_GW_ARG_SESSION, SG_GW_ARG_TEMPLATE, SG_GW_ARG_BODY_SESSION } sg_gw_arg_t;

typedef struct sg_gw_req sg_gw_req_t;

/* A route as the core takes it in: checked at the door, then run() once the
 * tenant is known and within its rate. */
typedef struct {
    sg_gw_route_t route;
    sg_gw_arg_t arg;
    int file_body;     /* the body is a file (SANDGATE_MAX_FILE_BYTES), the query string is kept */
    int stream_accept; /* Accept: text/event-stream asks for a streamed reply */
    sg_gw_gone_t gone;
    void (*run)(sg_gw_req_t *g);
    int oauth_resource; /* a 401 names the protected-resource document (RFC 9728) in its challenge, for
                         * OAuth-aware clients (MCP) */
} sg_gw_route_spec_t;

/* The one reply of an internal request (sg_gw_req_run_as): what would
 * have gone to the client — a status, a content type ("" for JSON) and a
 * body, an error as {"detail","code"}. g is freed right after it returns. */
typedef void (*sg_gw_capture_cb)(sg_gw_req_t *g, int status, const char *ctype, const char *body, size_t len);

struct sg_gw_req {
    sg_gw_job_t job; /* the auth job; first member */
    sg_http_hold_t *hold;
    const sg_gw_route_spec_t *spec;
    sg_gw_route_t route;
    char method[8];
    char sid[37];            /* SG_GW_ARG_SESSION (or BODY_SESSION, when named); "" otherwise */
    char template_name[256]; /* SG_GW_ARG_TEMPLATE, decoded */
    int64_t template_row;    /* a keep_template create's slot (templates.h), 0 if none */
    char token[SG_TOKEN_MAX + 1];
    char query[SG_GW_QUERY_MAX]; /* "?path=..." for files */
    char *body;                  /* a copy of the request body */
    size_t body_len;
    char content_type[128];
    int want_stream;

    sg_tenant_t tenant;
    int authed;
    sg_session_rec_t sess;
    int sess_found;
    sg_store_gen_t gen; /* the generations the auth job read before the rows (auth.c) */
    int quota_taken;    /* the day's execution was counted with the rate and the slot (ledger.c) */
    int billed;         /* billed_s is the seconds the recorded execution adds to the day's */
    double billed_s;

    sg_rate_result_t rate;
    int rate_known;

    json_object *json; /* the parsed body, rewritten before forwarding */
    char lang[32];
    double timeout; /* seconds, the execution's */
    char reservation[40];
    sg_exec_slot_t slot; /* one of the tenant's max_concurrent_execs, while held */
    void (*after_slot)(sg_gw_req_t *g);
    void (*after_quota)(sg_gw_req_t *g);
    char day[9];
    double started_at;
    uint64_t started_us; /* monotonic, when the run was sent to the proxy */

    sg_http_stream_t *stream;
    sg_sse_tail_t tail; /* a streamed reply, parsed as it passes for its result event */
    long up_status;

    sg_proxy_t *proxy;              /* the proxy of its calls, once chosen (sg_gw_forward, placement.h) */
    h2o_timeout_entry_t proxy_wait; /* its session's proxy is out of placement: waiting, within the grace */
    char fwd_method[8];             /* the call that waits */
    char fwd_path[128];
    long fwd_timeout_ms;
    sg_upstream_req_t *up;            /* the call to the proxy while in flight */
    sg_upstream_done_cb up_done;      /* its callback */
    sg_upstream_req_t *cancel_up;     /* DELETE /requests/{rid} while in flight */
    char rid[33];                     /* names an execution to the proxy (X-Sandgate-Request-Id) */
    h2o_timeout_entry_t cancel_retry; /* the proxy did not have the request yet */
    int cancel_tries;
    char up_retry_after[16]; /* the proxy's Retry-After, passed on with its 429 / 503 */

    /* An internal request (an MCP tool call): the route's reply goes to
     * capture, never to the client; the request that carries it (its hold,
     * its watch) stays the client's. capture_free(capture_data) runs in
     * sg_gw_req_free. */
    sg_gw_capture_cb capture;
    void *capture_data;
    void (*capture_free)(void *data);
    int rerun;     /* sg_gw_req_run_as: the rate limit was counted already */
    int abandoned; /* sg_gw_req_abandon: the client no longer wants the answer */
};

/* The metrics' route label of each sg_gw_route_t. */
extern const char *const sg_gw_route_names[];

/* ---- the door (auth.c) ---- */

/* Takes a matched request in: the caps on its headers, body and path, its
 * bearer token, then (later, on the loop) the token's tenant, the session's
 * owner and the tenant's rate limit; spec->run follows when all pass, else
 * the error is answered. Returns 0 (the h2o handler's answer). */
int sg_gw_req_accept(h2o_req_t *req, const sg_route_match_t *m, const sg_gw_route_spec_t *spec);
/* Defines the route callback fn (handlers.h) that takes its requests in
 * through sg_gw_req_accept with the spec fn##_spec given by the remaining
 * arguments (sg_gw_route_spec_t's fields in order): the handlers differ
 * only by it. The spec is public, for internal requests (sg_gw_req_run_as). */
#define SG_GW_ROUTE_HANDLER(fn, ...)                                                                                   \
    const sg_gw_route_spec_t fn##_spec = {__VA_ARGS__};                                                                \
    int fn(void *app, h2o_req_t *req, const sg_route_match_t *m)                                                       \
    {                                                                                                                  \
        return sg_gw_req_accept(req, m, &fn##_spec);                                                                   \
    }
/* The loop's own connection to the store (taken over, kept until
 * sg_gw_auth_cache_stop), on which every request reads the generations
 * (store.h) that tell whether the cached tokens and sessions are current. */
void sg_gw_auth_cache_start(sg_store_t *st);
void sg_gw_auth_cache_stop(void);
/* A session this gateway has just recorded (open, its id not yet given to
 * anyone, so no close can be on its way): cached at the current
 * generation, so that its first execute needs no DB job. */
void sg_gw_auth_cache_session(const sg_session_rec_t *rec);
/* Runs fn(job) at once on that connection, for a read of at most max_rows
 * rows (a larger one, or no such connection: returns 0 and fn has not run).
 * Returns 1 when fn ran and its job->rc is 0; 0 when the read failed (a
 * busy database: the caller submits the job as usual, job reset). */
int sg_gw_loop_read(long max_rows, void (*fn)(sg_gw_job_t *job, sg_store_t *st), sg_gw_job_t *job);
/* The same for a short write, one transaction that fn leaves committed
 * (job->rc 0, returns 1) or undone (returns 0: the caller submits the job).
 * The loop's connection never checkpoints: the DB threads' commits do. */
int sg_gw_loop_write(void (*fn)(sg_gw_job_t *job, sg_store_t *st), sg_gw_job_t *job);
/* Runs g, an authenticated request, again as a request of another route
 * (an MCP tool call): the caller has set what the door would have (g->sid,
 * g->body, g->content_type, g->query, g->method) and g->capture, which gets
 * the reply. From the door's DB step on, the route's own flow: the token
 * checked again, g->sid's owner (another tenant's session, or a closed one,
 * is a 404), then spec->run with its caps, slot, quota, proxy call and
 * ledger row. The rate limit is not counted again: the client's request
 * that carries the call was. A client that goes away acts on the call as
 * spec->gone says. */
void sg_gw_req_run_as(sg_gw_req_t *g, const sg_gw_route_spec_t *spec);
/* Adds the 401 challenge of spec (WWW-Authenticate; error "" or e.g.
 * "invalid_token") to req. */
void sg_gw_add_challenge(h2o_req_t *req, const sg_gw_route_spec_t *spec, const char *error);
/* A request, zeroed, counted among the live ones until its free. */
sg_gw_req_t *sg_gw_req_alloc(void);
/* Every request ends here, whatever the path (reply, upstream failure,
 * client gone, stream end): an execution slot it holds is given back. */
void sg_gw_req_free(sg_gw_req_t *g);
/* Requests made and not yet freed: a stop lets them finish (main.c),
 * whatever they wait for (the proxy, the DB, Redis). */
size_t sg_gw_reqs_live(void);
/* The client's request, or NULL once the client has gone. */
h2o_req_t *sg_gw_req_http(sg_gw_req_t *g);

/* ---- replies (request.c): each adds the rate headers and counts the route ---- */

void sg_gw_reply_error(sg_gw_req_t *g, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Takes o. */
void sg_gw_reply_json(sg_gw_req_t *g, int status, json_object *o);
/* ctype "" is application/json. */
void sg_gw_reply_raw(sg_gw_req_t *g, int status, const char *ctype, const char *body, size_t len);
/* 429 with Retry-After (at least 1 s), counted as a rejection by limit
 * ("rate", "sessions", "execs_per_day", ...); code "quota_exceeded" or
 * "concurrency_limit". */
void sg_gw_reply_429(sg_gw_req_t *g, const char *code, const char *limit, double retry_after, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Prepares the client's reply headers for status (rate headers, the
 * proxy's Retry-After, the route's count); for a reply that is not sent by
 * sg_gw_reply_* (a stream). */
void sg_gw_reply_prepare(sg_gw_req_t *g, h2o_req_t *req, int status);

/* ---- caps on the body (request.c): 0, or -1 after answering 4xx ---- */

/* Parses the body into g->json (415 for another content type, 400 bad_json). */
int sg_gw_parse_json_body(sg_gw_req_t *g);
/* A number field of the body (fields.h): *out its value (def, capped, when
 * absent), or 400 naming the field. */
int sg_gw_cap_number(sg_gw_req_t *g, const char *field, double above, int whole, double cap, double def, double *out);
/* "lang" (default python) into g->lang, one the tenant may use. */
int sg_gw_check_lang(sg_gw_req_t *g);
/* "runtime" for the proxy (session create, one-shot execute): the tenant's
 * (g->tenant.runtime) when it has one, else none (the proxy's default). A
 * client may not choose: a "runtime" in its body other than the tenant's
 * gets 400 runtime_not_allowed. */
int sg_gw_set_runtime(sg_gw_req_t *g);
/* The runtime of the request's sandbox as far as the gateway knows it (the
 * session's record, else the tenant's), for the metrics: "unknown" if
 * neither says. */
const char *sg_gw_runtime_label(const sg_gw_req_t *g);

/* ---- the session behind the request (request.c) ---- */

/* Its idle deadline moves on (and its count of runs, with add_exec). */
void sg_gw_touch_session(sg_gw_req_t *g, int add_exec);
/* The proxy answered 404 no_such_session for a session the records say is
 * live (it was restarted): the session is closed so that its slot comes back. */
void sg_gw_check_session_lost(sg_gw_req_t *g, const sg_upstream_reply_t *r);
/* The session's sandbox is gone for good (its proxy lost it or is gone):
 * the session is closed (reason session_lost), 410 session_lost answered
 * and g freed. */
void sg_gw_session_lost(sg_gw_req_t *g, const char *why);
/* A state callback for updates nobody waits on. */
void sg_gw_state_ignore(void *data, const sg_state_result_t *r);

/* ---- forwarding to the proxy (forward.c) ---- */

/* Watches the client while its request waits (spec->gone says what its
 * going does to a call in flight). */
void sg_gw_watch_client(sg_gw_req_t *g);
/* Sends the request (g->json rewritten, else the body as it came, and
 * g->query) on to the proxy; done gets the reply, or a failure (status 0)
 * when the call cannot be made or the client has gone already (then before
 * sg_gw_forward returns). With g->want_stream the reply streams through to
 * the client as it comes.
 *
 * The proxy (g->proxy, unless the caller set it): a session's own, as its
 * record says; a new session's by placement; any other call's the least
 * loaded. A session whose proxy is out of placement waits for it within the
 * grace; past it, or when its proxy is no longer configured, or when the
 * proxy answers 404 session_lost, the session is closed and the client gets
 * 410 session_lost (done is not called: g is answered and freed). No proxy
 * in placement for another call: done gets a failure (502). */
void sg_gw_forward(sg_gw_req_t *g, const char *method, const char *path, long timeout_ms, sg_upstream_done_cb done);
/* The client asks, while its connection stays open, that g's call end (an
 * MCP notifications/cancelled): it goes as when the client goes away
 * (spec->gone); a call not yet forwarded is not forwarded. */
void sg_gw_req_abandon(sg_gw_req_t *g);
/* A done callback for sg_gw_forward: the proxy's answer goes back as it is. */
void sg_gw_pass_reply(void *data, const sg_upstream_reply_t *r);
/* An upstream failure with no reply from the proxy: 499, 504 or 502. */
void sg_gw_reply_upstream_failure(sg_gw_req_t *g, const sg_upstream_reply_t *r);

/* ---- executions: slot, quota, usage (ledger.c) ----
 * next, and the answer after a refusal, may come before the call returns
 * (the state may answer at once). */

/* Takes one of the tenant's max_concurrent_execs for a call to the proxy
 * that waits at most wait_ms, then runs next; past the cap: 429
 * concurrency_limit. The slot goes back in sg_gw_req_free. */
void sg_gw_exec_slot_take(sg_gw_req_t *g, long wait_ms, void (*next)(sg_gw_req_t *g));
/* Reserves one of the day's executions (g->day) against the tenant's daily
 * quotas, then runs next; past them: 429 quota_exceeded. */
void sg_gw_quota_reserve(sg_gw_req_t *g, void (*next)(sg_gw_req_t *g));
/* The gateway's usage journal (ledger.c, store.h): opened at start, after
 * a catch-up of what other gateways left (-1 with err: none, the rows go
 * to the database on a DB thread, each answer after its commit); closed
 * at stop, before the last catch-up moves the rest of it into the
 * database. */
int sg_gw_ledger_open(const char *data_dir, char *err, size_t errlen);
void sg_gw_ledger_close(void);
/* Records what the proxy said about one execution (`result`, its result
 * object): ledger row, the day's seconds, metrics; the answer
 * (sg_gw_exec_answer) follows once the row is written. */
void sg_gw_record_execution(sg_gw_req_t *g, const char *result, size_t result_len, const sg_upstream_reply_t *r);
/* Sends what the proxy answered to an execution (or ends the stream that
 * already carried it) and lets the request go. */
void sg_gw_exec_answer(sg_gw_req_t *g, int status, const char *ctype, const char *body, size_t len);

#endif
