/*
 * daemon.c — the frame of a server's main() (daemon.h).
 */
#include "daemon.h"
#include "log.h"

#include <malloc.h>
#include <signal.h>

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

#define SG_MALLOC_MMAP_THRESHOLD (16 << 20) /* allocations this large or larger: their own pages */
#define SG_MALLOC_KEEP (64 << 20)           /* free memory kept at a heap's top before it is returned */

int sg_daemon_begin(int argc, char **argv, const sg_cfg_entry_t *table, size_t n, const char *prog, const char *what,
                    const char *const *log_level)
{
    int rc = sg_config_main(argc, argv, table, n, prog, what);
    if (rc >= 0)
        return rc;
    sg_log_init(prog, *log_level);
    signal(SIGPIPE, SIG_IGN);
    /* A result of a megabyte or two is read, built and sent in buffers of
     * that size. glibc gives each such buffer fresh pages from the kernel
     * (mmap) and returns them on free, so every large result paid its page
     * faults again: half the servers' CPU for a 1 MB result. Kept in the
     * heap instead, and up to SG_MALLOC_KEEP of free memory kept for the
     * next one. */
    mallopt(M_MMAP_THRESHOLD, SG_MALLOC_MMAP_THRESHOLD);
    mallopt(M_TRIM_THRESHOLD, SG_MALLOC_KEEP);
    return -1;
}

int sg_daemon_run(h2o_loop_t *loop)
{
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    while (!stop_signal)
        h2o_evloop_run(loop, 1000);
    sg_info("signal %d: shutting down", (int)stop_signal);
    return (int)stop_signal;
}
