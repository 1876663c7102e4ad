/*
 * adopt.c — sessions surviving their proxy (adopt.h): the state file, the
 * adoption of the sessions it names at start, their agents resynchronised
 * (agent_proto.h), the ids of those lost.
 */
#include "adopt.h"
#include "capacity.h"
#include "docker_stream.h"
#include "lang.h"
#include "log.h"
#include "runtime.h"
#include "session_life.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define STATE_VERSION 1
#define STATE_MAX_BYTES (64u << 20)
#define JOURNAL_MIN (4u << 10)                  /* a journal shorter than this is never folded */
#define JOURNAL_MAX_BYTES (3 * STATE_MAX_BYTES) /* what a reader takes of one at most */
#define ATTACH_TIMEOUT_MS 10000
#define RESYNC_GRACE_MS 10000     /* past the longest execution an agent may be finishing */
#define RESYNC_WINDOW (64u << 10) /* stdout bytes searched at once */

static char path[4096];  /* "" when the proxy runs without a state file */
static char jpath[4200]; /* its journal, path + ".journal" */
static int suspended;    /* while sg_adopt_start lists sessions */
static uint64_t saved_sig;
static json_object *pending; /* the sessions sg_adopt_start adopts (records) */
static uint64_t resync_ms;
static atomic_int aborting;

typedef struct {
    char id[37];
    int64_t at;
} lost_t;

static lost_t lost[SG_ADOPT_LOST_MAX];
static size_t nlost;
static uint64_t lost_changes; /* moved by every change of the lost ids */

static void lost_add(const char *id, int64_t at)
{
    if (strlen(id) >= sizeof(lost[0].id))
        return;
    if (nlost == SG_ADOPT_LOST_MAX) {
        memmove(lost, lost + 1, (SG_ADOPT_LOST_MAX - 1) * sizeof(lost[0]));
        nlost--;
    }
    snprintf(lost[nlost].id, sizeof(lost[nlost].id), "%s", id);
    lost[nlost].at = at;
    nlost++;
    lost_changes++;
}

static ssize_t lost_find(const char *id, size_t len)
{
    int64_t now = sg_wall_s();
    for (size_t i = 0; i < nlost; i++) {
        if (now - lost[i].at <= SG_ADOPT_LOST_KEEP_S && strlen(lost[i].id) == len && memcmp(lost[i].id, id, len) == 0)
            return (ssize_t)i;
    }
    return -1;
}

int sg_adopt_is_lost(const char *id, size_t len)
{
    return lost_find(id, len) >= 0;
}

int sg_adopt_forget_lost(const char *id, size_t len)
{
    ssize_t i = lost_find(id, len);
    if (i < 0)
        return 0;
    memmove(lost + i, lost + i + 1, (nlost - (size_t)i - 1) * sizeof(lost[0]));
    nlost--;
    lost_changes++;
    sg__adopt_changed();
    return 1;
}

int sg_adopt_init(const char *dir, const char *proxy_id, char *err, size_t errlen)
{
    char p[4096];
    size_t n = strlen(dir);

    path[0] = '\0';
    if (n == 0 || n >= sizeof(p) - 300) {
        snprintf(err, errlen, "SANDGATE_PROXY_STATE_DIR is empty or too long");
        return -1;
    }
    /* mkdir -p */
    snprintf(p, sizeof(p), "%s", dir);
    for (char *c = p + 1; *c != '\0'; c++) {
        if (*c != '/')
            continue;
        *c = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot make %.200s: %s", p, strerror(errno));
            return -1;
        }
        *c = '/';
    }
    if (mkdir(p, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot make %.200s: %s", p, strerror(errno));
        return -1;
    }
    if (access(p, W_OK) != 0) {
        snprintf(err, errlen, "cannot write in %.200s: %s", p, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof(path), "%.3900s/%.64s.sessions", p, proxy_id);
    snprintf(jpath, sizeof(jpath), "%s.journal", path);
    return 0;
}

/* ---- the state file ------------------------------------------------------ */

static json_object *limits_record(const sg_limits_t *l)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "timeout_s", json_object_new_double(l->timeout_s));
    json_object_object_add(o, "memory_mb", json_object_new_int64(l->memory_mb));
    json_object_object_add(o, "cpus", json_object_new_double(l->cpus));
    json_object_object_add(o, "network", json_object_new_boolean(l->network));
    json_object_object_add(o, "pids", json_object_new_int64(l->pids));
    json_object_object_add(o, "output_bytes", json_object_new_int64(l->output_bytes));
    json_object_object_add(o, "tmpfs_mb", json_object_new_int64(l->tmpfs_mb));
    json_object_object_add(o, "results_max", json_object_new_int64(l->results_max));
    json_object_object_add(o, "result_bytes", json_object_new_int64(l->result_bytes));
    json_object_object_add(o, "files_max", json_object_new_int64(l->files_max));
    return o;
}

static void add_str(json_object *o, const char *key, const char *v)
{
    json_object_object_add(o, key, json_object_new_string(v));
}

/* Whether the state holds s (a live session). */
static int listed(const sg_session_t *s)
{
    return !s->ephemeral && !s->_close_requested && s->state != SG_SESSION_DEAD;
}

/* s's record; record_sig below reads the same fields. */
static json_object *record_of(sg_session_t *s)
{
    json_object *o = json_object_new_object();
    add_str(o, "id", s->id);
    add_str(o, "container_id", s->container_id);
    add_str(o, "lang", s->lang->name);
    add_str(o, "image", s->image);
    add_str(o, "base_image", s->base_image);
    add_str(o, "runtime", sg_session_runtime(s));
    add_str(o, "owner", s->owner);
    json_object_object_add(o, "keep_template", json_object_new_boolean(s->keep_template));
    json_object_object_add(o, "from_template", json_object_new_boolean(s->from_template));
    json_object_object_add(o, "foreign", json_object_new_boolean(s->foreign));
    json_object_object_add(o, "created_at", json_object_new_int64(s->created_at));
    json_object_object_add(o, "last_used_at", json_object_new_int64(s->last_used_at));
    json_object_object_add(o, "executions", json_object_new_int64((int64_t)s->executions));
    json_object_object_add(o, "limits", limits_record(&s->limits));
    return o;
}

static void add_record(sg_session_t *s, void *data)
{
    json_object *data_arr = data;
    if (listed(s))
        json_object_array_add(data_arr, record_of(s));
}

#define FNV_SEED 14695981039346656037u

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211u;
    return h;
}

static uint64_t fnv_str(uint64_t h, const char *str)
{
    return fnv(h, str, strlen(str) + 1);
}

/* What record_of(s) holds, in one number: a record is written again only
 * when it changes. */
static uint64_t record_sig(sg_session_t *s)
{
    const sg_limits_t *l = &s->limits;
    const int64_t v[] = {
        s->keep_template, s->from_template, s->foreign, s->created_at,   s->last_used_at, (int64_t)s->executions,
        l->memory_mb,     l->network,       l->pids,    l->output_bytes, l->tmpfs_mb,     l->results_max,
        l->result_bytes,  l->files_max};
    const double d[] = {l->timeout_s, l->cpus};
    const char *str[] = {s->id,         s->container_id,       s->lang->name, s->image,
                         s->base_image, sg_session_runtime(s), s->owner};
    uint64_t h = FNV_SEED;

    for (size_t i = 0; i < sizeof(str) / sizeof(str[0]); i++)
        h = fnv_str(h, str[i]);
    h = fnv(h, v, sizeof(v));
    return fnv(h, d, sizeof(d));
}

/* What the counters of the listed sessions are now, in one number. */
static void sig_one(sg_session_t *s, void *data)
{
    uint64_t *h = data;
    if (s->ephemeral)
        return;
    *h = (*h ^ s->executions) * 1099511628211u;
    *h = (*h ^ (uint64_t)s->last_used_at) * 1099511628211u;
    *h = (*h ^ (uint64_t)(uintptr_t)s) * 1099511628211u;
}

static uint64_t counters_sig(void)
{
    uint64_t h = 14695981039346656037u ^ nlost;
    sg_session_foreach(sig_one, &h);
    return h;
}

/* Writes o to the state file: the whole text into the file beside it
 * (".tmp"), then the two swapped at once (renameat2 RENAME_EXCHANGE), so
 * that the state file is always whole, the old or the new. Neither is
 * fsynced: the file serves the next proxy after this one ends (a crash,
 * kill -9, an upgrade), and the page cache has it then; after a crash of
 * the host no sandbox is left to adopt (the fsyncs cost every create and
 * delete 3-4 ms, on the loop). The file beside keeps the state before
 * and is written over in place (never truncated to zero): on ext4, both a
 * rename over an existing file and a truncation to zero start the
 * writeback of the new file's blocks at once, 0.14 ms at rest and up to a
 * millisecond under load per create and delete; the swap does neither
 * (15 us). Where the file system cannot swap, a plain rename. */
static int write_state(json_object *o, size_t *written, char *err, size_t errlen)
{
    char tmp[4200];
    size_t len;
    const char *text = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &len);
    int fd, ret = -1;

    snprintf(tmp, sizeof(tmp), "%.4090s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %.200s: %s", tmp, strerror(errno));
        return -1;
    }
    for (size_t off = 0; off < len;) {
        ssize_t n = pwrite(fd, text + off, len - off, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            snprintf(err, errlen, "cannot write %.200s: %s", tmp, strerror(errno));
            goto Exit;
        }
        off += (size_t)n;
    }
    if (ftruncate(fd, (off_t)len) != 0) {
        snprintf(err, errlen, "cannot truncate %.200s: %s", tmp, strerror(errno));
        goto Exit;
    }
    *written = len;
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_EXCHANGE) == 0) {
        ret = 0;
        goto Exit;
    }
    /* no state file yet (ENOENT), or a file system that cannot swap */
    if (rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot rename %.200s: %s", tmp, strerror(errno));
        goto Exit;
    }
    ret = 0;
Exit:
    close(fd);
    if (ret != 0)
        unlink(tmp);
    return ret;
}

static json_object *state_now(void)
{
    json_object *o = json_object_new_object(), *sessions = json_object_new_array(), *l = json_object_new_array();
    json_object_object_add(o, "version", json_object_new_int(STATE_VERSION));
    sg_session_foreach(add_record, sessions);
    json_object_object_add(o, "sessions", sessions);
    for (size_t i = 0; i < nlost; i++) {
        json_object *e = json_object_new_object();
        add_str(e, "id", lost[i].id);
        json_object_object_add(e, "at", json_object_new_int64(lost[i].at));
        json_object_array_add(l, e);
    }
    json_object_object_add(o, "lost", l);
    return o;
}

/* ---- the journal -----------------------------------------------------------
 *
 * Beside the state file, its journal (path + ".journal"): a change appends
 * only the records of the sessions it touched, one JSON line each,
 * {"put":{record}} for a session listed or changed and {"del":"<id>"} for
 * one gone, in one write(2). A create or a delete so costs the loop one
 * record instead of every session's (the whole state of 135 sessions took
 * 0.8 ms to build, and its write grew with it). Once the journal is longer
 * than JOURNAL_MIN and than twice the state file, the next change writes
 * the state file whole (write_state) and empties the journal: each whole
 * write is paid for by the records before it. A change of the lost ids
 * (a restart, the DELETE of a lost id: rare) writes it whole too, as does
 * every change while the journal cannot be written.
 *
 * A reader takes the state file, then the journal's lines in order (a line
 * cut short ends it). A proxy killed between a whole write and the
 * journal's truncation leaves a journal replayed over the state it led to:
 * each session's last line in it is what that state holds, so the replay
 * ends where the state file is. */

typedef struct {
    char id[37]; /* "": a free slot */
    uint64_t sig;
    int seen;
} saved_t;

/* What the state file and its journal hold: each session's record_sig,
 * by id (open addressing; cap a power of two, at least twice the count). */
static saved_t *saved;
static size_t saved_cap;
static uint64_t saved_lost; /* lost_changes as written */
static int whole = 1;       /* the next change writes the state file whole */
static int jfd = -1;        /* the journal, open for appends */
static size_t jbytes;       /* its length */
static size_t state_bytes;  /* the state file's */

static saved_t *slot(saved_t *t, size_t cap, const char *id)
{
    size_t i = (size_t)fnv_str(FNV_SEED, id) & (cap - 1);
    while (t[i].id[0] != '\0' && strcmp(t[i].id, id) != 0)
        i = (i + 1) & (cap - 1);
    return &t[i];
}

static int append_line(sg_buf_t *out, const char *key, json_object *v)
{
    json_object *line = json_object_new_object();
    size_t len;
    const char *text;
    int rc;

    json_object_object_add(line, key, v);
    text = json_object_to_json_string_length(line, JSON_C_TO_STRING_PLAIN, &len);
    rc = sg_buf_append(out, text, len) == 0 && sg_buf_append(out, "\n", 1) == 0 ? 0 : -1;
    json_object_put(line);
    return rc;
}

typedef struct {
    saved_t *t;
    size_t cap;
    sg_buf_t *out; /* NULL: only the table */
    int failed;
} track_t;

static void track_one(sg_session_t *s, void *data)
{
    track_t *k = data;
    saved_t *e, *was;
    uint64_t sig;

    if (!listed(s))
        return;
    sig = record_sig(s);
    e = slot(k->t, k->cap, s->id);
    snprintf(e->id, sizeof(e->id), "%s", s->id);
    e->sig = sig;
    was = saved_cap != 0 ? slot(saved, saved_cap, s->id) : NULL;
    if (was != NULL && was->id[0] != '\0') {
        was->seen = 1;
        if (was->sig == sig)
            return;
    }
    if (k->out != NULL && append_line(k->out, "put", record_of(s)) != 0)
        k->failed = 1;
}

/* Makes the table of what is saved the sessions' now; with out, appends
 * to it the lines from the table before to now. 0, or -1 if out is full. */
static int track(sg_buf_t *out)
{
    size_t cap = 16;
    track_t k = {NULL, 0, out, 0};

    while (cap < 2 * sg_session_count() + 16)
        cap *= 2;
    k.t = sg_xcalloc(cap, sizeof(*k.t));
    k.cap = cap;
    sg_session_foreach(track_one, &k);
    for (size_t i = 0; i < saved_cap; i++) {
        if (saved[i].id[0] != '\0' && !saved[i].seen && out != NULL &&
            append_line(out, "del", json_object_new_string(saved[i].id)) != 0)
            k.failed = 1;
    }
    free(saved);
    saved = k.t;
    saved_cap = k.cap;
    return k.failed ? -1 : 0;
}

/* The state file whole, then the journal emptied. */
static void write_whole(void)
{
    char err[512];
    json_object *o = state_now();
    int rc = write_state(o, &state_bytes, err, sizeof(err));

    json_object_put(o);
    whole = 1;
    if (rc != 0) {
        sg_error("state file: %s (sessions may not survive a restart)", err);
        return;
    }
    track(NULL);
    saved_lost = lost_changes;
    jbytes = 0;
    if (jfd < 0)
        jfd = open(jpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (jfd < 0 || ftruncate(jfd, 0) != 0) {
        /* the journal's lines would be replayed over this state: they were before it */
        sg_error("state journal %.200s: %s (the state file is written whole on every change)", jpath, strerror(errno));
        return;
    }
    whole = 0;
}

/* Appends out to the journal: 0, or -1 (logged). */
static int journal_append(const sg_buf_t *out)
{
    for (size_t off = 0; off < out->len;) {
        ssize_t n = write(jfd, out->base + off, out->len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            sg_error("state journal %.200s: cannot write: %s", jpath, strerror(errno));
            return -1;
        }
        off += (size_t)n;
        jbytes += (size_t)n;
    }
    return 0;
}

void sg__adopt_changed(void)
{
    sg_buf_t out;

    if (path[0] == '\0' || suspended)
        return;
    saved_sig = counters_sig();
    if (whole || lost_changes != saved_lost || (jbytes > JOURNAL_MIN && jbytes > 2 * state_bytes)) {
        write_whole();
        return;
    }
    sg_buf_init(&out, JOURNAL_MAX_BYTES);
    if (track(&out) != 0 || journal_append(&out) != 0)
        write_whole(); /* a line cut short ends the journal for a reader: the state goes whole */
    sg_buf_free(&out);
}

void sg_adopt_tick(void)
{
    if (path[0] != '\0' && counters_sig() != saved_sig)
        sg__adopt_changed();
}

/* The file at p into b (made with its cap): 1, 0 when there is none, -1 (err). */
static int read_file(const char *p, sg_buf_t *b, char *err, size_t errlen)
{
    char chunk[65536];
    int fd = open(p, O_RDONLY | O_CLOEXEC), ret = -1;

    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "cannot open %.200s: %s", p, strerror(errno));
        return -1;
    }
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "cannot read %.200s: %s", p, strerror(errno));
            goto Exit;
        }
        if (n == 0)
            break;
        if (sg_buf_append(b, chunk, (size_t)n) != 0) {
            snprintf(err, errlen, "%.200s is larger than %zu bytes", p, b->max);
            goto Exit;
        }
    }
    ret = 1;
Exit:
    close(fd);
    return ret;
}

static const char *rec_str(json_object *o, const char *key);

/* The journal's lines applied to state's sessions, in order, up to the
 * first that does not parse (a write cut short: the last, unless the file
 * was damaged). */
static void apply_journal(json_object *state)
{
    sg_buf_t b;
    char err[512];
    json_object *records, *byid, *now;
    size_t line = 0;
    int rc;

    sg_buf_init(&b, JOURNAL_MAX_BYTES);
    rc = read_file(jpath, &b, err, sizeof(err));
    if (rc <= 0) {
        if (rc < 0)
            sg_error("state journal: %s; the changes it holds are not applied", err);
        sg_buf_free(&b);
        return;
    }
    byid = json_object_new_object();
    if (json_object_object_get_ex(state, "sessions", &records) && json_object_is_type(records, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(records); i++) {
            json_object *r = json_object_array_get_idx(records, i);
            json_object_object_add(byid, rec_str(r, "id"), json_object_get(r));
        }
    }
    for (char *p = b.base, *end = b.base + b.len; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        json_object *o = NULL, *v;
        line++;
        if (nl != NULL) {
            *nl = '\0';
            o = json_tokener_parse(p);
        }
        if (o == NULL || !json_object_is_type(o, json_type_object)) {
            sg_warn("state journal: line %zu is cut short or not JSON; it and any after it are not applied", line);
            json_object_put(o);
            break;
        }
        if (json_object_object_get_ex(o, "put", &v) && json_object_is_type(v, json_type_object) &&
            rec_str(v, "id")[0] != '\0')
            json_object_object_add(byid, rec_str(v, "id"), json_object_get(v));
        else if (json_object_object_get_ex(o, "del", &v) && json_object_is_type(v, json_type_string))
            json_object_object_del(byid, json_object_get_string(v));
        json_object_put(o);
        p = nl + 1;
    }
    now = json_object_new_array();
    json_object_object_foreach(byid, id, r)
    {
        (void)id;
        json_object_array_add(now, json_object_get(r));
    }
    json_object_object_add(state, "sessions", now);
    json_object_put(byid);
    sg_buf_free(&b);
}

/* The state file as JSON, its journal applied: 1 and *out, 0 when there is
 * none, -1 (err). */
static int read_state(json_object **out, char *err, size_t errlen)
{
    sg_buf_t b;
    int ret;

    *out = NULL;
    sg_buf_init(&b, STATE_MAX_BYTES);
    ret = read_file(path, &b, err, errlen);
    if (ret == 1) {
        *out = b.len != 0 ? json_tokener_parse(b.base) : NULL;
        if (*out == NULL || !json_object_is_type(*out, json_type_object)) {
            json_object_put(*out);
            *out = NULL;
            snprintf(err, errlen, "%.200s is not a JSON object", path);
            ret = -1;
        } else {
            apply_journal(*out);
        }
    }
    sg_buf_free(&b);
    return ret;
}

static const char *rec_str(json_object *o, const char *key)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return "";
    return json_object_get_string(v);
}

static int64_t rec_int(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : 0;
}

static double rec_double(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_double(v) : 0;
}

static int rec_bool(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) && json_object_get_boolean(v);
}

/* A container label, or "". */
static const char *label(json_object *c, const char *key)
{
    json_object *labels;
    if (!json_object_object_get_ex(c, "Labels", &labels))
        return "";
    return rec_str(labels, key);
}

/* ---- removal, several at once ---------------------------------------------- */

#define REMOVERS 8 /* threads removing containers at start and exit */

typedef struct {
    char **ids;
    size_t n;
    atomic_size_t next;
    atomic_int removed;
} removal_t;

static void *remover(void *arg)
{
    removal_t *r = arg;
    char err[512];
    size_t i;

    while ((i = atomic_fetch_add(&r->next, 1)) < r->n) {
        if (sg_docker_container_remove(sg_docker_thread(), r->ids[i], err, sizeof(err)) != 0)
            sg_error("cannot remove container %.12s: %s", r->ids[i], err);
        else
            atomic_fetch_add(&r->removed, 1);
    }
    return NULL;
}

/* Removes the n containers of ids (Docker takes seconds for one under
 * runsc on a busy host: they go in parallel); frees ids. The number
 * removed. */
static int remove_all(char **ids, size_t n)
{
    removal_t r = {ids, n, 0, 0};
    pthread_t t[REMOVERS];
    size_t nt = n < REMOVERS ? n : REMOVERS, started = 0;

    for (size_t i = 0; i < nt; i++)
        if (pthread_create(&t[started], NULL, remover, &r) == 0)
            started++;
    if (started == 0)
        remover(&r);
    for (size_t i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    return atomic_load(&r.removed);
}

static void push_id(char ***ids, size_t *n, const char *id)
{
    *ids = realloc(*ids, (*n + 1) * sizeof(**ids));
    if (*ids == NULL)
        sg_oom(64);
    (*ids)[(*n)++] = strdup(id);
    if ((*ids)[*n - 1] == NULL)
        sg_oom(64);
}

int sg_adopt_prepare(sg_docker_t *d, const char *proxy_id, int *adoptable, int *removed, char *err, size_t errlen)
{
    char l[256], rerr[512];
    json_object *state = NULL, *list = NULL, *records = NULL, *v;
    int64_t now = sg_wall_s();
    size_t n;

    *adoptable = *removed = 0;
    json_object_put(pending);
    pending = json_object_new_array();
    if (path[0] != '\0' && read_state(&state, rerr, sizeof(rerr)) < 0)
        sg_error("state file: %s; its sessions cannot be adopted", rerr);
    if (state != NULL) {
        if (json_object_object_get_ex(state, "sessions", &records) && json_object_is_type(records, json_type_array))
            json_object_get(records);
        else
            records = NULL;
        if (json_object_object_get_ex(state, "lost", &v) && json_object_is_type(v, json_type_array)) {
            for (size_t i = 0; i < json_object_array_length(v); i++) {
                json_object *e = json_object_array_get_idx(v, i);
                if (now - rec_int(e, "at") <= SG_ADOPT_LOST_KEEP_S && rec_str(e, "id")[0] != '\0')
                    lost_add(rec_str(e, "id"), rec_int(e, "at"));
            }
        }
        json_object_put(state);
    }
    n = records != NULL ? json_object_array_length(records) : 0;
    char *matched = sg_xcalloc(n + 1, 1), **gone = NULL;
    size_t ngone = 0;

    snprintf(l, sizeof(l), "sandgate.proxy=%s", proxy_id);
    if (sg_docker_container_list(d, l, &list, err, errlen) != 0) {
        free(matched);
        json_object_put(records);
        return -1;
    }
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        json_object *c = json_object_array_get_idx(list, i);
        const char *id = rec_str(c, "Id"), *sid = label(c, "sandgate.session");
        int keep = 0;
        if (strcmp(label(c, "sandgate.kind"), "lease") == 0)
            continue; /* ours: taken before this ran */
        for (size_t k = 0; k < n && strcmp(rec_str(c, "State"), "running") == 0; k++) {
            json_object *r = json_object_array_get_idx(records, k);
            if (!matched[k] && strcmp(rec_str(r, "container_id"), id) == 0 && strcmp(rec_str(r, "id"), sid) == 0) {
                matched[k] = 1;
                keep = 1;
                break;
            }
        }
        if (keep)
            continue;
        sg_info("reconcile: removing container %.12s (%s, session %s)", id, label(c, "sandgate.kind"), sid);
        push_id(&gone, &ngone, id);
    }
    *removed = remove_all(gone, ngone);
    for (size_t k = 0; k < n; k++) {
        json_object *r = json_object_array_get_idx(records, k);
        if (matched[k]) {
            json_object_array_add(pending, json_object_get(r));
            (*adoptable)++;
        } else {
            sg_warn("session %s: its container is gone; the session is lost", rec_str(r, "id"));
            lost_add(rec_str(r, "id"), now);
        }
    }
    free(matched);
    json_object_put(list);
    json_object_put(records);
    return 0;
}

/* ---- adoption ----------------------------------------------------------- */

/* A session as its record says, or NULL if the record does not hold up. */
static sg_session_t *session_of(json_object *r)
{
    const char *id = rec_str(r, "id"), *cid = rec_str(r, "container_id"), *lang = rec_str(r, "lang");
    const char *runtime = rec_str(r, "runtime");
    json_object *lim = NULL;
    sg_session_t *s;

    if (strlen(id) != 36 || cid[0] == '\0' || strlen(cid) >= sizeof(s->container_id) ||
        sg_lang_find(lang, strlen(lang)) == NULL || sg_runtime_find(runtime, strlen(runtime)) == NULL ||
        !json_object_object_get_ex(r, "limits", &lim))
        return NULL;
    s = sg_xcalloc(1, sizeof(*s));
    snprintf(s->id, sizeof(s->id), "%s", id);
    snprintf(s->container_id, sizeof(s->container_id), "%s", cid);
    snprintf(s->image, sizeof(s->image), "%s", rec_str(r, "image"));
    snprintf(s->base_image, sizeof(s->base_image), "%s", rec_str(r, "base_image"));
    snprintf(s->owner, sizeof(s->owner), "%s", rec_str(r, "owner"));
    s->lang = sg_lang_find(lang, strlen(lang));
    s->runtime = sg_runtime_find(runtime, strlen(runtime));
    s->keep_template = rec_bool(r, "keep_template");
    s->from_template = rec_bool(r, "from_template");
    s->foreign = rec_bool(r, "foreign");
    s->created_at = rec_int(r, "created_at");
    s->last_used_at = rec_int(r, "last_used_at");
    s->executions = (uint64_t)rec_int(r, "executions");
    s->limits.timeout_s = rec_double(lim, "timeout_s");
    s->limits.memory_mb = rec_int(lim, "memory_mb");
    s->limits.cpus = rec_double(lim, "cpus");
    s->limits.network = rec_bool(lim, "network");
    s->limits.pids = rec_int(lim, "pids");
    s->limits.output_bytes = rec_int(lim, "output_bytes");
    s->limits.tmpfs_mb = rec_int(lim, "tmpfs_mb");
    s->limits.results_max = rec_int(lim, "results_max");
    s->limits.result_bytes = rec_int(lim, "result_bytes");
    s->limits.files_max = rec_int(lim, "files_max");
    s->state = SG_SESSION_STARTING;
    s->_adopting = 1;
    s->_refcnt = 1; /* the adoption job's */
    h2o_linklist_init_anchor(&s->_ops);
    sg_buf_init(&s->_inbuf, SG_AGENT_HEADER_SIZE + SG_AGENT_MAX_PAYLOAD);
    return s;
}

typedef struct {
    sg_job_t super;
    sg_session_t *s;
    int fd;
    sg_docker_demux_t demux;
    sg_buf_t window; /* the agent's stdout, searched for the SYNC_OK */
    /* this round's SYNC (id, nonce): the first bytes of its SYNC_OK (header
     * and nonce) and of an ERROR refusing it (type, flags, id), encoded by
     * the protocol's own encoder (set_round) */
    uint8_t want[SG_AGENT_HEADER_SIZE + 8], refused[8];
    uint8_t *leftover;
    size_t leftover_len;
    uint32_t version, kernel;
    int ok;
    char err[512];
} adopt_job_t;

static void on_window_bytes(void *ctx, int stream, const uint8_t *p, size_t len)
{
    adopt_job_t *j = ctx;
    if (stream != 1)
        return; /* the agent's log */
    while (len != 0) {
        size_t room = j->window.max - j->window.len, take = len < room ? len : room;
        if (take == 0) {
            /* keep the tail, which may hold the start of the reply */
            sg_buf_consume(&j->window, j->window.len - 64);
            continue;
        }
        sg_buf_append(&j->window, p, take);
        p += take;
        len -= take;
    }
}

/* Encodes this round's expectations (adopt_job_t.want, .refused) and the
 * SYNC request itself into req. Returns 0, or -1 when out of memory. */
static int set_round(adopt_job_t *j, uint32_t id, uint64_t nonce, sg_agent_buf_t *req)
{
    sg_agent_buf_t b;
    int rc;

    sg_agent_buf_init(&b);
    /* a SYNC_OK: the nonce, then version and kernel (zeros here: read, not
     * matched), so that the header carries the whole reply's length */
    rc = sg_agent_msg_begin(&b, SG_AGENT_SYNC_OK, id);
    rc |= sg_agent_put_u64(&b, nonce);
    rc |= sg_agent_put_u32(&b, 0);
    rc |= sg_agent_put_u32(&b, 0);
    sg_agent_msg_end(&b, 0);
    if (rc == 0 && b.len != SG_AGENT_HEADER_SIZE + SG_AGENT_SYNC_OK_LEN)
        rc = -1; /* agent_proto.h and this disagree: refuse rather than match garbage */
    if (rc == 0)
        memcpy(j->want, b.base, sizeof(j->want));
    b.len = 0;
    rc |= sg_agent_msg_begin(&b, SG_AGENT_ERROR, id);
    if (rc == 0)
        memcpy(j->refused, b.base, sizeof(j->refused));
    sg_agent_buf_free(&b);
    rc |= sg_agent_msg_begin(req, SG_AGENT_SYNC, id);
    rc |= sg_agent_put_u64(req, nonce);
    sg_agent_msg_end(req, 0);
    return rc != 0 ? -1 : 0;
}

/* Looks for this round's SYNC_OK in the window: 1 found (the rest kept as
 * leftover), 0 not yet, -1 the agent refused SYNC (an ERROR with that id). */
static int window_match(adopt_job_t *j)
{
    const uint8_t *base = (const uint8_t *)j->window.base, *hit;

    if (j->window.len == 0)
        return 0;
    hit = memmem(base, j->window.len, j->want, sizeof(j->want));
    if (hit != NULL) {
        size_t off = (size_t)(hit - base), end = off + SG_AGENT_HEADER_SIZE + SG_AGENT_SYNC_OK_LEN;
        sg_agent_header_t h;
        sg_agent_reply_t m;
        if (j->window.len < end)
            return 0;
        if (sg_agent_header_decode(hit, &h) != 0 || sg_agent_reply_decode(&h, hit + SG_AGENT_HEADER_SIZE, &m) != 0)
            return 0; /* cannot be: its header and length are the ones matched */
        j->version = m.version;
        j->kernel = m.kernel;
        if (j->window.len > end) {
            j->leftover_len = j->window.len - end;
            j->leftover = sg_xmalloc(j->leftover_len);
            memcpy(j->leftover, base + end, j->leftover_len);
        }
        return 1;
    }
    return memmem(base, j->window.len, j->refused, sizeof(j->refused)) != NULL ? -1 : 0;
}

/* Reads the attach stream into the window for up to ms, or (match) until
 * this round's reply is there: 1, 0, -1 as window_match; -2 the stream
 * ended. */
static int read_for(adopt_job_t *j, int ms, int match)
{
    uint64_t until = sg_now_ms() + (uint64_t)ms;
    uint8_t buf[65536];

    for (;;) {
        int m = match ? window_match(j) : 0;
        uint64_t now = sg_now_ms();
        if (m != 0)
            return m;
        if (now >= until)
            return 0;
        struct pollfd p = {j->fd, POLLIN, 0};
        int r = poll(&p, 1, (int)(until - now));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        ssize_t n = read(j->fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -2;
        if (sg_docker_demux_feed(&j->demux, buf, (size_t)n, on_window_bytes, j) != 0)
            return -2;
    }
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
    while (len != 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The resynchronisation of agent_proto.h: SIGUSR1, SYNC, its SYNC_OK, again
 * until the deadline. Each round has its own id and nonce, and only the
 * latest round's reply counts: once it comes, no signal of an earlier
 * round can still be pending in the agent (each was delivered before its
 * SYNC was written, and a SYNC read with a signal pending is dropped). */
static int resync(adopt_job_t *j, sg_docker_t *d)
{
    uint64_t deadline = sg_now_ms() + resync_ms;
    char kill_path[256];
    int pause_ms = 50;

    snprintf(kill_path, sizeof(kill_path), "/containers/%s/kill?signal=SIGUSR1", j->s->container_id);
    while (sg_now_ms() < deadline && !atomic_load(&aborting)) {
        uint8_t rnd[12];
        uint32_t id;
        uint64_t nonce;
        long status = 0;
        sg_buf_t resp;
        sg_agent_buf_t req;
        int r, rc;

        sg_buf_init(&resp, 1 << 16);
        rc = sg_docker_request(d, "POST", kill_path, NULL, 0, &status, &resp, j->err, sizeof(j->err));
        sg_buf_free(&resp);
        if (rc != 0)
            return -1;
        if (status != 204) {
            snprintf(j->err, sizeof(j->err), "its container cannot be signalled (Docker answered %ld)", status);
            return -1;
        }
        /* what comes while the agent acts on the signal is discarded */
        if (read_for(j, pause_ms, 0) == -2)
            goto Ended;
        if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
            snprintf(j->err, sizeof(j->err), "getrandom: %s", strerror(errno));
            return -1;
        }
        memcpy(&id, rnd, sizeof(id));
        memcpy(&nonce, rnd + 4, sizeof(nonce));
        id |= 0x80000000u; /* never one of the ops' ids, which count from 1 */
        sg_agent_buf_init(&req);
        if (set_round(j, id, nonce, &req) != 0) {
            sg_agent_buf_free(&req);
            snprintf(j->err, sizeof(j->err), "out of memory");
            return -1;
        }
        rc = write_all(j->fd, req.base, req.len);
        sg_agent_buf_free(&req);
        if (rc != 0)
            goto Ended;
        r = read_for(j, 2000, 1);
        if (r == 1) {
            if (j->version != SG_AGENT_PROTO_VERSION) {
                snprintf(j->err, sizeof(j->err), "its agent speaks protocol %u, not %u", j->version,
                         SG_AGENT_PROTO_VERSION);
                return -1;
            }
            return 0;
        }
        if (r == -1) {
            snprintf(j->err, sizeof(j->err), "its agent does not know SYNC (an older version)");
            return -1;
        }
        if (r == -2)
            goto Ended;
        if (pause_ms < 1000)
            pause_ms *= 2;
    }
    snprintf(j->err, sizeof(j->err), "its agent did not answer the resynchronisation within %llu ms",
             (unsigned long long)resync_ms);
    return -1;
Ended:
    snprintf(j->err, sizeof(j->err), "its agent's stream ended (the container stopped)");
    return -1;
}

static void adopt_work(sg_job_t *job)
{
    adopt_job_t *j = (adopt_job_t *)job;

    if (sg_docker_attach(j->s->container_id, ATTACH_TIMEOUT_MS, &j->fd, j->err, sizeof(j->err)) != 0)
        return;
    sg_docker_demux_init(&j->demux);
    j->ok = resync(j, sg_docker_thread()) == 0;
}

static void adopt_done(sg_job_t *job)
{
    adopt_job_t *j = (adopt_job_t *)job;
    sg_session_t *s = j->s;
    const sg_sessions_conf_t *conf = sg__sessions_conf();

    s->_adopting = 0;
    if (j->ok && !s->_close_requested) {
        sg__agent_connect(s, conf->loop, j->fd, &j->demux, j->leftover, j->leftover_len);
        j->fd = -1;
        sg_info("session %s: adopted (%s container %.12s, %s)", s->id, s->lang->name, s->container_id,
                j->kernel ? "its kernel kept" : "no kernel yet");
        sg__agent_process(s);
    } else if (!s->_close_requested) {
        sg_warn("session %s: cannot be adopted: %s; the session is lost", s->id, j->err[0] ? j->err : "closed");
        lost_add(s->id, sg_wall_s());
        sg__ops_fail(s, 404, "the sandbox of this session was lost when its proxy restarted");
        sg_session_close(s, NULL, NULL);
    } else {
        /* closed (DELETE) while it was adopted: the close fails its ops */
        sg__ops_fail(s, 502, "the session was closed while this operation waited");
    }
    if (j->fd >= 0)
        close(j->fd);
    sg_buf_free(&j->window);
    free(j->leftover);
    free(j);
    sg_session_unref(s);
}

void sg_adopt_start(double max_exec_timeout_s)
{
    const sg_sessions_conf_t *conf = sg__sessions_conf();
    size_t n = pending != NULL ? json_object_array_length(pending) : 0;

    resync_ms = (uint64_t)(max_exec_timeout_s * 1000) + RESYNC_GRACE_MS;
    suspended = 1;
    for (size_t i = 0; i < n; i++) {
        json_object *r = json_object_array_get_idx(pending, i);
        sg_session_t *s = session_of(r);
        adopt_job_t *j;
        if (s == NULL) {
            sg_warn("session %s: its record in the state file does not hold up; the session is lost", rec_str(r, "id"));
            lost_add(rec_str(r, "id"), sg_wall_s());
            continue;
        }
        if (sg_capacity_take() == 0)
            s->_has_slot = 1;
        else
            sg_warn("session %s: adopted past SANDGATE_MAX_CONTAINERS", s->id);
        sg__session_list(s);
        j = sg_xcalloc(1, sizeof(*j));
        j->super.work = adopt_work;
        j->super.done = adopt_done;
        j->s = s;
        j->fd = -1;
        sg_buf_init(&j->window, RESYNC_WINDOW);
        sg_workq_submit(conf->workq, &j->super);
    }
    json_object_put(pending);
    pending = NULL;
    suspended = 0;
    sg__adopt_changed();
}

void sg_adopt_abort(void)
{
    atomic_store(&aborting, 1);
}

int sg_adopt_leave(sg_docker_t *d, const char *proxy_id, int keep_sessions, char *err, size_t errlen)
{
    char l[256], **gone = NULL;
    size_t ngone = 0;
    json_object *list = NULL;

    if (keep_sessions) {
        sg__adopt_changed();
    } else if (path[0] != '\0') {
        char tmp[4200];
        snprintf(tmp, sizeof(tmp), "%.4090s.tmp", path);
        unlink(path);
        unlink(tmp); /* the state before the last */
        unlink(jpath);
    }
    snprintf(l, sizeof(l), "sandgate.proxy=%s", proxy_id);
    if (sg_docker_container_list(d, l, &list, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        json_object *c = json_object_array_get_idx(list, i);
        const char *id = rec_str(c, "Id"), *sid = label(c, "sandgate.session");
        sg_session_t *s;
        if (strcmp(label(c, "sandgate.kind"), "lease") == 0)
            continue;
        if (keep_sessions && (s = sg_session_find(sid, strlen(sid))) != NULL && !s->_close_requested &&
            strcmp(s->container_id, id) == 0)
            continue;
        push_id(&gone, &ngone, id);
    }
    json_object_put(list);
    return remove_all(gone, ngone);
}
