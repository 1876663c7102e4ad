/*
 * route.h — the one route table the three routers (the gateway's public
 * API, its admin API, the proxy's API) are written as, and the one way a
 * request that matches no route is answered.
 *
 * A table is an array of {methods, pattern, handler, id}, searched in
 * order. A pattern is a path of segments, each literal or "*": the
 * pattern of segments sessions, *, execute matches "/sessions/abc/execute"
 * with arg[0] = "abc" (pointing into the request's path, no copy). "*" is
 * exactly one non-empty segment; a trailing slash in the request is ignored, an empty
 * segment in its middle matches nothing (sg_http_split_path). A route
 * lists every method it serves: GET does not imply HEAD.
 *
 * A path that no pattern matches is a 404; a path that some pattern
 * matches but not with this method is a 405 carrying `Allow` (the union of
 * the methods of the patterns that match the path).
 *
 * Pure and allocation-free but for the replies; runs on the loop thread.
 */
#ifndef SANDGATE_ROUTE_H
#define SANDGATE_ROUTE_H

#include <h2o.h>
#include <stddef.h>

enum { SG_M_GET = 1, SG_M_HEAD = 2, SG_M_POST = 4, SG_M_PUT = 8, SG_M_DELETE = 16, SG_M_PATCH = 32 };

#define SG_ROUTE_MAX_ARGS 4
/* Segments a path may have at most; longer paths match nothing (404). */
#define SG_ROUTE_MAX_SEGMENTS 8

typedef struct sg_route sg_route_t;

typedef struct {
    const sg_route_t *route;
    h2o_iovec_t arg[SG_ROUTE_MAX_ARGS]; /* what each "*" matched, in order */
    int nargs;
} sg_route_match_t;

/* Returns 0 after replying or arranging a reply, as h2o's on_req. */
typedef int (*sg_route_cb)(void *app, h2o_req_t *req, const sg_route_match_t *m);

struct sg_route {
    unsigned methods;    /* SG_M_* mask */
    const char *pattern; /* the path's segments, literal or "*" (above) */
    sg_route_cb handler; /* may be NULL for a table used with sg_route_find only */
    int id;              /* the caller's, e.g. a route enum or a metrics label index */
};

/* The SG_M_* bit of a method name, 0 for any other method. */
unsigned sg_route_method(h2o_iovec_t method);
/* Finds the route for method + path (no query string). Returns 0 with m
 * filled, 404 when no pattern matches the path, 405 when one does but not
 * with this method (*allow, if not NULL, gets the methods that would). */
int sg_route_find(const sg_route_t *table, size_t n, h2o_iovec_t method, h2o_iovec_t path, sg_route_match_t *m,
                  unsigned *allow);
/* sg_route_find for a request. */
int sg_route_match(const sg_route_t *table, size_t n, h2o_req_t *req, h2o_iovec_t path, sg_route_match_t *m,
                   unsigned *allow);
/* "GET, HEAD, POST" for a mask, into out (always NUL terminated). */
void sg_route_allow_text(unsigned methods, char *out, size_t outlen);
/* The one answer to a request no route takes: 404 {"detail", "code":
 * "not_found"}, or 405 {"detail", "code": "method_not_allowed"} with the
 * header Allow. */
void sg_route_reply_unmatched(h2o_req_t *req, int status, unsigned allow);
/* Matches req and calls the route's handler, or replies as above. */
int sg_route_dispatch(const sg_route_t *table, size_t n, void *app, h2o_req_t *req, h2o_iovec_t path);

#endif
