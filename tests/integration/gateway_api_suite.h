/*
 * gateway_api_suite.h — the fixture the gateway API suites share
 * (test_gateway_api.c, test_gateway_limits.c): one proxy (small warm pool)
 * and one gateway (memory state: no Redis) with SANDGATE_MAX_FILE_BYTES=65536
 * so the size limits are cheap to reach; a test's own proxy and another
 * writer of the SQLite file, stopped after it whatever happened; and the
 * helpers both use. Each suite includes it once.
 */
#ifndef SANDGATE_GATEWAY_API_SUITE_H
#define SANDGATE_GATEWAY_API_SUITE_H

#include "sggw.h"

#include <curl/curl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GW_MAX_FILE_BYTES 65536
#define REMOVAL_S 15.0
#define FAST_S 0.2 /* what "answers at once" means under load */

static sggw_stack_t stack;
/* what a single test starts for itself; after_test stops it whatever happened */
static sgtest_proxy_t *extra_proxy;
static char *extra_proxy_id;

static sggw_db_writer_t *writer;

static inline void cleanup_extra(void)
{
    sggw_db_writer_close(writer); /* after the gateway: its close must not disturb it */
    writer = NULL;
    if (extra_proxy != NULL)
        sgtest_proxy_stop(extra_proxy);
    extra_proxy = NULL;
    if (extra_proxy_id != NULL && sgtest_docker_count(extra_proxy_id) > 0) {
        fprintf(stderr, "containers of %s were left; removing them\n", extra_proxy_id);
        sgtest_docker_remove_all(extra_proxy_id);
    }
    free(extra_proxy_id);
    extra_proxy_id = NULL;
}

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

static inline const char *data_dir(void)
{
    return sggw_gateway_data_dir(stack.gw);
}

/* A uuid nobody issued. */
static inline void random_uuid(char out[37])
{
    char *t = sggw_fake_token(NULL); /* 43 random base64url chars at 13.. */
    static const char hex[] = "0123456789abcdef";
    for (int i = 0, k = 13; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23)
            out[i] = '-';
        else
            out[i] = hex[(unsigned char)t[k++ % 56] % 16];
    }
    out[36] = '\0';
    free(t);
}

/* A 401 of the public API: JSON {detail, code} and a Bearer challenge. */
#define EXPECT_401(r) expect_401((r), __FILE__, __LINE__)
static inline void expect_401(const sgtest_reply_t *r, const char *file, int line)
{
    json_object *o = sgtest__expect_error(r, 401, NULL, file, line);
    char *www = sgtest_reply_header(r, "WWW-Authenticate");
    if (www == NULL || strncasecmp(www, "Bearer", 6) != 0)
        sgtest__fail(o, file, line, "a 401 must carry WWW-Authenticate: Bearer ... (got %s)", www ? www : "none");
    free(www);
    json_object_put(o);
}

static inline json_object *ephemeral(sggw_gateway_t *g, const char *token, const char *json_body)
{
    return sggw_post_result(g, token, "/execute", json_tokener_parse(json_body));
}

/* One request with the given raw header lines. */
static inline void call_hdr(const char *method, const char *path, const char *const *hdrs, const char *body,
                            const char *ctype, sgtest_reply_t *r)
{
    char url[2048];
    pathf(url, sizeof(url), "%s%s", sggw_gateway_url(stack.gw), path);
    sggw_http(method, url, body, body ? strlen(body) : 0, ctype, hdrs, 0, r);
}

/* The detail of an error reply names `field`. */
static inline void expect_bad_field(const sgtest_reply_t *r, const char *field)
{
    json_object *o = SG_EXPECT_ERROR(r, 400, NULL);
    const char *detail = SG_STR(o, "detail");
    SG_CHECK(strstr(detail, field) != NULL, o, "the detail must name the field \"%s\"", field);
    json_object_put(o);
}

/* ------------------------------------------------------------------------
 * Fixtures
 * ------------------------------------------------------------------------ */

static inline int group_setup(void **state)
{
    *state = &stack;
    char file_kv[64];
    snprintf(file_kv, sizeof(file_kv), "SANDGATE_MAX_FILE_BYTES=%d", GW_MAX_FILE_BYTES);
    /* the auth matrix sends 27 wrong admin tokens from one address on
     * purpose; the throttle on guessing has tests of its own
     * (tests/security/test_sec_http.c) */
    const char *genv[] = {file_kv, "SANDGATE_ADMIN_FAIL_LIMIT=1000", NULL};
    const char *penv[] = {"SANDGATE_POOL_SIZE=2", NULL};
    sggw_stack_opts_t o = {.proxy_env = penv, .gateway_env = genv};
    return sggw_stack_start(&stack, &o);
}

/* After every test: the logs when it failed; both servers must have lived
 * through it (they are started again so that later tests still run). */
static inline int after_test(void **state)
{
    int rc = sggw_stack_after_test(&stack);
    cleanup_extra();
    return rc;
}

#endif
