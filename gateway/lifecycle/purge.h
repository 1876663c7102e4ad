/*
 * purge.h — deleting a tenant: its live sessions are closed (and a
 * keep_template session's template recorded), every template of it is
 * removed on the proxy (those on record, and any the proxy holds under its
 * name), then its rows go from SQLite in one transaction (templates,
 * tokens, usage, sessions, the tenant).
 *
 * A tenant is first marked (disabled at once: its tokens stop working);
 * the purge finishes the job. DELETE /admin/tenants/{name} marks and
 * purges before it answers; `sandgate-admin tenant delete` only marks, and
 * the gateway's reaper purges marked tenants every ten rounds, so a purge
 * that failed half-way (the proxy unreachable) is tried again.
 *
 * Loop thread.
 */
#ifndef SANDGATE_GW_PURGE_H
#define SANDGATE_GW_PURGE_H

#include <h2o.h>

/* DELETE /admin/tenants/{name} (authenticated by admin.c). */
int sg_gw_tenant_delete_admin(h2o_req_t *req, h2o_iovec_t name);
/* Purges one marked tenant, if none is being purged; from the reaper. */
void sg_gw_purge_sweep(void);

#endif
