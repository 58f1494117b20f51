"""The protocol every units source keeps: what it serves, the units of a split or of a queue's offsets, and how a
window narrows it. A source is planned on the driver and pickled to every task: it holds paths, names and
ranges, never an open handle; the store's filesystem is handed to each call (`fs`, pyarrow's).

    class MySource(UnitsSource):
        KIND = "mine"  # summary.json's name of it
        def split(self, fs, split): ...  # SourceRead of the units pointing into split.start..split.end
        def queue_units(self, fs, log, topic, queue_id, offsets): ...  # explain's few units

Adding a kind is a module holding such a class and its choice in choose.py."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    import pyarrow.fs as pafs

    from jobs.plan.window import Window
    from schemas.log.files import CommitLog

# {(topic, queue_id): (earliest, latest exclusive, time_of)}: UnitsSource.queue_bounds
QueueBounds = dict[tuple[str, int], tuple[int, int, Callable[[int], int]]]


@dataclass(frozen=True)
class Split:
    """What a task hands each source: its byte range of the commit log, the units its own records make when it
    walks them (cq_rebuild.UNITS_SCHEMA, in commit-log order; None when it does not walk them), and the run's
    store-time window (epoch ms, None an open bound)."""

    start: int
    end: int
    walked: object = None
    since: int | None = None
    until: int | None = None


@dataclass(frozen=True)
class SourceRead:
    """A source's part of a split: CONSUME_QUEUE_SCHEMA tables, and for a source whose queue ends are known
    only once walked, split_units.QUEUE_MARKS_SCHEMA rows of the offsets its queues reach (offsets.json)."""

    tables: tuple = ()
    marks: object = None


class UnitsSource:
    """One kind of units. The class attributes say how the run treats it; the methods are asked by the tasks
    (split, split_holds, for_split), the planning (prepared, data_end) and the window (queue_bounds, windowed,
    spans) on the driver, and explain (queue_units)."""

    KIND: str | None = None  # the name summary.json's `units_source` gives it
    STORED = True  # units a broker stored: --audit-consume-queue checks them against the records
    WALKS_RECORDS = False  # its units come from the split's records: splits start at records, every task walks

    @property
    def served(self) -> frozenset[tuple[str, int]]:
        """(topic, queue_id) of the queues it serves, as far as it knows before the tasks run."""
        return frozenset()

    def serves(self, topic: str, queue_id: int) -> bool:
        """Whether a queue's units are its to give (explain asks which source of a choice serves its queue)."""
        return (topic, queue_id) in self.served

    @property
    def data_end(self) -> int | None:
        """Where the last record its units point at ends (no split starts beyond), None when unknown until the
        tasks read."""
        return None

    def __bool__(self) -> bool:
        return True

    def prepared(self, fs: pafs.FileSystem) -> UnitsSource:
        """Itself ready for the window and the tasks: what the driver reads once after the choice (default:
        nothing)."""
        return self

    def split(self, fs: pafs.FileSystem, split: Split) -> SourceRead:
        """SourceRead of its units pointing into [split.start, split.end) (run by a task)."""
        raise NotImplementedError

    def split_holds(self, start: int, end: int) -> bool:
        """Whether [start, end) can hold units of it (a split no source can hold is not read)."""
        return True

    def for_split(self, start: int, end: int) -> UnitsSource:
        """Itself as one split's task needs it (a data source partition ships only that)."""
        return self

    def queue_bounds(self, fs: pafs.FileSystem, log: CommitLog) -> QueueBounds:
        """{(topic, queue_id): (earliest, latest exclusive, time_of)} of the queues whose bounds it knows before
        the tasks run; time_of(queue offset) -> store time, for the window's binary search."""
        return {}

    def windowed(self, fs: pafs.FileSystem, window: Window,
                 ranges: Sequence[tuple[str, int, int, int]]) -> UnitsSource:
        """Itself narrowed to a window: `ranges` ((topic, queue_id, first, end), ...) the run covers."""
        return self

    def spans(self, fs: pafs.FileSystem, log: CommitLog, window: Window) -> tuple[tuple[int, int], ...]:
        """Commit-log [start, end) byte ranges a window's units of it can point into."""
        return ()

    def queue_units(self, fs: pafs.FileSystem, log: CommitLog, topic: str, queue_id: int,
                    queue_offsets: Sequence[int] | np.ndarray) -> pa.Table:
        """CONSUME_QUEUE_SCHEMA table of the units at `queue_offsets` of one queue, in that order (explain);
        schemas.errors.NotInStore when it lacks one."""
        raise NotImplementedError


class QueueFilesSource(UnitsSource):
    """What a source of listed queue files (schemas.store.store.QueueFiles in its `queues`) answers alike: it is empty
    without queues, and it serves those it was given."""

    queues: tuple  # schemas.store.store.QueueFiles, a dataclass field of each kind

    def __bool__(self) -> bool:
        return bool(self.queues)

    @property
    def served(self) -> frozenset[tuple[str, int]]:
        return frozenset((q.topic, q.queue_id) for q in self.queues)
