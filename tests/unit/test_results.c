/*
 * test_results.c — the proxy's checks of rich results (results.h): every
 * record of a sandbox's result channel is untrusted bytes; only exactly the
 * documented shape is kept, rebuilt from its fields, under the caps; and
 * the files list stays within its bounds. Pure functions: no I/O.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent_proto.h"
#include "results.h"

/* base64 of the 8-byte PNG signature plus "IHDR" */
#define PNG_B64 "iVBORw0KGgpJSERS"
#define JPEG_B64 "/9j/4AAQ"

static json_object *add(sg_results_t *r, const char *rec)
{
    return sg_results_add(r, (const uint8_t *)rec, strlen(rec));
}

static void test_kept_rebuilt(void **state)
{
    sg_results_t r;
    json_object *res, *v;

    sg_results_init(&r, 10, 1 << 20, 10);
    res = add(&r, "{\"type\":\"image\",\"mime\":\"image/png\",\"data\":\"" PNG_B64 "\",\"main\":true,\"extra\":[1]}");
    assert_non_null(res);
    assert_false(json_object_object_get_ex(res, "extra", &v)); /* only the documented fields */
    assert_true(json_object_object_get_ex(res, "main", &v) && json_object_get_boolean(v));
    res = add(&r, "{\"type\":\"text\",\"mime\":\"text/plain\",\"data\":\"a\\u0000\\ud800b\"}");
    assert_non_null(res);
    assert_true(json_object_object_get_ex(res, "main", &v) && !json_object_get_boolean(v)); /* default */
    assert_true(json_object_object_get_ex(res, "data", &v));
    assert_non_null(json_object_get_string(v));
    assert_non_null(add(&r, "{\"type\":\"html\",\"mime\":\"text/html\",\"data\":\"<b>x</b>\"}"));
    assert_non_null(add(&r, "{\"type\":\"image\",\"mime\":\"image/jpeg\",\"data\":\"" JPEG_B64 "\"}"));
    assert_int_equal(json_object_array_length(r.list), 4);
    assert_false(r.truncated);
    sg_results_free(&r);
}

static void test_dropped(void **state)
{
    static const char *const bad[] = {
        "",
        "garbage",
        "[]",
        "\"text\"",
        "{\"type\":\"text\",\"mime\":\"text/plain\",\"data\":\"a\"} trailing",
        "{\"type\":\"text\",\"mime\":\"text/plain\",\"data\":\"a\"",
        "{\"type\":\"text\",\"mime\":\"text/plain\"}",
        "{\"type\":\"text\",\"mime\":\"text/plain\",\"data\":1}",
        "{\"type\":\"text\",\"mime\":\"text/plain\",\"data\":\"a\",\"main\":1}",
        "{\"type\":\"text\",\"mime\":\"text/html\",\"data\":\"a\"}",
        "{\"type\":\"html\",\"mime\":\"text/plain\",\"data\":\"a\"}",
        "{\"type\":\"script\",\"mime\":\"application/javascript\",\"data\":\"alert(1)\"}",
        "{\"type\":\"image\",\"mime\":\"image/svg+xml\",\"data\":\"PHN2Zz4=\"}",
        "{\"type\":\"image\",\"mime\":\"image/png\",\"data\":\"" JPEG_B64 "\"}",      /* not a PNG */
        "{\"type\":\"image\",\"mime\":\"image/png\",\"data\":\"iVBORw0KGgpJSERS=\"}", /* length */
        "{\"type\":\"image\",\"mime\":\"image/png\",\"data\":\"iVBORw0KGgp!SERS\"}",  /* alphabet */
        "{\"type\":\"image\",\"mime\":\"image/png\",\"data\":\"iVBORw0KGgp=SERS\"}",  /* padding inside */
        "{\"type\":\"image\",\"mime\":\"image/png\",\"data\":\"iVBORw0KGgpJSER\\nS\"}",
        "{\"type\":\"image\",\"mime\":\"image/png\",\"data\":\"\"}",
        "{\"type\":\"image\",\"mime\":\"image/png\",\"data\":{\"a\":{\"b\":{\"c\":{\"d\":1}}}}}",
        "{\"type\":\"text\",\"mime\":\"text/plain\",\"data\":\"a\",}",
    };
    sg_results_t r;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sg_results_init(&r, 10, 1 << 20, 10);
        if (add(&r, bad[i]) != NULL)
            fail_msg("kept: %s", bad[i]);
        assert_true(r.truncated);
        assert_int_equal(json_object_array_length(r.list), 0);
        sg_results_free(&r);
    }
    /* bytes that are not text at all */
    sg_results_init(&r, 10, 1 << 20, 10);
    assert_null(sg_results_add(&r, (const uint8_t *)"{\"\0\":1}", 7));
    sg_results_free(&r);
}

static void test_caps(void **state)
{
    sg_results_t r;
    const char *rec = "{\"type\":\"text\",\"mime\":\"text/plain\",\"data\":\"0123456789\",\"main\":false}";
    size_t one = strlen(rec);

    sg_results_init(&r, 3, 1 << 20, 10);
    for (int i = 0; i < 5; i++)
        add(&r, rec);
    assert_int_equal(json_object_array_length(r.list), 3);
    assert_true(r.truncated);
    sg_results_free(&r);

    /* bytes: as the JSON kept, so two fit in 2.5 records' worth */
    sg_results_init(&r, 100, (long)(one * 5 / 2), 10);
    for (int i = 0; i < 5; i++)
        add(&r, rec);
    assert_int_equal(json_object_array_length(r.list), 2);
    assert_true(r.truncated);
    assert_true(r.bytes <= one * 5 / 2);
    /* past a cap, the rest is dropped, however small */
    assert_null(add(&r, "{\"type\":\"text\",\"mime\":\"text/plain\",\"data\":\"\"}"));
    sg_results_free(&r);
    /* an invalid record drops itself only */
    sg_results_init(&r, 100, 1 << 20, 10);
    assert_null(add(&r, "nonsense"));
    assert_non_null(add(&r, rec));
    assert_true(r.truncated);
    sg_results_free(&r);

    /* 0: none at all */
    sg_results_init(&r, 0, 0, 0);
    assert_null(add(&r, rec));
    assert_true(r.truncated);
    sg_results_free(&r);
}

static void put_entry(sg_agent_buf_t *b, const char *path, uint64_t size)
{
    assert_int_equal(sg_agent_put_str(b, path, strlen(path)), 0);
    assert_int_equal(sg_agent_put_u64(b, size), 0);
}

static void test_files(void **state)
{
    sg_results_t r;
    sg_agent_buf_t b;
    json_object *o = json_object_new_object(), *v, *f;
    char path[SG_AGENT_FILES_PATH_MAX];

    sg_agent_buf_init(&b);
    put_entry(&b, "/sandbox/out/a.png", 1048576);
    put_entry(&b, "/sandbox/out/\xff\xfe", 3);
    sg_results_init(&r, 1, 1, 5);
    sg_results_set_files(&r, 0, 2, b.base, b.len);
    sg_results_to_json(&r, o, 1);
    assert_true(json_object_object_get_ex(o, "files", &v));
    assert_int_equal(json_object_array_length(v), 2);
    f = json_object_array_get_idx(v, 0);
    assert_true(json_object_object_get_ex(f, "size", &v));
    assert_int_equal(json_object_get_int64(v), 1048576);
    assert_true(json_object_object_get_ex(o, "files_truncated", &v) && !json_object_get_boolean(v));
    assert_true(json_object_object_get_ex(o, "results", &v) && json_object_array_length(v) == 0);
    json_object_put(o);
    sg_results_free(&r);
    sg_agent_buf_free(&b);

    /* past max_files, or past the bytes of the list: cut, and said so */
    sg_agent_buf_init(&b);
    memset(path, 'p', sizeof(path) - 1);
    path[sizeof(path) - 1] = '\0';
    for (int i = 0; i < 100; i++)
        put_entry(&b, path, (uint64_t)i);
    sg_results_init(&r, 1, 1, 1000);
    sg_results_set_files(&r, 0, 100, b.base, b.len);
    assert_true(r.files_truncated);
    assert_true(json_object_array_length(r.files) < 100);
    assert_true(r.files_bytes <= SG_RESULTS_FILES_JSON_MAX);
    sg_results_free(&r);
    sg_results_init(&r, 1, 1, 7);
    sg_results_set_files(&r, 0, 100, b.base, b.len);
    assert_true(r.files_truncated);
    assert_int_equal(json_object_array_length(r.files), 7);
    sg_results_free(&r);
    /* the agent said it listed only some */
    sg_results_init(&r, 1, 1, 7);
    sg_results_set_files(&r, SG_AGENT_FILES_MORE, 0, b.base, 0);
    assert_true(r.files_truncated);
    sg_results_free(&r);
    sg_agent_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_rebuilt),
        cmocka_unit_test(test_dropped),
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
