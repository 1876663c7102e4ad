/*
 * api_core.c — the request core of the proxy's API (api_core.h).
 */
#include "api_core.h"
#include "adopt.h"
#include "capacity.h"
#include "json.h"
#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_pending_gone(void *data);

pending_t *sg__api_pending_new(h2o_req_t *req, sg_api_t *api)
{
    pending_t *p = sg_xcalloc(1, sizeof(*p));
    p->hold = sg_http_hold(req);
    sg_http_hold_watch(p->hold, on_pending_gone, p);
    p->api = api;
    return p;
}

h2o_req_t *sg__api_pending_req(pending_t *p)
{
    return sg_http_hold_req(p->hold);
}

static void pending_unslot(pending_t *p);

void sg__api_pending_free(pending_t *p)
{
    pending_unslot(p);
    if (h2o_linklist_is_linked(&p->link))
        h2o_linklist_unlink(&p->link);
    sg_http_hold_release(p->hold);
    json_object_put(p->body);
    free(p->path);
    free(p);
}

/* ---- a session's queue --------------------------------------------------------
 * A request on a session (execute, command, file, library) waits from its
 * admission until its op reaches the agent (an install: until it ends),
 * holding its body. At most api->session_queue wait per session; past it,
 * 429 session_busy. A waiting request is dropped — its op never runs — when
 * its client goes away (sg_http_hold_watch) or the gateway cancels it by
 * the id it gave (DELETE /requests/{rid}); one that has started runs to its
 * end, and its reply goes to whoever is still there. */

static h2o_linklist_t named = {&named, &named}; /* pendings with a rid */

/* Admits p to s's queue: 0, or -1 after answering 429. */
int sg__api_pending_admit(pending_t *p, h2o_req_t *req, sg_session_t *s)
{
    long max = p->api->session_queue > 0 ? p->api->session_queue : 16;
    if ((long)s->waiting >= max) {
        sg_http_add_header(req, "retry-after", "1");
        sg_http_send_error(req, 429, "session_busy",
                           "%u requests already wait on this session (the limit); try again when one has run",
                           s->waiting);
        return -1;
    }
    s->waiting++;
    sg_session_ref(s);
    p->slot = s;
    return 0;
}

static void pending_unslot(pending_t *p)
{
    if (p->slot != NULL) {
        p->slot->waiting--;
        sg_session_unref(p->slot);
        p->slot = NULL;
    }
}

static void on_op_started(sg_op_t *op)
{
    pending_t *p = op->data;
    p->started = 1;
    pending_unslot(p);
}

/* Submits p's op (p->op while it is not done). */
void sg__api_pending_submit(pending_t *p, sg_op_t *op, sg_op_cb done)
{
    p->op = op;
    op->on_start = on_op_started;
    sg_op_submit(op, done, p);
}

/* Gives p's op up unless it started. 1 if it had started (nothing
 * changes), 0 if given up: a submitted op's callback runs now (p may be
 * gone when this returns); otherwise the next step sees p->cancelled. */
static int pending_cancel(pending_t *p)
{
    if (p->started)
        return 1;
    p->cancelled = 1;
    if (p->op != NULL)
        sg_op_cancel(p->op);
    return 0;
}

static void on_pending_gone(void *data)
{
    pending_t *p = data;
    if (p->op != NULL && !p->started)
        sg_info("request %s: its client went away while it waited; dropped", p->rid[0] ? p->rid : "(unnamed)");
    pending_cancel(p);
}

/* The answer to a request given up before it ran. */
void sg__api_send_cancelled(h2o_req_t *req)
{
    sg_http_send_error(req, 409, "request_cancelled", "the request was cancelled before it started");
}

/* An execution named by the gateway: X-Sandgate-Request-Id (1 to 64 of
 * [0-9a-zA-Z_-]), so that it can be cancelled while it waits. */
void sg__api_pending_name(pending_t *p, h2o_req_t *req)
{
    ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-sandgate-request-id"), -1);
    if (i < 0)
        return;
    h2o_iovec_t v = req->headers.entries[i].value;
    if (v.len == 0 || v.len >= sizeof(p->rid))
        return;
    for (size_t k = 0; k < v.len; k++)
        if (!((v.base[k] >= '0' && v.base[k] <= '9') || (v.base[k] >= 'a' && v.base[k] <= 'z') ||
              (v.base[k] >= 'A' && v.base[k] <= 'Z') || v.base[k] == '_' || v.base[k] == '-'))
            return;
    memcpy(p->rid, v.base, v.len);
    p->rid[v.len] = '\0';
    h2o_linklist_insert(&named, &p->link);
}

/* DELETE /requests/{rid} */
int sg__api_delete_request(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    h2o_iovec_t rid = m->arg[0];
    pending_t *p = NULL;
    for (h2o_linklist_t *l = named.next; l != &named; l = l->next) {
        pending_t *q = H2O_STRUCT_FROM_MEMBER(pending_t, link, l);
        if (strlen(q->rid) == rid.len && memcmp(q->rid, rid.base, rid.len) == 0) {
            p = q;
            break;
        }
    }
    if (p == NULL) {
        sg_http_send_error(req, 404, "no_such_request", "no request with id \"%.*s\" waits or runs",
                           (int)(rid.len > 64 ? 64 : rid.len), rid.base);
        return 0;
    }
    if (pending_cancel(p) != 0) {
        sg_http_send_error(req, 409, "request_started", "the request has started; it runs to its end");
        return 0;
    }
    json_object *o = json_object_new_object();
    json_object_object_add(o, "status", json_object_new_string("cancelled"));
    sg_http_send_json(req, 200, o);
    return 0;
}

/* ---- helpers ---------------------------------------------------------------- */

void sg__api_send_verr(h2o_req_t *req, const sg_verr_t *e)
{
    sg_http_send_error(req, e->status, e->code, "%s", e->detail);
}

/* A session or an installer could not start: 503s (no_capacity, at_capacity,
 * docker_unavailable) say when to try again. */
void sg__api_send_start_failure(h2o_req_t *req, int status, const char *code, const char *detail)
{
    if (status == 503) {
        char v[16];
        snprintf(v, sizeof(v), "%d", SG_CAPACITY_RETRY_AFTER_S);
        sg_http_add_header(req, "retry-after", v);
    }
    sg_http_send_error(req, status, code, "%s", detail);
}

void sg__api_send_lib_failure(h2o_req_t *req, const sg_lib_result_t *r)
{
    sg__api_send_start_failure(req, r->http_status,
                               r->http_status == 504   ? "sandbox_timeout"
                               : r->http_status == 503 ? "no_capacity"
                                                       : "sandbox_failed",
                               r->message);
}

json_object *sg__api_parse_body(h2o_req_t *req)
{
    char err[256];
    json_object *o = sg_json_parse_object(req->entity.base, req->entity.len, err, sizeof(err));
    if (o == NULL)
        sg_http_send_error(req, 400, "bad_json", "%s", err);
    return o;
}

sg_session_t *sg__api_find_session(h2o_req_t *req, h2o_iovec_t id)
{
    sg_session_t *s = sg_session_find(id.base, id.len);
    if (s == NULL && sg_adopt_is_lost(id.base, id.len))
        sg_http_send_error(req, 404, "session_lost",
                           "the sandbox of session \"%.*s\" was lost when its proxy restarted; its state is gone",
                           (int)id.len, id.base);
    else if (s == NULL)
        sg_http_send_error(req, 404, "no_such_session", "no session with id \"%.*s\"", (int)(id.len > 64 ? 64 : id.len),
                           id.base);
    return s;
}

/* The failure of an op as an HTTP error; 0 if the op did not fail. */
int sg__api_send_op_failure(h2o_req_t *req, sg_op_t *op)
{
    if (!op->failed)
        return 0;
    if (op->fail_status == 409)
        sg__api_send_cancelled(req);
    else if (op->fail_status == 404)
        sg_http_send_error(req, 404, "session_lost", "%s", op->errmsg);
    else if (op->fail_status == 504)
        sg_http_send_error(req, 504, "sandbox_timeout", "%s", op->errmsg);
    else
        sg_http_send_error(req, 502, "sandbox_failed", "%s", op->errmsg);
    return 1;
}
