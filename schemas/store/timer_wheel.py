"""The timer wheel's own state in a RocketMQ 5.x store (TimerMessageStore, the file-based wheel): pure decoding, numpy.

- `config/timercheck` (TimerCheckpoint): a mapped page (4096 bytes, DefaultMappedFile.OS_PAGE_SIZE) whose first 56
  bytes are big-endian longs: lastReadTimeMs (the wheel's read time: every slot before it was dequeued),
  lastTimerLogFlushPos (the timer log flushed up to), lastTimerQueueOffset (the wheel topic's queue offset read),
  masterTimerQueueOffset, then the DataVersion: stateVersion, timestamp, counter.
- `config/timermetrics` (TimerMetrics): JSON `{"dataVersion": {...}, "timingCount": {topic: {count, timeStamp}}}`.
- `timerlog/<20-digit offset>` (TimerLog): mapped files of 52-byte units, big-endian: size (52), prevPos (the
  slot's previous unit, -1 for the first), magic (MAGIC_DEFAULT, | MAGIC_ROLL for a message parked beyond the roll
  window, | MAGIC_DELETE for a recall marker), currWriteTime, delay (deliver time - currWriteTime), offsetPy and
  sizePy (the record in the commit log), the real topic's hash, a reserved long. A file ends with a blank (size:
  the bytes left, a zero long, BLANK_MAGIC) when the next unit would not fit, the last file with zeros after its
  written units.
- `timerwheel` (TimerWheel): slotsTotal * 2 slots of 32 bytes: timeMs / precisionMs (long), firstPos, lastPos
  (longs: the slot's units in the timer log, a chain through prevPos), num, magic (ints); a slot's index is
  timeMs / precisionMs % (slotsTotal * 2).

Damage is returned as problems (the shape of schemas/store/checks.py's: {file, offset, topic, queue_id, reason}),
never raised: the caller's corruption policy decides."""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from schemas.store import storefs

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from schemas.store.storefs import Segment

    EachChunk = Callable[[np.ndarray, np.ndarray], object]  # each_chunk(positions, units)

CHECKPOINT_FILE = "timercheck"  # under config/
METRICS_FILE = "timermetrics"  # under config/
TIMER_LOG_DIR = "timerlog"
WHEEL_FILE = "timerwheel"
CHECKPOINT_SIZE = 4096  # TimerCheckpoint maps one OS page
CHECKPOINT_FIELDS = ("last_read_time_ms", "last_timer_log_flush_pos", "last_timer_queue_offset",
                     "master_timer_queue_offset", "state_version", "version_timestamp", "version_counter")
UNIT_SIZE = 52  # TimerLog.UNIT_SIZE
UNIT_DTYPE = np.dtype([("size", ">i4"), ("prev_pos", ">i8"), ("magic", ">i4"), ("curr_write_time", ">i8"),
                       ("delay", ">i4"), ("offset_py", ">i8"), ("size_py", ">i4"), ("topic_hash", ">i4"),
                       ("reserved", ">i8")])
SLOT_SIZE = 32  # Slot.SIZE
SLOT_DTYPE = np.dtype([("time_div_precision", ">i8"), ("first_pos", ">i8"), ("last_pos", ">i8"), ("num", ">i4"),
                       ("magic", ">i4")])
MAGIC_DEFAULT, MAGIC_ROLL, MAGIC_DELETE = 1, 2, 4  # TimerMessageStore
BLANK_MAGIC = -875286124  # TimerLog.BLANK_MAGIC_CODE: 0xBBCCDDEE ^ (1880681586 + 8), as a Java int
MIN_BLANK = 16  # TimerLog.MIN_BLANK_LEN: size, a long, the magic
assert UNIT_DTYPE.itemsize == UNIT_SIZE and SLOT_DTYPE.itemsize == SLOT_SIZE


@dataclass(frozen=True)
class TimerCheckpoint:
    last_read_time_ms: int
    last_timer_log_flush_pos: int
    last_timer_queue_offset: int
    master_timer_queue_offset: int
    state_version: int
    version_timestamp: int
    version_counter: int

    @property
    def zeroed(self) -> bool:
        """Nothing in it: a checkpoint the wheel never wrote (or one wiped)."""
        return not any(getattr(self, name) for name in CHECKPOINT_FIELDS)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in CHECKPOINT_FIELDS}


def decode_checkpoint(data: bytes, path: str = CHECKPOINT_FILE) -> tuple[TimerCheckpoint | None, list[dict[str, Any]]]:
    """(TimerCheckpoint or None, problems) of config/timercheck's bytes: a file of another size than the page the
    broker maps is damaged (None when it is too short to hold the seven longs)."""
    problems = []
    if len(data) != CHECKPOINT_SIZE:
        problems.append(_problem(path, min(len(data), CHECKPOINT_SIZE),
                                 f"timer checkpoint of {len(data)} bytes, {CHECKPOINT_SIZE} expected"))
    if len(data) < 8 * len(CHECKPOINT_FIELDS):
        return None, problems
    longs = np.frombuffer(bytes(data[:8 * len(CHECKPOINT_FIELDS)]), ">i8")
    return TimerCheckpoint(*(int(x) for x in longs)), problems


def decode_metrics(data: bytes) -> dict[str, Any]:
    """config/timermetrics' JSON (TimerMetrics.TimerMetricsSerializeWrapper) as a dict."""
    return json.loads(bytes(data).decode("utf-8"))


CHUNK_UNITS = 1 << 16  # units read at a time (3.4 MB): a timer log of any size is checked in bounded memory


def scan_timer_log(fs: pafs.FileSystem, segments: Sequence[Segment], file_size: int | None = None,
                   each_chunk: EachChunk | None = None) -> tuple[int, list[dict[str, Any]]]:
    """(end, problems) of the timer log's files (storefs Segments in offset order), read CHUNK_UNITS units at a
    time; `end` the offset after the last unit (0: no unit). `each_chunk(positions, units)`: called with every
    chunk's units (a UNIT_DTYPE array over the file's bytes, valid during the call) and their timer-log offsets, in
    log order. `file_size`: the log's mapped-file size (None: the largest file's length). Damaged: a file shorter
    than the mapped size, a unit cut short by the file's end, a unit whose size is not 52 or whose magic is not
    MAGIC_DEFAULT with ROLL/DELETE bits (the units after it are not read), bytes after the last unit of a file that
    are neither its blank nor zeros."""
    size = file_size or max([s.length for s in segments] + [0])
    problems, end = [], 0
    for i, seg in enumerate(segments):
        n, whole, bad_magic = 0, seg.length // UNIT_SIZE, False
        while n < whole:
            count = min(CHUNK_UNITS, whole - n)
            view = storefs.read_range(fs, seg.path, n * UNIT_SIZE, count * UNIT_SIZE).view(UNIT_DTYPE)
            magic = view["magic"]
            wrong = np.flatnonzero((view["size"] != UNIT_SIZE) | ((magic & MAGIC_DEFAULT) == 0)
                                   | ((magic & ~(MAGIC_DEFAULT | MAGIC_ROLL | MAGIC_DELETE)) != 0))
            good = view[:int(wrong[0])] if len(wrong) else view
            if each_chunk is not None and len(good):
                each_chunk(seg.start + (n + np.arange(len(good), dtype=np.int64)) * UNIT_SIZE, good)
            n += len(good)
            if len(wrong):
                bad_magic = bool(view["size"][wrong[0]] == UNIT_SIZE)  # else not a unit: the tail says what it is
                if bad_magic:
                    problems.append(_problem(seg.path, seg.start + n * UNIT_SIZE,
                                             f"timer-log unit with bad magic {int(magic[wrong[0]])}"))
                break
        if n:
            end = seg.start + n * UNIT_SIZE
        if not bad_magic:  # (after a bad magic the file's rest is not read: that unit is the damage said)
            problems += _tail_problems(fs, seg, n * UNIT_SIZE, size, i == len(segments) - 1)
        if seg.length < size:  # after a unit it cut short (the first byte that is no whole unit comes first)
            problems.append(_problem(seg.path, seg.start + seg.length,
                                     f"truncated timer-log file: {seg.length} bytes, {size} expected"))
    return end, problems


def _tail_problems(fs, seg, at, size, last):
    """What follows a file's units (from byte `at`): a blank that fills the file, zeros (the last file's unwritten
    part), or damage (a unit cut by the file's end, a unit of another size, stray bytes); read a chunk at a time."""
    left = seg.length - at
    if not left:
        return []
    head = storefs.read_range(fs, seg.path, at, MIN_BLANK)
    if left >= MIN_BLANK:
        blank = head.view(np.dtype([("size", ">i4"), ("zero", ">i8"), ("magic", ">i4")]))[0]
        if int(blank["magic"]) == BLANK_MAGIC and int(blank["size"]) == size - at:
            return []
    step = CHUNK_UNITS * UNIT_SIZE
    if not any(storefs.read_range(fs, seg.path, x, step).any() for x in range(at, seg.length, step)):
        if last or left < MIN_BLANK:  # the unwritten part of the last file; a truncated one is said above
            return []
        return [_problem(seg.path, seg.start + at, "timer-log file ends in zeros without its blank")]
    if left < UNIT_SIZE and seg.length < size:
        return [_problem(seg.path, seg.start + at, f"timer-log unit cut short: {left} of {UNIT_SIZE} bytes")]
    first = int(head[:4].view(">i4")[0]) if left >= 4 else None
    return [_problem(seg.path, seg.start + at, f"timer-log unit of size {first}, {UNIT_SIZE} expected"
                     if first is not None else f"{left} stray byte(s) after the last timer-log unit")]


def checkpoint_problems(checkpoint: TimerCheckpoint | None, end: int, path: str = CHECKPOINT_FILE
                        ) -> list[dict[str, Any]]:
    """What the checkpoint and the timer log say of each other: a zeroed checkpoint beside a timer log of units
    (the wheel's read time lost: every unit would be read again, or the file was wiped), a flush position beyond
    the timer log's last unit (units the broker flushed are gone)."""
    if checkpoint is None:
        return []
    if checkpoint.zeroed and end:
        return [_problem(path, 0, f"timer checkpoint is zeroed while the timer log holds units (up to offset {end})")]
    if checkpoint.last_timer_log_flush_pos > end:
        return [_problem(path, 8, f"timer checkpoint's lastTimerLogFlushPos {checkpoint.last_timer_log_flush_pos} is "
                                  f"beyond the timer log's last unit (offset {end}): flushed units are missing")]
    return []


def decode_slots(data: bytes | np.ndarray) -> np.ndarray:
    """The wheel's slots (SLOT_DTYPE) of `timerwheel`'s bytes (whole slots; a partial one left out)."""
    data = np.asarray(data, np.uint8)
    return data[:len(data) // SLOT_SIZE * SLOT_SIZE].view(SLOT_DTYPE)


def used_slots(slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(indexes, slots) of the slots the wheel has written (a time set)."""
    at = np.flatnonzero(slots["time_div_precision"] != 0)
    return at, slots[at]


def _problem(path, offset, reason):
    return dict(file=path, offset=offset, topic=None, queue_id=None, reason=reason)


@dataclass(frozen=True)
class TimerState:
    """What a store holds of its timer wheel (files absent: None / empty)."""

    checkpoint: TimerCheckpoint | None
    checkpoint_path: str | None
    end: int  # the timer-log offset after its last unit
    files: tuple  # the timer log's Segment files
    problems: list

    @property
    def present(self) -> bool:
        return self.checkpoint is not None or bool(self.files)


def read_checkpoint(fs: pafs.FileSystem, root: str) -> tuple[TimerCheckpoint | None, str | None, list[dict[str, Any]]]:
    """(the store's timer checkpoint or None, its path or None, its damage) of config/timercheck."""
    path = f"{root}/config/{CHECKPOINT_FILE}"
    if fs.get_file_info(path).type.name != "File":
        return None, None, []
    checkpoint, problems = decode_checkpoint(storefs.read_range(fs, path).tobytes(), path)
    return checkpoint, path, problems


def read_timer_state(fs: pafs.FileSystem, root: str, each_chunk: EachChunk | None = None) -> TimerState:
    """The timer wheel's state of the store at `root` on `fs`: its checkpoint and its timer log, checked against each
    other (problems: damage, for the caller's corruption policy), the log read in bounded chunks (scan_timer_log,
    whose `each_chunk` gets its units)."""
    checkpoint, path, problems = read_checkpoint(fs, root)
    segments, _ = storefs.list_segments(fs, f"{root}/{TIMER_LOG_DIR}")
    end, log_problems = scan_timer_log(fs, segments, storefs.file_size_of(segments), each_chunk)
    problems += log_problems
    problems += checkpoint_problems(checkpoint, end, path or CHECKPOINT_FILE)
    return TimerState(checkpoint, path, end, tuple(segments), problems)
