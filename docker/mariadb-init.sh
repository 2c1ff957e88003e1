#!/bin/bash
# Creates the replication user baton's mysql_cdc endpoint connects as.
set -e
REPL_PW="${MYSQL_CDC_PASSWORD:?}"
mariadb -uroot -p"$(cat /run/secrets/mysql_root_password)" <<SQL
CREATE USER IF NOT EXISTS 'baton'@'%' IDENTIFIED BY '${REPL_PW}';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'baton'@'%';
CREATE TABLE IF NOT EXISTS shop.orders (id INT AUTO_INCREMENT PRIMARY KEY, item VARCHAR(64), qty INT, created DATETIME);
FLUSH PRIVILEGES;
SQL
