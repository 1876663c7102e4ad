/*
 * install.h — library installs that never give user code the network.
 *
 * A package reaches a sandbox in two steps:
 *   1. fetch: a short-lived installer container (the session's image, on
 *      SANDGATE_INSTALL_NETWORK, nothing but the package manager, which runs
 *      no package code: pip download --only-binary, npm --ignore-scripts)
 *      puts the package and its dependencies into the shared store volume,
 *      from the configured index (a company mirror, or the test's own);
 *   2. install: inside the sandbox, which has no network, the agent installs
 *      it from the store (mounted read-only) into /tmp/sandgate/libs.
 * Step 2 is tried first: a package some session fetched before costs no
 * container and no index at all — the store is the cache.
 *
 * This module is step 1, on worker threads; libraries.c chains the steps.
 */
#ifndef SANDGATE_INSTALL_H
#define SANDGATE_INSTALL_H

#include <json-c/json.h>

#include "proxy.h"
#include "session.h"

typedef struct {
    int ok;
    int timed_out;
    int no_capacity;    /* SANDGATE_MAX_CONTAINERS reached: no installer was started */
    char message[1024]; /* the installer's last output lines, or why it failed */
    double seconds;
} sg_fetch_result_t;

typedef void (*sg_fetch_cb)(void *data, const sg_fetch_result_t *r);

/* Fetches spec ("name==1.0", "name@1.0", or a bare name) for the session's
 * language into the store, with px's install settings. cb runs on the loop thread, never before this
 * returns. The installer counts against SANDGATE_MAX_CONTAINERS (a ready
 * pooled container yields to it); at the cap, no_capacity. */
void sg_install_fetch(const sg_proxy_t *px, sg_session_t *s, const char *spec, sg_fetch_cb cb, void *data);

/* The installer container's configuration (pure; unit tested). */
json_object *sg_install_container_config(const sg_proxy_t *px, const sg_session_t *s, const char *spec);

#endif
