/*
 * tenant.h — the tenant model: a tenant's quotas and limits, their
 * defaults, the settable fields by name with their ranges, and their text
 * and JSON forms. Pure logic and thread-safe: no SQL (the store keeps
 * tenants in SQLite through the same field table, store.h).
 */
#ifndef SANDGATE_TENANT_H
#define SANDGATE_TENANT_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#define SG_TENANT_NAME_MAX 64
#define SG_LANGS_MAX 256
#define SG_RUNTIME_NAME_MAX 8

typedef struct {
    int64_t id;
    char name[SG_TENANT_NAME_MAX + 1];
    int64_t created_at;
    int disabled;
    /* quotas and limits */
    long rate_per_min;                /* request rate: sustained requests per minute */
    long burst;                       /* request rate: burst size */
    long max_sessions;                /* concurrent live sessions */
    long max_concurrent_execs;        /* executions, commands and installs in flight at once */
    long execs_per_day;               /* executions per UTC day */
    double exec_seconds_per_day;      /* execution seconds per UTC day */
    double max_timeout;               /* per-execution timeout cap, seconds */
    long max_memory_mb;               /* per-session memory cap */
    double max_cpus;                  /* per-session CPU cap */
    char allowed_langs[SG_LANGS_MAX]; /* "*" or comma-separated: "python,javascript" */
    int network_allowed;
    long idle_timeout;                 /* seconds without use before a session is closed */
    long max_lifetime;                 /* seconds from creation before a session is closed */
    long max_templates;                /* kept templates plus live keep_template sessions */
    char runtime[SG_RUNTIME_NAME_MAX]; /* the sandboxes' OCI runtime: "runc" or "runsc", or "" for the
                                        * proxy's default (JSON null; SQL NULL) */
} sg_tenant_t;

/* The defaults a new tenant gets (documented in the README):
 * rate_per_min 600, burst 60, max_sessions 10, max_concurrent_execs 8, execs_per_day 10000,
 * exec_seconds_per_day 36000, max_timeout 300, max_memory_mb 1024,
 * max_cpus 2, allowed_langs "*", network_allowed 0, idle_timeout 900,
 * max_lifetime 14400, max_templates 5, disabled 0, runtime "" (the proxy's). */
void sg_tenant_defaults(sg_tenant_t *t);

/* The settable fields of a tenant by name — the quota field names above plus
 * "disabled" — as sandgate-admin `tenant set` and the admin API take them.
 * Ranges (inclusive; 0 in a count means none allowed, not unlimited):
 *   rate_per_min 1..1e9    burst 1..1e9          max_sessions 0..1e6
 *   max_concurrent_execs 0..1e6
 *   execs_per_day 0..1e12  exec_seconds_per_day 0..1e12
 *   max_timeout 0.1..86400 max_memory_mb 16..1048576   max_cpus 0.01..1024
 *   allowed_langs "*" or "a,b" of [a-z0-9_+-]{1,31}, < 256 chars in all
 *   network_allowed 0|1    idle_timeout 1..1e9   max_lifetime 1..1e9   disabled 0|1
 *   max_templates 0..1e6   runtime runc|runsc, or default (also "" or null)
 * (booleans also take true/false/yes/no/on/off). sg_store_tenant_update
 * checks the same (sg_tenant_validate) and fails naming the field. */
/* Parses value for field key into t. 0, or -1 with err naming the key. */
int sg_tenant_set_field(sg_tenant_t *t, const char *key, const char *value, char *err, size_t errlen);
/* Checks every field of t against the ranges. 0, or -1 naming the first bad field. */
int sg_tenant_validate(const sg_tenant_t *t, char *err, size_t errlen);
/* Sets the fields a JSON object names (as the admin API takes them: every
 * member but "name"; numbers, booleans or strings, each parsed as
 * sg_tenant_set_field parses its text; null as "", which only runtime
 * takes), then validates the whole. 0, or -1
 * with err naming the first bad field. */
int sg_tenant_set_json(sg_tenant_t *t, json_object *obj, char *err, size_t errlen);
/* 1 if name is 1..64 of [A-Za-z0-9._-]. */
int sg_tenant_name_valid(const char *name);
/* 1 if s is a runtime a tenant may be pinned to: "runc" or "runsc" ("" is
 * none: the proxy's default). */
int sg_tenant_runtime_valid(const char *s);
/* 1 if lang[0..len) is in t->allowed_langs (or that is "*"). */
int sg_tenant_lang_allowed(const sg_tenant_t *t, const char *lang, size_t len);
/* "disabled=0 rate_per_min=600 ... max_templates=5" (every settable field,
 * in the order above) into buf; returns the length snprintf would write. */
int sg_tenant_format(const sg_tenant_t *t, char *buf, size_t len);
/* {"id","name","created_at","disabled", every quota field, "runtime" (null
 * for the proxy's default)}; new reference. */
json_object *sg_tenant_to_json(const sg_tenant_t *t);

/* The settable fields, in the order above: one table for parsing, ranges,
 * output and the store's SQL columns (a field's name is its column). */
typedef enum { SG_TF_LONG, SG_TF_DOUBLE, SG_TF_BOOL, SG_TF_LANGS, SG_TF_RUNTIME } sg_tenant_field_type_t;
typedef struct {
    const char *name;
    sg_tenant_field_type_t type; /* long, double, int (0|1), char[SG_LANGS_MAX] or char[SG_RUNTIME_NAME_MAX] at off */
    size_t off;                  /* in sg_tenant_t */
    double min, max;
} sg_tenant_field_t;
extern const sg_tenant_field_t sg_tenant_fields[];
extern const size_t sg_tenant_nfields;

#endif
