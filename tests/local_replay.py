"""The whole replay in one process, without Spark: the job's own stage code run by the in-process mapper (the
tasks one after another), written by the job's own writer into a temporary directory and committed as the
driver commits them; the reference the Spark job is tested against."""
import shutil
import tempfile

import pyarrow as pa
import pyarrow.dataset as ds

from jobs.output.layouts import WIDE
from jobs.output.writers import SinkSpec, commit
from jobs.report.summary import Counters
from jobs.task import stage as T
from schemas.arrow_schemas import STAT_FIELDS, TOPIC_STAT_FIELDS

OUTPUTS = {"matched": "matched", "collision": "audit/collisions", "bitmap": "audit/bitmaps",
           "corrupt": "audit/corrupt", "bodies": "audit/bodies", "message": "messages",
           "cq_audit": "audit/consume_queue"}


def replay_local(planned, layout=WIDE):
    """{kind: pyarrow Table} of a planned job. The wide layout by default: matched rows carry every
    message column, as the tests read them."""
    out = tempfile.mkdtemp(prefix="mqreplay-local-")
    try:
        return _replay_into(planned, layout, out)
    finally:
        shutil.rmtree(out, ignore_errors=True)  # the tables are read into memory first


def _replay_into(planned, layout, out):
    """The job's stage (jobs/task/stage.py `replay`) with the in-process mapper, then the commit the driver makes."""
    plans = [planned.plan]
    ranges = T.broker_splits(T.in_process, plans)
    reports = T.replay(T.in_process, plans, SinkSpec(out, layout, planned.plan.with_body), ranges)
    commit(out, reports)
    result = {}
    for name, output in OUTPUTS.items():
        try:
            result[name] = ds.dataset(f"{out}/{output}", format="parquet", partitioning="hive").to_table()
        except (FileNotFoundError, pa.ArrowInvalid):
            result[name] = pa.table({})
    counters = Counters.of(reports)
    planned.ranges = tuple(planned.ranges) + counters.rebuilt  # as the job does: known once the tasks walked them
    result["stats"] = _counter_table(["group", "topic"], STAT_FIELDS, counters.groups)
    result["topic_stats"] = _counter_table(["topic"], TOPIC_STAT_FIELDS, counters.topics)
    result["example"] = pa.Table.from_pylist([{"group": g, "topic": t, "reason": r}
                                              for (g, t), r in counters.examples.items()])
    return result


def _counter_table(keys, fields, counters):
    rows = [{**dict(zip(keys, key if isinstance(key, tuple) else (key,))), **{f: v.get(f, 0) for f in fields}}
            for key, v in counters.items()]
    return pa.Table.from_pylist(rows) if rows else pa.table({k: pa.array([], pa.string()) for k in keys})


def kind(result, name):
    """`result[name]`, one table of replay_local's result, looked up and nothing more: an output as the sink
    wrote it (matched, collision, bitmap, corrupt, bodies, message), the counters that replay_local already
    summed over the splits (stats per group and topic, topic_stats per topic), or the first error example per
    group and topic (example). A name replay_local does not make raises KeyError naming those it does."""
    if name not in result:
        raise KeyError(f"{name!r}: replay_local's result has {sorted(result)}")
    return result[name]
