/*
 * sgtls.h — a remote Docker engine over TLS for the tests: this machine's
 * own engine behind a TLS listener of the test's (socat OPENSSL-LISTEN with
 * verify=1: a client certificate is required, in front of the engine's
 * unix socket), with a CA, a server certificate (SAN IP:127.0.0.1,
 * DNS:localhost) and client certificates made with openssl.
 *
 * In the directory: client/ (ca.pem, cert.pem, key.pem of the listener's
 * CA: what DOCKER_CERT_PATH names), other/ (a client certificate of another
 * CA, which the listener refuses), wrongca/ (the right client certificate
 * with another CA as ca.pem: the engine's certificate does not verify).
 */
#ifndef SGTLS_H
#define SGTLS_H

typedef struct {
    char *dir;            /* the certificates, socat's log */
    int pid;              /* socat, leader of its own process group */
    int port;             /* where it listens, on 127.0.0.1 */
    char docker_host[64]; /* "DOCKER_HOST=tcp://127.0.0.1:<port>" */
} sgtls_engine_t;

/* Makes the certificates and starts the listener; 0, or -1 (said on
 * stderr). */
int sgtls_engine_start(sgtls_engine_t *e);
/* Stops socat and the children it forked per connection, removes the
 * directory; 0, or -1 when something outlived it. */
int sgtls_engine_stop(sgtls_engine_t *e);

#endif
