/*
 * session_int.h — internal to the session room: what session.c (the table,
 * a session's start and close), pool.c (the warm pool) and session_ops.c
 * (the connection to a session's agent and the ops queued on it) share.
 * No other module includes it. Loop thread only.
 */
#ifndef SANDGATE_SESSION_INT_H
#define SANDGATE_SESSION_INT_H

#include "session.h"

/* Which list a session's _link is on. */
enum { SG_IN_NONE, SG_IN_TABLE, SG_IN_POOL };

/* session.c */
const sg_sessions_conf_t *sg__sessions_conf(void);
/* Starts a container for a session, made from req; the caller has taken a
 * container slot for it (capacity.h). 0, or -1 when nothing was started
 * (the slot is given back, cb told). */
int sg__session_start(const sg_create_req_t *req, int ephemeral, int pooled, sg_session_ready_cb cb, void *data);
/* Lists s (taking a reference) on the table or its language's pool list,
 * and unlists it (dropping it). */
void sg__session_list(sg_session_t *s, int where);
void sg__session_unlist(sg_session_t *s);

/* pool.c */
void sg__pool_init(void);
void sg__pool_link(sg_session_t *s);
void sg__pool_unlink(sg_session_t *s);
/* A ready pooled container for req (when req's container settings are
 * the pool's), unlisted, its reference the caller's; or NULL. */
sg_session_t *sg__pool_take(const sg_create_req_t *req);
/* A pooled container's start ended: when ok, it is listed ready and its
 * kernel started; when not, its language waits a while before the next. */
void sg__pool_started(sg_session_t *s, int ok);

/* session_ops.c */
/* The agent answered READY on fd (the attach stream, demux its decoder
 * state, early the bytes read past READY): the session is active and its
 * agent's messages are read from now on. */
void sg__agent_connect(sg_session_t *s, int fd, const sg_docker_demux_t *demux, const uint8_t *early, size_t early_len);
/* Handles the agent's whole messages already read. */
void sg__agent_process(sg_session_t *s);
/* Closes the connection to the agent, if any. */
void sg__agent_close(sg_session_t *s);
/* Fails every op queued on s (the one in flight too) with status and why. */
void sg__ops_fail(sg_session_t *s, int status, const char *why);

#endif
