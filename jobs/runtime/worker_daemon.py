"""PySpark's Python daemon with the replay's imports done before it forks its workers
(`spark.python.daemon.module`, set by jobs/runtime/session.py).

PySpark's daemon forks every Python worker of an executor; each worker used to import numpy, pyarrow, numba,
the job's modules and numba's cached kernels on unpickling its first task: 1.3-1.7 CPU-s a worker, paid by
every worker at the stage's start. Done once here, before the fork, the workers inherit them (their pages
shared, copy-on-write; frozen out of the garbage collector's reach so that no collection touches them).

Nothing here may start a thread (a fork copies only the forking one): pandas, which pyarrow would import
on a conversion (0.7 s), stays out as in a task (schemas/no_pandas.py); OpenBLAS and jemalloc are told
to start no thread (main); the process is checked to have one thread left. On any failure the process
becomes PySpark's own daemon (exec), whose workers import for themselves, as before.

Under spark-submit on a local master the driver runs this module as a zygote first (`--zygote`: preloaded while
the driver plans, jobs/runtime/daemon_zygote.py), and the process the JVM starts has the zygote fork the daemon."""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import importlib
import os
import signal
import socket
import sys
import zipimport

from jobs.runtime import daemon_zygote

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing into the daemon
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType

# the job's modules whose import a replay task needs (unpickling its function imports them)
MODULES = (
    "numpy", "pyarrow", "pyarrow.compute", "pyarrow.parquet", "numba",
    "schemas.kernels", "schemas.log.dledger", "schemas.queues.cq_rebuild",
    "jobs.task.stage", "jobs.output.writers", "jobs.task.split_task", "jobs.task.split_units",
    "jobs.task.split_decode", "filtering.topic_replay", "filtering.decision",
    "jobs.plan.replay_plan", "jobs.plan.units.choose",  # unpickling the plan: 23 ms of a first task
    # what a first split imported on its way (numpy.ma by np.unique, dateutil by pyarrow's conversion of Python
    # values, the UTF-16 codec by the tags' Java hash): 0.09 CPU-s of each worker's first task
    "numpy.ma", "dateutil.relativedelta", "encodings.utf_16_le",
)
KERNEL_MODULES = ("schemas.kernels", "schemas.log.dledger", "schemas.queues.cq_rebuild")
# set in this daemon's environment once it preloaded, so inherited by the workers it forks: a task that finds it
# runs in the job's own worker (jobs/task/stage.py: only there does a task freeze what the worker holds)
JOB_DAEMON = "MQREPLAY_JOB_DAEMON"


def preload() -> int:
    """Import MODULES, load the kernels numba has cached on this machine, import PySpark's worker module; the
    number of kernels loaded."""
    # imported here, once main() has told OpenBLAS and jemalloc to start no thread: the schemas package loads numpy
    no_pandas = importlib.import_module("schemas.no_pandas")
    with no_pandas.left_out():
        for name in MODULES:
            importlib.import_module(name)
        loaded = sum(load_cached(module) for module in map(importlib.import_module, KERNEL_MODULES))
    importlib.import_module(worker_module())  # PySpark's worker, which pyspark.daemon imports after each fork
    forget_zip_importers()
    gc.collect()
    gc.freeze()
    return loaded


def forget_zip_importers() -> None:
    """Drop the importers of zip archives (pyspark.zip and py4j's, one per package of them imported) from the
    import system's cache. A forked worker's first task puts Spark's files folder on sys.path, and PySpark then
    invalidates the import caches: each cached zip importer reads its whole archive's directory again (18 of them
    here: 0.18 s of every worker's first task, on the stage's critical path). Without them nothing is re-read, and
    an import that needs one makes it anew from the directory Python keeps per archive."""
    for path, finder in list(sys.path_importer_cache.items()):
        if isinstance(finder, zipimport.zipimporter):
            del sys.path_importer_cache[path]


def worker_module() -> str:
    """The module pyspark.daemon runs in a forked worker (its argument, as pyspark.daemon.worker reads it)."""
    return sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].startswith("pyspark") else "pyspark.worker"


def load_cached(module: ModuleType) -> int:
    """Load every compiled version of `module`'s kernels that numba's cache holds for this machine, as their
    first call would: nothing is compiled (a signature not in the cache is not asked for)."""
    import numba.core.registry  # noqa: F401 (the dispatcher class)
    from numba.core.dispatcher import Dispatcher

    loaded = 0
    for kernel in vars(module).values():
        if (not isinstance(kernel, Dispatcher)
                or not kernel._cache.__class__.__name__ == "FunctionCache"):  # type: ignore[attr-defined]
            continue
        magic = kernel.targetctx.codegen().magic_tuple()  # type: ignore[attr-defined]
        for key in kernel._cache._cache_file._load_index():  # type: ignore[attr-defined]
            if key[1] == magic:
                kernel.compile(key[0])
                loaded += 1
    return loaded


# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
# blocks of up to this size come from the heap, not from mappings of their own (what one column of a batch holds)
HEAP_BLOCKS = 256 << 20


def keep_freed_memory() -> None:
    """Let the workers this daemon forks reuse the memory their tasks free, not hand it back to the kernel and fault
    it in again. A task allocates a few hundred arrays of a batch's length each (numpy's from glibc malloc, which
    maps every block over its threshold anew, and trims the heap's top; Arrow's from mimalloc, which purges freed
    pages 10 ms later): 18,000-21,000 page faults per split of the bench store, 0.04-0.08 s of kernel time of a
    0.5 s task, and 0.4 s of a worker's first. Set before the preload (mimalloc reads its options once loaded)
    and inherited by every fork; a worker's memory then stays at the peak of the largest split it ran, which is
    what bounds it either way. A libc without mallopt (not glibc) is left as it is."""
    os.environ.setdefault("MIMALLOC_PURGE_DELAY", "-1")
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, HEAP_BLOCKS)
        libc.mallopt(M_TRIM_THRESHOLD, 4 * HEAP_BLOCKS)
    except (OSError, AttributeError):
        pass


def threads() -> int:
    """Threads of this process (Linux); 1 where /proc is not there to say."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def prepare() -> int:
    """This process made ready to fork the workers: no thread started by what it loads, the freed memory kept, the
    preload done and no thread left; raises if it is not."""
    # the two libraries that start threads on loading: OpenBLAS (numpy) a pool per core unless told how many
    # (Spark sets OMP_NUM_THREADS to a task's cores, which OpenBLAS also reads), and the jemalloc that pyarrow
    # bundles a purging thread (pyarrow allocates with mimalloc here: jemalloc holds nothing to purge)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")
    keep_freed_memory()
    loaded = preload()
    if threads() > 1:  # a fork would copy only this one: the workers would be unsafe
        raise RuntimeError(f"{threads()} threads after the preload")
    return loaded


def become_daemon(loaded: int, forked: bool = False) -> None:
    """PySpark's daemon in this preloaded process (`loaded` kernels), here or in one the zygote forked."""
    os.environ[JOB_DAEMON] = "1"
    if os.environ.get("MQREPLAY_DAEMON_LOG"):
        origin = ", forked from the driver's zygote" if forked else ""
        print(f"mqreplay worker daemon: {len(MODULES)} modules, {loaded} kernels loaded{origin}", file=sys.stderr)
    from pyspark import daemon

    daemon.manager()


def zygote(argv: Sequence[str]) -> None:
    """The driver's zygote (jobs/runtime/daemon_zygote.py): preloaded as the daemon is, it forks a daemon per process
    the JVM starts. argv: the listening socket's and the lifeline's file descriptors."""
    listener, lifeline = socket.socket(fileno=int(argv[0])), int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the driver's to act on: it then exits
    try:
        daemon_zygote.serve(listener, lifeline, prepare, lambda loaded: become_daemon(loaded, forked=True))
    except Exception as exc:  # each stand-in then preloads for itself
        print(f"mqreplay daemon zygote: stopped ({exc!r}); the daemon preloads for itself", file=sys.stderr)
        sys.exit(1)


def main() -> None:
    if sys.argv[1:2] == [daemon_zygote.ZYGOTE_ARGUMENT]:
        return zygote(sys.argv[2:])
    zygote_path = os.environ.get(daemon_zygote.ZYGOTE)
    if zygote_path and daemon_zygote.spawn(zygote_path):  # the daemon was forked preloaded, and has exited
        return
    try:
        loaded = prepare()
    except Exception as exc:  # PySpark's own daemon in this process instead: its workers import for themselves
        print(f"mqreplay worker daemon: preload skipped ({exc!r})", file=sys.stderr)
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", "pyspark.daemon", *sys.argv[1:]])
    else:
        become_daemon(loaded)


if __name__ == "__main__":
    main()
