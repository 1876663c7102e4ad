/*
 * sgtest_int.h — what the harness's own files share (not for suites).
 *
 * The harness in layers:
 *   sgtest.c   the core: clocks, child processes, ports, temporary
 *              directories, the registry of live servers (their logs on a
 *              failure, and killed at exit) and a server's start and stop
 *   sghttp.c   HTTP: one libcurl client, one plain-socket client, and the
 *              one batch of parallel requests
 *   sgassert.c assertions on replies and JSON
 *   sgdocker.c the Docker Engine API
 *   sgproxy.c  a sandgate-proxy of a test's own, and its session API
 *   sggw.c     the gateway tier's servers: redis-server, sandgate-gateway,
 *              the sandgate-admin command line
 *   sggw_api.c the gateway's public API with bearer tokens, its SQLite
 *              file, and a suite's whole stack (proxy, redis, gateway)
 */
#ifndef SANDGATE_SGTEST_INT_H
#define SANDGATE_SGTEST_INT_H

#include "sgtest.h"

#define SGTEST__BODY_CAP ((size_t)256 << 20) /* no reply we expect comes near this */
#define SGTEST__HEADER_CAP ((size_t)1 << 20)
#define SGTEST__STOP_DEADLINE_S 20.0

/* libcurl's global state, set up once before any thread uses it. */
void sgtest__curl_ready(void);

typedef struct sgtest__sent_watch sgtest__sent_watch_t;
/* One request for the libcurl client. */
typedef struct {
    const char *method;
    const char *url;
    const void *body; /* may be NULL */
    size_t len;
    const char *content_type;    /* may be NULL */
    const char *const *headers;  /* "Name: value", NULL-terminated; may be NULL */
    long timeout_s;              /* <= 0: SGTEST_HTTP_TIMEOUT */
    const char *unix_socket;     /* may be NULL */
    sgtest__sent_watch_t *watch; /* may be NULL */
    /* may be NULL: the body goes here as it arrives, not into the reply */
    size_t (*on_body)(char *p, size_t size, size_t n, void *ctx);
    void *ctx;
} sgtest__http_req_t;
/* 0 when an HTTP answer came back, -1 with out->error set. */
int sgtest__curl(const sgtest__http_req_t *q, sgtest_reply_t *out);

/* Forks and execs argv[0] (a path, or a name looked up in PATH when
 * use_path) with envp (NULL: environ), stdin from /dev/null, stdout and
 * stderr appended to log (or to the fds out_fd / err_fd when log is NULL),
 * in dir (may be NULL). The child dies with this process. */
pid_t sgtest__spawn(char *const *argv, char *const *envp, const char *log, int out_fd, int err_fd, const char *dir,
                    bool use_path);
/* The last `lines` lines of a file to stderr. */
void sgtest__print_tail(const char *path, int lines);
/* The whole file (malloc'd, NUL-terminated), or NULL. */
char *sgtest__slurp(const char *path, size_t *len);
/* 2 * nbytes random hex digits and a NUL into out. */
void sgtest__random_hex(char *out, size_t nbytes);

/* ---- servers: a child process with a log in a private directory ---- */

enum { SGTEST__PROXY = 1, SGTEST__GATEWAY = 2, SGTEST__REDIS = 4 };

typedef struct sgtest__server {
    sgtest_child_t child;
    int kind;    /* SGTEST__PROXY, ... */
    bool paused; /* SIGSTOPped */
    int port;
    char url[64]; /* "http://127.0.0.1:<port>" (redis: "redis://...") */
    char *dir;    /* private temporary directory, holds the log */
    char log[600];
    char name[192];                            /* "proxy <id>", "gateway", "redis-server" */
    void (*free_fn)(struct sgtest__server *s); /* frees the object s is the first member of */
} sgtest__server_t;

/* A new zeroed object of `size` bytes whose first member is a server: its
 * directory "<prefix>-XXXXXX" made, its log file <dir>/<logname>, freed by
 * free_fn (NULL: the directory and the object). NULL after printing why. */
void *sgtest__server_new(size_t size, int kind, const char *name, const char *prefix, const char *logname,
                         void (*free_fn)(sgtest__server_t *s));
/* The executable named by the environment variable `var` (ctest sets it),
 * or NULL after printing why. */
const char *sgtest__bin(const char *var);
/* Runs bin with the environment plus `set` ("KEY=VALUE", a later one
 * wins; the malloc'd array is freed here), its output to s's log, and waits
 * (sgtest__server_wait_ready) until it answers; then registers it as live
 * and returns s. On failure (printed) s is freed (sgtest__server_fail):
 * NULL. */
void *sgtest__server_exec(sgtest__server_t *s, const char *bin, const char **set, size_t nset, double deadline_s);
/* Polls GET <url>/ until it answers 200: 0; -1 (after printing why and the
 * log's tail, the child killed) when the child exits or deadline_s pass. */
int sgtest__server_wait_ready(sgtest__server_t *s, double deadline_s);
/* SIGTERM, wait up to 20 s, then SIGKILL. The wait status (the log's tail
 * printed when it is not 0), or -1 if it had to be SIGKILLed. */
int sgtest__server_stop(sgtest__server_t *s);
/* SIGKILL (after SIGCONT if stopped) and reap. */
void sgtest__server_kill(sgtest__server_t *s);
/* The end of a server: sgtest__server_stop() when gently, else
 * sgtest__server_kill(); then it leaves the registry and s->free_fn(s)
 * frees it. The wait status (gently), or 0. */
int sgtest__server_end(sgtest__server_t *s, bool gently);
/* "running", or how it ended; into buf. */
const char *sgtest__server_status(sgtest__server_t *s, char *buf, size_t len);
void sgtest__server_print_log(sgtest__server_t *s, int lines);
/* Removes its directory. */
void sgtest__server_free_dir(sgtest__server_t *s);
/* A start that failed: frees s through its free_fn; NULL. */
void *sgtest__server_fail(sgtest__server_t *s);

/* The registry of live servers: their logs when a test fails, and those
 * still running when the test process exits are killed. */
void sgtest__live_add(sgtest__server_t *s);
void sgtest__live_remove(sgtest__server_t *s);
/* Prints the logs of every live server of the kinds in mask; redis-server
 * gets half the lines. */
void sgtest__live_print(int mask, int lines);

#endif
