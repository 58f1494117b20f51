"""Commit logs in every layout RocketMQ writes (issue 25), in process (no Spark): the DLedger fixture
store_dledger (RocketMQ 4.9.8 in DLedger mode) replays exactly as RocketMQ's read path returned it, with
windows and offsets.json as on store_a; its data files over two directories, store_a's plain files over two,
and store_a rewritten as plain-then-DLedger replay the same; a damaged entry header is damaged data; a log
that cannot be found or read is refused, naming what was found, with exit 2.

Expectations come from the fixtures' RocketMQ dumps (expected.json, messages.jsonl.gz); stores in other
layouts are made from the fixtures by tools/dledger_writer.py (its layout read from DLedger's Java code)."""
import base64
import json
import shutil

import pytest

import schemas
from jobs import explain, replay
from jobs.datasource import read_options
from jobs.plan.build import build_plan
from jobs.plan.window import offsets_json, parse_window
from jobs.settings import CorruptPolicy, JobOptions
from schemas.errors import CorruptStoreError
from schemas.log.files import StoreLayoutError
from tests.conftest import read_store_jsonl
from tests.jobs.conftest import assert_rows_equal, expected_rows, writable_copy
from tests.local_replay import kind, replay_local
from tools.dledger_writer import convert, spread

DATA = "dledger-n0/data"
FIRST = "00000000000000000000"
SINCE, UNTIL = 1795479583098, 1795479583568  # store_dledger's messages were stored from ...582372 to ...584120


@pytest.fixture(scope="module")
def expected(store_dledger):
    final = expected_rows(store_dledger / "expected.json")
    raw = expected_rows(store_dledger / "expected_broker_raw.json")
    return final, {k: v for k, v in raw.items() if k not in final}


@pytest.fixture(scope="module")
def messages(store_dledger):
    return read_store_jsonl(store_dledger / "messages.jsonl.gz")


def _plan(store, regs, **options):
    return build_plan(JobOptions(store=str(store), subscription_files=(str(regs / "registrations.json"),),
                                 **options))


def _keys(result, name="matched"):
    table = kind(result, name)
    return {(r["group"], r["topic"], r["queue_id"], r["queue_offset"]) for r in table.to_pylist()}


def _copy(store_dledger, tmp_path):
    return writable_copy(store_dledger, tmp_path)


def test_the_dledger_fixture_replays_exactly_as_rocketmq_returned_it(store_dledger, expected):
    planned = _plan(store_dledger / "store", store_dledger)
    assert planned.layout.log.layout == "DLedger" and not planned.problems
    result = replay_local(planned)
    assert_rows_equal(kind(result, "matched").to_pylist(), expected[0])  # offsets and msgIds: the bodies'
    assert_rows_equal(kind(result, "collision").to_pylist(), expected[1])
    assert kind(result, "corrupt").num_rows == 0


def test_every_record_and_unit_decodes_as_rocketmq_decoded_it(store_dledger, messages):
    got = schemas.read_messages(store_dledger / "store", with_body=False).to_pylist()
    assert [(m["commitlog_offset"], m["msg_id"], m["prepared_transaction_offset"]) for m in got] == \
        [(m["commitLogOffset"], m["msgId"], m["preparedTransactionOffset"]) for m in messages]
    assert all(m["commitLogOffset"] == m["dledger_pos"] + 48 for m in messages)
    assert schemas.read_consume_queues(store_dledger / "store").num_rows == 1921


def test_verify_crc_checks_the_records_body_crc_not_dledgers_zero_fields(store_dledger, messages, tmp_path):
    planned = _plan(store_dledger / "store", store_dledger, verify_crc=True)
    assert kind(replay_local(planned), "corrupt").num_rows == 0  # every entry's own CRC fields are 0
    store = _copy(store_dledger, tmp_path)
    victim = next(m for m in messages if m["topic"] == "TopicDL" and m["sysFlag"] == 0 and m["body_base64"])
    offset, data = victim["commitLogOffset"], (store / DATA / FIRST).read_bytes()
    body_at = data.index(base64.b64decode(victim["body_base64"]), offset, offset + victim["storeSize"])
    _flip(store / DATA / FIRST, body_at)
    result = replay_local(_plan(store, store_dledger, verify_crc=True, on_corrupt=CorruptPolicy.SKIP))
    assert [(r["commitlog_offset"], r["reason"]) for r in kind(result, "corrupt").to_pylist()] == \
        [(offset, "body CRC mismatch")]


def _flip(path, at, data=b"\xff"):
    with open(path, "r+b") as f:
        f.seek(at)
        old = f.read(len(data))
        f.seek(at)
        f.write(bytes(a ^ b for a, b in zip(old, data)))


@pytest.mark.parametrize("since, until", [
    (str(SINCE), str(UNTIL)), ("2026-11-24T08:19:43.098+08:00", "2026-11-24T08:19:43.568+08:00")])
def test_a_time_window_delivers_the_rows_stored_inside_it(store_dledger, expected, since, until):
    result = replay_local(_plan(store_dledger / "store", store_dledger, window=parse_window(since, until)))
    assert _keys(result) == {k for k, r in expected[0].items() if SINCE <= r["storeTimestamp"] < UNTIL}
    assert kind(result, "matched").num_rows == len(_keys(result))


def test_until_then_its_offsets_deliver_everything_once(store_dledger, expected, tmp_path):
    first_planned = _plan(store_dledger / "store", store_dledger, window=parse_window(until=str(UNTIL)))
    first = replay_local(first_planned)
    path = tmp_path / "offsets.json"
    path.write_text(json.dumps(offsets_json(first_planned.ranges)))
    rest = replay_local(_plan(store_dledger / "store", store_dledger, window=parse_window(starting=str(path))))
    assert _keys(first) == {k for k, r in expected[0].items() if r["storeTimestamp"] < UNTIL}
    assert _keys(rest) == {k for k, r in expected[0].items() if r["storeTimestamp"] >= UNTIL}
    assert kind(first, "matched").num_rows + kind(rest, "matched").num_rows == len(expected[0])


def test_data_files_over_two_directories_replay_the_same(store_dledger, expected, tmp_path):
    store = _copy(store_dledger, tmp_path)
    a, b = tmp_path / "disk1" / "data", tmp_path / "disk2" / "data"
    spread(store / DATA, [a, b])  # storePathDLedgerCommitLog=/disk1/data,/disk2/data
    with pytest.raises(StoreLayoutError, match=r"dledger-n0/index/ holds DLedger index files but"):
        _plan(store, store_dledger)
    for dirs in (f"{a},{b}", f"{b},{a}"):
        planned = _plan(store, store_dledger, commitlog=(dirs,))
        assert [d.kind.name for d in planned.layout.log.dirs] == ["dledger", "dledger"]
        assert_rows_equal(kind(replay_local(planned), "matched").to_pylist(), expected[0])


def test_a_plain_commit_log_over_two_directories_replays_the_same(store_a, store_a_expected, tmp_path):
    store = writable_copy(store_a, tmp_path)
    a, b = tmp_path / "d1" / "commitlog", tmp_path / "d2" / "commitlog"
    spread(store / "commitlog", [a, b])  # storePathCommitLog=/d1/commitlog,/d2/commitlog (RIP-7)
    planned = _plan(store, store_a, commitlog=(str(a), str(b)))
    assert planned.layout.log.layout == "plain, several directories" and not planned.problems
    assert planned.layout.log.file_size == 1 << 20  # of the log, not of one directory's every other file
    assert_rows_equal(kind(replay_local(planned), "matched").to_pylist(), store_a_expected[0])


@pytest.mark.parametrize("from_offset", [0, 2 << 20])  # all DLedger; plain then DLedger (dividedCommitlogOffset)
def test_store_a_rewritten_as_dledger_replays_as_store_a(store_a, store_a_expected, tmp_path, from_offset):
    moved = convert(str(store_a / "store"), str(tmp_path / "store"), from_offset)
    planned = _plan(tmp_path / "store", store_a)
    assert planned.layout.log.layout == ("DLedger" if from_offset == 0 else "plain then DLedger")
    assert planned.layout.log.divided_offset == (from_offset or None) and not planned.problems
    new = {k: moved.get(r["commitLogOffset"], r["commitLogOffset"]) for k, r in store_a_expected[0].items()}
    want = {k: {**r, "commitLogOffset": new[k], "msgId": r["msgId"][:-16] + f"{new[k]:016X}"}  # storeHost + offset
            for k, r in store_a_expected[0].items()}
    assert_rows_equal(kind(replay_local(planned), "matched").to_pylist(), want)


def _entry_at(messages, topic="TopicDL"):
    m = next(m for m in messages if m["topic"] == topic and m["commitLogOffset"] > 1000)
    return m["commitLogOffset"], m["dledger_pos"]


@pytest.mark.parametrize("field_at, data, words", [(0, b"\x00\x00\x00\x07", "magic"), (24, b"\x01", "pos"),
                                                   (4, b"\x00\x00\x00\x01", "size")])
def test_a_damaged_entry_header_fails_naming_file_and_entry(store_dledger, messages, tmp_path, field_at, data, words):
    store = _copy(store_dledger, tmp_path)
    offset, pos = _entry_at(messages)
    _flip(store / DATA / FIRST, pos + field_at, data)
    with pytest.raises(CorruptStoreError) as err:
        replay_local(_plan(store, store_dledger))
    assert FIRST in str(err.value) and f"at offset {pos}:" in str(err.value)
    assert "DLedger entry header damaged" in str(err.value) and words in str(err.value)


def test_a_damaged_entry_header_is_skipped_and_audited(store_dledger, messages, expected, tmp_path):
    store = _copy(store_dledger, tmp_path)
    offset, pos = _entry_at(messages)
    _flip(store / DATA / FIRST, pos, b"\x00\x00\x00\x07")
    result = replay_local(_plan(store, store_dledger, on_corrupt=CorruptPolicy.SKIP))
    audit = kind(result, "corrupt").to_pylist()
    assert [(r["commitlog_offset"], r["offset"], r["file"].endswith(FIRST)) for r in audit] == [(offset, pos, True)]
    assert _keys(result) == {k for k, r in expected[0].items() if r["commitLogOffset"] != offset}
    stats = [r for r in kind(result, "stats").to_pylist() if (r["group"], r["topic"]) == ("GL_TAG_STAR", "TopicDL")]
    assert sum(r["skipped"] for r in stats) == 1 and sum(r["units"] for r in stats) == 990


def test_read_messages_names_a_damaged_entry(store_dledger, messages, tmp_path):
    store = _copy(store_dledger, tmp_path)
    _, pos = _entry_at(messages)
    _flip(store / DATA / FIRST, pos + 24, b"\x01")
    with pytest.raises(CorruptStoreError, match=f"{FIRST} at offset {pos}: DLedger entry header damaged: pos"):
        schemas.read_messages(store)


def _refused(capsys, store, *extra):
    code = replay.main(["--store", str(store), "--out", str(store.parent / "out"), "--subscription", "G",
                        "TopicDL", "TAG", "*", *map(str, extra)])
    return code, capsys.readouterr().err


def test_a_log_that_cannot_be_found_or_read_is_refused_with_exit_2(store_dledger, tmp_path, capsys):
    store = _copy(store_dledger, tmp_path)
    data = tmp_path / "elsewhere"
    shutil.move(store / DATA, data)
    code, err = _refused(capsys, store)  # storePathDLedgerCommitLog elsewhere: the index alone is left
    assert code == 2 and f"{store}/dledger-n0/index/ holds DLedger index files but {store}/dledger-n0/data/ holds " \
        "no data file" in err and "--commitlog" in err
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / FIRST).write_bytes(b"\x12\x34\x56\x78" * 4)
    code, err = _refused(capsys, store, "--commitlog", tmp_path / "odd")
    assert code == 2 and f"{tmp_path / 'odd' / FIRST} starts with bytes 1234567812345678: neither" in err
    code, err = _refused(capsys, store, "--commitlog", f"{data},{data}")
    assert code == 2 and "is in two directories" in err
    shutil.rmtree(store / "dledger-n0")
    code, err = _refused(capsys, store)
    assert code == 2 and "no commit log found (it holds" in err and "consumequeue/" in err
    assert not (tmp_path / "out").exists()


def test_explain_and_the_data_source_take_commitlog(store_dledger, messages, tmp_path, capsys):
    store = _copy(store_dledger, tmp_path)
    shutil.move(store / DATA, tmp_path / "data")
    msg = next(m for m in messages if m["topic"] == "TopicDL")
    args = ["--store", store, "--subscriptions", store_dledger / "registrations.json", "--group", "GL_TAG_STAR",
            "--topic", "TopicDL", "--msg-id", msg["msgId"], "--json"]
    assert explain.main([str(a) for a in args]) == 2
    assert "--commitlog" in capsys.readouterr().err
    assert explain.main([str(a) for a in args + ["--commitlog", tmp_path / "data"]]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["message"]["msg_id"] == msg["msgId"] and answer["delivered"]
    options = read_options({"path": str(store), "commitlog": f"{tmp_path / 'data'}, /x"})
    assert options.job.commitlog == (str(tmp_path / "data"), "/x")
