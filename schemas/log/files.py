"""Where a store's commit log is: its data files, the directories and format they are in, and which file and
position hold a commit-log offset. Everything that reads the log (the job's splits and tasks, windows,
lookups, explain, the data source, read_messages, the bench) asks here.

The layouts read, each with the RocketMQ setting that produces it (LAYOUTS):

- plain: `<storePathRootDir>/commitlog/`, the default (`storePathCommitLog` unset);
- several directories (RIP-7, 4.9.2+): `storePathCommitLog=/d1/commitlog,/d2/commitlog` (plus
  `readOnlyCommitLogStorePaths`): one log whose files (named by offset, as always) are spread over the
  directories; MultiPathMappedFileQueue lists them all and sorts them by name;
- DLedger (4.5+, `enableDLegerCommitLog=true`): entries (schemas/log/dledger.py) in `<storePathRootDir>/
  dledger-<dLegerSelfId>/data/`, or where `storePathDLedgerCommitLog` points (DLedger's MultiPathMmapFileList
  takes a comma-separated list there too); no `commitlog/`;
- plain then DLedger: a broker switched to DLedger keeps its old `commitlog/` in front; DLedgerCommitLog's
  dividedCommitlogOffset (the end of the old log's last file) is where the DLedger files begin, and
  getData(offset) reads the old files below it, DLedger's above. Both are one log of one offset space.

Every layout names a file by the global offset of its first byte and maps an offset to bytes the same way
(the file whose range holds it, at offset - start); a DLedger file holds a 48-byte entry header before each
record, and the offsets the consume queue, the offsetMsgId and the record itself give are the record's. So
one list of files (CommitLog) with a kind each serves every layout. Only names and sizes are listed, plus the
first 8 bytes of a file of each `--commitlog` directory, whose format must be found from its bytes.
"""
from __future__ import annotations

import bisect
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from schemas.errors import UnsupportedStoreError
from schemas.log import dledger
from schemas.log import layout as L
from schemas.log.records import walk_records
from schemas.queues.cq_rebuild import END_SHORT, Walked, rebuild_units
from schemas.store import storefs

RECORD_MARGIN = 64 << 10  # bytes read past a plain split's end: its last record, unless longer (then read again)


@dataclass(frozen=True)
class LogFormat:
    """How a log file holds its records; one subclass per format, chosen once when its directory is listed (by
    name, or by its first bytes), and asked, never compared by name: where a reader of some records starts
    reading, how a split's bounds meet records, how the dispatcher's units are rebuilt from a file. Equal after
    pickling (a task's plan)."""

    name: str
    header_size = 0  # bytes before each record that belong to the format

    def record_starts(self, buf: np.ndarray, base: int, path: str) -> np.ndarray:
        """Relative starts of the records of buf (from a record's start, or the file's first byte)."""
        return walk_records(buf, base, path)[0]

    def header_problems(self, buf: np.ndarray, starts: np.ndarray, offsets: np.ndarray,
                        sizes: np.ndarray) -> list[tuple[str, np.ndarray]]:
        """[(reason, rows)] of the format's own headers before the records at `starts` that are damaged."""
        return []

    def read_from(self, rel: int) -> int:
        """Where in its file a reader of the records from `rel` (a record's start) starts reading: there, as
        records follow one another."""
        return rel

    def bounds_to_find(self, logfile: LogFile, ranges: Iterable[tuple[int, int]]) -> list[int]:
        """The bounds of [start, end) ranges inside the file to move to the first record start at or after
        each (snap_to_records: one pass over the file's record headers)."""
        return sorted({b for span in ranges for b in span if logfile.start < b < logfile.start + logfile.length})

    def snapped(self, ranges: Sequence[tuple[int, int]], moved: dict[int, int]) -> list[tuple[int, int]]:
        """The ranges with their bounds moved ({bound: record start}), the empty ones dropped."""
        out = [(moved.get(start, start), moved.get(end, end)) for start, end in ranges]
        return [(start, end) for start, end in out if start < end]

    def units(self, logfile: LogFile, buf: np.ndarray, pos: int = 0, stop: int | None = None) -> Walked:
        """cq_rebuild.Walked of the records from pos (a record's start) to stop in a file's bytes (buf from its
        first byte): the records hopped over."""
        return rebuild_units(buf, logfile.start, pos, stop)

    def walk_split(self, read: Callable[[int, int], np.ndarray], logfile: LogFile, rel: int,
                   stop: int) -> tuple[Walked, int]:
        """(Walked of the records starting in [rel, stop) of the file, where it ended relative to the file's
        start): read(pos, length) gives the file's bytes; a plain file's read from rel with RECORD_MARGIN past
        stop (a longer last record is read again, whole)."""
        want = RECORD_MARGIN
        while True:
            buf = read(rel, min(logfile.length - rel, stop - rel + want))
            walked = rebuild_units(buf, logfile.start + rel, 0, stop - rel)
            if walked.how != END_SHORT or rel + len(buf) >= logfile.length:  # a record cut by the file's end:
                return walked, rel + walked.end  # never dispatched by the broker either
            want = walked.end + max(int.from_bytes(bytes(buf[walked.end:walked.end + 4]), "big"), 8) - (stop - rel)


@dataclass(frozen=True)
class PlainLog(LogFormat):
    """CommitLog's MappedFiles: records back to back, a blank end record where a file's space ran out."""


@dataclass(frozen=True)
class DLedgerLog(LogFormat):
    """DLedger's entries (schemas/log/dledger.py), each wrapping one record: found by walking the file's entries
    from its first byte, so a reader starts there and a file is one split."""

    header_size = dledger.HEADER_SIZE

    def record_starts(self, buf: np.ndarray, base: int, path: str) -> np.ndarray:
        return dledger.walk_entries(buf, base, path)[0]

    def header_problems(self, buf: np.ndarray, starts: np.ndarray, offsets: np.ndarray,
                        sizes: np.ndarray) -> list[tuple[str, np.ndarray]]:
        if not len(starts):
            return []
        return dledger.header_problems(buf, np.asarray(starts, np.int64) - dledger.HEADER_SIZE, offsets, sizes)

    def read_from(self, rel: int) -> int:
        return 0

    def bounds_to_find(self, logfile: LogFile, ranges: Iterable[tuple[int, int]]) -> list[int]:
        return []

    def snapped(self, ranges: Sequence[tuple[int, int]], moved: dict[int, int]) -> list[tuple[int, int]]:
        return [(min(s for s, _ in ranges), max(e for _, e in ranges))]

    def units(self, logfile: LogFile, buf: np.ndarray, pos: int = 0, stop: int | None = None) -> Walked:
        starts = self.record_starts(buf, logfile.start, logfile.path)
        lo, hi = np.searchsorted(starts, [pos, len(buf) if stop is None else stop])
        walked = rebuild_units(buf, logfile.start, int(lo), int(hi), starts=starts)
        walked.end = int(starts[walked.end]) if walked.end < len(starts) else len(buf)
        return walked

    def walk_split(self, read: Callable[[int, int], np.ndarray], logfile: LogFile, rel: int,
                   stop: int) -> tuple[Walked, int]:
        walked = self.units(logfile, read(0, logfile.length), rel, stop)
        return walked, walked.end


PLAIN, DLEDGER = PlainLog("plain"), DLedgerLog("dledger")

LAYOUTS = {
    "plain": "the default: <storePathRootDir>/commitlog (storePathCommitLog unset)",
    "plain, several directories": "storePathCommitLog=DIR1,DIR2,... (RIP-7, RocketMQ 4.9.2+), "
                                  "plus readOnlyCommitLogStorePaths",
    "DLedger": "enableDLegerCommitLog=true: <storePathRootDir>/dledger-<dLegerSelfId>/data, or "
               "storePathDLedgerCommitLog=DIR[,DIR...]",
    "plain then DLedger": "a plain broker switched to enableDLegerCommitLog=true: its old commitlog/ up to "
                          "dividedCommitlogOffset, DLedger entries from there",
}

_DLEDGER_DIR = re.compile(r"^dledger-(.+)$")


class StoreLayoutError(UnsupportedStoreError):
    """A commit log this version cannot find or read (an unknown file layout, DLedger's index without its
    data, ...): the message names what was found and where. Nothing is damaged, so not exit 1: the job and
    explain exit 2, as for arguments that name nothing (`--commitlog` says where the log is)."""

    exit_code = 2


@dataclass(frozen=True)
class LogFile:
    """One data file of the log: the global offset its name gives, its path and length, its format."""

    start: int
    path: str
    length: int
    kind: LogFormat = PLAIN
    size: int = 0  # the mapped-file size of its directory's files (mappedFileSizeCommitLog)

    @property
    def header_size(self) -> int:
        """Bytes before each record that belong to the file's format: a DLedger entry's header."""
        return self.kind.header_size

    @property
    def end(self) -> int:
        return self.start + max(self.size, self.length)


@dataclass(frozen=True)
class LogDir:
    """A directory the log's files were listed from, and how it was found."""

    path: str
    kind: LogFormat
    files: int
    found_as: str  # "<root>/commitlog", "<root>/dledger-n0/data", "--commitlog"


@dataclass(frozen=True)
class CommitLog:
    """The log's data files in offset order, whatever directories and formats they come from."""

    files: tuple = ()
    dirs: tuple = ()
    _starts: tuple | None = field(default=None, compare=False, repr=False)

    @property
    def file_size(self) -> int:
        """The mapped-file size of the log's newest files (0 without files)."""
        return self.files[-1].size if self.files else 0

    @property
    def layout(self) -> str:
        """The name of the layout (a key of LAYOUTS), "none" without directories."""
        kinds = {d.kind for d in self.dirs if d.files} or {d.kind for d in self.dirs}
        if kinds == {PLAIN, DLEDGER}:
            return "plain then DLedger"
        if kinds == {DLEDGER}:
            return "DLedger"
        if not kinds:
            return "none"
        return "plain, several directories" if len(self.dirs) > 1 else "plain"

    @property
    def divided_offset(self) -> int | None:
        """dividedCommitlogOffset of a plain-then-DLedger log: the first DLedger file's start (else None)."""
        first = next((f for f in self.files if f.kind == DLEDGER), None)
        return first.start if first is not None and self.files[0].kind == PLAIN else None

    def file_at(self, offset: int) -> LogFile | None:
        """The LogFile whose range holds a commit-log offset, or None (deleted by retention, missing)."""
        if self._starts is None:
            object.__setattr__(self, "_starts", tuple(f.start for f in self.files))
        assert self._starts is not None  # set above
        k = bisect.bisect_right(self._starts, offset) - 1
        if k >= 0 and offset < self.files[k].end:
            return self.files[k]
        return None

    def missing(self, offset: int) -> tuple[str, bool]:
        """(name, deleted) of the file that would hold an offset no file holds: `commitlog/<20 digits>`, and
        whether it lies below the first file (deleted by retention) rather than in a hole or beyond."""
        size = self.file_size or L.DEFAULT_COMMITLOG_FILE_SIZE
        first = self.files[0] if self.files else None
        if first is not None and offset < first.start:
            size = first.size or size
        start = offset // size * size
        return f"commitlog/{L.file_name(start)}", first is not None and offset < first.start

    def kinds(self) -> list[tuple[LogFormat, list[LogFile], int]]:
        """[(kind, files, file size)] of each format's files, in offset order (store_checks checks each)."""
        out: list[tuple[LogFormat, list[LogFile], int]] = []
        for kind in (PLAIN, DLEDGER):
            files = [f for f in self.files if f.kind == kind]
            if files:
                out.append((kind, files, files[0].size))
        return out

    def describe(self) -> list[dict[str, Any]]:
        """One dict per directory read: what `python -m jobs.dump STORE layout` prints."""
        return [dict(layout=self.layout, dir=d.path, format=d.kind.name, files=d.files, found_as=d.found_as,
                     file_size=next((f.size for f in self.files if f.kind == d.kind), None),
                     divided_commitlog_offset=self.divided_offset, setting=LAYOUTS.get(self.layout))
                for d in self.dirs]


def _is_dir(fs, path):
    return fs.get_file_info(path).type == pafs.FileType.Directory


def _names(fs, path):
    return sorted(i.base_name for i in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)))


def find_log(fs: pafs.FileSystem, root: str, dirs: Sequence[str] = ()) -> tuple[CommitLog, list[str]]:
    """(CommitLog, names ignored) of a store: from `dirs` (--commitlog: paths on the store's filesystem)
    when given, else where RocketMQ puts the log under the store root. StoreLayoutError when the log cannot
    be found or read, naming what was found and where."""
    if dirs:
        found = []
        for d in dirs:
            if not _is_dir(fs, d):
                raise StoreLayoutError(f"--commitlog {d}: not a directory")
            found.append((d, None, "--commitlog"))
    else:
        found = _default_dirs(fs, root)
    by_kind: dict[LogFormat, list[Any]]
    by_kind, ignored, listed = {PLAIN: [], DLEDGER: []}, [], []
    for path, kind, how in found:
        segments, odd = storefs.list_segments(fs, path)
        ignored += odd
        if kind is None:
            kind = _sniffed_kind(fs, path, segments)
        by_kind[kind] += segments
        listed.append(LogDir(path, kind, len(segments), how))
    files = []
    for kind, segments in by_kind.items():  # one file size per format, over all its directories
        segments.sort(key=lambda s: s.start)
        size = storefs.file_size_of(segments) or 0
        files += [LogFile(s.start, s.path, s.length, kind, size) for s in segments]
    return CommitLog(_in_order(files), tuple(listed)), ignored


def _default_dirs(fs, root):
    """[(dir, kind, how found)]: `<root>/commitlog` and `<root>/dledger-<selfId>/data` as a broker leaves them."""
    plain = f"{root}/commitlog"
    has_plain = _is_dir(fs, plain)
    members = [n for n in _names(fs, root) if _DLEDGER_DIR.match(n) and _is_dir(fs, f"{root}/{n}")]
    with_data = [m for m in members if storefs.list_segments(fs, f"{root}/{m}/data")[0]]
    with_index = [m for m in members if storefs.list_segments(fs, f"{root}/{m}/index")[0]]
    if len(with_data) > 1:
        raise StoreLayoutError(f"{root} holds the DLedger data of {len(with_data)} members "
                               f"({', '.join(f'{m}/data/' for m in with_data)}): a broker writes one "
                               "(dledger-<dLegerSelfId>); give the one to read with --commitlog DIR")
    if not with_data and with_index:
        m = with_index[0]
        plain_files = len(storefs.list_segments(fs, plain)[0]) if has_plain else 0
        raise StoreLayoutError(
            f"{root}/{m}/index/ holds DLedger index files but {root}/{m}/data/ holds no data file"
            + (f" (commitlog/ holds {plain_files} plain file(s))" if plain_files else "")
            + ": the entries are kept where storePathDLedgerCommitLog points; give that directory with "
              "--commitlog DIR[,DIR...] (the index is not needed)")
    found = [(plain, PLAIN, "<root>/commitlog")] if has_plain else []
    found += [(f"{root}/{m}/data", DLEDGER, f"<root>/{m}/data") for m in with_data]
    if not found:
        seen = [n + ("/" if _is_dir(fs, f"{root}/{n}") else "") for n in _names(fs, root)]
        raise StoreLayoutError(
            f"{root}: no commit log found (it holds {', '.join(seen[:8]) or 'nothing'}"
            f"{' ...' if len(seen) > 8 else ''}): RocketMQ keeps it in <root>/commitlog/ (plain) or "
            "<root>/dledger-<dLegerSelfId>/data/ (enableDLegerCommitLog=true); give a log kept elsewhere with "
            "--commitlog DIR[,DIR...]; is it a broker's storePathRootDir?")
    return found


def _sniffed_kind(fs, path, segments):
    """The format of a --commitlog directory's files, from the first 8 bytes of its first file that holds
    data: `[int size][int magic]` of a record (or a blank end record), or `[int 1][int size]` of a DLedger
    entry (or its end mark -1). A directory without data: by its name (`data` under `dledger-*`)."""
    for seg in segments:
        head = storefs.read_range(fs, seg.path, 0, 8)
        if len(head) < 8 or not head.any():
            continue
        first, second = (int.from_bytes(head[i:i + 4].tobytes(), "big", signed=True) for i in (0, 4))
        if second in L.MESSAGE_MAGICS or second == L.BLANK_MAGIC:
            return PLAIN
        if first in (dledger.MAGIC, dledger.BLANK_MAGIC) and second > 0:
            return DLEDGER
        raise StoreLayoutError(f"--commitlog {path}: {seg.path} starts with bytes {head.tobytes().hex()}: neither "
                               "a commit-log record ([size][magic 0xdaa320a7]) nor a DLedger entry ([1][size]); "
                               "not a layout this version reads")
    parent = os.path.basename(os.path.dirname(path.rstrip("/")))
    return DLEDGER if os.path.basename(path.rstrip("/")) == "data" and _DLEDGER_DIR.match(parent) else PLAIN


def _in_order(files):
    """The files by start; a start in two directories, or plain files after DLedger ones, refused."""
    files.sort(key=lambda f: f.start)
    for a, b in zip(files, files[1:]):
        if a.start == b.start:
            raise StoreLayoutError(f"commit-log file {L.file_name(a.start)} is in two directories: {a.path} and "
                                   f"{b.path}; give each directory once")
        if a.kind == DLEDGER and b.kind == PLAIN:
            raise StoreLayoutError(f"plain commit-log file {b.path} starts after DLedger data file {a.path}: a "
                                   "broker switched to DLedger keeps its old commit log in front "
                                   "(dividedCommitlogOffset), never after")
    return tuple(files)


def record_starts(logfile: LogFile, buf: np.ndarray) -> np.ndarray:
    """Relative starts of every record in a file's bytes (buf from the file's first byte), in log order: a
    walk of record headers or of DLedger entries. For read_messages and dump, not for the job's tasks (their
    record starts come from the consume queue)."""
    return logfile.kind.record_starts(buf, logfile.start, logfile.path)


def file_units(logfile: LogFile, buf: np.ndarray, pos: int = 0, stop: int | None = None) -> Walked:
    """The dispatcher's units rebuilt from a commit-log file's bytes (buf from its first byte; pos, stop: the
    records starting there): its format's walk (LogFormat.units)."""
    return logfile.kind.units(logfile, buf, pos, stop)


def header_problems(logfile: LogFile, buf: np.ndarray, starts: np.ndarray, offsets: np.ndarray,
                    sizes: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """[(reason, rows)] of the records at `starts` of buf (the units' commit-log `offsets` and `sizes`) whose
    DLedger entry header is damaged: none in a plain file. buf must hold header_size bytes before each."""
    return logfile.kind.header_problems(buf, starts, offsets, sizes)
