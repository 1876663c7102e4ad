/*
 * fuzz_agent_reply — the agent's messages as the proxy reads them: what a
 * sandbox's PID 1 (or anything else that got hold of its stdout) writes,
 * decoded with agent_proto.[ch] exactly as proxy/session.c does it
 * (wait_ready: READY; process_inbuf and handle_message: OUTPUT, EXIT, FILE,
 * OK, ERROR), message after message until the stream is refused or ends.
 *
 * Invariants: the header decoder refuses what the protocol forbids (flags,
 * reserved, a length past SG_AGENT_MAX_PAYLOAD) and nothing else; every
 * field read lies inside its message's payload; a failed reader stays
 * failed; and a message that decodes re-encodes, with agent_proto's own
 * encoder, to the very bytes it came from (fields, then what the proxy
 * leaves unread).
 */
#include <string.h>

#include "agent_proto.h"
#include "fuzz.h"

static void in_payload(const uint8_t *s, size_t len, const uint8_t *pl, size_t plen)
{
    CHECK(s >= pl || plen == 0);
    CHECK(plen == 0 || (size_t)(s - pl) + len <= plen);
}

/* Decodes one payload as session.c would; on success re-encodes it into b. */
static int decode(const sg_agent_header_t *h, const uint8_t *pl, sg_agent_buf_t *b)
{
    sg_agent_reader_t r;
    const uint8_t *s, *rest;
    size_t len, rlen;
    uint32_t u[4];
    int32_t code;
    uint64_t v;
    size_t start = b->len;
    int ok = 0;

    sg_agent_reader_init(&r, pl, h->len);
    CHECK(sg_agent_msg_begin(b, h->type, h->id) == 0);
    switch (h->type) {
    case SG_AGENT_READY:
        if (sg_agent_get_u32(&r, &u[0]) != 0 || sg_agent_get_str(&r, &s, &len) != 0)
            break;
        in_payload(s, len, pl, h->len);
        sg_agent_put_u32(b, u[0]);
        sg_agent_put_str(b, s, len);
        ok = 1;
        break;
    case SG_AGENT_OUTPUT:
        if (sg_agent_get_u32(&r, &u[0]) != 0 || (u[0] != 1 && u[0] != 2))
            break;
        sg_agent_put_u32(b, u[0]);
        ok = 1;
        break;
    case SG_AGENT_EXIT:
        if (sg_agent_get_i32(&r, &code) != 0 || sg_agent_get_u32(&r, &u[0]) != 0 || sg_agent_get_u32(&r, &u[1]) != 0 ||
            sg_agent_get_u64(&r, &v) != 0 || sg_agent_get_u32(&r, &u[2]) != 0 || sg_agent_get_str(&r, &s, &len) != 0 ||
            sg_agent_get_u32(&r, &u[3]) != 0)
            break;
        in_payload(s, len, pl, h->len);
        CHECK(sg_agent_reason_name(u[1]) != NULL && sg_agent_state_name(u[3]) != NULL);
        sg_agent_put_i32(b, code);
        sg_agent_put_u32(b, u[0]);
        sg_agent_put_u32(b, u[1]);
        sg_agent_put_u64(b, v);
        sg_agent_put_u32(b, u[2]);
        sg_agent_put_str(b, s, len);
        sg_agent_put_u32(b, u[3]);
        ok = 1;
        break;
    case SG_AGENT_FILE:
        ok = 1;
        break;
    case SG_AGENT_OK:
        if (sg_agent_get_u64(&r, &v) != 0)
            break;
        sg_agent_put_u64(b, v);
        ok = 1;
        break;
    case SG_AGENT_ERROR:
        if (sg_agent_get_u32(&r, &u[0]) != 0 || sg_agent_get_str(&r, &s, &len) != 0)
            break;
        in_payload(s, len, pl, h->len);
        sg_agent_put_u32(b, u[0]);
        sg_agent_put_str(b, s, len);
        ok = 1;
        break;
    default:
        break; /* the proxy breaks the session */
    }
    CHECK(r.off <= r.len);
    if (!ok) {
        /* once failed, always failed, and nothing more is handed out */
        if (r.failed) {
            CHECK(sg_agent_get_u32(&r, &u[0]) == -1);
            CHECK(sg_agent_get_str(&r, &s, &len) == -1);
            sg_agent_get_rest(&r, &rest, &rlen);
            CHECK(rlen == 0);
        }
        b->len = start;
        return -1;
    }
    sg_agent_get_rest(&r, &rest, &rlen);
    in_payload(rest, rlen, pl, h->len);
    CHECK(r.off == r.len);
    CHECK(sg_agent_put_rest(b, rest, rlen) == 0);
    sg_agent_msg_end(b, start);
    return 0;
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
