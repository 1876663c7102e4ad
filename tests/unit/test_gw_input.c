/*
 * test_gw_input.c — the gateway's checks of what clients send, as pure
 * functions: numeric fields (fields.h: finite, in range, named in the
 * error; NaN and Infinity are read by json-c, 1e308 and -1e300 are valid
 * JSON), numeric query parameters, and the tail parser that finds the
 * result event of a streamed reply (sse_tail.h) whatever the pieces; and
 * the UTC day daily quotas count by (clock.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "clock.h"
#include "fields.h"
#include "sse_tail.h"
#include "sgrun.h"

static const char *const BAD[] = {"NaN",    "nan", "1e999", "Infinity", "-Infinity", "1e308",
                                  "-1e300", "0",   "-1",    "\"5\"",    "[]",        "true"};

static void test_number_fields_refuse(void **state)
{
    static const char *const fields[] = {"timeout", "memory_mb", "cpus"};
    char body[128], detail[256];
    const char *code;
    double out = -7;
    for (size_t i = 0; i < sizeof(BAD) / sizeof(BAD[0]); i++) {
        for (size_t f = 0; f < 3; f++) {
            snprintf(body, sizeof(body), "{\"%s\": %s}", fields[f], BAD[i]);
            json_object *o = json_tokener_parse(body);
            assert_non_null(o);
            int r = sg_gw_number_field(o, fields[f], 0, f == 1, 1000, &out, &code, detail, sizeof(detail));
            if (r != -1)
                fail_msg("%s accepted (%g)", body, out);
            assert_true(strcmp(code, "bad_field") == 0 || strcmp(code, "above_cap") == 0);
            char needle[32];
            snprintf(needle, sizeof(needle), "\"%s\"", fields[f]);
            if (strstr(detail, needle) == NULL)
                fail_msg("%s: \"%s\" does not name the field", body, detail);
            assert_true(out == -7); /* untouched */
            json_object_put(o);
        }
    }
    /* a whole number where one is needed; above the cap is its own code */
    json_object *o = json_tokener_parse("{\"memory_mb\": 512.5, \"timeout\": 2000}");
    assert_int_equal(sg_gw_number_field(o, "memory_mb", 0, 1, 4096, &out, &code, detail, sizeof(detail)), -1);
    assert_int_equal(sg_gw_number_field(o, "timeout", 0, 0, 300, &out, &code, detail, sizeof(detail)), -1);
    assert_string_equal(code, "above_cap");
    json_object_put(o);
}

static void test_number_fields_accept(void **state)
{
    char detail[256];
    const char *code;
    double out = 0;
    json_object *o = json_tokener_parse("{\"timeout\": 0.5, \"memory_mb\": 512, \"cpus\": 1e-2, \"x\": null}");
    assert_int_equal(sg_gw_number_field(o, "timeout", 0, 0, 300, &out, &code, detail, sizeof(detail)), 1);
    assert_true(out == 0.5);
    assert_int_equal(sg_gw_number_field(o, "memory_mb", 0, 1, 4096, &out, &code, detail, sizeof(detail)), 1);
    assert_true(out == 512);
    assert_int_equal(sg_gw_number_field(o, "cpus", 0, 0, 4, &out, &code, detail, sizeof(detail)), 1);
    assert_true(out == 0.01);
    assert_int_equal(sg_gw_number_field(o, "x", 0, 0, 4, &out, &code, detail, sizeof(detail)), 0);
    assert_int_equal(sg_gw_number_field(o, "absent", 0, 0, 4, &out, &code, detail, sizeof(detail)), 0);
    json_object_put(o);
}

static void test_number_text(void **state)
{
    static const char *const bad[] = {"",   "nan", "NaN", "inf",  "-inf", "Infinity", "1e400",
                                      " 5", "5 ",  "5x",  "0x10", "+5",   "-1",       "1e308"};
    double out = 3;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (sg_gw_number_text(bad[i], strlen(bad[i]), 0, 1e12, &out) != -1)
            fail_msg("\"%s\" accepted as %g", bad[i], out);
    assert_true(out == 3);
    assert_int_equal(sg_gw_number_text("1700000000.5", 12, 0, 1e12, &out), 0);
    assert_true(out == 1700000000.5);
    char longer[200];
    memset(longer, '1', sizeof(longer));
    assert_int_equal(sg_gw_number_text(longer, sizeof(longer), 0, 1e300, &out), -1);
}

/* ---- the streamed reply's result event ---- */

static const char *result_of(const char *stream, size_t len, size_t piece, size_t *rlen)
{
    static sg_sse_tail_t t;
    static int inited;
    if (inited)
        sg_sse_tail_free(&t);
    sg_sse_tail_init(&t, 1024);
    inited = 1;
    for (size_t i = 0; i < len; i += piece)
        sg_sse_tail_feed(&t, stream + i, len - i < piece ? len - i : piece);
    return sg_sse_tail_result(&t, rlen);
}

static void test_sse_tail_pieces(void **state)
{
    static const char s[] = "event: stdout\ndata: {\"data\":\"event: result\\ndata: {forged}\"}\n\n"
                            ": comment\r\n"
                            "event: stderr\r\ndata: {\"data\":\"x\"}\r\n\r\n"
                            "event: result\rdata: {\"exit_code\":0,\rdata: \"wall_time\":1.5}\r\r";
    size_t n = sizeof(s) - 1, rlen;
    for (size_t piece = 1; piece <= n; piece++) {
        const char *r = result_of(s, n, piece, &rlen);
        if (r == NULL || strcmp(r, "{\"exit_code\":0,\n\"wall_time\":1.5}") != 0)
            fail_msg("pieces of %zu: result %s", piece, r != NULL ? r : "(none)");
    }
    /* text that looks like an event inside output data is data */
    static const char forged[] = "event: stdout\ndata: {\"data\":\"\\n\\nevent: result\\ndata: {}\"}\n\n";
    assert_null(result_of(forged, sizeof(forged) - 1, 7, &rlen));
    /* an unterminated result event does not count */
    static const char cut[] = "event: result\ndata: {\"exit_code\":0}\n";
    assert_null(result_of(cut, sizeof(cut) - 1, 3, &rlen));
    /* an error event is seen (the run failed: nothing to bill) */
    static const char err[] = "event: stdout\ndata: {}\n\nevent: error\ndata: {\"code\":\"sandbox_failed\"}\n\n";
    sg_sse_tail_t et;
    sg_sse_tail_init(&et, 1024);
    sg_sse_tail_feed(&et, err, sizeof(err) - 1);
    assert_true(et.saw_error);
    assert_null(sg_sse_tail_result(&et, &rlen));
    sg_sse_tail_free(&et);
    /* the last of several counts */
    static const char two[] = "event: result\ndata: 1\n\nevent: result\ndata: 2\n\n";
    const char *r = result_of(two, sizeof(two) - 1, 5, &rlen);
    assert_non_null(r);
    assert_string_equal(r, "2");
}

/* Megabytes of output events before the result, in pieces of every size
 * up to 64 KiB: the result is found, memory stays at the cap, and the
 * bytes are read once (a quadratic scan would take minutes here). */
static void test_sse_tail_large(void **state)
{
    size_t ev = 100000, n = 0;
    char *s = malloc(40u << 20);
    assert_non_null(s);
    for (size_t i = 0; i < 200; i++) {
        n += (size_t)sprintf(s + n, "event: stdout\ndata: {\"data\":\"");
        memset(s + n, 'x', ev);
        n += ev;
        n += (size_t)sprintf(s + n, "\"}\n\n");
    }
    n += (size_t)sprintf(s + n, "event: result\ndata: {\"exit_code\":3}\n\n");
    static const size_t pieces[] = {1, 16, 17, 4096, 65536, 1 << 20};
    for (size_t k = 0; k < sizeof(pieces) / sizeof(pieces[0]); k++) {
        sg_sse_tail_t t;
        size_t rlen;
        sg_sse_tail_init(&t, 64 << 10);
        for (size_t i = 0; i < n; i += pieces[k])
            sg_sse_tail_feed(&t, s + i, n - i < pieces[k] ? n - i : pieces[k]);
        const char *r = sg_sse_tail_result(&t, &rlen);
        assert_non_null(r);
        assert_string_equal(r, "{\"exit_code\":3}");
        assert_true(t.line.cap <= (2u * (64 << 10)) + 64 && t.data.cap <= 2u * (64 << 10));
        sg_sse_tail_free(&t);
    }
    free(s);
}

/* The day quotas count by (clock.h), kept from one call to the next: the
 * same as gmtime + strftime for every time, across day boundaries both
 * ways, before 1970 too. */
static void test_day(void **state)
{
    const int64_t base[] = {0, 1732912345, 1735689599, 4102444800LL, -1, -86400, -86401, 951782400};
    char got[9], want[9];

    for (size_t b = 0; b < sizeof(base) / sizeof(base[0]); b++) {
        for (int64_t d = -2; d <= 2; d++) {
            /* each side of a boundary, alternating days */
            int64_t t = base[b] - base[b] % 86400 + d * 86400 + (d % 2 != 0 ? 86399 : 0);
            time_t tt = (time_t)t;
            struct tm tm;
            gmtime_r(&tt, &tm);
            strftime(want, sizeof(want), "%Y%m%d", &tm);
            sg_gw_day(t, got);
            if (strcmp(got, want) != 0)
                fail_msg("sg_gw_day(%lld) = %s, want %s", (long long)t, got, want);
        }
    }
}

int main(void)
{
    return SG_RUN_TESTS("gw_input", NULL, NULL, NULL, NULL, test_day, test_number_fields_refuse,
                        test_number_fields_accept, test_number_text, test_sse_tail_pieces, test_sse_tail_large);
}
