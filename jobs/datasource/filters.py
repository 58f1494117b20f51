"""What narrows a data source read: its options only (topics, key, since/until, startingOffsets/endingOffsets), as
exact bounds the planning and the task apply to consume-queue units and messages.

No filter of a query is pushed. Spark 4.3 keeps the read a pushdown planned on the relation that every query
of one DataFrame shares (PythonDataSourceV2's read info), so a filter pushed for one question narrowed the
next one's rows (`df.where("topic = 'T'").count()` then `df.count()`: 1,044 rows of 3,000 on store_a), and
two scans of one DataFrame in one query read with whichever filters were pushed last. Options belong to the
DataFrame itself: a narrowing taken from them is right for every query on it. Spark applies every filter."""
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.errors import UsageError
from jobs.plan.window import parse_window

TIME_COLUMN = "store_timestamp"
BEYOND = 1 << 62  # past any offset or time


@dataclass(frozen=True)
class Narrowing:
    """Everything that narrows a read: topics (None: all), [since, until) of store time, queue-offset ranges."""

    topics: frozenset | None = None
    since: int = -BEYOND
    until: int = BEYOND
    queue_ranges: tuple = ()  # ((topic, queue_id, first, end), ...) from startingOffsets/endingOffsets
    key: str | None = None  # only the messages carrying it (a KEYS token or the UNIQ_KEY), found through index/
    offsets: frozenset | None = None  # the key's messages' commit-log offsets, once found (None: any)

    @property
    def timed(self) -> bool:
        return self.since != -BEYOND or self.until != BEYOND

    def unit_mask(self, units: pa.Table) -> np.ndarray:
        """Units (CONSUME_QUEUE_SCHEMA) that can hold a row: per-queue ranges, and the store time of the ext
        unit where there is one (ConsumeQueueExt keeps the record's storeTimestamp)."""
        keep = np.ones(units.num_rows, dtype=bool)
        if self.offsets is not None:
            keep &= np.isin(units.column("commitlog_offset").to_numpy(),
                            np.fromiter(self.offsets, dtype=np.int64, count=len(self.offsets)))
        if self.queue_ranges:
            topics = units.column("topic").to_numpy(zero_copy_only=False)
            queues, offsets = units.column("queue_id").to_numpy(), units.column("queue_offset").to_numpy()
            for topic, queue_id, first, end in self.queue_ranges:
                keep &= ~((topics == topic) & (queues == queue_id)) | ((offsets >= first) & (offsets < end))
        if self.timed:
            stored = units.column("msg_store_time")
            keep &= ~stored.is_valid().to_numpy(zero_copy_only=False) | self._in_time(
                pc.fill_null(stored, 0).to_numpy())
        return keep

    def message_mask(self, messages: pa.Table) -> np.ndarray | None:
        """Decoded messages within [since, until) of store time, exactly (None: all)."""
        return self._in_time(messages.column(TIME_COLUMN).to_numpy()) if self.timed else None

    def _in_time(self, stamps):
        return (stamps >= self.since) & (stamps < self.until)


def option_narrowing(topics: str | None = None, key: str | None = None, since: str | None = None,
                     until: str | None = None, starting: str | None = None, ending: str | None = None) -> Narrowing:
    """The narrowing of the options (text as given, None when absent): `topics` comma-separated (as --topics);
    `key` one key, as explain --key takes it;
    the window read by the job's own parser (jobs.plan.window.parse_window: epoch ms or ISO-8601 with an
    offset; offsets JSON or a file in the shape of Spark's Kafka source, -2 earliest, -1 latest; queues not
    named: all). UsageError (a ValueError) names the option."""
    names = None
    if topics is not None:
        names = frozenset(t.strip() for t in topics.split(","))
        if not all(names):
            raise UsageError(f"topics: expected topic names separated by commas, got {topics!r}")
    window = parse_window(since, until, starting, ending, flags=("since", "until", "startingOffsets", "endingOffsets"))
    ranges = tuple((topic, queue_id, first, end)
                   for (topic, queue_id), (first, end) in sorted(window.queue_offsets(0, BEYOND).items()))
    if key is not None and not key.strip():
        raise UsageError("key: expected a message key (a KEYS token or a UNIQ_KEY), got an empty one")
    return Narrowing(names, -BEYOND if window.since is None else window.since,
                     BEYOND if window.until is None else window.until, ranges, key)
