"""Which source serves each needed queue of a broker (--units-from, the data source's unitsFrom: a UnitsFrom,
made from its name once in jobs/settings.job_options), chosen once when the run is planned:

- `consumequeue`: the broker's consume queue: its files (files.py; a 5.x BatchCQ topic's batchconsumequeue/ files,
  batch.py), or on a 5.2+ `storeType=defaultRocksDB` broker its RocksDB (rocksdb.py);
- `commitlog`: rebuilt by the tasks from the records of their splits (rebuilt.py).

`auto` (the default) takes, per queue, the consume-queue files where the queue has them, else the RocksDB
consume queue where the store has one holding the queue, else the commit log: a queue that config/topics.json
names (or every queue of a needed topic, when the store has no consume queue at all) is never silently
missing. Under `consumequeue`, a queue topics.json names and the consume queue lacks is damaged data.

A RocksDB consume queue is read only where the store is on the local filesystem (RocksDB opens files by
path); on an object store `auto` rebuilds those queues. Why `auto` reads a RocksDB queue rather than
rebuilding it: its cost is the needed queues' units, where a rebuild hops over every record of every split."""
from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from jobs.errors import UsageError
from jobs.plan.units.base import UnitsSource
from jobs.plan.units.batch import BatchQueueFiles
from jobs.plan.units.files import ConsumeQueueFiles
from jobs.plan.units.rebuilt import RebuiltUnits
from jobs.plan.units.rocksdb import RocksDBQueues
from schemas.errors import NotInStore
from schemas.log.lookup import batch_queue_files, queue_files
from schemas.store import storefs
from schemas.store.store import StoreLayout

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from schemas.store.config import TopicConfig


class UnitsFrom(Enum):
    """The user's choice of units source; its value is the option's spelling (choices, messages)."""

    AUTO = "auto"
    CONSUME_QUEUE = "consumequeue"
    COMMIT_LOG = "commitlog"

    @property
    def rebuilds_all(self) -> bool:
        """Every queue's units rebuilt from the commit log, the consume queue not read."""
        return self is UnitsFrom.COMMIT_LOG

    @property
    def consume_queue_only(self) -> bool:
        """A queue the consume queue lacks is damaged data, not rebuilt."""
        return self is UnitsFrom.CONSUME_QUEUE


UNITS_FROM = tuple(u.value for u in UnitsFrom)


@dataclass
class BrokerUnits:
    """A broker's units sources, each serving its queues (a queue is served by one), and what the run says of
    the choice."""

    sources: tuple  # UnitsSource, in the order their tables are read
    problems: list = field(default_factory=list)  # queues the consume queue lacks (units_from=consumequeue)
    notes: list = field(default_factory=list)  # what the console says about where units came from
    warnings: list = field(default_factory=list)  # what the run must say: a RocksDB queue not read, and why
    default: str = ConsumeQueueFiles.KIND  # the source of most queues, for summary.json
    differs: dict = field(default_factory=dict)  # {topic: {queue_id: KIND}} where a queue's source is not it
    known: frozenset = frozenset()  # (topic, queue_id) of the queues the consume queue or topics.json names

    def describe(self) -> dict[str, Any]:
        """summary.json's `units_source`."""
        by_name = lambda kv: str(kv[0])  # noqa: E731 - queue ids, and "*" for every queue of a topic
        return {"default": self.default,
                "queues": {t: {str(q): s for q, s in sorted(qs.items(), key=by_name)}
                           for t, qs in sorted(self.differs.items())}}

    @property
    def files(self) -> ConsumeQueueFiles:
        """The consume-queue files source (an empty one when no queue is read from files)."""
        return next((s for s in self.sources if isinstance(s, ConsumeQueueFiles)), ConsumeQueueFiles().prepared(None))

    @property
    def rebuilds(self) -> bool:
        """Whether some queue's units are rebuilt from the records (the tasks walk their splits)."""
        return any(s.WALKS_RECORDS for s in self.sources)

    @property
    def data_end(self) -> int | None:
        """Where the last record any unit points at ends, when every source knows it before the tasks run."""
        ends = [s.data_end for s in self.sources]
        return None if None in ends else max(ends, default=0)

    def mapped(self, fn: Callable[[UnitsSource], UnitsSource]) -> BrokerUnits:
        """Itself with each source replaced by fn(source)."""
        return replace(self, sources=tuple(fn(s) for s in self.sources))


def store_topics(fs: pafs.FileSystem, layout: StoreLayout,
                 topic_configs: Mapping[str, TopicConfig]) -> set[str] | None:
    """The topics of a store: those of its consume queue (files, RocksDB) and of config/topics.json; None when
    it has neither, and only the commit log knows them."""
    topics = {q.topic for q in layout.queues + layout.batch_queues} | set(topic_configs)
    if RocksDBQueues.readable(fs, layout.rocksdb_cq):
        assert layout.rocksdb_cq is not None  # readable: a path
        every = RocksDBQueues.of_store(layout.rocksdb_cq)
        topics |= {t for t, _ in every.served} if every else set()
    return topics or None


def choose(units_from: UnitsFrom, fs: pafs.FileSystem, layout: StoreLayout, topics: Collection[str],
           topic_configs: Mapping[str, TopicConfig]) -> BrokerUnits:
    """BrokerUnits of the needed `topics` of a listed store (schemas/store/store.StoreLayout) on filesystem `fs`,
    `units_from` a UnitsFrom."""
    if units_from.rebuilds_all:
        return BrokerUnits((RebuiltUnits(frozenset(topics)),), default=RebuiltUnits.KIND,
                           notes=["units: rebuilt from the commit log (--units-from commitlog)"])
    files = ConsumeQueueFiles(tuple(q for q in layout.queues if q.topic in topics))
    batch = BatchQueueFiles(tuple(q for q in layout.batch_queues if q.topic in topics))
    have = set(files.served) | batch.served
    rocks = _rocks_queues(fs, layout, topics, have, units_from)
    have |= rocks.served if rocks else set()
    expected = {(t, q) for t in topics if t in topic_configs for q in range(_queue_count(topic_configs[t]))}
    lacking = sorted(expected - have)
    absent_topics = sorted(t for t in topics if not any(k[0] == t for k in have) and t not in topic_configs)
    units = BrokerUnits((files,) + ((batch,) if batch else ()) + ((rocks,) if rocks else ()),
                        default=RocksDBQueues.KIND if rocks and not files else ConsumeQueueFiles.KIND,
                        known=frozenset(have | expected))
    if layout.rocksdb_cq is not None and not storefs.is_local(fs):
        units.warnings.append(f"{layout.rocksdb_cq} is a RocksDB consume queue on a remote filesystem, which "
                              "RocksDB cannot open (it reads files by path): its queues are rebuilt from the "
                              "commit log")
    for t, q in sorted(rocks.served) if rocks and files else ():
        units.differs.setdefault(t, {})[q] = RocksDBQueues.KIND
    for t, q in sorted(batch.served):
        units.differs.setdefault(t, {})[q] = BatchQueueFiles.KIND
    if units_from.consume_queue_only:
        units.problems = [dict(file=f"consumequeue/{t}/{q}", offset=None, topic=t, queue_id=q,
                               reason=f"consume queue missing: config/topics.json names "
                                      f"{_queue_count(topic_configs[t])} queues of {t}; without "
                                      "--units-from consumequeue its units are rebuilt from the commit log")
                          for t, q in lacking]
        return units
    rebuilt_topics = {t for t, _ in lacking} | set(absent_topics)
    if rebuilt_topics:
        kept = frozenset(k for k in have if k[0] in rebuilt_topics)
        units.sources += (RebuiltUnits(frozenset(rebuilt_topics), kept),)
        if not have:
            units.default = RebuiltUnits.KIND
        else:  # the queues that differ from the default; "*": every queue of a topic the consume queue lacks
            for t, q in lacking + [(t, "*") for t in absent_topics]:
                units.differs.setdefault(t, {})[q] = RebuiltUnits.KIND
        units.notes.append(_rebuilt_note(lacking, absent_topics, bool(have)))
    return units


def queue_source(units_from: UnitsFrom, fs: pafs.FileSystem, root: str, topic: str, queue_id: int,
                 topic_configs: Mapping[str, TopicConfig]) -> UnitsSource:
    """The source of one queue's units as choose() picks it for a run of that queue alone (explain, which reads
    a few units without listing the store: only the queue's own folders are listed). NotInStore when the choice
    serves it from nowhere: --units-from consumequeue and the consume queue lacks it, or neither a consume queue
    nor config/topics.json names it."""
    layout, lacking = _queue_layout(fs, root, topic, queue_id)
    units = choose(units_from, fs, layout, {topic}, topic_configs)
    source = next((s for s in units.sources if s.serves(topic, queue_id)), None)
    named = units_from.rebuilds_all or not topic_configs or (topic, queue_id) in units.known
    if source is None or units.problems or not named:  # auto rebuilds a topic topics.json lacks: not for explain
        raise lacking
    return source.prepared(fs)


def _queue_layout(fs, root, topic, queue_id):
    """(a StoreLayout of one queue's consume-queue files, batch files and the store's RocksDB consume queue,
    from those folders alone; the NotInStore that says the consume queue lacks the queue, None when it has it)."""
    queues, batch, lacking = (), (), None
    try:
        queues = (queue_files(fs, root, topic, queue_id),)
    except NotInStore as exc:
        lacking = exc
    try:
        batch = (batch_queue_files(fs, root, topic, queue_id),)
    except NotInStore:
        pass
    rocks = f"{root}/consumequeue"
    rocks = rocks if RocksDBQueues.readable(fs, rocks) else None
    return StoreLayout(fs, root, (), 0, queues, rocksdb_cq=rocks, batch_queues=batch), lacking


def _queue_count(config):
    return max(config.read_queue_nums, config.write_queue_nums)


def _rebuilt_note(lacking, absent_topics, some_queue):
    """The console's line on queues rebuilt because the consume queue lacks them."""
    named = [f"{t}/{q}" for t, q in lacking] + [f"{t} (every queue)" for t in absent_topics]
    shown = ", ".join(named[:8]) + (f" and {len(named) - 8} more" if len(named) > 8 else "")
    if not some_queue:
        named_by_config = f"; its config names {len(lacking)} queue(s) of the run's topics" if lacking else ""
        return f"units: rebuilt from the commit log (the store has no consume queue{named_by_config})"
    return f"units: consume queue; rebuilt from the commit log where it lacks a queue: {shown}"


def _rocks_queues(fs, layout, topics, have, units_from):
    """RocksDBQueues of the needed queues that a RocksDB consume queue holds and the files do not."""
    if layout.rocksdb_cq is None:
        return None
    if not RocksDBQueues.readable(fs, layout.rocksdb_cq):
        if units_from.consume_queue_only:
            raise UsageError(f"{layout.rocksdb_cq}: a RocksDB consume queue is read only on the local filesystem; "
                             "--units-from commitlog (or auto) rebuilds its units from the commit log")
        return None
    return RocksDBQueues.of_store(layout.rocksdb_cq, topics, have)
