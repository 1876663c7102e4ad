/*
 * test_proxy_streaming.c — streamed output (Server-Sent Events, read as
 * they arrive): every byte in order whatever the sizes of the program's
 * writes, a result or error event at the end, a client that hangs up, a
 * session closed under a running stream.
 *
 * The same fixture as test_proxy_stateful.c (stateful_suite.h): one proxy
 * with a warm pool; every test closes the sessions it opens.
 */
#include "stateful_suite.h"
#include "sgrun.h"

/* ------------------------------------------------------------------------
 * 5. Streaming: Server-Sent Events read as they arrive
 * ------------------------------------------------------------------------ */

typedef struct {
    char name[32];
    char *data; /* the event's data lines, joined with "\n" */
    size_t data_len;
    double at; /* seconds from the request's start until its last byte came */
} sse_event_t;

typedef struct {
    char *raw; /* every body byte received */
    size_t len, cap;
    size_t cut; /* raw[0..cut) has been cut into events */
    sse_event_t *ev;
    size_t nev, evcap;
    size_t nchunks;     /* write callback calls */
    size_t abort_after; /* hang up once this many events came; 0: never */
    size_t seen;        /* nev, for another thread (__atomic) */
    double t0;
    bool oom;
    char perr[256]; /* the first malformed event, if any */
} sse_stream_t;

/* One event block (no trailing blank line): "event: X" and "data: ..."
 * lines; ":" comments are allowed. */
static void sse_cut_one(sse_stream_t *s, const char *p, size_t len, double at)
{
    if (s->nev == s->evcap) {
        size_t ncap = s->evcap ? 2 * s->evcap : 16;
        sse_event_t *n = realloc(s->ev, ncap * sizeof(*n));
        if (n == NULL) {
            s->oom = true;
            return;
        }
        s->ev = n;
        s->evcap = ncap;
    }
    sse_event_t *e = &s->ev[s->nev];
    memset(e, 0, sizeof(*e));
    e->at = at;
    e->data = malloc(len + 1);
    if (e->data == NULL) {
        s->oom = true;
        return;
    }
    const char *end = p + len;
    bool have_data = false;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        size_t ll = eol ? (size_t)(eol - p) : (size_t)(end - p);
        if (ll > 0 && p[0] == ':') {
            /* comment */
        } else if (ll >= 6 && memcmp(p, "event:", 6) == 0) {
            const char *v = p + 6 + (ll > 6 && p[6] == ' ');
            snprintf(e->name, sizeof(e->name), "%.*s", (int)(p + ll - v), v);
        } else if (ll >= 5 && memcmp(p, "data:", 5) == 0) {
            const char *v = p + 5 + (ll > 5 && p[5] == ' ');
            if (have_data)
                e->data[e->data_len++] = '\n';
            memcpy(e->data + e->data_len, v, (size_t)(p + ll - v));
            e->data_len += (size_t)(p + ll - v);
            have_data = true;
        } else if (s->perr[0] == '\0') {
            snprintf(s->perr, sizeof(s->perr), "event %zu has a line that is no SSE field: \"%.*s\"", s->nev,
                     (int)(ll > 100 ? 100 : ll), p);
        }
        p += ll + 1;
    }
    e->data[e->data_len] = '\0';
    if (s->perr[0] == '\0' && (e->name[0] == '\0' || !have_data))
        snprintf(s->perr, sizeof(s->perr), "event %zu lacks an event: or a data: line", s->nev);
    s->nev++;
}

static size_t sse_on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    sse_stream_t *s = userdata;
    size_t n = size * nmemb;
    double at = sgtest_now() - s->t0;
    if (s->len + n + 1 > s->cap) {
        size_t ncap = (s->len + n + 1) * 2;
        char *nb = realloc(s->raw, ncap);
        if (nb == NULL) {
            s->oom = true;
            return 0;
        }
        s->raw = nb;
        s->cap = ncap;
    }
    memcpy(s->raw + s->len, ptr, n);
    s->len += n;
    s->raw[s->len] = '\0';
    s->nchunks++;
    /* every complete event ("\n\n"-terminated) arrived with this chunk at the latest */
    for (;;) {
        char *blank = memmem(s->raw + s->cut, s->len - s->cut, "\n\n", 2);
        if (blank == NULL)
            break;
        sse_cut_one(s, s->raw + s->cut, (size_t)(blank - (s->raw + s->cut)), at);
        s->cut = (size_t)(blank + 2 - s->raw);
    }
    __atomic_store_n(&s->seen, s->nev, __ATOMIC_RELEASE);
    if (s->abort_after != 0 && s->nev >= s->abort_after)
        return 0; /* libcurl ends the transfer: the client hangs up */
    return n;
}

static void sse_free(sse_stream_t *s)
{
    for (size_t i = 0; i < s->nev; i++)
        free(s->ev[i].data);
    free(s->ev);
    free(s->raw);
    memset(s, 0, sizeof(*s));
}

/* What a streamed run gave: concatenated stdout and stderr, the result, and
 * when the first stdout event and the result event came. */
typedef struct {
    char *out, *err; /* malloc'd, NUL-terminated */
    size_t out_len, err_len;
    size_t n_out; /* stdout events */
    json_object *result;
    double first_stdout_at; /* -1 if none */
    double result_at;
    double seconds; /* the whole request */
    size_t nchunks; /* pieces libcurl handed over */
} streamed_t;

static void streamed_free(streamed_t *t)
{
    free(t->out);
    free(t->err);
    json_object_put(t->result);
    memset(t, 0, sizeof(*t));
}

static void append(char **buf, size_t *len, const char *p, size_t n)
{
    char *nb = realloc(*buf, *len + n + 1);
    assert_non_null(nb);
    memcpy(nb + *len, p, n);
    *len += n;
    nb[*len] = '\0';
    *buf = nb;
}

/* POSTs js to url (application/json; with accept_sse, "Accept:
 * text/event-stream"), the reply going into s as it comes (sse_on_body;
 * s->t0 is set when it starts). *status and ctype (may be NULL) get the
 * reply's; errbuf (may be NULL) libcurl's message. */
static CURLcode sse_perform(const char *url, const char *js, bool accept_sse, long timeout_s, sse_stream_t *s,
                            long *status, char *ctype, size_t ctlen, char *errbuf)
{
    const char *hl[] = {accept_sse ? "Accept: text/event-stream" : NULL, NULL};
    sgtest_reply_t r;
    s->t0 = sgtest_now();
    sgtest_post_stream(url, js, hl, timeout_s, sse_on_body, s, &r);
    if (status != NULL)
        *status = r.status;
    char *ct = sgtest_reply_header(&r, "Content-Type");
    if (ctype != NULL)
        snprintf(ctype, ctlen, "%s", ct != NULL ? ct : "(none)");
    if (errbuf != NULL)
        snprintf(errbuf, CURL_ERROR_SIZE, "%s", r.error);
    free(ct);
    sgtest_reply_free(&r);
    return (CURLcode)r.curl_code;
}

/* POSTs body (consumed) to path; with accept_sse the request carries
 * "Accept: text/event-stream", otherwise the body must ask for a stream.
 * Asserts a well-formed event stream that ends with one result event. */
static void post_streamed(const char *path, json_object *body, bool accept_sse, streamed_t *t)
{
    memset(t, 0, sizeof(*t));
    t->first_stdout_at = -1;
    char url[512];
    pathf(url, sizeof(url), "%s%s", sgtest_proxy_url(suite.proxy), path);
    const char *js = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
    sse_stream_t s = {0};
    char errbuf[CURL_ERROR_SIZE] = "", ctype[128];
    long status = 0;
    CURLcode rc = sse_perform(url, js, accept_sse, 120, &s, &status, ctype, sizeof(ctype), errbuf);
    t->seconds = sgtest_now() - s.t0;
    json_object_put(body);

    /* copy what the assertions print, then free before any of them fails */
    char head[600];
    snprintf(head, sizeof(head), "%.*s", (int)(s.len < 500 ? s.len : 500), s.raw ? s.raw : "");
    if (rc != CURLE_OK || status != 200 || strncmp(ctype, "text/event-stream", 17) != 0 || s.oom || s.perr[0] != '\0' ||
        s.cut != s.len) {
        char why[2048];
        snprintf(why, sizeof(why),
                 "streamed POST %s: curl \"%s\", HTTP %ld, Content-Type %s, %zu bytes, %s%s; "
                 "body starts: %s",
                 path, rc == CURLE_OK ? "ok" : (errbuf[0] ? errbuf : curl_easy_strerror(rc)), status, ctype, s.len,
                 s.oom ? "out of memory" : s.perr, s.cut != s.len ? " (unterminated last event)" : "", head);
        sse_free(&s);
        SG_FAIL(NULL, "%s", why);
    }

    char why[512] = "";
    for (size_t i = 0; i < s.nev && why[0] == '\0'; i++) {
        sse_event_t *e = &s.ev[i];
        bool last = i + 1 == s.nev;
        if (!sgtest_utf8_valid(e->data, e->data_len)) {
            snprintf(why, sizeof(why), "event %zu (%s) carries invalid UTF-8", i, e->name);
            break;
        }
        json_object *d = json_tokener_parse(e->data);
        if (d == NULL || !json_object_is_type(d, json_type_object)) {
            snprintf(why, sizeof(why), "event %zu (%s): data is not a JSON object: %.200s", i, e->name, e->data);
            json_object_put(d);
            break;
        }
        if (strcmp(e->name, "stdout") == 0 || strcmp(e->name, "stderr") == 0) {
            json_object *v = NULL;
            if (last) {
                snprintf(why, sizeof(why), "the stream ends with a %s event, not result", e->name);
            } else if (!json_object_object_get_ex(d, "data", &v) || !json_object_is_type(v, json_type_string)) {
                snprintf(why, sizeof(why), "event %zu (%s): no string \"data\": %.200s", i, e->name, e->data);
            } else if (strcmp(e->name, "stdout") == 0) {
                append(&t->out, &t->out_len, json_object_get_string(v), (size_t)json_object_get_string_len(v));
                if (t->n_out++ == 0)
                    t->first_stdout_at = e->at;
            } else {
                append(&t->err, &t->err_len, json_object_get_string(v), (size_t)json_object_get_string_len(v));
            }
            json_object_put(d);
        } else if (strcmp(e->name, "result") == 0 && last) {
            t->result = d;
            t->result_at = e->at;
        } else {
            snprintf(why, sizeof(why), "unexpected event %zu \"%s\" (of %zu): %.300s", i, e->name, s.nev, e->data);
            json_object_put(d);
        }
    }
    if (why[0] == '\0' && t->result == NULL)
        snprintf(why, sizeof(why), "the stream has no result event (%zu events)", s.nev);
    t->nchunks = s.nchunks;
    sse_free(&s);
    if (t->out == NULL)
        append(&t->out, &t->out_len, "", 0);
    if (t->err == NULL)
        append(&t->err, &t->err_len, "", 0);
    if (why[0] != '\0') {
        streamed_free(t);
        SG_FAIL(NULL, "streamed POST %s: %s; body starts: %s", path, why, head);
    }
    SG_CHECK_RESULT_SHAPE(t->result);
    SG_CHECK(strcmp(SG_STR(t->result, "stdout"), "") == 0 && strcmp(SG_STR(t->result, "stderr"), "") == 0, t->result,
             "a streamed result carries empty stdout and stderr");
}

static json_object *code_body(const char *code, int timeout, bool stream_field)
{
    json_object *b = json_object_new_object();
    json_object_object_add(b, "code", json_object_new_string(code));
    if (timeout > 0)
        json_object_object_add(b, "timeout", json_object_new_int(timeout));
    if (stream_field)
        json_object_object_add(b, "stream", json_object_new_boolean(1));
    return b;
}

static const char TICKS_PY[] = "import time\n"
                               "for i in range(3):\n"
                               "    print(i, flush=True)\n"
                               "    time.sleep(0.5)\n";

/* Three lines half a second apart: they must come as they are printed. */
static void expect_incremental(streamed_t *t, const char *how)
{
    SG_CHECK(strcmp(t->out, "0\n1\n2\n") == 0, t->result, "%s: streamed stdout is \"%s\"", how, t->out);
    SG_CHECK(t->err_len == 0, t->result, "%s: streamed stderr is \"%s\"", how, t->err);
    SG_CHECK(SG_INT(t->result, "exit_code") == 0 && SG_BOOL(t->result, "success"), t->result,
             "%s: the run must succeed", how);
    SG_CHECK(t->first_stdout_at >= 0 && t->result_at - t->first_stdout_at >= STREAM_GAP_S, t->result,
             "%s: the first stdout event came %.3f s and the result %.3f s after the request: "
             "output was buffered, not streamed (%zu stdout events in %zu chunks)",
             how, t->first_stdout_at, t->result_at, t->n_out, t->nchunks);
}

/* A streamed request on a thread of its own, read into s. */
typedef struct {
    char url[512];
    const char *body;
    sse_stream_t s;
    CURLcode rc;
    long status;
} bg_stream_t;

static void *bg_stream_main(void *arg)
{
    bg_stream_t *b = arg;
    b->rc = sse_perform(b->url, b->body, false, 60, &b->s, &b->status, NULL, 0, NULL);
    return NULL;
}

/* DELETE during a streamed run: the stream ends with one "error" event. */
static void test_stream_closed_session(void **state)
{
    (void)state;
    char *sid = create_session("python");
    char *cid = sgtest_docker_session_container(suite.proxy_id, sid);
    SG_CHECK(cid != NULL, NULL, "no container for session %s", sid);
    bg_stream_t *b = calloc(1, sizeof(*b));
    assert_non_null(b);
    pathf(b->url, sizeof(b->url), "%s/sessions/%s/execute", sgtest_proxy_url(suite.proxy), sid);
    b->body = "{\"stream\":true,\"code\":\"import time\\nfor i in range(50):\\n"
              "    print(i, flush=True)\\n    time.sleep(0.2)\"}";
    pthread_t th;
    SG_CHECK(pthread_create(&th, NULL, bg_stream_main, b) == 0, NULL, "pthread_create");
    /* once the run streams, close the session under it */
    double deadline = sgtest_now() + 30.0;
    while (__atomic_load_n(&b->s.seen, __ATOMIC_ACQUIRE) == 0 && sgtest_now() < deadline)
        usleep(20000);
    bool streaming = __atomic_load_n(&b->s.seen, __ATOMIC_ACQUIRE) != 0;
    if (streaming)
        close_session_c(sid, cid);
    pthread_join(th, NULL);
    if (!streaming)
        close_session_c(sid, cid);

    char why[600] = "";
    sse_stream_t *s = &b->s;
    sse_event_t *last = s->nev ? &s->ev[s->nev - 1] : NULL;
    json_object *d = last ? json_tokener_parse(last->data) : NULL;
    json_object *detail = NULL, *code = NULL;
    if (!streaming)
        snprintf(why, sizeof(why), "no event came within 30 s");
    else if (b->rc != CURLE_OK || b->status != 200)
        snprintf(why, sizeof(why), "curl %d, HTTP %ld", (int)b->rc, b->status);
    else if (s->perr[0] != '\0' || s->cut != s->len)
        snprintf(why, sizeof(why), "malformed stream: %s", s->perr);
    else if (last == NULL || strcmp(last->name, "error") != 0)
        snprintf(why, sizeof(why), "the stream ends with \"%s\", not an error event", last ? last->name : "(nothing)");
    else if (d == NULL || !json_object_object_get_ex(d, "detail", &detail) ||
             !json_object_object_get_ex(d, "code", &code) || json_object_get_string_len(detail) == 0 ||
             json_object_get_string_len(code) == 0)
        snprintf(why, sizeof(why), "the error event is not {\"detail\",\"code\"}: %.200s", last->data);
    for (size_t i = 0; why[0] == '\0' && i + 1 < s->nev; i++)
        if (strcmp(s->ev[i].name, "stdout") != 0)
            snprintf(why, sizeof(why), "event %zu is \"%s\" before the error", i, s->ev[i].name);
    json_object_put(d);
    char head[300];
    snprintf(head, sizeof(head), "%.*s", (int)(s->len < 250 ? s->len : 250), s->raw ? s->raw : "");
    sse_free(s);
    free(b);
    free(cid);
    free(sid);
    if (why[0] != '\0')
        SG_FAIL(NULL, "a session closed during a streamed run: %s; body starts: %s", why, head);
}

static void test_streaming(void **state)
{
    (void)state;
    char *sid = create_session("python");
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    streamed_t t;

    /* Accept: text/event-stream */
    post_streamed(path, code_body(TICKS_PY, 0, false), true, &t);
    expect_incremental(&t, "Accept: text/event-stream");
    expect_first_state(t.result);
    streamed_free(&t);

    /* "stream": true in the body, and the state is the session's */
    post_streamed(path, code_body("import sys\nprint('to stderr', file=sys.stderr)\n", 0, true), false, &t);
    SG_CHECK(strcmp(t.err, "to stderr\n") == 0, t.result, "streamed stderr is \"%s\"", t.err);
    streamed_free(&t);
    post_streamed(path, code_body(TICKS_PY, 0, true), false, &t);
    expect_incremental(&t, "\"stream\": true");
    expect_state(t.result, "kept");
    streamed_free(&t);

    /* a streamed run that times out ends with its result */
    post_streamed(path, code_body("print('spin', flush=True)\nwhile True: pass\n", 1, true), false, &t);
    SG_CHECK(strcmp(t.out, "spin\n") == 0, t.result, "streamed stdout is \"%s\"", t.out);
    SG_CHECK(SG_BOOL(t.result, "timed_out"), t.result, "the streamed run must time out");
    expect_state(t.result, "lost");
    SG_CHECK(t.seconds < 1.0 + SLACK_S, t.result, "a 1 s timeout streamed for %.1f s", t.seconds);
    streamed_free(&t);

    /* a 4-byte character split across writes, and bytes that are not UTF-8 */
    post_streamed(path,
                  code_body("import sys, time\n"
                            "out = sys.stdout.buffer\n"
                            "out.write(b'a\\xf0\\x9f'); out.flush(); time.sleep(0.3)\n"
                            "out.write(b'\\x98\\x80b\\n'); out.flush(); time.sleep(0.3)\n"
                            "out.write(b'x\\xff\\xfey\\n'); out.flush()\n",
                            0, true),
                  false, &t);
    expect_state(t.result, "new"); /* the timeout above lost the kernel */
    sgtest_expect_success(t.result);
    static const char emoji_line[] = "a\xf0\x9f\x98\x80"
                                     "b\n";
    SG_CHECK(strncmp(t.out, emoji_line, strlen(emoji_line)) == 0, t.result,
             "the split emoji did not arrive intact: stdout \"%s\"", t.out);
    const char *rest = t.out + strlen(emoji_line);
    size_t rl = strlen(rest);
    SG_CHECK(rl >= 6 && rest[0] == 'x' && strstr(rest, "\xef\xbf\xbd") != NULL && strcmp(rest + rl - 2, "y\n") == 0,
             t.result, "bytes \\xff\\xfe must arrive as U+FFFD between x and y: \"%s\"", rest);
    streamed_free(&t);

    /* a client that hangs up in the middle of a stream: the session and the
     * proxy carry on */
    {
        char url[512];
        pathf(url, sizeof(url), "%s%s", sgtest_proxy_url(suite.proxy), path);
        const char *js = "{\"stream\":true,\"code\":\"import time\\nfor i in range(4):\\n"
                         "    print(i, flush=True)\\n    time.sleep(0.3)\"}";
        sse_stream_t s = {.abort_after = 1};
        CURLcode rc = sse_perform(url, js, false, 60, &s, NULL, NULL, 0, NULL);
        size_t nev = s.nev;
        sse_free(&s);
        SG_CHECK(rc == CURLE_WRITE_ERROR && nev >= 1, NULL,
                 "the hang-up did not happen as planned: curl %d after %zu event(s)", (int)rc, nev);
        json_object *r = run_code(sid, "print('after hang-up')");
        sgtest_expect_success(r);
        sgtest_expect_stdout(r, "after hang-up\n");
        expect_first_state(r); /* kept, or new if the abandoned run was cancelled */
        json_object_put(r);
        SG_CHECK(sgtest_proxy_alive(suite.proxy), NULL, "the proxy died after a client hung up");
    }

    /* errors before the stream starts are plain JSON errors */
    {
        SG_CALL_ERROR(suite.proxy, "POST", "/sessions/00000000-0000-4000-8000-000000000000/execute",
                      "{\"code\":\"print(1)\",\"stream\":true}", 404, "no_such_session");
        SG_CALL_ERROR(suite.proxy, "POST", path, "{\"stream\":true}", 400, "bad_field");
    }

    /* commands stream too, and report state none */
    char cpath[256];
    pathf(cpath, sizeof(cpath), "/sessions/%s/commands", sid);
    json_object *b = json_object_new_object();
    json_object_object_add(b, "command", json_object_new_string("echo one; sleep 1; echo two"));
    post_streamed(cpath, b, true, &t);
    SG_CHECK(strcmp(t.out, "one\ntwo\n") == 0, t.result, "streamed command stdout \"%s\"", t.out);
    expect_state(t.result, "none");
    SG_CHECK(t.result_at - t.first_stdout_at >= STREAM_GAP_S, t.result,
             "a command's output was buffered: first stdout at %.3f s, result at %.3f s", t.first_stdout_at,
             t.result_at);
    streamed_free(&t);

    session_done(sid);
}

int main(void)
{
    return SG_RUN_TESTS("proxy_streaming", group_setup, group_teardown, NULL, sgtest_suite_teardown, test_streaming,
                        test_stream_closed_session);
}
