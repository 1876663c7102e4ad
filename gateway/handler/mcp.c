/*
 * mcp.c — POST and DELETE /mcp, the Model Context Protocol over Streamable
 * HTTP (mcp.h), and GET /.well-known/oauth-protected-resource.
 *
 * A message, top-down: the Origin (403) -> the door (request.h: caps,
 * bearer token — 401 with a challenge naming the protected-resource
 * document —, the tenant's rate) -> mcp_run: the body as one JSON-RPC
 * message (-32700, -32600) -> its revision:
 *   2026-07-28 (stateless): a request carrying _meta's protocolVersion, or
 *     the MCP-Protocol-Version header saying so; the headers must agree
 *     with the body (MCP-Protocol-Version, Mcp-Method, Mcp-Name: -32020),
 *     no MCP session;
 *   2025-06-18 / 2025-11-25: initialize opens an MCP session (in the state:
 *     Redis or this process, bounded per tenant, idle expiry), whose
 *     MCP-Session-Id every later message carries; an unknown, ended or
 *     other tenant's id is 404; DELETE ends it.
 * -> the method: ping, tools/list, tools/call (mcp_tools.c: a REST route's
 * own flow), server/discover. Replies go as JSON, or as one Server-Sent
 * Event when the client's Accept names text/event-stream first;
 * notifications get 202.
 *
 * Sandbox state never hangs on an MCP session: a sandgate session is a
 * tool argument (session_id), owned by the tenant as through REST.
 */
#include "handlers.h"
#include "mcp.h"
#include "metrics.h"
#include "request.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODERN_VERSION "2026-07-28"
#define LEGACY_LATEST "2025-11-25"
static const char *const legacy_versions[] = {"2025-11-25", "2025-06-18"};
#define N_LEGACY (sizeof(legacy_versions) / sizeof(legacy_versions[0]))
#define CACHE_TTL_MS 300000
#define META_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define INSTRUCTIONS                                                                                                   \
    "sandgate runs code in sandboxes. execute_python runs Python once in a fresh sandbox. For state across "           \
    "calls, create_session gives a session_id; pass it to execute_code, run_command, write_file, read_file and "       \
    "install_library, and close_session when done."

static void mcp_run(sg_gw_req_t *g);

static const sg_gw_route_spec_t mcp_spec = {SG_GW_R_MCP, SG_GW_ARG_NONE, 0, 0, SG_GW_GONE_FINISH, mcp_run, 1};

/* ---- headers ---------------------------------------------------------------------------- */

static h2o_iovec_t header(h2o_req_t *req, const char *name)
{
    ssize_t i = h2o_find_header_by_str(&req->headers, name, strlen(name), -1);
    return i < 0 ? h2o_iovec_init(NULL, 0) : req->headers.entries[i].value;
}

static int header_is(h2o_iovec_t v, const char *s)
{
    return v.base != NULL && h2o_memis(v.base, v.len, s, strlen(s));
}

/* The Origin of a browser page: the gateway's own (same scheme-less
 * authority), or one SANDGATE_MCP_ORIGINS lists; absent is fine (not a
 * browser). A page on another origin could otherwise drive a local
 * gateway through DNS rebinding. */
static int origin_allowed(h2o_req_t *req)
{
    h2o_iovec_t o = header(req, "origin");
    if (o.base == NULL)
        return 1;
    for (const char *scheme = "http://"; scheme != NULL; scheme = scheme[4] == ':' ? "https://" : NULL) {
        size_t n = strlen(scheme);
        if (o.len == n + req->authority.len && memcmp(o.base, scheme, n) == 0 &&
            h2o_lcstris(o.base + n, req->authority.len, req->authority.base, req->authority.len))
            return 1;
    }
    return sg_mcp_origin_listed(sg_gw.mcp_origins, o.base, o.len);
}

/* 1 when the client prefers a stream: Accept names text/event-stream, and
 * before application/json if it names both. */
static int prefers_sse(h2o_req_t *req)
{
    h2o_iovec_t a = header(req, "accept");
    if (a.base == NULL)
        return 0;
    size_t sse = h2o_strstr(a.base, a.len, H2O_STRLIT("text/event-stream"));
    size_t json = h2o_strstr(a.base, a.len, H2O_STRLIT("application/json"));
    return sse != SIZE_MAX && (json == SIZE_MAX || sse < json);
}

static int accept_ok(h2o_req_t *req)
{
    h2o_iovec_t a = header(req, "accept");
    return a.base == NULL || h2o_strstr(a.base, a.len, H2O_STRLIT("application/json")) != SIZE_MAX ||
           h2o_strstr(a.base, a.len, H2O_STRLIT("text/event-stream")) != SIZE_MAX ||
           h2o_strstr(a.base, a.len, H2O_STRLIT("*/*")) != SIZE_MAX;
}

/* ---- methods -------------------------------------------------------------------------------- */

static json_object *server_info(void)
{
    json_object *info = json_object_new_object();
    json_object_object_add(info, "name", json_object_new_string("sandgate"));
    json_object_object_add(info, "version", json_object_new_string(SG_MCP_SERVER_VERSION));
    return info;
}

static json_object *capabilities(void)
{
    json_object *caps = json_object_new_object(), *tools = json_object_new_object();
    json_object_object_add(tools, "listChanged", json_object_new_boolean(0));
    json_object_object_add(caps, "tools", tools);
    return caps;
}

static json_object *supported_versions(void)
{
    json_object *a = json_object_new_array();
    json_object_array_add(a, json_object_new_string(MODERN_VERSION));
    for (size_t i = 0; i < N_LEGACY; i++)
        json_object_array_add(a, json_object_new_string(legacy_versions[i]));
    return a;
}

/* 2026-07-28's caching hints on a list or discover result: the same for
 * every tenant and fixed for the life of the gateway's build. */
static void cacheable(const mcp_call_t *call, json_object *r)
{
    if (!call->modern)
        return;
    json_object_object_add(r, "ttlMs", json_object_new_int(CACHE_TTL_MS));
    json_object_object_add(r, "cacheScope", json_object_new_string("public"));
}

/* A request (call has an id) of either revision, past its revision's
 * checks. The call is g's from here: freed with g. */
static void dispatch(sg_gw_req_t *g, mcp_call_t *call)
{
    json_object *params = NULL, *v;
    const char *method = "";
    char detail[300];
    int code;

    if (json_object_object_get_ex(call->msg, "method", &v))
        method = json_object_get_string(v);
    if (json_object_object_get_ex(call->msg, "params", &params) && params != NULL &&
        !json_object_is_type(params, json_type_object)) {
        sg_mcp_send_error(g, 200, call->id, MCP_INVALID_PARAMS, "params must be an object", NULL);
        goto Exit;
    }
    if (call->modern &&
        (strcmp(method, "ping") == 0 || strcmp(method, "initialize") == 0 || strcmp(method, "logging/setLevel") == 0)) {
        /* gone in 2026-07-28 */
        snprintf(detail, sizeof(detail), "Method not found: %s is not part of 2026-07-28", method);
        sg_mcp_send_error(g, 404, call->id, MCP_METHOD_NOT_FOUND, detail, NULL);
    } else if (strcmp(method, "ping") == 0) {
        sg_mcp_reply_result(g, call, json_object_new_object());
    } else if (strcmp(method, "tools/list") == 0) {
        json_object *r = json_object_new_object();
        json_object_object_add(r, "tools", sg_mcp_tools_list());
        cacheable(call, r);
        sg_mcp_reply_result(g, call, r);
    } else if (strcmp(method, "server/discover") == 0) {
        json_object *r = json_object_new_object();
        json_object_object_add(r, "supportedVersions", supported_versions());
        json_object_object_add(r, "capabilities", capabilities());
        json_object_object_add(r, "serverInfo", server_info());
        json_object_object_add(r, "instructions", json_object_new_string(INSTRUCTIONS));
        cacheable(call, r);
        sg_mcp_reply_result(g, call, r);
    } else if (strcmp(method, "tools/call") == 0) {
        g->capture_data = call;
        g->capture_free = sg_mcp_call_free;
        if (sg_mcp_tool_call(g, call, params, &code, detail, sizeof(detail)) == 0)
            return; /* answered when the tool's route answers */
        sg_mcp_send_error(g, call->modern ? 400 : 200, call->id, code, detail, NULL);
        sg_gw_req_free(g);
        return;
    } else {
        snprintf(detail, sizeof(detail), "Method not found: %.200s", method);
        sg_mcp_send_error(g, call->modern ? 404 : 200, call->id, MCP_METHOD_NOT_FOUND, detail, NULL);
    }
Exit:
    sg_mcp_call_free(call);
    g->capture_data = NULL;
    g->capture_free = NULL;
    sg_gw_req_free(g);
}

/* ---- 2026-07-28: every request stands alone ----------------------------------------------------- */

static void run_modern(sg_gw_req_t *g, h2o_req_t *req, mcp_call_t *call, const char *method, json_object *meta)
{
    h2o_iovec_t hv = header(req, "mcp-protocol-version"), hm = header(req, "mcp-method");
    json_object *v = NULL, *params;
    char detail[400];

    if (hv.base == NULL) {
        sg_mcp_send_error(g, 400, call->id, MCP_HEADER_MISMATCH,
                          "Header mismatch: MCP-Protocol-Version header is required", NULL);
        goto Error;
    }
    if (meta == NULL || !json_object_object_get_ex(meta, META_VERSION, &v) ||
        !json_object_is_type(v, json_type_string)) {
        sg_mcp_send_error(g, 400, call->id, MCP_INVALID_PARAMS, "params._meta[\"" META_VERSION "\"] is required", NULL);
        goto Error;
    }
    if (!header_is(hv, json_object_get_string(v))) {
        snprintf(detail, sizeof(detail),
                 "Header mismatch: MCP-Protocol-Version header value '%.*s' does not match body value '%.64s'",
                 (int)(hv.len > 64 ? 64 : hv.len), hv.base, json_object_get_string(v));
        sg_mcp_send_error(g, 400, call->id, MCP_HEADER_MISMATCH, detail, NULL);
        goto Error;
    }
    if (strcmp(json_object_get_string(v), MODERN_VERSION) != 0) {
        json_object *data = json_object_new_object();
        json_object_object_add(data, "supported", supported_versions());
        json_object_object_add(data, "requested", json_object_get(v));
        sg_mcp_send_error(g, 400, call->id, MCP_UNSUPPORTED_VERSION, "Unsupported protocol version", data);
        goto Error;
    }
    if (!json_object_object_get_ex(meta, META_CAPS, &v) || !json_object_is_type(v, json_type_object)) {
        sg_mcp_send_error(g, 400, call->id, MCP_INVALID_PARAMS, "params._meta[\"" META_CAPS "\"] is required", NULL);
        goto Error;
    }
    if (call->id == NULL) {
        /* this revision defines no client notification over HTTP: accepted */
        sg_mcp_send_msg(g, 202, NULL, 0, NULL);
        goto Error;
    }
    if (!header_is(hm, method)) {
        snprintf(detail, sizeof(detail),
                 "Header mismatch: Mcp-Method header value '%.*s' does not match body value '%.64s'",
                 (int)(hm.len > 64 ? 64 : hm.len), hm.base != NULL ? hm.base : "", method);
        sg_mcp_send_error(g, 400, call->id, MCP_HEADER_MISMATCH, detail, NULL);
        goto Error;
    }
    const char *field = strcmp(method, "tools/call") == 0 || strcmp(method, "prompts/get") == 0 ? "name"
                        : strcmp(method, "resources/read") == 0                                 ? "uri"
                                                                                                : NULL;
    if (field != NULL) {
        h2o_iovec_t hn = header(req, "mcp-name");
        const char *body = NULL;
        char name[1024];
        size_t len;
        if (json_object_object_get_ex(call->msg, "params", &params) && json_object_object_get_ex(params, field, &v) &&
            json_object_is_type(v, json_type_string))
            body = json_object_get_string(v);
        if (hn.base == NULL || body == NULL || sg_mcp_decode_name(hn.base, hn.len, name, sizeof(name), &len) != 0 ||
            len != strlen(body) || memcmp(name, body, len) != 0) {
            snprintf(detail, sizeof(detail), "Header mismatch: Mcp-Name header %s does not match body params.%s",
                     hn.base == NULL ? "is missing or" : "value", field);
            sg_mcp_send_error(g, 400, call->id, MCP_HEADER_MISMATCH, detail, NULL);
            goto Error;
        }
    }
    dispatch(g, call);
    return;
Error:
    sg_mcp_call_free(call);
    sg_gw_req_free(g);
}

/* ---- 2025 revisions: initialize, then the MCP session ------------------------------------------ */

static const char *legacy_version(const char *asked)
{
    for (size_t i = 0; i < N_LEGACY; i++)
        if (asked != NULL && strcmp(asked, legacy_versions[i]) == 0)
            return legacy_versions[i];
    return LEGACY_LATEST;
}

#define STATE_DOWN "MCP sessions are unavailable (the shared state does not answer); try again"

/* The call g waited on the state with, back from g; NULL when the state did
 * not answer: then 503 (MCP sessions fail closed) and both are freed. */
static mcp_call_t *take_call(sg_gw_req_t *g, const sg_state_result_t *r)
{
    mcp_call_t *call = g->capture_data;
    g->capture_data = NULL;
    g->capture_free = NULL;
    if (r->available)
        return call;
    sg_mcp_send_error(g, 503, call->id, MCP_INTERNAL_ERROR, STATE_DOWN, NULL);
    sg_mcp_call_free(call);
    sg_gw_req_free(g);
    return NULL;
}

static void on_opened(void *data, const sg_state_result_t *r)
{
    sg_gw_req_t *g = data;
    mcp_call_t *call = take_call(g, r);
    if (call == NULL)
        return;
    if (!r->ok) {
        h2o_req_t *req = sg_gw_req_http(g);
        if (req != NULL)
            sg_http_add_header(req, "retry-after", "60");
        char detail[200];
        snprintf(detail, sizeof(detail), "the tenant already holds %ld MCP sessions, its limit; end one (DELETE /mcp)",
                 sg_gw.mcp_sessions);
        sg_mcp_send_error(g, 429, call->id, MCP_INTERNAL_ERROR, detail, NULL);
    } else {
        json_object *res = json_object_new_object();
        json_object_object_add(res, "protocolVersion", json_object_new_string(call->version));
        json_object_object_add(res, "capabilities", capabilities());
        json_object_object_add(res, "serverInfo", server_info());
        json_object_object_add(res, "instructions", json_object_new_string(INSTRUCTIONS));
        sg_mcp_reply_result(g, call, res);
    }
    sg_mcp_call_free(call);
    sg_gw_req_free(g);
}

static void initialize(sg_gw_req_t *g, mcp_call_t *call)
{
    json_object *params, *v;
    unsigned char rnd[16];
    const char *asked = NULL;

    if (call->id == NULL) {
        sg_mcp_send_error(g, 400, NULL, MCP_INVALID_REQUEST, "initialize is a request: it needs an id", NULL);
        goto Error;
    }
    if (!json_object_object_get_ex(call->msg, "params", &params) || !json_object_is_type(params, json_type_object)) {
        sg_mcp_send_error(g, 200, call->id, MCP_INVALID_PARAMS, "initialize needs params", NULL);
        goto Error;
    }
    if (json_object_object_get_ex(params, "protocolVersion", &v) && json_object_is_type(v, json_type_string))
        asked = json_object_get_string(v);
    snprintf(call->version, sizeof(call->version), "%s", legacy_version(asked));
    sg_random_bytes(rnd, sizeof(rnd));
    sg_hex(call->session, rnd, sizeof(rnd));
    g->capture_data = call;
    g->capture_free = sg_mcp_call_free;
    sg_state_mcp_open(sg_gw.state, g->tenant.id, sg_gw.mcp_sessions, call->session, sg_gw.mcp_idle_s, on_opened, g);
    return;
Error:
    sg_mcp_call_free(call);
    sg_gw_req_free(g);
}

static void on_touched(void *data, const sg_state_result_t *r)
{
    sg_gw_req_t *g = data;
    mcp_call_t *call = take_call(g, r);
    if (call == NULL)
        return;
    if (!r->ok) {
        sg_mcp_send_error(g, 404, call->id, MCP_INVALID_REQUEST,
                          "Session not found: it ended or expired; initialize again", NULL);
    } else if (call->id == NULL) {
        json_object *v;
        if (json_object_object_get_ex(call->msg, "method", &v) &&
            strcmp(json_object_get_string(v), "notifications/cancelled") == 0)
            sg_mcp_cancel_running(g, call);
        sg_mcp_send_msg(g, 202, NULL, 0, NULL); /* a notification, or a response */
    } else {
        dispatch(g, call);
        return;
    }
    sg_mcp_call_free(call);
    sg_gw_req_free(g);
}

static void run_legacy(sg_gw_req_t *g, h2o_req_t *req, mcp_call_t *call, const char *method)
{
    h2o_iovec_t sid = header(req, "mcp-session-id"), hv = header(req, "mcp-protocol-version");

    if (strcmp(method, "initialize") == 0) {
        initialize(g, call);
        return;
    }
    if (sid.base == NULL) {
        sg_mcp_send_error(
            g, 400, call->id, MCP_INVALID_REQUEST,
            "Bad Request: Mcp-Session-Id header is required (initialize first, or send 2026-07-28 requests)", NULL);
        goto Error;
    }
    if (hv.base != NULL && !header_is(hv, legacy_versions[0]) && !header_is(hv, legacy_versions[1])) {
        sg_mcp_send_error(g, 400, call->id, MCP_INVALID_REQUEST, "Bad Request: unsupported MCP-Protocol-Version", NULL);
        goto Error;
    }
    if (!sg_mcp_session_id_ok(sid.base, sid.len)) {
        sg_mcp_send_error(g, 404, call->id, MCP_INVALID_REQUEST, "Session not found", NULL);
        goto Error;
    }
    memcpy(call->session, sid.base, sid.len);
    call->session[sid.len] = '\0';
    g->capture_data = call;
    g->capture_free = sg_mcp_call_free;
    sg_state_mcp_touch(sg_gw.state, g->tenant.id, call->session, sg_gw.mcp_idle_s, on_touched, g);
    return;
Error:
    sg_mcp_call_free(call);
    sg_gw_req_free(g);
}

/* ---- DELETE: the end of an MCP session ------------------------------------------------------------ */

static void on_closed(void *data, const sg_state_result_t *r)
{
    sg_gw_req_t *g = data;
    if (!r->available)
        sg_mcp_fail(g, 503, NULL, MCP_INTERNAL_ERROR, STATE_DOWN);
    else if (!r->ok)
        sg_mcp_fail(g, 404, NULL, MCP_INVALID_REQUEST, "Session not found");
    else {
        sg_mcp_send_msg(g, 200, NULL, 0, NULL);
        sg_gw_req_free(g);
    }
}

static void end_session(sg_gw_req_t *g, h2o_req_t *req)
{
    h2o_iovec_t sid = header(req, "mcp-session-id");
    char id[40];
    if (sid.base == NULL) {
        sg_mcp_fail(g, 400, NULL, MCP_INVALID_REQUEST, "Bad Request: Mcp-Session-Id header is required");
        return;
    }
    if (!sg_mcp_session_id_ok(sid.base, sid.len)) {
        sg_mcp_fail(g, 404, NULL, MCP_INVALID_REQUEST, "Session not found");
        return;
    }
    memcpy(id, sid.base, sid.len);
    id[sid.len] = '\0';
    sg_state_mcp_close(sg_gw.state, g->tenant.id, id, on_closed, g);
}

/* ---- one message ------------------------------------------------------------------------------------ */

static void mcp_run(sg_gw_req_t *g)
{
    h2o_req_t *req = sg_gw_req_http(g);
    json_object *msg = NULL, *v, *params, *meta = NULL;
    const char *method;

    if (req == NULL) {
        sg_gw_req_free(g);
        return;
    }
    if (strcmp(g->method, "DELETE") == 0) {
        end_session(g, req);
        return;
    }
    if (g->content_type[0] && !sg_http_is_json(req)) {
        sg_mcp_fail(g, 415, NULL, MCP_INVALID_REQUEST, "Unsupported Media Type: Content-Type must be application/json");
        return;
    }
    if (!accept_ok(req)) {
        sg_mcp_fail(g, 406, NULL, MCP_INVALID_REQUEST,
                    "Not Acceptable: Accept must list application/json and text/event-stream");
        return;
    }
    json_tokener *tok = json_tokener_new();
    if (g->body != NULL)
        msg = json_tokener_parse_ex(tok, g->body, (int)g->body_len);
    if (msg != NULL) {
        /* nothing but white space after the message */
        size_t end = json_tokener_get_parse_end(tok);
        while (end < g->body_len && strchr(" \t\r\n", g->body[end]) != NULL && g->body[end] != '\0')
            end++;
        if (end != g->body_len) {
            json_object_put(msg);
            msg = NULL;
        }
    }
    json_tokener_free(tok);
    if (msg == NULL) {
        sg_mcp_fail(g, 400, NULL, MCP_PARSE_ERROR, "Parse error: the body is not one JSON value");
        return;
    }
    if (json_object_is_type(msg, json_type_array)) {
        json_object_put(msg);
        sg_mcp_fail(g, 400, NULL, MCP_INVALID_REQUEST, "Invalid Request: batches are not supported (since 2025-06-18)");
        return;
    }
    mcp_call_t *call = sg_xcalloc(1, sizeof(*call));
    call->msg = msg;
    call->sse = prefers_sse(req);
    if (!json_object_is_type(msg, json_type_object) || !json_object_object_get_ex(msg, "jsonrpc", &v) ||
        !json_object_is_type(v, json_type_string) || strcmp(json_object_get_string(v), "2.0") != 0) {
        sg_mcp_send_error(g, 400, NULL, MCP_INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message", NULL);
        goto Exit;
    }
    if (json_object_object_get_ex(msg, "id", &v)) {
        if (v == NULL || !(json_object_is_type(v, json_type_string) || json_object_is_type(v, json_type_int))) {
            sg_mcp_send_error(g, 400, NULL, MCP_INVALID_REQUEST, "Invalid Request: id must be a string or an integer",
                              NULL);
            goto Exit;
        }
        call->id = v;
    }
    if (!json_object_object_get_ex(msg, "method", &v) || !json_object_is_type(v, json_type_string)) {
        if (call->id != NULL &&
            (json_object_object_get_ex(msg, "result", NULL) || json_object_object_get_ex(msg, "error", NULL))) {
            /* a response: the gateway asks the client nothing, so none is awaited */
            sg_mcp_send_msg(g, 202, NULL, 0, NULL);
            goto Exit;
        }
        sg_mcp_send_error(g, 400, call->id, MCP_INVALID_REQUEST, "Invalid Request: method must be a string", NULL);
        goto Exit;
    }
    method = json_object_get_string(v);
    if (json_object_object_get_ex(msg, "params", &params) && json_object_is_type(params, json_type_object) &&
        json_object_object_get_ex(params, "_meta", &meta) && !json_object_is_type(meta, json_type_object))
        meta = NULL;
    h2o_iovec_t hv = header(req, "mcp-protocol-version");
    /* 2026-07-28 by its marks (an initialize with them is a method it removed) */
    int modern = (meta != NULL && json_object_object_get_ex(meta, META_VERSION, NULL)) || header_is(hv, MODERN_VERSION);
    call->modern = modern;
    if (modern)
        run_modern(g, req, call, method, meta);
    else
        run_legacy(g, req, call, method);
    return;
Exit:
    sg_mcp_call_free(call);
    sg_gw_req_free(g);
}

/* ---- routes ------------------------------------------------------------------------------------------ */

int sg_gw_on_mcp(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    if (!origin_allowed(req)) {
        sg_metrics_request(sg_gw_route_names[SG_GW_R_MCP], 403);
        sg_http_send_body(req, 403, "application/json",
                          H2O_STRLIT("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":"
                                     "\"Forbidden: this Origin may not use the MCP endpoint\"}}"));
        return 0;
    }
    return sg_gw_req_accept(req, m, &mcp_spec);
}

/* RFC 9728: what an OAuth-aware client reads after a 401. The tokens are
 * sandgate's own (an operator issues them); no authorization server is
 * named, and a client configured with a token never needs one. */
int sg_gw_on_oauth_resource(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    char base[300];
    json_object *o = json_object_new_object(), *methods = json_object_new_array();
    snprintf(base, sizeof(base), "%s://%.*s/mcp", req->scheme == &H2O_URL_SCHEME_HTTPS ? "https" : "http",
             (int)(req->authority.len < 256 ? req->authority.len : 0), req->authority.base);
    json_object_object_add(o, "resource", json_object_new_string(base));
    json_object_array_add(methods, json_object_new_string("header"));
    json_object_object_add(o, "bearer_methods_supported", methods);
    json_object_object_add(o, "resource_name", json_object_new_string("sandgate"));
    sg_http_send_json(req, 200, o);
    return 0;
}
