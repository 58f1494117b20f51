"""Command-line options that say which subscriptions a replay applies: shared by the job (jobs/replay.py)
and by the tool that explains one of its decisions (jobs/explain/__init__.py), so that both read them alike."""
import os
import sys

from jobs.pipeline.units_source import UNITS_FROM
from jobs.settings import CHOICES, DEFAULTS


def add_subscription_arguments(p):
    """--subscriptions, --subscription, --rocketmq-version, --from, --conf, --no-retry, --filter-support-retry."""
    p.add_argument("--subscriptions", action="append", default=[], metavar="FILE",
                   help="subscription file {\"groups\": [...]} (repeatable; later files win)")
    p.add_argument("--subscription", action="append", nargs=4, default=[],
                   metavar=("GROUP", "TOPIC", "TYPE", "EXPRESSION"), help="an ad hoc subscription (repeatable)")
    p.add_argument("--rocketmq-version", choices=CHOICES["rocketmq_version"],
                   help=f"SQL92 dialect (default {DEFAULTS['rocketmq_version']})")
    p.add_argument("--from", dest="start_from", choices=CHOICES["from"],
                   help="earliest, or each group's committed offsets in config/consumerOffset.json")
    p.add_argument("--conf", help="job settings JSON (default conf/replay.json)")
    p.add_argument("--no-retry", action="store_true", help="do not add each group's %%RETRY%% subscription")
    p.add_argument("--filter-support-retry", action="store_true",
                   help="apply the original topic's SQL92 filter on %%RETRY%% topics (broker filterSupportRetry)")


def add_commitlog_argument(p):
    """--commitlog DIR[,DIR...]: where the commit log is when not under --store (schemas/commitlog_files.py);
    --units-from: where the units come from (jobs/pipeline/units_source.py)."""
    p.add_argument("--commitlog", metavar="DIR[,DIR...]",
                   help="the commit log's directories when they are not under --store (storePathCommitLog, "
                        "storePathDLedgerCommitLog, readOnlyCommitLogStorePaths): plain or DLedger files, one log")
    p.add_argument("--units-from", choices=UNITS_FROM, default="auto",
                   help="consume-queue units from the consume queue (files or RocksDB), rebuilt from the commit "
                        "log, or auto (default): the consume queue, rebuilding the queues it lacks")


def commitlog_dirs(text):
    """--commitlog's directories, in the order given."""
    return tuple(d.strip() for d in (text or "").split(",") if d.strip())


def subscription_options(args, settings):
    """The JobOptions fields those arguments decide (None: not given, the settings' value holds), for
    jobs.settings.job_options; a switch that only turns a setting off or on is given as its result."""
    return dict(
        subscription_files=tuple(args.subscriptions),
        ad_hoc=tuple(tuple(s) for s in args.subscription),
        dialect=args.rocketmq_version,
        start_from=args.start_from,
        retry=settings["retry_subscriptions"] and not args.no_retry,
        support_retry=settings["filter_support_retry"] or args.filter_support_retry,
    )


def print_quietly(text):
    """Print to stdout; False when the reader closed it (`| head`): the rest goes nowhere, not into a second
    error when the interpreter flushes stdout at exit. The job and explain end as a Unix tool does then."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return False
    return True
