/*
 * container.h — the pieces of a container's configuration that every kind
 * of container the proxy makes shares (sandboxes, pooled ones, installers):
 * the hardening, the labels that say who owns it, the package store mount.
 * Pure: JSON in, JSON out.
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

/* Adds CapDrop ["ALL"] and SecurityOpt ["no-new-privileges"] to a HostConfig,
 * and Memory = MemorySwap, PidsLimit, NanoCpus. */
void sg_container_harden(json_object *hc, int64_t memory_mb, int64_t pids, double cpus);
/* Under runsc (gVisor) the host's pids cgroup counts the sandbox kernel's
 * own threads (~35 idle) and about five host threads per sandboxed process
 * (platform ptrace): a PidsLimit of `pids` would kill the whole sandbox
 * long before its processes reach `pids`. So there the cap on the tenant's
 * processes is RLIMIT_NPROC (Ulimits "nproc", which gVisor's kernel counts
 * for the sandbox alone: every process in it runs as uid 1000), and the
 * host cgroup gets SG_RUNSC_PIDS_PER_TASK per process plus
 * SG_RUNSC_PIDS_BASE, a backstop for the sandbox as a whole. Under runc,
 * nothing changes (RLIMIT_NPROC would count uid 1000 across the host). */
#define SG_RUNSC_PIDS_PER_TASK 6
#define SG_RUNSC_PIDS_BASE 96
void sg_container_runtime_limits(json_object *hc, const char *runtime, int64_t pids);
/* One inode per this many bytes of a tmpfs's size: without a cap a tmpfs
 * takes about half the host's RAM pages of inodes, and empty files cost no
 * blocks, so a sandbox could make millions of them. */
#define SG_TMPFS_BYTES_PER_INODE 4096
/* Size of a sandbox's /dev/shm, MiB (Docker's default). */
#define SG_SHM_MB 64

/* Adds a tmpfs at `path` to a HostConfig.Tmpfs object: the mount options
 * `opts`, then size=<size_mb>m and nr_inodes for SG_TMPFS_BYTES_PER_INODE. */
void sg_container_tmpfs(json_object *tmpfs, const char *path, const char *opts, long size_mb);
/* Adds /dev/shm (SG_SHM_MB, noexec) to a Tmpfs object, in place of Docker's
 * own, which has no inode cap. */
void sg_container_shm(json_object *tmpfs);
/* Labels sandgate.proxy, sandgate.session, sandgate.kind, sandgate.created,
 * and sandgate.lang when lang is not NULL. */
json_object *sg_container_labels(const char *proxy_id, const char *session_id, const char *lang, const char *kind,
                                 int64_t created);
/* A Mounts array holding the store volume at SG_STORE_MOUNT. */
json_object *sg_container_store_mount(const char *volume, int read_only);

/* A Mounts entry: /sandbox on a volume of its own (anonymous, so removed
 * with the container) held in a tmpfs of size_mb MiB, owned by 1000. Unlike
 * a HostConfig.Tmpfs mount, Docker's archive API can read it, so a
 * keep_template session's work dir can be copied out at close, and filled
 * in at start for a session made from a template; its size is capped all
 * the same. */
json_object *sg_container_workdir_volume(long size_mb);

#endif
