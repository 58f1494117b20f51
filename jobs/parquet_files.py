"""How every Parquet file the job writes is written (the answer's parts, the ledgers', the lake's compaction):
one set of writer options, so that a part reads the same whoever wrote it."""
from collections.abc import Collection, Sequence
from typing import Any

import pyarrow as pa

# Measured on a 270k-message split of the bench store (1.38 M matched rows), writing with pyarrow:
#   zstd level 1 vs 3: as small, 20% faster; lz4: 25% faster, but twice the bytes; snappy: 2.5x the bytes.
#   Integer columns (offsets, timestamps, queue ids: sorted or nearly) DELTA_BINARY_PACKED: 3-4x faster to
#   write than plain and smaller. Strings and bodies of messages/ never repeat: plain, no dictionary (hashing
#   them cost more than it saved). In matched rows, group, topic and msg_id go to the writer as Arrow
#   dictionaries over distinct values (group_rows), written with no copy and no hash; tags and keys so
#   encoded gained nothing measurable. Statistics only on the columns readers filter by (min/max of every
#   body cost 15%; of group, which every row group holds whole, they pruned nothing).
STATISTICS = ["topic", "queue_id", "queue_offset", "commitlog_offset", "born_timestamp", "store_timestamp"]
PARQUET_OPTIONS = dict(compression="zstd", compression_level=1, use_dictionary=False)


def parquet_options(schema: pa.Schema, statistics: Sequence[str] = STATISTICS,
                    plain: Collection[str] = ()) -> dict[str, Any]:
    """Writer options of a part of `schema`: the defaults above, integers delta-encoded (but those named in
    `plain`), dictionary columns written as dictionaries, and so the keys of a map (the properties: a few names
    repeated on every message; 6% fewer bytes, a little faster); the Arrow schema is not stored, so that every
    reader reads those columns as the plain strings they are."""
    integers = [f.name for f in schema if pa.types.is_integer(f.type)]
    dictionaries = [f.name for f in schema if pa.types.is_dictionary(f.type)]
    dictionaries += [f"{f.name}.key_value.key" for f in schema if pa.types.is_map(f.type)]
    return dict(PARQUET_OPTIONS, use_dictionary=dictionaries or False, store_schema=False,
                column_encoding={name: "PLAIN" if name in plain else "DELTA_BINARY_PACKED" for name in integers}
                or None,
                write_statistics=[name for name in statistics if name in schema.names])
