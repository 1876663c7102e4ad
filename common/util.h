/*
 * util.h — small helpers with no better home: allocation, ids, clocks,
 * time strings.
 */
#ifndef SANDGATE_UTIL_H
#define SANDGATE_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Allocation failure is fatal, here and only here: these log "out of
 * memory" and abort instead of returning NULL, so callers never test for
 * it. (The in-sandbox agent, which does not link common/, has its own.) */
void *sg_xmalloc(size_t n);
void *sg_xcalloc(size_t n, size_t size);
void *sg_xrealloc(void *p, size_t n);
char *sg_xstrdup(const char *s);
char *sg_xstrndup(const char *s, size_t n);
/* Logs and aborts: what the above call when the allocator fails. */
void sg_oom(size_t n) __attribute__((noreturn));

/* Fills buf with n random bytes from the kernel (small requests from a
 * per-thread pool of them, each byte given once). Returns 0 or -1. */
int sg_random_bytes(void *buf, size_t n);
/* A random RFC 4122 version-4 UUID, 36 chars + NUL. Returns 0 or -1. */
int sg_uuid4(char out[37]);
/* Monotonic milliseconds / microseconds. */
uint64_t sg_now_ms(void);
uint64_t sg_now_us(void);
/* Wall-clock seconds since the epoch. */
int64_t sg_wall_s(void);
/* RFC 3339 UTC time, e.g. 2026-11-21T10:00:00Z, into out[32]. */
void sg_rfc3339(int64_t unix_s, char out[32]);
/* 1 if s[0..len) is a canonical lowercase UUID string. */
int sg_is_uuid(const char *s, size_t len);

/* What the hot paths would otherwise ask snprintf for (its format
 * machinery costs more than the work): in[0..n) as 2n lowercase hex digits
 * and a NUL, into out[2n + 1]; */
void sg_hex(char *out, const void *in, size_t n);
/* v in decimal and a NUL into out[21], returning the digits' length; */
size_t sg_fmt_i64(char out[21], int64_t v);
/* snprintf(dst, cap, "%.*s", len, src): src[0..len), up to a NUL in it,
 * cut to cap - 1 bytes, and a NUL; returns the length copied (cap > 0). */
size_t sg_copy(char *dst, size_t cap, const char *src, size_t len);

#endif
