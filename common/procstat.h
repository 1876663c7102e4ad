/*
 * procstat.h — the process's own use of the machine, as Prometheus's
 * client libraries report it for every process they run in (the
 * "process collector" of client_golang and client_python: the same names,
 * types and units), for a server's GET /metrics. Linux: read from
 * getrusage, getrlimit and /proc/self.
 */
#ifndef SANDGATE_PROCSTAT_H
#define SANDGATE_PROCSTAT_H

#include "buf.h"

#include <sys/types.h>

/* Appends process_cpu_seconds_total (user and system time of every thread),
 * process_resident_memory_bytes, process_virtual_memory_bytes,
 * process_open_fds, process_max_fds and process_start_time_seconds to out,
 * each with its HELP and TYPE; a value that cannot be read is left out
 * with its family. 0, or -1 when out is full (as sg_buf_appendf). */
int sg_procstat_render(sg_buf_t *out);

/* User and system CPU time of every thread of this process, in seconds
 * (getrusage), or -1. */
double sg_procstat_cpu_seconds(void);

/* Fields first .. first + n - 1 of /proc/<pid>/stat (pid 0: this
 * process), numbered as proc(5) numbers them (14 utime, 22 starttime),
 * each an unsigned number: 0, or -1 when the file or a field cannot be
 * read. */
int sg_procstat_fields(pid_t pid, int first, int n, unsigned long long *out);

#endif
