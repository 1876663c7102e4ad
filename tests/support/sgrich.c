/*
 * sgrich.c — checks of rich results (see sgrich.h).
 */
#include "sgrich.h"
#include "sgtest.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* The test's own decoder (not the proxy's): a table lookup. */
static int b64v(unsigned char c)
{
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *p = c != '\0' ? strchr(alphabet, c) : NULL;
    return p != NULL ? (int)(p - alphabet) : -1;
}

uint8_t *sgrich_b64decode(const char *s, size_t len, size_t *out_len)
{
    size_t pad = 0, n = 0;
    uint8_t *out;
    uint32_t acc = 0;

    if (len == 0 || len % 4 != 0)
        return NULL;
    if (s[len - 1] == '=')
        pad = s[len - 2] == '=' ? 2 : 1;
    out = malloc(len / 4 * 3);
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        int v = i >= len - pad ? 0 : b64v((unsigned char)s[i]);
        if (v < 0) {
            free(out);
            return NULL;
        }
        acc = acc << 6 | (uint32_t)v;
        if (i % 4 == 3) {
            out[n++] = (uint8_t)(acc >> 16);
            out[n++] = (uint8_t)(acc >> 8);
            out[n++] = (uint8_t)acc;
            acc = 0;
        }
    }
    *out_len = n - pad;
    return out;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

bool sgrich_png_decode(const uint8_t *p, size_t len, uint32_t *w, uint32_t *h)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    size_t off = 8, want = 0;
    int channels = 0, chunk = 0, ended = 0, zrc = Z_OK;
    uint8_t *raw = NULL;
    z_stream z;
    bool ok = false;

    memset(&z, 0, sizeof(z));
    if (len < 8 || memcmp(p, sig, 8) != 0 || inflateInit(&z) != Z_OK)
        return false;
    while (off + 12 <= len && !ended) {
        uint32_t clen = be32(p + off);
        const uint8_t *type = p + off + 4, *data = p + off + 8;

        if (clen > len - off - 12)
            goto Exit;
        if (crc32(crc32(0, NULL, 0), type, clen + 4) != be32(data + clen))
            goto Exit;
        if (chunk == 0) {
            /* IHDR: width, height, bit depth 8, colour type, interlace 0 */
            if (memcmp(type, "IHDR", 4) != 0 || clen != 13 || data[8] != 8 || data[12] != 0)
                goto Exit;
            *w = be32(data);
            *h = be32(data + 4);
            channels = data[9] == 0 ? 1 : data[9] == 2 ? 3 : data[9] == 3 ? 1 : data[9] == 4 ? 2 : data[9] == 6 ? 4 : 0;
            if (channels == 0 || *w == 0 || *h == 0 || *w > 20000 || *h > 20000)
                goto Exit;
            want = (size_t)*h * (1 + (size_t)*w * (size_t)channels);
            raw = malloc(want + 1);
            if (raw == NULL)
                goto Exit;
            z.next_out = raw;
            z.avail_out = (uInt)want + 1;
        } else if (memcmp(type, "IDAT", 4) == 0) {
            z.next_in = (Bytef *)data;
            z.avail_in = clen;
            zrc = inflate(&z, Z_NO_FLUSH);
            if (zrc != Z_OK && zrc != Z_STREAM_END)
                goto Exit;
        } else if (memcmp(type, "IEND", 4) == 0) {
            ended = 1;
        }
        chunk++;
        off += 12 + clen;
    }
    ok = ended && off == len && zrc == Z_STREAM_END && z.total_out == want;
Exit:
    inflateEnd(&z);
    free(raw);
    return ok;
}

static const char *str_field(json_object *o, const char *key)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

void sgrich_check_one(json_object *res)
{
    const char *type, *mime, *data;
    json_object *v;

    SG_CHECK(json_object_is_type(res, json_type_object), res, "a result is an object");
    type = str_field(res, "type");
    mime = str_field(res, "mime");
    data = str_field(res, "data");
    SG_CHECK(type != NULL && mime != NULL && data != NULL, res, "a result has type, mime and data strings");
    SG_CHECK(json_object_object_get_ex(res, "main", &v) && json_object_is_type(v, json_type_boolean), res,
             "a result has a boolean main");
    SG_CHECK(json_object_object_length(res) == 4, res, "a result has no other field");
    if (strcmp(type, "image") == 0) {
        size_t n;
        uint8_t *bytes = sgrich_b64decode(data, strlen(data), &n);
        SG_CHECK(bytes != NULL, res, "an image's data is base64");
        SG_CHECK(strcmp(mime, "image/png") == 0 || strcmp(mime, "image/jpeg") == 0 || strcmp(mime, "image/gif") == 0 ||
                     strcmp(mime, "image/webp") == 0,
                 res, "an image mime");
        free(bytes);
    } else if (strcmp(type, "html") == 0) {
        SG_CHECK(strcmp(mime, "text/html") == 0, res, "html is text/html");
    } else {
        SG_CHECK(strcmp(type, "text") == 0, res, "type is image, text or html");
        SG_CHECK(strncmp(mime, "text/", 5) == 0 && strcmp(mime, "text/html") != 0, res, "a text mime");
    }
}

json_object *sgrich_check(json_object *r)
{
    json_object *results = SG_ARR(r, "results"), *files = SG_ARR(r, "files");

    (void)SG_BOOL(r, "results_truncated");
    (void)SG_BOOL(r, "files_truncated");
    for (size_t i = 0; i < json_object_array_length(results); i++)
        sgrich_check_one(json_object_array_get_idx(results, i));
    for (size_t i = 0; i < json_object_array_length(files); i++) {
        json_object *f = json_object_array_get_idx(files, i);
        (void)SG_STR(f, "path");
        SG_CHECK(SG_INT(f, "size") >= 0, f, "a file's size");
    }
    return results;
}

static json_object *nth(json_object *r, const char *mime, int main, size_t idx)
{
    json_object *results = sgrich_check(r);

    for (size_t i = 0; i < json_object_array_length(results); i++) {
        json_object *res = json_object_array_get_idx(results, i), *v;
        if (strcmp(str_field(res, "mime"), mime) != 0)
            continue;
        json_object_object_get_ex(res, "main", &v);
        if (main >= 0 && json_object_get_boolean(v) != main)
            continue;
        if (idx-- == 0)
            return res;
    }
    return NULL;
}

size_t sgrich_count(json_object *r, const char *mime, int main)
{
    size_t n = 0;
    while (nth(r, mime, main, n) != NULL)
        n++;
    return n;
}

const char *sgrich_data(json_object *r, const char *mime, size_t idx)
{
    json_object *res = nth(r, mime, -1, idx);
    return res != NULL ? str_field(res, "data") : NULL;
}

void sgrich_expect_png(json_object *r, size_t idx, uint32_t w, uint32_t h)
{
    const char *data = sgrich_data(r, "image/png", idx);
    uint32_t pw = 0, ph = 0;
    size_t n;
    uint8_t *png;

    SG_CHECK(data != NULL, r, "image/png number %zu", idx);
    png = sgrich_b64decode(data, strlen(data), &n);
    SG_CHECK(png != NULL, r, "the PNG's base64 decodes");
    if (!sgrich_png_decode(png, n, &pw, &ph)) {
        free(png);
        SG_FAIL(r, "image/png number %zu does not decode as a PNG", idx);
    }
    free(png);
    SG_CHECK(pw == w && ph == h, r, "the PNG is %ux%u, not %ux%u", pw, ph, w, h);
}
