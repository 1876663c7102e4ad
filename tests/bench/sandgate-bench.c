/*
 * sandgate-bench — latency and throughput of sandgate-proxy (and of the
 * gateway in front of it), next to the Docker engine's own floors. In the
 * spirit of redis-benchmark: it prints one table, it is not a test.
 *
 *   sandgate-bench [--proxy URL] [--gateway URL --token TOKEN] [--lang python]
 *                  [-n N] [-c CLIENTS] [--idle-sessions K] [--skip-docker]
 *
 * Everything goes over HTTP with keep-alive: one CURL easy handle per client
 * thread, reused for all its requests. Docker is reached directly (DOCKER_HOST
 * unix:// or tcp://, default /var/run/docker.sock), never through the CLI.
 *
 * Threads: main() runs the phases one after another; a phase that needs
 * concurrency starts `clients` threads, each with its own handle. Shared
 * between threads: the rows (each has its own mutex), the registry of live
 * sessions (one mutex) and the stop flag set by SIGINT/SIGTERM.
 *
 * Cleanup: every session created is in the registry until its DELETE
 * succeeded; whatever is left is deleted before exit. Every container created
 * directly on Docker carries sandgate.bench=<run id> and is removed by that
 * label before exit. Both happen on every path after start-up, including a
 * signal.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <json-c/json.h>

#define BENCH_TIMEOUT_S 120L            /* every request, proxy and Docker alike */
#define BENCH_MAX_BODY (8u << 20)       /* cap on any reply body we keep */
#define BENCH_COLD_MS 100.0             /* when Docker cannot say: a pool take is ~1 ms */
#define BENCH_WARMUP 10                 /* executes before the timed ones */
#define BENCH_TP_SECONDS 5.0            /* throughput phase wall time */
#define BENCH_TP_MAX_EXEC 1000000       /* a bound on the phase, not its normal end */
#define BENCH_IDLE_SETTLE_MS 3000       /* lets the pool refill before MemAvailable */
#define BENCH_FLOOR_ONCE_RUNS 10
#define BENCH_FLOOR_EXEC_RUNS 20
#define MAX_ROWS 64

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    g_stop = sig;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Sleeps ms milliseconds, or less when a stop was asked for. */
static void sleep_ms(long ms)
{
    while (ms > 0 && !g_stop) {
        long step = ms > 100 ? 100 : ms;
        struct timespec ts = {step / 1000, (step % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        ms -= step;
    }
}

/* ------------------------------------------------------------------------
 * Capped byte buffer: every reply body lands in one.
 * ------------------------------------------------------------------------ */

typedef struct {
    char *data; /* NUL-terminated after len bytes */
    size_t len, cap;
    int too_big;
} buf_t;

static int buf_append(buf_t *b, const void *p, size_t n)
{
    if (b->len + n > BENCH_MAX_BODY) {
        b->too_big = 1;
        return -1;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        char *d;
        while (cap < b->len + n + 1)
            cap *= 2;
        d = realloc(b->data, cap);
        if (d == NULL)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

/* ------------------------------------------------------------------------
 * HTTP client: one easy handle, kept alive across requests.
 * ------------------------------------------------------------------------ */

typedef struct {
    CURL *curl;
    struct curl_slist *hdr_plain, *hdr_json;
    char base[512];
    buf_t body;
    long status;               /* 0 when the transfer itself failed */
    double ms;                 /* wall time of the last request */
    char api_version[32];      /* Api-Version header of the last reply */
    char errbuf[CURL_ERROR_SIZE];
} hc_t;

static size_t on_body(char *p, size_t sz, size_t nm, void *ud)
{
    hc_t *c = ud;
    return buf_append(&c->body, p, sz * nm) == 0 ? sz * nm : 0;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud)
{
    hc_t *c = ud;
    size_t n = sz * nm, i = 0;
    static const char name[] = "Api-Version:";

    if (n > sizeof(name) - 1 && strncasecmp(p, name, sizeof(name) - 1) == 0) {
        p += sizeof(name) - 1;
        n -= sizeof(name) - 1;
        while (n > 0 && (*p == ' ' || *p == '\t'))
            p++, n--;
        while (i < n && i + 1 < sizeof(c->api_version) && !isspace((unsigned char)p[i])) {
            c->api_version[i] = p[i];
            i++;
        }
        c->api_version[i] = '\0';
    }
    return sz * nm;
}

/* base: "http://host:port" (no trailing slash); unix_socket may be NULL;
 * token adds "Authorization: Bearer <token>" when not NULL. */
static int hc_init(hc_t *c, const char *base, const char *unix_socket, const char *token)
{
    char auth[1024];

    memset(c, 0, sizeof(*c));
    if (snprintf(c->base, sizeof(c->base), "%s", base) >= (int)sizeof(c->base))
        return -1;
    c->curl = curl_easy_init();
    if (c->curl == NULL)
        return -1;
    /* curl would send "Expect: 100-continue" on bigger bodies: one round trip more */
    c->hdr_plain = curl_slist_append(NULL, "Expect:");
    c->hdr_json = curl_slist_append(NULL, "Expect:");
    c->hdr_json = curl_slist_append(c->hdr_json, "Content-Type: application/json");
    if (token != NULL) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        c->hdr_plain = curl_slist_append(c->hdr_plain, auth);
        c->hdr_json = curl_slist_append(c->hdr_json, auth);
    }
    if (c->hdr_plain == NULL || c->hdr_json == NULL)
        return -1;
    curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->curl, CURLOPT_TIMEOUT, BENCH_TIMEOUT_S);
    curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(c->curl, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c->curl, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, c->errbuf);
    if (unix_socket != NULL)
        curl_easy_setopt(c->curl, CURLOPT_UNIX_SOCKET_PATH, unix_socket);
    return 0;
}

static void hc_cleanup(hc_t *c)
{
    if (c->curl != NULL)
        curl_easy_cleanup(c->curl);
    curl_slist_free_all(c->hdr_plain);
    curl_slist_free_all(c->hdr_json);
    free(c->body.data);
    memset(c, 0, sizeof(*c));
}

/* One request; json (may be NULL) goes as application/json. Returns 0 when
 * an HTTP reply came back (any status; c->status, c->body), -1 when the
 * transfer failed (c->errbuf says why). */
static int hc_do(hc_t *c, const char *method, const char *path, const char *json)
{
    char url[1024];
    CURLcode rc;
    double t0;

    c->body.len = 0;
    c->body.too_big = 0;
    if (c->body.data != NULL)
        c->body.data[0] = '\0';
    c->status = 0;
    c->ms = 0;
    c->errbuf[0] = '\0';
    c->api_version[0] = '\0';
    if (snprintf(url, sizeof(url), "%s%s", c->base, path) >= (int)sizeof(url)) {
        snprintf(c->errbuf, sizeof(c->errbuf), "URL too long");
        return -1;
    }
    curl_easy_setopt(c->curl, CURLOPT_URL, url);
    curl_easy_setopt(c->curl, CURLOPT_HTTPGET, 1L); /* forgets the last request's body */
    curl_easy_setopt(c->curl, CURLOPT_CUSTOMREQUEST, NULL);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, json != NULL ? c->hdr_json : c->hdr_plain);
    if (json != NULL || strcmp(method, "POST") == 0) {
        curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE, json != NULL ? (long)strlen(json) : 0L);
        curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, json != NULL ? json : "");
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
        curl_easy_setopt(c->curl, CURLOPT_CUSTOMREQUEST, method);

    t0 = now_ms();
    rc = curl_easy_perform(c->curl);
    c->ms = now_ms() - t0;
    if (c->body.data == NULL)
        buf_append(&c->body, "", 0);
    if (rc != CURLE_OK) {
        if (c->body.too_big)
            snprintf(c->errbuf, sizeof(c->errbuf), "reply body over %u bytes", BENCH_MAX_BODY);
        else if (c->errbuf[0] == '\0')
            snprintf(c->errbuf, sizeof(c->errbuf), "%s", curl_easy_strerror(rc));
        return -1;
    }
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &c->status);
    return 0;
}

/* "HTTP 503: {...}" or the transport error, for error reports. */
static void hc_describe(const hc_t *c, char *err, size_t len)
{
    if (c->status == 0)
        snprintf(err, len, "%s", c->errbuf[0] ? c->errbuf : "no reply");
    else
        snprintf(err, len, "HTTP %ld: %.160s", c->status, c->body.data ? c->body.data : "");
}

/* Does the request and checks the status; err gets the description
 * otherwise. */
static int hc_expect(hc_t *c, const char *method, const char *path, const char *json, long want,
                     char *err, size_t errlen)
{
    if (hc_do(c, method, path, json) != 0 || c->status != want) {
        hc_describe(c, err, errlen);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * Result rows: one per line of the final table.
 * ------------------------------------------------------------------------ */

typedef struct {
    char target[16];
    char op[64];
    pthread_mutex_t mu;
    double *ms;
    size_t n, cap;
    size_t errors;
    char first_err[240];
    char note[256];
    int failed; /* failed entirely for a reason not counted in errors */
} row_t;

static row_t rows[MAX_ROWS];
static size_t nrows;

static row_t *row_new(const char *target, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static row_t *row_new(const char *target, const char *fmt, ...)
{
    static row_t spare; /* past MAX_ROWS, numbers go nowhere rather than crash */
    row_t *r = nrows < MAX_ROWS ? &rows[nrows++] : &spare;
    va_list ap;

    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    snprintf(r->target, sizeof(r->target), "%s", target);
    va_start(ap, fmt);
    vsnprintf(r->op, sizeof(r->op), fmt, ap);
    va_end(ap);
    return r;
}

static void row_ok(row_t *r, double ms)
{
    pthread_mutex_lock(&r->mu);
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 256;
        double *p = realloc(r->ms, cap * sizeof(*p));
        if (p == NULL) {
            pthread_mutex_unlock(&r->mu);
            return;
        }
        r->ms = p;
        r->cap = cap;
    }
    r->ms[r->n++] = ms;
    pthread_mutex_unlock(&r->mu);
}

static void row_err(row_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void row_err(row_t *r, const char *fmt, ...)
{
    va_list ap;

    pthread_mutex_lock(&r->mu);
    if (r->errors++ == 0) {
        va_start(ap, fmt);
        vsnprintf(r->first_err, sizeof(r->first_err), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&r->mu);
}

static void row_note(row_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void row_note(row_t *r, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(r->note, sizeof(r->note), fmt, ap);
    va_end(ap);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of the sorted samples. */
static double pct(const double *v, size_t n, unsigned p)
{
    size_t rank = (p * n + 99) / 100;
    return v[rank > 0 ? rank - 1 : 0];
}

static int row_failed(const row_t *r)
{
    return r->failed || (r->n == 0 && r->errors > 0);
}

/* ------------------------------------------------------------------------
 * Options, targets, languages
 * ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    const char *code;         /* the trivial snippet */
    const char *once_argv[4]; /* the interpreter running it once */
} lang_t;

static const lang_t langs[] = {
    {"python", "print(1)", {"python3", "-c", "print(1)", NULL}},
    {"javascript", "console.log(1)", {"node", "-e", "console.log(1)", NULL}},
};

typedef struct {
    const char *name;  /* "proxy", "gateway" */
    const char *base;  /* URL without trailing slash */
    const char *token; /* NULL: no Authorization header */
} target_t;

static struct {
    const char *proxy;
    const char *gateway;
    const char *token;
    const lang_t *lang;
    long n, clients, idle;
    int skip_docker;
    char exec_body[128];      /* {"code":"print(1)"} */
    char ephemeral_body[160]; /* {"code":"print(1)","lang":"python"} */
    char create_body[64];     /* {"lang":"python"} */
} opt = {
    .proxy = "http://127.0.0.1:8000",
    .n = 200,
    .clients = 8,
    .idle = 100,
};

/* ------------------------------------------------------------------------
 * Registry of live sessions, so that every exit path deletes them.
 * ------------------------------------------------------------------------ */

typedef struct {
    const target_t *t;
    char id[64];
} reg_ent_t;

static struct {
    pthread_mutex_t mu;
    reg_ent_t *v;
    size_t n, cap;
} reg = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void reg_add(const target_t *t, const char *id)
{
    pthread_mutex_lock(&reg.mu);
    if (reg.n == reg.cap) {
        size_t cap = reg.cap ? reg.cap * 2 : 64;
        reg_ent_t *v = realloc(reg.v, cap * sizeof(*v));
        if (v == NULL) {
            pthread_mutex_unlock(&reg.mu);
            fprintf(stderr, "sandgate-bench: out of memory; session %s will not be cleaned up\n", id);
            return;
        }
        reg.v = v;
        reg.cap = cap;
    }
    reg.v[reg.n].t = t;
    snprintf(reg.v[reg.n].id, sizeof(reg.v[reg.n].id), "%s", id);
    reg.n++;
    pthread_mutex_unlock(&reg.mu);
}

static void reg_remove(const target_t *t, const char *id)
{
    pthread_mutex_lock(&reg.mu);
    for (size_t i = 0; i < reg.n; i++) {
        if (reg.v[i].t == t && strcmp(reg.v[i].id, id) == 0) {
            reg.v[i] = reg.v[--reg.n];
            break;
        }
    }
    pthread_mutex_unlock(&reg.mu);
}

/* ------------------------------------------------------------------------
 * Session API
 * ------------------------------------------------------------------------ */

/* Ids go into URLs: accept only what a uuid or a Docker id uses, and only
 * up to max bytes (what the buffer it is copied into holds, minus the NUL). */
static int id_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_')
            return 0;
    return 1;
}

/* POST /sessions. On success copies the id (registered for cleanup). */
static int sess_create(hc_t *c, const target_t *t, char id[64], char *err, size_t errlen)
{
    json_object *o = NULL, *v;
    int rc = -1;

    id[0] = '\0';
    if (hc_expect(c, "POST", "/sessions", opt.create_body, 200, err, errlen) != 0)
        return -1;
    o = json_tokener_parse(c->body.data);
    if (o == NULL || !json_object_object_get_ex(o, "session_id", &v) || !json_object_is_type(v, json_type_string) ||
        !id_ok(json_object_get_string(v), 63)) {
        snprintf(err, errlen, "create reply without a usable session_id: %.160s", c->body.data);
        goto Exit;
    }
    snprintf(id, 64, "%s", json_object_get_string(v));
    reg_add(t, id);
    rc = 0;
Exit:
    json_object_put(o);
    return rc;
}

/* DELETE /sessions/{id}. Only a 200 takes the session off the registry: a
 * 404 right after a create can be a lag of the server's own records (the
 * session still lives behind it), so the final cleanup asks once more. */
static int sess_delete(hc_t *c, const target_t *t, const char *id, char *err, size_t errlen)
{
    char path[128];

    snprintf(path, sizeof(path), "/sessions/%s", id);
    if (hc_expect(c, "DELETE", path, NULL, 200, err, errlen) != 0)
        return -1;
    reg_remove(t, id);
    return 0;
}

/* POST path with body; the reply must be 200 with stdout exactly "1\n".
 * agent_ms (may be NULL) gets the reply's execution_time in ms, or -1. */
static int exec_check(hc_t *c, const char *path, const char *body, double *agent_ms, char *err, size_t errlen)
{
    json_object *o, *v;
    const char *out = NULL;
    int rc = -1;

    if (hc_expect(c, "POST", path, body, 200, err, errlen) != 0)
        return -1;
    o = json_tokener_parse(c->body.data);
    if (o != NULL && json_object_object_get_ex(o, "stdout", &v) && json_object_is_type(v, json_type_string))
        out = json_object_get_string(v);
    if (agent_ms != NULL)
        *agent_ms = o != NULL && json_object_object_get_ex(o, "execution_time", &v) ? json_object_get_double(v) * 1e3
                                                                                    : -1;
    if (out != NULL && strcmp(out, "1\n") == 0)
        rc = 0;
    else
        snprintf(err, errlen, "unexpected result: %.180s", c->body.data);
    json_object_put(o);
    return rc;
}

/* ------------------------------------------------------------------------
 * Docker Engine API
 * ------------------------------------------------------------------------ */

static struct {
    int ok;             /* /_ping answered */
    char socket[512];   /* unix socket path; empty for tcp */
    char base[600];     /* "http://localhost/v1.41" */
    char version[32];
    int one_shot;       /* API >= 1.41: stats without the second sample */
    char run_id[48];    /* value of the sandgate.bench label */
} dk;

static int dk_client(hc_t *c)
{
    return hc_init(c, dk.base, dk.socket[0] ? dk.socket : NULL, NULL);
}

/* Reads DOCKER_HOST, pings, learns the API version. 0 or -1 (err). */
static int dk_setup(char *err, size_t errlen)
{
    const char *dh = getenv("DOCKER_HOST");
    char base[560];
    hc_t c;
    int major = 0, minor = 0, rc = -1;

    if (dh == NULL || *dh == '\0')
        dh = "unix:///var/run/docker.sock";
    if (strncmp(dh, "unix://", 7) == 0) {
        snprintf(dk.socket, sizeof(dk.socket), "%s", dh + 7);
        snprintf(base, sizeof(base), "http://localhost");
    } else if (strncmp(dh, "tcp://", 6) == 0) {
        snprintf(base, sizeof(base), "http://%.500s", dh + 6);
    } else {
        snprintf(err, errlen, "DOCKER_HOST=%s: only unix:// and tcp:// are supported", dh);
        return -1;
    }
    if (hc_init(&c, base, dk.socket[0] ? dk.socket : NULL, NULL) != 0) {
        snprintf(err, errlen, "cannot set up libcurl");
        return -1;
    }
    if (hc_do(&c, "GET", "/_ping", NULL) != 0 || c.status != 200 || c.api_version[0] == '\0') {
        char d[200];
        hc_describe(&c, d, sizeof(d));
        snprintf(err, errlen, "Docker at %s does not answer GET /_ping (%s)", dh, d);
        goto Exit;
    }
    snprintf(dk.version, sizeof(dk.version), "%s", c.api_version);
    snprintf(dk.base, sizeof(dk.base), "%s/v%s", base, dk.version);
    if (sscanf(dk.version, "%d.%d", &major, &minor) == 2)
        dk.one_shot = major > 1 || (major == 1 && minor >= 41);
    dk.ok = 1;
    rc = 0;
Exit:
    hc_cleanup(&c);
    return rc;
}

/* The array of GET /containers/json?all=1 filtered by one label "k=v";
 * caller's, NULL on error. */
static json_object *dk_list_label(hc_t *d, const char *label, char *err, size_t errlen)
{
    char filt[256], path[512];
    char *enc;
    json_object *arr;

    snprintf(filt, sizeof(filt), "{\"label\":[\"%s\"]}", label);
    enc = curl_easy_escape(d->curl, filt, 0);
    if (enc == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(path, sizeof(path), "/containers/json?all=1&filters=%s", enc);
    curl_free(enc);
    if (hc_expect(d, "GET", path, NULL, 200, err, errlen) != 0)
        return NULL;
    arr = json_tokener_parse(d->body.data);
    if (arr == NULL || !json_object_is_type(arr, json_type_array)) {
        json_object_put(arr);
        snprintf(err, errlen, "container list is not a JSON array");
        return NULL;
    }
    return arr;
}

/* The container of a session: its Id and its sandgate.kind label ("pool",
 * "session", "ephemeral"). 0, or -1 when there is not exactly one. */
static int dk_session_container(hc_t *d, const char *sid, char cid[80], char kind[16], char *err, size_t errlen)
{
    char label[128];
    json_object *arr, *c, *v, *labels;
    int rc = -1;

    snprintf(label, sizeof(label), "sandgate.session=%s", sid);
    arr = dk_list_label(d, label, err, errlen);
    if (arr == NULL)
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
static int dk_mem_bytes(hc_t *d, const char *cid, double *bytes, char *err, size_t errlen)
{
    char path[200];
    json_object *o, *ms, *v, *st;
    double usage, cache = 0;
    int rc = -1;

    snprintf(path, sizeof(path), "/containers/%s/stats?stream=false%s", cid, dk.one_shot ? "&one-shot=true" : "");
    if (hc_expect(d, "GET", path, NULL, 200, err, errlen) != 0)
        return -1;
    o = json_tokener_parse(d->body.data);
    if (o == NULL || !json_object_object_get_ex(o, "memory_stats", &ms) ||
        !json_object_object_get_ex(ms, "usage", &v)) {
        snprintf(err, errlen, "stats without memory_stats.usage: %.120s", d->body.data);
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
    return rc;
}

static int dk_remove(hc_t *d, const char *cid, char *err, size_t errlen)
{
    char path[200];

    snprintf(path, sizeof(path), "/containers/%s?force=1&v=1", cid);
    if (hc_do(d, "DELETE", path, NULL) != 0 || (d->status != 204 && d->status != 404)) {
        hc_describe(d, err, errlen);
        return -1;
    }
    return 0;
}

/* Removes every container labelled sandgate.bench=<run id>. Returns how
 * many could not be removed (or -1 when listing failed). */
static int dk_sweep(void)
{
    char label[96], err[256];
    json_object *arr, *v;
    hc_t d;
    int left = 0;

    if (!dk.ok)
        return 0;
    if (dk_client(&d) != 0)
        return -1;
    snprintf(label, sizeof(label), "sandgate.bench=%s", dk.run_id);
    arr = dk_list_label(&d, label, err, sizeof(err));
    if (arr == NULL) {
        fprintf(stderr, "sandgate-bench: cannot list bench containers: %s\n", err);
        hc_cleanup(&d);
        return -1;
    }
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        if (json_object_object_get_ex(json_object_array_get_idx(arr, i), "Id", &v) &&
            dk_remove(&d, json_object_get_string(v), err, sizeof(err)) != 0) {
            fprintf(stderr, "sandgate-bench: cannot remove container %.12s: %s\n", json_object_get_string(v), err);
            left++;
        }
    }
    json_object_put(arr);
    hc_cleanup(&d);
    return left;
}

/* POST /containers/create of image sandgate/<lang>:latest with entrypoint
 * argv, no network, our label. Copies the Id. */
static int dk_create(hc_t *d, const char *const *argv, char cid[80], char *err, size_t errlen)
{
    json_object *body = json_object_new_object(), *ep = json_object_new_array(), *labels = json_object_new_object();
    json_object *hc = json_object_new_object(), *o = NULL, *v;
    char image[96];
    int rc = -1;

    snprintf(image, sizeof(image), "sandgate/%s:latest", opt.lang->name);
    for (size_t i = 0; argv[i] != NULL; i++)
        json_object_array_add(ep, json_object_new_string(argv[i]));
    json_object_object_add(body, "Image", json_object_new_string(image));
    json_object_object_add(body, "Entrypoint", ep);
    json_object_object_add(labels, "sandgate.bench", json_object_new_string(dk.run_id));
    json_object_object_add(body, "Labels", labels);
    json_object_object_add(hc, "NetworkMode", json_object_new_string("none"));
    json_object_object_add(body, "HostConfig", hc);
    if (hc_expect(d, "POST", "/containers/create", json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN), 201,
                  err, errlen) != 0)
        goto Exit;
    o = json_tokener_parse(d->body.data);
    if (o == NULL || !json_object_object_get_ex(o, "Id", &v) || !id_ok(json_object_get_string(v), 79)) {
        snprintf(err, errlen, "create reply without Id: %.120s", d->body.data);
        goto Exit;
    }
    snprintf(cid, 80, "%s", json_object_get_string(v));
    rc = 0;
Exit:
    json_object_put(o);
    json_object_put(body);
    return rc;
}

/* Docker's multiplexed stream: 8-byte headers {stream, 0, 0, 0, size BE32}
 * then the payload. Copies stream 1 (stdout) into out (capped, NUL
 * terminated). -1 when the stream is cut inside a frame. */
static int demux_stdout(const char *p, size_t len, char *out, size_t outlen)
{
    size_t o = 0;

    while (len >= 8) {
        const unsigned char *h = (const unsigned char *)p;
        size_t sz = (size_t)h[4] << 24 | (size_t)h[5] << 16 | (size_t)h[6] << 8 | h[7];
        if (sz > len - 8)
            return -1;
        if (h[0] == 1) {
            size_t k = sz < outlen - 1 - o ? sz : outlen - 1 - o;
            memcpy(out + o, p + 8, k);
            o += k;
        }
        p += 8 + sz;
        len -= 8 + sz;
    }
    out[o] = '\0';
    return len == 0 ? 0 : -1;
}

/* exec create + start (stream read to EOF) + inspect in container cid.
 * want_stdout NULL: only the exit code (0) is checked. */
static int dk_exec(hc_t *d, const char *cid, const char *const *argv, const char *want_stdout, char *err,
                   size_t errlen)
{
    json_object *body = json_object_new_object(), *cmd = json_object_new_array(), *o = NULL, *v;
    char path[200], eid[80], out[256];
    int rc = -1;

    for (size_t i = 0; argv[i] != NULL; i++)
        json_object_array_add(cmd, json_object_new_string(argv[i]));
    json_object_object_add(body, "AttachStdout", json_object_new_boolean(1));
    json_object_object_add(body, "AttachStderr", json_object_new_boolean(1));
    json_object_object_add(body, "Cmd", cmd);
    snprintf(path, sizeof(path), "/containers/%s/exec", cid);
    if (hc_expect(d, "POST", path, json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN), 201, err,
                  errlen) != 0)
        goto Exit;
    o = json_tokener_parse(d->body.data);
    if (o == NULL || !json_object_object_get_ex(o, "Id", &v) || !id_ok(json_object_get_string(v), 79)) {
        snprintf(err, errlen, "exec create reply without Id: %.120s", d->body.data);
        goto Exit;
    }
    snprintf(eid, sizeof(eid), "%s", json_object_get_string(v));
    json_object_put(o);
    o = NULL;

    snprintf(path, sizeof(path), "/exec/%s/start", eid);
    if (hc_expect(d, "POST", path, "{\"Detach\":false,\"Tty\":false}", 200, err, errlen) != 0)
        goto Exit;
    if (demux_stdout(d->body.data, d->body.len, out, sizeof(out)) != 0) {
        snprintf(err, errlen, "exec stream cut inside a frame (%zu bytes)", d->body.len);
        goto Exit;
    }

    snprintf(path, sizeof(path), "/exec/%s/json", eid);
    if (hc_expect(d, "GET", path, NULL, 200, err, errlen) != 0)
        goto Exit;
    o = json_tokener_parse(d->body.data);
    if (o == NULL || !json_object_object_get_ex(o, "ExitCode", &v) || json_object_get_int(v) != 0) {
        snprintf(err, errlen, "exec did not exit 0: %.120s", d->body.data);
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
    return rc;
}

/* ------------------------------------------------------------------------
 * Running a function over indexes 0..count-1 on `threads` client threads,
 * each with its own handle to base.
 * ------------------------------------------------------------------------ */

typedef struct par par_t;
struct par {
    void (*fn)(par_t *p, hc_t *c, long i);
    void *ud;
    long count;
    atomic_long next;
    const char *base, *sock, *token;
    int ignore_stop; /* cleanup work runs even after a signal */
};

static void *par_main(void *arg)
{
    par_t *p = arg;
    hc_t c;

    if (hc_init(&c, p->base, p->sock, p->token) != 0)
        return NULL;
    for (;;) {
        long i = atomic_fetch_add(&p->next, 1);
        if (i >= p->count || (g_stop && !p->ignore_stop))
            break;
        p->fn(p, &c, i);
    }
    hc_cleanup(&c);
    return NULL;
}

static void par_run(par_t *p, long threads)
{
    pthread_t *tid;
    long started = 0;

    atomic_store(&p->next, 0);
    if (threads > p->count)
        threads = p->count;
    tid = calloc(threads > 0 ? threads : 1, sizeof(*tid));
    for (long i = 0; tid != NULL && i < threads; i++) {
        if (pthread_create(&tid[i], NULL, par_main, p) != 0)
            break;
        started++;
    }
    if (started == 0)
        par_main(p); /* no thread could start: do the work here */
    for (long i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    free(tid);
}

/* ------------------------------------------------------------------------
 * Phase 1: latencies through one target, one client.
 * ------------------------------------------------------------------------ */

/* Whether a create came from the warm pool. Docker says it best (the
 * container's sandgate.kind label is "pool" for pooled ones); without it,
 * the latency does (a take is ~1 ms, a new container hundreds). */
static int create_was_cold(hc_t *d, const char *sid, double ms)
{
    char cid[80], kind[16], err[256];

    if (d != NULL && dk_session_container(d, sid, cid, kind, err, sizeof(err)) == 0 && kind[0] != '\0')
        return strcmp(kind, "pool") != 0;
    return ms > BENCH_COLD_MS;
}

static void phase_latency(const target_t *t)
{
    hc_t c, dd, *d = NULL;
    char id[64], err[256], path[128];
    row_t *warm = row_new(t->name, "session create (pool warm)");
    row_t *cold = row_new(t->name, "session create (cold, pool drained)");
    row_t *exe = row_new(t->name, "execute %s in session", opt.lang->code);
    row_t *exe_agent = row_new(t->name, "  its execution_time (agent-measured)");
    row_t *eph = row_new(t->name, "ephemeral execute");
    row_t *del = row_new(t->name, "session delete");
    long want_cold = opt.n / 10 > 0 ? opt.n / 10 : 1, burst_cold = 0, made = 0, streak = 0;
    char (*burst)[64] = NULL;

    if (hc_init(&c, t->base, NULL, t->token) != 0) {
        warm->failed = 1;
        return;
    }
    if (dk.ok && dk_client(&dd) == 0)
        d = &dd;

    /* create + delete as pairs: at most one live session, and a pause after
     * a cold create so the pool can refill; otherwise back-to-back creates
     * drain it within pool_size pairs and "warm" would measure Docker. */
    fprintf(stderr, "sandgate-bench: %s: %ld create/delete pairs\n", t->name, opt.n);
    for (long i = 0; i < opt.n && !g_stop; i++) {
        int is_cold;
        double ms;
        if (sess_create(&c, t, id, err, sizeof(err)) != 0) {
            row_err(warm, "%s", err);
            continue;
        }
        ms = c.ms;
        is_cold = create_was_cold(d, id, ms);
        row_ok(is_cold ? cold : warm, ms);
        if (sess_delete(&c, t, id, err, sizeof(err)) != 0)
            row_err(del, "%s", err);
        else
            row_ok(del, c.ms);
        if (is_cold) {
            /* Three cold ones in a row despite pausing: there is no pool
             * (or it cannot keep up); stop waiting for it. */
            if (streak++ < 3)
                sleep_ms(ms * 2 < 500 ? 500 : ms * 2 > 5000 ? 5000 : (long)(ms * 2));
        } else {
            streak = 0;
        }
    }

    /* The cold path: back-to-back creates drain the pool; go on until
     * want_cold creates needed a new container (pooled ones met on the
     * way, refilled meanwhile, count as warm), then delete them all. */
    fprintf(stderr, "sandgate-bench: %s: back-to-back creates until %ld cold ones\n", t->name, want_cold);
    burst = calloc(want_cold + 64, sizeof(*burst));
    while (burst != NULL && burst_cold < want_cold && made < want_cold + 64 && !g_stop) {
        double ms;
        int is_cold;
        if (sess_create(&c, t, burst[made], err, sizeof(err)) != 0) {
            row_err(cold, "%s", err);
            break; /* at_capacity or worse: more would not help */
        }
        ms = c.ms;
        is_cold = create_was_cold(d, burst[made], ms);
        row_ok(is_cold ? cold : warm, ms);
        burst_cold += is_cold;
        made++;
    }
    for (long i = 0; i < made; i++) {
        if (sess_delete(&c, t, burst[i], err, sizeof(err)) != 0)
            row_err(del, "%s", err);
        else
            row_ok(del, c.ms);
    }
    free(burst);
    sleep_ms(2000); /* the pool refills before the next numbers */

    /* execute in one session */
    fprintf(stderr, "sandgate-bench: %s: %d + %ld executes in one session\n", t->name, BENCH_WARMUP, opt.n);
    if (!g_stop && sess_create(&c, t, id, err, sizeof(err)) != 0) {
        row_err(exe, "no session to execute in: %s", err);
    } else if (!g_stop) {
        snprintf(path, sizeof(path), "/sessions/%s/execute", id);
        for (int i = 0; i < BENCH_WARMUP && !g_stop; i++)
            if (exec_check(&c, path, opt.exec_body, NULL, err, sizeof(err)) != 0)
                row_err(exe, "warm-up: %s", err);
        for (long i = 0; i < opt.n && !g_stop; i++) {
            double agent_ms;
            if (exec_check(&c, path, opt.exec_body, &agent_ms, err, sizeof(err)) != 0) {
                row_err(exe, "%s", err);
                continue;
            }
            row_ok(exe, c.ms);
            if (agent_ms >= 0)
                row_ok(exe_agent, agent_ms);
        }
        if (sess_delete(&c, t, id, err, sizeof(err)) != 0)
            row_err(del, "%s", err);
        else
            row_ok(del, c.ms);
    }

    /* ephemeral executes, back to back */
    fprintf(stderr, "sandgate-bench: %s: %ld ephemeral executes\n", t->name, opt.n / 4 > 0 ? opt.n / 4 : 1);
    for (long i = 0; i < (opt.n / 4 > 0 ? opt.n / 4 : 1) && !g_stop; i++) {
        if (exec_check(&c, "/execute", opt.ephemeral_body, NULL, err, sizeof(err)) != 0)
            row_err(eph, "%s", err);
        else
            row_ok(eph, c.ms);
    }

    if (warm->n > 0 || cold->n > 0)
        row_note(warm, "%zu of %zu creates took a pooled container", warm->n, warm->n + cold->n);
    if (d != NULL)
        hc_cleanup(d);
    hc_cleanup(&c);
}

/* ------------------------------------------------------------------------
 * Phase 2: throughput, C clients each executing in its own session.
 * ------------------------------------------------------------------------ */

/* Start line: clients set up their session, then all start executing at
 * once, so that the wall time covers only executions. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long ready;
    int go;
} gate_t;

typedef struct {
    const target_t *t;
    row_t *row;
    gate_t *gate;
    atomic_long *issued;
    long max_exec;
    double start, end; /* ms; start 0: this client had no session */
} tp_arg_t;

static void *tp_main(void *arg)
{
    tp_arg_t *a = arg;
    hc_t c;
    char id[64] = "", err[256], path[128];
    int have = 0, inited = hc_init(&c, a->t->base, NULL, a->t->token) == 0;

    if (inited && sess_create(&c, a->t, id, err, sizeof(err)) == 0)
        have = 1;
    else
        row_err(a->row, "no session: %s", inited ? err : "cannot set up libcurl");
    snprintf(path, sizeof(path), "/sessions/%s/execute", id);
    if (have) /* one untimed execute: the first one of a session is not the steady state */
        exec_check(&c, path, opt.exec_body, NULL, err, sizeof(err));

    pthread_mutex_lock(&a->gate->mu);
    a->gate->ready++;
    pthread_cond_broadcast(&a->gate->cv);
    while (!a->gate->go)
        pthread_cond_wait(&a->gate->cv, &a->gate->mu);
    pthread_mutex_unlock(&a->gate->mu);

    if (have) {
        double deadline;
        a->start = now_ms();
        deadline = a->start + BENCH_TP_SECONDS * 1e3;
        while (!g_stop && now_ms() < deadline && atomic_fetch_add(a->issued, 1) < a->max_exec) {
            if (exec_check(&c, path, opt.exec_body, NULL, err, sizeof(err)) != 0)
                row_err(a->row, "%s", err);
            else
                row_ok(a->row, c.ms);
        }
        a->end = now_ms();
        if (sess_delete(&c, a->t, id, err, sizeof(err)) != 0)
            fprintf(stderr, "sandgate-bench: delete after throughput: %s\n", err);
    }
    if (inited)
        hc_cleanup(&c);
    return NULL;
}

static void phase_throughput(const target_t *t)
{
    row_t *r = row_new(t->name, "throughput, %ld clients", opt.clients);
    gate_t gate = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    atomic_long issued = 0;
    tp_arg_t *a = calloc(opt.clients, sizeof(*a));
    pthread_t *tid = calloc(opt.clients, sizeof(*tid));
    long started = 0;
    double t0 = 0, t1 = 0;

    fprintf(stderr, "sandgate-bench: %s: throughput, %ld clients, %.0f s or %ld executes\n", t->name, opt.clients,
            BENCH_TP_SECONDS, (long)BENCH_TP_MAX_EXEC);
    if (a == NULL || tid == NULL || g_stop) {
        r->failed = 1;
        goto Exit;
    }
    for (long i = 0; i < opt.clients; i++) {
        a[i] = (tp_arg_t){.t = t, .row = r, .gate = &gate, .issued = &issued, .max_exec = BENCH_TP_MAX_EXEC};
        if (pthread_create(&tid[i], NULL, tp_main, &a[i]) != 0) {
            row_err(r, "could start only %ld of %ld client threads", started, opt.clients);
            break;
        }
        started++;
    }
    pthread_mutex_lock(&gate.mu);
    while (gate.ready < started)
        pthread_cond_wait(&gate.cv, &gate.mu);
    gate.go = 1;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    for (long i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    for (long i = 0; i < started; i++) {
        if (a[i].start == 0)
            continue;
        if (t0 == 0 || a[i].start < t0)
            t0 = a[i].start;
        if (a[i].end > t1)
            t1 = a[i].end;
    }
    if (t1 > t0 && r->n > 0)
        row_note(r, "%.1f exec/s over %.1f s%s", r->n / ((t1 - t0) / 1e3), (t1 - t0) / 1e3,
                 atomic_load(&issued) >= BENCH_TP_MAX_EXEC ? " (stopped at the execute cap)" : "");
Exit:
    free(a);
    free(tid);
}

/* ------------------------------------------------------------------------
 * Phase 3: K idle sessions, and what they cost in memory.
 * ------------------------------------------------------------------------ */

static long long meminfo_kb(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    size_t klen = strlen(key);
    long long v = -1;

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = strtoll(line + klen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

typedef struct {
    const target_t *t;
    row_t *row;
    char (*ids)[64];
    double *mem;      /* bytes per session, -1 unknown */
    atomic_long ok, mem_ok;
    char mem_err[256];
    pthread_mutex_t mu;
} idle_t;

static void on_idle_create(par_t *p, hc_t *c, long i)
{
    idle_t *s = p->ud;
    char err[256];

    if (sess_create(c, s->t, s->ids[i], err, sizeof(err)) != 0) {
        row_err(s->row, "%s", err);
        return;
    }
    row_ok(s->row, c->ms);
    atomic_fetch_add(&s->ok, 1);
}

static void on_idle_mem(par_t *p, hc_t *c, long i)
{
    idle_t *s = p->ud;
    char cid[80], kind[16], err[256];

    if (s->ids[i][0] == '\0')
        return;
    if (dk_session_container(c, s->ids[i], cid, kind, err, sizeof(err)) != 0 ||
        dk_mem_bytes(c, cid, &s->mem[i], err, sizeof(err)) != 0) {
        pthread_mutex_lock(&s->mu);
        if (s->mem_err[0] == '\0')
            snprintf(s->mem_err, sizeof(s->mem_err), "%s", err);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    atomic_fetch_add(&s->mem_ok, 1);
}

static void on_idle_delete(par_t *p, hc_t *c, long i)
{
    idle_t *s = p->ud;
    char err[256];

    if (s->ids[i][0] != '\0' && sess_delete(c, s->t, s->ids[i], err, sizeof(err)) != 0)
        fprintf(stderr, "sandgate-bench: delete of idle session %s: %s\n", s->ids[i], err);
}

static void phase_idle(const target_t *t)
{
    row_t *r = row_new(t->name, "idle sessions (create, %ld parallel)", opt.clients);
    idle_t s = {.t = t, .row = r};
    par_t p = {.ud = &s, .count = opt.idle, .base = t->base, .token = t->token};
    long long before, after;
    double t0, secs, docker_sum = 0;
    char docker_txt[96] = "docker: skipped", host_txt[64] = "host: n/a";

    fprintf(stderr, "sandgate-bench: %s: %ld idle sessions\n", t->name, opt.idle);
    pthread_mutex_init(&s.mu, NULL);
    s.ids = calloc(opt.idle, sizeof(*s.ids));
    s.mem = calloc(opt.idle, sizeof(*s.mem));
    if (s.ids == NULL || s.mem == NULL) {
        r->failed = 1;
        goto Exit;
    }
    before = meminfo_kb("MemAvailable");
    p.fn = on_idle_create;
    t0 = now_ms();
    par_run(&p, opt.clients);
    secs = (now_ms() - t0) / 1e3;
    sleep_ms(BENCH_IDLE_SETTLE_MS);
    after = meminfo_kb("MemAvailable");

    if (dk.ok && !g_stop && atomic_load(&s.ok) > 0) {
        par_t m = {.fn = on_idle_mem, .ud = &s, .count = opt.idle, .base = dk.base,
                   .sock = dk.socket[0] ? dk.socket : NULL};
        par_run(&m, opt.clients);
        for (long i = 0; i < opt.idle; i++)
            docker_sum += s.mem[i];
        if (atomic_load(&s.mem_ok) > 0)
            snprintf(docker_txt, sizeof(docker_txt), "%.1f MiB/session (docker, %ld read)",
                     docker_sum / atomic_load(&s.mem_ok) / 1048576.0, (long)atomic_load(&s.mem_ok));
        else
            snprintf(docker_txt, sizeof(docker_txt), "docker: no stats");
        if (s.mem_err[0] != '\0')
            row_err(r, "docker stats: %s", s.mem_err);
    }
    if (before > 0 && after > 0 && atomic_load(&s.ok) > 0)
        snprintf(host_txt, sizeof(host_txt), "%.1f MiB (host MemAvailable)",
                 (before - after) / 1024.0 / atomic_load(&s.ok));
    row_note(r, "%ld/%ld ok in %.1f s; %s; %s", (long)atomic_load(&s.ok), opt.idle, secs, docker_txt, host_txt);

    p.fn = on_idle_delete;
    p.ignore_stop = 1;
    par_run(&p, opt.clients);
Exit:
    pthread_mutex_destroy(&s.mu);
    free(s.ids);
    free(s.mem);
}

/* ------------------------------------------------------------------------
 * Phase 4: floors on the Docker engine itself.
 * ------------------------------------------------------------------------ */

static void phase_docker(void)
{
    row_t *once = row_new("docker", "new container, %s once", opt.lang->name);
    row_t *exi = row_new("docker", "exec in running container, %s", opt.lang->name);
    row_t *ext = row_new("docker", "exec in running container, true");
    static const char *const sleeper[] = {"sleep", "3600", NULL};
    static const char *const truth[] = {"/bin/true", NULL};
    char cid[80], err[256], path[200];
    hc_t d;

    if (!dk.ok) {
        row_err(once, "Docker not reachable");
        row_err(exi, "Docker not reachable");
        row_err(ext, "Docker not reachable");
        return;
    }
    if (dk_client(&d) != 0) {
        once->failed = exi->failed = ext->failed = 1;
        return;
    }

    fprintf(stderr, "sandgate-bench: docker: %d runs of a new container\n", BENCH_FLOOR_ONCE_RUNS);
    for (int i = 0; i < BENCH_FLOOR_ONCE_RUNS && !g_stop; i++) {
        double t0 = now_ms();
        json_object *o = NULL, *v;
        cid[0] = '\0';
        if (dk_create(&d, opt.lang->once_argv, cid, err, sizeof(err)) != 0)
            goto Fail;
        snprintf(path, sizeof(path), "/containers/%s/start", cid);
        if (hc_expect(&d, "POST", path, NULL, 204, err, sizeof(err)) != 0)
            goto Fail;
        snprintf(path, sizeof(path), "/containers/%s/wait", cid);
        if (hc_expect(&d, "POST", path, NULL, 200, err, sizeof(err)) != 0)
            goto Fail;
        o = json_tokener_parse(d.body.data);
        if (o == NULL || !json_object_object_get_ex(o, "StatusCode", &v) || json_object_get_int(v) != 0) {
            snprintf(err, sizeof(err), "container did not exit 0: %.120s", d.body.data);
            json_object_put(o);
            goto Fail;
        }
        json_object_put(o);
        if (dk_remove(&d, cid, err, sizeof(err)) != 0)
            goto Fail;
        row_ok(once, now_ms() - t0);
        continue;
    Fail:
        row_err(once, "%s", err);
        if (cid[0] != '\0')
            dk_remove(&d, cid, err, sizeof(err));
    }

    fprintf(stderr, "sandgate-bench: docker: %d + %d execs in a running container\n", BENCH_FLOOR_EXEC_RUNS,
            BENCH_FLOOR_EXEC_RUNS);
    cid[0] = '\0';
    if (g_stop)
        goto Exit;
    if (dk_create(&d, sleeper, cid, err, sizeof(err)) != 0) {
        row_err(exi, "container: %s", err);
        row_err(ext, "container: %s", err);
        goto Exit;
    }
    snprintf(path, sizeof(path), "/containers/%s/start", cid);
    if (hc_expect(&d, "POST", path, NULL, 204, err, sizeof(err)) != 0) {
        row_err(exi, "start: %s", err);
        row_err(ext, "start: %s", err);
        goto Exit;
    }
    /* one untimed of each: the first exec pays for page cache and the like */
    dk_exec(&d, cid, opt.lang->once_argv, NULL, err, sizeof(err));
    dk_exec(&d, cid, truth, NULL, err, sizeof(err));
    for (int i = 0; i < BENCH_FLOOR_EXEC_RUNS && !g_stop; i++) {
        double t0 = now_ms();
        if (dk_exec(&d, cid, opt.lang->once_argv, "1\n", err, sizeof(err)) != 0)
            row_err(exi, "%s", err);
        else
            row_ok(exi, now_ms() - t0);
    }
    for (int i = 0; i < BENCH_FLOOR_EXEC_RUNS && !g_stop; i++) {
        double t0 = now_ms();
        if (dk_exec(&d, cid, truth, NULL, err, sizeof(err)) != 0)
            row_err(ext, "%s", err);
        else
            row_ok(ext, now_ms() - t0);
    }
Exit:
    if (cid[0] != '\0' && dk_remove(&d, cid, err, sizeof(err)) != 0)
        fprintf(stderr, "sandgate-bench: cannot remove container %.12s: %s\n", cid, err);
    hc_cleanup(&d);
}

/* ------------------------------------------------------------------------
 * Cleanup, report, main
 * ------------------------------------------------------------------------ */

static void on_cleanup_delete(par_t *p, hc_t *c, long i)
{
    reg_ent_t *e = &((reg_ent_t *)p->ud)[i];
    char err[256];

    if (sess_delete(c, e->t, e->id, err, sizeof(err)) == 0) {
        fprintf(stderr, "sandgate-bench: %s: session %s deleted at cleanup\n", e->t->name, e->id);
    } else if (c->status == 404) {
        reg_remove(e->t, e->id); /* asked twice, gone twice: it is gone */
    } else {
        fprintf(stderr, "sandgate-bench: %s: cannot delete session %s: %s\n", e->t->name, e->id, err);
    }
}

/* Deletes every session still registered. Returns how many are left. */
static size_t reg_cleanup(void)
{
    reg_ent_t *copy;
    size_t n;

    pthread_mutex_lock(&reg.mu);
    n = reg.n;
    copy = n ? malloc(n * sizeof(*copy)) : NULL;
    if (copy != NULL)
        memcpy(copy, reg.v, n * sizeof(*copy));
    pthread_mutex_unlock(&reg.mu);
    if (n > 0)
        fprintf(stderr, "sandgate-bench: deleting %zu session(s) left over\n", n);
    /* one target at a time: the handles of a par_run share one base URL */
    for (size_t i = 0; copy != NULL && i < n;) {
        size_t j = i;
        while (j < n && copy[j].t == copy[i].t)
            j++;
        par_t p = {.fn = on_cleanup_delete, .ud = copy + i, .count = (long)(j - i), .base = copy[i].t->base,
                   .token = copy[i].t->token, .ignore_stop = 1};
        par_run(&p, opt.clients);
        i = j;
    }
    free(copy);
    pthread_mutex_lock(&reg.mu);
    n = reg.n;
    pthread_mutex_unlock(&reg.mu);
    return n;
}

static void fmt_ms(char *out, size_t len, double v, int have)
{
    if (!have)
        snprintf(out, len, "-");
    else if (v < 10)
        snprintf(out, len, "%.2f", v);
    else
        snprintf(out, len, "%.1f", v);
}

static void print_table(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long long total = meminfo_kb("MemTotal");
    int any_err = 0;

    printf("\nsandgate-bench  lang=%s  n=%ld  clients=%ld  idle=%ld  (host: %ld cpus, %.1f GiB%s%s)\n",
           opt.lang->name, opt.n, opt.clients, opt.idle, cpus, total > 0 ? total / 1048576.0 : 0.0,
           dk.ok ? ", docker API " : "", dk.ok ? dk.version : "");
    printf("%-8s %-38s %8s %8s %8s %6s %6s  %s\n", "target", "operation", "p50 ms", "p99 ms", "mean ms", "count",
           "errors", "");
    for (size_t i = 0; i < nrows; i++) {
        row_t *r = &rows[i];
        char p50[16], p99[16], mean[16];
        double sum = 0;
        qsort(r->ms, r->n, sizeof(*r->ms), cmp_double);
        for (size_t k = 0; k < r->n; k++)
            sum += r->ms[k];
        fmt_ms(p50, sizeof(p50), r->n ? pct(r->ms, r->n, 50) : 0, r->n > 0);
        fmt_ms(p99, sizeof(p99), r->n ? pct(r->ms, r->n, 99) : 0, r->n > 0);
        fmt_ms(mean, sizeof(mean), r->n ? sum / r->n : 0, r->n > 0);
        printf("%-8s %-38s %8s %8s %8s %6zu %6zu  %s%s\n", r->target, r->op, p50, p99, mean, r->n, r->errors,
               row_failed(r) ? "FAILED " : "", r->note);
        any_err |= r->errors > 0;
    }
    if (any_err) {
        printf("\nerrors (first of each):\n");
        for (size_t i = 0; i < nrows; i++)
            if (rows[i].errors > 0)
                printf("  %s / %s: %zu, first: %s\n", rows[i].target, rows[i].op, rows[i].errors, rows[i].first_err);
    }
    if (dk.ok)
        printf("\nwarm/cold: from each session's container label sandgate.kind (pool = warm).\n");
    else
        printf("\nwarm/cold: by latency (over %.0f ms = cold); Docker not used.\n", BENCH_COLD_MS);
    printf("Latencies are client wall time over keep-alive HTTP (one handle per client).\n");
}

static void usage(FILE *f)
{
    fprintf(f, "usage: sandgate-bench [--proxy URL] [--gateway URL --token TOKEN] [--lang python|javascript]\n"
               "                      [-n N] [-c CLIENTS] [--idle-sessions K] [--skip-docker]\n"
               "defaults: --proxy http://127.0.0.1:8000 -n 200 -c 8 --idle-sessions 100\n");
}

static int parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static void strip_slash(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '/')
        s[--n] = '\0';
}

static void make_run_id(void)
{
    unsigned char r[8] = {0};
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f != NULL ? fread(r, 1, sizeof(r), f) : 0;
    int o;

    if (f != NULL)
        fclose(f);
    if (got != sizeof(r)) { /* still distinct per process and moment */
        uint64_t x = (uint64_t)getpid() << 32 ^ (uint64_t)(now_ms() * 1000);
        memcpy(r, &x, sizeof(r));
    }
    o = snprintf(dk.run_id, sizeof(dk.run_id), "bench-%d-", (int)getpid());
    for (size_t i = 0; i < sizeof(r) && o + 3 < (int)sizeof(dk.run_id); i++)
        o += snprintf(dk.run_id + o, sizeof(dk.run_id) - o, "%02x", r[i]);
}

int main(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"proxy", required_argument, NULL, 'p'},    {"gateway", required_argument, NULL, 'g'},
        {"token", required_argument, NULL, 't'},    {"lang", required_argument, NULL, 'l'},
        {"idle-sessions", required_argument, NULL, 'k'}, {"skip-docker", no_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    const char *lang = "python";
    char proxy[512], gateway[512], err[512];
    target_t targets[2];
    size_t ntargets = 0;
    struct sigaction sa;
    int ch, status = 0;
    size_t left;
    hc_t c;

    while ((ch = getopt_long(argc, argv, "n:c:h", lopts, NULL)) != -1) {
        switch (ch) {
        case 'p': opt.proxy = optarg; break;
        case 'g': opt.gateway = optarg; break;
        case 't': opt.token = optarg; break;
        case 'l': lang = optarg; break;
        case 's': opt.skip_docker = 1; break;
        case 'n':
            if (parse_long(optarg, 1, 10000000, &opt.n) != 0)
                goto Usage;
            break;
        case 'c':
            if (parse_long(optarg, 1, 1024, &opt.clients) != 0)
                goto Usage;
            break;
        case 'k':
            if (parse_long(optarg, 0, 100000, &opt.idle) != 0)
                goto Usage;
            break;
        case 'h': usage(stdout); return 0;
        default: goto Usage;
        }
    }
    if (optind != argc || (opt.gateway != NULL) != (opt.token != NULL))
        goto Usage;
    for (size_t i = 0; i < sizeof(langs) / sizeof(langs[0]); i++)
        if (strcmp(langs[i].name, lang) == 0)
            opt.lang = &langs[i];
    if (opt.lang == NULL) {
        fprintf(stderr, "sandgate-bench: --lang %s: known are python and javascript\n", lang);
        return 2;
    }
    snprintf(opt.create_body, sizeof(opt.create_body), "{\"lang\":\"%s\"}", opt.lang->name);
    snprintf(opt.exec_body, sizeof(opt.exec_body), "{\"code\":\"%s\"}", opt.lang->code);
    snprintf(opt.ephemeral_body, sizeof(opt.ephemeral_body), "{\"code\":\"%s\",\"lang\":\"%s\"}", opt.lang->code,
             opt.lang->name);
    snprintf(proxy, sizeof(proxy), "%s", opt.proxy);
    strip_slash(proxy);
    targets[ntargets++] = (target_t){"proxy", proxy, NULL};
    if (opt.gateway != NULL) {
        snprintf(gateway, sizeof(gateway), "%s", opt.gateway);
        strip_slash(gateway);
        targets[ntargets++] = (target_t){"gateway", gateway, opt.token};
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        fprintf(stderr, "sandgate-bench: curl_global_init failed\n");
        return 1;
    }
    make_run_id();

    /* the proxy must answer before anything is created */
    if (hc_init(&c, proxy, NULL, NULL) != 0 || hc_expect(&c, "GET", "/", NULL, 200, err, sizeof(err)) != 0) {
        fprintf(stderr, "sandgate-bench: the proxy at %s does not answer GET / (%s)\n", proxy,
                c.curl != NULL ? err : "cannot set up libcurl");
        hc_cleanup(&c);
        curl_global_cleanup();
        return 1;
    }
    hc_cleanup(&c);
    if (!opt.skip_docker && dk_setup(err, sizeof(err)) != 0)
        fprintf(stderr, "sandgate-bench: %s; Docker numbers will be missing\n", err);

    for (size_t i = 0; i < ntargets && !g_stop; i++) {
        phase_latency(&targets[i]);
        if (!g_stop)
            phase_throughput(&targets[i]);
    }
    if (!g_stop && opt.idle > 0)
        phase_idle(&targets[0]);
    if (!g_stop && !opt.skip_docker)
        phase_docker();

    /* cleanup, whatever happened above */
    left = reg_cleanup();
    if (left > 0) {
        fprintf(stderr, "sandgate-bench: %zu session(s) could not be deleted\n", left);
        status = 1;
    }
    if (dk.ok && dk_sweep() != 0) {
        fprintf(stderr, "sandgate-bench: bench containers (label sandgate.bench=%s) may be left\n", dk.run_id);
        status = 1;
    }

    print_table();
    for (size_t i = 0; i < nrows; i++)
        if (row_failed(&rows[i]))
            status = 1;
    if (g_stop) {
        fprintf(stderr, "sandgate-bench: stopped by signal %d; numbers are partial\n", (int)g_stop);
        status = 1;
    }
    for (size_t i = 0; i < nrows; i++) {
        free(rows[i].ms);
        pthread_mutex_destroy(&rows[i].mu);
    }
    free(reg.v);
    curl_global_cleanup();
    return status;

Usage:
    usage(stderr);
    return 2;
}
