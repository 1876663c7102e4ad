/*
 * validate.h — request bodies checked against the proxy's policy, as pure
 * functions (no I/O), so every rule has a unit test.
 *
 * Each function returns 0, or -1 with *e filled: the HTTP status, a machine
 * code and a sentence that names the offending field.
 */
#ifndef SANDGATE_VALIDATE_H
#define SANDGATE_VALIDATE_H

#include <json-c/json.h>
#include <stddef.h>

#include "http.h"
#include "lang.h"
#include "policy.h"

/* A refused request: the 400 (or other) answer it gets. */
typedef sg_http_err_t sg_verr_t;

#define SG_MAX_LIBRARIES 32
#define SG_MAX_PATH 1024

/* 1 if owner[0..len) is 1..64 of [A-Za-z0-9._-]. */
int sg_validate_owner(const char *owner, size_t len);
/* POST /sessions body. "runtime", when present and not null, must be
 * "runc" or "runsc" (400 invalid_runtime); "runsc" with "network": true is
 * refused too (400 invalid_runtime: runsc's sandboxes have no network). */
int sg_validate_create(json_object *body, const sg_policy_t *pol, sg_create_req_t *out, sg_verr_t *e);

typedef struct {
    const char *code; /* code (execute) or command (commands); inside body */
    size_t code_len;
    json_object *libraries; /* array of valid names, or NULL */
    double timeout_s;
    const sg_lang_t *lang; /* POST /execute only */
    const char *runtime;   /* POST /execute only: as sg_create_req_t's */
} sg_exec_req_t;

/* POST /sessions/{id}/execute (field "code"), POST /sessions/{id}/commands
 * (field "command") and POST /execute (also "lang", default python, and
 * "runtime" as for a create).
 * session_timeout_s is the default when the body has none. */
int sg_validate_exec(json_object *body, const char *field, int want_lang, double session_timeout_s,
                     const sg_policy_t *pol, sg_exec_req_t *out, sg_verr_t *e);

/* "libraries" (as sg_validate_exec left it) for a language: 400 when the
 * language takes none (package_manager NULL: the compiled languages).
 * sg_validate_exec checks it when the body names the language; the session
 * routes check it against the session's language. */
int sg_validate_libraries_for(const sg_lang_t *lang, json_object *libraries, sg_verr_t *e);

/* A library name: PEP 508 / npm-like, [A-Za-z0-9] then [A-Za-z0-9._-],
 * and for npm an optional @scope/ prefix; at most 214 bytes. */
int sg_validate_library_name(const char *name, size_t len, const char *package_manager);

/* A path for the files routes: relative to /sandbox, or absolute under it.
 * Refuses empty, NUL, "..", "." only, and absolute paths elsewhere. On
 * success out gets the path relative to /sandbox (no leading slash). */
int sg_validate_path(const char *p, size_t len, char *out, size_t outlen, sg_verr_t *e);

/* Quotes s for /bin/sh in single quotes into out. -1 if it does not fit. */
int sg_shell_quote(const char *s, size_t len, char *out, size_t outlen);

#endif
