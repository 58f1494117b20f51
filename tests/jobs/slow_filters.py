"""A PYTHON filter that keeps every message slowly (10 ms each), importable on executors as
tests.jobs.slow_filters: a run that is still in its stage seconds later, for the tests that stop one."""
import time


def slow_keep_all(message, context):
    time.sleep(0.01)
    return True
