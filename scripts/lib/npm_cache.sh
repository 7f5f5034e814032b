# Sourced, not run. stagehand_npm_install SOURCE_DIR CACHE_DIR: installs the npm packages pinned
# by SOURCE_DIR/package-lock.json (npm ci, install scripts off) into CACHE_DIR/npm-<lock hash>,
# unless a complete install is there already, and prints that folder's node_modules. Used by the
# test and benchmark tooling that comes from npm (tests/browser, bench/backstage-peer): the first
# install fetches from the npm registry, later ones reuse it. Install scripts stay off: these
# tools need no compiled addons, and playwright-core's would fetch browsers of its own.
stagehand_npm_install() {
  local source_dir="$1" cache_dir="$2"
  local lock_hash install_dir
  lock_hash="$(sha256sum "${source_dir}/package-lock.json" | cut -c1-16)"
  install_dir="${cache_dir}/npm-${lock_hash}"
  if [[ ! -f "${install_dir}/.installed" ]]; then
    echo "npm: installing $(basename "${source_dir}")'s packages from its lock file into ${install_dir}" >&2
    rm -rf "${install_dir}"
    mkdir -p "${install_dir}"
    cp "${source_dir}/package.json" "${source_dir}/package-lock.json" "${install_dir}/"
    (cd "${install_dir}" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
    touch "${install_dir}/.installed"
  fi
  echo "${install_dir}/node_modules"
}
