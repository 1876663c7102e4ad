/*
 * test_gw_mcp_pip.c — seed 004's tools through /mcp against a package
 * index of the test's own: pip_install without a session fetches into the
 * package store (one installer) and reports the version; execute_python
 * naming the package then imports it from the store (no installer again);
 * pip_install with a version and no session fetches that version into the
 * store as its own entry; with a session_id and a version it installs that
 * version into the session; a blocked name and a name that is not one are
 * error results the model can act on. The tool is the gateway's
 * POST /pip_install.
 *
 * Real components: a sandgate-proxy with a store volume of its own whose
 * installers reach the index (tests/support/sglibs.h), a sandgate-gateway
 * (memory state) and its SQLite file, the Docker engine.
 */
#include "sggw.h"
#include "sglibs.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INSTALL_TIMEOUT_S 30

static char tmpdir[4096], wwwroot[4200], py_name[64], py_norm[64], py_whl[2][256], store_volume[128];
static char *proxy_id, *token;
static sglibs_server_t *index_srv;
static sgtest_proxy_t *proxy;
static sggw_gateway_t *gw;

static int group_setup(void **state)
{
    char hex[33];
    if (sglibs_suite_dir(tmpdir, sizeof(tmpdir), wwwroot, sizeof(wwwroot), "sgtest-mcp-pip", hex, 6) != 0)
        return -1;
    sglibs_py_names("sgtestmcp", hex, py_name, py_norm, sizeof(py_name));
    if ((index_srv = sglibs_server_start(wwwroot, false)) == NULL)
        return -1;
    sglibs_wheel(wwwroot, py_name, "1.0", NULL, NULL, py_whl[0], sizeof(py_whl[0]));
    sglibs_wheel(wwwroot, py_name, "2.0", NULL, NULL, py_whl[1], sizeof(py_whl[1]));
    char *files[2] = {py_whl[0], py_whl[1]};
    sglibs_simple_index(wwwroot, sglibs_port(index_srv), py_norm, files, 2);
    if ((proxy_id = sgtest_new_proxy_id()) == NULL)
        return -1;
    snprintf(store_volume, sizeof(store_volume), "%s-store", proxy_id);
    if ((proxy = sglibs_proxy_start(proxy_id, index_srv, store_volume, INSTALL_TIMEOUT_S, NULL)) == NULL)
        return -1;
    sggw_opts_t opts = {.proxy_url = sgtest_proxy_url(proxy)};
    if ((gw = sggw_gateway_start(&opts)) == NULL)
        return -1;
    const char *q[] = {"rate_per_min=100000", "burst=100000", NULL};
    token = sggw_new_tenant(sggw_gateway_data_dir(gw), "mcp-pip", q);
    return 0;
}

static int group_teardown(void **state)
{
    int rc = 0;
    if (sggw_gateway_stop(gw) != 0)
        rc = -1;
    if (sgtest_proxy_finish(&proxy, proxy_id, 10) != 0)
        rc = -1;
    if (sglibs_volume_status(store_volume) == 200 && sglibs_volume_remove(store_volume) != 204)
        rc = -1;
    sglibs_server_free(index_srv);
    sglibs_rm_tree(tmpdir);
    free(proxy_id);
    free(token);
    return rc;
}

static int after_test(void **state)
{
    return sggw_after_test();
}

/* A 2026-07-28 tools/call of tool with args (a JSON object's text): its result. */
static json_object *call_tool(const char *tool, const char *args)
{
    char body[1200], auth[200], name[80], url[200];
    sgtest_reply_t r = {0};
    snprintf(body, sizeof(body),
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\",\"arguments\":%s,"
             "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
             "\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
             tool, args);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
    snprintf(name, sizeof(name), "Mcp-Name: %s", tool);
    const char *hs[] = {
        auth, "Accept: application/json", "MCP-Protocol-Version: 2026-07-28", "Mcp-Method: tools/call", name, NULL};
    snprintf(url, sizeof(url), "%s/mcp", sggw_gateway_url(gw));
    sggw_http("POST", url, body, strlen(body), "application/json", hs, 180, &r);
    SG_ASSERT_STATUS(&r, 200);
    json_object *o = SG_JSON(&r), *res = json_object_get(SG_OBJ(o, "result"));
    json_object_put(o);
    sgtest_reply_free(&r);
    return res;
}

SGGW_TEST(test_pip_install_then_execute_python)
{
    char args[400];
    sglibs_wall_t t0 = sglibs_wall_now();
    snprintf(args, sizeof(args), "{\"package\":\"%s\"}", py_name);
    json_object *res = call_tool("pip_install", args), *sc = SG_OBJ(res, "structuredContent");
    SG_CHECK(!SG_BOOL(res, "isError") && SG_BOOL(sc, "success"), res, "pip_install");
    SG_CHECK(strcmp(SG_STR(sc, "installed_version"), "2.0") == 0, res, "the latest version");
    SG_CHECK(SG_DBL(sc, "installation_time") > 0, res, "its time");
    json_object_put(res);
    SG_CHECK(sglibs_installers_created_since(proxy_id, t0) == 1, NULL, "one fetch into the store");

    /* a fresh one-shot run naming it installs it from the store */
    sglibs_wall_t t1 = sglibs_wall_now();
    snprintf(args, sizeof(args),
             "{\"code\":\"import %s as m\\nprint(m.VERSION, m.double(21))\",\"libraries\":[\"%s\"]}", py_name, py_name);
    res = call_tool("execute_python", args);
    sc = SG_OBJ(res, "structuredContent");
    SG_CHECK(!SG_BOOL(res, "isError") && strcmp(SG_STR(sc, "stdout"), "2.0 42\n") == 0, res, "imported");
    json_object_put(res);
    SG_CHECK(sglibs_installers_created_since(proxy_id, t1) == 0, NULL, "no fetch the second time");

    /* a pinned version without a session: its own entry in the store */
    sglibs_wall_t t2 = sglibs_wall_now();
    snprintf(args, sizeof(args), "{\"package\":\"%s\",\"version\":\"1.0\"}", py_name);
    res = call_tool("pip_install", args);
    sc = SG_OBJ(res, "structuredContent");
    SG_CHECK(!SG_BOOL(res, "isError") && SG_BOOL(sc, "success"), res, "pip_install version 1.0");
    SG_CHECK(strcmp(SG_STR(sc, "installed_version"), "1.0") == 0, res, "version 1.0");
    json_object_put(res);
    SG_CHECK(sglibs_installers_created_since(proxy_id, t2) == 1, NULL, "one fetch of version 1.0");
}

SGGW_TEST(test_pip_install_into_a_session)
{
    char args[400];
    json_object *res = call_tool("create_session", "{}");
    char *sid = strdup(SG_STR(SG_OBJ(res, "structuredContent"), "session_id"));
    json_object_put(res);
    snprintf(args, sizeof(args), "{\"package\":\"%s\",\"version\":\"1.0\",\"session_id\":\"%s\"}", py_name, sid);
    res = call_tool("pip_install", args);
    json_object *sc = SG_OBJ(res, "structuredContent");
    SG_CHECK(!SG_BOOL(res, "isError") && strcmp(SG_STR(sc, "installed_version"), "1.0") == 0, res, "version 1.0");
    json_object_put(res);
    snprintf(args, sizeof(args), "{\"session_id\":\"%s\",\"code\":\"import %s as m\\nprint(m.VERSION)\"}", sid,
             py_name);
    res = call_tool("execute_code", args);
    SG_CHECK(strcmp(SG_STR(SG_OBJ(res, "structuredContent"), "stdout"), "1.0\n") == 0, res, "that version runs");
    json_object_put(res);
    sggw_delete_session(gw, token, sid);
    free(sid);
}

SGGW_TEST(test_pip_install_refusals)
{
    json_object *res = call_tool("pip_install", "{\"package\":\"os\"}");
    SG_CHECK(SG_BOOL(res, "isError") && strstr(json_object_to_json_string(res), "bad_library"), res, "blocked");
    json_object_put(res);
    res = call_tool("pip_install", "{\"package\":\"x; import os\"}");
    SG_CHECK(SG_BOOL(res, "isError") && strstr(json_object_to_json_string(res), "bad_library"), res,
             "not a package name");
    json_object_put(res);
}

int main(void)
{
    return SG_RUN_TESTS("gw_mcp_pip", group_setup, group_teardown, NULL, after_test,
                        test_pip_install_then_execute_python, test_pip_install_into_a_session,
                        test_pip_install_refusals);
}
