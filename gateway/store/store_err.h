/*
 * store_err.h — private to gateway/store/: the error sentence of a failed
 * call, written into the caller's err buffer (if it gave one).
 */
#ifndef SANDGATE_STORE_ERR_H
#define SANDGATE_STORE_ERR_H

#include <stdarg.h>
#include <stdio.h>

static inline void sg_store__errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline void sg_store__errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (err == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

#endif
