/*
 * api_files.c — GET and PUT /sessions/{id}/files?path=P: a file of the
 * session's work dir, through its agent (docs/proxy-api.md).
 */
#include "api_routes.h"
#include "json.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_put_done(sg_op_t *op)
{
    pending_t *p = op->data;
    h2o_req_t *req = sg__api_pending_req(p);
    p->op = NULL;
    if (req != NULL && !sg__api_send_op_failure(req, op)) {
        if (op->agent_err != 0) {
            int st = op->agent_err == SG_AGENT_ERR_PATH || op->agent_err == SG_AGENT_ERR_BAD_REQUEST ? 400
                     : op->agent_err == SG_AGENT_ERR_TOO_LARGE                                       ? 413
                     : op->agent_err == SG_AGENT_ERR_NOT_FOUND                                       ? 404
                                                                                                     : 500;
            const char *code = st == 400   ? "bad_path"
                               : st == 413 ? "too_large"
                               : st == 404 ? "no_such_file"
                                           : "io_error";
            sg_http_send_error(req, st, code, "%s", op->errmsg);
        } else if (op->kind == SG_OP_GET_FILE) {
            sg_http_send_body(req, 200, "application/octet-stream", op->file.base != NULL ? op->file.base : "",
                              op->file.len);
        } else {
            json_object *o = json_object_new_object();
            json_object_object_add(o, "path", json_object_new_string(p->path));
            json_object_object_add(o, "size", json_object_new_int64((int64_t)op->ok_value));
            sg_http_send_json(req, 200, o);
        }
    }
    sg_op_free(op);
    sg__api_pending_free(p);
}

int sg__api_session_files(void *app, h2o_req_t *req, const sg_route_match_t *m)
{
    sg_api_t *api = app;
    sg_session_t *s;
    char path[SG_MAX_PATH + 1];
    sg_verr_t e;
    h2o_iovec_t q = sg_http_query_param(req, "path");
    long max = api->proxy->max_file_bytes;
    sg_op_t *op;

    if ((s = sg__api_find_session(req, m->arg[0])) == NULL)
        return 0;
    if (sg_validate_path(q.base, q.len, path, sizeof(path), &e) != 0) {
        sg__api_send_verr(req, &e);
        return 0;
    }
    if (sg_http_method_is(req, "PUT")) {
        if ((long)req->entity.len > max) {
            sg_http_send_error(req, 413, "too_large", "the file is larger than the limit of %ld bytes", max);
            return 0;
        }
        op = sg_op_put_file(s, path, req->entity.base, req->entity.len);
    } else {
        op = sg_op_get_file(s, path, (uint32_t)max);
    }
    if (op == NULL) {
        sg_http_send_error(req, 500, "internal", "out of memory");
        return 0;
    }
    pending_t *p = sg__api_pending_new(req, api);
    p->path = sg_xstrdup(q.base);
    if (sg__api_pending_admit(p, req, s) != 0) {
        sg_op_free(op);
        sg__api_pending_free(p);
        return 0;
    }
    sg__api_pending_submit(p, op, on_put_done);
    return 0;
}
