"""pandas left out of a replay task's worker, where nothing uses it but pyarrow imports it anyway.

pyarrow asks at its first conversion of a numpy array (and at some later ones: `to_numpy` of strings,
booleans, nulls; type inference of Python lists) whether a value is a pandas one, and imports pandas to know:
0.7 s on a quiet core, 2.3-2.7 s in a Spark worker on a shared machine, paid by each worker's first task. A
task runs under `left_out()`: there `import pandas` fails, which pyarrow takes as "no pandas" for those checks.
User code (PYTHON filters) runs under `allowed()` and imports what it likes; once pandas is imported, both
are no-ops."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from types import ModuleType
from typing import Iterator, Optional, Sequence


class _NoPandas:
    """An import hook under which `import pandas` fails (pyarrow's compiled import does not honour a None in
    sys.modules, so a hook it is)."""

    @staticmethod
    def find_spec(name: str, path: Optional[Sequence[str]] = None, target: Optional[ModuleType] = None) -> None:
        if name.partition(".")[0] == "pandas":
            raise ImportError("pandas is left out of the replay's tasks (schemas/no_pandas.py)")
        return None


_HOOK = _NoPandas()


@contextmanager
def left_out() -> Iterator[None]:
    """Within: `import pandas` fails, unless pandas is imported already."""
    if "pandas" in sys.modules or _HOOK in sys.meta_path:
        yield
        return
    sys.meta_path.insert(0, _HOOK)
    try:
        yield
    finally:
        sys.meta_path.remove(_HOOK)


@contextmanager
def allowed() -> Iterator[None]:
    """Within: `import pandas` works (user code), even inside left_out()."""
    if _HOOK not in sys.meta_path:
        yield
        return
    sys.meta_path.remove(_HOOK)
    try:
        yield
    finally:
        sys.meta_path.insert(0, _HOOK)
