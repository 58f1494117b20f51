"""A lake of files too (issue 38): a Parquet OUT on an object store (a real local S3 server, tools/local_s3.py) whose
publish fails part-way leaves no object under OUT that a reader could take for data, and the complete output at
OUT.tmp-<run>; a publish that does not fail leaves every file with `_SUCCESS` last."""
import json

import pyarrow.fs as pafs
import pytest

from jobs.errors import PublishFailed
from jobs.output.layouts import NORMALIZED
from jobs.output.publish import SUCCESS, OutputRun
from tools.local_s3 import KEYS, LocalS3

FILES = ("summary.json", "matched/part-00000.parquet", "matched/part-00001.parquet", "messages/part-00000.parquet",
         "offsets.json")


pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def s3():
    with LocalS3() as server:
        server.filesystem().create_dir("lake")
        yield server


class FailingCopies:
    """The S3 filesystem, whose copy number `fail_at` (from 1) fails as a lost connection would."""

    def __init__(self, fs, fail_at):
        self.fs, self.fail_at, self.copies = fs, fail_at, 0

    def copy_file(self, source, target):
        self.copies += 1
        if self.copies == self.fail_at:
            raise OSError("When copying key: connection reset by peer")
        return self.fs.copy_file(source, target)

    def __getattr__(self, name):
        return getattr(self.fs, name)


def _run(s3, name, monkeypatch):
    for key, value in KEYS.items():
        monkeypatch.setenv(key, value)
    run = OutputRun(f"s3://lake/{name}?endpoint_override={s3.endpoint}&scheme=http")
    for path in FILES:
        with run.fs.open_output_stream(f"{run.tmp_path}/{path}") as f:
            f.write(path.encode())
    return run


def _objects(s3, prefix):
    infos = s3.filesystem().get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
    return sorted(i.path[len(prefix) + 1:] for i in infos if i.type == pafs.FileType.File)


@pytest.mark.parametrize("fail_at", [2, 4, len(FILES) + 1])  # a part, the last part, `_SUCCESS` itself
def test_a_publish_that_fails_part_way_leaves_no_object_under_out(s3, monkeypatch, fail_at):
    run = _run(s3, f"out-{fail_at}", monkeypatch)
    run.fs = FailingCopies(run.fs, fail_at)
    with pytest.raises(PublishFailed, match="the complete output is at"):
        run.publish()
    assert _objects(s3, f"lake/out-{fail_at}") == []
    kept = _objects(s3, run.tmp_path)
    assert set(FILES) | {SUCCESS} <= set(kept)
    assert _objects(s3, "lake/").count(f"out-{fail_at}.claim") == 0  # the claim released


def test_a_publish_that_succeeds_has_every_file_and_its_success_marker(s3, monkeypatch):
    run = _run(s3, "out-ok", monkeypatch)
    run.publish()
    assert _objects(s3, "lake/out-ok") == sorted(set(FILES) | {SUCCESS})
    with s3.filesystem().open_input_stream(f"lake/out-ok/{SUCCESS}") as f:
        assert set(json.loads(f.read())["files"]) == set(FILES)


def test_an_iceberg_run_with_out_on_an_object_store_copies_each_part_once(s3, monkeypatch, tmp_path):
    """Issue 47: the commit leaves the parts where their attempts wrote them (a move there is a copy), and the
    publish copies each once, from there into its table; what failed attempts wrote goes with _attempts/."""
    from types import SimpleNamespace

    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.output.writers import answer_schema
    from jobs.sinks.kinds import IcebergSink
    from tests.jobs.lake_parts import BROKER, keys, parts, target

    for key, value in KEYS.items():
        monkeypatch.setenv(key, value)
    run = OutputRun(f"s3://lake/iceberg-out?endpoint_override={s3.endpoint}&scheme=http")
    reports = []
    for attempt, group in (("a1", "G1"), ("a2", "G2"), ("failed", "G1")):
        path = f"_attempts/{attempt}/matched/group={group}/part-00000.parquet"
        row = {"group": group, "topic": "T", "queue_id": 0, "queue_offset": 1, "commitlog_offset": 1, "broker": BROKER}
        pq.write_table(pa.Table.from_pylist([row], schema=answer_schema("matched", NORMALIZED, True)),
                       f"{run.tmp_path}/{path}", filesystem=run.fs)
        if attempt != "failed":
            reports.append(dict(kind="file", output="matched", path=path, final=path.split("/", 2)[2], rows=1, bytes=1))
    sink = IcebergSink(target(tmp_path))
    options = SimpleNamespace(layout=NORMALIZED, with_body=True, audit_consume_queue=False)
    planned = SimpleNamespace(problems=[], parts=parts([("G1", "T"), ("G2", "T")], [("T", 0, 0, 2)]))
    written = sink.commit(run.tmp, reports, planned, options)
    assert written["matched"] == (2, 2, 2)
    assert not [p for p in _objects(s3, run.tmp_path) if p.startswith("matched/group=")]  # nothing moved
    copied = []
    real = pafs.copy_files
    monkeypatch.setattr(pafs, "copy_files", lambda source, *a, **k: copied.append(source) or real(source, *a, **k))
    summary = {"outputs": {name: {"files": f, "rows": r, "bytes": b} for name, (f, r, b) in written.items()}}
    sink.publish(run.tmp, summary, planned, options, "r1")
    assert sorted(p for p in copied if "/matched/" in p) == sorted(f"{run.tmp_path}/{r['path']}" for r in reports)
    assert keys(target(tmp_path)) == [("G1", "T", 0, 1), ("G2", "T", 0, 1)]
    assert not [p for p in _objects(s3, run.tmp_path) if p.startswith("_attempts")]
    run.abandon()


class CountingCopies:
    """The S3 filesystem, counting the copies it makes by source."""

    def __init__(self, fs):
        self.fs, self.copied = fs, []

    def copy_file(self, source, target):
        self.copied.append(source)
        return self.fs.copy_file(source, target)

    def move(self, source, target):  # on S3 a move is a copy and a delete
        self.copied.append(source)
        return self.fs.move(source, target)

    def __getattr__(self, name):
        return getattr(self.fs, name)


def test_a_parquet_out_on_an_object_store_copies_each_part_once(s3, monkeypatch):
    """Issue 47: the commit leaves the parts where their attempts wrote them, the publish copies each once, from
    there to its name under OUT, and lists it in `_SUCCESS`; what a failed attempt wrote is not published."""
    from types import SimpleNamespace

    from jobs.sinks.kinds import ParquetSink

    for key, value in KEYS.items():
        monkeypatch.setenv(key, value)
    run = OutputRun(f"s3://lake/parquet-out?endpoint_override={s3.endpoint}&scheme=http")
    reports = []
    for attempt, split in (("0-0-1", 0), ("0-1-2", 1), ("0-1-1", 1)):  # the last one failed
        path = f"_attempts/{attempt}/matched/part-{split:05d}.parquet"
        with run.fs.open_output_stream(f"{run.tmp_path}/{path}") as f:
            f.write(attempt.encode())
        if attempt != "0-1-1":
            reports.append(dict(kind="file", output="matched", path=path, final=path.split("/", 2)[2], rows=1, bytes=5))
    for name in ("summary.json", "messages/part-empty.parquet"):
        with run.fs.open_output_stream(f"{run.tmp_path}/{name}") as f:
            f.write(name.encode())
    counting = CountingCopies(run.fs)
    run.fs = counting
    sink = ParquetSink()
    planned = SimpleNamespace(problems=[])
    options = SimpleNamespace(layout=NORMALIZED, with_body=True, audit_consume_queue=False)
    monkeypatch.setattr("jobs.sinks.kinds.write_empty_tables", lambda *args: {})
    assert sink.commit(run.tmp, reports, planned, options) == {"matched": (2, 2, 10)}
    assert not [p for p in _objects(s3, run.tmp_path) if p.startswith("matched/")]  # nothing moved (copied)
    run.publish(sink.in_attempts())
    finals = ["matched/part-00000.parquet", "matched/part-00001.parquet"]
    assert _objects(s3, "lake/parquet-out") == sorted(finals + ["messages/part-empty.parquet", "summary.json",
                                                                SUCCESS])
    with s3.filesystem().open_input_stream("lake/parquet-out/matched/part-00001.parquet") as f:
        assert f.read() == b"0-1-2"  # the successful attempt's
    parts = sorted(p for p in counting.copied if p.endswith(".parquet") and "/matched/" in p)
    assert parts == sorted(f"{run.tmp_path}/{r['path']}" for r in reports)  # each once, from its attempt
    with s3.filesystem().open_input_stream(f"lake/parquet-out/{SUCCESS}") as f:
        assert sorted(json.loads(f.read())["files"]) == sorted(finals + ["messages/part-empty.parquet",
                                                                         "summary.json"])
