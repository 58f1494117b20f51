"""Writing a split's answer: each task writes its own Parquet parts with pyarrow and hands Spark only a
small report (one row per file, and its counters); the driver commits the files of successful attempts.

The commit protocol is Spark's own, done by hand (as Spark's FileOutputCommitter and the data source
writers that return metadata do):
  1. a task attempt writes under OUT.tmp-*/_attempts/<stage>-<partition>-<attempt id>/, so that no two
     attempts (retried, speculative) share a file;
  2. its report reaches the driver only if the attempt succeeded (Spark keeps one result per partition);
  3. after the job, the driver moves exactly the reported files to their final names (by split, so a
     rerun writes the same files with the same rows in the same order) and deletes _attempts/ whole,
     with whatever failed or speculative attempts left there.

Layouts (OUT/...):
  normalized  messages/topic=T/part-S.parquet: every message some output row references, once, with all
              its columns; matched/ and audit/collisions/: one narrow row per (group, message), joinable
              on (topic, commitlog_offset); one file per split, rows ordered by group within a batch.
  wide        matched/ and audit/collisions/ rows carry every message column (small per-group exports).
Audits: audit/bitmaps/, audit/corrupt/ (only when there are rows)."""
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from schemas import storefs
from schemas.arrow_schemas import OUTPUT_MESSAGE_FIELDS, STAT_FIELDS, TOPIC_STAT_FIELDS

ATTEMPTS = "_attempts"
# the narrow row of matched/ and audit/collisions/ (besides group and topic)
NARROW_FIELDS = ["queue_id", "queue_offset", "commitlog_offset", "msg_id", "tags", "keys", "born_timestamp",
                 "store_timestamp"]
BITMAP_FIELDS = ["topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id", "store_timestamp",
                 "stored_bitmap", "recomputed_bitmap", "reason", "groups_missing"]
CORRUPT_FIELDS = ["file", "offset", "topic", "queue_id", "queue_offset", "reason"]
CORRUPT_SCHEMA = pa.schema([("file", pa.string()), ("offset", pa.int64()), ("topic", pa.string()),
                            ("queue_id", pa.int32()), ("queue_offset", pa.int64()), ("reason", pa.string())])
# What a task returns: `file` rows (where a part was written, its rows and bytes) and counter rows
# (`stats` per group and topic, `topic_stats` per topic, `example` of an evaluation error).
REPORT_SCHEMA = pa.schema([
    ("kind", pa.string()), ("output", pa.string()), ("path", pa.string()), ("final", pa.string()),
    ("rows", pa.int64()), ("bytes", pa.int64()), ("group", pa.string()), ("topic", pa.string()),
    ("stats", pa.list_(pa.int64())), ("reason", pa.string()),
])
# Measured on the bench store (tools/bench.py): zstd level 1 writes as fast as snappy and 30% smaller;
# dictionaries pay for the repeated strings (tags, keys, topics, hosts), not for bodies or message ids.
PARQUET_OPTIONS = dict(compression="zstd", compression_level=1, write_statistics=True)
NO_DICTIONARY = {"body", "msg_id", "properties", "stored_bitmap", "recomputed_bitmap"}


@dataclass(frozen=True)
class SinkSpec:
    """Where and how the tasks write; shipped to executors with the plan."""

    out_uri: str  # the temporary OUT (a path or URI pyarrow resolves)
    layout: str = "normalized"  # normalized | wide | noop (decide everything, write nothing)
    with_body: bool = True


def hive_escape(value):
    """A partition value as Spark and Hive escape it in a path (ExternalCatalogUtils.escapePathName)."""
    out = []
    for ch in value:
        if ord(ch) < 0x20 or ch in '"#%\'*/:=?\\\x7f{[]^':
            out.append(f"%{ord(ch):02X}")
        else:
            out.append(ch)
    return "".join(out)


class SplitWriter:
    """Writes one split's result tables (split_task's RESULT_SCHEMA batches) as Parquet parts, streaming:
    one row group per batch, one open writer per output file."""

    def __init__(self, spec, split, attempt):
        self.spec, self.split, self.attempt = spec, split, attempt
        self.fs, self.root = storefs.resolve(spec.out_uri)
        self.writers = {}  # final relative path -> (writer, stream, output, rows)
        self.stats, self.topic_stats, self.examples = {}, {}, {}

    def write(self, table):
        kinds = pc.dictionary_encode(table.column("kind")).combine_chunks()
        names = kinds.dictionary.to_pylist()
        codes = kinds.indices.to_numpy(zero_copy_only=False)
        for code, kind in enumerate(names):
            rows = table.filter(pa.array(codes == code))
            getattr(self, "_" + kind)(rows)

    def _message(self, rows):
        for lists, output in (("delivered", "matched"), ("collided", "audit/collisions")):
            exploded = _per_group(rows, lists)
            if exploded.num_rows:
                narrow = self.spec.layout != "wide"
                fields = NARROW_FIELDS if narrow else [f for f, _ in OUTPUT_MESSAGE_FIELDS if self._keeps(f)]
                self._append(output, f"{output}/part-{self.split:05d}.parquet",
                             exploded.select(["group", "topic"] + fields))
        if self.spec.layout != "wide":  # normalized, or noop (counted as normalized, not written)
            fields = [f for f, _ in OUTPUT_MESSAGE_FIELDS if self._keeps(f)]
            topics = rows.column("topic").unique().to_pylist()
            for topic in topics:
                part = rows if len(topics) == 1 else rows.filter(pc.equal(rows.column("topic"), topic))
                self._append("messages", f"messages/topic={hive_escape(topic)}/part-{self.split:05d}.parquet",
                             part.select(fields))

    def _keeps(self, field):
        return self.spec.with_body or field != "body"

    def _bitmap(self, rows):
        self._append("audit/bitmaps", f"audit/bitmaps/part-{self.split:05d}.parquet", pa.table({
            **{f: rows.column(f) for f in BITMAP_FIELDS[:6]},
            "stored_bitmap": _hex(rows.column("stored_bitmap")),
            "recomputed_bitmap": _hex(rows.column("recomputed_bitmap")),
            "reason": rows.column("reason"), "groups_missing": rows.column("detail")}))

    def _corrupt(self, rows):
        self._append("audit/corrupt", f"audit/corrupt/part-{self.split:05d}.parquet",
                     rows.select(CORRUPT_FIELDS).cast(CORRUPT_SCHEMA))

    def _stats(self, rows):
        _add_counters(self.stats, zip(rows.column("group").to_pylist(), rows.column("topic").to_pylist()),
                      rows.column("stats"), len(STAT_FIELDS))

    def _topic_stats(self, rows):
        _add_counters(self.topic_stats, rows.column("topic").to_pylist(), rows.column("stats"),
                      len(TOPIC_STAT_FIELDS))

    def _example(self, rows):
        for group, topic, reason in zip(*(rows.column(c).to_pylist() for c in ("group", "topic", "reason"))):
            self.examples.setdefault((group, topic), reason)

    def _append(self, output, final, table):
        if self.spec.layout == "noop":
            self.writers.setdefault(final, [None, None, output, 0])[3] += table.num_rows
            return
        entry = self.writers.get(final)
        if entry is None:
            path = f"{self.root}/{ATTEMPTS}/{self.attempt}/{final}"
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            stream = self.fs.open_output_stream(path)
            dictionary = [f.name for f in table.schema if f.name not in NO_DICTIONARY]
            writer = pq.ParquetWriter(stream, table.schema, use_dictionary=dictionary, **PARQUET_OPTIONS)
            entry = self.writers[final] = [writer, stream, output, 0]
        entry[0].write_table(table)
        entry[3] += table.num_rows

    def close(self):
        """The report: a `file` row per part written, then the split's counters."""
        rows = []
        for final, (writer, stream, output, n) in sorted(self.writers.items()):
            size = None
            if writer is not None:
                writer.close()
                size = stream.tell()
                stream.close()
            path = None if writer is None else f"{ATTEMPTS}/{self.attempt}/{final}"
            rows.append(dict(kind="file", output=output, path=path, final=final, rows=n, bytes=size))
        for (group, topic), counters in sorted(self.stats.items()):
            rows.append(dict(kind="stats", group=group, topic=topic, stats=counters.tolist()))
        for topic, counters in sorted(self.topic_stats.items()):
            rows.append(dict(kind="topic_stats", topic=topic, stats=counters.tolist()))
        for (group, topic), reason in sorted(self.examples.items()):
            rows.append(dict(kind="example", group=group, topic=topic, reason=reason))
        return pa.Table.from_pylist(rows, schema=REPORT_SCHEMA)

    def abort(self):
        for writer, stream, _, _ in self.writers.values():
            if writer is not None:
                try:
                    writer.close()
                    stream.close()
                except Exception:  # noqa: BLE001 - the attempt failed anyway; the driver removes its files
                    pass


def _per_group(rows, lists):
    """One row per (group, message) of the message rows, from their group list column."""
    rows = rows.drop_columns(["group"])
    groups = rows.column(lists).combine_chunks()
    parents = pc.list_parent_indices(groups)
    if not len(parents):
        return rows.slice(0, 0).append_column("group", pa.array([], pa.string()))
    flat = pc.list_flatten(groups)
    order = pc.sort_indices(pa.table({"g": flat, "i": parents}), [("g", "ascending"), ("i", "ascending")])
    return rows.take(pc.take(parents, order)).append_column("group", pc.take(flat, order))


def _hex(column):
    """Bitmaps as upper-case hex text (few rows: audits only; Arrow has no hex kernel)."""
    return pa.array([None if v is None else v.hex().upper() for v in column.to_pylist()], pa.string())


def _add_counters(into, keys, lists, width):
    values = pc.list_flatten(lists).to_numpy().reshape(-1, width)
    for key, row in zip(keys, values):
        if key in into:
            into[key] += row
        else:
            into[key] = row.copy()


def commit(out_uri, reports):
    """Keep exactly the files the successful attempts reported: move each to its final name, then remove
    _attempts/ with everything else in it. Returns {output: (files, rows, bytes)}."""
    fs, root = storefs.resolve(out_uri)
    written = {}
    for r in reports:
        if r["kind"] != "file":
            continue
        if r["path"] is not None:
            target = f"{root}/{r['final']}"
            fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
            fs.move(f"{root}/{r['path']}", target)
        files, rows, size = written.get(r["output"], (0, 0, 0))
        written[r["output"]] = (files + (r["path"] is not None), rows + r["rows"], size + (r["bytes"] or 0))
    if fs.get_file_info(f"{root}/{ATTEMPTS}").type != pafs.FileType.NotFound:
        fs.delete_dir(f"{root}/{ATTEMPTS}")
    return written


def write_driver_part(out_uri, output, table):
    """A part the driver writes itself (audit rows of listing and config problems)."""
    fs, root = storefs.resolve(out_uri)
    fs.create_dir(f"{root}/{output}", recursive=True)
    with fs.open_output_stream(f"{root}/{output}/part-driver.parquet") as stream:
        pq.write_table(table, stream, **PARQUET_OPTIONS)
