/*
 * docker_tls.h — TLS to a remote Docker engine (DOCKER_HOST=tcp://…,
 * DOCKER_TLS_VERIFY, DOCKER_CERT_PATH), for the one connection libcurl does
 * not carry: the hijacked attach stream.
 *
 * The event loop reads and writes an attach descriptor as plaintext
 * (sessions/session.c). Over TLS the engine's socket carries records, so
 * sg_docker_tls_relay hands the loop one end of a socketpair and starts a
 * relay thread that shuttles bytes between the other end and the TLS
 * connection: end of stream travels both ways as a half-close (the engine's
 * close_notify or EOF becomes shutdown(SHUT_WR) of the pair, the pair's EOF
 * a close_notify), and when the loop closes its end entirely, or either side
 * fails, the thread closes both and ends. Unix-socket and plain tcp:// engines
 * never come here.
 */
#ifndef SANDGATE_DOCKER_TLS_H
#define SANDGATE_DOCKER_TLS_H

#include <stddef.h>

typedef struct sg_docker_tls_conn sg_docker_tls_conn_t;

/* Process-wide, once, before any thread connects: loads cert_dir/ca.pem,
 * cert.pem and key.pem. With verify, the engine's certificate must chain to
 * ca.pem and name the host; without, it is not checked (Docker's convention
 * for DOCKER_CERT_PATH without DOCKER_TLS_VERIFY). The client certificate is
 * always presented. */
int sg_docker_tls_setup(const char *cert_dir, int verify, char *err, size_t errlen);
void sg_docker_tls_cleanup(void);

/* Connects to host:port, completes the TLS handshake and sends req (an HTTP
 * request), all within timeout_ms; then reads the reply's status line and
 * headers into head (NUL-terminated), leaving what follows them for the
 * relay. NULL on failure, err saying why. Blocking: worker threads only. */
sg_docker_tls_conn_t *sg_docker_tls_request(const char *host, const char *port, const char *req, size_t reqlen,
                                            int timeout_ms, char *head, size_t headcap, char *err, size_t errlen);
/* Consumes c: on success *fd is the loop's end of the relay (blocking,
 * close-on-exec, a stream socket). On failure c is closed too. */
int sg_docker_tls_relay(sg_docker_tls_conn_t *c, int *fd, char *err, size_t errlen);
void sg_docker_tls_close(sg_docker_tls_conn_t *c);

#endif
