"""The run's own Spark jobs: every job the run starts carries its tag, and what a failed or stopped run waits for,
cancels or interrupts is that tag's jobs only. The session may be a notebook's, whose other threads run the
user's own jobs beside the run (Databricks, Livy, the pyspark shell): those are never waited on or cancelled.

A classic session groups jobs by the job group of the thread that starts them (`SparkContext.setJobGroup`, a
thread-local property, with interruptOnCancel so a cancelled task's thread is interrupted); a Spark Connect
session by the operation tags of the thread (`SparkSession.addTag`, `interruptTag`). Whatever the calling thread
had (a notebook cell's own job group) is put back when the run ends."""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Literal, Optional

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("mqreplay")

GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


def tag_of(run: str) -> str:
    return f"mqreplay-{run}"


class RunJobs:
    """Tags the calling thread's Spark jobs with the run's tag while the run uses the session (a context
    manager); `cancel` and `settle` act on the run's own jobs."""

    _saved: Optional[dict[str, Optional[str]]]  # the thread's job group properties (classic), once entered

    def __init__(self, spark: SparkSession, run: str) -> None:
        self.spark, self.tag = spark, tag_of(run)
        self.connect = type(spark).__module__.startswith("pyspark.sql.connect")
        self._saved = None

    def __enter__(self) -> RunJobs:
        if self.connect:
            self.spark.addTag(self.tag)
            return self
        sc = self.spark.sparkContext
        self._saved = {key: sc.getLocalProperty(key) for key in GROUP_PROPERTIES}
        sc.setJobGroup(self.tag, f"mqreplay run {self.tag[len('mqreplay-'):]}", interruptOnCancel=True)
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        try:
            if self.connect:
                self.spark.removeTag(self.tag)
            else:
                sc = self.spark.sparkContext
                assert self._saved is not None  # entered: __enter__ saved them
                for key, value in self._saved.items():
                    sc.setLocalProperty(key, value)  # type: ignore[arg-type]  # None removes it (stubs: str)
        except Exception:  # noqa: BLE001 - a session already stopped (the run's own) or a JVM gone: nothing to put back
            log.debug("putting back the thread's job group failed", exc_info=True)
        return False

    def cancel(self) -> None:
        """Cancel (interrupt, over Connect) the run's jobs still running; the session's other jobs run on."""
        try:
            if self.connect:
                self.spark.interruptTag(self.tag)
            else:
                self.spark.sparkContext.cancelJobGroup(self.tag)
        except Exception:  # noqa: BLE001 - the JVM or the server is gone: nothing of the run runs there any more
            log.debug("cancelling the run's jobs failed", exc_info=True)

    def settle(self, timeout: float = 60.0, stopped: bool = False) -> None:
        """Return once no task of the run's jobs still runs (when a task fails a job, Spark lets the stage's other
        running tasks finish, and one that wrote its parts after the temporary OUT was removed would leave files
        behind); a stopped run's jobs are cancelled first. Over Connect there is no status tracker: the run's
        operations are interrupted. Returns at once when the JVM is gone."""
        if self.connect:
            self.cancel()
            return
        if stopped:
            self.cancel()
        try:
            tracker = self.spark.sparkContext.statusTracker()
            deadline = time.time() + timeout
            while time.time() < deadline:
                if not self.active_tasks(tracker):
                    return
                time.sleep(0.1)
        except Exception:  # noqa: BLE001 - py4j's errors when the JVM has ended: nothing runs any more (and
            return  # nothing to print: this process's output went into that JVM's pipe)

    def active_tasks(self, tracker: Any) -> int:
        """Running tasks of the run's own jobs (never the session's other jobs)."""
        stages = [stage for job in tracker.getJobIdsForGroup(self.tag) if tracker.getJobInfo(job)
                  for stage in tracker.getJobInfo(job).stageIds]
        return sum(getattr(tracker.getStageInfo(stage), "numActiveTasks", 0) or 0 for stage in stages)
