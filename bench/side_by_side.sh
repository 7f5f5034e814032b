#!/usr/bin/env bash
# stagehand and Backstage's own scheduler side by side on the PostgreSQL server in
# STAGEHAND_TEST_POSTGRES_URL, or with --db=mysql on the MySQL or MariaDB server in
# STAGEHAND_TEST_MARIADB_URL (it starts none itself): installs the Backstage peer's npm packages
# into a cache folder when they are missing or stale, runs engine_bench --side_by_side, the peer
# (bench/backstage-peer/peer.js) and the claim+release reference of pgbench
# (bench/store_claim_bench), then renders the comparison table and the start-lag plot
# (bench/report.py).
#
#   bench/side_by_side.sh --build-dir=DIR --out-dir=DIR [--smoke] [--scenarios=a,b,...]
#                         [--db=postgres|mysql]
#
# On MySQL there is no pgbench reference and no saturated rate (both are PostgreSQL's), and the
# SIGKILL takeover is left out by default (Backstage's janitor alone takes minutes).
# Outputs in --out-dir: stagehand.json, backstage.json, pgbench.json, comparison.md,
# start_lag.png, and for the saturated rate (three rounds, unless --smoke)
# saturation_{stagehand,pgbench}_<round>.json. The npm cache folder is STAGEHAND_BENCH_CACHE (default
# ~/.cache/stagehand-bench); the first install fetches about 650 packages from the npm registry.
# A missing tool (node, npm, gnuplot, pgbench) is an error, never a skip.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir=""
out_dir=""
smoke=0
scenarios=""
db=postgres
for arg in "$@"; do
  case "${arg}" in
    --db=postgres | --db=mysql) db="${arg#*=}" ;;
    --build-dir=*) build_dir="${arg#*=}" ;;
    --out-dir=*) out_dir="${arg#*=}" ;;
    --smoke) smoke=1 ;;
    --scenarios=*) scenarios="${arg#*=}" ;;
    *)
      echo "side_by_side.sh: unknown argument ${arg}" >&2
      exit 2
      ;;
  esac
done
if [[ -z "${build_dir}" || -z "${out_dir}" ]]; then
  echo "side_by_side.sh: --build-dir and --out-dir are required" >&2
  exit 2
fi
url_variable=STAGEHAND_TEST_POSTGRES_URL
if [[ "${db}" == mysql ]]; then
  url_variable=STAGEHAND_TEST_MARIADB_URL
fi
if [[ -z "${!url_variable:-}" ]]; then
  echo "side_by_side.sh: ${url_variable} is not set" >&2
  exit 2
fi
for tool in node npm gnuplot python3; do
  if ! command -v "${tool}" >/dev/null; then
    echo "side_by_side.sh: ${tool} is missing (run scripts/bootstrap)" >&2
    exit 1
  fi
done
for binary in engine_bench store_claim_bench; do
  if [[ ! -x "${build_dir}/bench/${binary}" ]]; then
    echo "side_by_side.sh: ${build_dir}/bench/${binary} is missing; build it first" >&2
    exit 1
  fi
done
mkdir -p "${out_dir}"

# The peer's packages, installed into a cache folder keyed by the lock file's hash.
peer_modules="$("${root}/bench/backstage-peer/install.sh")"

engine_args=(--side_by_side --db="${db}")
peer_args=(--modules="${peer_modules}" --url="${!url_variable}")
if [[ "${db}" == mysql ]]; then
  scenarios="${scenarios:-trigger,across,cancel,cron,interval,idle,throughput}"
fi
claim_seconds=10
claim_args=()
if ((smoke)); then
  engine_args+=(--smoke)
  peer_args+=(--smoke)
  claim_seconds=2
  claim_args=(--batch=4)  # the batched reference runs too, briefly (the saturation rounds use it)
  # Backstage's janitor sweeps once a minute, so its SIGKILL takeover alone takes minutes; the
  # saturation scenario repeats throughput's figure at its limit and is left to the full run.
  scenarios="${scenarios:-trigger,across,cancel,cron,interval,idle,throughput}"
fi
# The saturated rate is measured apart, three times, each beside its references (below).
saturation_rounds=0
if ((!smoke)) && [[ "${db}" == postgres ]] &&
  [[ -z "${scenarios}" || ",${scenarios}," == *,saturation,* ]]; then
  saturation_rounds=3
fi
if [[ -n "${scenarios}" ]]; then
  peer_args+=(--scenarios="${scenarios}")
fi
engine_scenarios="${scenarios:-trigger,across,cancel,cron,interval,idle,throughput,saturation,kill}"
if ((saturation_rounds > 0)); then
  engine_scenarios="$(tr ',' '\n' <<<"${engine_scenarios}" | { grep -vx saturation || true; } | paste -sd, -)"
fi
if [[ -n "${engine_scenarios}" ]]; then
  engine_args+=(--scenarios="${engine_scenarios}")
fi

rm -f "${out_dir}"/saturation_*.json
if [[ -n "${engine_scenarios}" ]]; then
  echo "==> stagehand (engine_bench ${engine_args[*]})" >&2
  "${build_dir}/bench/engine_bench" "${engine_args[@]}" --benchmark_out="${out_dir}/stagehand.json" \
    >/dev/null
else
  echo '{}' >"${out_dir}/stagehand.json"
fi
echo "==> Backstage $(node -e "process.stdout.write(require('${peer_modules}/@backstage/backend-defaults/package.json').version)") (peer.js ${peer_args[*]})" >&2
node "${root}/bench/backstage-peer/peer.js" "${peer_args[@]}" --out="${out_dir}/backstage.json" >/dev/null
rm -f "${out_dir}/pgbench.json"
if [[ "${db}" == postgres ]]; then
  echo "==> pgbench claim+release reference (store_claim_bench --seconds=${claim_seconds})" >&2
  if [[ -z "${STAGEHAND_TEST_PG_BIN:-}" ]]; then
    source "${root}/scripts/lib/postgres.sh"
    STAGEHAND_TEST_PG_BIN="$(stagehand_pg_bin_dir)"
    export STAGEHAND_TEST_PG_BIN
  fi
  "${build_dir}/bench/store_claim_bench" --seconds="${claim_seconds}" "${claim_args[@]}" \
    --benchmark_out="${out_dir}/pgbench.json" >/dev/null
fi

# Issue 22: the saturated rate, then pgbench running the store's single-row claim+release and its
# batched claim_many+release_many at the batch size the engines sent in that run (from
# pg_stat_statements), three times over; report.py gives the median and the spread of each ratio.
for ((round = 1; round <= saturation_rounds; ++round)); do
  echo "==> saturation, round ${round} of ${saturation_rounds}: stagehand" >&2
  "${build_dir}/bench/engine_bench" --side_by_side --scenarios=saturation \
    --benchmark_out="${out_dir}/saturation_stagehand_${round}.json" >/dev/null
  batch="$(python3 "${root}/bench/report.py" --batch-of="${out_dir}/saturation_stagehand_${round}.json")"
  echo "==> saturation, round ${round} of ${saturation_rounds}: pgbench single-row and ${batch}-row batches" >&2
  "${build_dir}/bench/store_claim_bench" --seconds=10 --batch="${batch}" \
    --benchmark_out="${out_dir}/saturation_pgbench_${round}.json" >/dev/null
done

python3 "${root}/bench/report.py" --dir="${out_dir}"
