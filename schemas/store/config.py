"""The broker's config files (``<storePathRootDir>/config/*.json``, fastjson output) and the project's
subscription file, as plain frozen dataclasses.

fastjson writes integer map keys without quotes (``consumerOffset.json``: ``{"T@G":{0:490,1:477}}``), which
``json.loads`` rejects, so keys are quoted token by token first. Everything else is checked against the
shape RocketMQ writes, and any surprise raises ``ConfigError`` naming the file and the key.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, NamedTuple, Optional

from schemas.errors import ConfigError
from schemas.queues.rocksdb_store import committed_offsets

CONSUMER_FILTER_FILE = "consumerFilter.json"
CONSUMER_OFFSET_FILE = "consumerOffset.json"
TOPICS_FILE = "topics.json"
SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"
EXPRESSION_TYPES = ("TAG", "SQL92", "PYTHON")
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")


# ---------------------------------------------------------------- fastjson text
# One token at a time: a whole string literal (escapes included), an integer, JSON whitespace, any other char.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|-?[0-9]+|[ \t\r\n]+|.', re.S)
_INT = re.compile(r"-?[0-9]+")
_WS = " \t\r\n"


def _quote_int_keys(text: str) -> tuple:
    """Quote bare integer object keys (after ``{`` or ``,`` and before ``:``) outside string literals.

    Returns the new text and the original offsets of the quoted keys (to map error positions back).
    """
    tokens = [m.group() for m in _TOKEN.finditer(text)]
    out, quoted = [], []
    pos, prev = 0, None
    for i, tok in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if nxt and nxt[0] in _WS:
            nxt = tokens[i + 2] if i + 2 < len(tokens) else ""
        if prev in ("{", ",") and nxt == ":" and _INT.fullmatch(tok):
            quoted.append(pos)
            tok = f'"{tok}"'
        out.append(tok)
        if tok[0] not in _WS:
            prev = tok
        pos += len(tokens[i])
    return "".join(out), quoted


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(path, f"not UTF-8 (byte offset {e.start})") from None


def load_fastjson(path: str | os.PathLike[str]) -> object:
    """Parse a file fastjson wrote; an empty file gives None (the broker treats it as absent)."""
    path = Path(path)
    text = _read_text(path)
    if not text.strip(_WS):
        return None
    fixed, quoted = _quote_int_keys(text)
    try:
        return json.loads(fixed)
    except json.JSONDecodeError as e:
        # Each quoted key added two chars; count those before the error to find the original offset.
        pos, shift = e.pos, 0
        for start in quoted:
            if start + 2 * shift < pos:
                shift += 1
        orig = max(0, pos - 2 * shift)
        line = text.count("\n", 0, orig) + 1
        column = orig - (text.rfind("\n", 0, orig) + 1) + 1
        raise ConfigError(path, f"malformed JSON: {e.msg}", line=line, column=column) from None


# ---------------------------------------------------------------- typed access
_MISSING = object()
_KINDS = {int: "an integer", str: "a string", bool: "a boolean", dict: "an object", list: "an array"}


def _kind_ok(value, kind) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _get(path, obj: dict, where: str, key: str, kind, default=_MISSING, nullable: bool = False):
    """``obj[key]`` checked to be ``kind``; absent or null gives ``default`` (or None when nullable)."""
    name = f"{where}.{key}" if where else key
    value = obj.get(key)
    if value is None:
        if nullable:
            return None
        if default is not _MISSING:
            return default
        raise ConfigError(path, "required key is missing" if key not in obj else "must not be null", key=name)
    if not _kind_ok(value, kind):
        raise ConfigError(path, f"expected {_KINDS[kind]}, got {type(value).__name__}", key=name)
    return value


def _int_list(path, values: list, name: str) -> tuple:
    for i, v in enumerate(values):
        if not _kind_ok(v, int):
            raise ConfigError(path, f"expected an integer, got {type(v).__name__}", key=f"{name}[{i}]")
    return tuple(values)


def _root_table(path, table_key: str) -> dict:
    """The top-level map a ConfigManager persists; an empty file is an empty map."""
    root = load_fastjson(path)
    if root is None:
        return {}
    if not isinstance(root, dict):
        raise ConfigError(path, f"expected a JSON object at the top, got {type(root).__name__}")
    if table_key not in root:
        raise ConfigError(path, "required key is missing (is this the right file?)", key=table_key)
    return _get(path, root, "", table_key, dict, default={})


def _entry(path, value, name: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected an object, got {type(value).__name__}", key=name)
    return value


# ---------------------------------------------------------------- consumerFilter.json
@dataclass(frozen=True)
class ConsumerFilterData:
    """One SQL92 registration as ``ConsumerFilterManager`` persisted it (only non-TAG ones are stored)."""

    topic: str
    consumer_group: str
    expression: str
    expression_type: str
    born_time: int  # ms; messages stored before it carry no bit for this group (isMsgInLive)
    dead_time: int
    dead: bool
    client_version: int
    bloom_bit_pos: tuple | None
    bloom_bit_num: int | None


def load_consumer_filters(path: str | os.PathLike[str]) -> list[ConsumerFilterData]:
    """``consumerFilter.json``: topic -> groupFilterData -> group -> ConsumerFilterData, in file order.

    Values are kept as written; a restarting broker would additionally mark every entry dead.
    """
    out = []
    for topic_key, by_topic in _root_table(path, "filterDataByTopic").items():
        where = f"filterDataByTopic.{topic_key}"
        by_topic = _entry(path, by_topic, where)
        topic = _get(path, by_topic, where, "topic", str, default=topic_key)
        groups = _get(path, by_topic, where, "groupFilterData", dict, default={})
        for group_key, data in groups.items():
            if data is None:  # ConsumerFilterManager.decode skips null entries too
                continue
            w = f"{where}.groupFilterData.{group_key}"
            data = _entry(path, data, w)
            bloom = _get(path, data, w, "bloomFilterData", dict, nullable=True)
            bit_pos = bit_num = None
            if bloom is not None:
                bit_pos = _int_list(path, _get(path, bloom, f"{w}.bloomFilterData", "bitPos", list),
                                    f"{w}.bloomFilterData.bitPos")
                bit_num = _get(path, bloom, f"{w}.bloomFilterData", "bitNum", int)
            born = _get(path, data, w, "bornTime", int)
            dead_time = _get(path, data, w, "deadTime", int, default=0)
            out.append(ConsumerFilterData(
                topic=_get(path, data, w, "topic", str, default=topic),
                consumer_group=_get(path, data, w, "consumerGroup", str, default=group_key),
                expression=_get(path, data, w, "expression", str),
                expression_type=_get(path, data, w, "expressionType", str),
                born_time=born,
                dead_time=dead_time,
                dead=_get(path, data, w, "dead", bool, default=dead_time >= born),  # Java: isDead()
                client_version=_get(path, data, w, "clientVersion", int, default=0),
                bloom_bit_pos=bit_pos,
                bloom_bit_num=bit_num,
            ))
    return out


# ---------------------------------------------------------------- consumerOffset.json
def load_consumer_offsets(path: str | os.PathLike[str]) -> dict[tuple[str, str], dict[int, int]]:
    """``consumerOffset.json``: {(topic, group): {queue_id: next offset to consume}}."""
    out = {}
    for key, queues in _root_table(path, "offsetTable").items():
        name = f"offsetTable.{key}"
        parts = key.split("@")
        if len(parts) != 2 or not all(parts):
            raise ConfigError(path, "expected 'topic@group'", key=name)
        queues = _entry(path, queues, name)
        table = {}
        for qid, offset in queues.items():
            if not _INT.fullmatch(qid):
                raise ConfigError(path, "queue id is not an integer", key=f"{name}.{qid}")
            table[int(qid)] = _get(path, queues, name, qid, int)
        out[(parts[0], parts[1])] = table
    return out


# ---------------------------------------------------------------- topics.json
@dataclass(frozen=True)
class TopicConfig:
    """``TopicConfig`` (defaults are Java's field initialisers)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict = field(default_factory=dict)


def load_topics(path: str | os.PathLike[str]) -> dict[str, TopicConfig]:
    """``topics.json``: topic name -> TopicConfig."""
    out = {}
    for key, data in _root_table(path, "topicConfigTable").items():
        w = f"topicConfigTable.{key}"
        data = _entry(path, data, w)
        filter_type = _get(path, data, w, "topicFilterType", str, default="SINGLE_TAG")
        if filter_type not in TOPIC_FILTER_TYPES:
            raise ConfigError(path, f"unknown TopicFilterType {filter_type!r}", key=f"{w}.topicFilterType")
        out[key] = TopicConfig(
            topic_name=_get(path, data, w, "topicName", str, default=key),
            read_queue_nums=_get(path, data, w, "readQueueNums", int, default=16),
            write_queue_nums=_get(path, data, w, "writeQueueNums", int, default=16),
            perm=_get(path, data, w, "perm", int, default=6),
            topic_filter_type=filter_type,
            topic_sys_flag=_get(path, data, w, "topicSysFlag", int, default=0),
            order=_get(path, data, w, "order", bool, default=False),
            attributes=dict(_get(path, data, w, "attributes", dict, default={})),
        )
    return out


# ---------------------------------------------------------------- subscriptionGroup.json
class SimpleSubscription(NamedTuple):
    """One ``SimpleSubscriptionData`` of a group's static ``subscriptionDataSet`` (5.1.1+)."""

    topic: str
    expression_type: str  # "TAG" when null or empty, as ExpressionType.isTagType reads it
    expression: str | None


@dataclass(frozen=True)
class SubscriptionGroupConfig:
    """``SubscriptionGroupConfig`` (defaults are Java's field initialisers)."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    consume_message_orderly: bool = False
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    group_sys_flag: int = 0
    consume_timeout_minute: int = 15
    subscriptions: list = field(default_factory=list)
    attributes: dict = field(default_factory=dict)


_GROUP_FIELDS = (  # (json key, dataclass field, type)
    ("consumeEnable", "consume_enable", bool), ("consumeFromMinEnable", "consume_from_min_enable", bool),
    ("consumeBroadcastEnable", "consume_broadcast_enable", bool),
    ("consumeMessageOrderly", "consume_message_orderly", bool), ("retryQueueNums", "retry_queue_nums", int),
    ("retryMaxTimes", "retry_max_times", int), ("brokerId", "broker_id", int),
    ("whichBrokerWhenConsumeSlowly", "which_broker_when_consume_slowly", int),
    ("notifyConsumerIdsChangedEnable", "notify_consumer_ids_changed_enable", bool),
    ("groupSysFlag", "group_sys_flag", int), ("consumeTimeoutMinute", "consume_timeout_minute", int),
)


def _simple_subscriptions(path, data: dict, w: str) -> list:
    out = []
    for i, sub in enumerate(_get(path, data, w, "subscriptionDataSet", list, default=[])):
        sw = f"{w}.subscriptionDataSet[{i}]"
        sub = _entry(path, sub, sw)
        out.append(SimpleSubscription(
            topic=_get(path, sub, sw, "topic", str),
            expression_type=_get(path, sub, sw, "expressionType", str, default="") or "TAG",
            expression=_get(path, sub, sw, "expression", str, nullable=True),
        ))
    return out


def load_subscription_groups(path: str | os.PathLike[str]) -> dict[str, SubscriptionGroupConfig]:
    """``subscriptionGroup.json``: group name -> SubscriptionGroupConfig."""
    out = {}
    for key, data in _root_table(path, "subscriptionGroupTable").items():
        w = f"subscriptionGroupTable.{key}"
        data = _entry(path, data, w)
        defaults = SubscriptionGroupConfig(group_name=key)
        values = {attr: _get(path, data, w, jkey, kind, default=getattr(defaults, attr))
                  for jkey, attr, kind in _GROUP_FIELDS}
        out[key] = SubscriptionGroupConfig(
            group_name=_get(path, data, w, "groupName", str, default=key),
            subscriptions=_simple_subscriptions(path, data, w),
            attributes=dict(_get(path, data, w, "attributes", dict, default={})),
            **values,
        )
    return out


# ---------------------------------------------------------------- registrations (the project's file)
@dataclass(frozen=True)
class Registration:
    """A group's subscription to one topic, whatever file it came from (``source``)."""

    group: str
    topic: str
    expression_type: str  # TAG, SQL92 or PYTHON
    expression: str
    born_time: int | None  # SQL92: when the broker registered it (bloom bits only after); else None
    bloom_bit_pos: tuple | None
    source: str


def _registration(path, entry, w: str) -> Registration:
    entry = _entry(path, entry, w)
    group = _get(path, entry, w, "group", str)
    topic = _get(path, entry, w, "topic", str)
    for key, value in (("group", group), ("topic", topic)):
        if not value:
            raise ConfigError(path, "must not be empty", key=f"{w}.{key}")
    etype = _get(path, entry, w, "expressionType", str)
    if etype not in EXPRESSION_TYPES:
        raise ConfigError(path, f"unknown expressionType {etype!r} (expected one of "
                                f"{', '.join(EXPRESSION_TYPES)})", key=f"{w}.expressionType")
    expression = _get(path, entry, w, "expression", str)
    # Expressions are compiled by the job: one that does not parse fails that group only
    # (SUBSCRIPTION_PARSE_FAILED), so it is not checked here.
    bits = _get(path, entry, w, "bloomBitPos", list, nullable=True)
    return Registration(
        group=group, topic=topic, expression_type=etype, expression=expression,
        born_time=_get(path, entry, w, "bornTime", int, nullable=True),
        bloom_bit_pos=None if bits is None else _int_list(path, bits, f"{w}.bloomBitPos"),
        source=str(path),
    )


def load_registrations(path: str | os.PathLike[str]) -> list[Registration]:
    """The subscription file: ``{"groups": [{group, topic, expressionType, expression, bornTime?}]}``.

    One subscription per (group, topic), as a client keeps it; a repeated pair is an error.
    """
    root = load_fastjson(path)
    if not isinstance(root, dict):
        raise ConfigError(path, f"expected a JSON object at the top, got {type(root).__name__}")
    out: list = []
    seen: dict = {}
    for i, entry in enumerate(_get(path, root, "", "groups", list)):
        reg = _registration(path, entry, f"groups[{i}]")
        first = seen.setdefault((reg.group, reg.topic), i)
        if first != i:
            raise ConfigError(path, f"group {reg.group!r} subscribes to topic {reg.topic!r} twice "
                                    f"(also groups[{first}])", key=f"groups[{i}]")
        out.append(reg)
    return out


# ---------------------------------------------------------------- a whole store
@dataclass(frozen=True)
class StoreConfig:
    """Everything under ``<storePathRootDir>/config/`` that the replay needs."""

    consumer_filters: list
    consumer_offsets: dict
    topics: dict
    subscription_groups: dict
    paths: dict  # file name -> path it was read from (absent files are left out)
    damaged: tuple = ()  # names of the files read as absent because they are damaged (--on-corrupt skip)

    def registrations(self) -> list[Registration]:
        """Registrations the broker itself knows: SQL92 filters and 5.1.1+ static group subscriptions."""
        out = []
        for fd in self.consumer_filters:
            out.append(Registration(fd.consumer_group, fd.topic, fd.expression_type, fd.expression,
                                    fd.born_time, fd.bloom_bit_pos, self.paths[CONSUMER_FILTER_FILE]))
        for group in self.subscription_groups.values():
            for sub in group.subscriptions:
                expression = sub.expression
                if sub.expression_type == "TAG" and expression is None:
                    expression = "*"  # FilterAPI: a null TAG subscription means all
                out.append(Registration(group.group_name, sub.topic, sub.expression_type, expression,
                                        None, None, self.paths[SUBSCRIPTION_GROUP_FILE]))
        return out


def _present(path: Path):
    """The file a ConfigManager would load: the file, else its ``.bak`` when the file is missing or empty."""
    for candidate in (path, path.with_name(path.name + ".bak")):
        if candidate.is_file() and candidate.stat().st_size > 0:
            return candidate
    return None


def load_store_config(store_dir: str | os.PathLike[str], absent: Collection[str] = (),
                      needed: Optional[Collection[str]] = None) -> StoreConfig:
    """Load ``<store_dir>/config/``; missing files count as empty, a malformed present file is an error.

    The consumer offsets of a broker that keeps its config in RocksDB (config/rdb/, config/consumerOffsets/:
    schemas/queues/rocksdb_store.py) are read from there, before consumerOffset.json.

    absent: paths of files to read as missing (malformed ones that --on-corrupt skip audited); needed: the
    names of the files to parse (default all): a run parses only those it uses, so a malformed file it does not
    read (topics.json for a replay) cannot stop it."""
    store_dir = Path(store_dir)
    if not store_dir.is_dir():
        raise ConfigError(store_dir, "store directory does not exist")
    config = store_dir / "config"
    loaders = {CONSUMER_FILTER_FILE: (load_consumer_filters, list),
               CONSUMER_OFFSET_FILE: (load_consumer_offsets, dict),
               TOPICS_FILE: (load_topics, dict),
               SUBSCRIPTION_GROUP_FILE: (load_subscription_groups, dict)}
    values: dict[str, Any] = {}
    paths: dict[str, str] = {}
    damaged: list[str] = []
    for name, (load, empty) in loaders.items():
        found = _present(config / name) if needed is None or name in needed else None
        if found is not None and str(found) in absent:
            found = None
            damaged.append(name)
        values[name] = load(found) if found else empty()
        if found:
            paths[name] = str(found)
    rocks = committed_offsets(config) if needed is None or CONSUMER_OFFSET_FILE in needed else None
    if rocks is not None:  # a 5.2+ broker with its config in RocksDB: the offsets are there, not in the JSON
        paths[CONSUMER_OFFSET_FILE], values[CONSUMER_OFFSET_FILE] = rocks
    return StoreConfig(values[CONSUMER_FILTER_FILE], values[CONSUMER_OFFSET_FILE], values[TOPICS_FILE],
                       values[SUBSCRIPTION_GROUP_FILE], paths, tuple(damaged))
