/*
 * test_store_sessions.c — the gateway's SQLite store (gateway/store/) on
 * real database files in a temporary directory: session history and
 * templates, restart (close + open), two connections and concurrent first
 * opens of one file; and sandgate-admin end to end when the binary is built
 * (SANDGATE_ADMIN_BIN, else ../gateway/sandgate-admin next to this test;
 * the test fails without it). The store's tenants, tokens and usage:
 * test_store.c.
 */
#include "store_fixture.h"
#include "sgrun.h"

/* ---- sessions ---- */

STORE_LIST(session, sg_session_rec_t, 8)

static sg_session_rec_t session(const char *id, int64_t tenant, int64_t created)
{
    sg_session_rec_t s;
    memset(&s, 0, sizeof(s));
    snprintf(s.id, sizeof(s.id), "%s", id);
    s.tenant_id = tenant;
    strcpy(s.lang, "go");
    s.created_at = created;
    return s;
}

static void test_sessions(void **state)
{
    char dir[256], err[256];
    const char *s1 = "11111111-1111-4111-8111-111111111111", *s2 = "22222222-2222-4222-8222-222222222222",
               *s3 = "33333333-3333-4333-8333-333333333333";
    sg_tenant_t a, b;
    sg_session_rec_t r;
    session_list_t l = {0};
    sg_store_t *st;

    st = open_with_a_and_b(dir, sizeof(dir), "sessions", &a, &b);

    r = session(s2, a.id, 2000);
    assert_int_equal(sg_store_session_open(st, &r, err, sizeof(err)), 0);
    r = session(s1, a.id, 1000);
    assert_int_equal(sg_store_session_open(st, &r, err, sizeof(err)), 0);
    r = session(s3, b.id, 0); /* created_at 0: now */
    assert_int_equal(sg_store_session_open(st, &r, err, sizeof(err)), 0);
    /* duplicate id, unknown tenant, empty id */
    r = session(s1, b.id, 5);
    err[0] = '\0';
    assert_int_equal(sg_store_session_open(st, &r, err, sizeof(err)), -1);
    assert_non_null(strstr(err, s1));
    r = session("44444444-4444-4444-8444-444444444444", 99, 5);
    err[0] = '\0';
    assert_int_equal(sg_store_session_open(st, &r, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "99"));
    r = session("", a.id, 5);
    assert_int_equal(sg_store_session_open(st, &r, err, sizeof(err)), -1);

    /* get */
    assert_int_equal(sg_store_session_get(st, s1, &r, err, sizeof(err)), 1);
    assert_string_equal(r.id, s1);
    assert_int_equal(r.tenant_id, a.id);
    assert_string_equal(r.lang, "go");
    assert_int_equal(r.created_at, 1000);
    assert_int_equal(r.closed_at, 0);
    assert_string_equal(r.close_reason, "");
    assert_int_equal(r.executions, 0);
    assert_int_equal(sg_store_session_get(st, s3, &r, err, sizeof(err)), 1);
    assert_true(r.created_at >= sg_wall_s() - 5);
    assert_int_equal(sg_store_session_get(st, "nope", &r, err, sizeof(err)), 0);

    /* count executions */
    for (int i = 0; i < 3; i++)
        assert_int_equal(sg_store_session_count_exec(st, s1, 1, err, sizeof(err)), 0);
    assert_int_equal(sg_store_session_count_exec(st, "nope", 1, err, sizeof(err)), 0);
    assert_int_equal(sg_store_session_get(st, s1, &r, err, sizeof(err)), 1);
    assert_int_equal(r.executions, 3);

    /* open lists: by tenant, oldest first; all */
    assert_int_equal(sg_store_session_list_open(st, a.id, collect_session, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.item[0].id, s1);
    assert_string_equal(l.item[1].id, s2);
    assert_int_equal(l.item[0].executions, 3);
    l.n = 0;
    assert_int_equal(sg_store_session_list_open(st, 0, collect_session, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 3);

    /* close: once; a second close keeps the first time and reason */
    assert_int_equal(sg_store_session_close(st, s1, 3000, "idle", err, sizeof(err)), 0);
    assert_int_equal(sg_store_session_close(st, s1, 4000, "deleted", err, sizeof(err)), 0);
    assert_int_equal(sg_store_session_close(st, "nope", 4000, "deleted", err, sizeof(err)), 0);
    assert_int_equal(sg_store_session_get(st, s1, &r, err, sizeof(err)), 1);
    assert_int_equal(r.closed_at, 3000);
    assert_string_equal(r.close_reason, "idle");
    assert_int_equal(r.executions, 3);
    assert_int_equal(sg_store_session_close(st, s3, 0, "lifetime", err, sizeof(err)), 0); /* 0: now */
    assert_int_equal(sg_store_session_get(st, s3, &r, err, sizeof(err)), 1);
    assert_true(r.closed_at >= sg_wall_s() - 5);
    l.n = 0;
    assert_int_equal(sg_store_session_list_open(st, 0, collect_session, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.item[0].id, s2);
    l.n = 0;
    assert_int_equal(sg_store_session_list_open(st, b.id, collect_session, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 0);
    sg_store_close(st);
}

/* ---- restart, two connections, concurrent first opens ---- */

static void count_template(const sg_template_rec_t *t, void *data)
{
    (*(int *)data)++;
}

static void count_deleting(const sg_tenant_t *t, void *data)
{
    (*(int *)data)++;
}

/* The template slots: the quota counts kept templates and slots of live
 * sessions; a slot whose session closed, or an old unbound one, no longer
 * counts; a kept template stays until deleted; purge takes everything. */
static void test_templates(void **state)
{
    char dir[256], err[256];
    const char *s1 = "11111111-1111-4111-8111-111111111111", *s2 = "22222222-2222-4222-8222-222222222222";
    sg_tenant_t a, b;
    sg_session_rec_t r;
    sg_template_rec_t t;
    int64_t row1 = 0, row2 = 0, row3 = 0;
    int n = 0;
    sg_store_t *st;

    data_dir(dir, sizeof(dir), "templates");
    st = open_ok(dir);
    assert_int_equal(sg_store_tenant_create(st, "a", &a, err, sizeof(err)), 0);
    assert_int_equal(sg_store_tenant_create(st, "b", &b, err, sizeof(err)), 0);
    assert_int_equal(a.max_templates, 5);

    /* two slots of a quota of 2; the third is refused; b is not affected */
    assert_int_equal(sg_store_template_reserve(st, a.id, 2, 600, &row1, err, sizeof(err)), 1);
    assert_int_equal(sg_store_template_reserve(st, a.id, 2, 600, &row2, err, sizeof(err)), 1);
    assert_int_equal(sg_store_template_reserve(st, a.id, 2, 600, &row3, err, sizeof(err)), 0);
    assert_int_equal(sg_store_template_reserve(st, b.id, 2, 600, &row3, err, sizeof(err)), 1);
    /* a failed create gives its slot back */
    assert_int_equal(sg_store_template_release(st, row2, err, sizeof(err)), 0);
    assert_int_equal(sg_store_template_reserve(st, a.id, 2, 600, &row2, err, sizeof(err)), 1);

    /* slots bound to sessions: one kept, one not */
    r = session(s1, a.id, 0);
    assert_int_equal(sg_store_session_open(st, &r, err, sizeof(err)), 0);
    r = session(s2, a.id, 0);
    assert_int_equal(sg_store_session_open(st, &r, err, sizeof(err)), 0);
    assert_int_equal(sg_store_template_bind(st, row1, s1, err, sizeof(err)), 0);
    assert_int_equal(sg_store_template_bind(st, row2, s2, err, sizeof(err)), 0);
    /* the grace period over (0 s), a bound slot still counts while its session is open */
    assert_int_equal(sg_store_template_reserve(st, a.id, 2, -10, &row3, err, sizeof(err)), 0);
    assert_int_equal(sg_store_template_closed(st, a.id, s1,
                                              "repo:"
                                              "11111111-1111-4111-8111-111111111111",
                                              1234, err, sizeof(err)),
                     0);
    assert_int_equal(sg_store_session_close(st, s1, 0, "deleted", err, sizeof(err)), 0);
    assert_int_equal(sg_store_template_closed(st, a.id, s2, NULL, 0, err, sizeof(err)), 0);
    assert_int_equal(sg_store_session_close(st, s2, 0, "deleted", err, sizeof(err)), 0);
    /* one kept template: one slot left */
    assert_int_equal(sg_store_template_reserve(st, a.id, 2, 600, &row3, err, sizeof(err)), 1);
    assert_int_equal(sg_store_template_reserve(st, a.id, 2, 600, &row2, err, sizeof(err)), 0);
    /* an unbound slot past its grace no longer counts */
    assert_int_equal(sg_store_template_reserve(st, a.id, 2, -10, &row2, err, sizeof(err)), 1);

    assert_int_equal(sg_store_template_get(st, "repo:11111111-1111-4111-8111-111111111111", &t, err, sizeof(err)), 1);
    assert_int_equal(t.tenant_id, a.id);
    assert_string_equal(t.session_id, s1);
    assert_int_equal(t.size_bytes, 1234);
    assert_true(t.created_at > 1000000000);
    assert_int_equal(sg_store_template_get(st, "repo:nothing", &t, err, sizeof(err)), 0);
    assert_int_equal(sg_store_template_list(st, a.id, count_template, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 1); /* named ones only */
    n = 0;
    assert_int_equal(sg_store_template_list(st, b.id, count_template, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 0);
    assert_int_equal(sg_store_template_delete(st, "repo:11111111-1111-4111-8111-111111111111", err, sizeof(err)), 1);
    assert_int_equal(sg_store_template_delete(st, "repo:11111111-1111-4111-8111-111111111111", err, sizeof(err)), 0);

    /* deleting a tenant: marked (disabled), listed, then purged with its rows */
    assert_int_equal(sg_store_tenant_mark_deleting(st, a.id, err, sizeof(err)), 1);
    assert_int_equal(sg_store_tenant_get(st, a.id, &a, err, sizeof(err)), 1);
    assert_int_equal(a.disabled, 1);
    n = 0;
    assert_int_equal(sg_store_tenant_list_deleting(st, count_deleting, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 1);
    assert_int_equal(sg_store_tenant_purge(st, a.id, err, sizeof(err)), 1);
    assert_int_equal(sg_store_tenant_get(st, a.id, &a, err, sizeof(err)), 0);
    assert_int_equal(sg_store_session_get(st, s1, &r, err, sizeof(err)), 0);
    assert_int_equal(sg_store_tenant_get(st, b.id, &b, err, sizeof(err)), 1);
    assert_int_equal(sg_store_tenant_purge(st, a.id, err, sizeof(err)), 0);
    sg_store_close(st);
}

static void test_reopen_keeps_data(void **state)
{
    char dir[256], err[256], tok[SG_TOKEN_MAX];
    sg_tenant_t t, got;
    sg_usage_total_t tot;
    sg_session_rec_t r;
    sg_store_t *st;

    data_dir(dir, sizeof(dir), "reopen");
    st = open_ok(dir);
    assert_int_equal(sg_store_tenant_create(st, "acme", &t, err, sizeof(err)), 0);
    t.max_sessions = 4;
    assert_int_equal(sg_store_tenant_update(st, &t, err, sizeof(err)), 0);
    assert_int_equal(sg_store_token_create(st, t.id, "x", tok, NULL, err, sizeof(err)), 0);
    sg_usage_t u = usage(t.id, "", 10, 2.5, 0, 7);
    assert_int_equal(sg_store_usage_add(st, &u, err, sizeof(err)), 0);
    r = session("0f8fad5b-d9cb-469f-a165-70867728950e", t.id, 10);
    assert_int_equal(sg_store_session_open(st, &r, err, sizeof(err)), 0);
    sg_store_close(st);

    /* a restart */
    st = open_ok(dir);
    assert_int_equal(sg_store_tenant_by_name(st, "acme", &got, err, sizeof(err)), 1);
    assert_int_equal(got.id, t.id);
    assert_int_equal(got.max_sessions, 4);
    assert_int_equal(sg_store_token_auth(st, tok, strlen(tok), &got, err, sizeof(err)), 1);
    assert_int_equal(sg_store_usage_total(st, t.id, 0, 100, &tot, err, sizeof(err)), 0);
    assert_int_equal(tot.executions, 1);
    assert_true(tot.seconds == 2.5);
    assert_int_equal(sg_store_session_get(st, r.id, &r, err, sizeof(err)), 1);
    assert_int_equal(r.closed_at, 0);
    /* new ids continue after the old ones */
    assert_int_equal(sg_store_tenant_create(st, "next", &got, err, sizeof(err)), 0);
    assert_true(got.id > t.id);
    sg_store_close(st);
}

static void test_two_connections(void **state)
{
    char dir[256], err[256], tok[SG_TOKEN_MAX];
    sg_tenant_t t, got;
    sg_usage_total_t tot;
    sg_store_t *a, *b;

    data_dir(dir, sizeof(dir), "two");
    a = open_ok(dir);
    b = open_ok(dir);

    assert_int_equal(sg_store_tenant_by_name(b, "acme", &got, err, sizeof(err)), 0);
    assert_int_equal(sg_store_tenant_create(a, "acme", &t, err, sizeof(err)), 0);
    assert_int_equal(sg_store_tenant_by_name(b, "acme", &got, err, sizeof(err)), 1);
    assert_int_equal(got.id, t.id);
    /* and the other way round */
    got.rate_per_min = 5;
    assert_int_equal(sg_store_tenant_update(b, &got, err, sizeof(err)), 0);
    assert_int_equal(sg_store_tenant_get(a, t.id, &t, err, sizeof(err)), 1);
    assert_int_equal(t.rate_per_min, 5);
    /* a duplicate name across connections is still refused */
    assert_int_equal(sg_store_tenant_create(b, "acme", NULL, err, sizeof(err)), -1);
    /* token on a, auth on b */
    assert_int_equal(sg_store_token_create(a, t.id, "", tok, NULL, err, sizeof(err)), 0);
    assert_int_equal(sg_store_token_auth(b, tok, strlen(tok), &got, err, sizeof(err)), 1);
    /* interleaved usage writes from both */
    for (int i = 0; i < 20; i++) {
        sg_usage_t u = usage(t.id, "", 100 + i, 1, 0, 1);
        assert_int_equal(sg_store_usage_add(i % 2 ? a : b, &u, err, sizeof(err)), 0);
    }
    assert_int_equal(sg_store_usage_total(a, t.id, 0, 1000, &tot, err, sizeof(err)), 0);
    assert_int_equal(tot.executions, 20);
    assert_int_equal(sg_store_usage_total(b, t.id, 0, 1000, &tot, err, sizeof(err)), 0);
    assert_int_equal(tot.executions, 20);
    sg_store_close(a);
    sg_store_close(b);
}

typedef struct {
    const char *dir;
    int index;
    int ok;
    char err[256];
} opener_t;

static void *opener(void *arg)
{
    opener_t *o = arg;
    sg_store_t *st = sg_store_open(o->dir, o->err, sizeof(o->err));
    char name[32];
    if (st == NULL)
        return NULL;
    snprintf(name, sizeof(name), "t%d", o->index);
    o->ok = sg_store_tenant_create(st, name, NULL, o->err, sizeof(o->err)) == 0;
    for (int i = 0; o->ok && i < 20; i++) {
        sg_tenant_t t;
        o->ok = sg_store_tenant_by_name(st, name, &t, o->err, sizeof(o->err)) == 1;
        if (o->ok) {
            sg_usage_t u = usage(t.id, "", i, 1, 0, 1);
            o->ok = sg_store_usage_add(st, &u, o->err, sizeof(o->err)) == 0;
        }
    }
    sg_store_close(st);
    return NULL;
}

static void count_tenant(const sg_tenant_t *t, void *data)
{
    (*(int *)data)++;
}

static void test_concurrent_first_open(void **state)
{
    enum { N = 6 };
    char dir[256], err[256];
    pthread_t th[N];
    opener_t o[N];
    int n = 0;

    /* N threads create the same new database at once: one creates the
     * schema, the others wait for it; all write */
    data_dir(dir, sizeof(dir), "race");
    for (int i = 0; i < N; i++) {
        memset(&o[i], 0, sizeof(o[i]));
        o[i].dir = dir;
        o[i].index = i;
        assert_int_equal(pthread_create(&th[i], NULL, opener, &o[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        if (!o[i].ok)
            fail_msg("thread %d: %s", i, o[i].err);
    }
    sg_store_t *st = open_ok(dir);
    assert_int_equal(sg_store_tenant_list(st, count_tenant, &n, err, sizeof(err)), 0);
    assert_int_equal(n, N);
    sg_store_close(st);
}

/* ---- sandgate-admin end to end ---- */

static int find_admin_bin(char *out, size_t len)
{
    const char *env = getenv("SANDGATE_ADMIN_BIN");
    char self[1024];
    ssize_t n;

    if (env != NULL && env[0] != '\0') {
        snprintf(out, len, "%s", env);
        return access(out, X_OK) == 0;
    }
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return 0;
    self[n] = '\0';
    snprintf(out, len, "%s/../gateway/sandgate-admin", dirname(self));
    return access(out, X_OK) == 0;
}

/* The file `name` of root, whole, into buf (NUL-terminated). */
static void read_output(const char *name, char *buf, size_t len)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", root, name);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    size_t n = fread(buf, 1, len - 1, fp);
    buf[n] = '\0';
    fclose(fp);
}

/* Runs sandgate-admin with args (a shell word list of safe words); stdout and
 * stderr into the given buffers. Returns the exit status. */
static int run_admin(const char *bin, const char *dir, const char *args, char *out, size_t outlen, char *errout,
                     size_t errlen)
{
    char cmd[2048];
    int status;

    snprintf(cmd, sizeof(cmd), "SANDGATE_DATA_DIR='%s' '%s' %s >'%s/cli.out' 2>'%s/cli.err'", dir, bin, args, root,
             root);
    status = system(cmd);
    assert_true(WIFEXITED(status));
    read_output("cli.out", out, outlen);
    read_output("cli.err", errout, errlen);
    return WEXITSTATUS(status);
}

/* sandgate-admin and the data directory test_admin_cli runs it on; what
 * it printed last. */
static char admin_bin[1100], admin_dir[256], admin_out[4096], admin_err[4096];

/* Runs sandgate-admin with args: its exit status is rc, and (when not NULL)
 * its stdout holds out_has, its stderr err_has. */
static void expect_admin(const char *args, int rc, const char *out_has, const char *err_has)
{
    assert_int_equal(run_admin(admin_bin, admin_dir, args, admin_out, sizeof(admin_out), admin_err, sizeof(admin_err)),
                     rc);
    if (out_has != NULL)
        assert_non_null(strstr(admin_out, out_has));
    if (err_has != NULL)
        assert_non_null(strstr(admin_err, err_has));
}

static void test_admin_cli(void **state)
{
    char args[512], err[256], tok[SG_TOKEN_MAX];
    sg_tenant_t t;
    sg_store_t *st;

    if (!find_admin_bin(admin_bin, sizeof(admin_bin)))
        fail_msg("sandgate-admin not found: set SANDGATE_ADMIN_BIN (ctest does)");
    data_dir(admin_dir, sizeof(admin_dir), "cli");

    expect_admin("tenant create acme", 0, NULL, NULL);
    assert_string_equal(admin_out, "id=1 name=acme\n");
    expect_admin("tenant create acme", 1, NULL, NULL);
    assert_string_equal(admin_out, "");
    assert_non_null(strstr(admin_err, "already exists"));
    expect_admin("--json tenant create beta", 0, "\"name\":\"beta\"", NULL);
    assert_non_null(strstr(admin_out, "\"max_sessions\":10"));

    /* tenant set: good, bad value, unknown key, not KEY=VALUE */
    expect_admin("tenant set acme max_sessions=3 allowed_langs=python,go", 0, "max_sessions=3", NULL);
    expect_admin("tenant set acme max_cpus=lots", 1, NULL, "max_cpus");
    expect_admin("tenant set acme colour=blue", 1, NULL, "colour");
    expect_admin("tenant set acme burst", 2, NULL, "usage:");

    /* tenant list: one line each */
    expect_admin("tenant list", 0, "id=1 name=acme ", NULL);
    assert_non_null(strstr(admin_out, "max_sessions=3"));
    assert_non_null(strstr(admin_out, "\nid=2 name=beta "));
    int lines = 0;
    for (const char *p = admin_out; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, 2);

    /* token create: the token alone on stdout; it authenticates */
    expect_admin("token create acme --label ci", 0, NULL, NULL);
    assert_int_equal(strlen(admin_out), SG_TOKEN_LEN + 1);
    assert_int_equal(admin_out[SG_TOKEN_LEN], '\n');
    memcpy(tok, admin_out, SG_TOKEN_LEN);
    tok[SG_TOKEN_LEN] = '\0';
    assert_int_equal(sg_token_parse(tok, SG_TOKEN_LEN, NULL), 0);
    st = open_ok(admin_dir);
    assert_int_equal(sg_store_token_auth(st, tok, SG_TOKEN_LEN, &t, err, sizeof(err)), 1);
    assert_string_equal(t.name, "acme");
    assert_int_equal(t.max_sessions, 3);

    /* token list: public id and label, never the secret */
    expect_admin("token list acme", 0, NULL, NULL);
    char pub[9];
    memcpy(pub, tok + 4, 8);
    pub[8] = '\0';
    assert_non_null(strstr(admin_out, pub));
    assert_non_null(strstr(admin_out, "label=\"ci\""));
    assert_non_null(strstr(admin_out, "revoked=-"));
    assert_null(strstr(admin_out, tok + 13));

    /* revoke by public id: the open connection sees it at once */
    snprintf(args, sizeof(args), "token revoke %s", pub);
    expect_admin(args, 0, NULL, NULL);
    assert_int_equal(sg_store_token_auth(st, tok, SG_TOKEN_LEN, &t, err, sizeof(err)), 0);
    expect_admin("token revoke zzzzzzzz", 1, NULL, NULL);
    expect_admin("token revoke not-a-token", 1, NULL, NULL);

    /* usage totals */
    sg_usage_t u = usage(1, "", 100, 2.5, 1, 10);
    assert_int_equal(sg_store_usage_add(st, &u, err, sizeof(err)), 0);
    u = usage(1, "", 300, 1.0, 0, 5);
    assert_int_equal(sg_store_usage_add(st, &u, err, sizeof(err)), 0);
    sg_store_close(st);
    expect_admin("usage acme", 0, "executions=2 seconds=3.500 output_bytes=15 timed_out=1", NULL);
    expect_admin("usage acme --since 200 --until 400", 0, "executions=1 seconds=1.000 output_bytes=5 timed_out=0",
                 NULL);
    expect_admin("--json usage acme --since=0", 0, "\"executions\":2", NULL);

    /* errors and bad usage */
    expect_admin("token create nobody", 1, NULL, "nobody");
    expect_admin("", 2, NULL, NULL);
    expect_admin("tenant", 2, NULL, NULL);
    expect_admin("tenant create", 2, NULL, NULL);
    expect_admin("tenant create a b", 2, NULL, NULL);
    expect_admin("token create acme --label", 2, NULL, NULL);
    expect_admin("tenant list --frob", 2, NULL, NULL);
    expect_admin("tenant list --label x", 2, NULL, NULL);

    /* --data-dir beats the environment */
    char other[300];
    data_dir(other, sizeof(other), "cli-other");
    snprintf(args, sizeof(args), "--data-dir '%s' tenant create gamma", other);
    expect_admin(args, 0, NULL, NULL);
    assert_string_equal(admin_out, "id=1 name=gamma\n");
}

int main(void)
{
    return SG_RUN_TESTS("store_sessions", group_setup, group_teardown, NULL, NULL, test_sessions, test_templates,
                        test_reopen_keeps_data, test_two_connections, test_concurrent_first_open, test_admin_cli);
}
