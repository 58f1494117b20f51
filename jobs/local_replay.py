"""The whole replay in one process, without Spark: the reference the Spark job is tested against, and a
quick way to replay a small store."""
import pyarrow as pa
import pyarrow.compute as pc

from jobs.plan import commitlog_splits, split_units
from jobs.split_task import process_split
from schemas.arrow_schemas import RESULT_SCHEMA, STAT_FIELDS


def replay_local(planned):
    """RESULT_SCHEMA table for a planned job: the Spark job's tasks, one after another."""
    plan = planned.plan
    parts = [process_split(plan, split_units(plan, planned.segments, a, b)) for a, b in commitlog_splits(plan)]
    return pa.concat_tables(parts) if parts else RESULT_SCHEMA.empty_table()


def kind(table, name):
    """Rows of one kind; "matched" and "collision" are fanned out per group as the outputs are."""
    if name == "stats":  # the counters list as named columns, as the summary reports them
        rows = table.filter(pc.equal(table.column("kind"), name))
        counters = pc.list_flatten(rows.column("stats")).to_numpy().reshape(-1, len(STAT_FIELDS))
        rows = rows.drop_columns(["stats"])
        for i, field in enumerate(STAT_FIELDS):
            rows = rows.append_column(field, pa.array(counters[:, i], pa.int64()))
        return rows
    if name not in ("matched", "collision"):
        return table.filter(pc.equal(table.column("kind"), name))
    messages = table.filter(pc.equal(table.column("kind"), "message"))
    lists = messages.column("delivered" if name == "matched" else "collided").combine_chunks()
    parents = pc.list_parent_indices(lists)
    out = messages.take(parents).drop_columns(["group", "delivered", "collided"])
    return out.append_column("group", pc.list_flatten(lists))
