/*
 * concurrency.c — executions in flight per tenant (see concurrency.h).
 */
#include "concurrency.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway.h"
#include "log.h"
#include "util.h"

/* The fallback count while the shared state does not answer; made on first
 * use, kept for the life of the process. */
static sg_state_t *local_state;

typedef struct {
    sg_exec_slot_t *slot;
    long max;
    long lease_s;
    sg_exec_slot_cb cb;
    void *data;
} acquire_t;

static void on_local(void *data, const sg_state_result_t *r)
{
    acquire_t *a = data;
    if (r->ok)
        a->slot->held = SG_EXEC_SLOT_LOCAL;
    a->cb(a->data, r->ok, r->count);
    free(a);
}

static void on_shared(void *data, const sg_state_result_t *r)
{
    acquire_t *a = data;
    if (!r->available) {
        /* fail open to this gateway's own count: an outage of the state
         * must not stop executions, and the cap still holds per gateway */
        if (local_state == NULL && (local_state = sg_state_create_memory(sg_gw.loop)) == NULL) {
            sg_error("concurrency: out of memory; an execution of tenant %lld runs uncounted",
                     (long long)a->slot->tenant);
            a->cb(a->data, 1, 0);
            free(a);
            return;
        }
        sg_state_exec_acquire(local_state, a->slot->tenant, a->max, a->slot->token, a->lease_s, on_local, a);
        return;
    }
    if (r->ok)
        a->slot->held = SG_EXEC_SLOT_SHARED;
    a->cb(a->data, r->ok, r->count);
    free(a);
}

void sg_exec_slot_init(sg_exec_slot_t *slot, int64_t tenant, const char *sid)
{
    unsigned char rnd[12];
    size_t at = 0;

    if (sid != NULL && sid[0] != '\0') {
        at = sg_copy(slot->token, 37, sid, strlen(sid));
        slot->token[at++] = '/';
    }
    sg_random_bytes(rnd, sizeof(rnd));
    sg_hex(slot->token + at, rnd, sizeof(rnd));
    slot->tenant = tenant;
    slot->held = 0;
}

void sg_exec_slot_acquire(sg_exec_slot_t *slot, int64_t tenant, const char *sid, long max, long lease_s,
                          sg_exec_slot_cb cb, void *data)
{
    acquire_t *a = sg_xmalloc(sizeof(*a));

    sg_exec_slot_init(slot, tenant, sid);
    a->slot = slot;
    a->max = max;
    a->lease_s = lease_s;
    a->cb = cb;
    a->data = data;
    sg_state_exec_acquire(sg_gw.state, tenant, max, slot->token, lease_s, on_shared, a);
}

static void on_released(void *data, const sg_state_result_t *r)
{
}

void sg_exec_slot_release(sg_exec_slot_t *slot)
{
    if (slot->held == SG_EXEC_SLOT_SHARED)
        sg_state_exec_release(sg_gw.state, slot->tenant, slot->token, on_released, NULL);
    else if (slot->held == SG_EXEC_SLOT_LOCAL && local_state != NULL)
        sg_state_exec_release(local_state, slot->tenant, slot->token, on_released, NULL);
    slot->held = 0;
}
