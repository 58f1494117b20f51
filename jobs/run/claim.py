"""One run per OUT: a run claims OUT before it plans and holds the claim until it has published or failed,
so that a second run on the same OUT (a scheduler's retry racing a slow first attempt) refuses at once,
naming the holder, instead of both writing and one deleting the other's answer.

The claim is a small file beside OUT, `OUT.claim`, saying who holds it (run id, host, process, start).
How it is held depends on the filesystem, and so does how a dead run's claim is cleared:

- local disks (and NFS mounts, where Linux turns flock into NFS locks): the run holds an exclusive flock on
  the file for as long as it lives. The kernel drops the lock when the process ends, however it ends
  (kill -9 included), so a dead run's claim never blocks anyone: the next run simply takes the file.
- any other filesystem pyarrow writes (object stores, HDFS): a lease. The claim is written when absent,
  read back after a pause to see that no other run wrote it meanwhile, and renewed by the run every
  RENEW_S seconds; a claim not renewed for EXPIRE_S seconds belongs to a dead run and is taken over with a
  warning (--clean-stale takes over one not renewed for two renewals at once)."""
import fcntl
import json
import os
import socket
import sys
import threading
import time
import uuid

import pyarrow.fs as pafs

from jobs.errors import UsageError
from jobs.run.place import Place

SUFFIX = ".claim"
RENEW_S = 30.0
EXPIRE_S = 180.0
SETTLE_S = 1.0  # a lease's pause between writing and reading back: longer than a racing run's write takes


class ClaimRefused(UsageError):
    """Another live run holds OUT (exit 2)."""


def claim_path(out):
    """(filesystem, path of OUT's claim): beside OUT, built from the parsed path, never from the URI text."""
    out = Place.of(out)
    return out.fs, out.root.rstrip("/") + SUFFIX


def acquire(out, clean_stale=False, run=None):
    """Claim OUT (a place.Place, or a path or URI) for this run (a LocalClaim or a LeaseClaim); ClaimRefused when a
    live run holds it. `run`: the run id the console and the log file already name (a new one when not given)."""
    fs, path = claim_path(out)
    out = Place.of(out).uri
    holder = _holder(out, run)
    if isinstance(fs, pafs.LocalFileSystem):
        return LocalClaim.take(out, path, holder)
    return LeaseClaim.take(out, fs, path, holder, clean_stale)


def _holder(out, run=None):
    return {"run": run or uuid.uuid4().hex[:8], "out": str(out), "host": socket.gethostname(), "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "renewed": time.time()}


def describe(holder):
    """Who holds a claim, for the refusal message."""
    if not holder:
        return "another run (its claim file is being written)"
    return (f"run {holder.get('run')} (host {holder.get('host')}, process {holder.get('pid')}, started "
            f"{holder.get('started')})")


class LocalClaim:
    """An exclusive flock on OUT.claim, held by this process until release() or its end."""

    def __init__(self, path, fd, holder):
        self.path, self.fd, self.holder = path, fd, holder

    @property
    def run(self):
        return self.holder["run"]

    @classmethod
    def take(cls, out, path, holder):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                found = _read_fd(fd)
                os.close(fd)
                raise ClaimRefused(f"--out {out} is claimed by {describe(found)}: one run per OUT; wait for it "
                                   f"or choose another --out") from None
            try:  # the file we locked may have been released and removed meanwhile: lock the one at the path
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode("utf-8"), 0)
        return cls(path, fd, holder)

    def holds(self):
        """Whether this run still holds OUT (a flock cannot be taken from a live process)."""
        return self.fd is not None

    def release(self):
        """Remove the claim file while still holding its lock (so no other run locks a removed file), unlock."""
        if self.fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.close(self.fd)
        self.fd = None


def _read_fd(fd):
    try:
        return json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "null")
    except (ValueError, OSError):
        return None


class LeaseClaim:
    """A claim object renewed by a thread of this run; taken over once not renewed for EXPIRE_S seconds."""

    def __init__(self, fs, path, holder):
        self.fs, self.path, self.holder = fs, path, holder
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="mqreplay-claim", daemon=True)

    @property
    def run(self):
        return self.holder["run"]

    @classmethod
    def take(cls, out, fs, path, holder, clean_stale=False):
        found = _read(fs, path)
        if found is not None:
            age = time.time() - float(found.get("renewed") or 0)
            limit = 2 * RENEW_S if clean_stale else EXPIRE_S
            if age < limit:
                raise ClaimRefused(f"--out {out} is claimed by {describe(found)}, renewed {age:.0f} s ago: one run "
                                   f"per OUT (a claim not renewed for {EXPIRE_S:.0f} s is a dead run's and is "
                                   "taken over; --clean-stale takes one over after "
                                   f"{2 * RENEW_S:.0f} s)")
            print(f"warning: taking over the claim on {out} of {describe(found)}, not renewed for {age:.0f} s "
                  "(a run that died)", file=sys.stderr, flush=True)
        claim = cls(fs, path, holder)
        claim._write()
        time.sleep(SETTLE_S)
        if not claim.holds():
            raise ClaimRefused(f"--out {out} was claimed at the same moment by {describe(_read(fs, path))}: "
                               "one run per OUT")
        claim._thread.start()
        return claim

    def _write(self):
        self.holder["renewed"] = time.time()
        with self.fs.open_output_stream(self.path) as f:
            f.write(json.dumps(self.holder).encode("utf-8"))

    def holds(self):
        found = _read(self.fs, self.path)
        return found is not None and found.get("run") == self.run

    def _renew(self):
        while not self._stop.wait(RENEW_S):
            if self.holds():
                self._write()

    def release(self):
        if self._stop.is_set():
            return
        self._stop.set()
        if self.holds():
            self.fs.delete_file(self.path)


def _read(fs, path):
    """The holder a claim object names, or None when there is none."""
    try:
        with fs.open_input_stream(path) as f:
            return json.loads(f.read().decode("utf-8") or "null")
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as exc:
        if fs.get_file_info(path).type == pafs.FileType.NotFound:
            return None
        return {"run": "?", "host": f"(unreadable claim: {exc})"}
