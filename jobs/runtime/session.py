"""The run's Spark session: classic (spark-submit, or a plain `python jobs/replay.py` with a local master) or a
Spark Connect client (`--remote sc://HOST:PORT`). The stage runs as an RDD on a classic session and as DataFrame
operations over Connect (jobs/task/stage.py); what only a classic session has (accumulators for progress, the status
tracker) is asked for through `is_connect`. How a run starts and stops its session cheaply: `SessionStart`,
`warm_workers`, `stop_session`."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any, Mapping, MutableMapping, Optional

from jobs.runtime import daemon_zygote

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger("mqreplay")

# PySpark's daemon, with the job's imports done before it forks the workers (jobs/runtime/worker_daemon.py)
DAEMON_CONF = "spark.python.daemon.module"
DAEMON_MODULE = "jobs.runtime.worker_daemon"


# set by the venv's spark-submit (tools/configure_spark_env.sh) when this run's JVM writes the class-data archive
ARCHIVE_MADE = "MQREPLAY_CDS_MADE"


def archive_of_a_whole_run(env: Optional[Mapping[str, str]] = None) -> None:
    """Mark the class-data archive this run's JVM writes at exit as one of a run that got through Spark's stage:
    the wrapper keeps only such an archive. One of a run that stopped sooner (a usage error, a refused OUT) holds
    few of the classes a run loads, and every later run loaded the rest without it: 1.2 s more job time per run
    on the bench store's first tenth (2.9-3.0 s with a whole run's archive, 4.1-4.3 s with such a one)."""
    made = (os.environ if env is None else env).get(ARCHIVE_MADE)
    if made:
        try:
            open(f"{made}.stage", "w").close()
        except OSError:  # a build/jvm this run cannot write: the archive is not kept, the run is not affected
            pass


def spark_session(settings: Mapping[str, Any], master: Optional[str] = None, remote: Optional[str] = None,
                  zygote: bool = False) -> SparkSession:
    """A session with conf/replay.json's "spark" settings under those spark-submit already set. Over Connect the
    server owns its static settings: only the runtime ones (spark.sql.*) are applied, on the session. zygote: the
    job's daemon forked from a process preloaded from now on (jobs/runtime/daemon_zygote.py), when it is the job's
    daemon on a local master; only for a driver that exits with its run (spark-submit's), which the zygote does."""
    from pyspark.sql import SparkSession

    if remote:  # a session of the run's own on the server (create): a kernel's Connect session is never touched
        spark = SparkSession.builder.remote(remote).appName("mqreplay").create()
        for key, value in settings.get("spark", {}).items():
            if key.startswith("spark.sql."):
                spark.conf.set(key, value)
        return spark
    if classic_session_exists():  # a kernel's: used as it is, its runtime conf untouched (the builder's options
        return SparkSession.builder.getOrCreate()  # would be set on it and stay)
    options: dict[str, Any] = {"spark.app.name": "mqreplay"}  # conf/replay.json's values: strings, numbers
    if not master and "PYSPARK_GATEWAY_PORT" not in os.environ:  # plain `python jobs/replay.py`
        master = "local[*]"
    workers_run_this_python(master, settings.get("spark", {}))
    if master:
        options["spark.master"] = master
    given = _submitted_conf()
    for key, value in settings.get("spark", {}).items():
        if key not in given:  # spark-submit's --conf and --properties-file win over conf/replay.json
            options[key] = value
    job_daemon = DAEMON_CONF not in given and _workers_import_daemon(master or _submitted_master(given))
    if job_daemon:
        options[DAEMON_CONF] = DAEMON_MODULE
        preloaded = daemon_zygote.start(_workers_python()) if zygote else None
        if preloaded is not None:
            options.update({f"spark.executorEnv.{key}": value for key, value in preloaded.env.items()})
        from pyspark import SparkConf, SparkContext

        warm_workers(SparkContext.getOrCreate(SparkConf().setAll(options.items())))  # type: ignore[arg-type]
    return SparkSession.builder.config(map=options).getOrCreate()  # on the context made above, if one was


def warm_workers(sc: SparkContext) -> None:
    """Start the Python daemon while the session is made: a task that does nothing, run in a daemon thread as soon
    as the SparkContext exists, makes the JVM start the job's daemon (jobs/runtime/worker_daemon.py, forked preloaded
    from the driver's zygote where there is one) and fork a worker, while the SparkSession is built (0.7-0.9 s more
    on this machine); the stage's first tasks found neither before. A failure here is left to the stage to meet
    and say."""
    threading.Thread(target=_run_nothing, args=(sc,), name="mqreplay-warm-workers", daemon=True).start()


def _run_nothing(sc):
    try:
        sc.parallelize([0], 1).foreach(_nothing)
    except Exception:  # noqa: BLE001 - the stage's own tasks fail the same way, and say why
        log.debug("warming the Python workers failed", exc_info=True)


def _nothing(_):
    return None


class SessionStart:
    """A classic session started in a thread while the driver plans, the run's own JVM being spark-submit's: a
    SparkContext takes 1.7-1.9 s to start on this machine, and planning a time window of the bench store 0.9-1.1 s
    (the whole store 0.15 s), one after the other before; on two cores they overlap (the planner is this process's
    Python, the context mostly the JVM's threads). `session()` waits for it and raises what starting it raised.
    Only under spark-submit: a driver that stops at a planning error exits, and the JVM with it; a session started
    in a process that lives on (a notebook's kernel, the tests) would outlive the run unasked."""

    _spark: Optional[SparkSession]
    _error: Optional[BaseException]

    def __init__(self, settings: Mapping[str, Any], master: Optional[str] = None) -> None:
        self._spark = self._error = None
        self._thread = threading.Thread(target=self._start, args=(settings, master), name="mqreplay-session-start",
                                        daemon=True)
        self._thread.start()

    def _start(self, settings, master):
        try:
            self._spark = spark_session(settings, master, zygote=True)
        except BaseException as exc:  # noqa: BLE001 - raised again by session(), in the run's own thread
            self._error = exc

    def session(self) -> SparkSession:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._spark is not None  # started: no error raised
        return self._spark


def stop_session(spark: SparkSession) -> None:
    """Stop a session the run started. PySpark's stop ends with the shutdown of its accumulator server (the
    progress line's counters), which waits until the server's handler notices, at its next once-a-second poll:
    0.86 s of every run's end, measured, after OUT was published. The JVM has sent every update by then (a task's
    updates reach the server, acknowledged, before its job completes), so the server is shut down in a daemon
    thread instead: it finishes within the second if the process lives on, and ends with it otherwise."""
    sc = None if is_connect(spark) else spark.sparkContext
    server = getattr(sc, "_accumulatorServer", None)
    if server is not None:
        assert sc is not None  # a server is a classic context's
        sc._accumulatorServer = None  # type: ignore[assignment]  # SparkContext.stop then skips it
        threading.Thread(target=server.shutdown, name="mqreplay-accumulator-server-shutdown", daemon=True).start()
    spark.stop()
    daemon_zygote.stop()


def workers_run_this_python(master: Optional[str], spark_settings: Mapping[str, Any],
                            env: Optional[MutableMapping[str, str]] = None) -> None:
    """A plain `python jobs/replay.py` on a local master: its Python workers run this interpreter (the venv's,
    which has the project's dependencies), not PySpark's default `python3` from PATH (which may lack pyarrow),
    unless PYSPARK_PYTHON or spark.pyspark.python names one. Under spark-submit, or on a cluster's master, the
    workers' interpreter is the submitter's to say."""
    env = os.environ if env is None else env
    if "PYSPARK_GATEWAY_PORT" in env or not (master or "").startswith("local") or env.get("PYSPARK_PYTHON") \
            or "spark.pyspark.python" in spark_settings:
        return
    env["PYSPARK_PYTHON"] = sys.executable


def _workers_import_daemon(master):
    """Whether the Python workers of `master` can import jobs.runtime.worker_daemon: only on a local master (the
    workers on this machine, their interpreter known) and when that interpreter finds it without the path
    jobs/replay.py adds for itself (an installed project, as the venv's editable install; a --py-files zip is
    on a task's path, not the daemon's). A daemon that cannot start fails every Python task, so where this is
    not known (a cluster), PySpark's own daemon stays; spark-submit's --conf can set it there."""
    if not (master or "").startswith("local"):
        return False
    check = f"import importlib.util as u, sys; sys.exit(u.find_spec('{DAEMON_MODULE}') is None)"
    try:
        found = subprocess.run(
            [_workers_python(), "-c", check],
            cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return found.returncode == 0


def _workers_python():
    return os.environ.get("PYSPARK_PYTHON") or "python3"  # SparkContext.pythonExec's choice, found on PATH


def _submitted_master(given):
    """The master spark-submit set (None outside spark-submit)."""
    if "spark.master" not in given:
        return None
    from pyspark import SparkConf

    return SparkConf().get("spark.master")


def _submitted_conf():
    """Keys spark-submit already set (its JVM holds them as system properties); empty outside spark-submit."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return set()
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return {key for key, _ in SparkConf().getAll()}


def classic_session_exists() -> bool:
    """Whether a classic SparkContext already runs in this process (a notebook's, Databricks'): the job runs in its
    session and leaves it running. The context, not the thread's active session: a kernel's other thread has
    none of its own, and the session it would get is the kernel's all the same."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def is_connect(spark: object) -> bool:
    """Whether `spark` is a Spark Connect client session (no SparkContext, no RDDs, no accumulators)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
