#include "container.h"
#include "runtime.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *sg_container_kind_name(sg_container_kind_t kind)
{
    switch (kind) {
    case SG_CONTAINER_SESSION:
        return "session";
    case SG_CONTAINER_EPHEMERAL:
        return "ephemeral";
    case SG_CONTAINER_POOL:
        return "pool";
    case SG_CONTAINER_INSTALLER:
        return "installer";
    case SG_CONTAINER_TEMPLATE:
        return "template";
    case SG_CONTAINER_AGENT_COPY:
        return "agent-copy";
    case SG_CONTAINER_LEASE:
        return "lease";
    }
    return "unknown";
}

static void add_str(json_object *o, const char *key, const char *v)
{
    json_object_object_add(o, key, json_object_new_string(v));
}

static json_object *str_array(const char *const *v, size_t n)
{
    json_object *arr = json_object_new_array();
    for (size_t i = 0; i < n; i++)
        json_object_array_add(arr, json_object_new_string(v[i]));
    return arr;
}

/* CapDrop ["ALL"], SecurityOpt ["no-new-privileges"], and Memory =
 * MemorySwap, PidsLimit, NanoCpus. */
static void harden(json_object *hc, int64_t memory_mb, int64_t pids, double cpus)
{
    static const char *const all[] = {"ALL"}, *const nnp[] = {"no-new-privileges"};
    json_object_object_add(hc, "CapDrop", str_array(all, 1));
    json_object_object_add(hc, "SecurityOpt", str_array(nnp, 1));
    json_object_object_add(hc, "Memory", json_object_new_int64(memory_mb << 20));
    json_object_object_add(hc, "MemorySwap", json_object_new_int64(memory_mb << 20));
    json_object_object_add(hc, "PidsLimit", json_object_new_int64(pids));
    json_object_object_add(hc, "NanoCpus", json_object_new_int64((int64_t)llround(cpus * 1e9)));
}

/* The agent of a sandbox starts as root with three capabilities, which it
 * keeps only as permitted (agent/creds.h): CAP_SETUID and CAP_SETGID to
 * make every process it starts the sandbox user for good (setresuid,
 * setgroups, setresgid), CAP_SETPCAP to empty that process's bounding set
 * first. Not CAP_KILL: the agent signals user code as its owner (its
 * effective uid is the sandbox user's); not CAP_DAC_OVERRIDE nor CAP_CHOWN:
 * it reads and writes files as the sandbox user. A real and saved uid of 0
 * is what keeps user code from signalling, tracing or opening the agent. */
static void agent_caps(json_object *c, json_object *hc)
{
    static const char *const caps[] = {"CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"};
    add_str(c, "User", "0:0");
    json_object_object_add(hc, "CapAdd", str_array(caps, 3));
}

/* Under runsc: RLIMIT_NPROC and the host cgroup's backstop (container.h). */
static void runtime_limits(json_object *hc, const char *runtime, int64_t pids)
{
    if (strcmp(runtime, SG_RUNTIME_RUNSC) != 0)
        return;
    json_object *ulimits = json_object_new_array(), *nproc = json_object_new_object();
    add_str(nproc, "Name", "nproc");
    json_object_object_add(nproc, "Soft", json_object_new_int64(pids));
    json_object_object_add(nproc, "Hard", json_object_new_int64(pids));
    json_object_array_add(ulimits, nproc);
    json_object_object_add(hc, "Ulimits", ulimits);
    json_object_object_add(hc, "PidsLimit", json_object_new_int64(pids * SG_RUNSC_PIDS_PER_TASK + SG_RUNSC_PIDS_BASE));
}

/* A tmpfs's mount options: `opts`, then size=<size_mb>m and nr_inodes at
 * one inode per SG_TMPFS_BYTES_PER_INODE, so that neither bytes nor files
 * go past what its size allows (every tmpfs a container gets has both). */
static void tmpfs_opts(char *buf, size_t len, const char *opts, long size_mb)
{
    long inodes = (long)(((int64_t)size_mb << 20) / SG_TMPFS_BYTES_PER_INODE);
    snprintf(buf, len, "%s,size=%ldm,nr_inodes=%ld", opts, size_mb, inodes > 0 ? inodes : 1);
}

/* A tmpfs at `path` in a HostConfig.Tmpfs object (tmpfs_opts). */
static void tmpfs_add(json_object *tmpfs, const char *path, const char *opts, long size_mb)
{
    char buf[256];
    tmpfs_opts(buf, sizeof(buf), opts, size_mb);
    add_str(tmpfs, path, buf);
}

static json_object *labels_of(const sg_container_spec_t *spec)
{
    json_object *labels = json_object_new_object();
    char buf[32];
    add_str(labels, "sandgate.proxy", spec->proxy_id);
    add_str(labels, "sandgate.session", spec->session_id);
    if (spec->lang != NULL)
        add_str(labels, "sandgate.lang", spec->lang);
    add_str(labels, "sandgate.kind", sg_container_kind_name(spec->kind));
    snprintf(buf, sizeof(buf), "%lld", (long long)spec->created);
    add_str(labels, "sandgate.created", buf);
    return labels;
}

/* A Mounts entry: a named volume at target. */
static json_object *volume_mount(const char *volume, const char *target, int read_only)
{
    json_object *m = json_object_new_object();
    add_str(m, "Type", "volume");
    add_str(m, "Source", volume);
    add_str(m, "Target", target);
    if (read_only)
        json_object_object_add(m, "ReadOnly", json_object_new_boolean(1));
    return m;
}

/* A Mounts entry: /sandbox on a volume of its own (anonymous, so removed
 * with the container) held in a tmpfs of size_mb MiB, owned by 1000. Unlike
 * a HostConfig.Tmpfs mount, Docker's archive API can read it, so a
 * keep_template session's work dir can be copied out at close, and filled
 * in at start for a session made from a template; its size is capped all
 * the same. */
static json_object *workdir_volume(long size_mb)
{
    json_object *m = json_object_new_object(), *vo = json_object_new_object(), *dc = json_object_new_object();
    json_object *opts = json_object_new_object();
    char o[256];

    tmpfs_opts(o, sizeof(o), "rw,nosuid,nodev,exec,uid=1000,gid=1000,mode=0755", size_mb);
    add_str(opts, "type", "tmpfs");
    add_str(opts, "device", "tmpfs");
    add_str(opts, "o", o);
    add_str(dc, "Name", "local");
    json_object_object_add(dc, "Options", opts);
    json_object_object_add(vo, "DriverConfig", dc);
    add_str(m, "Type", "volume");
    add_str(m, "Target", "/sandbox");
    json_object_object_add(m, "VolumeOptions", vo);
    return m;
}

/* Image, User 1000:1000, WorkingDir, Labels; the caller adds the rest. */
static json_object *config_base(const sg_container_spec_t *spec, const char *workdir, json_object *labels)
{
    json_object *c = json_object_new_object();
    add_str(c, "Image", spec->image);
    if (workdir != NULL) {
        add_str(c, "User", "1000:1000");
        add_str(c, "WorkingDir", workdir);
    }
    json_object_object_add(c, "Labels", labels);
    return c;
}

/* The Env of code that runs in the work dir. */
static json_object *workdir_env(void)
{
    static const char *const env[] = {"SANDGATE_WORKDIR=/sandbox", "HOME=/sandbox"};
    return str_array(env, 2);
}

static json_object *sandbox_config(const sg_container_spec_t *spec)
{
    json_object *labels = labels_of(spec), *hc = json_object_new_object(), *tmpfs = json_object_new_object();
    json_object *c, *lc = json_object_new_object(), *mounts = NULL;

    add_str(labels, "sandgate.runtime", spec->runtime);
    c = config_base(spec, "/sandbox", labels);
    if (spec->agent_volume != NULL) {
        /* a custom image has no agent of its own: the static one is mounted in */
        static const char *const ep[] = {"/opt/sandgate/bin/sandgate-agent"};
        json_object_object_add(c, "Entrypoint", str_array(ep, 1));
        json_object_object_add(c, "Cmd", json_object_new_array());
    }
    json_object_object_add(c, "Env", workdir_env());
    json_object_object_add(c, "OpenStdin", json_object_new_boolean(1));
    json_object_object_add(c, "StdinOnce", json_object_new_boolean(0));
    json_object_object_add(c, "AttachStdin", json_object_new_boolean(1));
    json_object_object_add(c, "AttachStdout", json_object_new_boolean(1));
    json_object_object_add(c, "AttachStderr", json_object_new_boolean(1));
    json_object_object_add(c, "Tty", json_object_new_boolean(0));
    json_object_object_add(c, "NetworkDisabled", json_object_new_boolean(!spec->limits.network));

    add_str(hc, "NetworkMode", spec->limits.network ? spec->network : "none");
    add_str(hc, "Runtime", spec->runtime);
    harden(hc, spec->limits.memory_mb, spec->limits.pids, spec->limits.cpus);
    agent_caps(c, hc);
    runtime_limits(hc, spec->runtime, spec->limits.pids);
    /* The root is read-only for every session. A template session's work
     * dir is a size-capped tmpfs like any other, but on a volume, which
     * Docker's archive API can read at close (the commit) and fill at start
     * (a session made from a template). */
    json_object_object_add(hc, "ReadonlyRootfs", json_object_new_boolean(1));
    if (!spec->workdir_volume)
        tmpfs_add(tmpfs, "/sandbox", "rw,exec,nosuid,nodev,uid=1000,gid=1000,mode=0755", spec->limits.tmpfs_mb);
    tmpfs_add(tmpfs, "/tmp", "rw,exec,nosuid,nodev,mode=1777", spec->limits.tmpfs_mb);
    /* /dev/shm in place of Docker's own, which has no inode cap */
    tmpfs_add(tmpfs, "/dev/shm", "rw,noexec,nosuid,nodev,mode=1777", SG_SHM_MB);
    json_object_object_add(hc, "Tmpfs", tmpfs);
    json_object_object_add(hc, "Init", json_object_new_boolean(0)); /* the agent is PID 1 and reaps */
    if (spec->agent_volume != NULL) {
        mounts = json_object_new_array();
        json_object_array_add(mounts, volume_mount(spec->agent_volume, "/opt/sandgate/bin", 1));
    } else if (spec->store_volume != NULL && spec->store_volume[0] != '\0') {
        /* the package store (install.h), read-only: installs come from it */
        mounts = json_object_new_array();
        json_object_array_add(mounts, volume_mount(spec->store_volume, SG_STORE_MOUNT, 1));
    }
    if (spec->workdir_volume) {
        if (mounts == NULL)
            mounts = json_object_new_array();
        json_object_array_add(mounts, workdir_volume(spec->limits.tmpfs_mb));
    }
    if (mounts != NULL)
        json_object_object_add(hc, "Mounts", mounts);
    add_str(lc, "Type", "none");
    json_object_object_add(lc, "Config", json_object_new_object());
    json_object_object_add(hc, "LogConfig", lc);
    json_object_object_add(c, "HostConfig", hc);
    return c;
}

static json_object *installer_config(const sg_container_spec_t *spec)
{
    static const char *const ep[] = {"/bin/sh", "-c"};
    json_object *c = config_base(spec, "/tmp", labels_of(spec)), *hc = json_object_new_object();
    json_object *env = json_object_new_array(), *tmpfs = json_object_new_object(), *mounts = json_object_new_array();
    char buf[2048];

    json_object_object_add(c, "Entrypoint", str_array(ep, 2));
    json_object_object_add(c, "Cmd", str_array(&spec->fetch_cmd, 1));
    snprintf(buf, sizeof(buf), "SANDGATE_SPEC=%s", spec->fetch_spec);
    json_object_array_add(env, json_object_new_string(buf));
    snprintf(buf, sizeof(buf), "SANDGATE_INDEX=%s", spec->index_url);
    json_object_array_add(env, json_object_new_string(buf));
    json_object_array_add(env, json_object_new_string("SANDGATE_STORE=" SG_STORE_MOUNT));
    json_object_array_add(env, json_object_new_string("HOME=/tmp"));
    json_object_object_add(c, "Env", env);

    /* the package manager's network only: nothing of the session's runs here */
    add_str(hc, "NetworkMode", spec->install_network);
    /* runc whatever SANDGATE_RUNTIME says: an installer runs only the
     * package manager, on the network runsc's entry has turned off */
    add_str(hc, "Runtime", SG_RUNTIME_INSTALLER);
    harden(hc, 1024, 256, 1.0);
    json_object_object_add(hc, "ReadonlyRootfs", json_object_new_boolean(1));
    tmpfs_add(tmpfs, "/tmp", "rw,exec,nosuid,nodev,mode=1777", 512);
    json_object_object_add(hc, "Tmpfs", tmpfs);
    json_object_array_add(mounts, volume_mount(spec->store_volume, SG_STORE_MOUNT, 0));
    json_object_object_add(hc, "Mounts", mounts);
    json_object_object_add(c, "HostConfig", hc);
    return c;
}

/* The session's base image, never started, labelled as a template of this
 * repository for its owner (the image inherits the labels), and removed by
 * reconcile if the proxy dies before it does. */
static json_object *template_config(const sg_container_spec_t *spec)
{
    json_object *labels = labels_of(spec), *c, *hc = json_object_new_object();

    add_str(labels, "sandgate.template", spec->template_repo);
    add_str(labels, "sandgate.owner", spec->template_owner);
    add_str(labels, "sandgate.template.base", spec->template_base);
    c = config_base(spec, SG_TEMPLATE_WORKDIR, labels);
    json_object_object_add(c, "Env", workdir_env());
    json_object_object_add(c, "NetworkDisabled", json_object_new_boolean(1));
    add_str(hc, "NetworkMode", "none");
    json_object_object_add(c, "HostConfig", hc);
    return c;
}

/* Created, never started: Docker fills a new volume from the image's
 * directory when a container first mounts it. */
static json_object *agent_copy_config(const sg_container_spec_t *spec)
{
    static const char *const ep[] = {"/usr/local/bin/sandgate-agent"};
    json_object *c = config_base(spec, NULL, labels_of(spec)), *hc = json_object_new_object();
    json_object *mounts = json_object_new_array();

    json_object_object_add(c, "Entrypoint", str_array(ep, 1));
    add_str(hc, "NetworkMode", "none");
    json_object_array_add(mounts, volume_mount(spec->agent_volume, "/usr/local/bin", 0));
    json_object_object_add(hc, "Mounts", mounts);
    json_object_object_add(c, "HostConfig", hc);
    return c;
}

/* The lease of a proxy id (lease.h): stdin open once (StdinOnce), so the
 * end of its proxy's attach connection, whatever ends it, ends `cat`, and
 * the container removes itself (AutoRemove). */
static json_object *lease_config(const sg_container_spec_t *spec)
{
    static const char *const ep[] = {"/bin/sh", "-c", "exec cat >/dev/null"};
    json_object *labels = json_object_new_object(), *hc = json_object_new_object(), *c;
    char buf[32];

    /* not sandgate.proxy: what carries it is a sandbox, counted in the
     * proxy's containers (GET /health) */
    add_str(labels, "sandgate.lease", spec->proxy_id);
    add_str(labels, "sandgate.kind", sg_container_kind_name(spec->kind));
    snprintf(buf, sizeof(buf), "%lld", (long long)spec->created);
    add_str(labels, "sandgate.created", buf);
    c = config_base(spec, "/", labels);

    json_object_object_add(c, "Entrypoint", str_array(ep, 3));
    json_object_object_add(c, "Cmd", json_object_new_array());
    json_object_object_add(c, "OpenStdin", json_object_new_boolean(1));
    json_object_object_add(c, "StdinOnce", json_object_new_boolean(1));
    json_object_object_add(c, "AttachStdin", json_object_new_boolean(1));
    json_object_object_add(c, "AttachStdout", json_object_new_boolean(1));
    json_object_object_add(c, "AttachStderr", json_object_new_boolean(1));
    json_object_object_add(c, "NetworkDisabled", json_object_new_boolean(1));
    add_str(hc, "NetworkMode", "none");
    add_str(hc, "Runtime", SG_RUNTIME_RUNC);
    harden(hc, 16, 8, 0.1);
    json_object_object_add(hc, "ReadonlyRootfs", json_object_new_boolean(1));
    json_object_object_add(hc, "AutoRemove", json_object_new_boolean(1));
    json_object *lc = json_object_new_object();
    add_str(lc, "Type", "none");
    json_object_object_add(lc, "Config", json_object_new_object());
    json_object_object_add(hc, "LogConfig", lc);
    json_object_object_add(c, "HostConfig", hc);
    return c;
}

json_object *sg_container_config(const sg_container_spec_t *spec)
{
    switch (spec->kind) {
    case SG_CONTAINER_INSTALLER:
        return installer_config(spec);
    case SG_CONTAINER_TEMPLATE:
        return template_config(spec);
    case SG_CONTAINER_AGENT_COPY:
        return agent_copy_config(spec);
    case SG_CONTAINER_LEASE:
        return lease_config(spec);
    default:
        return sandbox_config(spec);
    }
}
