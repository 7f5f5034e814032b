#!/usr/bin/env bash
# Installs the Backstage peer's npm packages (npm ci from the committed lock file) into a cache
# folder keyed by the lock's hash, unless they are there already, and prints the node_modules
# folder to pass to peer.js --modules. The cache folder is STAGEHAND_BENCH_CACHE (default
# ~/.cache/stagehand-bench), the one bench/side_by_side.sh fills; the first install fetches about
# 650 packages from the npm registry.
#   bench/backstage-peer/install.sh
set -euo pipefail

peer_src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "${peer_src}/../../scripts/lib/npm_cache.sh"
stagehand_npm_install "${peer_src}" "${STAGEHAND_BENCH_CACHE:-${HOME}/.cache/stagehand-bench}"
