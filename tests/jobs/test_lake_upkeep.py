"""python -m jobs.maintain on a lake of a dozen nights (issue 38), real SQLite catalog, no Spark: the small files
rewritten into at most a third, old snapshots expired, the files of a night killed before its commit removed, the
rows unchanged; continuation and the overlap check hold after it; a night that commits while a compaction is
under way makes the compaction start again, never lose a row. Expectations: the rows each test wrote."""
import os

import pytest

from jobs import maintain
from jobs.errors import UsageError
from jobs.sinks.iceberg import lake
from jobs.sinks.iceberg import upkeep as lake_upkeep
from jobs.sinks.iceberg.tables import stale_runs
from tests.jobs.lake_parts import BROKER, REF, keys, night, target

T = "TopicTest"
SUBS = [("G1", T), ("G2", T)]


def _nights(tgt, tmp_path, count=12):
    rows = []
    for n in range(count):
        mine = [("G1", T, n % 4, 10 * n + 1), ("G2", T, (n + 1) % 4, 10 * n + 2)]
        night(tgt, tmp_path / f"n{n}", f"n{n}", SUBS, [(T, q, 10 * n, 10 * n + 10) for q in range(4)], mine)
        rows += mine
    return sorted(rows)


def _files(tgt, name="matched"):
    return len(tgt.catalog().load_table(f"lake.{name}").inspect.files())


def _args(tgt, *more):
    return ["--catalog-uri", tgt.uri, "--warehouse", tgt.warehouse, "--namespace", "lake", *more]


def test_a_dozen_nights_compacted_expired_and_still_continued(tmp_path, capsys):
    tgt = target(tmp_path)
    rows = _nights(tgt, tmp_path)
    dead = tmp_path / "wh" / "lake" / "matched" / "data" / "run-killed0"  # parts a killed night moved in
    dead.mkdir(parents=True)
    (dead / "part-0.parquet").write_bytes(b"PAR1")
    before = _files(tgt)
    assert maintain.main(_args(tgt, "--compact", "--expire-snapshots-older-than", "0s",
                               "--remove-orphans-older-than", "0s")) == 0
    assert '"compacted"' in capsys.readouterr().out
    assert _files(tgt) <= before // 3 and keys(tgt) == rows
    for name in ("matched", "messages", lake.RANGES):
        assert len(tgt.catalog().load_table(f"lake.{name}").snapshots()) == 1
    assert not dead.exists()
    left = {p.name for p in (tmp_path / "wh" / "lake" / "matched" / "data").iterdir()}
    assert not any(name.startswith("run-n") for name in left)  # compacted away, expired, removed
    held = lake.Held.of(tgt.catalog(), "lake")
    assert lake.starts(held, (REF,)) == {BROKER: {T: {q: 120 for q in range(4)}}}
    with pytest.raises(UsageError, match="held"):
        lake.refuse_overlaps("lake", held, (REF,), [(BROKER, "G1", T, 0, 50, 60)])
    night(target(tmp_path, continuing=True), tmp_path / "n12", "n12", SUBS, [(T, 0, 120, 130)], [("G1", T, 0, 125)])
    assert keys(tgt) == sorted(rows + [("G1", T, 0, 125)])


def _stale_names(tgt):
    return sorted((name, path.rstrip("/").rsplit("/", 1)[1]) for name, path, _ in stale_runs(tgt))


def test_a_run_whose_snapshot_expired_is_stale_only_once_no_snapshot_holds_its_files(tmp_path):
    tgt = target(tmp_path)
    _nights(tgt, tmp_path, count=3)
    assert _stale_names(tgt) == []
    assert maintain.main(_args(tgt, "--expire-snapshots-older-than", "0s")) == 0
    assert len(tgt.catalog().load_table("lake.matched").snapshots()) == 1  # n0's and n1's snapshots are gone...
    assert _stale_names(tgt) == []  # ...but the current one still holds their files
    assert maintain.main(_args(tgt, "--compact", "--expire-snapshots-older-than", "0s")) == 0
    assert _stale_names(tgt) == [(name, f"run-n{n}") for name in ("collisions", "matched", "messages")
                                 for n in range(3)]  # rewritten by the compaction, then expired


def test_orphans_are_kept_until_old_enough(tmp_path):
    tgt = target(tmp_path)
    _nights(tgt, tmp_path, 2)
    dead = tmp_path / "wh" / "lake" / "matched" / "data" / "run-killed0"
    dead.mkdir(parents=True)
    (dead / "part-0.parquet").write_bytes(b"PAR1")
    assert maintain.main(_args(tgt, "--expire-snapshots-older-than", "1d")) == 0  # default: orphans older than 1d
    assert dead.exists()
    old = os.path.getmtime(dead / "part-0.parquet") - 2 * 86400
    os.utime(dead / "part-0.parquet", (old, old))
    assert maintain.main(_args(tgt, "--expire-snapshots-older-than", "1d")) == 0
    assert not dead.exists()


def test_a_night_half_committed_is_not_compacted_into_rows_its_repair_could_not_remove(tmp_path, monkeypatch):
    from jobs.sinks.iceberg import tables as iceberg_sink
    tgt = target(tmp_path)
    _nights(tgt, tmp_path, 3)

    def killed(*args):
        raise KeyboardInterrupt("killed before the ranges")
    with monkeypatch.context() as m:
        m.setattr(iceberg_sink, "_append_ranges", killed)
        with pytest.raises(KeyboardInterrupt):
            night(tgt, tmp_path / "k", "k", SUBS, [(T, 0, 30, 40)], [("G1", T, 0, 31)])
    result = lake_upkeep.compact(tgt)
    assert "run(s) k" in result["matched"]
    night(tgt, tmp_path / "n3", "n3", SUBS, [(T, 0, 30, 40)], [("G1", T, 0, 31)])
    assert keys(tgt).count(("G1", T, 0, 31)) == 1


def test_a_compaction_that_loses_a_race_with_a_night_starts_again(tmp_path, monkeypatch):
    tgt = target(tmp_path)
    rows = _nights(tgt, tmp_path, 3)
    real, calls = lake_upkeep._compact, []

    def racing(target, catalog, name):
        if name == "matched" and not calls:  # a night commits between the compaction's read and its commit
            calls.append(name)
            table = catalog.load_table(f"{target.namespace}.{name}")
            night(tgt, tmp_path / "n3", "n3", SUBS, [(T, 0, 30, 40)], [("G1", T, 0, 33)])
            from pyiceberg.expressions import AlwaysTrue
            with table.transaction() as tx:  # the stale table's commit: refused by the catalog
                tx.overwrite(table.scan().to_arrow(), overwrite_filter=AlwaysTrue())
        return real(target, catalog, name)
    monkeypatch.setattr(lake_upkeep, "_compact", racing)
    lake_upkeep.compact(tgt)
    assert keys(tgt) == sorted(rows + [("G1", T, 0, 33)])


def test_maintain_without_a_step_or_a_lake_is_a_usage_error(tmp_path, capsys):
    tgt = target(tmp_path)
    assert maintain.main(_args(tgt)) == 2
    assert "nothing to do" in capsys.readouterr().err
    assert maintain.main(_args(tgt, "--compact")) == 2
    assert "no lake to maintain" in capsys.readouterr().err
    assert maintain.main(["--catalog-uri", tgt.uri, "--compact"]) == 2
    assert maintain.main(_args(tgt, "--compact", "--expire-snapshots-older-than", "7")) == 2


def test_compaction_reads_and_commits_one_crowded_partition_at_a_time(tmp_path, monkeypatch):
    tgt = target(tmp_path)
    rows = _nights(tgt, tmp_path, 3)  # matched: G1's three files and G2's three
    night(tgt, tmp_path / "n3", "n3", [("G3", T)], [(T, 0, 30, 40)], [("G3", T, 0, 31)])  # G3: one file
    scans = []
    real_scan = type(tgt.catalog().load_table("lake.matched")).scan

    def scan(table, *args, **kwargs):
        if "row_filter" in kwargs:  # the compaction's reads (the run check reads the ranges table whole)
            scans.append(str(kwargs["row_filter"]))
        return real_scan(table, *args, **kwargs)
    monkeypatch.setattr(type(tgt.catalog().load_table("lake.matched")), "scan", scan)
    assert lake_upkeep._compact(tgt, tgt.catalog(), "matched") == (7, 3)
    assert sorted(scans) == ["EqualTo(term=Reference(name='group'), literal=literal('G1'))",
                             "EqualTo(term=Reference(name='group'), literal=literal('G2'))"]
    snapshots = tgt.catalog().load_table("lake.matched").snapshots()
    compactions = [s for s in snapshots if lake_upkeep.COMPACTED in s.summary.additional_properties]
    assert len(compactions) == 2 * 2  # G1's and G2's: a delete and an append each
    assert keys(tgt) == sorted(rows + [("G3", T, 0, 31)])


def test_compaction_streams_a_partition_into_files_of_the_target_size(tmp_path, monkeypatch):
    tgt = target(tmp_path)
    rows = _nights(tgt, tmp_path, 6)  # G1's six files, G2's six
    table = tgt.catalog().load_table("lake.messages")
    with table.transaction() as tx:  # a target size of about one night's file: several files per partition
        tx.set_properties({lake_upkeep.TARGET_SIZE: str(min(table.inspect.files().column("file_size_in_bytes")
                                                            .to_pylist()))})
    scan = type(table.scan())
    real = scan.to_arrow

    def whole(self):
        assert not self.table_metadata.location.endswith("/messages"), "a partition of messages read whole"
        return real(self)
    monkeypatch.setattr(scan, "to_arrow", whole)
    before, after = lake_upkeep._compact(tgt, tgt.catalog(), "messages")
    monkeypatch.undo()
    assert before == 6 and after > 1  # one topic's partition: rewritten, more than one file of the target size
    assert keys(tgt) == rows
    assert sorted(keys(tgt, "messages")) == sorted({(t, 1000 * q + o) for _, t, q, o in rows})
    assert lake_upkeep._compact(tgt, tgt.catalog(), "messages") == (after, after)  # done: passed over
