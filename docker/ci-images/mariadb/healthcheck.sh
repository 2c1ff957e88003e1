#!/bin/bash
# Emulates the mariadb:10.11 image's healthcheck.sh for the tests
# docker/compose.yml uses. Every test given must pass (exit 0), else exit 1.
#   --connect              the server accepts a TCP connection on localhost
#                          (as upstream: any answer but "Can't connect")
#   --innodb_initialized   InnoDB is available
#   --innodb_buffer_pool_loaded  the buffer pool load at startup is complete
# Options: --datadir=DIR (default /var/lib/mysql, whose .my-healthcheck.cnf
# is the default --defaults-extra-file), --defaults-file=F,
# --defaults-extra-file=F, --defaults-group-suffix=S, --no-defaults,
# --su-mysql / --su=USER (accepted; the checks run as the caller).
set -eo pipefail
datadir=/var/lib/mysql
nodefaults= dfile= dextra= dsuffix= tests=()
for arg; do
  case "$arg" in
    --datadir=*) datadir="${arg#*=}" ;;
    --defaults-file=*) dfile="${arg#*=}" ;;
    --defaults-extra-file=*) dextra="${arg#*=}" ;;
    --defaults-group-suffix=*) dsuffix="${arg#*=}" ;;
    --no-defaults) nodefaults=1 ;;
    --su-mysql|--su=*) ;;
    --connect|--innodb_initialized|--innodb_buffer_pool_loaded) tests+=("${arg#--}") ;;
    *) echo "healthcheck.sh: unknown option or test $arg" >&2; exit 1 ;;
  esac
done
if [ -z "$dfile" ] && [ -z "$dextra" ] && [ -z "$nodefaults" ] && [ -r "$datadir/.my-healthcheck.cnf" ]; then
  dextra="$datadir/.my-healthcheck.cnf"
fi
client() {
  mariadb ${nodefaults:+--no-defaults} ${dfile:+--defaults-file=$dfile} \
    ${dextra:+--defaults-extra-file=$dextra} ${dsuffix:+--defaults-group-suffix=$dsuffix} "$@"
}
connect() {
  local out
  if out="$(client --skip-ssl -h localhost --protocol=tcp -e 'select 1' 2>&1)"; then return 0; fi
  ! grep -qF "Can't connect" <<<"$out"
}
innodb_initialized() {
  [ "$(client -B --skip-column-names -e "select 1 from information_schema.ENGINES WHERE engine='innodb' AND support in ('YES', 'DEFAULT', 'ENABLED')" 2>/dev/null)" = 1 ]
}
innodb_buffer_pool_loaded() {
  local s
  s="$(client -B --skip-column-names -e "select VARIABLE_VALUE from information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME='Innodb_buffer_pool_load_status'" 2>/dev/null)" || return 1
  [[ "$s" == 'Buffer pool(s) load completed'* ]]
}
[ "${#tests[@]}" -gt 0 ] || { echo "healthcheck.sh: no test given" >&2; exit 1; }
for t in "${tests[@]}"; do
  "$t" || { echo "healthcheck.sh: $t failed" >&2; exit 1; }
done
exit 0
