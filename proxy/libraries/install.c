#include "install.h"
#include "pool.h"
#include "capacity.h"
#include "container.h"
#include "docker.h"
#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_object *sg_install_container_config(const sg_proxy_t *px, const sg_session_t *s, const char *spec)
{
    const sg_install_conf_t *conf = &px->install;
    sg_container_spec_t c = {
        .kind = SG_CONTAINER_INSTALLER,
        .image = s->image,
        .proxy_id = px->id,
        .session_id = s->id,
        .created = sg_wall_s(),
        .store_volume = conf->store_volume,
        .fetch_cmd = s->lang->fetch_cmd,
        .fetch_spec = spec,
        .index_url = strcmp(s->lang->package_manager, "npm") == 0 ? conf->npm_registry : conf->pip_index_url,
        .install_network = conf->network,
    };
    return sg_container_config(&c);
}

typedef struct {
    sg_job_t super;
    const sg_proxy_t *px;
    sg_session_t *s;
    json_object *config;
    sg_fetch_result_t r;
    int has_slot; /* a container slot (capacity.h); without one, nothing is started */
    sg_fetch_cb cb;
    void *data;
} fetch_job_t;

/* Keeps the last lines of a log that fit in out. */
static void tail_into(char *out, size_t cap, const sg_buf_t *log)
{
    const char *p = log->base != NULL ? log->base : "";
    size_t len = log->len;
    while (len > 0 && (p[len - 1] == '\n' || p[len - 1] == ' '))
        len--;
    if (len >= cap) {
        p += len - (cap - 1);
        len = cap - 1;
        const char *nl = memchr(p, '\n', len);
        if (nl != NULL) {
            len -= (size_t)(nl + 1 - p);
            p = nl + 1;
        }
    }
    memcpy(out, p, len);
    out[len] = '\0';
}

static void fetch_work(sg_job_t *job)
{
    fetch_job_t *j = (fetch_job_t *)job;
    const sg_install_conf_t *conf = &j->px->install;
    sg_docker_t *d = sg_docker_thread();
    char id[72] = "", err[512];
    long code = -1;
    sg_buf_t log;
    uint64_t t0 = sg_now_us();

    if (!j->has_slot) {
        j->r.no_capacity = 1;
        snprintf(j->r.message, sizeof(j->r.message), "the proxy is at its limit of %ld containers", sg_capacity_max());
        return;
    }
    sg_buf_init(&log, 64 << 10);
    if (sg_docker_container_create(d, j->config, id, j->r.message, sizeof(j->r.message)) != 0 ||
        sg_docker_container_start(d, id, j->r.message, sizeof(j->r.message)) != 0)
        goto Exit;
    if (sg_docker_container_wait(d, id, conf->timeout_ms, &code, err, sizeof(err)) != 0) {
        j->r.timed_out = 1;
        snprintf(j->r.message, sizeof(j->r.message), "the install did not finish within %.0f s",
                 (double)conf->timeout_ms / 1000);
        goto Exit;
    }
    sg_docker_container_logs(d, id, &log, err, sizeof(err));
    tail_into(j->r.message, sizeof(j->r.message), &log);
    j->r.ok = code == 0;
Exit:
    if (id[0] != '\0' && sg_docker_container_remove(d, id, err, sizeof(err)) != 0)
        sg_error("installer %.12s: cannot remove it: %s", id, err);
    j->r.seconds = (double)(sg_now_us() - t0) / 1e6;
    sg_buf_free(&log);
}

static void fetch_done(sg_job_t *job)
{
    fetch_job_t *j = (fetch_job_t *)job;
    json_object_put(j->config);
    if (j->has_slot)
        sg_capacity_give(); /* the installer was removed on the worker */
    j->cb(j->data, &j->r);
    sg_session_unref(j->s);
    free(j);
}

static void fetch_submit(void *data)
{
    fetch_job_t *j = data;
    sg_workq_submit(j->px->workq, &j->super);
}

void sg_install_fetch(const sg_proxy_t *px, sg_session_t *s, const char *spec, sg_fetch_cb cb, void *data)
{
    fetch_job_t *j = sg_xcalloc(1, sizeof(*j));
    sg_session_ref(s);
    j->px = px;
    j->s = s;
    j->cb = cb;
    j->data = data;
    j->config = sg_install_container_config(px, s, spec);
    j->super.work = fetch_work;
    j->super.done = fetch_done;
    if (sg_capacity_take() == 0) {
        j->has_slot = 1;
    } else if (sg_slot_await(fetch_submit, j) == 0) {
        j->has_slot = 1; /* handed over once a container being removed is gone */
        return;
    }
    /* without a slot the job only reports no_capacity (from the loop's queue) */
    fetch_submit(j);
}
