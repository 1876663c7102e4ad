/*
 * sgsec.c — see sgsec.h.
 */
#include "sgsec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sgsec_stack_start(sgsec_stack_t *st, const char *const *proxy_env)
{
    const char *env[16];
    size_t n = 0;

    memset(st, 0, sizeof(*st));
    env[n++] = "SANDGATE_POOL_SIZE=2";
    for (size_t i = 0; proxy_env != NULL && proxy_env[i] != NULL; i++) {
        if (n + 1 >= sizeof(env) / sizeof(env[0])) {
            fprintf(stderr, "sgsec_stack_start: too many proxy settings\n");
            return -1;
        }
        env[n++] = proxy_env[i];
    }
    env[n] = NULL;
    if ((st->proxy_id = sgtest_new_proxy_id()) == NULL || (st->proxy = sgtest_proxy_start(st->proxy_id, env)) == NULL)
        return -1;
    if ((st->redis = sggw_redis_start()) == NULL)
        return -1;
    sggw_opts_t o = {.proxy_url = sgtest_proxy_url(st->proxy), .redis_url = sggw_redis_url(st->redis)};
    st->gw = sggw_gateway_start(&o);
    return st->gw != NULL ? 0 : -1;
}

int sgsec_after_test(sgsec_stack_t *st)
{
    sggw_after_test();
    if (!sgtest_proxy_alive(st->proxy) || !sggw_gateway_alive(st->gw) || !sggw_redis_running(st->redis)) {
        fprintf(stderr, "a server died during this test\n");
        sggw_print_logs(80);
        return -1;
    }
    return 0;
}

int sgsec_stack_stop(sgsec_stack_t *st)
{
    int rc = sggw_stack_stop(&st->gw, &st->redis, &st->proxy, st->proxy_id);
    free(st->proxy_id);
    st->proxy_id = NULL;
    return rc;
}

char *sgsec_tenant(const sgsec_stack_t *st, const char *name, const char *const *quotas)
{
    return sggw_new_tenant(sggw_gateway_data_dir(st->gw), name, quotas);
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
