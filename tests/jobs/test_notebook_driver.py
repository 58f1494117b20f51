"""The job run from a notebook or Databricks (a kernel with PYSPARK_GATEWAY_PORT whose parent is not
spark-submit's JVM, and a session already running): no parent watcher that would end the kernel, no stderr
redirected through /proc/PPID, and the session it did not create left running."""
import logging
import subprocess
import sys
import time

import pytest

from jobs import replay
from jobs.runtime import console


def test_only_spark_submits_child_counts_as_under_spark_submit():
    assert not console.under_spark_submit({})
    kernel = {"PYSPARK_GATEWAY_PORT": "41234"}  # a notebook's: its parent is the notebook server
    assert not console.under_spark_submit(kernel)
    assert console.diagnostics(kernel) is sys.stderr
    jvm = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "org.apache.spark.deploy.SparkSubmit"])
    try:
        deadline = time.time() + 10
        while not console.under_spark_submit(kernel, parent=jvm.pid) and time.time() < deadline:
            time.sleep(0.05)  # until the child has exec'd its command line
        assert console.under_spark_submit(kernel, parent=jvm.pid)
    finally:
        jvm.kill()
        jvm.wait()


def test_a_run_leaves_the_kernels_stderr_logging_handlers_and_levels_as_they_were(monkeypatch, tmp_path):
    """A kernel that calls main goes on with its own console: nothing the run set up for itself stays."""
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # a kernel whose root logger has no handler (pytest's left aside)
    monkeypatch.setenv("MQREPLAY_LOG", str(tmp_path))
    stderr, py4j = sys.stderr, logging.getLogger("py4j").level
    code = replay.main(["--store", str(tmp_path / "none"), "--subscriptions", str(tmp_path / "none.json"),
                        "--out", str(tmp_path / "out"), "--since", "tomorrow"])
    assert code == 2  # refused before anything ran; the console was the run's all the same
    assert root.handlers == [] and sys.stderr is stderr and logging.getLogger("py4j").level == py4j


@pytest.mark.spark
def test_a_run_in_a_running_session_leaves_it_running(spark, store_a, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MQREPLAY_LOG", str(tmp_path / "logs"))
    code = replay.main(["--store", str(store_a / "store"), "--subscriptions", str(store_a / "registrations.json"),
                        "--out", str(tmp_path / "out"), "--until", "1795237035100", "--progress", "off"])
    assert code == 0, capsys.readouterr().err
    assert spark.range(3).count() == 3  # the notebook's session still answers
