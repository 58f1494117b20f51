#!/usr/bin/env bash
# `make cluster-test`: run the packaged job (`make package`) on a Spark standalone cluster on this
# machine and check it against a local-mode run of the same job.
#
#   1. a master and two workers (1 core, 2 GiB each) from the Spark inside .venv's pyspark package,
#      bound to 127.0.0.1 only, on free ports; every daemon in its own process group;
#   2. a probe app: every executor runs ./environment/bin/python from spark.archives and imports
#      pyspark from $SPARK_HOME/python/lib/pyspark.zip and the project from mqreplay.zip;
#   3. the job on fixture store_a, in client mode: the driver runs the archive's Python too (unpacked
#      into build/cluster/driver-env, as on an edge node without the dev venv), the executors
#      ./environment/bin/python; build/package/replay.py is the entry point, the code comes from the zip;
#   4. the same job with `.venv/bin/spark-submit --master local[2] jobs/replay.py` (the dev venv);
#   5. matched/, audit/* and summary.json of the two compared (tools/compare_outputs.py), and
#      ../shared/tools/replay_check.py on the cluster output;
#   6. the store read through the rocketmq data source (tools/datasource_read.py), on the cluster with the
#      package and in local mode with the dev venv, the two reads compared.
# The master and workers are stopped by their process groups on exit, failed or not, and the script
# fails if any of their ports is still listening. Work dirs, logs and outputs: build/cluster/.
#
# STORE_FIXTURE: a fixture folder with store/ and registrations.json (default ../shared's store_a, else
# the copy in tests/data). No address but 127.0.0.1 is ever used.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
t0=$SECONDS
vpy=$root/.venv/bin/python
pkg=$root/build/package
work=$root/build/cluster
phase() { echo "== [$((SECONDS - t0)) s] $*"; }

for f in "$pkg/environment.tar.gz" "$pkg/mqreplay.zip" "$pkg/replay.py"; do
  [[ -f $f ]] || { echo "error: $f is missing: run 'make package'" >&2; exit 1; }
done
rm -rf "$work"
mkdir -p "$work"/{conf,logs,workers,local,pids}

# --- the fixture: an absolute path, since executors read the store themselves
fixture=${STORE_FIXTURE:-$root/../shared/fixtures/stores/store_a}
if [[ ! -d $fixture/store ]]; then
  echo "no $fixture: using tests/data/stores/store_a.tar.gz"
  tar -xzf tests/data/stores/store_a.tar.gz -C "$work"
  fixture=$work/store_a
fi
fixture=$(cd "$fixture" && pwd)
store=$fixture/store
subscriptions=$fixture/registrations.json

# --- Spark and Java from the dev venv; loopback only; this run's own conf dir (no spark-env.sh);
# SPARK_LOCAL_DIRS is spark.local.dir for the driver and, on standalone, for the executors (it wins there)
export SPARK_HOME
SPARK_HOME=$("$vpy" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
export JAVA_HOME
JAVA_HOME=$(bash tools/java_home.sh "$vpy")
export PATH="$JAVA_HOME/bin:$PATH"
export SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=127.0.0.1
export SPARK_CONF_DIR=$work/conf SPARK_LOG_DIR=$work/logs SPARK_WORKER_DIR=$work/workers \
  SPARK_LOCAL_DIRS=$work/local SPARK_PID_DIR=$work/pids SPARK_DAEMON_MEMORY=512m \
  SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false"
cp "$pkg/conf/log4j2.properties" "$SPARK_CONF_DIR/"
unset PYSPARK_PYTHON PYSPARK_DRIVER_PYTHON PYSPARK_SUBMIT_ARGS SPARK_MASTER_HOST

read -r master_port master_ui w1_port w1_ui w2_port w2_ui < <("$vpy" - <<'PY'
import socket
socks = [socket.socket() for _ in range(6)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
PY
)
ports=("$master_port" "$master_ui" "$w1_port" "$w1_ui" "$w2_port" "$w2_ui")
master=spark://127.0.0.1:$master_port

groups=()  # process group ids (= pids of the setsid'ed leaders) of everything started here
cleanup() {
  local rc=$? pgid left=() i
  trap - EXIT INT TERM
  phase "stopping process groups ${groups[*]}"
  for pgid in "${groups[@]}"; do kill -TERM -- "-$pgid" 2>/dev/null || true; done
  for ((i = 0; i < 60; i++)); do
    left=()
    for pgid in "${groups[@]}"; do kill -0 -- "-$pgid" 2>/dev/null && left+=("$pgid"); done
    ((${#left[@]})) || break
    sleep 0.5
  done
  phase "process groups stopped: ${left[*]:-all}"
  for pgid in "${left[@]}"; do
    echo "process group $pgid did not stop on SIGTERM: SIGKILL" >&2
    kill -KILL -- "-$pgid" 2>/dev/null || true
  done
  sleep 0.5
  local lingering=()
  for port in $(printf '%s\n' "${ports[@]}" | sort -un); do
    ss -Hltn "sport = :$port" | grep -q . && lingering+=("$port")
  done
  if ((${#lingering[@]})); then
    echo "error: ports ${lingering[*]} still listening after the cluster was stopped:" >&2
    ss -Hltnp | grep -E ":($(IFS='|'; echo "${lingering[*]}"))\b" >&2 || true
    rc=1
  elif ((${#groups[@]})); then
    echo "stopped process groups ${groups[*]}; none of ports $(printf '%s\n' "${ports[@]}" | sort -un | xargs) listens"
  fi
  # the unpacked environments (~400 MB each) and scratch space go; logs, executor stderr and outputs stay
  rm -rf "$work/driver-env" "$work/environment" "$work/local" "$SPARK_WORKER_DIR"/*/app-*/*/environment
  echo "cluster-test took $((SECONDS - t0)) s: $([[ $rc == 0 ]] && echo passed || echo "FAILED (exit $rc)")"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start() {  # start NAME COMMAND...: in the background, in a new process group, output to logs/NAME.out
  local name=$1
  shift
  setsid "$@" >"$SPARK_LOG_DIR/$name.out" 2>&1 </dev/null &
  groups+=("$!")
  echo "$!" >"$SPARK_PID_DIR/$name.pid"
}

wait_until() {  # wait_until SECONDS WHAT COMMAND...: until COMMAND succeeds
  local limit=$1 what=$2 deadline=$((SECONDS + $1))
  shift 2
  until "$@"; do
    if ((SECONDS > deadline)); then
      echo "error: no $what after $limit s; the last lines of the logs:" >&2
      tail -n 20 "$SPARK_LOG_DIR"/*.out >&2 || true
      return 1
    fi
    sleep 0.5
  done
}
listening() { ss -Hltn "sport = :$1" | grep -q .; }
alive_workers() {  # the master's JSON status (its web UI, on 127.0.0.1) counts $1 ALIVE workers
  master_json | "$vpy" -c 'import json, sys; sys.exit(json.load(sys.stdin)["aliveworkers"] < int(sys.argv[1]))' "$1" \
    2>/dev/null
}
master_json() { curl -sf --noproxy '*' --max-time 5 "http://127.0.0.1:$master_ui/json/"; }

run() {  # run NAME COMMAND...: in its own process group (stopped on exit too), output to logs/NAME.out
  local name=$1 rc=0
  shift
  start "$name" timeout 900 "$@"
  wait "${groups[-1]}" || rc=$?
  if ((rc)); then
    echo "error: $name failed (exit $rc); the last lines of $SPARK_LOG_DIR/$name.out:" >&2
    tail -n 40 "$SPARK_LOG_DIR/$name.out" >&2
    return "$rc"
  fi
}

# --- 1. the cluster
phase "master $master, workers on 127.0.0.1:$w1_port and 127.0.0.1:$w2_port (SPARK_HOME=$SPARK_HOME)"
start master "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
  --host 127.0.0.1 --port "$master_port" --webui-port "$master_ui"
wait_until 90 "master listening on $master_port" listening "$master_port"
for w in 1 2; do
  port_var=w${w}_port ui_var=w${w}_ui
  start "worker$w" "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
    --host 127.0.0.1 --port "${!port_var}" --webui-port "${!ui_var}" --cores 1 --memory 2g \
    --work-dir "$SPARK_WORKER_DIR/worker$w" "$master"
done
wait_until 90 "2 workers registered with the master" alive_workers 2
listening=$(ss -Hltnp | grep -E "pid=($(IFS='|'; echo "${groups[*]}"))," || true)
if grep -vE '^\S+\s+\S+\s+\S+\s+(127\.0\.0\.1|\[::ffff:127\.0\.0\.1\]):' <<<"$listening" | grep -q .; then
  echo "error: a daemon listens on an address other than 127.0.0.1:" >&2
  echo "$listening" >&2
  exit 1
fi
ports+=($(awk '{n = split($4, a, ":"); print a[n]}' <<<"$listening"))  # every port they opened
phase "cluster up; listening: $(awk '{print $4}' <<<"$listening" | sort | tr '\n' ' ')"

# --- the driver's Python: the package's environment, unpacked (no dev venv, no editable install)
mkdir -p "$work/driver-env"
tar -xzf "$pkg/environment.tar.gz" -C "$work/driver-env"
submit=(
  env PYSPARK_PYTHON=./environment/bin/python PYSPARK_DRIVER_PYTHON="$work/driver-env/bin/python"
  "$SPARK_HOME/bin/spark-submit" --master "$master" --deploy-mode client
  --properties-file "$pkg/conf/spark-defaults.conf"
  --conf "spark.archives=$pkg/environment.tar.gz#environment"
  --py-files "$pkg/mqreplay.zip"
  --conf spark.executor.memory=1g --conf spark.executor.cores=1 --conf spark.cores.max=2
  --conf spark.driver.memory=1g
  --conf spark.driver.host=127.0.0.1 --conf spark.driver.bindAddress=127.0.0.1 --conf spark.ui.enabled=false
  # no task before both executors registered: each must run some (and so unpack the archive)
  --conf spark.scheduler.minRegisteredResourcesRatio=1.0
  --conf spark.scheduler.maxRegisteredResourcesWaitingTime=120s
)

# --- 2. where the executors' Python and pyspark come from
phase "probe: the executors' Python"
run probe "${submit[@]}" tools/cluster_probe.py
grep '^probe:' "$SPARK_LOG_DIR/probe.out"

# --- 3. the job on the cluster
phase "the packaged job on the cluster: $store"
run job-cluster "${submit[@]}" "$pkg/replay.py" \
  --store "$store" --out "$work/out-cluster" --subscriptions "$subscriptions"
# it ran on the cluster (an app registered with the master, executors on both workers), not in local mode
app=$(master_json | "$vpy" -c '
import json, sys
status = json.load(sys.stdin)
apps = [a["id"] for a in status["completedapps"] + status["activeapps"] if a["name"] == "mqreplay"]
print(*apps)')
[[ -n $app ]] || { echo "error: the job did not register with the master (did it run in local mode?)" >&2; exit 1; }
for w in 1 2; do
  [[ -x $(echo "$SPARK_WORKER_DIR/worker$w/$app"/*/environment/bin/python) ]] || {
    echo "error: no executor of $app with the unpacked environment on worker $w" >&2; exit 1; }
done
phase "app $app ran with executors on both workers"

# --- 4. the same job in local mode (dev venv)
phase "the same job in local mode"
run job-local env PYSPARK_PYTHON="$vpy" PYSPARK_DRIVER_PYTHON="$vpy" "$root/.venv/bin/spark-submit" \
  --master "local[2]" --conf spark.driver.host=127.0.0.1 --conf spark.driver.bindAddress=127.0.0.1 \
  --conf spark.ui.enabled=false \
  jobs/replay.py --store "$store" --out "$work/out-local" --subscriptions "$subscriptions"

# --- 5. the two outputs, and the acceptance check on the cluster's
phase "compare cluster and local outputs"
"$vpy" tools/compare_outputs.py "$work/out-cluster" "$work/out-local"
check=$root/../shared/tools/replay_check.py
if [[ -f $check ]]; then
  phase "replay_check.py on the cluster output"
  "$vpy" "$check" "$work/out-cluster" "$fixture"
else
  echo "no $check: skipped (the comparison with the local run still ran)"
fi

# --- 6. the data source: the packaged code reads the store on the cluster as it does in local mode
phase "the rocketmq data source on the cluster"
# a Python data source is planned on the driver, in a Python worker started with PYSPARK_PYTHON: in client
# mode ./environment/bin/python must resolve in the driver's working directory as well
ln -sfn "$work/driver-env" "$work/environment"
run datasource-cluster env -C "$work" "${submit[@]}" "$root/tools/datasource_read.py" "$store" "$subscriptions" \
  "$work/datasource-cluster.jsonl"
grep '^datasource:' "$SPARK_LOG_DIR/datasource-cluster.out"
phase "the rocketmq data source in local mode"
run datasource-local env PYSPARK_PYTHON="$vpy" PYSPARK_DRIVER_PYTHON="$vpy" PYTHONPATH="$root" \
  "$root/.venv/bin/spark-submit" --master "local[2]" --conf spark.driver.host=127.0.0.1 \
  --conf spark.driver.bindAddress=127.0.0.1 --conf spark.ui.enabled=false \
  tools/datasource_read.py "$store" "$subscriptions" "$work/datasource-local.jsonl"
cmp "$work/datasource-cluster.jsonl" "$work/datasource-local.jsonl" || {
  echo "error: the data source read differently on the cluster and in local mode" >&2; exit 1; }
phase "data source reads equal: $(wc -l <"$work/datasource-cluster.jsonl") lines"
echo "cluster job: see $SPARK_LOG_DIR/job-cluster.out; outputs: $work/out-cluster, $work/out-local"
