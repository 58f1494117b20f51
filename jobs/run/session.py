"""The run's Spark session: classic (spark-submit, or a plain `python jobs/replay.py` with a local master) or a
Spark Connect client (`--remote sc://HOST:PORT`). The stage and the sinks are DataFrame operations either way
(jobs/run/stage.py); what only a classic session has (accumulators for progress, the status tracker) is asked
for through `is_connect`."""
import os


def spark_session(settings, master=None, remote=None):
    """A session with conf/replay.json's "spark" settings under those spark-submit already set. Over Connect the
    server owns its static settings: only the runtime ones (spark.sql.*) are applied, on the session."""
    from pyspark.sql import SparkSession

    if remote:
        spark = SparkSession.builder.remote(remote).appName("mqreplay").getOrCreate()
        for key, value in settings.get("spark", {}).items():
            if key.startswith("spark.sql."):
                spark.conf.set(key, value)
        return spark
    builder = SparkSession.builder.appName("mqreplay")
    if master:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # plain `python jobs/replay.py`: not under spark-submit
        builder = builder.master("local[*]")
    given = _submitted_conf()
    for key, value in settings.get("spark", {}).items():
        if key not in given:  # spark-submit's --conf and --properties-file win over conf/replay.json
            builder = builder.config(key, value)
    return builder.getOrCreate()


def _submitted_conf():
    """Keys spark-submit already set (its JVM holds them as system properties); empty outside spark-submit."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return set()
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return {key for key, _ in SparkConf().getAll()}


def is_connect(spark):
    """Whether `spark` is a Spark Connect client session (no SparkContext, no RDDs, no accumulators)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
