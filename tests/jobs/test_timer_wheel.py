"""The timer wheel's own state (config/timercheck, config/timermetrics, timerlog/, timerwheel) of store_5x, a RocketMQ
5.3.3 store, read and checked: its numbers against the fixture's README and expected files; a truncated timer log,
a checkpoint of the wrong size or zeroed, a unit of a bad magic are damaged data; pending messages due before the
wheel's read time are overdue by the wheel's own word."""
import json
import struct
import subprocess
import sys

import numpy as np
import pyarrow.fs as pafs
import pytest

from jobs.ledgers.timer import Reads, count_rows, overdue_warnings
from jobs.plan.build import build_plan
from jobs.settings import CorruptPolicy, JobOptions
from schemas.errors import CorruptStoreError
from schemas.store import timer_wheel
from schemas.store.timer_wheel import read_timer_state
from tests.jobs.conftest import writable_copy
from tests.jobs.test_replay_spark import ROOT

WHEEL_MESSAGES = 225 + 33 + 28 + 7  # short, cancelled, pending, far: README "What was written" (direct ones skip it)
MARKERS = 33  # recall markers, each a MAGIC_DELETE unit
FAR = 7  # parked beyond the roll window: MAGIC_ROLL units
UNIT = 52
TIMERLOG_FILE = 16384  # README: mappedFileSizeTimerLog


def _expected(store_5x, name):
    return json.loads((store_5x / "expected" / name).read_text(encoding="utf-8"))


def _state(store):
    return read_timer_state(pafs.LocalFileSystem(), str(store))


def _units(store):
    """The timer log's units, every chunk the scan hands out kept (a copy: a chunk is the file's bytes)."""
    chunks = []
    read_timer_state(pafs.LocalFileSystem(), str(store), lambda positions, units: chunks.append(units.copy()))
    return np.concatenate(chunks)


def _plan(store, **options):
    return build_plan(JobOptions(store=str(store), ad_hoc=(("G_T", "TopicTimer", "TAG", "*"),), retry=False,
                                 **options))


def test_the_checkpoint_says_the_wheel_read_up_to_the_last_deliveries_and_flushed_every_unit(store_5x):
    state = _state(store_5x / "store")
    ledger = _expected(store_5x, "timer_ledger.json")
    stop = _expected(store_5x, "run.json")["stopTs"]
    passed = max(e["deliverMs"] for e in ledger["ledger"].values() if e["state"] != "pending" and not e["direct"])
    waiting = min(e["deliverMs"] for e in ledger["ledger"].values() if e["state"] == "pending")
    cp = state.checkpoint
    assert passed < cp.last_read_time_ms <= stop < waiting
    assert cp.version_timestamp == stop  # the checkpoint's DataVersion was stamped at the shutdown
    assert state.problems == []
    # every unit flushed: the first file full (314 units and its 56-byte blank), the rest in the second one
    assert cp.last_timer_log_flush_pos == state.end == TIMERLOG_FILE + (WHEEL_MESSAGES + MARKERS - 314) * UNIT


def test_the_timer_log_holds_a_unit_per_wheel_message_and_recall_marker(store_5x):
    units = _units(store_5x / "store")
    magic = units["magic"]
    assert len(units) == WHEEL_MESSAGES + MARKERS
    assert (magic & 4 != 0).sum() == MARKERS
    assert (magic & 2 != 0).sum() == FAR
    assert set(units["size"].tolist()) == {UNIT}
    # a pending message's unit, not parked (not far): deliver time = currWriteTime + delay, its TIMER_OUT_MS
    ledger = _expected(store_5x, "timer_ledger.json")["ledger"]
    pending = {e["deliverMs"] for e in ledger.values() if e["intent"] == "pending"}
    written = set((units["curr_write_time"] + units["delay"]).tolist())
    assert pending <= written


def test_dump_timers_shows_the_checkpoint_the_metrics_and_every_unit(store_5x):
    proc = subprocess.run([sys.executable, "-m", "jobs.dump", str(store_5x / "store"), "timers"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert lines[0]["file"] == "config/timercheck"
    assert lines[0]["content"]["last_read_time_ms"] > 0
    assert lines[1]["file"] == "config/timermetrics"
    assert set(lines[1]["content"]["timingCount"]) <= {"TopicTimer", "TopicOrder"}  # README: the real topics
    units = [x for x in lines[2:] if "pos" in x]
    assert len(units) == len(lines) - 2 == WHEEL_MESSAGES + MARKERS
    assert units[0]["pos"] == 0 and units[1]["pos"] == UNIT
    assert units[-1]["pos"] == TIMERLOG_FILE + (WHEEL_MESSAGES + MARKERS - 314 - 1) * UNIT


def test_the_plan_ships_the_wheel_s_read_time(store_5x):
    raw = (store_5x / "store" / "config" / "timercheck").read_bytes()
    assert _plan(store_5x / "store").plan.timer_wheel_read == struct.unpack(">q", raw[:8])[0]


def test_a_timer_log_cut_mid_unit_is_damaged_data_named_with_its_offset(store_5x, tmp_path):
    copy = writable_copy(store_5x, tmp_path)
    first = copy / "timerlog" / "00000000000000000000"
    first.write_bytes(first.read_bytes()[:10 * UNIT + 20])
    with pytest.raises(CorruptStoreError) as caught:
        _plan(copy)
    assert caught.value.path.endswith("timerlog/00000000000000000000")
    assert caught.value.offset == 10 * UNIT
    assert "truncated" in caught.value.reason or "cut short" in caught.value.reason


def test_a_timer_log_unit_of_a_bad_magic_is_damaged_data(store_5x, tmp_path):
    copy = writable_copy(store_5x, tmp_path)
    first = copy / "timerlog" / "00000000000000000000"
    data = bytearray(first.read_bytes())
    data[3 * UNIT + 12:3 * UNIT + 16] = struct.pack(">i", 0x40)
    first.write_bytes(bytes(data))
    with pytest.raises(CorruptStoreError) as caught:
        _plan(copy)
    assert (caught.value.offset, "bad magic 64" in caught.value.reason) == (3 * UNIT, True)


def test_a_zeroed_checkpoint_beside_a_timer_log_of_units_is_damaged_data(store_5x, tmp_path):
    copy = writable_copy(store_5x, tmp_path)
    (copy / "config" / "timercheck").write_bytes(bytes(4096))
    with pytest.raises(CorruptStoreError, match="zeroed") as caught:
        _plan(copy)
    assert caught.value.path.endswith("config/timercheck")


def test_a_checkpoint_of_the_wrong_size_is_damaged_data(store_5x, tmp_path):
    copy = writable_copy(store_5x, tmp_path)
    path = copy / "config" / "timercheck"
    path.write_bytes(path.read_bytes()[:56])
    with pytest.raises(CorruptStoreError, match="56 bytes, 4096 expected"):
        _plan(copy)


def test_under_skip_the_wheel_s_damage_is_a_problem_and_no_read_time_is_used(store_5x, tmp_path):
    copy = writable_copy(store_5x, tmp_path)
    (copy / "config" / "timercheck").write_bytes(bytes(4096))
    planned = _plan(copy, on_corrupt=CorruptPolicy.SKIP)
    assert [p["file"].endswith("config/timercheck") for p in planned.problems] == [True]
    assert planned.plan.timer_wheel_read is None


@pytest.mark.spark
def test_a_pending_timer_due_before_the_wheel_s_read_time_is_overdue_by_the_wheel(spark):
    rows = [  # (uniq_key, real_topic, deliver_ms, state, lag_ms, broker)
        ("a", "T", 1_000, "pending", None, "b1"),  # before the wheel's read time (2 s): passed by the wheel
        ("b", "T", 2_000, "pending", None, "b1"),  # at it: its slot not read yet
        ("c", "T", 1_000, "delivered", 10, "b1"),
        ("d", "T", 1_000, "pending", None, "b2"),  # b2's wheel unknown, its clock close: nothing
    ]
    frame = spark.createDataFrame(rows, "uniq_key string, real_topic string, deliver_ms long, "
                                  "state string, lag_ms long, broker string")
    reads = Reads({"b1": 2_500, "b2": 2_500}, {"b1": {"T"}, "b2": {"T"}}, {"b1": 2_000})
    got = count_rows(frame, reads, 300_000)
    assert [(r["broker"], r["pending"], r["overdue"], r["overdue_by_wheel"]) for r in got] == \
        [("b1", 2, 1, 1), ("b2", 1, 0, 0)]
    [warning] = overdue_warnings(got, 300_000)
    assert "due before the wheel's own read time" in warning and "lost by the wheel" in warning


def test_the_timer_log_is_read_a_few_units_at_a_time_with_the_same_answer(store_5x, tmp_path, monkeypatch):
    """Memory bounded by a chunk, whatever the log's size: with chunks of 7 units the scan hands out no more at a
    time, the same units at the same offsets, and a bad magic in a later chunk at its own offset."""
    whole = _units(store_5x / "store")
    monkeypatch.setattr(timer_wheel, "CHUNK_UNITS", 7)
    sizes, positions = [], []
    state = read_timer_state(pafs.LocalFileSystem(), str(store_5x / "store"),
                             lambda at, units: (sizes.append(len(units)), positions.append(at.copy())))
    assert max(sizes) == 7 and sum(sizes) == len(whole) and state.problems == []
    assert np.concatenate(positions)[:3].tolist() == [0, UNIT, 2 * UNIT]
    assert (_units(store_5x / "store") == whole).all()
    copy = writable_copy(store_5x, tmp_path)
    first = copy / "timerlog" / "00000000000000000000"
    data = bytearray(first.read_bytes())
    data[23 * UNIT + 12:23 * UNIT + 16] = struct.pack(">i", 0x40)
    first.write_bytes(bytes(data))
    assert [(p["offset"], p["reason"]) for p in _state(copy).problems] == \
        [(23 * UNIT, "timer-log unit with bad magic 64")]
