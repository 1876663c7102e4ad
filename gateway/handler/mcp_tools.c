/*
 * mcp_tools.c — the MCP tools (mcp.h). Each tool is one REST route run as
 * an internal request (request.h, sg_gw_req_run_as): its arguments become
 * the body, path id and query the route takes from a client, and the
 * route's own flow — the token checked again, the session's owner, caps,
 * the tenant's execution slot, the day's quota, the proxy call, the usage
 * row — answers; that answer becomes the tool's result. No quota, owner or
 * ledger logic of its own lives here.
 *
 * A result: structuredContent (the route's reply, as the tool's
 * outputSchema says) with a JSON text copy; isError when the program
 * failed (its stderr carries the traceback) or the route refused (its
 * status, code and detail, as text only).
 */
#include "mcp.h"
#include "json.h"
#include "util.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- schemas --------------------------------------------------------------------------------- */

#define S_SESSION "\"session_id\":{\"type\":\"string\",\"description\":\"a session from create_session\"}"
#define S_TIMEOUT(d)                                                                                                   \
    "\"timeout\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"description\":\"seconds; " d                            \
    ", capped by the tenant's maximum\"}"

#define OUT_EXEC                                                                                                       \
    "{\"type\":\"object\",\"properties\":{\"stdout\":{\"type\":\"string\"},\"stderr\":{\"type\":\"string\"},"          \
    "\"exit_code\":{\"type\":[\"integer\",\"null\"]},\"execution_time\":{\"type\":\"number\"},"                        \
    "\"success\":{\"type\":\"boolean\"},\"timed_out\":{\"type\":\"boolean\"},\"truncated\":{\"type\":\"boolean\"}},"   \
    "\"required\":[\"stdout\",\"stderr\",\"exit_code\",\"success\"]}"
#define OUT_INSTALL                                                                                                    \
    "{\"type\":\"object\",\"properties\":{\"success\":{\"type\":\"boolean\"},\"message\":{\"type\":\"string\"},"       \
    "\"installed_version\":{\"type\":[\"string\",\"null\"]},\"installation_time\":{\"type\":\"number\"}},"             \
    "\"required\":[\"success\",\"message\"]}"

/* ---- arguments -------------------------------------------------------------------------------------- */

/* A string argument: *out (borrowed) or NULL when absent and optional; -1
 * with detail when of another type or absent and required. */
static int arg_str(json_object *args, const char *key, int required, const char **out, size_t *len, char *detail,
                   size_t dlen)
{
    json_object *v;
    *out = NULL;
    if (!json_object_object_get_ex(args, key, &v) || v == NULL) {
        if (!required)
            return 0;
        snprintf(detail, dlen, "argument \"%s\" is required", key);
        return -1;
    }
    if (!json_object_is_type(v, json_type_string)) {
        snprintf(detail, dlen, "argument \"%s\" must be a string", key);
        return -1;
    }
    *out = json_object_get_string(v);
    if (len != NULL)
        *len = (size_t)json_object_get_string_len(v);
    return 0;
}

/* Copies the optional arguments keys (NULL-terminated) into body as given:
 * the route checks their types and bounds as for a client. */
static void copy_args(json_object *body, json_object *args, const char *const *keys)
{
    json_object *v;
    for (; *keys != NULL; keys++)
        if (json_object_object_get_ex(args, *keys, &v) && v != NULL)
            json_object_object_add(body, *keys, json_object_get(v));
}

/* g made into a request of the route as a client would send it. */
static void prepare(sg_gw_req_t *g, const char *method, const char *sid, json_object *body)
{
    free(g->body);
    g->body = NULL;
    g->body_len = 0;
    json_object_put(g->json);
    g->json = NULL;
    g->query[0] = '\0';
    g->lang[0] = '\0';
    g->rid[0] = '\0';
    g->want_stream = 0;
    snprintf(g->method, sizeof(g->method), "%s", method);
    snprintf(g->sid, sizeof(g->sid), "%s", sid != NULL ? sid : "");
    snprintf(g->content_type, sizeof(g->content_type), "application/json");
    if (body != NULL) {
        size_t len;
        const char *s = json_object_to_json_string_length(body, JSON_C_TO_STRING_PLAIN, &len);
        g->body = sg_xstrndup(s, len);
        g->body_len = len;
        json_object_put(body);
    }
}

static int session_arg(json_object *args, const char **sid, char *detail, size_t dlen)
{
    size_t len;
    if (arg_str(args, "session_id", 1, sid, &len, detail, dlen) != 0)
        return -1;
    if (len != 36 || !sg_is_uuid(*sid, len)) {
        snprintf(detail, dlen, "no_such_session: no session with id \"%.64s\"", *sid);
        return -1;
    }
    return 0;
}

/* ?path=<every byte but unreserved ones percent-encoded>. */
static int path_query(sg_gw_req_t *g, json_object *args, char *detail, size_t dlen)
{
    const char *path;
    size_t len, n;
    if (arg_str(args, "path", 1, &path, &len, detail, dlen) != 0)
        return -1;
    if (len == 0 || len > 1024) {
        snprintf(detail, dlen, "argument \"path\" must be 1 to 1024 bytes");
        return -1;
    }
    n = (size_t)snprintf(g->query, sizeof(g->query), "?path=");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)path[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
            c == '-' || c == '~' || c == '/')
            g->query[n++] = (char)c;
        else
            n += (size_t)snprintf(g->query + n, sizeof(g->query) - n, "%%%02X", c);
    }
    g->query[n] = '\0';
    return 0;
}

/* ---- the tools' requests ------------------------------------------------------------------------ */

typedef struct mcp_tool mcp_tool_t;
struct mcp_tool {
    const char *name;
    const char *title;
    const char *description;
    const char *input_schema;
    const char *output_schema;
    const sg_gw_route_spec_t *spec;
    /* makes g the route's request; -1 with detail: the arguments are wrong
     * (a tool error the model can correct) */
    int (*build)(const mcp_tool_t *t, sg_gw_req_t *g, json_object *args, char *detail, size_t dlen);
    /* the route's 200 reply as structuredContent; *failed for a program
     * that failed */
    json_object *(*shape)(sg_gw_req_t *g, json_object *args, const char *body, size_t len, int *failed);
};

static double tool_timeout(sg_gw_req_t *g, json_object *args, double def)
{
    json_object *v;
    double t = def;
    if (json_object_object_get_ex(args, "timeout", &v) &&
        (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)))
        t = json_object_get_double(v);
    return t < g->tenant.max_timeout ? t : g->tenant.max_timeout;
}

static int build_execute_python(const mcp_tool_t *t, sg_gw_req_t *g, json_object *args, char *detail, size_t dlen)
{
    const char *code;
    json_object *v;
    if (arg_str(args, "code", 1, &code, NULL, detail, dlen) != 0)
        return -1;
    static const char *const keys[] = {"libraries", NULL};
    json_object *body = json_object_new_object();
    json_object_object_add(body, "lang", json_object_new_string("python"));
    json_object_object_add(body, "code", json_object_new_string(code));
    copy_args(body, args, keys);
    if (json_object_object_get_ex(args, "timeout", &v) && v != NULL &&
        !(json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)))
        json_object_object_add(body, "timeout", json_object_get(v)); /* the route says what is wrong */
    else
        json_object_object_add(body, "timeout", json_object_new_double(tool_timeout(g, args, 30)));
    prepare(g, "POST", NULL, body);
    return 0;
}

/* Seed 004's pip_install is the gateway's POST /pip_install: with
 * session_id into that session, without into the package store, from
 * where later runs naming it in libraries install it. The route checks
 * the name, the version and the blocklist. */
static int build_pip_install(const mcp_tool_t *t, sg_gw_req_t *g, json_object *args, char *detail, size_t dlen)
{
    const char *pkg, *sid = NULL;
    static const char *const keys[] = {"package", "version", NULL};
    if (arg_str(args, "package", 1, &pkg, NULL, detail, dlen) != 0)
        return -1;
    if (json_object_object_get_ex(args, "session_id", NULL) && session_arg(args, &sid, detail, dlen) != 0)
        return -1;
    json_object *body = json_object_new_object();
    copy_args(body, args, keys);
    prepare(g, "POST", sid, body);
    return 0;
}

static int build_create_session(const mcp_tool_t *t, sg_gw_req_t *g, json_object *args, char *detail, size_t dlen)
{
    static const char *const keys[] = {"lang", "timeout", "memory_mb", "cpus", "network", NULL};
    json_object *body = json_object_new_object();
    copy_args(body, args, keys);
    prepare(g, "POST", NULL, body);
    return 0;
}

static int build_in_session(const mcp_tool_t *t, sg_gw_req_t *g, json_object *args, char *detail, size_t dlen)
{
    static const char *const exec_keys[] = {"code", "timeout", "libraries", NULL};
    static const char *const cmd_keys[] = {"command", "timeout", NULL};
    static const char *const lib_keys[] = {"package", "version", NULL};
    const char *sid, *s;
    if (session_arg(args, &sid, detail, dlen) != 0)
        return -1;
    const char *need = t->spec == &sg_gw_on_session_command_spec     ? "command"
                       : t->spec == &sg_gw_on_session_libraries_spec ? "package"
                                                                     : "code";
    if (arg_str(args, need, 1, &s, NULL, detail, dlen) != 0)
        return -1;
    json_object *body = json_object_new_object();
    copy_args(body, args,
              t->spec == &sg_gw_on_session_command_spec     ? cmd_keys
              : t->spec == &sg_gw_on_session_libraries_spec ? lib_keys
                                                            : exec_keys);
    prepare(g, "POST", sid, body);
    return 0;
}

static int build_list(const mcp_tool_t *t, sg_gw_req_t *g, json_object *args, char *detail, size_t dlen)
{
    prepare(g, "GET", NULL, NULL);
    return 0;
}

static int build_close(const mcp_tool_t *t, sg_gw_req_t *g, json_object *args, char *detail, size_t dlen)
{
    const char *sid;
    if (session_arg(args, &sid, detail, dlen) != 0)
        return -1;
    prepare(g, "DELETE", sid, NULL);
    return 0;
}

static int build_write_file(const mcp_tool_t *t, sg_gw_req_t *g, json_object *args, char *detail, size_t dlen)
{
    const char *sid, *content, *enc;
    size_t len;
    if (session_arg(args, &sid, detail, dlen) != 0 || arg_str(args, "content", 1, &content, &len, detail, dlen) != 0 ||
        arg_str(args, "encoding", 0, &enc, NULL, detail, dlen) != 0)
        return -1;
    if (enc != NULL && strcmp(enc, "text") != 0 && strcmp(enc, "base64") != 0) {
        snprintf(detail, dlen, "argument \"encoding\" must be \"text\" or \"base64\"");
        return -1;
    }
    char *bytes = sg_xmalloc(len / 4 * 3 + len + 4);
    size_t n = len;
    if (enc != NULL && strcmp(enc, "base64") == 0) {
        int d = len % 4 == 0 ? EVP_DecodeBlock((unsigned char *)bytes, (const unsigned char *)content, (int)len) : -1;
        if (d < 0) {
            free(bytes);
            snprintf(detail, dlen, "argument \"content\" is not valid base64");
            return -1;
        }
        n = (size_t)d;
        for (size_t i = 0; i < 2 && len >= 1 + i && content[len - 1 - i] == '='; i++)
            n--;
    } else {
        memcpy(bytes, content, len);
    }
    prepare(g, "PUT", sid, NULL);
    if (path_query(g, args, detail, dlen) != 0) {
        free(bytes);
        return -1;
    }
    g->body = bytes;
    g->body_len = n;
    snprintf(g->content_type, sizeof(g->content_type), "application/octet-stream");
    return 0;
}

static int build_read_file(const mcp_tool_t *t, sg_gw_req_t *g, json_object *args, char *detail, size_t dlen)
{
    const char *sid, *enc;
    if (session_arg(args, &sid, detail, dlen) != 0 || arg_str(args, "encoding", 0, &enc, NULL, detail, dlen) != 0)
        return -1;
    if (enc != NULL && strcmp(enc, "auto") != 0 && strcmp(enc, "text") != 0 && strcmp(enc, "base64") != 0) {
        snprintf(detail, dlen, "argument \"encoding\" must be \"auto\", \"text\" or \"base64\"");
        return -1;
    }
    prepare(g, "GET", sid, NULL);
    return path_query(g, args, detail, dlen);
}

/* ---- the tools' results ----------------------------------------------------------------------------- */

static json_object *shape_object(sg_gw_req_t *g, json_object *args, const char *body, size_t len, int *failed)
{
    char err[128];
    return sg_json_parse_object(body, len, err, sizeof(err));
}

static json_object *shape_exec(sg_gw_req_t *g, json_object *args, const char *body, size_t len, int *failed)
{
    json_object *o = shape_object(g, args, body, len, failed), *v;
    *failed = o == NULL || !json_object_object_get_ex(o, "success", &v) || !json_object_get_boolean(v);
    return o;
}

static json_object *shape_install(sg_gw_req_t *g, json_object *args, const char *body, size_t len, int *failed)
{
    json_object *o = shape_object(g, args, body, len, failed), *v;
    *failed = o == NULL || !json_object_object_get_ex(o, "success", &v) || !json_object_get_boolean(v);
    return o;
}

static json_object *shape_close(sg_gw_req_t *g, json_object *args, const char *body, size_t len, int *failed)
{
    json_object *o = shape_object(g, args, body, len, failed);
    if (o != NULL)
        json_object_object_add(o, "session_id", json_object_new_string(g->sid));
    return o;
}

static json_object *shape_read_file(sg_gw_req_t *g, json_object *args, const char *body, size_t len, int *failed)
{
    const char *enc = "auto", *path = "";
    json_object *o = json_object_new_object(), *v;
    size_t clean_len;
    if (json_object_object_get_ex(args, "encoding", &v) && v != NULL)
        enc = json_object_get_string(v);
    if (json_object_object_get_ex(args, "path", &v))
        path = json_object_get_string(v);
    char *clean = sg_utf8_sanitize(body, len, &clean_len);
    int utf8 = clean_len == len && memcmp(clean, body, len) == 0 && memchr(body, '\0', len) == NULL;
    json_object_object_add(o, "path", json_object_new_string(path));
    json_object_object_add(o, "size", json_object_new_int64((int64_t)len));
    if (strcmp(enc, "base64") == 0 || (strcmp(enc, "auto") == 0 && !utf8)) {
        char *b64 = sg_xmalloc((len + 2) / 3 * 4 + 1);
        int n = EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)body, (int)len);
        json_object_object_add(o, "encoding", json_object_new_string("base64"));
        json_object_object_add(o, "content", json_object_new_string_len(b64, n));
        free(b64);
    } else {
        /* "text" asked of bytes that are not UTF-8: replacement characters */
        json_object_object_add(o, "encoding", json_object_new_string("text"));
        json_object_object_add(o, "content", json_object_new_string_len(clean, (int)clean_len));
    }
    free(clean);
    return o;
}

/* ---- the table ---------------------------------------------------------------------------------------- */

static const mcp_tool_t tools[] = {
    {"execute_python", "Run Python once",
     "Runs Python code once in a fresh sandbox (nothing is kept). Packages pip_install installed are importable when "
     "named in libraries. Returns stdout, stderr, exit_code, execution_time and success; a failed program is an error "
     "result whose stderr holds the traceback.",
     "{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\",\"description\":\"Python code to "
     "run\"}," S_TIMEOUT("default 30") ",\"libraries\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
                                       "\"description\":\"packages to install first (from the package store when "
                                       "pip_install fetched them)\"}},"
                                       "\"required\":[\"code\"]}",
     OUT_EXEC, &sg_gw_on_execute_once_spec, build_execute_python, shape_exec},
    {"pip_install", "Install a Python package",
     "Installs a Python package (validated, blocklisted names refused) into the package store, so that later runs "
     "naming it in libraries install it from there; with session_id, into that session.",
     "{\"type\":\"object\",\"properties\":{\"package\":{\"type\":\"string\"},\"version\":{\"type\":\"string\","
     "\"description\":\"a version, or latest (the default)\"}," S_SESSION "},\"required\":[\"package\"]}",
     OUT_INSTALL, &sg_gw_on_pip_install_spec, build_pip_install, shape_install},
    {"create_session", "Create a sandbox session",
     "Creates a sandbox whose interpreter state and files persist across execute_code calls until close_session "
     "(or its idle timeout). Returns session_id.",
     "{\"type\":\"object\",\"properties\":{\"lang\":{\"type\":\"string\",\"description\":\"python (default), "
     "javascript, cpp, go, java or ruby, as the tenant allows\"}," S_TIMEOUT(
         "the session's default per execution") ",\"memory_mb\":{\"type\":\"integer\",\"minimum\":1},"
                                                "\"cpus\":{\"type\":\"number\",\"exclusiveMinimum\":0},"
                                                "\"network\":{\"type\":\"boolean\"}}}",
     "{\"type\":\"object\",\"properties\":{\"session_id\":{\"type\":\"string\"},\"status\":{\"type\":\"string\"}},"
     "\"required\":[\"session_id\"]}",
     &sg_gw_on_session_create_spec, build_create_session, shape_object},
    {"execute_code", "Run code in a session",
     "Runs code in a session's interpreter; variables, imports and files persist between calls.",
     "{\"type\":\"object\",\"properties\":{" S_SESSION ",\"code\":{\"type\":\"string\"}," S_TIMEOUT(
         "default the session's") ",\"libraries\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
                                  "\"required\":[\"session_id\",\"code\"]}",
     OUT_EXEC, &sg_gw_on_session_execute_spec, build_in_session, shape_exec},
    {"run_command", "Run a shell command in a session", "Runs a shell command in a session's sandbox.",
     "{\"type\":\"object\",\"properties\":{" S_SESSION ",\"command\":{\"type\":\"string\"}," S_TIMEOUT(
         "default the session's") "},\"required\":[\"session_id\",\"command\"]}",
     OUT_EXEC, &sg_gw_on_session_command_spec, build_in_session, shape_exec},
    {"write_file", "Write a file into a session",
     "Writes a file under the session's working directory (/sandbox), as text or base64.",
     "{\"type\":\"object\",\"properties\":{" S_SESSION ",\"path\":{\"type\":\"string\"},\"content\":{\"type\":"
     "\"string\"},\"encoding\":{\"type\":\"string\",\"enum\":[\"text\",\"base64\"],\"default\":\"text\"}},"
     "\"required\":[\"session_id\",\"path\",\"content\"]}",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"size\":{\"type\":\"integer\"}},"
     "\"required\":[\"path\",\"size\"]}",
     &sg_gw_on_session_files_spec, build_write_file, shape_object},
    {"read_file", "Read a file from a session",
     "Reads a file of the session: as text when it is UTF-8 (encoding auto), else base64.",
     "{\"type\":\"object\",\"properties\":{" S_SESSION ",\"path\":{\"type\":\"string\"},\"encoding\":{\"type\":"
     "\"string\",\"enum\":[\"auto\",\"text\",\"base64\"],\"default\":\"auto\"}},\"required\":[\"session_id\","
     "\"path\"]}",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"size\":{\"type\":\"integer\"},"
     "\"encoding\":{\"type\":\"string\",\"enum\":[\"text\",\"base64\"]},\"content\":{\"type\":\"string\"}},"
     "\"required\":[\"path\",\"size\",\"encoding\",\"content\"]}",
     &sg_gw_on_session_files_spec, build_read_file, shape_read_file},
    {"install_library", "Install a library into a session",
     "Installs a package (pip for python, npm for javascript) into a session.",
     "{\"type\":\"object\",\"properties\":{" S_SESSION ",\"package\":{\"type\":\"string\"},\"version\":{\"type\":"
     "\"string\"}},\"required\":[\"session_id\",\"package\"]}",
     OUT_INSTALL, &sg_gw_on_session_libraries_spec, build_in_session, shape_install},
    {"list_sessions", "List sessions", "Lists the open sessions of this token's tenant.",
     "{\"type\":\"object\",\"properties\":{}}",
     "{\"type\":\"object\",\"properties\":{\"sessions\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
     "\"required\":[\"sessions\"]}",
     &sg_gw_on_session_list_spec, build_list, shape_object},
    {"close_session", "Close a session", "Closes a session and removes its sandbox.",
     "{\"type\":\"object\",\"properties\":{" S_SESSION "},\"required\":[\"session_id\"]}",
     "{\"type\":\"object\",\"properties\":{\"status\":{\"type\":\"string\"},\"session_id\":{\"type\":\"string\"}},"
     "\"required\":[\"status\"]}",
     &sg_gw_on_session_delete_spec, build_close, shape_close},
};
#define N_TOOLS (sizeof(tools) / sizeof(tools[0]))

json_object *sg_mcp_tools_list(void)
{
    json_object *a = json_object_new_array();
    for (size_t i = 0; i < N_TOOLS; i++) {
        json_object *t = json_object_new_object();
        json_object_object_add(t, "name", json_object_new_string(tools[i].name));
        json_object_object_add(t, "title", json_object_new_string(tools[i].title));
        json_object_object_add(t, "description", json_object_new_string(tools[i].description));
        json_object_object_add(t, "inputSchema", json_tokener_parse(tools[i].input_schema));
        json_object_object_add(t, "outputSchema", json_tokener_parse(tools[i].output_schema));
        json_object_array_add(a, t);
    }
    return a;
}

/* ---- a call ------------------------------------------------------------------------------------------ */

typedef struct {
    const mcp_tool_t *tool;
    json_object *args;
} running_t;

/* A result: content (text), structuredContent, isError. */
static json_object *tool_result(json_object *structured, const char *text, int is_error)
{
    json_object *r = json_object_new_object(), *content = json_object_new_array(), *block = json_object_new_object();
    json_object_object_add(block, "type", json_object_new_string("text"));
    if (text != NULL)
        json_object_object_add(block, "text", json_object_new_string(text));
    else
        json_object_object_add(block, "text",
                               json_object_new_string(json_object_to_json_string_ext(
                                   structured, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)));
    json_object_array_add(content, block);
    json_object_object_add(r, "content", content);
    if (structured != NULL)
        json_object_object_add(r, "structuredContent", structured);
    json_object_object_add(r, "isError", json_object_new_boolean(is_error));
    return r;
}

/* The route's one reply (its capture): the tool's result goes to the client. */
static void on_tool_reply(sg_gw_req_t *g, int status, const char *ctype, const char *body, size_t len)
{
    mcp_call_t *call = g->capture_data;
    running_t *run = (running_t *)(call + 1);
    json_object *result;
    int failed = 0;

    g->capture = NULL;
    if (status == 200) {
        json_object *s = run->tool->shape(g, run->args, body, len, &failed);
        result = s != NULL ? tool_result(s, NULL, failed)
                           : tool_result(NULL, "bad_upstream_reply: the sandbox service's reply was not understood", 1);
    } else {
        /* refused or failed before any program ran: the route's error, as text */
        char text[800], err[64];
        const char *code = "error", *detail = "";
        json_object *o = sg_json_parse_object(body, len, err, sizeof(err)), *v;
        if (o != NULL && json_object_object_get_ex(o, "code", &v) && json_object_is_type(v, json_type_string))
            code = json_object_get_string(v);
        if (o != NULL && json_object_object_get_ex(o, "detail", &v) && json_object_is_type(v, json_type_string))
            detail = json_object_get_string(v);
        snprintf(text, sizeof(text), "%s (HTTP %d): %.600s", code, status, detail);
        result = tool_result(NULL, text, 1);
        json_object_put(o);
    }
    sg_mcp_reply_result(g, call, result);
}

static void running_free(void *data)
{
    mcp_call_t *call = data;
    running_t *run = (running_t *)(call + 1);
    sg_mcp_running_remove(call);
    json_object_put(run->args);
    sg_mcp_call_free(call);
}

int sg_mcp_tool_call(sg_gw_req_t *g, mcp_call_t *call, json_object *params, int *code, char *detail, size_t len)
{
    json_object *v, *args = NULL;
    const mcp_tool_t *tool = NULL;
    char why[400];

    *code = MCP_INVALID_PARAMS;
    if (params == NULL || !json_object_object_get_ex(params, "name", &v) || !json_object_is_type(v, json_type_string)) {
        snprintf(detail, len, "tools/call needs params.name");
        return -1;
    }
    for (size_t i = 0; i < N_TOOLS; i++)
        if (strcmp(tools[i].name, json_object_get_string(v)) == 0)
            tool = &tools[i];
    if (tool == NULL) {
        snprintf(detail, len, "Unknown tool: %.100s", json_object_get_string(v));
        return -1;
    }
    if (json_object_object_get_ex(params, "arguments", &args) && args != NULL &&
        !json_object_is_type(args, json_type_object)) {
        snprintf(detail, len, "params.arguments must be an object");
        return -1;
    }
    /* the call grows a tail: what the reply needs of the tool */
    mcp_call_t *grown = sg_xrealloc(call, sizeof(*call) + sizeof(running_t));
    running_t *run = (running_t *)(grown + 1);
    run->tool = tool;
    run->args = args != NULL ? json_object_get(args) : json_object_new_object();
    g->capture_data = grown;
    g->capture_free = running_free;
    g->spec = tool->spec;
    if (tool->build(tool, g, run->args, why, sizeof(why)) != 0) {
        sg_mcp_reply_result(g, grown, tool_result(NULL, why, 1));
        sg_gw_req_free(g);
        return 0;
    }
    g->capture = on_tool_reply;
    if (!grown->modern && grown->session[0])
        sg_mcp_running_add(g, grown);
    sg_gw_req_run_as(g, g->spec);
    return 0;
}
