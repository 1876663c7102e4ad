/*
 * api_files.h — GET and PUT /sessions/{id}/files: handlers (sg_route_cb,
 * app the sg_api_t) of the proxy's route table (api.c).
 */
#ifndef SANDGATE_API_FILES_H
#define SANDGATE_API_FILES_H

#include "api_core.h"

int sg__api_session_files(void *app, h2o_req_t *req, const sg_route_match_t *m);

#endif
