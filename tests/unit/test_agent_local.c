/*
 * test_agent_local.c — the real sandgate-agent binary, run as an ordinary
 * child process (not PID 1, not in a container) with pipes on its stdin and
 * stdout and a fresh work dir. Every read has a deadline, so a broken agent
 * fails the test instead of hanging it.
 *
 * The binary comes from SANDGATE_AGENT_BIN, else ../proxy/sandgate-agent
 * relative to the cwd (ctest runs unit tests from build/tests).
 *
 * Stateful mode runs the real kernels of deploy/images/{python,javascript}
 * with this machine's python3 and node (both required: a missing one fails
 * the tests). They are found in SANDGATE_KERNEL_DIR (the directory holding
 * python/kernel.py and javascript/kernel.js), else in deploy/images of the
 * source tree this file was compiled from.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent_proto.h"

#define MSG_TIMEOUT_MS 10000

typedef struct {
    pid_t pid;
    int to_agent;   /* its stdin */
    int from_agent; /* its stdout */
    char dir[64];   /* its work dir */
    uint32_t next_id;
} agent_t;

typedef struct {
    uint8_t type;
    uint32_t id;
    uint32_t len;
    uint8_t *payload;
} msg_t;

typedef struct {
    uint8_t *out[3]; /* by stream; NUL-terminated for convenience */
    size_t out_len[3];
    size_t chunks;
    int32_t code;
    uint32_t sig;
    uint32_t reason;
    uint64_t duration_us;
    uint32_t flags;
    char stage[64];
    uint32_t state;
    double wall_s;
} exec_result_t;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- helpers --------------------------------------------------------- */

static int read_exact(int fd, void *p, size_t len, double deadline)
{
    uint8_t *d = p;

    while (len != 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ms = (int)((deadline - now_s()) * 1000);
        ssize_t n;

        if (ms <= 0)
            return -1;
        if (poll(&pfd, 1, ms) <= 0)
            continue;
        n = read(fd, d, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        d += n;
        len -= (size_t)n;
    }
    return 0;
}

/* One whole message within timeout_ms, or -1. */
static int read_msg(agent_t *a, msg_t *m, int timeout_ms)
{
    uint8_t raw[SG_AGENT_HEADER_SIZE];
    sg_agent_header_t h;
    double deadline = now_s() + timeout_ms / 1000.0;

    memset(m, 0, sizeof(*m));
    if (read_exact(a->from_agent, raw, sizeof(raw), deadline) != 0)
        return -1;
    if (sg_agent_header_decode(raw, &h) != 0)
        return -1;
    m->type = h.type;
    m->id = h.id;
    m->len = h.len;
    m->payload = malloc(h.len + 1);
    if (m->payload == NULL)
        return -1;
    if (read_exact(a->from_agent, m->payload, h.len, deadline) != 0) {
        free(m->payload);
        m->payload = NULL;
        return -1;
    }
    return 0;
}

static void send_buf(agent_t *a, sg_agent_buf_t *b)
{
    const uint8_t *p = b->base;
    size_t len = b->len;

    while (len != 0) {
        ssize_t n = write(a->to_agent, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        assert_true(n > 0);
        p += n;
        len -= (size_t)n;
    }
    sg_agent_buf_free(b);
}

static void send_raw(agent_t *a, uint8_t type, uint32_t id, const void *payload, size_t len)
{
    sg_agent_buf_t b;

    sg_agent_buf_init(&b);
    assert_int_equal(sg_agent_msg_begin(&b, type, id), 0);
    assert_int_equal(sg_agent_put_rest(&b, payload, len), 0);
    sg_agent_msg_end(&b, 0);
    send_buf(a, &b);
}

static const char *agent_bin(void)
{
    const char *bin = getenv("SANDGATE_AGENT_BIN");

    return bin != NULL && bin[0] != '\0' ? bin : "../proxy/sandgate-agent";
}

static int setup_agent(void **state)
{
    agent_t *a = calloc(1, sizeof(*a));
    int in[2], outp[2];
    msg_t m;
    sg_agent_reader_t r;
    uint32_t version;
    const uint8_t *s;
    size_t len;

    assert_non_null(a);
    if (access(agent_bin(), X_OK) != 0) {
        fprintf(stderr, "agent binary %s not found; set SANDGATE_AGENT_BIN\n", agent_bin());
        free(a);
        return -1;
    }
    strcpy(a->dir, "/tmp/sg-agent-test-XXXXXX");
    assert_non_null(mkdtemp(a->dir));
    assert_int_equal(pipe2(in, O_CLOEXEC), 0);
    assert_int_equal(pipe2(outp, O_CLOEXEC), 0);
    a->pid = fork();
    assert_true(a->pid >= 0);
    if (a->pid == 0) {
        dup2(in[0], 0);
        dup2(outp[1], 1);
        setenv("SANDGATE_WORKDIR", a->dir, 1);
        execl(agent_bin(), "sandgate-agent", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(outp[1]);
    a->to_agent = in[1];
    a->from_agent = outp[0];
    a->next_id = 1;
    *state = a;

    assert_int_equal(read_msg(a, &m, MSG_TIMEOUT_MS), 0);
    assert_int_equal(m.type, SG_AGENT_READY);
    assert_int_equal(m.id, 0);
    sg_agent_reader_init(&r, m.payload, m.len);
    assert_int_equal(sg_agent_get_u32(&r, &version), 0);
    assert_int_equal(version, SG_AGENT_PROTO_VERSION);
    assert_int_equal(sg_agent_get_str(&r, &s, &len), 0);
    assert_int_equal(len, strlen(a->dir));
    assert_memory_equal(s, a->dir, len);
    free(m.payload);
    return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* Wait up to timeout_ms for the agent to exit; returns its wait status or -1. */
static int wait_agent(agent_t *a, int timeout_ms)
{
    double deadline = now_s() + timeout_ms / 1000.0;
    int st;

    while (now_s() < deadline) {
        pid_t p = waitpid(a->pid, &st, WNOHANG);
        if (p == a->pid) {
            a->pid = -1;
            return st;
        }
        usleep(10000);
    }
    return -1;
}

static int teardown_agent(void **state)
{
    agent_t *a = *state;

    if (a == NULL)
        return 0;
    if (a->to_agent >= 0)
        close(a->to_agent);
    if (a->pid > 0 && wait_agent(a, 5000) == -1) {
        kill(a->pid, SIGKILL);
        waitpid(a->pid, NULL, 0);
    }
    close(a->from_agent);
    nftw(a->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(a);
    return 0;
}

/* Send an EXEC and collect everything up to its EXIT. */
static void exec_full(agent_t *a, uint32_t timeout_ms, uint32_t cap, const char *setup, const char *stage,
                      const char *run, const char *file_path, const char *kernel, const char *code, exec_result_t *res)
{
    sg_agent_buf_t b;
    uint32_t id = a->next_id++;
    double t0;

    memset(res, 0, sizeof(*res));
    sg_agent_buf_init(&b);
    assert_int_equal(sg_agent_msg_begin(&b, SG_AGENT_EXEC, id), 0);
    sg_agent_put_u32(&b, timeout_ms);
    sg_agent_put_u32(&b, cap);
    sg_agent_put_str(&b, setup, strlen(setup));
    sg_agent_put_str(&b, stage, strlen(stage));
    sg_agent_put_str(&b, run, strlen(run));
    sg_agent_put_str(&b, file_path, strlen(file_path));
    sg_agent_put_str(&b, kernel, strlen(kernel));
    assert_int_equal(sg_agent_put_rest(&b, code, strlen(code)), 0);
    sg_agent_msg_end(&b, 0);
    t0 = now_s();
    send_buf(a, &b);

    for (;;) {
        msg_t m;
        sg_agent_reader_t r;
        const uint8_t *s;
        size_t len;
        uint32_t stream;

        assert_int_equal(read_msg(a, &m, MSG_TIMEOUT_MS), 0);
        assert_int_equal(m.id, id);
        sg_agent_reader_init(&r, m.payload, m.len);
        if (m.type == SG_AGENT_OUTPUT) {
            assert_int_equal(sg_agent_get_u32(&r, &stream), 0);
            assert_true(stream == 1 || stream == 2);
            sg_agent_get_rest(&r, &s, &len);
            assert_true(len > 0 && len <= SG_AGENT_OUTPUT_CHUNK);
            res->out[stream] = realloc(res->out[stream], res->out_len[stream] + len + 1);
            assert_non_null(res->out[stream]);
            memcpy(res->out[stream] + res->out_len[stream], s, len);
            res->out_len[stream] += len;
            res->out[stream][res->out_len[stream]] = '\0';
            res->chunks++;
            free(m.payload);
            continue;
        }
        assert_int_equal(m.type, SG_AGENT_EXIT);
        assert_int_equal(sg_agent_get_i32(&r, &res->code), 0);
        assert_int_equal(sg_agent_get_u32(&r, &res->sig), 0);
        assert_int_equal(sg_agent_get_u32(&r, &res->reason), 0);
        assert_int_equal(sg_agent_get_u64(&r, &res->duration_us), 0);
        assert_int_equal(sg_agent_get_u32(&r, &res->flags), 0);
        assert_int_equal(sg_agent_get_str(&r, &s, &len), 0);
        assert_int_equal(sg_agent_get_u32(&r, &res->state), 0);
        assert_int_equal(r.off, r.len);
        assert_true(len < sizeof(res->stage));
        memcpy(res->stage, s, len);
        res->stage[len] = '\0';
        free(m.payload);
        break;
    }
    res->wall_s = now_s() - t0;
}

/* One-shot mode: there is never a kernel to report on. */
static void run_exec(agent_t *a, uint32_t timeout_ms, uint32_t cap, const char *setup, const char *stage, const char *run,
                     const char *file_path, const char *code, exec_result_t *res)
{
    exec_full(a, timeout_ms, cap, setup, stage, run, file_path, "", code, res);
    assert_int_equal(res->state, SG_AGENT_STATE_NONE);
}

static void free_result(exec_result_t *res)
{
    free(res->out[1]);
    free(res->out[2]);
}

static const char *out_str(exec_result_t *res, int stream)
{
    return res->out[stream] != NULL ? (const char *)res->out[stream] : "";
}

/* Expect a single reply of `type`; returns it (payload owned by caller). */
static msg_t expect_reply(agent_t *a, uint32_t id, uint8_t type)
{
    msg_t m;

    assert_int_equal(read_msg(a, &m, MSG_TIMEOUT_MS), 0);
    assert_int_equal(m.id, id);
    if (m.type != type && m.type == SG_AGENT_ERROR && m.len > 8)
        fprintf(stderr, "unexpected ERROR: %.*s\n", (int)(m.len - 8), (const char *)m.payload + 8);
    assert_int_equal(m.type, type);
    return m;
}

static uint32_t put_file(agent_t *a, const char *path, uint32_t mode, const void *data, size_t len)
{
    sg_agent_buf_t b;
    uint32_t id = a->next_id++;

    sg_agent_buf_init(&b);
    assert_int_equal(sg_agent_msg_begin(&b, SG_AGENT_PUT_FILE, id), 0);
    sg_agent_put_str(&b, path, strlen(path));
    sg_agent_put_u32(&b, mode);
    assert_int_equal(sg_agent_put_rest(&b, data, len), 0);
    sg_agent_msg_end(&b, 0);
    send_buf(a, &b);
    return id;
}

static uint32_t get_file(agent_t *a, const char *path, uint32_t max_bytes)
{
    sg_agent_buf_t b;
    uint32_t id = a->next_id++;

    sg_agent_buf_init(&b);
    assert_int_equal(sg_agent_msg_begin(&b, SG_AGENT_GET_FILE, id), 0);
    sg_agent_put_str(&b, path, strlen(path));
    assert_int_equal(sg_agent_put_u32(&b, max_bytes), 0);
    sg_agent_msg_end(&b, 0);
    send_buf(a, &b);
    return id;
}

/* Expect ERROR with `code` and a non-empty message. */
static void expect_error(agent_t *a, uint32_t id, uint32_t code)
{
    msg_t m = expect_reply(a, id, SG_AGENT_ERROR);
    sg_agent_reader_t r;
    uint32_t got;
    const uint8_t *s;
    size_t len;

    sg_agent_reader_init(&r, m.payload, m.len);
    assert_int_equal(sg_agent_get_u32(&r, &got), 0);
    assert_int_equal(sg_agent_get_str(&r, &s, &len), 0);
    assert_int_equal(r.off, r.len);
    if (got != code)
        fprintf(stderr, "error %u: %.*s\n", got, (int)len, (const char *)s);
    assert_int_equal(got, code);
    assert_true(len > 0);
    free(m.payload);
}

static void ping(agent_t *a)
{
    uint32_t id = a->next_id++;
    msg_t m;
    sg_agent_reader_t r;
    uint64_t v = 1;

    send_raw(a, SG_AGENT_PING, id, NULL, 0);
    m = expect_reply(a, id, SG_AGENT_OK);
    sg_agent_reader_init(&r, m.payload, m.len);
    assert_int_equal(sg_agent_get_u64(&r, &v), 0);
    assert_true(v == 0);
    assert_int_equal(r.off, r.len);
    free(m.payload);
}

static pid_t read_pid_file(agent_t *a, const char *name)
{
    char path[128], buf[32] = "";
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", a->dir, name);
    f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    return (pid_t)atoi(buf);
}

/* ---- tests ----------------------------------------------------------- */

static void test_ready_and_ping(void **state)
{
    ping(*state); /* READY was checked by the setup */
}

static void test_exit_code_and_streams(void **state)
{
    exec_result_t res;

    run_exec(*state, 5000, 1 << 20, "", "", "echo hi; echo err >&2; exit 3", "", "", &res);
    assert_string_equal(out_str(&res, 1), "hi\n");
    assert_string_equal(out_str(&res, 2), "err\n");
    assert_int_equal(res.reason, SG_AGENT_REASON_EXITED);
    assert_int_equal(res.code, 3);
    assert_int_equal(res.sig, 0);
    assert_int_equal(res.flags, 0);
    assert_string_equal(res.stage, "run");
    assert_true(res.duration_us > 0 && res.duration_us < 5000000);
    free_result(&res);
}

static void test_environment(void **state)
{
    agent_t *a = *state;
    exec_result_t res;
    char want[256];

    /* cwd is the work dir, stdin is empty, SANDGATE_FILE is set, and user
     * code volunteers for the OOM killer. */
    run_exec(a, 5000, 1 << 20, "", "", "pwd; cat; echo \"[$SANDGATE_FILE]\"; cat /proc/self/oom_score_adj", "", "", &res);
    snprintf(want, sizeof(want), "%s\n[]\n1000\n", a->dir);
    assert_string_equal(out_str(&res, 1), want);
    assert_int_equal(res.reason, SG_AGENT_REASON_EXITED);
    assert_int_equal(res.code, 0);
    free_result(&res);
}

static void test_timeout(void **state)
{
    exec_result_t res;

    run_exec(*state, 300, 1 << 20, "", "", "sleep 1000", "", "", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_TIMEOUT);
    assert_int_equal(res.code, -1);
    assert_int_equal(res.sig, SIGKILL);
    assert_string_equal(res.stage, "run");
    assert_true(res.wall_s < 1.5);
    assert_true(res.duration_us >= 300000 && res.duration_us < 1500000);
    free_result(&res);
    ping(*state);
}

static void test_timeout_in_setup(void **state)
{
    exec_result_t res;

    run_exec(*state, 300, 1 << 20, "sleep 1000", "compile", "echo never", "", "", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_TIMEOUT);
    assert_string_equal(res.stage, "compile");
    assert_string_equal(out_str(&res, 1), "");
    assert_true(res.wall_s < 1.5);
    free_result(&res);
}

static void assert_gone(pid_t pid)
{
    assert_true(pid > 1);
    assert_int_equal(kill(pid, 0), -1);
    assert_int_equal(errno, ESRCH);
}

/* Escapees: a setsid'd group that keeps the output pipes open, and a
 * double-forked daemon that closed them. Both must be dead (and reaped) once
 * EXIT arrives, and EXIT must not wait for the pipes to close. */
static void test_escapees_killed(void **state)
{
    agent_t *a = *state;
    exec_result_t res;

    run_exec(a, 20000, 1 << 20, "", "",
             "setsid sh -c 'sleep 1000 & echo $! > esc1.tmp; mv esc1.tmp esc1.pid; sleep 1000' &\n"
             "setsid sh -c 'sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > esc2.tmp; mv esc2.tmp esc2.pid' "
             "</dev/null >/dev/null 2>&1 &\n"
             "while [ ! -e esc1.pid ] || [ ! -e esc2.pid ]; do sleep 0.02; done\n"
             "echo started",
             "", "", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_EXITED);
    assert_int_equal(res.code, 0);
    assert_string_equal(out_str(&res, 1), "started\n");
    assert_true(res.wall_s < 5);
    assert_gone(read_pid_file(a, "esc1.pid"));
    assert_gone(read_pid_file(a, "esc2.pid"));
    free_result(&res);
    ping(a);
}

/* Escapees are killed on timeout too. */
static void test_escapee_killed_on_timeout(void **state)
{
    agent_t *a = *state;
    exec_result_t res;

    run_exec(a, 500, 1 << 20, "",
             "", "setsid sh -c 'sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > esc.tmp; mv esc.tmp esc.pid' "
                 "</dev/null >/dev/null 2>&1; sleep 1000",
             "", "", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_TIMEOUT);
    assert_gone(read_pid_file(a, "esc.pid"));
    free_result(&res);
}

static void test_output_cap(void **state)
{
    exec_result_t res;

    run_exec(*state, 10000, 1000, "", "", "yes", "", "", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_OUTPUT_LIMIT);
    assert_int_equal(res.out_len[1], 1000);
    assert_int_equal(res.out_len[2], 0);
    assert_true(res.flags & SG_AGENT_EXIT_STDOUT_TRUNCATED);
    assert_false(res.flags & SG_AGENT_EXIT_STDERR_TRUNCATED);
    assert_memory_equal(res.out[1], "y\ny\ny\n", 6);
    free_result(&res);
    ping(*state);
}

static void test_output_cap_stderr(void **state)
{
    exec_result_t res;

    run_exec(*state, 10000, 10, "", "", "echo ok; echo 0123456789abcdef >&2; sleep 1000", "", "", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_OUTPUT_LIMIT);
    assert_string_equal(out_str(&res, 1), "ok\n");
    assert_int_equal(res.out_len[2], 10);
    assert_memory_equal(res.out[2], "0123456789", 10);
    assert_int_equal(res.flags, SG_AGENT_EXIT_STDERR_TRUNCATED);
    assert_true(res.wall_s < 5);
    free_result(&res);
}

/* Output exactly at the cap is not a limit; large output comes in chunks. */
static void test_output_chunks(void **state)
{
    exec_result_t res;

    run_exec(*state, 10000, 100000, "", "", "head -c 100000 /dev/zero", "", "", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_EXITED);
    assert_int_equal(res.code, 0);
    assert_int_equal(res.out_len[1], 100000);
    assert_int_equal(res.flags, 0);
    assert_true(res.chunks >= 4); /* 32 KiB at most each */
    free_result(&res);
}

static void test_setup_failed(void **state)
{
    exec_result_t res;

    run_exec(*state, 5000, 1 << 20, "echo compiling; exit 7", "compile", "echo never", "", "", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_SETUP_FAILED);
    assert_int_equal(res.code, 7);
    assert_int_equal(res.sig, 0);
    assert_string_equal(res.stage, "compile");
    assert_string_equal(out_str(&res, 1), "compiling\n");
    free_result(&res);
}

static void test_setup_then_run(void **state)
{
    exec_result_t res;

    run_exec(*state, 5000, 1 << 20, "echo built > artefact", "compile", "cat artefact; exit 0", "", "", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_EXITED);
    assert_int_equal(res.code, 0);
    assert_string_equal(res.stage, "run");
    assert_string_equal(out_str(&res, 1), "built\n");
    free_result(&res);
}

static void test_code_file(void **state)
{
    agent_t *a = *state;
    exec_result_t res;
    char path[128], buf[64] = "";
    struct stat st;
    FILE *f;

    snprintf(path, sizeof(path), "%s/src/deep/main.py", a->dir);
    run_exec(a, 5000, 1 << 20, "", "", "cat \"$SANDGATE_FILE\"", path, "print(42)\n", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_EXITED);
    assert_int_equal(res.code, 0);
    assert_string_equal(out_str(&res, 1), "print(42)\n");
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    assert_string_equal(buf, "print(42)\n");
    free_result(&res);
}

static void test_code_file_unwritable(void **state)
{
    agent_t *a = *state;
    exec_result_t res;
    char path[128];
    int fd;

    /* A regular file where a directory should be: fails even for root. */
    snprintf(path, sizeof(path), "%s/plain", a->dir);
    fd = open(path, O_WRONLY | O_CREAT, 0644);
    assert_true(fd >= 0);
    close(fd);
    snprintf(path, sizeof(path), "%s/plain/main.py", a->dir);
    run_exec(a, 5000, 1 << 20, "", "", "echo never", path, "x", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_START_FAILED);
    assert_string_equal(out_str(&res, 1), "");
    assert_true(res.out_len[2] > 0);
    assert_non_null(strstr(out_str(&res, 2), "main.py"));
    free_result(&res);
    ping(a);
}

static void test_killed_by_signal(void **state)
{
    exec_result_t res;

    run_exec(*state, 5000, 1 << 20, "", "", "kill -TERM $$", "", "", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_KILLED);
    assert_int_equal(res.code, -1);
    assert_int_equal(res.sig, SIGTERM);
    free_result(&res);
}

static void test_put_get_round_trip(void **state)
{
    agent_t *a = *state;
    static const uint8_t data[] = {'b', 'i', 'n', 0, 1, 2, 0xff, '\n'};
    char path[128];
    struct stat st;
    uint32_t id;
    msg_t m;
    sg_agent_reader_t r;
    uint64_t size;
    const uint8_t *s;
    size_t len;

    id = put_file(a, "dir/sub/f.bin", 0600, data, sizeof(data));
    m = expect_reply(a, id, SG_AGENT_OK);
    sg_agent_reader_init(&r, m.payload, m.len);
    assert_int_equal(sg_agent_get_u64(&r, &size), 0);
    assert_true(size == sizeof(data));
    free(m.payload);

    snprintf(path, sizeof(path), "%s/dir/sub/f.bin", a->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0600);

    id = get_file(a, "dir/sub/f.bin", 1024);
    m = expect_reply(a, id, SG_AGENT_FILE);
    sg_agent_reader_init(&r, m.payload, m.len);
    sg_agent_get_rest(&r, &s, &len);
    assert_int_equal(len, sizeof(data));
    assert_memory_equal(s, data, sizeof(data));
    free(m.payload);

    /* The same file by its absolute path, and overwritten shorter. */
    id = put_file(a, path, 0644, "new", 3);
    free(expect_reply(a, id, SG_AGENT_OK).payload);
    id = get_file(a, path, 3); /* exactly max_bytes is allowed */
    m = expect_reply(a, id, SG_AGENT_FILE);
    assert_int_equal(m.len, 3);
    assert_memory_equal(m.payload, "new", 3);
    free(m.payload);

    /* An empty file. */
    id = put_file(a, "./empty", 0644, "", 0);
    free(expect_reply(a, id, SG_AGENT_OK).payload);
    id = get_file(a, "empty", 0);
    m = expect_reply(a, id, SG_AGENT_FILE);
    assert_int_equal(m.len, 0);
    free(m.payload);
}

static void test_refused_paths(void **state)
{
    agent_t *a = *state;
    static const char *const refused[] = {"../x", "/etc/passwd", "a/../../x", "..", "dir/..", "link/passwd", "link",
                                          "dir", "/tmp", "dir/file/x", ""};
    char path[128];
    size_t i;
    int fd;

    snprintf(path, sizeof(path), "%s/link", a->dir);
    assert_int_equal(symlink("/etc", path), 0);
    snprintf(path, sizeof(path), "%s/dir", a->dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/dir/file", a->dir);
    fd = open(path, O_WRONLY | O_CREAT, 0644);
    assert_true(fd >= 0);
    close(fd);

    for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        expect_error(a, get_file(a, refused[i], 1 << 20), SG_AGENT_ERR_PATH);
        expect_error(a, put_file(a, refused[i], 0644, "x", 1), SG_AGENT_ERR_PATH);
    }
    /* Work dir itself, by absolute path. */
    expect_error(a, get_file(a, a->dir, 1 << 20), SG_AGENT_ERR_PATH);
    /* Nothing was written through the symlink or outside. */
    assert_int_equal(access("/etc/x", F_OK), -1);
    /* A path with a NUL byte inside. */
    {
        sg_agent_buf_t b;
        uint32_t id = a->next_id++;

        sg_agent_buf_init(&b);
        sg_agent_msg_begin(&b, SG_AGENT_GET_FILE, id);
        sg_agent_put_str(&b, "ok\0../x", 7);
        sg_agent_put_u32(&b, 100);
        sg_agent_msg_end(&b, 0);
        send_buf(a, &b);
        expect_error(a, id, SG_AGENT_ERR_PATH);
    }
}

static void test_get_errors(void **state)
{
    agent_t *a = *state;
    uint32_t id;

    expect_error(a, get_file(a, "missing", 100), SG_AGENT_ERR_NOT_FOUND);
    expect_error(a, get_file(a, "no/such/dir/file", 100), SG_AGENT_ERR_NOT_FOUND);
    id = put_file(a, "big", 0644, "0123456789", 10);
    free(expect_reply(a, id, SG_AGENT_OK).payload);
    expect_error(a, get_file(a, "big", 9), SG_AGENT_ERR_TOO_LARGE);
}

static void test_malformed_requests(void **state)
{
    agent_t *a = *state;
    uint8_t hdr[SG_AGENT_HEADER_SIZE] = {SG_AGENT_PING, 1, 0, 0, 0, 0, 0, 77, 0, 0, 0, 0};

    send_raw(a, SG_AGENT_EXEC, 50, "abc", 3);
    expect_error(a, 50, SG_AGENT_ERR_BAD_REQUEST);
    ping(a);

    send_raw(a, 99, 51, "", 0);
    expect_error(a, 51, SG_AGENT_ERR_BAD_REQUEST);
    send_raw(a, SG_AGENT_OK, 52, "", 0); /* a reply type is not a request */
    expect_error(a, 52, SG_AGENT_ERR_BAD_REQUEST);
    send_raw(a, SG_AGENT_GET_FILE, 53, "\0\0\0\x05" "ab", 6); /* string past the end */
    expect_error(a, 53, SG_AGENT_ERR_BAD_REQUEST);
    send_raw(a, SG_AGENT_PUT_FILE, 54, "\0\0\0\x01" "a", 5); /* no mode */
    expect_error(a, 54, SG_AGENT_ERR_BAD_REQUEST);

    /* Non-zero flags: the payload length is still trusted, the request is not. */
    assert_int_equal(write(a->to_agent, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
    expect_error(a, 77, SG_AGENT_ERR_BAD_REQUEST);
    ping(a);
}

static void test_oversize_exits(void **state)
{
    agent_t *a = *state;
    uint8_t hdr[SG_AGENT_HEADER_SIZE] = {SG_AGENT_PING, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff};
    int st;

    /* The stream cannot be resynchronised: the agent must leave, not wait
     * for four gigabytes. */
    assert_int_equal(write(a->to_agent, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
    st = wait_agent(a, 5000);
    assert_true(st != -1);
    assert_true(WIFEXITED(st));
}

static void test_stdin_eof_exits(void **state)
{
    agent_t *a = *state;
    int st;

    close(a->to_agent);
    a->to_agent = -1;
    st = wait_agent(a, 5000);
    assert_true(st != -1);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* Several EXECs in a row on one agent; ids are echoed and nothing leaks. */
static void test_sequence(void **state)
{
    exec_result_t res;
    int i;

    for (i = 0; i < 5; i++) {
        run_exec(*state, 5000, 1 << 20, "", "", "sleep 0.01 & echo $((6 * 7))", "", "", &res);
        assert_string_equal(out_str(&res, 1), "42\n");
        assert_int_equal(res.reason, SG_AGENT_REASON_EXITED);
        free_result(&res);
    }
}

/* ---- kernels (stateful mode) ----------------------------------------- */

#define KERNEL_TIMEOUT_MS 8000

static const char *kernel_dir(void)
{
    static char dir[PATH_MAX];
    const char *env = getenv("SANDGATE_KERNEL_DIR");
    char *p;

    if (env != NULL && env[0] != '\0')
        return env;
    /* __FILE__ is <source>/tests/unit/test_agent_local.c */
    snprintf(dir, sizeof(dir), "%s", __FILE__);
    p = strstr(dir, "tests/unit/test_agent_local.c");
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
static void kexec(agent_t *a, const char *kernel, const char *src, exec_result_t *res)
{
    exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "", "", "", "", kernel, src, res);
}

static void kexpect(agent_t *a, const char *kernel, const char *src, int32_t code, uint32_t state, const char *out)
{
    exec_result_t res;

    kexec(a, kernel, src, &res);
    if (res.reason != SG_AGENT_REASON_EXITED || res.code != code || res.state != state)
        fprintf(stderr, "code %s: reason %u code %d state %u\nstdout: %s\nstderr: %s\n", src, res.reason, res.code,
                res.state, out_str(&res, 1), out_str(&res, 2));
    assert_int_equal(res.reason, SG_AGENT_REASON_EXITED);
    assert_int_equal(res.code, code);
    assert_int_equal(res.sig, 0);
    assert_int_equal(res.state, state);
    assert_string_equal(res.stage, "run");
    if (out != NULL)
        assert_string_equal(out_str(&res, 1), out);
    free_result(&res);
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
    agent_t *a = *state;
    size_t n = 1 << 20, i;
    char *big = malloc(n + 64);

    kexpect(a, PY, "x = 41", 0, SG_AGENT_STATE_NEW, "");
    kexpect(a, PY, "print(x + 1)", 0, SG_AGENT_STATE_KEPT, "42\n");
    kexpect(a, PY, "import math", 0, SG_AGENT_STATE_KEPT, "");
    kexpect(a, PY, "print(math.factorial(5), __name__)", 0, SG_AGENT_STATE_KEPT, "120 __main__\n");
    kexpect(a, PY, "import os\nprint(os.getcwd() == os.environ['SANDGATE_WORKDIR'])", 0, SG_AGENT_STATE_KEPT,
            "True\n");
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
    agent_t *a = *state;
    exec_result_t res;

    kexpect(a, PY, "x = 1", 0, SG_AGENT_STATE_NEW, "");
    kexec(a, PY, "print('before')\nprint(undefined_variable)", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_EXITED);
    assert_int_equal(res.code, 1);
    assert_int_equal(res.state, SG_AGENT_STATE_KEPT);
    assert_string_equal(out_str(&res, 1), "before\n");
    assert_non_null(strstr(out_str(&res, 2), "NameError: name 'undefined_variable' is not defined"));
    assert_non_null(strstr(out_str(&res, 2), "print(undefined_variable)")); /* the source line */
    assert_null(strstr(out_str(&res, 2), "kernel.py"));
    free_result(&res);

    /* A traceback through code of an earlier EXEC shows its lines too. */
    kexpect(a, PY, "def f():\n    return 1 / 0\n", 0, SG_AGENT_STATE_KEPT, "");
    kexec(a, PY, "f()", &res);
    assert_int_equal(res.code, 1);
    assert_int_equal(res.state, SG_AGENT_STATE_KEPT);
    assert_non_null(strstr(out_str(&res, 2), "return 1 / 0"));
    assert_non_null(strstr(out_str(&res, 2), "ZeroDivisionError"));
    assert_null(strstr(out_str(&res, 2), "kernel.py"));
    free_result(&res);

    kexec(a, PY, "if", &res);
    assert_int_equal(res.code, 1);
    assert_int_equal(res.state, SG_AGENT_STATE_KEPT);
    assert_non_null(strstr(out_str(&res, 2), "SyntaxError"));
    assert_null(strstr(out_str(&res, 2), "kernel.py"));
    free_result(&res);

    kexpect(a, PY, "print(x)", 0, SG_AGENT_STATE_KEPT, "1\n");
}

static void test_py_sys_exit(void **state)
{
    agent_t *a = *state;
    exec_result_t res;

    kexpect(a, PY, "y = 5\nimport sys\nsys.exit(3)\nprint('not reached')", 3, SG_AGENT_STATE_NEW, "");
    kexpect(a, PY, "print(y)", 0, SG_AGENT_STATE_KEPT, "5\n");
    kexpect(a, PY, "sys.exit()", 0, SG_AGENT_STATE_KEPT, "");
    kexec(a, PY, "sys.exit('bye')", &res);
    assert_int_equal(res.code, 1);
    assert_int_equal(res.state, SG_AGENT_STATE_KEPT);
    assert_string_equal(out_str(&res, 2), "bye\n");
    free_result(&res);
    kexpect(a, PY, "print(y)", 0, SG_AGENT_STATE_KEPT, "5\n");
}

static void test_py_timeout_loses_state(void **state)
{
    agent_t *a = *state;
    exec_result_t res;

    kexpect(a, PY, "x = 1", 0, SG_AGENT_STATE_NEW, "");
    exec_full(a, 500, 1 << 20, "", "", "", "", PY, "print('spinning')\nwhile True: pass", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_TIMEOUT);
    assert_int_equal(res.state, SG_AGENT_STATE_LOST);
    assert_int_equal(res.code, -1);
    assert_int_equal(res.sig, SIGKILL);
    assert_string_equal(out_str(&res, 1), "spinning\n");
    assert_true(res.wall_s < 3);
    assert_true(res.duration_us >= 500000);
    free_result(&res);

    kexec(a, PY, "print(x)", &res);
    assert_int_equal(res.code, 1);
    assert_int_equal(res.state, SG_AGENT_STATE_NEW);
    assert_non_null(strstr(out_str(&res, 2), "NameError: name 'x' is not defined"));
    free_result(&res);
    ping(a);
}

static void test_py_kernel_ends(void **state)
{
    agent_t *a = *state;
    exec_result_t res;

    kexpect(a, PY, "x = 1", 0, SG_AGENT_STATE_NEW, "");
    kexpect(a, PY, "print('bye')\nimport os\nos._exit(5)", 5, SG_AGENT_STATE_LOST, "bye\n");
    kexpect(a, PY, "print('x' in globals())", 0, SG_AGENT_STATE_NEW, "False\n");

    kexec(a, PY, "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_KILLED);
    assert_int_equal(res.code, -1);
    assert_int_equal(res.sig, SIGTERM);
    assert_int_equal(res.state, SG_AGENT_STATE_LOST);
    free_result(&res);
    kexpect(a, PY, "print(1)", 0, SG_AGENT_STATE_NEW, "1\n");
}

static void test_py_output_cap(void **state)
{
    agent_t *a = *state;
    exec_result_t res;

    kexpect(a, PY, "x = 1", 0, SG_AGENT_STATE_NEW, "");
    exec_full(a, KERNEL_TIMEOUT_MS, 1000, "", "", "", "", PY, "while True: print('y')", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_OUTPUT_LIMIT);
    assert_int_equal(res.state, SG_AGENT_STATE_LOST);
    assert_int_equal(res.out_len[1], 1000);
    assert_int_equal(res.flags, SG_AGENT_EXIT_STDOUT_TRUNCATED);
    assert_memory_equal(res.out[1], "y\ny\n", 4);
    free_result(&res);
    kexpect(a, PY, "print('x' in globals())", 0, SG_AGENT_STATE_NEW, "False\n");
}

/* Processes started by the code die with the EXEC; the kernel lives on. */
static void test_py_children_killed(void **state)
{
    agent_t *a = *state;
    exec_result_t res;
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
    assert_int_equal(res.reason, SG_AGENT_REASON_EXITED);
    assert_int_equal(res.code, 0);
    assert_int_equal(res.state, SG_AGENT_STATE_NEW);
    assert_true(res.wall_s < 5);
    kernel = (pid_t)atoi(out_str(&res, 1));
    free_result(&res);
    sub = read_pid_file(a, "sub.pid");
    esc = read_pid_file(a, "esc.pid");
    assert_alive(kernel);
    assert_dead(sub); /* a zombie until the kernel reaps it */
    assert_gone(esc);  /* orphaned to the agent, which reaped it */

    kexpect(a, PY, "print(p.wait())", 0, SG_AGENT_STATE_KEPT, "-9\n");
    assert_gone(sub);
    assert_alive(kernel);
}

/* A fork() of the kernel copies the interpreter, and the copy runs on to
 * the end of the code; it must end there, as a script's child would, and
 * never answer for the kernel or read its requests. Here the child leaves
 * the code long before the parent does: were its answer taken, this EXEC
 * would end with its 7, and the parent's late answer would end the next. */
static void test_py_fork_copy_never_answers(void **state)
{
    agent_t *a = *state;

    kexpect(a, PY,
            "import os, sys, time\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    print('child')\n"
            "    sys.exit(7)\n"
            "_, st = os.waitpid(pid, 0)\n"
            "time.sleep(0.2)\n"
            "print('parent', os.waitstatus_to_exitcode(st))",
            0, SG_AGENT_STATE_NEW, "child\nparent 7\n");
    /* A child that fails, and one that falls off the end of the code. */
    kexpect(a, PY,
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    raise ValueError('in a copy')\n"
            "time.sleep(0.2)\n"
            "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))",
            0, SG_AGENT_STATE_KEPT, "1\n");
    kexpect(a, PY,
            "pid = os.fork()\n"
            "if pid > 0:\n"
            "    time.sleep(0.2)\n"
            "    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))",
            0, SG_AGENT_STATE_KEPT, "0\n");
    kexpect(a, PY, "print(pid > 0, 'next')", 0, SG_AGENT_STATE_KEPT, "True next\n");
}

/* What a kernel writes between EXECs is discarded and never blocks it. */
static void test_py_background_output(void **state)
{
    agent_t *a = *state;

    kexpect(a, PY,
            "import sys, threading, time\n"
            "done = False\n"
            "def spam():\n"
            "    global done\n"
            "    time.sleep(0.2)\n"
            "    for i in range(3000):\n"
            "        sys.stdout.write('x' * 99 + '\\n')\n"
            "        sys.stderr.write('e' * 99 + '\\n')\n"
            "    done = True\n"
            "threading.Thread(target=spam, daemon=True).start()",
            0, SG_AGENT_STATE_NEW, "");
    usleep(1500000);
    kexpect(a, PY, "print(done)", 0, SG_AGENT_STATE_KEPT, "True\n");
}

static void test_kernel_setup(void **state)
{
    agent_t *a = *state;
    exec_result_t res;

    /* No kernel yet: a failed setup has none to report on. */
    exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "echo installing; exit 7", "libraries", "", "", PY, "x = 1", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_SETUP_FAILED);
    assert_int_equal(res.code, 7);
    assert_string_equal(res.stage, "libraries");
    assert_string_equal(out_str(&res, 1), "installing\n");
    assert_int_equal(res.state, SG_AGENT_STATE_NONE);
    free_result(&res);

    exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "echo prepared", "libraries", "", "", PY, "x = 1\nprint(x)", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_EXITED);
    assert_int_equal(res.code, 0);
    assert_string_equal(res.stage, "run");
    assert_string_equal(out_str(&res, 1), "prepared\n1\n");
    assert_int_equal(res.state, SG_AGENT_STATE_NEW);
    free_result(&res);

    /* The kernel outlives a failed setup and one that timed out. */
    exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "exit 2", "libraries", "", "", PY, "x = 2", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_SETUP_FAILED);
    assert_int_equal(res.state, SG_AGENT_STATE_KEPT);
    free_result(&res);
    exec_full(a, 300, 1 << 20, "sleep 1000", "libraries", "", "", PY, "x = 3", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_TIMEOUT);
    assert_string_equal(res.stage, "libraries");
    assert_int_equal(res.state, SG_AGENT_STATE_KEPT);
    free_result(&res);
    kexpect(a, PY, "print(x)", 0, SG_AGENT_STATE_KEPT, "1\n");

    /* One-shot EXECs in between neither use nor harm it. */
    run_exec(a, 5000, 1 << 20, "", "", "echo one-shot", "", "", &res);
    assert_string_equal(out_str(&res, 1), "one-shot\n");
    free_result(&res);
    kexpect(a, PY, "print(x)", 0, SG_AGENT_STATE_KEPT, "1\n");
}

/* A kernel that ended between EXECs: the next EXEC says so. */
static void test_kernel_dies_between_execs(void **state)
{
    agent_t *a = *state;
    exec_result_t res;

    kexpect(a, PY, "import os, threading\nx = 1\nthreading.Timer(0.2, os._exit, [0]).start()", 0,
            SG_AGENT_STATE_NEW, "");
    usleep(700000);
    /* Setup fails before a new kernel is started: the old one is lost. */
    exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "exit 1", "libraries", "", "", PY, "print(x)", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_SETUP_FAILED);
    assert_int_equal(res.state, SG_AGENT_STATE_LOST);
    free_result(&res);
    /* That was reported: now there is simply none. */
    exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "exit 1", "libraries", "", "", PY, "print(x)", &res);
    assert_int_equal(res.state, SG_AGENT_STATE_NONE);
    free_result(&res);
    kexpect(a, PY, "print('x' in globals())", 0, SG_AGENT_STATE_NEW, "False\n");

    kexpect(a, PY, "import threading, os\nthreading.Timer(0.2, os._exit, [0]).start()", 0, SG_AGENT_STATE_KEPT, "");
    usleep(700000);
    kexpect(a, PY, "print(1)", 0, SG_AGENT_STATE_NEW, "1\n");
}

/* The kernel gets fds 0 to 4 and nothing else, and volunteers for the OOM
 * killer like any command. */
static void test_kernel_environment(void **state)
{
    agent_t *a = *state;

    kexpect(a, PY,
            "import os\n"
            "fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\n"
            "print(fds[:5], len(fds))\n"
            "print(os.readlink('/proc/self/fd/0'))\n"
            "print(open('/proc/self/oom_score_adj').read().strip())\n"
            "print(os.getcwd() == os.environ['SANDGATE_WORKDIR'])",
            0, SG_AGENT_STATE_NEW, "[0, 1, 2, 3, 4] 6\n/dev/null\n1000\nTrue\n");
}

static void test_kernel_cannot_start(void **state)
{
    agent_t *a = *state;
    exec_result_t res;

    exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "", "", "", "", "exec /nonexistent/kernel", "x = 1", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_EXITED);
    assert_int_equal(res.code, 127);
    assert_int_equal(res.state, SG_AGENT_STATE_LOST);
    assert_true(res.out_len[2] > 0);
    assert_true(res.wall_s < 3);
    free_result(&res);
    ping(a);
}

static void test_kernel_malformed_answer(void **state)
{
    agent_t *a = *state;
    exec_result_t res;

    /* Reads the request "1\nx", answers nonsense, and stays. */
    exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "", "", "", "",
              "exec sh -c 'head -c 3 <&3 >/dev/null; echo bogus >&4; exec sleep 1000'", "x", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_KILLED);
    assert_int_equal(res.code, -1);
    assert_int_equal(res.sig, SIGKILL);
    assert_int_equal(res.state, SG_AGENT_STATE_LOST);
    assert_non_null(strstr(out_str(&res, 2), "malformed answer"));
    assert_true(res.wall_s < 3);
    free_result(&res);

    /* Closes its answer pipe and stays: it can never answer. */
    exec_full(a, KERNEL_TIMEOUT_MS, 1 << 20, "", "", "", "", "exec sh -c 'exec 4>&-; exec sleep 1000'", "x", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_KILLED);
    assert_int_equal(res.state, SG_AGENT_STATE_LOST);
    assert_non_null(strstr(out_str(&res, 2), "answer pipe"));
    assert_true(res.wall_s < 3);
    free_result(&res);
    ping(a);
}

/* The kernel dies with the agent. */
static void test_kernel_killed_on_stdin_eof(void **state)
{
    agent_t *a = *state;
    exec_result_t res;
    pid_t kernel;
    int st;

    kexec(a, PY, "import os\nprint(os.getpid())", &res);
    assert_int_equal(res.state, SG_AGENT_STATE_NEW);
    kernel = (pid_t)atoi(out_str(&res, 1));
    free_result(&res);
    assert_alive(kernel);
    close(a->to_agent);
    a->to_agent = -1;
    st = wait_agent(a, 5000);
    assert_true(st != -1);
    assert_true(WIFEXITED(st));
    assert_gone(kernel);
}

static void test_js_state_kept(void **state)
{
    agent_t *a = *state;

    kexpect(a, JS, "let a = 20", 0, SG_AGENT_STATE_NEW, "");
    kexpect(a, JS, "console.log(a * 2 + 2)", 0, SG_AGENT_STATE_KEPT, "42\n");
    kexpect(a, JS, "function f() { return 7 }", 0, SG_AGENT_STATE_KEPT, "");
    kexpect(a, JS, "console.log(f())", 0, SG_AGENT_STATE_KEPT, "7\n");
    kexpect(a, JS, "var v = 'var'; globalThis.g = 'global'", 0, SG_AGENT_STATE_KEPT, "");
    kexpect(a, JS, "console.log(v, g, process.cwd() === __dirname)", 0, SG_AGENT_STATE_KEPT, "var global true\n");
    kexpect(a, JS, "process.exitCode = 3", 3, SG_AGENT_STATE_KEPT, "");
    kexpect(a, JS, "console.log(a)", 0, SG_AGENT_STATE_KEPT, "20\n");
}

/* A run lasts until the asynchronous work it started is over. */
static void test_js_async_output(void **state)
{
    agent_t *a = *state;
    exec_result_t res;

    kexec(a, JS, "setTimeout(() => console.log(\"late\"), 200); console.log(\"early\")", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_EXITED);
    assert_int_equal(res.code, 0);
    assert_int_equal(res.state, SG_AGENT_STATE_NEW);
    assert_string_equal(out_str(&res, 1), "early\nlate\n");
    assert_true(res.wall_s >= 0.2);
    free_result(&res);

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
    agent_t *a = *state;
    exec_result_t res;

    kexpect(a, JS, "let b = 1", 0, SG_AGENT_STATE_NEW, "");
    kexec(a, JS, "throw new Error(\"boom\")", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_EXITED);
    assert_int_equal(res.code, 1);
    assert_int_equal(res.state, SG_AGENT_STATE_KEPT);
    assert_non_null(strstr(out_str(&res, 2), "Error: boom"));
    assert_non_null(strstr(out_str(&res, 2), "<exec-2>:1"));
    assert_null(strstr(out_str(&res, 2), "kernel.js"));
    free_result(&res);

    kexec(a, JS, "(async () => { throw new Error('rejected') })(); 0", &res);
    assert_int_equal(res.code, 1);
    assert_int_equal(res.state, SG_AGENT_STATE_KEPT);
    assert_non_null(strstr(out_str(&res, 2), "Error: rejected"));
    free_result(&res);

    /* An error in a callback ends the run; what it left does not run. */
    kexec(a, JS, "setTimeout(() => { throw new Error('in timer') }, 10); setTimeout(() => console.log('never'), 300)",
          &res);
    assert_int_equal(res.code, 1);
    assert_non_null(strstr(out_str(&res, 2), "Error: in timer"));
    free_result(&res);
    usleep(400000);
    kexpect(a, JS, "console.log(b)", 0, SG_AGENT_STATE_KEPT, "1\n");

    kexec(a, JS, "let = ;", &res);
    assert_int_equal(res.code, 1);
    assert_non_null(strstr(out_str(&res, 2), "SyntaxError"));
    free_result(&res);

    kexpect(a, JS, "process.exit(4)", 4, SG_AGENT_STATE_LOST, "");
    kexpect(a, JS, "console.log(typeof b)", 0, SG_AGENT_STATE_NEW, "undefined\n");
}

static void test_js_forever_promise(void **state)
{
    agent_t *a = *state;
    exec_result_t res;

    kexpect(a, JS, "let c = 1", 0, SG_AGENT_STATE_NEW, "");
    exec_full(a, 1000, 1 << 20, "", "", "", "", JS, "new Promise(() => {})", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_TIMEOUT);
    assert_int_equal(res.state, SG_AGENT_STATE_LOST);
    assert_true(res.wall_s < 3);
    free_result(&res);
    kexpect(a, JS, "console.log(typeof c)", 0, SG_AGENT_STATE_NEW, "undefined\n");
}

static void test_js_require(void **state)
{
    agent_t *a = *state;
    static const char mod[] = "exports.answer = 42;\n";

    free(expect_reply(a, put_file(a, "node_modules/m/index.js", 0644, mod, sizeof(mod) - 1), SG_AGENT_OK).payload);
    free(expect_reply(a, put_file(a, "lib.js", 0644, "module.exports = 'local';\n", 26), SG_AGENT_OK).payload);
    kexpect(a, JS, "console.log(require('m').answer, require('./lib'), require.main === module)", 0,
            SG_AGENT_STATE_NEW, "42 local true\n");
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup_agent, teardown_agent)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_ready_and_ping),
        T(test_exit_code_and_streams),
        T(test_environment),
        T(test_timeout),
        T(test_timeout_in_setup),
        T(test_escapees_killed),
        T(test_escapee_killed_on_timeout),
        T(test_output_cap),
        T(test_output_cap_stderr),
        T(test_output_chunks),
        T(test_setup_failed),
        T(test_setup_then_run),
        T(test_code_file),
        T(test_code_file_unwritable),
        T(test_killed_by_signal),
        T(test_put_get_round_trip),
        T(test_refused_paths),
        T(test_get_errors),
        T(test_malformed_requests),
        T(test_oversize_exits),
        T(test_stdin_eof_exits),
        T(test_sequence),
        T(test_py_state_kept),
        T(test_py_exception),
        T(test_py_sys_exit),
        T(test_py_timeout_loses_state),
        T(test_py_kernel_ends),
        T(test_py_output_cap),
        T(test_py_children_killed),
        T(test_py_background_output),
        T(test_py_fork_copy_never_answers),
        T(test_kernel_setup),
        T(test_kernel_dies_between_execs),
        T(test_kernel_environment),
        T(test_kernel_cannot_start),
        T(test_kernel_malformed_answer),
        T(test_kernel_killed_on_stdin_eof),
        T(test_js_state_kept),
        T(test_js_async_output),
        T(test_js_errors),
        T(test_js_forever_promise),
        T(test_js_require),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
