/*
 * test_placement.c — the gateway's proxies as placement.h takes them, pure
 * logic on a loop that never runs a check: SANDGATE_PROXY_URL parsed and
 * normalised (what session records keep), bad lists refused; power of two
 * choices on the reported load (a ready pool container first, then fewer
 * sessions for max_containers, then less memory), a proxy out of placement
 * never chosen, a burst spread by the picks counted until the next report;
 * one-shots to the least loaded; the grace of a proxy out of placement.
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
#include "placement.h"
#include "sgrun.h"
#include "util.h"

static h2o_loop_t *loop;

static void free_all(void)
{
    sg_proxies_free();
    h2o_evloop_run(loop, 0);
}

static void test_normalise(void **state)
{
    char out[SG_PROXY_URL_MAX];
    static const struct {
        const char *in, *out;
    } ok[] = {
        {"http://127.0.0.1:8000", "http://127.0.0.1:8000"},
        {"HTTP://Proxy-A.Example:8000/", "http://proxy-a.example:8000"},
        {"http://h:1/Base/Path/", "http://h:1/Base/Path"},
        /* a Unix socket (h2o's form): the path is the file's, case and all */
        {"http://[unix:/run/Sandgate/proxy.sock]", "http://[unix:/run/Sandgate/proxy.sock]"},
        {"HTTP://[UNIX:/Run/P.sock]/", "http://[unix:/Run/P.sock]"},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        assert_int_equal(sg_proxy_url_normalise(ok[i].in, strlen(ok[i].in), out, sizeof(out)), 0);
        assert_string_equal(out, ok[i].out);
    }
    static const char *const bad[] = {"",
                                      "127.0.0.1:8000",
                                      "ftp://h",
                                      "http://",
                                      "http:///",
                                      "http://a b",
                                      "http://h\x7f",
                                      "unix:///run/x.sock",
                                      "https://h:1",
                                      "http://[unix:relative.sock]",
                                      "http://[unix:/]",
                                      "http://[unix:/p.sock]/path",
                                      "http://[unix:/a b.sock]",
                                      "http://[unix:/a,b]",
                                      "http://[unix:/p.sock"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(sg_proxy_url_normalise(bad[i], strlen(bad[i]), out, sizeof(out)), -1);
    char longer[SG_PROXY_URL_MAX + 16];
    memset(longer, 'a', sizeof(longer));
    memcpy(longer, "http://", 7);
    assert_int_equal(sg_proxy_url_normalise(longer, sizeof(longer), out, sizeof(out)), -1);
}

static void test_lists(void **state)
{
    char err[256];
    static const char *const bad[] = {
        "", " , ", "http://a:1,", "http://a:1,,http://b:1", "http://a:1, HTTP://A:1/", "http://a:1,b:2"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(sg_proxies_init(loop, bad[i], 1 << 20, 5000, err, sizeof(err)), -1);
        assert_true(strstr(err, "SANDGATE_PROXY_URL") != NULL);
        assert_int_equal(sg_proxies_count(), 0);
    }
    assert_int_equal(sg_proxies_init(loop, " http://A:1/ ,\thttp://b:2", 1 << 20, 60000, err, sizeof(err)), 0);
    assert_int_equal(sg_proxies_count(), 2);
    assert_string_equal(sg_proxies_at(0)->url, "http://a:1");
    assert_string_equal(sg_proxies_at(1)->url, "http://b:2");
    assert_int_equal(sg_proxies_grace_ms(), SG_PROXY_GRACE_MAX_MS); /* capped */
    assert_ptr_equal(sg_proxies_find(""), sg_proxies_at(0));        /* a session from before placement */
    assert_ptr_equal(sg_proxies_find(NULL), sg_proxies_at(0));
    assert_ptr_equal(sg_proxies_find("http://b:2"), sg_proxies_at(1));
    assert_null(sg_proxies_find("http://c:3"));
    assert_null(sg_proxies_at(2));
    free_all();
}

static void report(sg_proxy_t *p, long sessions, long max, int64_t memory, long python_free)
{
    p->in_placement = 1;
    p->docker_ok = 1;
    p->sessions = sessions;
    p->max_containers = max;
    p->memory_committed = memory;
    p->nlangs = 1;
    snprintf(p->pool_free[0].lang, sizeof(p->pool_free[0].lang), "python");
    p->pool_free[0].free = python_free;
}

static void test_place(void **state)
{
    char err[256];
    assert_int_equal(sg_proxies_init(loop, "http://a:1,http://b:2", 1 << 20, 2000, err, sizeof(err)), 0);
    sg_proxy_t *a = sg_proxies_at(0), *b = sg_proxies_at(1);

    /* fewer sessions for max_containers */
    report(a, 10, 100, 0, 0);
    report(b, 10, 20, 0, 0);
    assert_ptr_equal(sg_proxies_place("python"), a);
    assert_int_equal(a->sessions, 11); /* counted until the next report */
    /* a ready pool container of the language first */
    report(a, 10, 100, 0, 0);
    report(b, 15, 100, 0, 1);
    assert_ptr_equal(sg_proxies_place("python"), b);
    assert_int_equal(b->pool_free[0].free, 0);
    assert_ptr_equal(sg_proxies_place("python"), a); /* b's warm one was taken */
    assert_ptr_equal(sg_proxies_place("ruby"), a);   /* none of ruby anywhere: load */
    /* then less memory */
    report(a, 5, 100, 8 << 20, 0);
    report(b, 5, 100, 4 << 20, 0);
    assert_ptr_equal(sg_proxies_place(NULL), b);
    /* a burst spreads: each pick counts until the next report */
    report(a, 0, 100, 0, 0);
    report(b, 0, 100, 0, 0);
    int on[2] = {0, 0};
    for (int i = 0; i < 40; i++)
        on[sg_proxies_place("python") == a ? 0 : 1]++;
    assert_int_equal(on[0], 20);
    assert_int_equal(on[1], 20);

    /* out of placement, or its engine down: never chosen */
    report(a, 0, 100, 0, 1);
    report(b, 50, 100, 0, 0);
    a->in_placement = 0;
    for (int i = 0; i < 10; i++)
        assert_ptr_equal(sg_proxies_place("python"), b);
    a->in_placement = 1;
    a->docker_ok = 0;
    assert_ptr_equal(sg_proxies_place("python"), b);
    assert_ptr_equal(sg_proxies_least_loaded("python"), b);
    b->in_placement = 0;
    assert_null(sg_proxies_place("python"));
    assert_null(sg_proxies_least_loaded("python"));
    assert_int_equal(sg_proxies_up(), 1);

    /* one-shots: load alone (a warm container elsewhere does not pull them) */
    report(a, 3, 100, 0, 0);
    report(b, 0, 100, 0, 0);
    a->pool_free[0].free = 5;
    assert_ptr_equal(sg_proxies_least_loaded("python"), b);
    assert_ptr_equal(sg_proxies_least_loaded("python"), b); /* picks are not counted: nothing stays */
    free_all();
}

static void test_grace(void **state)
{
    char err[256];
    long wait = -1;
    assert_int_equal(sg_proxies_init(loop, "http://a:1,http://b:2", 1 << 20, 2000, err, sizeof(err)), 0);
    sg_proxy_t *a = sg_proxies_at(0);
    assert_int_equal(sg_proxy_lost(a, &wait), 0);
    assert_int_equal(wait, 0);
    a->in_placement = 0;
    a->out_since_ms = sg_now_ms() - 500;
    assert_int_equal(sg_proxy_lost(a, &wait), 0);
    assert_true(wait > 1000 && wait <= 1500);
    a->out_since_ms = sg_now_ms() - 2000;
    assert_int_equal(sg_proxy_lost(a, NULL), 1);
    free_all();

    /* one proxy: as before placement — always it, never lost */
    assert_int_equal(sg_proxies_init(loop, "http://a:1", 1 << 20, 2000, err, sizeof(err)), 0);
    a = sg_proxies_at(0);
    a->in_placement = 0;
    a->out_since_ms = sg_now_ms() - 60000;
    assert_ptr_equal(sg_proxies_place("python"), a);
    assert_ptr_equal(sg_proxies_least_loaded("python"), a);
    assert_int_equal(sg_proxy_lost(a, &wait), 0);
    free_all();
}

int main(void)
{
    loop = h2o_evloop_create();
    int rc = SG_RUN_TESTS("placement", NULL, NULL, NULL, NULL, test_normalise, test_lists, test_place, test_grace);
    sg_loop_forget(loop); /* the proxies' upstreams may have used it */
    h2o_evloop_destroy(loop);
    return rc;
}
