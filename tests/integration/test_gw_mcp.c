/*
 * test_gw_mcp.c — POST/DELETE /mcp at its edges (handler/mcp*.c): the
 * token and its challenge, the MCP session's life (issued by initialize,
 * required after, 404 once ended, another tenant's is 404), notifications
 * 202, JSON or SSE by Accept, the stateless revision's header checks, bad
 * JSON-RPC, Origin, and tool calls that go through the REST routes' own
 * limits: a quota hit through MCP is a quota of the REST API too, and the
 * usage ledger holds exactly the runs that happened.
 *
 * Real components: a sandgate-proxy on the Docker engine, a private
 * redis-server as the gateway's state (MCP sessions live there), a
 * sandgate-gateway and its SQLite file.
 */
#include "sggw.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static sggw_stack_t stack;

static const char *data_dir(void)
{
    return sggw_gateway_data_dir(stack.gw);
}

static int group_setup(void **state)
{
    *state = &stack;
    return sggw_stack_start_pool(&stack, true, 1);
}

/* POST /mcp with the token (NULL: none) and extra header lines (after the
 * defaults: JSON body, Accept of both kinds). */
static void mcp_post(const char *tok, const char *const *extra, const char *body, sgtest_reply_t *r)
{
    const char *h[12];
    char auth[200], url[200];
    size_t n = 0;
    if (tok != NULL) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
        h[n++] = auth;
    }
    int accept = 0;
    for (const char *const *e = extra; e != NULL && *e != NULL; e++)
        accept |= strncasecmp(*e, "Accept:", 7) == 0;
    if (!accept)
        h[n++] = "Accept: application/json, text/event-stream";
    for (; extra != NULL && *extra != NULL && n < 11; extra++)
        h[n++] = *extra;
    h[n] = NULL;
    snprintf(url, sizeof(url), "%s/mcp", sggw_gateway_url(stack.gw));
    memset(r, 0, sizeof(*r));
    sggw_http("POST", url, body, body != NULL ? strlen(body) : 0, "application/json", h, 120, r);
}

/* The JSON-RPC error of r: its status, then its code. */
static void expect_rpc_error(sgtest_reply_t *r, long status, int code)
{
    SG_ASSERT_STATUS(r, status);
    json_object *o = SG_JSON(r), *e = SG_OBJ(o, "error");
    SG_CHECK(SG_INT(e, "code") == code, o, "expected JSON-RPC error %d", code);
    json_object_put(o);
    sgtest_reply_free(r);
}

#define INIT_BODY                                                                                                      \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\","          \
    "\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}"

/* initialize as tok: the MCP session id (malloc'd). */
static char *initialize(const char *tok)
{
    sgtest_reply_t r;
    mcp_post(tok, NULL, INIT_BODY, &r);
    SG_ASSERT_STATUS(&r, 200);
    json_object *o = SG_JSON(&r), *res = SG_OBJ(o, "result");
    SG_CHECK(strcmp(SG_STR(res, "protocolVersion"), "2025-11-25") == 0, o, "version agreed");
    SG_CHECK(strcmp(SG_STR(SG_OBJ(res, "serverInfo"), "name"), "sandgate") == 0, o, "server info");
    char *sid = sgtest_reply_header(&r, "mcp-session-id");
    SG_CHECK(sid != NULL && strlen(sid) == 32, o, "an MCP-Session-Id");
    json_object_put(o);
    sgtest_reply_free(&r);
    return sid;
}

/* A new tenant `name` with an MCP session: its token; *msid the session. */
static char *mcp_tenant(const char *name, char **msid)
{
    sggw_auth_t a;
    char *tok = sggw_new_tenant_auth(&a, data_dir(), name);
    *msid = initialize(tok);
    return tok;
}

/* A request in MCP session msid (NULL: none): body as given. */
static void in_session(const char *tok, const char *msid, const char *body, sgtest_reply_t *r)
{
    char h[100];
    snprintf(h, sizeof(h), "Mcp-Session-Id: %s", msid != NULL ? msid : "");
    const char *extra[] = {msid != NULL ? h : NULL, msid != NULL ? "MCP-Protocol-Version: 2025-11-25" : NULL, NULL};
    mcp_post(tok, extra, body, r);
}

static void mcp_delete(const char *tok, const char *msid, sgtest_reply_t *r)
{
    char auth[200], h[100], url[200];
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
    snprintf(h, sizeof(h), "Mcp-Session-Id: %s", msid);
    const char *hs[] = {auth, h, NULL};
    snprintf(url, sizeof(url), "%s/mcp", sggw_gateway_url(stack.gw));
    memset(r, 0, sizeof(*r));
    sggw_http("DELETE", url, NULL, 0, NULL, hs, 30, r);
}

/* A request in MCP session msid answered 200 with a result: the result. */
static json_object *rpc_result(const char *tok, const char *msid, const char *body)
{
    sgtest_reply_t r;
    in_session(tok, msid, body, &r);
    SG_ASSERT_STATUS(&r, 200);
    json_object *o = SG_JSON(&r), *res = json_object_get(SG_OBJ(o, "result"));
    json_object_put(o);
    sgtest_reply_free(&r);
    return res;
}

/* tools/call of tool with args (a JSON object's text): its result. */
static json_object *call_tool(const char *tok, const char *msid, const char *tool, const char *args)
{
    char body[1200];
    snprintf(body, sizeof(body),
             "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\",\"arguments\":%s}}",
             tool, args);
    return rpc_result(tok, msid, body);
}

#define TOOLS_LIST "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}"

/* ------------------------------------------------------------------------ */

SGGW_TEST(test_auth_and_challenge)
{
    sgtest_reply_t r;
    mcp_post(NULL, NULL, INIT_BODY, &r);
    json_object_put(SG_EXPECT_ERROR(&r, 401, "unauthorized"));
    char *www = sgtest_reply_header(&r, "www-authenticate");
    SG_CHECK(www != NULL && strstr(www, "Bearer") && strstr(www, "resource_metadata=\"http://") &&
                 strstr(www, "/.well-known/oauth-protected-resource\""),
             NULL, "challenge: %s", www ? www : "(none)");
    free(www);
    sgtest_reply_free(&r);

    char *fake = sggw_fake_token(NULL);
    mcp_post(fake, NULL, INIT_BODY, &r);
    json_object_put(SG_EXPECT_ERROR(&r, 401, "unauthorized"));
    www = sgtest_reply_header(&r, "www-authenticate");
    SG_CHECK(www != NULL && strstr(www, "error=\"invalid_token\"") && strstr(www, "resource_metadata="), NULL,
             "challenge: %s", www ? www : "(none)");
    free(www);
    free(fake);
    sgtest_reply_free(&r);

    json_object *o = SGGW_CALL_JSON(stack.gw, NULL, "GET", "/.well-known/oauth-protected-resource", NULL, 200);
    SG_CHECK(strstr(SG_STR(o, "resource"), "/mcp") != NULL, o, "resource names /mcp");
    json_object_put(o);
}

SGGW_TEST(test_session_lifecycle)
{
    char *msid, *tok = mcp_tenant("mcp-life", &msid);
    sgtest_reply_t r;

    /* required after initialize */
    in_session(tok, NULL, TOOLS_LIST, &r);
    expect_rpc_error(&r, 400, -32600);
    /* a notification: 202, no body */
    in_session(tok, msid, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &r);
    SG_ASSERT_STATUS(&r, 202);
    SG_CHECK(r.body_len == 0, NULL, "202 has no body");
    sgtest_reply_free(&r);
    /* used */
    json_object *o = rpc_result(tok, msid, TOOLS_LIST);
    SG_CHECK(json_object_array_length(SG_ARR(o, "tools")) == 10, o, "ten tools");
    json_object_put(o);
    /* a version the session does not speak */
    char h[100];
    snprintf(h, sizeof(h), "Mcp-Session-Id: %s", msid);
    const char *old[] = {h, "MCP-Protocol-Version: 1999-01-01", NULL};
    mcp_post(tok, old, TOOLS_LIST, &r);
    expect_rpc_error(&r, 400, -32600);
    /* ended: 404, and 404 again */
    mcp_delete(tok, msid, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    in_session(tok, msid, TOOLS_LIST, &r);
    expect_rpc_error(&r, 404, -32600);
    mcp_delete(tok, msid, &r);
    SG_ASSERT_STATUS(&r, 404);
    sgtest_reply_free(&r);
    /* an id no gateway issued */
    in_session(tok, "0123456789abcdef0123456789abcdef", TOOLS_LIST, &r);
    expect_rpc_error(&r, 404, -32600);
    free(msid);
    free(tok);
}

SGGW_TEST(test_cross_tenant_session_id)
{
    sggw_auth_t a, b;
    char *ta = sggw_new_tenant_auth(&a, data_dir(), "mcp-a");
    char *tb = sggw_new_tenant_auth(&b, data_dir(), "mcp-b");
    char *msid = initialize(ta);
    sgtest_reply_t r;

    in_session(tb, msid, TOOLS_LIST, &r);
    expect_rpc_error(&r, 404, -32600);
    mcp_delete(tb, msid, &r);
    SG_ASSERT_STATUS(&r, 404);
    sgtest_reply_free(&r);
    /* still the owner's */
    in_session(ta, msid, TOOLS_LIST, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    /* a sandgate session of A is not B's through MCP either */
    char *sid = sggw_create_session(stack.gw, ta, NULL, NULL);
    char *bmsid = initialize(tb), args[200];
    snprintf(args, sizeof(args), "{\"session_id\":\"%s\",\"code\":\"print(1)\"}", sid);
    json_object *res = call_tool(tb, bmsid, "execute_code", args);
    SG_CHECK(SG_BOOL(res, "isError") && strstr(json_object_to_json_string(res), "no_such_session"), res,
             "another tenant's session is unknown");
    json_object_put(res);
    sggw_delete_session(stack.gw, ta, sid);
    free(sid);
    free(bmsid);
    free(msid);
    free(ta);
    free(tb);
}

SGGW_TEST(test_sse_or_json_by_accept)
{
    char *msid, *tok = mcp_tenant("mcp-sse", &msid), h[100];
    sgtest_reply_t r;
    snprintf(h, sizeof(h), "Mcp-Session-Id: %s", msid);

    const char *sse[] = {h, "Accept: text/event-stream, application/json", NULL};
    mcp_post(tok, sse, "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"ping\"}", &r);
    SG_ASSERT_STATUS(&r, 200);
    char *ct = sgtest_reply_header(&r, "content-type");
    SG_CHECK(ct != NULL && strncmp(ct, "text/event-stream", 17) == 0, NULL, "content-type %s", ct ? ct : "");
    SG_CHECK(strcmp(r.body, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"result\":{}}\n\n") == 0, NULL,
             "one event: %s", r.body);
    free(ct);
    sgtest_reply_free(&r);

    const char *json[] = {h, NULL};
    mcp_post(tok, json, "{\"jsonrpc\":\"2.0\",\"id\":\"j1\",\"method\":\"ping\"}", &r);
    SG_ASSERT_STATUS(&r, 200);
    ct = sgtest_reply_header(&r, "content-type");
    SG_CHECK(ct != NULL && strncmp(ct, "application/json", 16) == 0, NULL, "content-type %s", ct ? ct : "");
    free(ct);
    sgtest_reply_free(&r);

    const char *neither[] = {h, "Accept: text/html", NULL};
    mcp_post(tok, neither, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", &r);
    SG_ASSERT_STATUS(&r, 406);
    sgtest_reply_free(&r);
    free(msid);
    free(tok);
}

#define META                                                                                                           \
    "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"%s\",\"io.modelcontextprotocol/clientCapabilities\":{}}"

/* A 2026-07-28 request: method, more params (`"name":"x",` or ""), the
 * version in _meta (NULL: no _meta) and the header values (NULL: absent).
 * Expects status with JSON-RPC error code, or (code 0) 200 and a result,
 * which is returned (else NULL). */
static json_object *modern(const char *tok, const char *method, const char *params, const char *meta_version,
                           const char *hv, const char *hm, const char *hn, long status, int code)
{
    char body[800], h[3][120], meta[300] = "";
    const char *hs[4];
    size_t n = 0;
    sgtest_reply_t r;
    if (meta_version != NULL)
        snprintf(meta, sizeof(meta), META, meta_version);
    snprintf(body, sizeof(body), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\",\"params\":{%s%s}}", method, params,
             meta);
    if (hv != NULL)
        snprintf(h[n], sizeof(h[n]), "MCP-Protocol-Version: %s", hv), hs[n] = h[n], n++;
    if (hm != NULL)
        snprintf(h[n], sizeof(h[n]), "Mcp-Method: %s", hm), hs[n] = h[n], n++;
    if (hn != NULL)
        snprintf(h[n], sizeof(h[n]), "Mcp-Name: %s", hn), hs[n] = h[n], n++;
    hs[n] = NULL;
    mcp_post(tok, hs, body, &r);
    if (code != 0) {
        expect_rpc_error(&r, status, code);
        return NULL;
    }
    SG_ASSERT_STATUS(&r, 200);
    char *sid = sgtest_reply_header(&r, "mcp-session-id");
    SG_CHECK(sid == NULL, NULL, "no MCP session in the stateless revision");
    json_object *o = SG_JSON(&r), *res = json_object_get(SG_OBJ(o, "result"));
    SG_CHECK(strcmp(SG_STR(res, "resultType"), "complete") == 0, o, "resultType");
    json_object_put(o);
    sgtest_reply_free(&r);
    return res;
}

#define V26 "2026-07-28"

SGGW_TEST(test_stateless_revision_headers)
{
    sggw_auth_t a;
    char *tok = sggw_new_tenant_auth(&a, data_dir(), "mcp-2026");

    json_object *res = modern(tok, "server/discover", "", V26, V26, "server/discover", NULL, 200, 0);
    SG_CHECK(strstr(json_object_to_json_string(SG_ARR(res, "supportedVersions")), V26) != NULL, res, "versions");
    SG_CHECK(SG_INT(res, "ttlMs") >= 0 && strcmp(SG_STR(res, "cacheScope"), "public") == 0, res, "caching hints");
    json_object_put(res);
    /* headers against the body: -32020 */
    modern(tok, "server/discover", "", V26, V26, "tools/list", NULL, 400, -32020);
    modern(tok, "server/discover", "", V26, V26, NULL, NULL, 400, -32020);
    modern(tok, "server/discover", "", "2027-01-01", V26, "server/discover", NULL, 400, -32020);
    modern(tok, "server/discover", "", V26, NULL, "server/discover", NULL, 400, -32020);
    /* a version the server does not speak: -32022 */
    modern(tok, "server/discover", "", "2027-01-01", "2027-01-01", "server/discover", NULL, 400, -32022);
    /* tools/call: Mcp-Name against params.name, plain or base64 */
    const char *ls = "\"name\":\"list_sessions\",\"arguments\":{},";
    modern(tok, "tools/call", ls, V26, V26, "tools/call", "close_session", 400, -32020);
    modern(tok, "tools/call", ls, V26, V26, "tools/call", NULL, 400, -32020);
    res = modern(tok, "tools/call", ls, V26, V26, "tools/call", "=?base64?bGlzdF9zZXNzaW9ucw==?=", 200, 0);
    SG_CHECK(!SG_BOOL(res, "isError"), res, "list_sessions ran");
    SG_CHECK(json_object_array_length(SG_ARR(SG_OBJ(res, "structuredContent"), "sessions")) == 0, res, "none yet");
    json_object_put(res);
    /* the required _meta missing: -32602 */
    modern(tok, "tools/list", "", NULL, V26, "tools/list", NULL, 400, -32602);
    /* a method the revision removed, and an unknown one: 404 */
    modern(tok, "ping", "", V26, V26, "ping", NULL, 404, -32601);
    modern(tok, "initialize", "", V26, V26, "initialize", NULL, 404, -32601);
    modern(tok, "nope/nope", "", V26, V26, "nope/nope", NULL, 404, -32601);
    free(tok);
}

SGGW_TEST(test_bad_jsonrpc_and_origin)
{
    char *msid, *tok = mcp_tenant("mcp-bad", &msid);
    sgtest_reply_t r;

    in_session(tok, msid, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":", &r);
    expect_rpc_error(&r, 400, -32700);
    in_session(tok, msid, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"} {}", &r);
    expect_rpc_error(&r, 400, -32700);
    json_object_put(rpc_result(tok, msid, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r\n"));
    in_session(tok, msid, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", &r);
    expect_rpc_error(&r, 400, -32600);
    in_session(tok, msid, "{\"id\":1,\"method\":\"ping\"}", &r);
    expect_rpc_error(&r, 400, -32600);
    in_session(tok, msid, "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", &r);
    expect_rpc_error(&r, 400, -32600);
    in_session(tok, msid, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/list\"}", &r);
    expect_rpc_error(&r, 200, -32601);
    in_session(tok, msid, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"nope\"}}",
               &r);
    expect_rpc_error(&r, 200, -32602);
    in_session(tok, msid, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":[]}", &r);
    expect_rpc_error(&r, 200, -32602);

    /* a huge body is refused at the door, as by the REST API */
    size_t big = (4u << 20) + 100;
    char *huge = malloc(big + 1);
    memset(huge, ' ', big);
    huge[big] = '\0';
    in_session(tok, msid, huge, &r);
    SG_ASSERT_STATUS(&r, 413);
    sgtest_reply_free(&r);
    free(huge);

    /* a page of another origin */
    const char *evil[] = {"Origin: http://evil.example", NULL};
    mcp_post(tok, evil, INIT_BODY, &r);
    expect_rpc_error(&r, 403, -32600);
    char own[200];
    snprintf(own, sizeof(own), "Origin: %s", sggw_gateway_url(stack.gw));
    const char *same[] = {own, NULL};
    mcp_post(tok, same, INIT_BODY, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    free(msid);
    free(tok);
}

SGGW_TEST(test_quota_through_mcp_is_the_ledger)
{
    const char *q[] = {"execs_per_day=2", NULL};
    char *tok = sggw_new_tenant(data_dir(), "mcp-quota", q);
    char *msid = initialize(tok);

    json_object *res = call_tool(tok, msid, "execute_python", "{\"code\":\"print(6*7)\"}");
    SG_CHECK(!SG_BOOL(res, "isError"), res, "first run");
    SG_CHECK(strcmp(SG_STR(SG_OBJ(res, "structuredContent"), "stdout"), "42\n") == 0, res, "its output");
    json_object_put(res);
    res = call_tool(tok, msid, "execute_python", "{\"code\":\"import sys; sys.exit(3)\"}");
    SG_CHECK(SG_BOOL(res, "isError") && SG_INT(SG_OBJ(res, "structuredContent"), "exit_code") == 3, res,
             "a failed program is an error result");
    json_object_put(res);
    res = call_tool(tok, msid, "execute_python", "{\"code\":\"print(1)\"}");
    SG_CHECK(SG_BOOL(res, "isError") && strstr(json_object_to_json_string(res), "quota_exceeded") &&
                 json_object_object_get_ex(res, "structuredContent", NULL) == 0,
             res, "the day's quota, through MCP");
    json_object_put(res);
    /* the same counters as the REST API's */
    SGGW_CALL_ERROR(stack.gw, tok, "POST", "/execute", "{\"code\":\"print(1)\"}", 429, "quota_exceeded");
    sggw_expect_ledger_execs(data_dir(), "mcp-quota", 2, 5);
    free(msid);
    free(tok);
}

SGGW_TEST(test_session_tools_and_files)
{
    char *msid, *tok = mcp_tenant("mcp-files", &msid), args[400];
    sgtest_reply_t r;

    json_object *res = call_tool(tok, msid, "create_session", "{}");
    char *sid = strdup(SG_STR(SG_OBJ(res, "structuredContent"), "session_id"));
    json_object_put(res);
    SG_CHECK(sggw_lists(stack.gw, tok, sid), NULL, "a REST-visible session");

    /* bytes that are not UTF-8 come back as base64, unchanged */
    snprintf(args, sizeof(args),
             "{\"session_id\":\"%s\",\"path\":\"d/\\u00e9 x.bin\",\"content\":\"/wCAgf4=\",\"encoding\":\"base64\"}",
             sid);
    res = call_tool(tok, msid, "write_file", args);
    SG_CHECK(SG_INT(SG_OBJ(res, "structuredContent"), "size") == 5, res, "five bytes written");
    json_object_put(res);
    snprintf(args, sizeof(args), "{\"session_id\":\"%s\",\"path\":\"d/\\u00e9 x.bin\"}", sid);
    res = call_tool(tok, msid, "read_file", args);
    json_object *sc = SG_OBJ(res, "structuredContent");
    SG_CHECK(strcmp(SG_STR(sc, "encoding"), "base64") == 0 && strcmp(SG_STR(sc, "content"), "/wCAgf4=") == 0, res,
             "the same bytes");
    json_object_put(res);
    snprintf(args, sizeof(args), "{\"session_id\":\"%s\",\"command\":\"wc -c < 'd/\\u00e9 x.bin'\"}", sid);
    res = call_tool(tok, msid, "run_command", args);
    SG_CHECK(strcmp(SG_STR(SG_OBJ(res, "structuredContent"), "stdout"), "5\n") == 0, res, "the shell sees it");
    json_object_put(res);
    /* the sandgate session outlives the MCP session */
    mcp_delete(tok, msid, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    SG_CHECK(sggw_lists(stack.gw, tok, sid), NULL, "still open after the MCP session ended");
    sggw_session_done(stack.gw, tok, sid);
    free(msid);
}

/* Reads fd into buf (from *got on, NUL-terminated) until needle is in it;
 * false at EOF or after timeout_s. */
static bool read_until(int fd, char *buf, size_t size, size_t *got, const char *needle, double timeout_s)
{
    double deadline = sggw_wall() + timeout_s;
    struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    buf[*got] = '\0';
    while (strstr(buf, needle) == NULL) {
        if (*got >= size - 1 || sggw_wall() > deadline)
            return false;
        ssize_t n = read(fd, buf + *got, size - 1 - *got);
        if (n == 0)
            return false;
        if (n > 0) {
            *got += (size_t)n;
            buf[*got] = '\0';
        }
    }
    return true;
}

/* The session's count of requests waiting behind its running one. */
static long session_waiting(const char *tok, const char *sid)
{
    char path[80];
    snprintf(path, sizeof(path), "/sessions/%s", sid);
    json_object *o = SGGW_CALL_JSON(stack.gw, tok, "GET", path, NULL, 200);
    long n = (long)SG_INT(o, "waiting");
    json_object_put(o);
    return n;
}

/* An MCP tools/call waits in a session's queue behind a run that holds the
 * session, and is cancelled: with legacy, in an MCP session (2025-11-25)
 * by notifications/cancelled, its connection kept open (its reply then
 * says it was cancelled); else (2026-07-28) by closing its connection. Either way it never
 * runs and is not billed. */
static void queued_call_cancelled(const char *tenant, bool legacy)
{
    sggw_auth_t a;
    char *tok = sggw_new_tenant_auth(&a, data_dir(), tenant), *msid = legacy ? initialize(tok) : NULL;
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL), url[200], body[800], buf[16384], reply[4096], hsid[80];
    size_t got = 0, rgot = 0;

    /* a run that holds the session: streamed, so that its start is seen */
    snprintf(url, sizeof(url), "%s/sessions/%s/execute", sggw_gateway_url(stack.gw), sid);
    const char *sse[] = {a.h[0], "Accept: text/event-stream", NULL};
    int first =
        sggw_http_open("POST", url, "{\"code\":\"print('started', flush=True)\\nimport time\\ntime.sleep(4)\"}", sse);
    SG_CHECK(first >= 0, NULL, "the first run was sent");
    SG_CHECK(read_until(first, buf, sizeof(buf), &got, "started", 30), NULL, "the first run started: %s", buf);

    /* the MCP call queued behind it */
    snprintf(url, sizeof(url), "%s/mcp", sggw_gateway_url(stack.gw));
    snprintf(body, sizeof(body),
             "{\"jsonrpc\":\"2.0\",\"id\":\"c-1\",\"method\":\"tools/call\",\"params\":{\"name\":\"execute_code\","
             "\"arguments\":{\"session_id\":\"%s\",\"code\":\"open('marker','w').write('ran')\"}%s}}",
             sid,
             legacy ? ""
                    : ",\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
                      "\"io.modelcontextprotocol/clientCapabilities\":{}}");
    snprintf(hsid, sizeof(hsid), "Mcp-Session-Id: %s", msid != NULL ? msid : "");
    const char *modern_h[] = {a.h[0],
                              "Accept: application/json",
                              "MCP-Protocol-Version: 2026-07-28",
                              "Mcp-Method: tools/call",
                              "Mcp-Name: execute_code",
                              NULL};
    const char *legacy_h[] = {a.h[0], "Accept: application/json", "MCP-Protocol-Version: 2025-11-25", hsid, NULL};
    int second = sggw_http_open("POST", url, body, legacy ? legacy_h : modern_h);
    SG_CHECK(second >= 0, NULL, "the MCP call was sent");
    double deadline = sggw_wall() + 10;
    while (session_waiting(tok, sid) != 1) {
        SG_CHECK(sggw_wall() < deadline, NULL, "the MCP call never waited in the session's queue");
        usleep(20000);
    }
    if (legacy) {
        sgtest_reply_t r;
        in_session(tok, msid,
                   "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"c-1\","
                   "\"reason\":\"the user changed their mind\"}}",
                   &r);
        SG_ASSERT_STATUS(&r, 202);
        sgtest_reply_free(&r);
        /* its reply: the gateway's cancel, or the proxy's answer to the
         * dropped run when that came first */
        SG_CHECK(read_until(second, reply, sizeof(reply), &rgot, "\"isError\":true", 10) &&
                     (strstr(reply, "client_closed") != NULL || strstr(reply, "request_cancelled") != NULL),
                 NULL, "the cancelled call's reply: %s", reply);
    }
    close(second);

    SG_CHECK(read_until(first, buf, sizeof(buf), &got, "event: result", 30), NULL, "the first run ended: %s", buf);
    close(first);
    char path[160];
    snprintf(path, sizeof(path), "/sessions/%s/files?path=marker", sid);
    SGGW_CALL_ERROR(stack.gw, tok, "GET", path, NULL, 404, NULL);
    json_object *o = sggw_execute(stack.gw, tok, sid, "import os\nprint(os.path.exists('marker'))", 0);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "False\n") == 0, o, "no marker");
    json_object_put(o);
    sggw_expect_ledger_execs(data_dir(), tenant, 2, 5);
    sggw_session_done(stack.gw, tok, sid);
    free(msid);
}

SGGW_TEST(test_closing_the_stream_cancels)
{
    queued_call_cancelled("mcp-cancel-close", false);
}

SGGW_TEST(test_cancelled_notification_cancels)
{
    queued_call_cancelled("mcp-cancel-note", true);
}

/* A second gateway on the suite's Redis and SQLite file: MCP sessions
 * are the state's, so either gateway serves them; at most
 * SANDGATE_MCP_SESSIONS per tenant; one unused for SANDGATE_MCP_IDLE_S ends. */
SGGW_TEST(test_mcp_sessions_shared_bounded_expiring)
{
    const char *env[] = {"SANDGATE_MCP_SESSIONS=2", "SANDGATE_MCP_IDLE_S=2", NULL};
    sggw_opts_t opts = {
        .proxy_url = stack.proxy_url, .redis_url = sggw_redis_url(stack.redis), .data_dir = data_dir(), .env = env};
    sggw_gateway_t *g1 = stack.gw, *g2 = stack.extra_gw = sggw_gateway_start(&opts);
    SG_CHECK(g2 != NULL, NULL, "cannot start a second gateway");
    sggw_auth_t a;
    char *tok = sggw_new_tenant_auth(&a, data_dir(), "mcp-shared");
    int64_t tid = sggw_tenant_id(data_dir(), "mcp-shared");
    sgtest_reply_t r;

    stack.gw = g2;
    char *m1 = initialize(tok), *m2 = initialize(tok);
    mcp_post(tok, NULL, INIT_BODY, &r);
    SG_ASSERT_STATUS(&r, 429);
    sggw_int_header(&r, "Retry-After", 1);
    sgtest_reply_free(&r);
    /* the other gateway knows them: m1 used there (renewed with its idle
     * time), m2 ended there */
    stack.gw = g1;
    in_session(tok, m1, TOOLS_LIST, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    mcp_delete(tok, m2, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    stack.gw = g2;
    char *m3 = initialize(tok);
    /* m3, unused, ends after g2's 2 s: wait past its deadline as Redis has it */
    char *score = sggw_redis_cmd(stack.redis, NULL, "ZSCORE sg:tenant:%lld:mcp %s", (long long)tid, m3);
    SG_CHECK(score != NULL, NULL, "m3 is in the tenant's set");
    double until = atof(score);
    free(score);
    while (sggw_wall() < until + 1.1)
        usleep(100000);
    in_session(tok, m3, TOOLS_LIST, &r);
    expect_rpc_error(&r, 404, -32600);
    char *m4 = initialize(tok); /* m1 and m4: within the cap again */
    stack.gw = g1;
    in_session(tok, m1, TOOLS_LIST, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    free(m1);
    free(m2);
    free(m3);
    free(m4);
    free(tok);
}

int main(void)
{
    return SG_RUN_TESTS("gw_mcp", group_setup, sggw_stack_group_teardown, NULL, sggw_stack_teardown,
                        test_auth_and_challenge, test_session_lifecycle, test_cross_tenant_session_id,
                        test_sse_or_json_by_accept, test_stateless_revision_headers, test_bad_jsonrpc_and_origin,
                        test_quota_through_mcp_is_the_ledger, test_session_tools_and_files,
                        test_closing_the_stream_cancels, test_cancelled_notification_cancels,
                        test_mcp_sessions_shared_bounded_expiring);
}
