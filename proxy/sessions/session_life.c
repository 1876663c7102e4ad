/*
 * session_life.c — a session's life (session_life.h): its container made
 * and its agent connected on a worker thread, its place in the table, its
 * close (keeping its work dir as a template image when asked), its
 * container slot handed back or on to a waiting request.
 */
#include "session_life.h"
#include "capacity.h"
#include "container.h"
#include "docker.h"
#include "json.h"
#include "log.h"
#include "runtime.h"
#include "util.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sg_sessions_conf_t conf;
static h2o_linklist_t table = {&table, &table};
static size_t table_count;

/* A session whose agent broke is closed like any other (session.h). */
static void close_broken(sg_session_t *s)
{
    sg_session_close(s, NULL, NULL);
}

void sg_sessions_init(const sg_sessions_conf_t *c)
{
    conf = *c;
    sg__session_on_broken(close_broken);
}

const sg_sessions_conf_t *sg__sessions_conf(void)
{
    return &conf;
}

void sg__session_list(sg_session_t *s)
{
    sg_session_ref(s);
    h2o_linklist_insert(&table, &s->_link);
    if (!s->ephemeral)
        table_count++;
    s->_where = SG_IN_TABLE;
    if (!s->ephemeral && conf.on_listed_change != NULL)
        conf.on_listed_change();
}

void sg__session_unlist(sg_session_t *s)
{
    if (s->_where == SG_IN_NONE)
        return;
    int listed = s->_where == SG_IN_TABLE && !s->ephemeral;
    h2o_linklist_unlink(&s->_link);
    if (listed)
        table_count--;
    s->_where = SG_IN_NONE;
    if (listed && conf.on_listed_change != NULL)
        conf.on_listed_change();
    sg_session_unref(s);
}

/* Sessions whose container is being removed and whose slot no request has
 * claimed yet (sg_slot_await), oldest close first. */
static h2o_linklist_t closing = {&closing, &closing};

/* The container is gone (or was never made): its slot goes back, or to the
 * request that claimed it (sg_slot_await), which runs now. */
static void slot_release(sg_session_t *s)
{
    if (h2o_linklist_is_linked(&s->_closing_link))
        h2o_linklist_unlink(&s->_closing_link);
    if (!s->_has_slot)
        return;
    s->_has_slot = 0;
    if (s->_handover_cb != NULL) {
        void (*cb)(void *data) = s->_handover_cb;
        s->_handover_cb = NULL;
        cb(s->_handover_data);
    } else {
        sg_capacity_give();
    }
}

int sg__slot_claim_closing(void (*cb)(void *data), void *data)
{
    sg_session_t *s;
    if (h2o_linklist_is_empty(&closing))
        return -1;
    s = H2O_STRUCT_FROM_MEMBER(sg_session_t, _closing_link, closing.next);
    h2o_linklist_unlink(&s->_closing_link);
    s->_handover_cb = cb;
    s->_handover_data = data;
    sg_debug("session %s: the slot of its container, being removed, goes to a request", s->id);
    return 0;
}

const char *sg_sessions_runtime(void)
{
    return conf.runtime != NULL ? conf.runtime : SG_RUNTIME_RUNC;
}

int sg_sessions_runtime_offered(const char *runtime)
{
    size_t i = sg_runtime_index(runtime);
    unsigned offered =
        conf.runtimes_offered != 0 ? conf.runtimes_offered : 1u << sg_runtime_index(sg_sessions_runtime());
    return i < SG_RUNTIME_COUNT && (offered & (1u << i)) != 0;
}

const char *sg_sessions_runtime_for(const sg_create_req_t *req)
{
    if (req->runtime != NULL)
        return req->runtime;
    /* runsc's entry has its network off (--network=none: with its own
     * network stack it does not start on this kind of engine), so a session
     * with the network runs on runc */
    return req->limits.network ? SG_RUNTIME_RUNC : sg_sessions_runtime();
}

const char *sg_session_runtime(const sg_session_t *s)
{
    return s->runtime != NULL ? s->runtime : sg_sessions_runtime();
}

/* ---- the Docker side, on worker threads ---------------------------------- */

json_object *sg_session_container_config(const sg_session_t *s, const char *proxy_id)
{
    sg_container_spec_t spec = {
        .kind = s->_pooled     ? SG_CONTAINER_POOL
                : s->ephemeral ? SG_CONTAINER_EPHEMERAL
                               : SG_CONTAINER_SESSION,
        .image = s->image,
        .proxy_id = proxy_id,
        .session_id = s->id,
        .lang = s->lang->name,
        .created = s->created_at,
        .limits = {s->limits.memory_mb, s->limits.cpus, s->limits.pids, s->limits.tmpfs_mb, s->limits.network},
        .runtime = sg_session_runtime(s),
        .network = conf.sandbox_network != NULL ? conf.sandbox_network : SG_SANDBOX_NETWORK,
        .agent_volume = s->foreign ? conf.agent_volume : NULL,
        .store_volume = s->lang->fetch_cmd != NULL ? conf.store_volume : NULL,
        .workdir_volume = s->keep_template || s->from_template,
    };
    return sg_container_config(&spec);
}

typedef struct {
    sg_job_t super;
    sg_session_t *s;
    json_object *config;
    int fd;
    uint8_t *leftover; /* agent stdout bytes read past READY */
    size_t leftover_len;
    sg_docker_demux_t demux;
    int status;
    const char *code;
    char err[512];
    sg_session_ready_cb cb;
    void *data;
} create_job_t;

typedef struct {
    sg_buf_t *out;
    int bad;
} ready_ctx_t;

static void on_ready_bytes(void *ctx, int stream, const uint8_t *p, size_t len)
{
    ready_ctx_t *r = ctx;
    if (stream == 1) {
        if (sg_buf_append(r->out, p, len) != 0)
            r->bad = 1;
    } else if (stream == 2) {
        sg_debug("agent: %.*s", (int)(len && p[len - 1] == '\n' ? len - 1 : len), (const char *)p);
    }
}

/* Reads from the attach socket until the agent's READY message is whole. */
static int wait_ready(create_job_t *j, int timeout_ms)
{
    sg_buf_t out;
    ready_ctx_t ctx = {&out, 0};
    uint64_t deadline = sg_now_ms() + (uint64_t)timeout_ms;
    uint8_t buf[4096];
    int ret = -1;

    sg_buf_init(&out, 1 << 16);
    sg_docker_demux_init(&j->demux);
    for (;;) {
        if (out.len >= SG_AGENT_HEADER_SIZE) {
            sg_agent_header_t h;
            if (sg_agent_header_decode((uint8_t *)out.base, &h) != 0 || h.type != SG_AGENT_READY) {
                snprintf(j->err, sizeof(j->err), "the sandbox agent did not introduce itself (is %s a sandgate image?)",
                         j->s->image);
                goto Exit;
            }
            if (out.len >= SG_AGENT_HEADER_SIZE + h.len) {
                sg_agent_reader_t r;
                uint32_t version = 0;
                sg_agent_reader_init(&r, out.base + SG_AGENT_HEADER_SIZE, h.len);
                if (sg_agent_get_u32(&r, &version) != 0 || version != SG_AGENT_PROTO_VERSION) {
                    snprintf(j->err, sizeof(j->err), "the sandbox agent speaks protocol %u, not %u", version,
                             SG_AGENT_PROTO_VERSION);
                    goto Exit;
                }
                size_t used = SG_AGENT_HEADER_SIZE + h.len;
                if (out.len > used) {
                    j->leftover = sg_xmalloc(out.len - used);
                    memcpy(j->leftover, out.base + used, out.len - used);
                    j->leftover_len = out.len - used;
                }
                ret = 0;
                goto Exit;
            }
        }
        uint64_t now = sg_now_ms();
        if (now >= deadline) {
            snprintf(j->err, sizeof(j->err), "the sandbox agent did not start within %d ms", timeout_ms);
            goto Exit;
        }
        struct pollfd p = {j->fd, POLLIN, 0};
        int r = poll(&p, 1, (int)(deadline - now));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        ssize_t n = read(j->fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            snprintf(j->err, sizeof(j->err), "the sandbox container exited at start (image %s)", j->s->image);
            goto Exit;
        }
        if (sg_docker_demux_feed(&j->demux, buf, (size_t)n, on_ready_bytes, &ctx) != 0 || ctx.bad) {
            snprintf(j->err, sizeof(j->err), "the sandbox's output stream was malformed at start");
            goto Exit;
        }
    }
Exit:
    sg_buf_free(&out);
    return ret;
}

/* The largest tar of a work dir of size_mb MiB that is read back: its
 * bytes plus room for the tar headers of many small files. */
static size_t workdir_archive_max(long size_mb)
{
    return ((size_t)size_mb << 20) + ((size_t)size_mb << 17) + (1u << 20);
}

static const char *label_of(json_object *image, const char *key)
{
    json_object *cfg, *labels, *v;
    if (!json_object_object_get_ex(image, "Config", &cfg) || !json_object_object_get_ex(cfg, "Labels", &labels) ||
        !json_object_object_get_ex(labels, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

static int64_t image_size(json_object *image)
{
    json_object *v;
    return json_object_object_get_ex(image, "Size", &v) ? json_object_get_int64(v) : 0;
}

/* A session made from a template: 1 if the template exists, was made by
 * this repository's proxies and belongs to the session's owner (when the
 * create named one), its base image then in s->base_image; 0 if not (as
 * for an image that does not exist: another owner's template is not
 * there for this one); -1 on a Docker error. */
static int template_base(sg_session_t *s, sg_docker_t *d, char *err, size_t errlen)
{
    json_object *img = NULL;
    const char *repo, *owner, *base;
    int r = sg_docker_image_inspect(d, s->image, &img, err, errlen);
    if (r != 1)
        return r;
    repo = label_of(img, "sandgate.template");
    owner = label_of(img, "sandgate.owner");
    base = label_of(img, "sandgate.template.base");
    r = repo != NULL && strcmp(repo, conf.template_repo) == 0 && base != NULL && base[0] != '\0' &&
        (s->owner[0] == '\0' || (owner != NULL && strcmp(owner, s->owner) == 0));
    if (r)
        snprintf(s->base_image, sizeof(s->base_image), "%s", base);
    json_object_put(img);
    return r;
}

/* Copies the template's work dir (SG_TEMPLATE_WORKDIR in its image) into
 * the running session's /sandbox volume, before any code runs. */
static int restore_workdir(sg_session_t *s, sg_docker_t *d, char *err, size_t errlen)
{
    sg_buf_t tar;
    int ret = -1;

    sg_buf_init(&tar, workdir_archive_max(s->limits.tmpfs_mb));
    if (sg_docker_archive_get(d, s->container_id, SG_TEMPLATE_WORKDIR "/.", &tar, err, errlen) != 0)
        goto Exit;
    if (sg_docker_archive_put(d, s->container_id, "/sandbox", tar.base, tar.len, err, errlen) != 0)
        goto Exit;
    ret = 0;
Exit:
    sg_buf_free(&tar);
    return ret;
}

/* Under runsc a container whose entrypoint is missing fails at start, after
 * its sandbox was made, and Docker 20.10 then leaves the containerd task and
 * its shim behind for good (neither `docker rm` nor a restart of the proxy
 * reaches them): so look before starting. */
static int entrypoint_found(create_job_t *j, sg_docker_t *d)
{
    int found = sg_docker_container_entrypoint_exists(d, j->s->container_id, j->err, sizeof(j->err));

    if (found == 0)
        snprintf(j->err, sizeof(j->err), "image %s has no agent: its entrypoint is missing", j->s->image);
    return found == 1;
}

static void create_work(sg_job_t *job)
{
    create_job_t *j = (create_job_t *)job;
    sg_docker_t *d = sg_docker_thread();
    char err[512];
    int exists;

    j->status = 503;
    j->code = "docker_unavailable";
    exists = j->s->from_template ? template_base(j->s, d, j->err, sizeof(j->err))
                                 : sg_docker_image_exists(d, j->s->image, j->err, sizeof(j->err));
    if (exists < 0)
        return;
    if (exists == 0) {
        j->status = 400;
        j->code = "unknown_image";
        snprintf(j->err, sizeof(j->err), "image %s does not exist on this Docker engine", j->s->image);
        return;
    }
    if (!j->s->from_template)
        snprintf(j->s->base_image, sizeof(j->s->base_image), "%s", j->s->image);
    if (sg_docker_container_create(d, j->config, j->s->container_id, j->err, sizeof(j->err)) != 0)
        return;
    j->status = 500;
    j->code = "sandbox_failed";
    if (strcmp(sg_session_runtime(j->s), SG_RUNTIME_RUNSC) == 0 && !entrypoint_found(j, d))
        goto Error;
    if (sg_docker_attach(j->s->container_id, conf.agent_start_timeout_ms, &j->fd, j->err, sizeof(j->err)) != 0)
        goto Error;
    if (sg_docker_container_start(d, j->s->container_id, j->err, sizeof(j->err)) != 0)
        goto Error;
    if (wait_ready(j, conf.agent_start_timeout_ms) != 0)
        goto Error;
    if (j->s->from_template && restore_workdir(j->s, d, j->err, sizeof(j->err)) != 0)
        goto Error;
    j->status = 200;
    return;

Error:
    if (j->fd >= 0) {
        close(j->fd);
        j->fd = -1;
    }
    if (sg_docker_container_remove(d, j->s->container_id, err, sizeof(err)) != 0)
        sg_error("session %s: cannot remove container %.12s after a failed start: %s", j->s->id, j->s->container_id,
                 err);
    j->s->container_id[0] = '\0';
}

static void create_done(sg_job_t *job)
{
    create_job_t *j = (create_job_t *)job;
    sg_session_t *s = j->s;

    json_object_put(j->config);
    if (j->status != 200) {
        sg_warn("session %s: start failed: %s", s->id, j->err);
        s->state = SG_SESSION_DEAD;
        slot_release(s);
        if (j->cb != NULL)
            j->cb(j->data, NULL, j->status, j->code, j->err);
        sg_session_unref(s);
        goto Exit;
    }
    sg__agent_connect(s, conf.loop, j->fd, &j->demux, j->leftover, j->leftover_len);
    sg_debug("session %s: %s container %.12s ready (%s)", s->id, s->lang->name, s->container_id,
             s->_pooled     ? "pool"
             : s->ephemeral ? "ephemeral"
                            : "session");
    /* ephemeral sessions are in the table too, for the watchdog, but never
     * listed; a pooled one goes to the pool's list (its cb) */
    if (!s->_pooled)
        sg__session_list(s);
    j->cb(j->data, s, 200, NULL, NULL);
    sg__agent_process(s);
Exit:
    free(j->leftover);
    free(j);
}

int sg__session_start(const sg_create_req_t *req, int ephemeral, int pooled, sg_session_ready_cb cb, void *data)
{
    sg_session_t *s = sg_xcalloc(1, sizeof(*s));
    create_job_t *j = sg_xcalloc(1, sizeof(*j));

    if (sg_uuid4(s->id) != 0) {
        free(s);
        free(j);
        sg_capacity_give();
        if (cb != NULL)
            cb(data, NULL, 500, "internal", "out of memory");
        return -1;
    }
    s->_refcnt = 1; /* handed to cb on success */
    s->_has_slot = 1;
    s->lang = req->lang;
    s->runtime = sg_sessions_runtime_for(req);
    s->limits = req->limits;
    s->keep_template = req->keep_template;
    if (req->owner != NULL)
        snprintf(s->owner, sizeof(s->owner), "%s", req->owner);
    s->ephemeral = ephemeral;
    s->_pooled = pooled;
    s->created_at = s->last_used_at = sg_wall_s();
    s->state = SG_SESSION_STARTING;
    h2o_linklist_init_anchor(&s->_ops);
    sg_buf_init(&s->_inbuf, SG_AGENT_HEADER_SIZE + SG_AGENT_MAX_PAYLOAD);
    if (req->image != NULL) {
        snprintf(s->image, sizeof(s->image), "%s", req->image);
        s->from_template = strncmp(req->image, conf.template_repo, strlen(conf.template_repo)) == 0 &&
                           req->image[strlen(conf.template_repo)] == ':';
        s->foreign = !s->from_template && strncmp(req->image, conf.image_prefix, strlen(conf.image_prefix)) != 0;
    } else
        snprintf(s->image, sizeof(s->image), "%s%s:latest", conf.image_prefix, s->lang->name);

    j->super.work = create_work;
    j->super.done = create_done;
    j->s = s;
    j->fd = -1;
    j->cb = cb;
    j->data = data;
    j->config = sg_session_container_config(s, conf.proxy_id);
    sg_workq_submit(conf.workq, &j->super);
    return 0;
}

sg_session_t *sg_session_find(const char *id, size_t len)
{
    for (h2o_linklist_t *l = table.next; l != &table; l = l->next) {
        sg_session_t *s = H2O_STRUCT_FROM_MEMBER(sg_session_t, _link, l);
        if (!s->ephemeral && strlen(s->id) == len && memcmp(s->id, id, len) == 0)
            return s;
    }
    return NULL;
}

size_t sg_session_count(void)
{
    return table_count;
}

void sg_session_foreach(void (*fn)(sg_session_t *s, void *data), void *data)
{
    for (h2o_linklist_t *l = table.next; l != &table;) {
        h2o_linklist_t *next = l->next;
        fn(H2O_STRUCT_FROM_MEMBER(sg_session_t, _link, l), data);
        l = next;
    }
}

typedef struct {
    sg_job_t super;
    sg_session_t *s;
    int commit;
    char template_image[256];
    int64_t template_size;
    char err[512];
    int failed;
    sg_session_closed_cb cb;
    void *data;
} close_job_t;

/* The container a template is committed from (container.h). */
static json_object *template_builder_config(const sg_session_t *s)
{
    sg_container_spec_t spec = {
        .kind = SG_CONTAINER_TEMPLATE,
        .image = s->base_image,
        .proxy_id = conf.proxy_id,
        .session_id = s->id,
        .lang = s->lang->name,
        .created = sg_wall_s(),
        .template_repo = conf.template_repo,
        .template_owner = s->owner,
        .template_base = s->base_image,
    };
    return sg_container_config(&spec);
}

/* keep_template: the session's work dir (a size-capped volume) is read
 * with the container paused, written into a fresh container of the base
 * image at SG_TEMPLATE_WORKDIR, and that container is committed. So a
 * template is its base image plus one layer no larger than the work dir's
 * cap, whatever the session did to its own container. */
static int keep_workdir(close_job_t *j, sg_docker_t *d)
{
    sg_session_t *s = j->s;
    json_object *cfg = NULL, *img = NULL;
    char builder[72] = "", image_id[80], err[512];
    sg_buf_t tar;
    int ret = -1;

    sg_buf_init(&tar, workdir_archive_max(s->limits.tmpfs_mb));
    /* stops the tenant's processes writing while the work dir is read */
    int paused = sg_docker_container_pause(d, s->container_id, err, sizeof(err)) == 0;
    if (!paused)
        sg_warn("session %s: cannot pause it before keeping its work dir: %s", s->id, err);
    int got = sg_docker_archive_get(d, s->container_id, "/sandbox/.", &tar, j->err, sizeof(j->err));
    /* resumed before it is removed: a paused runsc sandbox does not die by
     * SIGKILL (Docker gives up on its "zombie" after 10 s) */
    if (paused && sg_docker_container_unpause(d, s->container_id, err, sizeof(err)) != 0)
        sg_warn("session %s: cannot unpause it: %s", s->id, err);
    if (got != 0)
        goto Exit;
    cfg = template_builder_config(s);
    if (sg_docker_container_create(d, cfg, builder, j->err, sizeof(j->err)) != 0) {
        builder[0] = '\0';
        goto Exit;
    }
    if (sg_docker_archive_put(d, builder, SG_TEMPLATE_WORKDIR, tar.base, tar.len, j->err, sizeof(j->err)) != 0)
        goto Exit;
    if (sg_docker_container_commit(d, builder, conf.template_repo, s->id, "{\"WorkingDir\":\"/sandbox\"}", image_id,
                                   j->err, sizeof(j->err)) != 0)
        goto Exit;
    snprintf(j->template_image, sizeof(j->template_image), "%s:%s", conf.template_repo, s->id);
    j->template_size = 0;
    if (sg_docker_image_inspect(d, j->template_image, &img, err, sizeof(err)) == 1) {
        j->template_size = image_size(img);
        json_object_put(img);
        img = NULL;
        if (sg_docker_image_inspect(d, s->base_image, &img, err, sizeof(err)) == 1)
            j->template_size -= image_size(img);
        if (j->template_size < 0)
            j->template_size = 0;
    }
    ret = 0;
Exit:
    if (builder[0] != '\0' && sg_docker_container_remove(d, builder, err, sizeof(err)) != 0)
        sg_error("session %s: cannot remove the template's builder %.12s: %s", s->id, builder, err);
    json_object_put(cfg);
    json_object_put(img);
    sg_buf_free(&tar);
    return ret;
}

static void close_work(sg_job_t *job)
{
    close_job_t *j = (close_job_t *)job;
    sg_docker_t *d = sg_docker_thread();
    char err[512];

    if (j->s->container_id[0] == '\0')
        return;
    if (j->commit && keep_workdir(j, d) != 0) {
        j->template_image[0] = '\0';
        j->failed = 1;
    }
    if (sg_docker_container_remove(d, j->s->container_id, err, sizeof(err)) != 0) {
        sg_error("session %s: cannot remove container %.12s: %s", j->s->id, j->s->container_id, err);
        if (!j->failed)
            snprintf(j->err, sizeof(j->err), "%s", err);
        j->failed = 1;
    }
}

static void close_done(sg_job_t *job)
{
    close_job_t *j = (close_job_t *)job;
    sg_session_t *s = j->s;

    s->state = SG_SESSION_DEAD;
    sg__agent_close(s);
    slot_release(s);
    sg__ops_fail(s, 502, "the session was closed while this operation waited");
    sg_info("session %s: closed%s%s", s->id, j->template_image[0] ? ", kept as " : "", j->template_image);
    if (j->cb != NULL)
        j->cb(j->data, j->template_image[0] ? j->template_image : NULL, j->template_size, j->failed ? j->err : NULL);
    sg_session_unref(s);
    free(j);
}

void sg_session_close(sg_session_t *s, sg_session_closed_cb cb, void *data)
{
    close_job_t *j;

    if (s->_close_requested) {
        /* the container is being removed already */
        if (cb != NULL)
            cb(data, NULL, 0, NULL);
        return;
    }
    s->_close_requested = 1;
    sg_session_ref(s); /* the close job's, taken before the list's goes */
    sg__session_unlist(s);
    if (s->_has_slot && s->_handover_cb == NULL)
        h2o_linklist_insert(&closing, &s->_closing_link); /* its slot can be claimed */
    if (s->state != SG_SESSION_DEAD)
        s->state = SG_SESSION_CLOSING;
    j = sg_xcalloc(1, sizeof(*j));
    j->super.work = close_work;
    j->super.done = close_done;
    j->s = s;
    j->commit = s->keep_template;
    j->cb = cb;
    j->data = data;
    sg_workq_submit(conf.workq, &j->super);
}
