#!/usr/bin/env python3
"""Renders the suite's results.json as the Markdown tables of docs/reliability.md: per scenario its
faults (duration, takeover) and every guarantee beside what was observed.

Usage: python3 tests/system/report.py build/system-results/results.json > section.md"""

import json
import sys

TITLES = {
    "kill": "1. SIGKILL of the host running a long task",
    "freeze": "2. SIGSTOP for longer than the lease, then SIGCONT",
    "partition": "3a. Partition from PostgreSQL (bytes stop moving, as when packets are dropped)",
    "partition-reset": "3b. Partition from PostgreSQL (connections reset and refused)",
    "pg-restart": "4. PostgreSQL restart (`pg_ctl restart -m fast`)",
    "skew": "5. Clock skew (one host 3 h 0.4 s ahead)",
    "rolling": "6. Rolling restart (SIGTERM, then a new process, host by host)",
    "load": "Load",
    "rest": "REST under load and bad input",
    "cron-join": "7. Cron slots through joins and a restart (1 ms tasks every 2 s and every "
                 "second, a task flooding stdout)",
    "stubborn": "8. A task that ignores SIGTERM and one that exits slowly (manual, timeout 2 s)",
    "setsid": "9. Commands whose setsid grandchild outlives them (timeout, cancel, exit)",
}


def cell(value):
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, (dict, list)):
        return "`" + json.dumps(value, default=str) + "`"
    return str(value).replace("|", "\\|")


def render(results):
    out = [f"Mode: {results['mode']}; load {results['load_tasks']} tasks for "
           f"{results['load_seconds']} s; REST phase {results['rest_seconds']} s.", ""]
    for s in results["scenarios"]:
        out.append(f"### {TITLES.get(s['name'], s['name'])}: {'pass' if s['ok'] else 'FAIL'}")
        out.append("")
        if s.get("error"):
            out += ["The scenario could not complete:", "", "```",
                    s["error"].strip().splitlines()[-1], "```", ""]
        if s.get("faults"):
            out += ["| fault | host | duration (ms) | takeover / resume (ms) |", "|---|---|---|---|"]
            for f in s["faults"]:
                out.append(f"| {f['kind']} | {f['host']} | {f['duration_ms']:.0f} | "
                           f"{cell(f.get('takeover_ms')) if f.get('takeover_ms') is not None else '–'} |")
            out.append("")
        if s.get("checks"):
            out += ["| guarantee | observed | |", "|---|---|---|"]
            for c in s["checks"]:
                out.append(f"| {c['guarantee']} | {cell(c['observed'])} | "
                           f"{'ok' if c['ok'] else '**violated**'} |")
            out.append("")
        figures = {k: v for k, v in s.get("figures", {}).items()
                   if k not in ("overlaps", "cadence", "handovers")}
        if figures:
            out += ["Figures: " + ", ".join(f"{k} = {cell(v)}" for k, v in figures.items()), ""]
    return "\n".join(out)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(render(json.load(f)))
