/*
 * fuzz_agent_request — the proxy's requests as the agent reads them
 * (proxy/agent/decode.c, used by serve_one in proxy/agent/loop.c): a
 * stream of messages, each header checked and each EXEC, PUT_FILE or
 * GET_FILE payload decoded as the agent does.
 *
 * Invariants: a decoded request re-encodes, with agent_proto's encoder, to
 * the payload it came from; its strings are NUL-terminated with no NUL
 * inside, a file path is never empty, GET_FILE's max_bytes never passes
 * SG_AGENT_MAX_PAYLOAD; a refused one names a known error code and a
 * sentence; nothing is left allocated either way (LeakSanitizer).
 */
#include <string.h>

#include "agent_proto.h"
#include "decode.h"
#include "fuzz.h"

static void check_fail(const sg_agent_fail_t *f)
{
    CHECK(f->code >= SG_AGENT_ERR_BAD_REQUEST && f->code <= SG_AGENT_ERR_IO);
    CHECK(memchr(f->msg, '\0', sizeof(f->msg)) != NULL && f->msg[0] != '\0');
}

static void put_cstr(sg_agent_buf_t *b, const char *s)
{
    CHECK(s != NULL);
    CHECK(sg_agent_put_str(b, s, strlen(s)) == 0);
}

static void one(uint8_t type, const uint8_t *pl, size_t len)
{
    sg_agent_buf_t b;
    sg_agent_fail_t f;

    sg_agent_buf_init(&b);
    memset(&f, 0, sizeof(f));
    switch (type) {
    case SG_AGENT_EXEC: {
        sg_agent_exec_req_t x;
        if (sg_agent_exec_req_decode(pl, len, &x, &f) != 0) {
            check_fail(&f);
            CHECK(x.setup_cmd == NULL && x.kernel_cmd == NULL);
            break;
        }
        sg_agent_put_u32(&b, x.timeout_ms);
        sg_agent_put_u32(&b, x.output_cap);
        put_cstr(&b, x.setup_cmd);
        put_cstr(&b, x.setup_stage);
        put_cstr(&b, x.run_cmd);
        put_cstr(&b, x.file_path);
        put_cstr(&b, x.kernel_cmd);
        CHECK(x.code_len == 0 || (x.code >= pl && x.code + x.code_len == pl + len));
        sg_agent_put_rest(&b, x.code, x.code_len);
        CHECK(b.len == len && (len == 0 || memcmp(b.base, pl, len) == 0));
        sg_agent_exec_req_free(&x);
        break;
    }
    case SG_AGENT_PUT_FILE: {
        sg_agent_put_req_t p;
        if (sg_agent_put_req_decode(pl, len, &p, &f) != 0) {
            check_fail(&f);
            CHECK(p.path == NULL);
            break;
        }
        CHECK(p.path[0] != '\0');
        put_cstr(&b, p.path);
        sg_agent_put_u32(&b, p.mode);
        sg_agent_put_rest(&b, p.data, p.data_len);
        CHECK(b.len == len && memcmp(b.base, pl, len) == 0);
        free(p.path);
        break;
    }
    case SG_AGENT_GET_FILE: {
        sg_agent_get_req_t g;
        if (sg_agent_get_req_decode(pl, len, &g, &f) != 0) {
            check_fail(&f);
            CHECK(g.path == NULL);
            break;
        }
        CHECK(g.path[0] != '\0');
        CHECK(g.max_bytes <= SG_AGENT_MAX_PAYLOAD);
        put_cstr(&b, g.path);
        CHECK(b.len + 4 == len && memcmp(b.base, pl, b.len) == 0);
        /* the clamp is the only change */
        uint32_t asked =
            (uint32_t)pl[len - 4] << 24 | (uint32_t)pl[len - 3] << 16 | (uint32_t)pl[len - 2] << 8 | pl[len - 1];
        CHECK(g.max_bytes == (asked > SG_AGENT_MAX_PAYLOAD ? SG_AGENT_MAX_PAYLOAD : asked));
        free(g.path);
        break;
    }
    default:
        break; /* the agent answers BAD_REQUEST */
    }
    sg_agent_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;

    while (size - off >= SG_AGENT_HEADER_SIZE) {
        const uint8_t *m = data + off;
        sg_agent_header_t h;
        uint32_t len = (uint32_t)m[8] << 24 | (uint32_t)m[9] << 16 | (uint32_t)m[10] << 8 | m[11];

        if (len > SG_AGENT_MAX_PAYLOAD || size - off - SG_AGENT_HEADER_SIZE < len)
            break; /* the agent exits: it cannot resynchronise */
        /* the payload in a buffer of its own, so ASan sees any read past it */
        uint8_t *pl = malloc(len != 0 ? len : 1);
        memcpy(pl, m + SG_AGENT_HEADER_SIZE, len);
        if (sg_agent_header_decode(m, &h) == 0) {
            CHECK(h.len == len);
            one(h.type, pl, h.len);
        }
        free(pl);
        off += SG_AGENT_HEADER_SIZE + len;
    }
    return 0;
}
