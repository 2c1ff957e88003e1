#!/bin/bash
# Emulates the mariadb:10.11 image's entrypoint (docker-library/mariadb) for
# what docker/compose.yml uses:
# - a command starting with "-" is flags for mariadbd;
# - mariadbd runs as user mysql;
# - on first start (no $DATADIR/mysql): mariadb-install-db, a temporary
#   server (--skip-networking, on the socket, same flags), root's password
#   from MARIADB_ROOT_PASSWORD[_FILE] for root@localhost and root@'%'
#   (MARIADB_ROOT_HOST), healthcheck@{127.0.0.1,::1,localhost} with a
#   generated password in $DATADIR/.my-healthcheck.cnf, MARIADB_DATABASE,
#   MARIADB_USER/MARIADB_PASSWORD, then /docker-entrypoint-initdb.d/*
#   (*.sh executed when executable, else sourced; *.sql[.gz|.xz|.zst] fed
#   to the client), then the temporary server is stopped;
# - then exec the real server (bind-address is commented out of the
#   distribution's configuration: it listens on 0.0.0.0:3306).
# The temporary server gets --skip-ssl only (Debian's build refuses the
# official image's extra --ssl-cert='' --ssl-key='' --ssl-ca='').
# Not emulated: time zone tables (MARIADB_INITDB_SKIP_TZINFO is implied),
# MARIADB_AUTO_UPGRADE, MARIADB_REPLICATION_*, Galera.
set -eo pipefail
shopt -s nullglob

mysql_log() {
  local type="$1"; shift
  printf '%s [%s] [Entrypoint]: %s\n' "$(date --rfc-3339=seconds)" "$type" "$*"
}
mysql_note() { mysql_log Note "$@"; }
mysql_warn() { mysql_log Warn "$@" >&2; }
mysql_error() { mysql_log ERROR "$@" >&2; exit 1; }

# file_env VAR [DEFAULT]: VAR or VAR_FILE (not both), MYSQL_* aliases for MARIADB_*
file_env() {
  local var="$1" def="${2:-}" mysqlVar="${1/#MARIADB_/MYSQL_}"
  local fileVar="${var}_FILE" mysqlFileVar="${mysqlVar}_FILE"
  local val="$def"
  if [ -n "${!var:-}" ] && [ -n "${!fileVar:-}" ]; then
    mysql_error "both $var and $fileVar are set (but are exclusive)"
  fi
  if [ -n "${!var:-}" ]; then val="${!var}"
  elif [ -n "${!fileVar:-}" ]; then val="$(< "${!fileVar}")"
  elif [ -n "${!mysqlVar:-}" ]; then val="${!mysqlVar}"
  elif [ -n "${!mysqlFileVar:-}" ]; then val="$(< "${!mysqlFileVar}")"
  fi
  export "$var"="$val"
  unset "$fileVar" "$mysqlFileVar"
}

mysql_get_config() {
  local conf="$1"; shift
  "$@" --verbose --help 2>/dev/null \
    | awk -v conf="$conf" '$1 == conf && /^[^ \t]/ { sub(/^[^ \t]+[ \t]+/, ""); print; exit }'
}

docker_setup_env() {
  declare -g DATADIR SOCKET PORT
  DATADIR="$(mysql_get_config 'datadir' "$@")"; DATADIR="${DATADIR%/}"
  SOCKET="$(mysql_get_config 'socket' "$@")"
  PORT="$(mysql_get_config 'port' "$@")"
  file_env MARIADB_ROOT_HOST '%'
  file_env MARIADB_DATABASE
  file_env MARIADB_USER
  file_env MARIADB_PASSWORD
  file_env MARIADB_ROOT_PASSWORD
  file_env MARIADB_ALLOW_EMPTY_ROOT_PASSWORD
  file_env MARIADB_RANDOM_ROOT_PASSWORD
  declare -g DATABASE_ALREADY_EXISTS=
  if [ -d "$DATADIR/mysql" ]; then DATABASE_ALREADY_EXISTS=true; fi
}

docker_create_db_directories() {
  mkdir -p "$DATADIR"
  if [ "$(id -u)" = 0 ]; then
    find "$DATADIR" \! -user mysql -exec chown mysql: '{}' +
    [ -z "$SOCKET" ] || { mkdir -p "${SOCKET%/*}"; chown mysql: "${SOCKET%/*}"; }
  fi
}

docker_verify_minimum_env() {
  if [ -z "$MARIADB_ROOT_PASSWORD" ] && [ -z "$MARIADB_ALLOW_EMPTY_ROOT_PASSWORD" ] \
     && [ -z "$MARIADB_RANDOM_ROOT_PASSWORD" ]; then
    mysql_error $'Database is uninitialized and password option is not specified\n\tYou need to specify one of MARIADB_ROOT_PASSWORD, MARIADB_ROOT_PASSWORD_FILE, MARIADB_ALLOW_EMPTY_ROOT_PASSWORD and MARIADB_RANDOM_ROOT_PASSWORD'
  fi
}

docker_exec_client() {
  # args given later override this database
  if [ -n "$MYSQL_DATABASE" ]; then set -- --database="$MYSQL_DATABASE" "$@"; fi
  mariadb --protocol=socket -uroot -hlocalhost --socket="$SOCKET" "$@"
}

# docker_process_sql [--dont-use-mysql-root-password] [client args] < SQL
docker_process_sql() {
  if [ '--dont-use-mysql-root-password' = "${1:-}" ]; then
    shift
    MYSQL_PWD='' docker_exec_client "$@"
  else
    MYSQL_PWD="$MARIADB_ROOT_PASSWORD" docker_exec_client "$@"
  fi
}

docker_sql_escape_string_literal() {
  local newline=$'\n' escaped="${1//\\/\\\\}"
  escaped="${escaped//$newline/\\n}"
  echo "${escaped//\'/\\\'}"
}

docker_init_database_dir() {
  mysql_note "Initializing database files"
  mariadb-install-db --datadir="$DATADIR" --rpm --auth-root-authentication-method=normal \
    "${@:2}" \
    --skip-test-db --old-mode='UTF8_IS_UTF8MB3' --default-time-zone=SYSTEM \
    --enforce-storage-engine= --skip-log-bin --expire-logs-days=0 \
    --loose-innodb_buffer_pool_load_at_startup=0 \
    --loose-innodb_buffer_pool_dump_at_shutdown=0 \
    --cross-bootstrap
  mysql_note "Database files initialized"
}

docker_temp_server_start() {
  "$@" --skip-networking --default-time-zone=SYSTEM --socket="$SOCKET" --wsrep_on=OFF \
    --expire-logs-days=0 --skip-slave-start \
    --loose-innodb_buffer_pool_load_at_startup=0 \
    --skip-ssl &
  declare -g MARIADB_PID=$!
  mysql_note "Waiting for server startup"
  local extra=() i
  [ -n "$DATABASE_ALREADY_EXISTS" ] || extra=(--dont-use-mysql-root-password)
  for i in {30..0}; do
    if docker_process_sql "${extra[@]}" --database=mysql <<<'SELECT 1' &>/dev/null; then break; fi
    kill -0 "$MARIADB_PID" 2>/dev/null || mysql_error "Unable to start server."
    sleep 1
  done
  [ "$i" != 0 ] || mysql_error "Unable to start server."
}

docker_temp_server_stop() {
  kill "$MARIADB_PID"
  wait "$MARIADB_PID"
}

create_healthcheck_users() {
  local pw host
  pw="$(tr -dc 'A-Za-z0-9' < /dev/urandom | head -c 32 || true)"
  for host in 127.0.0.1 ::1 localhost; do
    echo "CREATE USER IF NOT EXISTS healthcheck@'$host' IDENTIFIED BY '$pw';"
    echo "GRANT USAGE ON *.* TO healthcheck@'$host';"
  done
  (umask 0077
   printf '[mariadb-client]\nport=%s\nsocket=%s\nuser=healthcheck\npassword=%s\n' \
     "${PORT:-3306}" "$SOCKET" "$pw" > "$DATADIR/.my-healthcheck.cnf")
}

docker_setup_db() {
  if [ -n "$MARIADB_RANDOM_ROOT_PASSWORD" ]; then
    MARIADB_ROOT_PASSWORD="$(tr -dc 'A-Za-z0-9' < /dev/urandom | head -c 32 || true)"
    export MARIADB_ROOT_PASSWORD
    mysql_note "GENERATED ROOT PASSWORD: $MARIADB_ROOT_PASSWORD"
  fi
  local rootPw rootCreate= rootLocal= createDb= createUser= userGrants=
  rootPw="$(docker_sql_escape_string_literal "$MARIADB_ROOT_PASSWORD")"
  if [ -n "$MARIADB_ROOT_HOST" ] && [ "$MARIADB_ROOT_HOST" != localhost ]; then
    rootCreate="CREATE USER 'root'@'${MARIADB_ROOT_HOST}' IDENTIFIED BY '${rootPw}';
GRANT ALL ON *.* TO 'root'@'${MARIADB_ROOT_HOST}' WITH GRANT OPTION;
GRANT PROXY ON ''@'%' TO 'root'@'${MARIADB_ROOT_HOST}' WITH GRANT OPTION;"
  fi
  if [ -n "$MARIADB_ROOT_PASSWORD" ]; then
    rootLocal="SET PASSWORD FOR 'root'@'localhost'= PASSWORD('${rootPw}');"
  fi
  if [ -n "$MARIADB_DATABASE" ]; then
    mysql_note "Creating database ${MARIADB_DATABASE}"
    createDb="CREATE DATABASE IF NOT EXISTS \`${MARIADB_DATABASE//\`/\`\`}\`;"
  fi
  if [ -n "$MARIADB_USER" ] && [ -n "$MARIADB_PASSWORD" ]; then
    mysql_note "Creating user ${MARIADB_USER}"
    createUser="CREATE USER '$MARIADB_USER'@'%' IDENTIFIED BY '$(docker_sql_escape_string_literal "$MARIADB_PASSWORD")';"
    [ -z "$MARIADB_DATABASE" ] || userGrants="GRANT ALL ON \`${MARIADB_DATABASE//_/\\_}\`.* TO '$MARIADB_USER'@'%';"
  fi
  mysql_note "Securing system users (equivalent to running mysql_secure_installation)"
  docker_process_sql --dont-use-mysql-root-password --binary-mode <<-EOSQL
	SET @orig_sql_log_bin= @@SESSION.SQL_LOG_BIN;
	SET @@SESSION.SQL_LOG_BIN=0;
	SET @@SESSION.SQL_MODE=REPLACE(@@SESSION.SQL_MODE, 'NO_BACKSLASH_ESCAPES', '');
	DROP USER IF EXISTS root@'127.0.0.1', root@'::1';
	EXECUTE IMMEDIATE CONCAT('DROP USER IF EXISTS root@\'', @@hostname,'\'');
	${rootLocal}
	${rootCreate}
	$(create_healthcheck_users)
	SET @@SESSION.SQL_LOG_BIN=@orig_sql_log_bin;
	${createDb}
	${createUser}
	${userGrants}
	EOSQL
}

docker_process_init_files() {
  echo
  local f
  for f; do
    case "$f" in
      *.sh)
        if [ -x "$f" ]; then mysql_note "$0: running $f"; "$f"
        else mysql_note "$0: sourcing $f"; . "$f"; fi ;;
      *.sql)     mysql_note "$0: running $f"; docker_process_sql < "$f"; echo ;;
      *.sql.gz)  mysql_note "$0: running $f"; gunzip -c "$f" | docker_process_sql; echo ;;
      *.sql.xz)  mysql_note "$0: running $f"; xzcat "$f" | docker_process_sql; echo ;;
      *.sql.zst) mysql_note "$0: running $f"; zstd -dc "$f" | docker_process_sql; echo ;;
      *)         mysql_warn "$0: ignoring $f" ;;
    esac
  done
}

docker_mariadb_init() {
  docker_init_database_dir "$@"
  mysql_note "Starting temporary server"
  docker_temp_server_start "$@"
  mysql_note "Temporary server started."
  docker_setup_db
  docker_process_init_files /docker-entrypoint-initdb.d/*
  mysql_note "Stopping temporary server"
  docker_temp_server_stop
  mysql_note "Temporary server stopped"
  echo
  mysql_note "MariaDB init process done. Ready for start up."
  echo
}

_main() {
  if [ "${1:0:1}" = '-' ]; then set -- mariadbd "$@"; fi
  if [ "$1" = mariadbd ] || [ "$1" = mysqld ]; then
    local arg
    for arg; do
      case "$arg" in -'?'|--help|--print-defaults|-V|--version) exec "$@" ;; esac
    done
    mysql_note "Entrypoint script for MariaDB Server $(mariadbd --version | awk '{print $3}') started."
    docker_setup_env "$@"
    docker_create_db_directories
    if [ "$(id -u)" = 0 ]; then
      mysql_note "Switching to dedicated user 'mysql'"
      exec setpriv --reuid=mysql --regid=mysql --init-groups "${BASH_SOURCE[0]}" "$@"
    fi
    if [ -z "$DATABASE_ALREADY_EXISTS" ]; then
      docker_verify_minimum_env
      docker_mariadb_init "$@"
    fi
  fi
  exec "$@"
}

_main "$@"
