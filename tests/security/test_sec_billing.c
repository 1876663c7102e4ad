/*
 * test_sec_billing.c — what a sandbox says about its own run is never its
 * bill (issue 9, item 7).
 *
 * The agent reports `execution_time`, which code in the sandbox could
 * forge if it reached the agent's channel; the gateway bills `wall_time`,
 * the proxy's own measure from handing the run to the agent to its answer,
 * bounded by the gateway's own measure. Shown twice:
 *   - against a stand-in proxy (a loopback server of this test) whose
 *     replies carry forged values — execution_time 1e9 and -5, wall_time
 *     missing, NaN, 1e9 or negative, buffered and streamed: every usage row
 *     lies within the client's own wall clock of the call, and the day's
 *     seconds quota is charged no more (a forged 1e9 does not use it up);
 *   - against the real stack: code that tries to reach the agent's channel
 *     (/proc/1/fd/0 and 1, and every other process's fds) is refused, and
 *     the usage row's duration is the reply's wall_time, between the
 *     code's own sleep and the client's wall clock.
 */
#include "sgsec.h"
#include "sgsse.h"
#include "sgrun.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static sggw_stack_t stack;

static int group_setup(void **state)
{
    *state = &stack;
    sggw_stack_opts_t o = {.redis = false};
    return sggw_stack_start(&stack, &o);
}

/* The usage rows of a tenant, newest last (the admin API). */
static json_object *usage_rows(sggw_gateway_t *g, const char *tenant, double *seconds)
{
    json_object *o = SGSEC_ADMIN_GET(g, "/admin/usage?tenant=%s", tenant);
    if (seconds != NULL)
        *seconds = SG_DBL(o, "seconds");
    return o;
}

static double last_duration(sggw_gateway_t *g, const char *tenant, int64_t want_rows)
{
    json_object *o = usage_rows(g, tenant, NULL);
    json_object *rows = SG_ARR(o, "rows");
    SG_CHECK((int64_t)json_object_array_length(rows) == want_rows, o, "%lld usage rows expected", (long long)want_rows);
    /* rows come in time order: the last one is the newest */
    double d = SG_DBL(json_object_array_get_idx(rows, json_object_array_length(rows) - 1), "duration");
    json_object_put(o);
    return d;
}

/* ------------------------------------------------------------------------
 * A stand-in proxy that forges
 * ------------------------------------------------------------------------ */

#define STANDIN_DELAY_US 200000 /* each execution "takes" 0.2 s */

typedef struct {
    int fd;
    int port;
    pthread_t thread;
    volatile int stop;
    char result[512]; /* the result object every execution gets */
    pthread_mutex_t mu;
} standin_t;

static standin_t standin;

static void standin_set(const char *result)
{
    pthread_mutex_lock(&standin.mu);
    snprintf(standin.result, sizeof(standin.result), "%s", result);
    pthread_mutex_unlock(&standin.mu);
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k <= 0)
            return;
        p += k;
        n -= (size_t)k;
    }
}

static void serve_one(int c)
{
    char buf[65536];
    size_t n = 0;
    char *end = NULL;
    while (n < sizeof(buf) - 1 && (end = memmem(buf, n, "\r\n\r\n", 4)) == NULL) {
        ssize_t k = read(c, buf + n, sizeof(buf) - 1 - n);
        if (k <= 0)
            return;
        n += (size_t)k;
    }
    if (end == NULL)
        return;
    buf[n] = '\0';
    size_t clen = 0;
    char *cl = strcasestr(buf, "\r\ncontent-length:");
    if (cl != NULL && cl < end)
        clen = (size_t)strtoul(cl + 17, NULL, 10);
    size_t have = n - (size_t)(end + 4 - buf);
    while (have < clen && n < sizeof(buf) - 1) {
        ssize_t k = read(c, buf + n, sizeof(buf) - 1 - n);
        if (k <= 0)
            return;
        n += (size_t)k;
        have += (size_t)k;
    }
    buf[n] = '\0';
    const char *body = end + 4;
    char result[512], reply[2048];
    pthread_mutex_lock(&standin.mu);
    snprintf(result, sizeof(result), "%s", standin.result);
    pthread_mutex_unlock(&standin.mu);
    int is_exec = strncmp(buf, "POST /execute ", 14) == 0;
    int streamed = is_exec && strstr(body, "\"stream\":true") != NULL;
    if (is_exec)
        usleep(STANDIN_DELAY_US);
    if (streamed) {
        /* "CUT": the stream breaks off after its first event; "ERROR": the
         * run failed (an error event, as the proxy sends for a 502) */
        int cut = strcmp(result, "CUT") == 0, err = strcmp(result, "ERROR") == 0;
        char events[1024];
        int el = err ? snprintf(events, sizeof(events),
                                "event: error\ndata: {\"detail\":\"the agent died\",\"code\":\"sandbox_failed\"}\n\n")
                     : snprintf(events, sizeof(events),
                                "event: stdout\ndata: {\"data\":\"hi\\n\"}\n\nevent: result\ndata: %s\n\n", result);
        int hl = snprintf(reply, sizeof(reply),
                          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n"
                          "Connection: close\r\n\r\n",
                          cut ? el + 1000 : el);
        if (cut)
            el = 37; /* the first event only, then the connection closes */
        write_all(c, reply, (size_t)hl);
        write_all(c, events, (size_t)el);
        return;
    }
    const char *o = is_exec ? result : "{\"status\":\"ok\"}";
    int hl = snprintf(
        reply, sizeof(reply),
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
        strlen(o), o);
    write_all(c, reply, (size_t)hl);
}

static void *standin_main(void *arg)
{
    (void)arg;
    while (!standin.stop) {
        int c = accept(standin.fd, NULL, NULL);
        if (c < 0)
            continue;
        serve_one(c);
        close(c);
    }
    return NULL;
}

static int standin_start(void)
{
    pthread_mutex_init(&standin.mu, NULL);
    standin.fd = sgtest_bind_loopback(0, &standin.port);
    if (standin.fd < 0 || listen(standin.fd, 16) != 0)
        return -1;
    return pthread_create(&standin.thread, NULL, standin_main, NULL) == 0 ? 0 : -1;
}

static void standin_stop(void)
{
    standin.stop = 1;
    shutdown(standin.fd, SHUT_RDWR);
    close(standin.fd);
    pthread_join(standin.thread, NULL);
}

#define RESULT_FMT                                                                                                     \
    "{\"stdout\":\"\",\"stderr\":\"\",\"exit_code\":0,\"execution_time\":%s%s,\"success\":true,\"timed_out\":false,"   \
    "\"truncated\":false,\"reason\":\"exited\",\"stage\":\"run\",\"state\":\"none\"}"

SGGW_TEST(test_forged_durations_not_billed)
{
    SG_CHECK(standin_start() == 0, NULL, "the stand-in proxy starts");
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", standin.port);
    sggw_opts_t o = {.proxy_url = url};
    sggw_gateway_t *g = sggw_gateway_start(&o);
    SG_CHECK(g != NULL, NULL, "a gateway in front of the stand-in starts");
    /* a minute a day: a bill of 1e9 seconds would use it up at once */
    const char *quotas[] = {"exec_seconds_per_day=60", NULL};
    char *tok = sggw_new_tenant(sggw_gateway_data_dir(g), "forger", quotas);

    static const struct {
        const char *exec_time, *wall; /* wall: the ",\"wall_time\":..." part, "" for none */
        double billed;                /* < 0: the gateway's own measure */
    } cases[] = {
        {"1e9", "", -1},
        {"1e9", ",\"wall_time\":0.05", 0.05},
        {"-5", ",\"wall_time\":0.05", 0.05},
        {"1e9", ",\"wall_time\":1e9", -1},
        {"1e9", ",\"wall_time\":-3", -1},
        {"1e9", ",\"wall_time\":NaN", -1},
        {"NaN", ",\"wall_time\":\"soon\"", -1},
    };
    double total = 0;
    int64_t nrows = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (int streamed = 0; streamed < 2; streamed++) {
            char result[512];
            snprintf(result, sizeof(result), RESULT_FMT, cases[i].exec_time, cases[i].wall);
            standin_set(result);
            double t0 = sgtest_now(), t1;
            if (streamed) {
                char eurl[128];
                sgsse_result_t r;
                pathf(eurl, sizeof(eurl), "%s/execute", sggw_gateway_url(g));
                sgsse_post(eurl, tok, "{\"code\": \"1\", \"stream\": true}", NULL, 30, &r);
                t1 = sgtest_now();
                SG_CHECK(r.status == 200 && sgsse_last(&r, "result") != NULL, NULL,
                         "case %zu streamed: HTTP %ld, %zu events", i, r.status, r.nev);
                sgsse_result_free(&r);
            } else {
                sgtest_reply_t r;
                sggw_call(g, tok, "POST", "/execute", "{\"code\": \"1\"}", &r);
                t1 = sgtest_now();
                SG_CHECK(r.status == 200, NULL, "case %zu: HTTP %ld %s", i, r.status, r.body);
                sgtest_reply_free(&r);
            }
            double d = last_duration(g, "forger", ++nrows);
            if (cases[i].billed >= 0)
                SG_CHECK(d > cases[i].billed - 1e-6 && d < cases[i].billed + 1e-6, NULL,
                         "case %zu%s (execution_time %s%s): billed %g, not the proxy's wall time %g", i,
                         streamed ? " streamed" : "", cases[i].exec_time, cases[i].wall, d, cases[i].billed);
            else
                SG_CHECK(d >= STANDIN_DELAY_US / 1e6 - 0.01 && d <= t1 - t0 + 0.01, NULL,
                         "case %zu%s (execution_time %s%s): billed %g, outside the client's wall clock [%g, %g]", i,
                         streamed ? " streamed" : "", cases[i].exec_time, cases[i].wall, d, STANDIN_DELAY_US / 1e6,
                         t1 - t0);
            total += d;
        }
    }
    /* a stream that breaks off after the run began is billed (at the
     * gateway's measure) and reaches the client as broken */
    standin_set("CUT");
    char eurl[128];
    sgsse_result_t sr;
    pathf(eurl, sizeof(eurl), "%s/execute", sggw_gateway_url(g));
    double t0 = sgtest_now();
    int rc = sgsse_post(eurl, tok, "{\"code\": \"1\", \"stream\": true}", NULL, 30, &sr);
    double t1 = sgtest_now();
    SG_CHECK(sr.status == 200 && (rc != 0 || sr.unterminated) && sgsse_last(&sr, "result") == NULL, NULL,
             "a broken stream must reach the client as broken: curl %d (%s), %zu events", sr.curl_rc, sr.error, sr.nev);
    sgsse_result_free(&sr);
    double d = last_duration(g, "forger", ++nrows);
    SG_CHECK(d >= STANDIN_DELAY_US / 1e6 - 0.01 && d <= t1 - t0 + 0.01, NULL,
             "a broken stream: billed %g, outside the client's wall clock [%g, %g]", d, STANDIN_DELAY_US / 1e6,
             t1 - t0);
    total += d;
    /* a run that failed (an error event, the proxy's 502) is not billed, as
     * a buffered 502 is not */
    standin_set("ERROR");
    SG_CHECK(sgsse_post(eurl, tok, "{\"code\": \"1\", \"stream\": true}", NULL, 30, &sr) == 0 &&
                 sgsse_last(&sr, "error") != NULL,
             NULL, "the error event reaches the client: %zu events", sr.nev);
    sgsse_result_free(&sr);
    json_object_put(usage_rows(g, "forger", NULL));
    (void)last_duration(g, "forger", nrows); /* still nrows rows */

    /* the ledger's total is the sum, and the day's seconds are not used up */
    double seconds;
    json_object_put(usage_rows(g, "forger", &seconds));
    SG_CHECK(seconds > total - 1e-3 && seconds < total + 1e-3 && seconds < 60, NULL, "the day's seconds: %g (rows %g)",
             seconds, total);
    sgtest_reply_t r;
    standin_set("{\"stdout\":\"\",\"stderr\":\"\",\"exit_code\":0,\"execution_time\":0.01,\"wall_time\":0.01,"
                "\"success\":true,\"timed_out\":false,\"truncated\":false}");
    sggw_call(g, tok, "POST", "/execute", "{\"code\": \"1\"}", &r);
    SG_CHECK(r.status == 200, NULL, "the seconds quota is not used up by forged durations: HTTP %ld %s", r.status,
             r.body);
    sgtest_reply_free(&r);
    free(tok);
    SG_CHECK(sggw_gateway_stop(g) == 0, NULL, "the gateway exits cleanly");
    standin_stop();
}

/* ------------------------------------------------------------------------
 * The real stack
 * ------------------------------------------------------------------------ */

static const char REACH_CHANNEL[] =
    "import os, time, glob\n"
    "opened, refused = [], 0\n"
    "me = os.getpid()\n"
    "for path in ['/proc/1/fd/0', '/proc/1/fd/1', '/proc/1/fd/2'] + glob.glob('/proc/[0-9]*/fd/[0-9]*'):\n"
    "    pid = path.split('/')[2]\n"
    "    if pid in (str(me), 'self'):\n"
    "        continue\n"
    "    try:\n"
    "        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)\n"
    "        opened.append(path + ' -> ' + os.readlink(path))\n"
    "        os.close(fd)\n"
    "    except OSError:\n"
    "        refused += 1\n"
    "# protocol bytes on our own stdout are only output: an EXIT with a huge duration\n"
    "import sys, struct\n"
    "sys.stdout.buffer.write(struct.pack('>BBHII', 66, 0, 0, 1, 4 + 4 + 4 + 8 + 4 + 4 + 4) +\n"
    "    struct.pack('>iIIQII', 0, 0, 0, 10**18, 0, 0) + struct.pack('>I', 0))\n"
    "sys.stdout.flush()\n"
    "time.sleep(0.3)\n"
    "print()\n"
    "print('opened', opened)\n"
    "print('refused', refused)\n";

/* Under runsc gVisor checks a reopened /proc/1/fd/N against the file's own
 * owner and mode, not the agent's: the pipes the agent made for this run,
 * owned by the sandbox user (its effective uid), open, and /dev/null. They
 * carry only what the run itself writes and reads. Never the agent's
 * channel to the proxy (fds 0-2): true when every opened entry is such. */
static bool only_agents_pipes(const char *out)
{
    const char *l = strstr(out, "opened [");
    if (l == NULL)
        return false;
    const char *end = strchr(l, ']');
    for (const char *p = l; p != NULL && p < end; p = strstr(p + 1, "'/proc/")) {
        if (p == l)
            continue;
        int fd = -1;
        char target[32] = "";
        if (sscanf(p, "'/proc/1/fd/%d -> %31[^']", &fd, target) != 2 || fd < 3 ||
            (strncmp(target, "pipe:", 5) != 0 && strcmp(target, "/dev/null") != 0))
            return false;
    }
    return true;
}

SGGW_TEST(test_real_stack_bill_is_proxy_wall_time)
{
    char *tok = sggw_new_tenant(sggw_gateway_data_dir(stack.gw), "billed", NULL);
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    bool runsc = sgtest_docker_session_on_runsc(stack.proxy_id, sid);
    int64_t nrows = 0;
    for (int kind = 0; kind < 3; kind++) {
        double t0 = sgtest_now();
        json_object *o;
        if (kind == 0) {
            o = sggw_execute(stack.gw, tok, sid, REACH_CHANNEL, 20);
        } else if (kind == 1) {
            json_object *b = json_object_new_object();
            json_object_object_add(b, "code", json_object_new_string(REACH_CHANNEL));
            json_object_object_add(b, "lang", json_object_new_string("python"));
            o = sggw_post_result(stack.gw, tok, "/execute", b);
        } else {
            char path[128];
            pathf(path, sizeof(path), "/sessions/%s/commands", sid);
            json_object *b = json_object_new_object();
            json_object_object_add(b, "command",
                                   json_object_new_string("sleep 0.3; cat /proc/1/fd/0 </dev/null "
                                                          "2>&1 | head -c 200; echo done"));
            o = sggw_post_result(stack.gw, tok, path, b);
        }
        double t1 = sgtest_now();
        const char *out = SG_STR(o, "stdout");
        if (kind < 2)
            SG_CHECK((strstr(out, "opened []") != NULL || (runsc && only_agents_pipes(out))) &&
                         strstr(out, "refused 0") == NULL,
                     o, "code in the sandbox opened another process's descriptors (the agent's channel among them)");
        else
            SG_CHECK(strstr(out, "done") != NULL && strstr(out, "Permission denied") != NULL, o,
                     "reading the agent's channel from a command must be refused");
        double wall = SG_DBL(o, "wall_time");
        double d = last_duration(stack.gw, "billed", ++nrows);
        SG_CHECK(d > wall - 1e-6 && d < wall + 1e-6, o, "billed %g, not the proxy's wall_time %g", d, wall);
        SG_CHECK(d >= 0.3 && d <= t1 - t0, o, "billed %g outside [0.3 (the code's sleep), %g (the client's clock)]", d,
                 t1 - t0);
        json_object_put(o);
    }
    sggw_delete_session(stack.gw, tok, sid);
    free(sid);
    free(tok);
}

int main(void)
{
    return SG_RUN_TESTS("sec_billing", group_setup, sggw_stack_group_teardown, NULL, sggw_stack_teardown,
                        test_forged_durations_not_billed, test_real_stack_bill_is_proxy_wall_time);
}
