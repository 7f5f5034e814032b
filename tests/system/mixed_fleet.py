#!/usr/bin/env python3
"""A stagehand host and a Backstage 0.19 worker (bench/backstage-peer/peer.js --serve-tasks,
Backstage's own DefaultSchedulerService) share one global task on one plugin database: issue 20's
acceptance on MariaDB (`--db mysql`, the default), and the same on PostgreSQL (`--db postgres`).

The task `shared` runs every second for 0.6 s; every run, on either side, appends a JSON line
{"host", "task", "event": "start"|"end", "t": wall ms} to one events file. The phases:

  together   both run for 6 s: the task runs, on one side at a time;
  stagehand stops   h1 gets SIGTERM: the Backstage worker takes the task over within 5 s and
             runs it alone while h1 is down;
  Backstage stops   h1 is started again, then the worker gets SIGTERM: h1 takes the task over
             within 5 s and runs it alone.

Throughout, no two runs overlap (a run lasts from its start line to its end line, or, when its
process was stopped before writing one, to the moment its side had stopped).

  mixed_fleet.py [--db mysql|postgres] [--stagehand BIN] [--modules DIR] [--out DIR]

--modules is the Backstage peer's node_modules (default: what bench/backstage-peer/install.sh
prints, installing it on first use). Uses the test server of scripts/lib when its URL is in the
environment (as under scripts/test), otherwise starts a throwaway one. Exits 1 naming every broken
expectation, 77 (skipped) when node or npm is missing."""

import argparse
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from backstage_worker import (Peer, Verdicts, event_command, now_ms, peer_modules,  # noqa: E402
                              per_host, read_events, starts)
from harness import DATABASES, Fleet, database_from_environment, wait_for, with_database  # noqa: E402,E501

PLUGIN = "mixedfleet"
SKIP = 77
WORK_S = 0.6
TAKEOVER_S = 5


class Context:
    pass


def runs_of(events, stops):
    """The runs in `events` as (host, start ms, end ms): a start's end is the next end line of its
    host, or, for a run stopped before it wrote one, when its side had stopped (`stops`: host →
    the wall ms at which each of its stops had completed, in order)."""
    runs, open_runs = [], {}
    for event in sorted(events, key=lambda e: e["t"]):
        host = event["host"]
        if event["event"] == "start":
            if host in open_runs:  # its previous run never wrote an end: stopped with its host
                runs.append((host, open_runs[host], stopped_after(stops, host, open_runs[host])))
            open_runs[host] = event["t"]
        elif host in open_runs:
            runs.append((host, open_runs.pop(host), event["t"]))
    for host, started in open_runs.items():
        runs.append((host, started, stopped_after(stops, host, started)))
    return sorted(runs, key=lambda r: r[1])


def stopped_after(stops, host, started):
    later = [t for t in stops.get(host, []) if t >= started]
    return min(later) if later else now_ms()


def expect_takeover(ctx, v, host, taker, stopped, stopped_ms):
    """Checks that `host` (named `taker`) starts the task within TAKEOVER_S of `stopped`'s stop,
    completed at `stopped_ms`, and records how long it took."""
    taken = wait_for(lambda: starts(read_events(ctx.events), "shared", after=stopped_ms,
                                    host=host), TAKEOVER_S, 0.01)
    v.check(bool(taken), f"{taker} takes the task over within {TAKEOVER_S} s of {stopped}'s stop",
            None)
    if taken:
        v.figure(f"{taker}'s first start after {stopped} stopped (ms)",
                 round(taken[0]["t"] - stopped_ms))


def overlaps(runs):
    found = []
    for i, (host, start, end) in enumerate(runs):
        for other_host, other_start, other_end in runs[i + 1:]:
            if other_start >= end:
                break
            found.append({"runs": [(host, start, end), (other_host, other_start, other_end)],
                          "ms": min(end, other_end) - other_start})
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", default="mysql", choices=sorted(DATABASES))
    parser.add_argument("--stagehand", default=os.path.join(ROOT, "build", "ci", "apps",
                                                            "stagehand", "stagehand"))
    parser.add_argument("--modules", help="the Backstage peer's node_modules folder")
    parser.add_argument("--out", default=os.path.join(ROOT, "build", "mixed-fleet"))
    args = parser.parse_args()
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            print(f"mixed_fleet.py: SKIPPED: {tool} is not installed (scripts/bootstrap)")
            return SKIP
    if DATABASES[args.db][0] not in os.environ:
        return with_database(args.db, __file__, sys.argv[1:])
    began = time.monotonic()
    ctx = Context()
    ctx.db = database_from_environment(args.db)
    ctx.stagehand = os.path.abspath(args.stagehand)
    ctx.probe = None
    ctx.out = os.path.abspath(os.path.join(args.out, args.db))
    os.makedirs(ctx.out, exist_ok=True)
    ctx.modules = peer_modules(args)
    ctx.events = os.path.join(ctx.out, "events.jsonl")
    open(ctx.events, "w").close()
    v = Verdicts()

    timeout = {"seconds": 30}
    tasks = {"shared": {"schedule": {"frequency": {"seconds": 1}, "timeout": timeout},
                        "command": event_command(ctx.events, "shared", WORK_S)}}
    ctx.db.drop_database("backstage_plugin_" + PLUGIN)
    fleet = Fleet(ctx, PLUGIN, tasks, hosts=1, track_trees=False)
    peer = Peer(ctx, fleet, [{"id": "shared", "frequency": {"seconds": 1}, "timeout": timeout,
                              "workMs": int(WORK_S * 1000)}])
    h1 = fleet.hosts[0]
    stops = {"h1": [], "backstage": []}
    peer_code = None
    try:
        fleet.start()
        peer.start()
        together_ms = now_ms()
        print(f"fleet: h1 (stagehand) and the Backstage worker on {ctx.db.name}", flush=True)
        time.sleep(6)

        h1_stop_ms = now_ms()
        _, code = h1.terminate()
        stops["h1"].append(now_ms())
        v.check(code == 0, "h1 exits 0 on SIGTERM", code)
        expect_takeover(ctx, v, "backstage", "the Backstage worker", "h1", stops["h1"][-1])
        time.sleep(3)
        h1.start().wait_ready()
        h1_back_ms = now_ms()

        time.sleep(2)
        peer_code = peer.stop()
        stops["backstage"].append(now_ms())
        expect_takeover(ctx, v, "h1", "h1", "the Backstage worker", stops["backstage"][-1])
        time.sleep(3)
        ended_ms = now_ms()
    finally:
        if peer_code is None:
            peer_code = peer.stop()
        fleet.stop()
    stops["h1"].append(now_ms())
    stops["backstage"].append(now_ms())

    events = read_events(ctx.events)
    v.check(peer_code == 0, "the Backstage worker exits 0 on SIGTERM", peer_code)
    v.check(not h1.unexpected_exits(), "h1 never exited unexpectedly", h1.unexpected_exits())
    v.figure("starts together, per host", per_host(starts(events, "shared", after=together_ms,
                                                          before=h1_stop_ms)))
    v.check(bool(starts(events, "shared", after=together_ms, before=h1_stop_ms)),
            "the task runs while both are up", None)
    alone = starts(events, "shared", after=stops["h1"][0], before=h1_back_ms)
    v.check(alone and all(e["host"] == "backstage" for e in alone),
            "only the Backstage worker runs the task while h1 is down", per_host(alone))
    alone = starts(events, "shared", after=stops["backstage"][0], before=ended_ms)
    v.check(alone and all(e["host"] == "h1" for e in alone),
            "only h1 runs the task once the Backstage worker is down", per_host(alone))
    found = overlaps(runs_of(events, stops))
    v.figure("runs", len(runs_of(events, stops)))
    v.check(not found, "no two runs of the shared task overlap, across stagehand and Backstage",
            found[:3])

    return v.finish(ctx.out, "mixed fleet", time.monotonic() - began)


if __name__ == "__main__":
    sys.exit(main())
