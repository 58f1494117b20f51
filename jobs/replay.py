"""spark-submit entry point: replay a RocketMQ broker store and re-apply its server-side filtering.

    spark-submit jobs/replay.py --store STORE | --store NAME=STORE ... | --brokers FILE --out OUT
        [--commitlog DIR[,DIR...]] [--subscriptions FILE ...]
        [--subscription GROUP TOPIC TYPE EXPRESSION ...] [--rocketmq-version {4,5}]
        [--from {earliest,committed}] [--since T] [--until T] [--starting-offsets JSON|FILE]
        [--ending-offsets JSON|FILE] [--groups G,...] [--topics T,...] [--conf FILE] [--no-body]

Exit codes (for schedulers), one meaning each: 0 clean; 1 input damaged (the store's files or config/),
the run stopped; 2 usage, the caller's mistake (bad arguments, a missing or wrong kind of path, a malformed
--conf or --subscriptions, names that match nothing, an existing OUT, an OUT another run holds);
3 finished, but some subscriptions did not parse; 4 finished, but damaged data was skipped under
--on-corrupt skip (see OUT/audit/corrupt); 5 the job failed for another reason (a crashed worker, out of
memory, spark-submit's JVM killed); 128 + N stopped by signal N (143: SIGTERM), nothing published.
"""
from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

if __package__ in (None, ""):  # run as a file by spark-submit: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if __name__ == "__main__" and "--version" in sys.argv[1:]:  # answered before the job's modules (numba) load
    from jobs.version import package_version

    print(f"mqreplay {package_version()}")
    sys.exit(0)

from jobs.cli import (  # noqa: E402
    Args,
    check_arguments,
    commitlog_dirs,
    parse_replay_args,
    print_quietly,
    sink_choice,
    subscription_options,
    window_of,
)
from jobs.errors import UsageError, carried, outcome  # noqa: E402
from jobs.output import publish as outputs
from jobs.output.command import fingerprint  # noqa: E402
from jobs.plan.brokers import brokers_of, split_store  # noqa: E402
from jobs.plan.cluster import plan_cluster  # noqa: E402
from jobs.report.lineage import Lineage  # noqa: E402
from jobs.report.summary import exit_code, summary_notes, summary_table  # noqa: E402
from jobs.runtime import console, lifecycle  # noqa: E402
from jobs.runtime.job_tag import RunJobs  # noqa: E402
from jobs.runtime.progress import open_progress  # noqa: E402
from jobs.runtime.session import (  # noqa: E402
    SessionStart,
    archive_of_a_whole_run,
    classic_session_exists,
    is_connect,
    spark_session,
    stop_session,
)
from jobs.settings import job_options, load_settings  # noqa: E402
from jobs.sinks.kinds import sink_of  # noqa: E402
from jobs.task.stage import unseen_paths  # noqa: E402
from schemas.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ConfigError, ReplayError  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.plan.cluster import ClusterPlan
    from jobs.settings import JobOptions

log = logging.getLogger("mqreplay")


def options_from(args: Args, settings: Mapping[str, Any], starting: str | None = None) -> JobOptions:
    split = lambda s: tuple(x for x in (s or "").split(",") if x)  # noqa: E731
    return job_options(
        settings, args.store, commitlog=commitlog_dirs(args.commitlog), units_from=args.units_from,
        audit_consume_queue=args.audit_consume_queue, trace_topics=tuple(args.trace_topic),
        **subscription_options(args, settings),
        groups=split(args.groups), topics=split(args.topics),
        with_body=settings["with_body"] and not args.no_body,
        on_corrupt=args.on_corrupt,
        verify_crc=settings["verify_crc"] or args.verify_crc,
        allow_missing=args.allow_missing,
        layout=sink_choice(args).layout,
        window=window_of(args, starting),
    )


def spark_cause(exc: BaseException) -> str:
    """Spark's reason for a failed job, in one line (the stack traces are in the log)."""
    text = str(exc)
    for known in ("Python worker exited unexpectedly (crashed)", "java.lang.OutOfMemoryError", "MemoryError",
                  "Python worker failed to connect back"):
        if known in text:
            return known
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "Traceback (most recent call last)" in text:  # a Python exception in a task: its own last line
        raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Interrupt|Exit)\b.*:", line)]
        if raised:
            return raised[0][:300]
    for line in lines:
        if "most recent failure:" in line:
            return line.split("most recent failure:", 1)[1].strip()[:300]
    return (lines[0] if lines else type(exc).__name__)[:300]


def _prepare(args, progress):
    """Settings, options, OUT's claim and checks, and the plan: everything that can fail before Spark
    starts. The claim comes before the plan: a second run on the same OUT refuses at once. Under spark-submit,
    the session starts while the store is planned (the SessionStart returned last, else None)."""
    settings = settings_of(args)
    brokers = brokers_of(args.store, args.brokers, args.commitlog)
    command = fingerprint(args, brokers)  # before the sink reads a lake's offsets into --starting-offsets
    sink, starts = sink_of(sink_choice(args), brokers)  # --starting-offsets iceberg: none of the command line
    options = replace(options_from(args, settings, starts), store=brokers[0].uri)
    progress.set_phase("claiming OUT")
    run = outputs.OutputRun(args.out, args.overwrite, args.clean_stale, run=args.run, command=command)
    if run.repeated is not None:  # a retry of the command that published OUT: nothing to plan
        return settings, options, run, None, sink, None
    if run.stale and args.clean_stale:
        print(f"removed {len(run.stale)} leftover temporary output(s): {', '.join(run.stale)}", file=sys.stderr)
    elif run.stale:
        print(f"warning: {len(run.stale)} temporary output(s) beside --out, left by runs that died: "
              f"{', '.join(run.stale)}; --clean-stale removes them", file=sys.stderr)
    started = SessionStart(settings, args.master) if console.under_spark_submit() and not args.remote \
        and not classic_session_exists() else None
    try:
        progress.set_phase("planning: listing the store, probing its consume queues")
        planned = plan_cluster(options, brokers, sink.scope())  # a lake: where each group starts, what it holds
        sink.check(planned, args.clean_stale)  # before Spark: a rerun of committed offsets commits nothing
        return settings, options, run, planned, sink, started
    except BaseException:
        run.abandon()
        raise


def settings_of(args: Args) -> dict[str, Any]:
    """The job settings of --conf (or conf/replay.json): the caller's file, so a typo or malformed JSON in it
    is a usage error (exit 2)."""
    try:
        return load_settings(args.conf)
    except ConfigError as exc:
        raise UsageError(f"--conf {exc}") from None


# loggers quieter on the console than INFO: py4j's INFO lines would follow the summary; pyiceberg says a line per
# column it has no statistics of (add_files)
QUIET = {"py4j": logging.WARNING, "pyiceberg": logging.ERROR}


# one run at a time in a process: a run sets the process's console (sys.stderr, the root logger's handlers), its
# signal handlers and its lifecycle (jobs/runtime/lifecycle.py) for its duration; a second call while one runs (a
# kernel's other thread) is refused at once (exit 2), never mixed with it
_one_run = threading.Lock()


def main(argv: Sequence[str] | None = None) -> int:
    """The job, as spark-submit (or a notebook's kernel, from any of its threads) runs it: its exit code. Every call
    is a run of its own (its run id, log file, temporary OUT and lake files); what it sets up for itself (the
    console, the log file, os.environ, signal handlers, the thread's job group) is as it was when it returns."""
    if not _one_run.acquire(blocking=False):
        print("error: another run of the job is running in this process: one run at a time per process (call main "
              "again once it has returned, or start the second run in a process of its own, e.g. spark-submit)",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        with console.run_console(QUIET) as handler:
            if handler is not None:  # the console: INFO; the run's log file takes the job's DEBUG
                handler.addFilter(not_py4j)  # its stacks (a stopped run's broken call) are the log file's
            return _run_main(argv)
    finally:
        _one_run.release()


def _run_main(argv):
    try:
        args = parse_replay_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    try:  # the caller's mistakes, before a log file or anything else is made (one line, exit 2)
        check_arguments(args)
        if not args.continue_lake:  # else the tables' offsets, read once the run has begun
            window_of(args)
        settings_of(args)
        inputs = lineage_stores(args.store)  # a broker name that cannot be is the caller's mistake too
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args.run, log_file = console.run_identity()
    with console.run_environment(args.run, log_file):  # for a JVM the run starts; os.environ put back after
        try:
            opened = console.open_log(args.run, log_file)
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        print(f"log: {log_file} (run {args.run})", file=sys.stderr, flush=True)
        log.debug("replay.py %s", " ".join(sys.argv[1:] if argv is None else map(str, argv)))
        events = Lineage.of(args.run, inputs, args.out)
        if events is not None:
            events.start()
        try:
            return _logged(args, events)
        finally:
            console.close_log(opened)


def not_py4j(record: logging.LogRecord) -> bool:
    """A log record that is not py4j's (which logs some of its errors through the root logger)."""
    return not record.name.startswith("py4j") and "/py4j/" not in record.pathname.replace("\\", "/")


def lineage_stores(store: str | Sequence[str]) -> list[str]:
    """The stores a run reads, as paths or URIs (a `NAME=URI` broker's URI)."""
    given: Sequence[str] = [store] if isinstance(store, str) else store
    return [split_store(value)[1] for value in given]


def _logged(args, events=None):
    lifecycle.begin()
    previous, progress = {}, None
    try:
        previous = lifecycle.stop_on_signals()  # the main thread's only; put back when the run ends
        progress = open_progress(args.progress).start()
        code = _main(args, progress)
    except Exception as exc:  # noqa: BLE001 - every error ends the run with its exit code (jobs/errors.py)
        code, message = outcome(lifecycle.stop_signalled() or exc)
        log.debug("the run failed", exc_info=True)
        log.debug("exit %d: %s", code, message)
        print(f"error: {message}", file=sys.stderr)
        if events is not None:
            events.fail(code, message)
        return code
    finally:
        if progress is not None:
            progress.stop()
        lifecycle.restore_signals(previous)  # a kernel gets its interrupt back
    log.debug("exit %d", code)
    if events is not None:
        if getattr(args, "summary", None) is not None:
            events.complete(args.summary)
        else:  # a failed Spark job (exit 5)
            events.fail(code, getattr(args, "failure", "the job failed"))
    return code


def _main(args, progress):
    if args.remote:
        client_paths_absolute(args)
    settings, options, run, planned, sink, started = _prepare(args, progress)
    if run.repeated is not None:
        return _repeated(args, run)
    if console.under_spark_submit():  # the JVM is this process's parent (never a notebook's kernel)
        lifecycle.watch_parent(run.abandon, exit_code=EXIT_FAILED)
    # a notebook's session is left running; the one started meanwhile (SessionStart) is the run's
    owned = args.remote is not None or started is not None or not classic_session_exists()
    forwarded = {}
    try:
        progress.set_phase("starting Spark")
        spark = started.session() if started is not None else spark_session(settings, args.master, args.remote)
        if owned and not args.remote and threading.current_thread() is threading.main_thread():
            lifecycle.stop_on_signals()  # again: SparkContext took SIGINT (the handlers before the run are put back)
            forwarded = lifecycle.forward_jvm_signals(spark)  # a stop signal to the JVM stops the run as one here
    except BaseException:
        run.abandon()
        raise
    try:
        with RunJobs(spark, args.run) as jobs:  # the run's jobs, under its own tag: the only ones it waits for or stops
            if executors_elsewhere(spark):  # before the stage: a path only this machine has fails in seconds
                check_server_sees(spark, run, planned, options)
            summary = outputs.run_and_publish(spark, planned, run, options, sink, jobs, progress=progress)
    except ReplayError:  # OUT appeared meanwhile or the claim was lost (usage), publishing failed, a stop
        raise
    except Exception as exc:  # noqa: BLE001 - a failed Spark job: a task's own error, or Spark's cause
        log.debug("the job failed", exc_info=True)
        if lifecycle.stop_signalled() is not None:  # a stop py4j made its own error of
            raise lifecycle.stop_signalled() from None
        task_error = carried(exc)
        if task_error is not None:
            raise task_error from None
        args.failure = f"the job failed: {spark_cause(exc)}"
        print(f"error: {args.failure}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        progress.stop()
        if forwarded:
            lifecycle.restore_jvm_signals(spark, forwarded)
        if owned:
            _stop_spark(spark)
    args.summary = summary  # OUT is published: the lineage's COMPLETE event counts its rows
    archive_of_a_whole_run()
    print_quietly(summary_table(summary))  # OUT is published: a stdout closed by its reader changes nothing
    for line in summary_notes(summary):
        print(line, file=sys.stderr)
        log.debug("%s", line)
    if summary["corrupt_items"]:
        print(f"damaged data skipped: {summary['skipped_units']} unit(s) of the subscriptions, "
              f"{summary['corrupt_items']} item(s) audited in {args.out}/audit/corrupt/", file=sys.stderr)
    if summary["consume_queue_audit"] is not None:
        found = summary["consume_queue_audit"]
        print_quietly(f"consume-queue audit: {found} finding(s), in {args.out.rstrip('/')}/audit/consume_queue/"
                      if found else "consume-queue audit: every unit agrees with the commit log, none lacking")
    print_quietly(f"output: {args.out}")
    print_quietly(f"report: {args.out.rstrip('/')}/{outputs.REPORT}")
    return exit_code(summary)


def _repeated(args, run):
    """A retry of the command whose complete output OUT is (jobs/output/command.py): its summary, said to be that
    run's, and that run's exit code (0 for a clean run; 3 or 4 again when it finished with those); nothing run,
    nothing changed."""
    summary = args.summary = run.published_summary()
    print_quietly(summary_table(summary))
    line = (f"output: {args.out} is already the complete output of this same command (run {summary.get('run')}): "
            "nothing was run, nothing changed (a retry of a run that had published; docs/scheduler.md)")
    print_quietly(line)
    log.debug("%s", line)
    return exit_code(summary)


def client_paths_absolute(args: Args) -> None:
    """Over Spark Connect, local paths are made absolute here: the server runs in a directory of its own."""
    local = lambda p: p if "://" in p else os.path.abspath(p)  # noqa: E731
    named = [split_store(value) for value in args.store]
    args.store = [local(uri) if name is None else f"{name}={local(uri)}" for name, uri in named]
    args.out = local(args.out)
    if args.commitlog:
        args.commitlog = ",".join(local(d) for d in commitlog_dirs(args.commitlog))


def executors_elsewhere(spark: SparkSession) -> bool:
    """Whether the session's executors may run on other machines: a Spark Connect server, or a master that is not
    local (YARN, Kubernetes, standalone)."""
    return is_connect(spark) or not cast(str, spark.sparkContext.master).startswith("local")  # a session's: set


def check_server_sees(spark: SparkSession, run: outputs.OutputRun, planned: ClusterPlan, options: JobOptions) -> None:
    """Exit 2, nothing written, when the executors (a Connect server's, a cluster's) cannot see the store or OUT's
    directory at the paths this driver planned with (docs/connect.md)."""
    paths = [("--store", broker.uri) for broker, _ in planned.parts] + \
        [("--commitlog", d) for d in options.commitlog] + \
        [("--out", os.path.dirname(run.tmp_uri.rstrip("/")))]
    unseen = unseen_paths(spark, paths)
    if unseen:
        run.abandon()
        who = "the Spark Connect server does" if is_connect(spark) else \
            f"the executors of master {spark.sparkContext.master} do"
        raise UsageError(f"{who} not see " + ", ".join(f"{n} {p}" for n, p in unseen) +
                         ": store and OUT must be at the same paths on this machine and the executors "
                         "(a shared mount or an object store; docs/connect.md)")


def _stop_spark(spark):
    """Stop the session; a JVM that is already gone (a stopped run) has nothing left to stop."""
    try:
        stop_session(spark)
    except Exception:  # noqa: BLE001 - py4j's errors once the JVM ended
        log.debug("stopping Spark failed", exc_info=True)


if __name__ == "__main__":
    sys.exit(main())
