#include "buf.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sg_buf_init(sg_buf_t *b, size_t max)
{
    b->base = NULL;
    b->len = b->cap = 0;
    b->max = max;
}

void sg_buf_free(sg_buf_t *b)
{
    free(b->base);
    b->base = NULL;
    b->len = b->cap = 0;
}

void sg_buf_reset(sg_buf_t *b)
{
    b->len = 0;
    if (b->base != NULL)
        b->base[0] = '\0';
}

int sg_buf_append(sg_buf_t *b, const void *p, size_t n)
{
    if (n > b->max || b->len > b->max - n)
        return -1;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->base = sg_xrealloc(b->base, cap);
        b->cap = cap;
    }
    if (n != 0)
        memcpy(b->base + b->len, p, n);
    b->len += n;
    b->base[b->len] = '\0';
    return 0;
}

void sg_buf_consume(sg_buf_t *b, size_t n)
{
    if (n >= b->len) {
        sg_buf_reset(b);
        return;
    }
    memmove(b->base, b->base + n, b->len - n);
    b->len -= n;
    b->base[b->len] = '\0';
}

int sg_buf_appendf(sg_buf_t *b, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    return sg_buf_append(b, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}
