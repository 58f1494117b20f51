"""Planning that scales: on a store of many queues cut into many splits, counted through a filesystem
wrapper, a split opens only consume-queue segments that can point into it, each segment is opened a
bounded number of times, only the needed queues are read, and every unit is still found exactly once."""
import json
import random

import numpy as np
import pytest

import schemas
from jobs.plan.build import build_plan
from jobs.settings import JobOptions
from jobs.task.split_units import commitlog_splits, split_units
from schemas.queues import cq_ranges
from schemas.store.local_api import local_store
from tools.lookups import CQ, EXT, counting
from tools.store_writer import Message, StoreWriter

TOPICS = [f"T{t}" for t in range(6)] + ["Sparse"]  # Sparse: one message in 40, its files span many splits
QUEUES = 4
SPLIT_SIZE = 16 << 10
CQ_FILE_SIZE = 40 * 20


@pytest.fixture(scope="module")
def many_queues(tmp_path_factory):
    """28 queues of 40-unit files (about 140 files), 64 KiB commit-log files cut into 16 KiB splits (~40)."""
    root = tmp_path_factory.mktemp("many_queues")
    rng = random.Random(17)
    with StoreWriter(root / "store", commitlog_file_size=64 << 10, cq_file_size=CQ_FILE_SIZE,
                     ext_file_size=8 << 10) as w:
        for i in range(4000):
            topic = "Sparse" if i % 40 == 0 else rng.choice(TOPICS[:-1])
            w.append(Message(topic, rng.randrange(QUEUES), b"x" * rng.randint(40, 90),
                             {"TAGS": rng.choice(["TagA", "TagB"]), "KEYS": f"k{i}"}, store_timestamp=i))
    subs = root / "subscriptions.json"
    subs.write_text(json.dumps({"groups": [
        {"group": "G_A", "topic": "T0", "expressionType": "TAG", "expression": "TagA"},
        {"group": "G_B", "topic": "T1", "expressionType": "TAG", "expression": "*"},
        {"group": "G_S", "topic": "Sparse", "expressionType": "TAG", "expression": "*"}]}))
    return root / "store", subs


def _plan(store, subs, split_size=SPLIT_SIZE, **kw):
    return build_plan(JobOptions(store=str(store), subscription_files=(str(subs),), split_size=split_size, **kw))


def _pointing(store):
    """{segment path: (lowest, highest) commit-log offset its units point at}, from the whole files."""
    units = schemas.read_consume_queues(store).to_pylist()
    offsets = {}
    for u in units:
        key = (u["topic"], u["queue_id"], u["queue_offset"] * 20 // CQ_FILE_SIZE * CQ_FILE_SIZE)
        offsets.setdefault(key, []).append(u["commitlog_offset"])
    out = {}
    for q in local_store(store).queues:
        for s in q.cq:
            found = offsets.get((q.topic, q.queue_id, s.start))
            out[s.path] = (min(found), max(found)) if found else None
    return units, out


@pytest.mark.parametrize("probe_units", [cq_ranges.PROBE_UNITS, 4])  # 4: the binary searches, not whole reads
def test_a_split_opens_only_segments_pointing_into_it_and_finds_every_unit_once(many_queues, monkeypatch,
                                                                                probe_units):
    monkeypatch.setattr(cq_ranges, "PROBE_UNITS", probe_units)
    store, subs = many_queues
    units, pointing = _pointing(store)
    with counting() as lookups:
        planned = _plan(store, subs)
        driver_opens = dict(lookups.opens)
        splits = commitlog_splits(planned.plan)
        assert len(splits) > 30
        opens, found = dict.fromkeys(pointing, 0), []
        for start, end in splits:
            lookups.reset()
            table = split_units(planned.plan, start, end).units
            found += [(r["topic"], r["queue_id"], r["queue_offset"]) for r in table.to_pylist()]
            for path, n in lookups.opens.items():
                if CQ not in path:
                    continue
                lo, hi = pointing[path]
                assert lo < end and hi >= start, f"split [{start}, {end}) opened {path}, which points at [{lo}, {hi}]"
                assert n == 1
                opens[path] += 1
    needed = {"T0", "T1", "Sparse"}
    want = sorted((u["topic"], u["queue_id"], u["queue_offset"]) for u in units if u["topic"] in needed)
    assert sorted(found) == want  # every unit of the needed queues, each by one split
    is_needed = {p: p.split(CQ)[1].split("/")[0] in needed for p in pointing}
    assert {p: 1 for p in pointing if is_needed[p]} == {p: n for p, n in driver_opens.items() if CQ in p}
    for path, n in opens.items():  # a segment is read by the splits its units point into, whatever their number
        lo, hi = pointing[path] or (0, -1)
        assert n == (sum(1 for s, e in splits if lo < e and hi >= s) if is_needed[path] else 0)


def test_only_the_queues_of_the_runs_topics_are_read(many_queues):
    store, subs = many_queues
    for kw, topics in [({}, {"T0", "T1", "Sparse"}), ({"topics": ("T1",)}, {"T1"}), ({"groups": ("G_A",)}, {"T0"})]:
        with counting() as lookups:
            planned = _plan(store, subs, **kw)
            for start, end in commitlog_splits(planned.plan):
                split_units(planned.plan, start, end).units
        read = {p.split(kind)[1].split("/")[0] for kind in (CQ, EXT) for p in lookups.opens if kind in p}
        assert read == topics, kw
        assert {q.topic for q in planned.segments.queues} == topics


def test_stored_sql92_registrations_make_their_topic_needed():
    from jobs.plan.build import needed_topics
    from schemas.store.config import ConsumerFilterData

    fd = ConsumerFilterData(topic="T5", consumer_group="G_SQL", expression="a > 1", expression_type="SQL92",
                            born_time=0, dead_time=0, dead=False, client_version=1, bloom_bit_pos=(1, 2),
                            bloom_bit_num=64)
    assert needed_topics((), [fd]) == {"T5"}
    assert needed_topics((), [fd], groups=("G_A",)) == set()
    assert needed_topics((), [fd], topics=("T1",)) == set()


@pytest.mark.parametrize("split_size", [SPLIT_SIZE, SPLIT_SIZE // 4])
def test_lookups_are_two_per_segment_and_two_per_split_and_segment_it_reads(many_queues, split_size):
    """Small files: the driver reads each needed file whole (an open and a read), a split reads its units of
    a file in one read; so more splits add lookups only where they read units, never splits x files."""
    store, subs = many_queues
    _, pointing = _pointing(store)
    with counting() as lookups:
        planned = _plan(store, subs, split_size=split_size)
        needed = [p for p in lookups.opens if CQ in p]
        assert lookups.count(CQ) == (len(needed), len(needed))
        for start, end in commitlog_splits(planned.plan):
            lookups.reset()
            split_units(planned.plan, start, end).units
            holding = [p for p in needed if pointing[p][0] < end and pointing[p][1] >= start]
            assert lookups.count(CQ) == (len(holding), len(holding))


def test_data_end_is_the_end_of_the_last_record_a_needed_unit_points_at(many_queues):
    store, subs = many_queues
    units = schemas.read_consume_queues(store)
    planned = _plan(store, subs)
    topics = np.array(units.column("topic").to_pylist())
    ends = units.column("commitlog_offset").to_numpy() + units.column("size").to_numpy()
    assert planned.plan.data_end == ends[np.isin(topics, ["T0", "T1", "Sparse"])].max()
