#include "sse_tail.h"

#include <string.h>

void sg_sse_tail_init(sg_sse_tail_t *t, size_t max_event)
{
    memset(t, 0, sizeof(*t));
    t->max_event = max_event;
    sg_buf_init(&t->line, max_event + 16);
    sg_buf_init(&t->data, max_event);
    sg_buf_init(&t->result, max_event);
}

void sg_sse_tail_free(sg_sse_tail_t *t)
{
    sg_buf_free(&t->line);
    sg_buf_free(&t->data);
    sg_buf_free(&t->result);
}

static void end_event(sg_sse_tail_t *t)
{
    if (!t->event_over && strcmp(t->event, "result") == 0 && t->has_data && !t->data_over) {
        sg_buf_reset(&t->result);
        t->have_result = sg_buf_append(&t->result, t->data.base, t->data.len) == 0;
    }
    if (!t->event_over && strcmp(t->event, "error") == 0 && t->has_data)
        t->saw_error = 1;
    t->event[0] = '\0';
    t->event_over = 0;
    sg_buf_reset(&t->data);
    t->data_over = 0;
    t->has_data = 0;
}

/* One whole line (without its end), or the first bytes of a longer one. */
static void end_line(sg_sse_tail_t *t)
{
    const char *l = t->line.base != NULL ? t->line.base : "";
    size_t len = t->line.len;
    const char *colon = memchr(l, ':', len);
    size_t nlen = colon != NULL ? (size_t)(colon - l) : len;
    const char *v = colon != NULL ? colon + 1 : l + len;
    size_t vlen = (size_t)(l + len - v);

    if (len == 0 && !t->line_over) {
        end_event(t);
    } else if (nlen == 0) {
        /* a comment */
    } else {
        if (vlen != 0 && v[0] == ' ') {
            v++;
            vlen--;
        }
        if (nlen == 5 && memcmp(l, "event", 5) == 0) {
            t->event_over = t->line_over || vlen >= sizeof(t->event);
            memcpy(t->event, v, t->event_over ? 0 : vlen);
            t->event[t->event_over ? 0 : vlen] = '\0';
        } else if (nlen == 4 && memcmp(l, "data", 4) == 0) {
            if (t->line_over || (t->has_data && sg_buf_append(&t->data, "\n", 1) != 0) ||
                sg_buf_append(&t->data, v, vlen) != 0)
                t->data_over = 1;
            t->has_data = 1;
        }
    }
    sg_buf_reset(&t->line);
    t->line_over = 0;
}

void sg_sse_tail_feed(sg_sse_tail_t *t, const char *p, size_t len)
{
    const char *end = p + len;

    while (p < end) {
        if (t->after_cr) {
            t->after_cr = 0;
            if (*p == '\n') {
                p++;
                continue;
            }
        }
        const char *e = p;
        while (e < end && *e != '\n' && *e != '\r')
            e++;
        if (!t->line_over && sg_buf_append(&t->line, p, (size_t)(e - p)) != 0) {
            /* keep what fits: the field name is at its start */
            size_t room = t->line.max - t->line.len;
            sg_buf_append(&t->line, p, room);
            t->line_over = 1;
        }
        if (e == end)
            break;
        t->after_cr = *e == '\r';
        end_line(t);
        p = e + 1;
    }
}

const char *sg_sse_tail_result(const sg_sse_tail_t *t, size_t *len)
{
    if (!t->have_result)
        return NULL;
    *len = t->result.len;
    return t->result.base != NULL ? t->result.base : "";
}
