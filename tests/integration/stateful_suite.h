/*
 * stateful_suite.h — the fixture the stateful suites share
 * (test_proxy_stateful.c, test_proxy_streaming.c): one proxy with
 * SANDGATE_POOL_SIZE=POOL, so that default sessions come from the warm pool
 * as they do in production (their first execute may find the kernel already
 * started: "kept" instead of "new"), the temporary directories of every
 * proxy a suite started, and the helpers both use. Each suite includes it
 * once.
 */
#ifndef SANDGATE_STATEFUL_SUITE_H
#define SANDGATE_STATEFUL_SUITE_H

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
#define SLACK_S 10.0     /* a timed-out run is back within its timeout + this */
#define REMOVAL_S 10.0   /* a closed session's container is gone within this */
#define REFILL_S 30.0    /* the pool is full again within this */
#define FILL_S 90.0      /* the first fill, while other tests' work goes on */
#define POOL_TAKE_S 0.1  /* a session from the pool is created within this */
#define STREAM_GAP_S 0.8 /* first stdout event before the result event, at least */

/* The temporary directories of every proxy this file started. */
static char *tmpdirs[8];
static size_t ntmpdirs;

/* ------------------------------------------------------------------------
 * Proxy lifecycle
 * ------------------------------------------------------------------------ */

/* The proxy's private temporary directory: the one holding the log its
 * stdout goes to (sgtest_proxy_start). */
static inline void remember_tmpdir(sgtest_proxy_t *p);
static sgtest_suite_t suite = {.removal_s = REMOVAL_S, .on_start = remember_tmpdir};

static inline void remember_tmpdir(sgtest_proxy_t *p)
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

static inline int group_setup(void **state)
{
    *state = &suite;
    return sgtest_suite_start_pool(&suite, POOL);
}

static inline int group_teardown(void **state)
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

static inline void expect_state(json_object *r, const char *want)
{
    if (strcmp(SG_STR(r, "state"), want) != 0)
        SG_FAIL(r, "state \"%s\", expected \"%s\"", SG_STR(r, "state"), want);
}

/* The first execute of a session: its kernel may have been started by the
 * pool (kept) or be started for it (new). */
static inline void expect_first_state(json_object *r)
{
    const char *st = SG_STR(r, "state");
    SG_CHECK(strcmp(st, "new") == 0 || strcmp(st, "kept") == 0, r,
             "the first execute of a session must report state new or kept, not \"%s\"", st);
}

static inline void expect_stderr_has(json_object *r, const char *needle)
{
    if (strstr(SG_STR(r, "stderr"), needle) == NULL)
        SG_FAIL(r, "stderr does not mention \"%s\"", needle);
}

static inline char *create_session_t(const char *lang, double *seconds)
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

static inline char *create_session(const char *lang)
{
    return create_session_t(lang, NULL);
}

/* DELETE /sessions/{id}; its container (cid, or looked up when NULL) must be
 * gone within REMOVAL_S. */
static inline void close_session_c(const char *sid, const char *cid_known)
{
    sgtest_close_session(suite.proxy, suite.proxy_id, sid, cid_known, REMOVAL_S);
}

static inline void close_session(const char *sid)
{
    close_session_c(sid, NULL);
}

/* The end of a test's session: closed (its container gone), its id freed. */
static inline void session_done(char *sid)
{
    close_session(sid);
    free(sid);
}

/* timeout <= 0: the field is left out. */
static inline json_object *run_code_t(const char *sid, const char *code, int timeout, double *seconds)
{
    return sgtest_run_code(suite.proxy, sid, code, NULL, timeout, seconds);
}

static inline json_object *run_code(const char *sid, const char *code)
{
    return run_code_t(sid, code, 0, NULL);
}

static inline json_object *run_cmd(const char *sid, const char *cmd)
{
    return sgtest_run_cmd(suite.proxy, sid, cmd, 0, NULL);
}

/* An execution's reply r that ended with exit code `code` and the kernel in
 * `state`; r is released. */
static inline void expect_exit(json_object *r, int code, const char *state)
{
    SG_CHECK(SG_INT(r, "exit_code") == code, r, "exit code %lld, expected %d", (long long)SG_INT(r, "exit_code"), code);
    expect_state(r, state);
    json_object_put(r);
}

/* Runs code, expects success, stdout `want` (NULL: not checked) and state
 * `state` (NULL: new or kept, for a session's first execute). */
static inline void expect_run(const char *sid, const char *code, const char *want, const char *state)
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

#endif
