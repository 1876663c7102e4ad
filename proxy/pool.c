/*
 * pool.c — the warm pool (session.h): ready containers per language, made
 * with the pool's limits and warmed up, taken by requests that fit them,
 * yielded when a request needs the room.
 */
#include "capacity.h"
#include "log.h"
#include "session_int.h"
#include "util.h"

#define POOL_RETRY_MS 30000
#define POOL_MAX_STARTING 2 /* per language */
#define MAX_LANGS 16

static struct {
    h2o_linklist_t ready;
    size_t nready;
    size_t nstarting;
    uint64_t retry_at_ms; /* after a failed start */
} pool[MAX_LANGS];

void sg__pool_init(void)
{
    for (size_t i = 0; i < MAX_LANGS; i++)
        h2o_linklist_init_anchor(&pool[i].ready);
}

static size_t lang_index(const sg_lang_t *lang)
{
    for (size_t i = 0; i < sg_lang_count() && i < MAX_LANGS; i++)
        if (sg_lang_at(i) == lang)
            return i;
    return 0;
}

void sg__pool_link(sg_session_t *s)
{
    h2o_linklist_insert(&pool[lang_index(s->lang)].ready, &s->_link);
    pool[lang_index(s->lang)].nready++;
}

void sg__pool_unlink(sg_session_t *s)
{
    h2o_linklist_unlink(&s->_link);
    pool[lang_index(s->lang)].nready--;
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

void sg__pool_started(sg_session_t *s, int ok)
{
    pool[lang_index(s->lang)].nstarting--;
    if (!ok) {
        pool[lang_index(s->lang)].retry_at_ms = sg_now_ms() + POOL_RETRY_MS;
        return;
    }
    sg__session_list(s, SG_IN_POOL);
    warm_up(s);
}

/* A pooled container fits a request whose container settings are the
 * pool's; the per-execution ones (timeout, output cap) are the agent's. */
static int fits(const sg_create_req_t *req)
{
    const sg_limits_t *a = &req->limits, *b = &sg__sessions_conf()->pool_limits;
    return req->image == NULL && !req->keep_template && a->memory_mb == b->memory_mb && a->cpus == b->cpus &&
           a->network == b->network && a->pids == b->pids && a->tmpfs_mb == b->tmpfs_mb;
}

sg_session_t *sg__pool_take(const sg_create_req_t *req)
{
    size_t li = lang_index(req->lang);
    if (!fits(req))
        return NULL;
    while (!h2o_linklist_is_empty(&pool[li].ready)) {
        sg_session_t *s = H2O_STRUCT_FROM_MEMBER(sg_session_t, _link, pool[li].ready.next);
        sg_session_ref(s);
        sg__session_unlist(s);
        if (s->state == SG_SESSION_ACTIVE)
            return s;
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
    for (size_t i = 0; i < sg_lang_count() && i < MAX_LANGS; i++) {
        sg_create_req_t req = {0};
        if (now < pool[i].retry_at_ms)
            continue;
        req.lang = sg_lang_at(i);
        req.limits = conf->pool_limits;
        /* a few at a time, so that refills never crowd out the workers a
         * request's own cold start needs */
        while ((long)(pool[i].nready + pool[i].nstarting) < conf->pool_size && pool[i].nstarting < POOL_MAX_STARTING) {
            if (sg_capacity_take_spare(headroom) != 0)
                return;
            pool[i].nstarting++;
            if (sg__session_start(&req, 0, 1, NULL, NULL) != 0)
                pool[i].nstarting--;
        }
    }
}

int sg_pool_yield(void (*cb)(void *data), void *data)
{
    for (size_t i = 0; i < sg_lang_count() && i < MAX_LANGS; i++) {
        for (h2o_linklist_t *l = pool[i].ready.next; l != &pool[i].ready; l = l->next) {
            sg_session_t *s = H2O_STRUCT_FROM_MEMBER(sg_session_t, _link, l);
            if (s->_close_requested || !s->_has_slot || s->_handover_cb != NULL)
                continue;
            s->_handover_cb = cb;
            s->_handover_data = data;
            sg_debug("pool: %s container %.12s removed to make room", s->lang->name, s->container_id);
            sg_session_close(s, NULL, NULL);
            return 0;
        }
    }
    return -1;
}

size_t sg_pool_ready(const sg_lang_t *lang)
{
    return pool[lang_index(lang)].nready;
}
