"""explain's times in words: RocketMQ stores epoch milliseconds; explain shows each beside its ISO-8601 form (UTC,
`Z`), the form --since / --until also take, so an answer is read without converting by hand."""
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def iso(ms: int | None) -> str | None:
    """Epoch ms as ISO-8601 in UTC with milliseconds (`2026-11-21T04:57:15.000Z`); None stays None."""
    if ms is None:
        return None
    return (EPOCH + timedelta(milliseconds=int(ms))).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def with_iso(record: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """The dict with `<name>_iso` beside each of `names` it holds (epoch ms): added fields, the ms ones kept."""
    out = dict(record)
    for name in names:
        if name in record:
            out[f"{name}_iso"] = iso(record[name])
    return out


def ms_text(ms: int | None) -> str:
    """Epoch ms and its ISO-8601 form, as the text answer prints a time."""
    return "none" if ms is None else f"{ms} ({iso(ms)})"
