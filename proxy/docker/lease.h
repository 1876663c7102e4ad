/*
 * lease.h — one live proxy per proxy id on an engine (docs/proxy-api.md,
 * "Restarts"). The lease is a container named sandgate-lease-<proxy id>
 * (labels sandgate.lease=<id>, sandgate.kind=lease: not sandgate.proxy,
 * which marks the sandboxes a proxy counts as its containers): runc, no network,
 * 16 MiB, AutoRemove, running `cat` on its stdin. Its proxy creates it at
 * start, before anything else touches containers, and keeps the attach
 * connection to it open for its whole life. However the proxy ends (exit,
 * crash, kill -9), the kernel closes that connection, Docker closes the
 * container's stdin (StdinOnce), `cat` exits and the container removes
 * itself: so a running lease means a live proxy with that id, and the name
 * is held by at most one container, atomically, by the engine.
 *
 * Blocking (Docker calls): at start and at shutdown, on the main thread.
 */
#ifndef SANDGATE_LEASE_H
#define SANDGATE_LEASE_H

#include <stddef.h>

#include "docker.h"

#define SG_LEASE_PREFIX "sandgate-lease-"

/* How long a lease found running may take to end (a proxy killed an instant
 * ago: Docker has yet to see its connection close) before it counts as
 * held by a live proxy, ms. */
#define SG_LEASE_WAIT_MS 5000

/* Takes the lease of proxy_id, its container made from image: 0 and *fd
 * the attach connection (keep it open; close-on-exec); 1 when a live proxy
 * holds it (err names the id and the container; nothing was touched); -1
 * on a Docker error (err). */
int sg_lease_take(sg_docker_t *d, const char *proxy_id, const char *image, int *fd, char *err, size_t errlen);

/* Ends the lease (at shutdown): closes fd and removes the container. */
void sg_lease_release(sg_docker_t *d, const char *proxy_id, int fd);

#endif
