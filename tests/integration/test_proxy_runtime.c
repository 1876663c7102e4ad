/*
 * test_proxy_runtime.c — the sandboxes' runtime (SANDGATE_RUNTIME, README
 * "Sandboxes"): auto takes gVisor's runsc when the engine offers it and
 * says so, else runc with a warning in GET /health; every sandbox is made
 * on the runtime the proxy reports, and its session details and labels say
 * which; a session from the warm pool finds its kernel started under
 * either runtime; and a sandbox whose start fails (here: the agent answers
 * later than the proxy waits, or its entrypoint is missing) leaves no
 * runsc-sandbox or runsc-gofer process behind once its container is
 * removed, and no containerd container, task or shim.
 *
 * These tests set SANDGATE_RUNTIME themselves (the other suites follow the
 * environment, else the proxy's default, auto); they run whether or not the engine offers
 * runsc, and assert what the proxy must do in each case.
 */
#include "sgtest.h"
#include "sgrun.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REMOVAL_S 20.0
#define SETTLE_S 15.0 /* a removed runsc sandbox's processes are gone within this */

static sgtest_proxy_t *proxy;
static char *proxy_id;
static int engine_runsc; /* whether the engine's GET /info lists runsc */

static int engine_offers_runsc(void)
{
    sgtest_reply_t r;
    int offered = -1;
    if (sgtest_docker_call("GET", "/info", NULL, &r) != 0 || r.status != 200) {
        sgtest_reply_free(&r);
        return -1;
    }
    json_object *o = json_tokener_parse(r.body), *rt;
    if (o != NULL && json_object_object_get_ex(o, "Runtimes", &rt))
        offered = json_object_object_get_ex(rt, "runsc", NULL);
    json_object_put(o);
    sgtest_reply_free(&r);
    return offered;
}

static int group_setup(void **state)
{
    engine_runsc = engine_offers_runsc();
    if (engine_runsc < 0) {
        fprintf(stderr, "cannot read the engine's runtimes (GET /info)\n");
        return -1;
    }
    fprintf(stderr, "the engine %s runsc\n", engine_runsc ? "offers" : "does not offer");
    return 0;
}

static void stop_proxy(void)
{
    if (proxy != NULL) {
        sgtest_proxy_stop(proxy);
        proxy = NULL;
    }
    if (proxy_id != NULL) {
        int removed = sgtest_docker_remove_all(proxy_id);
        if (removed != 0)
            fprintf(stderr, "teardown: force-removed %d leftover container(s)\n", removed);
        free(proxy_id);
        proxy_id = NULL;
    }
}

static int after_test(void **state)
{
    stop_proxy();
    return 0;
}

static void start_proxy(const char *runtime, const char *extra1, const char *extra2)
{
    char rt_kv[64];
    proxy_id = sgtest_new_proxy_id();
    SG_CHECK(proxy_id != NULL, NULL, "no proxy id");
    snprintf(rt_kv, sizeof(rt_kv), "SANDGATE_RUNTIME=%s", runtime);
    const char *env[] = {rt_kv, extra1, extra2, NULL};
    proxy = sgtest_proxy_start(proxy_id, env);
    SG_CHECK(proxy != NULL, NULL, "the proxy did not start with SANDGATE_RUNTIME=%s", runtime);
}

static json_object *health(void)
{
    return SG_CALL_JSON(proxy, "GET", "/health", NULL, 200);
}

static json_object *details(const char *sid)
{
    char path[128];
    pathf(path, sizeof(path), "/sessions/%s", sid);
    return SG_CALL_JSON(proxy, "GET", path, NULL, 200);
}

/* The session's container runs on `want`, and says so in its label. */
static void expect_container_runtime(const char *sid, const char *want)
{
    char *cid = sgtest_docker_session_container(proxy_id, sid);
    SG_CHECK(cid != NULL, NULL, "no container for session %s", sid);
    json_object *c = sgtest_docker_inspect(cid, NULL);
    free(cid);
    SG_CHECK(c != NULL, NULL, "cannot inspect the container of %s", sid);
    json_object *hrt = sgtest_jpath(c, "HostConfig.Runtime"), *labels = sgtest_jpath(c, "Config.Labels"), *lrt = NULL;
    if (labels != NULL)
        json_object_object_get_ex(labels, "sandgate.runtime", &lrt);
    SG_CHECK(hrt != NULL && strcmp(json_object_get_string(hrt), want) == 0, c, "HostConfig.Runtime is not %s", want);
    SG_CHECK(lrt != NULL && strcmp(json_object_get_string(lrt), want) == 0, c, "label sandgate.runtime is not %s",
             want);
    json_object_put(c);
}

/* A session of `lang` from the pool: on `want`, its kernel already started
 * (the first execute reports state "kept": the pool's warm-up started it,
 * not this execute), and its state kept between executes. */
/* The sandgate.kind label of a session's container. */
static bool from_pool(const char *sid)
{
    char *cid = sgtest_docker_session_container(proxy_id, sid);
    SG_CHECK(cid != NULL, NULL, "no container for session %s", sid);
    json_object *c = sgtest_docker_inspect(cid, NULL), *labels = c ? sgtest_jpath(c, "Config.Labels") : NULL, *k = NULL;
    free(cid);
    bool pooled = labels != NULL && json_object_object_get_ex(labels, "sandgate.kind", &k) &&
                  strcmp(json_object_get_string(k), "pool") == 0;
    json_object_put(c);
    return pooled;
}

static void check_session(const char *lang, const char *want, const char *set, const char *get, const char *out)
{
    /* a container counts in the pool once its kernel is warm, after Docker
     * lists it: until a session gets one, it is closed and asked again */
    double deadline = sgtest_now() + 60;
    char *sid;
    for (;;) {
        sid = sgtest_create_session(proxy, lang, NULL, NULL);
        SG_CHECK(sid != NULL, NULL, "no %s session", lang);
        if (from_pool(sid))
            break;
        SG_CHECK(sgtest_now() < deadline, NULL, "no %s session came from the pool within 60 s", lang);
        sgtest_close_session(proxy, proxy_id, sid, NULL, REMOVAL_S);
        free(sid);
        usleep(100 * 1000);
    }
    json_object *d = details(sid);
    SG_CHECK(strcmp(SG_STR(d, "runtime"), want) == 0, d, "the session's runtime is not %s", want);
    json_object_put(d);
    expect_container_runtime(sid, want);

    json_object *r = sgtest_run_code(proxy, sid, set, NULL, 0, NULL);
    SG_CHECK(SG_BOOL(r, "success"), r, "%s: the first execute failed", lang);
    SG_CHECK(strcmp(SG_STR(r, "state"), "kept") == 0, r,
             "%s on %s: the first execute of a pooled session must find its kernel started", lang, want);
    json_object_put(r);
    r = sgtest_run_code(proxy, sid, get, NULL, 0, NULL);
    sgtest_expect_stdout(r, out);
    SG_CHECK(strcmp(SG_STR(r, "state"), "kept") == 0, r, "%s: the kernel was not kept", lang);
    json_object_put(r);
    sgtest_close_session(proxy, proxy_id, sid, NULL, REMOVAL_S);
    free(sid);
}

/* Fills the pool and waits until it holds `n` containers of each language. */
static void wait_pool(int n)
{
    const char *labels[] = {NULL, "sandgate.kind=pool", NULL, NULL};
    char pl[200];
    snprintf(pl, sizeof(pl), "sandgate.proxy=%s", proxy_id);
    labels[0] = pl;
    const char *langs[] = {"sandgate.lang=python", "sandgate.lang=javascript"};
    for (size_t i = 0; i < 2; i++) {
        labels[2] = langs[i];
        int got = sgtest_docker_wait_count(labels, n, 60);
        SG_CHECK(got == n, NULL, "the pool holds %d %s container(s), not %d", got, langs[i], n);
    }
}

static void test_auto_takes_runsc_when_offered(void **state)
{
    start_proxy("auto", "SANDGATE_POOL_SIZE=1", NULL);
    const char *want = engine_runsc ? "runsc" : "runc";
    json_object *h = health();
    SG_CHECK(strcmp(SG_STR(h, "runtime"), want) == 0, h, "auto must pick %s", want);
    json_object *w = NULL;
    int warned = json_object_object_get_ex(h, "warning", &w);
    if (engine_runsc)
        SG_CHECK(!warned, h, "no warning when the sandboxes run on runsc");
    else
        SG_CHECK(warned && strstr(json_object_get_string(w), "runsc") != NULL, h,
                 "running on runc under auto must be warned about in /health");
    json_object_put(h);

    wait_pool(1);
    check_session("python", want, "x = 41", "print(x + 1)", "42\n");
    check_session("javascript", want, "let y = 6", "console.log(y * 7)", "42\n");
}

static void test_explicit_runtimes(void **state)
{
    /* runc always: no warning, every sandbox on runc */
    start_proxy("runc", "SANDGATE_POOL_SIZE=1", NULL);
    json_object *h = health();
    SG_CHECK(strcmp(SG_STR(h, "runtime"), "runc") == 0, h, "runtime");
    SG_CHECK(!json_object_object_get_ex(h, "warning", NULL), h, "no warning for an explicit runc");
    json_object_put(h);
    wait_pool(1);
    check_session("python", "runc", "x = 1", "print(x)", "1\n");
    stop_proxy();

    if (engine_runsc) {
        start_proxy("runsc", "SANDGATE_POOL_SIZE=0", NULL);
        h = health();
        SG_CHECK(strcmp(SG_STR(h, "runtime"), "runsc") == 0, h, "runtime");
        json_object_put(h);
        /* no pool: the session's own kernel starts at its first execute */
        char *sid = sgtest_create_session(proxy, "python", NULL, NULL);
        SG_CHECK(sid != NULL, NULL, "no session");
        expect_container_runtime(sid, "runsc");
        json_object *r = sgtest_run_code(proxy, sid, "import platform; print(platform.release())", NULL, 0, NULL);
        SG_CHECK(SG_BOOL(r, "success") && strcmp(SG_STR(r, "state"), "new") == 0, r, "first execute");
        /* gVisor's kernel is not the host's: it reports its own release */
        SG_CHECK(strcmp(SG_STR(r, "stdout"), "4.4.0\n") == 0, r, "not gVisor's kernel");
        json_object_put(r);
        sgtest_close_session(proxy, proxy_id, sid, NULL, REMOVAL_S);
        free(sid);
    } else {
        /* asked for runsc, which the engine lacks: the proxy refuses to start */
        char *id = sgtest_new_proxy_id();
        const char *env[] = {"SANDGATE_RUNTIME=runsc", NULL};
        sgtest_proxy_t *p = sgtest_proxy_start(id, env);
        SG_CHECK(p == NULL, NULL, "SANDGATE_RUNTIME=runsc on an engine without runsc must not start");
        free(id);
    }

    /* an unknown runtime is refused, whatever the engine */
    char *id = sgtest_new_proxy_id();
    const char *env[] = {"SANDGATE_RUNTIME=kata", NULL};
    sgtest_proxy_t *p = sgtest_proxy_start(id, env);
    SG_CHECK(p == NULL, NULL, "SANDGATE_RUNTIME=kata must not start");
    free(id);
}

/* The command line of process `pid` (a /proc entry's name) into buf, its
 * arguments apart by NULs, or by spaces when `spaced`: its length, 0 when
 * the process is gone. */
static size_t proc_cmdline(const char *pid, char *buf, size_t len, bool spaced)
{
    char path[300];
    snprintf(path, sizeof(path), "/proc/%s/cmdline", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        buf[0] = '\0';
        return 0;
    }
    size_t got = fread(buf, 1, len - 1, f);
    fclose(f);
    for (size_t i = 0; spaced && i < got; i++)
        buf[i] = buf[i] == '\0' ? ' ' : buf[i];
    buf[got] = '\0';
    return got;
}

/* The container id (64 hex) a runsc process works for, from its command
 * line (.../moby/<id>/... or a trailing <id>), or "" when none is named. */
static void runsc_process_container(pid_t pid, char id[65])
{
    char name[32], buf[8192];
    id[0] = '\0';
    snprintf(name, sizeof(name), "%d", (int)pid);
    if (proc_cmdline(name, buf, sizeof(buf), true) == 0)
        return;
    for (char *p = buf; (p = strstr(p, "moby/")) != NULL; p += 5) {
        size_t k = 0;
        while (k < 64 && strchr("0123456789abcdef", p[5 + k]) != NULL && p[5 + k] != '\0')
            k++;
        if (k == 64) {
            memcpy(id, p + 5, 64);
            id[64] = '\0';
            return;
        }
    }
}

/* The runsc-sandbox and runsc-gofer processes on the host whose container
 * Docker no longer has (malloc'd strv of "pid:container"). */
static char **orphan_runsc_processes(void)
{
    char **v = calloc(1, sizeof(*v));
    size_t n = 0;
    DIR *d = opendir("/proc");
    SG_CHECK(d != NULL, NULL, "cannot read /proc");
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char cmd[64] = "", id[65], entry[96];
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || proc_cmdline(e->d_name, cmd, sizeof(cmd), false) == 0)
            continue;
        if (strcmp(cmd, "runsc-sandbox") != 0 && strcmp(cmd, "runsc-gofer") != 0)
            continue;
        runsc_process_container((pid_t)atoi(e->d_name), id);
        if (id[0] == '\0' || sgtest_docker_exists(id) != 0)
            continue;
        snprintf(entry, sizeof(entry), "%.20s:%.12s", e->d_name, id);
        v = realloc(v, (n + 2) * sizeof(*v));
        v[n++] = strdup(entry);
        v[n] = NULL;
    }
    closedir(d);
    return v;
}

/* Docker's own containerd (deploy/engine.sh starts dockerd, which starts
 * it), or a system one. */
static const char *containerd_socket(void)
{
    static const char *const socks[] = {"/var/run/docker/containerd/containerd.sock",
                                        "/run/containerd/containerd.sock"};
    for (size_t i = 0; i < sizeof(socks) / sizeof(socks[0]); i++)
        if (access(socks[i], F_OK) == 0)
            return socks[i];
    return NULL;
}

/* The containers containerd holds for Docker (namespace moby) whose
 * specification names `marker` (malloc'd strv of ids): a failed start under
 * runsc was seen to leave them there, out of Docker's sight (`docker ps -a`
 * does not list them), each with a containerd-shim-runc-v2 process. */
static char **containerd_containers_with(const char *marker)
{
    const char *sock = containerd_socket();
    SG_CHECK(sock != NULL, NULL, "no containerd socket (Docker's or the system's)");
    char cmd[512], line[256], quoted[160];
    snprintf(quoted, sizeof(quoted), "\"%s\"", marker); /* whole, as a JSON string */
    snprintf(cmd, sizeof(cmd), "ctr -a %s -n moby containers list -q 2>/dev/null", sock);
    FILE *f = popen(cmd, "r");
    SG_CHECK(f != NULL, NULL, "cannot run ctr");
    char **ids = calloc(1, sizeof(*ids));
    size_t n = 0;
    int listed = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        listed++;
        if (strlen(line) != 64 || strspn(line, "0123456789abcdef") != 64)
            continue;
        char info[512], buf[4096];
        snprintf(info, sizeof(info), "ctr -a %s -n moby containers info %s 2>/dev/null", sock, line);
        FILE *g = popen(info, "r");
        bool ours = false;
        while (g != NULL && fgets(buf, sizeof(buf), g) != NULL)
            ours = ours || strstr(buf, quoted) != NULL;
        if (g != NULL)
            pclose(g);
        if (!ours)
            continue;
        ids = realloc(ids, (n + 2) * sizeof(*ids));
        ids[n++] = strdup(line);
        ids[n] = NULL;
    }
    SG_CHECK(pclose(f) == 0, NULL, "ctr could not list containerd's containers (%d lines)", listed);
    return ids;
}

/* containerd-shim processes serving one of ids. */
static size_t shims_of(char *const *ids)
{
    size_t found = 0;
    DIR *d = opendir("/proc");
    SG_CHECK(d != NULL, NULL, "cannot read /proc");
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char buf[4096];
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || proc_cmdline(e->d_name, buf, sizeof(buf), true) == 0)
            continue;
        if (strstr(buf, "containerd-shim") == NULL)
            continue;
        for (size_t i = 0; ids[i] != NULL; i++)
            if (strstr(buf, ids[i]) != NULL) {
                fprintf(stderr, "left behind: containerd shim %s for %.12s\n", e->d_name, ids[i]);
                found++;
            }
    }
    closedir(d);
    return found;
}

/* An image <repo>/python:latest whose entrypoint, `entrypoint`, does not
 * exist: the runtime would fail to start its container. Made by committing
 * a container of sandgate/python with that entrypoint. */
static void make_broken_image(const char *repo, const char *entrypoint)
{
    sgtest_reply_t r;
    char path[256];
    SG_CHECK(sgtest_docker_call("POST", "/containers/create",
                                "{\"Image\":\"sandgate/python:latest\",\"Labels\":{\"sgtest.runtime\":\"1\"}}",
                                &r) == 0 &&
                 r.status == 201,
             NULL, "cannot create a container to commit (HTTP %ld)", r.status);
    json_object *o = json_tokener_parse(r.body);
    sgtest_reply_free(&r);
    char *cid = strdup(SG_STR(o, "Id"));
    json_object_put(o);
    pathf(path, sizeof(path), "/commit?container=%s&repo=%s/python&tag=latest", cid, repo);
    char conf[256];
    snprintf(conf, sizeof(conf), "{\"Entrypoint\":[\"%s\"],\"Cmd\":[]}", entrypoint);
    SG_CHECK(sgtest_docker_call("POST", path, conf, &r) == 0 && r.status == 201, NULL,
             "cannot commit the broken image (HTTP %ld)", r.status);
    sgtest_reply_free(&r);
    pathf(path, sizeof(path), "/containers/%s?force=1", cid);
    sgtest_docker_call("DELETE", path, NULL, &r);
    sgtest_reply_free(&r);
    free(cid);
}

static void test_failed_start_leaves_no_process(void **state)
{
    /* Orphans that other users of the engine may have left are not ours:
     * only new ones count. */
    char **before = orphan_runsc_processes();
    char repo[64], prefix_kv[96], path[128], entrypoint[64];
    snprintf(repo, sizeof(repo), "sgtest-broken-%d", (int)getpid());
    /* this run's own: what marks its containers in containerd */
    snprintf(entrypoint, sizeof(entrypoint), "/sgtest-no-such-agent-%d", (int)getpid());
    make_broken_image(repo, entrypoint);
    snprintf(prefix_kv, sizeof(prefix_kv), "SANDGATE_IMAGE_PREFIX=%s/", repo);
    start_proxy("auto", "SANDGATE_POOL_SIZE=0", prefix_kv);
    int failed = 0;
    for (int i = 0; i < 4; i++) {
        sgtest_reply_t r;
        sgtest_call(proxy, "POST", "/sessions", "{\"lang\":\"python\"}", &r);
        failed += r.status >= 500;
        sgtest_reply_free(&r);
    }
    sgtest_reply_t rr;
    pathf(path, sizeof(path), "/images/%s/python:latest?force=1", repo);
    sgtest_docker_call("DELETE", path, NULL, &rr);
    sgtest_reply_free(&rr);
    SG_CHECK(failed == 4, NULL, "%d of 4 sessions on an image without its agent failed to start", failed);

    sgtest_close_all_sessions(proxy);
    const char *labels[] = {NULL, NULL};
    char pl[200];
    snprintf(pl, sizeof(pl), "sandgate.proxy=%s", proxy_id);
    labels[0] = pl;
    SG_CHECK(sgtest_docker_wait_count(labels, 0, REMOVAL_S) == 0, NULL, "the proxy's containers were not removed");

    /* every runsc process of a removed container is gone */
    double deadline = sgtest_now() + SETTLE_S;
    char **left = NULL;
    for (;;) {
        sgtest_strv_free(left);
        left = orphan_runsc_processes();
        size_t fresh = 0;
        for (size_t i = 0; left[i] != NULL; i++)
            fresh += !sgtest_strv_has(before, left[i]);
        if (fresh == 0)
            break;
        if (sgtest_now() > deadline) {
            for (size_t i = 0; left[i] != NULL; i++)
                if (!sgtest_strv_has(before, left[i]))
                    fprintf(stderr, "left behind: runsc process %s\n", left[i]);
            SG_FAIL(NULL, "%zu runsc process(es) outlived their container", fresh);
        }
        usleep(200 * 1000);
    }
    sgtest_strv_free(left);
    sgtest_strv_free(before);

    /* nor any containerd container, task or shim of them: the proxy looks
     * for the entrypoint before it starts a runsc sandbox (Docker 20.10
     * leaves all three behind when runsc fails to start one) */
    char **ours = containerd_containers_with(entrypoint);
    size_t shims = shims_of(ours);
    for (size_t i = 0; ours[i] != NULL; i++)
        fprintf(stderr, "left behind: containerd container %s\n", ours[i]);
    SG_CHECK(ours[0] == NULL && shims == 0, NULL,
             "%zu containerd container(s) and %zu shim(s) outlived the failed starts", sgtest_strv_len(ours), shims);
    sgtest_strv_free(ours);

    /* and the proxy still makes sandboxes that work */
    stop_proxy();
    start_proxy("auto", "SANDGATE_POOL_SIZE=0", NULL);
    char *sid = sgtest_create_session(proxy, "python", NULL, NULL);
    SG_CHECK(sid != NULL, NULL, "no session after the failed starts");
    json_object *r = sgtest_run_code(proxy, sid, "print(6 * 7)", NULL, 0, NULL);
    sgtest_expect_stdout(r, "42\n");
    json_object_put(r);
    sgtest_close_session(proxy, proxy_id, sid, NULL, REMOVAL_S);
    free(sid);
}

int main(void)
{
    return SG_RUN_TESTS("proxy_runtime", group_setup, NULL, NULL, after_test, test_auto_takes_runsc_when_offered,
                        test_explicit_runtimes, test_failed_start_leaves_no_process);
}
