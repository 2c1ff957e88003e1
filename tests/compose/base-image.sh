#!/usr/bin/env bash
# Makes the Debian 12 base image the compose test builds every image FROM,
# offline (no container registry is reachable on the CI machines):
# debootstrap --variant=minbase from the Debian mirror apt already uses,
# imported with `docker import`. Cached by its tag: does nothing when the
# image exists.
#   bash tests/compose/base-image.sh [TAG]      (default baton-ci/debian:bookworm)
set -euo pipefail
TAG="${1:-baton-ci/debian:bookworm}"
if docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "base image $TAG: present"
  exit 0
fi
command -v debootstrap >/dev/null || apt-get install -y --no-install-recommends debootstrap >/dev/null
# the mirror apt uses (deb822 sources first, then the one-line format)
MIRROR="$(sed -n 's/^URIs: *\([^ ]*debian\)\/\{0,1\} *$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)"
[ -n "$MIRROR" ] || MIRROR="$(awk '$1 == "deb" && $2 ~ /debian\/?$/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null)"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
DIR="$(mktemp -d /var/tmp/baton-base.XXXXXX)"
cleanup() {
  for m in proc sys dev/pts dev; do umount "$DIR/$m" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT
echo "base image $TAG: debootstrap bookworm from $MIRROR"
debootstrap --variant=minbase bookworm "$DIR" "$MIRROR" >"$DIR.log" 2>&1 || { tail -20 "$DIR.log"; exit 1; }
rm -f "$DIR.log"
# as debian:12-slim: no services started by package scripts, no docs, and
# the host's apt sources (updates and security included)
printf '#!/bin/sh\nexit 101\n' >"$DIR/usr/sbin/policy-rc.d"
chmod +x "$DIR/usr/sbin/policy-rc.d"
cat >"$DIR/etc/dpkg/dpkg.cfg.d/docker-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
CFG
# apt keeps no package files nor caches in image layers (debian images' docker-clean)
cat >"$DIR/etc/apt/apt.conf.d/docker-clean" <<'CFG'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CFG
find "$DIR/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
rm -rf "$DIR"/usr/share/man/* "$DIR"/usr/share/info/* "$DIR"/usr/share/locale/*
if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
  rm -f "$DIR/etc/apt/sources.list"
  cp /etc/apt/sources.list.d/*.sources "$DIR/etc/apt/sources.list.d/"
fi
rm -rf "$DIR"/var/lib/apt/lists/* "$DIR"/var/cache/apt/*.bin "$DIR"/var/cache/apt/archives/*.deb \
  "$DIR"/var/log/*.log "$DIR"/var/cache/debconf/*-old
for m in proc sys dev/pts dev; do umount "$DIR/$m" 2>/dev/null || true; done
tar -C "$DIR" --numeric-owner --exclude='./proc/*' --exclude='./sys/*' --exclude='./dev/*' -c . |
  docker import --change 'CMD ["bash"]' - "$TAG" >/dev/null
echo "base image $TAG: imported ($(docker image inspect -f '{{.Size}}' "$TAG" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
