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
from __future__ import annotations

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
from typing import IO, Iterator, Mapping, MutableMapping, Optional

from jobs.errors import UsageError

RUN_ENV, LOG_DIR_ENV, LOG_FILE_ENV = "MQREPLAY_RUN", "MQREPLAY_LOG", "MQREPLAY_LOG_FILE"
SUBMIT_CLASS = b"org.apache.spark.deploy.SparkSubmit"  # in the command line of spark-submit's JVM
RUN_ID = re.compile(r"^[0-9a-f]{8}$")


def under_spark_submit(env: Optional[Mapping[str, str]] = None, parent: Optional[int] = None) -> bool:
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


def diagnostics(env: Optional[Mapping[str, str]] = None, parent: Optional[int] = None) -> IO[str]:
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
def run_console(quiet: Optional[Mapping[str, int]] = None,
                env: Optional[Mapping[str, str]] = None) -> Iterator[Optional[logging.Handler]]:
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
    quiet = quiet or {}
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


_wrapper_runs: set[str] = set()  # run ids of the venv's wrapper this process has used: each names one run only


def run_identity(env: Optional[Mapping[str, str]] = None, parent: Optional[int] = None) -> tuple[str, str]:
    """(run id, log file) of this run: the wrapper's when it chose them for this driver (spark-submit's child) and no
    earlier run of this process took them, else new ones. Nothing is exported: a kernel that calls `main` twice
    gets two runs, two files (`run_environment` hands them to a JVM this run starts)."""
    env = os.environ if env is None else env
    run, path = env.get(RUN_ENV, ""), env.get(LOG_FILE_ENV, "")
    if RUN_ID.match(run) and path and run not in _wrapper_runs and under_spark_submit(env, parent):
        _wrapper_runs.add(run)
        return run, path
    run = uuid.uuid4().hex[:8]
    return run, os.path.join(log_dir(env), f"replay-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{run}.log")


@contextlib.contextmanager
def run_environment(run: str, path: str, env: Optional[MutableMapping[str, str]] = None) -> Iterator[None]:
    """os.environ as the run needs it while it runs, and as it was once it ends: MQREPLAY_RUN and MQREPLAY_LOG_FILE
    for a JVM the run starts (its log4j2 appender writes the run's file), and whatever the libraries the run calls
    set for themselves (PySpark's Connect builder, pyiceberg's defaults) put back, so that a kernel that called
    `main` goes on with its own environment."""
    env = os.environ if env is None else env
    saved = dict(env)
    env[RUN_ENV], env[LOG_FILE_ENV] = run, path
    try:
        yield
    finally:
        for key in [k for k in env if k not in saved]:
            del env[key]
        for key, value in saved.items():
            if env.get(key) != value:
                env[key] = value


def log_dir(env: Mapping[str, str]) -> str:
    return env.get(LOG_DIR_ENV) or os.path.join(tempfile.gettempdir(), f"mqreplay-{getpass.getuser()}")


def private_folder(path: str, default: bool = False) -> None:
    """Make `path` (the log folder) this user's only (0700) when missing; UsageError when another user owns it (on a
    shared /tmp another user could make the default folder first and read every run's log). The default folder is
    made private again when an earlier version left it open; one named by MQREPLAY_LOG keeps the mode its owner
    gave it."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        found = os.stat(path)
    except OSError as exc:
        raise UsageError(f"the log folder {path} cannot be made ({exc.strerror}): set {LOG_DIR_ENV} to a folder "
                         "of your own") from None
    if not stat.S_ISDIR(found.st_mode):
        raise UsageError(f"the log folder {path} is not a folder: set {LOG_DIR_ENV} to a folder of your own")
    if found.st_uid != os.getuid():
        raise UsageError(f"the log folder {path} belongs to another user (uid {found.st_uid}): it could read this "
                         f"run's log; remove it, or set {LOG_DIR_ENV} to a folder of your own")
    if default and found.st_mode & 0o077:
        os.chmod(path, 0o700)


def open_log(run: str, path: str, logger: str = "mqreplay", env: Optional[Mapping[str, str]] = None,
             ) -> tuple[logging.FileHandler, logging.Logger, int]:
    """This run's log file for every Python logger (the root's level, INFO) and the job's own at DEBUG (the
    stacks the console leaves out), each line with the run id; the Spark lines come from the JVM's appender
    into the same file (both append). Returns what `close_log` takes to put the loggers back."""
    folder = os.path.dirname(path) or "."
    private_folder(folder, default=not (os.environ if env is None else env).get(LOG_DIR_ENV))
    handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter(f"%(asctime)s run={run} %(levelname)s %(name)s: %(message)s",
                                           "%y/%m/%d %H:%M:%S"))
    handler.setLevel(logging.DEBUG)
    job_logger = logging.getLogger(logger)
    opened = (handler, job_logger, job_logger.level)
    logging.getLogger().addHandler(handler)
    job_logger.setLevel(logging.DEBUG)
    return opened


def close_log(opened: tuple[logging.Handler, logging.Logger, int]) -> None:
    handler, job_logger, level = opened
    logging.getLogger().removeHandler(handler)
    job_logger.setLevel(level)
    handler.close()
