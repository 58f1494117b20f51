"""A group's deliveries over store time, as the report draws them: filled by the tasks' counters, added up on
the driver (summary.py), drawn by html.py."""
from collections.abc import Iterable, Sequence
from typing import Any


class Timeline:
    """(delivered, collided, filtered) per bucket of store time of one group and topic, at the widest bucket
    width added so far (filtering/topic_replay.py's widths each divide the next: re-bucketing is exact)."""

    counts: dict[int, list[int]]  # {bucket start: [delivered, collided, filtered]}

    def __init__(self) -> None:
        self.width, self.counts = 0, {}

    def add(self, width: int, buckets: Iterable[int], counts: Iterable[Sequence[int]]) -> None:
        triple: Sequence[int]  # a bucket's (delivered, collided, filtered)
        if width > self.width:
            old, self.width, self.counts = self.counts, width, {}
            for bucket, triple in old.items():
                self._put(bucket, triple)
        for bucket, triple in zip(buckets, counts):
            self._put(bucket, triple)

    def _put(self, bucket, triple):
        slot = self.counts.setdefault(bucket // self.width * self.width, [0, 0, 0])
        for i, n in enumerate(triple):
            slot[i] += n

    def report(self) -> dict[str, Any]:
        buckets = sorted(self.counts)
        return {"width": self.width, "buckets": buckets, "counts": [self.counts[b] for b in buckets]}
