"""Progress of a long replay on the driver: splits done of total, messages and MB/s, elapsed and remaining.

A daemon thread polls Spark's status tracker (task counts of the running stages) and reads two
accumulators the tasks add to when a split is done (its units and its bytes). On a terminal it redraws
one line on stderr; otherwise (a scheduler's log) it writes a line every `every` seconds. Polling costs
the driver a few RPC-free calls per second; Spark's own console progress bar (kept off in
conf/replay.json) shows tasks only, not messages or bytes."""
import sys
import threading
import time


class Progress:
    """Counts the tasks add to (`done(units, nbytes)` runs on executors), and the thread that shows them."""

    def __init__(self, spark, total_splits, total_bytes, stream=None, every=None):
        sc = spark.sparkContext
        self.units, self.bytes, self.splits = sc.accumulator(0), sc.accumulator(0), sc.accumulator(0)
        self.total_splits, self.total_bytes = total_splits, total_bytes
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = every or (1.0 if self.tty else 30.0)
        self._stop = threading.Event()
        self._thread = None
        self._started = None

    def task_counters(self):
        """The accumulators, for the task closure (small and picklable)."""
        return self.units, self.bytes, self.splits

    def __enter__(self):
        self._started = time.time()
        self._thread = threading.Thread(target=self._run, name="mqreplay-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        if self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()

    def _run(self):
        while not self._stop.wait(self.every):
            self.stream.write(("\r\033[K" if self.tty else "") + self.line() + ("" if self.tty else "\n"))
            self.stream.flush()

    def line(self):
        elapsed = time.time() - self._started
        # a retried task adds again: never show more than there is
        done, units = min(self.splits.value, self.total_splits), self.units.value
        nbytes = min(self.bytes.value, self.total_bytes)
        rate = nbytes / elapsed if elapsed else 0.0
        remaining = (self.total_bytes - nbytes) / rate if rate else None
        return (f"mqreplay: {done}/{self.total_splits} splits, {units:,} units, {nbytes / 2**20:,.0f} of "
                f"{self.total_bytes / 2**20:,.0f} MiB ({rate / 2**20:,.1f} MiB/s), elapsed {_clock(elapsed)}, "
                f"remaining {_clock(remaining) if remaining is not None else '?'}")


def _clock(seconds):
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
