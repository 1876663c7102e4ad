/*
 * test_agent_proto.c — the agent wire protocol encoder and reader: exact
 * bytes, round trips of every field type, header checks, and a reader that
 * never reads past its payload (each truncated payload lives in a buffer of
 * exactly its size, so a sanitizer build catches any overread).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent_proto.h"
#include "sgrun.h"

static void test_header_bytes(void **state)
{
    sg_agent_buf_t b;
    static const uint8_t want[] = {
        66,   0,    0,    0,    0x01, 0x02, 0x03, 0x04, 0, 0, 0, 35, /* header */
        0xff, 0xff, 0xff, 0xff,                                      /* i32 -1 */
        0,    0,    0,    9,                                         /* u32 9 */
        0,    0,    0,    3,                                         /* u32 3 */
        0,    0,    0,    0,    0,    0x0f, 0x42, 0x40,              /* u64 1000000 */
        0,    0,    0,    1,                                         /* u32 1 */
        0,    0,    0,    3,    'r',  'u',  'n',                     /* str "run" */
        0,    0,    0,    3,                                         /* u32 3 */
    };

    sg_agent_buf_init(&b);
    assert_int_equal(sg_agent_msg_begin(&b, SG_AGENT_EXIT, 0x01020304), 0);
    assert_int_equal(sg_agent_put_i32(&b, -1), 0);
    assert_int_equal(sg_agent_put_u32(&b, 9), 0);
    assert_int_equal(sg_agent_put_u32(&b, SG_AGENT_REASON_OUTPUT_LIMIT), 0);
    assert_int_equal(sg_agent_put_u64(&b, 1000000), 0);
    assert_int_equal(sg_agent_put_u32(&b, SG_AGENT_EXIT_STDOUT_TRUNCATED), 0);
    assert_int_equal(sg_agent_put_str(&b, "run", 3), 0);
    assert_int_equal(sg_agent_put_u32(&b, SG_AGENT_STATE_LOST), 0);
    sg_agent_msg_end(&b, 0);
    assert_int_equal(b.len, sizeof(want));
    assert_memory_equal(b.base, want, sizeof(want));
    sg_agent_buf_free(&b);
    assert_null(b.base);
    assert_int_equal(b.len, 0);
}

static void test_round_trip(void **state)
{
    static const uint8_t bin[] = {0, 1, 2, 0xff, 0, 'x'};
    sg_agent_buf_t b;
    sg_agent_header_t h;
    sg_agent_reader_t r;
    const uint8_t *s;
    size_t len;
    uint32_t u;
    int32_t i;
    uint64_t q;

    sg_agent_buf_init(&b);
    assert_int_equal(sg_agent_msg_begin(&b, SG_AGENT_EXEC, UINT32_MAX), 0);
    assert_int_equal(sg_agent_put_u32(&b, 0), 0);
    assert_int_equal(sg_agent_put_u32(&b, UINT32_MAX), 0);
    assert_int_equal(sg_agent_put_i32(&b, INT32_MIN), 0);
    assert_int_equal(sg_agent_put_i32(&b, INT32_MAX), 0);
    assert_int_equal(sg_agent_put_u64(&b, UINT64_MAX), 0);
    assert_int_equal(sg_agent_put_u64(&b, 0x0102030405060708ull), 0);
    assert_int_equal(sg_agent_put_str(&b, "", 0), 0);
    assert_int_equal(sg_agent_put_str(&b, bin, sizeof(bin)), 0);
    assert_int_equal(sg_agent_put_str(&b, "compile", 7), 0);
    assert_int_equal(sg_agent_put_rest(&b, "tail\0bytes", 10), 0);
    sg_agent_msg_end(&b, 0);

    assert_int_equal(sg_agent_header_decode(b.base, &h), 0);
    assert_int_equal(h.type, SG_AGENT_EXEC);
    assert_int_equal(h.id, UINT32_MAX);
    assert_int_equal(h.len, b.len - SG_AGENT_HEADER_SIZE);

    sg_agent_reader_init(&r, b.base + SG_AGENT_HEADER_SIZE, h.len);
    assert_int_equal(sg_agent_get_u32(&r, &u), 0);
    assert_int_equal(u, 0);
    assert_int_equal(sg_agent_get_u32(&r, &u), 0);
    assert_int_equal(u, UINT32_MAX);
    assert_int_equal(sg_agent_get_i32(&r, &i), 0);
    assert_int_equal(i, INT32_MIN);
    assert_int_equal(sg_agent_get_i32(&r, &i), 0);
    assert_int_equal(i, INT32_MAX);
    assert_int_equal(sg_agent_get_u64(&r, &q), 0);
    assert_true(q == UINT64_MAX);
    assert_int_equal(sg_agent_get_u64(&r, &q), 0);
    assert_true(q == 0x0102030405060708ull);
    assert_int_equal(sg_agent_get_str(&r, &s, &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(sg_agent_get_str(&r, &s, &len), 0);
    assert_int_equal(len, sizeof(bin));
    assert_memory_equal(s, bin, sizeof(bin));
    assert_int_equal(sg_agent_get_str(&r, &s, &len), 0);
    assert_int_equal(len, 7);
    assert_memory_equal(s, "compile", 7);
    sg_agent_get_rest(&r, &s, &len);
    assert_int_equal(len, 10);
    assert_memory_equal(s, "tail\0bytes", 10);
    assert_false(r.failed);
    assert_int_equal(r.off, r.len);

    /* Rest of an exhausted reader is empty, not a failure. */
    sg_agent_get_rest(&r, &s, &len);
    assert_int_equal(len, 0);
    assert_false(r.failed);
    sg_agent_buf_free(&b);
}

/* Two messages in one buffer: _end patches the one that starts at msg_start. */
static void test_two_messages(void **state)
{
    sg_agent_buf_t b;
    sg_agent_header_t h;
    size_t second;

    sg_agent_buf_init(&b);
    assert_int_equal(sg_agent_msg_begin(&b, SG_AGENT_PING, 1), 0);
    sg_agent_msg_end(&b, 0);
    second = b.len;
    assert_int_equal(sg_agent_msg_begin(&b, SG_AGENT_OUTPUT, 2), 0);
    assert_int_equal(sg_agent_put_u32(&b, 1), 0);
    assert_int_equal(sg_agent_put_rest(&b, "hi\n", 3), 0);
    sg_agent_msg_end(&b, second);

    assert_int_equal(sg_agent_header_decode(b.base, &h), 0);
    assert_int_equal(h.type, SG_AGENT_PING);
    assert_int_equal(h.len, 0);
    assert_int_equal(sg_agent_header_decode(b.base + second, &h), 0);
    assert_int_equal(h.type, SG_AGENT_OUTPUT);
    assert_int_equal(h.id, 2);
    assert_int_equal(h.len, 7);
    assert_int_equal(b.len, second + SG_AGENT_HEADER_SIZE + 7);
    sg_agent_buf_free(&b);
}

/* A large payload forces several reallocations; contents must survive. */
static void test_growth(void **state)
{
    sg_agent_buf_t b;
    sg_agent_reader_t r;
    uint32_t v, k;

    sg_agent_buf_init(&b);
    for (k = 0; k < 100000; k++)
        assert_int_equal(sg_agent_put_u32(&b, k * 2654435761u), 0);
    assert_int_equal(b.len, 400000);
    assert_true(b.cap >= b.len);
    sg_agent_reader_init(&r, b.base, b.len);
    for (k = 0; k < 100000; k++) {
        assert_int_equal(sg_agent_get_u32(&r, &v), 0);
        assert_int_equal(v, k * 2654435761u);
    }
    assert_int_equal(sg_agent_get_u32(&r, &v), -1);
    sg_agent_buf_free(&b);
}

static void test_put_str_too_long(void **state)
{
    sg_agent_buf_t b;
    static const char c = 'x';

    if (sizeof(size_t) <= 4)
        skip();
    sg_agent_buf_init(&b);
    assert_int_equal(sg_agent_put_u32(&b, 7), 0);
    /* The length check comes before any byte is read from `s`. */
    assert_int_equal(sg_agent_put_str(&b, &c, (size_t)UINT32_MAX + 1), -1);
    assert_int_equal(b.len, 4);
    sg_agent_buf_free(&b);
}

static void test_header_decode(void **state)
{
    uint8_t p[SG_AGENT_HEADER_SIZE] = {SG_AGENT_PING, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0};
    sg_agent_header_t h;
    uint32_t max = SG_AGENT_MAX_PAYLOAD;
    int k;

    assert_int_equal(sg_agent_header_decode(p, &h), 0);
    assert_int_equal(h.type, SG_AGENT_PING);
    assert_int_equal(h.id, 5);
    assert_int_equal(h.len, 0);

    for (k = 1; k <= 3; k++) { /* flags, then both reserved bytes */
        p[k] = 0x80;
        assert_int_equal(sg_agent_header_decode(p, &h), -1);
        p[k] = 1;
        assert_int_equal(sg_agent_header_decode(p, &h), -1);
        p[k] = 0;
    }

    p[8] = (uint8_t)(max >> 24);
    p[9] = (uint8_t)(max >> 16);
    p[10] = (uint8_t)(max >> 8);
    p[11] = (uint8_t)max;
    assert_int_equal(sg_agent_header_decode(p, &h), 0);
    assert_int_equal(h.len, SG_AGENT_MAX_PAYLOAD);

    max++;
    p[8] = (uint8_t)(max >> 24);
    p[9] = (uint8_t)(max >> 16);
    p[10] = (uint8_t)(max >> 8);
    p[11] = (uint8_t)max;
    assert_int_equal(sg_agent_header_decode(p, &h), -1);

    memset(p + 8, 0xff, 4);
    assert_int_equal(sg_agent_header_decode(p, &h), -1);
}

/* An EXEC payload cut at every possible length: the sequence of gets fails
 * exactly when the cut is inside a field, and stays failed. */
static void test_truncated_everywhere(void **state)
{
    sg_agent_buf_t b;
    size_t cut;
    /* Field boundaries of the payload below: */
    static const size_t ends[] = {4, 8, 8 + 4 + 5, 8 + 9 + 4 + 7, 8 + 20 + 4 + 6};

    sg_agent_buf_init(&b);
    assert_int_equal(sg_agent_put_u32(&b, 1000), 0);
    assert_int_equal(sg_agent_put_u32(&b, 4096), 0);
    assert_int_equal(sg_agent_put_str(&b, "make!", 5), 0);
    assert_int_equal(sg_agent_put_str(&b, "compile", 7), 0);
    assert_int_equal(sg_agent_put_str(&b, "./prog", 6), 0);
    assert_int_equal(b.len, ends[4]);

    for (cut = 0; cut <= b.len; cut++) {
        uint8_t *copy = malloc(cut != 0 ? cut : 1);
        sg_agent_reader_t r;
        const uint8_t *s;
        size_t len, ok = 0, k;
        uint32_t u;
        int rc[5];

        assert_non_null(copy);
        memcpy(copy, b.base, cut);
        sg_agent_reader_init(&r, copy, cut);
        rc[0] = sg_agent_get_u32(&r, &u);
        rc[1] = sg_agent_get_u32(&r, &u);
        rc[2] = sg_agent_get_str(&r, &s, &len);
        rc[3] = sg_agent_get_str(&r, &s, &len);
        rc[4] = sg_agent_get_str(&r, &s, &len);
        for (k = 0; k < 5; k++) {
            if (cut >= ends[k]) {
                assert_int_equal(rc[k], 0);
                ok++;
            } else {
                assert_int_equal(rc[k], -1);
            }
        }
        /* Once failed, every later get fails, even ones that would fit. */
        if (ok < 5) {
            assert_true(r.failed);
            for (k = ok + 1; k < 5; k++)
                assert_int_equal(rc[k], -1);
            assert_true(r.off <= cut);
            sg_agent_get_rest(&r, &s, &len);
            assert_int_equal(len, 0);
        } else {
            assert_false(r.failed);
        }
        free(copy);
    }
    sg_agent_buf_free(&b);
}

static void test_reader_sticky_failure(void **state)
{
    static const uint8_t p[] = {0, 0, 0, 1, 0xaa, 0xbb, 0xcc};
    sg_agent_reader_t r;
    uint64_t q;
    uint32_t u;
    const uint8_t *s;
    size_t len;

    /* u64 over 7 bytes fails; the u32 that would have fitted fails too. */
    sg_agent_reader_init(&r, p, sizeof(p));
    assert_int_equal(sg_agent_get_u64(&r, &q), -1);
    assert_true(r.failed);
    assert_int_equal(sg_agent_get_u32(&r, &u), -1);

    /* A string whose length runs past the end. */
    sg_agent_reader_init(&r, p + 4, 3);
    assert_int_equal(sg_agent_get_str(&r, &s, &len), -1);
    sg_agent_reader_init(&r, (const uint8_t[]){0xff, 0xff, 0xff, 0xff, 'a'}, 5);
    assert_int_equal(sg_agent_get_str(&r, &s, &len), -1);
    assert_int_equal(sg_agent_get_str(&r, &s, &len), -1);
    sg_agent_get_rest(&r, &s, &len);
    assert_int_equal(len, 0);

    /* A string that exactly fills the payload is fine. */
    sg_agent_reader_init(&r, p, 7);
    assert_int_equal(sg_agent_get_str(&r, &s, &len), 0);
    assert_int_equal(len, 1);
    assert_int_equal(s[0], 0xaa);
    assert_int_equal(sg_agent_get_u32(&r, &u), -1);
}

static void test_empty_payload(void **state)
{
    sg_agent_reader_t r;
    const uint8_t *s;
    size_t len = 99;
    int32_t i;

    sg_agent_reader_init(&r, NULL, 0);
    sg_agent_get_rest(&r, &s, &len);
    assert_int_equal(len, 0);
    assert_false(r.failed);
    assert_int_equal(sg_agent_get_i32(&r, &i), -1);
    assert_true(r.failed);
}

/* The names of execution end reasons and kernel states, unknown values
 * included. */
static const struct {
    const char *(*name_of)(uint32_t);
    uint32_t value;
    const char *name;
} names[] = {
    {sg_agent_reason_name, SG_AGENT_REASON_EXITED, "exited"},
    {sg_agent_reason_name, SG_AGENT_REASON_TIMEOUT, "timeout"},
    {sg_agent_reason_name, SG_AGENT_REASON_OOM, "out_of_memory"},
    {sg_agent_reason_name, SG_AGENT_REASON_OUTPUT_LIMIT, "output_limit"},
    {sg_agent_reason_name, SG_AGENT_REASON_KILLED, "killed"},
    {sg_agent_reason_name, SG_AGENT_REASON_SETUP_FAILED, "setup_failed"},
    {sg_agent_reason_name, SG_AGENT_REASON_START_FAILED, "start_failed"},
    {sg_agent_reason_name, 7, "unknown"},
    {sg_agent_reason_name, UINT32_MAX, "unknown"},
    {sg_agent_state_name, SG_AGENT_STATE_NONE, "none"},
    {sg_agent_state_name, SG_AGENT_STATE_KEPT, "kept"},
    {sg_agent_state_name, SG_AGENT_STATE_NEW, "new"},
    {sg_agent_state_name, SG_AGENT_STATE_LOST, "lost"},
    {sg_agent_state_name, 4, "unknown"},
    {sg_agent_state_name, UINT32_MAX, "unknown"},
};

/* The rows of names for the function name_of (there is one at least). */
static void expect_names(const char *(*name_of)(uint32_t))
{
    int n = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (names[i].name_of == name_of) {
            assert_string_equal(name_of(names[i].value), names[i].name);
            n++;
        }
    }
    assert_true(n > 0);
}

static void test_reason_names(void **state)
{
    expect_names(sg_agent_reason_name);
}

static void test_state_names(void **state)
{
    expect_names(sg_agent_state_name);
}

/* ---- sg_agent_reply_decode: the proxy's reading of the agent's messages ---- */

/* Decodes b's one message from a payload copied into a buffer of exactly its
 * size (a sanitizer build sees any read past it). */
static int reply_decode(const sg_agent_buf_t *b, size_t cut, sg_agent_reply_t *m, uint8_t **copy)
{
    sg_agent_header_t h;
    size_t len;

    assert_int_equal(sg_agent_header_decode(b->base, &h), 0);
    len = h.len - cut;
    h.len = (uint32_t)len;
    *copy = malloc(len != 0 ? len : 1);
    memcpy(*copy, b->base + SG_AGENT_HEADER_SIZE, len);
    return sg_agent_reply_decode(&h, *copy, m);
}

static void test_reply_decode(void **state)
{
    sg_agent_buf_t b;
    sg_agent_reply_t m;
    uint8_t *copy;

    sg_agent_buf_init(&b);
    sg_agent_msg_begin(&b, SG_AGENT_EXIT, 7);
    sg_agent_put_i32(&b, -1);
    sg_agent_put_u32(&b, 9);
    sg_agent_put_u32(&b, SG_AGENT_REASON_TIMEOUT);
    sg_agent_put_u64(&b, 30000000);
    sg_agent_put_u32(&b, SG_AGENT_EXIT_STDERR_TRUNCATED);
    sg_agent_put_str(&b, "compile", 7);
    sg_agent_put_u32(&b, SG_AGENT_STATE_LOST);
    sg_agent_msg_end(&b, 0);
    assert_int_equal(reply_decode(&b, 0, &m, &copy), 0);
    assert_int_equal(m.type, SG_AGENT_EXIT);
    assert_int_equal(m.exit_code, -1);
    assert_int_equal(m.signal, 9);
    assert_int_equal(m.reason, SG_AGENT_REASON_TIMEOUT);
    assert_true(m.duration_us == 30000000);
    assert_int_equal(m.flags, SG_AGENT_EXIT_STDERR_TRUNCATED);
    assert_int_equal(m.stage_len, 7);
    assert_memory_equal(m.stage, "compile", 7);
    assert_ptr_equal(m.stage, copy + 28);
    assert_int_equal(m.state, SG_AGENT_STATE_LOST);
    free(copy);
    /* one byte short, anywhere in the fields: refused */
    for (size_t cut = 1; cut <= 4 + 4 + 4 + 8 + 4 + 4 + 7 + 4; cut++) {
        assert_int_equal(reply_decode(&b, cut, &m, &copy), -1);
        free(copy);
    }

    b.len = 0;
    sg_agent_msg_begin(&b, SG_AGENT_OUTPUT, 8);
    sg_agent_put_u32(&b, 2);
    sg_agent_put_rest(&b, "err\n", 4);
    sg_agent_msg_end(&b, 0);
    assert_int_equal(reply_decode(&b, 0, &m, &copy), 0);
    assert_int_equal(m.stream, 2);
    assert_int_equal(m.data_len, 4);
    assert_memory_equal(m.data, "err\n", 4);
    free(copy);
    b.base[SG_AGENT_HEADER_SIZE + 3] = 3; /* stream 3 */
    assert_int_equal(reply_decode(&b, 0, &m, &copy), -1);
    free(copy);
    b.base[SG_AGENT_HEADER_SIZE + 3] = 0; /* stream 0 (stdin) */
    assert_int_equal(reply_decode(&b, 0, &m, &copy), -1);
    free(copy);

    b.len = 0;
    sg_agent_msg_begin(&b, SG_AGENT_ERROR, 9);
    sg_agent_put_u32(&b, SG_AGENT_ERR_PATH);
    sg_agent_put_str(&b, "no", 2);
    sg_agent_put_rest(&b, "ignored", 7);
    sg_agent_msg_end(&b, 0);
    assert_int_equal(reply_decode(&b, 0, &m, &copy), 0);
    assert_int_equal(m.err_code, SG_AGENT_ERR_PATH);
    assert_int_equal(m.message_len, 2);
    assert_memory_equal(m.message, "no", 2);
    free(copy);

    b.len = 0;
    sg_agent_msg_begin(&b, SG_AGENT_OK, 10);
    sg_agent_put_u64(&b, 12345);
    sg_agent_msg_end(&b, 0);
    assert_int_equal(reply_decode(&b, 0, &m, &copy), 0);
    assert_true(m.ok_value == 12345);
    free(copy);
    assert_int_equal(reply_decode(&b, 1, &m, &copy), -1);
    free(copy);

    b.len = 0;
    sg_agent_msg_begin(&b, SG_AGENT_FILE, 11);
    sg_agent_msg_end(&b, 0);
    assert_int_equal(reply_decode(&b, 0, &m, &copy), 0);
    assert_int_equal(m.data_len, 0);
    free(copy);

    /* RESULT: the rest, as it is */
    b.len = 0;
    sg_agent_msg_begin(&b, SG_AGENT_RESULT, 12);
    sg_agent_put_rest(&b, "{\"x\"", 5);
    sg_agent_msg_end(&b, 0);
    assert_int_equal(reply_decode(&b, 0, &m, &copy), 0);
    assert_int_equal(m.data_len, 5);
    assert_ptr_equal(m.data, copy);
    free(copy);

    /* FILES: exactly files_count (path, size) entries */
    b.len = 0;
    sg_agent_msg_begin(&b, SG_AGENT_FILES, 13);
    sg_agent_put_u32(&b, SG_AGENT_FILES_MORE);
    sg_agent_put_u32(&b, 2);
    sg_agent_put_str(&b, "/sandbox/out/a", 14);
    sg_agent_put_u64(&b, 3);
    sg_agent_put_str(&b, "/sandbox/out/b", 14);
    sg_agent_put_u64(&b, 1u << 20);
    sg_agent_msg_end(&b, 0);
    assert_int_equal(reply_decode(&b, 0, &m, &copy), 0);
    assert_int_equal(m.files_flags, SG_AGENT_FILES_MORE);
    assert_int_equal(m.files_count, 2);
    assert_int_equal(m.data_len, 2 * (4 + 14 + 8));
    free(copy);
    for (size_t cut = 1; cut <= 8 + 2 * (4 + 14 + 8); cut++) { /* an entry cut short */
        assert_int_equal(reply_decode(&b, cut, &m, &copy), -1);
        free(copy);
    }
    b.base[SG_AGENT_HEADER_SIZE + 7] = 1; /* one entry said, two there: a byte left over */
    assert_int_equal(reply_decode(&b, 0, &m, &copy), -1);
    free(copy);
    b.base[SG_AGENT_HEADER_SIZE + 6] = 0xff; /* more than SG_AGENT_FILES_MAX */
    assert_int_equal(reply_decode(&b, 0, &m, &copy), -1);
    free(copy);

    /* requests and unknown types are not the agent's to send */
    b.base[0] = SG_AGENT_EXEC;
    assert_int_equal(reply_decode(&b, 0, &m, &copy), -1);
    free(copy);
    b.base[0] = 200;
    assert_int_equal(reply_decode(&b, 0, &m, &copy), -1);
    free(copy);
    sg_agent_buf_free(&b);
}

int main(void)
{
    return SG_RUN_TESTS("agent_proto", NULL, NULL, NULL, NULL, test_header_bytes, test_round_trip, test_two_messages,
                        test_growth, test_put_str_too_long, test_header_decode, test_truncated_everywhere,
                        test_reader_sticky_failure, test_empty_payload, test_reason_names, test_state_names,
                        test_reply_decode);
}
