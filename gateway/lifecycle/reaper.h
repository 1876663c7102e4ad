/*
 * reaper.h — the gateway's periodic round, every reaper_interval_ms: closes
 * sessions past their idle or lifetime deadline (close.h), tries again the
 * closes the proxy did not confirm; every five rounds counts the live
 * sessions (metrics), every ten rebuilds the live state from the ledger
 * (rebuild.h) and purges a tenant marked for deletion (purge.h).
 *
 * Loop thread.
 */
#ifndef SANDGATE_GW_REAPER_H
#define SANDGATE_GW_REAPER_H

void sg_gw_reaper_start(void);

#endif
