/*
 * test_proxy_pool.c — the proxy's warm pool (docs/architecture.md): ready
 * containers per language, labelled sandgate.kind=pool, handed to new
 * sessions and ephemeral runs whose container settings are the defaults,
 * refilled in the background, removed at shutdown.
 *
 * One proxy with SANDGATE_POOL_SIZE=POOL (and a refill delay of
 * REFILL_DELAY_MS) for the group; the last test stops
 * it and checks that nothing of it is left.
 */
#include "sgtest.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POOL 3               /* three: a take can leave more than one behind */
#define REFILL_DELAY_MS 3000 /* SANDGATE_POOL_REFILL_DELAY_MS; the proxy's tick is 1 s */
#define FILL_S 60.0          /* the pool is full again within this */
#define REMOVAL_S 10.0       /* a closed session's container is gone within this */

static sgtest_suite_t suite;

static const char *const langs[] = {"python", "javascript", NULL};

static int group_setup(void **state)
{
    char pool_kv[48], delay_kv[64];
    snprintf(pool_kv, sizeof(pool_kv), "SANDGATE_POOL_SIZE=%d", POOL);
    snprintf(delay_kv, sizeof(delay_kv), "SANDGATE_POOL_REFILL_DELAY_MS=%d", REFILL_DELAY_MS);
    const char *env[] = {pool_kv, delay_kv, NULL};
    return sgtest_suite_start(&suite, env);
}

static int group_teardown(void **state)
{
    return sgtest_suite_stop(&suite, false);
}

/* Idle pool containers of a language: labelled kind=pool, running, and not
 * the container of a listed session. */
static char **idle_pool(const char *lang)
{
    return sgtest_idle_pool(suite.proxy, suite.proxy_id, lang, false, NULL);
}

/* Polls until the language's idle pool holds POOL containers. */
static char **wait_pool_full(const char *lang)
{
    double deadline = sgtest_now() + FILL_S;
    for (;;) {
        char **v = idle_pool(lang);
        size_t n = sgtest_strv_len(v);
        if (n == POOL)
            return v;
        sgtest_strv_free(v);
        if (sgtest_now() > deadline)
            SG_FAIL(NULL, "the %s pool holds %zu idle container(s), not %d, after %.0f s", lang, n, POOL, FILL_S);
        usleep(50000);
    }
}

static char *create_session(const char *body, double *seconds)
{
    sgtest_reply_t r;
    sgtest_call(suite.proxy, "POST", "/sessions", body, &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    if (seconds != NULL)
        *seconds = r.seconds;
    sgtest_reply_free(&r);
    SG_CHECK(strcmp(SG_STR(o, "status"), "active") == 0, o, "status");
    char *sid = strdup(SG_STR(o, "session_id"));
    json_object_put(o);
    return sid;
}

static void close_session(const char *sid, const char *cid)
{
    char path[256];
    snprintf(path, sizeof(path), "/sessions/%s", sid);
    sgtest_reply_t r;
    sgtest_call(suite.proxy, "DELETE", path, NULL, &r);
    json_object_put(SG_EXPECT_JSON(&r, 200));
    sgtest_reply_free(&r);
    SG_CHECK(sgtest_docker_wait_gone(cid, REMOVAL_S, NULL) == 0, NULL,
             "container %s of closed session %s still exists %.0f s after DELETE", cid, sid, REMOVAL_S);
}

static void expect_prints(const char *path, const char *body, const char *want)
{
    json_object *o = SG_CALL_JSON(suite.proxy, "POST", path, body, 200);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), want) == 0, o, "stdout");
    SG_CHECK(SG_BOOL(o, "success"), o, "success");
    json_object_put(o);
}

/* The end of a test's session: closed (its container gone), and what the
 * test held freed (the session's id and container id, the pool it saw). */
static void session_done(char *sid, char *cid, char **before)
{
    close_session(sid, cid);
    free(cid);
    free(sid);
    sgtest_strv_free(before);
}

static void test_pool_fills_hardened(void **state)
{
    for (size_t i = 0; langs[i] != NULL; i++) {
        char **ids = wait_pool_full(langs[i]);
        for (size_t j = 0; ids[j] != NULL; j++) {
            long st = 0;
            json_object *c = sgtest_docker_inspect(ids[j], &st);
            SG_CHECK(c != NULL, NULL, "inspect %s: HTTP %ld", ids[j], st);
            SG_ASSERT_HARDENED(c);
            json_object_put(c);
        }
        sgtest_strv_free(ids);
    }
    /* Pool containers are nobody's sessions. */
    char **sessions = sgtest_listed_sessions(suite.proxy);
    SG_CHECK(sgtest_strv_len(sessions) == 0, NULL, "pool containers must not be listed");
    sgtest_strv_free(sessions);
}

static void test_session_takes_from_pool(void **state)
{
    char **before = wait_pool_full("python");
    double secs;
    char *sid = create_session("{\"lang\":\"python\"}", &secs);
    char *cid = sgtest_docker_session_container(suite.proxy_id, sid);
    SG_CHECK(cid != NULL, NULL, "no container for session %s", sid);
    SG_CHECK(sgtest_strv_has(before, cid), NULL,
             "a default python session did not get a pool container (created in %.3f s)", secs);

    char path[256];
    snprintf(path, sizeof(path), "/sessions/%s/execute", sid);
    expect_prints(path, "{\"code\":\"print('pooled')\"}", "pooled\n");

    /* The pool refills in the background. */
    sgtest_strv_free(wait_pool_full("python"));
    session_done(sid, cid, before);
}

static void test_custom_limits_bypass_pool(void **state)
{
    char **before = wait_pool_full("python");
    char *sid = create_session("{\"lang\":\"python\",\"memory_mb\":256}", NULL);
    char *cid = sgtest_docker_session_container(suite.proxy_id, sid);
    SG_CHECK(cid != NULL, NULL, "no container for session %s", sid);
    SG_CHECK(!sgtest_strv_has(before, cid), NULL, "a session with its own memory_mb got a pool container");
    long st = 0;
    json_object *c = sgtest_docker_inspect(cid, &st);
    SG_CHECK(c != NULL, NULL, "inspect %s: HTTP %ld", cid, st);
    json_object *mem = sgtest_jpath(c, "HostConfig.Memory");
    SG_CHECK(mem != NULL && json_object_get_int64(mem) == 256LL * 1024 * 1024, c,
             "memory_mb 256 must cap the container at 256 MiB");
    json_object_put(c);
    session_done(sid, cid, before);
}

static void test_ephemeral_from_pool(void **state)
{
    char **before = wait_pool_full("python");
    expect_prints("/execute", "{\"code\":\"print('once')\",\"lang\":\"python\"}", "once\n");
    /* docs/proxy-api.md: the run took one of the idle containers, which is
     * removed right after the reply: within REMOVAL_S exactly one is gone. */
    size_t still = POOL;
    double t0 = sgtest_now();
    while (still == POOL && sgtest_now() - t0 < REMOVAL_S) {
        still = 0;
        for (size_t i = 0; before[i] != NULL; i++)
            still += sgtest_docker_exists(before[i]) == 1;
        if (still == POOL)
            usleep(50000);
    }
    SG_CHECK(still == POOL - 1, NULL, "%zu of %d idle pool containers remain", still, POOL);
    sgtest_strv_free(before);
}

/* The language's pool containers of this proxy, in any state, that are
 * not among known: the refill's, from the moment Docker has them. */
static size_t new_pool_containers(const char *lang, char *const *known)
{
    json_object *a = sgtest_pool_containers(suite.proxy_id, lang);
    size_t n = 0;
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *id = sgtest_jpath(json_object_array_get_idx(a, i), "Id");
        n += id != NULL && !sgtest_strv_has(known, json_object_get_string(id));
    }
    json_object_put(a);
    return n;
}

/* docs/architecture.md: after a take that leaves a ready container, the
 * replacement waits SANDGATE_POOL_REFILL_DELAY_MS (so that it does not
 * compete with the new session's first execute), counted from that take.
 * A second take while it waits must not put it off again: sessions created
 * faster than the delay would hold every refill back until the pool ran
 * dry, and the next create would start cold. Take 1 at t0, take 2 at
 * t0 + 2 s: the refill starts at the first tick after t0 + 3 s (by t0 + 4 s
 * and Docker's create); put off by take 2 it could not start before 5 s. */
static void test_refill_not_put_off_by_takes(void **state)
{
    char **before = wait_pool_full("python");
    double t0 = sgtest_now(), delay = REFILL_DELAY_MS / 1e3;
    char *sid1 = create_session("{\"lang\":\"python\"}", NULL);
    while (sgtest_now() < t0 + delay * 2 / 3)
        usleep(20000);
    SG_CHECK(new_pool_containers("python", before) == 0, NULL,
             "the refill started %.1f s after a take that left ready containers: before its delay of %.1f s",
             sgtest_now() - t0, delay);
    char *sid2 = create_session("{\"lang\":\"python\"}", NULL);
    double deadline = t0 + delay + 1.0 + 0.8, seen = 0;
    while (seen == 0 && sgtest_now() < deadline) {
        if (new_pool_containers("python", before) > 0)
            seen = sgtest_now();
        else
            usleep(20000);
    }
    SG_CHECK(seen > 0, NULL,
             "no refill %.1f s after the first of two takes (delay %.1f s, tick 1 s): the second take put it off",
             deadline - t0, delay);
    SG_CHECK(seen - t0 >= delay, NULL, "the refill started %.2f s after the first take, before its delay", seen - t0);
    char *cid1 = sgtest_docker_session_container(suite.proxy_id, sid1);
    char *cid2 = sgtest_docker_session_container(suite.proxy_id, sid2);
    SG_CHECK(cid1 != NULL && cid2 != NULL, NULL, "no container for the sessions");
    SG_CHECK(sgtest_strv_has(before, cid1) && sgtest_strv_has(before, cid2), NULL,
             "the two sessions did not both come from the pool");
    close_session(sid2, cid2);
    free(cid2);
    free(sid2);
    session_done(sid1, cid1, before);
}

/* Last: SIGTERM; docs/architecture.md, "at shutdown (SIGTERM/SIGINT) it
 * finishes the Docker calls under way and removes them all again". */
static void test_shutdown_removes_everything(void **state)
{
    /* A live session and a full pool at the moment of the stop. */
    char *sid = create_session("{\"lang\":\"python\"}", NULL);
    sgtest_strv_free(wait_pool_full("python"));
    int st = sgtest_proxy_stop(suite.proxy);
    suite.proxy = NULL;
    SG_CHECK(st != -1, NULL, "the proxy ignored SIGTERM");
    int n = sgtest_docker_count(suite.proxy_id);
    SG_CHECK(n == 0, NULL, "%d container(s) of %s remain after SIGTERM", n, suite.proxy_id);
    free(sid);
}

int main(void)
{
    return SG_RUN_TESTS("proxy_pool", group_setup, group_teardown, NULL, NULL, test_pool_fills_hardened,
                        test_session_takes_from_pool, test_custom_limits_bypass_pool, test_ephemeral_from_pool,
                        test_refill_not_put_off_by_takes, test_shutdown_removes_everything);
}
