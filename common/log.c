#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int sg_log_level = SG_LOG_INFO;
static const char *prog_name = "sandgate";
static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};

void sg_log_init(const char *prog, const char *level_name)
{
    prog_name = prog;
    for (int i = 0; i < 4; i++) {
        if (level_name != NULL && strcasecmp(level_name, level_names[i]) == 0)
            sg_log_level = i;
    }
}

void sg_log_write(sg_log_level_t level, const char *fmt, ...)
{
    char msg[1024], stamp[32];
    struct timespec ts;
    struct tm tm;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(stderr, "%s.%03ldZ %s %s %s\n", stamp, ts.tv_nsec / 1000000, prog_name, level_names[level], msg);
}
