#!/usr/bin/env python3
"""The footprint of `stagehand serve` on SQLite: resident memory and threads with 1, 1,000 and
10,000 idle tasks (cron tasks due once a day), and the size of /metrics per task that has run,
with and without per-task series. Each size is measured in a fresh daemon, several times; the
median and the spread (min-max) are reported.

    bench/daemon_footprint.py --stagehand build/release/apps/stagehand/stagehand \
        [--repetitions 5] [--out bench/results/daemon_footprint.json]
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def write_config(directory, tasks, cron, per_task_series=True):
    lines = [
        "backend:",
        "  listen: { host: 127.0.0.1, port: 0 }",
        f"  database: {{ client: better-sqlite3, connection: {{ directory: {directory}/data }} }}",
        "stagehand:",
        f"  metrics: {{ perTaskSeries: {'true' if per_task_series else 'false'} }}",
        "  plugins:",
        "    jobs:",
        "      tasks:",
    ]
    for i in range(tasks):
        lines.append(f"        task-{i:05d}:")
        lines.append(f"          schedule: {{ frequency: {{ cron: '{cron}' }}, timeout: 10m }}")
        lines.append(f"          command: ['/bin/true', 'argument-{i}']")
    path = os.path.join(directory, "app.yaml")
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")
    return path


class Daemon:
    def __init__(self, binary, config, directory):
        self.ready = os.path.join(directory, "ready")
        self.log = open(os.path.join(directory, "daemon.log"), "w")
        self.process = subprocess.Popen(
            [binary, "serve", "--config", config, "--ready-file", self.ready],
            stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.ready):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"stagehand serve did not become ready; see {self.log.name}")
            time.sleep(0.02)
        with open(self.ready) as ready:
            self.port = json.load(ready)["port"]

    def status_kib(self, field):
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise RuntimeError(f"no {field} in /proc/{self.process.pid}/status")

    def threads(self):
        return len(os.listdir(f"/proc/{self.process.pid}/task"))

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as answer:
            return answer.read()

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)
        self.log.close()


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "runs": values}


def measure_idle(binary, tasks, repetitions, settle):
    rss, threads = [], []
    for _ in range(repetitions):
        directory = tempfile.mkdtemp(prefix="stagehand-footprint-")
        try:
            daemon = Daemon(binary, write_config(directory, tasks, "0 3 * * *"), directory)
            time.sleep(settle)
            rss.append(round(daemon.status_kib("VmRSS") / 1024, 1))
            threads.append(daemon.threads())
            daemon.stop()
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    return {"tasks": tasks, "rss_mb": summary(rss), "threads": summary(threads)}


def measure_metrics(binary, per_task_series, tasks=200):
    directory = tempfile.mkdtemp(prefix="stagehand-footprint-")
    try:
        daemon = Daemon(binary, write_config(directory, tasks, "* * * * * *", per_task_series),
                        directory)
        before = len(daemon.metrics())
        time.sleep(3.5)  # every task runs about three times
        body = daemon.metrics()
        daemon.stop()
        return {"per_task_series": per_task_series, "tasks": tasks, "bytes": len(body),
                "lines": body.count(b"\n"), "bytes_before_runs": before,
                "bytes_per_task": round((len(body) - before) / tasks)}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stagehand", required=True, help="the stagehand binary")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--settle", type=float, default=2.0,
                        help="seconds to wait after ready before reading memory")
    parser.add_argument("--out", default="bench/results/daemon_footprint.json")
    args = parser.parse_args()

    results = {"idle": [], "metrics": []}
    for tasks in (1, 1000, 10000):
        row = measure_idle(args.stagehand, tasks, args.repetitions, args.settle)
        results["idle"].append(row)
        print(f"{tasks:>6} idle tasks: RSS {row['rss_mb']['median']} MB "
              f"({row['rss_mb']['min']}-{row['rss_mb']['max']}), "
              f"threads {row['threads']['median']}", flush=True)
    for per_task_series in (True, False):
        row = measure_metrics(args.stagehand, per_task_series)
        results["metrics"].append(row)
        print(f"/metrics with perTaskSeries={str(per_task_series).lower()}: {row['bytes']} bytes "
              f"for {row['tasks']} tasks that ran ({row['bytes_per_task']} B per task)",
              flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump(results, out, indent=2)
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
