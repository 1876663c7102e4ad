/*
 * lang.h — the languages a sandbox runs, as data: adding one is a
 * Dockerfile under deploy/images/<name>/ plus one entry in lang.c.
 */
#ifndef SANDGATE_LANG_H
#define SANDGATE_LANG_H

#include <stddef.h>

typedef struct {
    const char *name;         /* as in requests: "python" */
    const char *file_path;    /* where the code is written in the sandbox */
    const char *compile_cmd;  /* shell, run as setup stage "compile"; NULL if none */
    const char *run_cmd;      /* shell; $SANDGATE_FILE is file_path (one-shot mode) */
    const char *kernel_cmd;   /* shell; the stateful interpreter (agent_proto.h, "Kernels"); NULL if none */
    const char *libcheck_cmd; /* shell prefix; quoted library names follow; exits non-zero naming what is missing */
    const char *package_manager;
} sg_lang_t;

const sg_lang_t *sg_lang_find(const char *name, size_t len);
size_t sg_lang_count(void);
const sg_lang_t *sg_lang_at(size_t i);
/* "python, javascript" — for error messages. */
const char *sg_lang_names(void);

#endif
