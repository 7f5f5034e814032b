"""A Backstage 0.19 worker for mixed-fleet tests (bench/backstage-peer/peer.js --serve-tasks:
Backstage's own DefaultSchedulerService), and what those tests share: command tasks that log
their starts and ends as JSON lines, the reading of those lines, and the verdicts."""

import json
import os
import shlex
import signal
import subprocess
import time

from harness import wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PEER = os.path.join(ROOT, "bench", "backstage-peer")


class Verdicts:
    """The expectations checked so far, and the figures measured."""

    def __init__(self):
        self.failures = []
        self.figures = {}

    def check(self, ok, expectation, seen):
        if ok:
            print(f"ok: {expectation}", flush=True)
        else:
            print(f"FAIL: {expectation}\n  saw: {seen}", flush=True)
            self.failures.append(expectation)
        return ok

    def figure(self, name, value):
        self.figures[name] = value
        print(f"  {name}: {value}", flush=True)

    def finish(self, out, what, seconds):
        """Prints the summary of `what`, writes <out>/summary.json; returns the exit code."""
        print(f"\nsummary ({seconds:.0f} s): " + json.dumps(self.figures, default=str))
        with open(os.path.join(out, "summary.json"), "w") as f:
            json.dump({"failures": self.failures, "figures": self.figures, "seconds": seconds}, f,
                      indent=1, default=str)
        if self.failures:
            print(f"{what}: {len(self.failures)} expectation(s) broken:\n  - " +
                  "\n  - ".join(self.failures))
            return 1
        print(f"{what}: every expectation met")
        return 0


def now_ms():
    return time.time() * 1000


def event_command(events, task, work_s, exit_code=0):
    """A command task that appends a start and an end line to `events` (one O_APPEND write each),
    naming its host from STAGEHAND_SYSTEM_HOST."""
    def line(event):
        return ("printf '{\"host\":\"%s\",\"task\":\"" + task + "\",\"event\":\"" + event +
                "\",\"t\":%s}\\n' \"$STAGEHAND_SYSTEM_HOST\" \"$(date +%s%3N)\" >> " +
                shlex.quote(events))
    script = f"{line('start')}; sleep {work_s}; {line('end')}; exit {exit_code}"
    return ["sh", "-c", script]


def read_events(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    out.append(json.loads(line))
    except FileNotFoundError:
        pass
    return out


def starts(events, task, after=None, before=None, host=None):
    return [e for e in events if e["task"] == task and e["event"] == "start" and
            (after is None or e["t"] > after) and (before is None or e["t"] <= before) and
            (host is None or e["host"] == host)]


def per_host(events):
    counts = {}
    for e in events:
        counts[e["host"]] = counts.get(e["host"], 0) + 1
    return counts


class Peer:
    """The Backstage worker: peer.js --serve-tasks, stopped with SIGTERM."""

    def __init__(self, ctx, fleet, tasks):
        self.ctx = ctx
        self.url = ctx.db.url
        self.spec_path = os.path.join(fleet.workdir, "backstage.json")
        self.ready_path = os.path.join(fleet.workdir, "backstage.ready")
        self.log_path = os.path.join(fleet.workdir, "backstage.log")
        with open(self.spec_path, "w") as f:
            json.dump({"plugin": fleet.plugin, "database": fleet.database(), "events": ctx.events,
                       "host": "backstage", "ready": self.ready_path, "tasks": tasks}, f, indent=1)
        self.process = None

    def start(self, timeout_s=60):
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                ["node", os.path.join(PEER, "peer.js"), f"--url={self.url}",
                 f"--modules={self.ctx.modules}", f"--serve-tasks={self.spec_path}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=dict(os.environ, TZ="UTC"))

        def ready():
            if self.process.poll() is not None:
                raise RuntimeError(f"the Backstage peer exited with {self.process.returncode}: "
                                   f"{self.log_tail()}")
            return os.path.exists(self.ready_path)
        if not wait_for(ready, timeout_s, 0.05):
            raise RuntimeError(f"the Backstage peer not ready after {timeout_s} s: "
                               f"{self.log_tail()}")

    def log_tail(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def stop(self):
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
            return "no exit 15 s after SIGTERM"


def peer_modules(args):
    if args.modules:
        return args.modules
    done = subprocess.run([os.path.join(PEER, "install.sh")], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"bench/backstage-peer/install.sh failed: {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]
