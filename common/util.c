#include "util.h"
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

void sg_oom(size_t n)
{
    sg_error("out of memory (%zu bytes)", n);
    abort();
}

void *sg_xmalloc(size_t n)
{
    void *p = malloc(n != 0 ? n : 1);
    if (p == NULL)
        sg_oom(n);
    return p;
}

void *sg_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n != 0 ? n : 1, size != 0 ? size : 1);
    if (p == NULL)
        sg_oom(n * size);
    return p;
}

void *sg_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n != 0 ? n : 1);
    if (q == NULL)
        sg_oom(n);
    return q;
}

char *sg_xstrdup(const char *s)
{
    return sg_xstrndup(s, strlen(s));
}

char *sg_xstrndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = sg_xmalloc(len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

static int getrandom_all(void *buf, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t r = getrandom((char *)buf + off, n - off, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        off += (size_t)r;
    }
    return 0;
}

/* Small requests (a request id, a slot token: two per execution) are
 * served from a per-thread pool of the kernel's bytes, one getrandom per
 * RANDOM_POOL bytes instead of one per request. A byte is handed out once
 * and wiped as it goes; a forked child starts with an empty pool. */
#define RANDOM_POOL 512
static __thread unsigned char pool[RANDOM_POOL];
static __thread size_t pool_left;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static void pool_forget(void)
{
    explicit_bzero(pool, sizeof(pool));
    pool_left = 0;
}

static void pool_setup(void)
{
    pthread_atfork(NULL, NULL, pool_forget);
}

int sg_random_bytes(void *buf, size_t n)
{
    unsigned char *from;

    pthread_once(&pool_once, pool_setup);
    if (n > RANDOM_POOL / 4)
        return getrandom_all(buf, n);
    if (pool_left < n) {
        if (getrandom_all(pool, RANDOM_POOL) != 0)
            return -1;
        pool_left = RANDOM_POOL;
    }
    from = pool + RANDOM_POOL - pool_left;
    memcpy(buf, from, n);
    explicit_bzero(from, n);
    pool_left -= n;
    return 0;
}

int sg_uuid4(char out[37])
{
    unsigned char b[16];
    if (sg_random_bytes(b, sizeof(b)) != 0)
        return -1;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
             b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    return 0;
}

int sg_is_uuid(const char *s, size_t len)
{
    if (len != 36)
        return 0;
    for (size_t i = 0; i < 36; i++) {
        char c = s[i];
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-')
                return 0;
        } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            return 0;
        }
    }
    return 1;
}

uint64_t sg_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

uint64_t sg_now_ms(void)
{
    return sg_now_us() / 1000;
}

int64_t sg_wall_s(void)
{
    return (int64_t)time(NULL);
}

void sg_rfc3339(int64_t unix_s, char out[32])
{
    time_t t = (time_t)unix_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void sg_hex(char *out, const void *in, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *b = in;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

size_t sg_fmt_i64(char out[21], int64_t v)
{
    char tmp[20];
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    size_t n = 0, len = 0;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0)
        out[len++] = '-';
    while (n > 0)
        out[len++] = tmp[--n];
    out[len] = '\0';
    return len;
}

size_t sg_copy(char *dst, size_t cap, const char *src, size_t len)
{
    const char *nul = memchr(src, '\0', len);
    if (nul != NULL)
        len = (size_t)(nul - src);
    if (len > cap - 1)
        len = cap - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
    return len;
}
