/*
 * procstat.c — the process's use of the machine (procstat.h).
 */
#include "procstat.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Memory from /proc/self/statm (pages): 0, or -1. */
static int read_statm(long long *virt, long long *rss)
{
    FILE *f = fopen("/proc/self/statm", "r");
    int ok = f != NULL && fscanf(f, "%lld %lld", virt, rss) == 2;
    if (f != NULL)
        fclose(f);
    return ok ? 0 : -1;
}

/* Entries of /proc/self/fd, the directory's own descriptor left out: -1
 * when it cannot be read. */
static long count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    long n = 0;
    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1;
}

int sg_procstat_fields(pid_t pid, int first, int n, unsigned long long *out)
{
    char path[64], buf[1024], *p;
    if (pid > 0)
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    else
        snprintf(path, sizeof(path), "/proc/self/stat");
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    /* the command's name, field 2, is in parentheses and may hold spaces:
     * fields are counted from the last ")" */
    if (first < 3 || (p = strrchr(buf, ')')) == NULL)
        return -1;
    for (int field = 2; field < first && p != NULL; field++)
        p = strchr(p + 1, ' ');
    for (int i = 0; i < n; i++) {
        char *end;
        if (p == NULL)
            return -1;
        out[i] = strtoull(p + 1, &end, 10);
        if (end == p + 1)
            return -1;
        p = strchr(p + 1, ' ');
    }
    return 0;
}

/* When the process started, in seconds since the epoch: the boot time of
 * /proc/stat plus its starttime (clock ticks since boot). -1 when either
 * cannot be read. */
static double start_time(void)
{
    char buf[256];
    long long btime = -1;
    unsigned long long ticks;
    long hz = sysconf(_SC_CLK_TCK);
    FILE *f = fopen("/proc/stat", "r");
    if (f != NULL) {
        while (fgets(buf, sizeof(buf), f) != NULL)
            if (sscanf(buf, "btime %lld", &btime) == 1)
                break;
        fclose(f);
    }
    if (btime < 0 || hz <= 0 || sg_procstat_fields(0, 22, 1, &ticks) != 0)
        return -1;
    return (double)btime + (double)ticks / (double)hz;
}

double sg_procstat_cpu_seconds(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

int sg_procstat_render(sg_buf_t *out)
{
    struct rlimit rl;
    long long virt, rss;
    long page = sysconf(_SC_PAGESIZE), fds = count_fds();
    double started = start_time(), cpu = sg_procstat_cpu_seconds();
    int rc = 0;

    if (cpu >= 0)
        rc |= sg_buf_appendf(out,
                             "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
                             "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.6f\n",
                             cpu);
    if (read_statm(&virt, &rss) == 0 && page > 0)
        rc |= sg_buf_appendf(out,
                             "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
                             "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %lld\n"
                             "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
                             "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes %lld\n",
                             rss * page, virt * page);
    if (fds >= 0)
        rc |= sg_buf_appendf(out,
                             "# HELP process_open_fds Number of open file descriptors.\n"
                             "# TYPE process_open_fds gauge\nprocess_open_fds %ld\n",
                             fds);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        rc |= sg_buf_appendf(out,
                             "# HELP process_max_fds Maximum number of open file descriptors.\n"
                             "# TYPE process_max_fds gauge\nprocess_max_fds %llu\n",
                             (unsigned long long)rl.rlim_cur);
    if (started >= 0)
        rc |=
            sg_buf_appendf(out,
                           "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
                           "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.2f\n",
                           started);
    return rc ? -1 : 0;
}
