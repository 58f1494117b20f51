"""The one definition of every table's Arrow schema; Spark StructTypes are derived from them."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())  # message properties, in order of appearance

MESSAGE_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("commitlog_offset", pa.int64()),
    ("store_size", pa.int32()),
    ("sys_flag", pa.int32()),
    ("flag", pa.int32()),
    ("born_timestamp", pa.int64()),
    ("born_host", pa.string()),
    ("store_timestamp", pa.int64()),
    ("store_host", pa.string()),
    ("msg_id", pa.string()),
    ("reconsume_times", pa.int32()),
    ("prepared_transaction_offset", pa.int64()),
    ("body_crc", pa.int32()),
    ("body", pa.binary()),
    ("tags_code", pa.int64()),
    ("properties", PROPERTIES_TYPE),
    ("tags", pa.string()),
    ("keys", pa.string()),
    ("uniq_key", pa.string()),  # the UNIQ_KEY property: the id 5.x clients and consoles show (null without one)
])

# decode_records(coded=names)'s column after MESSAGE_SCHEMA's: a struct of the properties SQL92 reads, each a
# dictionary column (distinct values; null where absent; a string column where most values are distinct),
# encoded in the decode's split of the properties
CODED_PROPERTIES = "coded_properties"

CONSUME_QUEUE_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("commitlog_offset", pa.int64()),
    ("size", pa.int32()),
    ("tags_code_raw", pa.int64()),
    ("is_ext_addr", pa.bool_()),
    ("tags_code", pa.int64()),  # resolved; null when an ext unit cannot be read (the broker: "missing")
    ("msg_store_time", pa.int64()),  # from the ext unit; null without one
    ("filter_bitmap", pa.binary()),  # null when the ext unit holds none
])


def spark_schema(arrow_schema: pa.Schema) -> StructType:
    """The Spark StructType of an Arrow schema (one source of truth for both)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema)


# Columns every delivered (or audited) message row carries in the job's output.
OUTPUT_MESSAGE_FIELDS = [
    ("queue_id", pa.int32()), ("queue_offset", pa.int64()), ("commitlog_offset", pa.int64()),
    ("msg_id", pa.string()), ("uniq_key", pa.string()), ("tags", pa.string()), ("keys", pa.string()),
    ("born_timestamp", pa.int64()), ("store_timestamp", pa.int64()), ("born_host", pa.string()),
    ("store_host", pa.string()), ("reconsume_times", pa.int32()), ("sys_flag", pa.int32()),
    ("properties", PROPERTIES_TYPE), ("body", pa.binary()),
    # an LMQ queue's row (multi-dispatch): the message's own topic, queue and offset; null on its own queue's rows
    ("source_topic", pa.string()), ("source_queue_id", pa.int32()), ("source_queue_offset", pa.int64()),
]
# Counters of one (group, topic). units = skipped + broker_delivered + filtered out; broker_delivered =
# client_delivered + collisions; evaluation_errors <= evaluated (messages the expression was evaluated on).
STAT_FIELDS = ["units", "skipped", "stage1_passed", "broker_delivered", "client_delivered", "collisions",
               "bloom_false_positives", "evaluated", "evaluation_errors", "ext_unreadable"]
# Counters of one topic's bitmap audit (stored ConsumeQueueExt bitmaps against all the store's registrations).
TOPIC_STAT_FIELDS = ["units", "bitmaps_compared", "bitmap_mismatches", "bitmap_mismatches_explained"]

# The audits a replay writes (OUT/audit/corrupt, OUT/audit/bitmaps, OUT/audit/bodies).
CORRUPT_SCHEMA = pa.schema([
    ("file", pa.string()), ("offset", pa.int64()), ("topic", pa.string()), ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()), ("commitlog_offset", pa.int64()), ("reason", pa.string()),
])
# Messages delivered with a null body: it inflates beyond max_body_mb. stored_size: the body's length as stored
# (compressed), what the message cost the broker, where the inflated size is only known to pass the bound.
BODIES_SCHEMA = pa.schema([
    ("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()), ("commitlog_offset", pa.int64()),
    ("stored_size", pa.int32()), ("reason", pa.string()),
])
BITMAP_SCHEMA = pa.schema([
    ("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()), ("commitlog_offset", pa.int64()),
    ("msg_id", pa.string()), ("store_timestamp", pa.int64()), ("stored_bitmap", pa.binary()),
    ("recomputed_bitmap", pa.binary()), ("reason", pa.string()), ("groups_missing", pa.string()),
])
