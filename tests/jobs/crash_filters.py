"""A PYTHON filter that kills its Python worker (importable on executors as tests.jobs.crash_filters)."""
import os


def crash(message, context):
    os._exit(9)
