"""PySpark's daemon with the job's imports done before it forks (jobs/runtime/worker_daemon.py), and where the session
asks for it (jobs/runtime/session.py)."""
import gc
import os
import subprocess
import sys

import numpy as np
import pytest

from jobs.runtime.session import _workers_import_daemon


def _python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/")


def test_a_local_master_gets_the_daemon_and_a_cluster_keeps_pysparks(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # the workers' Python, as spark-submit's wrapper sets it
    assert _workers_import_daemon("local[2]")
    assert _workers_import_daemon("local[2,4]")
    assert not _workers_import_daemon("spark://10.0.0.1:7077")
    assert not _workers_import_daemon("yarn")
    assert not _workers_import_daemon(None)


def test_a_worker_python_that_cannot_import_the_daemon_keeps_pysparks(monkeypatch, tmp_path):
    monkeypatch.setenv("PYSPARK_PYTHON", str(tmp_path / "no-python"))
    assert not _workers_import_daemon("local[2]")


def test_the_preloaded_daemon_holds_the_jobs_modules_one_thread_and_no_pandas():
    proc = _python(
        "import os, sys\n"
        "os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')\n"
        "os.environ.setdefault('JE_ARROW_MALLOC_CONF', 'background_thread:false')\n"
        "from jobs.runtime import worker_daemon as w\n"
        "w.preload()\n"
        "print(w.threads(), 'pandas' in sys.modules, all(m in sys.modules for m in w.MODULES + ('pyspark.worker',)))\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "False", "True"]


def test_a_preloaded_worker_imports_nothing_while_it_runs_a_split(store_a, tmp_path):
    """Every module a split needs is imported before the daemon forks: one a task imports costs each worker's first
    task its import (numpy.ma took 0.08 s), on the stage's critical path."""
    from pyspark import cloudpickle

    from jobs.output.writers import SinkSpec
    from jobs.plan.build import build_plan
    from jobs.settings import JobOptions
    from jobs.task.split_units import commitlog_splits

    plan = build_plan(JobOptions(store=str(store_a / "store"), read_all=True)).plan
    assert plan.sql92_properties  # the store's SQL92 registrations are evaluated, tags hashed, Parquet written
    (tmp_path / "out").mkdir()
    shipped = tmp_path / "task.pkl"
    shipped.write_bytes(cloudpickle.dumps((plan, commitlog_splits(plan), SinkSpec(str(tmp_path / "out")))))
    proc = _python(
        "import pickle, sys\n"
        "sys.argv = ['worker_daemon', 'pyspark.worker']\n"
        "from jobs.runtime import worker_daemon as w\n"
        "w.prepare()\n"
        "before = set(sys.modules)\n"
        f"plan, splits, spec = pickle.loads(open({str(shipped)!r}, 'rb').read())\n"
        "from jobs.task.stage import run_split\n"
        "from schemas import no_pandas\n"
        "with no_pandas.left_out():\n"  # as a task runs (jobs/task/stage.py)
        "    for k, split in enumerate(splits):\n"
        "        run_split(plan, spec, k, split, 'local')\n"
        "print(sorted(set(sys.modules) - before))\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_a_failed_preload_turns_the_process_into_pysparks_own_daemon():
    proc = _python(
        "import os, sys\n"
        "sys.argv = ['worker_daemon', 'pyspark.worker']\n"
        "from jobs.runtime import worker_daemon as w\n"
        "def fail(): raise ImportError('no numba here')\n"
        "w.preload = fail\n"
        "os.execv = lambda path, argv: print(argv[1:]) or sys.exit(0)\n"
        "w.main()\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['-m', 'pyspark.daemon', 'pyspark.worker']"
    assert "preload skipped (ImportError('no numba here'))" in proc.stderr


@pytest.mark.spark
def test_a_task_outside_the_jobs_daemon_leaves_the_workers_garbage_collector_alone(spark):
    """The tests' session runs PySpark's own daemon, as a user's session does (a notebook reading the data source):
    the job's tasks there freeze nothing of the worker, whose other code (a user's UDFs) is not the job's."""
    from jobs.task.stage import map_tasks

    map_tasks(spark, [0, 1], lambda item: [item])  # the job's tasks, in both workers of local[2]
    frozen = map_tasks(spark, [0, 1], lambda item: [gc.get_freeze_count()])  # the same workers, reused
    assert frozen == [[0], [0]]


def test_a_task_in_the_jobs_daemon_freezes_what_its_worker_holds():
    proc = _python(
        "import gc\n"
        "from jobs.task.stage import settle_garbage\n"
        "from jobs.runtime.worker_daemon import JOB_DAEMON\n"
        "settle_garbage({})\n"
        "before = gc.get_freeze_count()\n"
        "settle_garbage({JOB_DAEMON: '1'})\n"
        "print(before, gc.get_freeze_count() > 0)\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "True"]


def test_the_preloaded_daemon_keeps_no_zip_importer_and_still_imports_from_the_zips():
    """Spark puts pyspark.zip first on a worker's path; a worker's first task makes PySpark invalidate the import
    caches, which made each cached zip importer read its archive's directory again."""
    import pyspark

    archive = os.path.join(os.path.dirname(pyspark.__file__), "python", "lib", "pyspark.zip")
    proc = subprocess.run([sys.executable, "-c", (
        "import importlib, os, sys, zipimport\n"
        "os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')\n"
        "os.environ.setdefault('JE_ARROW_MALLOC_CONF', 'background_thread:false')\n"
        "from jobs.runtime import worker_daemon as w\n"
        "w.preload()\n"
        "print(sys.modules['pyspark.worker'].__spec__.origin.startswith(sys.argv[1]))\n"
        "print(sum(isinstance(f, zipimport.zipimporter) for f in sys.path_importer_cache.values()))\n"
        "importlib.invalidate_caches()\n"
        "import pyspark.find_spark_home as later\n"
        "print(later.__spec__.origin.startswith(sys.argv[1]))\n"), archive],
        capture_output=True, text=True, timeout=120, cwd="/",
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([archive, os.path.dirname(os.path.dirname(
            os.path.dirname(os.path.abspath(__file__))))])))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "0", "True"]


def test_the_daemon_keeps_freed_memory_for_its_workers():
    """What a task frees stays in the worker for the next batch (glibc's heap not trimmed, no block of a batch's
    column mapped anew, mimalloc not purging), set before pyarrow loads: page faults were a tenth of a task."""
    proc = _python(
        "import os, resource\n"
        "from jobs.runtime import worker_daemon as w\n"
        "os.environ.pop('MIMALLOC_PURGE_DELAY', None)\n"
        "w.keep_freed_memory()\n"
        "import numpy as np\n"
        "def batch():\n"  # 64 columns of 65,536 int64 (512 KiB each, 32 MiB in all), each written, then freed
        "    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "    columns = [np.ones(65536, np.int64) for _ in range(64)]\n"
        "    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before\n"
        "batch(), batch()\n"
        "print(os.environ['MIMALLOC_PURGE_DELAY'], batch() < 1024)\n")  # 8,192 pages: none faulted in again
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["-1", "True"]


def test_the_daemon_finds_numbas_cached_kernels_where_the_pinned_numba_keeps_them():
    """load_cached reads numba's private cache index (Dispatcher._cache._cache_file._load_index), numba pinned in
    setup.cfg: a numba that moves it fails here, not silently in every worker's first task."""
    from numba.core.dispatcher import Dispatcher

    from jobs.runtime.worker_daemon import load_cached
    from schemas import kernels

    kernels.read_i32(np.zeros(8, np.uint8), 0)  # compiled once, and so cached on disk
    cached = [k for k in vars(kernels).values() if isinstance(k, Dispatcher) and callable(
        getattr(getattr(getattr(k, "_cache", None), "_cache_file", None), "_load_index", None))]
    assert kernels.read_i32 in cached
    assert load_cached(kernels) >= 1
