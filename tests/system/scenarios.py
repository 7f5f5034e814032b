"""The system suite's scenarios. Each builds its own fleet on its own plugin (so its own database),
injects one fault, observes, stops the fleet and checks the event sink. Each returns a dict:

  {"name", "faults": [{kind, host, start_ns, end_ns, duration_ms, ...}],
   "figures": {...}, "checks": [{"guarantee", "observed", "ok"}]}

Timing constants are the fleet's: lease 2 s, janitor = lease, safety-net poll 1 s."""

import json
import multiprocessing
import os
import random
import re
import socket
import threading
import time

import checker
from harness import (Fleet, children_of, cpu_seconds, fd_count, http_request, mono_ns,
                     process_state, thread_count, wait_for)

LEASE_S = 2.0
JANITOR_S = 2.0
TAKEOVER_BOUND_S = LEASE_S + JANITOR_S + 1.0
CRON_TOLERANCE_NS = 500_000_000
CADENCE_TOLERANCE_NS = 500_000_000
MS = 1_000_000
S = 1_000_000_000
# The name of the task executor's threads (src/engine/executor.h, Executor::kThreadName).
EXECUTOR_THREAD = "stagehand-run"


def sched(frequency, timeout_s):
    return {"frequency": frequency, "timeout": {"seconds": timeout_s}}


def base_tasks(fleet_probe, small=4):
    """`long`: a 30 s run due every 500 ms (always running somewhere); `cron`: every second, 100 ms
    of work; `tick<i>`: every 300 ms, 50 ms of work (spread the claims over the hosts). On a
    database that keeps whole seconds (MySQL), `long` and the ticks are due every second."""
    db = fleet_probe.ctx.db
    tasks = {
        "long": {"schedule": sched({"milliseconds": max(500, db.min_cadence_ms)}, 60),
                 "command": fleet_probe("long", 30000)},
        "cron": {"schedule": sched({"cron": "* * * * * *"}, 10), "command": fleet_probe("cron", 100)},
    }
    for task, period_ms in tick_tasks(fleet_probe.ctx, small):
        tasks[task] = {"schedule": sched({"milliseconds": period_ms}, 10),
                       "command": fleet_probe(task, 50)}
    return tasks


class _Probe:
    def __init__(self, ctx, plugin):
        self.ctx = ctx
        self.plugin = plugin

    def __call__(self, task_id, work_ms, behaviour=None, behaviour_ms=0):
        sink = os.path.join(self.ctx.out, self.plugin, "events.log")
        argv = [self.ctx.probe, sink, task_id, str(int(work_ms))]
        if behaviour:
            argv += [behaviour, str(int(behaviour_ms))]
        return argv


def make_fleet(ctx, plugin, tasks_fn, **kwargs):
    return Fleet(ctx, plugin, tasks_fn(_Probe(ctx, plugin)), **kwargs)


def check(checks, guarantee, observed, ok):
    checks.append({"guarantee": guarantee, "observed": observed, "ok": bool(ok)})


def running_run(fleet, task, after_ns=0, exclude_host=None):
    """The newest run of `task` started after `after_ns` that has not ended (nor been seen dead),
    or None."""
    runs, _ = checker.read_runs(fleet.sink)
    live = [r for r in runs if r.task == task and r.start >= after_ns and r.end is None
            and r.gone is None and r.host != exclude_host]
    return max(live, key=lambda r: r.start) if live else None


def find_run(fleet, run_id):
    runs, _ = checker.read_runs(fleet.sink)
    return next((r for r in runs if r.run_id == run_id), None)


def wall_to_mono_offset():
    best = None
    for _ in range(5):
        a = time.monotonic_ns()
        w = time.time_ns()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, w - (a + b) // 2)
    return best[1]


def cron_window(begin_ns, end_ns, period_ns, lead_ns=2 * S):
    """The wall slots (as monotonic ns) a cron check covers: from the first slot at least `lead_ns`
    after `begin_ns` to the last slot a period before `end_ns`."""
    offset = wall_to_mono_offset()
    first_wall = -(-(begin_ns + offset + lead_ns) // period_ns) * period_ns
    last_wall = ((end_ns + offset) // period_ns) * period_ns - period_ns
    return first_wall - offset, last_wall - offset


def cron_checks(runs_by_task, checks, cron_tasks, begin_ns, end_ns, faults=(), idle=(),
                lead_ns=2 * S, interrupted=()):
    """The cron guarantees for each (task, period_ns) of `cron_tasks`: every slot met, no slot with
    two starts, no start away from its slot (checker.cron_slots). Returns the figures by task."""
    figures, missed, doubles, off_slot = {}, 0, 0, 0
    for task, period_ns in cron_tasks:
        first, last = cron_window(begin_ns, end_ns, period_ns, lead_ns)
        cron = checker.cron_slots(runs_by_task.get(task, []), first, last, period_ns,
                                  CRON_TOLERANCE_NS, faults=faults, idle=idle,
                                  interrupted=interrupted.get(task, ()) if interrupted else ())
        cron.pop("missed_at_ns")
        figures[task] = cron
        missed += cron["missed"]
        doubles += cron["double_starts"]
        off_slot += cron["off_slot_starts"]
    named = ", ".join(task for task, _ in cron_tasks)
    check(checks, f"every cron slot runs within {CRON_TOLERANCE_NS // MS} ms (missed = 0, slots "
          f"during a fault's takeover window excused; {named})", missed, missed == 0)
    check(checks, f"each cron slot starts at most once (slots with two starts = 0; {named})",
          doubles if not doubles else [figures[t]["doubles"] for t, _ in cron_tasks
                                       if figures[t]["doubles"]], doubles == 0)
    check(checks, "no cron start away from its slot: none before it (1 ms allowance), none more "
          f"than {CRON_TOLERANCE_NS // MS} ms after it, not even the \"slot − 1 s\" start of a "
          "registration; the one catch-up after a fault's lost slot counts for it "
          f"(off-slot starts = 0; {named})",
          off_slot if not off_slot else [figures[t]["off_slot"] for t, _ in cron_tasks
                                         if figures[t]["off_slot"]], off_slot == 0)
    return figures


def common_checks(fleet, runs, checks, freezes=(), faults=(), dead=(), cron_tasks=(("cron", S),),
                  cadence_tasks=(), begin_ns=0, end_ns=0, skip_schedule=False, interrupted=None):
    """Checks every scenario makes: no overlap (a run lasting until its last process is dead, when
    the fleet watches its trees), no daemon exiting by itself, no run lost, no process outliving
    its daemon, cron slots and duration cadences kept (`faults`: the takeover windows;
    `interrupted`: by task, the slots whose run a graceful stop interrupted, interrupted_slots)."""
    found = checker.overlaps(runs, freezes)
    check(checks, "no two runs of one global task at once, a run lasting until its last process "
          "is dead (overlaps = 0)", len(found) if not found else found[:3], not found)
    exits = {h.name: h.unexpected_exits() for h in fleet.hosts if h.unexpected_exits()}
    check(checks, "no daemon exits unless told to, and each stops within 15 s of SIGTERM",
          exits or 0, not exits)
    lost = checker.unfinished(runs, dead)
    check(checks, "no run lost silently (every run of a live host ends)", len(lost), not lost)
    if fleet.watcher:
        survivors = checker.survivors(runs)
        check(checks, "no process of a run outlives its daemon's stop (survivors = 0)",
              len(survivors) if not survivors else survivors[:5], not survivors)
    figures = {"runs": len(runs), "overlaps": found[:10],
               "runs_per_host": {h.name: sum(1 for r in runs if r.host == h.name)
                                 for h in fleet.hosts}}
    if skip_schedule:
        return figures
    by_task = checker.by_task(runs)
    present = [(task, period) for task, period in cron_tasks if task in by_task]
    if present:
        cron = cron_checks(by_task, checks, present, begin_ns, end_ns, faults=faults,
                           interrupted=interrupted)
        figures["cron"] = cron if len(present) > 1 else cron[present[0][0]]
    late_total, cadence = 0, {}
    for task, period_ms in cadence_tasks:
        task_runs = [r for r in by_task.get(task, []) if begin_ns + 2 * S <= r.start <= end_ns]
        gaps = checker.cadence_gaps(task_runs, period_ms * MS, CADENCE_TOLERANCE_NS, faults)
        cadence[task] = gaps
        late_total += gaps["late"]
    if cadence_tasks:
        figures["cadence"] = cadence
        check(checks, f"duration tasks start on time within {CADENCE_TOLERANCE_NS // MS} ms "
              "(Backstage's catch-up rule; fault windows excused)", late_total, late_total == 0)
    return figures


def tick_tasks(ctx, n=4):
    return [(f"tick{i}", max(300, ctx.db.min_cadence_ms)) for i in range(n)]


def _wait_long_owner(fleet, timeout_s=20):
    run = wait_for(lambda: running_run(fleet, "long"), timeout_s)
    if run is None:
        raise RuntimeError("task `long` never started")
    time.sleep(LEASE_S / 2)  # let the owner renew its lease at least once
    return run


def scenario_kill(ctx):
    """Fault 1: SIGKILL of the host running `long`."""
    fleet = make_fleet(ctx, "sys-kill", base_tasks)
    checks, faults = [], []
    began = mono_ns()
    fleet.start()
    try:
        old = _wait_long_owner(fleet)
        victim = fleet.host(old.host)
        killed = victim.kill()
        new = wait_for(lambda: running_run(fleet, "long", killed, victim.name), TAKEOVER_BOUND_S + 10)
        takeover_s = (new.start - killed) / S if new else None
        victim.start().wait_ready()
        restarted = mono_ns()
        faults.append({"kind": "SIGKILL", "host": victim.name, "start_ns": killed,
                       "end_ns": restarted, "duration_ms": (restarted - killed) / MS,
                       "takeover_ms": takeover_s * 1000 if takeover_s else None})
        time.sleep(3)
    finally:
        ended = mono_ns()
        fleet.stop()
    runs, _ = checker.read_runs(fleet.sink)
    old_final = next(r for r in runs if r.run_id == old.run_id)
    check(checks, f"takeover after SIGKILL within lease + janitor + 1 s = {TAKEOVER_BOUND_S:.1f} s",
          f"{takeover_s:.3f} s" if takeover_s else "never", takeover_s and takeover_s <= TAKEOVER_BOUND_S)
    # Stopped by itself (the probe sees its parent change: `orphan`) or killed by whatever
    # supervised it: either way, no process of the run lives on unsupervised.
    orphan_ms = (old_final.last - killed) / MS
    check(checks, "the killed host's command does not outlive it (its processes dead within 1 s "
          "of the kill: no orphan)", f"{old_final.end_kind or 'killed'}, dead {orphan_ms:.0f} ms "
          "after the kill" if checker.seen_dead(old_final) else "never seen dead",
          checker.seen_dead(old_final) and orphan_ms <= 1000)
    excused = [(killed, killed + int(TAKEOVER_BOUND_S * S))]
    figures = common_checks(fleet, runs, checks, faults=excused, begin_ns=began, end_ns=ended,
                            cadence_tasks=tick_tasks(ctx), dead=[(victim.name, killed - S)])
    figures["takeover_ms"] = takeover_s * 1000 if takeover_s else None
    return {"name": "kill", "faults": faults, "figures": figures, "checks": checks}


def scenario_freeze(ctx):
    """Fault 2: SIGSTOP (daemon and its commands) for longer than the lease, then SIGCONT."""
    fleet = make_fleet(ctx, "sys-freeze", base_tasks)
    checks, faults, freezes = [], [], []
    began = mono_ns()
    fleet.start()
    freeze_s = LEASE_S * 2.5
    try:
        old = _wait_long_owner(fleet)
        victim = fleet.host(old.host)
        frozen = victim.freeze()
        new = wait_for(lambda: running_run(fleet, "long", frozen, victim.name), freeze_s)
        remaining = freeze_s - (mono_ns() - frozen) / S
        if remaining > 0:
            time.sleep(remaining)
        ticket_before = fleet.row("long")
        woke = victim.thaw()
        freezes.append({"host": victim.name, "start": frozen, "end": woke})
        old_end = wait_for(lambda: checker.seen_dead(find_run(fleet, old.run_id)) or None, 10)
        time.sleep(LEASE_S)
        ticket_after = fleet.row("long")
        new_state = find_run(fleet, new.run_id) if new else None
        faults.append({"kind": "SIGSTOP/SIGCONT", "host": victim.name, "start_ns": frozen,
                       "end_ns": woke, "duration_ms": (woke - frozen) / MS,
                       "takeover_ms": (new.start - frozen) / MS if new else None})
        time.sleep(1)
    finally:
        ended = mono_ns()
        fleet.stop()
    runs, _ = checker.read_runs(fleet.sink)
    old_final = next(r for r in runs if r.run_id == old.run_id)
    # Every run caught by the freeze (not only `long`) wakes with it and must stop at once.
    caught = [r for r in runs if r.host == victim.name and r.start < frozen and r.last >= woke]
    ticks_after_wake = sum(1 for r in caught for t in r.ticks if t >= woke)
    wake_to_end_ms = (max(r.last for r in caught) - woke) / MS if old_end else None
    check(checks, f"another host takes over while the owner is frozen, within {TAKEOVER_BOUND_S:.1f} s",
          f"{(new.start - frozen) / S:.3f} s" if new else "never",
          new is not None and (new.start - frozen) / S <= TAKEOVER_BOUND_S)
    check(checks, "the frozen run does nothing more before SIGCONT (ticks while frozen = 0)",
          sum(1 for t in old_final.ticks if frozen + 5 * MS < t < woke),
          not any(frozen + 5 * MS < t < woke for t in old_final.ticks))
    check(checks, "after SIGCONT the woken host stops its runs promptly (≤ 1000 ms; "
          "residual ticks after wake reported)",
          f"{wake_to_end_ms:.1f} ms for the last of {len(caught)} run(s), {ticks_after_wake} "
          f"tick(s) after wake, `long` ended {old_final.end_kind or 'killed'}"
          if wake_to_end_ms is not None else "never ends", wake_to_end_ms is not None and
          wake_to_end_ms <= 1000)
    check(checks, "the woken host never releases over the new owner's ticket",
          f"ticket before wake {ticket_before}, {LEASE_S:.0f} s after: {ticket_after}; new run "
          f"{'still running' if new_state and new_state.end is None else 'ended'}",
          ticket_before and ticket_before == ticket_after and new_state and new_state.end is None)
    # The only overlap allowed is the woken process's own wake-to-stop time, reported above.
    # In whole nanoseconds from the runs themselves: through milliseconds (a float) the window
    # could end a nanosecond before the run it is for, and report that nanosecond as an overlap.
    last_caught = max(r.last for r in caught) if old_end else woke
    post_wake = [(victim.name, woke, max(woke, last_caught))]
    allowed = [{"host": h, "start": s, "end": e} for h, s, e in post_wake]
    strict = checker.overlaps(runs, freezes)
    excused = [(frozen, frozen + int(TAKEOVER_BOUND_S * S))]
    figures = common_checks(fleet, runs, checks, freezes=freezes + allowed, faults=excused,
                            begin_ns=began, end_ns=ended, cadence_tasks=tick_tasks(ctx))
    figures.update({"freeze_ms": (woke - frozen) / MS, "wake_to_end_ms": wake_to_end_ms,
                    "ticks_after_wake": ticks_after_wake,
                    "post_wake_overlap_ms": round(sum(o["ms"] for o in strict), 3),
                    "runs_caught_by_freeze": len(caught),
                    "takeover_ms": (new.start - frozen) / MS if new else None})
    return {"name": "freeze", "faults": faults, "figures": figures, "checks": checks}


def scenario_partition(ctx, mode="blackhole"):
    """Fault 3: the owner of `long` is cut from PostgreSQL by its proxy (`blackhole`: no byte moves,
    as when packets are dropped; `reset`: connections reset and refused), then healed."""
    name = "partition" if mode == "blackhole" else "partition-reset"
    fleet = make_fleet(ctx, "sys-" + name, base_tasks)
    checks, faults = [], []
    began = mono_ns()
    fleet.start()
    hold_s = 6.0
    try:
        old = _wait_long_owner(fleet)
        victim = fleet.host(old.host)
        cut = mono_ns()
        victim.proxy.set_mode(mode)
        new = wait_for(lambda: running_run(fleet, "long", cut, victim.name), hold_s)
        remaining = hold_s - (mono_ns() - cut) / S
        if remaining > 0:
            time.sleep(remaining)
        victim.proxy.set_mode("up")
        healed = mono_ns()
        faults.append({"kind": f"partition ({mode})", "host": victim.name, "start_ns": cut,
                       "end_ns": healed, "duration_ms": (healed - cut) / MS,
                       "takeover_ms": (new.start - cut) / MS if new else None})
        rejoined = wait_for(lambda: any(r.host == victim.name and r.start > healed for r in
                                        checker.read_runs(fleet.sink)[0]), 15)
        rejoin_ms = (mono_ns() - healed) / MS if rejoined else None
        time.sleep(2)
    finally:
        ended = mono_ns()
        fleet.stop()
    runs, _ = checker.read_runs(fleet.sink)
    old_final = next(r for r in runs if r.run_id == old.run_id)
    fenced_ms = (old_final.last - cut) / MS
    check(checks, f"the partitioned host fences itself before its lease lapses (< {LEASE_S * 1000:.0f} ms "
          "after the cut)", f"run stopped {fenced_ms:.0f} ms after the cut "
          f"({old_final.end_kind or 'killed'})",
          checker.seen_dead(old_final) and fenced_ms < LEASE_S * 1000)
    check(checks, f"another host takes over within {TAKEOVER_BOUND_S:.1f} s",
          f"{(new.start - cut) / S:.3f} s" if new else "never",
          new is not None and (new.start - cut) / S <= TAKEOVER_BOUND_S)
    check(checks, "after the heal the host rejoins (runs a task again within 15 s)",
          f"{rejoin_ms:.0f} ms" if rejoin_ms is not None else "never", rejoin_ms is not None)
    excused = [(cut, cut + int(TAKEOVER_BOUND_S * S))]
    figures = common_checks(fleet, runs, checks, faults=excused, begin_ns=began, end_ns=ended,
                            cadence_tasks=tick_tasks(ctx))
    figures.update({"fence_ms": fenced_ms, "rejoin_ms": rejoin_ms,
                    "takeover_ms": (new.start - cut) / MS if new else None})
    return {"name": name, "faults": faults, "figures": figures, "checks": checks}


def scenario_partition_reset(ctx):
    return scenario_partition(ctx, "reset")


def scenario_pg_restart(ctx):
    """Fault 4: the database server restarts while runs are going (PostgreSQL: `pg_ctl restart -m
    fast`; MariaDB: a clean shutdown and a new server process)."""
    fleet = make_fleet(ctx, "sys-pgrestart", base_tasks)
    checks, faults = [], []
    began = mono_ns()
    fleet.start()
    try:
        _wait_long_owner(fleet)
        time.sleep(1)
        down = mono_ns()
        ctx.db.restart()
        up = mono_ns()
        faults.append({"kind": f"{ctx.db.name} restart", "host": ctx.db.name, "start_ns": down,
                       "end_ns": up, "duration_ms": (up - down) / MS})
        resumed = wait_for(lambda: {r.task for r in checker.read_runs(fleet.sink)[0]
                                    if r.start > up} >= {"cron", "tick0", "tick1"}, 15)
        resume_ms = (mono_ns() - up) / MS if resumed else None
        faults[-1]["takeover_ms"] = resume_ms
        time.sleep(4)
        alive = {h.name: h.alive() for h in fleet.hosts}
        ready = {h.name: h.request("GET", "/.backstage/health/v1/readiness")[0] for h in fleet.hosts}
    finally:
        ended = mono_ns()
        fleet.stop()
    runs, _ = checker.read_runs(fleet.sink)
    check(checks, "every host survives the restart and stays ready", f"alive {alive}, readiness {ready}",
          all(alive.values()) and all(v == 200 for v in ready.values()))
    check(checks, "tasks run again after the restart (within 15 s)",
          f"{resume_ms:.0f} ms" if resume_ms is not None else "never", resume_ms is not None)
    excused = [(down, up + int(TAKEOVER_BOUND_S * S))]
    figures = common_checks(fleet, runs, checks, faults=excused, begin_ns=began, end_ns=ended,
                            cadence_tasks=tick_tasks(ctx))
    figures.update({"restart_ms": (up - down) / MS, "resume_ms": resume_ms})
    return {"name": "pg-restart", "faults": faults, "figures": figures, "checks": checks}


def scenario_skew(ctx):
    """Fault 5: host h3's wall clock runs 3 h 0.4 s ahead (faketime; monotonic clock untouched)."""
    fleet = make_fleet(ctx, "sys-skew", base_tasks)
    skewed = fleet.hosts[2]
    # libfaketime preloaded directly: the `faketime` program forks, so its pid is not the daemon's.
    library = next((p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                                "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
                                "/usr/lib/faketime/libfaketimeMT.so.1") if os.path.exists(p)), None)
    if library is None:
        raise RuntimeError("libfaketimeMT.so.1 not found (Debian package faketime)")
    skewed.extra_env = {"LD_PRELOAD": library, "FAKETIME": "+10800.4s",
                        "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    checks = []
    began = mono_ns()
    fleet.start()
    try:
        time.sleep(14)
    finally:
        ended = mono_ns()
        fleet.stop()
    runs, _ = checker.read_runs(fleet.sink)
    figures = common_checks(fleet, runs, checks, begin_ns=began, end_ns=ended,
                            cadence_tasks=tick_tasks(ctx))
    skewed_runs = [r for r in runs if r.host == skewed.name]
    check(checks, "the skewed host takes part (runs tasks)", len(skewed_runs), skewed_runs)
    figures["skewed_host"] = skewed.name
    figures["skewed_host_cron_runs"] = sum(1 for r in skewed_runs if r.task == "cron")
    faults = [{"kind": "clock skew +3 h 0.4 s (faketime)", "host": skewed.name, "start_ns": began,
               "end_ns": ended, "duration_ms": (ended - began) / MS}]
    return {"name": "skew", "faults": faults, "figures": figures, "checks": checks}


def scenario_rolling(ctx):
    """Fault 6: every host in turn gets SIGTERM and is replaced by a new process."""
    fleet = make_fleet(ctx, "sys-rolling", base_tasks)
    checks, faults, handovers, codes, stops = [], [], [], [], []
    began = mono_ns()
    fleet.start()
    try:
        _wait_long_owner(fleet)
        pending = list(fleet.hosts)
        while pending:
            owner = running_run(fleet, "long")
            host = next((h for h in pending if owner and h.name == owner.host), pending[0])
            pending.remove(host)
            stopped_pid = host.pid
            sent, code = host.terminate()
            codes.append((host.name, code))
            stops.append((stopped_pid, sent, mono_ns()))
            if owner and owner.host == host.name:
                old = find_run(fleet, owner.run_id)
                new = wait_for(lambda: running_run(fleet, "long", sent, host.name), 10)
                if new:
                    handovers.append({"host": host.name, "stop_ms": ((old.last - sent) / MS),
                                      "handover_ms": (new.start - old.last) / MS})
                else:
                    handovers.append({"host": host.name, "handover_ms": None})
            host.start().wait_ready()
            back = mono_ns()
            faults.append({"kind": "SIGTERM + new process", "host": host.name, "start_ns": sent,
                           "end_ns": back, "duration_ms": (back - sent) / MS,
                           "takeover_ms": handovers[-1]["handover_ms"] if handovers and
                           handovers[-1]["host"] == host.name else None})
            time.sleep(1.5)
        time.sleep(2)
    finally:
        ended = mono_ns()
        fleet.stop()
    runs, _ = checker.read_runs(fleet.sink)
    interrupted = {"cron": interrupted_slots(fleet, "cron", S, stops)}
    check(checks, "each SIGTERM ends the daemon with exit code 0", codes,
          all(code == 0 for _, code in codes))
    worst = max((h["handover_ms"] for h in handovers if h["handover_ms"] is not None), default=None)
    check(checks, "a graceful stop hands its running task over at once (< 1000 ms, no lease wait)",
          [f"{h['host']}: {h['handover_ms']:.0f} ms" if h["handover_ms"] is not None else
           f"{h['host']}: never" for h in handovers],
          handovers and all(h["handover_ms"] is not None and h["handover_ms"] < 1000
                            for h in handovers))
    # The registrations of the new processes excuse nothing: a slot runs once whoever registers.
    figures = common_checks(fleet, runs, checks, begin_ns=began, end_ns=ended,
                            cadence_tasks=tick_tasks(ctx), interrupted=interrupted)
    figures.update({"handovers": handovers, "worst_handover_ms": worst})
    return {"name": "rolling", "faults": faults, "figures": figures, "checks": checks}


def interrupted_slots(fleet, task, period_ns, stops):
    """The slots of cron task `task` (monotonic ns) whose run a graceful stop interrupted, from the
    stopped daemons' run history: a run recorded by the pid the harness sent SIGTERM, cancelled as
    "interrupted by shutdown", ended between that SIGTERM and the daemon's exit, started on its
    slot (within the cron tolerance), the slot on the task's grid. `stops`: (pid, sent_ns,
    exited_ns) of each SIGTERM."""
    ms = fleet.db.epoch_ms
    rows = fleet.db.query(fleet.database(), (
        f"select pid, {ms('slot_at')}, {ms('started_at')}, {ms('ended_at')} "
        "from stagehand_task_runs where task_id = '" + task +
        "' and outcome = 'cancelled' and error_json like '%interrupted by shutdown%' "
        "and slot_at is not null and ended_at is not null"))
    offset = wall_to_mono_offset()
    slots = set()
    for pid, slot_at, started_at, ended_at in rows:
        slot_wall = int(slot_at) * MS  # milliseconds since the epoch
        if slot_wall % period_ns != 0:
            continue
        slot, started, ended = (slot_wall - offset, int(started_at) * MS - offset,
                                int(ended_at) * MS - offset)
        on_time = slot - MS <= started <= slot + CRON_TOLERANCE_NS
        # Times are read in whole milliseconds: a millisecond of slack around the stop window.
        stopped = any(int(pid) == stopped_pid and sent - MS <= ended <= exited + MS
                      for stopped_pid, sent, exited in stops)
        if on_time and stopped:
            slots.add(slot)
    return slots


def _metric_sum(text, name):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            try:
                total += float(line.rsplit(" ", 1)[1])
            except ValueError:
                pass
    return total


def _lags_ms(task_runs, period_ns):
    """Start lag of each run after the first: start − due, with due following Backstage's rule
    (due₀ = first start; dueₖ₊₁ = max(dueₖ + period, endₖ))."""
    lags, due = [], None
    for run in task_runs:
        if due is None:
            due = run.start
        else:
            lags.append(max(0, run.start - due) / MS)
        due = max(due + period_ns, run.last)
    return lags


def scenario_load(ctx):
    """Load: many global tasks with cadences from 100 ms to 2 s on 3 hosts."""
    count, seconds = ctx.load_tasks, ctx.load_seconds
    cadences = [100, 200, 500, 1000, 2000]

    def tasks(probe):
        return {f"l{i:03d}": {"schedule": sched({"milliseconds": cadences[i % len(cadences)]}, 10),
                              "command": probe(f"l{i:03d}", 0)} for i in range(count)}
    fleet = make_fleet(ctx, "sys-load", tasks, scheduler={"maxConcurrency": 64})
    checks = []
    fleet.start()
    time.sleep(2)
    window_start = mono_ns()
    cpu_before = {h.name: cpu_seconds(h.pid) for h in fleet.hosts}
    metrics_before = [h.metrics() for h in fleet.hosts]
    try:
        time.sleep(seconds)
        window_end = mono_ns()
        cpu_after = {h.name: cpu_seconds(h.pid) for h in fleet.hosts}
        metrics_after = [h.metrics() for h in fleet.hosts]
    finally:
        fleet.stop()
    runs, bad = checker.read_runs(fleet.sink)
    window = [r for r in runs if window_start <= r.start <= window_end]
    lags = []
    for task, task_runs in checker.by_task(runs).items():
        period = cadences[int(task[1:]) % len(cadences)] * MS
        in_window = [r for r in task_runs if r.start >= window_start - 3 * period and
                     r.start <= window_end]
        lags += _lags_ms(in_window, period)[2:]
    expected = sum(seconds * 1000 / cadences[i % len(cadences)] for i in range(count))
    span = (window_end - window_start) / S
    cpu = {}
    for name in cpu_before:
        if cpu_before[name] and cpu_after[name]:
            own = cpu_after[name][0] - cpu_before[name][0]
            children = cpu_after[name][1] - cpu_before[name][1]
            cpu[name] = {"daemon_cpu_pct": round(100 * own / span, 1),
                         "commands_cpu_pct": round(100 * children / span, 1)}
    claims_lost = sum(_metric_sum(a, "stagehand_task_claims_lost_total") -
                      _metric_sum(b, "stagehand_task_claims_lost_total")
                      for a, b in zip(metrics_after, metrics_before))
    figures = common_checks(fleet, runs, checks, skip_schedule=True)
    figures.update({"tasks": count, "seconds": seconds, "runs": len(window),
                    "runs_per_s": round(len(window) / span, 1),
                    "ideal_runs_per_s": round(expected / seconds, 1),
                    "start_lag_ms_p50": checker.percentile(lags, 50),
                    "start_lag_ms_p99": checker.percentile(lags, 99),
                    "claims_lost": claims_lost, "cpu": cpu, "torn_lines": bad})
    figures.pop("overlaps", None)
    check(checks, "the sink has no torn lines", bad, bad == 0)
    return {"name": "load", "faults": [], "figures": figures, "checks": checks}


KILL_GRACE_S = 5.0  # the command executor's SIGTERM → SIGKILL grace


def task_state(host, fleet, task):
    """The `taskState` of `task` in `host`'s REST listing ({} when it has none, None when the
    listing fails)."""
    status, body = host.request("GET", fleet.api())
    if status != 200:
        return None
    for entry in json.loads(body)["tasks"]:
        if entry["taskId"] == task:
            return entry.get("taskState") or {}
    return None


def gone_after_ms(run, since_ns):
    """When the run's last process died, in ms after `since_ns` (None when never seen dead)."""
    if run is None or not checker.seen_dead(run):
        return None
    return (run.last - since_ns) / MS


def all_gone(fleet, tasks, per_task=1):
    """Whether each of `tasks` has at least `per_task` runs and every run's processes are dead."""
    runs, _ = checker.read_runs(fleet.sink)
    by_task = checker.by_task(runs)
    return all(len(by_task.get(t, [])) >= per_task for t in tasks) and all(
        r.gone is not None for t in tasks for r in by_task.get(t, []))


def scenario_cron_join(ctx):
    """Registrations against cron slots: a 2-host fleet runs 1 ms cron tasks every 2 s and every
    second beside a task that floods stdout; one host restarts (SIGTERM, then a new process), then
    a third host joins. Each registration (the second host's, the restart's, the join's, and the
    first host's on a fresh database) must leave the slots alone: no slot with two starts, no
    start away from its slot."""
    def tasks(probe):
        return {
            "slot2": {"schedule": sched({"cron": "*/2 * * * * *"}, 10),
                      "command": probe("slot2", 1)},
            "slot1": {"schedule": sched({"cron": "* * * * * *"}, 10),
                      "command": probe("slot1", 1)},
            "flood": {"schedule": sched({"seconds": 3}, 10),
                      "command": probe("flood", 500, "flood")},
        }
    fleet = make_fleet(ctx, "sys-cron-join", tasks)
    checks, faults = [], []
    began = mono_ns()
    try:
        fleet.hosts[0].start().wait_ready()
        first_ready = mono_ns()
        joining = mono_ns()
        fleet.hosts[1].start().wait_ready()
        faults.append({"kind": "join", "host": fleet.hosts[1].name, "start_ns": joining,
                       "end_ns": mono_ns(), "duration_ms": (mono_ns() - joining) / MS})
        time.sleep(3.5)
        restarted = fleet.hosts[1]
        sent, code = restarted.terminate()
        restarted.start().wait_ready()
        back = mono_ns()
        faults.append({"kind": "SIGTERM + new process", "host": restarted.name, "start_ns": sent,
                       "end_ns": back, "duration_ms": (back - sent) / MS})
        time.sleep(3.5)
        joining = mono_ns()
        fleet.hosts[2].start().wait_ready()
        joined = mono_ns()
        faults.append({"kind": "join", "host": fleet.hosts[2].name, "start_ns": joining,
                       "end_ns": joined, "duration_ms": (joined - joining) / MS})
        time.sleep(3.5)
    finally:
        ended = mono_ns()
        fleet.stop()
    runs, _ = checker.read_runs(fleet.sink)
    by_task = checker.by_task(runs)
    check(checks, "the restarted host exits 0 on SIGTERM", code, code == 0)
    figures = common_checks(fleet, runs, checks, cron_tasks=(), begin_ns=began, end_ns=ended,
                            cadence_tasks=[("flood", 3000)])
    # From the first slot after the fleet began: the first host's own registration counts too.
    figures["cron"] = cron_checks(by_task, checks, [("slot2", 2 * S), ("slot1", S)], began, ended,
                                  idle=[(began, first_ready)], lead_ns=0)
    # A run that the fleet's final stop interrupted (still going when it began) had no chance to
    # end `done`: it is held to nothing but that stop.
    floods = [r for r in by_task.get("flood", []) if r.end_kind == "done" or r.last < ended]
    slow = [f"{r.run_id}: {r.end_kind}, {((r.last - r.start) / MS):.0f} ms" for r in floods
            if r.end_kind != "done" or r.last - r.start > 1500 * MS]
    check(checks, "a command flooding stdout is drained: each of its runs ends `done` within its "
          "500 ms of work + 1 s", slow or f"{len(floods)} runs", floods and not slow)
    logs = {name: os.path.getsize(os.path.join(fleet.workdir, name))
            for name in os.listdir(fleet.workdir) if name.endswith(".log") and name[0] == "h"}
    check(checks, "the flood does not flood the daemon's log (output capped per run: each log "
          "< 2 MiB)", logs, all(size < 2 << 20 for size in logs.values()))
    figures.update({"flooded_mib_per_run": [round((r.flooded or 0) / 2**20, 1) for r in floods],
                    "log_bytes": logs})
    return {"name": "cron-join", "faults": faults, "figures": figures, "checks": checks}


def scenario_stubborn(ctx):
    """Commands that do not stop when told: one trigger each of a manual task (timeout 2 s) that
    ignores SIGTERM and of one that takes 1.5 s to exit after it, on a 2-host fleet. Each trigger
    gives exactly one run, which is still running (for REST, and for a second trigger) until its
    processes are dead; nothing reruns it after its timeout."""
    timeout_s = 2

    def tasks(probe):
        return {
            "stubborn": {"schedule": sched({"trigger": "manual"}, timeout_s),
                         "command": probe("stubborn", 12000, "ignore-term")},
            "slow-exit": {"schedule": sched({"trigger": "manual"}, timeout_s),
                          "command": probe("slow-exit", 12000, "slow-term", 1500)},
        }
    fleet = make_fleet(ctx, "sys-stubborn", tasks, hosts=2)
    checks = []
    began = mono_ns()
    fleet.start()
    first, second = fleet.hosts
    try:
        triggered = mono_ns()
        statuses = {task: first.request("POST", fleet.api(f"/{task}/trigger"))[0]
                    for task in ("stubborn", "slow-exit")}
        # Past the timeout, inside the kill grace: asked from the other host.
        time.sleep(timeout_s + 1)
        in_grace = task_state(second, fleet, "stubborn")
        retrigger = second.request("POST", fleet.api("/stubborn/trigger"))[0]
        # Until every run's processes are dead, then a lease and a sweep more for any rerun.
        wait_for(lambda: all_gone(fleet, ("stubborn", "slow-exit")), 11)
        time.sleep(LEASE_S + JANITOR_S)
    finally:
        ended = mono_ns()
        fleet.stop()
    runs, _ = checker.read_runs(fleet.sink)
    by_task = checker.by_task(runs)
    check(checks, "the triggers are accepted", statuses, all(v == 200 for v in statuses.values()))
    counts = {task: len(by_task.get(task, [])) for task in ("stubborn", "slow-exit")}
    check(checks, "one trigger of a task that ignores SIGTERM (timeout 2 s) gives exactly one run; "
          "so does one of a task that exits slowly", counts,
          all(count == 1 for count in counts.values()))
    grace_status = (in_grace or {}).get("status")
    check(checks, "in its kill grace the run is still running: REST says `running` and a trigger "
          "answers 409", f"status {grace_status}, trigger {retrigger}",
          grace_status == "running" and retrigger == 409)
    stubborn = min(by_task.get("stubborn", []), key=lambda r: r.start, default=None)
    bound_ms = (timeout_s + KILL_GRACE_S + 1) * 1000
    lived = gone_after_ms(stubborn, stubborn.start) if stubborn else None
    ignored = sum(1 for _, d in stubborn.signals if d == "TERM-ignored") if stubborn else 0
    check(checks, f"the SIGTERM-ignoring run is killed: its processes are dead within timeout + "
          f"kill grace + 1 s = {bound_ms / 1000:.0f} s of its start",
          f"gone after {lived:.0f} ms, {ignored} SIGTERM ignored" if lived is not None else
          "never seen dead", lived is not None and lived <= bound_ms)
    slow = min(by_task.get("slow-exit", []), key=lambda r: r.start, default=None)
    slow_ms = (slow.last - slow.start) / MS if slow else None
    check(checks, "the slowly exiting run finishes its own exit after SIGTERM (ends `term`, dead "
          "within timeout + 1.5 s + 1 s)", f"{slow.end_kind}, gone after {slow_ms:.0f} ms"
          if slow else "never ran", slow is not None and slow.end_kind == "term" and
          slow_ms <= (timeout_s + 2.5) * 1000)
    figures = common_checks(fleet, runs, checks, cron_tasks=(), begin_ns=began, end_ns=ended)
    figures.update({"runs_by_task": counts, "stubborn_lifetime_ms": lived,
                    "sigterm_ignored": ignored, "slow_exit_lifetime_ms": slow_ms,
                    "rerun_starts_after_trigger_ms": [round((r.start - triggered) / MS)
                                                      for r in runs if r.start > triggered][:10]})
    return {"name": "stubborn", "faults": [], "figures": figures, "checks": checks}


def scenario_setsid(ctx):
    """Commands whose child escapes their process group with setsid(2) and outlives them: the
    daemon must end the whole tree on a timeout and on a cancel, and no run may start again while
    a process of the previous one lives (the task is triggered again as soon as REST shows it
    idle, from the other host); no process survives and no zombie stays under a daemon."""
    long_ms, grandchild_ms = 15000, 12000

    def tasks(probe):
        return {
            "escape-timeout": {"schedule": sched({"trigger": "manual"}, 2),
                               "command": probe("escape-timeout", long_ms, "setsid",
                                                grandchild_ms)},
            "escape-cancel": {"schedule": sched({"trigger": "manual"}, 30),
                              "command": probe("escape-cancel", long_ms, "setsid",
                                               grandchild_ms)},
            "escape-done": {"schedule": sched({"trigger": "manual"}, 30),
                            "command": probe("escape-done", 300, "setsid", 2500)},
        }
    names = ("escape-timeout", "escape-cancel", "escape-done")
    fleet = make_fleet(ctx, "sys-setsid", tasks, hosts=2)
    checks = []
    began = mono_ns()
    fleet.start()
    first, second = fleet.hosts
    retriggers, zombies = {}, {}
    try:
        triggered = mono_ns()
        statuses = {task: first.request("POST", fleet.api(f"/{task}/trigger"))[0]
                    for task in names}
        wait_for(lambda: (running_run(fleet, "escape-cancel") or None) and
                 any(r.gc_start for r in checker.read_runs(fleet.sink)[0]
                     if r.task == "escape-cancel"), 5)
        time.sleep(max(0.0, 1.0 - (mono_ns() - triggered) / S))
        cancelled = mono_ns()
        cancel_status = first.request("POST", fleet.api("/escape-cancel/cancel"))[0]
        pending = set(names)
        while pending and mono_ns() < triggered + 10 * S:
            for task in sorted(pending):
                state = task_state(second, fleet, task)
                if state and state.get("status") != "running" and state.get("lastRunEndedAt"):
                    retriggers[task] = {"at_ns": mono_ns(), "status": second.request(
                        "POST", fleet.api(f"/{task}/trigger"))[0]}
                    pending.discard(task)
            time.sleep(0.02)
        # The second runs: the cancel one is cancelled once started, the others end by themselves.
        if wait_for(lambda: len([r for r in checker.read_runs(fleet.sink)[0]
                                 if r.task == "escape-cancel"]) >= 2, 3):
            second.request("POST", fleet.api("/escape-cancel/cancel"))
        wait_for(lambda: all_gone(fleet, names, 2), max(1.0, (triggered + 12 * S - mono_ns()) / S))
        wait_for(lambda: not any(process_state(pid) == "Z" for h in fleet.hosts
                                 for pid in children_of(h.pid)), 1)
        zombies = {h.name: [pid for pid in children_of(h.pid) if process_state(pid) == "Z"]
                   for h in fleet.hosts}
    finally:
        ended = mono_ns()
        fleet.stop()
    runs, _ = checker.read_runs(fleet.sink)
    by_task = checker.by_task(runs)
    firsts = {task: by_task[task][0] if by_task.get(task) else None for task in names}
    check(checks, "the triggers and the cancel are accepted",
          {**statuses, "cancel": cancel_status},
          all(v == 200 for v in statuses.values()) and cancel_status == 200)
    timed_out = firsts["escape-timeout"]
    bound_ms = (KILL_GRACE_S + 1) * 1000
    after_timeout = gone_after_ms(timed_out, timed_out.start + 2 * S) if timed_out else None
    check(checks, f"a timeout ends the whole tree, setsid grandchild included, within the kill "
          f"grace + 1 s = {bound_ms / 1000:.0f} s", f"gone {after_timeout:.0f} ms after the "
          "timeout" if after_timeout is not None else "never seen dead (killed by the harness)",
          after_timeout is not None and after_timeout <= bound_ms)
    after_cancel = gone_after_ms(firsts["escape-cancel"], cancelled)
    check(checks, f"a cancel ends the whole tree, setsid grandchild included, within the kill "
          f"grace + 1 s = {bound_ms / 1000:.0f} s", f"gone {after_cancel:.0f} ms after the cancel"
          if after_cancel is not None else "never seen dead (killed by the harness)",
          after_cancel is not None and after_cancel <= bound_ms)
    again = {}
    for task in names:
        previous = firsts[task]
        later = by_task.get(task, [])[1:2]
        gone_ms = gone_after_ms(previous, triggered)
        again[task] = {
            "retrigger": retriggers.get(task, {}).get("status"),
            "previous_gone_ms": round(gone_ms) if gone_ms is not None else None,
            "next_start_ms": round((later[0].start - triggered) / MS) if later else None}
    clean = all(a["retrigger"] == 200 and a["next_start_ms"] is not None and
                a["previous_gone_ms"] is not None and a["previous_gone_ms"] <= a["next_start_ms"]
                for a in again.values())
    check(checks, "triggered again as soon as REST shows it idle, a task starts only after every "
          "process of its previous run is dead (timeout, cancel, and a command that exited)",
          again, clean)
    check(checks, "no zombie stays under a daemon once the runs are over", zombies,
          not any(zombies.values()))
    figures = common_checks(fleet, runs, checks, cron_tasks=(), begin_ns=began, end_ns=ended)
    figures.update({"gone_after_timeout_ms": after_timeout, "gone_after_cancel_ms": after_cancel,
                    "grandchild_tail_ms": {task: checker.tree_tail_ms(firsts[task])
                                           for task in names if firsts[task]},
                    "again": again})
    return {"name": "setsid", "faults": [], "figures": figures, "checks": checks}


_FUZZ_METHODS = ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "TRACE", "BREW", "G\x01T"]
_FUZZ_PIECES = ["api", "sys-rest", ".backstage", "scheduler", "v1", "tasks", "trigger", "cancel",
                "%", "%2", "%zz", "%2F", "%00", "..", ".", "", "long", "cron", "tick0", "x" * 300,
                "%C3%A9", "%FF", "?a=b", "#f", ";", "\\", "tasks%2Ftrigger", "TASKS", "a b"]


def _fuzz_request(rng, port, plugin):
    """One random raw HTTP request; returns the status code (or None if the connection closed)."""
    if rng.random() < 0.5:
        path = f"/api/{plugin}/.backstage/scheduler/v1/tasks/" + "/".join(
            rng.choice(_FUZZ_PIECES) for _ in range(rng.randint(0, 3)))
    else:
        path = "/" + "/".join(rng.choice(_FUZZ_PIECES) for _ in range(rng.randint(0, 8)))
    method = rng.choice(_FUZZ_METHODS)
    headers = [f"Host: 127.0.0.1:{port}", "Connection: close"]
    body = b""
    shape = rng.random()
    if shape < 0.2:
        body = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 2048)))
        headers.append(f"Content-Length: {len(body)}")
    elif shape < 0.3:
        declared = rng.choice(["-1", "abc", "99999999999999999999", "5"])
        headers.append(f"Content-Length: {declared}")
        body = b"12345" if declared == "5" else b""
    elif shape < 0.4:
        size = rng.choice([1_100_000, 4_000_000])
        headers.append(f"Content-Length: {size}")
        body = b"a" * min(size, 1_200_000)
    elif shape < 0.5:
        headers.append("Transfer-Encoding: chunked")
        body = rng.choice([b"5\r\nhello\r\n0\r\n\r\n", b"zz\r\n", b"ffffffffff\r\nab"])
    if rng.random() < 0.3:
        headers.append("X-" + "h" * rng.randint(1, 9000) + ": " + "v" * rng.randint(0, 100))
    if rng.random() < 0.1:
        headers.append("Authorization: Bearer " + "t" * rng.randint(0, 50))
    version = rng.choice(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/9.9", ""])
    raw = f"{method} {path} {version}\r\n".encode("latin-1", "replace") + \
        "\r\n".join(headers).encode() + b"\r\n\r\n" + body
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        s.settimeout(5)
        try:
            s.sendall(raw)
        except OSError:
            pass
        data = b""
        try:
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
    match = re.match(rb"HTTP/1\.[01] (\d{3})", data)
    return (int(match.group(1)) if match else None), raw[:160]


def _rest_burst(port, plugin, seconds, seed):
    """`seconds` of REST load on one host: two threads listing, two triggering and cancelling, three
    sending malformed requests. Runs in a process of its own (see scenario_rest). Returns the
    statuses of the API calls and of the malformed requests, connection errors, up to 5 of the
    malformed requests that got no answer, and the API calls' latency (p50, p99, max, in ms)."""
    api = f"/api/{plugin}/.backstage/scheduler/v1/tasks"
    stop_at = time.monotonic() + seconds
    lock = threading.Lock()
    statuses, fuzz_statuses, errors, unanswered_samples = {}, {}, [], []
    latencies = []

    def hammer(kind):
        rng = random.Random(hash(kind))
        while time.monotonic() < stop_at:
            sent = time.monotonic()
            if kind == "list":
                status, _ = http_request(port, "GET", api)
            else:
                task = rng.choice(["manual", "tick3", "nope"])
                action = rng.choice(["trigger", "cancel"])
                status, _ = http_request(port, "POST", f"{api}/{task}/{action}")
            took = time.monotonic() - sent
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
                latencies.append(took)

    def fuzz(fuzz_seed):
        rng = random.Random(fuzz_seed)
        while time.monotonic() < stop_at:
            try:
                status, head = _fuzz_request(rng, port, plugin)
            except OSError as error:
                with lock:
                    errors.append(str(error))
                continue
            with lock:
                fuzz_statuses[status] = fuzz_statuses.get(status, 0) + 1
                if status is None and len(unanswered_samples) < 5:
                    unanswered_samples.append(head.decode("latin-1"))

    threads = [threading.Thread(target=hammer, args=(k,)) for k in ("list", "list", "post", "post")]
    threads += [threading.Thread(target=fuzz, args=(seed + s,)) for s in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    latencies.sort()
    latency_ms = {"p50": round(1000 * latencies[len(latencies) // 2], 1),
                  "p99": round(1000 * latencies[len(latencies) * 99 // 100], 1),
                  "max": round(1000 * latencies[-1], 1)} if latencies else {}
    return statuses, fuzz_statuses, errors, unanswered_samples, latency_ms


def scenario_rest(ctx):
    """REST under load and bad input: list/trigger/cancel hammering plus a fuzzer, on one host."""
    def tasks(probe):
        out = base_tasks(probe)
        out["manual"] = {"schedule": sched({"trigger": "manual"}, 10), "command": probe("manual", 200)}
        return out
    # No network fault here: the hosts talk to the database directly, not through this process's
    # proxies, which a loaded machine can stall past the daemon's 1 s bound on a statement.
    fleet = make_fleet(ctx, "sys-rest", tasks, proxied=False)
    checks = []
    began = mono_ns()
    fleet.start()
    target = fleet.hosts[0]
    time.sleep(1)
    # The load comes from another process: here its busy threads would hold the interpreter lock
    # that the hosts' database proxies and the tree watcher of this process need, and the daemon
    # would be measured through a starved proxy.
    with multiprocessing.get_context("spawn").Pool(1) as load:
        def burst(seconds, seed):
            return load.apply(_rest_burst, (target.port, fleet.plugin, seconds, seed))
        burst(1.0, 100)  # warm-up: pools reach their working size first
        wait_for(lambda: False, 3)
        # The task executor's pool grows lazily within maxConcurrency; its threads are not counted.
        before = {"fds": fd_count(target.pid), "threads": thread_count(target.pid, EXECUTOR_THREAD)}
        statuses, fuzz_statuses, errors, unanswered_samples, latency_ms = burst(ctx.rest_seconds, 0)
    window_end = mono_ns()
    # Idle keep-alive and closing connections settle before the counts are compared.
    settled = wait_for(lambda: fd_count(target.pid) <= before["fds"] and
                       thread_count(target.pid, EXECUTOR_THREAD) <= before["threads"], 10, 0.1)
    after = {"fds": fd_count(target.pid), "threads": thread_count(target.pid, EXECUTOR_THREAD)}
    time.sleep(2)
    ended = mono_ns()
    alive = target.alive()
    fleet.stop()
    runs, _ = checker.read_runs(fleet.sink)
    requests = sum(statuses.values())
    fivexx = {k: v for k, v in list(statuses.items()) + list(fuzz_statuses.items())
              if k is not None and k >= 500}
    unanswered = statuses.get(None, 0)
    check(checks, "the daemon stays up", alive, alive)
    check(checks, "API calls are all answered 2xx/4xx", {str(k): v for k, v in statuses.items()},
          unanswered == 0 and not any(k is not None and k >= 500 for k in statuses))
    check(checks, "bad input is answered, never with a 5xx (None = no answer within 5 s)",
          {str(k): v for k, v in fuzz_statuses.items()},
          not any(k is None or k >= 500 for k in fuzz_statuses))
    check(checks, "no file descriptor or thread leak (counts back to their level before; the "
                  "task executor's pool, bounded by maxConcurrency, not counted)",
          f"before {before}, after {after}", settled)
    in_window = [r for r in runs if began <= r.start <= window_end]
    figures = common_checks(fleet, runs, checks, begin_ns=began, end_ns=ended,
                            cadence_tasks=tick_tasks(ctx, 3))
    figures.update({"api_requests": requests, "api_requests_per_s": round(requests / ctx.rest_seconds, 1),
                    "api_latency_ms": latency_ms,
                    "fuzz_requests": sum(fuzz_statuses.values()), "fivexx": fivexx,
                    "fuzz_connection_errors": len(errors),
                    "unanswered_fuzz_samples": unanswered_samples, "before": before, "after": after,
                    "runs_during_window": len(in_window)})
    return {"name": "rest", "faults": [], "figures": figures, "checks": checks}


SCENARIOS = {
    "kill": scenario_kill,
    "freeze": scenario_freeze,
    "partition": scenario_partition,
    "partition-reset": scenario_partition_reset,
    "pg-restart": scenario_pg_restart,
    "skew": scenario_skew,
    "rolling": scenario_rolling,
    "load": scenario_load,
    "rest": scenario_rest,
    "cron-join": scenario_cron_join,
    "stubborn": scenario_stubborn,
    "setsid": scenario_setsid,
}
