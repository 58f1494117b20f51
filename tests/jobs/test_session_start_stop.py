"""The run's session (jobs/runtime/session.py): made with the job's settings and its Python daemon started meanwhile
(warm_workers), started while the driver plans (SessionStart), and stopped (stop_session): the accumulator server
shut down off the main thread, and still shut down, with every update counted."""
import os
import subprocess
import sys
import textwrap

import pytest

from jobs.runtime import session

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent("""
    import threading
    from pyspark.core.context import SparkContext
    from jobs.runtime.session import stop_session

    from jobs.runtime.session import spark_session

    spark = spark_session({"spark": {"spark.ui.enabled": "false"}}, "local[2]")
    sc = spark.sparkContext
    print("conf", sc.getConf().get("spark.app.name"), sc.getConf().get("spark.ui.enabled"),
          sc.getConf().get("spark.python.daemon.module"))
    for thread in threading.enumerate():
        if thread.name == "mqreplay-warm-workers":
            thread.join(120)
    tracker = sc.statusTracker()
    print("warmed", [tracker.getJobInfo(job).status for job in tracker.getJobIdsForGroup()])
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


def test_a_local_session_has_the_settings_and_warms_the_jobs_daemon_and_stops_its_accumulator_server():
    env = dict(os.environ, PYTHONPATH=ROOT, PYSPARK_PYTHON=sys.executable)
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "conf mqreplay false jobs.runtime.worker_daemon" in lines
    assert "warmed ['SUCCEEDED']" in lines  # one job of one task that does nothing, done before the stage
    assert "stopped True True" in lines
    assert "server True -1" in lines  # shut down and its socket closed, not left serving
    assert "counted 10" in lines  # 1 + 2 + 3 + 4


def test_a_session_started_while_planning_is_the_one_asked_for_with_its_daemon_from_a_zygote(monkeypatch):
    monkeypatch.setattr(session, "spark_session",
                        lambda settings, master=None, zygote=False: ("session", settings, master, zygote))
    assert session.SessionStart({"spark": {}}, "local[2]").session() == ("session", {"spark": {}}, "local[2]", True)


def test_a_session_that_failed_to_start_raises_its_error_when_asked_for(monkeypatch):
    def no_java(settings, master=None, zygote=False):
        raise RuntimeError("JAVA_HOME is not set")

    monkeypatch.setattr(session, "spark_session", no_java)
    started = session.SessionStart({}, None)  # nothing raised here: the driver is planning
    with pytest.raises(RuntimeError, match="JAVA_HOME is not set"):
        started.session()
