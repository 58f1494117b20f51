"""One error type for damaged or unreadable store data, always naming where and why."""


class CorruptStoreError(ValueError):
    """Store bytes that are not what RocketMQ writes: says which file, which offset and what is wrong."""

    def __init__(self, path, offset, reason, topic=None, queue_id=None):
        self.path = str(path)
        self.offset = offset
        self.reason = reason
        self.topic = topic
        self.queue_id = queue_id
        where = f"{self.path} at offset {offset}" if offset is not None else self.path
        super().__init__(f"{where}: {reason}")


class UnsupportedStoreError(ValueError):
    """A store layout this version does not read (RocksDB or batch consume queues, unknown compression)."""
