#!/usr/bin/env bash
# Installs everything baton needs to build, test and demo on Debian 12.
# Idempotent: does nothing when every package is already installed.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git python3 procps iproute2
  libhiredis-dev librabbitmq-dev libmariadb-dev libpaho-mqtt-dev libconfig-dev
  libcmocka-dev libcurl4-openssl-dev
  libmicrohttpd-dev  # only the HTTP sink test's server; baton has its own listener
  redis-server redis-tools rabbitmq-server mariadb-server mariadb-client
  mosquitto mosquitto-clients
  valgrind docker-compose
)

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
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Brokers must not be started by the package scripts: tests start their own.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
