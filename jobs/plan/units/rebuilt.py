"""Units rebuilt from the commit log: each task walks its split's records (split_units.walk_split) and keeps the
units the broker's dispatcher would build for the queues of this source (schemas/queues/cq_rebuild.py mirrors
`ReputMessageService` -> `CommitLogDispatcherBuildConsumeQueue`). Nothing bounds them before the tasks run:
a window keeps the rebuilt units inside its offsets (`offsets`) and store times, and the tasks report the
queue offsets each queue reaches (QUEUE_MARKS_SCHEMA) for offsets.json. A rebuild hops over every record of
every split whatever its topic (5 M records/s)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.plan.units.base import SourceRead, Split, UnitsSource
from jobs.plan.window import EARLIEST, LATEST
from schemas.columns import queue_index
from schemas.log.lookup import first_store_time, rebuilt_queue_units
from schemas.queues.consume_queue import units_without_ext

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from jobs.plan.window import Window
    from schemas.log.files import CommitLog

# per rebuilt queue and split, in the offsets window: the first queue offset stored at or after --since, one past
# the last stored before --until, the first stored at or after --until (nulls: none); the driver takes the least
# of `first` and `after` over the splits, the most of `end`, and ends a queue at `after` where it has one
QUEUE_MARKS_SCHEMA = pa.schema([("topic", pa.string()), ("queue_id", pa.int32()), ("first", pa.int64()),
                                ("end", pa.int64()), ("after", pa.int64())])
UNIT_COLUMNS = ("topic", "queue_id", "queue_offset", "commitlog_offset", "size", "tags_code")


@dataclass(frozen=True)
class RebuiltUnits(UnitsSource):
    """The units of `topics` rebuilt from the split's records, except the queues in `kept` (another source
    serves them)."""

    KIND = "commitlog"
    STORED = False  # what the consume-queue audit compares the stored units with
    WALKS_RECORDS = True

    topics: frozenset = frozenset()
    kept: frozenset = frozenset()  # (topic, queue_id)
    # the offsets window of the rebuilt queues: ((topic, queue_id, first, end), ...), None an open bound (the
    # window's --starting-offsets / --ending-offsets; EARLIEST and LATEST are open)
    offsets: tuple = ()

    def __bool__(self) -> bool:
        return bool(self.topics)

    def serves(self, topic: str, queue_id: int) -> bool:
        return topic in self.topics and (topic, queue_id) not in self.kept

    def split(self, fs: pafs.FileSystem, split: Split) -> SourceRead:
        if split.walked is None:  # a split no file holds: no records
            return SourceRead()
        rebuilt = self._in_offsets(self._mine(split.walked))
        return SourceRead((units_without_ext(*(rebuilt.column(c) for c in UNIT_COLUMNS)),),
                          queue_marks(rebuilt, split.since, split.until))

    def windowed(self, fs: pafs.FileSystem, window: Window,
                 ranges: Sequence[tuple[str, int, int, int]]) -> RebuiltUnits:
        """Per queue of a rebuilt topic that the window's offsets JSON names, (first, end) with EARLIEST and
        LATEST open (None): the tasks keep the rebuilt units inside them."""
        if not window.given:
            return self
        keys = {(t, q) for given in (window.starting, window.ending) for t, queues in given.items() for q in queues
                if t in self.topics}
        open_bound = lambda o: None if o in (EARLIEST, LATEST) else o  # noqa: E731
        return replace(self, offsets=tuple((t, q, open_bound(window.starting.get(t, {}).get(q, EARLIEST)),
                                            open_bound(window.ending.get(t, {}).get(q, LATEST)))
                                           for t, q in sorted(keys)))

    def spans(self, fs: pafs.FileSystem, log: CommitLog, window: Window) -> tuple[tuple[int, int], ...]:
        """The whole of each commit-log file a store-time window can hold records of, by their first records'
        store times (a read of a header each): a file is left out when it starts at or after --until, or when
        the next file starts before --since (the log is in store-time order, as the broker appends it; the
        tasks still check every record exactly). An offsets-only window keeps every file."""
        files = list(log.files)
        if window.since is None and window.until is None:
            return tuple((f.start, f.end) for f in files)
        firsts = [first_store_time(fs, f) for f in files] + [None]
        kept = []
        for k, f in enumerate(files):
            first, following = firsts[k], firsts[k + 1]
            if window.until is not None and first is not None and first >= window.until:
                continue
            if window.since is not None and following is not None and following < window.since:
                continue
            kept.append((f.start, f.end))
        return tuple(kept)

    def queue_units(self, fs: pafs.FileSystem, log: CommitLog, topic: str, queue_id: int,
                    queue_offsets: Sequence[int] | np.ndarray) -> pa.Table:
        return rebuilt_queue_units(fs, log, topic, queue_id, queue_offsets)

    def _mine(self, units):
        """The walked units (cq_rebuild.UNITS_SCHEMA) of its topics, less the queues another source serves."""
        keep = pc.is_in(units.column("topic"), pa.array(sorted(self.topics), pa.string())).to_numpy(
            zero_copy_only=False)
        if self.kept and keep.any():
            keep &= queue_index(units, tuple(self.kept)) < 0
        return units.filter(pa.array(keep))

    def _in_offsets(self, units):
        """The units inside the offsets window of their queue, as a file queue's narrowed segments hold only
        those."""
        if not self.offsets or not units.num_rows:
            return units
        index = queue_index(units, self.offsets)
        first = np.array([-1 if a is None else a for _, _, a, _ in self.offsets] + [-1], np.int64)
        end = np.array([1 << 62 if b is None else b for _, _, _, b in self.offsets] + [1 << 62], np.int64)
        offsets = units.column("queue_offset").to_numpy()
        return units.filter(pa.array((offsets >= first[index]) & (offsets < end[index])))  # -1: the open bounds


def queue_marks(units: pa.Table, since: int | None, until: int | None) -> pa.Table | None:
    """QUEUE_MARKS_SCHEMA of rebuilt units (with store_timestamp), per queue."""
    if not units.num_rows:
        return None
    t = units.column("store_timestamp").to_numpy()
    before = np.ones(len(t), bool) if until is None else t < until
    from_since = before & (True if since is None else t >= since)
    table = units.select(["topic", "queue_id"]).append_column(
        "first", pa.array(units.column("queue_offset").to_numpy(), mask=~from_since)).append_column(
        "end", pa.array(units.column("queue_offset").to_numpy() + 1, mask=~before)).append_column(
        "after", pa.array(units.column("queue_offset").to_numpy(), mask=before))
    marks = table.group_by(["topic", "queue_id"]).aggregate([("first", "min"), ("end", "max"), ("after", "min")])
    return pa.table({"topic": marks["topic"], "queue_id": marks["queue_id"], "first": marks["first_min"],
                     "end": marks["end_max"], "after": marks["after_min"]}).cast(QUEUE_MARKS_SCHEMA)
