#!/usr/bin/env python3
"""stagehand's hostile-input suite: hostile clients and hostile tasks against one real
`stagehand serve` on SQLite (issue 14).

The daemon runs in a temporary directory (its SQLite files under ./data), listens on 127.0.0.1
port 0 (named in its ready file), needs a static token for its plugin routes, and has
STAGEHAND_TOKEN, PGPASSWORD and AWS_SECRET_ACCESS_KEY in its environment. Run as root, the suite
starts the daemon as `nobody` (setpriv: no supplementary groups, no capabilities) and gives that
user the temporary directory; otherwise the daemon runs as the user running the suite. Its plugin
`hostile` has four manual tasks that the checks trigger over REST. The checks, in this order:

  slowloris     64 slow-header and 300 idle connections (each reconnected when cut) for 15 s, while
                liveness is requested on a fresh connection every 50 ms: each answers 200 in 1 s
  env-fds       with 50 keep-alive clients connected, a command task: none of the daemon's secrets
                in its environment, no descriptor beyond 0-2; every daemon descriptor close-on-exec;
                running as the daemon's user, it cannot read the secrets from the environ of its
                supervisor or of the daemon in /proc (the daemon is non-dumpable)
  header-flood  50 requests with 20,000 header fields each, at once: each refused with a 4xx, the
                daemon's VmRSS grows by less than 8 MiB
  methods       500 requests with random method tokens: /metrics gains at most 2 lines
  bodies        HTTP tasks answered by a 300 MB body and by a gzip bomb (~500 KB expanding to
                500 MiB): peak RSS grows by less than 64 MiB for each, the run reports the cap
  signals       a command with a setsid grandchild, then SIGHUP to the daemon: it reloads its
                config and keeps running, answering liveness, and 1 s later the task's processes
                and run are untouched; then SIGTERM: once the daemon has exited no process of the
                task is left (this check ends the daemon, so it always runs last)

Usage:
  python3 tests/hostile/run.py [--stagehand PATH] [--out DIR] [--checks slowloris,methods,...]
      [--flood-seconds S]

Writes <out>/results.json and <out>/summary.txt (the daemon's config and log go to <out> too);
exits 1 when any check fails, 2 on bad usage. `report.py <out>/results.json` renders the
Markdown of docs/reliability.md."""

import argparse
import datetime
import json
import os
import platform
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import checks as suite  # noqa: E402
from support import (BodyServer, Daemon, build_gzip_bomb, kill_pids,  # noqa: E402
                     processes_holding, unprivileged_identity)

TITLES = {
    "slowloris": "Slowloris and idle flood",
    "env-fds": "Secrets and descriptors of a real task",
    "header-flood": "Header flood",
    "methods": "Random methods",
    "bodies": "Oversized and gzip-bomb HTTP task bodies",
    "signals": "SIGHUP reloads; SIGTERM leaves no orphan",
}


class Context:
    """What the checks share: the daemon, the body server, paths and the attack sizes."""


def default_binary():
    for build in ("ci", "hostile", "dev", "release"):
        path = os.path.join(ROOT, "build", build, "apps", "stagehand", "stagehand")
        if os.path.exists(path):
            return path
    return None


def loopback_sources():
    """Source addresses for the attackers, so that the per-client connection cap (256) does not
    cut the flood short and every attacker connection stays open: 127.0.0.2 for the slow ones,
    127.0.0.3 and .4 for the idle ones (the prober uses 127.0.0.1). Falls back to 127.0.0.1 where
    the loopback interface has only that address."""
    import socket
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", 0))
        return ["127.0.0.2"], ["127.0.0.3", "127.0.0.4"]
    except OSError:
        return ["127.0.0.1"], ["127.0.0.1"]


def git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def summarize(results):
    lines = []
    for result in results:
        verdict = "PASS" if result["ok"] else "FAIL"
        lines.append(f"== {result['name']}: {verdict} ({result['seconds']:.1f} s)")
        if result.get("error"):
            lines.append("   error: " + result["error"].strip().splitlines()[-1])
        for c in result.get("checks", []):
            lines.append(f"   [{'ok' if c['ok'] else 'FAIL'}] {c['guarantee']}: {c['observed']}")
        figures = {k: v for k, v in result.get("figures", {}).items() if k != "headline"}
        if figures:
            lines.append("   figures: " + json.dumps(figures, default=str))
    passed = sum(1 for r in results if r["ok"])
    lines.append(f"{passed} of {len(results)} checks passed")
    return "\n".join(lines) + "\n"


def main():
    # SIGTERM (ctest, Ctrl-C from a wrapper) unwinds like an exception, so every process is ended.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stagehand", default=default_binary())
    parser.add_argument("--out", default=os.path.join(ROOT, "build", "hostile-results"))
    parser.add_argument("--checks", default=",".join(suite.CHECKS))
    parser.add_argument("--flood-seconds", type=float, default=15.0)
    args = parser.parse_args()
    if not args.stagehand or not os.access(args.stagehand, os.X_OK):
        print("run.py: no stagehand binary (give --stagehand)", file=sys.stderr)
        return 2
    names = [n for n in args.checks.split(",") if n]
    unknown = [n for n in names if n not in suite.CHECKS]
    if unknown or not names:
        print(f"run.py: unknown checks {unknown}; known: {list(suite.CHECKS)}", file=sys.stderr)
        return 2
    names = [n for n in suite.CHECKS if n in names]  # signals ends the daemon: always last

    began = time.monotonic()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="stagehand-hostile-")
    ctx = Context()
    ctx.flood_seconds = args.flood_seconds
    ctx.slow, ctx.idle = 64, 300
    ctx.slow_sources, ctx.idle_sources = loopback_sources()
    ctx.keepalive = 50
    ctx.header_requests, ctx.header_fields = 50, 20000
    ctx.methods = 500
    ctx.seed = int(time.time())
    ctx.bomb_inflated = 500 * suite.MIB
    ctx.env_dir = os.path.join(workdir, "env-fds")
    os.makedirs(ctx.env_dir)
    token = secrets.token_hex(6)
    ctx.marker_link = os.path.join(workdir, f"stagehand-hostile-orphan-{token}")
    os.symlink(shutil.which("sleep") or "/bin/sleep", ctx.marker_link)
    ctx.orphan_pid = os.path.join(workdir, "orphan.pid")
    # The daemon, its tasks and its SQLite files write in the temporary directory as its user.
    ctx.identity = unprivileged_identity()
    binary = os.path.abspath(args.stagehand)
    if ctx.identity:
        ctx.identity.own(workdir, ctx.env_dir)
        if not ctx.identity.can_run(binary):  # a build under a directory only root may enter
            binary = shutil.copy2(binary, os.path.join(workdir, "stagehand"))
    ctx.secrets = {"STAGEHAND_TOKEN": "hostile-token-" + secrets.token_hex(12),
                   "PGPASSWORD": "hostile-pg-" + secrets.token_hex(12),
                   "AWS_SECRET_ACCESS_KEY": "hostile-aws-" + secrets.token_hex(12)}
    ctx.daemon = None
    ctx.body = None
    results = []
    try:
        ctx.body = BodyServer(300 * 1000 * 1000, build_gzip_bomb(ctx.bomb_inflated))
        config = {
            "backend": {
                "listen": {"host": "127.0.0.1", "port": 0},
                "database": {"client": "better-sqlite3", "connection": {"directory": "./data"}},
                "auth": {"externalAccess": [{"type": "static", "options": {
                    "token": "${STAGEHAND_TOKEN}", "subject": "hostile-suite"}}]}},
            "stagehand": {"plugins": {suite.PLUGIN: {"tasks": suite.task_config(ctx)}}},
        }
        ctx.daemon = Daemon(binary, workdir, out, config, dict(os.environ, **ctx.secrets),
                            ctx.identity)
        startup_error = None
        try:
            ctx.daemon.start().wait_ready()
        except Exception:  # every check then fails with this reason
            startup_error = traceback.format_exc()
        for name in names:
            started = time.monotonic()
            print(f"-- {name} ...", flush=True)
            try:
                if startup_error:
                    raise RuntimeError("stagehand serve did not start:\n" + startup_error)
                if not ctx.daemon.alive():
                    raise RuntimeError(f"the daemon is not running (exit code "
                                       f"{ctx.daemon.process.returncode}); log tail:\n"
                                       f"{ctx.daemon.log_tail()}")
                result = suite.CHECKS[name](ctx)
                if name != "signals" and not ctx.daemon.alive():
                    result["checks"].append({
                        "guarantee": "the daemon survives the check",
                        "observed": f"exited with {ctx.daemon.process.returncode}",
                        "ok": False})
                result["ok"] = bool(result["checks"]) and all(c["ok"] for c in result["checks"])
            except Exception:  # a check that cannot complete fails with its reason
                result = {"name": name, "ok": False, "error": traceback.format_exc(),
                          "checks": [], "figures": {}}
            result["title"] = TITLES[name]
            result["seconds"] = round(time.monotonic() - started, 1)
            results.append(result)
            print(summarize([result]), end="", flush=True)
    finally:
        if ctx.daemon is not None:
            ctx.daemon.stop()
        kill_pids(processes_holding(os.path.basename(ctx.marker_link).encode()))
        if ctx.body is not None:
            ctx.body.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    summary = summarize(results)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"suite": "hostile", "commit": git_commit(),
                   "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                       timespec="seconds"),
                   "stagehand": os.path.abspath(args.stagehand), "cores": os.cpu_count(),
                   "daemon_user": ctx.identity.name if ctx.identity else
                   pwd.getpwuid(os.geteuid()).pw_name,
                   "kernel": platform.release(), "flood_seconds": ctx.flood_seconds,
                   "seconds": round(time.monotonic() - began, 1), "checks": results},
                  f, indent=1, default=str)
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(summary)
    print("\n" + summary.splitlines()[-1])
    print(f"results: {os.path.join(out, 'results.json')}")
    return 0 if results and all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
