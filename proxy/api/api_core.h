/*
 * api_core.h — the request core of the proxy's API, under its route
 * families (api.h): the API's settings, requests answered later, a
 * session's queue of them, the replies. Loop thread only.
 */
#ifndef SANDGATE_API_CORE_H
#define SANDGATE_API_CORE_H

#include "http.h"
#include "proxy.h"
#include "libraries.h"
#include "route.h"
#include "session_life.h"
#include "validate.h"

typedef struct {
    const sg_proxy_t *proxy;
    sg_policy_t policy;
    const char *image_allowlist; /* custom images a session may name */
    long session_queue;          /* client requests that may wait on one session (SANDGATE_SESSION_QUEUE) */
} sg_api_t;

/* ---- requests that are answered later ---------------------------------------
 * A pending_t lives on the heap until the asynchronous work ends; it holds
 * the request (sg_http_hold), which may go away first: then the work
 * finishes, cleans up, and replies to nobody. */
typedef struct {
    sg_http_hold_t *hold;
    sg_api_t *api;
    sg_exec_req_t ex;
    json_object *body;        /* keeps ex's strings alive */
    char *path;               /* files routes: the path as given, for the reply */
    sg_http_stream_t *stream; /* streaming executions */
    /* streamed stdout / stderr: the bytes of a UTF-8 sequence that the last
     * chunk began and did not finish (at most 3), held for the next one */
    struct {
        char b[4];
        size_t n;
    } partial[2];

    /* the request's place in a session's queue (below) */
    sg_session_t *slot;  /* the session whose waiting count it is in, or NULL */
    sg_op_t *op;         /* its op while submitted and not done */
    int started;         /* its op reached the agent: it runs to its end */
    int cancelled;       /* its client went, or DELETE /requests/{rid}, before it started */
    char rid[65];        /* X-Sandgate-Request-Id of an execution, "" if none */
    h2o_linklist_t link; /* in `named` while rid is set */
} pending_t;

pending_t *sg__api_pending_new(h2o_req_t *req, sg_api_t *api);
/* The request, or NULL once its client is gone. */
h2o_req_t *sg__api_pending_req(pending_t *p);
void sg__api_pending_free(pending_t *p);
/* Admits p to s's queue: 0, or -1 after answering 429. */
int sg__api_pending_admit(pending_t *p, h2o_req_t *req, sg_session_t *s);
/* Submits p's op (p->op while it is not done). */
void sg__api_pending_submit(pending_t *p, sg_op_t *op, sg_op_cb done);
/* Names p by its X-Sandgate-Request-Id, so that it can be cancelled. */
void sg__api_pending_name(pending_t *p, h2o_req_t *req);
/* DELETE /requests/{rid} (a route handler): cancels the named request
 * while it waits. */
int sg__api_delete_request(void *app, h2o_req_t *req, const sg_route_match_t *m);

/* ---- replies ---- */
/* The answer to a request given up before it ran. */
void sg__api_send_cancelled(h2o_req_t *req);
void sg__api_send_verr(h2o_req_t *req, const sg_verr_t *e);
/* A session or an installer could not start: 503s say when to try again. */
void sg__api_send_start_failure(h2o_req_t *req, int status, const char *code, const char *detail);
void sg__api_send_lib_failure(h2o_req_t *req, const sg_lib_result_t *r);
/* The failure of an op as an HTTP error; 0 if the op did not fail. */
int sg__api_send_op_failure(h2o_req_t *req, sg_op_t *op);
/* The body as a JSON object, or NULL after answering 400. */
json_object *sg__api_parse_body(h2o_req_t *req);
/* The session m->arg[0] names, or NULL after answering 404. */
sg_session_t *sg__api_find_session(h2o_req_t *req, h2o_iovec_t id);

#endif
