#!/usr/bin/env bash
# Installs what baton needs on Debian 12, by purpose; each purpose adds one
# list to the ones before it:
#
#   bash .ci/deps.sh --build  build baton (and its .deb: packaging/build-deb.sh)
#   bash .ci/deps.sh --demo   + run the demo (config/demo/run.sh)
#   bash .ci/deps.sh          + the test suite (tests/run.sh)
#   bash .ci/deps.sh --ci     + what only .ci/run uses (valgrind, fuzzing, spin)
#   add --list to print the packages instead of installing them
#
# Idempotent: does nothing when every package is already installed.
set -euo pipefail

# Building baton (CMakeLists.txt). The Debian packages (packaging/build-deb.sh)
# need dpkg-dev and file besides (in TESTS below).
BUILD=(
  build-essential cmake pkg-config
  libhiredis-dev librabbitmq-dev libmariadb-dev libpaho-mqtt-dev libconfig-dev
  libsystemd-dev
  libcurl4-openssl-dev  # headers; the HTTP sink and the etcd locker load libcurl.so.4 on first use
  libjson-c-dev         # the etcd locker parses etcd's JSON gateway answers
  libssl-dev            # Redis TLS: the OpenSSL bridge (redis/tls.c)
  libpq-dev             # headers; the postgresql sink loads libpq.so.5 on first use
)
# Running the demo: config/demo/demo.py starts these brokers itself.
DEMO=(
  python3 procps
  redis-server redis-tools
  mosquitto mosquitto-clients
  rabbitmq-server
  mariadb-server mariadb-client
)
# The test suite only (unit, integration, chaos).
TESTS=(
  libcmocka-dev      # unit tests
  libmicrohttpd-dev  # only the HTTP sink test's server; baton has its own listener
  iproute2           # test_partition.py: network namespaces (ip netns)
  openssl            # TLS certificates for the broker tests (tests/integration/lib/tlsfiles.py)
  docker-compose     # test_ops.py validates docker/compose.yml
  git                # bench/run names its results after the commit
  etcd-server etcd-client  # the etcd locker's tests start their own members
  redis-sentinel           # the Sentinel tests start their own sentinels
  systemd binutils         # test_install.py: systemd-analyze verify, readelf/nm on the library
  dpkg-dev file lintian    # test_deb.py: builds the .debs (dpkg-shlibdeps; cpack runs file), checks them with lintian
  groff-base               # test_reference.py: the man pages render without warnings
  postgresql               # the postgresql sink's tests start their own PostgreSQL 15
)
# .ci/run only: valgrind on the unit tests, the libFuzzer targets (clang),
# the lease model (spin, guard/model/run.sh).
CI=(
  valgrind
  clang libclang-rt-14-dev
  spin
)

purpose=tests
list_only=false
for a in "$@"; do
  case "$a" in
    --build) purpose=build ;;
    --demo) purpose=demo ;;
    --ci) purpose=ci ;;
    --list) list_only=true ;;
    *) echo "usage: $0 [--build | --demo | --ci] [--list]" >&2; exit 64 ;;
  esac
done
PACKAGES=("${BUILD[@]}")
case "$purpose" in
  demo) PACKAGES+=("${DEMO[@]}") ;;
  tests) PACKAGES+=("${DEMO[@]}" "${TESTS[@]}") ;;
  ci) PACKAGES+=("${DEMO[@]}" "${TESTS[@]}" "${CI[@]}") ;;
esac
if $list_only; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "deps ($purpose): installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Brokers must not be started by the package scripts: the demo and the tests
# start their own.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
