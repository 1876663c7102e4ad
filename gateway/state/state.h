/*
 * state.h — the gateway's hot, shared state: rate-limit and quota counters
 * and live session records, behind one interface with two backends:
 *
 *   redis   (SANDGATE_REDIS_URL set) shared by every gateway and read by ops
 *           dashboards; every check-and-update is one Lua script (atomic);
 *           scripts run by EVALSHA and are loaded again after NOSCRIPT (a
 *           Redis restart); the connection comes back with backoff.
 *   memory  (no Redis configured) the same state in this process, so a
 *           single-gateway install needs only SQLite.
 *
 * Redis key schema (documented in the README for dashboards):
 *   sg:session:<sid>          HASH  tenant, lang, created_at, last_used_at,
 *                                   idle_deadline, lifetime_deadline,
 *                                   executions   (unix seconds)
 *   sg:tenant:<tid>:sessions  ZSET  live session ids of a tenant, score =
 *                                   lifetime deadline; also reservations
 *                                   "pending:<token>" scored by their expiry
 *   sg:sessions:idle          ZSET  session id -> idle deadline
 *   sg:sessions:lifetime      ZSET  session id -> lifetime deadline
 *   sg:rate:<tid>             STRING GCRA theoretical arrival time, ms
 *   sg:quota:<tid>:<yyyymmdd> HASH  execs, seconds (UTC day; expires after 3 days)
 *   sg:tenant:<tid>:execs     ZSET  executions in flight of a tenant: token ->
 *                                   lease deadline (unix s); the key expires
 *                                   a minute after its last lease
 *   sg:tenant:<tid>:mcp       ZSET  MCP sessions of a tenant (handler/mcp.c):
 *                                   MCP-Session-Id -> idle deadline (unix s);
 *                                   the key expires a minute after the last
 *                                   session's deadline
 *
 * When Redis is configured but unreachable, each call says so
 * (available = 0) and the caller applies its per-limit policy (README).
 *
 * Threading: loop thread only. Callbacks may run before the call returns
 * (the memory backend always; the redis backend when Redis is not
 * answering, and for a rate check that limits nothing) or later (the redis
 * backend's replies); callers must accept both.
 */
#ifndef SANDGATE_STATE_H
#define SANDGATE_STATE_H

#include <h2o.h>
#include <stdint.h>

typedef struct sg_state sg_state_t;

sg_state_t *sg_state_create_memory(h2o_loop_t *loop);
/* url: redis://host:port[/db]. Returns at once; connects in the background. */
sg_state_t *sg_state_create_redis(h2o_loop_t *loop, const char *url, char *err, size_t errlen);
/* Calls still in flight complete (available = 0) before it returns. Not
 * from inside a state callback. */
void sg_state_destroy(sg_state_t *st);
/* A gateway's last call, its loop no longer run: everything it sent
 * reaches the shared state and runs before it goes (Redis: the calls still
 * in its buffer, the lazy ones among them, written, and run before the solo
 * lease is given back; 400 ms at most). No call may follow but destroy. */
void sg_state_leave(sg_state_t *st);
/* 1 if the backend answers now (memory: always). */
int sg_state_available(sg_state_t *st);
const char *sg_state_backend(sg_state_t *st); /* "memory" or "redis" */
/* Tests only: shifts this backend's wall clock (reservation expiry, rate
 * limiting) by skew_ms. */
void sg_state_set_clock_skew_ms(sg_state_t *st, int64_t skew_ms);

/* ---- request rate: GCRA, per tenant ---- */
typedef struct {
    int available; /* 0: Redis unreachable, nothing was checked */
    int allowed;
    long limit;           /* burst */
    long remaining;       /* requests that could be made right now */
    double reset_s;       /* seconds until the bucket is full again */
    double retry_after_s; /* when !allowed: seconds until one request is allowed */
} sg_rate_result_t;
typedef void (*sg_rate_cb)(void *data, const sg_rate_result_t *r);
/* Pure GCRA step, shared by both backends and unit tested: given the stored
 * theoretical arrival time tat_ms (0 if none) and now_ms, decides and sets
 * *new_tat_ms (unchanged when denied). The formula is in state.c. A
 * rate_per_min <= 0 limits nothing. */
void sg_gcra(int64_t now_ms, int64_t tat_ms, long rate_per_min, long burst, sg_rate_result_t *r, int64_t *new_tat_ms);
/* The burst as sg_gcra takes it: at least 1, at most a billion. */
long sg_gcra_burst(long burst);
/* The GCRA emission interval for a rate, ms: ceil(60000 / rate), at least
 * 1; 0 when rate_per_min <= 0 (no limit). */
int64_t sg_gcra_interval_ms(long rate_per_min);
void sg_state_rate_check(sg_state_t *st, int64_t tenant, long rate_per_min, long burst, sg_rate_cb cb, void *data);

/* ---- live sessions ---- */
typedef struct {
    char id[37];
    int64_t tenant_id;
    char lang[32];
    int64_t created_at;
    int64_t last_used_at;
    int64_t idle_deadline;
    int64_t lifetime_deadline;
    int64_t executions;
    char proxy[256]; /* the proxy it was placed on (placement.h); "" if not recorded */
} sg_live_session_t;

typedef struct {
    int available;
    int ok;     /* reserve: a slot was free; others: the operation applied */
    long count; /* reserve, unreserve, commit, remove: live sessions + reservations of
                 * the tenant after the call; touch: the session's executions */
} sg_state_result_t;
typedef void (*sg_state_cb)(void *data, const sg_state_result_t *r);

/* Atomically: drops expired reservations, and if the tenant has fewer than
 * max live sessions + reservations, adds reservation `token` (expires in
 * 120 s). Exact under concurrency. */
void sg_state_session_reserve(sg_state_t *st, int64_t tenant, long max, const char *token, sg_state_cb cb, void *data);
/* Drops a reservation (the proxy refused the create). */
void sg_state_session_unreserve(sg_state_t *st, int64_t tenant, const char *token, sg_state_cb cb, void *data);
/* Replaces the reservation with the live session (record + all indexes);
 * ok 0, the reservation only given back, when the session was closed
 * (sg_state_session_remove) before its commit. */
void sg_state_session_commit(sg_state_t *st, const char *token, const sg_live_session_t *s, sg_state_cb cb, void *data);
/* A use: last_used_at = now, idle_deadline = now + idle_timeout, executions += add_exec.
 * ok = 0 if the session is not live. */
void sg_state_session_touch(sg_state_t *st, const char *sid, int64_t now, long idle_timeout, int add_exec,
                            sg_state_cb cb, void *data);
/* Removes the session everywhere. ok = 1 only for the caller that removed
 * it (so that of two gateways reaping at once, one closes it). It also
 * leaves a mark that the session was closed, kept SG_STATE_CLOSED_TTL
 * seconds, which sg_state_session_restore honours. */
void sg_state_session_remove(sg_state_t *st, const char *sid, int64_t tenant, sg_state_cb cb, void *data);
/* Puts back a session the ledger says is open (the rebuild after a gateway
 * restart or a lost Redis), atomically: only when it is not live and has no
 * closed mark. A close removes the live record before the ledger records
 * it, so a rebuild that read the ledger in between would otherwise bring a
 * closing session back. ok = 1 when it was put back; count as for commit. */
void sg_state_session_restore(sg_state_t *st, const sg_live_session_t *s, sg_state_cb cb, void *data);
/* How long the closed mark lives, seconds: longer than a close can take
 * from the live state to the ledger (SANDGATE_CALL_TIMEOUT_MS is at most
 * an hour). */
#define SG_STATE_CLOSED_TTL 7200

typedef void (*sg_state_get_cb)(void *data, int available, const sg_live_session_t *s /* NULL: not live */);
void sg_state_session_get(sg_state_t *st, const char *sid, sg_state_get_cb cb, void *data);

/* Sessions whose idle or lifetime deadline is <= now, at most limit; for
 * each, reason is "idle" or "lifetime". */
typedef void (*sg_state_expired_cb)(void *data, int available, size_t n, const char *const *sids,
                                    const char *const *reasons, const int64_t *tenants);
void sg_state_sessions_expired(sg_state_t *st, int64_t now, size_t limit, sg_state_expired_cb cb, void *data);

/* All live sessions (tenant 0) or one tenant's, for the admin API. */
typedef void (*sg_state_list_cb)(void *data, int available, size_t n, const sg_live_session_t *list);
void sg_state_sessions_list(sg_state_t *st, int64_t tenant, sg_state_list_cb cb, void *data);

/* ---- executions in flight, per tenant ---- */

/* Atomically: drops the tenant's executions whose lease has run out (a
 * gateway that died mid-execution never released them), and if fewer than
 * max remain, adds `token` with the lease deadline now + lease_s. ok = 1
 * when the slot was taken (a token already held is renewed and stays one
 * slot); count = executions in flight after the call. Exact under
 * concurrency, like the session slots. */
void sg_state_exec_acquire(sg_state_t *st, int64_t tenant, long max, const char *token, long lease_s, sg_state_cb cb,
                           void *data);
/* Ends an execution: ok = 1 if `token` was held; count as for acquire. */
void sg_state_exec_release(sg_state_t *st, int64_t tenant, const char *token, sg_state_cb cb, void *data);

/* ---- MCP sessions, per tenant (handler/mcp.c) ----
 * Kept as executions in flight are, in a set of their own: an MCP session
 * is a lease in its tenant's set that each use renews for idle_s more. */

/* Atomically: drops the tenant's MCP sessions that ran out, and if fewer
 * than max remain, adds `id` for idle_s. ok = 1 when it was added; count =
 * the tenant's MCP sessions after the call. */
void sg_state_mcp_open(sg_state_t *st, int64_t tenant, long max, const char *id, long idle_s, sg_state_cb cb,
                       void *data);
/* A use of `id`: renewed for idle_s when it is a live session of this
 * tenant (ok = 1); ok = 0 when it is unknown, ended, expired, or another
 * tenant's (never in this tenant's set). */
void sg_state_mcp_touch(sg_state_t *st, int64_t tenant, const char *id, long idle_s, sg_state_cb cb, void *data);
/* Ends `id` (DELETE): ok = 1 if it was a live session of this tenant. */
void sg_state_mcp_close(sg_state_t *st, int64_t tenant, const char *id, sg_state_cb cb, void *data);

/* ---- daily quotas (UTC day "yyyymmdd") ---- */
typedef enum {
    SG_QUOTA_OK = 0,      /* counted: one more execution */
    SG_QUOTA_EXECS = 1,   /* executions per day used up */
    SG_QUOTA_SECONDS = 2, /* execution seconds per day used up */
    SG_QUOTA_UNSEEDED = 3 /* the day's counters are absent: seed them from the ledger, then ask again */
} sg_quota_status_t;
typedef void (*sg_quota_cb)(void *data, int available, sg_quota_status_t status, int64_t execs, double seconds);
void sg_state_quota_reserve(sg_state_t *st, int64_t tenant, const char *day, long max_execs, double max_seconds,
                            sg_quota_cb cb, void *data);
/* Sets the day's counters if they are absent (from the SQLite ledger):
 * ok = 1 if this call set them, 0 if they were there already. */
void sg_state_quota_seed(sg_state_t *st, int64_t tenant, const char *day, int64_t execs, double seconds, sg_state_cb cb,
                         void *data);
/* Adds to the day's seconds; ok = 0 and nothing changes if the day is not
 * seeded (the ledger has the execution; the seed will carry it). */
void sg_state_quota_add_seconds(sg_state_t *st, int64_t tenant, const char *day, double seconds, sg_state_cb cb,
                                void *data);

/* ---- an execution's admission: rate, slot and quota in one call ---- */
typedef struct {
    long rate_per_min, burst; /* the request rate, as sg_state_rate_check */
    long max_execs;           /* executions in flight, as sg_state_exec_acquire */
    const char *token;        /* the slot's token */
    long lease_s;             /* the slot's lease */
    const char *day;          /* the day's quota, as sg_state_quota_reserve */
    long execs_per_day;
    double seconds_per_day;
} sg_admit_args_t;
typedef struct {
    int available;           /* 0: nothing was checked (the caller falls back) */
    sg_rate_result_t rate;   /* !rate.allowed: refused, nothing else taken */
    int slot;                /* 1: the slot is held (release it); 0: refused at max_execs */
    long in_flight;          /* executions in flight after the call */
    sg_quota_status_t quota; /* with slot: OK (counted), EXECS / SECONDS (refused: the slot
                              * was given back) or UNSEEDED (the slot is held; seed, then
                              * sg_state_quota_reserve) */
    int64_t execs;
    double seconds;
} sg_admit_result_t;
typedef void (*sg_admit_cb)(void *data, const sg_admit_result_t *r);
/* Atomically, each step only past the one before: the tenant's rate (one
 * request), one of its execution slots, one of the day's executions. The
 * Redis backend does it in one script (one round trip); the same as the
 * three calls in a row, with a quota refusal giving the slot back. */
void sg_state_exec_admit(sg_state_t *st, int64_t tenant, const sg_admit_args_t *a, sg_admit_cb cb, void *data);

/* A session create's admission: the tenant's rate (one request), then, only
 * past it, sg_state_session_reserve's slot (max, token), atomically; the
 * result's slot says whether the reservation was made, in_flight the
 * tenant's live sessions + reservations. The Redis backend: one script. */
void sg_state_session_admit(sg_state_t *st, int64_t tenant, long rate_per_min, long burst, long max, const char *token,
                            sg_admit_cb cb, void *data);

/* ---- an execution's end: slot, session, seconds in one call ---- */
typedef struct {
    const char *token; /* the execution slot to give back (sg_state_exec_release) */
    const char *sid;   /* NULL or "": no session to touch; else as sg_state_session_touch */
    int64_t now;
    long idle_timeout;
    int add_exec;
    const char *day; /* the day's seconds (sg_state_quota_add_seconds) ... */
    double seconds;  /* ... unless < 0 */
} sg_finish_args_t;
/* The three updates at once, nobody waiting on them (the Redis backend:
 * one script, one round trip); cb (may be NULL) gets ok = 1 when the
 * backend applied them. */
void sg_state_exec_finish(sg_state_t *st, int64_t tenant, const sg_finish_args_t *a, sg_state_cb cb, void *data);

/* ---- solo (the Redis backend) ----
 * While it is the only gateway on its Redis, a gateway that asks admits
 * executions from its own copy of each tenant's admission keys, without
 * waiting for Redis (redis.c, "solo"); any other gateway beating on the
 * same Redis ends it. Off until asked; no effect on another backend. */
void sg_state_redis_solo(sg_state_t *st, int want);
/* The Redis backend's counters (all 0 for another backend); reading them
 * changes nothing. */
typedef struct {
    int holds;               /* solo: admits from its copy now */
    uint64_t local_admits;   /* solo: executions so admitted */
    uint64_t local_refusals; /* solo: calls refused from the copy (the rate, a cap, the day's quota) */
    uint64_t mismatches;     /* solo: answers of Redis other than the copy's (a copy dropped each time) */
    uint64_t writes;         /* writes to Redis's socket, solo or not (each may wake Redis) */
    uint64_t applies;        /* solo: calls that took the copies' decisions to Redis, one per tenant */
} sg_state_redis_stats_t;
void sg_state_redis_stats(sg_state_t *st, sg_state_redis_stats_t *out);

#endif
