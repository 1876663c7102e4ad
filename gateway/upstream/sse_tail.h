/*
 * sse_tail.h — the "result" event of a streamed execution, found while the
 * proxy's Server-Sent Events pass through the gateway in pieces of any
 * size: one pass over the bytes, memory bounded by max_event whatever the
 * stream's length, no event ever rescanned.
 *
 * The parser follows the SSE line rules (lines end with LF, CRLF or CR; a
 * blank line ends an event; "event:" names it; "data:" lines join with LF;
 * ":" lines are comments; one space after the colon is dropped). Only the
 * data of events named "result" is kept; an event whose data passes
 * max_event bytes is not a result (the proxy's result event carries empty
 * stdout and stderr: a few hundred bytes). An event the stream never ended
 * (no blank line after it) does not count.
 *
 * Pure logic, no I/O: one owner, any thread.
 */
#ifndef SANDGATE_SSE_TAIL_H
#define SANDGATE_SSE_TAIL_H

#include <stddef.h>

#include "buf.h"

typedef struct {
    size_t max_event;
    sg_buf_t line;  /* the current line, its first max_event + 16 bytes */
    int line_over;  /* the line is longer than that */
    int after_cr;   /* the last byte was CR: a LF next ends no new line */
    char event[16]; /* the current event's name */
    int event_over; /* ... or it was longer than that (never "result") */
    sg_buf_t data;  /* the current event's data, at most max_event bytes */
    int data_over;
    int has_data;
    sg_buf_t result; /* the data of the last whole "result" event */
    int have_result;
    int saw_error; /* a whole "error" event came (the run failed) */
} sg_sse_tail_t;

void sg_sse_tail_init(sg_sse_tail_t *t, size_t max_event);
void sg_sse_tail_free(sg_sse_tail_t *t);
/* Takes the next piece of the stream. */
void sg_sse_tail_feed(sg_sse_tail_t *t, const char *p, size_t len);
/* The data of the last complete "result" event (NUL-terminated, owned by
 * t), or NULL if there was none. */
const char *sg_sse_tail_result(const sg_sse_tail_t *t, size_t *len);

#endif
