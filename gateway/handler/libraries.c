/*
 * libraries.c — installing a library: POST /sessions/{id}/libraries into a
 * session, and seed 004's POST /pip_install {"package","version"[,
 * "session_id"]}: into the session it names (held to the same checks as a
 * session in a path: the caller's own, else 404), or, naming none, into
 * the package store through a one-shot sandbox of its own (the proxy's
 * POST /libraries), so that later executes naming the library install it
 * from the store. Names, versions and the blocklist are checked by the
 * proxy (sg_lib_check) for both.
 *
 * The install runs pip / npm in the sandbox (and may start an installer
 * container): it holds an execution slot like a run of code, and waits for
 * the proxy up to SANDGATE_LIBRARY_TIMEOUT.
 */
#include "handlers.h"
#include "metrics.h"
#include "request.h"

#include <stdio.h>
#include <string.h>

/* Counts the install by what the proxy said (its error code, or the
 * reply's "success"), then passes the reply on. */
static void on_installed(void *data, const sg_upstream_reply_t *r)
{
    json_object *o, *v;
    if (r->status == 200 && (o = json_tokener_parse(r->body)) != NULL) {
        sg_metrics_package_install(json_object_object_get_ex(o, "success", &v) && json_object_get_boolean(v));
        json_object_put(o);
    } else if (r->status == 400 && strcmp(r->code, "bad_library") == 0) {
        sg_metrics_error("package_refused");
    }
    sg_gw_pass_reply(data, r);
}

static void forward_install(sg_gw_req_t *g)
{
    char path[128];
    if (g->sid[0] != '\0') {
        snprintf(path, sizeof(path), "/sessions/%s/libraries", g->sid);
        json_object_object_del(g->json, "session_id");
    } else {
        /* seed 004 installs python packages */
        snprintf(path, sizeof(path), "/libraries");
        json_object_object_add(g->json, "lang", json_object_new_string(g->lang));
    }
    sg_gw_forward(g, "POST", path, sg_gw.library_timeout_ms, on_installed);
}

static void install(sg_gw_req_t *g)
{
    if (sg_gw_parse_json_body(g) != 0)
        goto Error;
    if (g->route == SG_GW_R_PIP_INSTALL && g->sid[0] == '\0' && sg_gw_check_lang(g) != 0)
        goto Error;
    sg_gw_exec_slot_take(g, sg_gw.library_timeout_ms, forward_install);
    return;
Error:
    sg_gw_req_free(g);
}

SG_GW_ROUTE_HANDLER(sg_gw_on_session_libraries, SG_GW_R_LIBRARIES, SG_GW_ARG_SESSION, 0, 0, SG_GW_GONE_CUT, install)
SG_GW_ROUTE_HANDLER(sg_gw_on_pip_install, SG_GW_R_PIP_INSTALL, SG_GW_ARG_BODY_SESSION, 0, 0, SG_GW_GONE_CUT, install)
