/*
 * mcp_call.c — one JSON-RPC call of POST /mcp (mcp.h): its reply, as JSON or
 * as one Server-Sent Event, and the list of tools/call in flight that a
 * notifications/cancelled can end. mcp.c (the protocol) and mcp_tools.c
 * (the tools) both stand on it.
 */
#include "mcp.h"
#include "request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- replies ------------------------------------------------------------------------------- */

/* Sends msg (taken; NULL: 202 with no body) to g's client. */
void sg_mcp_send_msg(sg_gw_req_t *g, int status, json_object *msg, int sse, const char *session)
{
    h2o_req_t *req = sg_gw_req_http(g);
    size_t len;
    g->route = SG_GW_R_MCP;
    if (req == NULL) {
        json_object_put(msg);
        return;
    }
    sg_gw_reply_prepare(g, req, status);
    if (session != NULL && session[0])
        sg_http_add_header(req, "mcp-session-id", session);
    if (msg == NULL) {
        req->res.status = status;
        req->res.reason = sg_http_reason(status);
        req->res.content_length = 0;
        h2o_send_inline(req, "", 0);
        return;
    }
    const char *text =
        json_object_to_json_string_length(msg, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    if (!sse) {
        sg_http_send_body(req, status, "application/json", text, len);
    } else {
        /* one event; a JSON text in plain form holds no newline */
        size_t n = len + 32;
        char *ev = h2o_mem_alloc_pool(&req->pool, n);
        int m = snprintf(ev, n, "event: message\ndata: %s\n\n", text);
        sg_http_add_header(req, "cache-control", "no-cache");
        sg_http_add_header(req, "x-accel-buffering", "no");
        sg_http_send_body(req, status, "text/event-stream", ev, (size_t)m);
    }
    json_object_put(msg);
}

/* A JSON-RPC error (id borrowed, NULL when unknown; data taken). */
void sg_mcp_send_error(sg_gw_req_t *g, int status, json_object *id, int code, const char *message, json_object *data)
{
    json_object *msg = json_object_new_object(), *err = json_object_new_object();
    json_object_object_add(msg, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(msg, "id", id != NULL ? json_object_get(id) : NULL);
    json_object_object_add(err, "code", json_object_new_int(code));
    json_object_object_add(err, "message", json_object_new_string(message));
    if (data != NULL)
        json_object_object_add(err, "data", data);
    json_object_object_add(msg, "error", err);
    sg_mcp_send_msg(g, status, msg, 0, NULL);
}

/* Answers with a JSON-RPC error and lets the request go. */
void sg_mcp_fail(sg_gw_req_t *g, int status, json_object *id, int code, const char *message)
{
    sg_mcp_send_error(g, status, id, code, message, NULL);
    sg_gw_req_free(g);
}

void sg_mcp_reply_result(sg_gw_req_t *g, mcp_call_t *call, json_object *result)
{
    json_object *msg = json_object_new_object();
    if (call->modern) {
        json_object *meta = json_object_new_object(), *info = json_object_new_object();
        json_object_object_add(result, "resultType", json_object_new_string("complete"));
        json_object_object_add(info, "name", json_object_new_string("sandgate"));
        json_object_object_add(info, "version", json_object_new_string(SG_MCP_SERVER_VERSION));
        json_object_object_add(meta, "io.modelcontextprotocol/serverInfo", info);
        json_object_object_add(result, "_meta", meta);
    }
    json_object_object_add(msg, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(msg, "id", json_object_get(call->id));
    json_object_object_add(msg, "result", result);
    sg_mcp_send_msg(g, 200, msg, call->sse, call->session);
}

void sg_mcp_call_free(void *data)
{
    mcp_call_t *call = data;
    if (call == NULL)
        return;
    json_object_put(call->msg);
    free(call);
}

/* ---- cancellation (2025 revisions) ---------------------------------------------------------- */

static mcp_call_t *running; /* tools/call of MCP sessions in flight on this gateway */

void sg_mcp_running_add(sg_gw_req_t *g, mcp_call_t *call)
{
    call->g = g;
    call->tenant = g->tenant.id;
    call->next = running;
    call->listed = 1;
    running = call;
}

void sg_mcp_running_remove(mcp_call_t *call)
{
    if (!call->listed)
        return;
    for (mcp_call_t **p = &running; *p != NULL; p = &(*p)->next) {
        if (*p == call) {
            *p = call->next;
            break;
        }
    }
    call->listed = 0;
}

/* notifications/cancelled: the call of this tenant's MCP session with that
 * request id, if it runs here, ends as if its client had gone. */
void sg_mcp_cancel_running(sg_gw_req_t *g, mcp_call_t *note)
{
    json_object *params, *rid;
    if (!json_object_object_get_ex(note->msg, "params", &params) ||
        !json_object_object_get_ex(params, "requestId", &rid) || rid == NULL)
        return;
    for (mcp_call_t *c = running; c != NULL; c = c->next) {
        if (c->tenant == g->tenant.id && strcmp(c->session, note->session) == 0 && json_object_equal(c->id, rid)) {
            sg_gw_req_abandon(c->g); /* may free c */
            return;
        }
    }
}
