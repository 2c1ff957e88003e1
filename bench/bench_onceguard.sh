#!/usr/bin/env bash
# Benchmark: OnceGuard decisions per second with one Redis connection, vs
# redis-benchmark "SET key v NX PX 1000" with one client, on the same
# redis-server in the same run.
#
#   bench/bench_onceguard.sh [BUILD_DIR]     (default: $BATON_BUILD_DIR or ./build)
#
# baton:    bench_onceguard (bench/onceguard_bench.c): baton's redis locker and
#           once_guard_allow on N distinct keys, one connection, one thread.
#           Each decision is one EVALSHA of the acquire script (SET NX PX plus
#           the fencing epoch: TYPE x2, TIME, GET, SET).
# baseline: redis-benchmark -c 1 -n N -r 100000000 SET k:__rand_int__ v NX PX 1000
#           (random keys: a fresh key nearly every time, like OnceGuard).
# info:     redis-benchmark -c 1 EVALSHA of the same acquire script, to show
#           how much of any gap is the script itself (no target).
# Rounds alternate baseline and baton (ROUNDS, default 3); the best round of
# each is compared. Target: ratio >= 0.8.
# Prints the contract lines of bench/run: RESULT {json}.
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-${BATON_BUILD_DIR:-$SRC/build}}
N=${N:-20000}
ROUNDS=${ROUNDS:-3}
PROG=$BUILD/bench/bench_onceguard

[ -x "$PROG" ] || { echo "missing $PROG (cmake --build $BUILD --target bench_onceguard)" >&2; exit 2; }
for p in redis-server redis-cli redis-benchmark python3; do
    command -v "$p" >/dev/null || { echo "missing $p" >&2; exit 2; }
done

TMP=$(mktemp -d /tmp/baton-bench-once.XXXXXX)
PORT=
cleanup() {
    [ -z "$PORT" ] || redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

PORT=$(python3 -c "import sys; sys.path.insert(0, \"$SRC/tests/integration/lib\"); import harness; print(harness.free_port())")
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --dir "$TMP" --pidfile "$TMP/redis.pid" --logfile "$TMP/redis.log" >/dev/null
for _ in $(seq 100); do
    redis-cli -p "$PORT" ping >/dev/null 2>&1 && break
    sleep 0.05
done
redis-cli -p "$PORT" ping >/dev/null || { echo "redis-server did not start" >&2; exit 1; }

# redis-benchmark -q prints "SET ...: 10526.32 requests per second, p50=..."
rb_rate() {
    redis-benchmark -p "$PORT" -c 1 -n "$N" -r 100000000 -q "$@" 2>&1 | tr '\r' '\n' |
        awk -F': ' '/requests per second/ {split($2, a, " "); r = a[1]} END {print (r == "" ? 0 : r)}'
}

# the acquire script, taken from the locker's own SCRIPT LOAD (any EVALSHA
# loaded by bench_onceguard is in the script cache after its first run)
best_base=0
best_baton=0
best_lua=0
max() { python3 -c "import sys; print(max(float(a) for a in sys.argv[1:]))" "$@"; }
echo "onceguard benchmark: $N decisions per round, $ROUNDS rounds, one connection each"
for round in $(seq "$ROUNDS"); do
    base=$(rb_rate SET "k:__rand_int__" v NX PX 1000)
    out=$("$PROG" 127.0.0.1 "$PORT" "$N" 1000) || { echo "$out"; echo "bench_onceguard failed" >&2; exit 1; }
    baton=$(sed -n 's/.* rate=\([0-9.]*\).*/\1/p' <<< "$out")
    echo "  round $round: redis-benchmark SET NX PX $base/s; baton OnceGuard $baton/s ($out)"
    best_base=$(max "$best_base" "$base")
    best_baton=$(max "$best_baton" "$baton")
done

# info: the acquire script alone through redis-benchmark
sha=$(redis-cli -p "$PORT" --raw script load "$(cat <<'LUA'
if redis.replicate_commands then redis.replicate_commands() end
local t1 = redis.call('TYPE', KEYS[1]).ok
if t1 ~= 'none' and t1 ~= 'string' then
  return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. t1)
end
local t2 = redis.call('TYPE', KEYS[2]).ok
if t2 ~= 'none' and t2 ~= 'string' then
  return redis.error_reply('WRONGTYPE epoch key ' .. KEYS[2] .. ' holds a ' .. t2)
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local now = redis.call('TIME')
local floor = tonumber(now[1]) * 1000000 + math.floor(tonumber(now[2]) / 1000) * 1000
local e = (tonumber(redis.call('GET', KEYS[2]) or '0') or 0) + 1
if floor > e then e = floor end
redis.call('SET', KEYS[2], string.format('%.0f', e), 'PX', ARGV[3])
return e
LUA
)")
lua=$(rb_rate EVALSHA "$sha" 2 "l:__rand_int__" "l:__rand_int__:epoch" 0123456789abcdef0123456789abcdef 1000 86400000)
echo "  info: redis-benchmark EVALSHA of the acquire script (same Lua as guard/locker_redis.c): $lua/s"
keys=$(redis-cli -p "$PORT" dbsize)
echo "  keys left in Redis after the run: $keys (one per decision and redis-benchmark key, each expiring with its ttl; OnceGuard writes no epoch key)"

python3 - "$best_baton" "$best_base" "$lua" "$N" <<'EOF'
import json, sys
baton, base, lua, n = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
ratio = baton / base if base else 0.0
print("RESULT " + json.dumps({
    "workload": "OnceGuard decisions/s, 1 connection (vs SET NX PX, 1 client)",
    "baton": round(baton), "baseline": round(base), "unit": "decisions/s",
    "ratio": round(ratio, 3), "target": ">= 0.8", "pass": ratio >= 0.8}))
ratio2 = baton / lua if lua else 0.0
print("RESULT " + json.dumps({
    "workload": "OnceGuard decisions/s vs EVALSHA acquire script, 1 client (info)",
    "baton": round(baton), "baseline": round(lua), "unit": "decisions/s",
    "ratio": round(ratio2, 3), "target": None, "pass": None}))
EOF
