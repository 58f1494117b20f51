"""`make bench`'s floor: what Spark alone costs to take the replay's result rows from Python, with no replay.

The noop figure of `make bench` is the replay's Python work plus Spark's own: starting the Python
workers, and turning every Arrow batch a task returns into Spark rows (the JVM's UnsafeProjection, per
row and field). This measures the second part alone on the same shapes: the driver replays one split
of the store (its biggest) and stores its result batches; then one mapInArrow task per split of the
job, each returning those stored batches (memory-mapped, no work) up to its own split's unit count,
into Spark's noop sink. The
first job of the session is cold as the job's is (Python workers started, JIT cold); the later ones
are warm. Prints one JSON line.

    spark-submit tools/bench_floor.py --store STORE --subscriptions FILE --out DIR
"""
import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def stored_result(store, subscriptions, path):
    """The result batches of the store's first split, as the job's task returns them, in an IPC file; and
    how many units each split of the job has (a task returns about one row per unit)."""
    import pyarrow as pa

    from jobs.plan import JobOptions, build_plan, commitlog_splits, split_units
    from jobs.split_task import iter_split
    from jobs.transforms import RESULT_BATCH_ROWS
    from schemas.arrow_schemas import RESULT_SCHEMA

    planned = build_plan(JobOptions(store=store, retry=False, subscription_files=(subscriptions,)))
    units = [split_units(planned.plan, planned.segments, start, end) for start, end in commitlog_splits(planned.plan)]
    biggest = max(range(len(units)), key=lambda i: units[i].num_rows)
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, RESULT_SCHEMA) as writer:
        for table in iter_split(planned.plan, units[biggest]):
            for batch in table.to_batches(max_chunksize=RESULT_BATCH_ROWS):  # as the job's task
                writer.write_batch(batch)
    return [u.num_rows for u in units]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", required=True)
    p.add_argument("--subscriptions", required=True)
    p.add_argument("--out", required=True, help="directory for the stored batches")
    p.add_argument("--warm-runs", type=int, default=2)
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "split0-result.arrow")
    counts = stored_result(args.store, args.subscriptions, path)

    from pyspark.sql import SparkSession

    from schemas.arrow_schemas import RESULT_SCHEMA, spark_schema

    spark = SparkSession.builder.appName("mqreplay-bench-floor").getOrCreate()

    def task(batches):
        import gc

        import pyarrow as pa

        stored = pa.ipc.open_file(pa.memory_map(path))
        for batch in batches:
            for index in batch.column(0).to_pylist():
                left = counts[index]  # the stored batches of the biggest split, cut at this split's size
                for i in range(stored.num_record_batches):
                    if left <= 0:
                        break
                    part = stored.get_batch(i).slice(0, left)
                    left -= part.num_rows
                    yield part
        gc.collect()  # as the job's task ends
        gc.freeze()

    n_splits = len(counts)
    df = spark.range(0, n_splits, 1, numPartitions=n_splits).mapInArrow(task, spark_schema(RESULT_SCHEMA))
    times = []
    for _ in range(1 + args.warm_runs):
        t = time.time()
        df.write.format("noop").mode("overwrite").save()
        times.append(time.time() - t)
    spark.stop()
    print(json.dumps({"splits": n_splits, "rows": sum(counts), "cold_seconds": round(times[0], 3),
                      "warm_seconds": round(min(times[1:]), 3) if len(times) > 1 else None}))


if __name__ == "__main__":
    main()
