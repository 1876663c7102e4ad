/*
 * api_sessions.c — the sessions routes: POST and GET /sessions, GET and
 * DELETE /sessions/{id} (docs/proxy-api.md).
 */
#include "api_routes.h"
#include "adopt.h"
#include "json.h"
#include "pool.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    case SG_SESSION_STARTING:
        return "starting";
    case SG_SESSION_ACTIVE:
        return "active";
    case SG_SESSION_CLOSING:
        return "closing";
    default:
        return "closed";
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

static void on_session_created(void *data, sg_session_t *s, int status, const char *code, const char *detail)
{
    pending_t *p = data;
    h2o_req_t *req = sg__api_pending_req(p);
    if (s == NULL) {
        if (req != NULL)
            sg__api_send_start_failure(req, status, code, detail);
    } else if (req != NULL && !sg_http_hold_gone(p->hold)) {
        sg_http_send_json(req, 200, session_json(s));
    } else {
        /* nobody is waiting for it: do not leave it behind */
        sg_session_close(s, NULL, NULL);
    }
    if (s != NULL)
        sg_session_unref(s);
    sg__api_pending_free(p);
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

int sg__api_post_sessions(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    sg_api_t *api = app;
    sg_create_req_t cr;
    sg_verr_t e;
    json_object *body = sg__api_parse_body(req);
    if (body == NULL)
        return 0;
    if (sg_validate_create(body, &api->policy, &cr, &e) != 0) {
        sg__api_send_verr(req, &e);
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
    pending_t *p = sg__api_pending_new(req, api);
    p->body = body; /* cr.image points into it */
    sg_session_create(&cr, 0, on_session_created, p);
    return 0;
}

static void add_id(sg_session_t *s, void *data)
{
    if (!s->ephemeral)
        json_object_array_add(data, json_object_new_string(s->id));
}

static void add_details(sg_session_t *s, void *data)
{
    if (!s->ephemeral)
        json_object_array_add(data, session_json(s));
}

int sg__api_get_sessions(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    json_object *o = json_object_new_object(), *arr = json_object_new_array();
    h2o_iovec_t details = sg_http_query_param(req, "details");
    sg_session_foreach(add_id, arr);
    json_object_object_add(o, "sessions", arr);
    if (details.base != NULL && h2o_memis(details.base, details.len, H2O_STRLIT("1"))) {
        arr = json_object_new_array();
        sg_session_foreach(add_details, arr);
        json_object_object_add(o, "details", arr);
    }
    sg_http_send_json(req, 200, o);
    return 0;
}

static void on_session_closed(void *data, const char *template_image, int64_t template_size, const char *err)
{
    pending_t *p = data;
    h2o_req_t *req = sg__api_pending_req(p);
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
    sg__api_pending_free(p);
}

int sg__api_get_session(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    sg_session_t *s = sg__api_find_session(req, m->arg[0]);
    if (s != NULL)
        sg_http_send_json(req, 200, session_json(s));
    return 0;
}

int sg__api_delete_session(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    sg_session_t *s;
    if (sg_session_find(m->arg[0].base, m->arg[0].len) == NULL && sg_adopt_forget_lost(m->arg[0].base, m->arg[0].len)) {
        /* lost at a restart: its container is gone already; closing it is
         * forgetting it */
        json_object *o = json_object_new_object();
        json_object_object_add(o, "status", json_object_new_string("closed"));
        sg_http_send_json(req, 200, o);
        return 0;
    }
    s = sg__api_find_session(req, m->arg[0]);
    if (s == NULL)
        return 0;
    if (s->keep_template) {
        /* the reply names the template, so it waits for the commit */
        sg_session_close(s, on_session_closed, sg__api_pending_new(req, app));
        return 0;
    }
    /* unlisted at once; the container is removed in the background */
    sg_session_close(s, NULL, NULL);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "status", json_object_new_string("closed"));
    sg_http_send_json(req, 200, o);
    return 0;
}
