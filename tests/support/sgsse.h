/*
 * sgsse.h — a test client for streamed replies (Server-Sent Events), with a
 * parser of its own (not the product's): lines may end with LF, CRLF or CR
 * and may be split anywhere across reads; "data:" lines of one event join
 * with LF; ":" lines are comments; a blank line ends an event; one space
 * after the colon is dropped.
 */
#ifndef SANDGATE_SGSSE_H
#define SANDGATE_SGSSE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char name[32]; /* "message" when the event had no event: line */
    char *data;    /* NUL-terminated */
    size_t data_len;
} sgsse_event_t;

typedef struct sgsse_parser sgsse_parser_t;

typedef struct {
    long status; /* 0 when the transfer failed before a reply */
    int curl_rc; /* CURLcode of the transfer */
    char error[256];
    char ctype[128];
    sgsse_event_t *ev;
    size_t nev;
    size_t nreads; /* pieces the body came in */
    size_t body_bytes;
    bool unterminated; /* bytes after the last blank line */
    bool oom;
} sgsse_result_t;

/* The parser alone: feed pieces, then finish (marks an unterminated tail). */
sgsse_parser_t *sgsse_parser_new(sgsse_result_t *into);
void sgsse_parser_feed(sgsse_parser_t *p, const char *s, size_t len);
void sgsse_parser_finish(sgsse_parser_t *p);
void sgsse_parser_free(sgsse_parser_t *p);

/* POSTs json_body (application/json) to url with "Authorization: Bearer
 * <token>" unless token is NULL, and the extra header lines (NULL-
 * terminated, may be NULL); parses the reply as it arrives. Returns 0 when
 * the transfer completed (any status), -1 otherwise (out->error says why;
 * the events received so far are kept). */
int sgsse_post(const char *url, const char *token, const char *json_body, const char *const *headers, long timeout_s,
               sgsse_result_t *out);
void sgsse_result_free(sgsse_result_t *r);

/* The concatenation of the "data" string of every event named `name` whose
 * data is a JSON object {"data": "..."} (malloc'd, NUL-terminated, *len
 * bytes). Returns 0, or -1 when such an event's data is not that shape. */
int sgsse_concat(const sgsse_result_t *r, const char *name, char **out, size_t *len);
/* The last event named name, or NULL. */
const sgsse_event_t *sgsse_last(const sgsse_result_t *r, const char *name);

#endif
