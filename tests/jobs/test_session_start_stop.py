"""Starting the run's session while the driver plans (jobs/run/session.SessionStart), and stopping it
(stop_session): the accumulator server is shut down off the main thread, and still shut down, with every update
counted."""
import os
import subprocess
import sys
import textwrap

import pytest

from jobs.run import session

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent("""
    import threading
    from pyspark.sql import SparkSession
    from pyspark.core.context import SparkContext
    from jobs.run.session import stop_session

    spark = SparkSession.builder.master("local[2]").appName("stop-test").getOrCreate()
    sc = spark.sparkContext
    counted = sc.accumulator(0)
    sc.parallelize(range(4), 2).foreach(lambda x: counted.add(x + 1))  # the JVM now holds a connection to it
    server = sc._accumulatorServer
    stop_session(spark)
    print("stopped", SparkContext._active_spark_context is None, sc._jsc is None)
    for thread in threading.enumerate():
        if thread.name == "mqreplay-accumulator-server-shutdown":
            thread.join(30)
    print("server", server.server_shutdown, server.socket.fileno())
    print("counted", counted.value)
""")


def test_stopping_the_session_shuts_its_accumulator_server_down_after_every_update():
    env = dict(os.environ, PYTHONPATH=ROOT, PYSPARK_PYTHON=sys.executable)
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "stopped True True" in lines
    assert "server True -1" in lines  # shut down and its socket closed, not left serving
    assert "counted 10" in lines  # 1 + 2 + 3 + 4


def test_a_session_started_while_planning_is_the_one_asked_for(monkeypatch):
    monkeypatch.setattr(session, "spark_session", lambda settings, master=None: ("session", settings, master))
    assert session.SessionStart({"spark": {}}, "local[2]").session() == ("session", {"spark": {}}, "local[2]")


def test_a_session_that_failed_to_start_raises_its_error_when_asked_for(monkeypatch):
    def no_java(settings, master=None):
        raise RuntimeError("JAVA_HOME is not set")

    monkeypatch.setattr(session, "spark_session", no_java)
    started = session.SessionStart({}, None)  # nothing raised here: the driver is planning
    with pytest.raises(RuntimeError, match="JAVA_HOME is not set"):
        started.session()
