/*
 * route.c — the route table (route.h).
 */
#include "route.h"
#include "http.h"

#include <stdio.h>
#include <string.h>

static const struct {
    unsigned bit;
    const char *name;
} methods[] = {{SG_M_GET, "GET"}, {SG_M_HEAD, "HEAD"},     {SG_M_POST, "POST"},
               {SG_M_PUT, "PUT"}, {SG_M_DELETE, "DELETE"}, {SG_M_PATCH, "PATCH"}};

unsigned sg_route_method(h2o_iovec_t method)
{
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (h2o_memis(method.base, method.len, methods[i].name, strlen(methods[i].name)))
            return methods[i].bit;
    return 0;
}

/* 1 if the pattern matches the segments, with the "*" segments in m. */
static int pattern_matches(const char *pattern, const h2o_iovec_t *seg, int nseg, sg_route_match_t *m)
{
    const char *p = pattern;
    int i = 0;

    m->nargs = 0;
    if (*p == '/')
        p++;
    while (*p != '\0') {
        const char *end = strchr(p, '/');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (i == nseg)
            return 0;
        if (len == 1 && *p == '*') {
            if (m->nargs == SG_ROUTE_MAX_ARGS)
                return 0;
            m->arg[m->nargs++] = seg[i];
        } else if (!h2o_memis(seg[i].base, seg[i].len, p, len)) {
            return 0;
        }
        i++;
        p += len;
        if (*p == '/')
            p++;
    }
    return i == nseg;
}

int sg_route_find(const sg_route_t *table, size_t n, h2o_iovec_t method, h2o_iovec_t path, sg_route_match_t *m,
                  unsigned *allow)
{
    h2o_iovec_t seg[SG_ROUTE_MAX_SEGMENTS];
    int nseg = sg_http_split_path(path.base, path.len, seg, SG_ROUTE_MAX_SEGMENTS);
    unsigned bit = sg_route_method(method), allowed = 0;
    sg_route_match_t tmp;

    if (allow != NULL)
        *allow = 0;
    memset(m, 0, sizeof(*m));
    if (nseg < 0)
        return 404;
    for (size_t i = 0; i < n; i++) {
        if (!pattern_matches(table[i].pattern, seg, nseg, &tmp))
            continue;
        if (bit != 0 && (table[i].methods & bit) != 0) {
            *m = tmp;
            m->route = &table[i];
            return 0;
        }
        allowed |= table[i].methods;
    }
    if (allowed == 0)
        return 404;
    if (allow != NULL)
        *allow = allowed;
    return 405;
}

int sg_route_match(const sg_route_t *table, size_t n, h2o_req_t *req, h2o_iovec_t path, sg_route_match_t *m,
                   unsigned *allow)
{
    return sg_route_find(table, n, req->method, path, m, allow);
}

void sg_route_allow_text(unsigned mask, char *out, size_t outlen)
{
    size_t len = 0;

    if (outlen == 0)
        return;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        if ((mask & methods[i].bit) == 0)
            continue;
        int w = snprintf(out + len, outlen - len, "%s%s", len == 0 ? "" : ", ", methods[i].name);
        if (w < 0 || (size_t)w >= outlen - len) {
            out[len] = '\0'; /* cut at a whole method */
            return;
        }
        len += (size_t)w;
    }
}

void sg_route_reply_unmatched(h2o_req_t *req, int status, unsigned allow)
{
    if (status == 405) {
        char text[64];
        sg_route_allow_text(allow, text, sizeof(text));
        sg_http_add_header(req, "allow", text);
        sg_http_send_error(req, 405, "method_not_allowed", "%.*s is not allowed here; allowed: %s",
                           (int)(req->method.len > 16 ? 16 : req->method.len), req->method.base, text);
        return;
    }
    h2o_iovec_t path = sg_http_path(req);
    sg_http_send_error(req, 404, "not_found", "no route for %.*s %.*s",
                       (int)(req->method.len > 16 ? 16 : req->method.len), req->method.base,
                       (int)(path.len > 200 ? 200 : path.len), path.base);
}

int sg_route_dispatch(const sg_route_t *table, size_t n, void *app, h2o_req_t *req, h2o_iovec_t path)
{
    sg_route_match_t m;
    unsigned allow;
    int status = sg_route_match(table, n, req, path, &m, &allow);

    if (status != 0 || m.route->handler == NULL) {
        sg_route_reply_unmatched(req, status != 0 ? status : 404, allow);
        return 0;
    }
    return m.route->handler(app, req, &m);
}
