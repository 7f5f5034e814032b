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
}

# Stops the server (if it still runs) and deletes its directory. Safe to call more than once.
stagehand_pg_stop() {
  if [[ -z "${STAGEHAND_PG_TMP:-}" || ! -d "${STAGEHAND_PG_TMP}" ]]; then
    return 0
  fi
  local bin
  bin="$(stagehand_pg_bin_dir)" || true
  if [[ -n "${bin}" && -f "${STAGEHAND_PG_TMP}/data/postmaster.pid" ]]; then
    stagehand_pg_as_owner "${bin}/pg_ctl" -D "${STAGEHAND_PG_TMP}/data" -m immediate -w -t 30 \
      stop >/dev/null 2>&1 || true
  fi
  rm -rf "${STAGEHAND_PG_TMP}"
  STAGEHAND_PG_TMP=
}
