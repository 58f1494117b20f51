"""The corruption policy (--on-corrupt): what damaged data does to a run, and what a task does with damaged units
under it (fail the run, or audit them and go on). Below every package of the job that meets damaged data: the
plan, the tasks and the ledgers' events."""
from enum import Enum
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from schemas.arrow_schemas import CORRUPT_SCHEMA
from schemas.errors import CorruptStoreError


class CorruptPolicy(Enum):
    """What damaged data does to a run (--on-corrupt, on_corrupt, onCorrupt), made from its name once, in
    `job_options`; the code below asks `skips`, never the name (the value: messages and JSON)."""

    FAIL = "fail"  # the first problem found stops the run
    SKIP = "skip"  # damaged data is audited and left out

    @property
    def skips(self) -> bool:
        return self is CorruptPolicy.SKIP


# plan: a jobs.plan.replay_plan.ReplayPlan, out: a jobs.task.split_task.Pieces; of layers above this one
# (setup.cfg [importlinter]), so typed Any
def report_damage(plan: Any, out: Any, units: pa.Table, rows: npt.ArrayLike, reason: str, path: str,
                  offsets: npt.ArrayLike | None = None, deleted: bool = False, kept: bool = False) -> None:
    """Skip (audit) or fail on the units at `rows`; `offsets`: positions in `path` (default commit-log).
    deleted: retention removed their records (audited whatever --on-corrupt, as the broker's
    OFFSET_TOO_SMALL); kept: audited, but the units are still decided (an unreadable ext unit)."""
    rows = np.asarray(rows)
    if not len(rows):
        return
    sel = units.take(pa.array(rows))
    where = sel.column("commitlog_offset") if offsets is None else pa.array(np.asarray(offsets)[rows])
    if not plan.skips_damage and not deleted:
        first = sel.slice(0, 1).to_pylist()[0]
        raise CorruptStoreError(path, where[0].as_py(), reason, first["topic"], first["queue_id"])
    if not kept:
        out.skipped.append(sel.select(["topic", "queue_id", "queue_offset"]))
    n = len(rows)
    out.add("corrupt", pa.table({
        "file": pa.repeat(pa.scalar(path), n), "offset": where, "topic": sel.column("topic"),
        "queue_id": sel.column("queue_id"), "queue_offset": sel.column("queue_offset"),
        "commitlog_offset": sel.column("commitlog_offset"), "reason": pa.repeat(pa.scalar(reason), n)},
        schema=CORRUPT_SCHEMA))
