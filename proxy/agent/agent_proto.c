/*
 * agent_proto.c — encoder and bounds-checked decoder for the proxy <-> agent
 * wire protocol (see agent_proto.h). Only libc: this file is linked both into
 * the proxy and into the static in-sandbox agent.
 */
#include <stdlib.h>
#include <string.h>

#include "agent_proto.h"

void sg_agent_buf_init(sg_agent_buf_t *b)
{
    b->base = NULL;
    b->len = 0;
    b->cap = 0;
}

void sg_agent_buf_free(sg_agent_buf_t *b)
{
    free(b->base);
    sg_agent_buf_init(b);
}

/* Make room for `extra` more bytes; on failure the buffer is untouched, so a
 * failed append never leaves half a field behind. */
static int reserve(sg_agent_buf_t *b, size_t extra)
{
    size_t want, cap;
    uint8_t *p;

    if (extra > SIZE_MAX - b->len)
        return -1;
    want = b->len + extra;
    if (want <= b->cap)
        return 0;
    cap = b->cap != 0 ? b->cap : 256;
    while (cap < want) {
        if (cap > SIZE_MAX / 2) {
            cap = want;
            break;
        }
        cap *= 2;
    }
    p = realloc(b->base, cap);
    if (p == NULL)
        return -1;
    b->base = p;
    b->cap = cap;
    return 0;
}

static void be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static int append(sg_agent_buf_t *b, const void *s, size_t len)
{
    if (reserve(b, len) != 0)
        return -1;
    if (len != 0)
        memcpy(b->base + b->len, s, len);
    b->len += len;
    return 0;
}

int sg_agent_msg_begin(sg_agent_buf_t *b, sg_agent_msg_type_t type, uint32_t id)
{
    uint8_t h[SG_AGENT_HEADER_SIZE];

    h[0] = (uint8_t)type;
    h[1] = 0; /* flags */
    h[2] = 0; /* reserved */
    h[3] = 0;
    be32(h + 4, id);
    be32(h + 8, 0); /* patched by sg_agent_msg_end */
    return append(b, h, sizeof(h));
}

void sg_agent_msg_end(sg_agent_buf_t *b, size_t msg_start)
{
    /* Callers keep payloads under SG_AGENT_MAX_PAYLOAD, which fits in u32. */
    be32(b->base + msg_start + 8, (uint32_t)(b->len - msg_start - SG_AGENT_HEADER_SIZE));
}

int sg_agent_put_u32(sg_agent_buf_t *b, uint32_t v)
{
    uint8_t p[4];

    be32(p, v);
    return append(b, p, sizeof(p));
}

int sg_agent_put_i32(sg_agent_buf_t *b, int32_t v)
{
    return sg_agent_put_u32(b, (uint32_t)v);
}

int sg_agent_put_u64(sg_agent_buf_t *b, uint64_t v)
{
    uint8_t p[8];

    be32(p, (uint32_t)(v >> 32));
    be32(p + 4, (uint32_t)v);
    return append(b, p, sizeof(p));
}

int sg_agent_put_str(sg_agent_buf_t *b, const void *s, size_t len)
{
    uint8_t p[4];

    if (len > UINT32_MAX)
        return -1;
    /* Reserve both parts first so a failure leaves the buffer unchanged. */
    if (reserve(b, 4 + len) != 0)
        return -1;
    be32(p, (uint32_t)len);
    append(b, p, sizeof(p));
    append(b, s, len);
    return 0;
}

int sg_agent_put_rest(sg_agent_buf_t *b, const void *s, size_t len)
{
    return append(b, s, len);
}

int sg_agent_header_decode(const uint8_t *p, sg_agent_header_t *h)
{
    uint32_t len;

    if (p[1] != 0 || p[2] != 0 || p[3] != 0)
        return -1;
    len = rd32(p + 8);
    if (len > SG_AGENT_MAX_PAYLOAD)
        return -1;
    h->type = p[0];
    h->id = rd32(p + 4);
    h->len = len;
    return 0;
}

void sg_agent_reader_init(sg_agent_reader_t *r, const void *payload, size_t len)
{
    r->p = payload;
    r->len = len;
    r->off = 0;
    r->failed = 0;
}

/* Where the unread part starts; an empty payload may come as NULL, and
 * NULL + 0 is not something to hand to callers (or to UBSan). */
static const uint8_t *cursor(const sg_agent_reader_t *r)
{
    static const uint8_t empty[1];

    return r->p != NULL ? r->p + r->off : empty;
}

/* Claim `n` bytes; the comparison is written so that it cannot overflow. */
static const uint8_t *take(sg_agent_reader_t *r, size_t n)
{
    const uint8_t *p;

    if (r->failed || n > r->len - r->off) {
        r->failed = 1;
        return NULL;
    }
    p = cursor(r);
    r->off += n;
    return p;
}

int sg_agent_get_u32(sg_agent_reader_t *r, uint32_t *v)
{
    const uint8_t *p = take(r, 4);

    if (p == NULL)
        return -1;
    *v = rd32(p);
    return 0;
}

int sg_agent_get_i32(sg_agent_reader_t *r, int32_t *v)
{
    uint32_t u;

    if (sg_agent_get_u32(r, &u) != 0)
        return -1;
    *v = (int32_t)u;
    return 0;
}

int sg_agent_get_u64(sg_agent_reader_t *r, uint64_t *v)
{
    const uint8_t *p = take(r, 8);

    if (p == NULL)
        return -1;
    *v = (uint64_t)rd32(p) << 32 | rd32(p + 4);
    return 0;
}

int sg_agent_get_str(sg_agent_reader_t *r, const uint8_t **s, size_t *len)
{
    size_t save = r->off;
    uint32_t n;
    const uint8_t *p;

    if (sg_agent_get_u32(r, &n) != 0)
        return -1;
    p = take(r, n);
    if (p == NULL) {
        r->off = save;
        return -1;
    }
    *s = p;
    *len = n;
    return 0;
}

void sg_agent_get_rest(sg_agent_reader_t *r, const uint8_t **s, size_t *len)
{
    *s = cursor(r);
    if (r->failed) {
        *len = 0;
        return;
    }
    *len = r->len - r->off;
    r->off = r->len;
}

int sg_agent_reply_decode(const sg_agent_header_t *h, const uint8_t *payload, sg_agent_reply_t *m)
{
    sg_agent_reader_t r;

    memset(m, 0, sizeof(*m));
    m->type = h->type;
    sg_agent_reader_init(&r, payload, h->len);
    switch (h->type) {
    case SG_AGENT_READY:
        sg_agent_get_u32(&r, &m->version);
        sg_agent_get_str(&r, &m->data, &m->data_len);
        break;
    case SG_AGENT_OUTPUT:
        if (sg_agent_get_u32(&r, &m->stream) != 0 || (m->stream != 1 && m->stream != 2))
            return -1;
        sg_agent_get_rest(&r, &m->data, &m->data_len);
        break;
    case SG_AGENT_EXIT:
        sg_agent_get_i32(&r, &m->exit_code);
        sg_agent_get_u32(&r, &m->signal);
        sg_agent_get_u32(&r, &m->reason);
        sg_agent_get_u64(&r, &m->duration_us);
        sg_agent_get_u32(&r, &m->flags);
        sg_agent_get_str(&r, &m->stage, &m->stage_len);
        sg_agent_get_u32(&r, &m->state);
        break;
    case SG_AGENT_FILE:
    case SG_AGENT_RESULT:
        sg_agent_get_rest(&r, &m->data, &m->data_len);
        break;
    case SG_AGENT_FILES: {
        sg_agent_reader_t e;
        const uint8_t *path;
        size_t plen;
        uint64_t size;

        if (sg_agent_get_u32(&r, &m->files_flags) != 0 || sg_agent_get_u32(&r, &m->files_count) != 0 ||
            m->files_count > SG_AGENT_FILES_MAX)
            return -1;
        sg_agent_get_rest(&r, &m->data, &m->data_len);
        /* every entry whole, and nothing after the last */
        sg_agent_reader_init(&e, m->data, m->data_len);
        for (uint32_t i = 0; i < m->files_count; i++) {
            if (sg_agent_get_str(&e, &path, &plen) != 0 || sg_agent_get_u64(&e, &size) != 0)
                return -1;
        }
        if (e.off != e.len)
            return -1;
        break;
    }
    case SG_AGENT_OK:
        sg_agent_get_u64(&r, &m->ok_value);
        break;
    case SG_AGENT_ERROR:
        sg_agent_get_u32(&r, &m->err_code);
        sg_agent_get_str(&r, &m->message, &m->message_len);
        break;
    case SG_AGENT_SYNC_OK:
        sg_agent_get_u64(&r, &m->ok_value);
        sg_agent_get_u32(&r, &m->version);
        sg_agent_get_u32(&r, &m->kernel);
        break;
    default:
        return -1;
    }
    return r.failed ? -1 : 0;
}

const char *sg_agent_reason_name(uint32_t reason)
{
    switch (reason) {
    case SG_AGENT_REASON_EXITED:
        return "exited";
    case SG_AGENT_REASON_TIMEOUT:
        return "timeout";
    case SG_AGENT_REASON_OOM:
        return "out_of_memory";
    case SG_AGENT_REASON_OUTPUT_LIMIT:
        return "output_limit";
    case SG_AGENT_REASON_KILLED:
        return "killed";
    case SG_AGENT_REASON_SETUP_FAILED:
        return "setup_failed";
    case SG_AGENT_REASON_START_FAILED:
        return "start_failed";
    }
    return "unknown";
}

const char *sg_agent_state_name(uint32_t state)
{
    switch (state) {
    case SG_AGENT_STATE_NONE:
        return "none";
    case SG_AGENT_STATE_KEPT:
        return "kept";
    case SG_AGENT_STATE_NEW:
        return "new";
    case SG_AGENT_STATE_LOST:
        return "lost";
    }
    return "unknown";
}
