"""The command lines of the job (jobs/replay.py), explain (jobs/explain/__init__.py) and the lake's upkeep
(jobs/maintain.py): every option is
defined and read back here, and no module below jobs/ sees an argparse namespace. The options both share
(subscriptions, commit log, units source) are defined once, so that both read them alike."""
import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from jobs.errors import UsageError
from jobs.output.layouts import LAYOUTS, NORMALIZED
from jobs.plan.units.choose import UNITS_FROM, UnitsFrom
from jobs.plan.window import Window, parse_window
from jobs.runtime.progress import MODES
from jobs.settings import CHOICES, DEFAULTS, JobOptions, job_options, load_settings
from jobs.sinks.iceberg.catalog_wait import DEFAULT_WAIT
from jobs.sinks.iceberg.tables import DEFAULT_NAMESPACE, CatalogArgs
from jobs.sinks.kinds import SINKS, ParquetSink, SinkChoice
from jobs.version import package_version
from schemas.errors import EXIT_USAGE
from schemas.store.dump import DUMPS

# RocketMQ's own limits (TopicValidator.TOPIC_MAX_LENGTH, Validators.CHARACTER_MAX_LENGTH): a longer name is
# one no broker holds, so it is a typo or a pasted value, refused before anything runs
TOPIC_MAX_LENGTH, GROUP_MAX_LENGTH = 127, 255
REMOTE = ("://",)  # a URI: its existence is the filesystem's to say, once the store is opened
# the first line of each tool's --help
REPLAY = "spark-submit entry point: replay a RocketMQ broker store and re-apply its server-side filtering."
MAINTAIN = "python -m jobs.maintain: the upkeep of an Iceberg lake the job commits to (docs/iceberg.md)."
DEFAULT_ORPHANS = "1d"  # jobs.maintain removes unreferenced files this old: a night committing now is never touched
EXPLAIN = "Explain one decision of the replay: why group G did (or did not) receive one message of topic T."

Args = argparse.Namespace  # a parsed command line, as the entry points pass it on


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments are one line on stderr naming the argument (not the whole usage), exit 2, as every
    other caller's mistake the job and explain refuse."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {message} ({self.prog} --help)\n")


# `--starting-offsets iceberg`: each queue from where the lake's ranges of the run's groups end (args.continue_lake)
CONTINUE_LAKE = "iceberg"


def add_version_argument(p: argparse.ArgumentParser) -> None:
    """--version: the package's version, answered by argparse before anything else is read."""
    p.add_argument("--version", action="version", version=f"mqreplay {package_version()}")


def add_subscription_arguments(p: argparse.ArgumentParser) -> None:
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


def add_commitlog_argument(p: argparse.ArgumentParser) -> None:
    """--commitlog DIR[,DIR...]: where the commit log is when not under --store (schemas/log/files.py);
    --units-from: where the units come from (jobs/plan/units/choose.py)."""
    p.add_argument("--commitlog", metavar="DIR[,DIR...]",
                   help="the commit log's directories when they are not under --store (storePathCommitLog, "
                        "storePathDLedgerCommitLog, readOnlyCommitLogStorePaths): plain or DLedger files, one log")
    p.add_argument("--units-from", choices=UNITS_FROM, default=UnitsFrom.AUTO.value,
                   help="consume-queue units from the consume queue (files or RocksDB), rebuilt from the commit "
                        "log, or auto (default): the consume queue, rebuilding the queues it lacks")


def add_window_arguments(p: argparse.ArgumentParser) -> None:
    """--since, --until, --starting-offsets, --ending-offsets (read back by window_of)."""
    p.add_argument("--since", metavar="T", help="first store time (epoch ms, from 2001 on, or ISO-8601 with an offset)")
    p.add_argument("--until", metavar="T", help="store time the window ends before (exclusive)")
    p.add_argument("--starting-offsets", metavar="JSON|FILE",
                   help='first queue offsets {"Topic": {"0": 23}} (-2 earliest, -1 latest), e.g. a last '
                        "run's OUT/offsets.json")
    p.add_argument("--ending-offsets", metavar="JSON|FILE", help="exclusive end queue offsets, same shape")


def window_of(args: argparse.Namespace, starting: str | None = None) -> Window:
    """parse_window of the arguments add_window_arguments added (offsets per topic, or per broker); `starting`:
    the starting offsets the run found itself (`--starting-offsets iceberg`: where the lake's ranges end), in
    place of the argument's word."""
    return parse_window(args.since, args.until, args.starting_offsets if starting is None else starting,
                        args.ending_offsets, brokers=True)


def parse_replay_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The job's command line (jobs/replay.py), parsed; its checks that need no store are check_arguments."""
    p = OneLineParser(prog="replay.py", description=REPLAY)
    add_version_argument(p)
    p.add_argument("--store", action="append", default=[],
                   help="the broker's storePathRootDir (path or URI); NAME=STORE, repeatable: the brokers of a "
                        "cluster, every output row naming its broker")
    p.add_argument("--brokers", metavar="FILE", help="a file of the brokers, one NAME=STORE a line")
    p.add_argument("--out", required=True, help="output directory (path or URI); must not exist")
    add_commitlog_argument(p)
    add_subscription_arguments(p)
    add_window_arguments(p)
    p.add_argument("--groups", help="comma-separated groups to replay (default all)")
    p.add_argument("--topics", help="comma-separated topics to replay (default all)")
    p.add_argument("--no-body", action="store_true", help="leave message bodies out of the output")
    p.add_argument("--on-corrupt", choices=CHOICES["on_corrupt"], help="stop on damaged data, or audit and skip it")
    p.add_argument("--verify-crc", action="store_true", help="check every body's CRC32")
    p.add_argument("--audit-consume-queue", action="store_true",
                   help="check every unit of the run's queues against the commit log, and find the units it "
                        "lacks: rows of OUT/audit/consume_queue/")
    p.add_argument("--trace-topic", action="append", default=[], metavar="NAME",
                   help="a trace topic of the clients' own (customizedTraceTopic), read besides RMQ_SYS_TRACE_TOPIC: "
                        "OUT/traces/ and OUT/consumption/; repeatable")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT (once the new one is complete)")
    p.add_argument("--allow-missing", action="store_true",
                   help="topics and groups that match nothing are warnings, not errors (nightly runs)")
    p.add_argument("--clean-stale", action="store_true",
                   help="remove the OUT.tmp-* directories that dead runs left beside OUT")
    p.add_argument("--master", help="Spark master when not run by spark-submit (default local[*])")
    p.add_argument("--remote", help="run as a Spark Connect client of this server (sc://HOST:PORT): it must see "
                                    "--store and --out at the same paths as this machine (docs/connect.md)")
    p.add_argument("--layout", choices=list(LAYOUTS), default=NORMALIZED.name,
                   help="normalized: messages/ once, narrow matched/ rows; wide: every column in matched/ rows")
    p.add_argument("--sink", choices=list(SINKS), default=ParquetSink.name,
                   help="parquet: the outputs under OUT; iceberg: the answer committed to Iceberg tables (OUT keeps "
                        "the summary, offsets.json and the report); noop: run everything, write nothing (benchmarks)")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE,
                   help=f"--sink iceberg: the tables' namespace (default {DEFAULT_NAMESPACE})")
    p.add_argument("--catalog", help="--sink iceberg: a catalog by name from pyiceberg's configuration (REST, Hive, "
                                     "Glue, SQL)")
    p.add_argument("--catalog-uri", help="--sink iceberg: the embedded SQL catalog, sqlite:///PATH")
    p.add_argument("--warehouse", help="--sink iceberg with --catalog-uri: where the tables' files go (path or URI)")
    p.add_argument("--catalog-wait", metavar="DURATION", default=DEFAULT_WAIT,
                   help=f"--sink iceberg: how long a busy catalog is waited for, s/m/h/d (default {DEFAULT_WAIT})")
    p.add_argument("--progress", choices=MODES, default="auto",
                   help="tty: a line redrawn every second; log: a line every 30 s; auto: tty on a terminal")
    args = p.parse_args(argv)
    args.continue_lake = args.starting_offsets == CONTINUE_LAKE  # the one place this choice's name is compared
    return args


def sink_choice(args: argparse.Namespace) -> SinkChoice:
    """--sink, --layout, the catalog's arguments and `--starting-offsets iceberg` as the objects the run asks
    (jobs/sinks/kinds.py SinkChoice): each name looked up once, here."""
    return SinkChoice(SINKS[args.sink], LAYOUTS[args.layout], catalog_args(args), args.continue_lake)


def catalog_args(args: argparse.Namespace) -> CatalogArgs:
    """The catalog's arguments of a command line (the job's --sink iceberg, jobs.maintain's), not yet checked."""
    return CatalogArgs(args.namespace, args.catalog, args.catalog_uri, args.warehouse, args.catalog_wait)


def parse_explain_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """explain's command line (jobs/explain/__init__.py), parsed and checked: one question, by position,
    message id or key."""
    p = OneLineParser(prog="python -m jobs.explain", description=EXPLAIN)
    p.add_argument("--store", action="append", required=True,
                   help="the broker's storePathRootDir (path or URI); NAME=STORE, repeatable: a cluster's brokers")
    p.add_argument("--broker", help="with several brokers: the one whose --queue-id and --queue-offset are meant "
                                    "(a --msg-id names its broker by its store host: each is tried)")
    add_commitlog_argument(p)
    add_subscription_arguments(p)
    p.add_argument("--group", help="the consumer group (with --key: only its verdicts)")
    p.add_argument("--topic", help="the topic (a group's retry topic is %%RETRY%%<group>; with --key: only its "
                                   "messages; with --msg-id: the record's own when not given)")
    p.add_argument("--key", help="find the messages carrying this key (a KEYS token or the UNIQ_KEY), in every "
                                 "topic unless --topic, with every subscribed group's verdict")
    p.add_argument("--queue-id", type=int, help="the unit's queue id (with --queue-offset)")
    p.add_argument("--queue-offset", type=int, help="the unit's index in its consume queue")
    p.add_argument("--msg-id", help="the message's offsetMsgId (store host and commit-log offset, 32 or 56 hex)")
    p.add_argument("--since", help="window start, epoch ms (from 2001 on) or ISO-8601 with an offset (inclusive)")
    p.add_argument("--until", help="window end, epoch ms (from 2001 on) or ISO-8601 with an offset (exclusive)")
    p.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    args = p.parse_args(argv)
    try:
        args.window = parse_window(args.since, args.until)
    except UsageError as exc:
        p.error(str(exc))
    if args.key is not None:
        if args.queue_id is not None or args.queue_offset is not None or args.msg_id is not None:
            p.error("--key finds messages itself: give no --queue-id, --queue-offset or --msg-id with it")
        return args
    missing = [f for f, v in (("--group", args.group), ("--topic", args.topic)) if v is None
               and not (f == "--topic" and args.msg_id is not None)]  # an offset msg id names its topic
    if missing:
        p.error(f"the following arguments are required: {', '.join(missing)} (or --key)")
    by_position = args.queue_id is not None or args.queue_offset is not None
    if by_position == (args.msg_id is not None) or (by_position and None in (args.queue_id, args.queue_offset)):
        p.error("give either --queue-id and --queue-offset, or --msg-id")
    return args


@dataclass(frozen=True)
class ExplainRequest:
    """explain's command line as what explain asks (jobs/explain/__init__.py): the stores, the options of the
    run it explains (the settings with the command line's choices over them; the store filled in per broker) and
    the one question, by position, message id or key."""

    stores: tuple  # --store, each STORE or NAME=STORE (jobs/plan/brokers.brokers_of)
    commitlog: str  # --commitlog as given
    options: JobOptions
    window: Window  # jobs/plan/window.Window of --since/--until
    group: str | None = None
    topic: str | None = None
    key: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    msg_id: str | None = None
    broker: str | None = None  # --broker: with several, the one whose queue is meant
    json: bool = False


def explain_request(args: argparse.Namespace) -> ExplainRequest:
    """The ExplainRequest of parse_explain_args' namespace; loads the settings (--conf: ConfigError)."""
    settings = load_settings(args.conf)
    options = job_options(settings, None, commitlog=commitlog_dirs(args.commitlog), units_from=args.units_from,
                          **subscription_options(args, settings))
    return ExplainRequest(tuple(args.store), args.commitlog, options, args.window, args.group, args.topic, args.key,
                          args.queue_id, args.queue_offset, args.msg_id, args.broker, args.json)


@dataclass(frozen=True)
class Upkeep:
    """jobs.maintain's command line as the steps it asks (durations as given: jobs/maintain.py reads them)."""

    catalog: CatalogArgs
    register_existing: bool
    compact: bool
    expire_older_than: str  # None: no snapshot expired
    orphans_older_than: str


def parse_dump_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """`python -m jobs.dump`'s command line (schemas/store/dump.py's dumps)."""
    p = argparse.ArgumentParser(prog="python -m jobs.dump", description="Print a store as JSON lines")
    p.add_argument("store", help="a broker's storePathRootDir")
    p.add_argument("what", choices=DUMPS)
    p.add_argument("--no-body", action="store_true", help="leave message bodies out")
    p.add_argument("--commitlog", metavar="DIR[,DIR...]", default="",
                   help="the commit log's directories when they are not under STORE_DIR")
    return p.parse_args(argv)


def parse_maintain_args(argv: Sequence[str] | None) -> Upkeep:
    """The lake's upkeep's command line (jobs/maintain.py), as its Upkeep."""
    p = OneLineParser(prog="python -m jobs.maintain", description=MAINTAIN)
    add_version_argument(p)
    p.add_argument("--catalog", help="a catalog by name from pyiceberg's configuration (REST, Hive, Glue, SQL)")
    p.add_argument("--catalog-uri", help="the embedded SQL catalog, sqlite:///PATH")
    p.add_argument("--warehouse", help="with --catalog-uri: where the tables' files are (path or URI)")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE,
                   help=f"the tables' namespace (default {DEFAULT_NAMESPACE})")
    p.add_argument("--register-existing", action="store_true",
                   help="register the namespace's tables the warehouse holds and the catalog lacks (a lost catalog)")
    p.add_argument("--compact", action="store_true", help="rewrite each table's data files into one per partition")
    p.add_argument("--expire-snapshots-older-than", metavar="DURATION",
                   help="expire snapshots older than this, s/m/h/d (the current one is kept)")
    p.add_argument("--remove-orphans-older-than", metavar="DURATION", default=DEFAULT_ORPHANS,
                   help=f"remove files no snapshot references once older than this (default {DEFAULT_ORPHANS})")
    p.add_argument("--catalog-wait", metavar="DURATION", default=DEFAULT_WAIT,
                   help=f"how long a busy catalog is waited for (default {DEFAULT_WAIT})")
    args = p.parse_args(argv)
    return Upkeep(catalog_args(args), args.register_existing, args.compact, args.expire_snapshots_older_than,
                  args.remove_orphans_older_than)


def commitlog_dirs(text: str | None) -> tuple[str, ...]:
    """--commitlog's directories, in the order given."""
    return tuple(d.strip() for d in (text or "").split(",") if d.strip())


def subscription_options(args: argparse.Namespace, settings: Mapping[str, Any]) -> dict[str, Any]:
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


def print_quietly(text: str) -> bool:
    """Print to stdout; False when the reader closed it (`| head`): the rest goes nowhere, not into a second
    error when the interpreter flushes stdout at exit. The job and explain end as a Unix tool does then."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return False
    return True


def check_arguments(args: argparse.Namespace) -> None:
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


def check_name(flag: str, name: str, limit: int, listed: bool = False) -> None:
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
