/*
 * tenant.c — the tenant model (tenant.h): defaults, the settable fields by
 * name with their ranges, parsing, validation and output. Pure logic, no
 * SQL: the store reads and writes the same field table (store_sql.c).
 */
#include "tenant.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "store_err.h"

#define TF(n, t, lo, hi)                                                                                               \
    {                                                                                                                  \
#n, t, offsetof(sg_tenant_t, n), lo, hi                                                                        \
    }
const sg_tenant_field_t sg_tenant_fields[] = {
    TF(disabled, SG_TF_BOOL, 0, 1),
    TF(rate_per_min, SG_TF_LONG, 1, 1e9),
    TF(burst, SG_TF_LONG, 1, 1e9),
    TF(max_sessions, SG_TF_LONG, 0, 1e6),
    TF(max_concurrent_execs, SG_TF_LONG, 0, 1e6),
    TF(execs_per_day, SG_TF_LONG, 0, 1e12),
    TF(exec_seconds_per_day, SG_TF_DOUBLE, 0, 1e12),
    TF(max_timeout, SG_TF_DOUBLE, 0.1, 86400),
    TF(max_memory_mb, SG_TF_LONG, 16, 1048576),
    TF(max_cpus, SG_TF_DOUBLE, 0.01, 1024),
    TF(allowed_langs, SG_TF_LANGS, 0, 0),
    TF(network_allowed, SG_TF_BOOL, 0, 1),
    TF(idle_timeout, SG_TF_LONG, 1, 1e9),
    TF(max_lifetime, SG_TF_LONG, 1, 1e9),
    TF(max_templates, SG_TF_LONG, 0, 1e6),
    TF(runtime, SG_TF_RUNTIME, 0, 0),
};
#undef TF
const size_t sg_tenant_nfields = sizeof(sg_tenant_fields) / sizeof(sg_tenant_fields[0]);

#define LANG_NAME_MAX 31

void sg_tenant_defaults(sg_tenant_t *t)
{
    memset(t, 0, sizeof(*t));
    t->rate_per_min = 600;
    t->burst = 60;
    t->max_sessions = 10;
    t->max_concurrent_execs = 8;
    t->execs_per_day = 10000;
    t->exec_seconds_per_day = 36000;
    t->max_timeout = 300;
    t->max_memory_mb = 1024;
    t->max_cpus = 2;
    strcpy(t->allowed_langs, "*");
    t->network_allowed = 0;
    t->idle_timeout = 900;
    t->max_lifetime = 14400;
    t->max_templates = 5;
}

int sg_tenant_name_valid(const char *name)
{
    size_t n = name != NULL ? strlen(name) : 0;
    if (n == 0 || n > SG_TENANT_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return 0;
    }
    return 1;
}

static int is_lang_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '+' || c == '-';
}

/* "*" or comma-separated names of [a-z0-9_+-]{1,31}, shorter than SG_LANGS_MAX. */
static int langs_valid(const char *s)
{
    size_t n = strlen(s), run = 0;
    if (strcmp(s, "*") == 0)
        return 1;
    if (n == 0 || n >= SG_LANGS_MAX)
        return 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == ',') {
            if (run == 0 || run > LANG_NAME_MAX)
                return 0;
            run = 0;
        } else if (is_lang_char(s[i])) {
            run++;
        } else {
            return 0;
        }
    }
    return 1;
}

int sg_tenant_runtime_valid(const char *s)
{
    return strcmp(s, "") == 0 || strcmp(s, "runc") == 0 || strcmp(s, "runsc") == 0;
}

int sg_tenant_lang_allowed(const sg_tenant_t *t, const char *lang, size_t len)
{
    const char *p = t->allowed_langs;
    if (strcmp(p, "*") == 0)
        return 1;
    if (len == 0)
        return 0;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        if (n == len && memcmp(p, lang, len) == 0)
            return 1;
        if (end == NULL)
            break;
        p = end + 1;
    }
    return 0;
}

static const sg_tenant_field_t *find_field(const char *key)
{
    for (size_t i = 0; i < sg_tenant_nfields; i++) {
        if (strcmp(sg_tenant_fields[i].name, key) == 0)
            return &sg_tenant_fields[i];
    }
    return NULL;
}

static void field_range_err(const sg_tenant_field_t *f, const char *got, char *err, size_t errlen)
{
    switch (f->type) {
    case SG_TF_LONG:
        sg_store__errf(err, errlen, "%s: must be an integer from %.0f to %.0f (got \"%s\")", f->name, f->min, f->max,
                       got);
        break;
    case SG_TF_DOUBLE:
        sg_store__errf(err, errlen, "%s: must be a number from %g to %.0f (got \"%s\")", f->name, f->min, f->max, got);
        break;
    case SG_TF_BOOL:
        sg_store__errf(err, errlen, "%s: must be 0 or 1 (got \"%s\")", f->name, got);
        break;
    case SG_TF_LANGS:
        sg_store__errf(err, errlen,
                       "%s: must be \"*\" or a comma-separated list of language names of [a-z0-9_+-] (got \"%s\")",
                       f->name, got);
        break;
    case SG_TF_RUNTIME:
        sg_store__errf(err, errlen, "%s: must be runc, runsc, or default (null: the proxy's own) (got \"%s\")", f->name,
                       got);
        break;
    }
}

int sg_tenant_set_field(sg_tenant_t *t, const char *key, const char *value, char *err, size_t errlen)
{
    const sg_tenant_field_t *f = find_field(key);
    char *end;

    if (f == NULL) {
        char names[512];
        size_t off = 0;
        names[0] = '\0';
        for (size_t i = 0; i < sg_tenant_nfields && off < sizeof(names); i++)
            off += (size_t)snprintf(names + off, sizeof(names) - off, "%s%s", i ? ", " : "", sg_tenant_fields[i].name);
        sg_store__errf(err, errlen, "%s: unknown key (keys: %s)", key, names);
        return -1;
    }
    switch (f->type) {
    case SG_TF_LONG: {
        long long v;
        if (!(value[0] == '-' || (value[0] >= '0' && value[0] <= '9')))
            goto Error;
        errno = 0;
        v = strtoll(value, &end, 10);
        if (value[0] == '\0' || *end != '\0' || errno != 0 || (double)v < f->min || (double)v > f->max)
            goto Error;
        *(long *)((char *)t + f->off) = (long)v;
        return 0;
    }
    case SG_TF_DOUBLE: {
        double v;
        if (!(value[0] == '-' || value[0] == '.' || (value[0] >= '0' && value[0] <= '9')))
            goto Error;
        errno = 0;
        v = strtod(value, &end);
        if (value[0] == '\0' || *end != '\0' || errno != 0 || !isfinite(v) || v < f->min || v > f->max)
            goto Error;
        *(double *)((char *)t + f->off) = v;
        return 0;
    }
    case SG_TF_BOOL: {
        int v;
        if (strcmp(value, "1") == 0 || strcasecmp(value, "true") == 0 || strcasecmp(value, "yes") == 0 ||
            strcasecmp(value, "on") == 0)
            v = 1;
        else if (strcmp(value, "0") == 0 || strcasecmp(value, "false") == 0 || strcasecmp(value, "no") == 0 ||
                 strcasecmp(value, "off") == 0)
            v = 0;
        else
            goto Error;
        *(int *)((char *)t + f->off) = v;
        return 0;
    }
    case SG_TF_LANGS:
        if (!langs_valid(value))
            goto Error;
        snprintf((char *)t + f->off, SG_LANGS_MAX, "%s", value);
        return 0;
    case SG_TF_RUNTIME:
        if (strcmp(value, "default") == 0 || strcmp(value, "null") == 0)
            value = "";
        if (!sg_tenant_runtime_valid(value))
            goto Error;
        snprintf((char *)t + f->off, SG_RUNTIME_NAME_MAX, "%s", value);
        return 0;
    }
Error:
    field_range_err(f, value, err, errlen);
    return -1;
}

int sg_tenant_validate(const sg_tenant_t *t, char *err, size_t errlen)
{
    char got[64];

    for (size_t i = 0; i < sg_tenant_nfields; i++) {
        const sg_tenant_field_t *f = &sg_tenant_fields[i];
        const char *p = (const char *)t + f->off;
        switch (f->type) {
        case SG_TF_LONG: {
            long v = *(const long *)p;
            if ((double)v < f->min || (double)v > f->max) {
                snprintf(got, sizeof(got), "%ld", v);
                goto Error;
            }
            break;
        }
        case SG_TF_DOUBLE: {
            double v = *(const double *)p;
            if (!isfinite(v) || v < f->min || v > f->max) {
                snprintf(got, sizeof(got), "%g", v);
                goto Error;
            }
            break;
        }
        case SG_TF_BOOL: {
            int v = *(const int *)p;
            if (v != 0 && v != 1) {
                snprintf(got, sizeof(got), "%d", v);
                goto Error;
            }
            break;
        }
        case SG_TF_LANGS:
            if (memchr(p, '\0', SG_LANGS_MAX) == NULL || !langs_valid(p)) {
                snprintf(got, sizeof(got), "%.60s", memchr(p, '\0', SG_LANGS_MAX) != NULL ? p : "(unterminated)");
                goto Error;
            }
            break;
        case SG_TF_RUNTIME:
            if (memchr(p, '\0', SG_RUNTIME_NAME_MAX) == NULL || !sg_tenant_runtime_valid(p)) {
                snprintf(got, sizeof(got), "%.*s", SG_RUNTIME_NAME_MAX, p);
                goto Error;
            }
            break;
        }
        continue;
    Error:
        field_range_err(f, got, err, errlen);
        return -1;
    }
    return 0;
}

int sg_tenant_set_json(sg_tenant_t *t, json_object *obj, char *err, size_t errlen)
{
    json_object_object_foreach(obj, key, val)
    {
        const char *text;
        if (strcmp(key, "name") == 0)
            continue;
        if (val == NULL) /* null: the field's "none" (runtime: the proxy's default) */
            text = "";
        else if (json_object_is_type(val, json_type_boolean))
            text = json_object_get_boolean(val) ? "1" : "0";
        else if (json_object_is_type(val, json_type_string) || json_object_is_type(val, json_type_int) ||
                 json_object_is_type(val, json_type_double))
            text = json_object_get_string(val);
        else
            text = NULL;
        if (text == NULL) {
            sg_store__errf(err, errlen, "quota fields are numbers, booleans or strings");
            return -1;
        }
        if (sg_tenant_set_field(t, key, text, err, errlen) != 0)
            return -1;
    }
    return sg_tenant_validate(t, err, errlen);
}

/* Shortest of %.6f without trailing zeros: 2 -> "2", 0.25 -> "0.25". */
static void fmt_double(double v, char out[48])
{
    char *dot;
    snprintf(out, 48, "%.6f", v);
    dot = strchr(out, '.');
    if (dot != NULL) {
        char *e = out + strlen(out) - 1;
        while (e > dot && *e == '0')
            *e-- = '\0';
        if (e == dot)
            *e = '\0';
    }
}

int sg_tenant_format(const sg_tenant_t *t, char *buf, size_t len)
{
    size_t off = 0;
    int total = 0;

    if (len > 0)
        buf[0] = '\0';
    for (size_t i = 0; i < sg_tenant_nfields; i++) {
        const sg_tenant_field_t *f = &sg_tenant_fields[i];
        const char *p = (const char *)t + f->off;
        char v[48];
        int n;
        switch (f->type) {
        case SG_TF_LONG:
            snprintf(v, sizeof(v), "%ld", *(const long *)p);
            break;
        case SG_TF_DOUBLE:
            fmt_double(*(const double *)p, v);
            break;
        case SG_TF_BOOL:
            snprintf(v, sizeof(v), "%d", *(const int *)p);
            break;
        case SG_TF_LANGS:
            v[0] = '\0';
            break;
        case SG_TF_RUNTIME:
            snprintf(v, sizeof(v), "%s", p[0] != '\0' ? p : "default");
            break;
        }
        n = snprintf(buf + off, off < len ? len - off : 0, "%s%s=%s", i ? " " : "", f->name,
                     f->type == SG_TF_LANGS ? p : v);
        total += n;
        off += (size_t)n;
        if (off > len)
            off = len;
    }
    return total;
}

json_object *sg_tenant_to_json(const sg_tenant_t *t)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "id", json_object_new_int64(t->id));
    json_object_object_add(o, "name", json_object_new_string(t->name));
    json_object_object_add(o, "created_at", json_object_new_int64(t->created_at));
    for (size_t i = 0; i < sg_tenant_nfields; i++) {
        const sg_tenant_field_t *f = &sg_tenant_fields[i];
        const char *p = (const char *)t + f->off;
        json_object *v = NULL;
        switch (f->type) {
        case SG_TF_LONG:
            v = json_object_new_int64(*(const long *)p);
            break;
        case SG_TF_DOUBLE: {
            char num[48];
            fmt_double(*(const double *)p, num);
            v = json_object_new_double_s(*(const double *)p, num);
            break;
        }
        case SG_TF_BOOL:
            v = json_object_new_boolean(*(const int *)p);
            break;
        case SG_TF_LANGS:
            v = json_object_new_string(p);
            break;
        case SG_TF_RUNTIME:
            v = p[0] != '\0' ? json_object_new_string(p) : NULL;
            break;
        }
        json_object_object_add(o, f->name, v);
    }
    return o;
}
