"""sandgate kernel for Python: runs successive pieces of code in one namespace.

Started by sandgate-agent (see proxy/agent/agent_proto.h, "Kernels") as
`exec python3 -u kernel.py`, with requests "<byte length>\\n<code>" on fd 3;
after each run it flushes stdout and stderr and answers "<exit code>\\n" on
fd 4. Standard library only.
"""
import builtins
import gc
import importlib
import linecache
import os
import sys
import traceback
import types


def read_request(requests):
    """The next piece of code as text, or None when the agent is gone."""
    head = requests.readline()
    if not head.endswith(b"\n"):
        return None
    code = requests.read(int(head))
    return code.decode("utf-8", errors="replace")


def exit_code(code):
    """What a process exiting with SystemExit(code) would report."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run(source, filename, namespace):
    """Run source in namespace and return its exit code; the namespace lives
    on whatever happens, SystemExit included."""
    try:
        exec(compile(source, filename, "exec"), namespace)
    except SystemExit as e:
        return exit_code(e.code)
    except BaseException as e:  # KeyboardInterrupt too
        # Drop the first frame, this function's: only the user's code shows.
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        return 1
    return 0


def flush():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass  # closed or replaced by the user's code: nothing to flush


def zombie_children():
    me = str(os.getpid())
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and fields[1] == me:
            kids.append(int(entry))
    return kids


def reap():
    """Collects the children earlier runs left: the agent killed them when
    their run ended, but only their parent, this kernel, can reap them, and
    until then each holds one of the sandbox's few pids. Children that a
    subprocess.Popen of the user's still waits for are left to it, so that
    p.wait() in a later run sees how they ended."""
    kids = zombie_children()
    if not kids:
        return
    keep = set()
    if "subprocess" in sys.modules:
        popen = sys.modules["subprocess"].Popen
        keep = {o.pid for o in gc.get_objects() if isinstance(o, popen) and o.returncode is None}
    for pid in kids:
        if pid not in keep:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def forked_copy():
    """In a child of os.fork(), a copy of this kernel: the agent's pipes are
    the kernel's alone. Pointed at /dev/null, the copy can neither take the
    next request nor answer for the kernel, whatever its code does."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 3, inheritable=False)
        os.dup2(null, 4, inheritable=False)
        os.close(null)
    except OSError:
        os.close(3)
        os.close(4)


KERNEL_PID = -1


def main():
    global KERNEL_PID
    KERNEL_PID = os.getpid()
    os.register_at_fork(after_in_child=forked_copy)
    workdir = os.environ.get("SANDGATE_WORKDIR") or os.getcwd()
    os.chdir(workdir)
    sys.path.insert(0, workdir)
    # Whole lines, as on a terminal, rather than one pipe write per piece of
    # each print() that -u would give; every run ends with a flush anyway.
    sys.stdout.reconfigure(line_buffering=True, write_through=False)
    # Children of the user's code (os.system, fork) must not inherit these.
    os.set_inheritable(3, False)
    os.set_inheritable(4, False)
    requests = open(3, "rb")
    # The user's namespace is a fresh __main__ module, so that pickle and
    # multiprocessing find what the code defines; this file's own module
    # stays reachable under another name.
    sys.modules["sandgate_kernel"] = sys.modules["__main__"]
    user_main = types.ModuleType("__main__")
    user_main.__builtins__ = builtins
    sys.modules["__main__"] = user_main
    sys.argv = [""]
    namespace = user_main.__dict__
    count = 0
    while True:
        source = read_request(requests)
        if source is None:
            return
        reap()
        # libraries installed since the last run are importable now
        importlib.invalidate_caches()
        count += 1
        filename = "<exec-%d>" % count
        # Registered so that tracebacks show the lines of earlier pieces too.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        status = run(source, filename, namespace)
        flush()
        if os.getpid() != KERNEL_PID:
            # A forked copy that ran to the end of the code: it ends there,
            # as the child of a script would.
            os._exit(status)
        os.write(4, b"%d\n" % status)


if __name__ == "__main__":
    main()
