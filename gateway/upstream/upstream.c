/*
 * upstream.c — HTTP/1.1 to the proxy on the gateway's own h2o loop: h2o's
 * sockets, the reply's head and chunked body read with picohttpparser (which
 * libh2o carries), a pool of idle keep-alive connections, and one timerfd
 * for every request's total timeout. A request costs one write and the
 * reads its reply needs; nothing here blocks on the network.
 *
 * Connections. A request takes the most recently parked idle connection,
 * else opens one (to the proxy's address, or to a host name's addresses in
 * turn). A host name is looked up on a thread of its own (getaddrinfo
 * waits as long as the resolver does: seconds when a DNS server does not
 * answer, and the loop serves every tenant); its addresses serve new
 * connections for RESOLVE_KEEP_MS, and past that while the next lookup is
 * made. Only a request that finds no address at all waits for the lookup
 * (its timeout runs meanwhile). A reply that ends where
 * its length says, on an HTTP/1.1 connection the proxy keeps open, parks
 * the connection again; anything else closes it. A parked connection is
 * watched: the proxy closing it (or sending anything) takes it out of the
 * pool at once. A reused connection that fails before a byte of the reply
 * came is retried once on a new one, as curl does: the proxy closed it idle
 * at the moment it was taken.
 *
 * Timeouts. Each request has a deadline; the timerfd is armed for the
 * earliest one only when a request's is earlier than what is armed. When
 * it fires, every request past its deadline ends, and it is armed for the
 * next.
 *
 * Reentrancy. A request's callbacks may cancel it, cancel others, start
 * new ones or destroy the upstream. A request whose callback is running is
 * only marked when cancelled, and freed once the callback returns; the
 * upstream destroyed from inside any callback is freed when the outermost
 * of ours returns. No callback runs before sg_upstream_start returns: a
 * failure found there is told at the end of the loop's turn.
 */
#include "upstream.h"
#include "buf.h"
#include "http.h"
#include "log.h"
#include "usage_hdr.h"
#include "util.h"

#include <errno.h>
#include <json-c/json.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

/* picohttpparser is built into libh2o, its functions exported, but Debian
 * installs no header for it: the two used here, as h2o 2.2 declares them
 * (deps/picohttpparser/picohttpparser.h). */
struct phr_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};
int phr_parse_response(const char *buf, size_t len, int *minor_version, int *status, const char **msg, size_t *msg_len,
                       struct phr_header *headers, size_t *num_headers, size_t last_len);
struct phr_chunked_decoder {
    size_t bytes_left_in_chunk;
    char consume_trailer;
    char _hex_count;
    char _state;
};
ssize_t phr_decode_chunked(struct phr_chunked_decoder *decoder, char *buf, size_t *bufsz);

#define DEFAULT_TIMEOUT_MS 30000L
#define MAX_IDLE 256          /* parked connections kept; more are closed */
#define MAX_HEADERS 64        /* in a reply's head */
#define MAX_HEAD_BYTES 65536  /* a reply's head longer than this is refused */
#define RESOLVE_KEEP_MS 10000 /* a host name's addresses serve new connections this long */
#define MAX_ADDRS 8           /* of a host name's, tried in turn */

/* A host name's lookup on its thread (lookup_main). The thread tells the
 * loop by writing a byte to the pipe (wfd) and setting done, under mu; an
 * upstream destroyed before that sets orphaned, and the thread then frees
 * the lookup itself. */
typedef struct {
    pthread_mutex_t mu;
    char *host;
    char port[8];
    int rc; /* getaddrinfo's */
    struct addrinfo *res;
    int wfd;
    int done;
    int orphaned;
} lookup_t;

static sg_upstream_resolver_fn resolver = getaddrinfo;

typedef struct {
    h2o_linklist_t link; /* u->idle */
    h2o_socket_t *sock;
    sg_upstream_t *u;
} idle_conn_t;

struct sg_upstream {
    h2o_loop_t *loop;
    char *host;      /* to connect to: a name or a numeric address */
    char *authority; /* the Host header: host[:port] as the URL has it */
    char *prefix;    /* the URL's path, "" when none */
    uint16_t port;
    struct sockaddr_storage addrs[MAX_ADDRS]; /* host's addresses, naddrs 0: none yet */
    socklen_t addr_lens[MAX_ADDRS];
    size_t naddrs;
    size_t addr_ok; /* the one tried first: the last that connected */
    int numeric;    /* host is an address: it never expires */
    uint64_t addr_until_ms;
    lookup_t *lookup;          /* a lookup of host on its way */
    h2o_socket_t *lookup_sock; /* the pipe's end it writes to */
    size_t max_reply_bytes;
    h2o_linklist_t active; /* requests not yet finished or cancelled */
    h2o_linklist_t idle;   /* idle_conn_t, the most recently parked last */
    size_t idle_count;
    size_t in_flight;
    uint64_t connects;
    int tfd;
    h2o_socket_t *timer_sock; /* owns tfd once created */
    uint64_t armed_ms;        /* when tfd fires (sg_now_ms), 0: disarmed */
    int busy;                 /* depth of our callbacks on the stack */
    int destroying;           /* sg_upstream_destroy was called while busy */
};

enum {
    REQ_ACTIVE,    /* its connection opening, or on it: the request written, the reply read */
    REQ_FINISHING, /* on_done is running */
    REQ_DEAD,      /* cancelled while one of its callbacks ran: freed when it returns */
};

enum {
    BODY_NONE,    /* HEAD, 1xx, 204, 304 */
    BODY_LENGTH,  /* Content-Length */
    BODY_CHUNKED, /* Transfer-Encoding: chunked */
    BODY_CLOSE,   /* to the end of the connection */
};

struct sg_upstream_req {
    sg_upstream_t *u;
    h2o_linklist_t link; /* u->active */
    int state;
    h2o_socket_t *sock;
    h2o_timeout_entry_t soon; /* a failure found by start (in err), told at the end of the turn */
    sg_upstream_head_cb on_head;
    sg_upstream_data_cb on_data;
    sg_upstream_done_cb on_done;
    void *data;
    long timeout_ms;
    uint64_t deadline_ms;
    char *wire; /* the whole request: head and body */
    size_t wire_len;
    unsigned is_head : 1;
    unsigned reused : 1;  /* its connection came from the pool */
    unsigned retried : 1; /* already moved once to a new connection */
    unsigned in_cb : 1;   /* one of its callbacks is running */
    unsigned head_done : 1;
    unsigned head_sent : 1;
    unsigned keep_alive : 1;
    unsigned too_large : 1;
    unsigned written : 1;  /* the request is out: its buffer is no longer h2o's */
    unsigned awaiting : 1; /* waits for the host's first addresses */
    size_t addr_tries;     /* addresses tried for its connection */
    size_t addr_i;         /* the one being tried */
    int body_mode;
    size_t left; /* BODY_LENGTH: bytes to come */
    struct phr_chunked_decoder chunked;
    size_t received; /* bytes of the reply seen */
    long status;
    sg_buf_t body;
    char content_type[256];
    char retry_after[64];
    char usage[SG_USAGE_HDR_MAX + 2]; /* one more than a valid value: a longer one reads as invalid */
    char code[48];
    char err[320];
};

static const char *too_large_err = "the proxy's reply is too large";

static char *memdup(const char *p, size_t n)
{
    char *c = sg_xmalloc(n);
    memcpy(c, p, n);
    return c;
}

static void open_conn(sg_upstream_req_t *r);
static void on_reply_read(h2o_socket_t *sock, const char *err);

/* ---- the upstream's callbacks --------------------------------------------------- */

static void free_upstream(sg_upstream_t *u);

static void enter(sg_upstream_t *u)
{
    ++u->busy;
}

static void leave(sg_upstream_t *u)
{
    if (--u->busy == 0 && u->destroying)
        free_upstream(u);
}

/* ---- idle connections ----------------------------------------------------------- */

static void drop_idle(idle_conn_t *c)
{
    h2o_linklist_unlink(&c->link);
    --c->u->idle_count;
    h2o_socket_read_stop(c->sock);
    h2o_socket_close(c->sock);
    free(c);
}

/* Anything on a parked connection — the proxy closed it, reset it, or
 * sent what no request asked for — ends it. */
static void on_idle_event(h2o_socket_t *sock, const char *err)
{
    (void)err;
    drop_idle(sock->data);
}

static void park(sg_upstream_t *u, h2o_socket_t *sock)
{
    if (u->destroying || u->idle_count >= MAX_IDLE) {
        h2o_socket_read_stop(sock);
        h2o_socket_close(sock);
        return;
    }
    idle_conn_t *c = sg_xcalloc(1, sizeof(*c));
    c->sock = sock;
    c->u = u;
    sock->data = c;
    h2o_linklist_insert(&u->idle, &c->link);
    ++u->idle_count;
    h2o_socket_read_start(sock, on_idle_event);
}

static h2o_socket_t *take_idle(sg_upstream_t *u)
{
    if (h2o_linklist_is_empty(&u->idle))
        return NULL;
    idle_conn_t *c = H2O_STRUCT_FROM_MEMBER(idle_conn_t, link, u->idle.prev);
    h2o_socket_t *sock = c->sock;
    h2o_linklist_unlink(&c->link);
    --u->idle_count;
    free(c);
    h2o_socket_read_stop(sock);
    return sock;
}

/* ---- the timer -------------------------------------------------------------------- */

static void arm(sg_upstream_t *u, uint64_t at_ms)
{
    struct itimerspec its = {{0, 0}, {0, 0}};
    uint64_t now = sg_now_ms();
    uint64_t in_ms = at_ms > now ? at_ms - now : 0;

    if (u->armed_ms != 0 && u->armed_ms <= at_ms)
        return;
    its.it_value.tv_sec = (time_t)(in_ms / 1000);
    its.it_value.tv_nsec = (long)(in_ms % 1000) * 1000000 + 1; /* 0 would disarm */
    if (timerfd_settime(u->tfd, 0, &its, NULL) == 0)
        u->armed_ms = at_ms;
}

/* ---- a request's end ---------------------------------------------------------------- */

static void free_req(sg_upstream_req_t *r)
{
    sg_buf_free(&r->body);
    free(r->wire);
    free(r);
}

/* Takes r off everything it is on: its list, its connection (closed), its
 * pending "soon". */
static void detach(sg_upstream_req_t *r)
{
    if (h2o_linklist_is_linked(&r->link)) {
        h2o_linklist_unlink(&r->link);
        --r->u->in_flight;
    }
    if (h2o_timeout_is_linked(&r->soon))
        h2o_timeout_unlink(&r->soon);
    if (r->sock != NULL) {
        h2o_socket_read_stop(r->sock);
        h2o_socket_close(r->sock);
        r->sock = NULL;
    }
}

static void copy_value(char *dst, size_t dstlen, const char *p, size_t len)
{
    while (len != 0 && (*p == ' ' || *p == '\t')) {
        ++p;
        --len;
    }
    while (len != 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
        --len;
    if (len >= dstlen)
        len = dstlen - 1;
    memcpy(dst, p, len);
    dst[len] = '\0';
}

int sg_upstream_code_valid(const char *code)
{
    size_t i;
    for (i = 0; code[i] != '\0'; i++)
        if (i >= 47 || !((code[i] >= 'a' && code[i] <= 'z') || (code[i] >= '0' && code[i] <= '9') || code[i] == '_'))
            return 0;
    return i != 0;
}

/* An older proxy names an error's type only in its JSON body: the "code"
 * member of the top-level object, read by a JSON parser (text inside
 * "detail" is a string value, never a member). */
static void code_from_body(sg_upstream_req_t *r, const char *body, size_t len)
{
    json_tokener *tok;
    json_object *o, *v;

    if (r->code[0] != '\0' || len == 0 || strncasecmp(r->content_type, "application/json", 16) != 0)
        return;
    if ((tok = json_tokener_new()) == NULL)
        return;
    o = json_tokener_parse_ex(tok, body, (int)(len > INT32_MAX ? INT32_MAX : len));
    if (o != NULL && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, "code", &v) &&
        json_object_is_type(v, json_type_string) && json_object_get_string_len(v) < (int)sizeof(r->code)) {
        snprintf(r->code, sizeof(r->code), "%s", json_object_get_string(v));
        if (!sg_upstream_code_valid(r->code))
            r->code[0] = '\0';
    }
    json_object_put(o);
    json_tokener_free(tok);
}

/* Tells r's end (err NULL: the reply came whole) and frees r. Its
 * connection must be parked or closed (r->sock NULL) before. */
static void finish(sg_upstream_req_t *r, const char *err, int timed_out)
{
    sg_upstream_reply_t reply = {0};

    detach(r);
    r->state = REQ_FINISHING;
    reply.status = r->head_done ? r->status : 0;
    reply.content_type = r->content_type;
    reply.retry_after = r->retry_after;
    reply.usage = r->usage;
    reply.code = r->code;
    reply.body = "";
    reply.timed_out = timed_out;
    reply.err = err;
    if (err == NULL && r->on_data == NULL && r->body.base != NULL) {
        reply.body = r->body.base;
        reply.body_len = r->body.len;
    }
    /* a failed request has no usable reply, even if a status line came
     * (too large, cut short, timed out mid-body): callers test status 0 */
    if (reply.err != NULL)
        reply.status = 0;
    else if (reply.status >= 400)
        code_from_body(r, reply.body, reply.body_len);
    /* streaming: a reply without a body still gets its head first */
    if (r->on_data != NULL && !r->head_sent && reply.status != 0) {
        r->head_sent = 1;
        if (r->on_head != NULL)
            r->on_head(r->data, reply.status, r->content_type);
    }
    r->on_done(r->data, &reply);
    free_req(r);
}

static void fail(sg_upstream_req_t *r, const char *fmt, const char *detail)
{
    snprintf(r->err, sizeof(r->err), fmt, detail);
    finish(r, r->err, 0);
}

/* ---- the reply ---------------------------------------------------------------------- */

static int header_is(const struct phr_header *h, const char *name, size_t len)
{
    return h->name_len == len && strncasecmp(h->name, name, len) == 0;
}

static int value_has_token(const struct phr_header *h, const char *token)
{
    size_t tl = strlen(token);
    const char *p = h->value, *end = h->value + h->value_len;

    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            ++p;
        const char *q = p;
        while (q < end && *q != ',')
            ++q;
        const char *e = q;
        while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
            --e;
        if ((size_t)(e - p) == tl && strncasecmp(p, token, tl) == 0)
            return 1;
        p = q;
    }
    return 0;
}

/* The head at the start of in: 1 read (its bytes consumed), 0 more needed,
 * -1 malformed or too long (r->err says). An informational (1xx) head is
 * skipped: the caller asks again. */
static int read_head(sg_upstream_req_t *r, h2o_buffer_t **in, int *informational)
{
    struct phr_header headers[MAX_HEADERS];
    size_t num_headers = MAX_HEADERS, msg_len;
    const char *msg;
    int minor, status, have_length = 0, chunked = 0, close_conn = 0;
    size_t length = 0;

    int n = phr_parse_response((*in)->bytes, (*in)->size, &minor, &status, &msg, &msg_len, headers, &num_headers, 0);
    if (n == -2) {
        if ((*in)->size < MAX_HEAD_BYTES)
            return 0;
        snprintf(r->err, sizeof(r->err), "the request to the proxy failed (a reply head over %d bytes)",
                 MAX_HEAD_BYTES);
        return -1;
    }
    if (n < 0 || status < 100 || status > 999) {
        snprintf(r->err, sizeof(r->err), "the request to the proxy failed (a malformed reply head)");
        return -1;
    }
    r->received += (size_t)n;
    *informational = status < 200;
    if (*informational) {
        h2o_buffer_consume(in, (size_t)n);
        return 1;
    }
    r->status = status;
    for (size_t i = 0; i < num_headers; i++) {
        const struct phr_header *h = &headers[i];
        if (h->name == NULL)
            continue; /* a folded line */
        if (header_is(h, "x-sandgate-error", 16)) {
            copy_value(r->code, sizeof(r->code), h->value, h->value_len);
            if (!sg_upstream_code_valid(r->code))
                r->code[0] = '\0';
        } else if (header_is(h, "content-type", 12)) {
            copy_value(r->content_type, sizeof(r->content_type), h->value, h->value_len);
        } else if (header_is(h, "retry-after", 11)) {
            copy_value(r->retry_after, sizeof(r->retry_after), h->value, h->value_len);
        } else if (header_is(h, SG_USAGE_HDR_NAME, sizeof(SG_USAGE_HDR_NAME) - 1)) {
            copy_value(r->usage, sizeof(r->usage), h->value, h->value_len);
        } else if (header_is(h, "content-length", 14)) {
            char v[32];
            char *end;
            copy_value(v, sizeof(v), h->value, h->value_len);
            errno = 0;
            unsigned long long l = strtoull(v, &end, 10);
            if (v[0] < '0' || v[0] > '9' || *end != '\0' || errno != 0 || (have_length && l != length)) {
                snprintf(r->err, sizeof(r->err), "the request to the proxy failed (a bad Content-Length)");
                return -1;
            }
            have_length = 1;
            length = (size_t)l;
        } else if (header_is(h, "transfer-encoding", 17)) {
            chunked = value_has_token(h, "chunked");
        } else if (header_is(h, "connection", 10)) {
            close_conn |= value_has_token(h, "close");
        }
    }
    h2o_buffer_consume(in, (size_t)n);
    r->head_done = 1;
    r->keep_alive = minor >= 1 && !close_conn;
    if (r->is_head || status == 204 || status == 304) {
        r->body_mode = BODY_NONE;
    } else if (chunked) {
        r->body_mode = BODY_CHUNKED;
        /* to the blank line after the last chunk (and any trailers): the
         * connection then holds nothing of this reply */
        r->chunked.consume_trailer = 1;
    } else if (have_length) {
        r->body_mode = BODY_LENGTH;
        r->left = length;
    } else {
        r->body_mode = BODY_CLOSE;
        r->keep_alive = 0;
    }
    return 1;
}

/* Hands a piece of the body on: 0, or -1 when r is over (too large: told
 * and freed; cancelled from on_data: freed). */
static int deliver(sg_upstream_req_t *r, const char *p, size_t len)
{
    if (len == 0)
        return 0;
    if (r->on_data == NULL) {
        if (sg_buf_append(&r->body, p, len) != 0) {
            r->too_large = 1;
            finish(r, too_large_err, 0);
            return -1;
        }
        return 0;
    }
    r->in_cb = 1;
    r->on_data(r->data, p, len);
    r->in_cb = 0;
    if (r->state == REQ_DEAD) {
        free_req(r);
        return -1;
    }
    return 0;
}

/* The reply came whole: the connection parked (or closed), then on_done. */
static void complete(sg_upstream_req_t *r, int leftover)
{
    h2o_socket_t *sock = r->sock;

    r->sock = NULL;
    h2o_socket_read_stop(sock);
    if (r->keep_alive && r->written && !leftover) {
        park(r->u, sock);
    } else {
        h2o_socket_close(sock);
    }
    finish(r, NULL, 0);
}

/* Sends on_head when streaming: 0, or -1 when r was cancelled from it (freed). */
static int send_head(sg_upstream_req_t *r)
{
    if (r->on_data == NULL || r->head_sent)
        return 0;
    r->head_sent = 1;
    if (r->on_head == NULL)
        return 0;
    r->in_cb = 1;
    r->on_head(r->data, r->status, r->content_type);
    r->in_cb = 0;
    if (r->state == REQ_DEAD) {
        free_req(r);
        return -1;
    }
    return 0;
}

/* Hands on the n bytes at the head of in, then consumes used bytes of it:
 * collected straight from the socket's buffer; streamed, copied and
 * consumed first, as on_data may end the request and its connection. 0, or
 * -1 when r is over. */
static int pass_on(sg_upstream_req_t *r, h2o_buffer_t **in, size_t n, size_t used)
{
    if (r->on_data == NULL) {
        if (deliver(r, (*in)->bytes, n) != 0)
            return -1;
        h2o_buffer_consume(in, used);
        return 0;
    }
    char *copy = n != 0 ? memdup((*in)->bytes, n) : NULL;
    h2o_buffer_consume(in, used);
    int gone = deliver(r, copy, n);
    free(copy);
    return gone;
}

/* What is in the socket's buffer, read as far as it goes: 0 while r still
 * reads on its connection, 1 when r is over (told, or cancelled and freed). */
static int read_reply(sg_upstream_req_t *r)
{
    h2o_buffer_t **in = &r->sock->input;
    size_t n = 0;

    while (!r->head_done) {
        int informational = 0, rc = read_head(r, in, &informational);
        if (rc == 0)
            return 0;
        if (rc < 0) {
            finish(r, r->err, 0);
            return 1;
        }
        if (!informational && send_head(r) != 0)
            return 1;
    }
    switch (r->body_mode) {
    case BODY_NONE:
        complete(r, (*in)->size != 0);
        return 1;
    case BODY_LENGTH:
    case BODY_CLOSE:
        n = (*in)->size;
        if (r->body_mode == BODY_LENGTH && n > r->left)
            n = r->left;
        r->received += n;
        if (r->body_mode == BODY_LENGTH)
            r->left -= n;
        break;
    case BODY_CHUNKED: {
        size_t size = (*in)->size;
        if (size == 0)
            return 0;
        r->received += size;
        n = size;
        ssize_t rc = phr_decode_chunked(&r->chunked, (*in)->bytes, &n);
        if (rc == -1) {
            fail(r, "the request to the proxy failed (%s)", "a malformed chunked body");
            return 1;
        }
        /* the decoded bytes are moved to the buffer's head; past them, what
         * follows the last chunk (rc bytes) */
        if (pass_on(r, in, n, size) != 0)
            return 1;
        if (rc >= 0) {
            complete(r, rc > 0);
            return 1;
        }
        return 0;
    }
    }
    if (pass_on(r, in, n, n) != 0)
        return 1;
    if (r->body_mode == BODY_LENGTH && r->left == 0) {
        complete(r, r->sock->input->size != 0);
        return 1;
    }
    return 0;
}

/* The connection failed or ended: a reused one that failed before any of
 * the reply is retried once on a new one; a reply read to the end of the
 * connection is whole; anything else fails. */
static void conn_ended(sg_upstream_req_t *r, const char *err)
{
    if (r->reused && !r->retried && r->received == 0) {
        h2o_socket_read_stop(r->sock);
        h2o_socket_close(r->sock);
        r->sock = NULL;
        r->retried = 1;
        r->reused = 0;
        r->written = 0;
        r->addr_tries = 0;
        open_conn(r);
        return;
    }
    if (r->head_done && r->body_mode == BODY_CLOSE && err == h2o_socket_error_closed) {
        complete(r, 0);
        return;
    }
    fail(r, "the request to the proxy failed (%s)",
         err != h2o_socket_error_closed ? err
         : r->received == 0             ? "the connection closed with no reply"
                                        : "the connection closed in the middle of the reply");
}

static void on_reply_read(h2o_socket_t *sock, const char *err)
{
    sg_upstream_req_t *r = sock->data;
    sg_upstream_t *u = r->u;
    int over = 0;

    enter(u);
    if (sock->input->size != 0)
        over = read_reply(r);
    if (!over && err != NULL)
        conn_ended(r, err);
    leave(u);
}

/* Errors are the reading side's to find (the connection is gone both
 * ways); a connection is parked only once its request is out. */
static void on_written(h2o_socket_t *sock, const char *err)
{
    sg_upstream_req_t *r = sock->data;

    if (err == NULL)
        r->written = 1;
}

static void send_req(sg_upstream_req_t *r, h2o_socket_t *sock)
{
    h2o_iovec_t buf = h2o_iovec_init(r->wire, r->wire_len);

    r->sock = sock;
    sock->data = r;
    h2o_socket_write(sock, &buf, 1, on_written);
    h2o_socket_read_start(sock, on_reply_read);
}

/* ---- connections -------------------------------------------------------------------- */

static void on_connected(h2o_socket_t *sock, const char *err)
{
    sg_upstream_req_t *r = sock->data;
    sg_upstream_t *u = r->u;

    enter(u);
    r->sock = NULL;
    if (err != NULL) {
        h2o_socket_close(sock);
        if (++r->addr_tries < u->naddrs) {
            open_conn(r); /* the host's next address */
        } else {
            if (!u->numeric)
                u->naddrs = 0; /* the name is looked up again */
            fail(r, "the proxy does not answer (%s)", err);
        }
    } else {
        ++u->connects;
        u->addr_ok = r->addr_i;
        send_req(r, sock);
    }
    leave(u);
}

static void on_soon(h2o_timeout_entry_t *e)
{
    sg_upstream_req_t *r = H2O_STRUCT_FROM_MEMBER(sg_upstream_req_t, soon, e);
    sg_upstream_t *u = r->u;

    enter(u);
    finish(r, r->err, 0);
    leave(u);
}

static void fail_soon(sg_upstream_req_t *r, const char *fmt, const char *detail)
{
    snprintf(r->err, sizeof(r->err), fmt, detail);
    sg_loop_soon(r->u->loop, &r->soon);
}

/* res's addresses as the host's (up to MAX_ADDRS): how many. */
static size_t take_addresses(sg_upstream_t *u, const struct addrinfo *res)
{
    size_t n = 0;
    for (const struct addrinfo *a = res; a != NULL && n < MAX_ADDRS; a = a->ai_next) {
        if (a->ai_addrlen > sizeof(u->addrs[0]))
            continue;
        memcpy(&u->addrs[n], a->ai_addr, a->ai_addrlen);
        u->addr_lens[n++] = a->ai_addrlen;
    }
    if (n != 0) {
        u->naddrs = n;
        u->addr_ok = 0;
    }
    return n;
}

/* The host as a numeric address (never looked up): 1 if it is one. */
static int numeric_address(sg_upstream_t *u)
{
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV | AI_NUMERICHOST};
    struct addrinfo *res = NULL;
    char port[8];

    snprintf(port, sizeof(port), "%u", u->port);
    if (getaddrinfo(u->host, port, &hints, &res) != 0 || res == NULL)
        return 0;
    size_t n = take_addresses(u, res);
    freeaddrinfo(res);
    return n != 0;
}

static void lookup_free(lookup_t *l)
{
    if (l->res != NULL)
        freeaddrinfo(l->res);
    if (l->wfd >= 0)
        close(l->wfd);
    pthread_mutex_destroy(&l->mu);
    free(l->host);
    free(l);
}

static void *lookup_main(void *arg)
{
    lookup_t *l = arg;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = resolver(l->host, l->port, &hints, &res);

    pthread_mutex_lock(&l->mu);
    l->rc = rc;
    l->res = res;
    if (l->orphaned) {
        pthread_mutex_unlock(&l->mu);
        lookup_free(l);
        return NULL;
    }
    ssize_t w;
    do
        w = write(l->wfd, "x", 1);
    while (w < 0 && errno == EINTR);
    l->done = 1;
    pthread_mutex_unlock(&l->mu); /* the loop's from here on */
    return NULL;
}

/* The lookup given up (the upstream is going): freed here if its thread is
 * done with it, else by the thread. */
static void lookup_abandon(sg_upstream_t *u)
{
    lookup_t *l = u->lookup;
    if (l == NULL)
        return;
    u->lookup = NULL;
    h2o_socket_read_stop(u->lookup_sock);
    h2o_socket_close(u->lookup_sock);
    u->lookup_sock = NULL;
    pthread_mutex_lock(&l->mu);
    int done = l->done;
    l->orphaned = 1;
    pthread_mutex_unlock(&l->mu);
    if (done)
        lookup_free(l);
}

/* The lookup's end, on the loop: its addresses taken (or, failed, the ones
 * the host had kept); the requests that waited connect or fail. */
static void on_lookup_done(h2o_socket_t *sock, const char *err)
{
    sg_upstream_t *u = sock->data;
    lookup_t *l = u->lookup;
    char why[256] = "";

    (void)err;
    pthread_mutex_lock(&l->mu);
    int done = l->done;
    pthread_mutex_unlock(&l->mu);
    if (!done)
        return; /* cannot happen: the byte comes with done */
    u->lookup = NULL;
    h2o_socket_read_stop(sock);
    h2o_socket_close(sock);
    u->lookup_sock = NULL;
    if (l->rc != 0 || l->res == NULL || take_addresses(u, l->res) == 0)
        snprintf(why, sizeof(why), "cannot resolve %s: %s", u->host, l->rc != 0 ? gai_strerror(l->rc) : "no address");
    lookup_free(l);
    /* a failure keeps the addresses the host had, if any, until the next
     * lookup: the proxy may well still be there */
    u->addr_until_ms = sg_now_ms() + RESOLVE_KEEP_MS;
    if (why[0] != '\0')
        sg_warn("upstream: %s%s", why, u->naddrs != 0 ? " (the addresses found before are kept)" : "");

    enter(u);
    /* neither open_conn nor fail_soon calls back: the list holds still */
    for (h2o_linklist_t *n = u->active.next; n != &u->active; n = n->next) {
        sg_upstream_req_t *r = H2O_STRUCT_FROM_MEMBER(sg_upstream_req_t, link, n);
        if (!r->awaiting)
            continue;
        r->awaiting = 0;
        if (u->naddrs != 0)
            open_conn(r);
        else
            fail_soon(r, "the proxy does not answer (%s)", why);
    }
    leave(u);
}

/* Starts a lookup of the host: 0, or -1 (why says why) when no thread or
 * pipe could be had. */
static int lookup_start(sg_upstream_t *u, char *why, size_t whylen)
{
    int fds[2];
    pthread_attr_t attr;
    pthread_t tid;

    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(why, whylen, "cannot look %s up: %s", u->host, strerror(errno));
        return -1;
    }
    lookup_t *l = sg_xcalloc(1, sizeof(*l));
    pthread_mutex_init(&l->mu, NULL);
    l->host = sg_xstrdup(u->host);
    snprintf(l->port, sizeof(l->port), "%u", u->port);
    l->wfd = fds[1];
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* the thread takes no signal: a SIGTERM is the loop's to see */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&tid, &attr, lookup_main, l);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        close(fds[0]);
        lookup_free(l);
        snprintf(why, whylen, "cannot look %s up: %s", u->host, strerror(rc));
        return -1;
    }
    u->lookup = l;
    u->lookup_sock = h2o_evloop_socket_create(u->loop, fds[0], H2O_SOCKET_FLAG_DONT_READ);
    u->lookup_sock->data = u;
    h2o_socket_read_start(u->lookup_sock, on_lookup_done);
    return 0;
}

/* A new connection for r, to the host's addresses in turn from the last
 * that connected; a failure is told at the end of the turn. A host name
 * whose addresses are old is looked up again meanwhile; r waits for it
 * only when there is no address at all. */
static void open_conn(sg_upstream_req_t *r)
{
    sg_upstream_t *u = r->u;
    char why[256];
    h2o_socket_t *sock = NULL;

    if (r->addr_tries == 0 && !u->numeric) {
        int fresh = u->naddrs != 0 && sg_now_ms() < u->addr_until_ms;
        if (!fresh && u->lookup == NULL && lookup_start(u, why, sizeof(why)) != 0 && u->naddrs == 0) {
            fail_soon(r, "the proxy does not answer (%s)", why);
            return;
        }
        if (u->naddrs == 0) {
            r->awaiting = 1;
            return;
        }
    }
    for (; r->addr_tries < u->naddrs; ++r->addr_tries) {
        r->addr_i = (u->addr_ok + r->addr_tries) % u->naddrs;
        if ((sock = h2o_socket_connect(u->loop, (struct sockaddr *)&u->addrs[r->addr_i], u->addr_lens[r->addr_i],
                                       on_connected)) != NULL)
            break;
        snprintf(why, sizeof(why), "%s", strerror(errno));
    }
    if (sock == NULL) {
        fail_soon(r, "the proxy does not answer (%s)", why);
        return;
    }
    sock->data = r;
    r->sock = sock;
}

/* ---- the loop side ---------------------------------------------------------------- */

static void on_timer_ready(h2o_socket_t *sock, const char *err)
{
    sg_upstream_t *u = sock->data;
    uint64_t expirations, next = 0;
    int again = 1;

    (void)err;
    if (read(u->tfd, &expirations, sizeof(expirations)) != (ssize_t)sizeof(expirations))
        return;
    enter(u);
    u->armed_ms = 0;
    /* one at a time: on_done may end or start others */
    while (again && !u->destroying) {
        uint64_t now = sg_now_ms();
        again = 0;
        next = 0;
        for (h2o_linklist_t *l = u->active.next; l != &u->active; l = l->next) {
            sg_upstream_req_t *r = H2O_STRUCT_FROM_MEMBER(sg_upstream_req_t, link, l);
            if (r->deadline_ms <= now) {
                snprintf(r->err, sizeof(r->err), "the proxy did not reply within %ld ms", r->timeout_ms);
                finish(r, r->err, 1);
                again = 1;
                break;
            }
            if (next == 0 || r->deadline_ms < next)
                next = r->deadline_ms;
        }
    }
    if (!u->destroying && next != 0)
        arm(u, next);
    leave(u);
}

static void free_upstream(sg_upstream_t *u)
{
    while (!h2o_linklist_is_empty(&u->active)) {
        sg_upstream_req_t *r = H2O_STRUCT_FROM_MEMBER(sg_upstream_req_t, link, u->active.next);
        detach(r);
        free_req(r);
    }
    while (!h2o_linklist_is_empty(&u->idle))
        drop_idle(H2O_STRUCT_FROM_MEMBER(idle_conn_t, link, u->idle.next));
    lookup_abandon(u);
    if (u->timer_sock != NULL) {
        h2o_socket_read_stop(u->timer_sock);
        h2o_socket_close(u->timer_sock);
    } else if (u->tfd >= 0) {
        close(u->tfd);
    }
    free(u->host);
    free(u->authority);
    free(u->prefix);
    free(u);
}

/* ---- public ----------------------------------------------------------------- */

int sg_upstream_escape(const char *s, char *out, size_t outlen)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;

    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        int plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '.' || c == '_' || c == '~';
        if (n + (plain ? 1 : 3) >= outlen)
            return -1;
        if (plain) {
            out[n++] = (char)c;
        } else {
            out[n++] = '%';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        }
    }
    if (outlen == 0)
        return -1;
    out[n] = '\0';
    return 0;
}

sg_upstream_t *sg_upstream_create(h2o_loop_t *loop, const char *base_url, size_t max_reply_bytes)
{
    h2o_url_t url;
    sg_upstream_t *u;

    if (strncasecmp(base_url, "http://", 7) != 0 || h2o_url_parse(base_url, SIZE_MAX, &url) != 0)
        return NULL;
    u = sg_xcalloc(1, sizeof(*u));
    u->loop = loop;
    u->max_reply_bytes = max_reply_bytes;
    u->tfd = -1;
    h2o_linklist_init_anchor(&u->active);
    h2o_linklist_init_anchor(&u->idle);
    /* an IPv6 address without its brackets */
    int bracketed = url.host.len >= 2 && url.host.base[0] == '[' && url.host.base[url.host.len - 1] == ']';
    u->host = bracketed ? sg_xstrndup(url.host.base + 1, url.host.len - 2) : sg_xstrndup(url.host.base, url.host.len);
    u->authority = sg_xstrndup(url.authority.base, url.authority.len);
    /* h2o gives "/" for no path: the request's own path follows */
    u->prefix = sg_xstrndup(url.path.base, url.path.len > 1 ? url.path.len : 0);
    u->port = h2o_url_get_port(&url);

    /* an address kept for good; a name is looked up when a connection opens */
    if (h2o_url_host_is_unix_path(url.host)) {
        struct sockaddr_un *sa = (struct sockaddr_un *)&u->addrs[0];
        if (h2o_url_host_to_sun(url.host, sa) != NULL) {
            free_upstream(u);
            return NULL;
        }
        u->addr_lens[0] = sizeof(*sa);
        u->naddrs = 1;
        u->numeric = 1;
        free(u->authority); /* the Host header: the proxy has no name here */
        u->authority = sg_xstrdup("localhost");
    } else {
        u->numeric = numeric_address(u);
    }

    if ((u->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0) {
        free_upstream(u);
        return NULL;
    }
    u->timer_sock = h2o_evloop_socket_create(loop, u->tfd, H2O_SOCKET_FLAG_DONT_READ);
    u->timer_sock->data = u;
    h2o_socket_read_start(u->timer_sock, on_timer_ready);
    return u;
}

void sg_upstream_destroy(sg_upstream_t *u)
{
    if (u == NULL)
        return;
    if (u->busy == 0) {
        free_upstream(u);
        return;
    }
    /* inside one of our callbacks: no more user callbacks from here on, the
     * rest goes when the outermost callback returns */
    if (u->destroying)
        return;
    u->destroying = 1;
    while (!h2o_linklist_is_empty(&u->active))
        sg_upstream_cancel(H2O_STRUCT_FROM_MEMBER(sg_upstream_req_t, link, u->active.next));
}

size_t sg_upstream_in_flight(sg_upstream_t *u)
{
    return u->in_flight;
}

uint64_t sg_upstream_connections_opened(sg_upstream_t *u)
{
    return u->connects;
}

static int is_method(const char *method, const char *m)
{
    return strcasecmp(method, m) == 0;
}

static int append_str(sg_buf_t *b, const char *str)
{
    return sg_buf_append(b, str, strlen(str));
}

/* A header line of the caller's: "Name: value", one line, nothing that
 * would end the head. */
static int line_ok(const char *line)
{
    return strchr(line, ':') != NULL && strpbrk(line, "\r\n") == NULL;
}

sg_upstream_req_t *sg_upstream_start(sg_upstream_t *u, const char *method, const char *path, const char *body,
                                     size_t body_len, const char *content_type, long timeout_ms,
                                     sg_upstream_head_cb on_head, sg_upstream_data_cb on_data,
                                     sg_upstream_done_cb on_done, void *data)
{
    return sg_upstream_start_with_headers(u, method, path, NULL, body, body_len, content_type, timeout_ms, on_head,
                                          on_data, on_done, data);
}

sg_upstream_req_t *sg_upstream_start_with_headers(sg_upstream_t *u, const char *method, const char *path,
                                                  const char *const *headers, const char *body, size_t body_len,
                                                  const char *content_type, long timeout_ms,
                                                  sg_upstream_head_cb on_head, sg_upstream_data_cb on_data,
                                                  sg_upstream_done_cb on_done, void *data)
{
    sg_upstream_req_t *r;
    sg_buf_t w;
    int with_length;

    if (u->destroying || on_done == NULL || strpbrk(method, " \r\n") != NULL || strpbrk(path, " \r\n") != NULL ||
        (content_type != NULL && strpbrk(content_type, "\r\n") != NULL))
        return NULL;
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++)
        if (!line_ok(headers[i]))
            return NULL;

    /* POST semantics (Content-Length, even 0) under every method but a GET
     * or DELETE without a body, and HEAD */
    with_length =
        !is_method(method, "HEAD") && (body != NULL || !(is_method(method, "GET") || is_method(method, "DELETE")));
    /* pieces appended as they are: a path (a file's query) may be a few
     * kilobytes long */
    sg_buf_init(&w, SIZE_MAX);
    if (append_str(&w, method) != 0 || append_str(&w, " ") != 0 || append_str(&w, u->prefix) != 0 ||
        append_str(&w, path) != 0 || append_str(&w, " HTTP/1.1\r\nHost: ") != 0 || append_str(&w, u->authority) != 0 ||
        append_str(&w, "\r\n") != 0)
        goto Error;
    if (content_type != NULL &&
        (append_str(&w, "Content-Type: ") != 0 || append_str(&w, content_type) != 0 || append_str(&w, "\r\n") != 0))
        goto Error;
    if (with_length && sg_buf_appendf(&w, "Content-Length: %zu\r\n", body != NULL ? body_len : 0) != 0)
        goto Error;
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++)
        if (append_str(&w, headers[i]) != 0 || append_str(&w, "\r\n") != 0)
            goto Error;
    if (append_str(&w, "\r\n") != 0 || (with_length && body != NULL && sg_buf_append(&w, body, body_len) != 0))
        goto Error;

    r = sg_xcalloc(1, sizeof(*r));
    r->u = u;
    r->on_head = on_head;
    r->on_data = on_data;
    r->on_done = on_done;
    r->data = data;
    r->soon.cb = on_soon;
    r->timeout_ms = timeout_ms > 0 ? timeout_ms : DEFAULT_TIMEOUT_MS;
    /* sg_now_ms is whole milliseconds: one more, never early */
    r->deadline_ms = sg_now_ms() + (uint64_t)r->timeout_ms + 1;
    r->is_head = is_method(method, "HEAD");
    r->wire = w.base;
    r->wire_len = w.len;
    sg_buf_init(&r->body, u->max_reply_bytes);
    h2o_linklist_insert(&u->active, &r->link);
    ++u->in_flight;
    arm(u, r->deadline_ms);

    h2o_socket_t *sock = take_idle(u);
    if (sock != NULL) {
        r->reused = 1;
        send_req(r, sock);
    } else {
        open_conn(r);
    }
    return r;

Error:
    sg_buf_free(&w);
    return NULL;
}

void sg_upstream_cancel(sg_upstream_req_t *r)
{
    if (r == NULL || r->state == REQ_FINISHING || r->state == REQ_DEAD)
        return;
    detach(r);
    if (r->in_cb) {
        /* from its own on_head / on_data: freed once that returns */
        r->state = REQ_DEAD;
        return;
    }
    free_req(r);
}

void sg_upstream_set_resolver(sg_upstream_resolver_fn fn)
{
    resolver = fn != NULL ? fn : getaddrinfo;
}
