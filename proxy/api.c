#include "api.h"
#include "capacity.h"
#include "docker.h"
#include "http.h"
#include "json.h"
#include "libraries.h"
#include "log.h"
#include "session.h"
#include "templates.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- requests that are answered later ---------------------------------------
 * A pending_t lives on the heap until the asynchronous work ends; it holds
 * the request (sg_http_hold), which may go away first: then the work
 * finishes, cleans up, and replies to nobody. */

typedef struct {
    sg_http_hold_t *hold;
    sg_api_t *api;
    sg_exec_req_t ex;
    json_object *body;  /* keeps ex's strings alive */
    char *path;         /* files routes: the path as given, for the reply */
    sg_http_stream_t *stream;  /* streaming executions */
    /* streamed stdout / stderr: the bytes of a UTF-8 sequence that the last
     * chunk began and did not finish (at most 3), held for the next one */
    struct {
        char b[4];
        size_t n;
    } partial[2];

    /* the request's place in a session's queue (below) */
    sg_session_t *slot;        /* the session whose waiting count it is in, or NULL */
    sg_op_t *op;               /* its op while submitted and not done */
    int started;               /* its op reached the agent: it runs to its end */
    int cancelled;             /* its client went, or DELETE /requests/{rid}, before it started */
    char rid[65];              /* X-Sandgate-Request-Id of an execution, "" if none */
    h2o_linklist_t link;       /* in `named` while rid is set */
} pending_t;

static void on_pending_gone(void *data);

static pending_t *pending_new(h2o_req_t *req, sg_api_t *api)
{
    pending_t *p = calloc(1, sizeof(*p));
    p->hold = sg_http_hold(req);
    sg_http_hold_watch(p->hold, on_pending_gone, p);
    p->api = api;
    return p;
}

static h2o_req_t *pending_req(pending_t *p)
{
    return sg_http_hold_req(p->hold);
}

static void pending_unslot(pending_t *p);

static void pending_free(pending_t *p)
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
static int pending_admit(pending_t *p, h2o_req_t *req, sg_session_t *s)
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
static void pending_submit(pending_t *p, sg_op_t *op, sg_op_cb done)
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
static void send_cancelled(h2o_req_t *req)
{
    sg_http_send_error(req, 409, "request_cancelled", "the request was cancelled before it started");
}

/* An execution named by the gateway: X-Sandgate-Request-Id (1 to 64 of
 * [0-9a-zA-Z_-]), so that it can be cancelled while it waits. */
static void pending_name(pending_t *p, h2o_req_t *req)
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
static int delete_request(h2o_req_t *req, h2o_iovec_t rid)
{
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

static void send_verr(h2o_req_t *req, const sg_verr_t *e)
{
    sg_http_send_error(req, e->status, e->code, "%s", e->detail);
}

/* A session or an installer could not start: 503s (no_capacity, at_capacity,
 * docker_unavailable) say when to try again. */
static void send_start_failure(h2o_req_t *req, int status, const char *code, const char *detail)
{
    if (status == 503) {
        char v[16];
        snprintf(v, sizeof(v), "%d", SG_CAPACITY_RETRY_AFTER_S);
        sg_http_add_header(req, "retry-after", v);
    }
    sg_http_send_error(req, status, code, "%s", detail);
}

static void send_lib_failure(h2o_req_t *req, const sg_lib_result_t *r)
{
    send_start_failure(req, r->http_status,
                       r->http_status == 504   ? "sandbox_timeout"
                       : r->http_status == 503 ? "no_capacity"
                                               : "sandbox_failed",
                       r->message);
}

static json_object *parse_body(h2o_req_t *req)
{
    char err[256];
    json_object *o = sg_json_parse_object(req->entity.base, req->entity.len, err, sizeof(err));
    if (o == NULL)
        sg_http_send_error(req, 400, "bad_json", "%s", err);
    return o;
}

static sg_session_t *find_session(h2o_req_t *req, h2o_iovec_t id)
{
    sg_session_t *s = sg_session_find(id.base, id.len);
    if (s == NULL)
        sg_http_send_error(req, 404, "no_such_session", "no session with id \"%.*s\"", (int)(id.len > 64 ? 64 : id.len),
                           id.base);
    return s;
}

static json_object *limits_json(const sg_limits_t *l)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "timeout", sg_json_new_double(l->timeout_s, 3));
    json_object_object_add(o, "memory_mb", json_object_new_int64(l->memory_mb));
    json_object_object_add(o, "cpus", sg_json_new_double(l->cpus, 2));
    json_object_object_add(o, "network", json_object_new_boolean(l->network));
    json_object_object_add(o, "pids", json_object_new_int64(l->pids));
    json_object_object_add(o, "output_bytes", json_object_new_int64(l->output_bytes));
    return o;
}

static const char *state_name(sg_session_state_t st)
{
    switch (st) {
    case SG_SESSION_STARTING: return "starting";
    case SG_SESSION_ACTIVE: return "active";
    case SG_SESSION_CLOSING: return "closing";
    default: return "closed";
    }
}

static json_object *session_json(const sg_session_t *s)
{
    json_object *o = json_object_new_object();
    char t[32];
    json_object_object_add(o, "session_id", json_object_new_string(s->id));
    json_object_object_add(o, "status", json_object_new_string(state_name(s->state)));
    json_object_object_add(o, "lang", json_object_new_string(s->lang->name));
    json_object_object_add(o, "image", json_object_new_string(s->image));
    json_object_object_add(o, "runtime", json_object_new_string(sg_session_runtime(s)));
    sg_rfc3339(s->created_at, t);
    json_object_object_add(o, "created_at", json_object_new_string(t));
    sg_rfc3339(s->last_used_at, t);
    json_object_object_add(o, "last_used_at", json_object_new_string(t));
    json_object_object_add(o, "executions", json_object_new_int64((int64_t)s->executions));
    json_object_object_add(o, "waiting", json_object_new_int64((int64_t)s->waiting));
    json_object_object_add(o, "keep_template", json_object_new_boolean(s->keep_template));
    json_object_object_add(o, "limits", limits_json(&s->limits));
    return o;
}

/* The failure of an op as an HTTP error; 0 if the op did not fail. */
static int send_op_failure(h2o_req_t *req, sg_op_t *op)
{
    if (!op->failed)
        return 0;
    if (op->fail_status == 409)
        send_cancelled(req);
    else if (op->fail_status == 504)
        sg_http_send_error(req, 504, "sandbox_timeout", "%s", op->errmsg);
    else
        sg_http_send_error(req, 502, "sandbox_failed", "%s", op->errmsg);
    return 1;
}

static json_object *exec_result_json(const sg_op_t *op)
{
    json_object *o = json_object_new_object();
    int timed_out = op->reason == SG_AGENT_REASON_TIMEOUT;
    sg_json_add_bytes(o, "stdout", op->out[0].base != NULL ? op->out[0].base : "", op->out[0].len);
    sg_json_add_bytes(o, "stderr", op->out[1].base != NULL ? op->out[1].base : "", op->out[1].len);
    json_object_object_add(o, "exit_code", json_object_new_int(op->exit_code));
    json_object_object_add(o, "execution_time", sg_json_new_double((double)op->duration_us / 1e6, 6));
    json_object_object_add(o, "wall_time", sg_json_new_double((double)op->wall_us / 1e6, 6));
    json_object_object_add(o, "success",
                           json_object_new_boolean(op->reason == SG_AGENT_REASON_EXITED && op->exit_code == 0));
    json_object_object_add(o, "timed_out", json_object_new_boolean(timed_out));
    json_object_object_add(o, "truncated", json_object_new_boolean((op->flags & (SG_AGENT_EXIT_STDOUT_TRUNCATED |
                                                                                 SG_AGENT_EXIT_STDERR_TRUNCATED)) != 0));
    json_object_object_add(o, "reason", json_object_new_string(sg_agent_reason_name(op->reason)));
    json_object_object_add(o, "stage", json_object_new_string(op->stage[0] ? op->stage : "run"));
    json_object_object_add(o, "state", json_object_new_string(sg_agent_state_name(op->state)));
    if (op->signal != 0)
        json_object_object_add(o, "signal", json_object_new_int((int)op->signal));
    return o;
}

static sg_op_t *exec_op_for(sg_session_t *s, pending_t *p, int is_command)
{
    if (is_command)
        return sg_op_exec(s, NULL, NULL, p->ex.code, NULL, NULL, "", 0, p->ex.timeout_s);
    /* a compiled language compiles as the setup stage "compile"; a custom
     * image has no kernel files: its code runs one-shot */
    return sg_op_exec(s, s->lang->compile_cmd, s->lang->compile_cmd != NULL ? "compile" : NULL, s->lang->run_cmd,
                      s->lang->file_path, s->foreign ? NULL : s->lang->kernel_cmd, p->ex.code, p->ex.code_len,
                      p->ex.timeout_s);
}

/* The result of an execution that never ran because its libraries could
 * not be installed. */
static json_object *libraries_failed_json(const sg_lib_result_t *r)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "stdout", json_object_new_string(""));
    sg_json_add_bytes(o, "stderr", r->message, strlen(r->message));
    json_object_object_add(o, "exit_code", json_object_new_int(1));
    json_object_object_add(o, "execution_time", sg_json_new_double(0, 6));
    json_object_object_add(o, "wall_time", sg_json_new_double(0, 6));
    json_object_object_add(o, "success", json_object_new_boolean(0));
    json_object_object_add(o, "timed_out", json_object_new_boolean(0));
    json_object_object_add(o, "truncated", json_object_new_boolean(0));
    json_object_object_add(o, "reason", json_object_new_string("setup_failed"));
    json_object_object_add(o, "stage", json_object_new_string("libraries"));
    json_object_object_add(o, "state", json_object_new_string("none"));
    return o;
}

/* ---- routes ------------------------------------------------------------------ */

typedef struct {
    sg_job_t super;
    pending_t *p;
    int ok;
    char version[32], api[16], err[256];
} health_job_t;

static void health_work(sg_job_t *job)
{
    health_job_t *j = (health_job_t *)job;
    j->ok = sg_docker_ping(sg_docker_thread(), j->version, j->api, j->err, sizeof(j->err)) == 0;
}

static void health_done(sg_job_t *job)
{
    health_job_t *j = (health_job_t *)job;
    h2o_req_t *req = pending_req(j->p);
    if (req != NULL) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "status", json_object_new_string(j->ok ? "ok" : "degraded"));
        json_object_object_add(o, "docker", json_object_new_boolean(j->ok));
        if (j->ok) {
            json_object_object_add(o, "docker_version", json_object_new_string(j->version));
            json_object_object_add(o, "api_version", json_object_new_string(j->api));
        } else {
            json_object_object_add(o, "detail", json_object_new_string(j->err));
        }
        const sg_proxy_t *px = j->p->api->proxy;
        json_object_object_add(o, "runtime", json_object_new_string(sg_sessions_runtime()));
        if (px->runtime_warning != NULL && px->runtime_warning[0] != '\0')
            json_object_object_add(o, "warning", json_object_new_string(px->runtime_warning));
        json_object_object_add(o, "sessions", json_object_new_int64((int64_t)sg_session_count()));
        json_object_object_add(o, "containers", json_object_new_int64(sg_capacity_used()));
        json_object_object_add(o, "max_containers", json_object_new_int64(sg_capacity_max()));
        sg_http_send_json(req, j->ok ? 200 : 503, o);
    }
    pending_free(j->p);
    free(j);
}

static int get_health(sg_api_t *api, h2o_req_t *req)
{
    health_job_t *j = calloc(1, sizeof(*j));
    j->super.work = health_work;
    j->super.done = health_done;
    j->p = pending_new(req, api);
    sg_workq_submit(api->proxy->workq, &j->super);
    return 0;
}

static void on_session_created(void *data, sg_session_t *s, int status, const char *code, const char *detail)
{
    pending_t *p = data;
    h2o_req_t *req = pending_req(p);
    if (s == NULL) {
        if (req != NULL)
            send_start_failure(req, status, code, detail);
    } else if (req != NULL && !sg_http_hold_gone(p->hold)) {
        sg_http_send_json(req, 200, session_json(s));
    } else {
        /* nobody is waiting for it: do not leave it behind */
        sg_session_close(s, NULL, NULL);
    }
    if (s != NULL)
        sg_session_unref(s);
    pending_free(p);
}

/* An image a session may name: a template this proxy kept, or one the
 * operator's allow-list admits ("name:tag" exactly, or a prefix ending in
 * "*"). */
static int image_allowed(const sg_api_t *api, const char *image)
{
    const char *repo = api->proxy->template_repo, *p = api->image_allowlist;
    size_t rl = strlen(repo);
    if (strncmp(image, repo, rl) == 0 && image[rl] == ':')
        return 1;
    while (p != NULL && *p != '\0') {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (len != 0 && p[len - 1] == '*' ? strncmp(image, p, len - 1) == 0
                                          : strlen(image) == len && strncmp(image, p, len) == 0)
            return 1;
        p = comma != NULL ? comma + 1 : NULL;
    }
    return 0;
}

static int post_sessions(sg_api_t *api, h2o_req_t *req)
{
    sg_create_req_t cr;
    sg_verr_t e;
    json_object *body = parse_body(req);
    if (body == NULL)
        return 0;
    if (sg_validate_create(body, &api->policy, &cr, &e) != 0) {
        send_verr(req, &e);
        json_object_put(body);
        return 0;
    }
    if (cr.image != NULL && !image_allowed(api, cr.image)) {
        sg_http_send_error(req, 400, "image_not_allowed",
                           "field \"image\": \"%s\" is neither a template kept by this proxy (%s:<session id>) nor "
                           "admitted by the operator's allow-list",
                           cr.image, api->proxy->template_repo);
        json_object_put(body);
        return 0;
    }
    pending_t *p = pending_new(req, api);
    p->body = body; /* cr.image points into it */
    sg_session_create(&cr, 0, on_session_created, p);
    return 0;
}

static void add_id(sg_session_t *s, void *data)
{
    if (!s->ephemeral)
        json_object_array_add(data, json_object_new_string(s->id));
}

static int get_sessions(h2o_req_t *req)
{
    json_object *o = json_object_new_object(), *arr = json_object_new_array();
    sg_session_foreach(add_id, arr);
    json_object_object_add(o, "sessions", arr);
    sg_http_send_json(req, 200, o);
    return 0;
}

static void on_session_closed(void *data, const char *template_image, int64_t template_size, const char *err)
{
    pending_t *p = data;
    h2o_req_t *req = pending_req(p);
    if (req != NULL) {
        if (err != NULL) {
            sg_http_send_error(req, 500, "docker_error", "the session is closed, but: %s", err);
        } else {
            json_object *o = json_object_new_object();
            json_object_object_add(o, "status", json_object_new_string("closed"));
            if (template_image != NULL) {
                json_object *t = json_object_new_object();
                json_object_object_add(o, "template_image", json_object_new_string(template_image));
                json_object_object_add(t, "name", json_object_new_string(template_image));
                json_object_object_add(t, "size_bytes", json_object_new_int64(template_size));
                json_object_object_add(o, "template", t);
            }
            sg_http_send_json(req, 200, o);
        }
    }
    pending_free(p);
}

/* ---- streaming executions: Server-Sent Events --------------------------------
 * events: "stdout" and "stderr" with {"data": "..."} as output arrives, then
 * one "result" (the execution result, its stdout and stderr empty: they were
 * streamed) or one "error" ({"detail","code"}). */

#define SSE_MAX_QUEUED (8u << 20)

static void sse_output(pending_t *p, int stream, const char *data, size_t len)
{
    json_object *o = json_object_new_object();
    sg_json_add_bytes(o, "data", data, len);
    sg_http_stream_event(p->stream, stream == 1 ? "stdout" : "stderr", o);
}

/* Each chunk goes out at once as one event, whatever its size; only the
 * bytes of a multibyte character it cuts in two (3 at most) wait for the
 * next chunk, so that every event is valid UTF-8 and nothing is lost. */
static void sse_on_output(sg_op_t *op, int stream, const uint8_t *data, size_t len)
{
    pending_t *p = op->data;
    char *joined = NULL;
    const char *s = (const char *)data;
    size_t n = len;

    if (pending_req(p) == NULL || len == 0)
        return;
    if (p->partial[stream - 1].n != 0) {
        size_t held = p->partial[stream - 1].n;
        if ((joined = malloc(held + len)) == NULL) {
            sg_http_stream_abort(p->stream);
            return;
        }
        memcpy(joined, p->partial[stream - 1].b, held);
        memcpy(joined + held, data, len);
        s = joined;
        n = held + len;
    }
    size_t complete = sg_utf8_complete_len(s, n);
    p->partial[stream - 1].n = n - complete; /* <= 3 */
    memcpy(p->partial[stream - 1].b, s + complete, n - complete);
    if (complete != 0)
        sse_output(p, stream, s, complete);
    free(joined);
}

static void sse_finish(pending_t *p, sg_op_t *op)
{
    if (pending_req(p) == NULL)
        return;
    for (int i = 0; i < 2; i++)
        if (p->partial[i].n != 0) /* a sequence the output never finished */
            sse_output(p, i + 1, p->partial[i].b, p->partial[i].n);
    if (op->failed) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "detail", json_object_new_string(op->errmsg));
        json_object_object_add(o, "code",
                               json_object_new_string(op->fail_status == 504   ? "sandbox_timeout"
                                                      : op->fail_status == 409 ? "request_cancelled"
                                                                               : "sandbox_failed"));
        sg_http_stream_event(p->stream, "error", o);
    } else {
        sg_buf_reset(&op->out[0]);
        sg_buf_reset(&op->out[1]);
        sg_http_stream_event(p->stream, "result", exec_result_json(op));
    }
    sg_http_stream_finish(p->stream);
}

static int wants_stream(h2o_req_t *req, json_object *body)
{
    json_object *v;
    if (json_object_object_get_ex(body, "stream", &v) && json_object_get_boolean(v))
        return 1;
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_ACCEPT, -1);
    return i >= 0 && h2o_strstr(req->headers.entries[i].value.base, req->headers.entries[i].value.len,
                                H2O_STRLIT("text/event-stream")) != SIZE_MAX;
}

static void on_exec_done(sg_op_t *op)
{
    pending_t *p = op->data;
    h2o_req_t *req = pending_req(p);
    p->op = NULL;
    if (p->stream != NULL)
        sse_finish(p, op);
    else if (req != NULL && !send_op_failure(req, op))
        sg_http_send_json(req, 200, exec_result_json(op));
    sg_op_free(op);
    pending_free(p);
}

static void ephemeral_exec_done(sg_op_t *op);

/* Runs the execution once its libraries are there. */
static void start_exec(pending_t *p, sg_session_t *s, int is_command, sg_op_cb done)
{
    h2o_req_t *req = pending_req(p);
    sg_op_t *op;
    if (p->cancelled) {
        if (req != NULL)
            send_cancelled(req);
        if (done == ephemeral_exec_done)
            sg_session_close(s, NULL, NULL);
        pending_free(p);
        return;
    }
    op = exec_op_for(s, p, is_command);
    if (op == NULL) {
        if (req != NULL)
            sg_http_send_error(req, 500, "internal", "out of memory");
        pending_free(p);
        return;
    }
    if (req != NULL && (done == on_exec_done || done == ephemeral_exec_done) && wants_stream(req, p->body)) {
        p->stream = sg_http_stream_start(req, 200, "text/event-stream", SSE_MAX_QUEUED);
        op->on_output = sse_on_output;
    }
    pending_submit(p, op, done);
}

typedef struct {
    pending_t *p;
    sg_session_t *s;
    sg_op_cb done;
    int ephemeral;
} libs_wait_t;

static void on_libs_ready(void *data, const sg_lib_result_t *r)
{
    libs_wait_t *w = data;
    if (r->success || w->p->cancelled) {
        start_exec(w->p, w->s, 0, w->done);
    } else {
        h2o_req_t *req = pending_req(w->p);
        if (req != NULL) {
            if (r->http_status != 200)
                send_lib_failure(req, r);
            else
                sg_http_send_json(req, 200, libraries_failed_json(r));
        }
        if (w->ephemeral)
            sg_session_close(w->s, NULL, NULL);
        pending_free(w->p);
    }
    sg_session_unref(w->s);
    free(w);
}

/* Makes the request's libraries importable (installing what is missing),
 * then runs the code; done gets the execution op. */
static void run_with_libraries(pending_t *p, sg_session_t *s, int ephemeral, sg_op_cb done)
{
    if (p->ex.libraries == NULL) {
        start_exec(p, s, 0, done);
        return;
    }
    libs_wait_t *w = calloc(1, sizeof(*w));
    w->p = p;
    w->s = s;
    w->done = done;
    w->ephemeral = ephemeral;
    sg_session_ref(s);
    sg_lib_ensure(s, p->ex.libraries, on_libs_ready, w);
}

static int check_libraries(sg_session_t *s, json_object *libs, sg_verr_t *e)
{
    if (s->foreign && libs != NULL && json_object_array_length(libs) != 0) {
        e->status = 400;
        e->code = "bad_library";
        snprintf(e->detail, sizeof(e->detail), "libraries cannot be installed in a custom image");
        return -1;
    }
    for (size_t i = 0; libs != NULL && i < json_object_array_length(libs); i++) {
        if (sg_lib_check(s->lang, json_object_get_string(json_object_array_get_idx(libs, i)), NULL, e->detail,
                         sizeof(e->detail)) != 0) {
            e->status = 400;
            e->code = "bad_library";
            return -1;
        }
    }
    return 0;
}

static int post_session_exec(sg_api_t *api, h2o_req_t *req, sg_session_t *s, int is_command)
{
    sg_verr_t e;
    json_object *body = parse_body(req);
    if (body == NULL)
        return 0;
    pending_t *p = pending_new(req, api);
    p->body = body;
    if (sg_validate_exec(body, is_command ? "command" : "code", 0, s->limits.timeout_s, &api->policy, &p->ex, &e) != 0 ||
        (!is_command && sg_validate_libraries_for(s->lang, p->ex.libraries, &e) != 0) ||
        (!is_command && check_libraries(s, p->ex.libraries, &e) != 0)) {
        send_verr(req, &e);
        pending_free(p);
        return 0;
    }
    if (pending_admit(p, req, s) != 0) {
        pending_free(p);
        return 0;
    }
    pending_name(p, req);
    if (is_command)
        start_exec(p, s, 1, on_exec_done);
    else
        run_with_libraries(p, s, 0, on_exec_done);
    return 0;
}

/* POST /sessions/{id}/libraries {"package","version"} (seed 004's pip_install) */
static void on_library_installed(void *data, const sg_lib_result_t *r)
{
    pending_t *p = data;
    h2o_req_t *req = pending_req(p);
    if (req != NULL) {
        if (r->http_status != 200) {
            send_lib_failure(req, r);
        } else {
            json_object *o = json_object_new_object();
            json_object_object_add(o, "success", json_object_new_boolean(r->success));
            sg_json_add_bytes(o, "message", r->message, strlen(r->message));
            json_object_object_add(o, "installed_version",
                                   r->success ? json_object_new_string(r->installed_version) : NULL);
            json_object_object_add(o, "installation_time", sg_json_new_double(r->installation_time, 3));
            json_object_object_add(o, "from_store", json_object_new_boolean(r->from_store));
            sg_http_send_json(req, 200, o);
        }
    }
    pending_free(p);
}

static int post_session_library(sg_api_t *api, h2o_req_t *req, sg_session_t *s)
{
    const char *name = NULL, *version = NULL;
    char err[512];
    json_object *body = parse_body(req);
    if (body == NULL)
        return 0;
    if (sg_json_get_str(body, "package", &name, NULL, err, sizeof(err)) != 1 ||
        sg_json_get_str(body, "version", &version, NULL, err, sizeof(err)) < 0) {
        sg_http_send_error(req, 400, "bad_field", "field \"package\" (a string) is required; \"version\" is a string");
        json_object_put(body);
        return 0;
    }
    if (s->foreign)
        snprintf(err, sizeof(err), "libraries cannot be installed in a custom image");
    if (s->foreign || sg_lib_check(s->lang, name, version, err, sizeof(err)) != 0) {
        sg_http_send_error(req, 400, "bad_library", "%s", err);
        json_object_put(body);
        return 0;
    }
    pending_t *p = pending_new(req, api);
    p->body = body;
    if (pending_admit(p, req, s) != 0) {
        pending_free(p);
        return 0;
    }
    sg_lib_install(s, name, version, on_library_installed, p);
    return 0;
}

static void on_put_done(sg_op_t *op)
{
    pending_t *p = op->data;
    h2o_req_t *req = pending_req(p);
    p->op = NULL;
    if (req != NULL && !send_op_failure(req, op)) {
        if (op->agent_err != 0) {
            int st = op->agent_err == SG_AGENT_ERR_PATH || op->agent_err == SG_AGENT_ERR_BAD_REQUEST ? 400
                     : op->agent_err == SG_AGENT_ERR_TOO_LARGE                                        ? 413
                     : op->agent_err == SG_AGENT_ERR_NOT_FOUND                                        ? 404
                                                                                                      : 500;
            const char *code = st == 400 ? "bad_path" : st == 413 ? "too_large" : st == 404 ? "no_such_file" : "io_error";
            sg_http_send_error(req, st, code, "%s", op->errmsg);
        } else if (op->kind == SG_OP_GET_FILE) {
            sg_http_send_body(req, 200, "application/octet-stream", op->file.base != NULL ? op->file.base : "",
                              op->file.len);
        } else {
            json_object *o = json_object_new_object();
            json_object_object_add(o, "path", json_object_new_string(p->path));
            json_object_object_add(o, "size", json_object_new_int64((int64_t)op->ok_value));
            sg_http_send_json(req, 200, o);
        }
    }
    sg_op_free(op);
    pending_free(p);
}

static int session_files(sg_api_t *api, h2o_req_t *req, sg_session_t *s)
{
    char path[SG_MAX_PATH + 1];
    sg_verr_t e;
    h2o_iovec_t q = sg_http_query_param(req, "path");
    long max = api->proxy->max_file_bytes;
    sg_op_t *op;

    if (sg_validate_path(q.base, q.len, path, sizeof(path), &e) != 0) {
        send_verr(req, &e);
        return 0;
    }
    if (sg_http_method_is(req, "PUT")) {
        if ((long)req->entity.len > max) {
            sg_http_send_error(req, 413, "too_large", "the file is larger than the limit of %ld bytes", max);
            return 0;
        }
        op = sg_op_put_file(s, path, req->entity.base, req->entity.len);
    } else {
        op = sg_op_get_file(s, path, (uint32_t)max);
    }
    if (op == NULL) {
        sg_http_send_error(req, 500, "internal", "out of memory");
        return 0;
    }
    pending_t *p = pending_new(req, api);
    p->path = strdup(q.base);
    if (pending_admit(p, req, s) != 0) {
        sg_op_free(op);
        pending_free(p);
        return 0;
    }
    pending_submit(p, op, on_put_done);
    return 0;
}

/* POST /execute: a session of its own (from the pool when one is ready), one
 * execution, then its container is removed in the background. */
static void ephemeral_exec_done(sg_op_t *op)
{
    pending_t *p = op->data;
    sg_session_t *s = op->session;
    h2o_req_t *req = pending_req(p);
    p->op = NULL;
    if (p->stream != NULL)
        sse_finish(p, op);
    else if (req != NULL && !send_op_failure(req, op))
        sg_http_send_json(req, 200, exec_result_json(op));
    sg_session_ref(s);
    sg_op_free(op);
    sg_session_close(s, NULL, NULL);
    sg_session_unref(s);
    pending_free(p);
}

static void ephemeral_ready(void *data, sg_session_t *s, int status, const char *code, const char *detail)
{
    pending_t *p = data;
    sg_verr_t e;
    h2o_req_t *req = pending_req(p);
    if (s == NULL) {
        if (req != NULL)
            send_start_failure(req, status, code, detail);
        pending_free(p);
        return;
    }
    if (p->cancelled) {
        if (req != NULL)
            send_cancelled(req);
        sg_session_close(s, NULL, NULL);
        sg_session_unref(s);
        pending_free(p);
        return;
    }
    if (check_libraries(s, p->ex.libraries, &e) != 0) {
        if (req != NULL)
            send_verr(req, &e);
        sg_session_close(s, NULL, NULL);
        sg_session_unref(s);
        pending_free(p);
        return;
    }
    run_with_libraries(p, s, 1, ephemeral_exec_done);
    sg_session_unref(s); /* the ops hold their own references */
}

static int post_execute(sg_api_t *api, h2o_req_t *req)
{
    sg_verr_t e;
    sg_create_req_t cr = {0};
    json_object *body = parse_body(req);
    if (body == NULL)
        return 0;
    pending_t *p = pending_new(req, api);
    p->body = body;
    if (sg_validate_exec(body, "code", 1, api->policy.defaults.timeout_s, &api->policy, &p->ex, &e) != 0) {
        send_verr(req, &e);
        pending_free(p);
        return 0;
    }
    cr.lang = p->ex.lang;
    cr.limits = api->policy.defaults;
    pending_name(p, req);
    sg_session_create(&cr, 1, ephemeral_ready, p);
    return 0;
}

static int method_not_allowed(h2o_req_t *req, const char *allowed)
{
    sg_http_add_header(req, "allow", allowed);
    sg_http_send_error(req, 405, "method_not_allowed", "%.*s is not allowed here; allowed: %s", (int)req->method.len,
                       req->method.base, allowed);
    return 0;
}

int sg_api_handle(void *app, h2o_req_t *req)
{
    sg_api_t *api = app;
    h2o_iovec_t path = sg_http_path(req), seg[4];
    int n = sg_http_split_path(path.base, path.len, seg, 4);
    sg_session_t *s;

#define IS(i, lit) h2o_memis(seg[i].base, seg[i].len, H2O_STRLIT(lit))
#define METHOD(m) sg_http_method_is(req, m)

    if (n == 0) {
        if (!METHOD("GET") && !METHOD("HEAD"))
            return method_not_allowed(req, "GET");
        json_object *o = json_object_new_object();
        json_object_object_add(o, "status", json_object_new_string("ok"));
        sg_http_send_json(req, 200, o);
        return 0;
    }
    if (n == 1 && IS(0, "health"))
        return METHOD("GET") ? get_health(api, req) : method_not_allowed(req, "GET");
    if (n == 1 && IS(0, "execute"))
        return METHOD("POST") ? post_execute(api, req) : method_not_allowed(req, "POST");
    if (n == 2 && IS(0, "requests"))
        return METHOD("DELETE") ? delete_request(req, seg[1]) : method_not_allowed(req, "DELETE");
    if (n >= 1 && n <= 2 && IS(0, "templates"))
        return sg_templates_handle(api->proxy, req, seg, n);
    if (n == 1 && IS(0, "sessions")) {
        if (METHOD("GET"))
            return get_sessions(req);
        if (METHOD("POST"))
            return post_sessions(api, req);
        return method_not_allowed(req, "GET, POST");
    }
    if (n >= 2 && n <= 3 && IS(0, "sessions")) {
        const char *allowed = n == 2 ? "GET, DELETE" : IS(2, "files") ? "GET, PUT" : "POST";
        if (n == 3 && !IS(2, "execute") && !IS(2, "commands") && !IS(2, "files") && !IS(2, "libraries"))
            goto NotFound;
        if (n == 2 && !METHOD("GET") && !METHOD("DELETE"))
            return method_not_allowed(req, allowed);
        if (n == 3 && IS(2, "files") && !METHOD("GET") && !METHOD("PUT"))
            return method_not_allowed(req, allowed);
        if (n == 3 && !IS(2, "files") && !METHOD("POST"))
            return method_not_allowed(req, allowed);
        if ((s = find_session(req, seg[1])) == NULL)
            return 0;
        if (n == 2 && METHOD("GET")) {
            sg_http_send_json(req, 200, session_json(s));
            return 0;
        }
        if (n == 2 && s->keep_template) {
            /* the reply names the template, so it waits for the commit */
            sg_session_close(s, on_session_closed, pending_new(req, api));
            return 0;
        }
        if (n == 2) {
            /* unlisted at once; the container is removed in the background */
            sg_session_close(s, NULL, NULL);
            json_object *o = json_object_new_object();
            json_object_object_add(o, "status", json_object_new_string("closed"));
            sg_http_send_json(req, 200, o);
            return 0;
        }
        if (IS(2, "files"))
            return session_files(api, req, s);
        if (IS(2, "libraries"))
            return post_session_library(api, req, s);
        return post_session_exec(api, req, s, IS(2, "commands"));
    }
NotFound:
    sg_http_send_error(req, 404, "not_found", "no route for %.*s %.*s", (int)req->method.len, req->method.base,
                       (int)(path.len > 200 ? 200 : path.len), path.base);
    return 0;
#undef IS
#undef METHOD
}
