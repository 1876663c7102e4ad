/*
 * test_validate.c — request validation against a policy (validate.h): the
 * defaults a body gets, every field's bounds and type errors (each error
 * must name its field), library names, sandbox paths and shell quoting.
 * Pure functions: no I/O, no daemons.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "libraries.h"
#include "session.h"
#include "policy_fixture.h"
#include "validate.h"

static const sg_policy_t policy = SGTEST_POLICY(4);

/* Parses a test body; the test fails if the literal itself is not JSON. */
static json_object *J(const char *s)
{
    json_object *o = json_tokener_parse(s);
    if (o == NULL)
        fail_msg("test body is not JSON: %s", s);
    return o;
}

static void assert_contains(const char *hay, const char *needle)
{
    if (strstr(hay, needle) == NULL)
        fail_msg("\"%s\" does not contain \"%s\"", hay, needle);
}

static void expect_create_ok(const char *body, const sg_policy_t *pol, sg_create_req_t *out)
{
    sg_verr_t e = {0};
    json_object *o = J(body);
    int r = sg_validate_create(o, pol, out, &e);
    if (r != 0)
        fail_msg("%s refused: %d %s %s", body, e.status, e.code, e.detail);
    out->image = NULL; /* points into o */
    json_object_put(o);
}

static void expect_create_err(const char *body, const sg_policy_t *pol, const char *code, const char *needle)
{
    sg_verr_t e = {0};
    sg_create_req_t out;
    json_object *o = J(body);
    int r = sg_validate_create(o, pol, &out, &e);
    json_object_put(o);
    if (r != -1)
        fail_msg("%s accepted", body);
    assert_int_equal(e.status, 400);
    assert_non_null(e.code);
    assert_string_equal(e.code, code);
    assert_contains(e.detail, needle);
}

static void expect_exec_err(const char *body, const char *field, int want_lang, const char *code, const char *needle)
{
    sg_verr_t e = {0};
    sg_exec_req_t out;
    json_object *o = J(body);
    int r = sg_validate_exec(o, field, want_lang, 30, &policy, &out, &e);
    json_object_put(o);
    if (r != -1)
        fail_msg("%s accepted", body);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, code);
    assert_contains(e.detail, needle);
}

/* Bodies a create refuses, by the test that sends them (expect_bad_creates,
 * or a cmocka test of its own: BAD_CREATES): the error code and what the
 * detail names. */
static const struct {
    const char *test, *body, *code, *needle;
} bad_creates[] = {
    {"test_create_keep_template_type", "{\"keep_template\":\"yes\"}", "bad_field", "\"keep_template\""},
    {"test_create_keep_template_type", "{\"keep_template\":1}", "bad_field", "\"keep_template\""},
    {"test_create_keep_template_type", "{\"keep_template\":{}}", "bad_field", "\"keep_template\""},
    {"test_create_timeout", "{\"timeout\":0}", "bad_field", "\"timeout\""},
    {"test_create_timeout", "{\"timeout\":0.0}", "bad_field", "\"timeout\""},
    {"test_create_timeout", "{\"timeout\":-1}", "bad_field", "\"timeout\""},
    {"test_create_timeout", "{\"timeout\":300.001}", "bad_field", "\"timeout\""},
    {"test_create_timeout", "{\"timeout\":301}", "bad_field", "300"},
    {"test_create_timeout", "{\"timeout\":1e300}", "bad_field", "\"timeout\""},
    {"test_create_timeout", "{\"timeout\":\"10\"}", "bad_field", "\"timeout\""},
    {"test_create_timeout", "{\"timeout\":true}", "bad_field", "\"timeout\""},
    {"test_create_memory", "{\"memory_mb\":16.5}", "bad_field", "\"memory_mb\""},
    {"test_create_memory", "{\"memory_mb\":15}", "bad_field", "\"memory_mb\""},
    {"test_create_memory", "{\"memory_mb\":0}", "bad_field", "\"memory_mb\""},
    {"test_create_memory", "{\"memory_mb\":-512}", "bad_field", "\"memory_mb\""},
    {"test_create_memory", "{\"memory_mb\":4097}", "bad_field", "4096"},
    {"test_create_memory", "{\"memory_mb\":1e30}", "bad_field", "\"memory_mb\""},
    {"test_create_memory", "{\"memory_mb\":\"512\"}", "bad_field", "\"memory_mb\""},
    {"test_create_memory", "{\"memory_mb\":[1]}", "bad_field", "\"memory_mb\""},
    {"test_create_cpus", "{\"cpus\":0}", "bad_field", "\"cpus\""},
    {"test_create_cpus", "{\"cpus\":0.009}", "bad_field", "\"cpus\""},
    {"test_create_cpus", "{\"cpus\":-1}", "bad_field", "\"cpus\""},
    {"test_create_cpus", "{\"cpus\":4.01}", "bad_field", "\"cpus\""},
    {"test_create_cpus", "{\"cpus\":\"1\"}", "bad_field", "\"cpus\""},
    {"test_create_unknown_lang", "{\"lang\":\"\"}", "unknown_language", "known"},
    /* the length counts: "python" followed by a NUL is not python */
    {"test_create_unknown_lang", "{\"lang\":\"python\\u0000\"}", "unknown_language", "known"},
    {"test_create_unknown_lang", "{\"lang\":\"pythonx\"}", "unknown_language", "pythonx"},
    {"test_create_unknown_lang", "{\"lang\":5}", "bad_field", "\"lang\""},
    {"test_create_unknown_lang", "{\"lang\":[\"python\"]}", "bad_field", "\"lang\""},
    {"test_create_owner", "{\"owner\":\"\"}", "bad_field", "\"owner\""},
    {"test_create_owner", "{\"owner\":\"a b\"}", "bad_field", "\"owner\""},
    {"test_create_owner", "{\"owner\":\"a\\u0000b\"}", "bad_field", "\"owner\""},
    {"test_create_owner", "{\"owner\":\"a=b,c\"}", "bad_field", "\"owner\""},
    {"test_create_owner", "{\"owner\":5}", "bad_field", "\"owner\""},
    {"test_create_network", "{\"network\":true}", "network_not_allowed", "\"network\""},
    {"test_create_network", "{\"network\":\"true\"}", "bad_field", "\"network\""},
    {"test_create_network", "{\"network\":1}", "bad_field", "\"network\""},
    {"test_create_image", "{\"image\":\"\"}", "bad_field", "\"image\""},
    {"test_create_image", "{\"image\":\"py\\u0000thon\"}", "bad_field", "\"image\""},
    {"test_create_image", "{\"image\":5}", "bad_field", "\"image\""},
};

/* The rows of bad_creates of the test `test` (there is one at least). */
static void expect_bad_creates(const char *test)
{
    int n = 0;
    for (size_t i = 0; i < sizeof(bad_creates) / sizeof(bad_creates[0]); i++) {
        if (strcmp(bad_creates[i].test, test) == 0) {
            expect_create_err(bad_creates[i].body, &policy, bad_creates[i].code, bad_creates[i].needle);
            n++;
        }
    }
    assert_true(n > 0);
}

static void test_bad_creates(void **state)
{
    expect_bad_creates(*state);
}
#define BAD_CREATES(test) ((struct CMUnitTest){test, test_bad_creates, NULL, NULL, (void *)test})

/* Bodies an execution refuses (sg_validate_exec of the field and
 * want_lang), by the test that sends them: the error code and what the
 * detail names. */
static const struct {
    const char *test, *body, *field;
    int want_lang;
    const char *code, *needle;
} bad_execs[] = {
    {"test_exec_code_required", "{}", "code", 0, "bad_field", "\"code\""},
    {"test_exec_code_required", "{}", "code", 0, "bad_field", "required"},
    {"test_exec_code_required", "{\"code\":null}", "code", 0, "bad_field", "required"},
    {"test_exec_code_required", "{\"command\":\"ls\"}", "code", 0, "bad_field", "\"code\""},
    {"test_exec_code_required", "{\"code\":5}", "code", 0, "bad_field", "\"code\" must be a string"},
    {"test_exec_code_required", "{\"code\":[\"print(1)\"]}", "code", 0, "bad_field", "\"code\""},
    {"test_exec_code_required", "{}", "command", 0, "bad_field", "\"command\" is required"},
    {"test_exec_code_required", "{\"command\":false}", "command", 0, "bad_field", "\"command\""},
    {"test_exec_timeout", "{\"code\":\"x\",\"timeout\":0}", "code", 0, "bad_field", "\"timeout\""},
    {"test_exec_timeout", "{\"code\":\"x\",\"timeout\":-5}", "code", 0, "bad_field", "\"timeout\""},
    {"test_exec_timeout", "{\"code\":\"x\",\"timeout\":301}", "code", 0, "bad_field", "\"timeout\""},
    {"test_exec_timeout", "{\"code\":\"x\",\"timeout\":\"5\"}", "code", 0, "bad_field", "\"timeout\""},
    {"test_exec_libraries_shape", "{\"code\":\"x\",\"libraries\":\"numpy\"}", "code", 0, "bad_field", "\"libraries\""},
    {"test_exec_libraries_shape", "{\"code\":\"x\",\"libraries\":[\"numpy\",1]}", "code", 0, "bad_field",
     "\"libraries\""},
    {"test_exec_libraries_shape", "{\"code\":\"x\",\"libraries\":[null]}", "code", 0, "bad_field", "\"libraries\""},
    {"test_exec_libraries_shape", "{\"code\":\"x\",\"libraries\":{\"numpy\":1}}", "code", 0, "bad_field",
     "\"libraries\""},
    {"test_exec_want_lang", "{\"lang\":\"cobol\",\"code\":\"x\"}", "code", 1, "unknown_language", "cobol"},
    {"test_exec_want_lang", "{\"lang\":7,\"code\":\"x\"}", "code", 1, "bad_field", "\"lang\""},
};

/* The rows of bad_execs of the test `test` (there is one at least). */
static void expect_bad_execs(const char *test)
{
    int n = 0;
    for (size_t i = 0; i < sizeof(bad_execs) / sizeof(bad_execs[0]); i++) {
        if (strcmp(bad_execs[i].test, test) == 0) {
            expect_exec_err(bad_execs[i].body, bad_execs[i].field, bad_execs[i].want_lang, bad_execs[i].code,
                            bad_execs[i].needle);
            n++;
        }
    }
    assert_true(n > 0);
}

/* ---- POST /sessions -------------------------------------------------------- */

static void test_create_defaults(void **state)
{
    sg_create_req_t r;
    sg_verr_t e = {0};
    json_object *o = J("{}");

    assert_int_equal(sg_validate_create(o, &policy, &r, &e), 0);
    assert_ptr_equal(r.lang, sg_lang_find("python", 6));
    assert_int_equal(r.keep_template, 0);
    assert_null(r.image);
    assert_true(r.limits.timeout_s == 30);
    assert_int_equal(r.limits.memory_mb, 512);
    assert_true(r.limits.cpus == 1.0);
    assert_int_equal(r.limits.network, 0);
    assert_int_equal(r.limits.pids, 128);
    assert_int_equal(r.limits.output_bytes, 1 << 20);
    assert_int_equal(r.limits.tmpfs_mb, 256);
    json_object_put(o);

    /* null is the same as absent */
    expect_create_ok("{\"lang\":null,\"keep_template\":null,\"timeout\":null,\"memory_mb\":null,\"cpus\":null,"
                     "\"network\":null,\"image\":null}",
                     &policy, &r);
    assert_ptr_equal(r.lang, sg_lang_find("python", 6));
    assert_true(r.limits.timeout_s == 30);
    assert_int_equal(r.limits.memory_mb, 512);
}

static void test_create_values(void **state)
{
    sg_create_req_t r;
    sg_verr_t e = {0};
    json_object *o = J("{\"lang\":\"javascript\",\"keep_template\":true,\"timeout\":60,\"memory_mb\":1024,"
                       "\"cpus\":2.5,\"network\":false,\"image\":\"sandgate/custom:1\"}");

    assert_int_equal(sg_validate_create(o, &policy, &r, &e), 0);
    assert_ptr_equal(r.lang, sg_lang_find("javascript", 10));
    assert_int_equal(r.keep_template, 1);
    assert_true(r.limits.timeout_s == 60);
    assert_int_equal(r.limits.memory_mb, 1024);
    assert_true(r.limits.cpus == 2.5);
    assert_int_equal(r.limits.network, 0);
    assert_string_equal(r.image, "sandgate/custom:1");
    /* what the body does not name keeps its default */
    assert_int_equal(r.limits.pids, 128);
    assert_int_equal(r.limits.tmpfs_mb, 256);
    json_object_put(o);

    /* the bounds themselves are allowed */
    expect_create_ok("{\"timeout\":300,\"memory_mb\":4096,\"cpus\":4}", &policy, &r);
    assert_true(r.limits.timeout_s == 300);
    assert_int_equal(r.limits.memory_mb, 4096);
    assert_true(r.limits.cpus == 4);
    expect_create_ok("{\"timeout\":0.5,\"memory_mb\":16,\"cpus\":0.01}", &policy, &r);
    assert_true(r.limits.timeout_s == 0.5);
    assert_int_equal(r.limits.memory_mb, 16);
    assert_true(r.limits.cpus == 0.01);
    expect_create_ok("{\"keep_template\":false}", &policy, &r);
    assert_int_equal(r.keep_template, 0);
}

static void test_create_unknown_lang(void **state)
{
    sg_verr_t e = {0};
    sg_create_req_t r;
    json_object *o = J("{\"lang\":\"cobol\"}");

    assert_int_equal(sg_validate_create(o, &policy, &r, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "unknown_language");
    assert_contains(e.detail, "cobol");
    assert_contains(e.detail, "python");
    assert_contains(e.detail, "javascript");
    json_object_put(o);

    expect_bad_creates(__func__);
}

/* "owner" becomes an image label and is compared with one: a plain name only */
static void test_create_owner(void **state)
{
    sg_create_req_t r;
    expect_create_ok("{\"owner\":\"acme-1.prod_x\"}", &policy, &r);
    expect_bad_creates(__func__);
    expect_create_err("{\"owner\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", &policy,
                      "bad_field", "\"owner\"");
}

static void test_create_network(void **state)
{
    sg_policy_t open = policy;
    sg_create_req_t r;

    expect_bad_creates(__func__);
    expect_create_ok("{\"network\":false}", &policy, &r);
    assert_int_equal(r.limits.network, 0);

    open.allow_network = 1;
    expect_create_ok("{\"network\":true}", &open, &r);
    assert_int_equal(r.limits.network, 1);
    expect_create_ok("{\"network\":false}", &open, &r);
    assert_int_equal(r.limits.network, 0);
    /* allowing it does not turn it on by default */
    expect_create_ok("{}", &open, &r);
    assert_int_equal(r.limits.network, 0);
}

static void test_create_image(void **state)
{
    char body[400];
    char name[257];
    sg_create_req_t r;
    sg_verr_t e = {0};
    json_object *o;

    o = J("{\"image\":\"registry.example/team/py:3.12\"}");
    assert_int_equal(sg_validate_create(o, &policy, &r, &e), 0);
    assert_string_equal(r.image, "registry.example/team/py:3.12");
    json_object_put(o);

    memset(name, 'a', 255);
    name[255] = '\0';
    snprintf(body, sizeof(body), "{\"image\":\"%s\"}", name);
    o = J(body);
    assert_int_equal(sg_validate_create(o, &policy, &r, &e), 0);
    assert_int_equal(strlen(r.image), 255);
    json_object_put(o);

    name[255] = 'a';
    name[256] = '\0';
    snprintf(body, sizeof(body), "{\"image\":\"%s\"}", name);
    expect_create_err(body, &policy, "bad_field", "\"image\"");
    expect_bad_creates(__func__);
}

/* Parses body and validates it as an execution (the field, want_lang, the
 * session's timeout as sg_validate_exec() takes them): accepted into *r;
 * the parsed body, which r points into (the caller puts it). */
static json_object *exec_ok(const char *body, const char *field, int want_lang, double timeout, sg_exec_req_t *r)
{
    sg_verr_t e = {0};
    json_object *o = J(body);
    if (sg_validate_exec(o, field, want_lang, timeout, &policy, r, &e) != 0)
        fail_msg("%s refused: %d %s %s", body, e.status, e.code, e.detail);
    return o;
}

/* ---- execute / commands ------------------------------------------------------ */

static void test_exec_code_required(void **state)
{
    expect_bad_execs(__func__);
}

static void test_exec_defaults(void **state)
{
    sg_exec_req_t r;
    json_object *o = exec_ok("{\"code\":\"print(1)\"}", "code", 0, 42.5, &r);
    assert_int_equal(r.code_len, 8);
    assert_memory_equal(r.code, "print(1)", 8);
    assert_true(r.timeout_s == 42.5); /* the session's, not the policy default */
    assert_null(r.libraries);
    assert_null(r.lang);
    json_object_put(o);

    o = exec_ok("{\"code\":\"\"}", "code", 0, 30, &r);
    assert_int_equal(r.code_len, 0);
    json_object_put(o);
}

static void test_exec_timeout(void **state)
{
    sg_exec_req_t r;
    json_object *o = exec_ok("{\"code\":\"x\",\"timeout\":10}", "code", 0, 42.5, &r);
    assert_true(r.timeout_s == 10);
    json_object_put(o);
    o = exec_ok("{\"code\":\"x\",\"timeout\":300}", "code", 0, 42.5, &r);
    assert_true(r.timeout_s == 300);
    json_object_put(o);

    expect_bad_execs(__func__);
}

static void test_exec_libraries_shape(void **state)
{
    sg_exec_req_t r;
    json_object *o;

    expect_bad_execs(__func__);

    /* an empty list is the same as none */
    o = exec_ok("{\"code\":\"x\",\"libraries\":[]}", "code", 0, 30, &r);
    assert_null(r.libraries);
    json_object_put(o);
    o = exec_ok("{\"code\":\"x\",\"libraries\":null}", "code", 0, 30, &r);
    assert_null(r.libraries);
    json_object_put(o);
}

static void test_exec_library_names(void **state)
{
    static const char *bad[] = {"os; rm -rf", "../x",  "",        "-x",  "a b",        "x-",
                                "$(id)",      "a\\nb", "@types/", "@/x", "numpy==1.0", "a/b"};
    sg_exec_req_t r;
    char body[256];
    json_object *o;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(body, sizeof(body), "{\"code\":\"x\",\"libraries\":[\"numpy\",\"%s\"]}", bad[i]);
        expect_exec_err(body, "code", 0, "bad_field", "\"libraries\"");
        if (bad[i][0] != '\0' && strchr(bad[i], '\\') == NULL)
            expect_exec_err(body, "code", 0, "bad_field", bad[i]);
    }

    o = exec_ok(
        "{\"code\":\"x\",\"libraries\":[\"numpy\",\"scikit-learn\",\"zope.interface\",\"@types/node\",\"lodash\"]}",
        "code", 0, 30, &r);
    assert_non_null(r.libraries);
    assert_int_equal(json_object_array_length(r.libraries), 5);
    assert_string_equal(json_object_get_string(json_object_array_get_idx(r.libraries, 3)), "@types/node");
    json_object_put(o);

    /* the same with a language given (POST /execute) */
    o = exec_ok("{\"lang\":\"javascript\",\"code\":\"x\",\"libraries\":[\"lodash\",\"@types/node\"]}", "code", 1, 30,
                &r);
    assert_int_equal(json_object_array_length(r.libraries), 2);
    json_object_put(o);
}

static void test_exec_library_count(void **state)
{
    char body[2048];
    size_t o;
    sg_exec_req_t r;
    sg_verr_t e = {0};
    json_object *j;

    for (int n = SG_MAX_LIBRARIES; n <= SG_MAX_LIBRARIES + 1; n++) {
        o = (size_t)snprintf(body, sizeof(body), "{\"code\":\"x\",\"libraries\":[");
        for (int i = 0; i < n; i++)
            o += (size_t)snprintf(body + o, sizeof(body) - o, "%s\"lib%d\"", i ? "," : "", i);
        snprintf(body + o, sizeof(body) - o, "]}");
        if (n == SG_MAX_LIBRARIES) {
            j = J(body);
            assert_int_equal(sg_validate_exec(j, "code", 0, 30, &policy, &r, &e), 0);
            assert_int_equal(json_object_array_length(r.libraries), SG_MAX_LIBRARIES);
            json_object_put(j);
        } else {
            expect_exec_err(body, "code", 0, "bad_field", "\"libraries\"");
        }
    }
}

/* "runtime" on a create and a one-shot execute: runc, runsc, or absent /
 * null (the proxy's default, NULL); anything else 400 invalid_runtime; a
 * runsc session with the network is refused (runsc has none). */
static void test_runtime_field(void **state)
{
    sg_policy_t open = policy;
    sg_create_req_t r;
    sg_exec_req_t x;
    json_object *o;

    expect_create_ok("{}", &policy, &r);
    assert_null(r.runtime);
    expect_create_ok("{\"runtime\":null}", &policy, &r);
    assert_null(r.runtime);
    expect_create_ok("{\"runtime\":\"runsc\"}", &policy, &r);
    assert_string_equal(r.runtime, "runsc");
    expect_create_ok("{\"runtime\":\"runc\"}", &policy, &r);
    assert_string_equal(r.runtime, "runc");
    static const char *const bad[] = {
        "{\"runtime\":\"kata\"}",
        "{\"runtime\":\"\"}",
        "{\"runtime\":\"RUNC\"}",
        "{\"runtime\":\"runsc \"}",
        "{\"runtime\":\"runs\"}",
        "{\"runtime\":\"runsc\\u0000\"}",
        "{\"runtime\":1}",
        "{\"runtime\":true}",
        "{\"runtime\":[\"runc\"]}",
        "{\"runtime\":{\"name\":\"runc\"}}",
        "{\"runtime\":\"io.containerd.runc.v2\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char body[128];
        expect_create_err(bad[i], &policy, "invalid_runtime", "runtime");
        snprintf(body, sizeof(body), "{\"code\":\"x\",%s", bad[i] + 1);
        expect_exec_err(body, "code", 1, "invalid_runtime", "runtime");
    }
    /* the network needs runc: runsc with it is refused, runc or none kept */
    open.allow_network = 1;
    expect_create_err("{\"network\":true,\"runtime\":\"runsc\"}", &open, "invalid_runtime", "network");
    expect_create_ok("{\"network\":true,\"runtime\":\"runc\"}", &open, &r);
    assert_string_equal(r.runtime, "runc");
    expect_create_ok("{\"network\":true}", &open, &r);
    assert_null(r.runtime);

    /* one-shot: the same field; a session execute does not look at it */
    static const struct {
        const char *body, *want;
        int want_lang;
    } execs[] = {
        {"{\"code\":\"x\",\"runtime\":\"runsc\"}", "runsc", 1},
        {"{\"code\":\"x\"}", NULL, 1},
        {"{\"code\":\"x\",\"runtime\":\"kata\"}", NULL, 0},
    };
    for (size_t i = 0; i < sizeof(execs) / sizeof(execs[0]); i++) {
        o = exec_ok(execs[i].body, "code", execs[i].want_lang, 30, &x);
        if (execs[i].want != NULL)
            assert_string_equal(x.runtime, execs[i].want);
        else
            assert_null(x.runtime);
        json_object_put(o);
    }
}

static void test_exec_want_lang(void **state)
{
    sg_exec_req_t r;
    json_object *o;

    o = exec_ok("{\"code\":\"x\"}", "code", 1, 30, &r);
    assert_ptr_equal(r.lang, sg_lang_find("python", 6));
    json_object_put(o);

    o = exec_ok("{\"lang\":\"javascript\",\"code\":\"x\"}", "code", 1, 30, &r);
    assert_ptr_equal(r.lang, sg_lang_find("javascript", 10));
    json_object_put(o);

    /* without want_lang the field is not looked at */
    o = exec_ok("{\"lang\":\"cobol\",\"code\":\"x\"}", "code", 0, 30, &r);
    assert_null(r.lang);
    json_object_put(o);

    expect_bad_execs(__func__);
}

static void test_exec_nul(void **state)
{
    sg_exec_req_t r;
    json_object *o;

    /* a command goes through a shell: no NUL; code is written to a file: fine */
    expect_exec_err("{\"command\":\"ls\\u0000rm\"}", "command", 0, "bad_field", "\"command\"");
    o = exec_ok("{\"code\":\"a\\u0000b\"}", "code", 0, 30, &r);
    assert_int_equal(r.code_len, 3);
    assert_memory_equal(r.code, "a\0b", 3);
    json_object_put(o);
}

/* ---- library names ------------------------------------------------------------ */

static int lib(const char *name, const char *pm)
{
    return sg_validate_library_name(name, strlen(name), pm);
}

/* Every name of good (NULL-terminated) is a valid library name for the
 * package manager pm, and none of bad. */
static void expect_library_names(const char *pm, const char *const *good, const char *const *bad)
{
    for (; *good != NULL; good++)
        if (!lib(*good, pm))
            fail_msg("%s name \"%s\" refused", pm, *good);
    for (; *bad != NULL; bad++)
        if (lib(*bad, pm))
            fail_msg("%s name \"%s\" accepted", pm, *bad);
}

static void test_library_name_plain(void **state)
{
    static const char *const good[] = {"numpy", "scikit-learn", "zope.interface",  "lodash",  "a",  "A1",
                                       "a_b",   "Django",       "python-dateutil", "x.y-z_w", "9x", NULL};
    static const char *const bad[] = {"os; rm -rf", "../x", "",     "-x",          "a b", ".x",   "_x",
                                      "x.",         "x-",   "x_",   "a/b",         "a@b", "a\tb", "a\nb",
                                      "é",          "a==1", "a[b]", "@types/node", NULL};
    char longname[216];

    expect_library_names("pip", good, bad);

    memset(longname, 'a', sizeof(longname));
    assert_int_equal(sg_validate_library_name(longname, 214, "pip"), 1);
    assert_int_equal(sg_validate_library_name(longname, 215, "pip"), 0);
    assert_int_equal(sg_validate_library_name(longname, 214, "npm"), 1);
    assert_int_equal(sg_validate_library_name(longname, 215, "npm"), 0);
    /* the length is what counts, not a NUL */
    assert_int_equal(sg_validate_library_name("numpy\0x", 7, "pip"), 0);
    assert_int_equal(sg_validate_library_name("numpy;rm", 5, "pip"), 1);
}

static void test_library_name_npm_scope(void **state)
{
    static const char *const good[] = {"@types/node", "@a/b",     "@my-org/pkg.js", "@babel/core",
                                       "lodash",      "left-pad", "@org_1/x_y",     NULL};
    static const char *const bad[] = {"@/x",   "@types/", "@types", "@Types/node", "@a/b/c", "@sc ope/x", "@a/-b",
                                      "@a/b-", "@a/.b",   "@a;b/c", "@@a/b",       "@a/b c", "@",         NULL};

    expect_library_names("npm", good, bad);
    /* a scope is npm's only */
    assert_int_equal(lib("@types/node", "pip"), 0);
}

/* ---- paths ----------------------------------------------------------------------- */

static int path(const char *p, size_t len, char *out, size_t outlen, sg_verr_t *e)
{
    memset(e, 0, sizeof(*e));
    return sg_validate_path(p, len, out, outlen, e);
}

static void expect_path(const char *p, const char *want)
{
    char out[SG_MAX_PATH + 1];
    sg_verr_t e;
    if (path(p, strlen(p), out, sizeof(out), &e) != 0)
        fail_msg("path \"%s\" refused: %s", p, e.detail);
    assert_string_equal(out, want);
}

static void expect_path_refused(const char *p, size_t len)
{
    char out[SG_MAX_PATH + 1];
    sg_verr_t e;
    if (path(p, len, out, sizeof(out), &e) != -1)
        fail_msg("path \"%.*s\" accepted as \"%s\"", (int)len, p, out);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "bad_path");
    assert_true(e.detail[0] != '\0');
}

static void test_path_ok(void **state)
{
    expect_path("a.txt", "a.txt");
    expect_path("/sandbox/x/y", "x/y");
    expect_path("/sandbox/a.txt", "a.txt");
    expect_path("dir/sub/main.py", "dir/sub/main.py");
    expect_path(".hidden", ".hidden");
    expect_path("..a", "..a");
    expect_path("a..", "a..");
    expect_path("...", "...");
    expect_path("a/./b", "a/./b");
}

static void test_path_refused(void **state)
{
    static const char *bad[] = {"",
                                "../x",
                                "a/../../x",
                                "x/..",
                                "..",
                                "/etc/passwd",
                                "/sandboxfoo/x",
                                "/sandbox",
                                "/sandbox/",
                                "dir/",
                                ".",
                                "/sandbox/..",
                                "/sandbox/../etc/passwd",
                                "/",
                                "/tmp/x",
                                "sandbox/../../x",
                                "a/.."};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_path_refused(bad[i], strlen(bad[i]));
    expect_path_refused("a\0b", 3);
    expect_path_refused("a.txt\0", 6);
    expect_path_refused(NULL, 0);
}

static void test_path_length(void **state)
{
    char *p = malloc(SG_MAX_PATH + 2);
    char *out = malloc(SG_MAX_PATH + 1);
    sg_verr_t e;

    memset(p, 'a', SG_MAX_PATH + 1);
    p[SG_MAX_PATH + 1] = '\0';
    assert_int_equal(path(p, SG_MAX_PATH, out, SG_MAX_PATH + 1, &e), 0);
    assert_int_equal(strlen(out), SG_MAX_PATH);
    expect_path_refused(p, SG_MAX_PATH + 1);

    /* an output buffer too small is refused, not overrun */
    assert_int_equal(path("abcd", 4, out, 4, &e), -1);
    assert_int_equal(path("abc", 3, out, 4, &e), 0);
    assert_string_equal(out, "abc");
    free(p);
    free(out);
}

/* The header promises the result is relative to /sandbox with no leading
 * slash; "/sandbox//etc/passwd" must not come out as "/etc/passwd". */
static void test_path_no_leading_slash(void **state)
{
    static const char *in[] = {"/sandbox//etc/passwd", "/sandbox///x", "//sandbox/x", "/sandbox//"};
    char out[SG_MAX_PATH + 1], wrong[512] = "";
    size_t off = 0;
    sg_verr_t e;

    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
        out[0] = '\0';
        if (path(in[i], strlen(in[i]), out, sizeof(out), &e) == 0 && out[0] == '/' && off < sizeof(wrong))
            off += (size_t)snprintf(wrong + off, sizeof(wrong) - off, "\n  \"%s\" -> \"%s\"", in[i], out);
    }
    if (off != 0)
        fail_msg("accepted as absolute paths (outside /sandbox):%s", wrong);
}

/* ---- shell quoting --------------------------------------------------------------- */

static void expect_quote(const char *s, const char *want)
{
    char out[256];
    assert_int_equal(sg_shell_quote(s, strlen(s), out, sizeof(out)), 0);
    assert_string_equal(out, want);
}

static void test_shell_quote(void **state)
{
    char out[32];

    expect_quote("abc", "'abc'");
    expect_quote("", "''");
    expect_quote("it's", "'it'\\''s'");
    expect_quote("'", "''\\'''");
    expect_quote("$(rm -rf /) `id` \"x\" \\n", "'$(rm -rf /) `id` \"x\" \\n'");
    expect_quote("a\nb", "'a\nb'");

    /* the length counts, not a NUL */
    assert_int_equal(sg_shell_quote("ab'cd", 2, out, sizeof(out)), 0);
    assert_string_equal(out, "'ab'");
}

static void test_shell_quote_too_small(void **state)
{
    char out[16];

    /* "'abc'" is 5 bytes + NUL */
    memset(out, 'Z', sizeof(out));
    assert_int_equal(sg_shell_quote("abc", 3, out, 6), 0);
    assert_string_equal(out, "'abc'");
    assert_int_equal(out[6], 'Z');

    memset(out, 'Z', sizeof(out));
    assert_int_equal(sg_shell_quote("abc", 3, out, 5), -1);
    for (size_t i = 5; i < sizeof(out); i++)
        assert_int_equal(out[i], 'Z');

    /* "''\''' " is 6 bytes + NUL */
    memset(out, 'Z', sizeof(out));
    assert_int_equal(sg_shell_quote("'", 1, out, 7), 0);
    assert_string_equal(out, "''\\'''");
    memset(out, 'Z', sizeof(out));
    assert_int_equal(sg_shell_quote("'", 1, out, 6), -1);
    for (size_t i = 6; i < sizeof(out); i++)
        assert_int_equal(out[i], 'Z');

    assert_int_equal(sg_shell_quote("", 0, out, 2), -1);
    assert_int_equal(sg_shell_quote("", 0, out, 0), -1);
    assert_int_equal(sg_shell_quote("", 0, out, 3), 0);
    assert_string_equal(out, "''");
}

/* ---- libraries for a language (validate.c, libraries.c) ---- */

static void test_libraries_for_compiled(void **state)
{
    sg_verr_t e;
    json_object *libs = json_tokener_parse("[\"numpy\"]"), *none = json_tokener_parse("[]");
    assert_int_equal(sg_validate_libraries_for(sg_lang_find("cpp", 3), libs, &e), -1);
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.detail, "cpp"));
    assert_int_equal(sg_validate_libraries_for(sg_lang_find("cpp", 3), none, &e), 0);
    assert_int_equal(sg_validate_libraries_for(sg_lang_find("cpp", 3), NULL, &e), 0);
    assert_int_equal(sg_validate_libraries_for(sg_lang_find("python", 6), libs, &e), 0);
    json_object_put(libs);
    json_object_put(none);
}

static void test_lib_check(void **state)
{
    sg_proxy_t px = {0};
    char err[256];
    const sg_lang_t *py = sg_lang_find("python", 6), *js = sg_lang_find("javascript", 10);
    px.install.blocklist = "os,subprocess,Some_Thing";
    px.install.store_volume = "";
    sg_libraries_init(&px);

    assert_int_equal(sg_lib_check(py, "requests", "2.31.0", err, sizeof(err)), 0);
    assert_int_equal(sg_lib_check(py, "requests", NULL, err, sizeof(err)), 0);
    assert_int_equal(sg_lib_check(py, "requests", "latest", err, sizeof(err)), 0);
    assert_int_equal(sg_lib_check(js, "@types/node", "20.1.0", err, sizeof(err)), 0);
    /* the blocklist compares normalised names (PEP 503) */
    assert_int_equal(sg_lib_check(py, "os", NULL, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "blocked"));
    assert_int_equal(sg_lib_check(py, "OS", NULL, err, sizeof(err)), -1);
    assert_int_equal(sg_lib_check(py, "some-thing", NULL, err, sizeof(err)), -1);
    assert_int_equal(sg_lib_check(py, "some.thing", NULL, err, sizeof(err)), -1);
    assert_int_equal(sg_lib_check(py, "osx", NULL, err, sizeof(err)), 0);
    /* names and versions that could reach a shell are refused */
    assert_int_equal(sg_lib_check(py, "numpy;rm -rf /", NULL, err, sizeof(err)), -1);
    assert_int_equal(sg_lib_check(py, "numpy", "1.0; rm", err, sizeof(err)), -1);
    assert_int_equal(sg_lib_check(py, "numpy", "x y", err, sizeof(err)), -1);
    assert_int_equal(sg_lib_check(py, "numpy", ">=1.0", err, sizeof(err)), -1);
    assert_int_equal(sg_lib_check(py, "numpy", "1.0'", err, sizeof(err)), -1);
    /* a compiled language takes none */
    assert_int_equal(sg_lib_check(sg_lang_find("go", 2), "x", NULL, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "go"));
}

/* ---- numbers that are not numbers (issue 9, item 6) ------------------------
 * json-c reads the literals NaN and Infinity, and 1e308 / -1e300 are valid
 * JSON: every numeric field refuses each with 400 naming the field, and
 * nothing is converted first (under UBSan a cast of these would abort). */
static const char *const BAD_NUMBERS[] = {"NaN", "nan", "Infinity", "-Infinity", "1e308", "-1e300", "1e999"};

static void test_non_finite_numbers(void **state)
{
    static const char *const create_fields[] = {"timeout", "memory_mb", "cpus"};
    char body[256], needle[64];
    for (size_t i = 0; i < sizeof(BAD_NUMBERS) / sizeof(BAD_NUMBERS[0]); i++) {
        for (size_t f = 0; f < 3; f++) {
            snprintf(body, sizeof(body), "{\"%s\": %s}", create_fields[f], BAD_NUMBERS[i]);
            json_object *o = json_tokener_parse(body);
            if (o == NULL)
                continue; /* json-c refuses this literal itself: the JSON parse is the 400 */
            json_object_put(o);
            snprintf(needle, sizeof(needle), "\"%s\"", create_fields[f]);
            expect_create_err(body, &policy, "bad_field", needle);
        }
        snprintf(body, sizeof(body), "{\"code\": \"1\", \"timeout\": %s}", BAD_NUMBERS[i]);
        json_object *o = json_tokener_parse(body);
        if (o == NULL)
            continue;
        json_object_put(o);
        expect_exec_err(body, "code", 0, "bad_field", "\"timeout\"");
        snprintf(body, sizeof(body), "{\"command\": \"ls\", \"timeout\": %s}", BAD_NUMBERS[i]);
        expect_exec_err(body, "command", 0, "bad_field", "\"timeout\"");
        snprintf(body, sizeof(body), "{\"code\": \"1\", \"lang\": \"python\", \"timeout\": %s}", BAD_NUMBERS[i]);
        expect_exec_err(body, "code", 1, "bad_field", "\"timeout\"");
    }
    /* json-c does read these as doubles (else the loop above tested nothing) */
    json_object *o = json_tokener_parse("{\"a\": NaN, \"b\": Infinity, \"c\": 1e308}"), *v;
    assert_non_null(o);
    assert_true(json_object_object_get_ex(o, "a", &v) && json_object_is_type(v, json_type_double));
    assert_true(json_object_object_get_ex(o, "b", &v) && json_object_is_type(v, json_type_double));
    json_object_put(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_defaults),
        cmocka_unit_test(test_non_finite_numbers),
        cmocka_unit_test(test_create_values),
        cmocka_unit_test(test_create_unknown_lang),
        BAD_CREATES("test_create_keep_template_type"),
        cmocka_unit_test(test_create_owner),
        BAD_CREATES("test_create_timeout"),
        BAD_CREATES("test_create_memory"),
        BAD_CREATES("test_create_cpus"),
        cmocka_unit_test(test_create_network),
        cmocka_unit_test(test_runtime_field),
        cmocka_unit_test(test_create_image),
        cmocka_unit_test(test_exec_code_required),
        cmocka_unit_test(test_exec_defaults),
        cmocka_unit_test(test_exec_timeout),
        cmocka_unit_test(test_exec_libraries_shape),
        cmocka_unit_test(test_exec_library_names),
        cmocka_unit_test(test_exec_library_count),
        cmocka_unit_test(test_exec_want_lang),
        cmocka_unit_test(test_exec_nul),
        cmocka_unit_test(test_library_name_plain),
        cmocka_unit_test(test_library_name_npm_scope),
        cmocka_unit_test(test_path_ok),
        cmocka_unit_test(test_path_refused),
        cmocka_unit_test(test_path_length),
        cmocka_unit_test(test_path_no_leading_slash),
        cmocka_unit_test(test_shell_quote),
        cmocka_unit_test(test_shell_quote_too_small),
        cmocka_unit_test(test_libraries_for_compiled),
        cmocka_unit_test(test_lib_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
