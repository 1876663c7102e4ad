/*
 * test_gw_seed004.c — seed 004's direct API on the gateway, and the
 * documents: GET /health (no token; 200 with the proxy and Docker up, 503
 * within its bound when the proxy is down or never answers), POST /execute
 * without "lang" (python, seed 004's README example), POST /pip_install
 * (fetched into the store, then installed from it by a later execute; into
 * a session; refused names, versions and sessions), seed 004's metric
 * names counting with the existing ones, GET /openapi.json and GET /docs
 * (Swagger UI served from SANDGATE_WWW_DIR, its assets with their types).
 *
 * Real components: the proxy, the Docker engine and the python image, the
 * gateway binary, an index of the test's own (sglibs.h: PyPI is not
 * reachable) that the proxy's installers reach over the host network.
 * Tests run in order: the store fills as they go.
 */
#include "sggw.h"
#include "sglibs.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define INSTALL_TIMEOUT_S 30
#define REMOVAL_S 10.0
#define HEALTH_BOUND_S 4.0 /* the gateway answers /health within 2 s, plus a margin for a loaded machine */

static sgtest_proxy_t *proxy;
static char *proxy_id;
static char store_volume[128];
static sggw_gateway_t *gw;
static char *tok, *other_tok;

static char tmpdir[256], wwwroot[300];
static char py_name[64], py_norm[64]; /* sg4pkg_<hex>: 1.0 and 2.0 */
static sglibs_server_t *index_srv, *hold_srv;

/* ---- fixtures -------------------------------------------------------------- */

static sgtest_proxy_t *start_proxy(void)
{
    return sglibs_proxy_start(proxy_id, index_srv, store_volume, INSTALL_TIMEOUT_S, NULL);
}

static int group_setup(void **state)
{
    char hex[33], whl[2][128], *files[2] = {whl[0], whl[1]};
    if (sglibs_suite_dir(tmpdir, sizeof(tmpdir), wwwroot, sizeof(wwwroot), "sgtest-seed004", hex, 6) != 0)
        return -1;
    sglibs_py_names("sg4pkg", hex, py_name, py_norm, sizeof(py_name));
    index_srv = sglibs_server_start(wwwroot, false);
    hold_srv = sglibs_server_start(NULL, true);
    if (index_srv == NULL || hold_srv == NULL)
        return -1;
    sglibs_wheel(wwwroot, py_name, "1.0", NULL, NULL, whl[0], sizeof(whl[0]));
    sglibs_wheel(wwwroot, py_name, "2.0", NULL, NULL, whl[1], sizeof(whl[1]));
    sglibs_simple_index(wwwroot, sglibs_port(index_srv), py_norm, files, 2);
    proxy_id = sgtest_new_proxy_id();
    if (proxy_id == NULL)
        return -1;
    snprintf(store_volume, sizeof(store_volume), "%s-store", proxy_id);
    if ((proxy = start_proxy()) == NULL)
        return -1;
    sggw_opts_t o = {.proxy_url = sgtest_proxy_url(proxy)};
    if ((gw = sggw_gateway_start(&o)) == NULL)
        return -1;
    tok = sggw_new_tenant(sggw_gateway_data_dir(gw), "seed004", NULL);
    other_tok = sggw_new_tenant(sggw_gateway_data_dir(gw), "seed004-other", NULL);
    return 0;
}

static int group_teardown(void **state)
{
    int rc = 0;
    if (gw != NULL && sggw_gateway_stop(gw) != 0)
        rc = -1;
    if (sglibs_proxy_finish(&proxy, proxy_id, store_volume, REMOVAL_S) != 0)
        rc = -1;
    sglibs_server_free(index_srv);
    sglibs_server_free(hold_srv);
    sglibs_rm_tree(tmpdir);
    free(proxy_id);
    free(tok);
    free(other_tok);
    return rc;
}

static int after_test(void **state)
{
    int failed = sggw_after_test();
    return sgtest_proxy_check_alive(&proxy, start_proxy) != 0 || failed || !sggw_gateway_alive(gw) ? -1 : 0;
}

/* ---- helpers --------------------------------------------------------------- */

static char *get_metrics(void)
{
    sgtest_reply_t r;
    sggw_call(gw, NULL, "GET", "/metrics", NULL, &r);
    SG_CHECK(r.status == 200, NULL, "GET /metrics: %ld", r.status);
    char *text = r.body;
    r.body = NULL;
    sgtest_reply_free(&r);
    return text;
}

static double metric(const char *text, const char *name, const char *labels)
{
    double v = sggw_metric(text, name, labels);
    SG_CHECK(v >= 0, NULL, "/metrics has no %s{%s}:\n%s", name, labels, text);
    return v;
}

/* POST /pip_install with body as token: the reply taken, status checked. */
static json_object *pip_install(const char *token, const char *body, long status, const char *code)
{
    if (code != NULL) {
        SGGW_CALL_ERROR(gw, token, "POST", "/pip_install", body, status, code);
        return NULL;
    }
    json_object *o = SGGW_CALL_JSON(gw, token, "POST", "/pip_install", body, status);
    sglibs_check_install_shape(o);
    return o;
}

/* GET path of g without a token, timed. */
static void get_health(const sggw_gateway_t *g, sgtest_reply_t *r)
{
    sggw_call(g, NULL, "GET", "/health", NULL, r);
}

/* ---- GET /health ------------------------------------------------------------ */

SGGW_TEST(test_health_up)
{
    sgtest_reply_t r;
    get_health(gw, &r);
    json_object *o = SG_TAKE_JSON(&r, 200);
    SG_CHECK(strcmp(SG_STR(o, "status"), "ok") == 0, o, "status");
    SG_CHECK(SG_BOOL(o, "proxy") && SG_BOOL(o, "docker") && SG_BOOL(o, "database"), o, "all up");
    SG_CHECK(strlen(SG_STR(o, "docker_version")) > 0, o, "docker_version");
    SG_CHECK(strcmp(SG_STR(o, "runtime"), "runc") == 0 || strcmp(SG_STR(o, "runtime"), "runsc") == 0, o, "runtime");
    json_object *st;
    SG_CHECK(json_object_object_get_ex(o, "state", &st), o, "state");
    SG_CHECK(strcmp(SG_STR(st, "backend"), "memory") == 0 && SG_BOOL(st, "available"), o, "state");
    json_object_put(o);
}

/* A gateway whose proxy is gone, and one whose proxy accepts and never
 * answers: 503 within the bound, naming the proxy; the token routes still
 * answer (the loop was never blocked). */
SGGW_TEST(test_health_proxy_down)
{
    char url[64];
    int port = sgtest_free_port();
    SG_CHECK(port > 0, NULL, "a free port");
    const char *urls[2];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    urls[0] = url;
    char hold_url[64];
    snprintf(hold_url, sizeof(hold_url), "http://127.0.0.1:%d", sglibs_port(hold_srv));
    urls[1] = hold_url;
    for (int i = 0; i < 2; i++) {
        sggw_opts_t o = {.proxy_url = urls[i]};
        sggw_gateway_t *g = sggw_gateway_start(&o);
        SG_CHECK(g != NULL, NULL, "a gateway on %s", urls[i]);
        sgtest_reply_t r;
        get_health(g, &r);
        double took = r.seconds;
        json_object *h = SG_TAKE_JSON(&r, 503);
        printf("health with the proxy %s: 503 in %.3f s\n", i == 0 ? "gone" : "silent", took);
        SG_CHECK(took < HEALTH_BOUND_S, h, "GET /health took %.3f s", took);
        SG_CHECK(strcmp(SG_STR(h, "status"), "degraded") == 0, h, "status");
        SG_CHECK(!SG_BOOL(h, "proxy") && !SG_BOOL(h, "docker") && SG_BOOL(h, "database"), h, "what is down");
        SG_CHECK(strlen(SG_STR(h, "detail")) > 0, h, "detail");
        json_object_put(h);
        /* the rest of the API is unaffected */
        sggw_call(g, NULL, "GET", "/", NULL, &r);
        SG_CHECK(r.status == 200, NULL, "GET / on that gateway: %ld", r.status);
        sgtest_reply_free(&r);
        SG_CHECK(sggw_gateway_stop(g) == 0, NULL, "that gateway exits 0");
    }
}

/* ---- POST /execute without lang ---------------------------------------------- */

SGGW_TEST(test_execute_default_python)
{
    /* seed 004's README, as it is written there */
    json_object *o =
        SGGW_CALL_JSON(gw, tok, "POST", "/execute",
                       "{\"code\": \"import math\\nprint(f\\\"\xcf\x80 = {math.pi}\\\")\", \"timeout\": 10}", 200);
    sggw_check_result(o);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "\xcf\x80 = 3.141592653589793\n") == 0, o, "stdout");
    SG_CHECK(SG_BOOL(o, "success"), o, "success");
    json_object_put(o);
    o = SGGW_CALL_JSON(gw, tok, "POST", "/execute", "{\"code\": \"print(\\\"Hello from sandbox!\\\")\"}", 200);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "Hello from sandbox!\n") == 0, o, "stdout");
    json_object_put(o);
}

/* ---- POST /pip_install -------------------------------------------------------- */

/* Without a session: fetched into the store (one index visit), then an
 * execute naming it installs it from the store (no index request), and the
 * metrics count the install. */
SGGW_TEST(test_pip_install_to_store)
{
    char body[256];
    char *m0 = get_metrics();
    double ok0 = metric(m0, "sandbox_package_installs_total", "outcome=\"success\"");
    free(m0);

    int hits0 = sglibs_hits(index_srv, "/simple/");
    snprintf(body, sizeof(body), "{\"package\": \"%s\", \"version\": \"latest\"}", py_name);
    json_object *o = pip_install(tok, body, 200, NULL);
    sglibs_expect_installed(o, "2.0", false);
    json_object_put(o);
    int hits1 = sglibs_hits(index_srv, "/simple/");
    SG_CHECK(hits1 > hits0, NULL, "the first install did not visit the index");

    snprintf(body, sizeof(body), "{\"code\": \"import %s; print(%s.VERSION)\", \"libraries\": [\"%s\"]}", py_name,
             py_name, py_name);
    o = SGGW_CALL_JSON(gw, tok, "POST", "/execute", body, 200);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "2.0\n") == 0, o, "the library from the store");
    json_object_put(o);
    SG_CHECK(sglibs_hits(index_srv, "/simple/") == hits1, NULL, "the execute visited the index");

    /* a pinned version is its own spec: fetched once, then from the store */
    snprintf(body, sizeof(body), "{\"package\": \"%s\", \"version\": \"1.0\"}", py_name);
    o = pip_install(tok, body, 200, NULL);
    sglibs_expect_installed(o, "1.0", false);
    json_object_put(o);
    o = pip_install(tok, body, 200, NULL);
    sglibs_expect_installed(o, "1.0", true);
    json_object_put(o);

    char *m1 = get_metrics();
    double ok1 = metric(m1, "sandbox_package_installs_total", "outcome=\"success\"");
    SG_CHECK(ok1 - ok0 == 3, NULL, "sandbox_package_installs_total{outcome=\"success\"} went %.0f -> %.0f", ok0, ok1);
    free(m1);
}

/* Refused at the door or by the proxy's check (the libraries route's
 * own): nothing reaches an installer. */
SGGW_TEST(test_pip_install_refused)
{
    sglibs_wall_t t0 = sglibs_wall_now();
    char *m0 = get_metrics();
    double refused0 = sggw_metric(m0, "sandbox_errors_total", "type=\"package_refused\"");
    free(m0);

    pip_install(tok, "{\"package\": \"os\"}", 400, "bad_library");                               /* blocklisted */
    pip_install(tok, "{\"package\": \"subprocess\", \"version\": \"1.0\"}", 400, "bad_library"); /* blocklisted */
    pip_install(tok, "{\"package\": \"bad name!\"}", 400, "bad_library");
    pip_install(tok, "{\"package\": \"requests\", \"version\": \"1.0; rm -rf /\"}", 400, "bad_library");
    pip_install(tok, "{\"version\": \"1.0\"}", 400, "bad_field");
    pip_install(tok, "{\"package\": 7}", 400, "bad_field");
    pip_install(tok, "not json", 400, "bad_json");
    pip_install(tok, "{\"package\": \"requests\", \"session_id\": 12}", 400, "bad_field");
    pip_install(tok, "{\"package\": \"requests\", \"session_id\": \"../../etc\"}", 404, "no_such_session");
    pip_install(tok, "{\"package\": \"requests\", \"lang\": \"cobol\"}", 400, "unknown_language");

    /* its body is parsed before the token is looked up: kept small */
    size_t big = 100 << 10;
    char *huge = malloc(big + 64);
    SG_CHECK(huge != NULL, NULL, "malloc");
    int n = snprintf(huge, 64, "{\"package\": \"requests\", \"pad\": \"");
    memset(huge + n, 'x', big);
    strcpy(huge + n + big, "\"}");
    pip_install(tok, huge, 413, "too_large");
    free(huge);

    /* no token: 401 with WWW-Authenticate */
    sgtest_reply_t r;
    sggw_call(gw, NULL, "POST", "/pip_install", "{\"package\": \"requests\"}", &r);
    SG_CHECK(r.status == 401, NULL, "no token: %ld", r.status);
    char *wa = sgtest_reply_header(&r, "www-authenticate");
    SG_CHECK(wa != NULL && strncmp(wa, "Bearer", 6) == 0, NULL, "WWW-Authenticate: %s", wa ? wa : "(none)");
    free(wa);
    sgtest_reply_free(&r);

    SG_CHECK(sglibs_installers_created_since(proxy_id, t0) == 0, NULL, "a refused install started an installer");
    char *m1 = get_metrics();
    double refused1 = metric(m1, "sandbox_errors_total", "type=\"package_refused\"");
    SG_CHECK(refused1 - (refused0 < 0 ? 0 : refused0) == 4, NULL, "package_refused went %.0f -> %.0f", refused0,
             refused1);
    free(m1);
}

/* With session_id: into that session (importable there without
 * "libraries"); another tenant's session, or a closed one, is a 404. */
SGGW_TEST(test_pip_install_session)
{
    char body[256], code[256];
    char *sid = sggw_create_session(gw, tok, NULL, NULL);
    snprintf(body, sizeof(body), "{\"package\": \"%s\", \"version\": \"1.0\", \"session_id\": \"%s\"}", py_name, sid);
    SGGW_CALL_ERROR(gw, other_tok, "POST", "/pip_install", body, 404, "no_such_session");
    json_object *o = pip_install(tok, body, 200, NULL);
    sglibs_expect_installed(o, "1.0", true); /* test_pip_install_to_store fetched this spec */
    json_object_put(o);
    snprintf(code, sizeof(code), "import %s; print(%s.VERSION)", py_name, py_name);
    o = sggw_execute(gw, tok, sid, code, 0);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "1.0\n") == 0, o, "installed into the session");
    json_object_put(o);
    sggw_delete_session(gw, tok, sid);
    SGGW_CALL_ERROR(gw, tok, "POST", "/pip_install", body, 404, "no_such_session");
    free(sid);
}

/* ---- /metrics: seed 004's names count with the existing ones ------------------- */

SGGW_TEST(test_metrics_seed004_names)
{
    char *m0 = get_metrics();
    double n0 = metric(m0, "sandbox_executions_total", ""),
           c0 = metric(m0, "sandbox_execution_duration_seconds_count", ""),
           inf0 = metric(m0, "sandbox_execution_duration_seconds_bucket", "le=\"+Inf\""),
           err0 = metric(m0, "sandbox_errors_total", "type=\"execution\""),
           sg0 = metric(m0, "sandgate_execution_duration_seconds_count", "");
    SG_CHECK(n0 == c0 && c0 == inf0 && c0 == sg0, NULL, "the counts disagree:\n%s", m0);
    SG_CHECK(strstr(m0, "# TYPE sandbox_execution_duration_seconds histogram\n") != NULL, NULL, "histogram type");
    SG_CHECK(strstr(m0, "# TYPE sandbox_executions_total counter\n") != NULL, NULL, "counter type");
    free(m0);

    json_object *o = SGGW_CALL_JSON(gw, tok, "POST", "/execute", "{\"code\": \"print(1)\"}", 200);
    json_object_put(o);
    o = SGGW_CALL_JSON(gw, tok, "POST", "/execute", "{\"code\": \"raise SystemExit(3)\"}", 200);
    SG_CHECK(!SG_BOOL(o, "success"), o, "a failing run");
    json_object_put(o);

    char *m1 = get_metrics();
    double n1 = metric(m1, "sandbox_executions_total", ""),
           c1 = metric(m1, "sandbox_execution_duration_seconds_count", ""),
           inf1 = metric(m1, "sandbox_execution_duration_seconds_bucket", "le=\"+Inf\""),
           sum1 = metric(m1, "sandbox_execution_duration_seconds_sum", ""),
           err1 = metric(m1, "sandbox_errors_total", "type=\"execution\""),
           sgsum1 = metric(m1, "sandgate_execution_duration_seconds_sum", "");
    SG_CHECK(n1 - n0 == 2 && c1 == n1 && inf1 == n1, NULL, "two executions counted:\n%s", m1);
    SG_CHECK(err1 - err0 == 1, NULL, "one execution error counted: %.0f -> %.0f", err0, err1);
    SG_CHECK(sum1 > 0 && sum1 == sgsum1, NULL, "the sums agree: %f vs %f", sum1, sgsum1);
    /* buckets are cumulative */
    double prev = 0;
    const char *les[] = {"0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30"};
    for (size_t i = 0; i < sizeof(les) / sizeof(les[0]); i++) {
        char l[32];
        snprintf(l, sizeof(l), "le=\"%s\"", les[i]);
        double b = metric(m1, "sandbox_execution_duration_seconds_bucket", l);
        SG_CHECK(b >= prev && b <= inf1, NULL, "bucket %s = %.0f", les[i], b);
        prev = b;
    }
    free(m1);
}

/* ---- GET /openapi.json, GET /docs ------------------------------------------------ */

static void get_plain(const char *path, long status, const char *ctype_prefix, sgtest_reply_t *r)
{
    sggw_call(gw, NULL, "GET", path, NULL, r);
    char *ct = sgtest_reply_header(r, "content-type");
    SG_CHECK(r->status == status, NULL, "GET %s: %ld (expected %ld)", path, r->status, status);
    SG_CHECK(ctype_prefix == NULL || (ct != NULL && strncmp(ct, ctype_prefix, strlen(ctype_prefix)) == 0), NULL,
             "GET %s: Content-Type %s, expected %s", path, ct ? ct : "(none)", ctype_prefix);
    free(ct);
}

SGGW_TEST(test_openapi_json)
{
    sgtest_reply_t r;
    get_plain("/openapi.json", 200, "application/json", &r);
    json_object *doc = SG_TAKE_JSON(&r, 200), *paths;
    SG_CHECK(strcmp(SG_STR(doc, "openapi"), "3.1.0") == 0, NULL, "openapi 3.1.0");
    SG_CHECK(json_object_object_get_ex(doc, "paths", &paths), NULL, "paths");
    const char *want[] = {"/pip_install", "/health",        "/execute", "/sessions/{session_id}/execute",
                          "/mcp",         "/admin/tenants", "/docs"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        SG_CHECK(json_object_object_get_ex(paths, want[i], NULL), NULL, "paths has no %s", want[i]);
    json_object_put(doc);
}

SGGW_TEST(test_docs_page)
{
    const char *www = getenv("SANDGATE_WWW_DIR");
    char index[512];
    snprintf(index, sizeof(index), "%s/docs/index.html", www != NULL ? www : "");
    SG_CHECK(www != NULL && access(index, R_OK) == 0, NULL,
             "%s is missing: deploy/www-docs.sh builds build/www/docs (deploy/test.sh runs it)", index);
    sgtest_reply_t r;
    /* seed 000 users open /docs */
    sggw_call(gw, NULL, "GET", "/docs", NULL, &r);
    char *loc = sgtest_reply_header(&r, "location");
    SG_CHECK(r.status == 200 || (r.status / 100 == 3 && loc != NULL && strcmp(loc, "/docs/") == 0), NULL,
             "GET /docs: %ld, Location %s", r.status, loc ? loc : "(none)");
    free(loc);
    sgtest_reply_free(&r);

    get_plain("/docs/", 200, "text/html", &r);
    SG_CHECK(strstr(r.body, "/openapi.json") != NULL, NULL, "the page does not load /openapi.json:\n%s", r.body);
    SG_CHECK(strstr(r.body, "swagger-ui-bundle.js") != NULL && strstr(r.body, "swagger-ui.css") != NULL, NULL,
             "the page does not load Swagger UI:\n%s", r.body);
    SG_CHECK(strstr(r.body, "http://") == NULL && strstr(r.body, "https://") == NULL, NULL,
             "the page loads something from elsewhere:\n%s", r.body);
    sgtest_reply_free(&r);

    const struct {
        const char *path, *ctype;
        size_t min_bytes;
    } assets[] = {{"/docs/swagger-ui-bundle.js", "application/javascript", 100000},
                  {"/docs/swagger-ui.css", "text/css", 10000},
                  {"/docs/docs.js", "application/javascript", 50}};
    for (size_t i = 0; i < sizeof(assets) / sizeof(assets[0]); i++) {
        get_plain(assets[i].path, 200, assets[i].ctype, &r);
        SG_CHECK(r.body_len >= assets[i].min_bytes, NULL, "%s is %zu bytes", assets[i].path, r.body_len);
        sgtest_reply_free(&r);
    }
    /* nothing outside the directory */
    const char *outside[] = {"/docs/../etc/passwd", "/docs/..%2f..%2f..%2fetc%2fpasswd", "/docs/nope.js"};
    for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
        sggw_call(gw, NULL, "GET", outside[i], NULL, &r);
        SG_CHECK(r.status != 200 || strstr(r.body, "root:") == NULL, NULL, "GET %s: %ld", outside[i], r.status);
        SG_CHECK(r.status == 404, NULL, "GET %s: %ld, expected 404", outside[i], r.status);
        sgtest_reply_free(&r);
    }
}

int main(void)
{
    return SG_RUN_TESTS("gw_seed004", group_setup, group_teardown, NULL, after_test, test_health_up,
                        test_health_proxy_down, test_execute_default_python, test_pip_install_to_store,
                        test_pip_install_refused, test_pip_install_session, test_metrics_seed004_names,
                        test_openapi_json, test_docs_page);
}
