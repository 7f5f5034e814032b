"""The system suite's checker: rebuilds runs from the probe's event sink and checks them.

A run is every event with one run id: `start`, `pid`s, `tick`s, `signal`s, `end` (done / term /
orphan), the setsid grandchild's `gc-start`, `gc-tick`s and `gc-end`, the flooding probe's
`flooded`, and the harness's `gone` (when the run's last process died, from the run lock; `dead`,
or `survivor` when a process was still alive after its daemon stopped and the harness killed it).

A run is alive from its start until its last process is dead, whatever the daemon said about its
end. Each probe process writes its last event (`end`, the grandchild's `gc-end`) as its last act,
so when every process of the run did, the latest of the run's own events is its death (to within
microseconds). A process killed without a word (SIGKILL) is dated by the harness's `gone`, which
comes when the kernel released the run's lock, read by a thread that may wake a few ms late under
load: never early. Without either, a run lasts until its last tick. A run's activity is that
interval minus the windows in which its host was frozen (SIGSTOP of the daemon and its commands):
a frozen process does nothing, so a frozen run overlapping a new owner is not two runs at once.
Pure functions over lists; no I/O except `read_runs`."""

import collections
import math

EVENTS = {"start", "pid", "tick", "signal", "end", "gc-start", "gc-tick", "gc-end", "flooded",
          "gone"}


class Run:
    __slots__ = ("run_id", "host", "task", "start", "end", "end_kind", "ticks", "pids", "signals",
                 "gc_start", "gc_end", "gc_end_kind", "gc_last", "gone", "gone_kind", "flooded",
                 "last_event")

    def __init__(self, run_id, host, task):
        self.run_id = run_id
        self.host = host
        self.task = task
        self.start = None
        self.end = None
        self.end_kind = None
        self.ticks = []
        self.pids = {}  # role (main, grandchild) -> pid
        self.signals = []  # (ns, detail)
        self.gc_start = None
        self.gc_end = None
        self.gc_end_kind = None
        self.gc_last = None
        self.gone = None
        self.gone_kind = None
        self.flooded = None
        self.last_event = None  # the latest event written by the run's own processes

    def announced_every_end(self):
        """Whether each process of the run wrote its last event (so none was killed silently)."""
        return self.end is not None and (self.gc_start is None or self.gc_end is not None)

    @property
    def last(self):
        """When the run's last process died (see the module comment): its processes' own last
        event when each wrote one, else the later of that and `gone`."""
        own = self.last_event if self.last_event is not None else self.start
        if self.announced_every_end() or self.gone is None:
            return own
        return max(own, self.gone)

    def __repr__(self):
        return (f"Run({self.run_id} {self.task}@{self.host} {self.start}..{self.last} "
                f"{self.end_kind})")


def parse_events(lines):
    """Runs by id from sink lines; malformed lines (a torn write) are counted, not fatal."""
    runs, bad = {}, 0
    for line in lines:
        parts = line.split()
        if len(parts) != 6 or parts[1] not in EVENTS:
            bad += 1
            continue
        ns, event, host, run_id, task, detail = parts
        try:
            t = int(ns)
        except ValueError:
            bad += 1
            continue
        run = runs.get(run_id)
        if run is None:
            run = runs[run_id] = Run(run_id, host, task)
        if event != "gone":
            run.last_event = t if run.last_event is None else max(run.last_event, t)
        if event == "start":
            run.start = t
        elif event == "tick":
            run.ticks.append(t)
        elif event == "end":
            run.end, run.end_kind = t, detail
        elif event == "pid":
            role, _, pid = detail.partition(":")
            if pid.isdigit():
                run.pids[role] = int(pid)
        elif event == "signal":
            run.signals.append((t, detail))
        elif event == "gc-start":
            run.gc_start = t
            run.gc_last = max(run.gc_last or t, t)
        elif event == "gc-tick":
            run.gc_last = max(run.gc_last or t, t)
        elif event == "gc-end":
            run.gc_end, run.gc_end_kind = t, detail
            run.gc_last = max(run.gc_last or t, t)
        elif event == "flooded":
            run.flooded = int(detail) if detail.isdigit() else None
        elif event == "gone":
            if run.gone is None or detail == "survivor":
                run.gone, run.gone_kind = t, detail
    complete = [r for r in runs.values() if r.start is not None]
    return complete, bad


def read_runs(path):
    with open(path, errors="replace") as f:
        return parse_events(f.read().splitlines())


def by_task(runs):
    out = collections.defaultdict(list)
    for run in runs:
        out[run.task].append(run)
    for task_runs in out.values():
        task_runs.sort(key=lambda r: r.start)
    return out


def subtract(interval, holes):
    """[start, end] minus the holes (list of (start, end)); a list of disjoint intervals."""
    pieces = [interval]
    for hole_start, hole_end in holes:
        next_pieces = []
        for start, end in pieces:
            if hole_end <= start or hole_start >= end:
                next_pieces.append((start, end))
                continue
            if start < hole_start:
                next_pieces.append((start, hole_start))
            if hole_end < end:
                next_pieces.append((hole_end, end))
        pieces = next_pieces
    return pieces


def activity(run, freezes):
    """The run's active intervals: [start, last] minus its host's freeze windows."""
    holes = [(f["start"], f["end"]) for f in freezes if f["host"] == run.host]
    return subtract((run.start, run.last), holes)


def overlaps(runs, freezes=()):
    """Every pair of runs of one task whose activities intersect: dicts with the task, both run
    ids and hosts, where the overlap begins and how long it lasts (ms)."""
    found = []
    for task, task_runs in by_task(runs).items():
        spans = [(run, activity(run, freezes)) for run in task_runs]
        for i, (a, a_spans) in enumerate(spans):
            for b, b_spans in spans[i + 1:]:
                if b.start > a.last:
                    break
                for a_start, a_end in a_spans:
                    for b_start, b_end in b_spans:
                        lo, hi = max(a_start, b_start), min(a_end, b_end)
                        if lo < hi:
                            found.append({"task": task, "a": a.run_id, "b": b.run_id,
                                          "hosts": [a.host, b.host], "at_ns": lo,
                                          "ms": (hi - lo) / 1e6})
    return found


def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1))
    return ordered[k]


def in_windows(t, windows):
    return any(w_start <= t <= w_end for w_start, w_end in windows)


def cron_slots(runs, first_slot_ns, last_slot_ns, period_ns, tolerance_ns, early_ns=1_000_000,
               faults=(), idle=(), interrupted=()):
    """Checks a cron task that fires every `period_ns` at first_slot_ns + k·period.

    A start *meets* slot s when s − early ≤ start ≤ s + tolerance (`early` only absorbs the error
    of mapping wall slots to monotonic time, 1 ms). Every other start is away from its slot: an
    *off-slot* start. Nothing excuses one, the "next slot − 1 s" start of Backstage's registration
    rule included (a host that registers makes a cron task due one second before its next slot),
    except a catch-up inside a fault's window (`faults`: (start, end) of a fault's takeover
    window): the first start after a slot of the window that no run met, or whose run was lost to
    the fault (did not end `done`). That is one immediate run after downtime, as Backstage does; a
    second late start after the same gap is off-slot.

    A slot met by two or more starts is a *double start*. A slot with no start is *missed*, unless
    a run of the task was still going at the slot (`skipped_busy`: the next slot is computed after
    each run, so cron has no catch-up) or it falls in a fault's window or an `idle` window (before
    the fleet runs: `excused`; an idle window allows no catch-up). A slot with no start whose run
    a graceful stop of its host interrupted before the probe could write its first event
    (`interrupted`: those slots, each established by the harness from the stopped daemon's own
    run record, see scenarios.interrupted_slots) ran at most once as promised: it is counted as
    `interrupted_by_stop`, not missed. Such a slot is not redone, as in Backstage.

    Returns a dict with the counts, the missed slots (ns), samples of the double and off-slot
    starts, and the lateness of each met slot (ms)."""
    ordered = sorted(runs, key=lambda r: r.start)
    slot_count = max(0, (last_slot_ns - first_slot_ns) // period_ns + 1)
    meets = collections.defaultdict(list)
    late = []
    for run in ordered:
        # Every start whose slot (met or not) is in [first, last]: from just past the tolerance of
        # the slot before the first to just before the allowance of the slot after the last.
        if not (first_slot_ns - period_ns + tolerance_ns < run.start <
                last_slot_ns + period_ns - early_ns):
            continue
        k = (run.start - first_slot_ns + early_ns) // period_ns
        if 0 <= k < slot_count and run.start - (first_slot_ns + k * period_ns) <= tolerance_ns:
            meets[k].append(run)
        else:
            late.append(run)

    busy = [(r.start, r.last) for r in ordered]
    met, missed, skipped, excused, lateness, early, doubles, owed = 0, [], 0, 0, [], [], [], []
    interrupted_by_stop = 0
    for k in range(slot_count):
        slot = first_slot_ns + k * period_ns
        if meets[k]:
            met += 1
            lateness.append((meets[k][0].start - slot) / 1e6)
            early += [slot - r.start for r in meets[k] if r.start < slot]
            if len(meets[k]) > 1:
                doubles.append({"slot_ns": slot, "starts": [
                    {"run": r.run_id, "host": r.host, "after_slot_ms": (r.start - slot) / 1e6}
                    for r in meets[k]]})
        elif any(b_start < slot <= b_end + early_ns for b_start, b_end in busy):
            skipped += 1
        elif any(abs(slot - i) <= early_ns for i in interrupted):
            interrupted_by_stop += 1
        elif in_windows(slot, faults) or in_windows(slot, idle):
            excused += 1
        else:
            missed.append(slot)
        if in_windows(slot, faults) and not any(r.end_kind == "done" for r in meets[k]):
            owed.append(slot)

    lost_meetings = {r.run_id for k in meets for r in meets[k]
                     if r.end_kind != "done" and first_slot_ns + k * period_ns in owed}
    catch_ups, off_slot = [], []
    for run in late:
        previous = max((r for r in ordered if r.start < run.start), key=lambda r: r.start,
                       default=None)
        after_gap = previous is None or any(previous.start < slot < run.start for slot in owed)
        after_loss = previous is not None and previous.run_id in lost_meetings
        if in_windows(run.start, faults) and (after_gap or after_loss):
            catch_ups.append(run)
            continue
        k = (run.start - first_slot_ns + early_ns) // period_ns
        off_slot.append({"run": run.run_id, "host": run.host,
                         "after_slot_ms": (run.start - (first_slot_ns + k * period_ns)) / 1e6})
    return {"slots": met + len(missed) + skipped + excused + interrupted_by_stop, "met": met,
            "missed": len(missed), "missed_at_ns": missed, "skipped_busy": skipped,
            "excused": excused, "interrupted_by_stop": interrupted_by_stop,
            "double_starts": len(doubles), "off_slot_starts": len(off_slot),
            "catch_up_starts": len(catch_ups), "doubles": doubles[:5], "off_slot": off_slot[:5],
            "late_ms_p50": percentile(lateness, 50), "late_ms_max": max(lateness, default=None),
            "early_ms_max": max(early, default=0) / 1e6}


def cadence_gaps(runs, period_ns, tolerance_ns, excused=()):
    """Checks a duration task against Backstage's catch-up rule: the next run is due at
    max(previous due + period, the moment the previous run ended), so each start must come no later
    than max(previous start + period, previous end) + tolerance. Gaps that begin inside an excused
    window (a fault) are listed apart. Returns counts and the worst lateness (ms)."""
    late, excused_gaps, worst = [], 0, 0.0
    ordered = sorted(runs, key=lambda r: r.start)
    for a, b in zip(ordered, ordered[1:]):
        due = max(a.start + period_ns, a.last)
        lateness = b.start - due
        if lateness > tolerance_ns:
            if any(w_start <= due <= w_end or w_start <= b.start <= w_end
                   for w_start, w_end in excused):
                excused_gaps += 1
                continue
            late.append({"after": a.run_id, "late_ms": lateness / 1e6})
        else:
            worst = max(worst, lateness / 1e6)
    return {"runs": len(ordered), "late": len(late), "late_runs": late[:10],
            "excused": excused_gaps, "worst_on_time_lateness_ms": worst}


def unfinished(runs, dead_hosts_windows=()):
    """Runs with no `end` event and no `gone` `dead` (a run SIGKILLed by its daemon writes no
    `end`, but its watched tree is seen dead). Runs of a host SIGKILLed or frozen at the time are
    expected (`dead_hosts_windows`: (host, from_ns)); any other is a run lost silently."""
    lost = []
    for run in runs:
        if run.end is not None or run.gone_kind == "dead":
            continue
        if any(run.host == host and run.last >= since for host, since in dead_hosts_windows):
            continue
        lost.append(run.run_id)
    return lost


def survivors(runs):
    """Runs with a process still alive after their daemon stopped (the harness killed it)."""
    return [r.run_id for r in runs if r.gone_kind == "survivor"]


def seen_dead(run):
    """Whether the run's death is known: each of its processes wrote its last event, or the
    watcher saw the tree dead (not a survivor the harness had to kill)."""
    return run.gone_kind != "survivor" and (run.announced_every_end() or run.gone_kind == "dead")


def tree_tail_ms(run):
    """How long the run's processes lived after its main process ended (ms), or None when its
    death is not known or the main process never ended: the setsid grandchild's extra life, say."""
    if run.end is None or not seen_dead(run):
        return None
    return (run.last - run.end) / 1e6
