/*
 * health.c — GET /health (seed 004's health check, no token): whether the
 * gateway's dependencies answer — the proxy and, through it, the Docker
 * engine (the proxy's own GET /health), the SQLite file (one DB job), the
 * live state (Redis when configured) — with 200 when all do and 503
 * otherwise, so a monitor needs only the status code.
 *
 * Never hangs: the proxy is asked with a short timeout (HEALTH_TIMEOUT_MS),
 * and a timer answers with what is known by then; a DB job that is still
 * queued behind busy workers then counts as "database": false. The check's
 * state lives until both the call and the job are over, whichever the
 * answer waited for.
 */
#include "db.h"
#include "gateway.h"
#include "handlers.h"
#include "http.h"
#include "json.h"
#include "metrics.h"
#include "placement.h"
#include "upstream.h"
#include "util.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#define HEALTH_TIMEOUT_MS 2000

typedef struct {
    sg_gw_job_t job; /* the SQLite probe; first member */
    sg_http_hold_t *hold;
    sg_upstream_req_t *up;
    h2o_timeout_entry_t deadline;
    int refs;       /* the call, the job and the timer each hold one */
    int db_done;    /* the job has come back */
    int db_ok;      /* ... and SQLite answered */
    int proxy_done; /* the call has ended */
    json_object *proxy;
    int proxy_status; /* its HTTP status, 0 if none */
    char proxy_err[160];
    int answered;
} health_t;

static void unref(health_t *h)
{
    if (--h->refs > 0)
        return;
    sg_http_hold_release(h->hold);
    json_object_put(h->proxy);
    free(h);
}

static void copy_field(json_object *to, json_object *from, const char *name)
{
    json_object *v;
    if (from != NULL && json_object_object_get_ex(from, name, &v) && v != NULL)
        json_object_object_add(to, name, json_object_get(v));
}

/* Each proxy as its health checks see it (placement.h). */
json_object *sg_gw_proxies_json(void)
{
    json_object *arr = json_object_new_array();
    for (size_t i = 0; i < sg_proxies_count(); i++) {
        const sg_proxy_t *p = sg_proxies_at(i);
        json_object *o = json_object_new_object();
        json_object_object_add(o, "url", json_object_new_string(p->url));
        json_object_object_add(o, "up", json_object_new_boolean(p->in_placement));
        json_object_object_add(o, "docker", json_object_new_boolean(p->in_placement && p->docker_ok));
        json_object_object_add(o, "failed_checks", json_object_new_int64(p->fails));
        json_object_object_add(o, "sessions", json_object_new_int64(p->sessions));
        json_object_object_add(o, "containers", json_object_new_int64(p->containers));
        json_object_object_add(o, "max_containers", json_object_new_int64(p->max_containers));
        json_object_object_add(o, "memory_committed_bytes", json_object_new_int64(p->memory_committed));
        json_object_object_add(o, "cpu_committed", json_object_new_double(p->cpu_committed));
        json_object_array_add(arr, o);
    }
    return arr;
}

/* Answers with what is known now; a probe still out counts as failed. */
static void answer(health_t *h)
{
    json_object *docker = NULL, *st = json_object_new_object(), *o = json_object_new_object();
    h2o_req_t *req = sg_http_hold_req(h->hold);
    int proxy_ok = h->proxy_done && h->proxy_status != 0 && h->proxy != NULL;
    int docker_ok = proxy_ok && json_object_object_get_ex(h->proxy, "docker", &docker) &&
                    json_object_is_type(docker, json_type_boolean) && json_object_get_boolean(docker);
    if (sg_proxies_count() > 1) {
        /* several: healthy while one at least is in placement, its engine answering */
        proxy_ok = sg_proxies_up() > 0;
        docker_ok = 0;
        for (size_t i = 0; i < sg_proxies_count(); i++)
            docker_ok |= sg_proxies_at(i)->in_placement && sg_proxies_at(i)->docker_ok;
    }
    int state_ok = !sg_gw.redis_configured || sg_state_available(sg_gw.state);
    int healthy = proxy_ok && docker_ok && h->db_ok && state_ok;

    h->answered = 1;
    json_object_object_add(o, "status", json_object_new_string(healthy ? "ok" : "degraded"));
    json_object_object_add(o, "proxy", json_object_new_boolean(proxy_ok));
    json_object_object_add(o, "docker", json_object_new_boolean(docker_ok));
    copy_field(o, h->proxy, "docker_version");
    copy_field(o, h->proxy, "api_version");
    copy_field(o, h->proxy, "runtime");
    copy_field(o, h->proxy, "warning");
    copy_field(o, h->proxy, "containers");
    copy_field(o, h->proxy, "max_containers");
    json_object_object_add(o, "proxies", sg_gw_proxies_json());
    json_object_object_add(o, "database", json_object_new_boolean(h->db_ok));
    json_object_object_add(st, "backend", json_object_new_string(sg_state_backend(sg_gw.state)));
    json_object_object_add(st, "available", json_object_new_boolean(state_ok));
    json_object_object_add(o, "state", st);
    if (!proxy_ok)
        json_object_object_add(o, "detail",
                               json_object_new_string(sg_proxies_count() > 1 ? "no proxy answers its checks"
                                                      : h->proxy_done        ? h->proxy_err
                                                                             : "no answer in time"));
    sg_metrics_request("health", healthy ? 200 : 503);
    if (req != NULL)
        sg_http_send_json(req, healthy ? 200 : 503, o);
    else
        json_object_put(o);
    if (h2o_timeout_is_linked(&h->deadline)) {
        /* answered before the deadline: the timer's reference goes (the caller still holds its own) */
        h2o_timeout_unlink(&h->deadline);
        unref(h);
    }
}

static void maybe_answer(health_t *h)
{
    if (!h->answered && h->proxy_done && h->db_done)
        answer(h);
}

static void on_deadline(h2o_timeout_entry_t *entry)
{
    health_t *h = H2O_STRUCT_FROM_MEMBER(health_t, deadline, entry);
    if (!h->answered) {
        if (!h->proxy_done) {
            sg_upstream_cancel(h->up); /* no callback after this: its reference goes here */
            h->up = NULL;
            h->proxy_done = 1;
            snprintf(h->proxy_err, sizeof(h->proxy_err), "the proxy did not answer in time");
            unref(h);
        }
        answer(h);
    }
    unref(h);
}

/* The proxy's GET /health: 200 when Docker answers it, 503 (with
 * "docker": false) when not; anything else, or no reply, is a proxy down. */
static void on_proxy(void *data, const sg_upstream_reply_t *r)
{
    health_t *h = data;
    h->up = NULL;
    h->proxy_done = 1;
    h->proxy_status = (int)r->status;
    if (r->status == 200 || r->status == 503) {
        h->proxy = json_tokener_parse(r->body);
        if (h->proxy != NULL && !json_object_is_type(h->proxy, json_type_object)) {
            json_object_put(h->proxy);
            h->proxy = NULL;
        }
    }
    if (h->proxy == NULL)
        snprintf(h->proxy_err, sizeof(h->proxy_err), "the proxy is unavailable: %s",
                 r->status == 0 ? (r->err != NULL ? r->err : "no reply") : "an unexpected reply");
    maybe_answer(h);
    unref(h);
}

static void db_probe(sg_gw_job_t *job, sg_store_t *st)
{
    job->rc = sqlite3_exec(sg_store_db(st), "SELECT 1 FROM tenants LIMIT 1", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

static void db_done(sg_gw_job_t *job)
{
    health_t *h = (health_t *)job;
    h->db_done = 1;
    h->db_ok = job->rc == 0;
    maybe_answer(h);
    unref(h);
}

int sg_gw_on_health(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    static h2o_timeout_t timeout;
    static int timeout_ready;
    health_t *h = sg_xcalloc(1, sizeof(*h));

    h->hold = sg_http_hold(req);
    h->refs = 3;
    if (!timeout_ready) {
        h2o_timeout_init(sg_gw.loop, &timeout, HEALTH_TIMEOUT_MS);
        timeout_ready = 1;
    }
    h->deadline.cb = on_deadline;
    h2o_timeout_link(sg_gw.loop, &timeout, &h->deadline);
    /* one proxy: asked now, as before; several: their checks' state */
    h->up = sg_proxies_count() > 1 ? NULL
                                   : sg_upstream_start(sg_gw.upstream, "GET", "/health", NULL, 0, NULL,
                                                       HEALTH_TIMEOUT_MS, NULL, NULL, on_proxy, h);
    if (sg_proxies_count() > 1) {
        h->proxy_done = 1;
        h->refs--;
    } else if (h->up == NULL) {
        h->proxy_done = 1;
        snprintf(h->proxy_err, sizeof(h->proxy_err), "the proxy cannot be called");
        h->refs--;
    }
    sg_gw_db_run(&h->job, db_probe, db_done); /* done may run at once (shutting down) */
    return 0;
}
