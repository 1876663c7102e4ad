/*
 * sgunit.c — see sgunit.h.
 */
#include "sgunit.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <grp.h>
#include <unistd.h>

uint32_t sgunit_xorshift32(uint32_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 17;
    *state ^= *state << 5;
    return *state;
}

double sgunit_now(void)
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
        int ms = (int)((deadline - sgunit_now()) * 1000);
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
int sgunit_read_msg(sgunit_agent_t *a, sgunit_msg_t *m, int timeout_ms)
{
    uint8_t raw[SG_AGENT_HEADER_SIZE];
    sg_agent_header_t h;
    double deadline = sgunit_now() + timeout_ms / 1000.0;

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

void sgunit_send_buf(sgunit_agent_t *a, sg_agent_buf_t *b)
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

void sgunit_send_raw(sgunit_agent_t *a, uint8_t type, uint32_t id, const void *payload, size_t len)
{
    sg_agent_buf_t b;

    sg_agent_buf_init(&b);
    assert_int_equal(sg_agent_msg_begin(&b, type, id), 0);
    assert_int_equal(sg_agent_put_rest(&b, payload, len), 0);
    sg_agent_msg_end(&b, 0);
    sgunit_send_buf(a, &b);
}

static const char *agent_bin(void)
{
    const char *bin = getenv("SANDGATE_AGENT_BIN");

    return bin != NULL && bin[0] != '\0' ? bin : "../proxy/sandgate-agent";
}

int sgunit_setup_agent(void **state)
{
    sgunit_agent_t *a = calloc(1, sizeof(*a));
    int in[2], outp[2];
    sgunit_msg_t m;
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
    /* An agent started as root works on files as the sandbox user and runs
     * its children as that user (agent/creds.h), as in a sandbox. */
    if (geteuid() == 0)
        assert_int_equal(chown(a->dir, 1000, 1000), 0);
    assert_int_equal(pipe2(in, O_CLOEXEC), 0);
    assert_int_equal(pipe2(outp, O_CLOEXEC), 0);
    a->pid = fork();
    assert_true(a->pid >= 0);
    if (a->pid == 0) {
        dup2(in[0], 0);
        dup2(outp[1], 1);
        setenv("SANDGATE_WORKDIR", a->dir, 1);
        /* SGUNIT_AGENT_AS_USER=1: the agent started as the sandbox user, as
         * an older proxy's containers start it (no uid split: creds.h) */
        const char *as_user = getenv("SGUNIT_AGENT_AS_USER");
        if (as_user != NULL && strcmp(as_user, "1") == 0 && geteuid() == 0 &&
            (setgroups(0, NULL) != 0 || setresgid(1000, 1000, 1000) != 0 || setresuid(1000, 1000, 1000) != 0))
            _exit(126);
        execl(agent_bin(), "sandgate-agent", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(outp[1]);
    a->to_agent = in[1];
    a->from_agent = outp[0];
    a->next_id = 1;
    a->row = *state;
    *state = a;

    assert_int_equal(sgunit_read_msg(a, &m, SGUNIT_MSG_TIMEOUT_MS), 0);
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
int sgunit_wait_agent(sgunit_agent_t *a, int timeout_ms)
{
    double deadline = sgunit_now() + timeout_ms / 1000.0;
    int st;

    while (sgunit_now() < deadline) {
        pid_t p = waitpid(a->pid, &st, WNOHANG);
        if (p == a->pid) {
            a->pid = -1;
            return st;
        }
        usleep(10000);
    }
    return -1;
}

int sgunit_teardown_agent(void **state)
{
    sgunit_agent_t *a = *state;

    if (a == NULL)
        return 0;
    if (a->to_agent >= 0)
        close(a->to_agent);
    if (a->pid > 0 && sgunit_wait_agent(a, 5000) == -1) {
        kill(a->pid, SIGKILL);
        waitpid(a->pid, NULL, 0);
    }
    close(a->from_agent);
    nftw(a->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(a);
    return 0;
}

/* Send an EXEC and collect everything up to its EXIT. */
void sgunit_exec_full(sgunit_agent_t *a, uint32_t timeout_ms, uint32_t cap, const char *setup, const char *stage,
                      const char *run, const char *file_path, const char *kernel, const char *code,
                      sgunit_result_t *res)
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
    t0 = sgunit_now();
    sgunit_send_buf(a, &b);

    for (;;) {
        sgunit_msg_t m;
        sg_agent_reader_t r;
        const uint8_t *s;
        size_t len;
        uint32_t stream;

        assert_int_equal(sgunit_read_msg(a, &m, SGUNIT_MSG_TIMEOUT_MS), 0);
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
        if (m.type == SG_AGENT_RESULT) {
            char head[24];
            int hl = snprintf(head, sizeof(head), "%u\n", m.len);
            res->results = realloc(res->results, res->results_len + (size_t)hl + m.len + 2);
            assert_non_null(res->results);
            memcpy(res->results + res->results_len, head, (size_t)hl);
            memcpy(res->results + res->results_len + hl, m.payload, m.len);
            res->results_len += (size_t)hl + m.len;
            res->results[res->results_len++] = '\n';
            res->results[res->results_len] = '\0';
            res->nresults++;
            free(m.payload);
            continue;
        }
        if (m.type == SG_AGENT_FILES) {
            sgunit_msg_t copy = m;
            sg_agent_header_t h = {m.type, m.id, m.len};
            sg_agent_reply_t rep;
            assert_false(res->files_sent); /* once per EXEC */
            assert_int_equal(sg_agent_reply_decode(&h, copy.payload, &rep), 0);
            res->files_sent = 1;
            res->files_flags = rep.files_flags;
            res->nfiles = rep.files_count;
            sg_agent_reader_init(&r, rep.data, rep.data_len);
            for (uint32_t i = 0; i < rep.files_count; i++) {
                uint64_t size;
                size_t have = res->files != NULL ? strlen(res->files) : 0;
                assert_int_equal(sg_agent_get_str(&r, &s, &len), 0);
                assert_int_equal(sg_agent_get_u64(&r, &size), 0);
                res->files = realloc(res->files, have + len + 32);
                assert_non_null(res->files);
                snprintf(res->files + have, len + 32, "%.*s %llu\n", (int)len, (const char *)s,
                         (unsigned long long)size);
            }
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
    res->wall_s = sgunit_now() - t0;
}

/* One-shot mode: there is never a kernel to report on. */
void sgunit_run_exec(sgunit_agent_t *a, uint32_t timeout_ms, uint32_t cap, const char *setup, const char *stage,
                     const char *run, const char *file_path, const char *code, sgunit_result_t *res)
{
    sgunit_exec_full(a, timeout_ms, cap, setup, stage, run, file_path, "", code, res);
    assert_int_equal(res->state, SG_AGENT_STATE_NONE);
}

void sgunit_free_result(sgunit_result_t *res)
{
    free(res->out[1]);
    free(res->out[2]);
    free(res->results);
    free(res->files);
}

const char *sgunit_out_str(sgunit_result_t *res, int stream)
{
    return res->out[stream] != NULL ? (const char *)res->out[stream] : "";
}

void sgunit__expect(sgunit_result_t *res, const sgunit_want_t *want, const char *file, int line)
{
    const struct {
        const sgunit_is_t *want;
        int64_t got;
    } ints[] = {{&want->reason, res->reason},
                {&want->code, res->code},
                {&want->sig, res->sig},
                {&want->state, res->state},
                {&want->flags, res->flags}};
    const struct {
        const char *want, *got;
    } strs[] = {{want->stage, res->stage}, {want->out, sgunit_out_str(res, 1)}, {want->err, sgunit_out_str(res, 2)}};

    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
        if (ints[i].want->set)
            _assert_int_equal(cast_to_largest_integral_type(ints[i].got),
                              cast_to_largest_integral_type(ints[i].want->v), file, line);
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
        if (strs[i].want != NULL)
            _assert_string_equal(strs[i].got, strs[i].want, file, line);
    if (want->wall_below > 0)
        _assert_true(cast_to_largest_integral_type(res->wall_s < want->wall_below), "wall_s < wall_below", file, line);
}

/* Expect a single reply of `type`; returns it (payload owned by caller). */
sgunit_msg_t sgunit_expect_reply(sgunit_agent_t *a, uint32_t id, uint8_t type)
{
    sgunit_msg_t m;

    assert_int_equal(sgunit_read_msg(a, &m, SGUNIT_MSG_TIMEOUT_MS), 0);
    assert_int_equal(m.id, id);
    if (m.type != type && m.type == SG_AGENT_ERROR && m.len > 8)
        fprintf(stderr, "unexpected ERROR: %.*s\n", (int)(m.len - 8), (const char *)m.payload + 8);
    assert_int_equal(m.type, type);
    return m;
}

uint32_t sgunit_put_file(sgunit_agent_t *a, const char *path, uint32_t mode, const void *data, size_t len)
{
    sg_agent_buf_t b;
    uint32_t id = a->next_id++;

    sg_agent_buf_init(&b);
    assert_int_equal(sg_agent_msg_begin(&b, SG_AGENT_PUT_FILE, id), 0);
    sg_agent_put_str(&b, path, strlen(path));
    sg_agent_put_u32(&b, mode);
    assert_int_equal(sg_agent_put_rest(&b, data, len), 0);
    sg_agent_msg_end(&b, 0);
    sgunit_send_buf(a, &b);
    return id;
}

uint32_t sgunit_get_file(sgunit_agent_t *a, const char *path, uint32_t max_bytes)
{
    sg_agent_buf_t b;
    uint32_t id = a->next_id++;

    sg_agent_buf_init(&b);
    assert_int_equal(sg_agent_msg_begin(&b, SG_AGENT_GET_FILE, id), 0);
    sg_agent_put_str(&b, path, strlen(path));
    assert_int_equal(sg_agent_put_u32(&b, max_bytes), 0);
    sg_agent_msg_end(&b, 0);
    sgunit_send_buf(a, &b);
    return id;
}

/* Expect ERROR with `code` and a non-empty message. */
void sgunit_expect_error(sgunit_agent_t *a, uint32_t id, uint32_t code)
{
    sgunit_msg_t m = sgunit_expect_reply(a, id, SG_AGENT_ERROR);
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

void sgunit_ping(sgunit_agent_t *a)
{
    uint32_t id = a->next_id++;
    sgunit_msg_t m;
    sg_agent_reader_t r;
    uint64_t v = 1;

    sgunit_send_raw(a, SG_AGENT_PING, id, NULL, 0);
    m = sgunit_expect_reply(a, id, SG_AGENT_OK);
    sg_agent_reader_init(&r, m.payload, m.len);
    assert_int_equal(sg_agent_get_u64(&r, &v), 0);
    assert_true(v == 0);
    assert_int_equal(r.off, r.len);
    free(m.payload);
}

pid_t sgunit_read_pid_file(sgunit_agent_t *a, const char *name)
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

void sgunit_assert_gone(pid_t pid)
{
    assert_true(pid > 1);
    assert_int_equal(kill(pid, 0), -1);
    assert_int_equal(errno, ESRCH);
}
