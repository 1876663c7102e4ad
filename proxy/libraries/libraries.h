/*
 * libraries.h — making libraries importable in a session (install.h has the
 * design): install one package (POST /sessions/{id}/libraries, pip_install
 * of seed 004), or make sure a list is there before code runs (the
 * `libraries` field of an execute).
 *
 * Loop thread. Each step is an op on the session (so it queues with the
 * session's executions) or an installer job.
 */
#ifndef SANDGATE_LIBRARIES_H
#define SANDGATE_LIBRARIES_H

#include <json-c/json.h>

#include "proxy.h"
#include "session.h"

typedef struct {
    int success;
    int http_status;    /* 200 unless the sandbox itself failed (502/504) or no installer could start (503) */
    char message[1200]; /* a sentence, then the tool's own last lines */
    char installed_version[65];
    double installation_time; /* seconds */
    int from_store;           /* 1 when no installer was needed */
} sg_lib_result_t;

typedef void (*sg_lib_cb)(void *data, const sg_lib_result_t *r);

/* The proxy's context (its install settings and blocklist), handed once by
 * main() before any other call; NULL (or never called): no blocklist and no
 * store. */
void sg_libraries_init(const sg_proxy_t *px);

/* Checks name, version and the blocklist (the context's, sg_libraries_init)
 * for the session's language. 0, or -1 with a sentence in err (for a 400). */
int sg_lib_check(const sg_lang_t *lang, const char *name, const char *version, char *err, size_t errlen);

/* Installs name (version may be NULL or "latest"). Checks them with
 * sg_lib_check itself and refuses what fails (the callback gets the reason):
 * nothing reaches an installer that the check did not pass. */
void sg_lib_install(sg_session_t *s, const char *name, const char *version, sg_lib_cb cb, void *data);

/* Installs whatever of libs (an array of names, already checked) is not
 * importable yet; success when all are. Which are missing is asked of the
 * sandbox (lang->missing_cmd), so that answer only chooses among libs: a
 * line that is not exactly one of them is ignored. */
void sg_lib_ensure(sg_session_t *s, json_object *libs, sg_lib_cb cb, void *data);

/* Sets missing[i] for each names[i] (of n) that a line of out[0..len)
 * names exactly, once for names given twice; other lines are ignored
 * (logged at debug). Returns how many were newly marked. Pure. */
size_t sg_lib_match_missing(char *const *names, size_t n, const char *out, size_t len, unsigned char *missing);

#endif
