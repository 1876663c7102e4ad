/*
 * sgunit.h — what the unit suites of tests/unit/ share: table-driven
 * tests (a cmocka test per row), and the real
 * sandgate-agent binary run as an ordinary child process (not PID 1, not in
 * a container) with pipes on its stdin and stdout and a fresh work dir,
 * driven message by message over its protocol (proxy/agent/agent_proto.h). Every
 * read has a deadline, so a broken agent fails the test instead of hanging
 * it.
 *
 * The binary comes from SANDGATE_AGENT_BIN, else ../proxy/sandgate-agent
 * relative to the cwd (ctest runs unit tests from build/tests). Functions
 * assert with cmocka.
 */
#ifndef SANDGATE_SGUNIT_H
#define SANDGATE_SGUNIT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <sys/types.h>

#include <cmocka.h>

#include "../../proxy/agent/agent_proto.h"

/* the longest wait for one message (25 s): a kernel that never starts takes
 * its run's timeout and SG_AGENT_KERNEL_BOOT_MS more (agent_proto.h); 10 s
 * cover the run's own timeout and the agent's kill */
#define SGUNIT_MSG_TIMEOUT_MS (SG_AGENT_KERNEL_BOOT_MS + 10000)

typedef struct {
    pid_t pid;
    int to_agent;   /* its stdin */
    int from_agent; /* its stdout */
    char dir[64];   /* its work dir */
    uint32_t next_id;
    const void *row; /* the test's row (its initial state), for a table-driven suite */
} sgunit_agent_t;

typedef struct {
    uint8_t type;
    uint32_t id;
    uint32_t len;
    uint8_t *payload;
} sgunit_msg_t;

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
    /* RESULT records, each as "<length>\n<record>\n" (NUL-terminated) */
    char *results;
    size_t results_len;
    size_t nresults;
    int files_sent; /* a FILES message came before the EXIT */
    uint32_t files_flags;
    uint32_t nfiles;
    char *files; /* "<path> <size>\n" per entry, NUL-terminated */
} sgunit_result_t;

/* The cmocka test of a row of a table-driven suite (a pointer to a struct
 * whose member `name` names the test): test_func run with the row as its
 * state. */
#define SGUNIT_ROW_TEST(test_func, row) ((struct CMUnitTest){(row)->name, (test_func), NULL, NULL, (void *)(row)})

/* xorshift32: the next of a deterministic sequence of numbers (a random
 * test that fails reproduces), *state its non-zero state. */
uint32_t sgunit_xorshift32(uint32_t *state);

/* The monotonic clock, in seconds. */
double sgunit_now(void);

/* The cmocka fixtures of a test that talks to an agent: the setup starts
 * one (*state is its sgunit_agent_t) and checks its READY (version, work
 * dir); the teardown closes its stdin, waits for it (else SIGKILL) and
 * removes the work dir. */
int sgunit_setup_agent(void **state);
int sgunit_teardown_agent(void **state);
#define SGUNIT_AGENT_TEST(f) cmocka_unit_test_setup_teardown(f, sgunit_setup_agent, sgunit_teardown_agent)
/* The same for a row of a table (a pointer to a struct whose member `name`
 * names the test): the agent's `row`. */
#define SGUNIT_AGENT_ROW_TEST(f, r)                                                                                    \
    ((struct CMUnitTest){(r)->name, (f), sgunit_setup_agent, sgunit_teardown_agent, (void *)(r)})
/* Wait up to timeout_ms for the agent to exit; returns its wait status or -1. */
int sgunit_wait_agent(sgunit_agent_t *a, int timeout_ms);

/* One whole message within timeout_ms, or -1. */
int sgunit_read_msg(sgunit_agent_t *a, sgunit_msg_t *m, int timeout_ms);
/* Write a message whole to the agent (and free b). */
void sgunit_send_buf(sgunit_agent_t *a, sg_agent_buf_t *b);
/* A message of `type` and `id` with `payload` as it is. */
void sgunit_send_raw(sgunit_agent_t *a, uint8_t type, uint32_t id, const void *payload, size_t len);
/* Expect a single reply of `type`; returns it (payload owned by caller). */
sgunit_msg_t sgunit_expect_reply(sgunit_agent_t *a, uint32_t id, uint8_t type);
/* Expect ERROR with `code` and a non-empty message. */
void sgunit_expect_error(sgunit_agent_t *a, uint32_t id, uint32_t code);
/* PING, and its OK (counter 0). */
void sgunit_ping(sgunit_agent_t *a);

/* Send an EXEC and collect everything up to its EXIT. */
void sgunit_exec_full(sgunit_agent_t *a, uint32_t timeout_ms, uint32_t cap, const char *setup, const char *stage,
                      const char *run, const char *file_path, const char *kernel, const char *code,
                      sgunit_result_t *res);
/* One-shot mode: there is never a kernel to report on. */
void sgunit_run_exec(sgunit_agent_t *a, uint32_t timeout_ms, uint32_t cap, const char *setup, const char *stage,
                     const char *run, const char *file_path, const char *code, sgunit_result_t *res);
void sgunit_free_result(sgunit_result_t *res);

/* What a result must be (sgunit_expect): the fields given, no others. */
typedef struct {
    int set;
    int64_t v;
} sgunit_is_t;
#define SGUNIT_IS(value) ((sgunit_is_t){1, (value)})
typedef struct {
    sgunit_is_t reason, code, sig, state, flags; /* SGUNIT_IS(v): equal to v */
    const char *stage;                           /* equal to; NULL: not checked */
    const char *out, *err;                       /* stdout, stderr exactly; NULL: not checked */
    double wall_below;                           /* wall_s below it; 0: not checked */
} sgunit_want_t;
/* Asserts the fields of want on res, e.g.
 *   SGUNIT_EXPECT(&res, .reason = SGUNIT_IS(SG_AGENT_REASON_TIMEOUT), .stage = "run", .wall_below = 1.5);
 * a failure names the caller's line. */
#define SGUNIT_EXPECT(res, ...) sgunit__expect((res), &(const sgunit_want_t){__VA_ARGS__}, __FILE__, __LINE__)
/* The same with a sgunit_want_t already made (a table's row). */
#define SGUNIT_EXPECT_WANT(res, want) sgunit__expect((res), (want), __FILE__, __LINE__)
void sgunit__expect(sgunit_result_t *res, const sgunit_want_t *want, const char *file, int line);
/* A stream's output as a string ("" when there was none). */
const char *sgunit_out_str(sgunit_result_t *res, int stream);

/* PUT_FILE / GET_FILE requests; their id. */
uint32_t sgunit_put_file(sgunit_agent_t *a, const char *path, uint32_t mode, const void *data, size_t len);
uint32_t sgunit_get_file(sgunit_agent_t *a, const char *path, uint32_t max_bytes);

/* The pid a test's program wrote to the file `name` of the work dir. */
pid_t sgunit_read_pid_file(sgunit_agent_t *a, const char *name);
/* The process is gone (kill(pid, 0) fails with ESRCH). */
void sgunit_assert_gone(pid_t pid);

#endif
