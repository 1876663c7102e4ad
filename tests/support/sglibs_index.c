/*
 * sglibs_index.c — the library tests' package index (see sglibs.h): a
 * static file server on 127.0.0.1 that counts what it was asked for, or
 * holds every connection without answering; and a proxy that installs from
 * it.
 */
#include "sglibs.h"
#include "sgtest_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------
 * The package index: a static file server on 127.0.0.1
 * ------------------------------------------------------------------------ */

#define MAX_PATHS 128
#define MAX_HELD 64

typedef struct {
    char path[256];
    int count;
} hit_t;

struct sglibs_server {
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
};

typedef struct {
    sglibs_server_t *srv;
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

static void record_hit(sglibs_server_t *s, const char *path)
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

int sglibs_hits(sglibs_server_t *s, const char *prefix)
{
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nhits; i++)
        if (strncmp(s->hits[i].path, prefix, strlen(prefix)) == 0)
            n += s->hits[i].count;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void serve(sglibs_server_t *s, int fd)
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
        body = sgtest__slurp(path, &len);
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
    sglibs_server_t *s = arg;
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

sglibs_server_t *sglibs_server_start(const char *root, bool hold)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    sglibs_server_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->lfd = -1;
    s->wake[0] = s->wake[1] = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->idle, NULL);
    s->hold = hold;
    snprintf(s->root, sizeof(s->root), "%s", root != NULL ? root : "");
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(s->lfd, 64) != 0 ||
        getsockname(s->lfd, (struct sockaddr *)&a, &al) != 0 || pipe2(s->wake, O_CLOEXEC) != 0) {
        fprintf(stderr, "index server: cannot listen on 127.0.0.1: %s\n", strerror(errno));
        sglibs_server_free(s);
        return NULL;
    }
    s->port = ntohs(a.sin_port);
    if (pthread_create(&s->thread, NULL, accept_thread, s) != 0) {
        sglibs_server_free(s);
        return NULL;
    }
    s->running = true;
    return s;
}

void sglibs_server_stop(sglibs_server_t *s)
{
    if (s == NULL)
        return;
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

int sglibs_accepted(sglibs_server_t *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->accepted;
    pthread_mutex_unlock(&s->mu);
    return n;
}

bool sglibs_port_closed(int port)
{
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool closed = connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 && errno == ECONNREFUSED;
    close(fd);
    return closed;
}

void sglibs_server_free(sglibs_server_t *s)
{
    if (s == NULL)
        return;
    sglibs_server_stop(s);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->idle);
    free(s);
}

int sglibs_port(const sglibs_server_t *s)
{
    return s->port;
}

sgtest_proxy_t *sglibs_proxy_start(const char *proxy_id, const sglibs_server_t *index, const char *store_volume,
                                   int install_timeout_s, const char *const *more)
{
    char pip_kv[160], npm_kv[160], store_kv[200], timeout_kv[64];
    const char *env[16];
    size_t n = 0;
    snprintf(pip_kv, sizeof(pip_kv), "SANDGATE_PIP_INDEX_URL=http://127.0.0.1:%d/simple", sglibs_port(index));
    snprintf(npm_kv, sizeof(npm_kv), "SANDGATE_NPM_REGISTRY=http://127.0.0.1:%d/", sglibs_port(index));
    snprintf(store_kv, sizeof(store_kv), "SANDGATE_STORE_VOLUME=%s", store_volume);
    snprintf(timeout_kv, sizeof(timeout_kv), "SANDGATE_INSTALL_TIMEOUT=%d", install_timeout_s);
    env[n++] = "SANDGATE_POOL_SIZE=0";
    env[n++] = "SANDGATE_INSTALL_NETWORK=host";
    env[n++] = pip_kv;
    env[n++] = npm_kv;
    env[n++] = store_kv;
    env[n++] = timeout_kv;
    for (size_t i = 0; more != NULL && more[i] != NULL; i++) {
        if (n + 1 >= sizeof(env) / sizeof(env[0])) {
            fprintf(stderr, "sglibs_proxy_start: too many settings\n");
            return NULL;
        }
        env[n++] = more[i];
    }
    env[n] = NULL;
    sgtest_proxy_t *p = sgtest_proxy_start(proxy_id, env);
    if (p == NULL)
        fprintf(stderr, "cannot start the proxy\n");
    return p;
}

int sglibs_total(sglibs_server_t *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->total;
    pthread_mutex_unlock(&s->mu);
    return n;
}
