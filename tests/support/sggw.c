/*
 * sggw.c — see sggw.h. Real redis-server, real gateway, real SQLite file.
 */
#include "sggw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <sqlite3.h>

extern char **environ;

#define GW_START_DEADLINE_S 30.0
#define STOP_DEADLINE_S 20.0
#define REDIS_START_DEADLINE_S 10.0
#define ADMIN_DEADLINE_S 30.0
#define POLL_US 20000
#define BODY_CAP ((size_t)256 << 20)
#define HEADER_CAP ((size_t)1 << 20)
#define MAX_LIVE 32

/* ------------------------------------------------------------------------
 * Registry: what an atexit handler must clean up, and whose logs to print
 * ------------------------------------------------------------------------ */

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static char *reg_dirs[MAX_LIVE * 3];
static sggw_redis_t *reg_redis[MAX_LIVE];
static sggw_gateway_t *reg_gw[MAX_LIVE];
static pthread_once_t atexit_once = PTHREAD_ONCE_INIT;

static void on_exit_cleanup(void);
static void register_atexit(void)
{
    atexit(on_exit_cleanup);
}

static void reg_add(void **arr, size_t n, void *p)
{
    pthread_once(&atexit_once, register_atexit);
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < n; i++) {
        if (arr[i] == NULL) {
            arr[i] = p;
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
}

static void reg_del(void **arr, size_t n, const void *p)
{
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < n; i++) {
        if (arr[i] == p)
            arr[i] = NULL;
    }
    pthread_mutex_unlock(&reg_lock);
}

double sggw_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------------
 * Temporary directories
 * ------------------------------------------------------------------------ */

char *sggw_mkdtemp(const char *prefix)
{
    const char *tmp = getenv("TMPDIR");
    char *dir = malloc(512);
    if (dir == NULL)
        return NULL;
    snprintf(dir, 512, "%s/%s-XXXXXX", tmp != NULL && *tmp ? tmp : "/tmp", prefix);
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "sggw: mkdtemp(%s): %s\n", dir, strerror(errno));
        free(dir);
        return NULL;
    }
    char *copy = strdup(dir);
    if (copy != NULL)
        reg_add((void **)reg_dirs, sizeof(reg_dirs) / sizeof(reg_dirs[0]), copy);
    return dir;
}

static int on_rm(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    if (remove(path) != 0 && errno != ENOENT)
        fprintf(stderr, "sggw: remove(%s): %s\n", path, strerror(errno));
    return 0;
}

static int rmtree_raw(const char *dir)
{
    if (dir == NULL || dir[0] == '\0')
        return 0;
    if (nftw(dir, on_rm, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        return -1;
    return access(dir, F_OK) == 0 ? -1 : 0;
}

int sggw_rmtree(const char *dir)
{
    if (dir == NULL)
        return 0;
    int rc = rmtree_raw(dir);
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < sizeof(reg_dirs) / sizeof(reg_dirs[0]); i++) {
        if (reg_dirs[i] != NULL && strcmp(reg_dirs[i], dir) == 0) {
            free(reg_dirs[i]);
            reg_dirs[i] = NULL;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    return rc;
}

/* ------------------------------------------------------------------------
 * Child processes
 * ------------------------------------------------------------------------ */

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    int port = -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* Forks and execs argv[0] (a path, or a name looked up in PATH when
 * use_path) with envp (NULL: environ), stdin from /dev/null, stdout and
 * stderr appended to log (or to the fds out_fd / err_fd when log is NULL),
 * in dir (may be NULL). The child dies with this process. */
static pid_t spawn(char *const *argv, char *const *envp, const char *log, int out_fd, int err_fd, const char *dir,
                   bool use_path)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(126);
    int nullfd = open("/dev/null", O_RDONLY);
    if (nullfd >= 0)
        dup2(nullfd, 0);
    if (log != NULL) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
    } else {
        if (out_fd >= 0)
            dup2(out_fd, 1);
        if (err_fd >= 0)
            dup2(err_fd, 2);
    }
    if (dir != NULL && chdir(dir) != 0)
        _exit(126);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    if (use_path)
        execvpe(argv[0], argv, envp != NULL ? envp : environ);
    else
        execve(argv[0], argv, envp != NULL ? envp : environ);
    dprintf(2, "sggw: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

static void print_tail(const char *path, int lines)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "  (cannot open %s: %s)\n", path, strerror(errno));
        return;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long from = size > 131072 ? size - 131072 : 0;
    fseek(f, from, SEEK_SET);
    size_t want = (size_t)(size - from);
    char *buf = malloc(want + 1);
    if (buf == NULL) {
        fclose(f);
        return;
    }
    size_t got = fread(buf, 1, want, f);
    fclose(f);
    buf[got] = '\0';
    size_t start = got;
    int seen = 0;
    while (start > 0) {
        if (buf[start - 1] == '\n' && start != got && ++seen >= lines)
            break;
        start--;
    }
    fprintf(stderr, "%s%s", buf + start, got > 0 && buf[got - 1] != '\n' ? "\n" : "");
    free(buf);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    while (buf != NULL) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        char *nb = realloc(buf, cap * 2 + 1);
        if (nb == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    if (buf != NULL)
        buf[n] = '\0';
    if (len != NULL)
        *len = n;
    return buf;
}

static void random_hex(char *out, size_t nbytes)
{
    unsigned char b[64];
    if (nbytes > sizeof(b))
        nbytes = sizeof(b);
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, b, nbytes) != (ssize_t)nbytes) {
        for (size_t i = 0; i < nbytes; i++)
            b[i] = (unsigned char)(rand() ^ (int)getpid());
    }
    if (fd >= 0)
        close(fd);
    for (size_t i = 0; i < nbytes; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* ------------------------------------------------------------------------
 * redis-server
 * ------------------------------------------------------------------------ */

struct sggw_redis {
    sgtest_child_t child;
    bool paused;
    int port;
    char *dir;
    char log[600];
    char url[64];
};

static redisContext *redis_connect(int port)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL)
        return NULL;
    if (c->err) {
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

static bool redis_ping(int port)
{
    redisContext *c = redis_connect(port);
    if (c == NULL)
        return false;
    redisReply *r = redisCommand(c, "PING");
    bool ok = r != NULL && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
    if (r != NULL)
        freeReplyObject(r);
    redisFree(c);
    return ok;
}

static int redis_spawn(sggw_redis_t *r)
{
    char port[16];
    snprintf(port, sizeof(port), "%d", r->port);
    char *const argv[] = {"redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                          "--dir", r->dir, NULL};
    memset(&r->child, 0, sizeof(r->child));
    r->paused = false;
    r->child.pid = spawn(argv, NULL, r->log, -1, -1, r->dir, true);
    if (r->child.pid < 0) {
        fprintf(stderr, "sggw: fork: %s\n", strerror(errno));
        return -1;
    }
    double deadline = sgtest_now() + REDIS_START_DEADLINE_S;
    while (sgtest_now() < deadline) {
        if (sgtest_child_reap(&r->child, WNOHANG)) {
            char why[96];
            sgtest_describe_exit(r->child.wstatus, why, sizeof(why));
            fprintf(stderr, "sggw: redis-server on port %d exited at once (%s); is it installed?\n", r->port, why);
            sggw_redis_print_log(r, 30);
            return -1;
        }
        if (redis_ping(r->port))
            return 0;
        usleep(POLL_US);
    }
    fprintf(stderr, "sggw: redis-server does not answer PING on port %d within %.0f s\n", r->port,
            REDIS_START_DEADLINE_S);
    sggw_redis_print_log(r, 30);
    kill(r->child.pid, SIGKILL);
    sgtest_child_reap(&r->child, 0);
    return -1;
}

sggw_redis_t *sggw_redis_start(void)
{
    sggw_redis_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->dir = sggw_mkdtemp("sggw-redis");
    if (r->dir == NULL)
        goto Error;
    snprintf(r->log, sizeof(r->log), "%s/redis.log", r->dir);
    for (int attempt = 0; attempt < 3; attempt++) {
        r->port = free_port();
        if (r->port <= 0)
            goto Error;
        snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%d", r->port);
        if (redis_spawn(r) == 0) {
            reg_add((void **)reg_redis, MAX_LIVE, r);
            return r;
        }
    }
Error:
    if (r->dir != NULL) {
        sggw_rmtree(r->dir);
        free(r->dir);
    }
    free(r);
    return NULL;
}

void sggw_redis_kill(sggw_redis_t *r)
{
    if (r == NULL || r->child.pid <= 0)
        return;
    if (!r->child.reaped) {
        kill(r->child.pid, SIGKILL);
        if (r->paused)
            kill(r->child.pid, SIGCONT);
    }
    sgtest_child_reap(&r->child, 0);
    r->paused = false;
}

int sggw_redis_restart(sggw_redis_t *r)
{
    sggw_redis_kill(r);
    /* the port was ours a moment ago: it may take a moment to be free */
    double deadline = sgtest_now() + 5;
    for (;;) {
        if (redis_spawn(r) == 0)
            return 0;
        if (sgtest_now() > deadline)
            return -1;
        usleep(100000);
    }
}

int sggw_redis_pause(sggw_redis_t *r)
{
    if (r == NULL || r->child.reaped || kill(r->child.pid, SIGSTOP) != 0)
        return -1;
    r->paused = true;
    return 0;
}

int sggw_redis_resume(sggw_redis_t *r)
{
    if (r == NULL || r->child.reaped || kill(r->child.pid, SIGCONT) != 0)
        return -1;
    r->paused = false;
    return 0;
}

bool sggw_redis_running(sggw_redis_t *r)
{
    return r != NULL && !sgtest_child_reap(&r->child, WNOHANG);
}

void sggw_redis_stop(sggw_redis_t *r)
{
    if (r == NULL)
        return;
    reg_del((void **)reg_redis, MAX_LIVE, r);
    sggw_redis_kill(r);
    sggw_rmtree(r->dir);
    free(r->dir);
    free(r);
}

const char *sggw_redis_url(const sggw_redis_t *r)
{
    return r->url;
}

int sggw_redis_port(const sggw_redis_t *r)
{
    return r->port;
}

void sggw_redis_print_log(sggw_redis_t *r, int lines)
{
    if (r == NULL)
        return;
    char why[96] = "running";
    if (sgtest_child_reap(&r->child, WNOHANG))
        sgtest_describe_exit(r->child.wstatus, why, sizeof(why));
    fprintf(stderr, "---- redis-server :%d (pid %d, %s%s): last %d lines of its log ----\n", r->port,
            (int)r->child.pid, why, r->paused ? ", SIGSTOPped" : "", lines);
    print_tail(r->log, lines);
    fprintf(stderr, "---- end of redis log ----\n");
}

static void reply_text(redisReply *rep, char **out, int *ok)
{
    switch (rep->type) {
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_STRING:
        *out = strndup(rep->str, rep->len);
        break;
    case REDIS_REPLY_ERROR:
        *out = strndup(rep->str, rep->len);
        *ok = 0;
        break;
    case REDIS_REPLY_INTEGER: {
        char buf[32];
        snprintf(buf, sizeof(buf), "%lld", rep->integer);
        *out = strdup(buf);
        break;
    }
    case REDIS_REPLY_NIL:
        *out = NULL;
        break;
    case REDIS_REPLY_ARRAY: {
        size_t cap = 1, n = 0;
        char *s = calloc(1, 1);
        for (size_t i = 0; s != NULL && i < rep->elements; i++) {
            char *e = NULL;
            int eok = 1;
            reply_text(rep->element[i], &e, &eok);
            size_t el = e != NULL ? strlen(e) : 0;
            char *ns = realloc(s, cap + el + 1);
            if (ns == NULL) {
                free(e);
                break;
            }
            s = ns;
            cap += el + 1;
            if (i > 0)
                s[n++] = '\n';
            memcpy(s + n, e != NULL ? e : "", el);
            n += el;
            s[n] = '\0';
            free(e);
        }
        *out = s;
        break;
    }
    default:
        *out = NULL;
        *ok = 0;
    }
}

char *sggw_redis_cmd(const sggw_redis_t *r, int *ok, const char *fmt, ...)
{
    int okv = 0;
    char *out = NULL;
    redisContext *c = redis_connect(r->port);
    if (c != NULL) {
        va_list ap;
        va_start(ap, fmt);
        redisReply *rep = redisvCommand(c, fmt, ap);
        va_end(ap);
        if (rep != NULL) {
            okv = 1;
            reply_text(rep, &out, &okv);
            freeReplyObject(rep);
        }
        redisFree(c);
    }
    if (ok != NULL)
        *ok = okv;
    return out;
}

/* ------------------------------------------------------------------------
 * sandgate-gateway
 * ------------------------------------------------------------------------ */

struct sggw_gateway {
    sgtest_child_t child;
    int port;
    char url[64];
    char *tmp;      /* log directory */
    char log[600];
    char *data_dir; /* malloc'd copy */
    bool own_data;  /* remove data_dir at stop */
    char admin_token[80];
};

sggw_gateway_t *sggw_gateway_start(const sggw_opts_t *o)
{
    const char *bin = getenv("SANDGATE_GATEWAY_BIN");
    if (bin == NULL || *bin == '\0') {
        fprintf(stderr, "sggw: SANDGATE_GATEWAY_BIN is not set (ctest sets it)\n");
        return NULL;
    }
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "sggw: SANDGATE_GATEWAY_BIN=%s is not executable: %s\n", bin, strerror(errno));
        return NULL;
    }
    if (o == NULL || o->proxy_url == NULL) {
        fprintf(stderr, "sggw: sggw_gateway_start needs a proxy URL\n");
        return NULL;
    }
    sggw_gateway_t *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    g->tmp = sggw_mkdtemp("sggw-gateway");
    if (g->tmp == NULL)
        goto Error;
    snprintf(g->log, sizeof(g->log), "%s/gateway.log", g->tmp);
    if (o->data_dir != NULL) {
        g->data_dir = strdup(o->data_dir);
    } else {
        g->data_dir = sggw_mkdtemp("sggw-data");
        g->own_data = true;
    }
    if (g->data_dir == NULL)
        goto Error;
    if (o->admin_token != NULL)
        snprintf(g->admin_token, sizeof(g->admin_token), "%s", o->admin_token);
    else
        random_hex(g->admin_token, 24);
    g->port = o->port > 0 ? o->port : free_port();
    if (g->port <= 0)
        goto Error;
    snprintf(g->url, sizeof(g->url), "http://127.0.0.1:%d", g->port);

    char port_kv[32], proxy_kv[600], redis_kv[600], data_kv[700], admin_kv[160];
    snprintf(port_kv, sizeof(port_kv), "PORT=%d", g->port);
    snprintf(proxy_kv, sizeof(proxy_kv), "SANDGATE_PROXY_URL=%s", o->proxy_url);
    snprintf(redis_kv, sizeof(redis_kv), "SANDGATE_REDIS_URL=%s", o->redis_url != NULL ? o->redis_url : "");
    snprintf(data_kv, sizeof(data_kv), "SANDGATE_DATA_DIR=%s", g->data_dir);
    snprintf(admin_kv, sizeof(admin_kv), "SANDGATE_ADMIN_TOKEN=%s", g->admin_token);
    size_t nextra = 0;
    while (o->env != NULL && o->env[nextra] != NULL)
        nextra++;
    /* the gateway's default number of DB threads (2) runs in every test */
    const char *defaults[] = {"SANDGATE_REAPER_INTERVAL_MS=200", "HOST=127.0.0.1", port_kv,
                              proxy_kv, redis_kv, data_kv, admin_kv};
    size_t ndef = sizeof(defaults) / sizeof(defaults[0]);
    const char **set = calloc(ndef + nextra, sizeof(*set));
    if (set == NULL)
        goto Error;
    memcpy(set, defaults, sizeof(defaults));
    for (size_t i = 0; i < nextra; i++)
        set[ndef + i] = o->env[i];
    char **envp = sgtest_build_env(set, ndef + nextra);
    free(set);
    if (envp == NULL)
        goto Error;
    char *const argv[] = {(char *)bin, NULL};
    g->child.pid = spawn(argv, envp, g->log, -1, -1, NULL, false);
    free(envp);
    if (g->child.pid < 0) {
        fprintf(stderr, "sggw: fork: %s\n", strerror(errno));
        goto Error;
    }

    char url[96];
    snprintf(url, sizeof(url), "%s/", g->url);
    double deadline = sgtest_now() + GW_START_DEADLINE_S;
    long last = 0;
    for (;;) {
        if (sgtest_child_reap(&g->child, WNOHANG)) {
            char why[96];
            sgtest_describe_exit(g->child.wstatus, why, sizeof(why));
            fprintf(stderr, "sggw: the gateway exited before answering GET / (%s)\n", why);
            sggw_gateway_print_log(g, 40);
            goto Error;
        }
        sgtest_reply_t r;
        sgtest_http("GET", url, NULL, 0, NULL, 2, &r);
        last = r.status;
        sgtest_reply_free(&r);
        if (last == 200)
            break;
        if (sgtest_now() > deadline) {
            fprintf(stderr, "sggw: the gateway did not answer GET / with 200 within %.0f s (last status %ld)\n",
                    GW_START_DEADLINE_S, last);
            sggw_gateway_print_log(g, 40);
            kill(g->child.pid, SIGKILL);
            sgtest_child_reap(&g->child, 0);
            goto Error;
        }
        usleep(POLL_US);
    }
    reg_add((void **)reg_gw, MAX_LIVE, g);
    return g;

Error:
    if (g->tmp != NULL) {
        sggw_rmtree(g->tmp);
        free(g->tmp);
    }
    if (g->own_data && g->data_dir != NULL)
        sggw_rmtree(g->data_dir);
    free(g->data_dir);
    free(g);
    return NULL;
}

static void gateway_free(sggw_gateway_t *g)
{
    reg_del((void **)reg_gw, MAX_LIVE, g);
    sggw_rmtree(g->tmp);
    free(g->tmp);
    if (g->own_data)
        sggw_rmtree(g->data_dir);
    free(g->data_dir);
    free(g);
}

int sggw_gateway_stop(sggw_gateway_t *g)
{
    if (g == NULL)
        return 0;
    int result;
    if (!g->child.reaped)
        kill(g->child.pid, SIGTERM);
    double deadline = sgtest_now() + STOP_DEADLINE_S;
    while (!sgtest_child_reap(&g->child, WNOHANG) && sgtest_now() < deadline)
        usleep(POLL_US);
    if (!g->child.reaped) {
        fprintf(stderr, "sggw: the gateway (pid %d) ignored SIGTERM for %.0f s; SIGKILL\n", (int)g->child.pid,
                STOP_DEADLINE_S);
        sggw_gateway_print_log(g, 40);
        kill(g->child.pid, SIGKILL);
        sgtest_child_reap(&g->child, 0);
        result = -1;
    } else {
        result = g->child.wstatus;
        if (result != 0) {
            fprintf(stderr, "sggw: the gateway ended with a non-zero status after SIGTERM\n");
            sggw_gateway_print_log(g, 60);
        }
    }
    gateway_free(g);
    return result;
}

int sggw_gateway_quiesce(sggw_gateway_t *g)
{
    double deadline = sgtest_now() + 5;
    for (;;) {
        sgtest_reply_t r;
        sggw_admin_call(g, "GET", "/admin/sessions", NULL, &r);
        json_object *o = r.status == 200 ? json_tokener_parse(r.body) : NULL, *a = NULL;
        bool empty = o != NULL && json_object_object_get_ex(o, "sessions", &a) &&
                     json_object_is_type(a, json_type_array) && json_object_array_length(a) == 0;
        json_object_put(o);
        sgtest_reply_free(&r);
        if (empty)
            return 0;
        if (sgtest_now() > deadline)
            return -1;
        usleep(20000);
    }
}

void sggw_gateway_kill9(sggw_gateway_t *g)
{
    if (g == NULL)
        return;
    if (!g->child.reaped)
        kill(g->child.pid, SIGKILL);
    sgtest_child_reap(&g->child, 0);
    gateway_free(g);
}

bool sggw_gateway_alive(sggw_gateway_t *g)
{
    return g != NULL && !sgtest_child_reap(&g->child, WNOHANG);
}

pid_t sggw_gateway_pid(const sggw_gateway_t *g)
{
    return g->child.pid;
}

int sggw_gateway_port(const sggw_gateway_t *g)
{
    return g->port;
}

const char *sggw_gateway_url(const sggw_gateway_t *g)
{
    return g->url;
}

const char *sggw_gateway_data_dir(const sggw_gateway_t *g)
{
    return g->data_dir;
}

const char *sggw_gateway_admin_token(const sggw_gateway_t *g)
{
    return g->admin_token;
}

void sggw_gateway_print_log(sggw_gateway_t *g, int lines)
{
    if (g == NULL)
        return;
    char why[96] = "running";
    if (sgtest_child_reap(&g->child, WNOHANG))
        sgtest_describe_exit(g->child.wstatus, why, sizeof(why));
    fprintf(stderr, "---- gateway %s (pid %d, %s): last %d lines of its log ----\n", g->url, (int)g->child.pid, why,
            lines);
    print_tail(g->log, lines);
    fprintf(stderr, "---- end of gateway log ----\n");
}

bool sggw_gateway_log_has(sggw_gateway_t *g, const char *needle)
{
    char *s = slurp(g->log, NULL);
    bool has = s != NULL && strstr(s, needle) != NULL;
    free(s);
    return has;
}

void sggw_print_logs(int lines)
{
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < MAX_LIVE; i++) {
        if (reg_gw[i] != NULL)
            sggw_gateway_print_log(reg_gw[i], lines);
    }
    for (size_t i = 0; i < MAX_LIVE; i++) {
        if (reg_redis[i] != NULL)
            sggw_redis_print_log(reg_redis[i], lines / 2);
    }
    pthread_mutex_unlock(&reg_lock);
}

static void on_exit_cleanup(void)
{
    /* a test that ended without stopping what it started */
    for (size_t i = 0; i < MAX_LIVE; i++) {
        sggw_gateway_t *g = reg_gw[i];
        if (g != NULL) {
            if (!g->child.reaped)
                kill(g->child.pid, SIGKILL);
            sgtest_child_reap(&g->child, 0);
        }
        sggw_redis_t *r = reg_redis[i];
        if (r != NULL)
            sggw_redis_kill(r);
    }
    for (size_t i = 0; i < sizeof(reg_dirs) / sizeof(reg_dirs[0]); i++) {
        if (reg_dirs[i] != NULL)
            rmtree_raw(reg_dirs[i]);
    }
}

/* ------------------------------------------------------------------------
 * sandgate-admin
 * ------------------------------------------------------------------------ */

/* Reads both pipes until they close or the deadline passes. */
static void drain(int ofd, int efd, char **out, char **err, double deadline)
{
    struct {
        int fd;
        char *buf;
        size_t len, cap;
    } s[2] = {{ofd, NULL, 0, 0}, {efd, NULL, 0, 0}};
    for (int i = 0; i < 2; i++) {
        s[i].cap = 4096;
        s[i].buf = calloc(1, s[i].cap + 1);
    }
    while (s[0].fd >= 0 || s[1].fd >= 0) {
        struct pollfd p[2];
        int n = 0, map[2];
        for (int i = 0; i < 2; i++) {
            if (s[i].fd >= 0) {
                p[n] = (struct pollfd){.fd = s[i].fd, .events = POLLIN};
                map[n++] = i;
            }
        }
        double left = deadline - sgtest_now();
        if (left <= 0)
            break;
        if (poll(p, (nfds_t)n, (int)(left * 1000) + 1) <= 0)
            continue;
        for (int k = 0; k < n; k++) {
            if (p[k].revents == 0)
                continue;
            int i = map[k];
            if (s[i].len == s[i].cap) {
                char *nb = realloc(s[i].buf, s[i].cap * 2 + 1);
                if (nb == NULL) {
                    s[i].fd = -1;
                    continue;
                }
                s[i].buf = nb;
                s[i].cap *= 2;
            }
            ssize_t got = read(s[i].fd, s[i].buf + s[i].len, s[i].cap - s[i].len);
            if (got <= 0) {
                if (got < 0 && errno == EINTR)
                    continue;
                s[i].fd = -1;
            } else {
                s[i].len += (size_t)got;
                s[i].buf[s[i].len] = '\0';
            }
        }
    }
    if (out != NULL)
        *out = s[0].buf;
    else
        free(s[0].buf);
    if (err != NULL)
        *err = s[1].buf;
    else
        free(s[1].buf);
}

int sggw_admin_run(const char *data_dir, char **out, char **err, const char *const *args)
{
    if (out != NULL)
        *out = NULL;
    if (err != NULL)
        *err = NULL;
    const char *bin = getenv("SANDGATE_ADMIN_BIN");
    if (bin == NULL || *bin == '\0') {
        fprintf(stderr, "sggw: SANDGATE_ADMIN_BIN is not set (ctest sets it)\n");
        return -1;
    }
    size_t n = 0;
    while (args != NULL && args[n] != NULL)
        n++;
    char **argv = calloc(n + 4, sizeof(*argv));
    if (argv == NULL)
        return -1;
    argv[0] = (char *)bin;
    argv[1] = "--data-dir";
    argv[2] = (char *)data_dir;
    for (size_t i = 0; i < n; i++)
        argv[3 + i] = (char *)args[i];
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) != 0) {
        free(argv);
        return -1;
    }
    if (pipe2(pe, O_CLOEXEC) != 0) {
        close(po[0]);
        close(po[1]);
        free(argv);
        return -1;
    }
    sgtest_child_t c = {0};
    c.pid = spawn(argv, NULL, NULL, po[1], pe[1], NULL, false);
    free(argv);
    close(po[1]);
    close(pe[1]);
    if (c.pid < 0) {
        close(po[0]);
        close(pe[0]);
        return -1;
    }
    double deadline = sgtest_now() + ADMIN_DEADLINE_S;
    drain(po[0], pe[0], out, err, deadline);
    close(po[0]);
    close(pe[0]);
    while (!sgtest_child_reap(&c, WNOHANG) && sgtest_now() < deadline)
        usleep(5000);
    if (!c.reaped) {
        fprintf(stderr, "sggw: sandgate-admin did not exit within %.0f s\n", ADMIN_DEADLINE_S);
        kill(c.pid, SIGKILL);
        sgtest_child_reap(&c, 0);
        return -1;
    }
    if (!WIFEXITED(c.wstatus)) {
        char why[96];
        sgtest_describe_exit(c.wstatus, why, sizeof(why));
        fprintf(stderr, "sggw: sandgate-admin %s\n", why);
        return -1;
    }
    return WEXITSTATUS(c.wstatus);
}

int sggw_admin(const char *data_dir, char **out, ...)
{
    const char *args[64];
    size_t n = 0;
    va_list ap;
    va_start(ap, out);
    for (const char *a = va_arg(ap, const char *); a != NULL && n < 63; a = va_arg(ap, const char *))
        args[n++] = a;
    va_end(ap);
    args[n] = NULL;
    return sggw_admin_run(data_dir, out, NULL, args);
}

static void admin_or_fail(const char *data_dir, const char *const *args, char **out)
{
    char *o = NULL, *e = NULL;
    int rc = sggw_admin_run(data_dir, &o, &e, args);
    if (rc != 0) {
        char cmd[512] = "";
        for (size_t i = 0; args[i] != NULL; i++) {
            strncat(cmd, " ", sizeof(cmd) - strlen(cmd) - 1);
            strncat(cmd, args[i], sizeof(cmd) - strlen(cmd) - 1);
        }
        fprintf(stderr, "sandgate-admin%s: exit %d\n  stdout: %s\n  stderr: %s\n", cmd, rc, o ? o : "", e ? e : "");
        free(o);
        free(e);
        SG_FAIL(NULL, "sandgate-admin failed");
    }
    free(e);
    if (out != NULL)
        *out = o;
    else
        free(o);
}

void sggw_tenant_set(const char *data_dir, const char *name, const char *const *kv)
{
    const char *args[64] = {"tenant", "set", name};
    size_t n = 3;
    for (size_t i = 0; kv != NULL && kv[i] != NULL && n < 63; i++)
        args[n++] = kv[i];
    args[n] = NULL;
    if (n > 3)
        admin_or_fail(data_dir, args, NULL);
}

char *sggw_new_token(const char *data_dir, const char *tenant)
{
    const char *args[] = {"token", "create", tenant, NULL};
    char *out = NULL;
    admin_or_fail(data_dir, args, &out);
    size_t len = strlen(out);
    SG_CHECK(len >= 2 && out[len - 1] == '\n' && strchr(out, '\n') == out + len - 1, NULL,
             "token create must print the token alone on one line; printed \"%s\"", out);
    out[len - 1] = '\0';
    SG_CHECK(strncmp(out, "sgk_", 4) == 0 && len - 1 == 56, NULL, "\"%s\" is not a sgk_ token of 56 chars", out);
    return out;
}

int64_t sggw_tenant_id(const char *data_dir, const char *name)
{
    const char *args[] = {"--json", "tenant", "show", name, NULL};
    char *out = NULL;
    admin_or_fail(data_dir, args, &out);
    json_object *o = json_tokener_parse(out);
    free(out);
    SG_CHECK(o != NULL, NULL, "tenant show --json printed no JSON");
    int64_t id = SG_INT(o, "id");
    json_object_put(o);
    return id;
}

char *sggw_new_tenant(const char *data_dir, const char *name, const char *const *quotas)
{
    const char *args[] = {"tenant", "create", name, NULL};
    admin_or_fail(data_dir, args, NULL);
    sggw_tenant_set(data_dir, name, quotas);
    return sggw_new_token(data_dir, name);
}

/* ------------------------------------------------------------------------
 * HTTP
 * ------------------------------------------------------------------------ */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void on_curl_init(void)
{
    curl_global_init(CURL_GLOBAL_ALL);
}

typedef struct {
    char *base;
    size_t len, cap, limit;
    bool overflow;
} dbuf_t;

static size_t on_data(char *p, size_t sz, size_t n, void *ud)
{
    dbuf_t *b = ud;
    size_t add = sz * n;
    if (b->len + add > b->limit) {
        b->overflow = true;
        return 0;
    }
    if (b->len + add + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + add + 1)
            cap *= 2;
        char *nb = realloc(b->base, cap);
        if (nb == NULL)
            return 0;
        b->base = nb;
        b->cap = cap;
    }
    memcpy(b->base + b->len, p, add);
    b->len += add;
    b->base[b->len] = '\0';
    return add;
}

int sggw_http_curl(const char *method, const char *url, const void *body, size_t len, const char *content_type,
                   const char *const *headers, long timeout_s, sgtest_reply_t *out)
{
    pthread_once(&curl_once, on_curl_init);
    memset(out, 0, sizeof(*out));
    dbuf_t b = {.limit = BODY_CAP}, h = {.limit = HEADER_CAP};
    struct curl_slist *hl = NULL;
    double t0 = sgtest_now();
    CURL *c = curl_easy_init();
    if (c == NULL) {
        snprintf(out->error, sizeof(out->error), "curl_easy_init failed");
        goto Done;
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s > 0 ? timeout_s : SGTEST_HTTP_TIMEOUT);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, out->error);
    hl = curl_slist_append(hl, "Expect:");
    if (content_type != NULL) {
        char ct[200];
        snprintf(ct, sizeof(ct), "Content-Type: %s", content_type);
        hl = curl_slist_append(hl, ct);
    }
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++)
        hl = curl_slist_append(hl, headers[i]);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (body != NULL || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
               strcmp(method, "PATCH") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body != NULL ? len : 0));
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body != NULL ? body : "");
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    } else if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    }
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    } else {
        if (out->error[0] == '\0')
            snprintf(out->error, sizeof(out->error), "%s", curl_easy_strerror(rc));
        if (b.overflow)
            snprintf(out->error, sizeof(out->error), "reply body over %zu bytes", BODY_CAP);
        out->status = 0;
    }
Done:
    if (c != NULL)
        curl_easy_cleanup(c);
    curl_slist_free_all(hl);
    out->body = b.base != NULL ? b.base : calloc(1, 1);
    out->body_len = b.len;
    out->headers = h.base != NULL ? h.base : calloc(1, 1);
    out->seconds = sgtest_now() - t0;
    return out->status != 0 ? 0 : -1;
}

/* ---- a plain HTTP/1.1 client over one socket ----
 * libcurl refuses a reply whose header block holds a NUL byte; this client
 * takes the bytes as they come, so that a test can look at a malformed
 * header instead of failing on the transfer. NUL bytes of the header block
 * are shown as '\x1a' (the block stays one C string). One request per
 * connection (Connection: close). */

static int dbuf_put(dbuf_t *b, const char *p, size_t n)
{
    return on_data((char *)p, 1, n, b) == n || n == 0 ? 0 : -1;
}

static int parse_url(const char *url, char *host, size_t hostlen, int *port, const char **path)
{
    if (strncmp(url, "http://", 7) != 0)
        return -1;
    const char *h = url + 7, *colon = strchr(h, ':'), *slash = strchr(h, '/');
    if (slash == NULL)
        slash = h + strlen(h);
    if (colon != NULL && colon < slash) {
        snprintf(host, hostlen, "%.*s", (int)(colon - h), h);
        *port = atoi(colon + 1);
    } else {
        snprintf(host, hostlen, "%.*s", (int)(slash - h), h);
        *port = 80;
    }
    if (strcmp(host, "localhost") == 0)
        snprintf(host, hostlen, "127.0.0.1");
    *path = *slash ? slash : "/";
    return 0;
}

/* Waits for events on fd until deadline; returns revents, 0 on timeout. */
static short wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - sgtest_now();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)(left * 1000) + 1);
        if (n > 0)
            return p.revents;
        if (n < 0 && errno != EINTR)
            return POLLERR;
    }
}

/* Decodes a chunked body in place; -1 if it is not complete. */
static int dechunk(dbuf_t *b)
{
    size_t in = 0, out = 0;
    for (;;) {
        char *eol = memmem(b->base + in, b->len - in, "\r\n", 2);
        if (eol == NULL)
            return -1;
        size_t size = strtoul(b->base + in, NULL, 16);
        in = (size_t)(eol - b->base) + 2;
        if (size == 0)
            break;
        if (in + size + 2 > b->len)
            return -1;
        memmove(b->base + out, b->base + in, size);
        out += size;
        in += size + 2;
    }
    b->len = out;
    b->base[out] = '\0';
    return 0;
}

int sggw_http_open(const char *method, const char *url, const char *json_body, const char *const *headers)
{
    char host[256], line[1024];
    const char *path;
    int port, fd;
    dbuf_t req = {.limit = (size_t)1 << 30};
    struct sockaddr_in sa = {.sin_family = AF_INET};

    if (parse_url(url, host, sizeof(host), &port, &path) != 0 || inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "sggw_http_open: bad URL %s\n", url);
        return -1;
    }
    sa.sin_port = htons((uint16_t)port);
    snprintf(line, sizeof(line), "%s %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\nUser-Agent: sggw\r\n", method,
             path, host, port);
    dbuf_put(&req, line, strlen(line));
    if (json_body != NULL) {
        snprintf(line, sizeof(line), "Content-Type: application/json\r\nContent-Length: %zu\r\n", strlen(json_body));
        dbuf_put(&req, line, strlen(line));
    }
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++) {
        dbuf_put(&req, headers[i], strlen(headers[i]));
        dbuf_put(&req, "\r\n", 2);
    }
    dbuf_put(&req, "\r\n", 2);
    if (json_body != NULL)
        dbuf_put(&req, json_body, strlen(json_body));
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        fprintf(stderr, "sggw_http_open: connect to %s: %s\n", url, strerror(errno));
        if (fd >= 0)
            close(fd);
        free(req.base);
        return -1;
    }
    for (size_t sent = 0; sent < req.len;) {
        ssize_t n = send(fd, req.base + sent, req.len - sent, MSG_NOSIGNAL);
        if (n <= 0) {
            fprintf(stderr, "sggw_http_open: send to %s: %s\n", url, strerror(errno));
            close(fd);
            free(req.base);
            return -1;
        }
        sent += (size_t)n;
    }
    free(req.base);
    return fd;
}

int sggw_http_read_reply(int fd, long timeout_s, sgtest_reply_t *out)
{
    double deadline = sgtest_now() + (timeout_s > 0 ? timeout_s : SGTEST_HTTP_TIMEOUT);
    dbuf_t in = {.limit = BODY_CAP + HEADER_CAP};
    char buf[65536];
    int rc = -1;

    memset(out, 0, sizeof(*out));
    for (;;) {
        short ev = wait_fd(fd, POLLIN, deadline);
        if (ev == 0) {
            snprintf(out->error, sizeof(out->error), "timed out waiting for the reply");
            goto Done;
        }
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n > 0)
            dbuf_put(&in, buf, (size_t)n);
        else if (n == 0 || (errno != EAGAIN && errno != EINTR))
            break;
    }
    char *hend = in.base != NULL ? memmem(in.base, in.len, "\r\n\r\n", 4) : NULL;
    if (hend == NULL || in.len < 12 || strncmp(in.base, "HTTP/1.", 7) != 0) {
        snprintf(out->error, sizeof(out->error), "no HTTP reply (%zu bytes)", in.len);
        goto Done;
    }
    size_t hlen = (size_t)(hend - in.base) + 4;
    out->headers = strndup(in.base, hlen);
    out->status = strtol(in.base + 9, NULL, 10);
    out->body = malloc(in.len - hlen + 1);
    memcpy(out->body, in.base + hlen, in.len - hlen);
    out->body[in.len - hlen] = '\0';
    out->body_len = in.len - hlen;
    rc = 0;
Done:
    free(in.base);
    close(fd);
    return rc;
}

int sggw_http(const char *method, const char *url, const void *body, size_t len, const char *content_type,
              const char *const *headers, long timeout_s, sgtest_reply_t *out)
{
    char host[256];
    int port, fd = -1;
    const char *path;
    dbuf_t req = {.limit = (size_t)1 << 30}, in = {.limit = BODY_CAP + HEADER_CAP};
    double t0 = sgtest_now(), deadline = t0 + (timeout_s > 0 ? timeout_s : SGTEST_HTTP_TIMEOUT);

    memset(out, 0, sizeof(*out));
    if (parse_url(url, host, sizeof(host), &port, &path) != 0) {
        snprintf(out->error, sizeof(out->error), "bad URL %s", url);
        goto Done;
    }
    /* the request */
    char line[1024];
    bool with_body = body != NULL || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
                     strcmp(method, "PATCH") == 0;
    snprintf(line, sizeof(line), "%s ", method);
    dbuf_put(&req, line, strlen(line));
    dbuf_put(&req, path, strlen(path));
    snprintf(line, sizeof(line), " HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\nUser-Agent: sggw\r\n", host, port);
    dbuf_put(&req, line, strlen(line));
    if (content_type != NULL) {
        snprintf(line, sizeof(line), "Content-Type: %s\r\n", content_type);
        dbuf_put(&req, line, strlen(line));
    }
    if (with_body) {
        snprintf(line, sizeof(line), "Content-Length: %zu\r\n", body != NULL ? len : 0);
        dbuf_put(&req, line, strlen(line));
    }
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++) {
        if (dbuf_put(&req, headers[i], strlen(headers[i])) != 0 || dbuf_put(&req, "\r\n", 2) != 0) {
            snprintf(out->error, sizeof(out->error), "request too large");
            goto Done;
        }
    }
    dbuf_put(&req, "\r\n", 2);
    if (with_body && body != NULL && len != 0 && dbuf_put(&req, body, len) != 0) {
        snprintf(out->error, sizeof(out->error), "request too large");
        goto Done;
    }

    /* connect */
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        snprintf(out->error, sizeof(out->error), "host %.64s is not an IPv4 address", host);
        goto Done;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(out->error, sizeof(out->error), "socket: %s", strerror(errno));
        goto Done;
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS) {
        snprintf(out->error, sizeof(out->error), "connect to %.64s:%d: %s", host, port, strerror(errno));
        goto Done;
    }
    short ev = wait_fd(fd, POLLOUT, deadline);
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (ev == 0 || soerr != 0) {
        snprintf(out->error, sizeof(out->error), "connect to %.64s:%d: %s", host, port,
                 ev == 0 ? "timed out" : strerror(soerr));
        goto Done;
    }

    /* send, reading whatever comes back meanwhile (an early 413) */
    size_t sent = 0;
    bool eof = false;
    char buf[65536];
    while (sent < req.len && !eof) {
        ev = wait_fd(fd, POLLOUT | POLLIN, deadline);
        if (ev == 0) {
            snprintf(out->error, sizeof(out->error), "timed out sending the request");
            goto Done;
        }
        if (ev & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = recv(fd, buf, sizeof(buf), 0);
            if (n > 0) {
                dbuf_put(&in, buf, (size_t)n);
                break; /* an answer before the whole request: stop sending */
            }
            if (n == 0 || (errno != EAGAIN && errno != EINTR))
                eof = true;
            continue;
        }
        ssize_t n = send(fd, req.base + sent, req.len - sent, MSG_NOSIGNAL);
        if (n > 0)
            sent += (size_t)n;
        else if (n < 0 && errno != EAGAIN && errno != EINTR)
            break; /* reset: read what the server said */
    }
    /* receive until the server closes */
    while (!eof) {
        ev = wait_fd(fd, POLLIN, deadline);
        if (ev == 0) {
            snprintf(out->error, sizeof(out->error), "timed out after %.1f s waiting for the reply",
                     sgtest_now() - t0);
            goto Done;
        }
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n > 0) {
            if (dbuf_put(&in, buf, (size_t)n) != 0) {
                snprintf(out->error, sizeof(out->error), "reply too large");
                goto Done;
            }
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            eof = true;
        }
    }

    /* parse */
    char *hend = in.base != NULL ? memmem(in.base, in.len, "\r\n\r\n", 4) : NULL;
    if (hend == NULL || in.len < 12 || strncmp(in.base, "HTTP/1.", 7) != 0) {
        snprintf(out->error, sizeof(out->error), "no HTTP reply (%zu bytes%s)", in.len,
                 in.len == 0 ? ": the connection was closed" : "");
        goto Done;
    }
    size_t hlen = (size_t)(hend - in.base) + 4;
    out->headers = malloc(hlen + 1);
    for (size_t i = 0; i < hlen; i++)
        out->headers[i] = in.base[i] == '\0' ? '\x1a' : in.base[i];
    out->headers[hlen] = '\0';
    long status = strtol(in.base + 9, NULL, 10);
    dbuf_t b = {.limit = BODY_CAP};
    if (strcmp(method, "HEAD") != 0 && in.len > hlen)
        dbuf_put(&b, in.base + hlen, in.len - hlen);
    char *te = sgtest_reply_header(out, "Transfer-Encoding");
    bool chunked = te != NULL && strcasecmp(te, "chunked") == 0;
    free(te);
    if (chunked && b.base != NULL && dechunk(&b) != 0) {
        snprintf(out->error, sizeof(out->error), "chunked reply cut short");
        free(b.base);
        goto Done;
    }
    char *cl = sgtest_reply_header(out, "Content-Length");
    if (!chunked && cl != NULL && strcmp(method, "HEAD") != 0 && (size_t)strtoull(cl, NULL, 10) != b.len) {
        snprintf(out->error, sizeof(out->error), "reply body of %zu bytes, Content-Length %s", b.len, cl);
        free(cl);
        free(b.base);
        goto Done;
    }
    free(cl);
    out->status = status;
    out->body = b.base;
    out->body_len = b.len;

Done:
    if (fd >= 0)
        close(fd);
    free(req.base);
    free(in.base);
    if (out->body == NULL)
        out->body = calloc(1, 1);
    if (out->headers == NULL)
        out->headers = calloc(1, 1);
    out->seconds = sgtest_now() - t0;
    return out->status != 0 ? 0 : -1;
}

static int call_with_token(const char *base, const char *token, const char *method, const char *path,
                           const char *body, size_t len, const char *ctype, long timeout_s, sgtest_reply_t *out)
{
    char *url = malloc(strlen(base) + strlen(path) + 1);
    char *auth = token != NULL ? malloc(strlen(token) + 32) : NULL;
    if (url == NULL || (token != NULL && auth == NULL)) {
        free(url);
        free(auth);
        memset(out, 0, sizeof(*out));
        out->body = calloc(1, 1);
        out->headers = calloc(1, 1);
        snprintf(out->error, sizeof(out->error), "out of memory");
        return -1;
    }
    sprintf(url, "%s%s", base, path);
    const char *hdrs[2] = {NULL, NULL};
    if (token != NULL) {
        sprintf(auth, "Authorization: Bearer %s", token);
        hdrs[0] = auth;
    }
    int rc = sggw_http(method, url, body, len, ctype, hdrs, timeout_s, out);
    free(url);
    free(auth);
    return rc;
}

int sggw_call(const sggw_gateway_t *g, const char *token, const char *method, const char *path, const char *json_body,
              sgtest_reply_t *out)
{
    return call_with_token(g->url, token, method, path, json_body, json_body ? strlen(json_body) : 0,
                           json_body ? "application/json" : NULL, 0, out);
}

int sggw_call_json(const sggw_gateway_t *g, const char *token, const char *method, const char *path,
                   json_object *body, long timeout_s, sgtest_reply_t *out)
{
    const char *s = body != NULL ? json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN) : NULL;
    return call_with_token(g->url, token, method, path, s, s ? strlen(s) : 0, s ? "application/json" : NULL,
                           timeout_s, out);
}

int sggw_admin_call(const sggw_gateway_t *g, const char *method, const char *path, const char *json_body,
                    sgtest_reply_t *out)
{
    return sggw_call(g, g->admin_token, method, path, json_body, out);
}

/* ---- many at once ---- */

struct sggw_batch {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int go;     /* 1: send; -1: the batch could not start, send nothing */
    size_t n, started;
    pthread_t *threads;
    sggw_par_req_t *reqs;
};

typedef struct {
    sggw_batch_t *b;
    size_t i;
} slot_t;

static void *on_thread(void *ud)
{
    slot_t *s = ud;
    sggw_batch_t *b = s->b;
    sggw_par_req_t *q = &b->reqs[s->i];
    free(s);
    pthread_mutex_lock(&b->lock);
    while (b->go == 0)
        pthread_cond_wait(&b->cond, &b->lock);
    int go = b->go;
    pthread_mutex_unlock(&b->lock);
    if (go < 0)
        return NULL;
    const char *hdrs[2] = {NULL, NULL};
    char *auth = NULL;
    if (q->token != NULL && (auth = malloc(strlen(q->token) + 32)) != NULL) {
        sprintf(auth, "Authorization: Bearer %s", q->token);
        hdrs[0] = auth;
    }
    q->started = sgtest_now();
    q->rc = sggw_http(q->method, q->url, q->body, q->body_len, q->content_type, hdrs, q->timeout_s, &q->reply);
    q->finished = sgtest_now();
    free(auth);
    return NULL;
}

static void release(sggw_batch_t *b, int go)
{
    pthread_mutex_lock(&b->lock);
    b->go = go;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

sggw_batch_t *sggw_batch_start(sggw_par_req_t *reqs, size_t n)
{
    pthread_once(&curl_once, on_curl_init);
    sggw_batch_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return NULL;
    b->threads = calloc(n ? n : 1, sizeof(*b->threads));
    if (b->threads == NULL) {
        free(b);
        return NULL;
    }
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->cond, NULL);
    b->n = n;
    b->reqs = reqs;
    for (size_t i = 0; i < n; i++) {
        memset(&reqs[i].reply, 0, sizeof(reqs[i].reply));
        reqs[i].reply.body = calloc(1, 1);
        reqs[i].reply.headers = calloc(1, 1);
        snprintf(reqs[i].reply.error, sizeof(reqs[i].reply.error), "not sent");
        reqs[i].rc = -1;
    }
    for (size_t i = 0; i < n; i++) {
        slot_t *s = malloc(sizeof(*s));
        if (s != NULL) {
            s->b = b;
            s->i = i;
        }
        if (s == NULL || pthread_create(&b->threads[i], NULL, on_thread, s) != 0) {
            free(s);
            fprintf(stderr, "sggw: cannot start thread %zu of %zu\n", i + 1, n);
            release(b, -1);
            sggw_batch_join(b);
            return NULL;
        }
        b->started++;
    }
    /* the replies' placeholders are replaced by the real ones */
    for (size_t i = 0; i < n; i++)
        sgtest_reply_free(&reqs[i].reply);
    release(b, 1);
    return b;
}

void sggw_batch_join(sggw_batch_t *b)
{
    if (b == NULL)
        return;
    for (size_t i = 0; i < b->started; i++)
        pthread_join(b->threads[i], NULL);
    pthread_cond_destroy(&b->cond);
    pthread_mutex_destroy(&b->lock);
    free(b->threads);
    free(b);
}

int sggw_parallel(sggw_par_req_t *reqs, size_t n)
{
    sggw_batch_t *b = sggw_batch_start(reqs, n);
    if (b == NULL)
        return -1;
    sggw_batch_join(b);
    return 0;
}

/* ------------------------------------------------------------------------
 * SQLite, read-only
 * ------------------------------------------------------------------------ */

char *sggw_db_row(const char *data_dir, const char *sql, const char *const *params, char *err)
{
    char path[700], local[256];
    char *e = err != NULL ? err : local;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    char *row = NULL;

    e[0] = '\0';
    snprintf(path, sizeof(path), "%s/sandgate.db", data_dir);
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        snprintf(e, 256, "open %.180s: %.60s", path, db != NULL ? sqlite3_errmsg(db) : "out of memory");
        goto Done;
    }
    sqlite3_busy_timeout(db, 5000);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        snprintf(e, 256, "prepare: %s", sqlite3_errmsg(db));
        goto Done;
    }
    for (int i = 0; params != NULL && params[i] != NULL; i++)
        sqlite3_bind_text(st, i + 1, params[i], -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        size_t cap = 1;
        int ncol = sqlite3_column_count(st);
        row = calloc(1, 1);
        for (int i = 0; row != NULL && i < ncol; i++) {
            const char *t = (const char *)sqlite3_column_text(st, i);
            size_t tl = t != NULL ? strlen(t) : 0;
            char *nr = realloc(row, cap + tl + 1);
            if (nr == NULL) {
                free(row);
                row = NULL;
                break;
            }
            row = nr;
            if (i > 0)
                strcat(row, "|");
            if (t != NULL)
                strcat(row, t);
            cap += tl + 1;
        }
    } else if (rc != SQLITE_DONE) {
        snprintf(e, 256, "step: %s", sqlite3_errmsg(db));
    }
Done:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return row;
}

struct sggw_db_writer {
    sqlite3 *db;
    pthread_t thread;
    bool holding;
    double hold_s;
};

static void *on_writer(void *ud)
{
    sggw_db_writer_t *w = ud;
    usleep((useconds_t)(w->hold_s * 1e6));
    sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
    return NULL;
}

sggw_db_writer_t *sggw_db_writer_open(const char *data_dir)
{
    char path[700];
    sggw_db_writer_t *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    snprintf(path, sizeof(path), "%s/sandgate.db", data_dir);
    if (sqlite3_open_v2(path, &w->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        fprintf(stderr, "sggw: open %s: %s\n", path, w->db ? sqlite3_errmsg(w->db) : "out of memory");
        sqlite3_close(w->db);
        free(w);
        return NULL;
    }
    sqlite3_busy_timeout(w->db, 5000);
    return w;
}

static void writer_wait(sggw_db_writer_t *w)
{
    if (w->holding)
        pthread_join(w->thread, NULL);
    w->holding = false;
}

int sggw_db_writer_hold(sggw_db_writer_t *w, double hold_s)
{
    writer_wait(w);
    w->hold_s = hold_s;
    if (sqlite3_exec(w->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        fprintf(stderr, "sggw: BEGIN IMMEDIATE: %s\n", sqlite3_errmsg(w->db));
        return -1;
    }
    if (pthread_create(&w->thread, NULL, on_writer, w) != 0) {
        sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
        return -1;
    }
    w->holding = true;
    return 0;
}

void sggw_db_writer_close(sggw_db_writer_t *w)
{
    if (w == NULL)
        return;
    writer_wait(w);
    sqlite3_close(w->db);
    free(w);
}

/* ------------------------------------------------------------------------
 * Misc
 * ------------------------------------------------------------------------ */

char *sggw_fake_token(const char *public_id)
{
    static const char pub_chars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    char hex[128];
    random_hex(hex, 51);
    char *t = malloc(57);
    if (t == NULL)
        return NULL;
    memcpy(t, "sgk_", 4);
    for (int i = 0; i < 8; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        t[4 + i] = public_id != NULL ? public_id[i] : pub_chars[v % 36];
    }
    t[12] = '_';
    for (int i = 0; i < 43; i++) {
        unsigned v;
        sscanf(hex + 2 * (8 + i), "%2x", &v);
        t[13 + i] = b64[v % 64];
    }
    t[56] = '\0';
    return t;
}

double sggw_metric(const char *text, const char *name, const char *labels)
{
    char want[512];
    snprintf(want, sizeof(want), "%s%s%s%s ", name, labels[0] ? "{" : "", labels, labels[0] ? "}" : "");
    size_t wl = strlen(want);
    for (const char *line = text; line != NULL && *line != '\0';) {
        if (strncmp(line, want, wl) == 0)
            return strtod(line + wl, NULL);
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    return -1;
}

/* ------------------------------------------------------------------------
 * Public API helpers
 * ------------------------------------------------------------------------ */

char *sggw_create_session(const sggw_gateway_t *g, const char *token, const char *json_body, json_object **reply)
{
    sgtest_reply_t r;
    sggw_call(g, token, "POST", "/sessions", json_body != NULL ? json_body : "{\"lang\":\"python\"}", &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    const char *id = SG_STR(o, "session_id");
    SG_CHECK(strlen(id) == 36, o, "session_id is not a 36-char uuid");
    SG_CHECK(strcmp(SG_STR(o, "status"), "active") == 0, o, "a new session must be \"active\"");
    char *copy = strdup(id);
    if (reply != NULL)
        *reply = o;
    else
        json_object_put(o);
    return copy;
}

void sggw_check_result(json_object *r)
{
    SG_STR(r, "stdout");
    SG_STR(r, "stderr");
    int64_t exit_code = SG_INT(r, "exit_code");
    double t = SG_DBL(r, "execution_time");
    bool success = SG_BOOL(r, "success");
    bool timed_out = SG_BOOL(r, "timed_out");
    bool truncated = SG_BOOL(r, "truncated");
    SG_CHECK(t >= 0, r, "execution_time is negative");
    SG_CHECK(SG_DBL(r, "wall_time") >= 0, r, "wall_time is negative");
    SG_CHECK(success == (exit_code == 0 && !timed_out && !truncated), r,
             "success must be exit_code == 0 and not cut short");
}

json_object *sggw_post_result(const sggw_gateway_t *g, const char *token, const char *path, json_object *body)
{
    sgtest_reply_t r;
    sggw_call_json(g, token, "POST", path, body, 0, &r);
    json_object_put(body);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    sggw_check_result(o);
    return o;
}

json_object *sggw_execute(const sggw_gateway_t *g, const char *token, const char *sid, const char *code, double timeout)
{
    char path[128];
    json_object *b = json_object_new_object();
    json_object_object_add(b, "code", json_object_new_string(code));
    if (timeout > 0)
        json_object_object_add(b, "timeout", json_object_new_double(timeout));
    snprintf(path, sizeof(path), "/sessions/%s/execute", sid);
    return sggw_post_result(g, token, path, b);
}

void sggw_delete_session(const sggw_gateway_t *g, const char *token, const char *sid)
{
    char path[128];
    sgtest_reply_t r;
    snprintf(path, sizeof(path), "/sessions/%s", sid);
    sggw_call(g, token, "DELETE", path, NULL, &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    SG_CHECK(strcmp(SG_STR(o, "status"), "closed") == 0, o, "DELETE must answer {\"status\":\"closed\"}");
    json_object_put(o);
}

json_object *sggw_list_sessions(const sggw_gateway_t *g, const char *token)
{
    sgtest_reply_t r;
    sggw_call(g, token, "GET", "/sessions", NULL, &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    json_object *a = SG_ARR(o, "sessions");
    for (size_t i = 0; i < json_object_array_length(a); i++)
        SG_CHECK(json_object_is_type(json_object_array_get_idx(a, i), json_type_string), o,
                 "\"sessions\" must hold strings");
    return o;
}

void sggw_proxy_close_all(sgtest_proxy_t *p)
{
    sgtest_reply_t r;
    if (p == NULL)
        return;
    sgtest_call(p, "GET", "/sessions", NULL, &r);
    json_object *o = r.status == 200 ? json_tokener_parse(r.body) : NULL;
    sgtest_reply_free(&r);
    json_object *a = NULL;
    if (o != NULL && json_object_object_get_ex(o, "sessions", &a) && json_object_is_type(a, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(a); i++) {
            char path[128];
            snprintf(path, sizeof(path), "/sessions/%s", json_object_get_string(json_object_array_get_idx(a, i)));
            sgtest_call(p, "DELETE", path, NULL, &r);
            sgtest_reply_free(&r);
        }
    }
    json_object_put(o);
}

bool sggw_lists(const sggw_gateway_t *g, const char *token, const char *sid)
{
    json_object *o = sggw_list_sessions(g, token);
    bool has = sgtest_json_array_has_string(SG_ARR(o, "sessions"), sid);
    json_object_put(o);
    return has;
}

long sggw_int_header(const sgtest_reply_t *r, const char *name, long min)
{
    char *v = sgtest_reply_header(r, name);
    bool ok = v != NULL && *v != '\0' && strspn(v, "0123456789") == strlen(v);
    long n = ok ? strtol(v, NULL, 10) : -1;
    if (!ok || n < min) {
        fprintf(stderr, "headers:\n%s\n", r->headers);
        SG_FAIL(NULL, "%s must be an integer >= %ld (got \"%s\")", name, min, v ? v : "(none)");
    }
    free(v);
    return n;
}

bool sggw_admin_lists(const sggw_gateway_t *g, const char *tenant, const char *sid)
{
    char path[256];
    sgtest_reply_t r;
    pathf(path, sizeof(path), "/admin/sessions?tenant=%s", tenant);
    sggw_admin_call(g, "GET", path, NULL, &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    json_object *a = SG_ARR(o, "sessions");
    bool found = false;
    for (size_t i = 0; i < json_object_array_length(a) && !found; i++)
        found = strcmp(SG_STR(json_object_array_get_idx(a, i), "session_id"), sid) == 0;
    json_object_put(o);
    return found;
}

void sggw_expect_db_closed(const char *data_dir, const char *sid, const char *reason)
{
    const char *params[] = {sid, NULL};
    char err[256];
    char *row = NULL;
    double deadline = sgtest_now() + 10;
    for (;;) {
        free(row);
        row = sggw_db_row(data_dir,
                          "SELECT coalesce(closed_at, 0), coalesce(close_reason, '') FROM sessions WHERE id = ?1",
                          params, err);
        SG_CHECK(row != NULL, NULL, "no sessions row for %s in the SQLite file (%s)", sid, err);
        if (strncmp(row, "0|", 2) != 0)
            break;
        SG_CHECK(sgtest_now() < deadline, NULL, "the sessions row of %s is still open 10 s after it closed", sid);
        usleep(50000);
    }
    char *bar = strchr(row, '|');
    SG_CHECK(bar != NULL && strcmp(bar + 1, reason) == 0, NULL, "session %s: close_reason \"%s\", expected \"%s\"",
             sid, bar ? bar + 1 : row, reason);
    SG_CHECK(atoll(row) > 1000000000LL, NULL, "session %s: closed_at %s is no unix time", sid, row);
    free(row);
}

int sggw_test_ok = 1;

int sggw_after_test(void)
{
    if (sggw_test_ok)
        return 0;
    fprintf(stderr, "---- the test failed; logs of what it ran against: ----\n");
    sggw_print_logs(60);
    sggw_test_ok = 1;
    return 1;
}

int sggw_stack_stop(sggw_gateway_t **gw, sggw_redis_t **redis, sgtest_proxy_t **proxy, const char *proxy_id)
{
    int rc = 0;
    if (*gw != NULL && sggw_gateway_quiesce(*gw) != 0)
        fprintf(stderr, "teardown: live sessions remain in the gateway's state\n");
    if (*gw != NULL && sggw_gateway_stop(*gw) != 0) {
        fprintf(stderr, "teardown: the gateway did not exit with status 0 on SIGTERM\n");
        rc = -1;
    }
    *gw = NULL;
    sggw_redis_stop(*redis);
    *redis = NULL;
    if (*proxy != NULL) {
        sggw_proxy_close_all(*proxy);
        sgtest_proxy_stop(*proxy);
        *proxy = NULL;
    }
    int left = sgtest_docker_count(proxy_id);
    if (left != 0) {
        fprintf(stderr, "teardown: %d container(s) of %s remain after the proxy stopped\n", left, proxy_id);
        sgtest_docker_remove_all(proxy_id);
        rc = -1;
    }
    return rc;
}

/* ------------------------------------------------------------------------
 * A suite's stack
 * ------------------------------------------------------------------------ */

static int stack_copy_env(char **dst, const char *const *src, const char *what)
{
    size_t n = 0;
    for (; src != NULL && src[n] != NULL; n++) {
        if (n >= SGGW_STACK_MAX_ENV) {
            fprintf(stderr, "sggw_stack_start: more than %d %s settings\n", SGGW_STACK_MAX_ENV, what);
            return -1;
        }
        if ((dst[n] = strdup(src[n])) == NULL)
            return -1;
    }
    dst[n] = NULL;
    return 0;
}

static void stack_free_env(char **env)
{
    for (size_t i = 0; env[i] != NULL; i++) {
        free(env[i]);
        env[i] = NULL;
    }
}

static sgtest_proxy_t *stack_proxy_start(sggw_stack_t *st)
{
    return sgtest_proxy_start(st->proxy_id, (const char *const *)st->proxy_env);
}

static sggw_gateway_t *stack_gateway_start(sggw_stack_t *st)
{
    sggw_opts_t o = {.proxy_url = sgtest_proxy_url(st->proxy),
                     .redis_url = st->redis != NULL ? sggw_redis_url(st->redis) : NULL,
                     .env = (const char *const *)st->gateway_env};
    return sggw_gateway_start(&o);
}

int sggw_stack_start(sggw_stack_t *st, const sggw_stack_opts_t *o)
{
    static const char *const default_proxy_env[] = {"SANDGATE_POOL_SIZE=1", NULL};

    memset(st, 0, sizeof(*st));
    if (stack_copy_env(st->proxy_env, o->proxy_env != NULL ? o->proxy_env : default_proxy_env, "proxy") != 0 ||
        stack_copy_env(st->gateway_env, o->gateway_env, "gateway") != 0)
        return -1;
    st->proxy_id = o->proxy_id != NULL ? strdup(o->proxy_id) : sgtest_new_proxy_id();
    if (st->proxy_id == NULL || (st->proxy = stack_proxy_start(st)) == NULL)
        return -1;
    if (o->redis && (st->redis = sggw_redis_start()) == NULL)
        return -1;
    st->gw = stack_gateway_start(st);
    return st->gw != NULL ? 0 : -1;
}

int sggw_stack_after_test(sggw_stack_t *st)
{
    int rc = sggw_after_test() ? -1 : 0;
    st->gw_restarted = false;
    if (st->redis != NULL && !sggw_redis_running(st->redis)) {
        fprintf(stderr, "redis-server died during this test\n");
        sggw_redis_print_log(st->redis, 40);
        sggw_redis_kill(st->redis);
        if (sggw_redis_restart(st->redis) != 0)
            fprintf(stderr, "redis-server did not start again\n");
        rc = -1;
    }
    if (st->proxy != NULL && !sgtest_proxy_alive(st->proxy)) {
        fprintf(stderr, "the proxy died during this test\n");
        sgtest_proxy_print_log(st->proxy, 60);
        sgtest_proxy_kill9(st->proxy);
        st->proxy = stack_proxy_start(st);
        rc = -1;
    }
    if (!sggw_gateway_alive(st->gw)) {
        fprintf(stderr, "the gateway died during this test\n");
        sggw_gateway_print_log(st->gw, 80);
        sggw_gateway_kill9(st->gw);
        st->gw = stack_gateway_start(st);
        st->gw_restarted = true;
        rc = -1;
    }
    return rc;
}

int sggw_stack_end(sggw_stack_t *st)
{
    int rc = sggw_stack_stop(&st->gw, &st->redis, &st->proxy, st->proxy_id);
    free(st->proxy_id);
    st->proxy_id = NULL;
    stack_free_env(st->proxy_env);
    stack_free_env(st->gateway_env);
    return rc;
}

int sggw_stack_teardown(void **state)
{
    return sggw_stack_after_test(*state);
}

int sggw_stack_group_teardown(void **state)
{
    return sggw_stack_end(*state);
}
