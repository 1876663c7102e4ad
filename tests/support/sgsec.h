/*
 * sgsec.h — what the attack suites of tests/security/ share: the stack they
 * attack (a sandgate-proxy of their own, a private redis-server, a gateway
 * on both), ordinary tenants, code and commands run as such a tenant, and
 * the check that ends every attack: the service still works.
 *
 * Built on sggw.h; the same threading and ownership rules apply (functions
 * documented as asserting run on the cmocka test thread only).
 */
#ifndef SANDGATE_SGSEC_H
#define SANDGATE_SGSEC_H

#include "sggw.h"

/* The stack the attacks run on (sggw.h's, always with a redis-server). */
typedef sggw_stack_t sgsec_stack_t;

/* The suite's stack: a proxy with SANDGATE_POOL_SIZE=2 and the "KEY=VALUE"
 * strings of proxy_env (NULL-terminated, may be NULL), a redis-server, a
 * gateway on them (sggw_stack_start()). 0, or -1 after printing why (for a
 * group setup). */
int sgsec_stack_start(sgsec_stack_t *st, const char *const *proxy_env);
/* Its test and group teardowns are sggw_stack_teardown() and
 * sggw_stack_group_teardown() (the group setup sets *state = st). */

/* A table-driven suite: one cmocka test per row of a table, the row as the
 * test's state. Its group setup leaves the group state NULL (cmocka would
 * hand a group state to every test in place of the row), and these
 * fixtures work on the stack of the last sgsec_stack_start() instead:
 * sggw_stack_after_test() and sggw_stack_end(). */
int sgsec_teardown(void **state);
int sgsec_group_teardown(void **state);
/* The cmocka test of a row (a pointer to a struct whose member `name` names
 * the test): test_func run with the row as its state, then sgsec_teardown. */
#define SGSEC_ROW_TEST(test_func, row)                                                                                 \
    ((struct CMUnitTest){(row)->name, (test_func), NULL, sgsec_teardown, (void *)(row)})

/* Asserting: a tenant with the "key=value" quotas (may be NULL); its token. */
char *sgsec_tenant(const sgsec_stack_t *st, const char *name, const char *const *quotas);
/* Asserting: the start of most attacks: a tenant `name` with the quotas (may
 * be NULL) and a new python session of it (*sid, malloc'd); its token. */
char *sgsec_begin(const sgsec_stack_t *st, const char *name, const char *const *quotas, char **sid);
/* Asserting: POST /sessions/{sid}/execute {"code", "timeout": 120}: the result. */
json_object *sgsec_py(const sgsec_stack_t *st, const char *tok, const char *sid, const char *code);
/* Asserting: POST /sessions/{sid}/commands {"command", "timeout": 60}: the result. */
json_object *sgsec_sh(const sgsec_stack_t *st, const char *tok, const char *sid, const char *cmd);

/* Calls done(ctx) every every_ms until it returns true (0), or until
 * timeout_s have passed (-1). */
int sgsec_poll(bool (*done)(void *ctx), void *ctx, double timeout_s, unsigned every_ms);

/* Asserting: GET the admin API's path (printf-style) on gateway g: the
 * 200's JSON body (the caller puts it). */
#define SGSEC_ADMIN_GET(g, ...) sgsec__admin_get((g), __FILE__, __LINE__, __VA_ARGS__)
json_object *sgsec__admin_get(sggw_gateway_t *g, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Asserts a result's stdout is exactly `want` and the run ended by itself
 * (reason "exited"). */
#define SGSEC_EXPECT_STDOUT(res, want) sgsec__expect_stdout((res), (want), __FILE__, __LINE__)
void sgsec__expect_stdout(json_object *res, const char *want, const char *file, int line);

/* The end of every attack (asserting): the attacked session sid (if not
 * NULL) still runs code — with its interpreter's state when kept_x is set
 * (the attack's code set x = 41 first) — and is closed; then a fresh
 * session of the tenant runs code and is closed. */
void sgsec_expect_service_works(const sgsec_stack_t *st, const char *tok, const char *sid, int kept_x);

/* Asserting: a fresh session of tok on g (its create body `body`, NULL: the
 * defaults) runs code (timeout as sggw_execute()'s) with stdout exactly
 * `want`, and is deleted. */
void sgsec_fresh_session_runs(const sggw_gateway_t *g, const char *tok, const char *body, const char *code,
                              double timeout, const char *want);

/* Asserting: their end: sgsec_expect_service_works(st, tok, sid, kept_x),
 * then frees tok and sid. */
void sgsec_end(const sgsec_stack_t *st, char *tok, char *sid, int kept_x);

#endif
