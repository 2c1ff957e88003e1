#!/bin/bash
# Emits one message per second on every source baton consumes in the demo.
set -u
PW="$(cat "$MYSQL_PWD_FILE")"
i=0
while true; do
  i=$((i + 1))
  redis-cli -h redis PUBLISH "orders.created" "order $i" >/dev/null
  amqp-publish --url "amqp://baton:${RABBITMQ_PASSWORD}@rabbitmq:5672" -e events -r "" -b "event $i" || true
  mosquitto_pub -h mosquitto -t "sensors/room1/temp" -q 1 -m "reading $i" || true
  mariadb -h mariadb -uroot -p"$PW" shop -e "INSERT INTO orders (item, qty, created) VALUES ('item-$i', $i, NOW())" || true
  sleep 1
done
