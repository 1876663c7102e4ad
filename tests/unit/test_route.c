/*
 * test_route.c — the route table all three routers are written as
 * (common/route.h): which route a method and path find, what the "*"
 * segments capture, and when the answer is 404 or 405 with which Allow;
 * and the fatal allocation helpers' contract (common/util.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "route.h"
#include "util.h"
#include "sgrun.h"

enum { R_ROOT, R_SESSIONS, R_SESSION, R_EXEC, R_FILES, R_TPL, R_DEEP };

static const sg_route_t table[] = {
    {SG_M_GET | SG_M_HEAD, "/", NULL, R_ROOT},        {SG_M_POST, "/sessions", NULL, R_SESSIONS},
    {SG_M_GET, "/sessions", NULL, R_SESSIONS},        {SG_M_GET | SG_M_DELETE, "/sessions/*", NULL, R_SESSION},
    {SG_M_POST, "/sessions/*/execute", NULL, R_EXEC}, {SG_M_GET | SG_M_PUT, "/sessions/*/files", NULL, R_FILES},
    {SG_M_DELETE, "/templates/*", NULL, R_TPL},       {SG_M_PATCH, "/a/*/b/*", NULL, R_DEEP},
};
#define N (sizeof(table) / sizeof(table[0]))

static h2o_iovec_t iov(const char *s)
{
    return h2o_iovec_init(s, strlen(s));
}

/* Finds over a heap copy of exactly the path's bytes (no NUL), so a
 * sanitizer build sees any read past it. */
static int find(const char *method, const char *path, sg_route_match_t *m, unsigned *allow)
{
    size_t len = strlen(path);
    char *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, path, len);
    int st = sg_route_find(table, N, iov(method), h2o_iovec_init(copy, len), m, allow);
    /* the captures point into the path, no copies: check before freeing */
    for (int i = 0; st == 0 && i < m->nargs; i++)
        assert_true(m->arg[i].base >= copy && m->arg[i].base + m->arg[i].len <= copy + len);
    /* keep the captured bytes readable for the caller's comparisons */
    static char keep[256];
    assert_true(len < sizeof(keep));
    memcpy(keep, copy, len);
    for (int i = 0; st == 0 && i < m->nargs; i++)
        m->arg[i].base = keep + (m->arg[i].base - copy);
    free(copy);
    return st;
}

static void assert_arg(const sg_route_match_t *m, int i, const char *want)
{
    assert_true(i < m->nargs);
    if (m->arg[i].len != strlen(want) || memcmp(m->arg[i].base, want, m->arg[i].len) != 0)
        fail_msg("arg %d is \"%.*s\", want \"%s\"", i, (int)m->arg[i].len, m->arg[i].base, want);
}

static void test_found(void **state)
{
    sg_route_match_t m;
    unsigned allow = 99;

    assert_int_equal(find("GET", "/", &m, &allow), 0);
    assert_int_equal(m.route->id, R_ROOT);
    assert_int_equal(m.nargs, 0);
    assert_int_equal(allow, 0);
    assert_int_equal(find("HEAD", "/", &m, NULL), 0);

    /* the same path, two rows: the method picks the row */
    assert_int_equal(find("POST", "/sessions", &m, NULL), 0);
    assert_ptr_equal(m.route, &table[1]);
    assert_int_equal(find("GET", "/sessions", &m, NULL), 0);
    assert_ptr_equal(m.route, &table[2]);

    assert_int_equal(find("DELETE", "/sessions/abc", &m, NULL), 0);
    assert_int_equal(m.route->id, R_SESSION);
    assert_int_equal(m.nargs, 1);
    assert_arg(&m, 0, "abc");

    assert_int_equal(find("POST", "/sessions/0f3e/execute", &m, NULL), 0);
    assert_int_equal(m.route->id, R_EXEC);
    assert_arg(&m, 0, "0f3e");

    assert_int_equal(find("PATCH", "/a/x1/b/y22", &m, NULL), 0);
    assert_int_equal(m.route->id, R_DEEP);
    assert_int_equal(m.nargs, 2);
    assert_arg(&m, 0, "x1");
    assert_arg(&m, 1, "y22");

    /* a trailing slash is ignored */
    assert_int_equal(find("GET", "/sessions/abc/files/", &m, NULL), 0);
    assert_int_equal(m.route->id, R_FILES);
}

static void test_not_found(void **state)
{
    sg_route_match_t m;
    unsigned allow = 99;
    const char *paths[] = {
        "/nope",    "/sessions/abc/nope", "/sessions/abc/execute/more", "/templates", "/a/x/b",
        "",         "sessions",           "/sessions//execute",         "//",         "/1/2/3/4/5/6/7/8/9",
        "/SESSIONS"};

    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        int st = find("GET", paths[i], &m, &allow);
        if (st != 404)
            fail_msg("GET \"%s\": %d, want 404", paths[i], st);
        assert_int_equal(allow, 0);
        assert_null(m.route);
    }
    /* a method no route knows, on a path no route matches, is still a 404 */
    assert_int_equal(find("BREW", "/nope", &m, &allow), 404);
}

static void test_method_not_allowed(void **state)
{
    sg_route_match_t m;
    unsigned allow = 0;

    /* the union of every row that matches the path */
    assert_int_equal(find("PUT", "/sessions", &m, &allow), 405);
    assert_int_equal(allow, SG_M_GET | SG_M_POST);
    assert_null(m.route);

    assert_int_equal(find("POST", "/sessions/abc", &m, &allow), 405);
    assert_int_equal(allow, SG_M_GET | SG_M_DELETE);

    /* GET does not imply HEAD */
    assert_int_equal(find("HEAD", "/sessions", &m, &allow), 405);
    assert_int_equal(allow, SG_M_GET | SG_M_POST);

    /* an unknown method on a known path */
    assert_int_equal(find("OPTIONS", "/sessions/x/files", &m, &allow), 405);
    assert_int_equal(allow, SG_M_GET | SG_M_PUT);
    assert_int_equal(find("get", "/", &m, &allow), 405); /* methods are case-sensitive */
    assert_int_equal(allow, SG_M_GET | SG_M_HEAD);
}

static void test_allow_text(void **state)
{
    char out[64];

    sg_route_allow_text(SG_M_GET, out, sizeof(out));
    assert_string_equal(out, "GET");
    sg_route_allow_text(SG_M_PATCH | SG_M_GET | SG_M_DELETE | SG_M_HEAD | SG_M_POST | SG_M_PUT, out, sizeof(out));
    assert_string_equal(out, "GET, HEAD, POST, PUT, DELETE, PATCH");
    sg_route_allow_text(0, out, sizeof(out));
    assert_string_equal(out, "");
    /* a short buffer is cut at a whole method, never overrun */
    char small[12];
    memset(small, 'x', sizeof(small));
    sg_route_allow_text(SG_M_GET | SG_M_HEAD | SG_M_POST, small, sizeof(small));
    assert_string_equal(small, "GET, HEAD");
    assert_int_equal(sg_route_method(iov("DELETE")), SG_M_DELETE);
    assert_int_equal(sg_route_method(iov("DELETEX")), 0);
    assert_int_equal(sg_route_method(iov("")), 0);
}

static void test_xalloc(void **state)
{
    char *s = sg_xstrndup("abcdef", 3);
    assert_string_equal(s, "abc");
    free(s);
    s = sg_xstrndup("ab", 10); /* n past the string: stops at its end */
    assert_string_equal(s, "ab");
    free(s);
    s = sg_xstrdup("");
    assert_string_equal(s, "");
    free(s);
    int *v = sg_xcalloc(4, sizeof(int));
    for (int i = 0; i < 4; i++)
        assert_int_equal(v[i], 0);
    v = sg_xrealloc(v, 1000 * sizeof(int));
    v[999] = 7;
    assert_int_equal(v[0], 0);
    free(v);
    /* zero bytes is still a pointer to free, never NULL */
    void *z = sg_xmalloc(0);
    assert_non_null(z);
    free(z);
}

int main(void)
{
    return SG_RUN_TESTS("route", NULL, NULL, NULL, NULL, test_found, test_not_found, test_method_not_allowed,
                        test_allow_text, test_xalloc);
}
