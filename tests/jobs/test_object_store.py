"""Stores and outputs on S3 for real, against a local S3-compatible server (moto's server mode, started here on
127.0.0.1 and stopped by its process id): a replay with --store and --out on S3, with the endpoint from the
environment and in pyarrow's URI query, equal to RocketMQ's answer; one run per S3 OUT; a killed run leaves
no readable OUT; the data source reads an S3 store."""
import json
import os
import signal
import subprocess
import sys

import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest

from tests.jobs.conftest import assert_rows_equal
from tests.jobs.test_exit_codes import ROOT
from tests.jobs.test_scheduler_runs import SUBMIT, _session_processes, _slow_filters, _wait_for
from tools.local_s3 import KEYS, LocalS3

pytestmark = [pytest.mark.spark, pytest.mark.system]


@pytest.fixture(scope="module")
def s3(store_a):
    """(endpoint host:port, S3FileSystem) of a moto server holding bucket `replay` with store_a's store."""
    with LocalS3() as server:
        server.upload(store_a / "store", "replay", "store_a")
        yield server.endpoint, server.filesystem()


def _env(endpoint=None):
    env = {**os.environ, **KEYS, "PYSPARK_PYTHON": sys.executable}
    if endpoint:
        env["AWS_ENDPOINT_URL"] = f"http://{endpoint}"
    return env


def _submit(env, *args, **popen):
    cmd = [str(SUBMIT), "--master", "local[2]", str(ROOT / "jobs" / "replay.py"), *map(str, args)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env, **popen)


def _objects(fs, prefix):
    return sorted(i.path for i in fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
                  if i.type == pafs.FileType.File)


def _download(fs, prefix, local):
    pafs.copy_files(prefix, str(local), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())
    return local


@pytest.mark.parametrize("form", ["environment", "query"])
def test_a_replay_from_and_to_s3_equals_rocketmqs_answer(s3, store_a, store_a_expected, tmp_path, form):
    endpoint, fs = s3
    query = f"?endpoint_override={endpoint}&scheme=http" if form == "query" else ""
    env = _env(endpoint if form == "environment" else None)
    out = f"replay/out-{form}"
    proc = _submit(env, "--store", f"s3://replay/store_a{query}", "--out", f"s3://{out}{query}",
                   "--subscriptions", store_a / "registrations.json")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    local = _download(fs, out, tmp_path / "out")
    final, collided = store_a_expected
    assert_rows_equal(ds.dataset(local / "matched").to_table().to_pylist(), final)
    assert_rows_equal(ds.dataset(local / "audit" / "collisions").to_table().to_pylist(), collided)
    success = json.loads((local / "_SUCCESS").read_text())
    assert sorted(success["files"]) == sorted(p[len(out) + 1:] for p in _objects(fs, out) if not p.endswith("_SUCCESS"))
    # nothing of the run is left beside OUT: no temporary output, no claim
    assert [p for p in _objects(fs, "replay") if p.startswith(f"{out}.")] == []


def _start_slow(env, out, tmp_path):
    cmd = [str(SUBMIT), "--master", "local[2]", "--py-files", str(_slow_filters(tmp_path)),
           str(ROOT / "jobs" / "replay.py"), "--store", "s3://replay/store_a", "--out", out,
           "--subscription", "G_SLOW", "TopicTest", "PYTHON", "tests.jobs.slow_filters:slow_keep_all"]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def test_a_second_run_on_a_claimed_s3_out_refuses_and_a_killed_run_leaves_no_readable_out(s3, store_a, tmp_path):
    endpoint, fs = s3
    env = _env(endpoint)
    first = _start_slow(env, "s3://replay/out-claimed", tmp_path)
    try:
        assert _wait_for(lambda: any("_attempts" in p for p in _objects(fs, "replay")
                                     if p.startswith("replay/out-claimed.tmp-")))
        second = _submit(env, "--store", "s3://replay/store_a", "--out", "s3://replay/out-claimed",
                         "--groups", "G_TAG_A", "--subscriptions", store_a / "registrations.json")
        assert second.returncode == 2 and "is claimed by run" in second.stdout + second.stderr
        os.kill(first.pid, signal.SIGKILL)  # killed before its marker
        assert _wait_for(lambda: not _session_processes(first.pid), timeout=30)
    finally:
        if _session_processes(first.pid):
            os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert [p for p in _objects(fs, "replay") if p.startswith("replay/out-claimed")] == []


def test_the_data_source_reads_a_store_on_s3(s3, tmp_path):
    endpoint, _ = s3
    script = tmp_path / "read.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from pyspark.sql import SparkSession\n"
        "from jobs.datasource import register\n"
        "spark = SparkSession.builder.master('local[2]').getOrCreate()\n"
        "register(spark)\n"
        "load = lambda: spark.read.format('rocketmq').option('withBody', 'false').load('s3://replay/store_a')\n"
        "print('ROWS', load().where(\"topic = 'TopicTest'\").count(), load().count())\n"
        "spark.stop()\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env=_env(endpoint))
    assert "ROWS 1929 3000" in proc.stdout, (proc.stdout + proc.stderr)[-3000:]
