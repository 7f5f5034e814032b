#!/usr/bin/env python3
"""Renders the side-by-side comparison of bench/side_by_side.sh.

Reads stagehand.json (engine_bench --side_by_side), backstage.json (bench/backstage-peer/peer.js)
and pgbench.json (store_claim_bench) from --dir; prints a Markdown table of every scenario with the
ratio (how many times better stagehand is: Backstage / stagehand for costs and latencies,
stagehand / Backstage for rates), writes it to comparison.md, and plots the start-lag
distributions of both systems (empirical CDFs, log time axis) to start_lag.png with gnuplot. A
scenario missing from both reports (a smoke run, an older file) has no rows; one missing from one
report shows "—" on that side.

The saturated rate's rounds (saturation_stagehand_<r>.json beside saturation_pgbench_<r>.json,
issue 22) get a table of their own: each round's rate, its batch sizes and its ratios to pgbench's
single-row and batched claim+release, then the median and the spread of each ratio; the main
table's saturation rows then show the median round. `--batch-of=FILE` prints the claim batch size
(tasks per claim_many) of a saturation report, for side_by_side.sh.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def get(doc, *keys):
    for key in keys:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


def fmt(value, unit=""):
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not unit:
        return f"{value:,}"
    if abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return text + unit


def nearest_rank(values, q):
    ordered = sorted(values)
    rank = math.ceil(q * len(ordered))
    return ordered[min(len(ordered) - 1, max(0, rank - 1))]


def cadence_precision(doc, key, period_ms):
    """(|spacing - period| p50, p99, drift) of an interval scenario's start spacings, in ms; drift
    is how far the last start slipped from the first start plus (n - 1) periods. None when the
    scenario or its samples are missing."""
    samples = get(doc, key, "spacing", "samples_ms")
    if not samples:
        return None
    deviations = [abs(s - period_ms) for s in samples]
    return (nearest_rank(deviations, 0.5), nearest_rank(deviations, 0.99),
            sum(samples) - len(samples) * period_ms)


def ratio(ours, theirs, higher_is_better=False):
    if ours is None or theirs is None:
        return "—"
    if higher_is_better:
        ours, theirs = theirs, ours
    if ours == 0:
        return "∞" if theirs > 0 else "="
    value = theirs / ours
    return f"{value:,.0f}×" if value >= 100 else f"{value:.1f}×"


def rows(sh, bs, pg):
    """(scenario, measure, stagehand, backstage, ratio, target) tuples."""
    out = []

    def either(key, *fields):
        value = get(sh, key, *fields)
        return value if value is not None else get(bs, key, *fields)

    def latency(key, name, target):
        if not get(sh, key) and not get(bs, key):
            return
        for q in ("p50_ms", "p99_ms"):
            a, b = get(sh, key, q), get(bs, key, q)
            n = fmt(get(sh, key, "n")), fmt(get(bs, key, "n"))
            out.append((f"{name} (n = {n[0]} / {n[1]})", q.replace("_ms", ""), fmt(a, " ms"),
                        fmt(b, " ms"), ratio(a, b), target if q == "p99_ms" else ""))

    latency("in_process_trigger", "trigger → start, same process", "p99 ≤ 5 ms")
    latency("trigger_across_processes", "trigger on A → start on B", "p99 ≤ 50 ms")
    latency("cancel_across_processes", "cancel on A → stop token on B", "p99 ≤ 100 ms")

    cron = "cron_every_second"
    if get(sh, cron) or get(bs, cron):
        slots = lambda d: (f"{get(d, cron, 'slots_run')} / {get(d, cron, 'slots')}"
                           if get(d, cron) else None)
        a, b = get(sh, cron, "slots_run"), get(bs, cron, "slots_run")
        out.append(("cron `* * * * * *`", "slots run", fmt(slots(sh)), fmt(slots(bs)),
                    ratio(a, b, higher_is_better=True), "100 %"))
        for q in ("p50_ms", "p99_ms"):
            a, b = get(sh, cron, "start_lag", q), get(bs, cron, "start_lag", q)
            out.append(("cron `* * * * * *`", "start lag " + q.replace("_ms", ""),
                        fmt(a, " ms"), fmt(b, " ms"), ratio(a, b),
                        "p99 ≤ 20 ms" if q == "p99_ms" else ""))

    interval = "interval_one_second"
    if get(sh, interval) or get(bs, interval):
        name = f"1 s interval for {fmt(either(interval, 'seconds'))} s"
        a, b = get(sh, interval, "runs"), get(bs, interval, "runs")
        out.append((name, "runs", fmt(a), fmt(b), ratio(a, b, higher_is_better=True), ""))
        ours, theirs = cadence_precision(sh, interval, 1000), cadence_precision(bs, interval, 1000)
        for i, q in enumerate(("p50", "p99")):
            a, b = ours[i] if ours else None, theirs[i] if theirs else None
            out.append((name, f"deviation from 1,000 ms between starts, {q}", fmt(a, " ms"),
                         fmt(b, " ms"), ratio(a, b), ""))
        a, b = ours[2] if ours else None, theirs[2] if theirs else None
        out.append((name, "drift: last start − first − (n − 1) × 1 s", fmt(a, " ms"),
                    fmt(b, " ms"), ratio(ours and abs(a), theirs and abs(b)), ""))

    idle_keys = sorted({k for d in (sh, bs) for k in d if k.startswith("idle_tasks_")},
                       key=lambda k: int(k.rsplit("_", 1)[1]))
    for key in idle_keys:
        n = key.rsplit("_", 1)[1]
        for measure, field, unit, target in (
                ("registration", "registration_ms", " ms", "≤ 1 s (10,000)"),
                ("statements/s", "statements_per_s", "", "≤ 0.2"),
                ("RSS", "rss_mb", " MB", "≤ 20 MB (1,000)"),
                ("CPU", "cpu_ms_per_s", " ms/s", "")):
            a, b = get(sh, key, field), get(bs, key, field)
            out.append((f"{int(n):,} idle global tasks", measure, fmt(a, unit), fmt(b, unit),
                        ratio(a, b), target))

    def share(value, whole):
        return fmt(100 * value / whole if value is not None and whole else None, " %")

    tp = "throughput"
    if get(sh, tp) or get(bs, tp):
        a, b = get(sh, tp, "runs_per_s"), get(bs, tp, "runs_per_s")
        tasks = either(tp, "tasks")
        cadence = either(tp, "cadence_ms") or 100  # files from before cadence_ms was written
        name = (f"{either(tp, 'processes')} processes × {tasks} tasks at {cadence} ms, "
                f"{fmt(either(tp, 'seconds'))} s")
        out.append((name, "completed runs/s", fmt(a), fmt(b), ratio(a, b, higher_is_better=True),
                    ""))
        if tasks:
            ceiling = tasks * 1000 / cadence
            out.append((name, f"share of the scenario's ceiling ({fmt(ceiling)}/s: every task "
                        "once per cadence)", share(a, ceiling), share(b, ceiling), "", ""))
        out.append((name, "overlapping runs", fmt(get(sh, tp, "overlaps")),
                    fmt(get(bs, tp, "overlaps")), "", "0"))

    sat = "throughput_saturated"
    if get(sh, sat) or get(bs, sat):
        a, b = get(sh, sat, "runs_per_s"), get(bs, sat, "runs_per_s")
        limit = get(pg, "pgbench_pairs_per_second")
        name = (f"{either(sat, 'processes')} processes × {either(sat, 'tasks')} tasks always due "
                f"({either(sat, 'cadence_ms')} ms cadence), {fmt(either(sat, 'seconds'))} s")
        out.append((name, "completed runs/s", fmt(a), fmt(b), ratio(a, b, higher_is_better=True),
                    "≥ 2 × pgbench single-row"))
        if limit:
            out.append((name, f"share of pgbench's single-row claim+release rate ({fmt(limit)}/s)",
                        share(a, limit), share(b, limit), "", "≥ 200 %"))
        out.append((name, "overlapping runs", fmt(get(sh, sat, "overlaps")),
                    fmt(get(bs, sat, "overlaps")), "", "0"))

    kill = "sigkill_takeover"
    if get(sh, kill) or get(bs, kill):
        a, b = get(sh, kill, "takeover_s"), get(bs, kill, "takeover_s")
        timeout = either(kill, "timeout_s")
        out.append((f"owner SIGKILLed (task timeout {timeout} s)", "s until another process runs it",
                     fmt(a, " s"), fmt(b, " s") if b is not None or not get(bs, kill) else
                     f"> {get(bs, kill, 'limit_s')} s", ratio(a, b), "≤ 11 s"))
    return out


SATURATED = "throughput_saturated"


def batch_of(doc):
    """The engines' claim batch size in a saturation report (at least 1)."""
    return max(1, round(get(doc, SATURATED, "claim_many", "tasks_per_call") or 1))


def saturation_rounds(directory):
    """[(stagehand saturation report, its pgbench report)] of the rounds in `directory`."""
    rounds = []
    for r in range(1, 100):
        ours = os.path.join(directory, f"saturation_stagehand_{r}.json")
        theirs = os.path.join(directory, f"saturation_pgbench_{r}.json")
        if not (os.path.exists(ours) and os.path.exists(theirs)):
            break
        rounds.append((load(ours), load(theirs)))
    return rounds


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def cpu(shares):
    if not shares:
        return "—"
    server = shares.get('postgres_pct', shares.get('mariadbd_pct'))
    return (f"{fmt(shares.get('engines_pct'))}, {fmt(server)}, "
            f"{fmt(shares.get('machine_busy_pct'))} of {fmt(shares.get('cores'))} cores")


def rounds_table(rounds):
    """The saturated rate's rounds and their ratios, with the median and spread of each ratio."""
    lines = ["| round | stagehand runs/s | claims per statement | releases per statement | "
             "pgbench single-row pairs/s | stagehand / single-row | pgbench batched runs/s "
             "| stagehand / batched | overlaps | CPU: engines, PostgreSQL, machine (% of a core) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    single, batched = [], []
    for r, (sh, pg) in enumerate(rounds, 1):
        rate = get(sh, SATURATED, "runs_per_s")
        one = get(pg, "pgbench_pairs_per_second")
        many = get(pg, "pgbench_batched_runs_per_second")
        single.append(100 * rate / one if rate and one else None)
        batched.append(100 * rate / many if rate and many else None)
        lines.append(f"| {r} | {fmt(rate)} | {fmt(get(sh, SATURATED, 'claim_many', 'tasks_per_call'))} "
                     f"| {fmt(get(sh, SATURATED, 'release_many', 'tasks_per_call'))} | {fmt(one)} "
                     f"| {fmt(single[-1], ' %')} | {fmt(many)} ({get(pg, 'batch')} per statement) "
                     f"| {fmt(batched[-1], ' %')} | {fmt(get(sh, SATURATED, 'overlaps'))} "
                     f"| {cpu(get(sh, SATURATED, 'cpu'))} |")
    for name, values in (("median", median), ("spread (max − min)", lambda v: max(v) - min(v))):
        known_single = [v for v in single if v is not None]
        known_batched = [v for v in batched if v is not None]
        rates = [get(sh, SATURATED, "runs_per_s") or 0 for sh, _ in rounds]
        unit = " points" if name.startswith("spread") else " %"
        lines.append(f"| {name} | {fmt(values(rates))} | | | | "
                     f"{fmt(values(known_single) if known_single else None, unit)} | | "
                     f"{fmt(values(known_batched) if known_batched else None, unit)} | | |")
    return "\n".join(lines)


def median_round(rounds):
    """The round whose stagehand rate is the median one."""
    ordered = sorted(rounds, key=lambda pair: get(pair[0], SATURATED, "runs_per_s") or 0)
    return ordered[len(ordered) // 2]


def table(sh, bs, pg):
    lines = ["| scenario | measure | stagehand | Backstage | ratio | target |",
             "|---|---|---|---|---|---|"]
    for row in rows(sh, bs, pg):
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def plot(sh, bs, out_path):
    series = [
        ("in_process_trigger", None, "trigger → start, same process"),
        ("trigger_across_processes", None, "trigger A → start B"),
        ("cancel_across_processes", None, "cancel A → stop token B"),
        ("cron_every_second", "start_lag", "cron lag after the second"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        plots = []
        for i, (key, sub, title) in enumerate(series):
            for system, doc, dash in (("stagehand", sh, 1), ("Backstage", bs, 2)):
                node = get(doc, key, sub) if sub else get(doc, key)
                samples = sorted(get(node, "samples_ms") or [])
                if not samples:
                    continue
                path = os.path.join(tmp, f"{key}_{system}.dat")
                with open(path, "w", encoding="utf-8") as f:
                    for rank, value in enumerate(samples, 1):
                        f.write(f"{max(value, 0.01)} {rank / len(samples)}\n")
                plots.append(f"'{path}' using 1:2 with steps lw 2 dt {dash} lc {i + 1} "
                             f"title '{system}: {title}'")
        if not plots:
            return False
        script = "\n".join([
            "set terminal pngcairo size 1100,650 font 'sans,10'",
            f"set output '{out_path}'",
            "set title 'Start and stop lag: stagehand (solid) vs Backstage 0.19 (dashed), same PostgreSQL'",
            "set logscale x 10",
            "set xlabel 'lag (ms, log scale)'",
            "set ylabel 'share of samples ≤ lag'",
            "set yrange [0:1.02]",
            "set grid",
            "set key outside right top",
            "plot " + ", \\\n  ".join(plots),
        ])
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir")
    parser.add_argument("--batch-of", metavar="FILE")
    args = parser.parse_args()
    if args.batch_of:
        print(batch_of(load(args.batch_of)))
        return 0
    if not args.dir:
        parser.error("--dir is required")
    sh = load(os.path.join(args.dir, "stagehand.json"))
    bs = load(os.path.join(args.dir, "backstage.json"))
    pg_path = os.path.join(args.dir, "pgbench.json")
    pg = load(pg_path) if os.path.exists(pg_path) else {}
    rounds = saturation_rounds(args.dir)
    if rounds:
        middle_sh, middle_pg = median_round(rounds)
        sh = dict(sh, **{SATURATED: middle_sh[SATURATED]})
        pg = dict(pg, pgbench_pairs_per_second=middle_pg.get("pgbench_pairs_per_second"))
    text = table(sh, bs, pg)
    if rounds:
        text += ("\n\nThe saturated rate, " + str(len(rounds)) + " rounds, each beside pgbench on "
                 "the same server right after it (the table above shows the median round):\n\n" +
                 rounds_table(rounds))
    with open(os.path.join(args.dir, "comparison.md"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print(text)
    png = os.path.join(args.dir, "start_lag.png")
    if not plot(sh, bs, png):
        print("report.py: no latency samples (scenarios trigger, across, cancel, cron): no plot",
              file=sys.stderr)
        return 0
    print(f"plot: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
