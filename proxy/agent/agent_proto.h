/*
 * agent_proto.h — the wire protocol between sandgate-proxy and the
 * sandgate-agent that runs as PID 1 inside every sandbox container.
 *
 * Transport: the container's stdin (proxy -> agent) and stdout (agent ->
 * proxy), reached by the proxy through the Docker attach stream. Docker
 * multiplexes the container's stdout/stderr into frames (see docker_stream.h);
 * after demultiplexing, the agent's stdout is a byte stream of the messages
 * below. The agent's stderr carries its own diagnostics, one line per event.
 *
 * Every message is a 12-byte header followed by a payload, all big-endian:
 *
 *     u8  type      one of sg_agent_msg_type_t
 *     u8  flags     0
 *     u16 reserved  0
 *     u32 id        request id chosen by the proxy; replies carry the id of
 *                   the request they answer; READY carries 0
 *     u32 len       payload length, at most SG_AGENT_MAX_PAYLOAD
 *
 * Payload fields are encoded in order with no padding:
 *     u32 / i32 / u64  big-endian integers
 *     str              u32 length, then that many bytes (no NUL)
 *     rest             all remaining bytes of the payload
 *
 * Requests and their payloads (proxy -> agent). The agent handles one
 * request at a time, in order; the proxy sends the next only after the reply
 * that ends the previous one (EXIT, FILE, OK or ERROR).
 *
 *   EXEC      u32 timeout_ms    wall-clock budget for setup + run together
 *             u32 output_cap    bytes kept per stream (stdout, stderr)
 *             str setup_cmd     run first with /bin/sh -c, may be empty
 *             str setup_stage   what setup is ("compile", "libraries"), for EXIT
 *             str run_cmd       then run with /bin/sh -c
 *             str file_path     where to write `code` first (absolute, inside
 *                               the work dir or /tmp); empty = no file
 *             str kernel_cmd    empty: one-shot mode, run_cmd runs the code.
 *                               Otherwise stateful mode: the code is handed
 *                               to the session's kernel, a long-lived
 *                               interpreter started (once, lazily) with
 *                               /bin/sh -c kernel_cmd; run_cmd and file_path
 *                               are then unused. See "Kernels" below.
 *             rest code
 *     Both commands run in the work dir with SANDGATE_FILE=file_path in the
 *     environment, stdin from /dev/null, in a new process group. The agent
 *     answers with any number of OUTPUT messages, then exactly one EXIT.
 *     When the run ends, for any reason, every process it started (setsid and
 *     double-forked ones included) is killed, so nothing outlives an EXEC.
 *     When a stream passes output_cap the run is killed (reason OUTPUT_LIMIT).
 *
 *   PUT_FILE  str path          relative to the work dir (or absolute inside it)
 *             u32 mode          permission bits, e.g. 0644
 *             rest data
 *     Missing parent directories are created. Answer: OK (u64 size) or ERROR.
 *
 *   GET_FILE  str path
 *             u32 max_bytes
 *     Answer: FILE (rest = the bytes) or ERROR.
 *
 *   PING      (empty)           Answer: OK (u64 0).
 *
 *   SYNC      u64 nonce         Answer: SYNC_OK with the same nonce. Sent by
 *                               a proxy that re-attaches; see
 *                               "Resynchronisation" below.
 *
 * Paths in PUT_FILE / GET_FILE never leave the work dir: ".." components,
 * absolute paths outside it and symlinks on the way are refused
 * (SG_AGENT_ERR_PATH); a directory or other non-regular file is refused too.
 *
 * Replies and events (agent -> proxy):
 *
 *   READY     u32 version (SG_AGENT_PROTO_VERSION), str workdir; sent once at
 *             start with id 0, before reading any request.
 *   OUTPUT    u32 stream (1 stdout, 2 stderr), rest bytes — as produced, at
 *             most SG_AGENT_OUTPUT_CHUNK bytes each; never more than
 *             output_cap bytes per stream per EXEC in total.
 *   EXIT      i32 exit_code     exit status, or -1 when ended by a signal
 *             u32 signal        the signal that ended it, 0 if none
 *             u32 reason        sg_agent_reason_t
 *             u64 duration_us   wall time from fork of setup/run to the end
 *             u32 flags         SG_AGENT_EXIT_* bits
 *             str stage         "run", or setup_stage if setup ended the EXEC
 *             u32 state         sg_agent_state_t: what became of the kernel
 *   FILE      rest data
 *   RESULT    rest record       one rich result of the running EXEC (a figure,
 *                               the value of its last expression), as the
 *                               kernel wrote it on its result channel (below):
 *                               bytes the sandbox chose, a JSON object by the
 *                               kernels' convention, never trusted by the
 *                               proxy. Any number (at most
 *                               SG_AGENT_RESULTS_MAX, SG_AGENT_RESULTS_MAX_BYTES
 *                               of records in all), between the EXEC and its EXIT.
 *   FILES     u32 flags         SG_AGENT_FILES_MORE: there were more files
 *             u32 count
 *             count x (str path, u64 size)
 *                               the regular files under the work dir's
 *                               SG_AGENT_OUT_DIR when the EXEC ended; sent
 *                               once, right before the EXIT of every EXEC,
 *                               when that directory exists (see "Files out").
 *   OK        u64 value
 *   ERROR     u32 code (sg_agent_err_t), str message (a human sentence)
 *   SYNC_OK   u64 nonce         the SYNC's, echoed
 *             u32 version       SG_AGENT_PROTO_VERSION
 *             u32 kernel        1 if a kernel lives (its state is kept), else 0
 *
 * Resynchronisation. The agent's stdin stays open when its proxy goes
 * (OpenStdin, StdinOnce false), so a proxy that restarts attaches again. Both
 * directions may then hold part of a message: the old proxy may have died
 * half-way through a request (a PUT_FILE of megabytes), and what the agent
 * wrote while nobody was attached is gone (the container logs nothing), so
 * the new attach may begin inside a message. The new proxy:
 *   1. sends SIGUSR1 to the agent through the Engine API (POST
 *      /containers/{id}/kill?signal=SIGUSR1). User code runs as another uid
 *      and cannot send it (proc.h). On it, the agent drops the request it
 *      is reading, if any, and every byte already readable on stdin, and
 *      waits for a fresh header. A signal that comes during an EXEC is acted
 *      on when the EXEC ends: the run goes on to its end (bounded by its
 *      timeout), its output and EXIT to nobody, and the kernel is kept;
 *   2. sends SYNC with a random id and a random 64-bit nonce;
 *   3. discards every byte of the agent's stdout until the exact SYNC_OK of
 *      that id and nonce (20 bytes the sandbox cannot guess: output it
 *      prints is data inside OUTPUT messages, and could only forge them by
 *      knowing the nonce); the stream is aligned on messages from there.
 *      An ERROR with that id is an agent that does not know SYNC (an older
 *      version). A SYNC that arrived before the agent acted on the signal
 *      is dropped with the rest: the proxy repeats 1-3 until its deadline.
 *
 * Kernels (stateful mode). The agent starts kernel_cmd as its child in a
 * process group of its own, with stdin /dev/null, stdout and stderr on pipes
 * the agent reads, fd 3 a pipe it reads requests from, fd 4 a pipe it
 * answers on and fd 5 its result channel (below), cwd the work dir, SANDGATE_WORKDIR in the environment. For
 * each EXEC the agent writes "<decimal byte length>\n<code>" to fd 3; the
 * kernel runs the code in its persistent namespace, flushes stdout and
 * stderr, then writes "<exit code>\n" to fd 4. An uncaught error prints its
 * traceback to stderr and answers 1. A kernel that has started writes
 * "ready\n" to fd 4 before it reads its first request: a new kernel's start
 * is not charged to the EXEC's timeout_ms. The EXEC that starts a kernel
 * gives the start 15 s beyond its timeout (SG_AGENT_KERNEL_BOOT_MS), and
 * "ready" gives the run its budget back, within that; "ready" at any other
 * time is a malformed answer. Only the kernel process itself reads fd
 * 3 and answers on fd 4: a copy made by fork() in the user's code must not
 * (the python kernel points them at /dev/null in the child), or its answer
 * would end this EXEC early and the kernel's own one would end the next. When the answer arrives the agent
 * drains what is already in the output pipes and ends the EXEC; every other
 * process the run started is killed, the kernel itself is kept. A timeout or
 * output limit kills the kernel with the rest (state LOST); a kernel that
 * exits or dies by itself is LOST too, with its exit status. The next
 * stateful EXEC then starts a new kernel (state NEW). Between EXECs the
 * agent discards whatever the kernel writes.
 *
 * Kernel details, as the agent implements them:
 *   - kernel_cmd must `exec` the interpreter: the process forked for it is
 *     the one spared, its children are not. The kernel gets fds 0 to 5 only,
 *     oom_score_adj 1000, and the environment of the commands (which also
 *     carries SANDGATE_WORKDIR). The answer is a decimal i32 line.
 *   - setup_cmd runs beside the kernel and leaves it alone; a setup that
 *     fails or times out ends the EXEC with the kernel kept.
 *   - An EXEC that ends before its code reaches a kernel (setup failed or
 *     timed out, fork failed) reports state KEPT if the kernel lives, LOST if
 *     one ended since the last EXIT reported it, NONE if there is none. A
 *     kernel_cmd that fails at once is a kernel that ended (e.g. EXITED 127,
 *     LOST).
 *   - A kernel that answers anything but "<decimal>\n", answers before
 *     reading the whole request, or closes fd 3 or fd 4 without exiting is
 *     killed: reason KILLED (signal 9), state LOST, a stderr OUTPUT line
 *     saying why. A timeout or output limit reports code -1, signal 9.
 *   - A stateful EXEC whose kernel_cmd differs from the live kernel's
 *     replaces it (NEW). One-shot EXECs leave a live kernel alone (NONE).
 *
 * The result channel (kernels only). A kernel also has fd 5
 * (SG_AGENT_RESULT_FD), a pipe the agent reads: rich results go there, not
 * on stdout, so that nothing the user's code prints can pass for a result.
 * Each record is "<decimal byte length>\n<record>", the record a JSON object
 * {"type": "image"|"text"|"html", "mime", "data" (base64 for images),
 * "main": bool} by the kernels' convention (docs/proxy-api.md). The user's
 * code can write on fd 5 too (its kernel's fd is its own), so the agent
 * only frames and bounds what comes, and the proxy validates every record
 * as untrusted data:
 *   - each complete record within the EXEC's budget (SG_AGENT_RESULTS_MAX
 *     records, SG_AGENT_RESULTS_MAX_BYTES bytes) goes out at once as a
 *     RESULT; one past the budget, or of length 0, is read and thrown away
 *     without being kept, however long it says it is;
 *   - a length line that is not 1 to 10 digits then "\n" ends the channel's
 *     framing for this EXEC: the rest is read and thrown away;
 *   - a record the EXEC's end cuts off (the kernel answered, died or was
 *     killed before writing all of it) is dropped;
 * and each of these sets SG_AGENT_EXIT_RESULTS_DROPPED. Each EXEC starts
 * framing afresh; between EXECs what the kernel writes there is discarded,
 * like its output. After the answer the agent takes what is already in the
 * pipe (the kernel writes its results before answering).
 *
 * Files out. When the work dir holds a directory SG_AGENT_OUT_DIR ("out",
 * e.g. /sandbox/out), every EXEC's EXIT is preceded by a FILES message
 * listing the regular files in it and in its subdirectories (at most
 * SG_AGENT_FILES_MAX_DEPTH deep), absolute paths sorted by name, with their
 * sizes: at most SG_AGENT_FILES_MAX of them, paths of at most
 * SG_AGENT_FILES_PATH_MAX bytes; more, or longer, sets SG_AGENT_FILES_MORE.
 * Symbolic links are neither followed nor listed, nor is anything that is
 * not a regular file or a directory; a directory replaced by a link while
 * it is walked is not entered (every open is O_NOFOLLOW). GET_FILE reads
 * any of them.
 */
#ifndef SANDGATE_AGENT_PROTO_H
#define SANDGATE_AGENT_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define SG_AGENT_PROTO_VERSION 3
#define SG_AGENT_HEADER_SIZE 12
#define SG_AGENT_MAX_PAYLOAD (64u << 20)
#define SG_AGENT_OUTPUT_CHUNK (32u << 10)
/* What a new kernel's start may take beyond its EXEC's timeout_ms ("Kernels"
 * above): "ready" gives the run its whole timeout back, within it. An EXEC
 * that starts a kernel may thus take this long past its timeout, and the
 * proxy's watchdog (EXEC_GRACE_MS, proxy/sessions/session.c) is derived from
 * it. Under gVisor's ptrace platform on a 2-core host a python kernel's start
 * took 7-11 s while the warm pools filled (750 ms alone). */
#define SG_AGENT_KERNEL_BOOT_MS 15000
/* How long the agent may spend killing what a run left (proxy/agent/proc.c):
 * one budget of SG_AGENT_KILL_BUDGET_MS before the run's EXIT, then, for
 * what outlasted it (a fork bomb under gVisor, where each fork and kill is
 * slow), up to SG_AGENT_KILL_MORE budgets more before it reads its next
 * request. The proxy's watchdog counts both. */
#define SG_AGENT_KILL_BUDGET_MS 2000
#define SG_AGENT_KILL_MORE 4

typedef enum {
    SG_AGENT_EXEC = 1,
    SG_AGENT_PUT_FILE = 2,
    SG_AGENT_GET_FILE = 3,
    SG_AGENT_PING = 4,
    SG_AGENT_SYNC = 5,

    SG_AGENT_READY = 64,
    SG_AGENT_OUTPUT = 65,
    SG_AGENT_EXIT = 66,
    SG_AGENT_FILE = 67,
    SG_AGENT_OK = 68,
    SG_AGENT_ERROR = 69,
    SG_AGENT_RESULT = 70,
    SG_AGENT_FILES = 71,
    SG_AGENT_SYNC_OK = 72,
} sg_agent_msg_type_t;

#define SG_AGENT_RESULT_FD 5                   /* a kernel's result channel */
#define SG_AGENT_RESULTS_MAX 1024u             /* records forwarded per EXEC */
#define SG_AGENT_RESULTS_MAX_BYTES (16u << 20) /* record bytes forwarded per EXEC */
#define SG_AGENT_OUT_DIR "out"                 /* under the work dir */
#define SG_AGENT_FILES_MAX 1000u               /* entries of one FILES */
#define SG_AGENT_FILES_MAX_DEPTH 8             /* directories below the out dir */
#define SG_AGENT_FILES_PATH_MAX 1024u          /* bytes of a listed path */
#define SG_AGENT_FILES_MORE 0x1u               /* FILES flags: not everything is listed */

typedef enum {
    SG_AGENT_REASON_EXITED = 0,       /* ran to its end; see exit_code */
    SG_AGENT_REASON_TIMEOUT = 1,      /* timeout_ms passed; the tree was killed */
    SG_AGENT_REASON_OOM = 2,          /* killed by the kernel for memory */
    SG_AGENT_REASON_OUTPUT_LIMIT = 3, /* a stream passed output_cap; killed */
    SG_AGENT_REASON_KILLED = 4,       /* ended by a signal the agent did not send */
    SG_AGENT_REASON_SETUP_FAILED = 5, /* setup_cmd exited non-zero; run skipped */
    SG_AGENT_REASON_START_FAILED = 6, /* could not write the file, fork or exec */
} sg_agent_reason_t;

typedef enum {
    SG_AGENT_STATE_NONE = 0, /* one-shot mode: there is no kernel */
    SG_AGENT_STATE_KEPT = 1, /* ran in the kernel of earlier EXECs, which lives on */
    SG_AGENT_STATE_NEW = 2,  /* ran in a kernel started for it: earlier state (if any) was gone */
    SG_AGENT_STATE_LOST = 3, /* the kernel ended during this EXEC; its state is gone */
} sg_agent_state_t;

#define SG_AGENT_EXIT_STDOUT_TRUNCATED 0x1u
#define SG_AGENT_EXIT_STDERR_TRUNCATED 0x2u
#define SG_AGENT_EXIT_RESULTS_DROPPED 0x4u /* result records were dropped (see "The result channel") */

typedef enum {
    SG_AGENT_ERR_BAD_REQUEST = 1, /* malformed payload or unknown type */
    SG_AGENT_ERR_NOT_FOUND = 2,
    SG_AGENT_ERR_PATH = 3, /* path refused: traversal, symlink, not regular */
    SG_AGENT_ERR_TOO_LARGE = 4,
    SG_AGENT_ERR_IO = 5,
} sg_agent_err_t;

typedef struct {
    uint8_t type;
    uint32_t id;
    uint32_t len;
} sg_agent_header_t;

/* Encoder: a growable buffer that owns its memory. All appends return 0, or
 * -1 when memory runs out (the buffer is then left unchanged). */
typedef struct {
    uint8_t *base;
    size_t len;
    size_t cap;
} sg_agent_buf_t;

void sg_agent_buf_init(sg_agent_buf_t *b);
void sg_agent_buf_free(sg_agent_buf_t *b);
/* Start a message: writes a header whose length is patched by _end. */
int sg_agent_msg_begin(sg_agent_buf_t *b, sg_agent_msg_type_t type, uint32_t id);
void sg_agent_msg_end(sg_agent_buf_t *b, size_t msg_start);
int sg_agent_put_u32(sg_agent_buf_t *b, uint32_t v);
int sg_agent_put_i32(sg_agent_buf_t *b, int32_t v);
int sg_agent_put_u64(sg_agent_buf_t *b, uint64_t v);
int sg_agent_put_str(sg_agent_buf_t *b, const void *s, size_t len);
int sg_agent_put_rest(sg_agent_buf_t *b, const void *s, size_t len);

/* Decode a header from exactly SG_AGENT_HEADER_SIZE bytes. Returns 0, or -1
 * if flags/reserved are not zero or len exceeds SG_AGENT_MAX_PAYLOAD. */
int sg_agent_header_decode(const uint8_t *p, sg_agent_header_t *h);

/* Payload reader over a complete payload; never reads past its end. Each get
 * returns 0, or -1 when the field would run past the payload (the reader is
 * then marked failed and every later get fails too). Strings and rest point
 * into the payload: they are not NUL-terminated. */
typedef struct {
    const uint8_t *p;
    size_t len;
    size_t off;
    int failed;
} sg_agent_reader_t;

void sg_agent_reader_init(sg_agent_reader_t *r, const void *payload, size_t len);
int sg_agent_get_u32(sg_agent_reader_t *r, uint32_t *v);
int sg_agent_get_i32(sg_agent_reader_t *r, int32_t *v);
int sg_agent_get_u64(sg_agent_reader_t *r, uint64_t *v);
int sg_agent_get_str(sg_agent_reader_t *r, const uint8_t **s, size_t *len);
void sg_agent_get_rest(sg_agent_reader_t *r, const uint8_t **s, size_t *len);

/* The payload size of SYNC_OK. */
#define SG_AGENT_SYNC_OK_LEN 16u

/* A message of the agent (READY, OUTPUT, EXIT, FILE, OK, ERROR, SYNC_OK) decoded
 * from its complete payload, as the proxy takes it. Byte fields point into
 * the payload (not NUL-terminated); bytes after the last field are ignored
 * (OUTPUT's and FILE's data is the rest). */
typedef struct {
    uint8_t type;
    uint32_t version;    /* READY */
    uint32_t stream;     /* OUTPUT: 1 stdout or 2 stderr */
    const uint8_t *data; /* OUTPUT, FILE, RESULT: the bytes; READY: the work dir;
                          * FILES: the entries (files_count of them, checked) */
    size_t data_len;
    int32_t exit_code; /* EXIT, as the payload says */
    uint32_t signal;
    uint32_t reason;
    uint64_t duration_us;
    uint32_t flags;
    const uint8_t *stage; /* EXIT */
    size_t stage_len;
    uint32_t state;
    uint32_t files_flags; /* FILES */
    uint32_t files_count;
    uint64_t ok_value; /* OK; SYNC_OK: the nonce */
    uint32_t kernel;   /* SYNC_OK (its version is in version) */
    uint32_t err_code; /* ERROR */
    const uint8_t *message;
    size_t message_len;
} sg_agent_reply_t;

/* 0, or -1 when the type is not one of the agent's or the payload is
 * malformed (too short for its fields, OUTPUT on a stream other than 1
 * or 2, FILES whose entries are not exactly files_count (path, size) pairs
 * or more than SG_AGENT_FILES_MAX): a stream that says that cannot be
 * trusted. */
int sg_agent_reply_decode(const sg_agent_header_t *h, const uint8_t *payload, sg_agent_reply_t *m);

const char *sg_agent_reason_name(uint32_t reason); /* "exited", "timeout", "out_of_memory", ... */
const char *sg_agent_state_name(uint32_t state);   /* "none", "kept", "new", "lost" */

#endif
