"""One run per OUT: a run claims OUT before it plans and holds the claim until it has published or failed,
so that a second run on the same OUT (a scheduler's retry racing a slow first attempt) refuses at once,
naming the holder, instead of both writing and one deleting the other's answer.

The claim is a small file beside OUT, `OUT.claim`, saying who holds it (run id, host, process, start).
How it is held depends on the filesystem, and so does how a dead run's claim is cleared:

- local disks (and NFS mounts, where Linux turns flock into NFS locks): the run holds an exclusive flock on
  the file for as long as it lives. The kernel drops the lock when the process ends, however it ends
  (kill -9 included), so a dead run's claim never blocks anyone: the next run simply takes the file.
- S3 (and S3-compatible stores that honour conditional writes): exclusive for real. The claim object is
  created with `If-None-Match: *` (the store refuses a second create: 412), renewed every RENEW_S seconds
  with `If-Match` on its ETag (a run whose claim was taken over can never write it again), and a dead run's
  claim (not renewed for EXPIRE_S seconds, two renewals with --clean-stale) is taken over by a write
  conditional on the dead claim's ETag, so of two runs taking over the same dead claim one wins. pyarrow
  cannot send these headers: they go through botocore, configured as pyarrow's filesystem is.
- any other filesystem pyarrow writes (GCS, HDFS, an S3-compatible store that ignores the conditions): a
  best-effort lease. The claim is written when absent, read back after a pause to see that no other run
  wrote it meanwhile, and renewed (read, then written) every RENEW_S seconds; expired claims are taken over
  as on S3, but by a plain write, so two runs that write within the pause of each other can both go on.

Every renewed claim is renewed by a thread that release() stops and joins before it deletes the claim: no
renewal writes the claim back after its release, and none writes a claim that is no longer this run's."""
from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import threading
import time
import uuid
from functools import lru_cache
from typing import Any, Callable, Optional, Union

import pyarrow.fs as pafs

from jobs.errors import UsageError
from jobs.output.place import Place

SUFFIX = ".claim"
RENEW_S = 30.0
EXPIRE_S = 180.0
SETTLE_S = 1.0  # a lease's pause between writing and reading back: longer than a racing run's write takes
CONFLICT_TRIES = 5  # S3 answers 409 to a conditional write racing another one on the same key: look again
_CLIENTS = threading.Lock()  # a botocore session makes clients one at a time (the clients themselves are shared)


class ClaimRefused(UsageError):
    """Another live run holds OUT (exit 2)."""


def claim_path(out: Union[Place, str]) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path of OUT's claim): beside OUT, built from the parsed path, never from the URI text."""
    out = Place.of(out)
    return out.fs, out.root.rstrip("/") + SUFFIX


def acquire(out: Union[Place, str], clean_stale: bool = False,
            run: Optional[str] = None) -> Union[LocalClaim, S3Claim, LeaseClaim]:
    """Claim OUT (a place.Place, or a path or URI) for this run (a LocalClaim, S3Claim or LeaseClaim);
    ClaimRefused when a live run holds it. `run`: the run id the console and the log file already name (a new
    one when not given)."""
    fs, path = claim_path(out)
    out = Place.of(out).uri
    holder = _holder(out, run)
    if isinstance(fs, pafs.LocalFileSystem):
        return LocalClaim.take(out, path, holder)
    if isinstance(fs, pafs.S3FileSystem):
        return S3Claim.take(out, fs, path, holder, clean_stale)
    return LeaseClaim.take(out, fs, path, holder, clean_stale)


def _holder(out, run=None):
    return {"run": run or uuid.uuid4().hex[:8], "out": str(out), "host": socket.gethostname(), "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "renewed": time.time()}


def describe(holder: Optional[dict[str, Any]]) -> str:
    """Who holds a claim, for the refusal message."""
    if not holder:
        return "another run (its claim file is being written)"
    return (f"run {holder.get('run')} (host {holder.get('host')}, process {holder.get('pid')}, started "
            f"{holder.get('started')})")


def _refusal(out, found):
    """The ClaimRefused for a claim that a live run holds."""
    age = time.time() - float((found or {}).get("renewed") or time.time())
    return ClaimRefused(f"--out {out} is claimed by {describe(found)}, renewed {age:.0f} s ago: one run per OUT; "
                        f"wait for it or choose another --out (a claim not renewed for {EXPIRE_S:.0f} s is a dead "
                        f"run's and is taken over; --clean-stale takes one over after {2 * RENEW_S:.0f} s)")


def _take_over(out, found, clean_stale):
    """Refuse a claim that is still renewed; warn that an expired one (a dead run's) is taken over."""
    age = time.time() - float(found.get("renewed") or 0)
    if age < (2 * RENEW_S if clean_stale else EXPIRE_S):
        raise _refusal(out, found)
    print(f"warning: taking over the claim on {out} of {describe(found)}, not renewed for {age:.0f} s "
          "(a run that died)", file=sys.stderr, flush=True)


class LocalClaim:
    """An exclusive flock on OUT.claim, held by this process until release() or its end."""

    fd: Optional[int]  # None once released

    def __init__(self, path: str, fd: int, holder: dict[str, Any]) -> None:
        self.path, self.fd, self.holder = path, fd, holder

    @property
    def run(self) -> str:
        return self.holder["run"]

    @classmethod
    def take(cls, out: str, path: str, holder: dict[str, Any]) -> LocalClaim:
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

    def holds(self) -> bool:
        """Whether this run still holds OUT (a flock cannot be taken from a live process)."""
        return self.fd is not None

    def release(self) -> None:
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


class _Renewed:
    """A claim object that a thread of this run renews every RENEW_S seconds. The thread waits on an event, so
    release() stops it at once; release() joins it before removing the claim, so a renewal in flight finishes
    first and none comes after. A renewal that finds the claim no longer this run's stops for good."""

    _renew_once: Callable[[], bool]  # each kind's renewal: whether the claim is still this run's
    _remove: Callable[[], None]  # each kind's removal of its claim

    def __init__(self, path: str, holder: dict[str, Any]) -> None:
        self.path, self.holder = path, holder
        self._stop = threading.Event()
        self._lost = False
        self._thread = threading.Thread(target=self._renew, name="mqreplay-claim", daemon=True)

    @property
    def run(self) -> str:
        return self.holder["run"]

    def _start(self):
        self._thread.start()
        return self

    def _renew(self):
        while not self._stop.wait(RENEW_S):
            try:
                if not self._renew_once():
                    self._lost = True
                    return
            except Exception as exc:  # a store's hiccup must not end the thread: the claim would expire
                print(f"warning: could not renew the claim {self.path} ({exc}); trying again in {RENEW_S:.0f} s "
                      f"(a claim not renewed for {EXPIRE_S:.0f} s is taken over by the next run)",
                      file=sys.stderr, flush=True)

    def release(self) -> None:
        """Stop and join the renewing thread, then remove the claim if it is still this run's; idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join()
        if not self._lost:
            self._remove()


class LeaseClaim(_Renewed):
    """A best-effort lease (stores without a conditional create): written, read back after SETTLE_S, renewed
    by reading then writing; taken over once not renewed for EXPIRE_S seconds."""

    def __init__(self, fs: pafs.FileSystem, path: str, holder: dict[str, Any]) -> None:
        super().__init__(path, holder)
        self.fs = fs

    @classmethod
    def take(cls, out: str, fs: pafs.FileSystem, path: str, holder: dict[str, Any],
             clean_stale: bool = False) -> LeaseClaim:
        found = _read(fs, path)
        if found is not None:
            _take_over(out, found, clean_stale)
        claim = cls(fs, path, holder)
        claim._write()
        return claim._confirm(out)

    def _confirm(self, out):
        """Read the claim back after a pause: a run that wrote it meanwhile holds it (the last writer wins)."""
        time.sleep(SETTLE_S)
        if not self.holds():
            raise ClaimRefused(f"--out {out} was claimed at the same moment by {describe(_read(self.fs, self.path))}"
                               ": one run per OUT; wait for it or choose another --out")
        return self._start()

    def _write(self):
        self.holder["renewed"] = time.time()
        with self.fs.open_output_stream(self.path) as f:
            f.write(json.dumps(self.holder).encode("utf-8"))

    def holds(self) -> bool:
        found = _read(self.fs, self.path)
        return not self._lost and found is not None and found.get("run") == self.run

    def _renew_once(self):
        if not self.holds():
            return False
        self._write()
        return True

    def _remove(self):
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


class S3Claim(_Renewed):
    """A claim object on S3 written only by conditional PutObject: created with If-None-Match, renewed and taken
    over with If-Match on the ETag this run last saw, deleted with If-Match on this run's ETag."""

    def __init__(self, client: Any, path: str, holder: dict[str, Any]) -> None:
        super().__init__(path, holder)
        self.client = client
        self.bucket, self.key = path.split("/", 1)
        self.etag = None

    @classmethod
    def take(cls, out: str, fs: pafs.FileSystem, path: str, holder: dict[str, Any],
             clean_stale: bool = False) -> Union[S3Claim, LeaseClaim]:
        claim = cls(_s3_client(fs), path, holder)
        for _ in range(CONFLICT_TRIES):
            found, etag = claim._get()
            if etag is not None:
                _take_over(out, found or {}, clean_stale)
            status = claim._put(IfMatch=etag) if etag is not None else claim._put(IfNoneMatch="*")
            if status == 412:  # another run created it, or took the dead claim over, first
                raise _refusal(out, claim._get()[0])
            if status is not None:  # 409: a conditional write raced ours; 404: the dead claim went meanwhile
                continue
            if etag is None and claim._put(IfNoneMatch="*") is None:
                print(f"warning: the store of {out} ignores If-None-Match (it overwrote an existing object): its "
                      "claim is a best-effort lease, as on GCS and HDFS", file=sys.stderr, flush=True)
                return LeaseClaim(fs, path, holder)._confirm(out)
            return claim._start()
        raise ClaimRefused(f"--out {out}: its claim kept changing while this run took it ({CONFLICT_TRIES} "
                           "conflicting writes): other runs are claiming it; wait for them or choose another --out")

    def _get(self):
        """(holder, ETag) of the claim object; (None, None) when there is none."""
        from botocore.exceptions import ClientError

        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except ClientError as exc:
            if _missing_key(exc):
                return None, None
            raise OSError(f"s3://{self.path}: {exc}") from exc
        try:
            found = json.loads(answer["Body"].read().decode("utf-8") or "null")
        except ValueError as exc:
            found = {"run": "?", "host": f"(unreadable claim: {exc})"}
        return found, answer["ETag"]

    def _put(self, **condition):
        """Write this run's holder if `condition` holds (the new ETag kept): None, else the status the store
        refused it with (412: the condition failed, 409: a conflicting write, 404: If-Match on no object)."""
        from botocore.exceptions import ClientError

        self.holder["renewed"] = time.time()
        try:
            answer = self.client.put_object(Bucket=self.bucket, Key=self.key, Body=json.dumps(self.holder).encode(),
                                            ContentType="application/json", **condition)
        except ClientError as exc:
            if _status(exc) in (409, 412) or _missing_key(exc):
                return _status(exc)
            raise OSError(f"s3://{self.path}: {exc}") from exc
        self.etag = answer["ETag"]
        return None

    def holds(self) -> bool:
        found, _ = self._get()
        return not self._lost and found is not None and found.get("run") == self.run

    def _renew_once(self):
        """Overwrite the claim only if it is the object this run last wrote: a taken-over claim stays taken
        (412), a deleted one stays deleted (404); a conflicting write (409) is looked at again next time."""
        return self._put(IfMatch=self.etag) in (None, 409)

    def _remove(self):
        """Delete the claim only if it is the object this run last wrote (412: another run's now, kept)."""
        from botocore.exceptions import ClientError

        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=self.etag)
        except ClientError as exc:
            if _status(exc) != 412 and not _missing_key(exc):
                raise OSError(f"s3://{self.path}: {exc}") from exc


def _status(exc):
    """The HTTP status of a botocore ClientError."""
    return exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def _missing_key(exc):
    """Whether a botocore ClientError says the claim object is not there (a missing bucket is an error)."""
    return exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404") and _status(exc) == 404


def _s3_client(fs):
    """A botocore S3 client configured as the pyarrow S3FileSystem `fs` is (pyarrow cannot send conditional
    headers): its endpoint, scheme, region and keys from pyarrow's own arguments (a URI's query lands there);
    what pyarrow took from the environment (AWS_ENDPOINT_URL, keys, profile, instance role) botocore takes from
    the same environment, through its standard chain."""
    from botocore import UNSIGNED
    from botocore.config import Config

    conf = fs.__reduce__()[1][0]
    options = {"region_name": conf.get("region") or None}
    endpoint = conf.get("endpoint_override")
    if endpoint:
        options["endpoint_url"] = endpoint if "://" in endpoint else f"{conf.get('scheme') or 'https'}://{endpoint}"
    if conf.get("access_key"):
        options.update(aws_access_key_id=conf["access_key"], aws_secret_access_key=conf.get("secret_key"),
                       aws_session_token=conf.get("session_token") or None)
    own = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    # addressed as pyarrow addresses it: by path on an endpoint of one's own (an IP, a MinIO), else as AWS wants
    style = "virtual" if conf.get("force_virtual_addressing") else "path" if own else "auto"
    config = Config(s3={"addressing_style": style}, signature_version=UNSIGNED if conf.get("anonymous") else None)
    with _CLIENTS:
        return _botocore_session().create_client("s3", config=config, **options)


@lru_cache(maxsize=1)
def _botocore_session():
    """One botocore session a process: it loads S3's service model once (0.1-0.25 s), not at every claim."""
    import botocore.session

    return botocore.session.get_session()
