/*
 * policy.h — types only: the limits a sandbox is made with, the policy that
 * bounds what a request may ask for, and a validated create request.
 * validate.h fills them from request bodies; session.h makes sandboxes
 * from them (and needs nothing else of validation).
 */
#ifndef SANDGATE_POLICY_H
#define SANDGATE_POLICY_H

#include "lang.h"

typedef struct {
    double timeout_s; /* default per-execution timeout of the session */
    long memory_mb;   /* memory, and memory + swap */
    double cpus;
    int network;
    long pids;
    long output_bytes; /* per stream */
    long tmpfs_mb;     /* size of /sandbox and of /tmp */
    long results_max;  /* rich results kept per execution (results.h) */
    long result_bytes; /* their bytes, as JSON, per execution */
    long files_max;    /* files out listed per execution */
} sg_limits_t;

typedef struct {
    sg_limits_t defaults;
    double max_timeout_s;
    long max_memory_mb;
    double max_cpus;
    int allow_network;
} sg_policy_t;

typedef struct {
    const sg_lang_t *lang;
    int keep_template;
    sg_limits_t limits;
    const char *image;   /* optional "image" field; NULL if absent */
    const char *owner;   /* optional "owner" (who the gateway creates for): a
                          * template is labelled with it, and only the same
                          * owner may start from it; NULL if absent */
    const char *runtime; /* optional "runtime": "runc" or "runsc" (static
                          * strings, runtime.h); NULL: the proxy's default */
} sg_create_req_t;

#endif
