/*
 * admin.c — the admin API, behind SANDGATE_ADMIN_TOKEN:
 *
 *   GET    /admin/tenants                     tenants with their quotas
 *   POST   /admin/tenants {"name", quota...}  create
 *   GET    /admin/tenants/{name}
 *   PATCH  /admin/tenants/{name} {quota...}   change quotas
 *   POST   /admin/tenants/{name}/tokens {"label"}   issue: {"token": ...} (shown once)
 *   GET    /admin/tenants/{name}/tokens       public ids, never secrets
 *   DELETE /admin/tokens/{public_id}          revoke, effective at once
 *   GET    /admin/sessions[?tenant=NAME]      live sessions with deadlines
 *   DELETE /admin/sessions/{id}               force-close
 *   GET    /admin/usage?tenant=NAME[&from=UNIX&to=UNIX]   totals and rows
 *   DELETE /admin/tenants/{name}              delete: sessions closed, templates removed (lifecycle/purge.c)
 *   GET    /admin/templates[?tenant=NAME]     templates (handler/templates.c)
 *   DELETE /admin/templates/{name}            remove one
 *
 * The admin router (routes.c) checks the admin token before any of these.
 */
#include "close.h"
#include "credentials.h"
#include "db.h"
#include "fields.h"
#include "gateway.h"
#include "handlers.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "metrics.h"
#include "purge.h"
#include "templates.h"
#include "throttle.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct admin_job admin_job_t;
struct admin_job {
    sg_gw_job_t job;
    sg_http_hold_t *hold;
    void (*fn)(admin_job_t *j, sg_store_t *st);
    char name[SG_TENANT_NAME_MAX + 1];
    char arg[128];
    json_object *body;
    double from, to;
    /* reply, made on the DB thread, sent on the loop: res.status with reply,
     * or the error in res */
    sg_http_err_t res;
    json_object *reply;
};

static void admin_free(admin_job_t *j)
{
    sg_http_hold_release(j->hold);
    json_object_put(j->body);
    json_object_put(j->reply);
    free(j);
}

/* Applies the quota fields present in body to t, with the store's own
 * parsing and ranges. 0, or -1 with j failed (400 naming the field). */
static int apply_quotas(admin_job_t *j, json_object *body, sg_tenant_t *t)
{
    char err[256];
    if (sg_tenant_set_json(t, body, err, sizeof(err)) != 0) {
        sg_http_err_set(&j->res, 400, "bad_field", "%s", err);
        return -1;
    }
    return 0;
}

static void add_tenant(const sg_tenant_t *t, void *data)
{
    json_object_array_add(data, sg_tenant_to_json(t));
}

static void tenants_list(admin_job_t *j, sg_store_t *st)
{
    json_object *arr = json_object_new_array();
    if (sg_store_tenant_list(st, add_tenant, arr, j->job.err, sizeof(j->job.err)) != 0) {
        json_object_put(arr);
        sg_http_err_set(&j->res, 500, "internal", "%s", j->job.err);
        return;
    }
    j->reply = json_object_new_object();
    json_object_object_add(j->reply, "tenants", arr);
}

static int find_tenant(admin_job_t *j, sg_store_t *st, sg_tenant_t *t)
{
    int rc = sg_store_tenant_by_name(st, j->name, t, j->job.err, sizeof(j->job.err));
    if (rc < 0)
        sg_http_err_set(&j->res, 500, "internal", "%s", j->job.err);
    else if (rc == 0)
        sg_http_err_set(&j->res, 404, "no_such_tenant", "no tenant named \"%s\"", j->name);
    return rc == 1 ? 0 : -1;
}

static void tenant_create(admin_job_t *j, sg_store_t *st)
{
    sg_tenant_t t, probe;
    const char *name;
    if (sg_json_get_str(j->body, "name", &name, NULL, j->res.detail, sizeof(j->res.detail)) != 1) {
        sg_http_err_set(&j->res, 400, "bad_field", "field \"name\" (a string) is required");
        return;
    }
    snprintf(j->name, sizeof(j->name), "%s", name);
    /* validate the quotas before creating anything */
    sg_tenant_defaults(&probe);
    if (apply_quotas(j, j->body, &probe) != 0)
        return;
    if (sg_store_tenant_by_name(st, name, &t, j->job.err, sizeof(j->job.err)) == 1) {
        sg_http_err_set(&j->res, 409, "tenant_exists", "a tenant named \"%s\" exists already", name);
        return;
    }
    if (sg_store_tenant_create(st, name, &t, j->job.err, sizeof(j->job.err)) != 0) {
        sg_http_err_set(&j->res, 400, "bad_field", "%s", j->job.err);
        return;
    }
    apply_quotas(j, j->body, &t);
    if (sg_store_tenant_update(st, &t, j->job.err, sizeof(j->job.err)) != 0) {
        sg_http_err_set(&j->res, 500, "internal", "%s", j->job.err);
        return;
    }
    j->res.status = 201;
    j->reply = sg_tenant_to_json(&t);
}

static void tenant_get(admin_job_t *j, sg_store_t *st)
{
    sg_tenant_t t;
    if (find_tenant(j, st, &t) == 0)
        j->reply = sg_tenant_to_json(&t);
}

static void tenant_patch(admin_job_t *j, sg_store_t *st)
{
    sg_tenant_t t;
    if (find_tenant(j, st, &t) != 0 || apply_quotas(j, j->body, &t) != 0)
        return;
    if (sg_store_tenant_update(st, &t, j->job.err, sizeof(j->job.err)) != 0) {
        sg_http_err_set(&j->res, 500, "internal", "%s", j->job.err);
        return;
    }
    j->reply = sg_tenant_to_json(&t);
}

static void token_create(admin_job_t *j, sg_store_t *st)
{
    sg_tenant_t t;
    sg_token_t tok;
    char secret[SG_TOKEN_MAX + 1];
    const char *label = "";
    if (find_tenant(j, st, &t) != 0)
        return;
    if (j->body != NULL && sg_json_get_str(j->body, "label", &label, NULL, j->res.detail, sizeof(j->res.detail)) < 0) {
        sg_http_err_set(&j->res, 400, "bad_field", "field \"label\" must be a string");
        return;
    }
    if (sg_store_token_create(st, t.id, label, secret, &tok, j->job.err, sizeof(j->job.err)) != 0) {
        sg_http_err_set(&j->res, 500, "internal", "%s", j->job.err);
        return;
    }
    j->res.status = 201;
    j->reply = json_object_new_object();
    json_object_object_add(j->reply, "token", json_object_new_string(secret));
    json_object_object_add(j->reply, "public_id", json_object_new_string(tok.public_id));
    json_object_object_add(j->reply, "tenant", json_object_new_string(t.name));
    json_object_object_add(j->reply, "label", json_object_new_string(tok.label));
}

static void add_token(const sg_token_t *t, void *data)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "public_id", json_object_new_string(t->public_id));
    json_object_object_add(o, "label", json_object_new_string(t->label));
    json_object_object_add(o, "created_at", json_object_new_int64(t->created_at));
    json_object_object_add(o, "revoked_at", t->revoked_at ? json_object_new_int64(t->revoked_at) : NULL);
    json_object_array_add(data, o);
}

static void token_list(admin_job_t *j, sg_store_t *st)
{
    sg_tenant_t t;
    json_object *arr;
    if (find_tenant(j, st, &t) != 0)
        return;
    arr = json_object_new_array();
    if (sg_store_token_list(st, t.id, add_token, arr, j->job.err, sizeof(j->job.err)) != 0) {
        json_object_put(arr);
        sg_http_err_set(&j->res, 500, "internal", "%s", j->job.err);
        return;
    }
    j->reply = json_object_new_object();
    json_object_object_add(j->reply, "tokens", arr);
}

static void token_revoke(admin_job_t *j, sg_store_t *st)
{
    int rc = sg_store_token_revoke(st, j->arg, j->job.err, sizeof(j->job.err));
    if (rc < 0) {
        sg_http_err_set(&j->res, 500, "internal", "%s", j->job.err);
    } else if (rc == 0) {
        sg_http_err_set(&j->res, 404, "no_such_token", "no token with public id \"%s\"", j->arg);
    } else {
        j->reply = json_object_new_object();
        json_object_object_add(j->reply, "status", json_object_new_string("revoked"));
    }
}

static void add_usage_row(const sg_usage_t *u, void *data)
{
    json_object_array_add(data, sg_gw_usage_row_json(u));
}

static void usage_get(admin_job_t *j, sg_store_t *st)
{
    sg_tenant_t t;
    sg_usage_total_t tot;
    json_object *rows;
    if (find_tenant(j, st, &t) != 0)
        return;
    if (sg_store_usage_total(st, t.id, j->from, j->to, &tot, j->job.err, sizeof(j->job.err)) != 0) {
        sg_http_err_set(&j->res, 500, "internal", "%s", j->job.err);
        return;
    }
    rows = json_object_new_array();
    if (sg_store_usage_list(st, t.id, j->from, j->to, 1000, add_usage_row, rows, j->job.err, sizeof(j->job.err)) != 0) {
        json_object_put(rows);
        sg_http_err_set(&j->res, 500, "internal", "%s", j->job.err);
        return;
    }
    j->reply = json_object_new_object();
    json_object_object_add(j->reply, "tenant", json_object_new_string(t.name));
    json_object_object_add(j->reply, "from", sg_json_new_double(j->from, 3));
    json_object_object_add(j->reply, "to", sg_json_new_double(j->to, 3));
    json_object_object_add(j->reply, "executions", json_object_new_int64(tot.executions));
    json_object_object_add(j->reply, "seconds", sg_json_new_double(tot.seconds, 6));
    json_object_object_add(j->reply, "output_bytes", json_object_new_int64(tot.output_bytes));
    json_object_object_add(j->reply, "timed_out", json_object_new_int64(tot.timed_out));
    json_object_object_add(j->reply, "rows", rows);
}

static void session_owner(admin_job_t *j, sg_store_t *st)
{
    sg_session_rec_t rec;
    int rc = sg_store_session_get(st, j->arg, &rec, j->job.err, sizeof(j->job.err));
    if (rc < 0)
        sg_http_err_set(&j->res, 500, "internal", "%s", j->job.err);
    else if (rc == 0 || rec.closed_at != 0)
        sg_http_err_set(&j->res, 404, "no_such_session", "no live session with id \"%s\"", j->arg);
    else
        j->from = (double)rec.tenant_id; /* handed to the loop */
}

static void tenant_id_of(admin_job_t *j, sg_store_t *st)
{
    sg_tenant_t t;
    if (j->name[0] == '\0')
        return;
    if (find_tenant(j, st, &t) == 0)
        j->from = (double)t.id;
}

static void job_fn(sg_gw_job_t *job, sg_store_t *st)
{
    admin_job_t *j = (admin_job_t *)job;
    j->res.status = 200;
    j->fn(j, st);
}

static void job_done(sg_gw_job_t *job)
{
    admin_job_t *j = (admin_job_t *)job;
    h2o_req_t *req = sg_http_hold_req(j->hold);
    if (job->rc != 0 && j->res.code == NULL) /* the database could not be opened */
        sg_http_err_set(&j->res, 500, "internal", "%s", job->err);
    if (req != NULL) {
        sg_metrics_request("admin", j->res.status);
        if (j->reply != NULL) {
            sg_http_send_json(req, j->res.status, j->reply);
            j->reply = NULL;
        } else {
            sg_http_send_error(req, j->res.status, j->res.code, "%s", j->res.detail);
        }
    }
    admin_free(j);
}

static admin_job_t *job_new(h2o_req_t *req, void (*fn)(admin_job_t *, sg_store_t *))
{
    admin_job_t *j = sg_xcalloc(1, sizeof(*j));
    j->hold = sg_http_hold(req);
    j->fn = fn;
    j->job.fn = job_fn;
    j->job.done = job_done;
    return j;
}

static int reply_error(h2o_req_t *req, int status, const char *code, const char *detail)
{
    sg_metrics_request("admin", status);
    sg_http_send_error(req, status, code, "%s", detail);
    return 0;
}

/* ---- live sessions (state, on the loop) ---- */

typedef struct {
    sg_http_hold_t *hold;
    int64_t tenant;
} list_ctx_t;

static void on_sessions_listed(void *data, int available, size_t n, const sg_live_session_t *list)
{
    list_ctx_t *c = data;
    h2o_req_t *req = sg_http_hold_req(c->hold);
    if (req != NULL) {
        if (!available) {
            reply_error(req, 503, "state_unavailable", "live session state is unavailable (Redis does not answer)");
        } else {
            json_object *o = json_object_new_object(), *arr = json_object_new_array();
            for (size_t i = 0; i < n; i++) {
                json_object *e = sg_gw_live_session_json(&list[i]);
                json_object_array_add(arr, e);
            }
            json_object_object_add(o, "sessions", arr);
            sg_metrics_request("admin", 200);
            sg_http_send_json(req, 200, o);
        }
    }
    sg_http_hold_release(c->hold);
    free(c);
}

static void sessions_tenant_done(sg_gw_job_t *job)
{
    admin_job_t *j = (admin_job_t *)job;
    h2o_req_t *req = sg_http_hold_req(j->hold);
    if (j->res.code != NULL || job->rc != 0) {
        job_done(job);
        return;
    }
    if (req != NULL) {
        list_ctx_t *c = sg_xcalloc(1, sizeof(*c));
        c->hold = sg_http_hold(req);
        sg_state_sessions_list(sg_gw.state, (int64_t)j->from, on_sessions_listed, c);
    }
    admin_free(j);
}

static void on_force_closed(void *data, int closed)
{
    admin_job_t *j = data;
    h2o_req_t *req = sg_http_hold_req(j->hold);
    if (req != NULL && !closed) {
        sg_metrics_request("admin", 502);
        sg_http_send_error(req, 502, "proxy_unavailable",
                           "the sandbox service did not confirm that the session's container is removed; the "
                           "session stays open and counted, and its close is retried until it does");
    } else if (req != NULL) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "status", json_object_new_string("closed"));
        sg_metrics_request("admin", 200);
        sg_http_send_json(req, 200, o);
    }
    admin_free(j);
}

static void force_close_done(sg_gw_job_t *job)
{
    admin_job_t *j = (admin_job_t *)job;
    if (j->res.code != NULL || job->rc != 0) {
        job_done(job);
        return;
    }
    sg_gw_close_session(j->arg, (int64_t)j->from, "admin", on_force_closed, j);
}

static json_object *admin_body(h2o_req_t *req)
{
    char err[256];
    json_object *o = sg_json_parse_object(req->entity.base, req->entity.len, err, sizeof(err));
    if (o == NULL)
        reply_error(req, 400, "bad_json", err);
    return o;
}

static void copy_seg(char *dst, size_t cap, h2o_iovec_t s)
{
    snprintf(dst, cap, "%.*s", (int)s.len, s.base);
}

/* A time query parameter (unix seconds): def when absent; -1 when it is not
 * a finite number from 0 to year 10000. */
static int query_time(h2o_req_t *req, const char *name, double def, double *out)
{
    h2o_iovec_t v = sg_http_query_param(req, name);
    if (v.base == NULL || v.len == 0) {
        *out = def;
        return 0;
    }
    return sg_gw_number_text(v.base, v.len, 0, 253402300800.0, out);
}

/* ---- tenants ---- */

int sg_gw_admin_on_tenants_list(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    sg_gw_db_submit(&job_new(req, tenants_list)->job);
    return 0;
}

int sg_gw_admin_on_tenant_create(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    json_object *body = admin_body(req);
    if (body == NULL)
        return 0;
    admin_job_t *j = job_new(req, tenant_create);
    j->body = body;
    sg_gw_db_submit(&j->job);
    return 0;
}

enum { BODY_NONE, BODY_REQUIRED, BODY_OPTIONAL };

/* A route on a tenant named in the path: one longer than a name can be is
 * no tenant; the JSON body read as asked (BODY_OPTIONAL: when there is one),
 * then fn runs on the DB thread with the name. Returns 0 (the h2o handler's
 * answer). */
static int tenant_route(h2o_req_t *req, const sg_route_match_t *m, void (*fn)(admin_job_t *, sg_store_t *),
                        int body_mode)
{
    json_object *body = NULL;
    if (m->arg[0].len > SG_TENANT_NAME_MAX)
        return reply_error(req, 404, "no_such_tenant", "no such tenant");
    if ((body_mode == BODY_REQUIRED || (body_mode == BODY_OPTIONAL && req->entity.len != 0)) &&
        (body = admin_body(req)) == NULL)
        return 0;
    admin_job_t *j = job_new(req, fn);
    j->body = body;
    copy_seg(j->name, sizeof(j->name), m->arg[0]);
    sg_gw_db_submit(&j->job);
    return 0;
}

int sg_gw_admin_on_tenant_get(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    return tenant_route(req, m, tenant_get, BODY_NONE);
}

int sg_gw_admin_on_tenant_patch(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    return tenant_route(req, m, tenant_patch, BODY_REQUIRED);
}

typedef struct {
    sg_http_hold_t *hold;
    char name[SG_TENANT_NAME_MAX + 1];
} delete_ctx_t;

static void on_tenant_deleted(void *data, int status, const char *code, const char *detail)
{
    delete_ctx_t *c = data;
    h2o_req_t *req = sg_http_hold_req(c->hold);
    if (req != NULL) {
        sg_metrics_request("admin", status);
        if (status == 200) {
            json_object *o = json_object_new_object();
            json_object_object_add(o, "status", json_object_new_string("deleted"));
            json_object_object_add(o, "name", json_object_new_string(c->name));
            sg_http_send_json(req, 200, o);
        } else {
            sg_http_send_error(req, status, code, "%s%s", detail,
                               status >= 500 ? " (the tenant is disabled; the gateway tries again)" : "");
        }
    }
    sg_http_hold_release(c->hold);
    free(c);
}

int sg_gw_admin_on_tenant_delete(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    h2o_iovec_t name = m->arg[0];
    if (name.len == 0 || name.len > SG_TENANT_NAME_MAX)
        return reply_error(req, 404, "no_such_tenant", "no such tenant");
    delete_ctx_t *c = sg_xcalloc(1, sizeof(*c));
    c->hold = sg_http_hold(req);
    copy_seg(c->name, sizeof(c->name), name);
    sg_gw_tenant_delete(c->name, on_tenant_deleted, c);
    return 0;
}

/* ---- tokens ---- */

int sg_gw_admin_on_tokens_list(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    return tenant_route(req, m, token_list, BODY_NONE);
}

int sg_gw_admin_on_token_create(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    return tenant_route(req, m, token_create, BODY_OPTIONAL);
}

int sg_gw_admin_on_token_revoke(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    admin_job_t *j = job_new(req, token_revoke);
    copy_seg(j->arg, sizeof(j->arg), m->arg[0]);
    sg_gw_db_submit(&j->job);
    return 0;
}

/* ---- live sessions ---- */

int sg_gw_admin_on_sessions_list(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    h2o_iovec_t t = sg_http_query_param(req, "tenant");
    admin_job_t *j = job_new(req, tenant_id_of);
    if (t.base != NULL)
        snprintf(j->name, sizeof(j->name), "%.*s", (int)t.len, t.base);
    j->job.done = sessions_tenant_done;
    sg_gw_db_submit(&j->job);
    return 0;
}

int sg_gw_admin_on_session_close(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    if (!sg_is_uuid(m->arg[0].base, m->arg[0].len))
        return reply_error(req, 404, "no_such_session", "no such session");
    admin_job_t *j = job_new(req, session_owner);
    copy_seg(j->arg, sizeof(j->arg), m->arg[0]);
    j->job.done = force_close_done;
    sg_gw_db_submit(&j->job);
    return 0;
}

/* ---- usage ---- */

int sg_gw_admin_on_usage(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    h2o_iovec_t t = sg_http_query_param(req, "tenant");
    if (t.base == NULL || t.len == 0 || t.len > SG_TENANT_NAME_MAX)
        return reply_error(req, 400, "bad_field", "query parameter \"tenant\" is required");
    admin_job_t *j = job_new(req, usage_get);
    snprintf(j->name, sizeof(j->name), "%.*s", (int)t.len, t.base);
    const char *bad = query_time(req, "to", (double)sg_wall_s() + 1, &j->to) != 0 ? "to"
                      : query_time(req, "from", j->to - 86400 - 1, &j->from) != 0 ? "from"
                                                                                  : NULL;
    if (bad != NULL) {
        char detail[160];
        admin_free(j);
        snprintf(detail, sizeof(detail), "query parameter \"%s\" must be a unix time in seconds (a finite number)",
                 bad);
        return reply_error(req, 400, "bad_field", detail);
    }
    sg_gw_db_submit(&j->job);
    return 0;
}
