"""Add bytecode to the venv's pyspark.zip and py4j zip, so Python processes stop compiling PySpark.

Spark puts $SPARK_HOME/python/lib/pyspark.zip (and py4j's zip) first on every Python process's path: the
driver, the worker daemon and each worker import PySpark from there. Those zips hold sources only, and
zipimport cannot write a bytecode cache, so each process compiled PySpark anew: measured here, importing
the daemon and worker modules took 0.66 s from the zip and 0.13 s from compiled files, and every worker
start of every task stage paid it. This writes, next to each module.py in the zip, the module.pyc that
zipimport looks for (stamped with the source's time in the zip, as zipimport checks), for this
interpreter's version. Sources and data files stay as they were; a zip already done is left alone.

    python tools/precompile_spark_zips.py SPARK_HOME
"""
import glob
import os
import sys
import time
import warnings
import zipfile
from importlib._bootstrap_external import _code_to_timestamp_pyc


def precompile(path):
    """Rewrite the zip at `path` with a .pyc beside every .py; returns the number of modules compiled."""
    with zipfile.ZipFile(path) as src:
        infos = src.infolist()
        names = {i.filename for i in infos}
        sources = [i for i in infos if i.filename.endswith(".py") and i.filename + "c" not in names]
        if not sources:
            return 0
        tmp = f"{path}.tmp{os.getpid()}"
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
            for info in infos:
                data = src.read(info)
                out.writestr(info, data)
                if info in sources:
                    mtime = int(time.mktime(info.date_time + (0, 0, -1)))  # as zipimport reads the entry
                    with warnings.catch_warnings():  # PySpark's own tests carry a SyntaxWarning or two
                        warnings.simplefilter("ignore")
                        code = compile(data, f"{path}/{info.filename}", "exec", dont_inherit=True)
                    pyc = zipfile.ZipInfo(info.filename + "c", info.date_time)
                    pyc.compress_type = zipfile.ZIP_DEFLATED
                    out.writestr(pyc, bytes(_code_to_timestamp_pyc(code, mtime, len(data))))
    os.replace(tmp, path)
    return len(sources)


def main(spark_home):
    """Every zip of $SPARK_HOME/python/lib; the bytecode is this interpreter's: run it with the venv's python."""
    for path in sorted(glob.glob(os.path.join(spark_home, "python", "lib", "*.zip"))):
        print(f"{os.path.basename(path)}: {precompile(path)} modules compiled")


if __name__ == "__main__":
    main(sys.argv[1])
