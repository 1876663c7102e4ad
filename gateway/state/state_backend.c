/*
 * state_backend.c — the public sg_state_* calls (state.h), each forwarded
 * to its backend's ops table, and the helpers both backends share
 * (state_backend.h).
 */
#include "state_backend.h"

#include <time.h>

/* ---- shared helpers --------------------------------------------------------- */

int64_t sg_state__now_ms(sg_state_t *st)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + st->clock_skew_ms;
}

int64_t sg_state__now_s(sg_state_t *st)
{
    int64_t ms = sg_state__now_ms(st);
    return ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000);
}

void sg_state__fail_rate(sg_rate_cb cb, void *data, long burst)
{
    sg_rate_result_t r = {0};
    r.limit = burst;
    cb(data, &r);
}

void sg_state__fail(sg_state_cb cb, void *data)
{
    sg_state_result_t r = {0};
    cb(data, &r);
}

/* ---- public entry points ------------------------------------------------------ */

void sg_state_destroy(sg_state_t *st)
{
    if (st != NULL)
        st->ops->destroy(st);
}

int sg_state_available(sg_state_t *st)
{
    return st->ops->available(st);
}

const char *sg_state_backend(sg_state_t *st)
{
    return st->ops->name;
}

void sg_state_set_clock_skew_ms(sg_state_t *st, int64_t skew_ms)
{
    st->clock_skew_ms = skew_ms;
}

void sg_state_rate_check(sg_state_t *st, int64_t tenant, long rate_per_min, long burst, sg_rate_cb cb, void *data)
{
    st->ops->rate_check(st, tenant, rate_per_min, burst, cb, data);
}

void sg_state_session_reserve(sg_state_t *st, int64_t tenant, long max, const char *token, sg_state_cb cb, void *data)
{
    st->ops->session_reserve(st, tenant, max, token, cb, data);
}

void sg_state_session_unreserve(sg_state_t *st, int64_t tenant, const char *token, sg_state_cb cb, void *data)
{
    st->ops->session_unreserve(st, tenant, token, cb, data);
}

void sg_state_session_commit(sg_state_t *st, const char *token, const sg_live_session_t *s, sg_state_cb cb, void *data)
{
    st->ops->session_commit(st, token, s, cb, data);
}

void sg_state_session_touch(sg_state_t *st, const char *sid, int64_t now, long idle_timeout, int add_exec,
                            sg_state_cb cb, void *data)
{
    st->ops->session_touch(st, sid, now, idle_timeout, add_exec, cb, data);
}

void sg_state_session_remove(sg_state_t *st, const char *sid, int64_t tenant, sg_state_cb cb, void *data)
{
    st->ops->session_remove(st, sid, tenant, cb, data);
}

void sg_state_session_restore(sg_state_t *st, const sg_live_session_t *s, sg_state_cb cb, void *data)
{
    st->ops->session_restore(st, s, cb, data);
}

void sg_state_session_get(sg_state_t *st, const char *sid, sg_state_get_cb cb, void *data)
{
    st->ops->session_get(st, sid, cb, data);
}

void sg_state_sessions_expired(sg_state_t *st, int64_t now, size_t limit, sg_state_expired_cb cb, void *data)
{
    st->ops->sessions_expired(st, now, limit, cb, data);
}

void sg_state_sessions_list(sg_state_t *st, int64_t tenant, sg_state_list_cb cb, void *data)
{
    st->ops->sessions_list(st, tenant, cb, data);
}

void sg_state_exec_acquire(sg_state_t *st, int64_t tenant, long max, const char *token, long lease_s, sg_state_cb cb,
                           void *data)
{
    st->ops->exec_acquire(st, tenant, max, token, lease_s, cb, data);
}

void sg_state_exec_release(sg_state_t *st, int64_t tenant, const char *token, sg_state_cb cb, void *data)
{
    st->ops->exec_release(st, tenant, token, cb, data);
}

void sg_state_mcp_open(sg_state_t *st, int64_t tenant, long max, const char *id, long idle_s, sg_state_cb cb,
                       void *data)
{
    /* at least one: max 0 would only renew (touch) */
    st->ops->mcp_acquire(st, tenant, max > 0 ? max : 1, id, idle_s, cb, data);
}

void sg_state_mcp_touch(sg_state_t *st, int64_t tenant, const char *id, long idle_s, sg_state_cb cb, void *data)
{
    st->ops->mcp_acquire(st, tenant, 0, id, idle_s, cb, data);
}

void sg_state_mcp_close(sg_state_t *st, int64_t tenant, const char *id, sg_state_cb cb, void *data)
{
    st->ops->mcp_release(st, tenant, id, cb, data);
}

void sg_state_quota_reserve(sg_state_t *st, int64_t tenant, const char *day, long max_execs, double max_seconds,
                            sg_quota_cb cb, void *data)
{
    st->ops->quota_reserve(st, tenant, day, max_execs, max_seconds, cb, data);
}

void sg_state_quota_seed(sg_state_t *st, int64_t tenant, const char *day, int64_t execs, double seconds, sg_state_cb cb,
                         void *data)
{
    st->ops->quota_seed(st, tenant, day, execs, seconds, cb, data);
}

void sg_state_quota_add_seconds(sg_state_t *st, int64_t tenant, const char *day, double seconds, sg_state_cb cb,
                                void *data)
{
    st->ops->quota_add_seconds(st, tenant, day, seconds, cb, data);
}
