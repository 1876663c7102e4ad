/*
 * bench_overhead.c — `sandgate-bench --overhead`: what the public tier costs
 * over the proxy, measured side by side in one run (issue 15):
 *   - an execute in a session, proxy and gateway alternating request by
 *     request (a loaded machine slows both alike): p50 / p99 and the
 *     gateway's overhead;
 *   - throughput with -c clients through each, client i of each target
 *     executing in the same session i (made through the gateway: the
 *     targets differ in the path alone, not in their sandboxes): the
 *     targets take turns of 1 s, 5 rounds, in an
 *     order that rotates (phase_throughput_turns), after the proxy's pool
 *     has refilled from the clients' creates; the gateway's as a share of
 *     the proxy's. One target after the other for 5 s each, as before,
 *     left the pool's refill and the machine's drift to whichever came
 *     later (the same binaries read 58 % to 70 %);
 *   - in those turns, what each part of the stack spent on the CPU per
 *     execution (bench_cpu.c): the machine, the proxy and the gateway
 *     (their /metrics), Redis (with --redis), the relay and this program;
 *     the machine being what limits them, the share of the proxy's
 *     throughput the gateway's CPU allows, and what 85 % would need;
 *   - with --relay, both of those through sandgate-relay as well (h2o's
 *     own reverse proxy, no logic: one more HTTP hop and nothing else),
 *     taking its turn between the proxy and the gateway: the floor of any
 *     tier in front of the proxy on this machine;
 *   - time to interactive (create a session, get its first result)
 *     through the proxy and the gateway, alternating: 100 iterations each
 *     sequential (200 ms apart, so that the proxy's pool refills as between
 *     users), then 20 bursts of 5 at once each (1 s apart): median / p95 /
 *     p99 and the success rate, the proxy's as the gateway's floor;
 *   - GET /sessions of an empty tenant (--empty-token) with -c clients for
 *     5 s: requests per second, twice: from this program's curl clients,
 *     then from raw keep-alive clients (a fixed request on a socket, the
 *     reply's head and Content-Length parsed; what wrk does). On two cores
 *     the curl clients take about as much CPU as the gateway they measure,
 *     so the raw figure is the one held against the target.
 */
#include "bench.h"

#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TTI_RUNS 100
#define TTI_BURST 5      /* below the pool's size (the README's runs: 8) */
#define TTI_PAUSE_MS 200 /* between sequential runs: the pool refills, as between users */
#define TTI_BURST_PAUSE_MS 1000
#define TP_ROUNDS 5       /* throughput: rounds, in each of which every target runs once */
#define TP_TURN_MS 1000.0 /* one target's turn */

/* Create + first result, timed; the session is deleted after (untimed). */
static int tti_once(hc_t *c, const target_t *t, row_t *r)
{
    char id[64], err[256], path[128];
    double t0 = now_ms();

    if (sess_create(c, t, id, err, sizeof(err)) != 0) {
        row_err(r, "create: %s", err);
        return -1;
    }
    snprintf(path, sizeof(path), "/sessions/%s/execute", id);
    if (exec_check(c, path, opt.exec_body, NULL, err, sizeof(err)) != 0) {
        row_err(r, "first execute: %s", err);
    } else {
        row_ok(r, now_ms() - t0);
    }
    if (sess_delete(c, t, id, err, sizeof(err)) != 0)
        fprintf(stderr, "sandgate-bench: delete after time to interactive: %s\n", err);
    return 0;
}

typedef struct {
    target_t t;
    row_t *row;
} tti_ctx_t;

static void tti_burst_fn(par_t *p, hc_t *c, long i)
{
    tti_ctx_t *x = p->ud;
    tti_once(c, &x->t, x->row);
}

static row_t *tti_seq[2], *tti_burst[2]; /* the proxy's, the gateway's */

/* Time to interactive through the proxy and the gateway, alternating run
 * by run (the first of each pair alternating too), so that both meet the
 * same pool and the same refills: the proxy's figure is the gateway's
 * floor from the same run. */
static void phase_tti(const target_t *px, const target_t *gw)
{
    hc_t c[2];
    const target_t *t[2] = {px, gw};
    int ok[2];

    for (int k = 0; k < 2; k++) {
        tti_seq[k] = row_new(t[k]->name, "time to interactive, sequential");
        tti_burst[k] = row_new(t[k]->name, "time to interactive, bursts of %d", TTI_BURST);
    }
    fprintf(stderr, "sandgate-bench: proxy and gateway: time to interactive, %d sequential, %d bursts of %d each\n",
            TTI_RUNS, TTI_RUNS / TTI_BURST, TTI_BURST);
    for (int k = 0; k < 2; k++) {
        ok[k] = hc_init(&c[k], t[k]->base, NULL, t[k]->token) == 0;
        if (!ok[k])
            tti_seq[k]->failed = tti_burst[k]->failed = 1;
    }
    for (int i = 0; i < TTI_RUNS && !g_stop; i++) {
        for (int j = 0; j < 2; j++) {
            int k = (i + j) % 2;
            if (ok[k])
                tti_once(&c[k], t[k], tti_seq[k]);
            sleep_ms(TTI_PAUSE_MS);
        }
    }
    for (int k = 0; k < 2; k++)
        if (ok[k])
            hc_cleanup(&c[k]);
    for (int b = 0; b < TTI_RUNS / TTI_BURST && !g_stop; b++) {
        for (int j = 0; j < 2; j++) {
            int k = (b + j) % 2;
            tti_ctx_t x = {*t[k], tti_burst[k]};
            par_t p = {.fn = tti_burst_fn, .ud = &x, .count = TTI_BURST, .base = t[k]->base, .token = t[k]->token};
            par_run(&p, TTI_BURST);
            sleep_ms(TTI_BURST_PAUSE_MS);
        }
    }
    for (int k = 0; k < 2; k++) {
        row_note(tti_seq[k], "success %zu/%d, %d ms apart", tti_seq[k]->n, TTI_RUNS, TTI_PAUSE_MS);
        row_note(tti_burst[k], "success %zu/%d, bursts %d ms apart", tti_burst[k]->n, TTI_RUNS, TTI_BURST_PAUSE_MS);
    }
}

#define BIG_RUNS 30 /* timed executes of a 1 MB result, each target */

/* Execute latency, the targets alternating request by request (proxy,
 * the bare relay when there is one, gateway): of opt.exec_body opt.n
 * times, or (big) of a 1 MB result BIG_RUNS times. */
static void phase_exec_alternating(const target_t *const *t, int n, row_t **out, int big)
{
    hc_t c[3];
    char id[3][64], path[3][128], err[256];
    int ok[3] = {0, 0, 0}, all = 1;
    long runs = big ? BIG_RUNS : opt.n;

    for (int k = 0; k < n; k++)
        out[k] = big ? row_new(t[k]->name, "execute, a %d-byte result (alternating)", BIG_RESULT_BYTES)
                     : row_new(t[k]->name, "execute %s in session (alternating)", opt.lang->code);
    fprintf(stderr, "sandgate-bench: %s: %d + %ld executes each%s, alternating\n",
            n == 3 ? "proxy, relay and gateway" : "proxy and gateway", BENCH_WARMUP, runs,
            big ? " of a 1 MB result" : "");
    for (int k = 0; k < n; k++) {
        if (hc_init(&c[k], t[k]->base, NULL, t[k]->token) != 0) {
            out[k]->failed = 1;
            all = 0;
            continue;
        }
        ok[k] = 1;
        if (sess_create(&c[k], t[k], id[k], err, sizeof(err)) != 0) {
            row_err(out[k], "no session: %s", err);
            out[k]->failed = 1;
            ok[k] = 2;
            all = 0;
        }
        snprintf(path[k], sizeof(path[k]), "/sessions/%s/execute", id[k]);
    }
    for (long i = 0; all && i < BENCH_WARMUP + runs && !g_stop; i++) {
        for (int k = 0; k < n; k++) {
            if ((big ? exec_check_big(&c[k], path[k], err, sizeof(err))
                     : exec_check(&c[k], path[k], opt.exec_body, NULL, err, sizeof(err))) != 0)
                row_err(out[k], "%s", err);
            else if (i >= BENCH_WARMUP)
                row_ok(out[k], c[k].ms);
        }
    }
    for (int k = 0; k < n; k++) {
        if (ok[k] == 1 && sess_delete(&c[k], t[k], id[k], err, sizeof(err)) != 0)
            fprintf(stderr, "sandgate-bench: delete: %s\n", err);
        if (ok[k])
            hc_cleanup(&c[k]);
    }
}

typedef struct {
    row_t *row;
    double deadline;
} list_ctx_t;

static void list_fn(par_t *p, hc_t *c, long i)
{
    list_ctx_t *x = p->ud;
    char err[256];
    while (!g_stop && now_ms() < x->deadline) {
        if (hc_expect(c, "GET", "/sessions", NULL, 200, err, sizeof(err)) != 0)
            row_err(x->row, "%s", err);
        else
            row_ok(x->row, c->ms);
    }
}

static double phase_list(const target_t *gw, const char *empty_token)
{
    row_t *r = row_new(gw->name, "GET /sessions (empty tenant), %ld clients", opt.clients);
    list_ctx_t x = {r, 0};
    double t0;

    fprintf(stderr, "sandgate-bench: %s: GET /sessions of an empty tenant, %ld clients, %.0f s\n", gw->name,
            opt.clients, BENCH_TP_SECONDS);
    x.deadline = (t0 = now_ms()) + BENCH_TP_SECONDS * 1e3;
    par_t p = {.fn = list_fn, .ud = &x, .count = opt.clients, .base = gw->base, .token = empty_token};
    par_run(&p, opt.clients);
    double rps = r->n / ((now_ms() - t0) / 1e3);
    row_note(r, "%.0f req/s (this program's curl clients)", rps);
    return rps;
}

/* ---- raw keep-alive clients ---- */

typedef struct {
    const char *base, *token;
    double deadline;
    long n, errors;
    double *ms; /* the first cap latencies */
    long cap;
    char err[256];
} raw_ctx_t;

static int raw_connect(const char *base, char *host, size_t hostlen, char *err, size_t errlen)
{
    char port[16] = "80";
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    const char *h = strncmp(base, "http://", 7) == 0 ? base + 7 : base;
    const char *colon = strchr(h, ':'), *slash = strchr(h, '/');
    size_t hl = colon != NULL ? (size_t)(colon - h) : slash != NULL ? (size_t)(slash - h) : strlen(h);
    int fd;

    snprintf(host, hostlen, "%.*s", (int)hl, h);
    if (colon != NULL)
        snprintf(port, sizeof(port), "%.*s", (int)strcspn(colon + 1, "/"), colon + 1);
    if (getaddrinfo(host, port, &hints, &ai) != 0) {
        snprintf(err, errlen, "cannot resolve %s", base);
        return -1;
    }
    fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        snprintf(err, errlen, "cannot connect to %s", base);
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

/* One reply on fd: its status (0: the connection broke or the reply is
 * not HTTP/1.1 with a Content-Length). */
static int raw_reply(int fd, char *buf, size_t cap)
{
    size_t have = 0;
    char *end;
    for (;;) {
        ssize_t n = read(fd, buf + have, cap - 1 - have);
        if (n <= 0)
            return 0;
        have += (size_t)n;
        buf[have] = '\0';
        if ((end = strstr(buf, "\r\n\r\n")) != NULL)
            break;
        if (have == cap - 1)
            return 0;
    }
    const char *cl = strcasestr(buf, "\r\ncontent-length:");
    if (strncmp(buf, "HTTP/1.1 ", 9) != 0 || cl == NULL || cl > end)
        return 0;
    size_t want = (size_t)(end + 4 - buf) + strtoul(cl + 17, NULL, 10);
    while (have < want) { /* the body: read and dropped */
        ssize_t n = read(fd, buf, want - have < cap ? want - have : cap);
        if (n <= 0)
            return 0;
        have += (size_t)n;
    }
    return atoi(buf + 9);
}

static void *raw_main(void *arg)
{
    raw_ctx_t *x = arg;
    char host[256], req[1024], buf[16384];
    int fd = raw_connect(x->base, host, sizeof(host), x->err, sizeof(x->err));
    int len = snprintf(req, sizeof(req), "GET /sessions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", host,
                       x->token);

    while (fd >= 0 && !g_stop && now_ms() < x->deadline) {
        double t0 = now_ms();
        if (write(fd, req, (size_t)len) != len || raw_reply(fd, buf, sizeof(buf)) != 200) {
            x->errors++;
            snprintf(x->err, sizeof(x->err), "a request failed or was not answered 200");
            close(fd);
            fd = raw_connect(x->base, host, sizeof(host), x->err, sizeof(x->err));
            continue;
        }
        if (x->n < x->cap)
            x->ms[x->n] = now_ms() - t0;
        x->n++;
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

static double phase_list_raw(const target_t *gw, const char *empty_token)
{
    row_t *r = row_new(gw->name, "GET /sessions (empty tenant), %ld raw clients", opt.clients);
    raw_ctx_t *x = calloc((size_t)opt.clients, sizeof(*x));
    pthread_t *tid = calloc((size_t)opt.clients, sizeof(*tid));
    long n = 0, started = 0;
    double t0;

    fprintf(stderr, "sandgate-bench: %s: GET /sessions of an empty tenant, %ld raw keep-alive clients, %.0f s\n",
            gw->name, opt.clients, BENCH_TP_SECONDS);
    t0 = now_ms();
    for (long i = 0; x != NULL && tid != NULL && i < opt.clients; i++) {
        x[i] =
            (raw_ctx_t){.base = gw->base, .token = empty_token, .deadline = t0 + BENCH_TP_SECONDS * 1e3, .cap = 200000};
        x[i].ms = malloc(sizeof(double) * (size_t)x[i].cap);
        if (x[i].ms == NULL || pthread_create(&tid[i], NULL, raw_main, &x[i]) != 0)
            break;
        started++;
    }
    for (long i = 0; i < started; i++) {
        pthread_join(tid[i], NULL);
        for (long k = 0; k < x[i].n && k < x[i].cap; k++)
            row_ok(r, x[i].ms[k]);
        for (long k = 0; k < x[i].errors; k++)
            row_err(r, "%s", x[i].err);
        n += x[i].n;
    }
    double rps = (double)n / ((now_ms() - t0) / 1e3);
    row_note(r, "%.0f req/s (raw keep-alive clients)", rps);
    for (long i = 0; x != NULL && i < opt.clients; i++)
        free(x[i].ms);
    free(x);
    free(tid);
    return rps;
}

static double rate_of(const row_t *r)
{
    const char *s = strstr(r->note, " exec/s");
    const char *b = s;
    while (b != NULL && b > r->note && b[-1] != ' ')
        b--;
    return s != NULL ? atof(b) : 0;
}

/* ---- throughput, the targets taking turns ---- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long ready;      /* clients set up (a session and its first execute) */
    int active;      /* the target whose clients execute; -1 none; -2 the end */
    long turn;       /* turns begun */
    double deadline; /* ms: no execute starts after it in this turn */
    long running;    /* clients of this turn not yet done with it */
} turns_t;

typedef struct {
    const target_t *t;
    int k; /* the target's index */
    row_t *row;
    turns_t *turns;
    const char *sid; /* the session, the same for this client of every target (made through the gateway) */
} turn_client_t;

static void *turn_client(void *arg)
{
    turn_client_t *a = arg;
    turns_t *s = a->turns;
    hc_t c;
    char err[256], path[128];
    long seen = 0;
    int inited = hc_init(&c, a->t->base, NULL, a->t->token) == 0, have = inited && a->sid[0] != '\0';

    snprintf(path, sizeof(path), "/sessions/%s/execute", a->sid);
    if (!inited)
        row_err(a->row, "cannot set up libcurl");
    else if (!have)
        row_err(a->row, "no session");
    else /* one untimed execute: a client's first is not the steady state */
        exec_check(&c, path, opt.exec_body, NULL, err, sizeof(err));
    pthread_mutex_lock(&s->mu);
    s->ready++;
    pthread_cond_broadcast(&s->cv);
    for (;;) {
        while (s->active != -2 && !(s->active == a->k && s->turn != seen))
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->active == -2)
            break;
        seen = s->turn;
        double deadline = s->deadline;
        pthread_mutex_unlock(&s->mu);
        while (have && !g_stop && now_ms() < deadline) {
            if (exec_check(&c, path, opt.exec_body, NULL, err, sizeof(err)) != 0)
                row_err(a->row, "%s", err);
            else
                row_ok(a->row, c.ms);
        }
        pthread_mutex_lock(&s->mu);
        if (--s->running == 0)
            pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (inited)
        hc_cleanup(&c);
    return NULL;
}

/* Throughput of the n targets (t[0] the proxy, t[n - 1] the gateway), -c
 * clients each: the targets take turns of TP_TURN_MS, TP_ROUNDS rounds, the
 * order rotating each round. Client i of every target executes in the same
 * session, made through the gateway (the proxy and the relay know it by the
 * same id), so that the turns differ in the path alone, not in the
 * sandboxes: two sets of containers can differ by tens of microseconds of
 * the machine's CPU an execution. A target's rate is its executes over the
 * time of its turns (each turn ends when its last client's execute does). */
/* CPU seconds each part of the stack used during each target's turns
 * (cpu_sample; a part that could not be read is -1), and the executes of
 * those turns */
static double tp_cpu[3][CPU_PARTS];
static size_t tp_cpu_execs[3];

static void phase_throughput_turns(const target_t *const *t, int n)
{
    turns_t s = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .active = -1};
    cpu_src_t cs;
    int cpu_ok = cpu_src_init(&cs, t[0], t[n - 1]) == 0;
    long nc = opt.clients, total = 0, started[3] = {0, 0, 0};
    turn_client_t *a = calloc((size_t)(n * nc), sizeof(*a));
    pthread_t *tid = calloc((size_t)(n * nc), sizeof(*tid));
    char(*sid)[64] = calloc((size_t)nc, sizeof(*sid));
    double spent[3] = {0, 0, 0};
    row_t *r[3];
    hc_t owner;
    int owner_ok = 0;

    for (int k = 0; k < n; k++)
        r[k] = row_new(t[k]->name, "throughput, %ld clients", nc);
    fprintf(stderr,
            "sandgate-bench: throughput, %ld clients per target, %d rounds of a %.0f s turn each, the targets "
            "taking turns\n",
            nc, TP_ROUNDS, TP_TURN_MS / 1e3);
    if (a == NULL || tid == NULL || sid == NULL || g_stop) {
        for (int k = 0; k < n; k++)
            r[k]->failed = 1;
        goto Exit;
    }
    owner_ok = hc_init(&owner, t[n - 1]->base, NULL, t[n - 1]->token) == 0;
    for (long i = 0; owner_ok && i < nc && !g_stop; i++) {
        char err[256];
        if (sess_create(&owner, t[n - 1], sid[i], err, sizeof(err)) != 0) {
            row_err(r[n - 1], "no session: %s", err);
            sid[i][0] = '\0';
        }
    }
    for (int k = 0; k < n; k++) {
        for (long i = 0; i < nc; i++) {
            a[total] = (turn_client_t){.t = t[k], .k = k, .row = r[k], .turns = &s, .sid = sid[i]};
            if (pthread_create(&tid[total], NULL, turn_client, &a[total]) != 0) {
                row_err(r[k], "could start only %ld of %ld client threads", started[k], nc);
                break;
            }
            started[k]++;
            total++;
        }
    }
    pthread_mutex_lock(&s.mu);
    while (s.ready < total)
        pthread_cond_wait(&s.cv, &s.mu);
    pthread_mutex_unlock(&s.mu);
    pool_refilled(t[0], -1); /* the clients' creates emptied it: its refill would run during the first turns */

    for (int j = 0; j < TP_ROUNDS && !g_stop; j++) {
        for (int q = 0; q < n && !g_stop; q++) {
            int k = (j + q) % n;
            double c0[CPU_PARTS], c1[CPU_PARTS];
            size_t n0 = r[k]->n; /* the target's clients wait for their turn: nobody adds to it now */
            if (cpu_ok)
                cpu_sample(&cs, c0);
            pthread_mutex_lock(&s.mu);
            double t0 = now_ms();
            s.active = k;
            s.turn++;
            s.deadline = t0 + TP_TURN_MS;
            s.running = started[k];
            pthread_cond_broadcast(&s.cv);
            while (s.running > 0)
                pthread_cond_wait(&s.cv, &s.mu);
            spent[k] += now_ms() - t0;
            s.active = -1;
            pthread_mutex_unlock(&s.mu);
            if (cpu_ok) {
                cpu_sample(&cs, c1);
                for (int i = 0; i < CPU_PARTS; i++)
                    tp_cpu[k][i] = c0[i] < 0 || c1[i] < 0 || tp_cpu[k][i] < 0 ? -1 : tp_cpu[k][i] + c1[i] - c0[i];
                tp_cpu_execs[k] += r[k]->n - n0;
            }
        }
    }
    if (cpu_ok)
        cpu_src_cleanup(&cs);
    pthread_mutex_lock(&s.mu);
    s.active = -2;
    pthread_cond_broadcast(&s.cv);
    pthread_mutex_unlock(&s.mu);
    for (long i = 0; i < total; i++)
        pthread_join(tid[i], NULL);
    for (int k = 0; k < n; k++)
        if (spent[k] > 0 && r[k]->n > 0)
            row_note(r[k], "%.1f exec/s over %.1f s, in %d turns, the same %ld sessions",
                     (double)r[k]->n / (spent[k] / 1e3), spent[k] / 1e3, TP_ROUNDS, nc);
Exit:
    for (long i = 0; owner_ok && sid != NULL && i < nc; i++) {
        char err[256];
        if (sid[i][0] != '\0' && sess_delete(&owner, t[n - 1], sid[i], err, sizeof(err)) != 0)
            fprintf(stderr, "sandgate-bench: delete after throughput: %s\n", err);
    }
    if (owner_ok)
        hc_cleanup(&owner);
    free(sid);
    free(a);
    free(tid);
}

/* ex[]: the execute rows, proxy first and gateway last, the relay's between
 * when there is one (nex 3); tp_rows throughput rows from tp0, in that order */
static row_t *ex[3], *big[3];
static int nex;
static size_t tp0, tp_rows;
static double list_rps = -1, list_raw_rps = -1;

static double pct_or_nan(row_t *r, unsigned p)
{
    if (r->n == 0)
        return 0.0 / 0.0;
    qsort(r->ms, r->n, sizeof(double), cmp_double);
    return pct(r->ms, r->n, p);
}

void phase_overhead(const target_t *px, const target_t *relay, const target_t *gw, const char *empty_token)
{
    const target_t *t[3] = {px, relay != NULL ? relay : gw, gw};

    nex = relay != NULL ? 3 : 2;
    phase_exec_alternating(t, nex, ex, 0);
    if (!g_stop)
        phase_exec_alternating(t, nex, big, 1);
    tp0 = nrows;
    if (!g_stop)
        phase_throughput_turns(t, nex);
    tp_rows = nrows - tp0;
    if (!g_stop)
        phase_tti(px, gw);
    if (!g_stop && empty_token != NULL)
        list_rps = phase_list(gw, empty_token);
    if (!g_stop && empty_token != NULL)
        list_raw_rps = phase_list_raw(gw, empty_token);
}

/* What each part of the stack spent per execution in the throughput turns
 * of each target; and, the machine being what limits them, the share of
 * the proxy's throughput that the gateway's CPU allows, and what 85 %
 * would need. */
static void cpu_report(int n)
{
    static const char *const part[CPU_PARTS] = {"machine", "proxy", "gateway", "Redis", "relay", "bench"};
    static const char *const via[3] = {"proxy", "relay", "gateway"};
    double us[3][CPU_PARTS];
    int g = n - 1;

    for (int k = 0; k < n; k++)
        for (int i = 0; i < CPU_PARTS; i++)
            us[k][i] = tp_cpu_execs[k] > 0 && tp_cpu[k][i] >= 0 ? tp_cpu[k][i] / (double)tp_cpu_execs[k] * 1e6 : -1;
    if (us[0][CPU_MACHINE] <= 0 || us[g][CPU_MACHINE] <= 0)
        return;
    printf("  CPU per execution, in the throughput turns (us; -: not read):\n    %-16s", "through the");
    for (int i = 0; i < CPU_PARTS; i++)
        printf(" %8s", part[i]);
    printf("\n");
    for (int k = 0; k < n; k++) {
        printf("    %-16s", via[n == 2 && k == 1 ? 2 : k]);
        for (int i = 0; i < CPU_PARTS; i++)
            if (us[k][i] >= 0)
                printf(" %8.0f", us[k][i]);
            else
                printf(" %8s", "-");
        printf("\n");
    }
    printf("  the machine's CPU alone allows the gateway %.1f%% of the proxy's throughput (%.0f us a run against "
           "%.0f); 85%% needs %.0f us or less, %+.0f us\n",
           100 * us[0][CPU_MACHINE] / us[g][CPU_MACHINE], us[g][CPU_MACHINE], us[0][CPU_MACHINE],
           us[0][CPU_MACHINE] / 0.85, us[0][CPU_MACHINE] / 0.85 - us[g][CPU_MACHINE]);
}

void overhead_report(void)
{
    double p50[3], p99[3], rate[3] = {0, 0, 0};
    int g = nex - 1; /* the gateway's index */

    for (int k = 0; k < nex; k++) {
        p50[k] = pct_or_nan(ex[k], 50);
        p99[k] = pct_or_nan(ex[k], 99);
        if ((size_t)k < tp_rows)
            rate[k] = rate_of(&rows[tp0 + k]);
    }
    printf("\nThe gateway over the proxy (one run, side by side):\n");
    printf("  execute overhead                  p50 %+.2f ms  p99 %+.2f ms  (proxy %.2f / %.2f, gateway %.2f / %.2f)\n",
           p50[g] - p50[0], p99[g] - p99[0], p50[0], p99[0], p50[g], p99[g]);
    if (big[0] != NULL && big[g] != NULL)
        printf("  a 1 MB result, overhead           p50 %+.2f ms  p99 %+.2f ms  (proxy %.2f / %.2f, gateway %.2f / "
               "%.2f)\n",
               pct_or_nan(big[g], 50) - pct_or_nan(big[0], 50), pct_or_nan(big[g], 99) - pct_or_nan(big[0], 99),
               pct_or_nan(big[0], 50), pct_or_nan(big[0], 99), pct_or_nan(big[g], 50), pct_or_nan(big[g], 99));
    if (tp_rows == (size_t)nex)
        printf("  throughput, %ld clients            gateway %.0f exec/s = %.1f%% of the proxy's %.0f\n", opt.clients,
               rate[g], rate[0] > 0 ? 100 * rate[g] / rate[0] : 0, rate[0]);
    if (nex == 3) {
        /* the floor: one more HTTP hop and nothing else */
        printf("  floor, a bare HTTP relay          p50 %+.2f ms  p99 %+.2f ms over the proxy", p50[1] - p50[0],
               p99[1] - p99[0]);
        if (tp_rows == 3)
            printf(", throughput %.0f exec/s = %.1f%% of the proxy's", rate[1],
                   rate[0] > 0 ? 100 * rate[1] / rate[0] : 0);
        printf("\n  the gateway over the relay        p50 %+.2f ms", p50[2] - p50[1]);
        if (tp_rows == 3)
            printf(", throughput %.1f%% of the relay's", rate[1] > 0 ? 100 * rate[2] / rate[1] : 0);
        printf("\n");
    }
    if (tp_rows == (size_t)nex)
        cpu_report(nex);
    for (int b = 0; b < 2; b++) {
        row_t **r = b == 0 ? tti_seq : tti_burst;
        if (r[0] == NULL || r[1] == NULL)
            continue;
        double m[2], p95[2], p99[2];
        for (int k = 0; k < 2; k++) {
            m[k] = pct_or_nan(r[k], 50);
            p95[k] = pct_or_nan(r[k], 95);
            p99[k] = pct_or_nan(r[k], 99);
        }
        printf("  %-33s median %.2f ms  p95 %.2f  p99 %.2f  success %.0f%%  (proxy %.2f / %.2f / %.2f, %.0f%%; "
               "gateway over it: median %+.2f ms)\n",
               r[1]->op, m[1], p95[1], p99[1], 100.0 * (double)r[1]->n / TTI_RUNS, m[0], p95[0], p99[0],
               100.0 * (double)r[0]->n / TTI_RUNS, m[1] - m[0]);
    }
    if (list_rps >= 0)
        printf("  GET /sessions, empty tenant, %ld clients: %.0f req/s (curl clients)", opt.clients, list_rps);
    if (list_raw_rps >= 0)
        printf(", %.0f req/s (raw keep-alive clients)", list_raw_rps);
    if (list_rps >= 0)
        printf("\n");
}
