#include "docker_tls.h"
#include "log.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RELAY_DOWN_BUF 65536 /* engine -> loop: several TLS records at once */
#define RELAY_UP_BUF 16384   /* loop -> engine: one TLS record */
#define RELAY_STACK (256u << 10)

struct sg_docker_tls_conn {
    SSL *ssl;
    int fd;  /* the TCP socket to the engine, non-blocking */
    int pfd; /* the relay's end of the socketpair */
    size_t up_len, down_off, down_len;
    unsigned char up[RELAY_UP_BUF];
    unsigned char down[RELAY_DOWN_BUF];
};

static SSL_CTX *ctx; /* set once by sg_docker_tls_setup, shared by every thread */

/* The first error OpenSSL queued, as text (the queue is emptied). */
static void ssl_error(char *err, size_t errlen, const char *what)
{
    unsigned long e = ERR_get_error();
    char buf[256];
    if (e != 0)
        ERR_error_string_n(e, buf, sizeof(buf));
    else
        snprintf(buf, sizeof(buf), "%s", errno != 0 ? strerror(errno) : "connection closed");
    ERR_clear_error();
    snprintf(err, errlen, "%s: %s", what, buf);
}

int sg_docker_tls_setup(const char *cert_dir, int verify, char *err, size_t errlen)
{
    char ca[1024], cert[1024], key[1024];

    snprintf(ca, sizeof(ca), "%s/ca.pem", cert_dir);
    snprintf(cert, sizeof(cert), "%s/cert.pem", cert_dir);
    snprintf(key, sizeof(key), "%s/key.pem", cert_dir);
    if (access(cert, R_OK) != 0 || access(key, R_OK) != 0 || (verify && access(ca, R_OK) != 0)) {
        const char *missing = access(cert, R_OK) != 0 ? cert : access(key, R_OK) != 0 ? key : ca;
        snprintf(err, errlen, "cannot read %s (DOCKER_CERT_PATH %s): %s", missing, cert_dir, strerror(errno));
        return -1;
    }
    sg_docker_tls_cleanup(); /* set up again: the new files replace the old */
    ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        ssl_error(err, errlen, "cannot make a TLS context");
        return -1;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    /* an engine that closes without close_notify (Go's server on a hijacked
     * connection may) ends the stream, as a socket's EOF does */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
        ssl_error(err, errlen, "cannot load the client certificate");
        goto Error;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
        ssl_error(err, errlen, "cannot load the client key (or it does not match cert.pem)");
        goto Error;
    }
    if (verify) {
        if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
            ssl_error(err, errlen, "cannot load ca.pem");
            goto Error;
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    }
    return 0;
Error:
    SSL_CTX_free(ctx);
    ctx = NULL;
    return -1;
}

void sg_docker_tls_cleanup(void)
{
    SSL_CTX_free(ctx);
    ctx = NULL;
}

void sg_docker_tls_close(sg_docker_tls_conn_t *c)
{
    if (c == NULL)
        return;
    SSL_free(c->ssl);
    if (c->fd >= 0)
        close(c->fd);
    if (c->pfd >= 0)
        close(c->pfd);
    free(c);
}

static int remaining_ms(uint64_t deadline)
{
    uint64_t now = sg_now_ms();
    return now >= deadline ? 0 : (int)(deadline - now);
}

/* Waits for what the last SSL call asked for (ret its return). 0 to call
 * again, -1 on failure or when the deadline passed. */
static int ssl_wait(SSL *ssl, int fd, int ret, uint64_t deadline, const char *what, char *err, size_t errlen)
{
    struct pollfd p = {fd, 0, 0};
    int e = SSL_get_error(ssl, ret), r;

    if (e == SSL_ERROR_WANT_READ)
        p.events = POLLIN;
    else if (e == SSL_ERROR_WANT_WRITE)
        p.events = POLLOUT;
    else {
        if (e == SSL_ERROR_SSL && SSL_get_verify_result(ssl) != X509_V_OK) {
            snprintf(err, errlen, "%s: the engine's certificate is not trusted (%s)", what,
                     X509_verify_cert_error_string(SSL_get_verify_result(ssl)));
            ERR_clear_error();
        } else {
            ssl_error(err, errlen, what);
        }
        return -1;
    }
    r = poll(&p, 1, remaining_ms(deadline));
    if (r == 0) {
        snprintf(err, errlen, "%s: the engine did not answer in time", what);
        return -1;
    }
    if (r < 0 && errno != EINTR) {
        snprintf(err, errlen, "%s: poll: %s", what, strerror(errno));
        return -1;
    }
    return 0;
}

static int tcp_connect(const char *host, const char *port, uint64_t deadline, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL, *ai;
    int fd = -1, rc;

    rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve the Docker engine's host %s: %s", host, gai_strerror(rc));
        return -1;
    }
    snprintf(err, errlen, "cannot connect to the Docker engine at %s:%s", host, port);
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS) {
            struct pollfd p = {fd, POLLOUT, 0};
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (poll(&p, 1, remaining_ms(deadline)) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 &&
                soerr == 0)
                break;
            snprintf(err, errlen, "cannot connect to the Docker engine at %s:%s: %s", host, port,
                     soerr != 0 ? strerror(soerr) : "timed out");
        } else {
            snprintf(err, errlen, "cannot connect to the Docker engine at %s:%s: %s", host, port, strerror(errno));
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return fd;
}

sg_docker_tls_conn_t *sg_docker_tls_request(const char *host, const char *port, const char *req, size_t reqlen,
                                            int timeout_ms, char *head, size_t headcap, char *err, size_t errlen)
{
    uint64_t deadline = sg_now_ms() + (uint64_t)timeout_ms;
    sg_docker_tls_conn_t *c;
    struct in6_addr a6;
    struct in_addr a4;
    size_t off = 0, len = 0;
    int r;

    if (ctx == NULL) {
        snprintf(err, errlen, "TLS to the Docker engine is not set up");
        return NULL;
    }
    c = sg_xcalloc(1, sizeof(*c));
    c->pfd = -1;
    if ((c->fd = tcp_connect(host, port, deadline, err, errlen)) < 0)
        goto Error;
    if ((c->ssl = SSL_new(ctx)) == NULL || SSL_set_fd(c->ssl, c->fd) != 1) {
        ssl_error(err, errlen, "cannot start TLS to the Docker engine");
        goto Error;
    }
    if (inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), host);
    } else {
        SSL_set_tlsext_host_name(c->ssl, host);
        SSL_set1_host(c->ssl, host);
    }
    while ((r = SSL_connect(c->ssl)) != 1)
        if (ssl_wait(c->ssl, c->fd, r, deadline, "TLS handshake with the Docker engine", err, errlen) != 0)
            goto Error;
    while (off < reqlen) {
        r = SSL_write(c->ssl, req + off, (int)(reqlen - off));
        if (r > 0)
            off += (size_t)r;
        else if (ssl_wait(c->ssl, c->fd, r, deadline, "cannot send the attach request", err, errlen) != 0)
            goto Error;
    }
    /* one byte at a time, so that nothing of the stream is read here: what
     * OpenSSL decrypted beyond the headers stays in it for the relay */
    while (len + 1 < headcap) {
        r = SSL_read(c->ssl, head + len, 1);
        if (r == 1) {
            head[++len] = '\0';
            if (len >= 4 && memcmp(head + len - 4, "\r\n\r\n", 4) == 0)
                return c;
            continue;
        }
        if (SSL_get_error(c->ssl, r) == SSL_ERROR_ZERO_RETURN ||
            (SSL_get_error(c->ssl, r) == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)) {
            snprintf(err, errlen, "Docker closed the attach connection");
            goto Error;
        }
        if (ssl_wait(c->ssl, c->fd, r, deadline, "reading Docker's attach reply", err, errlen) != 0)
            goto Error;
    }
    snprintf(err, errlen, "Docker's attach reply headers were too long");
Error:
    ERR_clear_error();
    sg_docker_tls_close(c);
    return NULL;
}

/* The relay: runs until both directions ended, the loop closed its end, or
 * either side failed; then closes everything. Each direction holds at most
 * one buffer, so a slow reader slows the writer on the other side (TCP's own
 * flow control), and nothing is ever dropped while both sides live. */
static void *relay_main(void *arg)
{
    sg_docker_tls_conn_t *c = arg;
    int tls_eof = 0, pair_eof = 0, tls_shut = 0, pair_shut = 0, loop_gone = 0, tls_hup = 0;

    for (;;) {
        short tev = 0, pev = 0;
        int progress = 0, r;
        ssize_t n;

        /* engine -> loop */
        if (!tls_eof && c->down_len == 0) {
            r = SSL_read(c->ssl, c->down, sizeof(c->down));
            if (r > 0) {
                c->down_off = 0;
                c->down_len = (size_t)r;
                progress = 1;
            } else {
                int e = SSL_get_error(c->ssl, r);
                if (e == SSL_ERROR_WANT_READ)
                    tev |= POLLIN;
                else if (e == SSL_ERROR_WANT_WRITE)
                    tev |= POLLOUT;
                else if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0))
                    tls_eof = progress = 1; /* close_notify, or a bare EOF: the engine ended the stream */
                else
                    break;
            }
        }
        if (c->down_len > 0) {
            n = send(c->pfd, c->down + c->down_off, c->down_len, MSG_NOSIGNAL);
            if (n > 0) {
                c->down_off += (size_t)n;
                c->down_len -= (size_t)n;
                progress = 1;
            } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
                pev |= POLLOUT;
            } else {
                break; /* the loop closed its end */
            }
        }
        if (tls_eof && c->down_len == 0 && !pair_shut) {
            shutdown(c->pfd, SHUT_WR);
            pair_shut = 1;
        }

        /* loop -> engine */
        if (!pair_eof && c->up_len == 0) {
            n = recv(c->pfd, c->up, sizeof(c->up), 0);
            if (n > 0) {
                c->up_len = (size_t)n;
                progress = 1;
            } else if (n == 0) {
                pair_eof = progress = 1;
            } else if (errno == EAGAIN || errno == EINTR) {
                pev |= POLLIN;
            } else {
                break;
            }
        }
        if (c->up_len > 0) {
            r = SSL_write(c->ssl, c->up, (int)c->up_len);
            if (r > 0) {
                c->up_len = 0; /* without partial writes, SSL_write takes all of it */
                progress = 1;
            } else {
                int e = SSL_get_error(c->ssl, r);
                if (e == SSL_ERROR_WANT_WRITE)
                    tev |= POLLOUT;
                else if (e == SSL_ERROR_WANT_READ)
                    tev |= POLLIN;
                else
                    break;
            }
        }
        if (pair_eof && c->up_len == 0 && !tls_shut) {
            SSL_shutdown(c->ssl); /* close_notify: the engine sees the end of stdin */
            shutdown(c->fd, SHUT_WR);
            tls_shut = 1;
            progress = 1;
        }

        if (pair_eof && c->up_len == 0 && (loop_gone || (tls_eof && c->down_len == 0)))
            break;
        if (progress)
            continue;

        /* nothing moved: wait for either side. POLLHUP on the pair means the
         * loop closed its end entirely (not a half-close): what it wrote
         * before is still read and forwarded, then the relay ends. */
        /* a hang-up already seen is not polled for again while nothing
         * is wanted from that side (poll would report it at once, forever) */
        struct pollfd p[2] = {{tls_hup && tev == 0 ? -1 : c->fd, tev, 0},
                              {loop_gone && pev == 0 ? -1 : c->pfd, pev, 0}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        if ((p[0].revents & (POLLERR | POLLHUP)) != 0)
            tls_hup = 1; /* SSL_read still gets what arrived before it */
        if ((p[1].revents & POLLHUP) != 0) {
            loop_gone = 1;
            if (pair_eof && c->up_len == 0)
                break;
        }
    }
    ERR_clear_error();
    sg_docker_tls_close(c);
    OPENSSL_thread_stop();
    return NULL;
}

int sg_docker_tls_relay(sg_docker_tls_conn_t *c, int *fd, char *err, size_t errlen)
{
    int sv[2];
    pthread_attr_t attr;
    pthread_t th;
    int rc;

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(err, errlen, "socketpair for the attach relay: %s", strerror(errno));
        sg_docker_tls_close(c);
        return -1;
    }
    c->pfd = sv[1];
    fcntl(c->pfd, F_SETFL, fcntl(c->pfd, F_GETFL) | O_NONBLOCK);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, RELAY_STACK);
    rc = pthread_create(&th, &attr, relay_main, c);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the attach relay thread: %s", strerror(rc));
        close(sv[0]);
        sg_docker_tls_close(c);
        return -1;
    }
    *fd = sv[0];
    return 0;
}
