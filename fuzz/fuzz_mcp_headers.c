/*
 * fuzz_mcp_headers — the MCP transport's header values (handler/mcp_wire.c):
 * an Mcp-Name (plain, or "=?base64?...?=") as the server decodes it before
 * comparing it with the body, the Origin allowlist, the MCP-Session-Id shape.
 *
 * Input: one byte choosing the output size, then the header value.
 * Invariants: a plain value decodes to itself; a decoded sentinel value is
 * at most three quarters of its base64, NUL-terminated, and encodes back to
 * a string that decodes to the same bytes; nothing is written past the
 * output; an Origin is listed in a list made of it alone, and not in one
 * made of it with a byte more; a well-shaped session id is 32 lower-case hex
 * digits.
 */
#include <openssl/evp.h>
#include <string.h>

#include "fuzz.h"
#include "mcp.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    size_t outlen = (size_t)fuzz_u8(&in) * 8 + 1;
    const char *v = (const char *)in.p;
    size_t vlen = in.len, len = 0;
    char *out = malloc(outlen + 16);
    memset(out, 0x5a, outlen + 16);

    if (sg_mcp_decode_name(v, vlen, out, outlen, &len) == 0) {
        CHECK(len < outlen && out[len] == '\0');
        int sentinel = vlen >= 11 && memcmp(v, "=?base64?", 9) == 0 && memcmp(v + vlen - 2, "?=", 2) == 0;
        if (!sentinel) {
            CHECK(len == vlen && memcmp(out, v, vlen) == 0);
        } else {
            CHECK(len <= (vlen - 11) / 4 * 3);
            char *b64 = malloc(len / 3 * 4 + 8), *again = malloc(len + 16);
            int n = EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)out, (int)len);
            char *wrapped = malloc((size_t)n + 12);
            memcpy(wrapped, "=?base64?", 9);
            memcpy(wrapped + 9, b64, (size_t)n);
            memcpy(wrapped + 9 + n, "?=", 2);
            size_t len2 = 0;
            CHECK(sg_mcp_decode_name(wrapped, (size_t)n + 11, again, len + 16, &len2) == 0);
            CHECK(len2 == len && memcmp(again, out, len) == 0);
            free(b64);
            free(again);
            free(wrapped);
        }
    }
    for (size_t i = outlen; i < outlen + 16; i++)
        CHECK((unsigned char)out[i] == 0x5a);
    free(out);

    /* the allowlist: an entry without commas, spaces or NUL */
    if (vlen != 0 && vlen < 256 && memchr(v, ',', vlen) == NULL && memchr(v, ' ', vlen) == NULL &&
        memchr(v, '\0', vlen) == NULL) {
        char list[300];
        memcpy(list, v, vlen);
        list[vlen] = '\0';
        CHECK(sg_mcp_origin_listed(list, v, vlen));
        list[vlen] = 'x';
        list[vlen + 1] = '\0';
        CHECK(!sg_mcp_origin_listed(list, v, vlen));
    }
    if (sg_mcp_session_id_ok(v, vlen)) {
        CHECK(vlen == 32);
        for (size_t i = 0; i < vlen; i++)
            CHECK((v[i] >= '0' && v[i] <= '9') || (v[i] >= 'a' && v[i] <= 'f'));
    }
    return 0;
}
