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

/* Picks the runtime for `setting` ("runsc", "runc" or "auto") given the
 * engine's runtimes (the Runtimes object of GET /info; NULL: unknown).
 * Sets *runtime to a static string; under "auto" without runsc, writes why
 * into warning (else warning is ""). -1 with err set when the setting is
 * not one of the three, or names a runtime the engine does not offer. */
int sg_runtime_choose(const char *setting, json_object *engine_runtimes, const char **runtime, char *warning,
                      size_t warnlen, char *err, size_t errlen);

#endif
