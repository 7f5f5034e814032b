#!/usr/bin/env bash
# Runs the claim+release benchmark (bench/store_claim_bench.cc) against the PostgreSQL server in
# STAGEHAND_TEST_POSTGRES_URL; it starts nothing itself. Typical use, with a throwaway server:
#   scripts/test-postgres bench/store_claim.sh [--seconds=10]
# The binary comes from build/release (override with STAGEHAND_BENCH_BUILD_DIR); build it with
#   cmake --preset release && cmake --build --preset release --target store_claim_bench
# Prints one JSON line: our pairs per second, pgbench's with the same two statements, the ratio.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -z "${STAGEHAND_TEST_POSTGRES_URL:-}" ]]; then
  echo "store_claim.sh: STAGEHAND_TEST_POSTGRES_URL is not set (run it through scripts/test-postgres)" >&2
  exit 2
fi
binary="${STAGEHAND_BENCH_BUILD_DIR:-build/release}/bench/store_claim_bench"
if [[ ! -x "${binary}" ]]; then
  echo "store_claim.sh: ${binary} is missing; build the store_claim_bench target first" >&2
  exit 2
fi
exec "${binary}" "$@"
