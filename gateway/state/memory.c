/*
 * memory.c — the state backend for a single gateway without Redis:
 * the same semantics as redis.c, kept in this process in plain
 * arrays (an install has hundreds of tenants and sessions, not millions).
 *
 * Every callback runs before the call returns. Results handed to a callback
 * are copies, so a callback may call back into the state (the reaper removes
 * sessions from inside the expired callback).
 */
#include <stdlib.h>
#include <string.h>

#include "state.h"
#include "state_backend.h"
#include "util.h"

typedef struct {
    int64_t tenant;
    int64_t tat_ms;
} rate_entry_t;

/* A slot a tenant holds until it is given back or its time runs out: a
 * session reservation (the create is on its way), or an execution in
 * flight. */
typedef struct {
    int64_t tenant;
    char *token;
    int64_t until_s;
} lease_t;

/* A session closed recently: sg_state_session_restore leaves it closed. */
typedef struct {
    char sid[37];
    int64_t expires_s;
} closed_mark_t;

typedef struct {
    int64_t tenant;
    char day[16];
    int64_t execs;
    double seconds;
    int64_t expires_s;
} quota_entry_t;

#define VEC(type)                                                                                                      \
    struct {                                                                                                           \
        type *e;                                                                                                       \
        size_t n, cap;                                                                                                 \
    }

typedef VEC(lease_t) lease_vec_t;

typedef struct {
    sg_state_t super;
    VEC(rate_entry_t) rates;
    lease_vec_t reservations;
    VEC(sg_live_session_t) sessions;
    VEC(quota_entry_t) quotas;
    VEC(closed_mark_t) closed;
    lease_vec_t execs;
    lease_vec_t mcp; /* MCP sessions: id -> idle deadline */
} mem_state_t;

/* Makes room for one more element. */
static void vec_reserve(void **e, size_t *cap, size_t n, size_t elsize)
{
    if (n < *cap)
        return;
    *cap = *cap ? *cap * 2 : 16;
    *e = sg_xrealloc(*e, *cap * elsize);
}
#define VEC_PUSH_SLOT(v) (vec_reserve((void **)&(v).e, &(v).cap, (v).n, sizeof(*(v).e)), &(v).e[(v).n++])
#define VEC_SWAP_REMOVE(v, i) ((v).e[i] = (v).e[--(v).n])

static mem_state_t *mem(sg_state_t *st)
{
    return (mem_state_t *)st;
}

static void copy_str(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);
    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* ---- rate ---------------------------------------------------------------------- */

static void mem_rate_check(sg_state_t *st, int64_t tenant, long rate_per_min, long burst, sg_rate_cb cb, void *data)
{
    mem_state_t *m = mem(st);
    rate_entry_t *ent = NULL;
    for (size_t i = 0; i < m->rates.n; i++) {
        if (m->rates.e[i].tenant == tenant) {
            ent = &m->rates.e[i];
            break;
        }
    }
    int64_t now = sg_state__now_ms(st), new_tat;
    sg_rate_result_t r;
    sg_gcra(now, ent != NULL ? ent->tat_ms : 0, rate_per_min, burst, &r, &new_tat);
    if (r.allowed && new_tat != 0) {
        if (ent == NULL) {
            ent = VEC_PUSH_SLOT(m->rates);
            ent->tenant = tenant;
        }
        ent->tat_ms = new_tat;
    }
    cb(data, &r);
}

/* ---- sessions -------------------------------------------------------------------- */

/* A copy of s, its strings terminated whatever the caller left in them. */
static void put_session(sg_live_session_t *rec, const sg_live_session_t *s)
{
    *rec = *s;
    rec->id[sizeof(rec->id) - 1] = '\0';
    rec->lang[sizeof(rec->lang) - 1] = '\0';
}

static sg_live_session_t *find_session(mem_state_t *m, const char *sid, size_t *index)
{
    for (size_t i = 0; i < m->sessions.n; i++) {
        if (strcmp(m->sessions.e[i].id, sid) == 0) {
            if (index != NULL)
                *index = i;
            return &m->sessions.e[i];
        }
    }
    return NULL;
}

/* ---- leases (session reservations, executions in flight) ---- */

static void lease_drop_at(lease_vec_t *v, size_t i)
{
    free(v->e[i].token);
    VEC_SWAP_REMOVE(*v, i);
}

/* As ZREMRANGEBYSCORE -inf now then ZCARD on a tenant's set: drops the
 * tenant's leases that ran out, returns how many it still holds, and in
 * *same the one named token (NULL if none). */
static long lease_prune(lease_vec_t *v, int64_t tenant, int64_t now, const char *token, lease_t **same)
{
    long live = 0;
    *same = NULL;
    for (size_t i = 0; i < v->n;) {
        lease_t *l = &v->e[i];
        if (l->tenant == tenant && l->until_s <= now) {
            lease_drop_at(v, i);
            continue;
        }
        if (l->tenant == tenant) {
            live++;
            if (strcmp(l->token, token) == 0)
                *same = l;
        }
        i++;
    }
    return live;
}

static void lease_add(lease_vec_t *v, int64_t tenant, const char *token, int64_t until_s)
{
    lease_t *l = VEC_PUSH_SLOT(*v);
    l->tenant = tenant;
    l->token = sg_xstrdup(token);
    l->until_s = until_s;
}

/* As ZREM: 1 if the tenant held token (it is given back), else 0. */
static int lease_remove(lease_vec_t *v, int64_t tenant, const char *token)
{
    for (size_t i = 0; i < v->n; i++) {
        if (v->e[i].tenant == tenant && strcmp(v->e[i].token, token) == 0) {
            lease_drop_at(v, i);
            return 1;
        }
    }
    return 0;
}

static long lease_count(const lease_vec_t *v, int64_t tenant)
{
    long n = 0;
    for (size_t i = 0; i < v->n; i++)
        n += v->e[i].tenant == tenant;
    return n;
}

/* As the ZREM script: gives token back, answering ok = it was held and
 * count = others + the tenant's leases left. */
static void lease_give_back(lease_vec_t *v, int64_t tenant, const char *token, long others, sg_state_cb cb, void *data)
{
    sg_state_result_t r = {.available = 1};
    r.ok = lease_remove(v, tenant, token);
    r.count = others + lease_count(v, tenant);
    cb(data, &r);
}

static long live_sessions(mem_state_t *m, int64_t tenant)
{
    long n = 0;
    for (size_t i = 0; i < m->sessions.n; i++)
        n += m->sessions.e[i].tenant_id == tenant;
    return n;
}

/* Live sessions + reservations of a tenant, as ZCARD of its Redis set. */
static long tenant_count(mem_state_t *m, int64_t tenant)
{
    return live_sessions(m, tenant) + lease_count(&m->reservations, tenant);
}

static void mem_session_reserve(sg_state_t *st, int64_t tenant, long max, const char *token, sg_state_cb cb, void *data)
{
    mem_state_t *m = mem(st);
    int64_t now = sg_state__now_s(st);
    sg_state_result_t r = {.available = 1};

    /* expired reservations go, and so do sessions past their lifetime,
     * which no longer hold a slot */
    lease_t *same;
    long live = lease_prune(&m->reservations, tenant, now, token, &same);
    for (size_t i = 0; i < m->sessions.n; i++) {
        if (m->sessions.e[i].tenant_id == tenant && m->sessions.e[i].lifetime_deadline > now)
            live++;
    }

    if (live < max) {
        if (same != NULL) {
            same->until_s = now + SG_STATE_RESERVATION_TTL;
        } else {
            lease_add(&m->reservations, tenant, token, now + SG_STATE_RESERVATION_TTL);
            live++;
        }
        r.ok = 1;
    }
    r.count = live;
    cb(data, &r);
}

static void mem_session_unreserve(sg_state_t *st, int64_t tenant, const char *token, sg_state_cb cb, void *data)
{
    mem_state_t *m = mem(st);
    lease_give_back(&m->reservations, tenant, token, live_sessions(m, tenant), cb, data);
}

static closed_mark_t *find_closed(mem_state_t *m, const char *sid, int64_t now);

static void mem_session_commit(sg_state_t *st, const char *token, const sg_live_session_t *s, sg_state_cb cb,
                               void *data)
{
    mem_state_t *m = mem(st);
    sg_state_result_t r = {.available = 1};

    if (token != NULL)
        lease_remove(&m->reservations, s->tenant_id, token);
    if (find_closed(m, s->id, sg_state__now_s(st)) != NULL) { /* closed before its commit */
        r.count = tenant_count(m, s->tenant_id);
        cb(data, &r);
        return;
    }
    sg_live_session_t *rec = find_session(m, s->id, NULL);
    if (rec == NULL)
        rec = VEC_PUSH_SLOT(m->sessions);
    put_session(rec, s);
    r.ok = 1;
    r.count = tenant_count(m, s->tenant_id);
    cb(data, &r);
}

static void mem_session_touch(sg_state_t *st, const char *sid, int64_t now, long idle_timeout, int add_exec,
                              sg_state_cb cb, void *data)
{
    sg_live_session_t *rec = find_session(mem(st), sid, NULL);
    sg_state_result_t r = {.available = 1};
    if (rec != NULL) {
        rec->last_used_at = now;
        rec->idle_deadline = now + idle_timeout;
        rec->executions += add_exec;
        r.ok = 1;
        r.count = (long)rec->executions;
    }
    cb(data, &r);
}

/* The closed mark of sid, if it has one that has not expired; expired
 * marks are dropped on the way. */
static closed_mark_t *find_closed(mem_state_t *m, const char *sid, int64_t now)
{
    closed_mark_t *found = NULL;
    for (size_t i = 0; i < m->closed.n;) {
        if (m->closed.e[i].expires_s <= now) {
            VEC_SWAP_REMOVE(m->closed, i);
            continue;
        }
        if (found == NULL && strcmp(m->closed.e[i].sid, sid) == 0)
            found = &m->closed.e[i];
        i++;
    }
    return found;
}

static void mem_session_remove(sg_state_t *st, const char *sid, int64_t tenant, sg_state_cb cb, void *data)
{
    mem_state_t *m = mem(st);
    sg_state_result_t r = {.available = 1};
    int64_t now = sg_state__now_s(st);
    size_t i;

    closed_mark_t *mark = find_closed(m, sid, now);
    if (mark == NULL) {
        mark = VEC_PUSH_SLOT(m->closed);
        copy_str(mark->sid, sizeof(mark->sid), sid);
    }
    mark->expires_s = now + SG_STATE_CLOSED_TTL;
    if (find_session(m, sid, &i) != NULL) {
        tenant = m->sessions.e[i].tenant_id;
        VEC_SWAP_REMOVE(m->sessions, i);
        r.ok = 1;
    }
    r.count = tenant_count(m, tenant);
    cb(data, &r);
}

static void mem_session_restore(sg_state_t *st, const sg_live_session_t *s, sg_state_cb cb, void *data)
{
    mem_state_t *m = mem(st);
    sg_state_result_t r = {.available = 1};

    if (find_session(m, s->id, NULL) == NULL && find_closed(m, s->id, sg_state__now_s(st)) == NULL) {
        put_session(VEC_PUSH_SLOT(m->sessions), s);
        r.ok = 1;
    }
    r.count = tenant_count(m, s->tenant_id);
    cb(data, &r);
}

static void mem_session_get(sg_state_t *st, const char *sid, sg_state_get_cb cb, void *data)
{
    sg_live_session_t *rec = find_session(mem(st), sid, NULL), copy;
    if (rec != NULL)
        copy = *rec;
    cb(data, 1, rec != NULL ? &copy : NULL);
}

/* An execution in flight in session sid: a live lease of its tenant whose
 * token names it (concurrency.h). */
static int session_busy(const mem_state_t *m, const sg_live_session_t *s, int64_t now)
{
    size_t len = strlen(s->id);
    for (size_t i = 0; i < m->execs.n; i++) {
        const lease_t *l = &m->execs.e[i];
        if (l->tenant == s->tenant_id && l->until_s > now && strncmp(l->token, s->id, len) == 0 && l->token[len] == '/')
            return 1;
    }
    return 0;
}

static void mem_sessions_expired(sg_state_t *st, int64_t now, size_t limit, sg_state_expired_cb cb, void *data)
{
    mem_state_t *m = mem(st);
    size_t cap = m->sessions.n < limit ? m->sessions.n : limit, n = 0;
    char(*ids)[37] = cap ? sg_xmalloc(cap * sizeof(*ids)) : NULL;
    const char **sids = cap ? sg_xmalloc(cap * sizeof(*sids)) : NULL;
    const char **reasons = cap ? sg_xmalloc(cap * sizeof(*reasons)) : NULL;
    int64_t *tenants = cap ? sg_xmalloc(cap * sizeof(*tenants)) : NULL;

    /* lifetime first: of two reasons that both hold, it is the final one */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < m->sessions.n && n < cap; i++) {
            const sg_live_session_t *s = &m->sessions.e[i];
            int hit = pass == 0 ? s->lifetime_deadline <= now : (s->idle_deadline <= now && s->lifetime_deadline > now);
            if (!hit || (pass == 1 && session_busy(m, s, now)))
                continue;
            memcpy(ids[n], s->id, sizeof(ids[n]));
            sids[n] = ids[n];
            reasons[n] = pass == 0 ? "lifetime" : "idle";
            tenants[n] = s->tenant_id;
            n++;
        }
    }
    cb(data, 1, n, sids, reasons, tenants);
    free(ids);
    free(sids);
    free(reasons);
    free(tenants);
}

static void mem_sessions_list(sg_state_t *st, int64_t tenant, sg_state_list_cb cb, void *data)
{
    mem_state_t *m = mem(st);
    sg_live_session_t *list = m->sessions.n ? sg_xmalloc(m->sessions.n * sizeof(*list)) : NULL;
    size_t n = 0;
    for (size_t i = 0; i < m->sessions.n; i++) {
        if (tenant == 0 || m->sessions.e[i].tenant_id == tenant)
            list[n++] = m->sessions.e[i];
    }
    cb(data, 1, n, list);
    free(list);
}

/* ---- executions in flight ------------------------------------------------------------ */

/* As the acquire script on a tenant's set: a token already held is
 * renewed; a new one is added only below max (max 0: renewal only). */
static void lease_acquire(sg_state_t *st, lease_vec_t *v, int64_t tenant, long max, const char *token, long lease_s,
                          sg_state_cb cb, void *data)
{
    int64_t now = sg_state__now_s(st);
    sg_state_result_t r = {.available = 1};
    lease_t *same;
    long live = lease_prune(v, tenant, now, token, &same);

    if (same != NULL) {
        same->until_s = now + lease_s;
        r.ok = 1;
    } else if (live < max) {
        lease_add(v, tenant, token, now + lease_s);
        r.ok = 1;
        live++;
    }
    r.count = live;
    cb(data, &r);
}

static void mem_exec_acquire(sg_state_t *st, int64_t tenant, long max, const char *token, long lease_s, sg_state_cb cb,
                             void *data)
{
    lease_acquire(st, &mem(st)->execs, tenant, max, token, lease_s, cb, data);
}

static void mem_exec_release(sg_state_t *st, int64_t tenant, const char *token, sg_state_cb cb, void *data)
{
    lease_give_back(&mem(st)->execs, tenant, token, 0, cb, data);
}

/* ---- MCP sessions -------------------------------------------------------------------- */

static void mem_mcp_acquire(sg_state_t *st, int64_t tenant, long max, const char *id, long idle_s, sg_state_cb cb,
                            void *data)
{
    lease_acquire(st, &mem(st)->mcp, tenant, max, id, idle_s, cb, data);
}

static void mem_mcp_release(sg_state_t *st, int64_t tenant, const char *id, sg_state_cb cb, void *data)
{
    lease_give_back(&mem(st)->mcp, tenant, id, 0, cb, data);
}

/* ---- quotas ------------------------------------------------------------------------ */

/* The live entry of (tenant, day), dropping expired entries on the way. */
static quota_entry_t *find_quota(mem_state_t *m, int64_t tenant, const char *day, int64_t now)
{
    quota_entry_t *found = NULL;
    for (size_t i = 0; i < m->quotas.n;) {
        quota_entry_t *q = &m->quotas.e[i];
        if (q->expires_s <= now) {
            VEC_SWAP_REMOVE(m->quotas, i);
            continue;
        }
        if (q->tenant == tenant && strcmp(q->day, day) == 0)
            found = q;
        i++;
    }
    return found;
}

static void mem_quota_reserve(sg_state_t *st, int64_t tenant, const char *day, long max_execs, double max_seconds,
                              sg_quota_cb cb, void *data)
{
    quota_entry_t *q = find_quota(mem(st), tenant, day, sg_state__now_s(st));
    if (q == NULL) {
        cb(data, 1, SG_QUOTA_UNSEEDED, 0, 0);
        return;
    }
    sg_quota_status_t status = SG_QUOTA_OK;
    if (q->execs >= max_execs)
        status = SG_QUOTA_EXECS;
    else if (q->seconds >= max_seconds)
        status = SG_QUOTA_SECONDS;
    else
        q->execs++;
    cb(data, 1, status, q->execs, q->seconds);
}

static void mem_quota_seed(sg_state_t *st, int64_t tenant, const char *day, int64_t execs, double seconds,
                           sg_state_cb cb, void *data)
{
    mem_state_t *m = mem(st);
    int64_t now = sg_state__now_s(st);
    sg_state_result_t r = {.available = 1};
    if (find_quota(m, tenant, day, now) == NULL) {
        quota_entry_t *q = VEC_PUSH_SLOT(m->quotas);
        q->tenant = tenant;
        copy_str(q->day, sizeof(q->day), day);
        q->execs = execs;
        q->seconds = seconds;
        q->expires_s = now + SG_STATE_QUOTA_TTL;
        r.ok = 1;
    }
    cb(data, &r);
}

static void mem_quota_add_seconds(sg_state_t *st, int64_t tenant, const char *day, double seconds, sg_state_cb cb,
                                  void *data)
{
    quota_entry_t *q = find_quota(mem(st), tenant, day, sg_state__now_s(st));
    sg_state_result_t r = {.available = 1};
    if (q != NULL) {
        q->seconds += seconds;
        r.ok = 1;
    }
    cb(data, &r);
}

/* ---- life cycle ------------------------------------------------------------------------ */

static int mem_available(sg_state_t *st)
{
    return 1;
}

static void mem_destroy(sg_state_t *st)
{
    mem_state_t *m = mem(st);
    while (m->reservations.n != 0)
        lease_drop_at(&m->reservations, 0);
    while (m->execs.n != 0)
        lease_drop_at(&m->execs, 0);
    while (m->mcp.n != 0)
        lease_drop_at(&m->mcp, 0);
    free(m->rates.e);
    free(m->reservations.e);
    free(m->sessions.e);
    free(m->quotas.e);
    free(m->closed.e);
    free(m->execs.e);
    free(m->mcp.e);
    free(m);
}

static const sg_state_ops_t mem_ops = {
    .name = "memory",
    .destroy = mem_destroy,
    .available = mem_available,
    .rate_check = mem_rate_check,
    .session_reserve = mem_session_reserve,
    .session_unreserve = mem_session_unreserve,
    .session_commit = mem_session_commit,
    .session_touch = mem_session_touch,
    .session_remove = mem_session_remove,
    .session_restore = mem_session_restore,
    .session_get = mem_session_get,
    .sessions_expired = mem_sessions_expired,
    .sessions_list = mem_sessions_list,
    .exec_acquire = mem_exec_acquire,
    .exec_release = mem_exec_release,
    .mcp_acquire = mem_mcp_acquire,
    .mcp_release = mem_mcp_release,
    .quota_reserve = mem_quota_reserve,
    .quota_seed = mem_quota_seed,
    .quota_add_seconds = mem_quota_add_seconds,
};

sg_state_t *sg_state_create_memory(h2o_loop_t *loop)
{
    mem_state_t *m = sg_xcalloc(1, sizeof(*m));
    m->super.ops = &mem_ops;
    m->super.loop = loop;
    return &m->super;
}
