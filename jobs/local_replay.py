"""The whole replay in one process, without Spark: the reference the Spark job is tested against, and a
quick way to replay a small store."""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.plan import queue_units
from jobs.split_task import process_split
from schemas.arrow_schemas import RESULT_SCHEMA


def replay_local(planned):
    """RESULT_SCHEMA table for a planned job."""
    plan = planned.plan
    units = [queue_units(plan, q) for q in planned.layout.queues]
    if not units:
        return RESULT_SCHEMA.empty_table()
    table = pa.Table.from_batches(units)
    splits = table.column("split").to_numpy()
    parts = [process_split(plan, table.filter(pa.array(splits == s))) for s in np.unique(splits)]
    return pa.concat_tables(parts) if parts else RESULT_SCHEMA.empty_table()


def kind(table, name):
    """Rows of one kind; "matched" and "collision" are fanned out per group as the outputs are."""
    if name not in ("matched", "collision"):
        return table.filter(pc.equal(table.column("kind"), name))
    messages = table.filter(pc.equal(table.column("kind"), "message"))
    lists = messages.column("delivered" if name == "matched" else "collided").combine_chunks()
    parents = pc.list_parent_indices(lists)
    out = messages.take(parents).drop_columns(["group", "delivered", "collided"])
    return out.append_column("group", pc.list_flatten(lists))
