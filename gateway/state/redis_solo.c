/*
 * redis_solo.c — the Redis backend's solo admission (redis_int.h).
 *
 * A gateway that is the only one on its Redis admits executions from its
 * own copy of each tenant's admission keys (solo.h) instead of waiting
 * for SCRIPT_EXEC_ADMIT; the execution goes to the proxy meanwhile. What
 * the copy decided and the ends of executions (sg_redis__mirror_finish)
 * go to Redis in one call per tenant, SCRIPT_SOLO_APPLY (the tenant's
 * "apply"), SOLO_APPLY_MS after the first of them, or before any other
 * call (apply_before_send), so that order is kept; its answer (the
 * in-flight count and the day's) is checked against the copy's.
 *
 * The lease: every gateway beats every SOLO_BEAT_MS (SCRIPT_SOLO_BEAT);
 * one that is alone in the gateways' set and asks (sg_state_redis_solo)
 * holds "sg:solo" for SOLO_TTL_MS, renewed by each beat, and admits from
 * its copy only until SOLO_TTL_MS - SOLO_MARGIN_MS after the beat that
 * renewed it was sent. Every script that admits (SOLO_GUARD) answers
 * "wait" to any other gateway while the key is held, and that gateway asks
 * again shortly (redis_conn.c holds the call back). A holder that finds another gateway beating
 * stops admitting from its copy, then gives the lease back on the same
 * connection, after everything it admitted: so at any moment one gateway
 * decides, and it decides on the whole state. A holder killed holds the
 * others back until its key runs out (at most SOLO_TTL_MS); one destroyed
 * gives it back at once.
 *
 * A tenant's copy is made on its first admission or rate check under the
 * lease: that call goes to Redis as before, SCRIPT_SOLO_SEED right behind
 * it, and the calls that come before the seed's answer wait for it. From
 * then on the copy decides what it is certain of (solo.h): an admission
 * or a refusal at the cap or by the day's quota (with the apply:
 * admit_local, full_local, quota_local), a session's refusal at its cap
 * (sent behind: session_full_local), or a refusal by the rate (nothing
 * sent: refuse_local); an edge goes to Redis and the copy is read again.
 * A session's admission is decided on the copy the same way (its rate
 * step and its reservation among the tenant's live sessions). A slot given
 * back, a day's seconds added, a session committed or removed are applied
 * to the copy. It is dropped when a slot or quota call of its own
 * touches its keys, when Redis answers other than the copy decided, when a
 * NOSCRIPT shows that calls may have reached Redis out of order, and when
 * the lease ends.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "http.h"
#include "log.h"
#include "redis_int.h"
#include "redis_scripts.h"
#include "solo.h"
#include "state_backend.h"
#include "util.h"

#define SOLO_TTL_MS 1000
#define SOLO_MARGIN_MS 300

typedef struct replay {
    struct replay *next;
    char token[65]; /* "": none */
    char day[16];
    double seconds; /* < 0: none */
} replay_t;

/* A call the copy may decide: all three take one path (dispatch). While
 * its tenant's copy is being read it waits in the copy's queue, its
 * strings copied (own). */
typedef enum {
    CALL_ADMIT,   /* an execution's admission (a, cb) */
    CALL_RATE,    /* a rate check (rate_per_min, burst, rate_cb) */
    CALL_SESSION, /* a session's admission (rate_per_min, burst, max, token, cb) */
} call_kind_t;

typedef struct call {
    struct call *next;
    call_kind_t kind;
    long rate_per_min, burst, max; /* burst clamped */
    const char *token;             /* CALL_SESSION: the reservation's */
    sg_admit_args_t a;             /* CALL_ADMIT */
    sg_rate_cb rate_cb;
    sg_admit_cb cb;
    void *data;
    char *own[2]; /* queued: what token, or a.token and a.day, point to */
} call_t;

/* What a copy decided that Redis has not had yet (its "apply"): the sums
 * of the calls that would have gone one by one, in what they leave. At
 * most APPLY_MAX slots and sessions each: one more sends it first. */
#define APPLY_MAX 32

typedef struct {
    char sid[37];
    int64_t now;
    long idle_timeout;
    long execs;
} apply_touch_t;

typedef struct {
    int rate;                      /* a rate step taken: the rate key holds tat from then on */
    int64_t tat_ms;                /* ... the copy's after its last step */
    sg_solo_slot_t add[APPLY_MAX]; /* slots taken and still held */
    size_t nadd;
    char rem[APPLY_MAX][65]; /* slots given back that Redis holds */
    size_t nrem;
    long execs;     /* the day's executions to add */
    double seconds; /* the day's seconds to add (the copy's day) */
    apply_touch_t touch[APPLY_MAX];
    size_t ntouch;
} apply_t;

typedef struct mirror {
    struct mirror *next;
    sg_solo_tenant_t t;
    int ready;                       /* seeded; else its SCRIPT_SOLO_SEED is on its way */
    int spoiled;                     /* seeding, and a call the seed cannot know of went */
    replay_t *replay, **replay_tail; /* given back while seeding: applied to the seed */
    call_t *queue, **queue_tail;     /* calls while seeding: decided on the seed */
    apply_t *apply;                  /* not NULL: in st->dirty */
    struct mirror *dirty_next;
} mirror_t;

static redis_req_t *admit_req(redis_state_t *st, int64_t tenant, const sg_admit_args_t *a, int64_t now_ms,
                              int64_t now_s, req_done_fn done, void *data);
static redis_req_t *rate_req(redis_state_t *st, int64_t tenant, long rate_per_min, long burst, int64_t now_ms,
                             req_done_fn done, void *data);
static void dispatch(redis_state_t *st, int64_t tenant, const call_t *c);

/* The arguments of the rate step that heads an admitting script (RATE_STEP,
 * redis_scripts.c: ARGV now ms, emission interval, burst), after the
 * script's keys; and what its answer is read with (sg_gcra). */
static void rate_step_args(redis_req_t *req, long rate_per_min, long burst, int64_t now_ms)
{
    req->now_ms = now_ms;
    req->rate_per_min = rate_per_min;
    req->burst = burst;
    sg_redis__req_arg(req, "%" PRId64, now_ms);
    sg_redis__req_arg(req, "%" PRId64, sg_gcra_interval_ms(rate_per_min));
    sg_redis__req_arg(req, "%ld", burst);
}

static void on_nothing(redis_req_t *req, redisReply *reply)
{
    (void)req;
    (void)reply;
}

/* The list of tenant's copy (tenant ids are a table's rowids: consecutive
 * ids fall in different lists). */
static mirror_t **bucket(redis_state_t *st, int64_t tenant)
{
    return &st->mirrors[(uint64_t)tenant % MIRROR_BUCKETS];
}

static mirror_t *mirror_find(redis_state_t *st, int64_t tenant)
{
    for (mirror_t *m = *bucket(st, tenant); m != NULL; m = m->next)
        if (m->t.tenant == tenant)
            return m;
    return NULL;
}

/* m out of the list of copies with an apply waiting. */
static void dirty_unlink(redis_state_t *st, mirror_t *m)
{
    for (mirror_t **p = &st->dirty; *p != NULL; p = &(*p)->dirty_next) {
        if (*p == m) {
            *p = m->dirty_next;
            break;
        }
    }
}

static void mirror_unlink_free(redis_state_t *st, mirror_t *m)
{
    for (mirror_t **p = bucket(st, m->t.tenant); *p != NULL; p = &(*p)->next) {
        if (*p == m) {
            *p = m->next;
            break;
        }
    }
    if (m->apply != NULL) { /* its decisions were sent (drop) or can no longer be (destroy) */
        dirty_unlink(st, m);
        free(m->apply);
    }
    while (m->replay != NULL) {
        replay_t *r = m->replay;
        m->replay = r->next;
        free(r);
    }
    sg_solo_free(&m->t);
    free(m);
}

static void apply_send(redis_state_t *st, mirror_t *m);

/* The copy of a tenant is not to be trusted any more: what it decided
 * still goes to Redis (those executions run). */
static void drop(redis_state_t *st, mirror_t *m)
{
    if (m->apply != NULL)
        apply_send(st, m);
    if (m->ready)
        mirror_unlink_free(st, m);
    else
        m->spoiled = 1; /* its seed's answer removes it */
}

void sg_redis__mirror_drop(redis_state_t *st, int64_t tenant)
{
    mirror_t *m = mirror_find(st, tenant);
    if (m != NULL)
        drop(st, m);
}

static void mirror_drop_all(redis_state_t *st)
{
    for (size_t i = 0; i < MIRROR_BUCKETS; i++) {
        for (mirror_t *m = st->mirrors[i], *next; m != NULL; m = next) {
            next = m->next;
            drop(st, m);
        }
    }
}

/* A slot given back, a day's seconds added: applied to the copy (to the
 * seed when it comes). */
void sg_redis__mirror_given_back(redis_state_t *st, int64_t tenant, const char *token, const char *day, double seconds)
{
    mirror_t *m = mirror_find(st, tenant);
    if (m == NULL || m->spoiled)
        return;
    if (m->apply != NULL)
        apply_send(st, m); /* the call about to go after it changes what its answer is checked against */
    if (m->ready) {
        if (token != NULL)
            sg_solo_release(&m->t, token);
        if (day != NULL && seconds >= 0)
            sg_solo_add_seconds(&m->t, day, seconds);
        return;
    }
    replay_t *r = sg_xcalloc(1, sizeof(*r));
    snprintf(r->token, sizeof(r->token), "%s", token != NULL ? token : "");
    snprintf(r->day, sizeof(r->day), "%s", day != NULL ? day : "");
    r->seconds = day != NULL ? seconds : -1;
    *m->replay_tail = r;
    m->replay_tail = &r->next;
}

static void solo_leave(redis_state_t *st, const char *why)
{
    if (!st->solo)
        return;
    st->solo = 0;
    mirror_drop_all(st);
    sg_info("state: redis: this gateway no longer admits from its own copy (%s)", why);
    if (st->phase == PHASE_READY) {
        /* after every admission it sent: the next gateway finds them all */
        redis_req_t *req = sg_redis__req_new(st, SCRIPT_SOLO_RELEASE, 1, on_nothing, NULL);
        sg_redis__req_arg(req, "sg:solo");
        sg_redis__req_arg(req, "%s", st->id);
        sg_redis__req_send(req);
    }
}

/* At destroy, the lease given back at once, so that the next gateway need
 * not wait for it to run out: a blocking call on a connection of its own,
 * 200 ms at most, once the connection's calls have run
 * (sg_redis__conn_drain, by the caller). */
void sg_redis__solo_give_back_now(redis_state_t *st)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout(st->host, st->port, tv);
    if (c == NULL || c->err) {
        if (c != NULL)
            redisFree(c);
        return;
    }
    redisSetTimeout(c, tv);
    redisReply *r = NULL;
    if (st->db >= 0 && (r = redisCommand(c, "SELECT %d", st->db)) != NULL)
        freeReplyObject(r);
    r = redisCommand(c, "EVAL %s 1 sg:solo %s", sg_state__scripts[SCRIPT_SOLO_RELEASE].src, st->id);
    if (r != NULL)
        freeReplyObject(r);
    if ((r = redisCommand(c, "ZREM sg:gateways %s", st->id)) != NULL) /* gone: another may hold it at once */
        freeReplyObject(r);
    redisFree(c);
}

static void solo_lost(redis_state_t *st)
{
    if (st->solo)
        sg_info("state: redis: this gateway no longer admits from its own copy (the connection is lost)");
    st->solo = 0;
    mirror_drop_all(st);
}

static int solo_active(redis_state_t *st)
{
    if (st->solo && sg_now_us() >= st->solo_until_us)
        solo_leave(st, "its lease was not renewed in time");
    return st->solo;
}

void sg_redis__solo_send_behind(redis_req_t *req)
{
    if (solo_active(req->st))
        sg_redis__req_send_lazy(req);
    else
        sg_redis__req_send(req);
}

static void on_beat(redis_req_t *req, redisReply *reply)
{
    redis_state_t *st = req->st;
    st->beat_inflight = 0;
    if ((reply = sg_redis__reply_array(reply, 2)) == NULL) {
        solo_leave(st, "no answer to its beat");
        return;
    }
    if (sg_redis__reply_int(reply->element[0]) == 1) {
        if (!st->solo)
            sg_info("state: redis: the only gateway on this Redis: executions are admitted from its own copy");
        st->solo = 1;
        st->solo_until_us = (uint64_t)req->now_ms * 1000 + (SOLO_TTL_MS - SOLO_MARGIN_MS) * 1000ull;
    } else if (st->solo) {
        solo_leave(st, sg_redis__reply_int(reply->element[1]) > 1 ? "another gateway beats on this Redis"
                                                                  : "the lease is held by another gateway");
    }
}

static void solo_beat(redis_state_t *st)
{
    if (st->phase != PHASE_READY)
        return;
    if (!h2o_timeout_is_linked(&st->beat_entry))
        h2o_timeout_link(st->super.loop, &st->beat_timeout, &st->beat_entry);
    if (st->beat_inflight)
        return;
    redis_req_t *req = sg_redis__req_new(st, SCRIPT_SOLO_BEAT, 2, on_beat, NULL);
    req->now_ms = (int64_t)(sg_now_us() / 1000); /* the lease runs from the beat's sending */
    sg_redis__req_arg(req, "sg:gateways");
    sg_redis__req_arg(req, "sg:solo");
    sg_redis__req_arg(req, "%s", st->id);
    sg_redis__req_arg(req, "%d", SOLO_TTL_MS);
    sg_redis__req_arg(req, "%d", st->want_solo ? 1 : 0);
    st->beat_inflight = 1;
    sg_redis__req_send(req);
}

static void on_beat_timer(h2o_timeout_entry_t *entry)
{
    redis_state_t *st = H2O_STRUCT_FROM_MEMBER(redis_state_t, beat_entry, entry);
    solo_beat(st);
}

void sg_redis__solo_mismatch(redis_req_t *req, const char *what)
{
    redis_state_t *st = req->st;
    st->mismatches++;
    sg_warn("state: redis: an admission of tenant %" PRId64 " made from this gateway's copy: %s; the copy is dropped",
            req->tenant, what);
    sg_redis__mirror_drop(st, req->tenant);
}

/* Redis's answer to a call the copy decided, as an array of n elements to
 * check against the copy's; NULL when there is nothing to check (the
 * connection went, and the lease with it) or it has another shape (then a
 * mismatch: Redis did not answer it as `as`). */
static redisReply *copy_answer(redis_req_t *req, redisReply *reply, size_t n, const char *as)
{
    char what[96];
    if (req->st->phase != PHASE_READY && reply == NULL)
        return NULL;
    if ((reply = sg_redis__reply_array(reply, n)) == NULL) {
        snprintf(what, sizeof(what), "Redis did not answer it as %s", as);
        sg_redis__solo_mismatch(req, what);
    }
    return reply;
}

/* ---- apply: what the copies decided, one call per tenant ---- */

/* The answer to an apply: {1, in flight, the day's executions}; {-1, 0,
 * 0} when another gateway held the lease (its admissions were not taken). */
static void on_apply(redis_req_t *req, redisReply *reply)
{
    char what[200];
    if (req->st->applying)
        return; /* not sent (no connection, or the state has left): its copy goes with the connection */
    if ((reply = copy_answer(req, reply, 3, "the copy's decisions")) == NULL)
        return;
    int64_t held = sg_redis__reply_int(reply->element[0]), n = sg_redis__reply_int(reply->element[1]);
    int64_t execs = sg_redis__reply_int(reply->element[2]);
    if (held != 1) {
        sg_redis__solo_mismatch(req, "Redis did not take its decisions: another gateway held the lease");
    } else if (n != req->exp_in_flight || (req->exp_execs >= 0 && execs != req->exp_execs)) {
        snprintf(what, sizeof(what),
                 "Redis holds %" PRId64 " in flight (the copy: %ld) and %" PRId64 " today (the copy: %" PRId64 ")", n,
                 req->exp_in_flight, execs, req->exp_execs);
        sg_redis__solo_mismatch(req, what);
    }
}

/* m's apply, to be added to; the copy joins st->dirty, and the calls
 * are sent SOLO_APPLY_MS after the first. */
static apply_t *apply_of(redis_state_t *st, mirror_t *m)
{
    if (m->apply == NULL) {
        m->apply = sg_xcalloc(1, sizeof(*m->apply));
        m->dirty_next = st->dirty;
        st->dirty = m;
        if (!h2o_timeout_is_linked(&st->apply_entry))
            h2o_timeout_link(st->super.loop, &st->apply_timeout, &st->apply_entry);
    }
    return m->apply;
}

/* Before the copy takes a decision that adds a slot, a slot given back or
 * a session: a full apply goes first (its answer is checked against the
 * copy as it is then). */
static void apply_room(redis_state_t *st, mirror_t *m)
{
    apply_t *ap = m->apply;
    if (ap != NULL && (ap->nadd == APPLY_MAX || ap->nrem == APPLY_MAX || ap->ntouch == APPLY_MAX))
        apply_send(st, m);
}

/* A rate step the copy took (interval_ms > 0): the rate key holds the
 * copy's arrival time. */
static void apply_rate(redis_state_t *st, mirror_t *m, int64_t interval_ms)
{
    if (interval_ms <= 0)
        return; /* no rate: the scripts skip the step */
    apply_t *ap = apply_of(st, m);
    ap->rate = 1;
    ap->tat_ms = m->t.tat_ms;
}

static void apply_send(redis_state_t *st, mirror_t *m)
{
    apply_t *ap = m->apply;
    dirty_unlink(st, m);
    m->apply = NULL;

    int64_t now_ms = sg_state__now_ms(&st->super), now_s = sg_state__now_s(&st->super);
    int64_t tenant = m->t.tenant;
    sg_buf_t adds, rems, touches; /* the lists, as the script reads them (no cap: APPLY_MAX bounds them) */
    sg_buf_init(&adds, SIZE_MAX);
    sg_buf_init(&rems, SIZE_MAX);
    sg_buf_init(&touches, SIZE_MAX);
    for (size_t i = 0; i < ap->nadd; i++)
        sg_buf_appendf(&adds, "%" PRId64 " %s ", ap->add[i].until_s, ap->add[i].token);
    for (size_t i = 0; i < ap->nrem; i++)
        sg_buf_appendf(&rems, "%s ", ap->rem[i]);
    for (size_t i = 0; i < ap->ntouch; i++) {
        const apply_touch_t *t = &ap->touch[i];
        sg_buf_appendf(&touches, "%s %" PRId64 " %" PRId64 " %ld ", t->sid, t->now, t->now + t->idle_timeout, t->execs);
    }

    redis_req_t *req = sg_redis__req_new(st, SCRIPT_SOLO_APPLY, 4, on_apply, NULL);
    req->tenant = tenant;
    req->exp_in_flight = sg_solo_in_flight(&m->t, now_s);
    /* the day's executions are checked while the copy trusts its key */
    req->exp_execs = m->t.quota && (int64_t)(sg_now_us() / 1000) < m->t.quota_till_ms ? m->t.execs : -1;
    sg_redis__req_arg(req, "sg:rate:%" PRId64, tenant);
    sg_redis__req_arg(req, "sg:tenant:%" PRId64 ":execs", tenant);
    sg_redis__req_arg(req, "sg:quota:%" PRId64 ":%s", tenant, m->t.day);
    sg_redis__req_arg(req, "sg:sessions:idle");
    sg_redis__req_arg(req, "%" PRId64, now_s);
    if (ap->rate && ap->tat_ms > now_ms) { /* else the key has run out by now */
        sg_redis__req_arg(req, "%" PRId64, ap->tat_ms);
        sg_redis__req_arg(req, "%" PRId64, ap->tat_ms - now_ms);
    } else {
        sg_redis__req_arg(req, "%s", "");
        sg_redis__req_arg(req, "%s", "0");
    }
    sg_redis__req_arg(req, "%s", adds.len ? adds.base : "");
    sg_redis__req_arg(req, "%s", rems.len ? rems.base : "");
    sg_redis__req_arg(req, "%ld", ap->execs);
    if (ap->seconds > 0)
        sg_redis__req_arg(req, "%.17g", ap->seconds);
    else
        sg_redis__req_arg(req, "%s", "");
    sg_redis__req_arg(req, "%s", touches.len ? touches.base : "");
    sg_redis__req_arg(req, "%d", SG_STATE_EXECS_KEY_SLACK);
    sg_redis__req_arg(req, "%s", st->id);
    sg_buf_free(&adds);
    sg_buf_free(&rems);
    sg_buf_free(&touches);
    free(ap);
    st->applies++;
    st->applying = 1;
    sg_redis__req_send(req);
    st->applying = 0;
}

void sg_redis__solo_apply_all(redis_state_t *st)
{
    if (h2o_timeout_is_linked(&st->apply_entry))
        h2o_timeout_unlink(&st->apply_entry);
    while (st->dirty != NULL)
        apply_send(st, st->dirty);
}

/* Before any call: the applies waiting go first (not before their own). */
static void apply_before_send(redis_state_t *st)
{
    if (st->dirty != NULL && !st->applying)
        sg_redis__solo_apply_all(st);
}

static void on_apply_timer(h2o_timeout_entry_t *entry)
{
    sg_redis__solo_apply_all(H2O_STRUCT_FROM_MEMBER(redis_state_t, apply_entry, entry));
}

/* A token or session id that goes into an apply's lists: no spaces, at
 * most max bytes. */
static int apply_word(const char *s, size_t max)
{
    return s != NULL && s[0] != '\0' && strlen(s) <= max && strpbrk(s, " \t\r\n\v\f") == NULL;
}

int sg_redis__mirror_finish(redis_state_t *st, int64_t tenant, const sg_finish_args_t *a)
{
    int touch = a->sid != NULL && a->sid[0] != '\0';
    mirror_t *m = mirror_find(st, tenant);
    if (m == NULL || !m->ready || m->spoiled || !apply_word(a->token, 64) || (touch && !apply_word(a->sid, 36)))
        return 0;
    if (a->seconds >= 0 && (a->day == NULL || strcmp(a->day, m->t.day) != 0))
        return 0; /* another day's key: alone */
    if (!solo_active(st) || (m = mirror_find(st, tenant)) == NULL)
        return 0;
    apply_room(st, m);
    apply_t *ap = apply_of(st, m);
    sg_solo_release(&m->t, a->token);
    if (a->seconds >= 0)
        sg_solo_add_seconds(&m->t, a->day, a->seconds);
    size_t i;
    for (i = 0; i < ap->nadd && strcmp(ap->add[i].token, a->token) != 0; i++)
        ;
    if (i < ap->nadd) /* taken and given back before Redis had it */
        ap->add[i] = ap->add[--ap->nadd];
    else
        snprintf(ap->rem[ap->nrem++], sizeof(ap->rem[0]), "%s", a->token);
    if (a->seconds > 0)
        ap->seconds += a->seconds;
    if (touch) {
        for (i = 0; i < ap->ntouch && strcmp(ap->touch[i].sid, a->sid) != 0; i++)
            ;
        apply_touch_t *t = &ap->touch[i];
        if (i == ap->ntouch) {
            ap->ntouch++;
            snprintf(t->sid, sizeof(t->sid), "%s", a->sid);
            t->execs = 0;
        }
        t->now = a->now;
        t->idle_timeout = a->idle_timeout;
        t->execs += a->add_exec;
    }
    return 1;
}

/* A tenant's copy, to be read right behind the call about to be sent. */
static mirror_t *mirror_new(redis_state_t *st, int64_t tenant)
{
    mirror_t *m = sg_xcalloc(1, sizeof(*m));
    m->t.tenant = tenant;
    m->replay_tail = &m->replay;
    m->queue_tail = &m->queue;
    m->next = *bucket(st, tenant);
    *bucket(st, tenant) = m;
    return m;
}

/* c, to be decided on the copy's seed. */
static void mirror_queue(mirror_t *m, const call_t *c)
{
    call_t *q = sg_xmalloc(sizeof(*q));
    *q = *c;
    q->next = NULL;
    if (q->kind == CALL_ADMIT) {
        q->a.token = q->own[0] = sg_xstrdup(c->a.token);
        q->a.day = q->own[1] = sg_xstrdup(c->a.day);
    } else if (q->kind == CALL_SESSION) {
        q->token = q->own[0] = sg_xstrdup(c->token);
    }
    *m->queue_tail = q;
    m->queue_tail = &q->next;
}

static void call_free(call_t *q)
{
    free(q->own[0]);
    free(q->own[1]);
    free(q);
}

/* A call the copy decided, sent to Redis behind its answer (a "wait" there
 * is not waited out: it is a mismatch), and counted. */
static void send_behind_copy(redis_req_t *req, uint64_t *counted)
{
    req->guarded = 2;
    sg_redis__req_send_lazy(req);
    (*counted)++;
}

/* The answer of an admission the copy made: the rate's at now_ms from the
 * stored tat, allowed, the slot taken, in_flight after it. */
static void copy_admitted(sg_admit_result_t *r, int64_t now_ms, int64_t stored, long rate_per_min, long burst,
                          long in_flight)
{
    int64_t new_tat;
    memset(r, 0, sizeof(*r));
    r->available = 1;
    sg_gcra(now_ms, stored, rate_per_min, burst, &r->rate, &new_tat);
    r->rate.allowed = 1;
    r->slot = 1;
    r->in_flight = in_flight;
}

/* Redis's answer of n elements, as `as`, to a call the copy decided:
 * allowed, its slot (or reservation) want_slot, and the count the copy
 * expected, named `counted`; for an execution's admission (7 elements),
 * also the quota's status (exp_quota). The answer when it agrees, else
 * NULL (a mismatch counted, unless the connection went). */
static redisReply *check_slot_answer(redis_req_t *req, redisReply *reply, size_t n, const char *as, int64_t want_slot,
                                     const char *counted)
{
    char what[224];
    if ((reply = copy_answer(req, reply, n, as)) == NULL)
        return NULL;
    int64_t allowed = sg_redis__reply_int(reply->element[0]), slot = sg_redis__reply_int(reply->element[2]);
    int64_t count = sg_redis__reply_int(reply->element[3]);
    int64_t quota = n == 7 ? sg_redis__reply_int(reply->element[4]) : req->exp_quota;
    if (allowed != 1 || slot != want_slot || count != req->exp_in_flight || quota != req->exp_quota) {
        snprintf(what, sizeof(what),
                 "Redis answered %s with rate %" PRId64 ", slot %" PRId64 ", %" PRId64
                 " %s (the copy: %ld), quota %" PRId64 " (the copy: %d)",
                 as, allowed, slot, count, counted, req->exp_in_flight, quota, req->exp_quota);
        sg_redis__solo_mismatch(req, what);
        return NULL;
    }
    return reply;
}

/* A refusal of an execution's admission the copy made for certain, r as
 * Redis's answer would read: the script's rate step goes with the
 * tenant's apply (its lapsed slots are dropped there too; a slot taken and
 * given back leaves nothing), and r to cb. */
static void refuse_applied(redis_state_t *st, mirror_t *m, const sg_solo_admit_t *sa, const sg_admit_result_t *r,
                           sg_admit_cb cb, void *data)
{
    apply_rate(st, m, sa->interval_ms);
    (void)apply_of(st, m);
    st->local_refusals++;
    cb(data, r);
}

/* 1 when the copy refused the admission at the tenant's cap for certain:
 * the script still takes the rate step and drops the lapsed slots, so it
 * is sent behind like an admission, its answer checked; the copy stays
 * (before, such a refusal went to Redis and the copy was read again,
 * which a tenant working at its cap did on most of its calls). */
static int full_local(redis_state_t *st, mirror_t *m, int64_t tenant, const sg_admit_args_t *a,
                      const sg_solo_admit_t *sa, sg_admit_cb cb, void *data)
{
    int64_t stored;
    long n;
    if (!sg_solo_admit_full(&m->t, sa, &stored, &n))
        return 0;
    sg_admit_result_t r; /* as sg_redis__on_admit reads the script's answer */
    copy_admitted(&r, sa->now_ms, stored, a->rate_per_min, sa->burst, n);
    r.slot = 0;
    refuse_applied(st, m, sa, &r, cb, data);
    return 1;
}

/* 1 when the copy refused the admission by the day's quota for certain:
 * sent behind like a refusal at the cap (the script takes the rate step,
 * drops the lapsed slots, and takes and gives back the slot), its answer
 * checked; the copy stays. Before, a tenant past its day's executions sent
 * every call to Redis and had its copy read again behind it. */
static int quota_local(redis_state_t *st, mirror_t *m, int64_t tenant, const sg_admit_args_t *a,
                       const sg_solo_admit_t *sa, sg_admit_cb cb, void *data)
{
    int64_t stored, execs;
    long n;
    int status;
    double seconds;
    if (!sg_solo_admit_quota(&m->t, sa, &stored, &n, &status, &execs, &seconds))
        return 0;
    sg_admit_result_t r; /* as sg_redis__on_admit reads the script's answer */
    copy_admitted(&r, sa->now_ms, stored, a->rate_per_min, sa->burst, n);
    r.quota = (sg_quota_status_t)status;
    r.execs = execs;
    r.seconds = seconds;
    refuse_applied(st, m, sa, &r, cb, data);
    return 1;
}

/* 1 when the copy admitted (the script sent to Redis behind it, cb run). */
static int admit_local(redis_state_t *st, mirror_t *m, int64_t tenant, const sg_admit_args_t *a, sg_admit_cb cb,
                       void *data)
{
    long burst = sg_gcra_burst(a->burst);
    sg_solo_admit_t sa = {.now_ms = sg_state__now_ms(&st->super),
                          .now_s = sg_state__now_s(&st->super),
                          .mono_ms = (int64_t)(sg_now_us() / 1000),
                          .interval_ms = sg_gcra_interval_ms(a->rate_per_min),
                          .burst = burst,
                          .max_execs = a->max_execs,
                          .token = a->token,
                          .day = a->day,
                          .execs_per_day = a->execs_per_day,
                          .seconds_per_day = a->seconds_per_day};
    sa.until_s = sa.now_s + a->lease_s;
    int64_t stored, execs;
    long n;
    double seconds;
    if (!apply_word(a->token, 64))
        return 0; /* cannot happen: slot tokens are "<sid>/<hex>" */
    apply_room(st, m);
    if (!sg_solo_admit(&m->t, &sa, &stored, &n, &execs, &seconds))
        return full_local(st, m, tenant, a, &sa, cb, data) || quota_local(st, m, tenant, a, &sa, cb, data);
    apply_rate(st, m, sa.interval_ms);
    apply_t *ap = apply_of(st, m);
    snprintf(ap->add[ap->nadd].token, sizeof(ap->add[0].token), "%s", a->token);
    ap->add[ap->nadd++].until_s = sa.until_s;
    ap->execs++;
    st->local_admits++;

    sg_admit_result_t r;
    copy_admitted(&r, sa.now_ms, stored, a->rate_per_min, burst, n);
    r.quota = SG_QUOTA_OK;
    r.execs = execs;
    r.seconds = seconds;
    cb(data, &r);
    return 1;
}

static void send_seed(redis_state_t *st, int64_t tenant, const char *day);

/* {tat, quota pttl, execs, seconds, member, score, ...} */
static void on_seed(redis_req_t *req, redisReply *reply)
{
    redis_state_t *st = req->st;
    mirror_t *m = mirror_find(st, req->tenant);
    if (m == NULL || m->ready)
        return; /* cannot happen: a seeding copy is removed only here */
    call_t *q = m->queue;
    m->queue = NULL;
    m->queue_tail = &m->queue;
    int ok = !m->spoiled && st->solo && req->exp_execs == (int64_t)st->noscripts &&
             (reply = sg_redis__reply_array(reply, 5)) != NULL;
    /* k values of the in-flight set after the first five, the sessions set's after them */
    int64_t k = ok ? sg_redis__reply_int(reply->element[4]) : -1;
    ok = ok && k >= 0 && k % 2 == 0 && (size_t)k <= reply->elements - 5 && (reply->elements - 5 - (size_t)k) % 2 == 0;
    if (ok) {
        sg_solo_load(&m->t, sg_redis__reply_int(reply->element[0]), sg_redis__reply_int(reply->element[1]), req->day,
                     sg_redis__reply_int(reply->element[2]), sg_redis__reply_double(reply->element[3]),
                     (int64_t)(sg_now_us() / 1000));
        for (size_t i = 5; ok && i + 1 < reply->elements; i += 2) {
            char member[80];
            sg_redis__reply_str(reply->element[i], member, sizeof(member));
            int64_t score = sg_redis__reply_int(reply->element[i + 1]);
            if (i < 5 + (size_t)k)
                ok = sg_solo_add_slot(&m->t, member, score) == 0;
            else
                ok = sg_solo_add_session(&m->t, member, score) == 0;
        }
        for (replay_t *r = m->replay; ok && r != NULL; r = r->next) {
            if (r->token[0])
                sg_solo_release(&m->t, r->token);
            if (r->seconds >= 0)
                sg_solo_add_seconds(&m->t, r->day, r->seconds);
        }
    }
    if (ok)
        m->ready = 1;
    else
        mirror_unlink_free(st, m);
    while (q != NULL) {
        call_t *next = q->next;
        dispatch(st, req->tenant, q);
        call_free(q);
        q = next;
    }
}

/* {allowed, stored tat} */
void sg_redis__on_rate(redis_req_t *req, redisReply *reply)
{
    if ((reply = sg_redis__reply_array(reply, 2)) == NULL) {
        sg_state__fail_rate(req->cb.rate, req->data, req->burst);
        return;
    }
    int allowed = sg_redis__reply_int(reply->element[0]) != 0;
    int64_t stored = sg_redis__reply_int(reply->element[1]), new_tat;
    sg_rate_result_t r;
    sg_gcra(req->now_ms, stored, req->rate_per_min, req->burst, &r, &new_tat);
    if (r.allowed != allowed) {
        /* cannot happen: the script is the same computation */
        sg_error("state: redis: rate script and sg_gcra disagree (tat %" PRId64 ", now %" PRId64 ")", stored,
                 req->now_ms);
        r.allowed = allowed;
    }
    req->cb.rate(req->data, &r);
}

/* {allowed, stored tat, slot, in flight, quota status, execs, seconds} */
void sg_redis__on_admit(redis_req_t *req, redisReply *reply)
{
    sg_admit_result_t r;
    int64_t new_tat;

    memset(&r, 0, sizeof(r));
    if ((reply = sg_redis__reply_array(reply, 7)) == NULL) {
        req->cb.admit(req->data, &r);
        return;
    }
    r.available = 1;
    sg_gcra(req->now_ms, sg_redis__reply_int(reply->element[1]), req->rate_per_min, req->burst, &r.rate, &new_tat);
    r.rate.allowed = sg_redis__reply_int(reply->element[0]) != 0;
    if (r.rate.allowed) {
        r.slot = sg_redis__reply_int(reply->element[2]) != 0;
        r.in_flight = (long)sg_redis__reply_int(reply->element[3]);
        int64_t status = sg_redis__reply_int(reply->element[4]);
        r.quota = status >= SG_QUOTA_OK && status <= SG_QUOTA_UNSEEDED ? (sg_quota_status_t)status : SG_QUOTA_UNSEEDED;
        r.execs = sg_redis__reply_int(reply->element[5]);
        r.seconds = sg_redis__reply_double(reply->element[6]);
    }
    req->cb.admit(req->data, &r);
}

/* SCRIPT_RATE at now_ms (guarded). */
static redis_req_t *rate_req(redis_state_t *st, int64_t tenant, long rate_per_min, long burst, int64_t now_ms,
                             req_done_fn done, void *data)
{
    redis_req_t *req = sg_redis__req_new(st, SCRIPT_RATE, 1, done, data);
    req->tenant = tenant;
    sg_redis__req_arg(req, "sg:rate:%" PRId64, tenant);
    rate_step_args(req, rate_per_min, burst, now_ms);
    sg_redis__req_guard(req);
    return req;
}

static void send_rate(redis_state_t *st, int64_t tenant, long rate_per_min, long burst, sg_rate_cb cb, void *data)
{
    redis_req_t *req = rate_req(st, tenant, rate_per_min, burst, sg_state__now_ms(&st->super), sg_redis__on_rate, data);
    req->cb.rate = cb;
    sg_redis__req_send(req);
}

/* 1 when the copy allowed the request (the script sent to Redis behind it,
 * cb run). */
static int rate_local(redis_state_t *st, mirror_t *m, int64_t tenant, long rate_per_min, long burst, sg_rate_cb cb,
                      void *data)
{
    int64_t now_ms = sg_state__now_ms(&st->super), stored, unused;
    if (!sg_solo_rate(&m->t, now_ms, sg_gcra_interval_ms(rate_per_min), burst, &stored))
        return 0;
    apply_rate(st, m, sg_gcra_interval_ms(rate_per_min));
    st->local_admits++;
    sg_rate_result_t r;
    sg_gcra(now_ms, stored, rate_per_min, burst, &r, &unused);
    cb(data, &r);
    return 1;
}

/* SCRIPT_EXEC_ADMIT for tenant at now_ms / now_s (guarded). */
static redis_req_t *admit_req(redis_state_t *st, int64_t tenant, const sg_admit_args_t *a, int64_t now_ms,
                              int64_t now_s, req_done_fn done, void *data)
{
    redis_req_t *req = sg_redis__req_new(st, SCRIPT_EXEC_ADMIT, 3, done, data);
    long burst = sg_gcra_burst(a->burst);

    sg_redis__req_arg(req, "sg:rate:%" PRId64, tenant);
    sg_redis__req_arg(req, "sg:tenant:%" PRId64 ":execs", tenant);
    sg_redis__req_arg(req, "sg:quota:%" PRId64 ":%s", tenant, a->day);
    rate_step_args(req, a->rate_per_min, burst, now_ms);
    sg_redis__req_arg(req, "%" PRId64, now_s);
    sg_redis__req_arg(req, "%ld", a->max_execs);
    sg_redis__req_arg(req, "%.64s", a->token);
    sg_redis__req_arg(req, "%" PRId64, now_s + a->lease_s);
    sg_redis__req_arg(req, "%d", SG_STATE_EXECS_KEY_SLACK);
    sg_redis__req_arg(req, "%ld", a->execs_per_day);
    sg_redis__req_arg(req, "%.17g", a->seconds_per_day);
    sg_redis__req_guard(req);
    return req;
}

/* The admission decided by Redis, its answer to cb. */
static void send_admit(redis_state_t *st, int64_t tenant, const sg_admit_args_t *a, sg_admit_cb cb, void *data)
{
    redis_req_t *req =
        admit_req(st, tenant, a, sg_state__now_ms(&st->super), sg_state__now_s(&st->super), sg_redis__on_admit, data);
    req->cb.admit = cb;
    sg_redis__req_send(req);
}

static void send_seed(redis_state_t *st, int64_t tenant, const char *day)
{
    redis_req_t *req = sg_redis__req_new(st, SCRIPT_SOLO_SEED, 4, on_seed, NULL);
    req->tenant = tenant;
    req->exp_execs = (int64_t)st->noscripts; /* a NOSCRIPT before its answer: it may have run out of order */
    snprintf(req->day, sizeof(req->day), "%s", day);
    sg_redis__req_arg(req, "sg:rate:%" PRId64, tenant);
    sg_redis__req_arg(req, "sg:tenant:%" PRId64 ":execs", tenant);
    sg_redis__req_arg(req, "sg:quota:%" PRId64 ":%s", tenant, day);
    sg_redis__req_arg(req, "sg:tenant:%" PRId64 ":sessions", tenant);
    sg_redis__req_send(req);
}

/* ---- a session's admission ---- */

/* SCRIPT_SESSION_ADMIT for tenant at now_ms / now_s (guarded). */
static redis_req_t *session_admit_req(redis_state_t *st, int64_t tenant, long rate_per_min, long burst, long max,
                                      const char *token, int64_t now_ms, int64_t now_s, req_done_fn done, void *data)
{
    redis_req_t *req = sg_redis__req_new(st, SCRIPT_SESSION_ADMIT, 2, done, data);
    req->tenant = tenant;
    sg_redis__req_arg(req, "sg:rate:%" PRId64, tenant);
    sg_redis__req_arg(req, "sg:tenant:%" PRId64 ":sessions", tenant);
    rate_step_args(req, rate_per_min, burst, now_ms);
    sg_redis__req_arg(req, "%" PRId64, now_s);
    sg_redis__req_arg(req, "%ld", max);
    sg_redis__req_arg(req, "pending:%.64s", token);
    sg_redis__req_arg(req, "%" PRId64, now_s + SG_STATE_RESERVATION_TTL);
    sg_redis__req_guard(req);
    return req;
}

/* {allowed, stored tat, reserved, count} */
static void on_session_admit(redis_req_t *req, redisReply *reply)
{
    sg_admit_result_t r;
    int64_t new_tat;

    memset(&r, 0, sizeof(r));
    if ((reply = sg_redis__reply_array(reply, 4)) == NULL) {
        req->cb.admit(req->data, &r);
        return;
    }
    r.available = 1;
    sg_gcra(req->now_ms, sg_redis__reply_int(reply->element[1]), req->rate_per_min, req->burst, &r.rate, &new_tat);
    r.rate.allowed = sg_redis__reply_int(reply->element[0]) != 0;
    r.slot = sg_redis__reply_int(reply->element[2]) != 0;
    r.in_flight = (long)sg_redis__reply_int(reply->element[3]);
    req->cb.admit(req->data, &r);
}

/* The answer to a session's admission the copy made: {1, stored, 1, count}. */
static void on_session_admit_copy(redis_req_t *req, redisReply *reply)
{
    check_slot_answer(req, reply, 4, "a session's admission", 1, "sessions");
}

/* The answer to a session's refusal at the cap the copy made: {1, stored,
 * 0, count}. Should Redis have reserved (a copy gone wrong), the
 * reservation is given back: no session will take it. */
static void on_session_full_copy(redis_req_t *req, redisReply *reply)
{
    if (check_slot_answer(req, reply, 4, "a refusal at the session cap", 0, "sessions") == NULL && reply != NULL &&
        reply->type == REDIS_REPLY_ARRAY && reply->elements == 4 && sg_redis__reply_int(reply->element[2]) == 1)
        sg_state_session_unreserve(&req->st->super, req->tenant, req->token, sg_state__ignore, NULL);
}

/* 1 when the copy refused the session at the tenant's cap for certain: the
 * script (its rate step, the lapsed members dropped) sent behind, its
 * answer checked; the copy stays. */
static int session_full_local(redis_state_t *st, mirror_t *m, int64_t tenant, long rate_per_min, long burst, long max,
                              const char *token, const sg_solo_session_admit_t *sa, sg_admit_cb cb, void *data)
{
    int64_t stored;
    long count;
    if (!sg_solo_session_full(&m->t, sa, &stored, &count))
        return 0;
    redis_req_t *req = session_admit_req(st, tenant, rate_per_min, burst, max, token, sa->now_ms, sa->now_s,
                                         on_session_full_copy, NULL);
    req->exp_in_flight = count;
    snprintf(req->token, sizeof(req->token), "%.64s", token);
    send_behind_copy(req, &st->local_refusals);

    sg_admit_result_t r; /* as on_session_admit reads {1, stored, 0, count} */
    copy_admitted(&r, sa->now_ms, stored, rate_per_min, burst, count);
    r.slot = 0;
    cb(data, &r);
    return 1;
}

/* 1 when the copy admitted the session (the script sent behind it, cb run). */
static int session_admit_local(redis_state_t *st, mirror_t *m, int64_t tenant, long rate_per_min, long burst, long max,
                               const char *token, sg_admit_cb cb, void *data)
{
    char member[80];
    snprintf(member, sizeof(member), "pending:%.64s", token);
    sg_solo_session_admit_t sa = {.now_ms = sg_state__now_ms(&st->super),
                                  .now_s = sg_state__now_s(&st->super),
                                  .interval_ms = sg_gcra_interval_ms(rate_per_min),
                                  .burst = burst,
                                  .max = max,
                                  .member = member};
    sa.until_s = sa.now_s + SG_STATE_RESERVATION_TTL;
    int64_t stored;
    long count;
    if (!sg_solo_session_admit(&m->t, &sa, &stored, &count))
        return session_full_local(st, m, tenant, rate_per_min, burst, max, token, &sa, cb, data);
    redis_req_t *req = session_admit_req(st, tenant, rate_per_min, burst, max, token, sa.now_ms, sa.now_s,
                                         on_session_admit_copy, NULL);
    req->exp_in_flight = count;
    send_behind_copy(req, &st->local_admits);

    sg_admit_result_t r;
    copy_admitted(&r, sa.now_ms, stored, rate_per_min, burst, count);
    cb(data, &r);
    return 1;
}

/* The session's admission decided by Redis, its answer to cb. */
static void send_session_admit(redis_state_t *st, int64_t tenant, long rate_per_min, long burst, long max,
                               const char *token, sg_admit_cb cb, void *data)
{
    redis_req_t *req = session_admit_req(st, tenant, rate_per_min, burst, max, token, sg_state__now_ms(&st->super),
                                         sg_state__now_s(&st->super), on_session_admit, data);
    req->cb.admit = cb;
    sg_redis__req_send(req);
}

/* ---- one path for the three ---- */

/* The call decided by Redis, its answer to its callback. */
static void call_send(redis_state_t *st, int64_t tenant, const call_t *c)
{
    switch (c->kind) {
    case CALL_ADMIT:
        send_admit(st, tenant, &c->a, c->cb, c->data);
        break;
    case CALL_RATE:
        send_rate(st, tenant, c->rate_per_min, c->burst, c->rate_cb, c->data);
        break;
    case CALL_SESSION:
        send_session_admit(st, tenant, c->rate_per_min, c->burst, c->max, c->token, c->cb, c->data);
        break;
    }
}

/* 1 when the copy decided the call (the script sent behind, the callback run). */
static int call_local(redis_state_t *st, mirror_t *m, int64_t tenant, const call_t *c)
{
    switch (c->kind) {
    case CALL_ADMIT:
        return admit_local(st, m, tenant, &c->a, c->cb, c->data);
    case CALL_RATE:
        return rate_local(st, m, tenant, c->rate_per_min, c->burst, c->rate_cb, c->data);
    case CALL_SESSION:
        return session_admit_local(st, m, tenant, c->rate_per_min, c->burst, c->max, c->token, c->cb, c->data);
    }
    return 0;
}

/* 1 when the copy refuses the call on its rate for certain: answered here
 * as Redis would answer it, and nothing sent (RATE_STEP refuses before any
 * write, so Redis would change nothing). A tenant past its rate so costs
 * neither Redis nor its copy anything; its copy stays. */
static int refuse_local(redis_state_t *st, mirror_t *m, const call_t *c)
{
    long rate = c->kind == CALL_ADMIT ? c->a.rate_per_min : c->rate_per_min;
    long burst = c->kind == CALL_ADMIT ? sg_gcra_burst(c->a.burst) : c->burst; /* as the requests send it */
    int64_t now_ms = sg_state__now_ms(&st->super), stored, unused;

    if (!sg_solo_rate_refused(&m->t, now_ms, sg_gcra_interval_ms(rate), burst, &stored))
        return 0;
    st->local_refusals++;
    if (c->kind == CALL_RATE) {
        sg_rate_result_t r;
        sg_gcra(now_ms, stored, rate, burst, &r, &unused);
        r.allowed = 0;
        c->rate_cb(c->data, &r);
        return 1;
    }
    /* as sg_redis__on_admit and on_session_admit read {0, stored, 0, ...} */
    sg_admit_result_t r;
    memset(&r, 0, sizeof(r));
    r.available = 1;
    sg_gcra(now_ms, stored, rate, burst, &r.rate, &unused);
    r.rate.allowed = 0;
    c->cb(c->data, &r);
    return 1;
}

/* Without the lease, Redis decides. Under it: a call waits for its
 * tenant's copy being read, is decided on a copy that is certain of it (an
 * admission, a refusal at the cap, by the day's quota or by the rate), else
 * (an edge, no copy yet) goes to Redis with the copy read
 * (again) right behind its answer: with the day's counters of the
 * admission's day, or of the day the copy had. */
static void dispatch(redis_state_t *st, int64_t tenant, const call_t *c)
{
    if (!solo_active(st)) {
        call_send(st, tenant, c);
        return;
    }
    mirror_t *m = mirror_find(st, tenant);
    if (m != NULL && !m->ready && !m->spoiled) {
        mirror_queue(m, c);
        return;
    }
    if (m != NULL && m->ready && (call_local(st, m, tenant, c) || refuse_local(st, m, c)))
        return;
    char day[sizeof(m->t.day)];
    snprintf(day, sizeof(day), "%s", c->kind == CALL_ADMIT ? c->a.day : m != NULL && m->ready ? m->t.day : "");
    if (m != NULL)
        sg_redis__mirror_drop(st, tenant);
    int seed = mirror_find(st, tenant) == NULL; /* else a seed, spoiled, is on its way */
    if (seed)
        mirror_new(st, tenant);
    call_send(st, tenant, c);
    if (seed)
        send_seed(st, tenant, day);
}

void sg_redis__admit_dispatch(redis_state_t *st, int64_t tenant, const sg_admit_args_t *a, sg_admit_cb cb, void *data)
{
    call_t c = {.kind = CALL_ADMIT, .a = *a, .cb = cb, .data = data};
    dispatch(st, tenant, &c);
}

void sg_redis__rate_dispatch(redis_state_t *st, int64_t tenant, long rate_per_min, long burst, sg_rate_cb cb,
                             void *data)
{
    call_t c = {.kind = CALL_RATE, .rate_per_min = rate_per_min, .burst = burst, .rate_cb = cb, .data = data};
    dispatch(st, tenant, &c);
}

void sg_redis__session_admit_dispatch(redis_state_t *st, int64_t tenant, long rate_per_min, long burst, long max,
                                      const char *token, sg_admit_cb cb, void *data)
{
    call_t c = {.kind = CALL_SESSION,
                .rate_per_min = rate_per_min,
                .burst = sg_gcra_burst(burst),
                .max = max,
                .token = token,
                .cb = cb,
                .data = data};
    dispatch(st, tenant, &c);
}

void sg_redis__mirror_session_committed(redis_state_t *st, int64_t tenant, const char *token, const char *sid,
                                        int64_t until_s)
{
    mirror_t *m = mirror_find(st, tenant);
    if (m == NULL)
        return;
    if (!m->ready) {
        drop(st, m); /* its seed may come before or after the commit */
        return;
    }
    if (token != NULL) {
        char member[80];
        snprintf(member, sizeof(member), "pending:%s", token);
        sg_solo_remove_session(&m->t, member);
    }
    if (sg_solo_add_session(&m->t, sid, until_s) != 0)
        drop(st, m);
}

void sg_redis__mirror_session_removed(redis_state_t *st, int64_t tenant, const char *sid)
{
    /* SCRIPT_REMOVE also cleans the set of the tenant the record names,
     * should that be another: that tenant's copy, and a copy still seeding,
     * may keep the session. One too many is safe: at the cap the copy is
     * not certain, and Redis decides (the copy then read again). */
    mirror_t *m = mirror_find(st, tenant);
    if (m != NULL && m->ready)
        sg_solo_remove_session(&m->t, sid);
}

static void solo_on_noscript(redis_state_t *st)
{
    solo_leave(st, "Redis lost its scripts: calls no longer reach it in the order sent");
}

void sg_redis__solo_init(redis_state_t *st)
{
    unsigned char rnd[16];
    h2o_timeout_init(st->super.loop, &st->beat_timeout, SOLO_BEAT_MS);
    h2o_timeout_init(st->super.loop, &st->apply_timeout, SOLO_APPLY_MS);
    st->beat_entry.cb = on_beat_timer;
    st->apply_entry.cb = on_apply_timer;
    st->before_send_cb = apply_before_send;
    st->ready_cb = solo_beat;
    st->lost_cb = solo_lost;
    st->noscript_cb = solo_on_noscript;
    sg_random_bytes(rnd, sizeof(rnd));
    sg_hex(st->id, rnd, sizeof(rnd));
}

void sg_redis__solo_destroy(redis_state_t *st)
{
    if (h2o_timeout_is_linked(&st->beat_entry))
        h2o_timeout_unlink(&st->beat_entry);
    if (h2o_timeout_is_linked(&st->apply_entry))
        h2o_timeout_unlink(&st->apply_entry);
    for (size_t i = 0; i < MIRROR_BUCKETS; i++) {
        while (st->mirrors[i] != NULL) {
            mirror_t *m = st->mirrors[i];
            while (m->queue != NULL) { /* cannot happen: its seed completed with the context */
                call_t *q = m->queue;
                m->queue = q->next;
                if (q->kind == CALL_RATE) {
                    sg_rate_result_t r = {.available = 0};
                    q->rate_cb(q->data, &r);
                } else {
                    sg_admit_result_t r = {.available = 0};
                    q->cb(q->data, &r);
                }
                call_free(q);
            }
            mirror_unlink_free(st, m);
        }
    }
    h2o_timeout_dispose(st->super.loop, &st->beat_timeout);
    h2o_timeout_dispose(st->super.loop, &st->apply_timeout);
}

void sg_state_redis_solo(sg_state_t *_st, int want)
{
    if (strcmp(sg_state_backend(_st), "redis") != 0)
        return;
    redis_state_t *st = (redis_state_t *)_st;
    st->want_solo = want;
    if (!want)
        solo_leave(st, "not asked for any more");
}
