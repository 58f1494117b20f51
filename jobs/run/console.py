"""Where a run's words go: results on stdout (the summary table, the output's path), diagnostics on stderr
(warnings, errors, progress), and everything, Spark's own lines at WARN included, in one log file per run
whose lines carry the run's id (the one of `OUT/_SUCCESS` and `summary.json`).

Under spark-submit the Python driver's stdout and stderr are one pipe into the JVM's stdout (Spark's
PythonRunner merges them), so `diagnostics()` writes to the JVM's own stderr instead (`/proc/PPID/fd/2`):
a terminal or a pipe is opened again as it is; a regular file is made a pipe by the venv's wrapper first
(tools/configure_spark_env.sh), so that two open descriptions never overwrite each other's lines. When
stdout and stderr are the same file (`>log 2>&1`) nothing changes.

The log file: `$MQREPLAY_LOG` is the directory (default `$TMPDIR/mqreplay-<user>`, created when missing),
each run's file `replay-<UTC time>-<run>.log`. The venv's wrapper chooses the run id and the file before
the JVM starts (its log4j2 file appender reads them from MQREPLAY_RUN and MQREPLAY_LOG_FILE); a driver
started without it (`python jobs/replay.py`) chooses them before it starts Spark, whose JVM inherits them."""
import contextlib
import getpass
import logging
import os
import re
import stat
import sys
import tempfile
import time
import uuid

RUN_ENV, LOG_DIR_ENV, LOG_FILE_ENV = "MQREPLAY_RUN", "MQREPLAY_LOG", "MQREPLAY_LOG_FILE"
SUBMIT_CLASS = b"org.apache.spark.deploy.SparkSubmit"  # in the command line of spark-submit's JVM
RUN_ID = re.compile(r"^[0-9a-f]{8}$")


def under_spark_submit(env=None, parent=None):
    """Whether this driver is spark-submit's child: PYSPARK_GATEWAY_PORT set, and the parent process is the JVM
    running SparkSubmit. A notebook's or Databricks' kernel has the gateway port too, from a JVM that is not its
    parent: there stderr is never redirected through /proc/PPID and the parent never watched."""
    env = os.environ if env is None else env
    if "PYSPARK_GATEWAY_PORT" not in env:
        return False
    try:
        with open(f"/proc/{parent or os.getppid()}/cmdline", "rb") as f:
            return SUBMIT_CLASS in f.read()
    except OSError:  # no /proc, or the parent is gone
        return False


def diagnostics(env=None, parent=None):
    """The stream for diagnostics: the spark-submit JVM's stderr when the driver runs under it and that is
    another file than its stdout; else sys.stderr."""
    env = os.environ if env is None else env
    if not under_spark_submit(env, parent):
        return sys.stderr
    fd = f"/proc/{parent or os.getppid()}/fd"
    try:
        err = os.stat(f"{fd}/2")
        out = os.stat(f"{fd}/1")
    except OSError:
        return sys.stderr
    if (err.st_dev, err.st_ino) == (out.st_dev, out.st_ino) or stat.S_ISREG(err.st_mode):
        return sys.stderr  # one file for both, or a file the wrapper did not turn into a pipe
    try:
        return open(f"{fd}/2", "w", encoding="utf-8", errors="replace", buffering=1)
    except OSError:
        return sys.stderr


@contextlib.contextmanager
def run_console(quiet=(), env=None):
    """The run's console while `main` runs: sys.stderr (and so argparse, warnings and the console handler) is
    `diagnostics()`, the root logger has a console handler at INFO (when it had none: logging.basicConfig's), the
    loggers `quiet` ({name: level}) are set to their levels. All of it as it was when the run ends: a notebook's
    kernel that called main goes on with its own stderr, handlers and levels. Yields the console handler (None
    when the root logger had one already)."""
    stream = diagnostics(env)
    saved = sys.stderr
    if stream is not saved:
        saved.flush()
        sys.stderr = stream
    root = logging.getLogger()
    handler = None
    if not root.handlers:
        handler = logging.StreamHandler()  # sys.stderr as it is now
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler.setLevel(logging.INFO)
        root.addHandler(handler)
    levels = {name: logging.getLogger(name).level for name in quiet}
    root_level = root.level
    root.setLevel(logging.INFO)
    for name, level in quiet.items():
        logging.getLogger(name).setLevel(level)
    try:
        yield handler
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        root.setLevel(root_level)
        if handler is not None:
            root.removeHandler(handler)
        if stream is not saved:
            stream.flush()
            sys.stderr = saved
            stream.close()


def run_identity(env=None):
    """(run id, log file) of this run: the wrapper's when it chose them for this driver, else new ones,
    exported so that the JVM Spark starts from this process logs into the same file."""
    env = os.environ if env is None else env
    run, path = env.get(RUN_ENV, ""), env.get(LOG_FILE_ENV, "")
    if not ("PYSPARK_GATEWAY_PORT" in env and RUN_ID.match(run) and path):
        run = uuid.uuid4().hex[:8]
        path = os.path.join(log_dir(env), f"replay-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{run}.log")
        env[RUN_ENV], env[LOG_FILE_ENV] = run, path
    return run, path


def log_dir(env):
    return env.get(LOG_DIR_ENV) or os.path.join(tempfile.gettempdir(), f"mqreplay-{getpass.getuser()}")


def open_log(run, path, logger="mqreplay"):
    """This run's log file for every Python logger (the root's level, INFO) and the job's own at DEBUG (the
    stacks the console leaves out), each line with the run id; the Spark lines come from the JVM's appender
    into the same file (both append)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter(f"%(asctime)s run={run} %(levelname)s %(name)s: %(message)s",
                                           "%y/%m/%d %H:%M:%S"))
    handler.setLevel(logging.DEBUG)
    logging.getLogger().addHandler(handler)
    logging.getLogger(logger).setLevel(logging.DEBUG)
    return handler


def close_log(handler):
    logging.getLogger().removeHandler(handler)
    handler.close()
