/*
 * test_proxy_langs.c — the languages of seed 002 beyond python and
 * javascript (cpp, go, java, ruby) against a real proxy process, the real
 * Docker engine and the real images deploy/images/<lang>/ build.
 *
 * For each language: a session (two executes, a shell command), an ephemeral
 * execute, a runtime error and an endless loop cut by the timeout; for the
 * compiled ones (cpp, go, java) also a compile error, which must come back
 * as reason "setup_failed", stage "compile", with the compiler's message in
 * stderr; and "libraries", which they do not take (400).
 *
 * One proxy for the group, without a warm pool (SANDGATE_POOL_SIZE=0), so
 * that every container belongs to one session or ephemeral run of these
 * tests; the teardown checks that none is left once the proxy stopped.
 * Compiling is part of an execution's timeout: go and java take seconds on
 * a busy machine, so executes here ask for COMPILE_TIMEOUT.
 */
#include "sgtest.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMPILE_TIMEOUT 60 /* seconds: an execute that compiles */
#define LOOP_TIMEOUT 3     /* seconds: the endless loop's execute */
#define SLACK_S 10.0       /* a timed-out run is back within its timeout + this */
#define REMOVAL_S 10.0     /* a closed session's container is gone within this */

static sgtest_suite_t suite = {.removal_s = REMOVAL_S};

typedef struct {
    const char *name;
    int compiled;
    const char *hello;         /* prints exactly "Hello, World!\n" */
    const char *second;        /* prints exactly SECOND_OUT */
    const char *compile_error; /* compiled languages: does not compile */
    const char *compiler_says; /* ... and the compiler's stderr contains this */
    const char *runtime_error; /* compiles, then fails at run time */
    const char *runtime_says;  /* ... and stderr contains this ("" if nothing) */
    const char *loop;          /* prints "looping\n", then never ends */
} lang_case_t;

#define SECOND_OUT                                                                                                     \
    "second 42 \xc3\xbcnic\xc3\xb8"                                                                                    \
    "de \xe2\x9c\x93\n" /* "second 42 ünicøde ✓" */

static const lang_case_t cpp = {
    "cpp",
    1,
    "#include <iostream>\nint main() {\n    std::cout << \"Hello, World!\" << std::endl;\n    return 0;\n}\n",
    "#include <cstdio>\n#include <vector>\nint main() {\n    std::vector<int> v{40, 2};\n"
    "    std::printf(\"second %d \xc3\xbcnic\xc3\xb8"
    "de \xe2\x9c\x93\\n\", v[0] + v[1]);\n}\n",
    "#include <iostream>\nint main() {\n    std::cout << undeclared_thing << std::endl;\n}\n",
    "'undeclared_thing' was not declared",
    "#include <cstdio>\nint main() {\n    std::fprintf(stderr, \"failing\\n\");\n    return 3;\n}\n",
    "failing",
    "#include <cstdio>\nint main() {\n    std::printf(\"looping\\n\");\n    for (volatile unsigned long i = 0;; i++) "
    "{}\n}\n",
};

static const lang_case_t go = {
    "go",
    1,
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"Hello, World!\")\n}\n",
    "package main\n\nimport (\n\t\"fmt\"\n\t\"strings\"\n)\n\nfunc main() {\n"
    "\tfmt.Printf(\"%s %d \xc3\xbcnic\xc3\xb8"
    "de \xe2\x9c\x93\\n\", strings.ToLower(\"SECOND\"), 40+2)\n}\n",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(undeclaredThing)\n}\n",
    "undefined: undeclaredThing",
    "package main\n\nfunc main() {\n\tvar m map[string]int\n\tm[\"x\"] = 1\n}\n",
    "panic: assignment to entry in nil map",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"looping\")\n\tfor {\n\t}\n}\n",
};

static const lang_case_t java = {
    "java",
    1,
    "public class Main {\n    public static void main(String[] args) {\n"
    "        System.out.println(\"Hello, World!\");\n    }\n}\n",
    "import java.util.List;\n\npublic class Main {\n    public static void main(String[] args) {\n"
    "        int n = List.of(40, 2).stream().mapToInt(Integer::intValue).sum();\n"
    "        System.out.println(\"second \" + n + \" \xc3\xbcnic\xc3\xb8"
    "de \xe2\x9c\x93\");\n    }\n}\n",
    "public class Main {\n    public static void main(String[] args) {\n"
    "        System.out.println(undeclaredThing);\n    }\n}\n",
    "cannot find symbol",
    "public class Main {\n    public static void main(String[] args) {\n"
    "        throw new IllegalStateException(\"failing on purpose\");\n    }\n}\n",
    "java.lang.IllegalStateException: failing on purpose",
    "public class Main {\n    public static void main(String[] args) {\n"
    "        System.out.println(\"looping\");\n        long i = 0;\n        while (true) { i++; }\n    }\n}\n",
};

static const lang_case_t ruby = {
    "ruby",
    0,
    "puts \"Hello, World!\"\n",
    "n = [40, 2].sum\nputs \"second #{n} \xc3\xbcnic\xc3\xb8"
    "de \xe2\x9c\x93\"\n",
    NULL,
    NULL,
    "raise ArgumentError, \"failing on purpose\"\n",
    "failing on purpose (ArgumentError)",
    "puts \"looping\"\nloop { }\n",
};

/* ------------------------------------------------------------------------
 * Helpers (test thread only)
 * ------------------------------------------------------------------------ */

static void expect_str(json_object *r, const char *key, const char *want)
{
    if (strcmp(SG_STR(r, key), want) != 0)
        SG_FAIL(r, "%s differs: expected \"%s\"", key, want);
}

static void expect_contains(json_object *r, const char *key, const char *want)
{
    if (strstr(SG_STR(r, key), want) == NULL)
        SG_FAIL(r, "%s does not contain \"%s\"", key, want);
}

/* A clean run: success, stage run, the exact stdout, nothing on stderr. */
static void expect_clean(json_object *r, const char *want_stdout)
{
    expect_str(r, "stdout", want_stdout);
    expect_str(r, "stderr", "");
    SG_CHECK(SG_BOOL(r, "success") && SG_INT(r, "exit_code") == 0, r, "expected a successful run");
    expect_str(r, "reason", "exited");
    expect_str(r, "stage", "run");
    /* one-shot languages: no interpreter state */
    expect_str(r, "state", "none");
}

static char *create_session(const char *lang)
{
    json_object *o = NULL;
    char *id = sgtest_create_session(suite.proxy, lang, NULL, &o); /* a session_id, status "active" */
    expect_str(o, "lang", lang);
    expect_str(o, "image", sgtest_image(lang));
    json_object_put(o);
    return id;
}

static json_object *run_code(const char *sid, const char *code, int timeout, double *seconds)
{
    return sgtest_run_code(suite.proxy, sid, code, NULL, timeout, seconds);
}

static json_object *run_cmd(const char *sid, const char *cmd)
{
    return sgtest_run_cmd(suite.proxy, sid, cmd, 30, NULL);
}

static json_object *run_ephemeral(const char *lang, const char *code, int timeout, double *seconds)
{
    return sgtest_run_ephemeral(suite.proxy, lang, code, NULL, timeout, seconds);
}

static void close_session(const char *sid)
{
    sgtest_close_session(suite.proxy, suite.proxy_id, sid, NULL, REMOVAL_S);
}

/* The end of a test's session: closed (its container gone), its id freed. */
static void session_done(char *sid)
{
    close_session(sid);
    free(sid);
}

static void expect_no_ephemeral_left(void)
{
    char l1[192];
    snprintf(l1, sizeof(l1), "sandgate.proxy=%s", suite.proxy_id);
    const char *labels[] = {l1, "sandgate.kind=ephemeral", NULL};
    int n = sgtest_docker_wait_count(labels, 0, REMOVAL_S);
    SG_CHECK(n == 0, NULL, "%d ephemeral container(s) still exist %.0f s after the reply", n, REMOVAL_S);
}

/* ------------------------------------------------------------------------
 * The tests, per language
 * ------------------------------------------------------------------------ */

/* A new session of L that has run L's hello world cleanly. */
static char *session_said_hello(const lang_case_t *L)
{
    char *sid = create_session(L->name);
    json_object *o = run_code(sid, L->hello, COMPILE_TIMEOUT, NULL);
    expect_clean(o, "Hello, World!\n");
    json_object_put(o);
    return sid;
}

/* Session: create, execute twice, a shell command, close. */
static void do_session(const lang_case_t *L)
{
    char *sid = session_said_hello(L);
    json_object *o;

    o = run_code(sid, L->second, COMPILE_TIMEOUT, NULL);
    expect_clean(o, SECOND_OUT);
    json_object_put(o);

    o = run_cmd(sid, "id -u");
    expect_str(o, "stdout", "1000\n");
    SG_CHECK(SG_BOOL(o, "success"), o, "id -u failed");
    json_object_put(o);

    /* the work dir is writable, the root is not */
    o = run_cmd(sid, "echo x > /sandbox/f && cat /sandbox/f && ! touch /usr/x 2>/dev/null");
    expect_str(o, "stdout", "x\n");
    SG_CHECK(SG_BOOL(o, "success"), o, "/sandbox must be writable and / read-only");
    json_object_put(o);

    session_done(sid);
}

static void do_ephemeral(const lang_case_t *L)
{
    json_object *o = run_ephemeral(L->name, L->hello, COMPILE_TIMEOUT, NULL);
    expect_clean(o, "Hello, World!\n");
    json_object_put(o);
    expect_no_ephemeral_left();
}

/* An ephemeral run's result o (put here) ended with reason in stage, its
 * stderr holding stderr_has; no ephemeral container is left. */
static void expect_ended(json_object *o, const char *reason, const char *stage, const char *stderr_has)
{
    expect_str(o, "reason", reason);
    expect_str(o, "stage", stage);
    expect_contains(o, "stderr", stderr_has);
    json_object_put(o);
    expect_no_ephemeral_left();
}

/* A compile error ends the execution in stage "compile" with the compiler's
 * message; the program does not run, and the session stays usable. */
static void do_compile_error(const lang_case_t *L)
{
    char *sid = session_said_hello(L);
    json_object *o;

    o = run_code(sid, L->compile_error, COMPILE_TIMEOUT, NULL);
    SG_CHECK(!SG_BOOL(o, "success"), o, "a compile error is not a success");
    expect_str(o, "reason", "setup_failed");
    expect_str(o, "stage", "compile");
    SG_CHECK(!SG_BOOL(o, "timed_out"), o, "timed_out");
    SG_CHECK(SG_INT(o, "exit_code") != 0, o, "exit_code of the compiler");
    expect_contains(o, "stderr", L->compiler_says);
    /* the binary of the previous execute must not run in its place */
    expect_str(o, "stdout", "");
    json_object_put(o);

    o = run_code(sid, L->second, COMPILE_TIMEOUT, NULL);
    expect_clean(o, SECOND_OUT);
    json_object_put(o);
    session_done(sid);

    expect_ended(run_ephemeral(L->name, L->compile_error, COMPILE_TIMEOUT, NULL), "setup_failed", "compile",
                 L->compiler_says);
}

static void do_runtime_error(const lang_case_t *L)
{
    json_object *o = run_ephemeral(L->name, L->runtime_error, COMPILE_TIMEOUT, NULL);
    SG_CHECK(SG_INT(o, "exit_code") != 0, o, "a runtime error exits non-zero");
    SG_CHECK(!SG_BOOL(o, "success"), o, "success");
    expect_ended(o, "exited", "run", L->runtime_says);
}

/* An endless loop: timed out in stage "run", back within its timeout. The
 * timeout covers the compile too: when the compile or the start alone used
 * it up (a busy machine; a JVM under gVisor), the loop did not get to
 * print, so that attempt proves nothing and is repeated once with a longer
 * timeout. */
static void do_timeout(const lang_case_t *L)
{
    char *sid = create_session(L->name);
    int timeouts[] = {LOOP_TIMEOUT, 4 * LOOP_TIMEOUT};
    json_object *o = NULL;
    double secs = 0;
    int t = 0;
    for (int i = 0; i < 2; i++) {
        t = timeouts[i];
        o = run_code(sid, L->loop, t, &secs);
        /* the program must have got as far as its print: under gVisor a
         * JVM's start alone can take the short timeout */
        if ((strcmp(SG_STR(o, "stage"), "run") == 0 && strcmp(SG_STR(o, "stdout"), "looping\n") == 0) || i == 1)
            break;
        fprintf(stderr,
                "note: %s: the compile or the start alone used the %d s timeout (stage %s, %.1f s); "
                "again with %d s\n",
                L->name, t, SG_STR(o, "stage"), secs, timeouts[1]);
        json_object_put(o);
    }
    SG_CHECK(SG_BOOL(o, "timed_out"), o, "the loop must time out");
    expect_str(o, "reason", "timeout");
    expect_str(o, "stage", "run");
    SG_CHECK(!SG_BOOL(o, "success"), o, "success");
    expect_str(o, "stdout", "looping\n");
    SG_CHECK(secs >= t - 0.5 && secs <= t + SLACK_S, o, "a %d s timeout came back after %.2f s", t, secs);
    json_object_put(o);

    /* the session lives on */
    o = run_code(sid, L->hello, COMPILE_TIMEOUT, NULL);
    expect_clean(o, "Hello, World!\n");
    json_object_put(o);
    session_done(sid);
}

static void expect_400(const char *path, json_object *body, const char *detail)
{
    sgtest_reply_t r;
    sgtest_call_json(suite.proxy, "POST", path, body, 0, &r);
    json_object_put(body);
    json_object *o = SG_EXPECT_ERROR(&r, 400, "bad_field");
    sgtest_reply_free(&r);
    expect_contains(o, "detail", detail);
    json_object_put(o);
}

/* Compiled languages take no "libraries": 400 on both routes, before any
 * container is made; an empty list is no libraries. */
static void do_libraries_refused(const lang_case_t *L)
{
    char detail[128];
    pathf(detail, sizeof(detail), "libraries are not supported for %s", L->name);
    int before = sgtest_docker_count(suite.proxy_id);

    json_object *b = json_object_new_object();
    json_object_object_add(b, "code", json_object_new_string(L->hello));
    json_object_object_add(b, "lang", json_object_new_string(L->name));
    json_object *libs = json_object_new_array();
    json_object_array_add(libs, json_object_new_string("boost"));
    json_object_object_add(b, "libraries", libs);
    expect_400("/execute", b, detail);
    SG_CHECK(sgtest_docker_count(suite.proxy_id) == before, NULL, "a refused ephemeral execute made a container");

    char *sid = create_session(L->name);
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    b = json_object_new_object();
    json_object_object_add(b, "code", json_object_new_string(L->hello));
    libs = json_object_new_array();
    json_object_array_add(libs, json_object_new_string("fmt"));
    json_object_object_add(b, "libraries", libs);
    expect_400(path, b, detail);

    b = json_object_new_object();
    json_object_object_add(b, "code", json_object_new_string(L->hello));
    json_object_object_add(b, "libraries", json_object_new_array());
    json_object_object_add(b, "timeout", json_object_new_int(COMPILE_TIMEOUT));
    json_object *o = sgtest_post_result(suite.proxy, path, b, NULL);
    expect_clean(o, "Hello, World!\n");
    json_object_put(o);
    session_done(sid);
}

/* test_<L>_<what>: do_<what> for the language L. */
#define LANG_TEST(L, what)                                                                                             \
    static void test_##L##_##what(void **state)                                                                        \
    {                                                                                                                  \
        do_##what(&L);                                                                                                 \
    }
#define LANG_TESTS(L) LANG_TEST(L, session) LANG_TEST(L, ephemeral) LANG_TEST(L, runtime_error) LANG_TEST(L, timeout)
#define COMPILED_TESTS(L) LANG_TEST(L, compile_error) LANG_TEST(L, libraries_refused)

LANG_TESTS(cpp)
LANG_TESTS(go)
LANG_TESTS(java)
LANG_TESTS(ruby)
COMPILED_TESTS(cpp)
COMPILED_TESTS(go)
COMPILED_TESTS(java)

/* The JVM fits the default 512 MiB sandbox with room for a real heap. */
static void test_java_heap(void **state)
{
    json_object *o = run_ephemeral("java",
                                   "public class Main {\n    public static void main(String[] args) {\n"
                                   "        byte[] b = new byte[150 << 20];\n        b[b.length - 1] = 1;\n"
                                   "        System.out.println(b.length >> 20);\n    }\n}\n",
                                   COMPILE_TIMEOUT, NULL);
    expect_clean(o, "150\n");
    json_object_put(o);
    expect_no_ephemeral_left();
}

/* ------------------------------------------------------------------------
 * Fixtures
 * ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
    *state = &suite;
    const char *env[] = {"SANDGATE_POOL_SIZE=0", NULL};
    return sgtest_suite_start(&suite, env);
}

int main(void)
{
    return SG_RUN_TESTS("proxy_langs", group_setup, sgtest_suite_group_teardown, NULL, sgtest_suite_teardown,
                        test_cpp_session, test_cpp_ephemeral, test_cpp_compile_error, test_cpp_runtime_error,
                        test_cpp_timeout, test_cpp_libraries_refused, test_go_session, test_go_ephemeral,
                        test_go_compile_error, test_go_runtime_error, test_go_timeout, test_go_libraries_refused,
                        test_java_session, test_java_ephemeral, test_java_compile_error, test_java_runtime_error,
                        test_java_timeout, test_java_libraries_refused, test_java_heap, test_ruby_session,
                        test_ruby_ephemeral, test_ruby_runtime_error, test_ruby_timeout);
}
