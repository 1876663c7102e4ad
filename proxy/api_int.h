/*
 * api_int.h — internal to the proxy's API (api.h): the request core its
 * route families share (api.c: requests answered later, a session's
 * queue, the replies), and the handlers of the route table, one a route,
 * by family: api_sessions.c, api_exec.c, api_files.c, templates.c.
 * Loop thread only.
 */
#ifndef SANDGATE_API_INT_H
#define SANDGATE_API_INT_H

#include "api.h"
#include "http.h"
#include "libraries.h"
#include "route.h"
#include "session.h"

/* ---- requests that are answered later ---------------------------------------
 * A pending_t lives on the heap until the asynchronous work ends; it holds
 * the request (sg_http_hold), which may go away first: then the work
 * finishes, cleans up, and replies to nobody. */
typedef struct {
    sg_http_hold_t *hold;
    sg_api_t *api;
    sg_exec_req_t ex;
    json_object *body;  /* keeps ex's strings alive */
    char *path;         /* files routes: the path as given, for the reply */
    sg_http_stream_t *stream;  /* streaming executions */
    /* streamed stdout / stderr: the bytes of a UTF-8 sequence that the last
     * chunk began and did not finish (at most 3), held for the next one */
    struct {
        char b[4];
        size_t n;
    } partial[2];

    /* the request's place in a session's queue (below) */
    sg_session_t *slot;        /* the session whose waiting count it is in, or NULL */
    sg_op_t *op;               /* its op while submitted and not done */
    int started;               /* its op reached the agent: it runs to its end */
    int cancelled;             /* its client went, or DELETE /requests/{rid}, before it started */
    char rid[65];              /* X-Sandgate-Request-Id of an execution, "" if none */
    h2o_linklist_t link;       /* in `named` while rid is set */
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

/* ---- the handlers (sg_route_cb; app is the sg_api_t) ---- */
/* api_sessions.c */
int sg__api_get_sessions(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_post_sessions(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_get_session(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_delete_session(void *app, h2o_req_t *req, const sg_route_match_t *m);
/* api_exec.c */
int sg__api_post_execute(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_post_session_execute(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_post_session_commands(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_post_session_libraries(void *app, h2o_req_t *req, const sg_route_match_t *m);
/* api_files.c */
int sg__api_session_files(void *app, h2o_req_t *req, const sg_route_match_t *m);
/* templates.c */
int sg__api_get_templates(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_delete_template(void *app, h2o_req_t *req, const sg_route_match_t *m);

#endif
