/*
 * redis.c — the state backend on Redis (key schema in state.h): its
 * operations, each one Lua script (redis_scripts.c) sent through the
 * connection (redis_conn.c); admissions and rate checks go through
 * redis_solo.c, which may decide them from a copy while this is the only
 * gateway on its Redis. Scripts get the gateway's wall clock as an
 * argument, so they stay deterministic.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "state.h"
#include "redis_scripts.h"
#include "redis_int.h"
#include "state_backend.h"
#include "util.h"

#define LIST_MAX 100000 /* sessions in one list answer */

/* {ok, count} */
static void on_state(redis_req_t *req, redisReply *reply)
{
    if ((reply = sg_redis__reply_array(reply, 2)) == NULL) {
        sg_state__fail(req->cb.state, req->data);
        return;
    }
    sg_state_result_t r = {.available = 1};
    r.ok = sg_redis__reply_int(reply->element[0]) != 0;
    r.count = (long)sg_redis__reply_int(reply->element[1]);
    req->cb.state(req->data, &r);
}

static void fill_session(sg_live_session_t *s, const char *field, size_t flen, const redisReply *v)
{
#define FIELD_IS(name) (flen == sizeof(name) - 1 && memcmp(field, name, flen) == 0)
    if (FIELD_IS("tenant"))
        s->tenant_id = sg_redis__reply_int(v);
    else if (FIELD_IS("lang"))
        sg_redis__reply_str(v, s->lang, sizeof(s->lang));
    else if (FIELD_IS("created_at"))
        s->created_at = sg_redis__reply_int(v);
    else if (FIELD_IS("last_used_at"))
        s->last_used_at = sg_redis__reply_int(v);
    else if (FIELD_IS("idle_deadline"))
        s->idle_deadline = sg_redis__reply_int(v);
    else if (FIELD_IS("lifetime_deadline"))
        s->lifetime_deadline = sg_redis__reply_int(v);
    else if (FIELD_IS("executions"))
        s->executions = sg_redis__reply_int(v);
    else if (FIELD_IS("proxy"))
        sg_redis__reply_str(v, s->proxy, sizeof(s->proxy));
#undef FIELD_IS
}

/* HGETALL: field, value, ... ; empty: no such session */
static void on_get(redis_req_t *req, redisReply *reply)
{
    if ((reply = sg_redis__reply_array(reply, 0)) == NULL) {
        req->cb.get(req->data, 0, NULL);
        return;
    }
    if (reply->elements == 0) {
        req->cb.get(req->data, 1, NULL);
        return;
    }
    sg_live_session_t s;
    memset(&s, 0, sizeof(s));
    snprintf(s.id, sizeof(s.id), "%s", req->argv[1] + sizeof("sg:session:") - 1);
    for (size_t i = 0; i + 1 < reply->elements; i += 2) {
        const redisReply *f = reply->element[i];
        if (f->type == REDIS_REPLY_STRING)
            fill_session(&s, f->str, f->len, reply->element[i + 1]);
    }
    req->cb.get(req->data, 1, &s);
}

/* sid, reason, tenant, ... */
static void on_expired(redis_req_t *req, redisReply *reply)
{
    if ((reply = sg_redis__reply_array(reply, 0)) == NULL) {
        req->cb.expired(req->data, 0, 0, NULL, NULL, NULL);
        return;
    }
    size_t n = reply->elements / 3;
    char(*ids)[37] = n ? sg_xmalloc(n * sizeof(*ids)) : NULL;
    const char **sids = n ? sg_xmalloc(n * sizeof(*sids)) : NULL;
    const char **reasons = n ? sg_xmalloc(n * sizeof(*reasons)) : NULL;
    int64_t *tenants = n ? sg_xmalloc(n * sizeof(*tenants)) : NULL;
    for (size_t i = 0; i < n; i++) {
        char reason[16];
        sg_redis__reply_str(reply->element[3 * i], ids[i], sizeof(ids[i]));
        sg_redis__reply_str(reply->element[3 * i + 1], reason, sizeof(reason));
        sids[i] = ids[i];
        reasons[i] = strcmp(reason, "lifetime") == 0 ? "lifetime" : "idle";
        tenants[i] = sg_redis__reply_int(reply->element[3 * i + 2]);
    }
    req->cb.expired(req->data, 1, n, sids, reasons, tenants);
    free(ids);
    free(sids);
    free(reasons);
    free(tenants);
}

/* sid + 7 fields, ... */
static void on_list(redis_req_t *req, redisReply *reply)
{
    static const char *const fields[] = {
        "tenant", "lang", "created_at", "last_used_at", "idle_deadline", "lifetime_deadline", "executions"};
    if ((reply = sg_redis__reply_array(reply, 0)) == NULL) {
        req->cb.list(req->data, 0, 0, NULL);
        return;
    }
    size_t n = reply->elements / 8;
    sg_live_session_t *list = n ? sg_xmalloc(n * sizeof(*list)) : NULL;
    for (size_t i = 0; i < n; i++) {
        memset(&list[i], 0, sizeof(list[i]));
        sg_redis__reply_str(reply->element[8 * i], list[i].id, sizeof(list[i].id));
        for (size_t f = 0; f < 7; f++)
            fill_session(&list[i], fields[f], strlen(fields[f]), reply->element[8 * i + 1 + f]);
    }
    req->cb.list(req->data, 1, n, list);
    free(list);
}

/* {status, execs, seconds} */
static void on_quota(redis_req_t *req, redisReply *reply)
{
    if ((reply = sg_redis__reply_array(reply, 3)) == NULL) {
        req->cb.quota(req->data, 0, SG_QUOTA_OK, 0, 0);
        return;
    }
    int64_t status = sg_redis__reply_int(reply->element[0]);
    if (status < SG_QUOTA_OK || status > SG_QUOTA_UNSEEDED)
        status = SG_QUOTA_UNSEEDED;
    req->cb.quota(req->data, 1, (sg_quota_status_t)status, sg_redis__reply_int(reply->element[1]),
                  sg_redis__reply_double(reply->element[2]));
}

/* ---- operations ------------------------------------------------------------------------- */

static redis_state_t *rs(sg_state_t *st)
{
    return (redis_state_t *)st;
}

static void redis_rate_check(sg_state_t *_st, int64_t tenant, long rate_per_min, long burst, sg_rate_cb cb, void *data)
{
    redis_state_t *st = rs(_st);
    int64_t interval = sg_gcra_interval_ms(rate_per_min);
    burst = sg_gcra_burst(burst);
    if (interval == 0) {
        /* no rate: sg_gcra allows without state, so Redis is not asked */
        sg_rate_result_t r;
        int64_t unused;
        sg_gcra(0, 0, rate_per_min, burst, &r, &unused);
        cb(data, &r);
        return;
    }
    sg_redis__rate_dispatch(st, tenant, rate_per_min, burst, cb, data);
}

/* The fields of a live-session record, as SCRIPT_COMMIT and SCRIPT_RESTORE
 * take them after their first ARGV. */
static void req_session_args(redis_req_t *req, const sg_live_session_t *s)
{
    sg_redis__req_arg(req, "%.36s", s->id);
    sg_redis__req_arg(req, "%" PRId64, s->tenant_id);
    sg_redis__req_arg(req, "%.31s", s->lang);
    sg_redis__req_arg(req, "%" PRId64, s->created_at);
    sg_redis__req_arg(req, "%" PRId64, s->last_used_at);
    sg_redis__req_arg(req, "%" PRId64, s->idle_deadline);
    sg_redis__req_arg(req, "%" PRId64, s->lifetime_deadline);
    sg_redis__req_arg(req, "%" PRId64, s->executions);
    sg_redis__req_arg(req, "%.255s", s->proxy);
}

/* A request of script with nkeys keys whose reply is an sg_state_result_t
 * for cb (on_state). */
static redis_req_t *state_req(sg_state_t *_st, int script, int nkeys, sg_state_cb cb, void *data)
{
    redis_req_t *req = sg_redis__req_new(rs(_st), script, nkeys, on_state, data);
    req->cb.state = cb;
    return req;
}

/* The first four keys of a script on live session s (SCRIPT_COMMIT,
 * SCRIPT_RESTORE): its tenant's set, its hash, the idle and lifetime
 * indexes. */
static void req_session_keys(redis_req_t *req, const sg_live_session_t *s)
{
    sg_redis__req_arg(req, "sg:tenant:%" PRId64 ":sessions", s->tenant_id);
    sg_redis__req_arg(req, "sg:session:%.36s", s->id);
    sg_redis__req_arg(req, "sg:sessions:idle");
    sg_redis__req_arg(req, "sg:sessions:lifetime");
}

/* A request of script (SCRIPT_RESERVE, SCRIPT_EXEC_ACQUIRE) for one of max
 * slots in the tenant's set sg:tenant:<tid>:<set>, held by member prefix +
 * token (at most token_max bytes of it) for ttl_s from now; the caller may
 * add arguments, then sends it. Its opposite is give_back. */
static redis_req_t *take_slot(sg_state_t *_st, int script, int64_t tenant, const char *set, long max,
                              const char *prefix, const char *token, int token_max, int64_t ttl_s, sg_state_cb cb,
                              void *data)
{
    int64_t now = sg_state__now_s(_st);
    redis_req_t *req = state_req(_st, script, 1, cb, data);
    sg_redis__req_arg(req, "sg:tenant:%" PRId64 ":%s", tenant, set);
    sg_redis__req_arg(req, "%" PRId64, now);
    sg_redis__req_arg(req, "%ld", max);
    sg_redis__req_arg(req, "%s%.*s", prefix, token_max, token);
    sg_redis__req_arg(req, "%" PRId64, now + ttl_s);
    return req;
}

static void redis_session_reserve(sg_state_t *_st, int64_t tenant, long max, const char *token, sg_state_cb cb,
                                  void *data)
{
    sg_redis__mirror_drop(rs(_st), tenant);
    sg_redis__req_send(take_slot(_st, SCRIPT_RESERVE, tenant, "sessions", max, "pending:", token, INT_MAX,
                                 SG_STATE_RESERVATION_TTL, cb, data));
}

/* SCRIPT_ZREM on the tenant's set sg:tenant:<tid>:<set>: member prefix +
 * token (at most token_max bytes of it) is given back. */
static void give_back(sg_state_t *_st, int64_t tenant, const char *set, const char *prefix, const char *token,
                      int token_max, sg_state_cb cb, void *data)
{
    redis_req_t *req = state_req(_st, SCRIPT_ZREM, 1, cb, data);
    sg_redis__req_arg(req, "sg:tenant:%" PRId64 ":%s", tenant, set);
    sg_redis__req_arg(req, "%s%.*s", prefix, token_max, token);
    sg_redis__req_send(req);
}

static void redis_session_unreserve(sg_state_t *_st, int64_t tenant, const char *token, sg_state_cb cb, void *data)
{
    sg_redis__mirror_drop(rs(_st), tenant); /* a create that failed: rare */
    give_back(_st, tenant, "sessions", "pending:", token, INT_MAX, cb, data);
}

/* A commit Redis refused (the session was closed first): the copy, which
 * counted the session, is read again. */
static void on_commit(redis_req_t *req, redisReply *reply)
{
    redisReply *a = sg_redis__reply_array(reply, 2);
    if (a != NULL && sg_redis__reply_int(a->element[0]) == 0)
        sg_redis__mirror_drop(req->st, req->tenant);
    on_state(req, reply);
}

static void redis_session_commit(sg_state_t *_st, const char *token, const sg_live_session_t *s, sg_state_cb cb,
                                 void *data)
{
    sg_redis__mirror_session_committed(rs(_st), s->tenant_id, token, s->id, s->lifetime_deadline);
    redis_req_t *req = sg_redis__req_new(rs(_st), SCRIPT_COMMIT, 5, on_commit, data);
    req->cb.state = cb;
    req->tenant = s->tenant_id;
    req_session_keys(req, s);
    sg_redis__req_arg(req, "sg:closed:%.36s", s->id);
    if (token != NULL)
        sg_redis__req_arg(req, "pending:%s", token);
    else
        sg_redis__req_arg(req, "%s", "");
    req_session_args(req, s);
    /* written at once, before the ledger's insert and the create's reply
     * (which does not wait for its answer): a call another gateway makes
     * for the session once the client has it comes after it, unless Redis
     * stalls in between (for a delete: the closed mark above) */
    sg_redis__req_send_now(req);
}

static void redis_session_touch(sg_state_t *_st, const char *sid, int64_t now, long idle_timeout, int add_exec,
                                sg_state_cb cb, void *data)
{
    redis_req_t *req = state_req(_st, SCRIPT_TOUCH, 2, cb, data);
    sg_redis__req_arg(req, "sg:session:%s", sid);
    sg_redis__req_arg(req, "sg:sessions:idle");
    sg_redis__req_arg(req, "%s", sid);
    sg_redis__req_arg(req, "%" PRId64, now);
    sg_redis__req_arg(req, "%ld", idle_timeout);
    sg_redis__req_arg(req, "%d", add_exec);
    sg_redis__req_send(req);
}

static void redis_session_remove(sg_state_t *_st, const char *sid, int64_t tenant, sg_state_cb cb, void *data)
{
    sg_redis__mirror_session_removed(rs(_st), tenant, sid);
    redis_req_t *req = state_req(_st, SCRIPT_REMOVE, 5, cb, data);
    sg_redis__req_arg(req, "sg:sessions:idle");
    sg_redis__req_arg(req, "sg:session:%s", sid);
    sg_redis__req_arg(req, "sg:tenant:%" PRId64 ":sessions", tenant);
    sg_redis__req_arg(req, "sg:sessions:lifetime");
    sg_redis__req_arg(req, "sg:closed:%s", sid);
    sg_redis__req_arg(req, "%s", sid);
    sg_redis__req_arg(req, "%d", SG_STATE_CLOSED_TTL);
    sg_redis__req_send(req);
}

static void redis_session_restore(sg_state_t *_st, const sg_live_session_t *s, sg_state_cb cb, void *data)
{
    sg_redis__mirror_drop(rs(_st), s->tenant_id); /* Redis knows whether it adds it */
    redis_req_t *req = state_req(_st, SCRIPT_RESTORE, 5, cb, data);
    req_session_keys(req, s);
    sg_redis__req_arg(req, "sg:closed:%.36s", s->id);
    req_session_args(req, s);
    sg_redis__req_send(req);
}

static void redis_session_get(sg_state_t *_st, const char *sid, sg_state_get_cb cb, void *data)
{
    redis_req_t *req = sg_redis__req_new(rs(_st), -1, 0, on_get, data);
    req->cb.get = cb;
    sg_redis__req_arg(req, "HGETALL");
    sg_redis__req_arg(req, "sg:session:%s", sid);
    sg_redis__req_send(req);
}

static void redis_sessions_expired(sg_state_t *_st, int64_t now, size_t limit, sg_state_expired_cb cb, void *data)
{
    redis_req_t *req = sg_redis__req_new(rs(_st), SCRIPT_EXPIRED, 2, on_expired, data);
    req->cb.expired = cb;
    sg_redis__req_arg(req, "sg:sessions:idle");
    sg_redis__req_arg(req, "sg:sessions:lifetime");
    sg_redis__req_arg(req, "%" PRId64, now);
    sg_redis__req_arg(req, "%zu", limit < LIST_MAX ? limit : (size_t)LIST_MAX);
    sg_redis__req_send(req);
}

static void redis_sessions_list(sg_state_t *_st, int64_t tenant, sg_state_list_cb cb, void *data)
{
    redis_req_t *req = sg_redis__req_new(rs(_st), SCRIPT_LIST, 1, on_list, data);
    req->cb.list = cb;
    if (tenant == 0)
        sg_redis__req_arg(req, "sg:sessions:lifetime");
    else
        sg_redis__req_arg(req, "sg:tenant:%" PRId64 ":sessions", tenant);
    sg_redis__req_arg(req, "%d", LIST_MAX);
    sg_redis__req_send(req);
}

static void redis_exec_acquire(sg_state_t *_st, int64_t tenant, long max, const char *token, long lease_s,
                               sg_state_cb cb, void *data)
{
    sg_redis__mirror_drop(rs(_st), tenant);
    redis_req_t *req = take_slot(_st, SCRIPT_EXEC_ACQUIRE, tenant, "execs", max, "", token, 64, lease_s, cb, data);
    sg_redis__req_arg(req, "%d", SG_STATE_EXECS_KEY_SLACK);
    sg_redis__req_guard(req);
    sg_redis__req_send(req);
}

static void redis_exec_release(sg_state_t *_st, int64_t tenant, const char *token, sg_state_cb cb, void *data)
{
    sg_redis__mirror_given_back(rs(_st), tenant, token, NULL, -1);
    give_back(_st, tenant, "execs", "", token, 64, cb, data);
}

/* An MCP session is a lease in the tenant's "mcp" set, taken and renewed
 * by the executions' script (max 0 renews only), given back by ZREM. */
static void redis_mcp_acquire(sg_state_t *_st, int64_t tenant, long max, const char *id, long idle_s, sg_state_cb cb,
                              void *data)
{
    redis_req_t *req = take_slot(_st, SCRIPT_EXEC_ACQUIRE, tenant, "mcp", max, "", id, 64, idle_s, cb, data);
    sg_redis__req_arg(req, "%d", SG_STATE_EXECS_KEY_SLACK);
    sg_redis__req_guard(req);
    sg_redis__req_send(req);
}

static void redis_mcp_release(sg_state_t *_st, int64_t tenant, const char *id, sg_state_cb cb, void *data)
{
    give_back(_st, tenant, "mcp", "", id, 64, cb, data);
}

static void redis_quota_reserve(sg_state_t *_st, int64_t tenant, const char *day, long max_execs, double max_seconds,
                                sg_quota_cb cb, void *data)
{
    sg_redis__mirror_drop(rs(_st), tenant);
    redis_req_t *req = sg_redis__req_new(rs(_st), SCRIPT_QUOTA_RESERVE, 1, on_quota, data);
    req->cb.quota = cb;
    sg_redis__req_arg(req, "sg:quota:%" PRId64 ":%s", tenant, day);
    sg_redis__req_arg(req, "%ld", max_execs);
    sg_redis__req_arg(req, "%.17g", max_seconds);
    sg_redis__req_guard(req);
    sg_redis__req_send(req);
}

static void redis_exec_admit(sg_state_t *_st, int64_t tenant, const sg_admit_args_t *a, sg_admit_cb cb, void *data)
{
    sg_redis__admit_dispatch(rs(_st), tenant, a, cb, data);
}

static void redis_session_admit(sg_state_t *_st, int64_t tenant, long rate_per_min, long burst, long max,
                                const char *token, sg_admit_cb cb, void *data)
{
    sg_redis__session_admit_dispatch(rs(_st), tenant, rate_per_min, burst, max, token, cb, data);
}

static void redis_exec_finish(sg_state_t *_st, int64_t tenant, const sg_finish_args_t *a, sg_state_cb cb, void *data)
{
    if (cb == NULL && sg_redis__mirror_finish(rs(_st), tenant, a))
        return; /* with the tenant's apply */
    sg_redis__mirror_given_back(rs(_st), tenant, a->token, a->day, a->seconds);
    redis_req_t *req = state_req(_st, SCRIPT_EXEC_FINISH, 4, cb != NULL ? cb : sg_state__ignore, data);
    int touch = a->sid != NULL && a->sid[0] != '\0';

    sg_redis__req_arg(req, "sg:tenant:%" PRId64 ":execs", tenant);
    sg_redis__req_arg(req, "sg:session:%.36s", touch ? a->sid : "-");
    sg_redis__req_arg(req, "sg:sessions:idle");
    sg_redis__req_arg(req, "sg:quota:%" PRId64 ":%s", tenant, a->day);
    sg_redis__req_arg(req, "%.64s", a->token);
    sg_redis__req_arg(req, "%.36s", touch ? a->sid : "");
    sg_redis__req_arg(req, "%" PRId64, a->now);
    sg_redis__req_arg(req, "%ld", a->idle_timeout);
    sg_redis__req_arg(req, "%d", a->add_exec);
    if (a->seconds >= 0)
        sg_redis__req_arg(req, "%.17g", a->seconds);
    else
        sg_redis__req_arg(req, "%s", "");
    sg_redis__solo_send_behind(req);
}

static void redis_quota_seed(sg_state_t *_st, int64_t tenant, const char *day, int64_t execs, double seconds,
                             sg_state_cb cb, void *data)
{
    sg_redis__mirror_drop(rs(_st), tenant);
    redis_req_t *req = state_req(_st, SCRIPT_QUOTA_SEED, 1, cb, data);
    sg_redis__req_arg(req, "sg:quota:%" PRId64 ":%s", tenant, day);
    sg_redis__req_arg(req, "%" PRId64, execs);
    sg_redis__req_arg(req, "%.17g", seconds);
    sg_redis__req_arg(req, "%d", SG_STATE_QUOTA_TTL);
    sg_redis__req_send(req);
}

static void redis_quota_add_seconds(sg_state_t *_st, int64_t tenant, const char *day, double seconds, sg_state_cb cb,
                                    void *data)
{
    sg_redis__mirror_given_back(rs(_st), tenant, NULL, day, seconds);
    redis_req_t *req = state_req(_st, SCRIPT_QUOTA_ADD, 1, cb, data);
    sg_redis__req_arg(req, "sg:quota:%" PRId64 ":%s", tenant, day);
    sg_redis__req_arg(req, "%.17g", seconds);
    sg_redis__solo_send_behind(req);
}

/* ---- life cycle ---------------------------------------------------------------------- */

static int redis_available(sg_state_t *_st)
{
    return rs(_st)->phase == PHASE_READY;
}

/* What this gateway sent (the lazy calls of its last 2 ms among them)
 * runs before the next gateway decides; then the lease goes back. */
static void redis_leave(sg_state_t *_st)
{
    redis_state_t *st = rs(_st);

    if (st->ac != NULL && st->phase == PHASE_READY) {
        sg_redis__solo_apply_all(st);
        sg_redis__conn_drain(st, 200);
        sg_redis__solo_give_back_now(st);
        st->left = 1;
    }
    st->solo = 0;
}

static void redis_destroy(sg_state_t *_st)
{
    redis_state_t *st = rs(_st);

    if (!st->left)
        redis_leave(_st);
    st->solo = 0;
    sg_redis__conn_close(st); /* completes what is in flight with available = 0 */
    sg_redis__solo_destroy(st);
    free(st);
}

static const sg_state_ops_t redis_ops = {
    .name = "redis",
    .destroy = redis_destroy,
    .leave = redis_leave,
    .available = redis_available,
    .rate_check = redis_rate_check,
    .session_reserve = redis_session_reserve,
    .session_unreserve = redis_session_unreserve,
    .session_commit = redis_session_commit,
    .session_touch = redis_session_touch,
    .session_remove = redis_session_remove,
    .session_restore = redis_session_restore,
    .session_get = redis_session_get,
    .sessions_expired = redis_sessions_expired,
    .sessions_list = redis_sessions_list,
    .exec_acquire = redis_exec_acquire,
    .exec_release = redis_exec_release,
    .mcp_acquire = redis_mcp_acquire,
    .mcp_release = redis_mcp_release,
    .quota_reserve = redis_quota_reserve,
    .quota_seed = redis_quota_seed,
    .quota_add_seconds = redis_quota_add_seconds,
    .exec_admit = redis_exec_admit,
    .exec_finish = redis_exec_finish,
    .session_admit = redis_session_admit,
};

/* redis://host[:port][/db]; host may be [v6]. 0, or -1 with err. */
static int parse_url(const char *url, redis_state_t *st, char *err, size_t errlen)
{
    const char *p = url, *host, *host_end;
    if (strncmp(p, "redis://", 8) != 0) {
        snprintf(err, errlen, "redis URL must start with redis://");
        return -1;
    }
    p += 8;
    if (strchr(p, '@') != NULL) {
        snprintf(err, errlen, "redis URL: credentials are not supported");
        return -1;
    }
    if (*p == '[') {
        host = p + 1;
        if ((host_end = strchr(host, ']')) == NULL) {
            snprintf(err, errlen, "redis URL: unterminated [ in the host");
            return -1;
        }
        p = host_end + 1;
    } else {
        host = p;
        host_end = p + strcspn(p, ":/");
        p = host_end;
    }
    if (host_end == host || (size_t)(host_end - host) >= sizeof(st->host)) {
        snprintf(err, errlen, "redis URL: bad host");
        return -1;
    }
    memcpy(st->host, host, host_end - host);
    st->host[host_end - host] = '\0';

    st->port = 6379;
    if (*p == ':') {
        char *end;
        errno = 0;
        long port = strtol(p + 1, &end, 10);
        if (end == p + 1 || errno != 0 || port < 1 || port > 65535 || (*end != '\0' && *end != '/')) {
            snprintf(err, errlen, "redis URL: bad port");
            return -1;
        }
        st->port = (int)port;
        p = end;
    }
    st->db = -1;
    if (*p == '/' && p[1] != '\0') {
        char *end;
        errno = 0;
        long db = strtol(p + 1, &end, 10);
        if (end == p + 1 || errno != 0 || db < 0 || db > INT_MAX || *end != '\0') {
            snprintf(err, errlen, "redis URL: bad database number");
            return -1;
        }
        st->db = (int)db;
    } else if (*p != '\0' && strcmp(p, "/") != 0) {
        snprintf(err, errlen, "redis URL: unexpected \"%s\"", p);
        return -1;
    }
    return 0;
}

sg_state_t *sg_state_create_redis(h2o_loop_t *loop, const char *url, char *err, size_t errlen)
{
    redis_state_t *st = sg_xcalloc(1, sizeof(*st));
    if (parse_url(url != NULL ? url : "", st, err, errlen) != 0) {
        free(st);
        return NULL;
    }
    sg_state__scripts_init();
    st->super.ops = &redis_ops;
    st->super.loop = loop;
    st->phase = PHASE_IDLE;
    sg_redis__solo_init(st);
    sg_redis__conn_start(st);
    return &st->super;
}

void sg_state_redis_stats(sg_state_t *_st, sg_state_redis_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    if (_st == NULL || strcmp(sg_state_backend(_st), "redis") != 0)
        return;
    redis_state_t *st = rs(_st);
    /* a lease run out reads as not held; ending it is the next call's */
    out->holds = st->solo && sg_now_us() < st->solo_until_us;
    out->local_admits = st->local_admits;
    out->local_refusals = st->local_refusals;
    out->mismatches = st->mismatches;
    out->writes = st->writes;
    out->applies = st->applies;
}
