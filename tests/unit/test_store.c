/*
 * test_store.c — the gateway's SQLite store (gateway/store/) on real
 * database files in a temporary directory: WAL and pragmas, tenants and
 * their quota fields, token create / auth / revoke, the usage ledger.
 * Session history, restart, two connections, concurrent first opens and
 * sandgate-admin: test_store_sessions.c.
 */
#include "store_fixture.h"
#include "sgrun.h"

static void pragma_text(sg_store_t *st, const char *sql, char *out, size_t len)
{
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(sg_store_db(st), sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    snprintf(out, len, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
}

/* ---- open ---- */

/* sg_store_open(dir) fails, and its error says so with `says`. */
static void expect_open_refused(const char *dir, const char *says)
{
    char err[256] = "";
    assert_null(sg_store_open(dir, err, sizeof(err)));
    assert_non_null(strstr(err, says));
}

static void test_open_creates_wal_db(void **state)
{
    char dir[256], path[300], v[128];
    struct stat sb;
    sg_store_t *st;

    data_dir(dir, sizeof(dir), "open/nested/data"); /* mkdir -p */
    st = open_ok(dir);
    snprintf(path, sizeof(path), "%s/sandgate.db", dir);
    assert_string_equal(sg_store_path(st), path);

    pragma_text(st, "PRAGMA journal_mode", v, sizeof(v));
    assert_string_equal(v, "wal");
    pragma_text(st, "PRAGMA synchronous", v, sizeof(v));
    assert_string_equal(v, "1"); /* NORMAL */
    pragma_text(st, "PRAGMA foreign_keys", v, sizeof(v));
    assert_string_equal(v, "1");
    pragma_text(st, "PRAGMA busy_timeout", v, sizeof(v));
    assert_string_equal(v, "5000");
    pragma_text(st, "PRAGMA user_version", v, sizeof(v));
    assert_string_equal(v, "6");
    pragma_text(st,
                "SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' ORDER BY name)",
                v, sizeof(v));
    assert_string_equal(v, "generations,sessions,templates,tenants,tokens,usage,usage_journal");

    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(stat(dir, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    data_dir(path, sizeof(path), "open/nested");
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    sg_store_close(st);

    /* the file's mode survives the reopen; the WAL mode is persistent */
    st = open_ok(dir);
    pragma_text(st, "PRAGMA journal_mode", v, sizeof(v));
    assert_string_equal(v, "wal");
    sg_store_close(st);
    sg_store_close(NULL);
}

static void test_open_errors(void **state)
{
    char dir[256], path[300], err[256];
    FILE *fp;
    sg_store_t *st;

    assert_null(sg_store_open("", err, sizeof(err)));
    assert_null(sg_store_open(NULL, err, sizeof(err)));

    /* the data directory is a file */
    data_dir(dir, sizeof(dir), "open-file");
    fp = fopen(dir, "w");
    assert_non_null(fp);
    fclose(fp);
    expect_open_refused(dir, "open-file");

    /* a database from a newer sandgate: refused, not downgraded */
    data_dir(dir, sizeof(dir), "open-newer");
    st = open_ok(dir);
    assert_int_equal(sqlite3_exec(sg_store_db(st), "PRAGMA user_version = 7", NULL, NULL, NULL), SQLITE_OK);
    sg_store_close(st);
    expect_open_refused(dir, "newer");

    /* a database of schema 1 (before max_concurrent_execs, templates and
     * their quota) is migrated: its tenants get the defaults of 8 and 5 */
    data_dir(dir, sizeof(dir), "open-v1");
    st = open_ok(dir);
    assert_int_equal(sg_store_tenant_create(st, "old", NULL, err, sizeof(err)), 0);
    assert_int_equal(sqlite3_exec(sg_store_db(st),
                                  "DROP TABLE templates; ALTER TABLE tenants DROP COLUMN max_concurrent_execs; "
                                  "ALTER TABLE tenants DROP COLUMN max_templates; "
                                  "ALTER TABLE tenants DROP COLUMN deleting; ALTER TABLE tenants DROP COLUMN runtime; "
                                  "ALTER TABLE sessions DROP COLUMN runtime; ALTER TABLE sessions DROP COLUMN proxy; "
                                  "DROP TABLE usage_journal; PRAGMA user_version = 1",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sg_store_close(st);
    st = open_ok(dir);
    {
        sg_tenant_t old;
        assert_int_equal(sg_store_tenant_by_name(st, "old", &old, err, sizeof(err)), 1);
        assert_int_equal(old.max_concurrent_execs, 8);
        assert_int_equal(old.max_templates, 5);
        assert_string_equal(old.runtime, ""); /* migrated to 3: the proxy's default */
    }
    sg_store_close(st);

    /* a file that is not a database */
    data_dir(dir, sizeof(dir), "open-garbage");
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof(path), "%s/sandgate.db", dir);
    fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("this is not an SQLite database, it is a plain text file of some length ...........\n", fp);
    fclose(fp);
    err[0] = '\0';
    assert_null(sg_store_open(dir, err, sizeof(err)));
    assert_true(err[0] != '\0');
}

/* ---- tenants ---- */

static void assert_defaults(const sg_tenant_t *t)
{
    assert_int_equal(t->disabled, 0);
    assert_int_equal(t->rate_per_min, 600);
    assert_int_equal(t->burst, 60);
    assert_int_equal(t->max_sessions, 10);
    assert_int_equal(t->max_concurrent_execs, 8);
    assert_int_equal(t->execs_per_day, 10000);
    assert_true(t->exec_seconds_per_day == 36000);
    assert_true(t->max_timeout == 300);
    assert_int_equal(t->max_memory_mb, 1024);
    assert_true(t->max_cpus == 2);
    assert_string_equal(t->allowed_langs, "*");
    assert_int_equal(t->network_allowed, 0);
    assert_int_equal(t->idle_timeout, 900);
    assert_int_equal(t->max_lifetime, 14400);
    assert_int_equal(t->max_templates, 5);
}

static void collect_tenant(const sg_tenant_t *t, void *data)
{
    char *names = data;
    size_t n = strlen(names);
    snprintf(names + n, 256 - n, "%s%lld:%s", n ? "," : "", (long long)t->id, t->name);
}

static void test_tenants(void **state)
{
    char dir[256], err[256], names[256] = "";
    sg_tenant_t a, b, got;
    int64_t before = sg_wall_s();
    sg_store_t *st;

    data_dir(dir, sizeof(dir), "tenants");
    st = open_ok(dir);

    assert_int_equal(sg_store_tenant_create(st, "acme", &a, err, sizeof(err)), 0);
    assert_true(a.id > 0);
    assert_string_equal(a.name, "acme");
    assert_true(a.created_at >= before && a.created_at <= sg_wall_s());
    assert_defaults(&a);
    assert_int_equal(sg_store_tenant_create(st, "Beta.team_2-x", &b, err, sizeof(err)), 0);
    assert_true(b.id > a.id);
    assert_int_equal(sg_store_tenant_create(st, "c", NULL, err, sizeof(err)), 0);

    /* duplicate name */
    err[0] = '\0';
    assert_int_equal(sg_store_tenant_create(st, "acme", &got, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "already exists"));
    /* bad names */
    char long_name[80];
    memset(long_name, 'n', 65);
    long_name[65] = '\0';
    const char *bad[] = {"", "a b", "a/b", "é", "a\nb", "a;drop", long_name};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(sg_store_tenant_create(st, bad[i], NULL, err, sizeof(err)), -1);
        assert_true(err[0] != '\0');
    }
    long_name[64] = '\0'; /* exactly 64 is fine */
    assert_int_equal(sg_store_tenant_create(st, long_name, &got, err, sizeof(err)), 0);
    assert_string_equal(got.name, long_name);

    /* get / by_name */
    assert_int_equal(sg_store_tenant_get(st, a.id, &got, err, sizeof(err)), 1);
    assert_string_equal(got.name, "acme");
    assert_int_equal(got.created_at, a.created_at);
    assert_defaults(&got);
    assert_int_equal(sg_store_tenant_get(st, 9999, &got, err, sizeof(err)), 0);
    assert_int_equal(sg_store_tenant_by_name(st, "Beta.team_2-x", &got, err, sizeof(err)), 1);
    assert_int_equal(got.id, b.id);
    assert_int_equal(sg_store_tenant_by_name(st, "ACME", &got, err, sizeof(err)), 0); /* case matters */
    assert_int_equal(sg_store_tenant_by_name(st, "nobody", NULL, err, sizeof(err)), 0);
    assert_int_equal(sg_store_tenant_by_name(st, "acme", NULL, err, sizeof(err)), 1);

    /* update writes every field */
    got = a;
    got.disabled = 1;
    got.rate_per_min = 120;
    got.burst = 5;
    got.max_sessions = 0;
    got.execs_per_day = 7;
    got.exec_seconds_per_day = 12.5;
    got.max_timeout = 30.25;
    got.max_memory_mb = 256;
    got.max_cpus = 0.5;
    strcpy(got.allowed_langs, "python,javascript");
    got.network_allowed = 1;
    got.idle_timeout = 60;
    got.max_lifetime = 600;
    strcpy(got.name, "ignored"); /* the name is not an update field */
    assert_int_equal(sg_store_tenant_update(st, &got, err, sizeof(err)), 0);
    assert_int_equal(sg_store_tenant_get(st, a.id, &a, err, sizeof(err)), 1);
    assert_string_equal(a.name, "acme");
    assert_int_equal(a.disabled, 1);
    assert_int_equal(a.rate_per_min, 120);
    assert_int_equal(a.burst, 5);
    assert_int_equal(a.max_sessions, 0);
    assert_int_equal(a.execs_per_day, 7);
    assert_true(a.exec_seconds_per_day == 12.5);
    assert_true(a.max_timeout == 30.25);
    assert_int_equal(a.max_memory_mb, 256);
    assert_true(a.max_cpus == 0.5);
    assert_string_equal(a.allowed_langs, "python,javascript");
    assert_int_equal(a.network_allowed, 1);
    assert_int_equal(a.idle_timeout, 60);
    assert_int_equal(a.max_lifetime, 600);
    /* b untouched */
    assert_int_equal(sg_store_tenant_get(st, b.id, &got, err, sizeof(err)), 1);
    assert_defaults(&got);

    /* update validates, and names the field */
    got = a;
    got.max_cpus = 0;
    err[0] = '\0';
    assert_int_equal(sg_store_tenant_update(st, &got, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "max_cpus"));
    got = a;
    strcpy(got.allowed_langs, "python, go");
    assert_int_equal(sg_store_tenant_update(st, &got, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "allowed_langs"));
    /* unknown id */
    got = a;
    got.id = 4242;
    err[0] = '\0';
    assert_int_equal(sg_store_tenant_update(st, &got, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "4242"));

    /* list in id order */
    assert_int_equal(sg_store_tenant_list(st, collect_tenant, names, err, sizeof(err)), 0);
    char want[256];
    snprintf(want, sizeof(want), "%lld:acme,%lld:Beta.team_2-x,%lld:c,%lld:%s", (long long)a.id, (long long)b.id,
             (long long)b.id + 1, (long long)b.id + 2, long_name);
    assert_string_equal(names, want);
    sg_store_close(st);
}

static void test_tenant_fields(void **state)
{
    sg_tenant_t t;
    char err[512], buf[1024];

    sg_tenant_defaults(&t);
    assert_defaults(&t);
    assert_int_equal(sg_tenant_validate(&t, err, sizeof(err)), 0);

    /* set_field: types and ranges, with the key in every error */
    static const struct {
        const char *key, *value;
        int ok;
    } cases[] = {
        {"rate_per_min", "1", 1},
        {"rate_per_min", "0", 0},
        {"rate_per_min", "1000000001", 0},
        {"rate_per_min", "12x", 0},
        {"rate_per_min", "", 0},
        {"rate_per_min", " 5", 0},
        {"rate_per_min", "1.5", 0},
        {"burst", "1000000000", 1},
        {"max_sessions", "0", 1},
        {"max_sessions", "-1", 0},
        {"execs_per_day", "99999999999999999999", 0},
        {"execs_per_day", "1000000000000", 1},
        {"max_sessions", "1000001", 0},
        {"max_concurrent_execs", "0", 1},
        {"max_concurrent_execs", "3", 1},
        {"max_concurrent_execs", "-1", 0},
        {"max_concurrent_execs", "1000001", 0},
        {"exec_seconds_per_day", "0.5", 1},
        {"exec_seconds_per_day", "nan", 0},
        {"exec_seconds_per_day", "inf", 0},
        {"max_timeout", "0.1", 1},
        {"max_timeout", "0", 0},
        {"max_timeout", "86401", 0},
        {"max_memory_mb", "15", 0},
        {"max_memory_mb", "16", 1},
        {"max_cpus", "0.01", 1},
        {"max_cpus", "abc", 0},
        {"max_cpus", "1025", 0},
        {"allowed_langs", "*", 1},
        {"allowed_langs", "python,go,c++", 1},
        {"allowed_langs", "", 0},
        {"allowed_langs", "python,", 0},
        {"allowed_langs", ",go", 0},
        {"allowed_langs", "py thon", 0},
        {"allowed_langs", "Python", 0},
        {"allowed_langs", "*,python", 0},
        {"network_allowed", "true", 1},
        {"network_allowed", "2", 0},
        {"network_allowed", "yes", 1},
        {"idle_timeout", "0", 0},
        {"idle_timeout", "1000000000", 1},
        {"max_lifetime", "1000000001", 0},
        {"disabled", "1", 1},
        {"disabled", "off", 1},
        {"disabled", "maybe", 0},
        {"name", "x", 0},
        {"id", "3", 0},
        {"bogus", "1", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sg_tenant_t c = t;
        err[0] = '\0';
        int rc = sg_tenant_set_field(&c, cases[i].key, cases[i].value, err, sizeof(err));
        if (rc != (cases[i].ok ? 0 : -1))
            fail_msg("%s=%s: rc %d (%s)", cases[i].key, cases[i].value, rc, err);
        if (!cases[i].ok) {
            if (strstr(err, cases[i].key) == NULL)
                fail_msg("%s=%s: error does not name the key: %s", cases[i].key, cases[i].value, err);
            assert_memory_equal(&c, &t, sizeof(t)); /* untouched */
        } else {
            assert_int_equal(sg_tenant_validate(&c, err, sizeof(err)), 0);
        }
    }
    assert_int_equal(sg_tenant_set_field(&t, "max_cpus", "1.5", err, sizeof(err)), 0);
    assert_true(t.max_cpus == 1.5);
    assert_int_equal(sg_tenant_set_field(&t, "execs_per_day", "42", err, sizeof(err)), 0);
    assert_int_equal(t.execs_per_day, 42);
    assert_int_equal(sg_tenant_set_field(&t, "network_allowed", "TRUE", err, sizeof(err)), 0);
    assert_int_equal(t.network_allowed, 1);
    assert_int_equal(sg_tenant_set_field(&t, "allowed_langs", "python,go", err, sizeof(err)), 0);
    assert_string_equal(t.allowed_langs, "python,go");

    /* a 255-char list fits, 256 does not */
    char langs[300];
    memset(langs, 'a', sizeof(langs));
    for (int i = 31; i < 255; i += 32)
        langs[i] = ',';
    langs[255] = '\0';
    assert_int_equal(sg_tenant_set_field(&t, "allowed_langs", langs, err, sizeof(err)), 0);
    langs[255] = 'a';
    langs[256] = '\0';
    assert_int_equal(sg_tenant_set_field(&t, "allowed_langs", langs, err, sizeof(err)), -1);
    assert_int_equal(sg_tenant_set_field(&t, "allowed_langs", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", err, sizeof(err)),
                     -1); /* a name of 33 */

    /* lang_allowed */
    assert_int_equal(sg_tenant_set_field(&t, "allowed_langs", "python,go,c++", err, sizeof(err)), 0);
    assert_true(sg_tenant_lang_allowed(&t, "python", 6));
    assert_true(sg_tenant_lang_allowed(&t, "go", 2));
    assert_true(sg_tenant_lang_allowed(&t, "c++", 3));
    assert_false(sg_tenant_lang_allowed(&t, "pyth", 4));
    assert_false(sg_tenant_lang_allowed(&t, "g", 1));
    assert_false(sg_tenant_lang_allowed(&t, "python,go", 9));
    assert_false(sg_tenant_lang_allowed(&t, "", 0));
    assert_false(sg_tenant_lang_allowed(&t, "java", 4));
    assert_true(sg_tenant_lang_allowed(&t, "gopher", 2)); /* len decides */
    strcpy(t.allowed_langs, "*");
    assert_true(sg_tenant_lang_allowed(&t, "anything", 8));

    /* validate catches what a caller wrote directly */
    sg_tenant_defaults(&t);
    t.burst = 0;
    assert_int_equal(sg_tenant_validate(&t, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "burst"));
    sg_tenant_defaults(&t);
    t.network_allowed = 2;
    assert_int_equal(sg_tenant_validate(&t, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "network_allowed"));
    sg_tenant_defaults(&t);
    t.max_timeout = 1.0 / 0.0;
    assert_int_equal(sg_tenant_validate(&t, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "max_timeout"));

    /* format: every field, key=value, doubles without trailing zeros */
    sg_tenant_defaults(&t);
    t.max_cpus = 0.25;
    int n = sg_tenant_format(&t, buf, sizeof(buf));
    assert_int_equal(n, (int)strlen(buf));
    assert_string_equal(
        buf, "disabled=0 rate_per_min=600 burst=60 max_sessions=10 max_concurrent_execs=8 execs_per_day=10000 "
             "exec_seconds_per_day=36000 max_timeout=300 max_memory_mb=1024 max_cpus=0.25 "
             "allowed_langs=* network_allowed=0 idle_timeout=900 max_lifetime=14400 max_templates=5 runtime=default");
    /* a short buffer is cut and NUL-terminated; the return says how much was needed */
    char small[20];
    assert_int_equal(sg_tenant_format(&t, small, sizeof(small)), n);
    assert_int_equal(strlen(small), sizeof(small) - 1);
    assert_memory_equal(small, buf, sizeof(small) - 1);

    /* json */
    t.id = 3;
    strcpy(t.name, "acme");
    t.created_at = 1700000000;
    t.network_allowed = 1;
    json_object *o = sg_tenant_to_json(&t);
    assert_string_equal(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
                        "{\"id\":3,\"name\":\"acme\",\"created_at\":1700000000,\"disabled\":false,\"rate_per_min\":600,"
                        "\"burst\":60,\"max_sessions\":10,\"max_concurrent_execs\":8,\"execs_per_day\":10000,\"exec_"
                        "seconds_per_day\":36000,"
                        "\"max_timeout\":300,\"max_memory_mb\":1024,\"max_cpus\":0.25,\"allowed_langs\":\"*\","
                        "\"network_allowed\":true,\"idle_timeout\":900,\"max_lifetime\":14400,\"max_templates\":5,"
                        "\"runtime\":null}");
    json_object_put(o);

    assert_true(sg_tenant_name_valid("a"));
    assert_false(sg_tenant_name_valid(""));
    assert_false(sg_tenant_name_valid(NULL));
}

/* The tenant's runtime (README "Runtimes"): runc, runsc or none (the
 * proxy's default: "" in C, null in JSON, NULL in SQL), validated on every
 * path that sets it, and kept through the store; a session's runtime too. */
static void test_tenant_runtime(void **state)
{
    char dir[256], err[512], buf[1024];
    sg_tenant_t t, got;
    sg_store_t *st;

    sg_tenant_defaults(&t);
    assert_string_equal(t.runtime, "");
    static const struct {
        const char *value, *want; /* want NULL: refused */
    } cases[] = {
        {"runsc", "runsc"},
        {"runc", "runc"},
        {"default", ""},
        {"null", ""},
        {"", ""},
        {"kata", NULL},
        {"RUNSC", NULL},
        {"runsc ", NULL},
        {"runc,runsc", NULL},
        {"runscx", NULL},
        {"io.containerd.runc.v2", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sg_tenant_defaults(&t);
        strcpy(t.runtime, "runc");
        err[0] = '\0';
        int rc = sg_tenant_set_field(&t, "runtime", cases[i].value, err, sizeof(err));
        if (cases[i].want != NULL) {
            assert_int_equal(rc, 0);
            assert_string_equal(t.runtime, cases[i].want);
        } else {
            assert_int_equal(rc, -1);
            assert_non_null(strstr(err, "runtime"));
            assert_string_equal(t.runtime, "runc"); /* unchanged */
        }
    }
    /* JSON as the admin API takes it: a string, null, nothing else */
    static const struct {
        const char *json, *want;
    } jcases[] = {
        {"{\"runtime\":\"runsc\"}", "runsc"}, {"{\"runtime\":null}", ""},        {"{\"runtime\":\"runc\"}", "runc"},
        {"{\"runtime\":\"gvisor\"}", NULL},   {"{\"runtime\":1}", NULL},         {"{\"runtime\":true}", NULL},
        {"{\"runtime\":[\"runsc\"]}", NULL},  {"{\"max_sessions\":null}", NULL},
    };
    for (size_t i = 0; i < sizeof(jcases) / sizeof(jcases[0]); i++) {
        json_object *o = json_tokener_parse(jcases[i].json);
        assert_non_null(o);
        sg_tenant_defaults(&t);
        strcpy(t.runtime, "runc");
        int rc = sg_tenant_set_json(&t, o, err, sizeof(err));
        json_object_put(o);
        if (jcases[i].want != NULL) {
            assert_int_equal(rc, 0);
            assert_string_equal(t.runtime, jcases[i].want);
        } else {
            assert_int_equal(rc, -1);
        }
    }
    /* a value that got past the setters is caught by validate */
    sg_tenant_defaults(&t);
    memcpy(t.runtime, "kata\0\0\0", 8);
    assert_int_equal(sg_tenant_validate(&t, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "runtime"));
    memset(t.runtime, 'x', sizeof(t.runtime)); /* unterminated */
    assert_int_equal(sg_tenant_validate(&t, err, sizeof(err)), -1);

    /* text and JSON forms */
    sg_tenant_defaults(&t);
    strcpy(t.runtime, "runsc");
    sg_tenant_format(&t, buf, sizeof(buf));
    assert_non_null(strstr(buf, " runtime=runsc"));
    json_object *o = sg_tenant_to_json(&t), *v;
    assert_true(json_object_object_get_ex(o, "runtime", &v));
    assert_string_equal(json_object_get_string(v), "runsc");
    json_object_put(o);

    /* the store: pinned, then back to the default (SQL NULL) */
    data_dir(dir, sizeof(dir), "runtime");
    st = open_ok(dir);
    assert_int_equal(sg_store_tenant_create(st, "pinned", &t, err, sizeof(err)), 0);
    assert_string_equal(t.runtime, "");
    strcpy(t.runtime, "runsc");
    assert_int_equal(sg_store_tenant_update(st, &t, err, sizeof(err)), 0);
    assert_int_equal(sg_store_tenant_by_name(st, "pinned", &got, err, sizeof(err)), 1);
    assert_string_equal(got.runtime, "runsc");
    got.runtime[0] = '\0';
    assert_int_equal(sg_store_tenant_update(st, &got, err, sizeof(err)), 0);
    assert_int_equal(sg_store_tenant_by_name(st, "pinned", &got, err, sizeof(err)), 1);
    assert_string_equal(got.runtime, "");
    {
        sqlite3_stmt *q;
        assert_int_equal(sqlite3_prepare_v2(sg_store_db(st),
                                            "SELECT runtime IS NULL FROM tenants WHERE name = 'pinned'", -1, &q, NULL),
                         SQLITE_OK);
        assert_int_equal(sqlite3_step(q), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int(q, 0), 1);
        sqlite3_finalize(q);
    }
    /* an invalid one is refused by the store too */
    strcpy(got.runtime, "kata");
    assert_int_equal(sg_store_tenant_update(st, &got, err, sizeof(err)), -1);

    /* a session keeps the runtime it was opened with; "" is unknown */
    sg_session_rec_t rec = {0}, out;
    strcpy(rec.id, "11111111-2222-3333-4444-555555555555");
    rec.tenant_id = t.id;
    strcpy(rec.lang, "python");
    strcpy(rec.runtime, "runsc");
    assert_int_equal(sg_store_session_open(st, &rec, err, sizeof(err)), 0);
    strcpy(rec.id, "11111111-2222-3333-4444-666666666666");
    rec.runtime[0] = '\0';
    assert_int_equal(sg_store_session_open(st, &rec, err, sizeof(err)), 0);
    assert_int_equal(sg_store_session_get(st, "11111111-2222-3333-4444-555555555555", &out, err, sizeof(err)), 1);
    assert_string_equal(out.runtime, "runsc");
    assert_int_equal(sg_store_session_get(st, "11111111-2222-3333-4444-666666666666", &out, err, sizeof(err)), 1);
    assert_string_equal(out.runtime, "");
    sg_store_close(st);
}

/* ---- tokens ---- */

STORE_LIST(token, sg_token_t, 8)

static void test_tokens(void **state)
{
    char dir[256], err[256], tok[SG_TOKEN_MAX], tok2[SG_TOKEN_MAX], tok3[SG_TOKEN_MAX], bad[SG_TOKEN_MAX];
    sg_tenant_t acme, beta, got;
    sg_token_t info, info2;
    token_list_t list = {0};
    sg_store_t *st;

    data_dir(dir, sizeof(dir), "tokens");
    st = open_ok(dir);
    assert_int_equal(sg_store_tenant_create(st, "acme", &acme, err, sizeof(err)), 0);
    assert_int_equal(sg_store_tenant_create(st, "beta", &beta, err, sizeof(err)), 0);

    assert_int_equal(sg_store_token_create(st, acme.id, "ci runner", tok, &info, err, sizeof(err)), 0);
    assert_int_equal(strlen(tok), SG_TOKEN_LEN);
    assert_int_equal(sg_token_parse(tok, strlen(tok), NULL), 0);
    assert_memory_equal(info.public_id, tok + 4, 8);
    assert_int_equal(info.public_id[8], '\0');
    assert_int_equal(info.tenant_id, acme.id);
    assert_string_equal(info.label, "ci runner");
    assert_int_equal(info.revoked_at, 0);
    assert_true(info.created_at > 0);
    assert_int_equal(sg_store_token_create(st, acme.id, NULL, tok2, &info2, err, sizeof(err)), 0);
    assert_string_equal(info2.label, "");
    assert_string_not_equal(tok, tok2);
    assert_int_equal(sg_store_token_create(st, beta.id, "b", tok3, NULL, err, sizeof(err)), 0);

    /* the right token finds its tenant */
    memset(&got, 0, sizeof(got));
    assert_int_equal(sg_store_token_auth(st, tok, strlen(tok), &got, err, sizeof(err)), 1);
    assert_int_equal(got.id, acme.id);
    assert_string_equal(got.name, "acme");
    assert_defaults(&got);
    assert_int_equal(sg_store_token_auth(st, tok2, strlen(tok2), &got, err, sizeof(err)), 1);
    assert_int_equal(got.id, acme.id);
    assert_int_equal(sg_store_token_auth(st, tok3, strlen(tok3), &got, err, sizeof(err)), 1);
    assert_int_equal(got.id, beta.id);
    assert_int_equal(sg_store_token_auth(st, tok, strlen(tok), NULL, err, sizeof(err)), 1);

    /* the right public id with a wrong secret: 0 */
    memcpy(bad, tok, sizeof(bad));
    bad[SG_TOKEN_LEN - 2] = bad[SG_TOKEN_LEN - 2] == 'A' ? 'B' : 'A';
    assert_int_equal(sg_store_token_auth(st, bad, strlen(bad), &got, err, sizeof(err)), 0);
    /* another token's secret under this public id: 0 */
    memcpy(bad, tok, 13);
    memcpy(bad + 13, tok2 + 13, SG_TOKEN_SECRET_LEN + 1);
    assert_int_equal(sg_store_token_auth(st, bad, strlen(bad), &got, err, sizeof(err)), 0);
    /* malformed or unknown: 0 */
    assert_int_equal(sg_store_token_auth(st, "", 0, &got, err, sizeof(err)), 0);
    assert_int_equal(sg_store_token_auth(st, "Bearer x", 8, &got, err, sizeof(err)), 0);
    assert_int_equal(sg_store_token_auth(st, tok, strlen(tok) - 1, &got, err, sizeof(err)), 0);
    assert_int_equal(sg_store_token_auth(st, info.public_id, 8, &got, err, sizeof(err)), 0);
    assert_int_equal(
        sg_store_token_auth(st, "sgk_zzzzzzzz_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 56, &got, err, sizeof(err)),
        0);

    /* the database holds neither the token nor its secret */
    {
        sqlite3_stmt *s;
        assert_int_equal(sqlite3_prepare_v2(sg_store_db(st),
                                            "SELECT count(*) FROM tokens WHERE instr(CAST(hash AS TEXT), ?1)"
                                            " OR instr(label, ?1) OR instr(public_id, ?1)",
                                            -1, &s, NULL),
                         SQLITE_OK);
        sqlite3_bind_text(s, 1, tok + 13, -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(s), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int(s, 0), 0);
        sqlite3_finalize(s);
        unsigned char h[32];
        assert_int_equal(
            sqlite3_prepare_v2(sg_store_db(st), "SELECT hash FROM tokens WHERE public_id = ?1", -1, &s, NULL),
            SQLITE_OK);
        sqlite3_bind_text(s, 1, info.public_id, -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(s), SQLITE_ROW);
        assert_int_equal(sqlite3_column_bytes(s, 0), 32);
        assert_int_equal(sg_token_hash(tok, strlen(tok), h), 0);
        assert_memory_equal(sqlite3_column_blob(s, 0), h, 32);
        sqlite3_finalize(s);
    }

    /* list: public ids and labels, in creation order */
    assert_int_equal(sg_store_token_list(st, acme.id, collect_token, &list, err, sizeof(err)), 0);
    assert_int_equal(list.n, 2);
    assert_string_equal(list.item[0].public_id, info.public_id);
    assert_string_equal(list.item[0].label, "ci runner");
    assert_string_equal(list.item[1].public_id, info2.public_id);
    assert_int_equal(list.item[0].revoked_at, 0);

    /* bad label, unknown tenant */
    err[0] = '\0';
    assert_int_equal(sg_store_token_create(st, acme.id, "tab\there", tok3, NULL, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "label"));
    char long_label[80];
    memset(long_label, 'l', 65);
    long_label[65] = '\0';
    assert_int_equal(sg_store_token_create(st, acme.id, long_label, tok3, NULL, err, sizeof(err)), -1);
    err[0] = '\0';
    assert_int_equal(sg_store_token_create(st, 999, "x", tok3, NULL, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "999"));

    /* revoke by public id: at once, even for a second connection that
     * authenticated a moment ago */
    sg_store_t *other = open_ok(dir);
    assert_int_equal(sg_store_token_auth(other, tok, strlen(tok), &got, err, sizeof(err)), 1);
    assert_int_equal(sg_store_token_revoke(st, info.public_id, err, sizeof(err)), 1);
    assert_int_equal(sg_store_token_auth(st, tok, strlen(tok), &got, err, sizeof(err)), 0);
    assert_int_equal(sg_store_token_auth(other, tok, strlen(tok), &got, err, sizeof(err)), 0);
    assert_int_equal(sg_store_token_auth(st, tok2, strlen(tok2), &got, err, sizeof(err)), 1); /* the other lives */
    list.n = 0;
    assert_int_equal(sg_store_token_list(st, acme.id, collect_token, &list, err, sizeof(err)), 0);
    int64_t revoked_at = list.item[0].revoked_at;
    assert_true(revoked_at >= info.created_at);
    assert_int_equal(list.item[1].revoked_at, 0);
    /* again: still 1, revoked_at kept */
    assert_int_equal(sg_store_token_revoke(st, info.public_id, err, sizeof(err)), 1);
    list.n = 0;
    assert_int_equal(sg_store_token_list(st, acme.id, collect_token, &list, err, sizeof(err)), 0);
    assert_int_equal(list.item[0].revoked_at, revoked_at);
    /* unknown or malformed: 0 */
    assert_int_equal(sg_store_token_revoke(st, "zzzzzzzz", err, sizeof(err)), 0);
    assert_int_equal(sg_store_token_revoke(st, "nope", err, sizeof(err)), 0);
    assert_int_equal(sg_store_token_revoke(st, "", err, sizeof(err)), 0);
    /* by the whole token, whose secret must match */
    memcpy(bad, tok2, sizeof(bad));
    bad[20] = bad[20] == 'A' ? 'B' : 'A';
    assert_int_equal(sg_store_token_revoke(st, bad, err, sizeof(err)), 0);
    assert_int_equal(sg_store_token_auth(st, tok2, strlen(tok2), &got, err, sizeof(err)), 1);
    assert_int_equal(sg_store_token_revoke(st, tok2, err, sizeof(err)), 1);
    assert_int_equal(sg_store_token_auth(st, tok2, strlen(tok2), &got, err, sizeof(err)), 0);

    /* a disabled tenant's tokens stop working, and work again when enabled */
    assert_int_equal(sg_store_token_create(st, beta.id, "", tok3, &info, err, sizeof(err)), 0);
    assert_int_equal(sg_store_token_auth(other, tok3, strlen(tok3), &got, err, sizeof(err)), 1);
    beta.disabled = 1;
    assert_int_equal(sg_store_tenant_update(st, &beta, err, sizeof(err)), 0);
    assert_int_equal(sg_store_token_auth(other, tok3, strlen(tok3), &got, err, sizeof(err)), 0);
    beta.disabled = 0;
    beta.max_sessions = 3;
    assert_int_equal(sg_store_tenant_update(st, &beta, err, sizeof(err)), 0);
    assert_int_equal(sg_store_token_auth(other, tok3, strlen(tok3), &got, err, sizeof(err)), 1);
    assert_int_equal(got.max_sessions, 3); /* quotas come fresh with every auth */

    sg_store_close(other);
    sg_store_close(st);
}

/* ---- usage ---- */

STORE_LIST(usage, sg_usage_t, 16)

static void test_usage(void **state)
{
    char dir[256], err[256];
    const char *sid = "0f8fad5b-d9cb-469f-a165-70867728950e";
    sg_tenant_t a, b;
    sg_usage_total_t tot;
    usage_list_t l = {0};
    sg_store_t *st;

    st = open_with_a_and_b(dir, sizeof(dir), "usage", &a, &b);

    /* written out of order */
    sg_usage_t rows[] = {
        usage(a.id, sid, 1000.5, 1.25, 0, 100),  usage(a.id, "", 900.0, 0.5, 0, 10),
        usage(a.id, sid, 2000.0, 30.0, 1, 1000), usage(b.id, "", 950.0, 2.0, 0, 5),
        usage(a.id, sid, 1000.0, 0.25, 0, 1),
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        assert_int_equal(sg_store_usage_add(st, &rows[i], err, sizeof(err)), 0);
    /* an unknown tenant is refused */
    sg_usage_t orphan = usage(77, "", 1.0, 1.0, 0, 0);
    err[0] = '\0';
    assert_int_equal(sg_store_usage_add(st, &orphan, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "77"));

    /* totals over [from, to) */
    assert_int_equal(sg_store_usage_total(st, a.id, 0, 1e12, &tot, err, sizeof(err)), 0);
    assert_int_equal(tot.executions, 4);
    assert_true(tot.seconds == 32.0);
    assert_int_equal(tot.output_bytes, 1111);
    assert_int_equal(tot.timed_out, 1);
    assert_int_equal(sg_store_usage_total(st, a.id, 1000.0, 2000.0, &tot, err, sizeof(err)), 0);
    assert_int_equal(tot.executions, 2); /* 1000.0 in, 2000.0 out */
    assert_true(tot.seconds == 1.5);
    assert_int_equal(tot.output_bytes, 101);
    assert_int_equal(tot.timed_out, 0);
    assert_int_equal(sg_store_usage_total(st, b.id, 0, 1e12, &tot, err, sizeof(err)), 0);
    assert_int_equal(tot.executions, 1);
    /* empty window: zeros, not an error */
    assert_int_equal(sg_store_usage_total(st, a.id, 5000, 6000, &tot, err, sizeof(err)), 0);
    assert_int_equal(tot.executions, 0);
    assert_true(tot.seconds == 0);
    assert_int_equal(tot.output_bytes, 0);

    /* list: oldest first, fields back as written */
    assert_int_equal(sg_store_usage_list(st, a.id, 0, 1e12, 100, collect_usage, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 4);
    assert_true(l.item[0].started_at == 900.0);
    assert_string_equal(l.item[0].session_id, "");
    assert_string_equal(l.item[0].kind, "ephemeral");
    assert_true(l.item[1].started_at == 1000.0);
    assert_true(l.item[2].started_at == 1000.5);
    assert_string_equal(l.item[2].session_id, sid);
    assert_string_equal(l.item[2].lang, "python");
    assert_string_equal(l.item[2].kind, "execute");
    assert_true(l.item[2].duration == 1.25);
    assert_int_equal(l.item[2].output_bytes, 100);
    assert_true(l.item[3].started_at == 2000.0);
    assert_int_equal(l.item[3].timed_out, 1);
    assert_int_equal(l.item[3].exit_code, -1);
    assert_int_equal(l.item[3].tenant_id, a.id);
    /* limit */
    l.n = 0;
    assert_int_equal(sg_store_usage_list(st, a.id, 0, 1e12, 2, collect_usage, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 2);
    assert_true(l.item[1].started_at == 1000.0);
    /* limit <= 0: all */
    l.n = 0;
    assert_int_equal(sg_store_usage_list(st, a.id, 0, 1e12, 0, collect_usage, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 4);
    /* tenant 0: every tenant, interleaved by time */
    l.n = 0;
    assert_int_equal(sg_store_usage_list(st, 0, 0, 1e12, 100, collect_usage, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 5);
    assert_true(l.item[0].started_at == 900.0);
    assert_int_equal(l.item[1].tenant_id, b.id);
    assert_true(l.item[1].started_at == 950.0);
    /* window on the list */
    l.n = 0;
    assert_int_equal(sg_store_usage_list(st, 0, 950.0, 1000.5, 100, collect_usage, &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 2);
    sg_store_close(st);
}

int main(void)
{
    return SG_RUN_TESTS("store", group_setup, group_teardown, NULL, NULL, test_open_creates_wal_db, test_open_errors,
                        test_tenants, test_tenant_fields, test_tenant_runtime, test_tokens, test_usage);
}
