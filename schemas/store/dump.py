"""A store as JSON lines for people inspecting it by hand (the analog of kafka-dump-log); the command that prints
them is `python -m jobs.dump` (jobs/dump.py, its arguments parsed in jobs/cli.py):

    python -m jobs.dump STORE_DIR messages [--no-body]   one line per commit-log message
    python -m jobs.dump STORE_DIR cq                     one line per consume-queue unit
    python -m jobs.dump STORE_DIR units                  one line per unit the broker builds from the
                                                         commit log (schemas/queues/cq_rebuild.py): compare with cq
    python -m jobs.dump STORE_DIR config                 one line per config file, parsed
    python -m jobs.dump STORE_DIR layout                 one line per commit-log directory read: its
                                                         layout and the RocketMQ setting that makes it
    python -m jobs.dump STORE_DIR timers                 the timer wheel's state (5.x): a line for
                                                         config/timercheck, one for config/timermetrics, one per
                                                         timer-log unit, one per damage found
                                                         (schemas/store/timer_wheel.py)

Commit-log layouts read (schemas/log/files.py): plain (<root>/commitlog, the default); plain over
several directories (storePathCommitLog=DIR1,DIR2, RIP-7, 4.9.2+); DLedger (enableDLegerCommitLog=true:
<root>/dledger-<selfId>/data, or storePathDLedgerCommitLog); plain then DLedger (a broker switched to
DLedger: its old commitlog/ up to dividedCommitlogOffset). --commitlog DIR[,DIR...] for a log kept elsewhere.
"""
from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence, TextIO, cast

import pyarrow.fs as pafs

from schemas.store.config import load_fastjson
from schemas.store.local_api import iter_message_batches, local_store, queue_batch, rebuilt_units
from schemas.store.timer_wheel import METRICS_FILE, decode_metrics, read_checkpoint, read_timer_state

if TYPE_CHECKING:
    import numpy as np


def _jsonable(row):
    out = {}
    for key, value in row.items():
        if isinstance(value, bytes):
            value = value.hex() if key == "filter_bitmap" else base64.b64encode(value).decode()
        elif key == "properties" and value is not None:
            value = dict(value)
        out[key] = value
    return out


def dump_messages(store: str | os.PathLike[str], out: TextIO, with_body: bool = True,
                  commitlog: str | Sequence[str] = ()) -> None:
    for batch in iter_message_batches(store, with_body=with_body, commitlog=commitlog):
        for row in batch.to_pylist():
            if not with_body:
                row.pop("body")
            out.write(json.dumps(_jsonable(row), ensure_ascii=False) + "\n")


def dump_cq(store: str | os.PathLike[str], out: TextIO) -> None:
    layout = local_store(store)
    fs = layout.fs
    for queue in layout.queues:
        for row in queue_batch(fs, queue).to_pylist():
            out.write(json.dumps(_jsonable(row), ensure_ascii=False) + "\n")


def dump_layout(store: str | os.PathLike[str], out: TextIO, commitlog: str | Sequence[str] = ()) -> None:
    for row in local_store(store, commitlog).log.describe():
        out.write(json.dumps(row, ensure_ascii=False) + "\n")


def dump_config(store: str | os.PathLike[str], out: TextIO) -> None:
    for path in sorted(Path(store, "config").glob("*.json")):
        out.write(json.dumps({"file": path.name, "content": load_fastjson(path)}, ensure_ascii=False) + "\n")


def dump_units(store: str | os.PathLike[str], out: TextIO, commitlog: str | Sequence[str] = ()) -> None:
    """The units the broker's dispatcher builds from each commit-log file's records, in log order."""
    for row in rebuilt_units(store, commitlog).drop_columns(["store_timestamp"]).to_pylist():
        out.write(json.dumps(row, ensure_ascii=False) + "\n")


def dump_timers(store: str | os.PathLike[str], out: TextIO) -> None:
    """The timer wheel's checkpoint, its metrics and its timer log's units (each with its offset `pos` and its
    deliver time, currWriteTime + delay), then a line per damage found: the state the job checks at planning."""
    fs, root = pafs.LocalFileSystem(), str(Path(store).resolve())
    cp = read_checkpoint(fs, root)[0]
    out.write(json.dumps({"file": "config/timercheck", "content": cp.as_dict() if cp else None}) + "\n")
    metrics = Path(store, "config", METRICS_FILE)
    try:
        content = decode_metrics(metrics.read_bytes()) if metrics.exists() else None
    except ValueError as exc:
        content = {"error": str(exc)}
    out.write(json.dumps({"file": f"config/{METRICS_FILE}", "content": content}, ensure_ascii=False) + "\n")

    def write_units(positions: np.ndarray, chunk: np.ndarray) -> None:  # a chunk at a time, as the timer log is read
        names = cast("tuple[str, ...]", chunk.dtype.names)  # a structured dtype: its fields' names
        for pos, unit in zip(positions.tolist(), chunk.tolist()):
            row = dict(zip(names, unit))
            out.write(json.dumps({"pos": pos, **row, "deliver_ms": row["curr_write_time"] + row["delay"]}) + "\n")

    state = read_timer_state(fs, root, write_units)
    for p in state.problems:
        out.write(json.dumps({"damaged": p["file"], "offset": p["offset"], "reason": p["reason"]}) + "\n")


DUMPS = {"messages": lambda store, out, args: dump_messages(store, out, not args.no_body, args.commitlog),
         "cq": lambda store, out, args: dump_cq(store, out),
         "units": lambda store, out, args: dump_units(store, out, args.commitlog),
         "layout": lambda store, out, args: dump_layout(store, out, args.commitlog),
         "config": lambda store, out, args: dump_config(store, out),
         "timers": lambda store, out, args: dump_timers(store, out)}  # python -m jobs.dump STORE <name>
