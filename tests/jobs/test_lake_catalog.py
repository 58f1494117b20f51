"""A lost catalog and a busy one (issue 38), on real SQLite catalogs in temporary folders: a warehouse holding the
namespace's tables while the catalog has none is refused (exit 2) with the way to re-register them, which
`python -m jobs.maintain --register-existing` does with their history kept; never a second lake in the same place.
A catalog held by another writer (BEGIN EXCLUSIVE in another process) is waited for within --catalog-wait, and
named when the wait is over."""
import os
import subprocess
import sys
import time

import pytest

from jobs import maintain
from jobs.errors import UsageError
from jobs.sinks.iceberg import catalog_wait, lake
from jobs.sinks.iceberg import tables as iceberg_sink
from tests.jobs.lake_parts import keys, night, target

T = "TopicTest"


def _lose_catalog(tmp_path):
    os.rename(tmp_path / "catalog.db", tmp_path / "catalog.lost")


def test_a_lost_catalog_is_refused_naming_the_tables_and_how_to_register_them(tmp_path):
    tgt = target(tmp_path)
    night(tgt, tmp_path / "n1", "n1", [("G1", T)], [(T, 0, 0, 2)], [("G1", T, 0, 0)])
    _lose_catalog(tmp_path)
    with pytest.raises(UsageError) as refused:
        iceberg_sink.check_lake(target(tmp_path, continuing=True), ())
    text = str(refused.value)
    assert "the warehouse holds tables of namespace lake" in text and "matched" in text
    assert "python -m jobs.maintain --catalog-uri" in text and "--register-existing" in text
    metadata = sorted((tmp_path / "wh").rglob("*.metadata.json"))
    with pytest.raises(UsageError, match="second lake"):  # nor does a commit make one
        night(tgt, tmp_path / "n2", "n2", [("G1", T)], [(T, 0, 2, 4)], [("G1", T, 0, 3)])
    assert sorted((tmp_path / "wh").rglob("*.metadata.json")) == metadata


def test_register_existing_brings_the_tables_back_with_their_history(tmp_path, capsys):
    tgt = target(tmp_path)
    for run, (first, end, at) in {"n1": (0, 2, 0), "n2": (2, 4, 3)}.items():
        night(tgt, tmp_path / run, run, [("G1", T)], [(T, 0, first, end)], [("G1", T, 0, at)])
    _lose_catalog(tmp_path)
    args = ["--catalog-uri", tgt.uri, "--warehouse", tgt.warehouse, "--namespace", "lake"]
    assert maintain.main(args + ["--register-existing"]) == 0
    assert "matched" in capsys.readouterr().out
    matched = tgt.catalog().load_table("lake.matched")
    assert [s.summary.additional_properties["mqreplay.run"] for s in matched.snapshots()] == ["n1", "n2"]
    assert lake.Held.of(tgt.catalog(), "lake").runs == {"n1", "n2"}
    night(target(tmp_path, continuing=True), tmp_path / "n3", "n3", [("G1", T)], [(T, 0, 4, 6)], [("G1", T, 0, 5)])
    assert keys(tgt) == [("G1", T, 0, 0), ("G1", T, 0, 3), ("G1", T, 0, 5)]
    assert maintain.main(args + ["--register-existing"]) == 0  # registered already: nothing to do, not an error


def _hold(db, seconds):
    """Another process holding the SQLite file with BEGIN EXCLUSIVE for `seconds`; returns once it holds it."""
    code = ("import sqlite3, sys, time\nc = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "c.execute('BEGIN EXCLUSIVE'); print('held', flush=True)\n"
            "time.sleep(float(sys.argv[2])); c.execute('COMMIT')")
    holder = subprocess.Popen([sys.executable, "-c", code, str(db), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_busy_catalog_is_waited_for_and_the_night_commits(tmp_path):
    tgt = target(tmp_path)
    night(tgt, tmp_path / "n1", "n1", [("G1", T)], [(T, 0, 0, 2)], [("G1", T, 0, 0)])
    holder = _hold(tmp_path / "catalog.db", 6)
    try:
        started = time.monotonic()
        night(target(tmp_path, wait_s=60), tmp_path / "n2", "n2", [("G1", T)], [(T, 0, 2, 4)], [("G1", T, 0, 3)])
        assert time.monotonic() - started > 3
    finally:
        holder.wait(timeout=30)
    assert keys(tgt) == [("G1", T, 0, 0), ("G1", T, 0, 3)]


def test_a_catalog_busy_beyond_the_wait_exits_2_naming_its_holder(tmp_path):
    tgt = target(tmp_path)
    night(tgt, tmp_path / "n1", "n1", [("G1", T)], [(T, 0, 0, 2)], [("G1", T, 0, 0)])
    holder = _hold(tmp_path / "catalog.db", 20)
    try:
        with pytest.raises(UsageError) as refused:
            iceberg_sink.check_lake(target(tmp_path, wait_s=2), ())
    finally:
        holder.kill()
        holder.wait()
    text = str(refused.value)
    assert "stayed busy for 2 s (--catalog-wait)" in text and "locked by another writer" in text
    assert f"process {holder.pid} " in text


def test_commit_conflicts_and_rest_answers_409_and_503_are_waited_for_other_errors_are_not():
    from pyiceberg.exceptions import CommitFailedException, ServiceUnavailableError
    assert catalog_wait.busy(CommitFailedException("409: the table changed"))
    assert catalog_wait.busy(ServiceUnavailableError("503 Service Unavailable"))
    assert catalog_wait.busy(ValueError("no such column")) is None
    answers = iter([CommitFailedException("conflict"), ServiceUnavailableError("503"), "done"])

    def commit():
        found = next(answers)
        if isinstance(found, Exception):
            raise found
        return found
    pauses = []
    assert catalog_wait.waiting(commit, 60, "commit", sleep=pauses.append) == "done"
    assert pauses == [catalog_wait.FIRST_PAUSE_S, 2 * catalog_wait.FIRST_PAUSE_S]


@pytest.mark.parametrize("text, want", [("0s", 0), ("90s", 90), ("5m", 300), ("1.5h", 5400), ("2d", 172800)])
def test_durations_take_a_number_and_a_unit(text, want):
    assert catalog_wait.seconds(text) == want


@pytest.mark.parametrize("text", ["5", "m", "-1s", "5 minutes", ""])
def test_a_duration_without_its_unit_is_a_usage_error(text):
    with pytest.raises(UsageError, match="s, m, h or d"):
        catalog_wait.seconds(text)


def test_the_jobs_catalog_wait_defaults_to_5m_and_takes_a_duration(tmp_path):
    from jobs.cli import catalog_args
    from jobs.cli import parse_replay_args as parse_args
    common = ["--store", "S", "--out", "O", "--sink", "iceberg", "--catalog-uri", f"sqlite:///{tmp_path}/c.db",
              "--warehouse", str(tmp_path / "wh")]
    assert iceberg_sink.catalog_target(catalog_args(parse_args(common))).wait_s == 300
    assert iceberg_sink.catalog_target(catalog_args(parse_args(common + ["--catalog-wait", "90s"]))).wait_s == 90
    with pytest.raises(UsageError, match="--catalog-wait '5'"):
        iceberg_sink.catalog_target(catalog_args(parse_args(common + ["--catalog-wait", "5"])))
