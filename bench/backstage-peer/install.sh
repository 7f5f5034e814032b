#!/usr/bin/env bash
# Installs the Backstage peer's npm packages (npm ci from the committed lock file) into a cache
# folder keyed by the lock's hash, unless they are there already, and prints the node_modules
# folder to pass to peer.js --modules. The cache folder is STAGEHAND_BENCH_CACHE (default
# ~/.cache/stagehand-bench), the one bench/side_by_side.sh fills; the first install fetches about
# 650 packages from the npm registry.
#   bench/backstage-peer/install.sh
set -euo pipefail

peer_src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${STAGEHAND_BENCH_CACHE:-${HOME}/.cache/stagehand-bench}"
lock_hash="$(sha256sum "${peer_src}/package-lock.json" | cut -c1-16)"
peer_dir="${cache}/peer-${lock_hash}"
if [[ ! -f "${peer_dir}/.installed" ]]; then
  echo "install.sh: installing the Backstage peer's packages into ${peer_dir}" >&2
  rm -rf "${peer_dir}"
  mkdir -p "${peer_dir}"
  cp "${peer_src}/package.json" "${peer_src}/package-lock.json" "${peer_dir}/"
  # --ignore-scripts: the peer uses only pure-JavaScript packages (knex, pg); install scripts
  # would compile better-sqlite3's SQLite (minutes) for nothing.
  (cd "${peer_dir}" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
  touch "${peer_dir}/.installed"
fi
echo "${peer_dir}/node_modules"
