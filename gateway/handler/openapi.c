/*
 * openapi.c — GET /openapi.json, no token: the OpenAPI 3.1 document of
 * every route (gateway/openapi/openapi.json), compiled into the binary
 * (openapi/embed.cmake) so that it always describes the routes this binary
 * serves — tests/unit/test_openapi_routes.c holds it to the route tables
 * of routes.c — whatever SANDGATE_WWW_DIR holds. GET /docs renders it.
 */
#include "handlers.h"
#include "http.h"
#include "metrics.h"

extern const char sg_gw_openapi_json[];
extern const size_t sg_gw_openapi_json_len;

const char *sg_gw_openapi_document(size_t *len)
{
    *len = sg_gw_openapi_json_len;
    return sg_gw_openapi_json;
}

int sg_gw_on_openapi(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    sg_metrics_request("openapi", 200);
    sg_http_send_body(req, 200, "application/json", sg_gw_openapi_json, sg_gw_openapi_json_len);
    return 0;
}
