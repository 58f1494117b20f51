"""`python -m jobs.dump STORE what`: a store as JSON lines for people inspecting it by hand (schemas/store/dump.py says
what each prints); its arguments are parsed in jobs/cli.py."""
import sys
from collections.abc import Sequence

from jobs.cli import parse_dump_args
from schemas.errors import EXIT_INPUT, ReplayError
from schemas.store.dump import DUMPS


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_dump_args(argv)
    try:
        DUMPS[args.what](args.store, sys.stdout, args)
    except BrokenPipeError:
        return 0
    except ReplayError as exc:  # damaged or missing: exit 1; a commit log it cannot find or read: 2
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # unreadable
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
