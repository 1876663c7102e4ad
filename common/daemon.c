/*
 * daemon.c — the frame of a server's main() (daemon.h).
 */
#include "daemon.h"
#include "log.h"

#include <signal.h>

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

int sg_daemon_begin(int argc, char **argv, const sg_cfg_entry_t *table, size_t n, const char *prog, const char *what,
                    const char *const *log_level)
{
    int rc = sg_config_main(argc, argv, table, n, prog, what);
    if (rc >= 0)
        return rc;
    sg_log_init(prog, *log_level);
    signal(SIGPIPE, SIG_IGN);
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
