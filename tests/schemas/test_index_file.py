"""The broker's index/ files read (schemas/index/index_file.py) and keys found through them or by a scan
(schemas/index/key_lookup.py): store_a's real index files, and indexes built by hand as IndexFile.putKey writes them
(tools/index_writer.py, whose own String.hashCode is checked against store_a's files byte for byte)."""
import gzip
import json
import shutil

import numpy as np
import pyarrow.fs as pafs
import pytest

from schemas.index.index_file import index_key, key_hash, list_index_files, open_index_file
from schemas.index.key_lookup import find_key_units, locate_keys
from schemas.log.files import find_log
from tools.index_writer import IndexFileWriter, IndexWriter, string_hash, string_hashes, write_index_bulk
from tools.store_writer import Message, StoreWriter

FS = pafs.LocalFileSystem()
SLOTS, ENTRIES = 1000, 4000  # store_a's maxHashSlotNum, maxIndexNum (its store_config.json)


@pytest.fixture(scope="module")
def messages(store_a):
    with gzip.open(store_a / "messages.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def carriers(messages):
    """{key: {(topic, queue id, queue offset)}} of RocketMQ's dump: every KEYS token and UNIQ_KEY."""
    out = {}
    for m in messages:
        where = (m["topic"], m["queueId"], m["queueOffset"])
        for k in [t for t in (m["properties"].get("KEYS") or "").split(" ") if t] + [m["properties"]["UNIQ_KEY"]]:
            out.setdefault(k, set()).add(where)
    return out


def _found(fs_root, keys, topics, **kw):
    log, _ = find_log(FS, str(fs_root))
    return locate_keys(FS, str(fs_root), log, keys, topics, **kw)


def _where(found):
    return set(zip(*(found.messages.column(c).to_pylist() for c in ("topic", "queue_id", "queue_offset"))))


def _topics(messages):
    return sorted({m["topic"] for m in messages})


def test_the_writer_rebuilds_store_as_index_files_byte_for_byte(store_a, messages, tmp_path):
    with IndexWriter(str(tmp_path), SLOTS, ENTRIES) as w:
        for m in messages:
            w.add(m["topic"], m["properties"].get("KEYS"), m["properties"].get("UNIQ_KEY"), m["commitLogOffset"],
                  m["storeTimestamp"], m["sysFlag"])
    written = sorted((tmp_path / "index").iterdir())
    real = sorted((store_a / "store" / "index").iterdir())
    assert [p.read_bytes() for p in written] == [p.read_bytes() for p in real]


def test_the_bulk_writer_writes_the_same_files(store_a, messages, tmp_path):
    keys, offsets, times = [], [], []
    for m in messages:  # buildIndex's order: the UNIQ_KEY, then each KEYS token
        for k in [m["properties"]["UNIQ_KEY"]] + [t for t in (m["properties"].get("KEYS") or "").split(" ") if t]:
            keys.append(f"{m['topic']}#{k}")
            offsets.append(m["commitLogOffset"])
            times.append(m["storeTimestamp"])
    written = write_index_bulk(str(tmp_path), keys, offsets, times, SLOTS, ENTRIES)
    real = sorted((store_a / "store" / "index").iterdir())
    assert [open(p, "rb").read() for p in written] == [p.read_bytes() for p in real]
    assert string_hashes(["\U0001d518\U0001d52b\U0001d526", "polygenelubricants", "Aa"]).tolist() == \
        [-2106254422, -(1 << 31), 2112]


def test_store_a_index_headers(store_a, messages):
    files = [open_index_file(FS, p) for p in list_index_files(FS, str(store_a / "store"))]
    assert [f.name for f in files] == ["20261121045714776", "20261121045715563"]
    assert [(len(f.slots), len(f.entries), f.problems) for f in files] == [(SLOTS, ENTRIES, [])] * 2
    first, second = (f.header for f in files)
    assert (first.begin_phy_offset, first.begin_timestamp) == (0, messages[0]["storeTimestamp"])
    assert first.index_count == ENTRIES  # full: the next file begins where it ends
    assert (second.begin_phy_offset, second.begin_timestamp) == (first.end_phy_offset, first.end_timestamp)
    puts = sum(1 + len([t for t in (m["properties"].get("KEYS") or "").split(" ") if t]) for m in messages)
    assert (first.index_count - 1) + (second.index_count - 1) == puts  # entry 0 of each is never written


def test_key_hash_is_javas_abs_hash_code_and_zero_for_integer_min_value():
    assert key_hash("Aa") == 2112
    assert key_hash("polygenelubricants") == 0  # "polygenelubricants".hashCode() == Integer.MIN_VALUE
    assert key_hash("TopicTest#k1") == abs(string_hash("TopicTest#k1"))
    assert string_hash("polygenelubricants") == -(1 << 31)
    assert key_hash("Hello World") == 862545276  # "Hello World".hashCode() == -862545276
    assert key_hash("\U0001d518\U0001d52b\U0001d526") == 2106254422  # Java's -2106254422 (bloom_tags/tag_hash)


def test_every_key_of_store_a_is_found_through_the_index_alone(store_a, messages, carriers):
    keys = sorted(k for k in carriers if len(k) < 30) + sorted(k for k in carriers if len(k) >= 30)[::97]
    for key in keys:
        found = _found(store_a / "store", [key], _topics(messages))
        assert _where(found) == carriers[key], key
        assert [s[3] for s in found.scanned] == [1]  # only the index's last record, past its end
        assert not found.damaged


def test_the_same_answer_from_a_scan_without_index(store_a, messages, carriers, tmp_path):
    shutil.copytree(store_a / "store" / "commitlog", tmp_path / "store" / "commitlog")
    found = _found(tmp_path / "store", ["k3", "k7"], _topics(messages))
    assert _where(found) == carriers["k3"] | carriers["k7"]
    assert found.scanned == [(0, None, "the store has no index/", len(messages))]


def test_find_key_units_gives_the_units_of_the_records(store_a, messages, carriers):
    log, _ = find_log(FS, str(store_a / "store"))
    units = find_key_units(FS, str(store_a / "store"), log, ["k2"])  # every topic the store names
    by_offset = {m["commitLogOffset"]: m for m in messages}
    rows = units.to_pylist()
    assert len(rows) == len(carriers["k2"])
    for r in rows:
        m = by_offset[r["commitlog_offset"]]
        assert (r["topic"], r["queue_id"], r["queue_offset"], r["size"]) == \
            (m["topic"], m["queueId"], m["queueOffset"], m["storeSize"])


def test_the_time_span_of_the_headers_narrows_the_files_read(store_a, messages, carriers, monkeypatch):
    from schemas.index import index_file

    looked = []
    original = index_file.IndexFile.lookup
    monkeypatch.setattr(index_file.IndexFile, "lookup", lambda self, h: looked.append(self.name) or original(self, h))
    since, until = 1795237035600, 1795237035650  # inside the second file's span (…5560 to …5698) only
    found = _found(store_a / "store", ["k5"], _topics(messages), window=(since, until))
    assert looked == ["20261121045715563"]
    want = {(m["topic"], m["queueId"], m["queueOffset"]) for m in messages
            if since <= m["storeTimestamp"] < until and "k5" in (m["properties"].get("KEYS") or "").split(" ")}
    assert want and _where(found) == want


# stores built by hand: records by StoreWriter, their index by IndexWriter (as buildIndex puts the keys)

def _store(root, records, slots=8, entries=32, index=True):
    """records: (topic, KEYS, UNIQ_KEY); each stored a second apart. Returns the commit-log offsets."""
    offsets = []
    with StoreWriter(str(root), commitlog_file_size=1 << 16, cq_file_size=600, ext_file_size=4096) as w:
        for i, (topic, keys, uniq) in enumerate(records):
            props = {"UNIQ_KEY": uniq, **({"KEYS": keys} if keys is not None else {})}
            offsets.append(w.append(Message(topic, 0, b"x", props, store_timestamp=1_800_000_000_000 + 1000 * i)))
    if index:
        with IndexWriter(str(root), slots, entries) as ix:
            for i, ((topic, keys, uniq), o) in enumerate(zip(records, offsets)):
                ix.add(topic, keys, uniq, o, 1_800_000_000_000 + 1000 * i)
    return offsets


def _same_slot_other_hash(topic, key, slots):
    """A key of `topic` whose hash differs from `key`'s and falls in the same slot (by the writer's hashCode)."""
    target = string_hash(f"{topic}#{key}")
    for i in range(10000):
        h = string_hash(f"{topic}#x{i}")
        if h != target and abs(h) % slots == abs(target) % slots:
            return f"x{i}"
    raise AssertionError("none")


def test_collisions_are_never_hits(tmp_path):
    # "Aa" and "BB" have one String.hashCode, so "T#Aa" and "T#BB" do too: one hash, one slot; "T#<other>"
    # shares the slot under another hash. All three chain in one slot of the hand-built file.
    other = _same_slot_other_hash("T", "Aa", 8)
    offsets = _store(tmp_path, [("T", "Aa", "U0"), ("T", "BB", "U1"), ("T", other, "U2"), ("T", "Aa", "U3")])
    f = open_index_file(FS, list_index_files(FS, str(tmp_path))[0])
    assert (len(f.slots), len(f.entries), f.problems) == (8, 32, [])
    _, hit_offsets, _ = f.lookup([key_hash(index_key("T", "Aa"))])
    assert sorted(hit_offsets.tolist()) == [offsets[0], offsets[1], offsets[3]]  # the index can't tell Aa from BB
    found = _found(tmp_path, ["Aa"], ["T"])
    assert found.messages.column("commitlog_offset").to_pylist() == [offsets[0], offsets[3]]
    assert _found(tmp_path, ["BB"], ["T"]).messages.column("commitlog_offset").to_pylist() == [offsets[1]]
    assert _found(tmp_path, [other], ["T"]).messages.column("commitlog_offset").to_pylist() == [offsets[2]]


def test_a_key_in_several_topics(tmp_path):
    offsets = _store(tmp_path, [("A", "k", "U0"), ("B", "k", "U1"), ("%RETRY%G", "k", "U2"), ("A", "j", "U3")])
    assert _found(tmp_path, ["k"], ["A", "B", "%RETRY%G"]).messages.column("commitlog_offset").to_pylist() == \
        offsets[:3]
    assert _found(tmp_path, ["k"], ["B"]).messages.column("commitlog_offset").to_pylist() == [offsets[1]]


def test_a_message_with_several_keys(tmp_path):
    offsets = _store(tmp_path, [("T", "a b  c", "U0"), ("T", "b", "U1")])
    for key, want in (("a", [0]), ("b", [0, 1]), ("c", [0]), ("U1", [1]), ("a b", []), ("", [])):
        assert _found(tmp_path, [key], ["T"]).messages.column("commitlog_offset").to_pylist() == \
            [offsets[i] for i in want], key


def test_an_index_file_written_past_the_commit_logs_end_is_damaged_and_its_span_scanned(tmp_path):
    offsets = _store(tmp_path, [("T", "k", "U0"), ("T", "k", "U1")])
    with IndexWriter(str(tmp_path / "more"), 8, 32) as ix:  # the index of a log that went on: one record more
        for i, o in enumerate(offsets + [offsets[-1] + 4096]):
            ix.add("T", "k", f"U{i}", o, 1_800_000_000_000 + 1000 * i)
    shutil.rmtree(tmp_path / "index")
    shutil.move(tmp_path / "more" / "index", tmp_path / "index")
    found = _found(tmp_path, ["k"], ["T"])
    assert found.messages.column("commitlog_offset").to_pylist() == offsets
    (path, problem), = found.damaged
    assert path.endswith(list_index_files(FS, str(tmp_path))[0].rsplit("/", 1)[1])
    assert f"commit-log offset {offsets[-1] + 4096}" in problem and "past the commit log's end" in problem
    assert [(s[0], s[1], s[3]) for s in found.scanned] == [(0, None, 2)]


@pytest.mark.parametrize("damage, said", [
    (lambda b: b[:10], "shorter than the 40-byte header"),
    (lambda b: b[:-20], "fits no slot and entry count"),
    (lambda b: b[:36] + (99).to_bytes(4, "big") + b[40:], "index count 99 beyond the file's 32 entries"),
    (lambda b: b[:16] + (7).to_bytes(8, "big") + b[24:], "bad header: commit-log offsets 7"),
    # entry 6 (T#k of the third record; 8 slots, so entries from byte 72) linked to itself instead of entry 2
    (lambda b: b[:72 + 6 * 20 + 16] + (6).to_bytes(4, "big") + b[72 + 6 * 20 + 20:],
     "entry 6 links forward to entry 6"),
])
def test_a_damaged_index_file_is_named_and_scanned_around(tmp_path, damage, said):
    offsets = _store(tmp_path, [("T", "k", "U0"), ("T", "j", "U1"), ("T", "k", "U2")])
    path = tmp_path / "index" / list_index_files(FS, str(tmp_path))[0].rsplit("/", 1)[1]
    path.write_bytes(damage(path.read_bytes()))
    found = _found(tmp_path, ["k"], ["T"])
    assert found.messages.column("commitlog_offset").to_pylist() == [offsets[0], offsets[2]]
    assert len(found.damaged) == 1 and said in found.damaged[0][1]


def test_an_empty_index_file_and_an_empty_index_dir_are_scanned_around(tmp_path):
    offsets = _store(tmp_path, [("T", "k", "U0"), ("T", "k", "U1")], index=False)
    (tmp_path / "index").mkdir()
    assert _found(tmp_path, ["k"], ["T"]).scanned == [(0, None, "index/ holds no index file", 2)]
    (tmp_path / "index" / "20270115080000000").write_bytes(IndexFileWriter(8, 32).bytes())  # as created, no key
    found = _found(tmp_path, ["k"], ["T"])
    assert found.messages.column("commitlog_offset").to_pylist() == offsets and not found.damaged
    assert found.scanned == [(0, None, "no usable index file", 2)]


def test_records_past_the_index_end_are_scanned(tmp_path):
    offsets = _store(tmp_path, [("T", "k", "U0"), ("T", "k", "U1"), ("T", "k", "U2")], index=False)
    with IndexWriter(str(tmp_path), 8, 32) as ix:  # the index stopped after the first record
        ix.add("T", "k", "U0", offsets[0], 1_800_000_000_000)
    found = _found(tmp_path, ["k"], ["T"])
    assert found.messages.column("commitlog_offset").to_pylist() == offsets
    assert found.scanned == [(offsets[0], None, "past the index's end", 3)]


def test_a_lookup_walks_chains_of_many_keys_at_once(tmp_path):
    f = IndexFileWriter(4, 16)
    for i, key in enumerate(["T#a", "T#b", "T#c", "T#a", "T#d", "T#a"]):
        f.put_key(key, 100 * i, 1_800_000_000_000 + i)
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "x").write_bytes(f.bytes())
    ix = open_index_file(FS, str(tmp_path / "index" / "x"))
    which, offsets, positions = ix.lookup(np.array([key_hash("T#a"), key_hash("T#d"), key_hash("T#z")]))
    assert list(zip(which.tolist(), offsets.tolist(), positions.tolist())) == \
        [(0, 0, 1), (0, 300, 4), (0, 500, 6), (1, 400, 5)]
