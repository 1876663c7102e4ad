/*
 * close.h — closing a session everywhere, for a reason ("deleted", "idle",
 * "lifetime", "admin", "proxy_lost"): from DELETE, the reaper, the admin
 * API and a proxy that lost the session.
 *
 * The proxy removes the container first, or confirms it has none (404,
 * code no_such_session); only then is the session taken out of the live
 * state (its slot freed) and closed in the ledger. A removal the proxy does
 * not confirm is tried again from the reaper (1 s, 2 s, ... 30 s apart)
 * until it is; the session keeps its slot meanwhile.
 *
 * Loop thread.
 */
#ifndef SANDGATE_GW_CLOSE_H
#define SANDGATE_GW_CLOSE_H

#include <stddef.h>
#include <stdint.h>

/* done (may be NULL) runs with closed = 1 once the close is on record, or
 * with closed = 0 when the proxy did not confirm this attempt (the close
 * goes on in the background; done is not called again). done runs later,
 * never before this returns. Asked again while one is under way, it joins
 * that one (a close waiting for its retry is tried at once). */
void sg_gw_close_session(const char *sid, int64_t tenant, const char *reason, void (*done)(void *data, int closed),
                         void *data);
/* The same when the caller knows the session's proxy (its record's,
 * placement.h; NULL: looked up in the record first, unless one proxy is
 * configured). A session whose proxy is no longer configured, or out of
 * placement past the grace, is closed without its confirmation: that
 * proxy's containers are its own to remove when it comes back. */
void sg_gw_close_session_at(const char *sid, int64_t tenant, const char *proxy, const char *reason,
                            void (*done)(void *data, int closed), void *data);
/* Closes under way or waiting for a retry (metrics, tests). */
size_t sg_gw_closes_pending(void);
/* 1 if a close of sid is under way or waiting for its retry. */
int sg_gw_close_under_way(const char *sid);
/* From the reaper: tries again the closes whose proxy removal failed, once
 * their delay is over. Calls no waiter from here. */
void sg_gw_closes_retry(void);

#endif
