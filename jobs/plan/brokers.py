"""The brokers of a run: `--store NAME=URI` (repeatable), `--brokers FILE` (a NAME=URI a line), or one bare
`--store URI`, named from its store. A cluster's brokers all number their queues from 0 and their commit logs
from offset 0, so every output row names its broker; two names for one store, or one name for two, would
make rows that cannot be told apart, and are refused before anything is read beyond the stores' heads.

A value is NAME=URI when it holds `=` and the text before the first `=` is no path or URI of its own (no `:`,
not starting with `/`, `.` or `~`): `/data/date=2026/store` and `s3://b/s?endpoint_override=...` stay bare
stores, `broker-a=/data/a/store` is named, and `a/b=/x` is a name holding `/`, `a=b=/x` one holding `=`
(both refused; write `./a/b=/x` for the relative path).

This is where a run, explain and the data source turn a store's URI (and --commitlog's) into a pyarrow
(filesystem, path) pair, once per broker; every module below takes the pair (a Broker), never a URI."""
from __future__ import annotations

import os
import re
import struct
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import pyarrow.fs as pafs

from jobs.errors import UsageError
from schemas.errors import ConfigError
from schemas.log import layout as L
from schemas.log.files import StoreLayoutError
from schemas.store import storefs
from schemas.store.config import TOPICS_FILE, load_topics
from schemas.store.store import open_store

if TYPE_CHECKING:
    from schemas.store.store import StoreLayout

DEFAULT_NAME = "broker"  # a bare store whose topics.json names no broker
HEAD_BYTES = 4096  # of a store's first commit-log file: the first record, with its storeHost and storeTimestamp
PERM_INHERIT = 1  # PermName.PERM_INHERIT: set on the broker-name and cluster-name topics, cleared on created ones
# topics every 4.x/5.x broker creates besides its broker-name topic (TopicConfigManager's constructor)
SYSTEM_TOPICS = {"TBW102", "SELF_TEST_TOPIC", "BenchmarkTest", "OFFSET_MOVED_EVENT", "SCHEDULE_TOPIC_XXXX",
                 "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                 "TRANS_CHECK_MAX_TIME_TOPIC"}
SYNC_MEMBER_PREFIX = "rmq_sys_SYNC_BROKER_MEMBER_"  # 5.x: this topic ends with the broker's name
REPLY_SUFFIX = "_REPLY_TOPIC"  # <cluster>_REPLY_TOPIC: names the cluster, whose own topic is not the broker's


@dataclass(frozen=True)
class Broker:
    """One broker of a run: its name (every output row's `broker`), its store's URI, and that store resolved
    once (filesystem and root path, and --commitlog's directories as paths on that filesystem)."""

    name: str
    uri: str
    named: bool = True  # given as NAME=URI; False: a bare --store, named from its store
    fs: object = field(default=None, compare=False, repr=False)
    root: str | None = field(default=None, compare=False, repr=False)
    log_dirs: tuple = field(default=(), compare=False, repr=False)

    def open_store(self) -> StoreLayout:
        """The listing of its store (schemas/store/store.StoreLayout)."""
        assert self.root is not None  # a Broker of brokers_of or store_broker: resolved
        return open_store(self.fs, self.root, self.log_dirs, self.uri)


def store_broker(uri: object, commitlog: str | Iterable[str] = (), name: str | None = None) -> Broker:
    """The Broker of one store URI, named `name` (not from its store): for a plan made outside a run (tests,
    tools), whose rows name no broker."""
    fs, root = storefs.resolve(str(uri))  # (resolve's own first step: str)
    # name None: a plan made outside a run, whose rows name no broker (Broker.name is a run's str)
    return Broker(cast(str, name), str(uri), False, fs, root, log_dirs(fs, commitlog))


def brokers_of(stores: Sequence[str] | None, brokers_file: str | None = None,
               commitlog: str | Iterable[str] = ()) -> tuple[Broker, ...]:
    """The run's Brokers, in the order given, checked (UsageError, exit 2): `stores` the --store values,
    `brokers_file` the --brokers FILE."""
    given = [(value, "--store") for value in stores or ()]
    if brokers_file:
        given += [(line, f"--brokers {brokers_file} line {n}") for n, line in _lines(brokers_file)]
    if not given:
        raise UsageError("no store: give --store URI, --store NAME=URI (repeatable) or --brokers FILE")
    parsed = [(split_store(value, where), where) for value, where in given]
    unnamed = [where for (name, _), where in parsed if name is None]
    if unnamed and len(parsed) > 1:
        raise UsageError("bare and named stores mixed: with several brokers give each as NAME=URI "
                         f"({', '.join(dict.fromkeys(unnamed))} gives a store without a name)")
    if len(parsed) > 1 and commitlog:
        raise UsageError("--commitlog names one store's log directories: it takes a single --store")
    out = []
    for (name, uri), where in parsed:
        if name is not None:
            check_name(name, where)
        fs, root = storefs.resolve(uri)
        out.append(Broker(name if name is not None else store_name(fs, root), uri, name is not None, fs, root,
                          log_dirs(fs, commitlog)))
    _refuse_duplicates(out)
    return tuple(out)


def log_dirs(fs: pafs.FileSystem, commitlog: str | Iterable[str] | None) -> tuple[str, ...]:
    """--commitlog DIR[,DIR...] (a string or a sequence) as paths on the store's filesystem: a local path
    made absolute, a URI's path where its filesystem is the store's; StoreLayoutError otherwise."""
    if isinstance(commitlog, str):
        commitlog = [commitlog]
    out = []
    for given in (d.strip() for text in commitlog or () for d in str(text).split(",")):
        if not given:
            continue
        if "://" in given:
            other, path = storefs.resolve(given)
            if other.type_name != fs.type_name:
                raise StoreLayoutError(f"--commitlog {given}: on {other.type_name}, the store on {fs.type_name}: "
                                       "the log must be where the store is")
            out.append(path)
        else:
            out.append(os.path.abspath(given) if isinstance(fs, pafs.LocalFileSystem) else given.rstrip("/"))
    return tuple(out)


def bare(brokers: Sequence[Broker]) -> bool:
    """Whether the run is one bare --store: its outputs' continuation (offsets.json, the Iceberg snapshots) keyed
    as before brokers."""
    return len(brokers) == 1 and not brokers[0].named


def split_store(value: str, where: str = "--store") -> tuple[str | None, str]:
    """(name or None, uri) of one --store value (see the module's docstring)."""
    name, eq, uri = value.partition("=")
    if not eq or ":" in name or name.startswith(("/", ".", "~")):
        return None, value
    if not uri:
        raise UsageError(f"{where} {value!r}: no store after the name")
    inner, _ = split_store(uri, where)
    if inner is not None:  # `a=b=/x`: a name holding `=` (or a store that is no path or URI)
        check_name(f"{name}={inner}", where)
    return name, uri


def check_name(name: str, where: str = "--store") -> None:
    """A broker name is a path segment and a column value: not empty, no `=`, `/` or whitespace."""
    if not name:
        raise UsageError(f"{where}: a broker name is empty (give NAME=URI)")
    bad = [c for c in ("=", "/") if c in name] + (["whitespace"] if re.search(r"\s", name) else [])
    if bad:
        raise UsageError(f"{where}: broker name {name!r} holds {' and '.join(bad)}: a name is a path segment "
                         "and a column value")


def store_name(fs: pafs.FileSystem, root: str) -> str:
    """The broker's name its store gives: the broker-name system topic of config/topics.json (a topic with
    PERM_INHERIT and one queue that is no other system topic, or 5.x's rmq_sys_SYNC_BROKER_MEMBER_<name>);
    `broker` when there is none, or several could be it."""
    topics = _topics(fs, root)
    synced = [t[len(SYNC_MEMBER_PREFIX):] for t in topics if t.startswith(SYNC_MEMBER_PREFIX)]
    if len(synced) == 1:
        return synced[0]
    clusters = {t[:-len(REPLY_SUFFIX)] for t in topics if t.endswith(REPLY_SUFFIX)}
    candidates = [t for t, c in topics.items()
                  if c.perm & PERM_INHERIT and c.read_queue_nums == 1 and c.write_queue_nums == 1
                  and t not in SYSTEM_TOPICS and t not in clusters and not t.startswith(("%", "rmq_sys_"))]
    if len(candidates) == 1:
        try:
            check_name(candidates[0])
        except UsageError:
            return DEFAULT_NAME
        return candidates[0]
    return DEFAULT_NAME


def _topics(fs, root):
    """{name: TopicConfig} of a store's config/topics.json ({} when absent or unreadable: the plan reports it)."""
    path = f"{root}/config/{TOPICS_FILE}"
    try:
        if isinstance(fs, pafs.LocalFileSystem):
            return load_topics(path) if os.path.isfile(path) else {}
        if fs.get_file_info(path).type != pafs.FileType.File:
            return {}
        with tempfile.TemporaryDirectory(prefix="mqreplay-topics-") as tmp:
            with fs.open_input_file(path) as src, open(f"{tmp}/{TOPICS_FILE}", "wb") as dst:
                dst.write(src.read())
            return load_topics(f"{tmp}/{TOPICS_FILE}")
    except (ConfigError, OSError, ValueError):
        return {}


def _refuse_duplicates(brokers):
    """Two brokers of one name; one store under two names, however spelled: the same real path, or the same
    first commit-log file beginning with the same bytes (its first record's storeHost and storeTimestamp)."""
    seen = {}
    for b in brokers:
        if b.name in seen:
            raise UsageError(f"two brokers named {b.name!r}: {seen[b.name]} and {b.uri} (each broker needs its own "
                             "name: it is every output row's `broker`)")
        seen[b.name] = b.uri
    identities = {}
    for b in brokers:
        for identity in _identities(b):
            other = identities.get(identity)
            if other is not None and other.name != b.name:
                raise UsageError(f"one store under two names: {other.name}={other.uri} and {b.name}={b.uri} "
                                 "are the same store (its rows would be written twice, under two brokers)")
            identities[identity] = b


def _identities(broker):
    """What names a store whatever its spelling: its real path (local) or its filesystem and path, and its
    first commit-log file's name and first bytes."""
    fs, root = broker.fs, broker.root
    local = isinstance(fs, pafs.LocalFileSystem)
    out = [("path", os.path.realpath(root) if local else f"{type(fs).__name__}:{root.rstrip('/')}")]
    head = _log_head(fs, root)
    if head is not None:
        out.append(("head",) + head)
    return out


def _log_head(fs, root):
    """(first commit-log file's name, its first HEAD_BYTES) of a plain store's log; None without one."""
    try:
        infos = fs.get_file_info(pafs.FileSelector(f"{root}/commitlog", allow_not_found=True))
        files = [i for i in infos if i.type == pafs.FileType.File and i.base_name.isdigit()]
        if not files:
            return None
        first = min(files, key=lambda i: i.base_name)
        with fs.open_input_file(first.path) as f:
            head = f.read(HEAD_BYTES)
    except (OSError, ValueError):
        return None
    if not head.strip(b"\0"):  # a preallocated file of no record yet: says nothing
        return None
    return first.base_name, head


def store_identity(broker: Broker) -> tuple[str, str]:
    """(key, head) that say which store a broker's is, whatever its spelling, a symlink or a copy (an Iceberg
    lake's continuation keys on it): key `NAME@STOREHOST` (the broker's name and the storeHost of its commit log's
    first record), head `PHYSICAL_OFFSET:STORE_TIMESTAMP` of that record. A store without a plain commit log
    (DLedger) is known by its name and real path, head ''."""
    assert broker.root is not None  # a Broker's store, resolved (store_broker, brokers_of)
    head = _log_head(broker.fs, broker.root)
    record = _first_record(head[1]) if head is not None else None
    if record is None:
        where = os.path.realpath(broker.root) if storefs.is_local(broker.fs) else broker.root.rstrip("/")
        return f"{broker.name}@{where}", ""
    host, offset, stored = record
    return f"{broker.name}@{host}", f"{offset}:{stored}"


def _first_record(head):
    """(storeHost, physical offset, store timestamp) of the record a commit log's head starts with, or None."""
    if len(head) < L.MIN_RECORD_SIZE + 24 or struct.unpack_from(">i", head, 4)[0] not in L.MESSAGE_MAGICS:
        return None
    offset, sys_flag = struct.unpack_from(">qi", head, L.PHYSICAL_OFFSET_AT)
    at = L.HEAD_SIZE + (L.HOST_V6_SIZE if sys_flag & L.BORNHOST_V6 else L.HOST_V4_SIZE)
    stored = struct.unpack_from(">q", head, at)[0]
    at += 8
    if sys_flag & L.STOREHOST_V6:
        ip = ":".join(head[at:at + 16].hex()[i:i + 4] for i in range(0, 32, 4))
        return f"[{ip}]:{struct.unpack_from('>i', head, at + 16)[0]}", offset, stored
    return f"{'.'.join(str(b) for b in head[at:at + 4])}:{struct.unpack_from('>i', head, at + 4)[0]}", offset, stored


def _lines(path):
    """(line number, NAME=URI) of a --brokers file: blank lines and # comments skipped."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise UsageError(f"--brokers {path}: cannot read it ({exc.strerror})") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line and not line.startswith("#"):
            if split_store(line)[0] is None:
                raise UsageError(f"--brokers {path} line {n}: {line!r} is not NAME=URI")
            out.append((n, line))
    if not out:
        raise UsageError(f"--brokers {path}: no broker in it (one NAME=URI a line)")
    return out
