"""Every exit code of jobs/replay.py, and the README's promises that only a real spark-submit run shows:
--overwrite, --no-body, PYTHON filters shipped with --py-files, partition names of %RETRY% topics."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.jobs.conftest import writable_copy

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.spark, pytest.mark.system]


def _submit(*args, py_files=None):
    submit = Path(sys.executable).parent / "spark-submit"
    extra = ["--py-files", str(py_files)] if py_files else []
    cmd = [str(submit), "--master", "local[2]", *extra, str(ROOT / "jobs" / "replay.py"), *map(str, args)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    proc.console = proc.stdout + proc.stderr  # the Python driver's stderr reaches spark-submit's stdout
    return proc


def _zip_tests(tmp_path):
    import zipfile

    path = tmp_path / "filters.zip"
    with zipfile.ZipFile(path, "w") as z:
        for name in ("tests/__init__.py", "tests/jobs/__init__.py", "tests/jobs/custom_filters.py",
                     "tests/jobs/crash_filters.py"):
            z.write(ROOT / name, name)
    return path


def test_exit_1_damage_found_in_a_task_is_one_line_without_stack_traces(store_a, tmp_path):
    store = writable_copy(store_a, tmp_path)
    with open(store / "commitlog" / "00000000000002097152", "r+b") as f:
        f.seek(2278843 - 2097152 + 4)  # the magic code of a TopicTest record (messages.jsonl.gz)
        f.write(b"\0\0\0\0")
    proc = _submit("--store", store, "--out", tmp_path / "out", "--subscriptions", store_a / "registrations.json")
    assert proc.returncode == 1
    errors = [line for line in proc.console.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {store}/commitlog/00000000000002097152 at offset 2278843: "
                      "unit points at no record (bad magic code)"]
    # no Python or Java stack of the failure (PySpark's daemon may still print a BrokenPipe of a killed worker)
    assert "CorruptStoreError" not in proc.console and "\tat " not in proc.console
    assert not (tmp_path / "out").exists()


def test_exit_2_existing_out_typo_and_unknown_type_before_spark_runs(store_a, tmp_path):
    (tmp_path / "exists").mkdir()
    for args, word in (
            (["--out", tmp_path / "exists", "--subscriptions", store_a / "registrations.json"], "exists"),
            (["--out", tmp_path / "o1", "--subscription", "GT", "TopicTset", "TAG", "TagA"], "TopicTset"),
            (["--out", tmp_path / "o2", "--subscription", "GT", "TopicTest", "SQL", "a > 1"], "'SQL'")):
        proc = _submit("--store", store_a / "store", *args)
        assert proc.returncode == 2 and word in proc.console, proc.console[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists"]


def test_exit_3_a_subscription_that_does_not_parse(store_a, tmp_path):
    proc = _submit("--store", store_a / "store", "--out", tmp_path / "out", "--groups", "G_BAD,G_TAG_A",
                   "--subscriptions", store_a / "registrations.json",
                   "--subscription", "G_BAD", "TopicTest", "SQL92", "a >>> 1")
    assert proc.returncode == 3, proc.console[-2000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert summary["failed_subscriptions"] == ["G_BAD/TopicTest"]


def test_exit_4_skipped_damage_is_named_on_the_console(store_a, tmp_path):
    store = writable_copy(store_a, tmp_path)
    with open(store / "consumequeue" / "TopicTest" / "0" / "00000000000000000000", "r+b") as f:
        f.truncate(3001)
    proc = _submit("--store", store, "--out", tmp_path / "out", "--subscriptions", store_a / "registrations.json",
                   "--on-corrupt", "skip")
    assert proc.returncode == 4, proc.console[-2000:]
    assert "damaged data skipped" in proc.console and f"{tmp_path / 'out'}/audit/corrupt/" in proc.console
    audit = ds.dataset(tmp_path / "out" / "audit" / "corrupt").to_table().to_pylist()
    assert [r["file"].endswith("consumequeue/TopicTest/0/00000000000000000000") for r in audit] == [True]


def test_exit_5_a_crashed_python_worker(store_a, tmp_path):
    proc = _submit("--store", store_a / "store", "--out", tmp_path / "out", "--groups", "G_CRASH",
                   "--subscription", "G_CRASH", "TopicTest", "PYTHON", "tests.jobs.crash_filters:crash",
                   py_files=_zip_tests(tmp_path))
    assert proc.returncode == 5, proc.console[-2000:]
    errors = [line for line in proc.console.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "crashed" in errors[0]
    assert not (tmp_path / "out").exists()


def test_readme_promises_overwrite_no_body_py_files_and_retry_partitions(store_a, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("{}")  # an earlier run's OUT: what --overwrite replaces
    (out / "old-file").write_text("from an earlier run")
    proc = _submit("--store", store_a / "store", "--out", out, "--overwrite", "--no-body",
                   "--groups", "G_PY,G_TAG_A",
                   "--subscriptions", store_a / "registrations.json",
                   "--subscription", "G_PY", "订单Topic", "PYTHON", "tests.jobs.custom_filters:region_is_hangzhou",
                   py_files=_zip_tests(tmp_path))
    assert proc.returncode == 0, proc.console[-2000:]
    assert not (out / "old-file").exists()  # replaced whole
    matched = ds.dataset(out / "matched", format="parquet", partitioning="hive").to_table()
    messages = ds.dataset(out / "messages", format="parquet", partitioning="hive").to_table()
    assert "body" not in messages.column_names and "properties" in messages.column_names
    hangzhou = sum(1 for line in _messages(store_a) if line["topic"] == "订单Topic"
                   and line["properties"].get("region") == "杭州")
    groups = matched.column("group").to_pylist()
    assert groups.count("G_PY") == hangzhou > 0
    # %RETRY% is escaped in partition names as Hive escapes them (% -> %25), and reads back unescaped
    assert (out / "messages" / "topic=%25RETRY%25G_TAG_A").is_dir()
    assert "%RETRY%G_TAG_A" in set(matched.column("topic").to_pylist())
    assert "%RETRY%G_TAG_A" in set(messages.column("topic").to_pylist())


def _messages(store_a):
    import gzip

    with gzip.open(store_a / "messages.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_a_window_run_says_its_window_and_writes_offsets_json_with_the_noop_sink(store_a, tmp_path):
    out = tmp_path / "out"
    proc = _submit("--store", store_a / "store", "--subscriptions", store_a / "registrations.json", "--out", out,
                   "--sink", "noop", "--since", "2026-11-21T12:57:15.000+08:00", "--until", "1795237035400")
    assert proc.returncode == 0, proc.console[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["window"]["since"], summary["window"]["until"]) == (1795237035000, 1795237035400)
    assert "window: since 1795237035000, until 1795237035400" in proc.console
    ends = json.loads((out / "offsets.json").read_text())
    assert set(ends["TopicTest"]) == {"0", "1", "2", "3"}
    assert summary["window"]["offsets"]["TopicTest"]["0"][1] == ends["TopicTest"]["0"]
