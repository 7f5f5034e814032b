#!/usr/bin/env bash
# PostgreSQL connections and threads of an idle `stagehand serve` with 30 plugins (one idle task
# each) in pluginDivisionMode database and schema, on a throwaway server started here the way the
# tests start theirs (scripts/lib/postgres.sh) and deleted afterwards. Arguments go to
# bench/connections.py, e.g.
#   bench/connections.sh --stagehand build/release/apps/stagehand/stagehand \
#       [--before /tmp/stagehand-old] [--repetitions 3] [--out bench/results/connections.json]
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=../scripts/lib/postgres.sh
source scripts/lib/postgres.sh
trap stagehand_pg_stop EXIT
stagehand_pg_start
python3 -B bench/connections.py "$@"
