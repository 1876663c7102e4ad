/*
 * sgdocker.c — the Docker Engine API for the tests (see sgtest.h): lists by
 * label, inspection, waits, removal, and the sandbox defaults asserted on
 * an inspected container.
 */
#include "sgtest_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#define POLL_INTERVAL_US 50000

static struct {
    pthread_once_t once;
    char socket[512]; /* unix socket path, or empty for tcp */
    char base[512];   /* "http://localhost" or "http://host:port" */
    char version[32]; /* "1.41"; empty when /_ping failed */
} docker = {.once = PTHREAD_ONCE_INIT};

static void on_docker_init(void)
{
    const char *dh = getenv("DOCKER_HOST");
    if (dh == NULL || *dh == '\0')
        dh = "unix:///var/run/docker.sock";
    if (strncmp(dh, "unix://", 7) == 0) {
        snprintf(docker.socket, sizeof(docker.socket), "%s", dh + 7);
        snprintf(docker.base, sizeof(docker.base), "http://localhost");
    } else if (strncmp(dh, "tcp://", 6) == 0) {
        snprintf(docker.base, sizeof(docker.base), "http://%s", dh + 6);
    } else {
        fprintf(stderr, "sgtest: DOCKER_HOST=%s: only unix:// and tcp:// are supported\n", dh);
        return;
    }
    char url[600];
    snprintf(url, sizeof(url), "%s/_ping", docker.base);
    sgtest__http_req_t q = {
        .method = "GET", .url = url, .timeout_s = 10, .unix_socket = docker.socket[0] ? docker.socket : NULL};
    sgtest_reply_t r;
    sgtest__curl(&q, &r);
    char *v = sgtest_reply_header(&r, "Api-Version");
    if (r.status == 200 && v != NULL && *v != '\0')
        snprintf(docker.version, sizeof(docker.version), "%s", v);
    else
        fprintf(stderr, "sgtest: Docker at %s does not answer /_ping (HTTP %ld, %s)\n", dh, r.status, r.error);
    free(v);
    sgtest_reply_free(&r);
}

int sgtest_docker_call(const char *method, const char *path, const char *json_body, sgtest_reply_t *out)
{
    pthread_once(&docker.once, on_docker_init);
    if (docker.version[0] == '\0') {
        memset(out, 0, sizeof(*out));
        out->body = calloc(1, 1);
        out->headers = calloc(1, 1);
        snprintf(out->error, sizeof(out->error), "Docker is not reachable");
        return -1;
    }
    size_t ulen = strlen(docker.base) + strlen(docker.version) + strlen(path) + 8;
    char *url = malloc(ulen);
    if (url == NULL)
        return -1;
    snprintf(url, ulen, "%s/v%s%s", docker.base, docker.version, path);
    sgtest__http_req_t q = {.method = method,
                            .url = url,
                            .body = json_body,
                            .len = json_body ? strlen(json_body) : 0,
                            .content_type = json_body ? "application/json" : NULL,
                            .timeout_s = 60,
                            .unix_socket = docker.socket[0] ? docker.socket : NULL};
    int rc = sgtest__curl(&q, out);
    free(url);
    return rc;
}

json_object *sgtest_docker_list(const char *const *labels)
{
    json_object *filters = json_object_new_object();
    json_object *arr = json_object_new_array();
    for (size_t i = 0; labels != NULL && labels[i] != NULL; i++)
        json_object_array_add(arr, json_object_new_string(labels[i]));
    json_object_object_add(filters, "label", arr);
    char *enc = curl_easy_escape(NULL, json_object_to_json_string_ext(filters, JSON_C_TO_STRING_PLAIN), 0);
    json_object_put(filters);
    if (enc == NULL)
        return NULL;
    size_t plen = strlen(enc) + 64;
    char *path = malloc(plen);
    if (path == NULL) {
        curl_free(enc);
        return NULL;
    }
    snprintf(path, plen, "/containers/json?all=1&filters=%s", enc);
    curl_free(enc);
    sgtest_reply_t r;
    sgtest_docker_call("GET", path, NULL, &r);
    free(path);
    json_object *o = NULL;
    if (r.status == 200)
        o = json_tokener_parse(r.body);
    else
        fprintf(stderr, "sgtest: docker list failed: HTTP %ld %s %s\n", r.status, r.error, r.body);
    sgtest_reply_free(&r);
    if (o != NULL && !json_object_is_type(o, json_type_array)) {
        json_object_put(o);
        o = NULL;
    }
    return o;
}

static void proxy_label(char *buf, size_t len, const char *proxy_id)
{
    snprintf(buf, len, "sandgate.proxy=%s", proxy_id);
}

int sgtest_docker_count(const char *proxy_id)
{
    char l[192];
    proxy_label(l, sizeof(l), proxy_id);
    const char *labels[] = {l, NULL};
    json_object *a = sgtest_docker_list(labels);
    if (a == NULL)
        return -1;
    int n = (int)json_object_array_length(a);
    json_object_put(a);
    return n;
}

char *sgtest_docker_session_container(const char *proxy_id, const char *session_id)
{
    char l1[192], l2[192];
    proxy_label(l1, sizeof(l1), proxy_id);
    snprintf(l2, sizeof(l2), "sandgate.session=%s", session_id);
    const char *labels[] = {l1, l2, NULL};
    json_object *a = sgtest_docker_list(labels);
    char *id = NULL;
    json_object *v;
    if (a != NULL && json_object_array_length(a) == 1 &&
        json_object_object_get_ex(json_object_array_get_idx(a, 0), "Id", &v))
        id = strdup(json_object_get_string(v));
    json_object_put(a);
    return id;
}

bool sgtest_docker_session_on_runsc(const char *proxy_id, const char *session_id)
{
    char *cid = sgtest_docker_session_container(proxy_id, session_id);
    json_object *c = cid != NULL ? sgtest_docker_inspect(cid, NULL) : NULL;
    json_object *rt = c != NULL ? sgtest_jpath(c, "HostConfig.Runtime") : NULL;
    bool on = rt != NULL && strcmp(json_object_get_string(rt), "runsc") == 0;
    json_object_put(c);
    free(cid);
    return on;
}

json_object *sgtest_docker_inspect(const char *id, long *status)
{
    char *esc = curl_easy_escape(NULL, id, 0);
    if (esc == NULL)
        return NULL;
    char path[512];
    snprintf(path, sizeof(path), "/containers/%s/json", esc);
    curl_free(esc);
    sgtest_reply_t r;
    sgtest_docker_call("GET", path, NULL, &r);
    if (status != NULL)
        *status = r.status;
    json_object *o = r.status == 200 ? json_tokener_parse(r.body) : NULL;
    sgtest_reply_free(&r);
    return o;
}

int sgtest_docker_exists(const char *id)
{
    long st = 0;
    json_object *o = sgtest_docker_inspect(id, &st);
    json_object_put(o);
    if (st == 200)
        return 1;
    if (st == 404)
        return 0;
    return -1;
}

int sgtest_docker_wait_gone(const char *id, double timeout_s, double *waited)
{
    double t0 = sgtest_now();
    for (;;) {
        int e = sgtest_docker_exists(id);
        if (e == 0) {
            if (waited != NULL)
                *waited = sgtest_now() - t0;
            return 0;
        }
        if (e < 0 || sgtest_now() - t0 > timeout_s)
            return -1;
        usleep(POLL_INTERVAL_US);
    }
}

int sgtest_docker_wait_count(const char *const *labels, int want, double timeout_s)
{
    double deadline = sgtest_now() + timeout_s;
    for (;;) {
        json_object *a = sgtest_docker_list(labels);
        int n = a != NULL ? (int)json_object_array_length(a) : -1;
        json_object_put(a);
        if (n == want || sgtest_now() > deadline)
            return n;
        usleep(POLL_INTERVAL_US);
    }
}

char **sgtest_docker_ids(const char *const *labels)
{
    json_object *a = sgtest_docker_list(labels);
    if (a == NULL)
        return NULL;
    size_t n = json_object_array_length(a);
    char **v = calloc(n + 1, sizeof(*v));
    size_t k = 0;
    for (size_t i = 0; v != NULL && i < n; i++) {
        json_object *id;
        if (json_object_object_get_ex(json_object_array_get_idx(a, i), "Id", &id))
            v[k++] = strdup(json_object_get_string(id));
    }
    json_object_put(a);
    return v;
}

/* true when a process of container cid has `needle` in its command line,
 * as the container's own kernel lists them (a docker exec reading /proc:
 * GET /top asks the runtime, and runsc's answer is not the sandbox's). */
bool sgtest_docker_container_runs(const char *cid, const char *needle)
{
    char path[256];
    pathf(path, sizeof(path), "/containers/%s/exec", cid);
    sgtest_reply_t r;
    bool found = false;
    const char *cmd = "{\"AttachStdout\":true,\"AttachStderr\":false,"
                      "\"Cmd\":[\"sh\",\"-c\",\"cat /proc/[0-9]*/cmdline | tr '\\\\000' ' '\"]}";
    if (sgtest_docker_call("POST", path, cmd, &r) != 0 || r.status != 201) {
        sgtest_reply_free(&r);
        return false;
    }
    json_object *o = json_tokener_parse(r.body), *id = NULL;
    sgtest_reply_free(&r);
    if (o != NULL && json_object_object_get_ex(o, "Id", &id)) {
        pathf(path, sizeof(path), "/exec/%s/start", json_object_get_string(id));
        if (sgtest_docker_call("POST", path, "{\"Detach\":false,\"Tty\":false}", &r) == 0 && r.status == 200)
            found = r.body != NULL && memmem(r.body, r.body_len, needle, strlen(needle)) != NULL;
        sgtest_reply_free(&r);
    }
    json_object_put(o);
    return found;
}

void sgtest_strv_free(char **v)
{
    for (size_t i = 0; v != NULL && v[i] != NULL; i++)
        free(v[i]);
    free(v);
}

bool sgtest_strv_has(char *const *v, const char *s)
{
    for (size_t i = 0; v != NULL && v[i] != NULL; i++) {
        if (strcmp(v[i], s) == 0)
            return true;
    }
    return false;
}

size_t sgtest_strv_len(char *const *v)
{
    size_t n = 0;
    while (v != NULL && v[n] != NULL)
        n++;
    return n;
}

json_object *sgtest_jpath(json_object *o, const char *dotted)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", dotted);
    json_object *cur = o;
    char *save = NULL;
    for (char *k = strtok_r(buf, ".", &save); k != NULL; k = strtok_r(NULL, ".", &save)) {
        if (cur == NULL || !json_object_object_get_ex(cur, k, &cur))
            return NULL;
    }
    return cur;
}

static bool strv_json_has_prefix(json_object *arr, const char *prefix)
{
    if (arr == NULL || !json_object_is_type(arr, json_type_array))
        return false;
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        const char *s = json_object_get_string(json_object_array_get_idx(arr, i));
        if (s != NULL && strncmp(s, prefix, strlen(prefix)) == 0)
            return true;
    }
    return false;
}

static int64_t jint(json_object *c, const char *dotted)
{
    json_object *v = sgtest_jpath(c, dotted);
    return v != NULL && json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : 0;
}

void sgtest__assert_hardened(json_object *c, const char *file, int line)
{
    json_object *hc = sgtest_jpath(c, "HostConfig");
    json_object *v;
    if (hc == NULL)
        sgtest__fail(c, file, line, "no HostConfig in the inspected container");
    v = sgtest_jpath(c, "HostConfig.NetworkMode");
    if (v == NULL || strcmp(json_object_get_string(v), "none") != 0)
        sgtest__fail(hc, file, line, "HostConfig.NetworkMode must be \"none\"");
    if (!sgtest_json_array_has_string(sgtest_jpath(c, "HostConfig.CapDrop"), "ALL"))
        sgtest__fail(hc, file, line, "HostConfig.CapDrop must hold \"ALL\"");
    /* a sandbox's agent keeps only what makes its children the sandbox user */
    json_object *add = sgtest_jpath(c, "HostConfig.CapAdd");
    for (size_t i = 0; add != NULL && i < json_object_array_length(add); i++) {
        const char *cap = json_object_get_string(json_object_array_get_idx(add, i));
        if (strcmp(cap, "CAP_SETUID") != 0 && strcmp(cap, "CAP_SETGID") != 0 && strcmp(cap, "CAP_SETPCAP") != 0)
            sgtest__fail(hc, file, line, "HostConfig.CapAdd holds %s", cap);
    }
    if (!strv_json_has_prefix(sgtest_jpath(c, "HostConfig.SecurityOpt"), "no-new-privileges"))
        sgtest__fail(hc, file, line, "HostConfig.SecurityOpt must hold no-new-privileges");
    v = sgtest_jpath(c, "HostConfig.ReadonlyRootfs");
    if (v == NULL || !json_object_get_boolean(v))
        sgtest__fail(hc, file, line, "HostConfig.ReadonlyRootfs must be true");
    v = sgtest_jpath(c, "HostConfig.Privileged");
    if (v != NULL && json_object_get_boolean(v))
        sgtest__fail(hc, file, line, "HostConfig.Privileged must be false");
    int64_t mem = jint(c, "HostConfig.Memory");
    if (mem <= 0 || jint(c, "HostConfig.MemorySwap") != mem)
        sgtest__fail(hc, file, line, "HostConfig.Memory == MemorySwap > 0 (no swap)");
    if (jint(c, "HostConfig.PidsLimit") <= 0)
        sgtest__fail(hc, file, line, "HostConfig.PidsLimit must be > 0");
    if (jint(c, "HostConfig.NanoCpus") <= 0)
        sgtest__fail(hc, file, line, "HostConfig.NanoCpus must be > 0");
    v = sgtest_jpath(c, "Config.User");
    const char *user = v ? json_object_get_string(v) : "";
    /* root only for a sandbox's agent, which makes user code 1000:1000 for
     * good (agent/creds.h): exactly "0:0" with the three capabilities that
     * takes, checked above */
    bool agent = strcmp(user, "0:0") == 0 && add != NULL && json_object_array_length(add) == 3;
    if (!agent && (*user == '\0' || strcmp(user, "root") == 0 || strcmp(user, "0") == 0 ||
                   strncmp(user, "0:", 2) == 0 || strncmp(user, "root:", 5) == 0))
        sgtest__fail(sgtest_jpath(c, "Config"), file, line,
                     "Config.User \"%s\" must name a non-root user (or be the agent's 0:0)", user);
}

int sgtest_docker_remove_all(const char *proxy_id)
{
    char l[192];
    proxy_label(l, sizeof(l), proxy_id);
    const char *labels[] = {l, NULL};
    char **ids = sgtest_docker_ids(labels);
    if (ids == NULL)
        return -1;
    int removed = 0, failed = 0;
    for (size_t i = 0; ids[i] != NULL; i++) {
        char path[256];
        snprintf(path, sizeof(path), "/containers/%s?force=1&v=1", ids[i]);
        sgtest_reply_t r;
        sgtest_docker_call("DELETE", path, NULL, &r);
        if (r.status == 204)
            removed++;
        else if (r.status != 404) { /* 404: it went away meanwhile */
            failed++;
            fprintf(stderr, "sgtest: removing container %s: HTTP %ld %s %s\n", ids[i], r.status, r.error, r.body);
        }
        sgtest_reply_free(&r);
    }
    sgtest_strv_free(ids);
    return failed ? -1 : removed;
}

int sgtest_docker_network_remove(const char *name)
{
    char *enc = curl_easy_escape(NULL, name, 0);
    char path[512];
    sgtest_reply_t r;
    if (enc == NULL)
        return -1;
    snprintf(path, sizeof(path), "/networks/%s", enc);
    curl_free(enc);
    sgtest_docker_call("DELETE", path, NULL, &r);
    int rc = r.status == 204 || r.status == 200 || r.status == 404 ? 0 : -1;
    if (rc != 0)
        fprintf(stderr, "sgtest: removing network %s: HTTP %ld %s %s\n", name, r.status, r.error, r.body);
    sgtest_reply_free(&r);
    return rc;
}
