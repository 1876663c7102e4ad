/*
 * api.h — the proxy's HTTP API (docs/proxy-api.md): routing, request
 * validation, replies. Runs on the event-loop thread.
 */
#ifndef SANDGATE_API_H
#define SANDGATE_API_H

#include <h2o.h>

#include "proxy.h"
#include "validate.h"

typedef struct {
    const sg_proxy_t *proxy;
    sg_policy_t policy;
    const char *image_allowlist; /* custom images a session may name */
    long session_queue;          /* client requests that may wait on one session (SANDGATE_SESSION_QUEUE) */
} sg_api_t;

/* The sg_http_handler_cb of the proxy; app is an sg_api_t. */
int sg_api_handle(void *app, h2o_req_t *req);

#endif
