/*
 * placement.h — the proxies a gateway talks to (SANDGATE_PROXY_URL, a
 * comma-separated list, one proxy per Docker engine), their health, and
 * where a new session goes.
 *
 * Each proxy is named by its URL as configured, normalised (scheme and host
 * lower-cased, no trailing slash): that name is what a session's records
 * keep (SQLite sessions.proxy, the Redis session hash) and what every later
 * call for the session is routed by. Each has its own upstream (upstream.h).
 *
 * Health: every SG_PROXY_CHECK_MS a GET /health (short timeout) per proxy;
 * after SG_PROXY_DOWN_AFTER failures in a row a proxy is out of placement,
 * and back in at its first answer. Its last answer's "load" is kept for
 * placement. A session whose proxy is out of placement waits for it at
 * most the grace (SANDGATE_PROXY_GRACE_MS, at most 5000), counted from when
 * it went out; past that its session is lost (sg_proxy_lost).
 *
 * With one proxy configured, nothing of this is on the request path: every
 * call goes to it, as before placement existed.
 *
 * Loop thread only.
 */
#ifndef SANDGATE_GW_PLACEMENT_H
#define SANDGATE_GW_PLACEMENT_H

#include <h2o.h>
#include <stddef.h>
#include <stdint.h>

#include "upstream.h"

#define SG_PROXY_URL_MAX 256
#define SG_PROXY_MAX 64
#define SG_PROXY_CHECK_MS 1000
#define SG_PROXY_DOWN_AFTER 3
#define SG_PROXY_GRACE_MAX_MS 5000
#define SG_PROXY_LANGS_MAX 16

typedef struct {
    char url[SG_PROXY_URL_MAX]; /* normalised, as session records keep it */
    sg_upstream_t *up;
    int in_placement;      /* answering: new sessions may go there */
    unsigned fails;        /* failed checks in a row */
    uint64_t out_since_ms; /* when it left placement (sg_now_ms), 0 while in */
    int reported;          /* a load was reported once at least */
    /* its last health answer's "load" (docs/proxy-api.md), plus the sessions
     * placed on it since */
    long sessions, containers, max_containers;
    int64_t memory_committed;
    double cpu_committed;
    size_t nlangs;
    struct {
        char lang[32];
        long free;
    } pool_free[SG_PROXY_LANGS_MAX];
    int docker_ok;

    /* private */
    sg_upstream_req_t *_check;
} sg_proxy_t;

/* Parses list (comma-separated URLs, spaces around them ignored; at least
 * one, at most SG_PROXY_MAX, no duplicates once normalised) and creates an
 * upstream per proxy. grace_ms is capped at SG_PROXY_GRACE_MAX_MS. -1 and
 * err on a bad list. */
int sg_proxies_init(h2o_loop_t *loop, const char *list, size_t max_reply_bytes, long grace_ms, char *err,
                    size_t errlen);
/* Starts the health checks (a timer on the loop). */
void sg_proxies_start_checks(void);
/* Stops them (the upstreams stay; they go with the process). */
void sg_proxies_stop_checks(void);
/* Stops the checks and frees every proxy and its upstream (tests; run the
 * loop once afterwards, as after sg_upstream_destroy). */
void sg_proxies_free(void);

size_t sg_proxies_count(void);
sg_proxy_t *sg_proxies_at(size_t i);
long sg_proxies_grace_ms(void);
/* The proxy named url; "" or NULL (a session recorded before placement):
 * the first configured. NULL when no configured proxy has that name. */
sg_proxy_t *sg_proxies_find(const char *url);
/* Writes the normalised form of url (len bytes) into out; -1 if it is not
 * an http:// URL (http://[unix:/path] for a Unix socket: no path after it)
 * or does not fit. */
int sg_proxy_url_normalise(const char *url, size_t len, char *out, size_t outlen);

/* Where a new session goes: of two distinct proxies in placement picked at
 * random, the better (a ready pool container of lang first, then fewer
 * sessions for its max_containers, then less memory committed). The only
 * proxy when one is configured (in placement or not, as before); NULL when
 * none is in placement. The pick counts as one more session there until its
 * next report. */
sg_proxy_t *sg_proxies_place(const char *lang);
/* The least loaded proxy in placement (fewer sessions for its
 * max_containers, then less memory committed), for a one-shot execution
 * (NULL when none; the only one when one is configured). */
sg_proxy_t *sg_proxies_least_loaded(const char *lang);
/* A session's proxy p is gone for good: out of placement longer than the
 * grace (1), or within it (0, and *wait_ms what is left of it). Never 1
 * with one proxy configured. */
int sg_proxy_lost(const sg_proxy_t *p, long *wait_ms);
/* Proxies in placement. */
size_t sg_proxies_up(void);

#endif
