/*
 * mcp.h — private to handler/mcp*.c: the Model Context Protocol endpoint
 * (POST /mcp, Streamable HTTP). mcp.c is the transport and the protocol
 * (revisions 2025-06-18 and 2025-11-25 with MCP sessions, 2026-07-28
 * stateless); mcp_tools.c is the tools, each one an internal request of a
 * REST route (request.h, sg_gw_req_run_as) whose reply becomes the tool's
 * result.
 *
 * Loop thread only.
 */
#ifndef SANDGATE_GW_MCP_H
#define SANDGATE_GW_MCP_H

#include <json-c/json.h>

#include "request.h"

/* JSON-RPC and MCP error codes. */
#define MCP_PARSE_ERROR -32700
#define MCP_INVALID_REQUEST -32600
#define MCP_METHOD_NOT_FOUND -32601
#define MCP_INVALID_PARAMS -32602
#define MCP_INTERNAL_ERROR -32603
#define MCP_HEADER_MISMATCH -32020
#define MCP_UNSUPPORTED_VERSION -32022

/* One JSON-RPC request on its way: what the reply needs. */
typedef struct mcp_call mcp_call_t;
struct mcp_call {
    json_object *msg; /* the request (owned) */
    json_object *id;  /* borrowed from msg */
    int modern;       /* 2026-07-28: resultType and serverInfo in every result */
    int sse;          /* the reply goes as one Server-Sent Event */
    char session[40]; /* the MCP session (2025 revisions), or initialize's new one */
    char version[16]; /* initialize: the revision agreed */
    /* a tools/call in an MCP session, while it runs: listed for
     * notifications/cancelled (sg_mcp_running_*) */
    int64_t tenant;
    sg_gw_req_t *g;
    mcp_call_t *next;
    int listed;
};

/* ---- the header values (mcp_wire.c: pure, fuzzed by fuzz_mcp_headers) ---- */

/* An Mcp-Name (or Mcp-Param-*) value as the body has it: a plain value as
 * given, "=?base64?<b64>?=" decoded. Into out (NUL-terminated; *len bytes,
 * which may hold NUL). 0, or -1 when it does not fit in outlen or is not
 * base64. */
int sg_mcp_decode_name(const char *v, size_t vlen, char *out, size_t outlen, size_t *len);
/* 1 when origin (olen bytes) is one of list's comma-separated entries
 * (spaces around an entry ignored; exact match). */
int sg_mcp_origin_listed(const char *list, const char *origin, size_t olen);
/* 1 when v is shaped as the MCP-Session-Ids the gateway makes: 32
 * lower-case hex digits. */
int sg_mcp_session_id_ok(const char *v, size_t len);

/* The REST routes the tools run as (SG_GW_ROUTE_HANDLER's specs). */
extern const sg_gw_route_spec_t sg_gw_on_execute_once_spec, sg_gw_on_session_execute_spec,
    sg_gw_on_session_command_spec, sg_gw_on_session_create_spec, sg_gw_on_session_list_spec,
    sg_gw_on_session_delete_spec, sg_gw_on_session_files_spec, sg_gw_on_session_libraries_spec,
    sg_gw_on_pip_install_spec;

/* The tools list (tools/list's "tools"), a new reference. */
json_object *sg_mcp_tools_list(void);
/* tools/call: params {name, arguments}. Returns 0 when the call runs (its
 * reply goes out through sg_mcp_reply_result later; the call and g are then
 * the tool's), or -1 with *code and detail for a JSON-RPC error (unknown
 * tool, params of the wrong shape). */
int sg_mcp_tool_call(sg_gw_req_t *g, mcp_call_t *call, json_object *params, int *code, char *detail, size_t len);

/* ---- one call: its reply and its listing (mcp_call.c) ---- */

#define SG_MCP_SERVER_VERSION "1.0.0"

/* Sends msg (taken; NULL: 202 with no body) to g's client, JSON or one SSE
 * event; session: the MCP-Session-Id header's value (NULL or "": none). */
void sg_mcp_send_msg(sg_gw_req_t *g, int status, json_object *msg, int sse, const char *session);
/* A JSON-RPC error (id borrowed, NULL when unknown; data taken). */
void sg_mcp_send_error(sg_gw_req_t *g, int status, json_object *id, int code, const char *message, json_object *data);
/* Answers with a JSON-RPC error and lets the request go. */
void sg_mcp_fail(sg_gw_req_t *g, int status, json_object *id, int code, const char *message);
/* notifications/cancelled (note): the call of g's tenant's MCP session with
 * that request id, if it runs on this gateway, ends as if its client had
 * gone. */
void sg_mcp_cancel_running(sg_gw_req_t *g, mcp_call_t *note);
/* Sends the result of call (takes result) to g's client, JSON or SSE. */
void sg_mcp_reply_result(sg_gw_req_t *g, mcp_call_t *call, json_object *result);
void sg_mcp_call_free(void *call);
/* Lists call (running as g) until sg_mcp_running_remove, so that a
 * notifications/cancelled of its MCP session that reaches this gateway can
 * end it (sg_gw_req_abandon). */
void sg_mcp_running_add(sg_gw_req_t *g, mcp_call_t *call);
void sg_mcp_running_remove(mcp_call_t *call);

#endif
