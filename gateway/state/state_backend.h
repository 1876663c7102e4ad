/*
 * state_backend.h — private to gateway/state/: what a state backend
 * provides and the helpers both backends share. Callers use state.h only.
 *
 * Every public sg_state_* call (state_backend.c) checks nothing and
 * forwards to ops; each backend embeds sg_state_t as its first member.
 */
#ifndef SANDGATE_STATE_BACKEND_H
#define SANDGATE_STATE_BACKEND_H

#include "state.h"

/* How long a reservation holds a slot, seconds. */
#define SG_STATE_RESERVATION_TTL 120
/* How long a tenant's in-flight set outlives its last lease, seconds. */
#define SG_STATE_EXECS_KEY_SLACK 60
/* How long a day's quota counters live after seeding, seconds (3 days). */
#define SG_STATE_QUOTA_TTL (3 * 86400)

typedef struct {
    const char *name;
    void (*destroy)(sg_state_t *st);
    void (*leave)(sg_state_t *st); /* NULL: nothing to do */
    int (*available)(sg_state_t *st);
    void (*rate_check)(sg_state_t *st, int64_t tenant, long rate_per_min, long burst, sg_rate_cb cb, void *data);
    void (*session_reserve)(sg_state_t *st, int64_t tenant, long max, const char *token, sg_state_cb cb, void *data);
    void (*session_unreserve)(sg_state_t *st, int64_t tenant, const char *token, sg_state_cb cb, void *data);
    void (*session_commit)(sg_state_t *st, const char *token, const sg_live_session_t *s, sg_state_cb cb, void *data);
    void (*session_touch)(sg_state_t *st, const char *sid, int64_t now, long idle_timeout, int add_exec, sg_state_cb cb,
                          void *data);
    void (*session_remove)(sg_state_t *st, const char *sid, int64_t tenant, sg_state_cb cb, void *data);
    void (*session_restore)(sg_state_t *st, const sg_live_session_t *s, sg_state_cb cb, void *data);
    void (*session_get)(sg_state_t *st, const char *sid, sg_state_get_cb cb, void *data);
    void (*sessions_expired)(sg_state_t *st, int64_t now, size_t limit, sg_state_expired_cb cb, void *data);
    void (*sessions_list)(sg_state_t *st, int64_t tenant, sg_state_list_cb cb, void *data);
    void (*exec_acquire)(sg_state_t *st, int64_t tenant, long max, const char *token, long lease_s, sg_state_cb cb,
                         void *data);
    void (*exec_release)(sg_state_t *st, int64_t tenant, const char *token, sg_state_cb cb, void *data);
    /* MCP sessions: max 0 only renews a live id (touch) */
    void (*mcp_acquire)(sg_state_t *st, int64_t tenant, long max, const char *id, long idle_s, sg_state_cb cb,
                        void *data);
    void (*mcp_release)(sg_state_t *st, int64_t tenant, const char *id, sg_state_cb cb, void *data);
    void (*quota_reserve)(sg_state_t *st, int64_t tenant, const char *day, long max_execs, double max_seconds,
                          sg_quota_cb cb, void *data);
    void (*quota_seed)(sg_state_t *st, int64_t tenant, const char *day, int64_t execs, double seconds, sg_state_cb cb,
                       void *data);
    void (*quota_add_seconds)(sg_state_t *st, int64_t tenant, const char *day, double seconds, sg_state_cb cb,
                              void *data);
    /* NULL: state_backend.c makes it of rate_check, exec_acquire and quota_reserve */
    void (*exec_admit)(sg_state_t *st, int64_t tenant, const sg_admit_args_t *a, sg_admit_cb cb, void *data);
    /* NULL: state_backend.c makes it of rate_check and session_reserve */
    void (*session_admit)(sg_state_t *st, int64_t tenant, long rate_per_min, long burst, long max, const char *token,
                          sg_admit_cb cb, void *data);
    /* NULL: state_backend.c makes it of exec_release, session_touch and quota_add_seconds */
    void (*exec_finish)(sg_state_t *st, int64_t tenant, const sg_finish_args_t *a, sg_state_cb cb, void *data);
} sg_state_ops_t;

struct sg_state {
    const sg_state_ops_t *ops;
    h2o_loop_t *loop;
    int64_t clock_skew_ms; /* added to the wall clock; tests only (sg_state_set_clock_skew_ms) */
};

/* Wall-clock milliseconds / seconds since the epoch, plus the test skew. */
int64_t sg_state__now_ms(sg_state_t *st);
int64_t sg_state__now_s(sg_state_t *st);

/* Invokes cb with available = 0 and everything else zero / NULL. */
void sg_state__fail_rate(sg_rate_cb cb, void *data, long burst);
void sg_state__fail(sg_state_cb cb, void *data);
/* A callback for updates nobody waits on. */
void sg_state__ignore(void *data, const sg_state_result_t *r);

#endif
