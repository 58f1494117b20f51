"""Command-line options that say which subscriptions a replay applies: shared by the job (jobs/replay.py)
and by the tool that explains one of its decisions (jobs/explain/__init__.py), so that both read them alike."""
import argparse
import os
import sys

from jobs.errors import UsageError
from jobs.pipeline.units.choose import UNITS_FROM
from jobs.settings import CHOICES, DEFAULTS
from jobs.version import package_version
from schemas.errors import EXIT_USAGE

# RocketMQ's own limits (TopicValidator.TOPIC_MAX_LENGTH, Validators.CHARACTER_MAX_LENGTH): a longer name is
# one no broker holds, so it is a typo or a pasted value, refused before anything runs
TOPIC_MAX_LENGTH, GROUP_MAX_LENGTH = 127, 255
REMOTE = ("://",)  # a URI: its existence is the filesystem's to say, once the store is opened


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments are one line on stderr naming the argument (not the whole usage), exit 2, as every
    other caller's mistake the job and explain refuse."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"error: {message} ({self.prog} --help)\n")


def add_version_argument(p):
    """--version: the package's version, answered by argparse before anything else is read."""
    p.add_argument("--version", action="version", version=f"mqreplay {package_version()}")


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
    --units-from: where the units come from (jobs/pipeline/units/choose.py)."""
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


def check_arguments(args):
    """The caller's mistakes that need no store read, each a UsageError (exit 2) naming its argument: local
    paths that are missing, unreadable or of the wrong kind, an empty --out, group and topic names no broker
    could hold. Remote URIs are checked when opened."""
    if getattr(args, "out", "x").strip() == "":
        raise UsageError("--out is empty: give the output directory")
    for store in args.store if isinstance(args.store, (list, tuple)) else [args.store]:
        _check_path("--store", store, directory=True)
    if args.conf is not None:
        _check_path("--conf", args.conf, directory=False)
    for path in args.subscriptions:
        _check_path("--subscriptions", path, directory=False)
    for directory in commitlog_dirs(args.commitlog):
        _check_path("--commitlog", directory, directory=True)
    for group, topic, _, _ in args.subscription:
        check_name("--subscription GROUP", group, GROUP_MAX_LENGTH)
        check_name("--subscription TOPIC", topic, TOPIC_MAX_LENGTH)
    for flag, limit in (("groups", GROUP_MAX_LENGTH), ("topics", TOPIC_MAX_LENGTH)):
        text = getattr(args, flag, None)
        if text is not None:
            for name in text.split(","):
                check_name(f"--{flag}", name.strip(), limit, listed=True)


def check_name(flag, name, limit, listed=False):
    """A group or topic name a broker could hold: not empty, no comma (the lists' separator), at most
    RocketMQ's length."""
    if not name:
        raise UsageError(f"{flag}: an empty name" + (" (a doubled or trailing comma?)" if listed else ""))
    if "," in name:
        raise UsageError(f"{flag} {name!r}: a comma in a name (--groups and --topics separate names with commas)")
    if len(name) > limit:
        raise UsageError(f"{flag} {name[:40]!r}...: {len(name)} characters, RocketMQ's limit is {limit}")


def _check_path(flag, path, directory):
    if not path or not path.strip():
        raise UsageError(f"{flag} is empty")
    if any(marker in path for marker in REMOTE) and not path.startswith("file://"):
        return
    if directory and "=" in path and not os.path.exists(path):  # --store NAME=URI: a broker's name and store
        path = path.split("=", 1)[1]
        return _check_path(flag, path, directory)
    local = path[len("file://"):] if path.startswith("file://") else path
    kind = "directory" if directory else "file"
    if not os.path.exists(local):
        raise UsageError(f"{flag} {path}: no such {kind}")
    if directory and not os.path.isdir(local):
        raise UsageError(f"{flag} {path} is a file: give a directory")
    if not directory and os.path.isdir(local):
        raise UsageError(f"{flag} {path} is a directory: give a file")
    if not os.access(local, os.R_OK | (os.X_OK if directory else 0)):
        raise UsageError(f"{flag} {path}: not readable (permission denied)")
