/*
 * results.c — an execution's rich results and files out (see results.h).
 */
#include "results.h"
#include "agent_proto.h"
#include "json.h"

#include <string.h>

#define RECORD_DEPTH 4 /* an object of strings and a boolean needs 2 */

void sg_results_init(sg_results_t *r, long max_count, long max_bytes, long max_files)
{
    memset(r, 0, sizeof(*r));
    r->max_count = max_count;
    r->max_bytes = max_bytes;
    r->max_files = max_files;
    r->list = json_object_new_array();
    r->files = json_object_new_array();
}

void sg_results_free(sg_results_t *r)
{
    json_object_put(r->list);
    json_object_put(r->files);
    r->list = r->files = NULL;
}

/* ---- one record -------------------------------------------------------- */

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Strict base64 (RFC 4648 alphabet, padded, nothing else); its first bytes
 * decoded into head (up to hlen). 0, or -1. */
static int b64_check(const char *s, size_t len, uint8_t *head, size_t *hlen)
{
    size_t i, pad = 0, out = 0;
    uint32_t acc = 0;

    if (len == 0 || len % 4 != 0)
        return -1;
    if (s[len - 1] == '=')
        pad = s[len - 2] == '=' ? 2 : 1;
    for (i = 0; i < len - pad; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0)
            return -1;
        acc = acc << 6 | (uint32_t)v;
        if (i % 4 == 3) {
            for (int k = 2; k >= 0; k--)
                if (out < *hlen)
                    head[out++] = (uint8_t)(acc >> (8 * k));
            acc = 0;
        }
    }
    /* the bits the padding leaves over must be zero, as an encoder writes them */
    if ((pad == 1 && (acc & 0x3)) || (pad == 2 && (acc & 0xf)))
        return -1;
    if (pad == 1 && out + 1 < *hlen) {
        head[out++] = (uint8_t)(acc >> 10);
        head[out++] = (uint8_t)(acc >> 2);
    } else if (pad == 2 && out < *hlen) {
        head[out++] = (uint8_t)(acc >> 4);
    }
    *hlen = out;
    return 0;
}

/* The image formats a result may be, with how their bytes begin. */
static const struct {
    const char *mime;
    const char *magic;
    size_t at, len;
} images[] = {
    {"image/png", "\x89PNG\r\n\x1a\n", 0, 8},
    {"image/jpeg", "\xff\xd8\xff", 0, 3},
    {"image/gif", "GIF8", 0, 4},
    {"image/webp", "WEBP", 8, 4},
};

static int image_ok(const char *mime, const char *data, size_t len)
{
    uint8_t head[16];
    size_t hlen = sizeof(head);

    if (b64_check(data, len, head, &hlen) != 0)
        return 0;
    for (size_t i = 0; i < sizeof(images) / sizeof(images[0]); i++)
        if (strcmp(mime, images[i].mime) == 0)
            return hlen >= images[i].at + images[i].len &&
                   memcmp(head + images[i].at, images[i].magic, images[i].len) == 0 &&
                   (images[i].at == 0 || memcmp(head, "RIFF", 4) == 0);
    return 0;
}

static int text_mime_ok(const char *type, const char *mime)
{
    if (strcmp(type, "html") == 0)
        return strcmp(mime, "text/html") == 0;
    if (strcmp(type, "text") == 0)
        return strcmp(mime, "text/plain") == 0 || strcmp(mime, "text/markdown") == 0 || strcmp(mime, "text/latex") == 0;
    return 0;
}

static const char *string_field(json_object *o, const char *key, size_t *len)
{
    json_object *v;

    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    if (len != NULL)
        *len = (size_t)json_object_get_string_len(v);
    return json_object_get_string(v);
}

/* The record as a result rebuilt from its checked fields, or NULL. */
static json_object *check_record(const uint8_t *rec, size_t len)
{
    json_tokener *tok = json_tokener_new_ex(RECORD_DEPTH);
    json_object *in = NULL, *out = NULL, *v;
    const char *type, *mime, *data;
    size_t data_len;
    int main_result = 0;

    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    in = json_tokener_parse_ex(tok, (const char *)rec, (int)len);
    if (in == NULL || json_tokener_get_error(tok) != json_tokener_success || json_tokener_get_parse_end(tok) != len ||
        !json_object_is_type(in, json_type_object))
        goto Exit;
    if ((type = string_field(in, "type", NULL)) == NULL || (mime = string_field(in, "mime", NULL)) == NULL ||
        (data = string_field(in, "data", &data_len)) == NULL)
        goto Exit;
    if (json_object_object_get_ex(in, "main", &v)) {
        if (!json_object_is_type(v, json_type_boolean))
            goto Exit;
        main_result = json_object_get_boolean(v);
    }
    if (strcmp(type, "image") == 0 ? !image_ok(mime, data, data_len) : !text_mime_ok(type, mime))
        goto Exit;
    out = json_object_new_object();
    json_object_object_add(out, "type", json_object_new_string(type));
    json_object_object_add(out, "mime", json_object_new_string(mime));
    sg_json_add_bytes(out, "data", data, data_len); /* valid UTF-8 whatever the escapes said */
    json_object_object_add(out, "main", json_object_new_boolean(main_result));
Exit:
    json_object_put(in);
    json_tokener_free(tok);
    return out;
}

json_object *sg_results_add(sg_results_t *r, const uint8_t *rec, size_t len)
{
    json_object *res;
    size_t size;

    if (r->full || (long)json_object_array_length(r->list) >= r->max_count || len > (size_t)r->max_bytes - r->bytes) {
        r->full = r->truncated = 1; /* past a cap: this one and the rest */
        return NULL;
    }
    if (len > (size_t)INT32_MAX || (res = check_record(rec, len)) == NULL) {
        r->truncated = 1;
        return NULL;
    }
    json_object_to_json_string_length(res, JSON_C_TO_STRING_PLAIN, &size);
    if (size > (size_t)r->max_bytes - r->bytes) {
        json_object_put(res);
        r->full = r->truncated = 1;
        return NULL;
    }
    r->bytes += size;
    json_object_array_add(r->list, res);
    return res;
}

/* ---- files ------------------------------------------------------------ */

void sg_results_set_files(sg_results_t *r, uint32_t flags, uint32_t count, const uint8_t *entries, size_t len)
{
    sg_agent_reader_t rd;

    json_object_put(r->files);
    r->files = json_object_new_array();
    r->files_bytes = 2;
    r->files_truncated = (flags & SG_AGENT_FILES_MORE) != 0;
    sg_agent_reader_init(&rd, entries, len);
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *path;
        size_t plen, size;
        uint64_t bytes;
        json_object *f;

        if (sg_agent_get_str(&rd, &path, &plen) != 0 || sg_agent_get_u64(&rd, &bytes) != 0)
            break;
        if ((long)json_object_array_length(r->files) >= r->max_files) {
            r->files_truncated = 1;
            break;
        }
        f = json_object_new_object();
        sg_json_add_bytes(f, "path", (const char *)path, plen);
        json_object_object_add(f, "size", json_object_new_int64(bytes > INT64_MAX ? INT64_MAX : (int64_t)bytes));
        json_object_to_json_string_length(f, JSON_C_TO_STRING_PLAIN, &size);
        if (r->files_bytes + size + 1 > SG_RESULTS_FILES_JSON_MAX) {
            json_object_put(f);
            r->files_truncated = 1;
            break;
        }
        r->files_bytes += size + 1;
        json_object_array_add(r->files, f);
    }
}

void sg_results_to_json(const sg_results_t *r, json_object *o, int with_results)
{
    json_object_object_add(o, "results", with_results ? json_object_get(r->list) : json_object_new_array());
    json_object_object_add(o, "results_truncated", json_object_new_boolean(r->truncated));
    json_object_object_add(o, "files", json_object_get(r->files));
    json_object_object_add(o, "files_truncated", json_object_new_boolean(r->files_truncated));
}
