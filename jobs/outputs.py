"""Run the replay and publish OUT atomically: everything is written under a temporary sibling of OUT,
which is renamed to OUT only when every part succeeded; a failed run leaves no OUT behind."""
import json
import uuid

import pyarrow.fs as pafs

from jobs import transforms as T
from schemas import storefs
from schemas.arrow_schemas import STAT_FIELDS


def refuse_existing(out, overwrite):
    fs, path = storefs.resolve(out)
    if fs.get_file_info(path).type != pafs.FileType.NotFound and not overwrite:
        raise ValueError(f"{out} exists: choose a new --out or pass --overwrite")


def run_and_publish(spark, planned, out, options, settings, sink="parquet"):
    """Run the job, write every output under OUT.tmp-*, then publish it as OUT; returns the summary."""
    fs, final = storefs.resolve(out)
    suffix = f".tmp-{uuid.uuid4().hex[:8]}"
    tmp_path = final + suffix  # for pyarrow (no scheme, no host)
    tmp_uri = str(out).rstrip("/") + suffix  # for Spark's writers: keeps scheme and host (hdfs://nn:8020/...)
    import time

    started = time.time()
    try:
        summary = _run(spark, planned, tmp_uri, options, settings, sink)
        summary["job_seconds"] = round(time.time() - started, 3)
        with fs.open_output_stream(f"{tmp_path}/summary.json") as f:
            f.write(json.dumps(summary, indent=2, ensure_ascii=False, sort_keys=True).encode("utf-8"))
        if fs.get_file_info(final).type != pafs.FileType.NotFound:
            fs.delete_dir(final)
        fs.move(tmp_path, final)
    except BaseException:
        if fs.get_file_info(tmp_path).type != pafs.FileType.NotFound:
            fs.delete_dir(tmp_path)
        raise
    return summary


def _run(spark, planned, out, options, settings, sink="parquet"):
    from pyspark import StorageLevel

    split_rows = T.splits(spark, planned.plan)
    if sink == "noop":  # one pass, nothing written but the summary: what a benchmark measures
        result = T.replay(split_rows, planned)
        result.write.format("noop").mode("overwrite").save()
        fs, path = storefs.resolve(out)
        fs.create_dir(path)
        summary = build_summary(planned, {}, options)
        summary["sink"] = "noop: nothing written, counters not collected"
        return summary
    result = T.replay(split_rows, planned).persist(StorageLevel.DISK_ONLY)
    try:
        T.write_partitioned(T.message_rows(result, "matched", options.with_body), f"{out}/matched")
        T.write_partitioned(T.message_rows(result, "collision", options.with_body), f"{out}/audit/collisions")
        (T.bitmap_rows(result).orderBy("topic", "queue_id", "queue_offset")
         .write.mode("errorifexists").parquet(f"{out}/audit/bitmaps"))
        (T.corrupt_rows(result).unionByName(T.problem_rows(spark, planned.problems or []))
         .orderBy("file", "offset", "topic", "queue_id", "queue_offset")
         .write.mode("errorifexists").parquet(f"{out}/audit/corrupt"))
        counters = {(r["group"], r["topic"]): r.asDict() for r in T.stats(result).collect()}
    finally:
        result.unpersist()
    return build_summary(planned, counters, options)


def build_summary(planned, counters, options):
    """summary.json: per group and topic, every counter; failed subscriptions with RocketMQ's status."""
    rows = []
    for c in planned.subscriptions:
        key = (c.sub.group, c.sub.topic)
        row = {"group": c.sub.group, "topic": c.sub.topic, "expression_type": c.sub.expression_type,
               "expression": c.sub.expression, "status": "FAILED" if c.error else "OK"}
        found = counters.get(key, {})
        row.update({name: int(found.get(name) or 0) for name in STAT_FIELDS})
        row["filtered_out"] = row["units"] - row["skipped"] - row["broker_delivered"]
        if c.error:
            row["error"] = c.error
        rows.append(row)
    return {
        "store": options.store,
        "from": options.start_from,
        "rocketmq_version": options.dialect,
        "subscriptions": rows,
        "failed_subscriptions": [r["group"] + "/" + r["topic"] for r in rows if r["status"] != "OK"],
        "store_problems": planned.problems or [],
        "totals": {name: sum(r[name] for r in rows) for name in STAT_FIELDS},
    }


def summary_table(summary):
    """The summary as a fixed-width text table for the console."""
    heads = ["group", "topic", "units", "stage1", "broker", "client", "collisions", "bloom_fp", "errors",
             "bitmap_mism", "status"]
    keys = ["group", "topic", "units", "stage1_passed", "broker_delivered", "client_delivered", "collisions",
            "bloom_false_positives", "evaluation_errors", "bitmap_mismatches", "status"]
    rows = [[str(r[k]) for k in keys] for r in summary["subscriptions"]]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    out = [line(heads), line(["-" * w for w in widths])] + [line(r) for r in rows]
    for r in summary["subscriptions"]:
        if r.get("error"):
            out.append(f"{r['group']}/{r['topic']}: {r['error']}")
    return "\n".join(out)
