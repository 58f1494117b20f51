"""The job's Python daemon forked from a process the driver preloaded while it planned (a zygote, as Android's
app processes are forked from one).

On a local master the JVM starts the daemon (jobs/runtime/worker_daemon.py) at the first Python task, once the
SparkContext is up, and its preload (imports and numba's kernels: 1.0-1.4 s alone, 1.7-1.9 s beside the JVM
building the session) then held the stage's first tasks: they started 0.7-1.0 s into the job. Under spark-submit
the driver starts this zygote as soon as it knows the master is local (`start`); it preloads beside the planning
and the SparkContext's start. The process the JVM then starts (the daemon module, run with MQREPLAY_ZYGOTE set:
`spawn`) hands the zygote its stdin, stdout and stderr and its environment, and the zygote forks the daemon with
them: the JVM talks to it through the pipes it made, as to the process it started; that process stays as the
daemon's stand-in, waiting for it to exit and passing it the JVM's SIGTERM.

Anything the stand-in cannot use (no zygote, one that failed to preload or died, a kernel without pidfds) leaves
it to preload and become the daemon itself, as before. The zygote lives as long as the driver (it exits when the
pipe the driver holds closes) and serves the same user only (a socket in a private folder, the peer's uid checked);
the daemons it forked live as long as the JVM that talks to them (PySpark's daemon exits when its stdin closes)."""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import traceback

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing into the daemon
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType
    from typing import TypeVar

    Prepared = TypeVar("Prepared")

ZYGOTE = "MQREPLAY_ZYGOTE"  # the zygote's socket, in the daemon's environment (spark.executorEnv.MQREPLAY_ZYGOTE)
# the daemon module run as the zygote: `python -m jobs.runtime.worker_daemon --zygote FD FD`
ZYGOTE_ARGUMENT = "--zygote"
FDS = (0, 1, 2)  # the stand-in's stdin, stdout and stderr: the JVM's pipes, which the daemon gets
HEADER = struct.Struct("!Q")
PREPARE_SECONDS = 120  # what the stand-in waits for a zygote still preloading before it preloads for itself


class Zygote:
    """The driver's handle: the socket the daemon's stand-in reaches the zygote at (`env`, for the executors'
    environment) and the zygote's process, which exits when `lifeline` (its pipe's end held here) closes."""

    lifeline: int | None  # None once closed (stop)

    def __init__(self, python: str) -> None:
        self.folder = tempfile.mkdtemp(prefix="mqreplay-zygote-")  # mode 0700: this user's only
        self.path = os.path.join(self.folder, "socket")
        theirs, self.lifeline = os.pipe()
        try:
            with listening(self.path) as listener:  # from now on a stand-in that asks waits for the zygote's answer
                self.process = subprocess.Popen(
                    [python, "-m", "jobs.runtime.worker_daemon", ZYGOTE_ARGUMENT, str(listener.fileno()), str(theirs)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, pass_fds=(listener.fileno(), theirs))
        except OSError:
            os.close(self.lifeline)
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        finally:
            os.close(theirs)

    @property
    def env(self) -> dict[str, str]:
        return {ZYGOTE: self.path}

    def stop(self) -> None:
        """Let the zygote exit (the daemons it forked run on) and remove its folder, as the zygote does on its way
        out unless it was killed."""
        if self.lifeline is not None:
            os.close(self.lifeline)
            self.lifeline = None
        shutil.rmtree(self.folder, ignore_errors=True)


_started: list[Zygote] = []  # the zygotes this driver started, held for its life (their lifelines close with it)


def start(python: str) -> Zygote | None:
    """A zygote of `python` (the workers' interpreter), preloading from now on; None if it cannot be started, or
    serve nothing (no pidfds: not Linux 5.3 or later)."""
    if not hasattr(os, "pidfd_open"):
        return None
    try:
        _started.append(Zygote(python))
    except OSError:
        return None
    return _started[-1]


def stop() -> None:
    """Let every zygote this driver started exit (at the end of its session)."""
    while _started:
        _started.pop().stop()


def listening(path: str) -> socket.socket:
    """A Unix socket listening at `path`; a stand-in that asks before the zygote answers waits in its backlog."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
        listener.listen(8)
    except OSError:
        listener.close()
        raise
    return listener


def serve(listener: socket.socket, lifeline: int, prepare: Callable[[], Prepared],
          become_daemon: Callable[[Prepared], object]) -> None:
    """The zygote: run `prepare()` (the daemon's preload; if it raises, exit and leave each stand-in to preload
    for itself), then fork a daemon per stand-in that asks at `listener` (a listening Unix socket), until
    `lifeline` closes; the socket's folder is removed on the way out. `become_daemon(what prepare returned)` runs
    in each forked child once it holds the stand-in's pipes and environment."""
    path = listener.getsockname()
    try:
        prepared = prepare()
        os.close(os.pidfd_open(os.getpid()))  # pidfds (Linux 5.3; the kernel's, not Python's): how a stand-in
        # follows its daemon
        while True:
            _reap()
            ready = select.select([listener, lifeline], [], [], 1.0)[0]  # type: ignore[type-var]  # socket | int
            if lifeline in ready and not os.read(lifeline, 1):
                return
            if listener in ready:
                conn, _ = listener.accept()
                with conn:
                    try:
                        _fork_daemon(conn, listener, lifeline, lambda: become_daemon(prepared))
                    except (OSError, ValueError, EOFError):  # that stand-in left, or did not ask as one does
                        continue
    finally:
        listener.close()
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def _reap():
    """Collect the daemons that have exited (their exit status is nobody's to read)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _fork_daemon(conn, listener, lifeline, become_daemon):
    if _peer(conn)[1] != os.getuid():
        return
    request, fds = _receive(conn)
    if len(fds) != len(FDS):
        for fd in fds:
            os.close(fd)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the daemon: the stand-in's pipes and environment, nothing of the zygote's
        code = 1
        try:
            listener.close()
            conn.close()
            os.close(lifeline)
            for target, fd in zip(FDS, fds):
                os.dup2(fd, target)
                os.close(fd)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.argv[:] = request["argv"]
            sys.path[:] = request["path"]
            signal.signal(signal.SIGINT, signal.default_int_handler)  # as in the process the JVM started
            become_daemon()
            code = 0
        except SystemExit as exc:  # PySpark's daemon ends so
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        except BaseException:  # noqa: BLE001 - to the JVM's log, as a daemon the JVM started would say it
            traceback.print_exc()
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    try:
        socket.send_fds(conn, [HEADER.pack(pid)], [pidfd])
    finally:
        os.close(pidfd)


def _peer(conn):
    """(pid, uid, gid) of the process at the other end of a Unix socket."""
    return struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))


def _receive(conn):
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, len(FDS))
    while len(data) < HEADER.size or len(data) < HEADER.size + HEADER.unpack_from(data)[0]:
        more = conn.recv(1 << 16)
        if not more:
            raise EOFError("the stand-in left before its request was whole")
        data += more
    return json.loads(data[HEADER.size:].decode("utf-8")), fds


def spawn(path: str) -> bool:
    """The stand-in's side: ask the zygote at `path` for a daemon with this process's pipes, environment,
    arguments, path and folder; wait until it exits, passing it SIGTERM, SIGINT and SIGHUP. Whether a daemon was
    forked (and has run); False: nothing was forked, this process is to become the daemon itself."""
    request = json.dumps({"env": dict(os.environ), "argv": sys.argv, "path": sys.path,
                          "cwd": os.getcwd()}).encode("utf-8")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            zygote_pid, uid, _ = _peer(conn)
            if uid != os.getuid():
                return False
            message = HEADER.pack(len(request)) + request
            conn.sendall(message[socket.send_fds(conn, [message], list(FDS)):])
            conn.settimeout(PREPARE_SECONDS)
            try:
                reply, fds, _, _ = socket.recv_fds(conn, HEADER.size, 1)
            except socket.timeout:  # a zygote stuck in its preload: it must not fork a second daemon later
                os.kill(zygote_pid, signal.SIGKILL)
                return False
    except OSError:
        return False
    if len(reply) != HEADER.size or len(fds) != 1:  # the zygote exited (its preload failed) before forking
        for fd in fds:
            os.close(fd)
        return False
    _follow(fds[0])
    return True


def _follow(pidfd):
    """Wait for the daemon to exit, passing it the signals the JVM stops its daemon with."""
    def forward(signum: int, _frame: FrameType | None) -> None:
        try:
            signal.pidfd_send_signal(pidfd, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    while not poller.poll():  # an interrupted poll (a signal passed on) is retried
        pass
