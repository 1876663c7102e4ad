/*
 * adopt.h — sessions survive their proxy (docs/proxy-api.md, "Restarts").
 *
 * What a proxy knows of its sessions is written, as it changes, to a state
 * file of its own, $SANDGATE_PROXY_STATE_DIR/<proxy id>.sessions (JSON,
 * replaced atomically: a temporary file, then a swap; no fsync, see
 * write_state in adopt.c), and to its journal beside it (<proxy
 * id>.sessions.journal: a change appends the records it touched, and the
 * journal is folded into the state file once it outgrows it; see "the
 * journal" in adopt.c): each session's
 * settings (language, image, runtime, limits, owner, keep_template), its
 * container and its counters (executions, last_used_at: written at most a
 * second late), and the ids of sessions lost at a restart. A proxy that
 * starts with the same id reads it back (sg_adopt_prepare), keeps each
 * session whose container still runs, re-attaches to its agent and
 * resynchronises with it (agent_proto.h, "Resynchronisation") in the
 * background (sg_adopt_start): requests for it wait in its queue meanwhile.
 * A session whose container is gone, or whose agent does not answer the
 * resynchronisation (or with another protocol version), is lost: its
 * container is removed and its id answers 404 session_lost for
 * SG_ADOPT_LOST_KEEP_S.
 *
 * Threading: sg_adopt_prepare and sg_adopt_leave block on Docker (main
 * thread, before and after the loop runs); the rest runs on the loop.
 */
#ifndef SANDGATE_ADOPT_H
#define SANDGATE_ADOPT_H

#include <stddef.h>

#include "docker.h"

#define SG_ADOPT_LOST_KEEP_S (24 * 3600) /* how long a lost id is remembered */
#define SG_ADOPT_LOST_MAX 4096           /* lost ids remembered at most (the oldest go first) */

/* Where the state file goes: dir/<proxy_id>.sessions (dir is made when
 * missing). 0, or -1 (err): the proxy then runs without one, and its
 * sessions do not survive it. */
int sg_adopt_init(const char *dir, const char *proxy_id, char *err, size_t errlen);

/* At start, before the loop runs (blocking): reads the state file, lists
 * the containers labelled with proxy_id and removes every one that is not
 * the running container of a recorded session (pool containers, one-shot
 * runs, installers, anything unknown) — never the lease. The recorded
 * sessions without a running container are lost. -1 (err) when Docker
 * cannot list them; a state file that cannot be read is logged and
 * ignored. *adoptable gets how many sessions sg_adopt_start will adopt,
 * *removed the containers removed. */
int sg_adopt_prepare(sg_docker_t *d, const char *proxy_id, int *adoptable, int *removed, char *err, size_t errlen);

/* Once sessions are set up (sg_sessions_init) and the loop is there: lists
 * each adoptable session and re-attaches to its agent in the background. */
void sg_adopt_start(double max_exec_timeout_s);

/* Gives up the resynchronisations under way (shutdown): their sessions
 * are lost. */
void sg_adopt_abort(void);

/* 1 if id (len bytes) is a session lost at a restart. */
int sg_adopt_is_lost(const char *id, size_t len);
/* Forgets a lost id (its DELETE): 1 if it was one. */
int sg_adopt_forget_lost(const char *id, size_t len);

/* Once a second: writes the records of the sessions whose counters moved. */
void sg_adopt_tick(void);

/* Writes what changed now (a session listed or unlisted): its records to
 * the journal, or the state file whole (adopt.c). */
void sg__adopt_changed(void);

/* At exit, the loop stopped and the Docker calls done (blocking).
 * keep_sessions (SIGUSR2, an upgrade): the state file is written, and every
 * container of proxy_id but the live sessions' (and the lease) is removed.
 * Else (SIGTERM): every container of proxy_id is removed but the lease, and
 * the state file goes. Returns the containers removed, -1 (err) if Docker
 * could not list them. */
int sg_adopt_leave(sg_docker_t *d, const char *proxy_id, int keep_sessions, char *err, size_t errlen);

#endif
