/*
 * solo.c — a tenant's admission keys as this gateway alone changes them
 * (solo.h). Each step is SCRIPT_EXEC_ADMIT's (redis_scripts.c), decided
 * before anything is changed, so that a step that is not certain leaves
 * the mirror as it was.
 */
#include "solo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* A quota key is trusted until this long before Redis would expire it. */
#define QUOTA_EDGE_MS 5000

void sg_solo_load(sg_solo_tenant_t *t, int64_t tat_ms, int64_t quota_pttl_ms, const char *day, int64_t execs,
                  double seconds, int64_t mono_ms)
{
    t->tat_ms = tat_ms;
    t->nslots = 0;
    t->nsessions = 0;
    t->quota = quota_pttl_ms != -2;
    snprintf(t->day, sizeof(t->day), "%s", day);
    t->execs = execs;
    t->seconds = seconds;
    t->quota_till_ms = quota_pttl_ms == -1 ? INT64_MAX : mono_ms + quota_pttl_ms - QUOTA_EDGE_MS;
}

/* A sorted set's members with their scores (the in-flight set, the
 * sessions set), in no order. */
static sg_solo_slot_t *set_find(sg_solo_slot_t *v, size_t n, const char *member)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].token, member) == 0)
            return &v[i];
    return NULL;
}

/* ZADD: -1 for a member too long. */
static int set_add(sg_solo_slot_t **v, size_t *n, size_t *cap, const char *member, int64_t until_s)
{
    sg_solo_slot_t *s = set_find(*v, *n, member);
    if (strlen(member) >= sizeof(s->token))
        return -1;
    if (s == NULL) {
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 8;
            *v = sg_xrealloc(*v, *cap * sizeof(**v));
        }
        s = &(*v)[(*n)++];
        snprintf(s->token, sizeof(s->token), "%s", member);
    }
    s->until_s = until_s;
    return 0;
}

static int set_remove(sg_solo_slot_t *v, size_t *n, const char *member)
{
    sg_solo_slot_t *s = set_find(v, *n, member);
    if (s == NULL)
        return 0;
    *s = v[--*n];
    return 1;
}

/* ZCOUNT (now_s, +inf): ZCARD after ZREMRANGEBYSCORE -inf now_s. */
static long set_live(const sg_solo_slot_t *v, size_t n, int64_t now_s)
{
    long live = 0;
    for (size_t i = 0; i < n; i++)
        live += v[i].until_s > now_s;
    return live;
}

/* ZREMRANGEBYSCORE -inf now_s. */
static void set_prune(sg_solo_slot_t *v, size_t *n, int64_t now_s)
{
    size_t i = 0;
    while (i < *n) {
        if (v[i].until_s <= now_s)
            v[i] = v[--*n];
        else
            i++;
    }
}

static sg_solo_slot_t *find_slot(sg_solo_tenant_t *t, const char *token)
{
    return set_find(t->slots, t->nslots, token);
}

/* ZSCORE after ZREMRANGEBYSCORE -inf now_s: the token holds a live slot. */
static int holds_live(sg_solo_tenant_t *t, const char *token, int64_t now_s)
{
    const sg_solo_slot_t *s = find_slot(t, token);
    return s != NULL && s->until_s > now_s;
}

int sg_solo_add_slot(sg_solo_tenant_t *t, const char *token, int64_t until_s)
{
    return set_add(&t->slots, &t->nslots, &t->cap, token, until_s);
}

int sg_solo_add_session(sg_solo_tenant_t *t, const char *member, int64_t until_s)
{
    return set_add(&t->sessions, &t->nsessions, &t->scap, member, until_s);
}

int sg_solo_remove_session(sg_solo_tenant_t *t, const char *member)
{
    return set_remove(t->sessions, &t->nsessions, member);
}

/* RATE_STEP: 1 allowed with the new arrival time in *nxt. */
static int rate_step(const sg_solo_tenant_t *t, int64_t now_ms, int64_t interval_ms, long burst, int64_t *nxt)
{
    int64_t tat = t->tat_ms > now_ms ? t->tat_ms : now_ms;
    *nxt = tat + interval_ms;
    return !(now_ms < *nxt - interval_ms * (int64_t)burst);
}

/* What every admission checks first: the rate step allows (*nxt, when
 * there is a rate), and member fits the copy's sets (a longer one is left
 * to Redis). */
static int step_allows(const sg_solo_tenant_t *t, int64_t now_ms, int64_t interval_ms, long burst, const char *member,
                       int64_t *nxt)
{
    if (interval_ms > 0 && !rate_step(t, now_ms, interval_ms, burst, nxt))
        return 0;
    return strlen(member) < sizeof(t->slots[0].token);
}

/* The rate step taken (nxt from rate_step): the stored arrival time the
 * script answers (0 without a rate). */
static int64_t take_rate_step(sg_solo_tenant_t *t, int64_t interval_ms, int64_t nxt)
{
    int64_t stored = interval_ms > 0 ? t->tat_ms : 0;
    if (interval_ms > 0)
        t->tat_ms = nxt;
    return stored;
}

/* The quota step's answer when it is certain: SG_QUOTA_OK well inside the
 * day's limits, SG_QUOTA_EXECS or SG_QUOTA_SECONDS past them; -1 when the
 * day's key is not known for certain, or the seconds are within a rounding
 * of their limit (Redis sums them in long double and compares its text). */
static int quota_step(const sg_solo_tenant_t *t, const sg_solo_admit_t *a)
{
    if (!t->quota || strcmp(t->day, a->day) != 0 || a->mono_ms >= t->quota_till_ms)
        return -1;
    if (t->execs >= a->execs_per_day)
        return SG_QUOTA_EXECS;
    double edge = 1e-9 * fmax(1.0, fabs(a->seconds_per_day));
    if (t->seconds < a->seconds_per_day - edge)
        return SG_QUOTA_OK;
    return t->seconds >= a->seconds_per_day + edge ? SG_QUOTA_SECONDS : -1;
}

/* The slot step passes: the token holds a live slot, or fewer than
 * max_execs are live. */
static int slot_step(sg_solo_tenant_t *t, const sg_solo_admit_t *a)
{
    return holds_live(t, a->token, a->now_s) || set_live(t->slots, t->nslots, a->now_s) < a->max_execs;
}

int sg_solo_admit(sg_solo_tenant_t *t, const sg_solo_admit_t *a, int64_t *stored_tat, long *in_flight, int64_t *execs,
                  double *seconds)
{
    int64_t nxt = 0;
    if (!step_allows(t, a->now_ms, a->interval_ms, a->burst, a->token, &nxt))
        return 0;
    /* the slot step, counted without pruning yet (a lapsed slot of the
     * token's own is pruned first there, so it does not count as held) */
    if (!slot_step(t, a) || quota_step(t, a) != SG_QUOTA_OK)
        return 0;
    /* certain: apply all three */
    *stored_tat = take_rate_step(t, a->interval_ms, nxt);
    set_prune(t->slots, &t->nslots, a->now_s);
    sg_solo_add_slot(t, a->token, a->until_s);
    *in_flight = (long)t->nslots;
    t->execs++;
    *execs = t->execs;
    *seconds = t->seconds;
    return 1;
}

int sg_solo_admit_full(sg_solo_tenant_t *t, const sg_solo_admit_t *a, int64_t *stored_tat, long *in_flight)
{
    int64_t nxt = 0;
    if (!step_allows(t, a->now_ms, a->interval_ms, a->burst, a->token, &nxt))
        return 0;
    /* the script drops the lapsed slots first, then looks the token up */
    if (slot_step(t, a))
        return 0;
    *stored_tat = take_rate_step(t, a->interval_ms, nxt);
    set_prune(t->slots, &t->nslots, a->now_s);
    *in_flight = (long)t->nslots;
    return 1;
}

int sg_solo_admit_quota(sg_solo_tenant_t *t, const sg_solo_admit_t *a, int64_t *stored_tat, long *in_flight,
                        int *status, int64_t *execs, double *seconds)
{
    int64_t nxt = 0;
    if (!step_allows(t, a->now_ms, a->interval_ms, a->burst, a->token, &nxt) || !slot_step(t, a))
        return 0;
    int q = quota_step(t, a);
    if (q != SG_QUOTA_EXECS && q != SG_QUOTA_SECONDS)
        return 0;
    /* the slot taken (ZADD) and given back (ZREM): the token holds none after */
    *stored_tat = take_rate_step(t, a->interval_ms, nxt);
    set_prune(t->slots, &t->nslots, a->now_s);
    set_remove(t->slots, &t->nslots, a->token);
    *in_flight = (long)t->nslots;
    *status = q;
    *execs = t->execs;
    *seconds = t->seconds;
    return 1;
}

int sg_solo_session_admit(sg_solo_tenant_t *t, const sg_solo_session_admit_t *a, int64_t *stored_tat, long *count)
{
    int64_t nxt = 0;
    if (!step_allows(t, a->now_ms, a->interval_ms, a->burst, a->member, &nxt))
        return 0;
    /* the script adds the member only below the cap, whether it is there
     * or not (a member already there would not count twice: left to Redis) */
    if (set_find(t->sessions, t->nsessions, a->member) != NULL ||
        set_live(t->sessions, t->nsessions, a->now_s) >= a->max)
        return 0;
    *stored_tat = take_rate_step(t, a->interval_ms, nxt);
    set_prune(t->sessions, &t->nsessions, a->now_s);
    sg_solo_add_session(t, a->member, a->until_s);
    *count = (long)t->nsessions;
    return 1;
}

int sg_solo_session_full(sg_solo_tenant_t *t, const sg_solo_session_admit_t *a, int64_t *stored_tat, long *count)
{
    int64_t nxt = 0;
    if (!step_allows(t, a->now_ms, a->interval_ms, a->burst, a->member, &nxt))
        return 0;
    if (set_find(t->sessions, t->nsessions, a->member) != NULL ||
        set_live(t->sessions, t->nsessions, a->now_s) < a->max)
        return 0;
    *stored_tat = take_rate_step(t, a->interval_ms, nxt);
    set_prune(t->sessions, &t->nsessions, a->now_s);
    *count = (long)t->nsessions;
    return 1;
}

int sg_solo_rate(sg_solo_tenant_t *t, int64_t now_ms, int64_t interval_ms, long burst, int64_t *stored_tat)
{
    int64_t nxt;
    if (interval_ms <= 0 || !rate_step(t, now_ms, interval_ms, burst, &nxt))
        return 0;
    *stored_tat = t->tat_ms;
    t->tat_ms = nxt;
    return 1;
}

int sg_solo_rate_refused(const sg_solo_tenant_t *t, int64_t now_ms, int64_t interval_ms, long burst,
                         int64_t *stored_tat)
{
    int64_t nxt;
    if (interval_ms <= 0 || rate_step(t, now_ms, interval_ms, burst, &nxt))
        return 0;
    *stored_tat = t->tat_ms;
    return 1;
}

long sg_solo_in_flight(const sg_solo_tenant_t *t, int64_t now_s)
{
    return set_live(t->slots, t->nslots, now_s);
}

int sg_solo_release(sg_solo_tenant_t *t, const char *token)
{
    return set_remove(t->slots, &t->nslots, token);
}

void sg_solo_add_seconds(sg_solo_tenant_t *t, const char *day, double seconds)
{
    if (t->quota && strcmp(t->day, day) == 0)
        t->seconds += seconds;
}

void sg_solo_free(sg_solo_tenant_t *t)
{
    free(t->slots);
    t->slots = NULL;
    t->nslots = t->cap = 0;
    free(t->sessions);
    t->sessions = NULL;
    t->nsessions = t->scap = 0;
}
