"""Problems visible from a store's listing alone: stray files, truncated or missing segments.

Mapped files are preallocated to full size and named by their start offset, so a shorter file is a
truncated one and a hole between names is a missing one (a hole before the first commit-log file is
normal: retention deletes the oldest files)."""
from schemas import layout as L


def _segment_problems(segments, file_size, what, topic=None, queue_id=None):
    out = []
    for seg in segments:
        if file_size and seg.length != file_size:
            out.append(dict(file=seg.path, offset=seg.start, topic=topic, queue_id=queue_id,
                            reason=f"truncated {what} file: {seg.length} bytes, {file_size} expected"))
    for a, b in zip(segments, segments[1:]):
        if file_size and b.start - a.start > file_size:
            missing = [L.file_name(s) for s in range(a.start + file_size, b.start, file_size)]
            out.append(dict(file=b.path, offset=a.start + file_size, topic=topic, queue_id=queue_id,
                            reason=f"missing {what} file(s) {', '.join(missing[:3])}"
                                   + ("..." if len(missing) > 3 else "")))
    return out


def layout_problems(layout):
    """[{file, offset, topic, queue_id, reason}] for every oddity of the listing."""
    problems = [dict(file=p, offset=None, topic=None, queue_id=None,
                     reason="not a segment file (a .tmp or an unknown name): ignored") for p in layout.ignored]
    # One size per kind for the whole store (a broker setting): the largest seen, so that a lone
    # truncated file in a queue of one file is still found.
    cq_size = max([q.cq_file_size for q in layout.queues] + [s.length for q in layout.queues for s in q.cq] + [0])
    ext_size = max([q.ext_file_size for q in layout.queues] + [s.length for q in layout.queues for s in q.ext] + [0])
    for _, files, size in layout.log.kinds():  # each format's files (a plain log before DLedger's) by its size
        problems += _segment_problems(files, max([size] + [f.length for f in files]), "commit-log")
    for q in layout.queues:
        if cq_size % L.CQ_UNIT_SIZE:
            problems.append(dict(file=q.cq[0].path, offset=0, topic=q.topic, queue_id=q.queue_id,
                                 reason=f"consume-queue file size {cq_size} is not a multiple of 20"))
        problems += _segment_problems(q.cq, cq_size, "consume-queue", q.topic, q.queue_id)
        problems += _segment_problems(q.ext, ext_size, "consume-queue-ext", q.topic, q.queue_id)
    return problems
