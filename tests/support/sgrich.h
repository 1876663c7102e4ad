/*
 * sgrich.h — checks of rich results (docs/proxy-api.md, "Rich results")
 * for the integration and security suites: every result well-formed, base64
 * decoded, and PNGs decoded for real (chunk CRCs, IHDR, the IDAT stream
 * inflated with zlib to exactly the size IHDR promises).
 *
 * Asserting functions: test thread only.
 */
#ifndef SANDGATE_SGRICH_H
#define SANDGATE_SGRICH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

/* Strict base64 decode (malloc'd, *len bytes), or NULL. */
uint8_t *sgrich_b64decode(const char *s, size_t len, size_t *out_len);

/* Decodes a PNG (8-bit, non-interlaced; what matplotlib and Pillow write):
 * true with *w and *h when every chunk's CRC holds, IHDR comes first, IEND
 * last, and the IDAT data inflates to h * (1 + w * channels) bytes. */
bool sgrich_png_decode(const uint8_t *p, size_t len, uint32_t *w, uint32_t *h);

/* Asserts that execution result r has "results" (an array of well-formed
 * results: type image/text/html with a matching mime, string data, boolean
 * main, no other field), "results_truncated", "files" and
 * "files_truncated"; returns the results array (borrowed). */
json_object *sgrich_check(json_object *r);
/* Asserts one result is well-formed (as above). */
void sgrich_check_one(json_object *res);

/* The number of results of r with this mime (and main, unless main < 0). */
size_t sgrich_count(json_object *r, const char *mime, int main);
/* The data of the idx-th result of r with this mime, or NULL (borrowed). */
const char *sgrich_data(json_object *r, const char *mime, size_t idx);
/* Asserts that the idx-th image/png of r decodes, with size w x h. */
void sgrich_expect_png(json_object *r, size_t idx, uint32_t w, uint32_t h);

#endif
