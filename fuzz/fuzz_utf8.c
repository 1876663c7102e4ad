/*
 * fuzz_utf8 — a sandbox's output on its way into JSON replies: invalid
 * UTF-8 replaced (sg_utf8_sanitize, common/json.c) and a byte stream cut
 * into pieces that do not end inside a character (sg_utf8_complete_len,
 * the streaming path).
 *
 * Input: one byte choosing a cut, then the output bytes. Invariants: the
 * sanitized text is valid UTF-8 without NUL (checked by an independent
 * decoder), is the input itself when that was already valid, is unchanged
 * by a second pass, and makes a JSON string json-c reads back; a cut holds
 * back at most 3 bytes, and on valid text it falls on a character boundary,
 * holding back only an unfinished character.
 */
#include <string.h>

#include "fuzz.h"
#include "json.h"
#include "utf8_ref.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    uint8_t cut = fuzz_u8(&in);
    const char *p = (const char *)in.p;
    size_t n, n2;
    char *out, *again;

    out = sg_utf8_sanitize(p, in.len, &n);
    CHECK(out != NULL && out[n] == '\0' && n <= in.len * 3);
    CHECK(utf8_ref_valid((const unsigned char *)out, n));
    int in_valid = utf8_ref_valid(in.p, in.len);
    if (in_valid)
        CHECK(n == in.len && memcmp(out, p, n) == 0);
    again = sg_utf8_sanitize(out, n, &n2);
    CHECK(again != NULL && n2 == n && memcmp(again, out, n) == 0);
    free(again);

    json_object *o = json_object_new_object();
    sg_json_add_bytes(o, "stdout", p, in.len);
    json_object *back = json_tokener_parse(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object *v;
    CHECK(back != NULL && json_object_object_get_ex(back, "stdout", &v));
    CHECK((size_t)json_object_get_string_len(v) == n && memcmp(json_object_get_string(v), out, n) == 0);
    json_object_put(back);
    json_object_put(o);
    free(out);

    /* cutting: any prefix of the stream */
    size_t c = in.len == 0 ? 0 : cut % (in.len + 1);
    size_t k = sg_utf8_complete_len(p, c);
    CHECK(k <= c && c - k <= 3);
    if (in_valid) {
        /* the kept part is whole characters; what is held back starts one */
        CHECK(utf8_ref_valid(in.p, k));
        if (k < c)
            CHECK(in.p[k] >= 0xc2);
        /* and a cut at a boundary keeps everything */
        if (c == in.len)
            CHECK(k == c);
    }
    return 0;
}
