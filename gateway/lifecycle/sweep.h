/*
 * sweep.h — sandboxes a proxy still runs for sessions the ledger has
 * closed. A session is closed without its proxy's word when the proxy is
 * gone past the grace (placement.h, 410 session_lost); a proxy that comes
 * back later (restarted, its host back) re-adopts what it had, and those
 * sandboxes would run on for nobody. Every ten reaper rounds, each proxy in
 * placement is asked for its sessions (GET /sessions), and each one whose
 * SQLite row is closed is removed there (DELETE /sessions/{id}). Only closed
 * rows: a session whose row is not written yet (a create under way on
 * another gateway) is never touched.
 *
 * Loop thread.
 */
#ifndef SANDGATE_GW_SWEEP_H
#define SANDGATE_GW_SWEEP_H

void sg_gw_sweep_proxies(void);

#endif
