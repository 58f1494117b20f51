"""The mapper of a run (jobs/task/stage.py map_tasks) on a classic session: one Spark task per item, each item's
rows back in item order, and no SQL query planned for it (a DataFrame's first plan on a cold JVM cost every run
about a second). Over Spark Connect the same tasks run as DataFrame operations: tests/jobs/test_connect.py."""
import pytest
from pyspark import TaskContext

from jobs.task.stage import map_tasks

pytestmark = pytest.mark.spark


def test_a_classic_session_runs_one_task_per_item_in_item_order_and_plans_no_query(spark):
    executions = spark._jsparkSession.sharedState().statusStore()
    before = executions.executionsCount()
    rows = map_tasks(spark, ["a", "bb", "ccc", "d"], lambda item: [item.upper(), TaskContext.get().partitionId()])
    assert rows == [["A", 0], ["BB", 1], ["CCC", 2], ["D", 3]]
    assert executions.executionsCount() == before


def test_no_items_run_no_task(spark):
    assert map_tasks(spark, [], lambda item: [item]) == []
