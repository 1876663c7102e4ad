/*
 * api_templates.h — GET /templates and DELETE /templates/{name}: handlers
 * (sg_route_cb, app the sg_api_t) of the proxy's route table (api.c).
 */
#ifndef SANDGATE_API_TEMPLATES_H
#define SANDGATE_API_TEMPLATES_H

#include "api_core.h"

int sg__api_get_templates(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg__api_delete_template(void *app, h2o_req_t *req, const sg_route_match_t *m);

#endif
