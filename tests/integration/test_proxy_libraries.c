/*
 * test_proxy_libraries.c — library installs (proxy/install.h): an installer
 * container with network fetches a package into the store volume, then the
 * sandbox (no network) installs it from the read-only store. Through the
 * real proxy, the real Docker engine and the real python/javascript images.
 *
 * No public index is needed: the test serves its own package index on
 * 127.0.0.1 (a tiny HTTP/1.0 static file server on threads of this process)
 * with packages it builds itself:
 *   - three wheels of sgtestpkg_<random> (1.0, 2.0, 3.0, stored ZIPs
 *     written here) under a PEP 503 "simple" index;
 *   - an npm package sgtest-js-<random> (a ustar tar, gzipped with stored
 *     deflate blocks, written here) and its registry document.
 * The installers reach it because the proxy runs them on the host network
 * (SANDGATE_INSTALL_NETWORK=host). The server counts requests per path, so
 * the tests can tell whether the index was contacted at all; Docker's event
 * log tells whether an installer container was created.
 *
 * The proxy runs without a warm pool and with a store volume of its own
 * (<proxy id>-store), removed at the end. Tests run in order: the store
 * fills up as they go (test 2 relies on test 1's fetch).
 */
#include "sgtest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define INSTALL_TIMEOUT_S 20
#define SHORT_TIMEOUT_S 3    /* the install-timeout test's proxy */
#define TIMEOUT_BOUND_S 15.0 /* that proxy must give up within this */
#define REMOVAL_S 10.0       /* a closed session's container is gone within this */

static sgtest_proxy_t *proxy;
static char *proxy_id;
static char store_volume[128];
static bool proxy_stopped_on_purpose;

/* the second proxy of the install-timeout test */
static sgtest_proxy_t *slow_proxy;
static char *slow_proxy_id;
static char slow_volume[128];

static char tmpdir[256];  /* everything the test writes */
static char wwwroot[300]; /* what the index serves */
static char py_name[64];  /* sgtestpkg_<hex>: distribution and module */
static char py_norm[64];  /* sgtestpkg-<hex>: its PEP 503 name */
static char py_whl[3][128]; /* 1.0, 2.0, 3.0 */
static char js_name[64];  /* sgtest-js-<hex> */
static char js_tgz[128];

static char *pip_sid;                /* test 1's session, used again by test 7 */
static double pip_first, pip_second; /* installation_time, seconds */
static double npm_first, npm_second;

/* ------------------------------------------------------------------------
 * Bytes: a growable buffer, CRC-32, digests, base64
 * ------------------------------------------------------------------------ */

typedef struct {
    unsigned char *p;
    size_t len, cap;
} bytes_t;

static void b_put(bytes_t *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        assert_non_null(p);
        b->p = p;
        b->cap = cap;
    }
    if (n != 0)
        memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void b_u8(bytes_t *b, unsigned v)
{
    unsigned char c = (unsigned char)v;
    b_put(b, &c, 1);
}

static void b_u16(bytes_t *b, unsigned v)
{
    unsigned char c[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
    b_put(b, c, 2);
}

static void b_u32(bytes_t *b, uint32_t v)
{
    unsigned char c[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    b_put(b, c, 4);
}

static void b_free(bytes_t *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

static uint32_t crc32_of(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint32_t crc = 0xFFFFFFFFu;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

/* md must hold EVP_MAX_MD_SIZE bytes; returns the digest's length. */
static unsigned digest(const EVP_MD *type, const void *d, size_t n, unsigned char *md)
{
    unsigned len = 0;
    assert_int_equal(EVP_Digest(d, n, md, &len, type, NULL), 1);
    return len;
}

static void hex_of(const unsigned char *md, unsigned n, char *out)
{
    for (unsigned i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", md[i]);
}

/* urlsafe: '-' '_' and no padding (wheel RECORD); else standard, padded. */
static void base64_of(const unsigned char *d, size_t n, bool urlsafe, char *out)
{
    const char *a = urlsafe ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                            : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) |
                     (i + 2 < n ? d[i + 2] : 0);
        out[o++] = a[v >> 18 & 63];
        out[o++] = a[v >> 12 & 63];
        if (i + 1 < n)
            out[o++] = a[v >> 6 & 63];
        else if (!urlsafe)
            out[o++] = '=';
        if (i + 2 < n)
            out[o++] = a[v & 63];
        else if (!urlsafe)
            out[o++] = '=';
    }
    out[o] = '\0';
}

/* ------------------------------------------------------------------------
 * Archives: a stored ZIP (wheels), a ustar tar, gzip with stored blocks
 * ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    const char *data;
} entry_t;

#define DOS_DATE_1980_01_01 0x21

static void zip_build(const entry_t *e, size_t n, bytes_t *out)
{
    uint32_t crc[16], off[16];
    assert_true(n <= 16);
    for (size_t i = 0; i < n; i++) {
        size_t nl = strlen(e[i].name), dl = strlen(e[i].data);
        crc[i] = crc32_of(e[i].data, dl);
        off[i] = (uint32_t)out->len;
        b_u32(out, 0x04034b50); /* local file header */
        b_u16(out, 20);         /* version needed */
        b_u16(out, 0);          /* flags */
        b_u16(out, 0);          /* stored */
        b_u16(out, 0);          /* time */
        b_u16(out, DOS_DATE_1980_01_01);
        b_u32(out, crc[i]);
        b_u32(out, (uint32_t)dl);
        b_u32(out, (uint32_t)dl);
        b_u16(out, (unsigned)nl);
        b_u16(out, 0); /* extra */
        b_put(out, e[i].name, nl);
        b_put(out, e[i].data, dl);
    }
    size_t cd = out->len;
    for (size_t i = 0; i < n; i++) {
        size_t nl = strlen(e[i].name), dl = strlen(e[i].data);
        b_u32(out, 0x02014b50); /* central directory header */
        b_u16(out, 3 << 8 | 20); /* made by: Unix */
        b_u16(out, 20);
        b_u16(out, 0);
        b_u16(out, 0);
        b_u16(out, 0);
        b_u16(out, DOS_DATE_1980_01_01);
        b_u32(out, crc[i]);
        b_u32(out, (uint32_t)dl);
        b_u32(out, (uint32_t)dl);
        b_u16(out, (unsigned)nl);
        b_u16(out, 0); /* extra */
        b_u16(out, 0); /* comment */
        b_u16(out, 0); /* disk */
        b_u16(out, 0); /* internal attributes */
        b_u32(out, (uint32_t)0100644 << 16);
        b_u32(out, off[i]);
        b_put(out, e[i].name, nl);
    }
    size_t cd_size = out->len - cd;
    b_u32(out, 0x06054b50); /* end of central directory */
    b_u16(out, 0);
    b_u16(out, 0);
    b_u16(out, (unsigned)n);
    b_u16(out, (unsigned)n);
    b_u32(out, (uint32_t)cd_size);
    b_u32(out, (uint32_t)cd);
    b_u16(out, 0);
}

static void tar_add(bytes_t *out, const char *name, const char *data)
{
    unsigned char h[512] = {0};
    size_t dl = strlen(data);
    assert_true(strlen(name) < 100);
    memcpy(h, name, strlen(name));
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0001750", 8);
    memcpy(h + 116, "0001750", 8);
    snprintf((char *)h + 124, 12, "%011o", (unsigned)dl);
    snprintf((char *)h + 136, 12, "%011o", 1700000000u);
    memset(h + 148, ' ', 8);
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    unsigned sum = 0;
    for (size_t i = 0; i < sizeof(h); i++)
        sum += h[i];
    snprintf((char *)h + 148, 7, "%06o", sum);
    h[155] = ' ';
    b_put(out, h, sizeof(h));
    b_put(out, data, dl);
    static const unsigned char zero[512];
    if (dl % 512 != 0)
        b_put(out, zero, 512 - dl % 512);
}

static void tar_end(bytes_t *out)
{
    static const unsigned char zero[1024];
    b_put(out, zero, sizeof(zero));
}

static void gzip_stored(const bytes_t *in, bytes_t *out)
{
    static const unsigned char hdr[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    b_put(out, hdr, sizeof(hdr));
    size_t off = 0;
    do {
        size_t n = in->len - off > 65535 ? 65535 : in->len - off;
        b_u8(out, off + n == in->len ? 1 : 0); /* BFINAL, BTYPE 00 (stored) */
        b_u16(out, (unsigned)n);
        b_u16(out, (unsigned)~n & 0xFFFF);
        b_put(out, in->p + off, n);
        off += n;
    } while (off < in->len);
    b_u32(out, crc32_of(in->p, in->len));
    b_u32(out, (uint32_t)in->len);
}

/* ------------------------------------------------------------------------
 * Files
 * ------------------------------------------------------------------------ */

static void mkdirs(const char *path)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s", path);
    for (char *s = p + 1; *s != '\0'; s++) {
        if (*s == '/') {
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                SG_FAIL(NULL, "mkdir %s: %s", p, strerror(errno));
            *s = '/';
        }
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        SG_FAIL(NULL, "mkdir %s: %s", p, strerror(errno));
}

/* Writes www/<rel> (directories made as needed). */
static void write_www(const char *rel, const void *data, size_t n)
{
    char path[600], dir[600];
    snprintf(path, sizeof(path), "%s/%s", wwwroot, rel);
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = '\0';
    mkdirs(dir);
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        SG_FAIL(NULL, "fopen %s: %s", path, strerror(errno));
    SG_CHECK(fwrite(data, 1, n, f) == n && fclose(f) == 0, NULL, "cannot write %s", path);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void rm_tree(const char *path)
{
    if (path[0] != '\0')
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ------------------------------------------------------------------------
 * The package index: a static file server on 127.0.0.1
 * ------------------------------------------------------------------------ */

#define MAX_PATHS 128
#define MAX_HELD 64

typedef struct {
    char path[256];
    int count;
} hit_t;

typedef struct {
    int lfd, port;
    bool hold; /* accept and hold every connection, never answer */
    char root[300];
    pthread_t thread;
    bool running;
    int wake[2];
    pthread_mutex_t mu;
    pthread_cond_t idle;
    int active; /* connections being answered */
    hit_t hits[MAX_PATHS];
    int nhits, total;
    int held[MAX_HELD], nheld, accepted;
} server_t;

static server_t index_srv = {.lfd = -1, .wake = {-1, -1}, .mu = PTHREAD_MUTEX_INITIALIZER,
                             .idle = PTHREAD_COND_INITIALIZER};
static server_t hold_srv = {.lfd = -1, .wake = {-1, -1}, .mu = PTHREAD_MUTEX_INITIALIZER,
                            .idle = PTHREAD_COND_INITIALIZER};

typedef struct {
    server_t *srv;
    int fd;
} conn_t;

static void send_all(int fd, const void *d, size_t n)
{
    const char *p = d;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void record_hit(server_t *s, const char *path)
{
    pthread_mutex_lock(&s->mu);
    s->total++;
    int i;
    for (i = 0; i < s->nhits; i++)
        if (strcmp(s->hits[i].path, path) == 0)
            break;
    if (i == s->nhits && s->nhits < MAX_PATHS)
        snprintf(s->hits[s->nhits++].path, sizeof(s->hits[0].path), "%s", path);
    if (i < s->nhits)
        s->hits[i].count++;
    pthread_mutex_unlock(&s->mu);
}

/* Requests so far whose path starts with prefix ("" for all). */
static int hits(server_t *s, const char *prefix)
{
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nhits; i++)
        if (strncmp(s->hits[i].path, prefix, strlen(prefix)) == 0)
            n += s->hits[i].count;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    bytes_t b = {0};
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
        if (b.len + n > b.cap) {
            size_t cap = b.cap ? b.cap * 2 : 16384;
            while (cap < b.len + n)
                cap *= 2;
            unsigned char *p = realloc(b.p, cap);
            if (p == NULL)
                break;
            b.p = p;
            b.cap = cap;
        }
        memcpy(b.p + b.len, buf, n);
        b.len += n;
    }
    fclose(f);
    *len = b.len;
    return b.p != NULL ? (char *)b.p : calloc(1, 1);
}

static void serve(server_t *s, int fd)
{
    char req[8192];
    size_t got = 0;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (got + 1 < sizeof(req)) {
        ssize_t r = recv(fd, req + got, sizeof(req) - 1 - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
        req[got] = '\0';
        if (strstr(req, "\r\n\r\n") != NULL)
            break;
    }
    req[got] = '\0';
    char method[16] = "", target[512] = "";
    if (sscanf(req, "%15s %511s", method, target) != 2)
        return;
    target[strcspn(target, "?#")] = '\0';
    record_hit(s, target);

    /* a path of the tree, never outside it; a directory serves its index */
    char path[1024] = "", *body = NULL;
    size_t len = 0;
    const char *type = "application/octet-stream";
    bool ok = target[0] == '/' && strstr(target, "..") == NULL && strchr(target, '%') == NULL &&
              (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0);
    struct stat st;
    if (ok) {
        snprintf(path, sizeof(path), "%s%s", s->root, target);
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            size_t pl = strlen(path);
            while (pl > 0 && path[pl - 1] == '/')
                path[--pl] = '\0';
            snprintf(path + pl, sizeof(path) - pl, "/index.html");
            type = "text/html";
            if (stat(path, &st) != 0) {
                snprintf(path + pl, sizeof(path) - pl, "/index.json");
                type = "application/json";
            }
        }
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            ok = false;
    }
    if (ok)
        body = slurp(path, &len);
    char head[512];
    if (body != NULL) {
        int n = snprintf(head, sizeof(head),
                         "HTTP/1.0 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\n\r\n",
                         type, len);
        send_all(fd, head, (size_t)n);
        if (strcmp(method, "HEAD") != 0)
            send_all(fd, body, len);
    } else {
        static const char nf[] = "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
                                 "Content-Length: 10\r\nConnection: close\r\n\r\nnot found\n";
        send_all(fd, nf, sizeof(nf) - 1);
    }
    fprintf(stderr, "index: %s %s -> %d\n", method, target, body != NULL ? 200 : 404);
    free(body);
}

static void *conn_thread(void *arg)
{
    conn_t *c = arg;
    serve(c->srv, c->fd);
    shutdown(c->fd, SHUT_WR);
    close(c->fd);
    pthread_mutex_lock(&c->srv->mu);
    if (--c->srv->active == 0)
        pthread_cond_broadcast(&c->srv->idle);
    pthread_mutex_unlock(&c->srv->mu);
    free(c);
    return NULL;
}

static void *accept_thread(void *arg)
{
    server_t *s = arg;
    for (;;) {
        struct pollfd pf[2] = {{.fd = s->lfd, .events = POLLIN}, {.fd = s->wake[0], .events = POLLIN}};
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[1].revents != 0)
            break;
        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        pthread_mutex_lock(&s->mu);
        s->accepted++;
        if (s->hold) {
            if (s->nheld < MAX_HELD)
                s->held[s->nheld++] = fd;
            else
                close(fd);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        s->active++;
        pthread_mutex_unlock(&s->mu);
        conn_t *c = malloc(sizeof(*c));
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (c != NULL) {
            c->srv = s;
            c->fd = fd;
        }
        if (c == NULL || pthread_create(&t, &attr, conn_thread, c) != 0) {
            close(fd);
            free(c);
            pthread_mutex_lock(&s->mu);
            s->active--;
            pthread_mutex_unlock(&s->mu);
        }
        pthread_attr_destroy(&attr);
    }
    return NULL;
}

/* Binds 127.0.0.1 on a free port (loopback only) and starts serving. */
static int server_start(server_t *s, const char *root, bool hold)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    s->hold = hold;
    snprintf(s->root, sizeof(s->root), "%s", root != NULL ? root : "");
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(s->lfd, 64) != 0 ||
        getsockname(s->lfd, (struct sockaddr *)&a, &al) != 0 || pipe2(s->wake, O_CLOEXEC) != 0) {
        fprintf(stderr, "index server: cannot listen on 127.0.0.1: %s\n", strerror(errno));
        return -1;
    }
    s->port = ntohs(a.sin_port);
    if (pthread_create(&s->thread, NULL, accept_thread, s) != 0)
        return -1;
    s->running = true;
    return 0;
}

/* Stops accepting, waits (up to 10 s) for answers under way, closes all. */
static void server_stop(server_t *s)
{
    if (s->running) {
        if (write(s->wake[1], "x", 1) != 1)
            perror("index server: wake");
        pthread_join(s->thread, NULL);
        s->running = false;
    }
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    pthread_mutex_lock(&s->mu);
    while (s->active > 0)
        if (pthread_cond_timedwait(&s->idle, &s->mu, &dl) == ETIMEDOUT)
            break;
    if (s->active > 0)
        fprintf(stderr, "index server: %d connection(s) still being answered\n", s->active);
    for (int i = 0; i < s->nheld; i++)
        close(s->held[i]);
    s->nheld = 0;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < 2; i++)
        if (s->wake[i] >= 0)
            close(s->wake[i]), s->wake[i] = -1;
    if (s->lfd >= 0)
        close(s->lfd), s->lfd = -1;
}

/* true when nothing listens on 127.0.0.1:port any more */
static int accepted(server_t *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->accepted;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static bool port_closed(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool closed = connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 && errno == ECONNREFUSED;
    close(fd);
    return closed;
}

/* ------------------------------------------------------------------------
 * The packages
 * ------------------------------------------------------------------------ */

static void build_wheel(int which, const char *version)
{
    char init[512], metadata[512], wheel[256], record[2048];
    char dist_info[128], init_name[128], meta_name[160], wheel_name[160], record_name[160];
    unsigned char md[EVP_MAX_MD_SIZE];
    char b64[128];

    snprintf(init, sizeof(init),
             "\"\"\"sandgate's test package (built by test_proxy_libraries.c).\"\"\"\n"
             "VALUE = 42\nVERSION = \"%s\"\n\n\ndef double(x):\n    return 2 * x\n",
             version);
    snprintf(metadata, sizeof(metadata),
             "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: sandgate test package\n", py_name,
             version);
    snprintf(wheel, sizeof(wheel),
             "Wheel-Version: 1.0\nGenerator: sgtest\nRoot-Is-Purelib: true\nTag: py3-none-any\n");
    snprintf(dist_info, sizeof(dist_info), "%s-%s.dist-info", py_name, version);
    snprintf(init_name, sizeof(init_name), "%s/__init__.py", py_name);
    snprintf(meta_name, sizeof(meta_name), "%s/METADATA", dist_info);
    snprintf(wheel_name, sizeof(wheel_name), "%s/WHEEL", dist_info);
    snprintf(record_name, sizeof(record_name), "%s/RECORD", dist_info);

    size_t rl = 0;
    const entry_t hashed[] = {{init_name, init}, {meta_name, metadata}, {wheel_name, wheel}};
    for (size_t i = 0; i < 3; i++) {
        unsigned n = digest(EVP_sha256(), hashed[i].data, strlen(hashed[i].data), md);
        base64_of(md, n, true, b64);
        rl += (size_t)snprintf(record + rl, sizeof(record) - rl, "%s,sha256=%s,%zu\n", hashed[i].name,
                               b64, strlen(hashed[i].data));
    }
    snprintf(record + rl, sizeof(record) - rl, "%s,,\n", record_name);

    const entry_t entries[] = {{init_name, init}, {meta_name, metadata}, {wheel_name, wheel},
                               {record_name, record}};
    bytes_t zip = {0};
    zip_build(entries, 4, &zip);
    snprintf(py_whl[which], sizeof(py_whl[which]), "%s-%s-py3-none-any.whl", py_name, version);
    char rel[300];
    snprintf(rel, sizeof(rel), "packages/%s", py_whl[which]);
    write_www(rel, zip.p, zip.len);
    b_free(&zip);
}

/* /simple/ and /simple/<name>/, links with #sha256= (PEP 503) */
static void build_simple_index(void)
{
    char html[4096], rel[300], path[1024];
    unsigned char md[EVP_MAX_MD_SIZE];
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    size_t n = (size_t)snprintf(html, sizeof(html), "<!DOCTYPE html>\n<html><body>\n");
    for (int i = 0; i < 3; i++) {
        size_t len;
        snprintf(path, sizeof(path), "%s/packages/%s", wwwroot, py_whl[i]);
        char *whl = slurp(path, &len);
        SG_CHECK(whl != NULL, NULL, "cannot read back %s", path);
        hex_of(md, digest(EVP_sha256(), whl, len, md), hex);
        free(whl);
        n += (size_t)snprintf(html + n, sizeof(html) - n,
                              "<a href=\"http://127.0.0.1:%d/packages/%s#sha256=%s\">%s</a><br/>\n",
                              index_srv.port, py_whl[i], hex, py_whl[i]);
    }
    snprintf(html + n, sizeof(html) - n, "</body></html>\n");
    snprintf(rel, sizeof(rel), "simple/%s/index.html", py_norm);
    write_www(rel, html, strlen(html));
    snprintf(html, sizeof(html), "<!DOCTYPE html>\n<html><body>\n<a href=\"%s/\">%s</a>\n</body></html>\n",
             py_norm, py_norm);
    write_www("simple/index.html", html, strlen(html));
}

/* /<name>/-/<name>-1.0.0.tgz and the registry document /<name> (the
 * directory's index.json) */
static void build_npm_package(void)
{
    char pkg_json[512], index_js[256], rel[300];
    snprintf(pkg_json, sizeof(pkg_json),
             "{\n  \"name\": \"%s\",\n  \"version\": \"1.0.0\",\n  \"description\": \"sandgate test package\",\n"
             "  \"main\": \"index.js\",\n  \"license\": \"MIT\"\n}\n",
             js_name);
    snprintf(index_js, sizeof(index_js), "module.exports = { value: 42, double: (x) => 2 * x };\n");
    bytes_t tar = {0}, tgz = {0};
    tar_add(&tar, "package/package.json", pkg_json);
    tar_add(&tar, "package/index.js", index_js);
    tar_end(&tar);
    gzip_stored(&tar, &tgz);
    b_free(&tar);
    snprintf(js_tgz, sizeof(js_tgz), "%s-1.0.0.tgz", js_name);
    snprintf(rel, sizeof(rel), "%s/-/%s", js_name, js_tgz);
    write_www(rel, tgz.p, tgz.len);

    unsigned char md[EVP_MAX_MD_SIZE];
    char sha1[2 * EVP_MAX_MD_SIZE + 1], b64[200], integrity[220], url[400];
    hex_of(md, digest(EVP_sha1(), tgz.p, tgz.len, md), sha1);
    base64_of(md, digest(EVP_sha512(), tgz.p, tgz.len, md), false, b64);
    snprintf(integrity, sizeof(integrity), "sha512-%s", b64);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/%s/-/%s", index_srv.port, js_name, js_tgz);
    b_free(&tgz);

    json_object *doc = json_object_new_object(), *tags = json_object_new_object();
    json_object *versions = json_object_new_object(), *v = json_object_new_object();
    json_object *dist = json_object_new_object();
    json_object_object_add(doc, "name", json_object_new_string(js_name));
    json_object_object_add(tags, "latest", json_object_new_string("1.0.0"));
    json_object_object_add(doc, "dist-tags", tags);
    json_object_object_add(v, "name", json_object_new_string(js_name));
    json_object_object_add(v, "version", json_object_new_string("1.0.0"));
    json_object_object_add(v, "main", json_object_new_string("index.js"));
    json_object_object_add(dist, "tarball", json_object_new_string(url));
    json_object_object_add(dist, "shasum", json_object_new_string(sha1));
    json_object_object_add(dist, "integrity", json_object_new_string(integrity));
    json_object_object_add(v, "dist", dist);
    json_object_object_add(versions, "1.0.0", v);
    json_object_object_add(doc, "versions", versions);
    const char *s = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN);
    snprintf(rel, sizeof(rel), "%s/index.json", js_name);
    write_www(rel, s, strlen(s));
    json_object_put(doc);
}

/* ------------------------------------------------------------------------
 * Docker: installer containers created (from the event log), volumes
 * ------------------------------------------------------------------------ */

typedef struct timespec wall_t;

static wall_t wall_now(void)
{
    wall_t t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t;
}

/* Installer containers of proxy pid created since `since` (Docker's event
 * log: an installer removed long ago still counts). */
static int installers_created_since(const char *pid, wall_t since)
{
    wall_t until = wall_now();
    char l1[192];
    snprintf(l1, sizeof(l1), "sandgate.proxy=%s", pid);
    json_object *f = json_object_new_object(), *a;
    a = json_object_new_array();
    json_object_array_add(a, json_object_new_string("container"));
    json_object_object_add(f, "type", a);
    a = json_object_new_array();
    json_object_array_add(a, json_object_new_string("create"));
    json_object_object_add(f, "event", a);
    a = json_object_new_array();
    json_object_array_add(a, json_object_new_string(l1));
    json_object_array_add(a, json_object_new_string("sandgate.kind=installer"));
    json_object_object_add(f, "label", a);
    char *enc = sgtest_urlencode(json_object_to_json_string_ext(f, JSON_C_TO_STRING_PLAIN));
    json_object_put(f);
    char path[1024];
    snprintf(path, sizeof(path), "/events?since=%lld.%09ld&until=%lld.%09ld&filters=%s",
             (long long)since.tv_sec, since.tv_nsec, (long long)until.tv_sec, until.tv_nsec, enc);
    free(enc);
    sgtest_reply_t r;
    sgtest_docker_call("GET", path, NULL, &r);
    if (r.status != 200)
        SG_FAIL(NULL, "docker GET /events: HTTP %ld %s %s", r.status, r.error, r.body);
    int n = 0;
    for (char *line = strtok(r.body, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        json_object *e = json_tokener_parse(line);
        json_object *act = e != NULL ? sgtest_jpath(e, "Action") : NULL;
        if (act != NULL && strcmp(json_object_get_string(act), "create") == 0)
            n++;
        json_object_put(e);
    }
    sgtest_reply_free(&r);
    return n;
}

/* Installer containers of proxy pid that exist now. */
static int installers_now(const char *pid)
{
    char l1[192];
    snprintf(l1, sizeof(l1), "sandgate.proxy=%s", pid);
    const char *labels[] = {l1, "sandgate.kind=installer", NULL};
    json_object *a = sgtest_docker_list(labels);
    if (a == NULL)
        SG_FAIL(NULL, "cannot list containers from Docker");
    int n = (int)json_object_array_length(a);
    json_object_put(a);
    return n;
}

/* 200 exists, 404 not; anything else fails. */
static long volume_status(const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "/volumes/%s", name);
    sgtest_reply_t r;
    sgtest_docker_call("GET", path, NULL, &r);
    long st = r.status;
    sgtest_reply_free(&r);
    return st;
}

/* DELETE /volumes/<name>?force=1: the HTTP status (204, or 404 if absent). */
static long volume_remove(const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "/volumes/%s?force=1", name);
    sgtest_reply_t r;
    sgtest_docker_call("DELETE", path, NULL, &r);
    long st = r.status;
    if (st != 204 && st != 404)
        fprintf(stderr, "removing volume %s: HTTP %ld %s %s\n", name, st, r.error, r.body);
    sgtest_reply_free(&r);
    return st;
}

static bool image_exists(const char *image)
{
    char path[256];
    snprintf(path, sizeof(path), "/images/%s/json", image);
    sgtest_reply_t r;
    sgtest_docker_call("GET", path, NULL, &r);
    bool ok = r.status == 200;
    sgtest_reply_free(&r);
    return ok;
}

/* ------------------------------------------------------------------------
 * The proxy API (test thread only)
 * ------------------------------------------------------------------------ */


static char *create_session_on(sgtest_proxy_t *p, const char *lang)
{
    json_object *body = json_object_new_object();
    json_object_object_add(body, "lang", json_object_new_string(lang));
    json_object_object_add(body, "keep_template", json_object_new_boolean(0));
    sgtest_reply_t r;
    sgtest_call_json(p, "POST", "/sessions", body, 0, &r);
    json_object_put(body);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    const char *id = SG_STR(o, "session_id");
    SG_CHECK(*id != '\0', o, "empty session_id");
    char *copy = strdup(id);
    json_object_put(o);
    return copy;
}

static char *create_session(const char *lang)
{
    return create_session_on(proxy, lang);
}

static void close_session_on(sgtest_proxy_t *p, const char *pid, const char *sid)
{
    sgtest_close_session(p, pid, sid, NULL, REMOVAL_S);
}

static void close_session(const char *sid)
{
    close_session_on(proxy, proxy_id, sid);
}

static json_object *run_code_on(sgtest_proxy_t *p, const char *sid, const char *code, const char *const *libs)
{
    return sgtest_run_code(p, sid, code, libs, 0, NULL);
}

static json_object *run_code(const char *sid, const char *code, const char *const *libs)
{
    return run_code_on(proxy, sid, code, libs);
}

static json_object *run_cmd(const char *sid, const char *cmd)
{
    return sgtest_run_cmd(proxy, sid, cmd, 0, NULL);
}

static json_object *run_ephemeral(const char *lang, const char *code, const char *const *libs)
{
    return sgtest_run_ephemeral(proxy, lang, code, libs, 0, NULL);
}

static void expect_output(json_object *r, const char *want)
{
    if (strcmp(SG_STR(r, "stdout"), want) != 0)
        SG_FAIL(r, "stdout differs: expected \"%s\"", want);
    if (!SG_BOOL(r, "success"))
        SG_FAIL(r, "expected a successful run");
}

/* The fields of every POST /sessions/{id}/libraries reply, and that they
 * agree: installed_version is a string exactly when success is true. */
static void check_install_shape(json_object *o)
{
    bool success = SG_BOOL(o, "success");
    SG_STR(o, "message");
    double t = SG_DBL(o, "installation_time");
    SG_BOOL(o, "from_store");
    SG_CHECK(t >= 0, o, "installation_time is negative");
    json_object *v = NULL;
    SG_CHECK(json_object_object_get_ex(o, "installed_version", &v), o, "installed_version is missing");
    if (success)
        SG_CHECK(json_object_is_type(v, json_type_string) && json_object_get_string_len(v) > 0, o,
                 "a successful install must name the installed version");
    else
        SG_CHECK(v == NULL, o, "a failed install has installed_version null");
}

/* POST /sessions/{sid}/libraries; version NULL leaves the field out. The
 * parsed 200 reply (shape checked); *seconds gets the call's wall time. */
static json_object *install_on(sgtest_proxy_t *p, const char *sid, const char *package, const char *version,
                               double *seconds)
{
    json_object *b = json_object_new_object();
    json_object_object_add(b, "package", json_object_new_string(package));
    if (version != NULL)
        json_object_object_add(b, "version", json_object_new_string(version));
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s/libraries", sid);
    sgtest_reply_t r;
    sgtest_call_json(p, "POST", path, b, 0, &r);
    json_object_put(b);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    if (seconds != NULL)
        *seconds = r.seconds;
    sgtest_reply_free(&r);
    check_install_shape(o);
    return o;
}

static json_object *install(const char *sid, const char *package, const char *version)
{
    return install_on(proxy, sid, package, version, NULL);
}

static void expect_installed(json_object *o, const char *version, bool from_store)
{
    if (!SG_BOOL(o, "success"))
        SG_FAIL(o, "the install failed");
    if (strcmp(SG_STR(o, "installed_version"), version) != 0)
        SG_FAIL(o, "installed_version: expected \"%s\"", version);
    if (SG_BOOL(o, "from_store") != from_store)
        SG_FAIL(o, "from_store: expected %s", from_store ? "true" : "false");
    SG_CHECK(SG_DBL(o, "installation_time") > 0, o, "installation_time must be > 0");
}

/* A refused POST .../libraries: 400 bad_library naming `names` (may be NULL). */
static void expect_refused(const char *sid, const char *package, const char *version, const char *names)
{
    json_object *b = json_object_new_object();
    json_object_object_add(b, "package", json_object_new_string(package));
    if (version != NULL)
        json_object_object_add(b, "version", json_object_new_string(version));
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s/libraries", sid);
    sgtest_reply_t r;
    sgtest_call_json(proxy, "POST", path, b, 0, &r);
    json_object_put(b);
    json_object *o = SG_EXPECT_ERROR(&r, 400, "bad_library");
    sgtest_reply_free(&r);
    if (names != NULL && strstr(SG_STR(o, "detail"), names) == NULL)
        SG_FAIL(o, "package \"%s\" version \"%s\": the detail must name \"%s\"", package,
                version ? version : "(none)", names);
    json_object_put(o);
}

/* ------------------------------------------------------------------------
 * Fixtures
 * ------------------------------------------------------------------------ */

static sgtest_proxy_t *start_proxy(void)
{
    char pip_kv[160], npm_kv[160], store_kv[200], timeout_kv[64];
    snprintf(pip_kv, sizeof(pip_kv), "SANDGATE_PIP_INDEX_URL=http://127.0.0.1:%d/simple", index_srv.port);
    snprintf(npm_kv, sizeof(npm_kv), "SANDGATE_NPM_REGISTRY=http://127.0.0.1:%d/", index_srv.port);
    snprintf(store_kv, sizeof(store_kv), "SANDGATE_STORE_VOLUME=%s", store_volume);
    snprintf(timeout_kv, sizeof(timeout_kv), "SANDGATE_INSTALL_TIMEOUT=%d", INSTALL_TIMEOUT_S);
    const char *env[] = {"SANDGATE_POOL_SIZE=0", "SANDGATE_INSTALL_NETWORK=host", pip_kv, npm_kv, store_kv,
                         timeout_kv, NULL};
    sgtest_proxy_t *p = sgtest_proxy_start(proxy_id, env);
    if (p == NULL)
        fprintf(stderr, "cannot start the proxy\n");
    return p;
}

static int random_hex(char *out, size_t nbytes)
{
    unsigned char rnd[16];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (nbytes > sizeof(rnd) || fd < 0 || read(fd, rnd, nbytes) != (ssize_t)nbytes) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    for (size_t i = 0; i < nbytes; i++)
        sprintf(out + 2 * i, "%02x", rnd[i]);
    return 0;
}

static int group_setup(void **state)
{
    char hex[33];
    const char *tmp = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/sgtest-libraries-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(tmpdir) == NULL || random_hex(hex, 6) != 0) {
        perror("setup");
        tmpdir[0] = '\0';
        return -1;
    }
    snprintf(wwwroot, sizeof(wwwroot), "%s/www", tmpdir);
    snprintf(py_name, sizeof(py_name), "sgtestpkg_%s", hex);
    snprintf(py_norm, sizeof(py_norm), "sgtestpkg-%s", hex);
    snprintf(js_name, sizeof(js_name), "sgtest-js-%s", hex);

    if (server_start(&index_srv, wwwroot, false) != 0 || server_start(&hold_srv, NULL, true) != 0)
        return -1;
    build_wheel(0, "1.0");
    build_wheel(1, "2.0");
    build_wheel(2, "3.0");
    build_simple_index();
    build_npm_package();
    printf("index: http://127.0.0.1:%d (%s), packages %s (pip) and %s (npm); silent index on port %d\n",
           index_srv.port, wwwroot, py_name, js_name, hold_srv.port);

    proxy_id = sgtest_new_proxy_id();
    if (proxy_id == NULL)
        return -1;
    snprintf(store_volume, sizeof(store_volume), "%s-store", proxy_id);
    proxy = start_proxy();
    return proxy != NULL ? 0 : -1;
}

/* Stops p after closing its sessions; force-removes what it left; removes
 * its store volume. For teardowns (no assertions); -1 if anything was left. */
static int shut_down(sgtest_proxy_t **pp, const char *pid, const char *volume)
{
    int rc = pid != NULL ? sgtest_proxy_finish(pp, pid, REMOVAL_S) : 0;
    if (volume[0] != '\0' && volume_status(volume) == 200 && volume_remove(volume) != 204)
        rc = -1;
    return rc;
}

static int group_teardown(void **state)
{
    int rc = 0;
    if (shut_down(&slow_proxy, slow_proxy_id, slow_volume) != 0)
        rc = -1;
    if (shut_down(&proxy, proxy_id, store_volume) != 0)
        rc = -1;
    server_stop(&index_srv);
    server_stop(&hold_srv);
    rm_tree(tmpdir);
    free(pip_sid);
    free(proxy_id);
    free(slow_proxy_id);
    return rc;
}

/* After every test: a test during which the proxy died fails here, and the
 * proxy is started again (same id: it reconciles what the dead one left). */
static int check_proxy_alive(void **state)
{
    return proxy_stopped_on_purpose ? 0 : sgtest_proxy_check_alive(&proxy, start_proxy);
}

/* ------------------------------------------------------------------------
 * 1. pip install through the API, into a running interpreter
 * ------------------------------------------------------------------------ */

static void test_pip_install(void **state)
{
    char code[256];
    wall_t t0 = wall_now();
    int before = hits(&index_srv, "");

    pip_sid = create_session("python");
    /* the interpreter runs before the package exists, and cannot import it */
    json_object *o = run_code(pip_sid, "started = 'yes'\nprint(started)", NULL);
    expect_output(o, "yes\n");
    json_object_put(o);
    pathf(code, sizeof(code), "import %s", py_name);
    o = run_code(pip_sid, code, NULL);
    SG_CHECK(!SG_BOOL(o, "success") && strstr(SG_STR(o, "stderr"), "ModuleNotFoundError") != NULL, o,
             "%s must not be importable before the install", py_name);
    json_object_put(o);

    o = install(pip_sid, py_name, "1.0");
    expect_installed(o, "1.0", false);
    pip_first = SG_DBL(o, "installation_time");
    json_object_put(o);

    char simple[200], whl[200];
    pathf(simple, sizeof(simple), "/simple/%s", py_norm);
    pathf(whl, sizeof(whl), "/packages/%s", py_whl[0]);
    SG_CHECK(hits(&index_srv, simple) >= 1, NULL, "the index never saw a request for %s/", simple);
    SG_CHECK(hits(&index_srv, whl) >= 1, NULL, "the index never served %s", whl);
    SG_CHECK(hits(&index_srv, "") > before, NULL, "no index request");
    int created = installers_created_since(proxy_id, t0);
    SG_CHECK(created == 1, NULL, "%d installer container(s) were created, expected 1", created);
    int left = installers_now(proxy_id);
    SG_CHECK(left == 0, NULL, "%d installer container(s) remain after the reply", left);

    /* the same interpreter (its variable is still there) now imports it */
    pathf(code, sizeof(code), "import %s\nprint(%s.VALUE)", py_name, py_name);
    o = run_code(pip_sid, code, NULL);
    expect_output(o, "42\n");
    json_object_put(o);
    pathf(code, sizeof(code), "print(started, %s.double(21), %s.VERSION)", py_name, py_name);
    o = run_code(pip_sid, code, NULL);
    expect_output(o, "yes 42 1.0\n");
    json_object_put(o);
    /* pip_sid stays open for test 7 */
}

/* ------------------------------------------------------------------------
 * 2. The store is the cache: no installer, no index
 * ------------------------------------------------------------------------ */

static void test_pip_from_store(void **state)
{
    char code[256];
    SG_CHECK(pip_first > 0, NULL, "test 1 did not install the package: nothing to compare with");
    wall_t t0 = wall_now();
    int before = hits(&index_srv, "");

    char *sid = create_session("python");
    /* what test 1 installed belongs to its session only */
    pathf(code, sizeof(code), "import %s", py_name);
    json_object *o = run_code(sid, code, NULL);
    SG_CHECK(!SG_BOOL(o, "success") && strstr(SG_STR(o, "stderr"), "ModuleNotFoundError") != NULL, o,
             "a new session must not see another session's installs");
    json_object_put(o);
    o = install(sid, py_name, "1.0");
    expect_installed(o, "1.0", true);
    pip_second = SG_DBL(o, "installation_time");
    json_object_put(o);
    printf("pip install of %s 1.0: first %.3f s (fetched by an installer), second %.3f s (from the store)\n",
           py_name, pip_first, pip_second);
    SG_CHECK(pip_second < pip_first, NULL, "the install from the store (%.3f s) is not faster than the fetch (%.3f s)",
             pip_second, pip_first);
    pathf(code, sizeof(code), "import %s\nprint(%s.VALUE)", py_name, py_name);
    o = run_code(sid, code, NULL);
    expect_output(o, "42\n");
    json_object_put(o);
    close_session(sid);
    free(sid);

    /* "libraries" on an execute, in another new session */
    const char *libs[] = {py_name, NULL};
    sid = create_session("python");
    o = run_code(sid, code, libs);
    expect_output(o, "42\n");
    json_object_put(o);
    close_session(sid);
    free(sid);

    /* and on POST /execute */
    o = run_ephemeral("python", code, libs);
    expect_output(o, "42\n");
    json_object_put(o);

    int after = hits(&index_srv, "");
    SG_CHECK(after == before, NULL, "the index saw %d request(s): the store should have served them", after - before);
    int created = installers_created_since(proxy_id, t0);
    SG_CHECK(created == 0, NULL, "%d installer container(s) were created for a package in the store", created);
}

/* ------------------------------------------------------------------------
 * 3. An exact version, and "latest"
 * ------------------------------------------------------------------------ */

static void test_pip_version(void **state)
{
    char code[256], whl[200];
    pathf(whl, sizeof(whl), "/packages/%s", py_whl[1]);
    int before = hits(&index_srv, whl);
    char *sid = create_session("python");
    json_object *o = install(sid, py_name, "2.0");
    expect_installed(o, "2.0", false);
    json_object_put(o);
    SG_CHECK(hits(&index_srv, whl) > before, NULL, "the index never served %s", whl);
    pathf(code, sizeof(code), "import %s\nprint(%s.VERSION, %s.VALUE)", py_name, py_name, py_name);
    o = run_code(sid, code, NULL);
    expect_output(o, "2.0 42\n");
    json_object_put(o);
    close_session(sid);
    free(sid);

    /* "latest" is no version: the newest the store has (1.0 and 2.0 now) */
    sid = create_session("python");
    o = install(sid, py_name, "latest");
    if (!SG_BOOL(o, "success"))
        SG_FAIL(o, "installing version \"latest\" failed");
    const char *v = SG_STR(o, "installed_version");
    SG_CHECK(strcmp(v, "2.0") == 0 || strcmp(v, "3.0") == 0, o, "\"latest\" installed %s", v);
    printf("version \"latest\": installed %s (from_store %s)\n", v, SG_BOOL(o, "from_store") ? "true" : "false");
    json_object_put(o);
    close_session(sid);
    free(sid);
}

/* ------------------------------------------------------------------------
 * 4. npm
 * ------------------------------------------------------------------------ */

static void test_npm_install(void **state)
{
    char code[256], doc[200], tgz[300];
    pathf(doc, sizeof(doc), "/%s", js_name);
    pathf(tgz, sizeof(tgz), "/%s/-/%s", js_name, js_tgz);
    pathf(code, sizeof(code), "console.log(require(\"%s\").value)", js_name);
    wall_t t0 = wall_now();

    char *sid = create_session("javascript");
    json_object *o = install(sid, js_name, NULL);
    expect_installed(o, "1.0.0", false);
    npm_first = SG_DBL(o, "installation_time");
    json_object_put(o);
    SG_CHECK(hits(&index_srv, doc) >= 1, NULL, "the registry never saw a request for %s", doc);
    SG_CHECK(hits(&index_srv, tgz) >= 1, NULL, "the registry never served %s", tgz);
    int created = installers_created_since(proxy_id, t0);
    SG_CHECK(created == 1, NULL, "%d installer container(s) were created, expected 1", created);
    o = run_code(sid, code, NULL);
    expect_output(o, "42\n");
    json_object_put(o);
    close_session(sid);
    free(sid);

    /* again in a new session: from the store */
    int before = hits(&index_srv, "");
    t0 = wall_now();
    sid = create_session("javascript");
    o = install(sid, js_name, NULL);
    expect_installed(o, "1.0.0", true);
    npm_second = SG_DBL(o, "installation_time");
    json_object_put(o);
    printf("npm install of %s: first %.3f s (fetched by an installer), second %.3f s (from the store)\n", js_name,
           npm_first, npm_second);
    SG_CHECK(npm_second < npm_first, NULL, "the install from the store (%.3f s) is not faster than the fetch (%.3f s)",
             npm_second, npm_first);
    o = run_code(sid, code, NULL);
    expect_output(o, "42\n");
    json_object_put(o);
    close_session(sid);
    free(sid);
    SG_CHECK(hits(&index_srv, "") == before, NULL, "the registry was contacted for a package in the store");
    created = installers_created_since(proxy_id, t0);
    SG_CHECK(created == 0, NULL, "%d installer container(s) were created for a package in the store", created);
}

/* ------------------------------------------------------------------------
 * 4b. Two sessions install the same package at once: both fetch it into the
 *     same place of the store
 * ------------------------------------------------------------------------ */

static void concurrent_installs(const char *lang, const char *package, const char *version, const char *code,
                                const char *want)
{
    char *sid[2], url[2][256], body[2][256];
    sgtest_par_req_t q[2];
    memset(q, 0, sizeof(q));
    for (int i = 0; i < 2; i++) {
        sid[i] = create_session(lang);
        pathf(url[i], sizeof(url[i]), "%s/sessions/%s/libraries", sgtest_proxy_url(proxy), sid[i]);
        pathf(body[i], sizeof(body[i]), "{\"package\":\"%s\",\"version\":\"%s\"}", package, version);
        q[i] = (sgtest_par_req_t){.method = "POST", .url = url[i], .body = body[i], .body_len = strlen(body[i]),
                                  .content_type = "application/json"};
    }
    SG_CHECK(sgtest_parallel(q, 2) == 0, NULL, "cannot start threads");
    bool overlapped = q[0].finished > q[1].started && q[1].finished > q[0].started;
    for (int i = 0; i < 2; i++) {
        json_object *o = SG_EXPECT_JSON(&q[i].reply, 200);
        sgtest_reply_free(&q[i].reply);
        check_install_shape(o);
        printf("concurrent %s install %d of %s %s: %.3f s, from_store %s%s\n", lang, i + 1, package, version,
               SG_DBL(o, "installation_time"), SG_BOOL(o, "from_store") ? "true" : "false",
               overlapped ? "" : " (the two calls did not overlap)");
        if (!SG_BOOL(o, "success"))
            SG_FAIL(o, "concurrent install %d of %s %s (%s) failed", i + 1, package, version, lang);
        if (strcmp(SG_STR(o, "installed_version"), version) != 0)
            SG_FAIL(o, "installed_version: expected \"%s\"", version);
        json_object_put(o);
    }
    for (int i = 0; i < 2; i++) {
        json_object *o = run_code(sid[i], code, NULL);
        expect_output(o, want);
        json_object_put(o);
    }
    /* the fetches' private directories are gone: only complete files and
     * directories are left in the store */
    json_object *o = run_cmd(sid[0], "find /opt/sandgate/store/pip/.tmp /opt/sandgate/store/npm/.tmp -mindepth 1");
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "") == 0 && strstr(SG_STR(o, "stderr"), "pip/.tmp") == NULL,
             o, "a fetch left files behind in the store");
    json_object_put(o);
    for (int i = 0; i < 2; i++) {
        close_session(sid[i]);
        free(sid[i]);
    }
}

static void test_concurrent_installs(void **state)
{
    char code[256];
    wall_t t0 = wall_now();
    pathf(code, sizeof(code), "import %s\nprint(%s.VERSION)", py_name, py_name);
    concurrent_installs("python", py_name, "3.0", code, "3.0\n");
    /* "name@1.0.0" is a place of its own in the store: test 4 fetched "name" */
    pathf(code, sizeof(code), "console.log(require(\"%s\").value)", js_name);
    concurrent_installs("javascript", js_name, "1.0.0", code, "42\n");
    int left = installers_now(proxy_id);
    SG_CHECK(left == 0, NULL, "%d installer container(s) remain", left);
    printf("concurrent installs: %d installer container(s) created\n", installers_created_since(proxy_id, t0));
}

/* ------------------------------------------------------------------------
 * 5. Refused names and versions, a package the index lacks, compiled
 *    languages
 * ------------------------------------------------------------------------ */

static void test_refused(void **state)
{
    char missing[96], path[256], simple[200];
    int before = hits(&index_srv, "");
    wall_t t0 = wall_now();
    char *sid = create_session("python");

    expect_refused(sid, "os", NULL, "\"os\"");
    expect_refused(sid, "OS", NULL, "\"OS\"");
    expect_refused(sid, "subprocess", "1.0", "\"subprocess\"");
    const char *bad_names[] = {"../x", "a b", "-x", "", "numpy;rm -rf /", "x/../../etc", NULL};
    for (size_t i = 0; bad_names[i] != NULL; i++)
        expect_refused(sid, bad_names[i], NULL, NULL);
    expect_refused(sid, py_name, "1.0; rm", "version");
    expect_refused(sid, py_name, "x y", "version");
    /* the same checks on an execute's "libraries" */
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    sgtest_reply_t r;
    sgtest_call(proxy, "POST", path, "{\"code\":\"print(1)\",\"libraries\":[\"subprocess\"]}", &r);
    json_object *o = SG_EXPECT_ERROR(&r, 400, "bad_library");
    sgtest_reply_free(&r);
    SG_CHECK(strstr(SG_STR(o, "detail"), "subprocess") != NULL, o, "the detail must name subprocess");
    json_object_put(o);
    SG_CHECK(hits(&index_srv, "") == before, NULL, "a refused request reached the index");
    int created = installers_created_since(proxy_id, t0);
    SG_CHECK(created == 0, NULL, "a refused request created %d installer container(s)", created);

    /* a valid name the index does not have: 200, success false */
    pathf(missing, sizeof(missing), "%s_missing", py_name);
    pathf(simple, sizeof(simple), "/simple/%s-missing", py_norm);
    o = install(sid, missing, NULL);
    SG_CHECK(!SG_BOOL(o, "success"), o, "installing a package the index does not have must fail");
    SG_CHECK(!SG_BOOL(o, "from_store"), o, "from_store");
    SG_CHECK(strstr(SG_STR(o, "message"), missing) != NULL, o, "the message must name the package");
    json_object_put(o);
    SG_CHECK(hits(&index_srv, simple) >= 1, NULL, "the index never saw a request for %s/", simple);
    int left = installers_now(proxy_id);
    SG_CHECK(left == 0, NULL, "%d installer container(s) remain after a failed fetch", left);
    /* the same on an execute: setup_failed in stage "libraries", the code never runs */
    const char *libs[] = {missing, NULL};
    o = run_code(sid, "print('never')", libs);
    SG_CHECK(strcmp(SG_STR(o, "reason"), "setup_failed") == 0, o, "reason must be setup_failed");
    SG_CHECK(strcmp(SG_STR(o, "stage"), "libraries") == 0, o, "stage must be libraries");
    SG_CHECK(strstr(SG_STR(o, "stderr"), missing) != NULL, o, "stderr must name the package");
    SG_CHECK(strstr(SG_STR(o, "stdout"), "never") == NULL, o, "the code must not run");
    json_object_put(o);
    /* the session is still fine */
    o = run_code(sid, "print(6 * 7)", NULL);
    expect_output(o, "42\n");
    json_object_put(o);
    close_session(sid);
    free(sid);

    /* a compiled language has no package manager */
    if (!image_exists("sandgate/cpp:latest"))
        SG_FAIL(NULL, "the image sandgate/cpp:latest does not exist: build it with "
                      "./deploy/build-images.sh <build dir> cpp");
    sid = create_session("cpp");
    expect_refused(sid, "numpy", NULL, "cpp");
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    sgtest_call(proxy, "POST", path, "{\"code\":\"int main(){}\",\"libraries\":[\"numpy\"]}", &r);
    o = SG_EXPECT_ERROR(&r, 400, NULL);
    sgtest_reply_free(&r);
    SG_CHECK(strstr(SG_STR(o, "detail"), "libraries") != NULL, o, "the detail must name the field");
    json_object_put(o);
    close_session(sid);
    free(sid);
}

/* ------------------------------------------------------------------------
 * 6. An index that accepts connections and never answers
 * ------------------------------------------------------------------------ */

/* An inspected installer container: the package manager's network, and
 * otherwise a sandbox's restrictions; the store mounted read-write. */
static void check_installer(json_object *c, const char *sid, const char *volume)
{
    SG_CHECK(c != NULL, NULL, "no installer container was seen while the install waited for the index");
    json_object *hc = sgtest_jpath(c, "HostConfig"), *v;
    v = sgtest_jpath(c, "HostConfig.NetworkMode");
    SG_CHECK(v != NULL && strcmp(json_object_get_string(v), "host") == 0, hc,
             "the installer's network must be SANDGATE_INSTALL_NETWORK (host)");
    SG_CHECK(sgtest_json_array_has_string(sgtest_jpath(c, "HostConfig.CapDrop"), "ALL"), hc, "CapDrop ALL");
    SG_CHECK(sgtest_json_array_has_string(sgtest_jpath(c, "HostConfig.SecurityOpt"), "no-new-privileges"), hc,
             "no-new-privileges");
    v = sgtest_jpath(c, "HostConfig.ReadonlyRootfs");
    SG_CHECK(v != NULL && json_object_get_boolean(v), hc, "a read-only root");
    v = sgtest_jpath(c, "HostConfig.Privileged");
    SG_CHECK(v == NULL || !json_object_get_boolean(v), hc, "not privileged");
    v = sgtest_jpath(c, "HostConfig.Memory");
    SG_CHECK(v != NULL && json_object_get_int64(v) > 0, hc, "a memory limit");
    v = sgtest_jpath(c, "HostConfig.PidsLimit");
    SG_CHECK(v != NULL && json_object_get_int64(v) > 0, hc, "a pids limit");
    v = sgtest_jpath(c, "Config.User");
    const char *user = v != NULL ? json_object_get_string(v) : "";
    SG_CHECK(*user != '\0' && strcmp(user, "root") != 0 && strncmp(user, "0", 1) != 0, c,
             "the installer must not run as root (User \"%s\")", user);
    v = sgtest_jpath(c, "Config.Labels");
    json_object *ls = NULL;
    SG_CHECK(v != NULL && json_object_object_get_ex(v, "sandgate.session", &ls) &&
                 strcmp(json_object_get_string(ls), sid) == 0,
             v, "the installer must carry its session's label");
    json_object *mounts = sgtest_jpath(c, "Mounts");
    bool store_rw = false;
    for (size_t i = 0; mounts != NULL && i < json_object_array_length(mounts); i++) {
        json_object *m = json_object_array_get_idx(mounts, i), *d = sgtest_jpath(m, "Destination"),
                    *rw = sgtest_jpath(m, "RW"), *name = sgtest_jpath(m, "Name");
        if (d != NULL && strcmp(json_object_get_string(d), "/opt/sandgate/store") == 0)
            store_rw = rw != NULL && json_object_get_boolean(rw) && name != NULL &&
                       strcmp(json_object_get_string(name), volume) == 0;
    }
    SG_CHECK(store_rw, c, "the installer must mount the store %s read-write", volume);
}

static int slow_teardown(void **state)
{
    int rc = shut_down(&slow_proxy, slow_proxy_id, slow_volume);
    return check_proxy_alive(state) != 0 || rc != 0 ? -1 : 0;
}

static void test_install_timeout(void **state)
{
    char pip_kv[160], npm_kv[160], store_kv[200], timeout_kv[64], name[96];
    slow_proxy_id = sgtest_new_proxy_id();
    SG_CHECK(slow_proxy_id != NULL, NULL, "no proxy id");
    snprintf(slow_volume, sizeof(slow_volume), "%s-store", slow_proxy_id);
    snprintf(pip_kv, sizeof(pip_kv), "SANDGATE_PIP_INDEX_URL=http://127.0.0.1:%d/simple", hold_srv.port);
    snprintf(npm_kv, sizeof(npm_kv), "SANDGATE_NPM_REGISTRY=http://127.0.0.1:%d/", hold_srv.port);
    snprintf(store_kv, sizeof(store_kv), "SANDGATE_STORE_VOLUME=%s", slow_volume);
    snprintf(timeout_kv, sizeof(timeout_kv), "SANDGATE_INSTALL_TIMEOUT=%d", SHORT_TIMEOUT_S);
    const char *env[] = {"SANDGATE_POOL_SIZE=0", "SANDGATE_INSTALL_NETWORK=host", pip_kv, npm_kv, store_kv,
                         timeout_kv, NULL};
    slow_proxy = sgtest_proxy_start(slow_proxy_id, env);
    SG_CHECK(slow_proxy != NULL, NULL, "cannot start the second proxy");

    char *sid = create_session_on(slow_proxy, "python");
    int accepted_before = accepted(&hold_srv);
    pathf(name, sizeof(name), "%s_slow", py_name);
    /* the install runs on a thread; meanwhile, its installer container is
     * looked at while it waits for the silent index */
    char url[256], body[256];
    pathf(url, sizeof(url), "%s/sessions/%s/libraries", sgtest_proxy_url(slow_proxy), sid);
    pathf(body, sizeof(body), "{\"package\":\"%s\",\"version\":\"1.0\"}", name);
    sgtest_par_req_t q = {.method = "POST", .url = url, .body = body, .body_len = strlen(body),
                          .content_type = "application/json"};
    sgtest_batch_t *b = sgtest_batch_start(&q, 1);
    SG_CHECK(b != NULL, NULL, "cannot start a thread");
    json_object *c = NULL;
    char **ids = NULL;
    char l1[192];
    snprintf(l1, sizeof(l1), "sandgate.proxy=%s", slow_proxy_id);
    const char *labels[] = {l1, "sandgate.kind=installer", NULL};
    for (double end = sgtest_now() + SHORT_TIMEOUT_S; c == NULL && sgtest_now() < end;) {
        ids = sgtest_docker_ids(labels);
        if (ids != NULL && ids[0] != NULL)
            c = sgtest_docker_inspect(ids[0], NULL);
        sgtest_strv_free(ids);
        if (c == NULL)
            usleep(50 * 1000);
    }
    sgtest_batch_join(b);
    check_installer(c, sid, slow_volume);
    json_object_put(c);

    json_object *o = SG_EXPECT_JSON(&q.reply, 200);
    double seconds = q.reply.seconds;
    sgtest_reply_free(&q.reply);
    check_install_shape(o);
    printf("install against a silent index (timeout %d s): reply after %.2f s, %d connection(s) held\n",
           SHORT_TIMEOUT_S, seconds, accepted(&hold_srv) - accepted_before);
    SG_CHECK(!SG_BOOL(o, "success"), o, "an install from a silent index must fail");
    const char *msg = SG_STR(o, "message");
    char want[32];
    pathf(want, sizeof(want), "%d s", SHORT_TIMEOUT_S);
    SG_CHECK(strstr(msg, want) != NULL && strstr(msg, "time") != NULL, o,
             "the message must say the install ran out of time (%s)", want);
    SG_CHECK(seconds >= SHORT_TIMEOUT_S - 0.5, o, "the reply came after %.2f s, before the %d s timeout", seconds,
             SHORT_TIMEOUT_S);
    SG_CHECK(seconds < TIMEOUT_BOUND_S, o, "the reply took %.2f s (bound %.0f s)", seconds, TIMEOUT_BOUND_S);
    json_object_put(o);
    SG_CHECK(accepted(&hold_srv) > accepted_before, NULL,
             "the installer never connected to the silent index: the timeout was not what stopped it");
    int left = installers_now(slow_proxy_id);
    SG_CHECK(left == 0, NULL, "%d installer container(s) remain after the timeout", left);

    /* the session still runs code */
    o = run_code_on(slow_proxy, sid, "print(6 * 7)", NULL);
    expect_output(o, "42\n");
    json_object_put(o);
    close_session_on(slow_proxy, slow_proxy_id, sid);
    free(sid);

    int st = sgtest_proxy_stop(slow_proxy);
    slow_proxy = NULL;
    SG_CHECK(st == 0, NULL, "the second proxy ended with status %d", st);
    SG_CHECK(sgtest_docker_count(slow_proxy_id) == 0, NULL, "containers of the second proxy remain");
    SG_CHECK(volume_remove(slow_volume) == 204, NULL, "cannot remove the volume %s", slow_volume);
    SG_CHECK(volume_status(slow_volume) == 404, NULL, "the volume %s still exists", slow_volume);
}

/* ------------------------------------------------------------------------
 * 7. The sandbox that installed still has no network
 * ------------------------------------------------------------------------ */

static void test_sandbox_still_offline(void **state)
{
    char url[128], cmd[512];
    SG_CHECK(pip_sid != NULL, NULL, "test 1 did not leave its session");

    json_object *o = run_cmd(pip_sid, "ls /sys/class/net");
    expect_output(o, "lo\n");
    json_object_put(o);

    char *cid = sgtest_docker_session_container(proxy_id, pip_sid);
    SG_CHECK(cid != NULL, NULL, "no container for session %s", pip_sid);
    json_object *c = sgtest_docker_inspect(cid, NULL);
    free(cid);
    SG_CHECK(c != NULL, NULL, "cannot inspect the session's container");
    SG_ASSERT_HARDENED(c);
    json_object *mounts = sgtest_jpath(c, "Mounts");
    bool store_ro = false;
    for (size_t i = 0; mounts != NULL && i < json_object_array_length(mounts); i++) {
        json_object *m = json_object_array_get_idx(mounts, i), *d = sgtest_jpath(m, "Destination"),
                    *rw = sgtest_jpath(m, "RW"), *name = sgtest_jpath(m, "Name");
        if (d != NULL && strcmp(json_object_get_string(d), "/opt/sandgate/store") == 0)
            store_ro = rw != NULL && !json_object_get_boolean(rw) && name != NULL &&
                       strcmp(json_object_get_string(name), store_volume) == 0;
    }
    SG_CHECK(store_ro, c, "the store %s must be mounted read-only at /opt/sandgate/store", store_volume);
    json_object_put(c);
    o = run_cmd(pip_sid, "touch /opt/sandgate/store/x");
    SG_CHECK(!SG_BOOL(o, "success"), o, "the sandbox could write into the store");
    json_object_put(o);

    /* the index answers from the host ... */
    pathf(url, sizeof(url), "http://127.0.0.1:%d/simple/", index_srv.port);
    sgtest_reply_t r;
    sgtest_http("GET", url, NULL, 0, NULL, 10, &r);
    SG_CHECK(r.status == 200, NULL, "the index does not answer the host: HTTP %ld %s", r.status, r.error);
    sgtest_reply_free(&r);
    int before = hits(&index_srv, "");
    /* ... and not the sandbox: 127.0.0.1 there is the container's own loopback */
    pathf(cmd, sizeof(cmd), "python3 -c \"import urllib.request as u; u.urlopen('%s', timeout=2)\"", url);
    o = run_cmd(pip_sid, cmd);
    SG_CHECK(!SG_BOOL(o, "success") && SG_INT(o, "exit_code") != 0, o, "the sandbox reached %s", url);
    SG_CHECK(strcasestr(SG_STR(o, "stderr"), "refused") != NULL, o, "expected \"connection refused\"");
    json_object_put(o);
    /* the same from the kernel */
    char code[256];
    pathf(code, sizeof(code),
          "import urllib.request as u\ntry:\n    u.urlopen('%s', timeout=2)\n    print('reached')\n"
          "except OSError as e:\n    print('refused' if 'refused' in str(e).lower() else repr(e))",
          url);
    o = run_code(pip_sid, code, NULL);
    expect_output(o, "refused\n");
    json_object_put(o);
    SG_CHECK(hits(&index_srv, "") == before, NULL, "the index saw %d request(s) from the sandbox",
             hits(&index_srv, "") - before);

    close_session(pip_sid);
    free(pip_sid);
    pip_sid = NULL;
}

/* ------------------------------------------------------------------------
 * 8. Libraries the image already has
 * ------------------------------------------------------------------------ */

static void test_preinstalled(void **state)
{
    const char *libs[] = {"numpy", NULL};
    const char *code = "import numpy\nprint(numpy.array([1, 2]).sum())";
    int before = hits(&index_srv, "");
    wall_t t0 = wall_now();
    char *sid = create_session("python");
    json_object *o = run_code(sid, code, libs);
    expect_output(o, "3\n");
    json_object_put(o);
    close_session(sid);
    free(sid);
    o = run_ephemeral("python", code, libs);
    expect_output(o, "3\n");
    json_object_put(o);
    SG_CHECK(hits(&index_srv, "") == before, NULL, "the index was contacted for numpy");
    int created = installers_created_since(proxy_id, t0);
    SG_CHECK(created == 0, NULL, "%d installer container(s) were created for numpy", created);
}

/* ------------------------------------------------------------------------
 * 9. Last: nothing is left
 * ------------------------------------------------------------------------ */

static void test_zz_nothing_left(void **state)
{
    sgtest_close_all_sessions(proxy);
    char l1[192];
    snprintf(l1, sizeof(l1), "sandgate.proxy=%s", proxy_id);
    const char *labels[] = {l1, NULL};
    int n = sgtest_docker_wait_count(labels, 0, REMOVAL_S);
    SG_CHECK(n == 0, NULL, "%d container(s) of proxy %s remain after every session was closed", n, proxy_id);

    proxy_stopped_on_purpose = true;
    int st = sgtest_proxy_stop(proxy);
    proxy = NULL;
    SG_CHECK(st == 0, NULL, "the proxy ended with status %d", st);
    SG_CHECK(sgtest_docker_count(proxy_id) == 0, NULL, "containers of %s remain after it stopped", proxy_id);
    SG_CHECK(installers_now(proxy_id) == 0, NULL, "installer containers remain");

    SG_CHECK(volume_status(store_volume) == 200, NULL, "the store volume %s was never created", store_volume);
    long vs = volume_remove(store_volume);
    SG_CHECK(vs == 204, NULL, "DELETE /volumes/%s: HTTP %ld", store_volume, vs);
    SG_CHECK(volume_status(store_volume) == 404, NULL, "the store volume %s still exists", store_volume);

    int ports[2] = {index_srv.port, hold_srv.port};
    server_stop(&index_srv);
    server_stop(&hold_srv);
    for (int i = 0; i < 2; i++)
        SG_CHECK(port_closed(ports[i]), NULL, "127.0.0.1:%d still accepts connections", ports[i]);
    printf("index: %d request(s) served in all\n", index_srv.total);

    rm_tree(tmpdir);
    struct stat st_buf;
    SG_CHECK(stat(tmpdir, &st_buf) != 0 && errno == ENOENT, NULL, "%s still exists", tmpdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_pip_install, check_proxy_alive),
        cmocka_unit_test_teardown(test_pip_from_store, check_proxy_alive),
        cmocka_unit_test_teardown(test_pip_version, check_proxy_alive),
        cmocka_unit_test_teardown(test_npm_install, check_proxy_alive),
        cmocka_unit_test_teardown(test_concurrent_installs, check_proxy_alive),
        cmocka_unit_test_teardown(test_refused, check_proxy_alive),
        cmocka_unit_test_teardown(test_install_timeout, slow_teardown),
        cmocka_unit_test_teardown(test_sandbox_still_offline, check_proxy_alive),
        cmocka_unit_test_teardown(test_preinstalled, check_proxy_alive),
        cmocka_unit_test_teardown(test_zz_nothing_left, check_proxy_alive),
    };
    return cmocka_run_group_tests_name("proxy_libraries", tests, group_setup, group_teardown);
}
