#!/usr/bin/env bash
# Runs the dashboard's real-browser test (dashboard_test.mjs) against a stagehand binary, in
# Debian's headless Chromium. The npm packages (playwright-core and axe-core, pinned by the
# committed package-lock.json) are installed with `npm ci` into a cache folder named after the
# lock file's hash, once; later runs reuse it. A missing Chromium or Node.js is an error.
#   tests/browser/run.sh [path/to/stagehand]
# The binary: the argument, else STAGEHAND_BINARY, else build/ci/apps/stagehand/stagehand.
# Environment: STAGEHAND_SCREENSHOT_DIR (where the screenshots go; default: the test's temporary folder),
# STAGEHAND_DASHBOARD_SCREENSHOTS_DIR (where the README's two go, dashboard-desktop.png at 1280x720 and
# dashboard-phone.png at 390x844, with a task running and one paused; default: a `readme` folder in
# the former; STAGEHAND_DASHBOARD_SCREENSHOTS_DIR=$PWD/docs/images regenerates the README's),
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

source "${root}/scripts/lib/npm_cache.sh"
modules="$(stagehand_npm_install "${here}" "${STAGEHAND_BROWSER_CACHE:-${HOME}/.cache/stagehand-browser-test}")"

export STAGEHAND_BINARY="${binary}"
export STAGEHAND_ROOT="${root}"
export CHROMIUM="${chromium}"
export NODE_PATH="${modules}"
exec node "${here}/dashboard_test.mjs"
