"""The checks of the hostile-input suite, each against the one `stagehand serve` of the run (see
run.py). A check returns {"name", "checks": [{"guarantee", "observed", "ok"}], "figures",
"headline"}; it passes when every guarantee holds. Each guarantee is one that fails when the
protection it names is absent: the figures before each fix are in issue 14."""

import collections
import os
import random
import re
import signal
import string
import threading
import time

from clients import LIVENESS, Flood, Prober, open_keepalive
from support import (O_CLOEXEC_FLAG, Timeout, descendants, environ_of, exchange, fd_flags,
                     fd_targets, kill_pids, peer_ports, percentile, proc_refused, proc_uid,
                     processes_holding,
                     request_bytes, reset_peak_rss, session_of, status_kib, thread_count,
                     wait_for)

PLUGIN = "hostile"
MIB = 1024 * 1024
DEFAULT_CAP = 1048576  # http.maxResponseBytes when unset (docs/configuration.md)
KNOWN_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"}


def check(checks, guarantee, observed, ok):
    checks.append({"guarantee": guarantee, "observed": observed, "ok": bool(ok)})


def ms(seconds):
    return None if seconds is None else round(seconds * 1000, 1)


def mib(kib):
    return None if kib is None else round(kib / 1024, 1)


def signed(value):
    return "–" if value is None else f"{value:+}"


# The task the environment and descriptor check triggers. It records its own environment (from
# /proc/$$/environ: exactly what its process was given). Then it tries to read the environment of
# its supervisor ($PPID, a fork of the daemon) and of the daemon (whose pid the suite writes to
# `daemon-pid` before triggering it), as any process of the daemon's user could: for each, the pid
# and tr's exit status go to `<which>.read`, the environment (NULs as newlines) to
# `<which>.environ` and the error to `<which>.err` (2> comes first, so that the shell's own
# message on a refused open lands there). Then it records what `ls` sees of its descriptors
# (`ls -ln /proc/self/fd/`: the descriptors `ls` inherited from the task, plus the one `ls` opens
# on that directory, whose target is /proc/<ls pid>/fd), names its pid (by rename, once all is
# written) and blocks opening a FIFO until the suite has looked at it from outside. No command it
# runs while blocked has a redirection: dash applies those in the shell itself and would show a
# descriptor of its own.
ENV_FDS_SCRIPT = (
    'tr "\\000" "\\n" < /proc/$$/environ > "$0/environ"; '
    'read daemon < "$0/daemon-pid"; '
    'for which in supervisor daemon; do '
    'if [ $which = supervisor ]; then pid=$PPID; else pid=$daemon; fi; '
    'tr "\\000" "\\n" 2> "$0/$which.err" < /proc/$pid/environ > "$0/$which.environ"; '
    'echo "$pid $?" > "$0/$which.read"; '
    'done; '
    'ls -ln /proc/self/fd/ > "$0/ls-fds"; '
    'echo $$ > "$0/pid.tmp" && mv "$0/pid.tmp" "$0/pid" && '
    'head -c 1 "$0/release"')

# The signals check's task: a grandchild in a session of its own (setsid), sleeping 300 s, whose
# program is a symlink to sleep named with the run's marker, so its command line holds the marker.
ORPHAN_SCRIPT = 'setsid "$0" 300 & echo $! > "$1.tmp" && mv "$1.tmp" "$1"; wait'


def task_config(ctx):
    """The plugin's tasks: manual, so that each runs only when a check triggers it."""
    manual = {"frequency": {"trigger": "manual"}, "timeout": "60s"}
    return {
        "env-fds": {"schedule": manual,
                    "command": ["/bin/sh", "-c", ENV_FDS_SCRIPT, ctx.env_dir]},
        "big-body": {"schedule": manual,
                     "http": {"url": f"http://127.0.0.1:{ctx.body.port}/big", "method": "GET"}},
        "gzip-bomb": {"schedule": manual,
                      "http": {"url": f"http://127.0.0.1:{ctx.body.port}/bomb", "method": "GET"}},
        "orphan": {"schedule": manual,
                   "command": ["/bin/sh", "-c", ORPHAN_SCRIPT, ctx.marker_link, ctx.orphan_pid]},
    }


# --- 1. slowloris and idle flood ------------------------------------------------------------------

def check_slowloris(ctx):
    """Holds 64 slow-header and 300 idle connections (reconnecting each one the server cuts) for
    `ctx.flood_seconds` while a prober times liveness on a fresh connection every 50 ms."""
    daemon = ctx.daemon
    checks, figures = [], {}
    threads_before = thread_count(daemon.pid)
    flood = Flood(daemon.port, ctx.slow, ctx.idle, ctx.slow_sources, ctx.idle_sources).start()
    prober = None
    fds_max = threads_max = 0
    try:
        try:
            wait_for(lambda: sum(flood.open_counts()) >= ctx.slow + ctx.idle, 10,
                     f"the {ctx.slow + ctx.idle} attacker connections to be open")
            ramp = "all open"
        except Timeout as timeout:
            ramp = f"{timeout} (open: slow, idle = {flood.open_counts()})"
        prober = Prober(daemon.port).start()
        window_end = time.monotonic() + ctx.flood_seconds
        while time.monotonic() < window_end:  # samples the daemon while the flood goes on
            fds_max = max(fds_max, len(fd_targets(daemon.pid)))
            threads_max = max(threads_max, thread_count(daemon.pid) or 0)
            time.sleep(0.25)
    finally:
        if prober:
            prober.stop()
        flood.stop()
    snapshot = flood.snapshot()
    probes = prober.probes
    latencies = [seconds for _, status, seconds, _ in probes if status is not None]
    bad = [(round(began - probes[0][0], 2), status if status is not None else error,
            ms(seconds)) for began, status, seconds, error in probes
           if status != 200 or seconds > 1.0]
    expected = int(ctx.flood_seconds / 0.05)
    # A probe that hangs delays the next, so a starved server also shows as too few probes.
    check(checks, f"liveness answers 200 within 1 s to every probe (one every 50 ms on a fresh "
          f"connection for {ctx.flood_seconds:g} s, so at least {expected // 2} probes) while "
          f"{ctx.slow} slow-header and {ctx.idle} idle connections are held open",
          f"{len(probes) - len(bad)} of {len(probes)} probes answered in time"
          + (f"; first failures (s into the window, outcome, ms): {bad[:5]}" if bad else ""),
          len(probes) >= expected // 2 and not bad)
    samples = [s for s in snapshot["samples"] if s[0] >= probes[0][0]] if probes else []
    cuts = collections.Counter()
    lifetimes = collections.defaultdict(list)
    replies = collections.Counter()
    for kind, lifetime, how, said in snapshot["cuts"]:
        cuts[kind] += 1
        lifetimes[kind].append(lifetime)
        replies[said or f"nothing ({how})"] += 1
    figures.update({
        "probes": len(probes), "probe_failures": len(bad),
        "latency_ms": {"p50": ms(percentile(latencies, 0.5)),
                       "p99": ms(percentile(latencies, 0.99)),
                       "max": ms(max(latencies, default=None))},
        "attackers": {"slow": ctx.slow, "idle": ctx.idle, "ramp": ramp,
                      "sources": {"slow": ctx.slow_sources, "idle": ctx.idle_sources},
                      "open_in_window": {
                          kind: {"min": min(s[i] for s in samples),
                                 "mean": round(sum(s[i] for s in samples) / len(samples))}
                          for kind, i in (("slow", 1), ("idle", 2))} if samples else None,
                      "connects": snapshot["connects"],
                      "connect_failures": snapshot["connect_failures"]},
        # How long each cut connection had lived, by whole seconds: about 10 is the head
        # deadline, about 5 the idle timeout, less an eviction at the per-client cap.
        "cut": {kind: {"count": cuts[kind],
                       "after_s": dict(sorted(collections.Counter(round(x) for x in v).items())),
                       "lifetime_s": {"min": round(min(v), 2), "p50": round(percentile(v, 0.5), 2),
                                      "max": round(max(v), 2)}}
                for kind, v in lifetimes.items()},
        "server_said_when_cutting": dict(replies.most_common(4)),
        "daemon": {"threads_before": threads_before, "threads_max": threads_max,
                   "fds_max": fds_max},
    })
    # The next check needs the server back: it must answer once the attackers are gone.
    began = time.monotonic()
    try:
        wait_for(lambda: daemon.request("GET", LIVENESS, timeout=2)[0] == 200, 60,
                 "liveness to answer 200 after the flood stopped")
        figures["recovered_after_ms"] = ms(time.monotonic() - began)
    except Timeout as timeout:
        check(checks, "the daemon serves again once the flood has stopped", str(timeout), False)
    lat = {k: "–" if v is None else v for k, v in figures["latency_ms"].items()}
    cut_text = ", ".join(
        f"{cuts[kind]} {kind} (after {figures['cut'][kind]['lifetime_s']['p50']} s)"
        if cuts[kind] else f"no {kind}" for kind in ("slow", "idle"))
    figures["headline"] = (f"{len(probes) - len(bad)} of {len(probes)} probes in time; p50 "
                           f"{lat['p50']} ms, p99 {lat['p99']} ms, max {lat['max']} ms; the server "
                           f"cut {cut_text}; daemon threads {threads_before} -> {threads_max}")
    return {"name": "slowloris", "checks": checks, "figures": figures}


# --- 2. secrets and descriptors of a real task ----------------------------------------------------

LS_LINE = re.compile(r"\s(\d+) -> (.*)$")


def check_env_fds(ctx):
    """With ~50 keep-alive clients connected, triggers a command task and looks at its process
    (from inside and from /proc), and at every descriptor of the daemon while it runs. The task
    also tries to read the environment of its supervisor and of the daemon from /proc."""
    daemon = ctx.daemon
    checks, figures = [], {}
    env_dir = ctx.env_dir
    release = os.path.join(env_dir, "release")
    os.mkfifo(release)
    pid_file = os.path.join(env_dir, "daemon-pid")
    with open(pid_file, "w") as f:
        f.write(f"{daemon.pid}\n")
    if ctx.identity:  # the task runs as the daemon's user, whatever the umask
        ctx.identity.own(release, pid_file)
    clients = []
    released = False
    try:
        clients = open_keepalive(daemon.port, ctx.keepalive)
        ports = {sock.getsockname()[1] for sock in clients}

        def connected():
            return len(ports & peer_ports(daemon.pid))
        try:
            wait_for(lambda: connected() == len(ports), 10,
                     f"the daemon to accept the {ctx.keepalive} keep-alive connections (each "
                     "seen in its descriptors, by port)")
        except Timeout:
            pass  # the first guarantee below fails with the count; the others are still measured
        ended_before = ((daemon.task(PLUGIN, "env-fds") or {}).get("taskState") or {}).get(
            "lastRunEndedAt")
        daemon.trigger(PLUGIN, "env-fds")

        def task_pid():
            try:
                with open(os.path.join(env_dir, "pid")) as f:
                    return int(f.read())
            except (OSError, ValueError):
                return None
        pid = wait_for(task_pid, 30, "the env-fds task to write its pid file (after its "
                       "environment and descriptor listings)")
        # Seen from outside while it runs and the clients are connected.
        task_fds = fd_targets(pid)
        task_env = environ_of(pid) or []
        task_uid, daemon_uid = proc_uid(pid), proc_uid(daemon.pid)
        # What the suite itself reads there: the secrets are in the daemon's environment (root
        # reads it whatever the daemon does; another user does not).
        daemon_env = environ_of(daemon.pid)
        supervisor = daemon_child = None
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            supervisor = int(stat[stat.rfind(")") + 2:].split()[1])
            daemon_child = supervisor in descendants(daemon.pid)
        except OSError:
            pass
        clients_open = connected()
        refused = proc_refused(daemon.pid)
        flags = fd_flags(daemon.pid)
        targets = fd_targets(daemon.pid)
        released = _release(release)
        state = daemon.wait_run_ended(PLUGIN, "env-fds", ended_before, 30)
    finally:
        if not released:
            _release(release, timeout_s=0.5)
        for sock in clients:
            sock.close()

    with open(os.path.join(env_dir, "environ"), errors="replace") as f:
        inside_env = f.read().splitlines()
    with open(os.path.join(env_dir, "ls-fds"), errors="replace") as f:
        ls_lines = [m.groups() for m in map(LS_LINE.search, f.read().splitlines()) if m]

    def leaked(environment):
        found = []
        for name, value in ctx.secrets.items():
            for entry in environment:
                if entry.split("=", 1)[0] == name or value in entry:
                    found.append(name)
                    break
        return found

    # Run as the daemon's user, the suite cannot see the daemon's descriptors at all.
    blind = (f"; the suite (uid {os.geteuid()}) may not list /proc/<daemon>/fd ({refused}): the "
             "daemon is non-dumpable, so only root sees its descriptors; run the suite as root"
             if refused else "")
    check(checks, f"the task ran while the {ctx.keepalive} keep-alive clients were connected",
          f"{clients_open} of them open in the daemon when the task was looked at "
          f"(task {'a descendant of the daemon' if daemon_child else 'not under the daemon'})"
          + blind, clients_open >= ctx.keepalive and daemon_child)
    secret_names = ", ".join(ctx.secrets)
    found = sorted(set(leaked(task_env)) | set(leaked(inside_env)))
    check(checks, f"the task's environment holds none of the daemon's secrets ({secret_names}: "
          "neither the name nor the value; /proc/<task>/environ read from outside and by the "
          "task itself)", f"found: {found}" if found else
          f"none of them among its {len(task_env)} variables "
          f"({', '.join(sorted(e.split('=', 1)[0] for e in task_env))})",
          task_env and inside_env and not found)
    extra = {fd: target for fd, target in task_fds.items() if fd > 2}
    check(checks, "the task's process has only descriptors 0-2 (/proc/<task>/fd read from "
          "outside while it runs)", f"{sorted(task_fds)}" + (f"; beyond 2: {extra}" if extra
                                                             else ""),
          task_fds and not extra)
    ls_own = [(fd, target) for fd, target in ls_lines
              if int(fd) > 2 and re.fullmatch(r"/proc/\d+/fd", target)]
    ls_extra = [(fd, target) for fd, target in ls_lines
                if int(fd) > 2 and (fd, target) not in ls_own[:1]]
    check(checks, "`ls -ln /proc/self/fd/` run by the task lists only 0-2 and the one descriptor "
          "ls opens on that directory (/proc/<ls pid>/fd)",
          f"{[fd for fd, _ in ls_lines]}" + (f"; others: {ls_extra}" if ls_extra else ""),
          ls_lines and len(ls_own) == 1 and not ls_extra)
    open_flags = {fd: f for fd, f in flags.items() if fd > 2}
    inheritable = {fd: f"{targets.get(fd, '?')} (flags {oct(f)})"
                   for fd, f in open_flags.items() if not f & O_CLOEXEC_FLAG}
    kinds = collections.Counter(_fd_kind(target) for fd, target in targets.items() if fd > 2)
    check(checks, "every descriptor of the daemon above 2 is close-on-exec (O_CLOEXEC in "
          "/proc/<daemon>/fdinfo, read while the clients are connected and the task runs)",
          f"{len(open_flags) - len(inheritable)} of {len(open_flags)}"
          + (f"; without it: {inheritable}" if inheritable else "") + blind,
          open_flags and not inheritable)
    reads = {which: _environ_read(env_dir, which, leaked) for which in ("supervisor", "daemon")}
    expected = {"supervisor": supervisor, "daemon": daemon.pid}
    wrong = {which: r["pid"] for which, r in reads.items() if r["pid"] != expected[which]}
    seen = [] if daemon_env is None else leaked(daemon_env)
    same_user = task_uid is not None and task_uid == daemon_uid and task_uid != 0
    exposed = {which: r["secrets"] for which, r in reads.items() if r["secrets"]}
    check(checks, "the task, running as the daemon's user (not root), cannot read the daemon's "
          "secrets from /proc/<its supervisor>/environ or /proc/<daemon>/environ: each read is "
          "refused, or holds none of them",
          f"task uid {task_uid}, daemon uid {daemon_uid}; "
          + "; ".join(f"{which} (pid {r['pid']}): {_describe_read(r)}"
                      for which, r in reads.items())
          + (f"; the task read the wrong pids {wrong} (expected {expected})" if wrong else "")
          + ("" if daemon_env is None else
             f"; the suite (uid {os.geteuid()}) finds {len(seen)} of {len(ctx.secrets)} in "
             "/proc/<daemon>/environ"),
          same_user and not wrong and all(r["attempted"] for r in reads.values()) and not exposed
          and (daemon_env is None or len(seen) == len(ctx.secrets)))
    figures.update({
        "keepalive_clients": ctx.keepalive, "client_sockets_while_task_ran": clients_open,
        "task_fds": sorted(task_fds), "task_env_names": sorted(e.split("=", 1)[0]
                                                               for e in task_env),
        "ls_fds": [fd for fd, _ in ls_lines],
        "daemon_fds": {"total_above_2": len(open_flags), "cloexec": len(open_flags)
                       - len(inheritable), "by_kind": dict(kinds)},
        "run": state,
        "task_uid": task_uid, "daemon_uid": daemon_uid,
        # What the task got from /proc/<supervisor>/environ and /proc/<daemon>/environ.
        "proc_environ_reads": reads,
        "secrets_in_daemon_environ_seen_by_suite": None if daemon_env is None else seen,
    })
    figures["headline"] = (f"secrets in task env: {len(found)}; task fds {sorted(task_fds)}; "
                           f"daemon fds close-on-exec: {len(open_flags) - len(inheritable)}/"
                           f"{len(open_flags)} with {clients_open} clients connected; the task "
                           f"(uid {task_uid}, as the daemon) reading /proc/<pid>/environ: "
                           + ", ".join(f"{which} {_describe_read(r, short=True)}"
                                       for which, r in reads.items()))
    return {"name": "env-fds", "checks": checks, "figures": figures}


def _environ_read(env_dir, which, leaked):
    """What the env-fds task recorded of its read of /proc/<pid>/environ of `which` (supervisor
    or daemon): the pid, whether it tried, whether the read succeeded (tr's exit status 0), the
    error it got and the secrets found in what it read."""
    def text(name):
        try:
            with open(os.path.join(env_dir, f"{which}.{name}"), errors="replace") as f:
                return f.read()
        except OSError:
            return None
    record = (text("read") or "").split()
    pid = int(record[0]) if record and record[0].isdigit() else None
    status = int(record[1]) if len(record) > 1 and record[1].isdigit() else None
    contents = text("environ")
    error = (text("err") or "").strip()
    # dash puts $0 (the task's directory) and a line number before its message: drop them.
    error = error.split(": ", 2)[-1] if error.startswith("/") else error
    return {"pid": pid, "attempted": status is not None, "read": status == 0,
            "error": error or None,
            "variables": len(contents.splitlines()) if status == 0 and contents else 0,
            "secrets": leaked(contents.splitlines()) if contents else []}


def _describe_read(read, short=False):
    if not read["attempted"]:
        return "not attempted"
    if not read["read"]:
        return "refused" if short else f"refused ({read['error']})"
    if read["secrets"]:
        return f"read, {len(read['secrets'])} secrets" if short else (
            f"read {read['variables']} variables, secrets among them: {read['secrets']}")
    return "read, no secret" if short else f"read {read['variables']} variables, no secret"


def _fd_kind(target):
    if target.startswith(("socket:", "pipe:", "anon_inode:")):
        return target.split(":", 1)[0]
    return "file"


def _release(fifo, timeout_s=10):
    """Lets the env-fds task finish: opens its FIFO for writing (it blocks opening it for
    reading) and closes it, so its `head` reads end-of-file."""
    def opened():
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return None  # ENXIO: no reader yet
    try:
        fd = wait_for(opened, timeout_s, "the env-fds task to open its FIFO")
    except Timeout:
        return False
    os.close(fd)
    return True


# --- 3. header flood ------------------------------------------------------------------------------

def check_header_flood(ctx):
    """50 requests with 20,000 header fields each, all at once; each must be refused with a 4xx and
    the daemon's resident memory must stay flat."""
    daemon = ctx.daemon
    checks, figures = [], {}
    fields = [(f"X-Flood-{i:05d}", f"{i:05d}") for i in range(ctx.header_fields)]
    payload = request_bytes("GET", LIVENESS, fields)
    request_kib = round(len(payload) / 1024)
    for _ in range(3):
        daemon.request("GET", LIVENESS)
    rss_before = status_kib(daemon.pid, "VmRSS")
    peak_reset = reset_peak_rss(daemon.pid)
    hwm_before = status_kib(daemon.pid, "VmHWM")
    results = [None] * ctx.header_requests

    def send(i):
        results[i] = exchange(daemon.port, payload, 30, read_body=False)
    threads = [threading.Thread(target=send, args=(i,)) for i in range(ctx.header_requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    rss_after = status_kib(daemon.pid, "VmRSS")
    hwm_after = status_kib(daemon.pid, "VmHWM")
    statuses = collections.Counter(str(r.summary()) if r else "no result" for r in results)
    refused = sum(1 for r in results if r and r.status is not None and 400 <= r.status < 500)
    sent_kib = [round(r.sent / 1024) for r in results if r]
    check(checks, f"each of {ctx.header_requests} requests with {ctx.header_fields} header "
          f"fields ({request_kib} KiB) is refused with a 4xx (431 expected)",
          dict(statuses), refused == ctx.header_requests)
    growth = rss_after - rss_before if rss_after and rss_before else None
    check(checks, "the daemon's resident memory (VmRSS) grows by less than 8 MiB",
          f"{mib(rss_before)} -> {mib(rss_after)} MiB ({mib(growth)} MiB)",
          growth is not None and growth < 8 * 1024)
    figures.update({
        "statuses": dict(statuses), "request_kib": request_kib,
        "sent_kib": {"min": min(sent_kib, default=None), "max": max(sent_kib, default=None)},
        "rss_mib": {"before": mib(rss_before), "after": mib(rss_after), "growth": mib(growth)},
        "peak_rss_growth_mib": mib(hwm_after - hwm_before) if peak_reset and hwm_after else None,
    })
    figures["headline"] = (f"statuses {dict(statuses)}; VmRSS {signed(mib(growth))} MiB; each "
                           f"client got {figures['sent_kib']['min']}-{figures['sent_kib']['max']} "
                           f"KiB of its {request_kib} KiB out before the answer")
    return {"name": "header-flood", "checks": checks, "figures": figures}


# --- 4. random methods ----------------------------------------------------------------------------

def _random_method(rng):
    alphabet = string.ascii_uppercase + string.digits + "-_"
    while True:
        token = rng.choice(string.ascii_uppercase) + "".join(
            rng.choice(alphabet) for _ in range(rng.randint(2, 11)))
        if token not in KNOWN_METHODS:
            return token


def check_methods(ctx):
    """500 requests to liveness, each with a random method token; /metrics must gain at most 2
    lines."""
    daemon = ctx.daemon
    checks, figures = [], {}
    daemon.request("GET", LIVENESS)
    # One bogus method first: its "unmatched" route and "other" method series (a counter and a
    # histogram) appear once, whatever came before; the check is about what 500 more add.
    exchange(daemon.port, request_bytes("WARMUP", LIVENESS), 5)
    daemon.metrics_lines()
    before = daemon.metrics_lines()
    rng = random.Random(ctx.seed)
    methods = [_random_method(rng) for _ in range(ctx.methods)]
    statuses = collections.Counter()
    for method in methods:
        statuses[str(exchange(daemon.port, request_bytes(method, LIVENESS), 5).summary())] += 1
    after = daemon.metrics_lines()

    def series(lines):
        return {line.rsplit(" ", 1)[0] for line in lines if line and not line.startswith("#")}
    new = sorted(series(after) - series(before))
    delta = len(after) - len(before)
    check(checks, f"{ctx.methods} requests with random method tokens add at most 2 lines to "
          "/metrics", f"{len(before)} -> {len(after)} lines ({delta:+d}); new series: "
          f"{new[:5]}{' ...' if len(new) > 5 else ''}", delta <= 2)
    figures.update({"seed": ctx.seed, "sample_methods": methods[:5], "statuses": dict(statuses),
                    "lines_before": len(before), "lines_after": len(after), "delta": delta,
                    "new_series": new[:10]})
    figures["headline"] = f"/metrics {len(before)} -> {len(after)} lines ({delta:+d}); statuses " \
                          f"{dict(statuses)}"
    return {"name": "methods", "checks": checks, "figures": figures}


# --- 5. oversized and gzip-bomb HTTP task bodies --------------------------------------------------

def _response_record(daemon, task_id):
    records = [r for r in daemon.records()
               if r.get("message") == "http task response" and r.get("task") == task_id]
    return records[-1] if records else None


def check_bodies(ctx):
    """Triggers an HTTP task answered by a 300 MB body and one answered by a gzip bomb; the
    daemon's peak RSS must grow by less than 64 MiB for each, and each run must report the cap."""
    daemon = ctx.daemon
    checks, figures = [], {}
    cases = [("big-body", "/big", f"a {ctx.body.big_bytes // 1000000} MB body"),
             ("gzip-bomb", "/bomb", f"a gzip bomb ({len(ctx.body.bomb) // 1024} KiB expanding "
                                    f"to {ctx.bomb_inflated // MIB} MiB)")]
    for task_id, path, what in cases:
        ended_before = ((daemon.task(PLUGIN, task_id) or {}).get("taskState") or {}).get(
            "lastRunEndedAt")
        peak_reset = reset_peak_rss(daemon.pid)
        hwm_before = status_kib(daemon.pid, "VmHWM")
        daemon.trigger(PLUGIN, task_id)
        state = daemon.wait_run_ended(PLUGIN, task_id, ended_before, 90)
        hwm_after = status_kib(daemon.pid, "VmHWM")
        growth = hwm_after - hwm_before
        record = _response_record(daemon, task_id) or {}
        body_bytes = int(record["body_bytes"]) if "body_bytes" in record else None
        truncated = str(record.get("body_truncated", "false")).lower() == "true"
        check(checks, f"{what} to an HTTP task grows the daemon's peak RSS (VmHWM"
              f"{', reset before' if peak_reset else ''}) by less than 64 MiB",
              f"{mib(hwm_before)} -> {mib(hwm_after)} MiB ({mib(growth)} MiB)",
              growth < 64 * 1024)
        if task_id == "big-body":
            ok = truncated and body_bytes == DEFAULT_CAP
            outcome = (f"log `http task response`: status {record.get('status')}, body_bytes "
                       f"{body_bytes}, body_truncated {truncated}; lastRunError "
                       f"{state.get('lastRunError')}")
            check(checks, f"the run reports the cap: the body was cut at maxResponseBytes "
                  f"(default {DEFAULT_CAP})", outcome, ok)
        else:
            ok = body_bytes is not None and body_bytes <= min(DEFAULT_CAP, len(ctx.body.bomb))
            outcome = (f"log `http task response`: status {record.get('status')}, body_bytes "
                       f"{body_bytes} of {len(ctx.body.bomb)} compressed, body_truncated "
                       f"{truncated}; lastRunError {state.get('lastRunError')}")
            check(checks, f"the run reports what it kept: at most the cap ({DEFAULT_CAP}) and no "
                  "more than the compressed size (nothing inflated)", outcome, ok)
        figures[task_id] = {"peak_rss_growth_mib": mib(growth), "peak_reset": peak_reset,
                            "body_bytes": body_bytes, "body_truncated": truncated,
                            "served_mib": round(ctx.body.sent[path] / MIB, 1),
                            "run": state}
    figures["headline"] = "; ".join(
        f"{t}: peak RSS {signed(figures[t]['peak_rss_growth_mib'])} MiB, kept "
        f"{figures[t]['body_bytes']} B{' (truncated)' if figures[t]['body_truncated'] else ''}"
        f", served {figures[t]['served_mib']} MiB" for t, _, _ in cases)
    return {"name": "bodies", "checks": checks, "figures": figures}


# --- 6. SIGHUP reloads; SIGTERM leaves no orphan --------------------------------------------------

RELOAD_HOLD_S = 1.0  # how long after SIGHUP the run must still be untouched


def _reload_records(daemon):
    return [r for r in daemon.records()
            if str(r.get("message", "")).startswith(("Config reloaded", "Config reload failed"))]


def check_signals(ctx):
    """Triggers a command whose setsid grandchild sleeps 300 s. Sends SIGHUP to the daemon: it must
    reload its config and keep running, answering liveness, with the run still going and every
    process of the task left alone for RELOAD_HOLD_S. Then sends SIGTERM: once the daemon has
    exited, no process whose command line holds the marker may remain."""
    daemon = ctx.daemon
    checks, figures = [], {}
    marker = os.path.basename(ctx.marker_link).encode()
    daemon.trigger(PLUGIN, "orphan")

    def grandchild():
        try:
            with open(ctx.orphan_pid) as f:
                pid = int(f.read())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return pid if f.read().split(b"\0")[0] == ctx.marker_link.encode() else None
        except (OSError, ValueError):
            return None
    pid = wait_for(grandchild, 30, "the orphan task's setsid grandchild to run (its pid file, "
                   "and its command line starting with the marker link)")
    own_session = session_of(pid) == pid
    tree = processes_holding(marker)
    run_before = (daemon.task(PLUGIN, "orphan") or {}).get("taskState") or {}

    # SIGHUP: a reload, which must leave the daemon and the running task alone.
    reloads_before = len(_reload_records(daemon))
    hup_sent = time.monotonic()
    os.kill(daemon.pid, signal.SIGHUP)
    reloaded_at = None
    try:
        wait_for(lambda: len(_reload_records(daemon)) > reloads_before or not daemon.alive(), 10,
                 "the daemon to log the outcome of the reload")
        if daemon.alive():
            reloaded_at = time.monotonic()
    except Timeout:
        pass
    time.sleep(max(0.0, hup_sent + RELOAD_HOLD_S - time.monotonic()))
    held_s = time.monotonic() - hup_sent
    alive_after_hup = daemon.alive()
    liveness, _ = daemon.request("GET", LIVENESS, timeout=2) if alive_after_hup else (None, None)
    outcome = _reload_records(daemon)[reloads_before:]
    reload_message = outcome[0]["message"] if outcome else None
    tree_after_hup = processes_holding(marker)
    run_after = (daemon.task(PLUGIN, "orphan") or {}).get("taskState") or {}
    check(checks, f"the daemon reloads its config on SIGHUP and keeps running: after "
          f"{RELOAD_HOLD_S:g} s it is alive and answers liveness 200",
          f"{'alive' if alive_after_hup else f'exited with {daemon.process.returncode}'} "
          f"{held_s:.1f} s after SIGHUP, liveness {liveness}; log: {reload_message!r}"
          + (f" {ms(reloaded_at - hup_sent)} ms after SIGHUP" if reloaded_at else ""),
          alive_after_hup and liveness == 200 and reload_message is not None
          and reload_message.startswith("Config reloaded"))
    untouched = (pid in tree and sorted(tree_after_hup) == sorted(tree)
                 and run_after.get("status") == "running"
                 and run_after.get("startedAt") == run_before.get("startedAt"))
    check(checks, "the reload does not touch a running task: the same processes (the setsid "
          "grandchild included) and the same run, still running",
          f"processes {len(tree)} before SIGHUP, {len(tree_after_hup)} after "
          f"({'the same pids' if sorted(tree_after_hup) == sorted(tree) else 'not the same pids'}"
          f", grandchild {'alive' if pid in tree_after_hup else 'gone'}); run "
          f"{run_before.get('status')} since {run_before.get('startedAt')} -> "
          f"{run_after.get('status')} since {run_after.get('startedAt')}", untouched)

    # SIGTERM: a clean shutdown, which must end every process of the task.
    sent = time.monotonic()
    if daemon.alive():
        os.kill(daemon.pid, signal.SIGTERM)
    gone_at = exited_at = None
    deadline = sent + 30
    # Each time is when a look found the tree gone (or the daemon exited): an upper bound, late
    # by at most one scan of /proc and 10 ms.
    while time.monotonic() < deadline and (gone_at is None or exited_at is None):
        if gone_at is None and not processes_holding(marker):
            gone_at = time.monotonic()
        if exited_at is None and daemon.process.poll() is not None:
            exited_at = time.monotonic()
        time.sleep(0.01)
    survivors = processes_holding(marker)
    check(checks, "the daemon exits after SIGTERM (within 30 s)",
          f"exit code {daemon.process.returncode} after {ms(exited_at - sent)} ms"
          if exited_at else "still running after 30 s", exited_at is not None)
    check(checks, "no process of the task outlives the daemon: none whose command line holds the "
          "marker (the setsid grandchild included) once the daemon has exited",
          f"{len(tree)} processes before SIGTERM, gone {ms(gone_at - sent)} ms after it"
          if not survivors and gone_at else f"left: {survivors}",
          exited_at is not None and pid in tree and not survivors)
    kill_pids([p for p in survivors if p != os.getpid()])
    figures.update({"grandchild_own_session": own_session, "tree_before": len(tree),
                    "reload_ms": ms(reloaded_at - hup_sent) if reloaded_at else None,
                    "reload_log": reload_message, "liveness_after_hup": liveness,
                    "tree_after_hup": len(tree_after_hup), "held_s": round(held_s, 2),
                    "run_after_hup": run_after,
                    "tree_gone_ms": ms(gone_at - sent) if gone_at else None,
                    "daemon_exit_ms": ms(exited_at - sent) if exited_at else None,
                    "exit_code": daemon.process.returncode})
    figures["headline"] = (f"SIGHUP: reload logged {figures['reload_ms']} ms after it; after "
                           f"{figures['held_s']:g} s liveness {liveness}, tree of {len(tree)} "
                           f"{'untouched' if untouched else 'CHANGED'}; SIGTERM: tree gone "
                           f"{figures['tree_gone_ms']} ms after it, daemon exit "
                           f"{figures['daemon_exit_ms']} ms (code {daemon.process.returncode}), "
                           f"survivors {len(survivors)}")
    return {"name": "signals", "checks": checks, "figures": figures}


CHECKS = {
    "slowloris": check_slowloris,
    "env-fds": check_env_fds,
    "header-flood": check_header_flood,
    "methods": check_methods,
    "bodies": check_bodies,
    "signals": check_signals,
}
