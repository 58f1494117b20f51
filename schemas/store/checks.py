"""Problems visible from a store's listing alone: stray files, truncated or missing segments.

Mapped files are preallocated to full size and named by their start offset, so a shorter file is a
truncated one and a hole between names is a missing one (a hole before the first commit-log file is
normal: retention deletes the oldest files)."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

from schemas.log import layout as L

if TYPE_CHECKING:
    from schemas.store.store import QueueFiles, StoreLayout


def _segment_problems(segments, file_size, what, topic=None, queue_id=None):
    out = []
    for seg in segments:
        if file_size and seg.length < file_size:
            out.append(dict(file=seg.path, offset=seg.start, topic=topic, queue_id=queue_id,
                            reason=f"truncated {what} file: {seg.length} bytes, {file_size} expected"))
    for a, b in zip(segments, segments[1:]):
        if file_size and b.start - a.start > file_size:
            missing = [L.file_name(s) for s in range(a.start + file_size, b.start, file_size)]
            out.append(dict(file=b.path, offset=a.start + file_size, topic=topic, queue_id=queue_id,
                            reason=f"missing {what} file(s) {', '.join(missing[:3])}"
                                   + ("..." if len(missing) > 3 else "")))
    return out


def layout_problems(layout: StoreLayout) -> list[dict[str, Any]]:
    """[{file, offset, topic, queue_id, reason}] for every oddity of the listing."""
    problems = [dict(file=p, offset=None, topic=None, queue_id=None,
                     reason="not a segment file (a .tmp or an unknown name): ignored") for p in layout.ignored]
    cq_size = consume_queue_file_size(layout.queues)
    ext_size = max([q.ext_file_size for q in layout.queues] + [s.length for q in layout.queues for s in q.ext] + [0])
    for _, files, size in layout.log.kinds():  # each format's files (a plain log before DLedger's) by its size
        problems += _segment_problems(files, max([size] + [f.length for f in files]), "commit-log")
    for q in layout.queues:
        problems += _odd_lengths(q, cq_size)
        problems += _segment_problems(q.cq, cq_size, "consume-queue", q.topic, q.queue_id)
        problems += _segment_problems(q.ext, ext_size, "consume-queue-ext", q.topic, q.queue_id)
    return problems


def consume_queue_file_size(queues: Sequence[QueueFiles]) -> int:
    """The store's consume-queue mapped-file size (a broker setting, one for every queue), told by the files
    that damage does not change: the gaps between the names of queues of several files, else the lengths
    holding whole units; the most common, the larger on a tie, so that one damaged file (a few bytes
    appended, a truncation) is blamed on itself and never sets the size every other file is measured by."""
    named = [q.cq_file_size for q in queues if len(q.cq) > 1 and q.cq_file_size % L.CQ_UNIT_SIZE == 0]
    sizes = named or [s.length for q in queues for s in q.cq if s.length % L.CQ_UNIT_SIZE == 0]
    if not sizes:
        return max([s.length for q in queues for s in q.cq] + [0])
    return max(set(sizes), key=lambda size: (sizes.count(size), size))


def _odd_lengths(queue, size):
    """Consume-queue files longer than the store's, or of its length or more and not of whole units (bytes
    appended): each its own problem, at the first byte that is not a unit (a shorter file is a truncated one,
    _segment_problems)."""
    out = []
    for seg in queue.cq:
        whole = seg.length // L.CQ_UNIT_SIZE * L.CQ_UNIT_SIZE
        if size and seg.length < size:
            continue
        if seg.length % L.CQ_UNIT_SIZE:
            reason = (f"consume-queue file of {seg.length} bytes ends in a partial unit "
                      f"({seg.length - whole} byte(s) after its last whole one)")
        elif size and seg.length > size:
            reason = f"consume-queue file of {seg.length} bytes, longer than the store's {size}"
        else:
            continue
        out.append(dict(file=seg.path, offset=seg.start + min(whole, size or whole), topic=queue.topic,
                        queue_id=queue.queue_id, reason=reason))
    return out


def without_foreign_units(layout: StoreLayout) -> StoreLayout:
    """The layout with each consume-queue file longer than the store's read as the store's length: the whole
    units appended past it are not the broker's (they would repeat the next file's queue offsets), and
    layout_problems names the file."""
    size = consume_queue_file_size(layout.queues)
    if not size or all(s.length <= size for q in layout.queues for s in q.cq):
        return layout
    queues = tuple(replace(q, cq=tuple(replace(s, length=min(s.length, size)) for s in q.cq)) for q in layout.queues)
    return replace(layout, queues=queues)
