/*
 * routes.h — the gateway's HTTP entry: every request to the public port
 * goes through sg_gw_handle, which finds its route in the route tables of
 * routes.c (common/route.h) and answers 404 / 405 (with Allow) for the
 * rest. Paths under /admin go to the admin API, behind SANDGATE_ADMIN_TOKEN.
 * Static pages (/docs) are served from disk ahead of both (sg_gw_www_dirs).
 *
 * Loop thread only.
 */
#ifndef SANDGATE_GW_ROUTES_H
#define SANDGATE_GW_ROUTES_H

#include <h2o.h>

#include "route.h"

/* An sg_http_handler_cb (common/http.h) for the public port. */
int sg_gw_handle(void *app, h2o_req_t *req);

/* The route tables as they are served, for the test that holds
 * GET /openapi.json to them: the public API, and the admin API (its
 * patterns start with /admin; the admin token is checked before them). */
typedef enum { SG_GW_TABLE_PUBLIC, SG_GW_TABLE_ADMIN } sg_gw_table_t;
const sg_route_t *sg_gw_routes(sg_gw_table_t table, size_t *n);

/* The static directories (GET only): url_path served from
 * <SANDGATE_WWW_DIR>/<subdir> by h2o's file handler, ahead of the tables,
 * with headers of their own (the dashboard's Content-Security-Policy). */
typedef struct {
    const char *url_path;
    const char *subdir;
    const char *builder;        /* what builds it, for the warning when it is missing */
    const char *const *headers; /* set on every reply under url_path (NULL: none) */
} sg_gw_www_t;
const sg_gw_www_t *sg_gw_www_dirs(size_t *n);

#endif
