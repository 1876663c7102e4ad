/*
 * test_upstream.c — gateway/upstream/upstream.c against a real h2o server living in
 * the same process and the same loop (no mocks): round trips, hundreds of
 * requests in flight without blocking the loop, timeouts, refused
 * connections, the reply cap, streaming, cancellation (also from inside
 * callbacks), connection reuse, the driver's timer (short timeouts under
 * long ones, many interleaved) and its parked idle sockets (a proxy that
 * closes an idle connection must not make the loop spin). Also common/http.c's
 * hold watch, whose only harness is this server, and a server of a test's
 * own taken apart with its loop after a watch (sg_http_server_destroy).
 *
 * The server replies by path:
 *   /fast          200 {"ok":true}
 *   /slow?ms=N     200 {"slept":N} after N ms (an h2o timer)
 *   /big           200, 2 MiB of 'x'
 *   /stream        200 text/plain, "one," "two," "three" 50 ms apart
 *   /echo          200 {"method","content_type","target","body"} of the request
 *   /retry         429 with Retry-After: 7
 *   /hang          never; the request is held and its client watched
 *                  (sg_http_hold_watch), and dropped once the client goes
 *
 * A bare HTTP/1.1 server (bare_*) does what h2o will not: it closes a
 * keep-alive connection it has just answered, at once or a little later,
 * with a FIN or a reset, as a proxy dropping idle connections would.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <pthread.h>
#include <netdb.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "http.h"
#include "sgtest.h"
#include "upstream.h"

#define BIG_LEN (2 * 1024 * 1024)
#define MIB (1024 * 1024)

static sg_http_server_t *server;
static h2o_loop_t *loop;
static char base_url[64];
static char *bigbuf;
/* The server listens on a Unix socket too (sg_http_server_listen_unix), in
 * a directory of the suite's own: unix_url reaches it there. */
static char sock_dir[64];
static char sock_path[128];
static char unix_url[192];

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

/* Runs l until *flag is set or ms pass; returns *flag. */
static int run_loop_until(h2o_loop_t *l, const int *flag, double ms)
{
    double deadline = now_ms() + ms;
    while (!*flag && now_ms() < deadline)
        h2o_evloop_run(l, 10);
    return *flag;
}

/* The same on the server's loop. */
static int run_until(const int *flag, double ms)
{
    return run_loop_until(loop, flag, ms);
}

static void run_for(double ms)
{
    double deadline = now_ms() + ms;
    while (now_ms() < deadline)
        h2o_evloop_run(loop, 10);
}

/* ---- the server --------------------------------------------------------------- */

/* h2o 2.2 timers are buckets of one duration each */
static h2o_timeout_t *timeout_of(uint64_t ms)
{
    static struct {
        uint64_t ms;
        h2o_timeout_t t;
    } table[16];
    static size_t n;
    for (size_t i = 0; i < n; ++i)
        if (table[i].ms == ms)
            return &table[i].t;
    assert_true(n < sizeof(table) / sizeof(table[0]));
    table[n].ms = ms;
    h2o_timeout_init(loop, &table[n].t, ms);
    return &table[n++].t;
}

typedef struct {
    h2o_timeout_entry_t entry;
    h2o_req_t *req;
    long ms;
} slow_t;

static void on_slow_dispose(void *p)
{
    slow_t *s = p;
    if (h2o_timeout_is_linked(&s->entry))
        h2o_timeout_unlink(&s->entry);
}

static void on_slow_timeout(h2o_timeout_entry_t *entry)
{
    slow_t *s = H2O_STRUCT_FROM_MEMBER(slow_t, entry, entry);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "slept", json_object_new_int64(s->ms));
    sg_http_send_json(s->req, 200, o);
}

static const char *const stream_pieces[] = {"one,", "two,", "three"};
#define STREAM_PIECES 3

typedef struct {
    h2o_generator_t gen;
    h2o_timeout_entry_t entry;
    h2o_req_t *req;
    int next;     /* index of the next piece */
    int can_send; /* h2o asked for more (or nothing sent yet) */
    int due;      /* the timer passed while h2o was still busy */
} stream_t;

static void stream_send(stream_t *st)
{
    h2o_iovec_t buf = h2o_iovec_init(stream_pieces[st->next], strlen(stream_pieces[st->next]));
    int final = ++st->next == STREAM_PIECES;
    st->can_send = 0;
    st->due = 0;
    if (!final)
        h2o_timeout_link(loop, timeout_of(50), &st->entry);
    h2o_send(st->req, &buf, 1, final ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_IN_PROGRESS);
}

static void on_stream_timeout(h2o_timeout_entry_t *entry)
{
    stream_t *st = H2O_STRUCT_FROM_MEMBER(stream_t, entry, entry);
    if (st->can_send)
        stream_send(st);
    else
        st->due = 1;
}

static void on_stream_proceed(h2o_generator_t *gen, h2o_req_t *req)
{
    stream_t *st = (stream_t *)gen;
    st->can_send = 1;
    if (st->due)
        stream_send(st);
}

static void on_stream_stop(h2o_generator_t *gen, h2o_req_t *req)
{
    stream_t *st = (stream_t *)gen;
    if (h2o_timeout_is_linked(&st->entry))
        h2o_timeout_unlink(&st->entry);
}

static void on_stream_dispose(void *p)
{
    on_stream_stop(p, NULL);
}

/* /hang requests, and what the hold-watch test looks at: the one asked
 * for with "?watched=1" */
static struct {
    int held, gone;
    double held_at, closed_at, gone_at;
    int hangup_fd; /* >= 0: this client socket is closed right after the watch is asked for */
} watched = {.hangup_fd = -1};

typedef struct {
    sg_http_hold_t *hold;
    int watched;
} hang_t;

static void on_hang_gone(void *data)
{
    hang_t *hg = data;
    h2o_req_t *req = sg_http_hold_req(hg->hold);

    if (hg->watched) {
        ++watched.gone;
        watched.gone_at = now_ms();
    }
    sg_http_hold_release(hg->hold);
    free(hg);
    /* into the closed connection: h2o finds it closed and frees it */
    if (req != NULL)
        sg_http_send_error(req, 503, "gone", "the client went away");
}

static void hang(h2o_req_t *req)
{
    hang_t *hg = calloc(1, sizeof(*hg));

    assert_non_null(hg);
    hg->hold = sg_http_hold(req);
    hg->watched = sg_http_query_param(req, "watched").base != NULL;
    sg_http_hold_watch(hg->hold, on_hang_gone, hg);
    if (!hg->watched)
        return;
    ++watched.held;
    watched.held_at = now_ms();
    if (watched.hangup_fd >= 0) {
        close(watched.hangup_fd);
        watched.hangup_fd = -1;
        watched.closed_at = now_ms();
    }
}

static int on_req(void *app, h2o_req_t *req)
{
    h2o_iovec_t path = sg_http_path(req);

    if (h2o_memis(path.base, path.len, H2O_STRLIT("/fast"))) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "ok", json_object_new_boolean(1));
        sg_http_send_json(req, 200, o);
    } else if (h2o_memis(path.base, path.len, H2O_STRLIT("/slow"))) {
        h2o_iovec_t v = sg_http_query_param(req, "ms");
        slow_t *s = h2o_mem_alloc_shared(&req->pool, sizeof(*s), on_slow_dispose);
        memset(s, 0, sizeof(*s));
        s->req = req;
        s->ms = v.base != NULL ? atol(v.base) : 100;
        s->entry.cb = on_slow_timeout;
        h2o_timeout_link(loop, timeout_of((uint64_t)s->ms), &s->entry);
    } else if (h2o_memis(path.base, path.len, H2O_STRLIT("/big"))) {
        sg_http_send_body(req, 200, "application/octet-stream", bigbuf, BIG_LEN);
    } else if (h2o_memis(path.base, path.len, H2O_STRLIT("/stream"))) {
        stream_t *st = h2o_mem_alloc_shared(&req->pool, sizeof(*st), on_stream_dispose);
        memset(st, 0, sizeof(*st));
        st->gen.proceed = on_stream_proceed;
        st->gen.stop = on_stream_stop;
        st->entry.cb = on_stream_timeout;
        st->req = req;
        st->can_send = 1;
        req->res.status = 200;
        req->res.reason = "OK";
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("text/plain"));
        h2o_start_response(req, &st->gen);
        stream_send(st);
    } else if (h2o_memis(path.base, path.len, H2O_STRLIT("/echo"))) {
        json_object *o = json_object_new_object();
        ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
        h2o_iovec_t ct = i >= 0 ? req->headers.entries[i].value : h2o_iovec_init("", 0);
        json_object_object_add(o, "method", json_object_new_string_len(req->method.base, (int)req->method.len));
        json_object_object_add(o, "content_type", json_object_new_string_len(ct.base, (int)ct.len));
        json_object_object_add(o, "target", json_object_new_string_len(req->path.base, (int)req->path.len));
        json_object_object_add(
            o, "body",
            json_object_new_string_len(req->entity.base != NULL ? req->entity.base : "", (int)req->entity.len));
        sg_http_send_json(req, 200, o);
    } else if (h2o_memis(path.base, path.len, H2O_STRLIT("/typed-error"))) {
        /* a detail that echoes the client's text, spelling another code */
        sg_http_send_error(req, 404, "no_such_file", "no file \"no_such_session\" (\"code\":\"no_such_session\")");
    } else if (h2o_memis(path.base, path.len, H2O_STRLIT("/legacy-error"))) {
        /* an older proxy: the code in the body only */
        static const char b[] = "{\"detail\":\"no file \\\"no_such_session\\\"\",\"code\":\"no_such_file\"}";
        sg_http_send_body(req, 404, "application/json", b, sizeof(b) - 1);
    } else if (h2o_memis(path.base, path.len, H2O_STRLIT("/untyped-error"))) {
        static const char b[] = "{\"detail\":\"\\\"code\\\":\\\"no_such_session\\\"\"}";
        sg_http_send_body(req, 404, "application/json", b, sizeof(b) - 1);
    } else if (h2o_memis(path.base, path.len, H2O_STRLIT("/bad-code"))) {
        sg_http_add_header(req, "X-Sandgate-Error", "No Such!");
        sg_http_send_body(req, 404, "text/plain", "no_such_session", 15);
    } else if (h2o_memis(path.base, path.len, H2O_STRLIT("/hang"))) {
        hang(req);
    } else if (h2o_memis(path.base, path.len, H2O_STRLIT("/retry"))) {
        sg_http_add_header(req, "Retry-After", "7");
        sg_http_send_error(req, 429, "busy", "come back later");
    } else {
        sg_http_send_error(req, 404, "not_found", "no such path");
    }
    return 0;
}

/* ---- the bare server ----------------------------------------------------------- */

#define BARE_CONNS 16

typedef struct bare_conn bare_conn_t;

typedef struct {
    h2o_socket_t *listener;
    char url[64];
    int accepted, replies;
    int conn_close;            /* the reply says "Connection: close" */
    long close_after_ms;       /* after a reply the connection is closed: 0 at once, > 0 that much later */
    int rst;                   /* closed with a reset (SO_LINGER 0), not a FIN */
    int drop_nth;              /* > 0: a connection's nth request is not answered, the connection closed */
    const char *const *pieces; /* NULL-terminated: the reply, one piece every 5 ms; NULL: 200 {"ok":true} */
    bare_conn_t *conns[BARE_CONNS];
} bare_server_t;

struct bare_conn {
    bare_server_t *srv;
    h2o_socket_t *sock;
    h2o_timeout_entry_t closer;
    h2o_timeout_entry_t sender; /* linked: the next of srv->pieces is due */
    int served;                 /* requests read on this connection */
    int next_piece;
    size_t len;
    char buf[2048];
};

static void bare_close(bare_conn_t *c)
{
    if (h2o_timeout_is_linked(&c->closer))
        h2o_timeout_unlink(&c->closer);
    if (h2o_timeout_is_linked(&c->sender))
        h2o_timeout_unlink(&c->sender);
    if (c->srv->rst) {
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        setsockopt(h2o_socket_get_fd(c->sock), SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
    h2o_socket_read_stop(c->sock);
    h2o_socket_close(c->sock);
    for (int i = 0; i < BARE_CONNS; i++)
        if (c->srv->conns[i] == c)
            c->srv->conns[i] = NULL;
    free(c);
}

static void on_bare_closer(h2o_timeout_entry_t *e)
{
    bare_close(H2O_STRUCT_FROM_MEMBER(bare_conn_t, closer, e));
}

static void send_all(h2o_socket_t *sock, const char *p, size_t len)
{
    assert_int_equal(send(h2o_socket_get_fd(sock), p, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* A reply sent: the connection closed now or later, as srv says. 1 when
 * it is closed (c freed). */
static int bare_replied(bare_conn_t *c)
{
    bare_server_t *srv = c->srv;

    ++srv->replies;
    if (srv->close_after_ms == 0) {
        bare_close(c);
        return 1;
    }
    if (srv->close_after_ms > 0 && !h2o_timeout_is_linked(&c->closer))
        h2o_timeout_link(loop, timeout_of((uint64_t)srv->close_after_ms), &c->closer);
    return 0;
}

static void on_bare_sender(h2o_timeout_entry_t *e)
{
    bare_conn_t *c = H2O_STRUCT_FROM_MEMBER(bare_conn_t, sender, e);
    const char *piece = c->srv->pieces[c->next_piece++];

    send_all(c->sock, piece, strlen(piece));
    if (c->srv->pieces[c->next_piece] != NULL)
        h2o_timeout_link(loop, timeout_of(5), &c->sender);
    else
        bare_replied(c);
}

/* Requests without a body: each one complete is answered 200 {"ok":true},
 * or with srv->pieces, or (drop_nth) not at all. */
static void on_bare_read(h2o_socket_t *sock, const char *err)
{
    bare_conn_t *c = sock->data;
    bare_server_t *srv = c->srv;
    char *end;
    ssize_t n = recv(h2o_socket_get_fd(sock), c->buf + c->len, sizeof(c->buf) - 1 - c->len, 0);

    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) {
        bare_close(c);
        return;
    }
    c->len += (size_t)n;
    c->buf[c->len] = '\0';
    while ((end = strstr(c->buf, "\r\n\r\n")) != NULL) {
        c->len -= (size_t)(end + 4 - c->buf);
        memmove(c->buf, end + 4, c->len + 1);
        if (++c->served == srv->drop_nth) {
            bare_close(c);
            return;
        }
        if (srv->pieces != NULL) {
            if (h2o_timeout_is_linked(&c->sender))
                fail_msg("a request came before the reply to the last one ended");
            c->next_piece = 0;
            on_bare_sender(&c->sender);
            return; /* one request at a time */
        }
        char reply[256];
        int len = snprintf(reply, sizeof(reply),
                           "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n%s\r\n"
                           "{\"ok\":true}",
                           srv->conn_close ? "Connection: close\r\n" : "");
        send_all(sock, reply, (size_t)len);
        if (bare_replied(c))
            return;
    }
    assert_true(c->len < sizeof(c->buf) - 1);
}

static void on_bare_accept(h2o_socket_t *listener, const char *err)
{
    bare_server_t *srv = listener->data;
    bare_conn_t *c;
    int fd = accept4(h2o_socket_get_fd(listener), NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), i;

    if (fd < 0)
        return;
    for (i = 0; i < BARE_CONNS && srv->conns[i] != NULL; i++)
        ;
    assert_true(i < BARE_CONNS);
    c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->srv = srv;
    c->closer.cb = on_bare_closer;
    c->sender.cb = on_bare_sender;
    c->sock = h2o_evloop_socket_create(loop, fd, H2O_SOCKET_FLAG_DONT_READ);
    c->sock->data = c;
    h2o_socket_read_start(c->sock, on_bare_read);
    srv->conns[i] = c;
    ++srv->accepted;
}

static void bare_start(bare_server_t *srv)
{
    int port, fd = sgtest_bind_loopback(SOCK_NONBLOCK, &port);

    assert_true(fd >= 0);
    assert_int_equal(listen(fd, 16), 0);
    snprintf(srv->url, sizeof(srv->url), "http://127.0.0.1:%d", port);
    srv->listener = h2o_evloop_socket_create(loop, fd, H2O_SOCKET_FLAG_DONT_READ);
    srv->listener->data = srv;
    h2o_socket_read_start(srv->listener, on_bare_accept);
}

static void bare_stop(bare_server_t *srv)
{
    for (int i = 0; i < BARE_CONNS; i++)
        if (srv->conns[i] != NULL)
            bare_close(srv->conns[i]);
    h2o_socket_read_stop(srv->listener);
    h2o_socket_close(srv->listener);
}

static int group_setup(void **state)
{
    char err[256];

    signal(SIGPIPE, SIG_IGN); /* h2o writes to clients that went away */
    bigbuf = malloc(BIG_LEN);
    memset(bigbuf, 'x', BIG_LEN);
    server = sg_http_server_create("127.0.0.1", 0, 4 * MIB, on_req, NULL, err, sizeof(err));
    if (server == NULL) {
        fprintf(stderr, "server: %s\n", err);
        return -1;
    }
    snprintf(sock_dir, sizeof(sock_dir), "/tmp/sgupstream-XXXXXX");
    if (mkdtemp(sock_dir) == NULL) {
        perror("mkdtemp");
        return -1;
    }
    snprintf(sock_path, sizeof(sock_path), "%s/proxy.sock", sock_dir);
    if (sg_http_server_listen_unix(server, sock_path, err, sizeof(err)) != 0) {
        fprintf(stderr, "server: %s\n", err);
        return -1;
    }
    snprintf(unix_url, sizeof(unix_url), "http://[unix:%s]", sock_path);
    sg_http_server_start(server);
    loop = sg_http_server_loop(server);
    snprintf(base_url, sizeof(base_url), "http://127.0.0.1:%d", sg_http_server_port(server));
    return 0;
}

static int group_teardown(void **state)
{
    /* let the server finish what the tests left (slow replies, closes) */
    run_for(300);
    free(bigbuf);
    unlink(sock_path);
    rmdir(sock_dir);
    return 0;
}

/* ---- the client side ------------------------------------------------------------ */

typedef struct {
    int done;
    long status;
    char *err;
    int timed_out;
    char *body;
    size_t body_len;
    char content_type[256];
    char retry_after[64];
    char code[64];
    double done_at;
    /* streaming */
    int heads;
    long head_status;
    char head_ct[256];
    int pieces;
    int data_before_head;
    char streamed[256];
    double piece_at[8];
    /* what the callbacks do besides recording */
    sg_upstream_t *u;
    sg_upstream_req_t *cancel_on_data; /* cancelled from the first on_data */
    int destroy_on_done;               /* u is destroyed from on_done */
    int destroy_on_data;               /* u is destroyed from the first on_data */
    void *chain;                       /* see the chain tests */
} result_t;

static void result_free(result_t *r)
{
    free(r->err);
    free(r->body);
}

static void on_head(void *data, long status, const char *content_type)
{
    result_t *r = data;
    ++r->heads;
    r->head_status = status;
    snprintf(r->head_ct, sizeof(r->head_ct), "%s", content_type);
}

static void on_data(void *data, const char *p, size_t len)
{
    result_t *r = data;
    if (r->heads == 0)
        r->data_before_head = 1;
    if (r->pieces < 8)
        r->piece_at[r->pieces] = now_ms();
    ++r->pieces;
    size_t have = strlen(r->streamed);
    if (have + len < sizeof(r->streamed)) {
        memcpy(r->streamed + have, p, len);
        r->streamed[have + len] = '\0';
    }
    if (r->cancel_on_data != NULL) {
        sg_upstream_cancel(r->cancel_on_data);
        r->cancel_on_data = NULL;
    }
    if (r->destroy_on_data) {
        r->destroy_on_data = 0;
        sg_upstream_destroy(r->u);
    }
}

static void on_done(void *data, const sg_upstream_reply_t *reply)
{
    result_t *r = data;
    assert_non_null(reply->body);
    assert_non_null(reply->content_type);
    assert_non_null(reply->retry_after);
    assert_int_equal(reply->body[reply->body_len], '\0');
    ++r->done;
    r->done_at = now_ms();
    r->status = reply->status;
    r->err = reply->err != NULL ? strdup(reply->err) : NULL;
    r->timed_out = reply->timed_out;
    r->body = malloc(reply->body_len + 1);
    memcpy(r->body, reply->body, reply->body_len + 1);
    r->body_len = reply->body_len;
    snprintf(r->content_type, sizeof(r->content_type), "%s", reply->content_type);
    snprintf(r->retry_after, sizeof(r->retry_after), "%s", reply->retry_after);
    assert_non_null(reply->code);
    snprintf(r->code, sizeof(r->code), "%s", reply->code);
    if (r->destroy_on_done)
        sg_upstream_destroy(r->u);
}

static sg_upstream_t *new_upstream(size_t max)
{
    sg_upstream_t *u = sg_upstream_create(loop, base_url, max);
    assert_non_null(u);
    return u;
}

static void destroy_upstream(sg_upstream_t *u)
{
    sg_upstream_destroy(u);
    run_for(20); /* h2o frees closed sockets on its next turn */
}

/* The fixtures of a test on one upstream of MIB bytes' replies (*state). */
static int upstream_setup(void **state)
{
    *state = new_upstream(MIB);
    return 0;
}

static int upstream_teardown(void **state)
{
    destroy_upstream(*state);
    return 0;
}

/* The same over the server's Unix socket. */
static int unix_upstream_setup(void **state)
{
    sg_upstream_t *u = sg_upstream_create(loop, unix_url, MIB);
    assert_non_null(u);
    *state = u;
    return 0;
}

#define UPSTREAM_TEST(f) cmocka_unit_test_setup_teardown(f, upstream_setup, upstream_teardown)
#define UNIX_UPSTREAM_TEST(f)                                                                                          \
    {                                                                                                                  \
#f " over a Unix socket", f, unix_upstream_setup, upstream_teardown, NULL                                      \
    }

static sg_upstream_req_t *get(sg_upstream_t *u, const char *path, long timeout_ms, result_t *r)
{
    return sg_upstream_start(u, "GET", path, NULL, 0, NULL, timeout_ms, NULL, NULL, on_done, r);
}

/* A request on u (r zeroed first), run until it is done (within wait_ms). */
static void exchange(sg_upstream_t *u, const char *method, const char *path, const char *body, size_t body_len,
                     const char *content_type, long timeout_ms, sg_upstream_head_cb on_head,
                     sg_upstream_data_cb on_data, result_t *r, double wait_ms)
{
    memset(r, 0, sizeof(*r));
    assert_non_null(
        sg_upstream_start(u, method, path, body, body_len, content_type, timeout_ms, on_head, on_data, on_done, r));
    assert_true(run_until(&r->done, wait_ms));
}

/* GET path on u (r zeroed first): a reply, of this status. */
static void expect_reply(sg_upstream_t *u, const char *path, long status, result_t *r)
{
    exchange(u, "GET", path, NULL, 0, NULL, 2000, NULL, NULL, r, 2000);
    assert_null(r->err);
    assert_int_equal(r->status, status);
}

static json_object *parse(const char *s)
{
    json_object *o = json_tokener_parse(s);
    assert_non_null(o);
    return o;
}

static const char *field(json_object *o, const char *name)
{
    json_object *v;
    assert_true(json_object_object_get_ex(o, name, &v));
    return json_object_get_string(v);
}

static void assert_contains(const char *hay, const char *needle)
{
    if (hay == NULL || strstr(hay, needle) == NULL)
        fail_msg("\"%s\" does not contain \"%s\"", hay != NULL ? hay : "(null)", needle);
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_get(void **state)
{
    sg_upstream_t *u = *state;
    result_t r = {0};

    assert_non_null(get(u, "/fast", 2000, &r));
    assert_int_equal(r.done, 0); /* never from inside start */
    assert_int_equal(sg_upstream_in_flight(u), 1);
    assert_true(run_until(&r.done, 2000));
    assert_int_equal(r.done, 1);
    assert_null(r.err);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.timed_out, 0);
    assert_string_equal(r.body, "{\"ok\":true}");
    assert_int_equal(r.body_len, 11);
    assert_string_equal(r.content_type, "application/json");
    assert_string_equal(r.retry_after, "");
    assert_int_equal(sg_upstream_in_flight(u), 0);
    result_free(&r);

    /* a 404 is a reply, not an error */
    expect_reply(u, "/nothing-here", 404, &r);
    assert_contains(r.body, "not_found");
    result_free(&r);

    /* Retry-After comes through */
    expect_reply(u, "/retry", 429, &r);
    assert_string_equal(r.retry_after, "7");
    result_free(&r);

    run_for(50);
    assert_int_equal(r.done, 1); /* exactly once */
}

/* An error's type is its code (X-Sandgate-Error, or the body's "code"
 * member from an older proxy), never text found in the body. */
static void test_error_code(void **state)
{
    static const struct {
        const char *path;
        long status;
        const char *code;
    } cases[] = {
        {"/typed-error", 404, "no_such_file"},
        {"/legacy-error", 404, "no_such_file"},
        {"/untyped-error", 404, ""},
        {"/bad-code", 404, ""},
        {"/retry", 429, "busy"},
        {"/fast", 200, ""},
    };
    sg_upstream_t *u = new_upstream(MIB);

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        result_t r;
        exchange(u, "GET", cases[i].path, NULL, 0, NULL, 2000, NULL, NULL, &r, 2000);
        assert_int_equal(r.status, cases[i].status);
        if (strcmp(r.code, cases[i].code) != 0)
            fail_msg("%s: code \"%s\", expected \"%s\"", cases[i].path, r.code, cases[i].code);
        result_free(&r);
    }
    destroy_upstream(u);

    assert_true(sg_upstream_code_valid("no_such_session"));
    assert_true(sg_upstream_code_valid("a1_b"));
    assert_false(sg_upstream_code_valid(""));
    assert_false(sg_upstream_code_valid("No_such"));
    assert_false(sg_upstream_code_valid("no such"));
    assert_false(sg_upstream_code_valid("no-such"));
    assert_true(sg_upstream_code_valid("abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstu"));   /* 47 */
    assert_false(sg_upstream_code_valid("abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuv")); /* 48 */
}

static void test_post_echo(void **state)
{
    sg_upstream_t *u = *state;
    result_t r = {0};
    static const char body[] = "{\"code\":\"print(1)\",\"n\":\"\\u00e9\"}";
    json_object *o;

    assert_non_null(
        sg_upstream_start(u, "POST", "/echo", body, strlen(body), "application/json", 2000, NULL, NULL, on_done, &r));
    assert_true(run_until(&r.done, 2000));
    assert_null(r.err);
    assert_int_equal(r.status, 200);
    o = parse(r.body);
    assert_string_equal(field(o, "method"), "POST");
    assert_string_equal(field(o, "content_type"), "application/json");
    assert_string_equal(field(o, "body"), body);
    json_object_put(o);
    result_free(&r);

    /* a body without a Content-Type gets none (no form type made up) */
    exchange(u, "PUT", "/echo", "abc", 3, NULL, 2000, NULL, NULL, &r, 2000);
    assert_null(r.err);
    o = parse(r.body);
    assert_string_equal(field(o, "method"), "PUT");
    assert_string_equal(field(o, "content_type"), "");
    assert_string_equal(field(o, "body"), "abc");
    json_object_put(o);
    result_free(&r);

    /* a request line of kilobytes (a file's percent-encoded name) goes whole */
    char target[4200] = "/echo?path=";
    for (size_t n = strlen(target); n + 6 < sizeof(target); n += 6)
        memcpy(target + n, "%C3%A9", 7);
    exchange(u, "PUT", target, "abc", 3, "application/octet-stream", 2000, NULL, NULL, &r, 2000);
    assert_null(r.err);
    assert_int_equal(r.status, 200);
    o = parse(r.body);
    assert_string_equal(field(o, "target"), target);
    json_object_put(o);
    result_free(&r);

    /* bodies are binary-safe, and copied: the caller's buffer may go at once */
    memset(&r, 0, sizeof(r));
    char *tmp = malloc(5);
    memcpy(tmp, "a\0b\0c", 5);
    assert_non_null(
        sg_upstream_start(u, "POST", "/echo", tmp, 5, "application/octet-stream", 2000, NULL, NULL, on_done, &r));
    memset(tmp, 'z', 5);
    free(tmp);
    assert_true(run_until(&r.done, 2000));
    o = parse(r.body);
    json_object *b;
    assert_true(json_object_object_get_ex(o, "body", &b));
    assert_int_equal(json_object_get_string_len(b), 5);
    assert_memory_equal(json_object_get_string(b), "a\0b\0c", 5);
    json_object_put(o);
    result_free(&r);

    /* DELETE without a body, POST without a body */
    static const char *const bodiless[] = {"DELETE", "POST"};
    for (size_t i = 0; i < sizeof(bodiless) / sizeof(bodiless[0]); i++) {
        exchange(u, bodiless[i], "/echo", NULL, 0, NULL, 2000, NULL, NULL, &r, 2000);
        assert_null(r.err);
        o = parse(r.body);
        assert_string_equal(field(o, "method"), bodiless[i]);
        assert_string_equal(field(o, "body"), "");
        json_object_put(o);
        result_free(&r);
    }
}

#define CONCURRENT 200

static void test_concurrent_no_blocking(void **state)
{
    sg_upstream_t *u = *state;
    result_t *rs = calloc(CONCURRENT, sizeof(*rs));
    result_t fast = {0};
    int all = 0;
    double t0 = now_ms(), fast_start, fast_ms;

    for (int i = 0; i < CONCURRENT; ++i)
        assert_non_null(get(u, "/slow?ms=500", 5000, &rs[i]));
    assert_int_equal(sg_upstream_in_flight(u), CONCURRENT);

    /* let them all connect and wait on the server */
    run_for(100);
    for (int i = 0; i < CONCURRENT; ++i)
        assert_int_equal(rs[i].done, 0);

    fast_start = now_ms();
    assert_non_null(get(u, "/fast", 2000, &fast));
    assert_int_equal(sg_upstream_in_flight(u), CONCURRENT + 1);
    assert_true(run_until(&fast.done, 1000));
    fast_ms = fast.done_at - fast_start;
    print_message("      /fast with %d in flight: %.1f ms\n", CONCURRENT, fast_ms);
    assert_null(fast.err);
    assert_int_equal(fast.status, 200);
    assert_true(fast_ms < 100);
    result_free(&fast);

    double deadline = t0 + 3000;
    while (!all && now_ms() < deadline) {
        h2o_evloop_run(loop, 10);
        all = 1;
        for (int i = 0; i < CONCURRENT && all; ++i)
            all = rs[i].done;
    }
    double total = now_ms() - t0;
    print_message("      %d x /slow?ms=500: %.1f ms\n", CONCURRENT, total);
    assert_true(all);
    assert_true(total < 2000);
    for (int i = 0; i < CONCURRENT; ++i) {
        assert_int_equal(rs[i].done, 1);
        assert_null(rs[i].err);
        assert_int_equal(rs[i].status, 200);
        assert_string_equal(rs[i].body, "{\"slept\":500}");
        result_free(&rs[i]);
    }
    assert_int_equal(sg_upstream_in_flight(u), 0);
    free(rs);
}

static void test_timeout(void **state)
{
    sg_upstream_t *u = *state;
    result_t r = {0};
    double t0 = now_ms();

    assert_non_null(get(u, "/slow?ms=2000", 200, &r));
    assert_true(run_until(&r.done, 3000));
    double took = r.done_at - t0;
    print_message("      timed out after %.1f ms\n", took);
    assert_int_equal(r.timed_out, 1);
    assert_int_equal(r.status, 0);
    assert_non_null(r.err);
    assert_contains(r.err, "200 ms");
    assert_string_equal(r.body, "");
    /* ended by the 200 ms timeout, not by the reply the server sends at 2 s
     * (the upper bound leaves room for a loaded machine) */
    assert_true(took >= 190 && took < 1500);
    result_free(&r);
    run_for(50);
    assert_int_equal(r.done, 1);
}

static void test_refused(void **state)
{
    char url[64];
    result_t r = {0};
    int port;

    /* a port bound but not listening: connects are refused, and nobody else
     * can take the port meanwhile */
    int fd = sgtest_bind_loopback(0, &port);
    assert_true(fd >= 0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);

    sg_upstream_t *u = sg_upstream_create(loop, url, MIB);
    assert_non_null(u);
    assert_non_null(get(u, "/fast", 2000, &r));
    assert_int_equal(r.done, 0);
    assert_true(run_until(&r.done, 2000));
    print_message("      %s\n", r.err);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.timed_out, 0);
    assert_contains(r.err, "the proxy does not answer (");
    assert_string_equal(r.body, "");
    assert_string_equal(r.content_type, "");
    result_free(&r);

    /* streaming: no reply at all, so no head */
    exchange(u, "GET", "/stream", NULL, 0, NULL, 2000, on_head, on_data, &r, 2000);
    assert_int_equal(r.heads, 0);
    assert_int_equal(r.pieces, 0);
    assert_int_equal(r.status, 0);
    assert_contains(r.err, "the proxy does not answer (");
    result_free(&r);
    destroy_upstream(u);
    close(fd);
}

static void test_too_large(void **state)
{
    sg_upstream_t *u = new_upstream(MIB);
    result_t r;

    exchange(u, "GET", "/big", NULL, 0, NULL, 5000, NULL, NULL, &r, 5000);
    assert_non_null(r.err);
    assert_string_equal(r.err, "the proxy's reply is too large");
    assert_int_equal(r.status, 0); /* a status line came, but no usable reply */
    assert_int_equal(r.timed_out, 0);
    assert_string_equal(r.body, "");
    result_free(&r);

    /* the connection that was cut does not break the next request */
    expect_reply(u, "/fast", 200, &r);
    result_free(&r);
    destroy_upstream(u);

    /* with room enough it comes whole */
    u = new_upstream(4 * MIB);
    exchange(u, "GET", "/big", NULL, 0, NULL, 5000, NULL, NULL, &r, 5000);
    assert_null(r.err);
    assert_int_equal(r.body_len, BIG_LEN);
    assert_memory_equal(r.body, bigbuf, BIG_LEN);
    result_free(&r);
    destroy_upstream(u);
}

static void test_stream(void **state)
{
    /* the cap is for collected bodies; streamed ones pass through */
    sg_upstream_t *u = new_upstream(4);
    result_t r = {0};

    assert_non_null(sg_upstream_start(u, "GET", "/stream", NULL, 0, NULL, 2000, on_head, on_data, on_done, &r));
    assert_true(run_until(&r.done, 2000));
    assert_null(r.err);
    assert_int_equal(r.heads, 1);
    assert_int_equal(r.head_status, 200);
    assert_string_equal(r.head_ct, "text/plain");
    assert_int_equal(r.data_before_head, 0);
    assert_int_equal(r.pieces, 3);
    assert_string_equal(r.streamed, "one,two,three");
    /* they came as they were sent, not all at the end */
    assert_true(r.piece_at[1] - r.piece_at[0] >= 30);
    assert_true(r.piece_at[2] - r.piece_at[1] >= 30);
    assert_true(r.done_at >= r.piece_at[2]);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "");
    assert_int_equal(r.body_len, 0);
    result_free(&r);

    /* a streamed reply without a body still gets its head, before done */
    exchange(u, "HEAD", "/fast", NULL, 0, NULL, 2000, on_head, on_data, &r, 2000);
    assert_null(r.err);
    assert_int_equal(r.heads, 1);
    assert_int_equal(r.head_status, 200);
    assert_int_equal(r.pieces, 0);
    result_free(&r);

    /* a stream that outlives its timeout: head, what came, then done with
     * status 0 */
    exchange(u, "GET", "/stream", NULL, 0, NULL, 75, on_head, on_data, &r, 2000);
    assert_int_equal(r.heads, 1);
    assert_int_equal(r.pieces, 2);
    assert_string_equal(r.streamed, "one,two,");
    assert_int_equal(r.timed_out, 1);
    assert_int_equal(r.status, 0);
    assert_non_null(r.err);
    result_free(&r);
    destroy_upstream(u);
}

static void test_cancel(void **state)
{
    sg_upstream_t *u = *state;
    result_t a = {0}, b = {0}, c = {0};
    sg_upstream_req_t *ra, *rb;

    /* in flight, waiting on the server */
    ra = get(u, "/slow?ms=300", 2000, &a);
    assert_non_null(ra);
    /* cancelled before the loop ever ran */
    rb = get(u, "/fast", 2000, &b);
    assert_non_null(rb);
    sg_upstream_cancel(rb);
    assert_int_equal(sg_upstream_in_flight(u), 1);
    run_for(100);
    sg_upstream_cancel(ra);
    assert_int_equal(sg_upstream_in_flight(u), 0);

    /* cancelled from inside its own on_data, after the first piece */
    sg_upstream_req_t *rc = sg_upstream_start(u, "GET", "/stream", NULL, 0, NULL, 2000, on_head, on_data, on_done, &c);
    assert_non_null(rc);
    c.cancel_on_data = rc;
    run_for(600);
    assert_int_equal(a.done, 0);
    assert_int_equal(b.done, 0);
    assert_int_equal(c.done, 0);
    assert_int_equal(c.heads, 1);
    assert_int_equal(c.pieces, 1);
    assert_int_equal(sg_upstream_in_flight(u), 0);

    /* the upstream still works */
    result_t d;
    exchange(u, "GET", "/fast", NULL, 0, NULL, 2000, NULL, NULL, &d, 2000);
    assert_null(d.err);
    result_free(&d);
}

static void test_destroy_from_callback(void **state)
{
    sg_upstream_t *u = new_upstream(MIB);
    result_t a = {0}, b = {0}, c = {0};

    /* a finishes first and destroys u: b and c (in flight) never call back */
    a.u = u;
    a.destroy_on_done = 1;
    assert_non_null(get(u, "/fast", 2000, &a));
    assert_non_null(get(u, "/slow?ms=100", 2000, &b));
    assert_non_null(get(u, "/slow?ms=200", 2000, &c));
    run_for(400);
    assert_int_equal(a.done, 1);
    assert_int_equal(b.done, 0);
    assert_int_equal(c.done, 0);
    result_free(&a);

    /* destroyed from inside on_data (the client is inside its read callback) */
    u = new_upstream(MIB);
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    a.u = u;
    a.destroy_on_data = 1;
    assert_non_null(sg_upstream_start(u, "GET", "/stream", NULL, 0, NULL, 2000, on_head, on_data, on_done, &a));
    assert_non_null(get(u, "/slow?ms=100", 2000, &b));
    run_for(400);
    assert_int_equal(a.heads, 1);
    assert_int_equal(a.pieces, 1);
    assert_int_equal(a.done, 0);
    assert_int_equal(b.done, 0);

    /* destroy with requests in flight, from outside any callback */
    u = new_upstream(MIB);
    memset(&b, 0, sizeof(b));
    assert_non_null(get(u, "/slow?ms=100", 2000, &b));
    run_for(30);
    destroy_upstream(u);
    run_for(200);
    assert_int_equal(b.done, 0);
}

/* A request started from inside another's on_data (the client is inside
 * its read callback) and from on_done. */
static void on_data_start(void *data, const char *p, size_t len)
{
    result_t *r = data;
    on_data(data, p, len);
    if (r->pieces == 1) {
        result_t *inner = r->chain;
        assert_non_null(get(r->u, "/fast", 2000, inner));
        assert_int_equal(inner->done, 0);
    }
}

static void test_start_from_callback(void **state)
{
    sg_upstream_t *u = new_upstream(MIB);
    result_t outer = {0}, inner = {0};

    outer.u = u;
    outer.chain = &inner;
    assert_non_null(
        sg_upstream_start(u, "GET", "/stream", NULL, 0, NULL, 2000, on_head, on_data_start, on_done, &outer));
    assert_true(run_until(&outer.done, 2000));
    assert_true(run_until(&inner.done, 2000));
    assert_null(outer.err);
    assert_string_equal(outer.streamed, "one,two,three");
    assert_null(inner.err);
    assert_int_equal(inner.status, 200);
    /* the inner one did not wait for the outer stream to end */
    assert_true(inner.done_at < outer.piece_at[1]);
    result_free(&outer);
    result_free(&inner);
    destroy_upstream(u);
}

#define SEQUENTIAL 1000

typedef struct {
    sg_upstream_t *u;
    int started, finished, failed, all_done;
    result_t r;
} seq_t;

static void on_seq_done(void *data, const sg_upstream_reply_t *reply)
{
    seq_t *s = data;
    ++s->finished;
    if (reply->err != NULL || reply->status != 200 || strcmp(reply->body, "{\"ok\":true}") != 0)
        ++s->failed;
    if (s->started == SEQUENTIAL) {
        s->all_done = 1;
        return;
    }
    ++s->started;
    if (sg_upstream_start(s->u, "GET", "/fast", NULL, 0, NULL, 2000, NULL, NULL, on_seq_done, s) == NULL)
        s->all_done = 1;
}

static void test_sequential_reuse(void **state)
{
    seq_t s = {0};
    double t0 = now_ms();

    s.u = new_upstream(MIB);
    s.started = 1;
    assert_non_null(sg_upstream_start(s.u, "GET", "/fast", NULL, 0, NULL, 2000, NULL, NULL, on_seq_done, &s));
    assert_true(run_until(&s.all_done, 60000)); /* a hang guard, not a speed check (sandgate-bench measures) */
    double took = now_ms() - t0;
    uint64_t conns = sg_upstream_connections_opened(s.u);
    print_message("      %d sequential requests: %.1f ms, %llu connection(s)\n", SEQUENTIAL, took,
                  (unsigned long long)conns);
    assert_int_equal(s.finished, SEQUENTIAL);
    assert_int_equal(s.failed, 0);
    assert_true(conns >= 1 && conns <= 3); /* what this checks: the connection is reused */
    destroy_upstream(s.u);
}

/* How late a timeout may end a request: the timer is armed for the
 * earliest deadline only, so a late one would be a wake-up missed (a loaded
 * machine aside). */
#define LATE_MS 700

/* r (started at t0 with timeout_ms) ended by its own timeout, on time. */
static void expect_timed_out(const result_t *r, double t0, long timeout_ms, const char *what)
{
    double took = r->done_at - t0;

    print_message("      %s: %ld ms timeout, ended after %.1f ms\n", what, timeout_ms, took);
    assert_int_equal(r->done, 1);
    assert_int_equal(r->timed_out, 1);
    assert_int_equal(r->status, 0);
    assert_non_null(r->err);
    if (took < timeout_ms || took > timeout_ms + LATE_MS)
        fail_msg("%s: a %ld ms timeout ended the request after %.1f ms", what, timeout_ms, took);
}

/* A short timeout while a long one is armed, and the other way round: the
 * driver re-arms its timerfd only for an earlier wake-up than the armed one,
 * so each must still end on time. The cases share one upstream: each starts
 * with whatever the last one left armed. */
static void test_short_timeout_under_long(void **state)
{
    static const struct {
        const char *name;
        int short_first; /* B (short) starts before A (long) */
        long long_ms;    /* A's timeout */
        int cancel_long; /* A is cancelled once B is over, else it times out */
    } cases[] = {
        {"A 10 s, then B 300 ms; A cancelled", 0, 10000, 1},
        {"A 1 s, then B 300 ms; A times out", 0, 1000, 0},
        {"B 300 ms, then A 10 s; A cancelled", 1, 10000, 1},
        {"B 300 ms, then A 1 s; A times out", 1, 1000, 0},
    };
    const long short_ms = 300;
    sg_upstream_t *u = *state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        result_t a = {0}, b = {0};
        sg_upstream_req_t *ra = NULL;
        double ta = 0, tb = 0;

        print_message("    %s\n", cases[i].name);
        for (int step = 0; step < 2; step++) {
            if (step == cases[i].short_first) {
                ta = now_ms();
                ra = get(u, "/hang", cases[i].long_ms, &a);
                assert_non_null(ra);
            } else {
                tb = now_ms();
                assert_non_null(get(u, "/hang", short_ms, &b));
            }
            run_for(20); /* the first is connected and waiting when the second starts */
        }
        assert_true(run_until(&b.done, short_ms + 1500));
        expect_timed_out(&b, tb, short_ms, "B");
        /* A is still waiting */
        assert_int_equal(a.done, 0);
        assert_int_equal(sg_upstream_in_flight(u), 1);
        if (cases[i].cancel_long) {
            sg_upstream_cancel(ra);
            assert_int_equal(sg_upstream_in_flight(u), 0);
            run_for(50);
            assert_int_equal(a.done, 0);
        } else {
            assert_true(run_until(&a.done, cases[i].long_ms + 1500));
            expect_timed_out(&a, ta, cases[i].long_ms, "A");
            assert_int_equal(sg_upstream_in_flight(u), 0);
        }
        result_free(&a);
        result_free(&b);
    }
}

#define INTERLEAVED 20

/* Many timeouts, 200..2000 ms, started out of order and partly while
 * others are already armed: each ends its own request on time. */
static void test_interleaved_timeouts(void **state)
{
    sg_upstream_t *u = *state;
    result_t rs[INTERLEAVED] = {{0}};
    long timeout_ms[INTERLEAVED];
    double t0[INTERLEAVED];
    int all = 0;

    for (int n = 0; n < INTERLEAVED; n++) {
        int i = (n * 7) % INTERLEAVED; /* 0, 7, 14, 1, 8, ...: every one once */
        timeout_ms[i] = 200 + i * 1800L / (INTERLEAVED - 1);
        t0[i] = now_ms();
        assert_non_null(get(u, "/hang", timeout_ms[i], &rs[i]));
        if (n % 5 == 4)
            run_for(20);
    }
    assert_int_equal(sg_upstream_in_flight(u), INTERLEAVED);

    double deadline = now_ms() + 2000 + LATE_MS + 500;
    while (!all && now_ms() < deadline) {
        h2o_evloop_run(loop, 10);
        all = 1;
        for (int i = 0; i < INTERLEAVED && all; ++i)
            all = rs[i].done;
    }
    for (int i = 0; i < INTERLEAVED; i++) {
        char what[32];
        snprintf(what, sizeof(what), "request %d", i);
        if (!rs[i].done)
            fail_msg("%s (%ld ms timeout) never ended", what, timeout_ms[i]);
        expect_timed_out(&rs[i], t0[i], timeout_ms[i], what);
        result_free(&rs[i]);
    }
    assert_int_equal(sg_upstream_in_flight(u), 0);
}

#define KEEPALIVE_GETS 50

/* Sequential requests started from outside any callback, some after an
 * idle while (the connection sits parked in the epoll set across turns):
 * one connection serves them all. */
static void test_keepalive_parked(void **state)
{
    sg_upstream_t *u = *state;
    result_t r;

    for (int i = 0; i < KEEPALIVE_GETS; i++) {
        if (i % 10 == 9)
            run_for(30);
        expect_reply(u, "/fast", 200, &r);
        assert_string_equal(r.body, "{\"ok\":true}");
        result_free(&r);
    }
    assert_int_equal(sg_upstream_in_flight(u), 0);
    assert_int_equal(sg_upstream_connections_opened(u), 1);
}

/* Turns of the loop in ms, each waiting at most 50 ms: an idle loop makes
 * about ms / 50 of them, a spinning one (a level-triggered event nobody
 * takes) thousands. */
static int count_turns(double ms)
{
    double deadline = now_ms() + ms;
    int turns = 0;

    while (now_ms() < deadline) {
        h2o_evloop_run(loop, 50);
        ++turns;
    }
    return turns;
}

/* The proxy closes an idle keep-alive connection (parked in the client's
 * pool, watched). The event on the parked connection must take it out of
 * the pool, not wake the loop on every turn; the next request gets a new
 * connection. With "Connection: close" the client closes the connection
 * itself instead of parking it, and the next connection's socket usually
 * gets its number. */
static void test_idle_connection_closed(void **state)
{
    static const struct {
        const char *name;
        int conn_close;
        long close_after_ms;
        int rst;
    } cases[] = {
        {"FIN at once after the reply", 0, 0, 0},
        {"FIN 50 ms after the reply", 0, 50, 0},
        {"reset 50 ms after the reply", 0, 50, 1},
        {"Connection: close (the client closes)", 1, -1, 0},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bare_server_t srv = {
            .conn_close = cases[i].conn_close, .close_after_ms = cases[i].close_after_ms, .rst = cases[i].rst};
        sg_upstream_t *u;
        result_t r;

        print_message("    %s\n", cases[i].name);
        bare_start(&srv);
        u = sg_upstream_create(loop, srv.url, MIB);
        assert_non_null(u);
        for (int n = 1; n <= 3; n++) {
            expect_reply(u, "/", 200, &r);
            assert_string_equal(r.body, "{\"ok\":true}");
            result_free(&r);
            assert_int_equal(srv.replies, n);
            /* idle, the connection closed meanwhile by one side or the other */
            int turns = count_turns(300);
            print_message("      after request %d: %d loop turns in 300 ms idle\n", n, turns);
            if (turns >= 20)
                fail_msg("the loop spins: %d turns in 300 ms idle", turns);
        }
        assert_int_equal(srv.accepted, 3);
        assert_int_equal(sg_upstream_connections_opened(u), 3);
        destroy_upstream(u);
        bare_stop(&srv);
        run_for(20);
    }
}

/* A reused connection the proxy closes as the request arrives (its idle
 * timeout at that moment): the request goes again on a new connection,
 * once; a new connection closed with no reply is not tried again. */
static void test_reused_connection_retried(void **state)
{
    bare_server_t srv = {.drop_nth = 2};
    result_t r;

    bare_start(&srv);
    sg_upstream_t *u = sg_upstream_create(loop, srv.url, MIB);
    assert_non_null(u);
    expect_reply(u, "/", 200, &r);
    result_free(&r);
    /* the second on that connection is dropped: answered on a new one */
    expect_reply(u, "/", 200, &r);
    assert_string_equal(r.body, "{\"ok\":true}");
    result_free(&r);
    assert_int_equal(srv.accepted, 2);
    assert_int_equal(srv.replies, 2);
    assert_int_equal(sg_upstream_connections_opened(u), 2);
    destroy_upstream(u);
    bare_stop(&srv);
    run_for(20);

    bare_server_t once = {.drop_nth = 1};
    bare_start(&once);
    u = sg_upstream_create(loop, once.url, MIB);
    assert_non_null(u);
    exchange(u, "GET", "/", NULL, 0, NULL, 2000, NULL, NULL, &r, 2000);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.timed_out, 0);
    assert_contains(r.err, "the request to the proxy failed (the connection closed with no reply)");
    result_free(&r);
    assert_int_equal(once.accepted, 1);
    assert_int_equal(once.replies, 0);
    destroy_upstream(u);
    bare_stop(&once);
    run_for(20);
}

#define HUGE_PIECES 9

/* Replies as they come off a network: the head and the body split across
 * reads, chunked with a UTF-8 character cut by both the chunks and the
 * reads, read to the connection's end, cut short, malformed. Each is
 * collected and streamed; where the reply's length is known the next
 * request reuses the connection. */
static void test_reply_shapes(void **state)
{
    static const char *const chunked[] = {
        "HTTP/1.1 200 OK\r\nContent-",
        "Type: text/plain; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nh\xc3",
        "\xa9llo\r\n3\r\n wo\r\n4\r",
        "\nrld!\r\n0\r\n",
        "\r\n",
        NULL};
    static const char *const length[] = {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234", "56789", NULL};
    static const char *const to_close[] = {"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nabc", "def", NULL};
    static const char *const informational[] = {"HTTP/1.1 100 Continue\r\n\r\n",
                                                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", NULL};
    static const char *const cut[] = {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234", NULL};
    static const char *const cut_chunked[] = {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabc", NULL};
    static const char *const malformed[] = {"HTTX/1.1 200 OK\r\n\r\n", NULL};
    static const char *const bad_length[] = {"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n1", NULL};
    static const char *const bad_chunk[] = {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", NULL};
    static char big[HUGE_PIECES][8001];
    static const char *huge[HUGE_PIECES + 2];
    huge[0] = "HTTP/1.1 200 OK\r\nX-Big: ";
    for (int i = 0; i < HUGE_PIECES; i++) {
        memset(big[i], 'a', 8000);
        huge[i + 1] = big[i];
    }
    static const struct {
        const char *name;
        const char *const *pieces;
        int close;        /* the server closes after the last piece */
        const char *body; /* NULL: the request fails with err */
        const char *err;
        int reused; /* the next request on the same connection */
    } cases[] = {
        {"chunked, split everywhere", chunked, 0, "h\xc3\xa9llo world!", NULL, 1},
        {"Content-Length, split", length, 0, "0123456789", NULL, 1},
        {"to the connection's end", to_close, 1, "abcdef", NULL, 0},
        {"a 100 Continue first", informational, 0, "ok", NULL, 1},
        {"cut short", cut, 1, NULL, "(the connection closed in the middle of the reply)", 0},
        {"chunked, cut short", cut_chunked, 1, NULL, "(the connection closed in the middle of the reply)", 0},
        {"malformed head", malformed, 0, NULL, "(a malformed reply head)", 0},
        {"bad Content-Length", bad_length, 0, NULL, "(a bad Content-Length)", 0},
        {"bad chunk size", bad_chunk, 0, NULL, "(a malformed chunked body)", 0},
        {"a head over 64 KiB", huge, 0, NULL, "(a reply head over 65536 bytes)", 0},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (int streamed = 0; streamed < 2; streamed++) {
            bare_server_t srv = {.pieces = cases[i].pieces, .close_after_ms = cases[i].close ? 0 : -1};
            result_t r;

            print_message("    %s, %s\n", cases[i].name, streamed ? "streamed" : "collected");
            bare_start(&srv);
            sg_upstream_t *u = sg_upstream_create(loop, srv.url, MIB);
            assert_non_null(u);
            exchange(u, "GET", "/", NULL, 0, NULL, 5000, streamed ? on_head : NULL, streamed ? on_data : NULL, &r,
                     5000);
            if (cases[i].body == NULL) {
                assert_int_equal(r.status, 0);
                assert_int_equal(r.timed_out, 0);
                assert_non_null(r.err);
                assert_contains(r.err, "the request to the proxy failed ");
                assert_contains(r.err, cases[i].err);
            } else {
                if (r.err != NULL)
                    fail_msg("%s: %s", cases[i].name, r.err);
                assert_int_equal(r.status, 200);
                assert_string_equal(streamed ? r.streamed : r.body, cases[i].body);
                if (streamed) {
                    assert_int_equal(r.heads, 1);
                    assert_int_equal(r.head_status, 200);
                    assert_int_equal(r.data_before_head, 0);
                }
            }
            result_free(&r);
            if (cases[i].reused) {
                exchange(u, "GET", "/", NULL, 0, NULL, 5000, NULL, NULL, &r, 5000);
                assert_null(r.err);
                assert_string_equal(r.body, cases[i].body);
                result_free(&r);
                assert_int_equal(srv.accepted, 1);
                assert_int_equal(sg_upstream_connections_opened(u), 1);
            }
            destroy_upstream(u);
            bare_stop(&srv);
            run_for(20);
        }
    }
}

/* sg_http_hold_watch: the watch begins SG_HTTP_WATCH_AFTER_MS after it is
 * asked for; a client that hangs up before (in the handler itself) or
 * after is noticed at most that much later (plus a loaded machine's
 * slack). */
#define WATCH_SLACK_MS 50

static void test_hold_watch(void **state)
{
    static const struct {
        const char *name;
        int hangup_in_handler; /* else WATCH_AFTER_MS * 3 after the request came */
    } cases[] = {
        {"hangs up before the watch begins", 1},
        {"hangs up after the watch began", 0},
    };
    static const char request[] = "GET /hang?watched=1 HTTP/1.1\r\nHost: test\r\n\r\n";

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int fd = sgtest_connect_loopback(sg_http_server_port(server));

        print_message("    %s\n", cases[i].name);
        assert_true(fd >= 0);
        memset(&watched, 0, sizeof(watched));
        watched.hangup_fd = cases[i].hangup_in_handler ? fd : -1;
        assert_int_equal(send(fd, request, sizeof(request) - 1, MSG_NOSIGNAL), (ssize_t)(sizeof(request) - 1));
        assert_true(run_until(&watched.held, 2000));
        if (cases[i].hangup_in_handler) {
            assert_int_equal(watched.hangup_fd, -1); /* closed */
            assert_true(watched.closed_at - watched.held_at < SG_HTTP_WATCH_AFTER_MS);
        } else {
            run_for(3 * SG_HTTP_WATCH_AFTER_MS);
            assert_int_equal(watched.gone, 0);
            close(fd);
            watched.closed_at = now_ms();
        }
        assert_true(run_until(&watched.gone, 2000));
        double late = watched.gone_at - watched.closed_at;
        print_message("      noticed %.1f ms after the hang-up (%.1f ms after the request came)\n", late,
                      watched.gone_at - watched.held_at);
        if (late > SG_HTTP_WATCH_AFTER_MS + WATCH_SLACK_MS)
            fail_msg("the hang-up was noticed %.1f ms later", late);
        run_for(30);
        assert_int_equal(watched.gone, 1); /* once */
    }
    watched.hangup_fd = -1;
}

/* ---- a server of a test's own, taken apart ------------------------------------ */

/* What test_destroy_after_watch's server holds: its one request. */
typedef struct {
    sg_http_hold_t *hold;
    int held, gone;
} own_t;

static void on_own_gone(void *data)
{
    ++((own_t *)data)->gone;
}

static int on_own_req(void *app, h2o_req_t *req)
{
    own_t *own = app;

    own->hold = sg_http_hold(req);
    sg_http_hold_watch(own->hold, on_own_gone, own);
    ++own->held;
    return 0;
}

/* 1 if fd is an open epoll set. */
static int is_epoll_fd(int fd)
{
    char path[64], target[64];
    ssize_t n;

    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    n = readlink(path, target, sizeof(target) - 1);
    if (n < 0)
        return 0;
    target[n] = '\0';
    return strcmp(target, "anon_inode:[eventpoll]") == 0;
}

#define EPOLL_FDS 1024

/* A loop can be destroyed after a hold watch began on it: sg_loop_forget
 * (through sg_http_server_destroy) takes back the watch's timeout, which h2o
 * asserts is disposed of, and closes its epoll set. */
static void test_destroy_after_watch(void **state)
{
    static own_t own;
    static sg_http_server_t *own_server; /* reachable: a failed assertion leaves it behind */
    static const char request[] = "GET /held HTTP/1.1\r\nHost: test\r\n\r\n";
    static unsigned char before[EPOLL_FDS];
    char err[256], reply[512];
    h2o_loop_t *l;
    h2o_req_t *req;
    ssize_t n;
    size_t got = 0;
    int fd, watch_fd = -1, closed = 0;
    double deadline;

    memset(&own, 0, sizeof(own));
    own_server = sg_http_server_create("127.0.0.1", 0, MIB, on_own_req, &own, err, sizeof(err));
    if (own_server == NULL)
        fail_msg("server: %s", err);
    sg_http_server_start(own_server);
    l = sg_http_server_loop(own_server);
    for (int i = 0; i < EPOLL_FDS; i++)
        before[i] = (unsigned char)is_epoll_fd(i);
    fd = sgtest_connect_loopback(sg_http_server_port(own_server));
    assert_true(fd >= 0);
    assert_int_equal(send(fd, request, sizeof(request) - 1, MSG_NOSIGNAL), (ssize_t)(sizeof(request) - 1));
    assert_true(run_loop_until(l, &own.held, 2000));

    /* the watch begins: one epoll set more than the server had, the watch's */
    deadline = now_ms() + 3 * SG_HTTP_WATCH_AFTER_MS;
    while (now_ms() < deadline)
        h2o_evloop_run(l, 10);
    for (int i = 0; i < EPOLL_FDS; i++) {
        if (before[i] || !is_epoll_fd(i))
            continue;
        assert_int_equal(watch_fd, -1);
        watch_fd = i;
    }
    if (watch_fd < 0)
        fail_msg("no epoll set made %d ms after the watch", 3 * SG_HTTP_WATCH_AFTER_MS);
    assert_int_equal(own.gone, 0);

    /* answered, then the client hangs up and h2o closes its side: no
     * connection left (h2o 2.2 disposes of its context's timeouts assuming
     * none is linked) */
    req = sg_http_hold_req(own.hold);
    assert_non_null(req);
    sg_http_hold_release(own.hold);
    own.hold = NULL;
    sg_http_send_body(req, 200, "text/plain", "ok", 2);
    assert_int_equal(shutdown(fd, SHUT_WR), 0);
    deadline = now_ms() + 2000;
    while (!closed && now_ms() < deadline) {
        h2o_evloop_run(l, 10);
        assert_true(got < sizeof(reply) - 1);
        n = recv(fd, reply + got, sizeof(reply) - 1 - got, MSG_DONTWAIT);
        if (n > 0)
            got += (size_t)n;
        else if (n == 0)
            closed = 1;
        else
            assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
    }
    assert_true(closed);
    reply[got] = '\0';
    assert_contains(reply, "HTTP/1.1 200 ");
    close(fd);
    assert_int_equal(own.gone, 0);

    /* h2o_evloop_destroy aborts on a timeout not disposed of */
    sg_http_server_destroy(own_server);
    own_server = NULL;
    assert_false(is_epoll_fd(watch_fd));
}

/* A proxy named by host name, looked up when a connection opens. The server
 * listens on 127.0.0.1 only: where "localhost" is ::1 as well (not in every
 * /etc/hosts: not in the one this suite was written on), the first address
 * that fails passes to the next. Either way the request gets through and
 * the next one reuses the connection. */
static void test_host_name(void **state)
{
    char url[64];
    result_t r;

    snprintf(url, sizeof(url), "http://localhost:%d", sg_http_server_port(server));
    sg_upstream_t *u = sg_upstream_create(loop, url, MIB);
    assert_non_null(u);
    for (int i = 0; i < 2; i++) {
        expect_reply(u, "/fast", 200, &r);
        result_free(&r);
    }
    assert_int_equal(sg_upstream_connections_opened(u), 1);
    destroy_upstream(u);

    /* an IPv6 address in brackets is an address, not a name to look up (the
     * server is not on ::1: the connect is what fails) */
    snprintf(url, sizeof(url), "http://[::1]:%d", sg_http_server_port(server));
    u = sg_upstream_create(loop, url, MIB);
    assert_non_null(u);
    exchange(u, "GET", "/fast", NULL, 0, NULL, 2000, NULL, NULL, &r, 2000);
    assert_int_equal(r.status, 0);
    assert_contains(r.err, "the proxy does not answer (");
    assert_null(strstr(r.err, "resolve"));
    result_free(&r);
    destroy_upstream(u);
}

/* ---- a host name looked up on its own thread ---- */

/* A resolver that waits until the test lets it go (slow_go), as one waits
 * on a DNS server that does not answer, or 3 s; slow_rc other than 0 is
 * its answer, else getaddrinfo's. (Run on the loop, as lookups once were,
 * it would hold the loop those 3 s: the requests to the other upstream
 * would come after it, and the test fail.) */
static pthread_mutex_t slow_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slow_cv = PTHREAD_COND_INITIALIZER;
static int slow_go, slow_calls, slow_returned, slow_rc;

static int slow_resolver(const char *host, const char *port, const struct addrinfo *hints, struct addrinfo **res)
{
    pthread_mutex_lock(&slow_mu);
    slow_calls++;
    pthread_cond_broadcast(&slow_cv);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 3;
    while (!slow_go && pthread_cond_timedwait(&slow_cv, &slow_mu, &until) == 0)
        ;
    int rc = slow_rc;
    pthread_mutex_unlock(&slow_mu);
    if (rc == 0)
        rc = getaddrinfo(host, port, hints, res);
    pthread_mutex_lock(&slow_mu);
    slow_returned++;
    pthread_cond_broadcast(&slow_cv);
    pthread_mutex_unlock(&slow_mu);
    return rc;
}

static void slow_reset(int rc)
{
    pthread_mutex_lock(&slow_mu);
    slow_go = slow_calls = slow_returned = 0;
    slow_rc = rc;
    pthread_mutex_unlock(&slow_mu);
    sg_upstream_set_resolver(slow_resolver);
}

static void slow_release(void)
{
    pthread_mutex_lock(&slow_mu);
    slow_go = 1;
    pthread_cond_broadcast(&slow_cv);
    pthread_mutex_unlock(&slow_mu);
}

static int slow_count(const int *what)
{
    pthread_mutex_lock(&slow_mu);
    int n = *what;
    pthread_mutex_unlock(&slow_mu);
    return n;
}

/* While a proxy's name is being looked up, the loop serves everything
 * else: requests to another upstream come and go while the lookup hangs;
 * the requests that waited for it then go through, on one lookup. */
static void test_lookup_off_the_loop(void **state)
{
    char url[64];
    result_t named[3], other = {0};
    (void)state;

    slow_reset(0);
    snprintf(url, sizeof(url), "http://localhost:%d", sg_http_server_port(server));
    sg_upstream_t *u = sg_upstream_create(loop, url, MIB);
    sg_upstream_t *numeric = new_upstream(MIB);
    assert_non_null(u);
    memset(named, 0, sizeof(named));
    for (int i = 0; i < 3; i++)
        assert_non_null(get(u, "/fast", 10000, &named[i]));
    run_for(50);
    assert_int_equal(slow_count(&slow_calls), 1); /* one lookup for the three */

    /* the lookup hangs: the loop still serves */
    for (int i = 0; i < 20; i++) {
        memset(&other, 0, sizeof(other));
        expect_reply(numeric, "/fast", 200, &other);
        result_free(&other);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(named[i].done, 0);
    assert_int_equal(slow_count(&slow_returned), 0);

    slow_release();
    for (int i = 0; i < 3; i++) {
        assert_true(run_until(&named[i].done, 5000));
        assert_null(named[i].err);
        assert_int_equal(named[i].status, 200);
        result_free(&named[i]);
    }
    /* kept: the next request looks nothing up */
    expect_reply(u, "/fast", 200, &other);
    result_free(&other);
    assert_int_equal(slow_count(&slow_calls), 1);
    destroy_upstream(u);
    destroy_upstream(numeric);
    sg_upstream_set_resolver(NULL);
}

/* A lookup that fails fails the requests that waited for it, with why; a
 * lookup still hanging when its upstream is destroyed ends on its own
 * (its memory freed by its thread: ASan's leak check runs on this suite). */
static void test_lookup_fails_or_outlives(void **state)
{
    char url[64];
    result_t r = {0};
    (void)state;

    slow_reset(EAI_NONAME);
    snprintf(url, sizeof(url), "http://no-such-proxy.invalid:%d", sg_http_server_port(server));
    sg_upstream_t *u = sg_upstream_create(loop, url, MIB);
    assert_non_null(u);
    assert_non_null(get(u, "/fast", 10000, &r));
    run_for(20);
    assert_int_equal(r.done, 0);
    slow_release();
    assert_true(run_until(&r.done, 5000));
    assert_int_equal(r.status, 0);
    assert_contains(r.err, "cannot resolve no-such-proxy.invalid");
    result_free(&r);
    destroy_upstream(u);

    slow_reset(0);
    u = sg_upstream_create(loop, url, MIB);
    memset(&r, 0, sizeof(r));
    assert_non_null(get(u, "/fast", 10000, &r));
    run_for(20);
    assert_int_equal(slow_count(&slow_calls), 1);
    destroy_upstream(u); /* no callback after this */
    slow_release();
    pthread_mutex_lock(&slow_mu);
    while (slow_returned == 0)
        pthread_cond_wait(&slow_cv, &slow_mu);
    pthread_mutex_unlock(&slow_mu);
    run_for(50);
    assert_int_equal(r.done, 0);
    sg_upstream_set_resolver(NULL);
}

/* A template's name as one path segment of a request to the proxy. */
static void test_escape(void **state)
{
    char out[32];

    assert_int_equal(sg_upstream_escape("aZ09-._~", out, sizeof(out)), 0);
    assert_string_equal(out, "aZ09-._~");
    assert_int_equal(sg_upstream_escape("a b/c?d%\xc3\xa9", out, sizeof(out)), 0);
    assert_string_equal(out, "a%20b%2Fc%3Fd%25%C3%A9");
    assert_int_equal(sg_upstream_escape("", out, sizeof(out)), 0);
    assert_string_equal(out, "");
    /* what does not fit is refused, never cut */
    assert_int_equal(sg_upstream_escape("abc", out, 4), 0);
    assert_int_equal(sg_upstream_escape("abcd", out, 4), -1);
    assert_int_equal(sg_upstream_escape("\xff", out, 3), -1);
    assert_int_equal(sg_upstream_escape("\xff", out, 4), 0);
    assert_string_equal(out, "%FF");
}

/* ---- a proxy's Unix socket ------------------------------------------------------- */

/* Over the socket, what a session's traffic looks like at size: 2 MiB of
 * reply byte for byte, a stream piece by piece as it was sent, a body of
 * a megabyte echoed whole; and the connection kept for the next request. */
static void test_unix_sizes(void **state)
{
    sg_upstream_t *u = sg_upstream_create(loop, unix_url, 4 * MIB);
    result_t r;
    (void)state;
    assert_non_null(u);

    exchange(u, "GET", "/big", NULL, 0, NULL, 5000, NULL, NULL, &r, 5000);
    assert_null(r.err);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, BIG_LEN);
    assert_memory_equal(r.body, bigbuf, BIG_LEN);
    result_free(&r);

    exchange(u, "GET", "/stream", NULL, 0, NULL, 2000, on_head, on_data, &r, 2000);
    assert_null(r.err);
    assert_int_equal(r.pieces, 3);
    assert_string_equal(r.streamed, "one,two,three");
    assert_true(r.piece_at[1] - r.piece_at[0] >= 30);
    result_free(&r);

    /* a megabyte of multibyte text: é is two bytes, and the server's JSON
     * gives it back as the same bytes */
    size_t n = MIB;
    char *body = malloc(n);
    for (size_t i = 0; i + 1 < n; i += 2)
        memcpy(body + i, "\xc3\xa9", 2);
    exchange(u, "POST", "/echo", body, n, "application/octet-stream", 5000, NULL, NULL, &r, 5000);
    assert_null(r.err);
    assert_int_equal(r.status, 200);
    json_object *o = parse(r.body), *b;
    assert_true(json_object_object_get_ex(o, "body", &b));
    assert_int_equal(json_object_get_string_len(b), (int)n);
    assert_memory_equal(json_object_get_string(b), body, n);
    json_object_put(o);
    result_free(&r);
    free(body);
    assert_int_equal(sg_upstream_connections_opened(u), 1);
    destroy_upstream(u);
}

/* A server's own, listening on path: NULL (err says why) when it cannot. */
static sg_http_server_t *unix_server(const char *path, char *err, size_t errlen)
{
    sg_http_server_t *s = sg_http_server_create("127.0.0.1", 0, MIB, on_req, NULL, err, errlen);
    assert_non_null(s);
    if (sg_http_server_listen_unix(s, path, err, errlen) != 0) {
        sg_http_server_destroy(s);
        return NULL;
    }
    return s;
}

/* "GET /fast" over the socket at path: 1 when the server answers 200. */
static int unix_answers(const char *path)
{
    char url[256];
    result_t r;
    snprintf(url, sizeof(url), "http://[unix:%s]", path);
    sg_upstream_t *u = sg_upstream_create(loop, url, MIB);
    assert_non_null(u);
    exchange(u, "GET", "/fast", NULL, 0, NULL, 2000, NULL, NULL, &r, 3000);
    int ok = r.err == NULL && r.status == 200;
    result_free(&r);
    destroy_upstream(u);
    return ok;
}

/* The socket file: made 0600 and the server's user's; one that nobody
 * listens on (a server killed) is taken over, one a live server holds is
 * refused and keeps answering, anything else there is refused and left as
 * it was; removed when the server stops, unless another socket replaced it
 * meanwhile; a relative or too long path refused. A gone socket is the
 * proxy not answering. */
static void test_unix_socket_file(void **state)
{
    char path[192], err[256];
    struct stat sb;
    (void)state;

    /* the suite's server: 0600, ours, a socket */
    assert_int_equal(lstat(sock_path, &sb), 0);
    assert_true(S_ISSOCK(sb.st_mode));
    assert_int_equal(sb.st_mode & 07777, 0600);
    assert_int_equal(sb.st_uid, geteuid());

    /* a live server's socket: refused, and it still answers */
    sg_http_server_t *s = unix_server(sock_path, err, sizeof(err));
    assert_null(s);
    assert_contains(err, "another server listens there");
    assert_true(unix_answers(sock_path));

    /* a socket nobody listens on: taken over */
    snprintf(path, sizeof(path), "%s/stale.sock", sock_dir);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    assert_true(strlen(path) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, path, strlen(path) + 1);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    close(fd);
    assert_int_equal(lstat(path, &sb), 0);
    assert_false(unix_answers(path)); /* the proxy does not answer */
    s = unix_server(path, err, sizeof(err));
    if (s == NULL)
        fail_msg("a stale socket not taken over: %s", err);
    sg_http_server_start(s);
    /* this server has a loop of its own: turned here between the client's */
    h2o_loop_t *l = sg_http_server_loop(s);
    char url[256];
    result_t r = {0};
    snprintf(url, sizeof(url), "http://[unix:%s]", path);
    sg_upstream_t *u = sg_upstream_create(loop, url, MIB);
    assert_non_null(get(u, "/fast", 2000, &r));
    double deadline = now_ms() + 3000;
    while (!r.done && now_ms() < deadline) {
        h2o_evloop_run(loop, 1);
        h2o_evloop_run(l, 1);
    }
    assert_int_equal(r.done, 1);
    assert_null(r.err);
    assert_int_equal(r.status, 200);
    result_free(&r);
    sg_upstream_destroy(u);
    for (int i = 0; i < 5; i++) {
        h2o_evloop_run(loop, 1);
        h2o_evloop_run(l, 1);
    }

    /* stopped: the socket is gone */
    sg_http_server_stop_accepting(s);
    assert_int_equal(lstat(path, &sb), -1);
    assert_int_equal(errno, ENOENT);
    sg_http_server_destroy(s);

    /* replaced by another socket while it ran: that one stays */
    s = unix_server(path, err, sizeof(err));
    assert_non_null(s);
    assert_int_equal(unlink(path), 0);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    sg_http_server_destroy(s);
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISSOCK(sb.st_mode));
    close(fd);
    assert_int_equal(unlink(path), 0);

    /* a file that is not a socket: refused, untouched */
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("keep me", fp);
    fclose(fp);
    assert_null(unix_server(path, err, sizeof(err)));
    assert_contains(err, "not a socket");
    char back[16] = "";
    fp = fopen(path, "r");
    assert_non_null(fp);
    assert_non_null(fgets(back, sizeof(back), fp));
    fclose(fp);
    assert_string_equal(back, "keep me");
    assert_int_equal(unlink(path), 0);

    /* paths it cannot take */
    assert_null(unix_server("relative.sock", err, sizeof(err)));
    assert_contains(err, "not absolute");
    char longer[200];
    memset(longer, 'a', sizeof(longer) - 1);
    longer[0] = '/';
    longer[sizeof(longer) - 1] = '\0';
    assert_null(unix_server(longer, err, sizeof(err)));
    assert_contains(err, "longer than");
    /* a directory that is not there */
    snprintf(path, sizeof(path), "%s/no-such-dir/p.sock", sock_dir);
    assert_null(unix_server(path, err, sizeof(err)));
    assert_contains(err, "cannot listen on");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        UPSTREAM_TEST(test_get),
        cmocka_unit_test(test_error_code),
        UPSTREAM_TEST(test_post_echo),
        UPSTREAM_TEST(test_concurrent_no_blocking),
        UPSTREAM_TEST(test_timeout),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_too_large),
        cmocka_unit_test(test_stream),
        UPSTREAM_TEST(test_cancel),
        cmocka_unit_test(test_destroy_from_callback),
        cmocka_unit_test(test_start_from_callback),
        cmocka_unit_test(test_sequential_reuse),
        UPSTREAM_TEST(test_short_timeout_under_long),
        UPSTREAM_TEST(test_interleaved_timeouts),
        UPSTREAM_TEST(test_keepalive_parked),
        cmocka_unit_test(test_idle_connection_closed),
        cmocka_unit_test(test_reused_connection_retried),
        cmocka_unit_test(test_reply_shapes),
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_host_name),
        cmocka_unit_test(test_lookup_off_the_loop),
        cmocka_unit_test(test_lookup_fails_or_outlives),
        cmocka_unit_test(test_hold_watch),
        cmocka_unit_test(test_destroy_after_watch),
        UNIX_UPSTREAM_TEST(test_get),
        UNIX_UPSTREAM_TEST(test_post_echo),
        UNIX_UPSTREAM_TEST(test_concurrent_no_blocking),
        UNIX_UPSTREAM_TEST(test_timeout),
        UNIX_UPSTREAM_TEST(test_cancel),
        UNIX_UPSTREAM_TEST(test_keepalive_parked),
        cmocka_unit_test(test_unix_sizes),
        cmocka_unit_test(test_unix_socket_file),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
