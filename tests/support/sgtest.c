/*
 * sgtest.c — the harness's core (see sgtest_int.h for the layers): clocks,
 * child processes, ports, temporary directories, and the servers a test
 * starts (their start, stop, logs, and their end with the test process).
 */
#include "sgtest_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define POLL_INTERVAL_US 20000
#define MAX_LIVE 48

double sgtest_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double sggw_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int sgtest_poll(bool (*done)(void *ctx), void *ctx, double timeout_s, double every_s)
{
    double deadline = sgtest_now() + timeout_s;
    while (!done(ctx)) {
        if (sgtest_now() > deadline)
            return -1;
        usleep((useconds_t)(every_s * 1e6));
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * The registry: live servers and temporary directories, for the logs of a
 * failed test and for an atexit handler
 * ------------------------------------------------------------------------ */

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static char *reg_dirs[MAX_LIVE * 3];
static sgtest__server_t *reg_live[MAX_LIVE];
static pthread_once_t atexit_once = PTHREAD_ONCE_INIT;

static int rmtree_raw(const char *dir);

static void on_exit_cleanup(void)
{
    /* a test that ended without stopping what it started */
    for (size_t i = 0; i < MAX_LIVE; i++) {
        if (reg_live[i] != NULL)
            sgtest__server_kill(reg_live[i]);
    }
    for (size_t i = 0; i < sizeof(reg_dirs) / sizeof(reg_dirs[0]); i++) {
        if (reg_dirs[i] != NULL)
            rmtree_raw(reg_dirs[i]);
    }
}

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

void sgtest__live_add(sgtest__server_t *s)
{
    reg_add((void **)reg_live, MAX_LIVE, s);
}

void sgtest__live_remove(sgtest__server_t *s)
{
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < MAX_LIVE; i++) {
        if (reg_live[i] == s)
            reg_live[i] = NULL;
    }
    pthread_mutex_unlock(&reg_lock);
}

void sgtest__live_print(int mask, int lines)
{
    pthread_mutex_lock(&reg_lock);
    for (int kind = 1; kind <= SGTEST__REDIS; kind <<= 1) {
        for (size_t i = 0; (mask & kind) != 0 && i < MAX_LIVE; i++) {
            if (reg_live[i] != NULL && reg_live[i]->kind == kind)
                sgtest__server_print_log(reg_live[i], kind == SGTEST__REDIS ? lines / 2 : lines);
        }
    }
    pthread_mutex_unlock(&reg_lock);
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
        fprintf(stderr, "sgtest: mkdtemp(%s): %s\n", dir, strerror(errno));
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
        fprintf(stderr, "sgtest: remove(%s): %s\n", path, strerror(errno));
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

int sgtest_bind_loopback(int flags, int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

int sgtest_connect_loopback(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int sgtest_free_port(void)
{
    int port, fd = sgtest_bind_loopback(0, &port);
    if (fd < 0)
        return -1;
    close(fd);
    return port;
}

pid_t sgtest__spawn(char *const *argv, char *const *envp, const char *log, int out_fd, int err_fd, const char *dir,
                    bool use_path)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    /* the child dies with the test process, whatever kills it */
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
    dprintf(2, "sgtest: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

bool sgtest_child_reap(sgtest_child_t *c, int flags)
{
    if (c->pid <= 0 || c->reaped)
        return true;
    int st;
    pid_t r;
    do {
        r = waitpid(c->pid, &st, flags);
    } while (r < 0 && errno == EINTR);
    if (r == c->pid || (r < 0 && errno == ECHILD)) {
        c->reaped = true;
        c->wstatus = r == c->pid ? st : -1;
        return true;
    }
    return false;
}

void sgtest_describe_exit(int st, char *buf, size_t len)
{
    if (st < 0)
        snprintf(buf, len, "unknown status");
    else if (WIFEXITED(st))
        snprintf(buf, len, "exit status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(buf, len, "status 0x%x", st);
}

bool sgtest_env_key_is(const char *entry, const char *key_of)
{
    /* key_of is "KEY" or "KEY=VALUE"; compare the keys. */
    size_t klen = strcspn(key_of, "=");
    return strncmp(entry, key_of, klen) == 0 && entry[klen] == '=';
}

char **sgtest_build_env(const char *const *set, size_t nset)
{
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    char **envp = calloc(n + nset + 1, sizeof(*envp));
    if (envp == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool overridden = false;
        for (size_t j = 0; j < nset && !overridden; j++)
            overridden = sgtest_env_key_is(environ[i], set[j]);
        if (!overridden)
            envp[k++] = environ[i];
    }
    for (size_t j = 0; j < nset; j++) {
        bool later = false;
        for (size_t m = j + 1; m < nset && !later; m++)
            later = sgtest_env_key_is(set[m], set[j]);
        if (!later)
            envp[k++] = (char *)set[j];
    }
    envp[k] = NULL;
    return envp;
}

void sgtest__print_tail(const char *path, int lines)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "  (cannot open %s: %s)\n", path, strerror(errno));
        return;
    }
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return;
    }
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

char *sgtest__slurp(const char *path, size_t *len)
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

void sgtest__random_hex(char *out, size_t nbytes)
{
    unsigned char b[64];
    if (nbytes > sizeof(b))
        nbytes = sizeof(b);
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, b, nbytes) != (ssize_t)nbytes) {
        /* /dev/urandom always exists on Linux; this is belt and braces. */
        uint64_t v = (uint64_t)(sgtest_now() * 1e6) * 1000003u ^ (uint64_t)getpid();
        for (size_t i = 0; i < nbytes; i++)
            b[i] = (unsigned char)(v >> (8 * (i % 8))) ^ (unsigned char)rand();
    }
    if (fd >= 0)
        close(fd);
    for (size_t i = 0; i < nbytes; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* ------------------------------------------------------------------------
 * Servers
 * ------------------------------------------------------------------------ */

static void server_free(sgtest__server_t *s)
{
    sgtest__server_free_dir(s);
    free(s);
}

void *sgtest__server_new(size_t size, int kind, const char *name, const char *prefix, const char *logname,
                         void (*free_fn)(sgtest__server_t *s))
{
    sgtest__server_t *s = calloc(1, size);
    if (s == NULL)
        return NULL;
    s->kind = kind;
    s->free_fn = free_fn != NULL ? free_fn : server_free;
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->dir = sggw_mkdtemp(prefix);
    if (s->dir == NULL)
        return sgtest__server_fail(s);
    snprintf(s->log, sizeof(s->log), "%s/%s", s->dir, logname);
    return s;
}

void *sgtest__server_fail(sgtest__server_t *s)
{
    s->free_fn(s);
    return NULL;
}

void sgtest__server_free_dir(sgtest__server_t *s)
{
    if (s->dir != NULL) {
        sggw_rmtree(s->dir);
        free(s->dir);
        s->dir = NULL;
    }
}

const char *sgtest__server_status(sgtest__server_t *s, char *buf, size_t len)
{
    if (!sgtest_child_reap(&s->child, WNOHANG))
        return "running";
    sgtest_describe_exit(s->child.wstatus, buf, len);
    return buf;
}

void sgtest__server_print_log(sgtest__server_t *s, int lines)
{
    char why[96];
    fprintf(stderr, "---- %s (pid %d, %s, %s%s): last %d lines of its log ----\n", s->name, (int)s->child.pid, s->url,
            sgtest__server_status(s, why, sizeof(why)), s->paused ? ", SIGSTOPped" : "", lines);
    sgtest__print_tail(s->log, lines);
    fprintf(stderr, "---- end of the log of %s ----\n", s->name);
}

const char *sgtest__bin(const char *var)
{
    const char *bin = getenv(var);
    if (bin == NULL || *bin == '\0') {
        fprintf(stderr, "sgtest: %s is not set (ctest sets it)\n", var);
        return NULL;
    }
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "sgtest: %s=%s is not executable: %s\n", var, bin, strerror(errno));
        return NULL;
    }
    return bin;
}

void *sgtest__server_exec(sgtest__server_t *s, const char *bin, const char **set, size_t nset, double deadline_s)
{
    char **envp = sgtest_build_env(set, nset);
    free(set);
    if (envp == NULL)
        return sgtest__server_fail(s);
    char *const argv[] = {(char *)bin, NULL};
    s->child.pid = sgtest__spawn(argv, envp, s->log, -1, -1, NULL, false);
    free(envp);
    if (s->child.pid < 0) {
        fprintf(stderr, "sgtest: fork: %s\n", strerror(errno));
        return sgtest__server_fail(s);
    }
    if (sgtest__server_wait_ready(s, deadline_s) != 0)
        return sgtest__server_fail(s);
    sgtest__live_add(s);
    return s;
}

int sgtest__server_wait_ready(sgtest__server_t *s, double deadline_s)
{
    char url[96];
    snprintf(url, sizeof(url), "%s/", s->url);
    double deadline = sgtest_now() + deadline_s;
    long last = 0;
    for (;;) {
        if (sgtest_child_reap(&s->child, WNOHANG)) {
            char why[96];
            sgtest_describe_exit(s->child.wstatus, why, sizeof(why));
            fprintf(stderr, "sgtest: %s exited before answering GET / (%s)\n", s->name, why);
            sgtest__server_print_log(s, 40);
            return -1;
        }
        sgtest_reply_t r;
        sgtest_http("GET", url, NULL, 0, NULL, 2, &r);
        last = r.status;
        sgtest_reply_free(&r);
        if (last == 200)
            return 0;
        if (sgtest_now() > deadline) {
            fprintf(stderr, "sgtest: %s did not answer GET / with 200 within %.0f s (last status %ld)\n", s->name,
                    deadline_s, last);
            sgtest__server_print_log(s, 40);
            sgtest__server_kill(s);
            return -1;
        }
        usleep(POLL_INTERVAL_US);
    }
}

void sgtest__server_kill(sgtest__server_t *s)
{
    if (s->child.pid <= 0)
        return;
    if (!s->child.reaped) {
        kill(s->child.pid, SIGKILL);
        if (s->paused)
            kill(s->child.pid, SIGCONT);
    }
    sgtest_child_reap(&s->child, 0);
    s->paused = false;
}

int sgtest__server_stop(sgtest__server_t *s)
{
    int result;
    if (!s->child.reaped)
        kill(s->child.pid, SIGTERM);
    double deadline = sgtest_now() + SGTEST__STOP_DEADLINE_S;
    while (!sgtest_child_reap(&s->child, WNOHANG) && sgtest_now() < deadline)
        usleep(POLL_INTERVAL_US);
    if (!s->child.reaped) {
        fprintf(stderr, "sgtest: %s (pid %d) ignored SIGTERM for %.0f s; SIGKILL\n", s->name, (int)s->child.pid,
                SGTEST__STOP_DEADLINE_S);
        sgtest__server_print_log(s, 40);
        sgtest__server_kill(s);
        result = -1;
    } else {
        result = s->child.wstatus;
        if (result != 0) {
            /* a sanitizer's exit report, a crash on shutdown: show it */
            char why[96];
            fprintf(stderr, "sgtest: %s ended with %s after SIGTERM\n", s->name,
                    sgtest__server_status(s, why, sizeof(why)));
            sgtest__server_print_log(s, 60);
        }
    }
    return result;
}

int sgtest__server_end(sgtest__server_t *s, bool gently)
{
    int result = 0;
    if (gently)
        result = sgtest__server_stop(s);
    else
        sgtest__server_kill(s);
    sgtest__live_remove(s);
    s->free_fn(s);
    return result;
}
