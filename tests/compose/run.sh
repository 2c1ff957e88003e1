#!/usr/bin/env bash
# The compose stack, run for real: builds baton's image from docker/Dockerfile
# and the brokers' stand-ins (docker/ci-images/, Debian packages: no
# registry is reachable here) through docker/compose.ci.yml, brings
# docker/compose.yml up with them, and runs tests/compose/check.py's
# scenarios (steady traffic, SIGKILL of a leader, a network cut, a Redis
# restart, a rolling restart). .ci/run runs it; by hand, as root:
#
#   bash tests/compose/run.sh
#
# It installs docker.io, docker-compose and debootstrap when missing, starts
# dockerd when none answers (and stops only the one it started), makes the
# offline base image once (tests/compose/base-image.sh, kept by its tag),
# and at the end takes the stack down (down -v) and removes the images it
# built, unless BATON_COMPOSE_KEEP=1. Bounded: BATON_COMPOSE_TIMEOUT seconds
# (default 480) for the whole run. A machine that cannot run dockerd fails
# here, loudly, with dockerd's own words: never a skip.
#
# Two phases, for .ci/run, which builds while the other stages run:
#   bash tests/compose/run.sh --build      tools, engine, base image, images;
#                                          leaves the engine and the images
#   bash tests/compose/run.sh --scenarios  the rest, with the images built by
#                                          --build (the engine --build started,
#                                          if it did, is stopped at the end)
# A dockerd --build starts inherits the caller's scheduling (.ci/run runs
# --build at idle priority, so image builds take only CPU no test wants);
# --scenarios puts the engine back on the normal policy before the stack
# starts, so the scenarios' containers run as in a plain run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export DEBIAN_FRONTEND=noninteractive
SECONDS=0
step() { echo "--- compose: $* (${SECONDS}s)"; }
TIMEOUT="${BATON_COMPOSE_TIMEOUT:-480}"
PHASE=all
case "${1:-}" in
  --build) PHASE=build ;;
  --scenarios) PHASE=scenarios ;;
  "") ;;
  *) echo "usage: $0 [--build|--scenarios]" >&2; exit 2 ;;
esac
# the dockerd a --build started, for the --scenarios after it to stop
STATE=/run/baton-compose-dockerd.pid
if [ -z "${BATON_COMPOSE_BOUNDED:-}" ]; then
  # the whole run, cleanup included, under one bound (timeout sends TERM;
  # the trap below still takes the stack down)
  BATON_COMPOSE_BOUNDED=1 exec timeout --kill-after=60 "$TIMEOUT" bash "$0" "$@"
fi

step "tools"
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

WORK="$(mktemp -d /tmp/baton-compose.XXXXXX)"
DOCKERD_PID=""
PROJECT="baton-ci"
COMPOSE=()
cleanup() {
  rc=$?
  set +e
  if [ "$PHASE" = build ] && [ "$rc" -eq 0 ]; then
    rm -rf "$WORK"  # the engine and the images stay for --scenarios
    echo "--- compose: images built after ${SECONDS}s"
    exit 0
  fi
  rm -f "$STATE"
  if [ ${#COMPOSE[@]} -gt 0 ]; then
    if [ "$rc" -ne 0 ]; then
      echo "--- compose: the stack's state and the last lines of each service's log"
      "${COMPOSE[@]}" ps
      "${COMPOSE[@]}" logs --no-color --tail=40
    fi
    if [ "${BATON_COMPOSE_KEEP:-0}" != 1 ]; then
      step "down -v, and the images this run built removed"
      "${COMPOSE[@]}" down -v --rmi local --remove-orphans >/dev/null 2>&1
      docker image rm -f baton:local baton-ci/redis:local baton-ci/rabbitmq:local baton-ci/mariadb:local \
        baton-ci/mosquitto:local baton-ci/python:local >/dev/null 2>&1
    fi
  fi
  if [ -n "$DOCKERD_PID" ]; then
    # the engine is this run's own: its dangling build layers go too
    [ "${BATON_COMPOSE_KEEP:-0}" = 1 ] || docker image prune -f >/dev/null 2>&1
    step "stopping the dockerd this run started"
    kill "$DOCKERD_PID" 2>/dev/null
    for _ in $(seq 1 30); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -rf "$WORK"
  echo "--- compose: exit $rc after ${SECONDS}s"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

step "docker engine"
if [ "$PHASE" = scenarios ]; then
  [ -s "$STATE" ] && DOCKERD_PID="$(cat "$STATE")"
  docker info >/dev/null 2>&1 || { echo "compose: no Docker engine answers (did --build run?)" >&2; exit 1; }
  # the engine of an idle-priority --build back on the normal policy: the
  # containers started from now on (the stack) run as in a plain run
  for p in $(pgrep -x dockerd) $(pgrep -x containerd); do chrt -o -a -p 0 "$p" >/dev/null || true; done
elif ! docker info >/dev/null 2>&1; then
  dockerd >"$WORK/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    kill -0 "$DOCKERD_PID" 2>/dev/null || break
    sleep 0.5
  done
  if ! docker info >/dev/null 2>&1; then
    echo "compose: dockerd did not come up on this machine; its log:" >&2
    tail -30 "$WORK/dockerd.log" >&2
    exit 1
  fi
  echo "dockerd started (pid $DOCKERD_PID): $(docker info -f '{{.ServerVersion}}, {{.Driver}}, cgroup v{{.CgroupVersion}}')"
  [ "$PHASE" = build ] && echo "$DOCKERD_PID" >"$STATE"
else
  echo "a Docker engine answers already: $(docker info -f '{{.ServerVersion}}')"
fi

if docker compose version >/dev/null 2>&1; then
  COMPOSE=(docker compose)
else
  COMPOSE=(docker-compose)
fi
COMPOSE+=(-p "$PROJECT" -f docker/compose.yml -f docker/compose.ci.yml)
echo "compose: ${COMPOSE[*]} ($("${COMPOSE[@]:0:${#COMPOSE[@]}-6}" version --short 2>/dev/null || true))"
export BATON_CI_BASE="baton-ci/debian:bookworm"
export PUBLISH_INTERVAL="${PUBLISH_INTERVAL:-0.25}"
"${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true  # a previous run's leftovers

if [ "$PHASE" != scenarios ]; then
  step "base image"
  bash tests/compose/base-image.sh "$BATON_CI_BASE"

  step "images: baton from docker/Dockerfile, the brokers' stand-ins (in parallel)"
  "${COMPOSE[@]}" build --parallel >"$WORK/build.log" 2>&1 || { tail -60 "$WORK/build.log"; exit 1; }
  docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^(baton|baton-ci/)' | sort
  [ "$PHASE" = build ] && exit 0
fi

step "up"
"${COMPOSE[@]}" up -d
healthy() {
  local s
  for s in redis rabbitmq mariadb mosquitto baton1 baton2 baton3; do
    [ "$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' \
          "$("${COMPOSE[@]}" ps -q "$s")" 2>/dev/null)" = healthy ] || return 1
  done
}
for _ in $(seq 1 120); do healthy && break; sleep 1; done
healthy || { echo "compose: the stack did not become healthy within 120 s" >&2; exit 1; }
step "healthy"

step "scenarios (tests/compose/check.py)"
BATON_COMPOSE="$(python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${COMPOSE[@]}")" \
  python3 tests/compose/check.py
