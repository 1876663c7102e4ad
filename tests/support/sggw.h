/*
 * sggw.h — support for the gateway tier's integration tests: a private
 * redis-server, sandgate-gateway processes, the sandgate-admin command line,
 * HTTP calls with bearer tokens (one at a time or many at once), and
 * read-only looks into the gateway's SQLite file and Redis keys.
 *
 * Real components only: redis-server from PATH, SANDGATE_GATEWAY_BIN and
 * SANDGATE_ADMIN_BIN (ctest sets both), real sockets on loopback.
 *
 * Every process started here dies with the test process (PR_SET_PDEATHSIG)
 * and is killed by an atexit handler should a test end without stopping it;
 * every temporary directory made here is removed by its stop function or,
 * failing that, by the same atexit handler.
 *
 * Threads: like sgtest.h. Functions documented as asserting use the SG_*
 * macros and may only be called from the cmocka test thread; sggw_http()
 * and the batch functions are safe from any thread.
 *
 * Ownership: every `char *` and `json_object *` returned is the caller's
 * (free() / json_object_put()) unless documented as borrowed.
 */
#ifndef SANDGATE_SGGW_H
#define SANDGATE_SGGW_H

#include "sgtest.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Temporary directories (sggw_mkdtemp, sggw_rmtree), sggw_wall() and the
 * plain-socket HTTP client (sggw_http*) are the core's: sgtest.h. */

/* ------------------------------------------------------------------------
 * redis-server
 * ------------------------------------------------------------------------ */

typedef struct sggw_redis sggw_redis_t;

/* Starts redis-server on a free loopback port in a private temporary
 * directory with --save '' --appendonly no --bind 127.0.0.1; returns once
 * it answers PING, or NULL (after printing why) within 10 s. */
sggw_redis_t *sggw_redis_start(void);
/* Kills the server (SIGKILL, after SIGCONT if stopped), reaps it, removes
 * its directory, frees r. NULL is fine. */
void sggw_redis_stop(sggw_redis_t *r);
/* An outage: SIGKILL and reap; port and directory stay for a restart. */
void sggw_redis_kill(sggw_redis_t *r);
/* Starts the server again on the same port (after sggw_redis_kill); waits
 * for PING. 0, or -1 after printing why. */
int sggw_redis_restart(sggw_redis_t *r);
/* A hang: SIGSTOP / SIGCONT. 0 or -1. */
int sggw_redis_pause(sggw_redis_t *r);
int sggw_redis_resume(sggw_redis_t *r);
bool sggw_redis_running(sggw_redis_t *r);
/* "redis://127.0.0.1:<port>", borrowed. */
const char *sggw_redis_url(const sggw_redis_t *r);
int sggw_redis_port(const sggw_redis_t *r);
void sggw_redis_print_log(sggw_redis_t *r, int lines);

/* One command on a fresh synchronous connection (hiredis' printf-like
 * format); the reply as text:
 *   status / string / error -> the text (an error as "ERR ..." etc.),
 *   integer -> its decimal digits, nil -> NULL,
 *   array -> its elements' texts joined by '\n' ("" when empty).
 * *ok (if not NULL) is set to 1 when the server answered without error.
 * Returns malloc'd text or NULL (nil, or no answer: then *ok = 0). */
char *sggw_redis_cmd(const sggw_redis_t *r, int *ok, const char *fmt, ...);
/* The same, asked again every 10 ms until its answer is not nil or
 * timeout_s pass: for what the gateway writes to Redis right after its
 * reply (a created session's live record). NULL at the timeout. */
char *sggw_redis_poll(const sggw_redis_t *r, double timeout_s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------------
 * sandgate-gateway
 * ------------------------------------------------------------------------ */

typedef struct sggw_gateway sggw_gateway_t;

typedef struct {
    const char *proxy_url;   /* SANDGATE_PROXY_URL; required */
    const char *redis_url;   /* SANDGATE_REDIS_URL; NULL or "": memory state */
    const char *data_dir;    /* SANDGATE_DATA_DIR; NULL: a private one, removed at stop */
    const char *admin_token; /* SANDGATE_ADMIN_TOKEN; NULL: a random one */
    int port;                /* 0: a free one */
    const char *const *env;  /* more "KEY=VALUE" (NULL-terminated, may be NULL); they
                              * override the defaults below */
} sggw_opts_t;

/* Starts SANDGATE_GATEWAY_BIN with HOST=127.0.0.1, PORT, the settings of o,
 * SANDGATE_REAPER_INTERVAL_MS=200 and SANDGATE_DB_WORKERS=1 (see sggw.c for
 * why) unless o->env says otherwise; the
 * rest of the environment is inherited. stdout and stderr go to a log file
 * in a private temporary directory. Returns once GET / answers 200, or NULL
 * (after printing why and the log's tail) within 30 s. */
sggw_gateway_t *sggw_gateway_start(const sggw_opts_t *o);
/* SIGTERM, wait up to 20 s, then SIGKILL; frees g and its temporary
 * directories (the data directory only if it was its own). Returns the wait
 * status (printing the log's tail when it is not 0), or -1 if it had to be
 * SIGKILLed. NULL returns 0. */
int sggw_gateway_stop(sggw_gateway_t *g);
/* Waits (up to 5 s) until the admin API lists no live session, so that no
 * session removal is still on its way through the state backend (call it
 * before a stop that is not about shutdown races). 0, or -1 on timeout. */
int sggw_gateway_quiesce(sggw_gateway_t *g);
/* SIGKILL, reap, free (a crash). */
void sggw_gateway_kill9(sggw_gateway_t *g);
bool sggw_gateway_alive(sggw_gateway_t *g);
pid_t sggw_gateway_pid(const sggw_gateway_t *g);
int sggw_gateway_port(const sggw_gateway_t *g);
/* Borrowed: "http://127.0.0.1:<port>", the data directory, the admin token. */
const char *sggw_gateway_url(const sggw_gateway_t *g);
const char *sggw_gateway_data_dir(const sggw_gateway_t *g);
const char *sggw_gateway_admin_token(const sggw_gateway_t *g);
void sggw_gateway_print_log(sggw_gateway_t *g, int lines);
/* 1 if the gateway's log holds `needle` (a plain substring). */
bool sggw_gateway_log_has(sggw_gateway_t *g, const char *needle);

/* Prints the log tails of every live gateway and redis-server (for a test
 * that failed). */
void sggw_print_logs(int lines);

/* ------------------------------------------------------------------------
 * sandgate-admin
 * ------------------------------------------------------------------------ */

/* Runs SANDGATE_ADMIN_BIN --data-dir data_dir ARGS... (args: NULL-
 * terminated). *out and *err (if not NULL) get stdout and stderr (malloc'd,
 * NUL-terminated). Returns the exit status, or -1 if it did not exit
 * normally within 30 s (or could not start). */
int sggw_admin_run(const char *data_dir, char **out, char **err, const char *const *args);
/* The same with the args inline: sggw_admin(dir, &out, "tenant", "list", NULL). */
int sggw_admin(const char *data_dir, char **out, ...) __attribute__((sentinel));

/* Asserting (test thread): creates tenant `name`, sets the "key=value"
 * quotas (NULL-terminated list, may be NULL) with `tenant set`, and creates
 * one token. Returns the token (malloc'd): stdout of `token create`, which
 * must be the token alone. */
char *sggw_new_tenant(const char *data_dir, const char *name, const char *const *quotas);
/* Asserting: `tenant set name k=v...`. */
void sggw_tenant_set(const char *data_dir, const char *name, const char *const *kv);
/* Asserting: the numeric id of tenant `name` (`tenant show --json`). */
int64_t sggw_tenant_id(const char *data_dir, const char *name);
/* Asserting: another token for an existing tenant. */
char *sggw_new_token(const char *data_dir, const char *tenant);

/* ------------------------------------------------------------------------
 * HTTP with a bearer token
 * ------------------------------------------------------------------------ */

/* The header list of a bearer token for sggw_http(): {"Authorization:
 * Bearer <token>", NULL}, in a.  Returns a->h. */
typedef struct {
    char line[160];
    const char *h[2];
} sggw_auth_t;
const char *const *sggw_auth(sggw_auth_t *a, const char *token);
/* Asserting: a new tenant `name` (no quotas, as sggw_new_tenant) whose
 * token is returned (free it) and put in a (a->h). */
char *sggw_new_tenant_auth(sggw_auth_t *a, const char *data_dir, const char *name);
/* method g's URL + path, with "Authorization: Bearer <token>" unless token
 * is NULL, json_body (may be NULL) as application/json. Default timeout. */
int sggw_call(const sggw_gateway_t *g, const char *token, const char *method, const char *path, const char *json_body,
              sgtest_reply_t *out);
/* The same with a JSON object body (not consumed) and a timeout (<= 0: default). */
int sggw_call_json(const sggw_gateway_t *g, const char *token, const char *method, const char *path, json_object *body,
                   long timeout_s, sgtest_reply_t *out);
/* sggw_call() / sggw_admin_call(), then the reply taken at once
 * (SG_TAKE_JSON / SG_TAKE_ERROR): asserting, test thread only. */
#define SGGW_CALL_JSON(g, token, method, path, json_body, st)                                                          \
    sggw__call_take((g), (token), (method), (path), (json_body), (st), NULL, 0, __FILE__, __LINE__)
#define SGGW_CALL_ERROR(g, token, method, path, json_body, st, code)                                                   \
    ((void)sggw__call_take((g), (token), (method), (path), (json_body), (st), (code), 1, __FILE__, __LINE__))
#define SGGW_ADMIN_JSON(g, method, path, json_body, st)                                                                \
    SGGW_CALL_JSON((g), sggw_gateway_admin_token(g), (method), (path), (json_body), (st))
#define SGGW_ADMIN_ERROR(g, method, path, json_body, st, code)                                                         \
    SGGW_CALL_ERROR((g), sggw_gateway_admin_token(g), (method), (path), (json_body), (st), (code))
json_object *sggw__call_take(const sggw_gateway_t *g, const char *token, const char *method, const char *path,
                             const char *json_body, long status, const char *code, int error, const char *file,
                             int line);
/* A call of the admin API with g's admin token. */
int sggw_admin_call(const sggw_gateway_t *g, const char *method, const char *path, const char *json_body,
                    sgtest_reply_t *out);
/* Asserting (test thread): the reply header `name` is a decimal integer >=
 * min (the headers are printed when not); returns it. */
long sggw_int_header(const sgtest_reply_t *r, const char *name, long min);

/* Many requests at once: sggw_batch_start() and sggw_parallel() of the
 * core's one batch (sgtest.h), through sggw_http(); a request's token (if
 * not NULL) goes as "Authorization: Bearer <token>". */
typedef sgtest_par_req_t sggw_par_req_t;
typedef sgtest_batch_t sggw_batch_t;
static inline void sggw_batch_join(sggw_batch_t *b)
{
    sgtest_batch_join(b);
}

/* ------------------------------------------------------------------------
 * The gateway's SQLite file, read-only
 * ------------------------------------------------------------------------ */

/* Opens <data_dir>/sandgate.db read-only, runs sql with the text
 * parameters (NULL-terminated, may be NULL) bound to ?1, ?2 ..., and
 * returns the first row's columns as text joined by '|' (NULL columns as
 * ""), malloc'd. NULL when there is no row; *err (if not NULL, size 256)
 * says why on failure ("" for no row). */
char *sggw_db_row(const char *data_dir, const char *sql, const char *const *params, char *err);
/* The same, once the usage journal is in the ledger: first the catch-up
 * every reader of the ledger does (sg_store_usage_catch_up, on a store of
 * its own: it waits for the write lock), then sggw_db_row. For what the
 * journal changes: the usage rows and the sessions' execution counts. */
char *sggw_ledger_row(const char *data_dir, const char *sql, const char *const *params, char *err);

/* Another writer of the file, as a sandgate-admin run or a busy DB thread
 * would be: sggw_db_writer_open() opens a connection of its own;
 * sggw_db_writer_hold() waits for its previous hold to end, takes the
 * write lock (BEGIN IMMEDIATE) and has a thread give it up (ROLLBACK)
 * hold_s seconds later (0, or -1 if the lock cannot be taken);
 * sggw_db_writer_close() waits for the release and closes the connection
 * (once the gateway has stopped, if the close must not disturb it). */
typedef struct sggw_db_writer sggw_db_writer_t;
sggw_db_writer_t *sggw_db_writer_open(const char *data_dir);
int sggw_db_writer_hold(sggw_db_writer_t *w, double hold_s);
void sggw_db_writer_close(sggw_db_writer_t *w);

/* ------------------------------------------------------------------------
 * Misc
 * ------------------------------------------------------------------------ */

/* A token of the right shape ("sgk_" + 8 of [a-z0-9] + "_" + 43 of
 * base64url) that no store issued; malloc'd. With public_id not NULL, that
 * public id is used (a wrong secret for an existing token). */
char *sggw_fake_token(const char *public_id);
/* The value of the sample line "name{labels} value" of Prometheus text
 * (labels exactly as given, "" for none) or -1 when absent. */
double sggw_metric(const char *text, const char *name, const char *labels);
/* Checks Prometheus text (a server's GET /metrics) with the Prometheus
 * client library's own parser (Debian's python3-prometheus-client, run by
 * /usr/bin/python3), and the process metrics each server reports
 * (common/procstat.h): each there once, of its type, with a value a
 * running process can have: started at or after started_after (seconds
 * since the epoch) and not later than now, some CPU time, some memory
 * resident, its descriptors open within their limit. Returns its CPU
 * seconds (process_cpu_seconds_total). */
double sggw_check_metrics(const char *text, double started_after);

/* ------------------------------------------------------------------------
 * Public API helpers (asserting: test thread only)
 * ------------------------------------------------------------------------ */

/* POST /sessions with json_body (NULL: {"lang":"python"}); asserts 200, a
 * 36-char session_id and status "active". Returns the id (malloc'd);
 * *reply (if not NULL) gets the parsed reply. */
char *sggw_create_session(const sggw_gateway_t *g, const char *token, const char *json_body, json_object **reply);
/* Asserts the fields every execution result has, and that they agree. */
void sggw_check_result(json_object *r);
/* POST path with body (consumed); asserts 200 and a well-formed result. */
json_object *sggw_post_result(const sggw_gateway_t *g, const char *token, const char *path, json_object *body);
/* POST /sessions/{sid}/execute {"code", "timeout" if > 0}; asserts as above. */
json_object *sggw_execute(const sggw_gateway_t *g, const char *token, const char *sid, const char *code,
                          double timeout);
/* DELETE /sessions/{sid}; asserts 200 {"status":"closed"}. */
void sggw_delete_session(const sggw_gateway_t *g, const char *token, const char *sid);
/* The end of a test's session: sggw_delete_session(), then sid and token
 * are freed. */
void sggw_session_done(const sggw_gateway_t *g, char *token, char *sid);
/* GET /sessions; asserts 200 and a "sessions" array of strings. Returns
 * the whole reply object. */
json_object *sggw_list_sessions(const sggw_gateway_t *g, const char *token);
/* Closes every session proxy p still has (what a failed test left);
 * not asserting. */
void sggw_proxy_close_all(sgtest_proxy_t *p);
/* true when GET /sessions of token lists sid. */
bool sggw_lists(const sggw_gateway_t *g, const char *token, const char *sid);
/* true when the admin API lists sid live for tenant (a look that is no use
 * of the session). */
bool sggw_admin_lists(const sggw_gateway_t *g, const char *tenant, const char *sid);
/* Polls (up to 10 s) the SQLite row of sid until it is closed; asserts its
 * close_reason and that closed_at is a unix time. */
void sggw_expect_db_closed(const char *data_dir, const char *sid, const char *reason);

/* The quotas of a tenant whose sessions close after 2 s without use
 * (lifetime 600 s): for sggw_new_tenant() and sggw_tenant_session(). */
extern const char *const sggw_idle_2s[];
/* Asserting: a new tenant `name` of g (quotas as sggw_new_tenant) and a
 * python session of its token: returns the token, *sid the session. */
char *sggw_tenant_session(const sggw_gateway_t *g, const char *name, const char *const *quotas, char **sid);
/* Asserting: n GET url with token at once (sggw_parallel, 30 s each). */
void sggw_parallel_get(sggw_par_req_t *reqs, size_t n, const char *url, const char *token);
/* A request of a batch: POST body (application/json) to url as token. */
sggw_par_req_t sggw_par_post(const char *url, const char *token, const char *body, long timeout_s);
/* reqs[0..n) each that same POST. */
void sggw_par_posts(sggw_par_req_t *reqs, size_t n, const char *url, const char *token, const char *body,
                    long timeout_s);
/* Polls GET /sessions of token (every 100 ms) until it is answered 200;
 * every other answer meanwhile must be `meanwhile` (0: any). Asserts that
 * it comes within timeout_s. */
void sggw_wait_allowed(const sggw_gateway_t *g, const char *token, double timeout_s, long meanwhile);
/* Polls (up to timeout_s) `sandgate-admin --json usage tenant` until its
 * "executions" is want; asserts it never passes want. */
void sggw_expect_ledger_execs(const char *data_dir, const char *tenant, int64_t want, double timeout_s);

/* ------------------------------------------------------------------------
 * Test bodies that show the servers' logs when they fail
 * ------------------------------------------------------------------------ */

/* SGGW_TEST(test_x) { ... } defines test_x, which records whether its body
 * ran to the end; sggw_after_test() (call it from the teardown) prints the
 * logs of every live gateway and redis-server when it did not. */
extern int sggw_test_ok;
#define SGGW_TEST(name)                                                                                                \
    static void name##_body(void **state);                                                                             \
    static void name(void **state)                                                                                     \
    {                                                                                                                  \
        sggw_test_ok = 0;                                                                                              \
        name##_body(state);                                                                                            \
        sggw_test_ok = 1;                                                                                              \
    }                                                                                                                  \
    static void name##_body(void **state)
/* The end of a gateway suite: stops the gateway (it must exit 0 on
 * SIGTERM, and its live state is checked first), redis-server and the proxy
 * (after closing its sessions), and checks that no container of proxy_id
 * remains (removing any). Clears the pointers. 0, or -1 on a finding. */
int sggw_stack_stop(sggw_gateway_t **gw, sggw_redis_t **redis, sgtest_proxy_t **proxy, const char *proxy_id);

/* Returns 1 when the last SGGW_TEST failed (after printing the logs), else 0. */
int sggw_after_test(void);

/* ------------------------------------------------------------------------
 * A suite's stack: proxy, optional redis-server, gateway
 * ------------------------------------------------------------------------ */

#define SGGW_STACK_MAX_ENV 16

typedef struct {
    bool redis;                     /* a private redis-server as the gateway's state;
                                     * false: memory state */
    const char *const *proxy_env;   /* the proxy's "KEY=VALUE" (NULL-terminated); NULL:
                                     * {"SANDGATE_POOL_SIZE=1"} */
    const char *const *gateway_env; /* sggw_opts_t.env (NULL-terminated, may be NULL) */
    const char *proxy_id;           /* NULL: sgtest_new_proxy_id() */
} sggw_stack_opts_t;

typedef struct {
    sgtest_proxy_t *proxy;
    char *proxy_id;
    sggw_redis_t *redis; /* NULL without opts.redis */
    sggw_gateway_t *gw;
    bool gw_restarted; /* the last sggw_stack_after_test() started a new gateway
                        * (a new data directory: the suite's tokens are gone) */
    /* a test's own servers and directory (a sggw_mkdtemp one): the test's
     * teardown stops and removes them, whatever happened */
    sggw_gateway_t *extra_gw;
    sggw_redis_t *extra_redis;
    char *extra_dir;
    /* the gateway reaches the proxy over its Unix socket, here (in a
     * directory of the stack's own), as deploy/run.sh sets them up; the
     * proxy's port stays for the tests' own calls */
    char *sock_dir;
    char proxy_sock[160]; /* <sock_dir>/proxy.sock */
    char proxy_url[180];  /* http://[unix:<proxy_sock>] */
    /* private: copies of the options, for restarts (the proxy's with its
     * SANDGATE_PROXY_SOCKET) */
    char *proxy_env[SGGW_STACK_MAX_ENV + 2];
    char *gateway_env[SGGW_STACK_MAX_ENV + 1];
} sggw_stack_t;

/* For a group setup: starts the stack of o (copied; the strings may be the
 * caller's locals) into st (zeroed first). 0, or -1 after printing why. */
int sggw_stack_start(sggw_stack_t *st, const sggw_stack_opts_t *o);
/* The usual gateway suite's stack: a proxy with SANDGATE_POOL_SIZE=pool,
 * a private redis-server when redis is true, a gateway with the defaults. */
int sggw_stack_start_pool(sggw_stack_t *st, bool redis, int pool);
/* Asserting: stops the test's own gateway st->extra_gw (cleared first),
 * which must exit 0 on SIGTERM; `what` names it in the failure. */
void sggw_stack_stop_extra(sggw_stack_t *st, const char *what);
/* For a test's teardown: sggw_after_test(); the test's own servers and
 * directory are stopped and removed; then every server of st that
 * died during the test is reported, its log's tail printed, and it is
 * started again with the same settings (the gateway with a new data
 * directory: gw_restarted). 0, or -1 when the test failed or a server died. */
int sggw_stack_after_test(sggw_stack_t *st);
/* For the group teardown: sggw_stack_stop() (the gateway exits 0, no
 * container of the proxy is left), frees what st holds. 0 or -1. */
int sggw_stack_end(sggw_stack_t *st);
/* The same as cmocka fixtures, for a suite whose group setup hands its
 * stack on as the group state (*state = &stack; cmocka passes it to every
 * test and teardown): sggw_stack_teardown() for cmocka_unit_test_teardown,
 * sggw_stack_group_teardown() for cmocka_run_group_tests_name. */
int sggw_stack_teardown(void **state);
int sggw_stack_group_teardown(void **state);

/* ------------------------------------------------------------------------
 * Two proxies, for the suites of placement and of several engines: each
 * with an id and a port of its own that a restart keeps, its warm pool at
 * SANDGATE_POOL_SIZE=1 and the suite's settings env[i].
 * ------------------------------------------------------------------------ */

typedef struct {
    sgtest_proxy_t *proxy[2]; /* NULL while killed */
    char *proxy_id[2];
    int port[2];
    const char *const *env[2]; /* NULL-terminated, at most 6 each; the suite's, kept as long as pp */
} sggw_pair_t;

/* Both started (new ids; env set by the caller), their warm pools full. 0,
 * or -1 after printing why. */
int sggw_pair_start(sggw_pair_t *pp);
/* Proxy i started again on its port, with its id; also in pp->proxy[i]
 * (NULL when it did not start). */
sgtest_proxy_t *sggw_pair_restart(sggw_pair_t *pp, int i);
/* SIGKILL of proxy i (a crash, as far as it can tell). */
void sggw_pair_kill9(sggw_pair_t *pp, int i);
/* The proxy (0, 1) whose own GET /sessions lists sid, or -1. Asserting: a
 * session listed by both fails the test. */
int sggw_pair_where(const sggw_pair_t *pp, const char *sid);
/* "<url 0><sep><url 1>" into buf. */
void sggw_pair_urls(const sggw_pair_t *pp, const char *sep, char *buf, size_t len);
/* For the group teardown: a proxy a test left killed is started again when
 * `restart` (it reconciles its leftovers); each closes its sessions and
 * must exit 0 on SIGTERM; no container of either may remain (those found
 * are removed). Frees the ids. 0 or -1. */
int sggw_pair_end(sggw_pair_t *pp, bool restart);

#endif
