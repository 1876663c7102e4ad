/*
 * handlers.h — the gateway's HTTP routes, one file per family under
 * handler/, each an sg_route_cb for the route tables of routes.c:
 * sessions.c, executions.c, files.c, libraries.c, templates.c (public and
 * admin), admin.c, metrics.c, mcp.c (+ mcp_tools.c). The public ones hand their request to the
 * request core (request.h); the admin ones run behind the admin token
 * (routes.c checks it first).
 *
 * Loop thread only. Each returns 0, the reply sent now or later.
 */
#ifndef SANDGATE_GW_HANDLERS_H
#define SANDGATE_GW_HANDLERS_H

#include <h2o.h>

#include "route.h"

/* metrics.c: no token */
int sg_gw_on_root(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_on_metrics(void *app, h2o_req_t *req, const sg_route_match_t *m);

/* sessions.c */
int sg_gw_on_session_create(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_on_session_list(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_on_session_get(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_on_session_delete(void *app, h2o_req_t *req, const sg_route_match_t *m);

/* executions.c */
int sg_gw_on_execute_once(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_on_session_execute(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_on_session_command(void *app, h2o_req_t *req, const sg_route_match_t *m);

/* files.c, libraries.c */
int sg_gw_on_session_files(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_on_session_libraries(void *app, h2o_req_t *req, const sg_route_match_t *m);

/* templates.c */
int sg_gw_on_templates_list(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_on_template_delete(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_admin_on_templates_list(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_admin_on_template_delete(void *app, h2o_req_t *req, const sg_route_match_t *m);

/* mcp.c: POST, DELETE /mcp; GET /.well-known/oauth-protected-resource (no token) */
int sg_gw_on_mcp(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_on_oauth_resource(void *app, h2o_req_t *req, const sg_route_match_t *m);

/* admin.c */
int sg_gw_admin_on_tenants_list(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_admin_on_tenant_create(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_admin_on_tenant_get(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_admin_on_tenant_patch(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_admin_on_tenant_delete(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_admin_on_tokens_list(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_admin_on_token_create(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_admin_on_token_revoke(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_admin_on_sessions_list(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_admin_on_session_close(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_admin_on_usage(void *app, h2o_req_t *req, const sg_route_match_t *m);

#endif
