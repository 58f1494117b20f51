"""Command-line options that say which subscriptions a replay applies: shared by the job (jobs/replay.py)
and by the tool that explains one of its decisions (jobs/explain/__init__.py), so that both read them alike."""


def add_subscription_arguments(p):
    """--subscriptions, --subscription, --rocketmq-version, --from, --conf, --no-retry, --filter-support-retry."""
    p.add_argument("--subscriptions", action="append", default=[], metavar="FILE",
                   help="subscription file {\"groups\": [...]} (repeatable; later files win)")
    p.add_argument("--subscription", action="append", nargs=4, default=[],
                   metavar=("GROUP", "TOPIC", "TYPE", "EXPRESSION"), help="an ad hoc subscription (repeatable)")
    p.add_argument("--rocketmq-version", choices=["4", "5"], help="SQL92 dialect (default 5)")
    p.add_argument("--from", dest="start_from", choices=["earliest", "committed"],
                   help="earliest, or each group's committed offsets in config/consumerOffset.json")
    p.add_argument("--conf", help="job settings JSON (default conf/replay.json)")
    p.add_argument("--no-retry", action="store_true", help="do not add each group's %%RETRY%% subscription")
    p.add_argument("--filter-support-retry", action="store_true",
                   help="apply the original topic's SQL92 filter on %%RETRY%% topics (broker filterSupportRetry)")


def add_commitlog_argument(p):
    """--commitlog DIR[,DIR...]: where the commit log is when not under --store (schemas/commitlog_files.py)."""
    p.add_argument("--commitlog", metavar="DIR[,DIR...]",
                   help="the commit log's directories when they are not under --store (storePathCommitLog, "
                        "storePathDLedgerCommitLog, readOnlyCommitLogStorePaths): plain or DLedger files, one log")


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


# 2001-01-01T00:00:00Z in epoch ms: no broker stored a message before it (RocketMQ began in 2012), while an epoch
# number in seconds of any year until 2286 is smaller, so a number below it can only be seconds (or a typo)
FIRST_STORE_TIME = 978307200000


def parse_store_time(text):
    """A store time as epoch milliseconds: digits are epoch ms, anything else ISO-8601 with an offset
    (`2026-11-21T12:57:15.400+08:00`, or `Z`); ValueError otherwise, and for a number before 2001, which
    would silently put the window's bound in 1970."""
    from datetime import datetime, timezone

    text = text.strip()
    if text.lstrip("-").isdigit():
        value = int(text)
        if value < FIRST_STORE_TIME:
            raise ValueError(_before_any_store(text, value))
        return value
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise ValueError(f"{text!r} is neither epoch milliseconds nor an ISO-8601 time") from None
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset (write e.g. {text}+08:00 or {text}Z)")
    delta = moment - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _before_any_store(text, value):
    """Why an epoch number before 2001 is refused, with the milliseconds meant when it reads as seconds."""
    from datetime import datetime, timedelta, timezone

    if value < 0:
        return f"{text} is before 1970 in epoch milliseconds: give epoch milliseconds or ISO-8601 with an offset"
    day = (datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=value)).date()
    if FIRST_STORE_TIME <= value * 1000 < 10 ** 13:  # seconds of 2001 to 2286
        return f"{text} reads as {day} in epoch milliseconds: did you mean seconds? write {value * 1000}"
    return f"{text} reads as {day} in epoch milliseconds, before any broker stored a message: give epoch " \
           "milliseconds or ISO-8601 with an offset"


def print_quietly(text):
    """Print to stdout; False when the reader closed it (`| head`): the rest goes nowhere, not into a second
    error when the interpreter flushes stdout at exit. The job and explain end as a Unix tool does then."""
    import os
    import sys

    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return False
    return True
