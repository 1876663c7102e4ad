/*
 * session.c — a session (session.h): its references, the connection to its
 * agent (agent_proto.h over the attach stream) and the ops queued on it,
 * one at a time.
 */
#include "session.h"
#include "log.h"
#include "util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How long past its own timeout an EXEC may take before the agent is
 * declared unresponsive (28 s). The EXEC is sent when the last one's EXIT
 * came, and the agent may still spend SG_AGENT_KILL_MORE kill budgets (8 s)
 * on what that run left before it reads this one; then a new kernel's start
 * may take SG_AGENT_KERNEL_BOOT_MS (15 s) beyond the timeout, and the kill
 * of this run's tree one budget (2 s) before its EXIT (agent_proto.h). 3 s
 * to spare. After a fork bomb under gVisor that ended its kernel, a 20 s
 * watchdog could close a session whose agent was still at work. */
#define EXEC_GRACE_MS (SG_AGENT_KERNEL_BOOT_MS + (1 + SG_AGENT_KILL_MORE) * SG_AGENT_KILL_BUDGET_MS + 3000)
#define FILE_OP_TIMEOUT_MS 30000

static void (*on_broken)(sg_session_t *s);

void sg__session_on_broken(void (*cb)(sg_session_t *s))
{
    on_broken = cb;
}

static void session_free(sg_session_t *s)
{
    sg_buf_free(&s->_inbuf);
    free(s);
}

void sg_session_ref(sg_session_t *s)
{
    s->_refcnt++;
}

void sg_session_unref(sg_session_t *s)
{
    if (--s->_refcnt == 0)
        session_free(s);
}

static void send_next(sg_session_t *s);

static void op_complete(sg_op_t *op)
{
    sg_session_t *s = op->session;
    h2o_linklist_unlink(&op->_link);
    if (op->_started_us != 0)
        op->wall_us = sg_now_us() - op->_started_us;
    if (op->kind == SG_OP_EXEC && !op->failed)
        s->executions++;
    s->last_used_at = sg_wall_s();
    op->cb(op);
}

void sg__ops_fail(sg_session_t *s, int status, const char *why)
{
    s->_op_sent = 0;
    while (!h2o_linklist_is_empty(&s->_ops)) {
        sg_op_t *op = H2O_STRUCT_FROM_MEMBER(sg_op_t, _link, s->_ops.next);
        op->failed = 1;
        op->fail_status = status;
        snprintf(op->errmsg, sizeof(op->errmsg), "%s", why);
        op_complete(op);
    }
}

void sg__agent_close(sg_session_t *s)
{
    if (s->_sock != NULL) {
        h2o_socket_close(s->_sock);
        s->_sock = NULL;
    }
}

/* The agent died or broke the protocol: the session cannot be trusted. */
static void session_broken(sg_session_t *s, int status, const char *why)
{
    if (s->state == SG_SESSION_DEAD)
        return;
    if (!s->_close_requested)
        sg_warn("session %s: %s; closing it", s->id, why);
    else
        why = "the session was closed while this operation ran";
    s->state = SG_SESSION_DEAD;
    sg__agent_close(s);
    sg_session_ref(s);
    sg__ops_fail(s, status, why);
    if (on_broken != NULL)
        on_broken(s); /* closes it */
    sg_session_unref(s);
}

static void on_stream_bytes(void *ctx, int stream, const uint8_t *p, size_t len)
{
    sg_session_t *s = ctx;
    if (stream == 1) {
        if (sg_buf_append(&s->_inbuf, p, len) != 0)
            s->_overflow = 1; /* checked by the caller */
    } else if (stream == 2) {
        sg_info("session %s agent: %.*s", s->id, (int)(len && p[len - 1] == '\n' ? len - 1 : len), (const char *)p);
    }
}

static void handle_message(sg_session_t *s, const sg_agent_header_t *h, const uint8_t *payload)
{
    sg_op_t *op;
    sg_agent_reply_t m;

    if (h2o_linklist_is_empty(&s->_ops) || !s->_op_sent)
        return; /* nothing waits: an answer to an op that was given up */
    op = H2O_STRUCT_FROM_MEMBER(sg_op_t, _link, s->_ops.next);
    if (h->id != op->_id)
        return;
    if (sg_agent_reply_decode(h, payload, &m) != 0)
        goto Error;
    switch (h->type) {
    case SG_AGENT_OUTPUT:
        if (op->on_output != NULL)
            op->on_output(op, (int)m.stream, m.data, m.data_len);
        /* the agent enforces the cap; this only stops a broken agent */
        sg_buf_append(&op->out[m.stream - 1], m.data, m.data_len);
        return;
    case SG_AGENT_RESULT: {
        json_object *res;
        if (op->kind != SG_OP_EXEC)
            goto Error;
        /* the sandbox's bytes: checked and capped there, never trusted */
        res = sg_results_add(&op->results, m.data, m.data_len);
        if (res != NULL && op->on_result != NULL)
            op->on_result(op, res);
        return;
    }
    case SG_AGENT_FILES:
        if (op->kind != SG_OP_EXEC)
            goto Error;
        sg_results_set_files(&op->results, m.files_flags, m.files_count, m.data, m.data_len);
        return;
    case SG_AGENT_EXIT:
        op->exit_code = m.exit_code;
        op->signal = m.signal;
        op->reason = m.reason;
        op->duration_us = m.duration_us;
        op->flags = m.flags;
        op->state = m.state;
        if (m.flags & SG_AGENT_EXIT_RESULTS_DROPPED)
            op->results.truncated = 1;
        snprintf(op->stage, sizeof(op->stage), "%.*s", (int)m.stage_len, (const char *)m.stage);
        break;
    case SG_AGENT_FILE:
        if (sg_buf_append(&op->file, m.data, m.data_len) != 0)
            goto Error;
        break;
    case SG_AGENT_OK:
        op->ok_value = m.ok_value;
        break;
    case SG_AGENT_ERROR:
        op->agent_err = m.err_code;
        if (op->agent_err == 0)
            op->agent_err = SG_AGENT_ERR_IO;
        snprintf(op->errmsg, sizeof(op->errmsg), "%.*s", (int)m.message_len, (const char *)m.message);
        break;
    default:
        goto Error; /* READY again, mid-session */
    }
    s->_op_sent = 0;
    op_complete(op);
    send_next(s);
    return;
Error:
    session_broken(s, 502, "the sandbox agent sent a malformed message");
}

/* Handles every whole message in _inbuf, then drops them in one move (a
 * read may hold thousands of small OUTPUT messages: moving the rest down
 * after each would be quadratic). */
void sg__agent_process(sg_session_t *s)
{
    size_t off = 0;
    sg_session_ref(s);
    while (s->state == SG_SESSION_ACTIVE && s->_inbuf.len - off >= SG_AGENT_HEADER_SIZE) {
        sg_agent_header_t h;
        if (sg_agent_header_decode((uint8_t *)s->_inbuf.base + off, &h) != 0) {
            session_broken(s, 502, "the sandbox agent sent a malformed header");
            break;
        }
        if (s->_inbuf.len - off < SG_AGENT_HEADER_SIZE + (size_t)h.len)
            break;
        handle_message(s, &h, (uint8_t *)s->_inbuf.base + off + SG_AGENT_HEADER_SIZE);
        if (s->state != SG_SESSION_ACTIVE)
            break;
        off += SG_AGENT_HEADER_SIZE + h.len;
    }
    if (s->state == SG_SESSION_ACTIVE)
        sg_buf_consume(&s->_inbuf, off);
    sg_session_unref(s);
}

static void on_agent_read(h2o_socket_t *sock, const char *err)
{
    sg_session_t *s = sock->data;

    if (err != NULL) {
        session_broken(s, 502, "the sandbox's agent exited (the container stopped)");
        return;
    }
    int rc = sg_docker_demux_feed(&s->_demux, (uint8_t *)sock->input->bytes, sock->input->size, on_stream_bytes, s);
    h2o_buffer_consume(&sock->input, sock->input->size);
    if (rc != 0 || s->_overflow) {
        session_broken(s, 502, "the sandbox's output stream was malformed");
        return;
    }
    sg__agent_process(s);
}

void sg__agent_connect(sg_session_t *s, h2o_loop_t *loop, int fd, const sg_docker_demux_t *demux, const uint8_t *early,
                       size_t early_len)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    s->_sock = h2o_evloop_socket_create(loop, fd, 0);
    s->_sock->data = s;
    s->_demux = *demux;
    if (early_len != 0)
        sg_buf_append(&s->_inbuf, early, early_len);
    s->state = SG_SESSION_ACTIVE;
    h2o_socket_read_start(s->_sock, on_agent_read);
    send_next(s); /* what waited while an adopted session resynchronised */
}

static void on_write_done(h2o_socket_t *sock, const char *err)
{
    if (err != NULL) {
        sg_session_t *s = sock->data;
        session_broken(s, 502, "cannot write to the sandbox's agent");
    }
}

static void send_next(sg_session_t *s)
{
    sg_op_t *op;
    h2o_iovec_t buf;

    if (s->_op_sent || s->state != SG_SESSION_ACTIVE || h2o_linklist_is_empty(&s->_ops))
        return;
    op = H2O_STRUCT_FROM_MEMBER(sg_op_t, _link, s->_ops.next);
    op->_started_us = sg_now_us();
    if (op->kind == SG_OP_EXEC)
        op->_deadline_ms = sg_now_ms() + (uint64_t)op->_deadline_ms + EXEC_GRACE_MS;
    else
        op->_deadline_ms = sg_now_ms() + FILE_OP_TIMEOUT_MS;
    s->_op_sent = 1;
    buf = h2o_iovec_init(op->_req.base, op->_req.len);
    h2o_socket_write(s->_sock, &buf, 1, on_write_done);
    if (op->on_start != NULL)
        op->on_start(op);
}

static sg_op_t *op_new(sg_session_t *s, sg_op_kind_t kind, sg_agent_msg_type_t type)
{
    sg_op_t *op = sg_xcalloc(1, sizeof(*op));
    op->kind = kind;
    op->session = s;
    sg_session_ref(s);
    op->_id = ++s->_next_id;
    sg_buf_init(&op->out[0], (size_t)s->limits.output_bytes);
    sg_buf_init(&op->out[1], (size_t)s->limits.output_bytes);
    sg_buf_init(&op->file, SG_AGENT_MAX_PAYLOAD);
    sg_results_init(&op->results, s->limits.results_max, s->limits.result_bytes, s->limits.files_max);
    sg_agent_buf_init(&op->_req);
    if (sg_agent_msg_begin(&op->_req, type, op->_id) != 0) {
        sg_op_free(op);
        return NULL;
    }
    return op;
}

static int str_or_empty(sg_agent_buf_t *b, const char *s)
{
    return sg_agent_put_str(b, s != NULL ? s : "", s != NULL ? strlen(s) : 0);
}

sg_op_t *sg_op_exec(sg_session_t *s, const char *setup_cmd, const char *setup_stage, const char *run_cmd,
                    const char *file_path, const char *kernel_cmd, const char *code, size_t code_len, double timeout_s)
{
    sg_op_t *op = op_new(s, SG_OP_EXEC, SG_AGENT_EXEC);
    uint32_t timeout_ms = (uint32_t)(timeout_s * 1000.0 + 0.5);
    if (op == NULL)
        return NULL;
    if (timeout_ms == 0)
        timeout_ms = 1;
    op->_deadline_ms = timeout_ms; /* relative until sent */
    if (sg_agent_put_u32(&op->_req, timeout_ms) != 0 ||
        sg_agent_put_u32(&op->_req, (uint32_t)s->limits.output_bytes) != 0 || str_or_empty(&op->_req, setup_cmd) != 0 ||
        str_or_empty(&op->_req, setup_stage) != 0 || str_or_empty(&op->_req, run_cmd) != 0 ||
        str_or_empty(&op->_req, file_path) != 0 || str_or_empty(&op->_req, kernel_cmd) != 0 ||
        sg_agent_put_rest(&op->_req, code, code_len) != 0) {
        sg_op_free(op);
        return NULL;
    }
    sg_agent_msg_end(&op->_req, 0);
    return op;
}

sg_op_t *sg_op_put_file(sg_session_t *s, const char *path, const void *data, size_t len)
{
    sg_op_t *op = op_new(s, SG_OP_PUT_FILE, SG_AGENT_PUT_FILE);
    if (op == NULL)
        return NULL;
    if (str_or_empty(&op->_req, path) != 0 || sg_agent_put_u32(&op->_req, 0644) != 0 ||
        sg_agent_put_rest(&op->_req, data, len) != 0) {
        sg_op_free(op);
        return NULL;
    }
    sg_agent_msg_end(&op->_req, 0);
    return op;
}

sg_op_t *sg_op_get_file(sg_session_t *s, const char *path, uint32_t max_bytes)
{
    sg_op_t *op = op_new(s, SG_OP_GET_FILE, SG_AGENT_GET_FILE);
    if (op == NULL)
        return NULL;
    if (str_or_empty(&op->_req, path) != 0 || sg_agent_put_u32(&op->_req, max_bytes) != 0) {
        sg_op_free(op);
        return NULL;
    }
    sg_agent_msg_end(&op->_req, 0);
    return op;
}

void sg_op_submit(sg_op_t *op, sg_op_cb cb, void *data)
{
    sg_session_t *s = op->session;
    op->cb = cb;
    op->data = data;
    if (s->state != SG_SESSION_ACTIVE && !(s->state == SG_SESSION_STARTING && s->_adopting)) {
        op->_link.next = op->_link.prev = NULL;
        op->failed = 1;
        op->fail_status = 502;
        snprintf(op->errmsg, sizeof(op->errmsg), "the session is closed");
        cb(op);
        return;
    }
    h2o_linklist_insert(&s->_ops, &op->_link);
    send_next(s);
}

int sg_op_cancel(sg_op_t *op)
{
    sg_session_t *s = op->session;
    if (op->_link.next == NULL || !h2o_linklist_is_linked(&op->_link))
        return -1; /* done, or failed at submit */
    if (s->_op_sent && s->_ops.next == &op->_link)
        return -1; /* with the agent */
    h2o_linklist_unlink(&op->_link);
    op->failed = 1;
    op->fail_status = 409;
    snprintf(op->errmsg, sizeof(op->errmsg), "the request was cancelled before it started");
    op->cb(op);
    return 0;
}

void sg_op_free(sg_op_t *op)
{
    sg_buf_free(&op->out[0]);
    sg_buf_free(&op->out[1]);
    sg_buf_free(&op->file);
    sg_results_free(&op->results);
    sg_agent_buf_free(&op->_req);
    sg_session_unref(op->session);
    free(op);
}

void sg__session_watchdog(sg_session_t *s, uint64_t now)
{
    if (s->_op_sent && !h2o_linklist_is_empty(&s->_ops)) {
        sg_op_t *op = H2O_STRUCT_FROM_MEMBER(sg_op_t, _link, s->_ops.next);
        if (now > op->_deadline_ms)
            session_broken(s, 504, "the sandbox's agent did not answer in time");
    }
}
