"""Shared test fixtures: the RocketMQ reference data copied into tests/data, and one SparkSession."""
import gzip
import json
import os
import sys
import tarfile
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def read_jsonl(relpath):
    """Lines of a (gzipped) JSON-lines file under tests/data, as dicts."""
    path = DATA / relpath
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="session", autouse=True)
def run_logs(tmp_path_factory):
    """The job's per-run log files (jobs/runtime/console.py) of every test, in the session's temporary folder."""
    logs = tmp_path_factory.mktemp("logs")
    before = os.environ.get("MQREPLAY_LOG")
    os.environ["MQREPLAY_LOG"] = str(logs)
    yield logs
    if before is None:
        del os.environ["MQREPLAY_LOG"]
    else:
        os.environ["MQREPLAY_LOG"] = before


@pytest.fixture(scope="session")
def store_a(tmp_path_factory):
    """Fixture store_a (a real RocketMQ 4.9.8 store and its dumps), unpacked once per session."""
    return _unpacked(tmp_path_factory, "store_a")


@pytest.fixture(scope="session")
def store_dledger(tmp_path_factory):
    """Fixture store_dledger (a real RocketMQ 4.9.8 store in DLedger mode and its dumps, as store_a's), unpacked
    once per session."""
    return _unpacked(tmp_path_factory, "store_dledger")


def read_store_jsonl(path):
    """Lines of one of a store fixture's RocketMQ dumps (messages.jsonl.gz, cq.jsonl.gz), as dicts."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="session")
def store_a_messages(store_a):
    """Every message of store_a as RocketMQ's MessageDecoder read it (messages.jsonl.gz), in log order."""
    return read_store_jsonl(store_a / "messages.jsonl.gz")


@pytest.fixture(scope="session")
def store_a_cq(store_a):
    """Every consume-queue unit of store_a as RocketMQ's ConsumeQueue read it (cq.jsonl.gz)."""
    return read_store_jsonl(store_a / "cq.jsonl.gz")


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole run (Spark start-up costs seconds)."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("mqreplay-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def store_cluster(tmp_path_factory):
    """Fixture store_cluster (two brokers of one RocketMQ 4.9.8 cluster, broker-a/store and broker-b/store, with
    the cluster's registrations and each broker's read-path answers, expected_cluster.json and
    expected_committed.json), unpacked once per session."""
    return _unpacked(tmp_path_factory, "store_cluster")


def _unpacked(tmp_path_factory, name):
    """A fixture store's copy in tests/data/stores/<name>.tar.gz, unpacked into a folder of the session."""
    root = tmp_path_factory.mktemp("fixtures")
    with tarfile.open(DATA / "stores" / f"{name}.tar.gz") as tar:
        tar.extractall(root, filter="data")
    return root / name


@pytest.fixture(scope="session")
def store_5x(tmp_path_factory):
    """Fixture store_5x (a RocketMQ 5.3.3 store: timer wheel, LMQ queues, a BatchCQ topic, and RocketMQ's answers in
    expected/), unpacked once per session."""
    return _unpacked(tmp_path_factory, "store_5x")


@pytest.fixture(scope="session")
def store_pop(tmp_path_factory):
    """Fixture store_pop (a RocketMQ 5.3.3 store two POP groups consumed, and RocketMQ's answers in expected/),
    unpacked once per session."""
    return _unpacked(tmp_path_factory, "store_pop")


@pytest.fixture(scope="session")
def store_trans(tmp_path_factory):
    """Fixture store_trans (a RocketMQ 5.3.3 store with every fate of a transaction, and RocketMQ's answers in
    expected/: transactions.json, the groups' deliveries), unpacked once per session."""
    return _unpacked(tmp_path_factory, "store_trans")


@pytest.fixture(scope="session")
def store_trace(tmp_path_factory):
    """Fixture store_trace (a RocketMQ 5.3.3 store whose clients wrote message traces, and the answers in
    expected/: every trace record, the consumption reconciled), unpacked once per session."""
    return _unpacked(tmp_path_factory, "store_trace")
