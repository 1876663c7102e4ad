/*
 * api_templates.c — the template images keep_template sessions leave behind
 * (session.h keeps them; docs/architecture.md says how): the internal
 * routes that list and remove them, GET /templates[?owner=NAME] and DELETE
 * /templates/{name} (docs/proxy-api.md). The proxy knows no tenants: each
 * template carries the "owner" string its session was created with, and
 * the gateway decides who may see or remove it.
 *
 * Loop thread; the Docker calls run on the worker threads.
 */
#include "api_routes.h"
#include "docker.h"
#include "log.h"
#include "util.h"
#include "validate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    sg_job_t super;
    const sg_proxy_t *px;
    sg_http_hold_t *hold;
    int remove;        /* DELETE, else GET */
    char name[300];    /* DELETE: "<repo>:<session id>" */
    char owner[65];    /* GET: only this owner's ("" = all) */
    int in_use;        /* DELETE: a live session of this proxy runs on it */
    json_object *list; /* GET: the reply's array */
    long status;
    const char *code;
    char err[512];
} tpl_job_t;

static const char *label_of(json_object *image, const char *key)
{
    json_object *labels, *v;
    if (!json_object_object_get_ex(image, "Labels", &labels) || !json_object_object_get_ex(labels, key, &v) ||
        !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

static int64_t int_of(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : 0;
}

/* The size of a base image, looked up once per listing. */
static int64_t base_size(sg_docker_t *d, json_object *cache, const char *base)
{
    json_object *v, *img = NULL;
    char err[256];
    int64_t size = 0;
    if (json_object_object_get_ex(cache, base, &v))
        return json_object_get_int64(v);
    if (sg_docker_image_inspect(d, base, &img, err, sizeof(err)) == 1)
        size = int_of(img, "Size");
    json_object_put(img);
    json_object_object_add(cache, base, json_object_new_int64(size));
    return size;
}

static void list_work(tpl_job_t *j, sg_docker_t *d)
{
    const char *repo = j->px->template_repo;
    char label[300], want[300];
    json_object *images = NULL, *bases = json_object_new_object();

    snprintf(label, sizeof(label), "sandgate.template=%s", repo);
    if (sg_docker_image_list(d, label, &images, j->err, sizeof(j->err)) != 0) {
        j->status = 503;
        j->code = "docker_unavailable";
        goto Exit;
    }
    j->list = json_object_new_array();
    for (size_t i = 0; i < json_object_array_length(images); i++) {
        json_object *img = json_object_array_get_idx(images, i), *tags, *t;
        const char *owner = label_of(img, "sandgate.owner"), *sid = label_of(img, "sandgate.session");
        const char *base = label_of(img, "sandgate.template.base"), *created = label_of(img, "sandgate.created");
        if (owner == NULL || sid == NULL || base == NULL)
            continue;
        if (j->owner[0] != '\0' && strcmp(owner, j->owner) != 0)
            continue;
        /* the name it was committed as; an image retagged otherwise is not one */
        snprintf(want, sizeof(want), "%s:%s", repo, sid);
        int tagged = 0;
        if (json_object_object_get_ex(img, "RepoTags", &tags) && json_object_is_type(tags, json_type_array))
            for (size_t k = 0; k < json_object_array_length(tags); k++)
                if (strcmp(json_object_get_string(json_object_array_get_idx(tags, k)), want) == 0)
                    tagged = 1;
        if (!tagged)
            continue;
        int64_t size = int_of(img, "Size") - base_size(d, bases, base);
        t = json_object_new_object();
        json_object_object_add(t, "name", json_object_new_string(want));
        json_object_object_add(t, "owner", json_object_new_string(owner));
        json_object_object_add(t, "session_id", json_object_new_string(sid));
        json_object_object_add(t, "base_image", json_object_new_string(base));
        json_object_object_add(
            t, "created_at",
            json_object_new_int64(created != NULL ? strtoll(created, NULL, 10) : int_of(img, "Created")));
        json_object_object_add(t, "size_bytes", json_object_new_int64(size > 0 ? size : 0));
        json_object_array_add(j->list, t);
    }
    j->status = 200;
Exit:
    json_object_put(images);
    json_object_put(bases);
}

static void remove_work(tpl_job_t *j, sg_docker_t *d)
{
    const char *repo = j->px->template_repo, *l;
    json_object *img = NULL, *cfg, *labels, *v;
    int r = sg_docker_image_inspect(d, j->name, &img, j->err, sizeof(j->err));

    j->status = 503;
    j->code = "docker_unavailable";
    if (r < 0)
        goto Exit;
    /* only what this repository's proxies committed as a template */
    l = NULL;
    if (r == 1 && json_object_object_get_ex(img, "Config", &cfg) && json_object_object_get_ex(cfg, "Labels", &labels) &&
        json_object_object_get_ex(labels, "sandgate.template", &v))
        l = json_object_get_string(v);
    if (r == 0 || l == NULL || strcmp(l, repo) != 0) {
        j->status = 404;
        j->code = "no_such_template";
        snprintf(j->err, sizeof(j->err), "no template named \"%s\"", j->name);
        goto Exit;
    }
    /* Docker refuses while any container of the image exists; those of
     * sessions already closed are on their way out: wait for them */
    for (int tries = 0;; tries++) {
        if (sg_docker_image_remove(d, j->name, &j->status, j->err, sizeof(j->err)) == 0 || j->status != 409 ||
            j->in_use || tries >= 50)
            break;
        usleep(200000);
    }
    if (j->status != 200 && j->status != 404) {
        if (j->status == 409) {
            j->code = "template_in_use";
            snprintf(j->err, sizeof(j->err), "template \"%s\" is in use by a session; close it first", j->name);
        } else {
            j->status = 503;
        }
        goto Exit;
    }
    sg_info("template %s: removed", j->name);
    j->status = 200;
Exit:
    json_object_put(img);
}

static void tpl_work(sg_job_t *job)
{
    tpl_job_t *j = (tpl_job_t *)job;
    sg_docker_t *d = sg_docker_thread();
    if (j->remove)
        remove_work(j, d);
    else
        list_work(j, d);
}

static void tpl_done(sg_job_t *job)
{
    tpl_job_t *j = (tpl_job_t *)job;
    h2o_req_t *req = sg_http_hold_req(j->hold);
    if (req != NULL) {
        if (j->status != 200) {
            sg_http_send_error(req, (int)j->status, j->code, "%s", j->err);
        } else {
            json_object *o = json_object_new_object();
            if (j->remove) {
                json_object_object_add(o, "status", json_object_new_string("removed"));
                json_object_object_add(o, "name", json_object_new_string(j->name));
            } else {
                json_object_object_add(o, "templates", j->list);
                j->list = NULL;
            }
            sg_http_send_json(req, 200, o);
        }
    }
    json_object_put(j->list);
    sg_http_hold_release(j->hold);
    free(j);
}

/* A template's name from the path, percent-decoded: "<repo>:<session id>"
 * exactly, or -1. */
static int parse_name(const char *repo, h2o_iovec_t seg, char *out, size_t outlen)
{
    size_t o, rl = strlen(repo);
    if (sg_http_decode_segment(seg, out, outlen) != 0)
        return -1;
    o = strlen(out);
    if (o != rl + 37 || strncmp(out, repo, rl) != 0 || out[rl] != ':' || !sg_is_uuid(out + rl + 1, 36))
        return -1;
    return 0;
}

static void check_in_use(sg_session_t *s, void *data)
{
    tpl_job_t *j = data;
    if (strcmp(s->image, j->name) == 0)
        j->in_use = 1;
}

static void tpl_submit(const sg_proxy_t *px, tpl_job_t *j, h2o_req_t *req)
{
    j->px = px;
    j->hold = sg_http_hold(req);
    j->super.work = tpl_work;
    j->super.done = tpl_done;
    sg_workq_submit(px->workq, &j->super);
}

int sg__api_get_templates(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    const sg_api_t *api = app;
    h2o_iovec_t owner = sg_http_query_param(req, "owner");
    tpl_job_t *j;

    if (owner.base != NULL && (!sg_validate_owner(owner.base, owner.len) || owner.len >= sizeof(j->owner))) {
        sg_http_send_error(req, 400, "bad_field", "query parameter \"owner\" must be 1 to 64 of [A-Za-z0-9._-]");
        return 0;
    }
    j = sg_xcalloc(1, sizeof(*j));
    if (owner.base != NULL)
        memcpy(j->owner, owner.base, owner.len);
    tpl_submit(api->proxy, j, req);
    return 0;
}

int sg__api_delete_template(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    const sg_api_t *api = app;
    char name[300];
    tpl_job_t *j;

    if (parse_name(api->proxy->template_repo, m->arg[0], name, sizeof(name)) != 0) {
        sg_http_send_error(req, 404, "no_such_template", "no template named \"%.*s\"",
                           (int)(m->arg[0].len > 300 ? 300 : m->arg[0].len), m->arg[0].base);
        return 0;
    }
    j = sg_xcalloc(1, sizeof(*j));
    j->remove = 1;
    snprintf(j->name, sizeof(j->name), "%s", name);
    sg_session_foreach(check_in_use, j);
    tpl_submit(api->proxy, j, req);
    return 0;
}
