"""A busy catalog is waited for, not failed on: another writer holding the SQLite file (`database is locked`),
a REST catalog answering 409 (a commit that lost a race: CommitFailedException, or ValidationException when
pyiceberg's own retry finds the race changed what it rewrites) or 503 (ServiceUnavailable).
Each operation on the catalog is retried with a growing pause until `--catalog-wait` has passed; then the run
stops with exit 2 (UsageError), saying who held it: the lake counts the run only once its ranges are committed,
so the night can be run again (a table committed before the busy one holds a run without ranges, which the next
run removes first).

An operation retried here must be whole: it loads what it changes again (a table's metadata moved on when
another writer committed) and commits once."""
from __future__ import annotations

import os
import re
import sqlite3
import time
from typing import Callable, Optional, TypeVar

from jobs.errors import OutputError, UsageError, output_error
from schemas.errors import ReplayError

DEFAULT_WAIT = "5m"
FIRST_PAUSE_S, MAX_PAUSE_S = 0.5, 10.0
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
T = TypeVar("T")  # what a waited operation returns


def seconds(text: str, flag: str = "--catalog-wait") -> float:
    """Seconds of a DURATION: a number and a unit, s, m, h or d (`90s`, `5m`, `0s`); UsageError otherwise."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", str(text))
    if not found:
        raise UsageError(f"{flag} {text!r}: give a number and a unit, s, m, h or d (e.g. 90s, 5m, 1d)")
    return float(found.group(1)) * UNITS[found.group(2)]


def busy(exc: BaseException) -> Optional[str]:
    """Why the catalog refused for now (a reason to wait), or None for any other error: by the exception's type
    (pyiceberg's and SQLAlchemy's, imported here: only an Iceberg run has them loaded)."""
    from pyiceberg.exceptions import (
        CommitFailedException,
        CommitStateUnknownException,
        ServiceUnavailableError,
        ValidationException,
    )
    from sqlalchemy.exc import OperationalError

    text = str(exc)
    if isinstance(exc, (OperationalError, sqlite3.OperationalError)) and re.search(r"locked|busy", text, re.I):
        return "the SQLite file is locked by another writer"
    if isinstance(exc, (CommitFailedException, CommitStateUnknownException, ValidationException)):
        return f"a concurrent commit ({text[:160]})"  # 409, or a conflict pyiceberg's own retry found
    if isinstance(exc, ServiceUnavailableError):
        return f"the catalog is unavailable (503: {text[:160]})"
    return None


def holders(uri: Optional[str]) -> list[str]:
    """Other processes that hold a SQLite catalog's file open (from /proc: Linux), as `process N (command)`."""
    if not uri or not uri.startswith("sqlite:///"):
        return []
    path = os.path.realpath(uri[len("sqlite:///"):])
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
        try:
            if any(os.path.realpath(f"/proc/{pid}/fd/{fd}") == path for fd in os.listdir(f"/proc/{pid}/fd")):
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    command = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
                found.append(f"process {pid} ({command[:80]})")
        except OSError:  # gone meanwhile, or another user's
            continue
    return found


def unusable(exc: BaseException, uri: Optional[str], what: str, repair: str) -> Optional[OutputError]:
    """The OutputError (exit 2) of a catalog that cannot be used as it is, or None: a file that is no SQLite
    database (random bytes, a truncated copy), or one that cannot be opened or written; an OSError writing the
    warehouse. `repair`: the command that registers the warehouse's tables in a new catalog."""
    from sqlalchemy.exc import DatabaseError

    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, OSError):
        return output_error(what, exc)
    if not isinstance(exc, (DatabaseError, sqlite3.DatabaseError)):
        return None
    where = f"--catalog-uri {uri}" if uri else "the catalog"
    if re.search(r"not a database|malformed|encrypted", text, re.I):
        path = uri[len("sqlite:///"):] if uri and uri.startswith("sqlite:///") else None
        return OutputError(f"{where}: {path or 'its database'} is not a catalog database ({text}); nothing was "
                           f"committed. Restore it from a backup, or move it aside and register the warehouse's "
                           f"tables in a new one, their history kept: {repair}")
    if re.search(r"unable to open|readonly|read-only|disk I/O|full", text, re.I):
        return OutputError(f"{where}: the catalog cannot be opened or written ({text}): give a catalog this run "
                           "can write")
    return None


def waiting(operation: Callable[[], T], wait_s: float, what: str, uri: Optional[str] = None,
            sleep: Callable[[float], None] = time.sleep, repair: Optional[str] = None) -> T:
    """operation() once the catalog takes it: retried while it is busy (`busy`, by the error's type) with a pause
    that doubles up to MAX_PAUSE_S, for at most wait_s seconds (tenacity, pyiceberg's own retry library). A catalog
    or warehouse that cannot be used (`unusable`) is the output's error, exit 2, never the input's."""
    import tenacity

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(lambda exc: busy(exc) is not None),
        wait=tenacity.wait_exponential(multiplier=FIRST_PAUSE_S, max=MAX_PAUSE_S),
        stop=tenacity.stop_before_delay(wait_s), sleep=sleep, reraise=True)
    try:
        return retrying(operation)
    except Exception as exc:  # noqa: BLE001 - a busy catalog past its wait, an unusable one, or raised as it came
        reason = busy(exc)
        if reason is not None:
            who = holders(uri)
            raise UsageError(f"{what}: the catalog stayed busy for {wait_s:.0f} s (--catalog-wait): {reason}"
                             + (f"; held by {', '.join(who)}" if who else "") +
                             "; the lake counts a run only once its ranges are committed: run it again") from None
        failed = None if isinstance(exc, ReplayError) else unusable(
            exc, uri, what, repair or "python -m jobs.maintain ... --register-existing")
        if failed is not None:
            raise failed from exc
        raise
