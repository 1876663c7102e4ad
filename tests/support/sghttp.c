/*
 * sghttp.c — HTTP for the tests (see sgtest.h): one libcurl client (the
 * proxy, Docker, a typical client of the gateway), one plain-socket client
 * (the gateway's replies as they come, malformed headers included), and the
 * one batch that sends many requests at once through either.
 */
#include "sgtest_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "buf.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void on_curl_init(void)
{
    curl_global_init(CURL_GLOBAL_ALL);
}

void sgtest__curl_ready(void)
{
    pthread_once(&curl_once, on_curl_init);
}

/* Progress of one request, for the batch: fires once, when the request has
 * gone out whole (or an answer came, or the transfer ended). */
struct sgtest__sent_watch {
    size_t body_len;
    size_t body_sent;
    void (*on_sent)(void *ctx);
    void *ctx;
    bool fired;
};

static void watch_fire(sgtest__sent_watch_t *w)
{
    if (w != NULL && !w->fired) {
        w->fired = true;
        w->on_sent(w->ctx);
    }
}

/* A capped buffer that remembers whether the cap was hit. */
typedef struct {
    sg_buf_t b;
    bool overflow;
} capbuf_t;

static size_t on_data(char *p, size_t sz, size_t n, void *ud)
{
    capbuf_t *c = ud;
    if (sg_buf_append(&c->b, p, sz * n) == 0)
        return sz * n;
    c->overflow = c->b.len + sz * n > c->b.max;
    return 0;
}

static int on_debug(CURL *h, curl_infotype type, char *data, size_t size, void *ud)
{
    sgtest__sent_watch_t *w = ud;
    if (type == CURLINFO_HEADER_OUT && w->body_len == 0)
        watch_fire(w);
    else if (type == CURLINFO_DATA_OUT) {
        w->body_sent += size;
        if (w->body_sent >= w->body_len)
            watch_fire(w);
    } else if (type == CURLINFO_HEADER_IN || type == CURLINFO_DATA_IN)
        watch_fire(w); /* an answer means the request went out */
    return 0;
}

/* Whether a request of this method carries a body (Content-Length: 0 when
 * it has none). */
static bool method_has_body(const char *method, const void *body)
{
    return body != NULL || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 || strcmp(method, "PATCH") == 0;
}

/* Moves the buffers into out (empty strings when nothing came). */
static int reply_finish(sgtest_reply_t *out, sg_buf_t *body, sg_buf_t *hdrs, double t0)
{
    out->body = body->base != NULL ? body->base : calloc(1, 1);
    out->body_len = body->len;
    out->headers = hdrs->base != NULL ? hdrs->base : calloc(1, 1);
    out->seconds = sgtest_now() - t0;
    return out->status != 0 ? 0 : -1;
}

int sgtest__curl(const sgtest__http_req_t *q, sgtest_reply_t *out)
{
    sgtest__curl_ready();
    memset(out, 0, sizeof(*out));
    capbuf_t body = {.b = {.max = SGTEST__BODY_CAP}}, hdrs = {.b = {.max = SGTEST__HEADER_CAP}};
    struct curl_slist *hl = NULL;
    double t0 = sgtest_now();
    CURL *h = curl_easy_init();
    if (h == NULL) {
        snprintf(out->error, sizeof(out->error), "curl_easy_init failed");
        goto Exit;
    }
    curl_easy_setopt(h, CURLOPT_URL, q->url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_TIMEOUT, q->timeout_s > 0 ? q->timeout_s : SGTEST_HTTP_TIMEOUT);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, q->on_body != NULL ? q->on_body : on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, q->on_body != NULL ? q->ctx : &body);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &hdrs);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, out->error);
    if (q->unix_socket != NULL)
        curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, q->unix_socket);
    if (q->watch != NULL) {
        q->watch->body_len = q->body != NULL ? q->len : 0;
        curl_easy_setopt(h, CURLOPT_DEBUGFUNCTION, on_debug);
        curl_easy_setopt(h, CURLOPT_DEBUGDATA, q->watch);
        curl_easy_setopt(h, CURLOPT_VERBOSE, 1L);
    }
    /* No "Expect: 100-continue" round trip: send bodies at once. */
    hl = curl_slist_append(hl, "Expect:");
    if (q->content_type != NULL) {
        char ct[200];
        snprintf(ct, sizeof(ct), "Content-Type: %s", q->content_type);
        hl = curl_slist_append(hl, ct);
    }
    for (size_t i = 0; q->headers != NULL && q->headers[i] != NULL; i++)
        hl = curl_slist_append(hl, q->headers[i]);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    if (strcmp(q->method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (method_has_body(q->method, q->body)) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(q->body ? q->len : 0));
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->body ? q->body : "");
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, q->method);
    } else if (strcmp(q->method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, q->method);
    }
    CURLcode rc = curl_easy_perform(h);
    out->curl_code = (int)rc;
    if (rc == CURLE_OK || q->on_body != NULL) {
        /* a stream cut short by its reader still had its status */
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out->status);
    }
    if (rc != CURLE_OK) {
        if (out->error[0] == '\0')
            snprintf(out->error, sizeof(out->error), "%s", curl_easy_strerror(rc));
        if (body.overflow)
            snprintf(out->error, sizeof(out->error), "reply body over %zu bytes", SGTEST__BODY_CAP);
        if (q->on_body == NULL)
            out->status = 0;
    }

Exit:
    if (h != NULL)
        curl_easy_cleanup(h);
    curl_slist_free_all(hl);
    reply_finish(out, &body.b, &hdrs.b, t0);
    return out->curl_code == CURLE_OK && out->status != 0 ? 0 : -1;
}

static int socket_do(const sgtest__http_req_t *q, sgtest_reply_t *out);

/* A request without a body callback. */
static sgtest__http_req_t plain_req(const char *method, const char *url, const void *body, size_t len,
                                    const char *content_type, const char *const *headers, long timeout_s)
{
    return (sgtest__http_req_t){.method = method,
                                .url = url,
                                .body = body,
                                .len = len,
                                .content_type = content_type,
                                .headers = headers,
                                .timeout_s = timeout_s};
}

/* One plain request through a client: sgtest__curl or socket_do. */
static int http_with(int (*client)(const sgtest__http_req_t *q, sgtest_reply_t *out), const char *method,
                     const char *url, const void *body, size_t len, const char *content_type,
                     const char *const *headers, long timeout_s, sgtest_reply_t *out)
{
    sgtest__http_req_t q = plain_req(method, url, body, len, content_type, headers, timeout_s);
    return client(&q, out);
}

int sgtest_http(const char *method, const char *url, const void *body, size_t len, const char *content_type,
                long timeout_s, sgtest_reply_t *out)
{
    return http_with(sgtest__curl, method, url, body, len, content_type, NULL, timeout_s, out);
}

int sgtest_post_stream(const char *url, const char *json_body, const char *const *headers, long timeout_s,
                       size_t (*on_body)(char *p, size_t size, size_t n, void *ctx), void *ctx, sgtest_reply_t *out)
{
    sgtest__http_req_t q = plain_req("POST", url, json_body, strlen(json_body), "application/json", headers, timeout_s);
    q.on_body = on_body;
    q.ctx = ctx;
    return sgtest__curl(&q, out);
}

int sggw_http_curl(const char *method, const char *url, const void *body, size_t len, const char *content_type,
                   const char *const *headers, long timeout_s, sgtest_reply_t *out)
{
    return http_with(sgtest__curl, method, url, body, len, content_type, headers, timeout_s, out);
}

void sgtest_reply_free(sgtest_reply_t *r)
{
    if (r == NULL)
        return;
    free(r->body);
    free(r->headers);
    r->body = NULL;
    r->headers = NULL;
    r->body_len = 0;
}

char *sgtest_reply_header(const sgtest_reply_t *r, const char *name)
{
    char *found = NULL;
    size_t nlen = strlen(name);
    const char *line = r->headers;
    while (line != NULL && *line != '\0') {
        const char *eol = strstr(line, "\r\n");
        size_t llen = eol ? (size_t)(eol - line) : strlen(line);
        if (llen > nlen && strncasecmp(line, name, nlen) == 0 && line[nlen] == ':') {
            const char *v = line + nlen + 1;
            while (v < line + llen && (*v == ' ' || *v == '\t'))
                v++;
            free(found);
            found = strndup(v, (size_t)(line + llen - v));
        }
        line = eol ? eol + 2 : NULL;
    }
    return found;
}

/* ------------------------------------------------------------------------
 * A plain HTTP/1.1 client over one socket.
 * libcurl refuses a reply whose header block holds a NUL byte; this client
 * takes the bytes as they come, so that a test can look at a malformed
 * header instead of failing on the transfer. NUL bytes of the header block
 * are shown as '\x1a' (the block stays one C string). One request per
 * connection (Connection: close).
 * ------------------------------------------------------------------------ */

static int parse_url(const char *url, char *host, size_t hostlen, int *port, const char **path)
{
    if (strncmp(url, "http://", 7) != 0)
        return -1;
    const char *h = url + 7, *colon = strchr(h, ':'), *slash = strchr(h, '/');
    if (slash == NULL)
        slash = h + strlen(h);
    if (colon != NULL && colon < slash) {
        snprintf(host, hostlen, "%.*s", (int)(colon - h), h);
        *port = atoi(colon + 1);
    } else {
        snprintf(host, hostlen, "%.*s", (int)(slash - h), h);
        *port = 80;
    }
    if (strcmp(host, "localhost") == 0)
        snprintf(host, hostlen, "127.0.0.1");
    *path = *slash ? slash : "/";
    return 0;
}

/* Waits for events on fd until deadline; returns revents, 0 on timeout. */
static short wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - sgtest_now();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)(left * 1000) + 1);
        if (n > 0)
            return p.revents;
        if (n < 0 && errno != EINTR)
            return POLLERR;
    }
}

/* Decodes a chunked body in place; -1 if it is not complete. */
static int dechunk(sg_buf_t *b)
{
    size_t in = 0, out = 0;
    for (;;) {
        char *eol = memmem(b->base + in, b->len - in, "\r\n", 2);
        if (eol == NULL)
            return -1;
        size_t size = strtoul(b->base + in, NULL, 16);
        in = (size_t)(eol - b->base) + 2;
        if (size == 0)
            break;
        if (in + size + 2 > b->len)
            return -1;
        memmove(b->base + out, b->base + in, size);
        out += size;
        in += size + 2;
    }
    b->len = out;
    b->base[out] = '\0';
    return 0;
}

/* The request's bytes: request line, Host, Connection: close, the
 * Content-Type and Content-Length when given, the extra header lines, the
 * body. -1 when it would be over 1 GiB. */
static int build_request(sg_buf_t *req, const char *method, const char *path, const char *host, int port,
                         const void *body, size_t len, const char *content_type, bool with_body,
                         const char *const *headers)
{
    char line[1024];
    int rc = 0;
    sg_buf_init(req, (size_t)1 << 30);
    snprintf(line, sizeof(line), "%s ", method);
    rc |= sg_buf_append(req, line, strlen(line));
    rc |= sg_buf_append(req, path, strlen(path));
    snprintf(line, sizeof(line), " HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\nUser-Agent: sggw\r\n", host, port);
    rc |= sg_buf_append(req, line, strlen(line));
    if (content_type != NULL) {
        snprintf(line, sizeof(line), "Content-Type: %s\r\n", content_type);
        rc |= sg_buf_append(req, line, strlen(line));
    }
    if (with_body) {
        snprintf(line, sizeof(line), "Content-Length: %zu\r\n", body != NULL ? len : 0);
        rc |= sg_buf_append(req, line, strlen(line));
    }
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++) {
        rc |= sg_buf_append(req, headers[i], strlen(headers[i]));
        rc |= sg_buf_append(req, "\r\n", 2);
    }
    rc |= sg_buf_append(req, "\r\n", 2);
    if (with_body && body != NULL && len != 0)
        rc |= sg_buf_append(req, body, len);
    return rc != 0 ? -1 : 0;
}

/* The header block of a raw reply in `in`: its length (through the blank
 * line), or 0 when in holds no HTTP/1.x reply. */
static size_t header_len(const sg_buf_t *in)
{
    char *hend = in->base != NULL ? memmem(in->base, in->len, "\r\n\r\n", 4) : NULL;
    if (hend == NULL || in->len < 12 || strncmp(in->base, "HTTP/1.", 7) != 0)
        return 0;
    return (size_t)(hend - in->base) + 4;
}

int sggw_http_open(const char *method, const char *url, const char *json_body, const char *const *headers)
{
    char host[256];
    const char *path;
    int port, fd;
    sg_buf_t req;
    struct sockaddr_in sa = {.sin_family = AF_INET};

    if (parse_url(url, host, sizeof(host), &port, &path) != 0 || inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "sggw_http_open: bad URL %s\n", url);
        return -1;
    }
    sa.sin_port = htons((uint16_t)port);
    build_request(&req, method, path, host, port, json_body, json_body ? strlen(json_body) : 0,
                  json_body ? "application/json" : NULL, json_body != NULL, headers);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        fprintf(stderr, "sggw_http_open: connect to %s: %s\n", url, strerror(errno));
        if (fd >= 0)
            close(fd);
        sg_buf_free(&req);
        return -1;
    }
    for (size_t sent = 0; sent < req.len;) {
        ssize_t n = send(fd, req.base + sent, req.len - sent, MSG_NOSIGNAL);
        if (n <= 0) {
            fprintf(stderr, "sggw_http_open: send to %s: %s\n", url, strerror(errno));
            close(fd);
            sg_buf_free(&req);
            return -1;
        }
        sent += (size_t)n;
    }
    sg_buf_free(&req);
    return fd;
}

int sggw_http_read_reply(int fd, long timeout_s, sgtest_reply_t *out)
{
    double deadline = sgtest_now() + (timeout_s > 0 ? timeout_s : SGTEST_HTTP_TIMEOUT);
    sg_buf_t in = {.max = SGTEST__BODY_CAP + SGTEST__HEADER_CAP};
    char buf[65536];
    int rc = -1;

    memset(out, 0, sizeof(*out));
    for (;;) {
        short ev = wait_fd(fd, POLLIN, deadline);
        if (ev == 0) {
            snprintf(out->error, sizeof(out->error), "timed out waiting for the reply");
            goto Exit;
        }
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n > 0)
            sg_buf_append(&in, buf, (size_t)n);
        else if (n == 0 || (errno != EAGAIN && errno != EINTR))
            break;
    }
    size_t hlen = header_len(&in);
    if (hlen == 0) {
        snprintf(out->error, sizeof(out->error), "no HTTP reply (%zu bytes)", in.len);
        goto Exit;
    }
    out->headers = strndup(in.base, hlen);
    out->status = strtol(in.base + 9, NULL, 10);
    out->body = malloc(in.len - hlen + 1);
    memcpy(out->body, in.base + hlen, in.len - hlen);
    out->body[in.len - hlen] = '\0';
    out->body_len = in.len - hlen;
    rc = 0;
Exit:
    sg_buf_free(&in);
    close(fd);
    return rc;
}

/* Connects fd (non-blocking) to host:port before deadline. 0, or -1 with
 * out->error set. */
static int connect_by(int fd, const char *host, int port, double deadline, sgtest_reply_t *out)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        snprintf(out->error, sizeof(out->error), "host %.64s is not an IPv4 address", host);
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS) {
        snprintf(out->error, sizeof(out->error), "connect to %.64s:%d: %s", host, port, strerror(errno));
        return -1;
    }
    short ev = wait_fd(fd, POLLOUT, deadline);
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (ev == 0 || soerr != 0) {
        snprintf(out->error, sizeof(out->error), "connect to %.64s:%d: %s", host, port,
                 ev == 0 ? "timed out" : strerror(soerr));
        return -1;
    }
    return 0;
}

/* The raw reply in `in` as out's status, headers and (dechunked) body. */
static int parse_reply(const char *method, sg_buf_t *in, sgtest_reply_t *out)
{
    size_t hlen = header_len(in);
    if (hlen == 0) {
        snprintf(out->error, sizeof(out->error), "no HTTP reply (%zu bytes%s)", in->len,
                 in->len == 0 ? ": the connection was closed" : "");
        return -1;
    }
    out->headers = malloc(hlen + 1);
    for (size_t i = 0; i < hlen; i++)
        out->headers[i] = in->base[i] == '\0' ? '\x1a' : in->base[i];
    out->headers[hlen] = '\0';
    long status = strtol(in->base + 9, NULL, 10);
    sg_buf_t b = {.max = SGTEST__BODY_CAP};
    if (strcmp(method, "HEAD") != 0 && in->len > hlen)
        sg_buf_append(&b, in->base + hlen, in->len - hlen);
    char *te = sgtest_reply_header(out, "Transfer-Encoding");
    bool chunked = te != NULL && strcasecmp(te, "chunked") == 0;
    free(te);
    if (chunked && b.base != NULL && dechunk(&b) != 0) {
        snprintf(out->error, sizeof(out->error), "chunked reply cut short");
        sg_buf_free(&b);
        return -1;
    }
    char *cl = sgtest_reply_header(out, "Content-Length");
    if (!chunked && cl != NULL && strcmp(method, "HEAD") != 0 && (size_t)strtoull(cl, NULL, 10) != b.len) {
        snprintf(out->error, sizeof(out->error), "reply body of %zu bytes, Content-Length %s", b.len, cl);
        free(cl);
        sg_buf_free(&b);
        return -1;
    }
    free(cl);
    out->status = status;
    out->body = b.base;
    out->body_len = b.len;
    return 0;
}

static int socket_do(const sgtest__http_req_t *q, sgtest_reply_t *out)
{
    char host[256];
    int port, fd = -1;
    const char *path;
    sg_buf_t req = {0}, in = {.max = SGTEST__BODY_CAP + SGTEST__HEADER_CAP};
    double t0 = sgtest_now(), deadline = t0 + (q->timeout_s > 0 ? q->timeout_s : SGTEST_HTTP_TIMEOUT);

    memset(out, 0, sizeof(*out));
    if (parse_url(q->url, host, sizeof(host), &port, &path) != 0) {
        snprintf(out->error, sizeof(out->error), "bad URL %s", q->url);
        goto Exit;
    }
    if (build_request(&req, q->method, path, host, port, q->body, q->len, q->content_type,
                      method_has_body(q->method, q->body), q->headers) != 0) {
        snprintf(out->error, sizeof(out->error), "request too large");
        goto Exit;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(out->error, sizeof(out->error), "socket: %s", strerror(errno));
        goto Exit;
    }
    if (connect_by(fd, host, port, deadline, out) != 0)
        goto Exit;

    /* send, reading whatever comes back meanwhile (an early 413) */
    size_t sent = 0;
    bool eof = false;
    char buf[65536];
    while (sent < req.len && !eof) {
        short ev = wait_fd(fd, POLLOUT | POLLIN, deadline);
        if (ev == 0) {
            snprintf(out->error, sizeof(out->error), "timed out sending the request");
            goto Exit;
        }
        if (ev & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = recv(fd, buf, sizeof(buf), 0);
            if (n > 0) {
                sg_buf_append(&in, buf, (size_t)n);
                break; /* an answer before the whole request: stop sending */
            }
            if (n == 0 || (errno != EAGAIN && errno != EINTR))
                eof = true;
            continue;
        }
        ssize_t n = send(fd, req.base + sent, req.len - sent, MSG_NOSIGNAL);
        if (n > 0)
            sent += (size_t)n;
        else if (n < 0 && errno != EAGAIN && errno != EINTR)
            break; /* reset: read what the server said */
    }
    watch_fire(q->watch);
    /* receive until the server closes */
    while (!eof) {
        short ev = wait_fd(fd, POLLIN, deadline);
        if (ev == 0) {
            snprintf(out->error, sizeof(out->error), "timed out after %.1f s waiting for the reply", sgtest_now() - t0);
            goto Exit;
        }
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n > 0) {
            if (sg_buf_append(&in, buf, (size_t)n) != 0) {
                snprintf(out->error, sizeof(out->error), "reply too large");
                goto Exit;
            }
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            eof = true;
        }
    }
    parse_reply(q->method, &in, out);

Exit:
    if (fd >= 0)
        close(fd);
    sg_buf_free(&req);
    sg_buf_free(&in);
    if (out->body == NULL)
        out->body = calloc(1, 1);
    if (out->headers == NULL)
        out->headers = calloc(1, 1);
    out->seconds = sgtest_now() - t0;
    return out->status != 0 ? 0 : -1;
}

int sggw_http(const char *method, const char *url, const void *body, size_t len, const char *content_type,
              const char *const *headers, long timeout_s, sgtest_reply_t *out)
{
    return http_with(socket_do, method, url, body, len, content_type, headers, timeout_s, out);
}

/* ------------------------------------------------------------------------
 * The batch: one thread per request, all released together
 * ------------------------------------------------------------------------ */

typedef struct {
    struct sgtest_batch *batch;
    sgtest_par_req_t *req;
    sgtest__sent_watch_t watch;
} par_slot_t;

struct sgtest_batch {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int go;      /* 1: send; -1: the batch could not start, send nothing */
    bool socket; /* through the plain-socket client (sggw_http) */
    size_t n, started, sent, finished;
    pthread_t *threads;
    par_slot_t *slots;
};

static void on_sent(void *ctx)
{
    par_slot_t *s = ctx;
    pthread_mutex_lock(&s->batch->lock);
    s->req->sent_at = sgtest_now();
    s->batch->sent++;
    pthread_cond_broadcast(&s->batch->cond);
    pthread_mutex_unlock(&s->batch->lock);
}

static void *on_thread(void *ud)
{
    par_slot_t *s = ud;
    sgtest_batch_t *b = s->batch;
    sgtest_par_req_t *q = s->req;
    pthread_mutex_lock(&b->lock);
    while (b->go == 0)
        pthread_cond_wait(&b->cond, &b->lock);
    int go = b->go;
    pthread_mutex_unlock(&b->lock);
    if (go < 0)
        return NULL;
    const char *hdrs[2] = {NULL, NULL};
    char *auth = NULL;
    if (q->token != NULL && (auth = malloc(strlen(q->token) + 32)) != NULL) {
        sprintf(auth, "Authorization: Bearer %s", q->token);
        hdrs[0] = auth;
    }
    sgtest__http_req_t hq = {.method = q->method,
                             .url = q->url,
                             .body = q->body,
                             .len = q->body_len,
                             .content_type = q->content_type,
                             .headers = hdrs,
                             .timeout_s = q->timeout_s,
                             .watch = &s->watch};
    sgtest_reply_free(&q->reply); /* the placeholder */
    q->started = sgtest_now();
    q->rc = b->socket ? socket_do(&hq, &q->reply) : sgtest__curl(&hq, &q->reply);
    q->finished = sgtest_now();
    watch_fire(&s->watch); /* a failed transfer must not leave waiters hanging */
    free(auth);
    pthread_mutex_lock(&b->lock);
    b->finished++;
    pthread_mutex_unlock(&b->lock);
    return NULL;
}

static void release(sgtest_batch_t *b, int go)
{
    pthread_mutex_lock(&b->lock);
    b->go = go;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

static sgtest_batch_t *batch_start(sgtest_par_req_t *reqs, size_t n, bool socket)
{
    sgtest__curl_ready();
    sgtest_batch_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return NULL;
    b->threads = calloc(n ? n : 1, sizeof(*b->threads));
    b->slots = calloc(n ? n : 1, sizeof(*b->slots));
    if (b->threads == NULL || b->slots == NULL) {
        free(b->threads);
        free(b->slots);
        free(b);
        return NULL;
    }
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->cond, NULL);
    b->n = n;
    b->socket = socket;
    for (size_t i = 0; i < n; i++) {
        /* what a request that never went out reads */
        memset(&reqs[i].reply, 0, sizeof(reqs[i].reply));
        reqs[i].reply.body = calloc(1, 1);
        reqs[i].reply.headers = calloc(1, 1);
        snprintf(reqs[i].reply.error, sizeof(reqs[i].reply.error), "not sent");
        reqs[i].rc = -1;
        reqs[i].sent_at = 0;
        b->slots[i] = (par_slot_t){.batch = b, .req = &reqs[i], .watch = {.on_sent = on_sent, .ctx = &b->slots[i]}};
    }
    for (size_t i = 0; i < n; i++) {
        if (pthread_create(&b->threads[i], NULL, on_thread, &b->slots[i]) != 0) {
            fprintf(stderr, "sgtest: cannot start thread %zu of %zu: %s\n", i + 1, n, strerror(errno));
            release(b, -1);
            sgtest_batch_join(b);
            return NULL;
        }
        b->started++;
    }
    release(b, 1);
    return b;
}

sgtest_batch_t *sgtest_batch_start(sgtest_par_req_t *reqs, size_t n)
{
    return batch_start(reqs, n, false);
}

sgtest_batch_t *sggw_batch_start(sgtest_par_req_t *reqs, size_t n)
{
    return batch_start(reqs, n, true);
}

int sgtest_batch_wait_sent(sgtest_batch_t *b, double timeout_s)
{
    double deadline = sgtest_now() + timeout_s;
    int rc = 0;
    pthread_mutex_lock(&b->lock);
    while (b->sent < b->started) {
        double left = deadline - sgtest_now();
        if (left <= 0) {
            rc = -1;
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double when = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + (left < 0.1 ? left : 0.1);
        ts.tv_sec = (time_t)when;
        ts.tv_nsec = (long)((when - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&b->cond, &b->lock, &ts);
    }
    pthread_mutex_unlock(&b->lock);
    return rc;
}

size_t sgtest_batch_finished(sgtest_batch_t *b)
{
    pthread_mutex_lock(&b->lock);
    size_t n = b->finished;
    pthread_mutex_unlock(&b->lock);
    return n;
}

void sgtest_batch_join(sgtest_batch_t *b)
{
    if (b == NULL)
        return;
    for (size_t i = 0; i < b->started; i++)
        pthread_join(b->threads[i], NULL);
    pthread_cond_destroy(&b->cond);
    pthread_mutex_destroy(&b->lock);
    free(b->threads);
    free(b->slots);
    free(b);
}

static int parallel(sgtest_par_req_t *reqs, size_t n, bool socket)
{
    sgtest_batch_t *b = batch_start(reqs, n, socket);
    if (b == NULL)
        return -1;
    sgtest_batch_join(b);
    return 0;
}

int sgtest_parallel(sgtest_par_req_t *reqs, size_t n)
{
    return parallel(reqs, n, false);
}

int sggw_parallel(sgtest_par_req_t *reqs, size_t n)
{
    return parallel(reqs, n, true);
}

sgtest_span_t sgtest_batch_span(const sgtest_par_req_t *reqs, size_t n)
{
    sgtest_span_t s = {reqs[0].started, reqs[0].started, reqs[0].finished, reqs[0].finished};
    for (size_t i = 1; i < n; i++) {
        if (reqs[i].started < s.first_start)
            s.first_start = reqs[i].started;
        if (reqs[i].started > s.last_start)
            s.last_start = reqs[i].started;
        if (reqs[i].finished < s.first_end)
            s.first_end = reqs[i].finished;
        if (reqs[i].finished > s.last_end)
            s.last_end = reqs[i].finished;
    }
    return s;
}

void sgtest_batch_expect_ok(sgtest_par_req_t *reqs, size_t n, void (*shape)(json_object *r), const char *want_stdout)
{
    for (size_t i = 0; i < n; i++) {
        json_object *o = SG_EXPECT_JSON(&reqs[i].reply, 200);
        if (shape != NULL)
            shape(o);
        sgtest_expect_ok(o, want_stdout);
        sgtest_reply_free(&reqs[i].reply);
    }
}
