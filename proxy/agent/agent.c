/*
 * agent.c — what every room of the agent shares (see agent.h): settings,
 * log, clock, the failure policy, and the reply channel on stdout.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "agent.h"

const char *agent_workdir;
sg_agent_buf_t agent_out;

/* Set once the agent is on its way out: out of memory again while the exit
 * kills the tree is then the end, not a second exit(). */
static int exiting;

void agent_log(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    int n;

    memcpy(line, "sandgate-agent: ", 16);
    va_start(ap, fmt);
    n = vsnprintf(line + 16, sizeof(line) - 17, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof(line) - 18)
        n = (int)(sizeof(line) - 18);
    line[16 + n] = '\n';
    if (write(2, line, 16 + (size_t)n + 1) < 0) {
        /* nowhere left to complain */
    }
}

int64_t agent_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void agent_sleep_ns(long ns)
{
    struct timespec ts = {0, ns};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- failure policy -------------------------------------------------- */

void agent_exit(int code)
{
    exiting = 1;
    exit(code);
}

void agent_oom(void)
{
    agent_log("out of memory");
    if (exiting)
        _exit(1);
    agent_exit(1);
}

void *agent_xmalloc(size_t n)
{
    void *p = malloc(n != 0 ? n : 1);

    if (p == NULL)
        agent_oom();
    return p;
}

void *agent_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n != 0 ? n : 1, size != 0 ? size : 1);

    if (p == NULL)
        agent_oom();
    return p;
}

void *agent_xrealloc(void *p, size_t n)
{
    void *np = realloc(p, n != 0 ? n : 1);

    if (np == NULL)
        agent_oom();
    return np;
}

char *agent_xstrdup(const char *s)
{
    char *p = strdup(s);

    if (p == NULL)
        agent_oom();
    return p;
}

/* ---- stdout ---------------------------------------------------------- */

int agent_write_full(int fd, const void *p, size_t len)
{
    const uint8_t *s = p;

    while (len != 0) {
        ssize_t n = write(fd, s, len);
        if (n < 0) {
            /* EAGAIN: fd shares a non-blocking file description (stdin
             * is one: loop.c); wait until it takes more */
            struct pollfd w = {.fd = fd, .events = POLLOUT};
            if (errno == EINTR || (errno == EAGAIN && poll(&w, 1, -1) >= 0))
                continue;
            return -1;
        }
        s += n;
        len -= (size_t)n;
    }
    return 0;
}

/* the bits of the result, and (1u << n) - 1 defined for every n allowed */
_Static_assert(AGENT_POLL_NOW_MAX < 32, "AGENT_POLL_NOW_MAX must leave 1u << n defined");

uint32_t agent_poll_now(const int *fds, int n)
{
    struct pollfd pfd[AGENT_POLL_NOW_MAX];
    uint32_t ready = 0;
    int i;

    for (i = 0; i < n; i++) {
        pfd[i].fd = fds[i];
        pfd[i].events = POLLIN;
        pfd[i].revents = 0;
    }
    if (poll(pfd, (nfds_t)n, 0) < 0)
        return (1u << n) - 1;
    for (i = 0; i < n; i++)
        if (pfd[i].revents != 0)
            ready |= 1u << i;
    return ready;
}

int agent_dir_each(int dfd, void *buf, size_t len, int (*each)(void *ctx, const char *name), void *ctx)
{
    long got;

    while ((got = syscall(SYS_getdents64, dfd, buf, len)) > 0) {
        for (long off = 0; off < got;) {
            const struct dirent64 *e = (const struct dirent64 *)(const void *)((const char *)buf + off);
            int rc;

            off += e->d_reclen;
            if ((rc = each(ctx, e->d_name)) != 0)
                return rc;
        }
    }
    return got == 0 ? 0 : -1;
}

void agent_send_buf(sg_agent_buf_t *b, int build_failed)
{
    if (build_failed)
        agent_oom();
    if (agent_write_full(1, b->base, b->len) != 0) {
        agent_log("cannot write to stdout: %s", strerror(errno));
        agent_exit(1);
    }
    b->len = 0;
}

void agent_flush(int build_failed)
{
    agent_send_buf(&agent_out, build_failed);
}

void agent_send_ok(uint32_t id, uint64_t value)
{
    int r = sg_agent_msg_begin(&agent_out, SG_AGENT_OK, id);

    r |= sg_agent_put_u64(&agent_out, value);
    sg_agent_msg_end(&agent_out, 0);
    agent_flush(r);
}

void agent_send_error(uint32_t id, uint32_t code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    int r;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    r = sg_agent_msg_begin(&agent_out, SG_AGENT_ERROR, id);
    r |= sg_agent_put_u32(&agent_out, code);
    r |= sg_agent_put_str(&agent_out, msg, strlen(msg));
    sg_agent_msg_end(&agent_out, 0);
    agent_flush(r);
}

void agent_send_output(uint32_t id, uint32_t stream, const uint8_t *p, size_t len)
{
    while (len != 0) {
        size_t n = len < SG_AGENT_OUTPUT_CHUNK ? len : SG_AGENT_OUTPUT_CHUNK;
        int r = sg_agent_msg_begin(&agent_out, SG_AGENT_OUTPUT, id);

        r |= sg_agent_put_u32(&agent_out, stream);
        r |= sg_agent_put_rest(&agent_out, p, n);
        sg_agent_msg_end(&agent_out, 0);
        agent_flush(r);
        p += n;
        len -= n;
    }
}

int agent_fail(sg_agent_fail_t *f, uint32_t code, const char *fmt, ...)
{
    va_list ap;

    f->code = code;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof(f->msg), fmt, ap);
    va_end(ap);
    return -1;
}

void agent_send_fail(uint32_t id, const sg_agent_fail_t *f)
{
    agent_send_error(id, f->code, "%s", f->msg);
}
