/*
 * forward.c — a request's call to the proxy (request.h): the body as the
 * core rewrote it, a streamed reply passed through as it comes, and what a
 * client that goes away does to a call in flight.
 */
#include "request.h"
#include "close.h"
#include "metrics.h"
#include "placement.h"
#include "upstream.h"

#include <stdio.h>
#include <string.h>

#define SSE_MAX_QUEUED (8u << 20)

void sg_gw_reply_upstream_failure(sg_gw_req_t *g, const sg_upstream_reply_t *r)
{
    if (sg_http_hold_gone(g->hold) || g->abandoned) {
        sg_gw_reply_error(g, 499, "client_closed", "the client went away");
    } else if (r->timed_out) {
        sg_metrics_upstream_error("timeout");
        sg_gw_reply_error(g, 504, "upstream_timeout", "the sandbox service did not answer in time");
    } else {
        sg_metrics_upstream_error("unreachable");
        sg_gw_reply_error(g, 502, "proxy_unavailable", "the sandbox service is unavailable: %s",
                          r->err != NULL ? r->err : "no reply");
    }
}

/* ---- the call ------------------------------------------------------------------------- */

static void forward_body(sg_gw_req_t *g, const char **body, size_t *len, const char **ctype)
{
    if (g->json != NULL) {
        *body = json_object_to_json_string_length(g->json, JSON_C_TO_STRING_PLAIN, len);
        *ctype = "application/json";
    } else {
        *body = g->body;
        *len = g->body_len;
        *ctype = g->content_type[0] ? g->content_type : NULL;
    }
}

static void on_stream_head(void *data, long status, const char *content_type)
{
    sg_gw_req_t *g = data;
    h2o_req_t *req = sg_gw_req_http(g);
    g->up_status = status;
    if (req == NULL || status == 404)
        return; /* a 404 is answered whole once its code is known (on_forwarded) */
    sg_gw_reply_prepare(g, req, (int)status);
    g->stream =
        sg_http_stream_start(req, (int)status, content_type[0] ? content_type : "text/event-stream", SSE_MAX_QUEUED);
}

static void on_stream_data(void *data, const char *p, size_t len)
{
    sg_gw_req_t *g = data;
    sg_sse_tail_feed(&g->tail, p, len);
    if (sg_gw_req_http(g) != NULL && g->stream != NULL)
        sg_http_stream_write(g->stream, p, len);
}

/* Keeps what the reply to the client passes on from the proxy's headers
 * (its Retry-After), then hands the reply to the route's callback. */
static void on_forwarded(void *data, const sg_upstream_reply_t *r)
{
    sg_gw_req_t *g = data;
    g->up = NULL;
    snprintf(g->up_retry_after, sizeof(g->up_retry_after), "%s", r->retry_after != NULL ? r->retry_after : "");
    if (r->status == 404 && strcmp(r->code, "session_lost") == 0 && g->sid[0] && g->route != SG_GW_R_EPHEMERAL &&
        g->route != SG_GW_R_CREATE) {
        /* the proxy came back without it: its state is gone for good */
        sg_gw_session_lost(g, "its proxy restarted without it");
        return;
    }
    if (r->status == 404 && g->want_stream && g->stream == NULL) {
        /* not streamed (on_stream_head): answered whole, with its code */
        char body[160];
        sg_upstream_reply_t whole = *r;
        whole.body_len = (size_t)snprintf(body, sizeof(body),
                                          "{\"detail\":\"the sandbox service does not know it\",\"code\":\"%s\"}",
                                          r->code[0] ? r->code : "not_found");
        whole.body = body;
        whole.content_type = "application/json";
        g->want_stream = 0;
        g->up_done(g, &whole);
        return;
    }
    g->up_done(g, r);
}

/* ---- which proxy ------------------------------------------------------------------------ */

#define PROXY_WAIT_MS 100

static void on_proxy_wait(h2o_timeout_entry_t *e)
{
    sg_gw_req_t *g = H2O_STRUCT_FROM_MEMBER(sg_gw_req_t, proxy_wait, e);
    sg_gw_forward(g, g->fwd_method, g->fwd_path, g->fwd_timeout_ms, g->up_done);
}

/* g->proxy for the call, or -1 when g was answered (and freed) or waits. */
static int choose_proxy(sg_gw_req_t *g, const char *method, const char *path, long timeout_ms)
{
    static h2o_timeout_t wait_timeout;
    long wait_ms;

    if (g->proxy != NULL)
        return 0;
    if (sg_proxies_count() == 1) {
        g->proxy = sg_proxies_at(0); /* as before placement: no check on the request path */
        return 0;
    }
    if (g->sid[0] && g->sess_found && g->route != SG_GW_R_EPHEMERAL && g->route != SG_GW_R_CREATE) {
        sg_proxy_t *p = sg_proxies_find(g->sess.proxy);
        if (p == NULL) {
            sg_gw_session_lost(g, "its proxy is no longer configured");
            return -1;
        }
        if (sg_proxy_lost(p, &wait_ms)) {
            sg_gw_session_lost(g, "its proxy stopped answering");
            return -1;
        }
        if (wait_ms > 0) {
            /* within the grace: the proxy may be back (a restart that
             * adopts its sessions) — wait for it, at most that long */
            if (wait_timeout.timeout == 0)
                h2o_timeout_init(sg_gw.loop, &wait_timeout, PROXY_WAIT_MS);
            if (method != g->fwd_method) { /* not a wait that goes on (on_proxy_wait): they are copied already */
                snprintf(g->fwd_method, sizeof(g->fwd_method), "%s", method);
                snprintf(g->fwd_path, sizeof(g->fwd_path), "%s", path);
            }
            g->fwd_timeout_ms = timeout_ms;
            g->proxy_wait.cb = on_proxy_wait;
            h2o_timeout_link(sg_gw.loop, &wait_timeout, &g->proxy_wait);
            return -1;
        }
        g->proxy = p;
        return 0;
    }
    g->proxy =
        g->route == SG_GW_R_CREATE ? sg_proxies_place(g->lang) : sg_proxies_least_loaded(g->lang[0] ? g->lang : NULL);
    return g->proxy != NULL ? 0 : -2;
}

void sg_gw_forward(sg_gw_req_t *g, const char *method, const char *path, long timeout_ms, sg_upstream_done_cb done)
{
    const char *body = NULL, *ctype = NULL;
    const char *headers[2] = {NULL, NULL};
    char rid_header[64];
    size_t len = 0;
    char full[SG_GW_QUERY_MAX + 128];

    g->up_done = done;
    if (sg_http_hold_gone(g->hold) || g->abandoned) {
        sg_upstream_reply_t fail = {
            .err = "the client went away", .body = "", .content_type = "", .retry_after = "", .code = ""};
        done(g, &fail);
        return;
    }
    switch (choose_proxy(g, method, path, timeout_ms)) {
    case -2: {
        /* the route's failure path (a create gives its reservation back) */
        sg_upstream_reply_t fail = {.err = "no sandbox service is in placement (every proxy fails its checks)",
                                    .body = "",
                                    .content_type = "",
                                    .retry_after = "",
                                    .code = ""};
        done(g, &fail);
        return;
    }
    case -1:
        return;
    }
    if (strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0)
        forward_body(g, &body, &len, &ctype);
    if (g->rid[0]) {
        snprintf(rid_header, sizeof(rid_header), "X-Sandgate-Request-Id: %s", g->rid);
        headers[0] = rid_header;
    }
    snprintf(full, sizeof(full), "%s%s", path, g->query);
    g->up = sg_upstream_start_with_headers(g->proxy->up, method, full, headers, body, len, ctype, timeout_ms,
                                           g->want_stream ? on_stream_head : NULL,
                                           g->want_stream ? on_stream_data : NULL, on_forwarded, g);
    if (g->up == NULL) {
        sg_upstream_reply_t fail = {.err = "cannot start a request to the proxy",
                                    .body = "",
                                    .content_type = "",
                                    .retry_after = "",
                                    .code = ""};
        done(g, &fail);
    }
}

void sg_gw_pass_reply(void *data, const sg_upstream_reply_t *r)
{
    sg_gw_req_t *g = data;
    if (r->status == 0) {
        sg_gw_reply_upstream_failure(g, r);
    } else {
        sg_gw_check_session_lost(g, r);
        if ((g->route == SG_GW_R_FILES || g->route == SG_GW_R_LIBRARIES) && r->status == 200)
            sg_gw_touch_session(g, 0);
        sg_gw_reply_raw(g, (int)r->status, r->content_type, r->body, r->body_len);
    }
    sg_gw_req_free(g);
}

/* ---- a client that goes away ------------------------------------------------------------
 * Noticed while its request waits (sg_http_hold_watch). Before the proxy is
 * called, sg_gw_forward sees it and calls nothing. A call in flight goes as
 * the route's spec says (sg_gw_gone_t): an execution asks the proxy first
 * (DELETE /requests/{rid}): an operation still waiting in the session's
 * queue is dropped there (200), and the transfer is cut; one that has
 * started (409 request_started) or is over (404) runs to its end, and its
 * usage row is written as for any other — a run that happened is billed. */

static void answer_gone(sg_gw_req_t *g)
{
    /* to nobody: h2o then finds the connection closed and frees it */
    sg_gw_reply_error(g, 499, "client_closed", "the client went away");
    sg_gw_req_free(g);
}

#define CANCEL_TRIES 5
#define CANCEL_RETRY_MS 100

static void ask_cancel(sg_gw_req_t *g);

static void on_cancel_reply(void *data, const sg_upstream_reply_t *r)
{
    static h2o_timeout_t retry_timeout;
    sg_gw_req_t *g = data;
    g->cancel_up = NULL;
    if (r->status == 200 && g->up != NULL) {
        sg_metrics_execution(g->lang[0] ? g->lang : "unknown", sg_gw_runtime_label(g), "cancelled", -1);
        sg_upstream_cancel(g->up);
        g->up = NULL;
        answer_gone(g);
    } else if (r->status == 404 && strcmp(r->code, "no_such_request") == 0 && g->up != NULL &&
               g->cancel_tries < CANCEL_TRIES) {
        /* not there yet (still on its way to the proxy), or over (its reply
         * on its way back): ask again shortly while the call lasts */
        if (retry_timeout.timeout == 0)
            h2o_timeout_init(sg_gw.loop, &retry_timeout, CANCEL_RETRY_MS);
        h2o_timeout_link(sg_gw.loop, &retry_timeout, &g->cancel_retry);
    }
    /* else the run goes on: the route's reply callback records it */
}

static void on_cancel_retry(h2o_timeout_entry_t *e)
{
    sg_gw_req_t *g = H2O_STRUCT_FROM_MEMBER(sg_gw_req_t, cancel_retry, e);
    if (g->up != NULL)
        ask_cancel(g);
}

static void ask_cancel(sg_gw_req_t *g)
{
    char path[80];
    g->cancel_tries++;
    g->cancel_retry.cb = on_cancel_retry;
    snprintf(path, sizeof(path), "/requests/%s", g->rid);
    g->cancel_up = sg_upstream_start(g->proxy->up, "DELETE", path, NULL, 0, NULL, sg_gw.call_timeout_ms, NULL, NULL,
                                     on_cancel_reply, g);
}

static void on_client_gone(void *data)
{
    sg_gw_req_t *g = data;

    if (g->up == NULL || g->cancel_up != NULL || g->cancel_tries != 0)
        return; /* not forwarded yet (sg_gw_forward will see it), or asked already */
    switch (g->spec->gone) {
    case SG_GW_GONE_CANCEL:
        ask_cancel(g);
        return;
    case SG_GW_GONE_CUT:
        sg_upstream_cancel(g->up);
        g->up = NULL;
        answer_gone(g);
        return;
    case SG_GW_GONE_FINISH:
        return;
    }
}

void sg_gw_req_abandon(sg_gw_req_t *g)
{
    g->abandoned = 1;
    on_client_gone(g);
}

void sg_gw_watch_client(sg_gw_req_t *g)
{
    sg_http_hold_watch(g->hold, on_client_gone, g);
}
