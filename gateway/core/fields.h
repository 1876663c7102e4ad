/*
 * fields.h — checks of what a client sends the gateway, as pure functions
 * (unit tested, fuzzed): every number is checked finite and in range
 * before any conversion, so no cast sees NaN, an infinity or a value out
 * of its type's range (json-c reads the literals NaN and Infinity, and
 * 1e308 is a valid JSON number); a name in a path is decoded whole or not
 * at all.
 */
#ifndef SANDGATE_FIELDS_H
#define SANDGATE_FIELDS_H

#include <h2o.h>
#include <json-c/json.h>
#include <stddef.h>

/* Field `field` of body, when present: a JSON number, finite, more than
 * `above` (whole: a whole number of at least 1 instead), at most cap.
 * Returns 0 when absent, 1 with *out set, or -1 with *code ("bad_field",
 * or "above_cap" past the cap) and a sentence naming the field. */
int sg_gw_number_field(json_object *body, const char *field, double above, int whole, double cap, double *out,
                       const char **code, char *detail, size_t detail_len);

/* A number given as text (a query parameter): all of s[0..len) a finite
 * decimal number within [min, max]. 0 with *out set, or -1. */
int sg_gw_number_text(const char *s, size_t len, double min, double max, double *out);

/* Percent-decodes a template name from a path segment; 0, or -1 if it
 * cannot be one (too long, NUL, bad escape). */
int sg_gw_template_name(h2o_iovec_t seg, char *out, size_t outlen);

#endif
