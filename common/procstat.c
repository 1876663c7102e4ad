/*
 * procstat.c — the process's use of the machine (procstat.h).
 */
#include "procstat.h"

#include <dirent.h>
#include <stdio.h>
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

/* When the process started, in seconds since the epoch: the boot time of
 * /proc/stat plus field 22 of /proc/self/stat (clock ticks since boot).
 * -1 when either cannot be read. */
static double start_time(void)
{
    char buf[1024], *p;
    long long btime = -1, ticks = -1;
    long hz = sysconf(_SC_CLK_TCK);
    FILE *f = fopen("/proc/stat", "r");
    if (f != NULL) {
        while (fgets(buf, sizeof(buf), f) != NULL)
            if (sscanf(buf, "btime %lld", &btime) == 1)
                break;
        fclose(f);
    }
    if ((f = fopen("/proc/self/stat", "r")) == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* the command's name, field 2, is in parentheses and may hold spaces:
     * count from the last ")" (field 3 on) */
    if ((p = strrchr(buf, ')')) == NULL)
        return -1;
    for (int field = 2; field < 22 && p != NULL; field++)
        p = strchr(p + 1, ' ');
    if (p == NULL || sscanf(p + 1, "%lld", &ticks) != 1 || btime < 0 || hz <= 0)
        return -1;
    return (double)btime + (double)ticks / (double)hz;
}

int sg_procstat_render(sg_buf_t *out)
{
    struct rusage ru;
    struct rlimit rl;
    long long virt, rss;
    long page = sysconf(_SC_PAGESIZE), fds = count_fds();
    double started = start_time();
    int rc = 0;

    if (getrusage(RUSAGE_SELF, &ru) == 0)
        rc |= sg_buf_appendf(out,
                             "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
                             "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.6f\n",
                             (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
                                 ru.ru_stime.tv_usec / 1e6);
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
