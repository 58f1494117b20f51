"""The store writer reproduces RocketMQ's bytes: re-encoding store_a's decoded messages gives its files."""
import filecmp
import os

import pytest

import schemas
from tools.store_writer import Message, StoreWriter, encode_record


def _messages_of(store):
    """Decoded messages as writer input; the raw properties blob keeps the pieces decoding drops."""
    msgs = schemas.read_messages(store, raw=True).to_pylist()
    units = {u["commitlog_offset"]: u for u in schemas.read_consume_queues(store).to_pylist()}
    out = []
    for m in msgs:
        out.append(Message(
            topic=m["topic"], queue_id=m["queue_id"], body=m["body"], properties=dict(m["properties"]),
            flag=m["flag"], sys_flag=m["sys_flag"], born_timestamp=m["born_timestamp"], born_host=m["born_host"],
            store_timestamp=m["store_timestamp"], store_host=m["store_host"],
            reconsume_times=m["reconsume_times"], prepared_transaction_offset=m["prepared_transaction_offset"],
            filter_bitmap=units[m["commitlog_offset"]]["filter_bitmap"], queue_offset=m["queue_offset"],
            properties_raw=m["properties_raw"]))
    return msgs, out


@pytest.fixture(scope="module")
def rewritten(store_a, tmp_path_factory):
    src = store_a / "store"
    dst = tmp_path_factory.mktemp("rewritten")
    sizes = {"commitlog": os.path.getsize(next((src / "commitlog").iterdir())),
             "cq": 6000, "ext": os.path.getsize(next((src / "consumequeue_ext" / "TopicTest" / "0").iterdir()))}
    _, msgs = _messages_of(src)
    with StoreWriter(dst, commitlog_file_size=sizes["commitlog"], cq_file_size=sizes["cq"],
                     ext_file_size=sizes["ext"]) as w:
        for m in msgs:
            w.append(m)
    return src, dst


@pytest.mark.parametrize("folder", ["commitlog", "consumequeue", "consumequeue_ext"])
def test_rewritten_store_files_are_byte_identical(rewritten, folder):
    src, dst = rewritten
    src_files = sorted(p.relative_to(src) for p in (src / folder).rglob("*") if p.is_file())
    dst_files = sorted(p.relative_to(dst) for p in (dst / folder).rglob("*") if p.is_file())
    assert src_files == dst_files
    _, mismatch, errors = filecmp.cmpfiles(src, dst, [str(p) for p in src_files], shallow=False)
    assert not mismatch and not errors


def test_round_trip_through_writer_and_decoder_gives_rocketmqs_reading(rewritten, store_a_messages, store_a_cq):
    """The rewritten store decodes to what RocketMQ's MessageDecoder and ConsumeQueue read from the original
    (messages.jsonl.gz, cq.jsonl.gz): the keys of every message and unit, and their main fields."""
    _, dst = rewritten
    got = schemas.read_messages(dst).select(
        ["topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id", "tags", "body_crc"]).to_pylist()
    assert got == [{"topic": m["topic"], "queue_id": m["queueId"], "queue_offset": m["queueOffset"],
                    "commitlog_offset": m["commitLogOffset"], "msg_id": m["msgId"],
                    "tags": m["properties"].get("TAGS"), "body_crc": m["bodyCRC"]} for m in store_a_messages]
    units = schemas.read_consume_queues(dst).to_pylist()
    assert sorted((u["topic"], u["queue_id"], u["queue_offset"], u["commitlog_offset"], u["size"], u["tags_code"])
                  for u in units) == sorted(
        (u["topic"], u["queueId"], u["index"], u["phyOffset"], u["size"], u["ext_tagsCode"]) for u in store_a_cq)


def test_encode_record_sets_ipv6_flags_from_the_hosts():
    rec = encode_record(Message("T", 0, b"x", {"TAGS": "a"}, born_host="fe80:0:0:0:0:0:1:2:7",
                                store_host="127.0.0.1:10911"), 0, 0)
    sys_flag = int.from_bytes(rec[36:40], "big")
    assert sys_flag & 0x10 and not sys_flag & 0x20


def test_writer_refuses_a_record_larger_than_a_file(tmp_path):
    with StoreWriter(tmp_path, commitlog_file_size=1024, cq_file_size=200, ext_file_size=1024) as w:
        with pytest.raises(ValueError, match="does not fit"):
            w.append(Message("T", 0, b"x" * 2000))


@pytest.mark.parametrize("ctype", [1, 2])
def test_lz4_and_zstd_frames_of_4_9_4_decode(tmp_path, ctype):
    """sysFlag compression type 1 (LZ4 frame, lz4-java) and 2 (ZSTD frame, zstd-jni)."""
    import lz4.frame
    import zstandard

    body = ("消息体 lz4/zstd " * 500).encode()
    stored = lz4.frame.compress(body) if ctype == 1 else zstandard.ZstdCompressor().compress(body)
    with StoreWriter(tmp_path, commitlog_file_size=1 << 16, cq_file_size=200, ext_file_size=1024) as w:
        w.append(Message("T", 0, body, {"TAGS": "a"}, sys_flag=1 | (ctype << 8), stored_body=stored))
    (row,) = schemas.read_messages(tmp_path).to_pylist()
    assert row["body"] == body and row["sys_flag"] == 1 | (ctype << 8)


def test_store_without_ext_units_decodes_and_replays_without_bitmap_audit(tmp_path):
    from jobs.plan.build import build_plan
    from jobs.settings import JobOptions
    from tests.local_replay import kind, replay_local

    with StoreWriter(tmp_path, commitlog_file_size=1 << 16, cq_file_size=200, ext_file_size=1024,
                     enable_ext=False) as w:
        for i in range(5):
            w.append(Message("T", 0, b"x", {"TAGS": "TagA" if i % 2 else "TagB", "a": str(i)}))
    units = schemas.read_consume_queues(tmp_path).to_pylist()
    # without ext units the unit holds the tag's hash itself (tag_hash.jsonl: TagB 2598920, TagA 2598919)
    assert [(u["is_ext_addr"], u["tags_code"]) for u in units] == [
        (False, 2598920), (False, 2598919), (False, 2598920), (False, 2598919), (False, 2598920)]
    ad_hoc = (("G", "T", "SQL92", "a > 2"), ("H", "T", "TAG", "TagA"))
    planned = build_plan(JobOptions(store=str(tmp_path), ad_hoc=ad_hoc))
    result = replay_local(planned)
    got = {(r["group"], r["queue_offset"]) for r in kind(result, "matched").to_pylist()}
    assert got == {("G", 3), ("G", 4), ("H", 1), ("H", 3)}
    assert kind(result, "bitmap").num_rows == 0
