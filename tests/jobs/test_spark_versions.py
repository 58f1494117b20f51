"""The data source on a Spark without the Python Data Source API (3.5: it came with 4.0), tried as a user tries
it: `from jobs.datasource import register` ends with one line that names the version and the alternative, exit 2,
no stack; an interactive Python gets that line as an ImportError instead of being closed. Spark 3.5 is played
by hiding pyspark.sql.datasource; make test-spark35 checks the same on a real PySpark 3.5."""
import subprocess
import sys
from pathlib import Path

import pyspark

ROOT = Path(__file__).resolve().parents[2]
WITHOUT_API = "import sys; sys.modules['pyspark.sql.datasource'] = None; "  # an import of it raises ImportError
LINE = ("the rocketmq data source (jobs.datasource) needs Spark 4.0 or newer (the Python Data Source API); this is "
        f"PySpark {pyspark.__version__}: run the job (spark-submit jobs/replay.py) and read its output, "
        "or use Spark 4.0+")


def _python(*args, stdin=None):
    return subprocess.run([sys.executable, *args], cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=120)


def test_importing_the_data_source_without_its_api_prints_one_line_and_exits_2():
    proc = _python("-c", WITHOUT_API + "from jobs.datasource import register")
    assert (proc.returncode, proc.stdout, proc.stderr.splitlines()) == (2, "", [f"error: {LINE}"])


def test_the_filters_module_refuses_the_same_way():
    proc = _python("-c", WITHOUT_API + "import jobs.datasource.filters")
    assert (proc.returncode, proc.stderr.splitlines()) == (2, [f"error: {LINE}"])


def test_an_interactive_python_stays_open_with_the_line_as_an_import_error():
    proc = _python("-i", "-q", stdin=WITHOUT_API + "\ntry:\n    import jobs.datasource\nexcept ImportError as e:\n"
                   "    print(type(e).__name__, e.exit_code, e)\n\nprint('still open')\n")
    assert proc.stdout.splitlines() == [f"SparkVersionError 2 {LINE}", "still open"], proc.stderr


def test_the_api_present_imports_the_data_source():
    proc = _python("-c", "from jobs.datasource import register; print('ok')")
    assert (proc.returncode, proc.stdout) == (0, "ok\n"), proc.stderr
