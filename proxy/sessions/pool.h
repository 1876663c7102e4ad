/*
 * pool.h — where a new session comes from: a ready container of the warm
 * pool, a free container slot (capacity.h), or the slot of a container on
 * its way out; and the proxy's once-a-second upkeep (the agents'
 * watchdog, the pool's refill). Loop thread.
 */
#ifndef SANDGATE_POOL_H
#define SANDGATE_POOL_H

#include "session_life.h"

/* Starts a container for a session and connects to its agent (or takes
 * one from the pool), on the runtime the request names or the default
 * (sg_sessions_runtime_for); one the engine does not offer gets 503
 * runtime_unavailable. At SANDGATE_MAX_CONTAINERS it waits for a slot that
 * is on its way back (sg_slot_await); when there is none, cb gets 503
 * no_capacity. */
void sg_session_create(const sg_create_req_t *req, int ephemeral, sg_session_ready_cb cb, void *data);

/* The warm pool: pool_size ready containers per language and runtime, made
 * with pool_limits. The default runtime's pools fill from the start, those
 * of SANDGATE_POOL_RUNTIMES too; on another runtime, a language's pool
 * fills once a request names that language and runtime.
 * sg_session_create takes from the pool of the request's language and
 * runtime when its container settings equal pool_limits; a taken container
 * is never pooled again.
 * sg_pool_fill starts what is missing; it is called after every take and
 * from sg_sessions_tick (a language whose start failed waits a while). */
void sg_pool_fill(void);
/* The pool yields to requests: removes one ready pooled container and, once
 * it is gone, calls cb with its container slot (capacity.h) handed to the
 * caller, who must give it back when done. 0, or -1 (cb not called) when
 * the pool has nothing ready. The pool itself fills only while a quarter
 * of the cap stays free. */
int sg_pool_yield(void (*cb)(void *data), void *data);
/* For a request that found the cap reached: the slot of a container whose
 * removal is under way already (a one-shot's just answered, a closed
 * session's) goes to it once that container is gone, else a ready pooled
 * container is removed for it (sg_pool_yield); cb then runs with the slot,
 * which the caller must give back when done. 0, or -1 (cb not called) when
 * no slot can come: the caller answers no_capacity. A slot on its way back
 * is claimed by one request at most, so waiting is bounded by removals. */
int sg_slot_await(void (*cb)(void *data), void *data);
/* Ready containers in the pool of lang and runtime ("runc" or "runsc"). */
size_t sg_pool_ready(const sg_lang_t *lang, const char *runtime);
/* How many the pool keeps per language and runtime (SANDGATE_POOL_SIZE). */
long sg_pool_size(void);

/* The watchdog (fails ops whose agent did not answer in time), then the
 * pool's refill. Call about once a second from the loop. */
void sg_sessions_tick(void);

#endif
