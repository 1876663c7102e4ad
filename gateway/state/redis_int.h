/*
 * redis_int.h — private to state/redis*.c: the Redis backend in three
 * layers, each using only those below it: the connection and its calls
 * (redis_conn.c), the admissions with or without the solo copy
 * (redis_solo.c), the state's operations (redis.c).
 */
#ifndef SANDGATE_STATE_REDIS_INT_H
#define SANDGATE_STATE_REDIS_INT_H

#include <stdint.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "state.h"
#include "state_backend.h"

#define MAX_ARGS 24
#define NBACKOFF 7         /* redis_conn.c's reconnection backoff steps */
#define MIRROR_BUCKETS 256 /* redis_solo.c's tenants' copies, by tenant id */
#define SOLO_BEAT_MS 200   /* redis_solo.c: every gateway's beat */
/* redis_solo.c: a tenant's apply goes this long after the first decision
 * it holds. Each apply runs one script in Redis (~150 us there with a few
 * sessions touched); at 10 ms, 8 clients' executions cost Redis ~11 us
 * each against ~30 at 2 ms. What a holder killed loses from Redis is at
 * most this long (the usage rows are in the journal before the answers). */
#define SOLO_APPLY_MS 10

/* ---- the backend ------------------------------------------------------------- */

typedef enum { PHASE_IDLE, PHASE_CONNECTING, PHASE_HANDSHAKE, PHASE_READY, PHASE_CLOSED } phase_t;

typedef struct redis_state {
    sg_state_t super;
    char host[256];
    int port;
    int db; /* -1: none named */
    phase_t phase;
    int left; /* sg_state_leave ran: the connection drained, nothing more goes out */
    redisAsyncContext *ac;
    h2o_timeout_t cmd_timeout; /* CMD_TIMEOUT_MS: every command in flight, and connect + handshake */
    h2o_timeout_t backoff[NBACKOFF];
    h2o_timeout_entry_t connect_entry; /* in cmd_timeout while CONNECTING / HANDSHAKE */
    h2o_timeout_entry_t reconnect_entry;
    size_t backoff_step;
    int outage_logged;
    /* solo (redis_solo.c) */
    char id[33];            /* this gateway, in the gateways' set and the solo key */
    int want_solo;          /* sg_state_redis_solo */
    int solo;               /* holds the lease ... */
    uint64_t solo_until_us; /* ... until then (monotonic), renewed by each beat */
    h2o_timeout_t beat_timeout;
    h2o_timeout_entry_t beat_entry;
    int beat_inflight;
    h2o_timeout_t hold_timeout;             /* a guarded call that another gateway's lease holds back */
    struct redis_req *waiting;              /* those calls, to complete at destroy */
    struct mirror *mirrors[MIRROR_BUCKETS]; /* each a list */
    struct mirror *dirty;                   /* copies whose decisions Redis has not had yet (redis_solo.c, "apply") */
    h2o_timeout_t apply_timeout;            /* SOLO_APPLY_MS */
    h2o_timeout_entry_t apply_entry;        /* their call, SOLO_APPLY_MS after the first */
    int applying;                           /* those calls are being sent */
    uint64_t applies;                       /* SCRIPT_SOLO_APPLY calls sent */
    uint64_t local_admits, local_refusals, mismatches;
    uint64_t writes;         /* to the socket (redis_h2o.c counts them) */
    unsigned long noscripts; /* NOSCRIPT answers: a script sent again goes after calls sent behind it */
    /* what the connection tells the layer above (redis_solo.c sets them) */
    void (*ready_cb)(struct redis_state *st);       /* READY */
    void (*lost_cb)(struct redis_state *st);        /* the connection is gone */
    void (*noscript_cb)(struct redis_state *st);    /* a script sent again: calls out of order */
    void (*before_send_cb)(struct redis_state *st); /* a call is about to be sent: what must go before it goes */
} redis_state_t;

typedef struct redis_req redis_req_t;
/* reply is NULL when Redis is unavailable (or answered with an error) */
typedef void (*req_done_fn)(redis_req_t *req, redisReply *reply);

struct redis_req {
    redis_state_t *st;
    h2o_timeout_entry_t timeout;
    int script; /* -1: a plain command */
    int retried;
    int lazy; /* nobody waits for the answer: may be written a little later (sg_redis__req_send_behind) */
    int argc;
    const char *argv[MAX_ARGS];
    size_t argvlen[MAX_ARGS];
    char *owned[MAX_ARGS]; /* an argument too long for text */
    char text[512];        /* the arguments, one after the other */
    size_t text_used;
    req_done_fn done;
    union {
        sg_rate_cb rate;
        sg_state_cb state;
        sg_state_get_cb get;
        sg_state_expired_cb expired;
        sg_state_list_cb list;
        sg_quota_cb quota;
        sg_admit_cb admit;
    } cb;
    void *data;
    /* rate */
    int64_t now_ms;
    long rate_per_min, burst;
    /* solo: a guarded script waits while another gateway holds the lease */
    int guarded;
    uint64_t wait_since_us;
    h2o_timeout_entry_t wait_entry;
    struct redis_req *wait_next, **wait_prev;
    /* solo: a call sent for what the copy decided, and what it expects */
    int64_t tenant;
    long exp_in_flight;
    int64_t exp_execs;
    int exp_quota; /* the quota's status an execution's admission answers (SG_QUOTA_OK for the others) */
    char day[16];
    char token[65]; /* a refusal the copy made: the slot (or reservation) to give back should Redis have taken it */
};

/* ---- redis_conn.c ---- */

/* The timeouts, then the first connection. */
void sg_redis__conn_start(redis_state_t *st);
/* CLOSED; every call in flight or held back completes with NULL. */
void sg_redis__conn_close(redis_state_t *st);
/* At destroy, READY: everything sent reaches Redis and runs before the
 * connection goes (its buffer written, its writing half shut, Redis's
 * answers read and dropped until it closes), timeout_ms at most. Nothing
 * can be sent on it after. */
void sg_redis__conn_drain(redis_state_t *st, int timeout_ms);

/* A script call: EVALSHA <sha> <nkeys>, then the caller adds keys and args. */
redis_req_t *sg_redis__req_new(redis_state_t *st, int script, int nkeys, req_done_fn done, void *data);
void sg_redis__req_arg(redis_req_t *req, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sends it; outside READY it completes at once with NULL. */
void sg_redis__req_send(redis_req_t *req);
/* Sends it and writes it at once (sg_redis_h2o_flush_now), with what is
 * queued before it: for a call whose answer is awaited while the loop does
 * blocking work first. req may be gone when it returns. */
void sg_redis__req_send_now(redis_req_t *req);
/* Sends a call nobody waits for (its answer at most checked): written
 * within SG_LOOP_LATER_MS, with the others of those turns, rather than at
 * the end of this one (redis_h2o.h). Order is kept: a call sent after it
 * is not written before it. */
void sg_redis__req_send_lazy(redis_req_t *req);
/* Completes it: done(req, reply), then frees it. */
void sg_redis__req_finish(redis_req_t *req, redisReply *reply);
int64_t sg_redis__reply_int(const redisReply *r);
double sg_redis__reply_double(const redisReply *r);
void sg_redis__reply_str(const redisReply *r, char *dst, size_t size);
/* An array reply of at least n elements, or NULL. */
redisReply *sg_redis__reply_array(redisReply *r, size_t n);
/* This gateway's id as a guarded script's last argument: its "wait"
 * (another gateway holds the solo lease) holds the call back. */
void sg_redis__req_guard(redis_req_t *req);

/* ---- redis_solo.c ---- */

/* The answers of SCRIPT_EXEC_ADMIT and SCRIPT_RATE to the caller's cb. */
void sg_redis__on_admit(redis_req_t *req, redisReply *reply);
void sg_redis__on_rate(redis_req_t *req, redisReply *reply);

void sg_redis__solo_init(redis_state_t *st);
/* At destroy, the connection still there: the lease given back, this
 * gateway out of the set; then everything solo holds freed. */
void sg_redis__solo_give_back_now(redis_state_t *st);
void sg_redis__solo_destroy(redis_state_t *st);
/* An answer of Redis other than the copy's for req->tenant: counted, the copy dropped. */
void sg_redis__solo_mismatch(redis_req_t *req, const char *what);
/* Sends req, which nobody waits for: lazily while this gateway holds the
 * lease (no other gateway reads these keys before it gives the lease back,
 * and that goes after everything it sent), else at once. */
void sg_redis__solo_send_behind(redis_req_t *req);
/* A call that changes the tenant's admission keys behind its copy. */
void sg_redis__mirror_drop(redis_state_t *st, int64_t tenant);
/* Sends what the copies decided and Redis has not had yet, one call per
 * tenant: before any other call (before_send_cb), so that order is kept,
 * and SG_LOOP_LATER_MS after the first of them at the latest. */
void sg_redis__solo_apply_all(redis_state_t *st);
/* An execution's end (a slot given back, a session touched, seconds added)
 * taken into its tenant's copy and sent with its next apply: 1, or 0 when
 * it is to be sent alone (no copy, or another day's seconds). */
int sg_redis__mirror_finish(redis_state_t *st, int64_t tenant, const sg_finish_args_t *a);
/* A slot given back (token), a day's seconds added (day, seconds >= 0). */
void sg_redis__mirror_given_back(redis_state_t *st, int64_t tenant, const char *token, const char *day, double seconds);
void sg_redis__admit_dispatch(redis_state_t *st, int64_t tenant, const sg_admit_args_t *a, sg_admit_cb cb, void *data);
/* A rate check, burst clamped, a rate set. */
void sg_redis__rate_dispatch(redis_state_t *st, int64_t tenant, long rate_per_min, long burst, sg_rate_cb cb,
                             void *data);
/* A session's admission (SCRIPT_SESSION_ADMIT, burst clamped): from the
 * copy under the lease, as an execution's is. */
void sg_redis__session_admit_dispatch(redis_state_t *st, int64_t tenant, long rate_per_min, long burst, long max,
                                      const char *token, sg_admit_cb cb, void *data);
/* A session committed in the tenant's set (its reservation "pending:<token>"
 * replaced when token is not NULL), scored until_s; a session removed from
 * the tenant's set (SCRIPT_REMOVE): applied to the tenant's copy. */
void sg_redis__mirror_session_committed(redis_state_t *st, int64_t tenant, const char *token, const char *sid,
                                        int64_t until_s);
void sg_redis__mirror_session_removed(redis_state_t *st, int64_t tenant, const char *sid);

#endif
