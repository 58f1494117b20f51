"""spark-submit entry point: replay a RocketMQ broker store and re-apply its server-side filtering.

    spark-submit jobs/replay.py --store STORE --out OUT [--subscriptions FILE ...]
        [--subscription GROUP TOPIC TYPE EXPRESSION ...] [--rocketmq-version {4,5}]
        [--from {earliest,committed}] [--groups G,...] [--topics T,...] [--conf FILE] [--no-body]

Exit codes (for schedulers): 0 success; 1 failed input (unreadable or corrupt store, bad config);
2 bad arguments; 3 finished, but some subscriptions did not parse (SUBSCRIPTION_PARSE_FAILED).
"""
import argparse
import logging
import os
import sys

if __package__ in (None, ""):  # run as a file by spark-submit: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jobs import outputs  # noqa: E402
from jobs.plan import JobOptions, build_plan  # noqa: E402
from jobs.settings import load_settings  # noqa: E402

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3
log = logging.getLogger("mqreplay")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="replay.py", description=__doc__.splitlines()[0])
    p.add_argument("--store", required=True, help="the broker's storePathRootDir (path or URI)")
    p.add_argument("--out", required=True, help="output directory (path or URI); must not exist")
    p.add_argument("--subscriptions", action="append", default=[], metavar="FILE",
                   help="subscription file {\"groups\": [...]} (repeatable; later files win)")
    p.add_argument("--subscription", action="append", nargs=4, default=[],
                   metavar=("GROUP", "TOPIC", "TYPE", "EXPRESSION"), help="an ad hoc subscription (repeatable)")
    p.add_argument("--rocketmq-version", choices=["4", "5"], help="SQL92 dialect (default 5)")
    p.add_argument("--from", dest="start_from", choices=["earliest", "committed"],
                   help="earliest, or each group's committed offsets in config/consumerOffset.json")
    p.add_argument("--groups", help="comma-separated groups to replay (default all)")
    p.add_argument("--topics", help="comma-separated topics to replay (default all)")
    p.add_argument("--conf", help="job settings JSON (default conf/replay.json)")
    p.add_argument("--no-body", action="store_true", help="leave message bodies out of the output")
    p.add_argument("--no-retry", action="store_true", help="do not add each group's %%RETRY%% subscription")
    p.add_argument("--filter-support-retry", action="store_true",
                   help="apply the original topic's SQL92 filter on %%RETRY%% topics (broker filterSupportRetry)")
    p.add_argument("--on-corrupt", choices=["fail", "skip"], help="stop on damaged data, or audit and skip it")
    p.add_argument("--verify-crc", action="store_true", help="check every body's CRC32")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    p.add_argument("--master", help="Spark master when not run by spark-submit (default local[*])")
    p.add_argument("--sink", choices=["parquet", "noop"], default="parquet",
                   help="noop: run everything but write nothing (benchmarks); parquet: the outputs")
    return p.parse_args(argv)


def options_from(args, settings):
    split = lambda s: tuple(x for x in (s or "").split(",") if x)  # noqa: E731
    return JobOptions(
        store=args.store,
        subscription_files=tuple(args.subscriptions),
        ad_hoc=tuple(tuple(s) for s in args.subscription),
        dialect=args.rocketmq_version or str(settings["rocketmq_version"]),
        start_from=args.start_from or settings["from"],
        groups=split(args.groups), topics=split(args.topics),
        retry=settings["retry_subscriptions"] and not args.no_retry,
        with_body=settings["with_body"] and not args.no_body,
        support_retry=settings["filter_support_retry"] or args.filter_support_retry,
        bloom_f=int(settings["bloom_f"]), bloom_n=int(settings["bloom_n"]),
        split_size=int(settings["split_size_mb"]) << 20,
        on_corrupt=args.on_corrupt or settings["on_corrupt"],
        verify_crc=settings["verify_crc"] or args.verify_crc,
    )


def spark_session(settings, master=None):
    from pyspark.sql import SparkSession

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


def store_error_of(exc):
    """The message of a CorruptStoreError / UnsupportedStoreError raised in a Spark task, if that is the cause."""
    for line in str(exc).splitlines():
        for name in ("CorruptStoreError: ", "UnsupportedStoreError: ", "ConfigError: "):
            if name in line:
                return line.split(name, 1)[1].strip()
    return None


def main(argv=None):
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        args = parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    try:
        settings = load_settings(args.conf)
        options = options_from(args, settings)
        planned = build_plan(options)
        outputs.refuse_existing(args.out, args.overwrite)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    spark = spark_session(settings, args.master)
    try:
        summary = outputs.run_and_publish(spark, planned, args.out, options, settings, sink=args.sink)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except Exception as exc:  # noqa: BLE001 - a task's error arrives wrapped by Spark
        reason = store_error_of(exc)
        if reason is None:
            raise
        print(f"error: {reason}", file=sys.stderr)
        return EXIT_INPUT
    finally:
        spark.stop()
    print(outputs.summary_table(summary))
    print(f"output: {args.out}")
    return EXIT_PARTIAL if summary["failed_subscriptions"] else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
