/*
 * request.c — the request core (request.h): the request's state, its
 * replies, the caps on a body, the session behind it. The door (caps,
 * bearer, token, rate limit) is in auth.c, forwarding in forward.c,
 * executions' slot, quota and usage in ledger.c; what each route does is
 * in handler/.
 */
#include "request.h"
#include "fields.h"
#include "json.h"
#include "log.h"
#include "metrics.h"
#include "stats.h"
#include "util.h"
#include "clock.h"
#include "close.h"
#include "upstream.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const sg_gw_route_names[] = {
    "create_session",    "list_sessions",   "get_session",    "delete_session",  "execute",     "command", "files",
    "ephemeral_execute", "install_library", "list_templates", "delete_template", "pip_install", "mcp"};

static size_t reqs_live; /* made by sg_gw_req_alloc, not yet freed */

sg_gw_req_t *sg_gw_req_alloc(void)
{
    reqs_live++;
    return sg_xcalloc(1, sizeof(sg_gw_req_t));
}

size_t sg_gw_reqs_live(void)
{
    return reqs_live;
}

void sg_gw_req_free(sg_gw_req_t *g)
{
    reqs_live--;
    sg_upstream_cancel(g->up);
    sg_upstream_cancel(g->cancel_up);
    if (h2o_timeout_is_linked(&g->proxy_wait))
        h2o_timeout_unlink(&g->proxy_wait);
    if (h2o_timeout_is_linked(&g->cancel_retry))
        h2o_timeout_unlink(&g->cancel_retry);
    sg_exec_slot_release(&g->slot);
    sg_http_hold_release(g->hold);
    free(g->body);
    json_object_put(g->json);
    sg_sse_tail_free(&g->tail);
    if (g->capture_free != NULL)
        g->capture_free(g->capture_data);
    free(g);
}

h2o_req_t *sg_gw_req_http(sg_gw_req_t *g)
{
    return sg_http_hold_req(g->hold);
}

/* ---- replies ------------------------------------------------------------------ */

static void add_rate_headers(h2o_req_t *req, const sg_rate_result_t *r)
{
    char v[21];
    sg_fmt_i64(v, r->limit);
    sg_http_add_header(req, "x-ratelimit-limit", v);
    sg_fmt_i64(v, r->remaining);
    sg_http_add_header(req, "x-ratelimit-remaining", v);
    sg_fmt_i64(v, (int64_t)ceil(r->reset_s));
    sg_http_add_header(req, "x-ratelimit-reset", v);
}

void sg_gw_reply_prepare(sg_gw_req_t *g, h2o_req_t *req, int status)
{
    if (g->rate_known)
        add_rate_headers(req, &g->rate);
    if ((status == 429 || status == 503) && g->up_retry_after[0])
        sg_http_add_header(req, "retry-after", g->up_retry_after);
    sg_metrics_request(sg_gw_route_names[g->route], status);
}

/* An internal request's reply goes to its capture, counted as the route's. */
static void capture_json(sg_gw_req_t *g, int status, json_object *o)
{
    size_t len;
    const char *body = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &len);
    sg_metrics_request(sg_gw_route_names[g->route], status);
    g->capture(g, status, "", body, len);
    json_object_put(o);
}

static void capture_error(sg_gw_req_t *g, int status, const char *code, const char *detail)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "detail", json_object_new_string(detail));
    json_object_object_add(o, "code", json_object_new_string(code));
    capture_json(g, status, o);
}

void sg_gw_reply_error(sg_gw_req_t *g, int status, const char *code, const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    h2o_req_t *req = sg_gw_req_http(g);
    if (req == NULL && g->capture == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    if (g->capture != NULL) {
        capture_error(g, status, code, detail);
        return;
    }
    sg_gw_reply_prepare(g, req, status);
    sg_http_send_error(req, status, code, "%s", detail);
}

void sg_gw_reply_json(sg_gw_req_t *g, int status, json_object *o)
{
    h2o_req_t *req = sg_gw_req_http(g);
    if (g->capture != NULL) {
        capture_json(g, status, o);
        return;
    }
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
    if (g->capture != NULL) {
        sg_metrics_request(sg_gw_route_names[g->route], status);
        g->capture(g, status, ctype, body, len);
        return;
    }
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
    sg_stats_rejection(g->tenant.id, limit);
    if (req == NULL && g->capture == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    if (g->capture != NULL) {
        capture_error(g, 429, code, detail);
        return;
    }
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

int sg_gw_cap_number(sg_gw_req_t *g, const char *field, double above, int whole, double cap, double def, double *out)
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

int sg_gw_set_runtime(sg_gw_req_t *g)
{
    json_object *v;
    const char *pinned = g->tenant.runtime;
    if (json_object_object_get_ex(g->json, "runtime", &v) && v != NULL &&
        !(pinned[0] != '\0' && json_object_is_type(v, json_type_string) &&
          strcmp(json_object_get_string(v), pinned) == 0)) {
        sg_gw_reply_error(g, 400, "runtime_not_allowed",
                          "field \"runtime\": this tenant's sandboxes run on %s, which its operator chooses",
                          pinned[0] != '\0' ? pinned : "the service's default runtime");
        return -1;
    }
    if (pinned[0] != '\0')
        json_object_object_add(g->json, "runtime", json_object_new_string(pinned));
    else
        json_object_object_del(g->json, "runtime");
    return 0;
}

const char *sg_gw_runtime_label(const sg_gw_req_t *g)
{
    if (g->route != SG_GW_R_EPHEMERAL && g->sess_found && g->sess.runtime[0] != '\0')
        return g->sess.runtime;
    return g->tenant.runtime[0] != '\0' ? g->tenant.runtime : "unknown";
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
        sg_gw_close_session_at(g->sid, g->tenant.id, g->proxy != NULL ? g->proxy->url : NULL, "proxy_lost", NULL, NULL);
}

void sg_gw_session_lost(sg_gw_req_t *g, const char *why)
{
    sg_warn("session %s: lost (%s)", g->sid, why);
    sg_gw_close_session_at(g->sid, g->tenant.id, g->sess.proxy, "session_lost", NULL, NULL);
    sg_gw_reply_error(g, 410, "session_lost",
                      "the session's sandbox was lost (%s); its state is gone: create a new session", why);
    sg_gw_req_free(g);
}
