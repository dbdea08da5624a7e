"""``python -m posexp ARGS`` as a process of its own, forked from a warm one.

A test of the process boundary -- signals, kills, locks between processes, a launcher's
processes -- needs a process of its own, and a fresh Python spends ~3 s of a tiny run
importing torch, torch._dynamo, Hydra and posexp before it does anything (measured, 2
cores).  Each pytest worker starts one server that has imported them and is otherwise idle
and single-threaded; a test asks it for a process, and it forks one: a real process, with
its own pid, signals, exit status, working directory, environment and standard streams
(the test's pipes or terminal), which then runs ``posexp`` as ``python -m posexp`` would
(``runpy``) and ends as an interpreter ends (threads joined, atexit, streams flushed).

What a fork cannot give is a fresh import, so a request falls back to a fresh
``python -m posexp`` where the import would differ: an environment variable read at import
(``IMPORT_KEYS``) differs from the server's, or the working directory holds a ``posexp`` of
its own that would shadow the installed one.  The server falls back too, as a whole, when
an import left a thread running (a fork keeps only the thread that forks).  One thing is
shared on purpose: the children's string hashes are seeded alike (the server's seed), where
fresh processes would each draw one.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# what a posexp command imports, that a child would import again: not datasets, whose
# import starts a thread (pyarrow's), nor wandb, which makes a folder for its media at import
# that the first child to end would remove for them all
WARM = ["torch", "torch._dynamo", "torch.fx.experimental.symbolic_shapes", "hydra",
        "omegaconf", "posexp.cli.app", "posexp.run.training", "posexp.sweep.launch",
        "matplotlib.pyplot", "tabulate"]
# environment variables that change what an import does, or which modules or folders it
# finds (matplotlib's config folder from HOME, torch's temporary one from TMPDIR)
IMPORT_KEYS = ("PYTHON", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "NUMEXPR_", "TORCH", "PYTORCH",
               "CUDA", "LD_", "MPL", "MATPLOTLIB", "HOME", "XDG_", "TMPDIR", "TEMP", "TMP",
               "HYDRA_FULL_ERROR")
# set in the tests' own process by torch.compile, and read when compiling, not at import
RUNTIME_KEYS = {"TORCHINDUCTOR_CACHE_DIR"}
DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
                   signal.SIGALRM, signal.SIGCHLD)


# --- the client: what the tests call -------------------------------------------------
def popen(args: list[str], *, cwd: Path, env: dict, stdin=subprocess.DEVNULL,
          stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session: bool = False):
    """``subprocess.Popen([python, -m, posexp, *args], text=True, ...)``: a forked
    ``Forked`` where the warm server can give it, else the fresh process itself."""
    server = Server.get()
    if server is None or not server.can_run(cwd, env):
        return subprocess.Popen([sys.executable, "-m", "posexp", *args], cwd=cwd, env=env,
                                stdin=stdin, stdout=stdout, stderr=stderr, text=True,
                                start_new_session=start_new_session)
    return Forked(server, list(args), Path(cwd), env, (stdin, stdout, stderr),
                  start_new_session)


def run(args: list[str], *, cwd: Path, env: dict, timeout: float, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE) -> subprocess.CompletedProcess:
    """``subprocess.run([python, -m, posexp, *args], text=True, timeout=...)`` through
    ``popen``: the process killed and TimeoutExpired raised past ``timeout``."""
    with popen(args, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    return subprocess.CompletedProcess(["posexp", *args], proc.returncode, out, err)


class Server:
    """This worker's warm server, started at the first request and ended with the worker
    (its stdin's end), or None where it cannot serve (a thread left by an import)."""

    started: Server | bool | None = False

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="posexp-forkserver-")
        self.address = os.path.join(self.folder, "socket")
        self.env = dict(os.environ)
        # a script, from a folder of its own: posexp is found where a fresh process finds it
        self.process = subprocess.Popen([sys.executable, __file__, self.address],
                                        cwd=self.folder, env=self.env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.ready = self.process.stdout.readline().decode().strip() == "ready"
        atexit.register(self.close)

    @classmethod
    def get(cls) -> Server | None:
        if cls.started is False:
            server = cls()
            cls.started = server if server.ready else None
        return cls.started or None

    def can_run(self, cwd: Path, env: dict) -> bool:
        """Whether a fork gives what a fresh process started so would import."""
        keys = {k for k in (*env, *self.env) if k.startswith(IMPORT_KEYS)} - RUNTIME_KEYS
        return (all(env.get(k) == self.env.get(k) for k in keys)
                and not os.path.lexists(Path(cwd) / "posexp"))

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)
        Path(self.address).unlink(missing_ok=True)
        os.rmdir(self.folder)


class Forked:
    """A process the server forked: the part of ``subprocess.Popen`` the tests use.  Its
    exit status comes over the connection, since it is the server's child."""

    def __init__(self, server: Server, args: list[str], cwd: Path, env: dict, streams,
                 new_session: bool) -> None:
        self.args, self.returncode, self.buffer = ["posexp", *args], None, b""
        ours: list[int | None] = [None, None, None]
        theirs, sent = [], []  # the child's three, and those only it keeps
        for fd, given in enumerate(streams):
            if given == subprocess.PIPE:
                r, w = os.pipe()
                ours[fd], end = (w, r) if fd == 0 else (r, w)
            elif given == subprocess.DEVNULL:
                end = os.open(os.devnull, os.O_RDWR)
            else:
                theirs.append(fd if given is None else
                              given if isinstance(given, int) else given.fileno())
                continue
            theirs.append(end)
            sent.append(end)
        self.connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.connection.connect(server.address)
        request = json.dumps({"argv": args, "cwd": str(cwd), "env": env,
                              "new_session": new_session}).encode()
        socket.send_fds(self.connection, [len(request).to_bytes(8, "big") + request], theirs)
        for fd in sent:
            os.close(fd)
        started = self.line().decode()
        if not started.isdigit():
            raise OSError(f"posexp could not start: {started.removeprefix('error ')}")
        self.pid = int(started)
        self.stdin, self.stdout, self.stderr = (
            None if fd is None else open(fd, "w" if i == 0 else "r")  # noqa: SIM115 (Popen's)
            for i, fd in enumerate(ours))
        self.read: dict = {f: [] for f in (self.stdout, self.stderr) if f}  # communicate's

    def line(self) -> bytes:
        """The server's next line on this connection (the pid, then the exit status)."""
        while b"\n" not in self.buffer:
            chunk = self.connection.recv(64)
            if not chunk:
                raise RuntimeError("the fork server ended before its child")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def poll(self) -> int | None:
        if self.returncode is None and (b"\n" in self.buffer
                                        or select.select([self.connection], [], [], 0)[0]):
            self._finish()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if b"\n" not in self.buffer and not select.select([self.connection], [], [],
                                                               timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._finish()
        return self.returncode

    def _finish(self) -> None:
        self.returncode = int(self.line())
        self.connection.close()

    def communicate(self, timeout: float | None = None) -> tuple[str | None, str | None]:
        """Both pipes read to their end, then the status; TimeoutExpired past ``timeout``,
        what was read kept for the next call, as Popen does."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.stdin is not None:
            self.stdin.close()
        open_ = [f for f in self.read if not f.closed]
        while open_:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = select.select(open_, [], [], left)[0]
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout)
            for f in ready:
                chunk = os.read(f.fileno(), 65536)
                if chunk:
                    self.read[f].append(chunk)
                else:
                    open_.remove(f)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        texts = {f: b"".join(chunks).decode().replace("\r\n", "\n").replace("\r", "\n")
                 for f, chunks in self.read.items()}  # Popen's text mode
        for f in self.read:
            f.close()
        return texts.get(self.stdout), texts.get(self.stderr)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc) -> None:
        for f in (self.stdout, self.stderr, self.stdin):
            if f is not None and not f.closed:
                f.close()
        self.wait()


# --- the server -------------------------------------------------------------------------
def serve(address: str) -> None:
    """Import ``WARM``, say whether this process can fork safely, then fork a child per
    request until stdin ends, each child's status sent on its connection when it ends."""
    for name in WARM:
        __import__(name)
    if len(os.listdir("/proc/self/task")) != 1:
        print("threaded", flush=True)
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C is the tests' and children's
    print("ready", flush=True)
    children: dict[int, socket.socket] = {}
    while True:
        ready = select.select([listener, sys.stdin, wake_r], [], [])[0]
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1):
            return
        if wake_r in ready:
            os.read(wake_r, 4096)
        if listener in ready:
            connection, _ = listener.accept()
            started = start_child(connection, [listener, wake_r, wake_w, *children.values()])
            connection.sendall(f"{started}\n".encode())
            if started.isdigit():
                children[int(started)] = connection
            else:
                connection.close()
        reap(children)


def reap(children: dict[int, socket.socket]) -> None:
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            with children.pop(pid) as connection:
                connection.sendall(f"{code}\n".encode())


def start_child(connection: socket.socket, servers: list) -> str:
    """Fork the child a request asks for, which keeps none of the server's files
    (``servers``) and whose streams the server keeps none of: its pid, or why it could not
    start."""
    head, fds, _, _ = socket.recv_fds(connection, 8, 3)
    size, body = int.from_bytes(head, "big"), b""
    while len(body) < size:
        body += connection.recv(size - len(body))
    request = json.loads(body)
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        for each in (connection, *servers):
            each.close() if isinstance(each, socket.socket) else os.close(each)
        child(request, fds, ready_w)
    os.close(ready_w)
    for fd in fds:
        os.close(fd)
    with open(ready_r, "rb") as ready:  # its end once it is set up, as Popen waits for exec
        failed = ready.read().decode()
    if failed:
        os.waitpid(pid, 0)
        return f"error {failed}"
    return str(pid)


def child(request: dict, fds: list[int], ready: int) -> None:
    """Become ``python -m posexp ARGV`` in the request's directory and environment, on its
    streams, saying on ``ready`` that it is set up (or why not); never return."""
    try:
        set_up(request, fds)
    except Exception as e:
        os.write(ready, f"{type(e).__name__}: {e}".encode())
        os._exit(1)
    os.close(ready)
    code = 0
    try:
        runpy.run_module("posexp", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = exit_code(e.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        end()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
        code = 1
    end()
    os._exit(code)


def set_up(request: dict, fds: list[int]) -> None:
    """What a fresh ``python -m posexp`` starts with: Python's signal handlers, the session,
    streams, directory, environment, argv and path the request gives."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in DEFAULT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    if request["new_session"]:
        os.setsid()
    os.chdir(request["cwd"])
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.stdin, sys.stdout, sys.stderr = (standard_stream(fd) for fd in range(3))
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    sys.argv = ["-m", *request["argv"]]
    sys.path[0] = os.getcwd()


def exit_code(code: object) -> int:
    """A SystemExit's code as the interpreter turns it into a status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def end() -> None:
    """What an interpreter does as it ends: its threads joined, its atexit functions run,
    its streams flushed."""
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe
            stream.flush()


def standard_stream(fd: int) -> io.TextIOWrapper:
    """sys.stdin, stdout or stderr on ``fd`` as Python makes them at start: stdout line
    buffered on a terminal, stderr always, with the server's encodings."""
    like = (sys.__stdin__, sys.__stdout__, sys.__stderr__)[fd]
    raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
    buffered = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
    return io.TextIOWrapper(buffered, encoding=like.encoding, errors=like.errors,
                            line_buffering=fd == 2 or (fd == 1 and raw.isatty()))


if __name__ == "__main__":
    serve(sys.argv[1])
