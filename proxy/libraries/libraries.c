#include "libraries.h"
#include "install.h"
#include "lang.h"
#include "log.h"
#include "util.h"
#include "validate.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sg_proxy_t *proxy;
static const sg_install_conf_t no_install = {"", "", "", "", 0, NULL};

void sg_libraries_init(const sg_proxy_t *px)
{
    proxy = px;
}

static const sg_install_conf_t *install_conf(void)
{
    return proxy != NULL ? &proxy->install : &no_install;
}

/* ---- checks ------------------------------------------------------------------ */

/* PEP 503 normalisation, for comparing with the blocklist. */
static void normalise(const char *in, char *out, size_t cap)
{
    size_t o = 0;
    for (const char *p = in; *p != '\0' && o + 1 < cap; p++)
        out[o++] = *p == '_' || *p == '.' ? '-' : (char)tolower((unsigned char)*p);
    out[o] = '\0';
}

static int blocked(const char *name)
{
    const char *list = install_conf()->blocklist;
    char want[256], item[256];
    normalise(name, want, sizeof(want));
    while (list != NULL && *list != '\0') {
        const char *comma = strchr(list, ',');
        size_t len = comma != NULL ? (size_t)(comma - list) : strlen(list);
        char raw[256];
        snprintf(raw, sizeof(raw), "%.*s", (int)(len < sizeof(raw) ? len : sizeof(raw) - 1), list);
        normalise(raw, item, sizeof(item));
        if (item[0] != '\0' && strcmp(item, want) == 0)
            return 1;
        list = comma != NULL ? comma + 1 : NULL;
    }
    return 0;
}

static int valid_version(const char *v)
{
    size_t len = strlen(v);
    if (len == 0 || len > 64 || !isalnum((unsigned char)v[0]))
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)v[i]) && strchr(".+!*_-", v[i]) == NULL)
            return 0;
    return 1;
}

int sg_lib_check(const sg_lang_t *lang, const char *name, const char *version, char *err, size_t errlen)
{
    if (lang->package_manager == NULL || lang->fetch_cmd == NULL) {
        snprintf(err, errlen, "libraries are not supported for %s", lang->name);
        return -1;
    }
    if (!sg_validate_library_name(name, strlen(name), lang->package_manager)) {
        snprintf(err, errlen, "\"%.100s\" is not a valid %s package name", name, lang->package_manager);
        return -1;
    }
    if (blocked(name)) {
        snprintf(err, errlen, "package \"%.100s\" is blocked on this service", name);
        return -1;
    }
    if (version != NULL && version[0] != '\0' && strcmp(version, "latest") != 0 && !valid_version(version)) {
        snprintf(err, errlen, "\"%.64s\" is not a valid version: use an exact version such as 1.2.3", version);
        return -1;
    }
    return 0;
}

/* ---- one package ------------------------------------------------------------- */

/* What an install (of one package, or of a list) answers to, and how. */
typedef struct {
    sg_session_t *s; /* referenced until the answer */
    uint64_t t0;
    sg_lib_result_t r;
    sg_lib_cb cb;
    void *data;
} lib_done_t;

/* Holds s until the answer; the clock starts now. */
static void lib_done_init(lib_done_t *d, sg_session_t *s, sg_lib_cb cb, void *data)
{
    sg_session_ref(s);
    d->s = s;
    d->cb = cb;
    d->data = data;
    d->t0 = sg_now_us();
    d->r.http_status = 200;
}

/* Answers with r, its time counted from t0, and lets the session go. */
static void lib_done(lib_done_t *d)
{
    d->r.installation_time = (double)(sg_now_us() - d->t0) / 1e6;
    d->cb(d->data, &d->r);
    sg_session_unref(d->s);
}

typedef struct {
    lib_done_t done;
    char name[215];
    char spec[300];
    int fetched;
} install_t;

static void install_finish(install_t *in)
{
    lib_done(&in->done);
    free(in);
}

static void tail_line(const sg_buf_t *b, char *out, size_t cap)
{
    size_t len = b->len;
    const char *p = b->base != NULL ? b->base : "";
    while (len > 0 && (p[len - 1] == '\n' || p[len - 1] == '\r' || p[len - 1] == ' '))
        len--;
    size_t start = len;
    while (start > 0 && p[start - 1] != '\n')
        start--;
    snprintf(out, cap, "%.*s", (int)(len - start), p + start);
}

static void tail_text(const sg_buf_t *b, char *out, size_t cap)
{
    size_t len = b->len;
    const char *p = b->base != NULL ? b->base : "";
    while (len > 0 && (p[len - 1] == '\n' || p[len - 1] == ' '))
        len--;
    if (len >= cap)
        p += len - (cap - 1), len = cap - 1;
    snprintf(out, cap, "%.*s", (int)len, p);
}

static void local_step(install_t *in);

static void on_fetched(void *data, const sg_fetch_result_t *f)
{
    install_t *in = data;
    if (f->no_capacity)
        in->done.r.http_status = 503;
    if (!f->ok) {
        snprintf(in->done.r.message, sizeof(in->done.r.message),
                 "could not get %.200s from the package index%s: %.900s", in->spec, f->timed_out ? " in time" : "",
                 f->message);
        install_finish(in);
        return;
    }
    in->fetched = 1;
    local_step(in);
}

static void on_local_done(sg_op_t *op)
{
    install_t *in = op->data;
    if (op->failed) {
        in->done.r.http_status = op->fail_status;
        snprintf(in->done.r.message, sizeof(in->done.r.message), "%s", op->errmsg);
    } else if (op->reason == SG_AGENT_REASON_EXITED && op->exit_code == 0) {
        in->done.r.success = 1;
        in->done.r.from_store = !in->fetched;
        tail_line(&op->out[0], in->done.r.installed_version, sizeof(in->done.r.installed_version));
        snprintf(in->done.r.message, sizeof(in->done.r.message), "installed %s %s%s", in->name,
                 in->done.r.installed_version, in->fetched ? "" : " from the package store");
    } else if (!in->fetched && op->reason == SG_AGENT_REASON_EXITED && op->exit_code == SG_LANG_NOT_IN_STORE &&
               install_conf()->store_volume[0] != '\0') {
        /* not in the store yet: fetch it, then install again (any other
         * failure, a hash mismatch among them, is the answer) */
        sg_op_free(op);
        sg_install_fetch(proxy, in->done.s, in->spec, on_fetched, in);
        return;
    } else {
        char err[900];
        tail_text(&op->out[1], err, sizeof(err));
        snprintf(in->done.r.message, sizeof(in->done.r.message), "could not install %.200s: %.900s", in->spec,
                 err[0] ? err : sg_agent_reason_name(op->reason));
    }
    sg_op_free(op);
    install_finish(in);
}

static void local_step(install_t *in)
{
    const sg_install_conf_t *conf = install_conf();
    char qspec[700], qname[500], cmd[4096];
    sg_shell_quote(in->spec, strlen(in->spec), qspec, sizeof(qspec));
    sg_shell_quote(in->name, strlen(in->name), qname, sizeof(qname));
    snprintf(cmd, sizeof(cmd), "SANDGATE_SPEC=%s SANDGATE_NAME=%s; export SANDGATE_SPEC SANDGATE_NAME; %s", qspec,
             qname, in->done.s->lang->local_install_cmd);
    sg_op_t *op = sg_op_exec(in->done.s, NULL, NULL, cmd, NULL, NULL, "", 0, (double)conf->timeout_ms / 1000);
    if (op == NULL) {
        snprintf(in->done.r.message, sizeof(in->done.r.message), "out of memory");
        install_finish(in);
        return;
    }
    sg_op_submit(op, on_local_done, in);
}

void sg_lib_install(sg_session_t *s, const char *name, const char *version, sg_lib_cb cb, void *data)
{
    install_t *in = sg_xcalloc(1, sizeof(*in));
    char err[300];
    lib_done_init(&in->done, s, cb, data);
    /* the only door to an installer: nothing unchecked goes through it */
    if (sg_lib_check(s->lang, name, version, err, sizeof(err)) != 0) {
        sg_error("library install refused: %s", err);
        snprintf(in->done.r.message, sizeof(in->done.r.message), "%s", err);
        install_finish(in);
        return;
    }
    snprintf(in->name, sizeof(in->name), "%s", name);
    if (version != NULL && version[0] != '\0' && strcmp(version, "latest") != 0)
        snprintf(in->spec, sizeof(in->spec), "%s%s%s", name, s->lang->version_sep, version);
    else
        snprintf(in->spec, sizeof(in->spec), "%s", name);
    local_step(in);
}

/* ---- a list, before code runs -------------------------------------------------- */

typedef struct {
    lib_done_t done;
    char **names;           /* the request's names, checked */
    unsigned char *missing; /* per name: the check said it is missing */
    size_t n, next;
    size_t ninstalled;
} ensure_t;

static void ensure_finish(ensure_t *e)
{
    lib_done(&e->done);
    for (size_t i = 0; i < e->n; i++)
        free(e->names[i]);
    free(e->names);
    free(e->missing);
    free(e);
}

static void ensure_next(ensure_t *e);

static void on_one_installed(void *data, const sg_lib_result_t *r)
{
    ensure_t *e = data;
    if (!r->success) {
        e->done.r = *r;
        e->done.r.success = 0;
        ensure_finish(e);
        return;
    }
    e->ninstalled++;
    ensure_next(e);
}

static void ensure_next(ensure_t *e)
{
    while (e->next < e->n && !e->missing[e->next])
        e->next++;
    if (e->next == e->n) {
        e->done.r.success = 1;
        snprintf(e->done.r.message, sizeof(e->done.r.message), "%zu librar%s installed", e->ninstalled,
                 e->ninstalled == 1 ? "y" : "ies");
        ensure_finish(e);
        return;
    }
    /* the request's own (checked) string, never the sandbox's line */
    const char *name = e->names[e->next++];
    sg_lib_install(e->done.s, name, NULL, on_one_installed, e);
}

size_t sg_lib_match_missing(char *const *names, size_t n, const char *out, size_t len, unsigned char *missing)
{
    size_t marked = 0;
    const char *p = out, *end = out + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
        size_t i;
        for (i = 0; i < n; i++)
            if (strlen(names[i]) == l && memcmp(names[i], p, l) == 0)
                break;
        if (i < n) {
            /* the first of equal names: a name given twice is installed once */
            if (!missing[i])
                missing[i] = 1, marked++;
        } else if (l != 0) {
            /* the sandbox's bytes, made printable before they reach the log */
            char shown[201];
            size_t k;
            for (k = 0; k < l && k + 1 < sizeof(shown); k++)
                shown[k] = p[k] >= 0x20 && p[k] < 0x7f ? p[k] : '?';
            shown[k] = '\0';
            sg_debug("library check: ignoring a line that names no requested library: \"%s\"%s", shown,
                     l > k ? " (cut)" : "");
        }
        p += l + (nl != NULL);
    }
    return marked;
}

static void on_missing_listed(sg_op_t *op)
{
    ensure_t *e = op->data;
    if (op->failed || op->reason != SG_AGENT_REASON_EXITED || op->exit_code != 0) {
        e->done.r.http_status = op->failed ? op->fail_status : 200;
        snprintf(e->done.r.message, sizeof(e->done.r.message), "cannot check the session's libraries: %s",
                 op->failed ? op->errmsg : sg_agent_reason_name(op->reason));
        sg_op_free(op);
        ensure_finish(e);
        return;
    }
    /* The check ran in the sandbox, so its output is the sandbox's word:
     * it only selects among the names the request gave (one a line). */
    sg_lib_match_missing(e->names, e->n, op->out[0].base != NULL ? op->out[0].base : "", op->out[0].len, e->missing);
    sg_op_free(op);
    ensure_next(e);
}

void sg_lib_ensure(sg_session_t *s, json_object *libs, sg_lib_cb cb, void *data)
{
    ensure_t *e = sg_xcalloc(1, sizeof(*e));
    size_t n = json_object_array_length(libs), cap = strlen(s->lang->missing_cmd) + n * 700 + 1;
    char *cmd = sg_xmalloc(cap);

    lib_done_init(&e->done, s, cb, data);
    e->names = sg_xcalloc(n + 1, sizeof(char *));
    e->missing = sg_xcalloc(n + 1, 1);
    strcpy(cmd, s->lang->missing_cmd);
    for (size_t i = 0; i < n; i++) {
        json_object *v = json_object_array_get_idx(libs, i);
        const char *name = json_object_get_string(v);
        if (!json_object_is_type(v, json_type_string) ||
            sg_lib_check(s->lang, name, NULL, e->done.r.message, sizeof(e->done.r.message)) != 0) {
            e->n = i;
            free(cmd);
            ensure_finish(e); /* api_exec.c checked them: not reached */
            return;
        }
        e->names[i] = sg_xstrdup(name);
        e->n = i + 1;
        size_t len = strlen(cmd);
        cmd[len++] = ' ';
        sg_shell_quote(name, strlen(name), cmd + len, cap - len);
    }
    sg_op_t *op = sg_op_exec(s, NULL, NULL, cmd, NULL, NULL, "", 0, 30.0);
    free(cmd);
    if (op == NULL) {
        snprintf(e->done.r.message, sizeof(e->done.r.message), "out of memory");
        ensure_finish(e);
        return;
    }
    sg_op_submit(op, on_missing_listed, e);
}
