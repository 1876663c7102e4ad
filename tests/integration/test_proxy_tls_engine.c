/*
 * test_proxy_tls_engine.c — a remote Docker engine over TLS (DOCKER_HOST=
 * tcp://…, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH; docs/deployment.md).
 *
 * The engine is this machine's own, behind a TLS listener of the test's:
 * socat OPENSSL-LISTEN (verify=1: a client certificate is required) in front
 * of the engine's unix socket, with a CA, a server certificate (SAN
 * IP:127.0.0.1, DNS:localhost) and client certificates that the test makes
 * with openssl. Through it a proxy runs a python session (state kept across
 * executes, a file of a few MB in and out, ~1 MB of output buffered and
 * streamed, every byte checked), a one-shot execute, and stops leaving
 * nothing; the attach stream of every sandbox goes through the proxy's TLS
 * relay (docker/docker_tls.h). With the wrong CA, or a client certificate
 * the listener does not trust, the proxy refuses to start, says why, and
 * creates nothing; without DOCKER_TLS_VERIFY the engine's certificate is
 * not checked (Docker's convention), the client certificate still sent.
 */
#include "sgsse.h"
#include "sgtest.h"
#include "sgtls.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define FILE_BYTES (3u << 20)
#define OUT_BYTES 1000000 /* under SANDGATE_OUTPUT_LIMIT's default 1 MiB */

static sgtls_engine_t engine; /* sgtls.h: socat's TLS listener before the engine */
static char *dir;             /* engine.dir: the certificates, logs */
static char docker_host[64];

static int group_setup(void **state)
{
    (void)state;
    if (sgtls_engine_start(&engine) != 0)
        return -1;
    dir = engine.dir;
    snprintf(docker_host, sizeof(docker_host), "%s", engine.docker_host);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return sgtls_engine_stop(&engine);
}

/* The bytes the program below prints: line i is "<i>:" then 'a' + i % 26
 * repeated, 100 bytes with its newline. */
static char *expected_output(size_t n)
{
    char *s = malloc(n + 1);
    size_t off = 0;
    for (unsigned i = 0; off < n; i++) {
        char line[101];
        int h = snprintf(line, sizeof(line), "%u:", i);
        memset(line + h, 'a' + (int)(i % 26), (size_t)(99 - h));
        line[99] = '\n';
        size_t take = n - off < 100 ? n - off : 100;
        memcpy(s + off, line, take);
        off += take;
    }
    s[n] = '\0';
    return s;
}

static const char print_code[] = "import sys\n"
                                 "for i in range(%d):\n"
                                 "    h = '%%d:' %% i\n"
                                 "    sys.stdout.write(h + chr(97 + i %% 26) * (99 - len(h)) + '\\n')\n";

static void check_output(const char *what, const char *got, size_t len, const char *want, size_t want_len)
{
    if (len != want_len || memcmp(got, want, want_len) != 0) {
        size_t i = 0;
        while (i < len && i < want_len && got[i] == want[i])
            i++;
        SG_FAIL(NULL, "%s: %zu bytes, %zu expected; first difference at byte %zu", what, len, want_len, i);
    }
}

/* Whether every language's warm pool of p holds its one container. */
static bool pool_full(void *ctx)
{
    sgtest_reply_t r;
    json_object *o, *pools;
    bool full = false;

    if (sgtest_call(ctx, "GET", "/health", NULL, &r) == 0 && r.status == 200 &&
        (o = json_tokener_parse(r.body)) != NULL) {
        if (json_object_object_get_ex(o, "pools", &pools) && json_object_object_length(pools) > 0) {
            full = true;
            json_object_object_foreach(pools, k, v)
            {
                (void)k;
                full = full && json_object_get_int(v) >= 1;
            }
        }
        json_object_put(o);
    }
    sgtest_reply_free(&r);
    return full;
}

/* The threads of process pid (its /proc/pid/task entries), -1 on error. */
static int thread_count(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    char line[256];
    int n = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return n;
}

typedef struct {
    sgtest_proxy_t *p;
    int want;
} threads_ctx_t;

static bool threads_back(void *arg)
{
    threads_ctx_t *t = arg;
    return pool_full(t->p) && thread_count(sgtest_proxy_pid(t->p)) == t->want;
}

/* SIGTERM: the proxy exits 0 (under ASan: nothing leaked, relay threads
 * included) and leaves no container, its warm pool's included. */
static void stop_clean(sgtest_proxy_t *p, const char *id)
{
    int st = sgtest_proxy_stop(p);
    SG_CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, NULL, "the proxy exits 0 on SIGTERM (status %d)", st);
    SG_CHECK(sgtest_docker_count(id) == 0, NULL, "no container of the proxy is left");
}

static void test_session_over_tls(void **state)
{
    char *id = sgtest_new_proxy_id(), cert_kv[600], path[256], code[512];
    const char *env[] = {docker_host, "DOCKER_TLS_VERIFY=1", cert_kv, "SANDGATE_POOL_SIZE=1", NULL};
    sgtest_proxy_t *p;
    sgtest_reply_t r;
    json_object *o;

    (void)state;
    snprintf(cert_kv, sizeof(cert_kv), "DOCKER_CERT_PATH=%s/client", dir);
    p = sgtest_proxy_start(id, env);
    SG_CHECK(p != NULL, NULL, "the proxy did not start against the TLS engine");

    o = SG_CALL_JSON(p, "GET", "/health", NULL, 200);
    SG_CHECK(json_object_get_boolean(sgtest_jpath(o, "docker")), o, "the engine answers over TLS");
    json_object_put(o);
    /* each pooled container's attach has its relay thread; they are counted
     * once the pools are full, and must come back to that number at the end
     * (a closed session's relay ends with its container) */
    SG_CHECK(sgtest_poll(pool_full, p, 120, 0.2) == 0, NULL, "the warm pools fill over TLS");
    threads_ctx_t threads = {p, thread_count(sgtest_proxy_pid(p))};

    char *sid = sgtest_create_session(p, "python", NULL, NULL);
    o = sgtest_run_code(p, sid, "x = 41", NULL, 0, NULL);
    sgtest_expect_success(o);
    json_object_put(o);
    o = sgtest_run_code(p, sid, "print(x + 1)", NULL, 0, NULL);
    sgtest_expect_stdout(o, "42\n");
    SG_CHECK(strcmp(SG_STR(o, "state"), "kept") == 0, o, "the state is kept across executes");
    json_object_put(o);

    /* a file of a few MB, in and out (the Engine API's archive calls over TLS) */
    unsigned char *blob = malloc(FILE_BYTES);
    for (size_t i = 0; i < FILE_BYTES; i++)
        blob[i] = (unsigned char)((i * 2654435761u) >> 13);
    pathf(path, sizeof(path), "%s/sessions/%s/files?path=/sandbox/blob.bin", sgtest_proxy_url(p), sid);
    SG_CHECK(sgtest_http("PUT", path, blob, FILE_BYTES, "application/octet-stream", 0, &r) == 0, NULL, "PUT: %s",
             r.error);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    SG_CHECK(sgtest_http("GET", path, NULL, 0, NULL, 0, &r) == 0, NULL, "GET: %s", r.error);
    SG_ASSERT_STATUS(&r, 200);
    check_output("the file read back", r.body, r.body_len, (const char *)blob, FILE_BYTES);
    sgtest_reply_free(&r);
    free(blob);
    o = sgtest_run_code(p, sid, "import hashlib; print(len(open('/sandbox/blob.bin','rb').read()))", NULL, 0, NULL);
    sgtest_expect_stdout(o, "3145728\n");
    json_object_put(o);

    /* ~1 MB of output, buffered then streamed (the attach relay, both ways) */
    char *want = expected_output(OUT_BYTES);
    snprintf(code, sizeof(code), print_code, OUT_BYTES / 100);
    o = sgtest_run_code(p, sid, code, NULL, 0, NULL);
    sgtest_expect_success(o);
    const char *out = SG_STR(o, "stdout");
    check_output("buffered stdout", out, strlen(out), want, OUT_BYTES);
    json_object_put(o);

    json_object *body = json_object_new_object();
    json_object_object_add(body, "code", json_object_new_string(code));
    json_object_object_add(body, "stream", json_object_new_boolean(1));
    pathf(path, sizeof(path), "%s/sessions/%s/execute", sgtest_proxy_url(p), sid);
    sgsse_result_t sr = {0};
    SG_CHECK(sgsse_post(path, NULL, json_object_to_json_string(body), NULL, 120, &sr) == 0, NULL, "stream: %s",
             sr.error);
    json_object_put(body);
    SG_CHECK(sr.status == 200, NULL, "stream status %ld", sr.status);
    SG_CHECK(sgsse_last(&sr, "result") != NULL, NULL, "the stream ends with a result event");
    char *streamed;
    size_t slen;
    SG_CHECK(sgsse_concat(&sr, "stdout", &streamed, &slen) == 0, NULL, "stdout events");
    check_output("streamed stdout", streamed, slen, want, OUT_BYTES);
    free(streamed);
    sgsse_result_free(&sr);
    free(want);

    /* the session still works after all that, then closes */
    o = sgtest_run_code(p, sid, "print(x)", NULL, 0, NULL);
    sgtest_expect_stdout(o, "41\n");
    json_object_put(o);
    sgtest_close_session(p, id, sid, NULL, 20);
    free(sid);

    /* a one-shot execute */
    o = sgtest_run_ephemeral(p, "python", "print(6 * 7)", NULL, 0, NULL);
    sgtest_expect_stdout(o, "42\n");
    json_object_put(o);

    SG_CHECK(sgtest_poll(threads_back, &threads, 60, 0.2) == 0, NULL,
             "the relay threads of closed sandboxes end (%d threads, %d with full pools at the start)",
             thread_count(sgtest_proxy_pid(p)), threads.want);
    stop_clean(p, id);
    free(id);
}

/* Runs the proxy with the TLS settings of certs/ (and DOCKER_TLS_VERIFY
 * when verify) until it exits or 30 s pass; expects a non-zero exit, a log
 * line containing `says`, and no container of its id. */
static void expect_refused(const char *certs, bool verify, const char *says)
{
    char *id = sgtest_new_proxy_id(), cert_kv[600], id_kv[200], logpath[600];
    const char *set[] = {docker_host,
                         cert_kv,
                         id_kv,
                         "HOST=127.0.0.1",
                         "PORT=0",
                         "SANDGATE_STORE_VOLUME=",
                         verify ? "DOCKER_TLS_VERIFY=1" : "DOCKER_TLS_VERIFY="};
    char **env;
    pid_t pid;
    int st = 0;
    sgtest_child_t c;

    snprintf(cert_kv, sizeof(cert_kv), "DOCKER_CERT_PATH=%s/%s", dir, certs);
    snprintf(id_kv, sizeof(id_kv), "SANDGATE_PROXY_ID=%s", id);
    snprintf(logpath, sizeof(logpath), "%s/refused-%s.log", dir, certs);
    env = sgtest_build_env(set, sizeof(set) / sizeof(set[0]));
    pid = fork();
    if (pid == 0) {
        int log = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(log, 1);
        dup2(log, 2);
        execle(getenv("SANDGATE_PROXY_BIN"), "sandgate-proxy", (char *)NULL, env);
        _exit(127);
    }
    free(env);
    SG_CHECK(pid > 0, NULL, "fork");
    c = (sgtest_child_t){.pid = pid};
    double deadline = sgtest_now() + 30;
    while (!sgtest_child_reap(&c, WNOHANG) && sgtest_now() < deadline)
        usleep(50 * 1000);
    if (!c.reaped) {
        kill(pid, SIGKILL);
        sgtest_child_reap(&c, 0);
        SG_FAIL(NULL, "the proxy with %s certificates still ran after 30 s", certs);
    }
    st = c.wstatus;
    FILE *f = fopen(logpath, "r");
    char log[8192] = "";
    size_t n = f != NULL ? fread(log, 1, sizeof(log) - 1, f) : 0;
    log[n] = '\0';
    if (f != NULL)
        fclose(f);
    fprintf(stderr, "with %s certificates the proxy said:\n%s", certs, log);
    SG_CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0, NULL, "the proxy exits with an error status (%d)", st);
    SG_CHECK(strstr(log, says) != NULL, NULL, "its log says \"%s\"", says);
    SG_CHECK(sgtest_docker_count(id) == 0, NULL, "it created nothing");
    free(id);
}

static void test_wrong_ca_refused(void **state)
{
    (void)state;
    /* the engine's certificate does not chain to ca.pem */
    expect_refused("wrongca", true, "does not chain to DOCKER_CERT_PATH/ca.pem");
    /* the listener does not trust the client certificate */
    expect_refused("other", true, "does it trust the client certificate");
    /* no client certificate at all */
    expect_refused("nonexistent", true, "cannot read");
}

/* Docker's convention: DOCKER_CERT_PATH without DOCKER_TLS_VERIFY is TLS
 * with the client certificate, the engine's own not verified. */
static void test_unverified_engine(void **state)
{
    char *id = sgtest_new_proxy_id(), cert_kv[600];
    const char *env[] = {docker_host, "DOCKER_TLS_VERIFY=", cert_kv, "SANDGATE_POOL_SIZE=0", NULL};
    sgtest_proxy_t *p;
    json_object *o;

    (void)state;
    snprintf(cert_kv, sizeof(cert_kv), "DOCKER_CERT_PATH=%s/wrongca", dir);
    p = sgtest_proxy_start(id, env);
    SG_CHECK(p != NULL, NULL, "the proxy did not start with an unverified engine");
    o = sgtest_run_ephemeral(p, "python", "print('unverified')", NULL, 0, NULL);
    sgtest_expect_stdout(o, "unverified\n");
    json_object_put(o);
    stop_clean(p, id);
    free(id);
    /* and a client certificate the listener does not trust still fails */
    expect_refused("other", false, "does it trust the client certificate");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_session_over_tls),
        cmocka_unit_test(test_wrong_ca_refused),
        cmocka_unit_test(test_unverified_engine),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
