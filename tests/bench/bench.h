/*
 * bench.h — what the files of sandgate-bench share: the options, the
 * keep-alive HTTP client, the result rows, the registry of live sessions,
 * the session API, the runner of parallel work, and the Docker floors.
 *
 *   sandgate-bench.c  options, phases 1-3 (latency, throughput, idle), report, main
 *   bench_client.c    HTTP client, rows, registry, session API, parallel runner
 *   bench_docker.c    Docker through the proxy's own client (proxy/docker/docker.h),
 *                     phase 4 (the engine's floors)
 */
#ifndef SANDGATE_BENCH_H
#define SANDGATE_BENCH_H

#include <curl/curl.h>
#include <json-c/json.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/types.h>

#include "buf.h"

#define BENCH_TIMEOUT_S 120L      /* every request, proxy and Docker alike */
#define BENCH_MAX_BODY (8u << 20) /* cap on any reply body we keep */
#define BENCH_COLD_MS 100.0       /* when Docker cannot say: a pool take is ~1 ms */
#define BENCH_WARMUP 10           /* executes before the timed ones */
#define BENCH_TP_SECONDS 5.0      /* throughput phase wall time */
#define BENCH_TP_MAX_EXEC 1000000 /* a bound on the phase, not its normal end */
#define BENCH_IDLE_SETTLE_MS 3000 /* lets the pool refill before MemAvailable */
#define BENCH_FLOOR_ONCE_RUNS 10
#define BENCH_FLOOR_EXEC_RUNS 20
#define MAX_ROWS 64

/* The signal that asked for a stop, 0 while none did. */
extern volatile sig_atomic_t g_stop;
double now_ms(void);
/* Sleeps ms milliseconds, or less when a stop was asked for. */
void sleep_ms(long ms);

/* ---- HTTP client: one easy handle, kept alive across requests ---- */

typedef struct {
    CURL *curl;
    struct curl_slist *hdr_plain, *hdr_json;
    char base[512];
    sg_buf_t body; /* capped at BENCH_MAX_BODY; NUL-terminated */
    long status;   /* 0 when the transfer itself failed */
    double ms;     /* wall time of the last request */
    char errbuf[CURL_ERROR_SIZE];
} hc_t;

/* base: "http://host:port" (no trailing slash); unix_socket may be NULL;
 * token adds "Authorization: Bearer <token>" when not NULL. */
int hc_init(hc_t *c, const char *base, const char *unix_socket, const char *token);
void hc_cleanup(hc_t *c);
/* One request; json (may be NULL) goes as application/json. Returns 0 when
 * an HTTP reply came back (any status; c->status, c->body), -1 when the
 * transfer failed (c->errbuf says why). */
int hc_do(hc_t *c, const char *method, const char *path, const char *json);
/* "HTTP 503: {...}" or the transport error, for error reports. */
void hc_describe(const hc_t *c, char *err, size_t len);
/* Does the request and checks the status; err gets the description
 * otherwise. */
int hc_expect(hc_t *c, const char *method, const char *path, const char *json, long want, char *err, size_t errlen);

/* ---- result rows: one per line of the final table ---- */

typedef struct {
    char target[16];
    char op[64];
    pthread_mutex_t mu;
    double *ms;
    size_t n, cap;
    size_t errors;
    char first_err[240];
    char note[256];
    int failed; /* failed entirely for a reason not counted in errors */
} row_t;

extern row_t rows[MAX_ROWS];
extern size_t nrows;

row_t *row_new(const char *target, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void row_ok(row_t *r, double ms);
void row_err(row_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void row_note(row_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cmp_double(const void *a, const void *b);
/* Nearest-rank percentile of the sorted samples. */
double pct(const double *v, size_t n, unsigned p);
int row_failed(const row_t *r);

/* ---- options, targets, languages ---- */

typedef struct {
    const char *name;
    const char *code;         /* the trivial snippet */
    const char *big_code;     /* prints BIG_RESULT_BYTES - 1 'x' and a newline */
    const char *once_argv[4]; /* the interpreter running it once */
} lang_t;

typedef struct {
    const char *name;        /* "proxy", "gateway"; or a runtime's name ("runc", "runsc") */
    const char *base;        /* URL without trailing slash */
    const char *token;       /* NULL: no Authorization header */
    const char *create_body; /* POST /sessions body; NULL: opt.create_body */
} target_t;

typedef struct {
    const char *proxy;
    const char *gateway;
    const char *token;
    const lang_t *lang;
    long n, clients, idle;
    int skip_docker;
    char exec_body[128];      /* {"code":"print(1)"} */
    char big_body[128];       /* {"code": lang's big_code} */
    char ephemeral_body[160]; /* {"code":"print(1)","lang":"python"} */
    char create_body[64];     /* {"lang":"python"} */
    const char *runtimes;     /* --runtimes: "runc,runsc", "none"; NULL: those the proxy offers */
    const char *redis;        /* --redis: the gateway's Redis, its CPU read by INFO; NULL: not read */
    pid_t relay_pid;          /* sandgate-relay started here (--relay), its CPU read by /proc; 0: none */
} opt_t;

extern opt_t opt;

/* ---- registry of live sessions, so that every exit path deletes them ---- */

typedef struct {
    const target_t *t;
    char id[64];
} reg_ent_t;

typedef struct {
    pthread_mutex_t mu;
    reg_ent_t *v;
    size_t n, cap;
} reg_t;

extern reg_t reg;
void reg_add(const target_t *t, const char *id);
void reg_remove(const target_t *t, const char *id);

/* ---- session API ---- */

/* Ids go into URLs: accept only what a uuid or a Docker id uses, and only
 * up to max bytes (what the buffer it is copied into holds, minus the NUL). */
int id_ok(const char *s, size_t max);
/* POST /sessions (t->create_body, else opt.create_body). On success copies
 * the id (registered for cleanup). */
int sess_create(hc_t *c, const target_t *t, char id[64], char *err, size_t errlen);
/* DELETE /sessions/{id}; only a 200 takes the session off the registry. */
int sess_delete(hc_t *c, const target_t *t, const char *id, char *err, size_t errlen);
/* Waits (at most a minute) until the warm pool of opt.lang behind px holds
 * want containers (want < 0: is full), by its GET /health; at once for a
 * target that does not say. */
void pool_refilled(const target_t *px, long want);
/* POST path with body; the reply must be 200 with stdout exactly "1\n".
 * agent_ms (may be NULL) gets the reply's execution_time in ms, or -1. */
int exec_check(hc_t *c, const char *path, const char *body, double *agent_ms, char *err, size_t errlen);
/* The stdout of a run of opt.big_body: a result of this many bytes. */
#define BIG_RESULT_BYTES 1000000
/* exec_check of opt.big_body: its stdout whole. */
int exec_check_big(hc_t *c, const char *path, char *err, size_t errlen);

/* ---- running a function over indexes 0..count-1 on `threads` client
 * threads, each with its own handle to base ---- */

typedef struct par par_t;
struct par {
    void (*fn)(par_t *p, hc_t *c, long i);
    void *ud;
    long count;
    atomic_long next;
    const char *base, *sock, *token;
    int ignore_stop; /* cleanup work runs even after a signal */
};
void par_run(par_t *p, long threads);

/* ---- Docker ---- */

typedef struct {
    int ok;           /* /_ping answered */
    int one_shot;     /* API >= 1.41: stats without the second sample */
    char version[16]; /* the engine's API version, "1.41" */
    char run_id[48];  /* value of the sandgate.bench label */
} dk_t;
extern dk_t dk;

/* Reads DOCKER_HOST, pings, learns the API version. 0 or -1 (err). */
int dk_setup(char *err, size_t errlen);
/* The container of a session: its Id and its sandgate.kind label ("pool",
 * "session", "ephemeral"). 0, or -1 when there is not exactly one. The
 * calling thread's own Docker handle is used. */
int dk_session_container(const char *sid, char cid[80], char kind[16], char *err, size_t errlen);
/* Memory a container uses without its reclaimable page cache. */
int dk_mem_bytes(const char *cid, double *bytes, char *err, size_t errlen);
/* Removes every container labelled sandgate.bench=<run id>. Returns how
 * many could not be removed (or -1 when listing failed). */
int dk_sweep(void);
/* Phase 4: floors on the Docker engine itself. */
void phase_docker(void);

/* ---- CPU (bench_cpu.c): what each part of the stack used, in CPU seconds,
 * read before and after a stretch of work; -1 where it cannot be read ---- */

enum { CPU_MACHINE, CPU_PROXY, CPU_GATEWAY, CPU_REDIS, CPU_RELAY, CPU_BENCH, CPU_PARTS };
typedef struct {
    hc_t proxy, gateway; /* GET /metrics: process_cpu_seconds_total */
    const char *redis_url;
    pid_t relay_pid;
} cpu_src_t;
/* gw may be NULL. 0, or -1 when a client cannot be set up. */
int cpu_src_init(cpu_src_t *s, const target_t *px, const target_t *gw);
void cpu_src_cleanup(cpu_src_t *s);
/* The machine's busy time (/proc/stat: the bench runs beside the stack),
 * the proxy's and the gateway's (their /metrics), Redis's (INFO, opt.redis),
 * the relay's (/proc/<pid>/stat) and this program's (getrusage). */
void cpu_sample(cpu_src_t *s, double out[CPU_PARTS]);

/* --overhead (bench_overhead.c): the gateway over the proxy side by side:
 * execute latency alternating, throughput (the targets taking turns),
 * time to interactive, GET /sessions of the tenant of empty_token (NULL:
 * skipped); relay (may be NULL): sandgate-relay in front of the proxy, its
 * execute latency and throughput measured too, the floor of one more HTTP
 * hop. overhead_report() prints the summary after the table. */
void phase_overhead(const target_t *px, const target_t *relay, const target_t *gw, const char *empty_token);
void overhead_report(void);

#endif
