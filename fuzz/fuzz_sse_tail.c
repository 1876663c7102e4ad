/*
 * fuzz_sse_tail — the streamed execution reply as the gateway reads it on
 * its way through, for the "result" event it records the execution from
 * (sg_sse_tail_*, gateway/upstream/sse_tail.c).
 *
 * Input: one byte of mode, then bytes. Mode even: the bytes are the stream
 * itself, anything the proxy could send, fed in pieces the mode byte
 * chooses, with a small or a large max_event. Invariants: the parser
 * agrees with a one-pass reference written from the SSE rules
 * (sse_tail.h) over the whole stream, whatever the pieces: the same
 * result event, and an error event seen or not alike. Mode odd: the
 * bytes are a program's output; the target builds the proxy's stream from
 * it (output events in pieces, then the result event, as sg_http_sse_event
 * writes them) and the parser must hand back exactly the result's JSON.
 */
#include <string.h>

#include <json-c/json.h>

#include "fuzz.h"
#include "sse_tail.h"

/* ---- the reference ---------------------------------------------------- */

typedef struct {
    size_t max_event;
    char event[4096];
    int event_over;
    char *data;
    size_t data_len;
    int data_over, has_data;
    char *result;
    size_t result_len;
    int have_result;
    int saw_error;
} ref_t;

static void ref_line(ref_t *r, const char *l, size_t len)
{
    int over = len > r->max_event + 16;
    if (len == 0) {
        if (!r->event_over && strcmp(r->event, "result") == 0 && r->has_data && !r->data_over) {
            free(r->result);
            r->result = malloc(r->data_len + 1);
            memcpy(r->result, r->data, r->data_len);
            r->result_len = r->data_len;
            r->have_result = 1;
        }
        if (!r->event_over && strcmp(r->event, "error") == 0 && r->has_data)
            r->saw_error = 1;
        r->event[0] = '\0';
        r->event_over = r->data_over = r->has_data = 0;
        r->data_len = 0;
        return;
    }
    const char *colon = memchr(l, ':', len);
    size_t nlen = colon != NULL ? (size_t)(colon - l) : len;
    const char *v = colon != NULL ? colon + 1 : l + len;
    size_t vlen = (size_t)(l + len - v);
    if (nlen == 0)
        return; /* comment */
    if (vlen != 0 && v[0] == ' ')
        v++, vlen--;
    if (nlen == 5 && memcmp(l, "event", 5) == 0) {
        r->event_over = over || vlen >= 16;
        size_t k = r->event_over ? 0 : vlen;
        memcpy(r->event, v, k);
        r->event[k] = '\0';
    } else if (nlen == 4 && memcmp(l, "data", 4) == 0) {
        size_t add = (r->has_data ? 1 : 0) + vlen;
        if (over || r->data_over || r->data_len + add > r->max_event) {
            r->data_over = 1;
        } else {
            if (r->has_data)
                r->data[r->data_len++] = '\n';
            memcpy(r->data + r->data_len, v, vlen);
            r->data_len += vlen;
        }
        r->has_data = 1;
    }
}

/* Lines end with CRLF, LF or CR; an unfinished last line is not a line. */
static void ref_run(ref_t *r, const char *p, size_t len)
{
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] != '\n' && p[i] != '\r')
            continue;
        ref_line(r, p + start, i - start);
        if (p[i] == '\r' && i + 1 < len && p[i + 1] == '\n')
            i++;
        start = i + 1;
    }
}

static void check_raw(const uint8_t *p, size_t len, uint8_t mode)
{
    ref_t r = {0};
    sg_sse_tail_t t;
    size_t max_event = mode & 2 ? 8 + (mode >> 2) : 64u << 10;
    size_t n = 0, off = 0;
    unsigned x = mode * 2654435761u + 7;

    r.max_event = max_event;
    r.data = malloc(max_event + len + 2);
    ref_run(&r, (const char *)p, len);

    sg_sse_tail_init(&t, max_event);
    while (off < len) {
        x = x * 1103515245u + 12345u;
        size_t piece = 1 + (x >> 16) % (mode < 128 ? 7 : 4096);
        if (piece > len - off)
            piece = len - off;
        /* each piece in a buffer of its own: ASan sees reads past it */
        char *c = malloc(piece);
        memcpy(c, p + off, piece);
        sg_sse_tail_feed(&t, c, piece);
        free(c);
        off += piece;
    }
    const char *res = sg_sse_tail_result(&t, &n);
    CHECK((res != NULL) == r.have_result);
    if (res != NULL) {
        CHECK(n <= max_event && res[n] == '\0');
        CHECK(n == r.result_len && memcmp(res, r.result, n) == 0);
    }
    CHECK(t.saw_error == r.saw_error);
    sg_sse_tail_free(&t);
    free(r.data);
    free(r.result);
}

/* ---- a stream as the proxy writes it ------------------------------------ */

static void event(sg_sse_tail_t *t, const char *name, json_object *data, size_t piece)
{
    char head[64];
    size_t len;
    const char *s = json_object_to_json_string_length(data, JSON_C_TO_STRING_PLAIN, &len);
    int hl = snprintf(head, sizeof(head), "event: %s\ndata: ", name);
    size_t total = (size_t)hl + len + 2;
    char *all = malloc(total);

    memcpy(all, head, (size_t)hl);
    memcpy(all + hl, s, len);
    memcpy(all + hl + len, "\n\n", 2);
    for (size_t off = 0; off < total; off += piece)
        sg_sse_tail_feed(t, all + off, total - off < piece ? total - off : piece);
    free(all);
    json_object_put(data);
}

static void check_built(const uint8_t *p, size_t len, uint8_t mode)
{
    sg_sse_tail_t t;
    size_t chunk = 1 + mode % 61, piece = 1 + (mode >> 1) % 13, n = 0;

    sg_sse_tail_init(&t, 64u << 10);
    for (size_t off = 0; off < len; off += chunk) {
        size_t k = len - off < chunk ? len - off : chunk;
        json_object *o = json_object_new_object();
        json_object_object_add(o, "stream", json_object_new_string("stdout"));
        json_object_object_add(o, "data", json_object_new_string_len((const char *)p + off, (int)k));
        event(&t, "output", o, piece);
    }
    json_object *res = json_object_new_object();
    json_object_object_add(res, "stdout", json_object_new_string(""));
    json_object_object_add(res, "exit_code", json_object_new_int(0));
    json_object_object_add(res, "note", json_object_new_string_len((const char *)p, (int)(len < 200 ? len : 200)));
    char *want = strdup(json_object_to_json_string_ext(res, JSON_C_TO_STRING_PLAIN));
    event(&t, "result", res, piece);

    const char *r = sg_sse_tail_result(&t, &n);
    CHECK(r != NULL && n == strlen(want) && memcmp(r, want, n) == 0);
    free(want);
    sg_sse_tail_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    uint8_t mode = fuzz_u8(&in);

    if (mode & 1)
        check_built(in.p, in.len, mode >> 1);
    else
        check_raw(in.p, in.len, mode >> 1);
    return 0;
}
