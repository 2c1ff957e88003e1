#!/usr/bin/env bash
# The demo, from a fresh Debian 12 machine: installs dependencies
# (idempotent), builds baton, runs 3 replicas against local brokers
# (redis, mosquitto, rabbitmq, mariadb; --quick: redis and mosquitto only).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bash "$ROOT/.ci/deps.sh"
cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$ROOT/build" -j"$(nproc)" --target baton >/dev/null
BATON_BIN="$ROOT/build/baton" exec python3 "$ROOT/config/demo/demo.py" "$@"
