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

What a part holds is the layout's (jobs/output/layouts.py: which columns, whether messages/ exists); how parts are
cut and whether they are written at all is the sink's task-side writer: `SplitWriter` (Parquet: one file per
output and split; a batch's rows a message at a time, each with its groups), `TableSplitWriter` (Iceberg: a file
per partition), `CountingSplitWriter` (noop: rows counted, nothing written), each named by its sink
(jobs/sinks/kinds.py) in the `SinkSpec` the tasks get. Audits: audit/bitmaps/, audit/corrupt/, audit/bodies/ (only
when there are rows)."""
from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from jobs.errors import output_error
from jobs.ledgers.pop import POP_EVENTS
from jobs.ledgers.timer import TIMER_EVENTS
from jobs.ledgers.traces import TRACE_EVENTS
from jobs.ledgers.transactions import TRANS_EVENTS
from jobs.output.layouts import NORMALIZED, message_fields
from jobs.output.place import Place
from jobs.parquet_files import STATISTICS, parquet_options
from jobs.report.timeline import Timeline
from schemas.arrow_schemas import OUTPUT_MESSAGE_FIELDS, STAT_FIELDS, TOPIC_STAT_FIELDS
from schemas.columns import one_array
from schemas.store import storefs

if TYPE_CHECKING:
    from filtering.topic_replay import MessageRows
    from jobs.output.layouts import Layout

ATTEMPTS = "_attempts"
# What a task returns, a dict per row (pickled back by Spark): `file` rows (kind, output, path, final, rows,
# bytes: where a part was written, its rows and bytes) and counter rows (`stats` per group and topic,
# `topic_stats` per topic: kind, group, topic, stats; `example` of an evaluation error: kind, group, topic,
# reason): tens of rows, where the answer itself has millions.
# Columns of the answer's tables that no row leaves null (a record's fixed header fields, the msg_id made of two of
# them, a row's group and topic): written as required Parquet columns, with no definition level per value to
# encode (a split of the bench store: matched/ 0.256 -> 0.231 CPU-s to write, messages/ 0.247 -> 0.236). Readers
# get the same values (Spark reads every file column as nullable; pyarrow says `not null`).
NEVER_NULL = frozenset({"group", "topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id", "born_timestamp",
                        "store_timestamp", "born_host", "store_host", "reconsume_times", "sys_flag"})
PAIR_TABLES = ("matched", "audit/collisions")  # a row per (group, message): delivered, collided
ANSWER_TABLES = ("matched", "messages", "audit/collisions")  # the answer's tables: those NEVER_NULL speaks of
# A matched or collided row's message integers repeat over its groups' rows (a message's rows together): plain, which
# zstd takes in runs, not delta-encoded (a split of the bench store: 14% fewer bytes, 0.167 -> 0.157 CPU-s to
# write); the timestamps, which also jump between messages, stay smaller delta-encoded
RUN_INTEGERS: tuple[str, ...] = ("queue_id", "queue_offset", "commitlog_offset")


def hive_escape(value: str) -> str:
    """A partition value as Spark and Hive escape it in a path (ExternalCatalogUtils.escapePathName)."""
    out = []
    for ch in value:
        if ord(ch) < 0x20 or ch in '"#%\'*/:=?\\\x7f{[]^':
            out.append(f"%{ord(ch):02X}")
        else:
            out.append(ch)
    return "".join(out)


class SplitWriter:
    """Writes one split's pieces (split_task.iter_split's (kind, piece) pairs) as Parquet parts, streaming:
    one row group per piece, one open writer per output file; sums the split's counters. The Parquet sink's
    task-side writer, and the base of the other sinks' (the parts they cut or count otherwise)."""

    statistics = STATISTICS  # the columns whose min/max a part's footer holds
    run_integers = RUN_INTEGERS  # written plain in pair parts, where a message's rows come together (_pairs)
    writers: dict[str, list[Any]]
    stats: dict[tuple[str, str], list[int]]
    topic_stats: dict[str, list[int]]
    examples: dict[tuple[str, str], str]
    timelines: dict[tuple[str, str], Timeline]
    marks: list[dict[str, Any]]
    clock: Optional[int]

    def __init__(self, spec: SinkSpec, split: int, attempt: str, broker: Optional[str] = None) -> None:
        self.spec, self.split, self.attempt = spec, split, attempt
        self.broker = broker  # the split's broker (ReplayPlan.broker): a `broker` column on every row written
        self.out = Place.of(spec.out)
        self.fs = self.out.fs
        self.writers = {}  # final relative path -> [writer, stream, output, rows]
        self.stats, self.topic_stats, self.examples = {}, {}, {}
        self.timelines = {}  # (group, topic) -> Timeline of the split
        self.marks = []  # rows of split_units.QUEUE_MARKS_SCHEMA: the offsets rebuilt queues reach
        self.clock = None  # the latest store time of the records decoded (the timer ledger's overdue count)

    def write(self, kind: str, piece: Any) -> None:
        with self._writing():
            getattr(self, "_" + kind)(piece)

    @contextlib.contextmanager
    def _writing(self):
        """An OSError writing a part is the output's (exit 2 naming OUT), never "input damaged": the store was
        read before the piece reached the writer."""
        try:
            yield
        except OSError as exc:
            raise output_error(f"--out (its temporary {self.out.uri})", exc) from None

    def _message(self, piece):
        for pairs, output in zip((piece.delivered, piece.collided), PAIR_TABLES):
            if pairs.count:
                self._pairs(output, piece, pairs)
        if self.spec.layout.messages:
            self._messages(piece)

    def _pairs(self, output, piece, pairs):
        """A piece's (group, message) rows of `output` (matched, audit/collisions; `pairs`: filtering/topic_replay.py's
        Pairs): one part per split, at most the layout's chunk at a time; a message at a time with its groups, so
        that each message column repeats in runs, which zstd takes at little cost (measured on a split of the bench
        store: its matched rows 13.5 MB -> 5.4 MB, 0.21 -> 0.18 CPU-s to write, against rows grouped by group)."""
        groups, rows = pairs.by_message()
        names, distinct_ids = self.spec.layout.pair_fields(self.spec.with_body), _distinct_ids(piece)
        final = f"{output}/part-{self.split:05d}.parquet"
        for lo, hi in self.spec.layout.chunks(piece, rows):
            self._append(output, final, group_rows(piece, groups[lo:hi], rows[lo:hi], names, distinct_ids))

    def _messages(self, piece):
        """A piece's messages, once each (the layout's messages/), in a part per topic and split."""
        self._append("messages", f"messages/topic={hive_escape(piece.topic)}/part-{self.split:05d}.parquet",
                     self._message_table(piece))

    def _message_table(self, piece):
        return piece.table.select(message_fields(self.spec.with_body))

    def _bitmap(self, table):
        self._append("audit/bitmaps", f"audit/bitmaps/part-{self.split:05d}.parquet", table)

    def _corrupt(self, table):
        self._append("audit/corrupt", f"audit/corrupt/part-{self.split:05d}.parquet", table)

    def _cq_audit(self, table):
        self._append("audit/consume_queue", f"audit/consume_queue/part-{self.split:05d}.parquet", table)

    def _bodies(self, table):
        self._append("audit/bodies", f"audit/bodies/part-{self.split:05d}.parquet", table)

    def _timer_event(self, table):
        """The timer ledger's events (jobs/ledgers/timer.py): paired by the driver's Spark step, which
        writes timers/ and removes them (jobs/ledgers/timer.py)."""
        self._append(TIMER_EVENTS, f"{TIMER_EVENTS}/part-{self.split:05d}.parquet", table)

    def _timer_clock(self, last):
        self.clock = last if self.clock is None else max(self.clock, last)

    def _pop_event(self, table):
        """The POP ledger's events (jobs/ledgers/pop.py): paired by the driver's Spark step, which
        writes pop/ and removes them (jobs/ledgers/pop.py)."""
        self._append(POP_EVENTS, f"{POP_EVENTS}/part-{self.split:05d}.parquet", table)

    def _trans_event(self, table):
        """The transaction ledger's events (jobs/ledgers/transactions.py): folded by the driver's Spark step,
        which writes transactions/ and removes them."""
        self._append(TRANS_EVENTS, f"{TRANS_EVENTS}/part-{self.split:05d}.parquet", table)

    def _trace_event(self, table):
        """The trace ledgers' events (jobs/ledgers/traces.py): joined by the driver's Spark step, which writes
        traces/ and consumption/ and removes them."""
        self._append(TRACE_EVENTS, f"{TRACE_EVENTS}/part-{self.split:05d}.parquet", table)

    def _stats(self, table):
        for row in table.to_pylist():
            _add(self.stats, (row["group"], row["topic"]), [row[f] for f in STAT_FIELDS])

    def _topic_stats(self, table):
        for row in table.to_pylist():
            _add(self.topic_stats, row["topic"], [row[f] for f in TOPIC_STAT_FIELDS])

    def _timeline(self, table):
        for row in table.to_pylist():
            key = (row["group"], row["topic"])
            self.timelines.setdefault(key, Timeline()).add(
                row["width"], [row["bucket"]], [(row["delivered"], row["collided"], row["filtered"])])

    def _queue_marks(self, table):
        self.marks += table.to_pylist()

    def _example(self, table):
        for row in table.to_pylist():
            self.examples.setdefault((row["group"], row["topic"]), row["reason"])

    def _append(self, output, final, table):
        table = with_broker(table, self.broker)
        entry = self.writers.get(final)
        if entry is None:
            relative = f"{ATTEMPTS}/{self.attempt}/{final}"
            self.out.create_folder_in_place(relative.rsplit("/", 1)[0])
            path = self.out.path(relative)
            stream = self.fs.open_output_stream(path)
            schema = required(table.schema) if output in ANSWER_TABLES else table.schema
            plain = self.run_integers if output in PAIR_TABLES else ()
            writer = pq.ParquetWriter(stream, schema, **parquet_options(schema, self.statistics, plain))
            entry = self.writers[final] = [writer, stream, output, 0]
        if not table.schema.equals(entry[0].schema):  # the required columns (no copy: the same types), and msg_id
            table = table.cast(entry[0].schema)  # plain where a piece's ids repeat (inner batches)
        entry[0].write_table(table)
        entry[3] += table.num_rows

    def close(self) -> list[dict[str, Any]]:
        """The report rows: a `file` row per part written, then the split's counters."""
        rows = []
        for final, (writer, stream, output, n) in sorted(self.writers.items()):
            size = None
            if writer is not None:
                with self._writing():
                    writer.close()
                    size = stream.tell()
                    stream.close()
            path = None if writer is None else f"{ATTEMPTS}/{self.attempt}/{final}"
            rows.append(dict(kind="file", output=output, path=path, final=final, rows=n, bytes=size))
        for (group, topic), counters in sorted(self.stats.items()):
            rows.append(dict(kind="stats", group=group, topic=topic, stats=counters))
        for topic, counters in sorted(self.topic_stats.items()):
            rows.append(dict(kind="topic_stats", topic=topic, stats=counters))
        for (group, topic), reason in sorted(self.examples.items()):
            rows.append(dict(kind="example", group=group, topic=topic, reason=reason))
        for (group, topic), timeline in sorted(self.timelines.items()):
            rows.append(dict(kind="timeline", group=group, topic=topic, **timeline.report()))
        rows += [dict(kind="queue_marks", **m) for m in self.marks]
        if self.clock is not None:
            rows.append(dict(kind="timer_clock", last=self.clock))
        return [dict(r, broker=self.broker) for r in rows]

    def abort(self) -> None:
        for writer, stream, _, _ in self.writers.values():
            if writer is not None:
                try:
                    writer.close()
                    stream.close()
                except Exception:  # noqa: BLE001 - the attempt failed anyway; the driver removes its files
                    pass


class TableSplitWriter(SplitWriter):
    """The Iceberg sink's task-side writer: parts cut as the tables' partitions (jobs/sinks/iceberg/tables.py).
    A messages part holds its topic as a column, last (no hive path); a matched or collided part holds one
    group, with statistics of `group` (from which add_files reads the partition of a file)."""

    statistics = STATISTICS + ["group", "broker"]
    run_integers: tuple[str, ...] = ()  # a part per group (_pairs): its offsets ascend, no run

    def _pairs(self, output, piece, pairs):
        groups, rows = pairs
        names = self.spec.layout.pair_fields(self.spec.with_body)
        # a file per group: the pairs come by group (np.nonzero of a groups x messages matrix), so each group's
        # rows are one run; msg_id taken, not a dictionary of the whole piece's ids per file
        for lo, hi in self.spec.layout.chunks(piece, rows):
            cuts = np.flatnonzero(np.diff(groups[lo:hi])) + 1 + lo
            for a, b in zip(np.r_[lo, cuts], np.r_[cuts, hi]):
                name = piece.groups[int(groups[a])].as_py()
                self._append(output, f"{output}/group={hive_escape(name)}/part-{self.split:05d}.parquet",
                             group_rows(piece, groups[a:b], rows[a:b], names, False))

    def _message_table(self, piece):
        table = super()._message_table(piece)
        return table.append_column("topic", pa.repeat(pa.scalar(piece.topic, pa.string()), table.num_rows))


class CountingSplitWriter(SplitWriter):
    """The noop sink's task-side writer: every decision made, the rows each part would have counted, nothing
    written (a `file` report row with no path)."""

    def _pairs(self, output, piece, pairs):
        self._count(output, f"{output}/part-{self.split:05d}.parquet", pairs.count)  # counted, not listed

    def _append(self, output, final, table):
        self._count(output, final, table.num_rows)

    def _count(self, output, final, n):
        self.writers.setdefault(final, [None, None, output, 0])[3] += n


@dataclass(frozen=True)
class SinkSpec:
    """Where and how the tasks write; shipped to executors with the plan. `writer`: the sink's task-side writer
    (SplitWriter or a subclass), which a task opens per split (`open`)."""

    out: Union[Place, str]  # the temporary OUT: a jobs/output/place.Place (resolved on the driver), or a path or URI
    layout: Layout = NORMALIZED  # a jobs/output/layouts.py layout: the columns and outputs a part holds
    with_body: bool = True
    writer: type[SplitWriter] = SplitWriter

    def open(self, split: int, attempt: str, broker: Optional[str] = None) -> SplitWriter:
        """The writer of one split's attempt."""
        return self.writer(self, split, attempt, broker)


def required(schema: pa.Schema) -> pa.Schema:
    """`schema` with its NEVER_NULL fields not nullable."""
    return pa.schema([f.with_nullable(False) if f.name in NEVER_NULL else f for f in schema], schema.metadata)


def with_broker(table: pa.Table, broker: Optional[str]) -> pa.Table:
    """`table` with its `broker` column (a dictionary of one value: nothing copied per row); before a last
    `topic` column (a table's messages part), so that every part of a table has one column order. None:
    the table as it is (a writer outside a run of brokers)."""
    if broker is None or "broker" in table.column_names:
        return table
    column = pa.DictionaryArray.from_arrays(pa.array(np.zeros(table.num_rows, np.int32)), pa.array([broker]))
    at = table.num_columns - 1 if table.column_names and table.column_names[-1] == "topic" else table.num_columns
    return table.add_column(at, "broker", column)


def group_rows(piece: MessageRows, groups: np.ndarray, rows: np.ndarray, names: Sequence[str],
               distinct_ids: bool) -> pa.Table:
    """The (group, message) rows of a MessageRows piece, `groups` and `rows` its index pairs: group, topic
    and the `names` columns of each row's message. group, topic and msg_id are dictionary columns over
    values that are distinct (the topic's groups, the piece's messages: a message is in some five groups'
    rows; msg_id only when `distinct_ids`, see _distinct_ids), so that nothing is copied or hashed; the rest
    is taken. (A dictionary with repeated values makes Arrow re-encode the column, and with null rows it
    writes bytes that differ from run to run.)"""
    indices = pa.array(rows.astype(np.int32))
    columns = {"group": pa.DictionaryArray.from_arrays(pa.array(groups.astype(np.int32)), piece.groups),
               "topic": pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(rows), np.int32)),
                                                       pa.array([piece.topic]))}
    for name in names:
        column = one_array(piece.table.column(name))
        columns[name] = (pa.DictionaryArray.from_arrays(indices, column) if name == "msg_id" and distinct_ids
                         else column.take(indices))
    return pa.table(columns)


def _distinct_ids(piece):
    """Whether the piece's message ids are distinct and set: an id is the store's address and the record's
    commit-log offset, and a piece's rows are in log order, so strictly increasing offsets say it (a
    consume queue that points twice at one record does not)."""
    offsets = one_array(piece.table.column("commitlog_offset")).to_numpy()
    return piece.table.column("msg_id").null_count == 0 and bool((offsets[1:] > offsets[:-1]).all())


def _add(into, key, values):
    into[key] = [a + b for a, b in zip(into[key], values)] if key in into else list(values)


# parts moved at a time by the driver's commit: on an object store each move is a copy and a delete (requests that
# wait on the network, not on the driver's CPU); on a local disk a rename
MOVE_THREADS = 16


def commit(out: Union[Place, str], reports: Sequence[Mapping[str, Any]],
           move: bool = True) -> dict[str, tuple[int, int, int]]:
    """Keep exactly the files the successful attempts reported: move each to its final name (MOVE_THREADS at a
    time), then remove _attempts/ with everything else in it. `out`: the temporary OUT (a Place, or a path or
    URI). move=False: the files stay where their attempts wrote them, _attempts/ with them (attempt_parts: an
    Iceberg run on an object store copies each once, into its table, and removes _attempts/ then). Returns
    {output: (files, rows, bytes)}."""
    out = Place.of(out)
    written: dict[str, tuple[int, int, int]] = {}
    for r in reports:
        if r["kind"] != "file":
            continue
        files, rows, size = written.get(r["output"], (0, 0, 0))
        written[r["output"]] = (files + (r["path"] is not None), rows + r["rows"], size + (r["bytes"] or 0))
    if move:
        move_all(out.fs, [(out.path(p), out.path(final)) for parts in attempt_parts(reports).values()
                          for p, final in parts])
        remove_attempts(out)
    return written


def attempt_parts(reports: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[str, str]]]:
    """{output: [(file a successful attempt wrote, its final name), ...]}, both relative to the temporary OUT."""
    out: dict[str, list[tuple[str, str]]] = {}
    for r in reports:
        if r["kind"] == "file" and r["path"] is not None:
            out.setdefault(r["output"], []).append((r["path"], r["final"]))
    return out


def remove_attempts(out: Place) -> None:
    """_attempts/ removed with whatever failed, retried or speculative attempts left there."""
    if out.fs.get_file_info(out.path(ATTEMPTS)).type != pafs.FileType.NotFound:
        out.fs.delete_dir(out.path(ATTEMPTS))


def move_all(fs: pafs.FileSystem, moves: Sequence[tuple[str, str]],
             target_fs: Optional[pafs.FileSystem] = None) -> Any:
    """Move each (path, target) pair, MOVE_THREADS at a time, their folders made first: a rename (a copy and a
    delete on an object store: pyarrow's move), or a copy and a delete where the target is on another filesystem
    (`target_fs`) or another local device."""
    target_fs = target_fs or fs
    local = storefs.is_local(fs) and storefs.is_local(target_fs)
    for folder in sorted({target.rsplit("/", 1)[0] for _, target in moves}):
        target_fs.create_dir(folder, recursive=True)

    def move(pair: tuple[str, str]) -> Any:
        if target_fs is fs or local:
            try:
                return fs.move(*pair)
            except OSError:
                if not local:
                    raise  # another device: rename cannot cross it, a copy can
        pafs.copy_files(pair[0], pair[1], source_filesystem=fs, destination_filesystem=target_fs)
        fs.delete_file(pair[0])
    if len(moves) <= 1:
        return [move(pair) for pair in moves]
    with ThreadPoolExecutor(min(MOVE_THREADS, len(moves))) as pool:
        list(pool.map(move, moves))


def write_driver_part(out: Union[Place, str], output: str, table: pa.Table, name: str = "driver") -> None:
    """A part the driver writes itself (audit rows of listing and config problems): part-<name>.parquet."""
    out = Place.of(out)
    out.fs.create_dir(out.path(output), recursive=True)
    with out.fs.open_output_stream(out.path(f"{output}/part-{name}.parquet")) as stream:
        pq.write_table(table, stream, **parquet_options(table.schema))


def answer_schema(output: str, layout: Layout, with_body: bool) -> pa.Schema:
    """The Arrow schema of an answer table as readers see it: matched/ and audit/collisions/ rows (group,
    topic, then the layout's message columns, then broker), messages/ rows (broker, then topic last, as
    Spark adds the partition column)."""
    types = dict(OUTPUT_MESSAGE_FIELDS)
    if output == "messages":
        fields = [(f, types[f]) for f in message_fields(with_body)]
        return pa.schema(fields + [("broker", pa.string()), ("topic", pa.string())])
    fields = [(f, types[f]) for f in layout.pair_fields(with_body)]
    return pa.schema([("group", pa.string()), ("topic", pa.string())] + fields + [("broker", pa.string())])


def write_empty_tables(out: Union[Place, str], layout: Layout, with_body: bool,
                       written: Mapping[str, tuple[int, int, int]]) -> dict[str, tuple[int, int, int]]:
    """A part of zero rows for each answer table no task wrote (an empty window, no backlog, a quiet night),
    so that every answer is a table a reader can load: {output: (files, rows, bytes)} of those parts.
    messages/ is not in the wide layout."""
    out = Place.of(out)
    fs, root = out.fs, out.root
    made: dict[str, tuple[int, int, int]] = {}
    for output in ANSWER_TABLES:
        if written.get(output, (0,))[0] or (output == "messages" and not layout.messages):
            continue
        schema = answer_schema(output, layout, with_body)
        fs.create_dir(f"{root}/{output}", recursive=True)
        with fs.open_output_stream(f"{root}/{output}/part-empty.parquet") as stream:
            pq.write_table(schema.empty_table(), stream, **parquet_options(schema))
            made[output] = (1, 0, stream.tell())
    return made
