#!/usr/bin/env bash
# `make package`: what a cluster needs, as Spark's Python package-management guide describes.
#   build/package/mqreplay.zip          the project's code (jobs/, filtering/, schemas/) for --py-files
#   build/package/environment.tar.gz    the third-party dependencies as a packed virtualenv (venv-pack),
#                                       for spark.archives=...#environment
#   build/package/replay.py             the spark-submit entry point (imports the code from the zip)
#   build/package/conf/                 conf/ (job settings, spark-defaults.conf, log4j2.properties)
#   build/package/requirements.lock     the exact versions inside environment.tar.gz
# The environment is a separate, clean venv (build/package-venv) with setup.cfg's install_requires but
# not pyspark: executors import pyspark from their own $SPARK_HOME/python/lib (pyspark.zip, py4j).
# Versions are pinned to what .venv (where the tests ran) has. The venv is rebuilt only when its
# requirements change, and re-packed only when it changed.
#
# PACKAGE_PYTHON: interpreter for the environment (default: the one .venv is built on). It must be the
#   driver's Python minor version, and it must exist at the same path on every node, because venv-pack
#   links `python` to it; PACKAGE_PYTHON_PREFIX relinks it for nodes that have it elsewhere
#   (e.g. /usr/local in a python:3.11 image).
set -euo pipefail
cd "$(dirname "$0")/.."
vpy=.venv/bin/python
pkg=build/package
penv=build/package-venv
t0=$SECONDS

[[ -x $vpy ]] || { echo "error: $vpy is missing: run 'make venv' first" >&2; exit 1; }
package_python=${PACKAGE_PYTHON:-$("$vpy" -c 'import sys; print(sys._base_executable)')}
mkdir -p "$pkg/conf"

# 1. Requirements: setup.cfg's install_requires without pyspark, pinned by .venv's versions.
"$vpy" - "$pkg" <<'PY'
import configparser, re, subprocess, sys

pkg = sys.argv[1]
cfg = configparser.ConfigParser()
cfg.read("setup.cfg")
reqs = [re.sub(r"\s+#.*$", "", line).strip() for line in cfg["options"]["install_requires"].splitlines()]
reqs = [r for r in reqs if r and re.split(r"[<>=!~ \[;]", r, maxsplit=1)[0].lower() != "pyspark"]
freeze = subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
                        check=True, capture_output=True, text=True).stdout.splitlines()
skip = ("pyspark", "py4j", "venv-pack")
pins = [f for f in freeze if "==" in f and not f.startswith("#") and f.split("==")[0].lower() not in skip]
with open(f"{pkg}/requirements.txt", "w") as f:
    f.write("# setup.cfg install_requires without pyspark (executors use their Spark's pyspark.zip)\n")
    f.write("\n".join(reqs) + "\n")
with open(f"{pkg}/constraints.txt", "w") as f:
    f.write("# the versions .venv has (where the tests ran)\n" + "\n".join(pins) + "\n")
PY
want="$package_python $("$package_python" -c 'import sys; print(sys.version)')
$(cat "$pkg/requirements.txt" "$pkg/constraints.txt")"

# 2. The clean venv (no editable install, no pyspark), rebuilt when the requirements changed.
if [[ ! -f $penv/.requirements ]] || [[ $(cat "$penv/.requirements") != "$want" ]]; then
  echo "building $penv with $package_python"
  rm -rf "$penv"
  "$package_python" -m venv "$penv"
  "$penv/bin/python" -m pip install --quiet --only-binary=:all: \
    -r "$pkg/requirements.txt" -c "$pkg/constraints.txt"
  "$penv/bin/python" -c 'import numpy, pandas, pyarrow, pyarrow.dataset, mmh3, lz4.frame, zstandard, ply'
  printf '%s' "$want" > "$penv/.requirements"
  rm -f "$pkg/environment.tar.gz"
fi
"$penv/bin/python" -m pip freeze --all > "$pkg/requirements.lock"
if grep -qi '^pyspark' "$pkg/requirements.lock"; then echo "error: pyspark is in $penv" >&2; exit 1; fi

# 3. Pack it (venv-pack refuses editable installs; there are none here).
"$vpy" -c 'import venv_pack' 2>/dev/null || "$vpy" -m pip install --quiet 'venv-pack==0.2.0'
if [[ ! -f $pkg/environment.tar.gz || $penv/.requirements -nt $pkg/environment.tar.gz
      || ${PACKAGE_PYTHON_PREFIX:-} != "$(cat "$pkg/.python_prefix" 2>/dev/null)" ]]; then
  echo "packing $penv into $pkg/environment.tar.gz"
  if [[ -n ${PACKAGE_PYTHON_PREFIX:-} ]]; then
    # venv-pack 0.2.0 relinks by replacing the text ORIG/bin/python in link targets with
    # PREFIX/bin/pythonX.Y, which turns bin/pythonX.Y -> ORIG/bin/pythonX.Y into PREFIX/bin/pythonX.YX.Y:
    # point that link at ORIG/bin/python while packing, and restore it.
    link=$(cd "$penv/bin" && ls python3.* | head -1)
    target=$(readlink "$penv/bin/$link")
    orig=$(dirname "$(sed -n 's/^home *= *//p' "$penv/pyvenv.cfg")")
    ln -sfn "$orig/bin/python" "$penv/bin/$link"
    trap 'ln -sfn "$target" "$penv/bin/$link"' EXIT
  fi
  .venv/bin/venv-pack --prefix "$penv" --output "$pkg/environment.tar.gz" --force --quiet \
    --exclude '.requirements' ${PACKAGE_PYTHON_PREFIX:+--python-prefix "$PACKAGE_PYTHON_PREFIX"}
  if [[ -n ${PACKAGE_PYTHON_PREFIX:-} ]]; then ln -sfn "$target" "$penv/bin/$link" && trap - EXIT; fi
  printf '%s' "${PACKAGE_PYTHON_PREFIX:-}" > "$pkg/.python_prefix"
  chmod 644 "$pkg/environment.tar.gz"
fi

# 4. The project's code: the three packages, without tests, caches or PLY tables.
"$vpy" - "$pkg/mqreplay.zip" <<'PY'
import os, sys, zipfile

out = sys.argv[1]
tmp = out + ".tmp"
with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
    for top in ("jobs", "filtering", "schemas"):
        for root, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "tests"))
            for name in sorted(files):
                if name.endswith((".pyc", ".pyo")) or name in ("parsetab.py", "parser.out"):
                    continue
                if name.startswith("test_") or name == "conftest.py":
                    continue
                path = os.path.join(root, name)
                info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))  # same code, same zip
                info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
                with open(path, "rb") as f:
                    z.writestr(info, f.read())
os.replace(tmp, out)
PY

# 5. The entry point and the settings.
cat > "$pkg/replay.py" <<'ENTRY'
"""spark-submit entry point of the packaged job (written by tools/package.sh).

The code comes from mqreplay.zip (--py-files); the options are jobs/replay.py's. Without --conf, the
job settings are conf/replay.json beside this file when it is there (client mode), else the defaults.
Under spark-submit, its master is handed to the job as --master: jobs/replay.py's spark_session()
otherwise sets local[*] when SPARK_SUBMIT_OPTS is unset, which spark-submit does not set."""
import os
import sys

from jobs.replay import main


def given(args, option):
    return any(a == option or a.startswith(option + "=") for a in args)


args = sys.argv[1:]
settings = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conf", "replay.json")
if os.path.exists(settings) and not given(args, "--conf"):
    args = ["--conf", settings] + args
if os.environ.get("PYSPARK_GATEWAY_PORT") and not given(args, "--master"):  # run by spark-submit
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connect to spark-submit's JVM, whose conf has its --master
    master = SparkConf().get("spark.master", None)
    if master:
        args = ["--master", master] + args
sys.exit(main(args))
ENTRY
rm -rf "$pkg/conf" && mkdir -p "$pkg/conf" && cp conf/* "$pkg/conf/"

echo "package ($((SECONDS - t0)) s):"
(cd "$pkg" && ls -l mqreplay.zip environment.tar.gz replay.py requirements.lock && ls conf) | sed 's/^/  /'
