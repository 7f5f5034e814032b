#!/usr/bin/env python3
"""stagehand's distributed reliability suite.

A fleet of `stagehand serve` processes (3 by default) shares one PostgreSQL (or, with `--db mysql`,
one MariaDB), each through its own
TCP proxy on 127.0.0.1 that the suite can partition; each daemon listens on port 0 and names its
port in its ready file. Every task is the probe program (tests/system/probe.cc), which appends
`start`, `tick` (every 50 ms) and `end` events with CLOCK_MONOTONIC timestamps to one O_APPEND file,
so runs whose host died are still seen, and holds a lock that the lock watcher
(tests/system/lock_watcher.cc) watches to see when the run's last process is dead (`gone`). After each scenario the checker (checker.py) rebuilds the runs
and checks the guarantees:

  kill             SIGKILL of the host running a long task: takeover within lease + janitor + 1 s
  freeze           SIGSTOP of that host (daemon and commands) for 2.5 leases, then SIGCONT: another
                   host takes over; the woken host stops its run at once and releases nothing
  partition        the owner's proxy stops moving bytes: it fences itself before its lease lapses,
                   another host takes over, and after the heal it rejoins
  partition-reset  the same with connections reset and refused
  pg-restart       the database server restarts during runs (`pg_ctl restart -m fast`; MariaDB: a
                   clean shutdown and a new server): every host survives and goes on
  skew             one host's wall clock 3 h 0.4 s ahead (faketime): no overlap, cron on its slots
  rolling          SIGTERM and restart of every host in turn: exit 0, running task handed over at once
  load             many global tasks with cadences 100 ms … 2 s: runs/s, start lag, claims lost, CPU
  rest             API calls at full speed and a fuzzer for a while: no 5xx, no leak, tasks on time
  cron-join        1 ms cron tasks (`*/2`, every second) and a stdout flood through a join, a
                   restart and another join: no slot with two starts, no start away from its slot
  stubborn         one trigger of a SIGTERM-ignoring task (timeout 2 s) and of a slow exiter: one
                   run each, `running` and 409 during the kill grace, killed within the grace
  setsid           setsid grandchildren after a timeout, a cancel and an exit: the tree dies within
                   the grace, no rerun while it lives, no zombie, no survivor

Every scenario also checks: no overlap of two runs of one task (a run lasting until its last process
is dead), no daemon exit, no run that never ends, no process outliving its daemon, cron slots met
once each with no start away from its slot (no excuse for a registration's "slot - 1 s" start) and
duration cadences kept (outside the fault's takeover window).

Usage:
  python3 tests/system/run.py [--db postgres|mysql] [--scenarios kill,freeze,...]
      [--soak MINUTES] [--stagehand PATH] [--probe PATH] [--lock-watcher PATH] [--out DIR]

It uses the PostgreSQL of scripts/lib/postgres.sh when STAGEHAND_TEST_POSTGRES_URL is set (as under
scripts/test), or with `--db mysql` the MariaDB of scripts/lib/mariadb.sh when
STAGEHAND_TEST_MARIADB_URL is set; otherwise it starts a throwaway one itself. CI runs the default: the load with
100 tasks for 15 s and the REST phase for 5 s, about 3.5 minutes in all. `--soak MINUTES` runs the
load at full size (500 tasks) for MINUTES minutes (at least 1) and the REST phase for 10 s.

Writes <out>/results.json and <out>/summary.txt; exits 1 when any guarantee is violated."""

import argparse
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import failover  # noqa: E402
import scenarios  # noqa: E402
from harness import DATABASES, database_from_environment, with_database  # noqa: E402


ALL_SCENARIOS = {**scenarios.SCENARIOS, **failover.SCENARIOS}
# The failover family runs only when named: it starts a primary and a standby of its own
# (ctest's system_failover names the synchronous scenarios; scripts/chaos all, 10 rounds).
DEFAULT_SCENARIOS = [name for name in ALL_SCENARIOS if name not in failover.SCENARIOS]


class Context:
    pass


def default_binary(name):
    for build in ("ci", "dev", "release", "system"):
        for rel in (f"apps/stagehand/{name}", f"tests/system/{name}"):
            path = os.path.join(ROOT, "build", build, rel)
            if os.path.exists(path):
                return path
    return None


def summarize(results):
    lines = []
    for result in results:
        verdict = "PASS" if result["ok"] else "FAIL"
        lines.append(f"== {result['name']}: {verdict} ({result['seconds']:.1f} s)")
        if result.get("error"):
            lines.append("   error: " + result["error"].strip().splitlines()[-1])
        for fault in result.get("faults", []):
            takeover = fault.get("takeover_ms")
            lines.append(f"   fault: {fault['kind']} on {fault['host']} for "
                         f"{fault['duration_ms']:.0f} ms" +
                         (f", takeover {takeover:.0f} ms" if takeover is not None else ""))
        for c in result.get("checks", []):
            lines.append(f"   [{'ok' if c['ok'] else 'FAIL'}] {c['guarantee']}: {c['observed']}")
        figures = {k: v for k, v in result.get("figures", {}).items()
                   if k not in ("overlaps", "cadence")}
        lines.append("   figures: " + json.dumps(figures, default=str))
    passed = sum(1 for r in results if r["ok"])
    lines.append(f"{passed} of {len(results)} scenarios passed")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", default="postgres", choices=sorted(DATABASES),
                        help="the database the fleet shares (mysql: MariaDB)")
    parser.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS),
                        help="comma-separated; all but the failover family by default "
                        f"(known: {', '.join(ALL_SCENARIOS)})")
    parser.add_argument("--soak", type=float, default=0, metavar="MINUTES")
    parser.add_argument("--stagehand", default=default_binary("stagehand"))
    parser.add_argument("--probe", default=default_binary("stagehand_system_probe"))
    parser.add_argument("--lock-watcher", default=default_binary("stagehand_system_lock_watcher"))
    parser.add_argument("--failover-rounds", type=int, default=2, metavar="N",
                        help="failovers per failover scenario (the targets are for 10)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warn", "error"],
                        help="the daemons' log level (logs are in <out>/<plugin>/h<N>.<k>.log)")
    parser.add_argument("--out", default=os.path.join(ROOT, "build", "system-results"))
    args = parser.parse_args()
    if DATABASES[args.db][0] not in os.environ:
        return with_database(args.db, __file__, sys.argv[1:])
    for name in ("stagehand", "probe", "lock_watcher"):
        path = getattr(args, name)
        if not path or not os.access(path, os.X_OK):
            option = name.replace("_", "-")
            print(f"run.py: no {option} binary (give --{option})", file=sys.stderr)
            return 2
    names = [n for n in args.scenarios.split(",") if n]
    unknown = [n for n in names if n not in ALL_SCENARIOS]
    if unknown:
        print(f"run.py: unknown scenarios {unknown}; known: {list(ALL_SCENARIOS)}",
              file=sys.stderr)
        return 2

    ctx = Context()
    ctx.db = database_from_environment(args.db)
    ctx.stagehand = os.path.abspath(args.stagehand)
    ctx.probe = os.path.abspath(args.probe)
    ctx.lock_watcher = os.path.abspath(args.lock_watcher)
    ctx.out = os.path.abspath(args.out)
    ctx.log_level = args.log_level
    ctx.failover_rounds = args.failover_rounds
    os.makedirs(ctx.out, exist_ok=True)
    ctx.load_tasks = 500 if args.soak else 100
    ctx.load_seconds = max(60, int(args.soak * 60)) if args.soak else 15
    ctx.rest_seconds = 10 if args.soak else 5

    results = []
    for name in names:
        began = time.monotonic()
        print(f"-- {name} ...", flush=True)
        try:
            result = ALL_SCENARIOS[name](ctx)
            result["ok"] = all(c["ok"] for c in result["checks"])
        except Exception:  # a scenario that cannot complete is a failure with its reason
            result = {"name": name, "ok": False, "error": traceback.format_exc(), "checks": []}
        result["seconds"] = time.monotonic() - began
        results.append(result)
        print(summarize([result]), end="", flush=True)

    summary = summarize(results)
    with open(os.path.join(ctx.out, "results.json"), "w") as f:
        json.dump({"mode": "soak" if args.soak else "ci", "database": ctx.db.name,
                   "load_tasks": ctx.load_tasks,
                   "load_seconds": ctx.load_seconds, "rest_seconds": ctx.rest_seconds,
                   "scenarios": results}, f, indent=1, default=str)
    with open(os.path.join(ctx.out, "summary.txt"), "w") as f:
        f.write(summary)
    print("\n" + summary.splitlines()[-1])
    print(f"results: {os.path.join(ctx.out, 'results.json')}")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
