/*
 * bench_docker.c — sandgate-bench's look at the Docker engine (see
 * bench.h), through the proxy's own client (proxy/docker/docker.h: DOCKER_HOST,
 * the API version from GET /_ping, one keep-alive handle per thread) and
 * its stream decoder (proxy/docker/docker_stream.h): which container a session
 * got, what it costs in memory, and phase 4, the engine's own floors.
 */
#include "bench.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "docker.h"
#include "docker_stream.h"

dk_t dk;

int dk_setup(char *err, size_t errlen)
{
    char version[32], api[16];
    int major = 0, minor = 0;

    if (sg_docker_setup(getenv("DOCKER_HOST"), "", getenv("DOCKER_TLS_VERIFY"), getenv("DOCKER_CERT_PATH"), err,
                        errlen) != 0)
        return -1;
    if (sg_docker_ping(sg_docker_thread(), version, api, err, errlen) != 0)
        return -1;
    snprintf(dk.version, sizeof(dk.version), "%s", api);
    if (sscanf(api, "%d.%d", &major, &minor) == 2)
        dk.one_shot = major > 1 || (major == 1 && minor >= 41);
    dk.ok = 1;
    return 0;
}

/* method path (json may be NULL) on this thread's handle; the reply must
 * have status want. 0, or -1 with err saying why. */
static int dk_expect(const char *method, const char *path, const char *json, long want, sg_buf_t *resp, char *err,
                     size_t errlen)
{
    long status = 0;
    if (sg_docker_request(sg_docker_thread(), method, path, json, json != NULL ? strlen(json) : 0, &status, resp, err,
                          errlen) != 0)
        return -1;
    if (status != want) {
        snprintf(err, errlen, "HTTP %ld: %.160s", status, resp->base != NULL ? resp->base : "");
        return -1;
    }
    return 0;
}

int dk_session_container(const char *sid, char cid[80], char kind[16], char *err, size_t errlen)
{
    char label[128];
    json_object *arr = NULL, *c, *v, *labels;
    int rc = -1;

    snprintf(label, sizeof(label), "sandgate.session=%s", sid);
    if (sg_docker_container_list(sg_docker_thread(), label, &arr, err, errlen) != 0)
        return -1;
    if (json_object_array_length(arr) != 1) {
        snprintf(err, errlen, "%zu containers labelled %s", json_object_array_length(arr), label);
        goto Exit;
    }
    c = json_object_array_get_idx(arr, 0);
    if (!json_object_object_get_ex(c, "Id", &v)) {
        snprintf(err, errlen, "container without Id");
        goto Exit;
    }
    snprintf(cid, 80, "%s", json_object_get_string(v));
    kind[0] = '\0';
    if (json_object_object_get_ex(c, "Labels", &labels) && json_object_object_get_ex(labels, "sandgate.kind", &v))
        snprintf(kind, 16, "%s", json_object_get_string(v));
    rc = 0;
Exit:
    json_object_put(arr);
    return rc;
}

/* Memory a container uses without its reclaimable page cache, as `docker
 * stats` computes it: usage - total_inactive_file (cgroup v1) or
 * - inactive_file (v2). */
int dk_mem_bytes(const char *cid, double *bytes, char *err, size_t errlen)
{
    char path[200];
    json_object *o = NULL, *ms, *v, *st;
    double usage, cache = 0;
    sg_buf_t resp;
    int rc = -1;

    sg_buf_init(&resp, BENCH_MAX_BODY);
    snprintf(path, sizeof(path), "/containers/%s/stats?stream=false%s", cid, dk.one_shot ? "&one-shot=true" : "");
    if (dk_expect("GET", path, NULL, 200, &resp, err, errlen) != 0)
        goto Exit;
    o = json_tokener_parse(resp.base);
    if (o == NULL || !json_object_object_get_ex(o, "memory_stats", &ms) ||
        !json_object_object_get_ex(ms, "usage", &v)) {
        snprintf(err, errlen, "stats without memory_stats.usage: %.120s", resp.base);
        goto Exit;
    }
    usage = json_object_get_double(v);
    if (json_object_object_get_ex(ms, "stats", &st)) {
        if (json_object_object_get_ex(st, "total_inactive_file", &v) ||
            json_object_object_get_ex(st, "inactive_file", &v))
            cache = json_object_get_double(v);
    }
    *bytes = usage > cache ? usage - cache : usage;
    rc = 0;
Exit:
    json_object_put(o);
    sg_buf_free(&resp);
    return rc;
}

int dk_sweep(void)
{
    char label[96], err[256];
    json_object *arr = NULL, *v;
    int left = 0;

    if (!dk.ok)
        return 0;
    snprintf(label, sizeof(label), "sandgate.bench=%s", dk.run_id);
    if (sg_docker_container_list(sg_docker_thread(), label, &arr, err, sizeof(err)) != 0) {
        fprintf(stderr, "sandgate-bench: cannot list bench containers: %s\n", err);
        return -1;
    }
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        if (json_object_object_get_ex(json_object_array_get_idx(arr, i), "Id", &v) &&
            sg_docker_container_remove(sg_docker_thread(), json_object_get_string(v), err, sizeof(err)) != 0) {
            fprintf(stderr, "sandgate-bench: cannot remove container %.12s: %s\n", json_object_get_string(v), err);
            left++;
        }
    }
    json_object_put(arr);
    return left;
}

/* POST /containers/create of image sandgate/<lang>:latest with entrypoint
 * argv, no network, our label; then start. Copies the Id (also when the
 * start failed, for the caller to remove). */
static int dk_run(const char *const *argv, char cid[80], char *err, size_t errlen)
{
    json_object *body = json_object_new_object(), *ep = json_object_new_array(), *labels = json_object_new_object();
    json_object *hc = json_object_new_object();
    char image[96], id[72];
    int rc;

    snprintf(image, sizeof(image), "sandgate/%s:latest", opt.lang->name);
    for (size_t i = 0; argv[i] != NULL; i++)
        json_object_array_add(ep, json_object_new_string(argv[i]));
    json_object_object_add(body, "Image", json_object_new_string(image));
    json_object_object_add(body, "Entrypoint", ep);
    json_object_object_add(labels, "sandgate.bench", json_object_new_string(dk.run_id));
    json_object_object_add(body, "Labels", labels);
    json_object_object_add(hc, "NetworkMode", json_object_new_string("none"));
    json_object_object_add(body, "HostConfig", hc);
    rc = sg_docker_container_create(sg_docker_thread(), body, id, err, errlen);
    json_object_put(body);
    if (rc != 0)
        return -1;
    snprintf(cid, 80, "%s", id);
    return sg_docker_container_start(sg_docker_thread(), cid, err, errlen);
}

typedef struct {
    char *out;
    size_t len, cap;
} stdout_t;

/* Copies stream 1 (stdout) into out (capped, NUL terminated). */
static void on_frame(void *ctx, int stream, const uint8_t *p, size_t len)
{
    stdout_t *o = ctx;
    if (stream != 1)
        return;
    size_t k = len < o->cap - 1 - o->len ? len : o->cap - 1 - o->len;
    memcpy(o->out + o->len, p, k);
    o->len += k;
    o->out[o->len] = '\0';
}

/* exec create + start (stream read to EOF) + inspect in container cid.
 * want_stdout NULL: only the exit code (0) is checked. */
static int dk_exec(const char *cid, const char *const *argv, const char *want_stdout, char *err, size_t errlen)
{
    json_object *body = json_object_new_object(), *cmd = json_object_new_array(), *o = NULL, *v;
    char path[200], eid[80], out[256] = "";
    stdout_t so = {out, 0, sizeof(out)};
    sg_docker_demux_t dm;
    sg_buf_t resp;
    int rc = -1;

    sg_buf_init(&resp, BENCH_MAX_BODY);
    for (size_t i = 0; argv[i] != NULL; i++)
        json_object_array_add(cmd, json_object_new_string(argv[i]));
    json_object_object_add(body, "AttachStdout", json_object_new_boolean(1));
    json_object_object_add(body, "AttachStderr", json_object_new_boolean(1));
    json_object_object_add(body, "Cmd", cmd);
    snprintf(path, sizeof(path), "/containers/%s/exec", cid);
    if (dk_expect("POST", path, json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN), 201, &resp, err,
                  errlen) != 0)
        goto Exit;
    o = json_tokener_parse(resp.base);
    if (o == NULL || !json_object_object_get_ex(o, "Id", &v) || !id_ok(json_object_get_string(v), 79)) {
        snprintf(err, errlen, "exec create reply without Id: %.120s", resp.base);
        goto Exit;
    }
    snprintf(eid, sizeof(eid), "%s", json_object_get_string(v));
    json_object_put(o);
    o = NULL;

    snprintf(path, sizeof(path), "/exec/%s/start", eid);
    if (dk_expect("POST", path, "{\"Detach\":false,\"Tty\":false}", 200, &resp, err, errlen) != 0)
        goto Exit;
    sg_docker_demux_init(&dm);
    if (sg_docker_demux_feed(&dm, (const uint8_t *)resp.base, resp.len, on_frame, &so) != 0 || dm.hdr_have != 0 ||
        dm.left != 0) {
        snprintf(err, errlen, "exec stream cut inside a frame (%zu bytes)", resp.len);
        goto Exit;
    }

    snprintf(path, sizeof(path), "/exec/%s/json", eid);
    if (dk_expect("GET", path, NULL, 200, &resp, err, errlen) != 0)
        goto Exit;
    o = json_tokener_parse(resp.base);
    if (o == NULL || !json_object_object_get_ex(o, "ExitCode", &v) || json_object_get_int(v) != 0) {
        snprintf(err, errlen, "exec did not exit 0: %.120s", resp.base);
        goto Exit;
    }
    if (want_stdout != NULL && strcmp(out, want_stdout) != 0) {
        snprintf(err, errlen, "exec stdout \"%.40s\", wanted \"%s\"", out, want_stdout);
        goto Exit;
    }
    rc = 0;
Exit:
    json_object_put(o);
    json_object_put(body);
    sg_buf_free(&resp);
    return rc;
}

/* ------------------------------------------------------------------------
 * Phase 4: floors on the Docker engine itself.
 * ------------------------------------------------------------------------ */

/* Runs `n` timed execs of argv in cid into row r (want_stdout as dk_exec). */
static void exec_runs(row_t *r, const char *cid, const char *const *argv, const char *want_stdout, int n)
{
    char err[256];
    for (int i = 0; i < n && !g_stop; i++) {
        double t0 = now_ms();
        if (dk_exec(cid, argv, want_stdout, err, sizeof(err)) != 0)
            row_err(r, "%s", err);
        else
            row_ok(r, now_ms() - t0);
    }
}

void phase_docker(void)
{
    row_t *once = row_new("docker", "new container, %s once", opt.lang->name);
    row_t *exi = row_new("docker", "exec in running container, %s", opt.lang->name);
    row_t *ext = row_new("docker", "exec in running container, true");
    static const char *const sleeper[] = {"sleep", "3600", NULL};
    static const char *const truth[] = {"/bin/true", NULL};
    char cid[80], err[256];
    sg_docker_t *d = sg_docker_thread();

    if (!dk.ok) {
        row_err(once, "Docker not reachable");
        row_err(exi, "Docker not reachable");
        row_err(ext, "Docker not reachable");
        return;
    }

    fprintf(stderr, "sandgate-bench: docker: %d runs of a new container\n", BENCH_FLOOR_ONCE_RUNS);
    for (int i = 0; i < BENCH_FLOOR_ONCE_RUNS && !g_stop; i++) {
        double t0 = now_ms();
        long code = -1;
        cid[0] = '\0';
        if (dk_run(opt.lang->once_argv, cid, err, sizeof(err)) != 0)
            goto Fail;
        if (sg_docker_container_wait(d, cid, BENCH_TIMEOUT_S * 1000, &code, err, sizeof(err)) != 0)
            goto Fail;
        if (code != 0) {
            snprintf(err, sizeof(err), "container did not exit 0 (StatusCode %ld)", code);
            goto Fail;
        }
        if (sg_docker_container_remove(d, cid, err, sizeof(err)) != 0)
            goto Fail;
        row_ok(once, now_ms() - t0);
        continue;
    Fail:
        row_err(once, "%s", err);
        if (cid[0] != '\0')
            sg_docker_container_remove(d, cid, err, sizeof(err));
    }

    fprintf(stderr, "sandgate-bench: docker: %d + %d execs in a running container\n", BENCH_FLOOR_EXEC_RUNS,
            BENCH_FLOOR_EXEC_RUNS);
    cid[0] = '\0';
    if (g_stop)
        goto Exit;
    if (dk_run(sleeper, cid, err, sizeof(err)) != 0) {
        row_err(exi, "container: %s", err);
        row_err(ext, "container: %s", err);
        goto Exit;
    }
    /* one untimed of each: the first exec pays for page cache and the like */
    dk_exec(cid, opt.lang->once_argv, NULL, err, sizeof(err));
    dk_exec(cid, truth, NULL, err, sizeof(err));
    exec_runs(exi, cid, opt.lang->once_argv, "1\n", BENCH_FLOOR_EXEC_RUNS);
    exec_runs(ext, cid, truth, NULL, BENCH_FLOOR_EXEC_RUNS);
Exit:
    if (cid[0] != '\0' && sg_docker_container_remove(d, cid, err, sizeof(err)) != 0)
        fprintf(stderr, "sandgate-bench: cannot remove container %.12s: %s\n", cid, err);
}
