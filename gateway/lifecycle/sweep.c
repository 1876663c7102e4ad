/*
 * sweep.c — sandboxes of closed sessions removed from their proxy
 * (sweep.h).
 */
#include "sweep.h"
#include "db.h"
#include "gateway.h"
#include "log.h"
#include "placement.h"
#include "util.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SWEEP_MAX 4096 /* session ids read from one proxy's list per round */

typedef struct {
    sg_gw_job_t job;
    char proxy[SG_PROXY_URL_MAX];
    size_t n, nclosed;
    char (*ids)[37];
    int *closed;
} sweep_job_t;

static void on_deleted(void *data, const sg_upstream_reply_t *r)
{
    char *sid = data;
    if (r->status == 200)
        sg_info("session %s: closed in the ledger, its sandbox still ran on its proxy (re-adopted there): removed",
                sid);
    else if (!(r->status == 404 && r->code[0] != '\0'))
        sg_warn("session %s: closed in the ledger, its sandbox still runs on its proxy and could not be removed "
                "(%ld %s); tried again next sweep",
                sid, r->status, r->status == 0 && r->err != NULL ? r->err : r->code);
    free(sid);
}

static void closed_fn(sg_gw_job_t *job, sg_store_t *st)
{
    sweep_job_t *j = (sweep_job_t *)job;
    sg_session_rec_t rec;
    for (size_t i = 0; i < j->n; i++) {
        j->closed[i] = sg_store_session_get(st, j->ids[i], &rec, job->err, sizeof(job->err)) == 1 && rec.closed_at != 0;
        j->nclosed += (size_t)j->closed[i];
    }
    job->rc = 0;
}

static void closed_done(sg_gw_job_t *job)
{
    sweep_job_t *j = (sweep_job_t *)job;
    sg_proxy_t *p = sg_proxies_find(j->proxy);
    char path[64];

    for (size_t i = 0; p != NULL && i < j->n; i++) {
        if (!j->closed[i])
            continue;
        snprintf(path, sizeof(path), "/sessions/%s", j->ids[i]);
        char *sid = sg_xstrdup(j->ids[i]);
        if (sg_upstream_start(p->up, "DELETE", path, NULL, 0, NULL, sg_gw.call_timeout_ms, NULL, NULL, on_deleted,
                              sid) == NULL)
            free(sid);
    }
    free(j->ids);
    free(j->closed);
    free(j);
}

static void on_listed(void *data, const sg_upstream_reply_t *r)
{
    sweep_job_t *j = data;
    json_object *o = NULL, *list;

    if (r->status == 200 && (o = json_tokener_parse(r->body)) != NULL &&
        json_object_object_get_ex(o, "sessions", &list) && json_object_is_type(list, json_type_array)) {
        size_t n = json_object_array_length(list);
        if (n > SWEEP_MAX)
            n = SWEEP_MAX;
        j->ids = sg_xcalloc(n ? n : 1, sizeof(*j->ids));
        j->closed = sg_xcalloc(n ? n : 1, sizeof(*j->closed));
        for (size_t i = 0; i < n; i++) {
            const char *id = json_object_get_string(json_object_array_get_idx(list, i));
            /* a proxy's answer is data: only ids shaped as ours are looked up */
            if (id != NULL && sg_is_uuid(id, strlen(id)))
                snprintf(j->ids[j->n++], sizeof(j->ids[0]), "%s", id);
        }
    }
    json_object_put(o);
    if (j->n == 0) {
        free(j->ids);
        free(j->closed);
        free(j);
        return;
    }
    sg_gw_db_run(&j->job, closed_fn, closed_done);
}

void sg_gw_sweep_proxies(void)
{
    for (size_t i = 0; i < sg_proxies_count(); i++) {
        sg_proxy_t *p = sg_proxies_at(i);
        if (sg_proxies_count() > 1 && !p->in_placement)
            continue;
        sweep_job_t *j = sg_xcalloc(1, sizeof(*j));
        snprintf(j->proxy, sizeof(j->proxy), "%s", p->url);
        if (sg_upstream_start(p->up, "GET", "/sessions", NULL, 0, NULL, sg_gw.call_timeout_ms, NULL, NULL, on_listed,
                              j) == NULL)
            free(j);
    }
}
