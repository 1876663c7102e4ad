/*
 * sandgate-proxy — the internal sandbox service: owns the Docker containers,
 * runs code in them through the in-sandbox agent. See docs/architecture.md.
 */
#include "api.h"
#include "capacity.h"
#include "config.h"
#include "daemon.h"
#include "container.h"
#include "docker.h"
#include "http.h"
#include "libraries.h"
#include "log.h"
#include "proxy.h"
#include "adopt.h"
#include "lease.h"
#include "runtime.h"
#include "pool.h"
#include "session_life.h"
#include "util.h"
#include "workq.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct {
    const char *host;
    long port;
    const char *docker_host;
    const char *docker_api;
    const char *docker_tls_verify, *docker_cert_path;
    const char *proxy_id;
    const char *image_prefix;
    const char *template_repo;
    double exec_timeout, max_exec_timeout;
    long memory_mb, max_memory_mb;
    double cpus, max_cpus;
    long pids;
    long output_limit;
    long max_results, max_result_bytes, max_result_files;
    long tmpfs_mb;
    int allow_network;
    int http2_cleartext;
    long max_sessions;
    long session_queue;
    long max_containers;
    long pool_size;
    long pool_refill_delay_ms;
    long max_file_bytes;
    long max_body;
    long workers;
    long agent_start_timeout_ms;
    const char *store_volume;
    const char *install_network;
    const char *sandbox_network;
    const char *pip_index_url;
    const char *npm_registry;
    double install_timeout;
    const char *library_blocklist;
    const char *image_allowlist;
    const char *log_level;
    const char *runtime;
    const char *pool_runtimes;
    const char *state_dir;
    const char *lease_image;
    const char *socket_path;
} cfg;

static const sg_cfg_entry_t config_table[] = {
    {"HOST", SG_CFG_STR, "127.0.0.1", 0, 0, &cfg.host, "address to listen on (IPv4)"},
    {"PORT", SG_CFG_INT, "8000", 0, 65535, &cfg.port, "port to listen on"},
    {"SANDGATE_PROXY_SOCKET", SG_CFG_STR, "", 0, 0, &cfg.socket_path,
     "also listen on a Unix socket at this absolute path, made 0600 (the gateway's SANDGATE_PROXY_URL "
     "http://[unix:PATH]); empty: none"},
    {"DOCKER_HOST", SG_CFG_STR, "unix:///var/run/docker.sock", 0, 0, &cfg.docker_host,
     "the Docker engine: unix:///path or tcp://host:port"},
    {"DOCKER_TLS_VERIFY", SG_CFG_STR, "", 0, 0, &cfg.docker_tls_verify,
     "non-empty (any value): TLS to a tcp:// engine, its certificate verified against DOCKER_CERT_PATH/ca.pem"},
    {"DOCKER_CERT_PATH", SG_CFG_STR, "", 0, 0, &cfg.docker_cert_path,
     "directory of ca.pem, cert.pem, key.pem: TLS to a tcp:// engine with this client certificate (the engine's "
     "verified only with DOCKER_TLS_VERIFY); empty: ~/.docker when DOCKER_TLS_VERIFY is set"},
    {"SANDGATE_DOCKER_API_VERSION", SG_CFG_STR, "", 0, 0, &cfg.docker_api,
     "Engine API version to use; empty: the engine's own (from GET /_ping)"},
    {"SANDGATE_PROXY_ID", SG_CFG_STR, "sandgate-proxy", 0, 0, &cfg.proxy_id,
     "this proxy's name (1-64 of [A-Za-z0-9_.-]) in the sandgate.proxy label; one live proxy holds it on an "
     "engine at a time; a restart with it adopts its sessions"},
    {"SANDGATE_PROXY_STATE_DIR", SG_CFG_STR, "/var/lib/sandgate/proxy", 0, 0, &cfg.state_dir,
     "where the proxy keeps <proxy id>.sessions, what its sessions need to survive a restart"},
    {"SANDGATE_LEASE_IMAGE", SG_CFG_STR, "", 0, 0, &cfg.lease_image,
     "image of the proxy id's lease container (it runs cat); empty: <SANDGATE_IMAGE_PREFIX>python:latest"},
    {"SANDGATE_IMAGE_PREFIX", SG_CFG_STR, "sandgate/", 0, 0, &cfg.image_prefix,
     "sandbox images are <prefix><lang>:latest"},
    {"SANDGATE_TEMPLATE_REPO", SG_CFG_STR, "sandgate-template", 0, 0, &cfg.template_repo,
     "keep_template sessions are committed as <repo>:<session id>"},
    {"SANDGATE_EXEC_TIMEOUT", SG_CFG_DOUBLE, "30", 0.1, 3600, &cfg.exec_timeout, "default execution timeout, seconds"},
    {"SANDGATE_MAX_EXEC_TIMEOUT", SG_CFG_DOUBLE, "300", 0.1, 86400, &cfg.max_exec_timeout,
     "largest execution timeout a request may ask for, seconds"},
    {"SANDGATE_MEMORY_MB", SG_CFG_INT, "512", 16, 1 << 20, &cfg.memory_mb,
     "default memory (and memory+swap) per sandbox, MiB"},
    {"SANDGATE_MAX_MEMORY_MB", SG_CFG_INT, "4096", 16, 1 << 20, &cfg.max_memory_mb,
     "largest memory a request may ask for, MiB"},
    {"SANDGATE_CPUS", SG_CFG_DOUBLE, "1", 0.01, 1024, &cfg.cpus, "default CPUs per sandbox"},
    {"SANDGATE_MAX_CPUS", SG_CFG_DOUBLE, "2", 0.01, 1024, &cfg.max_cpus, "most CPUs a request may ask for"},
    {"SANDGATE_PIDS_LIMIT", SG_CFG_INT, "128", 8, 1 << 20, &cfg.pids, "processes per sandbox"},
    {"SANDGATE_OUTPUT_LIMIT", SG_CFG_INT, "1048576", 1024, 1 << 26, &cfg.output_limit,
     "bytes of stdout and of stderr kept per execution; past it the run is stopped and truncated is true"},
    {"SANDGATE_MAX_RESULTS", SG_CFG_INT, "64", 0, 1024, &cfg.max_results,
     "rich results (figures, values) kept per execution; past it the rest are dropped and results_truncated is true"},
    {"SANDGATE_MAX_RESULT_BYTES", SG_CFG_INT, "8388608", 0, 16 << 20, &cfg.max_result_bytes,
     "bytes of rich results (as JSON) kept per execution; past it the rest are dropped and results_truncated is true"},
    {"SANDGATE_MAX_RESULT_FILES", SG_CFG_INT, "100", 0, 1000, &cfg.max_result_files,
     "files under /sandbox/out listed per execution; past it files_truncated is true"},
    {"SANDGATE_TMPFS_MB", SG_CFG_INT, "256", 1, 1 << 20, &cfg.tmpfs_mb, "size of the sandbox's /sandbox and /tmp, MiB"},
    {"SANDGATE_HTTP2_CLEARTEXT", SG_CFG_BOOL, "0", 0, 0, &cfg.http2_cleartext,
     "1 accepts HTTP/2 over cleartext (h2c upgrade, prior knowledge)"},
    {"SANDGATE_ALLOW_NETWORK", SG_CFG_BOOL, "0", 0, 0, &cfg.allow_network,
     "whether a session may ask for \"network\": true"},
    {"SANDGATE_MAX_SESSIONS", SG_CFG_INT, "200", 1, 1 << 20, &cfg.max_sessions, "live sessions at most"},
    {"SANDGATE_SESSION_QUEUE", SG_CFG_INT, "16", 1, 10000, &cfg.session_queue,
     "requests that may wait behind a session's running one; past it 429 session_busy"},
    {"SANDGATE_MAX_CONTAINERS", SG_CFG_INT, "256", 1, 1 << 20, &cfg.max_containers,
     "containers of every kind at once (sessions, one-shot, pool, installers); past it 503 no_capacity"},
    {"SANDGATE_POOL_SIZE", SG_CFG_INT, "2", 0, 1000, &cfg.pool_size,
     "ready containers kept per language and runtime, so that creating a session does not wait for one"},
    {"SANDGATE_POOL_REFILL_DELAY_MS", SG_CFG_INT, "500", 0, 60000, &cfg.pool_refill_delay_ms,
     "after a session takes a pooled container, how long its pool waits before starting the replacement, so that "
     "the start does not compete with the session's first execute (a pool left empty refills at once)"},
    {"SANDGATE_MAX_FILE_BYTES", SG_CFG_INT, "16777216", 1, 64 << 20, &cfg.max_file_bytes,
     "largest file upload or download, bytes"},
    {"SANDGATE_MAX_BODY_BYTES", SG_CFG_INT, "4194304", 1024, 64 << 20, &cfg.max_body,
     "largest JSON request body, bytes"},
    {"SANDGATE_DOCKER_WORKERS", SG_CFG_INT, "8", 1, 256, &cfg.workers, "threads that make Docker calls"},
    {"SANDGATE_AGENT_START_TIMEOUT_MS", SG_CFG_INT, "20000", 100, 600000, &cfg.agent_start_timeout_ms,
     "how long a new sandbox may take to answer"},
    {"SANDGATE_STORE_VOLUME", SG_CFG_STR, "sandgate-store", 0, 0, &cfg.store_volume,
     "Docker volume of fetched packages, mounted read-only in sandboxes; empty disables library installs"},
    {"SANDGATE_INSTALL_NETWORK", SG_CFG_STR, "bridge", 0, 0, &cfg.install_network,
     "Docker network of installer containers (the only ones that reach the package index)"},
    {"SANDGATE_SANDBOX_NETWORK", SG_CFG_STR, SG_SANDBOX_NETWORK, 0, 0, &cfg.sandbox_network,
     "Docker network of sessions with \"network\": true; a bridge with traffic between its containers off, "
     "created at start when missing"},
    {"SANDGATE_PIP_INDEX_URL", SG_CFG_STR, "https://pypi.org/simple", 0, 0, &cfg.pip_index_url,
     "the Python package index (PEP 503), e.g. a company mirror"},
    {"SANDGATE_NPM_REGISTRY", SG_CFG_STR, "https://registry.npmjs.org/", 0, 0, &cfg.npm_registry, "the npm registry"},
    {"SANDGATE_INSTALL_TIMEOUT", SG_CFG_DOUBLE, "120", 1, 3600, &cfg.install_timeout,
     "how long fetching one package may take, seconds"},
    {"SANDGATE_LIBRARY_BLOCKLIST", SG_CFG_STR, "os,subprocess,sys,importlib,ctypes,multiprocessing,threading", 0, 0,
     &cfg.library_blocklist, "package names refused for install, comma-separated"},
    {"SANDGATE_IMAGE_ALLOWLIST", SG_CFG_STR, "", 0, 0, &cfg.image_allowlist,
     "custom images a session may name (\"image\"), comma-separated: exact names, or prefixes ending in *"},
    /* gVisor wherever the engine offers it (README "Runtimes") */
    {"SANDGATE_RUNTIME", SG_CFG_STR, "auto", 0, 0, &cfg.runtime,
     "OCI runtime of the sandboxes: runsc (gVisor), runc, or auto (runsc when the engine offers it, else runc "
     "with a warning)"},
    {"SANDGATE_POOL_RUNTIMES", SG_CFG_STR, "", 0, 0, &cfg.pool_runtimes,
     "runtimes whose warm pools fill from the start besides SANDGATE_RUNTIME's, comma-separated (runc, runsc); "
     "another runtime's pools fill once a request names it"},
    {"SANDGATE_LOG_LEVEL", SG_CFG_STR, "info", 0, 0, &cfg.log_level, "error, warn, info or debug"},
};

static char agent_volume[128];
static char runtime_warning[256];
static unsigned runtimes_offered, pool_runtimes; /* bits 1 << sg_runtime_index */

/* {"<key>": "1"}: the label of what outlives proxies (the store, the network,
 * the agent volume). */
static json_object *label_one(const char *key)
{
    json_object *labels = json_object_new_object();
    json_object_object_add(labels, key, json_object_new_string("1"));
    return labels;
}

/* Custom images have no agent: a volume holds the static one, copied from
 * the python image's /usr/local/bin (Docker fills a new volume from the
 * image's directory when a container first mounts it). Named after that
 * image, so a rebuilt agent gets a new volume. */
static int prepare_agent_volume(sg_docker_t *d, char *err, size_t errlen)
{
    char image[300], id[80], cid[72];
    err[0] = '\0';
    snprintf(image, sizeof(image), "%spython:latest", cfg.image_prefix);
    if (sg_docker_image_id(d, image, id, err, errlen) != 1) {
        if (err[0] == '\0')
            snprintf(err, errlen, "image %s is missing", image);
        return -1;
    }
    snprintf(agent_volume, sizeof(agent_volume), "sandgate-agent-%.12s", strncmp(id, "sha256:", 7) == 0 ? id + 7 : id);
    json_object *labels = label_one("sandgate.agent");
    int rc = sg_docker_volume_create(d, agent_volume, labels, err, errlen);
    json_object_put(labels);
    if (rc != 0)
        return -1;
    sg_container_spec_t spec = {
        .kind = SG_CONTAINER_AGENT_COPY,
        .image = image,
        .proxy_id = cfg.proxy_id,
        .session_id = "agent-volume",
        .created = sg_wall_s(),
        .agent_volume = agent_volume,
    };
    json_object *c = sg_container_config(&spec);
    rc = sg_docker_container_create(d, c, cid, err, errlen);
    json_object_put(c);
    if (rc == 0)
        rc = sg_docker_container_remove(d, cid, err, errlen);
    return rc;
}

static h2o_timeout_t tick_timeout;
static h2o_timeout_entry_t tick_entry;
static h2o_loop_t *loop;

static int lease_fd = -1;

static void on_tick(h2o_timeout_entry_t *e)
{
    sg_sessions_tick();
    sg_adopt_tick();
    h2o_timeout_link(loop, &tick_timeout, &tick_entry);
}

/* 1 if id may name a proxy: in labels, in the lease container's name and
 * in the state file's. */
static int proxy_id_valid(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              ((c == '_' || c == '.' || c == '-') && i > 0)))
            return 0;
    }
    return 1;
}

#define EXIT_HELD 3 /* another live proxy holds the id */

/* A start that ends before the loop: the id's lease given back (unless
 * another proxy holds it: rc EXIT_HELD), the engine's client let go; rc. */
static int give_up_engine(sg_docker_t *docker, int rc)
{
    if (rc != EXIT_HELD && lease_fd >= 0)
        sg_lease_release(docker, cfg.proxy_id, lease_fd);
    sg_docker_destroy(docker);
    sg_docker_cleanup();
    return rc;
}

/* The engine as the proxy needs it: answering, this proxy's id leased,
 * its leftovers removed and its sessions ready to adopt, its runtime
 * chosen (*runtime), the package store, the isolated network and the
 * agent volume there when configured. 0, -1 (logged), or EXIT_HELD when
 * another live proxy holds the id. */
static int prepare_engine(sg_docker_t *docker, const char **runtime)
{
    char err[512], version[32], api_version[16], lease_image[300];
    json_object *runtimes = NULL, *labels;
    int n, adoptable, rc;

    if (sg_docker_ping(docker, version, api_version, err, sizeof(err)) != 0) {
        sg_error("the Docker engine does not answer (%s); is dockerd running?", err);
        return -1;
    }
    sg_info("Docker engine %s, API %s (using %s)", version, api_version, sg_docker_api_version());
    /* before anything touches containers: one live proxy per id */
    if (cfg.lease_image[0] != '\0')
        snprintf(lease_image, sizeof(lease_image), "%s", cfg.lease_image);
    else
        snprintf(lease_image, sizeof(lease_image), "%spython:latest", cfg.image_prefix);
    rc = sg_lease_take(docker, cfg.proxy_id, lease_image, &lease_fd, err, sizeof(err));
    if (rc != 0) {
        sg_error("%s%s", rc > 0 ? "" : "cannot take the proxy id's lease: ", err);
        return rc > 0 ? EXIT_HELD : -1;
    }
    if (sg_adopt_init(cfg.state_dir, cfg.proxy_id, err, sizeof(err)) != 0)
        sg_warn("no state file (%s): sessions will not survive a restart of this proxy", err);
    if (sg_adopt_prepare(docker, cfg.proxy_id, &adoptable, &n, err, sizeof(err)) != 0) {
        sg_error("cannot reconcile leftover containers: %s", err);
        return -1;
    }
    sg_info("reconcile: %d container(s) of proxy \"%s\" removed, %d session(s) to adopt", n, cfg.proxy_id, adoptable);
    if (sg_docker_runtimes(docker, &runtimes, err, sizeof(err)) != 0)
        sg_warn("cannot list the engine's runtimes: %s", err);
    rc = sg_runtime_choose(cfg.runtime, runtimes, runtime, runtime_warning, sizeof(runtime_warning), err, sizeof(err));
    runtimes_offered = sg_runtime_offered(runtimes);
    json_object_put(runtimes);
    if (rc != 0) {
        sg_error("%s", err);
        return -1;
    }
    if (runtime_warning[0] != '\0')
        sg_warn("%s", runtime_warning);
    sg_info("sandboxes run on %s%s", *runtime, strcmp(*runtime, SG_RUNTIME_RUNSC) == 0 ? " (gVisor)" : "");
    if (sg_runtime_parse_list(cfg.pool_runtimes, &pool_runtimes, err, sizeof(err)) != 0) {
        sg_error("SANDGATE_POOL_RUNTIMES: %s", err);
        return -1;
    }
    if ((pool_runtimes & ~runtimes_offered) != 0) {
        sg_warn("SANDGATE_POOL_RUNTIMES names runsc, which the Docker engine does not offer: its pools stay empty");
        pool_runtimes &= runtimes_offered;
    }
    if (cfg.store_volume[0] != '\0') {
        /* the package store outlives proxies: it is a cache of public packages */
        labels = label_one("sandgate.store");
        rc = sg_docker_volume_create(docker, cfg.store_volume, labels, err, sizeof(err));
        json_object_put(labels);
        if (rc != 0) {
            sg_error("cannot create the package store volume %s: %s", cfg.store_volume, err);
            return -1;
        }
    }
    if (cfg.allow_network) {
        /* Docker's default bridge lets containers reach each other: sessions
         * with the network get one where they cannot (it outlives proxies) */
        labels = label_one("sandgate.network");
        rc = sg_docker_network_isolated(docker, cfg.sandbox_network, labels, err, sizeof(err));
        json_object_put(labels);
        if (rc != 0) {
            sg_error("sessions may have the network, but: %s", err);
            return -1;
        }
    }
    if (cfg.image_allowlist[0] != '\0' && prepare_agent_volume(docker, err, sizeof(err)) != 0) {
        sg_error("custom images are allowed, but the agent volume cannot be made: %s", err);
        return -1;
    }
    return 0;
}

/* The proxy's context and the API's settings, from the configuration. */
static void make_context(sg_proxy_t *px, sg_api_t *api)
{
    px->id = cfg.proxy_id;
    px->template_repo = cfg.template_repo;
    px->max_file_bytes = cfg.max_file_bytes;
    px->runtime_warning = runtime_warning;
    px->install.store_volume = cfg.store_volume;
    px->install.network = cfg.install_network;
    px->install.pip_index_url = cfg.pip_index_url;
    px->install.npm_registry = cfg.npm_registry;
    px->install.timeout_ms = (long)(cfg.install_timeout * 1000);
    px->install.blocklist = cfg.library_blocklist;
    memset(api, 0, sizeof(*api));
    api->proxy = px;
    api->policy.defaults.timeout_s = cfg.exec_timeout;
    api->policy.defaults.memory_mb = cfg.memory_mb;
    api->policy.defaults.cpus = cfg.cpus;
    api->policy.defaults.network = 0;
    api->policy.defaults.pids = cfg.pids;
    api->policy.defaults.output_bytes = cfg.output_limit;
    api->policy.defaults.tmpfs_mb = cfg.tmpfs_mb;
    api->policy.defaults.results_max = cfg.max_results;
    api->policy.defaults.result_bytes = cfg.max_result_bytes;
    api->policy.defaults.files_max = cfg.max_result_files;
    api->policy.max_timeout_s = cfg.max_exec_timeout;
    api->policy.max_memory_mb = cfg.max_memory_mb;
    api->policy.max_cpus = cfg.max_cpus;
    api->policy.allow_network = cfg.allow_network;
    api->image_allowlist = cfg.image_allowlist;
    api->session_queue = cfg.session_queue;
}

/* What sessions need of it all (session_life.h). */
static void make_sessions_conf(sg_sessions_conf_t *sconf, const sg_proxy_t *px, const sg_api_t *api,
                               const char *runtime)
{
    memset(sconf, 0, sizeof(*sconf));
    sconf->loop = px->loop;
    sconf->workq = px->workq;
    sconf->proxy_id = cfg.proxy_id;
    sconf->image_prefix = cfg.image_prefix;
    sconf->template_repo = cfg.template_repo;
    sconf->max_sessions = cfg.max_sessions;
    sconf->pool_size = cfg.pool_size;
    sconf->pool_refill_delay_ms = cfg.pool_refill_delay_ms;
    sconf->store_volume = cfg.store_volume;
    sconf->sandbox_network = cfg.sandbox_network;
    sconf->agent_volume = agent_volume;
    sconf->pool_limits = api->policy.defaults;
    sconf->agent_start_timeout_ms = (int)cfg.agent_start_timeout_ms;
    sconf->runtime = runtime;
    sconf->runtimes_offered = runtimes_offered;
    sconf->pool_runtimes = pool_runtimes;
    sconf->on_listed_change = sg__adopt_changed; /* the state file for the next proxy */
}

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    stop_signal = sig;
}

/* The loop until SIGTERM, SIGINT (stop: every container goes) or SIGUSR2
 * (upgrade: the sessions stay for the next proxy). The signal. */
static int run_loop(h2o_loop_t *l)
{
    signal(SIGINT, on_stop_signal);
    signal(SIGTERM, on_stop_signal);
    signal(SIGUSR2, on_stop_signal);
    while (!stop_signal)
        h2o_evloop_run(l, 1000);
    sg_info("signal %d: %s", (int)stop_signal,
            stop_signal == SIGUSR2 ? "stopping for an upgrade, sessions kept" : "shutting down");
    return (int)stop_signal;
}

#define UPGRADE_DRAIN_MS 10000

static void busy_one(sg_session_t *s, void *data)
{
    if (!h2o_linklist_is_empty(&s->_ops) || s->waiting != 0)
        *(int *)data = 1;
}

/* Whether a request is under way on a session (or waits for one). */
static int sessions_busy(void)
{
    int busy = 0;
    sg_session_foreach(busy_one, &busy);
    return busy;
}

int main(int argc, char **argv)
{
    char err[512];
    static sg_proxy_t px; /* the proxy's context: read-only once the loop runs */
    sg_api_t api;
    sg_sessions_conf_t sconf;
    sg_http_server_t *server;
    sg_docker_t *docker;
    const char *runtime = NULL;
    int n;

    int rc = sg_daemon_begin(argc, argv, config_table, sizeof(config_table) / sizeof(config_table[0]), "sandgate-proxy",
                             "the internal sandbox service", &cfg.log_level);
    if (rc >= 0)
        return rc;

    if (sg_docker_setup(cfg.docker_host, cfg.docker_api, cfg.docker_tls_verify, cfg.docker_cert_path, err,
                        sizeof(err)) != 0) {
        sg_error("%s", err);
        return 2;
    }
    if (!proxy_id_valid(cfg.proxy_id)) {
        sg_error("SANDGATE_PROXY_ID \"%s\": 1 to 64 of [A-Za-z0-9_.-], not starting with _ . or -", cfg.proxy_id);
        sg_docker_cleanup();
        return 2;
    }
    sg_info("Docker engine at %s (%s)", cfg.docker_host, sg_docker_transport());
    docker = sg_docker_create();
    if ((rc = prepare_engine(docker, &runtime)) != 0)
        return give_up_engine(docker, rc == EXIT_HELD ? EXIT_HELD : 1);
    make_context(&px, &api);

    size_t max_body = (size_t)(cfg.max_body > cfg.max_file_bytes ? cfg.max_body : cfg.max_file_bytes);
    server = sg_http_server_create(cfg.host, (int)cfg.port, max_body, sg_api_handle, &api, err, sizeof(err));
    if (server == NULL ||
        (cfg.socket_path[0] != '\0' && sg_http_server_listen_unix(server, cfg.socket_path, err, sizeof(err)) != 0)) {
        sg_error("%s%s", server != NULL ? "SANDGATE_PROXY_SOCKET: " : "", err);
        sg_http_server_destroy(server);
        return give_up_engine(docker, 1);
    }
    loop = sg_http_server_loop(server);
    px.loop = loop;
    px.workq = sg_workq_create(loop, (int)cfg.workers);
    sg_libraries_init(&px);
    sg_capacity_init(cfg.max_containers);
    make_sessions_conf(&sconf, &px, &api, runtime);
    sg_sessions_init(&sconf);
    sg_adopt_start(cfg.max_exec_timeout);

    sg_pool_fill();
    h2o_timeout_init(loop, &tick_timeout, 1000);
    tick_entry.cb = on_tick;
    h2o_timeout_link(loop, &tick_timeout, &tick_entry);

    sg_http_server_allow_h2c(server, cfg.http2_cleartext);
    sg_http_server_start(server);
    sg_info("listening on %s:%d%s%s as proxy \"%s\"", cfg.host, sg_http_server_port(server),
            cfg.socket_path[0] != '\0' ? " and " : "", cfg.socket_path, cfg.proxy_id);
    int sig = run_loop(loop);
    int upgrade = sig == SIGUSR2;
    sg_http_server_stop_accepting(server);
    if (upgrade) {
        /* the requests under way finish (bounded), the sessions stay */
        uint64_t until = sg_now_ms() + UPGRADE_DRAIN_MS;
        while (sessions_busy() && sg_now_ms() < until)
            h2o_evloop_run(loop, 100);
        if (sessions_busy())
            sg_warn("upgrade: requests still running after %d ms are cut", UPGRADE_DRAIN_MS);
    }
    /* Finish the Docker calls under way, then remove the containers this
     * proxy owns: every one (SIGTERM, SIGINT), or all but its sessions'
     * (SIGUSR2: the next proxy with this id adopts them). */
    sg_adopt_abort();
    sg_workq_destroy(px.workq);
    if ((n = sg_adopt_leave(docker, cfg.proxy_id, upgrade, err, sizeof(err))) < 0)
        sg_error("shutdown: cannot list containers: %s", err);
    else if (upgrade)
        sg_info("upgrade: %d container(s) removed, %zu session(s) left for the next proxy", n, sg_session_count());
    else
        sg_info("shutdown: %d container(s) removed", n);
    sg_lease_release(docker, cfg.proxy_id, lease_fd);
    /* made again at the next start; another proxy still using it keeps it */
    if (agent_volume[0] != '\0' && sg_docker_volume_remove(docker, agent_volume, err, sizeof(err)) != 0)
        sg_info("shutdown: agent volume %s kept: %s", agent_volume, err);
    sg_docker_destroy(docker);
    return 0;
}
