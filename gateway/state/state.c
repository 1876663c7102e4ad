/*
 * state.c — the GCRA step both backends share (state.h): pure arithmetic,
 * unit tested. The public sg_state_* calls are in state_backend.c.
 */
#include "state.h"

#include <string.h>

/* ---- GCRA ------------------------------------------------------------------
 *
 * Generic cell rate algorithm, the "virtual scheduling" form, in integer
 * milliseconds:
 *
 *   T        = ceil(60000 / rate_per_min)    emission interval (at least 1 ms;
 *                                            rounding up never lets more than
 *                                            rate_per_min through per minute)
 *   tau      = T * (burst - 1)               burst tolerance
 *   tat      = max(stored_tat, now)          theoretical arrival time
 *   next     = tat + T
 *   allow_at = next - burst * T  (= tat - tau)
 *
 *   now <  allow_at  deny:  retry_after = allow_at - now, remaining = 0,
 *                           reset = tat - now, stored tat unchanged
 *   now >= allow_at  allow: stored tat = next,
 *                           remaining = floor((now - allow_at) / T),
 *                           reset = next - now
 *
 * From idle (tat <= now) exactly `burst` requests pass at the same instant
 * (the k-th has allow_at = now + (k - burst) * T), then one per T. The
 * stored value is absolute, so it is the same whichever gateway wrote it.
 * A new rate or burst applies to the stored tat as it stands: requests
 * already let through stay paid for (at most the old burst * old T).
 * A denial stores nothing, so hammering while limited costs nothing. */

#define GCRA_MAX_BURST 1000000000L

int64_t sg_gcra_interval_ms(long rate_per_min)
{
    if (rate_per_min <= 0)
        return 0;
    int64_t t = (60000 + (int64_t)rate_per_min - 1) / (int64_t)rate_per_min;
    return t < 1 ? 1 : t;
}

long sg_gcra_burst(long burst)
{
    return burst < 1 ? 1 : burst > GCRA_MAX_BURST ? GCRA_MAX_BURST : burst;
}

void sg_gcra(int64_t now_ms, int64_t tat_ms, long rate_per_min, long burst, sg_rate_result_t *r, int64_t *new_tat_ms)
{
    memset(r, 0, sizeof(*r));
    r->available = 1;
    burst = sg_gcra_burst(burst);
    r->limit = burst;
    *new_tat_ms = tat_ms;

    int64_t t = sg_gcra_interval_ms(rate_per_min);
    if (t == 0) {
        /* no rate configured: nothing is limited and nothing is recorded */
        r->allowed = 1;
        r->remaining = burst;
        return;
    }
    int64_t bucket = (int64_t)burst * t;
    int64_t tat = tat_ms > now_ms ? tat_ms : now_ms;
    int64_t next = tat + t;
    int64_t allow_at = next - bucket;

    if (now_ms < allow_at) {
        r->allowed = 0;
        r->remaining = 0;
        r->retry_after_s = (double)(allow_at - now_ms) / 1000.0;
        r->reset_s = (double)(tat - now_ms) / 1000.0;
        return;
    }
    r->allowed = 1;
    r->remaining = (long)((now_ms - allow_at) / t);
    r->reset_s = (double)(next - now_ms) / 1000.0;
    *new_tat_ms = next;
}
