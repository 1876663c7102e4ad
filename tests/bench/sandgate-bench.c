/*
 * sandgate-bench — latency and throughput of sandgate-proxy (and of the
 * gateway in front of it), next to the Docker engine's own floors. In the
 * spirit of redis-benchmark: it prints one table, it is not a test.
 *
 *   sandgate-bench [--proxy URL] [--gateway URL --token TOKEN] [--lang python]
 *                  [-n N] [-c CLIENTS] [--idle-sessions K] [--runtimes LIST|none]
 *                  [--skip-targets] [--skip-docker]
 *                  [--overhead [--empty-token TOKEN] [--relay] [--redis URL]]   (bench_overhead.c)
 *
 * With a proxy that offers several runtimes (GET /health "runtimes"), or
 * --runtimes runc,runsc, each runtime is measured side by side through the
 * proxy's "runtime" field: create from the pool, first execute after it,
 * warm executes, throughput. --skip-targets leaves out the proxy / gateway
 * phases (the runtimes, the idle sessions and the floors remain).
 *
 * Everything goes over HTTP with keep-alive: one CURL easy handle per client
 * thread, reused for all its requests. Docker is reached directly (DOCKER_HOST
 * unix:// or tcp://, default /var/run/docker.sock), never through the CLI.
 *
 * Threads: main() runs the phases one after another; a phase that needs
 * concurrency starts `clients` threads, each with its own handle. Shared
 * between threads: the rows (each has its own mutex), the registry of live
 * sessions (one mutex) and the stop flag set by SIGINT/SIGTERM.
 *
 * Cleanup: every session created is in the registry until its DELETE
 * succeeded; whatever is left is deleted before exit. Every container created
 * directly on Docker carries sandgate.bench=<run id> and is removed by that
 * label before exit. Both happen on every path after start-up, including a
 * signal.
 */
#include "bench.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_signal(int sig)
{
    g_stop = sig;
}

/* ------------------------------------------------------------------------
 * Options, targets, languages
 * ------------------------------------------------------------------------ */

static const lang_t langs[] = {
    {"python", "print(1)", "print('x' * 999999)", {"python3", "-c", "print(1)", NULL}},
    {"javascript", "console.log(1)", "console.log('x'.repeat(999999))", {"node", "-e", "console.log(1)", NULL}},
};

opt_t opt = {
    .proxy = "http://127.0.0.1:8000",
    .n = 200,
    .clients = 8,
    .idle = 100,
};

/* ------------------------------------------------------------------------
 * Phase 1: latencies through one target, one client.
 * ------------------------------------------------------------------------ */

/* Whether a create came from the warm pool. Docker says it best (the
 * container's sandgate.kind label is "pool" for pooled ones); without it,
 * the latency does (a take is ~1 ms, a new container hundreds). */
static int create_was_cold(const char *sid, double ms)
{
    char cid[80], kind[16], err[256];

    if (dk.ok && dk_session_container(sid, cid, kind, err, sizeof(err)) == 0 && kind[0] != '\0')
        return strcmp(kind, "pool") != 0;
    return ms > BENCH_COLD_MS;
}

/* Executes opt.exec_body in one new session of t: BENCH_WARMUP times
 * untimed, then opt.n times into exe (the agent's execution_time into
 * agent when not NULL); then deletes it (its time into del when not NULL). */
static void exec_series(hc_t *c, const target_t *t, row_t *exe, row_t *agent, row_t *del)
{
    char id[64], err[256], path[128];

    if (g_stop)
        return;
    if (sess_create(c, t, id, err, sizeof(err)) != 0) {
        row_err(exe, "no session to execute in: %s", err);
        return;
    }
    snprintf(path, sizeof(path), "/sessions/%s/execute", id);
    for (int i = 0; i < BENCH_WARMUP && !g_stop; i++)
        if (exec_check(c, path, opt.exec_body, NULL, err, sizeof(err)) != 0)
            row_err(exe, "warm-up: %s", err);
    for (long i = 0; i < opt.n && !g_stop; i++) {
        double agent_ms;
        if (exec_check(c, path, opt.exec_body, &agent_ms, err, sizeof(err)) != 0) {
            row_err(exe, "%s", err);
            continue;
        }
        row_ok(exe, c->ms);
        if (agent != NULL && agent_ms >= 0)
            row_ok(agent, agent_ms);
    }
    if (sess_delete(c, t, id, err, sizeof(err)) != 0)
        row_err(del != NULL ? del : exe, "%s", err);
    else if (del != NULL)
        row_ok(del, c->ms);
}

static void phase_latency(const target_t *t)
{
    hc_t c;
    char id[64], err[256];
    row_t *warm = row_new(t->name, "session create (pool warm)");
    row_t *cold = row_new(t->name, "session create (cold, pool drained)");
    row_t *exe = row_new(t->name, "execute %s in session", opt.lang->code);
    row_t *exe_agent = row_new(t->name, "  its execution_time (agent-measured)");
    row_t *eph = row_new(t->name, "ephemeral execute");
    row_t *del = row_new(t->name, "session delete");
    long want_cold = opt.n / 10 > 0 ? opt.n / 10 : 1, burst_cold = 0, made = 0, streak = 0;
    char(*burst)[64] = NULL;

    if (hc_init(&c, t->base, NULL, t->token) != 0) {
        warm->failed = 1;
        return;
    }

    /* create + delete as pairs: at most one live session, and a pause after
     * a cold create so the pool can refill; otherwise back-to-back creates
     * drain it within pool_size pairs and "warm" would measure Docker. */
    fprintf(stderr, "sandgate-bench: %s: %ld create/delete pairs\n", t->name, opt.n);
    for (long i = 0; i < opt.n && !g_stop; i++) {
        int is_cold;
        double ms;
        if (sess_create(&c, t, id, err, sizeof(err)) != 0) {
            row_err(warm, "%s", err);
            continue;
        }
        ms = c.ms;
        is_cold = create_was_cold(id, ms);
        row_ok(is_cold ? cold : warm, ms);
        if (sess_delete(&c, t, id, err, sizeof(err)) != 0)
            row_err(del, "%s", err);
        else
            row_ok(del, c.ms);
        if (is_cold) {
            /* Three cold ones in a row despite pausing: there is no pool
             * (or it cannot keep up); stop waiting for it. */
            if (streak++ < 3)
                sleep_ms(ms * 2 < 500 ? 500 : ms * 2 > 5000 ? 5000 : (long)(ms * 2));
        } else {
            streak = 0;
        }
    }

    /* The cold path: back-to-back creates drain the pool; go on until
     * want_cold creates needed a new container (pooled ones met on the
     * way, refilled meanwhile, count as warm), then delete them all. */
    fprintf(stderr, "sandgate-bench: %s: back-to-back creates until %ld cold ones\n", t->name, want_cold);
    burst = calloc(want_cold + 64, sizeof(*burst));
    while (burst != NULL && burst_cold < want_cold && made < want_cold + 64 && !g_stop) {
        double ms;
        int is_cold;
        if (sess_create(&c, t, burst[made], err, sizeof(err)) != 0) {
            row_err(cold, "%s", err);
            break; /* at_capacity or worse: more would not help */
        }
        ms = c.ms;
        is_cold = create_was_cold(burst[made], ms);
        row_ok(is_cold ? cold : warm, ms);
        burst_cold += is_cold;
        made++;
    }
    for (long i = 0; i < made; i++) {
        if (sess_delete(&c, t, burst[i], err, sizeof(err)) != 0)
            row_err(del, "%s", err);
        else
            row_ok(del, c.ms);
    }
    free(burst);
    sleep_ms(2000); /* the pool refills before the next numbers */

    /* execute in one session */
    fprintf(stderr, "sandgate-bench: %s: %d + %ld executes in one session\n", t->name, BENCH_WARMUP, opt.n);
    exec_series(&c, t, exe, exe_agent, del);

    /* ephemeral executes, back to back */
    fprintf(stderr, "sandgate-bench: %s: %ld ephemeral executes\n", t->name, opt.n / 4 > 0 ? opt.n / 4 : 1);
    for (long i = 0; i < (opt.n / 4 > 0 ? opt.n / 4 : 1) && !g_stop; i++) {
        if (exec_check(&c, "/execute", opt.ephemeral_body, NULL, err, sizeof(err)) != 0)
            row_err(eph, "%s", err);
        else
            row_ok(eph, c.ms);
    }

    if (warm->n > 0 || cold->n > 0)
        row_note(warm, "%zu of %zu creates took a pooled container", warm->n, warm->n + cold->n);
    hc_cleanup(&c);
}

/* ------------------------------------------------------------------------
 * Phase 2: throughput, C clients each executing in its own session.
 * ------------------------------------------------------------------------ */

/* Start line: clients set up their session, then all start executing at
 * once, so that the wall time covers only executions. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long ready;
    int go;
} gate_t;

typedef struct {
    const target_t *t;
    row_t *row;
    gate_t *gate;
    atomic_long *issued;
    long max_exec;
    double start, end; /* ms; start 0: this client had no session */
} tp_arg_t;

/* A throughput client's start: its handle c, a session on t and that
 * session's first execute (untimed: not the steady state). 1 with a
 * session (id; path its execute's), 0 without (why in row); *inited: c is
 * to be cleaned up. */
static int tp_client_start(hc_t *c, const target_t *t, row_t *row, char id[64], char path[128], int *inited)
{
    char err[256];
    int have = 0;

    id[0] = '\0';
    *inited = hc_init(c, t->base, NULL, t->token) == 0;
    if (*inited && sess_create(c, t, id, err, sizeof(err)) == 0)
        have = 1;
    else
        row_err(row, "no session: %s", *inited ? err : "cannot set up libcurl");
    snprintf(path, 128, "/sessions/%s/execute", id);
    if (have) /* one untimed execute: the first one of a session is not the steady state */
        exec_check(c, path, opt.exec_body, NULL, err, sizeof(err));
    return have;
}

static void *tp_main(void *arg)
{
    tp_arg_t *a = arg;
    hc_t c;
    char id[64], err[256], path[128];
    int inited, have = tp_client_start(&c, a->t, a->row, id, path, &inited);

    pthread_mutex_lock(&a->gate->mu);
    a->gate->ready++;
    pthread_cond_broadcast(&a->gate->cv);
    while (!a->gate->go)
        pthread_cond_wait(&a->gate->cv, &a->gate->mu);
    pthread_mutex_unlock(&a->gate->mu);

    if (have) {
        double deadline;
        a->start = now_ms();
        deadline = a->start + BENCH_TP_SECONDS * 1e3;
        while (!g_stop && now_ms() < deadline && atomic_fetch_add(a->issued, 1) < a->max_exec) {
            if (exec_check(&c, path, opt.exec_body, NULL, err, sizeof(err)) != 0)
                row_err(a->row, "%s", err);
            else
                row_ok(a->row, c.ms);
        }
        a->end = now_ms();
        if (sess_delete(&c, a->t, id, err, sizeof(err)) != 0)
            fprintf(stderr, "sandgate-bench: delete after throughput: %s\n", err);
    }
    if (inited)
        hc_cleanup(&c);
    return NULL;
}

static void phase_throughput(const target_t *t)
{
    row_t *r = row_new(t->name, "throughput, %ld clients", opt.clients);
    gate_t gate = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    atomic_long issued = 0;
    tp_arg_t *a = calloc(opt.clients, sizeof(*a));
    pthread_t *tid = calloc(opt.clients, sizeof(*tid));
    long started = 0;
    double t0 = 0, t1 = 0;

    fprintf(stderr, "sandgate-bench: %s: throughput, %ld clients, %.0f s or %ld executes\n", t->name, opt.clients,
            BENCH_TP_SECONDS, (long)BENCH_TP_MAX_EXEC);
    if (a == NULL || tid == NULL || g_stop) {
        r->failed = 1;
        goto Exit;
    }
    for (long i = 0; i < opt.clients; i++) {
        a[i] = (tp_arg_t){.t = t, .row = r, .gate = &gate, .issued = &issued, .max_exec = BENCH_TP_MAX_EXEC};
        if (pthread_create(&tid[i], NULL, tp_main, &a[i]) != 0) {
            row_err(r, "could start only %ld of %ld client threads", started, opt.clients);
            break;
        }
        started++;
    }
    pthread_mutex_lock(&gate.mu);
    while (gate.ready < started)
        pthread_cond_wait(&gate.cv, &gate.mu);
    gate.go = 1;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    for (long i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    for (long i = 0; i < started; i++) {
        if (a[i].start == 0)
            continue;
        if (t0 == 0 || a[i].start < t0)
            t0 = a[i].start;
        if (a[i].end > t1)
            t1 = a[i].end;
    }
    if (t1 > t0 && r->n > 0)
        row_note(r, "%.1f exec/s over %.1f s%s", r->n / ((t1 - t0) / 1e3), (t1 - t0) / 1e3,
                 atomic_load(&issued) >= BENCH_TP_MAX_EXEC ? " (stopped at the execute cap)" : "");
Exit:
    free(a);
    free(tid);
}

/* ------------------------------------------------------------------------
 * Phase 2b: the runtimes side by side, through the proxy's "runtime" field:
 * a create from the warm pool, the first execute after it, warm executes,
 * then throughput (phase 2) on each runtime.
 * ------------------------------------------------------------------------ */

/* The proxy's sandgate_proxy_pool_ready for the language and runtime (its
 * GET /metrics), or -1. */
static long pool_ready(hc_t *c, const char *runtime)
{
    char sample[160];
    const char *p;
    snprintf(sample, sizeof(sample), "sandgate_proxy_pool_ready{lang=\"%s\",runtime=\"%s\"} ", opt.lang->name, runtime);
    if (hc_do(c, "GET", "/metrics", NULL) != 0 || c->status != 200 || (p = strstr(c->body.base, sample)) == NULL)
        return -1;
    return strtol(p + strlen(sample), NULL, 10);
}

/* Waits until the pool of the runtime holds want ready containers (want
 * <= 0: until its size stops changing for 3 s, which is then returned), or
 * timeout_ms. Returns the last count seen. */
static long wait_pool(hc_t *c, const char *runtime, long want, long timeout_ms)
{
    double deadline = now_ms() + timeout_ms, since = now_ms();
    long last = -2, n;
    for (;;) {
        n = pool_ready(c, runtime);
        if (want > 0 && n >= want)
            return n;
        if (n != last) {
            last = n;
            since = now_ms();
        } else if (want <= 0 && n > 0 && now_ms() - since >= 3000) {
            return n;
        }
        if (now_ms() >= deadline || g_stop)
            return n;
        sleep_ms(50);
    }
}

static void phase_runtime(const target_t *t)
{
    hc_t c, m;
    char id[64], err[256], path[128], cid[80], kind[16];
    row_t *create = row_new(t->name, "session create from pool");
    row_t *first = row_new(t->name, "first execute after create");
    row_t *cold = row_new(t->name, "session create (cold: pool empty)");
    row_t *exe = row_new(t->name, "execute %s, warm", opt.lang->code);
    long pairs = opt.n / 4 > 0 ? opt.n / 4 : 1, size;

    if (hc_init(&c, t->base, NULL, NULL) != 0 || hc_init(&m, t->base, NULL, NULL) != 0) {
        create->failed = 1;
        return;
    }
    /* the first request on a runtime starts its pool; then the pool fills */
    if (sess_create(&c, t, id, err, sizeof(err)) != 0) {
        row_err(create, "%s", err);
        create->failed = 1;
        goto Exit;
    }
    sess_delete(&c, t, id, err, sizeof(err));
    size = wait_pool(&m, t->name, 0, 120000);
    fprintf(stderr, "sandgate-bench: %s: the pool holds %ld; %ld create / first execute / delete rounds\n", t->name,
            size, pairs);
    /* each round takes the pool's oldest container once the pool is full
     * again, as a session arriving at a steady pool would */
    for (long i = 0; i < pairs && !g_stop; i++) {
        double ms;
        int pooled;
        if (size > 0)
            wait_pool(&m, t->name, size, 30000);
        if (sess_create(&c, t, id, err, sizeof(err)) != 0) {
            row_err(create, "%s", err);
            continue;
        }
        ms = c.ms;
        pooled = dk.ok ? dk_session_container(id, cid, kind, err, sizeof(err)) == 0 && strcmp(kind, "pool") == 0
                       : ms <= BENCH_COLD_MS;
        row_ok(pooled ? create : cold, ms);
        snprintf(path, sizeof(path), "/sessions/%s/execute", id);
        if (exec_check(&c, path, opt.exec_body, NULL, err, sizeof(err)) != 0)
            row_err(first, "%s", err);
        else if (pooled)
            row_ok(first, c.ms);
        if (sess_delete(&c, t, id, err, sizeof(err)) != 0)
            fprintf(stderr, "sandgate-bench: %s: delete: %s\n", t->name, err);
    }
    if (create->n > 0 || cold->n > 0)
        row_note(create, "%zu of %zu from the pool (size %ld)", create->n, create->n + cold->n, size);

    /* warm executes in one session */
    exec_series(&c, t, exe, NULL, NULL);
Exit:
    hc_cleanup(&c);
    hc_cleanup(&m);
}

/* The runtimes to compare: --runtimes, else those the proxy's GET /health
 * lists. Fills names (at most max) and returns how many. */
static size_t runtimes_to_run(const char *proxy, char names[][8], size_t max)
{
    size_t n = 0;
    if (opt.runtimes != NULL) {
        const char *p = opt.runtimes;
        while (*p != '\0' && n < max && strcmp(opt.runtimes, "none") != 0) {
            size_t len = strcspn(p, ",");
            if (len > 0 && len < 8) {
                memcpy(names[n], p, len);
                names[n++][len] = '\0';
            }
            p += len + (p[len] == ',');
        }
        return n;
    }
    hc_t c;
    json_object *o = NULL, *arr;
    if (hc_init(&c, proxy, NULL, NULL) == 0 && hc_do(&c, "GET", "/health", NULL) == 0 && c.status == 200 &&
        (o = json_tokener_parse(c.body.base)) != NULL && json_object_object_get_ex(o, "runtimes", &arr) &&
        json_object_is_type(arr, json_type_array) && json_object_array_length(arr) > 1) {
        for (size_t i = 0; i < json_object_array_length(arr) && n < max; i++) {
            const char *s = json_object_get_string(json_object_array_get_idx(arr, i));
            if (s != NULL && strlen(s) < 8)
                snprintf(names[n++], 8, "%s", s);
        }
    }
    json_object_put(o);
    hc_cleanup(&c);
    return n;
}

/* The targets under runsc, from its rows: reported, not asserted. */
static void print_runsc_targets(void)
{
    static const struct {
        const char *op;
        unsigned p;
        double max;
        const char *what;
    } goals[] = {
        {"execute", 50, 5, "execute p50 (warm)"},
        {"session create from pool", 50, 10, "create from the pool p50"},
        {"first execute after create", 50, 10, "first execute after create p50"},
    };
    int any = 0;
    for (size_t g = 0; g < sizeof(goals) / sizeof(goals[0]); g++) {
        for (size_t i = 0; i < nrows; i++) {
            row_t *r = &rows[i];
            if (strcmp(r->target, "runsc") != 0 || strncmp(r->op, goals[g].op, strlen(goals[g].op)) != 0 || r->n == 0)
                continue;
            double v = pct(r->ms, r->n, goals[g].p);
            if (!any)
                printf("\ntargets under runsc (through the proxy; reported, not asserted):\n");
            any = 1;
            printf("  %-32s %8.2f ms  (target <= %.0f ms: %s)\n", goals[g].what, v, goals[g].max,
                   v <= goals[g].max ? "met" : "missed");
        }
    }
}

/* ------------------------------------------------------------------------
 * Phase 3: K idle sessions, what they cost in memory, and what one more
 * session made and closed costs while they live.
 * ------------------------------------------------------------------------ */

static long long meminfo_kb(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    size_t klen = strlen(key);
    long long v = -1;

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = strtoll(line + klen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

typedef struct {
    const target_t *t;
    row_t *row;
    char (*ids)[64];
    double *mem; /* bytes per session, -1 unknown */
    atomic_long ok, mem_ok;
    char mem_err[256];
    pthread_mutex_t mu;
} idle_t;

static void on_idle_create(par_t *p, hc_t *c, long i)
{
    idle_t *s = p->ud;
    char err[256];

    if (sess_create(c, s->t, s->ids[i], err, sizeof(err)) != 0) {
        row_err(s->row, "%s", err);
        return;
    }
    row_ok(s->row, c->ms);
    atomic_fetch_add(&s->ok, 1);
}

static void on_idle_mem(par_t *p, hc_t *c, long i)
{
    idle_t *s = p->ud;
    char cid[80], kind[16], err[256];

    if (s->ids[i][0] == '\0')
        return;
    if (dk_session_container(s->ids[i], cid, kind, err, sizeof(err)) != 0 ||
        dk_mem_bytes(cid, &s->mem[i], err, sizeof(err)) != 0) {
        pthread_mutex_lock(&s->mu);
        if (s->mem_err[0] == '\0')
            snprintf(s->mem_err, sizeof(s->mem_err), "%s", err);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    atomic_fetch_add(&s->mem_ok, 1);
}

static void on_idle_delete(par_t *p, hc_t *c, long i)
{
    idle_t *s = p->ud;
    char err[256];

    if (s->ids[i][0] != '\0' && sess_delete(c, s->t, s->ids[i], err, sizeof(err)) != 0)
        fprintf(stderr, "sandgate-bench: delete of idle session %s: %s\n", s->ids[i], err);
}

#define CHURN_RUNS 30

/* One session made and closed at a time while k others are live, each end
 * timed: what a change costs a proxy that keeps many sessions (one that
 * wrote its whole state on each paid for every session). */
static void phase_churn(const target_t *t, long k)
{
    row_t *cr = row_new(t->name, "create, %ld sessions live", k);
    row_t *dr = row_new(t->name, "delete, %ld sessions live", k);
    char id[64], err[256];
    hc_t c;

    if (hc_init(&c, t->base, NULL, t->token) != 0) {
        cr->failed = dr->failed = 1;
        return;
    }
    for (int i = 0; i < CHURN_RUNS && !g_stop; i++) {
        pool_refilled(t, 1); /* a create from the warm pool, not one waiting for Docker */
        if (sess_create(&c, t, id, err, sizeof(err)) != 0) {
            row_err(cr, "%s", err);
            continue;
        }
        row_ok(cr, c.ms);
        if (sess_delete(&c, t, id, err, sizeof(err)) != 0)
            row_err(dr, "%s", err);
        else
            row_ok(dr, c.ms);
    }
    hc_cleanup(&c);
}

static void phase_idle(const target_t *t)
{
    row_t *r = row_new(t->name, "idle sessions (create, %ld parallel)", opt.clients);
    idle_t s = {.t = t, .row = r};
    par_t p = {.ud = &s, .count = opt.idle, .base = t->base, .token = t->token};
    long long before, after;
    double t0, secs, docker_sum = 0;
    char docker_txt[96] = "docker: skipped", host_txt[64] = "host: n/a";

    fprintf(stderr, "sandgate-bench: %s: %ld idle sessions\n", t->name, opt.idle);
    pthread_mutex_init(&s.mu, NULL);
    s.ids = calloc(opt.idle, sizeof(*s.ids));
    s.mem = calloc(opt.idle, sizeof(*s.mem));
    if (s.ids == NULL || s.mem == NULL) {
        r->failed = 1;
        goto Exit;
    }
    before = meminfo_kb("MemAvailable");
    p.fn = on_idle_create;
    t0 = now_ms();
    par_run(&p, opt.clients);
    secs = (now_ms() - t0) / 1e3;
    sleep_ms(BENCH_IDLE_SETTLE_MS);
    after = meminfo_kb("MemAvailable");

    if (dk.ok && !g_stop && atomic_load(&s.ok) > 0) {
        /* each thread reads Docker through its own handle (dk_*) */
        par_t m = {.fn = on_idle_mem, .ud = &s, .count = opt.idle, .base = t->base, .token = t->token};
        par_run(&m, opt.clients);
        for (long i = 0; i < opt.idle; i++)
            docker_sum += s.mem[i];
        if (atomic_load(&s.mem_ok) > 0)
            snprintf(docker_txt, sizeof(docker_txt), "%.1f MiB/session (docker, %ld read)",
                     docker_sum / atomic_load(&s.mem_ok) / 1048576.0, (long)atomic_load(&s.mem_ok));
        else
            snprintf(docker_txt, sizeof(docker_txt), "docker: no stats");
        if (s.mem_err[0] != '\0')
            row_err(r, "docker stats: %s", s.mem_err);
    }
    if (before > 0 && after > 0 && atomic_load(&s.ok) > 0)
        snprintf(host_txt, sizeof(host_txt), "%.1f MiB (host MemAvailable)",
                 (before - after) / 1024.0 / atomic_load(&s.ok));
    row_note(r, "%ld/%ld ok in %.1f s; %s; %s", (long)atomic_load(&s.ok), opt.idle, secs, docker_txt, host_txt);
    if (!g_stop && atomic_load(&s.ok) > 0)
        phase_churn(t, (long)atomic_load(&s.ok));

    p.fn = on_idle_delete;
    p.ignore_stop = 1;
    par_run(&p, opt.clients);
Exit:
    pthread_mutex_destroy(&s.mu);
    free(s.ids);
    free(s.mem);
}

/* ------------------------------------------------------------------------
 * Cleanup, report, main
 * ------------------------------------------------------------------------ */

static void on_cleanup_delete(par_t *p, hc_t *c, long i)
{
    reg_ent_t *e = &((reg_ent_t *)p->ud)[i];
    char err[256];

    if (sess_delete(c, e->t, e->id, err, sizeof(err)) == 0) {
        fprintf(stderr, "sandgate-bench: %s: session %s deleted at cleanup\n", e->t->name, e->id);
    } else if (c->status == 404) {
        reg_remove(e->t, e->id); /* asked twice, gone twice: it is gone */
    } else {
        fprintf(stderr, "sandgate-bench: %s: cannot delete session %s: %s\n", e->t->name, e->id, err);
    }
}

/* Deletes every session still registered. Returns how many are left. */
static size_t reg_cleanup(void)
{
    reg_ent_t *copy;
    size_t n;

    pthread_mutex_lock(&reg.mu);
    n = reg.n;
    copy = n ? malloc(n * sizeof(*copy)) : NULL;
    if (copy != NULL)
        memcpy(copy, reg.v, n * sizeof(*copy));
    pthread_mutex_unlock(&reg.mu);
    if (n > 0)
        fprintf(stderr, "sandgate-bench: deleting %zu session(s) left over\n", n);
    /* one target at a time: the handles of a par_run share one base URL */
    for (size_t i = 0; copy != NULL && i < n;) {
        size_t j = i;
        while (j < n && copy[j].t == copy[i].t)
            j++;
        par_t p = {.fn = on_cleanup_delete,
                   .ud = copy + i,
                   .count = (long)(j - i),
                   .base = copy[i].t->base,
                   .token = copy[i].t->token,
                   .ignore_stop = 1};
        par_run(&p, opt.clients);
        i = j;
    }
    free(copy);
    pthread_mutex_lock(&reg.mu);
    n = reg.n;
    pthread_mutex_unlock(&reg.mu);
    return n;
}

static void fmt_ms(char *out, size_t len, double v, int have)
{
    if (!have)
        snprintf(out, len, "-");
    else if (v < 10)
        snprintf(out, len, "%.2f", v);
    else
        snprintf(out, len, "%.1f", v);
}

static void print_table(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long long total = meminfo_kb("MemTotal");
    int any_err = 0;

    printf("\nsandgate-bench  lang=%s  n=%ld  clients=%ld  idle=%ld  (host: %ld cpus, %.1f GiB%s%s)\n", opt.lang->name,
           opt.n, opt.clients, opt.idle, cpus, total > 0 ? total / 1048576.0 : 0.0, dk.ok ? ", docker API " : "",
           dk.ok ? dk.version : "");
    printf("%-8s %-38s %8s %8s %8s %6s %6s  %s\n", "target", "operation", "p50 ms", "p99 ms", "mean ms", "count",
           "errors", "");
    for (size_t i = 0; i < nrows; i++) {
        row_t *r = &rows[i];
        char p50[16], p99[16], mean[16];
        double sum = 0;
        qsort(r->ms, r->n, sizeof(*r->ms), cmp_double);
        for (size_t k = 0; k < r->n; k++)
            sum += r->ms[k];
        fmt_ms(p50, sizeof(p50), r->n ? pct(r->ms, r->n, 50) : 0, r->n > 0);
        fmt_ms(p99, sizeof(p99), r->n ? pct(r->ms, r->n, 99) : 0, r->n > 0);
        fmt_ms(mean, sizeof(mean), r->n ? sum / r->n : 0, r->n > 0);
        printf("%-8s %-38s %8s %8s %8s %6zu %6zu  %s%s\n", r->target, r->op, p50, p99, mean, r->n, r->errors,
               row_failed(r) ? "FAILED " : "", r->note);
        any_err |= r->errors > 0;
    }
    print_runsc_targets();
    if (any_err) {
        printf("\nerrors (first of each):\n");
        for (size_t i = 0; i < nrows; i++)
            if (rows[i].errors > 0)
                printf("  %s / %s: %zu, first: %s\n", rows[i].target, rows[i].op, rows[i].errors, rows[i].first_err);
    }
    if (dk.ok)
        printf("\nwarm/cold: from each session's container label sandgate.kind (pool = warm).\n");
    else
        printf("\nwarm/cold: by latency (over %.0f ms = cold); Docker not used.\n", BENCH_COLD_MS);
    printf("Latencies are client wall time over keep-alive HTTP (one handle per client).\n");
}

/* Starts sandgate-relay (beside this program's binary) in front of the
 * proxy; its URL into url. Returns its pid, or -1 with err set. */
static pid_t relay_start(const char *argv0, const char *proxy, char *url, size_t urllen, char *err, size_t errlen)
{
    char exe[PATH_MAX], line[32];
    const char *slash;
    size_t dir;
    int fds[2];
    pid_t pid;
    FILE *f;
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

    if (n <= 0) {
        snprintf(exe, sizeof(exe), "%s", argv0);
        n = (ssize_t)strlen(exe);
    }
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    dir = slash != NULL ? (size_t)(slash - exe) + 1 : 0; /* the relay is built beside this program */
    snprintf(exe + dir, sizeof(exe) - dir, "sandgate-relay");
    if (pipe(fds) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    if ((pid = fork()) < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execl(exe, "sandgate-relay", proxy, (char *)NULL);
        fprintf(stderr, "sandgate-bench: cannot run %s: %s\n", exe, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    f = fdopen(fds[0], "r");
    if (f == NULL || fgets(line, sizeof(line), f) == NULL || atoi(line) <= 0) {
        snprintf(err, errlen, "sandgate-relay (%s) did not start", exe);
        if (f != NULL)
            fclose(f);
        else
            close(fds[0]);
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        return -1;
    }
    fclose(f);
    snprintf(url, urllen, "http://127.0.0.1:%d", atoi(line));
    return pid;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sandgate-bench [--proxy URL] [--gateway URL --token TOKEN] [--lang python|javascript]\n"
            "                      [-n N] [-c CLIENTS] [--idle-sessions K] [--runtimes LIST|none]\n"
            "                      [--skip-targets] [--skip-docker]\n"
            "                      [--overhead [--empty-token TOKEN] [--relay] [--redis URL]]  (the gateway over the\n"
            "                      proxy, side by side; --relay: and over a bare HTTP relay, sandgate-relay, started\n"
            "                      here; --redis: the gateway's, whose CPU is counted with the rest)\n"
            "defaults: --proxy http://127.0.0.1:8000 -n 200 -c 8 --idle-sessions 100, and every runtime\n"
            "the proxy offers (GET /health) side by side when it offers more than one\n");
}

static int parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* The numeric options (-n, -c, --idle-sessions): each a long in [min, max]. */
static const struct {
    int ch;
    long min, max;
    long *out;
} num_opts[] = {
    {'n', 1, 10000000, &opt.n},
    {'c', 1, 1024, &opt.clients},
    {'k', 0, 100000, &opt.idle},
};

/* Sets the numeric option ch from s: 0, or -1 when s is not a number in its range. */
static int parse_num_opt(int ch, const char *s)
{
    for (size_t i = 0; i < sizeof(num_opts) / sizeof(num_opts[0]); i++)
        if (num_opts[i].ch == ch)
            return parse_long(s, num_opts[i].min, num_opts[i].max, num_opts[i].out);
    return -1;
}

static void strip_slash(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '/')
        s[--n] = '\0';
}

static void make_run_id(void)
{
    unsigned char r[8] = {0};
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f != NULL ? fread(r, 1, sizeof(r), f) : 0;
    int o;

    if (f != NULL)
        fclose(f);
    if (got != sizeof(r)) { /* still distinct per process and moment */
        uint64_t x = (uint64_t)getpid() << 32 ^ (uint64_t)(now_ms() * 1000);
        memcpy(r, &x, sizeof(r));
    }
    o = snprintf(dk.run_id, sizeof(dk.run_id), "bench-%d-", (int)getpid());
    for (size_t i = 0; i < sizeof(r) && o + 3 < (int)sizeof(dk.run_id); i++)
        o += snprintf(dk.run_id + o, sizeof(dk.run_id) - o, "%02x", r[i]);
}

int main(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"proxy", required_argument, NULL, 'p'},
        {"gateway", required_argument, NULL, 'g'},
        {"token", required_argument, NULL, 't'},
        {"lang", required_argument, NULL, 'l'},
        {"idle-sessions", required_argument, NULL, 'k'},
        {"skip-docker", no_argument, NULL, 's'},
        {"overhead", no_argument, NULL, 'O'},
        {"empty-token", required_argument, NULL, 'E'},
        {"relay", no_argument, NULL, 'R'},
        {"redis", required_argument, NULL, 'D'},
        {"runtimes", required_argument, NULL, 'r'},
        {"skip-targets", no_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *lang = "python";
    char proxy[512], gateway[512], relay[64], err[512], rt_names[4][8], rt_bodies[4][96];
    target_t targets[2], rt_targets[4], relay_target;
    size_t ntargets = 0, nruntimes;
    int skip_targets = 0;
    struct sigaction sa;
    int ch, status = 0, overhead = 0, with_relay = 0;
    pid_t relay_pid = -1;
    const char *empty_token = NULL;
    size_t left;
    hc_t c;

    while ((ch = getopt_long(argc, argv, "n:c:h", lopts, NULL)) != -1) {
        switch (ch) {
        case 'p':
            opt.proxy = optarg;
            break;
        case 'g':
            opt.gateway = optarg;
            break;
        case 't':
            opt.token = optarg;
            break;
        case 'l':
            lang = optarg;
            break;
        case 's':
            opt.skip_docker = 1;
            break;
        case 'O':
            overhead = 1;
            break;
        case 'E':
            empty_token = optarg;
            break;
        case 'R':
            with_relay = 1;
            break;
        case 'D':
            opt.redis = optarg;
            break;
        case 'r':
            opt.runtimes = optarg;
            break;
        case 'T':
            skip_targets = 1;
            break;
        case 'n':
        case 'c':
        case 'k':
            if (parse_num_opt(ch, optarg) != 0)
                goto Usage;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            goto Usage;
        }
    }
    if (optind != argc || (opt.gateway != NULL) != (opt.token != NULL))
        goto Usage;
    for (size_t i = 0; i < sizeof(langs) / sizeof(langs[0]); i++)
        if (strcmp(langs[i].name, lang) == 0)
            opt.lang = &langs[i];
    if (opt.lang == NULL) {
        fprintf(stderr, "sandgate-bench: --lang %s: known are python and javascript\n", lang);
        return 2;
    }
    snprintf(opt.create_body, sizeof(opt.create_body), "{\"lang\":\"%s\"}", opt.lang->name);
    snprintf(opt.exec_body, sizeof(opt.exec_body), "{\"code\":\"%s\"}", opt.lang->code);
    snprintf(opt.big_body, sizeof(opt.big_body), "{\"code\":\"%s\"}", opt.lang->big_code);
    snprintf(opt.ephemeral_body, sizeof(opt.ephemeral_body), "{\"code\":\"%s\",\"lang\":\"%s\"}", opt.lang->code,
             opt.lang->name);
    snprintf(proxy, sizeof(proxy), "%s", opt.proxy);
    strip_slash(proxy);
    targets[ntargets++] = (target_t){"proxy", proxy, NULL, NULL};
    if (opt.gateway != NULL) {
        snprintf(gateway, sizeof(gateway), "%s", opt.gateway);
        strip_slash(gateway);
        targets[ntargets++] = (target_t){"gateway", gateway, opt.token, NULL};
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        fprintf(stderr, "sandgate-bench: curl_global_init failed\n");
        return 1;
    }
    make_run_id();

    /* the proxy must answer before anything is created */
    if (hc_init(&c, proxy, NULL, NULL) != 0 || hc_expect(&c, "GET", "/", NULL, 200, err, sizeof(err)) != 0) {
        fprintf(stderr, "sandgate-bench: the proxy at %s does not answer GET / (%s)\n", proxy,
                c.curl != NULL ? err : "cannot set up libcurl");
        hc_cleanup(&c);
        curl_global_cleanup();
        return 1;
    }
    hc_cleanup(&c);
    if (!opt.skip_docker && dk_setup(err, sizeof(err)) != 0)
        fprintf(stderr, "sandgate-bench: %s; Docker numbers will be missing\n", err);

    if (overhead && ntargets < 2) {
        fprintf(stderr, "sandgate-bench: --overhead needs --gateway and --token\n");
        goto Usage;
    }
    if (with_relay && !overhead) {
        fprintf(stderr, "sandgate-bench: --relay goes with --overhead\n");
        goto Usage;
    }
    if (with_relay) {
        if ((relay_pid = relay_start(argv[0], proxy, relay, sizeof(relay), err, sizeof(err))) < 0) {
            fprintf(stderr, "sandgate-bench: %s\n", err);
            return 1;
        }
        relay_target = (target_t){"relay", relay, NULL, NULL};
        opt.relay_pid = relay_pid;
    }
    if (overhead)
        phase_overhead(&targets[0], with_relay ? &relay_target : NULL, &targets[1], empty_token);
    if (relay_pid > 0) {
        kill(relay_pid, SIGTERM);
        waitpid(relay_pid, NULL, 0);
    }
    for (size_t i = 0; i < ntargets && !g_stop && !skip_targets && !overhead; i++) {
        phase_latency(&targets[i]);
        if (!g_stop)
            phase_throughput(&targets[i]);
    }
    nruntimes = overhead ? 0 : runtimes_to_run(proxy, rt_names, 4);
    for (size_t i = 0; i < nruntimes && !g_stop; i++) {
        snprintf(rt_bodies[i], sizeof(rt_bodies[i]), "{\"lang\":\"%s\",\"runtime\":\"%s\"}", opt.lang->name,
                 rt_names[i]);
        rt_targets[i] = (target_t){rt_names[i], proxy, NULL, rt_bodies[i]};
        phase_runtime(&rt_targets[i]);
        if (!g_stop)
            phase_throughput(&rt_targets[i]);
    }
    if (!g_stop && opt.idle > 0 && !overhead)
        phase_idle(&targets[0]);
    if (!g_stop && !opt.skip_docker)
        phase_docker();

    /* cleanup, whatever happened above */
    left = reg_cleanup();
    if (left > 0) {
        fprintf(stderr, "sandgate-bench: %zu session(s) could not be deleted\n", left);
        status = 1;
    }
    if (dk.ok && dk_sweep() != 0) {
        fprintf(stderr, "sandgate-bench: bench containers (label sandgate.bench=%s) may be left\n", dk.run_id);
        status = 1;
    }

    print_table();
    if (overhead)
        overhead_report();
    for (size_t i = 0; i < nrows; i++)
        if (row_failed(&rows[i]))
            status = 1;
    if (g_stop) {
        fprintf(stderr, "sandgate-bench: stopped by signal %d; numbers are partial\n", (int)g_stop);
        status = 1;
    }
    for (size_t i = 0; i < nrows; i++) {
        free(rows[i].ms);
        pthread_mutex_destroy(&rows[i].mu);
    }
    free(reg.v);
    curl_global_cleanup();
    return status;

Usage:
    usage(stderr);
    return 2;
}
