"""A replay task leaves pandas out of its worker (schemas/no_pandas.py), and user code still imports it. Run in a
fresh interpreter: the test session may have imported pandas already, which makes both no-ops."""
import subprocess
import sys
import textwrap

_PROBE = textwrap.dedent("""
    import sys
    import numpy as np
    import pyarrow as pa
    from schemas import no_pandas

    with no_pandas.left_out():
        # what a task does: numpy arrays in, strings and booleans out, types inferred from Python rows
        pa.array(np.arange(3)).to_numpy()
        pa.array(["a", None]).to_numpy(zero_copy_only=False)
        pa.Table.from_pylist([{"a": 1, "b": "x"}])
        print("task", "pandas" in sys.modules)
        with no_pandas.allowed():
            import pandas  # noqa: F401 - a PYTHON filter's own import
        print("user", "pandas" in sys.modules)
    print("after", type(pa.table({"a": [1]}).to_pandas()).__name__)
""")


def test_a_task_converts_without_importing_pandas_and_user_code_still_can():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:3] == ["task False", "user True", "after DataFrame"]
