/*
 * upstream.h — HTTP/1.1 requests from the gateway's h2o loop to the proxy,
 * on h2o's own sockets with a pool of keep-alive connections (upstream.c):
 * nothing blocks the loop. A proxy named by host name is looked up on a
 * thread of its own when a connection is to open and its addresses are
 * older than 10 s; requests wait for the first lookup only, later ones
 * connect to the addresses they have while the next is made.
 * Hundreds of requests can be in flight while the loop serves others. The
 * proxy is reached over plain HTTP (an internal network): an https:// URL
 * is refused.
 *
 * Loop thread only. Every request has a total timeout. Reply bodies are
 * capped (max_reply_bytes); a larger reply fails the request.
 */
#ifndef SANDGATE_UPSTREAM_H
#define SANDGATE_UPSTREAM_H

#include <h2o.h>
#include <netdb.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sg_upstream sg_upstream_t;
typedef struct sg_upstream_req sg_upstream_req_t;

typedef struct {
    long status;      /* HTTP status; 0 when there was no complete reply (then err is set) */
    const char *err;  /* NULL, or a sentence: refused, timed out, too large, cut short */
    int timed_out;    /* the request's timeout passed */
    const char *body; /* NUL-terminated; "" when streamed through on_data */
    size_t body_len;
    const char *content_type; /* "" if none */
    const char *retry_after;  /* the reply's Retry-After header, "" if none */
    const char *usage;        /* the reply's X-Sandgate-Usage header (usage_hdr.h), "" if none */
    const char *code;         /* an error reply's type: its X-Sandgate-Error header, or failing that
                               * (an older proxy) the "code" field of its JSON body; "" if none.
                               * Only [a-z0-9_], at most 47 characters. The one thing about an
                               * error a caller may branch on — never search the body's text. */
} sg_upstream_reply_t;

/* The reply's status and headers, once, before any on_data (streaming only). */
typedef void (*sg_upstream_head_cb)(void *data, long status, const char *content_type);
/* A piece of the reply body (streaming only). */
typedef void (*sg_upstream_data_cb)(void *data, const char *p, size_t len);
/* The end: called exactly once unless the request was cancelled. The reply
 * and its strings are valid only during the call. After on_head, status 0
 * means the stream broke off (err says why). */
typedef void (*sg_upstream_done_cb)(void *data, const sg_upstream_reply_t *r);

/* 1 when code is an error type as the proxy names them: 1..47 of [a-z0-9_]. */
int sg_upstream_code_valid(const char *code);

/* s percent-encoded as one path segment into out (every byte but
 * A-Z a-z 0-9 - . _ ~): 0, or -1 when it does not fit in outlen. */
int sg_upstream_escape(const char *s, char *out, size_t outlen);

/* base_url: "http://127.0.0.1:8000" (no trailing slash), or
 * "http://[unix:/path]" for a proxy's Unix socket (SANDGATE_PROXY_SOCKET;
 * Host: localhost); NULL for any other scheme. */
sg_upstream_t *sg_upstream_create(h2o_loop_t *loop, const char *base_url, size_t max_reply_bytes);
/* Cancels whatever is in flight (no callbacks) and frees. May be called from
 * inside a callback of u (the memory goes when that callback returns). Run
 * the loop once afterwards: h2o frees closed sockets on its next turn. */
void sg_upstream_destroy(sg_upstream_t *u);
size_t sg_upstream_in_flight(sg_upstream_t *u);
/* Tests: the function that looks a host name up (getaddrinfo when NULL;
 * it runs on the lookup's thread). Set it before the upstreams are made. */
typedef int (*sg_upstream_resolver_fn)(const char *host, const char *port, const struct addrinfo *hints,
                                       struct addrinfo **res);
void sg_upstream_set_resolver(sg_upstream_resolver_fn fn);

/* TCP connections opened so far (idle ones are reused: a steady stream of
 * requests opens few). */
uint64_t sg_upstream_connections_opened(sg_upstream_t *u);

/* Starts `method base_url+path` with body (copied; may be NULL) and the given
 * Content-Type (NULL: none). With on_head/on_data set, the reply body is
 * passed through as it arrives instead of being collected (max_reply_bytes
 * caps collected bodies only). timeout_ms <= 0 means 30 s. Returns a handle
 * for sg_upstream_cancel, or NULL if the request could not be started (then
 * no callback runs). Callbacks never run before this returns. */
sg_upstream_req_t *sg_upstream_start(sg_upstream_t *u, const char *method, const char *path, const char *body,
                                     size_t body_len, const char *content_type, long timeout_ms,
                                     sg_upstream_head_cb on_head, sg_upstream_data_cb on_data,
                                     sg_upstream_done_cb on_done, void *data);
/* The same with extra request header lines ("Name: value", NULL-terminated;
 * may be NULL), copied. */
sg_upstream_req_t *sg_upstream_start_with_headers(sg_upstream_t *u, const char *method, const char *path,
                                                  const char *const *headers, const char *body, size_t body_len,
                                                  const char *content_type, long timeout_ms,
                                                  sg_upstream_head_cb on_head, sg_upstream_data_cb on_data,
                                                  sg_upstream_done_cb on_done, void *data);
/* Stops a request; none of its callbacks runs after this. Callable from any
 * callback, including the request's own on_head/on_data. The handle is valid
 * until cancel, or until its on_done returns (cancel from inside its own
 * on_done does nothing). */
void sg_upstream_cancel(sg_upstream_req_t *r);

#endif
