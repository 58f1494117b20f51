"""Runs a scheduler can trust, through the real spark-submit wrapper: one run per OUT, a kill of the PID the
scheduler holds stops everything and publishes nothing, --overwrite replaces only an earlier run's OUT,
an empty answer is still a set of tables, and a terminal sees progress from the start."""
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.errors import UsageError
from jobs.output import claim
from jobs.output.publish import OutputRun
from tests.jobs.test_exit_codes import ROOT, _submit

pytestmark = [pytest.mark.spark, pytest.mark.system]
SUBMIT = Path(sys.executable).parent / "spark-submit"


def _slow_filters(tmp_path):
    """--py-files zip of tests.jobs.slow_filters: a run that is still in its stage seconds after it starts."""
    path = tmp_path / "slow.zip"
    with zipfile.ZipFile(path, "w") as z:
        for name in ("tests/__init__.py", "tests/jobs/__init__.py", "tests/jobs/slow_filters.py"):
            z.write(ROOT / name, name)
    return path


def _start_slow_run(store_a, tmp_path, out, **popen):
    """A spark-submit run of the slow filter in a session of its own (so the test can see all its processes)."""
    cmd = [str(SUBMIT), "--master", "local[2]", "--py-files", str(_slow_filters(tmp_path)),
           str(ROOT / "jobs" / "replay.py"), "--store", str(store_a / "store"), "--out", str(out),
           "--subscription", "G_SLOW", "TopicTest", "PYTHON", "tests.jobs.slow_filters:slow_keep_all"]
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.STDOUT)
    return subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, env={**os.environ, "PYSPARK_PYTHON": sys.executable},
                            **popen)


def _wait_for(predicate, timeout=120.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def _session_processes(sid):
    """Live process ids of a session (the run's JVM, its Python driver and workers; not zombies, which the
    test reaps)."""
    found = subprocess.run(["ps", "-o", "pid=,stat=", "--sid", str(sid)], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in found.splitlines() if line.split() and "Z" not in line.split()[1]]


def _temporaries(out):
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(out.name + ".tmp-"))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_kill_of_the_submit_pid_stops_every_process_and_publishes_nothing(store_a, tmp_path, sig):
    out = tmp_path / "out"
    run = _start_slow_run(store_a, tmp_path, out, stdout=subprocess.DEVNULL)
    try:  # the stage runs once the temporary OUT has its first attempt's parts
        assert _wait_for(lambda: any((tmp_path / t / "_attempts").exists() for t in _temporaries(out)))
        os.kill(run.pid, sig)  # the PID a scheduler holds: the wrapper's, which is the JVM's after exec
        assert _wait_for(lambda: not _session_processes(run.pid), timeout=30), _session_processes(run.pid)
    finally:
        if _session_processes(run.pid):
            os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    assert not out.exists() and _temporaries(out) == []
    claim.acquire(out).release()  # nothing holds OUT: a scheduler's retry may start at once


def test_a_second_run_on_the_same_out_refuses_at_once_and_names_the_holder(store_a, tmp_path):
    out = tmp_path / "out"
    first = _start_slow_run(store_a, tmp_path, out)
    try:
        assert _wait_for(lambda: _temporaries(out) != [])
        holder = json.loads((tmp_path / "out.claim").read_text())
        started = time.time()
        second = _submit("--store", store_a / "store", "--out", out, "--groups", "G_TAG_A",
                         "--subscriptions", store_a / "registrations.json")
        assert second.returncode == 2, second.console[-2000:]
        assert f"is claimed by run {holder['run']}" in second.console and f"process {holder['pid']}" in second.console
        assert time.time() - started < 30 and first.poll() is None  # refused before Spark, the first still runs
        assert first.wait(timeout=300) == 0
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    summary = json.loads((out / "summary.json").read_text())
    assert [r["group"] for r in summary["subscriptions"]][:1] == ["G_SLOW"]  # OUT is the first run's, whole
    assert json.loads((out / "_SUCCESS").read_text())["run"] == holder["run"]


def test_publishing_keeps_an_out_that_appeared_unclaimed_and_says_where_the_run_wrote(tmp_path):
    out = tmp_path / "out"
    run = OutputRun(str(out))
    (tmp_path / f"out.tmp-{run.claim.run}" / "matched").mkdir(parents=True)
    out.mkdir()
    (out / "theirs").write_text("made by hand while the run ran")
    with pytest.raises(UsageError, match=f"this run's output is at .*out.tmp-{run.claim.run}"):
        run.publish()
    assert (out / "theirs").read_text() == "made by hand while the run ran"
    assert (tmp_path / f"out.tmp-{run.claim.run}" / "matched").is_dir()
    claim.acquire(out).release()


def test_overwrite_refuses_a_file_or_a_foreign_directory_before_spark_starts(store_a, tmp_path):
    (tmp_path / "a-file").write_text("not an output")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("someone's files")
    for out, word in ((tmp_path / "a-file", "is a file"), (tmp_path / "home", "not a job's output")):
        started = time.time()
        proc = _submit("--store", store_a / "store", "--out", out, "--overwrite", "--groups", "G_TAG_A",
                       "--subscriptions", store_a / "registrations.json")
        assert proc.returncode == 2 and word in proc.console, proc.console[-2000:]
        assert proc.console.count(f"error: --out {out}") == 1
        assert time.time() - started < 30
    assert (tmp_path / "a-file").read_text() == "not an output"
    assert (tmp_path / "home" / "notes.txt").read_text() == "someone's files"


@pytest.mark.parametrize("layout, tables", [
    ("normalized", {"matched": ["group", "topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id", "uniq_key",
                                "tags", "keys", "born_timestamp", "store_timestamp", "broker"],
                    "audit/collisions": ["group", "topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id",
                                         "uniq_key", "tags", "keys", "born_timestamp", "store_timestamp", "broker"],
                    "messages": ["queue_id", "queue_offset", "commitlog_offset", "msg_id", "uniq_key", "tags", "keys",
                                 "born_timestamp", "store_timestamp", "born_host", "store_host", "reconsume_times",
                                 "sys_flag", "properties", "body", "source_topic", "source_queue_id",
                                 "source_queue_offset", "broker", "topic"]}),
    ("wide", {"matched": ["group", "topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id", "uniq_key",
                          "tags", "keys",
                          "born_timestamp", "store_timestamp", "born_host", "store_host", "reconsume_times",
                          "sys_flag", "properties", "body", "source_topic", "source_queue_id", "source_queue_offset",
                          "broker"]}),
])
def test_an_empty_window_still_writes_every_answer_table_with_its_columns(store_a, tmp_path, spark, layout, tables):
    out = tmp_path / "out"
    proc = _submit("--store", store_a / "store", "--out", out, "--subscriptions", store_a / "registrations.json",
                   "--since", "1795237035000", "--until", "1795237035000", "--layout", layout)
    assert proc.returncode == 0, proc.console[-2000:]
    for name, columns in tables.items():
        frame = spark.read.parquet(str(out / name))  # a nightly pipeline's read: no PATH_NOT_FOUND
        assert frame.columns == columns and frame.count() == 0
    summary = json.loads((out / "summary.json").read_text())
    assert {name: summary["outputs"][name]["rows"] for name in tables} == {name: 0 for name in tables}
    assert pq.read_table(out / "matched" / "part-empty.parquet").num_rows == 0


def test_a_terminal_sees_a_progress_line_redrawn_from_the_start(store_a, tmp_path):
    master, slave = pty.openpty()
    run = _start_slow_run(store_a, tmp_path, tmp_path / "out", stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    seen, started = b"", time.time()
    try:
        while time.time() - started < 60 and seen.count(b"\r\x1b[Kmqreplay: ") < 3:
            if select.select([master], [], [], 1.0)[0]:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
    finally:
        os.killpg(run.pid, signal.SIGTERM)
        run.wait(timeout=60)
        os.close(master)
    redrawn = seen.split(b"\r\x1b[K")
    assert seen.count(b"\r\x1b[Kmqreplay: ") >= 3, seen[-2000:]
    # drawn before the stage starts (planning, Spark starting), every second: not one line per 30 s
    assert any(part.startswith(b"mqreplay: ") and b" splits, " not in part for part in redrawn), seen[-2000:]
    assert time.time() - started < 30
