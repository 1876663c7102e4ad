/*
 * json.h — json-c helpers for request validation and replies.
 *
 * Field getters return 1 when the field is present with the right type,
 * 0 when it is absent or null, -1 when it has the wrong type; on -1 err holds
 * a sentence naming the field.
 */
#ifndef SANDGATE_JSON_H
#define SANDGATE_JSON_H

#include <json-c/json.h>
#include <stddef.h>

/* Parses a body that must be one JSON object. NULL on failure with err set. */
json_object *sg_json_parse_object(const char *p, size_t len, char *err, size_t errlen);

int sg_json_get_str(json_object *o, const char *key, const char **out, size_t *len, char *err, size_t errlen);
int sg_json_get_bool(json_object *o, const char *key, int *out, char *err, size_t errlen);
/* Integers and reals alike; NaN and the infinities (json-c reads them) are
 * refused as not numbers (-1). */
int sg_json_get_num(json_object *o, const char *key, double *out, char *err, size_t errlen);
/* An array whose every element is a string. */
int sg_json_get_str_array(json_object *o, const char *key, json_object **out, char *err, size_t errlen);

/* Copies p[0..len) with every invalid UTF-8 sequence (and NUL) replaced by
 * U+FFFD, so that the JSON made from it is always valid. malloc'd, NUL
 * terminated; *outlen gets its length. Never NULL (util.h: out of memory is
 * fatal). */
char *sg_utf8_sanitize(const char *p, size_t len, size_t *outlen);
/* A JSON number printed with at most `decimals` digits after the point
 * (0.001234 rather than 0.0012339999999999999). */
json_object *sg_json_new_double(double v, int decimals);
/* The length of the longest prefix of p[0..len) that does not end inside a
 * UTF-8 sequence which more bytes could still complete (at most 3 bytes are
 * held back). For cutting a byte stream into valid pieces. */
size_t sg_utf8_complete_len(const char *p, size_t len);
/* json_object_object_add of a string made from arbitrary bytes. */
void sg_json_add_bytes(json_object *o, const char *key, const char *p, size_t len);

#endif
