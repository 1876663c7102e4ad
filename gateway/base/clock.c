/*
 * clock.c — the gateway's clocks (clock.h).
 */
#include "clock.h"

#include <time.h>

int64_t sg_gw_now_up(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec + (ts.tv_nsec != 0);
}

void sg_gw_day(int64_t unix_s, char out[9])
{
    time_t t = (time_t)unix_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 9, "%Y%m%d", &tm);
}
