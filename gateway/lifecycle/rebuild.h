/*
 * rebuild.h — brings the live-session state back in line with SQLite: an
 * open session the state does not know (the gateway restarted without
 * Redis, or Redis restarted empty) is put back, with a full idle period and
 * its lifetime deadline, so that it is reaped and counted again. Runs at
 * start and every ten reaper rounds.
 *
 * Loop thread.
 */
#ifndef SANDGATE_GW_REBUILD_H
#define SANDGATE_GW_REBUILD_H

#include "store.h"

/* In the background: the ledger read on a DB thread, the state told from
 * the loop. */
void sg_gw_rebuild_sessions(void);
/* The same at start, before requests are taken: on the calling thread with
 * st, driving the loop until the state has answered (or timeout_ms).
 * 0, or -1 if some call had not answered by then. */
int sg_gw_rebuild_sessions_now(sg_store_t *st, int timeout_ms);

#endif
