/*
 * redis_h2o.c — the hiredis <-> h2o evloop adapter (see redis_h2o.h).
 */
#include "redis_h2o.h"
#include "http.h"
#include "util.h"

#include <stdlib.h>

/* Commands are written at the end of the loop's turn (sg_loop_soon), all
 * those of the turn in one write, without asking the loop whether the
 * socket is writable (it nearly always is, and each ask costs two
 * epoll_ctl and a wait); only what that write leaves waits for h2o's
 * notification. While only lazy commands are queued, the write waits for
 * sg_loop_later instead: under load, Redis then wakes once for the
 * commands of several turns (each wake-up of it, and each write here, costs
 * more than the commands it carries). */
typedef struct {
    redisAsyncContext *ac;
    h2o_socket_t *sock;
    h2o_loop_t *loop;
    h2o_timeout_entry_t flush; /* linked: a write at the end of this turn, or (flush_lazy) later */
    int flush_lazy;
    uint64_t *writes;
    int next_lazy; /* the command being queued is lazy (sg_redis_h2o_command) */
    /* hiredis wants write events. h2o_socket_notify_write is one-shot and
     * cannot be cancelled, so delWrite only clears this flag and a
     * notification that arrives afterwards is ignored. */
    int want_write;
} adapter_t;

static int flushing; /* inside a write: what it leaves waits for the socket */

static void on_read(h2o_socket_t *sock, const char *err)
{
    adapter_t *a = sock->data;
    if (a == NULL)
        return;
    /* may free ac and, through cleanup, a and sock: touch nothing after */
    redisAsyncHandleRead(a->ac);
}

static void on_write(h2o_socket_t *sock, const char *err)
{
    adapter_t *a = sock->data;
    if (a == NULL || !a->want_write)
        return;
    /* calls addWrite again while data is left (re-arming the one-shot
     * notification, as h2o cleared it before calling us) or delWrite */
    if (a->writes != NULL)
        (*a->writes)++;
    flushing = 1;
    redisAsyncHandleWrite(a->ac);
    flushing = 0;
}

static void on_flush(h2o_timeout_entry_t *e)
{
    adapter_t *a = H2O_STRUCT_FROM_MEMBER(adapter_t, flush, e);
    if (!a->want_write)
        return;
    if (!(a->ac->c.flags & REDIS_CONNECTED)) {
        /* hiredis learns of the connect's end from a write event, and does
         * not ask again when it is called before that */
        if (!h2o_socket_is_writing(a->sock))
            h2o_socket_notify_write(a->sock, on_write);
        return;
    }
    /* may free ac and, through cleanup, a: touch nothing after */
    if (a->writes != NULL)
        (*a->writes)++;
    flushing = 1;
    redisAsyncHandleWrite(a->ac);
    flushing = 0;
}

static void add_read(void *privdata)
{
    adapter_t *a = privdata;
    if (!h2o_socket_is_reading(a->sock))
        h2o_socket_read_start(a->sock, on_read);
}

static void del_read(void *privdata)
{
    adapter_t *a = privdata;
    if (h2o_socket_is_reading(a->sock))
        h2o_socket_read_stop(a->sock);
}

static void add_write(void *privdata)
{
    adapter_t *a = privdata;
    int lazy = a->next_lazy;
    a->next_lazy = 0;
    a->want_write = 1;
    if (!flushing) {
        if (h2o_timeout_is_linked(&a->flush)) {
            /* a write is planned: this command goes with it, unless the
             * write is lazy and this command is not (then all go now) */
            if (lazy || !a->flush_lazy)
                return;
            h2o_timeout_unlink(&a->flush);
        }
        a->flush_lazy = lazy;
        if (lazy)
            sg_loop_later(a->loop, &a->flush);
        else
            sg_loop_soon(a->loop, &a->flush);
        return;
    }
    if (!h2o_socket_is_writing(a->sock))
        h2o_socket_notify_write(a->sock, on_write);
}

static void del_write(void *privdata)
{
    adapter_t *a = privdata;
    a->want_write = 0;
}

static void cleanup(void *privdata);

/* Hands hiredis this adapter's event hooks (a), or takes them back (NULL). */
static void set_hooks(redisAsyncContext *ac, adapter_t *a)
{
    ac->ev.addRead = a != NULL ? add_read : NULL;
    ac->ev.delRead = a != NULL ? del_read : NULL;
    ac->ev.addWrite = a != NULL ? add_write : NULL;
    ac->ev.delWrite = a != NULL ? del_write : NULL;
    ac->ev.cleanup = a != NULL ? cleanup : NULL;
    ac->ev.data = a;
}

static void cleanup(void *privdata)
{
    adapter_t *a = privdata;
    redisAsyncContext *ac = a->ac;

    /* h2o_socket_close closes the fd; redisFree must not close it again
     * (by then the number may belong to another socket) */
    ac->c.fd = -1;
    set_hooks(ac, NULL);
    if (h2o_timeout_is_linked(&a->flush))
        h2o_timeout_unlink(&a->flush);
    a->sock->data = NULL;
    /* h2o frees the socket itself at the end of this loop iteration, and
     * skips its pending events once it is marked disposed */
    h2o_socket_close(a->sock);
    free(a);
}

int sg_redis_h2o_attach(redisAsyncContext *ac, h2o_loop_t *loop, uint64_t *writes)
{
    if (ac->ev.data != NULL || ac->c.fd < 0)
        return REDIS_ERR;
    adapter_t *a = sg_xcalloc(1, sizeof(*a));
    a->ac = ac;
    a->loop = loop;
    a->writes = writes;
    a->flush.cb = on_flush;
    a->sock = h2o_evloop_socket_create(loop, ac->c.fd, H2O_SOCKET_FLAG_DONT_READ);
    if (a->sock == NULL) {
        free(a);
        return REDIS_ERR;
    }
    a->sock->data = a;

    set_hooks(ac, a);

    /* replies, and a refused connect (EPOLLERR), arrive as read events */
    add_read(a);
    return REDIS_OK;
}

int sg_redis_h2o_command(redisAsyncContext *ac, int lazy, redisCallbackFn *fn, void *privdata, int argc,
                         const char **argv, const size_t *argvlen)
{
    adapter_t *a = ac->ev.data;
    int rc;

    /* hiredis asks for a write (add_write) inside, once the command is queued */
    if (a != NULL)
        a->next_lazy = lazy;
    rc = redisAsyncCommandArgv(ac, fn, privdata, argc, argv, argvlen);
    if (a != NULL && ac->ev.data == a)
        a->next_lazy = 0;
    return rc;
}

void sg_redis_h2o_flush_now(redisAsyncContext *ac)
{
    adapter_t *a = ac->ev.data;
    if (a == NULL || flushing || (ac->c.flags & REDIS_IN_CALLBACK) || !h2o_timeout_is_linked(&a->flush))
        return;
    h2o_timeout_unlink(&a->flush);
    on_flush(&a->flush);
}
