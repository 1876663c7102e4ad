/*
 * routes.h — the gateway's HTTP entry: every request to the public port
 * goes through sg_gw_handle, which finds its route in the route tables of
 * routes.c (common/route.h) and answers 404 / 405 (with Allow) for the
 * rest. Paths under /admin go to the admin API, behind SANDGATE_ADMIN_TOKEN.
 *
 * Loop thread only.
 */
#ifndef SANDGATE_GW_ROUTES_H
#define SANDGATE_GW_ROUTES_H

#include <h2o.h>

/* An sg_http_handler_cb (common/http.h) for the public port. */
int sg_gw_handle(void *app, h2o_req_t *req);

#endif
