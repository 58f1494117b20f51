"""Driver-side planning: list the store, merge and compile subscriptions, describe the work units.

Only metadata is handled here (file names, sizes, config JSON, and the head and tail of each consume-queue
file the run needs: jobs/cq_index.py); the rest of the store's bytes are read by the tasks."""
import logging
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from filtering.bloom import BloomFilter
from filtering.subscriptions import compile_subscription, merge_subscriptions
from jobs.cq_index import SegmentIndex, probe_segments
from jobs.split_task import ReplayPlan
from schemas import storefs
from schemas.arrow_schemas import CONSUME_QUEUE_SCHEMA
from schemas.config import ConfigError, Registration, load_registrations, load_store_config
from schemas.errors import CorruptStoreError
from schemas.store import open_store
from schemas.store_checks import layout_problems

log = logging.getLogger("mqreplay")


@dataclass
class JobOptions:
    """What the command line and conf/ decide (defaults are the broker's and a sane job's)."""

    store: str
    subscription_files: tuple = ()
    ad_hoc: tuple = ()  # (group, topic, type, expression)
    dialect: str = "5"
    start_from: str = "earliest"
    groups: tuple = ()
    topics: tuple = ()
    retry: bool = True
    with_body: bool = True
    support_retry: bool = False
    bloom_f: int = 20
    bloom_n: int = 32
    split_size: int = 128 << 20
    on_corrupt: str = "fail"
    verify_crc: bool = False


@dataclass
class Planned:
    plan: ReplayPlan
    layout: object
    subscriptions: list  # every CompiledSubscription, failed ones included
    committed: dict  # (topic, group) -> {queue_id: offset}, for --from committed
    problems: list = None  # listing and config problems: [{file, offset, topic, queue_id, reason}]
    segments: SegmentIndex = None  # the consume-queue segments of the needed queues, probed once


def build_plan(options):
    """Everything the tasks need; with on_corrupt=fail the first problem found stops the job here."""
    layout = open_store(options.store)
    problems = layout_problems(layout)
    config = load_store_config_uri(options.store, options.on_corrupt, problems)
    if problems and options.on_corrupt != "skip":
        p = problems[0]
        raise CorruptStoreError(p["file"], p["offset"], p["reason"], p["topic"], p["queue_id"])
    regs = []
    for path in options.subscription_files:
        regs.extend(load_registrations(path))
    for group, topic, etype, expression in options.ad_hoc:
        regs.append(Registration(group, topic, etype.upper(), expression, None, None, "<command line>"))
    bloom = BloomFilter(options.bloom_f, options.bloom_n)
    topics_present = {q.topic for q in layout.queues}
    subs = merge_subscriptions(config.consumer_filters, regs, bloom, topics_present, options.retry,
                               set(options.groups) or None, set(options.topics) or None)
    compiled = [compile_subscription(s, options.dialect) for s in subs]
    for c in compiled:
        if c.error:
            log.error("group %s topic %s: %s", c.sub.group, c.sub.topic, c.error)
    runnable = tuple(c for c in compiled if not c.error)
    topics = needed_topics(runnable, config.consumer_filters, options.groups, options.topics)
    segments = probe_segments(layout.filesystem(), [q for q in layout.queues if q.topic in topics])
    plan = ReplayPlan(
        store_uri=str(options.store),
        commitlog_file_size=layout.commitlog_file_size or 1,
        commitlog_files=tuple((s.start, s.path, s.length) for s in layout.commitlog),
        subscriptions=runnable,
        bloom_f=options.bloom_f, bloom_n=options.bloom_n, with_body=options.with_body,
        support_retry=options.support_retry, on_corrupt=options.on_corrupt, verify_crc=options.verify_crc,
        split_size=min(options.split_size, layout.commitlog_file_size or options.split_size),
        start_offsets=_start_offsets(options, compiled, config.consumer_offsets),
        data_end=segments.data_end,
    )
    return Planned(plan, layout, compiled, config.consumer_offsets, problems, segments)


def needed_topics(subscriptions, stored_filters, groups=(), topics=()):
    """Topics whose consume queues the run reads: those of its subscriptions (the %RETRY% topics they
    include), and those of the store's SQL92 registrations, whose stored bitmaps the audit compares;
    within --groups and --topics, so that a narrowed run reads nothing else."""
    needed = {c.sub.topic for c in subscriptions}
    needed.update(fd.topic for fd in stored_filters
                  if (not groups or fd.consumer_group in groups) and (not topics or fd.topic in topics))
    return needed


def _start_offsets(options, compiled, committed):
    """--from committed: each group starts at its committed offset per queue (earliest where it has none)."""
    if options.start_from == "earliest":
        return ()
    if options.start_from != "committed":
        raise ValueError(f"--from must be earliest or committed, got {options.start_from!r}")
    out = []
    for c in compiled:
        for qid, offset in committed.get((c.sub.topic, c.sub.group), {}).items():
            out.append((c.sub.group, c.sub.topic, int(qid), int(offset)))
    return tuple(out)


def load_store_config_uri(store, on_corrupt="fail", problems=None):
    """Config of a store (remote ones are copied through pyarrow to a temp dir first).

    With on_corrupt=skip a malformed file is recorded in `problems` and read as absent."""
    fs, root = storefs.resolve(store)
    if isinstance(fs, pa.fs.LocalFileSystem):
        return _load_config_dir(root, on_corrupt, problems)
    import tempfile

    tmp = tempfile.mkdtemp(prefix="mqreplay-config-")
    import os

    os.makedirs(f"{tmp}/config")
    for info in fs.get_file_info(pa.fs.FileSelector(f"{root}/config", allow_not_found=True)):
        if info.type == pa.fs.FileType.File:
            with fs.open_input_file(info.path) as src, open(f"{tmp}/config/{info.base_name}", "wb") as dst:
                dst.write(src.read())
    return _load_config_dir(tmp, on_corrupt, problems)


def _load_config_dir(root, on_corrupt, problems):
    import os

    while True:
        try:
            return load_store_config(root)
        except ConfigError as exc:
            if on_corrupt != "skip" or problems is None or not exc.path or not os.path.exists(exc.path):
                raise
            problems.append(dict(file=str(exc.path), offset=None, topic=None, queue_id=None,
                                 reason=f"malformed config, read as absent: {exc}"))
            root = _without(root, exc.path)


def _without(root, bad_path):
    """A copy of the config dir without the bad file (the loaders then treat it as absent)."""
    import os
    import shutil
    import tempfile

    tmp = tempfile.mkdtemp(prefix="mqreplay-config-")
    os.makedirs(f"{tmp}/config")
    for name in os.listdir(f"{root}/config"):
        path = f"{root}/config/{name}"
        if os.path.isfile(path) and os.path.abspath(path) != os.path.abspath(bad_path) \
                and os.path.abspath(path) != os.path.abspath(str(bad_path)) + ".bak":
            shutil.copy(path, f"{tmp}/config/{name}")
    return tmp


def commitlog_splits(plan):
    """(start, end) byte ranges a task each: every commit-log file cut into equal pieces of at most
    split_size, plus the ranges no file covers (below the first file: deleted by retention; holes; beyond
    the last), so that units pointing there are still audited.

    The file holding the end of the data is cut over its data only: its pieces are then as even as the
    others, where cutting the whole file at split_size left one short piece whose task ended early and a
    full one that ran alone."""
    splits, covered = [], 0
    for start, _, length in plan.commitlog_files:
        if start > covered:
            splits.append((covered, start))
        size = max(length, plan.commitlog_file_size)  # a truncated file keeps its nominal range
        used = size if plan.data_end is None else min(size, max(plan.data_end - start, 1))
        pieces = -(-used // plan.split_size)
        cuts = [start + k * used // pieces for k in range(pieces + 1)]  # sizes differ by one byte at most
        splits += list(zip(cuts[:-1], cuts[1:]))
        if used < size:
            splits.append((start + used, start + size))
        covered = start + plan.commitlog_file_size
    splits.append((covered, 1 << 62))
    if plan.data_end is not None:  # splits past the last unit hold nothing: one catch-all instead
        kept = [s for s in splits[:-1] if s[0] < plan.data_end]
        splits = kept + [(kept[-1][1] if kept else 0, 1 << 62)]
    return splits


def split_units(plan, segments, start, end):
    """CONSUME_QUEUE_SCHEMA table of the needed queues' units pointing into [start, end) (run by a task):
    only the segments of the SegmentIndex whose range overlaps the split are opened."""
    from schemas.cq_ranges import units_in_range
    from schemas.local_api import resolve_units

    fs = storefs.resolve(plan.store_uri)[0]
    rows = segments.overlapping(start, end)  # in (queue, file) order: a run of rows per queue
    batches = []
    for run in np.split(rows, np.flatnonzero(np.diff(segments.queue[rows])) + 1) if len(rows) else ():
        queue = segments.queues[segments.queue[run[0]]]
        parts = [units_in_range(fs, queue.cq[segments.segment[r]], segments.bounds(r), start, end) for r in run]
        parts = [p for p in parts if p is not None]
        if parts:
            batches.append(resolve_units(fs, queue, parts))
    return pa.Table.from_batches(batches, schema=CONSUME_QUEUE_SCHEMA)
