/*
 * api_exec.h — the execution routes (POST /sessions/{id}/execute and
 * /commands, POST /execute, POST /sessions/{id}/libraries): handlers
 * (sg_route_cb, app the sg_api_t) of the proxy's route table (api.c).
 */
#ifndef SANDGATE_API_EXEC_H
#define SANDGATE_API_EXEC_H

#include "api_core.h"

int sg__api_post_execute(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_post_session_execute(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_post_session_commands(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_post_session_libraries(void *app, h2o_req_t *req, const sg_route_match_t *m);

#endif
