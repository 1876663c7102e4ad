/*
 * handlers.h — the gateway's HTTP routes, one file per family under
 * handler/, each an sg_route_cb for the route tables of routes.c:
 * sessions.c, executions.c, files.c, libraries.c, templates.c (public and
 * admin), admin.c, admin_dash.c, metrics.c, health.c, openapi.c, mcp.c (+ mcp_tools.c). The public ones hand their
 * request to the request core (request.h); the admin ones run behind the admin token (routes.c checks it first).
 *
 * Loop thread only. Each returns 0, the reply sent now or later.
 */
#ifndef SANDGATE_GW_HANDLERS_H
#define SANDGATE_GW_HANDLERS_H

#include <h2o.h>
#include <json-c/json.h>

#include "http.h"
#include "route.h"
#include "state.h"
#include "store.h"

/* metrics.c, health.c, openapi.c: no token */
int sg_gw_on_root(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_on_metrics(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_on_health(void *app, h2o_req_t *req, const sg_route_match_t *m);
/* Each configured proxy as its health checks see it (GET /health, GET /admin/health). */
json_object *sg_gw_proxies_json(void);
int sg_gw_on_openapi(void *app, h2o_req_t *req, const sg_route_match_t *m);
/* The document GET /openapi.json serves (NUL terminated). */
const char *sg_gw_openapi_document(size_t *len);

/* sessions.c */
int sg_gw_on_session_create(void *app, h2o_req_t *req, const sg_route_match_t *m);
/* Commits of created sessions sent to the live state and not yet answered
 * (their replies did not wait for them): a stop waits for them too. */
size_t sg_gw_session_commits_live(void);
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
int sg_gw_on_pip_install(void *app, h2o_req_t *req, const sg_route_match_t *m);

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

/* admin_dash.c: what the ops dashboard reads, and the page itself */
int sg_gw_admin_on_overview(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_admin_on_stats(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_admin_on_executions(void *app, h2o_req_t *req, const sg_route_match_t *m);
int sg_gw_admin_on_health(void *app, h2o_req_t *req, const sg_route_match_t *m);
/* A live session as the admin API lists it (GET /admin/sessions, /admin/overview). */
json_object *sg_gw_live_session_json(const sg_live_session_t *s);
/* A usage row as the admin API lists it (GET /admin/usage, /admin/executions). */
json_object *sg_gw_usage_row_json(const sg_usage_t *u);
/* The headers of every reply under /dashboard (its static files, served
 * from SANDGATE_WWW_DIR/dashboard: routes.c, sg_gw_www_dirs), NULL-terminated. */
extern const char *const sg_gw_dashboard_headers[];

#endif
