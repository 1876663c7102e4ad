"""sandgate kernel for Python: runs successive pieces of code in one namespace.

Started by sandgate-agent (see proxy/agent/agent_proto.h, "Kernels") as
`exec python3 -u kernel.py`, with requests "<byte length>\\n<code>" on fd 3;
after each run it flushes stdout and stderr and answers "<exit code>\\n" on
fd 4; once started, before reading its first request, it writes "ready\\n"
there. Standard library only (matplotlib, pandas and Pillow are used when the
user's code has imported them).

Rich results go to fd 5, the result channel, each as "<byte length>\\n" and
a JSON object {"type", "mime", "data", "main"} (agent_proto.h, "The result
channel"; docs/proxy-api.md), before the answer:
  - the value of a last bare expression, as Jupyter's execute_result: its
    repr as text/plain, plus text/html (_repr_html_, e.g. a DataFrame) and
    image/png or image/jpeg (_repr_png_, _repr_jpeg_, e.g. a PIL image; a
    matplotlib Figure) when it has them; "main": true. It is not printed,
    and it becomes builtins._ as in the interactive interpreter; a
    semicolon after it (`x;`) keeps it quiet, as in Jupyter;
  - each matplotlib figure shown (plt.show()) or still open when the run
    ends, as image/png at its own size and dpi, then closed;
  - what display(obj) is given (a name of the user's namespace, as in
    IPython).
"""
import ast
import base64
import builtins
import gc
import importlib
import importlib.abc
import io
import json
import linecache
import os
import sys
import traceback
import types

RESULT_FD = 5
MPL_CACHE = "/usr/local/share/sandgate/matplotlib"  # made when the image was built


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


# ---- the result channel ----------------------------------------------------

results_open = False  # fd 5 was there when the kernel started


def emit(kind, mime, data, main):
    """One record on the result channel."""
    if not results_open:
        return
    record = json.dumps({"type": kind, "mime": mime, "data": data, "main": main}).encode()
    view = memoryview(b"%d\n" % len(record) + record)
    try:
        while view:
            view = view[os.write(RESULT_FD, view):]
    except OSError:
        pass  # the user's code closed or replaced it: its results are gone


def figure_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png")  # at the figure's own size and dpi
    return buf.getvalue()


def is_figure(value):
    figure = sys.modules.get("matplotlib.figure")
    return figure is not None and isinstance(value, figure.Figure)


def call_repr(value, name):
    """value._repr_<x>_(), looked up on the type as IPython does, or None."""
    if getattr(type(value), name, None) is None:
        return None
    return getattr(value, name)()


def display_value(value, main):
    """Every representation of value, as records; raises what a repr raises."""
    reps = [("text", "text/plain", repr(value))]
    html = call_repr(value, "_repr_html_")
    if isinstance(html, str):
        reps.append(("html", "text/html", html))
    if is_figure(value):
        reps.append(("image", "image/png", figure_png(value)))
        sys.modules["matplotlib.pyplot"].close(value)
    else:
        for name, mime in (("_repr_png_", "image/png"), ("_repr_jpeg_", "image/jpeg")):
            data = call_repr(value, name)
            if isinstance(data, (bytes, bytearray)):
                reps.append(("image", mime, bytes(data)))
                break
    for kind, mime, data in reps:
        if isinstance(data, bytes):
            data = base64.b64encode(data).decode("ascii")
        emit(kind, mime, data, main)


def display(*objs):
    """IPython's display(): each object's representations, now."""
    for obj in objs:
        display_value(obj, False)


def flush_figures():
    """Every open matplotlib figure as a PNG, then closed."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for num in plt.get_fignums():
        fig = plt.figure(num)
        try:
            emit("image", "image/png", base64.b64encode(figure_png(fig)).decode("ascii"), False)
        except Exception:
            traceback.print_exc()
        finally:
            plt.close(fig)


def pyplot_show(*args, **kwargs):
    flush_figures()


class PyplotHook(importlib.abc.MetaPathFinder):
    """Makes plt.show() send the figures when matplotlib.pyplot is imported
    (with MPLBACKEND=Agg it would only warn that it cannot show them)."""

    def find_spec(self, name, path, target=None):
        if name != "matplotlib.pyplot":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                loader_exec = spec.loader.exec_module

                def exec_module(module):
                    loader_exec(module)
                    module.show = pyplot_show

                spec.loader.exec_module = exec_module
                return spec
        return None


def prepare_matplotlib():
    """matplotlib's font cache, copied from the image into MPLCONFIGDIR (the
    root file system is read-only: it could not be made there)."""
    dest = os.environ.get("MPLCONFIGDIR")
    if not dest or not os.path.isdir(MPL_CACHE):
        return
    try:
        os.makedirs(dest, exist_ok=True)
        for name in os.listdir(MPL_CACHE):
            target = os.path.join(dest, name)
            if name.endswith(".json") and not os.path.exists(target):
                with open(os.path.join(MPL_CACHE, name), "rb") as src, open(target, "wb") as dst:
                    dst.write(src.read())
    except OSError:
        pass  # matplotlib builds its cache itself then


# ---- running code -------------------------------------------------------------


def quiet(source, node):
    """Whether a semicolon follows the last expression (`x;`)."""
    lines = source.splitlines()
    if node.end_lineno is None or node.end_lineno > len(lines):
        return False
    rest = lines[node.end_lineno - 1].encode("utf-8")[node.end_col_offset :]
    return rest.decode("utf-8", errors="replace").lstrip().startswith(";")


def run(source, filename, namespace):
    """Run source in namespace and return its exit code; the namespace lives
    on whatever happens, SystemExit included. The value of a last bare
    expression is displayed, not printed; open figures are sent by
    the caller."""
    try:
        tree = compile(source, filename, "exec", ast.PyCF_ONLY_AST)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not quiet(source, tree.body[-1]):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, filename, "exec"), namespace)
        if last is not None:
            value = eval(compile(last, filename, "eval"), namespace)
            if value is not None:
                builtins._ = value
                display_value(value, True)
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
    # One system call tells whether any child waits to be reaped at all (it
    # reaps nothing: WNOWAIT); only then the /proc scan below, which costs
    # dozens of them (milliseconds under gVisor).
    try:
        if os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            return
    except ChildProcessError:
        return  # no children at all
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
        if results_open:
            os.dup2(null, RESULT_FD, inheritable=False)
        os.close(null)
    except OSError:
        os.close(3)
        os.close(4)
        if results_open:
            os.close(RESULT_FD)


KERNEL_PID = -1


def main():
    global KERNEL_PID, results_open
    KERNEL_PID = os.getpid()
    try:
        os.fstat(RESULT_FD)
        os.set_inheritable(RESULT_FD, False)
        results_open = True
    except OSError:
        pass  # an agent without a result channel: fd 5 may become anything later
    os.register_at_fork(after_in_child=forked_copy)
    workdir = os.environ.get("SANDGATE_WORKDIR") or os.getcwd()
    os.chdir(workdir)
    sys.path.insert(0, workdir)
    try:
        os.makedirs(os.path.join(workdir, "out"), exist_ok=True)  # files the code writes there are listed
    except OSError:
        pass
    prepare_matplotlib()
    sys.meta_path.insert(0, PyplotHook())
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
    user_main.display = display
    sys.modules["__main__"] = user_main
    sys.argv = [""]
    namespace = user_main.__dict__
    count = 0
    os.write(4, b"ready\n")  # the start is over: the first run's time starts now
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
        try:
            flush_figures()  # also those of a run that failed
        except BaseException:
            traceback.print_exc()
        flush()
        if os.getpid() != KERNEL_PID:
            # A forked copy that ran to the end of the code: it ends there,
            # as the child of a script would.
            os._exit(status)
        os.write(4, b"%d\n" % status)


if __name__ == "__main__":
    main()
