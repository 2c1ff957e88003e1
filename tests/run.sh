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
# Environment: BUILD_DIR (default build), BATON_CMAKE_ARGS (extra cmake args).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"

bash "$ROOT/.ci/deps.sh"
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBATON_WERROR=ON ${BATON_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"

cd "$BUILD_DIR"
if [ $# -gt 0 ]; then
  exec ctest --output-on-failure "$@"
fi
# Unit tests in parallel; integration tests one at a time (they measure
# failover timings on a 2-core machine).
ctest --output-on-failure -L unit -j"$(nproc)"
ctest --output-on-failure -L integration
# The fault suite's measured figures (one CHAOS line per scenario: forwarded,
# duplicates, lost, the longest gap) close the output, pass or fail; ctest
# keeps a test's stdout only in its log.
rc=0
ctest --output-on-failure -L chaos || rc=$?
echo
echo "=== fault suite: measured figures (from $BUILD_DIR/Testing/Temporary/LastTest.log)"
grep -h '^CHAOS ' Testing/Temporary/LastTest.log || echo "(no CHAOS lines: did the fault suite run?)"
exit "$rc"
