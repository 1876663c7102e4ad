/*
 * placement.c — the proxies, their health and where a new session goes
 * (placement.h).
 */
#include "placement.h"
#include "log.h"
#include "util.h"

#include <ctype.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_TIMEOUT_MS 1500

static struct {
    h2o_loop_t *loop;
    sg_proxy_t *list;
    size_t n;
    long grace_ms;
    h2o_timeout_t tick_timeout;
    h2o_timeout_entry_t tick;
    int checking;
} P;

/* "http://[unix:/path]": a proxy's Unix socket (h2o's form). Only the
 * scheme is lower-cased: the path is the file's. */
static int unix_url_normalise(const char *url, size_t end, char *out, size_t outlen)
{
    static const char head[] = "http://[unix:/";
    const size_t hlen = sizeof(head) - 1;
    if (end < hlen + 2 || strncasecmp(url, head, hlen) != 0 || url[end - 1] != ']' || end >= outlen)
        return -1;
    for (size_t i = hlen; i < end - 1; i++) {
        unsigned char c = (unsigned char)url[i];
        if (c <= ' ' || c == ',' || c == ']' || c == '[' || c >= 0x7f)
            return -1;
    }
    for (size_t i = 0; i < end; i++)
        out[i] = i < hlen - 1 ? (char)tolower((unsigned char)url[i]) : url[i]; /* "http://[unix:" */
    out[end] = '\0';
    return 0;
}

int sg_proxy_url_normalise(const char *url, size_t len, char *out, size_t outlen)
{
    size_t scheme, i, end = len;

    if (len >= 7 && strncasecmp(url, "http://", 7) == 0)
        scheme = 7;
    else
        return -1; /* the proxy is reached over plain HTTP (upstream.h) */
    while (end > scheme && url[end - 1] == '/')
        end--;
    if (end > scheme && url[scheme] == '[' && end - scheme >= 6 && strncasecmp(url + scheme, "[unix:", 6) == 0)
        return unix_url_normalise(url, end, out, outlen);
    if (end == scheme || end >= outlen)
        return -1;
    /* scheme and authority lower-cased; a path (rare) kept as written */
    for (i = 0; i < end; i++) {
        unsigned char c = (unsigned char)url[i];
        if (c <= ' ' || c == ',' || c >= 0x7f)
            return -1;
        out[i] = i < scheme || memchr(url + scheme, '/', i - scheme) == NULL ? (char)tolower(c) : (char)c;
    }
    out[end] = '\0';
    return 0;
}

int sg_proxies_init(h2o_loop_t *loop, const char *list, size_t max_reply_bytes, long grace_ms, char *err, size_t errlen)
{
    const char *p = list != NULL ? list : "";
    sg_proxy_t *ps = sg_xcalloc(SG_PROXY_MAX, sizeof(*ps));
    size_t n = 0;

    for (;;) {
        const char *comma = strchr(p, ','), *end = comma != NULL ? comma : p + strlen(p);
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        const char *e = end;
        while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (n == SG_PROXY_MAX) {
            snprintf(err, errlen, "SANDGATE_PROXY_URL: more than %d proxies", SG_PROXY_MAX);
            goto Error;
        }
        if (sg_proxy_url_normalise(p, (size_t)(e - p), ps[n].url, sizeof(ps[n].url)) != 0) {
            snprintf(err, errlen, "SANDGATE_PROXY_URL: \"%.*s\" is not an http:// URL (or http://[unix:/path])",
                     (int)(e - p), p);
            goto Error;
        }
        for (size_t i = 0; i < n; i++)
            if (strcmp(ps[i].url, ps[n].url) == 0) {
                snprintf(err, errlen, "SANDGATE_PROXY_URL: %s is listed twice", ps[n].url);
                goto Error;
            }
        n++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    for (size_t i = 0; i < n; i++) {
        if ((ps[i].up = sg_upstream_create(loop, ps[i].url, max_reply_bytes)) == NULL) {
            snprintf(err, errlen, "cannot create the client of %s", ps[i].url);
            goto Error;
        }
        ps[i].in_placement = 1; /* until its checks say otherwise */
        ps[i].docker_ok = 1;
    }
    P.loop = loop;
    P.list = ps;
    P.n = n;
    P.grace_ms = grace_ms < 0 ? 0 : grace_ms > SG_PROXY_GRACE_MAX_MS ? SG_PROXY_GRACE_MAX_MS : grace_ms;
    return 0;
Error:
    for (size_t i = 0; i < n; i++)
        if (ps[i].up != NULL)
            sg_upstream_destroy(ps[i].up);
    free(ps);
    return -1;
}

void sg_proxies_free(void)
{
    sg_proxies_stop_checks();
    for (size_t i = 0; i < P.n; i++)
        sg_upstream_destroy(P.list[i].up);
    free(P.list);
    memset(&P, 0, sizeof(P));
}

size_t sg_proxies_count(void)
{
    return P.n;
}

sg_proxy_t *sg_proxies_at(size_t i)
{
    return i < P.n ? &P.list[i] : NULL;
}

long sg_proxies_grace_ms(void)
{
    return P.grace_ms;
}

size_t sg_proxies_up(void)
{
    size_t up = 0;
    for (size_t i = 0; i < P.n; i++)
        up += P.list[i].in_placement != 0;
    return up;
}

sg_proxy_t *sg_proxies_find(const char *url)
{
    if (url == NULL || url[0] == '\0')
        return P.n != 0 ? &P.list[0] : NULL;
    for (size_t i = 0; i < P.n; i++)
        if (strcmp(P.list[i].url, url) == 0)
            return &P.list[i];
    return NULL;
}

/* ---- health ---------------------------------------------------------------------------- */

static void read_load(sg_proxy_t *p, json_object *o)
{
    json_object *load, *v, *pf;

    p->docker_ok = !(json_object_object_get_ex(o, "docker", &v) && json_object_is_type(v, json_type_boolean) &&
                     !json_object_get_boolean(v));
    if (!json_object_object_get_ex(o, "load", &load) || !json_object_is_type(load, json_type_object))
        load = o; /* an older proxy: the same figures at the top level */
#define NUM(name, field)                                                                                               \
    if (json_object_object_get_ex(load, name, &v) && (json_object_is_type(v, json_type_int)))                          \
        p->field = json_object_get_int64(v) < 0 ? 0 : json_object_get_int64(v);
    NUM("sessions", sessions)
    NUM("containers", containers)
    NUM("max_containers", max_containers)
    NUM("memory_committed_bytes", memory_committed)
#undef NUM
    if (json_object_object_get_ex(load, "cpu_committed", &v) &&
        (json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
        p->cpu_committed = json_object_get_double(v);
    p->nlangs = 0;
    if ((json_object_object_get_ex(load, "pool_free", &pf) || json_object_object_get_ex(o, "pools", &pf)) &&
        json_object_is_type(pf, json_type_object)) {
        json_object_object_foreach(pf, key, val)
        {
            if (p->nlangs == SG_PROXY_LANGS_MAX || strlen(key) >= sizeof(p->pool_free[0].lang) ||
                !json_object_is_type(val, json_type_int))
                continue;
            snprintf(p->pool_free[p->nlangs].lang, sizeof(p->pool_free[0].lang), "%s", key);
            p->pool_free[p->nlangs].free = json_object_get_int64(val) < 0 ? 0 : (long)json_object_get_int64(val);
            p->nlangs++;
        }
    }
    p->reported = 1;
}

static void on_checked(void *data, const sg_upstream_reply_t *r)
{
    sg_proxy_t *p = data;
    json_object *o = NULL;

    p->_check = NULL;
    /* a proxy that answers is there (503: its engine does not; it takes no
     * new session then, but keeps its own) */
    if ((r->status == 200 || r->status == 503) && (o = json_tokener_parse(r->body)) != NULL &&
        json_object_is_type(o, json_type_object)) {
        read_load(p, o);
        if (!p->in_placement)
            sg_info("proxy %s: answers again, back in placement (out for %llu ms)", p->url,
                    (unsigned long long)(sg_now_ms() - p->out_since_ms));
        p->fails = 0;
        p->in_placement = 1;
        p->out_since_ms = 0;
    } else if (++p->fails >= SG_PROXY_DOWN_AFTER && p->in_placement) {
        p->in_placement = 0;
        p->out_since_ms = sg_now_ms();
        sg_warn("proxy %s: %u health checks failed (%s), out of placement; its sessions are lost after %ld ms", p->url,
                p->fails, r->status == 0 && r->err != NULL ? r->err : "not a health answer", P.grace_ms);
    }
    json_object_put(o);
}

static void on_tick(h2o_timeout_entry_t *e)
{
    for (size_t i = 0; i < P.n; i++) {
        sg_proxy_t *p = &P.list[i];
        if (p->_check != NULL)
            continue; /* the last one is still out (its own timeout ends it) */
        p->_check =
            sg_upstream_start(p->up, "GET", "/health?load", NULL, 0, NULL, CHECK_TIMEOUT_MS, NULL, NULL, on_checked, p);
        if (p->_check == NULL) {
            sg_upstream_reply_t fail = {.err = "cannot start the check", .body = "", .code = ""};
            on_checked(p, &fail);
        }
    }
    h2o_timeout_link(P.loop, &P.tick_timeout, &P.tick);
}

void sg_proxies_start_checks(void)
{
    if (P.checking || P.n == 0)
        return;
    P.checking = 1;
    h2o_timeout_init(P.loop, &P.tick_timeout, SG_PROXY_CHECK_MS);
    P.tick.cb = on_tick;
    on_tick(&P.tick);
}

void sg_proxies_stop_checks(void)
{
    if (!P.checking)
        return;
    P.checking = 0;
    if (h2o_timeout_is_linked(&P.tick))
        h2o_timeout_unlink(&P.tick);
    for (size_t i = 0; i < P.n; i++) {
        sg_upstream_cancel(P.list[i]._check);
        P.list[i]._check = NULL;
    }
}

/* ---- placement ------------------------------------------------------------------------- */

static long pool_free_of(const sg_proxy_t *p, const char *lang)
{
    if (lang == NULL)
        return 0;
    for (size_t i = 0; i < p->nlangs; i++)
        if (strcmp(p->pool_free[i].lang, lang) == 0)
            return p->pool_free[i].free;
    return 0;
}

/* Lower is better: the share of its containers its sessions take, less one
 * when a warm container of the language waits there. */
static double score(const sg_proxy_t *p, const char *lang)
{
    double s = (double)p->sessions / (double)(p->max_containers > 0 ? p->max_containers : 1);
    if (pool_free_of(p, lang) > 0)
        s -= 1;
    return s;
}

static int better(const sg_proxy_t *a, const sg_proxy_t *b, const char *lang)
{
    double sa = score(a, lang), sb = score(b, lang);
    if (sa != sb)
        return sa < sb;
    return a->memory_committed <= b->memory_committed;
}

static int placeable(const sg_proxy_t *p)
{
    return p->in_placement && p->docker_ok;
}

static void took_one(sg_proxy_t *p, const char *lang)
{
    /* until its next report says how it stands */
    p->sessions++;
    for (size_t i = 0; lang != NULL && i < p->nlangs; i++)
        if (strcmp(p->pool_free[i].lang, lang) == 0 && p->pool_free[i].free > 0)
            p->pool_free[i].free--;
}

sg_proxy_t *sg_proxies_place(const char *lang)
{
    size_t idx[SG_PROXY_MAX], n = 0;
    uint32_t rnd[2];

    if (P.n == 1)
        return &P.list[0];
    for (size_t i = 0; i < P.n; i++)
        if (placeable(&P.list[i]))
            idx[n++] = i;
    if (n == 0)
        return NULL;
    sg_proxy_t *pick = &P.list[idx[0]];
    if (n >= 2) {
        sg_random_bytes(rnd, sizeof(rnd));
        size_t a = rnd[0] % n, b = rnd[1] % (n - 1);
        if (b >= a)
            b++;
        pick = better(&P.list[idx[a]], &P.list[idx[b]], lang) ? &P.list[idx[a]] : &P.list[idx[b]];
    }
    took_one(pick, lang);
    return pick;
}

/* Load alone: the share of its containers its sessions take, then memory. */
static int less_loaded(const sg_proxy_t *a, const sg_proxy_t *b)
{
    double la = (double)a->sessions / (double)(a->max_containers > 0 ? a->max_containers : 1),
           lb = (double)b->sessions / (double)(b->max_containers > 0 ? b->max_containers : 1);
    if (la != lb)
        return la < lb;
    return a->memory_committed < b->memory_committed;
}

sg_proxy_t *sg_proxies_least_loaded(const char *lang)
{
    sg_proxy_t *best = NULL;

    (void)lang; /* a one-shot leaves nothing behind: where it runs is a matter of load, not of a warm container */
    if (P.n == 1)
        return &P.list[0];
    for (size_t i = 0; i < P.n; i++)
        if (placeable(&P.list[i]) && (best == NULL || less_loaded(&P.list[i], best)))
            best = &P.list[i];
    return best;
}

int sg_proxy_lost(const sg_proxy_t *p, long *wait_ms)
{
    if (P.n == 1 || p->in_placement) {
        if (wait_ms != NULL)
            *wait_ms = 0;
        return 0;
    }
    uint64_t out_for = sg_now_ms() - p->out_since_ms;
    if (out_for >= (uint64_t)P.grace_ms)
        return 1;
    if (wait_ms != NULL)
        *wait_ms = P.grace_ms - (long)out_for;
    return 0;
}
