/*
 * api.c — the proxy's API (api.h): its route table, one handler a route,
 * the handlers by family (api_routes.h: api_sessions.c, api_exec.c,
 * api_files.c, api_templates.c) over the request core (api_core.h); GET /
 * and GET /health here.
 */
#include "api.h"
#include "api_core.h"
#include "api_routes.h"
#include "capacity.h"
#include "docker.h"
#include "json.h"
#include "lang.h"
#include "pool.h"
#include "runtime.h"
#include "util.h"

#include <stdlib.h>

/* ---- GET /health ---- */

typedef struct {
    sg_job_t super;
    pending_t *p;
    int ok;
    char version[32], api[16], err[256];
} health_job_t;

static void health_work(sg_job_t *job)
{
    health_job_t *j = (health_job_t *)job;
    j->ok = sg_docker_ping(sg_docker_thread(), j->version, j->api, j->err, sizeof(j->err)) == 0;
}

/* What the sessions listed here hold of the engine's memory and CPUs (their
 * caps), for a gateway's placement across proxies. */
typedef struct {
    int64_t memory_bytes;
    double cpus;
} committed_t;

static void add_committed(sg_session_t *s, void *data)
{
    committed_t *c = data;
    c->memory_bytes += (int64_t)s->limits.memory_mb << 20;
    c->cpus += s->limits.cpus;
}

/* "load": what a gateway's placement weighs (docs/proxy-api.md). */
static json_object *health_load(void)
{
    committed_t c = {0};
    json_object *load = json_object_new_object(), *free_ = json_object_new_object();
    sg_session_foreach(add_committed, &c);
    json_object_object_add(load, "sessions", json_object_new_int64((int64_t)sg_session_count()));
    json_object_object_add(load, "containers", json_object_new_int64(sg_capacity_used()));
    json_object_object_add(load, "max_containers", json_object_new_int64(sg_capacity_max()));
    for (size_t i = 0; i < sg_lang_count(); i++)
        json_object_object_add(free_, sg_lang_at(i)->name,
                               json_object_new_int64((int64_t)sg_pool_ready(sg_lang_at(i), sg_sessions_runtime())));
    json_object_object_add(load, "pool_free", free_);
    json_object_object_add(load, "memory_committed_bytes", json_object_new_int64(c.memory_bytes));
    json_object_object_add(load, "cpu_committed", json_object_new_double(c.cpus));
    return load;
}

static void health_done(sg_job_t *job)
{
    health_job_t *j = (health_job_t *)job;
    h2o_req_t *req = sg__api_pending_req(j->p);
    if (req != NULL) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "status", json_object_new_string(j->ok ? "ok" : "degraded"));
        json_object_object_add(o, "docker", json_object_new_boolean(j->ok));
        if (j->ok) {
            json_object_object_add(o, "docker_version", json_object_new_string(j->version));
            json_object_object_add(o, "api_version", json_object_new_string(j->api));
        } else {
            json_object_object_add(o, "detail", json_object_new_string(j->err));
        }
        const sg_proxy_t *px = j->p->api->proxy;
        json_object_object_add(o, "runtime", json_object_new_string(sg_sessions_runtime()));
        json_object *offered = json_object_new_array();
        for (size_t i = 0; i < SG_RUNTIME_COUNT; i++)
            if (sg_sessions_runtime_offered(sg_runtime_at(i)))
                json_object_array_add(offered, json_object_new_string(sg_runtime_at(i)));
        json_object_object_add(o, "runtimes", offered);
        if (px->runtime_warning != NULL && px->runtime_warning[0] != '\0')
            json_object_object_add(o, "warning", json_object_new_string(px->runtime_warning));
        json_object_object_add(o, "sessions", json_object_new_int64((int64_t)sg_session_count()));
        json_object_object_add(o, "containers", json_object_new_int64(sg_capacity_used()));
        json_object_object_add(o, "max_containers", json_object_new_int64(sg_capacity_max()));
        json_object *pools = json_object_new_object();
        for (size_t i = 0; i < sg_lang_count(); i++)
            json_object_object_add(pools, sg_lang_at(i)->name,
                                   json_object_new_int64((int64_t)sg_pool_ready(sg_lang_at(i), sg_sessions_runtime())));
        json_object_object_add(o, "pools", pools);
        json_object_object_add(o, "pool_size", json_object_new_int64(sg_pool_size()));
        json_object_object_add(o, "load", health_load());
        sg_http_send_json(req, j->ok ? 200 : 503, o);
    }
    sg__api_pending_free(j->p);
    free(j);
}

static int get_health(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    sg_api_t *api = app;
    if (sg_http_query_param(req, "load").base != NULL) {
        /* a gateway's check (placement): answered from the loop at once,
         * never queued behind Docker calls on busy workers */
        json_object *o = json_object_new_object();
        json_object_object_add(o, "status", json_object_new_string("ok"));
        json_object_object_add(o, "runtime", json_object_new_string(sg_sessions_runtime()));
        json_object_object_add(o, "load", health_load());
        sg_http_send_json(req, 200, o);
        return 0;
    }
    health_job_t *j = sg_xcalloc(1, sizeof(*j));
    j->super.work = health_work;
    j->super.done = health_done;
    j->p = sg__api_pending_new(req, api);
    sg_workq_submit(api->proxy->workq, &j->super);
    return 0;
}

/* GET / */
static int get_root(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "status", json_object_new_string("ok"));
    sg_http_send_json(req, 200, o);
    return 0;
}

/* ---- the route table (docs/proxy-api.md) ---------------------------------------- */

static const sg_route_t routes[] = {
    {SG_M_GET | SG_M_HEAD, "/", get_root},
    {SG_M_GET, "/health", get_health},
    {SG_M_GET, "/metrics", sg__api_get_metrics},
    {SG_M_POST, "/execute", sg__api_post_execute},
    {SG_M_POST, "/libraries", sg__api_post_libraries},
    {SG_M_DELETE, "/requests/*", sg__api_delete_request},
    {SG_M_GET, "/templates", sg__api_get_templates},
    {SG_M_DELETE, "/templates/*", sg__api_delete_template},
    {SG_M_GET, "/sessions", sg__api_get_sessions},
    {SG_M_POST, "/sessions", sg__api_post_sessions},
    {SG_M_GET, "/sessions/*", sg__api_get_session},
    {SG_M_DELETE, "/sessions/*", sg__api_delete_session},
    {SG_M_POST, "/sessions/*/execute", sg__api_post_session_execute},
    {SG_M_POST, "/sessions/*/commands", sg__api_post_session_commands},
    {SG_M_GET | SG_M_PUT, "/sessions/*/files", sg__api_session_files},
    {SG_M_POST, "/sessions/*/libraries", sg__api_post_session_libraries},
};

int sg_api_handle(void *app, h2o_req_t *req)
{
    return sg_route_dispatch(routes, sizeof(routes) / sizeof(routes[0]), app, req, sg_http_path(req));
}
