/*
 * http.h — the h2o glue both servers share: one listener, one handler that
 * gets every request (the program routes by itself), and JSON replies.
 *
 * Everything here runs on the event-loop thread that owns the server.
 */
#ifndef SANDGATE_HTTP_H
#define SANDGATE_HTTP_H

#include <h2o.h>
#include <json-c/json.h>

typedef struct sg_http_server sg_http_server_t;

/* Called for every request. Return 0 after replying or after arranging an
 * asynchronous reply (as h2o's on_req). */
typedef int (*sg_http_handler_cb)(void *app, h2o_req_t *req);

/* Listens on host:port (port 0 picks a free one) with its own h2o loop.
 * Bodies larger than max_body get 413 from h2o before they are read whole.
 * Connections wait in the backlog until sg_http_server_start. NULL on
 * failure with err set. */
sg_http_server_t *sg_http_server_create(const char *host, int port, size_t max_body, sg_http_handler_cb cb, void *app,
                                        char *err, size_t errlen);
/* A directory of static files: requests under url_path ("/docs") are
 * served from dir by h2o's file handler — a directory's index.html, no
 * listing, types by extension — ahead of the server's handler. */
typedef struct {
    const char *url_path;
    const char *dir;
    /* "Name: value" lines (NULL-terminated, may be NULL; copied) set on every
     * reply under url_path, over any the file handler made */
    const char *const *headers;
} sg_http_dir_t;
/* sg_http_server_create with dirs[0..ndirs) served as static files
 * (copied; a missing dir answers 404). */
sg_http_server_t *sg_http_server_create_with_dirs(const char *host, int port, size_t max_body, sg_http_handler_cb cb,
                                                  void *app, const sg_http_dir_t *dirs, size_t ndirs, char *err,
                                                  size_t errlen);
/* HTTP/2 over cleartext (an "Upgrade: h2c" request, or the HTTP/2
 * preface sent at once) is refused unless allowed here: such a request is
 * answered over HTTP/1.1. Call before sg_http_server_start. */
void sg_http_server_allow_h2c(sg_http_server_t *s, int allow);
/* Listens on a Unix socket at path too (absolute), made 0600: only the
 * server's own user connects. A socket there that nobody listens on (left
 * by a server that died) is replaced; anything else there is refused. The
 * socket is removed when the server stops accepting. Call before
 * sg_http_server_start. 0, or -1 with err set. */
int sg_http_server_listen_unix(sg_http_server_t *s, const char *path, char *err, size_t errlen);
/* Starts taking connections. */
void sg_http_server_start(sg_http_server_t *s);
h2o_loop_t *sg_http_server_loop(sg_http_server_t *s);
h2o_context_t *sg_http_server_context(sg_http_server_t *s);
int sg_http_server_port(sg_http_server_t *s);
/* Stops accepting new connections (for shutdown). */
void sg_http_server_stop_accepting(sg_http_server_t *s);
/* Takes the server apart with its loop (s may be NULL): stops accepting,
 * disposes of h2o's context, takes back what sg_loop_soon and the hold
 * watch keep for the loop (sg_loop_forget), destroys the loop and frees s.
 * Only once every connection is closed (h2o 2.2 disposes of the context's
 * timeouts, a connection's among them, assuming none is linked) and, like
 * sg_loop_forget, once nothing of sg_loop_soon or the hold watch is in
 * use; not from inside the loop. h2o 2.2.5's h2o_evloop_destroy leaves the
 * loop's own epoll fd open. */
void sg_http_server_destroy(sg_http_server_t *s);

/* Runs e->cb once, at the end of this turn of loop (after the events of
 * the turn, before it waits again): never from inside the caller, and
 * without a system call. e must not be linked already; unlink it with
 * h2o_timeout_unlink to take it back. */
void sg_loop_soon(h2o_loop_t *loop, h2o_timeout_entry_t *e);
/* Links e to run SG_LOOP_LATER_MS from now: work that gains from gathering
 * what several turns bring (sg_loop_forget takes it back too). */
#define SG_LOOP_LATER_MS 2
void sg_loop_later(h2o_loop_t *loop, h2o_timeout_entry_t *e);
/* Before h2o_evloop_destroy(loop) (h2o wants every timeout of a loop
 * disposed of): takes back everything this file keeps for loop — the
 * timeout of sg_loop_soon, and the hold watch's timeout and epoll set (its
 * socket closed) — once no entry is linked to sg_loop_soon's timeout and
 * no hold of the loop is watched (all released). On loop's thread, or with
 * loop no longer run; a loop that used neither is left as it is. Any
 * thread's loop may be forgotten while others go on. */
void sg_loop_forget(h2o_loop_t *loop);

const char *sg_http_reason(int status);
/* Replies with obj serialized; takes ownership of obj. */
void sg_http_send_json(h2o_req_t *req, int status, json_object *obj);
/* Replies {"detail": <formatted>, "code": code}, and names the code in the
 * header X-Sandgate-Error as well: the code is the error's type, the one
 * thing a caller branches on (the detail is text for people and may echo
 * what the client sent). */
void sg_http_send_error(h2o_req_t *req, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* An error as it will be answered, made away from the request (a
 * validation, a DB job): its status, code and detail, as
 * sg_http_send_error takes them. */
typedef struct {
    int status;
    const char *code;
    char detail[512];
} sg_http_err_t;
/* Fills e. Returns -1, the failure of the caller that found it. */
int sg_http_err_set(sg_http_err_t *e, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Replies with the bytes as given (copied into the request's pool). */
void sg_http_send_body(h2o_req_t *req, int status, const char *content_type, const char *p, size_t len);
/* Adds a response header; name and value are copied. */
void sg_http_add_header(h2o_req_t *req, const char *name, const char *value);

/* 1 if req's method equals m. */
int sg_http_method_is(h2o_req_t *req, const char *m);
/* Splits a request path into at most max segments ("/sessions/x/execute" ->
 * "sessions", "x", "execute"). Returns the count, or -1 if there are more
 * than max, an empty segment in the middle, or no leading slash. A trailing
 * slash is ignored. */
int sg_http_split_path(const char *p, size_t len, h2o_iovec_t *segs, int max);
/* The path without the query string. */
h2o_iovec_t sg_http_path(h2o_req_t *req);
/* The value of query parameter name, percent-decoded into the request's
 * pool; {NULL, 0} if absent, {"" , 0} if present and empty. */
h2o_iovec_t sg_http_query_param(h2o_req_t *req, const char *name);
/* A path segment percent-decoded into out (NUL-terminated): 0, or -1 if it
 * is empty, holds a bad escape or a NUL, or does not fit in outlen. Both
 * tiers read template names from the path with it. */
int sg_http_decode_segment(h2o_iovec_t seg, char *out, size_t outlen);
/* 1 if the request has a Content-Type of application/json (parameters
 * allowed), 0 otherwise. */
int sg_http_is_json(h2o_req_t *req);

/* ---- answering later ---------------------------------------------------------
 * A request answered after asynchronous work may be gone by then (its
 * connection closed). Hold it: sg_http_hold_req() is the request while it
 * lives and NULL after. Release the hold once, when the work is over (after
 * replying, or finding the request gone). */
typedef struct sg_http_hold sg_http_hold_t;
sg_http_hold_t *sg_http_hold(h2o_req_t *req);
h2o_req_t *sg_http_hold_req(sg_http_hold_t *h);
void sg_http_hold_release(sg_http_hold_t *h);

/* Watches the client of a held request: on_gone(data) runs once, on the
 * loop, when the client goes away before the hold is released — its
 * connection was closed, or h2o disposed of the request unanswered. After
 * on_gone the request may still be there (sg_http_hold_req): answer it as
 * usual (h2o then finds the connection closed and frees it), or release.
 *
 * Why a watch: h2o 2.2.5's HTTP/1.1 stops reading a connection while its
 * request is being handled, so a hang-up is noticed only when the reply is
 * written. A watched HTTP/1 connection's socket goes into a private epoll
 * set for EPOLLRDHUP (the peer's FIN) only — no data is read, nothing is
 * polled. The set is the loop's, made when its first watch begins, until
 * sg_loop_forget. It goes in SG_HTTP_WATCH_AFTER_MS after the watch begins: a
 * request answered sooner costs nothing, a longer one an epoll_ctl then and
 * one at release, and a hang-up is noticed at most that much later (level-
 * triggered: a FIN that came before is reported at once). A client that
 * only half-closes (shutdown(SHUT_WR)) after its request counts as gone,
 * as in nginx. HTTP/2 connections are read by h2o throughout: there the
 * request's disposal says it. */
#define SG_HTTP_WATCH_AFTER_MS 10
void sg_http_hold_watch(sg_http_hold_t *h, void (*on_gone)(void *data), void *data);
/* 1 once on_gone has run (or would have: the client is gone). */
int sg_http_hold_gone(sg_http_hold_t *h);

/* ---- streamed replies ----------------------------------------------------------
 * Status and headers go out at start; writes queue and go out as the client
 * takes them; finish sends what is queued and ends the reply. The stream
 * lives in the request's pool: use it only while the request lives (see
 * sg_http_hold). A write that would pass max_queued bytes waiting (a client
 * that does not read) aborts the stream (-1): what was queued goes out, then
 * the reply ends as broken (HTTP/1.1: an invalid chunk, the connection
 * closed) — never a stream with a piece silently left out. */
typedef struct sg_http_stream sg_http_stream_t;
sg_http_stream_t *sg_http_stream_start(h2o_req_t *req, int status, const char *content_type, size_t max_queued);
int sg_http_stream_write(sg_http_stream_t *s, const void *p, size_t len);
void sg_http_stream_finish(sg_http_stream_t *s);
/* Ends the reply as broken (the client can tell it is incomplete). */
void sg_http_stream_abort(sg_http_stream_t *s);
/* Appends one Server-Sent Event: "event: <event>\ndata: <json>\n\n"; takes
 * ownership of data. */
int sg_http_stream_event(sg_http_stream_t *s, const char *event, json_object *data);

#endif
