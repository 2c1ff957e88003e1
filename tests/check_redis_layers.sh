#!/usr/bin/env bash
# Keeps the Redis connection unit (redis/) layered, bottom to top:
#
#   tls       the TLS bridge (OpenSSL; no hiredis)
#   io        the hiredis shim: connect step (plain, or TLS through tls),
#             bounded replies, reads, deadlines, commands, opts copy/clear
#   sentinel  Sentinel discovery and the +switch-master watcher (over io)
#   open      redis_conn_open(_ex): connect, AUTH, SELECT, ROLE, through the
#             sentinels when configured (over sentinel and io)
#
# A file of one layer may include only the layers below it (and its own
# header); tls includes no hiredis header; of the rest of guard/ the unit
# uses only BELOW (nothing now: the helpers and the logging callback it
# needs are in base/, below guard/), never a locker. A
# file in redis/ that is none of these fails too: place it in LAYERS
# first.
#
#   bash tests/check_redis_layers.sh [source dir]     (ctest: unit.redis_layers)
set -euo pipefail
ROOT="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
DIR="$ROOT/redis"
LAYERS=(tls io sentinel open)
BELOW=()

rank() {
    local i
    for i in "${!LAYERS[@]}"; do
        [[ "${LAYERS[$i]}" == "$1" ]] && { echo "$i"; return; }
    done
    echo -1
}

fail=0 seen=0
shopt -s nullglob
for f in "$DIR"/*.c "$DIR"/*.h; do
    seen=$((seen + 1))
    base="$(basename "$f")"
    name="${base%.*}"
    own="$(rank "$name")"
    if [[ "$own" -lt 0 ]]; then
        echo "redis/$base: not a known layer (${LAYERS[*]}): add it to LAYERS in $0" >&2
        fail=1
        continue
    fi
    # "redis/x.h" or "x.h"
    while IFS=: read -r line inc; do
        dep="$(sed -E 's@^#[[:space:]]*include[[:space:]]*"(redis/)?([a-z_]+)\.h".*@\2@' <<<"$inc")"
        r="$(rank "$dep")"
        if [[ "$r" -gt "$own" ]]; then
            echo "redis/$base:$line: $name includes $dep, a higher layer (${LAYERS[*]}, bottom first)" >&2
            fail=1
        fi
    done < <(grep -nE '^#[[:space:]]*include[[:space:]]*"(redis/)?[a-z_]+\.h"' "$f" || true)
    while IFS=: read -r line inc; do
        dep="$(sed -E 's@^#[[:space:]]*include[[:space:]]*"guard/([a-z_]+)\.h".*@\1@' <<<"$inc")"
        if [[ " ${BELOW[*]-} " != *" $dep "* ]]; then
            echo "redis/$base:$line: includes guard/$dep.h: of guard/ the unit uses only: ${BELOW[*]:-nothing (base/ is below it)}" >&2
            fail=1
        fi
    done < <(grep -nE '^#[[:space:]]*include[[:space:]]*"guard/[a-z_]+\.h"' "$f" || true)
    if [[ "$name" == tls ]] && grep -nE '^#[[:space:]]*include[[:space:]]*[<"]hiredis/' "$f" >&2; then
        echo "redis/$base: the TLS bridge includes hiredis (it sits below io)" >&2
        fail=1
    fi
done
if [[ "$seen" -eq 0 ]]; then
    echo "no files in $DIR: has the Redis connection unit moved? update this check" >&2
    exit 1
fi
if [[ "$fail" -ne 0 ]]; then exit 1; fi
echo "redis/: $seen files, layered ${LAYERS[*]} (bottom first)"
