# Throwaway MariaDB for tests. Source this file, then call stagehand_mariadb_start; call
# stagehand_mariadb_stop from an EXIT trap. The server lives in a fresh temp dir, listens on
# 127.0.0.1 only, on a free port, and is deleted by stagehand_mariadb_stop.
#
# stagehand_mariadb_start exports:
#   STAGEHAND_TEST_MARIADB_URL     mysql://stagehand:stagehand@127.0.0.1:<port>
#   STAGEHAND_TEST_MARIADB_PORT    the port
#   STAGEHAND_TEST_MARIADB_SOCKET  the server's Unix socket (root connects through it)
#   STAGEHAND_TEST_MARIADB_LOG     the server's error log
#   STAGEHAND_TEST_MARIADB_PIDFILE the server's pid file (tests/system restarts the server by it)
# The user `stagehand`@`127.0.0.1` (password `stagehand`) has every privilege, as Backstage's
# database user needs to create one database per plugin. The server's character set is utf8mb4
# and its time zone UTC, as Debian's own configuration and Backstage's documentation set them.

stagehand_mariadb_free_port() {
  python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

# Runs its arguments as the user that owns the server: `mysql` when we are root, ourselves
# otherwise.
stagehand_mariadb_as_owner() {
  if ((EUID == 0)); then
    runuser -u mysql -- "$@"
  else
    "$@"
  fi
}

stagehand_mariadb_start() {
  local server=/usr/sbin/mariadbd
  if [[ ! -x "${server}" ]] || ! command -v mariadb-install-db >/dev/null; then
    echo "mariadb.sh: no MariaDB server found (run scripts/bootstrap)" >&2
    return 1
  fi
  STAGEHAND_MARIADB_TMP="$(mktemp -d /tmp/stagehand-mariadb.XXXXXX)"
  local data="${STAGEHAND_MARIADB_TMP}/data"
  local log="${STAGEHAND_MARIADB_TMP}/server.log"
  local sock="${STAGEHAND_MARIADB_TMP}/server.sock"
  if ((EUID == 0)); then
    chown mysql:mysql "${STAGEHAND_MARIADB_TMP}"
  fi
  if ! stagehand_mariadb_as_owner mariadb-install-db --no-defaults --datadir="${data}" \
      --auth-root-authentication-method=socket --skip-test-db \
      >"${STAGEHAND_MARIADB_TMP}/install.log" 2>&1; then
    echo "mariadb.sh: mariadb-install-db failed:" >&2
    cat "${STAGEHAND_MARIADB_TMP}/install.log" >&2
    return 1
  fi

  local port attempt tries
  for attempt in 1 2 3 4 5; do
    port="$(stagehand_mariadb_free_port)"
    stagehand_mariadb_as_owner "${server}" --no-defaults --datadir="${data}" \
      --socket="${sock}" --bind-address=127.0.0.1 --port="${port}" \
      --pid-file="${STAGEHAND_MARIADB_TMP}/server.pid" --log-error="${log}" \
      --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
      --default-time-zone=+00:00 --max-connections=300 --skip-log-bin \
      --innodb-flush-log-at-trx-commit=0 --innodb-buffer-pool-size=128M \
      --innodb-log-file-size=64M >/dev/null 2>&1 &
    STAGEHAND_MARIADB_PID=$!
    tries=0
    until mariadb --no-defaults -S "${sock}" -u root -e 'SELECT 1' >/dev/null 2>&1; do
      tries=$((tries + 1))
      if ! kill -0 "${STAGEHAND_MARIADB_PID}" 2>/dev/null || ((tries > 300)); then
        break
      fi
      sleep 0.1
    done
    if kill -0 "${STAGEHAND_MARIADB_PID}" 2>/dev/null && ((tries <= 300)); then
      break
    fi
    kill -9 "${STAGEHAND_MARIADB_PID}" 2>/dev/null || true
    if ((attempt == 5)); then
      echo "mariadb.sh: the server did not start; its log:" >&2
      cat "${log}" >&2 || true
      return 1
    fi
  done

  mariadb --no-defaults -S "${sock}" -u root -e "
    CREATE USER 'stagehand'@'127.0.0.1' IDENTIFIED BY 'stagehand';
    GRANT ALL PRIVILEGES ON *.* TO 'stagehand'@'127.0.0.1' WITH GRANT OPTION;" || return 1

  export STAGEHAND_TEST_MARIADB_URL="mysql://stagehand:stagehand@127.0.0.1:${port}"
  export STAGEHAND_TEST_MARIADB_PORT="${port}"
  export STAGEHAND_TEST_MARIADB_SOCKET="${sock}"
  export STAGEHAND_TEST_MARIADB_LOG="${log}"
  export STAGEHAND_TEST_MARIADB_PIDFILE="${STAGEHAND_MARIADB_TMP}/server.pid"
  echo "mariadb.sh: MariaDB $(mariadb --no-defaults -S "${sock}" -u root -N -e 'SELECT VERSION()') on 127.0.0.1:${port}"
}

# Stops the server (if it still runs) and deletes its directory. Safe to call more than once.
stagehand_mariadb_stop() {
  if [[ -z "${STAGEHAND_MARIADB_TMP:-}" || ! -d "${STAGEHAND_MARIADB_TMP}" ]]; then
    return 0
  fi
  local server_pid
  server_pid="$(cat "${STAGEHAND_MARIADB_TMP}/server.pid" 2>/dev/null || true)"
  if [[ -n "${server_pid}" ]]; then
    kill -9 "${server_pid}" 2>/dev/null || true
  fi
  if [[ -n "${STAGEHAND_MARIADB_PID:-}" ]]; then
    kill -9 "${STAGEHAND_MARIADB_PID}" 2>/dev/null || true
    wait "${STAGEHAND_MARIADB_PID}" 2>/dev/null || true
  fi
  rm -rf "${STAGEHAND_MARIADB_TMP}"
  STAGEHAND_MARIADB_TMP=
  STAGEHAND_MARIADB_PID=
}
