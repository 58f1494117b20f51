"""The job on the Spark 3.5 line (EMR 7.x, Databricks LTS 14.3-16.4): `.venv-spark35/bin/spark-submit jobs/replay.py`
on the fixture stores gives RocketMQ's answer exactly as on Spark 4 (store_a plain, store_dledger, store_a into
Iceberg tables over two nights), and the data source, whose API 3.5 lacks, refuses in one line.

Run by `make test-spark35` with .venv-spark35 (PySpark 3.5.x); skipped by the main suite's 4.x venv, where the
same replays are tests/jobs/test_replay_spark.py, test_dledger_spark.py and test_iceberg.py."""
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pyspark
import pytest

from tests.jobs.conftest import assert_rows_equal, expected_rows, submit_job

ROOT = Path(__file__).resolve().parents[2]
UNTIL = 1795237035452  # store_a's messages were stored from ...034787 to ...035765: two nights of it
pytestmark = [pytest.mark.spark, pytest.mark.skipif(
    not pyspark.__version__.startswith("3.5."),
    reason=f"Spark 3.5's replays (make test-spark35); this is PySpark {pyspark.__version__}")]


def _rows(path):
    return ds.dataset(path, format="parquet", partitioning="hive").to_table().to_pylist()


def _answers(fixture):
    """RocketMQ's answer of a fixture store: (delivered rows, rows the client's exact tag check drops)."""
    final = expected_rows(fixture / "expected.json")
    raw = expected_rows(fixture / "expected_broker_raw.json")
    return final, {k: v for k, v in raw.items() if k not in final}


def test_the_wrapper_runs_spark_3_5():
    submit = Path(sys.executable).parent / "spark-submit"
    proc = subprocess.run([str(submit), "--version"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"version {pyspark.__version__}" in proc.stdout + proc.stderr


@pytest.mark.parametrize("name", ["store_a", "store_dledger"])
def test_a_replay_on_3_5_equals_rocketmqs_answer(name, request, tmp_path):
    fixture = request.getfixturevalue(name)
    out = tmp_path / "out"
    proc = submit_job("--store", fixture / "store", "--subscriptions", fixture / "registrations.json", "--out", out)
    assert proc.returncode == 0, proc.console[-3000:]
    delivered, collisions = _answers(fixture)
    assert_rows_equal(_rows(out / "matched"), delivered)
    got_collisions = _rows(out / "audit" / "collisions") if (out / "audit" / "collisions").exists() else []
    assert_rows_equal(got_collisions, collisions)
    assert (out / "_SUCCESS").exists() and (out / "summary.json").exists()


def test_two_nights_into_iceberg_on_3_5_hold_rocketmqs_rows_once_and_a_rerun_exits_2(store_a, tmp_path):
    from jobs.sinks.iceberg.tables import IcebergTarget

    target = IcebergTarget("nightly", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=str(tmp_path / "wh"))
    common = ["--store", store_a / "store", "--subscriptions", store_a / "registrations.json", "--sink", "iceberg",
              "--catalog-uri", target.uri, "--warehouse", target.warehouse, "--namespace", "nightly"]
    first = submit_job(*common, "--out", tmp_path / "n1", "--until", UNTIL)
    second = submit_job(*common, "--out", tmp_path / "n2", "--starting-offsets", tmp_path / "n1" / "offsets.json")
    again = submit_job(*common, "--out", tmp_path / "n3", "--starting-offsets", tmp_path / "n1" / "offsets.json")
    assert (first.returncode, second.returncode) == (0, 0), first.console[-2000:] + second.console[-2000:]
    assert again.returncode == 2 and "nightly.matched already holds these offsets" in again.console
    catalog = target.catalog()
    delivered, collisions = _answers(store_a)
    for table, want in (("matched", delivered), ("collisions", collisions)):
        rows = catalog.load_table(f"nightly.{table}").scan().to_arrow().to_pylist()
        assert max(Counter((r["group"], r["topic"], r["queue_id"], r["queue_offset"]) for r in rows).values()) == 1
        assert_rows_equal(rows, want)
    messages = catalog.load_table("nightly.messages").scan(selected_fields=("topic", "queue_id", "queue_offset"))
    got = Counter((m["topic"], m["queue_id"], m["queue_offset"]) for m in messages.to_arrow().to_pylist())
    assert set(got) == {k[1:] for k in {**delivered, **collisions}} and max(got.values()) == 1


def test_the_data_source_refuses_in_one_line_naming_the_version_and_the_job(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "from jobs.datasource import register"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: the rocketmq data source (jobs.datasource) needs Spark 4.0 or newer (the Python Data Source API); "
        f"this is PySpark {pyspark.__version__}: run the job (spark-submit jobs/replay.py) and read its output, "
        "or use Spark 4.0+"]
