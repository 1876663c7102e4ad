/*
 * log.h — one line per event on stderr: "<time> <prog> <LEVEL> message".
 * The level is checked before formatting. Thread-safe (one fprintf a line).
 */
#ifndef SANDGATE_LOG_H
#define SANDGATE_LOG_H

typedef enum { SG_LOG_ERROR = 0, SG_LOG_WARN = 1, SG_LOG_INFO = 2, SG_LOG_DEBUG = 3 } sg_log_level_t;

extern int sg_log_level;

void sg_log_init(const char *prog, const char *level_name);
void sg_log_write(sg_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define sg_log(level, ...)                                                                                             \
    do {                                                                                                               \
        if ((int)(level) <= sg_log_level)                                                                              \
            sg_log_write((level), __VA_ARGS__);                                                                        \
    } while (0)
#define sg_error(...) sg_log(SG_LOG_ERROR, __VA_ARGS__)
#define sg_warn(...) sg_log(SG_LOG_WARN, __VA_ARGS__)
#define sg_info(...) sg_log(SG_LOG_INFO, __VA_ARGS__)
#define sg_debug(...) sg_log(SG_LOG_DEBUG, __VA_ARGS__)

#endif
