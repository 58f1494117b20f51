"""Each units source class (jobs/plan/units/) alone against RocketMQ's own reading of store_a's consume queue
(cq.jsonl.gz, dumped by the broker's ConsumeQueue / ConsumeQueueExt): every unit, with its resolved tag code, from
the files, from a RocketMQ-layout RocksDB, and rebuilt from the commit log; the choice made once per broker from
the --units-from strings; and the objects small enough to ship to every task."""
import pickle
import shutil

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from jobs.plan.brokers import store_broker
from jobs.plan.build import build_plan
from jobs.plan.units.base import Split
from jobs.plan.units.choose import UnitsFrom, choose, queue_source
from jobs.plan.units.files import ConsumeQueueFiles
from jobs.plan.units.rebuilt import RebuiltUnits
from jobs.plan.units.rocksdb import RocksDBQueues
from jobs.settings import JobOptions
from schemas.errors import NotInStore
from schemas.log.files import file_units
from schemas.store.config import load_topics
from schemas.store.local_api import local_store
from schemas.store.storefs import read_range
from tests.jobs.conftest import writable_copy
from tools.rocksdb_store_writer import write_rocksdb_consume_queue

FS = pafs.LocalFileSystem()
WHOLE_LOG = (0, 1 << 62)
TOPICS = {"TopicTest", "订单Topic"}


def _rocketmq_units(store_a_cq, topics=TOPICS):
    """{(topic, queue_id, queue_offset): (commitlog_offset, size, tags_code)} as RocketMQ read them."""
    return {(u["topic"], u["queueId"], u["index"]): (u["phyOffset"], u["size"],
                                                     u["ext_tagsCode"] if u["isExtAddr"] else u["tagsCode_raw"])
            for u in store_a_cq if u["topic"] in topics}


def _units(*tables):
    """The same dict of CONSUME_QUEUE_SCHEMA tables (a SourceRead's)."""
    columns = ["topic", "queue_id", "queue_offset", "commitlog_offset", "size", "tags_code"]
    rows = [r for t in tables for r in t.select(columns).to_pylist()]
    got = {(r["topic"], r["queue_id"], r["queue_offset"]): (r["commitlog_offset"], r["size"], r["tags_code"])
           for r in rows}
    assert len(got) == len(rows)  # no unit twice
    return got


def _walked(layout):
    """Every unit the commit log's records make (what a task walking every split hands its sources)."""
    return pa.concat_tables([file_units(f, read_range(FS, f.path)).units for f in layout.log.files])


def test_consume_queue_files_give_rocketmq_units(store_a, store_a_cq):
    layout = local_store(store_a / "store")
    source = ConsumeQueueFiles(tuple(q for q in layout.queues if q.topic in TOPICS)).prepared(FS)
    assert _units(*source.split(FS, Split(*WHOLE_LOG)).tables) == _rocketmq_units(store_a_cq)
    assert source.data_end is not None and source.served == {(q.topic, q.queue_id) for q in source.queues}
    # two splits halving the log hold every unit once between them
    middle = layout.log.files[2].start
    halves = {**_units(*source.for_split(0, middle).split(FS, Split(0, middle)).tables),
              **_units(*source.for_split(middle, 1 << 62).split(FS, Split(middle, 1 << 62)).tables)}
    assert halves == _rocketmq_units(store_a_cq)


def test_rocksdb_queues_give_rocketmq_units(store_a, store_a_cq, tmp_path):
    store = writable_copy(store_a, tmp_path)
    write_rocksdb_consume_queue(store)
    source = RocksDBQueues.of_store(str(store / "consumequeue"), TOPICS)
    assert source.KIND == "rocksdb" and RocksDBQueues.readable(FS, str(store / "consumequeue"))
    assert _units(*source.split(FS, Split(*WHOLE_LOG)).tables) == _rocketmq_units(store_a_cq)
    assert source.data_end is None  # known only to the tasks: no split is left out


def test_units_rebuilt_from_the_commit_log_give_rocketmq_units(store_a, store_a_cq):
    layout = local_store(store_a / "store")
    source = RebuiltUnits(frozenset(TOPICS))
    read = source.split(FS, Split(*WHOLE_LOG, walked=_walked(layout)))
    assert _units(*read.tables) == _rocketmq_units(store_a_cq)
    ends = {(m["topic"], m["queue_id"]): m["end"] for m in read.marks.to_pylist()}
    assert ends[("TopicTest", 2)] == 485  # the queue's last offset + 1, as RocketMQ's queue holds it
    assert source.split(FS, Split(*WHOLE_LOG)).tables == ()  # a split no file holds: no records, no units


def test_rebuilt_units_leave_out_the_queues_another_source_serves(store_a, store_a_cq):
    source = RebuiltUnits(frozenset({"TopicTest"}), kept=frozenset({("TopicTest", 0), ("TopicTest", 1)}))
    got = _units(*source.split(FS, Split(*WHOLE_LOG, walked=_walked(local_store(store_a / "store")))).tables)
    want = {k: v for k, v in _rocketmq_units(store_a_cq, {"TopicTest"}).items() if k[1] in (2, 3)}
    assert got == want


@pytest.mark.parametrize("source", [ConsumeQueueFiles, RocksDBQueues, RebuiltUnits])
def test_each_kind_answers_explain_with_rocketmq_units(store_a, store_a_cq, tmp_path, source):
    store = writable_copy(store_a, tmp_path)
    if source is RocksDBQueues:
        write_rocksdb_consume_queue(store)
    elif source is RebuiltUnits:
        shutil.rmtree(store / "consumequeue")
    topics = load_topics(str(store / "config" / "topics.json"))
    chosen = queue_source(UnitsFrom.AUTO, FS, str(store), "TopicTest", 3, topics)
    assert type(chosen) is source
    want = _rocketmq_units(store_a_cq)
    offsets = [0, 200, 476]
    got = _units(chosen.queue_units(FS, local_store(store).log, "TopicTest", 3, offsets))
    assert got == {("TopicTest", 3, o): want[("TopicTest", 3, o)] for o in offsets}
    with pytest.raises(NotInStore):
        chosen.queue_units(FS, local_store(store).log, "TopicTest", 3, [477])  # one past the queue's last


def test_explain_asks_the_replays_chooser_and_a_queue_served_from_nowhere_is_not_in_store(store_a, tmp_path):
    store = writable_copy(store_a, tmp_path)
    shutil.rmtree(store / "consumequeue" / "TopicTest" / "3")
    topics = load_topics(str(store / "config" / "topics.json"))
    assert type(queue_source(UnitsFrom.AUTO, FS, str(store), "TopicTest", 3, topics)) is RebuiltUnits
    assert type(queue_source(UnitsFrom.AUTO, FS, str(store), "TopicTest", 2, topics)) is ConsumeQueueFiles
    assert type(queue_source(UnitsFrom.COMMIT_LOG, FS, str(store), "TopicTest", 2, topics)) is RebuiltUnits
    with pytest.raises(NotInStore, match="^the store has no consume queue 3 of topic TopicTest$"):
        queue_source(UnitsFrom.CONSUME_QUEUE, FS, str(store), "TopicTest", 3, topics)
    with pytest.raises(NotInStore, match="^the store has no consume queue 99 of topic TopicTest$"):
        queue_source(UnitsFrom.AUTO, FS, str(store), "TopicTest", 99, topics)  # beyond topics.json's queues


def test_each_choice_picks_its_sources_and_auto_rebuilds_only_a_lacking_queue(store_a, tmp_path):
    layout = local_store(store_a / "store")
    topics = load_topics(str(store_a / "store" / "config" / "topics.json"))
    assert [s.KIND for s in choose(UnitsFrom.AUTO, FS, layout, TOPICS, topics).sources] == ["consumequeue"]
    assert [s.KIND for s in choose(UnitsFrom.COMMIT_LOG, FS, layout, TOPICS, topics).sources] == ["commitlog"]
    store = writable_copy(store_a, tmp_path)
    shutil.rmtree(store / "consumequeue" / "TopicTest" / "2")
    partial = choose(UnitsFrom.AUTO, FS, local_store(store), TOPICS, topics)
    assert [s.KIND for s in partial.sources] == ["consumequeue", "commitlog"]
    assert partial.sources[1].topics == {"TopicTest"} and ("TopicTest", 2) not in partial.sources[1].kept
    assert partial.describe() == {"default": "consumequeue", "queues": {"TopicTest": {"2": "commitlog"}}}


def test_a_plan_ships_paths_and_ranges_not_handles(store_a):
    broker = store_broker(str(store_a / "store"))
    planned = build_plan(JobOptions(store=broker.uri, subscription_files=(str(store_a / "registrations.json"),)),
                         broker)
    assert planned.plan.fs is broker.fs  # resolved once, handed down
    shipped = pickle.loads(pickle.dumps(planned.plan))
    assert [(s.KIND, s.served) for s in shipped.units] == [(s.KIND, s.served) for s in planned.plan.units]
    assert isinstance(shipped.fs, pafs.LocalFileSystem)
    assert len(pickle.dumps(planned.plan.units)) < 64 << 10
