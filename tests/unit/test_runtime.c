/*
 * test_runtime.c — SANDGATE_RUNTIME (proxy/docker/runtime.h): auto takes runsc
 * only when the engine lists it, and says why not otherwise; an explicit
 * runsc the engine lacks, or an unknown setting, is refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime.h"
#include "sgrun.h"

static json_object *engine(const char *runtimes_json)
{
    json_object *o = json_tokener_parse(runtimes_json);
    assert_non_null(o);
    return o;
}

static void test_auto(void **state)
{
    char warn[256], err[256];
    const char *rt;
    json_object *with = engine("{\"runc\":{\"path\":\"runc\"},\"runsc\":{\"path\":\"/usr/bin/runsc\"}}");
    json_object *without = engine("{\"runc\":{\"path\":\"runc\"},\"io.containerd.runc.v2\":{\"path\":\"runc\"}}");

    assert_int_equal(sg_runtime_choose("auto", with, &rt, warn, sizeof(warn), err, sizeof(err)), 0);
    assert_string_equal(rt, "runsc");
    assert_string_equal(warn, "");

    assert_int_equal(sg_runtime_choose("auto", without, &rt, warn, sizeof(warn), err, sizeof(err)), 0);
    assert_string_equal(rt, "runc");
    assert_non_null(strstr(warn, "runsc"));

    /* an engine whose runtimes are unknown (GET /info failed) */
    assert_int_equal(sg_runtime_choose("auto", NULL, &rt, warn, sizeof(warn), err, sizeof(err)), 0);
    assert_string_equal(rt, "runc");
    assert_true(warn[0] != '\0');
    json_object_put(with);
    json_object_put(without);
}

static void test_explicit(void **state)
{
    char warn[256], err[256];
    const char *rt;
    json_object *with = engine("{\"runc\":{},\"runsc\":{}}");
    json_object *without = engine("{\"runc\":{}}");
    /* a runtime whose name merely contains runsc is not runsc */
    json_object *lookalike = engine("{\"runc\":{},\"runsc-debug\":{},\"my-runsc\":{}}");

    assert_int_equal(sg_runtime_choose("runsc", with, &rt, warn, sizeof(warn), err, sizeof(err)), 0);
    assert_string_equal(rt, "runsc");
    assert_int_equal(sg_runtime_choose("runc", with, &rt, warn, sizeof(warn), err, sizeof(err)), 0);
    assert_string_equal(rt, "runc");
    assert_string_equal(warn, "");
    assert_int_equal(sg_runtime_choose("runc", without, &rt, warn, sizeof(warn), err, sizeof(err)), 0);
    assert_string_equal(rt, "runc");

    err[0] = '\0';
    assert_int_equal(sg_runtime_choose("runsc", without, &rt, warn, sizeof(warn), err, sizeof(err)), -1);
    assert_non_null(strstr(err, "runsc"));
    assert_int_equal(sg_runtime_choose("runsc", lookalike, &rt, warn, sizeof(warn), err, sizeof(err)), -1);
    assert_int_equal(sg_runtime_choose("auto", lookalike, &rt, warn, sizeof(warn), err, sizeof(err)), 0);
    assert_string_equal(rt, "runc");

    const char *bad[] = {"", "RUNSC", "kata", "runsc ", "io.containerd.runc.v2"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(sg_runtime_choose(bad[i], with, &rt, warn, sizeof(warn), err, sizeof(err)), -1);
        assert_true(err[0] != '\0');
    }
    json_object_put(with);
    json_object_put(without);
    json_object_put(lookalike);
}

int main(void)
{
    return SG_RUN_TESTS("runtime", NULL, NULL, NULL, NULL, test_auto, test_explicit);
}
