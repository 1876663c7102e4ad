/*
 * store.h — the gateway's durable records in SQLite (WAL): tenants and their
 * quotas, API tokens (hashed), the usage ledger (one row per execution) and
 * session history. The system of record: nothing billable lives only in
 * Redis.
 *
 * The tenant model itself (fields, ranges, defaults) is tenant.h, which
 * this header includes; store_sql.c (connection, schema, statements),
 * store_tenants.c (tenants, tokens), store_ledger.c (usage rows written,
 * sessions), store_journal.c (the usage journal), store_usage.c (the
 * ledger read) and store_templates.c (templates, tenant deletion) are the
 * SQL.
 *
 * Blocking. A sg_store_t is one SQLite connection: use it from one thread
 * at a time (the gateway gives each DB worker thread its own; sandgate-admin
 * uses one). Several connections to one file are safe (WAL, busy timeout).
 * Functions return 0 on success, -1 on error with err set; lookups return
 * 1 found / 0 not found / -1 error.
 */
#ifndef SANDGATE_STORE_H
#define SANDGATE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "tenant.h"
#include "token.h"

typedef struct sg_store sg_store_t;

/* Where the gateway and sandgate-admin find sandgate.db when
 * SANDGATE_DATA_DIR names no other directory. */
#define SG_STORE_DEFAULT_DIR "/var/lib/sandgate"

/* Opens (creating the directory's file <data_dir>/sandgate.db and the schema
 * if needed, and sandgate.db-gen, the generations' signal), WAL mode, busy
 * timeout 5 s, foreign keys on. */
sg_store_t *sg_store_open(const char *data_dir, char *err, size_t errlen);
void sg_store_close(sg_store_t *st);
const char *sg_store_path(const sg_store_t *st);

/* Tenants. Names: 1..64 of [A-Za-z0-9._-]. create fails (-1, err says so) on
 * a duplicate name. update writes every quota field of t (found by t->id). */
int sg_store_tenant_create(sg_store_t *st, const char *name, sg_tenant_t *out, char *err, size_t errlen);
int sg_store_tenant_get(sg_store_t *st, int64_t id, sg_tenant_t *out, char *err, size_t errlen);
int sg_store_tenant_by_name(sg_store_t *st, const char *name, sg_tenant_t *out, char *err, size_t errlen);
int sg_store_tenant_update(sg_store_t *st, const sg_tenant_t *t, char *err, size_t errlen);
/* Calls fn for each tenant in id order. The list functions run fn while their
 * query is open: fn must not call the same list function on st. */
int sg_store_tenant_list(sg_store_t *st, void (*fn)(const sg_tenant_t *t, void *data), void *data, char *err,
                         size_t errlen);

/* Tokens: "sgk_" + 8-char public id + "_" + 43-char secret (base64url of 32
 * random bytes). Only SHA-256 of the whole token is stored, with the public
 * id to find the row; the hash is compared in constant time. create writes
 * the new token (NUL-terminated) into token_out (>= SG_TOKEN_MAX bytes) —
 * the only time it exists in clear. */
typedef struct {
    int64_t id;
    int64_t tenant_id;
    char public_id[9];
    char label[65];
    int64_t created_at;
    int64_t revoked_at; /* 0 if live */
} sg_token_t;

int sg_store_token_create(sg_store_t *st, int64_t tenant_id, const char *label, char *token_out, sg_token_t *out,
                          char *err, size_t errlen);
/* 1 and *tenant filled if token is live and its tenant not disabled; 0 if
 * unknown, malformed or revoked. */
int sg_store_token_auth(sg_store_t *st, const char *token, size_t len, sg_tenant_t *tenant, char *err, size_t errlen);
/* Revokes by public id (or by the whole token, whose secret must then match).
 * 1 revoked (also when it already was: revoked_at keeps the first time),
 * 0 no such token. Takes effect at once: sg_store_token_auth does not cache. */
int sg_store_token_revoke(sg_store_t *st, const char *public_id, char *err, size_t errlen);
int sg_store_token_list(sg_store_t *st, int64_t tenant_id, void (*fn)(const sg_token_t *t, void *data), void *data,
                        char *err, size_t errlen);

/* Usage ledger: one row per execution. Its reads below (total, list,
 * recent, totals_by_tenant) move the usage journal's rows in first
 * (sg_store_usage_catch_up), and fail when that fails. */
typedef struct {
    int64_t tenant_id;
    char session_id[37]; /* "" for ephemeral executes */
    char lang[32];
    char kind[16];     /* "execute", "command", "ephemeral" */
    double started_at; /* unix seconds */
    double duration;   /* execution_time the proxy reported, seconds */
    int exit_code;
    int timed_out;
    int64_t output_bytes;
} sg_usage_t;

int sg_store_usage_add(sg_store_t *st, const sg_usage_t *u, char *err, size_t errlen);
/* Totals of one tenant over [from, to) unix seconds. */
typedef struct {
    int64_t executions;
    double seconds;
    int64_t output_bytes;
    int64_t timed_out;
} sg_usage_total_t;
int sg_store_usage_total(sg_store_t *st, int64_t tenant_id, double from, double to, sg_usage_total_t *out, char *err,
                         size_t errlen);
/* Calls fn for each row of a tenant (tenant_id 0: all) in [from, to), oldest
 * first, at most limit rows (limit <= 0: no limit). */
int sg_store_usage_list(sg_store_t *st, int64_t tenant_id, double from, double to, int limit,
                        void (*fn)(const sg_usage_t *u, void *data), void *data, char *err, size_t errlen);
/* The newest limit rows of every tenant, newest first (for the dashboard). */
int sg_store_usage_recent(sg_store_t *st, int limit, void (*fn)(const sg_usage_t *u, void *data), void *data, char *err,
                          size_t errlen);
/* Executions and seconds of each tenant with rows in [from, to), in tenant
 * id order (output_bytes and timed_out are left 0): of every such row
 * (after_id 0, by the time index), or only of those whose id is above
 * after_id (by the rowid: what was added since a count that saw ids up to
 * after_id — ids only grow, as long as the newest rows are not deleted).
 * *max_id (may be NULL) gets the largest id counted, after_id when none. */
int sg_store_usage_totals_by_tenant(sg_store_t *st, double from, double to, int64_t after_id, int64_t *max_id,
                                    void (*fn)(int64_t tenant_id, const sg_usage_total_t *t, void *data), void *data,
                                    char *err, size_t errlen);

/* Session history. */
typedef struct {
    char id[37];
    int64_t tenant_id;
    char lang[32];
    int64_t created_at;
    int64_t closed_at;     /* 0 while open */
    char close_reason[32]; /* "deleted", "idle", "lifetime", "admin", "proxy_lost", "session_lost" */
    int64_t executions;
    char runtime[8]; /* the OCI runtime the proxy reported ("runc", "runsc"); "" if unknown */
    char proxy[256]; /* the proxy it was placed on (its normalised URL, placement.h); "" before placement */
} sg_session_rec_t;

/* open: inserts s (closed_at and close_reason ignored; created_at 0 = now);
 * -1 on a duplicate id or unknown tenant. close: sets closed_at (0 = now) and
 * reason once; closing a closed or unknown session is not an error (0).
 * count_exec: executions += n; 0 also for an unknown id. */
int sg_store_session_open(sg_store_t *st, const sg_session_rec_t *s, char *err, size_t errlen);
int sg_store_session_close(sg_store_t *st, const char *id, int64_t closed_at, const char *reason, char *err,
                           size_t errlen);
int sg_store_session_count_exec(sg_store_t *st, const char *id, int64_t n, char *err, size_t errlen);
/* 1 found (open or closed), 0 not found. */
int sg_store_session_get(sg_store_t *st, const char *id, sg_session_rec_t *out, char *err, size_t errlen);
/* Open sessions (closed_at = 0), of one tenant or all (tenant_id 0). */
int sg_store_session_list_open(sg_store_t *st, int64_t tenant_id, void (*fn)(const sg_session_rec_t *s, void *data),
                               void *data, char *err, size_t errlen);

/* Generations: counters that move, in the same transaction, with every
 * change to a token or tenant (auth) and every session closed or deleted
 * (sessions), by triggers, whoever writes. A cache filled after reading
 * them is current while they stay the same (core/auth.c). */
typedef struct {
    int64_t auth;
    int64_t sessions;
} sg_store_gen_t;
int sg_store_generations(sg_store_t *st, sg_store_gen_t *out, char *err, size_t errlen);
/* The generations' signal: a number that every connection on this
 * database, in any process on this machine, moves after each commit that
 * moved the generations (store_sql.c). While it stands still, generations
 * read after it was last looked at are current — unless a writer died
 * between its commit and the move, or the database was written by a
 * program other than sandgate: a reader bounds the time it trusts it. */
uint64_t sg_store_generations_signal(const sg_store_t *st);
/* A busy database answers at once (SQLITE_BUSY) rather than after the
 * busy timeout: for the connection of the event loop. Its commits never
 * checkpoint (that would fsync on the loop): the other connections' do,
 * as SQLite's automatic checkpoint would, after a commit that leaves the
 * WAL 1000 frames long. The loop writes little (a session's row); the
 * usage rows go in on the DB threads (the usage journal). */
void sg_store_no_wait(sg_store_t *st);
/* Usage rows in one transaction (a group commit): rows[i] with, when
 * count_session[i], its session's executions += 1. When the transaction
 * fails the rows are written one by one; failed[i] (may be NULL) is set
 * for each row that could not be written (err says the last reason).
 * Returns the number of rows that failed. */
int sg_store_usage_add_batch(sg_store_t *st, const sg_usage_t *const *rows, const int *count_session, size_t n,
                             int *failed, char *err, size_t errlen);

/* The usage journal (store_journal.c): a gateway appends the rows of the
 * executions that end in a turn of its loop to a file of its own, with one
 * write(2), before it answers them; they are moved into the ledger behind
 * (sg_store_usage_catch_up), and every read of the ledger moves first what
 * the journal holds. A file that has reached the disk's page cache
 * survives the gateway killed, as a WAL commit without fsync does; the
 * next catch-up of any gateway, or of sandgate-admin, finds it.
 *
 * The files are <data dir>/SG_USAGE_JOURNAL_DIR/<name>.usage, one line a
 * row, each append's rows ended by a line of its own (only whole appends
 * are moved). Each is made under another name, locked (flock) and then renamed
 * in: a catch-up reads every *.usage, and one it can lock has no writer
 * left; read to its end and on record, it is removed. The ledger keeps
 * how far each file is on record (the table usage_journal) in the
 * transaction that adds its rows: a row is moved once, by whichever
 * catch-up comes first. */
#define SG_USAGE_JOURNAL_DIR "usage-journal"
typedef struct sg_usage_journal sg_usage_journal_t;
/* A new file of this process's own in data_dir's journal directory (made
 * 0700 if missing): NULL with err if it cannot be made. */
sg_usage_journal_t *sg_usage_journal_open(const char *data_dir, char *err, size_t errlen);
/* Appends the rows (count_session[i] as sg_store_usage_add_batch takes it;
 * at most 1024) in one write: 0, or -1 with err and nothing of them in the file (a short
 * write is cut back off it; when even that fails, the file is given up
 * and the next append makes a new one). A file past a few MB is given up
 * for a new one before the append. */
int sg_usage_journal_append(sg_usage_journal_t *j, const sg_usage_t *const *rows, const int *count_session, size_t n,
                            char *err, size_t errlen);
/* Gives the file up (its lock with it): the next catch-up moves the rest
 * and removes it. */
void sg_usage_journal_close(sg_usage_journal_t *j);
/* What a catch-up did. dropped: rows the ledger refused (their tenant
 * deleted meanwhile); drop_err the last reason. torn: bytes that were no
 * whole append, or no row (the end of a file whose writer died inside a
 * write, whose rows were never answered). */
typedef struct {
    long imported;
    long dropped;
    long torn;
    char drop_err[160];
} sg_usage_catch_up_t;
/* Moves into the ledger every row of the journal not yet in it, a file at
 * a time, each in one transaction; removes the files that are done. 0
 * (also when there was nothing), -1 with err (the database busy past the
 * busy timeout, a file that cannot be read): what was moved stays. out
 * may be NULL. The usage reads above call it first; a reader of a
 * session's executions count calls it itself. */
int sg_store_usage_catch_up(sg_store_t *st, sg_usage_catch_up_t *out, char *err, size_t errlen);

/* Templates: the images keep_template sessions leave (lifecycle/templates.c).
 * A row is a tenant's template slot: made when a keep_template session is
 * created (name "" and session_id "" until the proxy has answered), named
 * when the session closes with its template kept, deleted when the
 * template is removed or was not kept. */
typedef struct {
    int64_t id;
    int64_t tenant_id;
    char name[256]; /* "<repo>:<session id>"; "" while the session lives */
    char session_id[37];
    int64_t created_at;
    int64_t size_bytes;
} sg_template_rec_t;

/* Takes a slot for a new keep_template session if the tenant has fewer
 * than max (kept templates plus slots of live keep_template sessions; a
 * slot whose session is gone, or that was never bound within grace_s, no
 * longer counts and is dropped). One write transaction: exact under
 * parallel creates on every gateway sharing the file. 1 and *row, 0 at the
 * quota, -1 on error. */
int sg_store_template_reserve(sg_store_t *st, int64_t tenant_id, long max, int64_t grace_s, int64_t *row, char *err,
                              size_t errlen);
/* The slot's session, once the proxy has made it. */
int sg_store_template_bind(sg_store_t *st, int64_t row, const char *session_id, char *err, size_t errlen);
/* Drops a slot by its row (a create that failed). */
int sg_store_template_release(sg_store_t *st, int64_t row, char *err, size_t errlen);
/* A session closed: with name (its template kept) the slot is named
 * (made if missing); with name NULL the unnamed slot goes. */
int sg_store_template_closed(sg_store_t *st, int64_t tenant_id, const char *session_id, const char *name,
                             int64_t size_bytes, char *err, size_t errlen);
/* 1 and *out if a kept template has that name, 0 if not. */
int sg_store_template_get(sg_store_t *st, const char *name, sg_template_rec_t *out, char *err, size_t errlen);
/* Kept templates (named), of one tenant or all (0), oldest first. */
int sg_store_template_list(sg_store_t *st, int64_t tenant_id, void (*fn)(const sg_template_rec_t *t, void *data),
                           void *data, char *err, size_t errlen);
/* Removes a kept template's row; 1 removed, 0 none. */
int sg_store_template_delete(sg_store_t *st, const char *name, char *err, size_t errlen);

/* Deleting a tenant (its sessions closed and its templates removed first,
 * by the gateway: lifecycle/purge.c). mark: disabled, and listed by
 * list_deleting until purge removes its rows (tokens, usage, sessions,
 * templates, the tenant) in one transaction. 1 done, 0 no such tenant. */
int sg_store_tenant_mark_deleting(sg_store_t *st, int64_t id, char *err, size_t errlen);
int sg_store_tenant_list_deleting(sg_store_t *st, void (*fn)(const sg_tenant_t *t, void *data), void *data, char *err,
                                  size_t errlen);
int sg_store_tenant_purge(sg_store_t *st, int64_t id, char *err, size_t errlen);

/* The SQLite connection, for tests and diagnostics only. */
struct sqlite3;
struct sqlite3 *sg_store_db(sg_store_t *st);

#endif
