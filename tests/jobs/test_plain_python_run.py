"""`.venv/bin/python jobs/replay.py --master local[2] ...` (a run without spark-submit, as the README shows) runs
its Python workers on the interpreter that runs the job, not on `python3` from PATH (which may lack pyarrow)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.runtime.session import workers_run_this_python

ROOT = Path(__file__).resolve().parents[2]


def test_a_local_master_without_a_named_interpreter_gets_this_one():
    env = {}
    workers_run_this_python("local[2]", {}, env)
    assert env == {"PYSPARK_PYTHON": sys.executable}
    for master, settings, given in (("yarn", {}, {}), ("local[2]", {"spark.pyspark.python": "/x/python"}, {}),
                                    ("local[2]", {}, {"PYSPARK_PYTHON": "/y/python"}),
                                    ("local[2]", {}, {"PYSPARK_GATEWAY_PORT": "1"})):
        env = dict(given)
        workers_run_this_python(master, settings, env)
        assert env == given, (master, settings, given)  # the submitter's choice, kept


@pytest.mark.spark
@pytest.mark.system
def test_the_job_run_by_the_venvs_python_with_python3_lacking_pyarrow_on_path(store_a, tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python3").write_text("#!/bin/sh\necho 'No module named pyarrow' >&2; exit 1\n", encoding="utf-8")
    (bare / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{bare}:{env['PATH']}"
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "jobs" / "replay.py"), "--master", "local[2]", "--store",
                           str(store_a / "store"), "--subscriptions", str(store_a / "registrations.json"), "--out",
                           str(out), "--until", "1795237035452"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert (out / "_SUCCESS").exists()
