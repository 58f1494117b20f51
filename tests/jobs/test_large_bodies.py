"""Bodies cannot stop a run: a compressed body that inflates beyond max_body_mb is not inflated; its message is
decided and delivered as any other, with a null body, and listed in OUT/audit/bodies/. Batches are bounded by
bytes as well as units, so large legitimate bodies are handed on a few at a time.

The stores are written with the project's store writer: topic Big, queue 0, four messages, the second one a
compressed body of 3 MiB of zeros (a few KB stored) against a bound of 1 MiB."""
import json
import logging
import os
import subprocess
import sys
import zlib
from pathlib import Path

import lz4.frame
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
import zstandard

from jobs.output.layouts import NORMALIZED
from jobs.plan.build import build_plan
from jobs.settings import CorruptPolicy, JobOptions
from schemas.errors import CorruptStoreError
from tests.local_replay import kind, replay_local
from tools.store_writer import Message, StoreWriter

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
KIB = 1 << 10
FLAGS = {"zlib": 1 | 3 << 8, "LZ4": 1 | 1 << 8, "ZSTD": 1 | 2 << 8}  # sysFlag: COMPRESSED, compression type
SUBSCRIPTIONS = (("G_A", "Big", "TAG", "TagA"), ("G_ALL", "Big", "TAG", "*"))
SMALL = b"hello" * 1000  # compressed too, and inflated: 5,000 bytes


def _compress(codec, data):
    if codec == "LZ4":
        return lz4.frame.compress(data, store_size=False)  # as lz4-java writes a frame: no content size
    if codec == "ZSTD":
        return zstandard.ZstdCompressor().compress(data)
    return zlib.compress(data, 9)


def _write_store(root, codec="zlib", big=3 * MIB):
    """(commit-log offsets of the four messages, the stored length of the big body)."""
    stored = _compress(codec, bytes(big))
    with StoreWriter(str(root), commitlog_file_size=1 << 20, cq_file_size=6000, ext_file_size=4096) as w:
        offsets = [
            w.append(Message("Big", 0, b"small-0", {"TAGS": "TagA"}, store_timestamp=1000)),
            w.append(Message("Big", 0, b"", {"TAGS": "TagA", "a": "1"}, sys_flag=FLAGS[codec], stored_body=stored,
                             store_timestamp=1001)),
            w.append(Message("Big", 0, b"small-2", {"TAGS": "TagB"}, store_timestamp=1002)),
            w.append(Message("Big", 0, SMALL, {"TAGS": "TagA"}, sys_flag=FLAGS["zlib"], store_timestamp=1003)),
        ]
    return offsets, len(stored)


@pytest.fixture(scope="module", params=["zlib", "LZ4", "ZSTD"])
def bomb_store(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"bomb-{request.param}")
    offsets, stored_size = _write_store(root / "store", request.param)
    return request.param, root / "store", offsets, stored_size


@pytest.fixture(scope="module")
def zlib_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("bomb")
    offsets, stored_size = _write_store(root / "store")
    return root / "store", offsets, stored_size


def _plan(store, **kw):
    return build_plan(JobOptions(store=str(store), ad_hoc=SUBSCRIPTIONS, max_body=MIB, **kw))


def _stats(result):
    return {r["group"]: (r["units"], r["skipped"], r["broker_delivered"], r["client_delivered"])
            for r in kind(result, "stats").to_pylist()}


def test_a_body_beyond_the_bound_is_delivered_null_and_audited_with_every_codec(bomb_store):
    codec, store, offsets, stored_size = bomb_store
    result = replay_local(_plan(store))
    matched = {(r["group"], r["queue_offset"]): r["body"] for r in kind(result, "matched").to_pylist()}
    assert matched == {("G_A", 0): b"small-0", ("G_A", 1): None, ("G_A", 3): SMALL,
                       ("G_ALL", 0): b"small-0", ("G_ALL", 1): None, ("G_ALL", 2): b"small-2", ("G_ALL", 3): SMALL}
    audit = kind(result, "bodies")
    assert audit.column_names == ["topic", "queue_id", "queue_offset", "commitlog_offset", "stored_size", "reason"]
    assert audit.to_pylist() == [{"topic": "Big", "queue_id": 0, "queue_offset": 1, "commitlog_offset": offsets[1],
                                  "stored_size": stored_size,
                                  "reason": f"{codec} body inflates beyond max_body_mb (1 MiB): not inflated"}]
    # counted exactly as with a small body: the filters read properties only
    assert _stats(result) == {"G_A": (4, 0, 3, 3), "G_ALL": (4, 0, 4, 4)}
    assert kind(result, "corrupt").num_rows == 0


def test_the_messages_table_holds_the_message_with_a_null_body(zlib_store):
    store, offsets, _ = zlib_store
    result = replay_local(_plan(store, on_corrupt=CorruptPolicy.SKIP), layout=NORMALIZED)
    bodies = {r["queue_offset"]: r["body"] for r in kind(result, "message").to_pylist()}
    assert bodies == {0: b"small-0", 1: None, 2: b"small-2", 3: SMALL}
    assert kind(result, "corrupt").num_rows == 0 and kind(result, "bodies").num_rows == 1


def test_without_bodies_nothing_is_inflated_and_nothing_audited(zlib_store):
    store, _, _ = zlib_store
    result = replay_local(_plan(store, with_body=False))
    assert kind(result, "bodies").num_rows == 0
    assert _stats(result) == {"G_A": (4, 0, 3, 3), "G_ALL": (4, 0, 4, 4)}


def test_a_body_that_does_not_inflate_is_still_damage_where_a_large_one_is_not(tmp_path):
    """A truncated zlib stream: audited in audit/corrupt and left out under --on-corrupt skip, the run stopped
    on it otherwise; the large body beside it is neither."""
    with StoreWriter(str(tmp_path), commitlog_file_size=1 << 20, cq_file_size=6000, ext_file_size=4096) as w:
        offsets = [w.append(Message("Big", 0, b"small-0", {"TAGS": "TagA"})),
                   w.append(Message("Big", 0, b"", {"TAGS": "TagA"}, sys_flag=FLAGS["zlib"],
                                    stored_body=zlib.compress(bytes(3 * MIB), 9))),
                   w.append(Message("Big", 0, b"", {"TAGS": "TagA"}, sys_flag=FLAGS["zlib"],
                                    stored_body=zlib.compress(SMALL)[:-6]))]
    truncated = "body does not decompress (type 3): incomplete or truncated"
    result = replay_local(_plan(tmp_path, on_corrupt=CorruptPolicy.SKIP))
    assert [(r["queue_offset"], r["reason"]) for r in kind(result, "corrupt").to_pylist()] == [(2, truncated)]
    assert [r["queue_offset"] for r in kind(result, "bodies").to_pylist()] == [1]
    assert {(r["group"], r["queue_offset"]) for r in kind(result, "matched").to_pylist()} == {
        ("G_A", 0), ("G_A", 1), ("G_ALL", 0), ("G_ALL", 1)}
    assert _stats(result) == {"G_A": (3, 1, 2, 2), "G_ALL": (3, 1, 2, 2)}
    with pytest.raises(CorruptStoreError) as err:
        replay_local(_plan(tmp_path))
    assert (err.value.offset, err.value.reason) == (offsets[2], truncated)


def _decoded_batches(store, budget, monkeypatch):
    import jobs.task.split_task as task
    from jobs.task.split_task import Pieces, decoded_topics
    from jobs.task.split_units import commitlog_splits, split_units

    monkeypatch.setattr(task, "BATCH_BYTES", budget, raising=False)
    planned = build_plan(JobOptions(store=str(store), read_all=True))
    start, end = commitlog_splits(planned.plan)[0]
    out = Pieces()
    batches = []
    units = split_units(planned.plan, start, end).units
    for _, units, messages in decoded_topics(planned.plan, units, out):
        batches.append(([len(b) for b in messages.column("body").to_pylist()], units.column("queue_offset")
                        .to_pylist()))
    return batches


@pytest.mark.parametrize("kibs, compressed, rows", [
    ([400] * 6, [False] * 6, [2, 2, 2]),  # records as stored: 800 KiB fit 1 MiB, 1,200 do not
    ([400] * 6, [True] * 6, [2, 2, 2]),  # a few KiB as stored, 400 KiB each inflated
    ([300, 400, 300, 400, 400, 100], [False, True, False, True, True, False], [3, 3]),  # 1,000 and 900 KiB
])
def test_a_batch_of_large_bodies_is_handed_on_a_budget_of_bytes_at_a_time(tmp_path, monkeypatch, kibs, compressed,
                                                                          rows):
    with StoreWriter(str(tmp_path), commitlog_file_size=4 * MIB, cq_file_size=6000, ext_file_size=4096) as w:
        for i, (kib, packed) in enumerate(zip(kibs, compressed)):
            w.append(Message("Big", 0, bytes([i]) * (kib * KIB), {"TAGS": "TagA"}, sys_flag=FLAGS["zlib"] if packed
                             else 0))
    batches = _decoded_batches(tmp_path, MIB, monkeypatch)
    assert [len(offsets) for _, offsets in batches] == rows
    assert [size for sizes, _ in batches for size in sizes] == [kib * KIB for kib in kibs]
    assert [o for _, offsets in batches for o in offsets] == list(range(len(kibs)))


def test_wide_rows_of_large_bodies_are_written_a_budget_of_bytes_at_a_time(tmp_path, monkeypatch):
    """Every body fans out to each group that receives it: 12 wide rows of 400 KiB, 2 to a row group of 1 MiB."""
    import pyarrow.parquet as pq

    import jobs.output.layouts as layouts
    import jobs.output.writers as sink
    from jobs.task.split_units import commitlog_splits
    from jobs.task.stage import run_split

    with StoreWriter(str(tmp_path / "store"), commitlog_file_size=4 * MIB, cq_file_size=6000,
                     ext_file_size=4096) as w:
        for i in range(6):
            w.append(Message("Big", 0, bytes([i]) * (400 * KIB), {"TAGS": "TagA"}))
    monkeypatch.setattr(layouts, "WIDE_BYTES", MIB)
    planned = build_plan(JobOptions(store=str(tmp_path / "store"), ad_hoc=SUBSCRIPTIONS))
    (tmp_path / "out").mkdir()  # the temporary OUT, made by the run's claim
    spec = sink.SinkSpec(str(tmp_path / "out"), layouts.WIDE, True)
    report, _ = run_split(planned.plan, spec, 0, commitlog_splits(planned.plan)[0], "local")
    (part,) = [r["path"] for r in report if r["kind"] == "file" and r["output"] == "matched"]
    meta = pq.ParquetFile(tmp_path / "out" / part).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [2] * 6


def test_the_data_source_read_gives_a_null_body_and_says_why_in_the_log(zlib_store, caplog):
    from jobs.datasource import arrow_schema
    from jobs.datasource.filters import option_narrowing
    from jobs.datasource.read import SplitRead, read_split
    from jobs.task.split_units import commitlog_splits

    store, _, _ = zlib_store
    planned = build_plan(JobOptions(store=str(store), read_all=True, max_body=MIB))
    start, end = commitlog_splits(planned.plan)[0]
    job = SplitRead(planned.plan.for_split(start, end), option_narrowing())
    with caplog.at_level(logging.WARNING, logger="mqreplay"):
        rows = pa.Table.from_batches(list(read_split(job, start, end, arrow_schema()))).to_pylist()
    assert {r["queue_offset"]: r["body"] for r in rows} == {0: b"small-0", 1: None, 2: b"small-2", 3: SMALL}
    assert [r.getMessage() for r in caplog.records] == [
        "rocketmq: 1 message body left null, e.g. Big queue 0 offset 1: zlib body inflates beyond max_body_mb "
        "(1 MiB): not inflated"]


def _conf(tmp_path, max_body_mb):
    path = tmp_path / "replay.json"
    path.write_text(json.dumps({"max_body_mb": max_body_mb}))
    return path


def test_explain_says_the_body_is_not_inflated_and_why(zlib_store, tmp_path, capsys):
    from jobs import explain

    store, _, _ = zlib_store
    args = ["--store", str(store), "--conf", str(_conf(tmp_path, 1)), "--subscription", "G_A", "Big", "TAG", "TagA",
            "--group", "G_A", "--topic", "Big", "--queue-id", "0"]
    assert explain.main(args + ["--queue-offset", "1"]) == 0
    out = capsys.readouterr().out
    assert "G_A / Big queue 0 offset 1: DELIVERED" in out
    assert ("  body NOT INFLATED: zlib body inflates beyond max_body_mb (1 MiB): not inflated: the job writes the "
            "message with a null body and lists it in OUT/audit/bodies/; the decision is the same (filters read "
            "properties, never the body)") in out.splitlines()
    assert explain.main(args + ["--queue-offset", "3", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["message"]["body"] == {"compression": "zlib", "inflated": True, "size": 5000, "reason": None}


@pytest.mark.system
@pytest.mark.spark
def test_the_job_exits_0_with_the_body_null_audited_and_warned(zlib_store, tmp_path):
    """A real spark-submit run, under --on-corrupt skip too: a large body is not damage (exit 0, not 4)."""
    store, offsets, stored_size = zlib_store
    out = tmp_path / "out"
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]", str(ROOT / "jobs" / "replay.py"),
           "--store", str(store), "--out", str(out), "--conf", str(_conf(tmp_path, 1)), "--on-corrupt", "skip",
           "--subscription", "G_A", "Big", "TAG", "TagA"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    messages = ds.dataset(out / "messages", format="parquet", partitioning="hive").to_table().to_pylist()
    assert {m["queue_offset"]: m["body"] for m in messages} == {0: b"small-0", 1: None, 3: SMALL}
    audit = ds.dataset(out / "audit" / "bodies", format="parquet").to_table()
    assert audit.to_pylist() == [{"topic": "Big", "queue_id": 0, "queue_offset": 1, "commitlog_offset": offsets[1],
                                  "stored_size": stored_size,
                                  "reason": "zlib body inflates beyond max_body_mb (1 MiB): not inflated",
                                  "broker": "broker"}]  # a store whose topics.json names no broker
    summary = json.loads((out / "summary.json").read_text())
    warning = ("1 message body inflates beyond max_body_mb (1 MiB): not inflated, delivered with a null body; "
               "listed in OUT/audit/bodies/")
    assert summary["uninflated_bodies"] == 1 and warning in summary["warnings"]
    assert f"warning: {warning}" in proc.stdout + proc.stderr
    (row,) = [r for r in summary["subscriptions"] if r["group"] == "G_A"]
    assert (row["units"], row["skipped"], row["broker_delivered"], row["client_delivered"]) == (4, 0, 3, 3)
    assert summary["corrupt_items"] == 0


@pytest.mark.spark
def test_the_data_source_leaves_a_body_beyond_the_default_64_mib_null(spark, tmp_path):
    """conf/replay.json's max_body_mb (64): a zlib body of 65 MiB of zeros is left null, its neighbours read."""
    from jobs.datasource import register

    _write_store(tmp_path / "store", big=65 * MIB)
    register(spark)
    rows = spark.read.format("rocketmq").load(str(tmp_path / "store")).select("queue_offset", "body").collect()
    assert {r["queue_offset"]: r["body"] for r in rows} == {0: b"small-0", 1: None, 2: b"small-2", 3: SMALL}
