"""The spark-submit entry point end to end on store_a: outputs against RocketMQ's rows, summary, reruns."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.jobs.conftest import assert_rows_equal

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.spark


def _submit(*args, env=None):
    """Run `.venv/bin/spark-submit jobs/replay.py ...` as a user would (the venv-bound wrapper)."""
    submit = Path(sys.executable).parent / "spark-submit"
    cmd = [str(submit), "--master", "local[2]", str(ROOT / "jobs" / "replay.py"), *map(str, args)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})})


def _parquet_rows(path):
    return ds.dataset(path, format="parquet", partitioning="hive").to_table().to_pylist()


@pytest.fixture(scope="module")
def job_out(store_a, tmp_path_factory):
    out = tmp_path_factory.mktemp("replay") / "out"
    lineage = tmp_path_factory.mktemp("lineage")
    (lineage / "openlineage.yml").write_text(f"transport:\n  type: file\n  log_file_path: {lineage}/events.jsonl\n"
                                             "  append: true\n", encoding="utf-8")
    proc = _submit("--store", store_a / "store", "--out", out, "--subscriptions", store_a / "registrations.json",
                   env={"OPENLINEAGE_CONFIG": str(lineage / "openlineage.yml"), "MQREPLAY_DAEMON_LOG": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc.lineage = lineage / "events.jsonl"
    return out, proc


def test_openlineage_start_and_complete_of_the_run_name_the_store_and_its_outputs(job_out, store_a):
    out, proc = job_out
    start, complete = [json.loads(line) for line in proc.lineage.read_text(encoding="utf-8").splitlines()]
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    assert start["run"]["runId"] == complete["run"]["runId"]
    assert [i["name"] for i in complete["inputs"]] == [str(store_a / "store")]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    rows = {o["name"]: o["outputFacets"]["outputStatistics"]["rowCount"] for o in complete["outputs"]}
    assert rows[f"{out}/matched"] == summary["totals"]["client_delivered"]


def test_matched_output_equals_expected_json(job_out, store_a_expected):
    out, _ = job_out
    assert_rows_equal(_parquet_rows(out / "matched"), store_a_expected[0])


def test_collision_audit_equals_broker_raw_minus_expected(job_out, store_a_expected):
    out, _ = job_out
    assert_rows_equal(_parquet_rows(out / "audit" / "collisions"), store_a_expected[1])


def test_summary_is_written_and_printed(job_out, store_a_expected):
    out, proc = job_out
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    delivered = {(r["group"], r["topic"]): r["client_delivered"] for r in summary["subscriptions"]}
    want = {}
    for g, t, _, _ in store_a_expected[0]:
        want[(g, t)] = want.get((g, t), 0) + 1
    assert {k: v for k, v in delivered.items() if v} == want
    assert "G_TAG_Aa_collide" in proc.stdout and str(out) in proc.stdout
    assert not summary["failed_subscriptions"]


def test_the_report_is_published_with_out_and_named_last(job_out, store_a_expected):
    out, proc = job_out
    page = (out / "report.html").read_text(encoding="utf-8")
    data = json.loads(page.split('id="report-data">', 1)[1].split("</script>", 1)[0])
    want = {}
    for g, t, _, _ in store_a_expected[0]:
        want[(g, t)] = want.get((g, t), 0) + 1
    got = {(s["group"], s["topic"]): sum(n for _, n in s["timeline"]) for s in data["subscriptions"]}
    assert {k: v for k, v in got.items() if v} == want
    assert "report.html" in json.loads((out / "_SUCCESS").read_text(encoding="utf-8"))["files"]
    assert proc.stdout.rstrip().splitlines()[-1] == f"report: {out}/report.html"


def test_no_temporary_output_is_left_beside_out(job_out):
    out, _ = job_out
    assert [p.name for p in out.parent.iterdir()] == ["out"]


def test_clean_run_writes_no_empty_corrupt_audit_and_no_log_lines_after_the_table(job_out):
    out, proc = job_out
    assert not (out / "audit" / "corrupt").exists()
    after = proc.stdout[proc.stdout.index("group "):]
    assert "INFO" not in after and "py4j" not in after


@pytest.mark.system
def test_existing_out_is_refused_without_overwrite(job_out, store_a):
    out, _ = job_out
    proc = _submit("--store", store_a / "store", "--out", out)
    assert proc.returncode == 2 and "exists" in proc.stdout + proc.stderr  # a usage error


def test_bad_arguments_exit_2():
    from jobs.replay import main

    assert main(["--store", "x"]) == 2


def test_missing_store_exits_2(tmp_path):
    from jobs.replay import main

    assert main(["--store", str(tmp_path / "nope"), "--out", str(tmp_path / "out")]) == 2  # the caller's path


@pytest.mark.system
def test_results_on_stdout_diagnostics_on_stderr_under_spark_submit(job_out):
    out, proc = job_out
    assert proc.stdout.startswith("group ")  # the table first: what a pipe takes
    assert not [line for line in proc.stdout.splitlines() if line.startswith(("log:", "mqreplay:", "WARN"))
                or " WARN " in line]
    assert "log: " in proc.stderr and "group " not in proc.stderr


def test_the_workers_fork_from_the_daemon_with_the_jobs_imports_done_forked_from_the_drivers_zygote(job_out):
    _, proc = job_out
    assert re.search(r"mqreplay worker daemon: \d+ modules, \d+ kernels loaded, forked from the driver's zygote",
                     proc.stderr), proc.stderr[-3000:]


@pytest.mark.system
def test_a_log_file_per_run_holds_its_run_id_on_its_lines_and_sparks_warnings(job_out, store_a, tmp_path):
    out, proc = job_out
    line = next(line for line in proc.stderr.splitlines() if line.startswith("log: "))
    path, run = re.match(r"log: (\S+) \(run (\w+)\)", line).groups()
    assert json.loads((out / "_SUCCESS").read_text(encoding="utf-8"))["run"] == run
    assert json.loads((out / "summary.json").read_text(encoding="utf-8"))["run"] == run
    lines = [x for x in open(path, encoding="utf-8").read().splitlines() if re.match(r"\d\d/\d\d/\d\d ", x)]
    assert lines and all(f" run={run} " in x for x in lines)
    assert any(" WARN " in x for x in lines)  # Spark's own lines, at WARN (NativeCodeLoader, Utils...)
    second = _submit("--store", store_a / "store", "--out", tmp_path / "o2", "--groups", "G_TAG_A",
                     "--subscriptions", store_a / "registrations.json", "--sink", "noop")
    assert second.returncode == 0, second.stderr[-2000:]
    other = re.search(r"^log: (\S+) \(run (\w+)\)", second.stderr, re.M).groups()
    assert other[0] != path and other[1] != run and run not in open(other[0], encoding="utf-8").read()


def _parts(out):
    return sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet"))


@pytest.mark.system
def test_rerun_writes_the_same_files_with_the_same_rows_in_the_same_order(job_out, store_a, tmp_path):
    import pyarrow.parquet as pq

    out, _ = job_out
    again = tmp_path / "again"
    proc = _submit("--store", store_a / "store", "--out", again, "--subscriptions", store_a / "registrations.json")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert _parts(again) == _parts(out) and _parts(out)
    for part in _parts(out):
        assert pq.read_table(again / part).equals(pq.read_table(out / part)), part
    first, second = (json.loads((d / "summary.json").read_text()) for d in (out, again))
    for s in (first, second):
        s.pop("job_seconds")
        s.pop("run")  # each run's own id (as _SUCCESS's)
    assert first == second


@pytest.mark.system
def test_failed_run_leaves_no_output(store_a, tmp_path):
    import shutil

    store = tmp_path / "store"
    shutil.copytree(store_a / "store", store)
    bad = store / "commitlog" / "00000000000000000000"
    bad.chmod(0o644)
    with open(bad, "r+b") as f:
        f.seek(4)
        f.write(b"\x00\x00\x00\x01")  # the first record's magic code
    out = tmp_path / "out"
    proc = _submit("--store", store, "--out", out, "--subscriptions", store_a / "registrations.json")
    assert proc.returncode == 1
    text = proc.stdout + proc.stderr
    assert "error: " in text and "00000000000000000000 at offset 0: " in text and "magic" in text
    assert list(tmp_path.iterdir()) == [store]


def _running(pid):
    """Whether process `pid` is alive (a zombie waiting for its parent to reap it has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_failed_job_is_cleaned_up_only_after_its_other_tasks_ended(spark, tmp_path):
    """Spark fails the job at the first failed task and lets the others run on (it kills their Python workers
    2-4 s later, spark.python.task.killTimeout): the temporary OUT may be removed only once they have ended, or
    a late task's parts outlive it (a leftover OUT.tmp-* seen in CI).

    No race decides the outcome: task 0 fails only once task 1 runs, task 1 writes only after the job has
    failed (the test releases it then) and half a second later. When `settle` returns, task 1 must have
    ended: written its file, or been killed by Spark. A `settle` that returned at once would find it still
    running with nothing written."""
    import time

    from jobs.runtime.job_tag import RunJobs

    started, release, late = (tmp_path / name for name in ("started", "release", "late"))

    def wait_for(path):
        deadline = time.time() + 120
        while not path.exists() and time.time() < deadline:
            time.sleep(0.05)

    def task(indices):
        if list(indices) == [0]:
            wait_for(started)
            raise ValueError("a corrupt split")
        started.write_text(str(os.getpid()))
        wait_for(release)
        time.sleep(0.5)
        late.write_text("written after the job failed")
        yield 1

    with RunJobs(spark, "0a1b2c3d") as jobs:
        with pytest.raises(Exception, match="a corrupt split"):
            spark.sparkContext.parallelize([0, 1], 2).mapPartitions(task).collect()
        assert started.exists() and not late.exists()  # task 1 was running when the job failed, and had not written
        release.write_text("the job has failed")
        jobs.settle()
    assert late.exists() or not _running(int(started.read_text())), \
        "settle returned while a task of the failed job was still running"
