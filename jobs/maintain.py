"""python -m jobs.maintain: the upkeep of an Iceberg lake the job commits to (docs/iceberg.md).

    python -m jobs.maintain --catalog-uri sqlite:///PATH --warehouse W | --catalog NAME --namespace NS
        [--register-existing] [--compact] [--expire-snapshots-older-than DURATION]
        [--remove-orphans-older-than DURATION] [--catalog-wait DURATION]

--register-existing registers the tables a warehouse holds while the catalog lost them (their newest metadata,
history kept); --compact rewrites each table's small files into one per partition; --expire-snapshots-older-than
expires older snapshots (the current one kept); files no snapshot references (compacted away, expired, or moved
in by a night killed before its commit) are then removed once older than --remove-orphans-older-than (default
1d: a night committing right now is never touched). DURATION: a number and s, m, h or d.

Exit codes: 0 done; 2 usage (bad arguments, no such lake, a catalog busy beyond --catalog-wait); 5 another
failure. Safe beside a night: a step whose commit loses a race with the night starts again."""
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from jobs.cli import Upkeep, parse_maintain_args, print_quietly
from jobs.errors import UsageError, outcome
from jobs.sinks.iceberg import lake
from jobs.sinks.iceberg import upkeep as lake_upkeep
from jobs.sinks.iceberg.catalog_wait import seconds
from jobs.sinks.iceberg.tables import catalog_target, stale_runs
from schemas.errors import EXIT_OK, EXIT_USAGE


def run(upkeep: Upkeep) -> dict[str, Any]:
    """The steps an Upkeep (jobs/cli.py) asks, in order: register, compact, expire, orphans; {step: per-table
    result}."""
    target = catalog_target(upkeep.catalog, "jobs.maintain")
    expire_s = None if upkeep.expire_older_than is None else seconds(upkeep.expire_older_than,
                                                                     "--expire-snapshots-older-than")
    orphans_s = seconds(upkeep.orphans_older_than, "--remove-orphans-older-than")
    if not (upkeep.register_existing or upkeep.compact or expire_s is not None):
        raise UsageError("nothing to do: give --register-existing, --compact or --expire-snapshots-older-than")
    done: dict[str, Any] = {}
    if upkeep.register_existing:
        done["registered"] = lake_upkeep.register_existing(target)
    namespace = upkeep.catalog.namespace
    if not target.waiting(lambda c: lake.load(c, f"{namespace}.matched"), "jobs.maintain"):
        raise UsageError(f"{target.describe()} holds no table {namespace}.matched: no lake to maintain (a lost "
                         "catalog: --register-existing)")
    if upkeep.compact:
        done["compacted"] = lake_upkeep.compact(target)
    if expire_s is not None:
        done["expired"] = lake_upkeep.expire(target, expire_s)
    done["orphans_removed"] = lake_upkeep.remove_orphans(target, orphans_s)
    done["stale_run_folders"] = [path for _, path, _ in stale_runs(target)]
    return done


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("pyiceberg").setLevel(logging.ERROR)
    try:
        upkeep = parse_maintain_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    try:
        done = run(upkeep)
    except Exception as exc:  # noqa: BLE001 - every error ends with its exit code (jobs/errors.py)
        code, message = outcome(exc)
        print(f"error: {message}", file=sys.stderr)
        return code
    print_quietly(json.dumps(done, indent=1, sort_keys=True, default=str))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
