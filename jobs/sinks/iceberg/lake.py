"""What an Iceberg lake holds, kept where expiring snapshots cannot take it: the table `NS._mqreplay_ranges`, a row
per (store, broker, group, topic, queue) and run, the queue offsets [first, end) the run committed for that group
(as the Iceberg Kafka Connect sink keeps its offsets with its commits, not in a snapshot's summary that expiry
removes). A run's ranges are committed last, after every table of its answer: a run counts once its ranges are
there (a run of no offsets, a quiet night, commits a marker row of no topic).

- A store is known by what it is (`brokers.store_identity`: the broker's name and the storeHost of its commit
  log's first record, with that record's offset and store time), never by the `--store` text: a trailing
  slash, `file://`, a symlink or a copy continue the same rows. A store whose retention removed the recorded
  first record is still the same store (same name and host, a later first record).
- The overlap check, the continuation and the held offsets are per group: a group added later is backfilled over
  offsets the other groups already hold, and rows a group already holds are never written again (`held_scope`:
  known before Spark starts, out of the group's scope in the plan; the ranges are read for the run's stores only).
- A run killed between two tables' commits left data files under `data/run-<run>/` of a run the ranges do not
  name: the next run (or `jobs.maintain`) removes them from the tables first (`repair`), so each row counts once.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Collection, Iterable, Mapping, Optional, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from jobs.errors import UsageError
from jobs.ledgers.pop import pop_topics

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from filtering.subscriptions import CompiledSubscription
    from jobs.output.place import Place
    from jobs.plan.build import Planned

    Range = tuple[str, str, str, int, int, int]  # (broker, group, topic, queue, first, end)
    HeldSpan = tuple[str, str, int, int, int]  # (group, topic, queue, first, end) of a broker
    Intervals = dict[tuple[str, str, str, int], list[tuple[int, int]]]  # (broker, group, topic, queue): spans
    Pairs = Mapping[str, Collection[tuple[str, str]]]  # {broker: {(group, topic)}}

RANGES = "_mqreplay_ranges"
RANGES_SCHEMA = pa.schema([("store", pa.string()), ("head", pa.string()), ("broker", pa.string()),
                           ("group", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
                           ("first", pa.int64()), ("end", pa.int64()), ("run", pa.string()),
                           ("committed_ms", pa.int64())])
RUN_DIR = re.compile(r"/data/run-([0-9A-Za-z_-]+)/")
RUN = "mqreplay.run"  # the snapshot property naming the run that committed it
REPAIRED = "mqreplay.repaired"  # a repair's snapshot: the runs whose files it removed
# the ranges' group of the topics the POP ledger reads whatever the subscriptions (the revive log, the wheel): a
# night continues them where the last ended, as the nights chained by offsets.json do; never an overlap refused
# (no row of the answer is theirs, and NS.pop merges evidence read again)
LEDGER_READS = "%POP_LEDGER%"


@dataclass(frozen=True)
class StoreRef:
    """A broker of the run and what its store is (brokers.store_identity)."""

    broker: str
    key: str
    head: str = ""

    def holds(self, row: Mapping[str, Any]) -> bool:
        """Whether a ranges row ({"store", "head", ...}) is of this store (held_mask)."""
        return self.held_mask(pa.table({"store": [row["store"]], "head": [row["head"]]}))[0].as_py()

    def held_mask(self, table: pa.Table) -> pa.ChunkedArray:
        """Per row of an Arrow table of ranges rows, whether it is of this store: the same key, and the same first
        record or an earlier one (retention removed it since); a row or a ref without a first record: the key."""
        mine = pc.equal(table.column("store"), self.key)
        if not self.head:
            return mine
        head = pc.fill_null(table.column("head").cast(pa.string()), "")
        offset = pc.cast(pc.list_element(pc.split_pattern(pc.if_else(pc.equal(head, ""), "0", head), ":"), 0),
                         pa.int64())
        same_or_earlier = pc.or_(pc.or_(pc.equal(head, ""), pc.equal(head, self.head)),
                                 pc.less(offset, int(self.head.split(":")[0])))
        return pc.and_(mine, same_or_earlier)


def load(catalog: Catalog, identifier: str) -> Optional[Table]:
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
    try:
        return catalog.load_table(identifier)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


class Held:
    """The rows of NS._mqreplay_ranges of the run's stores (none for a new lake), kept as Arrow columns (a row per
    group, queue and night: a year of nights stays a few MB, never a Python object a row), and every run the table
    names."""

    def __init__(self, rows: Union[pa.Table, Iterable[Mapping[str, Any]]],
                 runs: Optional[Iterable[str]] = None) -> None:
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(list(rows), schema=_HELD_SCHEMA)
        self.table = table.select(_HELD_SCHEMA.names).filter(pc.not_equal(table.column("topic"), ""))
        self.runs = set(pc.unique(table.column("run")).to_pylist()) if runs is None else set(runs)

    @classmethod
    def of(cls, catalog: Catalog, namespace: str, refs: Optional[Collection[StoreRef]] = None) -> Held:
        """The lake's ranges of `refs`' stores (None: every store's; (): none, the runs only), read with the store
        pushed into the scan; the runs of every store, read as one column (a repair must know every run that
        committed)."""
        from pyiceberg.expressions import In
        table = load(catalog, f"{namespace}.{RANGES}")
        if table is None:
            return cls([])
        runs = pc.unique(table.scan(selected_fields=("run",)).to_arrow().column("run")).to_pylist()
        if refs is not None and not refs:
            return cls([], runs)
        scan = table.scan(selected_fields=_HELD_SCHEMA.names) if refs is None else table.scan(
            row_filter=In("store", {r.key for r in refs}),  # type: ignore[call-arg, arg-type]  # pyiceberg's own form
            selected_fields=_HELD_SCHEMA.names)
        return cls(scan.to_arrow(), runs)

    def intervals(self, refs: Iterable[StoreRef]) -> Intervals:
        """{(broker, group, topic, queue): [(first, end), ...]}: the offsets each group holds of the run's stores,
        touching ranges merged (a key's nights become one span, however many nights the table holds)."""
        out: Intervals = {}
        for ref in refs:
            spans = self._of(ref).group_by(KEY, use_threads=False).aggregate([("first", "list"), ("end", "list")])
            columns = (spans.column(c).to_pylist() for c in (*KEY, "first_list", "end_list"))
            for g, t, q, firsts, ends in zip(*columns):
                out[(ref.broker, g, t, q)] = _merged(zip(firsts, ends))
        return out

    def rows_over(self, refs: Iterable[StoreRef], broker: str, group: str, topic: str, queue: int, first: int,
                  end: int) -> list[tuple[int, int, str]]:
        """[(first, end, run)] of the rows of (broker, group, topic, queue) that overlap [first, end): who holds it."""
        out: list[tuple[int, int, str]] = []
        for mine in (self._of(ref) for ref in refs if ref.broker == broker):
            hit = pc.and_(pc.and_(pc.equal(mine.column("group"), group), pc.equal(mine.column("topic"), topic)),
                          pc.and_(pc.equal(mine.column("queue_id"), queue),
                                  pc.and_(pc.less(mine.column("first"), end), pc.greater(mine.column("end"), first))))
            found = mine.filter(hit)
            out += zip(*(found.column(c).to_pylist() for c in ("first", "end", "run")))
        return sorted(out)

    def _of(self, ref):
        """The rows of one ref's store."""
        return self.table.filter(ref.held_mask(self.table))


KEY = ("group", "topic", "queue_id")
_HELD_SCHEMA = pa.schema([RANGES_SCHEMA.field(n) for n in ("store", "head", "group", "topic", "queue_id", "first",
                                                           "end", "run")])


def held_scope(held: Held, refs: Iterable[StoreRef], ranges: Collection[Range],
               pairs: Optional[Pairs] = None) -> dict[str, tuple[HeldSpan, ...]]:
    """{broker: ((group, topic, queue, first, end), ...)}: the offsets of the run's `ranges` (run_ranges) that a
    group already holds, merged, clipped to the run's range; the tasks leave them out of the group's scope
    (ReplayPlan.held), so that no task writes a row the lake holds and nothing is trimmed after the stage.
    `pairs` ({broker: {(group, topic)}} of the run): a queue of theirs the plan has no range of (rebuilt from
    the commit log: its offsets are known once its tasks walk it) gets its held offsets whole, merged."""
    intervals = held.intervals(refs)
    out: dict[str, list[HeldSpan]] = {}
    for b, g, t, q, first, end in _answers(ranges):
        out.setdefault(b, []).extend((g, t, q, lo, hi) for lo, hi in _merged(
            (max(hf, first), min(he, end)) for hf, he in intervals.get((b, g, t, q), ()) if hf < end and first < he))
    planned = {(b, t, q) for b, _, t, q, _, _ in ranges}
    for (b, g, t, q), spans in intervals.items():
        if (g, t) in (pairs or {}).get(b, ()) and (b, t, q) not in planned:
            out.setdefault(b, []).extend((g, t, q, lo, hi) for lo, hi in spans)
    return {b: tuple(spans) for b, spans in out.items() if spans}


def _merged(spans):
    """[(lo, hi)] of [lo, hi) spans, sorted, those that touch or overlap made one."""
    merged = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [tuple(m) for m in merged]


def unheld(ranges: Iterable[Range], scope: Mapping[str, Iterable[HeldSpan]]) -> list[Range]:
    """The run's `ranges` (run_ranges) less the offsets its plan left out as held (held_scope): what the run
    commits that no earlier run held when it was planned."""
    cut: dict[tuple[str, str, str, int], list[tuple[int, int]]] = {}
    for b, spans in scope.items():
        for g, t, q, lo, hi in spans:
            cut.setdefault((b, g, t, q), []).append((lo, hi))
    out: list[Range] = []
    for b, g, t, q, first, end in ranges:
        at = first
        for lo, hi in sorted(cut.get((b, g, t, q), ())):
            if lo > at:
                out.append((b, g, t, q, at, lo))
            at = max(at, hi)
        if at < end:
            out.append((b, g, t, q, at, end))
    return out


def run_ranges(parts: Iterable[tuple[str, Planned]]) -> list[Range]:
    """[(broker, group, topic, queue, first, end)] a run covers: each (broker, plan.Planned) part's (broker_ranges)."""
    return [r for broker, planned in parts for r in broker_ranges(broker, planned.plan.subscriptions, planned.ranges)]


def broker_ranges(broker: str, subscriptions: Iterable[CompiledSubscription],
                  ranges: Collection[tuple[str, int, int, int]]) -> list[Range]:
    """[(broker, group, topic, queue, first, end)] of one broker's queue `ranges` ((topic, queue, first, end)), for
    every group of `subscriptions` (CompiledSubscriptions) subscribing the topic, and for LEDGER_READS those of the
    topics the POP ledger reads."""
    topics: dict[str, set[str]] = {}
    for s in subscriptions:
        topics.setdefault(s.sub.topic, set()).add(s.sub.group)
    for topic in pop_topics({t for t, *_ in ranges}) - set(topics):
        topics[topic] = {LEDGER_READS}
    return [(broker, g, topic, int(qid), int(first), int(end)) for topic, qid, first, end in ranges if end > first
            for g in sorted(topics.get(topic, ()))]


def _answers(ranges):
    """The ranges of the run's groups (LEDGER_READS' left out: nothing of the answer is theirs)."""
    return [r for r in ranges if r[1] != LEDGER_READS]


def overlapping(held: Held, refs: Iterable[StoreRef],
                ranges: Iterable[Range]) -> list[tuple[str, str, str, int, int, int, int, int, str]]:
    """[(broker, group, topic, queue, first, end, held first, held end, run)]: the run's ranges a group holds, each
    held row (its run named) that overlaps."""
    intervals = held.intervals(refs)
    return [(b, g, t, q, first, end, hf, he, run) for b, g, t, q, first, end in _answers(ranges)
            if any(first < he and hf < end for hf, he in intervals.get((b, g, t, q), ()))
            for hf, he, run in held.rows_over(refs, b, g, t, q, first, end)]


def refuse_overlaps(namespace: str, held: Held, refs: Sequence[StoreRef], ranges: Iterable[Range]) -> None:
    """UsageError (exit 2, nothing committed) naming the groups, queues and runs a run's offsets overlap."""
    found = overlapping(held, refs, ranges)
    if not found:
        return
    found.sort(key=lambda f: (f[2].startswith("%RETRY%"), f[1], f[2], f[3]))
    several = len(refs) > 1
    shown = "; ".join(f"{g} {t}/{q} [{first}, {end}) held [{hf}, {he}) by run {run}"
                      + (f" of broker {b}" if several else "") for b, g, t, q, first, end, hf, he, run in found[:6])
    more = f"; and {len(found) - 6} more" if len(found) > 6 else ""
    raise UsageError(f"--sink iceberg: {namespace}.matched already holds these offsets of {_stores(refs)}: "
                     f"{shown}{more} (nothing committed; --starting-offsets iceberg continues every group after them)")


def stores_held(catalog: Catalog, namespace: str) -> list[dict[str, Any]]:
    """The (store, head, broker) the lake's ranges name, each once: its stores under every broker name (three
    columns of the ranges table read, not its rows of groups and queues)."""
    table = load(catalog, f"{namespace}.{RANGES}")
    if table is None:
        return []
    found = table.scan(selected_fields=("store", "head", "broker")).to_arrow()
    return found.group_by(["store", "head", "broker"]).aggregate([]).to_pylist()


def refuse_renamed(namespace: str, stores: Iterable[Mapping[str, Any]], refs: Iterable[StoreRef]) -> None:
    """UsageError (exit 2, nothing committed) when the lake holds a store of the run under another broker name
    (`stores`: stores_held's): the same storeHost (or real path) and first record, or an earlier one. A bare store
    is named by its config/topics.json: a copy without it would be taken for a new store and its rows committed
    twice."""
    for ref in refs:
        where = ref.key[len(ref.broker) + 1:]
        for row in stores:
            name = row["broker"]
            same = row["store"] == f"{name}@{where}" and StoreRef(name, row["store"], ref.head).holds(row)
            if name == ref.broker or not same:
                continue
            raise UsageError(f"--sink iceberg: {namespace} holds this store as broker {name} ({row['store']}), and "
                             f"this run names it {ref.broker}: under another name every row of it would be committed "
                             f"again. Give --store {name}=STORE (a bare store is named by its config/topics.json, "
                             "which may be missing from this copy); nothing committed")


def _stores(refs):
    return ", ".join(f"{r.key} (first record {r.head})" if r.head else r.key for r in refs)


def starts(held: Held, refs: Iterable[StoreRef], pairs: Optional[Pairs] = None,
           ) -> dict[str, dict[str, dict[int, int]]]:
    """{broker: {topic: {queue: offset}}} where `--starting-offsets iceberg` starts: per queue, the earliest end
    among the groups that read it (`pairs` {broker: {(group, topic)}} of the run; None: every group the lake
    holds), so every group continues from its own ranges (the offsets a group holds already: held_scope). A queue
    one of those groups holds nothing of starts at the earliest."""
    intervals = held.intervals(refs)
    ends: dict[str, dict[str, dict[int, dict[str, int]]]] = {}
    for (b, g, t, q), spans in intervals.items():
        ends.setdefault(b, {}).setdefault(t, {}).setdefault(q, {})[g] = spans[-1][1]
    out: dict[str, dict[str, dict[int, int]]] = {}
    for ref in refs:
        mine = ends.get(ref.broker, {})
        groups: Optional[dict[str, set[str]]] = None if pairs is None else {}
        if pairs is not None:
            assert groups is not None  # made for `pairs`
            for g, t in pairs.get(ref.broker, ()):
                groups.setdefault(t, set()).add(g)
        for topic, queues in mine.items():
            readers = None if groups is None else groups.get(topic)
            if readers is not None and not readers:
                continue
            for q, by_group in queues.items():
                if readers is not None and not readers <= set(by_group):
                    continue  # a group of the run holds nothing of this queue: from the earliest
                wanted = by_group.values() if readers is None else [by_group[g] for g in readers]
                out.setdefault(ref.broker, {}).setdefault(topic, {})[int(q)] = int(min(wanted))
    return out


def ranges_rows(refs: Iterable[StoreRef], ranges: Iterable[Range], run: str) -> pa.Table:
    """The run's rows of NS._mqreplay_ranges (a marker row when it covered no offsets)."""
    by_broker = {r.broker: r for r in refs}
    now = int(time.time() * 1000)
    rows = [{"store": by_broker[b].key, "head": by_broker[b].head, "broker": b, "group": g, "topic": t,
             "queue_id": q, "first": first, "end": end, "run": run, "committed_ms": now}
            for b, g, t, q, first, end in ranges if b in by_broker]
    rows = rows or [{"store": "", "head": "", "broker": "", "group": "", "topic": "", "queue_id": -1, "first": 0,
                     "end": 0, "run": run, "committed_ms": now}]
    return pa.Table.from_pylist(rows, schema=RANGES_SCHEMA)


def _parts(out, output):
    fs = out.fs
    infos = fs.get_file_info(pafs.FileSelector(out.path(output), recursive=True, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.File and i.path.endswith(".parquet"))


def _rewrite(fs, path, table, keep):
    """Keep the rows of one part where `keep` holds (the part rewritten only when some are dropped)."""
    dropped = len(keep) - int(np.count_nonzero(keep))
    if dropped:
        with fs.open_output_stream(path) as stream:
            pq.write_table(table.filter(pa.array(keep)), stream, compression="zstd")
    return dropped


def trim_messages(out: Place, kept: Iterable[str], present: Mapping[tuple[str, str], np.ndarray]) -> int:
    """Drop, from the run's messages/ parts (`out`: the temporary OUT's place.Place; `kept`: the paths of those
    left where their attempts wrote them), the messages the table already holds (`present`: {(broker, topic):
    commit-log offsets}): a group backfilled over offsets other groups hold references messages stored once."""
    fs = out.fs
    dropped = 0
    for path in _parts(out, "messages") + list(kept) if present else ():
        table = pq.read_table(path, filesystem=fs)
        if not table.num_rows:
            continue
        drop = np.zeros(table.num_rows, dtype=bool)
        for (broker, topic), offsets in present.items():
            same = pc.and_(pc.equal(table.column("broker"), broker), pc.equal(table.column("topic"), topic))
            mine = pc.fill_null(same, False).to_numpy(zero_copy_only=False)
            if mine.any():
                drop |= mine & pc.is_in(table.column("commitlog_offset"), pa.array(offsets)).to_numpy(
                    zero_copy_only=False)
        dropped += _rewrite(fs, path, table, ~drop)
    return dropped


def messages_present(table: Optional[Table], held: Held, refs: Iterable[StoreRef],
                     ranges: Iterable[Range]) -> dict[tuple[str, str], np.ndarray]:
    """{(broker, topic): commit-log offsets} of the messages NS.messages holds in the queue ranges of the run that
    earlier runs (any group) covered: what trim_messages drops. Empty (nothing read) when no range overlaps: a
    night after the last reads nothing here."""
    from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan
    if table is None:
        return {}
    covered: dict[tuple[str, str, int], list[tuple[int, int]]] = {}
    spans: Any  # a key's held spans, then {(broker, topic): (lo, hi)} of the offsets to read
    for (b, _, t, q), spans in held.intervals(refs).items():
        covered.setdefault((b, t, q), []).extend(spans)
    spans = {}
    for b, _, t, q, first, end in _answers(ranges):
        if any(first < he and hf < end for hf, he in covered.get((b, t, q), ())):  # offsets earlier runs read
            lo, hi = spans.get((b, t), (first, end))
            spans[(b, t)] = (min(lo, first), max(hi, end))
    out: dict[tuple[str, str], np.ndarray] = {}
    for (b, t), (lo, hi) in spans.items():
        within = And(EqualTo("topic", t),  # type: ignore[call-arg, arg-type]  # pyiceberg's own form
                     And(GreaterThanOrEqual("queue_offset", lo),  # type: ignore[call-arg, arg-type]
                         LessThan("queue_offset", hi)))  # type: ignore[call-arg, arg-type]
        found = table.scan(row_filter=within, selected_fields=("broker", "commitlog_offset")).to_arrow()
        mine = found.filter(pc.fill_null(pc.equal(found.column("broker"), b), False)) if found.num_rows else found
        if mine.num_rows:
            out[(b, t)] = mine.column("commitlog_offset").to_numpy()
    return out


def runs_of_files(table: Table, known: Collection[str] = ()) -> set[str]:
    """The runs whose data files (`data/run-<run>/`) a table's current snapshot holds, `known` runs left out
    unread: a manifest that only a snapshot of a known run added (as add_files writes it) is not opened, so
    a night reads the manifests added since the lake's last complete run, not every file of a year."""
    skipped = {s.snapshot_id for s in table.snapshots()
               if s.summary and s.summary.additional_properties.get(RUN) in known}
    files = _data_files(table, _current_manifests(table, skipped))
    return {run for run in map(_run_of, (f.file_path for f in files)) if run is not None}


def referenced_runs(table: Table, runs: Collection[str]) -> set[str]:
    """Which of `runs` (the folders data/run-<run>/ hold) a snapshot of the table references. A run whose own
    snapshot (add_files') is still there is referenced by it, nothing read; the others are looked for in the
    manifests of every snapshot, each read once, until all are found: a year of nights costs a lake no file list
    in memory, and a night whose runs' snapshots are all there reads no manifest."""
    left = set(runs) - {s.summary.additional_properties.get(RUN) for s in table.snapshots() if s.summary}
    if left:
        for data_file in _data_files(table, _every_manifest(table)):
            left.discard(_run_of(data_file.file_path))
            if not left:
                break
    return set(runs) - left


def _run_of(path):
    found = RUN_DIR.search(path)
    return found.group(1) if found else None


def _data_files(table, manifests=None):
    """The data files of `manifests` (the current snapshot's when None), a manifest at a time and an entry at a
    time (never the whole table's file list with every column's metrics, as table.inspect.files() builds it)."""
    from pyiceberg.manifest import ManifestContent
    for manifest in _current_manifests(table) if manifests is None else manifests:
        if manifest.content == ManifestContent.DATA:
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                yield entry.data_file


def _current_manifests(table, skipped=frozenset()):
    """The current snapshot's manifests, less those holding only files a snapshot of `skipped` (ids) added."""
    snapshot = table.current_snapshot()
    return [m for m in (snapshot.manifests(table.io) if snapshot else ())
            if not (m.added_snapshot_id in skipped and m.existing_files_count == 0 and m.deleted_files_count == 0)]


def _every_manifest(table):
    """The manifests of every snapshot of the table, each once (snapshots share the manifests they carry over)."""
    seen = set()
    for snapshot in table.snapshots():
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path not in seen:
                seen.add(manifest.manifest_path)
                yield manifest


def committed(table: Table, run: str) -> bool:
    """Whether the ranges table holds a row of `run` (the run pushed into the scan: its rows, not the table's)."""
    from pyiceberg.expressions import EqualTo
    return table.scan(row_filter=EqualTo("run", run),  # type: ignore[call-arg, arg-type]  # pyiceberg's own form
                      selected_fields=("run",)).to_arrow().num_rows > 0


def incomplete(table: Table, held: Held) -> list[str]:
    """Runs whose files a table holds but whose ranges were never committed (killed between two commits)."""
    return sorted(runs_of_files(table, held.runs) - held.runs)


def remove_runs(table: Table, runs: Iterable[str]) -> int:
    """One snapshot removing the data files of `runs` from a table (they stay on disk for orphan removal)."""
    doomed = set(runs)
    files = [f for f in _data_files(table) if _run_of(f.file_path) in doomed]
    if not files:
        return 0
    with table.transaction() as tx:
        with tx.update_snapshot(snapshot_properties={REPAIRED: ",".join(sorted(doomed))}).overwrite() as overwrite:
            for data_file in files:
                overwrite.delete_data_file(data_file)
    return len(files)


def table_locations(warehouse: Optional[Place], namespace: str) -> dict[str, str]:
    """{table name: newest metadata file} of the tables a warehouse (a place.Place, None: unknown) holds under NS
    (pyiceberg's default location `<warehouse>/<namespace>/<table>/metadata/NNNNN-<uuid>.metadata.json`)."""
    if warehouse is None:
        return {}
    fs, root = warehouse.fs, warehouse.root
    out: dict[str, str] = {}
    base = f"{root.rstrip('/')}/{namespace}"
    for info in fs.get_file_info(pafs.FileSelector(base, allow_not_found=True)):
        if info.type != pafs.FileType.Directory:
            continue
        found = [i for i in fs.get_file_info(pafs.FileSelector(f"{info.path}/metadata", allow_not_found=True))
                 if i.type == pafs.FileType.File and i.base_name.endswith(".metadata.json")]
        if found:
            newest = max(found, key=lambda i: (_version(i.base_name), i.mtime_ns or 0))
            out[info.base_name] = warehouse.uri.rstrip("/") + newest.path[len(root.rstrip("/")):]
    return out


def _version(name):
    head = name.split("-", 1)[0]
    return int(head) if head.isdigit() else -1
