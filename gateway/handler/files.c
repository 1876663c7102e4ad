/*
 * files.c — PUT and GET /sessions/{id}/files?path=...: a file into or out
 * of a session's sandbox, passed to the proxy as it comes (the body is the
 * file's bytes, capped by SANDGATE_MAX_FILE_BYTES; the query string goes
 * along unchanged, refused rather than cut when too long).
 */
#include "handlers.h"
#include "request.h"

#include <stdio.h>

static void transfer(sg_gw_req_t *g)
{
    char path[128];
    snprintf(path, sizeof(path), "/sessions/%s/files", g->sid);
    sg_gw_forward(g, g->method, path, sg_gw.call_timeout_ms, sg_gw_pass_reply);
}

SG_GW_ROUTE_HANDLER(sg_gw_on_session_files, SG_GW_R_FILES, SG_GW_ARG_SESSION, 1, 0, SG_GW_GONE_CUT, transfer)
