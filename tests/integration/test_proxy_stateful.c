/*
 * test_proxy_stateful.c — stateful sessions (docs/proxy-api.md, "state" in
 * the execution result; proxy/agent_proto.h, "Kernels"), streamed output
 * (Server-Sent Events), the warm pool's refill, and that nothing is left.
 *
 * One proxy serves the whole group, with SANDGATE_POOL_SIZE=POOL, so that
 * default sessions come from the warm pool as they do in production (their
 * first execute may find the kernel already started: "kept" instead of
 * "new"). Every test closes the sessions it opens; the last test closes
 * whatever is listed, stops the proxy with SIGTERM and checks that no
 * container of it, and none of its temporary files, remain.
 */
#include "sgtest.h"

#include <curl/curl.h>
#include <errno.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define POOL 3
#define SLACK_S 10.0    /* a timed-out run is back within its timeout + this */
#define REMOVAL_S 10.0  /* a closed session's container is gone within this */
#define REFILL_S 30.0   /* the pool is full again within this */
#define FILL_S 90.0     /* the first fill, while other tests' work goes on */
#define POOL_TAKE_S 0.1 /* a session from the pool is created within this */
#define STREAM_GAP_S 0.8 /* first stdout event before the result event, at least */

/* The temporary directories of every proxy this file started. */
static char *tmpdirs[8];
static size_t ntmpdirs;

/* ------------------------------------------------------------------------
 * Proxy lifecycle
 * ------------------------------------------------------------------------ */

/* The proxy's private temporary directory: the one holding the log its
 * stdout goes to (sgtest_proxy_start). */
static void remember_tmpdir(sgtest_proxy_t *p);
static sgtest_suite_t suite = {.removal_s = REMOVAL_S, .on_start = remember_tmpdir};

static void remember_tmpdir(sgtest_proxy_t *p)
{
    char link[64], target[4096];
    snprintf(link, sizeof(link), "/proc/%d/fd/1", (int)sgtest_proxy_pid(p));
    ssize_t n = readlink(link, target, sizeof(target) - 1);
    if (n <= 0 || ntmpdirs == sizeof(tmpdirs) / sizeof(tmpdirs[0])) {
        fprintf(stderr, "cannot find the temporary directory of proxy %s\n", suite.proxy_id);
        return;
    }
    target[n] = '\0';
    tmpdirs[ntmpdirs++] = strdup(dirname(target));
}

static int group_setup(void **state)
{
    *state = &suite;
    return sgtest_suite_start_pool(&suite, POOL);
}

static int group_teardown(void **state)
{
    int rc = sgtest_suite_end(&suite);
    for (size_t i = 0; i < ntmpdirs; i++)
        free(tmpdirs[i]);
    ntmpdirs = 0;
    return rc;
}

/* ------------------------------------------------------------------------
 * Small helpers (test thread only)
 * ------------------------------------------------------------------------ */



static void expect_state(json_object *r, const char *want)
{
    if (strcmp(SG_STR(r, "state"), want) != 0)
        SG_FAIL(r, "state \"%s\", expected \"%s\"", SG_STR(r, "state"), want);
}

/* The first execute of a session: its kernel may have been started by the
 * pool (kept) or be started for it (new). */
static void expect_first_state(json_object *r)
{
    const char *st = SG_STR(r, "state");
    SG_CHECK(strcmp(st, "new") == 0 || strcmp(st, "kept") == 0, r,
             "the first execute of a session must report state new or kept, not \"%s\"", st);
}

static void expect_stderr_has(json_object *r, const char *needle)
{
    if (strstr(SG_STR(r, "stderr"), needle) == NULL)
        SG_FAIL(r, "stderr does not mention \"%s\"", needle);
}

static char *create_session_t(const char *lang, double *seconds)
{
    char body[128];
    pathf(body, sizeof(body), "{\"lang\":\"%s\",\"keep_template\":false}", lang);
    sgtest_reply_t r;
    sgtest_call(suite.proxy, "POST", "/sessions", body, &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    if (seconds != NULL)
        *seconds = r.seconds;
    sgtest_reply_free(&r);
    SG_CHECK(*SG_STR(o, "session_id") != '\0', o, "empty session_id");
    SG_CHECK(strcmp(SG_STR(o, "status"), "active") == 0, o, "new session is not active");
    SG_CHECK(strcmp(SG_STR(o, "lang"), lang) == 0, o, "lang");
    char *sid = strdup(SG_STR(o, "session_id"));
    json_object_put(o);
    return sid;
}

static char *create_session(const char *lang)
{
    return create_session_t(lang, NULL);
}

/* DELETE /sessions/{id}; its container (cid, or looked up when NULL) must be
 * gone within REMOVAL_S. */
static void close_session_c(const char *sid, const char *cid_known)
{
    sgtest_close_session(suite.proxy, suite.proxy_id, sid, cid_known, REMOVAL_S);
}

static void close_session(const char *sid)
{
    close_session_c(sid, NULL);
}

/* The end of a test's session: closed (its container gone), its id freed. */
static void session_done(char *sid)
{
    close_session(sid);
    free(sid);
}

/* timeout <= 0: the field is left out. */
static json_object *run_code_t(const char *sid, const char *code, int timeout, double *seconds)
{
    return sgtest_run_code(suite.proxy, sid, code, NULL, timeout, seconds);
}

static json_object *run_code(const char *sid, const char *code)
{
    return run_code_t(sid, code, 0, NULL);
}

static json_object *run_cmd(const char *sid, const char *cmd)
{
    return sgtest_run_cmd(suite.proxy, sid, cmd, 0, NULL);
}

/* Runs code, expects success, stdout `want` (NULL: not checked) and state
 * `state` (NULL: new or kept, for a session's first execute). */
static void expect_run(const char *sid, const char *code, const char *want, const char *state)
{
    json_object *r = run_code(sid, code);
    sgtest_expect_success(r);
    if (want != NULL)
        sgtest_expect_stdout(r, want);
    if (state != NULL)
        expect_state(r, state);
    else
        expect_first_state(r);
    json_object_put(r);
}

/* ------------------------------------------------------------------------
 * 1-2. State persists between executes
 * ------------------------------------------------------------------------ */

static void test_python_state_persists(void **state)
{
    (void)state;
    char *sid = create_session("python");

    expect_run(sid, "x = 41", "", NULL);
    expect_run(sid, "print(x + 1)", "42\n", "kept");

    /* imports and function definitions persist */
    expect_run(sid, "import math\ndef sq(v):\n    return v * v\nclass Box:\n    n = 3\n", "",
               "kept");
    expect_run(sid, "print(sq(x), math.isqrt(sq(9)), Box.n)", "1681 9 3\n", "kept");

    /* an exception in between does not lose state */
    json_object *r = run_code(sid, "print('before')\nprint(undefined_name)");
    SG_CHECK(SG_INT(r, "exit_code") == 1, r, "an uncaught NameError must exit 1");
    SG_CHECK(!SG_BOOL(r, "success"), r, "success");
    SG_CHECK(strcmp(SG_STR(r, "reason"), "exited") == 0, r, "reason");
    sgtest_expect_stdout(r, "before\n");
    expect_stderr_has(r, "NameError");
    expect_state(r, "kept");
    json_object_put(r);

    /* so does SystemExit: the kernel lives on */
    r = run_code(sid, "x += 1\nraise SystemExit(5)");
    SG_CHECK(SG_INT(r, "exit_code") == 5, r, "SystemExit(5) must exit 5");
    expect_state(r, "kept");
    json_object_put(r);

    expect_run(sid, "print(x)", "42\n", "kept");
    expect_run(sid, "print(sq(2) + math.floor(math.pi))", "7\n", "kept");
    session_done(sid);
}

static void test_javascript_state_persists(void **state)
{
    (void)state;
    char *sid = create_session("javascript");

    expect_run(sid, "let a = 20", "", NULL);
    expect_run(sid, "function f(){return 7}", "", "kept");
    expect_run(sid, "console.log(a * 2 + f())", "47\n", "kept");

    /* a timer's output belongs to the execution that set it */
    double secs = 0;
    json_object *r = run_code_t(sid, "console.log('early'); setTimeout(() => console.log(\"late\"), 200)",
                                0, &secs);
    sgtest_expect_success(r);
    sgtest_expect_stdout(r, "early\nlate\n");
    expect_state(r, "kept");
    SG_CHECK(secs >= 0.2, r, "the execute answered after %.3f s, before its 200 ms timer", secs);
    json_object_put(r);

    /* an uncaught error does not lose state */
    r = run_code(sid, "a += 1; nope()");
    SG_CHECK(SG_INT(r, "exit_code") == 1, r, "an uncaught ReferenceError must exit 1");
    expect_stderr_has(r, "ReferenceError");
    expect_state(r, "kept");
    json_object_put(r);

    expect_run(sid, "console.log(a, f())", "21 7\n", "kept");
    session_done(sid);
}

/* ------------------------------------------------------------------------
 * 3. A lost state is reported, never silent
 * ------------------------------------------------------------------------ */

/* The execute after a lost one: a new interpreter, in which `name` is not
 * defined. */
static void expect_python_forgot(const char *sid, const char *name)
{
    char code[64];
    pathf(code, sizeof(code), "print(%s)", name);
    json_object *r = run_code(sid, code);
    expect_state(r, "new");
    SG_CHECK(SG_INT(r, "exit_code") == 1, r, "the new interpreter must not know %s", name);
    expect_stderr_has(r, "NameError");
    json_object_put(r);
}

static void test_state_lost_is_reported(void **state)
{
    (void)state;
    char *sid = create_session("python");

    /* a timeout kills the kernel */
    expect_run(sid, "y = 1", "", NULL);
    double secs = 0;
    json_object *r = run_code_t(sid, "while True: pass", 1, &secs);
    SG_CHECK(SG_BOOL(r, "timed_out"), r, "an endless loop with timeout 1 must time out");
    SG_CHECK(strcmp(SG_STR(r, "reason"), "timeout") == 0, r, "reason");
    expect_state(r, "lost");
    SG_CHECK(secs < 1.0 + SLACK_S, r, "a 1 s timeout answered after %.1f s", secs);
    json_object_put(r);
    expect_python_forgot(sid, "y");

    /* os._exit ends the kernel itself */
    expect_run(sid, "z = 2", "", "kept");
    r = run_code(sid, "import os; os._exit(3)");
    SG_CHECK(SG_INT(r, "exit_code") == 3, r, "os._exit(3) must exit 3");
    SG_CHECK(!SG_BOOL(r, "timed_out"), r, "timed_out");
    SG_CHECK(strcmp(SG_STR(r, "reason"), "exited") == 0, r, "reason");
    expect_state(r, "lost");
    json_object_put(r);
    expect_python_forgot(sid, "z");
    /* and the new one keeps state again */
    expect_run(sid, "w = 9", "", "kept");
    expect_run(sid, "print(w)", "9\n", "kept");

    /* the output cap (1 MiB by default) kills the kernel too */
    r = run_code(sid, "import sys\nsys.stdout.write('x' * 2000000)\nsys.stdout.flush()");
    SG_CHECK(SG_BOOL(r, "truncated"), r, "2 MB of stdout must pass the 1 MiB cap");
    SG_CHECK(strcmp(SG_STR(r, "reason"), "output_limit") == 0, r, "reason");
    expect_state(r, "lost");
    json_object_put(r);
    expect_python_forgot(sid, "w");
    session_done(sid);

    /* JavaScript: process.exit(4) ends the kernel */
    sid = create_session("javascript");
    expect_run(sid, "let b = 1", "", NULL);
    r = run_code(sid, "process.exit(4)");
    SG_CHECK(SG_INT(r, "exit_code") == 4, r, "process.exit(4) must exit 4");
    expect_state(r, "lost");
    json_object_put(r);
    r = run_code(sid, "console.log(typeof b)");
    sgtest_expect_success(r);
    sgtest_expect_stdout(r, "undefined\n");
    expect_state(r, "new");
    json_object_put(r);
    session_done(sid);
}

/* ------------------------------------------------------------------------
 * 4. Commands run outside the interpreter
 * ------------------------------------------------------------------------ */

static void test_commands_leave_state_alone(void **state)
{
    (void)state;
    char *sid = create_session("python");
    expect_run(sid, "x = 5", "", NULL);
    json_object *r = run_cmd(sid, "echo hi");
    sgtest_expect_success(r);
    sgtest_expect_stdout(r, "hi\n");
    expect_state(r, "none");
    json_object_put(r);
    /* a failing command neither */
    r = run_cmd(sid, "echo oops >&2; exit 7");
    SG_CHECK(SG_INT(r, "exit_code") == 7, r, "exit 7");
    expect_state(r, "none");
    json_object_put(r);
    expect_run(sid, "print(x)", "5\n", "kept");
    session_done(sid);
}

/* ------------------------------------------------------------------------
 * 5. Streaming: Server-Sent Events read as they arrive
 * ------------------------------------------------------------------------ */

typedef struct {
    char name[32];
    char *data;   /* the event's data lines, joined with "\n" */
    size_t data_len;
    double at;    /* seconds from the request's start until its last byte came */
} sse_event_t;

typedef struct {
    char *raw; /* every body byte received */
    size_t len, cap;
    size_t cut;       /* raw[0..cut) has been cut into events */
    sse_event_t *ev;
    size_t nev, evcap;
    size_t nchunks;   /* write callback calls */
    size_t abort_after; /* hang up once this many events came; 0: never */
    size_t seen;        /* nev, for another thread (__atomic) */
    double t0;
    bool oom;
    char perr[256];   /* the first malformed event, if any */
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
            snprintf(s->perr, sizeof(s->perr), "event %zu has a line that is no SSE field: \"%.*s\"",
                     s->nev, (int)(ll > 100 ? 100 : ll), p);
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
    size_t n_out;    /* stdout events */
    json_object *result;
    double first_stdout_at; /* -1 if none */
    double result_at;
    double seconds;  /* the whole request */
    size_t nchunks;  /* pieces libcurl handed over */
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
    if (rc != CURLE_OK || status != 200 || strncmp(ctype, "text/event-stream", 17) != 0 ||
        s.oom || s.perr[0] != '\0' || s.cut != s.len) {
        char why[2048];
        snprintf(why, sizeof(why),
                 "streamed POST %s: curl \"%s\", HTTP %ld, Content-Type %s, %zu bytes, %s%s; "
                 "body starts: %s",
                 path, rc == CURLE_OK ? "ok" : (errbuf[0] ? errbuf : curl_easy_strerror(rc)),
                 status, ctype, s.len, s.oom ? "out of memory" : s.perr,
                 s.cut != s.len ? " (unterminated last event)" : "", head);
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
            snprintf(why, sizeof(why), "event %zu (%s): data is not a JSON object: %.200s", i,
                     e->name, e->data);
            json_object_put(d);
            break;
        }
        if (strcmp(e->name, "stdout") == 0 || strcmp(e->name, "stderr") == 0) {
            json_object *v = NULL;
            if (last) {
                snprintf(why, sizeof(why), "the stream ends with a %s event, not result",
                         e->name);
            } else if (!json_object_object_get_ex(d, "data", &v) ||
                       !json_object_is_type(v, json_type_string)) {
                snprintf(why, sizeof(why), "event %zu (%s): no string \"data\": %.200s", i,
                         e->name, e->data);
            } else if (strcmp(e->name, "stdout") == 0) {
                append(&t->out, &t->out_len, json_object_get_string(v),
                       (size_t)json_object_get_string_len(v));
                if (t->n_out++ == 0)
                    t->first_stdout_at = e->at;
            } else {
                append(&t->err, &t->err_len, json_object_get_string(v),
                       (size_t)json_object_get_string_len(v));
            }
            json_object_put(d);
        } else if (strcmp(e->name, "result") == 0 && last) {
            t->result = d;
            t->result_at = e->at;
        } else {
            snprintf(why, sizeof(why), "unexpected event %zu \"%s\" (of %zu): %.300s", i, e->name,
                     s.nev, e->data);
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
    SG_CHECK(strcmp(SG_STR(t->result, "stdout"), "") == 0 &&
                 strcmp(SG_STR(t->result, "stderr"), "") == 0,
             t->result, "a streamed result carries empty stdout and stderr");
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
    SG_CHECK(strcmp(t->out, "0\n1\n2\n") == 0, t->result, "%s: streamed stdout is \"%s\"", how,
             t->out);
    SG_CHECK(t->err_len == 0, t->result, "%s: streamed stderr is \"%s\"", how, t->err);
    SG_CHECK(SG_INT(t->result, "exit_code") == 0 && SG_BOOL(t->result, "success"), t->result,
             "%s: the run must succeed", how);
    SG_CHECK(t->first_stdout_at >= 0 && t->result_at - t->first_stdout_at >= STREAM_GAP_S,
             t->result,
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
        snprintf(why, sizeof(why), "the stream ends with \"%s\", not an error event",
                 last ? last->name : "(nothing)");
    else if (d == NULL || !json_object_object_get_ex(d, "detail", &detail) ||
             !json_object_object_get_ex(d, "code", &code) ||
             json_object_get_string_len(detail) == 0 || json_object_get_string_len(code) == 0)
        snprintf(why, sizeof(why), "the error event is not {\"detail\",\"code\"}: %.200s",
                 last->data);
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
    post_streamed(path, code_body("import sys\nprint('to stderr', file=sys.stderr)\n", 0, true),
                  false, &t);
    SG_CHECK(strcmp(t.err, "to stderr\n") == 0, t.result, "streamed stderr is \"%s\"", t.err);
    streamed_free(&t);
    post_streamed(path, code_body(TICKS_PY, 0, true), false, &t);
    expect_incremental(&t, "\"stream\": true");
    expect_state(t.result, "kept");
    streamed_free(&t);

    /* a streamed run that times out ends with its result */
    post_streamed(path, code_body("print('spin', flush=True)\nwhile True: pass\n", 1, true), false,
                  &t);
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
    static const char emoji_line[] = "a\xf0\x9f\x98\x80" "b\n";
    SG_CHECK(strncmp(t.out, emoji_line, strlen(emoji_line)) == 0, t.result,
             "the split emoji did not arrive intact: stdout \"%s\"", t.out);
    const char *rest = t.out + strlen(emoji_line);
    size_t rl = strlen(rest);
    SG_CHECK(rl >= 6 && rest[0] == 'x' && strstr(rest, "\xef\xbf\xbd") != NULL &&
                 strcmp(rest + rl - 2, "y\n") == 0,
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
             "a command's output was buffered: first stdout at %.3f s, result at %.3f s",
             t.first_stdout_at, t.result_at);
    streamed_free(&t);

    session_done(sid);
}

/* Idle, ready pool containers of python: labelled kind=pool, running, not
 * the container of a listed session, and with the warm kernel running (the
 * proxy starts it once the agent said READY and the container joined the
 * pool, so such a container can be handed out at once). */
static char **ready_pool(void)
{
    return sgtest_idle_pool(suite.proxy, suite.proxy_id, "python", true, "kernel.py");
}

static char **wait_pool_ready(double timeout_s, double *took)
{
    double t0 = sgtest_now();
    for (;;) {
        char **v = ready_pool();
        size_t n = sgtest_strv_len(v);
        if (n == POOL) {
            if (took != NULL)
                *took = sgtest_now() - t0;
            return v;
        }
        sgtest_strv_free(v);
        SG_CHECK(n < POOL, NULL, "%zu idle python pool containers, more than SANDGATE_POOL_SIZE=%d",
                 n, POOL);
        if (sgtest_now() - t0 > timeout_s)
            SG_FAIL(NULL, "the python pool holds %zu ready idle container(s), not %d, after %.0f s",
                    n, POOL, timeout_s);
        usleep(100000);
    }
}

static void test_pool_refills(void **state)
{
    (void)state;
    char *sids[2 * POOL], *cids[2 * POOL];
    size_t nused = 0;
    char **ready = wait_pool_ready(FILL_S, NULL);

    for (int round = 0; round < 2; round++) {
        size_t first = nused;
        /* POOL sessions in a row, each from the pool */
        for (int i = 0; i < POOL; i++) {
            double secs = 0;
            char *sid = create_session_t("python", &secs);
            char *cid = sgtest_docker_session_container(suite.proxy_id, sid);
            SG_CHECK(cid != NULL, NULL, "no container for session %s", sid);
            sids[nused] = sid;
            cids[nused] = cid;
            nused++;
            SG_CHECK(sgtest_strv_has(ready, cid), NULL,
                     "round %d, session %d: its container %.12s was not one of the %d ready pool "
                     "containers (created in %.3f s)",
                     round, i, cid, POOL, secs);
            SG_CHECK(secs < POOL_TAKE_S, NULL,
                     "round %d, session %d from the pool took %.3f s to create (limit %.3f s)",
                     round, i, secs, POOL_TAKE_S);
            long st = 0;
            json_object *c = sgtest_docker_inspect(cid, &st);
            SG_CHECK(c != NULL, NULL, "inspect %s: HTTP %ld", cid, st);
            json_object *kind = NULL, *labels = sgtest_jpath(c, "Config.Labels");
            SG_CHECK(labels != NULL && json_object_object_get_ex(labels, "sandgate.kind", &kind) &&
                         strcmp(json_object_get_string(kind), "pool") == 0,
                     c, "a session taken from the pool keeps sandgate.kind=pool");
            json_object_put(c);
        }
        sgtest_strv_free(ready);
        /* the taken sessions work, with their own state */
        for (size_t i = first; i < nused; i++) {
            char code[64];
            pathf(code, sizeof(code), "n = %zu\nprint(n)", i);
            char want[16];
            pathf(want, sizeof(want), "%zu\n", i);
            expect_run(sids[i], code, want, NULL);
        }

        /* back to POOL ready idle containers, none of them a used one */
        double took = 0;
        ready = wait_pool_ready(REFILL_S, &took);
        for (size_t i = 0; i < nused; i++)
            SG_CHECK(!sgtest_strv_has(ready, cids[i]), NULL,
                     "container %.12s of session %s is in the pool again", cids[i], sids[i]);
        fprintf(stderr, "round %d: the pool was full again %.1f s after the takes\n", round, took);

        for (size_t i = first; i < nused; i++)
            close_session_c(sids[i], cids[i]);
        for (size_t i = 0; i < nused; i++)
            SG_CHECK(!sgtest_strv_has(ready, cids[i]), NULL, "a closed session's container is idle");
    }
    sgtest_strv_free(ready);

    /* every session and every container was new */
    for (size_t i = 0; i < nused; i++)
        for (size_t j = i + 1; j < nused; j++) {
            SG_CHECK(strcmp(sids[i], sids[j]) != 0, NULL, "session id %s handed out twice",
                     sids[i]);
            SG_CHECK(strcmp(cids[i], cids[j]) != 0, NULL, "container %.12s handed out twice",
                     cids[i]);
        }
    for (size_t i = 0; i < nused; i++) {
        SG_CHECK(sgtest_docker_exists(cids[i]) == 0, NULL, "container %.12s still exists",
                 cids[i]);
        free(sids[i]);
        free(cids[i]);
    }
}

/* ------------------------------------------------------------------------
 * 7. Last: nothing is left
 * ------------------------------------------------------------------------ */

static void test_zz_no_leaks(void **state)
{
    (void)state;
    /* close whatever is listed (nothing, unless a test above failed) */
    char **sessions = sgtest_listed_sessions(suite.proxy);
    for (size_t i = 0; sessions[i] != NULL; i++)
        close_session(sessions[i]);
    sgtest_strv_free(sessions);
    sessions = sgtest_listed_sessions(suite.proxy);
    SG_CHECK(sgtest_strv_len(sessions) == 0, NULL, "%zu session(s) listed after closing all",
             sgtest_strv_len(sessions));
    sgtest_strv_free(sessions);

    /* now only idle pool containers are left */
    char l1[192];
    pathf(l1, sizeof(l1), "sandgate.proxy=%s", suite.proxy_id);
    const char *non_pool[] = {l1, "sandgate.kind=session", NULL};
    const char *ephemeral[] = {l1, "sandgate.kind=ephemeral", NULL};
    int n = sgtest_docker_wait_count(non_pool, 0, REMOVAL_S);
    SG_CHECK(n == 0, NULL, "%d sandgate.kind=session container(s) remain with no session", n);
    n = sgtest_docker_wait_count(ephemeral, 0, REMOVAL_S);
    SG_CHECK(n == 0, NULL, "%d sandgate.kind=ephemeral container(s) remain", n);
    const char *py_pool[] = {l1, "sandgate.kind=pool", "sandgate.lang=python", NULL};
    n = sgtest_docker_wait_count(py_pool, POOL, REFILL_S);
    SG_CHECK(n == POOL, NULL, "%d python pool container(s), expected %d", n, POOL);

    /* SIGTERM: the proxy removes its containers and ends cleanly */
    int st = sgtest_proxy_stop(suite.proxy);
    suite.proxy = NULL;
    SG_CHECK(st != -1, NULL, "the proxy ignored SIGTERM");
    SG_CHECK(st == 0, NULL, "the proxy ended with wait status 0x%x after SIGTERM", st);
    n = sgtest_docker_count(suite.proxy_id);
    SG_CHECK(n == 0, NULL, "%d container(s) labelled sandgate.proxy=%s remain after SIGTERM", n,
             suite.proxy_id);
    SG_CHECK(ntmpdirs > 0, NULL, "the proxy's temporary directory was never found");
    for (size_t i = 0; i < ntmpdirs; i++) {
        struct stat sb;
        SG_CHECK(stat(tmpdirs[i], &sb) != 0 && errno == ENOENT, NULL,
                 "temporary directory %s remains", tmpdirs[i]);
    }
}

#define T(f) cmocka_unit_test_teardown(f, sgtest_suite_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_python_state_persists),
        T(test_javascript_state_persists),
        T(test_state_lost_is_reported),
        T(test_commands_leave_state_alone),
        T(test_streaming),
        T(test_stream_closed_session),
        T(test_pool_refills),
        cmocka_unit_test(test_zz_no_leaks),
    };
    return cmocka_run_group_tests_name("proxy_stateful", tests, group_setup, group_teardown);
}
