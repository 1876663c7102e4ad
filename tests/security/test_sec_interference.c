/*
 * test_sec_interference.c — what one tenant's sandbox cannot do to another
 * tenant's or to the service: see its processes, reach its container over
 * the network (with the network off, and with it on for tenants allowed to
 * use it), reach the proxy, the gateway, Redis or the Docker engine, or slow
 * its executions down with a fork bomb or a memory bomb.
 *
 * Every attack is performed through the public API by an ordinary tenant (a
 * real gateway on a private redis-server, a real proxy that allows the
 * network, on the Docker engine); every containment is asserted as the exact
 * outcome the attacker's code sees, and the victim's side is checked too
 * (what its listener saw, how long its executions took). Then the attacked
 * sessions and fresh ones still work, and the group teardown checks that no
 * container of this proxy is left.
 */
#include "sgsec.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sgsec_stack_t st;

#define VICTIM_PORT 8765
#define PIDS_LIMIT 128 /* the proxy's default SANDGATE_PIDS_LIMIT */

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

static char *tenant(const char *name)
{
    const char *q[] = {"network_allowed=1", "rate_per_min=60000", "burst=1000", NULL};
    return sgsec_tenant(&st, name, q);
}

static json_object *py(const char *tok, const char *sid, const char *code)
{
    return sgsec_py(&st, tok, sid, code);
}

/* The IPv4 address and gateway of a session's container on its network
 * ("" when it has none). */
static void container_ip(const char *sid, char ip[64], char gwip[64])
{
    ip[0] = gwip[0] = '\0';
    char *cid = sgtest_docker_session_container(st.proxy_id, sid);
    SG_CHECK(cid != NULL, NULL, "session %s has no container", sid);
    json_object *c = sgtest_docker_inspect(cid, NULL);
    SG_CHECK(c != NULL, NULL, "cannot inspect %s", cid);
    json_object *nets = sgtest_jpath(c, "NetworkSettings.Networks");
    if (nets != NULL) {
        json_object_object_foreach(nets, name, n)
        {
            json_object *v;
            (void)name;
            if (json_object_object_get_ex(n, "IPAddress", &v) && json_object_get_string_len(v) > 0)
                snprintf(ip, 64, "%s", json_object_get_string(v));
            if (json_object_object_get_ex(n, "Gateway", &v) && json_object_get_string_len(v) > 0)
                snprintf(gwip, 64, "%s", json_object_get_string(v));
        }
    }
    json_object_put(c);
    free(cid);
}

/* The victim: a listener on VICTIM_PORT in a thread of its interpreter
 * (threads outlive executions), which counts the connections it accepts. */
static const char *LISTENER = "import socket, threading\n"
                              "srv = socket.socket()\n"
                              "srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                              "srv.bind(('0.0.0.0', 8765))\n"
                              "srv.listen(128)\n"
                              "hits = [0]\n"
                              "def serve():\n"
                              "    while True:\n"
                              "        c, a = srv.accept()\n"
                              "        hits[0] += 1\n"
                              "        c.sendall(b'victim-data')\n"
                              "        c.close()\n"
                              "threading.Thread(target=serve, daemon=True).start()\n"
                              "print('listening')\n";

/* Python: scan(ip, ports, wait) connects to every port at once (in batches
 * of 4096, non-blocking, waiting up to `wait` s for each batch) and prints
 * "<label> open=[ports that accepted] <outcome>:<count> ...". */
static const char *SCANNER =
    "import errno, os, select, socket, time\n"
    "def scan(label, ip, ports, wait):\n"
    "    opened, outcomes = [], {}\n"
    "    def note(p, e):\n"
    "        k = 'CONNECTED' if e == 0 else errno.errorcode.get(e, str(e))\n"
    "        outcomes[k] = outcomes.get(k, 0) + 1\n"
    "        if e == 0:\n"
    "            opened.append(p)\n"
    "    for i in range(0, len(ports), 4096):\n"
    "        socks = {}\n"
    "        poll = select.poll()\n"
    "        for p in ports[i:i + 4096]:\n"
    "            s = socket.socket()\n"
    "            s.setblocking(False)\n"
    "            e = s.connect_ex((ip, p))\n"
    "            if e == errno.EINPROGRESS:\n"
    "                socks[s.fileno()] = (s, p)\n"
    "                poll.register(s, select.POLLOUT)\n"
    "            else:\n"
    "                note(p, e)\n"
    "                s.close()\n"
    "        deadline = time.time() + wait\n"
    "        while socks and time.time() < deadline:\n"
    "            for fd, ev in poll.poll(max(1, int((deadline - time.time()) * 1000))):\n"
    "                s, p = socks.pop(fd)\n"
    "                poll.unregister(fd)\n"
    "                note(p, s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))\n"
    "                s.close()\n"
    "        for s, p in socks.values():\n"
    "            note(p, -1)\n"
    "            s.close()\n"
    "    print(label, 'open=%s' % opened, ' '.join('%s:%d' % kv for kv in sorted(outcomes.items())))\n"
    "def unix(path):\n"
    "    s = socket.socket(socket.AF_UNIX)\n"
    "    try:\n"
    "        s.connect(path)\n"
    "        return 'CONNECTED'\n"
    "    except OSError as e:\n"
    "        return errno.errorcode[e.errno]\n"
    "    finally:\n"
    "        s.close()\n";

/* The victim starts its listener (LISTENER) and connects to itself at ip
 * (the positive control: the listener is reachable where the attacker
 * aims). */
static void victim_listens(const char *tok, const char *sid, const char *ip)
{
    json_object *r = py(tok, sid, LISTENER);
    SGSEC_EXPECT_STDOUT(r, "listening\n");
    json_object_put(r);
    char code[512];
    pathf(code, sizeof(code),
          "c = socket.create_connection(('%s', %d), timeout=5)\nprint(c.recv(64).decode())\nc.close()\n", ip,
          VICTIM_PORT);
    r = py(tok, sid, code);
    SGSEC_EXPECT_STDOUT(r, "victim-data\n");
    json_object_put(r);
}

static void victim_hits(const char *tok, const char *sid, int want)
{
    char w[32];
    json_object *r = py(tok, sid, "import time; time.sleep(0.3); print(hits[0])");
    pathf(w, sizeof(w), "%d\n", want);
    SG_CHECK(strcmp(SG_STR(r, "stdout"), w) == 0, r,
             "the victim's listener must have seen only its own %d connection(s)", want);
    json_object_put(r);
}

/* The ports of the service on this machine the sandbox must not reach. */
static void service_ports(char *buf, size_t len)
{
    const char *u = sgtest_proxy_url(st.proxy);
    int proxy_port = atoi(strrchr(u, ':') + 1);
    pathf(buf, len, "[%d, %d, %d, 2375, 2376]", proxy_port, sggw_gateway_port(st.gw), sggw_redis_port(st.redis));
}

/* Runs probe in the victim's session vs (the positive control: what the
 * attack looks for is there) and in the attacker's session as; each must
 * print exactly what is given. */
static void probe_both(const char *vt, const char *vs, const char *victim_sees, const char *at, const char *as,
                       const char *attacker_sees, const char *probe)
{
    json_object *r = py(vt, vs, probe);
    SGSEC_EXPECT_STDOUT(r, victim_sees);
    json_object_put(r);
    r = py(at, as, probe);
    SGSEC_EXPECT_STDOUT(r, attacker_sees);
    json_object_put(r);
}

/* The end of every attack of tenant at (session as) on tenant vt (session
 * vs): both sessions still work, and fresh ones too; frees the four. */
static void both_still_work(char *at, char *as, char *vt, char *vs)
{
    sgsec_expect_service_works(&st, at, as, 0);
    sgsec_expect_service_works(&st, vt, vs, 0);
    free(vs);
    free(as);
    free(vt);
    free(at);
}

/* ------------------------------------------------------------------------
 * Processes
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_cannot_see_other_sessions_processes)
{
    char *vt = tenant("ps-victim"), *at = tenant("ps-attacker");
    char *vs = sggw_create_session(st.gw, vt, NULL, NULL), *as = sggw_create_session(st.gw, at, NULL, NULL);
    /* the victim names one of its threads, which lives on between executions */
    const char *mark = "import ctypes, threading, time\n"
                       "def hold():\n"
                       "    ctypes.CDLL(None).prctl(15, b'sgvictim4242', 0, 0, 0)\n"
                       "    while True:\n"
                       "        time.sleep(1)\n"
                       "threading.Thread(target=hold, daemon=True).start()\n"
                       "time.sleep(0.2)\n";
    const char *look = "import glob, os\n"
                       "names = {}\n"
                       "for d in glob.glob('/proc/[0-9]*'):\n"
                       "    for t in glob.glob(d + '/task/*/comm'):\n"
                       "        try:\n"
                       "            names[open(t).read().strip()] = True\n"
                       "        except OSError:\n"
                       "            pass\n"
                       "pids = len(glob.glob('/proc/[0-9]*'))\n"
                       "print('marker', 'sgvictim4242' in names)\n"
                       "print('few', pids < 10)\n"
                       "service = ('dockerd', 'containerd', 'sandgate-', 'redis', 'runc')\n"
                       "print('service', sorted(n for n in names if n.startswith(service)))\n";
    json_object *r = py(vt, vs, mark);
    json_object_put(r);
    /* positive control: the marker is there to be found; the attacker sees
     * its own agent and nothing of the victim or the host */
    probe_both(vt, vs, "marker True\nfew True\nservice ['sandgate-agent']\n", at, as,
               "marker False\nfew True\nservice ['sandgate-agent']\n", look);
    both_still_work(at, as, vt, vs);
}

/* SysV shared memory and abstract unix sockets are per IPC and network
 * namespace: the victim makes both; the attacker, on the same Docker
 * network, finds neither. */
SGGW_TEST(test_cannot_reach_another_sandbox_by_ipc)
{
    char *vt = tenant("ipc-victim"), *at = tenant("ipc-attacker");
    char *vs = sggw_create_session(st.gw, vt, "{\"lang\":\"python\",\"network\":true}", NULL);
    char *as = sggw_create_session(st.gw, at, "{\"lang\":\"python\",\"network\":true}", NULL);
    const char *probe = "import ctypes, errno, socket\n"
                        "libc = ctypes.CDLL(None, use_errno=True)\n"
                        "v = libc.shmget(0x5347, 0, 0)\n"
                        "print('shm', 'FOUND' if v >= 0 else errno.errorcode[ctypes.get_errno()])\n"
                        "s = socket.socket(socket.AF_UNIX)\n"
                        "try:\n"
                        "    s.connect('\\0sgvictim-abstract')\n"
                        "    print('abstract CONNECTED')\n"
                        "except OSError as e:\n"
                        "    print('abstract', errno.errorcode[e.errno])\n"
                        "s.close()\n";
    json_object *r = py(vt, vs,
                        "import ctypes, socket\n"
                        "libc = ctypes.CDLL(None, use_errno=True)\n"
                        "shmid = libc.shmget(0x5347, 4096, 0o1666)\n"
                        "abstract = socket.socket(socket.AF_UNIX)\n"
                        "abstract.bind('\\0sgvictim-abstract')\n"
                        "abstract.listen(8)\n"
                        "print(shmid >= 0)\n");
    SGSEC_EXPECT_STDOUT(r, "True\n");
    json_object_put(r);
    /* positive control: both are there to be found */
    probe_both(vt, vs, "shm FOUND\nabstract CONNECTED\n", at, as, "shm ENOENT\nabstract ECONNREFUSED\n", probe);
    both_still_work(at, as, vt, vs);
}

/* ------------------------------------------------------------------------
 * The network
 * ------------------------------------------------------------------------ */

/* A network attack of tenant at (session as) on tenant vt (session vs, with
 * the network, so that it has an address to aim at): their addresses. */
typedef struct {
    char *vt, *at, *vs, *as;
    char vip[64], vgw[64], aip[64], agw[64];
} net_attack_t;

static void net_attack_begin(net_attack_t *n, const char *victim, const char *attacker, const char *attacker_opts)
{
    n->vt = tenant(victim);
    n->at = tenant(attacker);
    n->vs = sggw_create_session(st.gw, n->vt, "{\"lang\":\"python\",\"network\":true}", NULL);
    n->as = sggw_create_session(st.gw, n->at, attacker_opts, NULL);
    container_ip(n->vs, n->vip, n->vgw);
    container_ip(n->as, n->aip, n->agw);
}

/* The attacker scans every port of the victim (each connect bounded by
 * victim_s), the service's ports at host (host_s), its own loopback and the
 * Docker socket, then runs `more`: the result. */
static json_object *net_attack_scan(const net_attack_t *n, double victim_s, const char *host, double host_s,
                                    const char *more)
{
    char ports[128], code[8192];
    service_ports(ports, sizeof(ports));
    pathf(code, sizeof(code),
          "%s"
          "scan('victim', '%s', list(range(1, 65536)), %g)\n"
          "scan('host', '%s', %s, %g)\n"
          "scan('loopback', '127.0.0.1', %s, 1)\n"
          "print('docker.sock', unix('/var/run/docker.sock'), unix('/run/docker.sock'))\n"
          "%s",
          SCANNER, n->vip, victim_s, host, ports, host_s, ports, more);
    return py(n->at, n->as, code);
}

/* Its end: the victim's listener saw only its own connection, both still
 * work. */
static void net_attack_end(net_attack_t *n)
{
    victim_hits(n->vt, n->vs, 1);
    both_still_work(n->at, n->as, n->vt, n->vs);
}

/* The attacker without network: nothing but its own loopback, and nothing
 * listens there. The victim has the network, so it has an address to aim at. */
SGGW_TEST(test_no_route_to_another_sandbox)
{
    net_attack_t n;
    net_attack_begin(&n, "net-victim", "net-attacker", NULL);
    SG_CHECK(n.vip[0] != '\0' && n.vgw[0] != '\0', NULL, "the victim (network on) must have an address");
    SG_CHECK(n.aip[0] == '\0', NULL, "a session without network must have no address, has %s", n.aip);

    victim_listens(n.vt, n.vs, n.vip);

    json_object *r = net_attack_scan(&n, 1, n.vgw, 1, "print('interfaces', sorted(os.listdir('/sys/class/net')))\n");
    /* gVisor's network stack says EHOSTUNREACH for the same missing route */
    const char *unreach = sgtest_docker_session_on_runsc(st.proxy_id, n.as) ? "EHOSTUNREACH" : "ENETUNREACH";
    char want[256];
    pathf(want, sizeof(want),
          "victim open=[] %s:65535\n"
          "host open=[] %s:5\n"
          "loopback open=[] ECONNREFUSED:5\n"
          "docker.sock ENOENT ENOENT\n"
          "interfaces ['lo']\n",
          unreach, unreach);
    SGSEC_EXPECT_STDOUT(r, want);
    json_object_put(r);
    net_attack_end(&n);
}

/* Both tenants may use the network and do: the attacker still cannot reach
 * the victim's container on any port, nor the service's ports on the host
 * through the network's gateway, nor the Docker engine. */
SGGW_TEST(test_no_route_to_another_sandbox_with_network)
{
    net_attack_t n;
    net_attack_begin(&n, "netw-victim", "netw-attacker", "{\"lang\":\"python\",\"network\":true}");
    SG_CHECK(n.vip[0] != '\0' && n.aip[0] != '\0', NULL, "both sessions must have an address");

    victim_listens(n.vt, n.vs, n.vip);

    json_object *r = net_attack_scan(&n, 1.5, n.agw, 3, "");
    const char *out = SG_STR(r, "stdout");
    SG_CHECK(strncmp(out, "victim open=[] ", 15) == 0 && strstr(out, "CONNECTED") == NULL, r,
             "the attacker must reach no port of the victim's container");
    SG_CHECK(strstr(out, "\nhost open=[] ECONNREFUSED:5\n") != NULL, r,
             "the service's ports are not reachable through the network's gateway");
    SG_CHECK(strstr(out, "\nloopback open=[] ECONNREFUSED:5\n") != NULL, r, "nothing listens on the own loopback");
    SG_CHECK(strstr(out, "\ndocker.sock ENOENT ENOENT\n") != NULL, r, "no Docker socket");
    json_object_put(r);
    net_attack_end(&n);
}

/* ------------------------------------------------------------------------
 * Bombs
 * ------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Runs `bomb` (which prints "<start> <end> <rest>" with its own wall
 * times first) in the attacker's session while the victim, another tenant,
 * runs short executions; asserts that every victim execution inside the
 * bomb's window took at most max(2 s, 20 x its median before the bomb), and
 * that there were at least 5 of them. Returns the bomb's result; NULL
 * when, under runsc, the bomb ended the attacker's whole sandbox at its
 * memory cap (502 sandbox_failed: README "Runtimes"), the window then
 * being from the bomb's launch to that reply. */
static json_object *bomb_against_victim(const char *at, const char *as, const char *vt, const char *vs,
                                        const char *bomb)
{
    bool runsc = sgtest_docker_session_on_runsc(st.proxy_id, as);
    double base[7];
    for (int i = 0; i < 7; i++) {
        double t0 = sgtest_now();
        json_object *r = py(vt, vs, "print(6 * 7)");
        base[i] = sgtest_now() - t0;
        SGSEC_EXPECT_STDOUT(r, "42\n");
        json_object_put(r);
    }
    qsort(base, 7, sizeof(base[0]), cmp_double);
    double bound = 20 * base[3] > 2.0 ? 20 * base[3] : 2.0;

    char url[512];
    pathf(url, sizeof(url), "%s/sessions/%s/execute", sggw_gateway_url(st.gw), as);
    json_object *b = json_object_new_object();
    json_object_object_add(b, "code", json_object_new_string(bomb));
    json_object_object_add(b, "timeout", json_object_new_int(60));
    const char *body = json_object_to_json_string(b);
    sggw_par_req_t req = sggw_par_post(url, at, body, 90);
    double launched = sggw_wall();
    sggw_batch_t *batch = sggw_batch_start(&req, 1);
    SG_CHECK(batch != NULL, NULL, "cannot start the bomb's request");

    enum { MAXV = 4000 };
    static double vstart[MAXV], vend[MAXV];
    int nv = 0;
    /* the victim works until the bomb's reply (the bomb lasts 8 s or more
     * from its start, 45 s at most); only its executions inside the bomb's
     * window count */
    double until = sgtest_now() + 90;
    while (nv < MAXV && sgtest_now() < until && sgtest_batch_finished(batch) == 0) {
        vstart[nv] = sggw_wall();
        json_object *r = py(vt, vs, "print(6 * 7)");
        vend[nv] = sggw_wall();
        SGSEC_EXPECT_STDOUT(r, "42\n");
        json_object_put(r);
        nv++;
    }
    sggw_batch_join(batch);
    double replied = sggw_wall();
    json_object_put(b);
    json_object *res = NULL;
    double bs = 0, be = 0;
    if (runsc && req.reply.status == 502) {
        json_object *e = SG_JSON(&req.reply);
        SG_CHECK(strcmp(SG_STR(e, "code"), "sandbox_failed") == 0, e, "under runsc the bomb may end its sandbox only");
        json_object_put(e);
        bs = launched;
        be = replied;
    } else {
        SG_ASSERT_STATUS(&req.reply, 200);
        res = SG_JSON(&req.reply);
        SG_CHECK(sscanf(SG_STR(res, "stdout"), "%lf %lf", &bs, &be) == 2 && be > bs, res, "the bomb's window");
    }
    sgtest_reply_free(&req.reply);
    int inside = 0;
    double worst = 0;
    for (int i = 0; i < nv; i++) {
        if (vstart[i] < bs || vend[i] > be)
            continue;
        inside++;
        if (vend[i] - vstart[i] > worst)
            worst = vend[i] - vstart[i];
    }
    SG_CHECK(inside >= 5, res, "only %d victim executions ran during the bomb (%.2f s); the test proved nothing",
             inside, be - bs);
    SG_CHECK(worst <= bound, res,
             "during the bomb a victim execution took %.2f s (median before %.3f s, bound %.2f s, %d executions)",
             worst, base[3], bound, inside);
    return res;
}

/* A bomb of tenant `attacker` against tenant `victim`, each in a session
 * of its own (bomb_against_victim()): what it prints must hold `must_hold`
 * (why: what it means when not); then both still work. */
static void bomb_test(const char *victim, const char *attacker, const char *bomb, const char *must_hold,
                      const char *why)
{
    char *vt = tenant(victim), *at = tenant(attacker);
    char *vs = sggw_create_session(st.gw, vt, NULL, NULL), *as = sggw_create_session(st.gw, at, NULL, NULL);
    json_object *res = bomb_against_victim(at, as, vt, vs, bomb);
    if (res == NULL) {
        /* runsc: the attacker's sandbox is gone; a fresh one works */
        free(as);
        as = NULL;
    } else {
        fprintf(stderr, "%s: the bomb printed %s", attacker, SG_STR(res, "stdout"));
        SG_CHECK(strstr(SG_STR(res, "stdout"), must_hold) != NULL, res, "%s", why);
        json_object_put(res);
    }
    both_still_work(at, as, vt, vs);
}

SGGW_TEST(test_fork_bomb_does_not_slow_another_tenant)
{
    char why[128];
    pathf(why, sizeof(why), "the bomb must hit the pids cap (EAGAIN, and no more than %d children)", PIDS_LIMIT);
    /* every process forks as fast as it can and spins, for 8 s and until it
     * has met the cap (under gVisor's ptrace platform a fork costs
     * milliseconds: on a busy machine 8 s were seen not to reach 128), 45 s
     * at most */
    bomb_test("fork-victim", "fork-attacker",
              "import errno, os, time\n"
              "t0 = time.time()\n"
              "end, last = t0 + 8, t0 + 45\n"
              "me = os.getpid()\n"
              "fails, kids = {}, 0\n"
              "while True:\n"
              "    now = time.time()\n"
              "    if now >= last or (now >= end and fails):\n"
              "        break\n"
              "    try:\n"
              "        pid = os.fork()\n"
              "    except OSError as e:\n"
              "        k = errno.errorcode[e.errno]\n"
              "        fails[k] = fails.get(k, 0) + 1\n"
              "        continue\n"
              "    if pid != 0 and os.getpid() == me:\n"
              "        kids += 1\n"
              "if os.getpid() != me:\n"
              "    os._exit(0)\n"
              "print('%.3f %.3f' % (t0, time.time()), sorted(fails), kids <= 128)\n",
              " ['EAGAIN'] True\n", why);
}

SGGW_TEST(test_memory_bomb_does_not_slow_another_tenant)
{
    /* for 8 s: a child fills memory until it is killed, then the next one */
    bomb_test("mem-victim", "mem-attacker",
              "import os, time\n"
              "t0 = time.time()\n"
              "killed = other = 0\n"
              "while time.time() < t0 + 8:\n"
              "    pid = os.fork()\n"
              "    if pid == 0:\n"
              "        x = []\n"
              "        while True:\n"
              "            x.append(b'x' * (16 << 20))\n"
              "    _, st = os.waitpid(pid, 0)\n"
              "    if os.WIFSIGNALED(st) and os.WTERMSIG(st) == 9:\n"
              "        killed += 1\n"
              "    else:\n"
              "        other += 1\n"
              "print('%.3f %.3f' % (t0, time.time()), killed > 0, other)\n",
              " True 0\n", "every memory hog must be killed by the memory limit");
}

/* ------------------------------------------------------------------------
 * Fixtures
 * ------------------------------------------------------------------------ */

/* The sandboxes' network of this suite's proxy: its own, named after the
 * run, removed at the end (the engine is left as it was found). */
static char net_kv[96];

static int group_setup(void **state)
{
    *state = &st;
    snprintf(net_kv, sizeof(net_kv), "SANDGATE_SANDBOX_NETWORK=sgtest-net-%ld", (long)getpid());
    const char *env[] = {"SANDGATE_ALLOW_NETWORK=1", net_kv, NULL};
    return sgsec_stack_start(&st, env);
}

static int group_teardown(void **state)
{
    int rc = sggw_stack_group_teardown(state);
    if (net_kv[0] != '\0' && sgtest_docker_network_remove(strchr(net_kv, '=') + 1) != 0)
        rc = -1;
    return rc;
}

int main(void)
{
    return SG_RUN_TESTS("sec_interference", group_setup, group_teardown, NULL, sggw_stack_teardown,
                        test_cannot_see_other_sessions_processes, test_cannot_reach_another_sandbox_by_ipc,
                        test_no_route_to_another_sandbox, test_no_route_to_another_sandbox_with_network,
                        test_fork_bomb_does_not_slow_another_tenant, test_memory_bomb_does_not_slow_another_tenant);
}
