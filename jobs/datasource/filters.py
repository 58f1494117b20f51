"""What narrows a data source read: the filters Spark pushes (topic, queue_id, queue_offset,
commitlog_offset, store_timestamp) and the window options (since/until, startingOffsets/endingOffsets),
as exact per-column bounds the planning and the task apply to consume-queue units and messages.

A filter is taken only when it can be applied exactly (every pushed column is never null); any other is
handed back to Spark, which applies it after the read."""
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow.compute as pc

from filtering.topic_replay import UNIT_FIELDS
from jobs.pipeline.window import parse_window

# columns whose integer comparisons are pushed: those a unit holds narrow units before any record is read
UNIT_COLUMNS = UNIT_FIELDS
TIME_COLUMN = "store_timestamp"
BEYOND = 1 << 62  # past any offset or time


@dataclass(frozen=True)
class Bounds:
    """[lo, hi) of one integer column, and the values it may take (None: any)."""

    lo: int = -BEYOND
    hi: int = BEYOND
    values: frozenset = None

    def __and__(self, other):
        values = other.values if self.values is None else \
            self.values if other.values is None else self.values & other.values
        return Bounds(max(self.lo, other.lo), min(self.hi, other.hi), values)

    @property
    def everything(self):
        return self.lo == -BEYOND and self.hi == BEYOND and self.values is None

    def mask(self, array):
        """Rows of a numpy array within the bounds."""
        keep = (array >= self.lo) & (array < self.hi)
        if self.values is not None:
            keep &= np.isin(array, np.fromiter(self.values, dtype=np.int64, count=len(self.values)))
        return keep

    def overlaps(self, start, end):
        """Whether any value of [start, end) can be within the bounds."""
        return start < self.hi and end > self.lo and (self.values is None or any(start <= v < end for v in self.values))


@dataclass(frozen=True)
class Narrowing:
    """Everything that narrows a read: topics (None: all), bounds per column, queue-offset ranges per queue."""

    topics: frozenset = None
    bounds: dict = field(default_factory=dict)  # column -> Bounds
    queue_ranges: tuple = ()  # ((topic, queue_id, first, end), ...) from startingOffsets/endingOffsets

    def column(self, name):
        return self.bounds.get(name, Bounds())

    def with_topics(self, topics):
        return replace(self, topics=frozenset(topics) if self.topics is None else self.topics & frozenset(topics))

    def with_bounds(self, name, bounds):
        return replace(self, bounds={**self.bounds, name: self.column(name) & bounds})

    def unit_mask(self, units):
        """Units (CONSUME_QUEUE_SCHEMA) that can hold a row: queue, offsets, per-queue ranges, and the store
        time of the ext unit where there is one (ConsumeQueueExt keeps the record's storeTimestamp)."""
        keep = np.ones(units.num_rows, dtype=bool)
        for name in UNIT_COLUMNS:
            if not self.column(name).everything:
                keep &= self.column(name).mask(units.column(name).to_numpy())
        if self.queue_ranges:
            topics = units.column("topic").to_numpy(zero_copy_only=False)
            queues, offsets = units.column("queue_id").to_numpy(), units.column("queue_offset").to_numpy()
            for topic, queue_id, first, end in self.queue_ranges:
                keep &= ~((topics == topic) & (queues == queue_id)) | ((offsets >= first) & (offsets < end))
        time = self.column(TIME_COLUMN)
        if not time.everything:
            stored = units.column("msg_store_time")
            keep &= ~stored.is_valid().to_numpy(zero_copy_only=False) | time.mask(pc.fill_null(stored, 0).to_numpy())
        return keep

    def message_mask(self, messages):
        """Decoded messages within the store-time bounds, exactly (None: all)."""
        time = self.column(TIME_COLUMN)
        return None if time.everything else time.mask(messages.column(TIME_COLUMN).to_numpy())


def push_filters(narrowing, filters):
    """(the narrowing with every filter it can apply exactly, the filters Spark must still apply)."""
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual

    left = []
    for f in filters:
        name = f.attribute[0] if len(getattr(f, "attribute", ())) == 1 else None
        value = getattr(f, "value", None)
        if name == "topic" and isinstance(f, EqualTo) and isinstance(value, str):
            narrowing = narrowing.with_topics([value])
        elif name == "topic" and isinstance(f, In) and all(isinstance(v, str) for v in value):
            narrowing = narrowing.with_topics(value)
        elif name not in UNIT_COLUMNS + (TIME_COLUMN,):
            left.append(f)
        elif isinstance(f, In) and all(_is_int(v) for v in value):
            narrowing = narrowing.with_bounds(name, Bounds(values=frozenset(value)))
        elif not _is_int(value):
            left.append(f)
        elif isinstance(f, EqualTo):
            narrowing = narrowing.with_bounds(name, Bounds(values=frozenset([value])))
        elif isinstance(f, (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
            lo = value + 1 if isinstance(f, GreaterThan) else value if isinstance(f, GreaterThanOrEqual) else -BEYOND
            hi = value if isinstance(f, LessThan) else value + 1 if isinstance(f, LessThanOrEqual) else BEYOND
            narrowing = narrowing.with_bounds(name, Bounds(lo, hi))
        else:
            left.append(f)
    return narrowing, left


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def window_narrowing(since=None, until=None, starting=None, ending=None):
    """The narrowing of the window options (text as given, None when absent), read by the job's own parser
    (jobs.pipeline.window.parse_window: epoch ms or ISO-8601 with an offset; offsets JSON or a file in the shape of
    Spark's Kafka source, -2 earliest, -1 latest; queues not named: all): [since, until) of store time, and
    per queue [starting, ending) of queue offsets. UsageError (a ValueError) names the option."""
    window = parse_window(since, until, starting, ending, flags=("since", "until", "startingOffsets", "endingOffsets"))
    narrowing = Narrowing()
    if window.since is not None or window.until is not None:
        lo = -BEYOND if window.since is None else window.since
        hi = BEYOND if window.until is None else window.until
        narrowing = narrowing.with_bounds(TIME_COLUMN, Bounds(lo, hi))
    ranges = tuple((topic, queue_id, first, end)
                   for (topic, queue_id), (first, end) in sorted(window.queue_offsets(0, BEYOND).items()))
    return replace(narrowing, queue_ranges=ranges)
