#include "json.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_object *sg_json_parse_object(const char *p, size_t len, char *err, size_t errlen)
{
    json_tokener *tok;
    json_object *o;
    enum json_tokener_error jerr;
    size_t end;

    if (len == 0) {
        snprintf(err, errlen, "the request body is empty; a JSON object is expected");
        return NULL;
    }
    if (len > (size_t)INT32_MAX || memchr(p, '\0', len) != NULL) {
        snprintf(err, errlen, "the request body is not valid JSON");
        return NULL;
    }
    tok = json_tokener_new();
    if (tok == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    o = json_tokener_parse_ex(tok, p, (int)len);
    jerr = json_tokener_get_error(tok);
    end = json_tokener_get_parse_end(tok);
    if (jerr == json_tokener_continue) {
        /* a bare number or literal might go on: the end of the body ends it */
        o = json_tokener_parse_ex(tok, "", 1);
        jerr = json_tokener_get_error(tok);
        end = len;
    }
    if (jerr != json_tokener_success) { /* o == NULL with success is JSON null */
        snprintf(err, errlen, "the request body is not valid JSON (%s at offset %zu)",
                 jerr == json_tokener_continue ? "unexpected end" : json_tokener_error_desc(jerr), end);
        goto Error;
    }
    for (size_t i = end; i < len; i++) { /* trailing whitespace is fine, anything else is not */
        if (strchr(" \t\r\n", p[i]) == NULL) {
            snprintf(err, errlen, "the request body is not valid JSON (unexpected data at offset %zu)", i);
            goto Error;
        }
    }
    json_tokener_free(tok);
    if (o == NULL || !json_object_is_type(o, json_type_object)) {
        snprintf(err, errlen, "the request body must be a JSON object");
        json_object_put(o);
        return NULL;
    }
    return o;
Error:
    json_object_put(o);
    json_tokener_free(tok);
    return NULL;
}

/* The field key of o when it is of type t (json_type_double also takes an
 * integer): 1 with *v set, 0 if absent or null, -1 with "field \"key\" must
 * be <must>" in err. */
static int field(json_object *o, const char *key, json_type t, const char *must, json_object **v, char *err,
                 size_t errlen)
{
    *v = NULL;
    if (!json_object_object_get_ex(o, key, v) || *v == NULL)
        return 0; /* absent, or JSON null */
    if (!json_object_is_type(*v, t) && !(t == json_type_double && json_object_is_type(*v, json_type_int))) {
        snprintf(err, errlen, "field \"%s\" must be %s", key, must);
        return -1;
    }
    return 1;
}

int sg_json_get_str(json_object *o, const char *key, const char **out, size_t *len, char *err, size_t errlen)
{
    json_object *v;
    int rc = field(o, key, json_type_string, "a string", &v, err, errlen);
    if (rc != 1)
        return rc;
    *out = json_object_get_string(v);
    if (len != NULL)
        *len = (size_t)json_object_get_string_len(v);
    return 1;
}

int sg_json_get_bool(json_object *o, const char *key, int *out, char *err, size_t errlen)
{
    json_object *v;
    int rc = field(o, key, json_type_boolean, "true or false", &v, err, errlen);
    if (rc != 1)
        return rc;
    *out = json_object_get_boolean(v);
    return 1;
}

int sg_json_get_num(json_object *o, const char *key, double *out, char *err, size_t errlen)
{
    json_object *v;
    int rc = field(o, key, json_type_double, "a number", &v, err, errlen);
    if (rc != 1)
        return rc;
    *out = json_object_get_double(v);
    if (!isfinite(*out)) { /* json-c reads NaN and Infinity */
        snprintf(err, errlen, "field \"%s\" must be a finite number", key);
        return -1;
    }
    return 1;
}

int sg_json_get_str_array(json_object *o, const char *key, json_object **out, char *err, size_t errlen)
{
    json_object *v;
    int rc = field(o, key, json_type_array, "an array of strings", &v, err, errlen);
    if (rc != 1)
        return rc;
    for (size_t i = 0; i < json_object_array_length(v); i++)
        if (!json_object_is_type(json_object_array_get_idx(v, i), json_type_string)) {
            snprintf(err, errlen, "field \"%s\" must be an array of strings", key);
            return -1;
        }
    *out = v;
    return 1;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *p, size_t left)
{
    unsigned char c = p[0];
    size_t n;
    unsigned cp;

    if (c >= 0x01 && c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07;
    else
        return 0;
    if (left < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

char *sg_utf8_sanitize(const char *p, size_t len, size_t *outlen)
{
    const unsigned char *s = (const unsigned char *)p;
    /* worst case: every byte becomes 3 */
    char *out = sg_xmalloc(len * 3 + 1), *d = out;
    for (size_t i = 0; i < len;) {
        size_t n = utf8_seq(s + i, len - i);
        if (n == 0) {
            memcpy(d, "\xef\xbf\xbd", 3);
            d += 3;
            i++;
        } else {
            memcpy(d, s + i, n);
            d += n;
            i += n;
        }
    }
    *d = '\0';
    *outlen = (size_t)(d - out);
    return out;
}

void sg_json_add_bytes(json_object *o, const char *key, const char *p, size_t len)
{
    size_t n;
    char *s = sg_utf8_sanitize(p, len, &n);
    json_object_object_add(o, key, json_object_new_string_len(s, (int)n));
    free(s);
}

json_object *sg_json_new_double(double v, int decimals)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "%.*f", decimals, v);
    return json_object_new_double_s(v, buf);
}

size_t sg_utf8_complete_len(const char *p, size_t len)
{
    const unsigned char *s = (const unsigned char *)p;
    /* look back at most 3 bytes for the lead byte of an unfinished sequence */
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        unsigned char c = s[len - back];
        if ((c & 0xc0) == 0x80)
            continue; /* a continuation byte: keep looking for its lead */
        size_t need = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 1;
        return need > back ? len - back : len;
    }
    return len;
}
