/*
 * sgtls.c — a remote Docker engine over TLS for the tests (sgtls.h).
 */
#include "sgtls.h"
#include "sggw.h"
#include "sgtest.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int sh(const char *dir, const char *script)
{
    char *argv[] = {"sh", "-ec", (char *)script, NULL};
    pid_t pid = fork();
    int st;
    if (pid == 0) {
        if (chdir(dir) != 0)
            _exit(127);
        execvp("sh", argv);
        _exit(127);
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* A CA, the listener's certificate, a client certificate of that CA
 * (client/), and a second CA with its own client certificate (other/). */
static const char make_certs[] =
    "exec >certs.log 2>&1\n"
    "key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out \"$1\"; }\n"
    "ca() { key $1-key.pem; openssl req -x509 -new -key $1-key.pem -out $1.pem -days 2 -subj /CN=$1; }\n"
    "sign() { # name ca cn ext\n"
    "  key $1-key.pem; openssl req -new -key $1-key.pem -out $1.csr -subj /CN=$3\n"
    "  printf '%s\\n' \"$4\" > $1.ext\n"
    "  openssl x509 -req -in $1.csr -CA $2.pem -CAkey $2-key.pem -CAcreateserial -out $1.pem -days 2 -extfile "
    "$1.ext; }\n"
    "ca sgtest-ca; ca sgtest-other-ca\n"
    "sign server sgtest-ca localhost 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth'\n"
    "sign client sgtest-ca sgtest-client 'extendedKeyUsage=clientAuth'\n"
    "sign other sgtest-other-ca sgtest-other 'extendedKeyUsage=clientAuth'\n"
    "mkdir client other wrongca\n"
    "cp sgtest-ca.pem client/ca.pem; cp client.pem client/cert.pem; cp client-key.pem client/key.pem\n"
    "cp sgtest-ca.pem other/ca.pem; cp other.pem other/cert.pem; cp other-key.pem other/key.pem\n"
    "cp sgtest-other-ca.pem wrongca/ca.pem; cp client.pem wrongca/cert.pem; cp client-key.pem wrongca/key.pem\n";

static bool port_answers(void *ctx)
{
    const sgtls_engine_t *e = ctx;
    char script[128];
    snprintf(script, sizeof(script), "exec 3<>/dev/tcp/127.0.0.1/%d", e->port);
    char *argv[] = {"bash", "-c", script, NULL};
    pid_t pid = fork();
    int st;
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 2);
        execvp("bash", argv);
        _exit(127);
    }
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int sgtls_engine_start(sgtls_engine_t *e)
{
    const char *engine = getenv("DOCKER_HOST");
    char listen[512], connect[600], logpath[600];

    memset(e, 0, sizeof(*e));
    if ((e->dir = sggw_mkdtemp("sgtest-tls")) == NULL)
        return -1;
    if (sh(e->dir, make_certs) != 0) {
        fprintf(stderr, "openssl could not make the certificates (see %s/certs.log)\n", e->dir);
        return -1;
    }
    if ((e->port = sgtest_free_port()) <= 0)
        return -1;
    snprintf(e->docker_host, sizeof(e->docker_host), "DOCKER_HOST=tcp://127.0.0.1:%d", e->port);
    snprintf(listen, sizeof(listen),
             "OPENSSL-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork,verify=1,cert=%s/server.pem,key=%s/server-key.pem,"
             "cafile=%s/sgtest-ca.pem",
             e->port, e->dir, e->dir, e->dir);
    snprintf(connect, sizeof(connect), "UNIX-CONNECT:%s",
             engine != NULL && strncmp(engine, "unix://", 7) == 0 ? engine + 7 : "/var/run/docker.sock");
    snprintf(logpath, sizeof(logpath), "%s/socat.log", e->dir);
    e->pid = fork();
    if (e->pid == 0) {
        int log = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        setpgid(0, 0);
        dup2(log, 1);
        dup2(log, 2);
        execlp("socat", "socat", listen, connect, (char *)NULL);
        _exit(127);
    }
    if (e->pid < 0)
        return -1;
    setpgid(e->pid, e->pid);
    if (sgtest_poll(port_answers, e, 10, 0.05) != 0) {
        fprintf(stderr, "socat did not listen on %d (is socat installed? see %s)\n", e->port, logpath);
        return -1;
    }
    return 0;
}

int sgtls_engine_stop(sgtls_engine_t *e)
{
    int st, rc = 0;
    if (e->pid > 0) {
        kill(-e->pid, SIGTERM); /* socat and the children it forked per connection */
        if (waitpid(e->pid, &st, 0) != e->pid)
            rc = -1;
        for (int i = 0; i < 100 && kill(-e->pid, 0) == 0; i++)
            usleep(50 * 1000);
        if (kill(-e->pid, 0) == 0) {
            fprintf(stderr, "socat's children outlived it by 5 s\n");
            kill(-e->pid, SIGKILL);
            rc = -1;
        }
        e->pid = 0;
    }
    if (e->dir != NULL) {
        sggw_rmtree(e->dir);
        free(e->dir);
        e->dir = NULL;
    }
    return rc;
}
