#include "http.h"
#include "util.h"
#include "buf.h"
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

struct sg_http_server {
    h2o_globalconf_t config;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept_ctx;
    h2o_socket_t *listener;
    h2o_socket_t *unix_listener; /* sg_http_server_listen_unix */
    char *unix_path;             /* removed at stop while it is still ours */
    dev_t unix_dev;
    ino_t unix_ino;
    int port;
    sg_http_handler_cb cb;
    void *app;
};

typedef struct {
    h2o_handler_t super;
    sg_http_server_t *server;
} handler_t;

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    sg_http_server_t *s = ((handler_t *)self)->server;
    return s->cb(s->app, req);
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
    sg_http_server_t *s = listener->data;
    h2o_socket_t *sock;

    if (err != NULL)
        return;
    sock = h2o_evloop_socket_accept(listener);
    if (sock == NULL)
        return;
    h2o_accept(&s->accept_ctx, sock);
}

sg_http_server_t *sg_http_server_create(const char *host, int port, size_t max_body, sg_http_handler_cb cb, void *app,
                                        char *err, size_t errlen)
{
    return sg_http_server_create_with_dirs(host, port, max_body, cb, app, NULL, 0, err, errlen);
}

/* Sets each "Name: value" of headers (NULL-terminated, may be NULL) on every
 * reply under pathconf (h2o's headers filter, which keeps the commands for
 * the server's life). */
static void add_headers(h2o_pathconf_t *pathconf, const char *const *headers)
{
    size_t n = 0;
    while (headers != NULL && headers[n] != NULL)
        n++;
    if (n == 0)
        return;
    h2o_headers_command_t *cmds = sg_xcalloc(n + 1, sizeof(*cmds));
    h2o_iovec_t *names = sg_xcalloc(n, sizeof(*names));
    for (size_t i = 0; i < n; i++) {
        const char *colon = strchr(headers[i], ':');
        size_t nlen = colon != NULL ? (size_t)(colon - headers[i]) : strlen(headers[i]);
        const char *v = colon != NULL ? colon + 1 : "";
        while (*v == ' ')
            v++;
        names[i] = h2o_strdup(NULL, headers[i], nlen);
        h2o_strtolower(names[i].base, names[i].len);
        cmds[i].cmd = H2O_HEADERS_CMD_SET;
        cmds[i].name = &names[i];
        cmds[i].value = h2o_strdup(NULL, v, SIZE_MAX);
    }
    cmds[n].cmd = H2O_HEADERS_CMD_NULL;
    h2o_headers_register(pathconf, cmds);
}

sg_http_server_t *sg_http_server_create_with_dirs(const char *host, int port, size_t max_body, sg_http_handler_cb cb,
                                                  void *app, const sg_http_dir_t *dirs, size_t ndirs, char *err,
                                                  size_t errlen)
{
    sg_http_server_t *s = sg_xcalloc(1, sizeof(*s));
    struct sockaddr_in addr = {0};
    socklen_t alen = sizeof(addr);
    int fd = -1, on = 1;

    s->cb = cb;
    s->app = app;
    h2o_config_init(&s->config);
    s->config.max_request_entity_size = max_body;
    /* no HTTP/2 over cleartext (Upgrade: h2c, or the prior-knowledge
     * preface) unless sg_http_server_allow_h2c says so */
    s->config.http1.upgrade_to_http2 = 0;
    h2o_hostconf_t *hostconf = h2o_config_register_host(&s->config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    /* the first registered path that matches wins: the directories go first */
    for (size_t i = 0; i < ndirs; i++) {
        h2o_pathconf_t *dirconf = h2o_config_register_path(hostconf, dirs[i].url_path, 0);
        h2o_file_register(dirconf, dirs[i].dir, NULL, NULL, 0);
        add_headers(dirconf, dirs[i].headers);
    }
    h2o_pathconf_t *pathconf = h2o_config_register_path(hostconf, "/", 0);
    handler_t *h = (handler_t *)h2o_create_handler(pathconf, sizeof(*h));
    h->super.on_req = on_req;
    h->server = s;

    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        snprintf(err, errlen, "HOST \"%s\" is not an IPv4 address", host);
        goto Error;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
        bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || listen(fd, SOMAXCONN) != 0) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", host, port, strerror(errno));
        goto Error;
    }
    getsockname(fd, (struct sockaddr *)&addr, &alen);
    s->port = ntohs(addr.sin_port);

    h2o_context_init(&s->ctx, h2o_evloop_create(), &s->config);
    s->accept_ctx.ctx = &s->ctx;
    s->accept_ctx.hosts = s->config.hosts;
    s->listener = h2o_evloop_socket_create(s->ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
    s->listener->data = s;
    return s;

Error:
    if (fd >= 0)
        close(fd);
    h2o_config_dispose(&s->config);
    free(s);
    return NULL;
}

void sg_http_server_allow_h2c(sg_http_server_t *s, int allow)
{
    s->config.http1.upgrade_to_http2 = allow != 0;
}

/* What is at path may be taken over: nothing, or a socket nobody listens
 * on (a proxy that died left it). 0, or -1 with err set. */
static int unix_path_free(const char *path, const struct sockaddr_un *sa, char *err, size_t errlen)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISSOCK(sb.st_mode)) {
        snprintf(err, errlen, "cannot listen on %s: a file that is not a socket is there", path);
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)), e = errno;
    close(fd);
    if (rc == 0) {
        snprintf(err, errlen, "cannot listen on %s: another server listens there", path);
        return -1;
    }
    if (e != ECONNREFUSED || unlink(path) != 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(e != ECONNREFUSED ? e : errno));
        return -1;
    }
    return 0;
}

int sg_http_server_listen_unix(sg_http_server_t *s, const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct stat sb;
    int fd = -1;

    if (path[0] != '/' || strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, errlen, "the socket's path \"%s\" is not absolute or longer than %zu bytes", path,
                 sizeof(sa.sun_path) - 1);
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (unix_path_free(path, &sa, err, errlen) != 0)
        return -1;
    /* 0600 before it listens (nobody connects to it before): the server's
     * own user only, the proxy's API has no authentication of its own */
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int bound = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (!bound || chmod(path, 0600) != 0 || listen(fd, SOMAXCONN) != 0 || stat(path, &sb) != 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(errno));
        if (bound)
            unlink(path);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    s->unix_path = sg_xstrdup(path);
    s->unix_dev = sb.st_dev;
    s->unix_ino = sb.st_ino;
    s->unix_listener = h2o_evloop_socket_create(s->ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
    s->unix_listener->data = s;
    return 0;
}

void sg_http_server_start(sg_http_server_t *s)
{
    h2o_socket_read_start(s->listener, on_accept);
    if (s->unix_listener != NULL)
        h2o_socket_read_start(s->unix_listener, on_accept);
}

h2o_loop_t *sg_http_server_loop(sg_http_server_t *s)
{
    return s->ctx.loop;
}

h2o_context_t *sg_http_server_context(sg_http_server_t *s)
{
    return &s->ctx;
}

int sg_http_server_port(sg_http_server_t *s)
{
    return s->port;
}

void sg_http_server_stop_accepting(sg_http_server_t *s)
{
    if (s->listener != NULL) {
        h2o_socket_read_stop(s->listener);
        h2o_socket_close(s->listener);
        s->listener = NULL;
    }
    if (s->unix_listener != NULL) {
        struct stat sb;
        h2o_socket_read_stop(s->unix_listener);
        h2o_socket_close(s->unix_listener);
        s->unix_listener = NULL;
        /* not a socket another server put there since */
        if (lstat(s->unix_path, &sb) == 0 && sb.st_dev == s->unix_dev && sb.st_ino == s->unix_ino)
            unlink(s->unix_path);
    }
}

void sg_http_server_destroy(sg_http_server_t *s)
{
    h2o_loop_t *loop;

    if (s == NULL)
        return;
    loop = s->ctx.loop;
    sg_http_server_stop_accepting(s);
    h2o_context_dispose(&s->ctx);
#if H2O_VERSION_MAJOR == 2 && H2O_VERSION_MINOR == 2
    /* h2o 2.2's h2o_multithread_destroy_queue closes the queue's socket but
     * leaves the queue allocated (freed there from 2.3 on) */
    free(s->ctx.queue);
#endif
    sg_loop_forget(loop);
    h2o_evloop_destroy(loop);
    h2o_config_dispose(&s->config);
    free(s->unix_path);
    free(s);
}

/* ---- what a loop keeps ---- */

/* One record per loop that used sg_loop_soon or the hold watch, made on
 * its first use there and taken back by sg_loop_forget. The list is the
 * process's (loops may live on different threads: the lock guards finding,
 * making and unlinking); a record is used only on its loop's thread. */
typedef struct loop_rec {
    h2o_loop_t *loop;
    /* 0 ms: h2o runs a turn's expired timeouts after its events, entries
     * linked meanwhile included, and waits no longer than the earliest of
     * them */
    h2o_timeout_t soon;
    h2o_timeout_t later; /* SG_LOOP_LATER_MS */
    h2o_timeout_t after; /* SG_HTTP_WATCH_AFTER_MS: a hold's watch begins */
    /* The hold watch's private epoll set, made when the loop's first watch
     * begins (-1 before): h2o tells us when it is readable (an event is
     * there) through sock */
    int epfd;
    h2o_socket_t *sock;
    struct loop_rec *next;
} loop_rec_t;

static pthread_mutex_t recs_lock = PTHREAD_MUTEX_INITIALIZER;
static loop_rec_t *recs; /* the process's loops: a handful at most */

/* loop's record, made if there is none yet (on loop's thread). */
static loop_rec_t *rec_of(h2o_loop_t *loop)
{
    loop_rec_t *r;

    pthread_mutex_lock(&recs_lock);
    for (r = recs; r != NULL && r->loop != loop; r = r->next)
        ;
    if (r == NULL) {
        r = sg_xcalloc(1, sizeof(*r));
        r->loop = loop;
        h2o_timeout_init(loop, &r->soon, 0);
        h2o_timeout_init(loop, &r->later, SG_LOOP_LATER_MS);
        h2o_timeout_init(loop, &r->after, SG_HTTP_WATCH_AFTER_MS);
        r->epfd = -1;
        r->next = recs;
        recs = r;
    }
    pthread_mutex_unlock(&recs_lock);
    return r;
}

void sg_loop_soon(h2o_loop_t *loop, h2o_timeout_entry_t *e)
{
    h2o_timeout_link(loop, &rec_of(loop)->soon, e);
}

void sg_loop_later(h2o_loop_t *loop, h2o_timeout_entry_t *e)
{
    h2o_timeout_link(loop, &rec_of(loop)->later, e);
}

void sg_loop_forget(h2o_loop_t *loop)
{
    loop_rec_t *r, **p;

    pthread_mutex_lock(&recs_lock);
    for (p = &recs; (r = *p) != NULL && r->loop != loop; p = &r->next)
        ;
    if (r != NULL)
        *p = r->next;
    pthread_mutex_unlock(&recs_lock);
    if (r == NULL)
        return;
    h2o_timeout_dispose(loop, &r->soon);
    h2o_timeout_dispose(loop, &r->later);
    h2o_timeout_dispose(loop, &r->after);
    if (r->sock != NULL) {
        h2o_socket_read_stop(r->sock);
        h2o_socket_close(r->sock); /* and epfd with it */
    }
    free(r);
}

const char *sg_http_reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 204:
        return "No Content";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 413:
        return "Payload Too Large";
    case 415:
        return "Unsupported Media Type";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 499:
        return "Client Closed Request";
    case 500:
        return "Internal Server Error";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return "Unknown";
    }
}

void sg_http_send_body(h2o_req_t *req, int status, const char *content_type, const char *p, size_t len)
{
    req->res.status = status;
    req->res.reason = sg_http_reason(status);
    req->res.content_length = len;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, content_type, strlen(content_type));
    h2o_send_inline(req, p, len);
}

void sg_http_send_json(h2o_req_t *req, int status, json_object *obj)
{
    size_t len;
    const char *s =
        json_object_to_json_string_length(obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    sg_http_send_body(req, status, "application/json", s, len);
    json_object_put(obj);
}

void sg_http_send_error(h2o_req_t *req, int status, const char *code, const char *fmt, ...)
{
    char detail[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "detail", json_object_new_string(detail));
    json_object_object_add(o, "code", json_object_new_string(code));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-sandgate-error"), 0, NULL,
                          h2o_strdup(&req->pool, code, SIZE_MAX).base, strlen(code));
    sg_http_send_json(req, status, o);
}

int sg_http_err_set(sg_http_err_t *e, int status, const char *code, const char *fmt, ...)
{
    va_list ap;
    e->status = status;
    e->code = code;
    va_start(ap, fmt);
    vsnprintf(e->detail, sizeof(e->detail), fmt, ap);
    va_end(ap);
    return -1;
}

void sg_http_add_header(h2o_req_t *req, const char *name, const char *value)
{
    /* h2o keeps the pointers it is given: copy both into the request's pool */
    h2o_iovec_t n = h2o_strdup(&req->pool, name, strlen(name)), v = h2o_strdup(&req->pool, value, strlen(value));
    h2o_add_header_by_str(&req->pool, &req->res.headers, n.base, n.len, 1, NULL, v.base, v.len);
}

int sg_http_method_is(h2o_req_t *req, const char *m)
{
    return h2o_memis(req->method.base, req->method.len, m, strlen(m));
}

int sg_http_split_path(const char *p, size_t len, h2o_iovec_t *segs, int max)
{
    int n = 0;
    size_t i = 1;

    if (len == 0 || p[0] != '/')
        return -1;
    while (i < len) {
        size_t start = i;
        while (i < len && p[i] != '/')
            i++;
        if (i == start || n == max)
            return -1; /* "//", or too many */
        segs[n++] = h2o_iovec_init(p + start, i - start);
        i++; /* past '/' (or past the end) */
    }
    return n;
}

h2o_iovec_t sg_http_path(h2o_req_t *req)
{
    size_t len = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
    return h2o_iovec_init(req->path.base, len);
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int sg_http_decode_segment(h2o_iovec_t seg, char *out, size_t outlen)
{
    size_t o = 0;
    for (size_t i = 0; i < seg.len; i++) {
        int c = (unsigned char)seg.base[i];
        if (c == '%') {
            int hi = i + 2 < seg.len ? hexval(seg.base[i + 1]) : -1,
                lo = i + 2 < seg.len ? hexval(seg.base[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return -1;
            c = hi * 16 + lo;
            i += 2;
        }
        if (c == 0 || o + 1 >= outlen)
            return -1;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return o != 0 ? 0 : -1;
}

h2o_iovec_t sg_http_query_param(h2o_req_t *req, const char *name)
{
    size_t nlen = strlen(name);
    const char *p, *end;

    if (req->query_at == SIZE_MAX)
        return h2o_iovec_init(NULL, 0);
    p = req->path.base + req->query_at + 1;
    end = req->path.base + req->path.len;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *pe = amp != NULL ? amp : end;
        if ((size_t)(pe - p) >= nlen && memcmp(p, name, nlen) == 0 && (p + nlen == pe || p[nlen] == '=')) {
            const char *v = p + nlen == pe ? pe : p + nlen + 1;
            char *out = h2o_mem_alloc_pool(&req->pool, (size_t)(pe - v) + 1), *d = out;
            for (const char *s = v; s < pe; s++) {
                if (*s == '%' && pe - s >= 3 && hexval(s[1]) >= 0 && hexval(s[2]) >= 0) {
                    *d++ = (char)(hexval(s[1]) * 16 + hexval(s[2]));
                    s += 2;
                } else {
                    *d++ = *s == '+' ? ' ' : *s;
                }
            }
            *d = '\0';
            return h2o_iovec_init(out, (size_t)(d - out));
        }
        p = pe + 1;
    }
    return h2o_iovec_init(NULL, 0);
}

int sg_http_is_json(h2o_req_t *req)
{
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
    if (i < 0)
        return 0;
    h2o_iovec_t v = req->headers.entries[i].value;
    static const char ct[] = "application/json";
    return v.len >= sizeof(ct) - 1 && h2o_lcstris(v.base, sizeof(ct) - 1, ct, sizeof(ct) - 1) &&
           (v.len == sizeof(ct) - 1 || v.base[sizeof(ct) - 1] == ';' || v.base[sizeof(ct) - 1] == ' ');
}

/* ---- holds ---- */

struct sg_http_hold {
    h2o_req_t *req;
    struct hold_stub *stub;
    void (*on_gone)(void *data);
    void *data;
    loop_rec_t *w;             /* the record whose epoll set holds fd, or NULL */
    h2o_timeout_entry_t later; /* linked: the watch begins when it runs */
    int fd;
    int gone;
};

struct hold_stub {
    sg_http_hold_t *hold;
};

static void unwatch_fd(sg_http_hold_t *h)
{
    if (h2o_timeout_is_linked(&h->later))
        h2o_timeout_unlink(&h->later);
    if (h->w != NULL) {
        /* the fd is still open here: h2o disposes of a request before it
         * closes its connection */
        epoll_ctl(h->w->epfd, EPOLL_CTL_DEL, h->fd, NULL);
        h->w = NULL;
    }
}

static void hold_gone(sg_http_hold_t *h)
{
    unwatch_fd(h);
    if (h->gone)
        return;
    h->gone = 1;
    if (h->on_gone != NULL)
        h->on_gone(h->data); /* may release h */
}

/* The events are taken one at a time, so that an on_gone that releases
 * other holds never leaves a taken event pointing at freed memory. */
static void on_watch_ready(h2o_socket_t *sock, const char *err)
{
    loop_rec_t *r = sock->data;
    struct epoll_event ev;

    while (epoll_wait(r->epfd, &ev, 1, 0) == 1)
        hold_gone(ev.data.ptr);
}

/* r's epoll set, made on the first watch to begin: 0, or -1 (logged; the
 * next watch tries again). */
static int watch_set(loop_rec_t *r)
{
    if (r->sock != NULL)
        return 0;
    if ((r->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        sg_error("http: cannot watch clients: epoll_create1: %s", strerror(errno));
        return -1;
    }
    r->sock = h2o_evloop_socket_create(r->loop, r->epfd, H2O_SOCKET_FLAG_DONT_READ);
    r->sock->data = r;
    h2o_socket_read_start(r->sock, on_watch_ready);
    return 0;
}

static void on_hold_stub_dispose(void *_stub)
{
    struct hold_stub *stub = _stub;
    sg_http_hold_t *h = stub->hold;
    if (h == NULL)
        return;
    h->req = NULL;
    /* disposed while held: unanswered, so the client went away */
    hold_gone(h);
}

sg_http_hold_t *sg_http_hold(h2o_req_t *req)
{
    sg_http_hold_t *h = sg_xcalloc(1, sizeof(*h));
    h->req = req;
    h->fd = -1;
    h->stub = h2o_mem_alloc_shared(&req->pool, sizeof(*h->stub), on_hold_stub_dispose);
    h->stub->hold = h;
    return h;
}

h2o_req_t *sg_http_hold_req(sg_http_hold_t *h)
{
    return h->req;
}

static void on_watch_later(h2o_timeout_entry_t *e)
{
    sg_http_hold_t *h = H2O_STRUCT_FROM_MEMBER(sg_http_hold_t, later, e);
    h2o_socket_t *sock;
    loop_rec_t *r;
    struct epoll_event ev = {.events = EPOLLRDHUP};

    if (h->req == NULL || h->gone || (sock = h->req->conn->callbacks->get_socket(h->req->conn)) == NULL)
        return;
    r = rec_of(h->req->conn->ctx->loop);
    if (watch_set(r) != 0)
        return;
    h->fd = h2o_socket_get_fd(sock);
    ev.data.ptr = h;
    /* level-triggered: a FIN that came before the watch is reported too */
    if (h->fd >= 0 && epoll_ctl(r->epfd, EPOLL_CTL_ADD, h->fd, &ev) == 0)
        h->w = r;
}

void sg_http_hold_watch(sg_http_hold_t *h, void (*on_gone)(void *data), void *data)
{
    h2o_loop_t *loop;

    h->on_gone = on_gone;
    h->data = data;
    if (h->req == NULL || h->w != NULL || h2o_timeout_is_linked(&h->later) || h->req->version >= 0x200 ||
        h->req->conn->callbacks->get_socket == NULL)
        return;
    loop = h->req->conn->ctx->loop;
    h->later.cb = on_watch_later;
    h2o_timeout_link(loop, &rec_of(loop)->after, &h->later);
}

int sg_http_hold_gone(sg_http_hold_t *h)
{
    return h->gone;
}

void sg_http_hold_release(sg_http_hold_t *h)
{
    if (h == NULL)
        return;
    unwatch_fd(h);
    if (h->req != NULL)
        h->stub->hold = NULL;
    free(h);
}

/* ---- streams ---- */

struct sg_http_stream {
    h2o_generator_t super;
    h2o_req_t *req;
    sg_buf_t queued;   /* not yet handed to h2o */
    sg_buf_t inflight; /* handed to h2o: valid until proceed */
    int sending;
    int finishing;
    int broken; /* past max_queued: ends with an error, not FINAL */
    int done;   /* FINAL sent, or the client went away */
};

static void stream_flush(sg_http_stream_t *s)
{
    if (s->sending || s->done)
        return;
    if (s->queued.len == 0 && !s->finishing)
        return;
    sg_buf_t t = s->inflight;
    s->inflight = s->queued;
    s->queued = t;
    sg_buf_reset(&s->queued);
    h2o_iovec_t buf = h2o_iovec_init(s->inflight.base, s->inflight.len);
    s->sending = 1;
    if (s->finishing)
        s->done = 1;
    h2o_send(s->req, &buf, 1,
             !s->finishing ? H2O_SEND_STATE_IN_PROGRESS
             : s->broken   ? H2O_SEND_STATE_ERROR
                           : H2O_SEND_STATE_FINAL);
}

static void on_stream_proceed(h2o_generator_t *gen, h2o_req_t *req)
{
    sg_http_stream_t *s = (sg_http_stream_t *)gen;
    s->sending = 0;
    sg_buf_reset(&s->inflight);
    stream_flush(s);
}

static void on_stream_stop(h2o_generator_t *gen, h2o_req_t *req)
{
    ((sg_http_stream_t *)gen)->done = 1;
}

static void on_stream_dispose(void *_s)
{
    sg_http_stream_t *s = _s;
    sg_buf_free(&s->queued);
    sg_buf_free(&s->inflight);
}

sg_http_stream_t *sg_http_stream_start(h2o_req_t *req, int status, const char *content_type, size_t max_queued)
{
    sg_http_stream_t *s = h2o_mem_alloc_shared(&req->pool, sizeof(*s), on_stream_dispose);
    memset(s, 0, sizeof(*s));
    s->super.proceed = on_stream_proceed;
    s->super.stop = on_stream_stop;
    s->req = req;
    sg_buf_init(&s->queued, max_queued);
    sg_buf_init(&s->inflight, max_queued);
    req->res.status = status;
    req->res.reason = sg_http_reason(status);
    /* h2o keeps the pointer and may write the headers out later: the
     * caller's string (the gateway passes the proxy's, freed with its
     * transfer) must be copied into the request's pool */
    h2o_iovec_t ct = h2o_strdup(&req->pool, content_type, strlen(content_type));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, ct.base, ct.len);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
    h2o_start_response(req, &s->super);
    /* send the headers now, so that the client sees the stream begin */
    s->sending = 1;
    h2o_send(req, NULL, 0, H2O_SEND_STATE_IN_PROGRESS);
    return s;
}

void sg_http_stream_abort(sg_http_stream_t *s)
{
    if (s->done || s->finishing)
        return;
    s->broken = 1;
    s->finishing = 1;
    stream_flush(s);
}

int sg_http_stream_write(sg_http_stream_t *s, const void *p, size_t len)
{
    if (s->done || s->finishing)
        return -1;
    if (sg_buf_append(&s->queued, p, len) != 0) {
        sg_http_stream_abort(s);
        return -1;
    }
    stream_flush(s);
    return 0;
}

void sg_http_stream_finish(sg_http_stream_t *s)
{
    if (s->done || s->finishing)
        return;
    s->finishing = 1;
    stream_flush(s);
}

int sg_http_stream_event(sg_http_stream_t *s, const char *event, json_object *data)
{
    size_t jl;
    const char *js =
        json_object_to_json_string_length(data, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &jl);
    int rc = 0;
    size_t need = 7 + strlen(event) + 7 + jl + 2;
    if (s->done || s->finishing) {
        rc = -1;
    } else if (s->queued.len + need > s->queued.max || sg_buf_append(&s->queued, "event: ", 7) != 0 ||
               sg_buf_append(&s->queued, event, strlen(event)) != 0 || sg_buf_append(&s->queued, "\ndata: ", 7) != 0 ||
               sg_buf_append(&s->queued, js, jl) != 0 || sg_buf_append(&s->queued, "\n\n", 2) != 0) {
        rc = -1;
        sg_http_stream_abort(s);
    } else {
        stream_flush(s);
    }
    json_object_put(data);
    return rc;
}
