"""A group's deliveries over store time, as the report draws them: filled by the tasks' counters, added up on
the driver (summary.py), drawn by html.py."""


class Timeline:
    """(delivered, collided, filtered) per bucket of store time of one group and topic, at the widest bucket
    width added so far (filtering/topic_replay.py's widths each divide the next: re-bucketing is exact)."""

    def __init__(self):
        self.width, self.counts = 0, {}

    def add(self, width, buckets, counts):
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

    def report(self):
        buckets = sorted(self.counts)
        return {"width": self.width, "buckets": buckets, "counts": [self.counts[b] for b in buckets]}
