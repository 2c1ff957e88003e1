#!/bin/bash
# As the rabbitmq:3.10 entrypoint, for what docker/compose.yml uses:
# RABBITMQ_DEFAULT_USER / RABBITMQ_DEFAULT_PASS (/ RABBITMQ_DEFAULT_VHOST)
# make the user created on first boot (administrator, all permissions on
# the vhost; not loopback-only), and a per-container Erlang cookie is made
# on first start (readable by user rabbitmq only; the CLI reads the same
# file through HOME=/var/lib/rabbitmq). rabbitmq-server is exec'ed: its
# script stays PID 1, traps SIGTERM and stops the Erlang VM (its child)
# cleanly.
set -euo pipefail
cookie="$HOME/.erlang.cookie"
if [ -n "${RABBITMQ_ERLANG_COOKIE:-}" ]; then
  umask 077; rm -f "$cookie"; printf '%s' "$RABBITMQ_ERLANG_COOKIE" > "$cookie"; chmod 400 "$cookie"
  unset RABBITMQ_ERLANG_COOKIE
elif [ ! -s "$cookie" ]; then
  umask 077; rm -f "$cookie"
  tr -dc 'A-Z' < /dev/urandom | head -c 32 > "$cookie" || true
  chmod 400 "$cookie"
fi
umask 022
conf=/etc/rabbitmq/conf.d/20-default-user.conf
if [ -n "${RABBITMQ_DEFAULT_USER:-}${RABBITMQ_DEFAULT_PASS:-}${RABBITMQ_DEFAULT_VHOST:-}" ]; then
  {
    [ -z "${RABBITMQ_DEFAULT_USER:-}" ]  || echo "default_user = $RABBITMQ_DEFAULT_USER"
    [ -z "${RABBITMQ_DEFAULT_PASS:-}" ]  || echo "default_pass = $RABBITMQ_DEFAULT_PASS"
    [ -z "${RABBITMQ_DEFAULT_VHOST:-}" ] || echo "default_vhost = $RABBITMQ_DEFAULT_VHOST"
    echo "default_user_tags.administrator = true"
    echo "default_permissions.configure = .*"
    echo "default_permissions.read = .*"
    echo "default_permissions.write = .*"
  } > "$conf"
else
  rm -f "$conf"
fi
exec "$@"
