/*
 * lang.h — the languages a sandbox runs, as data: adding one is a
 * Dockerfile under deploy/images/<name>/ plus one entry in lang.c.
 */
#ifndef SANDGATE_LANG_H
#define SANDGATE_LANG_H

#include <stddef.h>

/* The exit status of local_install_cmd when the spec is not in the package
 * store yet (the one failure that sends it to an installer). */
#define SG_LANG_NOT_IN_STORE 100
#define SG_LANG_NOT_IN_STORE_STR "100"

typedef struct {
    const char *name;            /* as in requests: "python" */
    const char *file_path;       /* where the code is written in the sandbox */
    const char *compile_cmd;     /* shell, run as setup stage "compile"; NULL if none */
    const char *run_cmd;         /* shell; $SANDGATE_FILE is file_path (one-shot mode) */
    const char *kernel_cmd;      /* shell; the stateful interpreter (agent_proto.h, "Kernels"); NULL if none */
    const char *package_manager; /* "pip", "npm"; NULL: the language takes no "libraries" (400) */
    /* library installs (install.h); NULL when package_manager is */
    const char *version_sep;       /* "name" + sep + "version": "==" or "@" */
    const char *missing_cmd;       /* shell prefix; quoted names follow; prints the missing ones, a line each
                                    * (untrusted output: libraries.c only matches it against the names) */
    const char *fetch_cmd;         /* installer container: $SANDGATE_SPEC into $SANDGATE_STORE from $SANDGATE_INDEX */
    const char *local_install_cmd; /* sandbox: $SANDGATE_SPEC from the store, exactly the files its manifest
                                    * lists; prints the installed version; SG_LANG_NOT_IN_STORE if absent */
} sg_lang_t;

const sg_lang_t *sg_lang_find(const char *name, size_t len);
size_t sg_lang_count(void);
const sg_lang_t *sg_lang_at(size_t i);
/* The index of an entry of the table (sg_lang_at(i) == lang); sg_lang_count() if none. */
size_t sg_lang_index(const sg_lang_t *lang);
/* "python, javascript" — for error messages. */
const char *sg_lang_names(void);

#endif
