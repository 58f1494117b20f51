"""Spark Connect, for real: a local Connect server (tools/local_connect.py, started and stopped here) answering
the data source's questions on one DataFrame and running the job as a client, both against RocketMQ's data."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from jobs.task.stage import unseen_paths
from tests.jobs.conftest import assert_rows_equal
from tools.local_connect import LocalConnect

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.spark, pytest.mark.system]

# A Connect client in its own process (a classic session already runs in the tests' one): one DataFrame asked
# several questions, then a read with subscriptions; prints the answers as JSON.
CLIENT = """
import json, sys
from pyspark.sql import SparkSession
from jobs.datasource import register

url, store, subscriptions, group = sys.argv[1:]
spark = SparkSession.builder.remote(url).getOrCreate()
register(spark)
df = spark.read.format("rocketmq").option("withBody", "false").load(store)
answers = [df.where(q).count() if q else df.count() for q in
           ["topic = 'TopicTest'", None, "queue_id = 1", "tags = 'TagA'", None]]
subs = spark.read.format("rocketmq").option("withBody", "false").option("subscriptions", subscriptions).load(store)
rows = subs.where(f"array_contains(delivered_to, '{group}')").select("topic", "queue_id", "queue_offset").collect()
print(json.dumps({"counts": answers, "delivered": sorted(tuple(r) for r in rows)}))
"""


# A kernel's Connect session running the user's job (tasks that wait for a release file, or 45 s) in one thread
# while the job, called as main in the same process, replays a damaged store over the same server and fails:
# prints the replay's exit code, whether the user's job still ran when it returned, and the user's result.
USERS_JOB_BESIDE_A_FAILING_REPLAY = """
import json, os, sys, threading, time
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from jobs import replay

url, store, subscriptions, out, release = sys.argv[1:]
spark = SparkSession.builder.remote(url).getOrCreate()

@udf("long")
def held(i):
    deadline = time.time() + 45
    while not os.path.exists(release) and time.time() < deadline:
        time.sleep(0.05)
    return i

found = {}
def users_job():
    try:
        found["sum"] = spark.range(0, 2, 1, 2).select(held("id").alias("i")).groupBy().sum("i").collect()[0][0]
    except Exception as exc:
        found["error"] = type(exc).__name__
user = threading.Thread(target=users_job)
user.start()
time.sleep(5)  # its tasks are running on the server
code = replay.main(["--remote", url, "--store", store, "--subscriptions", subscriptions, "--out", out,
                    "--progress", "off"])
running = user.is_alive()
open(release, "w").close()
user.join(120)
print(json.dumps({"code": code, "running": running, "found": found, "session": spark.range(3).count()}))
"""


@pytest.fixture(scope="module")
def connect(tmp_path_factory):
    server = LocalConnect(tmp_path_factory.mktemp("connect"))
    yield server
    server.stop()


def test_the_data_source_over_connect_answers_each_question_as_rocketmq(
        connect, store_a, store_a_messages, store_a_expected, tmp_path):
    script = tmp_path / "client.py"
    script.write_text(CLIENT, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script), connect.url, str(store_a / "store"),
                           str(store_a / "registrations.json"), "G_TAG_A"], cwd=ROOT, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    n = len(store_a_messages)
    assert got["counts"] == [1929, n, sum(m["queueId"] == 1 for m in store_a_messages),
                             sum(m["properties"].get("TAGS") == "TagA" for m in store_a_messages), n]
    want = sorted((t, q, o) for g, t, q, o in store_a_expected[0] if g == "G_TAG_A")
    assert [tuple(r) for r in got["delivered"]] == want and want


def test_the_job_over_connect_writes_rocketmq_answer(connect, store_a, store_a_expected, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "jobs" / "replay.py"), "--remote", connect.url, "--store",
                           str(store_a / "store"), "--subscriptions", str(store_a / "registrations.json"), "--out",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    read = lambda p: ds.dataset(p, format="parquet", partitioning="hive").to_table().to_pylist()  # noqa: E731
    assert_rows_equal(read(out / "matched"), store_a_expected[0])
    assert_rows_equal(read(out / "audit" / "collisions"), store_a_expected[1])
    assert (out / "_SUCCESS").exists() and (out / "offsets.json").exists()


def test_paths_the_executors_cannot_see_are_named(spark, tmp_path):
    """What the job asks a Connect server before it runs (the answer here from the tests' local executors)."""
    missing = str(tmp_path / "not-here")
    pairs = [("--store", str(tmp_path)), ("--out", missing), ("--commitlog", f"file://{missing}"),
             ("--store", "s3://bucket/store")]
    assert unseen_paths(spark, pairs) == [("--out", missing), ("--commitlog", f"file://{missing}")]


def test_over_connect_a_failing_replay_neither_waits_for_nor_interrupts_the_users_job(connect, store_a, tmp_path):
    from tests.jobs.conftest import writable_copy

    store = writable_copy(store_a, tmp_path)
    os.truncate(store / "consumequeue" / "TopicTest" / "0" / "00000000000000000000", 3001)  # damaged: exit 1
    script = tmp_path / "kernel.py"
    script.write_text(USERS_JOB_BESIDE_A_FAILING_REPLAY, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script), connect.url, str(store), str(store_a / "registrations.json"),
                           str(tmp_path / "out"), str(tmp_path / "release")], cwd=ROOT, capture_output=True,
                          text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got == {"code": 1, "running": True, "found": {"sum": 1}, "session": 3}, proc.stderr[-3000:]
