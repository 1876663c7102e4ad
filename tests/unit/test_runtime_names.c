/*
 * test_runtime_names.c — the runtimes a request or a setting may name
 * (proxy/docker/runtime.h): runc and runsc exactly, by index for the pools
 * and the metrics; what the engine offers; SANDGATE_POOL_RUNTIMES's list.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime.h"
#include "sgrun.h"

static void test_names(void **state)
{
    assert_int_equal(SG_RUNTIME_COUNT, 2);
    for (size_t i = 0; i < SG_RUNTIME_COUNT; i++) {
        const char *n = sg_runtime_at(i);
        assert_non_null(n);
        assert_int_equal(sg_runtime_index(n), i);
        assert_ptr_equal(sg_runtime_find(n, strlen(n)), n);
    }
    assert_null(sg_runtime_at(SG_RUNTIME_COUNT));
    assert_string_equal(sg_runtime_find("runsc", 5), "runsc");
    assert_string_equal(sg_runtime_find("runc", 4), "runc");
    /* a prefix, a longer name, another case, an embedded NUL: none */
    assert_null(sg_runtime_find("runs", 4));
    assert_null(sg_runtime_find("runscx", 6));
    assert_null(sg_runtime_find("RUNC", 4));
    assert_null(sg_runtime_find("runc\0", 5));
    assert_null(sg_runtime_find("", 0));
    assert_int_equal(sg_runtime_index("kata"), SG_RUNTIME_COUNT);
    assert_int_equal(sg_runtime_index(NULL), SG_RUNTIME_COUNT);
}

static void test_offered(void **state)
{
    unsigned runc = 1u << sg_runtime_index("runc"), runsc = 1u << sg_runtime_index("runsc");
    json_object *with = json_tokener_parse("{\"runc\":{},\"runsc\":{\"path\":\"/usr/bin/runsc\"}}");
    json_object *without = json_tokener_parse("{\"runc\":{},\"runsc-debug\":{}}");
    assert_int_equal(sg_runtime_offered(with), runc | runsc);
    assert_int_equal(sg_runtime_offered(without), runc);
    assert_int_equal(sg_runtime_offered(NULL), runc); /* unknown: runc, every engine's own */
    json_object_put(with);
    json_object_put(without);
}

static void test_list(void **state)
{
    unsigned bits = 99, runc = 1u << sg_runtime_index("runc"), runsc = 1u << sg_runtime_index("runsc");
    char err[256];
    assert_int_equal(sg_runtime_parse_list("", &bits, err, sizeof(err)), 0);
    assert_int_equal(bits, 0);
    assert_int_equal(sg_runtime_parse_list("runsc", &bits, err, sizeof(err)), 0);
    assert_int_equal(bits, runsc);
    assert_int_equal(sg_runtime_parse_list("runc,runsc", &bits, err, sizeof(err)), 0);
    assert_int_equal(bits, runc | runsc);
    assert_int_equal(sg_runtime_parse_list("runsc,runsc", &bits, err, sizeof(err)), 0);
    assert_int_equal(bits, runsc);
    static const char *const bad[] = {"kata", "runc,,runsc", ",runc", "runc, runsc", "runsc;runc", "RUNSC"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(sg_runtime_parse_list(bad[i], &bits, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "runc or runsc"));
    }
}

int main(void)
{
    return SG_RUN_TESTS("runtime_names", NULL, NULL, NULL, NULL, test_names, test_offered, test_list);
}
