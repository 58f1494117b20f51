"""Where a task's time goes: every split of a store run in this process as a Spark task runs it (`run_split`),
profiled on CPU time (cProfile with time.process_time, so that the neighbours of a shared machine weigh less),
cumulative CPU-seconds per stage. A dev tool (docs/performance.md), not part of the job.

    .venv/bin/python tools/profile_splits.py build/bench/store-200000-7 build/bench/subscriptions.json \
        [--sink normalized|noop|wide] [--passes 2] [--splits N] [--top 25]

The first pass loads numba's cached kernels and warms the page cache and is left out; each stage's figure is
the median over the other passes (with their range), since a shared machine's CPU time varies from pass to pass.
"""
import argparse
import cProfile
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (stage, function name as cProfile lists it: file suffix, function)
STAGES = [
    ("units: split_units", "split_units.py", "split_units"),
    ("read + decode: decode_messages", "split_decode.py", "decode_messages"),
    ("  of which decode_records", "commitlog.py", "decode_records"),
    ("filter: decide_topic", "decision.py", "decide_topic"),
    ("  of which dispatch_topic (SQL92 registrations)", "", "dispatch_topic"),
    ("rows: _message_rows", "", "_message_rows"),
    ("sink: SplitWriter.write", "sink.py", "write"),
    ("  of which write_table", "", "write_table"),
    ("all tasks: run_split", "stage.py", "run_split"),
]


def stage_times(stats):
    """{stage: cumulative seconds} from a pstats.Stats, functions matched by file suffix and name."""
    out = {}
    for label, suffix, name in STAGES:
        total = 0.0
        for (path, _, func), (_, _, _, cum, callers) in stats.stats.items():
            if func == name and path.endswith(suffix):
                # a recursive or nested entry counts once: callers that are the same function are left out
                total += cum
        out[label] = total
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store")
    ap.add_argument("subscriptions")
    ap.add_argument("--sink", default="normalized", choices=("normalized", "noop", "wide"))
    ap.add_argument("--passes", type=int, default=2, help="passes (the first is a warm-up, left out)")
    ap.add_argument("--splits", type=int, default=None, help="only the first N splits")
    ap.add_argument("--top", type=int, default=0, help="also print the N largest functions by own time")
    ap.add_argument("--callers", action="append", default=[], metavar="NAME",
                    help="also print who calls the functions matching NAME (a pstats pattern), and their cost")
    args = ap.parse_args(argv)

    from jobs.runtime.worker_daemon import keep_freed_memory

    keep_freed_memory()  # as the job's daemon sets it for its workers, before pyarrow loads
    from jobs.output.layouts import LAYOUTS, NORMALIZED
    from jobs.output.writers import CountingSplitWriter, SinkSpec, SplitWriter
    from jobs.plan.build import build_plan
    from jobs.settings import JobOptions
    from jobs.task.split_units import commitlog_splits
    from jobs.task.stage import run_split

    t = time.process_time()
    planned = build_plan(JobOptions(store=args.store, subscription_files=(args.subscriptions,), retry=False,
                                    layout=LAYOUTS.get(args.sink, NORMALIZED)))
    planning = time.process_time() - t
    plan = planned.plan
    splits = commitlog_splits(plan)[:args.splits]
    per_pass = []
    for k in range(args.passes):
        out = tempfile.mkdtemp(prefix="mqreplay-profile-")
        try:
            spec = SinkSpec(out, LAYOUTS.get(args.sink, NORMALIZED), plan.with_body,
                            CountingSplitWriter if args.sink == "noop" else SplitWriter)
            prof = cProfile.Profile(time.process_time)
            c = time.process_time()
            prof.enable()
            for index, split in enumerate(splits):
                run_split(plan, spec, index, split, "local")
            prof.disable()
            cpu = time.process_time() - c
        finally:
            shutil.rmtree(out, ignore_errors=True)
        stats = pstats.Stats(prof)
        print(f"pass {k + 1}: {len(splits)} splits, {cpu:.2f} CPU-s (planning {planning:.2f})")
        if k or args.passes == 1:
            per_pass.append(stage_times(stats))
    print(f"CPU-s per stage, median of {len(per_pass)} passes (min-max)")
    for label in per_pass[0]:
        seconds = sorted(p[label] for p in per_pass)
        print(f"  {label:50s} {statistics.median(seconds):7.3f} ({seconds[0]:.3f}-{seconds[-1]:.3f})")
    if args.top:
        stats.sort_stats("tottime").print_stats(args.top)
    for name in args.callers:
        stats.sort_stats("cumulative").print_callers(name)


if __name__ == "__main__":
    main()
