/*
 * sgtest.h — support for sandgate's integration tests.
 *
 * Everything here talks to real components: a real sandgate-proxy process
 * (found through SANDGATE_PROXY_BIN), the real Docker engine (DOCKER_HOST,
 * or the unix socket /var/run/docker.sock) and real HTTP over loopback with
 * libcurl. Nothing is mocked.
 *
 * Threads: every function may be called from the cmocka test thread. The
 * SG_* assertion macros (and any function documented as asserting) may only
 * be called from that thread, because a cmocka failure longjmps out of the
 * test. sgtest_http() and the batch functions are safe from any thread.
 *
 * Ownership: every `char *` and `json_object *` returned is the caller's
 * (free() / json_object_put()) unless documented as borrowed.
 *
 * This is the harness's core (processes, ports, HTTP, the parallel batch,
 * Docker, a proxy of a test's own); sggw.h stacks the gateway tier on it.
 * Which file holds what: sgtest_int.h.
 */
#ifndef SANDGATE_SGTEST_H
#define SANDGATE_SGTEST_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <sys/types.h>

#include <cmocka.h>
#include <json-c/json.h>

/* Default time budget of one HTTP call, seconds. */
#define SGTEST_HTTP_TIMEOUT 120L

/* Monotonic clock, seconds. */
double sgtest_now(void);
/* Wall clock, seconds. */
double sggw_wall(void);

/* A new private directory "$TMPDIR/<prefix>-XXXXXX" (malloc'd), or NULL. It
 * is registered: sggw_rmtree() removes it, or an atexit handler does. */
char *sggw_mkdtemp(const char *prefix);
/* Removes dir and everything below it; unregisters it. 0 or -1. */
int sggw_rmtree(const char *dir);

/* ------------------------------------------------------------------------
 * The proxy under test
 * ------------------------------------------------------------------------ */

typedef struct sgtest_proxy sgtest_proxy_t;

/* "sgtest-<pid>-<16 random hex digits>"; deploy/test.sh sweeps containers
 * whose sandgate.proxy label starts with "sgtest-". */
char *sgtest_new_proxy_id(void);
/* The sandbox image of lang as the test proxies find it: the environment's
 * SANDGATE_IMAGE_PREFIX (the proxies inherit it; default "sandgate/"),
 * lang, ":latest". A static buffer, one of 8 in turn. */
const char *sgtest_image(const char *lang);

/* Calls done(ctx) every every_s seconds until it is true (0) or timeout_s
 * have passed (-1). */
int sgtest_poll(bool (*done)(void *ctx), void *ctx, double timeout_s, double every_s);

/* A loopback port nobody listens on right now (bind port 0, read, close),
 * or -1. */
int sgtest_free_port(void);
/* A TCP socket (SOCK_CLOEXEC, and flags: 0 or SOCK_NONBLOCK) bound to a
 * free loopback port, not listening yet: its fd with *port set, or -1.
 * listen() on it to serve; left bound only, connects to it are refused and
 * nobody else can take the port meanwhile. */
int sgtest_bind_loopback(int flags, int *port);
/* A blocking TCP socket (SOCK_CLOEXEC) connected to 127.0.0.1:port, for a
 * test that writes raw bytes to a server: its fd, or -1. */
int sgtest_connect_loopback(int port);

/* A child process of a test, and how it ended. */
typedef struct {
    pid_t pid;
    bool reaped;
    int wstatus; /* -1 when it was reaped elsewhere */
} sgtest_child_t;
/* waitpid with flags (0 or WNOHANG); true once the child has ended. */
bool sgtest_child_reap(sgtest_child_t *c, int flags);
/* "exit status 3", "killed by signal 9 (Killed)", ... */
void sgtest_describe_exit(int wstatus, char *buf, size_t len);

/* 1 if environment entry "KEY=..." has the key of key_of ("KEY" or "KEY=V"). */
bool sgtest_env_key_is(const char *entry, const char *key_of);
/* environ with the "KEY=VALUE" entries of set applied in order (a later one
 * wins). The strings are borrowed: free only the array. */
char **sgtest_build_env(const char *const *set, size_t nset);

/* Starts SANDGATE_PROXY_BIN on a free loopback port with HOST, PORT and
 * SANDGATE_PROXY_ID set, plus the "KEY=VALUE" strings of extra_env (NULL
 * terminated, may be NULL; a "PORT=N" there picks the port, else a free
 * one); the rest of the environment is inherited.
 * stdout and stderr go to a log file in a private temporary directory.
 * Returns once GET / answers 200, or NULL (after printing why and the log's
 * tail) when the binary is missing, the child exits, or 60 s pass. */
sgtest_proxy_t *sgtest_proxy_start(const char *proxy_id, const char *const *extra_env);
/* Waits until every warm pool of the proxy's runtime is full (GET /health:
 * each of "pools" at "pool_size"), at most timeout_s. 0, or -1 after
 * printing the last /health and the log. The suites' fixtures call it, so
 * that no test runs against a pool still filling: under gVisor on 2 cores a
 * pool fill makes every sandbox start and interpreter start slow (a python
 * kernel took 7-11 s to start while the pools filled). */
int sgtest_proxy_pools_full(sgtest_proxy_t *p, double timeout_s);
#define SGTEST_POOLS_FULL_S 180
/* SIGTERM, wait up to 20 s, then SIGKILL. Frees p and its temporary files.
 * Returns the wait status, or -1 if the proxy had to be SIGKILLed. */
int sgtest_proxy_stop(sgtest_proxy_t *p);
/* SIGKILL at once (a crash, as far as the proxy can tell), reap, free. */
void sgtest_proxy_kill9(sgtest_proxy_t *p);
/* "http://127.0.0.1:<port>", borrowed. */
const char *sgtest_proxy_url(const sgtest_proxy_t *p);
const char *sgtest_proxy_id(const sgtest_proxy_t *p);
pid_t sgtest_proxy_pid(const sgtest_proxy_t *p);
/* true while the child has not exited (reaps it if it has). */
bool sgtest_proxy_alive(sgtest_proxy_t *p);
/* Prints whether the proxy still runs (or how it ended) and the last
 * `lines` lines of its log to stderr. */
void sgtest_proxy_print_log(sgtest_proxy_t *p, int lines);
/* Describes how the proxy ended ("exit status 1", "killed by signal 6
 * (Aborted)"), or "running". Borrowed, valid until the next call. */
const char *sgtest_proxy_status(sgtest_proxy_t *p);

/* ------------------------------------------------------------------------
 * HTTP
 * ------------------------------------------------------------------------ */

typedef struct {
    long status; /* HTTP status; 0 when the transfer itself failed */
    char *body;  /* always NUL-terminated (after body_len bytes) */
    size_t body_len;
    char *headers;   /* raw response header block(s) */
    double seconds;  /* wall time of the call */
    char error[256]; /* libcurl's message when status == 0 */
    int curl_code;   /* libcurl's CURLcode (0: the transfer completed); 0 for the plain-socket client */
} sgtest_reply_t;

/* One request; body may be NULL (len 0), content_type may be NULL.
 * timeout_s <= 0 means SGTEST_HTTP_TIMEOUT. Returns 0 when an HTTP answer
 * came back (any status), -1 otherwise (out->error says why). */
int sgtest_http(const char *method, const char *url, const void *body, size_t len, const char *content_type,
                long timeout_s, sgtest_reply_t *out);
void sgtest_reply_free(sgtest_reply_t *r);
/* Value of the last header `name` (case-insensitive), or NULL. */
char *sgtest_reply_header(const sgtest_reply_t *r, const char *name);

/* One request with extra header lines ("Name: value"; NULL-terminated, may
 * be NULL), over a plain socket (one connection per request): the reply is
 * taken as it comes, so that a malformed header is something a test can
 * look at rather than a failed transfer (NUL bytes of the header block show
 * as '\x1a'). Otherwise like sgtest_http(): 0 when an HTTP reply came back,
 * -1 with out->error set. Every sggw_* call of the gateway goes through it. */
int sggw_http(const char *method, const char *url, const void *body, size_t len, const char *content_type,
              const char *const *headers, long timeout_s, sgtest_reply_t *out);
/* A client that hangs up: sends one request (json_body as application/json,
 * may be NULL; extra header lines NULL-terminated, may be NULL) on a new
 * blocking connection and returns the socket without reading anything, or
 * -1 (after printing why). The caller close()s it to hang up, or reads the
 * reply with sggw_http_read_reply(). */
int sggw_http_open(const char *method, const char *url, const char *json_body, const char *const *headers);
/* Reads the whole reply from such a socket (until the server closes it,
 * or timeout_s) and closes it; out as sggw_http's. 0 or -1. */
int sggw_http_read_reply(int fd, long timeout_s, sgtest_reply_t *out);
/* sgtest_http() with extra header lines, as a typical client does it
 * (libcurl refuses replies with a NUL byte in a header). */
int sggw_http_curl(const char *method, const char *url, const void *body, size_t len, const char *content_type,
                   const char *const *headers, long timeout_s, sgtest_reply_t *out);

/* A POST of json_body (application/json) whose reply body is handed, as it
 * arrives, to on_body(ptr, 1, n, ctx) (a libcurl write callback: returning
 * less than n ends the transfer, as a client that hangs up), with the extra
 * header lines (NULL-terminated, may be NULL). out gets the status (also
 * when the transfer was cut short), the headers, curl_code and error; its
 * body stays empty. 0 when the transfer completed, -1 otherwise. */
int sgtest_post_stream(const char *url, const char *json_body, const char *const *headers, long timeout_s,
                       size_t (*on_body)(char *p, size_t size, size_t n, void *ctx), void *ctx, sgtest_reply_t *out);

/* A request to the proxy: base URL + path; json_body (may be NULL) is sent
 * as application/json. Default timeout. */
int sgtest_call(const sgtest_proxy_t *p, const char *method, const char *path, const char *json_body,
                sgtest_reply_t *out);
/* sgtest_call(), then the reply taken at once (SG_TAKE_JSON /
 * SG_TAKE_ERROR): asserting, test thread only. */
#define SG_CALL_JSON(p, method, path, json_body, st)                                                                   \
    sgtest__call_take((p), (method), (path), (json_body), (st), NULL, 0, __FILE__, __LINE__)
#define SG_CALL_ERROR(p, method, path, json_body, st, code)                                                            \
    ((void)sgtest__call_take((p), (method), (path), (json_body), (st), (code), 1, __FILE__, __LINE__))
json_object *sgtest__call_take(const sgtest_proxy_t *p, const char *method, const char *path, const char *json_body,
                               long status, const char *code, int error, const char *file, int line);
/* Same with a JSON object body (serialized here; not consumed). */
int sgtest_call_json(const sgtest_proxy_t *p, const char *method, const char *path, json_object *body, long timeout_s,
                     sgtest_reply_t *out);

/* ------------------------------------------------------------------------
 * Assertions on replies and JSON (test thread only). On failure they print
 * the expectation, the reply's status and body, and the tail of every live
 * proxy's log, then fail the test.
 * ------------------------------------------------------------------------ */

#define SG_ASSERT_STATUS(r, st) sgtest__assert_status((r), (st), __FILE__, __LINE__)
/* Parses r's body as JSON (strict UTF-8); the object is the caller's. */
#define SG_JSON(r) sgtest__json((r), __FILE__, __LINE__)
/* Asserts status, then returns the parsed body. */
#define SG_EXPECT_JSON(r, st) sgtest__expect_json((r), (st), __FILE__, __LINE__)
/* Field getters; the string is borrowed from obj. */
#define SG_STR(obj, key) sgtest__get_str((obj), (key), __FILE__, __LINE__)
#define SG_INT(obj, key) sgtest__get_int((obj), (key), __FILE__, __LINE__)
#define SG_BOOL(obj, key) sgtest__get_bool((obj), (key), __FILE__, __LINE__)
#define SG_DBL(obj, key) sgtest__get_double((obj), (key), __FILE__, __LINE__)
#define SG_OBJ(obj, key) sgtest__get_obj((obj), (key), json_type_object, __FILE__, __LINE__)
#define SG_ARR(obj, key) sgtest__get_obj((obj), (key), json_type_array, __FILE__, __LINE__)
/* An error reply: the status, and a body {"detail": non-empty string,
 * "code": code}; code NULL accepts any non-empty code. Returns the object. */
#define SG_EXPECT_ERROR(r, st, code) sgtest__expect_error((r), (st), (code), __FILE__, __LINE__)
/* The same, then the reply is freed (it is done with): SG_TAKE_JSON returns
 * the parsed body, SG_TAKE_ERROR checks the error and frees it too. */
#define SG_TAKE_JSON(r, st) sgtest__take_json((r), (st), __FILE__, __LINE__)
#define SG_TAKE_ERROR(r, st, code) sgtest__take_error((r), (st), (code), __FILE__, __LINE__)
/* Fails the test with a printf-style message, plus `obj` serialized if it
 * is not NULL, plus live proxies' log tails. */
#define SG_FAIL(obj, ...) sgtest__fail((obj), __FILE__, __LINE__, __VA_ARGS__)
/* Fails with the condition's text and a printf-style message (a literal
 * format first) when cond is false. */
#define SG_CHECK(cond, obj, ...)                                                                                       \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            sgtest__check_failed((obj), __FILE__, __LINE__, #cond, __VA_ARGS__);                                       \
    } while (0)

/* The fields every execution result has (docs/proxy-api.md), and that they
 * agree: success is exit 0 and not cut short, timed_out is reason
 * "timeout", state is one of kept/new/lost/none. */
#define SG_CHECK_RESULT_SHAPE(r) sgtest__check_result_shape((r), __FILE__, __LINE__)
void sgtest__check_result_shape(json_object *r, const char *file, int line);
/* An execution result's stdout is exactly want; a result is a success
 * (success and exit code 0). Asserting. */
void sgtest_expect_stdout(json_object *r, const char *want);
void sgtest_expect_success(json_object *r);
/* Both, then r is put. */
void sgtest_expect_ok(json_object *r, const char *want_stdout);
/* ------------------------------------------------------------------------
 * The proxy's session API, as every proxy suite calls it. Each expects 200
 * and a well-formed answer, and fails the test otherwise; results are
 * checked with SG_CHECK_RESULT_SHAPE. `seconds` (may be NULL) gets the
 * call's wall time; `libs` NULL and `timeout` <= 0 leave those fields out.
 * ------------------------------------------------------------------------ */

/* POST /sessions with {"lang": lang, "keep_template": false} plus the
 * fields of extra (may be NULL, consumed); expects a non-empty session_id
 * and status "active". Returns the new id (malloc'd); *reply_out, if not
 * NULL, gets the parsed reply. */
char *sgtest_create_session(const sgtest_proxy_t *p, const char *lang, json_object *extra, json_object **reply_out);
/* A JSON array of the NULL-terminated strings (none when libs is NULL). */
json_object *sgtest_libs_array(const char *const *libs);
/* POSTs body (consumed) to path and returns the execution result. */
json_object *sgtest_post_result(const sgtest_proxy_t *p, const char *path, json_object *body, double *seconds);
/* POST /sessions/{sid}/execute */
json_object *sgtest_run_code(const sgtest_proxy_t *p, const char *sid, const char *code, const char *const *libs,
                             int timeout, double *seconds);
/* POST /sessions/{sid}/execute of code (timeout 0: the default), whatever
 * the reply: it is in *r (sgtest_reply_free). */
void sgtest_execute_reply(const sgtest_proxy_t *p, const char *sid, const char *code, int timeout, sgtest_reply_t *r);
/* POST /sessions/{sid}/commands */
json_object *sgtest_run_cmd(const sgtest_proxy_t *p, const char *sid, const char *cmd, int timeout, double *seconds);
/* POST /execute */
json_object *sgtest_run_ephemeral(const sgtest_proxy_t *p, const char *lang, const char *code, const char *const *libs,
                                  int timeout, double *seconds);
/* GET /sessions: the ids (a strv, sgtest_strv_free). Asserting. */
char **sgtest_listed_sessions(const sgtest_proxy_t *p);
/* Every container Docker lists (all states) labelled as a pool container
 * of lang of the proxy proxy_id: its JSON array (json_object_put).
 * Asserting. */
json_object *sgtest_pool_containers(const char *proxy_id, const char *lang);
/* The idle pool containers of lang of p (proxy id proxy_id): labelled
 * kind=pool, running, and not the container of a session p lists; with
 * labelled_only, only those that carry a sandgate.session label; with
 * running (not NULL), only those in which a process has it in its command
 * line. A strv of ids. Asserting. */
char **sgtest_idle_pool(const sgtest_proxy_t *p, const char *proxy_id, const char *lang, bool labelled_only,
                        const char *running);
/* DELETE /sessions/{sid}: expects {"status":"closed"}, then the session's
 * container (cid, or when NULL the one labelled with proxy_id and sid,
 * looked up first) gone within removal_s. */
void sgtest_close_session(const sgtest_proxy_t *p, const char *proxy_id, const char *sid, const char *cid,
                          double removal_s);

/* ---- the harness of a suite that runs against one proxy of its own ---- */

/* Deletes every session p lists (what a failed test left). */
void sgtest_close_all_sessions(const sgtest_proxy_t *p);
/* For a test's teardown: 0 while *pp is alive. A proxy that died during the
 * test has its log printed and is replaced by restart() (the same id, so
 * it reconciles what the dead one left), and the test fails (-1). */
int sgtest_proxy_check_alive(sgtest_proxy_t **pp, sgtest_proxy_t *(*restart)(void));
/* For a group teardown (no assertions): closes what *pp lists, waits up to
 * removal_s for no container labelled with proxy_id to remain, stops the
 * proxy (*pp = NULL), which must exit 0 (under ASan a leak or an error
 * makes it fail), and force-removes whatever still carries proxy_id.
 * Returns 0, or -1 with each problem printed. */
int sgtest_proxy_finish(sgtest_proxy_t **pp, const char *proxy_id, double removal_s);

/* A proxy suite's harness: its one proxy, started again (same id and
 * settings: it reconciles what a dead one left) when it died in a test. */
#define SGTEST_SUITE_MAX_ENV 16
typedef struct {
    sgtest_proxy_t *proxy;
    char *proxy_id;
    double removal_s;                    /* teardown: how long closed sessions' containers may take to go */
    void (*on_start)(sgtest_proxy_t *p); /* may be NULL: called after every start */
    /* private: copies of the settings, for restarts */
    char *env[SGTEST_SUITE_MAX_ENV + 1];
} sgtest_suite_t;
/* For a group setup: a new proxy id, then the proxy with the "KEY=VALUE"
 * settings of env (NULL-terminated, copied). Set removal_s and on_start
 * first. 0, or -1 after printing why. */
int sgtest_suite_start(sgtest_suite_t *s, const char *const *env);
/* The same with the one setting SANDGATE_POOL_SIZE=pool. */
int sgtest_suite_start_pool(sgtest_suite_t *s, int pool);
/* For a test's teardown: sgtest_proxy_check_alive() (a proxy that died
 * fails the test, -1, and is started again). */
int sgtest_suite_after_test(sgtest_suite_t *s);
/* For the group teardown: sgtest_proxy_finish() (sessions closed, no
 * container left, exit status 0), then what s holds is freed. 0 or -1. */
int sgtest_suite_end(sgtest_suite_t *s);
/* The group teardown of a suite whose last test leaves nothing to close:
 * stops the proxy (its exit status counts only with check_exit), then
 * force-removes (-1) whatever still carries its id, frees what s holds. */
int sgtest_suite_stop(sgtest_suite_t *s, bool check_exit);
/* The same as cmocka fixtures, for a suite whose group setup sets
 * *state = &suite (cmocka hands it to every test and teardown). */
int sgtest_suite_teardown(void **state);
int sgtest_suite_group_teardown(void **state);

/* snprintf that must fit (the test fails otherwise). */
void pathf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

void sgtest__assert_status(const sgtest_reply_t *r, long status, const char *file, int line);
json_object *sgtest__json(const sgtest_reply_t *r, const char *file, int line);
json_object *sgtest__expect_json(const sgtest_reply_t *r, long status, const char *file, int line);
const char *sgtest__get_str(json_object *o, const char *key, const char *file, int line);
int64_t sgtest__get_int(json_object *o, const char *key, const char *file, int line);
bool sgtest__get_bool(json_object *o, const char *key, const char *file, int line);
double sgtest__get_double(json_object *o, const char *key, const char *file, int line);
json_object *sgtest__get_obj(json_object *o, const char *key, json_type type, const char *file, int line);
json_object *sgtest__expect_error(const sgtest_reply_t *r, long status, const char *code, const char *file, int line);
json_object *sgtest__take_json(sgtest_reply_t *r, long status, const char *file, int line);
void sgtest__take_error(sgtest_reply_t *r, long status, const char *code, const char *file, int line);
void sgtest__fail(json_object *o, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), noreturn));
void sgtest__check_failed(json_object *o, const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 5, 6), noreturn));

/* Percent-encodes s for a URL query value (malloc'd). */
char *sgtest_urlencode(const char *s);

/* A copy of o's non-empty string `key`; then o goes to *keep, or is put
 * when keep is NULL. Asserting. */
#define SG_TAKE_ID(o, key, keep) sgtest__take_id((o), (key), (keep), __FILE__, __LINE__)
char *sgtest__take_id(json_object *o, const char *key, json_object **keep, const char *file, int line);

/* true when s[0..len) is valid UTF-8. */
bool sgtest_utf8_valid(const char *s, size_t len);
/* true when the array `arr` holds the string `s`. */
bool sgtest_json_array_has_string(json_object *arr, const char *s);

/* ------------------------------------------------------------------------
 * Docker Engine API (DOCKER_HOST "unix://PATH" or "tcp://HOST:PORT",
 * default unix:///var/run/docker.sock), versioned with the Api-Version that
 * GET /_ping reports. Functions return -1 / NULL on transport errors.
 * ------------------------------------------------------------------------ */

/* Raw call: path starts with "/" and gets the "/v<api>" prefix. */
int sgtest_docker_call(const char *method, const char *path, const char *json_body, sgtest_reply_t *out);
/* Containers (all=1) carrying every "key=value" label of the NULL-terminated
 * list: the JSON array of GET /containers/json. */
json_object *sgtest_docker_list(const char *const *labels);
/* Containers labelled sandgate.proxy=<proxy_id>; -1 on error. */
int sgtest_docker_count(const char *proxy_id);
/* The single container of session <session_id> owned by <proxy_id>; its
 * full Id (malloc'd) or NULL when there is not exactly one. */
char *sgtest_docker_session_container(const char *proxy_id, const char *session_id);
/* Whether the single container of that session runs on runsc (gVisor), as
 * its sandgate.runtime label says; false when there is no such container. */
bool sgtest_docker_session_on_runsc(const char *proxy_id, const char *session_id);
/* GET /containers/{id}/json: the object, or NULL when it does not exist
 * (*status gets the HTTP status when status is not NULL). */
json_object *sgtest_docker_inspect(const char *id, long *status);
/* true/false, or -1 on a transport error. */
int sgtest_docker_exists(const char *id);
/* Polls (every 50 ms) until container id no longer exists. Returns 0 and
 * sets *waited (if not NULL) to the seconds it took, or -1 when timeout_s
 * passed or Docker failed. */
int sgtest_docker_wait_gone(const char *id, double timeout_s, double *waited);
/* Polls until exactly `want` containers carry every label of `labels`.
 * Returns the last count seen (so != want means the deadline passed). */
int sgtest_docker_wait_count(const char *const *labels, int want, double timeout_s);
/* Ids (malloc'd, NULL-terminated array, free with sgtest_strv_free) of the
 * containers carrying every label of `labels`; NULL on error. */
char **sgtest_docker_ids(const char *const *labels);
/* Whether a process of container cid has `needle` in its command line, as
 * the container's own kernel lists them (a docker exec reading /proc;
 * GET /top asks the runtime, and runsc answers with the host's processes). */
bool sgtest_docker_container_runs(const char *cid, const char *needle);
void sgtest_strv_free(char **v);
bool sgtest_strv_has(char *const *v, const char *s);
size_t sgtest_strv_len(char *const *v);
/* Asserts (test thread only) the sandbox defaults on an inspected
 * container: no network, all capabilities dropped, no-new-privileges,
 * read-only root, not privileged, Memory == MemorySwap > 0, PidsLimit > 0,
 * NanoCpus > 0, a non-root Config.User, or the agent's 0:0 with no more
 * than CAP_SETUID, CAP_SETGID and CAP_SETPCAP added (agent/creds.h). */
#define SG_ASSERT_HARDENED(c) sgtest__assert_hardened((c), __FILE__, __LINE__)
void sgtest__assert_hardened(json_object *c, const char *file, int line);
/* Walks "A.B.C" through nested objects; borrowed, NULL if absent. */
json_object *sgtest_jpath(json_object *o, const char *dotted);

/* Force-removes (with volumes) every container labelled
 * sandgate.proxy=<proxy_id>. Returns how many were removed, -1 on error. */
int sgtest_docker_remove_all(const char *proxy_id);
/* Removes the Docker network `name` (a test's own: a proxy started with
 * SANDGATE_SANDBOX_NETWORK=name makes it). 0 when removed or already
 * gone, -1 (after printing why) otherwise. */
int sgtest_docker_network_remove(const char *name);

/* ------------------------------------------------------------------------
 * Parallel requests: one thread per request; every thread waits until all
 * have started, so that the requests leave together.
 * ------------------------------------------------------------------------ */

typedef struct {
    /* in */
    const char *method;
    const char *url;   /* borrowed */
    const char *token; /* borrowed; NULL: no Authorization header */
    const void *body;  /* borrowed, may be NULL */
    size_t body_len;
    const char *content_type;
    long timeout_s;
    /* out */
    sgtest_reply_t reply;     /* "not sent" when the batch could not start */
    int rc;                   /* the client's return */
    double started, finished; /* sgtest_now() around the call */
    double sent_at;           /* when the request was fully sent, or 0 */
} sgtest_par_req_t;

typedef struct sgtest_batch sgtest_batch_t;

/* Starts every request at once through libcurl (sgtest_http), or through
 * the plain-socket client (sggw_http: what the gateway suites use); NULL
 * if threads cannot start (those already started are released without
 * sending and joined first). */
sgtest_batch_t *sgtest_batch_start(sgtest_par_req_t *reqs, size_t n);
sgtest_batch_t *sggw_batch_start(sgtest_par_req_t *reqs, size_t n);
/* Waits until every request of the batch was fully sent (or finished).
 * Returns 0, or -1 when timeout_s passed first. */
int sgtest_batch_wait_sent(sgtest_batch_t *b, double timeout_s);
/* How many requests of the batch have their reply (or failed) by now. */
size_t sgtest_batch_finished(sgtest_batch_t *b);
/* Joins every thread and frees b (the requests' replies stay). */
void sgtest_batch_join(sgtest_batch_t *b);
/* Start + join. Returns 0, or -1 if the batch could not start. */
int sgtest_parallel(sgtest_par_req_t *reqs, size_t n);
int sggw_parallel(sgtest_par_req_t *reqs, size_t n);
/* When a finished batch of n (>= 1) requests ran: the earliest and latest
 * start and end among them (sgtest_now() times). */
typedef struct {
    double first_start, last_start, first_end, last_end;
} sgtest_span_t;
sgtest_span_t sgtest_batch_span(const sgtest_par_req_t *reqs, size_t n);
/* Every request of a finished batch answered 200 with an execution result
 * that passes shape (NULL: not checked), succeeded and printed want_stdout;
 * the replies are freed. Asserting. */
void sgtest_batch_expect_ok(sgtest_par_req_t *reqs, size_t n, void (*shape)(json_object *r), const char *want_stdout);

#endif
