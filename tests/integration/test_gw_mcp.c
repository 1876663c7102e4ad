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
    sggw_auth_t a;
    char *tok = sggw_new_tenant_auth(&a, data_dir(), "mcp-life");
    char *msid = initialize(tok);
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
    in_session(tok, msid, TOOLS_LIST, &r);
    SG_ASSERT_STATUS(&r, 200);
    json_object *o = SG_JSON(&r);
    SG_CHECK(json_object_array_length(SG_ARR(SG_OBJ(o, "result"), "tools")) == 10, o, "ten tools");
    json_object_put(o);
    sgtest_reply_free(&r);
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
    char *bmsid = initialize(tb), body[400];
    snprintf(body, sizeof(body),
             "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"execute_code\","
             "\"arguments\":{\"session_id\":\"%s\",\"code\":\"print(1)\"}}}",
             sid);
    in_session(tb, bmsid, body, &r);
    SG_ASSERT_STATUS(&r, 200);
    json_object *o = SG_JSON(&r), *res = SG_OBJ(o, "result");
    SG_CHECK(SG_BOOL(res, "isError") && strstr(json_object_to_json_string(res), "no_such_session"), o,
             "another tenant's session is unknown");
    json_object_put(o);
    sgtest_reply_free(&r);
    sggw_delete_session(stack.gw, ta, sid);
    free(sid);
    free(bmsid);
    free(msid);
    free(ta);
    free(tb);
}

SGGW_TEST(test_sse_or_json_by_accept)
{
    sggw_auth_t a;
    char *tok = sggw_new_tenant_auth(&a, data_dir(), "mcp-sse");
    char *msid = initialize(tok), h[100];
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

SGGW_TEST(test_stateless_revision_headers)
{
    sggw_auth_t a;
    char *tok = sggw_new_tenant_auth(&a, data_dir(), "mcp-2026");
    sgtest_reply_t r;
    char body[600];

    snprintf(body, sizeof(body), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{" META "}}",
             "2026-07-28");
    const char *ok[] = {"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: server/discover", NULL};
    mcp_post(tok, ok, body, &r);
    SG_ASSERT_STATUS(&r, 200);
    json_object *o = SG_JSON(&r), *res = SG_OBJ(o, "result");
    SG_CHECK(strcmp(SG_STR(res, "resultType"), "complete") == 0, o, "resultType");
    SG_CHECK(strstr(json_object_to_json_string(SG_ARR(res, "supportedVersions")), "2026-07-28") != NULL, o, "versions");
    char *h = sgtest_reply_header(&r, "mcp-session-id");
    SG_CHECK(h == NULL, o, "no MCP session in the stateless revision");
    json_object_put(o);
    sgtest_reply_free(&r);

    const char *wrong_method[] = {"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: tools/list", NULL};
    mcp_post(tok, wrong_method, body, &r);
    expect_rpc_error(&r, 400, -32020);
    const char *no_method[] = {"MCP-Protocol-Version: 2026-07-28", NULL};
    mcp_post(tok, no_method, body, &r);
    expect_rpc_error(&r, 400, -32020);

    snprintf(body, sizeof(body), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{" META "}}",
             "2027-01-01");
    const char *other_version[] = {"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: server/discover", NULL};
    mcp_post(tok, other_version, body, &r);
    expect_rpc_error(&r, 400, -32020);
    const char *unsupported[] = {"MCP-Protocol-Version: 2027-01-01", "Mcp-Method: server/discover", NULL};
    mcp_post(tok, unsupported, body, &r);
    expect_rpc_error(&r, 400, -32022);

    /* tools/call: Mcp-Name against params.name, plain or base64 */
    snprintf(body, sizeof(body),
             "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"list_sessions\","
             "\"arguments\":{}," META "}}",
             "2026-07-28");
    const char *wrong_name[] = {"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: tools/call", "Mcp-Name: close_session",
                                NULL};
    mcp_post(tok, wrong_name, body, &r);
    expect_rpc_error(&r, 400, -32020);
    const char *b64_name[] = {"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: tools/call",
                              "Mcp-Name: =?base64?bGlzdF9zZXNzaW9ucw==?=", NULL};
    mcp_post(tok, b64_name, body, &r);
    SG_ASSERT_STATUS(&r, 200);
    o = SG_JSON(&r);
    res = SG_OBJ(o, "result");
    SG_CHECK(!SG_BOOL(res, "isError"), o, "list_sessions ran");
    SG_CHECK(json_object_array_length(SG_ARR(SG_OBJ(res, "structuredContent"), "sessions")) == 0, o, "none yet");
    json_object_put(o);
    sgtest_reply_free(&r);

    /* missing required _meta: -32602 */
    const char *hdr[] = {"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: tools/list", NULL};
    mcp_post(tok, hdr, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\",\"params\":{}}", &r);
    expect_rpc_error(&r, 400, -32602);
    /* a method the revision removed, and an unknown one: 404 */
    snprintf(body, sizeof(body), "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\",\"params\":{" META "}}",
             "2026-07-28");
    const char *ping[] = {"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: ping", NULL};
    mcp_post(tok, ping, body, &r);
    expect_rpc_error(&r, 404, -32601);
    snprintf(body, sizeof(body), "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"nope/nope\",\"params\":{" META "}}",
             "2026-07-28");
    const char *nope[] = {"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: nope/nope", NULL};
    mcp_post(tok, nope, body, &r);
    expect_rpc_error(&r, 404, -32601);
    free(tok);
}

SGGW_TEST(test_bad_jsonrpc_and_origin)
{
    sggw_auth_t a;
    char *tok = sggw_new_tenant_auth(&a, data_dir(), "mcp-bad");
    char *msid = initialize(tok);
    sgtest_reply_t r;

    in_session(tok, msid, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":", &r);
    expect_rpc_error(&r, 400, -32700);
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

/* One execute_python through MCP: its result (object of "result"). */
static json_object *mcp_execute(const char *tok, const char *msid, const char *code)
{
    char body[400];
    sgtest_reply_t r;
    snprintf(body, sizeof(body),
             "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{\"name\":\"execute_python\","
             "\"arguments\":{\"code\":\"%s\"}}}",
             code);
    in_session(tok, msid, body, &r);
    SG_ASSERT_STATUS(&r, 200);
    json_object *o = SG_JSON(&r), *res = json_object_get(SG_OBJ(o, "result"));
    json_object_put(o);
    sgtest_reply_free(&r);
    return res;
}

SGGW_TEST(test_quota_through_mcp_is_the_ledger)
{
    const char *q[] = {"execs_per_day=2", NULL};
    char *tok = sggw_new_tenant(data_dir(), "mcp-quota", q);
    char *msid = initialize(tok);

    json_object *res = mcp_execute(tok, msid, "print(6*7)");
    SG_CHECK(!SG_BOOL(res, "isError"), res, "first run");
    SG_CHECK(strcmp(SG_STR(SG_OBJ(res, "structuredContent"), "stdout"), "42\\n") == 0 ||
                 strcmp(SG_STR(SG_OBJ(res, "structuredContent"), "stdout"), "42\n") == 0,
             res, "its output");
    json_object_put(res);
    res = mcp_execute(tok, msid, "import sys; sys.exit(3)");
    SG_CHECK(SG_BOOL(res, "isError") && SG_INT(SG_OBJ(res, "structuredContent"), "exit_code") == 3, res,
             "a failed program is an error result");
    json_object_put(res);
    res = mcp_execute(tok, msid, "print(1)");
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
    sggw_auth_t a;
    char *tok = sggw_new_tenant_auth(&a, data_dir(), "mcp-files");
    char *msid = initialize(tok), body[800];
    sgtest_reply_t r;

    in_session(tok, msid,
               "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
               "\"create_session\",\"arguments\":{}}}",
               &r);
    SG_ASSERT_STATUS(&r, 200);
    json_object *o = SG_JSON(&r);
    char *sid = strdup(SG_STR(SG_OBJ(SG_OBJ(o, "result"), "structuredContent"), "session_id"));
    json_object_put(o);
    sgtest_reply_free(&r);
    SG_CHECK(sggw_lists(stack.gw, tok, sid), NULL, "a REST-visible session");

    /* bytes that are not UTF-8 come back as base64, unchanged */
    snprintf(body, sizeof(body),
             "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"write_file\","
             "\"arguments\":{\"session_id\":\"%s\",\"path\":\"d/\\u00e9 x.bin\",\"content\":\"/wCAgf4=\","
             "\"encoding\":\"base64\"}}}",
             sid);
    in_session(tok, msid, body, &r);
    SG_ASSERT_STATUS(&r, 200);
    o = SG_JSON(&r);
    SG_CHECK(SG_INT(SG_OBJ(SG_OBJ(o, "result"), "structuredContent"), "size") == 5, o, "five bytes written");
    json_object_put(o);
    sgtest_reply_free(&r);
    snprintf(body, sizeof(body),
             "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"read_file\","
             "\"arguments\":{\"session_id\":\"%s\",\"path\":\"d/\\u00e9 x.bin\"}}}",
             sid);
    in_session(tok, msid, body, &r);
    SG_ASSERT_STATUS(&r, 200);
    o = SG_JSON(&r);
    json_object *sc = SG_OBJ(SG_OBJ(o, "result"), "structuredContent");
    SG_CHECK(strcmp(SG_STR(sc, "encoding"), "base64") == 0 && strcmp(SG_STR(sc, "content"), "/wCAgf4=") == 0, o,
             "the same bytes");
    json_object_put(o);
    sgtest_reply_free(&r);
    snprintf(body, sizeof(body),
             "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"run_command\","
             "\"arguments\":{\"session_id\":\"%s\",\"command\":\"wc -c < 'd/\\u00e9 x.bin'\"}}}",
             sid);
    in_session(tok, msid, body, &r);
    SG_ASSERT_STATUS(&r, 200);
    o = SG_JSON(&r);
    sc = SG_OBJ(SG_OBJ(o, "result"), "structuredContent");
    SG_CHECK(strcmp(SG_STR(sc, "stdout"), "5\n") == 0, o, "the shell sees it");
    json_object_put(o);
    sgtest_reply_free(&r);
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

SGGW_TEST(test_closing_the_stream_cancels)
{
    sggw_auth_t a;
    char *tok = sggw_new_tenant_auth(&a, data_dir(), "mcp-cancel");
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL), url[200], body[800], buf[16384];

    /* a run that holds the session: streamed, so that its start is seen */
    snprintf(url, sizeof(url), "%s/sessions/%s/execute", sggw_gateway_url(stack.gw), sid);
    const char *sse[] = {a.h[0], "Accept: text/event-stream", NULL};
    int first =
        sggw_http_open("POST", url, "{\"code\":\"print('started', flush=True)\\nimport time\\ntime.sleep(4)\"}", sse);
    SG_CHECK(first >= 0, NULL, "the first run was sent");
    size_t got = 0;
    SG_CHECK(read_until(first, buf, sizeof(buf), &got, "started", 30), NULL, "the first run started: %s", buf);

    /* an MCP call queued behind it, whose client then closes its connection */
    snprintf(url, sizeof(url), "%s/mcp", sggw_gateway_url(stack.gw));
    snprintf(body, sizeof(body),
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"execute_code\","
             "\"arguments\":{\"session_id\":\"%s\",\"code\":\"open('marker','w').write('ran')\"}," META "}}",
             sid, "2026-07-28");
    const char *hs[] = {a.h[0],
                        "Accept: application/json, text/event-stream",
                        "MCP-Protocol-Version: 2026-07-28",
                        "Mcp-Method: tools/call",
                        "Mcp-Name: execute_code",
                        NULL};
    int second = sggw_http_open("POST", url, body, hs);
    SG_CHECK(second >= 0, NULL, "the MCP call was sent");
    double deadline = sggw_wall() + 10;
    while (session_waiting(tok, sid) != 1) {
        SG_CHECK(sggw_wall() < deadline, NULL, "the MCP call never waited in the session's queue");
        usleep(20000);
    }
    close(second);

    SG_CHECK(read_until(first, buf, sizeof(buf), &got, "event: result", 30), NULL, "the first run ended: %s", buf);
    close(first);
    /* the cancelled call never ran, and is not billed */
    char path[160];
    snprintf(path, sizeof(path), "/sessions/%s/files?path=marker", sid);
    SGGW_CALL_ERROR(stack.gw, tok, "GET", path, NULL, 404, NULL);
    json_object *o = sggw_execute(stack.gw, tok, sid, "import os\nprint(os.path.exists('marker'))", 0);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "False\n") == 0, o, "no marker");
    json_object_put(o);
    sggw_expect_ledger_execs(data_dir(), "mcp-cancel", 2, 5);
    sggw_session_done(stack.gw, tok, sid);
}

/* A second gateway on the suite's Redis and SQLite file: MCP sessions
 * are the state's, so either gateway serves them; at most
 * SANDGATE_MCP_SESSIONS per tenant; one unused for SANDGATE_MCP_IDLE_S ends. */
SGGW_TEST(test_mcp_sessions_shared_bounded_expiring)
{
    const char *env[] = {"SANDGATE_MCP_SESSIONS=2", "SANDGATE_MCP_IDLE_S=2", NULL};
    sggw_opts_t opts = {.proxy_url = sgtest_proxy_url(stack.proxy),
                        .redis_url = sggw_redis_url(stack.redis),
                        .data_dir = data_dir(),
                        .env = env};
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
                        test_closing_the_stream_cancels, test_mcp_sessions_shared_bounded_expiring);
}
