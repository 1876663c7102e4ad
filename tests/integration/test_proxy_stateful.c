/*
 * test_proxy_stateful.c — stateful sessions (docs/proxy-api.md, "state" in
 * the execution result; proxy/agent/agent_proto.h, "Kernels"), the warm pool's
 * refill, and that nothing is left. Streamed output: test_proxy_streaming.c.
 *
 * One proxy serves the whole group (stateful_suite.h). Every test closes
 * the sessions it opens; the last test closes whatever is listed, stops the
 * proxy with SIGTERM and checks that no container of it, and none of its
 * temporary files, remain.
 */
#include "stateful_suite.h"

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
    expect_run(sid, "import math\ndef sq(v):\n    return v * v\nclass Box:\n    n = 3\n", "", "kept");
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
    expect_exit(run_code(sid, "x += 1\nraise SystemExit(5)"), 5, "kept");

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
    json_object *r = run_code_t(sid, "console.log('early'); setTimeout(() => console.log(\"late\"), 200)", 0, &secs);
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
    expect_exit(run_code(sid, "process.exit(4)"), 4, "lost");
    r = run_code(sid, "console.log(typeof b)");
    sgtest_expect_success(r);
    sgtest_expect_stdout(r, "undefined\n");
    expect_state(r, "new");
    json_object_put(r);
    session_done(sid);
}

/* A run that has to start the interpreter is not charged for the start
 * (agent_proto.h, "Kernels": the kernel's "ready"): after a lost kernel,
 * a run given 0.2 s still runs, though a python kernel's start alone takes
 * ~750 ms under runsc (~35 ms under runc, where this only checks that the
 * run works). */
static void test_kernel_start_not_charged(void **state)
{
    (void)state;
    char *sid = create_session("python");
    char path[160];
    sgtest_reply_t r;

    expect_run(sid, "y = 1", "", NULL);
    expect_exit(run_code(sid, "import os; os._exit(3)"), 3, "lost");
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    sgtest_call(suite.proxy, "POST", path, "{\"code\": \"print(6 * 7)\", \"timeout\": 0.2}", &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    sgtest_expect_success(o);
    sgtest_expect_stdout(o, "42\n");
    expect_state(o, "new");
    fprintf(stderr, "the run that started a kernel, given 0.2 s, took %.2f s (%s)\n", SG_DBL(o, "wall_time"),
            SG_STR(o, "runtime"));
    if (strcmp(SG_STR(o, "runtime"), "runsc") == 0)
        SG_CHECK(SG_DBL(o, "wall_time") > 0.2, o, "under runsc the kernel's start must take longer than the timeout");
    json_object_put(o);

    /* once started, the timeout is the run's again */
    double secs = 0;
    o = run_code_t(sid, "while True: pass", 1, &secs);
    SG_CHECK(SG_BOOL(o, "timed_out"), o, "an endless loop with timeout 1 must time out");
    SG_CHECK(secs < 1.0 + SLACK_S, o, "a 1 s timeout answered after %.1f s", secs);
    expect_state(o, "lost");
    json_object_put(o);
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
    expect_exit(run_cmd(sid, "echo oops >&2; exit 7"), 7, "none");
    expect_run(sid, "print(x)", "5\n", "kept");
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
        SG_CHECK(n < POOL, NULL, "%zu idle python pool containers, more than SANDGATE_POOL_SIZE=%d", n, POOL);
        if (sgtest_now() - t0 > timeout_s)
            SG_FAIL(NULL, "the python pool holds %zu ready idle container(s), not %d, after %.0f s", n, POOL,
                    timeout_s);
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
                     "round %d, session %d from the pool took %.3f s to create (limit %.3f s)", round, i, secs,
                     POOL_TAKE_S);
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
            SG_CHECK(!sgtest_strv_has(ready, cids[i]), NULL, "container %.12s of session %s is in the pool again",
                     cids[i], sids[i]);
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
            SG_CHECK(strcmp(sids[i], sids[j]) != 0, NULL, "session id %s handed out twice", sids[i]);
            SG_CHECK(strcmp(cids[i], cids[j]) != 0, NULL, "container %.12s handed out twice", cids[i]);
        }
    for (size_t i = 0; i < nused; i++) {
        SG_CHECK(sgtest_docker_exists(cids[i]) == 0, NULL, "container %.12s still exists", cids[i]);
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
    SG_CHECK(n == 0, NULL, "%d container(s) labelled sandgate.proxy=%s remain after SIGTERM", n, suite.proxy_id);
    SG_CHECK(ntmpdirs > 0, NULL, "the proxy's temporary directory was never found");
    for (size_t i = 0; i < ntmpdirs; i++) {
        struct stat sb;
        SG_CHECK(stat(tmpdirs[i], &sb) != 0 && errno == ENOENT, NULL, "temporary directory %s remains", tmpdirs[i]);
    }
}

#define T(f) cmocka_unit_test_teardown(f, sgtest_suite_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_python_state_persists),      T(test_javascript_state_persists), T(test_state_lost_is_reported),
        T(test_commands_leave_state_alone), T(test_kernel_start_not_charged),  T(test_pool_refills),
        cmocka_unit_test(test_zz_no_leaks),
    };
    return cmocka_run_group_tests_name("proxy_stateful", tests, group_setup, group_teardown);
}
