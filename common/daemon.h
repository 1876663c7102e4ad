/*
 * daemon.h — the frame both servers' main() share around their own setup:
 * the configuration table read (config.h) and the log opened at its level,
 * SIGPIPE ignored, malloc kept from handing large buffers back to the
 * kernel at once; later the loop run until SIGINT or SIGTERM.
 *
 * Main thread, once per process.
 */
#ifndef SANDGATE_DAEMON_H
#define SANDGATE_DAEMON_H

#include <h2o.h>

#include "config.h"

/* sg_config_main, then the log (prog, at *log_level: the table's
 * SANDGATE_LOG_LEVEL destination, read once the table is loaded) and
 * SIGPIPE ignored. Returns as sg_config_main: an exit code >= 0 (--help, a
 * bad setting), or -1 to go on. */
int sg_daemon_begin(int argc, char **argv, const sg_cfg_entry_t *table, size_t n, const char *prog, const char *what,
                    const char *const *log_level);
/* From here SIGINT and SIGTERM ask the process to stop: runs loop until
 * one comes, logs it and returns its number (the caller shuts down). */
int sg_daemon_run(h2o_loop_t *loop);

#endif
