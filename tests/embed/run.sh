#!/usr/bin/env bash
# Installs a stagehand build tree into a scratch prefix, builds examples/embed against it as a
# separate project, runs the example's tests (its tasks on a MockScheduler, the plugin in a test
# backend), then starts the example on a free port, checks its REST API with curl and stops it with
# SIGTERM, which must end it with exit code 0. With --doc, first checks that the doc's code blocks
# are still copies of the example (check_doc_snippets.py).
#
#   run.sh --build-tree DIR --example DIR --work DIR [--doc FILE] [--cxx PATH]
#          [--cxx-flags FLAGS] [--build-type TYPE]
set -euo pipefail

build_tree="" example="" work="" doc="" cxx="" cxx_flags="" build_type=""
while (($# > 0)); do
  case "$1" in
    --build-tree) build_tree="$2" ;;
    --example) example="$2" ;;
    --work) work="$2" ;;
    --doc) doc="$2" ;;
    --cxx) cxx="$2" ;;
    --cxx-flags) cxx_flags="$2" ;;
    --build-type) build_type="$2" ;;
    *)
      echo "run.sh: unknown argument '$1'" >&2
      exit 2
      ;;
  esac
  shift 2
done
if [[ -z "${build_tree}" || -z "${example}" || -z "${work}" ]]; then
  echo "run.sh: --build-tree, --example and --work are required" >&2
  exit 2
fi

fail() {
  echo "embed test: FAILED: $*" >&2
  exit 1
}
step() {
  printf '[%3d s] %s\n' "${SECONDS}" "$*"
}

if [[ -n "${doc}" ]]; then
  step "the snippets of ${doc} match ${example}"
  python3 "$(dirname "${BASH_SOURCE[0]}")/check_doc_snippets.py" "${doc}" "${example}" ||
    fail "${doc} no longer matches ${example}"
fi

rm -rf "${work}"
mkdir -p "${work}"
prefix="${work}/prefix"
example_build="${work}/build"

step "cmake --install ${build_tree} --prefix ${prefix}"
cmake --install "${build_tree}" --prefix "${prefix}" >"${work}/install.log" ||
  fail "install failed (is the tree built?); see ${work}/install.log"
for installed in bin/stagehand include/stagehand/backend/backend.h \
  include/stagehand/service/mock_scheduler.h include/stagehand/testing/status_matchers.h \
  lib/cmake/stagehand/stagehandConfig.cmake \
  lib/cmake/stagehand/stagehandConfigVersion.cmake lib/cmake/stagehand/stagehandTargets.cmake; do
  [[ -e "${prefix}/${installed}" ]] || fail "not installed: ${installed}"
done
"${prefix}/bin/stagehand" --version >/dev/null || fail "the installed stagehand binary does not run"
! grep -qi gtest "${prefix}/lib/cmake/stagehand/stagehandTargets.cmake" ||
  fail "the installed targets refer to GoogleTest"

step "configure ${example} against the installed package"
configure=(cmake -S "${example}" -B "${example_build}" -G Ninja
  "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_CXX_FLAGS=${cxx_flags}")
[[ -n "${cxx}" ]] && configure+=("-DCMAKE_CXX_COMPILER=${cxx}")
[[ -n "${build_type}" ]] && configure+=("-DCMAKE_BUILD_TYPE=${build_type}")
"${configure[@]}" >"${work}/configure.log" 2>&1 || {
  cat "${work}/configure.log" >&2
  fail "configure failed"
}
[[ "$(sed -n 's/^stagehand_DIR:PATH=//p' "${example_build}/CMakeCache.txt")" == "${prefix}"/* ]] ||
  fail "stagehand was not found in the install prefix"

step "build"
ninja -C "${example_build}" -j "${STAGEHAND_TEST_JOBS:-2}" >"${work}/build.log" 2>&1 || {
  cat "${work}/build.log" >&2
  fail "build failed"
}
for test in reservations_test reservations_backend_test; do
  [[ -x "${example_build}/${test}" ]] || fail "the example's ${test} was not built"
done

step "the example's unit test"
"${example_build}/reservations_test" --gtest_brief=1 || fail "reservations_test failed"

step "the example's test in a test backend (StartTestBackend)"
"${example_build}/reservations_backend_test" --gtest_brief=1 ||
  fail "reservations_backend_test failed"

step "run the example"
token="embed-test-token-0123"
fifo="${work}/stdout.fifo"
mkfifo "${fifo}"
STAGEHAND_TOKEN="${token}" "${example_build}/embed_example" \
  --config "${example}/app-config.yaml" --port 0 >"${fifo}" 2>"${work}/example.log" &
pid=$!
cleanup() {
  if kill -0 "${pid}" 2>/dev/null; then
    kill -KILL "${pid}" 2>/dev/null || true
  fi
}
trap cleanup EXIT
exec 3<"${fifo}"
line=""
read -r -t 60 -u 3 line || {
  cat "${work}/example.log" >&2
  fail "the example did not report its port"
}
port="${line#listening on port }"
[[ "${port}" =~ ^[0-9]+$ && "${port}" != 0 ]] || fail "unexpected first line: '${line}'"
base="http://127.0.0.1:${port}/api/reservations"
auth=(-H "Authorization: Bearer ${token}")

status="$(curl -s -o /dev/null -w '%{http_code}' "${base}/.backstage/scheduler/v1/tasks")"
[[ "${status}" == 401 ]] || fail "listing without a token: status ${status}, expected 401"

curl -sS -f "${auth[@]}" "${base}/.backstage/scheduler/v1/tasks" >"${work}/tasks.json" ||
  fail "GET the task listing"
python3 - "${work}/tasks.json" <<'PY' || fail "unexpected task listing: $(cat "${work}/tasks.json")"
import json, sys
tasks = {t["taskId"]: t for t in json.load(open(sys.argv[1]))["tasks"]}
assert set(tasks) == {"expire-reservations", "report-stats"}, tasks
assert tasks["expire-reservations"]["scope"] == "global", tasks
assert tasks["report-stats"]["scope"] == "local", tasks
assert tasks["expire-reservations"]["settings"]["cadence"] == "PT60S", tasks
PY

status="$(curl -s -o /dev/null -w '%{http_code}' -X POST "${auth[@]}" "${base}/seats/A1")"
[[ "${status}" == 201 ]] || fail "POST /seats/A1: status ${status}, expected 201"
[[ "$(curl -sS -f "${auth[@]}" "${base}/seats")" == "A1" ]] || fail "GET /seats does not list A1"

step "SIGTERM"
kill -TERM "${pid}"
rc=0
wait "${pid}" || rc=$?
exec 3<&-
[[ "${rc}" == 0 ]] || {
  cat "${work}/example.log" >&2
  fail "the example exited with ${rc} after SIGTERM, expected 0"
}
grep -q "Received SIGTERM" "${work}/example.log" || fail "the example did not log the SIGTERM"
step "ok"
