"""spark.read.format("rocketmq") on store_a against RocketMQ's own dumps: rows, groups, pushed and unpushed filters."""
import base64

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from jobs.datasource import RocketMQDataSource, register
from jobs.datasource_filters import BEYOND, Narrowing, push_filters, window_narrowing

COLUMNS = ["topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id", "tags", "keys", "born_timestamp",
           "store_timestamp", "born_host", "store_host", "reconsume_times", "sys_flag", "body"]
KEY = ["topic", "queue_id", "queue_offset"]


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


def test_pushed_filters_narrow_to_the_same_rows_as_spark(rocketmq, store_a_messages):
    stamps = sorted(m["storeTimestamp"] for m in store_a_messages)
    t0, t1 = stamps[len(stamps) // 4], stamps[3 * len(stamps) // 4]
    got = rocketmq.where((F.col("topic") == "TopicTest") & F.col("store_timestamp").between(t0, t1)
                         & F.col("queue_id").isin(0, 1) & (F.col("queue_offset") > 10)
                         & (F.col("commitlog_offset") < 2_000_000)).select(KEY)
    want = {(m["topic"], m["queueId"], m["queueOffset"]) for m in store_a_messages
            if m["topic"] == "TopicTest" and t0 <= m["storeTimestamp"] <= t1 and m["queueId"] in (0, 1)
            and m["queueOffset"] > 10 and m["commitLogOffset"] < 2_000_000}
    assert sorted(tuple(r) for r in got.collect()) == sorted(want) and want


def test_filters_not_pushed_are_applied_by_spark(rocketmq, store_a_messages):
    got = rocketmq.where((F.col("tags") == "TagA") | F.col("keys").like("%k9%")).where(F.col("queue_id") != 0)
    want = [m for m in store_a_messages if (m["properties"].get("TAGS") == "TagA" or "k9" in m["properties"].get(
        "KEYS", "")) and m["queueId"] != 0]
    assert got.count() == len(want)


def test_pushed_filters_plan_fewer_splits_and_queues(rocketmq, store_a):
    from pyspark.sql.datasource import EqualTo, LessThan

    def planned(*filters):
        reader = RocketMQDataSource({"path": str(store_a / "store")}).reader(rocketmq.schema)
        assert list(reader.pushFilters(list(filters))) == []
        parts = reader.partitions()
        return len(parts), {q.topic for p in parts for q in p.job.segments.queues}

    splits, topics = planned()
    assert splits > 1 and "TopicTest" in topics and len(topics) > 1
    assert planned(LessThan(("commitlog_offset",), 1000))[0] == 1
    assert planned(EqualTo(("topic",), "TopicTest"))[1] == {"TopicTest"}  # only its queues are probed
    assert rocketmq.where("topic = 'no such topic'").count() == 0


def test_push_filters_takes_only_what_it_applies_exactly():
    from pyspark.sql.datasource import EqualTo, GreaterThan, In, IsNotNull, LessThanOrEqual, Not, StringStartsWith

    taken = [EqualTo(("topic",), "T"), In(("topic",), ("T", "U")), In(("queue_id",), (1, 2)),
             GreaterThan(("queue_offset",), 9), LessThanOrEqual(("store_timestamp",), 5)]
    left = [EqualTo(("tags",), "A"), Not(EqualTo(("topic",), "T")), StringStartsWith(("topic",), "T"),
            IsNotNull(("queue_id",)), GreaterThan(("topic",), "T"), EqualTo(("queue_id",), 1.5)]
    narrowing, rest = push_filters(Narrowing(), taken + left)
    assert rest == left
    assert narrowing.topics == {"T"} and narrowing.column("queue_id").values == {1, 2}
    assert (narrowing.column("queue_offset").lo, narrowing.column("store_timestamp").hi) == (10, 6)


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
    narrowing = window_narrowing(starting='{"T": {"0": -1}}', ending='{"T": {"1": -1}}')
    assert narrowing.queue_ranges == (("T", 0, BEYOND, BEYOND), ("T", 1, 0, BEYOND))


def test_sql_view_and_bad_options(spark, store_a):
    register(spark)
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW rmq USING rocketmq OPTIONS (path '{store_a / 'store'}')")
    assert spark.sql("SELECT count(*) FROM rmq WHERE topic = 'TopicTest'").collect()[0][0] == 1929
    with pytest.raises(Exception, match="unknown option"):
        spark.read.format("rocketmq").option("withbodies", "false").load(str(store_a / "store")).count()
    with pytest.raises(Exception, match="startingOffsets"):
        spark.read.format("rocketmq").option("startingOffsets", "[1]").load(str(store_a / "store")).count()
