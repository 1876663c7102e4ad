/*
 * fuzz_docker_stream — Docker's multiplexed attach/exec stream
 * (proxy/docker/docker_stream.c), the bytes a container's output arrives in.
 *
 * Input: one byte that seeds how the stream is cut into reads, then the
 * stream. Invariants: the decoder, fed in pieces, delivers exactly what a
 * one-pass reference decoder finds (every payload byte once, in order, on
 * its frame's stream), refuses a header at the same place the reference
 * does, and accounts for every byte it was given (headers + payloads +
 * a partial header or frame at the end = input).
 */
#include <string.h>

#include "docker_stream.h"
#include "fuzz.h"

typedef struct {
    uint16_t *got; /* stream << 8 | byte, per payload byte */
    size_t n, cap;
    size_t calls_empty;
} sink_t;

static void on_bytes(void *ctx, int stream, const uint8_t *p, size_t len)
{
    sink_t *s = ctx;

    CHECK(stream >= 0 && stream <= 2);
    if (len == 0)
        s->calls_empty++;
    for (size_t i = 0; i < len; i++) {
        CHECK(s->n < s->cap);
        s->got[s->n++] = (uint16_t)(stream << 8 | p[i]);
    }
}

/* The reference: one pass over the whole stream. Returns -1 at a bad
 * header, 0 otherwise; *hdr_bytes counts header bytes read (a partial one
 * at the end too). */
static int reference(const uint8_t *p, size_t len, sink_t *s, size_t *hdr_bytes)
{
    size_t off = 0;

    *hdr_bytes = 0;
    while (off < len) {
        if (len - off < 8) {
            *hdr_bytes += len - off;
            return 0;
        }
        const uint8_t *h = p + off;
        *hdr_bytes += 8;
        off += 8;
        if (h[0] > 2 || h[1] || h[2] || h[3])
            return -1;
        size_t size = (size_t)h[4] << 24 | (size_t)h[5] << 16 | (size_t)h[6] << 8 | h[7];
        size_t take = size < len - off ? size : len - off;
        if (take != 0)
            on_bytes(s, h[0], p + off, take);
        off += take;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    uint8_t seed = fuzz_u8(&in);
    sink_t want = {0}, got = {0};
    sg_docker_demux_t d;
    size_t hdr_bytes, off = 0;
    int want_rc, got_rc = 0;
    unsigned x = seed * 2654435761u + 1;

    want.cap = got.cap = in.len;
    want.got = malloc((in.len + 1) * sizeof(uint16_t));
    got.got = malloc((in.len + 1) * sizeof(uint16_t));
    want_rc = reference(in.p, in.len, &want, &hdr_bytes);

    sg_docker_demux_init(&d);
    while (off < in.len) {
        size_t piece;
        x = x * 1103515245u + 12345u;
        piece = seed == 0 ? in.len - off : 1 + (x >> 16) % (seed < 16 ? seed : 4096);
        if (piece > in.len - off)
            piece = in.len - off;
        got_rc = sg_docker_demux_feed(&d, in.p + off, piece, on_bytes, &got);
        off += piece;
        if (got_rc != 0)
            break;
    }
    CHECK(got_rc == want_rc);
    CHECK(got.calls_empty == 0);
    CHECK(got.n == want.n);
    CHECK(memcmp(got.got, want.got, got.n * sizeof(uint16_t)) == 0);
    if (want_rc == 0) {
        /* every byte is a header byte or a payload byte */
        CHECK(hdr_bytes + got.n == in.len);
        CHECK(d.hdr_have < 8);
        CHECK(d.left == 0 || d.hdr_have == 0);
    }
    free(want.got);
    free(got.got);
    return 0;
}
