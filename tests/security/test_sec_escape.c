/*
 * test_sec_escape.c — what a tenant's code cannot do from inside its
 * sandbox: write kernel settings, mount, open raw sockets, trace or signal
 * the agent, read the agent's descriptors or environment, or exhaust inodes
 * or argv space. (test_sec_escape_channel.c: what it cannot pass off to the
 * service as anything but data.)
 *
 * Every test is one attack (a row of the table `attacks`) performed
 * through the public API by an ordinary tenant (a real gateway on a private
 * redis-server, a real proxy on the Docker engine: sgsec.h), with the exact
 * outcome asserted (the errno name the user code sees), then the attacked
 * session and a fresh session of the same tenant are used again. The group
 * teardown checks that no container of this proxy is left.
 */
#include "sgsec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sgsec_stack_t st;

static json_object *py(const char *tok, const char *sid, const char *code)
{
    return sgsec_py(&st, tok, sid, code);
}

static json_object *sh(const char *tok, const char *sid, const char *cmd)
{
    return sgsec_sh(&st, tok, sid, cmd);
}

/* A secret the proxy is given that no sandbox may see. */
#define PROXY_CANARY "proxy-canary-7d1f0c2e9b"

/* The inode cap of /sandbox and /tmp with the proxy's default 256 MiB
 * tmpfs (one inode per 4 KiB, proxy/docker/container.c), and of /dev/shm. */
#define WORK_INODES 65536
#define SHM_INODES 16384

/* ------------------------------------------------------------------------
 * What an attack checks beyond its stdout
 * ------------------------------------------------------------------------ */

static char *host_read(const char *path)
{
    FILE *f = fopen(path, "r");
    char buf[512] = "";
    if (f != NULL) {
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = '\0';
        fclose(f);
    }
    return strdup(buf);
}

/* An attack: Python run by an ordinary tenant of its own in a new session
 * (the code sets x = 41 first: the session must keep it) with its stdout
 * exactly `want`, and what more the attack needs checked. */
typedef struct attack attack_t;
typedef struct {
    /* may be NULL: run once the session exists, before the code; what it
     * returns is handed to `after` */
    void *(*before)(const char *sid);
    /* the checks after the code, on its result and beyond */
    void (*after)(const attack_t *a, const char *tok, const char *sid, json_object *res, void *ctx);
} attack_checks_t;
struct attack {
    const char *name; /* the cmocka test */
    const char *tenant;
    const char *code;
    const char *want; /* the exact stdout; NULL: `checks` judge the result */
    /* the exact stdout under runsc, where gVisor's kernel answers the same
     * refusal with another errno, or where it differs as the row says (NULL:
     * want, on both runtimes) */
    const char *want_runsc;
    /* another exact stdout either runtime may give, where the host decides
     * (NULL: none) */
    const char *want_alt;
    /* under runsc the attack is contained by the memory cap of the sandbox
     * as a whole: the run ends with the sandbox (502 sandbox_failed), and
     * the tenant's next session works */
    bool runsc_ends_sandbox;
    const attack_checks_t *checks; /* more than the stdout (may be NULL) */
};

/* The host's own kernel settings, before and after the attack. */
typedef struct {
    char *core_pattern, *hostname;
} host_settings_t;

static void *host_settings(const char *sid)
{
    (void)sid;
    host_settings_t *h = malloc(sizeof(*h));
    h->core_pattern = host_read("/proc/sys/kernel/core_pattern");
    h->hostname = host_read("/proc/sys/kernel/hostname");
    return h;
}

static void host_settings_compare(const attack_t *a, const char *tok, const char *sid, json_object *res, void *ctx)
{
    host_settings_t *before = ctx, *after = host_settings(sid);
    (void)a, (void)tok, (void)res;
    SG_CHECK(strcmp(before->core_pattern, after->core_pattern) == 0, NULL, "the host's core_pattern changed: %s",
             after->core_pattern);
    SG_CHECK(strcmp(before->hostname, after->hostname) == 0, NULL, "the host's hostname changed: %s", after->hostname);
    for (host_settings_t *h = before; h != NULL; h = h == before ? after : NULL) {
        free(h->core_pattern);
        free(h->hostname);
        free(h);
    }
}

static const attack_checks_t host_settings_unchanged = {host_settings, host_settings_compare};

/* The session's container (asserting). */
static void *session_container(const char *sid)
{
    char *cid = sgtest_docker_session_container(st.proxy_id, sid);
    SG_CHECK(cid != NULL, NULL, "session %s has no container", sid);
    return cid;
}

/* After the signals to PID 1: the container, the agent and the interpreter
 * live on; then kill -9 -1 from a command. */
static void after_signals(const attack_t *a, const char *tok, const char *sid, json_object *res, void *ctx)
{
    char *cid = ctx;
    (void)a, (void)res;
    json_object *c = sgtest_docker_inspect(cid, NULL);
    SG_CHECK(c != NULL, NULL, "the session's container is gone after the signals");
    SG_CHECK(json_object_get_boolean(sgtest_jpath(c, "State.Running")), c, "the container must still run");
    json_object_put(c);
    json_object *r = py(tok, sid, "print(x + 1)");
    SGSEC_EXPECT_STDOUT(r, "42\n");
    SG_CHECK(strcmp(SG_STR(r, "state"), "kept") == 0, r, "the interpreter must have survived the signals");
    json_object_put(r);

    /* SIGKILL to every process the user may signal (kill -1) from a
     * command: the session's interpreter goes, the agent and the session stay */
    r = sh(tok, sid, "kill -9 -1; echo survived");
    SGSEC_EXPECT_STDOUT(r, "survived\n"); /* kill(-1) spares the caller (and PID 1) */
    json_object_put(r);
    c = sgtest_docker_inspect(cid, NULL);
    SG_CHECK(c != NULL && json_object_get_boolean(sgtest_jpath(c, "State.Running")), c,
             "the container must still run after kill -9 -1");
    json_object_put(c);
    free(cid);
    r = py(tok, sid, "x = 41\nprint(x + 1)");
    /* the SIGKILL reaches the interpreter after kill() returned (gVisor
     * often, runc on a loaded machine): the next execute may find it dying
     * (state lost, signal 9) and only the one after a new interpreter */
    if (strcmp(SG_STR(r, "state"), "lost") == 0) {
        SG_CHECK(SG_INT(r, "signal") == 9, r, "the interpreter was lost to the SIGKILL of kill -9 -1");
        json_object_put(r);
        r = py(tok, sid, "x = 41\nprint(x + 1)");
    }
    SGSEC_EXPECT_STDOUT(r, "42\n");
    SG_CHECK(strcmp(SG_STR(r, "state"), "new") == 0, r, "the killed interpreter is replaced by a new one");
    json_object_put(r);
}

static const attack_checks_t signals_survived = {session_container, after_signals};

/* The same probe from a shell command (a child of the agent, not of the
 * kernel): the same stdout. */
static void run_as_command(const attack_t *a, const char *tok, const char *sid, json_object *res, void *ctx)
{
    char cmd[4096];
    (void)res, (void)ctx;
    if (strchr(a->code, '"') != NULL)
        SG_FAIL(NULL, "the probe must not hold a double quote");
    pathf(cmd, sizeof(cmd), "python3 -c \"%s\"", a->code);
    json_object *r = sh(tok, sid, cmd);
    SGSEC_EXPECT_STDOUT(r, a->want_runsc != NULL && sgtest_docker_session_on_runsc(st.proxy_id, sid) ? a->want_runsc
                                                                                                     : a->want);
    json_object_put(r);
}

static const attack_checks_t same_from_a_command = {NULL, run_as_command};

/* Nothing of the service's secrets in what the probe printed, in the
 * container's environment or its mounts. */
static void look_for_secrets(const attack_t *a, const char *tok, const char *sid, json_object *r, void *ctx)
{
    (void)a, (void)ctx;
    SG_CHECK(strcmp(SG_STR(r, "reason"), "exited") == 0 && SG_INT(r, "exit_code") == 0, r, "the probe ran");
    const char *out = SG_STR(r, "stdout");
    const char *secrets[] = {sggw_gateway_admin_token(st.gw),
                             sggw_redis_url(st.redis),
                             tok,
                             PROXY_CANARY,
                             st.proxy_id,
                             "redis://",
                             "DOCKER_",
                             "SANDGATE_ADMIN",
                             "SANDGATE_REDIS",
                             "SANDGATE_PROXY",
                             "SANDGATE_DATA_DIR",
                             "SANDGATE_STORE",
                             "TOKEN",
                             "PASSWORD",
                             "SECRET",
                             NULL};
    for (int i = 0; secrets[i] != NULL; i++)
        SG_CHECK(strstr(out, secrets[i]) == NULL, r, "the sandbox can read \"%s\"", secrets[i]);
    /* the agent's own environment is closed to it (runc), or zeroed by the
     * agent (runsc shows every environ: NUL bytes print as blanks here) */
    const char *env1 = strstr(out, "/proc/1/environ ");
    SG_CHECK(env1 != NULL, r, "/proc/1/environ must be tried");
    env1 += strlen("/proc/1/environ ");
    size_t blank = strspn(env1, " ");
    SG_CHECK(strncmp(env1, "Permission denied\n", 18) == 0 || env1[blank] == '\n', r,
             "/proc/1/environ must be unreadable or empty");
    SG_CHECK(strstr(out, "/var/run/docker.sock False\n") != NULL && strstr(out, "/run/docker.sock False\n") != NULL, r,
             "no Docker socket in the sandbox");
    SG_CHECK(strstr(out, "/run/secrets False\n") != NULL, r, "no secrets directory in the sandbox");
    /* only the variables the sandbox is meant to have from sandgate */
    for (const char *l = out; (l = strstr(l, "env SANDGATE_")) != NULL; l++)
        SG_CHECK(strncmp(l, "env SANDGATE_WORKDIR=", 21) == 0 || strncmp(l, "env SANDGATE_FILE=", 18) == 0, r,
                 "an unexpected SANDGATE_ variable in the sandbox");

    /* what the agent's environ (closed to user code) holds, seen from outside:
     * the container's environment, and nothing of Docker's mounted in */
    char *cid = session_container(sid);
    json_object *c = sgtest_docker_inspect(cid, NULL);
    SG_CHECK(c != NULL, NULL, "cannot inspect %s", cid);
    const char *env = json_object_to_json_string(sgtest_jpath(c, "Config.Env"));
    const char *mounts = json_object_to_json_string(sgtest_jpath(c, "Mounts"));
    for (int i = 0; secrets[i] != NULL; i++)
        SG_CHECK(strstr(env, secrets[i]) == NULL, c, "the container's environment holds \"%s\"", secrets[i]);
    SG_CHECK(strstr(mounts, "docker.sock") == NULL, c, "the Docker socket is mounted in the sandbox");
    json_object_put(c);
    free(cid);
}

static const attack_checks_t no_secret_seen = {NULL, look_for_secrets};

/* The flood stopped by ENOSPC at each tmpfs's inode cap; then the same
 * flood as a shell command (a child of the agent). */
static void check_inode_flood(const attack_t *a, const char *tok, const char *sid, json_object *r, void *ctx)
{
    (void)a, (void)ctx;
    const char *out = SG_STR(r, "stdout");
    SG_CHECK(strcmp(SG_STR(r, "reason"), "exited") == 0 && SG_INT(r, "exit_code") == 0, r,
             "the flood must end by ENOSPC, not by the memory limit");
    const char *dirs[] = {"/sandbox/flood", "/tmp/flood", "/dev/shm/flood", "/sandbox/links"};
    const long caps[] = {WORK_INODES, WORK_INODES, SHM_INODES, WORK_INODES};
    const char *l = out;
    for (int i = 0; i < 4; i++) {
        char d[64], res[32];
        long n = -1;
        SG_CHECK(sscanf(l, "%63s %31s %ld", d, res, &n) == 3 && strcmp(d, dirs[i]) == 0, r, "line %d", i + 1);
        SG_CHECK(strcmp(res, "ENOSPC") == 0 && n > caps[i] / 2 && n <= caps[i], r,
                 "%s: the flood must stop with ENOSPC at the cap of %ld inodes", d, caps[i]);
        l = strchr(l, '\n');
        SG_CHECK(l != NULL, r, "four lines");
        l++;
    }

    /* the same flood as a shell command (a child of the agent) */
    json_object *f = sh(tok, sid,
                        "mkdir /sandbox/f2 && cd /sandbox/f2 && i=0; while [ $i -lt 100000 ]; do "
                        "true > $i 2>/dev/null || break; i=$((i+1)); done; echo $i; cd / && rm -rf /sandbox/f2");
    long n = atol(SG_STR(f, "stdout"));
    SG_CHECK(n > WORK_INODES / 2 && n <= WORK_INODES, f, "the shell's flood stops at the cap");
    json_object_put(f);
}

static const attack_checks_t inode_flood_capped = {NULL, check_inode_flood};

/* A command past what one exec argument may hold: refused cleanly. */
static void run_oversized_command(const attack_t *a, const char *tok, const char *sid, json_object *res, void *ctx)
{
    (void)a, (void)res, (void)ctx;
    size_t big = 300 << 10;
    char *cmd = malloc(big + 16);
    strcpy(cmd, "echo ");
    memset(cmd + 5, 'A', big);
    cmd[5 + big] = '\0';
    json_object *r = sh(tok, sid, cmd);
    free(cmd);
    SG_CHECK(SG_INT(r, "exit_code") == 127 && !SG_BOOL(r, "success"), r, "the oversized command must fail to start");
    /* gVisor says ENAMETOOLONG for the same refusal */
    SG_CHECK(strstr(SG_STR(r, "stderr"), "Argument list too long") != NULL ||
                 (sgtest_docker_session_on_runsc(st.proxy_id, sid) &&
                  strstr(SG_STR(r, "stderr"), "File name too long") != NULL),
             r, "and say why (E2BIG)");
    json_object_put(r);
}

static const attack_checks_t oversized_command_refused = {NULL, run_oversized_command};

/* ------------------------------------------------------------------------
 * The attacks
 * ------------------------------------------------------------------------ */

/* What test_cannot_use_privileged_syscalls prints alike under both runtimes:
 * the refusals in the middle of its list, and the process's ids and
 * capability sets (1000 through and through, every set empty). */
#define PRIV_REFUSED                                                                                                   \
    "init_module EPERM\n"                                                                                              \
    "finit_module EPERM\n"                                                                                             \
    "delete_module EPERM\n"                                                                                            \
    "kexec_load EPERM\n"                                                                                               \
    "reboot EPERM\n"                                                                                                   \
    "swapon EPERM\n"                                                                                                   \
    "settimeofday EPERM\n"                                                                                             \
    "clock_settime EPERM\n"                                                                                            \
    "sethostname EPERM\n"                                                                                              \
    "bpf EPERM\n"
#define PRIV_STATUS                                                                                                    \
    "Uid 1000 1000 1000 1000\n"                                                                                        \
    "Gid 1000 1000 1000 1000\n"                                                                                        \
    "Groups \n"                                                                                                        \
    "CapInh 0000000000000000\n"                                                                                        \
    "CapPrm 0000000000000000\n"                                                                                        \
    "CapEff 0000000000000000\n"                                                                                        \
    "CapBnd 0000000000000000\n"

static const attack_t attacks[] = {
    /* ---- Kernel settings, mounts, raw sockets ---- */
    {
        .name = "test_cannot_write_proc_sys",
        .tenant = "procsys",
        .checks = &host_settings_unchanged,
        .code = "import errno\n"
                "x = 41\n"
                "def attempt(path, data):\n"
                "    try:\n"
                "        with open(path, 'w') as f:\n"
                "            f.write(data)\n"
                "        return 'WRITTEN'\n"
                "    except OSError as e:\n"
                "        return errno.errorcode[e.errno]\n"
                "before = open('/proc/sys/kernel/hostname').read()\n"
                "for p, d in [('/proc/sys/kernel/hostname', 'pwned\\n'),\n"
                "             ('/proc/sys/kernel/core_pattern', '|/tmp/x %p\\n'),\n"
                "             ('/proc/sys/vm/drop_caches', '3\\n'),\n"
                "             ('/proc/sys/net/ipv4/ip_forward', '1\\n'),\n"
                "             ('/proc/sysrq-trigger', 'b'),\n"
                "             ('/sys/kernel/uevent_helper', '/tmp/x'),\n"
                "             ('/sys/fs/cgroup/pids/pids.max', 'max')]:\n"
                "    print(p, attempt(p, d))\n"
                "print('hostname unchanged', open('/proc/sys/kernel/hostname').read() == before)\n",
        .want = "/proc/sys/kernel/hostname EROFS\n"
                "/proc/sys/kernel/core_pattern EROFS\n"
                "/proc/sys/vm/drop_caches EROFS\n"
                "/proc/sys/net/ipv4/ip_forward EROFS\n"
                "/proc/sysrq-trigger ENOENT\n"
                "/sys/kernel/uevent_helper EROFS\n"
                "/sys/fs/cgroup/pids/pids.max EROFS\n"
                "hostname unchanged True\n",
        /* gVisor's /proc/sys is its own and read-only to user code (EACCES
         * for EROFS); no cgroup files are mounted */
        .want_runsc = "/proc/sys/kernel/hostname EACCES\n"
                      "/proc/sys/kernel/core_pattern EACCES\n"
                      "/proc/sys/vm/drop_caches EACCES\n"
                      "/proc/sys/net/ipv4/ip_forward EACCES\n"
                      "/proc/sysrq-trigger EACCES\n"
                      "/sys/kernel/uevent_helper EACCES\n"
                      "/sys/fs/cgroup/pids/pids.max ENOENT\n"
                      "hostname unchanged True\n",
    },
    {
        .name = "test_cannot_mount",
        .tenant = "mount",
        .code = "import ctypes, errno, os\n"
                "x = 41\n"
                "libc = ctypes.CDLL(None, use_errno=True)\n"
                "def rc(v):\n"
                "    return 'ok' if v == 0 else errno.errorcode[ctypes.get_errno()]\n"
                "os.makedirs('/tmp/m', exist_ok=True)\n"
                "print('mount tmpfs', rc(libc.mount(b'none', b'/tmp/m', b'tmpfs', 0, None)))\n"
                "print('mount proc', rc(libc.mount(b'proc', b'/tmp/m', b'proc', 0, None)))\n"
                "print('bind root', rc(libc.mount(b'/', b'/tmp/m', None, 4096, None)))\n"
                "print('remount root rw', rc(libc.mount(None, b'/', None, 32, None)))\n"
                "print('umount proc/sys', rc(libc.umount2(b'/proc/sys', 2)))\n"
                "print('unshare user', rc(libc.unshare(0x10000000)))\n"
                "print('unshare mount', rc(libc.unshare(0x00020000)))\n"
                "print('chroot', rc(libc.chroot(b'/tmp')))\n"
                "print('mounted', os.path.ismount('/tmp/m'))\n",
        .want = "mount tmpfs EPERM\n"
                "mount proc EPERM\n"
                "bind root EPERM\n"
                "remount root rw EPERM\n"
                "umount proc/sys EPERM\n"
                "unshare user EPERM\n"
                "unshare mount EPERM\n"
                "chroot EPERM\n"
                "mounted False\n",
    },
    {
        .name = "test_cannot_open_raw_socket",
        .tenant = "rawsock",
        .code = "import socket, errno\n"
                "x = 41\n"
                "def s(fam, typ, proto):\n"
                "    try:\n"
                "        socket.socket(fam, typ, proto).close()\n"
                "        return 'OPENED'\n"
                "    except OSError as e:\n"
                "        return errno.errorcode[e.errno]\n"
                "print('raw icmp', s(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))\n"
                "print('raw tcp', s(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP))\n"
                "print('raw ip', s(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW))\n"
                "print('raw icmpv6', s(socket.AF_INET6, socket.SOCK_RAW, 58))\n"
                "print('packet', s(socket.AF_PACKET, socket.SOCK_RAW, 0x0300))\n"
                "print('packet dgram', s(socket.AF_PACKET, socket.SOCK_DGRAM, 0x0300))\n",
        .want = "raw icmp EPERM\n"
                "raw tcp EPERM\n"
                "raw ip EPERM\n"
                "raw icmpv6 EPERM\n"
                "packet EPERM\n"
                "packet dgram EPERM\n",
    },
    /* The privileges of a sandbox process, and the system calls that need more
     * (open_by_handle_at is the call of the "shocker" escape, mknod of a block
     * device a way to the host's disks). */
    {
        .name = "test_cannot_use_privileged_syscalls",
        .tenant = "syscalls",
        .code = "import ctypes, errno, os, platform, stat\n"
                "x = 41\n"
                "assert platform.machine() == 'x86_64', 'syscall numbers below are x86_64'\n"
                "libc = ctypes.CDLL(None, use_errno=True)\n"
                "libc.syscall.restype = ctypes.c_long\n"
                "def sc(*a):\n"
                "    v = libc.syscall(*[ctypes.c_long(i) for i in a])\n"
                "    return 'ok' if v >= 0 else errno.errorcode[ctypes.get_errno()]\n"
                "buf = ctypes.create_string_buffer(256)\n"
                "p = ctypes.addressof(buf)\n"
                "print('open_by_handle_at', sc(304, -100, p, 0))\n"
                "print('init_module', sc(175, p, 16, p))\n"
                "print('finit_module', sc(313, 0, p, 0))\n"
                "print('delete_module', sc(176, p, 0))\n"
                "print('kexec_load', sc(246, 0, 0, 0, 0))\n"
                "print('reboot', sc(169, 0xfee1dead, 672274793, 0x4321fedc, 0))\n"
                "print('swapon', sc(167, p, 0))\n"
                "print('settimeofday', sc(164, p, 0))\n"
                "print('clock_settime', sc(227, 0, p))\n"
                "print('sethostname', sc(170, p, 4))\n"
                "print('bpf', sc(321, 5, p, 72))\n"
                "print('perf_event_open', sc(298, p, 0, -1, -1, 0))\n"
                "print('keyctl', sc(250, 0, 0, 0, 0, 0))\n"
                "print('iopl', sc(172, 3))\n"
                "print('setuid 0', sc(105, 0))\n"
                "try:\n"
                "    os.mknod('/tmp/disk', stat.S_IFBLK | 0o600, os.makedev(8, 0))\n"
                "    print('mknod block MADE')\n"
                "except OSError as e:\n"
                "    print('mknod block', errno.errorcode[e.errno])\n"
                "try:\n"
                "    os.close(os.open('/tmp/disk', os.O_RDONLY))\n"
                "    print('open block OPENED')\n"
                "except OSError as e:\n"
                "    print('open block', errno.errorcode[e.errno])\n"
                "lines = open('/proc/self/status').read().splitlines()\n"
                "st = dict(l.split(':\\t', 1) for l in lines if ':\\t' in l)\n"
                "for k in ('Uid', 'Gid', 'Groups', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs',\n"
                "          'Seccomp'):\n"
                "    print(k, ' '.join(st[k].split()) if k in st else 'absent')\n",
        .want = "open_by_handle_at EPERM\n" PRIV_REFUSED "perf_event_open EPERM\n"
                "keyctl EPERM\n"
                "iopl EPERM\n"
                "setuid 0 EPERM\n"
                "mknod block EPERM\n"
                "open block ENOENT\n" PRIV_STATUS "CapAmb 0000000000000000\n"
                "NoNewPrivs 1\n"
                "Seccomp 2\n",
        /* gVisor: no file handles (ENOTSUP), no perf events (ENODEV), keyrings
         * closed (EACCES); mknod of a block device succeeds in its own tmpfs
         * but opens nothing (ENXIO: gVisor's kernel has no host disk behind
         * any device number); its status has no CapAmb nor
         * NoNewPrivs lines */
        .want_runsc = "open_by_handle_at ENOTSUP\n" PRIV_REFUSED "perf_event_open ENODEV\n"
                      "keyctl EACCES\n"
                      "iopl EPERM\n"
                      "setuid 0 EPERM\n"
                      "mknod block MADE\n"
                      "open block ENXIO\n" PRIV_STATUS "CapAmb absent\n"
                      "NoNewPrivs absent\n"
                      "Seccomp 2\n",
    },
    /* ---- The agent (PID 1): tracing, signals, its descriptors, its environment ---- */
    {
        .name = "test_cannot_ptrace_the_agent",
        .tenant = "ptrace",
        .code = "import ctypes, errno\n"
                "x = 41\n"
                "libc = ctypes.CDLL(None, use_errno=True)\n"
                "libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]\n"
                "def rc(v):\n"
                "    return 'ok' if v >= 0 else errno.errorcode[ctypes.get_errno()]\n"
                "print('attach', rc(libc.ptrace(16, 1, None, None)))\n"
                "print('seize', rc(libc.ptrace(0x4206, 1, None, None)))\n"
                "def op(path, mode):\n"
                "    try:\n"
                "        open(path, mode).close()\n"
                "        return 'OPENED'\n"
                "    except OSError as e:\n"
                "        return errno.errorcode[e.errno]\n"
                "print('mem read', op('/proc/1/mem', 'rb'))\n"
                "print('mem write', op('/proc/1/mem', 'r+b'))\n"
                "class iovec(ctypes.Structure):\n"
                "    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]\n"
                "buf = ctypes.create_string_buffer(8)\n"
                "loc = iovec(ctypes.cast(buf, ctypes.c_void_p), 8)\n"
                "rem = iovec(0x400000, 8)\n"
                "f = libc.process_vm_readv\n"
                "f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p,\n"
                "              ctypes.c_ulong, ctypes.c_ulong]\n"
                "f.restype = ctypes.c_ssize_t\n"
                "print('vm_readv', rc(f(1, ctypes.byref(loc), 1, ctypes.byref(rem), 1, 0)))\n",
        .want = "attach EPERM\n"
                "seize EPERM\n"
                "mem read EACCES\n"
                "mem write EACCES\n"
                "vm_readv EPERM\n",
        /* gVisor has no process_vm_readv */
        .want_runsc = "attach EPERM\n"
                      "seize EPERM\n"
                      "mem read EACCES\n"
                      "mem write EACCES\n"
                      "vm_readv ENOSYS\n",
    },
    /* kill(1, ...) for every termination signal, and the same signals queued
     * with a forged sender (rt_sigqueueinfo with si_pid 0, as a sender outside
     * the namespace would be, and si_pid 1): refused, since the agent's real
     * and saved uid are 0 and user code runs as 1000 through and through
     * (agent/creds.h); the agent lives on, and so does the session's
     * interpreter. (An agent started as the sandbox user takes the signals
     * and ignores them: proc.h.) */
    {
        .name = "test_signals_to_pid1_do_not_kill_the_session",
        .tenant = "signals",
        .checks = &signals_survived,
        .code = "import ctypes, errno, os, signal, time\n"
                "x = 41\n"
                "libc = ctypes.CDLL(None, use_errno=True)\n"
                "sent = []\n"
                "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,\n"
                "          signal.SIGSEGV, signal.SIGPIPE, signal.SIGSTOP, signal.SIGKILL):\n"
                "    try:\n"
                "        os.kill(1, s)\n"
                "        sent.append('ok')\n"
                "    except OSError as e:\n"
                "        sent.append(errno.errorcode[e.errno])\n"
                "    time.sleep(0.05)\n"
                "print('kill', ' '.join(sent))\n"
                "try:\n"
                "    os.kill(1, signal.SIGCONT)  # gVisor allows it within a session, as POSIX does\n"
                "except OSError:\n"
                "    pass\n"
                "class siginfo(ctypes.Structure):\n"
                "    _fields_ = [('signo', ctypes.c_int), ('err', ctypes.c_int), ('code', ctypes.c_int),\n"
                "                ('pad', ctypes.c_int), ('pid', ctypes.c_int), ('uid', ctypes.c_uint),\n"
                "                ('rest', ctypes.c_char * 104)]\n"
                "queued = []\n"
                "for sender in (0, 1):\n"
                "    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
                "        si = siginfo(s, 0, -1, 0, sender, 0)\n"
                "        rc = libc.syscall(129, 1, s, ctypes.byref(si))\n"
                "        queued.append('ok' if rc == 0 else errno.errorcode[ctypes.get_errno()])\n"
                "        time.sleep(0.05)\n"
                "time.sleep(0.5)\n"
                "print('queued', ' '.join(queued))\n",
        .want = "kill EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM\n"
                "queued EPERM EPERM EPERM EPERM EPERM EPERM\n",
    },
    /* Resource limits of the agent: prlimit() on another process needs only
     * the same uid and gid, and the agent runs as the sandbox user, so user
     * code could lower PID 1's limits (RLIMIT_NOFILE: no pipe for the next
     * run; RLIMIT_CPU: SIGKILL by the kernel, which PID 1 cannot ignore). The
     * agent's system call filter refuses it, on the 64-bit and the 32-bit
     * system call tables; a process's own limits stay its own to set. */
    {
        .name = "test_cannot_lower_the_agents_limits",
        .tenant = "prlimit",
        .code = "import errno, resource\n"
                "x = 41\n"
                "def lower(what, to):\n"
                "    try:\n"
                "        resource.prlimit(1, what, to)\n"
                "        return 'LOWERED'\n"
                "    except OSError as e:\n"
                "        return errno.errorcode[e.errno]\n"
                "print('nofile', lower(resource.RLIMIT_NOFILE, (8, 8)))\n"
                "print('nproc', lower(resource.RLIMIT_NPROC, (1, 1)))\n"
                "print('as', lower(resource.RLIMIT_AS, (1 << 20, 1 << 20)))\n"
                "# the same through the 32-bit system call table (int 0x80, prlimit64 = 340)\n"
                "import ctypes, platform, struct\n"
                "assert platform.machine() == 'x86_64', 'the code below is x86_64'\n"
                "libc = ctypes.CDLL(None, use_errno=True)\n"
                "libc.mmap.restype = ctypes.c_void_p\n"
                "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,\n"
                "                      ctypes.c_int, ctypes.c_long]\n"
                "page = libc.mmap(None, 4096, 7, 0x2 | 0x20 | 0x40, -1, 0)  # rwx, below 4 GiB\n"
                "lim = page + 2048\n"
                "ctypes.memmove(lim, struct.pack('<QQ', 8, 8), 16)\n"
                "u32 = lambda v: struct.pack('<I', v)\n"
                "code = (b'\\x53' + b'\\xb8' + u32(340) + b'\\xbb' + u32(1) + b'\\xb9' + u32(7) +\n"
                "        b'\\xba' + u32(lim) + b'\\xbe' + u32(0) + b'\\xcd\\x80' + b'\\x5b' + b'\\xc3')\n"
                "ctypes.memmove(page, code, len(code))\n"
                "# in a child: gVisor answers ENOSYS or, on some platforms, a fatal signal\n"
                "import os, signal\n"
                "pid = os.fork()\n"
                "if pid == 0:\n"
                "    rc = ctypes.CFUNCTYPE(ctypes.c_int)(page)()\n"
                "    os._exit(0 if rc == 0 else min(-rc, 250))\n"
                "_, st = os.waitpid(pid, 0)\n"
                "if os.WIFSIGNALED(st):\n"
                "    how = signal.Signals(os.WTERMSIG(st)).name\n"
                "else:\n"
                "    how = 'LOWERED' if os.WEXITSTATUS(st) == 0 else errno.errorcode.get(os.WEXITSTATUS(st), '?')\n"
                "print('compat nofile', how)\n"
                "# its own limits stay the user's to set\n"
                "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
                "resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))\n"
                "resource.prlimit(0, resource.RLIMIT_NOFILE, (soft, hard))\n"
                "print('own', resource.getrlimit(resource.RLIMIT_NOFILE) == (soft, hard))\n",
        .want = "nofile EPERM\nnproc EPERM\nas EPERM\ncompat nofile EPERM\nown True\n",
        /* gVisor does not run 32-bit system calls at all (ENOSYS); a host
         * kernel without them (IA-32 emulation off) kills the caller with
         * SIGSEGV, under either runtime: not lowered either way */
        .want_runsc = "nofile EPERM\nnproc EPERM\nas EPERM\ncompat nofile ENOSYS\nown True\n",
        .want_alt = "nofile EPERM\nnproc EPERM\nas EPERM\ncompat nofile SIGSEGV\nown True\n",
    },
    {
        .name = "test_cannot_read_agent_fds",
        .tenant = "agentfds",
        .checks = &same_from_a_command,
        .code = "import errno, os\n"
                "x = 41\n"
                "def t(f):\n"
                "    try:\n"
                "        f()\n"
                "        return 'ALLOWED'\n"
                "    except OSError as e:\n"
                "        return errno.errorcode[e.errno]\n"
                "print('list fd', t(lambda: os.listdir('/proc/1/fd')))\n"
                "for n in (0, 1, 2):\n"
                "    print(n, 'read', t(lambda: open('/proc/1/fd/%d' % n, 'rb', buffering=0).close()))\n"
                "    print(n, 'write', t(lambda: open('/proc/1/fd/%d' % n, 'wb', buffering=0).close()))\n"
                "    print(n, 'link', t(lambda: os.readlink('/proc/1/fd/%d' % n)))\n"
                "print('fdinfo', t(lambda: os.listdir('/proc/1/fdinfo')))\n"
                "print('map_files', t(lambda: os.listdir('/proc/1/map_files')))\n"
                "def environ():\n"
                "    if open('/proc/1/environ', 'rb').read().strip(b'\\0'):\n"
                "        raise OSError(errno.EEXIST, 'the agent environment is readable')\n"
                "print('environ', t(environ))\n"
                "print('cwd', t(lambda: os.listdir('/proc/1/cwd/')))\n"
                "print('root', t(lambda: os.listdir('/proc/1/root/')))\n"
                "print('oom_score_adj', t(lambda: open('/proc/1/oom_score_adj', 'w').write('1000')))\n",
        .want = "list fd EACCES\n"
                "0 read EACCES\n0 write EACCES\n0 link EACCES\n"
                "1 read EACCES\n1 write EACCES\n1 link EACCES\n"
                "2 read EACCES\n2 write EACCES\n2 link EACCES\n"
                "fdinfo EACCES\n"
                "map_files EACCES\n"
                "environ EACCES\n"
                "cwd EACCES\n"
                "root EACCES\n"
                "oom_score_adj EACCES\n",
        /* gVisor lets the owner of /proc/1's files (root) be anyone for
         * listing the fd and fdinfo directories and reading the links
         * (pipe:[N]); opening a descriptor is refused as under runc. Its
         * environ is readable, but the agent zeroed it (agent/creds.h):
         * ALLOWED means nothing but NUL bytes */
        .want_runsc = "list fd ALLOWED\n"
                      "0 read EACCES\n0 write EACCES\n0 link ALLOWED\n"
                      "1 read EACCES\n1 write EACCES\n1 link ALLOWED\n"
                      "2 read EACCES\n2 write EACCES\n2 link ALLOWED\n"
                      "fdinfo ALLOWED\n"
                      "map_files ENOENT\n"
                      "environ ALLOWED\n"
                      "cwd EACCES\n"
                      "root EACCES\n"
                      "oom_score_adj EACCES\n",
    },
    /* everything a process can read about environments: its own, every
     * visible process's, and the command lines */
    {
        .name = "test_environment_holds_no_secrets",
        .tenant = "secrets",
        .checks = &no_secret_seen,
        .code = "import os, glob\n"
                "x = 41\n"
                "out = []\n"
                "for k, v in os.environ.items():\n"
                "    out.append('env %s=%s' % (k, v))\n"
                "for f in glob.glob('/proc/[0-9]*/environ') + glob.glob('/proc/[0-9]*/cmdline'):\n"
                "    try:\n"
                "        out.append('%s %s' % (f, open(f, 'rb').read().replace(b'\\0', b' ').decode()))\n"
                "    except OSError as e:\n"
                "        out.append('%s %s' % (f, e.strerror))\n"
                "for p in ('/var/run/docker.sock', '/run/docker.sock', '/run/secrets', '/.dockerenv'):\n"
                "    out.append('%s %s' % (p, os.path.exists(p)))\n"
                "print('\\n'.join(out))\n",
    },
    /* ---- Floods ---- */
    /* past every cap the product sets, below what the memory limit allows */
    {
        .name = "test_inode_flood_is_contained",
        .tenant = "inodes",
        .checks = &inode_flood_capped,
        /* gVisor's tmpfs (this 2022-12 build) keeps no inode count: each
         * file costs memory of the sandbox's kernel, until the memory cap */
        .runsc_ends_sandbox = true,
        .code = "import errno, os, shutil\n"
                "x = 41\n"
                "for d in ('/sandbox/flood', '/tmp/flood', '/dev/shm/flood', '/sandbox/links'):\n"
                "    os.makedirs(d, exist_ok=True)\n"
                "    n, res = 0, 'NO LIMIT'\n"
                "    try:\n"
                "        while n < 300000:\n"
                "            if d.endswith('links'):  # names without inodes of their own\n"
                "                if n == 0:\n"
                "                    open(d + '/f', 'w').close()\n"
                "                os.link(d + '/f', '%s/%d' % (d, n))\n"
                "            else:\n"
                "                os.close(os.open('%s/%d' % (d, n), os.O_CREAT | os.O_WRONLY, 0o644))\n"
                "            n += 1\n"
                "    except OSError as e:\n"
                "        res = errno.errorcode[e.errno]\n"
                "    print(d, res, n)\n"
                "    shutil.rmtree(d)\n",
    },
    {
        .name = "test_argv_flood_is_contained",
        .tenant = "argv",
        .checks = &oversized_command_refused,
        .code = "import errno, os, subprocess\n"
                "x = 41\n"
                "def run(argv, env=None):\n"
                "    try:\n"
                "        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL)\n"
                "        return 'RAN'\n"
                "    except OSError as e:\n"
                "        return errno.errorcode[e.errno]\n"
                "print('one huge arg', run(['/bin/true', 'A' * (256 << 10)]))\n"
                "print('many args', run(['/bin/true'] + ['x'] * (4 << 20)))\n"
                "print('huge env', run(['/bin/true'], {'V%d' % i: 'v' * 4096 for i in range(4096)}))\n",
        .want = "one huge arg E2BIG\nmany args E2BIG\nhuge env E2BIG\n",
        /* gVisor refuses the same with other names */
        .want_runsc = "one huge arg ENAMETOOLONG\nmany args ENOMEM\nhuge env ENAMETOOLONG\n",
    },
};

SGGW_TEST(test_attack)
{
    const attack_t *a = *state;
    char *sid, *tok = sgsec_begin(&st, a->tenant, NULL, &sid);
    if (a->runsc_ends_sandbox && sgtest_docker_session_on_runsc(st.proxy_id, sid)) {
        char path[192];
        json_object *body = json_object_new_object();
        json_object_object_add(body, "code", json_object_new_string(a->code));
        json_object_object_add(body, "timeout", json_object_new_int(120));
        pathf(path, sizeof(path), "/sessions/%s/execute", sid);
        SGGW_CALL_ERROR(st.gw, tok, "POST", path, json_object_to_json_string(body), 502, "sandbox_failed");
        json_object_put(body);
        free(sid);
        sgsec_end(&st, tok, NULL, 0);
        return;
    }
    void *ctx = a->checks != NULL && a->checks->before != NULL ? a->checks->before(sid) : NULL;
    json_object *r = py(tok, sid, a->code);
    int on_runsc = sgtest_docker_session_on_runsc(st.proxy_id, sid);
    const char *want = a->want_runsc != NULL && on_runsc ? a->want_runsc : a->want;
    if (a->want_alt != NULL && strcmp(SG_STR(r, "stdout"), a->want_alt) == 0)
        want = a->want_alt;
    if (want != NULL)
        SGSEC_EXPECT_STDOUT(r, want);
    if (a->checks != NULL)
        a->checks->after(a, tok, sid, r, ctx);
    json_object_put(r);
    sgsec_end(&st, tok, sid, 1);
}

/* ------------------------------------------------------------------------
 * Fixtures
 * ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
    (void)state; /* no group state: each test's state is its row */
    /* secrets of the proxy's own that no sandbox may see */
    const char *env[] = {"DOCKER_HOST=unix:///var/run/docker.sock", "SANDGATE_TEST_CANARY=" PROXY_CANARY,
                         "SANDGATE_PIP_INDEX_URL=https://index-user:" PROXY_CANARY "@index.invalid/simple",
                         "SANDGATE_NPM_REGISTRY=https://npm-user:" PROXY_CANARY "@npm.invalid/", NULL};
    return sgsec_stack_start(&st, env);
}

int main(void)
{
    struct CMUnitTest tests[sizeof(attacks) / sizeof(attacks[0])];
    for (size_t i = 0; i < sizeof(attacks) / sizeof(attacks[0]); i++)
        tests[i] = SGSEC_ROW_TEST(test_attack, &attacks[i]);
    return cmocka_run_group_tests_name("sec_escape", tests, group_setup, sgsec_group_teardown);
}
