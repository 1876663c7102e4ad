/*
 * reconcile.h — what the proxy does with containers it finds labelled with
 * its own SANDGATE_PROXY_ID: it removes them. Sessions live in the proxy's
 * memory, so such a container can only be a leftover of a crash (or of a
 * shutdown that could not finish); its agent's state is unknown.
 * Blocking: called before the server accepts requests, and at shutdown.
 */
#ifndef SANDGATE_RECONCILE_H
#define SANDGATE_RECONCILE_H

#include "docker.h"

/* Removes every container labelled sandgate.proxy=<proxy_id>. Returns the
 * number removed, or -1 if Docker could not list them (err set). */
int sg_reconcile(sg_docker_t *d, const char *proxy_id, char *err, size_t errlen);

#endif
