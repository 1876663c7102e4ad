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
#include "placement.h"
#include "procstat.h"

int sg_gw_on_root(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "status", json_object_new_string("ok"));
    sg_metrics_request("root", 200);
    sg_http_send_json(req, 200, o);
    return 0;
}

/* Each proxy as placement sees it. A URL is the operator's own setting,
 * but is escaped as a label value all the same. */
static void render_proxies(sg_buf_t *out)
{
    static const struct {
        const char *name, *help;
    } gauges[] = {
        {"sandgate_proxy_up", "1 while the proxy answers its health checks (in placement), else 0"},
        {"sandgate_proxy_sessions", "sessions on the proxy, as its last health answer said (plus those placed since)"},
        {"sandgate_proxy_containers", "containers of the proxy, as its last health answer said"},
        {"sandgate_proxy_max_containers", "the proxy's SANDGATE_MAX_CONTAINERS"},
        {"sandgate_proxy_memory_committed_bytes", "memory its sessions are capped at, together"},
    };
    for (size_t gi = 0; gi < sizeof(gauges) / sizeof(gauges[0]); gi++) {
        sg_buf_appendf(out, "# HELP %s %s\n# TYPE %s gauge\n", gauges[gi].name, gauges[gi].help, gauges[gi].name);
        for (size_t i = 0; i < sg_proxies_count(); i++) {
            const sg_proxy_t *p = sg_proxies_at(i);
            long long v = gi == 0   ? p->in_placement
                          : gi == 1 ? p->sessions
                          : gi == 2 ? p->containers
                          : gi == 3 ? p->max_containers
                                    : (long long)p->memory_committed;
            sg_buf_appendf(out, "%s{proxy=\"", gauges[gi].name);
            for (const char *c = p->url; *c; c++)
                sg_buf_appendf(out, *c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
            sg_buf_appendf(out, "\"} %lld\n", v);
        }
    }
}

/* The Redis backend's solo admission (state.h). */
static void render_solo(sg_buf_t *out)
{
    sg_state_redis_stats_t s;
    if (!sg_gw.redis_configured)
        return;
    sg_state_redis_stats(sg_gw.state, &s);
    sg_buf_appendf(out,
                   "# HELP sandgate_state_solo Whether this gateway, the only one on its Redis, admits executions "
                   "from its own copy.\n# TYPE sandgate_state_solo gauge\nsandgate_state_solo %d\n",
                   s.holds);
    sg_buf_appendf(
        out,
        "# HELP sandgate_state_solo_admissions_total Executions admitted from this gateway's copy "
        "(Redis checks them after, with their tenant's apply).\n# TYPE sandgate_state_solo_admissions_total counter\n"
        "sandgate_state_solo_admissions_total %llu\n",
        (unsigned long long)s.local_admits);
    sg_buf_appendf(out,
                   "# HELP sandgate_state_solo_refusals_total Requests refused from this gateway's copy: past their "
                   "tenant's rate (nothing sent to Redis), at its cap of executions in flight, past its day's quota "
                   "or at its cap of live sessions (Redis checks them after).\n# TYPE "
                   "sandgate_state_solo_refusals_total counter\n"
                   "sandgate_state_solo_refusals_total %llu\n",
                   (unsigned long long)s.local_refusals);
    sg_buf_appendf(out,
                   "# HELP sandgate_state_solo_mismatches_total Admissions from the copy that Redis answered "
                   "otherwise (the copy dropped each time).\n# TYPE sandgate_state_solo_mismatches_total counter\n"
                   "sandgate_state_solo_mismatches_total %llu\n",
                   (unsigned long long)s.mismatches);
    sg_buf_appendf(
        out,
        "# HELP sandgate_state_redis_writes_total Writes to Redis's socket (the calls of a turn of the loop, "
        "or of several, go in one).\n# TYPE sandgate_state_redis_writes_total counter\n"
        "sandgate_state_redis_writes_total %llu\n",
        (unsigned long long)s.writes);
}

int sg_gw_on_metrics(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    sg_buf_t out;
    sg_buf_init(&out, 4 << 20);
    sg_metrics_set_redis_up(sg_gw.redis_configured ? sg_state_available(sg_gw.state) : -1);
    sg_metrics_render(&out);
    render_proxies(&out);
    render_solo(&out);
    sg_procstat_render(&out);
    sg_metrics_request("metrics", 200);
    sg_http_send_body(req, 200, "text/plain; version=0.0.4", out.base != NULL ? out.base : "", out.len);
    sg_buf_free(&out);
    return 0;
}
