/*
 * solo.h — private to state/redis*.c: what a gateway that is the only one
 * on its Redis keeps of each tenant's admission keys (its rate key, its
 * executions in flight, its day's quota, its sessions), so that an
 * execution or a session is admitted without waiting for a round trip
 * (redis.c, "solo").
 *
 * A mirror holds exactly what the tenant's four keys will hold once every
 * call this gateway has sent is applied, in order, on its one connection.
 * sg_solo_admit decides as SCRIPT_EXEC_ADMIT would, on the same arguments
 * (sg_solo_session_admit as SCRIPT_SESSION_ADMIT),
 * and only when the answer is certain and an admission: every other
 * refusal, and every case near an edge (a quota key near its expiry,
 * seconds within a rounding of the day's limit, another day), is left to
 * Redis. A refusal by the rate step is certain too, and the scripts change
 * nothing then (RATE_STEP refuses before any write): sg_solo_rate_refused
 * says so, and Redis is not asked at all. So is a refusal at the cap of
 * executions in flight (sg_solo_admit_full), which the script makes after
 * its rate step, a refusal by the day's quota (sg_solo_admit_quota),
 * which it makes past the slot step, and a session's refusal at the cap
 * (sg_solo_session_full). Pure logic: no I/O, no clock.
 */
#ifndef SANDGATE_STATE_SOLO_H
#define SANDGATE_STATE_SOLO_H

#include <stddef.h>
#include <stdint.h>

#include "state.h"

typedef struct {
    char token[65];
    int64_t until_s; /* a slot whose until_s <= now_s is gone (ZREMRANGEBYSCORE -inf now) */
} sg_solo_slot_t;

typedef struct {
    int64_t tenant;
    int64_t tat_ms; /* the rate key's stored arrival time (0: none) */
    sg_solo_slot_t *slots;
    size_t nslots, cap;
    int quota;             /* the day's key exists */
    char day[16];          /* ... for this day */
    int64_t execs;         /* its "execs" */
    double seconds;        /* its "seconds" */
    int64_t quota_till_ms; /* trusted until then (monotonic ms), INT64_MAX: no expiry */
    /* the tenant's sessions set: "pending:<token>" reservations and session
     * ids, each with its score (gone once until_s <= now_s) */
    sg_solo_slot_t *sessions;
    size_t nsessions, scap;
} sg_solo_tenant_t;

/* What Redis held, as SCRIPT_SOLO_SEED answers it: the rate key ("0" when
 * absent), the quota key's PTTL (-2: absent), its execs and seconds, and
 * the in-flight set's members with their scores. mono_ms: the monotonic
 * clock when the answer came. */
void sg_solo_load(sg_solo_tenant_t *t, int64_t tat_ms, int64_t quota_pttl_ms, const char *day, int64_t execs,
                  double seconds, int64_t mono_ms);
int sg_solo_add_slot(sg_solo_tenant_t *t, const char *token, int64_t until_s);
/* A member of the sessions set (ZADD: its score replaced if it is there):
 * the seed's, a session committed. -1: a member too long (nothing added). */
int sg_solo_add_session(sg_solo_tenant_t *t, const char *member, int64_t until_s);
/* ZREM from the sessions set: 1 if it was there. */
int sg_solo_remove_session(sg_solo_tenant_t *t, const char *member);

/* SCRIPT_EXEC_ADMIT's arguments. */
typedef struct {
    int64_t now_ms, now_s, mono_ms;
    int64_t interval_ms; /* 0: no rate */
    long burst;
    long max_execs;
    const char *token;
    int64_t until_s;
    const char *day;
    long execs_per_day;
    double seconds_per_day;
} sg_solo_admit_t;

/* 1: admitted, the mirror updated as the script will update Redis, and
 * *stored_tat / *in_flight / *execs / *seconds as the script will answer;
 * 0: not certain, or a refusal — nothing changed, ask Redis. */
int sg_solo_admit(sg_solo_tenant_t *t, const sg_solo_admit_t *a, int64_t *stored_tat, long *in_flight, int64_t *execs,
                  double *seconds);
/* 1: SCRIPT_EXEC_ADMIT refuses at the cap for certain (the rate step
 * allows, the token holds no live slot, max_execs live slots are held):
 * the mirror updated as the script will update Redis (the rate step, the
 * lapsed slots gone), *stored_tat and *in_flight as it will answer
 * ({1, tat, 0, in flight, 0, 0, "0"}); 0: not that, nothing changed. */
int sg_solo_admit_full(sg_solo_tenant_t *t, const sg_solo_admit_t *a, int64_t *stored_tat, long *in_flight);
/* 1: SCRIPT_EXEC_ADMIT refuses by the day's quota for certain (the rate
 * and slot steps allow, the day's key is known and past its executions,
 * *status SG_QUOTA_EXECS, or past its seconds beyond a rounding,
 * SG_QUOTA_SECONDS): the mirror updated as the script will update Redis
 * (the rate step, the lapsed slots gone, the slot it takes given back), and
 * the answer as it will give it ({1, tat, 1, in flight, status, execs,
 * seconds}); 0: not that, nothing changed. */
int sg_solo_admit_quota(sg_solo_tenant_t *t, const sg_solo_admit_t *a, int64_t *stored_tat, long *in_flight,
                        int *status, int64_t *execs, double *seconds);
/* SCRIPT_SESSION_ADMIT's arguments. */
typedef struct {
    int64_t now_ms, now_s;
    int64_t interval_ms; /* 0: no rate */
    long burst;
    long max;           /* live sessions */
    const char *member; /* "pending:<token>" */
    int64_t until_s;    /* the reservation's expiry */
} sg_solo_session_admit_t;

/* 1: admitted (the rate step and the reservation applied, *stored_tat and
 * *count as the script will answer); 0: a refusal or not certain, nothing
 * changed. */
int sg_solo_session_admit(sg_solo_tenant_t *t, const sg_solo_session_admit_t *a, int64_t *stored_tat, long *count);
/* 1: SCRIPT_SESSION_ADMIT refuses at the cap for certain (the rate step
 * allows, the member is not in the set, max live members are): the rate
 * step and the pruning applied, *stored_tat and *count as the script will
 * answer ({1, tat, 0, count}); 0: not that, nothing changed. */
int sg_solo_session_full(sg_solo_tenant_t *t, const sg_solo_session_admit_t *a, int64_t *stored_tat, long *count);
/* SCRIPT_RATE on the mirror: 1 allowed (applied, *stored_tat as the script
 * answers), 0 refused or not certain (nothing changed). */
int sg_solo_rate(sg_solo_tenant_t *t, int64_t now_ms, int64_t interval_ms, long burst, int64_t *stored_tat);
/* 1 when the rate step refuses at now_ms for certain (interval_ms > 0):
 * every admitting script then answers its refusal with the stored tat
 * (*stored_tat) and changes nothing; 0 when it allows, or there is no rate.
 * The mirror is not changed. */
int sg_solo_rate_refused(const sg_solo_tenant_t *t, int64_t now_ms, int64_t interval_ms, long burst,
                         int64_t *stored_tat);
/* The tenant's executions in flight at now_s (ZCARD after
 * ZREMRANGEBYSCORE -inf now_s). */
long sg_solo_in_flight(const sg_solo_tenant_t *t, int64_t now_s);
/* An execution's slot given back (ZREM): 1 if it was there. */
int sg_solo_release(sg_solo_tenant_t *t, const char *token);
/* The day's seconds (HINCRBYFLOAT when the key exists). */
void sg_solo_add_seconds(sg_solo_tenant_t *t, const char *day, double seconds);
void sg_solo_free(sg_solo_tenant_t *t);

#endif
