"""Progress of a replay on the driver, from its start: planning, then splits done of total, units and MiB/s,
elapsed and remaining.

Modes (`--progress`): `tty` redraws one line every second; `log` writes a line when the stage starts and
then every 30 s (a scheduler's log); `off` writes nothing; `auto` is tty on a terminal, else log. Under
spark-submit the Python driver's stderr is a pipe into the JVM's stdout, so the driver cannot see the
terminal: the venv's spark-submit wrapper passes the terminal of its own stderr in MQREPLAY_TTY, and tty
mode writes there. During the stage a daemon thread polls two accumulators the tasks add to when a split
is done (its units and its bytes); Spark's own console progress bar (kept off in conf/replay.json) shows
tasks only."""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import IO, TYPE_CHECKING, Iterator, Mapping, Optional

from jobs.runtime.session import is_connect

if TYPE_CHECKING:
    from pyspark import Accumulator
    from pyspark.sql import SparkSession

    Counters = tuple[Accumulator[int], Accumulator[int], Accumulator[int]]  # units, bytes, splits

MODES = ("auto", "tty", "log", "off")
TTY_ENV = "MQREPLAY_TTY"


def open_progress(mode: str = "auto", stream: Optional[IO[str]] = None,
                  env: Optional[Mapping[str, str]] = None) -> Progress:
    """The Progress of a `--progress` mode: tty mode writes to the wrapper's terminal when it named one."""
    env = os.environ if env is None else env
    stream = stream or sys.stderr
    terminal = _terminal(env.get(TTY_ENV))
    if mode == "auto":
        mode = "tty" if terminal is not None or _isatty(stream) else "log"
    if mode == "tty" and terminal is not None:
        stream = terminal
    return Progress(mode, stream)


def _terminal(path):
    """The wrapper's terminal, opened for writing; None when not given or not a terminal any more."""
    if not path:
        return None
    try:
        f = open(path, "w", encoding="utf-8", errors="replace")
    except OSError:
        return None
    if not f.isatty():
        f.close()
        return None
    return f


def _isatty(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """The progress of one run: a phase (planning, starting Spark...) until the stage runs, then the tasks'
    counts."""

    counters: Optional[Counters]
    _thread: Optional[threading.Thread]

    def __init__(self, mode: str = "log", stream: Optional[IO[str]] = None, every: Optional[float] = None) -> None:
        if mode not in ("tty", "log", "off"):
            raise ValueError(f"progress mode {mode!r}: tty, log or off")
        self.mode, self.stream = mode, stream or sys.stderr
        self.every = every or (1.0 if mode == "tty" else 30.0)
        self.phase = "starting"
        self.counters = None  # (units, bytes, splits) accumulators while the stage runs
        self.total_splits = self.total_bytes = 0
        self._started = time.time()
        self._stop = threading.Event()
        self._thread = None

    def start(self) -> Progress:
        """Show the phase from now on (tty: at once, and every second)."""
        if self.mode == "tty":
            self._thread = threading.Thread(target=self._run, name="mqreplay-progress", daemon=True)
            self._thread.start()
        return self

    def set_phase(self, text: str) -> None:
        self.phase = text

    @contextlib.contextmanager
    def stage(self, spark: SparkSession, total_splits: int, total_bytes: int) -> Iterator[Optional[Counters]]:
        """The Spark stage: yields the accumulators for the task closure (small and picklable); None over Spark
        Connect, which has none: there the line shows the phase and the time."""
        self.total_splits, self.total_bytes = total_splits, total_bytes
        if not is_connect(spark):
            sc = spark.sparkContext
            self.counters = sc.accumulator(0), sc.accumulator(0), sc.accumulator(0)
        self._stage_started = time.time()
        self.phase = "replaying"
        if self.mode == "log":
            self._write(self.line())
            self._thread = threading.Thread(target=self._run, name="mqreplay-progress", daemon=True)
            self._thread.start()
        try:
            yield self.counters
        finally:
            self.phase = "publishing"
            if self.mode == "log":
                self.stop()

    def stop(self) -> None:
        """Stop showing; a tty's line is cleared."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None
        if self.mode == "tty":
            self.stream.write("\r\033[K")
            self.stream.flush()

    def _run(self):
        """tty: a line at once, then every second; log: after the stage's first line, every 30 s."""
        if self.mode == "log" and self._stop.wait(self.every):
            return
        while True:
            self._write(self.line())
            if self._stop.wait(self.every):
                return

    def _write(self, line):
        try:
            if self.mode == "tty":
                self.stream.write("\r\033[K" + line)
            else:
                self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: stop showing, never stop the run
            self._stop.set()

    def line(self) -> str:
        elapsed = time.time() - self._started
        if self.phase != "replaying" or self.counters is None:
            return f"mqreplay: {self.phase}, elapsed {_clock(elapsed)}"
        units_acc, bytes_acc, splits_acc = self.counters
        # a retried task adds again: never show more than there is
        done, units = min(splits_acc.value, self.total_splits), units_acc.value
        nbytes = min(bytes_acc.value, self.total_bytes)
        running = time.time() - self._stage_started
        rate = nbytes / running if running else 0.0
        remaining = (self.total_bytes - nbytes) / rate if rate else None
        return (f"mqreplay: {done}/{self.total_splits} splits, {units:,} units, {nbytes / 2**20:,.0f} of "
                f"{self.total_bytes / 2**20:,.0f} MiB ({rate / 2**20:,.1f} MiB/s), elapsed {_clock(elapsed)}, "
                f"remaining {_clock(remaining) if remaining is not None else '?'}")


def _clock(seconds):
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
