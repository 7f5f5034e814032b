# Throwaway PostgreSQL for tests. Source this file, then call stagehand_pg_start; call
# stagehand_pg_stop from an EXIT trap. The server lives in a fresh temp dir, listens on
# 127.0.0.1 only, on a free port, and is deleted by stagehand_pg_stop.
#
# stagehand_pg_start exports:
#   STAGEHAND_TEST_POSTGRES_URL   postgresql://stagehand:stagehand@127.0.0.1:<port>/postgres
#   STAGEHAND_TEST_POSTGRES_PORT  the port
#   STAGEHAND_TEST_POSTGRES_DATA  the data directory
#   STAGEHAND_TEST_POSTGRES_LOG   the server log file
#   STAGEHAND_TEST_PG_CTL         the command prefix that runs pg_ctl as the right user, so tests
#                                 can stop and restart the server:
#     $STAGEHAND_TEST_PG_CTL -D "$STAGEHAND_TEST_POSTGRES_DATA" -l "$STAGEHAND_TEST_POSTGRES_LOG" -w restart
#   STAGEHAND_TEST_PG_BIN         the PostgreSQL bin directory (psql, pgbench, ...)
# The role `stagehand` (password `stagehand`) is a superuser; pg_stat_statements is preloaded and
# created in the `postgres` database.
#
# When pgbouncer is installed, two PgBouncers in front of the server (every database, the same
# role) are started too, and stopped with it:
#   STAGEHAND_TEST_PGBOUNCER_TRANSACTION_URL  through PgBouncer in pool_mode=transaction
#   STAGEHAND_TEST_PGBOUNCER_SESSION_URL      through PgBouncer in pool_mode=session
# (each postgresql://stagehand:stagehand@127.0.0.1:<its port>/postgres).

stagehand_pg_bin_dir() {
  if [[ -n "${STAGEHAND_PG_BIN:-}" ]]; then
    echo "${STAGEHAND_PG_BIN}"
    return
  fi
  local dir=/usr/lib/postgresql/15/bin
  if [[ ! -x "${dir}/initdb" ]]; then
    dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
  fi
  if [[ -z "${dir}" || ! -x "${dir}/initdb" ]]; then
    echo "postgres.sh: no PostgreSQL server found under /usr/lib/postgresql (run scripts/bootstrap)" >&2
    return 1
  fi
  echo "${dir}"
}

stagehand_pg_free_port() {
  python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

# Runs its arguments as the user that owns the server: `postgres` when we are root (initdb and
# postgres refuse to run as root), ourselves otherwise.
stagehand_pg_as_owner() {
  if ((EUID == 0)); then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

stagehand_pg_start() {
  local bin
  bin="$(stagehand_pg_bin_dir)" || return 1
  STAGEHAND_PG_TMP="$(mktemp -d /tmp/stagehand-pg.XXXXXX)"
  local data="${STAGEHAND_PG_TMP}/data"
  local log="${STAGEHAND_PG_TMP}/server.log"
  local sock="${STAGEHAND_PG_TMP}/socket"
  local pwfile="${STAGEHAND_PG_TMP}/pwfile"
  mkdir -p "${sock}"
  echo stagehand >"${pwfile}"
  if ((EUID == 0)); then
    chown -R postgres:postgres "${STAGEHAND_PG_TMP}"
  fi

  if ! stagehand_pg_as_owner "${bin}/initdb" -D "${data}" -U stagehand --pwfile="${pwfile}" \
      --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 \
      >"${STAGEHAND_PG_TMP}/initdb.log" 2>&1; then
    echo "postgres.sh: initdb failed:" >&2
    cat "${STAGEHAND_PG_TMP}/initdb.log" >&2
    return 1
  fi

  local port attempt
  for attempt in 1 2 3 4 5; do
    port="$(stagehand_pg_free_port)"
    cat >"${data}/postgresql.auto.conf" <<CONF
listen_addresses = '127.0.0.1'
port = ${port}
unix_socket_directories = '${sock}'
shared_preload_libraries = 'pg_stat_statements'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
log_min_messages = warning
log_line_prefix = '%m [%p] '
CONF
    if ((EUID == 0)); then
      chown postgres:postgres "${data}/postgresql.auto.conf"
    fi
    if stagehand_pg_as_owner "${bin}/pg_ctl" -D "${data}" -l "${log}" -w -t 60 start >/dev/null; then
      break
    fi
    if ((attempt == 5)); then
      echo "postgres.sh: the server did not start; its log:" >&2
      cat "${log}" >&2 || true
      return 1
    fi
  done

  local tries=0
  until "${bin}/pg_isready" -q -h 127.0.0.1 -p "${port}"; do
    tries=$((tries + 1))
    if ((tries > 100)); then
      echo "postgres.sh: the server is not ready after 10 s" >&2
      return 1
    fi
    sleep 0.1
  done

  export STAGEHAND_TEST_POSTGRES_URL="postgresql://stagehand:stagehand@127.0.0.1:${port}/postgres"
  export STAGEHAND_TEST_POSTGRES_PORT="${port}"
  export STAGEHAND_TEST_POSTGRES_DATA="${data}"
  export STAGEHAND_TEST_POSTGRES_LOG="${log}"
  export STAGEHAND_TEST_PG_BIN="${bin}"
  if ((EUID == 0)); then
    export STAGEHAND_TEST_PG_CTL="runuser -u postgres -- ${bin}/pg_ctl"
  else
    export STAGEHAND_TEST_PG_CTL="${bin}/pg_ctl"
  fi

  PGPASSWORD=stagehand "${bin}/psql" -q -X -v ON_ERROR_STOP=1 "${STAGEHAND_TEST_POSTGRES_URL}" \
    -c 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements' >/dev/null || return 1
  echo "postgres.sh: PostgreSQL $("${bin}/postgres" --version | awk '{print $3}') on 127.0.0.1:${port}"
  if command -v pgbouncer >/dev/null; then
    stagehand_pgbouncer_start transaction || return 1
    stagehand_pgbouncer_start session || return 1
  fi
}

# Starts a PgBouncer in pool mode $1 (transaction or session) in front of the server, as the
# server's owner (PgBouncer refuses to run as root), and exports its URL (see above).
stagehand_pgbouncer_start() {
  local mode="$1"
  local dir="${STAGEHAND_PG_TMP}/pgbouncer-${mode}"
  mkdir -p "${dir}"
  echo '"stagehand" "stagehand"' >"${dir}/userlist.txt"
  local pool_size=10 user_connections=40
  if [[ "${mode}" == session ]]; then
    pool_size=50
    user_connections=80
  fi
  local port attempt ready
  for attempt in 1 2 3 4 5; do
    port="$(stagehand_pg_free_port)"
    cat >"${dir}/pgbouncer.ini" <<CONF
[databases]
* = host=127.0.0.1 port=${STAGEHAND_TEST_POSTGRES_PORT}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = ${dir}/userlist.txt
pool_mode = ${mode}
max_client_conn = 1000
; Every test makes its own database: keep the server sessions of all of them under the server's
; max_connections (idle ones go after 2 s, and are evicted for a database that needs one). In
; session mode each client holds a server session: a test's eight hosts need more than ten.
default_pool_size = ${pool_size}
max_user_connections = ${user_connections}
server_idle_timeout = 2
autodb_idle_timeout = 10
server_lifetime = 3600
; A login the server refused (a database not created yet) is retried after this, not 15 s.
server_login_retry = 0.1
logfile = ${dir}/pgbouncer.log
pidfile = ${dir}/pgbouncer.pid
admin_users = stagehand
CONF
    if ((EUID == 0)); then
      chown -R postgres:postgres "${dir}"
    fi
    stagehand_pg_as_owner pgbouncer -d -q "${dir}/pgbouncer.ini" || true
    ready=0
    for _ in $(seq 1 50); do
      if PGPASSWORD=stagehand "${STAGEHAND_TEST_PG_BIN}/psql" -q -X -At \
          "postgresql://stagehand@127.0.0.1:${port}/postgres" -c 'SELECT 1' >/dev/null 2>&1; then
        ready=1
        break
      fi
      sleep 0.1
    done
    if ((ready == 1)); then
      break
    fi
    [[ -f "${dir}/pgbouncer.pid" ]] && kill "$(cat "${dir}/pgbouncer.pid")" 2>/dev/null || true
    if ((attempt == 5)); then
      echo "postgres.sh: PgBouncer (${mode}) did not start; its log:" >&2
      cat "${dir}/pgbouncer.log" >&2 || true
      return 1
    fi
  done
  local url="postgresql://stagehand:stagehand@127.0.0.1:${port}/postgres"
  if [[ "${mode}" == transaction ]]; then
    export STAGEHAND_TEST_PGBOUNCER_TRANSACTION_URL="${url}"
  else
    export STAGEHAND_TEST_PGBOUNCER_SESSION_URL="${url}"
  fi
  echo "postgres.sh: PgBouncer $(pgbouncer --version | awk 'NR==1{print $2}') (${mode}) on 127.0.0.1:${port}"
}

# Stops the server (if it still runs) and deletes its directory. Safe to call more than once.
stagehand_pg_stop() {
  if [[ -z "${STAGEHAND_PG_TMP:-}" || ! -d "${STAGEHAND_PG_TMP}" ]]; then
    return 0
  fi
  local pidfile
  for pidfile in "${STAGEHAND_PG_TMP}"/pgbouncer-*/pgbouncer.pid; do
    [[ -f "${pidfile}" ]] && kill "$(cat "${pidfile}")" 2>/dev/null || true
  done
  local bin
  bin="$(stagehand_pg_bin_dir)" || true
  if [[ -n "${bin}" && -f "${STAGEHAND_PG_TMP}/data/postmaster.pid" ]]; then
    stagehand_pg_as_owner "${bin}/pg_ctl" -D "${STAGEHAND_PG_TMP}/data" -m immediate -w -t 30 \
      stop >/dev/null 2>&1 || true
  fi
  rm -rf "${STAGEHAND_PG_TMP}"
  STAGEHAND_PG_TMP=
}
