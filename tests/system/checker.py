"""The system suite's checker: rebuilds runs from the probe's event sink and checks them.

A run is every event with one run id: `start`, `tick`s, and `end` (done / term / orphan). A run
with no `end` (its process was SIGKILLed) lasts until its last event. A run's activity is its
interval minus the windows in which its host was frozen (SIGSTOP of the daemon and its commands):
a frozen process does nothing, so a frozen run overlapping a new owner is not two runs at once.
Pure functions over lists; no I/O except `read_runs`."""

import collections
import math


class Run:
    __slots__ = ("run_id", "host", "task", "start", "end", "end_kind", "ticks")

    def __init__(self, run_id, host, task):
        self.run_id = run_id
        self.host = host
        self.task = task
        self.start = None
        self.end = None
        self.end_kind = None
        self.ticks = []

    @property
    def last(self):
        """The run's last sign of life: its end, else its last tick, else its start."""
        if self.end is not None:
            return self.end
        return max(self.ticks) if self.ticks else self.start

    def __repr__(self):
        return (f"Run({self.run_id} {self.task}@{self.host} {self.start}..{self.last} "
                f"{self.end_kind})")


def parse_events(lines):
    """Runs by id from sink lines; malformed lines (a torn write) are counted, not fatal."""
    runs, bad = {}, 0
    for line in lines:
        parts = line.split()
        if len(parts) != 6:
            bad += 1
            continue
        ns, event, host, run_id, task, detail = parts
        run = runs.get(run_id)
        if run is None:
            run = runs[run_id] = Run(run_id, host, task)
        t = int(ns)
        if event == "start":
            run.start = t
        elif event == "tick":
            run.ticks.append(t)
        elif event == "end":
            run.end, run.end_kind = t, detail
        else:
            bad += 1
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


def cron_slots(runs, first_slot_ns, last_slot_ns, period_ns, tolerance_ns, early_ns=20_000_000,
               excused=()):
    """Checks a cron task that fires every `period_ns` at first_slot_ns + k·period.

    A slot is met by a run starting in [slot − early, slot + tolerance]. The documented catch-up
    rule for cron is "none": the next slot is computed after each run, so a slot that falls while a
    run of the task is still going is skipped, not queued; such slots are `skipped_busy`, not
    missed. Slots inside an `excused` window (a fault's takeover window) are listed apart, and
    starts inside one are not counted as off-slot (a host registering its tasks makes a cron task
    due at once: Backstage's "next slot − 1 s" registration rule).
    Returns a dict with the counts, the missed slots and the lateness of each met slot (ms)."""
    starts = sorted(r.start for r in runs)
    busy = [(r.start, r.last) for r in runs]
    met, missed, skipped, excused_slots, lateness = 0, [], 0, 0, []
    slot = first_slot_ns
    while slot <= last_slot_ns:
        hit = next((s for s in starts if slot - early_ns <= s <= slot + tolerance_ns), None)
        if hit is not None:
            met += 1
            lateness.append((hit - slot) / 1e6)
        elif any(b_start < slot <= b_end + early_ns for b_start, b_end in busy):
            skipped += 1
        elif any(w_start <= slot <= w_end for w_start, w_end in excused):
            excused_slots += 1
        else:
            missed.append(slot)
        slot += period_ns
    off_slot = [s for s in starts if first_slot_ns - early_ns <= s <= last_slot_ns + tolerance_ns
                and (s - first_slot_ns + early_ns) % period_ns > tolerance_ns + early_ns
                and not any(w_start <= s <= w_end for w_start, w_end in excused)]
    return {"slots": met + len(missed) + skipped + excused_slots, "met": met, "missed": len(missed),
            "missed_at_ns": missed, "skipped_busy": skipped, "excused": excused_slots,
            "off_slot_starts": len(off_slot),
            "late_ms_p50": percentile(lateness, 50), "late_ms_max": max(lateness, default=None)}


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
    """Runs with no `end` event. Runs of a host SIGKILLed or frozen at the time are expected
    (`dead_hosts_windows`: (host, from_ns)); any other is a run lost silently."""
    lost = []
    for run in runs:
        if run.end is not None:
            continue
        if any(run.host == host and run.last >= since for host, since in dead_hosts_windows):
            continue
        lost.append(run.run_id)
    return lost
