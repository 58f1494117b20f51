"""A PySpark app that `make cluster-test` submits with the package: it fails unless every executor's
Python workers run the archive's interpreter (spark.archives ...#environment), import pyspark from their
Spark's python/lib/pyspark.zip (the environment has no pyspark) and the project from mqreplay.zip."""
import json
import sys

from pyspark.sql import SparkSession


def where(_):
    import os
    import socket
    import time

    import pyarrow
    import pyspark

    import jobs

    time.sleep(0.5)  # long enough for every executor to get tasks
    yield {"host": socket.gethostname(), "pid": os.getpid(), "cwd": os.getcwd(), "executable": sys.executable,
           "prefix": sys.prefix, "version": sys.version.split()[0], "pyspark": pyspark.__file__,
           "pyarrow": pyarrow.__file__, "jobs": jobs.__file__}


def problems(report):
    env = report["cwd"] + "/environment"
    found = []
    if report["prefix"] != env:
        found.append(f"sys.prefix is {report['prefix']}, not the unpacked archive {env}")
    if not report["pyarrow"].startswith(env + "/"):
        found.append(f"pyarrow comes from {report['pyarrow']}, not from the archive")
    if "/python/lib/pyspark.zip/" not in report["pyspark"]:
        found.append(f"pyspark comes from {report['pyspark']}, not from $SPARK_HOME/python/lib/pyspark.zip")
    if "mqreplay.zip/" not in report["jobs"]:
        found.append(f"jobs comes from {report['jobs']}, not from mqreplay.zip")
    if report["version"] != sys.version.split()[0]:
        found.append(f"Python {report['version']} on the executor, {sys.version.split()[0]} on the driver")
    return found


def main():
    spark = SparkSession.builder.appName("mqreplay-cluster-probe").getOrCreate()
    sc = spark.sparkContext
    n = 4 * sc.defaultParallelism
    reports = sc.parallelize(range(n), n).mapPartitions(where).collect()
    spark.stop()
    workers = {(r["cwd"], r["executable"]) for r in reports}
    bad = [(r, p) for r in reports for p in problems(r)]
    for cwd, executable in sorted(workers):
        print(f"probe: executor dir {cwd}: python {executable}")
    print(f"probe: driver python {sys.executable} (prefix {sys.prefix})")
    for report, problem in bad:
        print(f"probe: {problem}\n  {json.dumps(report)}", file=sys.stderr)
    if len({cwd for cwd, _ in workers}) < 2:
        print("probe: tasks ran in fewer than 2 executors", file=sys.stderr)
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
