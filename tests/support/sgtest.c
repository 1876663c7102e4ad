/*
 * sgtest.c — see sgtest.h. Real processes, real sockets, real Docker.
 */
#include "sgtest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
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

extern char **environ;

#define START_DEADLINE_S 60.0
#define STOP_DEADLINE_S 20.0
#define POLL_INTERVAL_US 50000
#define BODY_CAP ((size_t)256 << 20) /* no reply we expect comes near this */
#define HEADER_CAP ((size_t)1 << 20)
#define LOG_TAIL_LINES 40
#define MAX_LIVE_PROXIES 16

double sgtest_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pause_poll(void)
{
    usleep(POLL_INTERVAL_US);
}

/* libcurl's global state, set up once before any thread uses it. */
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void on_curl_init(void)
{
    curl_global_init(CURL_GLOBAL_ALL);
}
static void curl_ready(void)
{
    pthread_once(&curl_once, on_curl_init);
}

/* ------------------------------------------------------------------------
 * Live proxies, so that a failure anywhere can show their logs.
 * ------------------------------------------------------------------------ */

struct sgtest_proxy {
    sgtest_child_t child;
    char id[128];
    char url[64];
    char dir[128];
    char log[192];
};

static sgtest_proxy_t *live[MAX_LIVE_PROXIES];
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;

static void live_add(sgtest_proxy_t *p)
{
    pthread_mutex_lock(&live_lock);
    for (size_t i = 0; i < MAX_LIVE_PROXIES; i++) {
        if (live[i] == NULL) {
            live[i] = p;
            break;
        }
    }
    pthread_mutex_unlock(&live_lock);
}

static void live_remove(sgtest_proxy_t *p)
{
    pthread_mutex_lock(&live_lock);
    for (size_t i = 0; i < MAX_LIVE_PROXIES; i++) {
        if (live[i] == p)
            live[i] = NULL;
    }
    pthread_mutex_unlock(&live_lock);
}

static void print_file_tail(const char *path, int lines)
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
    long from = size > 65536 ? size - 65536 : 0;
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


const char *sgtest_proxy_status(sgtest_proxy_t *p)
{
    static __thread char buf[96];
    if (!sgtest_child_reap(&p->child, WNOHANG))
        return "running";
    sgtest_describe_exit(p->child.wstatus, buf, sizeof(buf));
    return buf;
}

void sgtest_proxy_print_log(sgtest_proxy_t *p, int lines)
{
    fprintf(stderr, "---- proxy %s (pid %d, %s): %s; last %d lines of its log ----\n", p->id,
            (int)p->child.pid, p->url, sgtest_proxy_status(p), lines);
    print_file_tail(p->log, lines);
    fprintf(stderr, "---- end of proxy log ----\n");
}

static void print_live_logs(void)
{
    pthread_mutex_lock(&live_lock);
    for (size_t i = 0; i < MAX_LIVE_PROXIES; i++) {
        if (live[i] != NULL)
            sgtest_proxy_print_log(live[i], LOG_TAIL_LINES);
    }
    pthread_mutex_unlock(&live_lock);
}

/* ------------------------------------------------------------------------
 * Proxy process
 * ------------------------------------------------------------------------ */

char *sgtest_new_proxy_id(void)
{
    unsigned char rnd[8];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, rnd, sizeof(rnd)) != (ssize_t)sizeof(rnd)) {
        /* /dev/urandom always exists on Linux; this is belt and braces. */
        uint64_t v = (uint64_t)sgtest_now() * 1000003u ^ (uint64_t)getpid();
        memcpy(rnd, &v, sizeof(rnd));
    }
    if (fd >= 0)
        close(fd);
    char *id = malloc(64);
    if (id == NULL)
        return NULL;
    int n = snprintf(id, 64, "sgtest-%d-", (int)getpid());
    for (size_t i = 0; i < sizeof(rnd); i++)
        n += snprintf(id + n, 64 - (size_t)n, "%02x", rnd[i]);
    return id;
}

/* A loopback port nobody listens on right now: bind port 0, read, close. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    int port = -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
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

static void remove_tmp(sgtest_proxy_t *p)
{
    if (p->log[0] != '\0')
        unlink(p->log);
    if (p->dir[0] != '\0')
        rmdir(p->dir);
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

sgtest_proxy_t *sgtest_proxy_start(const char *proxy_id, const char *const *extra_env)
{
    curl_ready();
    const char *bin = getenv("SANDGATE_PROXY_BIN");
    if (bin == NULL || *bin == '\0') {
        fprintf(stderr, "sgtest: SANDGATE_PROXY_BIN is not set (ctest sets it)\n");
        return NULL;
    }
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "sgtest: SANDGATE_PROXY_BIN=%s is not executable: %s\n", bin,
                strerror(errno));
        return NULL;
    }
    sgtest_proxy_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    snprintf(p->id, sizeof(p->id), "%s", proxy_id);
    const char *tmp = getenv("TMPDIR");
    snprintf(p->dir, sizeof(p->dir), "%s/sgtest-proxy-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(p->dir) == NULL) {
        fprintf(stderr, "sgtest: mkdtemp(%s): %s\n", p->dir, strerror(errno));
        p->dir[0] = '\0';
        goto Error;
    }
    snprintf(p->log, sizeof(p->log), "%s/proxy.log", p->dir);
    int logfd = open(p->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (logfd < 0) {
        fprintf(stderr, "sgtest: open(%s): %s\n", p->log, strerror(errno));
        p->log[0] = '\0';
        goto Error;
    }
    int port = free_port();
    if (port <= 0) {
        close(logfd);
        fprintf(stderr, "sgtest: no free loopback port: %s\n", strerror(errno));
        goto Error;
    }
    snprintf(p->url, sizeof(p->url), "http://127.0.0.1:%d", port);

    char host_kv[] = "HOST=127.0.0.1", port_kv[32], id_kv[160];
    snprintf(port_kv, sizeof(port_kv), "PORT=%d", port);
    snprintf(id_kv, sizeof(id_kv), "SANDGATE_PROXY_ID=%s", proxy_id);
    size_t nextra = 0;
    while (extra_env != NULL && extra_env[nextra] != NULL)
        nextra++;
    const char **set = calloc(nextra + 5, sizeof(*set));
    if (set == NULL) {
        close(logfd);
        goto Error;
    }
    /* Library installs stay off unless a test sets them up: then no shared
     * store volume is made and no installer ever looks for a public index. */
    static char no_store_kv[] = "SANDGATE_STORE_VOLUME=";
    bool store_given = false;
    for (size_t i = 0; i < nextra; i++) {
        set[i] = extra_env[i];
        store_given = store_given || sgtest_env_key_is(no_store_kv, extra_env[i]);
    }
    size_t nset = nextra;
    set[nset++] = host_kv;
    set[nset++] = port_kv;
    set[nset++] = id_kv;
    if (!store_given)
        set[nset++] = no_store_kv;
    /* The suites run their proxies on runc unless the environment names a
     * runtime (SANDGATE_RUNTIME=runsc ctest ... runs them under gVisor;
     * README "Tests"), or a test asks for one. */
    static char runtime_kv[] = "SANDGATE_RUNTIME=runc";
    bool runtime_given = getenv("SANDGATE_RUNTIME") != NULL;
    for (size_t i = 0; i < nextra; i++)
        runtime_given = runtime_given || sgtest_env_key_is(runtime_kv, extra_env[i]);
    if (!runtime_given)
        set[nset++] = runtime_kv;
    char **envp = sgtest_build_env(set, nset);
    free(set);
    if (envp == NULL) {
        close(logfd);
        goto Error;
    }

    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* The proxy dies with the test process, whatever kills it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(126);
        int nullfd = open("/dev/null", O_RDONLY);
        if (nullfd >= 0)
            dup2(nullfd, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        char *const argv[] = {(char *)bin, NULL};
        execve(bin, argv, envp);
        dprintf(2, "sgtest: execve(%s): %s\n", bin, strerror(errno));
        _exit(127);
    }
    free(envp);
    close(logfd);
    if (pid < 0) {
        fprintf(stderr, "sgtest: fork: %s\n", strerror(errno));
        goto Error;
    }
    p->child.pid = pid;

    char url[96];
    snprintf(url, sizeof(url), "%s/", p->url);
    double deadline = sgtest_now() + START_DEADLINE_S;
    long last_status = 0;
    for (;;) {
        if (sgtest_child_reap(&p->child, WNOHANG)) {
            char why[96];
            sgtest_describe_exit(p->child.wstatus, why, sizeof(why));
            fprintf(stderr, "sgtest: proxy %s exited before answering GET / (%s)\n", p->id, why);
            sgtest_proxy_print_log(p, LOG_TAIL_LINES);
            goto Error;
        }
        sgtest_reply_t r;
        sgtest_http("GET", url, NULL, 0, NULL, 2, &r);
        last_status = r.status;
        sgtest_reply_free(&r);
        if (last_status == 200)
            break;
        if (sgtest_now() > deadline) {
            fprintf(stderr, "sgtest: proxy %s did not answer GET / with 200 within %.0f s "
                            "(last status %ld)\n",
                    p->id, START_DEADLINE_S, last_status);
            sgtest_proxy_print_log(p, LOG_TAIL_LINES);
            kill(p->child.pid, SIGKILL);
            sgtest_child_reap(&p->child, 0);
            goto Error;
        }
        pause_poll();
    }
    live_add(p);
    return p;

Error:
    remove_tmp(p);
    free(p);
    return NULL;
}

int sgtest_proxy_stop(sgtest_proxy_t *p)
{
    if (p == NULL)
        return 0;
    int result;
    if (!p->child.reaped)
        kill(p->child.pid, SIGTERM);
    double deadline = sgtest_now() + STOP_DEADLINE_S;
    while (!sgtest_child_reap(&p->child, WNOHANG) && sgtest_now() < deadline)
        pause_poll();
    if (!p->child.reaped) {
        fprintf(stderr, "sgtest: proxy %s (pid %d) ignored SIGTERM for %.0f s; SIGKILL\n", p->id,
                (int)p->child.pid, STOP_DEADLINE_S);
        sgtest_proxy_print_log(p, LOG_TAIL_LINES);
        kill(p->child.pid, SIGKILL);
        sgtest_child_reap(&p->child, 0);
        result = -1;
    } else {
        result = p->child.wstatus;
        if (result != 0) {
            /* A sanitizer's exit report, a crash on shutdown: show it. */
            fprintf(stderr, "sgtest: proxy %s ended with %s after SIGTERM\n", p->id,
                    sgtest_proxy_status(p));
            sgtest_proxy_print_log(p, LOG_TAIL_LINES);
        }
    }
    live_remove(p);
    remove_tmp(p);
    free(p);
    return result;
}

void sgtest_proxy_kill9(sgtest_proxy_t *p)
{
    if (p == NULL)
        return;
    if (!p->child.reaped)
        kill(p->child.pid, SIGKILL);
    sgtest_child_reap(&p->child, 0);
    live_remove(p);
    remove_tmp(p);
    free(p);
}

const char *sgtest_proxy_url(const sgtest_proxy_t *p)
{
    return p != NULL ? p->url : "http://127.0.0.1:0";
}

const char *sgtest_proxy_id(const sgtest_proxy_t *p)
{
    return p->id;
}

pid_t sgtest_proxy_pid(const sgtest_proxy_t *p)
{
    return p->child.pid;
}

bool sgtest_proxy_alive(sgtest_proxy_t *p)
{
    return !sgtest_child_reap(&p->child, WNOHANG);
}

/* ------------------------------------------------------------------------
 * HTTP
 * ------------------------------------------------------------------------ */

typedef struct {
    char *base;
    size_t len, cap, limit;
    bool overflow;
} dbuf_t;

static int dbuf_add(dbuf_t *b, const char *p, size_t n)
{
    if (b->len + n > b->limit) {
        b->overflow = true;
        return -1;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *nb = realloc(b->base, cap);
        if (nb == NULL)
            return -1;
        b->base = nb;
        b->cap = cap;
    }
    memcpy(b->base + b->len, p, n);
    b->len += n;
    b->base[b->len] = '\0';
    return 0;
}

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    return dbuf_add(ud, p, sz * n) == 0 ? sz * n : 0;
}

/* Progress of one request, for the batch runner. */
typedef struct {
    size_t body_len;
    size_t body_sent;
    void (*on_sent)(void *ctx);
    void *ctx;
    bool fired;
} sent_watch_t;

static void watch_fire(sent_watch_t *w)
{
    if (!w->fired) {
        w->fired = true;
        w->on_sent(w->ctx);
    }
}

static int on_debug(CURL *h, curl_infotype type, char *data, size_t size, void *ud)
{
    sent_watch_t *w = ud;
    if (type == CURLINFO_HEADER_OUT && w->body_len == 0)
        watch_fire(w);
    else if (type == CURLINFO_DATA_OUT) {
        w->body_sent += size;
        if (w->body_sent >= w->body_len)
            watch_fire(w);
    } else if (type == CURLINFO_HEADER_IN || type == CURLINFO_DATA_IN)
        watch_fire(w); /* an answer means the request went out */
    return 0;
}

typedef struct {
    const char *method;
    const char *url;
    const void *body;
    size_t len;
    const char *content_type;
    long timeout_s;
    const char *unix_socket; /* may be NULL */
    sent_watch_t *watch;     /* may be NULL */
} http_req_t;

static int http_do(const http_req_t *q, sgtest_reply_t *out)
{
    curl_ready();
    memset(out, 0, sizeof(*out));
    dbuf_t body = {.limit = BODY_CAP}, hdrs = {.limit = HEADER_CAP};
    struct curl_slist *hl = NULL;
    double t0 = sgtest_now();
    CURL *h = curl_easy_init();
    if (h == NULL) {
        snprintf(out->error, sizeof(out->error), "curl_easy_init failed");
        goto Done;
    }
    curl_easy_setopt(h, CURLOPT_URL, q->url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_TIMEOUT, q->timeout_s > 0 ? q->timeout_s : SGTEST_HTTP_TIMEOUT);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &hdrs);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, out->error);
    if (q->unix_socket != NULL)
        curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, q->unix_socket);
    if (q->watch != NULL) {
        q->watch->body_len = q->body != NULL ? q->len : 0;
        curl_easy_setopt(h, CURLOPT_DEBUGFUNCTION, on_debug);
        curl_easy_setopt(h, CURLOPT_DEBUGDATA, q->watch);
        curl_easy_setopt(h, CURLOPT_VERBOSE, 1L);
    }
    /* No "Expect: 100-continue" round trip: send bodies at once. */
    hl = curl_slist_append(hl, "Expect:");
    if (q->content_type != NULL) {
        char ct[160];
        snprintf(ct, sizeof(ct), "Content-Type: %s", q->content_type);
        hl = curl_slist_append(hl, ct);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    if (strcmp(q->method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (q->body != NULL || strcmp(q->method, "POST") == 0 ||
               strcmp(q->method, "PUT") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(q->body ? q->len : 0));
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->body ? q->body : "");
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, q->method);
    } else if (strcmp(q->method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, q->method);
    }
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out->status);
    } else {
        if (out->error[0] == '\0')
            snprintf(out->error, sizeof(out->error), "%s", curl_easy_strerror(rc));
        if (body.overflow)
            snprintf(out->error, sizeof(out->error), "reply body over %zu bytes", BODY_CAP);
        out->status = 0;
    }

Done:
    if (h != NULL)
        curl_easy_cleanup(h);
    curl_slist_free_all(hl);
    if (body.base == NULL)
        body.base = calloc(1, 1);
    if (hdrs.base == NULL)
        hdrs.base = calloc(1, 1);
    out->body = body.base;
    out->body_len = body.len;
    out->headers = hdrs.base;
    out->seconds = sgtest_now() - t0;
    return out->status != 0 ? 0 : -1;
}

int sgtest_http(const char *method, const char *url, const void *body, size_t len,
                const char *content_type, long timeout_s, sgtest_reply_t *out)
{
    http_req_t q = {.method = method, .url = url, .body = body, .len = len,
                    .content_type = content_type, .timeout_s = timeout_s};
    return http_do(&q, out);
}

void sgtest_reply_free(sgtest_reply_t *r)
{
    if (r == NULL)
        return;
    free(r->body);
    free(r->headers);
    r->body = NULL;
    r->headers = NULL;
    r->body_len = 0;
}

char *sgtest_reply_header(const sgtest_reply_t *r, const char *name)
{
    char *found = NULL;
    size_t nlen = strlen(name);
    const char *line = r->headers;
    while (line != NULL && *line != '\0') {
        const char *eol = strstr(line, "\r\n");
        size_t llen = eol ? (size_t)(eol - line) : strlen(line);
        if (llen > nlen && strncasecmp(line, name, nlen) == 0 && line[nlen] == ':') {
            const char *v = line + nlen + 1;
            while (v < line + llen && (*v == ' ' || *v == '\t'))
                v++;
            free(found);
            found = strndup(v, (size_t)(line + llen - v));
        }
        line = eol ? eol + 2 : NULL;
    }
    return found;
}

static int no_proxy(sgtest_reply_t *out)
{
    memset(out, 0, sizeof(*out));
    out->body = calloc(1, 1);
    out->headers = calloc(1, 1);
    snprintf(out->error, sizeof(out->error), "no proxy is running");
    return -1;
}

int sgtest_call(const sgtest_proxy_t *p, const char *method, const char *path,
                const char *json_body, sgtest_reply_t *out)
{
    if (p == NULL)
        return no_proxy(out);
    char url[2048];
    snprintf(url, sizeof(url), "%s%s", p->url, path);
    return sgtest_http(method, url, json_body, json_body ? strlen(json_body) : 0,
                       json_body ? "application/json" : NULL, 0, out);
}

int sgtest_call_json(const sgtest_proxy_t *p, const char *method, const char *path,
                     json_object *body, long timeout_s, sgtest_reply_t *out)
{
    if (p == NULL)
        return no_proxy(out);
    char url[2048];
    snprintf(url, sizeof(url), "%s%s", p->url, path);
    const char *s = body ? json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN) : NULL;
    return sgtest_http(method, url, s, s ? strlen(s) : 0, s ? "application/json" : NULL,
                       timeout_s, out);
}

/* ------------------------------------------------------------------------
 * Assertions
 * ------------------------------------------------------------------------ */

static void print_reply(const sgtest_reply_t *r)
{
    if (r->status == 0) {
        fprintf(stderr, "  transfer failed after %.3f s: %s\n", r->seconds, r->error);
        return;
    }
    const size_t show = 4096;
    fprintf(stderr, "  reply: HTTP %ld after %.3f s, %zu body bytes:\n  %.*s%s\n", r->status,
            r->seconds, r->body_len, (int)(r->body_len < show ? r->body_len : show),
            r->body ? r->body : "", r->body_len > show ? " [...]" : "");
}

static void fail_here(const char *file, int line) __attribute__((noreturn));
static void fail_here(const char *file, int line)
{
    print_live_logs();
    fflush(stderr);
    _fail(file, line);
    abort(); /* _fail longjmps back into cmocka */
}

static void print_json(json_object *o)
{
    if (o != NULL)
        fprintf(stderr, "  in: %s\n",
                json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                      JSON_C_TO_STRING_NOSLASHESCAPE));
}

void sgtest__fail(json_object *o, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    print_json(o);
    fail_here(file, line);
}

void sgtest__check_failed(json_object *o, const char *file, int line, const char *cond,
                          const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: check failed: %s\n  ", file, line, cond);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    print_json(o);
    fail_here(file, line);
}

void sgtest__assert_status(const sgtest_reply_t *r, long status, const char *file, int line)
{
    if (r->status == status)
        return;
    fprintf(stderr, "%s:%d: expected HTTP %ld\n", file, line, status);
    print_reply(r);
    fail_here(file, line);
}

bool sgtest_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        unsigned c = *p;
        size_t n;
        unsigned min;
        if (c < 0x80) {
            p++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1, min = 0x80, c &= 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2, min = 0x800, c &= 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3, min = 0x10000, c &= 0x07;
        } else {
            return false;
        }
        if ((size_t)(end - p) <= n)
            return false;
        for (size_t i = 1; i <= n; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return false;
            c = (c << 6) | (p[i] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            return false;
        p += n + 1;
    }
    return true;
}

json_object *sgtest__json(const sgtest_reply_t *r, const char *file, int line)
{
    if (r->status == 0 || r->body == NULL) {
        fprintf(stderr, "%s:%d: expected a JSON reply\n", file, line);
        print_reply(r);
        fail_here(file, line);
    }
    if (!sgtest_utf8_valid(r->body, r->body_len)) {
        fprintf(stderr, "%s:%d: reply body is not valid UTF-8\n", file, line);
        print_reply(r);
        fail_here(file, line);
    }
    json_tokener *tok = json_tokener_new();
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *o = json_tokener_parse_ex(tok, r->body, (int)r->body_len);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t used = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    while (o != NULL && used < r->body_len && strchr(" \t\r\n", r->body[used]) != NULL)
        used++;
    if (o == NULL || err != json_tokener_success || used != r->body_len) {
        fprintf(stderr, "%s:%d: reply body is not one JSON value (%s, parsed %zu of %zu)\n",
                file, line, json_tokener_error_desc(err), used, r->body_len);
        print_reply(r);
        json_object_put(o);
        fail_here(file, line);
    }
    return o;
}

json_object *sgtest__expect_json(const sgtest_reply_t *r, long status, const char *file, int line)
{
    sgtest__assert_status(r, status, file, line);
    json_object *o = sgtest__json(r, file, line);
    char *ct = sgtest_reply_header(r, "Content-Type");
    bool ok = ct != NULL && strncasecmp(ct, "application/json", 16) == 0;
    if (!ok) {
        fprintf(stderr, "%s:%d: JSON reply with Content-Type %s\n", file, line,
                ct ? ct : "(none)");
        free(ct);
        print_reply(r);
        fail_here(file, line);
    }
    free(ct);
    return o;
}

static json_object *field(json_object *o, const char *key, json_type type, const char *file,
                          int line)
{
    json_object *v = NULL;
    if (o == NULL || !json_object_is_type(o, json_type_object))
        sgtest__fail(o, file, line, "expected a JSON object with field \"%s\"", key);
    if (!json_object_object_get_ex(o, key, &v))
        sgtest__fail(o, file, line, "missing field \"%s\"", key);
    if (!json_object_is_type(v, type))
        sgtest__fail(o, file, line, "field \"%s\" is %s, expected %s", key,
                     json_type_to_name(json_object_get_type(v)), json_type_to_name(type));
    return v;
}

const char *sgtest__get_str(json_object *o, const char *key, const char *file, int line)
{
    return json_object_get_string(field(o, key, json_type_string, file, line));
}

int64_t sgtest__get_int(json_object *o, const char *key, const char *file, int line)
{
    return json_object_get_int64(field(o, key, json_type_int, file, line));
}

bool sgtest__get_bool(json_object *o, const char *key, const char *file, int line)
{
    return json_object_get_boolean(field(o, key, json_type_boolean, file, line));
}

double sgtest__get_double(json_object *o, const char *key, const char *file, int line)
{
    json_object *v = NULL;
    if (o == NULL || !json_object_object_get_ex(o, key, &v))
        sgtest__fail(o, file, line, "missing field \"%s\"", key);
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        sgtest__fail(o, file, line, "field \"%s\" is not a number", key);
    return json_object_get_double(v);
}

json_object *sgtest__get_obj(json_object *o, const char *key, json_type type, const char *file,
                             int line)
{
    return field(o, key, type, file, line);
}

json_object *sgtest__expect_error(const sgtest_reply_t *r, long status, const char *code,
                                  const char *file, int line)
{
    json_object *o = sgtest__expect_json(r, status, file, line);
    const char *detail = sgtest__get_str(o, "detail", file, line);
    const char *got = sgtest__get_str(o, "code", file, line);
    if (*detail == '\0')
        sgtest__fail(o, file, line, "error \"detail\" is empty");
    if (*got == '\0')
        sgtest__fail(o, file, line, "error \"code\" is empty");
    if (code != NULL && strcmp(got, code) != 0)
        sgtest__fail(o, file, line, "error code \"%s\", expected \"%s\"", got, code);
    return o;
}

char *sgtest_urlencode(const char *s)
{
    curl_ready();
    char *e = curl_easy_escape(NULL, s, 0);
    char *copy = e ? strdup(e) : NULL;
    curl_free(e);
    return copy;
}

bool sgtest_json_array_has_string(json_object *arr, const char *s)
{
    if (arr == NULL || !json_object_is_type(arr, json_type_array))
        return false;
    size_t n = json_object_array_length(arr);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(arr, i);
        if (json_object_is_type(e, json_type_string) && strcmp(json_object_get_string(e), s) == 0)
            return true;
    }
    return false;
}

/* ------------------------------------------------------------------------
 * Docker Engine API
 * ------------------------------------------------------------------------ */

static struct {
    pthread_once_t once;
    char socket[512]; /* unix socket path, or empty for tcp */
    char base[512];   /* "http://localhost" or "http://host:port" */
    char version[32]; /* "1.41"; empty when /_ping failed */
} docker = {.once = PTHREAD_ONCE_INIT};

static void on_docker_init(void)
{
    const char *dh = getenv("DOCKER_HOST");
    if (dh == NULL || *dh == '\0')
        dh = "unix:///var/run/docker.sock";
    if (strncmp(dh, "unix://", 7) == 0) {
        snprintf(docker.socket, sizeof(docker.socket), "%s", dh + 7);
        snprintf(docker.base, sizeof(docker.base), "http://localhost");
    } else if (strncmp(dh, "tcp://", 6) == 0) {
        snprintf(docker.base, sizeof(docker.base), "http://%s", dh + 6);
    } else {
        fprintf(stderr, "sgtest: DOCKER_HOST=%s: only unix:// and tcp:// are supported\n", dh);
        return;
    }
    char url[600];
    snprintf(url, sizeof(url), "%s/_ping", docker.base);
    http_req_t q = {.method = "GET", .url = url, .timeout_s = 10,
                    .unix_socket = docker.socket[0] ? docker.socket : NULL};
    sgtest_reply_t r;
    http_do(&q, &r);
    char *v = sgtest_reply_header(&r, "Api-Version");
    if (r.status == 200 && v != NULL && *v != '\0')
        snprintf(docker.version, sizeof(docker.version), "%s", v);
    else
        fprintf(stderr, "sgtest: Docker at %s does not answer /_ping (HTTP %ld, %s)\n", dh,
                r.status, r.error);
    free(v);
    sgtest_reply_free(&r);
}

int sgtest_docker_call(const char *method, const char *path, const char *json_body,
                       sgtest_reply_t *out)
{
    pthread_once(&docker.once, on_docker_init);
    if (docker.version[0] == '\0') {
        memset(out, 0, sizeof(*out));
        out->body = calloc(1, 1);
        out->headers = calloc(1, 1);
        snprintf(out->error, sizeof(out->error), "Docker is not reachable");
        return -1;
    }
    size_t ulen = strlen(docker.base) + strlen(docker.version) + strlen(path) + 8;
    char *url = malloc(ulen);
    if (url == NULL)
        return -1;
    snprintf(url, ulen, "%s/v%s%s", docker.base, docker.version, path);
    http_req_t q = {.method = method, .url = url, .body = json_body,
                    .len = json_body ? strlen(json_body) : 0,
                    .content_type = json_body ? "application/json" : NULL, .timeout_s = 60,
                    .unix_socket = docker.socket[0] ? docker.socket : NULL};
    int rc = http_do(&q, out);
    free(url);
    return rc;
}

json_object *sgtest_docker_list(const char *const *labels)
{
    json_object *filters = json_object_new_object();
    json_object *arr = json_object_new_array();
    for (size_t i = 0; labels != NULL && labels[i] != NULL; i++)
        json_object_array_add(arr, json_object_new_string(labels[i]));
    json_object_object_add(filters, "label", arr);
    char *enc = curl_easy_escape(NULL, json_object_to_json_string_ext(filters, JSON_C_TO_STRING_PLAIN), 0);
    json_object_put(filters);
    if (enc == NULL)
        return NULL;
    size_t plen = strlen(enc) + 64;
    char *path = malloc(plen);
    if (path == NULL) {
        curl_free(enc);
        return NULL;
    }
    snprintf(path, plen, "/containers/json?all=1&filters=%s", enc);
    curl_free(enc);
    sgtest_reply_t r;
    sgtest_docker_call("GET", path, NULL, &r);
    free(path);
    json_object *o = NULL;
    if (r.status == 200)
        o = json_tokener_parse(r.body);
    else
        fprintf(stderr, "sgtest: docker list failed: HTTP %ld %s %s\n", r.status, r.error, r.body);
    sgtest_reply_free(&r);
    if (o != NULL && !json_object_is_type(o, json_type_array)) {
        json_object_put(o);
        o = NULL;
    }
    return o;
}

static void proxy_label(char *buf, size_t len, const char *proxy_id)
{
    snprintf(buf, len, "sandgate.proxy=%s", proxy_id);
}

int sgtest_docker_count(const char *proxy_id)
{
    char l[192];
    proxy_label(l, sizeof(l), proxy_id);
    const char *labels[] = {l, NULL};
    json_object *a = sgtest_docker_list(labels);
    if (a == NULL)
        return -1;
    int n = (int)json_object_array_length(a);
    json_object_put(a);
    return n;
}

char *sgtest_docker_session_container(const char *proxy_id, const char *session_id)
{
    char l1[192], l2[192];
    proxy_label(l1, sizeof(l1), proxy_id);
    snprintf(l2, sizeof(l2), "sandgate.session=%s", session_id);
    const char *labels[] = {l1, l2, NULL};
    json_object *a = sgtest_docker_list(labels);
    char *id = NULL;
    json_object *v;
    if (a != NULL && json_object_array_length(a) == 1 &&
        json_object_object_get_ex(json_object_array_get_idx(a, 0), "Id", &v))
        id = strdup(json_object_get_string(v));
    json_object_put(a);
    return id;
}

json_object *sgtest_docker_inspect(const char *id, long *status)
{
    char *esc = curl_easy_escape(NULL, id, 0);
    if (esc == NULL)
        return NULL;
    char path[512];
    snprintf(path, sizeof(path), "/containers/%s/json", esc);
    curl_free(esc);
    sgtest_reply_t r;
    sgtest_docker_call("GET", path, NULL, &r);
    if (status != NULL)
        *status = r.status;
    json_object *o = r.status == 200 ? json_tokener_parse(r.body) : NULL;
    sgtest_reply_free(&r);
    return o;
}

int sgtest_docker_exists(const char *id)
{
    long st = 0;
    json_object *o = sgtest_docker_inspect(id, &st);
    json_object_put(o);
    if (st == 200)
        return 1;
    if (st == 404)
        return 0;
    return -1;
}

int sgtest_docker_wait_gone(const char *id, double timeout_s, double *waited)
{
    double t0 = sgtest_now();
    for (;;) {
        int e = sgtest_docker_exists(id);
        if (e == 0) {
            if (waited != NULL)
                *waited = sgtest_now() - t0;
            return 0;
        }
        if (e < 0 || sgtest_now() - t0 > timeout_s)
            return -1;
        pause_poll();
    }
}

int sgtest_docker_wait_count(const char *const *labels, int want, double timeout_s)
{
    double deadline = sgtest_now() + timeout_s;
    for (;;) {
        json_object *a = sgtest_docker_list(labels);
        int n = a != NULL ? (int)json_object_array_length(a) : -1;
        json_object_put(a);
        if (n == want || sgtest_now() > deadline)
            return n;
        pause_poll();
    }
}

char **sgtest_docker_ids(const char *const *labels)
{
    json_object *a = sgtest_docker_list(labels);
    if (a == NULL)
        return NULL;
    size_t n = json_object_array_length(a);
    char **v = calloc(n + 1, sizeof(*v));
    size_t k = 0;
    for (size_t i = 0; v != NULL && i < n; i++) {
        json_object *id;
        if (json_object_object_get_ex(json_object_array_get_idx(a, i), "Id", &id))
            v[k++] = strdup(json_object_get_string(id));
    }
    json_object_put(a);
    return v;
}

/* true when a process of container cid has `needle` in its command line,
 * as the container's own kernel lists them (a docker exec reading /proc:
 * GET /top asks the runtime, and runsc's answer is not the sandbox's). */
bool sgtest_docker_container_runs(const char *cid, const char *needle)
{
    char path[256];
    pathf(path, sizeof(path), "/containers/%s/exec", cid);
    sgtest_reply_t r;
    bool found = false;
    const char *cmd = "{\"AttachStdout\":true,\"AttachStderr\":false,"
                      "\"Cmd\":[\"sh\",\"-c\",\"cat /proc/[0-9]*/cmdline | tr '\\\\000' ' '\"]}";
    if (sgtest_docker_call("POST", path, cmd, &r) != 0 || r.status != 201) {
        sgtest_reply_free(&r);
        return false;
    }
    json_object *o = json_tokener_parse(r.body), *id = NULL;
    sgtest_reply_free(&r);
    if (o != NULL && json_object_object_get_ex(o, "Id", &id)) {
        pathf(path, sizeof(path), "/exec/%s/start", json_object_get_string(id));
        if (sgtest_docker_call("POST", path, "{\"Detach\":false,\"Tty\":false}", &r) == 0 && r.status == 200)
            found = r.body != NULL && memmem(r.body, r.body_len, needle, strlen(needle)) != NULL;
        sgtest_reply_free(&r);
    }
    json_object_put(o);
    return found;
}

void sgtest_strv_free(char **v)
{
    for (size_t i = 0; v != NULL && v[i] != NULL; i++)
        free(v[i]);
    free(v);
}

bool sgtest_strv_has(char *const *v, const char *s)
{
    for (size_t i = 0; v != NULL && v[i] != NULL; i++) {
        if (strcmp(v[i], s) == 0)
            return true;
    }
    return false;
}

size_t sgtest_strv_len(char *const *v)
{
    size_t n = 0;
    while (v != NULL && v[n] != NULL)
        n++;
    return n;
}

json_object *sgtest_jpath(json_object *o, const char *dotted)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", dotted);
    json_object *cur = o;
    char *save = NULL;
    for (char *k = strtok_r(buf, ".", &save); k != NULL; k = strtok_r(NULL, ".", &save)) {
        if (cur == NULL || !json_object_object_get_ex(cur, k, &cur))
            return NULL;
    }
    return cur;
}

static bool strv_json_has_prefix(json_object *arr, const char *prefix)
{
    if (arr == NULL || !json_object_is_type(arr, json_type_array))
        return false;
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        const char *s = json_object_get_string(json_object_array_get_idx(arr, i));
        if (s != NULL && strncmp(s, prefix, strlen(prefix)) == 0)
            return true;
    }
    return false;
}

static int64_t jint(json_object *c, const char *dotted)
{
    json_object *v = sgtest_jpath(c, dotted);
    return v != NULL && json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : 0;
}

void sgtest__assert_hardened(json_object *c, const char *file, int line)
{
    json_object *hc = sgtest_jpath(c, "HostConfig");
    json_object *v;
    if (hc == NULL)
        sgtest__fail(c, file, line, "no HostConfig in the inspected container");
    v = sgtest_jpath(c, "HostConfig.NetworkMode");
    if (v == NULL || strcmp(json_object_get_string(v), "none") != 0)
        sgtest__fail(hc, file, line, "HostConfig.NetworkMode must be \"none\"");
    if (!sgtest_json_array_has_string(sgtest_jpath(c, "HostConfig.CapDrop"), "ALL"))
        sgtest__fail(hc, file, line, "HostConfig.CapDrop must hold \"ALL\"");
    if (!strv_json_has_prefix(sgtest_jpath(c, "HostConfig.SecurityOpt"), "no-new-privileges"))
        sgtest__fail(hc, file, line, "HostConfig.SecurityOpt must hold no-new-privileges");
    v = sgtest_jpath(c, "HostConfig.ReadonlyRootfs");
    if (v == NULL || !json_object_get_boolean(v))
        sgtest__fail(hc, file, line, "HostConfig.ReadonlyRootfs must be true");
    v = sgtest_jpath(c, "HostConfig.Privileged");
    if (v != NULL && json_object_get_boolean(v))
        sgtest__fail(hc, file, line, "HostConfig.Privileged must be false");
    int64_t mem = jint(c, "HostConfig.Memory");
    if (mem <= 0 || jint(c, "HostConfig.MemorySwap") != mem)
        sgtest__fail(hc, file, line, "HostConfig.Memory == MemorySwap > 0 (no swap)");
    if (jint(c, "HostConfig.PidsLimit") <= 0)
        sgtest__fail(hc, file, line, "HostConfig.PidsLimit must be > 0");
    if (jint(c, "HostConfig.NanoCpus") <= 0)
        sgtest__fail(hc, file, line, "HostConfig.NanoCpus must be > 0");
    v = sgtest_jpath(c, "Config.User");
    const char *user = v ? json_object_get_string(v) : "";
    if (*user == '\0' || strcmp(user, "root") == 0 || strcmp(user, "0") == 0 ||
        strncmp(user, "0:", 2) == 0 || strncmp(user, "root:", 5) == 0)
        sgtest__fail(sgtest_jpath(c, "Config"), file, line,
                     "Config.User \"%s\" must name a non-root user", user);
}

int sgtest_docker_remove_all(const char *proxy_id)
{
    char l[192];
    proxy_label(l, sizeof(l), proxy_id);
    const char *labels[] = {l, NULL};
    json_object *a = sgtest_docker_list(labels);
    if (a == NULL)
        return -1;
    int removed = 0, failed = 0;
    size_t n = json_object_array_length(a);
    for (size_t i = 0; i < n; i++) {
        json_object *v;
        if (!json_object_object_get_ex(json_object_array_get_idx(a, i), "Id", &v))
            continue;
        char path[256];
        snprintf(path, sizeof(path), "/containers/%s?force=1&v=1", json_object_get_string(v));
        sgtest_reply_t r;
        sgtest_docker_call("DELETE", path, NULL, &r);
        if (r.status == 204)
            removed++;
        else if (r.status != 404) { /* 404: it went away meanwhile */
            failed++;
            fprintf(stderr, "sgtest: removing container %s: HTTP %ld %s %s\n",
                    json_object_get_string(v), r.status, r.error, r.body);
        }
        sgtest_reply_free(&r);
    }
    json_object_put(a);
    return failed ? -1 : removed;
}

/* ------------------------------------------------------------------------
 * Parallel requests
 * ------------------------------------------------------------------------ */

typedef struct {
    struct sgtest_batch *batch;
    sgtest_par_req_t *req;
    sent_watch_t watch;
} par_slot_t;

struct sgtest_batch {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    size_t n, started, sent;
    pthread_t *threads;
    par_slot_t *slots;
};

static void on_sent(void *ctx)
{
    par_slot_t *s = ctx;
    pthread_mutex_lock(&s->batch->lock);
    s->req->sent_at = sgtest_now();
    s->batch->sent++;
    pthread_cond_broadcast(&s->batch->cond);
    pthread_mutex_unlock(&s->batch->lock);
}

static void *on_thread(void *ud)
{
    par_slot_t *s = ud;
    sgtest_par_req_t *q = s->req;
    http_req_t hq = {.method = q->method, .url = q->url, .body = q->body, .len = q->body_len,
                     .content_type = q->content_type, .timeout_s = q->timeout_s,
                     .watch = &s->watch};
    q->started = sgtest_now();
    q->rc = http_do(&hq, &q->reply);
    q->finished = sgtest_now();
    watch_fire(&s->watch); /* a failed transfer must not leave waiters hanging */
    return NULL;
}

sgtest_batch_t *sgtest_batch_start(sgtest_par_req_t *reqs, size_t n)
{
    curl_ready();
    sgtest_batch_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return NULL;
    b->threads = calloc(n ? n : 1, sizeof(*b->threads));
    b->slots = calloc(n ? n : 1, sizeof(*b->slots));
    if (b->threads == NULL || b->slots == NULL) {
        free(b->threads);
        free(b->slots);
        free(b);
        return NULL;
    }
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->cond, NULL);
    b->n = n;
    for (size_t i = 0; i < n; i++) {
        reqs[i].sent_at = 0;
        b->slots[i] = (par_slot_t){.batch = b, .req = &reqs[i],
                                   .watch = {.on_sent = on_sent, .ctx = &b->slots[i]}};
    }
    for (size_t i = 0; i < n; i++) {
        if (pthread_create(&b->threads[i], NULL, on_thread, &b->slots[i]) != 0) {
            fprintf(stderr, "sgtest: pthread_create: %s\n", strerror(errno));
            sgtest_batch_join(b);
            return NULL;
        }
        b->started++;
    }
    return b;
}

int sgtest_batch_wait_sent(sgtest_batch_t *b, double timeout_s)
{
    double deadline = sgtest_now() + timeout_s;
    int rc = 0;
    pthread_mutex_lock(&b->lock);
    while (b->sent < b->started) {
        double left = deadline - sgtest_now();
        if (left <= 0) {
            rc = -1;
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double when = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + (left < 0.1 ? left : 0.1);
        ts.tv_sec = (time_t)when;
        ts.tv_nsec = (long)((when - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&b->cond, &b->lock, &ts);
    }
    pthread_mutex_unlock(&b->lock);
    return rc;
}

void sgtest_batch_join(sgtest_batch_t *b)
{
    if (b == NULL)
        return;
    for (size_t i = 0; i < b->started; i++)
        pthread_join(b->threads[i], NULL);
    pthread_cond_destroy(&b->cond);
    pthread_mutex_destroy(&b->lock);
    free(b->threads);
    free(b->slots);
    free(b);
}

int sgtest_parallel(sgtest_par_req_t *reqs, size_t n)
{
    sgtest_batch_t *b = sgtest_batch_start(reqs, n);
    if (b == NULL)
        return -1;
    sgtest_batch_join(b);
    return 0;
}

void pathf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < len);
}

void sgtest__check_result_shape(json_object *r, const char *file, int line)
{
    sgtest__get_str(r, "stdout", file, line);
    sgtest__get_str(r, "stderr", file, line);
    int64_t exit_code = sgtest__get_int(r, "exit_code", file, line);
    double t = sgtest__get_double(r, "execution_time", file, line);
    bool success = sgtest__get_bool(r, "success", file, line);
    bool timed_out = sgtest__get_bool(r, "timed_out", file, line);
    bool truncated = sgtest__get_bool(r, "truncated", file, line);
    const char *reason = sgtest__get_str(r, "reason", file, line);
    const char *st = sgtest__get_str(r, "state", file, line);
    sgtest__get_str(r, "stage", file, line);
    if (t < 0)
        sgtest__check_failed(r, file, line, "execution_time >= 0", "execution_time is negative");
    if (sgtest__get_double(r, "wall_time", file, line) < 0)
        sgtest__check_failed(r, file, line, "wall_time >= 0", "wall_time is negative");
    if (success != (exit_code == 0 && !timed_out && !truncated && strcmp(reason, "exited") == 0))
        sgtest__check_failed(r, file, line, "success", "success must be exit_code == 0 and not cut short");
    if (timed_out != (strcmp(reason, "timeout") == 0))
        sgtest__check_failed(r, file, line, "timed_out", "timed_out must match reason \"timeout\"");
    if (strcmp(st, "kept") != 0 && strcmp(st, "new") != 0 && strcmp(st, "lost") != 0 && strcmp(st, "none") != 0)
        sgtest__check_failed(r, file, line, "state", "state must be one of kept, new, lost, none");
}

/* ---- the harness of a suite with a proxy of its own ---- */

void sgtest_close_all_sessions(const sgtest_proxy_t *p)
{
    sgtest_reply_t r;
    sgtest_call(p, "GET", "/sessions", NULL, &r);
    json_object *o = r.status == 200 ? json_tokener_parse(r.body) : NULL;
    sgtest_reply_free(&r);
    json_object *arr = NULL;
    if (o != NULL && json_object_object_get_ex(o, "sessions", &arr) && json_object_is_type(arr, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(arr); i++) {
            char path[256];
            snprintf(path, sizeof(path), "/sessions/%s", json_object_get_string(json_object_array_get_idx(arr, i)));
            sgtest_reply_t d;
            sgtest_call(p, "DELETE", path, NULL, &d);
            if (d.status != 200)
                fprintf(stderr, "teardown: DELETE %s: HTTP %ld %s\n", path, d.status, d.body);
            sgtest_reply_free(&d);
        }
    }
    json_object_put(o);
}

int sgtest_proxy_check_alive(sgtest_proxy_t **pp, sgtest_proxy_t *(*restart)(void))
{
    if (*pp != NULL && sgtest_proxy_alive(*pp))
        return 0;
    if (*pp != NULL) {
        fprintf(stderr, "the proxy died during this test:\n");
        sgtest_proxy_print_log(*pp, 60);
        sgtest_proxy_kill9(*pp);
    }
    *pp = restart();
    return -1;
}

int sgtest_proxy_finish(sgtest_proxy_t **pp, const char *proxy_id, double removal_s)
{
    int rc = 0;
    if (*pp != NULL) {
        sgtest_close_all_sessions(*pp);
        char l[192];
        snprintf(l, sizeof(l), "sandgate.proxy=%s", proxy_id);
        const char *labels[] = {l, NULL};
        int left = sgtest_docker_wait_count(labels, 0, removal_s);
        if (left != 0) {
            fprintf(stderr, "teardown: %d container(s) labelled %s remain after every session was closed\n", left,
                    l);
            sgtest_proxy_print_log(*pp, 40);
            rc = -1;
        }
        int st = sgtest_proxy_stop(*pp);
        *pp = NULL;
        if (st != 0) {
            fprintf(stderr, "teardown: proxy %s did not exit with status 0 on SIGTERM (wait status %d)\n", proxy_id,
                    st);
            rc = -1;
        }
    }
    if (proxy_id != NULL) {
        int removed = sgtest_docker_remove_all(proxy_id);
        if (removed != 0) {
            fprintf(stderr, "teardown: %d leftover container(s) of %s force-removed\n", removed, proxy_id);
            rc = -1;
        }
    }
    return rc;
}

/* ---- the proxy's session API ---- */

char *sgtest_create_session(const sgtest_proxy_t *p, const char *lang, json_object *extra, json_object **reply_out)
{
    json_object *body = extra ? extra : json_object_new_object();
    json_object_object_add(body, "lang", json_object_new_string(lang));
    json_object_object_add(body, "keep_template", json_object_new_boolean(0));
    sgtest_reply_t r;
    sgtest_call_json(p, "POST", "/sessions", body, 0, &r);
    json_object_put(body);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    const char *id = SG_STR(o, "session_id");
    SG_CHECK(*id != '\0', o, "empty session_id");
    SG_CHECK(strcmp(SG_STR(o, "status"), "active") == 0, o, "new session is not active");
    char *copy = strdup(id);
    if (reply_out != NULL)
        *reply_out = o;
    else
        json_object_put(o);
    return copy;
}

json_object *sgtest_libs_array(const char *const *libs)
{
    json_object *a = json_object_new_array();
    for (size_t i = 0; libs != NULL && libs[i] != NULL; i++)
        json_object_array_add(a, json_object_new_string(libs[i]));
    return a;
}

json_object *sgtest_post_result(const sgtest_proxy_t *p, const char *path, json_object *body, double *seconds)
{
    sgtest_reply_t r;
    sgtest_call_json(p, "POST", path, body, 0, &r);
    json_object_put(body);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    if (seconds != NULL)
        *seconds = r.seconds;
    sgtest_reply_free(&r);
    SG_CHECK_RESULT_SHAPE(o);
    return o;
}

/* The body of an execute: `field` = text, plus libraries and timeout. */
static json_object *run_body(const char *field, const char *text, const char *const *libs, int timeout)
{
    json_object *b = json_object_new_object();
    json_object_object_add(b, field, json_object_new_string(text));
    if (libs != NULL)
        json_object_object_add(b, "libraries", sgtest_libs_array(libs));
    if (timeout > 0)
        json_object_object_add(b, "timeout", json_object_new_int(timeout));
    return b;
}

json_object *sgtest_run_code(const sgtest_proxy_t *p, const char *sid, const char *code, const char *const *libs,
                             int timeout, double *seconds)
{
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s/execute", sid);
    return sgtest_post_result(p, path, run_body("code", code, libs, timeout), seconds);
}

json_object *sgtest_run_cmd(const sgtest_proxy_t *p, const char *sid, const char *cmd, int timeout, double *seconds)
{
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s/commands", sid);
    return sgtest_post_result(p, path, run_body("command", cmd, NULL, timeout), seconds);
}

json_object *sgtest_run_ephemeral(const sgtest_proxy_t *p, const char *lang, const char *code,
                                  const char *const *libs, int timeout, double *seconds)
{
    json_object *b = run_body("code", code, libs, timeout);
    json_object_object_add(b, "lang", json_object_new_string(lang));
    return sgtest_post_result(p, "/execute", b, seconds);
}

void sgtest_close_session(const sgtest_proxy_t *p, const char *proxy_id, const char *sid, const char *cid,
                          double removal_s)
{
    char *own = cid != NULL ? strdup(cid) : sgtest_docker_session_container(proxy_id, sid);
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s", sid);
    sgtest_reply_t r;
    sgtest_call(p, "DELETE", path, NULL, &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    SG_CHECK(strcmp(SG_STR(o, "status"), "closed") == 0, o, "DELETE did not answer closed");
    json_object_put(o);
    SG_CHECK(own != NULL, NULL, "session %s had no container of its own", sid);
    SG_CHECK(sgtest_docker_wait_gone(own, removal_s, NULL) == 0, NULL,
             "container %s of closed session %s still exists %.0f s after DELETE", own, sid, removal_s);
    free(own);
}

int sgtest_docker_network_remove(const char *name)
{
    char *enc = curl_easy_escape(NULL, name, 0);
    char path[512];
    sgtest_reply_t r;
    if (enc == NULL)
        return -1;
    snprintf(path, sizeof(path), "/networks/%s", enc);
    curl_free(enc);
    sgtest_docker_call("DELETE", path, NULL, &r);
    int rc = r.status == 204 || r.status == 200 || r.status == 404 ? 0 : -1;
    if (rc != 0)
        fprintf(stderr, "sgtest: removing network %s: HTTP %ld %s %s\n", name, r.status, r.error, r.body);
    sgtest_reply_free(&r);
    return rc;
}
