/*
 * docker.h — a blocking client of the Docker Engine API, over the unix
 * socket (or tcp://) named by DOCKER_HOST, with libcurl.
 *
 * Blocking on purpose: it is called only from worker threads (workq.h), one
 * sg_docker_t per thread, so the event loop never waits on Docker.
 * Every function returns 0 or -1; on -1, err holds a sentence, and
 * *status (where given) the HTTP status Docker answered (0 if none).
 */
#ifndef SANDGATE_DOCKER_H
#define SANDGATE_DOCKER_H

#include <json-c/json.h>
#include <stddef.h>

#include "buf.h"

typedef struct sg_docker sg_docker_t;

/* Process-wide: parses DOCKER_HOST ("" or NULL means unix:///var/run/docker.sock)
 * and sets the API version used in every path. api_version may be "" to ask
 * the engine (GET /_ping, header Api-Version) on the first sg_docker_ping.
 * A tcp:// engine is reached over TLS as Docker's own client does: with
 * cert_path (ca.pem, cert.pem, key.pem) non-empty, or tls_verify non-empty
 * (any value; the directory is then ~/.docker when cert_path is empty); the
 * engine's certificate is verified (chain to ca.pem, host name or IP) only
 * with tls_verify non-empty. NULLs mean "". Unreadable or mismatched files
 * fail here. Without a port: 2376 with TLS, 2375 without. */
int sg_docker_setup(const char *docker_host, const char *api_version, const char *tls_verify, const char *cert_path,
                    char *err, size_t errlen);
/* How the engine is reached, for the log: "unix socket", "tcp, TLS, …". */
const char *sg_docker_transport(void);
/* Frees what sg_docker_setup made (the TLS context), at exit. */
void sg_docker_cleanup(void);
const char *sg_docker_api_version(void);

sg_docker_t *sg_docker_create(void);
void sg_docker_destroy(sg_docker_t *d);
/* The calling thread's own handle, made on first use, freed when the
 * thread ends. */
sg_docker_t *sg_docker_thread(void);

/* One request; body may be NULL. The reply body goes into resp (capped). */
int sg_docker_request(sg_docker_t *d, const char *method, const char *path, const char *body, size_t body_len,
                      long *status, sg_buf_t *resp, char *err, size_t errlen);

/* GET /_ping and GET /version: fills version (e.g. "20.10.24") and api
 * (e.g. "1.41"); the first successful ping fixes the API version when none
 * was configured. */
int sg_docker_ping(sg_docker_t *d, char version[32], char api[16], char *err, size_t errlen);
/* GET /info: *out is the engine's Runtimes object (runtime name -> entry),
 * an empty object when the engine lists none. */
int sg_docker_runtimes(sg_docker_t *d, json_object **out, char *err, size_t errlen);

/* POST /containers/create with config (not consumed); id gets the full id. */
int sg_docker_container_create(sg_docker_t *d, json_object *config, char id[72], char *err, size_t errlen);
int sg_docker_container_start(sg_docker_t *d, const char *id, char *err, size_t errlen);
/* DELETE /containers/{id}?force=1&v=1: kills and removes in one call; a
 * container already gone counts as success. */
/* Whether the executable a created container would start (its Path) is
 * in its filesystem: GET /containers/{id}/json, HEAD .../archive. 1 yes (or
 * a bare name, found through PATH), 0 no, -1 (err) when Docker fails. */
int sg_docker_container_entrypoint_exists(sg_docker_t *d, const char *id, char *err, size_t errlen);
int sg_docker_container_remove(sg_docker_t *d, const char *id, char *err, size_t errlen);
/* POST /commit: repo:tag from the container; image_id gets the new id.
 * config (JSON text, NULL for "{}") overrides the container's config in the
 * image (Docker merges the rest, labels included, from the container). */
int sg_docker_container_commit(sg_docker_t *d, const char *id, const char *repo, const char *tag, const char *config,
                               char image_id[80], char *err, size_t errlen);
/* POST /containers/{id}/pause. */
int sg_docker_container_pause(sg_docker_t *d, const char *id, char *err, size_t errlen);
/* POST /containers/{id}/unpause. */
int sg_docker_container_unpause(sg_docker_t *d, const char *id, char *err, size_t errlen);
/* GET /containers/{id}/archive?path=PATH: the tar into out, whose cap
 * bounds it (a larger one fails, err saying so). Works on a running or
 * paused container, and reads volumes mounted in it (not tmpfs mounts). */
int sg_docker_archive_get(sg_docker_t *d, const char *id, const char *path, sg_buf_t *out, char *err, size_t errlen);
/* PUT /containers/{id}/archive?path=PATH (which must exist): extracts tar
 * there. On a read-only root only a volume is writable. */
int sg_docker_archive_put(sg_docker_t *d, const char *id, const char *path, const void *tar, size_t len, char *err,
                          size_t errlen);
/* GET /containers/json?all=1&filters={"label":[label]}; *out is the array. */
int sg_docker_container_list(sg_docker_t *d, const char *label, json_object **out, char *err, size_t errlen);
/* 1 if the image exists locally, 0 if not, -1 on error. With id non-NULL,
 * the image's id ("sha256:...") goes there. */
int sg_docker_image_exists(sg_docker_t *d, const char *image, char *err, size_t errlen);
int sg_docker_image_id(sg_docker_t *d, const char *image, char id[80], char *err, size_t errlen);
/* GET /images/{image}/json: 1 and *out (the description), 0 if there is no
 * such image, -1 on error. */
int sg_docker_image_inspect(sg_docker_t *d, const char *image, json_object **out, char *err, size_t errlen);
/* GET /images/json?filters={"label":[label]}; *out is the array. */
int sg_docker_image_list(sg_docker_t *d, const char *label, json_object **out, char *err, size_t errlen);
/* DELETE /images/{image} (no force: an image a container uses is refused,
 * 409). 0 when removed or already gone (*status 200 or 404), -1 otherwise
 * with *status Docker's answer (0 if none). */
int sg_docker_image_remove(sg_docker_t *d, const char *image, long *status, char *err, size_t errlen);

/* POST /containers/{id}/wait, bounded by timeout_ms: the exit status. */
int sg_docker_container_wait(sg_docker_t *d, const char *id, long timeout_ms, long *exit_code, char *err,
                             size_t errlen);
/* The last lines of a container's stdout and stderr, interleaved, appended
 * to out (up to its cap). */
int sg_docker_container_logs(sg_docker_t *d, const char *id, sg_buf_t *out, char *err, size_t errlen);
/* POST /volumes/create (an existing volume of that name is fine); labels
 * is not consumed. DELETE /volumes/{name} (a missing one is fine; one that a
 * container still uses is an error). */
int sg_docker_volume_create(sg_docker_t *d, const char *name, json_object *labels, char *err, size_t errlen);
int sg_docker_volume_remove(sg_docker_t *d, const char *name, char *err, size_t errlen);

/* The bridge network `name` with traffic between its containers off
 * (com.docker.network.bridge.enable_icc "false"): created with labels (not
 * consumed) when missing; one that exists must have that option, or this
 * fails rather than put sandboxes where they can reach each other. */
int sg_docker_network_isolated(sg_docker_t *d, const char *name, json_object *labels, char *err, size_t errlen);

/* POST /containers/{id}/attach with stdin, stdout and stderr, hijacked:
 * returns in *fd a connected socket (blocking mode, close-on-exec) on which
 * the container's stdin is written raw and its stdout/stderr arrive as
 * multiplexed frames (docker_stream.h). timeout_ms bounds the handshake.
 * Over TLS the descriptor is a socketpair's end bridged to the engine by a
 * relay thread (docker_tls.h); a unix socket or plain tcp:// engine's is the
 * connection itself. */
int sg_docker_attach(const char *id, int timeout_ms, int *fd, char *err, size_t errlen);

#endif
