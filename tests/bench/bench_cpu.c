/*
 * bench_cpu.c — what each part of the stack spends on the CPU, read before
 * and after a stretch of work (bench.h, "CPU"): the proxy and the gateway
 * from their GET /metrics (process_cpu_seconds_total), Redis from INFO
 * (used_cpu_sys + used_cpu_user), the relay this program started from its
 * /proc/<pid>/stat and this program from getrusage (both by procstat.h),
 * and the machine from /proc/stat (the bench runs beside the stack it
 * measures: the figure is what the stack and its clients took of the
 * machine together).
 */
#include "bench.h"
#include "procstat.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* process_cpu_seconds_total of base's GET /metrics, or -1. */
static double metrics_cpu(hc_t *c)
{
    static const char name[] = "\nprocess_cpu_seconds_total ";
    if (c->curl == NULL || hc_do(c, "GET", "/metrics", NULL) != 0 || c->status != 200 || c->body.base == NULL)
        return -1;
    const char *p = strstr(c->body.base, name);
    return p != NULL ? strtod(p + sizeof(name) - 1, NULL) : -1;
}

/* used_cpu_sys + used_cpu_user of the Redis at url ("redis://host:port",
 * a database part ignored), or -1. */
static double redis_cpu(const char *url)
{
    char host[256], port[16] = "6379", buf[8192];
    const char *p;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    struct timeval tv = {2, 0};
    size_t got = 0;
    int fd = -1;
    double sys = -1, user = -1;

    if (url == NULL || strncmp(url, "redis://", 8) != 0)
        return -1;
    p = url + 8;
    size_t hl = strcspn(p, ":/");
    if (hl == 0 || hl >= sizeof(host))
        return -1;
    memcpy(host, p, hl);
    host[hl] = '\0';
    if (p[hl] == ':')
        snprintf(port, sizeof(port), "%.*s", (int)strcspn(p + hl + 1, "/"), p + hl + 1);
    if (getaddrinfo(host, port, &hints, &ai) != 0)
        return -1;
    if ((fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol)) < 0)
        goto Exit;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 || write(fd, "INFO cpu\r\n", 10) != 10)
        goto Exit;
    /* a bulk string: "$<len>\r\n<text>\r\n"; the fields are near its end */
    for (;;) {
        ssize_t n = read(fd, buf + got, sizeof(buf) - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
        const char *nl = strstr(buf, "\r\n");
        if (nl == NULL)
            continue;
        if (buf[0] != '$') /* an error: NOAUTH, say */
            break;
        if ((size_t)(nl + 2 - buf) + strtoul(buf + 1, NULL, 10) + 2 <= got || got == sizeof(buf) - 1)
            break;
    }
    buf[got] = '\0';
    if ((p = strstr(buf, "used_cpu_sys:")) != NULL)
        sys = strtod(p + 13, NULL);
    if ((p = strstr(buf, "used_cpu_user:")) != NULL)
        user = strtod(p + 14, NULL);
Exit:
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return sys >= 0 && user >= 0 ? sys + user : -1;
}

/* utime + stime of process pid, or -1. */
static double pid_cpu(pid_t pid)
{
    unsigned long long t[2];
    long hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0 || sg_procstat_fields(pid, 14, 2, t) != 0)
        return -1;
    return (double)(t[0] + t[1]) / (double)hz;
}

/* The machine's busy time (every CPU, all but idle and iowait), or -1. */
static double machine_cpu(void)
{
    unsigned long long v[8] = {0};
    long hz = sysconf(_SC_CLK_TCK);
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL)
        return -1;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                   &v[7]);
    fclose(f);
    if (n != 8 || hz <= 0)
        return -1;
    /* user nice system idle iowait irq softirq steal */
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)hz;
}

void cpu_sample(cpu_src_t *s, double out[CPU_PARTS])
{
    out[CPU_MACHINE] = machine_cpu();
    out[CPU_PROXY] = metrics_cpu(&s->proxy);
    out[CPU_GATEWAY] = s->gateway.curl != NULL ? metrics_cpu(&s->gateway) : -1;
    out[CPU_REDIS] = redis_cpu(s->redis_url);
    out[CPU_RELAY] = s->relay_pid > 0 ? pid_cpu(s->relay_pid) : -1;
    out[CPU_BENCH] = sg_procstat_cpu_seconds();
}

int cpu_src_init(cpu_src_t *s, const target_t *px, const target_t *gw)
{
    memset(s, 0, sizeof(*s));
    s->redis_url = opt.redis;
    s->relay_pid = opt.relay_pid;
    if (hc_init(&s->proxy, px->base, NULL, NULL) != 0)
        return -1;
    if (gw != NULL && hc_init(&s->gateway, gw->base, NULL, NULL) != 0) {
        hc_cleanup(&s->proxy);
        return -1;
    }
    return 0;
}

void cpu_src_cleanup(cpu_src_t *s)
{
    hc_cleanup(&s->proxy);
    hc_cleanup(&s->gateway);
}
