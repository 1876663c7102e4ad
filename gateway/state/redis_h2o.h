/*
 * redis_h2o.h — runs a hiredis 0.14 async context on h2o 2.2's evloop.
 *
 * hiredis ships adapters for libevent, libev, libuv, ae, ... but not for
 * h2o. This one follows hiredis's libevent adapter: the context's fd is
 * wrapped in an h2o socket made with H2O_SOCKET_FLAG_DONT_READ (h2o only
 * reports readiness; hiredis does the reads and writes), and hiredis's
 * addRead/delRead/addWrite/delWrite hooks map onto h2o_socket_read_start /
 * h2o_socket_read_stop / h2o_socket_notify_write.
 *
 * Ownership: the context owns the adapter. When hiredis frees the context
 * (redisAsyncFree, or on its own after a disconnect) the cleanup hook closes
 * the h2o socket — which closes the fd — and sets ac->c.fd = -1 so that
 * redisFree does not close the same fd number a second time.
 *
 * Threading: the loop's thread only.
 */
#ifndef SANDGATE_REDIS_H2O_H
#define SANDGATE_REDIS_H2O_H

#include <h2o.h>
#include <hiredis/async.h>

/* Attaches ac to loop. Call it right after redisAsyncConnect (and before
 * redisAsyncSetConnectCallback, which asks for the first write event).
 * Each write to the socket adds one to *writes (when not NULL).
 * Returns REDIS_OK, or REDIS_ERR if ac already has an adapter, has no fd,
 * or memory ran out. */
int sg_redis_h2o_attach(redisAsyncContext *ac, h2o_loop_t *loop, uint64_t *writes);

/* redisAsyncCommandArgv. Commands are written at the end of the loop's
 * turn; a lazy one (nobody waits for its answer) may wait until
 * sg_loop_later (SG_LOOP_LATER_MS), so that those of several turns go in
 * one write: one wake-up of Redis for many. Commands keep their order: one
 * that is not lazy takes every lazy one queued before it along, at the end
 * of its turn. */
int sg_redis_h2o_command(redisAsyncContext *ac, int lazy, redisCallbackFn *fn, void *privdata, int argc,
                         const char **argv, const size_t *argvlen);

/* Writes what is queued at once rather than at the end of the turn: for a
 * command whose answer is awaited while the loop goes on to blocking work
 * of its own (a session's commit, beside the ledger's insert). Inside a
 * hiredis callback the write stays where it was. May free ac (a write
 * that failed). */
void sg_redis_h2o_flush_now(redisAsyncContext *ac);

#endif
