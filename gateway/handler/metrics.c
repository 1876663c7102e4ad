/*
 * metrics.c — the two routes without a token: GET / (a liveness answer)
 * and GET /metrics (the counters of base/metrics.h, Prometheus text).
 */
#include "buf.h"
#include "gateway.h"
#include "handlers.h"
#include "http.h"
#include "json.h"
#include "metrics.h"

int sg_gw_on_root(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "status", json_object_new_string("ok"));
    sg_metrics_request("root", 200);
    sg_http_send_json(req, 200, o);
    return 0;
}

int sg_gw_on_metrics(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    sg_buf_t out;
    sg_buf_init(&out, 4 << 20);
    sg_metrics_set_redis_up(sg_gw.redis_configured ? sg_state_available(sg_gw.state) : -1);
    sg_metrics_render(&out);
    sg_metrics_request("metrics", 200);
    sg_http_send_body(req, 200, "text/plain; version=0.0.4", out.base != NULL ? out.base : "", out.len);
    sg_buf_free(&out);
    return 0;
}
