/*
 * purge.c — deleting a tenant (purge.h).
 */
#include "purge.h"
#include "close.h"
#include "db.h"
#include "gateway.h"
#include "log.h"
#include "util.h"
#include "metrics.h"
#include "placement.h"
#include "templates.h"
#include "upstream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PURGE_MAX_ITEMS 4096

typedef struct purge purge_t;
typedef void (*purge_done_cb)(purge_t *p, int status, const char *code, const char *detail);

struct purge {
    sg_gw_job_t job;
    void (*step)(purge_t *p, sg_store_t *st); /* the DB step job.fn runs */
    void (*next)(purge_t *p);                 /* then this, on the loop */
    int64_t tenant;
    char name[SG_TENANT_NAME_MAX + 1];
    int found;
    char (*items)[256]; /* session ids, then template names */
    size_t nitems;
    size_t pending;
    size_t proxy_i; /* the proxy whose templates go (templates live on the engine that kept them) */
    int failed;
    char why[300];
    purge_done_cb done;
    sg_gw_purge_cb cb; /* the admin request's, if any */
    void *cb_data;
};

static int purging; /* a sweep is under way */

static void purge_free(purge_t *p)
{
    free(p->items);
    free(p);
}

static void add_item(purge_t *p, const char *s)
{
    if (p->nitems >= PURGE_MAX_ITEMS)
        return;
    for (size_t i = 0; i < p->nitems; i++)
        if (strcmp(p->items[i], s) == 0)
            return;
    p->items = sg_xrealloc(p->items, (p->nitems + 1) * sizeof(*p->items));
    snprintf(p->items[p->nitems++], sizeof(p->items[0]), "%s", s);
}

static void step_fn(sg_gw_job_t *job, sg_store_t *st)
{
    purge_t *p = (purge_t *)job;
    job->rc = 0;
    p->step(p, st);
}

static void step_done(sg_gw_job_t *job)
{
    purge_t *p = (purge_t *)job;
    if (job->rc != 0) {
        p->done(p, 500, "internal", job->err);
        return;
    }
    p->next(p);
}

static void run_step(purge_t *p, void (*step)(purge_t *, sg_store_t *), void (*next)(purge_t *))
{
    p->step = step;
    p->next = next;
    sg_gw_db_run(&p->job, step_fn, step_done);
}

/* ---- 4: the rows ---- */

static void rows_step(purge_t *p, sg_store_t *st)
{
    if (sg_store_tenant_purge(st, p->tenant, p->job.err, sizeof(p->job.err)) < 0)
        p->job.rc = -1;
}

static void rows_next(purge_t *p)
{
    sg_info("tenant %s: deleted, with its sessions and templates", p->name);
    p->done(p, 200, NULL, NULL);
}

/* ---- 3: the templates on each proxy ---- */

static void templates_step(purge_t *p, sg_store_t *st);
static void templates_next(purge_t *p);

static void template_removed(void *data, const sg_upstream_reply_t *r)
{
    purge_t *p = data;
    if (r->status != 200 && r->status != 404) {
        p->failed = 1;
        snprintf(p->why, sizeof(p->why), "the sandbox service did not remove a template (%ld %s)", r->status,
                 r->err != NULL ? r->err : r->body);
    }
    if (--p->pending != 0)
        return;
    if (p->failed)
        p->done(p, 502, "proxy_unavailable", p->why);
    else if (++p->proxy_i < sg_proxies_count())
        run_step(p, templates_step, templates_next); /* the next proxy's */
    else
        run_step(p, rows_step, rows_next);
}

static void remove_templates(purge_t *p)
{
    char path[800];

    if (p->nitems == 0) {
        free(p->items);
        p->items = NULL;
        run_step(p, rows_step, rows_next);
        return;
    }
    p->pending = p->nitems + 1; /* one more while starting them */
    for (size_t i = 0; i < p->nitems; i++) {
        memcpy(path, "/templates/", 11);
        if (sg_upstream_escape(p->items[i], path + 11, sizeof(path) - 11) != 0 ||
            sg_upstream_start(sg_proxies_at(p->proxy_i)->up, "DELETE", path, NULL, 0, NULL, sg_gw.call_timeout_ms, NULL,
                              NULL, template_removed, p) == NULL) {
            sg_upstream_reply_t fail = {0};
            fail.err = "cannot start a request to the sandbox service";
            template_removed(p, &fail);
        }
    }
    sg_upstream_reply_t ok = {.status = 200};
    template_removed(p, &ok);
}

/* the proxy's own list under the tenant's name: templates whose record was lost */
static void on_proxy_listed(void *data, const sg_upstream_reply_t *r)
{
    purge_t *p = data;
    json_object *o = r->status == 200 ? json_tokener_parse(r->body) : NULL, *arr, *v;
    if (r->status != 200) {
        p->done(p, 502, "proxy_unavailable", "the sandbox service did not list the tenant's templates");
        json_object_put(o);
        return;
    }
    if (o != NULL && json_object_object_get_ex(o, "templates", &arr) && json_object_is_type(arr, json_type_array))
        for (size_t i = 0; i < json_object_array_length(arr); i++)
            if (json_object_object_get_ex(json_object_array_get_idx(arr, i), "name", &v) &&
                json_object_is_type(v, json_type_string) && json_object_get_string_len(v) < 256)
                add_item(p, json_object_get_string(v));
    json_object_put(o);
    remove_templates(p);
}

static void add_template_name(const sg_template_rec_t *t, void *data)
{
    add_item(data, t->name);
}

static void templates_step(purge_t *p, sg_store_t *st)
{
    p->nitems = 0;
    if (sg_store_template_list(st, p->tenant, add_template_name, p, p->job.err, sizeof(p->job.err)) != 0)
        p->job.rc = -1;
}

static void templates_next(purge_t *p)
{
    char path[128];
    /* a proxy gone past the grace is skipped: nothing of it can be reached */
    while (p->proxy_i < sg_proxies_count() && sg_proxy_lost(sg_proxies_at(p->proxy_i), NULL))
        p->proxy_i++;
    if (p->proxy_i == sg_proxies_count()) {
        run_step(p, rows_step, rows_next);
        return;
    }
    snprintf(path, sizeof(path), "/templates?owner=%s", p->name);
    if (sg_upstream_start(sg_proxies_at(p->proxy_i)->up, "GET", path, NULL, 0, NULL, sg_gw.call_timeout_ms, NULL, NULL,
                          on_proxy_listed, p) == NULL)
        p->done(p, 502, "proxy_unavailable", "cannot start a request to the sandbox service");
}

/* ---- 2: the live sessions ---- */

/* A session the proxy did not confirm removed (closed 0) stays open and
 * counted, and its close is retried by the reaper: the purge goes on. */
static void session_closed(void *data, int closed)
{
    purge_t *p = data;
    if (--p->pending == 0)
        run_step(p, templates_step, templates_next);
}

static void add_session_id(const sg_session_rec_t *s, void *data)
{
    add_item(data, s->id);
}

static void sessions_step(purge_t *p, sg_store_t *st)
{
    if (sg_store_session_list_open(st, p->tenant, add_session_id, p, p->job.err, sizeof(p->job.err)) != 0)
        p->job.rc = -1;
}

static void sessions_next(purge_t *p)
{
    /* the closes record each keep_template session's template before they end */
    p->pending = p->nitems + 1;
    for (size_t i = 0; i < p->nitems; i++)
        sg_gw_close_session(p->items[i], p->tenant, "admin", session_closed, p);
    session_closed(p, 1);
}

/* ---- 1: the mark (admin API) ---- */

static void mark_step(purge_t *p, sg_store_t *st)
{
    sg_tenant_t t;
    int rc = sg_store_tenant_by_name(st, p->name, &t, p->job.err, sizeof(p->job.err));
    if (rc < 0) {
        p->job.rc = -1;
        return;
    }
    p->found = rc == 1;
    if (!p->found)
        return;
    p->tenant = t.id;
    if (sg_store_tenant_mark_deleting(st, t.id, p->job.err, sizeof(p->job.err)) < 0)
        p->job.rc = -1;
}

static void mark_next(purge_t *p)
{
    if (!p->found) {
        p->done(p, 404, "no_such_tenant", "no such tenant");
        return;
    }
    sg_info("tenant %s: deleting", p->name);
    run_step(p, sessions_step, sessions_next);
}

static void delete_done(purge_t *p, int status, const char *code, const char *detail)
{
    if (status != 200)
        sg_warn("tenant %s: delete not finished: %s", p->name, detail);
    p->cb(p->cb_data, status, code, detail);
    purge_free(p);
}

void sg_gw_tenant_delete(const char *name, sg_gw_purge_cb done, void *data)
{
    purge_t *p = sg_xcalloc(1, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->cb = done;
    p->cb_data = data;
    p->done = delete_done;
    run_step(p, mark_step, mark_next);
}

/* ---- the sweep ---- */

static void sweep_done(purge_t *p, int status, const char *code, const char *detail)
{
    if (status != 200)
        sg_warn("tenant %s: delete not finished, tried again later: %s", p->name, detail);
    purging = 0;
    purge_free(p);
}

static void first_deleting(const sg_tenant_t *t, void *data)
{
    purge_t *p = data;
    if (p->found)
        return;
    p->found = 1;
    p->tenant = t->id;
    snprintf(p->name, sizeof(p->name), "%s", t->name);
}

static void sweep_step(purge_t *p, sg_store_t *st)
{
    if (sg_store_tenant_list_deleting(st, first_deleting, p, p->job.err, sizeof(p->job.err)) != 0)
        p->job.rc = -1;
}

static void sweep_next(purge_t *p)
{
    if (!p->found) {
        purging = 0;
        purge_free(p);
        return;
    }
    sg_info("tenant %s: deleting (marked by sandgate-admin)", p->name);
    run_step(p, sessions_step, sessions_next);
}

void sg_gw_purge_sweep(void)
{
    if (purging || sg_gw.stopping)
        return;
    purging = 1;
    purge_t *p = sg_xcalloc(1, sizeof(*p));
    p->done = sweep_done;
    run_step(p, sweep_step, sweep_next);
}
