/*
 * runtime.h — which OCI runtime the proxy's sandboxes run on
 * (SANDGATE_RUNTIME): "runsc" (gVisor: a second kernel between the
 * sandbox and the host's) or "runc" (the host's kernel, namespaces and
 * cgroups only). "auto" takes runsc when the engine offers it, else runc
 * with a warning. Installer containers always run on runc (they only run
 * the package manager, and need the network).
 */
#ifndef SANDGATE_RUNTIME_H
#define SANDGATE_RUNTIME_H

#include <json-c/json.h>
#include <stddef.h>

#define SG_RUNTIME_RUNSC "runsc"
#define SG_RUNTIME_RUNC "runc"
/* The runtime of installer containers. */
#define SG_RUNTIME_INSTALLER SG_RUNTIME_RUNC

/* The runtimes a request may name ("runtime": README "Runtimes"), by index:
 * 0 runc, 1 runsc (the pools and the metrics are kept per index). */
#define SG_RUNTIME_COUNT 2
/* The static name of index i (< SG_RUNTIME_COUNT). */
const char *sg_runtime_at(size_t i);
/* The static name that name[0..len) spells ("runc" or "runsc"), else NULL. */
const char *sg_runtime_find(const char *name, size_t len);
/* The index of a runtime name (compared by content); SG_RUNTIME_COUNT when
 * it is neither. */
size_t sg_runtime_index(const char *name);
/* The runtimes the engine offers, as bits (1 << index): runc always (every
 * engine's own), runsc when the Runtimes object of GET /info lists it. */
unsigned sg_runtime_offered(json_object *engine_runtimes);
/* A comma-separated list of runtime names (SANDGATE_POOL_RUNTIMES; "" is
 * none) into bits (1 << index). 0, or -1 with err naming the bad entry. */
int sg_runtime_parse_list(const char *list, unsigned *bits, char *err, size_t errlen);

/* Picks the runtime for `setting` ("runsc", "runc" or "auto") given the
 * engine's runtimes (the Runtimes object of GET /info; NULL: unknown).
 * Sets *runtime to a static string; under "auto" without runsc, writes why
 * into warning (else warning is ""). -1 with err set when the setting is
 * not one of the three, or names a runtime the engine does not offer. */
int sg_runtime_choose(const char *setting, json_object *engine_runtimes, const char **runtime, char *warning,
                      size_t warnlen, char *err, size_t errlen);

#endif
