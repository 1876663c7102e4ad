/*
 * sandgate-admin — tenants, tokens, quotas and usage, straight against the
 * gateway's SQLite file (<data dir>/sandgate.db). Safe while the gateway
 * runs: WAL lets both use the file, and the gateway reads tokens and quotas
 * from it on every check, so a revocation or a new quota applies at once.
 *
 * Data (tenants, the new token, lists, totals) goes to stdout; notes and
 * errors go to stderr. Exit 0 on success, 1 on an error, 2 on bad usage.
 */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "token.h"
#include "util.h"

#define EXIT_USAGE 2

static const char usage_text[] =
    "usage: sandgate-admin [--data-dir DIR] [--json] COMMAND ARGS...\n"
    "\n"
    "  tenant create NAME                 create a tenant with the default quotas\n"
    "  tenant list                        one line per tenant with its quotas\n"
    "  tenant show TENANT                 one tenant\n"
    "  tenant set TENANT KEY=VALUE...     change quotas (or disabled=1 to lock a tenant out)\n"
    "  tenant delete TENANT               lock it out at once; the gateway then closes its\n"
    "                                     sessions, removes its templates and its rows\n"
    "  token create TENANT [--label L]    print a new API token on stdout, alone\n"
    "  token revoke PUBLIC_ID_OR_TOKEN    revoke a token (at once)\n"
    "  token list TENANT                  public ids, labels, created, revoked (never secrets)\n"
    "  usage TENANT [--since UNIX] [--until UNIX]   execution totals over [since, until)\n"
    "\n"
    "TENANT is a tenant name (or its numeric id). KEYs: rate_per_min, burst,\n"
    "max_sessions, max_concurrent_execs, max_templates, execs_per_day,\n"
    "exec_seconds_per_day, max_timeout, max_memory_mb, max_cpus, allowed_langs\n"
    "(\"*\" or \"python,go\"), network_allowed, idle_timeout, max_lifetime, disabled,\n"
    "runtime (runc, runsc, or default: the proxy's SANDGATE_RUNTIME).\n"
    "\n"
    "The database is DIR/sandgate.db: DIR is --data-dir, else $SANDGATE_DATA_DIR,\n"
    "else " SG_STORE_DEFAULT_DIR ". --json prints JSON instead of key=value lines.\n"
    "Exit status: 0 success, 1 error, 2 bad usage.\n";

typedef struct {
    const char *data_dir;
    int json;
    const char *label;
    const char *since;
    const char *until;
    int npos;
    const char **pos;
} args_t;

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    if (fmt != NULL) {
        fprintf(stderr, "sandgate-admin: ");
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\n\n");
    }
    fputs(usage_text, stderr);
    return EXIT_USAGE;
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "sandgate-admin: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return 1;
}

/* A JSON number without trailing zeros: 2 -> 2, 1.5 -> 1.5. */
static json_object *json_num(double v)
{
    char buf[64], *e;
    snprintf(buf, sizeof(buf), "%.6f", v);
    e = buf + strlen(buf) - 1;
    while (*e == '0')
        *e-- = '\0';
    if (*e == '.')
        *e = '\0';
    return json_object_new_double_s(v, buf);
}

static void print_json(json_object *o)
{
    printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
}

/* Label as a double-quoted string (labels are printable ASCII). */
static void print_quoted(const char *s)
{
    putchar('"');
    for (; *s != '\0'; s++) {
        if (*s == '"' || *s == '\\')
            putchar('\\');
        putchar(*s);
    }
    putchar('"');
}

static void print_tenant_line(const sg_tenant_t *t)
{
    char created[32], fields[1024];
    sg_rfc3339(t->created_at, created);
    sg_tenant_format(t, fields, sizeof(fields));
    printf("id=%lld name=%s created=%s %s\n", (long long)t->id, t->name, created, fields);
}

/* A tenant by name, else by numeric id. 1 found, 0 not (message printed), -1 error. */
static int find_tenant(sg_store_t *st, const char *ref, sg_tenant_t *t)
{
    char err[256];
    int found = sg_store_tenant_by_name(st, ref, t, err, sizeof(err));
    if (found == 0 && ref[0] != '\0' && strspn(ref, "0123456789") == strlen(ref) && strlen(ref) < 19)
        found = sg_store_tenant_get(st, strtoll(ref, NULL, 10), t, err, sizeof(err));
    if (found < 0)
        fail("%s", err);
    else if (found == 0)
        fail("no tenant \"%s\"", ref);
    return found;
}

/* ---- tenant ---- */

static int cmd_tenant_create(sg_store_t *st, const args_t *a)
{
    sg_tenant_t t;
    char err[256];

    if (sg_store_tenant_create(st, a->pos[2], &t, err, sizeof(err)) != 0)
        return fail("%s", err);
    if (a->json) {
        json_object *o = sg_tenant_to_json(&t);
        print_json(o);
        json_object_put(o);
    } else {
        printf("id=%lld name=%s\n", (long long)t.id, t.name);
    }
    return 0;
}

static void on_tenant_text(const sg_tenant_t *t, void *data)
{
    (*(int *)data)++;
    print_tenant_line(t);
}

static void on_tenant_json(const sg_tenant_t *t, void *data)
{
    json_object_array_add(data, sg_tenant_to_json(t));
}

static int cmd_tenant_list(sg_store_t *st, const args_t *a)
{
    char err[256];
    int n = 0, rc;

    if (a->json) {
        json_object *arr = json_object_new_array();
        rc = sg_store_tenant_list(st, on_tenant_json, arr, err, sizeof(err));
        if (rc == 0)
            print_json(arr);
        json_object_put(arr);
    } else {
        rc = sg_store_tenant_list(st, on_tenant_text, &n, err, sizeof(err));
        if (rc == 0 && n == 0)
            fprintf(stderr, "sandgate-admin: no tenants in %s\n", sg_store_path(st));
    }
    return rc == 0 ? 0 : fail("%s", err);
}

static int show_tenant(const sg_tenant_t *t, int json)
{
    if (json) {
        json_object *o = sg_tenant_to_json(t);
        print_json(o);
        json_object_put(o);
    } else {
        print_tenant_line(t);
    }
    return 0;
}

static int cmd_tenant_show(sg_store_t *st, const args_t *a)
{
    sg_tenant_t t;
    if (find_tenant(st, a->pos[2], &t) <= 0)
        return 1;
    return show_tenant(&t, a->json);
}

static int cmd_tenant_set(sg_store_t *st, const args_t *a)
{
    sg_tenant_t t;
    char err[512];

    /* the shape of every KEY=VALUE first: a typo is bad usage, whatever the tenant */
    for (int i = 3; i < a->npos; i++) {
        const char *eq = strchr(a->pos[i], '=');
        if (eq == NULL || eq == a->pos[i])
            return usage_error("tenant set: \"%s\" is not KEY=VALUE", a->pos[i]);
    }
    if (find_tenant(st, a->pos[2], &t) <= 0)
        return 1;
    for (int i = 3; i < a->npos; i++) {
        const char *eq = strchr(a->pos[i], '=');
        char key[64];
        size_t klen = (size_t)(eq - a->pos[i]);
        if (klen >= sizeof(key))
            return fail("%.*s: unknown key", (int)klen, a->pos[i]);
        memcpy(key, a->pos[i], klen);
        key[klen] = '\0';
        if (sg_tenant_set_field(&t, key, eq + 1, err, sizeof(err)) != 0)
            return fail("%s", err);
    }
    if (sg_store_tenant_update(st, &t, err, sizeof(err)) != 0)
        return fail("%s", err);
    return show_tenant(&t, a->json);
}

/* The gateway finishes a deletion (gateway/purge.h): only it can reach the
 * proxy that holds the tenant's sessions and templates. */
static int cmd_tenant_delete(sg_store_t *st, const args_t *a)
{
    sg_tenant_t t;
    char err[256];

    if (find_tenant(st, a->pos[2], &t) <= 0)
        return 1;
    if (sg_store_tenant_mark_deleting(st, t.id, err, sizeof(err)) < 0)
        return fail("%s", err);
    fprintf(stderr,
            "sandgate-admin: tenant %s is disabled and marked for deletion; the gateway closes its sessions, "
            "removes its templates and deletes it within ten reaper rounds\n",
            t.name);
    return 0;
}

/* ---- token ---- */

static int cmd_token_create(sg_store_t *st, const args_t *a)
{
    sg_tenant_t t;
    sg_token_t tok;
    char token[SG_TOKEN_MAX], err[256];

    if (find_tenant(st, a->pos[2], &t) <= 0)
        return 1;
    if (sg_store_token_create(st, t.id, a->label, token, &tok, err, sizeof(err)) != 0)
        return fail("%s", err);
    if (a->json) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "token", json_object_new_string(token));
        json_object_object_add(o, "public_id", json_object_new_string(tok.public_id));
        json_object_object_add(o, "tenant", json_object_new_string(t.name));
        json_object_object_add(o, "tenant_id", json_object_new_int64(t.id));
        json_object_object_add(o, "label", json_object_new_string(tok.label));
        json_object_object_add(o, "created_at", json_object_new_int64(tok.created_at));
        print_json(o);
        json_object_put(o);
    } else {
        printf("%s\n", token);
    }
    fprintf(stderr, "sandgate-admin: token %s for tenant %s; it is shown only now\n", tok.public_id, t.name);
    return 0;
}

static int cmd_token_revoke(sg_store_t *st, const args_t *a)
{
    const char *ref = a->pos[2];
    char pub[SG_TOKEN_PUBLIC_LEN + 1], err[256];
    int rc;

    if (sg_token_is_public_id(ref, strlen(ref)))
        snprintf(pub, sizeof(pub), "%s", ref);
    else if (sg_token_parse(ref, strlen(ref), pub) != 0)
        return fail("\"%s\" is neither a token public id (8 of a-z 0-9) nor a token", ref);
    rc = sg_store_token_revoke(st, ref, err, sizeof(err));
    if (rc < 0)
        return fail("%s", err);
    if (rc == 0)
        return fail("no such token: %s", pub);
    if (a->json)
        printf("{\"public_id\":\"%s\",\"revoked\":true}\n", pub);
    else
        printf("public_id=%s revoked\n", pub);
    return 0;
}

static void on_token_text(const sg_token_t *t, void *data)
{
    char created[32], revoked[32];
    sg_rfc3339(t->created_at, created);
    if (t->revoked_at != 0)
        sg_rfc3339(t->revoked_at, revoked);
    else
        strcpy(revoked, "-");
    printf("public_id=%s created=%s revoked=%s label=", t->public_id, created, revoked);
    print_quoted(t->label);
    putchar('\n');
}

static void on_token_json(const sg_token_t *t, void *data)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "public_id", json_object_new_string(t->public_id));
    json_object_object_add(o, "label", json_object_new_string(t->label));
    json_object_object_add(o, "created_at", json_object_new_int64(t->created_at));
    json_object_object_add(o, "revoked_at", t->revoked_at != 0 ? json_object_new_int64(t->revoked_at) : NULL);
    json_object_array_add(data, o);
}

static int cmd_token_list(sg_store_t *st, const args_t *a)
{
    sg_tenant_t t;
    char err[256];
    int rc;

    if (find_tenant(st, a->pos[2], &t) <= 0)
        return 1;
    if (a->json) {
        json_object *arr = json_object_new_array();
        rc = sg_store_token_list(st, t.id, on_token_json, arr, err, sizeof(err));
        if (rc == 0)
            print_json(arr);
        json_object_put(arr);
    } else {
        rc = sg_store_token_list(st, t.id, on_token_text, NULL, err, sizeof(err));
    }
    return rc == 0 ? 0 : fail("%s", err);
}

/* ---- usage ---- */

static int parse_time(const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno != 0 || !isfinite(*out))
        return fail("%s: must be unix seconds (got \"%s\")", opt, s);
    return 0;
}

static int cmd_usage(sg_store_t *st, const args_t *a)
{
    sg_tenant_t t;
    sg_usage_total_t tot;
    double since = 0, until = 1e15;
    char err[256], secs[64];

    if (a->since != NULL && parse_time("--since", a->since, &since) != 0)
        return 1;
    if (a->until != NULL && parse_time("--until", a->until, &until) != 0)
        return 1;
    if (find_tenant(st, a->pos[1], &t) <= 0)
        return 1;
    if (sg_store_usage_total(st, t.id, since, until, &tot, err, sizeof(err)) != 0)
        return fail("%s", err);
    if (a->json) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "tenant", json_object_new_string(t.name));
        json_object_object_add(o, "tenant_id", json_object_new_int64(t.id));
        json_object_object_add(o, "since", json_num(since));
        json_object_object_add(o, "until", json_num(until));
        json_object_object_add(o, "executions", json_object_new_int64(tot.executions));
        json_object_object_add(o, "seconds", json_num(tot.seconds));
        json_object_object_add(o, "output_bytes", json_object_new_int64(tot.output_bytes));
        json_object_object_add(o, "timed_out", json_object_new_int64(tot.timed_out));
        print_json(o);
        json_object_put(o);
    } else {
        snprintf(secs, sizeof(secs), "%.3f", tot.seconds);
        printf("tenant=%s since=%.0f until=%.0f executions=%lld seconds=%s output_bytes=%lld timed_out=%lld\n", t.name,
               since, until, (long long)tot.executions, secs, (long long)tot.output_bytes, (long long)tot.timed_out);
    }
    return 0;
}

/* ---- command line ---- */

typedef struct {
    const char *word1, *word2; /* word2 NULL: a one-word command */
    int min_args, max_args;    /* positionals after the command words */
    int (*run)(sg_store_t *st, const args_t *a);
    unsigned opts; /* which of OPT_* the command takes */
} command_t;

enum { OPT_LABEL = 1, OPT_SINCE = 2, OPT_UNTIL = 4 };

static const command_t commands[] = {
    {"tenant", "create", 1, 1, cmd_tenant_create, 0},
    {"tenant", "list", 0, 0, cmd_tenant_list, 0},
    {"tenant", "show", 1, 1, cmd_tenant_show, 0},
    {"tenant", "set", 2, 1000, cmd_tenant_set, 0},
    {"tenant", "delete", 1, 1, cmd_tenant_delete, 0},
    {"token", "create", 1, 1, cmd_token_create, OPT_LABEL},
    {"token", "revoke", 1, 1, cmd_token_revoke, 0},
    {"token", "list", 1, 1, cmd_token_list, 0},
    {"usage", NULL, 1, 1, cmd_usage, OPT_SINCE | OPT_UNTIL},
};

/* --name VALUE or --name=VALUE at argv[*i]; NULL value: missing. */
static int take_value(int argc, char **argv, int *i, const char *name, const char **out)
{
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0)
        return 0;
    if (arg[n] == '=') {
        *out = arg + n + 1;
        return 1;
    }
    if (arg[n] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        *out = NULL;
        return 1;
    }
    *out = argv[++*i];
    return 1;
}

int main(int argc, char **argv)
{
    args_t a = {0};
    const command_t *cmd = NULL;
    unsigned given = 0;
    sg_store_t *st;
    char err[512];
    int words, rc, only_pos = 0;

    a.pos = sg_xcalloc((size_t)argc + 1, sizeof(*a.pos));
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *v;
        int missing = 0;
        if (only_pos || arg[0] != '-' || arg[1] == '\0') {
            a.pos[a.npos++] = arg;
        } else if (strcmp(arg, "--") == 0) {
            only_pos = 1;
        } else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            fputs(usage_text, stdout);
            free(a.pos);
            return 0;
        } else if (strcmp(arg, "--json") == 0) {
            a.json = 1;
        } else if (take_value(argc, argv, &i, "--data-dir", &v)) {
            a.data_dir = v;
            missing = v == NULL || v[0] == '\0';
        } else if (take_value(argc, argv, &i, "--label", &v)) {
            a.label = v;
            missing = v == NULL;
            given |= OPT_LABEL;
        } else if (take_value(argc, argv, &i, "--since", &v)) {
            a.since = v;
            missing = v == NULL;
            given |= OPT_SINCE;
        } else if (take_value(argc, argv, &i, "--until", &v)) {
            a.until = v;
            missing = v == NULL;
            given |= OPT_UNTIL;
        } else {
            rc = usage_error("unknown option %s", arg);
            goto Exit;
        }
        if (missing) {
            rc = usage_error("%s needs a value", arg);
            goto Exit;
        }
    }

    if (a.npos == 0) {
        rc = usage_error(NULL);
        goto Exit;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        const command_t *c = &commands[i];
        if (strcmp(a.pos[0], c->word1) != 0)
            continue;
        if (c->word2 == NULL || (a.npos > 1 && strcmp(a.pos[1], c->word2) == 0)) {
            cmd = c;
            break;
        }
    }
    if (cmd == NULL) {
        rc = usage_error("unknown command \"%s%s%s\"", a.pos[0], a.npos > 1 ? " " : "", a.npos > 1 ? a.pos[1] : "");
        goto Exit;
    }
    words = cmd->word2 != NULL ? 2 : 1;
    if (a.npos - words < cmd->min_args || a.npos - words > cmd->max_args) {
        rc = usage_error("%s%s%s: wrong number of arguments", cmd->word1, cmd->word2 ? " " : "",
                         cmd->word2 ? cmd->word2 : "");
        goto Exit;
    }
    if ((given & ~cmd->opts) != 0) {
        rc = usage_error("%s%s%s does not take %s", cmd->word1, cmd->word2 ? " " : "", cmd->word2 ? cmd->word2 : "",
                         (given & ~cmd->opts & OPT_LABEL) ? "--label" : "--since/--until");
        goto Exit;
    }

    if (a.data_dir == NULL)
        a.data_dir = getenv("SANDGATE_DATA_DIR");
    if (a.data_dir == NULL || a.data_dir[0] == '\0')
        a.data_dir = SG_STORE_DEFAULT_DIR;
    st = sg_store_open(a.data_dir, err, sizeof(err));
    if (st == NULL) {
        rc = fail("%s", err);
        goto Exit;
    }
    rc = cmd->run(st, &a);
    sg_store_close(st);
Exit:
    free(a.pos);
    return rc;
}
