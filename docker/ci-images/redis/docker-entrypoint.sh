#!/bin/sh
# As the redis:7.0 entrypoint: flags alone or a .conf file mean redis-server;
# redis-server runs as user redis. The upstream binary is built with
# protected mode off and listens on every interface; Debian's is not, so
# the wrapper says so on the command line (later arguments win).
set -e
case "$1" in
  -*|*.conf) set -- redis-server "$@" ;;
esac
if [ "$1" = redis-server ]; then
  set -- "$@" --bind 0.0.0.0 --protected-mode no
  if [ "$(id -u)" = 0 ]; then
    find . \! -user redis -exec chown redis '{}' + 2>/dev/null || true
    exec setpriv --reuid=redis --regid=redis --init-groups "$@"
  fi
fi
exec "$@"
