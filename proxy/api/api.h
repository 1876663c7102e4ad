/*
 * api.h — the proxy's HTTP API (docs/proxy-api.md): routing, request
 * validation, replies. Runs on the event-loop thread.
 */
#ifndef SANDGATE_API_H
#define SANDGATE_API_H

#include <h2o.h>

#include "api_core.h"

/* The sg_http_handler_cb of the proxy; app is an sg_api_t (api_core.h). */
int sg_api_handle(void *app, h2o_req_t *req);

#endif
