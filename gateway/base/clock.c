/*
 * clock.c — the gateway's clocks (clock.h).
 */
#include "clock.h"

#include <string.h>
#include <time.h>

int64_t sg_gw_now_up(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec + (ts.tv_nsec != 0);
}

void sg_gw_day(int64_t unix_s, char out[9])
{
    /* every execute asks; the answer changes once in 86400 s (unix time
     * has no leap seconds): the last day's, per thread, is kept */
    static __thread int64_t last_day = INT64_MIN;
    static __thread char last[9];
    int64_t day = unix_s >= 0 ? unix_s / 86400 : -((-unix_s + 86399) / 86400);

    if (day != last_day) {
        time_t t = (time_t)unix_s;
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(last, sizeof(last), "%Y%m%d", &tm);
        last_day = day;
    }
    memcpy(out, last, sizeof(last));
}
