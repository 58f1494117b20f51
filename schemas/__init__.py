"""RocketMQ store formats: layouts, vectorized decoders and encoders, Arrow and Spark schemas."""
from schemas.arrow_schemas import CONSUME_QUEUE_SCHEMA, MESSAGE_SCHEMA
from schemas.errors import CorruptStoreError, UnsupportedStoreError
from schemas.local_api import read_consume_queues, read_messages

__all__ = ["read_messages", "read_consume_queues", "MESSAGE_SCHEMA", "CONSUME_QUEUE_SCHEMA",
           "CorruptStoreError", "UnsupportedStoreError"]
