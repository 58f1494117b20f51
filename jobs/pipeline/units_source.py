"""Where each needed queue's units come from (--units-from, the data source's unitsFrom), decided on the driver:

- `consumequeue`: the broker's consume queue: its files (`consumequeue/<topic>/<queue>/`), or on a 5.2+
  `storeType=defaultRocksDB` broker its RocksDB (`consumequeue/` itself, schemas/rocksdb_store.py);
- `commitlog`: rebuilt by the tasks from the records of their splits, as the broker's dispatcher builds
  them (schemas/cq_rebuild.py).

`auto` (the default) takes, per queue, the consume-queue files where the queue has them, else the RocksDB
consume queue where the store has one holding the queue, else the commit log: a queue that config/topics.json
names (or every queue of a needed topic, when the store has no consume queue at all) is never silently
missing. Under `consumequeue`, a queue topics.json names and the consume queue lacks is damaged data.

A RocksDB consume queue is read only where the store is on the local filesystem (RocksDB opens files by
path); on an object store `auto` rebuilds those queues. Why `auto` reads a RocksDB queue rather than
rebuilding it: its cost is the needed queues' units (2.5 M units/s through rocksdict's C iterator, measured on
1 M units), where a rebuild hops over every record of every split whatever its topic (5 M records/s)."""
from dataclasses import dataclass, field

from jobs.errors import UsageError
from schemas import storefs
from schemas.rocksdb_store import consume_queue, is_rocksdb

UNITS_FROM = ("auto", "consumequeue", "commitlog")
FILES, ROCKSDB, COMMITLOG = "consumequeue", "rocksdb", "commitlog"


@dataclass(frozen=True)
class Rebuild:
    """What a task rebuilds from its split's records: units of `topics`, except the queues in `kept` (read
    from a consume queue). Empty topics: nothing is rebuilt, splits are not walked."""

    topics: frozenset = frozenset()
    kept: frozenset = frozenset()  # (topic, queue_id)
    # the offsets window of the rebuilt queues: ((topic, queue_id, first, end), ...), None an open bound (the
    # window's --starting-offsets / --ending-offsets; EARLIEST and LATEST are open)
    offsets: tuple = ()

    def __bool__(self):
        return bool(self.topics)


@dataclass(frozen=True)
class RocksQueues:
    """The queues read from a RocksDB consume queue: its path and (topic, queue_id, first, end) each."""

    path: str
    queues: tuple


@dataclass
class UnitsSources:
    files: tuple  # QueueFiles read from consume-queue files
    rocks: RocksQueues = None
    rebuild: Rebuild = field(default_factory=Rebuild)
    problems: list = field(default_factory=list)  # queues the consume queue lacks (units_from=consumequeue)
    notes: list = field(default_factory=list)  # what the console says about where units came from
    warnings: list = field(default_factory=list)  # what the run must say: a RocksDB queue not read, and why
    default: str = FILES  # the source of most queues, for summary.json
    differs: dict = field(default_factory=dict)  # {topic: {queue_id: source}} where a queue's source is not it
    known: frozenset = frozenset()  # (topic, queue_id) of the queues the consume queue or topics.json names

    def describe(self):
        """summary.json's `units_source`."""
        by_name = lambda kv: str(kv[0])  # noqa: E731 - queue ids, and "*" for every queue of a topic
        return {"default": self.default,
                "queues": {t: {str(q): s for q, s in sorted(qs.items(), key=by_name)}
                           for t, qs in sorted(self.differs.items())}}


def store_topics(layout, topic_configs):
    """The topics of a store: those of its consume queue (files, RocksDB) and of config/topics.json; None when
    it has neither, and only the commit log knows them."""
    topics = {q.topic for q in layout.queues} | set(topic_configs)
    if layout.rocksdb_cq is not None and storefs.is_local(layout.filesystem()) and is_rocksdb(layout.rocksdb_cq):
        topics |= {q[0] for q in consume_queue(layout.rocksdb_cq).queues()}
    return topics or None


def choose(units_from, layout, topics, topic_configs):
    """UnitsSources of the needed `topics` of a listed store (schemas/store.StoreLayout)."""
    if units_from not in UNITS_FROM:
        raise UsageError(f"--units-from must be one of {', '.join(UNITS_FROM)}, got {units_from!r}")
    if units_from == COMMITLOG:
        return UnitsSources((), rebuild=Rebuild(frozenset(topics)), default=COMMITLOG,
                            notes=["units: rebuilt from the commit log (--units-from commitlog)"])
    files = tuple(q for q in layout.queues if q.topic in topics)
    have = {(q.topic, q.queue_id) for q in files}
    rocks = _rocks_queues(layout, topics, have, units_from)
    have |= {(t, q) for t, q, _, _ in (rocks.queues if rocks else ())}
    expected = {(t, q) for t in topics if t in topic_configs for q in range(_queue_count(topic_configs[t]))}
    lacking = sorted(expected - have)
    absent_topics = sorted(t for t in topics if not any(k[0] == t for k in have) and t not in topic_configs)
    sources = UnitsSources(files, rocks, default=ROCKSDB if rocks and not files else FILES,
                           known=frozenset(have | expected))
    if layout.rocksdb_cq is not None and not storefs.is_local(layout.filesystem()):
        sources.warnings.append(f"{layout.rocksdb_cq} is a RocksDB consume queue on a remote filesystem, which "
                                "RocksDB cannot open (it reads files by path): its queues are rebuilt from the "
                                "commit log")
    for t, q, _, _ in rocks.queues if rocks and files else ():
        sources.differs.setdefault(t, {})[q] = ROCKSDB
    if units_from == FILES:
        sources.problems = [dict(file=f"consumequeue/{t}/{q}", offset=None, topic=t, queue_id=q,
                                 reason=f"consume queue missing: config/topics.json names "
                                        f"{_queue_count(topic_configs[t])} queues of {t}; without "
                                        "--units-from consumequeue its units are rebuilt from the commit log")
                            for t, q in lacking]
        return sources
    rebuilt_topics = {t for t, _ in lacking} | set(absent_topics)
    if rebuilt_topics:
        kept = frozenset(k for k in have if k[0] in rebuilt_topics)
        sources.rebuild = Rebuild(frozenset(rebuilt_topics), kept)
        if not have:
            sources.default = COMMITLOG
        else:  # the queues that differ from the default; "*": every queue of a topic the consume queue lacks
            for t, q in lacking + [(t, "*") for t in absent_topics]:
                sources.differs.setdefault(t, {})[q] = COMMITLOG
        sources.notes.append(_rebuilt_note(lacking, absent_topics, bool(have)))
    return sources


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


def _rocks_queues(layout, topics, have, units_from):
    """RocksQueues of the needed queues that a RocksDB consume queue holds and the files do not."""
    if layout.rocksdb_cq is None:
        return None
    fs, path = storefs.resolve(layout.uri)[0], layout.rocksdb_cq
    if not storefs.is_local(fs) or not is_rocksdb(path):
        if units_from == FILES:
            raise UsageError(f"{path}: a RocksDB consume queue is read only on the local filesystem; "
                             "--units-from commitlog (or auto) rebuilds its units from the commit log")
        return None
    queues = tuple(q for q in consume_queue(path).queues() if q[0] in topics and (q[0], q[1]) not in have)
    return RocksQueues(path, queues) if queues else None
