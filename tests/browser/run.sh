#!/usr/bin/env bash
# Runs the dashboard's real-browser test (dashboard_test.mjs) against a stagehand binary, in
# Debian's headless Chromium. The npm packages (playwright-core and axe-core, pinned by the
# committed package-lock.json) are installed with `npm ci` into a cache folder named after the
# lock file's hash, once; later runs reuse it. A missing Chromium or Node.js is an error.
#   tests/browser/run.sh [path/to/stagehand]
# The binary: the argument, else STAGEHAND_BINARY, else build/ci/apps/stagehand/stagehand.
# Environment: STAGEHAND_SCREENSHOT_DIR (where the screenshots go; default: the test's temporary folder),
# STAGEHAND_BROWSER_CACHE (default ~/.cache/stagehand-browser-test), CHROMIUM (/usr/bin/chromium),
# STAGEHAND_DASHBOARD_ASSETS (take the page from that folder, e.g. src/dashboard/assets, instead of
# the binary's copy: for editing the page without a rebuild).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
binary="${1:-${STAGEHAND_BINARY:-${root}/build/ci/apps/stagehand/stagehand}}"
chromium="${CHROMIUM:-/usr/bin/chromium}"

fail() {
  echo "tests/browser/run.sh: $*" >&2
  exit 1
}
[[ -x "${binary}" ]] || fail "no stagehand binary at ${binary} (build it first, or pass its path)"
binary="$(realpath "${binary}")"
[[ -x "${chromium}" ]] || fail "no Chromium at ${chromium}: install Debian's chromium (scripts/bootstrap does)"
command -v node >/dev/null || fail "no node: install Debian's nodejs (scripts/bootstrap does)"
command -v npm >/dev/null || fail "no npm: install Debian's nodejs with npm (scripts/bootstrap does)"

cache="${STAGEHAND_BROWSER_CACHE:-${HOME}/.cache/stagehand-browser-test}"
lock_hash="$(sha256sum "${here}/package-lock.json" | cut -c1-16)"
modules_dir="${cache}/npm-${lock_hash}"
if [[ ! -f "${modules_dir}/.installed" ]]; then
  echo "run.sh: installing playwright-core and axe-core from the lock file into ${modules_dir}" >&2
  rm -rf "${modules_dir}"
  mkdir -p "${modules_dir}"
  cp "${here}/package.json" "${here}/package-lock.json" "${modules_dir}/"
  # --ignore-scripts: playwright-core would otherwise try to fetch browsers of its own; the test
  # drives the system's Chromium only.
  (cd "${modules_dir}" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
  touch "${modules_dir}/.installed"
fi

export STAGEHAND_BINARY="${binary}"
export STAGEHAND_ROOT="${root}"
export CHROMIUM="${chromium}"
export NODE_PATH="${modules_dir}/node_modules"
exec node "${here}/dashboard_test.mjs"
