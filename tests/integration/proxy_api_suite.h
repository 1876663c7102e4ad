/*
 * proxy_api_suite.h — the fixture the proxy API suites share
 * (test_proxy_api.c, test_proxy_limits.c): one proxy with small output
 * and file caps (OUTPUT_LIMIT, MAX_FILE_BYTES) so the flood tests are fast
 * and exact, and without a warm pool (SANDGATE_POOL_SIZE=0): every
 * container then belongs to exactly one session or ephemeral run of these
 * tests, so "nothing is left behind" can be checked exactly; and the
 * helpers both use. Each suite includes it once.
 */
#ifndef SANDGATE_PROXY_API_SUITE_H
#define SANDGATE_PROXY_API_SUITE_H

#include "sglibs.h"
#include "sgtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OUTPUT_LIMIT 65536
#define MAX_FILE_BYTES 65536
#define SLACK_S 10.0   /* a timed-out run must be back within its timeout + this */
#define REMOVAL_S 10.0 /* a closed session's container is gone within this */

static sgtest_suite_t suite = {.removal_s = REMOVAL_S};

/* ------------------------------------------------------------------------
 * Small helpers (test thread only)
 * ------------------------------------------------------------------------ */

static inline char *create_session(const char *lang)
{
    return sgtest_create_session(suite.proxy, lang, NULL, NULL);
}

/* timeout <= 0: the field is left out. libs NULL: the field is left out. */
static inline json_object *run_code_t(const char *sid, const char *code, const char *const *libs, int timeout,
                                      double *seconds)
{
    return sgtest_run_code(suite.proxy, sid, code, libs, timeout, seconds);
}

static inline json_object *run_code(const char *sid, const char *code)
{
    return run_code_t(sid, code, NULL, 0, NULL);
}

static inline json_object *run_cmd_t(const char *sid, const char *cmd, int timeout, double *seconds)
{
    return sgtest_run_cmd(suite.proxy, sid, cmd, timeout, seconds);
}

static inline json_object *run_cmd(const char *sid, const char *cmd)
{
    return run_cmd_t(sid, cmd, 0, NULL);
}

/* cmd run in session sid prints exactly want. */
static inline void expect_cmd_prints(const char *sid, const char *cmd, const char *want)
{
    json_object *o = run_cmd(sid, cmd);
    sgtest_expect_stdout(o, want);
    json_object_put(o);
}

static inline json_object *run_ephemeral(const char *lang, const char *code, const char *const *libs)
{
    return sgtest_run_ephemeral(suite.proxy, lang, code, libs, 0, NULL);
}

/* DELETE /sessions/{id}; then its container must go. docs/architecture.md:
 * the session is unlisted at once and its container removed in the
 * background, so this polls up to REMOVAL_S. */
static inline void close_session(const char *sid)
{
    sgtest_close_session(suite.proxy, suite.proxy_id, sid, NULL, REMOVAL_S);
}

/* The end of a test's session: closed (its container gone), its id freed. */
static inline void session_done(char *sid)
{
    close_session(sid);
    free(sid);
}

static inline json_object *session_details(const char *sid)
{
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s", sid);
    return SG_CALL_JSON(suite.proxy, "GET", path, NULL, 200);
}

static inline json_object *list_sessions(void)
{
    json_object *o = SG_CALL_JSON(suite.proxy, "GET", "/sessions", NULL, 200);
    SG_ARR(o, "sessions");
    return o;
}

static inline bool listed(const char *sid)
{
    json_object *o = list_sessions();
    bool found = sgtest_json_array_has_string(SG_ARR(o, "sessions"), sid);
    json_object_put(o);
    return found;
}

/* The container of a session of this proxy; asserts there is exactly one. */
static inline char *session_container(const char *sid)
{
    char *cid = sgtest_docker_session_container(suite.proxy_id, sid);
    if (cid == NULL)
        SG_FAIL(NULL, "no single container labelled sandgate.proxy=%s, sandgate.session=%s", suite.proxy_id, sid);
    return cid;
}

static inline json_object *inspect_session(const char *sid)
{
    char *cid = session_container(sid);
    long st = 0;
    json_object *c = sgtest_docker_inspect(cid, &st);
    if (c == NULL)
        SG_FAIL(NULL, "docker inspect %s: HTTP %ld", cid, st);
    free(cid);
    return c;
}

static inline int64_t jpath_int(json_object *o, const char *dotted)
{
    json_object *v = sgtest_jpath(o, dotted);
    if (v == NULL || !json_object_is_type(v, json_type_int))
        SG_FAIL(NULL, "%s is missing or not an integer", dotted);
    return json_object_get_int64(v);
}

/* docs/proxy-api.md: an ephemeral run's container is removed right after
 * the reply (in the background, so that the reply does not wait for it):
 * none may remain after REMOVAL_S. */
static inline void expect_no_ephemeral_left(void)
{
    char l1[192];
    snprintf(l1, sizeof(l1), "sandgate.proxy=%s", suite.proxy_id);
    const char *labels[] = {l1, "sandgate.kind=ephemeral", NULL};
    int n = sgtest_docker_wait_count(labels, 0, REMOVAL_S);
    SG_CHECK(n == 0, NULL, "%d ephemeral container(s) still exist %.0f s after the reply", n, REMOVAL_S);
}

static inline void expect_proxy_healthy(void)
{
    json_object *o = SG_CALL_JSON(suite.proxy, "GET", "/", NULL, 200);
    SG_CHECK(strcmp(SG_STR(o, "status"), "ok") == 0, o, "GET / is not ok");
    json_object_put(o);
}

/* Accepts "YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm|-hh:mm)"; returns UTC time. */
static inline bool parse_rfc3339(const char *s, time_t *out)
{
    struct tm tm = {0};
    const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (p == NULL)
        return false;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return false;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    long off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
        int hh, mm;
        if (sscanf(p + 1, "%2d:%2d", &hh, &mm) != 2)
            return false;
        off = (hh * 3600L + mm * 60L) * (*p == '+' ? 1 : -1);
        p += 6;
    } else {
        return false;
    }
    if (*p != '\0')
        return false;
    *out = timegm(&tm) - off;
    return true;
}

/* ------------------------------------------------------------------------
 * Fixtures
 * ------------------------------------------------------------------------ */

static inline int group_setup(void **state)
{
    *state = &suite;
    char out_kv[64], file_kv[64];
    snprintf(out_kv, sizeof(out_kv), "SANDGATE_OUTPUT_LIMIT=%d", OUTPUT_LIMIT);
    snprintf(file_kv, sizeof(file_kv), "SANDGATE_MAX_FILE_BYTES=%d", MAX_FILE_BYTES);
    const char *env[] = {out_kv, file_kv, "SANDGATE_POOL_SIZE=0", NULL};
    return sgtest_suite_start(&suite, env);
}

/* A loop over /proc (the images need not have ps) printing "<pid> <comm>
 * <state>" for every process; the state Z would be an unreaped zombie. */
#define PROC_LOOP                                                                                                      \
    "for d in /proc/[0-9]*; do "                                                                                       \
    "  c=$(cat $d/comm 2>/dev/null) || continue; "                                                                     \
    "  echo \"${d#/proc/} $c $(cut -d' ' -f3 $d/stat 2>/dev/null)\"; "                                                 \
    "done"
#define LIST_SLEEPS "{ " PROC_LOOP "; } | grep ' sleep ' || true"

#endif
