"""Turn a copy of a store into a 5.2+ `storeType=defaultRocksDB` one: its consume queue a RocksDB, its consumer
offsets too. Keys and values as RocketMQ's Java code writes them (RocksDBConsumeQueueTable.buildCQKeyByteBuffer /
buildCQValueByteBuffer, RocksDBConsumeQueueOffsetTable's min/max entries, RocksDBConsumerOffsetManager's
`topic@group` -> fastjson {"offsetTable": ...}; schemas/queues/rocksdb_store.py reads them), written with rocksdict,
which links RocksDB's own library. The units are the store's own (file queue and ext tag codes resolved): a
RocksDB consume queue holds the tag hash, never an ext address.

    python -m tools.rocksdb_store_writer STORE_COPY [--keep-files] [--offsets]"""
import argparse
import json
import shutil
import struct
import sys
from pathlib import Path

from schemas.queues.rocksdb_store import cq_key
from schemas.store.config import CONSUMER_OFFSET_FILE, load_consumer_offsets
from schemas.store.local_api import read_consume_queues, read_messages


def _offset_key(topic, queue_id, which):
    t = topic.encode("utf-8")
    return struct.pack(">i", len(t)) + b"\x01" + t + b"\x01" + which + b"\x01" + struct.pack(">i", queue_id)


def write_rocksdb_consume_queue(store, keep_files=False):
    """Replace store/consumequeue (and consumequeue_ext) with a RocksDB of the same units; keep_files leaves the
    files beside it (5.3.1+ double write)."""
    from rocksdict import Options, Rdict, WriteBatch

    store = Path(store)
    units = read_consume_queues(str(store)).to_pylist()
    records = read_messages(str(store), with_body=False)
    stored_at = dict(zip(records.column("commitlog_offset").to_pylist(), records.column("store_timestamp").to_pylist()))
    if not keep_files:
        shutil.rmtree(store / "consumequeue")
        shutil.rmtree(store / "consumequeue_ext", ignore_errors=True)
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    db = Rdict(str(store / "consumequeue"), options, column_families={"offset": Options(raw_mode=True)})
    offsets = db.get_column_family("offset")
    batch, bounds = WriteBatch(raw_mode=True), {}
    for u in sorted(units, key=lambda u: (u["topic"], u["queue_id"], u["queue_offset"])):
        value = struct.pack(">qiqq", u["commitlog_offset"], u["size"], u["tags_code"] or 0,
                            stored_at.get(u["commitlog_offset"], 0))
        batch.put(cq_key(u["topic"], u["queue_id"], u["queue_offset"]), value)
        key = (u["topic"], u["queue_id"])
        bounds[key] = (bounds.get(key, (u, u))[0], u)
    db.write(batch)
    for (topic, qid), (lo, hi) in bounds.items():
        offsets.put(_offset_key(topic, qid, b"min"), struct.pack(">qq", lo["commitlog_offset"], lo["queue_offset"]))
        offsets.put(_offset_key(topic, qid, b"max"), struct.pack(">qq", hi["commitlog_offset"], hi["queue_offset"]))
    db.flush()
    db.close()
    _as_java_leaves_it(store / "consumequeue")
    return len(units)


def write_rocksdb_consumer_offsets(store, offsets=None):
    """config/consumerOffsets/ as RocksDBConsumerOffsetManager writes it, from consumerOffset.json (removed) or
    from `offsets` {(topic, group): {queue_id: offset}}."""
    from rocksdict import Options, Rdict

    config = Path(store) / "config"
    if offsets is None:
        offsets = load_consumer_offsets(config / CONSUMER_OFFSET_FILE)
        (config / CONSUMER_OFFSET_FILE).unlink()
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    db = Rdict(str(config / "consumerOffsets"), options)
    for (topic, group), table in offsets.items():
        value = json.dumps({"offsetTable": {str(q): o for q, o in table.items()}}, separators=(",", ":"))
        db.put(f"{topic}@{group}".encode("utf-8"), value.encode("utf-8"))
    db.flush()
    db.close()
    _as_java_leaves_it(config / "consumerOffsets")


def _as_java_leaves_it(path):
    """Without the side file rocksdict keeps its own options in: RocketMQ's RocksDBs have none."""
    (path / "rocksdict-config.json").unlink(missing_ok=True)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tools.rocksdb_store_writer", description=__doc__.splitlines()[0])
    p.add_argument("store", help="a COPY of a store: its consume queue is replaced")
    p.add_argument("--keep-files", action="store_true", help="keep the consume-queue files beside the RocksDB")
    p.add_argument("--offsets", action="store_true", help="also move consumerOffset.json into config/consumerOffsets/")
    args = p.parse_args(argv)
    n = write_rocksdb_consume_queue(args.store, args.keep_files)
    if args.offsets:
        write_rocksdb_consumer_offsets(args.store)
    print(f"{args.store}/consumequeue: a RocksDB of {n:,} units")
    return 0


if __name__ == "__main__":
    sys.exit(main())
