/*
 * sandgate-relay — the floor of one more HTTP hop: h2o's own reverse proxy
 * in front of the proxy, with no logic of ours (no token, no Redis, no
 * SQLite, no JSON). `sandgate-bench --overhead --relay` starts it and
 * measures through it beside the proxy and the gateway, so that what the
 * gateway adds is read against what any HTTP hop on the machine costs.
 *
 *   sandgate-relay UPSTREAM_URL
 *
 * Listens on a free loopback port and prints it on stdout (one line), then
 * serves until killed; it also ends with the process that started it.
 * Keep-alive both ways, one loop thread, as the gateway.
 */
#include <h2o.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

static h2o_globalconf_t config;
static h2o_context_t ctx;
static h2o_accept_ctx_t accept_ctx;

static void on_accept(h2o_socket_t *listener, const char *err)
{
    h2o_socket_t *sock;

    if (err != NULL)
        return;
    while ((sock = h2o_evloop_socket_accept(listener)) != NULL)
        h2o_accept(&accept_ctx, sock);
}

static int listen_loopback(int *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, SOMAXCONN) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

int main(int argc, char **argv)
{
    h2o_url_t upstream;
    h2o_proxy_config_vars_t pc = {.io_timeout = 60000, .keepalive_timeout = 10000};
    h2o_hostconf_t *host;
    h2o_socket_t *listener;
    int fd, port;

    if (argc != 2 || h2o_url_parse(argv[1], SIZE_MAX, &upstream) != 0) {
        fprintf(stderr, "usage: sandgate-relay UPSTREAM_URL (http://host:port)\n");
        return 2;
    }
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    signal(SIGPIPE, SIG_IGN);
    h2o_config_init(&config);
    host = h2o_config_register_host(&config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_proxy_register_reverse_proxy(h2o_config_register_path(host, "/", 0), &upstream, &pc);
    h2o_context_init(&ctx, h2o_evloop_create(), &config);
    accept_ctx.ctx = &ctx;
    accept_ctx.hosts = config.hosts;
    if ((fd = listen_loopback(&port)) < 0) {
        perror("sandgate-relay: listen");
        return 1;
    }
    listener = h2o_evloop_socket_create(ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
    h2o_socket_read_start(listener, on_accept);
    printf("%d\n", port);
    fflush(stdout);
    while (h2o_evloop_run(ctx.loop, INT32_MAX) == 0)
        ;
    return 1;
}
