"""The failover family of the system suite: a fleet on a primary and a streaming standby
(pg_cluster.PgCluster, on a multi-host URL), the primary killed (SIGKILL) or partitioned and the
standby promoted, round after round, while clients that retry with idempotency keys send
triggers, pauses, resumes and cancels to random hosts.

What each round checks, with synchronous replication: no two runs of a task at once, no cron slot
run twice, every trigger answered 2xx runs exactly once and a refused one not at all, no task runs
while a pause answered 2xx holds, runs resume soon after the new primary accepts writes, no
succeeded run is recorded as lost. With asynchronous replication a committed write can vanish:
every run that a failover may have doubled or lost must be counted by the fleet's own metric
(`stagehand_failover_runs_at_risk_total`), which must equal what the checker found."""

import json
import os
import random
import re
import threading
import time
import uuid

import checker
from harness import mono_ns, wait_for
from patroni_cluster import PatroniCluster
from pg_cluster import PgCluster
import scenarios
from scenarios import MS, S, check, sched

KEY_HEADER = "Idempotency-Key"
# With asynchronous replication, the standby is cut off this long before each fault, so that the
# commits of that second vanish with the primary.
ASYNC_LAG_S = 1.0


def tasks(probe):
    return {
        # Always running somewhere: a failover catches it mid-run.
        "long": {"schedule": sched({"milliseconds": 500}, 60), "command": probe("long", 4000)},
        "cron": {"schedule": sched({"cron": "* * * * * *"}, 10), "command": probe("cron", 100)},
        "tick0": {"schedule": sched({"milliseconds": 300}, 10), "command": probe("tick0", 50)},
        "tick1": {"schedule": sched({"milliseconds": 300}, 10), "command": probe("tick1", 50)},
        "paced": {"schedule": sched({"milliseconds": 300}, 10), "command": probe("paced", 20)},
        "manual": {"schedule": sched({"trigger": "manual"}, 10), "command": probe("manual", 20)},
    }


class Client(threading.Thread):
    """A client that sends one kind of request to random hosts until told to stop, retrying each
    request with the same idempotency key until it is answered (2xx or 4xx), as a careful client
    retries after a 503 or a dropped connection. Records what was answered, and when."""

    def __init__(self, fleet, action):
        super().__init__(daemon=True)
        self.fleet = fleet
        self.action = action
        self.stopping = threading.Event()
        self.log = []  # dicts: action, key, first_sent, answered, status, attempts
        self.rng = random.Random(hash(action))

    def send(self, method, path, key):
        """Sends until answered (or stopped); returns the log entry."""
        entry = {"key": key, "path": path, "first_sent": mono_ns(), "attempts": 0,
                 "status": None, "answered": None, "retried_after": []}
        while not self.stopping.is_set():
            alive = [h for h in self.fleet.hosts if h.alive() and h.port]
            if not alive:
                time.sleep(0.1)
                continue
            host = self.rng.choice(alive)
            entry["attempts"] += 1
            status, _ = host.request(method, path, headers={KEY_HEADER: key}, timeout=3)
            if status is not None and status < 500:
                entry["status"] = status
                entry["answered"] = mono_ns()
                break
            entry["retried_after"].append(status)
            time.sleep(0.1)
        self.log.append(entry)
        return entry

    def stop(self):
        self.stopping.set()
        self.join(15)


class Triggers(Client):
    """Triggers `manual` one at a time: after a 2xx it waits for the run to start (or 10 s) before
    the next trigger, so each accepted trigger owns the window until the next one."""

    def __init__(self, fleet):
        super().__init__(fleet, "trigger")

    def run(self):
        while not self.stopping.is_set():
            entry = self.send("POST", self.fleet.api("/manual/trigger"), str(uuid.uuid4()))
            if entry["status"] == 200:
                wait_for(lambda: scenarios.running_run(self.fleet, "manual", entry["first_sent"])
                         or self._started_since(entry["first_sent"]), 10, 0.02)
            time.sleep(0.3)

    def _started_since(self, since):
        runs, _ = checker.read_runs(self.fleet.sink)
        return any(r.task == "manual" and r.start >= since for r in runs)


class Pauses(Client):
    """Pauses `paced`, holds the pause 1.5 s, resumes it, waits 1 s, and again."""

    def __init__(self, fleet):
        super().__init__(fleet, "pause")
        self.holds = []  # (pause answered, resume first sent, resume status)

    def run(self):
        base = f"/api/{self.fleet.plugin}/.stagehand/v1/tasks/paced"
        while not self.stopping.is_set():
            pause = self.send("POST", base + "/pause", str(uuid.uuid4()))
            if pause["status"] != 200:
                time.sleep(0.5)
                continue
            since = self._pause_since()
            self.stopping.wait(1.5)
            resume = self.send("POST", base + "/resume", str(uuid.uuid4()))
            self.holds.append((pause["answered"], resume["first_sent"], resume["status"], since))
            self.stopping.wait(1.0)

    def _pause_since(self):
        """When the pause of `paced` began, as the database tells it (the listing's `since`), or
        None when no host answered."""
        for host in self.fleet.hosts:
            if not host.alive():
                continue
            status, body = host.request("GET", f"/api/{self.fleet.plugin}/.stagehand/v1/tasks")
            if status != 200:
                continue
            for task in json.loads(body)["tasks"]:
                if task["taskId"] == "paced" and task.get("pause"):
                    return task["pause"]["since"]
        return None


class Cancels(Client):
    """Cancels `long` every 3 s."""

    def __init__(self, fleet):
        super().__init__(fleet, "cancel")

    def run(self):
        while not self.stopping.wait(3.0):
            self.send("POST", self.fleet.api("/long/cancel"), str(uuid.uuid4()))


def trigger_checks(triggers, runs, checks, ended):
    """Each trigger answered 200 is followed by exactly one run of `manual` before the next
    trigger was sent; a run no accepted trigger asked for is a refused trigger that ran."""
    manual = sorted((r for r in runs if r.task == "manual"), key=lambda r: r.start)
    log = sorted(triggers.log, key=lambda e: e["first_sent"])
    lost, doubled, unasked = [], [], []
    for i, entry in enumerate(log):
        window_end = log[i + 1]["first_sent"] if i + 1 < len(log) else ended
        started = [r for r in manual if entry["first_sent"] <= r.start < window_end]
        if entry["status"] == 200:
            if not started and window_end - entry["answered"] > 3 * S:
                lost.append(entry["key"])
            if len(started) > 1:
                doubled.append(entry["key"])
        elif started:
            unasked.append((entry["key"], entry["status"]))
    accepted = sum(1 for e in log if e["status"] == 200)
    retried = sum(1 for e in log if e["retried_after"])
    check(checks, "every trigger answered 200 runs (accepted triggers lost = 0)",
          f"{len(lost)} of {accepted}" + (f": {lost[:3]}" if lost else ""), not lost)
    check(checks, "a trigger retried with its idempotency key is applied once (applied twice = 0; "
          f"{retried} triggers were retried after a 5xx or a dropped connection)",
          doubled[:3] or 0, not doubled)
    check(checks, "a trigger answered 4xx does not run", unasked[:3] or 0, not unasked)
    return {"triggers_accepted": accepted, "triggers_retried": retried,
            "triggers_lost": len(lost), "triggers_doubled": len(doubled)}


def pause_checks(pauses, runs, checks, claimed_at):
    """No run of `paced` starts while a pause holds. A run whose process started after the pause
    was answered but whose claim the database took before the pause began (`claimed_at`: run id →
    the history's started_at, in the database's time, as the pause's `since`) was in progress when
    it was paused: the pause waits for it to end. Both are in milliseconds; a claim in the pause's
    millisecond came first, since a paused row cannot be claimed."""
    paced = [r for r in runs if r.task == "paced"]
    broken, lost = [], []
    for paused, resume_sent, resume_status, since in pauses.holds:
        during = [r for r in paced if paused < r.start < resume_sent and
                  not (since and r.run_id in claimed_at and claimed_at[r.run_id] <= since)]
        if during:
            first = during[0]
            broken.append(f"{len(during)} run(s) {((first.start - paused) / MS):.0f} ms "
                          f"into a pause (run {first.run_id} claimed at "
                          f"{claimed_at.get(first.run_id, 'unknown')}, pause since {since})")
        if resume_status == 409:
            lost.append("resume answered 409: the pause was gone")
    check(checks, f"no run starts while a pause answered 200 holds ({len(pauses.holds)} pauses)",
          broken[:3] or 0, not broken)
    check(checks, "a pause answered 200 is still there when it is resumed", lost[:3] or 0,
          not lost)


def _lost_recorded(cluster, fleet):
    """Runs the history records as lost ("timed out and was lost" by the janitor) whose probe
    ended `done`: succeeded runs recorded as lost."""
    try:
        rows = cluster.query(fleet.database(), "select run_id from stagehand_task_runs where "
                             "outcome = 'lost'")
    except Exception:  # noqa: BLE001 - reported as unknown, not as a pass
        return None
    return {row[0] for row in rows}


def _claim_times(cluster, fleet):
    """Run id → when its claim was taken (the history's started_at, ISO-8601 in UTC as the REST
    listing writes it), for the runs of `paced`."""
    try:
        rows = cluster.query(fleet.database(), "select run_id, to_char(started_at at time zone "
                             "'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') from stagehand_task_runs "
                             "where task_id = 'paced'")
    except Exception:  # noqa: BLE001 - then no run is taken for one claimed before its pause
        return {}
    return {row[0]: row[1] for row in rows}


def _metric(fleet, name):
    total = 0.0
    for host in fleet.hosts:
        if host.alive():
            total += scenarios._metric_sum(host.metrics(), name)
    return total


# A run that goes on over a promotion whose claim the new primary lacked is confirmed there again
# by its host, unless another host claimed the task first: a run of its task starting before it
# ended (within this allowance for the owner's stop) is such a claim.
RECLAIM_RACE_NS = 200 * MS


def vanished_runs(runs, promotions):
    """The runs whose claim the promoted primary lacked, round by round, and those of them a host
    must count at risk: the ones that ended before the new primary took writes (their release
    cannot be written there), and the ones still going that another host ran again meanwhile.
    A run claimed before the fault (it may start a few ms after) whose record the history lacks
    and whose ticket no row holds lost its claim: a claim that survived is either released
    there (and recorded: the release writes a short run's record, the claim a longer one's) or
    still holds its row, since replication keeps the order of commits."""
    vanished, at_risk = [], []
    previous = 0
    for _, writable_ns, (recorded, tickets) in promotions:
        lost = [r for r in runs if previous < r.start < writable_ns and
                r.run_id not in recorded and not any(r.run_id in t for t in tickets)]
        vanished += lost
        for run in lost:
            if run.last < writable_ns:
                at_risk.append(run)
            elif any(o.task == run.task and o.run_id != run.run_id and
                     writable_ns <= o.start <= run.last + RECLAIM_RACE_NS for o in runs):
                at_risk.append(run)
        previous = writable_ns
    return vanished, at_risk


def _reported_at_risk(fleet):
    """The run ids the hosts' logs name at risk."""
    reported = set()
    pattern = re.compile(r'Run (\S+) of task .* may be done twice')
    for name in os.listdir(fleet.workdir):
        if name.startswith("h") and name.endswith(".log"):
            with open(os.path.join(fleet.workdir, name), errors="replace") as log:
                reported.update(m.group(1) for m in pattern.finditer(log.read()))
    return reported


def _writable_of(runs, promotions):
    """Each run with the time the new primary of its round took writes."""
    for run in runs:
        writable = next((w for _, w, _ in promotions if run.start < w), promotions[-1][1])
        yield run, writable


def scenario_failover(ctx, synchronous=True, mode="kill", rounds=None, patroni=False):
    label = ("failover-patroni" if patroni else
             f"failover-{'sync' if synchronous else 'async'}{'' if mode == 'kill' else '-' + mode}")
    rounds = rounds or getattr(ctx, "failover_rounds", 2)
    cluster = PatroniCluster() if patroni else PgCluster(synchronous=synchronous)
    fleet = scenarios.make_fleet(ctx, "sys-" + label, tasks, db=cluster)
    checks, faults = [], []
    clients = []
    resumes, metric_at_risk = [], 0.0
    promotions = []  # asynchronous: (fault, writable, run ids the new primary held)

    def recorded_runs(node):
        """What the promoted primary holds of the runs: the ids its history records and the
        tickets its task rows hold (a run whose release vanished but not its claim)."""
        database = fleet.database()
        runs = {row[0] for row in node.psql("select run_id from stagehand_task_runs",
                                            database=database)}
        tickets = [row[0] for row in node.psql(
            "select current_run_ticket from backstage_backend_tasks__tasks "
            "where current_run_ticket is not null", database=database)]
        return runs, tickets

    began = mono_ns()
    try:
        fleet.start()
        clients = [Triggers(fleet), Pauses(fleet), Cancels(fleet)]
        for client in clients:
            client.start()
        for _ in range(rounds):
            time.sleep(3)
            scenarios._wait_long_owner(fleet)
            fault_ns, writable_ns = cluster.fail_over(
                mode, lag_s=0 if synchronous else ASYNC_LAG_S,
                inspect=None if synchronous else recorded_runs)
            if not synchronous:
                promotions.append((fault_ns, writable_ns, cluster.inspected))
            resumed = wait_for(lambda: [r.start for r in checker.read_runs(fleet.sink)[0]
                                        if r.task in ("tick0", "tick1", "cron")
                                        and r.start > writable_ns], 20)
            resume_ms = (min(resumed) - writable_ns) / MS if resumed else None
            resumes.append(resume_ms)
            faults.append({"kind": f"primary {mode} + promotion", "host": cluster.standby.name,
                           "start_ns": fault_ns, "end_ns": writable_ns,
                           "duration_ms": (writable_ns - fault_ns) / MS,
                           "takeover_ms": resume_ms})
            time.sleep(2)
            cluster.rejoin()
        time.sleep(3)
        for client in clients:
            client.stop()
        metric_at_risk = _metric(fleet, "stagehand_failover_runs_at_risk_total")
        ready = {h.name: h.request("GET", "/.backstage/health/v1/readiness")[0]
                 for h in fleet.hosts}
        lost_recorded = _lost_recorded(cluster, fleet)
        claimed_at = _claim_times(cluster, fleet)
    finally:
        for client in clients:
            client.stop()
        ended = mono_ns()
        fleet.stop()
        cluster.stop()
    runs, _ = checker.read_runs(fleet.sink)
    # A slot whose time to start (its tolerance) runs into the fault cannot be met either.
    excused = [(f["start_ns"] - scenarios.CRON_TOLERANCE_NS,
                f["end_ns"] + int(scenarios.TAKEOVER_BOUND_S * S)) for f in faults]
    check(checks, "every host is ready after the last round", ready,
          all(v == 200 for v in ready.values()))
    figures = {}
    if synchronous:
        worst = max((r for r in resumes if r is not None), default=None)
        check(checks, "runs resume within 2 s of the new primary accepting writes",
              [None if r is None else round(r) for r in resumes],
              all(r is not None and r <= 2000 for r in resumes))
        figures = scenarios.common_checks(fleet, runs, checks, begin_ns=began, end_ns=ended,
                                          faults=excused)
        # A double start of a slot is never excused here: the cron checks above excuse a missed
        # slot in a fault's window, but count every slot that started twice.
        figures.update(trigger_checks(clients[0], runs, checks, ended))
        pause_checks(clients[1], runs, checks, claimed_at)
        done = {r.run_id for r in runs if r.end_kind == "done"}
        wrongly_lost = sorted(done & lost_recorded) if lost_recorded is not None else None
        check(checks, "no succeeded run is recorded as lost", wrongly_lost if wrongly_lost
              else (0 if wrongly_lost is not None else "history unreadable"),
              wrongly_lost == [])
        figures["resume_ms_worst"] = worst
    else:
        found = checker.overlaps(runs, ())
        by_task = checker.by_task(runs)
        first, last = scenarios.cron_window(began, ended, S)
        cron = checker.cron_slots(by_task.get("cron", []), first, last, S,
                                  scenarios.CRON_TOLERANCE_NS, faults=excused)
        trigger_figures = trigger_checks(clients[0], runs, [], ended)
        vanished, at_risk = vanished_runs(runs, promotions)
        check(checks, "every run a failover may have doubled or lost is counted "
              "(stagehand_failover_runs_at_risk_total equals the suite's count: runs whose claim "
              "the new primary lacked, that ended before it took writes or were run again by "
              "another host meanwhile)",
              f"metric {metric_at_risk:.0f}, suite {len(at_risk)}", metric_at_risk == len(at_risk))
        reported = _reported_at_risk(fleet)
        counted = {r.run_id for r in at_risk}
        figures = {"overlaps": len(found), "cron_double_starts": cron["double_starts"],
                   **trigger_figures, "claims_vanished": len(vanished),
                   "suite_at_risk": len(at_risk), "metric_at_risk": metric_at_risk,
                   "unreported": [f"{r.task} {r.run_id} {'ended before' if r.last < w else 'ran on'}"
                                  for r, w in _writable_of(at_risk, promotions)
                                  if r.run_id not in reported],
                   "reported_beyond": [f"{r.task} {r.run_id}" for r in runs
                                       if r.run_id in reported - counted],
                   "promotions": [{"held_runs": len(k[0]), "fault_ns": f, "writable_ns": w}
                                  for f, w, k in promotions]}
    figures["resume_ms"] = resumes
    figures["requests"] = {c.action: len(c.log) for c in clients}
    return {"name": label, "faults": faults, "figures": figures, "checks": checks}


def scenario_failover_sync(ctx):
    """Synchronous standby; the primary SIGKILLed."""
    return scenario_failover(ctx, synchronous=True, mode="kill")


def scenario_failover_sync_partition(ctx):
    """Synchronous standby; the primary cut off from everyone (its standby included)."""
    return scenario_failover(ctx, synchronous=True, mode="partition", rounds=1)


def scenario_failover_async(ctx):
    """Asynchronous standby; the primary SIGKILLed: what vanished is counted."""
    return scenario_failover(ctx, synchronous=False, mode="kill")


def scenario_failover_patroni(ctx):
    """Patroni with synchronous_mode on etcd, as docs/operations.md's "High availability" says;
    the leader's node SIGKILLed, Patroni promoting the other once the leader key expires."""
    return scenario_failover(ctx, synchronous=True, mode="kill", patroni=True)


SCENARIOS = {
    "failover-sync": scenario_failover_sync,
    "failover-patroni": scenario_failover_patroni,
    "failover-sync-partition": scenario_failover_sync_partition,
    "failover-async": scenario_failover_async,
}


if __name__ == "__main__":
    print(json.dumps(list(SCENARIOS)))
