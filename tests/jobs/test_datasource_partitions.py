"""The data source's partitions where units are rebuilt from the commit log (issue 47): planned on the driver
without reading a record, each partition moving its own bounds to record starts in its task; every unit read
once, as RocketMQ's ConsumeQueue holds them (cq.jsonl.gz). No Spark session: the reader's two halves called
in this process."""
import dataclasses

from jobs import datasource
from jobs.task import split_units


def _partitions(store, monkeypatch, **options):
    source = datasource.RocketMQDataSource({"path": str(store), "withBody": "false", **options})
    reader = source.reader(source.schema())
    real = split_units.commitlog_splits
    monkeypatch.setattr(datasource, "commitlog_splits",  # splits of 64 KiB: bounds inside the file, off records
                        lambda plan: real(dataclasses.replace(plan, split_size=64 << 10)))
    return reader, reader.partitions()


def test_rebuilt_units_are_planned_without_a_record_read_and_each_read_once(store_a, store_a_cq, monkeypatch):
    def walked(*args):
        raise AssertionError("the driver walked record headers")
    with monkeypatch.context() as m:
        m.setattr(split_units, "record_cuts", walked)
        reader, partitions = _partitions(store_a / "store", m, unitsFrom="commitlog")
    assert len(partitions) > 4
    rows = [(r["topic"], r["queue_id"], r["queue_offset"]) for p in partitions for batch in reader.read(p)
            for r in batch.to_pylist()]
    want = [(u["topic"], u["queueId"], u["index"]) for u in store_a_cq]
    assert len(rows) == len(set(rows)) and sorted(rows) == sorted(want)
