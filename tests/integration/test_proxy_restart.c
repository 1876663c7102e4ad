/*
 * test_proxy_restart.c — reconciliation (docs/proxy-api.md, "Containers"):
 * a proxy that starts removes every container labelled with its own
 * SANDGATE_PROXY_ID, before it accepts requests, and no other.
 *
 * Real proxies are killed with SIGKILL (a crash as far as they can tell)
 * and restarted; the containers are watched through the Docker Engine API.
 * The proxies run with their default settings, warm pool included: what a
 * crash leaves is whatever carries the proxy's label, pool or not.
 */
#include "sgtest.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSESSIONS 2
#define REMOVAL_S 10.0 /* a closed session's container is gone within this */

/* Everything a test started, so that teardown can end it whatever failed. */
typedef struct {
    char *id_x, *id_y;
    sgtest_proxy_t *x, *y;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -1;
    f->id_x = sgtest_new_proxy_id();
    f->id_y = sgtest_new_proxy_id();
    if (f->id_x == NULL || f->id_y == NULL)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    sgtest_proxy_stop(f->x);
    sgtest_proxy_stop(f->y);
    int rc = 0;
    const char *ids[] = {f->id_x, f->id_y};
    for (size_t i = 0; i < 2; i++) {
        int removed = sgtest_docker_remove_all(ids[i]);
        if (removed > 0)
            fprintf(stderr, "teardown: force-removed %d leftover container(s) of %s\n", removed, ids[i]);
        if (sgtest_docker_count(ids[i]) != 0) {
            fprintf(stderr, "teardown: containers of %s cannot be removed\n", ids[i]);
            rc = -1;
        }
    }
    free(f->id_x);
    free(f->id_y);
    free(f);
    return rc;
}

static sgtest_proxy_t *start(const char *id)
{
    sgtest_proxy_t *p = sgtest_proxy_start(id, NULL);
    SG_CHECK(p != NULL, NULL, "proxy %s did not start", id);
    return p;
}

static char *create_session(sgtest_proxy_t *p)
{
    json_object *o = SG_CALL_JSON(p, "POST", "/sessions", "{\"lang\":\"python\",\"keep_template\":false}", 200);
    SG_CHECK(strcmp(SG_STR(o, "status"), "active") == 0, o, "status");
    char *sid = strdup(SG_STR(o, "session_id"));
    json_object_put(o);
    return sid;
}

static void expect_executes(sgtest_proxy_t *p, const char *path, const char *body, const char *stdout_want)
{
    json_object *o = SG_CALL_JSON(p, "POST", path, body, 200);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), stdout_want) == 0, o, "stdout");
    SG_CHECK(SG_BOOL(o, "success"), o, "success");
    json_object_put(o);
}

static char *container_of(const char *proxy_id, const char *sid)
{
    char *cid = sgtest_docker_session_container(proxy_id, sid);
    SG_CHECK(cid != NULL, NULL, "no single container for session %s of proxy %s", sid, proxy_id);
    return cid;
}

static void expect_running(const char *cid)
{
    long st = 0;
    json_object *c = sgtest_docker_inspect(cid, &st);
    SG_CHECK(c != NULL, NULL, "container %s: HTTP %ld", cid, st);
    json_object *state = NULL, *running = NULL;
    SG_CHECK(json_object_object_get_ex(c, "State", &state) && json_object_object_get_ex(state, "Running", &running) &&
                 json_object_get_boolean(running),
             state, "container %s is not running", cid);
    json_object_put(c);
}

/* Every container labelled with proxy_id (NULL-terminated, malloc'd). */
static char **containers_of(const char *proxy_id)
{
    char l[192];
    snprintf(l, sizeof(l), "sandgate.proxy=%s", proxy_id);
    const char *labels[] = {l, NULL};
    char **v = sgtest_docker_ids(labels);
    SG_CHECK(v != NULL, NULL, "cannot list containers from Docker");
    return v;
}

/* After a stop, docs/architecture.md: "at shutdown (SIGTERM/SIGINT) it
 * finishes the Docker calls under way and removes them all again". */
static void stop_and_expect_no_containers(sgtest_proxy_t **pp, const char *proxy_id)
{
    int st = sgtest_proxy_stop(*pp);
    *pp = NULL;
    SG_CHECK(st != -1, NULL, "proxy %s ignored SIGTERM", proxy_id);
    char **left = containers_of(proxy_id);
    size_t n = sgtest_strv_len(left);
    sgtest_strv_free(left);
    SG_CHECK(n == 0, NULL, "%zu container(s) of %s remain after it stopped", n, proxy_id);
}

static void expect_no_sessions(sgtest_proxy_t *p)
{
    json_object *o = SG_CALL_JSON(p, "GET", "/sessions", NULL, 200);
    SG_CHECK(json_object_array_length(SG_ARR(o, "sessions")) == 0, o, "a restarted proxy knows no sessions");
    json_object_put(o);
}

static void delete_session(sgtest_proxy_t *p, const char *sid)
{
    char path[256];
    snprintf(path, sizeof(path), "/sessions/%s", sid);
    sgtest_reply_t r;
    sgtest_call(p, "DELETE", path, NULL, &r);
    json_object_put(SG_EXPECT_JSON(&r, 200));
    sgtest_reply_free(&r);
}

static void test_restart_removes_own_leftovers(void **state)
{
    fixture_t *f = *state;
    f->x = start(f->id_x);
    char *sid[NSESSIONS], *cid[NSESSIONS];
    for (int i = 0; i < NSESSIONS; i++) {
        sid[i] = create_session(f->x);
        cid[i] = container_of(f->id_x, sid[i]);
    }

    /* A crash: the containers outlive their proxy. */
    sgtest_proxy_kill9(f->x);
    f->x = NULL;
    for (int i = 0; i < NSESSIONS; i++)
        expect_running(cid[i]);
    char **left = containers_of(f->id_x);
    for (int i = 0; i < NSESSIONS; i++)
        SG_CHECK(sgtest_strv_has(left, cid[i]), NULL, "%s is not labelled with %s", cid[i], f->id_x);

    /* The same id again: by the time it answers, every leftover is gone
     * (the sessions' containers and any pool container alike). */
    f->x = start(f->id_x);
    for (size_t i = 0; left[i] != NULL; i++) {
        int e = sgtest_docker_exists(left[i]);
        SG_CHECK(e == 0, NULL, "leftover container %s of the crashed proxy: exists=%d", left[i], e);
    }
    expect_no_sessions(f->x);

    /* The old sessions are unknown now. */
    char path[256];
    snprintf(path, sizeof(path), "/sessions/%s/execute", sid[0]);
    SG_CALL_ERROR(f->x, "POST", path, "{\"code\":\"print(1)\"}", 404, NULL);

    /* And it works. */
    expect_executes(f->x, "/execute", "{\"code\":\"print('after restart')\",\"lang\":\"python\"}", "after restart\n");

    stop_and_expect_no_containers(&f->x, f->id_x);
    sgtest_strv_free(left);
    for (int i = 0; i < NSESSIONS; i++) {
        free(sid[i]);
        free(cid[i]);
    }
}

static void test_reconcile_spares_other_proxies(void **state)
{
    fixture_t *f = *state;

    /* Y owns a live session. */
    f->y = start(f->id_y);
    char *sid_y = create_session(f->y);
    char *cid_y = container_of(f->id_y, sid_y);

    /* X crashes with a session of its own, and comes back. */
    f->x = start(f->id_x);
    char *sid_x = create_session(f->x);
    char *cid_x = container_of(f->id_x, sid_x);
    sgtest_proxy_kill9(f->x);
    f->x = NULL;
    expect_running(cid_x);
    char **left_x = containers_of(f->id_x);
    char **before_y = containers_of(f->id_y);
    SG_CHECK(sgtest_strv_has(before_y, cid_y), NULL, "Y's session container is not Y's");
    f->x = start(f->id_x);

    /* X removed its own leftovers, and nothing of Y's. */
    for (size_t i = 0; left_x[i] != NULL; i++)
        SG_CHECK(sgtest_docker_exists(left_x[i]) == 0, NULL, "X's leftover %s remains", left_x[i]);
    for (size_t i = 0; before_y[i] != NULL; i++)
        SG_CHECK(sgtest_docker_exists(before_y[i]) == 1, NULL, "Y's container %s was removed by X's reconcile",
                 before_y[i]);
    expect_running(cid_y);
    expect_no_sessions(f->x);

    /* Y's session is untouched and still works. */
    char path[256];
    snprintf(path, sizeof(path), "/sessions/%s/execute", sid_y);
    expect_executes(f->y, path, "{\"code\":\"print('y lives')\"}", "y lives\n");

    /* Clean up Y through its own API, then check. */
    delete_session(f->y, sid_y);
    SG_CHECK(sgtest_docker_wait_gone(cid_y, REMOVAL_S, NULL) == 0, NULL, "Y's closed session left %s for %.0f s", cid_y,
             REMOVAL_S);
    stop_and_expect_no_containers(&f->y, f->id_y);
    stop_and_expect_no_containers(&f->x, f->id_x);
    sgtest_strv_free(left_x);
    sgtest_strv_free(before_y);
    free(sid_y);
    free(cid_y);
    free(sid_x);
    free(cid_x);
}

int main(void)
{
    return SG_RUN_TESTS("proxy_restart", NULL, NULL, setup, teardown, test_restart_removes_own_leftovers,
                        test_reconcile_spares_other_proxies);
}
