#!/usr/bin/env python3
"""PostgreSQL connections and threads of an idle `stagehand serve`: 30 plugins with one idle task
each (a cron task due once a day), in `pluginDivisionMode: database` and `schema`. After the daemon
is ready it waits 30 s, then counts the daemon's sessions in pg_stat_activity once a second for
`--window` seconds (statement sessions, and LISTEN sessions: those whose last query is a LISTEN)
and reads its thread count from /proc. Each mode is measured in a fresh daemon and fresh databases,
several times; the median and the spread (min-max) of the count at 30 s and of the largest count
in the window are reported.

Needs STAGEHAND_TEST_POSTGRES_URL and STAGEHAND_TEST_PG_BIN (scripts/lib/postgres.sh); run it
through bench/connections.sh, which starts a throwaway server:

    bench/connections.sh --stagehand build/release/apps/stagehand/stagehand \
        [--before /path/to/older/stagehand] [--repetitions 3] [--out bench/results/connections.json]
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

PLUGINS = 30


def psql(sql, database="postgres"):
    url = os.environ["STAGEHAND_TEST_POSTGRES_URL"]
    url = url.rsplit("/", 1)[0] + "/" + database
    bin_dir = os.environ["STAGEHAND_TEST_PG_BIN"]
    result = subprocess.run([os.path.join(bin_dir, "psql"), "-X", "-q", "-t", "-A", "-d", url,
                             "-c", sql], check=True, capture_output=True, text=True)
    return result.stdout.strip()


def write_config(directory, mode, run_id, extra):
    url = os.environ["STAGEHAND_TEST_POSTGRES_URL"]
    lines = ["backend:", "  listen: { host: 127.0.0.1, port: 0 }", "  database:",
             "    client: pg", f"    pluginDivisionMode: {mode}"]
    if mode == "schema":
        database = f"bench_schema_{run_id}"
        psql(f"CREATE DATABASE {database}")
        lines.append(f"    connection: '{url.rsplit('/', 1)[0]}/{database}'")
    else:
        lines.append(f"    connection: '{url}'")
        lines.append(f"    prefix: bench_{run_id}_")
    lines += extra
    lines += ["stagehand:", "  plugins:"]
    for i in range(PLUGINS):
        lines += [f"    plugin-{i:02d}:", "      tasks:", "        nightly:",
                  "          schedule: { frequency: { cron: '0 3 * * *' }, timeout: 10m }",
                  "          command: ['/bin/true']"]
    path = os.path.join(directory, "app.yaml")
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")
    return path


def count_sessions(pid_filter_sql):
    row = psql("SELECT count(*), count(*) FILTER (WHERE query LIKE 'LISTEN%') "
               "FROM pg_stat_activity WHERE backend_type = 'client backend' "
               f"AND pid <> pg_backend_pid() AND {pid_filter_sql}")
    total, listen = (int(value) for value in row.split("|"))
    return total, listen


def measure(binary, mode, run_id, settle, window, extra):
    directory = tempfile.mkdtemp(prefix="stagehand-connections-")
    ready = os.path.join(directory, "ready")
    log = open(os.path.join(directory, "daemon.log"), "w")
    process = subprocess.Popen(
        [binary, "serve", "--config", write_config(directory, mode, run_id, extra),
         "--ready-file", ready], stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(ready):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"stagehand serve did not become ready; see {log.name}")
            time.sleep(0.05)
        started = time.monotonic()
        # The daemon's sessions: every client session but psql's (application_name 'psql').
        mine = "application_name <> 'psql'"
        time.sleep(max(0.0, started + settle - time.monotonic()))
        samples = []
        for second in range(window + 1):
            time.sleep(max(0.0, started + settle + second - time.monotonic()))
            total, listen = count_sessions(mine)
            samples.append({"total": total, "listen": listen})
        threads = len(os.listdir(f"/proc/{process.pid}/task"))
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        return {"at_settle": samples[0], "max_total": max(s["total"] for s in samples),
                "threads": threads}
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "runs": values}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stagehand", required=True, help="the stagehand binary to measure")
    parser.add_argument("--label", default="after", help="what to call --stagehand in the output")
    parser.add_argument("--before", help="an older stagehand binary, measured the same way")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--settle", type=float, default=30.0, help="seconds idle before counting")
    parser.add_argument("--window", type=int, default=10, help="seconds of sampling after that")
    parser.add_argument("--out", help="write the results as JSON here too")
    args = parser.parse_args()
    for variable in ("STAGEHAND_TEST_POSTGRES_URL", "STAGEHAND_TEST_PG_BIN"):
        if not os.environ.get(variable):
            sys.exit(f"connections.py: {variable} is not set (run bench/connections.sh)")

    binaries = [(args.label, args.stagehand)] + ([("before", args.before)] if args.before else [])
    results = []
    run = 0
    for label, binary in binaries:
        for mode in ("database", "schema"):
            runs = []
            for _ in range(args.repetitions):
                run += 1
                runs.append(measure(binary, mode, f"{os.getpid()}_{run}", args.settle,
                                    args.window, []))
            entry = {
                "binary": label, "mode": mode, "plugins": PLUGINS,
                "connections_at_30s": summary([r["at_settle"]["total"] for r in runs]),
                "listen_at_30s": summary([r["at_settle"]["listen"] for r in runs]),
                "max_connections_30_to_40s": summary([r["max_total"] for r in runs]),
                "threads": summary([r["threads"] for r in runs]),
            }
            results.append(entry)
            print(f"{label:6} {mode:8} connections at 30 s: "
                  f"{entry['connections_at_30s']['median']} "
                  f"(listen {entry['listen_at_30s']['median']}; runs "
                  f"{entry['connections_at_30s']['runs']}), max in 30-{30 + args.window} s: "
                  f"{entry['max_connections_30_to_40s']['median']} "
                  f"(runs {entry['max_connections_30_to_40s']['runs']}), threads "
                  f"{entry['threads']['median']}", flush=True)
    if args.out:
        with open(args.out, "w") as out:
            json.dump(results, out, indent=2)
            out.write("\n")


if __name__ == "__main__":
    main()
