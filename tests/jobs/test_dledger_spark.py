"""The job under spark-submit on a DLedger store with a damaged entry header: exit 1 and one line naming the data
file and the entry's offset; under --on-corrupt skip, exit 4, the entry audited and every other row of
RocketMQ's answer delivered."""
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.conftest import read_store_jsonl
from tests.jobs.conftest import expected_rows, submit_job, writable_copy

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("dledger-n0") / "data" / "00000000000000000000"
pytestmark = [pytest.mark.spark, pytest.mark.system]


def test_a_damaged_entry_header_exits_1_or_is_audited_with_exit_4(store_dledger, tmp_path):
    store = writable_copy(store_dledger, tmp_path)
    victim = next(m for m in read_store_jsonl(store_dledger / "messages.jsonl.gz")
                  if m["topic"] == "TopicDL" and m["commitLogOffset"] > 1000)
    with open(store / DATA, "r+b") as f:
        f.seek(victim["dledger_pos"])
        f.write(b"\0\0\0\7")  # the entry's magic
    regs = ("--subscriptions", store_dledger / "registrations.json")
    failed = submit_job("--store", store, "--out", tmp_path / "failed", *regs)
    assert failed.returncode == 1, failed.console[-2000:]
    errors = [line for line in failed.console.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {store / DATA} at offset {victim['dledger_pos']}: DLedger entry header damaged: "
                      "magic code is not DLedger's (1)"]
    skipped = submit_job("--store", store, "--out", tmp_path / "skipped", *regs, "--on-corrupt", "skip")
    assert skipped.returncode == 4, skipped.console[-2000:]
    audit = ds.dataset(tmp_path / "skipped" / "audit" / "corrupt").to_table().to_pylist()
    assert [(r["commitlog_offset"], r["offset"]) for r in audit] == [(victim["commitLogOffset"], victim["dledger_pos"])]
    matched = ds.dataset(tmp_path / "skipped" / "matched").to_table().to_pylist()
    assert {(r["group"], r["topic"], r["queue_id"], r["queue_offset"]) for r in matched} == \
        {k for k, r in expected_rows(store_dledger / "expected.json").items()
         if r["commitLogOffset"] != victim["commitLogOffset"]}
