/*
 * api_exec.c — the execution routes: POST /sessions/{id}/execute and
 * /commands, POST /execute (a one-shot session), their libraries, answers
 * as JSON or as Server-Sent Events; and POST /sessions/{id}/libraries
 * (docs/proxy-api.md).
 */
#include "api_routes.h"
#include "json.h"
#include "pool.h"
#include "log.h"
#include "usage_hdr.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* with_results: the rich results too (a streamed execution sent them as
 * display events: its result has "results": []). */
static json_object *exec_result_json(const sg_op_t *op, int with_results)
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
    json_object_object_add(
        o, "truncated",
        json_object_new_boolean((op->flags & (SG_AGENT_EXIT_STDOUT_TRUNCATED | SG_AGENT_EXIT_STDERR_TRUNCATED)) != 0));
    json_object_object_add(o, "reason", json_object_new_string(sg_agent_reason_name(op->reason)));
    json_object_object_add(o, "stage", json_object_new_string(op->stage[0] ? op->stage : "run"));
    json_object_object_add(o, "state", json_object_new_string(sg_agent_state_name(op->state)));
    sg_results_to_json(&op->results, o, with_results);
    if (op->signal != 0)
        json_object_object_add(o, "signal", json_object_new_int((int)op->signal));
    json_object_object_add(o, "runtime", json_object_new_string(sg_session_runtime(op->session)));
    return o;
}

/* What the run used, stated in the reply's X-Sandgate-Usage header
 * (usage_hdr.h) from the result about to be sent, so that the gateway
 * need not parse its body. */
static void add_usage_header(h2o_req_t *req, json_object *result)
{
    sg_usage_hdr_t u = {0};
    json_object *v;
    char value[SG_USAGE_HDR_MAX];
    if (json_object_object_get_ex(result, "wall_time", &v))
        u.wall_s = json_object_get_double(v);
    if (json_object_object_get_ex(result, "exit_code", &v))
        u.exit_code = json_object_get_int(v);
    if (json_object_object_get_ex(result, "timed_out", &v))
        u.timed_out = json_object_get_boolean(v);
    if (json_object_object_get_ex(result, "stdout", &v))
        u.output_bytes += json_object_get_string_len(v);
    if (json_object_object_get_ex(result, "stderr", &v))
        u.output_bytes += json_object_get_string_len(v);
    if (json_object_object_get_ex(result, "runtime", &v))
        snprintf(u.runtime, sizeof(u.runtime), "%s", json_object_get_string(v));
    sg_usage_hdr_format(&u, value, sizeof(value));
    sg_http_add_header(req, "X-Sandgate-Usage", value);
}

/* A result as the JSON reply, its usage stated in a header. */
static void send_result(h2o_req_t *req, json_object *result)
{
    add_usage_header(req, result);
    sg_http_send_json(req, 200, result);
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
    sg_results_t none;
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
    sg_results_init(&none, 0, 0, 0);
    sg_results_to_json(&none, o, 1);
    sg_results_free(&none);
    return o;
}

/* ---- streaming executions: Server-Sent Events --------------------------------
 * events: "stdout" and "stderr" with {"data": "..."} as output arrives,
 * "display" with one rich result ({"type","mime","data","main"}) as each is
 * kept, then one "result" (the execution result, its stdout and stderr empty
 * and its "results" [], since they were streamed; "results_truncated" and
 * "files" as ever) or one "error" ({"detail","code"}). */

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

    if (sg__api_pending_req(p) == NULL || len == 0)
        return;
    if (p->partial[stream - 1].n != 0) {
        size_t held = p->partial[stream - 1].n;
        joined = sg_xmalloc(held + len);
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

static void sse_on_result(sg_op_t *op, json_object *result)
{
    pending_t *p = op->data;

    if (sg__api_pending_req(p) != NULL)
        sg_http_stream_event(p->stream, "display", json_object_get(result));
}

static void sse_finish(pending_t *p, sg_op_t *op)
{
    if (sg__api_pending_req(p) == NULL)
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
        sg_http_stream_event(p->stream, "result", exec_result_json(op, 0));
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

/* An execution's answer: its result or failure, as JSON or as the end of
 * its event stream. */
static void exec_reply(pending_t *p, sg_op_t *op)
{
    h2o_req_t *req = sg__api_pending_req(p);
    p->op = NULL;
    if (p->stream != NULL)
        sse_finish(p, op);
    else if (req != NULL && !sg__api_send_op_failure(req, op))
        send_result(req, exec_result_json(op, 1));
}

static void on_exec_done(sg_op_t *op)
{
    pending_t *p = op->data;
    sg__api_metrics_exec(op);
    exec_reply(p, op);
    sg_op_free(op);
    sg__api_pending_free(p);
}

static void ephemeral_exec_done(sg_op_t *op);

/* Runs the execution once its libraries are there. */
static void start_exec(pending_t *p, sg_session_t *s, int is_command, sg_op_cb done)
{
    h2o_req_t *req = sg__api_pending_req(p);
    sg_op_t *op;
    if (p->cancelled) {
        if (req != NULL)
            sg__api_send_cancelled(req);
        if (done == ephemeral_exec_done)
            sg_session_close(s, NULL, NULL);
        sg__api_pending_free(p);
        return;
    }
    op = exec_op_for(s, p, is_command);
    if (op == NULL) {
        if (req != NULL)
            sg_http_send_error(req, 500, "internal", "out of memory");
        sg__api_pending_free(p);
        return;
    }
    if (req != NULL && (done == on_exec_done || done == ephemeral_exec_done) && wants_stream(req, p->body)) {
        p->stream = sg_http_stream_start(req, 200, "text/event-stream", SSE_MAX_QUEUED);
        op->on_output = sse_on_output;
        op->on_result = sse_on_result;
    }
    sg__api_pending_submit(p, op, done);
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
        h2o_req_t *req = sg__api_pending_req(w->p);
        if (req != NULL) {
            if (r->http_status != 200)
                sg__api_send_lib_failure(req, r);
            else
                send_result(req, libraries_failed_json(r));
        }
        if (w->ephemeral)
            sg_session_close(w->s, NULL, NULL);
        sg__api_pending_free(w->p);
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
    libs_wait_t *w = sg_xcalloc(1, sizeof(*w));
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

static int post_session_exec(sg_api_t *api, h2o_req_t *req, h2o_iovec_t id, int is_command)
{
    sg_verr_t e;
    sg_session_t *s = sg__api_find_session(req, id);
    json_object *body;
    if (s == NULL)
        return 0;
    if ((body = sg__api_parse_body(req)) == NULL)
        return 0;
    pending_t *p = sg__api_pending_new(req, api);
    p->body = body;
    if (sg_validate_exec(body, is_command ? "command" : "code", 0, s->limits.timeout_s, &api->policy, &p->ex, &e) !=
            0 ||
        (!is_command && sg_validate_libraries_for(s->lang, p->ex.libraries, &e) != 0) ||
        (!is_command && check_libraries(s, p->ex.libraries, &e) != 0)) {
        sg__api_send_verr(req, &e);
        sg__api_pending_free(p);
        return 0;
    }
    if (sg__api_pending_admit(p, req, s) != 0) {
        sg__api_pending_free(p);
        return 0;
    }
    sg__api_pending_name(p, req);
    if (is_command)
        start_exec(p, s, 1, on_exec_done);
    else
        run_with_libraries(p, s, 0, on_exec_done);
    return 0;
}

int sg__api_post_session_execute(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    return post_session_exec(app, req, m->arg[0], 0);
}

int sg__api_post_session_commands(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    return post_session_exec(app, req, m->arg[0], 1);
}

/* POST /sessions/{id}/libraries {"package","version"} (seed 004's pip_install) */
static void send_library_result(h2o_req_t *req, const sg_lib_result_t *r)
{
    if (req != NULL) {
        if (r->http_status != 200) {
            sg__api_send_lib_failure(req, r);
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
}

static void on_library_installed(void *data, const sg_lib_result_t *r)
{
    pending_t *p = data;
    send_library_result(sg__api_pending_req(p), r);
    sg__api_pending_free(p);
}

/* "package" and "version" of a library request, checked for lang (with
 * sg_lib_check, so the blocklist holds): 0, or -1 after answering 400. */
static int library_fields(h2o_req_t *req, json_object *body, const sg_lang_t *lang, int foreign, const char **name,
                          const char **version)
{
    char err[512];
    *name = *version = NULL;
    if (sg_json_get_str(body, "package", name, NULL, err, sizeof(err)) != 1 ||
        sg_json_get_str(body, "version", version, NULL, err, sizeof(err)) < 0) {
        sg_http_send_error(req, 400, "bad_field", "field \"package\" (a string) is required; \"version\" is a string");
        return -1;
    }
    if (foreign)
        snprintf(err, sizeof(err), "libraries cannot be installed in a custom image");
    if (foreign || sg_lib_check(lang, *name, *version, err, sizeof(err)) != 0) {
        sg_http_send_error(req, 400, "bad_library", "%s", err);
        return -1;
    }
    return 0;
}

int sg__api_post_session_libraries(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    sg_api_t *api = app;
    const char *name, *version;
    sg_session_t *s = sg__api_find_session(req, m->arg[0]);
    json_object *body;
    if (s == NULL)
        return 0;
    if ((body = sg__api_parse_body(req)) == NULL)
        return 0;
    if (library_fields(req, body, s->lang, s->foreign, &name, &version) != 0) {
        json_object_put(body);
        return 0;
    }
    pending_t *p = sg__api_pending_new(req, api);
    p->body = body;
    if (sg__api_pending_admit(p, req, s) != 0) {
        sg__api_pending_free(p);
        return 0;
    }
    sg_lib_install(s, name, version, on_library_installed, p);
    return 0;
}

/* POST /execute: a session of its own (from the pool when one is ready), one
 * execution, then its container is removed in the background. */
static void ephemeral_exec_done(sg_op_t *op)
{
    pending_t *p = op->data;
    sg_session_t *s = op->session;
    sg__api_metrics_exec(op);
    exec_reply(p, op);
    sg_session_ref(s);
    sg_op_free(op);
    sg_session_close(s, NULL, NULL);
    sg_session_unref(s);
    sg__api_pending_free(p);
}

static void ephemeral_ready(void *data, sg_session_t *s, int status, const char *code, const char *detail)
{
    pending_t *p = data;
    sg_verr_t e;
    h2o_req_t *req = sg__api_pending_req(p);
    if (s == NULL) {
        if (req != NULL)
            sg__api_send_start_failure(req, status, code, detail);
        sg__api_pending_free(p);
        return;
    }
    if (p->cancelled) {
        if (req != NULL)
            sg__api_send_cancelled(req);
        sg_session_close(s, NULL, NULL);
        sg_session_unref(s);
        sg__api_pending_free(p);
        return;
    }
    if (check_libraries(s, p->ex.libraries, &e) != 0) {
        if (req != NULL)
            sg__api_send_verr(req, &e);
        sg_session_close(s, NULL, NULL);
        sg_session_unref(s);
        sg__api_pending_free(p);
        return;
    }
    run_with_libraries(p, s, 1, ephemeral_exec_done);
    sg_session_unref(s); /* the ops hold their own references */
}

int sg__api_post_execute(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    sg_api_t *api = app;
    sg_verr_t e;
    sg_create_req_t cr = {0};
    json_object *body = sg__api_parse_body(req);
    if (body == NULL)
        return 0;
    pending_t *p = sg__api_pending_new(req, api);
    p->body = body;
    if (sg_validate_exec(body, "code", 1, api->policy.defaults.timeout_s, &api->policy, &p->ex, &e) != 0) {
        sg__api_send_verr(req, &e);
        sg__api_pending_free(p);
        return 0;
    }
    cr.lang = p->ex.lang;
    cr.runtime = p->ex.runtime;
    cr.limits = api->policy.defaults;
    sg__api_pending_name(p, req);
    sg_session_create(&cr, 1, ephemeral_ready, p);
    return 0;
}

/* POST /libraries {"lang","package","version"}: the install of
 * /sessions/{id}/libraries in a one-shot session of its own (from the pool
 * when one is ready), whose container is removed right after the reply —
 * what stays is the package in the store, from which later installs of the
 * same spec take it with no index request. */
typedef struct {
    pending_t *p;
    sg_session_t *s;            /* referenced while the install runs */
    const char *name, *version; /* in p->body */
} oneshot_lib_t;

static void on_oneshot_installed(void *data, const sg_lib_result_t *r)
{
    oneshot_lib_t *o = data;
    send_library_result(sg__api_pending_req(o->p), r);
    sg_session_close(o->s, NULL, NULL);
    sg_session_unref(o->s);
    sg__api_pending_free(o->p);
    free(o);
}

static void oneshot_lib_ready(void *data, sg_session_t *s, int status, const char *code, const char *detail)
{
    oneshot_lib_t *o = data;
    h2o_req_t *req = sg__api_pending_req(o->p);
    if (s == NULL || req == NULL) {
        if (s == NULL && req != NULL)
            sg__api_send_start_failure(req, status, code, detail);
        if (s != NULL) {
            sg_session_close(s, NULL, NULL);
            sg_session_unref(s);
        }
        sg__api_pending_free(o->p);
        free(o);
        return;
    }
    o->s = s; /* the reference the create gave; closed after the answer */
    sg_lib_install(s, o->name, o->version, on_oneshot_installed, o);
}

int sg__api_post_libraries(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    sg_api_t *api = app;
    const char *lname = "python", *name, *version;
    size_t llen = 6;
    char err[256];
    sg_create_req_t cr = {0};
    json_object *body = sg__api_parse_body(req);
    if (body == NULL)
        return 0;
    if (sg_json_get_str(body, "lang", &lname, &llen, err, sizeof(err)) < 0 ||
        (cr.lang = sg_lang_find(lname, llen)) == NULL) {
        sg_http_send_error(req, 400, "unknown_language", "field \"lang\": unknown language; known: %s",
                           sg_lang_names());
        json_object_put(body);
        return 0;
    }
    if (library_fields(req, body, cr.lang, 0, &name, &version) != 0) {
        json_object_put(body);
        return 0;
    }
    oneshot_lib_t *o = sg_xcalloc(1, sizeof(*o));
    o->p = sg__api_pending_new(req, api);
    o->p->body = body;
    o->name = name;
    o->version = version;
    cr.limits = api->policy.defaults;
    sg_session_create(&cr, 1, oneshot_lib_ready, o);
    return 0;
}
