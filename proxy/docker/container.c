#include "container.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void sg_container_harden(json_object *hc, int64_t memory_mb, int64_t pids, double cpus)
{
    json_object *arr = json_object_new_array();
    json_object_array_add(arr, json_object_new_string("ALL"));
    json_object_object_add(hc, "CapDrop", arr);
    arr = json_object_new_array();
    json_object_array_add(arr, json_object_new_string("no-new-privileges"));
    json_object_object_add(hc, "SecurityOpt", arr);
    json_object_object_add(hc, "Memory", json_object_new_int64(memory_mb << 20));
    json_object_object_add(hc, "MemorySwap", json_object_new_int64(memory_mb << 20));
    json_object_object_add(hc, "PidsLimit", json_object_new_int64(pids));
    json_object_object_add(hc, "NanoCpus", json_object_new_int64((int64_t)llround(cpus * 1e9)));
}

void sg_container_runtime_limits(json_object *hc, const char *runtime, int64_t pids)
{
    if (strcmp(runtime, "runsc") != 0)
        return;
    json_object *ulimits = json_object_new_array(), *nproc = json_object_new_object();
    json_object_object_add(nproc, "Name", json_object_new_string("nproc"));
    json_object_object_add(nproc, "Soft", json_object_new_int64(pids));
    json_object_object_add(nproc, "Hard", json_object_new_int64(pids));
    json_object_array_add(ulimits, nproc);
    json_object_object_add(hc, "Ulimits", ulimits);
    json_object_object_add(hc, "PidsLimit", json_object_new_int64(pids * SG_RUNSC_PIDS_PER_TASK + SG_RUNSC_PIDS_BASE));
}

void sg_container_tmpfs(json_object *tmpfs, const char *path, const char *opts, long size_mb)
{
    char buf[256];
    long inodes = (long)(((int64_t)size_mb << 20) / SG_TMPFS_BYTES_PER_INODE);
    snprintf(buf, sizeof(buf), "%s,size=%ldm,nr_inodes=%ld", opts, size_mb, inodes > 0 ? inodes : 1);
    json_object_object_add(tmpfs, path, json_object_new_string(buf));
}

void sg_container_shm(json_object *tmpfs)
{
    sg_container_tmpfs(tmpfs, "/dev/shm", "rw,noexec,nosuid,nodev,mode=1777", SG_SHM_MB);
}

json_object *sg_container_labels(const char *proxy_id, const char *session_id, const char *lang, const char *kind,
                                 int64_t created)
{
    json_object *labels = json_object_new_object();
    char buf[32];
    json_object_object_add(labels, "sandgate.proxy", json_object_new_string(proxy_id));
    json_object_object_add(labels, "sandgate.session", json_object_new_string(session_id));
    if (lang != NULL)
        json_object_object_add(labels, "sandgate.lang", json_object_new_string(lang));
    json_object_object_add(labels, "sandgate.kind", json_object_new_string(kind));
    snprintf(buf, sizeof(buf), "%lld", (long long)created);
    json_object_object_add(labels, "sandgate.created", json_object_new_string(buf));
    return labels;
}

json_object *sg_container_store_mount(const char *volume, int read_only)
{
    json_object *mounts = json_object_new_array(), *m = json_object_new_object();
    json_object_object_add(m, "Type", json_object_new_string("volume"));
    json_object_object_add(m, "Source", json_object_new_string(volume));
    json_object_object_add(m, "Target", json_object_new_string(SG_STORE_MOUNT));
    if (read_only)
        json_object_object_add(m, "ReadOnly", json_object_new_boolean(1));
    json_object_array_add(mounts, m);
    return mounts;
}

json_object *sg_container_workdir_volume(long size_mb)
{
    json_object *m = json_object_new_object(), *vo = json_object_new_object(), *dc = json_object_new_object();
    json_object *opts = json_object_new_object();
    char o[128];

    snprintf(o, sizeof(o), "rw,nosuid,nodev,exec,size=%ldm,uid=1000,gid=1000,mode=0755", size_mb);
    json_object_object_add(opts, "type", json_object_new_string("tmpfs"));
    json_object_object_add(opts, "device", json_object_new_string("tmpfs"));
    json_object_object_add(opts, "o", json_object_new_string(o));
    json_object_object_add(dc, "Name", json_object_new_string("local"));
    json_object_object_add(dc, "Options", opts);
    json_object_object_add(vo, "DriverConfig", dc);
    json_object_object_add(m, "Type", json_object_new_string("volume"));
    json_object_object_add(m, "Target", json_object_new_string("/sandbox"));
    json_object_object_add(m, "VolumeOptions", vo);
    return m;
}
