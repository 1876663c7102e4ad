/*
 * fuzz_agent_reply — the agent's messages as the proxy reads them: what a
 * sandbox's PID 1 (or anything else that got hold of its stdout) writes,
 * framed as proxy/sessions/session.c frames it (process_inbuf: a header, then its
 * whole payload) and decoded by the proxy's own decoder
 * (sg_agent_reply_decode, proxy/agent/agent_proto.c; handle_message uses it),
 * message after message until the stream is refused or ends.
 *
 * Invariants: the header decoder refuses what the protocol forbids (flags,
 * reserved, a length past SG_AGENT_MAX_PAYLOAD) and nothing else; every
 * byte field lies inside its message's payload; a message that decodes
 * re-encodes, with agent_proto's own encoder, to the very bytes it came
 * from (its fields, then what the proxy leaves unread); the payload
 * reader's primitives, in an order the input picks, stay inside the
 * payload and stay failed once failed.
 */
#include <string.h>

#include "agent_proto.h"
#include "fuzz.h"

static void in_payload(const uint8_t *s, size_t len, const uint8_t *pl, size_t plen)
{
    CHECK(s != NULL);
    CHECK(len == 0 || (s >= pl && (size_t)(s - pl) + len <= plen));
}

/* Decodes one payload as session.c does; on success re-encodes it into b
 * (the whole message: header, fields, then the unread rest). */
static int decode(const sg_agent_header_t *h, const uint8_t *pl, sg_agent_buf_t *b)
{
    sg_agent_reply_t m;
    size_t start = b->len;

    if (sg_agent_reply_decode(h, pl, &m) != 0)
        return -1; /* session_broken */
    CHECK(m.type == h->type);
    CHECK(sg_agent_msg_begin(b, h->type, h->id) == 0);
    switch (h->type) {
    case SG_AGENT_READY:
        in_payload(m.data, m.data_len, pl, h->len);
        sg_agent_put_u32(b, m.version);
        sg_agent_put_str(b, m.data, m.data_len);
        break;
    case SG_AGENT_OUTPUT:
        CHECK(m.stream == 1 || m.stream == 2);
        in_payload(m.data, m.data_len, pl, h->len);
        CHECK(m.data_len == h->len - 4);
        sg_agent_put_u32(b, m.stream);
        sg_agent_put_rest(b, m.data, m.data_len);
        break;
    case SG_AGENT_EXIT:
        in_payload(m.stage, m.stage_len, pl, h->len);
        CHECK(sg_agent_reason_name(m.reason) != NULL && sg_agent_state_name(m.state) != NULL);
        sg_agent_put_i32(b, m.exit_code);
        sg_agent_put_u32(b, m.signal);
        sg_agent_put_u32(b, m.reason);
        sg_agent_put_u64(b, m.duration_us);
        sg_agent_put_u32(b, m.flags);
        sg_agent_put_str(b, m.stage, m.stage_len);
        sg_agent_put_u32(b, m.state);
        break;
    case SG_AGENT_FILE:
    case SG_AGENT_RESULT:
        in_payload(m.data, m.data_len, pl, h->len);
        CHECK(m.data_len == h->len);
        sg_agent_put_rest(b, m.data, m.data_len);
        break;
    case SG_AGENT_FILES:
        /* entries checked whole by the decoder: exactly files_count of them */
        in_payload(m.data, m.data_len, pl, h->len);
        CHECK(m.files_count <= SG_AGENT_FILES_MAX && m.data_len == h->len - 8);
        sg_agent_put_u32(b, m.files_flags);
        sg_agent_put_u32(b, m.files_count);
        sg_agent_put_rest(b, m.data, m.data_len);
        break;
    case SG_AGENT_OK:
        sg_agent_put_u64(b, m.ok_value);
        break;
    case SG_AGENT_ERROR:
        in_payload(m.message, m.message_len, pl, h->len);
        sg_agent_put_u32(b, m.err_code);
        sg_agent_put_str(b, m.message, m.message_len);
        break;
    case SG_AGENT_SYNC_OK:
        sg_agent_put_u64(b, m.ok_value);
        sg_agent_put_u32(b, m.version);
        sg_agent_put_u32(b, m.kernel);
        break;
    default:
        CHECK(!"an unknown type decodes");
    }
    /* the fields are the payload's first bytes; what follows is ignored */
    size_t used = b->len - start - SG_AGENT_HEADER_SIZE;
    CHECK(used <= h->len);
    CHECK(sg_agent_put_rest(b, pl + used, h->len - used) == 0);
    sg_agent_msg_end(b, start);
    return 0;
}

/* The reader's primitives in an order drawn from sel. */
static void reader_walk(const uint8_t *pl, size_t len, uint32_t sel)
{
    sg_agent_reader_t r;
    const uint8_t *s;
    size_t n, last = 0;
    uint32_t u;
    int32_t i;
    uint64_t v;
    int failed = 0;

    sg_agent_reader_init(&r, pl, len);
    for (int k = 0; k < 8; k++, sel >>= 4) {
        int rc = 0;
        switch (sel & 3) {
        case 0:
            rc = sg_agent_get_u32(&r, &u);
            break;
        case 1:
            rc = sg_agent_get_i32(&r, &i);
            break;
        case 2:
            rc = sg_agent_get_u64(&r, &v);
            break;
        case 3:
            rc = sg_agent_get_str(&r, &s, &n);
            if (rc == 0)
                in_payload(s, n, pl, len);
            break;
        }
        CHECK(r.off <= r.len && r.off >= last);
        last = r.off;
        if (failed)
            CHECK(rc == -1); /* once failed, always failed */
        failed |= rc != 0;
        CHECK(failed == r.failed);
    }
    sg_agent_get_rest(&r, &s, &n);
    CHECK(failed ? n == 0 : r.off == r.len);
    in_payload(s, n, pl, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sg_agent_buf_t b;
    size_t off = 0;

    sg_agent_buf_init(&b);
    while (size - off >= SG_AGENT_HEADER_SIZE) {
        const uint8_t *m = data + off;
        sg_agent_header_t h;
        uint32_t len = (uint32_t)m[8] << 24 | (uint32_t)m[9] << 16 | (uint32_t)m[10] << 8 | m[11];
        int valid = m[1] == 0 && m[2] == 0 && m[3] == 0 && len <= SG_AGENT_MAX_PAYLOAD;

        CHECK((sg_agent_header_decode(m, &h) == 0) == valid);
        if (!valid)
            break; /* session_broken */
        CHECK(h.type == m[0] && h.len == len);
        if (size - off - SG_AGENT_HEADER_SIZE < h.len)
            break; /* waits for more */
        /* the payload in a buffer of its own, so ASan sees any read past it */
        uint8_t *pl = malloc(h.len != 0 ? h.len : 1);
        memcpy(pl, m + SG_AGENT_HEADER_SIZE, h.len);
        b.len = 0;
        reader_walk(pl, h.len, h.id);
        int rc = decode(&h, pl, &b);
        free(pl);
        if (rc != 0)
            break; /* session_broken */
        CHECK(b.len == SG_AGENT_HEADER_SIZE + (size_t)h.len);
        CHECK(memcmp(b.base, m, b.len) == 0);
        off += SG_AGENT_HEADER_SIZE + h.len;
    }
    sg_agent_buf_free(&b);
    return 0;
}
