/*
 * redis_conn.c — the Redis backend's connection and its calls (redis_int.h).
 *
 * Every check-and-update is one Lua script, run by EVALSHA with the SHA1
 * redis_scripts.c computes; a NOSCRIPT answer (Redis restarted or SCRIPT
 * FLUSH) is retried once as EVAL, which also loads the script again.
 * Every script is loaded (SCRIPT LOAD) in HANDSHAKE, before any call, so
 * calls reach Redis in the order sent: a NOSCRIPT, which sends a script
 * again behind calls sent after it, only follows a SCRIPT FLUSH, and the
 * layer above is told (noscript_cb).
 *
 * Connection life cycle (one hiredis async context on the h2o loop):
 *
 *   IDLE --backoff timer--> CONNECTING --connected--> HANDSHAKE --PONG--> READY
 *     ^                         |                         |                 |
 *     +------- failure, or no answer within 2 s ----------+-----------------+
 *
 * SELECT <db> (when the URL names one), the scripts and PING run in
 * HANDSHAKE, so READY means Redis answered; the backoff runs 100 ms,
 * doubling, up to 5 s and starts over once READY. Outside READY every call
 * completes at once with available = 0. Each command has 2 s to get its
 * reply; when one does not (a hung Redis, SIGSTOP) the connection is
 * dropped, which completes every command still in flight with available =
 * 0, and a new one is made. READY and a lost connection are told to the
 * layer above (ready_cb, lost_cb).
 *
 * hiredis completes every pending command with a NULL reply when its
 * context goes away (for whatever reason), and frees the context itself
 * after a disconnect: st->ac is cleared as soon as the context is known to
 * be going, and a NULL reply is simply "unavailable".
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "redis_h2o.h"
#include "redis_int.h"
#include "redis_scripts.h"
#include "util.h"

#define CMD_TIMEOUT_MS 2000
#define HOLD_MS 5        /* a call the lease holds back is sent again after this */
#define HOLD_MAX_MS 3000 /* ... for at most this long (then: unavailable) */

static const uint64_t backoff_ms[] = {100, 200, 400, 800, 1600, 3200, 5000};
_Static_assert(sizeof(backoff_ms) / sizeof(backoff_ms[0]) == NBACKOFF, "NBACKOFF (redis_int.h)");

static void connect_now(redis_state_t *st);
static void on_cmd_timeout(h2o_timeout_entry_t *entry);

static char *xvasprintf(const char *fmt, va_list ap)
{
    char *s;
    if (vasprintf(&s, fmt, ap) < 0)
        sg_oom(strlen(fmt));
    return s;
}

/* v in decimal into s (room bytes, NUL-terminated): its length, or -1
 * when it does not fit. */
static int format_int(char *s, size_t room, long long v)
{
    char digits[24], *p = digits + sizeof(digits);
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do
        *--p = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (v < 0)
        *--p = '-';
    size_t n = (size_t)(digits + sizeof(digits) - p);
    if (n >= room)
        return -1;
    memcpy(s, p, n);
    s[n] = '\0';
    return (int)n;
}

/* The arguments of every admission and execution's end are numbers, keys
 * and tokens: a PRId64, "%ld" or "%d", a plain "%s" and a format without
 * any conversion are written without vsnprintf (2 to 3 % of the gateway's
 * CPU under load). The length, or -1: any other format, or too long. */
static int format_plain(char *s, size_t room, const char *fmt, va_list ap)
{
    const char *p;
    if (strcmp(fmt, "%" PRId64) == 0)
        return format_int(s, room, va_arg(ap, int64_t));
    if (strcmp(fmt, "%ld") == 0)
        return format_int(s, room, va_arg(ap, long));
    if (strcmp(fmt, "%d") == 0)
        return format_int(s, room, va_arg(ap, int));
    if (strcmp(fmt, "%s") == 0)
        p = va_arg(ap, const char *);
    else if (strchr(fmt, '%') == NULL)
        p = fmt;
    else
        return -1;
    if (p == NULL)
        return -1; /* vsnprintf's "(null)" */
    size_t n = strlen(p);
    if (n >= room)
        return -1;
    memcpy(s, p, n + 1);
    return (int)n;
}

void sg_redis__req_arg(redis_req_t *req, const char *fmt, ...)
{
    char *s = req->text + req->text_used;
    size_t room = sizeof(req->text) - req->text_used;
    va_list ap;
    int n;

    assert(req->argc < MAX_ARGS);
    va_start(ap, fmt);
    n = format_plain(s, room, fmt, ap);
    va_end(ap);
    if (n < 0) {
        va_start(ap, fmt);
        n = vsnprintf(s, room, fmt, ap);
        va_end(ap);
    }
    if (n < 0 || (size_t)n >= room) {
        /* a long one (a script's source is not an argument): its own copy */
        va_start(ap, fmt);
        s = xvasprintf(fmt, ap);
        va_end(ap);
        req->owned[req->argc] = s;
        n = (int)strlen(s);
    } else {
        req->text_used += (size_t)n + 1;
    }
    req->argv[req->argc] = s;
    req->argvlen[req->argc] = (size_t)n;
    req->argc++;
}

/* A script call: EVALSHA <sha> <nkeys>, then the caller adds keys and args. */
redis_req_t *sg_redis__req_new(redis_state_t *st, int script, int nkeys, req_done_fn done, void *data)
{
    redis_req_t *req = sg_xmalloc(sizeof(*req));
    memset(req, 0, sizeof(*req));
    req->st = st;
    req->timeout.cb = on_cmd_timeout;
    req->script = script;
    req->done = done;
    req->data = data;
    if (script >= 0) {
        req->argv[0] = "EVALSHA";
        req->argvlen[0] = 7;
        req->argv[1] = sg_state__scripts[script].sha;
        req->argvlen[1] = 40;
        req->argc = 2;
        sg_redis__req_arg(req, "%d", nkeys);
    }
    return req;
}

/* Out of the list of calls held back, if it is there. */
static void unhold(redis_req_t *req)
{
    if (req->wait_prev != NULL) {
        *req->wait_prev = req->wait_next;
        if (req->wait_next != NULL)
            req->wait_next->wait_prev = req->wait_prev;
        req->wait_prev = NULL;
    }
}

void sg_redis__req_finish(redis_req_t *req, redisReply *reply)
{
    if (h2o_timeout_is_linked(&req->timeout))
        h2o_timeout_unlink(&req->timeout);
    if (h2o_timeout_is_linked(&req->wait_entry))
        h2o_timeout_unlink(&req->wait_entry);
    unhold(req);
    req->done(req, reply);
    for (int i = 0; i < req->argc; i++)
        free(req->owned[i]);
    free(req);
}

/* Clears st->ac (the context is going or gone) and schedules the next
 * attempt. Logs once per outage. */
static void connection_lost(redis_state_t *st, const char *why)
{
    phase_t was = st->phase;
    st->ac = NULL;
    if (st->lost_cb != NULL)
        st->lost_cb(st);
    if (h2o_timeout_is_linked(&st->connect_entry))
        h2o_timeout_unlink(&st->connect_entry);
    if (was == PHASE_CLOSED)
        return;
    st->phase = PHASE_IDLE;
    if (was == PHASE_READY) {
        sg_warn("state: redis %s:%d: connection lost (%s); reconnecting", st->host, st->port, why);
        st->outage_logged = 1;
    } else if (!st->outage_logged) {
        sg_warn("state: redis %s:%d: unavailable (%s); retrying", st->host, st->port, why);
        st->outage_logged = 1;
    } else {
        sg_debug("state: redis %s:%d: still unavailable (%s)", st->host, st->port, why);
    }
    if (!h2o_timeout_is_linked(&st->reconnect_entry)) {
        h2o_timeout_link(st->super.loop, &st->backoff[st->backoff_step], &st->reconnect_entry);
        if (st->backoff_step + 1 < NBACKOFF)
            st->backoff_step++;
    }
}

/* Drops the connection: every command in flight completes with available = 0
 * (at once, or — inside a hiredis callback — as soon as it returns). */
static void drop_connection(redis_state_t *st, const char *why)
{
    redisAsyncContext *ac = st->ac;
    if (ac == NULL)
        return;
    connection_lost(st, why);
    ac->data = NULL;
    redisAsyncFree(ac);
}

static void on_reply(redisAsyncContext *ac, void *r, void *privdata);
static int held_back(redis_req_t *req, redisReply *reply);

void sg_redis__req_send(redis_req_t *req)
{
    redis_state_t *st = req->st;
    if (st->before_send_cb != NULL)
        st->before_send_cb(st); /* what the copies decided goes first */
    if (st->phase != PHASE_READY || st->left ||
        sg_redis_h2o_command(st->ac, req->lazy, on_reply, req, req->argc, req->argv, req->argvlen) != REDIS_OK) {
        sg_redis__req_finish(req, NULL);
        return;
    }
    if (!h2o_timeout_is_linked(&req->timeout))
        h2o_timeout_link(st->super.loop, &st->cmd_timeout, &req->timeout);
}

void sg_redis__req_send_now(redis_req_t *req)
{
    redis_state_t *st = req->st;
    sg_redis__req_send(req); /* req may be gone: it failed at once */
    if (st->ac != NULL)
        sg_redis_h2o_flush_now(st->ac);
}

void sg_redis__req_send_lazy(redis_req_t *req)
{
    req->lazy = 1;
    sg_redis__req_send(req);
}

static void on_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    redis_req_t *req = privdata;
    redisReply *reply = r;

    if (reply == NULL && req->st->ac == ac) {
        /* the context is being freed (hiredis gives NULL replies only then):
         * say so now, so that calls made from the callbacks fail fast */
        connection_lost(req->st, ac->err && ac->errstr != NULL ? ac->errstr : "connection closed");
        ac->data = NULL;
    }
    if (held_back(req, reply))
        return;
    if (reply != NULL && reply->type == REDIS_REPLY_ERROR) {
        if (req->script >= 0 && !req->retried && strncmp(reply->str, "NOSCRIPT", 8) == 0) {
            /* scripts were flushed (a restart, SCRIPT FLUSH): EVAL loads it again */
            req->retried = 1;
            req->st->noscripts++;
            if (req->st->noscript_cb != NULL)
                req->st->noscript_cb(req->st);
            req->argv[0] = "EVAL";
            req->argvlen[0] = 4;
            req->argv[1] = sg_state__scripts[req->script].src;
            req->argvlen[1] = strlen(sg_state__scripts[req->script].src);
            sg_debug("state: redis: NOSCRIPT, sending the script again");
            sg_redis__req_send(req);
            return;
        }
        sg_warn("state: redis: %s answered: %.*s", req->argv[0], (int)reply->len, reply->str);
        reply = NULL;
    }
    sg_redis__req_finish(req, reply);
}

static void on_cmd_timeout(h2o_timeout_entry_t *entry)
{
    redis_req_t *req = H2O_STRUCT_FROM_MEMBER(redis_req_t, timeout, entry);
    redis_state_t *st = req->st;
    if (st->ac == NULL) {
        /* cannot happen: dropping a context completes its commands */
        sg_error("state: redis: a command timed out without a connection");
        return;
    }
    /* completes this command (and every other in flight) with NULL */
    drop_connection(st, "no reply within 2 s");
}

static void on_held(h2o_timeout_entry_t *entry)
{
    redis_req_t *req = H2O_STRUCT_FROM_MEMBER(redis_req_t, wait_entry, entry);
    unhold(req);
    sg_redis__req_send(req);
}

/* A guarded script answered {-1}: another gateway holds the solo lease
 * (redis_solo.c). Asked again every HOLD_MS, for at most HOLD_MAX_MS
 * (then: unavailable). A call guarded as a check (guarded 2) is not: its
 * answer goes to its callback. */
static int held_back(redis_req_t *req, redisReply *reply)
{
    redis_state_t *st = req->st;
    if (req->guarded != 1 || reply == NULL || reply->type != REDIS_REPLY_ARRAY || reply->elements != 1 ||
        reply->element[0]->type != REDIS_REPLY_INTEGER || reply->element[0]->integer != -1)
        return 0;
    uint64_t now = sg_now_us();
    if (req->wait_since_us == 0)
        req->wait_since_us = now;
    if (h2o_timeout_is_linked(&req->timeout))
        h2o_timeout_unlink(&req->timeout);
    if (now - req->wait_since_us > HOLD_MAX_MS * 1000ull || st->phase == PHASE_CLOSED) {
        sg_warn("state: redis: another gateway held the admission lease for over %d ms", HOLD_MAX_MS);
        sg_redis__req_finish(req, NULL);
        return 1;
    }
    req->wait_next = st->waiting;
    if (st->waiting != NULL)
        st->waiting->wait_prev = &req->wait_next;
    req->wait_prev = &st->waiting;
    st->waiting = req;
    req->wait_entry.cb = on_held;
    h2o_timeout_link(st->super.loop, &st->hold_timeout, &req->wait_entry);
    return 1;
}

/* This gateway's id as a guarded script's last argument (SOLO_GUARD). */
void sg_redis__req_guard(redis_req_t *req)
{
    sg_redis__req_arg(req, "%s", req->st->id);
    req->guarded = 1;
}

/* ---- connection ------------------------------------------------------------------ */

static void on_ping(redisAsyncContext *ac, void *r, void *privdata)
{
    redis_state_t *st = privdata;
    redisReply *reply = r;
    if (reply == NULL || st->ac != ac)
        return; /* the context is going: connection_lost runs or ran */
    if (reply->type == REDIS_REPLY_ERROR) {
        char why[256];
        snprintf(why, sizeof(why), "%.*s", (int)reply->len, reply->str);
        drop_connection(st, why);
        return;
    }
    h2o_timeout_unlink(&st->connect_entry);
    st->phase = PHASE_READY;
    st->backoff_step = 0;
    if (st->outage_logged)
        sg_info("state: redis %s:%d: connected again", st->host, st->port);
    else
        sg_info("state: redis %s:%d: connected", st->host, st->port);
    st->outage_logged = 0;
    if (st->ready_cb != NULL)
        st->ready_cb(st);
}

static void on_select(redisAsyncContext *ac, void *r, void *privdata)
{
    redis_state_t *st = privdata;
    redisReply *reply = r;
    if (reply == NULL || st->ac != ac)
        return;
    if (reply->type == REDIS_REPLY_ERROR) {
        sg_error("state: redis %s:%d: SELECT %d: %.*s", st->host, st->port, st->db, (int)reply->len, reply->str);
        drop_connection(st, "SELECT failed");
    }
}

static void on_script_load(redisAsyncContext *ac, void *r, void *privdata)
{
    redis_state_t *st = privdata;
    redisReply *reply = r;
    if (reply != NULL && st->ac == ac && reply->type == REDIS_REPLY_ERROR)
        sg_warn("state: redis %s:%d: SCRIPT LOAD: %.*s", st->host, st->port, (int)reply->len, reply->str);
}

static void on_connect(const redisAsyncContext *cac, int status)
{
    redis_state_t *st = cac->data;
    redisAsyncContext *ac = (redisAsyncContext *)cac;
    if (st == NULL || st->ac != ac)
        return;
    if (status != REDIS_OK) {
        /* hiredis frees the context when we return */
        connection_lost(st, ac->errstr != NULL ? ac->errstr : "connect failed");
        ac->data = NULL;
        return;
    }
    st->phase = PHASE_HANDSHAKE;
    if (st->db >= 0)
        redisAsyncCommand(ac, on_select, st, "SELECT %d", st->db);
    /* every script loaded before any call: a NOSCRIPT (sent again as EVAL,
     * so behind calls sent after it) only after a SCRIPT FLUSH */
    for (size_t i = 0; i < SCRIPT_COUNT; i++)
        redisAsyncCommand(ac, on_script_load, st, "SCRIPT LOAD %s", sg_state__scripts[i].src);
    redisAsyncCommand(ac, on_ping, st, "PING");
}

static void on_disconnect(const redisAsyncContext *cac, int status)
{
    redis_state_t *st = cac->data;
    if (st == NULL || st->ac != cac)
        return;
    connection_lost(st, cac->errstr != NULL && cac->err ? cac->errstr : "disconnected");
}

static void on_connect_timeout(h2o_timeout_entry_t *entry)
{
    redis_state_t *st = H2O_STRUCT_FROM_MEMBER(redis_state_t, connect_entry, entry);
    if (st->phase == PHASE_CONNECTING || st->phase == PHASE_HANDSHAKE)
        drop_connection(st, st->phase == PHASE_CONNECTING ? "connect timed out" : "no answer to PING within 2 s");
}

static void on_reconnect(h2o_timeout_entry_t *entry)
{
    redis_state_t *st = H2O_STRUCT_FROM_MEMBER(redis_state_t, reconnect_entry, entry);
    connect_now(st);
}

static void connect_now(redis_state_t *st)
{
    redisAsyncContext *ac = redisAsyncConnect(st->host, st->port);
    if (ac == NULL) {
        connection_lost(st, "out of memory");
        return;
    }
    if (ac->err) {
        char why[256];
        snprintf(why, sizeof(why), "%s", ac->errstr);
        redisAsyncFree(ac);
        connection_lost(st, why);
        return;
    }
    if (sg_redis_h2o_attach(ac, st->super.loop, &st->writes) != REDIS_OK) {
        redisAsyncFree(ac);
        connection_lost(st, "cannot attach to the loop");
        return;
    }
    ac->data = st;
    st->ac = ac;
    st->phase = PHASE_CONNECTING;
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    redisAsyncSetConnectCallback(ac, on_connect);
    h2o_timeout_link(st->super.loop, &st->cmd_timeout, &st->connect_entry);
}

/* ---- replies ------------------------------------------------------------------------ */

int64_t sg_redis__reply_int(const redisReply *r)
{
    if (r == NULL)
        return 0;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
        return strtoll(r->str, NULL, 10);
    return 0;
}

double sg_redis__reply_double(const redisReply *r)
{
    if (r == NULL)
        return 0;
    if (r->type == REDIS_REPLY_INTEGER)
        return (double)r->integer;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
        return strtod(r->str, NULL);
    return 0;
}

void sg_redis__reply_str(const redisReply *r, char *dst, size_t size)
{
    size_t n = 0;
    if (r != NULL && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)) {
        n = r->len < size ? r->len : size - 1;
        memcpy(dst, r->str, n);
    }
    dst[n] = '\0';
}

/* An array reply of at least n elements, or NULL. */
redisReply *sg_redis__reply_array(redisReply *r, size_t n)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < n)
        return NULL;
    return r;
}

/* ---- life cycle ---------------------------------------------------------------------- */

void sg_redis__conn_start(redis_state_t *st)
{
    h2o_loop_t *loop = st->super.loop;
    h2o_timeout_init(loop, &st->cmd_timeout, CMD_TIMEOUT_MS);
    h2o_timeout_init(loop, &st->hold_timeout, HOLD_MS);
    for (size_t i = 0; i < NBACKOFF; i++)
        h2o_timeout_init(loop, &st->backoff[i], backoff_ms[i]);
    st->connect_entry.cb = on_connect_timeout;
    st->reconnect_entry.cb = on_reconnect;
    connect_now(st);
}

void sg_redis__conn_drain(redis_state_t *st, int timeout_ms)
{
    redisAsyncContext *ac = st->ac;
    uint64_t deadline = sg_now_us() + (uint64_t)timeout_ms * 1000;
    char buf[4096];
    int done = 0;

    if (ac == NULL || st->phase != PHASE_READY)
        return;
    int fd = ac->c.fd;
    /* what hiredis still holds (the lazy calls among it), written out */
    while (!done && sg_now_us() < deadline) {
        if (redisBufferWrite(&ac->c, &done) == REDIS_ERR)
            return;
        if (!done) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            poll(&p, 1, 10);
        }
    }
    /* then no more: Redis runs what it has, and closes once it reads the
     * end. Its answers are read and dropped meanwhile: a socket closed with
     * answers unread sends a reset, and Redis may drop calls it had not
     * read yet. */
    if (!done || shutdown(fd, SHUT_WR) != 0)
        return;
    for (;;) {
        uint64_t now = sg_now_us();
        if (now >= deadline)
            return;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left_ms = (int)((deadline - now + 999) / 1000);
        if (poll(&p, 1, left_ms) <= 0)
            return;
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return; /* Redis closed it: everything sent has run */
    }
}

void sg_redis__conn_close(redis_state_t *st)
{
    h2o_loop_t *loop = st->super.loop;
    st->phase = PHASE_CLOSED;
    if (h2o_timeout_is_linked(&st->reconnect_entry))
        h2o_timeout_unlink(&st->reconnect_entry);
    if (h2o_timeout_is_linked(&st->connect_entry))
        h2o_timeout_unlink(&st->connect_entry);
    redisAsyncContext *ac = st->ac;
    st->ac = NULL;
    if (ac != NULL) {
        ac->data = NULL;
        redisAsyncFree(ac); /* completes what is in flight with available = 0 */
    }
    while (st->waiting != NULL)
        sg_redis__req_finish(st->waiting, NULL); /* held back: unavailable */
    h2o_timeout_dispose(loop, &st->cmd_timeout);
    h2o_timeout_dispose(loop, &st->hold_timeout);
    for (size_t i = 0; i < NBACKOFF; i++)
        h2o_timeout_dispose(loop, &st->backoff[i]);
}
