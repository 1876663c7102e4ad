/*
 * config.h — configuration as one declarative table per program:
 * {environment variable, type, default, bounds, help}. Read once at start,
 * validated, then read-only (as Redis's static_configs[]).
 */
#ifndef SANDGATE_CONFIG_H
#define SANDGATE_CONFIG_H

#include <stddef.h>
#include <stdio.h>

typedef enum { SG_CFG_STR, SG_CFG_INT, SG_CFG_DOUBLE, SG_CFG_BOOL } sg_cfg_type_t;

typedef struct {
    const char *env; /* environment variable */
    sg_cfg_type_t type;
    const char *def; /* default, as it would be written in the environment */
    double min, max; /* bounds for INT and DOUBLE (inclusive) */
    void *dst;       /* char ** for STR, long * for INT, double * for DOUBLE, int * for BOOL */
    const char *help;
} sg_cfg_entry_t;

/* Sets every dst from its variable or its default. Returns 0, or -1 with a
 * sentence naming the variable in err. STR values point into the environment
 * or the table's defaults: they live as long as the process. */
int sg_config_load(const sg_cfg_entry_t *table, size_t n, char *err, size_t errlen);
/* Parses one value as the loader would; for unit tests and callers that
 * validate user input against the same rules. */
int sg_config_parse(const sg_cfg_entry_t *e, const char *value, char *err, size_t errlen);
/* The start of a server's main(): with --help (or --config) prints what
 * the program is and its table, and returns 0; on a bad setting prints it
 * and returns 2; otherwise loads the table and returns -1 (go on). */
int sg_config_main(int argc, char **argv, const sg_cfg_entry_t *table, size_t n, const char *prog, const char *what);
/* Prints the table as Markdown rows: | `VAR` | default | help |. */
void sg_config_print(const sg_cfg_entry_t *table, size_t n, FILE *fp);

#endif
