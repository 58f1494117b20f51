"""Windows of store time or queue offsets (--since/--until, --starting-offsets/--ending-offsets), resolved on
the driver into one range of queue offsets [first, end) per needed queue.

Offsets are in the shape of Spark's Kafka source: `{"TopicA": {"0": 23, "1": -2}}`, -2 the queue's
earliest offset, -1 its latest (one past its last unit), the ending offset exclusive; a queue the JSON does
not name runs from its earliest to its latest. Times become offsets by a binary search over each queue's
units (store times from the ext unit where it holds one, else from the commit-log record the unit points
at): `first` is the first unit stored at or after --since, `end` the first stored at or after --until. The
tasks still check every unit's store time exactly, so when a queue's times are not monotonic (a clock set
back, a failover), the range is where the search lands and the run delivers, inside it, only the units of
the window; the next run from its offsets.json starts at `end`.

A topic or queue the offsets JSON names that the store lacks is a usage error (a typo), a warning with
--allow-missing (a nightly run over topics that come and go); topics of the store this run does not read
are ignored, so a wider run's offsets.json serves a narrower one.

A run of several brokers takes (and writes) offsets per broker, `{"brokers": {"broker-a": {"TopicA": {"0": 23}}}}`:
each broker's queues are its own. The per-topic shape serves a run of one broker (a bare --store's nightly
chain reads as before); a broker the per-broker JSON does not name runs from its earliest to its latest."""
from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import numpy as np

from jobs.errors import OffsetOutOfRange, UsageError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from jobs.plan.units.choose import BrokerUnits
    from schemas.store.store import StoreLayout

EARLIEST, LATEST = -2, -1  # in an offsets JSON, as Spark's Kafka source writes them
PROBE_THREADS = 16  # queues whose store-time window is searched at a time (the probes wait on reads, not the CPU)


def resolve_offset(offset: int, earliest: int, latest: int) -> int:
    """An offsets JSON's offset with EARLIEST and LATEST replaced by a queue's earliest and latest."""
    return earliest if offset == EARLIEST else latest if offset == LATEST else offset


# 2001-01-01T00:00:00Z in epoch ms: no broker stored a message before it (RocketMQ began in 2012), while an epoch
# number in seconds of any year until 2286 is smaller, so a number below it can only be seconds (or a typo)
FIRST_STORE_TIME = 978307200000
# 10000-01-01T00:00:00Z: a later bound is no store time (a pasted nanosecond or microsecond number, a typo)
# and would overflow the int64 store-time columns it is compared with
END_OF_TIME = 253402300800000


def parse_store_time(text: str) -> int:
    """A store time as epoch milliseconds: digits are epoch ms, anything else ISO-8601 with an offset
    (`2026-11-21T12:57:15.400+08:00`, or `Z`); ValueError otherwise, and for a number before 2001, which
    would silently put the window's bound in 1970."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        value = int(text)
        if value < FIRST_STORE_TIME:
            raise ValueError(_before_any_store(text, value))
        if value >= END_OF_TIME:
            raise ValueError(f"{text} is after the year 9999 in epoch milliseconds (microseconds or nanoseconds?): "
                             "give epoch milliseconds or ISO-8601 with an offset")
        return value
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise ValueError(f"{text!r} is neither epoch milliseconds nor an ISO-8601 time") from None
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset (write e.g. {text}+08:00 or {text}Z)")
    delta = moment - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _before_any_store(text, value):
    """Why an epoch number before 2001 is refused, with the milliseconds meant when it reads as seconds."""
    if value < 0:
        return f"{text} is before 1970 in epoch milliseconds: give epoch milliseconds or ISO-8601 with an offset"
    day = (datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=value)).date()
    if FIRST_STORE_TIME <= value * 1000 < 10 ** 13:  # seconds of 2001 to 2286
        return f"{text} reads as {day} in epoch milliseconds: did you mean seconds? write {value * 1000}"
    return f"{text} reads as {day} in epoch milliseconds, before any broker stored a message: give epoch " \
           "milliseconds or ISO-8601 with an offset"


@dataclass(frozen=True)
class Window:
    """What the command line asks: store-time bounds in epoch ms and offsets per topic and queue."""

    since: int | None = None
    until: int | None = None
    starting: dict = field(default_factory=dict)  # {topic: {queue_id: offset}}
    ending: dict = field(default_factory=dict)
    # the per-broker shape: {broker: {topic: {queue_id: offset}}} (None: the per-topic shape, or nothing, given)
    starting_by_broker: dict | None = None
    ending_by_broker: dict | None = None
    # the file --starting-offsets named (None: JSON text, a lake's, or none): an earlier night's OUT/offsets.json
    # whose ledgers a Parquet night carries on (jobs/ledgers/pop.py carried_ledger)
    starting_file: str | None = field(default=None, compare=False)

    @property
    def given(self) -> bool:
        return self.since is not None or self.until is not None or bool(self.starting) or bool(self.ending) \
            or bool(self.starting_by_broker) or bool(self.ending_by_broker)

    def for_broker(self, name: str, several: bool) -> Window:
        """This window as one broker of a run sees it (`several`: the run has more than one broker): its own
        offsets of a per-broker JSON; a per-topic JSON only when it is the run's one broker."""
        sides = []
        for flag, flat, by_broker in (("--starting-offsets", self.starting, self.starting_by_broker),
                                      ("--ending-offsets", self.ending, self.ending_by_broker)):
            if by_broker is not None:
                sides.append(by_broker.get(name, {}))
            elif flat and several:
                raise UsageError(f"{flag}: offsets per topic in a run of several brokers, whose queues are each "
                                 f"broker's own: give them per broker, {BROKERS_SHAPE} (a cluster run's offsets.json)")
            else:
                sides.append(flat)
        return replace(self, starting=sides[0], ending=sides[1], starting_by_broker=None, ending_by_broker=None)

    def contains(self, store_times: np.ndarray) -> np.ndarray:
        """Bool per store time (numpy int64): since <= t < until."""
        inside = np.ones(len(store_times), dtype=bool)
        if self.since is not None:
            inside &= store_times >= self.since
        if self.until is not None:
            inside &= store_times < self.until
        return inside

    def queue_offsets(self, earliest: int, latest: int) -> dict[tuple[str, int], tuple[int, int]]:
        """{(topic, queue_id): (first, end)} of every queue the offsets name, EARLIEST and LATEST resolved to
        `earliest` and `latest` (a queue named on one side only is open on the other)."""
        first = {(t, q): o for t, queues in self.starting.items() for q, o in queues.items()}
        end = {(t, q): o for t, queues in self.ending.items() for q, o in queues.items()}
        return {key: (resolve_offset(first.get(key, EARLIEST), earliest, latest),
                      resolve_offset(end.get(key, LATEST), earliest, latest)) for key in set(first) | set(end)}


FLAGS = ("--since", "--until", "--starting-offsets", "--ending-offsets")


def parse_window(since: str | None = None, until: str | None = None, starting: str | None = None,
                 ending: str | None = None, flags: Sequence[str] = FLAGS, brokers: bool = False) -> Window:
    """Window of the four options (text as given; None when absent); UsageError names what is wrong, by
    the option names in `flags` (the command line's, or the data source's). `brokers`: the offsets may be
    given per broker (a run of a cluster)."""
    bounds = {}
    for flag, text in zip(flags[:2], (since, until)):
        try:
            bounds[flag] = None if text is None else parse_store_time(text)
        except ValueError as exc:
            raise UsageError(f"{flag}: {exc}") from None
    first, last = (bounds[f] for f in flags[:2])
    if first is not None and last is not None and first > last:
        raise UsageError(f"{flags[0]} {since} ({first}) is after {flags[1]} {until} ({last}): "
                         "the window would be empty")
    sides: dict[str, tuple[dict[str, dict[int, int]], dict[str, dict[str, dict[int, int]]] | None]] = {}
    for flag, text in zip(flags[2:], (starting, ending)):
        data = _offsets_data(text, flag)
        if brokers and _per_broker(data):
            sides[flag] = ({}, {name: _flat_offsets(o, f"{flag} broker {name!r}")
                                for name, o in data[BROKERS_KEY].items()})
        else:
            sides[flag] = (_flat_offsets(data, flag), None)
    (start, start_b), (end, end_b) = (sides[f] for f in flags[2:])
    named = starting is not None and not starting.lstrip().startswith("{")
    return Window(first, last, start, end, start_b, end_b, starting_file=starting if named else None)


BROKERS_KEY = "brokers"
BROKERS_SHAPE = '{"brokers": {"broker-a": {"TopicA": {"0": 23}}}}'


def _per_broker(data):
    """Whether an offsets JSON is the per-broker shape: {"brokers": {name: {topic: {queue: offset}}}} (a
    topic named `brokers` maps to offsets, not to objects of objects)."""
    if not isinstance(data, dict) or len(data) != 1:
        return False
    named = data.get(BROKERS_KEY)
    return isinstance(named, dict) and \
        all(isinstance(topics, dict) and all(isinstance(q, dict) for q in topics.values()) for topics in named.values())


def _offsets_data(text, flag):
    """The JSON of a text or of a file holding one (None: {})."""
    if text is None:
        return {}
    source = text
    if not text.lstrip().startswith("{"):
        try:
            with open(text, encoding="utf-8") as f:
                source = f.read()
        except OSError as exc:
            raise UsageError(f"{flag} {text}: neither JSON nor a readable file ({exc.strerror})") from None
    try:
        data = json.loads(source)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} {text}: not JSON ({exc})") from None
    return data


def _flat_offsets(data, flag):
    """{topic: {queue_id: offset}} of the per-topic shape, checked."""
    out = {}
    shape = '{"TopicA": {"0": 23, "1": -2}}'
    if not isinstance(data, dict):
        raise UsageError(f"{flag}: expected an object like {shape}")
    for topic, queues in data.items():
        if not isinstance(queues, dict):
            raise UsageError(f"{flag}: topic {topic!r} maps to {queues!r}, expected an object like {shape}")
        for qid, offset in queues.items():
            if not str(qid).isdigit() or isinstance(offset, bool) or not isinstance(offset, int) or offset < -2 \
                    or offset >= 1 << 63 or int(qid) >= 1 << 31:
                raise UsageError(f"{flag}: {topic!r} queue {qid!r} offset {offset!r}: expected a queue id "
                                 "and an offset >= 0, -2 (earliest) or -1 (latest)")
            out.setdefault(topic, {})[int(qid)] = offset
    return out


@dataclass(frozen=True)
class Resolved:
    """The window per queue: ((topic, queue_id, first, end), ...) in the sources' order, the broker's units
    sources narrowed to it (jobs/plan/units/choose.BrokerUnits), and what the run must report."""

    ranges: tuple
    units: object
    problems: list
    warnings: list
    # the topics whose every queue (of those with bounds before the tasks run) the window reads to its latest
    # offset: what the store holds of them now, the window's end aside
    to_end: frozenset = frozenset()


def resolve(window: Window, fs: pafs.FileSystem, layout: StoreLayout, units: BrokerUnits,
            topics_present: Collection[str], allow_missing: bool = False) -> Resolved:
    """Resolved of a Window over the queues whose bounds the broker's units sources (`units`: a BrokerUnits)
    know before the tasks run; UsageError / OffsetOutOfRange for offsets that name nothing or data the store
    never held. Queues rebuilt from the commit log have no bounds before the tasks walk them: the tasks apply
    the window to them."""
    bounds = {}
    for source in units.sources:
        bounds.update(source.queue_bounds(fs, layout.log))
    known = {(q.topic, q.queue_id) for q in layout.queues} | set(units.known)
    warnings = _unknown_names(window, known, topics_present, allow_missing, units.rebuilds)
    problems: list[dict[str, Any]] = []
    given = []
    for key, (lo, hi, time_of) in bounds.items():
        topic, qid = key
        first = _offset(window.starting, key, lo, lo, hi, "--starting-offsets", problems)
        end = _offset(window.ending, key, hi, lo, hi, "--ending-offsets", problems)
        if end < first and qid in window.starting.get(topic, {}) and qid in window.ending.get(topic, {}):
            raise UsageError(f"--ending-offsets: topic {topic} queue {qid} ends at offset {end}, before "
                             f"--starting-offsets starts it at {first}")
        given.append((topic, qid, first, end, lo, hi, time_of))

    # a queue's binary searches of the store-time window: a probe reads two files
    def searched(queue: tuple[str, int, int, int, int, int, Callable[[int], int]]) -> tuple[str, int, int, int]:
        topic, qid, first, end, lo, hi, time_of = queue
        if window.since is not None:
            first = max(first, _first_stored_at_or_after(time_of, window.since, lo, hi))
        if window.until is not None:
            end = min(end, _first_stored_at_or_after(time_of, window.until, lo, hi))
        return topic, qid, first, max(first, end)
    if window.since is None and window.until is None or len(given) < 2:
        ranges = tuple(map(searched, given))
    else:  # the queues searched side by side: on an object store each probe waits on two round trips
        with ThreadPoolExecutor(min(PROBE_THREADS, len(given))) as pool:
            ranges = tuple(pool.map(searched, given))
    short = {g[0] for g, r in zip(given, ranges) if r[3] < g[5]}  # a queue the window ends before its latest
    return Resolved(ranges, units.mapped(lambda s: s.windowed(fs, window, ranges)), problems, warnings,
                    frozenset(g[0] for g in given) - short)


def _offset(given, key, default, lo, hi, flag, problems):
    """The queue offset an offsets JSON gives one queue: below its earliest is OFFSET_TOO_SMALL (a problem
    of the run: retention deleted those units), above its latest an OffsetOutOfRange."""
    topic, qid = key
    offset = given.get(topic, {}).get(qid, default)
    offset = resolve_offset(offset, lo, hi)
    if offset > hi:
        raise OffsetOutOfRange(f"{flag}: topic {topic} queue {qid} offset {offset} is beyond the queue's "
                               f"latest offset {hi} (its units are {lo} to {hi - 1})")
    if offset < lo:
        problems.append(dict(file=f"consumequeue/{topic}/{qid}", offset=None, topic=topic, queue_id=qid,
                             reason=f"OFFSET_TOO_SMALL: {flag} {offset} is below the queue's earliest offset "
                                    f"{lo}: units {offset} to {lo - 1} were deleted (retention)"))
        offset = lo
    return offset


def _unknown_names(window, queues, topics_present, allow_missing, rebuilt=False):
    """Topics and queues of the offsets JSON the store lacks. Where units are rebuilt from the commit log, a
    queue of a store topic is taken as given (only the commit log knows its queues)."""
    problems = []
    for flag, given in (("--starting-offsets", window.starting), ("--ending-offsets", window.ending)):
        for topic, offsets in given.items():
            if topic not in topics_present:
                problems.append(f"{flag}: topic {topic!r} is not in the store")
                continue
            problems += [f"{flag}: topic {topic!r} has no queue {qid} in the store"
                         for qid in sorted(offsets) if (topic, qid) not in queues and not rebuilt]
    if problems and not allow_missing:
        raise UsageError("; ".join(problems) + " (--allow-missing runs anyway)")
    return problems


def _first_stored_at_or_after(time_of, bound, lo, hi):
    """The first queue offset in [lo, hi) whose store time is >= bound, hi if none (binary search)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if time_of(mid) < bound:
            lo = mid + 1
        else:
            hi = mid
    return lo


def offsets_json(ranges: Iterable[tuple[str, int, int, int]]) -> dict[str, dict[str, int]]:
    """OUT/offsets.json: per topic and queue the exclusive end of what the run covered."""
    out: dict[str, dict[str, int]] = {}
    for topic, qid, _, end in ranges:
        out.setdefault(topic, {})[str(qid)] = end
    return out


def offsets_by_broker(ends: Mapping[str, Iterable[tuple[str, int, int, int]]],
                      carried: Mapping[str, Mapping[str, Mapping[int, int]]] | None = None
                      ) -> dict[str, dict[str, dict[str, dict[str, int]]]]:
    """OUT/offsets.json of a run of brokers: {"brokers": {name: offsets_json}}, `ends` {name: ranges} of the
    brokers replayed; `carried` {name: {topic: {queue_id: offset}}}: the starting offsets of brokers the run
    did not replay (a store missing tonight), kept for the next run."""
    out = {name: {t: {str(q): o for q, o in queues.items()} for t, queues in offsets.items()}
           for name, offsets in (carried or {}).items()}
    out.update({name: offsets_json(ranges) for name, ranges in ends.items()})
    return {BROKERS_KEY: dict(sorted(out.items()))}


def describe(window: Window, ranges: Iterable[tuple[str, int, int, int]]) -> dict[str, Any]:
    """summary.json's `window`: the bounds asked and, per topic and queue, the offsets covered [first, end)."""
    covered: dict[str, dict[str, list[int]]] = {}
    for topic, qid, first, end in ranges:
        covered.setdefault(topic, {})[str(qid)] = [first, end]
    return {"since": window.since, "until": window.until, "starting_offsets": _str_keys(window.starting),
            "ending_offsets": _str_keys(window.ending), "offsets": covered,
            "units": sum(end - first for _, _, first, end in ranges)}


def _str_keys(given):
    return {t: {str(q): o for q, o in offsets.items()} for t, offsets in given.items()} or None
