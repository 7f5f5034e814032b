#!/usr/bin/env python3
"""Issue 16's acceptance on a real fleet: two `stagehand serve` hosts on the test PostgreSQL share a
plugin whose tasks fail, time out and get cancelled. Each run must show up in the REST history and
in `stagehand runs` with the right outcome, host, duration and exit status, whichever host ran it;
`stagehand logs` must print the failed run's output; `stagehand trigger --wait` of the failing task
must exit non-zero.

  history_fleet.py --stagehand BIN --probe BIN --out DIR

Needs the server of scripts/lib/postgres.sh (STAGEHAND_TEST_POSTGRES_*). Exits 1 on the first
failed check, printing what it saw."""

import argparse
import json
import os
import subprocess
import sys
import time

from harness import Fleet, Postgres, wait_for

PLUGIN = "historyfleet"


class Context:
    pass


def check(ok, what, seen):
    if not ok:
        print(f"FAIL: {what}\n  saw: {seen}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


def runs_of(host, task):
    status, body = host.request("GET", f"/api/{PLUGIN}/.stagehand/v1/tasks/{task}/runs?limit=10")
    if status != 200:
        return None
    return json.loads(body)["runs"]


def ended_run(host, task, timeout_s=30):
    """The newest run of `task` once it has ended, read from `host`."""
    found = {}

    def ended():
        runs = runs_of(host, task)
        if runs and runs[0]["outcome"] != "running":
            found["run"] = runs[0]
            return True
        return False
    check(wait_for(ended, timeout_s, 0.1), f"a run of {task} ended, as {host.name} sees it",
          runs_of(host, task))
    return found["run"]


def cli(ctx, host, *args):
    return subprocess.run([ctx.stagehand, *args, "--url", f"http://127.0.0.1:{host.port}"],
                          capture_output=True, text=True, timeout=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stagehand", required=True)
    parser.add_argument("--probe", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    ctx = Context()
    ctx.db = Postgres()
    ctx.stagehand = os.path.abspath(args.stagehand)
    ctx.probe = os.path.abspath(args.probe)
    ctx.out = os.path.abspath(args.out)
    os.makedirs(ctx.out, exist_ok=True)

    manual = {"trigger": "manual"}
    tasks = {
        "fails": {"schedule": {"frequency": manual, "timeout": {"seconds": 30}},
                  "command": ["sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"]},
        "slow": {"schedule": {"frequency": manual, "timeout": {"seconds": 1}},
                 "command": ["sleep", "30"]},
        "stuck": {"schedule": {"frequency": manual, "timeout": {"minutes": 5}},
                  "command": ["sleep", "300"]},
    }
    fleet = Fleet(ctx, PLUGIN, tasks, hosts=2, track_trees=False)
    try:
        fleet.start()
        h1, h2 = fleet.hosts
        pids = {h1.pid, h2.pid}
        api = f"/api/{PLUGIN}/.backstage/scheduler/v1/tasks"
        for task in ("fails", "slow", "stuck"):
            status, body = h1.request("POST", f"{api}/{task}/trigger")
            check(status == 200, f"trigger {task} on h1", (status, body))

        stuck_started = wait_for(lambda: (runs_of(h2, "stuck") or [{}])[0].get("outcome")
                                 == "running", 30, 0.1)
        check(stuck_started, "the stuck run is recorded as running", runs_of(h2, "stuck"))
        status, body = h2.request("POST", f"{api}/stuck/cancel")
        check(status == 200, "cancel stuck on h2 (whichever host runs it)", (status, body))

        failed = ended_run(h2, "fails")
        check(failed["outcome"] == "failed" and failed["exitCode"] == 3,
              "the failing run: outcome failed, exit code 3", failed)
        check(failed["pid"] in pids and failed["host"], "the failing run names its host", failed)
        check(failed["trigger"] == "manual" and failed["slot"] is None,
              "the failing run was triggered", failed)
        check(failed["durationMs"] is not None and failed["durationMs"] >= 0,
              "the failing run has a duration", failed)
        status, body = h1.request("GET", f"/api/{PLUGIN}/.stagehand/v1/runs/{failed['runId']}")
        run = json.loads(body) if status == 200 else body
        check(status == 200 and "to-stdout" in run["output"] and "to-stderr" in run["output"],
              "the failing run's output is in REST", run)

        slow = ended_run(h1, "slow")
        check(slow["outcome"] == "timed_out", "the slow run: outcome timed_out", slow)
        check(slow["durationMs"] >= 1000, "the slow run lasted its 1 s timeout", slow)
        check(slow["signal"] is not None or slow["exitCode"] is not None,
              "the slow run's end status is recorded", slow)

        stuck = ended_run(h1, "stuck")
        check(stuck["outcome"] == "cancelled", "the stuck run: outcome cancelled", stuck)
        check(stuck["pid"] in pids, "the cancelled run names its host", stuck)

        shown = cli(ctx, h1, "runs", PLUGIN, "fails")
        check(shown.returncode == 0 and "failed" in shown.stdout,
              "`stagehand runs` shows the failed run", shown.stdout + shown.stderr)
        shown = cli(ctx, h2, "runs", PLUGIN, "fails", "--json")
        check(shown.returncode == 0 and json.loads(shown.stdout)["runs"][0]["exitCode"] == 3,
              "`stagehand runs --json` shows its exit code", shown.stdout + shown.stderr)
        logs = cli(ctx, h2, "logs", PLUGIN, "fails")
        check(logs.returncode == 0 and "to-stdout" in logs.stdout and "to-stderr" in logs.stdout,
              "`stagehand logs` prints the failed run's output", logs.stdout + logs.stderr)
        began = time.monotonic()
        waited = cli(ctx, h1, "trigger", PLUGIN, "fails", "--wait")
        check(waited.returncode not in (0, 1, 2) and "to-stdout" in waited.stdout,
              "`stagehand trigger --wait` of the failing task exits with its outcome's code "
              "and prints its output",
              (waited.returncode, waited.stdout, waited.stderr))
        check(time.monotonic() - began < 30, "`trigger --wait` returns once the run ends",
              time.monotonic() - began)
        ok = cli(ctx, h2, "runs", PLUGIN, "fails", "--limit", "5", "--json")
        count = len(json.loads(ok.stdout)["runs"]) if ok.returncode == 0 else None
        check(count == 2, "both runs of the failing task are in the history", ok.stdout)
    finally:
        fleet.stop()
    print("history fleet: every check passed")


if __name__ == "__main__":
    main()
