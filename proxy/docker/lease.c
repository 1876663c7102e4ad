/*
 * lease.c — a proxy id's lease on the engine (lease.h).
 */
#include "lease.h"
#include "container.h"
#include "log.h"
#include "util.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define LEASE_GIVE_UP_MS 30000 /* a dead proxy's lease still not removed: an engine in trouble */

/* 1 running, 0 gone or stopped, -1 Docker failed (err). */
static int lease_running(sg_docker_t *d, const char *name, char *err, size_t errlen)
{
    char path[320];
    long status = 0;
    sg_buf_t resp;
    json_object *o = NULL, *state, *running;
    int r = -1;

    snprintf(path, sizeof(path), "/containers/%s/json", name);
    sg_buf_init(&resp, 1 << 20);
    if (sg_docker_request(d, "GET", path, NULL, 0, &status, &resp, err, errlen) != 0)
        goto Exit;
    if (status == 404) {
        r = 0;
        goto Exit;
    }
    if (status != 200 || (o = json_tokener_parse(resp.base != NULL ? resp.base : "")) == NULL) {
        snprintf(err, errlen, "Docker answered %ld to the inspection of %s", status, name);
        goto Exit;
    }
    r = json_object_object_get_ex(o, "State", &state) && json_object_object_get_ex(state, "Running", &running) &&
        json_object_get_boolean(running);
Exit:
    json_object_put(o);
    sg_buf_free(&resp);
    return r;
}

/* POST /containers/create?name=NAME: 0 (id set), 1 the name is taken
 * (409), -1 (err). */
static int create_named(sg_docker_t *d, const char *name, json_object *config, char id[72], char *err, size_t errlen)
{
    char path[320];
    long status = 0;
    size_t len;
    const char *body = json_object_to_json_string_length(config, JSON_C_TO_STRING_PLAIN, &len);
    sg_buf_t resp;
    json_object *o = NULL, *v;
    int r = -1;

    snprintf(path, sizeof(path), "/containers/create?name=%s", name);
    sg_buf_init(&resp, 1 << 20);
    if (sg_docker_request(d, "POST", path, body, len, &status, &resp, err, errlen) != 0)
        goto Exit;
    if (status == 409) {
        r = 1;
        goto Exit;
    }
    if (status != 201 || (o = json_tokener_parse(resp.base != NULL ? resp.base : "")) == NULL ||
        !json_object_object_get_ex(o, "Id", &v)) {
        snprintf(err, errlen, "Docker refused to create the lease container %s (%ld): %.200s", name, status,
                 resp.base != NULL ? resp.base : "");
        goto Exit;
    }
    snprintf(id, 72, "%s", json_object_get_string(v));
    r = 0;
Exit:
    json_object_put(o);
    sg_buf_free(&resp);
    return r;
}

int sg_lease_take(sg_docker_t *d, const char *proxy_id, const char *image, int *fd, char *err, size_t errlen)
{
    char name[256], id[72], rerr[512];
    sg_container_spec_t spec = {
        .kind = SG_CONTAINER_LEASE,
        .image = image,
        .proxy_id = proxy_id,
        .session_id = "lease",
        .created = sg_wall_s(),
    };
    json_object *config = sg_container_config(&spec);
    int ret = -1;

    *fd = -1;
    snprintf(name, sizeof(name), SG_LEASE_PREFIX "%s", proxy_id);
    uint64_t start = sg_now_ms();
    for (;;) {
        int r = create_named(d, name, config, id, err, errlen);
        if (r < 0)
            goto Exit;
        if (r == 0)
            break;
        /* Taken: a live proxy's, or a dead one's that Docker is ending. */
        int running = lease_running(d, name, err, errlen);
        if (running < 0)
            goto Exit;
        if (running == 1 && sg_now_ms() - start >= SG_LEASE_WAIT_MS) {
            snprintf(err, errlen,
                     "another proxy with id \"%s\" is alive on this Docker engine (its lease container %s is "
                     "running); refusing to start, nothing was removed",
                     proxy_id, name);
            ret = 1;
            goto Exit;
        }
        if (sg_now_ms() - start >= LEASE_GIVE_UP_MS) {
            snprintf(err, errlen, "the lease container %s of a dead proxy is not removed after %d ms", name,
                     LEASE_GIVE_UP_MS);
            goto Exit;
        }
        if (running == 0) {
            /* stopped, its removal (AutoRemove) perhaps under way: help it */
            long status = 0;
            sg_buf_t resp;
            snprintf(rerr, sizeof(rerr), "/containers/%s?force=1", name);
            sg_buf_init(&resp, 1 << 16);
            sg_docker_request(d, "DELETE", rerr, NULL, 0, &status, &resp, err, errlen);
            sg_buf_free(&resp);
        }
        usleep(100 * 1000);
    }
    if (sg_docker_attach(id, 10000, fd, err, errlen) != 0)
        goto Remove;
    if (sg_docker_container_start(d, id, err, errlen) != 0)
        goto Remove;
    sg_info("lease %s taken", name);
    ret = 0;
    goto Exit;
Remove:
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    if (sg_docker_container_remove(d, id, rerr, sizeof(rerr)) != 0)
        sg_warn("cannot remove the lease container %s: %s", name, rerr);
Exit:
    json_object_put(config);
    return ret;
}

void sg_lease_release(sg_docker_t *d, const char *proxy_id, int fd)
{
    char name[256], err[512];

    snprintf(name, sizeof(name), SG_LEASE_PREFIX "%s", proxy_id);
    if (fd >= 0)
        close(fd);
    if (sg_docker_container_remove(d, name, err, sizeof(err)) != 0)
        sg_warn("cannot remove the lease container %s: %s", name, err);
}
