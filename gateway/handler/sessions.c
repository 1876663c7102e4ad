/*
 * sessions.c — a tenant's sessions: POST /sessions (create), GET /sessions
 * (its open ones), GET /sessions/{id} (the proxy's details), DELETE
 * /sessions/{id} (close).
 *
 * A create, top-down: the body's caps -> a template (lifecycle/templates:
 * the image it names must be the tenant's own; keep_template reserves a
 * slot) -> a slot among the tenant's live sessions (the state) -> the
 * proxy -> the session committed in the state and opened in SQLite, then
 * the reply.
 */
#include "handlers.h"
#include "log.h"
#include "metrics.h"
#include "request.h"
#include "templates.h"
#include "util.h"
#include "db.h"
#include "clock.h"
#include "close.h"
#include "upstream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void create(sg_gw_req_t *g);
static void list(sg_gw_req_t *g);
static void get(sg_gw_req_t *g);
static void delete (sg_gw_req_t *g);

/* creating and deleting a session run to their end when the client goes:
 * a session the proxy made must be on record, and a close must finish */
SG_GW_ROUTE_HANDLER(sg_gw_on_session_create, SG_GW_R_CREATE, SG_GW_ARG_NONE, 0, 0, SG_GW_GONE_FINISH, create)
SG_GW_ROUTE_HANDLER(sg_gw_on_session_list, SG_GW_R_LIST, SG_GW_ARG_NONE, 0, 0, SG_GW_GONE_FINISH, list)
SG_GW_ROUTE_HANDLER(sg_gw_on_session_get, SG_GW_R_GET, SG_GW_ARG_SESSION, 0, 0, SG_GW_GONE_CUT, get)
SG_GW_ROUTE_HANDLER(sg_gw_on_session_delete, SG_GW_R_DELETE, SG_GW_ARG_SESSION, 0, 0, SG_GW_GONE_FINISH, delete)

/* ---- POST /sessions -------------------------------------------------------------------- */

static void reserve_session(sg_gw_req_t *g);
static void on_admitted(void *data, int status, const char *code, const char *detail, int64_t row, const char *proxy);
static void on_reserved(void *data, const sg_state_result_t *r);
static void on_session_admitted(void *data, const sg_admit_result_t *r);
static void on_create_reply(void *data, const sg_upstream_reply_t *r);

static void create(sg_gw_req_t *g)
{
    double d;
    json_object *v;

    if (sg_gw_parse_json_body(g) != 0 || sg_gw_check_lang(g) != 0 || sg_gw_set_runtime(g) != 0)
        goto Error;
    if (sg_gw_cap_number(g, "timeout", 0, 0, g->tenant.max_timeout, sg_gw.default_timeout, &d) != 0)
        goto Error;
    json_object_object_add(g->json, "timeout", json_object_new_double(d));
    if (sg_gw_cap_number(g, "memory_mb", 0, 1, (double)g->tenant.max_memory_mb, (double)sg_gw.default_memory_mb, &d) !=
        0)
        goto Error;
    json_object_object_add(g->json, "memory_mb", json_object_new_int64((int64_t)d));
    if (sg_gw_cap_number(g, "cpus", 0, 0, g->tenant.max_cpus, sg_gw.default_cpus, &d) != 0)
        goto Error;
    json_object_object_add(g->json, "cpus", json_object_new_double(d));
    if (json_object_object_get_ex(g->json, "network", &v) && json_object_get_boolean(v) && !g->tenant.network_allowed) {
        sg_gw_reply_error(g, 400, "network_not_allowed", "field \"network\": this tenant may not use the network");
        goto Error;
    }
    /* a template (templates.h) is the only image a tenant may name, and only its own */
    const char *image = NULL;
    if (json_object_object_get_ex(g->json, "image", &v) && v != NULL) {
        if (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v) == 0 ||
            json_object_get_string_len(v) > 255) {
            sg_gw_reply_error(g, 400, "bad_field",
                              "field \"image\" must be the name of one of this tenant's templates");
            goto Error;
        }
        image = json_object_get_string(v);
    }
    int keep = json_object_object_get_ex(g->json, "keep_template", &v) && json_object_is_type(v, json_type_boolean) &&
               json_object_get_boolean(v);
    /* the proxy labels a template with its owner, and starts one only for it */
    json_object_object_add(g->json, "owner", json_object_new_string(g->tenant.name));
    if (image != NULL || keep) {
        sg_gw_templates_admit(&g->tenant, image, keep, on_admitted, g);
        return;
    }
    reserve_session(g);
    return;
Error:
    sg_gw_req_free(g);
}

static void on_admitted(void *data, int status, const char *code, const char *detail, int64_t row, const char *proxy)
{
    sg_gw_req_t *g = data;
    if (status == 0 && proxy[0] != '\0' && sg_proxies_count() > 1 && (g->proxy = sg_proxies_find(proxy)) == NULL) {
        status = 503;
        code = "template_unavailable";
        detail = "the template lives on a sandbox service that is no longer configured";
    }
    if (status != 0) {
        if (status == 429)
            sg_gw_reply_429(g, "quota_exceeded", "templates", 60, "%s", detail);
        else
            sg_gw_reply_error(g, status, code, "%s", detail);
        sg_gw_req_free(g);
        return;
    }
    g->template_row = row;
    reserve_session(g);
}

/* A slot among the tenant's live sessions, then the create goes to the proxy. */
static void reserve_session(sg_gw_req_t *g)
{
    unsigned char rnd[12];
    sg_random_bytes(rnd, sizeof(rnd));
    sg_hex(g->reservation, rnd, sizeof(rnd));
    /* the request's rate was left for here (auth.c): one state call for both */
    sg_state_session_admit(sg_gw.state, g->tenant.id, g->rerun ? 0 : g->tenant.rate_per_min, g->tenant.burst,
                           g->tenant.max_sessions, g->reservation, on_session_admitted, g);
}

static void on_session_admitted(void *data, const sg_admit_result_t *r)
{
    sg_gw_req_t *g = data;
    sg_state_result_t reserved = {.available = r->available, .ok = r->slot, .count = r->in_flight};

    if (r->available && r->rate.available) {
        g->rate = r->rate;
        g->rate_known = 1;
    }
    if (r->available && !r->rate.allowed) {
        sg_gw_reply_429(g, "quota_exceeded", "rate", r->rate.retry_after_s,
                        "rate limit: %ld requests per minute (burst %ld) exceeded", g->tenant.rate_per_min,
                        g->tenant.burst);
        sg_gw_template_release(g->template_row);
        sg_gw_req_free(g);
        return;
    }
    on_reserved(g, &reserved);
}

static void on_reserved(void *data, const sg_state_result_t *r)
{
    sg_gw_req_t *g = data;
    if (!r->available) {
        /* fail closed: without the shared count the cap cannot be kept */
        sg_metrics_upstream_error("redis");
        sg_gw_reply_error(g, 503, "state_unavailable",
                          "session accounting is unavailable (Redis does not answer); try again");
        sg_gw_template_release(g->template_row);
        sg_gw_req_free(g);
        return;
    }
    if (!r->ok) {
        sg_gw_reply_429(g, "quota_exceeded", "sessions", 5, "the tenant already has %ld live sessions, its limit",
                        g->tenant.max_sessions);
        sg_gw_template_release(g->template_row);
        sg_gw_req_free(g);
        return;
    }
    sg_gw_forward(g, "POST", "/sessions", sg_gw.call_timeout_ms, on_create_reply);
}

typedef struct {
    sg_gw_job_t job;
    sg_session_rec_t rec;
    sg_gw_req_t *g;
    json_object *reply;
} open_job_t;

static void open_fn(sg_gw_job_t *job, sg_store_t *st)
{
    open_job_t *j = (open_job_t *)job;
    job->rc = sg_store_session_open(st, &j->rec, job->err, sizeof(job->err));
    if (job->rc == 0 && j->g->template_row != 0 &&
        sg_store_template_bind(st, j->g->template_row, j->rec.id, job->err, sizeof(job->err)) != 0)
        sg_error("session %s: cannot bind its template slot: %s", j->rec.id, job->err);
}

static size_t commits_live;

size_t sg_gw_session_commits_live(void)
{
    return commits_live;
}

static void on_committed(void *data, const sg_state_result_t *r)
{
    commits_live--;
}

/* The reply goes out once the session is on record in the ledger: the
 * client's next request, through any gateway, looks its owner up there.
 * The live state's commit was sent before the insert ran and is not waited
 * for: this gateway's next calls go behind it on the same connection, a
 * delete through another gateway that reaches Redis first leaves the
 * session's closed mark, which the commit heeds (it then only gives the
 * reservation back), a stop waits for it (main.c), and a commit Redis
 * does not take is restored by the rebuild. */
static void open_done(sg_gw_job_t *job)
{
    open_job_t *j = (open_job_t *)job;
    if (job->rc != 0) {
        sg_error("session %s: cannot record it: %s", j->rec.id, job->err);
        json_object_put(j->reply);
        sg_gw_reply_error(j->g, 500, "internal", "the session could not be recorded: %s", job->err);
        /* the proxy has a container for it: removed like any other */
        sg_gw_close_session_at(j->rec.id, j->rec.tenant_id, j->rec.proxy, "deleted", NULL, NULL);
    } else {
        sg_gw_auth_cache_session(&j->rec); /* its first execute needs no DB job */
        sg_gw_reply_json(j->g, 200, j->reply);
    }
    sg_gw_req_free(j->g);
    free(j);
}

static void on_create_reply(void *data, const sg_upstream_reply_t *r)
{
    sg_gw_req_t *g = data;
    json_object *o = NULL, *v;
    const char *sid = NULL;

    if (r->status == 200 && (o = json_tokener_parse(r->body)) != NULL && json_object_object_get_ex(o, "session_id", &v))
        sid = json_object_get_string(v);
    if (sid == NULL || strlen(sid) != 36) {
        sg_state_session_unreserve(sg_gw.state, g->tenant.id, g->reservation, sg_gw_state_ignore, NULL);
        sg_gw_template_release(g->template_row);
        if (r->status == 0)
            sg_gw_reply_upstream_failure(g, r);
        else if (r->status == 200)
            sg_gw_reply_error(g, 502, "bad_upstream_reply", "the sandbox service's reply had no session id");
        else
            sg_gw_reply_raw(g, (int)r->status, r->content_type, r->body, r->body_len);
        json_object_put(o);
        sg_gw_req_free(g);
        return;
    }
    int64_t now = sg_gw_now_up();
    sg_live_session_t live = {0};
    snprintf(live.id, sizeof(live.id), "%s", sid);
    live.tenant_id = g->tenant.id;
    snprintf(live.lang, sizeof(live.lang), "%s", g->lang);
    live.created_at = live.last_used_at = now;
    live.idle_deadline = now + g->tenant.idle_timeout;
    live.lifetime_deadline = now + g->tenant.max_lifetime;
    snprintf(live.proxy, sizeof(live.proxy), "%s", g->proxy->url);

    open_job_t *j = sg_xcalloc(1, sizeof(*j));
    commits_live++;
    sg_state_session_commit(sg_gw.state, g->reservation, &live, on_committed, NULL);
    snprintf(j->rec.id, sizeof(j->rec.id), "%s", sid);
    j->rec.tenant_id = g->tenant.id;
    snprintf(j->rec.lang, sizeof(j->rec.lang), "%s", g->lang);
    /* the runtime the proxy reports for it (a name it may use, else unknown) */
    if (json_object_object_get_ex(o, "runtime", &v) && json_object_is_type(v, json_type_string) &&
        sg_tenant_runtime_valid(json_object_get_string(v)))
        snprintf(j->rec.runtime, sizeof(j->rec.runtime), "%s", json_object_get_string(v));
    j->rec.created_at = now;
    snprintf(j->rec.proxy, sizeof(j->rec.proxy), "%s", g->proxy->url);
    j->job.fn = open_fn;
    j->job.done = open_done;
    /* the proxy's reply, with the deadlines the gateway keeps */
    json_object_object_add(o, "idle_timeout", json_object_new_int64(g->tenant.idle_timeout));
    json_object_object_add(o, "expires_at", json_object_new_int64(live.lifetime_deadline));
    j->g = g;
    j->reply = o;
    /* one insert: on the loop's connection unless the database is busy (a
     * template's slot is bound too, on a DB thread as before) */
    if (g->template_row == 0 && sg_gw_loop_write(open_fn, &j->job)) {
        open_done(&j->job);
        return;
    }
    sg_gw_db_submit(&j->job);
}

/* ---- GET /sessions ------------------------------------------------------------------------ */

typedef struct {
    sg_gw_job_t job;
    sg_gw_req_t *g;
    json_object *ids;
} list_job_t;

static void add_open_id(const sg_session_rec_t *s, void *data)
{
    json_object_array_add(data, json_object_new_string(s->id));
}

static void list_fn(sg_gw_job_t *job, sg_store_t *st)
{
    list_job_t *j = (list_job_t *)job;
    job->rc = sg_store_session_list_open(st, j->g->tenant.id, add_open_id, j->ids, job->err, sizeof(job->err));
}

static void list_done(sg_gw_job_t *job)
{
    list_job_t *j = (list_job_t *)job;
    if (job->rc != 0) {
        sg_gw_reply_error(j->g, 500, "internal", "cannot list sessions: %s", job->err);
        json_object_put(j->ids);
    } else {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "sessions", j->ids);
        sg_gw_reply_json(j->g, 200, o);
    }
    sg_gw_req_free(j->g);
    free(j);
}

static void list(sg_gw_req_t *g)
{
    list_job_t *j = sg_xcalloc(1, sizeof(*j));
    j->g = g;
    j->ids = json_object_new_array();
    /* a tenant's open sessions are few: read on the loop when it can be
     * done at once (auth.c), else by a DB job */
    if (sg_gw_loop_read(g->tenant.max_sessions, list_fn, &j->job)) {
        list_done(&j->job);
        return;
    }
    json_object_put(j->ids); /* what a read cut short left in it */
    j->ids = json_object_new_array();
    sg_gw_db_run(&j->job, list_fn, list_done);
}

/* ---- GET /sessions/{id} ------------------------------------------------------------------- */

static void get(sg_gw_req_t *g)
{
    char path[128];
    snprintf(path, sizeof(path), "/sessions/%s", g->sid);
    sg_gw_forward(g, "GET", path, sg_gw.call_timeout_ms, sg_gw_pass_reply);
}

/* ---- DELETE /sessions/{id} ---------------------------------------------------------------- */

/* The reply to a DELETE goes out once the close is on record: a GET
 * /sessions right after must not list the session. The close removes the
 * container on the proxy first; when the proxy does not confirm it, the
 * session stays (open, counted) and the close is retried in the
 * background. */
static void on_closed(void *data, int closed)
{
    sg_gw_req_t *g = data;
    if (closed) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "status", json_object_new_string("closed"));
        sg_gw_reply_json(g, 200, o);
    } else {
        sg_metrics_upstream_error("unreachable");
        sg_gw_reply_error(g, 502, "proxy_unavailable",
                          "the sandbox service did not confirm that the session's container is removed; the session "
                          "stays open and counted until it does (the close is retried)");
    }
    sg_gw_req_free(g);
}

static void delete (sg_gw_req_t *g)
{
    sg_gw_close_session_at(g->sid, g->tenant.id, g->sess.proxy, "deleted", on_closed, g);
}
