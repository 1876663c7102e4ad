/*
 * libraries.c — POST /sessions/{id}/libraries: a library installed into a
 * session. The install runs pip / npm in the sandbox (and may start an
 * installer container): it holds an execution slot like a run of code,
 * and waits for the proxy up to SANDGATE_LIBRARY_TIMEOUT.
 */
#include "handlers.h"
#include "request.h"

#include <stdio.h>

static void forward_install(sg_gw_req_t *g)
{
    char path[128];
    snprintf(path, sizeof(path), "/sessions/%s/libraries", g->sid);
    sg_gw_forward(g, "POST", path, sg_gw.library_timeout_ms, sg_gw_pass_reply);
}

static void install(sg_gw_req_t *g)
{
    if (sg_gw_parse_json_body(g) != 0) {
        sg_gw_req_free(g);
        return;
    }
    sg_gw_exec_slot_take(g, sg_gw.library_timeout_ms, forward_install);
}

SG_GW_ROUTE_HANDLER(sg_gw_on_session_libraries, SG_GW_R_LIBRARIES, SG_GW_ARG_SESSION, 0, 0, SG_GW_GONE_CUT, install)
