/*
 * upstream.c — libcurl's multi-socket API driven by the gateway's h2o loop.
 *
 * curl tells us which sockets it wants watched (on_curl_socket) and when it
 * wants to be woken up (on_curl_timer). The sockets go into a private epoll
 * set, the timer is a timerfd; both fds are wrapped as h2o sockets with
 * H2O_SOCKET_FLAG_DONT_READ, so h2o only tells us they are readable and we
 * hand the events to curl_multi_socket_action. Nothing here blocks.
 *
 * The timer is armed only when curl wants waking earlier than it already
 * is: a wake-up with nothing due costs curl one look at its timers (it
 * then asks for the next), where each re-arm costs a system call, and
 * curl asks for one or two with every request. "Now" (0 ms) runs at the
 * end of the loop's turn (sg_loop_soon), without the timerfd.
 *
 * A socket curl stops watching (its connection idle in curl's cache) stays
 * in the epoll set, parked: the next request on that connection costs one
 * epoll_ctl, not three. An event on a parked socket (the proxy closed the
 * idle connection) takes it out of the set; curl is not told, and finds
 * the connection dead when it next looks.
 *
 * Reentrancy. curl forbids most multi calls from inside its own callbacks
 * (CURLM_RECURSIVE_API_CALL), and the owner of a callback must not free the
 * object that called it. So:
 *  - sg_upstream_start never calls curl in a way that runs a user callback;
 *    curl's "time out now" (0 ms) runs at the end of the loop's turn.
 *  - a request cancelled while curl is inside a callback (on_head / on_data
 *    run from curl's write callback) is only marked; it is removed from the
 *    multi handle once curl_multi_socket_action returns.
 *  - a request started from inside such a callback is added to the multi
 *    handle once curl_multi_socket_action returns.
 *  - sg_upstream_destroy from inside any callback cancels everything at once
 *    and frees the rest when the outermost loop callback returns.
 */
#include "upstream.h"
#include "buf.h"
#include "http.h"
#include "util.h"

#include <curl/curl.h>
#include <json-c/json.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_MS 30000L
#define MAX_CONNECTS 256L
#define EVENTS_PER_WAIT 64

struct sg_upstream {
    h2o_loop_t *loop;
    char *base_url;
    size_t max_reply_bytes;
    CURLM *multi;
    int epfd;
    int tfd;
    h2o_socket_t *ep_sock;    /* owns epfd once created */
    h2o_socket_t *timer_sock; /* owns tfd once created */
    uint64_t armed_ms;        /* when tfd fires (sg_now_ms), 0: disarmed */
    unsigned char *fd_state;  /* FD_* by socket number, fd_cap of them */
    size_t fd_cap;
    h2o_timeout_entry_t now; /* linked: curl's "now", at the end of this turn */
    int in_now;              /* inside on_now: a "now" asked again waits for the next turn */
    h2o_linklist_t active;   /* requests added to the multi handle */
    h2o_linklist_t to_add;   /* started from inside a curl callback, added later */
    h2o_linklist_t zombies;  /* cancelled from inside a curl callback, removed later */
    size_t in_flight;
    uint64_t connects; /* connections opened, over all finished requests */
    int in_curl;       /* inside curl_multi_socket_action: curl callbacks may run */
    int busy;          /* depth of our h2o callbacks on the stack */
    int destroying;    /* sg_upstream_destroy was called while busy */
};

enum {
    FD_OUT,     /* not in the epoll set */
    FD_WATCHED, /* in it, for curl */
    FD_PARKED,  /* in it, curl does not watch it (see the top) */
};

enum {
    REQ_TO_ADD,    /* on u->to_add */
    REQ_ACTIVE,    /* on u->active, in the multi handle */
    REQ_ZOMBIE,    /* on u->zombies, in the multi handle, no more callbacks */
    REQ_FINISHING, /* on no list, on_done is running */
};

struct sg_upstream_req {
    sg_upstream_t *u;
    h2o_linklist_t link;
    int state;
    CURL *easy;
    struct curl_slist *headers;
    sg_upstream_head_cb on_head;
    sg_upstream_data_cb on_data;
    sg_upstream_done_cb on_done;
    void *data;
    long timeout_ms;
    sg_buf_t body;
    long status; /* from the last status line seen */
    char content_type[256];
    char retry_after[64];
    char code[48];
    unsigned head_sent : 1;
    unsigned too_large : 1;
    char curl_err[CURL_ERROR_SIZE];
    char err[CURL_ERROR_SIZE + 128];
};

static const char *too_large_err = "the proxy's reply is too large";

static int on_curl_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp);
static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp);
static void on_epoll_ready(h2o_socket_t *sock, const char *err);
static void on_timer_ready(h2o_socket_t *sock, const char *err);

/* ---- per request ------------------------------------------------------------ */

static void free_req(sg_upstream_req_t *r)
{
    if (r->easy != NULL) {
        long n = 0;
        if (curl_easy_getinfo(r->easy, CURLINFO_NUM_CONNECTS, &n) == CURLE_OK && n > 0)
            r->u->connects += (uint64_t)n;
        curl_easy_cleanup(r->easy);
    }
    curl_slist_free_all(r->headers);
    sg_buf_free(&r->body);
    free(r);
}

/* Removes r from whatever list and from the multi handle, and frees it. Not
 * to be called while curl is inside a callback (see cancel_req). */
static void discard_req(sg_upstream_req_t *r)
{
    sg_upstream_t *u = r->u;

    if (h2o_linklist_is_linked(&r->link))
        h2o_linklist_unlink(&r->link);
    if (r->state == REQ_ACTIVE || r->state == REQ_ZOMBIE)
        curl_multi_remove_handle(u->multi, r->easy);
    free_req(r);
}

static void copy_header_value(char *dst, size_t dstlen, const char *p, size_t len)
{
    while (len != 0 && (*p == ' ' || *p == '\t')) {
        ++p;
        --len;
    }
    while (len != 0 && (p[len - 1] == '\r' || p[len - 1] == '\n' || p[len - 1] == ' ' || p[len - 1] == '\t'))
        --len;
    if (len >= dstlen)
        len = dstlen - 1;
    memcpy(dst, p, len);
    dst[len] = '\0';
}

static int header_is(const char *line, size_t len, const char *name, size_t namelen)
{
    return len > namelen && line[namelen] == ':' && strncasecmp(line, name, namelen) == 0;
}

/* One header line at a time, the status line included. A new status line
 * (after a 1xx reply) starts over. */
static size_t on_curl_header(char *line, size_t size, size_t nitems, void *userp)
{
    sg_upstream_req_t *r = userp;
    size_t len = size * nitems;

    if (r->state != REQ_ACTIVE)
        return 0;
    if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        const char *sp = memchr(line, ' ', len);
        r->status = 0;
        if (sp != NULL && (size_t)(line + len - sp) > 3 && sp[1] >= '1' && sp[1] <= '9')
            r->status = (sp[1] - '0') * 100 + (sp[2] - '0') * 10 + (sp[3] - '0');
        r->content_type[0] = '\0';
        r->retry_after[0] = '\0';
        r->code[0] = '\0';
    } else if (header_is(line, len, "x-sandgate-error", 16)) {
        copy_header_value(r->code, sizeof(r->code), line + 17, len - 17);
        if (!sg_upstream_code_valid(r->code))
            r->code[0] = '\0';
    } else if (header_is(line, len, "content-type", 12)) {
        copy_header_value(r->content_type, sizeof(r->content_type), line + 13, len - 13);
    } else if (header_is(line, len, "retry-after", 11)) {
        copy_header_value(r->retry_after, sizeof(r->retry_after), line + 12, len - 12);
    }
    return len;
}

static long reply_status(sg_upstream_req_t *r)
{
    long code = 0;

    if (curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code) != CURLE_OK || code == 0)
        code = r->status;
    return code;
}

static size_t on_curl_body(char *p, size_t size, size_t nmemb, void *userp)
{
    sg_upstream_req_t *r = userp;
    size_t len = size * nmemb;

    if (r->state != REQ_ACTIVE)
        return 0; /* cancelled from a callback: stop the transfer */
    if (r->on_data == NULL) {
        if (sg_buf_append(&r->body, p, len) != 0) {
            r->too_large = 1;
            return 0;
        }
        return len;
    }
    if (!r->head_sent) {
        r->head_sent = 1;
        if (r->on_head != NULL)
            r->on_head(r->data, reply_status(r), r->content_type);
        if (r->state != REQ_ACTIVE)
            return 0;
    }
    if (len != 0)
        r->on_data(r->data, p, len);
    return r->state == REQ_ACTIVE ? len : 0;
}

static int add_to_multi(sg_upstream_req_t *r)
{
    sg_upstream_t *u = r->u;

    if (curl_multi_add_handle(u->multi, r->easy) != CURLM_OK)
        return -1;
    r->state = REQ_ACTIVE;
    h2o_linklist_insert(&u->active, &r->link);
    return 0;
}

/* ---- finishing -------------------------------------------------------------- */

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

static void finish_req(sg_upstream_req_t *r, CURLcode result)
{
    sg_upstream_t *u = r->u;
    sg_upstream_reply_t reply = {0};
    const char *detail = r->curl_err[0] != '\0' ? r->curl_err : curl_easy_strerror(result);

    h2o_linklist_unlink(&r->link);
    curl_multi_remove_handle(u->multi, r->easy);
    r->state = REQ_FINISHING;
    --u->in_flight;

    reply.status = reply_status(r);
    reply.content_type = r->content_type;
    reply.retry_after = r->retry_after;
    reply.code = r->code;
    reply.body = "";
    if (r->too_large) {
        reply.err = too_large_err;
    } else if (result == CURLE_OPERATION_TIMEDOUT) {
        reply.timed_out = 1;
        snprintf(r->err, sizeof(r->err), "the proxy did not reply within %ld ms", r->timeout_ms);
        reply.err = r->err;
    } else if (result == CURLE_COULDNT_CONNECT || result == CURLE_COULDNT_RESOLVE_HOST) {
        snprintf(r->err, sizeof(r->err), "the proxy does not answer (%s)", detail);
        reply.err = r->err;
    } else if (result != CURLE_OK) {
        snprintf(r->err, sizeof(r->err), "the request to the proxy failed (%s)", detail);
        reply.err = r->err;
    } else if (r->on_data == NULL && r->body.base != NULL) {
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
    if (r->on_data != NULL && !r->head_sent && reply.status != 0 && reply.err == NULL) {
        r->head_sent = 1;
        if (r->on_head != NULL)
            r->on_head(r->data, reply.status, r->content_type);
    }
    r->on_done(r->data, &reply);
    free_req(r);
}

static void reap_zombies(sg_upstream_t *u)
{
    while (!h2o_linklist_is_empty(&u->zombies))
        discard_req(H2O_STRUCT_FROM_MEMBER(sg_upstream_req_t, link, u->zombies.next));
}

static void add_deferred(sg_upstream_t *u)
{
    while (!h2o_linklist_is_empty(&u->to_add)) {
        sg_upstream_req_t *r = H2O_STRUCT_FROM_MEMBER(sg_upstream_req_t, link, u->to_add.next);
        h2o_linklist_unlink(&r->link);
        if (add_to_multi(r) != 0) {
            /* start already returned a handle: the caller expects on_done */
            sg_upstream_reply_t reply = {.err = "the request to the proxy could not be started",
                                         .body = "",
                                         .content_type = "",
                                         .retry_after = "",
                                         .code = ""};
            r->state = REQ_FINISHING;
            --u->in_flight;
            r->on_done(r->data, &reply);
            free_req(r);
            if (u->destroying)
                return;
        }
    }
}

static void read_done(sg_upstream_t *u)
{
    CURLMsg *msg;
    int left;

    while (!u->destroying && (msg = curl_multi_info_read(u->multi, &left)) != NULL) {
        sg_upstream_req_t *r = NULL;
        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        if (r == NULL || r->state != REQ_ACTIVE)
            continue;
        finish_req(r, msg->data.result);
    }
}

/* Hands one event to curl, then settles everything that happened meanwhile. */
static void drive(sg_upstream_t *u, curl_socket_t s, int ev_bitmask)
{
    int running;

    u->in_curl = 1;
    curl_multi_socket_action(u->multi, s, ev_bitmask, &running);
    u->in_curl = 0;
    reap_zombies(u);
    if (!u->destroying)
        add_deferred(u);
    if (!u->destroying)
        read_done(u);
}

/* ---- the loop side ---------------------------------------------------------- */

static void free_upstream(sg_upstream_t *u)
{
    while (!h2o_linklist_is_empty(&u->active))
        discard_req(H2O_STRUCT_FROM_MEMBER(sg_upstream_req_t, link, u->active.next));
    while (!h2o_linklist_is_empty(&u->to_add))
        discard_req(H2O_STRUCT_FROM_MEMBER(sg_upstream_req_t, link, u->to_add.next));
    reap_zombies(u);
    if (u->multi != NULL)
        curl_multi_cleanup(u->multi); /* closes cached connections: socket callbacks still work */
    if (h2o_timeout_is_linked(&u->now))
        h2o_timeout_unlink(&u->now);
    if (u->ep_sock != NULL) {
        h2o_socket_read_stop(u->ep_sock);
        h2o_socket_close(u->ep_sock);
    } else if (u->epfd >= 0) {
        close(u->epfd);
    }
    if (u->timer_sock != NULL) {
        h2o_socket_read_stop(u->timer_sock);
        h2o_socket_close(u->timer_sock);
    } else if (u->tfd >= 0) {
        close(u->tfd);
    }
    free(u->base_url);
    free(u->fd_state);
    free(u);
    curl_global_cleanup();
}

static void leave(sg_upstream_t *u)
{
    if (--u->busy == 0 && u->destroying)
        free_upstream(u);
}

static void on_epoll_ready(h2o_socket_t *sock, const char *err)
{
    sg_upstream_t *u = sock->data;
    struct epoll_event events[EVENTS_PER_WAIT];
    int n;

    ++u->busy;
    n = epoll_wait(u->epfd, events, EVENTS_PER_WAIT, 0);
    for (int i = 0; i < n && !u->destroying; ++i) {
        int ev = 0, fd = events[i].data.fd;
        if ((size_t)fd < u->fd_cap && u->fd_state[fd] == FD_PARKED) {
            epoll_ctl(u->epfd, EPOLL_CTL_DEL, fd, NULL);
            u->fd_state[fd] = FD_OUT;
            continue;
        }
        if (events[i].events & EPOLLIN)
            ev |= CURL_CSELECT_IN;
        if (events[i].events & EPOLLOUT)
            ev |= CURL_CSELECT_OUT;
        if (events[i].events & (EPOLLERR | EPOLLHUP))
            ev |= CURL_CSELECT_ERR;
        drive(u, events[i].data.fd, ev);
    }
    /* more than EVENTS_PER_WAIT ready: the set stays readable (level
     * triggered), h2o calls again on its next turn */
    leave(u);
}

static void on_timer_ready(h2o_socket_t *sock, const char *err)
{
    sg_upstream_t *u = sock->data;
    uint64_t expirations;

    ++u->busy;
    /* read first: curl may re-arm the timer during the action */
    if (read(u->tfd, &expirations, sizeof(expirations)) == (ssize_t)sizeof(expirations)) {
        u->armed_ms = 0;
        drive(u, CURL_SOCKET_TIMEOUT, 0);
    }
    leave(u);
}

static void on_now(h2o_timeout_entry_t *e)
{
    sg_upstream_t *u = H2O_STRUCT_FROM_MEMBER(sg_upstream_t, now, e);

    ++u->busy;
    u->in_now = 1;
    drive(u, CURL_SOCKET_TIMEOUT, 0);
    u->in_now = 0;
    leave(u);
}

static int on_curl_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    sg_upstream_t *u = userp;
    struct epoll_event ev = {0};
    int op;

    if (s < 0)
        return -1;
    if ((size_t)s >= u->fd_cap) {
        size_t cap = u->fd_cap != 0 ? u->fd_cap : 64;
        while (cap <= (size_t)s)
            cap *= 2;
        u->fd_state = sg_xrealloc(u->fd_state, cap);
        memset(u->fd_state + u->fd_cap, FD_OUT, cap - u->fd_cap);
        u->fd_cap = cap;
    }
    if (what == CURL_POLL_REMOVE) {
        if (u->fd_state[s] == FD_WATCHED)
            u->fd_state[s] = FD_PARKED;
        return 0;
    }
    if (what & CURL_POLL_IN)
        ev.events |= EPOLLIN;
    if (what & CURL_POLL_OUT)
        ev.events |= EPOLLOUT;
    ev.data.fd = s;
    /* a parked socket may have been closed since (and the set forgot it),
     * its number taken by a new one: the other operation then */
    op = u->fd_state[s] != FD_OUT ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(u->epfd, op, s, &ev) != 0) {
        op = op == EPOLL_CTL_MOD ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
        if ((errno != ENOENT && errno != EEXIST) || epoll_ctl(u->epfd, op, s, &ev) != 0)
            return -1;
    }
    u->fd_state[s] = FD_WATCHED;
    return 0;
}

/* Never acts by itself: even "now" (0) waits for the end of the loop's
 * turn, so no user callback can run from inside curl_multi_add_handle or
 * this callback. A later wake-up than the one armed, or none (-1), leaves
 * the timer as it is (see the top). */
static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    sg_upstream_t *u = userp;
    struct itimerspec its = {{0, 0}, {0, 0}};
    uint64_t at;

    if (timeout_ms < 0)
        return 0;
    if (timeout_ms == 0 && u->in_now) {
        /* asked again from the "now" being run: the timerfd, for 1 ns, so
         * that the loop's other events come first (the end of the turn
         * would run it again at once) */
        its.it_value.tv_nsec = 1;
        if (timerfd_settime(u->tfd, 0, &its, NULL) != 0)
            return -1;
        u->armed_ms = sg_now_ms();
        return 0;
    }
    if (timeout_ms == 0) {
        if (!h2o_timeout_is_linked(&u->now)) {
            u->now.cb = on_now;
            sg_loop_soon(u->loop, &u->now);
        }
        return 0;
    }
    at = sg_now_ms() + (uint64_t)timeout_ms;
    if (u->armed_ms != 0 && u->armed_ms <= at)
        return 0;
    its.it_value.tv_sec = timeout_ms / 1000;
    its.it_value.tv_nsec = (timeout_ms % 1000) * 1000000;
    if (timerfd_settime(u->tfd, 0, &its, NULL) != 0)
        return -1;
    u->armed_ms = at;
    return 0;
}

/* ---- public ----------------------------------------------------------------- */

sg_upstream_t *sg_upstream_create(h2o_loop_t *loop, const char *base_url, size_t max_reply_bytes)
{
    sg_upstream_t *u;

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return NULL;
    u = sg_xcalloc(1, sizeof(*u));
    u->loop = loop;
    u->max_reply_bytes = max_reply_bytes;
    u->epfd = -1;
    u->tfd = -1;
    h2o_linklist_init_anchor(&u->active);
    h2o_linklist_init_anchor(&u->to_add);
    h2o_linklist_init_anchor(&u->zombies);

    u->base_url = sg_xstrdup(base_url);
    if ((u->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
        goto Error;
    if ((u->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0)
        goto Error;
    if ((u->multi = curl_multi_init()) == NULL)
        goto Error;
    curl_multi_setopt(u->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(u->multi, CURLMOPT_SOCKETDATA, u);
    curl_multi_setopt(u->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(u->multi, CURLMOPT_TIMERDATA, u);
    curl_multi_setopt(u->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
    curl_multi_setopt(u->multi, CURLMOPT_MAXCONNECTS, MAX_CONNECTS);

    u->ep_sock = h2o_evloop_socket_create(loop, u->epfd, H2O_SOCKET_FLAG_DONT_READ);
    u->ep_sock->data = u;
    h2o_socket_read_start(u->ep_sock, on_epoll_ready);
    u->timer_sock = h2o_evloop_socket_create(loop, u->tfd, H2O_SOCKET_FLAG_DONT_READ);
    u->timer_sock->data = u;
    h2o_socket_read_start(u->timer_sock, on_timer_ready);
    return u;

Error:
    free_upstream(u);
    return NULL;
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
    while (!h2o_linklist_is_empty(&u->to_add))
        discard_req(H2O_STRUCT_FROM_MEMBER(sg_upstream_req_t, link, u->to_add.next));
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
    struct curl_slist *h;
    char *url = NULL;
    size_t blen = strlen(u->base_url), plen = strlen(path);

    if (u->destroying || on_done == NULL)
        return NULL;
    r = sg_xcalloc(1, sizeof(*r));
    r->u = u;
    r->on_head = on_head;
    r->on_data = on_data;
    r->on_done = on_done;
    r->data = data;
    r->timeout_ms = timeout_ms > 0 ? timeout_ms : DEFAULT_TIMEOUT_MS;
    sg_buf_init(&r->body, u->max_reply_bytes);

    url = sg_xmalloc(blen + plen + 1);
    memcpy(url, u->base_url, blen);
    memcpy(url + blen, path, plen + 1);

    /* curl's defaults would add "Expect: 100-continue" (a round trip) and a
     * form Content-Type to every body */
    if ((h = curl_slist_append(NULL, "Expect:")) == NULL)
        goto Error;
    r->headers = h;
    if (content_type != NULL) {
        char *line = sg_xmalloc(strlen(content_type) + sizeof("Content-Type: "));
        sprintf(line, "Content-Type: %s", content_type);
        h = curl_slist_append(r->headers, line);
        free(line);
    } else {
        h = curl_slist_append(r->headers, "Content-Type:");
    }
    if (h == NULL)
        goto Error;
    r->headers = h;
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++) {
        if ((h = curl_slist_append(r->headers, headers[i])) == NULL)
            goto Error;
        r->headers = h;
    }

    if ((r->easy = curl_easy_init()) == NULL)
        goto Error;
    curl_easy_setopt(r->easy, CURLOPT_PRIVATE, r);
    curl_easy_setopt(r->easy, CURLOPT_URL, url);
    curl_easy_setopt(r->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(r->easy, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, r->timeout_ms);
    curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(r->easy, CURLOPT_ERRORBUFFER, r->curl_err);
    curl_easy_setopt(r->easy, CURLOPT_HEADERFUNCTION, on_curl_header);
    curl_easy_setopt(r->easy, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(r->easy, CURLOPT_WRITEFUNCTION, on_curl_body);
    curl_easy_setopt(r->easy, CURLOPT_WRITEDATA, r);
    if (is_method(method, "GET") && body == NULL) {
        curl_easy_setopt(r->easy, CURLOPT_HTTPGET, 1L);
    } else if (is_method(method, "HEAD")) {
        curl_easy_setopt(r->easy, CURLOPT_NOBODY, 1L);
    } else {
        if (body != NULL || !is_method(method, "DELETE")) {
            /* POST semantics (Content-Length, even 0) under whatever method */
            curl_easy_setopt(r->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body != NULL ? body_len : 0));
            if (curl_easy_setopt(r->easy, CURLOPT_COPYPOSTFIELDS, body != NULL ? body : "") != CURLE_OK)
                goto Error;
        }
        if (!is_method(method, "POST"))
            curl_easy_setopt(r->easy, CURLOPT_CUSTOMREQUEST, method);
    }
    free(url);
    url = NULL;

    if (u->in_curl) {
        /* from inside a curl callback, where curl_multi_add_handle is refused */
        r->state = REQ_TO_ADD;
        h2o_linklist_insert(&u->to_add, &r->link);
    } else if (add_to_multi(r) != 0) {
        goto Error;
    }
    ++u->in_flight;
    return r;

Error:
    free(url);
    free_req(r);
    return NULL;
}

void sg_upstream_cancel(sg_upstream_req_t *r)
{
    sg_upstream_t *u;

    if (r == NULL)
        return;
    u = r->u;
    switch (r->state) {
    case REQ_FINISHING: /* from its own on_done: it is freed when that returns */
    case REQ_ZOMBIE:
        return;
    case REQ_ACTIVE:
        --u->in_flight;
        if (u->in_curl) {
            /* curl_multi_remove_handle is refused inside curl's callbacks */
            h2o_linklist_unlink(&r->link);
            r->state = REQ_ZOMBIE;
            h2o_linklist_insert(&u->zombies, &r->link);
            return;
        }
        break;
    case REQ_TO_ADD:
        --u->in_flight;
        break;
    }
    discard_req(r);
}
