/*
 * templates.c — tenants' templates as records (templates.h).
 */
#include "templates.h"
#include "placement.h"
#include "db.h"
#include "gateway.h"
#include "log.h"
#include "metrics.h"
#include "upstream.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- admitting a create ---- */

typedef struct {
    sg_gw_job_t job;
    int64_t tenant;
    long max;
    char image[256];
    int has_image, keep;
    int status;
    const char *code;
    char detail[400];
    int64_t row;
    char proxy[256]; /* the template's: the proxy of the session that kept it */
    sg_gw_tpl_admit_cb cb;
    void *data;
} admit_t;

/* A template lives on the engine of the proxy whose session kept it. */
static void template_proxy(sg_store_t *st, const sg_template_rec_t *t, char *out, size_t outlen)
{
    sg_session_rec_t rec;
    char err[256];
    out[0] = '\0';
    if (t->session_id[0] && sg_store_session_get(st, t->session_id, &rec, err, sizeof(err)) == 1)
        snprintf(out, outlen, "%s", rec.proxy);
}

static void admit_fn(sg_gw_job_t *job, sg_store_t *st)
{
    admit_t *a = (admit_t *)job;
    sg_template_rec_t t;
    int rc;

    if (a->has_image) {
        rc = sg_store_template_get(st, a->image, &t, job->err, sizeof(job->err));
        if (rc < 0) {
            job->rc = -1;
            return;
        }
        if (rc == 0 || t.tenant_id != a->tenant) {
            a->status = 404;
            a->code = "no_such_template";
            snprintf(a->detail, sizeof(a->detail), "field \"image\": no template named \"%s\"", a->image);
            return;
        }
        template_proxy(st, &t, a->proxy, sizeof(a->proxy));
    }
    if (a->keep) {
        rc = sg_store_template_reserve(st, a->tenant, a->max, SG_TEMPLATE_SLOT_GRACE_S, &a->row, job->err,
                                       sizeof(job->err));
        if (rc < 0) {
            job->rc = -1;
            return;
        }
        if (rc == 0) {
            a->status = 429;
            a->code = "quota_exceeded";
            snprintf(a->detail, sizeof(a->detail),
                     "the tenant has %ld templates and keep_template sessions, its limit (max_templates); delete one "
                     "with DELETE /templates/{name}",
                     a->max);
        }
    }
}

static void admit_done(sg_gw_job_t *job)
{
    admit_t *a = (admit_t *)job;
    if (job->rc != 0)
        a->cb(a->data, 500, "internal", job->err, 0, "");
    else
        a->cb(a->data, a->status, a->code, a->detail, a->row, a->proxy);
    free(a);
}

void sg_gw_templates_admit(const sg_tenant_t *t, const char *image, int keep, sg_gw_tpl_admit_cb cb, void *data)
{
    admit_t *a = sg_xcalloc(1, sizeof(*a));
    a->tenant = t->id;
    a->max = t->max_templates;
    if (image != NULL) {
        a->has_image = 1;
        snprintf(a->image, sizeof(a->image), "%s", image);
    }
    a->keep = keep;
    a->cb = cb;
    a->data = data;
    sg_gw_db_run(&a->job, admit_fn, admit_done);
}

/* ---- slots and records ---- */

typedef struct {
    sg_gw_job_t job;
    int64_t tenant, row, size;
    char sid[37];
    char name[256];
    int kept;
    void (*done)(void *data);
    void *data;
} record_t;

static void release_fn(sg_gw_job_t *job, sg_store_t *st)
{
    record_t *r = (record_t *)job;
    job->rc = sg_store_template_release(st, r->row, job->err, sizeof(job->err));
}

static void closed_fn(sg_gw_job_t *job, sg_store_t *st)
{
    record_t *r = (record_t *)job;
    job->rc =
        sg_store_template_closed(st, r->tenant, r->sid, r->kept ? r->name : NULL, r->size, job->err, sizeof(job->err));
}

static void record_done(sg_gw_job_t *job)
{
    record_t *r = (record_t *)job;
    if (job->rc != 0)
        sg_error("template of session %s: cannot record it: %s", r->sid[0] ? r->sid : "(none)", job->err);
    else if (r->kept)
        sg_info("session %s: kept as template %s (%lld bytes)", r->sid, r->name, (long long)r->size);
    if (r->done != NULL)
        r->done(r->data);
    free(r);
}

void sg_gw_template_release(int64_t row)
{
    if (row == 0)
        return;
    record_t *r = sg_xcalloc(1, sizeof(*r));
    r->row = row;
    sg_gw_db_run(&r->job, release_fn, record_done);
}

void sg_gw_template_closed(int64_t tenant, const char *sid, const char *reply, size_t len, void (*done)(void *data),
                           void *data)
{
    record_t *r = sg_xcalloc(1, sizeof(*r));
    json_object *o = reply != NULL && len != 0 ? json_tokener_parse(reply) : NULL, *t, *v;

    r->tenant = tenant;
    snprintf(r->sid, sizeof(r->sid), "%s", sid);
    if (o != NULL && json_object_object_get_ex(o, "template", &t) && json_object_is_type(t, json_type_object) &&
        json_object_object_get_ex(t, "name", &v) && json_object_is_type(v, json_type_string) &&
        json_object_get_string_len(v) > 0 && (size_t)json_object_get_string_len(v) < sizeof(r->name)) {
        snprintf(r->name, sizeof(r->name), "%s", json_object_get_string(v));
        r->kept = 1;
        if (json_object_object_get_ex(t, "size_bytes", &v))
            r->size = json_object_get_int64(v);
    }
    json_object_put(o);
    r->done = done;
    r->data = data;
    sg_gw_db_run(&r->job, closed_fn, record_done);
}

/* ---- listing ---- */

typedef struct {
    sg_gw_job_t job;
    int64_t tenant;
    int admin;
    json_object *arr;
    sg_gw_tpl_reply_cb cb;
    void *data;
} list_t;

static void add_template(const sg_template_rec_t *t, void *data)
{
    list_t *l = data;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "name", json_object_new_string(t->name));
    json_object_object_add(o, "session_id", json_object_new_string(t->session_id));
    json_object_object_add(o, "created_at", json_object_new_int64(t->created_at));
    json_object_object_add(o, "size_bytes", json_object_new_int64(t->size_bytes));
    if (l->admin)
        json_object_object_add(o, "tenant_id", json_object_new_int64(t->tenant_id));
    json_object_array_add(l->arr, o);
}

static void list_fn(sg_gw_job_t *job, sg_store_t *st)
{
    list_t *l = (list_t *)job;
    job->rc = sg_store_template_list(st, l->tenant, add_template, l, job->err, sizeof(job->err));
}

static void list_done(sg_gw_job_t *job)
{
    list_t *l = (list_t *)job;
    if (job->rc != 0) {
        json_object_put(l->arr);
        l->cb(l->data, 500, "internal", job->err, NULL);
    } else {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "templates", l->arr);
        l->cb(l->data, 200, NULL, NULL, o);
    }
    free(l);
}

static void list_start(int64_t tenant, int admin, sg_gw_tpl_reply_cb cb, void *data)
{
    list_t *l = sg_xcalloc(1, sizeof(*l));
    l->tenant = tenant;
    l->admin = admin;
    l->arr = json_object_new_array();
    l->cb = cb;
    l->data = data;
    sg_gw_db_run(&l->job, list_fn, list_done);
}

void sg_gw_templates_list(int64_t tenant, sg_gw_tpl_reply_cb cb, void *data)
{
    list_start(tenant, 0, cb, data);
}

void sg_gw_templates_list_admin(int64_t tenant, sg_gw_tpl_reply_cb cb, void *data)
{
    list_start(tenant, 1, cb, data);
}

/* ---- removing one: row looked up, image removed on the proxy, row removed ---- */

typedef struct {
    sg_gw_job_t job;
    int64_t tenant;
    char name[256];
    int stage; /* 0 lookup, 1 delete row */
    int found;
    char proxy[256];
    sg_gw_tpl_reply_cb cb;
    void *data;
} del_t;

static void del_fn(sg_gw_job_t *job, sg_store_t *st)
{
    del_t *d = (del_t *)job;
    sg_template_rec_t t;
    int rc;
    if (d->stage == 0) {
        rc = sg_store_template_get(st, d->name, &t, job->err, sizeof(job->err));
        d->found = rc == 1 && (d->tenant == 0 || t.tenant_id == d->tenant);
        if (d->found)
            template_proxy(st, &t, d->proxy, sizeof(d->proxy));
    } else {
        rc = sg_store_template_delete(st, d->name, job->err, sizeof(job->err));
    }
    job->rc = rc < 0 ? -1 : 0;
}

static void del_finish(del_t *d, int status, const char *code, const char *detail)
{
    if (status == 200) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "status", json_object_new_string("deleted"));
        json_object_object_add(o, "name", json_object_new_string(d->name));
        d->cb(d->data, 200, NULL, NULL, o);
    } else {
        d->cb(d->data, status, code, detail, NULL);
    }
    free(d);
}

static void on_proxy_removed(void *data, const sg_upstream_reply_t *r)
{
    del_t *d = data;
    char detail[400];
    json_object *o, *v;

    if (r->status == 200 || r->status == 404) {
        /* gone on the proxy: the row goes */
        d->stage = 1;
        sg_gw_db_submit(&d->job);
        return;
    }
    if (r->status == 409) {
        snprintf(detail, sizeof(detail), "template \"%s\" is in use by a live session; close it first", d->name);
        del_finish(d, 409, "template_in_use", detail);
        return;
    }
    o = r->status != 0 ? json_tokener_parse(r->body) : NULL;
    snprintf(detail, sizeof(detail), "the sandbox service did not remove the template: %s",
             o != NULL && json_object_object_get_ex(o, "detail", &v) ? json_object_get_string(v)
             : r->err != NULL                                        ? r->err
                                                                     : "no reply");
    json_object_put(o);
    del_finish(d, r->status == 0 ? 502 : 503, r->status == 0 ? "proxy_unavailable" : "docker_unavailable", detail);
}

static void del_done(sg_gw_job_t *job)
{
    del_t *d = (del_t *)job;
    char path[800];

    if (job->rc != 0) {
        del_finish(d, 500, "internal", job->err);
        return;
    }
    if (d->stage == 1) {
        sg_info("template %s: deleted", d->name);
        del_finish(d, 200, NULL, NULL);
        return;
    }
    if (!d->found) {
        char detail[400];
        snprintf(detail, sizeof(detail), "no template named \"%s\"", d->name);
        del_finish(d, 404, "no_such_template", detail);
        return;
    }
    memcpy(path, "/templates/", 11);
    if (sg_upstream_escape(d->name, path + 11, sizeof(path) - 11) != 0) {
        del_finish(d, 500, "internal", "the template's name does not fit a request to the sandbox service");
        return;
    }
    sg_proxy_t *p = sg_proxies_count() == 1 ? sg_proxies_at(0) : sg_proxies_find(d->proxy);
    if (p == NULL) {
        del_finish(d, 502, "proxy_unavailable", "the template's sandbox service is no longer configured");
        return;
    }
    if (sg_upstream_start(p->up, "DELETE", path, NULL, 0, NULL, sg_gw.call_timeout_ms, NULL, NULL, on_proxy_removed,
                          d) == NULL)
        del_finish(d, 502, "proxy_unavailable", "cannot start a request to the sandbox service");
}

void sg_gw_template_delete(int64_t tenant, const char *name, sg_gw_tpl_reply_cb cb, void *data)
{
    del_t *d = sg_xcalloc(1, sizeof(*d));
    d->tenant = tenant;
    snprintf(d->name, sizeof(d->name), "%s", name);
    d->cb = cb;
    d->data = data;
    sg_gw_db_run(&d->job, del_fn, del_done);
}
