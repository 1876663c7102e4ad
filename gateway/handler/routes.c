/*
 * routes.c — every route of the gateway, in two tables (routes.h): the
 * public API, and the admin API behind its token. A route's handler lives
 * in the file of its family (handlers.h).
 */
#include "routes.h"
#include "gateway.h"
#include "handlers.h"
#include "http.h"
#include "metrics.h"
#include "route.h"
#include "util.h"
#include "credentials.h"
#include "throttle.h"

#include <math.h>
#include <stdio.h>

static const sg_route_t public_routes[] = {
    {SG_M_GET | SG_M_HEAD, "/", sg_gw_on_root, 0},
    {SG_M_GET, "/metrics", sg_gw_on_metrics, 0},
    {SG_M_GET, "/health", sg_gw_on_health, 0},
    {SG_M_GET, "/openapi.json", sg_gw_on_openapi, 0},
    {SG_M_POST, "/execute", sg_gw_on_execute_once, 0},
    {SG_M_POST, "/pip_install", sg_gw_on_pip_install, 0},
    {SG_M_POST, "/sessions", sg_gw_on_session_create, 0},
    {SG_M_GET, "/sessions", sg_gw_on_session_list, 0},
    {SG_M_GET, "/sessions/*", sg_gw_on_session_get, 0},
    {SG_M_DELETE, "/sessions/*", sg_gw_on_session_delete, 0},
    {SG_M_POST, "/sessions/*/execute", sg_gw_on_session_execute, 0},
    {SG_M_POST, "/sessions/*/commands", sg_gw_on_session_command, 0},
    {SG_M_GET | SG_M_PUT, "/sessions/*/files", sg_gw_on_session_files, 0},
    {SG_M_POST, "/sessions/*/libraries", sg_gw_on_session_libraries, 0},
    {SG_M_GET, "/templates", sg_gw_on_templates_list, 0},
    {SG_M_DELETE, "/templates/*", sg_gw_on_template_delete, 0},
    {SG_M_POST | SG_M_DELETE, "/mcp", sg_gw_on_mcp, 0},
    {SG_M_GET, "/.well-known/oauth-protected-resource", sg_gw_on_oauth_resource, 0},
    {SG_M_GET, "/.well-known/oauth-protected-resource/mcp", sg_gw_on_oauth_resource, 0},
};

static const sg_route_t admin_routes[] = {
    {SG_M_GET, "/admin/tenants", sg_gw_admin_on_tenants_list, 0},
    {SG_M_POST, "/admin/tenants", sg_gw_admin_on_tenant_create, 0},
    {SG_M_GET, "/admin/tenants/*", sg_gw_admin_on_tenant_get, 0},
    {SG_M_PATCH, "/admin/tenants/*", sg_gw_admin_on_tenant_patch, 0},
    {SG_M_DELETE, "/admin/tenants/*", sg_gw_admin_on_tenant_delete, 0},
    {SG_M_GET, "/admin/tenants/*/tokens", sg_gw_admin_on_tokens_list, 0},
    {SG_M_POST, "/admin/tenants/*/tokens", sg_gw_admin_on_token_create, 0},
    {SG_M_DELETE, "/admin/tokens/*", sg_gw_admin_on_token_revoke, 0},
    {SG_M_GET, "/admin/sessions", sg_gw_admin_on_sessions_list, 0},
    {SG_M_DELETE, "/admin/sessions/*", sg_gw_admin_on_session_close, 0},
    {SG_M_GET, "/admin/templates", sg_gw_admin_on_templates_list, 0},
    {SG_M_DELETE, "/admin/templates/*", sg_gw_admin_on_template_delete, 0},
    {SG_M_GET, "/admin/usage", sg_gw_admin_on_usage, 0},
    {SG_M_GET, "/admin/overview", sg_gw_admin_on_overview, 0},
    {SG_M_GET, "/admin/stats", sg_gw_admin_on_stats, 0},
    {SG_M_GET, "/admin/executions", sg_gw_admin_on_executions, 0},
    {SG_M_GET, "/admin/health", sg_gw_admin_on_health, 0},
};

/* Served as static files from SANDGATE_WWW_DIR/<subdir> by h2o's file
 * handler, ahead of the route tables (main.c registers them). */
static const sg_gw_www_t www_dirs[] = {
    {"/docs", "docs", "deploy/www-docs.sh", NULL},
    {"/dashboard", "dashboard", "dashboard/build.sh", sg_gw_dashboard_headers},
};

const sg_route_t *sg_gw_routes(sg_gw_table_t table, size_t *n)
{
    switch (table) {
    case SG_GW_TABLE_PUBLIC:
        *n = sizeof(public_routes) / sizeof(public_routes[0]);
        return public_routes;
    case SG_GW_TABLE_ADMIN:
        *n = sizeof(admin_routes) / sizeof(admin_routes[0]);
        return admin_routes;
    }
    *n = 0;
    return NULL;
}

const sg_gw_www_t *sg_gw_www_dirs(size_t *n)
{
    *n = sizeof(www_dirs) / sizeof(www_dirs[0]);
    return www_dirs;
}

/* Finds path's route in t and runs it; a path no route has (404), or a
 * method its routes do not take (405), is answered by the route table and
 * counted under label. */
static int dispatch(const sg_route_t *t, size_t n, const char *label, void *app, h2o_req_t *req, h2o_iovec_t path)
{
    sg_route_match_t m;
    unsigned allow = 0;
    int status = sg_route_match(t, n, req, path, &m, &allow);
    if (status != 0) {
        sg_metrics_request(label, status);
        sg_route_reply_unmatched(req, status, allow);
        return 0;
    }
    return m.route->handler(app, req, &m);
}

static int admin_refuse(h2o_req_t *req, int status, const char *code, const char *detail)
{
    sg_metrics_request("admin", status);
    sg_http_send_error(req, status, code, "%s", detail);
    return 0;
}

/* The admin token before any route: guessing it, an address that sent too
 * many wrong ones is refused before its token is looked at (so no answer
 * tells a right guess from a wrong one while it waits); the comparison
 * itself stays constant-time. */
static int admin_handle(void *app, h2o_req_t *req, h2o_iovec_t path)
{
    h2o_iovec_t tok = sg_gw_bearer(req);
    struct sockaddr_storage peer;
    struct sockaddr *sa = NULL;

    if (sg_gw.admin_token[0] == '\0')
        return admin_refuse(req, 404, "not_found", "the admin API is disabled (SANDGATE_ADMIN_TOKEN is not set)");
    if (req->conn->callbacks->get_peername != NULL && req->conn->callbacks->get_peername(req->conn, (void *)&peer) != 0)
        sa = (struct sockaddr *)&peer;
    double now = (double)sg_now_us() / 1e6, wait = sg_throttle_wait(sg_gw.admin_throttle, sa, now);
    if (wait > 0) {
        char v[32];
        snprintf(v, sizeof(v), "%.0f", ceil(wait));
        sg_http_add_header(req, "retry-after", v);
        return admin_refuse(req, 429, "too_many_failures",
                            "too many wrong admin tokens from this address; try again after Retry-After seconds");
    }
    if (tok.base == NULL || !sg_gw_secret_equal(tok.base, tok.len, sg_gw.admin_token)) {
        sg_throttle_fail(sg_gw.admin_throttle, sa, now);
        sg_http_add_header(req, "www-authenticate", "Bearer realm=\"sandgate-admin\"");
        return admin_refuse(req, 401, "unauthorized", "the admin API needs Authorization: Bearer <admin token>");
    }
    return dispatch(admin_routes, sizeof(admin_routes) / sizeof(admin_routes[0]), "admin", app, req, path);
}

int sg_gw_handle(void *app, h2o_req_t *req)
{
    h2o_iovec_t path = sg_http_path(req), seg[4];
    int n = sg_http_split_path(path.base, path.len, seg, 4);

    if (n >= 1 && h2o_memis(seg[0].base, seg[0].len, H2O_STRLIT("admin")))
        return admin_handle(app, req, path);
    return dispatch(public_routes, sizeof(public_routes) / sizeof(public_routes[0]), "other", app, req, path);
}
