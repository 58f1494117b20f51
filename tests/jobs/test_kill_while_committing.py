"""A kill that lands once Spark's part is done (an Iceberg commit, OUT's summary and rename: `lifecycle.committing`)
lets the run finish: a stop signal waits for the publish, and the JVM's death (kill -9 of spark-submit) lets this
driver publish before it ends. So the lake is never committed under no OUT, and a scheduler's retry of the same
command finds OUT published (docs/scheduler.md)."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jobs.errors import RunStopped
from jobs.runtime import lifecycle

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def handlers(monkeypatch):
    """The job's stop handlers in this process for one test, with fresh state; pytest's own put back after."""
    saved = {s: signal.getsignal(s) for s in lifecycle.STOP_SIGNALS}
    for name in ("_stopped", "_published", "_committing", "_ending"):
        monkeypatch.setattr(lifecycle, name, type(getattr(lifecycle, name))())
    monkeypatch.setattr(lifecycle, "_signalled", [])
    lifecycle.stop_on_signals()
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def test_a_stop_signal_while_committing_waits_and_after_the_publish_changes_nothing(handlers):
    with lifecycle.committing():
        os.kill(os.getpid(), signal.SIGTERM)  # handled at once, in this (the main) thread: nothing raised
        lifecycle.published()
    os.kill(os.getpid(), signal.SIGINT)
    assert lifecycle.stop_signalled() is None


def test_a_stop_signal_before_the_commit_stops_the_run_once(handlers):
    with pytest.raises(RunStopped) as stopped:
        os.kill(os.getpid(), signal.SIGTERM)
    assert stopped.value.exit_code == 143
    os.kill(os.getpid(), signal.SIGTERM)  # a second one changes nothing: the run is already stopping
    assert lifecycle.stop_signalled().exit_code == 143


CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from jobs.runtime import lifecycle
    marks = {marks!r}
    lifecycle.watch_parent(lambda: open(marks + "/abandoned", "w").close(), exit_code=5, interval=0.1)
    with lifecycle.committing():
        open(marks + "/committing", "w").close()
        time.sleep(2)  # the parent is killed meanwhile
        open(marks + "/published", "w").close()
        lifecycle.published()
    time.sleep(30)  # the watcher ends the process first
""")


def test_the_parents_death_while_committing_lets_the_run_publish_first(tmp_path):
    child = CHILD.format(root=str(ROOT), marks=str(tmp_path))
    middle = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               f"p = subprocess.Popen([sys.executable, '-c', {child!r}]); "
                               "print(p.pid, flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    pid = int(middle.stdout.readline())
    deadline = time.time() + 30
    while not (tmp_path / "committing").exists() and time.time() < deadline:
        time.sleep(0.05)
    middle.kill()  # what kill -9 does to spark-submit's JVM, this driver's parent
    middle.wait()
    while os.path.exists(f"/proc/{pid}") and time.time() < deadline:
        if open(f"/proc/{pid}/stat").read().split()[2] == "Z":
            break
        time.sleep(0.05)
    assert (tmp_path / "published").exists() and not (tmp_path / "abandoned").exists()
