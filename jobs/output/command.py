"""What makes two commands the same, so that a scheduler's retry of a run that completed is harmless: a kill that
reaches the JVM after OUT was published (Spark's shutdown) fails the attempt, and the retry of the same command
finds OUT published by it, exits 0 and changes nothing (docs/scheduler.md).

Two commands are the same when they give the same options that decide the answer (every option, as parsed,
except those that only say how the run runs: `HOW`), the files those options name hold the same bytes
(--subscriptions, --conf, --brokers, --starting-offsets and --ending-offsets given as files), and each store is
the same store (its broker's name and store identity, brokers.store_identity) holding the same registrations (its
config/consumerFilter.json). The fingerprint is written into OUT's `_SUCCESS`."""
from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING, Any, Iterable

import pyarrow.fs as pafs

from jobs.plan.brokers import store_identity
from schemas.store.config import CONSUMER_FILTER_FILE

if TYPE_CHECKING:
    from jobs.plan.brokers import Broker

# options that say how a run runs, not what it answers: a retry may change them
HOW = ("progress", "clean_stale", "master", "remote", "catalog_wait", "overwrite", "run")
FILES = ("subscriptions", "conf", "brokers", "starting_offsets", "ending_offsets")


def fingerprint(args: Any, brokers: Iterable[Broker]) -> str:  # args: jobs.cli.Args, a higher layer's
    """sha256 (hex) of the command: its deciding options, the content of the files they name, its stores."""
    options = {k: v for k, v in sorted(vars(args).items()) if k not in HOW}
    files = {k: [_content(p) for p in (v if isinstance(v, list) else [v])] for k, v in options.items()
             if k in FILES and v}
    stores = [[b.name, *store_identity(b), _registrations(b)] for b in brokers]
    text = json.dumps({"options": options, "files": files, "stores": stores}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _content(value):
    """sha256 of a local file's bytes, or the value itself when it names no file (JSON given inline)."""
    value = str(value)
    if value.lstrip().startswith("{") or not os.path.isfile(value):
        return value
    with open(value, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _registrations(broker):
    """sha256 of the store's config/consumerFilter.json ('' when it has none)."""
    path = f"{broker.root.rstrip('/')}/config/{CONSUMER_FILTER_FILE}"
    if broker.fs.get_file_info(path).type != pafs.FileType.File:
        return ""
    with broker.fs.open_input_stream(path) as f:
        return hashlib.sha256(f.read()).hexdigest()
