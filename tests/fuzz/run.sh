#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a bounded time.
#   bash tests/fuzz/run.sh [seconds-per-target]   (default 60)
# FUZZ_SEED=N fixes libFuzzer's seed: the run then explores the same inputs
# in the same order every time (a prefix of them, as far as the time allows),
# so a finding reproduces with the same command. CI uses a fixed seed; leave
# it unset for exploratory runs (a new random seed each time).
# Crash inputs land in tests/fuzz/crashes/<target>/; add each one to the
# target's corpus directory as a regression case once fixed (corpus files are
# replayed by every run).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SECS="${1:-60}"
BUILD="$ROOT/build-fuzz"
command -v clang >/dev/null || apt-get install -y -qq clang libclang-rt-14-dev >/dev/null
CC=clang cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DBATON_FUZZ=ON -DBATON_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target fuzz_config fuzz_cron fuzz_envelope fuzz_redis_reply fuzz_etcd_answer >/dev/null
export LSAN_OPTIONS="suppressions=$ROOT/tests/fuzz/lsan.supp:${LSAN_OPTIONS:-}"
SEED_ARG=()
if [ -n "${FUZZ_SEED:-}" ]; then SEED_ARG=(-seed="$FUZZ_SEED"); fi
# FUZZ_JOBS targets at a time (default 1; CI runs 2, one per core)
JOBS="${FUZZ_JOBS:-1}"
fuzz_one() { # target: its summary on stdout, exit status 1 on a finding
  local t="$1" work
  mkdir -p "$ROOT/tests/fuzz/crashes/$t"
  work="$(mktemp -d)"
  cp -r "$ROOT/tests/fuzz/corpus/$t/." "$work/" 2>/dev/null || true
  echo "fuzz_$t: ${SECS}s"
  local rc=0
  if ! "$BUILD/tests/fuzz/fuzz_$t" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 "${SEED_ARG[@]}" \
       -artifact_prefix="$ROOT/tests/fuzz/crashes/$t/" "$work" "$ROOT/tests/fuzz/corpus/$t" \
       >"$work.log" 2>&1; then
    echo "fuzz_$t: FAILED (see crashes/$t)"; tail -30 "$work.log"; rc=1
  else
    grep -E "^#[0-9]+.*DONE|stat::number_of_executed_units" "$work.log" | tail -1 || true
  fi
  rm -rf "$work" "$work.log"
  return $rc
}
status=0
out="$(mktemp -d)"
pids=()
names=()
finish() { # waits for the running targets, in order, and prints their summaries
  local i
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || status=1
    cat "$out/${names[$i]}"
  done
  pids=()
  names=()
}
for t in config cron envelope redis_reply etcd_answer; do
  fuzz_one "$t" >"$out/$t" 2>&1 &
  pids+=("$!")
  names+=("$t")
  [ "${#pids[@]}" -lt "$JOBS" ] || finish
done
finish
rm -rf "$out"
exit $status
