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
 * Returns REDIS_OK, or REDIS_ERR if ac already has an adapter, has no fd,
 * or memory ran out. */
int sg_redis_h2o_attach(redisAsyncContext *ac, h2o_loop_t *loop);

#endif
