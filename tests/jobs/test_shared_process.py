"""The job called where it does not own the process (a notebook's kernel, Databricks, Livy, the pyspark shell): every
call of `main` is a run of its own (run id, log file, temporary OUT, lake files), its Spark jobs carry its own tag
and a failed or stopped run touches no other job of the session, it works from any thread, and the process is as
it was when `main` returns (environment, signal handlers, logging, stderr, the session's conf, the thread's job
group)."""
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from jobs import replay
from jobs.errors import PublishFailed, UsageError
from jobs.output.place import Place
from jobs.runtime import console, lifecycle
from jobs.runtime.job_tag import GROUP_PROPERTIES
from jobs.sinks.iceberg.tables import IcebergTarget, move_parts
from tests.jobs.conftest import assert_rows_equal, expected_rows, writable_copy

ROOT = Path(__file__).resolve().parents[2]
UNTIL = 1795237035452  # store_a's messages were stored from ...034787 to ...035765: two nights of it
KERNEL = {"PYSPARK_GATEWAY_PORT": "41234"}  # a notebook's, Databricks', the pyspark shell's: not spark-submit's


def test_each_call_is_a_run_of_its_own_though_the_environment_has_a_gateway_port():
    env = {**KERNEL, "MQREPLAY_RUN": "0badc0de", "MQREPLAY_LOG_FILE": "/tmp/x/replay-0badc0de.log"}
    before = dict(env)
    first, second = console.run_identity(env), console.run_identity(env)
    assert first[0] != second[0] and first[1] != second[1]
    assert "0badc0de" not in (first[0], second[0])  # not spark-submit's child: the variables are not its wrapper's
    assert env == before  # nothing exported for the next call to take


def test_the_wrappers_run_id_names_the_first_run_of_its_driver_only():
    env = {**KERNEL, "MQREPLAY_RUN": "5eed5eed", "MQREPLAY_LOG_FILE": "/tmp/x/replay-5eed5eed.log"}
    jvm = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "org.apache.spark.deploy.SparkSubmit"])
    try:
        deadline = time.time() + 10
        while not console.under_spark_submit(env, parent=jvm.pid) and time.time() < deadline:
            time.sleep(0.05)  # until the child has exec'd its command line
        assert console.run_identity(env, parent=jvm.pid) == ("5eed5eed", "/tmp/x/replay-5eed5eed.log")
        again = console.run_identity(env, parent=jvm.pid)  # main called twice by one submitted script
        assert again[0] != "5eed5eed" and again[1] != "/tmp/x/replay-5eed5eed.log"
    finally:
        jvm.kill()
        jvm.wait()


def test_the_run_environment_is_put_back_whatever_the_run_set_in_it():
    env = {"KEPT": "1", "CHANGED": "before"}
    with console.run_environment("0a0a0a0a", "/tmp/f.log", env):
        assert env["MQREPLAY_RUN"] == "0a0a0a0a" and env["MQREPLAY_LOG_FILE"] == "/tmp/f.log"
        env["CHANGED"], env["ADDED"] = "after", "x"  # as PySpark's Connect builder and pyiceberg's defaults do
        del env["KEPT"]
    assert env == {"KEPT": "1", "CHANGED": "before"}


def test_the_default_log_folder_is_made_private(tmp_path):
    folder = tmp_path / "logs"
    console.private_folder(str(folder), default=True)
    assert folder.stat().st_mode & 0o777 == 0o700
    folder.chmod(0o755)  # an earlier version's
    console.private_folder(str(folder), default=True)
    assert folder.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.getuid() != 0, reason="making a folder another user owns needs root")
def test_a_log_folder_another_user_owns_is_refused(tmp_path):
    folder = tmp_path / "mqreplay-me"
    folder.mkdir(mode=0o777)
    os.chown(folder, 65534, 65534)  # made first by another user of a shared /tmp
    with pytest.raises(UsageError, match=r"belongs to another user \(uid 65534\)"):
        console.private_folder(str(folder), default=True)


def test_a_second_run_while_one_runs_in_the_process_is_refused_at_once(capsys):
    assert replay._one_run.acquire(blocking=False)  # a run of a kernel's other thread
    try:
        code = replay.main(["--version"])
    finally:
        replay._one_run.release()
    assert code == 2
    assert "another run of the job is running in this process" in capsys.readouterr().err


def test_signal_handlers_are_set_from_the_main_thread_only():
    found = []
    thread = threading.Thread(target=lambda: found.append(lifecycle.stop_on_signals()))
    thread.start()
    thread.join()
    assert found == [{}]


def test_a_lake_folder_of_another_runs_parts_is_never_written_into(tmp_path):
    out, table = Place.of(str(tmp_path / "out.tmp-1")), Place.of(str(tmp_path / "table"))
    (tmp_path / "out.tmp-1" / "matched" / "group=G").mkdir(parents=True)
    (tmp_path / "out.tmp-1" / "matched" / "group=G" / "part-00000.parquet").write_bytes(b"night 2")
    (tmp_path / "table" / "data" / "run-1234abcd").mkdir(parents=True)
    (tmp_path / "table" / "data" / "run-1234abcd" / "group_G-part-00000.parquet").write_bytes(b"night 1")
    with pytest.raises(PublishFailed, match="run-1234abcd exists already"):
        move_parts(out, "matched", table, "1234abcd")
    assert (tmp_path / "table" / "data" / "run-1234abcd" / "group_G-part-00000.parquet").read_bytes() == b"night 1"


# ---- in a running session, as a kernel has one ----------------------------------------------------------------------

def _kernel_state(spark):
    """What a kernel expects to find as it was after calling main."""
    sc = spark.sparkContext
    return {"env": dict(os.environ), "signals": {s: signal.getsignal(s) for s in lifecycle.STOP_SIGNALS},
            "handlers": list(logging.getLogger().handlers), "stderr": sys.stderr,
            "levels": {n: logging.getLogger(n).level for n in ("mqreplay", "py4j", "pyiceberg", "")},
            "conf": dict(spark.conf.getAll), "group": [sc.getLocalProperty(k) for k in GROUP_PROPERTIES]}


@pytest.fixture
def kernel(spark, monkeypatch):
    """The test's session as a kernel's: the gateway port in the environment, a job group of the cell's own."""
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", KERNEL["PYSPARK_GATEWAY_PORT"])
    monkeypatch.delenv("MQREPLAY_RUN", raising=False)
    monkeypatch.delenv("MQREPLAY_LOG_FILE", raising=False)
    spark.sparkContext.setJobGroup("cell-7", "the user's cell")
    yield spark
    spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    spark.sparkContext.setLocalProperty("spark.job.description", None)


def _slow_filters(spark, tmp_path):
    """tests.jobs.slow_filters shipped to the session's workers: a run still in its stage seconds later."""
    path = tmp_path / "slow.zip"
    with zipfile.ZipFile(path, "w") as z:
        for name in ("tests/__init__.py", "tests/jobs/__init__.py", "tests/jobs/slow_filters.py"):
            z.write(ROOT / name, name)
    spark.sparkContext.addPyFile(str(path))


def _damaged(store_a, tmp_path):
    store = writable_copy(store_a, tmp_path)
    os.truncate(store / "consumequeue" / "TopicTest" / "0" / "00000000000000000000", 3001)
    return store


class UsersJob:
    """A job of the user's in another thread of the session: `tasks` tasks that wait for the test's release (up to
    `wait` s, then end), in no job group (the default group, which a run once waited for and cancelled)."""

    def __init__(self, spark, tmp_path, tasks=2, wait=90):
        self.release, self.started = tmp_path / "release", tmp_path / "user-started"
        self.result, self.error = None, None
        self.thread = threading.Thread(target=self._run, args=(spark, tasks, wait))
        self.thread.start()
        deadline = time.time() + 120
        while not self.started.exists() and time.time() < deadline:
            time.sleep(0.05)
        assert self.started.exists(), "the user's job did not start"

    def _run(self, spark, tasks, wait):
        release, started = str(self.release), str(self.started)

        def task(rows):
            open(started, "w").close()
            deadline = time.time() + wait
            while not os.path.exists(release) and time.time() < deadline:
                time.sleep(0.05)
            yield sum(1 for _ in rows)

        sc = spark.sparkContext
        sc.setLocalProperty("spark.jobGroup.id", None)  # whatever the thread inherited
        try:
            self.result = sum(sc.parallelize(range(100), tasks).mapPartitions(task).collect())
        except Exception as exc:  # noqa: BLE001 - what the user would see: a cancelled job
            self.error = exc

    def running(self):
        return self.thread.is_alive()

    def finish(self):
        self.release.write_text("go")
        self.thread.join(180)
        return self.result, self.error


@pytest.mark.spark
def test_two_nights_called_from_one_kernel_hold_both_nights_in_the_lake(kernel, store_a, tmp_path, capsys):
    target = IcebergTarget("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=str(tmp_path / "wh"))
    common = ["--store", str(store_a / "store"), "--subscriptions", str(store_a / "registrations.json"),
              "--sink", "iceberg", "--catalog-uri", target.uri, "--warehouse", target.warehouse, "--namespace",
              "lake", "--starting-offsets", "iceberg", "--progress", "off"]
    codes, runs = [], []
    for night, until in (("n1", UNTIL), ("n2", 1795237036000)):
        codes.append(replay.main(common + ["--out", str(tmp_path / night), "--until", str(until)]))
        runs.append(json.loads((tmp_path / night / "summary.json").read_text())["run"])
    assert codes == [0, 0], capsys.readouterr().err[-3000:]
    assert runs[0] != runs[1]
    final = expected_rows(store_a / "expected.json")
    raw = expected_rows(store_a / "expected_broker_raw.json")
    catalog = target.catalog()
    for name, want in (("matched", set(final)), ("collisions", set(raw) - set(final))):
        keys = ("group", "topic", "queue_id", "queue_offset")
        rows = catalog.load_table(f"lake.{name}").scan(selected_fields=keys).to_arrow()
        got = Counter(zip(*(rows.column(c).to_pylist() for c in keys)))
        assert set(got) == want and max(got.values()) == 1
    folders = {p.name for p in (tmp_path / "wh").rglob("run-*") if p.is_dir()}
    assert {f"run-{r}" for r in runs} <= folders


@pytest.mark.spark
@pytest.mark.parametrize("ending", ["published", "usage error", "failure", "stop"])
def test_main_leaves_the_kernel_as_it_found_it(kernel, store_a, tmp_path, ending, capsys):
    store, extra = store_a / "store", ["--until", "1795237035100"]
    if ending == "usage error":
        extra = ["--since", "tomorrow"]
    elif ending == "failure":
        store = _damaged(store_a, tmp_path)
    elif ending == "stop":
        _slow_filters(kernel, tmp_path)
        extra = ["--subscription", "G_SLOW", "TopicTest", "PYTHON", "tests.jobs.slow_filters:slow_keep_all"]
        threading.Thread(target=_stop_once_the_run_has_a_job, args=(kernel,), daemon=True).start()
    before = _kernel_state(kernel)
    code = replay.main(["--store", str(store), "--subscriptions", str(store_a / "registrations.json"),
                        "--out", str(tmp_path / "out"), "--progress", "off", *extra])
    assert code == {"published": 0, "usage error": 2, "failure": 1, "stop": 143}[ending], capsys.readouterr().err
    assert _kernel_state(kernel) == before
    assert kernel.range(3).count() == 3  # the kernel's session still answers


def _stop_once_the_run_has_a_job(spark, timeout=120):
    """SIGTERM to this process once a job of a run's own group runs (a kernel's interrupt)."""
    tracker, deadline = spark.sparkContext.statusTracker(), time.time() + timeout
    while time.time() < deadline:
        if any(tracker.getJobIdsForGroup(g) for g in _run_groups(spark)):
            time.sleep(1.0)  # well into the stage
            os.kill(os.getpid(), signal.SIGTERM)
            return
        time.sleep(0.05)


def _run_groups(spark):
    return [f"mqreplay-{p.stem.rsplit('-', 1)[1]}" for p in Path(os.environ["MQREPLAY_LOG"]).glob("replay-*.log")]


@pytest.mark.spark
def test_main_from_a_kernels_worker_thread_writes_rocketmqs_answer(kernel, store_a, store_a_expected, tmp_path):
    found = {}

    def call():
        found["code"] = replay.main(["--store", str(store_a / "store"), "--subscriptions",
                                     str(store_a / "registrations.json"), "--out", str(tmp_path / "out"),
                                     "--progress", "off"])
    thread = threading.Thread(target=call)
    thread.start()
    thread.join(600)
    assert found.get("code") == 0
    read = lambda p: ds.dataset(p, format="parquet", partitioning="hive").to_table().to_pylist()  # noqa: E731
    assert_rows_equal(read(tmp_path / "out" / "matched"), store_a_expected[0])
    assert kernel.range(3).count() == 3


@pytest.mark.spark
def test_a_failing_replay_neither_waits_for_nor_cancels_the_users_job(kernel, store_a, tmp_path):
    """The user's job holds its tasks until released, or 45 s: a replay that waited for it would return only once
    it had ended; one that cancelled it would leave it an error."""
    users = UsersJob(kernel, tmp_path, tasks=1, wait=45)
    code = replay.main(["--store", str(_damaged(store_a, tmp_path)), "--subscriptions",
                        str(store_a / "registrations.json"), "--out", str(tmp_path / "out"), "--progress", "off"])
    assert code == 1
    assert users.running(), "the replay returned only once the user's job had ended"
    assert users.finish() == (100, None)
    assert not list(tmp_path.glob("out.tmp-*"))


@pytest.mark.spark
def test_a_stopped_replay_cancels_its_own_jobs_only(kernel, store_a, tmp_path):
    users = UsersJob(kernel, tmp_path, tasks=1, wait=120)
    _slow_filters(kernel, tmp_path)
    threading.Thread(target=_stop_once_the_run_has_a_job, args=(kernel,), daemon=True).start()
    code = replay.main(["--store", str(store_a / "store"), "--out", str(tmp_path / "out"), "--progress", "off",
                        "--subscription", "G_SLOW", "TopicTest", "PYTHON", "tests.jobs.slow_filters:slow_keep_all"])
    assert code == 143
    assert users.running()
    assert users.finish() == (100, None)  # not cancelled with the replay
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob("out.tmp-*"))
