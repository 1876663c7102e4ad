/*
 * concurrency.h — a tenant's executions in flight (quota max_concurrent_execs).
 *
 * Every execution that runs code on the tenant's behalf holds one slot from
 * before it is forwarded to the proxy until the gateway is done with it:
 * POST /execute (one-shot), POST /sessions/{id}/execute and /commands, and
 * POST /sessions/{id}/libraries (pip / npm run in the sandbox, and may start
 * an installer container). The slots live in the state (state.h: a zset of
 * tokens per tenant, scored by a lease deadline), so the cap is exact under
 * parallel load and across gateways; a gateway killed mid-execution leaks
 * nothing for longer than the lease.
 *
 * When the shared state (Redis) does not answer, the slot is taken from a
 * count in this gateway's process instead: executions keep running during
 * an outage, and each gateway still keeps the cap on its own (README, "When
 * Redis is unreachable"). A slot is released where it was taken.
 *
 * Loop thread only. The callback may run before acquire returns.
 */
#ifndef SANDGATE_CONCURRENCY_H
#define SANDGATE_CONCURRENCY_H

#include <stdint.h>

/* How much longer than the gateway's own wait for the proxy a slot's lease
 * lasts: covers the steps between taking the slot and forwarding (the day's
 * quota, seeding it from the ledger). */
#define SG_EXEC_LEASE_MARGIN_S 60

/* A slot's token: "<session id>/<24 hex>" for an execution in a session, so
 * that the state can tell that the session is busy (the idle reaper leaves
 * it alone while the lease lives), else "<24 hex>". */
#define SG_EXEC_SLOT_TOKEN_MAX 64

typedef struct {
    char token[SG_EXEC_SLOT_TOKEN_MAX];
    int64_t tenant;
    int held; /* 0 none, else where it was taken: SG_EXEC_SLOT_SHARED or SG_EXEC_SLOT_LOCAL */
} sg_exec_slot_t;

enum { SG_EXEC_SLOT_SHARED = 1, SG_EXEC_SLOT_LOCAL = 2 };

/* granted: the slot is held (release it); else the tenant has max in flight
 * (in_flight says how many the state counted). */
typedef void (*sg_exec_slot_cb)(void *data, int granted, long in_flight);

/* A new token for the slot of tenant, not held: for a slot taken by
 * another call that names it (sg_state_exec_admit: held is then set to
 * SG_EXEC_SLOT_SHARED by the caller). sid: the session the execution runs
 * in (NULL or "": none), named in the token. */
void sg_exec_slot_init(sg_exec_slot_t *slot, int64_t tenant, const char *sid);
/* Takes one of the tenant's max slots for at most lease_s seconds, for an
 * execution in session sid (NULL or "": none). The slot must not be held
 * already. */
void sg_exec_slot_acquire(sg_exec_slot_t *slot, int64_t tenant, const char *sid, long max, long lease_s,
                          sg_exec_slot_cb cb, void *data);
/* Gives the slot back (nothing if it is not held). */
void sg_exec_slot_release(sg_exec_slot_t *slot);

#endif
