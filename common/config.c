#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int sg_config_parse(const sg_cfg_entry_t *e, const char *value, char *err, size_t errlen)
{
    char *end;

    switch (e->type) {
    case SG_CFG_STR:
        *(const char **)e->dst = value;
        return 0;
    case SG_CFG_BOOL:
        if (strcmp(value, "1") == 0 || strcasecmp(value, "true") == 0 || strcasecmp(value, "yes") == 0) {
            *(int *)e->dst = 1;
        } else if (strcmp(value, "0") == 0 || strcasecmp(value, "false") == 0 || strcasecmp(value, "no") == 0 ||
                   value[0] == '\0') {
            *(int *)e->dst = 0;
        } else {
            snprintf(err, errlen, "%s must be 1 or 0 (true/false), not \"%s\"", e->env, value);
            return -1;
        }
        return 0;
    case SG_CFG_INT: {
        errno = 0;
        long v = strtol(value, &end, 10);
        if (errno != 0 || end == value || *end != '\0') {
            snprintf(err, errlen, "%s must be an integer, not \"%s\"", e->env, value);
            return -1;
        }
        if ((double)v < e->min || (double)v > e->max) {
            snprintf(err, errlen, "%s must be between %.0f and %.0f, not %ld", e->env, e->min, e->max, v);
            return -1;
        }
        *(long *)e->dst = v;
        return 0;
    }
    case SG_CFG_DOUBLE: {
        errno = 0;
        double v = strtod(value, &end);
        if (errno != 0 || end == value || *end != '\0' || !isfinite(v)) {
            snprintf(err, errlen, "%s must be a number, not \"%s\"", e->env, value);
            return -1;
        }
        if (v < e->min || v > e->max) {
            snprintf(err, errlen, "%s must be between %g and %g, not %g", e->env, e->min, e->max, v);
            return -1;
        }
        *(double *)e->dst = v;
        return 0;
    }
    }
    snprintf(err, errlen, "%s has an unknown type", e->env);
    return -1;
}

int sg_config_load(const sg_cfg_entry_t *table, size_t n, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        const char *v = getenv(table[i].env);
        if (v == NULL)
            v = table[i].def;
        if (sg_config_parse(&table[i], v, err, errlen) != 0)
            return -1;
    }
    return 0;
}

void sg_config_print(const sg_cfg_entry_t *table, size_t n, FILE *fp)
{
    fprintf(fp, "| variable | default | meaning |\n|---|---|---|\n");
    for (size_t i = 0; i < n; i++)
        fprintf(fp, "| `%s` | `%s` | %s |\n", table[i].env, table[i].def[0] ? table[i].def : "(empty)", table[i].help);
}

int sg_config_main(int argc, char **argv, const sg_cfg_entry_t *table, size_t n, const char *prog, const char *what)
{
    char err[512];
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "--config") == 0)) {
        printf("%s: %s. Settings (environment):\n\n", prog, what);
        sg_config_print(table, n, stdout);
        return 0;
    }
    if (sg_config_load(table, n, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 2;
    }
    return -1;
}
