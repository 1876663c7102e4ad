/*
 * api_routes.h — the proxy's HTTP routes, one file per family, each an
 * sg_route_cb (app the sg_api_t) for the route table of api.c:
 * api_sessions.c, api_exec.c, api_files.c, api_templates.c, over the
 * request core (api_core.h).
 *
 * Loop thread only. Each returns 0, the reply sent now or later.
 */
#ifndef SANDGATE_API_ROUTES_H
#define SANDGATE_API_ROUTES_H

#include "api_core.h"

/* api_sessions.c: POST and GET /sessions, GET and DELETE /sessions/{id} */
int sg__api_get_sessions(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_post_sessions(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_get_session(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_delete_session(void *app, h2o_req_t *req, const sg_route_match_t *m);

/* api_exec.c: POST /sessions/{id}/execute and /commands, POST /execute,
 * POST /sessions/{id}/libraries, POST /libraries (the same in a one-shot
 * session) */
int sg__api_post_execute(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_post_session_execute(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_post_session_commands(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_post_session_libraries(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_post_libraries(void *app, h2o_req_t *req, const sg_route_match_t *m);

/* api_files.c: GET and PUT /sessions/{id}/files */
int sg__api_session_files(void *app, h2o_req_t *req, const sg_route_match_t *m);

/* api_templates.c: GET /templates and DELETE /templates/{name} */
int sg__api_get_templates(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_delete_template(void *app, h2o_req_t *req, const sg_route_match_t *m);

/* api_metrics.c: GET /metrics; and the count of an execution or command
 * that ended (op, before it is freed) */
int sg__api_get_metrics(void *app, h2o_req_t *req, const sg_route_match_t *m);
void sg__api_metrics_exec(const sg_op_t *op);

#endif
