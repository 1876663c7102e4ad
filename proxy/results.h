/*
 * results.h — an execution's rich results and files out, as the proxy
 * keeps them: every record of the sandbox's result channel (agent_proto.h,
 * "The result channel") checked as the untrusted bytes it is, rebuilt from
 * the fields it may have, and kept under the execution's caps; the files
 * the agent listed. Pure logic on json-c: one owner, any thread.
 *
 * A result, as the API shows it (docs/proxy-api.md):
 *   {"type": "image"|"text"|"html", "mime", "data", "main": bool}
 * with these pairs only: image with image/png, image/jpeg, image/gif or
 * image/webp, its data strict base64 of bytes that begin as that format
 * does; text with text/plain, text/markdown or text/latex; html with
 * text/html; text and html data valid UTF-8 (sanitized as stdout is). A
 * record that is not exactly that (not one JSON object, another type or
 * mime, bad base64, "main" not a boolean) is dropped; once a result would
 * pass max_count results or max_bytes bytes of results (each counted as
 * its JSON text), it and every later one are dropped. Any drop sets
 * truncated.
 */
#ifndef SANDGATE_RESULTS_H
#define SANDGATE_RESULTS_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#define SG_RESULTS_FILES_JSON_MAX (32u << 10) /* bytes of the files list: it rides in every result event */

typedef struct {
    long max_count, max_bytes, max_files;
    json_object *list; /* the results kept, an array */
    size_t bytes;
    int truncated;
    int full;           /* a cap was reached: every later result is dropped */
    json_object *files; /* [{"path","size"}], an array */
    size_t files_bytes;
    int files_truncated;
} sg_results_t;

void sg_results_init(sg_results_t *r, long max_count, long max_bytes, long max_files);
void sg_results_free(sg_results_t *r);

/* Checks one record; the result kept (borrowed from r), or NULL when it
 * was dropped. */
json_object *sg_results_add(sg_results_t *r, const uint8_t *rec, size_t len);

/* The agent's FILES (agent_proto.h; entries as sg_agent_reply_decode
 * checked them): the list replaced by these, at most max_files and
 * SG_RESULTS_FILES_JSON_MAX bytes. */
void sg_results_set_files(sg_results_t *r, uint32_t flags, uint32_t count, const uint8_t *entries, size_t len);

/* Adds "results" (an empty array unless with_results), "results_truncated",
 * "files" and "files_truncated" to an execution result o. */
void sg_results_to_json(const sg_results_t *r, json_object *o, int with_results);

#endif
