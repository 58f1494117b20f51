#!/usr/bin/env bash
# Make `.venv/bin/spark-submit` self-sufficient: Spark's launcher sources $SPARK_HOME/conf/spark-env.sh,
# so point PYSPARK_PYTHON at the venv's interpreter (workers need pyarrow) and JAVA_HOME at a Java 17+.
set -euo pipefail
arg=${1:-.venv/bin/python}
vpy="$(cd "$(dirname "$arg")" && pwd)/$(basename "$arg")"  # not readlink: keep the venv path
here=$(cd "$(dirname "$0")/.." && pwd)
spark_home=$("$vpy" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
java_home=$(bash "$here/tools/java_home.sh" "$vpy")
mkdir -p "$spark_home/conf"
cat > "$spark_home/conf/spark-env.sh" <<ENV
# written by mqreplay's tools/configure_spark_env.sh
export PYSPARK_PYTHON="\${PYSPARK_PYTHON:-$vpy}"
export PYSPARK_DRIVER_PYTHON="\${PYSPARK_DRIVER_PYTHON:-$vpy}"
if ! command -v java >/dev/null 2>&1 || [ -z "\${JAVA_HOME:-}" ]; then export JAVA_HOME="\${JAVA_HOME:-$java_home}"; fi
ENV
cp "$here/conf/log4j2.properties" "$spark_home/conf/log4j2.properties"
# Local runs (make run, make bench, the tests' spark-submit): the JVM options of conf/spark-defaults.conf.
grep -E '^spark\.(driver|executor)\.extraJavaOptions' "$here/conf/spark-defaults.conf" > "$spark_home/conf/spark-defaults.conf"
echo "configured $spark_home/conf/spark-env.sh"

# The pip-installed `spark-submit` finds SPARK_HOME with whatever `python3` is on PATH: wrap it so that
# `.venv/bin/spark-submit` always uses this venv (interpreter, pyspark, pyarrow) and its Java.
bin_dir=$(dirname "$vpy")
cat > "$bin_dir/spark-submit" <<WRAP
#!/usr/bin/env bash
# written by mqreplay's tools/configure_spark_env.sh: spark-submit bound to this virtualenv
export PYSPARK_PYTHON="\${PYSPARK_PYTHON:-$vpy}"
export PYSPARK_DRIVER_PYTHON="\${PYSPARK_DRIVER_PYTHON:-$vpy}"
export SPARK_HOME="\${SPARK_HOME:-$spark_home}"
exec "\$SPARK_HOME/bin/spark-submit" "\$@"
WRAP
chmod +x "$bin_dir/spark-submit"
