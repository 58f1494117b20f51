"""Run the replay and publish OUT: a run claims OUT (jobs/output/claim.py: one run per OUT), writes everything under
a temporary sibling OUT.tmp-<run>, and publishes it only when every part succeeded, with `_SUCCESS` (the
run's id and files, as Hadoop's committers write it) as its last file; a failed or killed run leaves no OUT
and releases its claim. Publishing never removes an OUT this run did not claim, and `--overwrite` replaces
only an OUT that is a job's output (or an empty directory), once the new one is complete.

How OUT is published depends on the filesystem (`_renames`):
- local disks and HDFS rename a directory atomically: OUT.tmp-<run> becomes OUT in one step;
- object stores (S3, GCS) have no directory rename (pyarrow's move copies one object): every file is copied
  to its name under OUT, summary.json first and `_SUCCESS` last, then OUT.tmp-<run> is deleted. A reader
  that checks `_SUCCESS` never sees a partial OUT; with --overwrite the old OUT's objects are deleted (its
  `_SUCCESS` first) only once the new output is complete under OUT.tmp-<run>. A failure while copying
  deletes the objects already copied under OUT (none is left that a reader could take for data), keeps the
  complete output at OUT.tmp-<run>, and says so."""
from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional, Sequence, Union

import pyarrow.fs as pafs

from jobs.errors import PublishFailed, UsageError, output_error
from jobs.ledgers.pop import lost_warnings, pop_summary
from jobs.ledgers.timer import overdue_warnings, timer_reads, timers_summary
from jobs.ledgers.traces import trace_summary, trace_warnings
from jobs.ledgers.transactions import check_windows, transaction_warnings, transactions_summary
from jobs.output import claim as claims
from jobs.output.place import Place
from jobs.output.writers import ATTEMPTS
from jobs.report import html as report
from jobs.report.summary import Counters, build_summary, cluster_summary, exit_code
from jobs.runtime import lifecycle
from jobs.runtime.progress import Progress
from jobs.task import stage as T

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.plan.cluster import ClusterPlan
    from jobs.runtime.job_tag import RunJobs

TMP_MARK = ".tmp-"
# In a run's temporary OUT from its claim until it publishes (then removed): what tells --clean-stale that an
# OUT.tmp-<run> is a dead run of this job's, never another program's file that happens to be named alike
RUN_MARK = "_MQREPLAY_RUN"
TMP_NAME = re.compile(r"\.tmp-[0-9a-f]{8}")
SUCCESS = "_SUCCESS"
REPORT = "report.html"  # the run drawn (jobs/report/html.py)
OUTPUT_MARKS = (SUCCESS, "summary.json")
UNWRITABLE = "give an --out in a directory this run can write (its parent must let it make OUT.claim and OUT.tmp-*)"
COPY_THREADS = 16  # what a job's OUT holds (summary.json alone: written before _SUCCESS)


class OutputRun:
    """OUT's claim and temporary sibling for one run, and its one ending: published, or abandoned (the
    temporary removed, the claim released). Both endings take one lock, so a kill's cleanup (jobs/runtime/lifecycle.py)
    never interleaves with a publish."""

    def __init__(self, out: Union[Place, str], overwrite: bool = False, clean_stale: bool = False,
                 run: Optional[str] = None, command: Optional[str] = None) -> None:
        self.place = Place.of(out)  # OUT resolved once: every step of the run and its tasks ask this object
        self.out, self.overwrite, self.command = self.place.uri, overwrite, command
        self.fs, self.final = self.place.fs, self.place.root
        self._lock = threading.Lock()
        # a retry of the command that published OUT has nothing to do: found before the claim, so that nothing
        # is written, not even OUT.claim (a complete OUT is whole: published by rename, or `_SUCCESS` copied last)
        self.repeated = None if overwrite else published_by(self.fs, self.final, command)
        self.ended = self.repeated is not None
        if self.ended:
            return
        try:
            self.claim = claims.acquire(self.place, clean_stale, run)
        except OSError as exc:  # the claim is OUT's first write: an OUT this run cannot write, said at once
            raise output_error(f"--out {out}", exc, UNWRITABLE) from None
        self.tmp = self.place.sibling(TMP_MARK + self.claim.run)  # shipped to the tasks: scheme, host, query kept
        self.tmp_path, self.tmp_uri = self.tmp.root, self.tmp.uri
        try:
            refuse_existing(self.place, overwrite)
            self.stale = stale_temporaries(self.place, exclude=self.tmp_path)
            if self.stale and clean_stale:
                remove_temporaries(self.place, self.stale)
            self.fs.create_dir(self.tmp_path, recursive=True)
            with self.fs.open_output_stream(f"{self.tmp_path}/{RUN_MARK}") as f:
                f.write(json.dumps(self.claim.holder).encode("utf-8"))
        except OSError as exc:
            self.claim.release()
            raise output_error(f"--out {out}", exc, UNWRITABLE) from None
        except BaseException:
            self.claim.release()
            raise

    def published_summary(self) -> dict[str, Any]:
        """OUT's summary.json, of the run that published OUT (a retry of its command reports it)."""
        with self.fs.open_input_stream(f"{self.final}/summary.json") as f:
            return json.loads(f.read().decode("utf-8"))

    def publish(self, in_attempts: Optional[dict[str, str]] = None) -> None:
        """Move the complete temporary OUT to OUT (replacing a previous job's OUT with --overwrite). `in_attempts`:
        {final name: attempt's file} of parts the commit left where their attempts wrote them (an object store:
        each copied once, from there to its name under OUT)."""
        in_attempts = in_attempts or {}
        with self._lock, lifecycle.ending():
            if self.ended:
                raise UsageError(f"--out {self.out}: the run was stopped before it published")
            if not self.claim.holds():
                raise UsageError(f"--out {self.out}: this run lost its claim (another run took it over); its "
                                 f"output is left at {self.tmp_path}")
            self.fs.delete_file(f"{self.tmp_path}/{RUN_MARK}")  # a complete output: not a dead run's any more
            _write_success(self.fs, self.tmp_path, self.claim.run, in_attempts, self.command)
            found = self.fs.get_file_info(self.final).type
            if found != pafs.FileType.NotFound and not self.overwrite:
                self.ended = True
                self.claim.release()
                raise UsageError(f"--out {self.out} appeared while this run ran, made by no run that claimed it: "
                                 f"it is left as it is, and this run's output is at {self.tmp_path}")
            if found != pafs.FileType.NotFound:
                refuse_existing(self.place, overwrite=True)
            self.ended = True  # from here on the temporary OUT is kept if anything fails: it is complete
            try:
                if _renames(self.fs):
                    self._publish_by_rename(found != pafs.FileType.NotFound)
                else:
                    self._publish_by_copy(found != pafs.FileType.NotFound, in_attempts)
                lifecycle.published()
            except Exception as exc:
                raise PublishFailed(f"--out {self.out}: publishing failed ({exc}); the complete output is at "
                                    f"{self.tmp_path}") from exc
            finally:
                self.claim.release()

    def _publish_by_rename(self, replace):
        if not replace:
            return self.fs.move(self.tmp_path, self.final)
        old = f"{self.final}.old-{self.claim.run}"
        self.fs.move(self.final, old)
        self.fs.move(self.tmp_path, self.final)
        self.fs.delete_dir(old)

    def _publish_by_copy(self, replace, in_attempts):
        files = _published(self.fs, self.tmp_path, in_attempts)
        if replace:  # unmark the old OUT first: from now until the new _SUCCESS no reader takes it as whole
            if self.fs.get_file_info(f"{self.final}/{SUCCESS}").type != pafs.FileType.NotFound:
                self.fs.delete_file(f"{self.final}/{SUCCESS}")
            self.fs.delete_dir(self.final)
        first = [f for f in files if f == "summary.json"]
        rest = [f for f in files if f not in ("summary.json", SUCCESS)]
        copied = []

        def copy(name: str) -> None:
            self.fs.copy_file(f"{self.tmp_path}/{in_attempts.get(name, name)}", f"{self.final}/{name}")
            copied.append(name)
        try:
            for name in first:
                copy(name)
            with ThreadPoolExecutor(COPY_THREADS) as pool:  # server-side copies, each a request
                list(pool.map(copy, rest))
            copy(SUCCESS)
        except BaseException:
            self._unpublish(copied)
            raise
        self.fs.delete_dir(self.tmp_path)

    def _unpublish(self, copied):
        """A copy that failed part-way: the objects it made under OUT are deleted (no object without `_SUCCESS`
        that a reader could take for data); the complete output stays at OUT.tmp-<run>."""
        for name in copied:
            try:
                self.fs.delete_file(f"{self.final}/{name}")
            except OSError:  # the store refuses even that: `_SUCCESS` was never copied, readers skip OUT
                continue

    def abandon(self) -> None:
        """Remove the temporary OUT and release the claim (a failed, stopped or killed run); idempotent."""
        with self._lock, lifecycle.ending():
            if self.ended:
                return
            self.ended = True
            try:
                if self.fs.get_file_info(self.tmp_path).type != pafs.FileType.NotFound:
                    self.fs.delete_dir(self.tmp_path)
            finally:
                self.claim.release()


def refuse_existing(out: Union[Place, str], overwrite: bool) -> None:
    """UsageError for an OUT (a Place, or a path or URI) that exists (without --overwrite), or that --overwrite
    must not replace: a file, or a directory that holds something other than a job's output."""
    out = Place.of(out)
    fs, path, out = out.fs, out.root, out.uri
    found = fs.get_file_info(path).type
    if found == pafs.FileType.NotFound:
        return
    if not overwrite:
        raise UsageError(f"--out {out} exists: choose a new --out or pass --overwrite")
    if found != pafs.FileType.Directory:
        raise UsageError(f"--out {out} is a file, not a job's output directory: --overwrite replaces only an "
                         "earlier run's OUT")
    children = fs.get_file_info(pafs.FileSelector(path))
    names = {c.base_name for c in children}
    if children and not names & set(OUTPUT_MARKS):
        raise UsageError(f"--out {out} holds no {SUCCESS} or summary.json: it is not a job's output, and "
                         "--overwrite replaces only an earlier run's OUT")


def stale_temporaries(out: Union[Place, str], exclude: Optional[str] = None) -> list[str]:
    """Temporary siblings of OUT other than `exclude`, left by runs of this job that died (a run holding the
    claim is the only one writing one): directories named OUT.tmp-<run id> that hold a run's RUN_MARK. Nothing
    else in OUT's parent is ever listed, so nothing else is removed."""
    out = Place.of(out)
    fs, path = out.fs, out.root
    parent, _, name = path.rstrip("/").rpartition("/")
    infos = fs.get_file_info(pafs.FileSelector(parent or ".", allow_not_found=True))
    named = [i.path for i in infos if i.type == pafs.FileType.Directory and i.path != exclude
             and i.base_name.startswith(name) and TMP_NAME.fullmatch(i.base_name[len(name):])]
    return sorted(p for p in named if fs.get_file_info(f"{p}/{RUN_MARK}").type == pafs.FileType.File)


def remove_temporaries(out: Union[Place, str], paths: Iterable[str]) -> None:
    fs = Place.of(out).fs
    for path in paths:
        fs.delete_dir(path)


def _renames(fs):
    """Whether the filesystem renames a directory in one step (local, HDFS), or copies objects (S3, GCS)."""
    return isinstance(fs, (pafs.LocalFileSystem, pafs.HadoopFileSystem))


def _files(fs, root):
    """Every file under root, as paths relative to it."""
    return sorted(i.path[len(root) + 1:] for i in fs.get_file_info(pafs.FileSelector(root, recursive=True))
                  if i.type == pafs.FileType.File)


def _published(fs, root, in_attempts):
    """The files OUT is published with (relative to it): those under the temporary OUT, and the parts still where
    their attempts wrote them under their final names (what failed attempts left there is not published)."""
    if not in_attempts:
        return _files(fs, root)
    return sorted({f for f in _files(fs, root) if not f.startswith(ATTEMPTS + "/")} | set(in_attempts))


def remove_empty_folders(fs: pafs.FileSystem, root: str) -> None:
    """Remove every folder under root that holds no file (the partition folders whose parts an Iceberg run moved
    into its tables): a reader of OUT never meets one (Spark's `read.parquet` fails on an empty folder)."""
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    holding = set()  # every folder with a file somewhere below it
    for info in infos:
        if info.type == pafs.FileType.File:
            folder = info.path.rpartition("/")[0]
            while len(folder) > len(root) and folder not in holding:
                holding.add(folder)
                folder = folder.rpartition("/")[0]
    empty = [i.path for i in infos if i.type == pafs.FileType.Directory and i.path not in holding]
    for folder in sorted(empty, key=len, reverse=True):  # the deepest first: each is empty when removed
        fs.delete_dir(folder)


def _write_success(fs, tmp_path, run, in_attempts=None, command=None):
    """`_SUCCESS`, last: the run's id, its command's fingerprint (jobs/output/command.py) and every file of OUT
    (paths relative to OUT)."""
    files = _published(fs, tmp_path, in_attempts)
    marks = {"run": run, "command": command, "files": files}
    with fs.open_output_stream(f"{tmp_path}/{SUCCESS}") as f:
        f.write(json.dumps(marks, indent=1, ensure_ascii=False).encode("utf-8"))


def published_by(fs: pafs.FileSystem, path: str, command: Optional[str]) -> Optional[dict[str, Any]]:
    """OUT's `_SUCCESS` (run, command, files) when OUT is the complete output of this same command
    (jobs/output/command.py), else None: a retry of that command has nothing to do."""
    if not command:
        return None
    try:
        with fs.open_input_stream(f"{path}/{SUCCESS}") as f:
            marks = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError):  # no OUT, no _SUCCESS, or not ours: OUT is refused as any existing one
        return None
    return marks if isinstance(marks, dict) and marks.get("command") == command else None


def run_and_publish(spark: SparkSession, planned: ClusterPlan, run: OutputRun, options: Any, sink: Any, jobs: RunJobs,
                    progress: Optional[Progress] = None) -> dict[str, Any]:
    """Run the job, write every output under the run's temporary OUT through the run's sink (jobs/sinks/kinds.py),
    summary.json, report.html, and offsets.json (the exclusive end per topic and queue of what the run covered,
    for --starting-offsets), then publish it as OUT; returns the summary. `jobs`: the run's own Spark jobs
    (jobs/runtime/job_tag.RunJobs). On any failure the temporary OUT is removed once no task of the run still runs
    (a stopped run's are cancelled), and the claim released; the session's other jobs are left alone."""
    started = time.time()
    try:
        summary, timelines, walked = _run(spark, planned, run.tmp, options, sink, progress, run.out)
        with lifecycle.committing():  # Spark's part is done: a kill from here on lets the run publish first
            _commit_and_publish(run, summary, timelines, walked, options, sink, started)
    except BaseException:
        jobs.settle(stopped=lifecycle.stop_signalled() is not None)
        run.abandon()
        raise
    return summary


def _commit_and_publish(run, summary, timelines, planned, options, sink, started):
    """What the sink publishes (Iceberg: the tables' commits), summary.json, report.html and offsets.json (the
    exclusive end per topic and queue of what the run covered, for --starting-offsets), then OUT published.
    `planned`: the plan as the stage walked it (ClusterPlan.walked: a rebuilt queue's ranges known)."""
    with writing(f"--sink {sink.name}: committing the run's tables"):
        sink.publish(run.tmp, summary, planned, options, run.claim.run)
        remove_empty_folders(run.fs, run.tmp_path)  # Iceberg moved its parts out: no folder left empty
    summary["job_seconds"] = round(time.time() - started, 3)
    summary["run"] = run.claim.run  # as _SUCCESS, the console and every line of the run's log file say
    with writing(f"--out {run.out}"):
        with run.fs.open_output_stream(f"{run.tmp_path}/summary.json") as f:
            f.write(json.dumps(summary, indent=2, ensure_ascii=False, sort_keys=True).encode("utf-8"))
        with run.fs.open_output_stream(f"{run.tmp_path}/{REPORT}") as f:
            f.write(report.render(summary, timelines, exit_code(summary)).encode("utf-8"))
        with run.fs.open_output_stream(f"{run.tmp_path}/offsets.json") as f:  # where the next run starts
            f.write(json.dumps(planned.offsets(), indent=2, ensure_ascii=False).encode("utf-8"))
    run.publish(sink.in_attempts())


@contextlib.contextmanager
def writing(where: str) -> Iterator[None]:
    """An OSError met writing an output (OUT, the warehouse, the catalog's files) is the output's: exit 2 naming
    `where`, never "input damaged" (the store was read before)."""
    try:
        yield
    except OSError as exc:
        raise output_error(where, exc) from exc


def _run(spark, planned, out, options, sink, progress=None, given=None):
    plans = [p.plan for _, p in planned.parts]
    tasks = T.SparkTasks(spark)
    ranges = T.broker_splits(tasks, plans)
    progress = progress or Progress(mode="off")
    total = sum(T.split_bytes(plans[k], a, b) for k, a, b in ranges)
    with progress.stage(spark, len(ranges), total) as counters:
        return _run_with(spark, tasks, planned, out, options, sink, ranges, counters, given or out)


def stage_and_commit(tasks: Callable[..., Any], planned: ClusterPlan, out: Place, options: Any, sink: Any,
                     ranges: Sequence[tuple[int, int, int]], progress: Optional[Sequence[Any]] = None,
                     given: Optional[str] = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The one stage over every broker's splits (tasks write their parts; `tasks`: the mapper, stage.SparkTasks or
    stage.in_process), then the sink's commit of what successful attempts wrote: (the report rows, {output:
    (files, rows, bytes)}). `out`: the temporary OUT (a Place); `given`: OUT as the command line gave it, for an
    error writing there."""
    reports = T.replay(tasks, [p.plan for _, p in planned.parts], sink.spec(out, options), ranges, progress)
    with writing(f"--out {given or out.uri}"):
        out.fs.create_dir(out.root, recursive=True)
        written = sink.commit(out, reports, planned, options)
    return reports, written


def _run_with(spark, tasks, planned, out, options, sink, ranges, progress, given):
    """The stage and the sink's commit (stage_and_commit), the ledgers' Spark steps; the summary per broker, then
    of the run (summary.cluster_summary)."""
    reports, written = stage_and_commit(tasks, planned, out, options, sink, ranges, progress, given)
    counted = [Counters.of([r for r in reports if r.get("broker") == b.name], len(part.problems or []))
               for b, part in planned.parts]
    # a rebuilt queue's offsets are known once walked: the stage's output, the ranges from here on (the ledgers'
    # topics whose copies they looked for, the summary, offsets.json, the lake's ranges)
    planned = planned.walked({b.name: c.rebuilt for (b, _), c in zip(planned.parts, counted)})
    brokers = [(b, part, c) for (b, part), c in zip(planned.parts, counted)]
    reads = timer_reads(reports, planned)
    timers = sink.ledger(spark, out.uri, (out.fs, out.root), written, reads, options)
    windows = check_windows(planned, options.transaction_check)
    transactions = sink.transactions(spark, out.uri, (out.fs, out.root), written, reads, windows)
    pop = sink.pop_ledger(spark, out.uri, (out.fs, out.root), written, planned, options.window.starting_file)
    notes = [] if pop is None else pop[2]
    traced = sink.trace_ledger(spark, out.uri, (out.fs, out.root), written, planned)
    several = len(planned.parts) > 1
    summaries, timelines = [], {}
    for b, part, counters in brokers:
        summaries.append((b.name, build_summary(part, counters, replace(options, store=b.uri, window=part.window))))
        timelines.update({((b.name,) + k if several else k): t for k, t in counters.timelines.items()})
    summary = cluster_summary(summaries)
    summary["warnings"] = list(planned.warnings) + notes + summary["warnings"]
    if timers is not None:
        summary["timers"] = timers_summary(timers)
        summary["warnings"] += overdue_warnings(timers, options.timer_overdue)
    if pop is not None:
        night, table, _ = pop
        summary["pop"] = pop_summary(night, table, sink.across)
        summary["warnings"] = lost_warnings(night if table is None else table) + summary["warnings"]
    if transactions is not None:
        summary["transactions"] = transactions_summary(transactions)
        summary["warnings"] += transaction_warnings(transactions, windows)
    if traced is not None:
        summary["consumption"] = trace_summary(*traced)
        summary["warnings"] += trace_warnings(summary["consumption"].get("lake") or summary["consumption"])
    summary["outputs"] = {name: {"files": f, "rows": r, "bytes": b} for name, (f, r, b) in sorted(written.items())}
    return summary, timelines, planned
