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
    t->quota = quota_pttl_ms != -2;
    snprintf(t->day, sizeof(t->day), "%s", day);
    t->execs = execs;
    t->seconds = seconds;
    t->quota_till_ms = quota_pttl_ms == -1 ? INT64_MAX : mono_ms + quota_pttl_ms - QUOTA_EDGE_MS;
}

static sg_solo_slot_t *find_slot(sg_solo_tenant_t *t, const char *token)
{
    for (size_t i = 0; i < t->nslots; i++)
        if (strcmp(t->slots[i].token, token) == 0)
            return &t->slots[i];
    return NULL;
}

int sg_solo_add_slot(sg_solo_tenant_t *t, const char *token, int64_t until_s)
{
    sg_solo_slot_t *s = find_slot(t, token);
    if (strlen(token) >= sizeof(s->token))
        return -1;
    if (s == NULL) {
        if (t->nslots == t->cap) {
            t->cap = t->cap ? t->cap * 2 : 8;
            t->slots = sg_xrealloc(t->slots, t->cap * sizeof(*t->slots));
        }
        s = &t->slots[t->nslots++];
        snprintf(s->token, sizeof(s->token), "%s", token);
    }
    s->until_s = until_s;
    return 0;
}

/* ZREMRANGEBYSCORE -inf now_s, then ZCARD. */
static long prune(sg_solo_tenant_t *t, int64_t now_s)
{
    size_t i = 0;
    while (i < t->nslots) {
        if (t->slots[i].until_s <= now_s)
            t->slots[i] = t->slots[--t->nslots];
        else
            i++;
    }
    return (long)t->nslots;
}

/* RATE_STEP: 1 allowed with the new arrival time in *nxt. */
static int rate_step(const sg_solo_tenant_t *t, int64_t now_ms, int64_t interval_ms, long burst, int64_t *nxt)
{
    int64_t tat = t->tat_ms > now_ms ? t->tat_ms : now_ms;
    *nxt = tat + interval_ms;
    return !(now_ms < *nxt - interval_ms * (int64_t)burst);
}

/* The quota step, certain only well inside the day's limits. */
static int quota_certain(const sg_solo_tenant_t *t, const sg_solo_admit_t *a)
{
    if (!t->quota || strcmp(t->day, a->day) != 0 || a->mono_ms >= t->quota_till_ms)
        return 0;
    if (t->execs >= a->execs_per_day)
        return 0;
    /* Redis sums the seconds in long double and compares its text: not
     * trusted within a rounding of the limit */
    double edge = 1e-9 * fmax(1.0, fabs(a->seconds_per_day));
    return t->seconds < a->seconds_per_day - edge;
}

int sg_solo_admit(sg_solo_tenant_t *t, const sg_solo_admit_t *a, int64_t *stored_tat, long *in_flight, int64_t *execs,
                  double *seconds)
{
    int64_t nxt = 0;
    if (a->interval_ms > 0 && !rate_step(t, a->now_ms, a->interval_ms, a->burst, &nxt))
        return 0;
    if (strlen(a->token) >= sizeof(t->slots[0].token))
        return 0;
    /* the slot step, counted without pruning yet */
    long n = 0;
    for (size_t i = 0; i < t->nslots; i++)
        n += t->slots[i].until_s > a->now_s;
    if (find_slot(t, a->token) == NULL && n >= a->max_execs)
        return 0;
    if (!quota_certain(t, a))
        return 0;
    /* certain: apply all three */
    *stored_tat = a->interval_ms > 0 ? t->tat_ms : 0;
    if (a->interval_ms > 0)
        t->tat_ms = nxt;
    prune(t, a->now_s);
    sg_solo_add_slot(t, a->token, a->until_s);
    *in_flight = (long)t->nslots;
    t->execs++;
    *execs = t->execs;
    *seconds = t->seconds;
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

int sg_solo_release(sg_solo_tenant_t *t, const char *token)
{
    sg_solo_slot_t *s = find_slot(t, token);
    if (s == NULL)
        return 0;
    *s = t->slots[--t->nslots];
    return 1;
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
}
