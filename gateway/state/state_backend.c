/*
 * state_backend.c — the public sg_state_* calls (state.h), each forwarded
 * to its backend's ops table, and the helpers both backends share
 * (state_backend.h).
 */
#include "state_backend.h"

#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

void sg_state__ignore(void *data, const sg_state_result_t *r)
{
}

/* ---- public entry points ------------------------------------------------------ */

void sg_state_destroy(sg_state_t *st)
{
    if (st != NULL)
        st->ops->destroy(st);
}

void sg_state_leave(sg_state_t *st)
{
    if (st != NULL && st->ops->leave != NULL)
        st->ops->leave(st);
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

/* ---- an admission made of three calls (a backend without exec_admit) ---------- */

typedef struct {
    sg_state_t *st;
    int64_t tenant;
    sg_admit_args_t a;
    char token[65];
    char day[16];
    sg_admit_result_t r;
    sg_admit_cb cb;
    void *data;
} admit_t;

static void admit_end(admit_t *ad)
{
    ad->cb(ad->data, &ad->r);
    free(ad);
}

static void on_admit_released(void *data, const sg_state_result_t *r)
{
}

static void on_admit_quota(void *data, int available, sg_quota_status_t status, int64_t execs, double seconds)
{
    admit_t *ad = data;
    if (!available) {
        /* counted nowhere: the caller's quota policy applies as for an outage */
        ad->r.quota = SG_QUOTA_OK;
    } else {
        ad->r.quota = status;
        ad->r.execs = execs;
        ad->r.seconds = seconds;
        if (status == SG_QUOTA_EXECS || status == SG_QUOTA_SECONDS)
            sg_state_exec_release(ad->st, ad->tenant, ad->token, on_admit_released, NULL);
    }
    admit_end(ad);
}

static void on_admit_slot(void *data, const sg_state_result_t *r)
{
    admit_t *ad = data;
    if (!r->available) {
        ad->r.available = 0;
        admit_end(ad);
        return;
    }
    ad->r.slot = r->ok;
    ad->r.in_flight = r->count;
    if (!r->ok) {
        admit_end(ad);
        return;
    }
    sg_state_quota_reserve(ad->st, ad->tenant, ad->day, ad->a.execs_per_day, ad->a.seconds_per_day, on_admit_quota, ad);
}

static void on_admit_rate(void *data, const sg_rate_result_t *r)
{
    admit_t *ad = data;
    if (!r->available) {
        admit_end(ad);
        return;
    }
    ad->r.available = 1;
    ad->r.rate = *r;
    if (!r->allowed) {
        admit_end(ad);
        return;
    }
    sg_state_exec_acquire(ad->st, ad->tenant, ad->a.max_execs, ad->token, ad->a.lease_s, on_admit_slot, ad);
}

void sg_state_exec_admit(sg_state_t *st, int64_t tenant, const sg_admit_args_t *a, sg_admit_cb cb, void *data)
{
    if (st->ops->exec_admit != NULL) {
        st->ops->exec_admit(st, tenant, a, cb, data);
        return;
    }
    admit_t *ad = sg_xcalloc(1, sizeof(*ad));
    ad->st = st;
    ad->tenant = tenant;
    ad->a = *a;
    snprintf(ad->token, sizeof(ad->token), "%s", a->token);
    snprintf(ad->day, sizeof(ad->day), "%s", a->day);
    ad->a.token = ad->token;
    ad->a.day = ad->day;
    ad->cb = cb;
    ad->data = data;
    sg_state_rate_check(st, tenant, a->rate_per_min, a->burst, on_admit_rate, ad);
}

/* ---- a session create's admission made of two calls ------------------------------- */

typedef struct {
    sg_state_t *st;
    int64_t tenant;
    long max;
    char token[65];
    sg_admit_result_t r;
    sg_admit_cb cb;
    void *data;
} session_admit_t;

static void on_session_admit_reserved(void *data, const sg_state_result_t *r)
{
    session_admit_t *ad = data;
    ad->r.available = r->available;
    ad->r.slot = r->ok;
    ad->r.in_flight = r->count;
    ad->cb(ad->data, &ad->r);
    free(ad);
}

static void on_session_admit_rate(void *data, const sg_rate_result_t *r)
{
    session_admit_t *ad = data;
    if (r->available && !r->allowed) {
        ad->r.available = 1;
        ad->r.rate = *r;
        ad->cb(ad->data, &ad->r);
        free(ad);
        return;
    }
    /* allowed, or not known (the rate fails open): the reservation decides */
    ad->r.rate = *r;
    ad->r.rate.allowed = 1;
    sg_state_session_reserve(ad->st, ad->tenant, ad->max, ad->token, on_session_admit_reserved, ad);
}

void sg_state_session_admit(sg_state_t *st, int64_t tenant, long rate_per_min, long burst, long max, const char *token,
                            sg_admit_cb cb, void *data)
{
    if (st->ops->session_admit != NULL) {
        st->ops->session_admit(st, tenant, rate_per_min, burst, max, token, cb, data);
        return;
    }
    session_admit_t *ad = sg_xcalloc(1, sizeof(*ad));
    ad->st = st;
    ad->tenant = tenant;
    ad->max = max;
    snprintf(ad->token, sizeof(ad->token), "%s", token);
    ad->cb = cb;
    ad->data = data;
    sg_state_rate_check(st, tenant, rate_per_min, burst, on_session_admit_rate, ad);
}

/* ---- an execution's end made of three calls ---------------------------------------- */

static void on_finish_part(void *data, const sg_state_result_t *r)
{
}

void sg_state_exec_finish(sg_state_t *st, int64_t tenant, const sg_finish_args_t *a, sg_state_cb cb, void *data)
{
    if (st->ops->exec_finish != NULL) {
        st->ops->exec_finish(st, tenant, a, cb, data);
        return;
    }
    sg_state_exec_release(st, tenant, a->token, on_finish_part, NULL);
    if (a->sid != NULL && a->sid[0] != '\0')
        sg_state_session_touch(st, a->sid, a->now, a->idle_timeout, a->add_exec, on_finish_part, NULL);
    if (a->seconds >= 0)
        sg_state_quota_add_seconds(st, tenant, a->day, a->seconds, on_finish_part, NULL);
    if (cb != NULL) {
        sg_state_result_t r = {.available = sg_state_available(st), .ok = 1};
        cb(data, &r);
    }
}
