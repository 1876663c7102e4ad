/*
 * test_sec_escape.c — what a tenant's code cannot do from inside its
 * sandbox: write kernel settings, mount, open raw sockets, trace or signal
 * the agent, read the agent's descriptors or environment, pass protocol
 * messages off as its own output, exhaust inodes or argv space, or steer the
 * files API outside the work directory with a symlink race.
 *
 * Every test is one attack performed through the public API by an ordinary
 * tenant (a real gateway on a private redis-server, a real proxy on the
 * Docker engine), with the exact outcome asserted (the errno name the user
 * code sees, the bytes that come back), then the attacked session (where it
 * should survive) and a fresh session of the same tenant are used again.
 * The group teardown checks that no container of this proxy is left.
 */
#include "sggw.h"

#include "../../proxy/agent_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sgtest_proxy_t *proxy;
static char *proxy_id;
static sggw_redis_t *redis;
static sggw_gateway_t *gw;

/* A secret the proxy is given that no sandbox may see. */
#define PROXY_CANARY "proxy-canary-7d1f0c2e9b"

/* The inode cap of /sandbox and /tmp with the proxy's default 256 MiB
 * tmpfs (one inode per 4 KiB, proxy/container.c), and of /dev/shm. */
#define WORK_INODES 65536
#define SHM_INODES 16384

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

static char *tenant(const char *name)
{
    return sggw_new_tenant(sggw_gateway_data_dir(gw), name, NULL);
}

static json_object *py(const char *tok, const char *sid, const char *code)
{
    return sggw_execute(gw, tok, sid, code, 120);
}

static json_object *sh(const char *tok, const char *sid, const char *cmd)
{
    char path[128];
    json_object *b = json_object_new_object();
    json_object_object_add(b, "command", json_object_new_string(cmd));
    json_object_object_add(b, "timeout", json_object_new_int(60));
    pathf(path, sizeof(path), "/sessions/%s/commands", sid);
    return sggw_post_result(gw, tok, path, b);
}

/* Asserts the result's stdout is exactly `want` and the run ended by itself. */
static void expect_stdout(json_object *res, const char *want)
{
    SG_CHECK(strcmp(SG_STR(res, "stdout"), want) == 0, res, "stdout must be exactly:\n%s", want);
    SG_CHECK(strcmp(SG_STR(res, "reason"), "exited") == 0, res, "the run must end by itself");
}

/* The service still works for this tenant: the attacked session (if any)
 * still runs code, with its interpreter state if `kept_var` is set (x == 41
 * was set before the attack), and a fresh session does too; both are then
 * closed. */
static void expect_service_works(const char *tok, const char *sid, int kept_var)
{
    json_object *r;
    if (sid != NULL) {
        r = py(tok, sid, kept_var ? "print(x + 1)" : "print(6 * 7)");
        expect_stdout(r, "42\n");
        if (kept_var)
            SG_CHECK(strcmp(SG_STR(r, "state"), "kept") == 0, r, "the attacked session must keep its state");
        json_object_put(r);
        sggw_delete_session(gw, tok, sid);
    }
    char *fresh = sggw_create_session(gw, tok, NULL, NULL);
    r = py(tok, fresh, "print(6 * 7)");
    expect_stdout(r, "42\n");
    json_object_put(r);
    sggw_delete_session(gw, tok, fresh);
    free(fresh);
}

/* ------------------------------------------------------------------------
 * Kernel settings, mounts, raw sockets
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

SGGW_TEST(test_cannot_write_proc_sys)
{
    char *tok = tenant("procsys");
    char *sid = sggw_create_session(gw, tok, NULL, NULL);
    char *core_before = host_read("/proc/sys/kernel/core_pattern");
    char *host_before = host_read("/proc/sys/kernel/hostname");

    json_object *r = py(tok, sid,
                        "import errno\n"
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
                        "print('hostname unchanged', open('/proc/sys/kernel/hostname').read() == before)\n");
    expect_stdout(r, "/proc/sys/kernel/hostname EROFS\n"
                     "/proc/sys/kernel/core_pattern EROFS\n"
                     "/proc/sys/vm/drop_caches EROFS\n"
                     "/proc/sys/net/ipv4/ip_forward EROFS\n"
                     "/proc/sysrq-trigger ENOENT\n"
                     "/sys/kernel/uevent_helper EROFS\n"
                     "/sys/fs/cgroup/pids/pids.max EROFS\n"
                     "hostname unchanged True\n");
    json_object_put(r);

    /* and seen from the host */
    char *core_after = host_read("/proc/sys/kernel/core_pattern");
    char *host_after = host_read("/proc/sys/kernel/hostname");
    SG_CHECK(strcmp(core_before, core_after) == 0, NULL, "the host's core_pattern changed: %s", core_after);
    SG_CHECK(strcmp(host_before, host_after) == 0, NULL, "the host's hostname changed: %s", host_after);
    free(core_before);
    free(core_after);
    free(host_before);
    free(host_after);

    expect_service_works(tok, sid, 1);
    free(sid);
    free(tok);
}

SGGW_TEST(test_cannot_mount)
{
    char *tok = tenant("mount");
    char *sid = sggw_create_session(gw, tok, NULL, NULL);
    json_object *r = py(tok, sid,
                        "import ctypes, errno, os\n"
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
                        "print('mounted', os.path.ismount('/tmp/m'))\n");
    expect_stdout(r, "mount tmpfs EPERM\n"
                     "mount proc EPERM\n"
                     "bind root EPERM\n"
                     "remount root rw EPERM\n"
                     "umount proc/sys EPERM\n"
                     "unshare user EPERM\n"
                     "unshare mount EPERM\n"
                     "chroot EPERM\n"
                     "mounted False\n");
    json_object_put(r);
    expect_service_works(tok, sid, 1);
    free(sid);
    free(tok);
}

SGGW_TEST(test_cannot_open_raw_socket)
{
    char *tok = tenant("rawsock");
    char *sid = sggw_create_session(gw, tok, NULL, NULL);
    json_object *r = py(tok, sid,
                        "import socket, errno\n"
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
                        "print('packet dgram', s(socket.AF_PACKET, socket.SOCK_DGRAM, 0x0300))\n");
    expect_stdout(r, "raw icmp EPERM\n"
                     "raw tcp EPERM\n"
                     "raw ip EPERM\n"
                     "raw icmpv6 EPERM\n"
                     "packet EPERM\n"
                     "packet dgram EPERM\n");
    json_object_put(r);
    expect_service_works(tok, sid, 1);
    free(sid);
    free(tok);
}

/* ------------------------------------------------------------------------
 * The agent (PID 1): tracing, signals, its descriptors, its environment
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_cannot_ptrace_the_agent)
{
    char *tok = tenant("ptrace");
    char *sid = sggw_create_session(gw, tok, NULL, NULL);
    json_object *r = py(tok, sid,
                        "import ctypes, errno\n"
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
                        "print('vm_readv', rc(f(1, ctypes.byref(loc), 1, ctypes.byref(rem), 1, 0)))\n");
    expect_stdout(r, "attach EPERM\n"
                     "seize EPERM\n"
                     "mem read EACCES\n"
                     "mem write EACCES\n"
                     "vm_readv EPERM\n");
    json_object_put(r);
    expect_service_works(tok, sid, 1);
    free(sid);
    free(tok);
}

/* kill(1, ...) for every termination signal, and the same signals queued
 * with a forged sender (rt_sigqueueinfo with si_pid 0, as a sender outside
 * the namespace would be, and si_pid 1): the agent lives on, and so does
 * the session's interpreter. */
SGGW_TEST(test_signals_to_pid1_do_not_kill_the_session)
{
    char *tok = tenant("signals");
    char *sid = sggw_create_session(gw, tok, NULL, NULL);
    char *cid = sgtest_docker_session_container(proxy_id, sid);
    SG_CHECK(cid != NULL, NULL, "session %s has no container", sid);

    json_object *r = py(tok, sid,
                        "import ctypes, errno, os, signal, time\n"
                        "x = 41\n"
                        "libc = ctypes.CDLL(None, use_errno=True)\n"
                        "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,\n"
                        "          signal.SIGSEGV, signal.SIGPIPE, signal.SIGSTOP, signal.SIGKILL):\n"
                        "    os.kill(1, s)\n"
                        "    time.sleep(0.05)\n"
                        "os.kill(1, signal.SIGCONT)\n"
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
                        "print('queued', ' '.join(queued))\n");
    expect_stdout(r, "queued ok ok ok ok ok ok\n");
    json_object_put(r);

    json_object *c = sgtest_docker_inspect(cid, NULL);
    SG_CHECK(c != NULL, NULL, "the session's container is gone after the signals");
    SG_CHECK(json_object_get_boolean(sgtest_jpath(c, "State.Running")), c, "the container must still run");
    json_object_put(c);
    r = py(tok, sid, "print(x + 1)");
    expect_stdout(r, "42\n");
    SG_CHECK(strcmp(SG_STR(r, "state"), "kept") == 0, r, "the interpreter must have survived the signals");
    json_object_put(r);

    /* SIGKILL to every process the user may signal (kill -1) from a
     * command: the session's interpreter goes, the agent and the session stay */
    r = sh(tok, sid, "kill -9 -1; echo survived");
    expect_stdout(r, "survived\n"); /* kill(-1) spares the caller (and PID 1) */
    json_object_put(r);
    c = sgtest_docker_inspect(cid, NULL);
    SG_CHECK(c != NULL && json_object_get_boolean(sgtest_jpath(c, "State.Running")), c,
             "the container must still run after kill -9 -1");
    json_object_put(c);
    free(cid);
    r = py(tok, sid, "x = 41\nprint(x + 1)");
    expect_stdout(r, "42\n");
    SG_CHECK(strcmp(SG_STR(r, "state"), "new") == 0, r, "the killed interpreter is replaced by a new one");
    json_object_put(r);
    expect_service_works(tok, sid, 1);
    free(sid);
    free(tok);
}

SGGW_TEST(test_cannot_read_agent_fds)
{
    char *tok = tenant("agentfds");
    char *sid = sggw_create_session(gw, tok, NULL, NULL);
    const char *code = "import errno, os\n"
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
                       "print('environ', t(lambda: open('/proc/1/environ', 'rb').read()))\n"
                       "print('cwd', t(lambda: os.listdir('/proc/1/cwd/')))\n"
                       "print('root', t(lambda: os.listdir('/proc/1/root/')))\n";
    const char *want = "list fd EACCES\n"
                       "0 read EACCES\n0 write EACCES\n0 link EACCES\n"
                       "1 read EACCES\n1 write EACCES\n1 link EACCES\n"
                       "2 read EACCES\n2 write EACCES\n2 link EACCES\n"
                       "fdinfo EACCES\n"
                       "map_files EACCES\n"
                       "environ EACCES\n"
                       "cwd EACCES\n"
                       "root EACCES\n";
    json_object *r = py(tok, sid, code);
    expect_stdout(r, want);
    json_object_put(r);

    /* the same from a shell command (a child of the agent, not of the kernel) */
    char cmd[4096];
    char *esc = strdup(code), *p;
    for (p = esc; *p; p++)
        if (*p == '"')
            SG_FAIL(NULL, "the probe must not hold a double quote");
    pathf(cmd, sizeof(cmd), "python3 -c \"%s\"", esc);
    free(esc);
    r = sh(tok, sid, cmd);
    expect_stdout(r, want);
    json_object_put(r);
    expect_service_works(tok, sid, 1);
    free(sid);
    free(tok);
}

SGGW_TEST(test_environment_holds_no_secrets)
{
    char *tok = tenant("secrets");
    char *sid = sggw_create_session(gw, tok, NULL, NULL);
    /* everything a process can read about environments: its own, every
     * visible process's, and the command lines */
    const char *code = "import os, glob\n"
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
                       "print('\\n'.join(out))\n";
    json_object *r = py(tok, sid, code);
    SG_CHECK(strcmp(SG_STR(r, "reason"), "exited") == 0 && SG_INT(r, "exit_code") == 0, r, "the probe ran");
    const char *out = SG_STR(r, "stdout");
    const char *secrets[] = {sggw_gateway_admin_token(gw),
                             sggw_redis_url(redis),
                             tok,
                             PROXY_CANARY,
                             proxy_id,
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
    /* the agent's own environment is closed to it */
    SG_CHECK(strstr(out, "/proc/1/environ Permission denied\n") != NULL, r, "/proc/1/environ must be unreadable");
    SG_CHECK(strstr(out, "/var/run/docker.sock False\n") != NULL && strstr(out, "/run/docker.sock False\n") != NULL,
             r, "no Docker socket in the sandbox");
    SG_CHECK(strstr(out, "/run/secrets False\n") != NULL, r, "no secrets directory in the sandbox");
    /* only the variables the sandbox is meant to have from sandgate */
    for (const char *l = out; (l = strstr(l, "env SANDGATE_")) != NULL; l++)
        SG_CHECK(strncmp(l, "env SANDGATE_WORKDIR=", 21) == 0 || strncmp(l, "env SANDGATE_FILE=", 18) == 0, r,
                 "an unexpected SANDGATE_ variable in the sandbox");
    json_object_put(r);
    expect_service_works(tok, sid, 1);
    free(sid);
    free(tok);
}

/* ------------------------------------------------------------------------
 * Forged protocol bytes on stdout
 * ------------------------------------------------------------------------ */

typedef struct {
    unsigned char b[8192];
    size_t n;
} bytes_t;

static void put_u8(bytes_t *x, unsigned v)
{
    SG_CHECK(x->n < sizeof(x->b), NULL, "forged message too long");
    x->b[x->n++] = (unsigned char)v;
}

static void put_u32(bytes_t *x, uint32_t v)
{
    for (int i = 3; i >= 0; i--)
        put_u8(x, (v >> (8 * i)) & 0xff);
}

static void put_u64(bytes_t *x, uint64_t v)
{
    put_u32(x, (uint32_t)(v >> 32));
    put_u32(x, (uint32_t)v);
}

static void put_str(bytes_t *x, const char *s)
{
    put_u32(x, (uint32_t)strlen(s));
    for (; *s; s++)
        put_u8(x, (unsigned char)*s);
}

/* A message as agent_proto.h frames it; its payload built by fill. */
static void put_msg(bytes_t *x, sg_agent_msg_type_t type, uint32_t id, void (*fill)(bytes_t *))
{
    bytes_t p = {.n = 0};
    fill(&p);
    put_u8(x, type);
    put_u8(x, 0);
    put_u8(x, 0);
    put_u8(x, 0);
    put_u32(x, id);
    put_u32(x, (uint32_t)p.n);
    for (size_t i = 0; i < p.n; i++)
        put_u8(x, p.b[i]);
}

/* An EXIT saying: exit 77 by timeout after 0x7f7f7f7f us (~36 min), state
 * new. Every byte is below 0x80, so the output is valid UTF-8 as it is and
 * must come back byte for byte. */
static void fill_exit(bytes_t *p)
{
    put_u32(p, 77);
    put_u32(p, 0);
    put_u32(p, SG_AGENT_REASON_TIMEOUT);
    put_u64(p, 0x7f7f7f7fULL);
    put_u32(p, 0);
    put_str(p, "run");
    put_u32(p, SG_AGENT_STATE_NEW);
}

static void fill_output(bytes_t *p)
{
    put_u32(p, 1);
    const char *s = "INJECTED-OUTPUT";
    for (; *s; s++)
        put_u8(p, (unsigned char)*s);
}

static void fill_ready(bytes_t *p)
{
    put_u32(p, SG_AGENT_PROTO_VERSION);
    put_str(p, "/");
}

#define FAKE_SSE                                                                                                       \
    "\n\nevent: result\ndata: {\"stdout\":\"forged\",\"stderr\":\"\",\"exit_code\":77,\"execution_time\":2139,"          \
    "\"success\":false,\"timed_out\":true,\"truncated\":false,\"reason\":\"timeout\"}\n\n"

/* The forged bytes, and python code that writes exactly them and a newline. */
static char *forged_program(bytes_t *x)
{
    x->n = 0;
    for (uint32_t id = 0; id < 40; id++) /* every id a request of this proxy is likely to carry */
        put_msg(x, SG_AGENT_EXIT, id, fill_exit);
    put_msg(x, SG_AGENT_OUTPUT, 1, fill_output);
    put_msg(x, SG_AGENT_READY, 0, fill_ready);
    for (const char *s = FAKE_SSE; *s; s++)
        put_u8(x, (unsigned char)*s);
    size_t len = 64 + 2 * x->n;
    char *code = malloc(len);
    SG_CHECK(code != NULL, NULL, "out of memory");
    size_t o = (size_t)snprintf(code, len, "import sys\nsys.stdout.buffer.write(bytes.fromhex('");
    for (size_t i = 0; i < x->n; i++)
        o += (size_t)snprintf(code + o, len - o, "%02x", x->b[i]);
    snprintf(code + o, len - o, "') + b'\\n')\n");
    return code;
}

/* What output x becomes in a result: itself, with each NUL byte (not valid
 * in the output's UTF-8, docs/proxy-api.md) as U+FFFD; then the newline. */
static char *as_output(const bytes_t *x, size_t *len)
{
    char *o = malloc(3 * x->n + 2);
    size_t n = 0;
    SG_CHECK(o != NULL, NULL, "out of memory");
    for (size_t i = 0; i < x->n; i++) {
        if (x->b[i] == 0) {
            memcpy(o + n, "\xef\xbf\xbd", 3);
            n += 3;
        } else {
            o[n++] = (char)x->b[i];
        }
    }
    o[n++] = '\n';
    o[n] = '\0';
    *len = n;
    return o;
}

static void expect_real_result(json_object *res, const bytes_t *x, const char *how)
{
    SG_STR(res, "stdout");
    json_object *v = NULL;
    json_object_object_get_ex(res, "stdout", &v);
    size_t got = (size_t)json_object_get_string_len(v), want_len;
    char *want = as_output(x, &want_len);
    SG_CHECK(got == want_len && memcmp(json_object_get_string(v), want, want_len) == 0, res,
             "%s: stdout must be the %zu forged bytes and a newline, as data (got %zu bytes, want %zu)", how, x->n,
             got, want_len);
    free(want);
    SG_CHECK(SG_INT(res, "exit_code") == 0 && SG_BOOL(res, "success") && !SG_BOOL(res, "timed_out"), res,
             "%s: the real result is a success", how);
    SG_CHECK(strcmp(SG_STR(res, "reason"), "exited") == 0, res, "%s: the real reason", how);
    SG_CHECK(SG_DBL(res, "execution_time") < 60, res, "%s: the real duration, not the forged one", how);
}

/* Parses an SSE body: the concatenated data of the "stdout" events, and the
 * "result" event's object (NULL if none, or if there were two). */
static json_object *parse_sse(const char *body, char **out, size_t *outlen)
{
    json_object *result = NULL;
    int nresults = 0;
    size_t cap = strlen(body) + 1, n = 0;
    char *acc = malloc(cap);
    SG_CHECK(acc != NULL, NULL, "out of memory");
    const char *p = body;
    while (*p) {
        const char *end = strstr(p, "\n\n");
        size_t blen = end ? (size_t)(end - p) : strlen(p);
        char *block = strndup(p, blen);
        char *ev = NULL, *data = NULL;
        for (char *line = strtok(block, "\n"); line != NULL; line = strtok(NULL, "\n")) {
            if (strncmp(line, "event: ", 7) == 0)
                ev = line + 7;
            else if (strncmp(line, "data: ", 6) == 0)
                data = line + 6;
        }
        if (ev != NULL && data != NULL) {
            json_object *o = json_tokener_parse(data);
            SG_CHECK(o != NULL, NULL, "an SSE data line that is no JSON: %s", data);
            if (strcmp(ev, "stdout") == 0) {
                SG_STR(o, "data");
                json_object *v = NULL;
                json_object_object_get_ex(o, "data", &v);
                size_t l = (size_t)json_object_get_string_len(v);
                SG_CHECK(n + l < cap, NULL, "more stdout than body");
                memcpy(acc + n, json_object_get_string(v), l);
                n += l;
                json_object_put(o);
            } else if (strcmp(ev, "result") == 0) {
                nresults++;
                json_object_put(result);
                result = o;
            } else {
                json_object_put(o);
            }
        }
        free(block);
        p = end ? end + 2 : p + blen;
    }
    acc[n] = '\0';
    *out = acc;
    *outlen = n;
    SG_CHECK(nresults == 1, NULL, "%d result events in the stream (exactly one expected)", nresults);
    return result;
}

SGGW_TEST(test_forged_protocol_bytes_on_stdout_are_data)
{
    char *tok = tenant("forger");
    char *sid = sggw_create_session(gw, tok, NULL, NULL);
    json_object *r = py(tok, sid, "x = 41");
    json_object_put(r);
    bytes_t x;
    char *code = forged_program(&x);

    /* buffered, through the kernel and through a shell command */
    r = py(tok, sid, code);
    expect_real_result(r, &x, "execute");
    json_object_put(r);
    char *cmd = malloc(strlen(code) + 32);
    sprintf(cmd, "python3 -c \"%s\"", code);
    r = sh(tok, sid, cmd);
    expect_real_result(r, &x, "command");
    json_object_put(r);
    free(cmd);

    /* one-shot, no session */
    json_object *ob = json_object_new_object();
    json_object_object_add(ob, "code", json_object_new_string(code));
    json_object_object_add(ob, "lang", json_object_new_string("python"));
    r = sggw_post_result(gw, tok, "/execute", ob);
    expect_real_result(r, &x, "one-shot");
    json_object_put(r);

    /* streamed */
    char url[512], auth[160];
    pathf(url, sizeof(url), "%s/sessions/%s/execute", sggw_gateway_url(gw), sid);
    pathf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
    const char *h[] = {auth, "Accept: text/event-stream", NULL};
    json_object *b = json_object_new_object();
    json_object_object_add(b, "code", json_object_new_string(code));
    json_object_object_add(b, "stream", json_object_new_boolean(1));
    const char *body = json_object_to_json_string(b);
    sgtest_reply_t rep;
    sggw_http("POST", url, body, strlen(body), "application/json", h, 60, &rep);
    SG_ASSERT_STATUS(&rep, 200);
    char *streamed;
    size_t slen;
    json_object *res = parse_sse(rep.body, &streamed, &slen);
    size_t want_len;
    char *want = as_output(&x, &want_len);
    SG_CHECK(slen == want_len && memcmp(streamed, want, want_len) == 0, NULL,
             "streamed: the stdout events must carry the %zu forged bytes and a newline (got %zu bytes, want %zu)",
             x.n, slen, want_len);
    free(want);
    SG_CHECK(SG_INT(res, "exit_code") == 0 && SG_BOOL(res, "success") && !SG_BOOL(res, "timed_out") &&
                 strcmp(SG_STR(res, "reason"), "exited") == 0 && SG_DBL(res, "execution_time") < 60,
             res, "streamed: the result event is the real one");
    json_object_put(res);
    free(streamed);
    sgtest_reply_free(&rep);
    json_object_put(b);
    free(code);

    /* billed as what really happened: five executions, none of them 77 or ~36 minutes */
    char tid[32];
    pathf(tid, sizeof(tid), "%lld", (long long)sggw_tenant_id(sggw_gateway_data_dir(gw), "forger"));
    const char *params[] = {tid, NULL};
    char err[256], *row = NULL;
    double deadline = sgtest_now() + 10;
    for (;;) {
        free(row);
        row = sggw_db_row(sggw_gateway_data_dir(gw),
                          "SELECT count(*), coalesce(max(exit_code), -1), coalesce(max(duration), -1), "
                          "coalesce(max(timed_out), -1) FROM usage WHERE tenant_id = ?1",
                          params, err);
        SG_CHECK(row != NULL, NULL, "usage: %s", err);
        if (atoi(row) >= 5 || sgtest_now() > deadline)
            break;
        usleep(50000);
    }
    int count = 0, maxexit = 0, maxto = 0;
    double maxdur = 0;
    SG_CHECK(sscanf(row, "%d|%d|%lf|%d", &count, &maxexit, &maxdur, &maxto) == 4, NULL, "usage row %s", row);
    SG_CHECK(count == 5 && maxexit == 0 && maxdur < 60 && maxto == 0, NULL,
             "usage rows (count|max exit|max duration|max timed_out) %s: the forged result was billed", row);
    free(row);

    expect_service_works(tok, sid, 1);
    free(sid);
    free(tok);
}

/* ------------------------------------------------------------------------
 * Floods
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_inode_flood_is_contained)
{
    char *tok = tenant("inodes");
    char *sid = sggw_create_session(gw, tok, NULL, NULL);
    /* past every cap the product sets, below what the memory limit allows */
    json_object *r = py(tok, sid,
                        "import errno, os, shutil\n"
                        "x = 41\n"
                        "for d in ('/sandbox/flood', '/tmp/flood', '/dev/shm/flood'):\n"
                        "    os.makedirs(d, exist_ok=True)\n"
                        "    n, res = 0, 'NO LIMIT'\n"
                        "    try:\n"
                        "        while n < 300000:\n"
                        "            os.close(os.open('%s/%d' % (d, n), os.O_CREAT | os.O_WRONLY, 0o644))\n"
                        "            n += 1\n"
                        "    except OSError as e:\n"
                        "        res = errno.errorcode[e.errno]\n"
                        "    print(d, res, n)\n"
                        "    shutil.rmtree(d)\n");
    const char *out = SG_STR(r, "stdout");
    SG_CHECK(strcmp(SG_STR(r, "reason"), "exited") == 0 && SG_INT(r, "exit_code") == 0, r,
             "the flood must end by ENOSPC, not by the memory limit");
    const char *dirs[] = {"/sandbox/flood", "/tmp/flood", "/dev/shm/flood"};
    const long caps[] = {WORK_INODES, WORK_INODES, SHM_INODES};
    const char *l = out;
    for (int i = 0; i < 3; i++) {
        char d[64], res[32];
        long n = -1;
        SG_CHECK(sscanf(l, "%63s %31s %ld", d, res, &n) == 3 && strcmp(d, dirs[i]) == 0, r, "line %d", i + 1);
        SG_CHECK(strcmp(res, "ENOSPC") == 0 && n > caps[i] / 2 && n <= caps[i], r,
                 "%s: the flood must stop with ENOSPC at the cap of %ld inodes", d, caps[i]);
        l = strchr(l, '\n');
        SG_CHECK(l != NULL, r, "three lines");
        l++;
    }
    json_object_put(r);

    /* the same flood as a shell command (a child of the agent) */
    r = sh(tok, sid, "mkdir /sandbox/f2 && cd /sandbox/f2 && i=0; while [ $i -lt 100000 ]; do "
                     "true > $i 2>/dev/null || break; i=$((i+1)); done; echo $i; cd / && rm -rf /sandbox/f2");
    long n = atol(SG_STR(r, "stdout"));
    SG_CHECK(n > WORK_INODES / 2 && n <= WORK_INODES, r, "the shell's flood stops at the cap");
    json_object_put(r);
    expect_service_works(tok, sid, 1);
    free(sid);
    free(tok);
}

SGGW_TEST(test_argv_flood_is_contained)
{
    char *tok = tenant("argv");
    char *sid = sggw_create_session(gw, tok, NULL, NULL);
    json_object *r = py(tok, sid,
                        "import errno, os, subprocess\n"
                        "x = 41\n"
                        "def run(argv, env=None):\n"
                        "    try:\n"
                        "        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL)\n"
                        "        return 'RAN'\n"
                        "    except OSError as e:\n"
                        "        return errno.errorcode[e.errno]\n"
                        "print('one huge arg', run(['/bin/true', 'A' * (256 << 10)]))\n"
                        "print('many args', run(['/bin/true'] + ['x'] * (4 << 20)))\n"
                        "print('huge env', run(['/bin/true'], {'V%d' % i: 'v' * 4096 for i in range(4096)}))\n");
    expect_stdout(r, "one huge arg E2BIG\nmany args E2BIG\nhuge env E2BIG\n");
    json_object_put(r);

    /* a command past what one exec argument may hold: refused cleanly */
    size_t big = 300 << 10;
    char *cmd = malloc(big + 16);
    strcpy(cmd, "echo ");
    memset(cmd + 5, 'A', big);
    cmd[5 + big] = '\0';
    r = sh(tok, sid, cmd);
    free(cmd);
    SG_CHECK(SG_INT(r, "exit_code") == 127 && !SG_BOOL(r, "success"), r, "the oversized command must fail to start");
    SG_CHECK(strstr(SG_STR(r, "stderr"), "Argument list too long") != NULL, r, "and say why (E2BIG)");
    json_object_put(r);
    expect_service_works(tok, sid, 1);
    free(sid);
    free(tok);
}

/* ------------------------------------------------------------------------
 * The files API against a symlink race
 * ------------------------------------------------------------------------ */

/* A thread in the session's interpreter swaps two names as fast as it can
 * while the files API reads and writes through them:
 *   race  a directory holding "1"  <->  a symlink to /proc/1/fd (the agent's
 *         channel: a write there would forge protocol messages)
 *   leaf  a regular file           <->  a symlink to /proc/1/environ
 * Every answer must be the regular content (or a path error); nothing the
 * API writes may reach the agent's channel, and nothing it reads may come
 * from outside the work directory. */
SGGW_TEST(test_files_api_symlink_race)
{
    const char *q[] = {"rate_per_min=60000", "burst=1000", NULL};
    char *tok = sggw_new_tenant(sggw_gateway_data_dir(gw), "symrace", q);
    char *sid = sggw_create_session(gw, tok, NULL, NULL);
    json_object *r = py(tok, sid,
                        "import os, threading\n"
                        "x = 41\n"
                        "stop = threading.Event()\n"
                        "swaps = [0]\n"
                        "import shutil\n"
                        "def step():\n"
                        "    if os.path.islink('/sandbox/race'):\n"
                        "        os.unlink('/sandbox/race')\n"
                        "    os.makedirs('/sandbox/race', exist_ok=True)\n"
                        "    with open('/sandbox/one.tmp', 'w') as f:\n"
                        "        f.write('inside')\n"
                        "    os.replace('/sandbox/one.tmp', '/sandbox/race/1')\n"
                        "    with open('/sandbox/leaf.tmp', 'w') as f:\n"
                        "        f.write('inside')\n"
                        "    os.replace('/sandbox/leaf.tmp', '/sandbox/leaf')\n"
                        "    shutil.rmtree('/sandbox/race')\n"
                        "    os.symlink('/proc/1/fd', '/sandbox/race')\n"
                        "    os.symlink('/proc/1/environ', '/sandbox/leaf.tmp')\n"
                        "    os.replace('/sandbox/leaf.tmp', '/sandbox/leaf')\n"
                        "def racer():\n"
                        "    while not stop.is_set():\n"
                        "        try:\n"
                        "            step()\n"
                        "            swaps[0] += 1\n"
                        "        except OSError:\n"
                        "            pass\n"
                        "threading.Thread(target=racer, daemon=True).start()\n");
    json_object_put(r);

    char get_race[512], get_leaf[512], put_race[512];
    pathf(get_race, sizeof(get_race), "/sessions/%s/files?path=race/1", sid);
    pathf(put_race, sizeof(put_race), "/sessions/%s/files?path=race/2", sid);
    pathf(get_leaf, sizeof(get_leaf), "/sessions/%s/files?path=leaf", sid);
    int inside = 0, refused = 0;
    for (int i = 0; i < 150; i++) {
        sgtest_reply_t rep;
        const char *path = i % 3 == 0 ? get_leaf : get_race;
        if (i % 3 == 2) {
            /* a write that, through the symlink, would be a READY and EXIT on the agent's stdout */
            char url[512], auth[160];
            pathf(url, sizeof(url), "%s%s", sggw_gateway_url(gw), put_race);
            pathf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
            const char *h[] = {auth, NULL};
            static const unsigned char forged[] = {SG_AGENT_EXIT, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0};
            sggw_http("PUT", url, forged, sizeof(forged), "application/octet-stream", h, 30, &rep);
        } else {
            sggw_call(gw, tok, "GET", path, NULL, &rep);
        }
        if (rep.status == 200) {
            if (i % 3 != 2)
                SG_CHECK(rep.body_len == 6 && memcmp(rep.body, "inside", 6) == 0, NULL,
                         "a read through the race returned something else than the work dir's file: %.*s",
                         (int)(rep.body_len > 200 ? 200 : rep.body_len), rep.body);
            inside++;
        } else {
            json_object_put(SG_EXPECT_ERROR(&rep, rep.status, NULL));
            SG_CHECK(rep.status == 400 || rep.status == 403 || rep.status == 404, NULL,
                     "a refused path is a client error, got %ld: %s", rep.status, rep.body);
            refused++;
        }
        sgtest_reply_free(&rep);
    }
    r = py(tok, sid, "stop.set()\nimport time; time.sleep(0.2)\nprint(swaps[0] > 10)");
    expect_stdout(r, "True\n");
    json_object_put(r);
    SG_CHECK(refused > 0, NULL, "the race never had a symlink in place (%d inside): the test proved nothing", inside);
    expect_service_works(tok, sid, 1);
    free(sid);
    free(tok);
}

/* ------------------------------------------------------------------------
 * Fixtures
 * ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
    proxy_id = sgtest_new_proxy_id();
    const char *env[] = {"SANDGATE_POOL_SIZE=2", "DOCKER_HOST=unix:///var/run/docker.sock",
                         "SANDGATE_TEST_CANARY=" PROXY_CANARY, NULL};
    if (proxy_id == NULL || (proxy = sgtest_proxy_start(proxy_id, env)) == NULL)
        return -1;
    if ((redis = sggw_redis_start()) == NULL)
        return -1;
    sggw_opts_t o = {.proxy_url = sgtest_proxy_url(proxy), .redis_url = sggw_redis_url(redis)};
    gw = sggw_gateway_start(&o);
    return gw != NULL ? 0 : -1;
}

static int after_test(void **state)
{
    sggw_after_test();
    if (!sgtest_proxy_alive(proxy) || !sggw_gateway_alive(gw) || !sggw_redis_running(redis)) {
        fprintf(stderr, "a server died during this test\n");
        sggw_print_logs(80);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    int rc = sggw_stack_stop(&gw, &redis, &proxy, proxy_id);
    free(proxy_id);
    return rc;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_cannot_write_proc_sys, after_test),
        cmocka_unit_test_teardown(test_cannot_mount, after_test),
        cmocka_unit_test_teardown(test_cannot_open_raw_socket, after_test),
        cmocka_unit_test_teardown(test_cannot_ptrace_the_agent, after_test),
        cmocka_unit_test_teardown(test_signals_to_pid1_do_not_kill_the_session, after_test),
        cmocka_unit_test_teardown(test_cannot_read_agent_fds, after_test),
        cmocka_unit_test_teardown(test_environment_holds_no_secrets, after_test),
        cmocka_unit_test_teardown(test_forged_protocol_bytes_on_stdout_are_data, after_test),
        cmocka_unit_test_teardown(test_inode_flood_is_contained, after_test),
        cmocka_unit_test_teardown(test_argv_flood_is_contained, after_test),
        cmocka_unit_test_teardown(test_files_api_symlink_race, after_test),
    };
    return cmocka_run_group_tests_name("sec_escape", tests, group_setup, group_teardown);
}
