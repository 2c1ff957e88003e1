#!/usr/bin/env bash
# The demo, from a fresh Debian 12 machine: installs what it needs
# (idempotent; the build tools and libraries and the brokers, not the test
# suite's tools: .ci/deps.sh --demo), builds baton, runs 3 replicas against
# local brokers (redis, mosquitto, rabbitmq, mariadb; --quick: redis and
# mosquitto only).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bash "$ROOT/.ci/deps.sh" --demo
# Quiet unless it fails. BATON_TESTS=OFF: the demo builds baton alone, so the
# test suite's packages (cmocka, libmicrohttpd) are not needed; tests/run.sh
# configures the same build directory with the tests on again.
mkdir -p "$ROOT/build"
log="$ROOT/build/demo-build.log"
echo "building baton in $ROOT/build ..."
if ! { cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBATON_TESTS=OFF &&
       cmake --build "$ROOT/build" -j"$(nproc)" --target baton; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "demo: building baton failed (log: $log)" >&2
  exit 1
fi
BATON_BIN="$ROOT/build/baton" exec python3 "$ROOT/config/demo/demo.py" "$@"
