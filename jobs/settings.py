"""What a run is told, and every default of it, once: the job settings (conf/replay.json or --conf FILE over
DEFAULTS, checked when loaded) and JobOptions, the settings with the command line's or the data source's
choices over them. The job, the data source and explain all build their JobOptions with `job_options`."""
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from filtering.bloom import BROKER_BLOOM_F, BROKER_BLOOM_N
from jobs.output.layouts import NORMALIZED
from jobs.plan.units.choose import UnitsFrom
from jobs.plan.window import Window
from jobs.policy import CorruptPolicy
from schemas.errors import ConfigError

DEFAULTS: dict[str, Any] = {
    "split_size_mb": 128, "bloom_f": BROKER_BLOOM_F, "bloom_n": BROKER_BLOOM_N, "rocketmq_version": "5",
    "from": "earliest", "retry_subscriptions": True, "filter_support_retry": False, "with_body": True,
    "on_corrupt": "fail", "verify_crc": False, "max_body_mb": 64, "timer_overdue_seconds": 300, "spark": {},
    "transaction_check": {},
}


CHOICES = {"rocketmq_version": ("4", "5"), "from": ("earliest", "committed"),
           "on_corrupt": tuple(p.value for p in CorruptPolicy)}


FLAGS = ("retry_subscriptions", "filter_support_retry", "with_body", "verify_crc")
SIZES = ("split_size_mb", "bloom_f", "bloom_n", "max_body_mb", "timer_overdue_seconds")
# the broker's transaction check settings a run may override (the stuck transactions' window; default: the
# store's broker.conf, else RocketMQ's: jobs/ledgers/transactions.py)
TRANSACTION_CHECK = ("transactionTimeOut", "transactionCheckMax", "transactionCheckInterval")
DEFAULT_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", "replay.json")


def load_settings(path: str | None = None) -> dict[str, Any]:
    """DEFAULTS updated by the settings file, each value checked; ConfigError (exit 1) naming the file and the
    key for an unknown key (a typo must not pass silently) or a value of the wrong kind."""
    settings = dict(DEFAULTS)
    path = path or (DEFAULT_FILE if os.path.exists(DEFAULT_FILE) else None)
    if not path:
        return settings
    try:
        with open(path, encoding="utf-8") as f:
            loaded = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(path, f"cannot read job settings: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ConfigError(path, "job settings must be a JSON object")
    unknown = sorted(k for k in loaded if k not in DEFAULTS and not k.startswith("_"))
    if unknown:
        raise ConfigError(path, f"unknown settings {', '.join(unknown)}")
    settings.update({k: v for k, v in loaded.items() if not k.startswith("_")})
    settings["rocketmq_version"] = str(settings["rocketmq_version"])
    for key, allowed in CHOICES.items():
        if settings[key] not in allowed:
            raise ConfigError(path, f"must be {' or '.join(allowed)}, got {settings[key]!r}", key=key)
    for key in FLAGS:
        if not isinstance(settings[key], bool):
            raise ConfigError(path, f"must be true or false, got {settings[key]!r}", key=key)
    for key in SIZES:
        if isinstance(settings[key], bool) or not isinstance(settings[key], int) or settings[key] < 1:
            raise ConfigError(path, f"must be a positive integer, got {settings[key]!r}", key=key)
    if not isinstance(settings["spark"], dict):
        raise ConfigError(path, "must be an object of Spark properties", key="spark")
    check = settings["transaction_check"]
    if not isinstance(check, dict) or any(k not in TRANSACTION_CHECK or isinstance(v, bool) or not isinstance(v, int)
                                          or v < 0 for k, v in check.items()):
        raise ConfigError(path, f"must be an object of {', '.join(TRANSACTION_CHECK)} (integers)",
                          key="transaction_check")
    return settings


@dataclass
class JobOptions:
    """The settings with a run's own choices over them; field defaults are DEFAULTS' (for tests and tools
    that build one directly), a run builds it with `job_options`."""

    store: str | None  # None: explain's, until each broker's store is put in (jobs/explain/__init__.py)
    subscription_files: tuple = ()
    ad_hoc: tuple = ()  # (group, topic, type, expression)
    dialect: str = DEFAULTS["rocketmq_version"]
    start_from: str = DEFAULTS["from"]
    groups: tuple = ()
    topics: tuple = ()
    retry: bool = DEFAULTS["retry_subscriptions"]
    with_body: bool = DEFAULTS["with_body"]
    max_body: int = DEFAULTS["max_body_mb"] << 20  # bytes a compressed body may inflate to
    support_retry: bool = DEFAULTS["filter_support_retry"]
    bloom_f: int = DEFAULTS["bloom_f"]
    bloom_n: int = DEFAULTS["bloom_n"]
    split_size: int = DEFAULTS["split_size_mb"] << 20
    on_corrupt: CorruptPolicy = CorruptPolicy(DEFAULTS["on_corrupt"])
    verify_crc: bool = DEFAULTS["verify_crc"]
    allow_missing: bool = False  # names that match nothing become warnings, not usage errors
    layout: object = NORMALIZED  # --layout: a jobs/output/layouts.py layout (messages once and narrow rows, or wide)
    window: Window = field(default_factory=Window)  # --since/--until, --starting/--ending-offsets
    # a plain read (the data source, a row per message): read every topic's queues, or only those of
    # read_topics when given, whatever the subscriptions need; no subscription is then required
    read_all: bool = False
    read_topics: tuple | None = None
    commitlog: tuple = ()  # --commitlog: the directories of a log kept elsewhere than under the store root
    units_from: UnitsFrom = UnitsFrom.AUTO  # --units-from: where units come from (jobs/plan/units/choose.py)
    audit_consume_queue: bool = False  # --audit-consume-queue: every unit checked against the commit log
    trace_topics: tuple = ()  # --trace-topic: the clients' own trace topics, read besides RMQ_SYS_TRACE_TOPIC
    # a pending timer message due this long before the latest record the run read is overdue (a stuck wheel)
    timer_overdue: int = DEFAULTS["timer_overdue_seconds"] * 1000
    # conf/replay.json's transaction_check: the broker's check settings over broker.conf's (stuck transactions)
    transaction_check: dict = field(default_factory=dict)

    @property
    def skips_damage(self) -> bool:
        """--on-corrupt skip: damaged data is audited and left out; otherwise it stops the run."""
        return self.on_corrupt.skips


def job_options(settings: Mapping[str, Any], store: str | None, **given: Any) -> JobOptions:
    """JobOptions of the settings, with `given` (JobOptions fields; None: not given) over them. A flag the
    command line can only turn on or off is passed as its result (e.g. with_body=settings and not --no-body);
    a choice is given by its name (or as its object) and becomes its object here."""
    known = {f.name for f in fields(JobOptions)}
    unknown = sorted(set(given) - known)
    if unknown:
        raise TypeError(f"job_options: no JobOptions field {', '.join(unknown)}")
    base = dict(
        dialect=settings["rocketmq_version"], start_from=settings["from"], retry=settings["retry_subscriptions"],
        with_body=settings["with_body"], max_body=settings["max_body_mb"] << 20,
        support_retry=settings["filter_support_retry"], bloom_f=settings["bloom_f"], bloom_n=settings["bloom_n"],
        split_size=settings["split_size_mb"] << 20, on_corrupt=settings["on_corrupt"],
        verify_crc=settings["verify_crc"], timer_overdue=settings["timer_overdue_seconds"] * 1000,
        transaction_check=dict(settings["transaction_check"]))
    base.update({k: v for k, v in given.items() if v is not None})
    base["on_corrupt"] = CorruptPolicy(base["on_corrupt"])
    if "units_from" in base:
        base["units_from"] = UnitsFrom(base["units_from"])
    return JobOptions(store=store, **base)
