/*
 * fuzz_results — the records of a sandbox's result channel as the proxy
 * takes them (sg_results_add, proxy/results.c): bytes the tenant's code can
 * write at will. Input: one byte of caps, then records separated by the
 * two bytes "\n\0".
 *
 * Invariants: every result kept is exactly {"type","mime","data","main"}
 * with an allowed type/mime pair, string data (base64 that decodes to the
 * format's magic for images) and a boolean main; the kept list stays within
 * max_count results and max_bytes bytes of JSON; anything dropped sets
 * truncated; and the list serializes to JSON that parses back the same.
 */
#include <string.h>

#include "fuzz.h"
#include "results.h"

static void check_result(json_object *res)
{
    json_object *v;
    const char *type, *mime;

    CHECK(json_object_is_type(res, json_type_object) && json_object_object_length(res) == 4);
    CHECK(json_object_object_get_ex(res, "type", &v) && json_object_is_type(v, json_type_string));
    type = json_object_get_string(v);
    CHECK(json_object_object_get_ex(res, "mime", &v) && json_object_is_type(v, json_type_string));
    mime = json_object_get_string(v);
    CHECK(json_object_object_get_ex(res, "data", &v) && json_object_is_type(v, json_type_string));
    CHECK(json_object_object_get_ex(res, "main", &v) && json_object_is_type(v, json_type_boolean));
    if (strcmp(type, "image") == 0)
        CHECK(strncmp(mime, "image/", 6) == 0);
    else if (strcmp(type, "html") == 0)
        CHECK(strcmp(mime, "text/html") == 0);
    else
        CHECK(strcmp(type, "text") == 0 && strncmp(mime, "text/", 5) == 0 && strcmp(mime, "text/html") != 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    uint8_t caps = fuzz_u8(&in);
    sg_results_t r;
    size_t kept = 0, dropped = 0, bytes = 0;

    sg_results_init(&r, 1 + (caps & 0x7), caps & 0x80 ? 256 : 1 << 20, 4);
    while (in.len > 0) {
        const uint8_t *end = NULL;
        for (size_t i = 0; i + 1 < in.len; i++) {
            if (in.p[i] == '\n' && in.p[i + 1] == '\0') {
                end = in.p + i;
                break;
            }
        }
        size_t n = end != NULL ? (size_t)(end - in.p) : in.len;
        json_object *res = sg_results_add(&r, in.p, n);
        if (res != NULL) {
            check_result(res);
            kept++;
        } else {
            dropped++;
        }
        in.p += end != NULL ? n + 2 : n;
        in.len -= end != NULL ? n + 2 : n;
    }
    CHECK(json_object_array_length(r.list) == kept);
    CHECK((long)kept <= r.max_count);
    CHECK(r.bytes <= (size_t)r.max_bytes);
    CHECK(dropped == 0 || r.truncated);
    for (size_t i = 0; i < kept; i++)
        bytes += strlen(json_object_to_json_string_ext(json_object_array_get_idx(r.list, i), JSON_C_TO_STRING_PLAIN));
    CHECK(bytes == r.bytes);
    json_object *o = json_object_new_object();
    sg_results_to_json(&r, o, 1);
    json_object *back = json_tokener_parse(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    CHECK(back != NULL && json_object_equal(back, o));
    json_object_put(back);
    json_object_put(o);
    sg_results_free(&r);
    return 0;
}
