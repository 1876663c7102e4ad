/*
 * container.h — the one place a container's configuration (the body of
 * POST /containers/create) is built, for every kind of container the proxy
 * makes: sandboxes (a session's, a one-shot's, a pooled one), installers,
 * the builder a template is committed from, and the copy that fills the
 * agent volume. What they share — the hardening, the labels that say who
 * owns it, the package store mount, capped tmpfs mounts — is written once
 * here. Pure: a spec in, JSON out (the caller puts it).
 */
#ifndef SANDGATE_CONTAINER_H
#define SANDGATE_CONTAINER_H

#include <json-c/json.h>
#include <stdint.h>

/* Where the package store volume is mounted (install.h). */
#define SG_STORE_MOUNT "/opt/sandgate/store"

/* Where a template image keeps the work dir it was committed with: a
 * session made from it gets a copy in its own /sandbox at start. */
#define SG_TEMPLATE_WORKDIR "/opt/sandgate/template/sandbox"

/* Under runsc (gVisor) the host's pids cgroup counts the sandbox kernel's
 * own threads (~35 idle) and several host threads per sandboxed process
 * (platform ptrace; measured here: ~960 for a fork bomb held at 128
 * processes): a PidsLimit of `pids` would kill the whole sandbox long
 * before its processes reach `pids` (the kernel cannot make a thread and
 * exits). So there the cap on the tenant's processes is RLIMIT_NPROC
 * (Ulimits "nproc", which gVisor's kernel counts for the sandbox alone:
 * user code runs as uid 1000, the agent as root outside that count), and
 * the host cgroup gets SG_RUNSC_PIDS_PER_TASK per process plus
 * SG_RUNSC_PIDS_BASE, a backstop for the sandbox as a whole. Under runc,
 * nothing changes (RLIMIT_NPROC would count uid 1000 across the host). */
#define SG_RUNSC_PIDS_PER_TASK 12
#define SG_RUNSC_PIDS_BASE 128
/* One inode per this many bytes of a tmpfs's size: without a cap a tmpfs
 * takes about half the host's RAM pages of inodes, and empty files cost no
 * blocks, so a sandbox could make millions of them. */
#define SG_TMPFS_BYTES_PER_INODE 4096
/* Size of a sandbox's /dev/shm, MiB (Docker's default). */
#define SG_SHM_MB 64

typedef enum {
    SG_CONTAINER_SESSION,    /* a session's sandbox */
    SG_CONTAINER_EPHEMERAL,  /* the sandbox of one POST /execute */
    SG_CONTAINER_POOL,       /* a ready sandbox of the warm pool */
    SG_CONTAINER_INSTALLER,  /* fetches one package into the store (install.h) */
    SG_CONTAINER_TEMPLATE,   /* never started: a template is committed from it */
    SG_CONTAINER_AGENT_COPY, /* never started: fills the agent volume from its image */
    SG_CONTAINER_LEASE,      /* a proxy id's liveness (lease.h): lives while its proxy's attach does */
} sg_container_kind_t;

/* Its sandgate.kind label: "session", "ephemeral", "pool", "installer",
 * "template", "agent-copy", "lease". */
const char *sg_container_kind_name(sg_container_kind_t kind);

typedef struct {
    sg_container_kind_t kind;
    const char *image;
    /* the labels: sandgate.proxy, sandgate.session (the session's id, or
     * what the container serves), sandgate.lang (when not NULL),
     * sandgate.kind, sandgate.created */
    const char *proxy_id;
    const char *session_id;
    const char *lang;
    int64_t created;

    /* sandboxes (SESSION, EPHEMERAL, POOL) */
    struct {
        long memory_mb; /* memory, and memory + swap */
        double cpus;
        long pids;
        long tmpfs_mb; /* /sandbox and /tmp */
        int network;
    } limits;
    const char *runtime;      /* HostConfig.Runtime, and the sandgate.runtime label */
    const char *network;      /* NetworkMode when limits.network (never Docker's default bridge) */
    const char *agent_volume; /* a custom image: the static agent is mounted from it and is the entrypoint */
    const char *store_volume; /* the package store, mounted read-only (NULL or "": none) */
    int workdir_volume;       /* /sandbox on a volume Docker's archive API reads (keep_template, from a template) */

    /* INSTALLER: store_volume (read-write) and */
    const char *fetch_cmd;       /* the language's fetch script */
    const char *fetch_spec;      /* SANDGATE_SPEC */
    const char *index_url;       /* SANDGATE_INDEX */
    const char *install_network; /* its NetworkMode */

    /* TEMPLATE: its labels say whose template of which repository, on what base */
    const char *template_repo;
    const char *template_owner;
    const char *template_base;

    /* AGENT_COPY: the volume mounted at /usr/local/bin (agent_volume) */

    /* LEASE: runc, no network, 16 MiB, removed when it exits; it runs
     * `cat` until its stdin (its proxy's attach) closes. Its labels are
     * sandgate.lease=<proxy_id>, sandgate.kind, sandgate.created: not
     * sandgate.proxy, which marks the sandboxes the proxy counts */
} sg_container_spec_t;

/* The configuration of a container of spec->kind. */
json_object *sg_container_config(const sg_container_spec_t *spec);

#endif
