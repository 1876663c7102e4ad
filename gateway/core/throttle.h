/*
 * throttle.h — failures counted per client address in a fixed window, for
 * the admin API: past max_failures in window_s the address is refused
 * (429 with Retry-After) until the window that saw the last failure ends.
 *
 * IPv4 addresses count one by one; IPv6 ones by their /64 (one host
 * usually holds a whole /64). The table has a fixed number of slots: an
 * unknown address takes the stalest slot of its bucket, so memory stays
 * bounded whatever the number of addresses (a flood of addresses can push
 * an old entry out, not grow the table).
 *
 * Loop thread only (no locking).
 */
#ifndef SANDGATE_THROTTLE_H
#define SANDGATE_THROTTLE_H

#include <stddef.h>
#include <sys/socket.h>

typedef struct sg_throttle sg_throttle_t;

sg_throttle_t *sg_throttle_create(long max_failures, double window_s);
void sg_throttle_destroy(sg_throttle_t *t);
/* Seconds the address must still wait (> 0), or 0 if it may try now. A NULL
 * or unknown-family address counts as one shared address. */
double sg_throttle_wait(sg_throttle_t *t, const struct sockaddr *sa, double now);
/* Counts one failure of the address. */
void sg_throttle_fail(sg_throttle_t *t, const struct sockaddr *sa, double now);

#endif
