/*
 * pool.c — where a new session comes from (pool.h): the warm pool (ready
 * containers per language, made with the pool's limits and warmed up,
 * taken by requests that fit them, yielded when a request needs the room),
 * a free container slot, or one on its way back; and the tick.
 */
#include "pool.h"
#include "capacity.h"
#include "log.h"
#include "runtime.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POOL_RETRY_MS 30000
#define POOL_MAX_STARTING 2 /* per language and runtime */
#define MAX_LANGS 16

/* One pool per language and runtime: a session never gets a container of
 * another runtime than its own. */
typedef struct {
    h2o_linklist_t ready; /* of sessions, SG_IN_POOL; an anchor once ready_list made it one */
    size_t nstarting;
    uint64_t retry_at_ms;  /* after a failed start */
    uint64_t refill_at_ms; /* after a take, until a fill runs: the replacement waits until then (the
                            * session's first execute done); 0: no refill waits */
    int asked;             /* a request named this language on this runtime: it fills */
} pool_t;

static pool_t pools[MAX_LANGS][SG_RUNTIME_COUNT];

static pool_t *pool_of(const sg_lang_t *lang, const char *runtime)
{
    size_t li = sg_lang_index(lang), ri = sg_runtime_index(runtime);
    return &pools[li < MAX_LANGS ? li : 0][ri < SG_RUNTIME_COUNT ? ri : 0];
}

static h2o_linklist_t *ready_list(pool_t *p)
{
    if (p->ready.next == NULL) /* still zeroed */
        h2o_linklist_init_anchor(&p->ready);
    return &p->ready;
}

static size_t nready(pool_t *p)
{
    size_t n = 0;
    for (h2o_linklist_t *l = ready_list(p)->next; l != ready_list(p); l = l->next)
        n++;
    return n;
}

static void on_warm_up_done(sg_op_t *op)
{
    if (op->failed || op->reason != SG_AGENT_REASON_EXITED || op->exit_code != 0)
        sg_warn("session %s: the %s kernel did not start cleanly (%s, exit %d): %.*s", op->session->id,
                op->session->lang->name, op->failed ? op->errmsg : sg_agent_reason_name(op->reason), op->exit_code,
                (int)(op->out[1].len > 300 ? 300 : op->out[1].len), op->out[1].base ? op->out[1].base : "");
    sg_op_free(op);
}

/* A pooled container starts its language's kernel at once (an empty
 * execution), so that a session's first execute does not wait for the
 * interpreter to start. A request that takes the container meanwhile queues
 * behind it. */
static void warm_up(sg_session_t *s)
{
    sg_op_t *op;
    if (s->lang->kernel_cmd == NULL)
        return;
    op = sg_op_exec(s, NULL, NULL, NULL, NULL, s->lang->kernel_cmd, "", 0, 30.0);
    if (op != NULL)
        sg_op_submit(op, on_warm_up_done, NULL);
}

/* A pooled container's start ended (sg_session_ready_cb; data is its pool):
 * ready, it is listed and its kernel started; failed, its pool waits a
 * while. */
static void on_started(void *data, sg_session_t *s, int status, const char *code, const char *detail)
{
    pool_t *p = data;
    p->nstarting--;
    if (s == NULL) {
        p->retry_at_ms = sg_now_ms() + POOL_RETRY_MS;
        return;
    }
    h2o_linklist_insert(ready_list(p), &s->_link); /* takes the reference handed over */
    s->_where = SG_IN_POOL;
    warm_up(s);
}

/* A pooled container fits a request whose container settings are the
 * pool's; the per-execution ones (timeout, output cap) are the agent's. The
 * runtime picks the pool. */
static int fits(const sg_create_req_t *req)
{
    const sg_limits_t *a = &req->limits, *b = &sg__sessions_conf()->pool_limits;
    return req->image == NULL && !req->keep_template && a->memory_mb == b->memory_mb && a->cpus == b->cpus &&
           a->network == b->network && a->pids == b->pids && a->tmpfs_mb == b->tmpfs_mb;
}

/* A ready pooled container for req (its runtime resolved), unlisted, its
 * reference the caller's; or NULL. */
static sg_session_t *pool_take(const sg_create_req_t *req)
{
    pool_t *p = pool_of(req->lang, req->runtime);
    if (!fits(req))
        return NULL;
    while (!h2o_linklist_is_empty(ready_list(p))) {
        sg_session_t *s = H2O_STRUCT_FROM_MEMBER(sg_session_t, _link, ready_list(p)->next);
        sg_session_ref(s);
        sg__session_unlist(s);
        if (s->state == SG_SESSION_ACTIVE) {
            /* A replacement's start (and its kernel's, ~750 ms of CPU under
             * gVisor) would compete with this session's first execute for
             * the cores: while the pool still holds a ready container it
             * waits a moment, counted from the first take it waits for. A
             * take while it waits does not put it off again: takes coming
             * faster than the delay would otherwise hold every refill back
             * until the pool ran dry, and the next create started cold.
             * Emptied, it refills at once. */
            if (!h2o_linklist_is_empty(ready_list(p)) && p->refill_at_ms == 0) /* until sg_pool_fill refills */
                p->refill_at_ms = sg_now_ms() + (uint64_t)sg__sessions_conf()->pool_refill_delay_ms;
            return s;
        }
        sg_session_unref(s);
    }
    return NULL;
}

void sg_pool_fill(void)
{
    const sg_sessions_conf_t *conf = sg__sessions_conf();
    uint64_t now = sg_now_ms();
    /* the pool counts, but leaves a quarter of the cap to requests */
    long headroom = sg_capacity_max() / 4 > 1 ? sg_capacity_max() / 4 : 1;
    /* the pools that fill: every language's on the default runtime and on
     * those of SANDGATE_POOL_RUNTIMES; on another runtime, a language's once
     * a request named both */
    unsigned all = (1u << sg_runtime_index(sg_sessions_runtime())) | conf->pool_runtimes;
    for (size_t r = 0; r < SG_RUNTIME_COUNT; r++) {
        if (!sg_sessions_runtime_offered(sg_runtime_at(r)))
            continue;
        for (size_t i = 0; i < sg_lang_count() && i < MAX_LANGS; i++) {
            pool_t *p = &pools[i][r];
            sg_create_req_t req = {0};
            if (!(all & (1u << r)) && !p->asked)
                continue;
            if (now < p->retry_at_ms || (now < p->refill_at_ms && !h2o_linklist_is_empty(ready_list(p))))
                continue;
            p->refill_at_ms = 0;
            req.lang = sg_lang_at(i);
            req.limits = conf->pool_limits;
            req.runtime = sg_runtime_at(r);
            /* a few at a time, so that refills never crowd out the workers a
             * request's own cold start needs */
            while ((long)(nready(p) + p->nstarting) < conf->pool_size && p->nstarting < POOL_MAX_STARTING) {
                if (sg_capacity_take_spare(headroom) != 0)
                    return;
                p->nstarting++; /* until on_started */
                sg__session_start(&req, 0, 1, on_started, p);
            }
        }
    }
}

int sg_pool_yield(void (*cb)(void *data), void *data)
{
    for (size_t r = 0; r < SG_RUNTIME_COUNT; r++) {
        for (size_t i = 0; i < sg_lang_count() && i < MAX_LANGS; i++) {
            pool_t *p = &pools[i][r];
            for (h2o_linklist_t *l = ready_list(p)->next; l != ready_list(p); l = l->next) {
                sg_session_t *s = H2O_STRUCT_FROM_MEMBER(sg_session_t, _link, l);
                if (s->_close_requested || !s->_has_slot || s->_handover_cb != NULL)
                    continue;
                s->_handover_cb = cb;
                s->_handover_data = data;
                sg_debug("pool: %s container %.12s (%s) removed to make room", s->lang->name, s->container_id,
                         sg_session_runtime(s));
                sg_session_close(s, NULL, NULL);
                return 0;
            }
        }
    }
    return -1;
}

long sg_pool_size(void)
{
    return sg__sessions_conf()->pool_size;
}

size_t sg_pool_ready(const sg_lang_t *lang, const char *runtime)
{
    size_t ri = sg_runtime_index(runtime);
    return ri < SG_RUNTIME_COUNT ? nready(pool_of(lang, runtime)) : 0;
}

int sg_slot_await(void (*cb)(void *data), void *data)
{
    if (sg__slot_claim_closing(cb, data) == 0)
        return 0;
    return sg_pool_yield(cb, data);
}

/* A request waiting for a pooled container to make room. */
typedef struct {
    sg_create_req_t req;
    char image[256];
    int ephemeral;
    sg_session_ready_cb cb;
    void *data;
} room_wait_t;

static void on_room(void *data)
{
    room_wait_t *w = data;
    sg__session_start(&w->req, w->ephemeral, 0, w->cb, w->data); /* with the slot handed over */
    free(w);
}

void sg_session_create(const sg_create_req_t *asked, int ephemeral, sg_session_ready_cb cb, void *data)
{
    const sg_sessions_conf_t *conf = sg__sessions_conf();
    sg_create_req_t resolved = *asked, *req = &resolved;
    sg_session_t *s;

    req->runtime = sg_sessions_runtime_for(asked);
    if (!sg_sessions_runtime_offered(req->runtime)) {
        char detail[160];
        snprintf(detail, sizeof(detail), "the Docker engine of this proxy does not offer the %s runtime", req->runtime);
        cb(data, NULL, 503, "runtime_unavailable", detail);
        return;
    }
    /* the first request for a language on a runtime starts that pool */
    pool_of(req->lang, req->runtime)->asked = 1;
    if (!ephemeral && (long)sg_session_count() >= conf->max_sessions) {
        char detail[128];
        snprintf(detail, sizeof(detail), "the proxy is at its limit of %ld sessions", conf->max_sessions);
        cb(data, NULL, 503, "at_capacity", detail);
        return;
    }
    if ((s = pool_take(req)) != NULL) {
        s->ephemeral = ephemeral;
        s->executions = 0; /* the kernel's warm-up does not count */
        s->limits.timeout_s = req->limits.timeout_s;
        s->limits.output_bytes = req->limits.output_bytes;
        s->created_at = s->last_used_at = sg_wall_s();
        sg__session_list(s);
        sg_pool_fill();
        cb(data, s, 200, NULL, NULL); /* gets our reference */
        return;
    }
    if (sg_capacity_take() == 0) {
        sg__session_start(req, ephemeral, 0, cb, data);
        return;
    }
    room_wait_t *w = sg_xcalloc(1, sizeof(*w));
    if (req->image == NULL || strlen(req->image) < sizeof(w->image)) {
        w->req = *req;
        if (req->image != NULL) {
            strcpy(w->image, req->image);
            w->req.image = w->image;
        }
        w->ephemeral = ephemeral;
        w->cb = cb;
        w->data = data;
        if (sg_slot_await(on_room, w) == 0)
            return;
    }
    free(w);
    char detail[128];
    snprintf(detail, sizeof(detail), "the proxy is at its limit of %ld containers", sg_capacity_max());
    cb(data, NULL, 503, "no_capacity", detail);
}

static void tick_one(sg_session_t *s, void *data)
{
    sg__session_watchdog(s, *(uint64_t *)data);
}

void sg_sessions_tick(void)
{
    uint64_t now = sg_now_ms();
    sg_session_foreach(tick_one, &now);
    sg_pool_fill();
}
