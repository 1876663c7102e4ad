/*
 * bench_client.c — sandgate-bench's HTTP client, result rows, registry of
 * live sessions, session API and parallel runner (see bench.h).
 */
#include "bench.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

volatile sig_atomic_t g_stop;

double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Sleeps ms milliseconds, or less when a stop was asked for. */
void sleep_ms(long ms)
{
    while (ms > 0 && !g_stop) {
        long step = ms > 100 ? 100 : ms;
        struct timespec ts = {step / 1000, (step % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        ms -= step;
    }
}

/* ------------------------------------------------------------------------
 * HTTP client: one easy handle, kept alive across requests.
 * ------------------------------------------------------------------------ */

static size_t on_body(char *p, size_t sz, size_t nm, void *ud)
{
    hc_t *c = ud;
    return sg_buf_append(&c->body, p, sz * nm) == 0 ? sz * nm : 0;
}

/* base: "http://host:port" (no trailing slash); unix_socket may be NULL;
 * token adds "Authorization: Bearer <token>" when not NULL. */
int hc_init(hc_t *c, const char *base, const char *unix_socket, const char *token)
{
    char auth[1024];

    memset(c, 0, sizeof(*c));
    sg_buf_init(&c->body, BENCH_MAX_BODY);
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
    curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, c->errbuf);
    if (unix_socket != NULL)
        curl_easy_setopt(c->curl, CURLOPT_UNIX_SOCKET_PATH, unix_socket);
    return 0;
}

void hc_cleanup(hc_t *c)
{
    if (c->curl != NULL)
        curl_easy_cleanup(c->curl);
    curl_slist_free_all(c->hdr_plain);
    curl_slist_free_all(c->hdr_json);
    sg_buf_free(&c->body);
    memset(c, 0, sizeof(*c));
}

/* One request; json (may be NULL) goes as application/json. Returns 0 when
 * an HTTP reply came back (any status; c->status, c->body), -1 when the
 * transfer failed (c->errbuf says why). */
int hc_do(hc_t *c, const char *method, const char *path, const char *json)
{
    char url[1024];
    CURLcode rc;
    double t0;

    sg_buf_reset(&c->body);
    c->status = 0;
    c->ms = 0;
    c->errbuf[0] = '\0';
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
    if (c->body.base == NULL)
        sg_buf_append(&c->body, "", 0);
    if (rc != CURLE_OK) {
        if (rc == CURLE_WRITE_ERROR) /* the body's cap (or memory) ran out */
            snprintf(c->errbuf, sizeof(c->errbuf), "reply body over %u bytes", BENCH_MAX_BODY);
        else if (c->errbuf[0] == '\0')
            snprintf(c->errbuf, sizeof(c->errbuf), "%s", curl_easy_strerror(rc));
        return -1;
    }
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &c->status);
    return 0;
}

/* "HTTP 503: {...}" or the transport error, for error reports. */
void hc_describe(const hc_t *c, char *err, size_t len)
{
    if (c->status == 0)
        snprintf(err, len, "%s", c->errbuf[0] ? c->errbuf : "no reply");
    else
        snprintf(err, len, "HTTP %ld: %.160s", c->status, c->body.base ? c->body.base : "");
}

/* Does the request and checks the status; err gets the description
 * otherwise. */
int hc_expect(hc_t *c, const char *method, const char *path, const char *json, long want, char *err, size_t errlen)
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

row_t rows[MAX_ROWS];
size_t nrows;

row_t *row_new(const char *target, const char *fmt, ...)
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

void row_ok(row_t *r, double ms)
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

void row_err(row_t *r, const char *fmt, ...)
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

void row_note(row_t *r, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(r->note, sizeof(r->note), fmt, ap);
    va_end(ap);
}

int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of the sorted samples. */
double pct(const double *v, size_t n, unsigned p)
{
    size_t rank = (p * n + 99) / 100;
    return v[rank > 0 ? rank - 1 : 0];
}

int row_failed(const row_t *r)
{
    return r->failed || (r->n == 0 && r->errors > 0);
}

/* ------------------------------------------------------------------------
 * Registry of live sessions, so that every exit path deletes them.
 * ------------------------------------------------------------------------ */

reg_t reg = {.mu = PTHREAD_MUTEX_INITIALIZER};

void reg_add(const target_t *t, const char *id)
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

void reg_remove(const target_t *t, const char *id)
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
int id_ok(const char *s, size_t max)
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
int sess_create(hc_t *c, const target_t *t, char id[64], char *err, size_t errlen)
{
    json_object *o = NULL, *v;
    int rc = -1;

    id[0] = '\0';
    if (hc_expect(c, "POST", "/sessions", t->create_body != NULL ? t->create_body : opt.create_body, 200, err,
                  errlen) != 0)
        return -1;
    o = json_tokener_parse(c->body.base);
    if (o == NULL || !json_object_object_get_ex(o, "session_id", &v) || !json_object_is_type(v, json_type_string) ||
        !id_ok(json_object_get_string(v), 63)) {
        snprintf(err, errlen, "create reply without a usable session_id: %.160s", c->body.base);
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
int sess_delete(hc_t *c, const target_t *t, const char *id, char *err, size_t errlen)
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
int exec_check(hc_t *c, const char *path, const char *body, double *agent_ms, char *err, size_t errlen)
{
    json_object *o, *v;
    const char *out = NULL;
    int rc = -1;

    if (hc_expect(c, "POST", path, body, 200, err, errlen) != 0)
        return -1;
    o = json_tokener_parse(c->body.base);
    if (o != NULL && json_object_object_get_ex(o, "stdout", &v) && json_object_is_type(v, json_type_string))
        out = json_object_get_string(v);
    if (agent_ms != NULL)
        *agent_ms =
            o != NULL && json_object_object_get_ex(o, "execution_time", &v) ? json_object_get_double(v) * 1e3 : -1;
    if (out != NULL && strcmp(out, "1\n") == 0)
        rc = 0;
    else
        snprintf(err, errlen, "unexpected result: %.180s", c->body.base);
    json_object_put(o);
    return rc;
}

int exec_check_big(hc_t *c, const char *path, char *err, size_t errlen)
{
    json_object *o, *v;
    int rc = -1;

    if (hc_expect(c, "POST", path, opt.big_body, 200, err, errlen) != 0)
        return -1;
    o = json_tokener_parse(c->body.base);
    if (o != NULL && json_object_object_get_ex(o, "stdout", &v) && json_object_is_type(v, json_type_string) &&
        json_object_get_string_len(v) == BIG_RESULT_BYTES &&
        strspn(json_object_get_string(v), "x") == BIG_RESULT_BYTES - 1)
        rc = 0;
    else
        snprintf(err, errlen, "unexpected result: %.180s", c->body.base);
    json_object_put(o);
    return rc;
}

/* ------------------------------------------------------------------------
 * Running a function over indexes 0..count-1 on `threads` client threads,
 * each with its own handle to base.
 * ------------------------------------------------------------------------ */

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

void par_run(par_t *p, long threads)
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

#define POOL_WAIT_MS 60000.0

/* Waits, at most POOL_WAIT_MS, until the proxy's warm pool of the
 * language holds want containers (want < 0: is full), by its GET /health:
 * creates empty it, and its refill (Docker starting containers) would
 * otherwise run during what is measured next. */
void pool_refilled(const target_t *px, long want)
{
    hc_t c;
    double deadline = now_ms() + POOL_WAIT_MS;
    long ready = -1, size = -1;

    if (hc_init(&c, px->base, NULL, px->token) != 0)
        return;
    while (!g_stop) {
        json_object *o = NULL, *v, *pools;
        ready = size = -1;
        if (hc_do(&c, "GET", "/health", NULL) == 0 && c.status == 200 &&
            (o = json_tokener_parse(c.body.base)) != NULL) {
            if (json_object_object_get_ex(o, "pool_size", &v))
                size = (long)json_object_get_int64(v);
            if (json_object_object_get_ex(o, "pools", &pools) && json_object_object_get_ex(pools, opt.lang->name, &v))
                ready = (long)json_object_get_int64(v);
        }
        json_object_put(o);
        if (size < 0 || ready >= (want < 0 ? size : want))
            break; /* there, or a proxy that does not say */
        if (now_ms() >= deadline) {
            fprintf(stderr, "sandgate-bench: the proxy's pool holds %ld of %ld after %.0f s; measuring anyway\n", ready,
                    want < 0 ? size : want, POOL_WAIT_MS / 1e3);
            break;
        }
        sleep_ms(100);
    }
    hc_cleanup(&c);
}
