#!/usr/bin/env bash
# The side-by-side benchmark harness (bench/side_by_side.sh) in its reduced form: every scenario of
# both systems but the SIGKILL one (on MySQL, only those whose figures differ by database: across,
# cancel, idle and throughput), with tiny counts and durations; then checks that both reports, the
# pgbench reference (PostgreSQL only), the table and the plot were produced. Timings are not
# asserted.
#   tests/bench/side_by_side_smoke.sh BUILD_DIR [--db=mysql]
# Needs STAGEHAND_TEST_POSTGRES_URL (with --db=mysql, STAGEHAND_TEST_MARIADB_URL), node, npm and
# gnuplot. When something is missing it skips (exit 77) on a developer's machine and fails under
# CI=true.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build_dir="${1:?usage: side_by_side_smoke.sh BUILD_DIR [--db=mysql]}"
db=postgres
url_variable=STAGEHAND_TEST_POSTGRES_URL
scenarios=()
if [[ "${2:-}" == --db=mysql ]]; then
  db=mysql
  url_variable=STAGEHAND_TEST_MARIADB_URL
  scenarios=(--scenarios=across,cancel,idle,throughput)
fi

missing() {
  if [[ "${CI:-}" == "true" ]]; then
    echo "side_by_side_smoke: FAIL: $*" >&2
    exit 1
  fi
  echo "side_by_side_smoke: skipped: $*" >&2
  exit 77
}
[[ -n "${!url_variable:-}" ]] || missing "${url_variable} is not set"
for tool in node npm gnuplot; do
  command -v "${tool}" >/dev/null || missing "${tool} is not installed (scripts/bootstrap)"
done

out="${build_dir}/bench-smoke-${db}"
rm -rf "${out}"
begin=${SECONDS}
"${root}/bench/side_by_side.sh" --build-dir="${build_dir}" --out-dir="${out}" --smoke --db="${db}" \
  "${scenarios[@]}"
echo "side_by_side_smoke: harness took $((SECONDS - begin)) s"

python3 - "${out}" "${db}" <<'PY'
import json, os, sys
out, db = sys.argv[1], sys.argv[2]
sampled = ["trigger_across_processes", "cancel_across_processes"]
keys = sampled + ["idle_tasks_50", "throughput"]
if db == "postgres":
    sampled.append("in_process_trigger")
    keys += ["in_process_trigger", "cron_every_second", "interval_one_second"]
problems = []
for system in ("stagehand", "backstage"):
    doc = json.load(open(os.path.join(out, f"{system}.json")))
    for key in keys:
        if not isinstance(doc.get(key), dict):
            problems.append(f"{system}.json has no {key}")
    for key in sampled:
        if doc.get(key, {}).get("n", 0) < 1:
            problems.append(f"{system}.json: {key} has no sample")
    if doc.get("throughput", {}).get("completed_runs", 0) < 1:
        problems.append(f"{system}.json: throughput completed no run")
    if doc.get("throughput", {}).get("overlaps") != 0:
        problems.append(f"{system}.json: overlapping runs of one global task")
if db == "postgres":
    pg = json.load(open(os.path.join(out, "pgbench.json")))
    if not pg.get("pgbench_pairs_per_second", 0) > 0:
        problems.append("pgbench.json has no claim+release rate")
    if not pg.get("pgbench_batched_runs_per_second", 0) > 0:
        problems.append("pgbench.json has no batched claim+release rate")
for name in ("comparison.md", "start_lag.png"):
    path = os.path.join(out, name)
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        problems.append(f"{name} is missing")
for problem in problems:
    print("side_by_side_smoke:", problem, file=sys.stderr)
sys.exit(1 if problems else 0)
PY
echo "side_by_side_smoke: ok"
