/*
 * test_proxy_limits.c — what contains a sandbox of sandgate-proxy, against a
 * real proxy process, the real Docker engine and the real sandbox images:
 * the output cap (a flood, output that is not UTF-8), the hardened
 * container configuration, a fork bomb and a memory bomb contained by
 * their caps (under runsc, possibly by the memory cap of the sandbox as a
 * whole: README "Runtimes"). Run on the proxy's default runtime and, as
 * integration.test_proxy_limits.runc, on runc.
 *
 * The same fixture as test_proxy_api.c (proxy_api_suite.h); the group
 * teardown checks that nothing is left.
 */
#include "proxy_api_suite.h"
#include "sgrun.h"

/* ------------------------------------------------------------------------
 * Output
 * ------------------------------------------------------------------------ */

static void test_output_flood(void **state)
{
    char *sid = create_session("python");
    double secs;
    json_object *o = run_cmd_t(sid, "yes", 30, &secs);
    SG_CHECK(SG_BOOL(o, "truncated"), o, "truncated");
    SG_CHECK(!SG_BOOL(o, "success"), o, "success");
    SG_CHECK(!SG_BOOL(o, "timed_out"), o, "the cap, not the timeout, must stop `yes`");
    SG_CHECK(strcmp(SG_STR(o, "reason"), "output_limit") == 0, o, "reason");
    size_t len = strlen(SG_STR(o, "stdout"));
    if (len != OUTPUT_LIMIT)
        SG_FAIL(NULL, "stdout is %zu bytes, the cap is %d", len, OUTPUT_LIMIT);
    SG_CHECK(strncmp(SG_STR(o, "stdout"), "y\ny\n", 4) == 0, NULL, "stdout is yes's output");
    json_object_put(o);

    /* stderr has its own cap. */
    o = run_code_t(sid, "import sys\nwhile True: sys.stderr.write('e' * 4096)", NULL, 30, NULL);
    SG_CHECK(SG_BOOL(o, "truncated"), o, "truncated");
    len = strlen(SG_STR(o, "stderr"));
    if (len != OUTPUT_LIMIT)
        SG_FAIL(NULL, "stderr is %zu bytes, the cap is %d", len, OUTPUT_LIMIT);
    json_object_put(o);

    /* The session is still usable. */
    expect_cmd_prints(sid, "echo after", "after\n");
    session_done(sid);
}

static void test_non_utf8_output(void **state)
{
    char *sid = create_session("python");
    /* Octal escapes: dash's printf has no \x. Bytes FF FE, then "ok". */
    json_object *o = run_cmd(sid, "printf '\\377\\376ok'");
    sgtest_expect_success(o);
    const char *out = SG_STR(o, "stdout");
    SG_CHECK(sgtest_utf8_valid(out, strlen(out)), o, "stdout is not valid UTF-8");
    SG_CHECK(strstr(out, "ok") != NULL, o, "stdout keeps the valid bytes");
    SG_CHECK(strstr(out, "\xef\xbf\xbd") != NULL, o, "invalid bytes become U+FFFD");
    json_object_put(o);
    session_done(sid);
}

/* ------------------------------------------------------------------------
 * Hardening
 * ------------------------------------------------------------------------ */

static const char *label(json_object *c, const char *key)
{
    json_object *labels = sgtest_jpath(c, "Config.Labels"), *v = NULL;
    if (labels == NULL || !json_object_object_get_ex(labels, key, &v))
        return NULL;
    return json_object_get_string(v);
}

/* The network interfaces a sandbox sees, from the kernel it runs on (gVisor
 * has no /sys/class/net). */
#define IFACES_CMD "python3 -c 'import socket; print(sorted(n for _, n in socket.if_nameindex()))'"

static void test_hardening(void **state)
{
    char *sid = create_session("python");
    json_object *d = session_details(sid);
    json_object *lim = SG_OBJ(d, "limits");
    json_object *c = inspect_session(sid);
    SG_ASSERT_HARDENED(c);

    /* The container's caps are the limits the session reports. */
    int64_t mem = jpath_int(c, "HostConfig.Memory");
    SG_CHECK(mem == SG_INT(lim, "memory_mb") * 1024 * 1024, d, "container Memory %lld differs from limits.memory_mb",
             (long long)mem);
    /* The runtime the session reports is its container's (README
     * "Sandboxes"); under runsc the process cap is RLIMIT_NPROC inside the
     * sandbox's kernel, the host's pids cgroup a looser backstop for the
     * sandbox kernel's own threads (proxy/docker/container.h). */
    const char *rt = SG_STR(d, "runtime");
    SG_CHECK(strcmp(rt, "runc") == 0 || strcmp(rt, "runsc") == 0, d, "runtime %s", rt);
    json_object *hrt = sgtest_jpath(c, "HostConfig.Runtime");
    SG_CHECK(hrt != NULL && strcmp(json_object_get_string(hrt), rt) == 0, c, "HostConfig.Runtime vs runtime");
    SG_CHECK(label(c, "sandgate.runtime") && strcmp(label(c, "sandgate.runtime"), rt) == 0, c,
             "label sandgate.runtime");
    int64_t pids = jpath_int(c, "HostConfig.PidsLimit");
    if (strcmp(rt, "runc") == 0) {
        SG_CHECK(pids > 0 && pids == SG_INT(lim, "pids"), d, "PidsLimit %lld vs limits.pids", (long long)pids);
    } else {
        json_object *u = sgtest_jpath(c, "HostConfig.Ulimits");
        json_object *nproc = u != NULL && json_object_array_length(u) == 1 ? json_object_array_get_idx(u, 0) : NULL;
        SG_CHECK(nproc != NULL && strcmp(SG_STR(nproc, "Name"), "nproc") == 0 &&
                     SG_INT(nproc, "Soft") == SG_INT(lim, "pids") && SG_INT(nproc, "Hard") == SG_INT(lim, "pids"),
                 c, "under runsc, Ulimits nproc must be limits.pids");
        SG_CHECK(pids == SG_INT(lim, "pids") * 12 + 128, d, "PidsLimit %lld under runsc", (long long)pids);
    }
    int64_t nano = jpath_int(c, "HostConfig.NanoCpus");
    SG_CHECK(nano > 0 && nano == (int64_t)(SG_DBL(lim, "cpus") * 1e9 + 0.5), d, "NanoCpus %lld vs limits.cpus",
             (long long)nano);

    const char *lp = label(c, "sandgate.proxy"), *ls = label(c, "sandgate.session");
    const char *ll = label(c, "sandgate.lang"), *lk = label(c, "sandgate.kind");
    const char *lc = label(c, "sandgate.created");
    SG_CHECK(lp && strcmp(lp, suite.proxy_id) == 0, c, "label sandgate.proxy");
    SG_CHECK(ls && strcmp(ls, sid) == 0, c, "label sandgate.session");
    SG_CHECK(ll && strcmp(ll, "python") == 0, c, "label sandgate.lang");
    SG_CHECK(lk && strcmp(lk, "session") == 0, c, "label sandgate.kind");
    char *end = NULL;
    long long created = lc ? strtoll(lc, &end, 10) : 0;
    SG_CHECK(lc && *lc && end && *end == '\0' && created > time(NULL) - 600 && created <= time(NULL) + 5, c,
             "label sandgate.created must be recent unix seconds");
    json_object_put(c);
    json_object_put(d);

    /* Inside: no interface but loopback, no writable root fs, no root. */
    expect_cmd_prints(sid, IFACES_CMD, "['lo']\n");
    json_object *o = run_cmd(sid, "touch /usr/sgtest-probe");
    SG_CHECK(SG_INT(o, "exit_code") != 0, o, "the root filesystem must be read-only");
    json_object_put(o);
    /* no_new_privs from prctl: gVisor's /proc/self/status has no line for it */
    o = run_cmd(sid, "grep -E '^CapEff' /proc/self/status; "
                     "python3 -c 'import ctypes; print(\"NoNewPrivs\", ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))'");
    sgtest_expect_stdout(o, "CapEff:\t0000000000000000\nNoNewPrivs 1\n");
    json_object_put(o);
    session_done(sid);
}

/* A bomb is only run where the container caps what it can take. */
static void require_caps(const char *sid, bool pids, bool memory)
{
    json_object *c = inspect_session(sid);
    if (pids && jpath_int(c, "HostConfig.PidsLimit") <= 0)
        SG_FAIL(sgtest_jpath(c, "HostConfig"), "refusing to fork-bomb a container without PidsLimit");
    if (memory && jpath_int(c, "HostConfig.Memory") <= 0)
        SG_FAIL(sgtest_jpath(c, "HostConfig"), "refusing to memory-bomb a container without Memory");
    json_object_put(c);
}

/* Counts the lines of a PROC_LOOP listing: processes named `comm` (NULL:
 * any name but the listing's own tools), and zombies. */
static void count_procs(const char *listing, const char *comm, int *named, int *zombies)
{
    static const char *const tools[] = {"sh", "cat", "cut", "grep", NULL};
    *named = *zombies = 0;
    char *copy = strdup(listing), *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char name[64] = "", state = '?';
        if (sscanf(line, "%*d %63s %c", name, &state) != 2)
            continue;
        if (state == 'Z')
            (*zombies)++;
        bool tool = false;
        for (size_t i = 0; tools[i] != NULL; i++)
            tool = tool || strcmp(name, tools[i]) == 0;
        if (comm != NULL ? strcmp(name, comm) == 0 : !tool)
            (*named)++;
    }
    free(copy);
}

/* Whether the session runs on runsc, as its details say. */
static bool on_runsc(const char *sid)
{
    json_object *d = session_details(sid);
    bool runsc = strcmp(SG_STR(d, "runtime"), "runsc") == 0;
    json_object_put(d);
    return runsc;
}

/* Under runsc a bomb may end its whole sandbox (README "Runtimes"): the
 * reply r, to the bomb or to the session's next execute, is then 502
 * sandbox_failed. The proxy stays healthy and a fresh session works. Returns
 * true when that happened (r freed, *sid freed and set to NULL). */
static bool sandbox_ended(char **sid, bool runsc, sgtest_reply_t *r)
{
    if (!runsc || r->status != 502)
        return false;
    json_object *e = SG_EXPECT_JSON(r, 502);
    sgtest_reply_free(r);
    SG_CHECK(strcmp(SG_STR(e, "code"), "sandbox_failed") == 0, e, "under runsc the bomb may end the sandbox only");
    json_object_put(e);
    expect_proxy_healthy();
    char *fresh = create_session("python");
    sgtest_expect_ok(run_code(fresh, "print(1)"), "1\n");
    session_done(fresh);
    free(*sid);
    *sid = NULL;
    return true;
}

/* Runs a bomb in session *sid; its result, or NULL when under runsc it
 * ended the whole sandbox (sandbox_ended()). */
static json_object *run_bomb(char **sid, bool runsc, const char *code, int timeout, double *secs)
{
    sgtest_reply_t r;
    sgtest_execute_reply(suite.proxy, *sid, code, timeout, &r);
    if (secs != NULL)
        *secs = r.seconds;
    if (sandbox_ended(sid, runsc, &r))
        return NULL;
    json_object *o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    return o;
}

static void test_fork_bomb(void **state)
{
    char *sid = create_session("python");
    require_caps(sid, true, true);
    /* What runs in an idle session that has executed code (an interpreter
     * kept between executes, if the proxy keeps one). */
    json_object *o = run_code(sid, "print(0)");
    sgtest_expect_success(o);
    json_object_put(o);
    o = run_cmd(sid, PROC_LOOP);
    int base_all, base_py, base_z;
    count_procs(SG_STR(o, "stdout"), NULL, &base_all, &base_z);
    count_procs(SG_STR(o, "stdout"), "python3", &base_py, &base_z);
    json_object_put(o);

    double secs;
    bool runsc = on_runsc(sid);
    o = run_bomb(&sid, runsc, "import os\nwhile True: os.fork()", 5, &secs);
    if (o == NULL)
        return; /* runsc: the sandbox's memory cap ended it (run_bomb) */
    SG_CHECK(!SG_BOOL(o, "success"), o, "a fork bomb cannot succeed");
    SG_CHECK(secs < 5 + SLACK_S, o, "reply after %.2f s", secs);
    json_object_put(o);
    expect_proxy_healthy();

    /* The session survives; nothing of the bomb is left in it, not even
     * zombies (they hold pid slots: enough of them and nothing can run).
     * Under runsc (ptrace platform) the agent's kill was seen not to
     * converge within its 2 s budget (22 processes left) and the sandbox to
     * end at the next execute: the bomb's own sandbox only. */
    sgtest_reply_t r;
    sgtest_execute_reply(suite.proxy, sid, "print(1)", 0, &r);
    if (sandbox_ended(&sid, runsc, &r))
        return;
    o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    sgtest_expect_ok(o, "1\n");
    o = run_cmd(sid, PROC_LOOP);
    int all, py, zombies;
    count_procs(SG_STR(o, "stdout"), NULL, &all, &zombies);
    count_procs(SG_STR(o, "stdout"), "python3", &py, &zombies);
    SG_CHECK(zombies == 0, o, "%d zombie(s) left by the fork bomb", zombies);
    SG_CHECK(py <= base_py && all <= base_all, o,
             "processes of the bomb are left (%d python3 of %d processes; before: %d of %d)", py, all, base_py,
             base_all);
    json_object_put(o);
    session_done(sid);
}

static void test_memory_bomb(void **state)
{
    json_object *extra = json_object_new_object();
    json_object_object_add(extra, "memory_mb", json_object_new_int(128));
    char *sid = sgtest_create_session(suite.proxy, "python", extra, NULL);
    require_caps(sid, true, true);
    json_object *c = inspect_session(sid);
    SG_CHECK(jpath_int(c, "HostConfig.Memory") == 128LL * 1024 * 1024, sgtest_jpath(c, "HostConfig"),
             "memory_mb 128 must cap the container at 128 MiB");
    json_object_put(c);

    json_object *o = run_bomb(&sid, on_runsc(sid),
                              "chunks = []\n"
                              "while True:\n"
                              "    chunks.append(bytearray(16 * 1024 * 1024))\n",
                              60, NULL);
    if (o == NULL)
        return; /* runsc: the sandbox's memory cap ended it (run_bomb) */
    SG_CHECK(!SG_BOOL(o, "success"), o, "success");
    SG_CHECK(!SG_BOOL(o, "timed_out"), o, "the memory cap, not the timeout, must end it");
    SG_CHECK(strcmp(SG_STR(o, "reason"), "out_of_memory") == 0 || strstr(SG_STR(o, "stderr"), "MemoryError") != NULL, o,
             "reason out_of_memory or a MemoryError");
    json_object_put(o);
    expect_proxy_healthy();
    session_done(sid);
}

int main(void)
{
    return SG_RUN_TESTS("proxy_limits", group_setup, sgtest_suite_group_teardown, NULL, sgtest_suite_teardown,
                        test_output_flood, test_non_utf8_output, test_hardening, test_fork_bomb, test_memory_bomb);
}
