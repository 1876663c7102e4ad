/*
 * test_proxy_restart.c — sessions survive their proxy (docs/proxy-api.md,
 * "Restarts"): a proxy killed with SIGKILL (a crash as far as it can tell)
 * and started again with the same SANDGATE_PROXY_ID and state directory
 * adopts its sessions — same ids, settings, interpreter state and files —
 * removes its other leftovers (pool containers), and answers 404
 * session_lost for sessions whose sandbox did not survive. A second proxy
 * with the id of a live one refuses to start and touches nothing. SIGUSR2
 * leaves the sessions for the next proxy; SIGTERM removes everything.
 *
 * Real proxies, real containers, on the harness's default runtime (runsc
 * where the engine offers it; the .runc variant runs it on runc).
 */
#include "sgtest.h"
#include "sgrun.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define REMOVAL_S 15.0 /* a removed container (and its runsc processes) is gone within this */
#define ADOPT_S 60.0   /* an adopted session answers within this */
#define HELD_EXIT 3    /* the exit status of a proxy whose id is held */

typedef struct {
    char *id_x, *id_y;
    char *dir; /* the state directory */
    int pool;  /* SANDGATE_POOL_SIZE (0: no pool, the tests are lighter) */
    sgtest_proxy_t *x, *y;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -1;
    f->id_x = sgtest_new_proxy_id();
    f->id_y = sgtest_new_proxy_id();
    f->dir = sggw_mkdtemp("sgtest-restart");
    if (f->id_x == NULL || f->id_y == NULL || f->dir == NULL)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    sgtest_proxy_stop(f->x);
    sgtest_proxy_stop(f->y);
    int rc = 0;
    const char *ids[] = {f->id_x, f->id_y};
    for (size_t i = 0; i < 2; i++) {
        int removed = sgtest_docker_remove_all(ids[i]);
        if (removed > 0)
            fprintf(stderr, "teardown: force-removed %d leftover container(s) of %s\n", removed, ids[i]);
        char path[160];
        sgtest_reply_t r;
        snprintf(path, sizeof(path), "/containers/sandgate-lease-%s?force=1", ids[i]);
        if (sgtest_docker_call("DELETE", path, NULL, &r) == 0 && r.status == 204)
            fprintf(stderr, "teardown: force-removed the lease of %s\n", ids[i]);
        sgtest_reply_free(&r);
        if (sgtest_docker_count(ids[i]) != 0) {
            fprintf(stderr, "teardown: containers of %s cannot be removed\n", ids[i]);
            rc = -1;
        }
    }
    sggw_rmtree(f->dir);
    free(f->dir);
    free(f->id_x);
    free(f->id_y);
    free(f);
    return rc;
}

static sgtest_proxy_t *start(fixture_t *f, const char *id)
{
    char dir_kv[600], pool_kv[64];
    snprintf(dir_kv, sizeof(dir_kv), "SANDGATE_PROXY_STATE_DIR=%s", f->dir);
    snprintf(pool_kv, sizeof(pool_kv), "SANDGATE_POOL_SIZE=%d", f->pool);
    const char *env[] = {dir_kv, pool_kv, NULL};
    sgtest_proxy_t *p = sgtest_proxy_start(id, env);
    SG_CHECK(p != NULL, NULL, "proxy %s did not start", id);
    return p;
}

static char *create_session(sgtest_proxy_t *p, const char *body)
{
    json_object *o = SG_CALL_JSON(p, "POST", "/sessions", body, 200);
    SG_CHECK(strcmp(SG_STR(o, "status"), "active") == 0, o, "status");
    char *sid = strdup(SG_STR(o, "session_id"));
    json_object_put(o);
    return sid;
}

/* Runs code in session sid: its stdout must be want, and its state `kept`
 * unless state_want is NULL. */
static void run(sgtest_proxy_t *p, const char *sid, const char *code, const char *want, const char *state_want)
{
    char path[256];
    json_object *body = json_object_new_object();
    snprintf(path, sizeof(path), "/sessions/%s/execute", sid);
    json_object_object_add(body, "code", json_object_new_string(code));
    sgtest_reply_t r;
    sgtest_call_json(p, "POST", path, body, 0, &r);
    json_object_put(body);
    json_object *o = SG_TAKE_JSON(&r, 200);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), want) == 0, o, "stdout of %s", code);
    if (state_want != NULL)
        SG_CHECK(strcmp(SG_STR(o, "state"), state_want) == 0, o, "state");
    json_object_put(o);
}

static void put_file(sgtest_proxy_t *p, const char *sid, const char *name, const void *data, size_t len)
{
    char url[512];
    snprintf(url, sizeof(url), "%s/sessions/%s/files?path=%s", sgtest_proxy_url(p), sid, name);
    sgtest_reply_t r;
    sgtest_http("PUT", url, data, len, "application/octet-stream", 60, &r);
    json_object_put(SG_TAKE_JSON(&r, 200));
}

static void expect_file(sgtest_proxy_t *p, const char *sid, const char *name, const void *data, size_t len)
{
    char url[512];
    snprintf(url, sizeof(url), "%s/sessions/%s/files?path=%s", sgtest_proxy_url(p), sid, name);
    sgtest_reply_t r;
    sgtest_http("GET", url, NULL, 0, NULL, 60, &r);
    SG_CHECK(r.status == 200 && r.body_len == len && memcmp(r.body, data, len) == 0, NULL,
             "file %s: HTTP %ld, %zu bytes (want %zu)", name, r.status, r.body_len, len);
    sgtest_reply_free(&r);
}

static char **containers_of(const char *proxy_id)
{
    char l[192];
    snprintf(l, sizeof(l), "sandgate.proxy=%s", proxy_id);
    const char *labels[] = {l, NULL};
    char **v = sgtest_docker_ids(labels);
    SG_CHECK(v != NULL, NULL, "cannot list containers from Docker");
    return v;
}

static bool running(const char *cid)
{
    long st = 0;
    json_object *c = sgtest_docker_inspect(cid, &st);
    bool r = c != NULL && json_object_get_boolean(sgtest_jpath(c, "State.Running"));
    json_object_put(c);
    return r;
}

/* GET /sessions/{sid} once it is active again (adopted), or fails. */
typedef struct {
    sgtest_proxy_t *p;
    const char *sid;
    json_object *got;
} adopted_t;

static bool is_active(void *ctx)
{
    adopted_t *a = ctx;
    char path[256];
    sgtest_reply_t r;
    snprintf(path, sizeof(path), "/sessions/%s", a->sid);
    sgtest_call(a->p, "GET", path, NULL, &r);
    json_object *o = r.status == 200 ? json_tokener_parse(r.body) : NULL;
    sgtest_reply_free(&r);
    json_object *st = NULL;
    if (o != NULL && json_object_object_get_ex(o, "status", &st) && strcmp(json_object_get_string(st), "active") == 0) {
        json_object_put(a->got);
        a->got = o;
        return true;
    }
    json_object_put(o);
    return false;
}

static json_object *await_adopted(sgtest_proxy_t *p, const char *sid)
{
    adopted_t a = {p, sid, NULL};
    SG_CHECK(sgtest_poll(is_active, &a, ADOPT_S, 0.1) == 0, NULL, "session %s is not active again within %.0f s", sid,
             ADOPT_S);
    return a.got;
}

/* The record of session sid in the state a next proxy reads: the state
 * file's, then its journal's lines in order (file + ".journal"; a line cut
 * short ends them). NULL when there is none. */
static json_object *state_record(const char *file, const char *sid)
{
    json_object *o = json_object_from_file(file), *arr = NULL, *rec = NULL;
    char jfile[760], line[1 << 16];
    FILE *fp;

    if (o != NULL && json_object_object_get_ex(o, "sessions", &arr)) {
        for (size_t i = 0; i < json_object_array_length(arr); i++) {
            json_object *s = json_object_array_get_idx(arr, i), *id;
            if (json_object_object_get_ex(s, "id", &id) && strcmp(json_object_get_string(id), sid) == 0)
                rec = json_object_get(s);
        }
    }
    json_object_put(o);
    snprintf(jfile, sizeof(jfile), "%s.journal", file);
    fp = fopen(jfile, "r");
    while (fp != NULL && fgets(line, sizeof(line), fp) != NULL && strchr(line, '\n') != NULL) {
        json_object *l = json_tokener_parse(line), *v, *id;
        if (l == NULL)
            break;
        if (json_object_object_get_ex(l, "put", &v) && json_object_object_get_ex(v, "id", &id) &&
            strcmp(json_object_get_string(id), sid) == 0) {
            json_object_put(rec);
            rec = json_object_get(v);
        } else if (json_object_object_get_ex(l, "del", &v) && strcmp(json_object_get_string(v), sid) == 0) {
            json_object_put(rec);
            rec = NULL;
        }
        json_object_put(l);
    }
    if (fp != NULL)
        fclose(fp);
    return rec;
}

/* The state says session sid has `n` executions (its counters are written
 * at most a second after they move). */
typedef struct {
    const char *file, *sid;
    int64_t n;
} counted_t;

static bool state_counts(void *ctx)
{
    counted_t *c = ctx;
    json_object *rec = state_record(c->file, c->sid), *ex;
    bool ok = rec != NULL && json_object_object_get_ex(rec, "executions", &ex) && json_object_get_int64(ex) == c->n;
    json_object_put(rec);
    return ok;
}

static void await_recorded(fixture_t *f, const char *proxy_id, const char *sid, int64_t n)
{
    char file[700];
    snprintf(file, sizeof(file), "%s/%s.sessions", f->dir, proxy_id);
    counted_t c = {file, sid, n};
    SG_CHECK(sgtest_poll(state_counts, &c, 10.0, 0.1) == 0, NULL, "%s does not record %lld execution(s) of %s", file,
             (long long)n, sid);
}

/* runsc-sandbox / runsc-gofer processes on the host working for container
 * cid (its 64-hex id on their command line). */
static bool runsc_processes_of(const char *cid)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    bool found = false;
    if (d == NULL)
        return false;
    while (!found && (e = readdir(d)) != NULL) {
        char path[300], buf[8192];
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
        FILE *fp = fopen(path, "r");
        if (fp == NULL)
            continue;
        size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
        fclose(fp);
        buf[n] = '\0';
        if (strncmp(buf, "runsc", 5) != 0)
            continue;
        for (size_t i = 0; i < n; i++)
            buf[i] = buf[i] == '\0' ? ' ' : buf[i];
        found = strstr(buf, cid) != NULL;
    }
    closedir(d);
    return found;
}

typedef struct {
    char **cids;
} gone_t;

static bool all_gone(void *ctx)
{
    gone_t *g = ctx;
    for (size_t i = 0; g->cids[i] != NULL; i++)
        if (sgtest_docker_exists(g->cids[i]) != 0 || runsc_processes_of(g->cids[i]))
            return false;
    return true;
}

/* SIGTERM: the proxy exits 0 and leaves no container (its lease neither),
 * and no runsc process of the containers in cids. */
static void stop_and_expect_nothing_left(sgtest_proxy_t **pp, const char *proxy_id, char **cids)
{
    int st = sgtest_proxy_stop(*pp);
    *pp = NULL;
    SG_CHECK(st == 0, NULL, "proxy %s: wait status %d on SIGTERM", proxy_id, st);
    char **left = containers_of(proxy_id);
    size_t n = sgtest_strv_len(left);
    sgtest_strv_free(left);
    SG_CHECK(n == 0, NULL, "%zu container(s) of %s remain after it stopped", n, proxy_id);
    char name[128];
    snprintf(name, sizeof(name), "sandgate-lease-%s", proxy_id);
    SG_CHECK(sgtest_docker_exists(name) == 0, NULL, "the lease %s remains", name);
    if (cids != NULL) {
        gone_t g = {cids};
        SG_CHECK(sgtest_poll(all_gone, &g, REMOVAL_S, 0.2) == 0, NULL, "containers or runsc processes remain");
    }
}

/* A connection to the proxy's port. */
static int connect_proxy(sgtest_proxy_t *p)
{
    int port = 0;
    sscanf(sgtest_proxy_url(p), "http://127.0.0.1:%d", &port);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    SG_CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, NULL, "cannot connect to the proxy");
    return fd;
}

static int write_all(int fd, const void *p, size_t len)
{
    const char *c = p;
    while (len != 0) {
        ssize_t n = write(fd, c, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        c += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */

/* The whole text of file ("" when there is none; the caller frees). */
static char *read_text(const char *file)
{
    FILE *fp = fopen(file, "r");
    char *text = NULL;
    size_t len = 0;
    if (fp != NULL) {
        fseek(fp, 0, SEEK_END);
        long n = ftell(fp);
        fseek(fp, 0, SEEK_SET);
        text = malloc((size_t)(n > 0 ? n : 0) + 1);
        SG_CHECK(text != NULL, NULL, "out of memory");
        len = fread(text, 1, (size_t)(n > 0 ? n : 0), fp);
        fclose(fp);
    } else {
        text = malloc(1);
        SG_CHECK(text != NULL, NULL, "out of memory");
    }
    text[len] = '\0';
    return text;
}

static void append_text(const char *file, const char *text)
{
    FILE *fp = fopen(file, "a");
    SG_CHECK(fp != NULL && fputs(text, fp) >= 0 && fclose(fp) == 0, NULL, "cannot append to %s", file);
}

static size_t file_size(const char *file)
{
    char *text = read_text(file);
    size_t n = strlen(text);
    free(text);
    return n;
}

/* Writes n bytes of text c to file (made or emptied first). */
static void write_fill(const char *file, const char *text, char c, size_t n)
{
    FILE *fp = fopen(file, "w");
    SG_CHECK(fp != NULL, NULL, "cannot write %s", file);
    fputs(text, fp);
    for (size_t i = 0; i < n; i++)
        fputc(c, fp);
    fclose(fp);
}

/* file is one JSON object and nothing after it (a parser stops at its
 * end), with nothing of the 1 MiB a crash left. */
static void expect_whole_state(const char *file)
{
    char text[1 << 16];
    FILE *fp = fopen(file, "r");
    size_t len = fp != NULL ? fread(text, 1, sizeof(text) - 1, fp) : 0;
    if (fp != NULL)
        fclose(fp);
    text[len] = '\0';
    SG_CHECK(len > 0 && len < sizeof(text) - 1 && text[len - 1] == '}' && strstr(text, "[[[") == NULL, NULL,
             "%s is not one whole state (%zu bytes)", file, len);
}

static void test_kill9_adopts_sessions(void **state)
{
    fixture_t *f = *state;
    static const char blob[] = "a file written before the crash\n";
    char file[700], beside[720];
    f->pool = 1; /* its leftovers go at the restart, and it refills */
    /* an empty state, and beside it what a crash in the middle of a write
     * leaves (the proxy writes the file beside, then swaps the two): 1 MiB
     * that is not JSON, longer than any state here. It is written over in
     * place and never read, and no part of it survives the writes. */
    snprintf(file, sizeof(file), "%s/%s.sessions", f->dir, f->id_x);
    snprintf(beside, sizeof(beside), "%s.tmp", file);
    write_fill(file, "{\"version\":1,\"sessions\":[],\"lost\":[]}", ' ', 0);
    write_fill(beside, "{\"version\":1,\"sessions\":[", '[', 1 << 20);
    f->x = start(f, f->id_x);

    char *py = create_session(f->x, "{\"lang\":\"python\",\"timeout\":20,\"memory_mb\":256,\"owner\":\"tenant-a\"}");
    char *js = create_session(f->x, "{\"lang\":\"javascript\"}");
    char *tpl = create_session(f->x, "{\"lang\":\"python\",\"keep_template\":true}");
    run(f->x, py, "x = 41", "", NULL);
    run(f->x, py, "print(x)", "41\n", "kept");
    run(f->x, js, "globalThis.y = 6", "", NULL);
    put_file(f->x, py, "notes.txt", blob, sizeof(blob) - 1);
    run(f->x, tpl, "z = 'tpl'", "", NULL);
    await_recorded(f, f->id_x, py, 2);
    expect_whole_state(file);
    expect_whole_state(beside); /* the state before: each write leaves its file as long as its text */

    char *cpy = sgtest_docker_session_container(f->id_x, py);
    char *cjs = sgtest_docker_session_container(f->id_x, js);
    char *ctpl = sgtest_docker_session_container(f->id_x, tpl);
    SG_CHECK(cpy != NULL && cjs != NULL && ctpl != NULL, NULL, "no container for a session");

    sgtest_proxy_kill9(f->x);
    f->x = NULL;
    SG_CHECK(running(cpy) && running(cjs) && running(ctpl), NULL, "the sessions' containers outlive their proxy");
    char **before = containers_of(f->id_x);

    f->x = start(f, f->id_x);
    json_object *d = await_adopted(f->x, py);
    SG_CHECK(strcmp(SG_STR(d, "lang"), "python") == 0, d, "lang");
    SG_CHECK(SG_INT(d, "executions") == 2, d, "executions");
    SG_CHECK(strcmp(SG_STR(d, "runtime"), sgtest_docker_session_on_runsc(f->id_x, py) ? "runsc" : "runc") == 0, d,
             "runtime");
    json_object *lim = SG_OBJ(d, "limits");
    SG_CHECK(SG_INT(lim, "memory_mb") == 256, d, "limits.memory_mb");
    SG_CHECK(sgtest__get_double(lim, "timeout", __FILE__, __LINE__) == 20, d, "limits.timeout");
    json_object_put(d);
    d = await_adopted(f->x, tpl);
    SG_CHECK(SG_BOOL(d, "keep_template"), d, "keep_template");
    json_object_put(d);
    json_object_put(await_adopted(f->x, js));

    /* the same containers, with their interpreters' state and files */
    run(f->x, py, "print(x + 1)", "42\n", "kept");
    run(f->x, js, "console.log(y * 7)", "42\n", "kept");
    run(f->x, tpl, "print(z)", "tpl\n", "kept");
    expect_file(f->x, py, "notes.txt", blob, sizeof(blob) - 1);
    char *again = sgtest_docker_session_container(f->id_x, py);
    SG_CHECK(again != NULL && strcmp(again, cpy) == 0, NULL, "the session's container changed");
    free(again);

    /* the other leftovers (the pool's) are gone, and the pool refilled */
    for (size_t i = 0; before[i] != NULL; i++) {
        if (strcmp(before[i], cpy) == 0 || strcmp(before[i], cjs) == 0 || strcmp(before[i], ctpl) == 0)
            continue;
        char name[128];
        snprintf(name, sizeof(name), "sandgate-lease-%s", f->id_x);
        json_object *c = sgtest_docker_inspect(before[i], NULL);
        bool lease = c != NULL && strstr(SG_STR(c, "Name"), name) != NULL;
        json_object_put(c);
        if (!lease)
            SG_CHECK(sgtest_docker_exists(before[i]) == 0, NULL, "leftover %s of the crashed proxy remains", before[i]);
    }
    char pl[192];
    snprintf(pl, sizeof(pl), "sandgate.proxy=%s", f->id_x);
    const char *pool_labels[] = {pl, "sandgate.kind=pool", "sandgate.lang=python", NULL};
    SG_CHECK(sgtest_docker_wait_count(pool_labels, 1, 60.0) == 1, NULL, "the python pool did not refill");

    /* closing the template session keeps its template */
    char path[256];
    snprintf(path, sizeof(path), "/sessions/%s", tpl);
    json_object *closed = SG_CALL_JSON(f->x, "DELETE", path, NULL, 200);
    char tname[256];
    snprintf(tname, sizeof(tname), "/templates/%s", SG_STR(closed, "template_image"));
    json_object_put(closed);
    json_object_put(SG_CALL_JSON(f->x, "DELETE", tname, NULL, 200));

    char *cids[] = {cpy, cjs, ctpl, NULL};
    stop_and_expect_nothing_left(&f->x, f->id_x, cids);
    sgtest_strv_free(before);
    free(py);
    free(js);
    free(tpl);
    free(cpy);
    free(cjs);
    free(ctpl);
}

static void test_kill9_during_execute_and_upload(void **state)
{
    fixture_t *f = *state;
    f->x = start(f, f->id_x);
    char *a = create_session(f->x, "{\"lang\":\"python\"}");
    char *b = create_session(f->x, "{\"lang\":\"python\"}");
    run(f->x, a, "x = 7", "", NULL);
    run(f->x, b, "w = 8", "", NULL);

    /* a streamed execution in flight on a, an upload of several MB on b */
    char url[512];
    snprintf(url, sizeof(url), "%s/sessions/%s/execute", sgtest_proxy_url(f->x), a);
    int fd = sggw_http_open("POST", url,
                            "{\"stream\":true,\"code\":\"import time\\nfor i in range(30):\\n    print(i, "
                            "flush=True)\\n    time.sleep(0.1)\\n\"}",
                            NULL);
    SG_CHECK(fd >= 0, NULL, "cannot open the streamed execution");
    char buf[4096] = "";
    size_t got = 0;
    double until = sgtest_now() + 30;
    while (strstr(buf, "event: stdout") == NULL && sgtest_now() < until) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t n = read(fd, buf + got, sizeof(buf) - 1 - got);
        SG_CHECK(n > 0, NULL, "the stream ended before any output");
        got += (size_t)n;
        buf[got] = '\0';
    }
    SG_CHECK(strstr(buf, "event: stdout") != NULL, NULL, "no output streamed: %s", buf);

    size_t big = 6u << 20;
    char *blob = malloc(big);
    for (size_t i = 0; i < big; i++)
        blob[i] = (char)('a' + i % 26);
    /* the whole upload written (the proxy has read most of it, and hands
     * it on to the agent), then the crash: b's agent may hold half of it */
    int ufd = connect_proxy(f->x);
    char hdr[512];
    int hl = snprintf(hdr, sizeof(hdr),
                      "PUT /sessions/%s/files?path=big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                      "application/octet-stream\r\nContent-Length: %zu\r\n\r\n",
                      b, big);
    SG_CHECK(write_all(ufd, hdr, (size_t)hl) == 0 && write_all(ufd, blob, big) == 0, NULL, "cannot send the upload");
    sgtest_proxy_kill9(f->x);
    f->x = NULL;
    close(ufd);

    /* the streamed client sees its reply end, not a hang, and no result */
    until = sgtest_now() + 10;
    bool ended = false;
    while (!ended && sgtest_now() < until) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        if (n <= 0)
            ended = true;
        else {
            buf[n] = '\0';
            SG_CHECK(strstr(buf, "event: result") == NULL, NULL, "a result after the proxy died");
        }
    }
    close(fd);
    SG_CHECK(ended, NULL, "the streamed reply did not end when the proxy died");

    f->x = start(f, f->id_x);
    json_object_put(await_adopted(f->x, a));
    json_object_put(await_adopted(f->x, b));
    run(f->x, a, "print(x)", "7\n", "kept");
    run(f->x, b, "print(w)", "8\n", "kept");
    /* b's agent dropped the half-sent upload: the next one is whole */
    put_file(f->x, b, "big.bin", blob, big);
    expect_file(f->x, b, "big.bin", blob, big);
    free(blob);

    char *ca = sgtest_docker_session_container(f->id_x, a);
    char *cb = sgtest_docker_session_container(f->id_x, b);
    char *cids[] = {ca, cb, NULL};
    stop_and_expect_nothing_left(&f->x, f->id_x, ca != NULL && cb != NULL ? cids : NULL);
    free(ca);
    free(cb);
    free(a);
    free(b);
}

static void test_lost_sessions(void **state)
{
    fixture_t *f = *state;
    f->x = start(f, f->id_x);
    char *gone = create_session(f->x, "{\"lang\":\"python\"}");
    char *dead = create_session(f->x, "{\"lang\":\"python\"}");
    char *kept = create_session(f->x, "{\"lang\":\"python\"}");
    run(f->x, kept, "k = 1", "", NULL);
    char *cgone = sgtest_docker_session_container(f->id_x, gone);
    char *cdead = sgtest_docker_session_container(f->id_x, dead);
    SG_CHECK(cgone != NULL && cdead != NULL, NULL, "no container");

    sgtest_proxy_kill9(f->x);
    f->x = NULL;
    /* while the proxy is down: one container removed, one whose agent died */
    char path[256];
    sgtest_reply_t r;
    snprintf(path, sizeof(path), "/containers/%s?force=1", cgone);
    sgtest_docker_call("DELETE", path, NULL, &r);
    SG_CHECK(r.status == 204, NULL, "docker rm: %ld", r.status);
    sgtest_reply_free(&r);
    snprintf(path, sizeof(path), "/containers/%s/kill?signal=SIGKILL", cdead);
    sgtest_docker_call("POST", path, NULL, &r);
    SG_CHECK(r.status == 204, NULL, "docker kill: %ld", r.status);
    sgtest_reply_free(&r);

    f->x = start(f, f->id_x);
    json_object_put(await_adopted(f->x, kept));
    const char *lost_ids[] = {gone, dead};
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "/sessions/%s/execute", lost_ids[i]);
        SG_CALL_ERROR(f->x, "POST", path, "{\"code\":\"print(1)\"}", 404, "session_lost");
        snprintf(path, sizeof(path), "/sessions/%s", lost_ids[i]);
        SG_CALL_ERROR(f->x, "GET", path, NULL, 404, "session_lost");
    }
    SG_CHECK(sgtest_docker_wait_gone(cdead, REMOVAL_S, NULL) == 0, NULL, "the dead session's container remains");
    char **listed = sgtest_listed_sessions(f->x);
    SG_CHECK(sgtest_strv_len(listed) == 1 && sgtest_strv_has(listed, kept), NULL, "only the adopted one is listed");
    sgtest_strv_free(listed);
    /* closing a lost session: done, and then it is unknown */
    snprintf(path, sizeof(path), "/sessions/%s", gone);
    json_object_put(SG_CALL_JSON(f->x, "DELETE", path, NULL, 200));
    SG_CALL_ERROR(f->x, "GET", path, NULL, 404, "no_such_session");
    run(f->x, kept, "print(k)", "1\n", "kept");

    stop_and_expect_nothing_left(&f->x, f->id_x, NULL);
    free(gone);
    free(dead);
    free(kept);
    free(cgone);
    free(cdead);
}

/* A change writes what it touched, not the whole state: while sessions
 * are listed, closed and run, the state file stays as it was and its
 * journal takes them. A proxy killed then adopts from both, over a
 * journal replayed twice (what a kill between a whole write and the
 * journal's truncation leaves) and ending in a line cut short. Once the
 * journal outgrows its bound it is folded into the state file, and a
 * proxy killed after that adopts as well. */
static void test_state_journal(void **state)
{
    fixture_t *f = *state;
    char file[700], jfile[720], path[256];
    snprintf(file, sizeof(file), "%s/%s.sessions", f->dir, f->id_x);
    snprintf(jfile, sizeof(jfile), "%s.journal", file);
    f->pool = 2;
    f->x = start(f, f->id_x);
    char *a = create_session(f->x, "{\"lang\":\"python\"}");
    char *b = create_session(f->x, "{\"lang\":\"python\"}");
    run(f->x, a, "x = 5", "", NULL);
    await_recorded(f, f->id_x, a, 1);

    char *whole = read_text(file);
    size_t jstart = file_size(jfile);
    char *c = create_session(f->x, "{\"lang\":\"python\"}");
    snprintf(path, sizeof(path), "/sessions/%s", b);
    json_object_put(SG_CALL_JSON(f->x, "DELETE", path, NULL, 200));
    run(f->x, a, "x += 1", "", NULL);
    await_recorded(f, f->id_x, a, 2);
    char *now = read_text(file);
    SG_CHECK(strcmp(whole, now) == 0, NULL, "the state file was written whole for a change");
    /* written whole at the start, before any session: they are all in the journal */
    SG_CHECK(strstr(now, a) == NULL && strstr(now, c) == NULL, NULL, "the state file lists sessions: %s", now);
    SG_CHECK(file_size(jfile) > jstart, NULL, "the journal did not grow");
    json_object *rc = state_record(file, c), *rb = state_record(file, b);
    SG_CHECK(rc != NULL && rb == NULL, NULL, "the journal does not list %s and drop %s", c, b);
    json_object_put(rc);
    free(now);

    sgtest_proxy_kill9(f->x);
    f->x = NULL;
    char *journal = read_text(jfile);
    append_text(jfile, journal);
    append_text(jfile, "{\"put\":{\"id\":\"");
    f->x = start(f, f->id_x);
    json_object *d = await_adopted(f->x, a);
    SG_CHECK(SG_INT(d, "executions") == 2, d, "executions");
    json_object_put(d);
    json_object_put(await_adopted(f->x, c));
    SG_CALL_ERROR(f->x, "GET", path, NULL, 404, "no_such_session");
    run(f->x, a, "print(x)", "6\n", "kept");

    /* sessions made and closed until the journal is folded (it shrinks) */
    size_t longest = 0;
    bool folded = false;
    for (int i = 0; i < 40 && !folded; i++) {
        char *e = create_session(f->x, "{\"lang\":\"python\"}");
        snprintf(path, sizeof(path), "/sessions/%s", e);
        json_object_put(SG_CALL_JSON(f->x, "DELETE", path, NULL, 200));
        free(e);
        size_t n = file_size(jfile);
        folded = n < longest;
        longest = n > longest ? n : longest;
    }
    SG_CHECK(folded, NULL, "the journal was never folded into the state file (%zu bytes)", longest);
    SG_CHECK(longest < (8 << 10), NULL, "the journal grew to %zu bytes before it was folded", longest);
    sgtest_proxy_kill9(f->x);
    f->x = NULL;
    f->x = start(f, f->id_x);
    json_object_put(await_adopted(f->x, a));
    json_object_put(await_adopted(f->x, c));
    run(f->x, a, "print(x)", "6\n", "kept");
    char **listed = sgtest_listed_sessions(f->x);
    SG_CHECK(sgtest_strv_len(listed) == 2, NULL, "%zu sessions listed, not a and c", sgtest_strv_len(listed));
    sgtest_strv_free(listed);

    stop_and_expect_nothing_left(&f->x, f->id_x, NULL);
    free(journal);
    free(whole);
    free(a);
    free(b);
    free(c);
}

/* The proxy binary with id and the state dir, on a free port: its exit
 * status (waited up to timeout_s; -1 if it still ran: it is then killed)
 * and its log in log (NUL-terminated). */
static int run_proxy_to_exit(fixture_t *f, const char *id, double timeout_s, char *log, size_t loglen)
{
    const char *bin = getenv("SANDGATE_PROXY_BIN");
    SG_CHECK(bin != NULL, NULL, "SANDGATE_PROXY_BIN");
    char port_kv[32], id_kv[160], dir_kv[600], logpath[700];
    snprintf(port_kv, sizeof(port_kv), "PORT=%d", sgtest_free_port());
    snprintf(id_kv, sizeof(id_kv), "SANDGATE_PROXY_ID=%s", id);
    snprintf(dir_kv, sizeof(dir_kv), "SANDGATE_PROXY_STATE_DIR=%s", f->dir);
    snprintf(logpath, sizeof(logpath), "%s/second.log", f->dir);
    const char *set[] = {"HOST=127.0.0.1", port_kv, id_kv, dir_kv, "SANDGATE_STORE_VOLUME=", "SANDGATE_POOL_SIZE=0"};
    char **env = sgtest_build_env(set, sizeof(set) / sizeof(set[0]));
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execle(bin, bin, (char *)NULL, env);
        _exit(127);
    }
    free(env);
    int st = -1, ws;
    double until = sgtest_now() + timeout_s;
    while (sgtest_now() < until) {
        if (waitpid(pid, &ws, WNOHANG) == pid) {
            st = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
            break;
        }
        usleep(50 * 1000);
    }
    if (st == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    FILE *fp = fopen(logpath, "r");
    size_t n = fp != NULL ? fread(log, 1, loglen - 1, fp) : 0;
    if (fp != NULL)
        fclose(fp);
    log[n] = '\0';
    return st;
}

static void test_second_proxy_refused(void **state)
{
    fixture_t *f = *state;
    f->x = start(f, f->id_x);
    char *sid = create_session(f->x, "{\"lang\":\"python\"}");
    run(f->x, sid, "v = 3", "", NULL);
    char **before = containers_of(f->id_x);

    char log[16384];
    int st = run_proxy_to_exit(f, f->id_x, 30.0, log, sizeof(log));
    SG_CHECK(st == HELD_EXIT, NULL, "a second proxy with a live id: exit %d (want %d); log:\n%s", st, HELD_EXIT, log);
    SG_CHECK(strstr(log, "another proxy with id") != NULL && strstr(log, f->id_x) != NULL, NULL,
             "no clear message naming the id:\n%s", log);

    /* nothing of the first one was touched */
    for (size_t i = 0; before[i] != NULL; i++)
        SG_CHECK(sgtest_docker_exists(before[i]) == 1, NULL, "container %s of the live proxy was removed", before[i]);
    run(f->x, sid, "print(v)", "3\n", "kept");

    /* SIGUSR2: the proxy leaves for an upgrade; its session stays */
    char *cid = sgtest_docker_session_container(f->id_x, sid);
    SG_CHECK(cid != NULL, NULL, "no container");
    kill(sgtest_proxy_pid(f->x), SIGUSR2);
    double until = sgtest_now() + 30;
    while (sgtest_proxy_alive(f->x) && sgtest_now() < until)
        usleep(50 * 1000);
    st = sgtest_proxy_stop(f->x);
    f->x = NULL;
    SG_CHECK(st == 0, NULL, "SIGUSR2: wait status %d", st);
    SG_CHECK(running(cid), NULL, "the session's container did not stay");
    char pl[192];
    snprintf(pl, sizeof(pl), "sandgate.proxy=%s", f->id_x);
    const char *labels[] = {pl, NULL};
    SG_CHECK(sgtest_docker_wait_count(labels, 1, 5.0) == 1, NULL, "more than the session's container remains");

    f->x = start(f, f->id_x);
    json_object_put(await_adopted(f->x, sid));
    run(f->x, sid, "print(v * 2)", "6\n", "kept");
    char *cids[] = {cid, NULL};
    stop_and_expect_nothing_left(&f->x, f->id_x, cids);
    sgtest_strv_free(before);
    free(cid);
    free(sid);
}

static void test_reconcile_spares_other_proxies(void **state)
{
    fixture_t *f = *state;

    f->y = start(f, f->id_y);
    char *sid_y = create_session(f->y, "{\"lang\":\"python\"}");
    f->x = start(f, f->id_x);
    char *sid_x = create_session(f->x, "{\"lang\":\"python\"}");
    char *cid_x = sgtest_docker_session_container(f->id_x, sid_x);
    sgtest_proxy_kill9(f->x);
    f->x = NULL;
    char **before_y = containers_of(f->id_y);
    f->x = start(f, f->id_x);
    json_object_put(await_adopted(f->x, sid_x));

    for (size_t i = 0; before_y[i] != NULL; i++)
        SG_CHECK(sgtest_docker_exists(before_y[i]) == 1, NULL, "Y's container %s was removed by X's start",
                 before_y[i]);
    run(f->y, sid_y, "print('y lives')", "y lives\n", NULL);
    run(f->x, sid_x, "print('x lives')", "x lives\n", NULL);
    /* X does not know Y's session, nor Y X's */
    char path[256];
    snprintf(path, sizeof(path), "/sessions/%s", sid_y);
    SG_CALL_ERROR(f->x, "GET", path, NULL, 404, "no_such_session");

    stop_and_expect_nothing_left(&f->y, f->id_y, NULL);
    char *cids[] = {cid_x, NULL};
    stop_and_expect_nothing_left(&f->x, f->id_x, cid_x != NULL ? cids : NULL);
    sgtest_strv_free(before_y);
    free(sid_y);
    free(sid_x);
    free(cid_x);
}

int main(void)
{
    return SG_RUN_TESTS("proxy_restart", NULL, NULL, setup, teardown, test_kill9_adopts_sessions,
                        test_kill9_during_execute_and_upload, test_lost_sessions, test_state_journal,
                        test_second_proxy_refused, test_reconcile_spares_other_proxies);
}
