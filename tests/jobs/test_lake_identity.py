"""A store's identity is what it is, not how --store spells it (issue 38): store_a's commit log begins with a record
stored by 127.0.0.1:10911 at 1795237034764 (RocketMQ's dump, messages.jsonl.gz: its first message), at offset 0;
every spelling, a symlink and a copy give that, another store another; a window committed under one spelling is
refused under the others (exit 2), and a store whose retention removed its first record is still the same."""
import os
import shutil

import pytest

from jobs.errors import UsageError
from jobs.plan.brokers import brokers_of, store_identity
from jobs.sinks.iceberg import lake
from tests.jobs.lake_parts import BROKER, night, target

STORE_A = ("broker@127.0.0.1:10911", "0:1795237034764")  # by hand, from store_a's first message


def _copy_head(store, to):
    """What identity reads of a store: its first commit-log file and config/ (a copy, smaller than the store)."""
    first = sorted(os.listdir(store / "commitlog"))[0]
    os.makedirs(to / "commitlog")
    shutil.copy(store / "commitlog" / first, to / "commitlog" / first)
    shutil.copytree(store / "config", to / "config")
    return to


def test_every_spelling_a_symlink_and_a_copy_of_a_store_are_one_store(store_a, tmp_path):
    store = store_a / "store"
    os.symlink(store, tmp_path / "link")
    copy = _copy_head(store, tmp_path / "copy")
    spellings = [str(store), f"{store}/", f"{store}//", f"file://{store}", str(tmp_path / "link"), str(copy),
                 os.path.relpath(store)]
    assert {store_identity(brokers_of([s])[0]) for s in spellings} == {STORE_A}


def test_another_store_and_another_broker_name_are_other_stores(store_a, store_dledger, tmp_path):
    named = store_identity(brokers_of([f"broker-x={store_a / 'store'}"])[0])
    assert named == ("broker-x@127.0.0.1:10911", STORE_A[1])
    other = store_identity(brokers_of([str(store_dledger / "store")])[0])  # DLedger: its name and real path
    assert other[0].endswith(os.path.realpath(store_dledger / "store")) and other[1] == ""


def test_a_window_committed_under_one_spelling_is_refused_under_another(store_a, tmp_path):
    tgt = target(tmp_path, refs=(lake.StoreRef(BROKER, *store_identity(brokers_of([str(store_a / "store")])[0])),))
    night(tgt, tmp_path / "n1", "n1", [("G1", "TopicTest")], [("TopicTest", 0, 0, 3)], [("G1", "TopicTest", 0, 0)])
    held = lake.Held.of(tgt.catalog(), "lake")
    for spelling in (f"file://{store_a / 'store'}/", str(_copy_head(store_a / "store", tmp_path / "copy"))):
        ref = lake.StoreRef(BROKER, *store_identity(brokers_of([spelling])[0]))
        with pytest.raises(UsageError, match=r"G1 TopicTest/0 \[1, 2\) held \[0, 3\) by run n1"):
            lake.refuse_overlaps("lake", held, (ref,), [(BROKER, "G1", "TopicTest", 0, 1, 2)])


def test_a_store_whose_retention_removed_its_first_record_is_the_same_store():
    row = {"store": STORE_A[0], "head": STORE_A[1]}
    assert lake.StoreRef(BROKER, STORE_A[0], "1073741824:1795300000000").holds(row)  # its first file deleted
    assert not lake.StoreRef(BROKER, STORE_A[0], "0:1795999999999").holds(row)  # a store begun again from 0
    assert not lake.StoreRef(BROKER, "broker@10.0.0.9:10911", STORE_A[1]).holds(row)


@pytest.mark.spark
@pytest.mark.system
@pytest.mark.parametrize("spelling", ["{store}/", "file://{store}"])
def test_the_job_refuses_a_committed_window_under_another_spelling_before_spark_starts(store_a, tmp_path, spelling):
    from tests.jobs.test_exit_codes import _submit
    tgt = target(tmp_path)  # lake_parts.REF: store_a's identity, as the job computes it from any spelling
    night(tgt, tmp_path / "n1", "n1", [("G_TAG_A", "TopicTest")], [("TopicTest", 0, 0, 3)],
          [("G_TAG_A", "TopicTest", 0, 0)])
    proc = _submit("--store", spelling.format(store=store_a / "store"), "--subscriptions",
                   store_a / "registrations.json", "--groups", "G_TAG_A", "--out", tmp_path / "again",
                   "--sink", "iceberg", "--catalog-uri", tgt.uri, "--warehouse", tgt.warehouse, "--namespace", "lake")
    assert proc.returncode == 2, proc.console[-2000:]
    assert "lake.matched already holds these offsets of broker@127.0.0.1:10911" in proc.console
    assert "G_TAG_A TopicTest/0 [0, " in proc.console and "held [0, 3) by run n1" in proc.console
    assert not (tmp_path / "again").exists()
