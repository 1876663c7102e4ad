/*
 * run.c — one EXEC's output, the pump loop, and its EXIT (see run.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"
#include "proc.h"
#include "results.h"
#include "run.h"

int run_forward(run_t *x, uint32_t stream, const uint8_t *p, size_t n)
{
    uint64_t room = x->req.output_cap - x->sent[stream];

    if (n > room) {
        agent_send_output(x->id, stream, p, (size_t)room);
        x->sent[stream] += room;
        x->exit_flags |= stream == 1 ? SG_AGENT_EXIT_STDOUT_TRUNCATED : SG_AGENT_EXIT_STDERR_TRUNCATED;
        return 1;
    }
    agent_send_output(x->id, stream, p, n);
    x->sent[stream] += n;
    return 0;
}

void run_start_failed(run_t *x, const char *what)
{
    char why[512];

    snprintf(why, sizeof(why), "sandgate-agent: cannot start the command (%s): %s\n", what, strerror(errno));
    run_forward(x, 2, (const uint8_t *)why, strlen(why));
}

/* ---- the pump -------------------------------------------------------- */

enum { PUMP_DATA, PUMP_AGAIN, PUMP_EOF, PUMP_CAP };

/* One read of a stream, forwarded. */
static int pump(run_t *x, int fd, uint32_t stream, size_t *total)
{
    static uint8_t buf[SG_AGENT_OUTPUT_CHUNK];
    ssize_t n = read(fd, buf, sizeof(buf));

    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? PUMP_AGAIN : PUMP_EOF;
    if (n == 0)
        return PUMP_EOF;
    if (total != NULL)
        *total += (size_t)n;
    return run_forward(x, stream, buf, (size_t)n) ? PUMP_CAP : PUMP_DATA;
}

int run_pump(run_t *x, int *fds, const run_follower_t *f, void *ctx, int64_t *ended)
{
    int outcome, i;

    for (;;) {
        struct pollfd pfd[2 + RUN_EXTRA_FDS + 1];
        int n = 0, idx[2] = {-1, -1}, extra = 0, first_extra, capped = 0;
        int64_t now = agent_now_ns(), left = x->deadline - now;
        int ms;

        if (left <= 0) {
            outcome = RUN_TIMEOUT;
            break;
        }
        ms = (int)((left + 999999) / 1000000);
        if (ms > IDLE_POLL_MS)
            ms = IDLE_POLL_MS;
        for (i = 0; i < 2; i++) {
            if (fds[i] >= 0) {
                idx[i] = n;
                pfd[n].fd = fds[i];
                pfd[n].events = POLLIN;
                pfd[n].revents = 0;
                n++;
            }
        }
        first_extra = n;
        if (f->before_poll != NULL && (outcome = f->before_poll(ctx, now, pfd + first_extra, &extra, &ms)) >= 0)
            break;
        n += extra;
        pfd[n].fd = proc_sig_fd;
        pfd[n].events = POLLIN;
        pfd[n].revents = 0;
        if (poll(pfd, (nfds_t)n + 1, ms) < 0 && errno != EINTR) {
            agent_log("poll: %s", strerror(errno));
            agent_sleep_ns(10000000);
        }

        /* Output first: what a kernel wrote before answering comes first. */
        for (i = 0; i < 2; i++) {
            int rc;

            if (idx[i] < 0 || pfd[idx[i]].revents == 0)
                continue;
            rc = pump(x, fds[i], (uint32_t)i + 1, NULL);
            if (rc == PUMP_EOF) {
                close(fds[i]);
                fds[i] = -1;
            } else if (rc == PUMP_CAP) {
                capped = 1;
            }
        }
        if (capped) {
            outcome = RUN_CAPPED;
            break;
        }
        outcome = f->after_poll != NULL ? f->after_poll(ctx, pfd + first_extra, extra) : -1;
        /* SIGCHLD comes through the signal fd: a child that ended is reaped
         * there (one wait4 less per turn, which gVisor makes dear) */
        if (pfd[n].revents != 0)
            proc_handle_signals();
        if (outcome < 0 && f->ended(ctx))
            outcome = RUN_ENDED;
        if (outcome >= 0)
            break;
    }
    *ended = agent_now_ns();
    return outcome;
}

int run_drain(run_t *x, const int *fds)
{
    /* reads of the streams that hold something (or an end) only */
    uint32_t ready = agent_poll_now(fds, 2);
    int i;

    for (i = 0; i < 2; i++) {
        size_t total = 0;
        int rc = PUMP_DATA;

        if (!(ready & (1u << i)))
            continue;
        while (fds[i] >= 0 && rc == PUMP_DATA && total < DRAIN_LIMIT)
            rc = pump(x, fds[i], (uint32_t)i + 1, &total);
        if (rc == PUMP_CAP)
            return 1;
    }
    return 0;
}

/* ---- the end --------------------------------------------------------- */

/* cgroup v2 memory.events, or the v1 memory.oom_control of Linux versions
 * that have it. */
long long run_oom_kills(void)
{
    static const char *const files[] = {"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"};
    /* a file found missing stays missing (no cgroup file appears in a
     * running sandbox): it is not looked for again at every EXEC (under
     * gVisor neither exists, and each failed open costs) */
    static int missing[sizeof(files) / sizeof(files[0])];
    char buf[1024], *p;
    size_t i;

    for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        int fd;
        ssize_t n;

        if (missing[i])
            continue;
        fd = open(files[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT)
            missing[i] = 1;
        if (fd < 0)
            continue;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        for (p = buf; p != NULL; p = strchr(p, '\n')) {
            if (*p == '\n')
                p++;
            if (strncmp(p, "oom_kill ", 9) == 0)
                return strtoll(p + 9, NULL, 10);
        }
    }
    return -1;
}

uint32_t run_classify(run_t *x, int have_status, int status, uint32_t reason, int32_t *code, uint32_t *sig)
{
    long long oom_now;
    int oom_seen;

    *code = -1;
    *sig = 0;
    if (!have_status)
        *sig = SIGKILL;
    else if (WIFEXITED(status))
        *code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        *sig = (uint32_t)WTERMSIG(status);
    if (reason != SG_AGENT_REASON_EXITED)
        return reason;

    oom_now = x->oom_before >= 0 ? run_oom_kills() : -1;
    oom_seen = oom_now > x->oom_before;
    if (*sig != 0) {
        /* SIGKILL is what the OOM killer uses; without a counter to ask,
         * it is the likeliest sender. */
        if (*sig == SIGKILL && (x->oom_before < 0 || oom_now < 0 || oom_seen))
            return SG_AGENT_REASON_OOM;
        return SG_AGENT_REASON_KILLED;
    }
    if (*code == 128 + SIGKILL && x->oom_before >= 0 && oom_seen)
        return SG_AGENT_REASON_OOM; /* the shell outlived the program the OOM killer took */
    return SG_AGENT_REASON_EXITED;
}

void run_send_exit(run_t *x, int32_t code, uint32_t sig, uint32_t reason, const char *stage, int64_t end)
{
    uint64_t dur = x->started != 0 && end > x->started ? (uint64_t)(end - x->started) / 1000 : 0;
    int r;

    size_t start;

    results_send_files(x); /* left in agent_out: one write for both */
    start = agent_out.len;
    r = sg_agent_msg_begin(&agent_out, SG_AGENT_EXIT, x->id);
    r |= sg_agent_put_i32(&agent_out, code);
    r |= sg_agent_put_u32(&agent_out, sig);
    r |= sg_agent_put_u32(&agent_out, reason);
    r |= sg_agent_put_u64(&agent_out, dur);
    r |= sg_agent_put_u32(&agent_out, x->exit_flags);
    r |= sg_agent_put_str(&agent_out, stage, strlen(stage));
    r |= sg_agent_put_u32(&agent_out, x->state);
    sg_agent_msg_end(&agent_out, start);
    agent_flush(r);
    agent_log("exec %u: %s ended: %s, code %d, signal %u, kernel %s", x->id, stage, sg_agent_reason_name(reason),
              (int)code, sig, sg_agent_state_name(x->state));
}
