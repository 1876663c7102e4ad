/*
 * request.c — the request core (request.h): the request's state, its
 * replies, the door (caps, bearer, token, rate limit) and the caps on a
 * body. Forwarding is in forward.c, executions' slot, quota and usage in
 * ledger.c; what each route does is in handler/.
 */
#include "request.h"
#include "fields.h"
#include "json.h"
#include "log.h"
#include "metrics.h"
#include "templates.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STREAM_EVENT_MAX (64u << 10) /* the result event is a few hundred bytes */

/* The metrics' route label of each sg_gw_route_t. */
static const char *const route_names[] = {"create_session", "list_sessions", "get_session",       "delete_session",
                                          "execute",        "command",       "files",             "ephemeral_execute",
                                          "install_library", "list_templates", "delete_template"};

void sg_gw_req_free(sg_gw_req_t *g)
{
    sg_upstream_cancel(g->up);
    sg_upstream_cancel(g->cancel_up);
    if (h2o_timeout_is_linked(&g->cancel_retry))
        h2o_timeout_unlink(&g->cancel_retry);
    sg_exec_slot_release(&g->slot);
    sg_http_hold_release(g->hold);
    free(g->body);
    json_object_put(g->json);
    sg_sse_tail_free(&g->tail);
    free(g);
}

h2o_req_t *sg_gw_req_http(sg_gw_req_t *g)
{
    return sg_http_hold_req(g->hold);
}

/* ---- replies ------------------------------------------------------------------ */

static void add_rate_headers(h2o_req_t *req, const sg_rate_result_t *r)
{
    char v[32];
    snprintf(v, sizeof(v), "%ld", r->limit);
    sg_http_add_header(req, "x-ratelimit-limit", v);
    snprintf(v, sizeof(v), "%ld", r->remaining);
    sg_http_add_header(req, "x-ratelimit-remaining", v);
    snprintf(v, sizeof(v), "%.0f", ceil(r->reset_s));
    sg_http_add_header(req, "x-ratelimit-reset", v);
}

void sg_gw_reply_prepare(sg_gw_req_t *g, h2o_req_t *req, int status)
{
    if (g->rate_known)
        add_rate_headers(req, &g->rate);
    if ((status == 429 || status == 503) && g->up_retry_after[0])
        sg_http_add_header(req, "retry-after", g->up_retry_after);
    sg_metrics_request(route_names[g->route], status);
}

void sg_gw_reply_error(sg_gw_req_t *g, int status, const char *code, const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    h2o_req_t *req = sg_gw_req_http(g);
    if (req == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    sg_gw_reply_prepare(g, req, status);
    sg_http_send_error(req, status, code, "%s", detail);
}

void sg_gw_reply_json(sg_gw_req_t *g, int status, json_object *o)
{
    h2o_req_t *req = sg_gw_req_http(g);
    if (req == NULL) {
        json_object_put(o);
        return;
    }
    sg_gw_reply_prepare(g, req, status);
    sg_http_send_json(req, status, o);
}

void sg_gw_reply_raw(sg_gw_req_t *g, int status, const char *ctype, const char *body, size_t len)
{
    h2o_req_t *req = sg_gw_req_http(g);
    if (req == NULL)
        return;
    sg_gw_reply_prepare(g, req, status);
    sg_http_send_body(req, status, ctype[0] ? ctype : "application/json", body, len);
}

void sg_gw_reply_429(sg_gw_req_t *g, const char *code, const char *limit, double retry_after, const char *fmt, ...)
{
    char detail[512], v[32];
    va_list ap;
    h2o_req_t *req = sg_gw_req_http(g);
    sg_metrics_quota_rejection(limit);
    if (req == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    snprintf(v, sizeof(v), "%.0f", ceil(retry_after) < 1 ? 1 : ceil(retry_after));
    sg_http_add_header(req, "retry-after", v);
    sg_gw_reply_prepare(g, req, 429);
    sg_http_send_error(req, 429, code, "%s", detail);
}

/* ---- caps on the body ---------------------------------------------------------------- */

int sg_gw_parse_json_body(sg_gw_req_t *g)
{
    char err[256];
    if (g->content_type[0] && strncasecmp(g->content_type, "application/json", 16) != 0) {
        sg_gw_reply_error(g, 415, "unsupported_media_type", "the request body must be application/json, not %s",
                          g->content_type);
        return -1;
    }
    g->json = sg_json_parse_object(g->body, g->body_len, err, sizeof(err));
    if (g->json == NULL) {
        sg_gw_reply_error(g, 400, "bad_json", "%s", err);
        return -1;
    }
    return 0;
}

int sg_gw_cap_number(sg_gw_req_t *g, const char *field, double above, int whole, double cap, double def,
                     double *out)
{
    const char *code;
    char detail[256];
    int r = sg_gw_number_field(g->json, field, above, whole, cap, out, &code, detail, sizeof(detail));
    if (r < 0) {
        sg_gw_reply_error(g, 400, code, "%s", detail);
        return -1;
    }
    if (r == 0)
        *out = def < cap ? def : cap;
    return 0;
}

int sg_gw_check_lang(sg_gw_req_t *g)
{
    const char *lang = "python";
    json_object *v;
    if (json_object_object_get_ex(g->json, "lang", &v) && v != NULL) {
        if (!json_object_is_type(v, json_type_string)) {
            sg_gw_reply_error(g, 400, "bad_field", "field \"lang\" must be a string");
            return -1;
        }
        lang = json_object_get_string(v);
    }
    snprintf(g->lang, sizeof(g->lang), "%s", lang);
    if (!sg_tenant_lang_allowed(&g->tenant, g->lang, strlen(g->lang))) {
        sg_gw_reply_error(g, 400, "language_not_allowed",
                          "field \"lang\": \"%s\" is not allowed for this tenant (allowed: %s)", g->lang,
                          g->tenant.allowed_langs);
        return -1;
    }
    return 0;
}

/* ---- the session behind the request ------------------------------------------------------ */

void sg_gw_state_ignore(void *data, const sg_state_result_t *r)
{
}

void sg_gw_touch_session(sg_gw_req_t *g, int add_exec)
{
    if (g->route != SG_GW_R_EPHEMERAL && g->sid[0])
        sg_state_session_touch(sg_gw.state, g->sid, sg_gw_now_up(), g->tenant.idle_timeout, add_exec,
                               sg_gw_state_ignore, NULL);
}

/* Only the error's type says so — the body's text may echo what the client
 * sent (a file path). The close asks the proxy once more and frees the slot
 * only on its answer. */
void sg_gw_check_session_lost(sg_gw_req_t *g, const sg_upstream_reply_t *r)
{
    if (r->status == 404 && g->sid[0] && g->route != SG_GW_R_EPHEMERAL && strcmp(r->code, "no_such_session") == 0)
        sg_gw_close_session(g->sid, g->tenant.id, "proxy_lost", NULL, NULL);
}

/* ---- authentication and the rate limit ------------------------------------------------- */

static void on_rate(void *data, const sg_rate_result_t *r)
{
    sg_gw_req_t *g = data;
    if (r->available) {
        g->rate = *r;
        g->rate_known = 1;
        if (!r->allowed) {
            sg_gw_reply_429(g, "quota_exceeded", "rate", r->retry_after_s,
                            "rate limit: %ld requests per minute (burst %ld) exceeded", g->tenant.rate_per_min,
                            g->tenant.burst);
            sg_gw_req_free(g);
            return;
        }
    }
    /* else fail open: a Redis outage must not stop the API */
    g->spec->run(g);
}

static void auth_fn(sg_gw_job_t *job, sg_store_t *st)
{
    sg_gw_req_t *g = (sg_gw_req_t *)job;
    int rc = sg_store_token_auth(st, g->token, strlen(g->token), &g->tenant, job->err, sizeof(job->err));
    if (rc < 0) {
        job->rc = -1;
        return;
    }
    g->authed = rc == 1;
    if (g->authed && g->sid[0]) {
        rc = sg_store_session_get(st, g->sid, &g->sess, job->err, sizeof(job->err));
        if (rc < 0) {
            job->rc = -1;
            return;
        }
        g->sess_found = rc == 1;
    }
}

static void auth_done(sg_gw_job_t *job)
{
    sg_gw_req_t *g = (sg_gw_req_t *)job;
    h2o_req_t *req = sg_gw_req_http(g);

    if (job->rc != 0) {
        sg_gw_reply_error(g, 500, "internal", "the tenant database cannot be read: %s", job->err);
        goto Error;
    }
    if (!g->authed) {
        if (req != NULL)
            sg_http_add_header(req, "www-authenticate", "Bearer realm=\"sandgate\", error=\"invalid_token\"");
        sg_gw_reply_error(g, 401, "unauthorized", "the API token is unknown or revoked");
        goto Error;
    }
    /* a session of another tenant is answered as one that does not exist */
    if (g->sid[0] && (!g->sess_found || g->sess.tenant_id != g->tenant.id || g->sess.closed_at != 0)) {
        sg_gw_reply_error(g, 404, "no_such_session", "no session with id \"%s\"", g->sid);
        goto Error;
    }
    sg_state_rate_check(sg_gw.state, g->tenant.id, g->tenant.rate_per_min, g->tenant.burst, on_rate, g);
    return;
Error:
    sg_gw_req_free(g);
}

/* ---- the door ------------------------------------------------------------------------------ */

/* Answers a request refused at the door, before it has a sg_gw_req_t. */
static int refuse(h2o_req_t *req, sg_gw_route_t route, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int refuse(h2o_req_t *req, sg_gw_route_t route, int status, const char *code, const char *fmt, ...)
{
    char detail[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    sg_metrics_request(route_names[route], status);
    sg_http_send_error(req, status, code, "%s", detail);
    return 0;
}

static int wants_stream(h2o_req_t *req)
{
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_ACCEPT, -1);
    return i >= 0 && h2o_strstr(req->headers.entries[i].value.base, req->headers.entries[i].value.len,
                                H2O_STRLIT("text/event-stream")) != SIZE_MAX;
}

int sg_gw_req_accept(h2o_req_t *req, const sg_route_match_t *m, const sg_gw_route_spec_t *spec)
{
    sg_gw_route_t route = spec->route;
    h2o_iovec_t arg = m->nargs > 0 ? m->arg[0] : h2o_iovec_init(NULL, 0);
    size_t header_bytes = 0, body_cap = spec->file_body ? sg_gw.max_file_bytes : sg_gw.max_body;
    char template_name[256] = "";

    for (size_t i = 0; i < req->headers.size; i++)
        header_bytes += req->headers.entries[i].name->len + req->headers.entries[i].value.len + 4;
    if (header_bytes > sg_gw.max_header_bytes)
        return refuse(req, route, 431, "headers_too_large", "the request headers are %zu bytes, above the limit of %zu",
                      header_bytes, sg_gw.max_header_bytes);
    if (req->entity.len > body_cap)
        return refuse(req, route, 413, "too_large", "the request body is %zu bytes, above the limit of %zu",
                      req->entity.len, body_cap);
    h2o_iovec_t token = sg_gw_bearer(req);
    if (token.base == NULL || token.len == 0 || token.len > SG_TOKEN_MAX) {
        sg_http_add_header(req, "www-authenticate", "Bearer realm=\"sandgate\"");
        return refuse(req, route, 401, "unauthorized", "an API token is required: Authorization: Bearer <token>");
    }
    if (spec->arg == SG_GW_ARG_TEMPLATE && sg_gw_template_name(arg, template_name, sizeof(template_name)) != 0)
        return refuse(req, route, 404, "no_such_template", "no template named \"%.*s\"", (int)(arg.len > 64 ? 64 : arg.len),
                      arg.base);
    if (spec->arg == SG_GW_ARG_SESSION && (arg.len != 36 || !sg_is_uuid(arg.base, arg.len)))
        return refuse(req, route, 404, "no_such_session", "no session with id \"%.*s\"", (int)(arg.len > 64 ? 64 : arg.len),
                      arg.base);
    if (spec->file_body && req->query_at != SIZE_MAX && req->path.len - req->query_at >= SG_GW_QUERY_MAX)
        return refuse(req, route, 400, "bad_path", "the query string is %zu bytes, above the limit of %d",
                      req->path.len - req->query_at, SG_GW_QUERY_MAX - 1);

    sg_gw_req_t *g = sg_xcalloc(1, sizeof(*g));
    g->hold = sg_http_hold(req);
    g->spec = spec;
    g->route = route;
    sg_gw_watch_client(g);
    snprintf(g->method, sizeof(g->method), "%.*s", (int)req->method.len, req->method.base);
    memcpy(g->token, token.base, token.len);
    if (spec->arg == SG_GW_ARG_TEMPLATE)
        memcpy(g->template_name, template_name, sizeof(template_name));
    else if (spec->arg == SG_GW_ARG_SESSION)
        memcpy(g->sid, arg.base, 36);
    if (spec->file_body && req->query_at != SIZE_MAX)
        snprintf(g->query, sizeof(g->query), "%.*s", (int)(req->path.len - req->query_at),
                 req->path.base + req->query_at);
    if (req->entity.base != NULL && req->entity.len != 0) {
        /* a file's bytes may hold NUL: copied by length */
        g->body = sg_xmalloc(req->entity.len + 1);
        memcpy(g->body, req->entity.base, req->entity.len);
        g->body[req->entity.len] = '\0';
        g->body_len = req->entity.len;
    }
    ssize_t ct = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
    if (ct >= 0)
        snprintf(g->content_type, sizeof(g->content_type), "%.*s", (int)req->headers.entries[ct].value.len,
                 req->headers.entries[ct].value.base);
    if (spec->stream_accept)
        g->want_stream = wants_stream(req);
    sg_sse_tail_init(&g->tail, STREAM_EVENT_MAX);
    g->job.fn = auth_fn;
    g->job.done = auth_done;
    sg_gw_db_submit(&g->job);
    return 0;
}
