/*
 * sgsec.c — see sgsec.h.
 */
#include "sgsec.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the stack of the last sgsec_stack_start(), for the row fixtures */
static sgsec_stack_t *running;

int sgsec_stack_start(sgsec_stack_t *st, const char *const *proxy_env)
{
    const char *env[SGGW_STACK_MAX_ENV + 1];
    size_t n = 0;

    env[n++] = "SANDGATE_POOL_SIZE=2";
    for (size_t i = 0; proxy_env != NULL && proxy_env[i] != NULL; i++) {
        if (n >= SGGW_STACK_MAX_ENV) {
            fprintf(stderr, "sgsec_stack_start: too many proxy settings\n");
            return -1;
        }
        env[n++] = proxy_env[i];
    }
    env[n] = NULL;
    sggw_stack_opts_t o = {.redis = true, .proxy_env = env};
    running = st;
    return sggw_stack_start(st, &o);
}

int sgsec_teardown(void **state)
{
    (void)state;
    return sggw_stack_after_test(running);
}

int sgsec_group_teardown(void **state)
{
    (void)state;
    return sggw_stack_end(running);
}

char *sgsec_tenant(const sgsec_stack_t *st, const char *name, const char *const *quotas)
{
    return sggw_new_tenant(sggw_gateway_data_dir(st->gw), name, quotas);
}

char *sgsec_begin(const sgsec_stack_t *st, const char *name, const char *const *quotas, char **sid)
{
    char *tok = sgsec_tenant(st, name, quotas);
    *sid = sggw_create_session(st->gw, tok, NULL, NULL);
    return tok;
}

json_object *sgsec_py(const sgsec_stack_t *st, const char *tok, const char *sid, const char *code)
{
    return sggw_execute(st->gw, tok, sid, code, 120);
}

json_object *sgsec_sh(const sgsec_stack_t *st, const char *tok, const char *sid, const char *cmd)
{
    char path[128];
    json_object *b = json_object_new_object();
    json_object_object_add(b, "command", json_object_new_string(cmd));
    json_object_object_add(b, "timeout", json_object_new_int(60));
    pathf(path, sizeof(path), "/sessions/%s/commands", sid);
    return sggw_post_result(st->gw, tok, path, b);
}

int sgsec_poll(bool (*done)(void *ctx), void *ctx, double timeout_s, unsigned every_ms)
{
    double deadline = sgtest_now() + timeout_s;
    for (;;) {
        if (done(ctx))
            return 0;
        if (sgtest_now() > deadline)
            return -1;
        usleep(every_ms * 1000);
    }
}

json_object *sgsec__admin_get(sggw_gateway_t *g, const char *file, int line, const char *fmt, ...)
{
    char path[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(path))
        sgtest__check_failed(NULL, file, line, "path fits", "admin path too long: %s", fmt);
    sgtest_reply_t r;
    sggw_admin_call(g, "GET", path, NULL, &r);
    json_object *o = sgtest__expect_json(&r, 200, file, line);
    sgtest_reply_free(&r);
    return o;
}

void sgsec__expect_stdout(json_object *res, const char *want, const char *file, int line)
{
    const char *out = sgtest__get_str(res, "stdout", file, line);
    if (strcmp(out, want) != 0)
        sgtest__check_failed(res, file, line, "stdout == want", "stdout must be exactly:\n%s", want);
    if (strcmp(sgtest__get_str(res, "reason", file, line), "exited") != 0)
        sgtest__check_failed(res, file, line, "reason == \"exited\"", "the run must end by itself");
}

void sgsec_expect_service_works(const sgsec_stack_t *st, const char *tok, const char *sid, int kept_x)
{
    json_object *r;
    if (sid != NULL) {
        r = sgsec_py(st, tok, sid, kept_x ? "print(x + 1)" : "print(6 * 7)");
        SGSEC_EXPECT_STDOUT(r, "42\n");
        if (kept_x)
            SG_CHECK(strcmp(SG_STR(r, "state"), "kept") == 0, r, "the attacked session must keep its state");
        json_object_put(r);
        sggw_delete_session(st->gw, tok, sid);
    }
    char *fresh = sggw_create_session(st->gw, tok, NULL, NULL);
    r = sgsec_py(st, tok, fresh, "print(6 * 7)");
    SGSEC_EXPECT_STDOUT(r, "42\n");
    json_object_put(r);
    sggw_delete_session(st->gw, tok, fresh);
    free(fresh);
}

void sgsec_fresh_session_runs(const sggw_gateway_t *g, const char *tok, const char *body, const char *code,
                              double timeout, const char *want)
{
    char *sid = sggw_create_session(g, tok, body, NULL);
    json_object *o = sggw_execute(g, tok, sid, code, timeout);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), want) == 0, o, "a fresh session runs code");
    json_object_put(o);
    sggw_delete_session(g, tok, sid);
    free(sid);
}

void sgsec_end(const sgsec_stack_t *st, char *tok, char *sid, int kept_x)
{
    sgsec_expect_service_works(st, tok, sid, kept_x);
    free(sid);
    free(tok);
}
