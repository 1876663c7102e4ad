/*
 * kernel.c — the session's persistent kernel (see kernel.h): starting it,
 * handing it an EXEC's code over its fd 3, following it with the pump loop
 * until it answers on its fd 4, and ending it when it must go.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "agent.h"
#include "kernel.h"
#include "proc.h"
#include "results.h"
#include "run.h"

#define KERNEL_GRACE_NS (200LL * 1000 * 1000) /* for a kernel whose pipes closed to exit */

typedef struct {
    proc_child_t child; /* pid -1: there is none */
    char *cmd;          /* the kernel_cmd it was started with */
    int out[2];         /* read ends of its stdout and stderr */
    int req_fd;         /* write end of its fd 3 */
    int ans_fd;         /* read end of its fd 4 */
    int res_fd;         /* read end of its fd 5, the result channel */
} kernel_t;

static kernel_t kern = {{-1, 0, 0}, NULL, {-1, -1}, -1, -1, -1};

static int kernel_alive(void)
{
    return kern.child.pid > 0 && !kern.child.done;
}

pid_t kernel_live_pid(void)
{
    return kernel_alive() ? kern.child.pid : -1;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Close our ends of a kernel that is gone (or killed and reaped). */
static void kernel_forget(void)
{
    close_fd(&kern.out[0]);
    close_fd(&kern.out[1]);
    close_fd(&kern.req_fd);
    close_fd(&kern.ans_fd);
    close_fd(&kern.res_fd);
    free(kern.cmd);
    kern.cmd = NULL;
    kern.child.pid = -1;
    kern.child.done = 0;
}

void kernel_idle_fds(int fds[KERNEL_IDLE_FDS])
{
    fds[0] = kern.out[0];
    fds[1] = kern.out[1];
    fds[2] = kern.ans_fd;
    fds[3] = kern.res_fd;
}

_Static_assert(KERNEL_IDLE_FDS <= AGENT_POLL_NOW_MAX, "kernel_discard looks at its pipes with one agent_poll_now");

void kernel_discard(void)
{
    static uint8_t buf[SG_AGENT_OUTPUT_CHUNK];
    int *fds[KERNEL_IDLE_FDS] = {&kern.out[0], &kern.out[1], &kern.ans_fd, &kern.res_fd};
    int now[KERNEL_IDLE_FDS], i;
    uint32_t ready;

    /* reads of the pipes with something (or an end) to tell only: an idle
     * kernel costs one system call here, not four */
    for (i = 0; i < KERNEL_IDLE_FDS; i++)
        now[i] = *fds[i];
    ready = agent_poll_now(now, KERNEL_IDLE_FDS);
    for (i = 0; i < KERNEL_IDLE_FDS; i++) {
        size_t total = 0;

        if (!(ready & (1u << i)))
            continue;
        while (*fds[i] >= 0 && total < DRAIN_LIMIT) {
            ssize_t n = read(*fds[i], buf, sizeof(buf));

            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                close_fd(fds[i]);
            if (n <= 0)
                break;
            total += (size_t)n;
        }
    }
}

int kernel_reconcile(const char *cmd)
{
    if (kern.child.pid < 0)
        return 0;
    if (!kern.child.done && kern.req_fd >= 0 && kern.ans_fd >= 0 && strcmp(kern.cmd, cmd) == 0)
        return 0;
    agent_log("kernel %d is %s; it is replaced", (int)kern.child.pid,
              kern.child.done                      ? "gone"
              : kern.req_fd < 0 || kern.ans_fd < 0 ? "unable to take requests"
                                                   : "of another command");
    proc_kill_tree(-1);
    kernel_forget();
    return 1;
}

uint32_t kernel_idle_state(int lost)
{
    if (kernel_alive())
        return SG_AGENT_STATE_KEPT;
    return lost ? SG_AGENT_STATE_LOST : SG_AGENT_STATE_NONE;
}

/* Start kernel_cmd with the pipes of agent_proto.h on its fds 1 to 5. Returns
 * 0, or -1 when it could not be started (explained on stderr). */
static int kernel_start(run_t *x)
{
    int p[5][2], ours[5], theirs[5], i;
    pid_t pid;

    for (i = 0; i < 5; i++)
        p[i][0] = p[i][1] = -1;
    for (i = 0; i < 5; i++) {
        if (pipe2(p[i], O_CLOEXEC) != 0) {
            run_start_failed(x, "pipe");
            goto Error;
        }
    }
    /* stdout, stderr, answers and results are read by us, requests written
     * by us. */
    ours[0] = p[0][0];
    ours[1] = p[1][0];
    ours[2] = p[2][1];
    ours[3] = p[3][0];
    ours[4] = p[4][0];
    for (i = 0; i < 5; i++)
        fcntl(ours[i], F_SETFL, O_NONBLOCK);
    kern.cmd = agent_xstrdup(x->req.kernel_cmd);

    if (x->started == 0)
        x->started = agent_now_ns();
    proc_follow(&kern.child);
    theirs[0] = p[0][1];
    theirs[1] = p[1][1];
    theirs[2] = p[2][0];
    theirs[3] = p[3][1];
    theirs[4] = p[4][1];
    pid = proc_spawn(x->req.kernel_cmd, x->envp, theirs, 5);
    if (pid < 0) {
        run_start_failed(x, "fork");
        goto Error;
    }
    for (i = 0; i < 5; i++)
        close(theirs[i]);
    kern.child.pid = pid;
    kern.child.done = 0;
    kern.out[0] = ours[0];
    kern.out[1] = ours[1];
    kern.req_fd = ours[2];
    kern.ans_fd = ours[3];
    kern.res_fd = ours[4];
    agent_log("exec %u: kernel started, pid %d", x->id, (int)pid);
    return 0;

Error:
    for (i = 0; i < 5; i++) {
        close_fd(&p[i][0]);
        close_fd(&p[i][1]);
    }
    free(kern.cmd);
    kern.cmd = NULL;
    return -1;
}

/* ---- one EXEC in the kernel ------------------------------------------ */

enum { KERNEL_ANSWERED = RUN_OWN, KERNEL_BROKEN };

/* The talk with the kernel during one EXEC, as the pump loop's follower. */
typedef struct {
    run_t *x;
    char head[32]; /* "<len>\n", before the code */
    size_t hlen, written;
    char ans[32];
    size_t alen;
    int32_t answer;     /* the exit code, for ANSWERED */
    const char *doomed; /* why it must end, once its request or answer pipe closed */
    int64_t doomed_at;
    int booting;        /* a new kernel that has not yet said "ready" */
    int64_t budget;     /* the run's time left when the new kernel started */
    const char *broken; /* why, for BROKEN */
    int idx_ans, idx_req, idx_res;
    results_t res; /* the result channel's framing during this EXEC */
} talk_t;

/* "<decimal>" with an optional '-', within i32; 0 or -1. */
static int parse_answer(const char *s, size_t len, int32_t *code)
{
    size_t i = s[0] == '-' ? 1 : 0;
    long long v = 0;

    if (len == i || len - i > 10)
        return -1;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    v = s[0] == '-' ? -v : v;
    if (v < INT32_MIN || v > INT32_MAX)
        return -1;
    *code = (int32_t)v;
    return 0;
}

/* Write as much of "<len>\n<code>" as the pipe takes; 0, or -1 when the
 * kernel no longer reads its requests. */
static int write_request(talk_t *t)
{
    run_t *x = t->x;

    while (t->written < t->hlen + x->req.code_len) {
        size_t done = t->written;
        struct iovec v[2];
        int nv = 0;

        /* the head and the code in one write while both remain */
        if (done < t->hlen)
            v[nv++] = (struct iovec){t->head + done, t->hlen - done};
        if (x->req.code_len > 0)
            v[nv++] = done < t->hlen ? (struct iovec){(void *)x->req.code, x->req.code_len}
                                     : (struct iovec){(void *)(x->req.code + (done - t->hlen)),
                                                      x->req.code_len - (done - t->hlen)};
        ssize_t n = writev(kern.req_fd, v, nv);

        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        t->written += (size_t)n;
    }
    return 0;
}

static int talk_before_poll(void *ctx, int64_t now, struct pollfd *pfd, int *n, int *ms)
{
    talk_t *t = ctx;

    if (t->doomed == NULL && kern.ans_fd < 0) {
        t->doomed = "closed its answer pipe";
        t->doomed_at = now;
    }
    if (t->doomed != NULL && now - t->doomed_at > KERNEL_GRACE_NS) {
        t->broken = t->doomed;
        return KERNEL_BROKEN;
    }
    if (t->doomed != NULL && *ms > 10)
        *ms = 10;
    t->idx_ans = t->idx_req = t->idx_res = -1;
    if (kern.res_fd >= 0) {
        t->idx_res = *n;
        pfd[*n].fd = kern.res_fd;
        pfd[*n].events = POLLIN;
        pfd[*n].revents = 0;
        (*n)++;
    }
    if (kern.ans_fd >= 0) {
        t->idx_ans = *n;
        pfd[*n].fd = kern.ans_fd;
        pfd[*n].events = POLLIN;
        pfd[*n].revents = 0;
        (*n)++;
    }
    if (kern.req_fd >= 0 && t->written != t->hlen + t->x->req.code_len && t->doomed == NULL) {
        t->idx_req = *n;
        pfd[*n].fd = kern.req_fd;
        pfd[*n].events = POLLOUT;
        pfd[*n].revents = 0;
        (*n)++;
    }
    return -1;
}

static int talk_after_poll(void *ctx, const struct pollfd *pfd, int n)
{
    talk_t *t = ctx;
    ssize_t r;
    char *nl;

    if (t->idx_req >= 0 && pfd[t->idx_req].revents != 0 && write_request(t) != 0 && t->doomed == NULL) {
        t->doomed = "stopped reading its requests";
        t->doomed_at = agent_now_ns();
    }
    /* Results before the answer: the kernel writes them first. A closed
     * channel only ends the results (the user's code may close it). */
    if (t->idx_res >= 0 && pfd[t->idx_res].revents != 0 && results_read(&t->res, t->x, kern.res_fd) < 0)
        close_fd(&kern.res_fd);
    if (t->idx_ans < 0 || pfd[t->idx_ans].revents == 0)
        return -1;
    r = read(kern.ans_fd, t->ans + t->alen, sizeof(t->ans) - 1 - t->alen);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        close_fd(&kern.ans_fd); /* the kernel is ending, or can no longer answer */
        return -1;
    }
    if (r < 0)
        return -1;
    t->alen += (size_t)r;
    nl = memchr(t->ans, '\n', t->alen);
    if (t->booting && nl == t->ans + 5 && memcmp(t->ans, "ready", 5) == 0) {
        /* The start is over: the run's budget starts now, within the
         * deadline the start was given. */
        int64_t d = agent_now_ns() + t->budget;

        t->booting = 0;
        if (d < t->x->deadline)
            t->x->deadline = d;
        t->alen -= 6;
        memmove(t->ans, t->ans + 6, t->alen);
        nl = memchr(t->ans, '\n', t->alen);
    }
    if (nl != NULL && parse_answer(t->ans, (size_t)(nl - t->ans), &t->answer) != 0) {
        t->broken = "wrote a malformed answer";
        return KERNEL_BROKEN;
    }
    if (nl != NULL && t->written < t->hlen + t->x->req.code_len) {
        t->broken = "answered before reading the whole request";
        return KERNEL_BROKEN;
    }
    if (nl != NULL)
        return KERNEL_ANSWERED;
    if (t->alen == sizeof(t->ans) - 1) {
        t->broken = "wrote a malformed answer";
        return KERNEL_BROKEN;
    }
    return -1;
}

static int talk_ended(void *ctx)
{
    return kern.child.done;
}

static const run_follower_t talk = {talk_before_poll, talk_after_poll, talk_ended};

void kernel_exec(run_t *x, int lost)
{
    talk_t t;
    int64_t ended;
    int outcome;
    int32_t code = -1;
    uint32_t sig = 0, reason = SG_AGENT_REASON_EXITED;
    int keep = 0;

    if (kernel_alive()) {
        /* What it wrote since the last EXEC is not ours; reading it may
         * also reveal that it can no longer answer. */
        kernel_discard();
        lost |= kernel_reconcile(x->req.kernel_cmd);
    }
    if (kernel_alive()) {
        x->state = SG_AGENT_STATE_KEPT;
    } else if (kernel_start(x) == 0) {
        x->state = SG_AGENT_STATE_NEW;
    } else {
        x->state = kernel_idle_state(lost);
        run_send_exit(x, -1, 0, SG_AGENT_REASON_START_FAILED, "run", agent_now_ns());
        return;
    }

    /* Hand the code to the kernel and follow it until it answers, ends, or
     * must be ended. */
    memset(&t, 0, sizeof(t));
    t.x = x;
    if (x->state == SG_AGENT_STATE_NEW) {
        /* The start is not the run's: it gets SG_AGENT_KERNEL_BOOT_MS more
         * (agent_proto.h, "Kernels"), and "ready" gives the run its whole
         * budget back. */
        t.budget = x->deadline - agent_now_ns();
        if (t.budget > 0) {
            t.booting = 1;
            x->deadline += (int64_t)SG_AGENT_KERNEL_BOOT_MS * 1000000;
        }
    }
    results_begin(&t.res);
    t.hlen = (size_t)snprintf(t.head, sizeof(t.head), "%zu\n", x->req.code_len);
    if (x->started == 0)
        x->started = agent_now_ns();
    /* the request's pipe is empty between EXECs: the code usually fits at
     * once, without a poll() for room first (the pump writes the rest) */
    if (write_request(&t) != 0) {
        t.doomed = "stopped reading its requests";
        t.doomed_at = agent_now_ns();
    }
    outcome = run_pump(x, kern.out, &talk, &t, &ended);

    switch (outcome) {
    case KERNEL_ANSWERED:
        code = t.answer;
        if (run_drain(x, kern.out))
            reason = SG_AGENT_REASON_OUTPUT_LIMIT;
        else
            keep = 1;
        break;
    case RUN_ENDED:
        if (run_drain(x, kern.out))
            reason = SG_AGENT_REASON_OUTPUT_LIMIT;
        break;
    case RUN_TIMEOUT:
        reason = SG_AGENT_REASON_TIMEOUT;
        if (t.booting) {
            char why[160];
            int n = snprintf(why, sizeof(why),
                             "sandgate-agent: the interpreter had not started when the run's time (its timeout, "
                             "and %d s more for the start) ran out\n",
                             SG_AGENT_KERNEL_BOOT_MS / 1000);

            run_forward(x, 2, (const uint8_t *)why, (size_t)n);
        }
        break;
    case RUN_CAPPED:
        reason = SG_AGENT_REASON_OUTPUT_LIMIT;
        break;
    case KERNEL_BROKEN: {
        char why[256];

        snprintf(why, sizeof(why), "sandgate-agent: the kernel %s; it was stopped, and the next run starts a new one\n",
                 t.broken);
        run_forward(x, 2, (const uint8_t *)why, strlen(why));
        reason = SG_AGENT_REASON_KILLED;
        break;
    }
    }
    /* The results the kernel wrote before it answered or ended. */
    if (kern.res_fd >= 0 && (outcome == KERNEL_ANSWERED || outcome == RUN_ENDED) &&
        results_drain(&t.res, x, kern.res_fd) < 0)
        close_fd(&kern.res_fd);
    results_end(&t.res, x);

    proc_kill_tree(keep && kernel_alive() ? kern.child.pid : -1);
    if (keep && kernel_alive()) {
        run_send_exit(x, code, 0, reason, "run", ended);
        return;
    }
    /* The kernel is gone, ended by itself (its status tells how) or by us. */
    if (outcome == KERNEL_BROKEN) {
        code = -1;
        sig = SIGKILL;
    } else if (outcome != KERNEL_ANSWERED) {
        reason = run_classify(x, kern.child.done, kern.child.status, reason, &code, &sig);
    }
    x->state = SG_AGENT_STATE_LOST;
    kernel_forget();
    run_send_exit(x, code, sig, reason, "run", ended);
}
