/*
 * clock.h — the gateway's clocks: deadlines in whole seconds and the UTC
 * day that daily quotas count by.
 */
#ifndef SANDGATE_GW_CLOCK_H
#define SANDGATE_GW_CLOCK_H

#include <stdint.h>

/* The wall clock in whole seconds, rounded up: deadlines computed from it
 * are never early. */
int64_t sg_gw_now_up(void);
/* "yyyymmdd" of a unix time, UTC. */
void sg_gw_day(int64_t unix_s, char out[9]);

#endif
