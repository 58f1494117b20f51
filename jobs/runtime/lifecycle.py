"""A run ends when the process a scheduler holds ends. The venv's spark-submit wrapper `exec`s Spark's, so the
PID a scheduler (cron, Airflow, Kubernetes) holds is the driver JVM's, and this Python driver is that JVM's
child. Two ways a stop reaches the driver:

- SIGTERM, SIGINT or SIGHUP to this process (a process group's kill, Ctrl-C): `stop_on_signals` turns them
  into RunStopped in the main thread, and the run ends as on any failure (temporary OUT removed, claim
  released, nothing published), exit 128 + N. The same signals to the JVM, once Spark has started, are
  forwarded here (`forward_jvm_signals`: the JVM's handler, through py4j's callback server) instead of
  shutting Spark down under this driver mid-call (a py4j "Connection refused", logged as exit 1): the run
  stops the same way, one line on the console, and its exit code (128 + N) is the JVM's and the log's. A
  second signal to the JVM gets the JVM's own handler (it ends at once).
- the JVM's death (kill -9, or its exit after its own SIGTERM): `watch_parent` polls the parent process id
  and, once it changes, abandons the run and ends this process at once, so no process of the run is left
  and nothing is published. (Spark's Python workers end with the JVM: their daemon reads its stdin.)"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, cast

from jobs.errors import RunStopped

if TYPE_CHECKING:
    from types import FrameType

    from pyspark.sql import SparkSession

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_ending = threading.Event()  # set while the run publishes or cleans up: a signal then waits for it
_stopped = threading.Event()  # a stop was raised, or the run published: later signals change nothing
_published = threading.Event()  # OUT is published: the run has finished
_committing = threading.Event()  # set from the stage's end until OUT is published: the run is finishing
_signalled: list[int] = []  # the stop signal raised (py4j turns a RunStopped raised inside its call into its own error)


def stop_on_signals() -> dict[int, Any]:
    """Stop signals raise RunStopped in the main thread (Python runs handlers there), once, except while the run
    is ending (`ending()`): a publish or a cleanup is not cut in half (a run that is publishing finishes), and
    never after it published (`published()`). Called again once Spark has started: PySpark's SparkContext
    replaces the SIGINT handler with its own (a KeyboardInterrupt). Only in the process's main thread (Python
    sets handlers there alone): a run that a kernel's other thread called is stopped by its caller, and the
    handlers it found are returned ({} when none were set), for `restore_signals`."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum: int, frame: Optional[FrameType]) -> None:
        if not (_ending.is_set() or _committing.is_set() or _stopped.is_set()):
            _stopped.set()
            _signalled.append(signum)
            raise RunStopped(signum)

    return {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}


def begin() -> None:
    """A new run in this process (a notebook runs several): no stop received, nothing published yet."""
    for state in (_stopped, _published, _committing, _ending):
        state.clear()
    _signalled.clear()


def restore_signals(previous: Optional[Mapping[int, Any]]) -> None:
    """Put back the handlers stop_on_signals replaced (a notebook's kernel keeps its own interrupt)."""
    for signum, handler in (previous or {}).items():
        signal.signal(signum, handler)


def stop_signalled() -> Optional[RunStopped]:
    """RunStopped of the stop signal the run received, or None: the error a run ends with whatever a library
    made of the one raised inside it (py4j: "Error while receiving", then "Connection refused")."""
    return RunStopped(_signalled[0]) if _signalled else None


def published() -> None:
    """The run published OUT: a stop signal from now on changes nothing (the run has finished)."""
    _published.set()
    _stopped.set()


class _Forward:
    """A JVM signal handler (sun.misc.SignalHandler) implemented here: the first signal is sent to this
    process, whose handler stops the run; a second gets the JVM's own handler (`previous`)."""

    class Java:
        implements = ["sun.misc.SignalHandler"]

    previous: Any  # the JVM's handler this one replaced (None: none)

    def __init__(self) -> None:
        self.previous, self.seen = None, 0

    def handle(self, sig: Any) -> None:
        self.seen += 1
        if self.seen > 1 and self.previous is not None:
            self.previous.handle(sig)
            return
        os.kill(os.getpid(), int(sig.getNumber()))


def forward_jvm_signals(spark: SparkSession) -> dict[int, Any]:
    """The JVM's TERM, INT and HUP forwarded to this driver (a classic session's JVM: spark-submit's, or the one
    this process started), so that the run stops as on a signal of its own. Returns {signal: the JVM's handler it
    replaced} (a signal the JVM may not handle is left as is), for `restore_jvm_signals`."""
    from py4j.protocol import Py4JError
    from pyspark.java_gateway import ensure_callback_server_started

    context = spark.sparkContext
    ensure_callback_server_started(context._gateway)
    jvm_signal = cast(Any, context._jvm).sun.misc.Signal  # a live context's JVM
    forwarded: dict[int, Any] = {}
    for signum in STOP_SIGNALS:
        handler = _Forward()
        try:
            handler.previous = jvm_signal.handle(jvm_signal(signal.Signals(signum).name[3:]), handler)
        except Py4JError:  # the JVM does not let this signal be handled (-Xrs, or ignored under nohup)
            continue
        forwarded[signum] = handler.previous
    return forwarded


def restore_jvm_signals(spark: SparkSession, forwarded: Mapping[int, Any]) -> None:
    """Give the JVM back the handlers forward_jvm_signals replaced (a JVM that outlives the run: a kernel's)."""
    from py4j.protocol import Py4JError

    try:
        jvm_signal = cast(Any, spark.sparkContext._jvm).sun.misc.Signal  # None once stopped: AttributeError below
        for signum, previous in forwarded.items():
            if previous is not None:
                jvm_signal.handle(jvm_signal(signal.Signals(signum).name[3:]), previous)
    except (Py4JError, AttributeError):  # the JVM is gone, or the session stopped: nothing is left to restore
        return


@contextlib.contextmanager
def ending() -> Iterator[None]:
    """The publish or cleanup of a run: stop signals do not interrupt it."""
    _ending.set()
    try:
        yield
    finally:
        _ending.clear()


@contextlib.contextmanager
def committing() -> Iterator[None]:
    """From the stage's end to OUT's publish (an Iceberg commit, summary.json, the rename): the run needs Spark no
    more and finishes whatever stops it: a stop signal waits, and the JVM's death (kill -9) lets it publish
    before this process ends. So a kill that lands there leaves the lake committed and OUT published, never
    a lake committed under no OUT, and the scheduler's retry of the same command has nothing to do."""
    _committing.set()
    try:
        yield
    finally:
        _committing.clear()


def watch_parent(on_death: Callable[[], object], exit_code: int = 1, interval: float = 0.5) -> threading.Thread:
    """A daemon thread: when the parent process (spark-submit's JVM) is gone, call `on_death` and end this
    process with `exit_code` (once a run that is committing has published: `committing`); returns the thread.
    Only under spark-submit (the JVM is the parent there)."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(interval)
            if os.getppid() != parent:
                while _committing.is_set():
                    time.sleep(interval / 5)
                done = _published.is_set()
                try:  # first the cleanup: the output below goes into the dead JVM's pipe, and may fail
                    if not done:
                        on_death()
                    print("mqreplay: spark-submit's JVM is gone, " + ("after the run published OUT" if done else
                          "the run stopped, nothing was published"), file=sys.stderr, flush=True)
                finally:
                    os._exit(0 if done else exit_code)

    thread = threading.Thread(target=watch, name="mqreplay-parent-watch", daemon=True)
    thread.start()
    return thread
