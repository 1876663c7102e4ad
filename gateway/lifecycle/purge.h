/*
 * purge.h — deleting a tenant: its live sessions are closed (and a
 * keep_template session's template recorded), every template of it is
 * removed on the proxy (those on record, and any the proxy holds under its
 * name), then its rows go from SQLite in one transaction (templates,
 * tokens, usage, sessions, the tenant).
 *
 * A tenant is first marked (disabled at once: its tokens stop working);
 * the purge finishes the job. DELETE /admin/tenants/{name} (handler/admin.c)
 * marks and purges before it answers; `sandgate-admin tenant delete` only marks, and
 * the gateway's reaper purges marked tenants every ten rounds, so a purge
 * that failed half-way (the proxy unreachable) is tried again.
 *
 * Loop thread.
 */
#ifndef SANDGATE_GW_PURGE_H
#define SANDGATE_GW_PURGE_H

/* The end of a delete: status 200 (done), 404 no_such_tenant, or 500 /
 * 502 with the tenant marked, disabled and left for the sweep to finish. */
typedef void (*sg_gw_purge_cb)(void *data, int status, const char *code, const char *detail);

/* DELETE /admin/tenants/{name}: marks the tenant named name (1 to
 * SG_TENANT_NAME_MAX bytes) and purges it; done runs later, on the loop,
 * once the purge is over or has stopped. */
void sg_gw_tenant_delete(const char *name, sg_gw_purge_cb done, void *data);
/* Purges one marked tenant, if none is being purged; from the reaper. */
void sg_gw_purge_sweep(void);

#endif
