"""Run the replay and publish OUT atomically: everything is written under a temporary sibling of OUT,
which is renamed to OUT only when every part succeeded; a failed run leaves no OUT behind."""
import json
import time
import uuid

import pyarrow as pa
import pyarrow.fs as pafs

from jobs import transforms as T
from jobs.errors import UsageError
from jobs.progress import Progress
from jobs.sink import SinkSpec, commit, write_driver_part
from jobs.summary import Counters, build_summary
from jobs.window import offsets_json
from schemas import storefs
from schemas.arrow_schemas import CORRUPT_SCHEMA

TMP_MARK = ".tmp-"


def refuse_existing(out, overwrite):
    fs, path = storefs.resolve(out)
    if fs.get_file_info(path).type != pafs.FileType.NotFound and not overwrite:
        raise UsageError(f"--out {out} exists: choose a new --out or pass --overwrite")


def stale_temporaries(out):
    """Temporary siblings of OUT (OUT.tmp-*) left by runs that died, or being written by a run now."""
    fs, path = storefs.resolve(out)
    parent, _, name = path.rstrip("/").rpartition("/")
    infos = fs.get_file_info(pafs.FileSelector(parent or ".", allow_not_found=True))
    return sorted(i.path for i in infos if i.base_name.startswith(name + TMP_MARK))


def remove_temporaries(out, paths):
    fs, _ = storefs.resolve(out)
    for path in paths:
        fs.delete_dir(path)


def run_and_publish(spark, planned, out, options, sink="parquet"):
    """Run the job, write every output under OUT.tmp-* (summary.json, and offsets.json: the exclusive end
    per topic and queue of what the run covered, for --starting-offsets), then publish it as OUT; returns
    the summary.

    Progress (splits, units, MiB/s) goes to stderr while the tasks run."""
    fs, final = storefs.resolve(out)
    suffix = f"{TMP_MARK}{uuid.uuid4().hex[:8]}"
    tmp_path = final + suffix  # for pyarrow (no scheme, no host)
    tmp_uri = str(out).rstrip("/") + suffix  # for Spark's writers: keeps scheme and host (hdfs://nn:8020/...)
    started = time.time()
    try:
        summary = _run(spark, planned, tmp_uri, options, sink)
        summary["job_seconds"] = round(time.time() - started, 3)
        with fs.open_output_stream(f"{tmp_path}/summary.json") as f:
            f.write(json.dumps(summary, indent=2, ensure_ascii=False, sort_keys=True).encode("utf-8"))
        with fs.open_output_stream(f"{tmp_path}/offsets.json") as f:  # where the next run starts
            f.write(json.dumps(offsets_json(planned.ranges), indent=2, ensure_ascii=False).encode("utf-8"))
        if fs.get_file_info(final).type != pafs.FileType.NotFound:
            fs.delete_dir(final)
        fs.move(tmp_path, final)
    except BaseException:
        _settle(spark.sparkContext)
        if fs.get_file_info(tmp_path).type != pafs.FileType.NotFound:
            fs.delete_dir(tmp_path)
        raise
    return summary


def _settle(sc, timeout=60.0):
    """Wait until no task of the run is still running. When a task fails the job, Spark does not interrupt
    the stage's other running tasks: they finish, and one that wrote its parts after the temporary OUT was
    removed left an OUT.tmp-* behind (seen once in CI, a corrupt store's run on two cores)."""
    tracker = sc.statusTracker()
    deadline = time.time() + timeout
    while time.time() < deadline:
        stages = [stage for job in tracker.getJobIdsForGroup() if tracker.getJobInfo(job)
                  for stage in tracker.getJobInfo(job).stageIds]
        if not any(getattr(tracker.getStageInfo(stage), "numActiveTasks", 0) for stage in stages):
            return
        time.sleep(0.1)


def _run(spark, planned, out, options, sink="parquet"):
    plan = planned.plan
    ranges = T.commitlog_splits(plan)
    with Progress(spark, len(ranges), sum(T.split_bytes(plan, a, b) for a, b in ranges)) as progress:
        return _run_with(spark, planned, out, options, sink, progress.task_counters())


def _run_with(spark, planned, out, options, sink, progress):
    """The one Spark stage (tasks write their parts), then the commit of what successful attempts wrote."""
    spec = SinkSpec(out, "noop" if sink == "noop" else options.layout, options.with_body)
    reports = T.replay(spark.sparkContext, planned, spec, progress)
    fs, path = storefs.resolve(out)
    fs.create_dir(path, recursive=True)
    problems = planned.problems or []
    if sink == "noop":  # every decision made, nothing written: what a benchmark measures
        written = {}
    else:
        written = commit(out, reports)
        if problems:
            write_driver_part(out, "audit/corrupt", pa.Table.from_pylist(
                [{f.name: p.get(f.name) for f in CORRUPT_SCHEMA} for p in problems], schema=CORRUPT_SCHEMA))
    summary = build_summary(planned, Counters.of(reports, len(problems)), options)
    summary["outputs"] = {name: {"files": f, "rows": r, "bytes": b} for name, (f, r, b) in sorted(written.items())}
    if sink == "noop":
        summary["sink"] = "noop: every decision made, nothing written"
    return summary
