#!/usr/bin/env python3
"""Issue 17's acceptance (operator controls) on a real mixed fleet: two `stagehand serve` hosts and
one Backstage 0.19 worker (bench/backstage-peer/peer.js --serve-tasks, Backstage's own
DefaultSchedulerService) on one PostgreSQL database, sharing the global task `shared` (every 1 s).
Every run of every task, on any of the three, appends a JSON line {"host", "task", "event":
"start"|"end", "t": wall ms} to one events file, from which the expectations are checked:

  catch-up  `catchup` (stagehand only: Backstage has no catch-up window) is a `*/10 * * * * *`
            cron task with `catchupWindow: 0s`. Both stagehand hosts are stopped (SIGTERM) just
            after one of its runs and restarted 13.5 s after that slot, so that the next slot is
            missed by more than the window's 2 s grace: the first start after the restart must be
            at the following slot (within 1 s after it), none before. Meanwhile the Backstage
            worker alone keeps running `shared`, which shows it takes part.
  pause     just after a run of `shared` starts, it is paused through h2's REST API while that run
            is in progress: the run ends normally (the pause takes effect at its end), and for 15 s
            no host starts `shared` (Backstage included); it is resumed through h1 and must start
            again within 5 s. Then the same with `backstage-only` (registered by the Backstage
            worker alone, so its run is Backstage's): paused through h2 just after a Backstage run
            starts, no start for 5 s, resumed through h1, and it must start again within 5 s. (A
            Backstage worker cannot release a run whose ticket the pause marked: the pause brings
            the run's expiry forward to the lease, 2 s here, and the sweep then pauses the task.)
  retry     `retried` (stagehand only) fails every time, with `retry: {attempts: 2, backoff: 1s}`
            on a `*/30 * * * * *` cron: each slot seen in full has 3 starts within 6 s, then none
            until the next slot. Skipped, with the reason, when `stagehand config check` refuses
            the `retry` key (not built yet).
  reload    a task `added` is written into h1's config and h1 gets SIGHUP: it must start within
            5 s, h1 keeping its pid; then a broken config (a bad cron) and SIGHUP:
            `stagehand_config_last_reload_successful` must read 0 and `added` and `shared` must
            keep starting.

  operator_controls.py [--stagehand BIN] [--modules DIR] [--out DIR]

--modules is the Backstage peer's node_modules (default: what bench/backstage-peer/install.sh
prints, installing it on first use). Uses the PostgreSQL of scripts/lib/postgres.sh when
STAGEHAND_TEST_POSTGRES_URL is set (as under scripts/test), otherwise starts a throwaway one.
Prints what it measured; exits 1 naming every broken expectation, 77 (skipped) when node or npm
is missing."""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from backstage_worker import (Peer, Verdicts, event_command, now_ms, peer_modules,  # noqa: E402
                              per_host, read_events, starts)
from harness import Fleet, Postgres, wait_for, with_database  # noqa: E402

PLUGIN = "opcontrols"
SKIP = 77

CATCHUP_PERIOD_S = 10
RETRY_PERIOD_S = 30
PAUSE_S = 15
SHARED_WORK_S = 0.6


class Context:
    pass


def retry_supported(ctx, tasks):
    """Whether `stagehand config check` accepts the retry task; (bool, its message)."""
    path = os.path.join(ctx.out, "retry-check.yaml")
    with open(path, "w") as f:
        json.dump({"backend": {"database": {"client": "pg", "connection": {"host": "127.0.0.1"}}},
                   "stagehand": {"plugins": {PLUGIN: {"tasks": {"retried": tasks["retried"]}}}}},
                  f)
    done = subprocess.run([ctx.stagehand, "config", "check", "--config", path],
                          capture_output=True, text=True, timeout=30)
    return done.returncode == 0, (done.stdout + done.stderr).strip()


def wait_for_start(ctx, task, after_ms, timeout_s, host=None):
    found = wait_for(lambda: starts(read_events(ctx.events), task, after=after_ms, host=host),
                     timeout_s, 0.01)
    return found[0] if found else None


def catchup_phase(ctx, fleet, v, align):
    """With `align`, the outage begins at a slot S with S mod 30 s = 10 s, so that it covers
    S + 10 s (20 mod 30) and no slot of `retried` (0 and 30)."""
    period_ms = CATCHUP_PERIOD_S * 1000
    run = None
    deadline = time.monotonic() + RETRY_PERIOD_S + 2 * CATCHUP_PERIOD_S
    while time.monotonic() < deadline:
        run = wait_for_start(ctx, "catchup", now_ms(), 2 * CATCHUP_PERIOD_S)
        if run is None or not align:
            break
        slot_ms = (run["t"] // period_ms) * period_ms
        if (slot_ms // 1000) % RETRY_PERIOD_S == CATCHUP_PERIOD_S:
            break
    if not v.check(run is not None, "catchup runs on its slots before the outage", run):
        return None
    slot_ms = (run["t"] // period_ms) * period_ms
    v.figure("catchup start before the outage (ms after its slot)", round(run["t"] - slot_ms))
    terminating_ms = now_ms()
    for host in fleet.hosts:
        _, code = host.terminate()
        v.check(code == 0, f"{host.name} exits 0 on SIGTERM", code)
    stopped_ms = now_ms()
    missed_ms = slot_ms + period_ms
    restart_at_ms = missed_ms + 3500
    time.sleep(max(0, (restart_at_ms - now_ms()) / 1000))
    restarted_ms = now_ms()
    fleet.start()
    ready_ms = now_ms()
    outage = (terminating_ms, ready_ms)
    next_slot_ms = missed_ms + period_ms
    v.check(ready_ms < next_slot_ms - 200, "both hosts are ready before the next catchup slot",
            f"ready {round(ready_ms - next_slot_ms)} ms after it")
    first = wait_for_start(ctx, "catchup", restarted_ms, (next_slot_ms - now_ms()) / 1000 + 5)
    events = read_events(ctx.events)
    v.figure("stagehand hosts down (s)", round((restarted_ms - stopped_ms) / 1000, 1))
    alone = starts(events, "shared", after=stopped_ms, before=restarted_ms)
    v.figure("shared starts while stagehand was down, per host", per_host(alone))
    v.check(alone and all(e["host"] == "backstage" for e in alone),
            "the Backstage worker alone runs shared while both stagehand hosts are down",
            per_host(alone))
    v.check(not starts(events, "catchup", after=stopped_ms, before=restarted_ms),
            "catchup starts nowhere during the outage",
            starts(events, "catchup", after=stopped_ms, before=restarted_ms))
    if not v.check(first is not None, "catchup starts again after the restart", None):
        return outage
    v.figure("catchup first start after restart (ms after the slot that followed the missed one)",
             round(first["t"] - next_slot_ms))
    v.figure("restart (s after the missed slot)", round((restarted_ms - missed_ms) / 1000, 1))
    v.check(next_slot_ms <= first["t"] < next_slot_ms + 1000,
            "a catchupWindow: 0s task restarted after missing a slot does not run until its next "
            "slot (first start within 1 s after it, not before)",
            f"first start {round(first['t'] - next_slot_ms)} ms from the next slot "
            f"({round(first['t'] - restarted_ms)} ms after the restart)")
    skipped = sum(metric_value(h, "stagehand_task_slots_skipped_total", 'taskId="catchup"')
                  or 0 for h in fleet.hosts)
    v.figure("stagehand_task_slots_skipped_total{catchup} over both hosts", skipped)
    v.check(skipped >= 1, "the skipped slot is counted", skipped)
    return outage


def metric_value(host, name, label_part=""):
    for line in host.metrics().splitlines():
        if line.startswith(name) and label_part in line:
            try:
                return float(line.split()[-1])
            except ValueError:
                return None
    return None


def pause_phase(ctx, fleet, v):
    h1, h2 = fleet.hosts
    api = f"/api/{PLUGIN}/.stagehand/v1/tasks/shared"
    before_ms = now_ms()
    time.sleep(3)
    window = starts(read_events(ctx.events), "shared", after=before_ms)
    v.figure("shared starts in 3 s before the pause, per host", per_host(window))
    running = wait_for_start(ctx, "shared", now_ms(), 10)
    if not v.check(running is not None, "shared runs before the pause", None):
        return
    sent_ms = now_ms()
    status, body = h2.request("POST", f"{api}/pause", body=json.dumps(
        {"by": "operator_controls.py", "reason": "acceptance"}),
        headers={"Content-Type": "application/json"})
    answered_ms = now_ms()
    v.check(status == 200, "pause of shared through h2's REST API answers 200", (status, body))
    v.figure("pause sent (ms after the start of the run in progress; its host)",
             (round(sent_ms - running["t"]), running["host"]))
    time.sleep(max(0, (answered_ms + PAUSE_S * 1000 - now_ms()) / 1000))
    watched_ms = now_ms()
    events = read_events(ctx.events)
    during = starts(events, "shared", after=sent_ms, before=watched_ms)
    v.figure(f"shared starts in the {PAUSE_S} s after the pause, per host", per_host(during))
    v.check(not during, f"a paused task starts on none of the three for {PAUSE_S} s",
            [(e["host"], round(e["t"] - answered_ms)) for e in during])
    ends = [e for e in events if e["task"] == "shared" and e["event"] == "end" and
            e["host"] == running["host"] and e["t"] >= running["t"]]
    v.check(ends and not ends[0].get("aborted") and
            ends[0]["t"] - running["t"] >= SHARED_WORK_S * 1000 - 50,
            "the run in progress at the pause ends normally, on its own time",
            ends[:1] or "no end")
    status, body = h1.request("POST", f"{api}/resume")
    resumed_ms = now_ms()
    v.check(status == 200, "resume of shared through h1's REST API answers 200", (status, body))
    again = wait_for_start(ctx, "shared", resumed_ms, 5)
    v.check(again is not None, "shared starts again within 5 s of the resume",
            f"no start; h1's listing: {h1.request('GET', api.rsplit('/', 1)[0])}")
    if again:
        v.figure("first start after resume", f"{round(again['t'] - resumed_ms)} ms, on "
                 f"{again['host']}")
    time.sleep(3)
    after = starts(read_events(ctx.events), "shared", after=resumed_ms)
    v.figure("shared starts in the 3 s after the resume, per host", per_host(after))


def pause_backstage_phase(ctx, fleet, v):
    """Pauses `backstage-only` (a task only the Backstage worker registers) through h2 while the
    Backstage worker runs it, then resumes it through h1 after 5 s."""
    h1, h2 = fleet.hosts
    api = f"/api/{PLUGIN}/.stagehand/v1/tasks/backstage-only"
    running = wait_for_start(ctx, "backstage-only", now_ms(), 10)
    if not v.check(running is not None, "the Backstage worker runs backstage-only", None):
        return
    sent_ms = now_ms()
    status, body = h2.request("POST", f"{api}/pause", body=json.dumps(
        {"by": "operator_controls.py", "reason": "acceptance"}),
        headers={"Content-Type": "application/json"})
    v.check(status == 200, "pause of backstage-only (running on Backstage) through h2 answers 200",
            (status, body))
    v.figure("backstage-only: pause sent (ms after the start of Backstage's run)",
             round(sent_ms - running["t"]))
    time.sleep(5)
    events = read_events(ctx.events)
    during = starts(events, "backstage-only", after=sent_ms)
    v.check(not during, "a task paused during a Backstage run starts nowhere for 5 s",
            [(e["host"], round(e["t"] - sent_ms)) for e in during])
    ends = [e for e in events if e["task"] == "backstage-only" and e["event"] == "end" and
            e["t"] >= running["t"]]
    v.check(ends and not ends[0].get("aborted"),
            "the Backstage run in progress at the pause ends normally", ends[:1] or "no end")
    status, body = h1.request("POST", f"{api}/resume")
    resumed_ms = now_ms()
    v.check(status == 200, "resume of backstage-only through h1 answers 200", (status, body))
    again = wait_for_start(ctx, "backstage-only", resumed_ms, 5)
    rows = ctx.db.query(fleet.database(), "select current_run_ticket, current_run_expires_at "
                        "from backstage_backend_tasks__tasks where id = 'backstage-only'")
    v.check(again is not None,
            "a task paused during a Backstage run starts again within 5 s of the resume",
            f"no start; its row 5 s after the resume: {rows}")
    if again:
        v.figure("backstage-only: first start after resume (ms)", round(again["t"] - resumed_ms))


def retry_phase(ctx, v, began_ms, ended_ms, outages):
    events = starts(read_events(ctx.events), "retried", after=began_ms, before=ended_ms)
    period_ms = RETRY_PERIOD_S * 1000
    slots = {}
    for e in events:
        slots.setdefault((e["t"] // period_ms) * period_ms, []).append(e)
    full = [s for s in sorted(slots) if s > began_ms and s + period_ms < ended_ms and
            not any(a < s + period_ms and s < b for a, b in outages)]
    shapes = {}
    for slot in full:
        runs = slots[slot]
        shapes[slot] = [round(e["t"] - slot) for e in runs]
        v.check(len(runs) == 3 and runs[-1]["t"] - slot <= 6000,
                "a task failing with retry {attempts: 2, backoff: 1s} runs 3 times within 6 s "
                "of its slot, then not until its next slot",
                f"starts at {shapes[slot]} ms after the slot")
    v.figure("retried: starts per slot (ms after it)", list(shapes.values()))
    v.check(full, "at least one retried slot was watched in full", sorted(slots))


def reload_phase(ctx, fleet, v):
    h1 = fleet.hosts[0]
    pid = h1.pid
    with open(h1.config_path) as f:
        config = json.load(f)
    added = {"schedule": {"frequency": {"seconds": 1}, "timeout": {"seconds": 30}},
             "command": event_command(ctx.events, "added", 0.1)}
    config["stagehand"] = {"plugins": {PLUGIN: {"tasks": {"added": added}}}}
    with open(h1.config_path, "w") as f:
        json.dump(config, f, indent=1)
    sent_ms = now_ms()
    os.kill(pid, signal.SIGHUP)
    first = wait_for_start(ctx, "added", sent_ms, 5, host="h1")
    v.check(first is not None, "a task added to h1's config starts within 5 s of SIGHUP", None)
    if first:
        v.figure("added: first start after SIGHUP (ms)", round(first["t"] - sent_ms))
    v.check(h1.alive() and h1.pid == pid, "h1 was not restarted", (h1.alive(), pid, h1.pid))
    v.check(metric_value(h1, "stagehand_config_last_reload_successful") == 1,
            "stagehand_config_last_reload_successful reads 1 after the good reload",
            metric_value(h1, "stagehand_config_last_reload_successful"))

    added["schedule"]["frequency"] = {"cron": "61 * * * *"}
    with open(h1.config_path, "w") as f:
        json.dump(config, f, indent=1)
    os.kill(pid, signal.SIGHUP)
    zero = wait_for(lambda: metric_value(h1, "stagehand_config_last_reload_successful") == 0,
                    5, 0.1)
    v.check(zero, "stagehand_config_last_reload_successful reads 0 after the broken reload",
            metric_value(h1, "stagehand_config_last_reload_successful"))
    refused_ms = now_ms()
    time.sleep(4)
    events = read_events(ctx.events)
    kept = starts(events, "added", after=refused_ms, host="h1")
    shared = starts(events, "shared", after=refused_ms)
    v.figure("in the 4 s after the broken reload: added starts on h1, shared starts per host",
             (len(kept), per_host(shared)))
    v.check(len(kept) >= 2 and shared,
            "a broken config on reload leaves the old tasks running (added every 1 s, shared)",
            (len(kept), per_host(shared)))
    v.check(h1.alive() and h1.pid == pid, "h1 is still the same process after the broken reload",
            (h1.alive(), pid, h1.pid))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stagehand", default=os.path.join(ROOT, "build", "ci", "apps",
                                                            "stagehand", "stagehand"))
    parser.add_argument("--modules", help="the Backstage peer's node_modules folder")
    parser.add_argument("--out", default=os.path.join(ROOT, "build", "operator-controls"))
    args = parser.parse_args()
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            print(f"operator_controls.py: SKIPPED: {tool} is not installed (scripts/bootstrap)")
            return SKIP
    if "STAGEHAND_TEST_POSTGRES_URL" not in os.environ:
        return with_database("postgres", __file__, sys.argv[1:])
    began = time.monotonic()
    ctx = Context()
    ctx.db = Postgres()
    ctx.stagehand = os.path.abspath(args.stagehand)
    ctx.probe = None
    ctx.out = os.path.abspath(args.out)
    os.makedirs(ctx.out, exist_ok=True)
    ctx.modules = peer_modules(args)
    ctx.events = os.path.join(ctx.out, "events.jsonl")
    open(ctx.events, "w").close()
    v = Verdicts()

    timeout = {"seconds": 30}
    tasks = {
        "shared": {"schedule": {"frequency": {"seconds": 1}, "timeout": timeout},
                   "command": event_command(ctx.events, "shared", SHARED_WORK_S)},
        "catchup": {"schedule": {"frequency": {"cron": f"*/{CATCHUP_PERIOD_S} * * * * *"},
                                 "timeout": timeout, "catchupWindow": "0s"},
                    "command": event_command(ctx.events, "catchup", 0)},
        "retried": {"schedule": {"frequency": {"cron": f"*/{RETRY_PERIOD_S} * * * * *"},
                                 "timeout": timeout,
                                 "retry": {"attempts": 2, "backoff": "1s"}},
                    "command": event_command(ctx.events, "retried", 0, exit_code=3)},
    }
    retry_ok, retry_message = retry_supported(ctx, tasks)
    if not retry_ok:
        del tasks["retried"]

    database = "backstage_plugin_" + PLUGIN
    ctx.db.drop_database(database)
    fleet = Fleet(ctx, PLUGIN, tasks, hosts=2, track_trees=False)
    peer = Peer(ctx, fleet, [{"id": task, "frequency": {"seconds": 1}, "timeout": timeout,
                              "workMs": int(SHARED_WORK_S * 1000)}
                             for task in ("shared", "backstage-only")])
    outages = []
    try:
        fleet.start()
        peer.start()
        fleet_ms = now_ms()
        print(f"fleet: h1, h2 (stagehand) and the Backstage worker on {database}", flush=True)
        outage = catchup_phase(ctx, fleet, v, align=retry_ok)
        if outage:
            outages.append(outage)
        pause_phase(ctx, fleet, v)
        pause_backstage_phase(ctx, fleet, v)
        reload_phase(ctx, fleet, v)
        if retry_ok:
            retry_phase(ctx, v, fleet_ms, now_ms(), outages)
        else:
            print("SKIPPED retry: `stagehand config check` refuses the task:\n  " +
                  retry_message.replace("\n", "\n  "), flush=True)
            v.figures["retry"] = "skipped: " + retry_message
    finally:
        code = peer.stop()
        fleet.stop()
    v.check(code == 0, "the Backstage worker exits 0 on SIGTERM", code)
    for host in fleet.hosts:
        v.check(not host.unexpected_exits(), f"{host.name} never exited unexpectedly",
                host.unexpected_exits())
    return v.finish(ctx.out, "operator controls", time.monotonic() - began)


if __name__ == "__main__":
    sys.exit(main())
