/*
 * executions.c — running code: POST /execute (one-shot, in a fresh
 * sandbox), POST /sessions/{id}/execute and /commands (in a session).
 *
 * One execution, top-down: the door (request.c: caps, token, rate) ->
 * on_authed: the body's caps -> an execution slot, then the day's quota
 * (ledger.c) -> start: forwarded to the proxy (forward.c), streamed back
 * when asked -> on_exec_reply: the usage row (ledger.c), then the answer.
 * A client that goes away has its run cancelled on the proxy while it is
 * still queued there (forward.c).
 */
#include "handlers.h"
#include "log.h"
#include "metrics.h"
#include "request.h"
#include "util.h"
#include "clock.h"
#include "upstream.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static void on_authed(sg_gw_req_t *g);

SG_GW_ROUTE_HANDLER(sg_gw_on_execute_once, SG_GW_R_EPHEMERAL, SG_GW_ARG_NONE, 0, 1, SG_GW_GONE_CANCEL, on_authed)
SG_GW_ROUTE_HANDLER(sg_gw_on_session_execute, SG_GW_R_EXECUTE, SG_GW_ARG_SESSION, 0, 1, SG_GW_GONE_CANCEL, on_authed)
SG_GW_ROUTE_HANDLER(sg_gw_on_session_command, SG_GW_R_COMMAND, SG_GW_ARG_SESSION, 0, 1, SG_GW_GONE_CANCEL, on_authed)

static void check_quota(sg_gw_req_t *g);
static void start(sg_gw_req_t *g);
static void on_exec_reply(void *data, const sg_upstream_reply_t *r);

/* The body's caps, then the tenant's limits. */
static void on_authed(sg_gw_req_t *g)
{
    double d;
    json_object *v;
    unsigned char rnd[16];

    if (sg_gw_parse_json_body(g) != 0)
        goto Error;
    if (g->route == SG_GW_R_EPHEMERAL) {
        if (sg_gw_check_lang(g) != 0 || sg_gw_set_runtime(g) != 0)
            goto Error;
    } else {
        snprintf(g->lang, sizeof(g->lang), "%s", g->sess.lang);
    }
    if (sg_gw_cap_number(g, "timeout", 0, 0, g->tenant.max_timeout, sg_gw.default_timeout, &d) != 0)
        goto Error;
    if (!json_object_object_get_ex(g->json, "timeout", &v) || v == NULL) {
        /* a session's own default (set at create, already capped) applies */
        if (g->route == SG_GW_R_EPHEMERAL)
            json_object_object_add(g->json, "timeout", json_object_new_double(d));
        else
            d = g->tenant.max_timeout;
    }
    g->timeout = d;
    /* the proxy knows the run by this id: a client that goes away cancels it */
    sg_random_bytes(rnd, sizeof(rnd));
    sg_hex(g->rid, rnd, sizeof(rnd));
    if (json_object_object_get_ex(g->json, "stream", &v) && json_object_get_boolean(v))
        g->want_stream = 1;
    if (g->want_stream) /* asked by Accept: the proxy is asked in the body */
        json_object_object_add(g->json, "stream", json_object_new_boolean(1));
    sg_gw_day(sg_wall_s(), g->day);
    /* the slot first: a run refused for concurrency does not use the day's quota */
    sg_gw_exec_slot_take(g, (long)(g->timeout * 1000) + sg_gw.upstream_grace_ms, check_quota);
    return;
Error:
    sg_gw_req_free(g);
}

static void check_quota(sg_gw_req_t *g)
{
    sg_gw_quota_reserve(g, start);
}

static void start(sg_gw_req_t *g)
{
    char path[128];
    long timeout_ms = (long)(g->timeout * 1000) + sg_gw.upstream_grace_ms;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    g->started_at = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    g->started_us = sg_now_us();
    if (g->route == SG_GW_R_EPHEMERAL)
        snprintf(path, sizeof(path), "/execute");
    else
        snprintf(path, sizeof(path), "/sessions/%s/%s", g->sid, g->route == SG_GW_R_COMMAND ? "commands" : "execute");
    sg_gw_forward(g, "POST", path, timeout_ms, on_exec_reply);
}

/* A run that happened is billed whatever became of its reply; one that
 * never started (no reply, an error status) is not. */
static void on_exec_reply(void *data, const sg_upstream_reply_t *r)
{
    sg_gw_req_t *g = data;
    const char *result = NULL;
    size_t len = 0;

    if (r->status == 0 && g->want_stream && g->up_status == 200 && !g->tail.saw_error) {
        /* the proxy's stream broke off after the run began: the run still
         * counts (at the gateway's own measure), and the client's stream is
         * ended as broken, not as complete */
        sg_warn("usage: a streamed execution of tenant %lld broke off: %s", (long long)g->tenant.id,
                r->err != NULL ? r->err : "no reason");
        sg_gw_record_execution(g, "{}", 2, r);
        return; /* ended once the row is written */
    }
    if (r->status == 0) {
        sg_metrics_execution(g->lang[0] ? g->lang : "unknown", sg_gw_runtime_label(g), "failed", -1);
        if (g->stream == NULL)
            sg_gw_reply_upstream_failure(g, r);
        else if (sg_gw_req_http(g) != NULL)
            sg_http_stream_abort(g->stream);
        sg_gw_req_free(g);
        return;
    }
    if (r->status == 200 && g->want_stream) {
        result = sg_sse_tail_result(&g->tail, &len);
        if (result == NULL && !g->tail.saw_error) {
            /* the stream ended without its result: the run still counts */
            sg_warn("usage: a streamed execution of tenant %lld ended without its result event",
                    (long long)g->tenant.id);
            result = "{}";
            len = 2;
        }
    } else if (r->status == 200) {
        result = r->body;
        len = r->body_len;
    } else {
        if (r->status >= 500)
            sg_metrics_upstream_error("5xx");
        sg_gw_check_session_lost(g, r);
    }
    if (result != NULL) {
        sg_gw_record_execution(g, result, len, r);
        return; /* answered once the row is written */
    }
    sg_gw_exec_answer(g, (int)r->status, r->content_type, r->body, r->body_len);
}
