"""The shape of the answer (--layout): one object per layout, which the task's writer and the driver's empty
tables ask (which columns a matched row carries, whether messages/ exists, how many rows go at a time), chosen
once from the command line (`LAYOUTS`); nothing compares a layout's name.

  normalized  messages/topic=T/part-S.parquet: every message some output row references, once, with all its
              columns; matched/ and audit/collisions/: one narrow row per (group, message), joinable on
              (topic, commitlog_offset).
  wide        matched/ and audit/collisions/ rows carry every message column (small per-group exports); no
              messages/.

A new layout is one object here, its entry in LAYOUTS and its tests (test_sink.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

import numpy as np
import pyarrow.compute as pc

from schemas.arrow_schemas import OUTPUT_MESSAGE_FIELDS
from schemas.columns import batch_bounds, one_array

if TYPE_CHECKING:
    from filtering.topic_replay import MessageRows

# the narrow row of matched/ and audit/collisions/ (besides group and topic)
NARROW_FIELDS = ["queue_id", "queue_offset", "commitlog_offset", "msg_id", "uniq_key", "tags", "keys",
                 "born_timestamp", "store_timestamp"]
# Wide rows carry bodies and properties, and a batch's messages fan out to every group that receives them
# (some five each here): written this many rows at a time, so that no batch's fan-out is whole in memory,
# and no more bodies than this at a time, so that no column of large bodies nears Arrow's 2 GiB.
WIDE_ROWS = 65536
WIDE_BYTES = 64 << 20


def message_fields(with_body: bool) -> list[str]:
    """The message columns a run writes: every one, the body only when the run keeps bodies."""
    return [f for f, _ in OUTPUT_MESSAGE_FIELDS if with_body or f != "body"]


@dataclass(frozen=True)
class Normalized:
    """Messages once (messages/), narrow (group, message) rows in matched/ and audit/collisions/."""

    name: str = "normalized"
    messages: bool = True  # messages/ written, each message once
    tables: bool = True  # the shape of an Iceberg namespace's tables (jobs/sinks/iceberg/tables.py)

    def pair_fields(self, with_body: bool) -> list[str]:
        """The message columns of a matched or collided row (after group and topic)."""
        return list(NARROW_FIELDS)

    def chunks(self, piece: MessageRows, rows: np.ndarray) -> list[tuple[int, int]]:
        """(lo, hi) ranges of a piece's (group, message) rows written at a time: all of them (narrow rows)."""
        return [(0, len(rows))]


@dataclass(frozen=True)
class Wide:
    """Every message column in each matched and collided row; no messages/."""

    name: str = "wide"
    messages: bool = False
    tables: bool = False

    def pair_fields(self, with_body: bool) -> list[str]:
        return message_fields(with_body)

    def chunks(self, piece: MessageRows, rows: np.ndarray) -> np.ndarray:
        """At most WIDE_ROWS rows and WIDE_BYTES of bodies at a time (bodies fanned out)."""
        sizes = pc.binary_length(one_array(piece.table.column("body"))).fill_null(0).to_numpy()
        return batch_bounds(sizes[rows], WIDE_ROWS, WIDE_BYTES)


NORMALIZED, WIDE = Normalized(), Wide()
Layout = Union[Normalized, Wide]  # a layout's type (annotations)
# --layout's choices, the first its default
LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (NORMALIZED, WIDE)}
