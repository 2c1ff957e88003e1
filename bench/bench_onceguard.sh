#!/usr/bin/env bash
# Benchmark: OnceGuard decisions per second with one Redis connection, vs the
# same wire work in a bare hiredis loop, on the same redis-server in the same
# run.
#
#   bench/bench_onceguard.sh [BUILD_DIR]     (default: $BATON_BUILD_DIR or ./build)
#
# baton:    bench_onceguard (bench/onceguard_bench.c): baton's redis locker and
#           once_guard_allow on N distinct keys, one connection, one thread.
#           Each decision is one claim: `SET key value NX PX 1000` pipelined
#           with `TYPE key` (one round trip; guard/locker_redis.c redis_claim).
# baseline: bench_onceguard_baseline (bench/onceguard_baseline.c): the same
#           pipelined SET NX PX + TYPE on N distinct keys of the same shape,
#           both replies read, in bare hiredis: one connection, one thread.
# info:     redis-benchmark -c 1 SET k:__rand_int__ v NX PX 1000 (one command
#           per round trip, no TYPE), printed in the log only, when
#           redis-benchmark is installed; no RESULT, no target.
# Both programs check their answers: every fresh key allowed, a second claim
# on keys already taken (inside their TTL) skipped.
# Each round runs both programs one after the other, never at once (the
# baseline first in odd rounds, baton first in even ones); ROUNDS (default 5)
# rounds, and the median rate of each is compared (robust to a round hit by
# other load on the machine): ratio = baton / baseline, target >= 0.8.
# Own redis-server on a free loopback port, stopped on every exit path; each
# program run is bounded by `timeout`.
# Prints the contract line of bench/run: RESULT {json}.
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-${BATON_BUILD_DIR:-$SRC/build}}
N=${N:-20000}
ROUNDS=${ROUNDS:-5}
TTL_MS=1000
RUN_TIMEOUT=${RUN_TIMEOUT:-30}
PROG=$BUILD/bench/bench_onceguard
BASE=$BUILD/bench/bench_onceguard_baseline

for p in "$PROG" "$BASE"; do
    [ -x "$p" ] || { echo "missing $p (cmake -DBATON_BENCH=ON -B $BUILD; cmake --build $BUILD --target bench_onceguard bench_onceguard_baseline)" >&2; exit 2; }
done
for p in redis-server redis-cli python3 timeout; do
    command -v "$p" >/dev/null || { echo "missing $p" >&2; exit 2; }
done

TMP=$(mktemp -d /tmp/baton-bench-once.XXXXXX)
REDIS_PID=
# running and not yet a zombie (kill -0 succeeds on a zombie)
alive() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [ "${st#Z}" = "$st" ]; }
cleanup() {
    if [ -n "$REDIS_PID" ]; then
        kill "$REDIS_PID" 2>/dev/null || true
        for _ in $(seq 50); do alive "$REDIS_PID" || break; sleep 0.05; done
        kill -9 "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# not daemonized: a child in this script's process group, so a group kill
# (bench/run's SIGTERM/SIGKILL on timeout) reaches it too
PORT=$(python3 -c "import sys; sys.path.insert(0, \"$SRC/tests/integration/lib\"); import harness; print(harness.free_port())")
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    --dir "$TMP" --logfile "$TMP/redis.log" >/dev/null 2>&1 &
REDIS_PID=$!
for _ in $(seq 100); do
    redis-cli -p "$PORT" ping >/dev/null 2>&1 && break
    alive "$REDIS_PID" || break
    sleep 0.05
done
redis-cli -p "$PORT" ping >/dev/null 2>&1 || { echo "redis-server did not start:" >&2; cat "$TMP/redis.log" >&2 || true; exit 1; }

# runs one program (baton's or the baseline), prints its output line and
# appends its rate to $TMP/<name>.rates
run_one() {
    local name=$1 prog=$2 out rate
    if ! out=$(timeout "$RUN_TIMEOUT" "$prog" 127.0.0.1 "$PORT" "$N" "$TTL_MS" 2>&1); then
        echo "$out"
        echo "bench_onceguard: $prog failed (or exceeded ${RUN_TIMEOUT}s)" >&2
        exit 1
    fi
    rate=$(sed -n 's/.* rate=\([0-9.]*\).*/\1/p' <<< "$out" | head -1)
    [ -n "$rate" ] || { echo "$out"; echo "bench_onceguard: no rate from $prog" >&2; exit 1; }
    echo "    $name: $out"
    echo "$rate" >> "$TMP/$name.rates"
}

echo "onceguard benchmark: $N decisions per round and program, $ROUNDS rounds, one connection each;"
echo "each decision = SET key value NX PX $TTL_MS + TYPE key, pipelined (one round trip)"
for round in $(seq "$ROUNDS"); do
    echo "  round $round:"
    if [ $((round % 2)) -eq 1 ]; then
        run_one baseline "$BASE"
        run_one baton "$PROG"
    else
        run_one baton "$PROG"
        run_one baseline "$BASE"
    fi
done

if command -v redis-benchmark >/dev/null; then
    # redis-benchmark -q prints "SET ...: 10526.32 requests per second, p50=..."
    rb=$(timeout "$RUN_TIMEOUT" redis-benchmark -p "$PORT" -c 1 -n "$N" -r 100000000 -q \
            SET "k:__rand_int__" v NX PX "$TTL_MS" 2>&1 | tr '\r' '\n' |
         awk -F': ' '/requests per second/ {split($2, a, " "); r = a[1]} END {print (r == "" ? 0 : r)}') || rb=0
    echo "  info only (not the baseline): redis-benchmark -c 1 SET NX PX alone, one command per round trip: $rb/s"
fi
echo "  keys in Redis after the run: $(redis-cli -p "$PORT" dbsize) (each expires after its ${TTL_MS} ms ttl)"

python3 - "$TMP/baton.rates" "$TMP/baseline.rates" <<'EOF'
import json, statistics, sys
baton_r = [float(x) for x in open(sys.argv[1]).read().split()]
base_r = [float(x) for x in open(sys.argv[2]).read().split()]
baton, base = statistics.median(baton_r), statistics.median(base_r)
print("  baton rounds: %s -> median %.0f/s" % (" ".join("%.0f" % x for x in baton_r), baton))
print("  baseline rounds: %s -> median %.0f/s" % (" ".join("%.0f" % x for x in base_r), base))
ratio = baton / base if base else 0.0
print("RESULT " + json.dumps({
    "workload": "OnceGuard decisions/s vs the same pipelined SET NX PX + TYPE loop in bare hiredis, 1 client",
    "baton": round(baton), "baseline": round(base), "unit": "decisions/s",
    "ratio": round(ratio, 3), "target": ">= 0.8", "pass": ratio >= 0.8}))
EOF
