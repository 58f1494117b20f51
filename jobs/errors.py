"""The job's own failure kinds under the project's one root (schemas/errors.py), and the one place an error
becomes an exit code and a one-line message (`outcome`), for the job and explain alike.

A task's error crosses Spark's boundary as data: the task raises TaskFailed, whose message is one line
`mqreplay-task-error {"exit_code": ..., "kind": ..., "message": ...}`, and the driver reads that record back
(`carried`); Spark itself carries only text from a Python worker to the driver."""
from __future__ import annotations

import json
import signal
import sys
from typing import NoReturn

from schemas.errors import EXIT_FAILED, EXIT_INPUT, EXIT_USAGE, InputError, ReplayError

TASK_ERROR = "mqreplay-task-error "


class UsageError(ReplayError, ValueError):
    """Bad arguments: an unknown expression type, a name that matches nothing, an existing OUT. Found before
    Spark starts; the job exits 2."""

    exit_code = EXIT_USAGE


class ExplainError(UsageError):
    """A question the store and the subscriptions cannot answer: no such unit or message id, no
    subscription of the group to the topic, an expression that does not parse (exit 2)."""


class SparkVersionError(UsageError, ImportError):
    """The installed Spark lacks an API a part of the project is built on (the Python Data Source API came with
    Spark 4.0): exit 2."""


def refuse_spark_version(what: str, needs: str, api: str, alternative: str) -> NoReturn:
    """End an import this Spark cannot serve with one line and no stack: `what` needs Spark `needs` or newer
    (for its `api`); on this one, `alternative`. A script (spark-submit, python FILE) and IPython (whose kernel
    survives it) get the line and exit 2; an interactive Python (the pyspark shell), which an exit would close,
    gets it as a SparkVersionError."""
    import pyspark

    message = (f"{what} needs Spark {needs} or newer ({api}); this is PySpark {pyspark.__version__}: {alternative}, "
               f"or use Spark {needs}+")
    if hasattr(sys, "ps1") and "IPython" not in sys.modules:
        raise SparkVersionError(message)
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


class OffsetOutOfRange(InputError):
    """An offset above a queue's latest: the input names data the store never held (exit 1)."""


class OutputError(ReplayError):
    """OUT, the warehouse or the catalog cannot be written or is not what it must be (read-only, no permission,
    full, a catalog file that is no database): the output's fault, never the input's (exit 2)."""

    exit_code = EXIT_USAGE


def output_error(where: str, exc: BaseException, advice: str = "") -> OutputError:
    """The OutputError of an OSError met writing an output: `where` names it (`--out OUT`)."""
    reason = str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        reason = exc.strerror + (f": {exc.filename}" if exc.filename else "")
    return OutputError(f"{where}: cannot be written ({reason})" + (f": {advice}" if advice else ""))


class PublishFailed(ReplayError):
    """Publishing a complete output failed (exit 5); the message says where the complete output is."""


class RunStopped(ReplayError):
    """The run was told to stop by a signal; exit code 128 + the signal's number, as a shell reports it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"stopped by {signal.Signals(signum).name}: the run stopped, nothing was published")


class TaskFailed(ReplayError):
    """A project error raised in a Spark task, carried to the driver as a JSON record in its message."""

    def __init__(self, exit_code: int, kind: str, message: str) -> None:
        self.exit_code, self.kind, self.message = exit_code, kind, message
        super().__init__(message)

    @classmethod
    def of(cls, exc: ReplayError) -> TaskFailed:
        """The record of a ReplayError, as the exception a task raises in its place."""
        record = {"exit_code": exc.exit_code, "kind": type(exc).__name__, "message": str(exc)}
        return cls(exc.exit_code, type(exc).__name__, TASK_ERROR + json.dumps(record, ensure_ascii=False))

    def __reduce__(self) -> tuple[type[TaskFailed], tuple[int, str, str]]:
        return (type(self), (self.exit_code, self.kind, self.message))


def carried(exc: BaseException) -> TaskFailed | None:
    """The TaskFailed record a failed Spark job carries in its text (the first one), or None."""
    for line in str(exc).splitlines():
        at = line.find(TASK_ERROR)
        if at >= 0:
            try:
                record = json.JSONDecoder().raw_decode(line, at + len(TASK_ERROR))[0]
            except ValueError:
                continue
            return TaskFailed(int(record["exit_code"]), record["kind"], record["message"])
    return None


def outcome(exc: BaseException) -> tuple[int, str]:
    """(exit code, one-line message) of an error that ends a run or an explain: a project error says its own;
    an OSError is input that cannot be read (exit 1); anything else is a failure of the job (exit 5)."""
    if isinstance(exc, ReplayError):
        return exc.exit_code, str(exc)
    if isinstance(exc, OSError):
        return EXIT_INPUT, str(exc)
    return EXIT_FAILED, f"{type(exc).__name__}: {exc}"
