/*
 * templates.c — a tenant's templates over HTTP (the records are
 * lifecycle/templates.c): GET /templates, DELETE /templates/{name}, and
 * for the admin API GET /admin/templates[?tenant=NAME] (with "tenant_id"
 * in each entry) and DELETE /admin/templates/{name} (any tenant's).
 */
#include "fields.h"
#include "handlers.h"
#include "metrics.h"
#include "request.h"
#include "templates.h"
#include "util.h"
#include "db.h"

#include <stdlib.h>
#include <string.h>

/* ---- the tenant's own ------------------------------------------------------------------- */

static void on_reply(void *data, int status, const char *code, const char *detail, json_object *reply)
{
    sg_gw_req_t *g = data;
    if (reply != NULL)
        sg_gw_reply_json(g, status, reply);
    else
        sg_gw_reply_error(g, status, code, "%s", detail);
    sg_gw_req_free(g);
}

static void list(sg_gw_req_t *g)
{
    sg_gw_templates_list(g->tenant.id, on_reply, g);
}

static void delete (sg_gw_req_t *g)
{
    sg_gw_template_delete(g->tenant.id, g->template_name, on_reply, g);
}

SG_GW_ROUTE_HANDLER(sg_gw_on_templates_list, SG_GW_R_TEMPLATES, SG_GW_ARG_NONE, 0, 0, SG_GW_GONE_FINISH, list)
SG_GW_ROUTE_HANDLER(sg_gw_on_template_delete, SG_GW_R_TEMPLATE_DELETE, SG_GW_ARG_TEMPLATE, 0, 0, SG_GW_GONE_FINISH,
                    delete)

/* ---- the admin API (authenticated by the admin router) ---------------------------------- */

static void admin_reply(void *data, int status, const char *code, const char *detail, json_object *reply)
{
    sg_http_hold_t *hold = data;
    h2o_req_t *req = sg_http_hold_req(hold);
    if (req != NULL) {
        sg_metrics_request("admin", status);
        if (reply != NULL) {
            sg_http_send_json(req, status, reply);
            reply = NULL;
        } else {
            sg_http_send_error(req, status, code, "%s", detail);
        }
    }
    json_object_put(reply);
    sg_http_hold_release(hold);
}

static int admin_refuse(h2o_req_t *req, int status, const char *code, const char *detail)
{
    sg_metrics_request("admin", status);
    sg_http_send_error(req, status, code, "%s", detail);
    return 0;
}

/* ?tenant=NAME: the tenant's id first */
typedef struct {
    sg_gw_job_t job;
    sg_http_hold_t *hold;
    char tenant_name[SG_TENANT_NAME_MAX + 1];
    int64_t tenant;
    int found;
} tenant_job_t;

static void tenant_fn(sg_gw_job_t *job, sg_store_t *st)
{
    tenant_job_t *a = (tenant_job_t *)job;
    sg_tenant_t t;
    int rc = sg_store_tenant_by_name(st, a->tenant_name, &t, job->err, sizeof(job->err));
    job->rc = rc < 0 ? -1 : 0;
    a->found = rc == 1;
    a->tenant = rc == 1 ? t.id : 0;
}

static void tenant_done(sg_gw_job_t *job)
{
    tenant_job_t *a = (tenant_job_t *)job;
    if (job->rc != 0)
        admin_reply(a->hold, 500, "internal", job->err, NULL);
    else if (!a->found)
        admin_reply(a->hold, 404, "no_such_tenant", "no such tenant", NULL);
    else
        sg_gw_templates_list_admin(a->tenant, admin_reply, a->hold);
    free(a);
}

int sg_gw_admin_on_templates_list(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    h2o_iovec_t t = sg_http_query_param(req, "tenant");
    if (t.base == NULL || t.len == 0) {
        sg_gw_templates_list_admin(0, admin_reply, sg_http_hold(req));
        return 0;
    }
    if (t.len > SG_TENANT_NAME_MAX)
        return admin_refuse(req, 404, "no_such_tenant", "no such tenant");
    tenant_job_t *a = sg_xcalloc(1, sizeof(*a));
    a->hold = sg_http_hold(req);
    memcpy(a->tenant_name, t.base, t.len);
    sg_gw_db_run(&a->job, tenant_fn, tenant_done);
    return 0;
}

int sg_gw_admin_on_template_delete(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    char name[256];
    if (sg_gw_template_name(m->arg[0], name, sizeof(name)) != 0)
        return admin_refuse(req, 404, "no_such_template", "no such template");
    sg_gw_template_delete(0, name, admin_reply, sg_http_hold(req));
    return 0;
}
