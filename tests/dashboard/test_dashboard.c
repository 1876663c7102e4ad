/*
 * test_dashboard.c — the ops dashboard (GET /dashboard) in a real browser,
 * against the real stack: a sandgate-proxy on the Docker engine, a
 * sandgate-gateway serving the page built by dashboard/build.sh, once with
 * a private redis-server as its state and once with the state in the
 * gateway. dashboard.mjs drives Debian's chromium through playwright-core:
 * it logs in with the token in the fragment, sees a session made through
 * the public API appear with its tenant, sees its execution in the recent
 * list, force-closes it and sees it go (and its container leave the
 * engine), sees the 401 page for a wrong token, and logs in by the form.
 * Screenshots of each state go to $SANDGATE_TEST_ARTIFACTS (in the build
 * tree); their paths are printed.
 *
 * Before it, the admin routes the page reads are checked here: their
 * bounds (400), the admin token (401), the page's headers, that no path
 * reaches outside its directory, and what the routes say while Redis is
 * down (they answer; the state is "unavailable").
 */
#include "sggw.h"
#include "sgrun.h"

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define NODE_DEADLINE_S 240.0
#define BUILD_DEADLINE_S 600.0

static char src_dir[4096], www_dir[4096], artifacts[4096];

static const char *env_or(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : def;
}

/* Runs argv (PATH searched) in dir with the environment plus set
 * ("K=V", NULL-terminated); its output goes to ours. Waits up to
 * deadline_s, then kills it, calling tick(data) (when not NULL) every
 * 100 ms meanwhile. The exit status, or -1 (printed). */
static int run(const char *dir, char *const *argv, const char *const *set, double deadline_s, void (*tick)(void *),
               void *data)
{
    char **envp;
    size_t n = 0, k = 0;
    while (environ[n] != NULL)
        n++;
    while (set != NULL && set[k] != NULL)
        k++;
    envp = calloc(n + k + 1, sizeof(*envp));
    SG_CHECK(envp != NULL, NULL, "out of memory");
    for (size_t i = 0; i < k; i++)
        envp[i] = (char *)set[i];
    for (size_t i = 0; i < n; i++)
        envp[k + i] = environ[i]; /* later duplicates lose: getenv takes the first */

    char cwd[4096];
    pid_t pid;
    SG_CHECK(getcwd(cwd, sizeof(cwd)) != NULL && chdir(dir) == 0, NULL, "cannot enter %s: %s", dir, strerror(errno));
    int rc = posix_spawnp(&pid, argv[0], NULL, NULL, argv, envp);
    SG_CHECK(chdir(cwd) == 0, NULL, "cannot go back to %s", cwd);
    free(envp);
    if (rc != 0) {
        fprintf(stderr, "cannot start %s: %s\n", argv[0], strerror(rc));
        return -1;
    }
    double deadline = sgtest_now() + deadline_s;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        if (r < 0 && errno != EINTR)
            return -1;
        if (sgtest_now() > deadline) {
            fprintf(stderr, "%s did not end within %.0f s: killed\n", argv[0], deadline_s);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        if (tick != NULL)
            tick(data);
        usleep(100000);
    }
}

/* The page, built from the sources into the build tree (build.sh does
 * nothing when they have not changed), and the browser's driver. */
static int group_setup(void **state)
{
    char tests_dir[4200], page_dir[4200], pw[4300];
    struct stat sb;

    snprintf(src_dir, sizeof(src_dir), "%s", env_or("SANDGATE_SOURCE_DIR", "."));
    snprintf(www_dir, sizeof(www_dir), "%s", env_or("SANDGATE_TEST_WWW_DIR", "www"));
    snprintf(artifacts, sizeof(artifacts), "%s", env_or("SANDGATE_TEST_ARTIFACTS", "test-artifacts/dashboard"));
    snprintf(page_dir, sizeof(page_dir), "%s/dashboard", www_dir);
    snprintf(tests_dir, sizeof(tests_dir), "%s/tests/dashboard", src_dir);
    if (stat("/usr/bin/chromium", &sb) != 0) {
        fprintf(stderr, "/usr/bin/chromium is missing: deploy/install-deps.sh installs Debian's chromium\n");
        return -1;
    }
    char build[4200];
    snprintf(build, sizeof(build), "%s/dashboard/build.sh", src_dir);
    if (run(src_dir, (char *const[]){build, page_dir, NULL}, NULL, BUILD_DEADLINE_S, NULL, NULL) != 0) {
        fprintf(stderr, "dashboard/build.sh failed\n");
        return -1;
    }
    snprintf(pw, sizeof(pw), "%s/node_modules/playwright-core/package.json", tests_dir);
    if (stat(pw, &sb) != 0 &&
        run(tests_dir, (char *const[]){"npm", "ci", "--no-audit", "--no-fund", "--loglevel=error", NULL}, NULL,
            BUILD_DEADLINE_S, NULL, NULL) != 0) {
        fprintf(stderr, "npm ci in tests/dashboard failed\n");
        return -1;
    }
    return 0;
}

/* The admin routes the page reads: bounded, behind the admin token; the
 * page itself with its headers. */
static void check_routes(sggw_stack_t *st)
{
    sgtest_reply_t r;
    const char *bad[] = {"/admin/executions?limit=0", "/admin/executions?limit=201",     "/admin/executions?limit=1x",
                         "/admin/executions?limit=",  "/admin/stats?seconds=0",          "/admin/stats?seconds=601",
                         "/admin/stats?seconds=-5",   "/admin/stats?seconds=99999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        SGGW_ADMIN_ERROR(st->gw, "GET", bad[i], NULL, 400, "bad_field");
    const char *routes[] = {"/admin/overview", "/admin/stats", "/admin/executions", "/admin/health"};
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        SGGW_CALL_ERROR(st->gw, NULL, "GET", routes[i], NULL, 401, "unauthorized");
        json_object_put(SGGW_ADMIN_JSON(st->gw, "GET", routes[i], NULL, 200));
        SGGW_ADMIN_ERROR(st->gw, "POST", routes[i], NULL, 405, "method_not_allowed");
    }
    json_object *s = SGGW_ADMIN_JSON(st->gw, "GET", "/admin/stats?seconds=600", NULL, 200), *v;
    SG_CHECK(json_object_object_get_ex(s, "executions", &v) && json_object_array_length(v) == 600, NULL, "stats: %s",
             json_object_to_json_string(s));
    json_object_put(s);
    json_object *h = SGGW_ADMIN_JSON(st->gw, "GET", "/admin/health", NULL, 200);
    SG_CHECK(json_object_object_get_ex(h, "status", &v) && strcmp(json_object_get_string(v), "ok") == 0, NULL,
             "health: %s", json_object_to_json_string(h));
    json_object_put(h);

    SG_CHECK(sggw_call(st->gw, NULL, "GET", "/dashboard/", NULL, &r) == 0 && r.status == 200, NULL,
             "GET /dashboard/: %ld", r.status);
    char *csp = sgtest_reply_header(&r, "content-security-policy");
    SG_CHECK(csp != NULL && strstr(csp, "script-src 'self'") != NULL && strstr(csp, "unsafe") == NULL, NULL,
             "the page's CSP: %s", csp != NULL ? csp : "(none)");
    SG_CHECK(strstr(r.body, "<script type=\"module\"") != NULL, NULL, "the page: %s", r.body);
    free(csp);
    sgtest_reply_free(&r);
    SG_CHECK(sggw_call(st->gw, NULL, "GET", "/dashboard/no-such-file.js", NULL, &r) == 0 && r.status == 404, NULL,
             "a missing file: %ld", r.status);
    sgtest_reply_free(&r);
    /* nothing outside the page's directory, whatever the path says */
    const char *outside[] = {"/dashboard/../../../../../../etc/passwd", "/dashboard/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
                             "/dashboard/..%2f..%2f..%2f..%2fetc%2fpasswd", "/dashboard/assets/"};
    for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
        SG_CHECK(sggw_call(st->gw, NULL, "GET", outside[i], NULL, &r) == 0 && r.status == 404 &&
                     strstr(r.body, "root:") == NULL,
                 NULL, "GET %s: %ld %s", outside[i], r.status, r.body);
        sgtest_reply_free(&r);
    }
    SG_CHECK(sggw_call(st->gw, NULL, "POST", "/dashboard/index.html", "{}", &r) == 0 && r.status == 405, NULL,
             "POST on the page: %ld", r.status);
    sgtest_reply_free(&r);
}

/* GET path of the admin API until its reply's member `obj`.available is
 * want (polled every 100 ms, for up to 10 s); returns the reply. */
static json_object *admin_until_available(sggw_stack_t *st, const char *path, const char *obj, bool want)
{
    double deadline = sgtest_now() + 10;
    for (;;) {
        json_object *o = SGGW_ADMIN_JSON(st->gw, "GET", path, NULL, 200), *m, *a;
        if (json_object_object_get_ex(o, obj, &m) && json_object_object_get_ex(m, "available", &a) &&
            json_object_get_boolean(a) == want)
            return o;
        SG_CHECK(sgtest_now() < deadline, o, "%s: %s.available is not %d after 10 s", path, obj, want);
        json_object_put(o);
        usleep(100000);
    }
}

/* With Redis gone the page's routes still answer, and say so; they
 * recover with it. */
static void check_redis_outage(sggw_stack_t *st)
{
    json_object *o, *v;
    sggw_redis_kill(st->redis);
    o = admin_until_available(st, "/admin/overview", "state", false);
    SG_CHECK(json_object_object_get_ex(o, "sessions_total", &v) && v == NULL, o, "sessions_total while Redis is down");
    json_object_put(o);
    o = admin_until_available(st, "/admin/health", "state", false);
    SG_CHECK(json_object_object_get_ex(o, "status", &v) && strcmp(json_object_get_string(v), "degraded") == 0, o,
             "health while Redis is down");
    json_object_put(o);
    SG_CHECK(sggw_redis_restart(st->redis) == 0, NULL, "redis-server did not come back");
    json_object_put(admin_until_available(st, "/admin/health", "state", true));
    json_object_put(admin_until_available(st, "/admin/overview", "state", true));
}

/* A Redis outage the browser script asks for while it watches the page:
 * it makes the file want-redis-down in the control directory, and this
 * kills redis-server and answers with redis-down; want-redis-up starts it
 * again, answered with redis-up. */
static char control[4300];

static int control_file(const char *name, int create)
{
    char path[4400];
    snprintf(path, sizeof(path), "%s/%s", control, name);
    if (create) {
        FILE *f = fopen(path, "w");
        return f != NULL && fclose(f) == 0;
    }
    return access(path, F_OK) == 0;
}

static void outage_tick(void *data)
{
    sggw_stack_t *st = data;
    if (control_file("want-redis-down", 0) && !control_file("redis-down", 0)) {
        sggw_redis_kill(st->redis);
        control_file("redis-down", 1);
    }
    if (control_file("want-redis-up", 0) && !control_file("redis-up", 0)) {
        if (sggw_redis_restart(st->redis) == 0)
            control_file("redis-up", 1);
    }
}

/* One run of the browser against a stack with (or without) Redis. */
static sggw_stack_t st; /* the test's stack; after_test stops it when the test could not */
static bool started;

static void dashboard_run(bool redis, const char *label)
{
    char www_env[4200], gw_url[128], admin_env[256], tok_env[256], url_env[160], proxy_env[160], shots[4200],
        shots_env[4300], result[4300], result_env[4400], label_env[64], script[4300], tests_dir[4200];
    const char *gw_env[] = {www_env, NULL};
    const char *tenant = "dash-tenant";

    snprintf(www_env, sizeof(www_env), "SANDGATE_WWW_DIR=%s", www_dir);
    SG_CHECK(sggw_stack_start(&st, &(sggw_stack_opts_t){.redis = redis, .gateway_env = gw_env}) == 0, NULL,
             "the stack did not start");
    started = true;
    check_routes(&st);
    if (redis)
        check_redis_outage(&st);

    char *token = sggw_new_tenant(sggw_gateway_data_dir(st.gw), tenant, (const char *const[]){"max_sessions=1", NULL});
    snprintf(gw_url, sizeof(gw_url), "%s", sggw_gateway_url(st.gw));
    snprintf(url_env, sizeof(url_env), "GATEWAY_URL=%s", gw_url);
    snprintf(admin_env, sizeof(admin_env), "ADMIN_TOKEN=%s", sggw_gateway_admin_token(st.gw));
    snprintf(tok_env, sizeof(tok_env), "TENANT_TOKEN=%s", token);
    snprintf(proxy_env, sizeof(proxy_env), "PROXY_ID=%s", st.proxy_id);
    snprintf(shots, sizeof(shots), "%s", artifacts);
    snprintf(shots_env, sizeof(shots_env), "SHOT_DIR=%s", shots);
    snprintf(result, sizeof(result), "%s/%s-session-id", shots, label);
    snprintf(result_env, sizeof(result_env), "RESULT_FILE=%s", result);
    snprintf(label_env, sizeof(label_env), "RUN_LABEL=%s", label);
    snprintf(tests_dir, sizeof(tests_dir), "%s/tests/dashboard", src_dir);
    snprintf(script, sizeof(script), "%s/dashboard.mjs", tests_dir);
    char control_env[4400];
    snprintf(control, sizeof(control), "%s/%s-control", shots, label);
    snprintf(control_env, sizeof(control_env), "CONTROL_DIR=%s", redis ? control : "");
    const char *set[] = {url_env,   admin_env,   tok_env, "TENANT_NAME=dash-tenant", proxy_env, shots_env, result_env,
                         label_env, control_env, NULL};

    unlink(result);
    const char *names[] = {"want-redis-down", "redis-down", "want-redis-up", "redis-up"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char path[4400];
        snprintf(path, sizeof(path), "%s/%s", control, names[i]);
        unlink(path); /* an earlier run's */
    }

    int rc =
        run(tests_dir, (char *const[]){"node", script, NULL}, set, NODE_DEADLINE_S, redis ? outage_tick : NULL, &st);
    SG_CHECK(rc == 0, NULL, "the browser run (%s) failed: status %d", label, rc);

    /* the engine agrees: the force-closed session's container is gone */
    char sid[64] = "";
    FILE *f = fopen(result, "r");
    SG_CHECK(f != NULL && fgets(sid, sizeof(sid), f) != NULL && strlen(sid) >= 36, NULL, "no session id in %s", result);
    fclose(f);
    sid[36] = '\0';
    char l1[160], l2[160];
    snprintf(l1, sizeof(l1), "sandgate.proxy=%s", st.proxy_id);
    snprintf(l2, sizeof(l2), "sandgate.session=%s", sid);
    SG_CHECK(sgtest_docker_wait_count((const char *const[]){l1, l2, NULL}, 0, 10) == 0, NULL,
             "session %s still has a container", sid);
    /* and the ledger: closed by the admin */
    sggw_expect_db_closed(sggw_gateway_data_dir(st.gw), sid, "admin");
    free(token);
    started = false;
    SG_CHECK(sggw_stack_end(&st) == 0, NULL, "the stack did not stop cleanly");
}

SGGW_TEST(test_dashboard_redis)
{
    dashboard_run(true, "redis");
}

SGGW_TEST(test_dashboard_memory)
{
    dashboard_run(false, "memory");
}

static int after_test(void **state)
{
    int rc = sggw_after_test();
    if (started) {
        started = false;
        sggw_stack_end(&st);
        rc = -1;
    }
    return rc;
}

static int group_teardown(void **state)
{
    return 0;
}

int main(void)
{
    return SG_RUN_TESTS("dashboard", group_setup, group_teardown, NULL, after_test, test_dashboard_redis,
                        test_dashboard_memory);
}
