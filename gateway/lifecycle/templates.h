/*
 * templates.h — tenants' templates as records: the images keep_template
 * sessions leave on the proxy (docs/architecture.md). Each belongs to the
 * tenant whose session made it, counts against its max_templates quota
 * (kept templates plus live keep_template sessions, reserved in one SQLite
 * transaction, so exact under parallel creates), is listed and removed
 * through the public and admin APIs (handler/templates.c), and goes when
 * the tenant is deleted (purge.c).
 *
 * Loop thread; the SQLite work runs on the DB threads. Every callback runs
 * later, on the loop, never before the call that takes it returns.
 */
#ifndef SANDGATE_GW_TEMPLATES_H
#define SANDGATE_GW_TEMPLATES_H

#include <json-c/json.h>

#include "store.h"

/* How long a slot whose create has not been recorded yet still counts. */
#define SG_TEMPLATE_SLOT_GRACE_S 600

/* A route's answer: status 200 with reply (handed over), or an error. */
typedef void (*sg_gw_tpl_reply_cb)(void *data, int status, const char *code, const char *detail, json_object *reply);

/* Before POST /sessions is forwarded: "image" (NULL if absent) must name one
 * of the tenant's templates (anything else, another tenant's template
 * included, is answered as unknown: 404 no_such_template); with keep a slot
 * is reserved (429 quota_exceeded at max_templates). cb gets status 0 and
 * the slot's row (0 if none) when the create may go on, and the proxy the
 * template lives on (its session's, placement.h; "" if none or unknown). */
typedef void (*sg_gw_tpl_admit_cb)(void *data, int status, const char *code, const char *detail, int64_t row,
                                   const char *proxy);
void sg_gw_templates_admit(const sg_tenant_t *t, const char *image, int keep, sg_gw_tpl_admit_cb cb, void *data);
/* The slot of a create that failed goes (row 0: nothing). */
void sg_gw_template_release(int64_t row);
/* A session closed on the proxy; reply (may be NULL) is the proxy's answer
 * to its DELETE. Its template, when the reply names one, is recorded as
 * the tenant's; otherwise the session's slot goes. done(data) runs after. */
void sg_gw_template_closed(int64_t tenant, const char *sid, const char *reply, size_t len, void (*done)(void *data),
                           void *data);

/* GET /templates of a tenant: {"templates":[{"name","session_id","created_at","size_bytes"}]}. */
void sg_gw_templates_list(int64_t tenant, sg_gw_tpl_reply_cb cb, void *data);
/* The same for the admin API, with "tenant_id" in each entry; tenant 0:
 * every tenant's. */
void sg_gw_templates_list_admin(int64_t tenant, sg_gw_tpl_reply_cb cb, void *data);
/* DELETE /templates/{name}: removes the image on the proxy, then the row.
 * tenant 0: any tenant's (admin). Another tenant's is a 404 as an unknown
 * one; a template a live session uses is 409 template_in_use. */
void sg_gw_template_delete(int64_t tenant, const char *name, sg_gw_tpl_reply_cb cb, void *data);

#endif
