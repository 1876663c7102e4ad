/*
 * templates.h — the template images keep_template sessions leave behind
 * (session.h keeps them; docs/architecture.md says how): the internal
 * routes that list and remove them (docs/proxy-api.md). The proxy knows no
 * tenants: each template carries the "owner" string its session was created
 * with, and the gateway decides who may see or remove it.
 *
 * Loop thread; the Docker calls run on the worker threads.
 */
#ifndef SANDGATE_TEMPLATES_H
#define SANDGATE_TEMPLATES_H

#include <h2o.h>

#include "proxy.h"

/* GET /templates[?owner=NAME] and DELETE /templates/{name}; seg and n are
 * the path's segments ("templates" first, n 1 or 2). */
int sg_templates_handle(const sg_proxy_t *px, h2o_req_t *req, h2o_iovec_t *seg, int n);

#endif
