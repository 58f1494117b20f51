"""jobs/output/writers.py: a split's parts, the commit of successful attempts only, names safe as paths."""
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from filtering.topic_replay import MessageRows, Pairs
from jobs.output.layouts import NORMALIZED, WIDE
from jobs.output.writers import CountingSplitWriter, SinkSpec, SplitWriter, TableSplitWriter, commit, hive_escape
from jobs.report.summary import Counters
from schemas.arrow_schemas import OUTPUT_MESSAGE_FIELDS, STAT_FIELDS

# the header fields every decoded record has (a message's msg_id is its store host's and offset's)
HEADER = dict(born_timestamp=1795000000000, store_timestamp=1795000000001, born_host="10.0.0.2:50000",
              store_host="10.0.0.1:10911", reconsume_times=0, sys_flag=0)


def _pieces(topic="T"):
    """Two messages of one topic: the first delivered to G1 and G2, the second collided for G3."""
    base = dict({f.name: None for f in pa.schema(OUTPUT_MESSAGE_FIELDS)}, **HEADER)
    table = pa.Table.from_pylist([dict(base, queue_id=1, queue_offset=5, commitlog_offset=500, body=b"x",
                                       properties=[("a", "1")], msg_id="0A00000100002A9F00000000000001F4"),
                                  dict(base, queue_id=1, queue_offset=6, commitlog_offset=600, body=b"y",
                                       msg_id="0A00000100002A9F0000000000000258")],
                                 schema=pa.schema(OUTPUT_MESSAGE_FIELDS))
    groups = pa.array(["G1", "G2", "G3"])
    message = MessageRows(topic, table, groups,  # G1 and G2 receive the first message, G3's second collides
                          Pairs(np.array([[True, False], [True, False], [False, False]]), np.arange(2)),
                          Pairs(np.array([[False, False], [False, False], [False, True]]), np.arange(2)))
    stats = pa.table({"group": ["G1"], "topic": [topic], **{f: [2 if f == "units" else 0] for f in STAT_FIELDS}})
    return [("message", message), ("stats", stats)]


def _write(tmp_path, attempt, layout=NORMALIZED, pieces=None, split=0, writer=SplitWriter):
    (tmp_path / "out").mkdir(parents=True, exist_ok=True)  # the temporary OUT, made by the run's claim
    writer = SinkSpec(str(tmp_path / "out"), layout, writer=writer).open(split, attempt)
    for kind, piece in pieces or _pieces():
        writer.write(kind, piece)
    return writer.close()


def test_a_message_is_written_once_and_fanned_out_narrow_per_group(tmp_path):
    reports = _write(tmp_path, "a1")
    commit(str(tmp_path / "out"), reports)
    matched = pq.read_table(tmp_path / "out" / "matched" / "part-00000.parquet")
    got = [(r["group"], r["topic"], r["queue_offset"]) for r in matched.to_pylist()]
    assert got == [("G1", "T", 5), ("G2", "T", 5)]
    assert "body" not in matched.column_names and "properties" not in matched.column_names
    collided = pq.read_table(tmp_path / "out" / "audit" / "collisions" / "part-00000.parquet").to_pylist()
    assert [(r["group"], r["queue_offset"]) for r in collided] == [("G3", 6)]
    messages = ds.dataset(tmp_path / "out" / "messages", partitioning="hive").to_table().to_pylist()
    assert [(m["topic"], m["commitlog_offset"], m["body"]) for m in messages] == [("T", 500, b"x"), ("T", 600, b"y")]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["audit", "matched", "messages"]


def test_wide_layout_carries_every_column_in_matched_rows(tmp_path):
    commit(str(tmp_path / "out"), _write(tmp_path, "a1", layout=WIDE))
    matched = pq.read_table(tmp_path / "out" / "matched" / "part-00000.parquet")
    assert matched.column("body").to_pylist() == [b"x", b"x"]
    assert not (tmp_path / "out" / "messages").exists()


def test_only_the_reported_attempt_is_committed(tmp_path):
    _write(tmp_path, "failed-attempt")  # a first attempt that died: its files exist, its report never arrives
    reports = _write(tmp_path, "retried")
    written = commit(str(tmp_path / "out"), reports)
    files = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert files == ["audit/collisions/part-00000.parquet", "matched/part-00000.parquet",
                     "messages/topic=T/part-00000.parquet"]
    assert written["matched"][:2] == (1, 2) and written["messages"][:2] == (1, 2)


def test_counters_are_summed_over_the_reports(tmp_path):
    reports = _write(tmp_path, "a", split=0) + _write(tmp_path, "b", split=1)
    counters = Counters.of(reports)
    assert counters.groups[("G1", "T")]["units"] == 4


def test_the_noop_writer_writes_nothing_but_counts(tmp_path):
    reports = _write(tmp_path, "a", writer=CountingSplitWriter)
    assert {r["final"]: r["rows"] for r in reports if r["kind"] == "file"} == {
        "audit/collisions/part-00000.parquet": 1, "matched/part-00000.parquet": 2,
        "messages/topic=T/part-00000.parquet": 2}
    assert not list((tmp_path / "out").iterdir())


def test_the_iceberg_writer_cuts_a_part_per_group_and_keeps_the_topic_as_a_column(tmp_path):
    reports = _write(tmp_path, "a", writer=TableSplitWriter)
    assert {r["final"]: r["rows"] for r in reports if r["kind"] == "file"} == {
        "matched/group=G1/part-00000.parquet": 1, "matched/group=G2/part-00000.parquet": 1,
        "audit/collisions/group=G3/part-00000.parquet": 1, "messages/topic=T/part-00000.parquet": 2}
    commit(str(tmp_path / "out"), reports)
    matched = pq.ParquetFile(tmp_path / "out" / "matched" / "group=G2" / "part-00000.parquet")
    assert [(r["group"], r["queue_offset"]) for r in matched.read().to_pylist()] == [("G2", 5)]
    group_column = matched.schema_arrow.get_field_index("group")
    assert matched.metadata.row_group(0).column(group_column).statistics.min == "G2"  # add_files reads it
    messages = pq.read_table(tmp_path / "out" / "messages" / "topic=T" / "part-00000.parquet")
    assert messages.column_names[-1] == "topic" and messages.column("topic").to_pylist() == ["T", "T"]


def test_names_become_path_parts_only_escaped_as_hive_escapes_them(tmp_path):
    assert hive_escape("%RETRY%G") == "%25RETRY%25G"
    assert hive_escape("../../evil/x") == "..%2F..%2Fevil%2Fx"
    assert hive_escape("a=b:c") == "a%3Db%3Ac"
    assert hive_escape("订单Topic") == "订单Topic"
    commit(str(tmp_path / "out"), _write(tmp_path, "a", pieces=_pieces("../../evil/x")))
    inside = [p for p in tmp_path.rglob("*.parquet")]
    assert all((tmp_path / "out") in p.parents for p in inside)
    messages = ds.dataset(tmp_path / "out" / "messages", partitioning="hive").to_table()
    assert messages.column("topic").to_pylist() == ["../../evil/x"] * 2


def _repeated_pieces(n=5):
    """n messages of one topic, tags and keys null in some and repeated in others, the third record pointed
    at twice (a consume queue that holds one record's unit twice); both groups receive every message."""
    base = dict({f.name: None for f in pa.schema(OUTPUT_MESSAGE_FIELDS)}, **HEADER)
    offsets = [100 * (k + 1 - (k > 2)) for k in range(n)]  # 100, 200, 300, 300, 400, ...
    rows = [dict(base, queue_id=0, queue_offset=k, commitlog_offset=o, msg_id=f"ID{o}", body=b"b",
                 tags=None if k % 2 else f"Tag{k % 3}", keys=None if k == 1 else f"k{k % 7}")
            for k, o in enumerate(offsets)]
    table = pa.Table.from_pylist(rows, schema=pa.schema(OUTPUT_MESSAGE_FIELDS))
    return [("message", MessageRows("T", table, pa.array(["G1", "G2"]), Pairs(np.ones((2, n), bool), np.arange(n)),
                                    Pairs(np.zeros((2, n), bool), np.arange(n))))]


def test_matched_rows_read_back_as_plain_strings_with_their_nulls(tmp_path):
    commit(str(tmp_path / "out"), _write(tmp_path, "a", pieces=_repeated_pieces()))
    matched = pq.read_table(tmp_path / "out" / "matched" / "part-00000.parquet")
    assert [matched.schema.field(c).type for c in ("group", "topic", "msg_id", "tags", "keys")] == [pa.string()] * 5
    twice = [value for value in ("ID100", "ID200", "ID300", "ID300", "ID400") for _ in range(2)]  # G1's, G2's
    assert matched.column("msg_id").to_pylist() == twice
    assert matched.column("tags").to_pylist()[::2] == ["Tag0", None, "Tag2", None, "Tag1"]
    assert matched.column("keys").to_pylist()[1::2] == ["k0", None, "k2", "k3", "k4"]
    assert matched.column("group").to_pylist() == ["G1", "G2"] * 5


def test_a_part_is_written_byte_for_byte_the_same_again(tmp_path):
    # Arrow writes a dictionary column with repeated values and null rows with bytes that change from run to
    # run: no such column may reach the writer
    parts = []
    for attempt in ("a", "b"):
        reports = _write(tmp_path / attempt, attempt, pieces=_repeated_pieces(5000))
        commit(str(tmp_path / attempt / "out"), reports)
        parts.append((tmp_path / attempt / "out" / "matched" / "part-00000.parquet").read_bytes())
    assert parts[0] == parts[1]


def test_wide_rows_are_written_a_bounded_number_at_a_time_in_message_order(tmp_path, monkeypatch):
    from jobs.output import layouts

    monkeypatch.setattr(layouts, "WIDE_ROWS", 3)
    commit(str(tmp_path / "out"), _write(tmp_path, "a", layout=WIDE, pieces=_repeated_pieces()))
    part = pq.ParquetFile(tmp_path / "out" / "matched" / "part-00000.parquet")
    assert [part.metadata.row_group(i).num_rows for i in range(part.num_row_groups)] == [3, 3, 3, 1]
    rows = part.read().to_pylist()
    assert [(r["group"], r["queue_offset"]) for r in rows] == [(g, k) for k in range(5) for g in ("G1", "G2")]


def test_matched_rows_come_a_message_at_a_time_each_with_its_groups_in_log_order(tmp_path):
    """Each message's groups together, so that the message's columns repeat in runs (written once each: a matched
    part of the bench store 2.5x smaller than rows grouped by group, and faster to write)."""
    commit(str(tmp_path / "out"), _write(tmp_path, "a", pieces=_repeated_pieces()))
    rows = pq.read_table(tmp_path / "out" / "matched" / "part-00000.parquet").to_pylist()
    assert [(r["queue_offset"], r["group"]) for r in rows] == [(k, g) for k in range(5) for g in ("G1", "G2")]


def test_property_names_are_dictionary_encoded_and_read_back_as_a_plain_map(tmp_path):
    """The writer takes a column path it does not know without a word: check the path really is the keys'."""
    commit(str(tmp_path / "out"), _write(tmp_path, "a1"))
    part = pq.ParquetFile(next((tmp_path / "out" / "messages").rglob("*.parquet")))
    columns = part.metadata.row_group(0)
    encodings = {columns.column(i).path_in_schema: columns.column(i).encodings for i in range(columns.num_columns)}
    assert "RLE_DICTIONARY" in encodings["properties.key_value.key"]
    assert "RLE_DICTIONARY" not in encodings["properties.key_value.value"]
    assert part.read().column("properties").to_pylist() == [[("a", "1")], None]


def test_a_part_that_cannot_be_written_is_the_outputs_error_exit_2_naming_out(tmp_path):
    from jobs.errors import EXIT_USAGE, OutputError

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "_attempts").write_bytes(b"")  # a file where the task's folder must go
    writer = SinkSpec(str(tmp_path / "out"), NORMALIZED).open(0, "a")
    with pytest.raises(OutputError) as raised:
        for kind, piece in _pieces():
            writer.write(kind, piece)
    assert raised.value.exit_code == EXIT_USAGE == 2
    assert str(raised.value).startswith(f"--out (its temporary {tmp_path / 'out'}): cannot be written (")


def test_pairs_are_counted_and_listed_by_group_then_row_of_the_rows_kept():
    # two groups, four messages; message 1 goes to no group, so the MessageRows table holds messages 0, 2 and 3
    matrix = np.array([[True, False, True, False],
                       [False, False, True, True]])
    pairs = Pairs(matrix, np.array([0, 2, 3]))
    assert pairs.count == 4
    groups, rows = pairs
    assert groups.tolist() == [0, 0, 1, 1]
    assert rows.tolist() == [0, 1, 1, 2]  # indexes into the table's rows: messages 0, 2; 2, 3
    every = Pairs(np.array([[True, True], [False, True]]), np.array([0, 1]))
    assert every.count == 3 and [a.tolist() for a in every] == [[0, 0, 1], [0, 1, 1]]


def test_pairs_are_listed_by_row_then_group_for_the_parts_a_message_at_a_time():
    # message 1 goes to no group (the table holds messages 0, 2 and 3); 2 goes to both groups
    matrix = np.array([[True, False, True, True],
                       [True, False, True, False]])
    groups, rows = Pairs(matrix, np.array([0, 2, 3])).by_message()
    assert list(zip(rows.tolist(), groups.tolist())) == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]
    groups, rows = Pairs(matrix[:, [0, 2, 3]], np.array([0, 1, 2])).by_message()  # every message kept
    assert list(zip(rows.tolist(), groups.tolist())) == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]


def test_columns_no_row_leaves_null_are_written_required(tmp_path):
    """A record's header fields, its msg_id, a row's group and topic: no definition level to encode per value."""
    commit(str(tmp_path / "out"), _write(tmp_path, "a"))
    matched = pq.ParquetFile(tmp_path / "out" / "matched" / "part-00000.parquet").schema
    required = [matched.column(i).name for i in range(len(matched)) if matched.column(i).max_definition_level == 0]
    assert required == ["group", "topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id", "born_timestamp",
                        "store_timestamp"]
    messages = pq.ParquetFile(next((tmp_path / "out" / "messages").rglob("*.parquet"))).schema
    optional = [messages.column(i).path for i in range(len(messages)) if messages.column(i).max_definition_level]
    assert optional == ["uniq_key", "tags", "keys", "properties.key_value.key", "properties.key_value.value", "body",
                        "source_topic", "source_queue_id", "source_queue_offset"]


def test_a_null_where_a_column_is_required_fails_the_write(tmp_path):
    (kind, message), _ = _pieces()
    table = message.table.set_column(message.table.schema.get_field_index("msg_id"), "msg_id",
                                     pa.array([None, "0A00000100002A9F0000000000000258"], pa.string()))
    with pytest.raises(ValueError, match="msg_id"):  # refused by the cast to the part's schema
        _write(tmp_path, "a", pieces=[(kind, MessageRows(message.topic, table, message.groups, message.delivered,
                                                         message.collided))])


def test_a_matched_part_writes_the_integers_its_rows_repeat_plain_and_the_timestamps_delta_encoded(tmp_path):
    commit(str(tmp_path / "out"), _write(tmp_path, "a", pieces=_repeated_pieces()))
    row_group = pq.ParquetFile(tmp_path / "out" / "matched" / "part-00000.parquet").metadata.row_group(0)
    columns = map(row_group.column, range(row_group.num_columns))
    encodings = {column.path_in_schema: column.encodings for column in columns}
    data = {c: [e for e in encodings[c] if e != "RLE"] for c in encodings}  # RLE: the levels' encoding
    assert [data[c] for c in ("queue_id", "queue_offset", "commitlog_offset")] == [["PLAIN"]] * 3
    assert [data[c] for c in ("born_timestamp", "store_timestamp")] == [["DELTA_BINARY_PACKED"]] * 2
