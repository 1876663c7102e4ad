/*
 * proxy.h — the proxy's context: the process-wide settings main() reads
 * once (the configuration table) and the loop's shared resources, handed
 * to the modules that need them; read-only once the loop runs.
 *
 * Sessions have a configuration of their own (session.h); this holds what
 * is not theirs: the install settings and the blocklist (install.h,
 * libraries.h), the file cap of the files routes, what GET /health says.
 */
#ifndef SANDGATE_PROXY_H
#define SANDGATE_PROXY_H

#include <h2o.h>

#include "workq.h"

/* Library installs (install.h). */
typedef struct {
    const char *store_volume; /* the package store volume; "" disables installs */
    const char *network;      /* NetworkMode of installer containers */
    const char *pip_index_url;
    const char *npm_registry;
    long timeout_ms;       /* of one fetch, and of one install in a sandbox */
    const char *blocklist; /* package names refused, comma-separated (NULL: none) */
} sg_install_conf_t;

typedef struct sg_proxy {
    const char *id; /* SANDGATE_PROXY_ID: the sandgate.proxy label of its containers */
    h2o_loop_t *loop;
    sg_workq_t *workq;           /* every Docker call runs on it */
    const char *template_repo;   /* keep_template images: "<repo>:<session id>" */
    long max_file_bytes;         /* largest upload or download of the files routes */
    const char *runtime_warning; /* why the sandboxes are not on runsc under SANDGATE_RUNTIME=auto ("" when they are) */
    sg_install_conf_t install;
} sg_proxy_t;

#endif
