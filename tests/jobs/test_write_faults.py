"""Faults of the write path through spark-submit: a worker that dies mid-task (Spark retries it) leaves the
output of a clean run; a dead run's leftovers are named."""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.spark, pytest.mark.system]


def _submit(master, py_files, *args, conf=(), marks=None):
    submit = Path(sys.executable).parent / "spark-submit"
    extra = [x for c in conf for x in ("--conf", c)]
    cmd = [str(submit), "--master", master, *extra, "--py-files", str(py_files), str(ROOT / "jobs" / "replay.py"),
           *map(str, args)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable, "FAULT_MARKS": str(marks or "")})
    proc.console = proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def filters(tmp_path_factory):
    path = tmp_path_factory.mktemp("zip") / "filters.zip"
    with zipfile.ZipFile(path, "w") as z:
        for name in ("tests/__init__.py", "tests/jobs/__init__.py", "tests/jobs/fault_filters.py"):
            z.write(ROOT / name, name)
    return path


def _run(store_a, out, filters, function, master="local[2]", conf=(), marks=None):
    proc = _submit(master, filters, "--store", store_a / "store", "--out", out, "--groups", "G_KEEP,G_TAG_A",
                   "--subscriptions", store_a / "registrations.json",
                   "--subscription", "G_KEEP", "TopicTest", "PYTHON", f"tests.jobs.fault_filters:{function}",
                   conf=conf, marks=marks)
    assert proc.returncode == 0, proc.console[-3000:]
    return proc


def _files(out):
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def clean(store_a, filters, tmp_path_factory):
    out = tmp_path_factory.mktemp("clean") / "out"
    _run(store_a, out, filters, "keep_all")
    return out


def _assert_same_output(got, want):
    assert _files(got) == _files(want)
    for name in _files(want):
        if name.endswith(".parquet"):
            assert pq.read_table(got / name).equals(pq.read_table(want / name)), name
    rows = ds.dataset(got / "matched").to_table().to_pylist()
    keys = [(r["group"], r["topic"], r["queue_id"], r["queue_offset"]) for r in rows]
    assert len(keys) == len(set(keys)) > 0


def test_a_worker_killed_mid_task_leaves_the_output_of_a_clean_run(store_a, filters, clean, tmp_path):
    out, marks = tmp_path / "out", tmp_path / "marks"
    marks.mkdir()
    _run(store_a, out, filters, "crash_once", master="local[2,4]", marks=marks)  # 4 attempts per task
    assert sorted(p.name for p in marks.iterdir()) == ["crashed", "retried"]
    _assert_same_output(out, clean)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["marks", "out"]


def test_leftover_of_a_dead_run_is_named_and_the_next_run_succeeds(store_a, filters, clean, tmp_path):
    (tmp_path / "out.tmp-dead0001" / "_attempts").mkdir(parents=True)
    (tmp_path / "out.tmp-dead0001" / "_MQREPLAY_RUN").write_text('{"run": "dead0001"}')  # the marker a run leaves
    proc = _run(store_a, tmp_path / "out", filters, "keep_all")
    assert "out.tmp-dead0001" in proc.console and "--clean-stale" in proc.console
    _assert_same_output(tmp_path / "out", clean)
