"""A PySpark app that `make cluster-test` submits on the cluster and in local mode: it reads a store through
the rocketmq data source (with subscriptions, and with a pushed-down topic filter) and writes what it read
as sorted JSON lines, so that the two runs can be compared file to file.

usage: datasource_read.py STORE SUBSCRIPTIONS OUT_FILE"""
import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.datasource import register


def main(store, subscriptions, out):
    spark = SparkSession.builder.appName("mqreplay-datasource").getOrCreate()
    register(spark)
    df = spark.read.format("rocketmq").option("subscriptions", subscriptions).load(store)
    rows = df.select("topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id", "store_timestamp",
                     F.sha2("body", 256).alias("body"), "delivered_to", "collided_for").collect()
    topic_rows = df.where(F.col("topic") == "TopicTest").count()
    spark.stop()
    with open(out, "w", encoding="utf-8") as f:
        for row in sorted(json.dumps(r.asDict(), ensure_ascii=False, sort_keys=True) for r in rows):
            f.write(row + "\n")
        f.write(json.dumps({"TopicTest rows": topic_rows}) + "\n")
    print(f"datasource: {len(rows)} rows, {topic_rows} of TopicTest, written to {out}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
