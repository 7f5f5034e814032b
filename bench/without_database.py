#!/usr/bin/env python3
"""What `stagehand serve` on PostgreSQL does while its database is gone (issue 38): the CPU it
burns and the connections it attempts per second, and how fast its readiness says so and says
it is back. The daemon reaches the server of STAGEHAND_TEST_POSTGRES_URL through a TCP proxy
of this script's own, which at "down" cuts every connection and then either closes each new one
at once ("closed": a server that is restarting, or a pooler without a server) or holds it
without a byte ("silent": a partition); at "up" it forwards again. Each mode is measured
several times in a fresh daemon; the median and the spread (min-max) are reported.

    bench/without_database.py --stagehand build/ci/apps/stagehand/stagehand \
        [--repetitions 3] [--down-seconds 20] [--modes closed,silent] [--out FILE]

STAGEHAND_BENCH_KEEP=1 keeps each daemon's directory (its log), STAGEHAND_BENCH_LOG_LEVEL sets
its --log-level.

Targets: ≤ 1 % of a core and ≤ 10 connection attempts a second while down; readiness 503 within
the grace (stagehand.database.readinessGrace, 2 s) + 1 s of the cut, 200 within 1 s of the return.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

READINESS = "/.backstage/health/v1/readiness"


class Proxy:
    """A TCP proxy to `target` whose mode is "up" (forward), "closed" or "silent"."""

    def __init__(self, target):
        self.target = target
        self.mode = "up"
        self.attempts = 0  # connections accepted while not up
        self.lock = threading.Lock()
        self.sockets = []
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(512)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def set_mode(self, mode):
        with self.lock:
            self.mode = mode
            if mode != "up":
                for s in self.sockets:
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    s.close()
                self.sockets = []

    def _accept(self):
        while True:
            client, _ = self.listener.accept()
            with self.lock:
                mode = self.mode
                if mode != "up":
                    self.attempts += 1
                if mode == "closed":
                    client.close()
                    continue
                self.sockets.append(client)
                if mode == "silent":
                    continue
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets.append(server)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source, sink):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def write_config(directory, url, proxy_port):
    parts = urllib.parse.urlsplit(url)
    connection = f"postgresql://{parts.username}:{parts.password}@127.0.0.1:{proxy_port}/postgres"
    lines = [
        "backend:",
        "  listen: { host: 127.0.0.1, port: 0 }",
        f"  database: {{ client: pg, connection: '{connection}' }}",
        "stagehand:",
        "  plugins:",
        "    jobs:",
        "      tasks:",
    ]
    for i in range(10):
        lines.append(f"        tick-{i}:")
        lines.append("          schedule: { frequency: { seconds: 1 }, timeout: 10s }")
        lines.append("          command: ['/bin/true']")
    lines.append("        nightly:")
    lines.append("          schedule: { frequency: { cron: '0 3 * * *' }, timeout: 10m }")
    lines.append("          command: ['/bin/true']")
    path = os.path.join(directory, "app.yaml")
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")
    return path


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ready(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{READINESS}", timeout=2) as answer:
            return answer.status == 200
    except urllib.error.HTTPError as error:
        return error.code == 200
    except OSError:
        return None


def wait_readiness(port, wanted, limit):
    """Seconds until readiness is `wanted` (True: 200, False: 503), probed every 50 ms."""
    begin = time.monotonic()
    while time.monotonic() - begin < limit:
        if ready(port) is wanted:
            return time.monotonic() - begin
        time.sleep(0.05)
    return None


def measure(binary, url, mode, down_seconds):
    directory = tempfile.mkdtemp(prefix="stagehand-without-db-")
    target = urllib.parse.urlsplit(url)
    proxy = Proxy((target.hostname, target.port))
    config = write_config(directory, url, proxy.port)
    log = open(os.path.join(directory, "daemon.log"), "w")
    ready_file = os.path.join(directory, "ready")
    process = subprocess.Popen([binary, "serve", "--config", config, "--ready-file", ready_file,
                                "--log-level", os.environ.get("STAGEHAND_BENCH_LOG_LEVEL", "info")],
                               stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(ready_file):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"stagehand serve did not become ready; see {log.name}")
            time.sleep(0.02)
        time.sleep(0.2)
        with open(ready_file) as f:
            port = json.load(f)["port"]
        time.sleep(3)  # the ticks run
        proxy.set_mode(mode)
        to_unready = wait_readiness(port, False, 10)
        # The first seconds after the cut are the backoff's climb; the steady cost comes after.
        time.sleep(2)
        attempts_before = proxy.attempts
        cpu_before = cpu_seconds(process.pid)
        begin = time.monotonic()
        time.sleep(down_seconds)
        elapsed = time.monotonic() - begin
        cpu = (cpu_seconds(process.pid) - cpu_before) / elapsed
        attempts = (proxy.attempts - attempts_before) / elapsed
        proxy.set_mode("up")
        print(f"up at {time.time():.3f}", file=log, flush=True)
        to_ready = wait_readiness(port, True, 30)
        return {"cpu_percent": round(100 * cpu, 3), "attempts_per_s": round(attempts, 2),
                "unready_after_s": None if to_unready is None else round(to_unready, 3),
                "ready_again_after_s": None if to_ready is None else round(to_ready, 3)}
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
        if os.environ.get("STAGEHAND_BENCH_KEEP"):
            print(f"kept {directory}", file=sys.stderr)
        else:
            shutil.rmtree(directory, ignore_errors=True)


def summary(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stagehand", required=True)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--down-seconds", type=float, default=20)
    parser.add_argument("--modes", default="closed,silent")
    parser.add_argument("--out")
    args = parser.parse_args()
    url = os.environ.get("STAGEHAND_TEST_POSTGRES_URL")
    if not url:
        sys.exit("without_database.py: STAGEHAND_TEST_POSTGRES_URL is not set "
                 "(run it through scripts/test-postgres)")
    results = {}
    for mode in args.modes.split(","):
        rounds = [measure(args.stagehand, url, mode, args.down_seconds)
                  for _ in range(args.repetitions)]
        results[mode] = {"rounds": rounds}
        for key in ("cpu_percent", "attempts_per_s", "unready_after_s", "ready_again_after_s"):
            results[mode][key] = summary([r[key] for r in rounds])
        print(f"{mode}: {json.dumps(results[mode])}", file=sys.stderr)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as out:
            out.write(text + "\n")


if __name__ == "__main__":
    main()
