/*
 * results.h — what an EXEC gives back besides its output: the records of a
 * kernel's result channel, framed and bounded into RESULT messages, and the
 * listing of the work dir's out directory in a FILES message before the
 * EXIT (agent_proto.h, "The result channel" and "Files out").
 *
 * The channel's bytes come from the sandbox (the kernel, or the user's code
 * that writes on the kernel's fd 5): this room only frames them and keeps
 * them within the EXEC's budget; it never looks inside a record. The proxy
 * validates each one.
 */
#ifndef SANDGATE_AGENT_RESULTS_H
#define SANDGATE_AGENT_RESULTS_H

#include <stddef.h>
#include <stdint.h>

#include "run.h"

/* One EXEC's framing of the channel. */
typedef struct {
    int state;     /* reading a length line, a record, skipping one, or skipping everything */
    int failed;    /* the encoder ran out of memory */
    char head[12]; /* the length line so far */
    size_t hlen;
    sg_agent_buf_t msg; /* the RESULT being filled with the record (kept: within the budget) */
    size_t need, got;
    uint64_t skip; /* bytes of a record thrown away still to come */
    uint32_t count;
    uint64_t bytes;
} results_t;

/* At the start of an EXEC. */
void results_begin(results_t *r);

/* Bytes read from the channel: each record completed within the budget is
 * sent as a RESULT of x's id; what is dropped sets x's RESULTS_DROPPED. */
void results_feed(results_t *r, run_t *x, const uint8_t *p, size_t n);

/* One read of the channel fd (non-blocking), fed. Returns 1 when something
 * was read, 0 when nothing is there now, -1 at EOF or on an error (the
 * caller closes the fd). */
int results_read(results_t *r, run_t *x, int fd);

/* After the kernel answered: what is already in the pipe, at most
 * SG_AGENT_RESULTS_MAX_BYTES + DRAIN_LIMIT bytes. Returns -1 when the fd
 * reached EOF (the caller closes it), else 0. */
int results_drain(results_t *r, run_t *x, int fd);

/* At the end of the EXEC: a record cut off is dropped; frees r's memory. */
void results_end(results_t *r, run_t *x);

/* The FILES message of x, when the work dir has an out directory, built in
 * agent_out and left there: the caller's next flush sends it (the EXIT's). */
void results_send_files(run_t *x);

#endif
