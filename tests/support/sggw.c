/*
 * sggw.c — the gateway tier's servers (see sggw.h): a private
 * redis-server, sandgate-gateway processes, and the sandgate-admin command
 * line. They stand on the core's servers (sgtest_int.h).
 */
#include "sggw.h"
#include "sgtest_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#define GW_START_DEADLINE_S 30.0
#define REDIS_START_DEADLINE_S 10.0
#define ADMIN_DEADLINE_S 30.0
#define POLL_US 20000

/* ------------------------------------------------------------------------
 * redis-server
 * ------------------------------------------------------------------------ */

struct sggw_redis {
    sgtest__server_t s; /* url "redis://127.0.0.1:<port>" */
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
    snprintf(port, sizeof(port), "%d", r->s.port);
    char *const argv[] = {"redis-server", "--port", port,    "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no",     "--dir", r->s.dir, NULL};
    memset(&r->s.child, 0, sizeof(r->s.child));
    r->s.paused = false;
    r->s.child.pid = sgtest__spawn(argv, NULL, r->s.log, -1, -1, r->s.dir, true);
    if (r->s.child.pid < 0) {
        fprintf(stderr, "sggw: fork: %s\n", strerror(errno));
        return -1;
    }
    double deadline = sgtest_now() + REDIS_START_DEADLINE_S;
    while (sgtest_now() < deadline) {
        if (sgtest_child_reap(&r->s.child, WNOHANG)) {
            char why[96];
            sgtest_describe_exit(r->s.child.wstatus, why, sizeof(why));
            fprintf(stderr, "sggw: redis-server on port %d exited at once (%s); is it installed?\n", r->s.port, why);
            sggw_redis_print_log(r, 30);
            return -1;
        }
        if (redis_ping(r->s.port))
            return 0;
        usleep(POLL_US);
    }
    fprintf(stderr, "sggw: redis-server does not answer PING on port %d within %.0f s\n", r->s.port,
            REDIS_START_DEADLINE_S);
    sggw_redis_print_log(r, 30);
    sgtest__server_kill(&r->s);
    return -1;
}

sggw_redis_t *sggw_redis_start(void)
{
    sggw_redis_t *r = sgtest__server_new(sizeof(*r), SGTEST__REDIS, "redis-server", "sggw-redis", "redis.log", NULL);
    if (r == NULL)
        return NULL;
    for (int attempt = 0; attempt < 3; attempt++) {
        r->s.port = sgtest_free_port();
        if (r->s.port <= 0)
            goto Error;
        snprintf(r->s.url, sizeof(r->s.url), "redis://127.0.0.1:%d", r->s.port);
        if (redis_spawn(r) == 0) {
            sgtest__live_add(&r->s);
            return r;
        }
    }
Error:
    return sgtest__server_fail(&r->s);
}

void sggw_redis_kill(sggw_redis_t *r)
{
    if (r != NULL)
        sgtest__server_kill(&r->s);
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

/* SIGSTOP (pause) or SIGCONT (resume). */
static int redis_signal(sggw_redis_t *r, int sig)
{
    if (r == NULL || r->s.child.reaped || kill(r->s.child.pid, sig) != 0)
        return -1;
    r->s.paused = sig == SIGSTOP;
    return 0;
}

int sggw_redis_pause(sggw_redis_t *r)
{
    return redis_signal(r, SIGSTOP);
}

int sggw_redis_resume(sggw_redis_t *r)
{
    return redis_signal(r, SIGCONT);
}

bool sggw_redis_running(sggw_redis_t *r)
{
    return r != NULL && !sgtest_child_reap(&r->s.child, WNOHANG);
}

void sggw_redis_stop(sggw_redis_t *r)
{
    if (r != NULL)
        sgtest__server_end(&r->s, false);
}

const char *sggw_redis_url(const sggw_redis_t *r)
{
    return r->s.url;
}

int sggw_redis_port(const sggw_redis_t *r)
{
    return r->s.port;
}

void sggw_redis_print_log(sggw_redis_t *r, int lines)
{
    if (r != NULL)
        sgtest__server_print_log(&r->s, lines);
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

static char *redis_vcmd(const sggw_redis_t *r, int *ok, const char *fmt, va_list ap)
{
    int okv = 0;
    char *out = NULL;
    redisContext *c = redis_connect(r->s.port);
    if (c != NULL) {
        redisReply *rep = redisvCommand(c, fmt, ap);
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

char *sggw_redis_cmd(const sggw_redis_t *r, int *ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *out = redis_vcmd(r, ok, fmt, ap);
    va_end(ap);
    return out;
}

char *sggw_redis_poll(const sggw_redis_t *r, double timeout_s, const char *fmt, ...)
{
    double deadline = sgtest_now() + timeout_s;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        char *v = redis_vcmd(r, NULL, fmt, ap);
        va_end(ap);
        if (v != NULL || sgtest_now() >= deadline)
            return v;
        usleep(10000);
    }
}

/* ------------------------------------------------------------------------
 * sandgate-gateway
 * ------------------------------------------------------------------------ */

struct sggw_gateway {
    sgtest__server_t s; /* first: the registry holds &g->s */
    char *data_dir;     /* malloc'd copy */
    bool own_data;      /* remove data_dir at stop */
    char admin_token[80];
};

static void gateway_free(sgtest__server_t *s)
{
    sggw_gateway_t *g = (sggw_gateway_t *)s; /* its first member */
    sgtest__server_free_dir(&g->s);
    if (g->own_data && g->data_dir != NULL)
        sggw_rmtree(g->data_dir);
    free(g->data_dir);
    free(g);
}

sggw_gateway_t *sggw_gateway_start(const sggw_opts_t *o)
{
    const char *bin = sgtest__bin("SANDGATE_GATEWAY_BIN");
    if (bin == NULL)
        return NULL;
    if (o == NULL || o->proxy_url == NULL) {
        fprintf(stderr, "sggw: sggw_gateway_start needs a proxy URL\n");
        return NULL;
    }
    sggw_gateway_t *g =
        sgtest__server_new(sizeof(*g), SGTEST__GATEWAY, "gateway", "sggw-gateway", "gateway.log", gateway_free);
    if (g == NULL)
        return NULL;
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
        sgtest__random_hex(g->admin_token, 24);
    g->s.port = o->port > 0 ? o->port : sgtest_free_port();
    if (g->s.port <= 0)
        goto Error;
    snprintf(g->s.url, sizeof(g->s.url), "http://127.0.0.1:%d", g->s.port);

    char port_kv[32], proxy_kv[600], redis_kv[600], data_kv[700], admin_kv[160];
    snprintf(port_kv, sizeof(port_kv), "PORT=%d", g->s.port);
    snprintf(proxy_kv, sizeof(proxy_kv), "SANDGATE_PROXY_URL=%s", o->proxy_url);
    snprintf(redis_kv, sizeof(redis_kv), "SANDGATE_REDIS_URL=%s", o->redis_url != NULL ? o->redis_url : "");
    snprintf(data_kv, sizeof(data_kv), "SANDGATE_DATA_DIR=%s", g->data_dir);
    snprintf(admin_kv, sizeof(admin_kv), "SANDGATE_ADMIN_TOKEN=%s", g->admin_token);
    size_t nextra = 0;
    while (o->env != NULL && o->env[nextra] != NULL)
        nextra++;
    /* the gateway's default number of DB threads (2) runs in every test */
    const char *defaults[] = {
        "SANDGATE_REAPER_INTERVAL_MS=200", "HOST=127.0.0.1", port_kv, proxy_kv, redis_kv, data_kv, admin_kv};
    size_t ndef = sizeof(defaults) / sizeof(defaults[0]);
    const char **set = calloc(ndef + nextra, sizeof(*set));
    if (set == NULL)
        goto Error;
    memcpy(set, defaults, sizeof(defaults));
    for (size_t i = 0; i < nextra; i++)
        set[ndef + i] = o->env[i];
    return sgtest__server_exec(&g->s, bin, set, ndef + nextra, GW_START_DEADLINE_S);

Error:
    return sgtest__server_fail(&g->s);
}

int sggw_gateway_stop(sggw_gateway_t *g)
{
    return g != NULL ? sgtest__server_end(&g->s, true) : 0;
}

/* The admin API lists no live session. */
static bool no_live_session(void *g)
{
    sgtest_reply_t r;
    sggw_admin_call(g, "GET", "/admin/sessions", NULL, &r);
    json_object *o = r.status == 200 ? json_tokener_parse(r.body) : NULL, *a = NULL;
    bool empty = o != NULL && json_object_object_get_ex(o, "sessions", &a) && json_object_is_type(a, json_type_array) &&
                 json_object_array_length(a) == 0;
    json_object_put(o);
    sgtest_reply_free(&r);
    return empty;
}

int sggw_gateway_quiesce(sggw_gateway_t *g)
{
    return sgtest_poll(no_live_session, g, 5, 0.02);
}

void sggw_gateway_kill9(sggw_gateway_t *g)
{
    if (g != NULL)
        sgtest__server_end(&g->s, false);
}

bool sggw_gateway_alive(sggw_gateway_t *g)
{
    return g != NULL && !sgtest_child_reap(&g->s.child, WNOHANG);
}

pid_t sggw_gateway_pid(const sggw_gateway_t *g)
{
    return g->s.child.pid;
}

int sggw_gateway_port(const sggw_gateway_t *g)
{
    return g->s.port;
}

const char *sggw_gateway_url(const sggw_gateway_t *g)
{
    return g->s.url;
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
    if (g != NULL)
        sgtest__server_print_log(&g->s, lines);
}

bool sggw_gateway_log_has(sggw_gateway_t *g, const char *needle)
{
    char *s = sgtest__slurp(g->s.log, NULL);
    bool has = s != NULL && strstr(s, needle) != NULL;
    free(s);
    return has;
}

void sggw_print_logs(int lines)
{
    sgtest__live_print(SGTEST__GATEWAY | SGTEST__REDIS, lines);
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
    c.pid = sgtest__spawn(argv, NULL, NULL, po[1], pe[1], NULL, false);
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
