/*
 * fuzz_template_name — the {name} of DELETE /templates/{name}, a path
 * segment percent-decoded into a template name (sg_gw_template_name,
 * gateway/core/fields.c).
 *
 * Input: one byte choosing the output buffer's size, then the segment.
 * Invariants: a name that decodes is non-empty, has no NUL, fits its
 * buffer, is no longer than the segment, and is exactly what a plain
 * decoder reads (every "%XX" one byte, everything else itself); a segment
 * that such a decoder reads to a name that fits, without NUL, decodes.
 */
#include <string.h>

#include "fuzz.h"
#include "fields.h"

static int hexv(int c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    size_t outlen = 1 + fuzz_u8(&in); /* 1..256; the gateway's is 256 */
    char *seg = malloc(in.len != 0 ? in.len : 1), *want = malloc(in.len + 1), out[257];
    size_t w = 0;
    int ok = in.len != 0;

    memcpy(seg, in.p, in.len);
    /* the reference */
    for (size_t i = 0; ok && i < in.len; i++) {
        int c = (unsigned char)seg[i];
        if (c == '%') {
            if (in.len - i < 3 || hexv(seg[i + 1]) < 0 || hexv(seg[i + 2]) < 0) {
                ok = 0;
                break;
            }
            c = hexv(seg[i + 1]) * 16 + hexv(seg[i + 2]);
            i += 2;
        }
        if (c == 0)
            ok = 0;
        want[w++] = (char)c;
    }
    if (w + 1 > outlen)
        ok = 0;

    memset(out, 0x55, sizeof(out));
    int rc = sg_gw_template_name(h2o_iovec_init(seg, in.len), out, outlen);
    CHECK((rc == 0) == ok);
    if (rc == 0) {
        size_t n = strlen(out);
        CHECK(n == w && n >= 1 && n < outlen && n <= in.len && memcmp(out, want, n) == 0);
    }
    CHECK((unsigned char)out[outlen] == 0x55); /* nothing past the buffer */
    free(seg);
    free(want);
    return 0;
}
