#include "docker.h"
#include "docker_stream.h"
#include "docker_tls.h"
#include "log.h"
#include "util.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DOCKER_REPLY_MAX (16u << 20)
#define DOCKER_TIMEOUT_MS 60000L
#define DOCKER_ARCHIVE_TIMEOUT_MS 300000L

struct sg_docker {
    CURL *curl;
    long timeout_ms; /* of the next request; DOCKER_TIMEOUT_MS unless a call says otherwise */
};

/* Set once by sg_docker_setup (and the first ping), read by every thread. */
static char unix_path[512]; /* non-empty for unix sockets */
static char base_url[512];  /* "http://localhost", "http://host:port" or "https://host:port" */
/* TLS to a tcp:// engine (empty cert_dir: none): Docker's own settings */
static struct {
    char cert_dir[512];
    int verify;
    char host[256], port[8]; /* for the attach connection, which libcurl does not carry */
} tls;
static char api_version[16];
static pthread_mutex_t version_mutex = PTHREAD_MUTEX_INITIALIZER;

/* host[:port] of a tcp:// address (an IPv6 host in brackets, a trailing
 * slash ignored) into tls.host and tls.port, with Docker's default port. */
static int split_host_port(const char *hp, const char *default_port, char *err, size_t errlen)
{
    const char *given = hp, *end = hp + strcspn(hp, "/"), *colon;
    size_t hl;

    if (hp[0] == '[') {
        const char *rb = memchr(hp, ']', (size_t)(end - hp));
        if (rb == NULL)
            goto Bad;
        colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
        if (colon == NULL && rb + 1 != end)
            goto Bad;
        hp++;
        hl = (size_t)(rb - hp);
    } else {
        colon = memchr(hp, ':', (size_t)(end - hp));
        hl = (size_t)((colon != NULL ? colon : end) - hp);
    }
    if (hl == 0 || hl >= sizeof(tls.host))
        goto Bad;
    memcpy(tls.host, hp, hl);
    tls.host[hl] = '\0';
    if (colon != NULL) {
        size_t pl = (size_t)(end - colon - 1);
        if (pl == 0 || pl >= sizeof(tls.port) || strspn(colon + 1, "0123456789") < pl)
            goto Bad;
        memcpy(tls.port, colon + 1, pl);
        tls.port[pl] = '\0';
        if (atol(tls.port) < 1 || atol(tls.port) > 65535)
            goto Bad;
    } else {
        snprintf(tls.port, sizeof(tls.port), "%s", default_port);
    }
    return 0;
Bad:
    snprintf(err, errlen, "DOCKER_HOST \"tcp://%s\" is not tcp://host:port", given);
    return -1;
}

int sg_docker_setup(const char *docker_host, const char *api, const char *tls_verify, const char *cert_path, char *err,
                    size_t errlen)
{
    if (docker_host == NULL || docker_host[0] == '\0')
        docker_host = "unix:///var/run/docker.sock";
    unix_path[0] = '\0';
    tls.cert_dir[0] = '\0';
    /* Docker's convention (its Go client, client.FromEnv): a certificate
     * directory means TLS with that client certificate; the engine's own
     * certificate is verified only when DOCKER_TLS_VERIFY is non-empty (any
     * value), which alone means TLS too, with ~/.docker as the directory. */
    tls.verify = tls_verify != NULL && tls_verify[0] != '\0';
    if (cert_path != NULL && cert_path[0] != '\0')
        snprintf(tls.cert_dir, sizeof(tls.cert_dir), "%s", cert_path);
    else if (tls.verify)
        snprintf(tls.cert_dir, sizeof(tls.cert_dir), "%s/.docker", getenv("HOME") != NULL ? getenv("HOME") : "");
    if (strncmp(docker_host, "unix://", 7) == 0) {
        snprintf(unix_path, sizeof(unix_path), "%s", docker_host + 7);
        snprintf(base_url, sizeof(base_url), "http://localhost");
        tls.cert_dir[0] = '\0'; /* as Docker: TLS settings do not apply to a socket */
    } else if (strncmp(docker_host, "tcp://", 6) == 0) {
        int use_tls = tls.cert_dir[0] != '\0';
        if (split_host_port(docker_host + 6, use_tls ? "2376" : "2375", err, errlen) != 0)
            return -1;
        if (strchr(tls.host, ':') != NULL)
            snprintf(base_url, sizeof(base_url), "%s://[%s]:%s", use_tls ? "https" : "http", tls.host, tls.port);
        else
            snprintf(base_url, sizeof(base_url), "%s://%s:%s", use_tls ? "https" : "http", tls.host, tls.port);
        if (use_tls && sg_docker_tls_setup(tls.cert_dir, tls.verify, err, errlen) != 0)
            return -1;
    } else {
        snprintf(err, errlen, "DOCKER_HOST \"%s\" is neither unix:// nor tcp://", docker_host);
        return -1;
    }
    snprintf(api_version, sizeof(api_version), "%s", api != NULL ? api : "");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return 0;
}

const char *sg_docker_transport(void)
{
    if (unix_path[0] != '\0')
        return "unix socket";
    if (tls.cert_dir[0] == '\0')
        return "tcp, without TLS";
    return tls.verify ? "tcp, TLS, engine certificate verified" : "tcp, TLS, engine certificate NOT verified";
}

void sg_docker_cleanup(void)
{
    sg_docker_tls_cleanup();
}

const char *sg_docker_api_version(void)
{
    return api_version;
}

static void url_for(char *out, size_t outlen, const char *path)
{
    char v[16];
    pthread_mutex_lock(&version_mutex);
    snprintf(v, sizeof(v), "%s", api_version);
    pthread_mutex_unlock(&version_mutex);
    if (v[0] != '\0' && path[0] == '/' && strcmp(path, "/_ping") != 0)
        snprintf(out, outlen, "%s/v%s%s", base_url, v, path);
    else
        snprintf(out, outlen, "%s%s", base_url, path);
}

sg_docker_t *sg_docker_create(void)
{
    sg_docker_t *d = sg_xcalloc(1, sizeof(*d));
    d->curl = curl_easy_init();
    d->timeout_ms = DOCKER_TIMEOUT_MS;
    if (d->curl == NULL) {
        free(d);
        return NULL;
    }
    return d;
}

static pthread_key_t thread_key;
static pthread_once_t thread_key_once = PTHREAD_ONCE_INIT;

static void on_thread_exit(void *d)
{
    sg_docker_destroy(d);
}

static void make_thread_key(void)
{
    pthread_key_create(&thread_key, on_thread_exit);
}

sg_docker_t *sg_docker_thread(void)
{
    sg_docker_t *d;
    pthread_once(&thread_key_once, make_thread_key);
    d = pthread_getspecific(thread_key);
    if (d == NULL) {
        d = sg_docker_create();
        pthread_setspecific(thread_key, d);
    }
    return d;
}

void sg_docker_destroy(sg_docker_t *d)
{
    if (d == NULL)
        return;
    curl_easy_cleanup(d->curl);
    free(d);
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    sg_buf_t *b = arg;
    if (sg_buf_append(b, p, size * n) != 0)
        return 0; /* too big: abort the transfer */
    return size * n;
}

typedef struct {
    char *want;     /* header name with colon, lowercase */
    char value[16]; /* enough for an API version */
} header_grab_t;

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    header_grab_t *g = arg;
    size_t len = size * n, wl = strlen(g->want);
    if (len > wl && strncasecmp(p, g->want, wl) == 0) {
        const char *v = p + wl;
        size_t vl = len - wl;
        while (vl > 0 && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl > 0 && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
            vl--;
        if (vl >= sizeof(g->value))
            vl = sizeof(g->value) - 1;
        memcpy(g->value, v, vl);
        g->value[vl] = '\0';
    }
    return len;
}

/* What a TLS failure most likely means, for the operator ("" if none). */
static const char *tls_hint(CURLcode rc)
{
    if (tls.cert_dir[0] == '\0')
        return "";
    switch (rc) {
    case CURLE_PEER_FAILED_VERIFICATION:
        return " (TLS: the engine's certificate does not chain to DOCKER_CERT_PATH/ca.pem, or does not name the host "
               "of DOCKER_HOST)";
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
        return " (TLS: the engine ended the connection; does it trust the client certificate "
               "DOCKER_CERT_PATH/cert.pem?)";
    default:
        return "";
    }
}

/* The TLS options of a request to a tcp:// engine (curl_easy_reset clears them). */
static void set_tls(CURL *c)
{
    char ca[600], cert[600], key[600];

    snprintf(ca, sizeof(ca), "%s/ca.pem", tls.cert_dir);
    snprintf(cert, sizeof(cert), "%s/cert.pem", tls.cert_dir);
    snprintf(key, sizeof(key), "%s/key.pem", tls.cert_dir);
    curl_easy_setopt(c, CURLOPT_SSLCERT, cert);
    curl_easy_setopt(c, CURLOPT_SSLKEY, key);
    curl_easy_setopt(c, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
    if (tls.verify) {
        curl_easy_setopt(c, CURLOPT_CAINFO, ca);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    } else {
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
}

static int do_request_ct(sg_docker_t *d, const char *method, const char *path, const char *ctype, const char *body,
                         size_t body_len, long *status, sg_buf_t *resp, header_grab_t *grab, char *err, size_t errlen)
{
    char url[1024];
    struct curl_slist *hdrs = NULL;
    CURLcode rc;
    long code = 0;

    url_for(url, sizeof(url), path);
    curl_easy_reset(d->curl);
    curl_easy_setopt(d->curl, CURLOPT_URL, url);
    if (unix_path[0] != '\0')
        curl_easy_setopt(d->curl, CURLOPT_UNIX_SOCKET_PATH, unix_path);
    else if (tls.cert_dir[0] != '\0')
        set_tls(d->curl);
    curl_easy_setopt(d->curl, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(d->curl, CURLOPT_NOBODY, 1L); /* else curl waits for the body a HEAD never has */
    curl_easy_setopt(d->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(d->curl, CURLOPT_TIMEOUT_MS, d->timeout_ms);
    curl_easy_setopt(d->curl, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(d->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(d->curl, CURLOPT_WRITEDATA, resp);
    if (grab != NULL) {
        curl_easy_setopt(d->curl, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(d->curl, CURLOPT_HEADERDATA, grab);
    }
    if (body != NULL) {
        hdrs = curl_slist_append(hdrs, ctype);
        curl_easy_setopt(d->curl, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(d->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(d->curl, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(d->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
    }
    hdrs = curl_slist_append(hdrs, "Expect:");
    curl_easy_setopt(d->curl, CURLOPT_HTTPHEADER, hdrs);

    sg_buf_reset(resp);
    rc = curl_easy_perform(d->curl);
    curl_slist_free_all(hdrs);
    curl_easy_getinfo(d->curl, CURLINFO_RESPONSE_CODE, &code);
    if (status != NULL)
        *status = code;
    if (rc != CURLE_OK) {
        snprintf(err, errlen, "Docker engine did not answer %s %s: %s%s", method, path, curl_easy_strerror(rc),
                 tls_hint(rc));
        return -1;
    }
    return 0;
}

static int do_request(sg_docker_t *d, const char *method, const char *path, const char *body, size_t body_len,
                      long *status, sg_buf_t *resp, header_grab_t *grab, char *err, size_t errlen)
{
    return do_request_ct(d, method, path, "Content-Type: application/json", body, body_len, status, resp, grab, err,
                         errlen);
}

int sg_docker_request(sg_docker_t *d, const char *method, const char *path, const char *body, size_t body_len,
                      long *status, sg_buf_t *resp, char *err, size_t errlen)
{
    return do_request(d, method, path, body, body_len, status, resp, NULL, err, errlen);
}

/* Docker's error replies are {"message": "..."}. */
static void docker_error(const char *what, long status, sg_buf_t *resp, char *err, size_t errlen)
{
    json_object *o = resp->len != 0 ? json_tokener_parse(resp->base) : NULL, *m;
    const char *msg = resp->len != 0 ? resp->base : "(no message)";
    if (o != NULL && json_object_object_get_ex(o, "message", &m))
        msg = json_object_get_string(m);
    snprintf(err, errlen, "Docker refused to %s (%ld): %s", what, status, msg);
    json_object_put(o);
}

/* One call whose whole reply is read (at most cap bytes): 0 when Docker
 * answers ok1 or ok2, else -1 with err saying what Docker refused ("to
 * <what>"). *status (when given) gets Docker's status, 0 if none. With
 * reply non-NULL, a 2xx reply's body is parsed into *reply (NULL when it
 * is not JSON); the caller puts it. */
static int call(sg_docker_t *d, const char *method, const char *path, const char *body, size_t body_len,
                const char *what, long ok1, long ok2, long *status, json_object **reply, size_t cap, char *err,
                size_t errlen)
{
    sg_buf_t resp;
    long st = 0;
    int ret = -1;

    if (reply != NULL)
        *reply = NULL;
    sg_buf_init(&resp, cap);
    if (do_request(d, method, path, body, body_len, &st, &resp, NULL, err, errlen) != 0)
        goto Exit;
    if (st != ok1 && st != ok2) {
        docker_error(what, st, &resp, err, errlen);
        goto Exit;
    }
    if (reply != NULL && st >= 200 && st < 300 && resp.len != 0)
        *reply = json_tokener_parse(resp.base);
    ret = 0;
Exit:
    if (status != NULL)
        *status = st;
    sg_buf_free(&resp);
    return ret;
}

static void archive_url(sg_docker_t *d, char *url, size_t len, const char *id, const char *path, const char *extra);

/* A string member of a JSON reply into out, "" when there is none. */
static void reply_string(json_object *o, const char *key, char *out, size_t outlen)
{
    json_object *v;
    snprintf(out, outlen, "%s", o != NULL && json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "");
}

int sg_docker_ping(sg_docker_t *d, char version[32], char api[16], char *err, size_t errlen)
{
    sg_buf_t resp;
    header_grab_t grab = {"api-version:", ""};
    long status = 0;
    int ret = -1;

    sg_buf_init(&resp, 1 << 16);
    if (do_request(d, "GET", "/_ping", NULL, 0, &status, &resp, &grab, err, errlen) != 0)
        goto Exit;
    if (status != 200) {
        docker_error("answer a ping", status, &resp, err, errlen);
        goto Exit;
    }
    snprintf(api, 16, "%s", grab.value);
    pthread_mutex_lock(&version_mutex);
    if (api_version[0] == '\0')
        snprintf(api_version, sizeof(api_version), "%s", grab.value);
    pthread_mutex_unlock(&version_mutex);
    version[0] = '\0';
    if (do_request(d, "GET", "/version", NULL, 0, &status, &resp, NULL, err, errlen) == 0 && status == 200) {
        json_object *o = json_tokener_parse(resp.base), *v;
        if (o != NULL && json_object_object_get_ex(o, "Version", &v))
            snprintf(version, 32, "%s", json_object_get_string(v));
        json_object_put(o);
    }
    ret = 0;
Exit:
    sg_buf_free(&resp);
    return ret;
}

int sg_docker_runtimes(sg_docker_t *d, json_object **out, char *err, size_t errlen)
{
    json_object *o, *r;

    *out = NULL;
    if (call(d, "GET", "/info", NULL, 0, "describe itself", 200, 200, NULL, &o, DOCKER_REPLY_MAX, err, errlen) != 0)
        return -1;
    if (o == NULL || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        snprintf(err, errlen, "Docker's /info was not a JSON object");
        return -1;
    }
    if (json_object_object_get_ex(o, "Runtimes", &r) && json_object_is_type(r, json_type_object))
        *out = json_object_get(r);
    else
        *out = json_object_new_object();
    json_object_put(o);
    return 0;
}

int sg_docker_container_create(sg_docker_t *d, json_object *config, char id[72], char *err, size_t errlen)
{
    size_t len;
    const char *body = json_object_to_json_string_length(config, JSON_C_TO_STRING_PLAIN, &len);
    json_object *o;

    if (call(d, "POST", "/containers/create", body, len, "create a container", 201, 201, NULL, &o, DOCKER_REPLY_MAX,
             err, errlen) != 0)
        return -1;
    reply_string(o, "Id", id, 72);
    json_object_put(o);
    if (id[0] == '\0') {
        snprintf(err, errlen, "Docker created a container but its reply had no Id");
        return -1;
    }
    return 0;
}

/* METHOD /containers/{id}<suffix>, without a body or a reply. */
static int container_call(sg_docker_t *d, const char *method, const char *id, const char *suffix, const char *what,
                          long ok1, long ok2, char *err, size_t errlen)
{
    char path[256];
    snprintf(path, sizeof(path), "/containers/%s%s", id, suffix);
    return call(d, method, path, NULL, 0, what, ok1, ok2, NULL, NULL, 1 << 20, err, errlen);
}

int sg_docker_container_start(sg_docker_t *d, const char *id, char *err, size_t errlen)
{
    return container_call(d, "POST", id, "/start", "start a container", 204, 304, err, errlen);
}

int sg_docker_container_entrypoint_exists(sg_docker_t *d, const char *id, char *err, size_t errlen)
{
    char path[256], exe[1024], url[1400];
    json_object *o;
    long status = 0;
    int ret = -1;
    sg_buf_t resp;

    snprintf(path, sizeof(path), "/containers/%s/json", id);
    if (call(d, "GET", path, NULL, 0, "inspect a container", 200, 200, NULL, &o, DOCKER_REPLY_MAX, err, errlen) != 0)
        return -1;
    reply_string(o, "Path", exe, sizeof(exe));
    json_object_put(o);
    if (exe[0] != '/')
        return 1; /* found through PATH at start: nothing to look at here */
    archive_url(d, url, sizeof(url), id, exe, "");
    sg_buf_init(&resp, 1 << 16);
    if (do_request(d, "HEAD", url, NULL, 0, &status, &resp, NULL, err, errlen) != 0)
        goto Exit;
    if (status == 200 || status == 404)
        ret = status == 200;
    else
        snprintf(err, errlen, "Docker refused to look at %s in a container (%ld)", exe, status);
Exit:
    sg_buf_free(&resp);
    return ret;
}

int sg_docker_container_remove(sg_docker_t *d, const char *id, char *err, size_t errlen)
{
    return container_call(d, "DELETE", id, "?force=1&v=1", "remove a container", 204, 404, err, errlen);
}

int sg_docker_container_pause(sg_docker_t *d, const char *id, char *err, size_t errlen)
{
    return container_call(d, "POST", id, "/pause", "pause a container", 204, 204, err, errlen);
}

int sg_docker_container_unpause(sg_docker_t *d, const char *id, char *err, size_t errlen)
{
    return container_call(d, "POST", id, "/unpause", "unpause a container", 204, 204, err, errlen);
}

int sg_docker_container_commit(sg_docker_t *d, const char *id, const char *repo, const char *tag, const char *config,
                               char image_id[80], char *err, size_t errlen)
{
    char path[512];
    json_object *o;

    snprintf(path, sizeof(path), "/commit?container=%s&repo=%s&tag=%s&pause=1", id, repo, tag);
    if (config == NULL)
        config = "{}";
    if (call(d, "POST", path, config, strlen(config), "commit a container", 201, 201, NULL, &o, 1 << 20, err, errlen) !=
        0)
        return -1;
    reply_string(o, "Id", image_id, 80);
    json_object_put(o);
    return 0;
}

/* GET <base>filters={"label":[label]}: a JSON array into *out ("what" names
 * the list in errors: "container", "image"). */
static int list_by_label(sg_docker_t *d, const char *base, const char *what, const char *label, json_object **out,
                         char *err, size_t errlen)
{
    char path[1024], doing[32], *enc_filter;
    json_object *f = json_object_new_object(), *arr = json_object_new_array();
    json_object_array_add(arr, json_object_new_string(label));
    json_object_object_add(f, "label", arr);
    enc_filter = curl_easy_escape(d->curl, json_object_to_json_string_ext(f, JSON_C_TO_STRING_PLAIN), 0);
    json_object_put(f);
    if (enc_filter == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(path, sizeof(path), "%sfilters=%s", base, enc_filter);
    curl_free(enc_filter);

    snprintf(doing, sizeof(doing), "list %ss", what);
    if (call(d, "GET", path, NULL, 0, doing, 200, 200, NULL, out, DOCKER_REPLY_MAX, err, errlen) != 0)
        return -1;
    if (*out == NULL || !json_object_is_type(*out, json_type_array)) {
        json_object_put(*out);
        *out = NULL;
        snprintf(err, errlen, "Docker's %s list was not a JSON array", what);
        return -1;
    }
    return 0;
}

int sg_docker_container_list(sg_docker_t *d, const char *label, json_object **out, char *err, size_t errlen)
{
    return list_by_label(d, "/containers/json?all=1&", "container", label, out, err, errlen);
}

int sg_docker_image_exists(sg_docker_t *d, const char *image, char *err, size_t errlen)
{
    char id[80];
    return sg_docker_image_id(d, image, id, err, errlen);
}

int sg_docker_image_id(sg_docker_t *d, const char *image, char id[80], char *err, size_t errlen)
{
    json_object *o;
    int r = sg_docker_image_inspect(d, image, &o, err, errlen);
    if (r == 1)
        reply_string(o, "Id", id, 80);
    json_object_put(o);
    return r;
}

int sg_docker_image_inspect(sg_docker_t *d, const char *image, json_object **out, char *err, size_t errlen)
{
    char path[512];
    long status;

    snprintf(path, sizeof(path), "/images/%s/json", image);
    if (call(d, "GET", path, NULL, 0, "inspect an image", 200, 404, &status, out, DOCKER_REPLY_MAX, err, errlen) != 0)
        return -1;
    if (status == 404)
        return 0;
    if (*out == NULL || !json_object_is_type(*out, json_type_object)) {
        json_object_put(*out);
        *out = NULL;
        snprintf(err, errlen, "Docker's image description was not a JSON object");
        return -1;
    }
    return 1;
}

int sg_docker_image_list(sg_docker_t *d, const char *label, json_object **out, char *err, size_t errlen)
{
    return list_by_label(d, "/images/json?", "image", label, out, err, errlen);
}

int sg_docker_image_remove(sg_docker_t *d, const char *image, long *status, char *err, size_t errlen)
{
    char path[512];
    snprintf(path, sizeof(path), "/images/%s", image);
    return call(d, "DELETE", path, NULL, 0, "remove an image", 200, 404, status, NULL, 1 << 20, err, errlen);
}

/* The archive endpoint of container id for path (escaped), then extra. */
static void archive_url(sg_docker_t *d, char *url, size_t len, const char *id, const char *path, const char *extra)
{
    char *enc = curl_easy_escape(d->curl, path, 0);
    snprintf(url, len, "/containers/%s/archive?path=%s%s", id, enc != NULL ? enc : "", extra);
    curl_free(enc);
}

int sg_docker_archive_get(sg_docker_t *d, const char *id, const char *path, sg_buf_t *out, char *err, size_t errlen)
{
    char url[1400];
    long status;
    sg_buf_t msg;
    int ret = -1;

    archive_url(d, url, sizeof(url), id, path, "");
    d->timeout_ms = DOCKER_ARCHIVE_TIMEOUT_MS;
    if (do_request(d, "GET", url, NULL, 0, &status, out, NULL, err, errlen) != 0) {
        d->timeout_ms = DOCKER_TIMEOUT_MS;
        if (out->len + CURL_MAX_WRITE_SIZE > out->max)
            snprintf(err, errlen, "the archive of %s is larger than %zu bytes", path, out->max);
        return -1;
    }
    d->timeout_ms = DOCKER_TIMEOUT_MS;
    if (status != 200) {
        sg_buf_init(&msg, 1 << 16);
        sg_buf_append(&msg, out->base, out->len < 4096 ? out->len : 4096);
        docker_error("read an archive", status, &msg, err, errlen);
        sg_buf_free(&msg);
        sg_buf_reset(out);
        goto Exit;
    }
    ret = 0;
Exit:
    return ret;
}

int sg_docker_archive_put(sg_docker_t *d, const char *id, const char *path, const void *tar, size_t len, char *err,
                          size_t errlen)
{
    char url[1400];
    long status;
    sg_buf_t resp;
    int ret = -1;

    archive_url(d, url, sizeof(url), id, path, "&noOverwriteDirNonDir=1");
    sg_buf_init(&resp, 1 << 20);
    d->timeout_ms = DOCKER_ARCHIVE_TIMEOUT_MS;
    if (do_request_ct(d, "PUT", url, "Content-Type: application/x-tar", len != 0 ? tar : "", len, &status, &resp, NULL,
                      err, errlen) != 0)
        goto Exit;
    if (status != 200) {
        docker_error("write an archive", status, &resp, err, errlen);
        goto Exit;
    }
    ret = 0;
Exit:
    d->timeout_ms = DOCKER_TIMEOUT_MS;
    sg_buf_free(&resp);
    return ret;
}

/* Reads the reply's status line and headers one byte at a time (they are
 * short), so that no byte of the stream that follows is consumed. */
static int read_headers(int fd, int timeout_ms, char *buf, size_t cap, char *err, size_t errlen)
{
    size_t len = 0;
    while (len + 1 < cap) {
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, timeout_ms);
        if (r == 0) {
            snprintf(err, errlen, "Docker did not answer the attach request in time");
            return -1;
        }
        if (r < 0 && errno == EINTR)
            continue;
        ssize_t n = recv(fd, buf + len, 1, 0);
        if (n <= 0) {
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            snprintf(err, errlen, "Docker closed the attach connection");
            return -1;
        }
        len++;
        buf[len] = '\0';
        if (len >= 4 && memcmp(buf + len - 4, "\r\n\r\n", 4) == 0)
            return 0;
    }
    snprintf(err, errlen, "Docker's attach reply headers were too long");
    return -1;
}

/* The attach request line and headers for container id into req. */
static int attach_request(const char *id, char *req, size_t reqlen)
{
    char url[1024], path[256];
    snprintf(path, sizeof(path), "/containers/%s/attach?stream=1&stdin=1&stdout=1&stderr=1", id);
    url_for(url, sizeof(url), path);
    return snprintf(
        req, reqlen,
        "POST %s HTTP/1.1\r\nHost: docker\r\nContent-Length: 0\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n",
        url + strlen(base_url));
}

/* Whether head is the reply of an attach that Docker accepted; else err
 * gets its status line. */
static int attach_accepted(char *head, char *err, size_t errlen)
{
    if (strncmp(head, "HTTP/1.1 101", 12) != 0 && strncmp(head, "HTTP/1.1 200", 12) != 0 &&
        strncmp(head, "HTTP/1.0 200", 12) != 0) {
        char *eol = strstr(head, "\r\n");
        if (eol != NULL)
            *eol = '\0';
        snprintf(err, errlen, "Docker refused to attach: %s", head);
        return 0;
    }
    return 1;
}

/* Over TLS the engine's socket carries records: the handshake is done here,
 * then a relay thread bridges it to a socketpair whose other end is what the
 * loop reads and writes as on a socket (docker_tls.h). */
static int attach_tls(const char *id, int timeout_ms, int *out_fd, char *err, size_t errlen)
{
    char req[512], head[4096];
    int reqlen = attach_request(id, req, sizeof(req));
    sg_docker_tls_conn_t *c =
        sg_docker_tls_request(tls.host, tls.port, req, (size_t)reqlen, timeout_ms, head, sizeof(head), err, errlen);

    if (c == NULL)
        return -1;
    if (!attach_accepted(head, err, errlen)) {
        sg_docker_tls_close(c);
        return -1;
    }
    return sg_docker_tls_relay(c, out_fd, err, errlen);
}

int sg_docker_attach(const char *id, int timeout_ms, int *out_fd, char *err, size_t errlen)
{
    char url[1024], req[512], head[4096];
    CURL *c;
    curl_socket_t sock;
    int fd = -1, reqlen;
    size_t off = 0;

    if (tls.cert_dir[0] != '\0')
        return attach_tls(id, timeout_ms, out_fd, err, errlen);
    c = curl_easy_init();
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    url_for(url, sizeof(url), "/");
    curl_easy_setopt(c, CURLOPT_URL, url);
    if (unix_path[0] != '\0')
        curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, unix_path);
    curl_easy_setopt(c, CURLOPT_CONNECT_ONLY, 1L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
    CURLcode rc = curl_easy_perform(c);
    if (rc != CURLE_OK) {
        snprintf(err, errlen, "cannot connect to Docker to attach: %s", curl_easy_strerror(rc));
        goto Error;
    }
    if (curl_easy_getinfo(c, CURLINFO_ACTIVESOCKET, &sock) != CURLE_OK || sock == CURL_SOCKET_BAD) {
        snprintf(err, errlen, "libcurl gave no socket for the attach connection");
        goto Error;
    }
    /* keep our own descriptor; curl closes its own at cleanup */
    fd = fcntl(sock, F_DUPFD_CLOEXEC, 0);
    curl_easy_cleanup(c);
    c = NULL;
    if (fd < 0) {
        snprintf(err, errlen, "dup of the attach socket failed: %s", strerror(errno));
        goto Error;
    }
    {
        int flags = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    }
    reqlen = attach_request(id, req, sizeof(req));
    while (off < (size_t)reqlen) {
        ssize_t n = send(fd, req + off, (size_t)reqlen - off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            snprintf(err, errlen, "cannot send the attach request: %s", strerror(errno));
            goto Error;
        }
        off += (size_t)n;
    }
    if (read_headers(fd, timeout_ms, head, sizeof(head), err, errlen) != 0)
        goto Error;
    if (!attach_accepted(head, err, errlen))
        goto Error;
    *out_fd = fd;
    return 0;

Error:
    if (c != NULL)
        curl_easy_cleanup(c);
    if (fd >= 0)
        close(fd);
    return -1;
}

int sg_docker_container_wait(sg_docker_t *d, const char *id, long timeout_ms, long *exit_code, char *err, size_t errlen)
{
    char path[256];
    json_object *o, *v;
    int rc;

    snprintf(path, sizeof(path), "/containers/%s/wait", id);
    d->timeout_ms = timeout_ms;
    rc = call(d, "POST", path, NULL, 0, "wait for a container", 200, 200, NULL, &o, 1 << 16, err, errlen);
    d->timeout_ms = DOCKER_TIMEOUT_MS;
    if (rc != 0)
        return -1;
    *exit_code = o != NULL && json_object_object_get_ex(o, "StatusCode", &v) ? json_object_get_int64(v) : -1;
    json_object_put(o);
    return 0;
}

static void on_log_frame(void *ctx, int stream, const uint8_t *p, size_t len)
{
    sg_buf_t *out = ctx;
    (void)stream;
    sg_buf_append(out, p, len); /* capped: the tail beyond is dropped */
}

int sg_docker_container_logs(sg_docker_t *d, const char *id, sg_buf_t *out, char *err, size_t errlen)
{
    char path[256];
    sg_buf_t resp;
    sg_docker_demux_t demux;
    long status;
    int ret = -1;

    snprintf(path, sizeof(path), "/containers/%s/logs?stdout=1&stderr=1&tail=200", id);
    sg_buf_init(&resp, 4 << 20);
    if (do_request(d, "GET", path, NULL, 0, &status, &resp, NULL, err, errlen) != 0)
        goto Exit;
    if (status != 200) {
        docker_error("read a container's log", status, &resp, err, errlen);
        goto Exit;
    }
    sg_docker_demux_init(&demux);
    sg_docker_demux_feed(&demux, (const uint8_t *)resp.base, resp.len, on_log_frame, out);
    ret = 0;
Exit:
    sg_buf_free(&resp);
    return ret;
}

int sg_docker_volume_create(sg_docker_t *d, const char *name, json_object *labels, char *err, size_t errlen)
{
    json_object *o = json_object_new_object();
    size_t len;
    int rc;

    json_object_object_add(o, "Name", json_object_new_string(name));
    json_object_object_add(o, "Labels", json_object_get(labels));
    const char *body = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &len);
    rc = call(d, "POST", "/volumes/create", body, len, "create a volume", 201, 200, NULL, NULL, 1 << 16, err, errlen);
    json_object_put(o);
    return rc;
}

#define ICC_OPTION "com.docker.network.bridge.enable_icc"

/* 1 when network `name` exists and keeps its containers apart, 0 when it
 * does not exist, -1 on error (or when it exists without the option). */
static int network_check(sg_docker_t *d, const char *name, char *err, size_t errlen)
{
    char path[300];
    long status;
    json_object *o, *opts, *v;
    int ret = 1;

    snprintf(path, sizeof(path), "/networks/%s", name);
    if (call(d, "GET", path, NULL, 0, "inspect a network", 200, 404, &status, &o, 1 << 20, err, errlen) != 0)
        return -1;
    if (status == 404)
        return 0;
    if (o == NULL || !json_object_object_get_ex(o, "Options", &opts) ||
        !json_object_object_get_ex(opts, ICC_OPTION, &v) || strcmp(json_object_get_string(v), "false") != 0) {
        snprintf(err, errlen,
                 "the Docker network %s lets its containers reach each other (" ICC_OPTION
                 " is not \"false\"); remove it, or name another one",
                 name);
        ret = -1;
    }
    json_object_put(o);
    return ret;
}

int sg_docker_network_isolated(sg_docker_t *d, const char *name, json_object *labels, char *err, size_t errlen)
{
    json_object *o, *opts;
    size_t len;
    long status;
    int rc;

    if ((rc = network_check(d, name, err, errlen)) != 0)
        return rc > 0 ? 0 : -1;
    o = json_object_new_object();
    opts = json_object_new_object();
    json_object_object_add(opts, ICC_OPTION, json_object_new_string("false"));
    json_object_object_add(o, "Name", json_object_new_string(name));
    json_object_object_add(o, "Driver", json_object_new_string("bridge"));
    json_object_object_add(o, "CheckDuplicate", json_object_new_boolean(1));
    json_object_object_add(o, "Options", opts);
    json_object_object_add(o, "Labels", json_object_get(labels));
    const char *body = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &len);
    rc = call(d, "POST", "/networks/create", body, len, "create a network", 201, 200, &status, NULL, 1 << 16, err,
              errlen);
    if (rc != 0 && status == 409) /* another proxy made it meanwhile */
        rc = network_check(d, name, err, errlen) == 1 ? 0 : -1;
    json_object_put(o);
    return rc;
}

int sg_docker_volume_remove(sg_docker_t *d, const char *name, char *err, size_t errlen)
{
    char path[300];
    snprintf(path, sizeof(path), "/volumes/%s", name);
    return call(d, "DELETE", path, NULL, 0, "remove a volume", 204, 404, NULL, NULL, 1 << 20, err, errlen);
}
