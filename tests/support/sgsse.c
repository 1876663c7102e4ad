#include "sgsse.h"
#include "sgtest.h"

#include <curl/curl.h>
#include <json-c/json.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sgsse_parser {
    sgsse_result_t *r;
    char *line;
    size_t len, cap;
    bool after_cr;
    char name[32];
    char *data;
    size_t dlen, dcap;
    bool has_data;
    bool pending; /* bytes since the last dispatch */
};

static int grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 256;
    while (ncap < need)
        ncap *= 2;
    char *nb = realloc(*buf, ncap);
    if (nb == NULL)
        return -1;
    *buf = nb;
    *cap = ncap;
    return 0;
}

sgsse_parser_t *sgsse_parser_new(sgsse_result_t *into)
{
    sgsse_parser_t *p = calloc(1, sizeof(*p));
    if (p != NULL)
        p->r = into;
    return p;
}

void sgsse_parser_free(sgsse_parser_t *p)
{
    if (p == NULL)
        return;
    free(p->line);
    free(p->data);
    free(p);
}

static void dispatch(sgsse_parser_t *p)
{
    sgsse_result_t *r = p->r;
    if (p->has_data) {
        sgsse_event_t *nev = realloc(r->ev, (r->nev + 1) * sizeof(*nev));
        char *d = malloc(p->dlen + 1);
        if (nev == NULL || d == NULL) {
            free(d);
            if (nev != NULL)
                r->ev = nev;
            r->oom = true;
        } else {
            r->ev = nev;
            sgsse_event_t *e = &r->ev[r->nev++];
            snprintf(e->name, sizeof(e->name), "%s", p->name[0] ? p->name : "message");
            memcpy(d, p->data, p->dlen);
            d[p->dlen] = '\0';
            e->data = d;
            e->data_len = p->dlen;
        }
    }
    p->name[0] = '\0';
    p->dlen = 0;
    p->has_data = false;
    p->pending = false;
}

static void line_done(sgsse_parser_t *p)
{
    const char *l = p->line != NULL ? p->line : "";
    size_t len = p->len;
    p->len = 0;
    if (len == 0) {
        dispatch(p);
        return;
    }
    p->pending = true;
    const char *colon = memchr(l, ':', len);
    size_t nlen = colon ? (size_t)(colon - l) : len;
    const char *v = colon ? colon + 1 : l + len;
    size_t vlen = (size_t)(l + len - v);
    if (nlen == 0)
        return; /* comment */
    if (vlen > 0 && *v == ' ') {
        v++;
        vlen--;
    }
    if (nlen == 5 && memcmp(l, "event", 5) == 0) {
        snprintf(p->name, sizeof(p->name), "%.*s", (int)vlen, v);
    } else if (nlen == 4 && memcmp(l, "data", 4) == 0) {
        if (grow(&p->data, &p->dcap, p->dlen + vlen + 2) != 0) {
            p->r->oom = true;
            return;
        }
        if (p->has_data)
            p->data[p->dlen++] = '\n';
        memcpy(p->data + p->dlen, v, vlen);
        p->dlen += vlen;
        p->has_data = true;
    }
}

void sgsse_parser_feed(sgsse_parser_t *p, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (p->after_cr) {
            p->after_cr = false;
            if (c == '\n')
                continue;
        }
        if (c == '\r' || c == '\n') {
            p->after_cr = c == '\r';
            line_done(p);
            continue;
        }
        if (grow(&p->line, &p->cap, p->len + 1) != 0) {
            p->r->oom = true;
            return;
        }
        p->line[p->len++] = c;
        p->pending = true;
    }
}

void sgsse_parser_finish(sgsse_parser_t *p)
{
    if (p->pending || p->len != 0)
        p->r->unterminated = true;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    sgsse_parser_t *p = ud;
    p->r->nreads++;
    p->r->body_bytes += size * nmemb;
    sgsse_parser_feed(p, ptr, size * nmemb);
    return size * nmemb;
}

int sgsse_post(const char *url, const char *token, const char *json_body, const char *const *headers, long timeout_s,
               sgsse_result_t *out)
{
    char auth[512];
    const char *hl[34];
    size_t n = 0;
    sgtest_reply_t r;

    memset(out, 0, sizeof(*out));
    sgsse_parser_t *p = sgsse_parser_new(out);
    if (p == NULL) {
        snprintf(out->error, sizeof(out->error), "out of memory");
        return -1;
    }
    if (token != NULL) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        hl[n++] = auth;
    }
    for (size_t i = 0; headers != NULL && headers[i] != NULL && n < 33; i++)
        hl[n++] = headers[i];
    hl[n] = NULL;
    sgtest_post_stream(url, json_body, hl, timeout_s, on_body, p, &r);
    out->curl_rc = r.curl_code;
    out->status = r.status;
    char *ct = sgtest_reply_header(&r, "Content-Type");
    snprintf(out->ctype, sizeof(out->ctype), "%s", ct != NULL ? ct : "");
    free(ct);
    if (r.curl_code != CURLE_OK)
        snprintf(out->error, sizeof(out->error), "%s", r.error[0] ? r.error : curl_easy_strerror(r.curl_code));
    sgtest_reply_free(&r);
    sgsse_parser_finish(p);
    sgsse_parser_free(p);
    return out->curl_rc == CURLE_OK ? 0 : -1;
}

void sgsse_result_free(sgsse_result_t *r)
{
    for (size_t i = 0; i < r->nev; i++)
        free(r->ev[i].data);
    free(r->ev);
    memset(r, 0, sizeof(*r));
}

int sgsse_concat(const sgsse_result_t *r, const char *name, char **out, size_t *len)
{
    char *buf = NULL;
    size_t n = 0, cap = 0;
    *out = NULL;
    *len = 0;
    if (grow(&buf, &cap, 1) != 0)
        return -1;
    buf[0] = '\0';
    for (size_t i = 0; i < r->nev; i++) {
        if (strcmp(r->ev[i].name, name) != 0)
            continue;
        json_object *o = json_tokener_parse(r->ev[i].data), *v;
        if (o == NULL || !json_object_object_get_ex(o, "data", &v) || !json_object_is_type(v, json_type_string)) {
            json_object_put(o);
            free(buf);
            return -1;
        }
        size_t vl = (size_t)json_object_get_string_len(v);
        if (grow(&buf, &cap, n + vl + 1) != 0) {
            json_object_put(o);
            free(buf);
            return -1;
        }
        memcpy(buf + n, json_object_get_string(v), vl);
        n += vl;
        buf[n] = '\0';
        json_object_put(o);
    }
    *out = buf;
    *len = n;
    return 0;
}

const sgsse_event_t *sgsse_last(const sgsse_result_t *r, const char *name)
{
    for (size_t i = r->nev; i > 0; i--)
        if (strcmp(r->ev[i - 1].name, name) == 0)
            return &r->ev[i - 1];
    return NULL;
}
