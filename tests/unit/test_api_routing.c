/*
 * test_api_routing.c — the pure parts of the proxy's request path:
 * sg_http_split_path (common/http.h: how a URL path becomes the route
 * segments the proxy and the gateway dispatch on) and
 * sg_session_container_config (what a validated session becomes in the
 * Docker create request: the sandbox's isolation, limits and labels).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http.h"
#include "container.h"
#include "session_life.h"
#include "sgrun.h"

/* ---- sg_http_split_path ----------------------------------------------------- */

/* Splits a copy of exactly len bytes (not NUL terminated), so a sanitizer
 * build catches any read past the path. Segments are compared, then the
 * copy is freed. */
static int split(const char *p, size_t len, int max, const char **want)
{
    char *copy = malloc(len ? len : 1);
    h2o_iovec_t segs[8];
    int n;

    assert_non_null(copy);
    assert_true(max <= 8);
    memcpy(copy, p, len);
    for (int i = 0; i < 8; i++)
        segs[i] = h2o_iovec_init(NULL, 0);
    n = sg_http_split_path(copy, len, segs, max);
    for (int i = 0; i < n && want != NULL; i++) {
        assert_non_null(want[i]);
        if (segs[i].len != strlen(want[i]) || memcmp(segs[i].base, want[i], segs[i].len) != 0)
            fail_msg("\"%.*s\" segment %d: \"%.*s\", want \"%s\"", (int)len, p, i, (int)segs[i].len, segs[i].base,
                     want[i]);
        /* segments point into the path, no copies */
        assert_true(segs[i].base >= copy && segs[i].base + segs[i].len <= copy + len);
    }
    if (want != NULL && n >= 0)
        assert_null(want[n]);
    /* nothing beyond max is written */
    for (int i = max; i < 8; i++)
        assert_null(segs[i].base);
    free(copy);
    return n;
}

#define SPLIT(p, max, ...) split(p, strlen(p), max, (const char *[]){__VA_ARGS__})

static void test_split_ok(void **state)
{
    assert_int_equal(SPLIT("/", 4, NULL), 0);
    assert_int_equal(SPLIT("/sessions", 4, "sessions", NULL), 1);
    assert_int_equal(SPLIT("/health", 4, "health", NULL), 1);
    assert_int_equal(SPLIT("/sessions/abc/execute", 4, "sessions", "abc", "execute", NULL), 3);
    assert_int_equal(SPLIT("/sessions/abc/files", 3, "sessions", "abc", "files", NULL), 3);
    assert_int_equal(SPLIT("/a/b/c/d", 4, "a", "b", "c", "d", NULL), 4);
    assert_int_equal(SPLIT("/x", 1, "x", NULL), 1);
    /* characters other than '/' are not the splitter's business */
    assert_int_equal(SPLIT("/a.b/%2F/c d", 4, "a.b", "%2F", "c d", NULL), 3);
}

static void test_split_trailing_slash(void **state)
{
    assert_int_equal(SPLIT("/sessions/", 4, "sessions", NULL), 1);
    assert_int_equal(SPLIT("/sessions/abc/", 4, "sessions", "abc", NULL), 2);
    assert_int_equal(SPLIT("/a/b/c/d/", 4, "a", "b", "c", "d", NULL), 4);
}

static void test_split_refused(void **state)
{
    assert_int_equal(split("", 0, 4, NULL), -1);
    assert_int_equal(SPLIT("x", 4, NULL), -1);
    assert_int_equal(SPLIT("sessions/abc", 4, NULL), -1);
    assert_int_equal(SPLIT("//x", 4, NULL), -1);
    assert_int_equal(SPLIT("//", 4, NULL), -1);
    assert_int_equal(SPLIT("/sessions//execute", 4, NULL), -1);
    assert_int_equal(SPLIT("/sessions//", 4, NULL), -1);
    /* more than max */
    assert_int_equal(SPLIT("/a/b/c/d/e", 4, NULL), -1);
    assert_int_equal(SPLIT("/sessions/abc/execute", 2, NULL), -1);
    assert_int_equal(SPLIT("/x", 0, NULL), -1);
    assert_int_equal(SPLIT("/", 0, NULL), 0);
}

static void test_split_uses_len(void **state)
{
    static const char *want[] = {"sessions", "ab", NULL};
    /* only the first 12 bytes are the path */
    assert_int_equal(split("/sessions/abcdef", 12, 4, want), 2);
    assert_int_equal(split("/sessions//x", 10, 4, (const char *[]){"sessions", NULL}), 1);
}

/* ---- sg_session_container_config --------------------------------------------- */

/* The value at a key path (NULL-terminated list of keys), or NULL. */
static json_object *at(json_object *o, ...)
{
    va_list ap;
    const char *k;
    va_start(ap, o);
    while (o != NULL && (k = va_arg(ap, const char *)) != NULL) {
        json_object *v = NULL;
        if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, k, &v))
            v = NULL;
        o = v;
    }
    va_end(ap);
    return o;
}

static const char *str_at(json_object *o, const char *k1, const char *k2)
{
    json_object *v = at(o, k1, k2, NULL);
    if (v == NULL || !json_object_is_type(v, json_type_string))
        fail_msg("%s.%s is not a string", k1, k2 ? k2 : "");
    return json_object_get_string(v);
}

static int64_t int_at(json_object *o, const char *k1, const char *k2)
{
    json_object *v = at(o, k1, k2, NULL);
    if (v == NULL || !json_object_is_type(v, json_type_int))
        fail_msg("%s.%s is not an integer", k1, k2 ? k2 : "");
    return json_object_get_int64(v);
}

static int bool_at(json_object *o, const char *k1, const char *k2)
{
    json_object *v = at(o, k1, k2, NULL);
    if (v == NULL || !json_object_is_type(v, json_type_boolean))
        fail_msg("%s.%s is not a boolean", k1, k2 ? k2 : "");
    return json_object_get_boolean(v);
}

static int array_has(json_object *a, const char *s)
{
    assert_non_null(a);
    assert_true(json_object_is_type(a, json_type_array));
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *v = json_object_array_get_idx(a, i);
        if (json_object_is_type(v, json_type_string) && strcmp(json_object_get_string(v), s) == 0)
            return 1;
    }
    return 0;
}

/* 1 if the comma-separated mount options opts hold exactly the option o. */
static int has_opt(const char *opts, const char *o)
{
    size_t ol = strlen(o);
    for (const char *p = opts; *p != '\0';) {
        const char *c = strchr(p, ',');
        size_t l = c ? (size_t)(c - p) : strlen(p);
        if (l == ol && memcmp(p, o, ol) == 0)
            return 1;
        p += l + (c ? 1 : 0);
    }
    return 0;
}

static void make_session(sg_session_t *s)
{
    memset(s, 0, sizeof(*s));
    strcpy(s->id, "0123abcd-ef01-4a2b-8c3d-456789abcdef");
    strcpy(s->image, "sandgate/python:latest");
    s->lang = sg_lang_find("python", 6);
    assert_non_null(s->lang);
    s->limits.timeout_s = 30;
    s->limits.memory_mb = 512;
    s->limits.cpus = 1.5;
    s->limits.network = 0;
    s->limits.pids = 128;
    s->limits.output_bytes = 1 << 20;
    s->limits.tmpfs_mb = 64;
    s->created_at = 1700000000;
}

/* Builds the config, checks it serializes to JSON that parses back the
 * same, and returns the parsed copy (what Docker would receive). */
static json_object *config(const sg_session_t *s)
{
    json_object *c = sg_session_container_config(s, "proxy-1");
    json_object *back;
    assert_non_null(c);
    back = json_tokener_parse(json_object_to_json_string_ext(c, JSON_C_TO_STRING_PLAIN));
    assert_non_null(back);
    assert_true(json_object_equal(c, back));
    json_object_put(c);
    return back;
}

static void test_config_identity(void **state)
{
    sg_session_t s;
    json_object *c;

    make_session(&s);
    c = config(&s);
    assert_string_equal(str_at(c, "Image", NULL), "sandgate/python:latest");
    /* the agent starts as root and user code runs as 1000 (agent/creds.h) */
    assert_string_equal(str_at(c, "User", NULL), "0:0");
    assert_true(bool_at(c, "OpenStdin", NULL));
    assert_false(bool_at(c, "Tty", NULL));

    assert_string_equal(str_at(c, "Labels", "sandgate.proxy"), "proxy-1");
    assert_string_equal(str_at(c, "Labels", "sandgate.session"), "0123abcd-ef01-4a2b-8c3d-456789abcdef");
    assert_string_equal(str_at(c, "Labels", "sandgate.lang"), "python");
    assert_string_equal(str_at(c, "Labels", "sandgate.kind"), "session");
    assert_string_equal(str_at(c, "Labels", "sandgate.created"), "1700000000");
    /* without a runtime configured, runc, said in the label too */
    assert_string_equal(str_at(c, "Labels", "sandgate.runtime"), "runc");
    assert_string_equal(str_at(c, "HostConfig", "Runtime"), "runc");
    json_object_put(c);

    /* the proxy's runtime (SANDGATE_RUNTIME, runtime.h) is every sandbox's */
    sg_sessions_conf_t sc = {0};
    sc.runtime = "runsc";
    sg_sessions_init(&sc);
    c = config(&s);
    assert_string_equal(str_at(c, "HostConfig", "Runtime"), "runsc");
    assert_string_equal(str_at(c, "Labels", "sandgate.runtime"), "runsc");
    /* under runsc the process cap is RLIMIT_NPROC in the sandbox's kernel;
     * the host's pids cgroup also holds that kernel's threads */
    json_object *nproc = json_object_array_get_idx(at(c, "HostConfig", "Ulimits", NULL), 0);
    assert_non_null(nproc);
    assert_string_equal(str_at(nproc, "Name", NULL), "nproc");
    assert_int_equal(int_at(nproc, "Soft", NULL), 128);
    assert_int_equal(int_at(nproc, "Hard", NULL), 128);
    assert_int_equal(int_at(c, "HostConfig", "PidsLimit"), 128 * SG_RUNSC_PIDS_PER_TASK + SG_RUNSC_PIDS_BASE);
    json_object_put(c);
    /* runsc's entry has no network: a session with the network gets runc
     * when its request names no runtime (it is decided at create) */
    sg_create_req_t req = {.lang = s.lang, .limits = s.limits};
    assert_string_equal(sg_sessions_runtime_for(&req), "runsc");
    req.limits.network = 1;
    assert_string_equal(sg_sessions_runtime_for(&req), "runc");
    req.runtime = "runc";
    assert_string_equal(sg_sessions_runtime_for(&req), "runc");
    s.limits.network = 1;
    s.runtime = sg_sessions_runtime_for(&req);
    c = config(&s);
    assert_string_equal(str_at(c, "HostConfig", "Runtime"), "runc");
    assert_string_equal(str_at(c, "Labels", "sandgate.runtime"), "runc");
    assert_int_equal(int_at(c, "HostConfig", "PidsLimit"), 128);
    assert_null(at(c, "HostConfig", "Ulimits", NULL));
    json_object_put(c);
    s.limits.network = 0;
    memset(&sc, 0, sizeof(sc));
    sg_sessions_init(&sc);
    /* a session's own runtime (named by its request) wins over the default */
    s.runtime = "runsc";
    c = config(&s);
    assert_string_equal(str_at(c, "HostConfig", "Runtime"), "runsc");
    assert_string_equal(str_at(c, "Labels", "sandgate.runtime"), "runsc");
    json_object_put(c);
    req = (sg_create_req_t){.lang = s.lang, .runtime = "runsc"};
    assert_string_equal(sg_sessions_runtime_for(&req), "runsc");
    req.runtime = NULL;
    assert_string_equal(sg_sessions_runtime_for(&req), "runc");
    s.runtime = NULL;

    s.ephemeral = 1;
    s.lang = sg_lang_find("javascript", 10);
    c = config(&s);
    assert_string_equal(str_at(c, "Labels", "sandgate.kind"), "ephemeral");
    assert_string_equal(str_at(c, "Labels", "sandgate.lang"), "javascript");
    json_object_put(c);
}

static void test_config_isolation(void **state)
{
    sg_session_t s;
    json_object *c, *hc;
    const char *opts;

    make_session(&s);
    c = config(&s);
    hc = at(c, "HostConfig", NULL);
    assert_non_null(hc);
    assert_true(bool_at(c, "NetworkDisabled", NULL));
    assert_string_equal(str_at(hc, "NetworkMode", NULL), "none");
    assert_int_equal(json_object_array_length(at(hc, "CapDrop", NULL)), 1);
    assert_true(array_has(at(hc, "CapDrop", NULL), "ALL"));
    /* only what the agent needs to make its children the sandbox user */
    assert_int_equal(json_object_array_length(at(hc, "CapAdd", NULL)), 3);
    assert_true(array_has(at(hc, "CapAdd", NULL), "CAP_SETUID"));
    assert_true(array_has(at(hc, "CapAdd", NULL), "CAP_SETGID"));
    assert_true(array_has(at(hc, "CapAdd", NULL), "CAP_SETPCAP"));
    assert_true(array_has(at(hc, "SecurityOpt", NULL), "no-new-privileges"));
    assert_null(at(hc, "Privileged", NULL));
    assert_true(bool_at(hc, "ReadonlyRootfs", NULL));

    opts = str_at(hc, "Tmpfs", "/sandbox");
    assert_true(has_opt(opts, "exec"));
    assert_false(has_opt(opts, "noexec"));
    assert_true(has_opt(opts, "size=64m"));
    assert_true(has_opt(opts, "nr_inodes=16384")); /* one inode per 4 KiB */
    opts = str_at(hc, "Tmpfs", "/tmp");
    assert_true(has_opt(opts, "exec"));
    assert_false(has_opt(opts, "noexec"));
    assert_true(has_opt(opts, "size=64m"));
    assert_true(has_opt(opts, "nr_inodes=16384"));
    /* /dev/shm is ours, with an inode cap (Docker's own has none) */
    opts = str_at(hc, "Tmpfs", "/dev/shm");
    assert_true(has_opt(opts, "noexec"));
    assert_true(has_opt(opts, "size=64m"));
    assert_true(has_opt(opts, "nr_inodes=16384"));

    assert_string_equal(str_at(hc, "LogConfig", "Type"), "none");
    json_object_put(c);

    s.limits.network = 1;
    c = config(&s);
    assert_false(bool_at(c, "NetworkDisabled", NULL));
    /* never Docker's default bridge, where containers reach each other */
    assert_string_equal(str_at(c, "HostConfig", "NetworkMode"), "sandgate-sandbox");
    /* network does not loosen anything else */
    assert_true(array_has(at(c, "HostConfig", "CapDrop", NULL), "ALL"));
    assert_true(bool_at(c, "HostConfig", "ReadonlyRootfs"));
    json_object_put(c);
}

static void test_config_limits(void **state)
{
    sg_session_t s;
    json_object *c;

    make_session(&s);
    c = config(&s);
    assert_int_equal(int_at(c, "HostConfig", "Memory"), 512LL << 20);
    assert_int_equal(int_at(c, "HostConfig", "MemorySwap"), 512LL << 20);
    assert_int_equal(int_at(c, "HostConfig", "PidsLimit"), 128);
    assert_int_equal(int_at(c, "HostConfig", "NanoCpus"), 1500000000LL);
    json_object_put(c);

    /* no 32-bit overflow in the byte count */
    s.limits.memory_mb = 8192;
    s.limits.pids = 4096;
    s.limits.cpus = 0.25;
    s.limits.tmpfs_mb = 1024;
    c = config(&s);
    assert_int_equal(int_at(c, "HostConfig", "Memory"), 8589934592LL);
    assert_int_equal(int_at(c, "HostConfig", "MemorySwap"), 8589934592LL);
    assert_int_equal(int_at(c, "HostConfig", "PidsLimit"), 4096);
    assert_int_equal(int_at(c, "HostConfig", "NanoCpus"), 250000000LL);
    assert_true(has_opt(str_at(at(c, "HostConfig", NULL), "Tmpfs", "/tmp"), "size=1024m"));
    assert_true(has_opt(str_at(at(c, "HostConfig", NULL), "Tmpfs", "/sandbox"), "size=1024m"));
    json_object_put(c);
}

/* The validator accepts any cpus from 0.01 in steps the client chooses; the
 * nano count must be that value, not one below it from truncating
 * 2.01 * 1e9 = 2009999999.9999998. */
static void test_config_nanocpus_exact(void **state)
{
    static const struct {
        double cpus;
        long long nano;
    } cases[] = {
        {0.01, 10000000LL}, {0.5, 500000000LL}, {2.01, 2010000000LL}, {4.1, 4100000000LL}, {8.2, 8200000000LL}};
    sg_session_t s;
    char wrong[512] = "";
    size_t off = 0;

    make_session(&s);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_object *c;
        s.limits.cpus = cases[i].cpus;
        c = config(&s);
        long long got = int_at(c, "HostConfig", "NanoCpus");
        json_object_put(c);
        if (got != cases[i].nano && off < sizeof(wrong))
            off += (size_t)snprintf(wrong + off, sizeof(wrong) - off, "\n  cpus %g: NanoCpus %lld, want %lld",
                                    cases[i].cpus, got, cases[i].nano);
    }
    if (off != 0)
        fail_msg("NanoCpus truncated:%s", wrong);
}

static void test_config_keep_template(void **state)
{
    sg_session_t s;
    json_object *c;

    make_session(&s);
    s.keep_template = 1;
    c = config(&s);
    /* the root stays read-only; /sandbox is a capped tmpfs on a volume the
     * archive API can read at close */
    assert_true(bool_at(c, "HostConfig", "ReadonlyRootfs"));
    assert_null(at(c, "HostConfig", "Tmpfs", "/sandbox", NULL));
    {
        json_object *mounts = at(c, "HostConfig", "Mounts", NULL), *m = NULL, *v;
        assert_non_null(mounts);
        for (size_t i = 0; i < json_object_array_length(mounts); i++)
            if (json_object_object_get_ex(json_object_array_get_idx(mounts, i), "Target", &v) &&
                strcmp(json_object_get_string(v), "/sandbox") == 0)
                m = json_object_array_get_idx(mounts, i);
        assert_non_null(m);
        assert_string_equal(str_at(m, "Type", NULL), "volume");
        json_object *opts = at(m, "VolumeOptions", "DriverConfig", "Options", NULL);
        assert_string_equal(str_at(opts, "type", NULL), "tmpfs");
        assert_true(has_opt(str_at(opts, "o", NULL), "size=64m"));
        assert_true(has_opt(str_at(opts, "o", NULL), "nr_inodes=16384")); /* files capped as in any tmpfs */
        assert_true(has_opt(str_at(opts, "o", NULL), "nosuid"));
    }
    /* /tmp stays a tmpfs, still capped */
    assert_true(has_opt(str_at(at(c, "HostConfig", NULL), "Tmpfs", "/tmp"), "size=64m"));
    /* the rest of the isolation does not change */
    assert_string_equal(str_at(c, "User", NULL), "0:0");
    assert_true(array_has(at(c, "HostConfig", "CapDrop", NULL), "ALL"));
    assert_true(array_has(at(c, "HostConfig", "SecurityOpt", NULL), "no-new-privileges"));
    assert_string_equal(str_at(c, "HostConfig", "NetworkMode"), "none");
    assert_int_equal(int_at(c, "HostConfig", "Memory"), 512LL << 20);
    json_object_put(c);
}

int main(void)
{
    return SG_RUN_TESTS("api_routing", NULL, NULL, NULL, NULL, test_split_ok, test_split_trailing_slash,
                        test_split_refused, test_split_uses_len, test_config_identity, test_config_isolation,
                        test_config_limits, test_config_nanocpus_exact, test_config_keep_template);
}
