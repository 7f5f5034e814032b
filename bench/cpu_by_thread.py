#!/usr/bin/env python3
"""Where the CPU goes while a multi-process scenario of engine_bench runs: the worker processes'
threads, grouped by name (stagehand-disp, stagehand-run, stagehand-timer; unnamed threads show
the process's name), and PostgreSQL's processes, grouped by kind (for a client backend, the first
words of the statement it ran last, so the listening sessions, the claims and the releases stand
apart). For each group: the share of a core, split into user and system time, and the voluntary
and involuntary context switches per second. Reads /proc twice, `--seconds` apart.

    engine_bench --side_by_side --scenarios=saturation ... &
    bench/cpu_by_thread.py --delay 12 --seconds 10 --postgres "$STAGEHAND_TEST_POSTGRES_URL"
"""

import argparse
import collections
import os
import subprocess
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")


def watched_processes():
    """The pids of engine_bench workers and of PostgreSQL, each with its command line."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        if "--worker=" in command or name == "postgres":
            found[int(pid)] = (name, command)
    return found


def thread_counters(pid):
    """{tid: (thread name, cpu ticks, user ticks, system ticks, voluntary, involuntary)}."""
    counters = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return counters
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        user, system = int(fields[11]), int(fields[12])
        switches = {
            line.split(":")[0]: int(line.split()[1])
            for line in status.splitlines()
            if "ctxt_switches" in line
        }
        counters[int(tid)] = (
            name,
            user + system,
            user,
            system,
            switches.get("voluntary_ctxt_switches", 0),
            switches.get("nonvoluntary_ctxt_switches", 0),
        )
    return counters


def postgres_kinds(url):
    """{pid: kind} from pg_stat_activity: the backend type, or a client's last statement."""
    query = (
        "SELECT pid, coalesce(backend_type, ''), "
        "left(regexp_replace(query, '\\s+', ' ', 'g'), 60) FROM pg_stat_activity"
    )
    out = subprocess.run(
        ["psql", url, "-AXtc", query], capture_output=True, text=True, check=True
    ).stdout
    kinds = {}
    for line in out.splitlines():
        pid, backend_type, statement = line.split("|", 2)
        kinds[int(pid)] = (
            "client: " + statement.strip() if backend_type == "client backend" else backend_type
        )
    return kinds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--delay", type=float, default=0, help="seconds to wait before the first read"
    )
    parser.add_argument("--seconds", type=float, default=10, help="seconds between the two reads")
    parser.add_argument("--postgres", required=True, help="URL of the server the workers use")
    args = parser.parse_args()

    time.sleep(args.delay)
    processes = watched_processes()
    if not any("--worker=" in command for _, command in processes.values()):
        sys.exit("cpu_by_thread.py: no engine_bench worker is running")
    before = {pid: thread_counters(pid) for pid in processes}
    time.sleep(args.seconds)
    after = {pid: thread_counters(pid) for pid in processes}
    kinds = postgres_kinds(args.postgres)

    groups = collections.defaultdict(lambda: [0] * 5)
    for pid, (name, command) in processes.items():
        for tid, first in before[pid].items():
            last = after[pid].get(tid)
            if last is None:
                continue
            if name == "postgres":
                key = "postgres " + kinds.get(pid, command[:40])
            else:
                key = "engine " + first[0]
            for i in range(5):
                groups[key][i] += last[i + 1] - first[i + 1]

    def share(ticks):
        return 100 * ticks / TICKS / args.seconds

    print(
        f"{'group':72} {'% core':>7} {'user':>6} {'system':>6} {'vol cs/s':>9} "
        f"{'invol cs/s':>10}"
    )
    for key, (cpu, user, system, voluntary, involuntary) in sorted(
        groups.items(), key=lambda item: -item[1][0]
    ):
        if cpu == 0 and voluntary == 0:
            continue
        print(
            f"{key[:72]:72} {share(cpu):7.1f} {share(user):6.1f} {share(system):6.1f} "
            f"{voluntary / args.seconds:9.0f} {involuntary / args.seconds:10.0f}"
        )
    print(f"total: {share(sum(g[0] for g in groups.values())):.1f} % of a core")


if __name__ == "__main__":
    main()
