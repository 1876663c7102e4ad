/*
 * test_docker_stream.c — the decoder of Docker's multiplexed attach/exec
 * stream (docker_stream.h). The output is recorded as a transcript of
 * (stream, bytes) runs, pieces of the same stream merged, so that any way
 * of cutting the input must give the same transcript. Every chunk fed lives
 * in a buffer of exactly its size, so a sanitizer build catches an overread.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sgunit.h"

#include "docker_stream.h"

#define MAX_RUNS 64

typedef struct {
    int stream;
    uint8_t *p;
    size_t len;
} run_t;

typedef struct {
    run_t runs[MAX_RUNS];
    size_t n;
    size_t calls;
    int bad_stream; /* a callback with a stream other than 0, 1, 2 */
} transcript_t;

static void on_payload(void *ctx, int stream, const uint8_t *p, size_t len)
{
    transcript_t *t = ctx;
    run_t *r;

    t->calls++;
    if (stream < 0 || stream > 2)
        t->bad_stream = 1;
    if (len == 0)
        return;
    if (t->n == 0 || t->runs[t->n - 1].stream != stream) {
        assert_true(t->n < MAX_RUNS);
        r = &t->runs[t->n++];
        r->stream = stream;
        r->p = NULL;
        r->len = 0;
    }
    r = &t->runs[t->n - 1];
    r->p = realloc(r->p, r->len + len);
    assert_non_null(r->p);
    memcpy(r->p + r->len, p, len);
    r->len += len;
}

static void transcript_free(transcript_t *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->runs[i].p);
    memset(t, 0, sizeof(*t));
}

static void assert_run(const transcript_t *t, size_t i, int stream, const void *p, size_t len)
{
    assert_true(i < t->n);
    assert_int_equal(t->runs[i].stream, stream);
    assert_int_equal(t->runs[i].len, len);
    if (len != 0)
        assert_memory_equal(t->runs[i].p, p, len);
}

static void assert_same(const transcript_t *a, const transcript_t *b)
{
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++)
        assert_run(b, i, a->runs[i].stream, a->runs[i].p, a->runs[i].len);
}

/* Appends one frame to buf at *off. */
static void put_frame(uint8_t *buf, size_t *off, uint8_t stream, const void *p, uint32_t len)
{
    uint8_t *h = buf + *off;
    h[0] = stream;
    h[1] = h[2] = h[3] = 0;
    h[4] = (uint8_t)(len >> 24);
    h[5] = (uint8_t)(len >> 16);
    h[6] = (uint8_t)(len >> 8);
    h[7] = (uint8_t)len;
    if (len != 0)
        memcpy(h + 8, p, len);
    *off += 8 + len;
}

/* Feeds p[0..len) in a heap copy of exactly that size. */
static int feed(sg_docker_demux_t *d, const uint8_t *p, size_t len, transcript_t *t)
{
    uint8_t *copy = malloc(len ? len : 1);
    int r;
    assert_non_null(copy);
    if (len != 0)
        memcpy(copy, p, len);
    r = sg_docker_demux_feed(d, copy, len, on_payload, t);
    free(copy);
    return r;
}

/* Feeds the buffer cut at the given offsets (ascending, within len). */
static int feed_cut(const uint8_t *p, size_t len, const size_t *cuts, size_t ncuts, transcript_t *t)
{
    sg_docker_demux_t d;
    size_t at = 0;
    sg_docker_demux_init(&d);
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : len;
        if (feed(&d, p + at, end - at, t) != 0)
            return -1;
        at = end;
    }
    return 0;
}

/* A stream of several frames used by the splitting tests. */
static size_t sample(uint8_t *buf)
{
    size_t off = 0;
    put_frame(buf, &off, 1, "hello\n", 6);
    put_frame(buf, &off, 2, "warning: x\n", 11);
    put_frame(buf, &off, 2, "", 0);
    put_frame(buf, &off, 1, "a", 1);
    put_frame(buf, &off, 0, "in", 2);
    put_frame(buf, &off, 1, "\0\xff\x01", 3);
    put_frame(buf, &off, 1, "", 0);
    return off;
}

static void check_sample(const transcript_t *t)
{
    assert_false(t->bad_stream);
    assert_int_equal(t->n, 5);
    assert_run(t, 0, 1, "hello\n", 6);
    assert_run(t, 1, 2, "warning: x\n", 11); /* the empty stderr frame adds nothing */
    assert_run(t, 2, 1, "a", 1);
    assert_run(t, 3, 0, "in", 2);
    assert_run(t, 4, 1, "\0\xff\x01", 3); /* stdout after stdin is a new run */
}

/* The state of a test that builds a stream by hand: the stream, a
 * demultiplexer, and what came out of it (freed by the teardown). */
typedef struct {
    uint8_t buf[64];
    size_t len;
    sg_docker_demux_t d;
    transcript_t t;
} stream_t;

static int stream_setup(void **state)
{
    *state = calloc(1, sizeof(stream_t));
    return *state != NULL ? 0 : -1;
}

static int stream_teardown(void **state)
{
    stream_t *s = *state;
    transcript_free(&s->t);
    free(s);
    return 0;
}

#define STREAM_TEST(f) cmocka_unit_test_setup_teardown(f, stream_setup, stream_teardown)

static void test_one_frame(void **state)
{
    stream_t *s = *state;

    put_frame(s->buf, &s->len, 1, "hello world\n", 12);
    sg_docker_demux_init(&s->d);
    assert_int_equal(feed(&s->d, s->buf, s->len, &s->t), 0);
    assert_int_equal(s->t.calls, 1);
    assert_int_equal(s->t.n, 1);
    assert_run(&s->t, 0, 1, "hello world\n", 12);
    /* nothing pending: an empty feed does nothing */
    assert_int_equal(feed(&s->d, s->buf, 0, &s->t), 0);
    assert_int_equal(s->t.calls, 1);
    transcript_free(&s->t);
}

static void test_interleaved(void **state)
{
    uint8_t buf[128];
    size_t len = 0;
    transcript_t t = {0};

    put_frame(buf, &len, 1, "a", 1);
    put_frame(buf, &len, 2, "bb", 2);
    put_frame(buf, &len, 1, "ccc", 3);
    put_frame(buf, &len, 2, "dddd", 4);
    assert_int_equal(feed_cut(buf, len, NULL, 0, &t), 0);
    assert_int_equal(t.n, 4);
    assert_run(&t, 0, 1, "a", 1);
    assert_run(&t, 1, 2, "bb", 2);
    assert_run(&t, 2, 1, "ccc", 3);
    assert_run(&t, 3, 2, "dddd", 4);
    transcript_free(&t);

    len = sample(buf);
    assert_int_equal(feed_cut(buf, len, NULL, 0, &t), 0);
    check_sample(&t);
    transcript_free(&t);
}

static void test_byte_at_a_time(void **state)
{
    uint8_t buf[128];
    size_t len = sample(buf);
    size_t cuts[128];
    transcript_t whole = {0}, t = {0};

    assert_int_equal(feed_cut(buf, len, NULL, 0, &whole), 0);
    check_sample(&whole);
    for (size_t i = 0; i + 1 < len; i++)
        cuts[i] = i + 1;
    assert_int_equal(feed_cut(buf, len, cuts, len - 1, &t), 0);
    assert_same(&whole, &t);
    transcript_free(&t);
    transcript_free(&whole);
}

static void test_split_everywhere(void **state)
{
    uint8_t buf[128];
    size_t len = sample(buf);
    transcript_t whole = {0};

    assert_int_equal(feed_cut(buf, len, NULL, 0, &whole), 0);
    /* one cut at every offset, then two cuts at every pair of offsets */
    for (size_t i = 0; i <= len; i++) {
        transcript_t t = {0};
        size_t cuts[1] = {i};
        assert_int_equal(feed_cut(buf, len, cuts, 1, &t), 0);
        assert_same(&whole, &t);
        transcript_free(&t);
    }
    for (size_t i = 0; i <= len; i++) {
        for (size_t j = i; j <= len; j++) {
            transcript_t t = {0};
            size_t cuts[2] = {i, j};
            assert_int_equal(feed_cut(buf, len, cuts, 2, &t), 0);
            assert_same(&whole, &t);
            transcript_free(&t);
        }
    }
    transcript_free(&whole);
}

static void test_zero_length_frame(void **state)
{
    stream_t *s = *state;

    put_frame(s->buf, &s->len, 1, "", 0);
    put_frame(s->buf, &s->len, 2, "x", 1);
    assert_int_equal(feed_cut(s->buf, s->len, NULL, 0, &s->t), 0);
    assert_int_equal(s->t.n, 1);
    assert_run(&s->t, 0, 2, "x", 1);
    transcript_free(&s->t);

    /* an empty frame that ends a read leaves the decoder expecting a header */
    sg_docker_demux_init(&s->d);
    s->len = 0;
    put_frame(s->buf, &s->len, 2, "", 0);
    assert_int_equal(feed(&s->d, s->buf, s->len, &s->t), 0);
    assert_int_equal(s->t.n, 0);
    s->len = 0;
    put_frame(s->buf, &s->len, 1, "yz", 2);
    assert_int_equal(feed(&s->d, s->buf, s->len, &s->t), 0);
    assert_int_equal(s->t.n, 1);
    assert_run(&s->t, 0, 1, "yz", 2);
    transcript_free(&s->t);
}

static void test_bad_stream(void **state)
{
    static const uint8_t streams[] = {3, 4, 0x80, 0xff};
    stream_t *s = *state;

    for (size_t i = 0; i < sizeof(streams); i++) {
        s->len = 0;
        put_frame(s->buf, &s->len, streams[i], "abc", 3);
        sg_docker_demux_init(&s->d);
        assert_int_equal(feed(&s->d, s->buf, s->len, &s->t), -1);
        assert_int_equal(s->t.calls, 0);
    }

    /* a good frame before the bad header is delivered, then -1 */
    s->len = 0;
    put_frame(s->buf, &s->len, 1, "ok", 2);
    put_frame(s->buf, &s->len, 3, "no", 2);
    sg_docker_demux_init(&s->d);
    assert_int_equal(feed(&s->d, s->buf, s->len, &s->t), -1);
    assert_int_equal(s->t.n, 1);
    assert_run(&s->t, 0, 1, "ok", 2);
    assert_false(s->t.bad_stream);
    transcript_free(&s->t);

    /* a bad header split across reads: incomplete is 0, complete is -1 */
    s->len = 0;
    put_frame(s->buf, &s->len, 3, "no", 2);
    sg_docker_demux_init(&s->d);
    assert_int_equal(feed(&s->d, s->buf, 5, &s->t), 0);
    assert_int_equal(feed(&s->d, s->buf + 5, s->len - 5, &s->t), -1);
    assert_int_equal(s->t.calls, 0);
}

static void test_bad_padding(void **state)
{
    stream_t *s = *state;

    for (int b = 1; b <= 3; b++) {
        for (int v = 1; v <= 255; v += 127) {
            s->len = 0;
            put_frame(s->buf, &s->len, 1, "abc", 3);
            s->buf[b] = (uint8_t)v;
            sg_docker_demux_init(&s->d);
            assert_int_equal(feed(&s->d, s->buf, s->len, &s->t), -1);
            /* and byte at a time */
            sg_docker_demux_init(&s->d);
            int r = 0;
            for (size_t i = 0; i < s->len && r == 0; i++)
                r = feed(&s->d, s->buf + i, 1, &s->t);
            assert_int_equal(r, -1);
            assert_int_equal(s->t.calls, 0);
        }
    }
}

static void test_init_resets(void **state)
{
    stream_t *s = *state;

    put_frame(s->buf, &s->len, 2, "abcdef", 6);
    sg_docker_demux_init(&s->d);
    assert_int_equal(feed(&s->d, s->buf, 3, &s->t), 0); /* half a header */
    sg_docker_demux_init(&s->d);
    assert_int_equal(feed(&s->d, s->buf, s->len, &s->t), 0);
    assert_int_equal(s->t.n, 1);
    assert_run(&s->t, 0, 2, "abcdef", 6);
    transcript_free(&s->t);

    sg_docker_demux_init(&s->d);
    assert_int_equal(feed(&s->d, s->buf, 10, &s->t), 0); /* header and 2 of 6 payload bytes */
    sg_docker_demux_init(&s->d);
    s->len = 0;
    put_frame(s->buf, &s->len, 1, "zz", 2);
    assert_int_equal(feed(&s->d, s->buf, s->len, &s->t), 0);
    assert_int_equal(s->t.n, 2);
    assert_run(&s->t, 0, 2, "ab", 2);
    assert_run(&s->t, 1, 1, "zz", 2);
    transcript_free(&s->t);
}

static uint32_t rng_state = 0x12345678;

/* deterministic, so a failure reproduces */
static uint32_t rng(void)
{
    return sgunit_xorshift32(&rng_state);
}

static void test_large_frame(void **state)
{
    const uint32_t big = 1u << 20;
    size_t len = 0, at = 0;
    uint8_t *payload = malloc(big), *buf = malloc(big + 64);
    sg_docker_demux_t d;
    transcript_t t = {0};

    assert_non_null(payload);
    assert_non_null(buf);
    for (uint32_t i = 0; i < big; i++)
        payload[i] = (uint8_t)rng();
    put_frame(buf, &len, 1, payload, big);
    put_frame(buf, &len, 2, "tail", 4);
    put_frame(buf, &len, 1, "x", 1);

    sg_docker_demux_init(&d);
    while (at < len) {
        size_t n = 1 + rng() % 70000;
        if (rng() % 8 == 0)
            n = 1 + rng() % 9; /* and some tiny reads, to cut headers */
        if (n > len - at)
            n = len - at;
        assert_int_equal(feed(&d, buf + at, n, &t), 0);
        at += n;
    }
    assert_int_equal(t.n, 3);
    assert_run(&t, 0, 1, payload, big);
    assert_run(&t, 1, 2, "tail", 4);
    assert_run(&t, 2, 1, "x", 1);
    transcript_free(&t);
    free(payload);
    free(buf);
}

/* The size is big-endian: 0x00000102 is 258 bytes, not 0x02010000. */
static void test_size_big_endian(void **state)
{
    uint8_t buf[8 + 258 + 8 + 1];
    uint8_t payload[258];
    size_t len = 0;
    transcript_t t = {0};

    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = (uint8_t)i;
    put_frame(buf, &len, 1, payload, sizeof(payload));
    assert_int_equal(buf[6], 1);
    assert_int_equal(buf[7], 2);
    put_frame(buf, &len, 2, "e", 1);
    assert_int_equal(feed_cut(buf, len, NULL, 0, &t), 0);
    assert_int_equal(t.n, 2);
    assert_run(&t, 0, 1, payload, sizeof(payload));
    assert_run(&t, 1, 2, "e", 1);
    transcript_free(&t);
}

typedef struct {
    uint64_t bytes[3];
    int last_stream;
} counter_t;

static void on_count(void *ctx, int stream, const uint8_t *p, size_t len)
{
    counter_t *c = ctx;
    assert_true(stream >= 0 && stream <= 2);
    c->bytes[stream] += len;
    if (len != 0)
        c->last_stream = stream;
}

/* Every size byte counts, the top one too: a 0x01020304-byte frame (about
 * 16 MiB, streamed from one small buffer) then a 3-byte stderr frame. */
static void test_size_high_byte(void **state)
{
    static uint8_t chunk[65536];
    const uint32_t big = 0x01020304;
    uint8_t hdr[8] = {1, 0, 0, 0, 0x01, 0x02, 0x03, 0x04};
    uint8_t tail[11];
    size_t tl = 0;
    uint32_t left = big;
    sg_docker_demux_t d;
    counter_t c = {{0}, -1};

    put_frame(tail, &tl, 2, "end", 3);
    sg_docker_demux_init(&d);
    assert_int_equal(sg_docker_demux_feed(&d, hdr, sizeof(hdr), on_count, &c), 0);
    while (left != 0) {
        uint32_t n = left < sizeof(chunk) ? left : (uint32_t)sizeof(chunk);
        assert_int_equal(sg_docker_demux_feed(&d, chunk, n, on_count, &c), 0);
        left -= n;
    }
    assert_int_equal(c.bytes[1], big);
    assert_int_equal(c.bytes[2], 0);
    assert_int_equal(sg_docker_demux_feed(&d, tail, tl, on_count, &c), 0);
    assert_int_equal(c.bytes[1], big);
    assert_int_equal(c.bytes[2], 3);
    assert_int_equal(c.last_stream, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        STREAM_TEST(test_one_frame),           cmocka_unit_test(test_interleaved),
        cmocka_unit_test(test_byte_at_a_time), cmocka_unit_test(test_split_everywhere),
        STREAM_TEST(test_zero_length_frame),   STREAM_TEST(test_bad_stream),
        STREAM_TEST(test_bad_padding),         STREAM_TEST(test_init_resets),
        cmocka_unit_test(test_large_frame),    cmocka_unit_test(test_size_big_endian),
        cmocka_unit_test(test_size_high_byte),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
