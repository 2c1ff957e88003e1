#!/usr/bin/env bash
# Keeps the library's edge where the tree says it is (README, "Layout"):
#
#   include/baton/  the public API of libbaton-guard: includes only baton/
#   base/           the base room (clocks, tokens, back-off, base64,
#                   ratelimit, the logging callback, curl_dl): includes only
#                   base/ and baton/, nothing above it
#   guard/          libbaton-guard's own: its private headers (guard/*.h)
#                   are included only from guard/ and tests/
#   everything else (common/, endpoints/, src/, bench/, examples/) reaches the
#                   guard through include/baton/ alone; the one exception is
#                   the Redis connection unit (guard/redis/), shared by the
#                   locker and the daemon's Redis code: endpoints/ (the
#                   redis_psub source, its settings, the CDC checkpoint
#                   connection) and src/ (the config loader) may include it
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

for dir in common src endpoints bench examples include base; do
    # guard/redis/ is allowed where said above; every other guard/ header never
    if [[ "$dir" == src || "$dir" == endpoints ]]; then
        report "$dir" "${INC}guard/[a-z_]+\.h" \
            "a private guard/ header outside guard/ and tests/: use include/baton/ (add what is missing there)"
    else
        report "$dir" "${INC}guard/" \
            "a private guard/ header outside guard/ and tests/: use include/baton/ (add what is missing there)"
    fi
done
report include "${INC}(base|common|endpoints|src)/" "the public headers include only baton/"
report base "${INC}(common|endpoints|src)/" "base/ is below every other layer: it includes only base/ and baton/"

if [[ "$fail" -ne 0 ]]; then exit 1; fi
echo "the public edge holds: guard/ headers only in guard/ and tests/ (guard/redis/ also in src/, endpoints/)"
