/*
 * test_proxy_libraries.c — library installs (proxy/libraries/install.h): an installer
 * container with network fetches a package into the store volume, then the
 * sandbox (no network) installs it from the read-only store. Through the
 * real proxy, the real Docker engine and the real python/javascript images.
 *
 * No public index is needed: the test serves its own package index on
 * 127.0.0.1 (a tiny HTTP/1.0 static file server on threads of this process)
 * with packages it builds itself:
 *   - three wheels of sgtestpkg_<random> (1.0, 2.0, 3.0, stored ZIPs
 *     written here) under a PEP 503 "simple" index;
 *   - an npm package sgtest-js-<random> (a ustar tar, gzipped with stored
 *     deflate blocks, written here) and its registry document.
 * The installers reach it because the proxy runs them on the host network
 * (SANDGATE_INSTALL_NETWORK=host). The server counts requests per path, so
 * the tests can tell whether the index was contacted at all; Docker's event
 * log tells whether an installer container was created.
 *
 * The proxy runs without a warm pool and with a store volume of its own
 * (<proxy id>-store), removed at the end. Tests run in order: the store
 * fills up as they go (test 2 relies on test 1's fetch).
 */
#include "sglibs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define INSTALL_TIMEOUT_S 20
#define SHORT_TIMEOUT_S 3    /* the install-timeout test's proxy */
#define TIMEOUT_BOUND_S 15.0 /* that proxy must give up within this */
#define REMOVAL_S 10.0       /* a closed session's container is gone within this */

static sgtest_proxy_t *proxy;
static char *proxy_id;
static char store_volume[128];
static bool proxy_stopped_on_purpose;

/* the second proxy of the install-timeout test */
static sgtest_proxy_t *slow_proxy;
static char *slow_proxy_id;
static char slow_volume[128];

static char tmpdir[256];    /* everything the test writes */
static char wwwroot[300];   /* what the index serves */
static char py_name[64];    /* sgtestpkg_<hex>: distribution and module */
static char py_norm[64];    /* sgtestpkg-<hex>: its PEP 503 name */
static char py_whl[3][128]; /* 1.0, 2.0, 3.0 */
static char js_name[64];    /* sgtest-js-<hex> */
static char js_tgz[128];
static sglibs_server_t *index_srv; /* the index */
static sglibs_server_t *hold_srv;  /* accepts, never answers */

static char *pip_sid;                /* test 1's session, used again by test 7 */
static double pip_first, pip_second; /* installation_time, seconds */
static double npm_first, npm_second;

static bool image_exists(const char *image)
{
    char path[256];
    snprintf(path, sizeof(path), "/images/%s/json", image);
    sgtest_reply_t r;
    sgtest_docker_call("GET", path, NULL, &r);
    bool ok = r.status == 200;
    sgtest_reply_free(&r);
    return ok;
}

/* ------------------------------------------------------------------------
 * The proxy API (test thread only)
 * ------------------------------------------------------------------------ */

static char *create_session_on(sgtest_proxy_t *p, const char *lang)
{
    return sgtest_create_session(p, lang, NULL, NULL);
}

static char *create_session(const char *lang)
{
    return create_session_on(proxy, lang);
}

static void close_session_on(sgtest_proxy_t *p, const char *pid, const char *sid)
{
    sgtest_close_session(p, pid, sid, NULL, REMOVAL_S);
}

static void close_session(const char *sid)
{
    close_session_on(proxy, proxy_id, sid);
}

static json_object *run_code_on(sgtest_proxy_t *p, const char *sid, const char *code, const char *const *libs)
{
    return sgtest_run_code(p, sid, code, libs, 0, NULL);
}

static json_object *run_code(const char *sid, const char *code, const char *const *libs)
{
    return run_code_on(proxy, sid, code, libs);
}

static json_object *run_cmd(const char *sid, const char *cmd)
{
    return sgtest_run_cmd(proxy, sid, cmd, 0, NULL);
}

static json_object *run_ephemeral(const char *lang, const char *code, const char *const *libs)
{
    return sgtest_run_ephemeral(proxy, lang, code, libs, 0, NULL);
}

static void expect_output(json_object *r, const char *want)
{
    if (strcmp(SG_STR(r, "stdout"), want) != 0)
        SG_FAIL(r, "stdout differs: expected \"%s\"", want);
    if (!SG_BOOL(r, "success"))
        SG_FAIL(r, "expected a successful run");
}

/* code run in session sid prints want, successfully. */
static void expect_run(const char *sid, const char *code, const char *want)
{
    json_object *o = run_code(sid, code, NULL);
    expect_output(o, want);
    json_object_put(o);
}

/* The end of a test's session: closed (its container gone), its id freed. */
static void session_done(char *sid)
{
    close_session(sid);
    free(sid);
}

/* code with libs in a new python session, which then closes: stdout must be
 * exactly want. */
static void run_in_new_session(const char *code, const char *const *libs, const char *want)
{
    char *sid = create_session("python");
    json_object *o = run_code(sid, code, libs);
    expect_output(o, want);
    json_object_put(o);
    session_done(sid);
}

static json_object *install(const char *sid, const char *package, const char *version)
{
    return sglibs_install(proxy, sid, package, version, NULL);
}

/* The second install of package (version, NULL: the latest) by `tool`, in
 * sid: from the store, so installed as `want` and faster than `first` (the
 * fetch's installation_time). Returns its installation_time. */
static double expect_store_install(const char *tool, const char *sid, const char *package, const char *version,
                                   const char *want, double first)
{
    json_object *o = install(sid, package, version);
    sglibs_expect_installed(o, want, true);
    double second = SG_DBL(o, "installation_time");
    json_object_put(o);
    printf("%s install of %s%s%s: first %.3f s (fetched by an installer), second %.3f s (from the store)\n", tool,
           package, version != NULL ? " " : "", version != NULL ? version : "", first, second);
    SG_CHECK(second < first, NULL, "the install from the store (%.3f s) is not faster than the fetch (%.3f s)", second,
             first);
    return second;
}

/* A refused POST .../libraries: 400 bad_library naming `names` (may be NULL). */
static void expect_refused(const char *sid, const char *package, const char *version, const char *names)
{
    sgtest_reply_t r;
    sglibs_post_library(proxy, sid, package, version, &r);
    json_object *o = SG_EXPECT_ERROR(&r, 400, "bad_library");
    sgtest_reply_free(&r);
    if (names != NULL && strstr(SG_STR(o, "detail"), names) == NULL)
        SG_FAIL(o, "package \"%s\" version \"%s\": the detail must name \"%s\"", package, version ? version : "(none)",
                names);
    json_object_put(o);
}

/* ------------------------------------------------------------------------
 * Fixtures
 * ------------------------------------------------------------------------ */

static sgtest_proxy_t *start_proxy(void)
{
    return sglibs_proxy_start(proxy_id, index_srv, store_volume, INSTALL_TIMEOUT_S, NULL);
}

static int group_setup(void **state)
{
    char hex[33];
    if (sglibs_suite_dir(tmpdir, sizeof(tmpdir), wwwroot, sizeof(wwwroot), "sgtest-libraries", hex, 6) != 0)
        return -1;
    sglibs_py_names("sgtestpkg", hex, py_name, py_norm, sizeof(py_name));
    snprintf(js_name, sizeof(js_name), "sgtest-js-%s", hex);

    index_srv = sglibs_server_start(wwwroot, false);
    hold_srv = sglibs_server_start(NULL, true);
    if (index_srv == NULL || hold_srv == NULL)
        return -1;
    const char *versions[3] = {"1.0", "2.0", "3.0"};
    char *files[3];
    for (int i = 0; i < 3; i++) {
        sglibs_wheel(wwwroot, py_name, versions[i], NULL, NULL, py_whl[i], sizeof(py_whl[i]));
        files[i] = py_whl[i];
    }
    sglibs_simple_index(wwwroot, sglibs_port(index_srv), py_norm, files, 3);
    sglibs_npm_package(wwwroot, sglibs_port(index_srv), js_name, "1.0.0",
                       "module.exports = { value: 42, double: (x) => 2 * x };\n", js_tgz, sizeof(js_tgz));
    printf("index: http://127.0.0.1:%d (%s), packages %s (pip) and %s (npm); silent index on port %d\n",
           sglibs_port(index_srv), wwwroot, py_name, js_name, sglibs_port(hold_srv));

    proxy_id = sgtest_new_proxy_id();
    if (proxy_id == NULL)
        return -1;
    snprintf(store_volume, sizeof(store_volume), "%s-store", proxy_id);
    proxy = start_proxy();
    return proxy != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    int rc = 0;
    if (sglibs_proxy_finish(&slow_proxy, slow_proxy_id, slow_volume, REMOVAL_S) != 0)
        rc = -1;
    if (sglibs_proxy_finish(&proxy, proxy_id, store_volume, REMOVAL_S) != 0)
        rc = -1;
    sglibs_server_free(index_srv);
    sglibs_server_free(hold_srv);
    sglibs_rm_tree(tmpdir);
    free(pip_sid);
    free(proxy_id);
    free(slow_proxy_id);
    return rc;
}

/* After every test: a test during which the proxy died fails here, and the
 * proxy is started again (same id: it reconciles what the dead one left). */
static int check_proxy_alive(void **state)
{
    return proxy_stopped_on_purpose ? 0 : sgtest_proxy_check_alive(&proxy, start_proxy);
}

/* ------------------------------------------------------------------------
 * 1. pip install through the API, into a running interpreter
 * ------------------------------------------------------------------------ */

static void test_pip_install(void **state)
{
    char code[256];
    sglibs_wall_t t0 = sglibs_wall_now();
    int before = sglibs_hits(index_srv, "");

    pip_sid = create_session("python");
    /* the interpreter runs before the package exists, and cannot import it */
    json_object *o = run_code(pip_sid, "started = 'yes'\nprint(started)", NULL);
    expect_output(o, "yes\n");
    json_object_put(o);
    pathf(code, sizeof(code), "import %s", py_name);
    o = run_code(pip_sid, code, NULL);
    SG_CHECK(!SG_BOOL(o, "success") && strstr(SG_STR(o, "stderr"), "ModuleNotFoundError") != NULL, o,
             "%s must not be importable before the install", py_name);
    json_object_put(o);

    o = install(pip_sid, py_name, "1.0");
    sglibs_expect_installed(o, "1.0", false);
    pip_first = SG_DBL(o, "installation_time");
    json_object_put(o);

    char simple[200], whl[200];
    pathf(simple, sizeof(simple), "/simple/%s", py_norm);
    pathf(whl, sizeof(whl), "/packages/%s", py_whl[0]);
    SG_CHECK(sglibs_hits(index_srv, simple) >= 1, NULL, "the index never saw a request for %s/", simple);
    SG_CHECK(sglibs_hits(index_srv, whl) >= 1, NULL, "the index never served %s", whl);
    SG_CHECK(sglibs_hits(index_srv, "") > before, NULL, "no index request");
    int created = sglibs_installers_created_since(proxy_id, t0);
    SG_CHECK(created == 1, NULL, "%d installer container(s) were created, expected 1", created);
    int left = sglibs_installers_now(proxy_id);
    SG_CHECK(left == 0, NULL, "%d installer container(s) remain after the reply", left);

    /* the same interpreter (its variable is still there) now imports it */
    pathf(code, sizeof(code), "import %s\nprint(%s.VALUE)", py_name, py_name);
    expect_run(pip_sid, code, "42\n");
    pathf(code, sizeof(code), "print(started, %s.double(21), %s.VERSION)", py_name, py_name);
    expect_run(pip_sid, code, "yes 42 1.0\n");
    /* pip_sid stays open for test 7 */
}

/* ------------------------------------------------------------------------
 * 2. The store is the cache: no installer, no index
 * ------------------------------------------------------------------------ */

static void test_pip_from_store(void **state)
{
    char code[256];
    SG_CHECK(pip_first > 0, NULL, "test 1 did not install the package: nothing to compare with");
    sglibs_wall_t t0 = sglibs_wall_now();
    int before = sglibs_hits(index_srv, "");

    char *sid = create_session("python");
    /* what test 1 installed belongs to its session only */
    pathf(code, sizeof(code), "import %s", py_name);
    json_object *o = run_code(sid, code, NULL);
    SG_CHECK(!SG_BOOL(o, "success") && strstr(SG_STR(o, "stderr"), "ModuleNotFoundError") != NULL, o,
             "a new session must not see another session's installs");
    json_object_put(o);
    pip_second = expect_store_install("pip", sid, py_name, "1.0", "1.0", pip_first);
    pathf(code, sizeof(code), "import %s\nprint(%s.VALUE)", py_name, py_name);
    expect_run(sid, code, "42\n");
    session_done(sid);

    int after = sglibs_hits(index_srv, "");
    SG_CHECK(after == before, NULL, "the index saw %d request(s): the store should have served them", after - before);
    int created = sglibs_installers_created_since(proxy_id, t0);
    SG_CHECK(created == 0, NULL, "%d installer container(s) were created for a package in the store", created);

    /* "libraries" on an execute, in another new session: a bare name is a
     * spec of its own in the store (what it resolves to is pinned by its
     * first fetch, never by another spec's), so it is fetched once ... */
    const char *libs[] = {py_name, NULL};
    t0 = sglibs_wall_now();
    run_in_new_session(code, libs, "42\n");
    created = sglibs_installers_created_since(proxy_id, t0);
    SG_CHECK(created == 1, NULL, "%d installer container(s) were created for the spec \"%s\", expected 1", created,
             py_name);

    /* ... and then served by the store: in another new session, and on
     * POST /execute */
    t0 = sglibs_wall_now();
    before = sglibs_hits(index_srv, "");
    run_in_new_session(code, libs, "42\n");
    o = run_ephemeral("python", code, libs);
    expect_output(o, "42\n");
    json_object_put(o);

    after = sglibs_hits(index_srv, "");
    SG_CHECK(after == before, NULL, "the index saw %d request(s): the store should have served them", after - before);
    created = sglibs_installers_created_since(proxy_id, t0);
    SG_CHECK(created == 0, NULL, "%d installer container(s) were created for a package in the store", created);
}

/* ------------------------------------------------------------------------
 * 3. An exact version, and "latest"
 * ------------------------------------------------------------------------ */

static void test_pip_version(void **state)
{
    char code[256], whl[200];
    pathf(whl, sizeof(whl), "/packages/%s", py_whl[1]);
    int before = sglibs_hits(index_srv, whl);
    char *sid = create_session("python");
    json_object *o = install(sid, py_name, "2.0");
    sglibs_expect_installed(o, "2.0", false);
    json_object_put(o);
    SG_CHECK(sglibs_hits(index_srv, whl) > before, NULL, "the index never served %s", whl);
    pathf(code, sizeof(code), "import %s\nprint(%s.VERSION, %s.VALUE)", py_name, py_name, py_name);
    expect_run(sid, code, "2.0 42\n");
    session_done(sid);

    /* "latest" is no version: the bare name's spec, which test 2 fetched
     * (the newest the index had) */
    sid = create_session("python");
    o = install(sid, py_name, "latest");
    sglibs_expect_installed(o, "3.0", true);
    json_object_put(o);
    session_done(sid);
}

/* ------------------------------------------------------------------------
 * 4. npm
 * ------------------------------------------------------------------------ */

static void test_npm_install(void **state)
{
    char code[256], doc[200], tgz[300];
    pathf(doc, sizeof(doc), "/%s", js_name);
    pathf(tgz, sizeof(tgz), "/%s/-/%s", js_name, js_tgz);
    pathf(code, sizeof(code), "console.log(require(\"%s\").value)", js_name);
    sglibs_wall_t t0 = sglibs_wall_now();

    char *sid = create_session("javascript");
    json_object *o = install(sid, js_name, NULL);
    sglibs_expect_installed(o, "1.0.0", false);
    npm_first = SG_DBL(o, "installation_time");
    json_object_put(o);
    SG_CHECK(sglibs_hits(index_srv, doc) >= 1, NULL, "the registry never saw a request for %s", doc);
    SG_CHECK(sglibs_hits(index_srv, tgz) >= 1, NULL, "the registry never served %s", tgz);
    int created = sglibs_installers_created_since(proxy_id, t0);
    SG_CHECK(created == 1, NULL, "%d installer container(s) were created, expected 1", created);
    expect_run(sid, code, "42\n");
    session_done(sid);

    /* again in a new session: from the store */
    int before = sglibs_hits(index_srv, "");
    t0 = sglibs_wall_now();
    sid = create_session("javascript");
    npm_second = expect_store_install("npm", sid, js_name, NULL, "1.0.0", npm_first);
    expect_run(sid, code, "42\n");
    session_done(sid);
    SG_CHECK(sglibs_hits(index_srv, "") == before, NULL, "the registry was contacted for a package in the store");
    created = sglibs_installers_created_since(proxy_id, t0);
    SG_CHECK(created == 0, NULL, "%d installer container(s) were created for a package in the store", created);
}

/* ------------------------------------------------------------------------
 * 4b. Two sessions install the same package at once: both fetch it into the
 *     same place of the store
 * ------------------------------------------------------------------------ */

static void concurrent_installs(const char *lang, const char *package, const char *version, const char *code,
                                const char *want)
{
    char *sid[2], url[2][256], body[2][256];
    sgtest_par_req_t q[2];
    memset(q, 0, sizeof(q));
    for (int i = 0; i < 2; i++) {
        sid[i] = create_session(lang);
        pathf(url[i], sizeof(url[i]), "%s/sessions/%s/libraries", sgtest_proxy_url(proxy), sid[i]);
        pathf(body[i], sizeof(body[i]), "{\"package\":\"%s\",\"version\":\"%s\"}", package, version);
        q[i] = (sgtest_par_req_t){.method = "POST",
                                  .url = url[i],
                                  .body = body[i],
                                  .body_len = strlen(body[i]),
                                  .content_type = "application/json"};
    }
    SG_CHECK(sgtest_parallel(q, 2) == 0, NULL, "cannot start threads");
    bool overlapped = q[0].finished > q[1].started && q[1].finished > q[0].started;
    for (int i = 0; i < 2; i++) {
        json_object *o = SG_TAKE_JSON(&q[i].reply, 200);
        sglibs_check_install_shape(o);
        printf("concurrent %s install %d of %s %s: %.3f s, from_store %s%s\n", lang, i + 1, package, version,
               SG_DBL(o, "installation_time"), SG_BOOL(o, "from_store") ? "true" : "false",
               overlapped ? "" : " (the two calls did not overlap)");
        if (!SG_BOOL(o, "success"))
            SG_FAIL(o, "concurrent install %d of %s %s (%s) failed", i + 1, package, version, lang);
        if (strcmp(SG_STR(o, "installed_version"), version) != 0)
            SG_FAIL(o, "installed_version: expected \"%s\"", version);
        json_object_put(o);
    }
    for (int i = 0; i < 2; i++) {
        json_object *o = run_code(sid[i], code, NULL);
        expect_output(o, want);
        json_object_put(o);
    }
    /* the fetches' private directories are gone: only complete files and
     * directories are left in the store */
    json_object *o = run_cmd(sid[0], "find /opt/sandgate/store/pip/.tmp /opt/sandgate/store/npm/.tmp -mindepth 1");
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "") == 0 && strstr(SG_STR(o, "stderr"), "pip/.tmp") == NULL, o,
             "a fetch left files behind in the store");
    json_object_put(o);
    for (int i = 0; i < 2; i++) {
        close_session(sid[i]);
        free(sid[i]);
    }
}

static void test_concurrent_installs(void **state)
{
    char code[256];
    sglibs_wall_t t0 = sglibs_wall_now();
    pathf(code, sizeof(code), "import %s\nprint(%s.VERSION)", py_name, py_name);
    concurrent_installs("python", py_name, "3.0", code, "3.0\n");
    /* "name@1.0.0" is a place of its own in the store: test 4 fetched "name" */
    pathf(code, sizeof(code), "console.log(require(\"%s\").value)", js_name);
    concurrent_installs("javascript", js_name, "1.0.0", code, "42\n");
    int left = sglibs_installers_now(proxy_id);
    SG_CHECK(left == 0, NULL, "%d installer container(s) remain", left);
    printf("concurrent installs: %d installer container(s) created\n", sglibs_installers_created_since(proxy_id, t0));
}

/* ------------------------------------------------------------------------
 * 5. Refused names and versions, a package the index lacks, compiled
 *    languages
 * ------------------------------------------------------------------------ */

static void test_refused(void **state)
{
    char missing[96], path[256], simple[200];
    int before = sglibs_hits(index_srv, "");
    sglibs_wall_t t0 = sglibs_wall_now();
    char *sid = create_session("python");

    expect_refused(sid, "os", NULL, "\"os\"");
    expect_refused(sid, "OS", NULL, "\"OS\"");
    expect_refused(sid, "subprocess", "1.0", "\"subprocess\"");
    const char *bad_names[] = {"../x", "a b", "-x", "", "numpy;rm -rf /", "x/../../etc", NULL};
    for (size_t i = 0; bad_names[i] != NULL; i++)
        expect_refused(sid, bad_names[i], NULL, NULL);
    expect_refused(sid, py_name, "1.0; rm", "version");
    expect_refused(sid, py_name, "x y", "version");
    /* the same checks on an execute's "libraries" */
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    sgtest_reply_t r;
    sgtest_call(proxy, "POST", path, "{\"code\":\"print(1)\",\"libraries\":[\"subprocess\"]}", &r);
    json_object *o = SG_EXPECT_ERROR(&r, 400, "bad_library");
    sgtest_reply_free(&r);
    SG_CHECK(strstr(SG_STR(o, "detail"), "subprocess") != NULL, o, "the detail must name subprocess");
    json_object_put(o);
    SG_CHECK(sglibs_hits(index_srv, "") == before, NULL, "a refused request reached the index");
    int created = sglibs_installers_created_since(proxy_id, t0);
    SG_CHECK(created == 0, NULL, "a refused request created %d installer container(s)", created);

    /* a valid name the index does not have: 200, success false */
    pathf(missing, sizeof(missing), "%s_missing", py_name);
    pathf(simple, sizeof(simple), "/simple/%s-missing", py_norm);
    o = install(sid, missing, NULL);
    SG_CHECK(!SG_BOOL(o, "success"), o, "installing a package the index does not have must fail");
    SG_CHECK(!SG_BOOL(o, "from_store"), o, "from_store");
    SG_CHECK(strstr(SG_STR(o, "message"), missing) != NULL, o, "the message must name the package");
    json_object_put(o);
    SG_CHECK(sglibs_hits(index_srv, simple) >= 1, NULL, "the index never saw a request for %s/", simple);
    int left = sglibs_installers_now(proxy_id);
    SG_CHECK(left == 0, NULL, "%d installer container(s) remain after a failed fetch", left);
    /* the same on an execute: setup_failed in stage "libraries", the code never runs */
    const char *libs[] = {missing, NULL};
    o = run_code(sid, "print('never')", libs);
    SG_CHECK(strcmp(SG_STR(o, "reason"), "setup_failed") == 0, o, "reason must be setup_failed");
    SG_CHECK(strcmp(SG_STR(o, "stage"), "libraries") == 0, o, "stage must be libraries");
    SG_CHECK(strstr(SG_STR(o, "stderr"), missing) != NULL, o, "stderr must name the package");
    SG_CHECK(strstr(SG_STR(o, "stdout"), "never") == NULL, o, "the code must not run");
    json_object_put(o);
    /* the session is still fine */
    expect_run(sid, "print(6 * 7)", "42\n");
    session_done(sid);

    /* a compiled language has no package manager */
    if (!image_exists(sgtest_image("cpp")))
        SG_FAIL(NULL, "the image sandgate/cpp:latest does not exist: build it with "
                      "./deploy/build-images.sh <build dir> cpp");
    sid = create_session("cpp");
    expect_refused(sid, "numpy", NULL, "cpp");
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    sgtest_call(proxy, "POST", path, "{\"code\":\"int main(){}\",\"libraries\":[\"numpy\"]}", &r);
    o = SG_EXPECT_ERROR(&r, 400, NULL);
    sgtest_reply_free(&r);
    SG_CHECK(strstr(SG_STR(o, "detail"), "libraries") != NULL, o, "the detail must name the field");
    json_object_put(o);
    session_done(sid);
}

/* ------------------------------------------------------------------------
 * 6. An index that accepts connections and never answers
 * ------------------------------------------------------------------------ */

/* An inspected installer container: the package manager's network, and
 * otherwise a sandbox's restrictions; the store mounted read-write. */
static void check_installer(json_object *c, const char *sid, const char *volume)
{
    SG_CHECK(c != NULL, NULL, "no installer container was seen while the install waited for the index");
    json_object *hc = sgtest_jpath(c, "HostConfig"), *v;
    v = sgtest_jpath(c, "HostConfig.NetworkMode");
    SG_CHECK(v != NULL && strcmp(json_object_get_string(v), "host") == 0, hc,
             "the installer's network must be SANDGATE_INSTALL_NETWORK (host)");
    SG_CHECK(sgtest_json_array_has_string(sgtest_jpath(c, "HostConfig.CapDrop"), "ALL"), hc, "CapDrop ALL");
    SG_CHECK(sgtest_json_array_has_string(sgtest_jpath(c, "HostConfig.SecurityOpt"), "no-new-privileges"), hc,
             "no-new-privileges");
    v = sgtest_jpath(c, "HostConfig.ReadonlyRootfs");
    SG_CHECK(v != NULL && json_object_get_boolean(v), hc, "a read-only root");
    v = sgtest_jpath(c, "HostConfig.Privileged");
    SG_CHECK(v == NULL || !json_object_get_boolean(v), hc, "not privileged");
    v = sgtest_jpath(c, "HostConfig.Memory");
    SG_CHECK(v != NULL && json_object_get_int64(v) > 0, hc, "a memory limit");
    v = sgtest_jpath(c, "HostConfig.PidsLimit");
    SG_CHECK(v != NULL && json_object_get_int64(v) > 0, hc, "a pids limit");
    v = sgtest_jpath(c, "Config.User");
    const char *user = v != NULL ? json_object_get_string(v) : "";
    SG_CHECK(*user != '\0' && strcmp(user, "root") != 0 && strncmp(user, "0", 1) != 0, c,
             "the installer must not run as root (User \"%s\")", user);
    v = sgtest_jpath(c, "Config.Labels");
    json_object *ls = NULL;
    SG_CHECK(v != NULL && json_object_object_get_ex(v, "sandgate.session", &ls) &&
                 strcmp(json_object_get_string(ls), sid) == 0,
             v, "the installer must carry its session's label");
    json_object *mounts = sgtest_jpath(c, "Mounts");
    bool store_rw = false;
    for (size_t i = 0; mounts != NULL && i < json_object_array_length(mounts); i++) {
        json_object *m = json_object_array_get_idx(mounts, i), *d = sgtest_jpath(m, "Destination"),
                    *rw = sgtest_jpath(m, "RW"), *name = sgtest_jpath(m, "Name");
        if (d != NULL && strcmp(json_object_get_string(d), "/opt/sandgate/store") == 0)
            store_rw = rw != NULL && json_object_get_boolean(rw) && name != NULL &&
                       strcmp(json_object_get_string(name), volume) == 0;
    }
    SG_CHECK(store_rw, c, "the installer must mount the store %s read-write", volume);
}

static int slow_teardown(void **state)
{
    int rc = sglibs_proxy_finish(&slow_proxy, slow_proxy_id, slow_volume, REMOVAL_S);
    return check_proxy_alive(state) != 0 || rc != 0 ? -1 : 0;
}

static void test_install_timeout(void **state)
{
    char pip_kv[160], npm_kv[160], store_kv[200], timeout_kv[64], name[96];
    slow_proxy_id = sgtest_new_proxy_id();
    SG_CHECK(slow_proxy_id != NULL, NULL, "no proxy id");
    snprintf(slow_volume, sizeof(slow_volume), "%s-store", slow_proxy_id);
    snprintf(pip_kv, sizeof(pip_kv), "SANDGATE_PIP_INDEX_URL=http://127.0.0.1:%d/simple", sglibs_port(hold_srv));
    snprintf(npm_kv, sizeof(npm_kv), "SANDGATE_NPM_REGISTRY=http://127.0.0.1:%d/", sglibs_port(hold_srv));
    snprintf(store_kv, sizeof(store_kv), "SANDGATE_STORE_VOLUME=%s", slow_volume);
    snprintf(timeout_kv, sizeof(timeout_kv), "SANDGATE_INSTALL_TIMEOUT=%d", SHORT_TIMEOUT_S);
    const char *env[] = {
        "SANDGATE_POOL_SIZE=0", "SANDGATE_INSTALL_NETWORK=host", pip_kv, npm_kv, store_kv, timeout_kv, NULL};
    slow_proxy = sgtest_proxy_start(slow_proxy_id, env);
    SG_CHECK(slow_proxy != NULL, NULL, "cannot start the second proxy");

    char *sid = create_session_on(slow_proxy, "python");
    int accepted_before = sglibs_accepted(hold_srv);
    pathf(name, sizeof(name), "%s_slow", py_name);
    /* the install runs on a thread; meanwhile, its installer container is
     * looked at while it waits for the silent index */
    char url[256], body[256];
    pathf(url, sizeof(url), "%s/sessions/%s/libraries", sgtest_proxy_url(slow_proxy), sid);
    pathf(body, sizeof(body), "{\"package\":\"%s\",\"version\":\"1.0\"}", name);
    sgtest_par_req_t q = {
        .method = "POST", .url = url, .body = body, .body_len = strlen(body), .content_type = "application/json"};
    sgtest_batch_t *b = sgtest_batch_start(&q, 1);
    SG_CHECK(b != NULL, NULL, "cannot start a thread");
    json_object *c = NULL;
    char **ids = NULL;
    char l1[192];
    snprintf(l1, sizeof(l1), "sandgate.proxy=%s", slow_proxy_id);
    const char *labels[] = {l1, "sandgate.kind=installer", NULL};
    for (double end = sgtest_now() + SHORT_TIMEOUT_S; c == NULL && sgtest_now() < end;) {
        ids = sgtest_docker_ids(labels);
        if (ids != NULL && ids[0] != NULL)
            c = sgtest_docker_inspect(ids[0], NULL);
        sgtest_strv_free(ids);
        if (c == NULL)
            usleep(50 * 1000);
    }
    sgtest_batch_join(b);
    check_installer(c, sid, slow_volume);
    json_object_put(c);

    json_object *o = SG_EXPECT_JSON(&q.reply, 200);
    double seconds = q.reply.seconds;
    sgtest_reply_free(&q.reply);
    sglibs_check_install_shape(o);
    printf("install against a silent index (timeout %d s): reply after %.2f s, %d connection(s) held\n",
           SHORT_TIMEOUT_S, seconds, sglibs_accepted(hold_srv) - accepted_before);
    SG_CHECK(!SG_BOOL(o, "success"), o, "an install from a silent index must fail");
    const char *msg = SG_STR(o, "message");
    char want[32];
    pathf(want, sizeof(want), "%d s", SHORT_TIMEOUT_S);
    SG_CHECK(strstr(msg, want) != NULL && strstr(msg, "time") != NULL, o,
             "the message must say the install ran out of time (%s)", want);
    SG_CHECK(seconds >= SHORT_TIMEOUT_S - 0.5, o, "the reply came after %.2f s, before the %d s timeout", seconds,
             SHORT_TIMEOUT_S);
    SG_CHECK(seconds < TIMEOUT_BOUND_S, o, "the reply took %.2f s (bound %.0f s)", seconds, TIMEOUT_BOUND_S);
    json_object_put(o);
    SG_CHECK(sglibs_accepted(hold_srv) > accepted_before, NULL,
             "the installer never connected to the silent index: the timeout was not what stopped it");
    int left = sglibs_installers_now(slow_proxy_id);
    SG_CHECK(left == 0, NULL, "%d installer container(s) remain after the timeout", left);

    /* the session still runs code */
    o = run_code_on(slow_proxy, sid, "print(6 * 7)", NULL);
    expect_output(o, "42\n");
    json_object_put(o);
    close_session_on(slow_proxy, slow_proxy_id, sid);
    free(sid);

    int st = sgtest_proxy_stop(slow_proxy);
    slow_proxy = NULL;
    SG_CHECK(st == 0, NULL, "the second proxy ended with status %d", st);
    SG_CHECK(sgtest_docker_count(slow_proxy_id) == 0, NULL, "containers of the second proxy remain");
    SG_CHECK(sglibs_volume_remove(slow_volume) == 204, NULL, "cannot remove the volume %s", slow_volume);
    SG_CHECK(sglibs_volume_status(slow_volume) == 404, NULL, "the volume %s still exists", slow_volume);
}

/* ------------------------------------------------------------------------
 * 7. The sandbox that installed still has no network
 * ------------------------------------------------------------------------ */

static void test_sandbox_still_offline(void **state)
{
    char url[128], cmd[512];
    SG_CHECK(pip_sid != NULL, NULL, "test 1 did not leave its session");

    /* from the kernel the sandbox runs on (gVisor has no /sys/class/net) */
    json_object *o = run_cmd(pip_sid, "python3 -c 'import socket; print(sorted(n for _, n in socket.if_nameindex()))'");
    expect_output(o, "['lo']\n");
    json_object_put(o);

    char *cid = sgtest_docker_session_container(proxy_id, pip_sid);
    SG_CHECK(cid != NULL, NULL, "no container for session %s", pip_sid);
    json_object *c = sgtest_docker_inspect(cid, NULL);
    free(cid);
    SG_CHECK(c != NULL, NULL, "cannot inspect the session's container");
    SG_ASSERT_HARDENED(c);
    json_object *mounts = sgtest_jpath(c, "Mounts");
    bool store_ro = false;
    for (size_t i = 0; mounts != NULL && i < json_object_array_length(mounts); i++) {
        json_object *m = json_object_array_get_idx(mounts, i), *d = sgtest_jpath(m, "Destination"),
                    *rw = sgtest_jpath(m, "RW"), *name = sgtest_jpath(m, "Name");
        if (d != NULL && strcmp(json_object_get_string(d), "/opt/sandgate/store") == 0)
            store_ro = rw != NULL && !json_object_get_boolean(rw) && name != NULL &&
                       strcmp(json_object_get_string(name), store_volume) == 0;
    }
    SG_CHECK(store_ro, c, "the store %s must be mounted read-only at /opt/sandgate/store", store_volume);
    json_object_put(c);
    o = run_cmd(pip_sid, "touch /opt/sandgate/store/x");
    SG_CHECK(!SG_BOOL(o, "success"), o, "the sandbox could write into the store");
    json_object_put(o);

    /* the index answers from the host ... */
    pathf(url, sizeof(url), "http://127.0.0.1:%d/simple/", sglibs_port(index_srv));
    sgtest_reply_t r;
    sgtest_http("GET", url, NULL, 0, NULL, 10, &r);
    SG_CHECK(r.status == 200, NULL, "the index does not answer the host: HTTP %ld %s", r.status, r.error);
    sgtest_reply_free(&r);
    int before = sglibs_hits(index_srv, "");
    /* ... and not the sandbox: 127.0.0.1 there is the container's own loopback */
    pathf(cmd, sizeof(cmd), "python3 -c \"import urllib.request as u; u.urlopen('%s', timeout=2)\"", url);
    o = run_cmd(pip_sid, cmd);
    SG_CHECK(!SG_BOOL(o, "success") && SG_INT(o, "exit_code") != 0, o, "the sandbox reached %s", url);
    SG_CHECK(strcasestr(SG_STR(o, "stderr"), "refused") != NULL, o, "expected \"connection refused\"");
    json_object_put(o);
    /* the same from the kernel */
    char code[256];
    pathf(code, sizeof(code),
          "import urllib.request as u\ntry:\n    u.urlopen('%s', timeout=2)\n    print('reached')\n"
          "except OSError as e:\n    print('refused' if 'refused' in str(e).lower() else repr(e))",
          url);
    expect_run(pip_sid, code, "refused\n");
    SG_CHECK(sglibs_hits(index_srv, "") == before, NULL, "the index saw %d request(s) from the sandbox",
             sglibs_hits(index_srv, "") - before);

    close_session(pip_sid);
    free(pip_sid);
    pip_sid = NULL;
}

/* ------------------------------------------------------------------------
 * 8. Libraries the image already has
 * ------------------------------------------------------------------------ */

static void test_preinstalled(void **state)
{
    const char *libs[] = {"numpy", NULL};
    const char *code = "import numpy\nprint(numpy.array([1, 2]).sum())";
    int before = sglibs_hits(index_srv, "");
    sglibs_wall_t t0 = sglibs_wall_now();
    char *sid = create_session("python");
    json_object *o = run_code(sid, code, libs);
    expect_output(o, "3\n");
    json_object_put(o);
    session_done(sid);
    o = run_ephemeral("python", code, libs);
    expect_output(o, "3\n");
    json_object_put(o);
    SG_CHECK(sglibs_hits(index_srv, "") == before, NULL, "the index was contacted for numpy");
    int created = sglibs_installers_created_since(proxy_id, t0);
    SG_CHECK(created == 0, NULL, "%d installer container(s) were created for numpy", created);
}

/* ------------------------------------------------------------------------
 * 9. Last: nothing is left
 * ------------------------------------------------------------------------ */

static void test_zz_nothing_left(void **state)
{
    sgtest_close_all_sessions(proxy);
    char l1[192];
    snprintf(l1, sizeof(l1), "sandgate.proxy=%s", proxy_id);
    const char *labels[] = {l1, NULL};
    int n = sgtest_docker_wait_count(labels, 0, REMOVAL_S);
    SG_CHECK(n == 0, NULL, "%d container(s) of proxy %s remain after every session was closed", n, proxy_id);

    proxy_stopped_on_purpose = true;
    int st = sgtest_proxy_stop(proxy);
    proxy = NULL;
    SG_CHECK(st == 0, NULL, "the proxy ended with status %d", st);
    SG_CHECK(sgtest_docker_count(proxy_id) == 0, NULL, "containers of %s remain after it stopped", proxy_id);
    SG_CHECK(sglibs_installers_now(proxy_id) == 0, NULL, "installer containers remain");

    SG_CHECK(sglibs_volume_status(store_volume) == 200, NULL, "the store volume %s was never created", store_volume);
    long vs = sglibs_volume_remove(store_volume);
    SG_CHECK(vs == 204, NULL, "DELETE /volumes/%s: HTTP %ld", store_volume, vs);
    SG_CHECK(sglibs_volume_status(store_volume) == 404, NULL, "the store volume %s still exists", store_volume);

    int ports[2] = {sglibs_port(index_srv), sglibs_port(hold_srv)};
    sglibs_server_stop(index_srv);
    sglibs_server_stop(hold_srv);
    for (int i = 0; i < 2; i++)
        SG_CHECK(sglibs_port_closed(ports[i]), NULL, "127.0.0.1:%d still accepts connections", ports[i]);
    printf("index: %d request(s) served in all\n", sglibs_total(index_srv));

    sglibs_rm_tree(tmpdir);
    struct stat st_buf;
    SG_CHECK(stat(tmpdir, &st_buf) != 0 && errno == ENOENT, NULL, "%s still exists", tmpdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_pip_install, check_proxy_alive),
        cmocka_unit_test_teardown(test_pip_from_store, check_proxy_alive),
        cmocka_unit_test_teardown(test_pip_version, check_proxy_alive),
        cmocka_unit_test_teardown(test_npm_install, check_proxy_alive),
        cmocka_unit_test_teardown(test_concurrent_installs, check_proxy_alive),
        cmocka_unit_test_teardown(test_refused, check_proxy_alive),
        cmocka_unit_test_teardown(test_install_timeout, slow_teardown),
        cmocka_unit_test_teardown(test_sandbox_still_offline, check_proxy_alive),
        cmocka_unit_test_teardown(test_preinstalled, check_proxy_alive),
        cmocka_unit_test_teardown(test_zz_nothing_left, check_proxy_alive),
    };
    return cmocka_run_group_tests_name("proxy_libraries", tests, group_setup, group_teardown);
}
