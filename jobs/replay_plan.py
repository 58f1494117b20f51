"""The plan a replay task needs besides its units: built on the driver (jobs/plan.py), shipped to every task."""
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ReplayPlan:
    """Everything a task needs besides its units; small, built on the driver, shipped to executors."""

    store_uri: str
    commitlog_file_size: int
    commitlog_files: tuple  # ((start, path, length), ...)
    subscriptions: tuple  # CompiledSubscription, compiled without errors
    registrations: tuple = ()  # every stored SQL92 registration of the store (the dispatcher's), compiled
    # False when the store's registrations are unknown (a damaged consumerFilter.json read as absent): the stored
    # bitmaps are then not compared, as every one would differ from a bitmap of no registration
    audit_bitmaps: bool = True
    bloom_f: int = 20
    bloom_n: int = 32
    with_body: bool = True
    max_body: int = 64 << 20  # bytes a compressed body may inflate to; beyond, it is null (audit/bodies)
    support_retry: bool = False
    on_corrupt: str = "fail"
    verify_crc: bool = False
    split_size: int = 128 << 20
    start_offsets: tuple = ()  # ((group, topic, queue_id, first queue offset), ...) for --from committed
    data_end: int = None  # end of the last record any consume queue points at: no split starts beyond it
    since: int = None  # the store-time window, epoch ms, since <= t < until, checked on every unit
    until: int = None
    spans: tuple = None  # with a window: commit-log [start, end) ranges its units point into (jobs/window.py)
    files_by_start: dict = field(default=None, compare=False)

    def file_of(self, start):
        if self.files_by_start is None:
            object.__setattr__(self, "files_by_start", {s: (p, n) for s, p, n in self.commitlog_files})
        return self.files_by_start.get(start)
