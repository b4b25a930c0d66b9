# shellcheck shell=bash
# Shared by run.sh, cli.sh and connect.sh (source it).
#
#   java_broker_bin          -> exports MILLRACE_BIN (default <repo>/target/debug/millrace;
#                               built with `cargo build -p millrace-broker` when missing)
#   java_dist_classpath      -> sets DIST_CP: the Kafka 4.1 tools + Connect jars (dist/pom.xml),
#                               resolved with Maven on first use into target/dist.classpath
#   tool CLASS ARGS...       -> runs a Kafka CLI class with DIST_CP (bounded by TOOL_TIMEOUT)
#   pom_classpath NAME       -> prints the classpath of NAME/pom.xml, resolved with Maven once per
#                               pom change into target/NAME.classpath
#   now_ms, check helpers pass/fail/summary
#
# Env: MILLRACE_BIN, MVN (default mvn), MAVEN_REPO_LOCAL (optional -Dmaven.repo.local),
#      TOOL_TIMEOUT (seconds per tool run, default 90), MILLRACE_BUILD_TIMEOUT (default 3600).

# Millrace reads every exported MILLRACE_* variable as a config key (settings.rs env_layer), and
# refuses unknown ones: keep the harness knobs as plain shell variables (lib/millrace.sh reads
# them) but do not pass them to the broker's environment.
export -n MILLRACE_START_TIMEOUT MILLRACE_BUILD_TIMEOUT MILLRACE_KEEP_WORK 2>/dev/null || true

JAVA_COMPAT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
JAVA_COMPAT_ROOT="$(cd "$JAVA_COMPAT_DIR/../.." && pwd)"
# shellcheck source=../lib/millrace.sh
source "$JAVA_COMPAT_ROOT/compat-tests/lib/millrace.sh"

# mvn_cmd TIMEOUT_S ARGS... : Maven, batch mode, quiet, bounded
mvn_cmd() {
  local t="$1"
  shift
  local args=(-B -q -Dstyle.color=never)
  [[ -n "${MAVEN_REPO_LOCAL:-}" ]] && args+=("-Dmaven.repo.local=$MAVEN_REPO_LOCAL")
  timeout --kill-after=30 "$t" "${MVN:-mvn}" "${args[@]}" "$@"
}

java_broker_bin() {
  if [[ -z "${MILLRACE_BIN:-}" ]]; then
    local bin="$JAVA_COMPAT_ROOT/target/debug/millrace"
    if [[ ! -x "$bin" ]]; then
      echo "java: $bin missing; cargo build -p millrace-broker (waits if another build holds the cargo lock)" >&2
      (cd "$JAVA_COMPAT_ROOT" && timeout "${MILLRACE_BUILD_TIMEOUT:-3600}" cargo build -p millrace-broker >&2) || {
        echo "java: broker build failed" >&2
        return 1
      }
    fi
    MILLRACE_BIN="$bin"
  fi
  [[ -x "$MILLRACE_BIN" ]] || { echo "java: MILLRACE_BIN=$MILLRACE_BIN is not executable" >&2; return 1; }
  export MILLRACE_BIN
}

java_dist_classpath() {
  local cpfile="$JAVA_COMPAT_DIR/target/dist.classpath" pom="$JAVA_COMPAT_DIR/dist/pom.xml"
  # one cached classpath per local repository
  [[ -n "${MAVEN_REPO_LOCAL:-}" ]] && cpfile="$cpfile.$(printf '%s' "$MAVEN_REPO_LOCAL" | cksum | cut -d' ' -f1)"
  if [[ ! -s "$cpfile" || "$pom" -nt "$cpfile" ]]; then
    mkdir -p "$JAVA_COMPAT_DIR/target"
    # The Java suite and python/test_tls.py may resolve at once (run-all.sh lanes): one at a time.
    (
      flock -w 1000 9 || { echo "java: timed out waiting for another classpath resolution" >&2; exit 1; }
      if [[ ! -s "$cpfile" || "$pom" -nt "$cpfile" ]]; then
        echo "java: resolving Kafka tools/Connect jars (dist/pom.xml) with Maven" >&2
        mvn_cmd 900 -f "$pom" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath -Dmdep.outputFile="$cpfile.tmp" >&2 || {
          echo "java: mvn dependency:build-classpath failed" >&2
          exit 1
        }
        mv "$cpfile.tmp" "$cpfile"
      fi
    ) 9>"$JAVA_COMPAT_DIR/target/.dist-classpath.lock" || return 1
  fi
  DIST_CP="$(cat "$cpfile")"
  # every jar must be there (a cleaned ~/.m2 makes the cached file stale)
  local j
  for j in ${DIST_CP//:/ }; do
    [[ -f "$j" ]] || { rm -f "$cpfile"; java_dist_classpath; return; }
  done
  export DIST_CP
}

pom_classpath() {
  local cpfile="$JAVA_COMPAT_DIR/target/$1.classpath" pom="$JAVA_COMPAT_DIR/$1/pom.xml"
  if [[ ! -s "$cpfile" || "$pom" -nt "$cpfile" ]]; then
    mkdir -p "$JAVA_COMPAT_DIR/target"
    mvn_cmd 900 -f "$pom" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath \
      -Dmdep.outputFile="$cpfile.tmp" >&2 || return 1
    mv "$cpfile.tmp" "$cpfile"
  fi
  cat "$cpfile"
}

JAVA_TOOL_OPTS=(-Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto
  "-Dlog4j2.configurationFile=$JAVA_COMPAT_DIR/log4j2-tools.properties")

# tool CLASS ARGS... : a Kafka CLI tool, as bin/kafka-*.sh would run it (stdin passed through)
tool() {
  local cls="$1"
  shift
  timeout --kill-after=10 "${TOOL_TIMEOUT:-90}" java "${JAVA_TOOL_OPTS[@]}" -cp "$DIST_CP" "$cls" "$@"
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

passed=0
failed=0
failures=()
pass() { passed=$((passed + 1)); echo "PASS  $1"; }
# fail NAME WHY [FILE]: FILE's tail is printed
fail() {
  failed=$((failed + 1))
  failures+=("$1: $2")
  echo "FAIL  $1: $2"
  if [[ -n "${3:-}" && -s "$3" ]]; then
    echo "      --- $3 (last 15 lines) ---"
    tail -n 15 "$3" | sed 's/^/      /'
  fi
}
summary() {
  if ((${#failures[@]})); then
    echo "--- failures ---"
    printf '  %s\n' "${failures[@]}"
  fi
  echo "$passed passed, $failed failed"
}
