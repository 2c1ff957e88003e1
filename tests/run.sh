#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine:
#   installs dependencies (idempotent), builds with -Werror, runs unit tests,
#   integration tests and the fault suite (label chaos) (real redis-server, redis-sentinel, etcd,
#   rabbitmq-server, mariadb-server and mosquitto started by the tests on 127.0.0.1, stopped
#   afterwards).
#
#   bash tests/run.sh              everything
#   bash tests/run.sh -L unit      only one label (any ctest arguments)
#
# Environment: BUILD_DIR (default build), BATON_CMAKE_ARGS (extra cmake args),
# BATON_FAIL_ON_SKIP=1 (.ci/run sets it): a skipped test fails the run (on a
# machine that has everything, a skip means a test lost its ground).
# A selection that runs no test at all fails (ctest --no-tests=error), and a
# test that could not run shows as skipped, never as passed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"

bash "$ROOT/.ci/deps.sh"
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBATON_WERROR=ON -DBATON_TESTS=ON ${BATON_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"

cd "$BUILD_DIR"
# ctest with --no-tests=error; with BATON_FAIL_ON_SKIP=1 a skipped test fails.
run_ctest() {
  local out rc=0
  out="$(mktemp)"
  ctest --output-on-failure --no-tests=error "$@" | tee "$out" || rc=$?
  if [ "$rc" -eq 0 ] && [ "${BATON_FAIL_ON_SKIP:-0}" = 1 ] && grep -q '\*\*\*Skipped' "$out"; then
    echo "tests/run.sh: skipped tests (BATON_FAIL_ON_SKIP=1):" >&2
    grep '\*\*\*Skipped' "$out" >&2
    rc=1
  fi
  rm -f "$out"
  return "$rc"
}
if [ $# -gt 0 ]; then
  run_ctest "$@"
  exit
fi
# Unit tests in parallel; integration tests one at a time (they measure
# failover timings on a 2-core machine).
run_ctest -L unit -j"$(nproc)"
run_ctest -L integration
# The fault suite's measured figures (one CHAOS line per scenario: forwarded,
# duplicates, lost, the longest gap) close the output, pass or fail; ctest
# keeps a test's stdout only in its log.
rc=0
run_ctest -L chaos || rc=$?
echo
echo "=== fault suite: measured figures (from $BUILD_DIR/Testing/Temporary/LastTest.log)"
grep -h '^CHAOS ' Testing/Temporary/LastTest.log || echo "(no CHAOS lines: did the fault suite run?)"
exit "$rc"
