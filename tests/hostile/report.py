#!/usr/bin/env python3
"""Renders the hostile-input suite's results.json as the Markdown of docs/reliability.md (section
"Hostile clients and tasks"): one table with a row per check (how it attacks, when it passes, what
was observed), a sentence per check on what it proves, and every guarantee that failed.

Usage: python3 tests/hostile/report.py build/hostile-results/results.json > section.md"""

import json
import sys

# name: (title, how it attacks, passes if, what a pass proves)
CHECKS = {
    "slowloris": (
        "1. Slowloris and idle flood",
        "64 connections send a request head a header line or a byte per second and never end it; "
        "300 connect and send nothing; each is reopened when cut (from 127.0.0.2-4)",
        "every liveness probe (a fresh connection every 50 ms from 127.0.0.1) answers 200 "
        "within 1 s",
        "a few hundred unauthenticated sockets cannot starve the server: it serves from a fixed "
        "set of threads, and a head that takes too long or a connection that stays idle is cut "
        "(near 10 s: the head deadline; near 5 s: the idle timeout; sooner: an eviction at the "
        "per-client cap)."),
    "env-fds": (
        "2. Secrets and descriptors of a real task",
        "the daemon has STAGEHAND_TOKEN, PGPASSWORD and AWS_SECRET_ACCESS_KEY in its environment "
        "and 50 keep-alive clients connected when a command task starts; the task, running as "
        "the daemon's user (`nobody` when the suite runs as root), reads /proc/<pid>/environ of "
        "its supervisor and of the daemon",
        "the task's environment holds none of the three (name or value); its process has "
        "descriptors 0-2 only (`ls` adds its own on /proc/self/fd); every daemon descriptor "
        "above 2 is O_CLOEXEC; both environ reads are refused or hold none of the three (which "
        "the suite, as root, finds in the daemon's)",
        "a task is given only its documented base environment and descriptors 0-2: none of the "
        "daemon's secrets, no other client's socket, no file the daemon holds open; that nothing "
        "the daemon opens could reach a child it starts later; and that a task cannot take the "
        "secrets from the daemon's or its supervisor's /proc files either, although it runs as "
        "their user (the daemon is non-dumpable)."),
    "header-flood": (
        "3. Header flood",
        "50 requests at once, each with 20,000 header fields (430 KiB)",
        "each is refused with a 4xx (431 expected) and the daemon's VmRSS grows by less than "
        "8 MiB",
        "the server stops reading a head at its limits instead of buffering and parsing it."),
    "methods": (
        "4. Random methods",
        "500 requests to liveness, each with a random method token (3-12 letters, digits, `-` "
        "and `_`)",
        "/metrics gains at most 2 lines",
        "clients cannot add metric series: unknown methods and unmatched routes fold into one "
        "label value."),
    "bodies": (
        "5. Oversized and gzip-bomb HTTP task bodies",
        "HTTP tasks whose server answers with a 300 MB body, and with a gzip bomb (~500 KB "
        "expanding to 500 MiB, `Content-Encoding: gzip`)",
        "the daemon's peak RSS (VmHWM, reset before each run) grows by less than 64 MiB for each, "
        "and the run reports the 1 MiB cap (`http task response`: `body_truncated`, `body_bytes`)",
        "an HTTP task keeps at most `maxResponseBytes` of a body and never inflates one, so the "
        "server it calls cannot exhaust the daemon's memory."),
    "signals": (
        "6. SIGHUP reloads; SIGTERM leaves no orphan",
        "a command task starts `setsid` sleep 300 (its own session, a marker in its command "
        "line); the daemon gets SIGHUP, then, about 1 s later, SIGTERM",
        "after SIGHUP the daemon logs `Config reloaded`, answers liveness 200 1 s later, and the "
        "task's processes (the same pids) and run (still running, same start) are untouched; "
        "after SIGTERM the daemon exits, and then no process whose command line holds the marker "
        "is left",
        "a reload by SIGHUP leaves the daemon and a running task alone, and a shutdown by SIGTERM "
        "ends every process of a running task, including one that left its process group and "
        "session."),
}


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(results):
    checks = results["checks"]
    passed = sum(1 for c in checks if c["ok"])
    user = f" running as `{results['daemon_user']}`" if results.get("daemon_user") else ""
    out = [f"Run of commit {results.get('commit') or '?'} on {results.get('date', '?')[:10]}: "
           f"`tests/hostile/run.py` against one `stagehand serve` on SQLite{user}, "
           f"{results.get('cores', '?')} cores, Linux {results.get('kernel', '?')}, "
           f"{results.get('seconds', '?')} s in all. {passed} of {len(checks)} checks pass.", "",
           "| check | attack | passes if | observed | |", "|---|---|---|---|---|"]
    for c in checks:
        title, attack, passes_if, _ = CHECKS.get(c["name"], (c["name"], "", "", ""))
        observed = c.get("figures", {}).get("headline")
        if observed is None and c.get("error"):
            observed = "could not complete: " + c["error"].strip().splitlines()[-1]
        out.append(f"| {cell(title)} | {cell(attack)} | {cell(passes_if)} | "
                   f"{cell(observed or '')} | {'pass' if c['ok'] else '**FAIL**'} |")
    out.append("")
    for c in checks:
        title, _, _, proves = CHECKS.get(c["name"], (c["name"], "", "", ""))
        out.append(f"- **{title}** proves that {proves}")
    failed = [(c, g) for c in checks for g in c.get("checks", []) if not g["ok"]]
    if failed:
        out += ["", "Guarantees that failed in this run:", ""]
        for c, g in failed:
            title = CHECKS.get(c["name"], (c["name"],))[0]
            out.append(f"- {title}: {cell(g['guarantee'])}. Observed: {cell(g['observed'])}")
    return "\n".join(out)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(render(json.load(f)))
