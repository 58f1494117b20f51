"""A run ends when the process a scheduler holds ends. The venv's spark-submit wrapper `exec`s Spark's, so the
PID a scheduler (cron, Airflow, Kubernetes) holds is the driver JVM's, and this Python driver is that JVM's
child. Two ways a stop reaches the driver:

- SIGTERM, SIGINT or SIGHUP to this process (a process group's kill, Ctrl-C): `stop_on_signals` turns them
  into RunStopped in the main thread, and the run ends as on any failure (temporary OUT removed, claim
  released, nothing published).
- the JVM's death (kill -9, or its exit after its own SIGTERM): `watch_parent` polls the parent process id
  and, once it changes, abandons the run and ends this process at once, so no process of the run is left
  and nothing is published. (Spark's Python workers end with the JVM: their daemon reads its stdin.)"""
import contextlib
import os
import signal
import sys
import threading
import time

from jobs.errors import RunStopped

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_ending = threading.Event()  # set while the run publishes or cleans up: a signal then waits for it


def stop_on_signals():
    """Stop signals raise RunStopped in the main thread (Python runs handlers there), except while the run
    is ending (`ending()`): a publish or a cleanup is not cut in half (a run that is publishing finishes)."""
    def handler(signum, frame):
        if not _ending.is_set():
            raise RunStopped(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, handler)


@contextlib.contextmanager
def ending():
    """The publish or cleanup of a run: stop signals do not interrupt it."""
    _ending.set()
    try:
        yield
    finally:
        _ending.clear()


def watch_parent(on_death, exit_code=1, interval=0.5):
    """A daemon thread: when the parent process (spark-submit's JVM) is gone, call `on_death` and end this
    process with `exit_code`; returns the thread. Only under spark-submit (the JVM is the parent there)."""
    parent = os.getppid()

    def watch():
        while True:
            time.sleep(interval)
            if os.getppid() != parent:
                try:  # first the cleanup: the output below goes into the dead JVM's pipe, and may fail
                    on_death()
                    print("mqreplay: spark-submit's JVM is gone: the run stopped, nothing was published",
                          file=sys.stderr, flush=True)
                finally:
                    os._exit(exit_code)

    thread = threading.Thread(target=watch, name="mqreplay-parent-watch", daemon=True)
    thread.start()
    return thread
