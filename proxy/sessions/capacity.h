/*
 * capacity.h — the proxy's cap on containers of every kind
 * (SANDGATE_MAX_CONTAINERS): sessions, one-shot executions, the warm pool
 * and library installers. A slot is taken before a container is created
 * and given back once it is removed (or its creation failed), so Docker
 * never holds more of this proxy's containers than the cap, whatever
 * arrives at once. Past it a request is answered 503 no_capacity with
 * Retry-After.
 *
 * Thread-safe (one atomic counter): taken on the loop, given back on the
 * loop or on a worker.
 */
#ifndef SANDGATE_CAPACITY_H
#define SANDGATE_CAPACITY_H

/* What a refused request is told to wait, seconds (Retry-After). */
#define SG_CAPACITY_RETRY_AFTER_S 1

void sg_capacity_init(long max);
/* 0: a slot is taken; -1: at the cap. */
int sg_capacity_take(void);
/* Takes a slot only while at least `headroom` would remain free (the warm
 * pool fills with this, so that it never takes the last slots requests
 * need). 0 or -1. */
int sg_capacity_take_spare(long headroom);
void sg_capacity_give(void);
long sg_capacity_used(void);
long sg_capacity_max(void);

#endif
