/*
 * sglibs.h — support for the library-install tests (integration and
 * security): a package index of their own on loopback, the packages it
 * serves (wheels, npm tarballs, built here byte by byte), the store volume
 * and its installer containers, and the proxy's install call.
 *
 * No public index is needed: the index is a tiny HTTP/1.0 static file server
 * on 127.0.0.1 (threads of the test process) that records every request's
 * path, so a test can tell what an installer fetched, or that nothing was.
 * Installers reach it when the proxy runs them on the host network
 * (SANDGATE_INSTALL_NETWORK=host).
 *
 * Threads: like sgtest.h (functions that assert: the test thread only).
 */
#ifndef SANDGATE_SGLIBS_H
#define SANDGATE_SGLIBS_H

#include "sgtest.h"

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

/* ---- files --------------------------------------------------------------- */

/* mkdir -p (asserts). */
void sglibs_mkdirs(const char *path);
/* Writes root/rel, making directories as needed (asserts). */
void sglibs_write(const char *root, const char *rel, const void *data, size_t n);
/* rm -rf (no assertions; "" does nothing). */
void sglibs_rm_tree(const char *path);
/* nbytes (<= 16) random bytes as 2*nbytes hex digits and a NUL; 0 or -1. */
int sglibs_random_hex(char *out, size_t nbytes);
/* A suite's private directory "$TMPDIR/<name>-XXXXXX" (/tmp without
 * TMPDIR) into dir (size bytes), the index's document root "<dir>/www"
 * into www (wsize bytes), and nbytes random bytes as hex in hex (as
 * sglibs_random_hex()). 0, or -1 after perror() with dir "" (for a group
 * setup; sglibs_rm_tree(dir) removes it). */
int sglibs_suite_dir(char *dir, size_t size, char *www, size_t wsize, const char *name, char *hex, size_t nbytes);
/* A suite's Python package: "<stem>_<hex>" (distribution and module) into
 * name and its PEP 503 name "<stem>-<hex>" into norm, size bytes each. */
void sglibs_py_names(const char *stem, const char *hex, char *name, char *norm, size_t size);

/* ---- the index server ---------------------------------------------------- */

typedef struct sglibs_server sglibs_server_t;

/* Serves the files under root on 127.0.0.1 (a free port; a directory serves
 * its index.html, else its index.json). hold: accept every connection and
 * never answer (root unused). NULL when it cannot listen. */
sglibs_server_t *sglibs_server_start(const char *root, bool hold);
/* Stops accepting, waits (up to 10 s) for answers under way, closes every
 * connection. Counters stay readable. Idempotent. */
void sglibs_server_stop(sglibs_server_t *s);
/* Stops (if needed) and frees; NULL does nothing. */
void sglibs_server_free(sglibs_server_t *s);
int sglibs_port(const sglibs_server_t *s);
/* Starts a proxy of its own (proxy_id) whose installers reach index (pip
 * and npm) over the host's network and keep what they install on the
 * Docker volume store_volume: SANDGATE_POOL_SIZE=0,
 * SANDGATE_INSTALL_TIMEOUT=install_timeout_s and the "KEY=VALUE" of more
 * (NULL-terminated, may be NULL). NULL after printing why. */
sgtest_proxy_t *sglibs_proxy_start(const char *proxy_id, const sglibs_server_t *index, const char *store_volume,
                                   int install_timeout_s, const char *const *more);
/* Requests so far whose path starts with prefix ("" for all). */
int sglibs_hits(sglibs_server_t *s, const char *prefix);
/* Requests so far. */
int sglibs_total(sglibs_server_t *s);
/* Connections accepted so far. */
int sglibs_accepted(sglibs_server_t *s);
/* true when nothing listens on 127.0.0.1:port any more. */
bool sglibs_port_closed(int port);

/* ---- packages ------------------------------------------------------------ */

/* Writes root/packages/<dist>-<version>[-<build>]-py3-none-any.whl: module
 * <dist> whose __init__.py is init_py, or when NULL "VALUE = 42", VERSION =
 * version and double(x). build NULL: no build tag. Its file name goes to
 * file (cap bytes). */
void sglibs_wheel(const char *root, const char *dist, const char *version, const char *build, const char *init_py,
                  char *file, size_t cap);
/* Writes root/simple/<norm>/index.html (PEP 503) linking the n files of
 * root/packages/ with their #sha256=, at http://127.0.0.1:port, and
 * root/simple/index.html listing <norm>. */
void sglibs_simple_index(const char *root, int port, const char *norm, char *const *files, size_t n);
/* Writes the npm tarball root/<name>/-/<name>-<version>.tgz (package.json
 * with main index.js, and index.js = index_js) and the registry document
 * root/<name>/index.json naming that one version, latest. The tarball's file
 * name goes to tgz (cap bytes). Unscoped names only. */
void sglibs_npm_package(const char *root, int port, const char *name, const char *version, const char *index_js,
                        char *tgz, size_t cap);

/* ---- Docker: installers, the store volume --------------------------------- */

typedef struct timespec sglibs_wall_t;
sglibs_wall_t sglibs_wall_now(void);
/* Installer containers of proxy pid created since `since` (Docker's event
 * log: an installer removed long ago still counts). Asserts. */
int sglibs_installers_created_since(const char *pid, sglibs_wall_t since);
/* Installer containers of proxy pid that exist now. Asserts. */
int sglibs_installers_now(const char *pid);
/* How many containers of proxy pid carry the label extra ("key=value")
 * too (asserts that Docker answers). */
int sglibs_count_labelled(const char *pid, const char *extra);
/* GET /volumes/<name>: 200 exists, 404 not. */
long sglibs_volume_status(const char *name);
/* DELETE /volumes/<name>?force=1: the HTTP status (204, or 404 if absent). */
long sglibs_volume_remove(const char *name);
/* For a teardown (no assertions): stops the proxy *pp of proxy_id (may be
 * NULL: nothing started) after closing its sessions, force-removes what it
 * left (sgtest_proxy_finish), and removes its store volume (volume "": none).
 * 0, or -1 if anything was left. */
int sglibs_proxy_finish(sgtest_proxy_t **pp, const char *proxy_id, const char *volume, double removal_s);
/* Runs `sh -c script` as uid 1000 in a container of image (no network,
 * labelled sandgate.proxy=<label_proxy_id>) with the volume mounted
 * read-write at /opt/sandgate/store, as an installer has it; removes it.
 * Returns its exit status (asserts that it ran); *out (may be NULL) gets
 * its stdout and stderr (malloc'd). */
int sglibs_volume_run(const char *volume, const char *image, const char *label_proxy_id, const char *script,
                      char **out);

/* ---- the proxy's library calls (assert) ----------------------------------- */

/* The fields of every POST /sessions/{id}/libraries reply, and that they
 * agree: installed_version is a string exactly when success is true. */
void sglibs_check_install_shape(json_object *o);
/* POST /sessions/{sid}/libraries {"package", "version" if not NULL}: the
 * reply, whatever it is, in *out (sgtest_call_json()'s return). */
int sglibs_post_library(const sgtest_proxy_t *p, const char *sid, const char *package, const char *version,
                        sgtest_reply_t *out);
/* POST /sessions/{sid}/libraries; version NULL leaves the field out. The
 * parsed 200 reply (shape checked); *seconds gets the call's wall time. */
json_object *sglibs_install(const sgtest_proxy_t *p, const char *sid, const char *package, const char *version,
                            double *seconds);
/* success, installed_version == version, from_store, installation_time > 0 */
void sglibs_expect_installed(json_object *o, const char *version, bool from_store);

#endif
