#include "throttle.h"
#include "util.h"

#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 4096 /* a power of two */
#define PROBE 8

typedef struct {
    uint8_t key[17]; /* family byte, then the address (or its /64) */
    int used;
    double window_start;
    double blocked_until;
    double last;
    long failures;
} slot_t;

struct sg_throttle {
    long max_failures;
    double window_s;
    slot_t slots[SLOTS];
};

sg_throttle_t *sg_throttle_create(long max_failures, double window_s)
{
    sg_throttle_t *t = sg_xcalloc(1, sizeof(*t));
    t->max_failures = max_failures;
    t->window_s = window_s;
    return t;
}

void sg_throttle_destroy(sg_throttle_t *t)
{
    free(t);
}

static void key_of(const struct sockaddr *sa, uint8_t key[17])
{
    memset(key, 0, 17);
    if (sa != NULL && sa->sa_family == AF_INET) {
        key[0] = 4;
        memcpy(key + 1, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa != NULL && sa->sa_family == AF_INET6) {
        key[0] = 6;
        memcpy(key + 1, &((const struct sockaddr_in6 *)sa)->sin6_addr, 8);
    }
}

static size_t hash_of(const uint8_t key[17])
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (int i = 0; i < 17; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    return (size_t)(h & (SLOTS - 1));
}

/* The slot of key; with create, a new one (the stalest of its bucket) when
 * none is found. */
static slot_t *find(sg_throttle_t *t, const struct sockaddr *sa, int create, double now)
{
    uint8_t key[17];
    slot_t *victim = NULL;
    key_of(sa, key);
    size_t h = hash_of(key);
    for (int i = 0; i < PROBE; i++) {
        slot_t *s = &t->slots[(h + (size_t)i) & (SLOTS - 1)];
        if (s->used && memcmp(s->key, key, sizeof(key)) == 0)
            return s;
        if (victim == NULL || !s->used || (victim->used && s->last < victim->last))
            victim = s;
    }
    if (!create)
        return NULL;
    memset(victim, 0, sizeof(*victim));
    memcpy(victim->key, key, sizeof(key));
    victim->used = 1;
    victim->window_start = now;
    return victim;
}

double sg_throttle_wait(sg_throttle_t *t, const struct sockaddr *sa, double now)
{
    slot_t *s = find(t, sa, 0, now);
    return s != NULL && s->blocked_until > now ? s->blocked_until - now : 0;
}

void sg_throttle_fail(sg_throttle_t *t, const struct sockaddr *sa, double now)
{
    slot_t *s = find(t, sa, 1, now);
    if (now - s->window_start >= t->window_s) {
        s->window_start = now;
        s->failures = 0;
    }
    s->last = now;
    if (++s->failures >= t->max_failures)
        s->blocked_until = now + t->window_s;
}
