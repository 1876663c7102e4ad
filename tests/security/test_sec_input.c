/*
 * test_sec_input.c — numbers that are not numbers (issue 9, item 6).
 *
 * NaN, Infinity, -Infinity, 1e308, -1e300 and 1e999 (json-c reads the
 * literals NaN and Infinity, and reads 1e999 as an infinity), sent as raw
 * JSON text to every numeric field a client can send: session create
 * (timeout, memory_mb, cpus), execute, commands and one-shot execute
 * (timeout), the library route, the admin API's quotas (PATCH and create)
 * and its usage query. Each must be a 400 naming the field. The gateway
 * under test is the sanitizer build: a cast of one of these is undefined
 * behaviour and aborts it, so the test also asserts it is still alive and
 * serving, and that a fresh session still runs code.
 */
#include "sgsec.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sggw_stack_t stack;

static const char *const BAD[] = {"NaN", "Infinity", "-Infinity", "1e308", "-1e300", "1e999"};
#define N_BAD (sizeof(BAD) / sizeof(BAD[0]))

static int group_setup(void **state)
{
    *state = &stack;
    sggw_stack_opts_t o = {.redis = false};
    return sggw_stack_start(&stack, &o);
}

/* A 400 whose detail names `field` (quoted, or as the admin API names its
 * quota keys: "key: ..."). */
static void expect_400_naming(const sgtest_reply_t *r, const char *field, const char *what)
{
    if (r->status != 400)
        SG_FAIL(NULL, "%s: HTTP %ld, not 400: %.300s", what, r->status, r->body ? r->body : "");
    json_object *o = SG_EXPECT_ERROR(r, 400, NULL);
    const char *detail = SG_STR(o, "detail");
    SG_CHECK(strstr(detail, field) != NULL, o, "%s: the detail must name the field \"%s\"", what, field);
    json_object_put(o);
}

/* method path with body (NULL: none) as tok (NULL: as the admin): a 400
 * whose detail names field. */
static void expect_refused(const char *tok, const char *method, const char *path, const char *body, const char *field)
{
    char what[512];
    sgtest_reply_t r;
    if (body != NULL)
        snprintf(what, sizeof(what), "%s %s %s", method, path, body);
    else
        snprintf(what, sizeof(what), "%s", path);
    if (tok != NULL)
        sggw_call(stack.gw, tok, method, path, body, &r);
    else
        sggw_admin_call(stack.gw, method, path, body, &r);
    expect_400_naming(&r, field, what);
    sgtest_reply_free(&r);
}

/* The gateway still answers, and a fresh session runs code. */
static void expect_serving(const char *token)
{
    SG_CHECK(sggw_gateway_alive(stack.gw), NULL, "the gateway died (%s)", "");
    sgsec_fresh_session_runs(stack.gw, token, "{\"lang\": \"python\", \"timeout\": 10, \"memory_mb\": 256}",
                             "print(6 * 7)", 5, "42\n");
}

SGGW_TEST(test_session_create_numbers)
{
    char *tok = sggw_new_tenant(sggw_gateway_data_dir(stack.gw), "input-create", NULL);
    static const char *const fields[] = {"timeout", "memory_mb", "cpus"};
    char body[160];
    for (size_t i = 0; i < N_BAD; i++) {
        for (size_t f = 0; f < 3; f++) {
            snprintf(body, sizeof(body), "{\"lang\": \"python\", \"%s\": %s}", fields[f], BAD[i]);
            expect_refused(tok, "POST", "/sessions", body, fields[f]);
        }
    }
    /* nothing was created */
    json_object *l = sggw_list_sessions(stack.gw, tok);
    SG_CHECK(json_object_array_length(SG_ARR(l, "sessions")) == 0, l, "no session came of the bad requests");
    json_object_put(l);
    expect_serving(tok);
    free(tok);
}

SGGW_TEST(test_execution_numbers)
{
    char *tok = sggw_new_tenant(sggw_gateway_data_dir(stack.gw), "input-exec", NULL);
    char *sid = sggw_create_session(stack.gw, tok, NULL, NULL);
    /* the requests that carry a number: path (%s: the session), body (%s:
     * the number) and the field */
    static const struct {
        const char *path, *body, *field;
    } reqs[] = {
        {"/sessions/%s/execute", "{\"code\": \"print(1)\", \"timeout\": %s}", "timeout"},
        {"/sessions/%s/execute", "{\"code\": \"print(1)\", \"stream\": true, \"timeout\": %s}", "timeout"},
        {"/sessions/%s/commands", "{\"command\": \"true\", \"timeout\": %s}", "timeout"},
        {"/execute", "{\"code\": \"print(1)\", \"lang\": \"python\", \"timeout\": %s}", "timeout"},
        {"/sessions/%s/libraries", "{\"package\": %s}", "package"},
    };
    char body[200], path[128];
    for (size_t i = 0; i < N_BAD; i++) {
        for (size_t q = 0; q < sizeof(reqs) / sizeof(reqs[0]); q++) {
            pathf(path, sizeof(path), reqs[q].path, sid);
            snprintf(body, sizeof(body), reqs[q].body, BAD[i]);
            expect_refused(tok, "POST", path, body, reqs[q].field);
        }
    }
    /* none of them ran: the ledger has no execution */
    json_object *o = SGSEC_ADMIN_GET(stack.gw, "/admin/usage?tenant=input-exec");
    SG_CHECK(SG_INT(o, "executions") == 0, o, "no execution was recorded");
    json_object_put(o);
    /* the session still works */
    o = sggw_execute(stack.gw, tok, sid, "print('ok')", 5);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "ok\n") == 0, o, "the session answers");
    json_object_put(o);
    sggw_delete_session(stack.gw, tok, sid);
    free(sid);
    expect_serving(tok);
    free(tok);
}

SGGW_TEST(test_admin_numbers)
{
    char *tok = sggw_new_tenant(sggw_gateway_data_dir(stack.gw), "input-admin", NULL);
    static const char *const quotas[] = {"rate_per_min",         "burst",       "max_sessions",  "execs_per_day",
                                         "exec_seconds_per_day", "max_timeout", "max_memory_mb", "max_cpus",
                                         "idle_timeout",         "max_lifetime"};
    char body[200];
    sgtest_reply_t r;
    json_object *before = SGSEC_ADMIN_GET(stack.gw, "/admin/tenants/input-admin");
    for (size_t i = 0; i < N_BAD; i++) {
        for (size_t q = 0; q < sizeof(quotas) / sizeof(quotas[0]); q++) {
            snprintf(body, sizeof(body), "{\"%s\": %s}", quotas[q], BAD[i]);
            expect_refused(NULL, "PATCH", "/admin/tenants/input-admin", body, quotas[q]);
            snprintf(body, sizeof(body), "{\"name\": \"input-new\", \"%s\": %s}", quotas[q], BAD[i]);
            expect_refused(NULL, "POST", "/admin/tenants", body, quotas[q]);
        }
    }
    static const char *const times[] = {"nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e300", "1e308", "0x10"};
    for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
        char path[160];
        pathf(path, sizeof(path), "/admin/usage?tenant=input-admin&from=%s", times[i]);
        expect_refused(NULL, "GET", path, NULL, "from");
        pathf(path, sizeof(path), "/admin/usage?tenant=input-admin&to=%s", times[i]);
        expect_refused(NULL, "GET", path, NULL, "to");
    }
    /* the tenant is as it was, and no tenant was made */
    json_object *after = SGSEC_ADMIN_GET(stack.gw, "/admin/tenants/input-admin");
    SG_CHECK(json_object_equal(before, after), after, "the tenant's quotas are unchanged");
    json_object_put(before);
    json_object_put(after);
    sggw_admin_call(stack.gw, "GET", "/admin/tenants/input-new", NULL, &r);
    SG_CHECK(r.status == 404, NULL, "no tenant input-new: HTTP %ld", r.status);
    sgtest_reply_free(&r);
    expect_serving(tok);
    free(tok);
}

int main(void)
{
    return SG_RUN_TESTS("sec_input", group_setup, sggw_stack_group_teardown, NULL, sggw_stack_teardown,
                        test_session_create_numbers, test_execution_numbers, test_admin_numbers);
}
