/*
 * test_agent_kernels.c — the real sandgate-agent binary in stateful mode,
 * run as an ordinary child process (tests/support/sgunit.h), with the real
 * kernels of deploy/images/{python,javascript} on this machine's python3
 * and node (both required: a missing one fails the tests). They are found
 * in SANDGATE_KERNEL_DIR (the directory holding python/kernel.py and
 * javascript/kernel.js), else in deploy/images of the source tree this file
 * was compiled from. One-shot mode: test_agent_local.c.
 */
#include "sgunit.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- kernels (stateful mode) ----------------------------------------- */

#define KERNEL_TIMEOUT_MS 8000

static const char *kernel_dir(void)
{
    static char dir[PATH_MAX];
    const char *env = getenv("SANDGATE_KERNEL_DIR");
    char *p;

    if (env != NULL && env[0] != '\0')
        return env;
    /* __FILE__ is <source>/tests/unit/test_agent_kernels.c */
    snprintf(dir, sizeof(dir), "%s", __FILE__);
    p = strstr(dir, "tests/unit/test_agent_kernels.c");
    assert_non_null(p);
    strcpy(p, "deploy/images");
    return dir;
}

/* The kernel_cmd of a language, as the proxy's language table has it but
 * with the kernel file taken from the source tree. */
static const char *kernel_cmd(const char *interp, const char *file)
{
    static char cmd[2 * PATH_MAX];
    char path[PATH_MAX];

    if (snprintf(path, sizeof(path), "%s/%s", kernel_dir(), file) >= (int)sizeof(path) || access(path, R_OK) != 0)
        fail_msg("kernel %s not found; set SANDGATE_KERNEL_DIR", path);
    snprintf(cmd, sizeof(cmd), "exec %s '%s'", interp, path);
    return cmd;
}

#define PY kernel_cmd("python3 -u", "python/kernel.py")
#define JS kernel_cmd("node", "javascript/kernel.js")

/* Run code in the kernel `kernel`; expect it to run to its end with `code`
 * and the kernel in `state`. */
static void kexec(sgunit_agent_t *a, const char *kernel, const char *src, sgunit_result_t *res)
{
    sgunit_exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "", "", "", "", kernel, src, res);
}

static void kexpect(sgunit_agent_t *a, const char *kernel, const char *src, int32_t code, uint32_t state,
                    const char *out)
{
    sgunit_result_t res;

    kexec(a, kernel, src, &res);
    if (res.reason != SG_AGENT_REASON_EXITED || res.code != code || res.state != state)
        fprintf(stderr, "code %s: reason %u code %d state %u\nstdout: %s\nstderr: %s\n", src, res.reason, res.code,
                res.state, sgunit_out_str(&res, 1), sgunit_out_str(&res, 2));
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(code), .sig = SGUNIT_IS(0),
                  .state = SGUNIT_IS(state), .stage = "run");
    if (out != NULL)
        assert_string_equal(sgunit_out_str(&res, 1), out);
    sgunit_free_result(&res);
}

/* Dead: gone, or a zombie that only its (living) parent can reap. */
static void assert_dead(pid_t pid)
{
    char path[64], buf[512], *p;
    FILE *f;

    assert_true(pid > 1);
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return;
    p = fgets(buf, sizeof(buf), f);
    fclose(f);
    if (p == NULL)
        return;
    p = strrchr(buf, ')');
    assert_non_null(p);
    assert_int_equal(p[2], 'Z');
}

static void assert_alive(pid_t pid)
{
    char path[64], buf[512], *p;
    FILE *f;

    assert_true(pid > 1);
    assert_int_equal(kill(pid, 0), 0);
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    assert_non_null(f);
    p = fgets(buf, sizeof(buf), f);
    fclose(f);
    assert_non_null(p);
    p = strrchr(buf, ')');
    assert_non_null(p);
    assert_true(p[2] != 'Z');
}

static void test_py_state_kept(void **state)
{
    sgunit_agent_t *a = *state;
    size_t n = 1 << 20, i;
    char *big = malloc(n + 64);

    kexpect(a, PY, "x = 41", 0, SG_AGENT_STATE_NEW, "");
    kexpect(a, PY, "print(x + 1)", 0, SG_AGENT_STATE_KEPT, "42\n");
    kexpect(a, PY, "import math", 0, SG_AGENT_STATE_KEPT, "");
    kexpect(a, PY, "print(math.factorial(5), __name__)", 0, SG_AGENT_STATE_KEPT, "120 __main__\n");
    kexpect(a, PY, "import os\nprint(os.getcwd() == os.environ['SANDGATE_WORKDIR'])", 0, SG_AGENT_STATE_KEPT, "True\n");
    /* A request far larger than a pipe buffer. */
    assert_non_null(big);
    strcpy(big, "s = '");
    for (i = 5; i < n + 5; i++)
        big[i] = 'a';
    strcpy(big + i, "'\nprint(len(s))");
    kexpect(a, PY, big, 0, SG_AGENT_STATE_KEPT, "1048576\n");
    free(big);
}

static void test_py_exception(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;

    kexpect(a, PY, "x = 1", 0, SG_AGENT_STATE_NEW, "");
    kexec(a, PY, "print('before')\nprint(undefined_variable)", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(1),
                  .state = SGUNIT_IS(SG_AGENT_STATE_KEPT), .out = "before\n");
    assert_non_null(strstr(sgunit_out_str(&res, 2), "NameError: name 'undefined_variable' is not defined"));
    assert_non_null(strstr(sgunit_out_str(&res, 2), "print(undefined_variable)")); /* the source line */
    assert_null(strstr(sgunit_out_str(&res, 2), "kernel.py"));
    sgunit_free_result(&res);

    /* A traceback through code of an earlier EXEC shows its lines too. */
    kexpect(a, PY, "def f():\n    return 1 / 0\n", 0, SG_AGENT_STATE_KEPT, "");
    kexec(a, PY, "f()", &res);
    SGUNIT_EXPECT(&res, .code = SGUNIT_IS(1), .state = SGUNIT_IS(SG_AGENT_STATE_KEPT));
    assert_non_null(strstr(sgunit_out_str(&res, 2), "return 1 / 0"));
    assert_non_null(strstr(sgunit_out_str(&res, 2), "ZeroDivisionError"));
    assert_null(strstr(sgunit_out_str(&res, 2), "kernel.py"));
    sgunit_free_result(&res);

    kexec(a, PY, "if", &res);
    SGUNIT_EXPECT(&res, .code = SGUNIT_IS(1), .state = SGUNIT_IS(SG_AGENT_STATE_KEPT));
    assert_non_null(strstr(sgunit_out_str(&res, 2), "SyntaxError"));
    assert_null(strstr(sgunit_out_str(&res, 2), "kernel.py"));
    sgunit_free_result(&res);

    kexpect(a, PY, "print(x)", 0, SG_AGENT_STATE_KEPT, "1\n");
}

static void test_py_sys_exit(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;

    kexpect(a, PY, "y = 5\nimport sys\nsys.exit(3)\nprint('not reached')", 3, SG_AGENT_STATE_NEW, "");
    kexpect(a, PY, "print(y)", 0, SG_AGENT_STATE_KEPT, "5\n");
    kexpect(a, PY, "sys.exit()", 0, SG_AGENT_STATE_KEPT, "");
    kexec(a, PY, "sys.exit('bye')", &res);
    SGUNIT_EXPECT(&res, .code = SGUNIT_IS(1), .state = SGUNIT_IS(SG_AGENT_STATE_KEPT), .err = "bye\n");
    sgunit_free_result(&res);
    kexpect(a, PY, "print(y)", 0, SG_AGENT_STATE_KEPT, "5\n");
}

static void test_py_timeout_loses_state(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;

    kexpect(a, PY, "x = 1", 0, SG_AGENT_STATE_NEW, "");
    sgunit_exec_full(a, 500, 1 << 20, "", "", "", "", PY, "print('spinning')\nwhile True: pass", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_TIMEOUT), .state = SGUNIT_IS(SG_AGENT_STATE_LOST),
                  .code = SGUNIT_IS(-1), .sig = SGUNIT_IS(SIGKILL), .out = "spinning\n", .wall_below = 3);
    assert_true(res.duration_us >= 500000);
    sgunit_free_result(&res);

    kexec(a, PY, "print(x)", &res);
    SGUNIT_EXPECT(&res, .code = SGUNIT_IS(1), .state = SGUNIT_IS(SG_AGENT_STATE_NEW));
    assert_non_null(strstr(sgunit_out_str(&res, 2), "NameError: name 'x' is not defined"));
    sgunit_free_result(&res);
    sgunit_ping(a);
}

static void test_py_kernel_ends(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;

    kexpect(a, PY, "x = 1", 0, SG_AGENT_STATE_NEW, "");
    kexpect(a, PY, "print('bye')\nimport os\nos._exit(5)", 5, SG_AGENT_STATE_LOST, "bye\n");
    kexpect(a, PY, "print('x' in globals())", 0, SG_AGENT_STATE_NEW, "False\n");

    kexec(a, PY, "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_KILLED), .code = SGUNIT_IS(-1), .sig = SGUNIT_IS(SIGTERM),
                  .state = SGUNIT_IS(SG_AGENT_STATE_LOST));
    sgunit_free_result(&res);
    kexpect(a, PY, "print(1)", 0, SG_AGENT_STATE_NEW, "1\n");
}

static void test_py_output_cap(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;

    kexpect(a, PY, "x = 1", 0, SG_AGENT_STATE_NEW, "");
    sgunit_exec_full(a, KERNEL_TIMEOUT_MS, 1000, "", "", "", "", PY, "while True: print('y')", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_OUTPUT_LIMIT), .state = SGUNIT_IS(SG_AGENT_STATE_LOST),
                  .flags = SGUNIT_IS(SG_AGENT_EXIT_STDOUT_TRUNCATED));
    assert_int_equal(res.out_len[1], 1000);
    assert_memory_equal(res.out[1], "y\ny\n", 4);
    sgunit_free_result(&res);
    kexpect(a, PY, "print('x' in globals())", 0, SG_AGENT_STATE_NEW, "False\n");
}

/* Processes started by the code die with the EXEC; the kernel lives on. */
static void test_py_children_killed(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;
    pid_t kernel, sub, esc;

    kexec(a, PY,
          "import os, subprocess, time\n"
          "p = subprocess.Popen(['sleep', '1000'])\n"
          "open('sub.tmp', 'w').write(str(p.pid))\n"
          "os.rename('sub.tmp', 'sub.pid')\n"
          "subprocess.Popen(\"setsid sh -c 'sleep 1000 & echo $! > esc.tmp; mv esc.tmp esc.pid' \"\n"
          "                 \"</dev/null >/dev/null 2>&1\", shell=True)\n"
          "while not os.path.exists('esc.pid'):\n"
          "    time.sleep(0.01)\n"
          "print(os.getpid())",
          &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(0),
                  .state = SGUNIT_IS(SG_AGENT_STATE_NEW), .wall_below = 5);
    kernel = (pid_t)atoi(sgunit_out_str(&res, 1));
    sgunit_free_result(&res);
    sub = sgunit_read_pid_file(a, "sub.pid");
    esc = sgunit_read_pid_file(a, "esc.pid");
    assert_alive(kernel);
    assert_dead(sub);        /* a zombie until the kernel reaps it */
    sgunit_assert_gone(esc); /* orphaned to the agent, which reaped it */

    kexpect(a, PY, "print(p.wait())", 0, SG_AGENT_STATE_KEPT, "-9\n");
    sgunit_assert_gone(sub);
    assert_alive(kernel);
}

static void test_kernel_setup(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;

    /* No kernel yet: a failed setup has none to report on. */
    sgunit_exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "echo installing; exit 7", "libraries", "", "", PY, "x = 1", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_SETUP_FAILED), .code = SGUNIT_IS(7), .stage = "libraries",
                  .out = "installing\n", .state = SGUNIT_IS(SG_AGENT_STATE_NONE));
    sgunit_free_result(&res);

    sgunit_exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "echo prepared", "libraries", "", "", PY, "x = 1\nprint(x)", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(0), .stage = "run",
                  .out = "prepared\n1\n", .state = SGUNIT_IS(SG_AGENT_STATE_NEW));
    sgunit_free_result(&res);

    /* The kernel outlives a failed setup and one that timed out. */
    sgunit_exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "exit 2", "libraries", "", "", PY, "x = 2", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_SETUP_FAILED), .state = SGUNIT_IS(SG_AGENT_STATE_KEPT));
    sgunit_free_result(&res);
    sgunit_exec_full(a, 300, 1 << 20, "sleep 1000", "libraries", "", "", PY, "x = 3", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_TIMEOUT), .stage = "libraries",
                  .state = SGUNIT_IS(SG_AGENT_STATE_KEPT));
    sgunit_free_result(&res);
    kexpect(a, PY, "print(x)", 0, SG_AGENT_STATE_KEPT, "1\n");

    /* One-shot EXECs in between neither use nor harm it. */
    sgunit_run_exec(a, 5000, 1 << 20, "", "", "echo one-shot", "", "", &res);
    assert_string_equal(sgunit_out_str(&res, 1), "one-shot\n");
    sgunit_free_result(&res);
    kexpect(a, PY, "print(x)", 0, SG_AGENT_STATE_KEPT, "1\n");
}

/* A kernel that ended between EXECs: the next EXEC says so. */
static void test_kernel_dies_between_execs(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;

    kexpect(a, PY, "import os, threading\nx = 1\nthreading.Timer(0.2, os._exit, [0]).start()", 0, SG_AGENT_STATE_NEW,
            "");
    usleep(700000);
    /* Setup fails before a new kernel is started: the old one is lost. */
    sgunit_exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "exit 1", "libraries", "", "", PY, "print(x)", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_SETUP_FAILED), .state = SGUNIT_IS(SG_AGENT_STATE_LOST));
    sgunit_free_result(&res);
    /* That was reported: now there is simply none. */
    sgunit_exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "exit 1", "libraries", "", "", PY, "print(x)", &res);
    assert_int_equal(res.state, SG_AGENT_STATE_NONE);
    sgunit_free_result(&res);
    kexpect(a, PY, "print('x' in globals())", 0, SG_AGENT_STATE_NEW, "False\n");

    kexpect(a, PY, "import threading, os\nthreading.Timer(0.2, os._exit, [0]).start()", 0, SG_AGENT_STATE_KEPT, "");
    usleep(700000);
    kexpect(a, PY, "print(1)", 0, SG_AGENT_STATE_NEW, "1\n");
}

static void test_kernel_cannot_start(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;

    sgunit_exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "", "", "", "", "exec /nonexistent/kernel", "x = 1", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(127),
                  .state = SGUNIT_IS(SG_AGENT_STATE_LOST), .wall_below = 3);
    assert_true(res.out_len[2] > 0);
    sgunit_free_result(&res);
    sgunit_ping(a);
}

static void test_kernel_malformed_answer(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;

    /* Reads the request "1\nx", answers nonsense, and stays. */
    sgunit_exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "", "", "", "",
                     "exec sh -c 'head -c 3 <&3 >/dev/null; echo bogus >&4; exec sleep 1000'", "x", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_KILLED), .code = SGUNIT_IS(-1), .sig = SGUNIT_IS(SIGKILL),
                  .state = SGUNIT_IS(SG_AGENT_STATE_LOST), .wall_below = 3);
    assert_non_null(strstr(sgunit_out_str(&res, 2), "malformed answer"));
    sgunit_free_result(&res);

    /* Closes its answer pipe and stays: it can never answer. */
    sgunit_exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "", "", "", "", "exec sh -c 'exec 4>&-; exec sleep 1000'", "x",
                     &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_KILLED), .state = SGUNIT_IS(SG_AGENT_STATE_LOST),
                  .wall_below = 3);
    assert_non_null(strstr(sgunit_out_str(&res, 2), "answer pipe"));
    sgunit_free_result(&res);
    sgunit_ping(a);
}

/* A new kernel's start and the run's timeout (agent_proto.h, "Kernels"): a
 * shell playing a kernel, given the request "1\nx" and a timeout, and how
 * that EXEC must end. One cmocka test per row (its state: the agent, whose
 * row is this). */
typedef struct {
    const char *name;
    const char *kernel; /* kernel_cmd */
    uint32_t timeout_ms;
    sgunit_want_t want;    /* the EXIT, stdout, wall_s below */
    double wall_at_least;  /* wall_s at least */
    const char *err_has;   /* stderr holds it; NULL: not checked */
    const char *err_lacks; /* stderr does not hold it; NULL: not checked */
} kstart_t;

static const kstart_t starts[] = {
    /* A new kernel's start is not the run's: a kernel that takes 1.5 s to
     * say "ready" still runs code given 1 s. */
    {
        .name = "test_kernel_start_not_charged",
        .kernel = "exec sh -c 'sleep 1.5; echo ready >&4; head -c 3 <&3 >/dev/null; echo started; echo 0 >&4; "
                  "exec sleep 1000'",
        .timeout_ms = 1000,
        .want = {.reason = SGUNIT_IS(SG_AGENT_REASON_EXITED),
                 .code = SGUNIT_IS(0),
                 .state = SGUNIT_IS(SG_AGENT_STATE_NEW),
                 .stage = "run",
                 .out = "started\n",
                 .wall_below = 4},
        .wall_at_least = 1.5,
    },
    /* ... but once it has said "ready" the run has its timeout and no more. */
    {
        .name = "test_kernel_ready_then_runs_over",
        .kernel = "exec sh -c 'echo ready >&4; head -c 3 <&3 >/dev/null; exec sleep 1000'",
        .timeout_ms = 1000,
        .want = {.reason = SGUNIT_IS(SG_AGENT_REASON_TIMEOUT),
                 .state = SGUNIT_IS(SG_AGENT_STATE_LOST),
                 .wall_below = 3},
        .wall_at_least = 1.0,
        .err_lacks = "had not started",
    },
    /* A start that never ends has the timeout and SG_AGENT_KERNEL_BOOT_MS
     * (15 s) more, and the run says why it timed out. */
    {
        .name = "test_kernel_start_bounded",
        .kernel = "exec sleep 1000",
        .timeout_ms = 1000,
        .want = {.reason = SGUNIT_IS(SG_AGENT_REASON_TIMEOUT),
                 .state = SGUNIT_IS(SG_AGENT_STATE_LOST),
                 .wall_below = (1000 + SG_AGENT_KERNEL_BOOT_MS) / 1000.0 + 4},
        .wall_at_least = (1000 + SG_AGENT_KERNEL_BOOT_MS) / 1000.0,
        .err_has = "the interpreter had not started",
    },
};

static void test_kstart(void **state)
{
    sgunit_agent_t *a = *state;
    const kstart_t *k = a->row;
    sgunit_result_t res;

    sgunit_exec_full(a, k->timeout_ms, 1 << 20, "", "", "", "", k->kernel, "x", &res);
    SGUNIT_EXPECT_WANT(&res, &k->want);
    assert_true(res.wall_s >= k->wall_at_least);
    if (k->err_has != NULL)
        assert_non_null(strstr(sgunit_out_str(&res, 2), k->err_has));
    if (k->err_lacks != NULL)
        assert_null(strstr(sgunit_out_str(&res, 2), k->err_lacks));
    sgunit_free_result(&res);
    sgunit_ping(a);
}

/* "ready" is the kernel's own, once: the user's code writing it on the
 * answer pipe breaks the kernel, in its first run as in a later one. */
static void test_kernel_ready_forged(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;
    static const char *const forge = "import os\nos.write(4, b'ready\\n')\nimport time\ntime.sleep(30)";

    for (int i = 0; i < 2; i++) {
        if (i == 1)
            kexpect(a, PY, "x = 1", 0, SG_AGENT_STATE_NEW, "");
        kexec(a, PY, forge, &res);
        SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_KILLED), .state = SGUNIT_IS(SG_AGENT_STATE_LOST),
                      .wall_below = 5);
        assert_non_null(strstr(sgunit_out_str(&res, 2), "malformed answer"));
        sgunit_free_result(&res);
    }
    /* and the real kernels say it themselves: their first run is NEW */
    kexpect(a, JS, "console.log(1)", 0, SG_AGENT_STATE_NEW, "1\n");
}

/* The kernel dies with the agent. */
static void test_kernel_killed_on_stdin_eof(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;
    pid_t kernel;
    int st;

    kexec(a, PY, "import os\nprint(os.getpid())", &res);
    assert_int_equal(res.state, SG_AGENT_STATE_NEW);
    kernel = (pid_t)atoi(sgunit_out_str(&res, 1));
    sgunit_free_result(&res);
    assert_alive(kernel);
    close(a->to_agent);
    a->to_agent = -1;
    st = sgunit_wait_agent(a, 5000);
    assert_true(st != -1);
    assert_true(WIFEXITED(st));
    sgunit_assert_gone(kernel);
}

/* A run lasts until the asynchronous work it started is over. */
static void test_js_async_output(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;

    kexec(a, JS, "setTimeout(() => console.log(\"late\"), 200); console.log(\"early\")", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(0),
                  .state = SGUNIT_IS(SG_AGENT_STATE_NEW), .out = "early\nlate\n");
    assert_true(res.wall_s >= 0.2);
    sgunit_free_result(&res);

    kexpect(a, JS, "(async () => { await new Promise((r) => setTimeout(r, 50)); console.log('awaited') })()", 0,
            SG_AGENT_STATE_KEPT, "awaited\n");
    kexpect(a, JS,
            "require('fs').readFile(__filename, (e) => console.log('read', e.code));\n"
            "require('child_process').exec('echo child', (e, out) => process.stdout.write(out))",
            0, SG_AGENT_STATE_KEPT, NULL);
    /* An unref'd timer is not waited for, as node would not. */
    kexpect(a, JS, "setInterval(() => console.log('tick'), 100000).unref(); console.log('done')", 0,
            SG_AGENT_STATE_KEPT, "done\n");
}

static void test_js_errors(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;

    kexpect(a, JS, "let b = 1", 0, SG_AGENT_STATE_NEW, "");
    kexec(a, JS, "throw new Error(\"boom\")", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(1),
                  .state = SGUNIT_IS(SG_AGENT_STATE_KEPT));
    assert_non_null(strstr(sgunit_out_str(&res, 2), "Error: boom"));
    assert_non_null(strstr(sgunit_out_str(&res, 2), "<exec-2>:1"));
    assert_null(strstr(sgunit_out_str(&res, 2), "kernel.js"));
    sgunit_free_result(&res);

    kexec(a, JS, "(async () => { throw new Error('rejected') })(); 0", &res);
    SGUNIT_EXPECT(&res, .code = SGUNIT_IS(1), .state = SGUNIT_IS(SG_AGENT_STATE_KEPT));
    assert_non_null(strstr(sgunit_out_str(&res, 2), "Error: rejected"));
    sgunit_free_result(&res);

    /* An error in a callback ends the run; what it left does not run. */
    kexec(a, JS, "setTimeout(() => { throw new Error('in timer') }, 10); setTimeout(() => console.log('never'), 300)",
          &res);
    assert_int_equal(res.code, 1);
    assert_non_null(strstr(sgunit_out_str(&res, 2), "Error: in timer"));
    sgunit_free_result(&res);
    usleep(400000);
    kexpect(a, JS, "console.log(b)", 0, SG_AGENT_STATE_KEPT, "1\n");

    kexec(a, JS, "let = ;", &res);
    assert_int_equal(res.code, 1);
    assert_non_null(strstr(sgunit_out_str(&res, 2), "SyntaxError"));
    sgunit_free_result(&res);

    kexpect(a, JS, "process.exit(4)", 4, SG_AGENT_STATE_LOST, "");
    kexpect(a, JS, "console.log(typeof b)", 0, SG_AGENT_STATE_NEW, "undefined\n");
}

static void test_js_forever_promise(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;

    kexpect(a, JS, "let c = 1", 0, SG_AGENT_STATE_NEW, "");
    sgunit_exec_full(a, 1000, 1 << 20, "", "", "", "", JS, "new Promise(() => {})", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_TIMEOUT), .state = SGUNIT_IS(SG_AGENT_STATE_LOST),
                  .wall_below = 3);
    sgunit_free_result(&res);
    kexpect(a, JS, "console.log(typeof c)", 0, SG_AGENT_STATE_NEW, "undefined\n");
}

static void test_js_require(void **state)
{
    sgunit_agent_t *a = *state;
    static const char mod[] = "exports.answer = 42;\n";

    free(sgunit_expect_reply(a, sgunit_put_file(a, "node_modules/m/index.js", 0644, mod, sizeof(mod) - 1), SG_AGENT_OK)
             .payload);
    free(sgunit_expect_reply(a, sgunit_put_file(a, "lib.js", 0644, "module.exports = 'local';\n", 26), SG_AGENT_OK)
             .payload);
    kexpect(a, JS, "console.log(require('m').answer, require('./lib'), require.main === module)", 0, SG_AGENT_STATE_NEW,
            "42 local true\n");
}

/* ---- kernel scripts ---------------------------------------------------- */

/* A kernel test that is only a script: EXECs one after the other in one
 * kernel, each with the end it must have (kexpect), some followed by a
 * pause. One cmocka test per script (its state: the agent, whose row is the
 * script). */
typedef struct {
    const char *code;
    int32_t exit;
    uint32_t state;
    const char *out;     /* stdout exactly; NULL: not checked */
    useconds_t pause_us; /* then wait so long */
} kstep_t;

typedef struct {
    const char *name;
    int js;           /* the javascript kernel, else python's */
    kstep_t steps[8]; /* up to the first without code */
} kscript_t;

static const kscript_t scripts[] = {
    /* A fork() of the kernel copies the interpreter, and the copy runs on to
     * the end of the code; it must end there, as a script's child would, and
     * never answer for the kernel or read its requests. Here the child leaves
     * the code long before the parent does: were its answer taken, this EXEC
     * would end with its 7, and the parent's late answer would end the next. */
    {
        .name = "test_py_fork_copy_never_answers",
        .steps =
            {
                {"import os, sys, time\n"
                 "pid = os.fork()\n"
                 "if pid == 0:\n"
                 "    print('child')\n"
                 "    sys.exit(7)\n"
                 "_, st = os.waitpid(pid, 0)\n"
                 "time.sleep(0.2)\n"
                 "print('parent', os.waitstatus_to_exitcode(st))",
                 0, SG_AGENT_STATE_NEW, "child\nparent 7\n"},
                /* A child that fails, and one that falls off the end of the code. */
                {"pid = os.fork()\n"
                 "if pid == 0:\n"
                 "    raise ValueError('in a copy')\n"
                 "time.sleep(0.2)\n"
                 "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))",
                 0, SG_AGENT_STATE_KEPT, "1\n"},
                {"pid = os.fork()\n"
                 "if pid > 0:\n"
                 "    time.sleep(0.2)\n"
                 "    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))",
                 0, SG_AGENT_STATE_KEPT, "0\n"},
                {"print(pid > 0, 'next')", 0, SG_AGENT_STATE_KEPT, "True next\n"},
            },
    },
    /* What a kernel writes between EXECs is discarded and never blocks it. */
    {
        .name = "test_py_background_output",
        .steps =
            {
                {"import sys, threading, time\n"
                 "done = False\n"
                 "def spam():\n"
                 "    global done\n"
                 "    time.sleep(0.2)\n"
                 "    for i in range(3000):\n"
                 "        sys.stdout.write('x' * 99 + '\\n')\n"
                 "        sys.stderr.write('e' * 99 + '\\n')\n"
                 "    done = True\n"
                 "threading.Thread(target=spam, daemon=True).start()",
                 0, SG_AGENT_STATE_NEW, "", 1500000},
                {"print(done)", 0, SG_AGENT_STATE_KEPT, "True\n"},
            },
    },
    /* The kernel gets fds 0 to 5 and nothing else, and volunteers for the OOM
     * killer like any command. */
    {
        .name = "test_kernel_environment",
        .steps =
            {
                {"import os\n"
                 "fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\n"
                 "print(fds[:6], len(fds))\n"
                 "print(os.readlink('/proc/self/fd/0'))\n"
                 "print(open('/proc/self/oom_score_adj').read().strip())\n"
                 "print(os.getcwd() == os.environ['SANDGATE_WORKDIR'])",
                 0, SG_AGENT_STATE_NEW, "[0, 1, 2, 3, 4, 5] 7\n/dev/null\n1000\nTrue\n"},
            },
    },
    {
        .name = "test_js_state_kept",
        .js = 1,
        .steps =
            {
                {"let a = 20", 0, SG_AGENT_STATE_NEW, ""},
                {"console.log(a * 2 + 2)", 0, SG_AGENT_STATE_KEPT, "42\n"},
                {"function f() { return 7 }", 0, SG_AGENT_STATE_KEPT, ""},
                {"console.log(f())", 0, SG_AGENT_STATE_KEPT, "7\n"},
                {"var v = 'var'; globalThis.g = 'global'", 0, SG_AGENT_STATE_KEPT, ""},
                {"console.log(v, g, process.cwd() === __dirname)", 0, SG_AGENT_STATE_KEPT, "var global true\n"},
                {"process.exitCode = 3", 3, SG_AGENT_STATE_KEPT, ""},
                {"console.log(a)", 0, SG_AGENT_STATE_KEPT, "20\n"},
            },
    },
};

static void test_kscript(void **state)
{
    sgunit_agent_t *a = *state;
    const kscript_t *script = a->row;

    for (const kstep_t *k = script->steps; k < script->steps + 8 && k->code != NULL; k++) {
        kexpect(a, script->js ? JS : PY, k->code, k->exit, k->state, k->out);
        if (k->pause_us != 0)
            usleep(k->pause_us);
    }
}

/* ---- the result channel (agent_proto.h, "The result channel") --------- */

static void test_results_value(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;
    const char *two = "{\"type\": \"text\", \"mime\": \"text/plain\", \"data\": \"2\", \"main\": true}";
    char want[256];

    /* The last expression's value is a result, not output. */
    kexec(a, PY, "1 + 1", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(0));
    assert_string_equal(sgunit_out_str(&res, 1), "");
    snprintf(want, sizeof(want), "%zu\n%s\n", strlen(two), two);
    assert_string_equal(res.results, want);
    assert_int_equal(res.flags & SG_AGENT_EXIT_RESULTS_DROPPED, 0);
    sgunit_free_result(&res);
    /* None, an assignment, a semicolon: nothing */
    kexec(a, PY, "x = 5\nNone", &res);
    assert_int_equal(res.nresults, 0);
    sgunit_free_result(&res);
    kexec(a, PY, "x ;", &res);
    assert_int_equal(res.nresults, 0);
    sgunit_free_result(&res);
    /* JavaScript: the completion value */
    kexec(a, JS, "40 + 2", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(0));
    assert_string_equal(sgunit_out_str(&res, 1), "");
    assert_non_null(strstr(res.results, "\"data\":\"42\""));
    assert_int_equal(res.nresults, 1);
    sgunit_free_result(&res);
}

/* Records the user's code writes on fd 5 are framed like the kernel's;
 * what breaks the framing is dropped, and only for its own EXEC. */
static void test_results_forged(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;

    kexec(a, PY, "import os\nx = 5\nos.write(5, b'5\\nhello')\nNone", &res);
    assert_string_equal(res.results, "5\nhello\n");
    assert_int_equal(res.flags & SG_AGENT_EXIT_RESULTS_DROPPED, 0);
    sgunit_free_result(&res);
    /* a length line that is not one: the rest of the EXEC is thrown away */
    kexec(a, PY, "os.write(5, b'garbage\\n5\\nhello')\n1", &res);
    assert_int_equal(res.nresults, 0);
    assert_true(res.flags & SG_AGENT_EXIT_RESULTS_DROPPED);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(0),
                  .state = SGUNIT_IS(SG_AGENT_STATE_KEPT));
    sgunit_free_result(&res);
    /* an empty record, and one that claims 9999999999 bytes: skipped */
    kexec(a, PY, "os.write(5, b'0\\n3\\nabc9999999999\\nxyz');", &res);
    assert_string_equal(res.results, "3\nabc\n");
    assert_true(res.flags & SG_AGENT_EXIT_RESULTS_DROPPED);
    sgunit_free_result(&res);
    /* a record cut off by the end of its run: dropped; the next EXEC frames afresh */
    kexec(a, PY, "os.write(5, b'10\\nabc');", &res);
    assert_int_equal(res.nresults, 0);
    assert_true(res.flags & SG_AGENT_EXIT_RESULTS_DROPPED);
    sgunit_free_result(&res);
    kexec(a, PY, "7", &res);
    assert_int_equal(res.nresults, 1);
    assert_int_equal(res.flags & SG_AGENT_EXIT_RESULTS_DROPPED, 0);
    sgunit_free_result(&res);
    /* the code closes fd 5: results end, the kernel lives on */
    kexec(a, PY, "os.close(5)\nprint('closed')\n8", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(0),
                  .state = SGUNIT_IS(SG_AGENT_STATE_KEPT));
    assert_int_equal(res.nresults, 0);
    sgunit_free_result(&res);
    kexpect(a, PY, "print(x)", 0, SG_AGENT_STATE_KEPT, "5\n");
}

/* At most SG_AGENT_RESULTS_MAX records and SG_AGENT_RESULTS_MAX_BYTES bytes
 * per EXEC; the rest are read and dropped, and the run still ends well. */
static void test_results_budget(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;

    kexec(a, PY, "import os\nfor i in range(1100): os.write(5, b'1\\na')", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(0));
    assert_int_equal(res.nresults, SG_AGENT_RESULTS_MAX);
    assert_true(res.flags & SG_AGENT_EXIT_RESULTS_DROPPED);
    sgunit_free_result(&res);
    kexec(a, PY, "big = b'x' * (3 << 20)\nfor i in range(7): os.write(5, b'%d\\n' % len(big) + big)", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(0));
    assert_int_equal(res.nresults, SG_AGENT_RESULTS_MAX_BYTES / (3u << 20));
    assert_true(res.flags & SG_AGENT_EXIT_RESULTS_DROPPED);
    sgunit_free_result(&res);
}

/* The out dir's regular files, sorted, with sizes; no links, no FIFOs. */
static void test_files_out(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;
    char want[512];

    kexec(a, PY,
          "import os\nos.makedirs('out/d/e', exist_ok=True)\nopen('out/b.txt', 'w').write('abc')\n"
          "open('out/d/e/a.bin', 'wb').write(bytes(1000))\nos.symlink('/etc/passwd', 'out/link')\n"
          "os.symlink('/etc', 'out/dirlink')\nos.mkfifo('out/fifo')",
          &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(0));
    assert_true(res.files_sent);
    assert_int_equal(res.files_flags, 0);
    snprintf(want, sizeof(want), "%s/out/b.txt 3\n%s/out/d/e/a.bin 1000\n", a->dir, a->dir);
    assert_string_equal(res.files, want);
    sgunit_free_result(&res);
    /* more than SG_AGENT_FILES_MAX: the first ones, and the flag */
    kexec(a, PY, "for i in range(1005): open('out/f%04d' % i, 'w').close()", &res);
    assert_int_equal(res.nfiles, SG_AGENT_FILES_MAX);
    assert_true(res.files_flags & SG_AGENT_FILES_MORE);
    sgunit_free_result(&res);
    /* out replaced by a link to elsewhere: nothing is listed */
    kexec(a, PY, "import shutil\nshutil.rmtree('out')\nos.symlink('/etc', 'out')", &res);
    assert_false(res.files_sent);
    sgunit_free_result(&res);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SGUNIT_AGENT_TEST(test_py_state_kept),
        SGUNIT_AGENT_TEST(test_py_exception),
        SGUNIT_AGENT_TEST(test_py_sys_exit),
        SGUNIT_AGENT_TEST(test_py_timeout_loses_state),
        SGUNIT_AGENT_TEST(test_py_kernel_ends),
        SGUNIT_AGENT_TEST(test_py_output_cap),
        SGUNIT_AGENT_TEST(test_py_children_killed),
        SGUNIT_AGENT_ROW_TEST(test_kscript, &scripts[1]),
        SGUNIT_AGENT_ROW_TEST(test_kscript, &scripts[0]),
        SGUNIT_AGENT_TEST(test_kernel_setup),
        SGUNIT_AGENT_TEST(test_kernel_dies_between_execs),
        SGUNIT_AGENT_ROW_TEST(test_kscript, &scripts[2]),
        SGUNIT_AGENT_TEST(test_kernel_cannot_start),
        SGUNIT_AGENT_TEST(test_kernel_malformed_answer),
        SGUNIT_AGENT_ROW_TEST(test_kstart, &starts[0]),
        SGUNIT_AGENT_ROW_TEST(test_kstart, &starts[1]),
        SGUNIT_AGENT_ROW_TEST(test_kstart, &starts[2]),
        SGUNIT_AGENT_TEST(test_kernel_ready_forged),
        SGUNIT_AGENT_TEST(test_kernel_killed_on_stdin_eof),
        SGUNIT_AGENT_ROW_TEST(test_kscript, &scripts[3]),
        SGUNIT_AGENT_TEST(test_js_async_output),
        SGUNIT_AGENT_TEST(test_js_errors),
        SGUNIT_AGENT_TEST(test_js_forever_promise),
        SGUNIT_AGENT_TEST(test_js_require),
        SGUNIT_AGENT_TEST(test_results_value),
        SGUNIT_AGENT_TEST(test_results_forged),
        SGUNIT_AGENT_TEST(test_results_budget),
        SGUNIT_AGENT_TEST(test_files_out),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
