/*
 * api_sessions.h — the sessions routes (POST and GET /sessions, GET and
 * DELETE /sessions/{id}): handlers (sg_route_cb, app the sg_api_t) of the
 * proxy's route table (api.c).
 */
#ifndef SANDGATE_API_SESSIONS_H
#define SANDGATE_API_SESSIONS_H

#include "api_core.h"

int sg__api_get_sessions(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_post_sessions(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_get_session(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_delete_session(void *app, h2o_req_t *req, const sg_route_match_t *m);

#endif
