/*
 * test_agent_local.c — the real sandgate-agent binary in one-shot mode, run
 * as an ordinary child process with pipes on its stdin and stdout and a
 * fresh work dir (tests/support/sgunit.h): executions, their limits and
 * escapees, files, malformed requests. Its kernels (stateful mode):
 * test_agent_kernels.c.
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

/* ---- tests ----------------------------------------------------------- */

static void test_ready_and_ping(void **state)
{
    sgunit_ping(*state); /* READY was checked by the setup */
}

static void test_exit_code_and_streams(void **state)
{
    sgunit_result_t res;

    sgunit_run_exec(*state, 5000, 1 << 20, "", "", "echo hi; echo err >&2; exit 3", "", "", &res);
    SGUNIT_EXPECT(&res, .out = "hi\n", .err = "err\n", .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED),
                  .code = SGUNIT_IS(3), .sig = SGUNIT_IS(0), .flags = SGUNIT_IS(0), .stage = "run");
    assert_true(res.duration_us > 0 && res.duration_us < 5000000);
    sgunit_free_result(&res);
}

static void test_environment(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;
    char want[256];

    /* cwd is the work dir, stdin is empty, SANDGATE_FILE is set, and user
     * code volunteers for the OOM killer. */
    sgunit_run_exec(a, 5000, 1 << 20, "", "", "pwd; cat; echo \"[$SANDGATE_FILE]\"; cat /proc/self/oom_score_adj", "",
                    "", &res);
    snprintf(want, sizeof(want), "%s\n[]\n1000\n", a->dir);
    SGUNIT_EXPECT(&res, .out = want, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(0));
    sgunit_free_result(&res);
}

static void test_timeout(void **state)
{
    sgunit_result_t res;

    sgunit_run_exec(*state, 300, 1 << 20, "", "", "sleep 1000", "", "", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_TIMEOUT), .code = SGUNIT_IS(-1), .sig = SGUNIT_IS(SIGKILL),
                  .stage = "run", .wall_below = 1.5);
    assert_true(res.duration_us >= 300000 && res.duration_us < 1500000);
    sgunit_free_result(&res);
    sgunit_ping(*state);
}

static void test_timeout_in_setup(void **state)
{
    sgunit_result_t res;

    sgunit_run_exec(*state, 300, 1 << 20, "sleep 1000", "compile", "echo never", "", "", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_TIMEOUT), .stage = "compile", .out = "", .wall_below = 1.5);
    sgunit_free_result(&res);
}

/* Escapees: a setsid'd group that keeps the output pipes open, and a
 * double-forked daemon that closed them. Both must be dead (and reaped) once
 * EXIT arrives, and EXIT must not wait for the pipes to close. */
static void test_escapees_killed(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;

    sgunit_run_exec(a, 20000, 1 << 20, "", "",
                    "setsid sh -c 'sleep 1000 & echo $! > esc1.tmp; mv esc1.tmp esc1.pid; sleep 1000' &\n"
                    "setsid sh -c 'sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > esc2.tmp; mv esc2.tmp esc2.pid' "
                    "</dev/null >/dev/null 2>&1 &\n"
                    "while [ ! -e esc1.pid ] || [ ! -e esc2.pid ]; do sleep 0.02; done\n"
                    "echo started",
                    "", "", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(0), .out = "started\n",
                  .wall_below = 5);
    sgunit_assert_gone(sgunit_read_pid_file(a, "esc1.pid"));
    sgunit_assert_gone(sgunit_read_pid_file(a, "esc2.pid"));
    sgunit_free_result(&res);
    sgunit_ping(a);
}

/* Escapees are killed on timeout too. */
static void test_escapee_killed_on_timeout(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;

    sgunit_run_exec(a, 500, 1 << 20, "", "",
                    "setsid sh -c 'sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > esc.tmp; mv esc.tmp esc.pid' "
                    "</dev/null >/dev/null 2>&1; sleep 1000",
                    "", "", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_TIMEOUT);
    sgunit_assert_gone(sgunit_read_pid_file(a, "esc.pid"));
    sgunit_free_result(&res);
}

static void test_output_cap(void **state)
{
    sgunit_result_t res;

    sgunit_run_exec(*state, 10000, 1000, "", "", "yes", "", "", &res);
    assert_int_equal(res.reason, SG_AGENT_REASON_OUTPUT_LIMIT);
    assert_int_equal(res.out_len[1], 1000);
    assert_int_equal(res.out_len[2], 0);
    assert_true(res.flags & SG_AGENT_EXIT_STDOUT_TRUNCATED);
    assert_false(res.flags & SG_AGENT_EXIT_STDERR_TRUNCATED);
    assert_memory_equal(res.out[1], "y\ny\ny\n", 6);
    sgunit_free_result(&res);
    sgunit_ping(*state);
}

static void test_output_cap_stderr(void **state)
{
    sgunit_result_t res;

    sgunit_run_exec(*state, 10000, 10, "", "", "echo ok; echo 0123456789abcdef >&2; sleep 1000", "", "", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_OUTPUT_LIMIT), .out = "ok\n",
                  .flags = SGUNIT_IS(SG_AGENT_EXIT_STDERR_TRUNCATED), .wall_below = 5);
    assert_int_equal(res.out_len[2], 10);
    assert_memory_equal(res.out[2], "0123456789", 10);
    sgunit_free_result(&res);
}

/* Output exactly at the cap is not a limit; large output comes in chunks. */
static void test_output_chunks(void **state)
{
    sgunit_result_t res;

    sgunit_run_exec(*state, 10000, 100000, "", "", "head -c 100000 /dev/zero", "", "", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(0), .flags = SGUNIT_IS(0));
    assert_int_equal(res.out_len[1], 100000);
    assert_true(res.chunks >= 4); /* 32 KiB at most each */
    sgunit_free_result(&res);
}

static void test_setup_failed(void **state)
{
    sgunit_result_t res;

    sgunit_run_exec(*state, 5000, 1 << 20, "echo compiling; exit 7", "compile", "echo never", "", "", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_SETUP_FAILED), .code = SGUNIT_IS(7), .sig = SGUNIT_IS(0),
                  .stage = "compile", .out = "compiling\n");
    sgunit_free_result(&res);
}

static void test_setup_then_run(void **state)
{
    sgunit_result_t res;

    sgunit_run_exec(*state, 5000, 1 << 20, "echo built > artefact", "compile", "cat artefact; exit 0", "", "", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(0), .stage = "run",
                  .out = "built\n");
    sgunit_free_result(&res);
}

static void test_code_file(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;
    char path[128], buf[64] = "";
    struct stat st;
    FILE *f;

    snprintf(path, sizeof(path), "%s/src/deep/main.py", a->dir);
    sgunit_run_exec(a, 5000, 1 << 20, "", "", "cat \"$SANDGATE_FILE\"", path, "print(42)\n", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED), .code = SGUNIT_IS(0), .out = "print(42)\n");
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    assert_string_equal(buf, "print(42)\n");
    sgunit_free_result(&res);
}

static void test_code_file_unwritable(void **state)
{
    sgunit_agent_t *a = *state;
    sgunit_result_t res;
    char path[128];
    int fd;

    /* A regular file where a directory should be: fails even for root. */
    snprintf(path, sizeof(path), "%s/plain", a->dir);
    fd = open(path, O_WRONLY | O_CREAT, 0644);
    assert_true(fd >= 0);
    close(fd);
    snprintf(path, sizeof(path), "%s/plain/main.py", a->dir);
    sgunit_run_exec(a, 5000, 1 << 20, "", "", "echo never", path, "x", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_START_FAILED), .out = "");
    assert_true(res.out_len[2] > 0);
    assert_non_null(strstr(sgunit_out_str(&res, 2), "main.py"));
    sgunit_free_result(&res);
    sgunit_ping(a);
}

static void test_killed_by_signal(void **state)
{
    sgunit_result_t res;

    sgunit_run_exec(*state, 5000, 1 << 20, "", "", "kill -TERM $$", "", "", &res);
    SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_KILLED), .code = SGUNIT_IS(-1), .sig = SGUNIT_IS(SIGTERM));
    sgunit_free_result(&res);
}

static void test_put_get_round_trip(void **state)
{
    sgunit_agent_t *a = *state;
    static const uint8_t data[] = {'b', 'i', 'n', 0, 1, 2, 0xff, '\n'};
    char path[128];
    struct stat st;
    uint32_t id;
    sgunit_msg_t m;
    sg_agent_reader_t r;
    uint64_t size;
    const uint8_t *s;
    size_t len;

    id = sgunit_put_file(a, "dir/sub/f.bin", 0600, data, sizeof(data));
    m = sgunit_expect_reply(a, id, SG_AGENT_OK);
    sg_agent_reader_init(&r, m.payload, m.len);
    assert_int_equal(sg_agent_get_u64(&r, &size), 0);
    assert_true(size == sizeof(data));
    free(m.payload);

    snprintf(path, sizeof(path), "%s/dir/sub/f.bin", a->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0600);

    id = sgunit_get_file(a, "dir/sub/f.bin", 1024);
    m = sgunit_expect_reply(a, id, SG_AGENT_FILE);
    sg_agent_reader_init(&r, m.payload, m.len);
    sg_agent_get_rest(&r, &s, &len);
    assert_int_equal(len, sizeof(data));
    assert_memory_equal(s, data, sizeof(data));
    free(m.payload);

    /* The same file by its absolute path, and overwritten shorter. */
    id = sgunit_put_file(a, path, 0644, "new", 3);
    free(sgunit_expect_reply(a, id, SG_AGENT_OK).payload);
    id = sgunit_get_file(a, path, 3); /* exactly max_bytes is allowed */
    m = sgunit_expect_reply(a, id, SG_AGENT_FILE);
    assert_int_equal(m.len, 3);
    assert_memory_equal(m.payload, "new", 3);
    free(m.payload);

    /* An empty file. */
    id = sgunit_put_file(a, "./empty", 0644, "", 0);
    free(sgunit_expect_reply(a, id, SG_AGENT_OK).payload);
    id = sgunit_get_file(a, "empty", 0);
    m = sgunit_expect_reply(a, id, SG_AGENT_FILE);
    assert_int_equal(m.len, 0);
    free(m.payload);
}

static void test_refused_paths(void **state)
{
    sgunit_agent_t *a = *state;
    static const char *const refused[] = {"../x", "/etc/passwd", "a/../../x", "..",         "dir/..", "link/passwd",
                                          "link", "dir",         "/tmp",      "dir/file/x", ""};
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
        sgunit_expect_error(a, sgunit_get_file(a, refused[i], 1 << 20), SG_AGENT_ERR_PATH);
        sgunit_expect_error(a, sgunit_put_file(a, refused[i], 0644, "x", 1), SG_AGENT_ERR_PATH);
    }
    /* Work dir itself, by absolute path. */
    sgunit_expect_error(a, sgunit_get_file(a, a->dir, 1 << 20), SG_AGENT_ERR_PATH);
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
        sgunit_send_buf(a, &b);
        sgunit_expect_error(a, id, SG_AGENT_ERR_PATH);
    }
}

static void test_get_errors(void **state)
{
    sgunit_agent_t *a = *state;
    uint32_t id;

    sgunit_expect_error(a, sgunit_get_file(a, "missing", 100), SG_AGENT_ERR_NOT_FOUND);
    sgunit_expect_error(a, sgunit_get_file(a, "no/such/dir/file", 100), SG_AGENT_ERR_NOT_FOUND);
    id = sgunit_put_file(a, "big", 0644, "0123456789", 10);
    free(sgunit_expect_reply(a, id, SG_AGENT_OK).payload);
    sgunit_expect_error(a, sgunit_get_file(a, "big", 9), SG_AGENT_ERR_TOO_LARGE);
}

static void test_malformed_requests(void **state)
{
    sgunit_agent_t *a = *state;
    uint8_t hdr[SG_AGENT_HEADER_SIZE] = {SG_AGENT_PING, 1, 0, 0, 0, 0, 0, 77, 0, 0, 0, 0};

    sgunit_send_raw(a, SG_AGENT_EXEC, 50, "abc", 3);
    sgunit_expect_error(a, 50, SG_AGENT_ERR_BAD_REQUEST);
    sgunit_ping(a);

    sgunit_send_raw(a, 99, 51, "", 0);
    sgunit_expect_error(a, 51, SG_AGENT_ERR_BAD_REQUEST);
    sgunit_send_raw(a, SG_AGENT_OK, 52, "", 0); /* a reply type is not a request */
    sgunit_expect_error(a, 52, SG_AGENT_ERR_BAD_REQUEST);
    sgunit_send_raw(a, SG_AGENT_GET_FILE, 53,
                    "\0\0\0\x05"
                    "ab",
                    6); /* string past the end */
    sgunit_expect_error(a, 53, SG_AGENT_ERR_BAD_REQUEST);
    sgunit_send_raw(a, SG_AGENT_PUT_FILE, 54,
                    "\0\0\0\x01"
                    "a",
                    5); /* no mode */
    sgunit_expect_error(a, 54, SG_AGENT_ERR_BAD_REQUEST);

    /* Non-zero flags: the payload length is still trusted, the request is not. */
    assert_int_equal(write(a->to_agent, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
    sgunit_expect_error(a, 77, SG_AGENT_ERR_BAD_REQUEST);
    sgunit_ping(a);
}

static void test_oversize_exits(void **state)
{
    sgunit_agent_t *a = *state;
    uint8_t hdr[SG_AGENT_HEADER_SIZE] = {SG_AGENT_PING, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff};
    int st;

    /* The stream cannot be resynchronised: the agent must leave, not wait
     * for four gigabytes. */
    assert_int_equal(write(a->to_agent, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
    st = sgunit_wait_agent(a, 5000);
    assert_true(st != -1);
    assert_true(WIFEXITED(st));
}

static void test_stdin_eof_exits(void **state)
{
    sgunit_agent_t *a = *state;
    int st;

    close(a->to_agent);
    a->to_agent = -1;
    st = sgunit_wait_agent(a, 5000);
    assert_true(st != -1);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* Several EXECs in a row on one agent; ids are echoed and nothing leaks. */
static void test_sequence(void **state)
{
    sgunit_result_t res;
    int i;

    for (i = 0; i < 5; i++) {
        sgunit_run_exec(*state, 5000, 1 << 20, "", "", "sleep 0.01 & echo $((6 * 7))", "", "", &res);
        SGUNIT_EXPECT(&res, .out = "42\n", .reason = SGUNIT_IS(SG_AGENT_REASON_EXITED));
        sgunit_free_result(&res);
    }
}

/* The resynchronisation of a proxy that re-attaches (agent_proto.h): the
 * proxy sends SIGUSR1, then SYNC, until the SYNC_OK of that round comes;
 * what the agent was reading is dropped. 0, or -1 after 10 rounds. */
static int resync(sgunit_agent_t *a, uint64_t nonce)
{
    for (int round = 0; round < 10; round++) {
        uint32_t id = 0x80000000u | (uint32_t)round;
        sg_agent_buf_t b;
        sgunit_msg_t m;

        assert_int_equal(kill(a->pid, SIGUSR1), 0);
        usleep(50 * 1000 << (round < 4 ? round : 4));
        sg_agent_buf_init(&b);
        assert_int_equal(sg_agent_msg_begin(&b, SG_AGENT_SYNC, id), 0);
        assert_int_equal(sg_agent_put_u64(&b, nonce), 0);
        sg_agent_msg_end(&b, 0);
        sgunit_send_buf(a, &b);
        while (sgunit_read_msg(a, &m, 1000) == 0) {
            int mine = m.type == SG_AGENT_SYNC_OK && m.id == id;
            if (mine) {
                sg_agent_header_t h = {m.type, m.id, m.len};
                sg_agent_reply_t r;
                assert_int_equal(m.len, SG_AGENT_SYNC_OK_LEN);
                assert_int_equal(sg_agent_reply_decode(&h, m.payload, &r), 0);
                assert_true(r.ok_value == nonce);
                assert_int_equal(r.version, SG_AGENT_PROTO_VERSION);
                assert_int_equal(r.kernel, 0);
            }
            free(m.payload);
            if (mine)
                return 0;
        }
    }
    return -1;
}

/* A request cut off half-way (its proxy died while writing it) is dropped
 * at the resynchronisation: nothing of it is written, and the agent serves
 * the next requests. */
static void test_resync_drops_partial_request(void **state)
{
    sgunit_agent_t *a = *state;
    uint8_t hdr[SG_AGENT_HEADER_SIZE] = {SG_AGENT_PUT_FILE, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0x10, 0};
    uint8_t part[100] = {0, 0, 0, 4, 'h', 'a', 'l', 'f', 0, 0, 1, 0xa4};

    assert_int_equal(write(a->to_agent, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
    assert_int_equal(write(a->to_agent, part, sizeof(part)), (ssize_t)sizeof(part));
    assert_int_equal(resync(a, 0x0123456789abcdefULL), 0);
    sgunit_ping(a);
    sgunit_expect_error(a, sgunit_get_file(a, "half", 1024), SG_AGENT_ERR_NOT_FOUND);
    /* and again, between requests */
    assert_int_equal(resync(a, 42), 0);
    sgunit_ping(a);
}

/* A SYNC whose payload is not one 64-bit nonce is refused. */
static void test_sync_payload_checked(void **state)
{
    sgunit_agent_t *a = *state;

    sgunit_send_raw(a, SG_AGENT_SYNC, 60, "abc", 3);
    sgunit_expect_error(a, 60, SG_AGENT_ERR_BAD_REQUEST);
    sgunit_ping(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SGUNIT_AGENT_TEST(test_ready_and_ping),
        SGUNIT_AGENT_TEST(test_exit_code_and_streams),
        SGUNIT_AGENT_TEST(test_environment),
        SGUNIT_AGENT_TEST(test_timeout),
        SGUNIT_AGENT_TEST(test_timeout_in_setup),
        SGUNIT_AGENT_TEST(test_escapees_killed),
        SGUNIT_AGENT_TEST(test_escapee_killed_on_timeout),
        SGUNIT_AGENT_TEST(test_output_cap),
        SGUNIT_AGENT_TEST(test_output_cap_stderr),
        SGUNIT_AGENT_TEST(test_output_chunks),
        SGUNIT_AGENT_TEST(test_setup_failed),
        SGUNIT_AGENT_TEST(test_setup_then_run),
        SGUNIT_AGENT_TEST(test_code_file),
        SGUNIT_AGENT_TEST(test_code_file_unwritable),
        SGUNIT_AGENT_TEST(test_killed_by_signal),
        SGUNIT_AGENT_TEST(test_put_get_round_trip),
        SGUNIT_AGENT_TEST(test_refused_paths),
        SGUNIT_AGENT_TEST(test_get_errors),
        SGUNIT_AGENT_TEST(test_malformed_requests),
        SGUNIT_AGENT_TEST(test_oversize_exits),
        SGUNIT_AGENT_TEST(test_stdin_eof_exits),
        SGUNIT_AGENT_TEST(test_sequence),
        SGUNIT_AGENT_TEST(test_resync_drops_partial_request),
        SGUNIT_AGENT_TEST(test_sync_payload_checked),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
