#!/usr/bin/env bash
# Keeps the library's edge where the tree says it is (docs/internals.md, "Layout"):
#
#   include/baton/  the public API of libbaton-guard: includes only baton/
#   base/           the base room (clocks, tokens, back-off, base64,
#                   ratelimit, the logging callback, curl_dl): includes only
#                   base/ and baton/, nothing above it
#   guard/          libbaton-guard's own: its private headers (guard/*.h)
#                   are included only from guard/ and tests/
#   redis/          the Redis connection unit, beside guard/ (built into
#                   libbaton-guard, hidden): the locker, the redis_psub
#                   source, the Redis settings, the CDC checkpoint connection
#                   and the config loader use it; it includes only base/,
#                   baton/ and itself (tests/check_redis_layers.sh keeps
#                   its own layers)
#   everything else (common/, endpoints/, src/, bench/, examples/) reaches the
#                   guard through include/baton/ alone: no exception
#
#   bash tests/check_public_edge.sh [source dir]      (ctest: unit.public_edge)
set -euo pipefail
ROOT="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
cd "$ROOT"
INC='^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]'

fail=0
# report DIR PATTERN WHY: every include in DIR matching PATTERN is a failure
report() {
    local dir="$1" pat="$2" why="$3" hit
    [[ -d "$dir" ]] || return 0
    while IFS= read -r hit; do
        echo "$hit: $why" >&2
        fail=1
    done < <(grep -rnE --include='*.c' --include='*.h' --include='*.cc' "$pat" "$dir" || true)
}

for dir in common src endpoints bench examples include base redis; do
    report "$dir" "${INC}guard/" \
        "a private guard/ header outside guard/ and tests/: use include/baton/ (add what is missing there)"
done
report redis "${INC}(common|endpoints|src)/" "redis/ sits below the daemon: it includes only base/, baton/ and redis/"
report common "${INC}redis/" "common/ does not use the Redis connection unit"
report include "${INC}(base|common|endpoints|src|redis)/" "the public headers include only baton/"
report base "${INC}(common|endpoints|src|redis|guard)/" "base/ is below every other layer: it includes only base/ and baton/"

if [[ "$fail" -ne 0 ]]; then exit 1; fi
echo "the public edge holds: guard/ headers only in guard/ and tests/; redis/ and base/ below the daemon"
