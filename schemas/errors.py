"""The project's one error hierarchy, in its bottom layer. Every failure a run reports is a ReplayError, and
each kind carries the exit code a scheduler sees; jobs/errors.py (`outcome`) turns any error into that code and a
one-line message, for the job and explain alike.

Exit codes, one meaning each: 0 clean; 1 input damaged (the store or a file the run reads); 2 usage (bad
arguments, names that match nothing, an OUT that exists or another run holds); 3 finished, but some
subscriptions did not parse; 4 finished, but damaged data was skipped under --on-corrupt skip; 5 the job
failed for another reason; 128 + N stopped by signal N."""
from __future__ import annotations

import os
from typing import Any, Optional

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_PARTIAL, EXIT_SKIPPED, EXIT_FAILED = 0, 1, 2, 3, 4, 5


class ReplayError(Exception):
    """Root of every error the project raises; `exit_code` is what the job and explain exit with."""

    exit_code = EXIT_FAILED


class InputError(ReplayError):
    """A store or a file the run reads is missing or not what it must be (exit 1)."""

    exit_code = EXIT_INPUT


class StoreNotFound(InputError):
    """No store where --store points, or not a broker's storePathRootDir: the caller's path is wrong, nothing
    is damaged (exit 2)."""

    exit_code = EXIT_USAGE


class CorruptStoreError(InputError):
    """Store bytes that are not what RocketMQ writes: says which file, which offset and what is wrong."""

    def __init__(self, path: str | os.PathLike[str], offset: Optional[int], reason: str, topic: Optional[str] = None,
                 queue_id: Optional[int] = None) -> None:
        self.path = str(path)
        self.offset = offset
        self.reason = reason
        self.topic = topic
        self.queue_id = queue_id
        where = f"{self.path} at offset {offset}" if offset is not None else self.path
        super().__init__(f"{where}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:  # pickled across Spark's task boundary with its fields
        return (type(self), (self.path, self.offset, self.reason, self.topic, self.queue_id))


class UnsupportedStoreError(InputError):
    """A store layout this version does not read (batch consume queues, unknown compression)."""


class ConfigError(InputError):
    """A config file that is not what the broker (or the subscription file format, or conf/replay.json) holds."""

    def __init__(self, path: str | os.PathLike[str], reason: str, key: Optional[str] = None, line: Optional[int] = None,
                 column: Optional[int] = None) -> None:
        self.path, self.reason, self.key, self.line, self.column = str(path), reason, key, line, column
        where = self.path if line is None else f"{self.path}, line {line} column {column}"
        super().__init__(f"{where}: {reason}" if key is None else f"{where}: {key}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.reason, self.key, self.line, self.column))


class NotInStore(ReplayError, LookupError):
    """The store has no such queue, unit, record or message id (a question about it names nothing: exit 2)."""

    exit_code = EXIT_USAGE
