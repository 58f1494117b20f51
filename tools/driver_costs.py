"""Costs that do not grow on the driver (issue 47): on the bench store (`make bench`), an Iceberg night of the first
10% of store time, a night of the rest (`--starting-offsets iceberg`), and a Parquet run of that rest; prints per
run the Python driver's peak memory (VmHWM of the process running jobs/replay.py, read from /proc while it
runs), the Iceberg commit's seconds, the job's seconds and the load average before it. Asserts nothing.

    python tools/driver_costs.py [--store build/bench/store-3000000-7] [--work build/bench/costs]
    python tools/driver_costs.py --s3 [--store build/bench/store-300000-7]

With --s3, OUT is on a local S3 server (tools/local_s3.py) instead: an Iceberg run (its warehouse on disk) and a
Parquet run of the whole store, each with the Iceberg commit's seconds, the run's wall time, and the copies the
server made (PUT requests carrying x-amz-copy-source are not told apart in its log: the PUTs beyond the tasks'
own uploads, counted per part written).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TENTH, END = 1795000030000, 1795000300000  # the bench store's store times: its first tenth, and its end


class DriverPeak(threading.Thread):
    """VmHWM of this process's descendant running jobs/replay.py under python, polled until stopped."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak_kib, self.stop = 0, False

    def run(self):
        while not self.stop:
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
                    if not (b"python" in cmd[0] and any(a.endswith(b"jobs/replay.py") for a in cmd)):
                        continue
                    if not _descends(int(pid), os.getpid()):
                        continue
                    hwm = next(int(line.split()[1]) for line in open(f"/proc/{pid}/status") if line.startswith("VmHWM"))
                except (OSError, StopIteration, IndexError):
                    continue
                self.peak_kib = max(self.peak_kib, hwm)
            time.sleep(0.1)


def _descends(pid, ancestor):
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
    return False


def run(label, args, out, env=None):
    if "://" not in out:
        shutil.rmtree(out, ignore_errors=True)
    load = open("/proc/loadavg").read().split()[:3]
    peak = DriverPeak()
    peak.start()
    cmd = [os.path.join(ROOT, ".venv", "bin", "spark-submit"), "--master", "local[2]", "--driver-memory", "4g",
           "jobs/replay.py", *args, "--out", out, "--no-retry"]
    t = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=os.environ.get("MQREPLAY_ROOT", ROOT),
                          env={**os.environ, **(env or {})})
    wall = time.time() - t
    peak.stop = True
    peak.join()
    if proc.returncode:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"{label}: exit {proc.returncode}")
    summary = json.loads(_read(out, "summary.json"))
    commit = (summary.get("iceberg") or {}).get("commit_seconds")
    print(f"{label}: driver peak {peak.peak_kib / 1024:.0f} MiB; commit {commit} s; job {summary['job_seconds']} s "
          f"(wall {wall:.0f} s); load before {' '.join(load)}", flush=True)
    return peak.peak_kib, summary


def _read(out, name):
    import pyarrow.fs as pafs
    fs, path = pafs.FileSystem.from_uri(out if "://" in out else os.path.abspath(out))
    with fs.open_input_stream(f"{path}/{name}") as f:
        return f.read().decode("utf-8")


def s3_runs(a):
    """The Iceberg and Parquet runs with OUT on a local S3 server: the copies of each part, from its access log."""
    sys.path.insert(0, ROOT)
    from tools.local_s3 import LocalS3, log_lines
    log = os.path.join(a.work, "s3-server.log")
    with LocalS3(log) as server:
        os.environ.update(server.env)  # this process reads each run's summary.json there
        server.filesystem().create_dir("costs")
        uri = lambda name: f"s3://costs/{name}?endpoint_override={server.endpoint}&scheme=http"  # noqa: E731
        common = ["--store", a.store, "--subscriptions", a.subscriptions]
        ice = ["--sink", "iceberg", "--catalog-uri", f"sqlite:///{a.work}/catalog.db", "--warehouse",
               f"{a.work}/wh", "--namespace", "s3night"]
        for label, args, name in (("Iceberg, OUT on S3", common + ice, "ice"), ("Parquet, OUT on S3", common, "pq")):
            first = log_lines(log)
            run(label, args, uri(name), env=server.env)
            uploads, copies, reads = _part_requests(log, first)
            print(f"    {uploads} parts uploaded by the tasks; then {copies / max(uploads, 1):.2f} server-side copies "
                  f"and {reads / max(uploads, 1):.2f} reads (GET) a part", flush=True)


def _part_requests(log, first):
    """(parts the tasks uploaded, server-side copies of parts, GETs of parts) in the log from line `first`: a
    task's upload is multipart (uploadId), a copy a PUT of a whole object."""
    import re
    request = re.compile(r'"(?:\x1b\[[0-9;]*m)*(GET|PUT) (\S+\.parquet\S*) HTTP')
    uploads, copies, reads = set(), 0, 0
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in list(f)[first:]:
            found = request.search(line)
            if not found:
                continue
            method, path = found.groups()
            if method == "GET":
                reads += 1
            elif "uploadId=" in path:
                uploads.add(path.split("?", 1)[0])
            else:
                copies += 1
    return len(uploads), copies, reads


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--store", default=os.path.join(ROOT, "build", "bench", "store-3000000-7"))
    p.add_argument("--subscriptions", default=os.path.join(ROOT, "build", "bench", "subscriptions.json"))
    p.add_argument("--work", default=os.path.join(ROOT, "build", "bench", "costs"))
    p.add_argument("--s3", action="store_true", help="OUT on a local S3 server: copies per part, commit seconds")
    a = p.parse_args(argv)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    if a.s3:
        return s3_runs(a)
    common = ["--store", a.store, "--subscriptions", a.subscriptions]
    ice = ["--sink", "iceberg", "--catalog-uri", f"sqlite:///{a.work}/catalog.db", "--warehouse", f"{a.work}/wh",
           "--namespace", "nightly", "--starting-offsets", "iceberg"]
    n1 = run("Iceberg night 1 (first 10%)", common + ice + ["--until", str(TENTH)], f"{a.work}/n1")[0]
    n2 = run("Iceberg night 2 (the rest)", common + ice + ["--until", str(END)], f"{a.work}/n2")[0]
    pq = run("Parquet, the rest", common + ["--since", str(TENTH), "--until", str(END)], f"{a.work}/pq")[0]
    print(f"night 2 / night 1 {n2 / n1:.2f}x; night 2 / Parquet {n2 / pq:.2f}x (target at most 1.25x each)")


if __name__ == "__main__":
    main()
