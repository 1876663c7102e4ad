/*
 * auth.c — the door of the public API (request.h, sg_gw_req_accept): the
 * caps on a request's headers, body and path, its bearer token, then the
 * token's tenant and the session's owner (from the cache below when it is
 * current, else one DB job) and the tenant's rate limit (for the routes
 * that run code, with their execution slot: ledger.c); the route runs only
 * past all of them.
 */
#include "request.h"
#include "fields.h"
#include "json.h"
#include "metrics.h"
#include "util.h"
#include "db.h"
#include "credentials.h"

#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a streamed reply's parser keeps of one event (sse_tail.h): the
 * result event is a few hundred bytes. */
#define STREAM_EVENT_MAX (64u << 10)

/* ---- the cache of tokens and sessions ------------------------------------------------------
 *
 * A request whose token (and session) this gateway has looked up before is
 * let in without a DB job: the token's tenant and the session's record are
 * kept here, each stamped with the generation (store.h) read before its
 * rows were. A request takes the generations last read on the loop's own
 * connection while their signal (store.h, a counter in shared memory)
 * says they have not moved, else reads them again (one row; WAL: a read
 * never waits on a writer; busy: no cache for this request); an entry is
 * used only while its stamp is current. A token revoked, a tenant changed
 * or disabled, a session closed, by this gateway, another one or
 * sandgate-admin, moves the generation in the same transaction and the
 * signal right after it: the next request after the commit, on every
 * gateway, goes to the database. A closed session stays closed, so that
 * answer is kept whatever the generation. Unknown tokens are never kept. */

#define TOKEN_SLOTS 1024 /* powers of two */
#define SESSION_SLOTS 4096
#define PROBE 8

typedef struct {
    unsigned char key[SHA256_DIGEST_LENGTH]; /* of the whole token: no secret is kept */
    int used;
    int64_t gen;
    uint64_t last_us;
    sg_tenant_t tenant;
} token_entry_t;

typedef struct {
    int used;
    int64_t gen; /* -1: closed, current for ever */
    uint64_t last_us;
    sg_session_rec_t rec;
} session_entry_t;

/* A read of the generations serves every request after it while their
 * signal (store.h) stands still — every writer on this database, in this
 * gateway, another one or sandgate-admin, moves it after its commit — for
 * GEN_TRUST_US at most: a writer that died between its commit and the move
 * is seen within that. */
#define GEN_TRUST_US 100000

static sg_store_t *gen_store;
static sg_store_gen_t gen_last;
static uint64_t gen_last_us;
static uint64_t gen_last_signal;
/* The digest's algorithm and context, made once and kept (the loop's):
 * SHA256() looks the algorithm up and makes a context on every call. */
static EVP_MD *key_md;
static EVP_MD_CTX *key_ctx;
static token_entry_t *tokens;
static session_entry_t *sessions;

void sg_gw_auth_cache_start(sg_store_t *st)
{
    gen_store = st;
    sg_store_no_wait(st);
    tokens = sg_xcalloc(TOKEN_SLOTS, sizeof(*tokens));
    sessions = sg_xcalloc(SESSION_SLOTS, sizeof(*sessions));
}

void sg_gw_auth_cache_stop(void)
{
    if (gen_store != NULL)
        sg_store_close(gen_store);
    gen_store = NULL;
    free(tokens);
    free(sessions);
    tokens = NULL;
    sessions = NULL;
    EVP_MD_CTX_free(key_ctx);
    EVP_MD_free(key_md);
    key_ctx = NULL;
    key_md = NULL;
}

/* Runs fn(job) on the loop's own connection: 1 when it ran and left
 * job->rc 0; else 0, the job reset for a DB thread. */
static int loop_run(void (*fn)(sg_gw_job_t *job, sg_store_t *st), sg_gw_job_t *job)
{
    if (gen_store == NULL)
        return 0;
    job->rc = 0;
    job->err[0] = '\0';
    fn(job, gen_store);
    if (job->rc == 0)
        return 1;
    job->rc = 0;
    job->err[0] = '\0';
    return 0;
}

/* Reads on the loop stay this small: a few hundred rows at most. */
#define LOOP_READ_MAX_ROWS 1000

int sg_gw_loop_read(long max_rows, void (*fn)(sg_gw_job_t *job, sg_store_t *st), sg_gw_job_t *job)
{
    return max_rows <= LOOP_READ_MAX_ROWS && loop_run(fn, job);
}

int sg_gw_loop_write(void (*fn)(sg_gw_job_t *job, sg_store_t *st), sg_gw_job_t *job)
{
    return loop_run(fn, job);
}

static uint64_t fnv1a(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* A cache's slots are found like the throttle's (throttle.c): PROBE slots
 * from the key's hash; the one that holds the key, else (create) the one
 * it replaces, a free one or the least recently used. */
static int better_victim(int used, uint64_t last_us, int vused, uint64_t vlast_us)
{
    return !used || (vused && last_us < vlast_us);
}

static token_entry_t *token_slot(const unsigned char key[SHA256_DIGEST_LENGTH], int create)
{
    token_entry_t *victim = NULL;
    uint64_t h;
    memcpy(&h, key, sizeof(h));
    for (int i = 0; i < PROBE; i++) {
        token_entry_t *e = &tokens[(h + (uint64_t)i) & (TOKEN_SLOTS - 1)];
        if (e->used && memcmp(e->key, key, SHA256_DIGEST_LENGTH) == 0)
            return e;
        if (victim == NULL || better_victim(e->used, e->last_us, victim->used, victim->last_us))
            victim = e;
    }
    return create ? victim : NULL;
}

static session_entry_t *session_slot(const char *sid, int create)
{
    session_entry_t *victim = NULL;
    uint64_t h = fnv1a(sid, 36);
    for (int i = 0; i < PROBE; i++) {
        session_entry_t *e = &sessions[(h + (uint64_t)i) & (SESSION_SLOTS - 1)];
        if (e->used && memcmp(e->rec.id, sid, 36) == 0)
            return e;
        if (victim == NULL || better_victim(e->used, e->last_us, victim->used, victim->last_us))
            victim = e;
    }
    return create ? victim : NULL;
}

static void token_key(const char *token, unsigned char key[SHA256_DIGEST_LENGTH])
{
    unsigned int n;
    if (key_md == NULL)
        key_md = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (key_ctx == NULL)
        key_ctx = EVP_MD_CTX_new();
    if (key_md == NULL || key_ctx == NULL || EVP_DigestInit_ex(key_ctx, key_md, NULL) != 1 ||
        EVP_DigestUpdate(key_ctx, token, strlen(token)) != 1 || EVP_DigestFinal_ex(key_ctx, key, &n) != 1)
        SHA256((const unsigned char *)token, strlen(token), key);
}

/* Keeps what the auth job found (g->gen is what it read first). */
static void cache_put(sg_gw_req_t *g)
{
    unsigned char key[SHA256_DIGEST_LENGTH];
    uint64_t now = sg_now_us();

    if (tokens == NULL || !g->authed)
        return;
    token_key(g->token, key);
    token_entry_t *t = token_slot(key, 1);
    memcpy(t->key, key, sizeof(key));
    t->used = 1;
    t->gen = g->gen.auth;
    t->last_us = now;
    t->tenant = g->tenant;
    if (g->sid[0] && g->sess_found) {
        session_entry_t *s = session_slot(g->sess.id, 1);
        s->used = 1;
        s->gen = g->sess.closed_at != 0 ? -1 : g->gen.sessions;
        s->last_us = now;
        s->rec = g->sess;
    }
}

/* The current generations into *now: the last read while their signal
 * stands still (GEN_TRUST_US), else read again. 0, or -1 (no store, or
 * busy: no cache). */
static int generations_now(sg_store_gen_t *now, uint64_t now_us)
{
    char err[256];

    if (gen_store == NULL)
        return -1;
    uint64_t signal = sg_store_generations_signal(gen_store);
    if (gen_last_us == 0 || signal != gen_last_signal || now_us - gen_last_us >= GEN_TRUST_US) {
        if (sg_store_generations(gen_store, &gen_last, err, sizeof(err)) != 0) {
            gen_last_us = 0;
            return -1;
        }
        gen_last_us = now_us;
        gen_last_signal = signal;
    }
    *now = gen_last;
    return 0;
}

void sg_gw_auth_cache_session(const sg_session_rec_t *rec)
{
    sg_store_gen_t now;

    if (sessions == NULL || generations_now(&now, sg_now_us()) != 0)
        return;
    session_entry_t *s = session_slot(rec->id, 1);
    s->used = 1;
    s->gen = now.sessions;
    s->last_us = sg_now_us();
    s->rec = *rec;
}

/* 1 when the cache knows g's token (and session) at the current
 * generations: g->tenant (and g->sess) are filled. */
static int cache_get(sg_gw_req_t *g)
{
    unsigned char key[SHA256_DIGEST_LENGTH];
    sg_store_gen_t now;
    uint64_t now_us = sg_now_us();

    if (generations_now(&now, now_us) != 0)
        return 0;
    token_key(g->token, key);
    token_entry_t *t = token_slot(key, 0);
    if (t == NULL || t->gen != now.auth)
        return 0;
    if (g->sid[0]) {
        session_entry_t *s = session_slot(g->sid, 0);
        if (s == NULL || (s->gen != -1 && s->gen != now.sessions))
            return 0;
        s->last_us = now_us;
        g->sess = s->rec;
        g->sess_found = 1;
    }
    t->last_us = now_us;
    g->tenant = t->tenant;
    g->authed = 1;
    return 1;
}

/* ---- authentication and the rate limit ------------------------------------------------- */

/* Routes that run code count the request against the rate in the same
 * state call as their execution slot and the day's quota (ledger.c); a
 * session create in the same call as its session slot (sessions.c). */
static int rate_with_slot(sg_gw_route_t route)
{
    return route == SG_GW_R_EXECUTE || route == SG_GW_R_COMMAND || route == SG_GW_R_EPHEMERAL ||
           route == SG_GW_R_CREATE; /* with its session slot (handler/sessions.c) */
}

static void on_rate(void *data, const sg_rate_result_t *r)
{
    sg_gw_req_t *g = data;
    if (r->available) {
        g->rate = *r;
        g->rate_known = 1;
        if (!r->allowed) {
            sg_gw_reply_429(g, "quota_exceeded", "rate", r->retry_after_s,
                            "rate limit: %ld requests per minute (burst %ld) exceeded", g->tenant.rate_per_min,
                            g->tenant.burst);
            sg_gw_req_free(g);
            return;
        }
    }
    /* else fail open: a Redis outage must not stop the API */
    g->spec->run(g);
}

void sg_gw_add_challenge(h2o_req_t *req, const sg_gw_route_spec_t *spec, const char *error)
{
    char v[600];
    int n = snprintf(v, sizeof(v), "Bearer realm=\"sandgate\"");
    if (error[0])
        n += snprintf(v + n, sizeof(v) - n, ", error=\"%s\"", error);
    if (spec->oauth_resource && req->authority.len != 0 && req->authority.len < 256 &&
        h2o_strstr(req->authority.base, req->authority.len, H2O_STRLIT("\"")) == SIZE_MAX)
        snprintf(v + n, sizeof(v) - n, ", resource_metadata=\"%s://%.*s/.well-known/oauth-protected-resource\"",
                 req->scheme == &H2O_URL_SCHEME_HTTPS ? "https" : "http", (int)req->authority.len, req->authority.base);
    sg_http_add_header(req, "www-authenticate", v);
}

static void auth_fn(sg_gw_job_t *job, sg_store_t *st)
{
    sg_gw_req_t *g = (sg_gw_req_t *)job;
    /* the generations first: a change committed after this read moves
     * them, so what is read next is never kept past it */
    if (sg_store_generations(st, &g->gen, job->err, sizeof(job->err)) != 0) {
        job->rc = -1;
        return;
    }
    int rc = sg_store_token_auth(st, g->token, strlen(g->token), &g->tenant, job->err, sizeof(job->err));
    if (rc < 0) {
        job->rc = -1;
        return;
    }
    g->authed = rc == 1;
    if (g->authed && g->sid[0]) {
        rc = sg_store_session_get(st, g->sid, &g->sess, job->err, sizeof(job->err));
        if (rc < 0) {
            job->rc = -1;
            return;
        }
        g->sess_found = rc == 1;
    }
}

/* The token is known (g->tenant, and g->sess when the route names a
 * session): the session's owner, then the rate. */
static void authed(sg_gw_req_t *g)
{
    /* a session of another tenant is answered as one that does not exist */
    if (g->sid[0] && (!g->sess_found || g->sess.tenant_id != g->tenant.id || g->sess.closed_at != 0)) {
        sg_gw_reply_error(g, 404, "no_such_session", "no session with id \"%s\"", g->sid);
        sg_gw_req_free(g);
        return;
    }
    /* a rerun (sg_gw_req_run_as) is not counted again: the request that
     * carries it was */
    if (g->rerun || rate_with_slot(g->route)) {
        g->spec->run(g);
        return;
    }
    sg_state_rate_check(sg_gw.state, g->tenant.id, g->tenant.rate_per_min, g->tenant.burst, on_rate, g);
}

static void auth_done(sg_gw_job_t *job)
{
    sg_gw_req_t *g = (sg_gw_req_t *)job;
    h2o_req_t *req = sg_gw_req_http(g);

    if (job->rc != 0) {
        sg_gw_reply_error(g, 500, "internal", "the tenant database cannot be read: %s", job->err);
        goto Error;
    }
    if (!g->authed) {
        if (req != NULL && g->capture == NULL)
            sg_gw_add_challenge(req, g->spec, "invalid_token");
        sg_gw_reply_error(g, 401, "unauthorized", "the API token is unknown or revoked");
        goto Error;
    }
    cache_put(g);
    authed(g);
    return;
Error:
    sg_gw_req_free(g);
}

void sg_gw_req_run_as(sg_gw_req_t *g, const sg_gw_route_spec_t *spec)
{
    g->spec = spec;
    g->route = spec->route;
    g->rerun = 1;
    g->proxy = NULL;
    g->authed = 0;
    g->sess_found = 0;
    g->job.rc = 0;
    g->job.err[0] = '\0';
    sg_gw_db_run(&g->job, auth_fn, auth_done);
}

/* ---- the door ------------------------------------------------------------------------------ */

/* Answers a request refused at the door, before it has a sg_gw_req_t. */
static int refuse(h2o_req_t *req, sg_gw_route_t route, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int refuse(h2o_req_t *req, sg_gw_route_t route, int status, const char *code, const char *fmt, ...)
{
    char detail[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    sg_metrics_request(sg_gw_route_names[route], status);
    sg_http_send_error(req, status, code, "%s", detail);
    return 0;
}

static int wants_stream(h2o_req_t *req)
{
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_ACCEPT, -1);
    return i >= 0 && h2o_strstr(req->headers.entries[i].value.base, req->headers.entries[i].value.len,
                                H2O_STRLIT("text/event-stream")) != SIZE_MAX;
}

/* The body's "session_id" (SG_GW_ARG_BODY_SESSION) into sid: 0 (sid ""
 * when the body names none, or is not JSON: the route answers that), 400
 * when it is not a string, 404 when it is no UUID. */
static int body_session(h2o_req_t *req, char *sid)
{
    json_object *o = sg_json_parse_object(req->entity.base, req->entity.len, NULL, 0), *v;
    int status = 0;
    sid[0] = '\0';
    if (o != NULL && json_object_object_get_ex(o, "session_id", &v) && v != NULL) {
        if (!json_object_is_type(v, json_type_string))
            status = 400;
        else if (json_object_get_string_len(v) != 36 || !sg_is_uuid(json_object_get_string(v), 36))
            status = 404;
        else
            memcpy(sid, json_object_get_string(v), 37);
    }
    json_object_put(o);
    return status;
}

int sg_gw_req_accept(h2o_req_t *req, const sg_route_match_t *m, const sg_gw_route_spec_t *spec)
{
    sg_gw_route_t route = spec->route;
    h2o_iovec_t arg = m->nargs > 0 ? m->arg[0] : h2o_iovec_init(NULL, 0);
    size_t header_bytes = 0, body_cap = spec->file_body ? sg_gw.max_file_bytes : sg_gw.max_body;
    if (spec->arg == SG_GW_ARG_BODY_SESSION && body_cap > SG_GW_BODY_SESSION_MAX)
        body_cap = SG_GW_BODY_SESSION_MAX; /* parsed before the token is known: kept small */
    char template_name[256] = "";

    for (size_t i = 0; i < req->headers.size; i++)
        header_bytes += req->headers.entries[i].name->len + req->headers.entries[i].value.len + 4;
    if (header_bytes > sg_gw.max_header_bytes)
        return refuse(req, route, 431, "headers_too_large", "the request headers are %zu bytes, above the limit of %zu",
                      header_bytes, sg_gw.max_header_bytes);
    if (req->entity.len > body_cap)
        return refuse(req, route, 413, "too_large", "the request body is %zu bytes, above the limit of %zu",
                      req->entity.len, body_cap);
    h2o_iovec_t token = sg_gw_bearer(req);
    if (token.base == NULL || token.len == 0 || token.len > SG_TOKEN_MAX) {
        sg_gw_add_challenge(req, spec, "");
        return refuse(req, route, 401, "unauthorized", "an API token is required: Authorization: Bearer <token>");
    }
    if (spec->arg == SG_GW_ARG_TEMPLATE && sg_gw_template_name(arg, template_name, sizeof(template_name)) != 0)
        return refuse(req, route, 404, "no_such_template", "no template named \"%.*s\"",
                      (int)(arg.len > 64 ? 64 : arg.len), arg.base);
    if (spec->arg == SG_GW_ARG_SESSION && (arg.len != 36 || !sg_is_uuid(arg.base, arg.len)))
        return refuse(req, route, 404, "no_such_session", "no session with id \"%.*s\"",
                      (int)(arg.len > 64 ? 64 : arg.len), arg.base);
    char body_sid[37] = "";
    int bs = spec->arg == SG_GW_ARG_BODY_SESSION ? body_session(req, body_sid) : 0;
    if (bs == 400)
        return refuse(req, route, 400, "bad_field", "field \"session_id\" must be a string");
    if (bs == 404)
        return refuse(req, route, 404, "no_such_session", "no session with that \"session_id\"");
    if (spec->file_body && req->query_at != SIZE_MAX && req->path.len - req->query_at >= SG_GW_QUERY_MAX)
        return refuse(req, route, 400, "bad_path", "the query string is %zu bytes, above the limit of %d",
                      req->path.len - req->query_at, SG_GW_QUERY_MAX - 1);

    sg_gw_req_t *g = sg_gw_req_alloc();
    g->hold = sg_http_hold(req);
    g->spec = spec;
    g->route = route;
    sg_gw_watch_client(g);
    sg_copy(g->method, sizeof(g->method), req->method.base, req->method.len);
    memcpy(g->token, token.base, token.len);
    if (spec->arg == SG_GW_ARG_TEMPLATE)
        memcpy(g->template_name, template_name, sizeof(template_name));
    else if (spec->arg == SG_GW_ARG_SESSION)
        memcpy(g->sid, arg.base, 36);
    else if (spec->arg == SG_GW_ARG_BODY_SESSION)
        memcpy(g->sid, body_sid, sizeof(body_sid));
    if (spec->file_body && req->query_at != SIZE_MAX)
        sg_copy(g->query, sizeof(g->query), req->path.base + req->query_at, req->path.len - req->query_at);
    if (req->entity.base != NULL && req->entity.len != 0) {
        /* a file's bytes may hold NUL: copied by length */
        g->body = sg_xmalloc(req->entity.len + 1);
        memcpy(g->body, req->entity.base, req->entity.len);
        g->body[req->entity.len] = '\0';
        g->body_len = req->entity.len;
    }
    ssize_t ct = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
    if (ct >= 0)
        sg_copy(g->content_type, sizeof(g->content_type), req->headers.entries[ct].value.base,
                req->headers.entries[ct].value.len);
    if (spec->stream_accept)
        g->want_stream = wants_stream(req);
    sg_sse_tail_init(&g->tail, STREAM_EVENT_MAX);
    if (cache_get(g))
        authed(g);
    else
        sg_gw_db_run(&g->job, auth_fn, auth_done);
    return 0;
}
