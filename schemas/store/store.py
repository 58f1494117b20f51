"""What a broker store holds, listed from names and sizes only (no data is read here). A store is a
(filesystem, root) pair, pyarrow's model: the URI it was given is resolved once, where the run starts
(jobs/plan/brokers.py), and only named here in messages."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import pyarrow.fs as pafs

from schemas.errors import StoreNotFound, UnsupportedStoreError  # noqa: F401 - re-exported
from schemas.log.files import CommitLog, find_log
from schemas.store import storefs


@dataclass(frozen=True)
class QueueFiles:
    """One consume queue and its ext files."""

    topic: str
    queue_id: int
    cq: tuple
    cq_file_size: int
    ext: tuple = ()
    ext_file_size: int = 0
    # a 5.x BatchConsumeQueue (batchconsumequeue/: 46-byte units, schemas/queues/batch_consume_queue.py)
    batch: bool = False


@dataclass(frozen=True)
class StoreLayout:
    """The files of a store: commit-log segments, consume queues, ext queues, and oddities found."""

    fs: object  # the store's pyarrow filesystem
    root: str
    commitlog: tuple
    commitlog_file_size: int
    queues: tuple
    ignored: tuple = field(default=())  # files that are not segments (.tmp etc.), for the audit
    log: CommitLog = field(default_factory=CommitLog)  # where the log's files are (schemas/log/files.py)
    rocksdb_cq: str | None = None  # consumequeue/ when it is (also) a RocksDB: 5.2+ storeType=defaultRocksDB
    batch_queues: tuple = ()  # QueueFiles of batchconsumequeue/ (5.x BatchCQ topics)


def check_store_root(fs: pafs.FileSystem, root: str, uri: Optional[str] = None) -> None:
    """Refuse a store directory this version does not read, with an error naming what it is (a file, missing);
    `uri`: the store as given, for the message (default root). Where its commit log is: commitlog_files.find_log.
    A topic this version cannot read is refused alone, when a run selects it (jobs/plan/build.py)."""
    uri = root if uri is None else uri
    info = fs.get_file_info(root)
    if info.type.name == "File":
        raise StoreNotFound(f"--store {uri} is a file: give the broker's storePathRootDir, the directory "
                            f"that holds commitlog/ and consumequeue/")
    if info.type.name != "Directory":
        raise StoreNotFound(f"store directory not found: {uri}")


def open_store(fs: pafs.FileSystem, root: str, log_dirs: Sequence[str] = (), uri: Optional[str] = None) -> StoreLayout:
    """List a store directory (`root` on `fs`): commit log, consume queues, ext queues and batch consume queues.

    log_dirs: --commitlog's directories as paths on `fs`, for a log kept elsewhere than under the store root;
    uri: the store as given, for messages."""
    check_store_root(fs, root, uri)
    log, ignored = find_log(fs, root, tuple(log_dirs))
    ext_by_queue = {}
    if fs.get_file_info(f"{root}/consumequeue_ext").type.name == "Directory":
        for topic, qid, path in storefs.list_queues(fs, root, "consumequeue_ext"):
            segs, odd = storefs.list_segments(fs, path)
            ext_by_queue[(topic, qid)] = segs
            ignored += odd
    queues = []
    for topic, qid, path in storefs.list_queues(fs, root, "consumequeue"):
        segs, odd = storefs.list_segments(fs, path)
        ignored += odd
        ext = ext_by_queue.get((topic, qid), [])
        queues.append(QueueFiles(topic, qid, tuple(segs), storefs.file_size_of(segs) or 0,
                                 tuple(ext), storefs.file_size_of(ext) or 0))
    batch_queues = []
    if fs.get_file_info(f"{root}/batchconsumequeue").type.name == "Directory":
        for topic, qid, path in storefs.list_queues(fs, root, "batchconsumequeue"):
            segs, odd = storefs.list_segments(fs, path)
            ignored += odd
            batch_queues.append(QueueFiles(topic, qid, tuple(segs), storefs.file_size_of(segs) or 0, batch=True))
    rocks = f"{root}/consumequeue"
    rocksdb_cq = rocks if fs.get_file_info(f"{rocks}/CURRENT").type.name == "File" else None
    return StoreLayout(fs, root, log.files, log.file_size, tuple(queues), tuple(ignored), log, rocksdb_cq,
                       tuple(batch_queues))


__all__ = ["QueueFiles", "StoreLayout", "check_store_root", "open_store", "UnsupportedStoreError"]
