/*
 * store_fixture.h — what the suites of the gateway's SQLite store
 * (test_store.c, test_store_sessions.c) share: a temporary directory for
 * the group, a data directory per test under it, a store opened on it, a
 * usage row.
 */
#ifndef SANDGATE_TEST_STORE_FIXTURE_H
#define SANDGATE_TEST_STORE_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <ftw.h>
#include <libgen.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store.h"
#include "token.h"
#include "util.h"

/* The suite's temporary directory (group_setup, group_teardown). */
static char root[64];

static inline int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

static inline int group_setup(void **state)
{
    snprintf(root, sizeof(root), "/tmp/sg-test-store-XXXXXX");
    return mkdtemp(root) != NULL ? 0 : -1;
}

static inline int group_teardown(void **state)
{
    return nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh data directory per test, under root (not created). */
static inline void data_dir(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", root, name);
}

static inline sg_store_t *open_ok(const char *dir)
{
    char err[256] = "";
    sg_store_t *st = sg_store_open(dir, err, sizeof(err));
    if (st == NULL)
        fail_msg("sg_store_open(%s): %s", dir, err);
    return st;
}

/* A store on the data directory `name` (its path in dir) with the tenants
 * "a" and "b". */
static inline sg_store_t *open_with_a_and_b(char *dir, size_t len, const char *name, sg_tenant_t *a, sg_tenant_t *b)
{
    char err[256];
    data_dir(dir, len, name);
    sg_store_t *st = open_ok(dir);
    assert_int_equal(sg_store_tenant_create(st, "a", a, err, sizeof(err)), 0);
    assert_int_equal(sg_store_tenant_create(st, "b", b, err, sizeof(err)), 0);
    return st;
}

/* A usage row of a python run. */
static inline sg_usage_t usage(int64_t tenant, const char *sid, double at, double dur, int timed_out, int64_t bytes)
{
    sg_usage_t u;
    memset(&u, 0, sizeof(u));
    u.tenant_id = tenant;
    snprintf(u.session_id, sizeof(u.session_id), "%s", sid);
    strcpy(u.lang, "python");
    strcpy(u.kind, sid[0] ? "execute" : "ephemeral");
    u.started_at = at;
    u.duration = dur;
    u.exit_code = timed_out ? -1 : 0;
    u.timed_out = timed_out;
    u.output_bytes = bytes;
    return u;
}

/* NAME_list_t, a list an iteration of the store fills with collect_NAME()
 * as its callback: the first CAP records of type T in `item`, and how many
 * came in `n`. */
#define STORE_LIST(NAME, T, CAP)                                                                                       \
    typedef struct {                                                                                                   \
        int n;                                                                                                         \
        T item[CAP];                                                                                                   \
    } NAME##_list_t;                                                                                                   \
    static void collect_##NAME(const T *x, void *data)                                                                 \
    {                                                                                                                  \
        NAME##_list_t *l = data;                                                                                       \
        if (l->n < (CAP))                                                                                              \
            l->item[l->n] = *x;                                                                                        \
        l->n++;                                                                                                        \
    }

#endif
