"""spark.read.format("rocketmq") on store_a against RocketMQ's own dumps: rows, groups, one DataFrame asked many
questions, the narrowing options, options checked at load, and a plain Python script's read."""
import base64
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from jobs.datasource import RocketMQDataSource, register
from jobs.datasource.filters import BEYOND, option_narrowing

COLUMNS = ["topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id", "tags", "keys", "born_timestamp",
           "store_timestamp", "born_host", "store_host", "reconsume_times", "sys_flag", "body"]
KEY = ["topic", "queue_id", "queue_offset"]
pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def rocketmq(spark, store_a):
    register(spark)
    return spark.read.format("rocketmq").load(str(store_a / "store"))


@pytest.fixture(scope="module")
def want(spark, rocketmq, store_a_messages):
    """RocketMQ's MessageDecoder rows of every message, in the data source's columns."""
    rows = [(m["topic"], m["queueId"], m["queueOffset"], m["commitLogOffset"], m["msgId"], m["properties"].get("TAGS"),
             m["properties"].get("KEYS"), m["bornTimestamp"], m["storeTimestamp"], m["bornHost"], m["storeHost"],
             m["reconsumeTimes"], m["sysFlag"], base64.b64decode(m["body_base64"])) for m in store_a_messages]
    return spark.createDataFrame(rows, rocketmq.select(COLUMNS).schema)


def test_rows_equal_rocketmq_messages(rocketmq, want):
    assert_df_equality(rocketmq.select(COLUMNS), want, ignore_row_order=True, ignore_nullable=True)


def test_properties_equal_rocketmq_messages(rocketmq, store_a_messages):
    got = {tuple(r[:3]): dict(r[3]) for r in rocketmq.select(*KEY, "properties").collect()}
    assert got == {(m["topic"], m["queueId"], m["queueOffset"]): m["properties"] for m in store_a_messages}


def test_a_row_per_consume_queue_unit(spark, rocketmq, store_a_cq):
    units = spark.createDataFrame([(u["topic"], u["queueId"], u["index"], u["phyOffset"]) for u in store_a_cq],
                                  rocketmq.select(*KEY, "commitlog_offset").schema)
    assert_df_equality(rocketmq.select(*KEY, "commitlog_offset"), units, ignore_row_order=True, ignore_nullable=True)


def test_delivered_to_and_collided_for_equal_rocketmq_read_path(spark, store_a, store_a_expected):
    final, collided = store_a_expected
    df = spark.read.format("rocketmq").option("subscriptions", str(store_a / "registrations.json")) \
        .load(str(store_a / "store"))
    for column, want in (("delivered_to", final), ("collided_for", collided)):
        got = df.select(F.explode(column).alias("group"), *KEY)
        expected = spark.createDataFrame(sorted(want), got.schema)
        assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)
    assert df.count() == 3000  # messages no group receives are rows too, with empty lists
    assert df.where(F.size("delivered_to") == 0).count() > 0


def test_filters_on_unit_columns_give_rocketmq_rows(rocketmq, store_a_messages):
    stamps = sorted(m["storeTimestamp"] for m in store_a_messages)
    t0, t1 = stamps[len(stamps) // 4], stamps[3 * len(stamps) // 4]
    got = rocketmq.where((F.col("topic") == "TopicTest") & F.col("store_timestamp").between(t0, t1)
                         & F.col("queue_id").isin(0, 1) & (F.col("queue_offset") > 10)
                         & (F.col("commitlog_offset") < 2_000_000)).select(KEY)
    want = {(m["topic"], m["queueId"], m["queueOffset"]) for m in store_a_messages
            if m["topic"] == "TopicTest" and t0 <= m["storeTimestamp"] <= t1 and m["queueId"] in (0, 1)
            and m["queueOffset"] > 10 and m["commitLogOffset"] < 2_000_000}
    assert sorted(tuple(r) for r in got.collect()) == sorted(want) and want


def test_filters_on_other_columns_are_applied_by_spark(rocketmq, store_a_messages):
    got = rocketmq.where((F.col("tags") == "TagA") | F.col("keys").like("%k9%")).where(F.col("queue_id") != 0)
    want = [m for m in store_a_messages if (m["properties"].get("TAGS") == "TagA" or "k9" in m["properties"].get(
        "KEYS", "")) and m["queueId"] != 0]
    assert got.count() == len(want)


def _questions(messages):
    """(a filter, RocketMQ's count of it) on every column a user narrows by; None: the whole store."""
    mid = sorted(m["storeTimestamp"] for m in messages)[len(messages) // 2]
    return [
        ("topic = '订单Topic'", sum(m["topic"] == "订单Topic" for m in messages)),
        (None, len(messages)),
        ("queue_id = 1 AND topic = 'TopicTest'",
         sum(m["queueId"] == 1 and m["topic"] == "TopicTest" for m in messages)),
        (f"store_timestamp >= {mid}", sum(m["storeTimestamp"] >= mid for m in messages)),
        (None, len(messages)),
        ("queue_offset > 10 AND commitlog_offset < 1000000",
         sum(m["queueOffset"] > 10 and m["commitLogOffset"] < 1_000_000 for m in messages)),
        ("tags = 'TagA'", sum(m["properties"].get("TAGS") == "TagA" for m in messages)),
        ("array_contains(split(keys, ' '), 'k9')",
         sum("k9" in m["properties"].get("KEYS", "").split(" ") for m in messages)),
        (None, len(messages)),
    ]


@pytest.mark.parametrize("order,pushdown", [("as written", "true"), ("reversed", "true"), ("as written", "false")])
def test_one_dataframe_asked_many_questions_answers_each_as_rocketmq(
        spark, store_a, store_a_messages, order, pushdown):
    """A user reuses one DataFrame: each answer equals RocketMQ's whatever was asked before it (Spark 4.3 reused
    the read planned for `topic = '订单Topic'` for the next `count()`: 680 rows of 5,000 on a held-back store),
    with Spark's Python filter pushdown on or off."""
    register(spark)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", pushdown)
    try:
        df = spark.read.format("rocketmq").option("withBody", "false").load(str(store_a / "store"))
        questions = _questions(store_a_messages)
        for where, want in questions if order == "as written" else questions[::-1]:
            assert (df.where(where) if where else df).count() == want, where
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_one_dataframe_twice_in_one_query_reads_each_side_whole(spark, store_a, store_a_messages):
    """A self-join of two differently filtered sides of one DataFrame: each side keeps its own rows."""
    register(spark)
    df = spark.read.format("rocketmq").option("withBody", "false").load(str(store_a / "store"))
    plain = df.where("topic = '订单Topic'").select("msg_id", F.col("queue_offset").alias("a"))
    early = df.where("queue_offset < 5").select("msg_id", F.col("queue_offset").alias("b"))
    got = {r.msg_id for r in plain.join(early, "msg_id").collect()}
    want = {m["msgId"] for m in store_a_messages if m["topic"] == "订单Topic" and m["queueOffset"] < 5}
    assert got == want and want
    assert df.where("topic = '订单Topic'").union(df.where("topic <> '订单Topic'")).count() == len(store_a_messages)


def test_the_reader_pushes_no_filter(rocketmq, store_a):
    """Its read cannot depend on a query: it keeps DataSourceReader's pushFilters, which hands every filter back."""
    from pyspark.sql.datasource import DataSourceReader

    reader = RocketMQDataSource({"path": str(store_a / "store")}).reader(rocketmq.schema)
    assert type(reader).pushFilters is DataSourceReader.pushFilters


def test_topics_option_plans_only_its_queues_and_the_splits_holding_them(spark, rocketmq, store_a, store_a_messages):
    def planned(**options):
        reader = RocketMQDataSource({"path": str(store_a / "store"), **options}).reader(rocketmq.schema)
        parts = reader.partitions()
        return len(parts), {t for p in parts for s in p.job.plan.units for t, _ in s.served}

    splits, topics = planned()
    assert splits > 1 and "TopicTest" in topics and len(topics) > 1
    assert planned(topics="TopicTest")[1] == {"TopicTest"}  # only its queues are probed
    df = spark.read.format("rocketmq").option("topics", "TopicTest, 订单Topic").load(str(store_a / "store"))
    assert df.count() == sum(m["topic"] in ("TopicTest", "订单Topic") for m in store_a_messages)
    assert spark.read.format("rocketmq").option("topics", "NoSuchTopic").load(str(store_a / "store")).count() == 0


def test_window_options(rocketmq, spark, store_a, store_a_messages):
    stamps = sorted(m["storeTimestamp"] for m in store_a_messages)
    since, until = stamps[100], stamps[200]
    df = spark.read.format("rocketmq").options(since=str(since), until=str(until), withBody="false") \
        .option("startingOffsets", '{"TopicTest": {"0": 5, "1": -2}}') \
        .option("endingOffsets", '{"TopicTest": {"0": 50}}').load(str(store_a / "store"))
    assert "body" not in df.columns
    want = [m for m in store_a_messages if since <= m["storeTimestamp"] < until
            and not (m["topic"] == "TopicTest" and m["queueId"] == 0 and not 5 <= m["queueOffset"] < 50)]
    assert df.count() == len(want)
    narrowing = option_narrowing(starting='{"T": {"0": -1}}', ending='{"T": {"1": -1}}')
    assert narrowing.queue_ranges == (("T", 0, BEYOND, BEYOND), ("T", 1, 0, BEYOND))


def test_sql_view_and_bad_options(spark, store_a):
    register(spark)
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW rmq USING rocketmq OPTIONS (path '{store_a / 'store'}')")
    assert spark.sql("SELECT count(*) FROM rmq WHERE topic = 'TopicTest'").collect()[0][0] == 1929
    with pytest.raises(Exception, match="unknown option"):
        spark.read.format("rocketmq").option("withbodies", "false").load(str(store_a / "store")).count()
    with pytest.raises(Exception, match="startingOffsets"):
        spark.read.format("rocketmq").option("startingOffsets", "[1]").load(str(store_a / "store")).count()


# (option, value, what the one-line error must say): the option and what it accepts
BAD_OPTIONS = [
    ("rocketmqVersion", "7", "option rocketmqVersion must be 4 or 5, got '7'"),
    ("rocketmqVersion", "4.9", "option rocketmqVersion must be 4 or 5, got '4.9'"),
    ("withBody", "yes", "option withBody must be true or false, got 'yes'"),
    ("verifyCrc", "1", "option verifyCrc must be true or false"),
    ("retry", "no", "option retry must be true or false"),
    ("filterSupportRetry", "on", "option filterSupportRetry must be true or false"),
    ("onCorrupt", "ignore", "option onCorrupt must be fail or skip, got 'ignore'"),
    ("onSubscriptionError", "warn", "option onSubscriptionError must be fail or skip, got 'warn'"),
    ("since", "yesterday", "option since: 'yesterday' is neither epoch milliseconds nor an ISO-8601 time"),
    ("until", "2026-11-20T00:00:00", "option until: '2026-11-20T00:00:00' has no UTC offset"),
    ("startingOffsets", '{"TopicTest": {"0": "x"}}', "option startingOffsets: 'TopicTest' queue '0' offset 'x': "
                                                     "expected a queue id and an offset >= 0, -2"),
    ("endingOffsets", '{"TopicTest": 5}', "option endingOffsets: topic 'TopicTest' maps to 5, expected an object"),
    ("subscriptions", "/no/such/subscriptions.json", "option subscriptions: expected a subscription file .*"
                                                     "No such file"),
    ("topics", "TopicTest,,订单Topic", "option topics: expected topic names separated by commas"),
    ("withbodies", "false", r"unknown option\(s\) withbodies \(known: path, brokers, subscriptions, withBody"),
]


@pytest.mark.parametrize("name,value,message", BAD_OPTIONS, ids=[f"{n}={v}" for n, v, _ in BAD_OPTIONS])
def test_a_bad_option_fails_load_naming_the_option_and_what_it_accepts(spark, store_a, name, value, message):
    """At load(), before any query: rocketmqVersion=7 once loaded, and every SQL92 group then failed to parse,
    leaving delivered_to with 3,142 of its 5,109 rows and a line on stderr."""
    register(spark)
    with pytest.raises(Exception, match=message) as raised:
        spark.read.format("rocketmq").option(name, value).load(str(store_a / "store"))
    # one line: the error alone, no traceback of the planner worker (Spark adds its SQLSTATE on a line of its own)
    assert "Traceback" not in str(raised.value) and len(str(raised.value).strip().splitlines()) <= 2, raised.value


def test_a_load_without_a_path_or_with_a_file_that_is_no_subscription_file_fails(spark, tmp_path):
    register(spark)
    with pytest.raises(Exception, match="option path: no store given"):
        spark.read.format("rocketmq").load()
    not_subscriptions = tmp_path / "subs.json"
    not_subscriptions.write_text('{"groups": {"G": "TopicTest"}}')
    with pytest.raises(Exception, match="option subscriptions: expected a subscription file"):
        spark.read.format("rocketmq").option("subscriptions", str(not_subscriptions)).load(str(tmp_path))


@pytest.fixture
def with_a_bad_group(store_a, tmp_path):
    """store_a's registrations and one more group whose SQL92 does not parse."""
    data = json.loads((store_a / "registrations.json").read_text(encoding="utf-8"))
    data["groups"].append({"group": "G_BAD", "topic": "TopicTest", "expressionType": "SQL92", "expression": "a >"})
    path = tmp_path / "subscriptions.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_subscription_that_does_not_parse_fails_the_read_naming_group_topic_and_reason(
        spark, store_a, with_a_bad_group):
    """A group left out in silence loses all its rows from delivered_to: by default the read refuses."""
    register(spark)
    df = spark.read.format("rocketmq").option("subscriptions", str(with_a_bad_group)).load(str(store_a / "store"))
    with pytest.raises(Exception, match="group G_BAD topic TopicTest: .*unexpected end of selector"):
        df.count()


def test_on_subscription_error_skip_leaves_the_group_out_with_a_warning(spark, store_a, with_a_bad_group, caplog):
    """The job's behaviour, asked for: the other groups' rows are RocketMQ's (expected.json: 5,109), and a
    warning names the group left out."""
    options = {"path": str(store_a / "store"), "subscriptions": str(with_a_bad_group), "onSubscriptionError": "skip"}
    source = RocketMQDataSource(options)
    with caplog.at_level(logging.WARNING, logger="mqreplay"):
        source.reader(source.schema()).partitions()
    assert "group G_BAD topic TopicTest" in caplog.text and "onSubscriptionError=skip" in caplog.text
    df = spark.read.format("rocketmq").options(**options).load()
    assert df.select(F.explode("delivered_to")).count() == 5109


PLAIN_SCRIPT = """
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.datasource import register

store, subscriptions = sys.argv[1:]
spark = SparkSession.builder.master("local[2]").getOrCreate()
register(spark)
print(spark.read.format("rocketmq").load(store).count())
df = spark.read.format("rocketmq").option("subscriptions", subscriptions).load(store)
print(df.select(F.explode("delivered_to")).count())
"""


@pytest.mark.system
def test_register_lets_a_plain_python_script_read_without_pyspark_python(store_a, tmp_path):
    """The README's use: `.venv/bin/python script.py`, no PYSPARK_PYTHON. PySpark would start the workers with
    `python3` from PATH (here one that only fails, as a python3 without pyarrow fails)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\necho python3 from PATH started >&2\nexit 3\n")
    (fake / "python3").chmod(0o755)
    venv = Path(sys.prefix).resolve()
    path = [str(fake)] + [p for p in os.environ["PATH"].split(os.pathsep) if venv not in Path(p).resolve().parents]
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    script = tmp_path / "read_store.py"
    script.write_text(PLAIN_SCRIPT, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script), str(store_a / "store"), str(store_a / "registrations.json")],
                          cwd=tmp_path, env={**env, "PATH": os.pathsep.join(path)}, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["3000", "5109"]  # units of cq.jsonl.gz, rows of expected.json


class ContextWithoutPythonSetting:
    """What register() sees of a SparkContext started without PYSPARK_PYTHON: PySpark's default "python3"."""

    def __init__(self, master, conf=None):
        self.master, self.conf, self.pythonExec = master, conf or {}, "python3"

    def getConf(self):
        return self.conf


def test_register_on_a_cluster_master_says_what_to_set_instead_of_guessing(monkeypatch):
    """A cluster's nodes have their own paths: the driver's interpreter is no answer there."""
    from jobs.datasource import worker_python

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    cluster = ContextWithoutPythonSetting("spark://10.0.0.1:7077")
    with pytest.warns(UserWarning, match="'python3' from each node's PATH.*set spark.pyspark.python"):
        assert worker_python(cluster) is None
    assert worker_python(ContextWithoutPythonSetting("local[2]")) == sys.executable
    configured = ContextWithoutPythonSetting("yarn", {"spark.pyspark.python": "./environment/bin/python"})
    assert worker_python(configured) == "./environment/bin/python"


def test_register_leaves_the_sessions_python_alone_and_reads_with_the_drivers(spark, store_a, monkeypatch):
    """The session's other Python code (a user's UDFs) keeps the interpreter it had; the data source's own workers
    run one that can import it, even where the session's cannot start at all."""
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    sc = spark.sparkContext
    monkeypatch.setattr(sc, "pythonExec", "/nonexistent/python3")  # restored when the test ends
    register(spark)
    assert sc.pythonExec == "/nonexistent/python3"
    rows = spark.read.format("rocketmq").option("topics", "TopicTest").load(str(store_a / "store")).count()
    register(spark)  # as the other tests registered it (the fixture's interpreter)
    assert rows > 0


def test_units_from_commitlog_reads_the_same_rows(spark, want, store_a):
    """unitsFrom=commitlog: the units rebuilt from the commit log, a row each, as RocketMQ's messages."""
    register(spark)
    rebuilt = spark.read.format("rocketmq").option("unitsFrom", "commitlog").load(str(store_a / "store"))
    assert_df_equality(rebuilt.select(COLUMNS), want, ignore_row_order=True, ignore_nullable=True)
    with pytest.raises(Exception, match="option unitsFrom must be auto or consumequeue or commitlog"):
        spark.read.format("rocketmq").option("unitsFrom", "files").load(str(store_a / "store"))


def test_key_option_reads_the_messages_carrying_the_key_through_the_index(spark, store_a, store_a_messages):
    """A KEYS token and a UNIQ_KEY, each against the messages of RocketMQ's dump that carry it."""
    register(spark)
    uniq = store_a_messages[7]["properties"]["UNIQ_KEY"]
    for key in ("k9", uniq):
        df = spark.read.format("rocketmq").option("withBody", "false").option("key", key).load(str(store_a / "store"))
        got = sorted(tuple(r) for r in df.select(*KEY).collect())
        want = sorted((m["topic"], m["queueId"], m["queueOffset"]) for m in store_a_messages
                      if key in m["properties"].get("KEYS", "").split(" ") or m["properties"].get("UNIQ_KEY") == key)
        assert got == want and want, key


def test_brokers_option_reads_a_cluster_each_row_naming_its_broker(spark, store_cluster):
    """Both brokers' queues start at 0: only the broker column tells their rows apart; the groups each row reaches
    are its own broker's read path's (expected_cluster.json)."""
    register(spark)
    brokers = ",".join(f"{b}={store_cluster / b / 'store'}" for b in ("broker-a", "broker-b"))
    df = spark.read.format("rocketmq").option("withBody", "false").option("brokers", brokers) \
        .option("subscriptions", str(store_cluster / "registrations.json")).load()
    delivered = {tuple(r) for r in df.select("broker", F.explode("delivered_to"), *KEY).collect()}
    expected = json.loads((store_cluster / "expected_cluster.json").read_text(encoding="utf-8"))
    assert delivered == {(r["broker"], g, t, r["queueId"], r["queueOffset"]) for g, topics in expected.items()
                         for t, rows in topics.items() for r in rows}
    assert len({d[1:] for d in delivered}) < len(delivered)  # (group, topic, queue, offset) alone collide
    with pytest.raises(Exception, match="option path: give one store \\(path\\) or a cluster \\(brokers\\), not both"):
        spark.read.format("rocketmq").option("brokers", brokers).load(str(store_cluster / "broker-a" / "store"))


def test_a_store_that_is_not_there_fails_load_not_the_first_query(spark, tmp_path):
    register(spark)
    with pytest.raises(Exception, match=f"option path: store directory not found: {tmp_path / 'nowhere'}"):
        spark.read.format("rocketmq").load(str(tmp_path / "nowhere"))  # no action: load() alone
    (tmp_path / "a_file").write_text("x", encoding="utf-8")
    with pytest.raises(Exception, match="option path: .*a_file is a file"):
        spark.read.format("rocketmq").load(str(tmp_path / "a_file"))
