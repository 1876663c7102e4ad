/*
 * sandgate-gateway — the public tier: authenticates every request with a
 * tenant's token, applies quotas and rate limits, owns session timeouts,
 * records usage, serves the admin API and /metrics, and forwards the rest to
 * sandgate-proxy. See docs/architecture.md.
 */
#include "config.h"
#include "daemon.h"
#include "gateway.h"
#include "handlers.h"
#include "routes.h"
#include "stats.h"
#include "http.h"
#include "log.h"
#include "reaper.h"
#include "request.h"
#include "rebuild.h"
#include "throttle.h"
#include "upstream.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What the context (sg_gw) does not hold as it is read; the rest of the
 * table writes into sg_gw directly. */
static struct {
    const char *host;
    long port;
    const char *proxy_url;
    long proxy_grace_ms;
    const char *redis_url;
    int redis_solo;
    long max_body;
    long max_file_bytes;
    long max_header_bytes;
    long db_workers;
    int http2_cleartext;
    long admin_fail_limit;
    double admin_fail_window;
    const char *log_level;
    const char *www_dir;
} cfg;

static const sg_cfg_entry_t config_table[] = {
    {"HOST", SG_CFG_STR, "0.0.0.0", 0, 0, &cfg.host, "address to listen on (IPv4)"},
    {"PORT", SG_CFG_INT, "3000", 0, 65535, &cfg.port, "port to listen on"},
    {"SANDGATE_PROXY_URL", SG_CFG_STR, "http://127.0.0.1:8000", 0, 0, &cfg.proxy_url,
     "where the proxy listens; a comma-separated list places sessions over several proxies (one per Docker engine)"},
    {"SANDGATE_PROXY_GRACE_MS", SG_CFG_INT, "5000", 0, SG_PROXY_GRACE_MAX_MS, &cfg.proxy_grace_ms,
     "with several proxies: how long a session whose proxy stopped answering waits for it before it is lost"},
    {"SANDGATE_REDIS_URL", SG_CFG_STR, "", 0, 0, &cfg.redis_url,
     "redis://host:port[/db] for shared state; empty keeps the state in this process"},
    {"SANDGATE_REDIS_SOLO", SG_CFG_BOOL, "1", 0, 0, &cfg.redis_solo,
     "1: while this is the only gateway on its Redis, executions are admitted from its own copy of the limits' "
     "state, checked by Redis after (no round trip before the run); 0: Redis decides every admission"},
    {"SANDGATE_DATA_DIR", SG_CFG_STR, SG_STORE_DEFAULT_DIR, 0, 0, &sg_gw.data_dir,
     "directory of the SQLite file sandgate.db (shared with sandgate-admin) and of the usage journal, usage-journal/"},
    {"SANDGATE_ADMIN_TOKEN", SG_CFG_STR, "", 0, 0, &sg_gw.admin_token,
     "bearer token of the admin API; empty disables the admin API"},
    {"SANDGATE_DEFAULT_TIMEOUT", SG_CFG_DOUBLE, "30", 0.1, 86400, &sg_gw.default_timeout,
     "execution timeout when a request names none (capped by the tenant's max_timeout), seconds"},
    {"SANDGATE_DEFAULT_MEMORY_MB", SG_CFG_INT, "512", 16, 1 << 20, &sg_gw.default_memory_mb,
     "memory of a new session when the request names none (capped by the tenant's), MiB"},
    {"SANDGATE_DEFAULT_CPUS", SG_CFG_DOUBLE, "1", 0.01, 1024, &sg_gw.default_cpus,
     "CPUs of a new session when the request names none (capped by the tenant's)"},
    {"SANDGATE_UPSTREAM_GRACE_MS", SG_CFG_INT, "33000", 0, 3600000, &sg_gw.upstream_grace_ms,
     "how much longer than an execution's timeout the gateway waits for the proxy"},
    {"SANDGATE_CALL_TIMEOUT_MS", SG_CFG_INT, "60000", 100, 3600000, &sg_gw.call_timeout_ms,
     "timeout of every other call to the proxy"},
    {"SANDGATE_LIBRARY_TIMEOUT_MS", SG_CFG_INT, "300000", 1000, 3600000, &sg_gw.library_timeout_ms,
     "timeout of a library install through the proxy (it may fetch from the package index)"},
    {"SANDGATE_REAPER_INTERVAL_MS", SG_CFG_INT, "1000", 10, 3600000, &sg_gw.reaper_interval_ms,
     "how often expired sessions are looked for"},
    {"SANDGATE_USAGE_IMPORT_MS", SG_CFG_INT, "100", 1, 60000, &sg_gw.usage_import_ms,
     "how long after the first usage row it has not moved a DB thread moves the usage journal into SQLite (every "
     "read of the ledger moves it first)"},
    {"SANDGATE_MAX_BODY_BYTES", SG_CFG_INT, "4194304", 1024, 64 << 20, &cfg.max_body, "largest JSON request body"},
    {"SANDGATE_MAX_FILE_BYTES", SG_CFG_INT, "16777216", 1, 64 << 20, &cfg.max_file_bytes, "largest file upload"},
    {"SANDGATE_MAX_HEADER_BYTES", SG_CFG_INT, "16384", 1024, 1 << 20, &cfg.max_header_bytes,
     "largest request headers, all together (431 above)"},
    {"SANDGATE_DB_WORKERS", SG_CFG_INT, "2", 1, 64, &cfg.db_workers, "threads that run SQLite work"},
    {"SANDGATE_HTTP2_CLEARTEXT", SG_CFG_BOOL, "0", 0, 0, &cfg.http2_cleartext,
     "1 accepts HTTP/2 over cleartext (h2c upgrade, prior knowledge) on the public port"},
    {"SANDGATE_ADMIN_FAIL_LIMIT", SG_CFG_INT, "10", 1, 1000000, &cfg.admin_fail_limit,
     "wrong admin tokens from one client address in a window before it gets 429"},
    {"SANDGATE_ADMIN_FAIL_WINDOW_S", SG_CFG_DOUBLE, "60", 0.1, 86400, &cfg.admin_fail_window,
     "seconds of that window, and of the wait after it is full"},
    {"SANDGATE_WWW_DIR", SG_CFG_STR, "/usr/share/sandgate/www", 0, 0, &cfg.www_dir,
     "directory of the static pages, one subdirectory each (docs/: GET /docs, built by deploy/www-docs.sh; dashboard/: "
     "GET /dashboard, built by dashboard/build.sh)"},
    {"SANDGATE_MCP_SESSIONS", SG_CFG_INT, "32", 1, 100000, &sg_gw.mcp_sessions,
     "MCP sessions (POST /mcp, 2025 revisions) a tenant may hold at once"},
    {"SANDGATE_MCP_IDLE_S", SG_CFG_INT, "3600", 1, 30 * 86400, &sg_gw.mcp_idle_s,
     "seconds an MCP session lives without a request"},
    {"SANDGATE_MCP_ORIGINS", SG_CFG_STR, "", 0, 0, &sg_gw.mcp_origins,
     "comma-separated Origin values /mcp accepts besides its own (a request without Origin is accepted)"},
    {"SANDGATE_LOG_LEVEL", SG_CFG_STR, "info", 0, 0, &cfg.log_level, "error, warn, info or debug"},
};

static size_t proxies_in_flight(void)
{
    size_t n = 0;
    for (size_t i = 0; i < sg_proxies_count(); i++)
        n += sg_upstream_in_flight(sg_proxies_at(i)->up);
    return n;
}

int main(int argc, char **argv)
{
    char err[512];
    sg_http_server_t *server;
    sg_store_t *st;

    int rc = sg_daemon_begin(argc, argv, config_table, sizeof(config_table) / sizeof(config_table[0]),
                             "sandgate-gateway", "the public API", &cfg.log_level);
    if (rc >= 0)
        return rc;

    /* open (and create) the database once here, so that a bad data dir is
     * an error at start, not at the first request */
    if ((st = sg_store_open(sg_gw.data_dir, err, sizeof(err))) == NULL) {
        sg_error("%s", err);
        return 1;
    }
    sg_info("database %s", sg_store_path(st));
    /* what gateways that stopped, or died, left in the usage journal goes
     * into the ledger before this one adds to it */
    sg_usage_catch_up_t cu;
    if (sg_store_usage_catch_up(st, &cu, err, sizeof(err)) != 0)
        sg_warn("usage journal: not all moved into the ledger yet (tried again with the next rows, and by every "
                "read of the ledger): %s",
                err);
    else if (cu.imported != 0 || cu.dropped != 0 || cu.torn != 0)
        sg_info("usage journal: %ld rows moved into the ledger, %ld refused (%s), %ld bytes of no whole append",
                cu.imported, cu.dropped, cu.dropped != 0 ? cu.drop_err : "none", cu.torn);
    if (sg_gw_ledger_open(sg_gw.data_dir, err, sizeof(err)) != 0)
        sg_warn("%s: usage rows go to the database directly, each answer after its commit", err);

    /* Bodies up to twice the larger cap are read and refused with a JSON 413
     * by the route (api.c); larger ones h2o refuses (with its own text 413)
     * from their Content-Length, before reading them. */
    size_t max_body = 2 * (size_t)(cfg.max_body > cfg.max_file_bytes ? cfg.max_body : cfg.max_file_bytes);
    size_t nwww;
    const sg_gw_www_t *www = sg_gw_www_dirs(&nwww);
    sg_http_dir_t *dirs = sg_xcalloc(nwww, sizeof(*dirs));
    for (size_t i = 0; i < nwww; i++) {
        char *dir = sg_xmalloc(strlen(cfg.www_dir) + strlen(www[i].subdir) + 2);
        sprintf(dir, "%s/%s", cfg.www_dir, www[i].subdir);
        if (access(dir, R_OK | X_OK) != 0)
            sg_warn("%s: %s (GET %s answers 404; %s builds it)", dir, strerror(errno), www[i].url_path, www[i].builder);
        dirs[i].url_path = www[i].url_path;
        dirs[i].headers = www[i].headers;
        dirs[i].dir = dir;
    }
    server = sg_http_server_create_with_dirs(cfg.host, (int)cfg.port, max_body, sg_gw_handle, NULL, dirs, nwww, err,
                                             sizeof(err));
    for (size_t i = 0; i < nwww; i++) /* h2o keeps copies */
        free((char *)dirs[i].dir);
    free(dirs);
    if (server == NULL) {
        sg_error("%s", err);
        return 1;
    }
    sg_http_server_allow_h2c(server, cfg.http2_cleartext);
    sg_stats_init(sg_wall_s());
    sg_gw.loop = sg_http_server_loop(server);
    sg_gw.admin_throttle = sg_throttle_create(cfg.admin_fail_limit, cfg.admin_fail_window);
    sg_gw.dbq = sg_workq_create(sg_gw.loop, (int)cfg.db_workers);
    sg_gw.max_body = (size_t)cfg.max_body;
    sg_gw.max_file_bytes = (size_t)cfg.max_file_bytes;
    sg_gw.max_header_bytes = (size_t)cfg.max_header_bytes;
    if (sg_proxies_init(sg_gw.loop, cfg.proxy_url, (size_t)cfg.max_file_bytes + (1 << 20), cfg.proxy_grace_ms, err,
                        sizeof(err)) != 0) {
        sg_error("%s", err);
        return 1;
    }
    sg_gw.upstream = sg_proxies_at(0)->up; /* calls of no session's, with one proxy: its */
    if (cfg.redis_url[0] != '\0') {
        sg_gw.redis_configured = 1;
        sg_gw.state = sg_state_create_redis(sg_gw.loop, cfg.redis_url, err, sizeof(err));
        if (sg_gw.state != NULL)
            sg_state_redis_solo(sg_gw.state, cfg.redis_solo);
    } else {
        sg_gw.state = sg_state_create_memory(sg_gw.loop);
    }
    if (sg_gw.state == NULL || sg_gw.upstream == NULL || sg_gw.admin_throttle == NULL) {
        sg_error("cannot start: %s", sg_gw.state == NULL ? err : sg_gw.upstream == NULL ? "upstream" : "memory");
        return 1;
    }
    /* the live state knows every session open in the ledger before the
     * first request is taken (a restart without Redis, or Redis emptied) */
    if (sg_gw_rebuild_sessions_now(st, 5000) != 0)
        sg_warn("the live state did not answer for every open session at start; the reaper will retry");
    sg_gw_auth_cache_start(st); /* the loop's connection from now on (core/auth.c) */
    sg_gw_reaper_start();
    sg_proxies_start_checks();

    sg_http_server_start(server);
    sg_info("listening on %s:%d; proxy %s; state %s%s%s", cfg.host, sg_http_server_port(server), cfg.proxy_url,
            sg_state_backend(sg_gw.state), sg_gw.redis_configured ? " " : "", cfg.redis_url);
    if (sg_gw.admin_token[0] == '\0')
        sg_warn("SANDGATE_ADMIN_TOKEN is empty: the admin API is disabled");
    sg_daemon_run(sg_gw.loop);
    sg_http_server_stop_accepting(server);
    /* Let the work under way finish (requests, whatever they wait for:
     * the proxy, the DB, Redis; ledger rows, closes; the live state's
     * commits of sessions created), for 10 s at most;
     * then stop the DB threads. The state and the upstream are not
     * destroyed (callbacks of theirs may still want the other): the state
     * is only made to send what it holds (sg_state_leave), and the
     * upstream has nothing to save. */
    uint64_t deadline = sg_now_ms() + 10000;
    sg_proxies_stop_checks();
    while ((sg_workq_pending(sg_gw.dbq) != 0 || proxies_in_flight() != 0 || sg_gw_reqs_live() != 0 ||
            sg_gw_session_commits_live() != 0) &&
           sg_now_ms() < deadline)
        h2o_evloop_run(sg_gw.loop, 100);
    sg_gw.stopping = 1;
    sg_workq_t *dbq = sg_gw.dbq;
    sg_gw.dbq = NULL;      /* work submitted from now on fails at once */
    sg_workq_destroy(dbq); /* runs the done() of what finished meanwhile */
    /* what the state was sent (the ends of the last executions, written a
     * little later than their replies) reaches Redis, and the solo lease
     * goes back, before the exit */
    sg_state_leave(sg_gw.state);
    sg_gw_auth_cache_stop(); /* closes st, the loop's connection */
    /* the journal given up, the rest of it moved into the ledger (on a
     * connection that waits for the lock), and the file removed */
    sg_gw_ledger_close();
    if ((st = sg_store_open(sg_gw.data_dir, err, sizeof(err))) == NULL ||
        sg_store_usage_catch_up(st, &cu, err, sizeof(err)) != 0)
        sg_warn("usage journal: left for the next catch-up: %s", err);
    sg_store_close(st);
    return 0;
}
