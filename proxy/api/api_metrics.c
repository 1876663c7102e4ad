/*
 * api_metrics.c — GET /metrics: the proxy's own counters in Prometheus text
 * (docs/proxy-api.md), per runtime where they are per session: live
 * sessions, executions by language, runtime and outcome, ready pooled
 * containers by language and runtime, and the container cap in use.
 *
 * Loop thread only. The series are a fixed table (languages of lang.c by
 * runtimes of runtime.h by outcomes), so nothing grows with traffic.
 */
#include "api_routes.h"
#include "buf.h"
#include "capacity.h"
#include "pool.h"
#include "procstat.h"
#include "runtime.h"

#include <stdio.h>

#define MAX_LANGS 16

static const char *const outcomes[] = {"success", "error", "timeout", "failed"};
#define NOUTCOMES (sizeof(outcomes) / sizeof(outcomes[0]))

static unsigned long executions[MAX_LANGS][SG_RUNTIME_COUNT][NOUTCOMES];

void sg__api_metrics_exec(const sg_op_t *op)
{
    size_t li = sg_lang_index(op->session->lang), ri = sg_runtime_index(sg_session_runtime(op->session)), oi;
    if (li >= MAX_LANGS || ri >= SG_RUNTIME_COUNT)
        return;
    if (op->failed)
        oi = 3;
    else if (op->reason == SG_AGENT_REASON_TIMEOUT)
        oi = 2;
    else
        oi = op->reason == SG_AGENT_REASON_EXITED && op->exit_code == 0 ? 0 : 1;
    executions[li][ri][oi]++;
}

static void count_live(sg_session_t *s, void *data)
{
    size_t ri = sg_runtime_index(sg_session_runtime(s));
    if (!s->ephemeral && ri < SG_RUNTIME_COUNT)
        ((unsigned long *)data)[ri]++;
}

static int render(sg_buf_t *out)
{
    unsigned long live[SG_RUNTIME_COUNT] = {0};
    size_t nlangs = sg_lang_count() < MAX_LANGS ? sg_lang_count() : MAX_LANGS;
    int rc = 0;

    sg_session_foreach(count_live, live);
    rc |= sg_buf_appendf(out, "# HELP sandgate_proxy_live_sessions Live sessions on this proxy, by runtime.\n"
                              "# TYPE sandgate_proxy_live_sessions gauge\n");
    for (size_t r = 0; r < SG_RUNTIME_COUNT; r++)
        rc |= sg_buf_appendf(out, "sandgate_proxy_live_sessions{runtime=\"%s\"} %lu\n", sg_runtime_at(r), live[r]);
    rc |= sg_buf_appendf(out,
                         "# HELP sandgate_proxy_executions_total Executions and commands run, by language, runtime and "
                         "outcome.\n# TYPE sandgate_proxy_executions_total counter\n");
    for (size_t l = 0; l < nlangs; l++)
        for (size_t r = 0; r < SG_RUNTIME_COUNT; r++)
            for (size_t o = 0; o < NOUTCOMES; o++)
                if (executions[l][r][o] != 0)
                    rc |= sg_buf_appendf(
                        out, "sandgate_proxy_executions_total{lang=\"%s\",runtime=\"%s\",outcome=\"%s\"} %lu\n",
                        sg_lang_at(l)->name, sg_runtime_at(r), outcomes[o], executions[l][r][o]);
    rc |= sg_buf_appendf(
        out, "# HELP sandgate_proxy_pool_ready Ready containers in the warm pool, by language and runtime.\n"
             "# TYPE sandgate_proxy_pool_ready gauge\n");
    for (size_t l = 0; l < nlangs; l++)
        for (size_t r = 0; r < SG_RUNTIME_COUNT; r++)
            if (sg_sessions_runtime_offered(sg_runtime_at(r)))
                rc |= sg_buf_appendf(out, "sandgate_proxy_pool_ready{lang=\"%s\",runtime=\"%s\"} %zu\n",
                                     sg_lang_at(l)->name, sg_runtime_at(r),
                                     sg_pool_ready(sg_lang_at(l), sg_runtime_at(r)));
    rc |= sg_buf_appendf(out,
                         "# HELP sandgate_proxy_containers Containers of every kind held (SANDGATE_MAX_CONTAINERS).\n"
                         "# TYPE sandgate_proxy_containers gauge\nsandgate_proxy_containers %ld\n"
                         "# HELP sandgate_proxy_max_containers The cap on containers.\n"
                         "# TYPE sandgate_proxy_max_containers gauge\nsandgate_proxy_max_containers %ld\n",
                         sg_capacity_used(), sg_capacity_max());
    rc |= sg_procstat_render(out);
    return rc ? -1 : 0;
}

int sg__api_get_metrics(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    sg_buf_t out;
    sg_buf_init(&out, 1 << 20);
    if (render(&out) != 0)
        sg_http_send_error(req, 500, "internal", "the metrics did not fit");
    else
        sg_http_send_body(req, 200, "text/plain; version=0.0.4", out.base != NULL ? out.base : "", out.len);
    sg_buf_free(&out);
    return 0;
}
