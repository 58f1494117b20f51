"""PYTHON filters that fault the write path on purpose (importable on executors as tests.jobs.fault_filters):
each keeps every message; in the first attempt of partition 1's task, `crash_once` kills its Python
worker on its second call. It leaves a marker file in $FAULT_MARKS (when set) of what happened, so a test
knows the fault took place."""
import os


def _attempt_of_partition_1():
    from pyspark import TaskContext

    tc = TaskContext.get()
    return tc.attemptNumber() if tc is not None and tc.partitionId() == 1 else None


def _mark(name):
    if os.environ.get("FAULT_MARKS"):
        open(os.path.join(os.environ["FAULT_MARKS"], name), "w").close()


_calls = {"n": 0}


def crash_once(message, context):
    attempt = _attempt_of_partition_1()
    if attempt == 0:
        _calls["n"] += 1
        if _calls["n"] >= 2:
            _mark("crashed")
            os._exit(7)
    elif attempt:
        _mark("retried")
    return True


def keep_all(message, context):
    return True
