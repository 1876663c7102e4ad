/*
 * usage_hdr.c — the X-Sandgate-Usage header (usage_hdr.h).
 */
#include "usage_hdr.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WALL_MAX_S 1e7                /* longer than any run's timeout */
#define OUTPUT_MAX ((int64_t)1 << 50) /* bytes */

static int runtime_valid(const char *v, size_t len);

void sg_usage_hdr_format(const sg_usage_hdr_t *u, char *out, size_t outlen)
{
    int n = snprintf(out, outlen, "wall=%.6f; exit=%d; timed_out=%d; output=%lld", u->wall_s, u->exit_code,
                     u->timed_out ? 1 : 0, (long long)u->output_bytes);
    if (runtime_valid(u->runtime, strlen(u->runtime)) && n > 0 && (size_t)n < outlen)
        snprintf(out + n, outlen - (size_t)n, "; runtime=%s", u->runtime);
}

/* A decimal integer, the whole of v[0..len), in [lo, hi]. */
static int parse_int(const char *v, size_t len, long long lo, long long hi, long long *out)
{
    char buf[24];
    char *end;
    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, v, len);
    buf[len] = '\0';
    if (!(buf[0] == '-' || (buf[0] >= '0' && buf[0] <= '9')))
        return -1;
    errno = 0;
    long long x = strtoll(buf, &end, 10);
    if (errno != 0 || *end != '\0' || x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

/* A non-negative decimal number "123" or "123.456", in [0, WALL_MAX_S]. */
static int parse_wall(const char *v, size_t len, double *out)
{
    char buf[32];
    char *end;
    size_t dots = 0;
    if (len == 0 || len >= sizeof(buf))
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (v[i] == '.')
            dots++;
        else if (v[i] < '0' || v[i] > '9')
            return -1;
    }
    if (dots > 1 || v[0] == '.' || v[len - 1] == '.')
        return -1;
    memcpy(buf, v, len);
    buf[len] = '\0';
    errno = 0;
    double x = strtod(buf, &end);
    if (errno != 0 || *end != '\0' || !isfinite(x) || x < 0 || x > WALL_MAX_S)
        return -1;
    *out = x;
    return 0;
}

static int runtime_valid(const char *v, size_t len)
{
    if (len == 0 || len >= sizeof(((sg_usage_hdr_t *)0)->runtime))
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = v[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static int key_is(const char *k, size_t klen, const char *name)
{
    return klen == strlen(name) && memcmp(k, name, klen) == 0;
}

int sg_usage_hdr_parse(const char *v, size_t len, sg_usage_hdr_t *u)
{
    enum { WALL = 1, EXIT = 2, TIMED_OUT = 4, OUTPUT = 8, RUNTIME = 16, REQUIRED = 15 };
    unsigned seen = 0;
    long long x;

    if (v == NULL || len == 0 || len > SG_USAGE_HDR_MAX || v[len - 1] == ';')
        return -1;
    memset(u, 0, sizeof(*u));
    size_t i = 0;
    while (i < len) {
        size_t end = i;
        while (end < len && v[end] != ';')
            end++;
        /* one "key=value", spaces around it */
        size_t a = i, b = end;
        while (a < b && v[a] == ' ')
            a++;
        while (b > a && v[b - 1] == ' ')
            b--;
        const char *eq = memchr(v + a, '=', b - a);
        if (eq == NULL)
            return -1;
        const char *k = v + a, *val = eq + 1;
        size_t klen = (size_t)(eq - k), vlen = (size_t)(v + b - val);
        unsigned bit = 0;
        if (key_is(k, klen, "wall")) {
            bit = WALL;
            if (parse_wall(val, vlen, &u->wall_s) != 0)
                return -1;
        } else if (key_is(k, klen, "exit")) {
            bit = EXIT;
            if (parse_int(val, vlen, -2147483647LL - 1, 2147483647LL, &x) != 0)
                return -1;
            u->exit_code = (int)x;
        } else if (key_is(k, klen, "timed_out")) {
            bit = TIMED_OUT;
            if (parse_int(val, vlen, 0, 1, &x) != 0)
                return -1;
            u->timed_out = (int)x;
        } else if (key_is(k, klen, "output")) {
            bit = OUTPUT;
            if (parse_int(val, vlen, 0, OUTPUT_MAX, &x) != 0)
                return -1;
            u->output_bytes = x;
        } else if (key_is(k, klen, "runtime")) {
            bit = RUNTIME;
            if (!runtime_valid(val, vlen))
                return -1;
            memcpy(u->runtime, val, vlen);
            u->runtime[vlen] = '\0';
        } else if (klen == 0) {
            return -1;
        }
        if (bit != 0 && (seen & bit) != 0)
            return -1;
        seen |= bit;
        i = end + 1;
    }
    return (seen & REQUIRED) == REQUIRED ? 0 : -1;
}
