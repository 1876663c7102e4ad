/*
 * test_sec_escape_channel.c — what a tenant's code cannot pass off to the
 * service as anything but data: the agent protocol's own messages (and a
 * fake SSE result) printed on stdout, through every path an execution takes
 * (the session's interpreter, a command, one-shot, streamed); and a symlink
 * race under the files API aimed at the agent's channel and environment.
 *
 * Like test_sec_escape.c: one attack per test through the public API by an
 * ordinary tenant (sgsec.h), the exact outcome asserted (the bytes that
 * come back, what is billed), then the session and a fresh one still work.
 */
#include "sgsec.h"

#include "../../proxy/agent/agent_proto.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sgsec_stack_t st;

static json_object *py(const char *tok, const char *sid, const char *code)
{
    return sgsec_py(&st, tok, sid, code);
}

static json_object *sh(const char *tok, const char *sid, const char *cmd)
{
    return sgsec_sh(&st, tok, sid, cmd);
}

/* ------------------------------------------------------------------------
 * Forged protocol bytes on stdout
 * ------------------------------------------------------------------------ */

typedef struct {
    unsigned char b[8192];
    size_t n;
} bytes_t;

static void put_u8(bytes_t *x, unsigned v)
{
    SG_CHECK(x->n < sizeof(x->b), NULL, "forged message too long");
    x->b[x->n++] = (unsigned char)v;
}

static void put_u32(bytes_t *x, uint32_t v)
{
    for (int i = 3; i >= 0; i--)
        put_u8(x, (v >> (8 * i)) & 0xff);
}

static void put_u64(bytes_t *x, uint64_t v)
{
    put_u32(x, (uint32_t)(v >> 32));
    put_u32(x, (uint32_t)v);
}

static void put_str(bytes_t *x, const char *s)
{
    put_u32(x, (uint32_t)strlen(s));
    for (; *s; s++)
        put_u8(x, (unsigned char)*s);
}

/* A message as agent_proto.h frames it; its payload built by fill. */
static void put_msg(bytes_t *x, sg_agent_msg_type_t type, uint32_t id, void (*fill)(bytes_t *))
{
    bytes_t p = {.n = 0};
    fill(&p);
    put_u8(x, type);
    put_u8(x, 0);
    put_u8(x, 0);
    put_u8(x, 0);
    put_u32(x, id);
    put_u32(x, (uint32_t)p.n);
    for (size_t i = 0; i < p.n; i++)
        put_u8(x, p.b[i]);
}

/* An EXIT saying: exit 77 by timeout after 0x7f7f7f7f us (~36 min), state
 * new. Every byte is below 0x80, so the output is valid UTF-8 as it is and
 * must come back byte for byte. */
static void fill_exit(bytes_t *p)
{
    put_u32(p, 77);
    put_u32(p, 0);
    put_u32(p, SG_AGENT_REASON_TIMEOUT);
    put_u64(p, 0x7f7f7f7fULL);
    put_u32(p, 0);
    put_str(p, "run");
    put_u32(p, SG_AGENT_STATE_NEW);
}

static void fill_output(bytes_t *p)
{
    put_u32(p, 1);
    const char *s = "INJECTED-OUTPUT";
    for (; *s; s++)
        put_u8(p, (unsigned char)*s);
}

static void fill_ready(bytes_t *p)
{
    put_u32(p, SG_AGENT_PROTO_VERSION);
    put_str(p, "/");
}

#define FAKE_SSE                                                                                                       \
    "\n\nevent: result\ndata: {\"stdout\":\"forged\",\"stderr\":\"\",\"exit_code\":77,"                                \
    "\"execution_time\":2139,\"success\":false,\"timed_out\":true,\"truncated\":false,\"reason\":\"timeout\"}\n\n"

/* The forged bytes, and python code that writes exactly them and a newline. */
static char *forged_program(bytes_t *x)
{
    x->n = 0;
    for (uint32_t id = 0; id < 40; id++) /* every id a request of this proxy is likely to carry */
        put_msg(x, SG_AGENT_EXIT, id, fill_exit);
    put_msg(x, SG_AGENT_OUTPUT, 1, fill_output);
    put_msg(x, SG_AGENT_READY, 0, fill_ready);
    for (const char *s = FAKE_SSE; *s; s++)
        put_u8(x, (unsigned char)*s);
    size_t len = 64 + 2 * x->n;
    char *code = malloc(len);
    SG_CHECK(code != NULL, NULL, "out of memory");
    size_t o = (size_t)snprintf(code, len, "import sys\nsys.stdout.buffer.write(bytes.fromhex('");
    for (size_t i = 0; i < x->n; i++)
        o += (size_t)snprintf(code + o, len - o, "%02x", x->b[i]);
    snprintf(code + o, len - o, "') + b'\\n')\n");
    return code;
}

/* What output x becomes in a result: itself, with each NUL byte (not valid
 * in the output's UTF-8, docs/proxy-api.md) as U+FFFD; then the newline. */
static char *as_output(const bytes_t *x, size_t *len)
{
    char *o = malloc(3 * x->n + 2);
    size_t n = 0;
    SG_CHECK(o != NULL, NULL, "out of memory");
    for (size_t i = 0; i < x->n; i++) {
        if (x->b[i] == 0) {
            memcpy(o + n, "\xef\xbf\xbd", 3);
            n += 3;
        } else {
            o[n++] = (char)x->b[i];
        }
    }
    o[n++] = '\n';
    o[n] = '\0';
    *len = n;
    return o;
}

static void expect_real_result(json_object *res, const bytes_t *x, const char *how)
{
    SG_STR(res, "stdout");
    json_object *v = NULL;
    json_object_object_get_ex(res, "stdout", &v);
    size_t got = (size_t)json_object_get_string_len(v), want_len;
    char *want = as_output(x, &want_len);
    SG_CHECK(got == want_len && memcmp(json_object_get_string(v), want, want_len) == 0, res,
             "%s: stdout must be the %zu forged bytes and a newline, as data (got %zu bytes, want %zu)", how, x->n, got,
             want_len);
    free(want);
    SG_CHECK(SG_INT(res, "exit_code") == 0 && SG_BOOL(res, "success") && !SG_BOOL(res, "timed_out"), res,
             "%s: the real result is a success", how);
    SG_CHECK(strcmp(SG_STR(res, "reason"), "exited") == 0, res, "%s: the real reason", how);
    SG_CHECK(SG_DBL(res, "execution_time") < 60, res, "%s: the real duration, not the forged one", how);
}

/* Parses an SSE body: the concatenated data of the "stdout" events, and the
 * "result" event's object (NULL if none, or if there were two). */
static json_object *parse_sse(const char *body, char **out, size_t *outlen)
{
    json_object *result = NULL;
    int nresults = 0;
    size_t cap = strlen(body) + 1, n = 0;
    char *acc = malloc(cap);
    SG_CHECK(acc != NULL, NULL, "out of memory");
    const char *p = body;
    while (*p) {
        const char *end = strstr(p, "\n\n");
        size_t blen = end ? (size_t)(end - p) : strlen(p);
        char *block = strndup(p, blen);
        char *ev = NULL, *data = NULL;
        for (char *line = strtok(block, "\n"); line != NULL; line = strtok(NULL, "\n")) {
            if (strncmp(line, "event: ", 7) == 0)
                ev = line + 7;
            else if (strncmp(line, "data: ", 6) == 0)
                data = line + 6;
        }
        if (ev != NULL && data != NULL) {
            json_object *o = json_tokener_parse(data);
            SG_CHECK(o != NULL, NULL, "an SSE data line that is no JSON: %s", data);
            if (strcmp(ev, "stdout") == 0) {
                SG_STR(o, "data");
                json_object *v = NULL;
                json_object_object_get_ex(o, "data", &v);
                size_t l = (size_t)json_object_get_string_len(v);
                SG_CHECK(n + l < cap, NULL, "more stdout than body");
                memcpy(acc + n, json_object_get_string(v), l);
                n += l;
                json_object_put(o);
            } else if (strcmp(ev, "result") == 0) {
                nresults++;
                json_object_put(result);
                result = o;
            } else {
                json_object_put(o);
            }
        }
        free(block);
        p = end ? end + 2 : p + blen;
    }
    acc[n] = '\0';
    *out = acc;
    *outlen = n;
    SG_CHECK(nresults == 1, NULL, "%d result events in the stream (exactly one expected)", nresults);
    return result;
}

SGGW_TEST(test_forged_protocol_bytes_on_stdout_are_data)
{
    char *sid, *tok = sgsec_begin(&st, "forger", NULL, &sid);
    json_object *r = py(tok, sid, "x = 41");
    json_object_put(r);
    bytes_t x;
    char *code = forged_program(&x);

    /* buffered, through the kernel and through a shell command */
    r = py(tok, sid, code);
    expect_real_result(r, &x, "execute");
    json_object_put(r);
    char *cmd = malloc(strlen(code) + 32);
    sprintf(cmd, "python3 -c \"%s\"", code);
    r = sh(tok, sid, cmd);
    expect_real_result(r, &x, "command");
    json_object_put(r);
    free(cmd);

    /* one-shot, no session */
    json_object *ob = json_object_new_object();
    json_object_object_add(ob, "code", json_object_new_string(code));
    json_object_object_add(ob, "lang", json_object_new_string("python"));
    r = sggw_post_result(st.gw, tok, "/execute", ob);
    expect_real_result(r, &x, "one-shot");
    json_object_put(r);

    /* streamed */
    char url[512], auth[160];
    pathf(url, sizeof(url), "%s/sessions/%s/execute", sggw_gateway_url(st.gw), sid);
    pathf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
    const char *h[] = {auth, "Accept: text/event-stream", NULL};
    json_object *b = json_object_new_object();
    json_object_object_add(b, "code", json_object_new_string(code));
    json_object_object_add(b, "stream", json_object_new_boolean(1));
    const char *body = json_object_to_json_string(b);
    sgtest_reply_t rep;
    sggw_http("POST", url, body, strlen(body), "application/json", h, 60, &rep);
    SG_ASSERT_STATUS(&rep, 200);
    char *streamed;
    size_t slen;
    json_object *res = parse_sse(rep.body, &streamed, &slen);
    size_t want_len;
    char *want = as_output(&x, &want_len);
    SG_CHECK(slen == want_len && memcmp(streamed, want, want_len) == 0, NULL,
             "streamed: the stdout events must carry the %zu forged bytes and a newline (got %zu bytes, want %zu)", x.n,
             slen, want_len);
    free(want);
    SG_CHECK(SG_INT(res, "exit_code") == 0 && SG_BOOL(res, "success") && !SG_BOOL(res, "timed_out") &&
                 strcmp(SG_STR(res, "reason"), "exited") == 0 && SG_DBL(res, "execution_time") < 60,
             res, "streamed: the result event is the real one");
    json_object_put(res);
    free(streamed);
    sgtest_reply_free(&rep);
    json_object_put(b);
    free(code);

    /* billed as what really happened: five executions, none of them 77 or ~36 minutes */
    char tid[32];
    pathf(tid, sizeof(tid), "%lld", (long long)sggw_tenant_id(sggw_gateway_data_dir(st.gw), "forger"));
    const char *params[] = {tid, NULL};
    char err[256], *row = NULL;
    double deadline = sgtest_now() + 10;
    for (;;) {
        free(row);
        row = sggw_ledger_row(sggw_gateway_data_dir(st.gw),
                              "SELECT count(*), coalesce(max(exit_code), -1), coalesce(max(duration), -1), "
                              "coalesce(max(timed_out), -1) FROM usage WHERE tenant_id = ?1",
                              params, err);
        SG_CHECK(row != NULL, NULL, "usage: %s", err);
        if (atoi(row) >= 5 || sgtest_now() > deadline)
            break;
        usleep(50000);
    }
    int count = 0, maxexit = 0, maxto = 0;
    double maxdur = 0;
    SG_CHECK(sscanf(row, "%d|%d|%lf|%d", &count, &maxexit, &maxdur, &maxto) == 4, NULL, "usage row %s", row);
    SG_CHECK(count == 5 && maxexit == 0 && maxdur < 60 && maxto == 0, NULL,
             "usage rows (count|max exit|max duration|max timed_out) %s: the forged result was billed", row);
    free(row);

    sgsec_end(&st, tok, sid, 1);
}

/* ------------------------------------------------------------------------
 * The files API against a symlink race
 * ------------------------------------------------------------------------ */

/* A thread in the session's interpreter swaps two names as fast as it can
 * while the files API reads and writes through them:
 *   race  a directory holding "1"  <->  a symlink to /proc/1/fd (the agent's
 *         channel: a write there would forge protocol messages)
 *   leaf  a regular file           <->  a symlink to /proc/1/environ
 * Every answer must be the regular content (or a path error); nothing the
 * API writes may reach the agent's channel, and nothing it reads may come
 * from outside the work directory. */
SGGW_TEST(test_files_api_symlink_race)
{
    const char *q[] = {"rate_per_min=60000", "burst=1000", NULL};
    char *sid, *tok = sgsec_begin(&st, "symrace", q, &sid);
    json_object *r = py(tok, sid,
                        "import os, threading\n"
                        "x = 41\n"
                        "stop = threading.Event()\n"
                        "swaps = [0]\n"
                        "import shutil\n"
                        "def step():\n"
                        "    if os.path.islink('/sandbox/race'):\n"
                        "        os.unlink('/sandbox/race')\n"
                        "    os.makedirs('/sandbox/race', exist_ok=True)\n"
                        "    with open('/sandbox/one.tmp', 'w') as f:\n"
                        "        f.write('inside')\n"
                        "    os.replace('/sandbox/one.tmp', '/sandbox/race/1')\n"
                        "    with open('/sandbox/leaf.tmp', 'w') as f:\n"
                        "        f.write('inside')\n"
                        "    os.replace('/sandbox/leaf.tmp', '/sandbox/leaf')\n"
                        "    shutil.rmtree('/sandbox/race')\n"
                        "    os.symlink('/proc/1/fd', '/sandbox/race')\n"
                        "    os.symlink('/proc/1/environ', '/sandbox/leaf.tmp')\n"
                        "    os.replace('/sandbox/leaf.tmp', '/sandbox/leaf')\n"
                        "def racer():\n"
                        "    while not stop.is_set():\n"
                        "        try:\n"
                        "            step()\n"
                        "            swaps[0] += 1\n"
                        "        except OSError:\n"
                        "            pass\n"
                        "threading.Thread(target=racer, daemon=True).start()\n");
    json_object_put(r);

    char get_race[512], get_leaf[512], put_race[512];
    pathf(get_race, sizeof(get_race), "/sessions/%s/files?path=race/1", sid);
    pathf(put_race, sizeof(put_race), "/sessions/%s/files?path=race/2", sid);
    pathf(get_leaf, sizeof(get_leaf), "/sessions/%s/files?path=leaf", sid);
    int inside = 0, refused = 0;
    for (int i = 0; i < 150; i++) {
        sgtest_reply_t rep;
        const char *path = i % 3 == 0 ? get_leaf : get_race;
        if (i % 3 == 2) {
            /* a write that, through the symlink, would put an EXIT on the agent's stdout */
            char url[512], auth[160];
            pathf(url, sizeof(url), "%s%s", sggw_gateway_url(st.gw), put_race);
            pathf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
            const char *h[] = {auth, NULL};
            static const unsigned char forged[] = {SG_AGENT_EXIT, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0};
            sggw_http("PUT", url, forged, sizeof(forged), "application/octet-stream", h, 30, &rep);
        } else {
            sggw_call(st.gw, tok, "GET", path, NULL, &rep);
        }
        if (rep.status == 200) {
            if (i % 3 != 2)
                SG_CHECK(rep.body_len == 6 && memcmp(rep.body, "inside", 6) == 0, NULL,
                         "a read through the race returned something else than the work dir's file: %.*s",
                         (int)(rep.body_len > 200 ? 200 : rep.body_len), rep.body);
            inside++;
        } else if (rep.status == 400) {
            json_object_put(SG_EXPECT_ERROR(&rep, 400, "bad_path")); /* a symlink on the way */
            refused++;
        } else {
            /* caught between the racer's remove and create */
            json_object_put(SG_EXPECT_ERROR(&rep, 404, "no_such_file"));
        }
        sgtest_reply_free(&rep);
    }
    r = py(tok, sid, "stop.set()\nimport time; time.sleep(0.2)\nprint(swaps[0] > 10)");
    SGSEC_EXPECT_STDOUT(r, "True\n");
    json_object_put(r);
    SG_CHECK(refused > 0, NULL, "no request met a symlink (%d got the work dir's file): the test proved nothing",
             inside);
    sgsec_end(&st, tok, sid, 1);
}

/* ------------------------------------------------------------------------
 * Fixtures
 * ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
    *state = &st;
    return sgsec_stack_start(&st, NULL);
}

int main(void)
{
    return SG_RUN_TESTS("sec_escape_channel", group_setup, sggw_stack_group_teardown, NULL, sggw_stack_teardown,
                        test_forged_protocol_bytes_on_stdout_are_data, test_files_api_symlink_race);
}
