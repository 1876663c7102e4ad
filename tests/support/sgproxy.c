/*
 * sgproxy.c — a sandgate-proxy of a test's own (see sgtest.h), its session
 * API as the proxy suites call it, and a proxy suite's teardown.
 */
#include "sgtest_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define START_DEADLINE_S 60.0

struct sgtest_proxy {
    sgtest__server_t s; /* first: the registry holds &p->s */
    char id[128];
};

const char *sgtest_image(const char *lang)
{
    static char bufs[8][128];
    static unsigned next;
    const char *prefix = getenv("SANDGATE_IMAGE_PREFIX");
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof(bufs[0]), "%s%s:latest", prefix != NULL ? prefix : "sandgate/", lang);
    return b;
}

char *sgtest_new_proxy_id(void)
{
    char hex[17];
    sgtest__random_hex(hex, 8);
    char *id = malloc(64);
    if (id == NULL)
        return NULL;
    snprintf(id, 64, "sgtest-%d-%s", (int)getpid(), hex);
    return id;
}

const char *sgtest_proxy_status(sgtest_proxy_t *p)
{
    static __thread char buf[96];
    return sgtest__server_status(&p->s, buf, sizeof(buf));
}

void sgtest_proxy_print_log(sgtest_proxy_t *p, int lines)
{
    sgtest__server_print_log(&p->s, lines);
}

int sgtest_proxy_stop(sgtest_proxy_t *p)
{
    return p != NULL ? sgtest__server_end(&p->s, true) : 0;
}

void sgtest_proxy_kill9(sgtest_proxy_t *p)
{
    if (p != NULL)
        sgtest__server_end(&p->s, false);
}

sgtest_proxy_t *sgtest_proxy_start(const char *proxy_id, const char *const *extra_env)
{
    sgtest__curl_ready();
    const char *bin = sgtest__bin("SANDGATE_PROXY_BIN");
    if (bin == NULL)
        return NULL;
    char name[160];
    snprintf(name, sizeof(name), "proxy %s", proxy_id);
    sgtest_proxy_t *p = sgtest__server_new(sizeof(*p), SGTEST__PROXY, name, "sgtest-proxy", "proxy.log", NULL);
    if (p == NULL)
        return NULL;
    snprintf(p->id, sizeof(p->id), "%s", proxy_id);
    /* a PORT=N of extra_env (a proxy started again where a gateway expects it) */
    p->s.port = 0;
    for (size_t i = 0; extra_env != NULL && extra_env[i] != NULL; i++)
        if (sgtest_env_key_is(extra_env[i], "PORT"))
            p->s.port = atoi(extra_env[i] + 5);
    if (p->s.port <= 0)
        p->s.port = sgtest_free_port();
    if (p->s.port <= 0) {
        fprintf(stderr, "sgtest: no free loopback port: %s\n", strerror(errno));
        goto Error;
    }
    snprintf(p->s.url, sizeof(p->s.url), "http://127.0.0.1:%d", p->s.port);

    char host_kv[] = "HOST=127.0.0.1", port_kv[32], id_kv[160];
    snprintf(port_kv, sizeof(port_kv), "PORT=%d", p->s.port);
    snprintf(id_kv, sizeof(id_kv), "SANDGATE_PROXY_ID=%s", proxy_id);
    size_t nextra = 0;
    while (extra_env != NULL && extra_env[nextra] != NULL)
        nextra++;
    const char **set = calloc(nextra + 6, sizeof(*set));
    if (set == NULL)
        goto Error;
    /* Library installs stay off unless a test sets them up: then no shared
     * store volume is made and no installer ever looks for a public index. */
    static char no_store_kv[] = "SANDGATE_STORE_VOLUME=";
    /* The state file a proxy keeps for its successor (adopt.h) goes to a
     * directory of the tests', not the system's, unless the test names one;
     * files are named by proxy id, unique per test proxy. */
    static char state_kv[] = "SANDGATE_PROXY_STATE_DIR=/tmp/sgtest-proxy-state";
    bool store_given = false, state_given = false;
    for (size_t i = 0; i < nextra; i++) {
        set[i] = extra_env[i];
        store_given = store_given || sgtest_env_key_is(no_store_kv, extra_env[i]);
        state_given = state_given || sgtest_env_key_is(state_kv, extra_env[i]);
    }
    size_t nset = nextra;
    set[nset++] = host_kv;
    set[nset++] = port_kv;
    set[nset++] = id_kv;
    if (!store_given)
        set[nset++] = no_store_kv;
    if (!state_given)
        set[nset++] = state_kv;
    /* The proxy's own default (auto: runsc when the engine offers it) unless
     * the environment or the test names a runtime: SANDGATE_RUNTIME=runc
     * ctest ... runs the suites on runc (README "Tests"). */
    return sgtest__server_exec(&p->s, bin, set, nset, START_DEADLINE_S);

Error:
    return sgtest__server_fail(&p->s);
}

const char *sgtest_proxy_url(const sgtest_proxy_t *p)
{
    return p != NULL ? p->s.url : "http://127.0.0.1:0";
}

const char *sgtest_proxy_id(const sgtest_proxy_t *p)
{
    return p->id;
}

pid_t sgtest_proxy_pid(const sgtest_proxy_t *p)
{
    return p->s.child.pid;
}

bool sgtest_proxy_alive(sgtest_proxy_t *p)
{
    return !sgtest_child_reap(&p->s.child, WNOHANG);
}

static int no_proxy(sgtest_reply_t *out)
{
    memset(out, 0, sizeof(*out));
    out->body = calloc(1, 1);
    out->headers = calloc(1, 1);
    snprintf(out->error, sizeof(out->error), "no proxy is running");
    return -1;
}

int sgtest_call(const sgtest_proxy_t *p, const char *method, const char *path, const char *json_body,
                sgtest_reply_t *out)
{
    if (p == NULL)
        return no_proxy(out);
    char url[2048];
    snprintf(url, sizeof(url), "%s%s", p->s.url, path);
    return sgtest_http(method, url, json_body, json_body ? strlen(json_body) : 0, json_body ? "application/json" : NULL,
                       0, out);
}

int sgtest_call_json(const sgtest_proxy_t *p, const char *method, const char *path, json_object *body, long timeout_s,
                     sgtest_reply_t *out)
{
    if (p == NULL)
        return no_proxy(out);
    char url[2048];
    snprintf(url, sizeof(url), "%s%s", p->s.url, path);
    const char *s = body ? json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN) : NULL;
    return sgtest_http(method, url, s, s ? strlen(s) : 0, s ? "application/json" : NULL, timeout_s, out);
}

json_object *sgtest__call_take(const sgtest_proxy_t *p, const char *method, const char *path, const char *json_body,
                               long status, const char *code, int error, const char *file, int line)
{
    sgtest_reply_t r;
    sgtest_call(p, method, path, json_body, &r);
    if (!error)
        return sgtest__take_json(&r, status, file, line);
    sgtest__take_error(&r, status, code, file, line);
    return NULL;
}

/* ---- the harness of a suite with a proxy of its own ---- */

void sgtest_close_all_sessions(const sgtest_proxy_t *p)
{
    sgtest_reply_t r;
    if (p == NULL)
        return;
    sgtest_call(p, "GET", "/sessions", NULL, &r);
    json_object *o = r.status == 200 ? json_tokener_parse(r.body) : NULL;
    sgtest_reply_free(&r);
    json_object *arr = NULL;
    if (o != NULL && json_object_object_get_ex(o, "sessions", &arr) && json_object_is_type(arr, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(arr); i++) {
            char path[256];
            snprintf(path, sizeof(path), "/sessions/%s", json_object_get_string(json_object_array_get_idx(arr, i)));
            sgtest_reply_t d;
            sgtest_call(p, "DELETE", path, NULL, &d);
            if (d.status != 200)
                fprintf(stderr, "teardown: DELETE %s: HTTP %ld %s\n", path, d.status, d.body);
            sgtest_reply_free(&d);
        }
    }
    json_object_put(o);
}

/* 0 while *pp is alive; else its log, and *pp = restart(ctx): -1. */
static int check_alive(sgtest_proxy_t **pp, sgtest_proxy_t *(*restart)(void *), void *ctx)
{
    if (*pp != NULL && sgtest_proxy_alive(*pp))
        return 0;
    if (*pp != NULL) {
        fprintf(stderr, "the proxy died during this test:\n");
        sgtest_proxy_print_log(*pp, 60);
        sgtest_proxy_kill9(*pp);
    }
    *pp = restart(ctx);
    return -1;
}

static sgtest_proxy_t *call_restart(void *fn)
{
    sgtest_proxy_t *(**restart)(void) = fn;
    return (*restart)();
}

int sgtest_proxy_check_alive(sgtest_proxy_t **pp, sgtest_proxy_t *(*restart)(void))
{
    return check_alive(pp, call_restart, &restart);
}

int sgtest_proxy_finish(sgtest_proxy_t **pp, const char *proxy_id, double removal_s)
{
    int rc = 0;
    if (*pp != NULL) {
        sgtest_close_all_sessions(*pp);
        char l[192];
        snprintf(l, sizeof(l), "sandgate.proxy=%s", proxy_id);
        const char *labels[] = {l, NULL};
        int left = sgtest_docker_wait_count(labels, 0, removal_s);
        if (left != 0) {
            fprintf(stderr, "teardown: %d container(s) labelled %s remain after every session was closed\n", left, l);
            sgtest_proxy_print_log(*pp, 40);
            rc = -1;
        }
        int st = sgtest_proxy_stop(*pp);
        *pp = NULL;
        if (st != 0) {
            fprintf(stderr, "teardown: proxy %s did not exit with status 0 on SIGTERM (wait status %d)\n", proxy_id,
                    st);
            rc = -1;
        }
    }
    if (proxy_id != NULL) {
        int removed = sgtest_docker_remove_all(proxy_id);
        if (removed != 0) {
            fprintf(stderr, "teardown: %d leftover container(s) of %s force-removed\n", removed, proxy_id);
            rc = -1;
        }
    }
    return rc;
}

typedef struct {
    sgtest_proxy_t *p;
    char last[1024]; /* the last /health body, for the report */
} pools_wait_t;

static bool pools_full(void *ctx)
{
    pools_wait_t *w = ctx;
    sgtest_reply_t r;
    json_object *o = NULL, *pools, *size;
    bool full = false;

    if (sgtest_call(w->p, "GET", "/health", NULL, &r) == 0 && r.body != NULL) {
        snprintf(w->last, sizeof(w->last), "%ld %s", r.status, r.body);
        if (r.status == 200 && (o = json_tokener_parse(r.body)) != NULL &&
            json_object_object_get_ex(o, "pools", &pools) && json_object_object_get_ex(o, "pool_size", &size)) {
            full = json_object_get_type(pools) == json_type_object;
            json_object_object_foreach(pools, lang, n)
            {
                (void)lang;
                if (json_object_get_int64(n) < json_object_get_int64(size))
                    full = false;
            }
        }
    }
    json_object_put(o);
    sgtest_reply_free(&r);
    return full;
}

int sgtest_proxy_pools_full(sgtest_proxy_t *p, double timeout_s)
{
    pools_wait_t w = {.p = p};

    if (sgtest_poll(pools_full, &w, timeout_s, 0.2) == 0)
        return 0;
    fprintf(stderr, "the proxy's warm pools were not full within %.0f s; GET /health: %s\n", timeout_s, w.last);
    sgtest_proxy_print_log(p, 40);
    return -1;
}

static sgtest_proxy_t *suite_proxy_start(sgtest_suite_t *s)
{
    sgtest_proxy_t *p = sgtest_proxy_start(s->proxy_id, (const char *const *)s->env);
    if (p == NULL)
        fprintf(stderr, "cannot start the proxy\n");
    else if (s->on_start != NULL)
        s->on_start(p);
    return p;
}

int sgtest_suite_start(sgtest_suite_t *s, const char *const *env)
{
    size_t n = 0;
    for (; env != NULL && env[n] != NULL; n++) {
        if (n >= SGTEST_SUITE_MAX_ENV) {
            fprintf(stderr, "sgtest_suite_start: more than %d settings\n", SGTEST_SUITE_MAX_ENV);
            return -1;
        }
        if ((s->env[n] = strdup(env[n])) == NULL)
            return -1;
    }
    s->env[n] = NULL;
    if ((s->proxy_id = sgtest_new_proxy_id()) == NULL)
        return -1;
    s->proxy = suite_proxy_start(s);
    return s->proxy != NULL ? sgtest_proxy_pools_full(s->proxy, SGTEST_POOLS_FULL_S) : -1;
}

static sgtest_proxy_t *suite_restart(void *s)
{
    return suite_proxy_start(s);
}

int sgtest_suite_start_pool(sgtest_suite_t *s, int pool)
{
    char pool_kv[48];
    snprintf(pool_kv, sizeof(pool_kv), "SANDGATE_POOL_SIZE=%d", pool);
    const char *env[] = {pool_kv, NULL};
    return sgtest_suite_start(s, env);
}

int sgtest_suite_after_test(sgtest_suite_t *s)
{
    return check_alive(&s->proxy, suite_restart, s);
}

static void suite_free(sgtest_suite_t *s)
{
    free(s->proxy_id);
    s->proxy_id = NULL;
    for (size_t i = 0; s->env[i] != NULL; i++) {
        free(s->env[i]);
        s->env[i] = NULL;
    }
}

int sgtest_suite_end(sgtest_suite_t *s)
{
    int rc = sgtest_proxy_finish(&s->proxy, s->proxy_id, s->removal_s);
    suite_free(s);
    return rc;
}

int sgtest_suite_stop(sgtest_suite_t *s, bool check_exit)
{
    int rc = 0;
    if (s->proxy != NULL) {
        if (sgtest_proxy_stop(s->proxy) != 0 && check_exit)
            rc = -1;
        s->proxy = NULL;
    }
    int removed = s->proxy_id != NULL ? sgtest_docker_remove_all(s->proxy_id) : 0;
    if (removed != 0) {
        fprintf(stderr, "teardown: force-removed %d leftover container(s)\n", removed);
        rc = -1;
    }
    suite_free(s);
    return rc;
}

int sgtest_suite_teardown(void **state)
{
    return sgtest_suite_after_test(*state);
}

int sgtest_suite_group_teardown(void **state)
{
    return sgtest_suite_end(*state);
}

/* ---- the proxy's session API ---- */

char *sgtest_create_session(const sgtest_proxy_t *p, const char *lang, json_object *extra, json_object **reply_out)
{
    json_object *body = extra ? extra : json_object_new_object();
    json_object_object_add(body, "lang", json_object_new_string(lang));
    json_object_object_add(body, "keep_template", json_object_new_boolean(0));
    sgtest_reply_t r;
    sgtest_call_json(p, "POST", "/sessions", body, 0, &r);
    json_object_put(body);
    json_object *o = SG_TAKE_JSON(&r, 200);
    SG_CHECK(strcmp(SG_STR(o, "status"), "active") == 0, o, "new session is not active");
    return SG_TAKE_ID(o, "session_id", reply_out); /* a non-empty session_id */
}

json_object *sgtest_libs_array(const char *const *libs)
{
    json_object *a = json_object_new_array();
    for (size_t i = 0; libs != NULL && libs[i] != NULL; i++)
        json_object_array_add(a, json_object_new_string(libs[i]));
    return a;
}

json_object *sgtest_post_result(const sgtest_proxy_t *p, const char *path, json_object *body, double *seconds)
{
    sgtest_reply_t r;
    sgtest_call_json(p, "POST", path, body, 0, &r);
    json_object_put(body);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    if (seconds != NULL)
        *seconds = r.seconds;
    sgtest_reply_free(&r);
    SG_CHECK_RESULT_SHAPE(o);
    return o;
}

/* The body of an execute: `field` = text, plus libraries and timeout. */
static json_object *run_body(const char *field, const char *text, const char *const *libs, int timeout)
{
    json_object *b = json_object_new_object();
    json_object_object_add(b, field, json_object_new_string(text));
    if (libs != NULL)
        json_object_object_add(b, "libraries", sgtest_libs_array(libs));
    if (timeout > 0)
        json_object_object_add(b, "timeout", json_object_new_int(timeout));
    return b;
}

json_object *sgtest_run_code(const sgtest_proxy_t *p, const char *sid, const char *code, const char *const *libs,
                             int timeout, double *seconds)
{
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    return sgtest_post_result(p, path, run_body("code", code, libs, timeout), seconds);
}

void sgtest_execute_reply(const sgtest_proxy_t *p, const char *sid, const char *code, int timeout, sgtest_reply_t *r)
{
    char path[256];
    json_object *b = run_body("code", code, NULL, timeout);
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    sgtest_call_json(p, "POST", path, b, 0, r);
    json_object_put(b);
}

json_object *sgtest_run_cmd(const sgtest_proxy_t *p, const char *sid, const char *cmd, int timeout, double *seconds)
{
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s/commands", sid);
    return sgtest_post_result(p, path, run_body("command", cmd, NULL, timeout), seconds);
}

json_object *sgtest_run_ephemeral(const sgtest_proxy_t *p, const char *lang, const char *code, const char *const *libs,
                                  int timeout, double *seconds)
{
    json_object *b = run_body("code", code, libs, timeout);
    json_object_object_add(b, "lang", json_object_new_string(lang));
    return sgtest_post_result(p, "/execute", b, seconds);
}

void sgtest_close_session(const sgtest_proxy_t *p, const char *proxy_id, const char *sid, const char *cid,
                          double removal_s)
{
    char *own = cid != NULL ? strdup(cid) : sgtest_docker_session_container(proxy_id, sid);
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s", sid);
    sgtest_reply_t r;
    sgtest_call(p, "DELETE", path, NULL, &r);
    json_object *o = SG_TAKE_JSON(&r, 200);
    SG_CHECK(strcmp(SG_STR(o, "status"), "closed") == 0, o, "DELETE did not answer closed");
    json_object_put(o);
    SG_CHECK(own != NULL, NULL, "session %s had no container of its own", sid);
    SG_CHECK(sgtest_docker_wait_gone(own, removal_s, NULL) == 0, NULL,
             "container %s of closed session %s still exists %.0f s after DELETE", own, sid, removal_s);
    free(own);
}

char **sgtest_listed_sessions(const sgtest_proxy_t *p)
{
    json_object *o = SG_CALL_JSON(p, "GET", "/sessions", NULL, 200);
    json_object *arr = SG_ARR(o, "sessions");
    size_t n = json_object_array_length(arr);
    char **v = calloc(n + 1, sizeof(*v));
    assert_non_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = strdup(json_object_get_string(json_object_array_get_idx(arr, i)));
    json_object_put(o);
    return v;
}

json_object *sgtest_pool_containers(const char *proxy_id, const char *lang)
{
    char l1[192], l2[64];
    pathf(l1, sizeof(l1), "sandgate.proxy=%s", proxy_id);
    pathf(l2, sizeof(l2), "sandgate.lang=%s", lang);
    const char *labels[] = {l1, l2, "sandgate.kind=pool", NULL};
    json_object *a = sgtest_docker_list(labels);
    SG_CHECK(a != NULL, NULL, "cannot list containers from Docker");
    return a;
}

char **sgtest_idle_pool(const sgtest_proxy_t *p, const char *proxy_id, const char *lang, bool labelled_only,
                        const char *running)
{
    json_object *a = sgtest_pool_containers(proxy_id, lang);
    char **sessions = sgtest_listed_sessions(p);
    size_t n = json_object_array_length(a), k = 0;
    char **v = calloc(n + 1, sizeof(*v));
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) {
        json_object *c = json_object_array_get_idx(a, i);
        json_object *id = sgtest_jpath(c, "Id"), *state = sgtest_jpath(c, "State");
        json_object *labels_o = sgtest_jpath(c, "Labels"), *sid = NULL;
        /* label keys contain dots: no sgtest_jpath here */
        if (labels_o != NULL)
            json_object_object_get_ex(labels_o, "sandgate.session", &sid);
        if (id == NULL || state == NULL || strcmp(json_object_get_string(state), "running") != 0)
            continue;
        if ((labelled_only && sid == NULL) || (sid != NULL && sgtest_strv_has(sessions, json_object_get_string(sid))))
            continue;
        if (running != NULL && !sgtest_docker_container_runs(json_object_get_string(id), running))
            continue;
        v[k++] = strdup(json_object_get_string(id));
    }
    json_object_put(a);
    sgtest_strv_free(sessions);
    return v;
}
