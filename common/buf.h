/*
 * buf.h — a growable byte buffer with a hard cap, for everything fed from
 * the network (as curl's dynbuf with its toobig limit).
 */
#ifndef SANDGATE_BUF_H
#define SANDGATE_BUF_H

#include <stddef.h>

typedef struct {
    char *base;
    size_t len;
    size_t cap;
    size_t max; /* appends that would pass this fail */
} sg_buf_t;

void sg_buf_init(sg_buf_t *b, size_t max);
void sg_buf_free(sg_buf_t *b);
void sg_buf_reset(sg_buf_t *b);
/* Returns 0, or -1 if the result would exceed max (the buffer is then
 * unchanged; running out of memory is fatal: util.h). The contents stay
 * NUL-terminated. */
int sg_buf_append(sg_buf_t *b, const void *p, size_t n);
/* Appends printf-formatted text of at most 1023 bytes (longer is cut):
 * 0, or -1 as sg_buf_append. */
int sg_buf_appendf(sg_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops the first n bytes. */
void sg_buf_consume(sg_buf_t *b, size_t n);

#endif
