#!/usr/bin/env bash
# Builds the Debian packages of baton (packaging/cpack.cmake):
#
#   bash packaging/build-deb.sh [OUTDIR]
#
# configures a fresh build directory (OUTDIR/build; BATON_DEB_BUILD_DIR
# names another, e.g. a cached one: it is reused as it is), builds baton
# and libbaton-guard (RelWithDebInfo with Debian's hardening flags, prefix
# /usr, no tests), runs `cpack -G DEB` and leaves baton_*.deb,
# libbaton-guard1_*.deb and libbaton-guard-dev_*.deb in OUTDIR (default
# build-deb/), printing their paths; each step's output is in
# OUTDIR/build-deb.log. Needs the BUILD packages (bash .ci/deps.sh --build),
# dpkg-dev (dpkg-shlibdeps computes the Depends lines) and file (cpack runs
# it).
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-build-deb}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD="${BATON_DEB_BUILD_DIR:-$OUT/build}"
JOBS="${BATON_JOBS:-$(nproc 2>/dev/null || echo 2)}"

for tool in cmake cpack dpkg-shlibdeps dpkg-buildflags dpkg-deb file; do
  if ! command -v "$tool" >/dev/null; then
    echo "build-deb: $tool not found (Debian: bash .ci/deps.sh --build, then apt-get install dpkg-dev file)" >&2
    exit 69
  fi
done

# each step's output in OUT/build-deb.log, shown when the step fails
LOG="$OUT/build-deb.log"
: >"$LOG"
step() {
  if ! "$@" >>"$LOG" 2>&1; then
    echo "build-deb: failed: $*" >&2
    tail -n 40 "$LOG" >&2
    exit 1
  fi
}
# Debian's build flags with every hardening feature (dpkg-buildflags,
# hardening=+all): stack protector, _FORTIFY_SOURCE, format-security, full
# RELRO and bind-now; given on each configure, so a reused build directory
# gets them too
flags() { (cd "$SRC" && DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --get "$1"); }
CFLAGS_DEB="$(flags CFLAGS) $(flags CPPFLAGS)"
LDFLAGS_DEB="$(flags LDFLAGS)"
step cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
  -DBATON_TESTS=OFF -DCMAKE_C_FLAGS="$CFLAGS_DEB" -DCMAKE_EXE_LINKER_FLAGS="$LDFLAGS_DEB" \
  -DCMAKE_SHARED_LINKER_FLAGS="$LDFLAGS_DEB"
step cmake --build "$BUILD" -j"$JOBS"
rm -f "$BUILD"/*.deb
step cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$BUILD"
rm -f "$OUT"/baton_*.deb "$OUT"/libbaton-guard*.deb
for deb in "$BUILD"/*.deb; do
  cp "$deb" "$OUT/"
  echo "$OUT/$(basename "$deb")"
done
