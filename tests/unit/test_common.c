/*
 * test_common.c — the building blocks under common/: the capped buffer,
 * the configuration table, JSON body parsing and field getters, UTF-8
 * sanitizing, number formatting (also snprintf's stand-ins), UUIDs, RFC 3339 time strings and the
 * pool of random bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "sgunit.h"

#include "buf.h"
#include "config.h"
#include "json.h"
#include "usage_hdr.h"
#include "utf8_ref.h"
#include "util.h"

static void assert_contains(const char *hay, const char *needle)
{
    if (strstr(hay, needle) == NULL)
        fail_msg("\"%s\" does not contain \"%s\"", hay, needle);
}

/* ---- sg_buf ------------------------------------------------------------------ */

static void test_buf_cap(void **state)
{
    sg_buf_t b;

    sg_buf_init(&b, 10);
    assert_int_equal(sg_buf_append(&b, "abcd", 4), 0);
    assert_int_equal(sg_buf_append(&b, "efghij", 6), 0); /* exactly max */
    assert_int_equal(b.len, 10);
    assert_string_equal(b.base, "abcdefghij");

    /* one more byte fails and leaves everything as it was */
    char *base = b.base;
    size_t cap = b.cap;
    assert_int_equal(sg_buf_append(&b, "k", 1), -1);
    assert_int_equal(b.len, 10);
    assert_ptr_equal(b.base, base);
    assert_int_equal(b.cap, cap);
    assert_memory_equal(b.base, "abcdefghij", 11);
    assert_int_equal(sg_buf_append(&b, "klmnopqrstuvwxyz", 16), -1);
    assert_int_equal(sg_buf_append(&b, "k", SIZE_MAX), -1); /* no overflow in len + n */
    assert_int_equal(b.len, 10);
    assert_memory_equal(b.base, "abcdefghij", 11);
    /* nothing more is still fine at the cap */
    assert_int_equal(sg_buf_append(&b, "", 0), 0);
    assert_int_equal(b.len, 10);
    sg_buf_free(&b);
    assert_null(b.base);
    assert_int_equal(b.len, 0);

    /* a single append larger than max fails on an empty buffer */
    sg_buf_init(&b, 3);
    assert_int_equal(sg_buf_append(&b, "abcd", 4), -1);
    assert_int_equal(b.len, 0);
    assert_int_equal(sg_buf_append(&b, "abc", 3), 0);
    assert_string_equal(b.base, "abc");
    sg_buf_free(&b);

    sg_buf_init(&b, 0);
    assert_int_equal(sg_buf_append(&b, "a", 1), -1);
    assert_int_equal(b.len, 0);
    sg_buf_free(&b);
}

static void test_buf_grow(void **state)
{
    sg_buf_t b;
    char want[5000];

    sg_buf_init(&b, sizeof(want));
    for (size_t i = 0; i < sizeof(want); i++) {
        want[i] = (char)('a' + i % 26);
        assert_int_equal(sg_buf_append(&b, &want[i], 1), 0);
        assert_int_equal(b.len, i + 1);
        assert_true(b.cap >= b.len + 1);
        assert_int_equal(b.base[b.len], '\0');
    }
    assert_memory_equal(b.base, want, sizeof(want));
    assert_int_equal(sg_buf_append(&b, "x", 1), -1);

    sg_buf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.base[0], '\0');
    assert_int_equal(sg_buf_append(&b, "again", 5), 0);
    assert_string_equal(b.base, "again");
    sg_buf_free(&b);

    /* binary data with NULs is kept whole */
    sg_buf_init(&b, 100);
    assert_int_equal(sg_buf_append(&b, "a\0b\0", 4), 0);
    assert_int_equal(b.len, 4);
    assert_memory_equal(b.base, "a\0b\0", 5);
    sg_buf_free(&b);

    /* reset of a buffer that never allocated */
    sg_buf_init(&b, 10);
    sg_buf_reset(&b);
    assert_int_equal(b.len, 0);
    sg_buf_free(&b);
}

/* sg_buf_consume(b, n) leaves `left`. */
static void expect_consumed(sg_buf_t *b, size_t n, const char *left)
{
    sg_buf_consume(b, n);
    assert_int_equal(b->len, strlen(left));
    assert_string_equal(b->base, left);
}

static void test_buf_consume(void **state)
{
    sg_buf_t b;

    sg_buf_init(&b, 64);
    assert_int_equal(sg_buf_append(&b, "hello world", 11), 0);
    expect_consumed(&b, 0, "hello world");
    expect_consumed(&b, 6, "world");
    expect_consumed(&b, 4, "d");
    expect_consumed(&b, 1, "");
    assert_int_equal(sg_buf_append(&b, "abc", 3), 0);
    expect_consumed(&b, 1000, "");

    /* consumed room is room again: the cap is on what is held */
    sg_buf_free(&b);
    sg_buf_init(&b, 8);
    assert_int_equal(sg_buf_append(&b, "12345678", 8), 0);
    assert_int_equal(sg_buf_append(&b, "9", 1), -1);
    sg_buf_consume(&b, 3);
    assert_int_equal(sg_buf_append(&b, "9ab", 3), 0);
    assert_string_equal(b.base, "456789ab");
    assert_int_equal(sg_buf_append(&b, "c", 1), -1);
    sg_buf_free(&b);
}

/* ---- configuration --------------------------------------------------------------- */

static long v_int;
static double v_dbl;
static int v_bool;
static const char *v_str;

static const sg_cfg_entry_t e_int = {"SG_TEST_INT", SG_CFG_INT, "10", 1, 100, &v_int, "an int"};
static const sg_cfg_entry_t e_dbl = {"SG_TEST_DBL", SG_CFG_DOUBLE, "0.5", 0.01, 64, &v_dbl, "a double"};
static const sg_cfg_entry_t e_bool = {"SG_TEST_BOOL", SG_CFG_BOOL, "false", 0, 0, &v_bool, "a bool"};
static const sg_cfg_entry_t e_str = {"SG_TEST_STR", SG_CFG_STR, "sandgate/", 0, 0, &v_str, "a string"};

static void parse_ok(const sg_cfg_entry_t *e, const char *v)
{
    char err[256] = "";
    if (sg_config_parse(e, v, err, sizeof(err)) != 0)
        fail_msg("%s=\"%s\" refused: %s", e->env, v, err);
}

static void parse_bad(const sg_cfg_entry_t *e, const char *v)
{
    char err[256] = "";
    if (sg_config_parse(e, v, err, sizeof(err)) != -1)
        fail_msg("%s=\"%s\" accepted", e->env, v);
    assert_contains(err, e->env);
}

static void test_config_int(void **state)
{
    parse_ok(&e_int, "1");
    assert_int_equal(v_int, 1);
    parse_ok(&e_int, "100");
    assert_int_equal(v_int, 100);
    parse_ok(&e_int, "42");
    assert_int_equal(v_int, 42);
    parse_ok(&e_int, "+7");
    assert_int_equal(v_int, 7);

    /* negative bounds */
    sg_cfg_entry_t neg = e_int;
    neg.min = -10;
    neg.max = -1;
    parse_ok(&neg, "-10");
    assert_int_equal(v_int, -10);
    parse_bad(&neg, "0");
    parse_bad(&neg, "-11");
}

static void test_config_int_errors(void **state)
{
    static const char *bad[] = {
        "0",   "101", "-5", "abc", "12x", "", "-0", "1.5", "1e2", "99999999999999999999", "-99999999999999999999",
        "0x10"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        parse_bad(&e_int, bad[i]);
}

static void test_config_double(void **state)
{
    static const char *bad[] = {"0", "0.009", "64.0001", "-1", "abc", "", "1.5x", "nan", "inf", "-inf", "1e999"};

    parse_ok(&e_dbl, "0.01");
    assert_true(v_dbl == 0.01);
    parse_ok(&e_dbl, "64");
    assert_true(v_dbl == 64);
    parse_ok(&e_dbl, "1.25");
    assert_true(v_dbl == 1.25);
    parse_ok(&e_dbl, "2e1");
    assert_true(v_dbl == 20);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        parse_bad(&e_dbl, bad[i]);
}

static void test_config_bool(void **state)
{
    static const char *yes[] = {"1", "true", "TRUE", "True", "yes", "YES"};
    static const char *no[] = {"0", "false", "FALSE", "no", "No", ""};
    static const char *bad[] = {"2", "maybe", "on", "off", "y", "truex", " 1"};

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        v_bool = 0;
        parse_ok(&e_bool, yes[i]);
        assert_int_equal(v_bool, 1);
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        v_bool = 1;
        parse_ok(&e_bool, no[i]);
        assert_int_equal(v_bool, 0);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        parse_bad(&e_bool, bad[i]);
}

static void test_config_str(void **state)
{
    static const char value[] = "registry.example/";
    parse_ok(&e_str, value);
    assert_ptr_equal(v_str, value);
    parse_ok(&e_str, "");
    assert_string_equal(v_str, "");
}

/* sg_config_load() of the four entries of table succeeds with these values. */
static void expect_loaded(const sg_cfg_entry_t *table, int i, double d, int b, const char *str)
{
    char err[256] = "";
    assert_int_equal(sg_config_load(table, 4, err, sizeof(err)), 0);
    assert_int_equal(v_int, i);
    assert_true(v_dbl == d);
    assert_int_equal(v_bool, b);
    assert_string_equal(v_str, str);
}

static void test_config_load(void **state)
{
    const sg_cfg_entry_t table[] = {e_int, e_dbl, e_bool, e_str};
    char err[256] = "";

    unsetenv("SG_TEST_INT");
    unsetenv("SG_TEST_DBL");
    unsetenv("SG_TEST_BOOL");
    unsetenv("SG_TEST_STR");
    v_int = -1, v_dbl = -1, v_bool = -1, v_str = NULL;
    expect_loaded(table, 10, 0.5, 0, "sandgate/");

    setenv("SG_TEST_INT", "77", 1);
    setenv("SG_TEST_BOOL", "yes", 1);
    setenv("SG_TEST_STR", "mine/", 1);
    expect_loaded(table, 77, 0.5, 1, "mine/");

    /* an empty variable is a value, not "unset" */
    setenv("SG_TEST_STR", "", 1);
    assert_int_equal(sg_config_load(table, 4, err, sizeof(err)), 0);
    assert_string_equal(v_str, "");

    setenv("SG_TEST_DBL", "lots", 1);
    assert_int_equal(sg_config_load(table, 4, err, sizeof(err)), -1);
    assert_contains(err, "SG_TEST_DBL");
    assert_contains(err, "lots");
    setenv("SG_TEST_DBL", "1", 1);
    setenv("SG_TEST_INT", "1000", 1);
    assert_int_equal(sg_config_load(table, 4, err, sizeof(err)), -1);
    assert_contains(err, "SG_TEST_INT");

    /* a bad default is an error too */
    unsetenv("SG_TEST_INT");
    sg_cfg_entry_t bad = e_int;
    bad.def = "zero";
    assert_int_equal(sg_config_load(&bad, 1, err, sizeof(err)), -1);
    assert_contains(err, "SG_TEST_INT");

    unsetenv("SG_TEST_DBL");
    unsetenv("SG_TEST_BOOL");
    unsetenv("SG_TEST_STR");
}

/* ---- JSON bodies ------------------------------------------------------------------ */

static json_object *parse(const char *s, size_t len, char *err, size_t errlen)
{
    /* a copy of exactly len bytes, not NUL terminated: catches overreads */
    char *copy = malloc(len ? len : 1);
    json_object *o;
    assert_non_null(copy);
    memcpy(copy, s, len);
    err[0] = '\0';
    o = sg_json_parse_object(copy, len, err, errlen);
    free(copy);
    return o;
}

static void parse_fails(const char *s, size_t len, const char *needle)
{
    char err[256];
    json_object *o = parse(s, len, err, sizeof(err));
    if (o != NULL) {
        json_object_put(o);
        fail_msg("body \"%.*s\" accepted", (int)len, s);
    }
    assert_true(err[0] != '\0');
    if (needle != NULL && strstr(err, needle) == NULL)
        fail_msg("body \"%.*s\": error \"%s\" does not contain \"%s\"", (int)len, s, err, needle);
}

/* Bodies the parser refuses, by the test that sends them (BAD_BODIES: a
 * cmocka test over the rows of its name): the length given (a body may hold
 * a NUL) and what the error says (NULL: only that there is one). */
static const struct {
    const char *test, *body;
    size_t len;
    const char *says;
} bad_bodies[] = {
    {"test_json_parse_trailing", "{}x", 3, "not valid JSON"},
    {"test_json_parse_trailing", "{} {}", 5, "not valid JSON"},
    {"test_json_parse_trailing", "{}}", 3, "not valid JSON"},
    {"test_json_parse_trailing", "{\"a\":1},", 8, "not valid JSON"},
    {"test_json_parse_trailing", "{} \n x", 6, "not valid JSON"},
    {"test_json_parse_bad", "   ", 3, NULL},
    {"test_json_parse_bad", "", 0, "empty"},
    {"test_json_parse_bad", "{", 1, "not valid JSON"},
    {"test_json_parse_bad", "{\"a\":}", 6, "not valid JSON"},
    {"test_json_parse_bad", "{\"a\" 1}", 7, "not valid JSON"},
    {"test_json_parse_bad", "{\"a\":\"x\0\"}", 10, "not valid JSON"},
    {"test_json_parse_bad", "{}\0", 3, "not valid JSON"},
    {"test_json_parse_bad", "\0{}", 3, "not valid JSON"},
};

static void test_bad_bodies(void **state)
{
    int n = 0;
    for (size_t i = 0; i < sizeof(bad_bodies) / sizeof(bad_bodies[0]); i++) {
        if (strcmp(bad_bodies[i].test, *state) == 0) {
            parse_fails(bad_bodies[i].body, bad_bodies[i].len, bad_bodies[i].says);
            n++;
        }
    }
    assert_true(n > 0);
}
#define BAD_BODIES(test) ((struct CMUnitTest){test, test_bad_bodies, NULL, NULL, (void *)test})

static void test_json_parse_valid(void **state)
{
    static const char *ok[] = {"{\"a\":1}", "{}", " {\"a\":1} ", "{\"a\":1}\r\n\t ", "\n{\"a\":[1,{\"b\":null}]}\n"};
    char err[256];

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        json_object *o = parse(ok[i], strlen(ok[i]), err, sizeof(err));
        if (o == NULL)
            fail_msg("body \"%s\" refused: %s", ok[i], err);
        assert_true(json_object_is_type(o, json_type_object));
        json_object_put(o);
    }

    json_object *o = parse("{\"code\":\"x\",\"n\":2}", 18, err, sizeof(err));
    assert_non_null(o);
    assert_int_equal(json_object_object_length(o), 2);
    json_object_put(o);
}

/* Valid JSON that is not an object: refused with the message that says so
 * (not "not valid JSON"), also when the value ends the body. */
static void test_json_parse_not_object(void **state)
{
    static const char *bodies[] = {"[1,2]", "[]", "\"s\"", "42 ", "null", "true", "false", "42", "-1.5"};
    char err[256], wrong[1024] = "";
    size_t off = 0;

    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        json_object *o = parse(bodies[i], strlen(bodies[i]), err, sizeof(err));
        if (o != NULL) {
            json_object_put(o);
            fail_msg("body %s accepted", bodies[i]);
        }
        if (strstr(err, "must be a JSON object") == NULL && off < sizeof(wrong))
            off += (size_t)snprintf(wrong + off, sizeof(wrong) - off, "\n  %s -> \"%s\"", bodies[i], err);
    }
    if (off != 0)
        fail_msg("not reported as \"must be a JSON object\":%s", wrong);
}

static void test_json_getters(void **state)
{
    json_object *o = json_tokener_parse("{\"s\":\"str\",\"n\":1.5,\"i\":3,\"b\":true,\"nul\":null,"
                                        "\"arr\":[\"a\",\"b\"],\"mixed\":[\"a\",1],\"empty\":[]}");
    char err[128];
    const char *s = NULL;
    size_t len = 0;
    double d = 0;
    int b = -1;
    json_object *a = NULL;

    assert_non_null(o);
    /* present with the right type */
    assert_int_equal(sg_json_get_str(o, "s", &s, &len, err, sizeof(err)), 1);
    assert_string_equal(s, "str");
    assert_int_equal(len, 3);
    assert_int_equal(sg_json_get_str(o, "s", &s, NULL, err, sizeof(err)), 1);
    assert_int_equal(sg_json_get_num(o, "n", &d, err, sizeof(err)), 1);
    assert_true(d == 1.5);
    assert_int_equal(sg_json_get_num(o, "i", &d, err, sizeof(err)), 1);
    assert_true(d == 3);
    assert_int_equal(sg_json_get_bool(o, "b", &b, err, sizeof(err)), 1);
    assert_int_equal(b, 1);
    assert_int_equal(sg_json_get_str_array(o, "arr", &a, err, sizeof(err)), 1);
    assert_int_equal(json_object_array_length(a), 2);
    assert_int_equal(sg_json_get_str_array(o, "empty", &a, err, sizeof(err)), 1);
    assert_int_equal(json_object_array_length(a), 0);

    /* absent or null */
    assert_int_equal(sg_json_get_str(o, "none", &s, &len, err, sizeof(err)), 0);
    assert_int_equal(sg_json_get_str(o, "nul", &s, &len, err, sizeof(err)), 0);
    assert_int_equal(sg_json_get_num(o, "none", &d, err, sizeof(err)), 0);
    assert_int_equal(sg_json_get_num(o, "nul", &d, err, sizeof(err)), 0);
    assert_int_equal(sg_json_get_bool(o, "none", &b, err, sizeof(err)), 0);
    assert_int_equal(sg_json_get_bool(o, "nul", &b, err, sizeof(err)), 0);
    assert_int_equal(sg_json_get_str_array(o, "none", &a, err, sizeof(err)), 0);
    assert_int_equal(sg_json_get_str_array(o, "nul", &a, err, sizeof(err)), 0);

    /* wrong type: -1 and the field named */
    enum { GET_STR, GET_NUM, GET_BOOL, GET_STR_ARRAY };
    static const struct {
        int getter;
        const char *field;
    } wrong[] = {{GET_STR, "n"},  {GET_STR, "arr"}, {GET_NUM, "s"},           {GET_NUM, "b"},
                 {GET_BOOL, "i"}, {GET_BOOL, "s"},  {GET_STR_ARRAY, "mixed"}, {GET_STR_ARRAY, "s"}};
    for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
        const char *f = wrong[i].field;
        char named[32];
        int r = 0;
        err[0] = '\0';
        switch (wrong[i].getter) {
        case GET_STR:
            r = sg_json_get_str(o, f, &s, &len, err, sizeof(err));
            break;
        case GET_NUM:
            r = sg_json_get_num(o, f, &d, err, sizeof(err));
            break;
        case GET_BOOL:
            r = sg_json_get_bool(o, f, &b, err, sizeof(err));
            break;
        case GET_STR_ARRAY:
            r = sg_json_get_str_array(o, f, &a, err, sizeof(err));
            break;
        }
        assert_int_equal(r, -1);
        snprintf(named, sizeof(named), "\"%s\"", f);
        assert_contains(err, named);
    }
    json_object_put(o);
}

/* ---- UTF-8 -------------------------------------------------------------------------- */

static char *sanitize(const char *p, size_t len, size_t *outlen)
{
    char *copy = malloc(len ? len : 1);
    char *out;
    assert_non_null(copy);
    memcpy(copy, p, len);
    out = sg_utf8_sanitize(copy, len, outlen);
    free(copy);
    assert_non_null(out);
    assert_int_equal(out[*outlen], '\0');
    assert_int_equal(strlen(out), *outlen);
    assert_true(utf8_ref_valid((const unsigned char *)out, *outlen));
    return out;
}

static void test_utf8_valid_kept(void **state)
{
    static const char *ok[] = {"",
                               "plain ASCII\n\t~",
                               "\xc3\xa9",         /* é */
                               "\xc2\x80",         /* U+0080, smallest 2-byte */
                               "\xdf\xbf",         /* U+07FF */
                               "\xe0\xa0\x80",     /* U+0800, smallest 3-byte */
                               "\xe2\x82\xac",     /* € */
                               "\xed\x9f\xbf",     /* U+D7FF, just below the surrogates */
                               "\xee\x80\x80",     /* U+E000, just above */
                               "\xef\xbf\xbd",     /* U+FFFD itself */
                               "\xf0\x90\x80\x80", /* U+10000 */
                               "\xf0\x9f\x98\x80", /* emoji */
                               "\xf4\x8f\xbf\xbf", /* U+10FFFF */
                               "a\xc3\xa9z\xe2\x82\xac!"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        size_t n;
        char *out = sanitize(ok[i], strlen(ok[i]), &n);
        assert_int_equal(n, strlen(ok[i]));
        assert_memory_equal(out, ok[i], n);
        free(out);
    }
}

/* in = prefix + bad + suffix; the output must be prefix, one or more U+FFFD,
 * suffix: the ASCII around a bad sequence survives. */
static void expect_replaced(const char *prefix, const char *bad, size_t badlen, const char *suffix)
{
    char in[64];
    size_t pl = strlen(prefix), sl = strlen(suffix), n;
    memcpy(in, prefix, pl);
    memcpy(in + pl, bad, badlen);
    memcpy(in + pl + badlen, suffix, sl);
    char *out = sanitize(in, pl + badlen + sl, &n);
    assert_true(n >= pl + 3 + sl);
    assert_memory_equal(out, prefix, pl);
    assert_memory_equal(out + n - sl, suffix, sl);
    size_t mid = n - pl - sl;
    assert_int_equal(mid % 3, 0);
    assert_true(mid / 3 <= badlen);
    for (size_t i = 0; i < mid; i += 3)
        assert_memory_equal(out + pl + i, "\xef\xbf\xbd", 3);
    free(out);
}

static void test_utf8_invalid(void **state)
{
    static const struct {
        const char *s;
        size_t len;
    } bad[] = {
        {"\x80", 1}, /* lone continuation byte */
        {"\xbf", 1},
        {"\xc3", 1},         /* truncated 2-byte */
        {"\xe2\x82", 2},     /* truncated 3-byte */
        {"\xf0\x9f\x98", 3}, /* truncated 4-byte */
        {"\xc0\x80", 2},     /* overlong NUL */
        {"\xc1\xbf", 2},     /* overlong */
        {"\xe0\x80\x80", 3}, /* overlong 3-byte */
        {"\xe0\x9f\xbf", 3},
        {"\xf0\x80\x80\x80", 4}, /* overlong 4-byte */
        {"\xf0\x8f\xbf\xbf", 4},
        {"\xed\xa0\x80", 3},     /* surrogate U+D800 */
        {"\xed\xbf\xbf", 3},     /* surrogate U+DFFF */
        {"\xf4\x90\x80\x80", 4}, /* U+110000 */
        {"\xf5\x80\x80\x80", 4},
        {"\xf8\x88\x80\x80\x80", 5}, /* 5-byte form */
        {"\xfe", 1},
        {"\xff", 1},
        {"\0", 1}, /* NUL */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        expect_replaced("", bad[i].s, bad[i].len, "");
        expect_replaced("ab", bad[i].s, bad[i].len, "cd");
    }
    /* a lead byte followed by ASCII: the ASCII is not swallowed */
    expect_replaced("x", "\xc3", 1, "(y");
    expect_replaced("x", "\xe2\x82", 2, "(y");
    expect_replaced("x", "\xf0\x9f\x98", 3, "(y");

    /* a bad byte between two good characters */
    size_t n;
    char *out = sanitize("\xc3\xa9\xff\xe2\x82\xac", 6, &n);
    assert_int_equal(n, 8);
    assert_memory_equal(out, "\xc3\xa9\xef\xbf\xbd\xe2\x82\xac", 8);
    free(out);
}

static uint32_t rng_state = 0x9e3779b9;

static uint32_t rng(void)
{
    return sgunit_xorshift32(&rng_state);
}

static void test_utf8_random(void **state)
{
    char in[257];
    for (int round = 0; round < 2000; round++) {
        size_t len = rng() % sizeof(in), n;
        for (size_t i = 0; i < len; i++) {
            uint32_t r = rng();
            /* bias toward the interesting bytes */
            in[i] = (char)(r % 4 == 0 ? 0x80 + (r >> 8) % 0x80 : r % 4 == 1 ? (r >> 8) % 0x80 : (r >> 8));
        }
        char *out = sanitize(in, len, &n); /* asserts validity */
        if (utf8_ref_valid((const unsigned char *)in, len)) {
            assert_int_equal(n, len);
            assert_memory_equal(out, in, len);
        }
        free(out);
    }
}

static void test_json_add_bytes(void **state)
{
    json_object *o = json_object_new_object(), *back, *v;
    const char *s;

    sg_json_add_bytes(o, "stdout", "ok\xff\0\xc3", 5);
    s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    assert_true(utf8_ref_valid((const unsigned char *)s, strlen(s)));
    back = json_tokener_parse(s);
    assert_non_null(back);
    assert_true(json_object_object_get_ex(back, "stdout", &v));
    assert_memory_equal(json_object_get_string(v), "ok\xef\xbf\xbd", 5);
    json_object_put(back);
    json_object_put(o);
}

static void test_json_new_double(void **state)
{
    json_object *o = json_object_new_object(), *v;

    v = sg_json_new_double(0.1234567, 6);
    assert_string_equal(json_object_to_json_string(v), "0.123457");
    json_object_put(v);
    v = sg_json_new_double(0.001234, 6);
    assert_string_equal(json_object_to_json_string(v), "0.001234");
    json_object_put(v);
    v = sg_json_new_double(12.0, 0);
    assert_string_equal(json_object_to_json_string(v), "12");
    json_object_put(v);

    /* inside an object, and the value itself is still the double */
    json_object_object_add(o, "t", sg_json_new_double(1.0 / 3.0, 3));
    assert_string_equal(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN), "{\"t\":0.333}");
    assert_true(json_object_object_get_ex(o, "t", &v));
    assert_true(json_object_get_double(v) == 1.0 / 3.0);
    json_object_put(o);
}

/* ---- util ------------------------------------------------------------------------------ */

static void test_uuid4(void **state)
{
    char a[37], b[37];

    for (int i = 0; i < 200; i++) {
        memset(a, 'X', sizeof(a));
        assert_int_equal(sg_uuid4(a), 0);
        assert_int_equal(strlen(a), 36);
        assert_true(sg_is_uuid(a, 36));
        assert_int_equal(a[8], '-');
        assert_int_equal(a[13], '-');
        assert_int_equal(a[18], '-');
        assert_int_equal(a[23], '-');
        assert_int_equal(a[14], '4');           /* version */
        assert_non_null(strchr("89ab", a[19])); /* RFC 4122 variant */
    }
    assert_int_equal(sg_uuid4(b), 0);
    assert_string_not_equal(a, b);
}

/* sg_hex, sg_fmt_i64 and sg_copy write what snprintf would. */
static void test_formatting(void **state)
{
    char got[64], want[64];
    unsigned char b[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xff};

    sg_hex(got, b, sizeof(b));
    assert_string_equal(got, "00017f80abff");
    memset(got, 'x', sizeof(got));
    sg_hex(got, b, 0);
    assert_string_equal(got, "");

    const int64_t v[] = {0, 1, -1, 9, 10, -10, 99, 1000000007, INT64_MAX, INT64_MIN, INT64_MIN + 1};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        size_t n = sg_fmt_i64(got, v[i]);
        snprintf(want, sizeof(want), "%lld", (long long)v[i]);
        assert_string_equal(got, want);
        assert_int_equal(n, strlen(want));
    }

    /* cut to the room, and at a NUL inside the length, as "%.*s" */
    assert_int_equal(sg_copy(got, 6, "abcdefgh", 8), 5);
    assert_string_equal(got, "abcde");
    assert_int_equal(sg_copy(got, 64, "ab\0cd", 5), 2);
    assert_string_equal(got, "ab");
    assert_int_equal(sg_copy(got, 64, "abcdef", 3), 3);
    assert_string_equal(got, "abc");
    assert_int_equal(sg_copy(got, 1, "abc", 3), 0);
    assert_string_equal(got, "");
}

static void test_is_uuid(void **state)
{
    static const char good[] = "0123abcd-ef01-4a2b-8c3d-456789abcdef";
    static const char *bad[] = {
        "0123ABCD-ef01-4a2b-8c3d-456789abcdef",                                         /* uppercase */
        "0123abcd-ef01-4a2b-8c3d-456789abcdeF", "0123abc-def01-4a2b-8c3d-456789abcdef", /* dash moved */
        "0123abcd-ef014-a2b-8c3d-456789abcdef", "0123abcd0ef01-4a2b-8c3d-456789abcdef", /* dash missing */
        "0123abcd-ef01-4a2b-8c3d-456789abcde-", "0123abcd_ef01_4a2b_8c3d_456789abcdef",
        "0123abcg-ef01-4a2b-8c3d-456789abcdef", /* not hex */
        "{123abcd-ef01-4a2b-8c3d-456789abcdef", "------------------------------------",
    };

    assert_int_equal(sg_is_uuid(good, 36), 1);
    assert_int_equal(sg_is_uuid(good, 35), 0);
    assert_int_equal(sg_is_uuid("0123abcd-ef01-4a2b-8c3d-456789abcdef0", 37), 0);
    assert_int_equal(sg_is_uuid("", 0), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(strlen(bad[i]), 36);
        if (sg_is_uuid(bad[i], 36))
            fail_msg("\"%s\" taken for a UUID", bad[i]);
    }
}

static void test_rfc3339(void **state)
{
    char out[32];
    const char *tz = getenv("TZ");
    char *saved = tz ? strdup(tz) : NULL;

    sg_rfc3339(0, out);
    assert_string_equal(out, "1970-01-01T00:00:00Z");
    sg_rfc3339(951782400, out);
    assert_string_equal(out, "2000-02-29T00:00:00Z");
    sg_rfc3339(1700000000, out);
    assert_string_equal(out, "2023-11-14T22:13:20Z");
    sg_rfc3339(4102444799, out);
    assert_string_equal(out, "2099-12-31T23:59:59Z");

    /* UTC whatever the local zone */
    setenv("TZ", "America/New_York", 1);
    tzset();
    sg_rfc3339(0, out);
    assert_string_equal(out, "1970-01-01T00:00:00Z");
    if (saved != NULL) {
        setenv("TZ", saved, 1);
        free(saved);
    } else {
        unsetenv("TZ");
    }
    tzset();
}

static void test_clocks(void **state)
{
    uint64_t a = sg_now_us(), b;
    unsigned char buf[64] = {0}, zero[64] = {0};

    b = sg_now_us();
    assert_true(b >= a);
    assert_true(sg_now_ms() >= a / 1000);
    assert_true(sg_wall_s() > 1600000000);
    assert_int_equal(sg_random_bytes(buf, 0), 0);
    assert_int_equal(sg_random_bytes(buf, sizeof(buf)), 0);
    assert_memory_not_equal(buf, zero, sizeof(buf));
}

/* The pool of sg_random_bytes (util.c): across many small requests, of
 * every size up to past the pool's, no 16 bytes come twice (a byte served
 * twice would repeat a whole 16-byte draw after a refill); a forked child
 * draws bytes the parent does not. */
#define DRAWS 4000

static int cmp16(const void *a, const void *b)
{
    return memcmp(a, b, 16);
}

/* X-Sandgate-Usage: what the proxy writes reads back the same (the wall
 * time as the JSON's six decimals print it); anything else is refused
 * whole, so that the gateway reads the body instead. */
static void test_usage_header(void **state)
{
    (void)state;
    sg_usage_hdr_t u = {.wall_s = 0.0010644, .exit_code = -1, .timed_out = 1, .output_bytes = 1048576}, back;
    char v[SG_USAGE_HDR_MAX];
    snprintf(u.runtime, sizeof(u.runtime), "runsc");
    sg_usage_hdr_format(&u, v, sizeof(v));
    assert_string_equal(v, "wall=0.001064; exit=-1; timed_out=1; output=1048576; runtime=runsc");
    assert_int_equal(sg_usage_hdr_parse(v, strlen(v), &back), 0);
    assert_true(back.wall_s == 0.001064);
    assert_int_equal(back.exit_code, -1);
    assert_int_equal(back.timed_out, 1);
    assert_int_equal(back.output_bytes, 1048576);
    assert_string_equal(back.runtime, "runsc");
    /* a runtime that is not a name is left out; the rest still reads */
    snprintf(u.runtime, sizeof(u.runtime), "run c");
    sg_usage_hdr_format(&u, v, sizeof(v));
    assert_null(strstr(v, "runtime"));
    assert_int_equal(sg_usage_hdr_parse(v, strlen(v), &back), 0);
    assert_string_equal(back.runtime, "");
    /* in any order, spaces or none, an unknown key skipped */
    const char *ok = "output=0;exit=0 ;  timed_out=0;future=x=y; wall=12.5";
    assert_int_equal(sg_usage_hdr_parse(ok, strlen(ok), &back), 0);
    assert_true(back.wall_s == 12.5);
    assert_int_equal(back.exit_code, 0);
    const char *bad[] = {
        "",
        "wall=1; exit=0; timed_out=0",                     /* output missing */
        "wall=1; exit=0; timed_out=0; output=1; output=2", /* twice */
        "wall=-1; exit=0; timed_out=0; output=1",          /* negative */
        "wall=1e3; exit=0; timed_out=0; output=1",         /* not plain decimal */
        "wall=nan; exit=0; timed_out=0; output=1",
        "wall=.5; exit=0; timed_out=0; output=1",
        "wall=1.; exit=0; timed_out=0; output=1",
        "wall=1.2.3; exit=0; timed_out=0; output=1",
        "wall=99999999; exit=0; timed_out=0; output=1",   /* over any run */
        "wall=1; exit=2147483648; timed_out=0; output=1", /* over an int */
        "wall=1; exit=0x1; timed_out=0; output=1",
        "wall=1; exit=; timed_out=0; output=1",
        "wall=1; exit=0; timed_out=2; output=1",
        "wall=1; exit=0; timed_out=0; output=-1",
        "wall=1; exit=0; timed_out=0; output=99999999999999999999",
        "wall=1; exit=0; timed_out=0; output=1;", /* an empty part */
        "wall=1; exit=0; timed_out=0; output=1; =3",
        "wall=1; exit=0; timed_out=0; output=1; runtime=Run", /* not a runtime's name */
        "wall=1; exit=0; timed_out=0; output=1; runtime=",
        "wall=1; exit 0; timed_out=0; output=1",
        "wall=1, exit=0, timed_out=0, output=1",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (sg_usage_hdr_parse(bad[i], strlen(bad[i]), &back) != -1)
            fail_msg("accepted: \"%s\"", bad[i]);
    }
    /* longer than any value written */
    char big[2 * SG_USAGE_HDR_MAX];
    snprintf(big, sizeof(big), "wall=1; exit=0; timed_out=0; output=1; pad=%0*d", SG_USAGE_HDR_MAX, 0);
    assert_int_equal(sg_usage_hdr_parse(big, strlen(big), &back), -1);
    assert_int_equal(sg_usage_hdr_parse(NULL, 0, &back), -1);
}

static void test_random_pool(void **state)
{
    static unsigned char draws[DRAWS][16];
    unsigned char big[300], child[16], parent[16];
    int fds[2], status;

    for (size_t i = 0; i < DRAWS; i++) {
        size_t extra = i % 37; /* sizes 16..52: refills fall mid-request */
        unsigned char tail[64];
        assert_int_equal(sg_random_bytes(draws[i], 16), 0);
        assert_int_equal(sg_random_bytes(tail, extra), 0);
        if (i % 500 == 0)
            assert_int_equal(sg_random_bytes(big, sizeof(big)), 0); /* past the pool: straight from the kernel */
    }
    qsort(draws, DRAWS, 16, cmp16);
    for (size_t i = 1; i < DRAWS; i++)
        assert_memory_not_equal(draws[i - 1], draws[i], 16);

    assert_int_equal(sg_random_bytes(parent, 1), 0); /* the pool is not empty at the fork */
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        ssize_t w = sg_random_bytes(child, sizeof(child)) == 0 ? write(fds[1], child, sizeof(child)) : -1;
        _exit(w == (ssize_t)sizeof(child) ? 0 : 1);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(read(fds[0], child, sizeof(child)), (ssize_t)sizeof(child));
    close(fds[0]);
    close(fds[1]);
    assert_int_equal(sg_random_bytes(parent, sizeof(parent)), 0);
    assert_memory_not_equal(child, parent, sizeof(parent));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_pool),
        cmocka_unit_test(test_buf_cap),
        cmocka_unit_test(test_buf_grow),
        cmocka_unit_test(test_buf_consume),
        cmocka_unit_test(test_config_int),
        cmocka_unit_test(test_config_int_errors),
        cmocka_unit_test(test_config_double),
        cmocka_unit_test(test_config_bool),
        cmocka_unit_test(test_config_str),
        cmocka_unit_test(test_config_load),
        cmocka_unit_test(test_json_parse_valid),
        BAD_BODIES("test_json_parse_trailing"),
        cmocka_unit_test(test_json_parse_not_object),
        BAD_BODIES("test_json_parse_bad"),
        cmocka_unit_test(test_json_getters),
        cmocka_unit_test(test_utf8_valid_kept),
        cmocka_unit_test(test_utf8_invalid),
        cmocka_unit_test(test_utf8_random),
        cmocka_unit_test(test_json_add_bytes),
        cmocka_unit_test(test_json_new_double),
        cmocka_unit_test(test_uuid4),
        cmocka_unit_test(test_is_uuid),
        cmocka_unit_test(test_formatting),
        cmocka_unit_test(test_rfc3339),
        cmocka_unit_test(test_clocks),
        cmocka_unit_test(test_usage_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
