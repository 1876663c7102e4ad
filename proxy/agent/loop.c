/*
 * loop.c — sandgate-agent's main: PID 1 of every sandbox container.
 *
 * It reads requests (agent_proto.h) from stdin, one at a time and in order,
 * answers on stdout and logs one line per event on stderr. Between requests
 * it waits in one poll() for stdin, its signals (proc.h) and whatever a
 * live kernel writes (kernel.h), which is read and discarded. The rooms are
 * listed in agent.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "creds.h"
#include "exec.h"
#include "files.h"
#include "kernel.h"
#include "proc.h"

#define DEFAULT_WORKDIR "/sandbox"

#define READ_RESYNC 2

/* Drops every byte already readable on stdin (a resynchronisation,
 * agent_proto.h): the rest of a request the old proxy did not finish, and
 * anything sent before the signal was acted on. */
static void drop_input(void)
{
    uint8_t buf[65536];
    size_t dropped = 0;

    for (;;) {
        struct pollfd p = {.fd = 0, .events = POLLIN};
        ssize_t n;
        if (poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN))
            break;
        n = read(0, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        dropped += (size_t)n;
    }
    proc_resync = 0;
    agent_log("resynchronising: %zu byte(s) of input dropped", dropped);
}

/* Returns 0, 1 on EOF before the first byte, -1 on error or EOF midway,
 * READ_RESYNC when a proxy asked for a resynchronisation meanwhile (what
 * was read is to be dropped). Signals are handled while it waits. fd is
 * non-blocking (main): what is there already is read without a poll() first
 * (a request's header and payload usually come in one write). */
static int read_full(int fd, void *p, size_t len)
{
    uint8_t *d = p;
    size_t got = 0;
    int wait = 0;

    while (got < len) {
        if (wait) {
            struct pollfd pfd[2] = {{.fd = fd, .events = POLLIN}, {.fd = proc_sig_fd, .events = POLLIN}};
            if (poll(pfd, 2, IDLE_POLL_MS) < 0) {
                if (errno != EINTR)
                    return -1;
                continue;
            }
            if (pfd[1].revents != 0)
                proc_handle_signals();
            if (pfd[0].revents == 0 && !proc_resync)
                continue;
        }
        if (proc_resync)
            return READ_RESYNC;
        ssize_t n = read(fd, d + got, len - got);
        wait = n < 0 && errno == EAGAIN;
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            return got == 0 ? 1 : -1;
        got += (size_t)n;
    }
    return 0;
}

/* SYNC: the nonce echoed, with the protocol's version and whether a kernel
 * lives. */
static void sync_handle(uint32_t id, const uint8_t *payload, uint32_t len)
{
    sg_agent_reader_t r;
    uint64_t nonce = 0;
    int rc;

    sg_agent_reader_init(&r, payload, len);
    if (sg_agent_get_u64(&r, &nonce) != 0 || len != 8) {
        agent_send_error(id, SG_AGENT_ERR_BAD_REQUEST, "A SYNC request carries one 64-bit nonce.");
        return;
    }
    rc = sg_agent_msg_begin(&agent_out, SG_AGENT_SYNC_OK, id);
    rc |= sg_agent_put_u64(&agent_out, nonce);
    rc |= sg_agent_put_u32(&agent_out, SG_AGENT_PROTO_VERSION);
    rc |= sg_agent_put_u32(&agent_out, kernel_live_pid() > 0 ? 1u : 0u);
    sg_agent_msg_end(&agent_out, 0);
    agent_flush(rc);
    agent_log("resynchronised (request %u)", id);
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Read and dispatch one request. Exits on EOF or when the stream is beyond
 * repair (truncated, or a length we refuse to buffer). */
static void serve_one(void)
{
    uint8_t raw[SG_AGENT_HEADER_SIZE];
    sg_agent_header_t h;
    uint8_t *payload;
    uint32_t len, id;
    int rc;

    rc = read_full(0, raw, sizeof(raw));
    if (rc == READ_RESYNC) {
        drop_input();
        return;
    }
    if (rc == 1) {
        agent_log("stdin closed, exiting");
        agent_exit(0);
    }
    if (rc != 0) {
        agent_log("stdin ended inside a message header, exiting");
        agent_exit(0);
    }
    id = rd32(raw + 4);
    len = rd32(raw + 8);
    if (len > SG_AGENT_MAX_PAYLOAD) {
        agent_log("request %u announces %u payload bytes, more than %u; cannot resynchronise, exiting", id, len,
                  SG_AGENT_MAX_PAYLOAD);
        agent_exit(1);
    }
    payload = agent_xmalloc(len);
    rc = read_full(0, payload, len);
    if (rc == READ_RESYNC) {
        agent_log("request %u dropped half-read", id);
        free(payload);
        drop_input();
        return;
    }
    if (rc != 0) {
        agent_log("stdin ended inside a request payload, exiting");
        agent_exit(0);
    }
    if (sg_agent_header_decode(raw, &h) != 0) {
        agent_send_error(id, SG_AGENT_ERR_BAD_REQUEST, "The message header has non-zero flags or reserved bytes.");
        goto Exit;
    }

    switch (h.type) {
    case SG_AGENT_EXEC:
        exec_handle(h.id, payload, h.len);
        break;
    case SG_AGENT_PUT_FILE:
        files_put(h.id, payload, h.len);
        break;
    case SG_AGENT_GET_FILE:
        files_get(h.id, payload, h.len);
        break;
    case SG_AGENT_SYNC:
        sync_handle(h.id, payload, h.len);
        break;
    case SG_AGENT_PING:
        if (h.len != 0)
            agent_send_error(h.id, SG_AGENT_ERR_BAD_REQUEST, "A PING request has no payload.");
        else
            agent_send_ok(h.id, 0);
        break;
    default:
        agent_send_error(h.id, SG_AGENT_ERR_BAD_REQUEST, "Unknown request type %u.", h.type);
        break;
    }

Exit:
    free(payload);
}

/* SANDGATE_WORKDIR or /sandbox, without a trailing slash. */
static const char *normalise_workdir(void)
{
    const char *env = getenv("SANDGATE_WORKDIR");
    char *w;
    size_t n;

    if (env == NULL || env[0] == '\0')
        env = DEFAULT_WORKDIR;
    w = agent_xstrdup(env);
    n = strlen(w);
    while (n > 1 && w[n - 1] == '/')
        w[--n] = '\0';
    return w;
}

int main(void)
{
    int r;

    if (creds_init() != 0 || proc_init() != 0)
        return 1;
    /* read_full() reads what is there before it polls; children get
     * /dev/null as their stdin, never this */
    if (fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK) != 0)
        agent_log("cannot make stdin non-blocking: %s", strerror(errno));
    agent_workdir = normalise_workdir();
    if (chdir(agent_workdir) != 0)
        agent_log("cannot enter the work directory %s: %s", agent_workdir, strerror(errno));

    sg_agent_buf_init(&agent_out);
    r = sg_agent_msg_begin(&agent_out, SG_AGENT_READY, 0);
    r |= sg_agent_put_u32(&agent_out, SG_AGENT_PROTO_VERSION);
    r |= sg_agent_put_str(&agent_out, agent_workdir, strlen(agent_workdir));
    sg_agent_msg_end(&agent_out, 0);
    agent_flush(r);
    agent_log("ready, pid %d, work dir %s", (int)getpid(), agent_workdir);

    for (;;) {
        struct pollfd pfd[2 + KERNEL_IDLE_FDS] = {{.fd = 0, .events = POLLIN}, {.fd = proc_sig_fd, .events = POLLIN}};
        int kfds[KERNEL_IDLE_FDS];
        nfds_t n = 2;
        int i, kernel_wrote = 0;

        /* A kernel between EXECs: what it writes is read and discarded. */
        kernel_idle_fds(kfds);
        for (i = 0; i < KERNEL_IDLE_FDS; i++) {
            if (kfds[i] >= 0) {
                pfd[n].fd = kfds[i];
                pfd[n].events = POLLIN;
                n++;
            }
        }
        /* no proc_reap() here: SIGCHLD comes through the signal fd, and
         * proc_handle_signals() reaps */
        if (proc_resync) {
            /* asked during the EXEC that just ended */
            drop_input();
            continue;
        }
        /* What the last run's kill left (a fork bomb under gVisor, where
         * each fork and kill is slow, outlasts its budget) is ended before
         * the next request, and before anything new starts beside it. */
        if (proc_tree_left())
            proc_finish_kill(kernel_live_pid());
        if (poll(pfd, n, IDLE_POLL_MS) < 0) {
            if (errno != EINTR) {
                agent_log("poll: %s", strerror(errno));
                agent_sleep_ns(10000000);
            }
            continue;
        }
        for (i = 2; i < (int)n; i++)
            kernel_wrote |= pfd[i].revents != 0;
        if (kernel_wrote)
            kernel_discard();
        if (pfd[1].revents != 0)
            proc_handle_signals();
        if (proc_resync) {
            drop_input();
            continue;
        }
        if (pfd[0].revents & POLLNVAL) {
            agent_log("stdin is not open, exiting");
            agent_exit(1);
        }
        if (pfd[0].revents != 0)
            serve_one();
    }
}
