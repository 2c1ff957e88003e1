#!/bin/bash
# Emits one numbered message per round on every source baton consumes in the
# compose stack, and logs which ones the broker took:
#   published 17: orders events sensors shop
# PUBLISH_INTERVAL: seconds between rounds (default 1).
set -u
PW="$(cat "$MYSQL_PWD_FILE")"
INTERVAL="${PUBLISH_INTERVAL:-1}"
trap 'exit 0' TERM INT
i=0
while true; do
  i=$((i + 1))
  ok=""
  # redis-cli prints the number of subscribers that got it; an error otherwise
  if n="$(redis-cli -h redis PUBLISH "orders.created" "order $i" 2>/dev/null)" && [[ "$n" =~ ^[0-9]+$ ]]; then
    ok="$ok orders"
  fi
  amqp-publish --url "amqp://baton:${RABBITMQ_PASSWORD}@rabbitmq:5672" -e events -r "" -b "event $i" 2>/dev/null &&
    ok="$ok events"
  mosquitto_pub -h mosquitto -t "sensors/room1/temp" -q 1 -m "reading $i" 2>/dev/null && ok="$ok sensors"
  mariadb -h mariadb -uroot -p"$PW" shop -e "INSERT INTO orders (item, qty, created) VALUES ('item-$i', $i, NOW())" \
    2>/dev/null && ok="$ok shop"
  echo "published $i:$ok"
  sleep "$INTERVAL" &
  wait $!
done
