/*
 * decode.c — the agent's request decoders (see decode.h): the same checks,
 * in the same order, with the same ERROR codes and sentences as when they
 * were part of agent.c.
 */
#include <stdlib.h>
#include <string.h>

#include "agent_proto.h"
#include "decode.h"

/* A NUL-terminated copy of a string field; NULL if it holds a NUL. */
static char *dup_field(const uint8_t *s, size_t len)
{
    char *p;

    if (memchr(s, '\0', len) != NULL)
        return NULL;
    p = agent_xmalloc(len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

/* ---- payloads -------------------------------------------------------- */

void sg_agent_exec_req_free(sg_agent_exec_req_t *x)
{
    free(x->setup_cmd);
    free(x->setup_stage);
    free(x->run_cmd);
    free(x->file_path);
    free(x->kernel_cmd);
    x->setup_cmd = x->setup_stage = x->run_cmd = x->file_path = x->kernel_cmd = NULL;
}

int sg_agent_exec_req_decode(const uint8_t *payload, size_t len, sg_agent_exec_req_t *x, sg_agent_fail_t *f)
{
    sg_agent_reader_t r;
    const uint8_t *s[5];
    size_t sl[5];
    int i;

    memset(x, 0, sizeof(*x));
    sg_agent_reader_init(&r, payload, len);
    sg_agent_get_u32(&r, &x->timeout_ms);
    sg_agent_get_u32(&r, &x->output_cap);
    for (i = 0; i < 5; i++)
        sg_agent_get_str(&r, &s[i], &sl[i]);
    sg_agent_get_rest(&r, &x->code, &x->code_len);
    if (r.failed)
        return agent_fail(f, SG_AGENT_ERR_BAD_REQUEST, "The EXEC request is malformed.");
    x->setup_cmd = dup_field(s[0], sl[0]);
    x->setup_stage = dup_field(s[1], sl[1]);
    x->run_cmd = dup_field(s[2], sl[2]);
    x->file_path = dup_field(s[3], sl[3]);
    x->kernel_cmd = dup_field(s[4], sl[4]);
    if (x->setup_cmd == NULL || x->setup_stage == NULL || x->run_cmd == NULL || x->file_path == NULL ||
        x->kernel_cmd == NULL) {
        sg_agent_exec_req_free(x);
        return agent_fail(f, SG_AGENT_ERR_BAD_REQUEST,
                          "The EXEC request has a command, stage or path containing a NUL byte.");
    }
    return 0;
}

/* Checks shared by PUT_FILE and GET_FILE; a NUL-terminated copy. */
static char *take_path(const uint8_t *s, size_t len, sg_agent_fail_t *f)
{
    if (len == 0) {
        agent_fail(f, SG_AGENT_ERR_PATH, "The path is empty.");
        return NULL;
    }
    if (memchr(s, '\0', len) != NULL) {
        agent_fail(f, SG_AGENT_ERR_PATH, "The path contains a NUL byte.");
        return NULL;
    }
    return dup_field(s, len);
}

/* The head PUT_FILE and GET_FILE start with: a path, then a u32 (*u32);
 * h->r reads on after it (failed when the head is short). */
typedef struct {
    sg_agent_reader_t r;
    const uint8_t *path;
    size_t path_len;
} file_head_t;

static void file_head_read(file_head_t *h, const uint8_t *payload, size_t len, uint32_t *u32)
{
    sg_agent_reader_init(&h->r, payload, len);
    sg_agent_get_str(&h->r, &h->path, &h->path_len);
    sg_agent_get_u32(&h->r, u32);
}

int sg_agent_put_req_decode(const uint8_t *payload, size_t len, sg_agent_put_req_t *p, sg_agent_fail_t *f)
{
    file_head_t h;

    memset(p, 0, sizeof(*p));
    file_head_read(&h, payload, len, &p->mode);
    sg_agent_get_rest(&h.r, &p->data, &p->data_len);
    if (h.r.failed)
        return agent_fail(f, SG_AGENT_ERR_BAD_REQUEST, "The PUT_FILE request is malformed.");
    if ((p->path = take_path(h.path, h.path_len, f)) == NULL)
        return -1;
    return 0;
}

int sg_agent_get_req_decode(const uint8_t *payload, size_t len, sg_agent_get_req_t *g, sg_agent_fail_t *f)
{
    file_head_t h;

    memset(g, 0, sizeof(*g));
    file_head_read(&h, payload, len, &g->max_bytes);
    if (h.r.failed || h.r.off != h.r.len)
        return agent_fail(f, SG_AGENT_ERR_BAD_REQUEST, "The GET_FILE request is malformed.");
    if (g->max_bytes > SG_AGENT_MAX_PAYLOAD)
        g->max_bytes = SG_AGENT_MAX_PAYLOAD;
    if ((g->path = take_path(h.path, h.path_len, f)) == NULL)
        return -1;
    return 0;
}
