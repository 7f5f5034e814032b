"""Unit tests of the system suite's own machinery: the checker's rules, the partitioning proxy and
the watcher of run trees. Run:
STAGEHAND_SYSTEM_LOCK_WATCHER=<build>/tests/system/stagehand_system_lock_watcher \
    python3 tests/system/harness_test.py"""

import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checker  # noqa: E402
from harness import Proxy, TreeWatcher, wait_for  # noqa: E402

MS = 1_000_000
S = 1_000_000_000


def lines(*events):
    return [f"{t} {e} {h} {r} {task} {d}" for t, e, h, r, task, d in events]


class CheckerTest(unittest.TestCase):
    def test_runs_are_rebuilt_and_torn_lines_counted(self):
        runs, bad = checker.parse_events(lines(
            (10, "start", "h1", "r1", "t", "-"), (20, "tick", "h1", "r1", "t", "-"),
            (30, "end", "h1", "r1", "t", "done")) + ["12 sta"])
        self.assertEqual(bad, 1)
        self.assertEqual(len(runs), 1)
        self.assertEqual((runs[0].start, runs[0].last, runs[0].end_kind), (10, 30, "done"))

    def test_a_crashed_run_lasts_until_its_last_tick(self):
        runs, _ = checker.parse_events(lines(
            (10, "start", "h1", "r1", "t", "-"), (50, "tick", "h1", "r1", "t", "-")))
        self.assertEqual(runs[0].last, 50)
        self.assertEqual(checker.unfinished(runs), ["r1"])
        self.assertEqual(checker.unfinished(runs, [("h1", 0)]), [])

    def test_overlap_of_two_runs_is_found_and_sequential_runs_are_not(self):
        runs, _ = checker.parse_events(lines(
            (0, "start", "h1", "a", "t", "-"), (100, "end", "h1", "a", "t", "done"),
            (100, "start", "h2", "b", "t", "-"), (200, "end", "h2", "b", "t", "done"),
            (150, "start", "h3", "c", "t", "-"), (160, "end", "h3", "c", "t", "done"),
            (150, "start", "h3", "d", "other", "-"), (160, "end", "h3", "d", "other", "done")))
        found = checker.overlaps(runs)
        self.assertEqual([(o["a"], o["b"]) for o in found], [("b", "c")])
        self.assertEqual(found[0]["ms"], 10 / MS)

    def test_frozen_time_is_not_activity(self):
        runs, _ = checker.parse_events(lines(
            (0, "start", "h1", "old", "t", "-"), (1000, "end", "h1", "old", "t", "term"),
            (500, "start", "h2", "new", "t", "-"), (2000, "end", "h2", "new", "t", "done")))
        self.assertEqual(len(checker.overlaps(runs)), 1)
        self.assertEqual(checker.overlaps(runs, [{"host": "h1", "start": 100, "end": 1000}]), [])
        found = checker.overlaps(runs, [{"host": "h1", "start": 100, "end": 900}])
        self.assertEqual(found[0]["ms"], 100 / MS)

    def test_cron_slots_met_missed_and_skipped_while_busy(self):
        s = 1_000_000_000
        runs, _ = checker.parse_events(lines(
            (0 * s + 5 * MS, "start", "h1", "a", "c", "-"), (0 * s + 50 * MS, "end", "h1", "a", "c", "done"),
            (1 * s + 5 * MS, "start", "h1", "b", "c", "-"), (3 * s + 500 * MS, "end", "h1", "b", "c", "done"),
            (4 * s, "start", "h2", "c", "c", "-"), (4 * s + MS, "end", "h2", "c", "c", "done"),
            (6 * s + 700 * MS, "start", "h2", "d", "c", "-"), (6 * s + 800 * MS, "end", "h2", "d", "c", "done")))
        result = checker.cron_slots(runs, 0, 7 * s, s, 500 * MS)
        self.assertEqual(result["met"], 3)  # 0, 1, 4
        self.assertEqual(result["skipped_busy"], 2)  # 2, 3: run b was still going
        self.assertEqual(result["missed"], 3)  # 5, 6 (d is 700 ms late), 7
        self.assertEqual(result["off_slot_starts"], 1)
        excused = checker.cron_slots(runs, 0, 7 * s, s, 500 * MS, faults=[(5 * s, 6 * s)])
        self.assertEqual((excused["missed"], excused["excused"]), (1, 2))
        self.assertEqual(excused["off_slot_starts"], 1)  # d starts after the window

    def test_the_registration_start_one_second_before_a_slot_is_never_excused(self):
        # `*/2`: the slot at 0 ran; a host registering at 0.8 s made the task due at 2 − 1 = 1 s.
        runs, _ = checker.parse_events(lines(
            (3 * MS, "start", "h1", "a", "c", "-"), (4 * MS, "end", "h1", "a", "c", "done"),
            (S, "start", "h2", "b", "c", "-"), (S + MS, "end", "h2", "b", "c", "done"),
            (2 * S + 3 * MS, "start", "h1", "c", "c", "-"),
            (2 * S + 4 * MS, "end", "h1", "c", "c", "done")))
        for faults in ((), [(500 * MS, 1500 * MS)]):
            result = checker.cron_slots(runs, 0, 2 * S, 2 * S, 500 * MS, faults=faults)
            self.assertEqual((result["met"], result["off_slot_starts"], result["catch_up_starts"]),
                             (2, 1, 0), faults)
            self.assertEqual(result["off_slot"][0]["after_slot_ms"], 1000)

    def test_two_starts_for_one_slot_are_a_double_start(self):
        runs, _ = checker.parse_events(lines(
            (3 * MS, "start", "h1", "a", "c", "-"), (4 * MS, "end", "h1", "a", "c", "done"),
            (300 * MS, "start", "h2", "b", "c", "-"), (301 * MS, "end", "h2", "b", "c", "done")))
        result = checker.cron_slots(runs, 0, 0, S, 500 * MS)
        self.assertEqual((result["met"], result["double_starts"]), (1, 1))
        self.assertEqual([x["run"] for x in result["doubles"][0]["starts"]], ["a", "b"])

    def test_a_slot_whose_run_a_stop_interrupted_unseen_is_not_missed(self):
        runs, _ = checker.parse_events(lines(
            (3 * MS, "start", "h1", "a", "c", "-"), (4 * MS, "end", "h1", "a", "c", "done"),
            (2 * S + 3 * MS, "start", "h2", "c", "c", "-"),
            (2 * S + 4 * MS, "end", "h2", "c", "c", "done")))
        self.assertEqual(checker.cron_slots(runs, 0, 2 * S, S, 500 * MS)["missed"], 1)
        result = checker.cron_slots(runs, 0, 2 * S, S, 500 * MS, interrupted={S + MS // 2})
        self.assertEqual((result["met"], result["missed"], result["interrupted_by_stop"]),
                         (2, 0, 1))
        # Only the slot the harness established; any other missed slot stays missed.
        other = checker.cron_slots(runs, 0, 2 * S, S, 500 * MS, interrupted={3 * S})
        self.assertEqual((other["missed"], other["interrupted_by_stop"]), (1, 0))

    def test_interrupted_slots_need_the_stopped_pid_its_stop_and_an_on_time_start(self):
        import scenarios

        offset = scenarios.wall_to_mono_offset()
        slot_wall_ms = (time.time_ns() // S + 1) * 1000
        slot = slot_wall_ms * MS - offset
        sent, exited = slot + 5 * MS, slot + 40 * MS  # SIGTERM to pid 42, which exits

        class Fleet:
            def __init__(self, rows):
                self.db = self
                self.rows = rows

            def database(self):
                return "db"

            def query(self, database, sql):
                self.sql = sql
                return self.rows

            @staticmethod
            def epoch_ms(column):
                return column

        def found(pid=42, slot_ms=slot_wall_ms, started_ms=slot_wall_ms + 3, ended_ms=None):
            ended_ms = slot_wall_ms + 20 if ended_ms is None else ended_ms
            fleet = Fleet([[str(pid), str(slot_ms), str(started_ms), str(ended_ms)]])
            slots = scenarios.interrupted_slots(fleet, "cron", S, [(42, sent, exited)])
            self.assertIn("interrupted by shutdown", fleet.sql)
            return [round((x - slot) / MS) for x in slots]

        self.assertEqual(found(), [0])
        self.assertEqual(found(pid=43), [], "another daemon's run")
        self.assertEqual(found(ended_ms=slot_wall_ms + 200), [], "ended after the daemon exited")
        self.assertEqual(found(started_ms=slot_wall_ms + 600), [], "started off its slot")
        self.assertEqual(found(slot_ms=slot_wall_ms + 500), [], "not a slot of the grid")

    def test_a_start_before_its_slot_is_off_slot(self):
        runs, _ = checker.parse_events(lines(
            (S - 5 * MS, "start", "h1", "a", "c", "-"), (S - 4 * MS, "end", "h1", "a", "c", "done"),
            (2 * S - MS // 2, "start", "h1", "b", "c", "-"),
            (2 * S, "end", "h1", "b", "c", "done")))
        result = checker.cron_slots(runs, S, 2 * S, S, 500 * MS)
        self.assertEqual((result["met"], result["off_slot_starts"], result["missed"]), (1, 1, 1))

    def test_one_catch_up_after_a_slot_lost_to_a_fault(self):
        # Slot 0's run dies with its host; another host catches up once; a later late start (a
        # registration) is off-slot even inside the fault's window.
        runs, _ = checker.parse_events(lines(
            (3 * MS, "start", "h1", "lost", "c", "-"), (40 * MS, "tick", "h1", "lost", "c", "-"),
            (3600 * MS, "start", "h2", "up", "c", "-"), (3700 * MS, "end", "h2", "up", "c", "done"),
            (4 * S + 3 * MS, "start", "h2", "on", "c", "-"),
            (4 * S + 4 * MS, "end", "h2", "on", "c", "done"),
            (4700 * MS, "start", "h1", "reg", "c", "-"),
            (4701 * MS, "end", "h1", "reg", "c", "done")))
        result = checker.cron_slots(runs, 0, 4 * S, S, 500 * MS, faults=[(50 * MS, 5 * S)])
        self.assertEqual((result["catch_up_starts"], result["off_slot_starts"]), (1, 1))
        self.assertEqual(result["off_slot"][0]["run"], "reg")
        self.assertEqual((result["met"], result["excused"], result["missed"]), (2, 3, 0))

    def test_a_run_with_a_silently_killed_process_lasts_until_it_is_gone(self):
        # The grandchild was SIGKILLed (no gc-end): the run lasts until the watcher saw it dead.
        runs, _ = checker.parse_events(lines(
            (0, "start", "h1", "a", "t", "-"), (5, "pid", "h1", "a", "t", "main:10"),
            (6, "gc-start", "h1", "a", "t", "-"), (7, "pid", "h1", "a", "t", "grandchild:11"),
            (100, "end", "h1", "a", "t", "term"), (250, "gc-tick", "h1", "a", "t", "-"),
            (300, "gone", "h1", "a", "t", "dead"),
            (200, "start", "h2", "b", "t", "-"), (400, "end", "h2", "b", "t", "done")))
        a = next(r for r in runs if r.run_id == "a")
        self.assertEqual((a.last, a.pids, checker.tree_tail_ms(a)),
                         (300, {"main": 10, "grandchild": 11}, 200 / MS))
        found = checker.overlaps(runs)
        self.assertEqual([(o["a"], o["b"], o["at_ns"]) for o in found], [("a", "b", 200)])

    def test_a_run_whose_processes_all_said_their_last_word_ends_with_it(self):
        # The watcher woke late (`gone` at 300); every process had written its last event by 150.
        runs, _ = checker.parse_events(lines(
            (0, "start", "h1", "a", "t", "-"), (6, "gc-start", "h1", "a", "t", "-"),
            (100, "end", "h1", "a", "t", "term"), (150, "gc-end", "h1", "a", "t", "term"),
            (300, "gone", "h1", "a", "t", "dead"),
            (200, "start", "h2", "b", "t", "-"), (400, "end", "h2", "b", "t", "done")))
        self.assertEqual(next(r for r in runs if r.run_id == "a").last, 150)
        self.assertEqual(checker.overlaps(runs), [])

    def test_a_killed_run_seen_dead_is_not_lost_and_a_survivor_is_reported(self):
        runs, _ = checker.parse_events(lines(
            (0, "start", "h1", "killed", "t", "-"), (50, "tick", "h1", "killed", "t", "-"),
            (90, "gone", "h1", "killed", "t", "dead"),
            (0, "start", "h1", "stays", "t2", "-"), (10, "end", "h1", "stays", "t2", "done"),
            (900, "gone", "h1", "stays", "t2", "survivor"),
            (950, "gone", "h1", "stays", "t2", "dead")))
        self.assertEqual(checker.unfinished(runs), [])
        self.assertEqual(checker.survivors(runs), ["stays"])
        self.assertEqual(checker.parse_events(["1 bogus h r t -"])[1], 1)

    def test_cadence_follows_the_catch_up_rule(self):
        runs, _ = checker.parse_events(lines(
            (0, "start", "h1", "a", "d", "-"), (10, "end", "h1", "a", "d", "done"),
            (100, "start", "h1", "b", "d", "-"), (350, "end", "h1", "b", "d", "done"),
            (355, "start", "h1", "c", "d", "-"), (360, "end", "h1", "c", "d", "done"),
            (800, "start", "h1", "e", "d", "-"), (810, "end", "h1", "e", "d", "done")))
        result = checker.cadence_gaps(runs, 100, 50)
        self.assertEqual(result["late"], 1)  # e: due at 455, started at 800
        self.assertEqual(result["late_runs"][0]["after"], "c")
        self.assertEqual(checker.cadence_gaps(runs, 100, 50, excused=[(400, 500)])["late"], 0)


# A stand-in for the probe's run lock: takes the lock as probe.cc does (locked, then renamed), logs
# its pid, forks a child that keeps the lock `child_s` after the parent exits.
_LOCKER = textwrap.dedent("""
    import fcntl, os, sys, time
    directory, sink, run_id, child_s = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    path = os.path.join(directory, run_id + ".lock")
    fd = os.open(path + ".new", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, f"h1 {run_id} t\\n".encode())
    os.rename(path + ".new", path)
    with open(sink, "a") as f:
        f.write(f"{time.monotonic_ns()} pid h1 {run_id} t main:{os.getpid()}\\n")
    if os.fork() == 0:
        with open(sink, "a") as f:
            f.write(f"{time.monotonic_ns()} pid h1 {run_id} t grandchild:{os.getpid()}\\n")
        time.sleep(child_s)
        os._exit(0)
""")


class TreeWatcherTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.sink = os.path.join(self.dir.name, "events.log")
        open(self.sink, "w").close()
        lock_watcher = os.environ.get("STAGEHAND_SYSTEM_LOCK_WATCHER", "")
        self.assertTrue(os.access(lock_watcher, os.X_OK),
                        "STAGEHAND_SYSTEM_LOCK_WATCHER must name the built lock watcher")
        self.watcher = TreeWatcher(os.path.join(self.dir.name, "locks"), self.sink, sys.executable,
                                   lock_watcher)

    def tearDown(self):
        self.watcher.finish(timeout_s=0)
        self.dir.cleanup()

    def start_run(self, run_id, child_s):
        subprocess.run([sys.executable, "-c", _LOCKER, self.watcher.directory, self.sink, run_id,
                        str(child_s)], check=True)
        return time.monotonic_ns()

    def gone(self):
        with open(self.sink) as f:
            return {p[3]: (int(p[0]), p[5]) for p in (line.split() for line in f) if p[1] == "gone"}

    def test_a_run_is_gone_when_its_last_process_is(self):
        # The child sleeps 0.3 s from its own start, which is after `started` however slowly the
        # parent starts and exits on a loaded machine.
        started = time.monotonic_ns()
        self.start_run("r1", 0.3)
        self.assertTrue(wait_for(lambda: "r1" in self.gone(), 5))
        at, kind = self.gone()["r1"]
        self.assertEqual(kind, "dead")
        self.assertGreaterEqual(at - started, 300 * MS)

    def test_a_process_alive_at_finish_is_a_survivor_and_is_killed(self):
        self.start_run("r2", 60)
        self.assertTrue(wait_for(lambda: self.watcher.live_runs(), 2))
        self.assertEqual(self.watcher.finish(timeout_s=0.2), ["r2"])
        self.assertEqual(self.gone()["r2"][1], "survivor")
        self.assertFalse(self.watcher.live_runs())  # the child was killed: the lock is free


class ProxyTest(unittest.TestCase):
    def setUp(self):
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.accepted = []
        threading.Thread(target=self._echo_server, daemon=True).start()
        self.proxy = Proxy(self.server.getsockname()[1])

    def tearDown(self):
        self.proxy.stop()
        self.server.close()

    def _echo_server(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted.append(conn)
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn):
        try:
            while True:
                data = conn.recv(4096)
                if not data:
                    break
                conn.sendall(data)
        except OSError:
            pass
        conn.close()

    def _client(self):
        client = socket.create_connection(("127.0.0.1", self.proxy.port), 5)
        client.settimeout(5)
        return client

    def _refused(self):
        """Whether a new connection through the proxy is refused, reset or closed unserved."""
        try:
            with self._client() as fresh:
                fresh.sendall(b"x")
                return fresh.recv(10) == b""
        except (ConnectionRefusedError, ConnectionResetError, BrokenPipeError):
            return True

    def test_forwards_both_ways(self):
        with self._client() as client:
            client.sendall(b"ping")
            self.assertEqual(client.recv(10), b"ping")

    def test_blackhole_holds_bytes_until_heal(self):
        with self._client() as client:
            client.sendall(b"a")
            self.assertEqual(client.recv(10), b"a")
            self.proxy.set_mode("blackhole")
            client.sendall(b"b")
            client.settimeout(0.5)
            with self.assertRaises(socket.timeout):
                client.recv(10)
            self.proxy.set_mode("up")
            client.settimeout(5)
            self.assertEqual(client.recv(10), b"b")

    def test_reset_drops_connections_and_refuses_new_ones(self):
        with self._client() as client:
            client.sendall(b"a")
            self.assertEqual(client.recv(10), b"a")
            self.proxy.set_mode("reset")
            with self.assertRaises((ConnectionResetError, BrokenPipeError, AssertionError)):
                data = client.recv(10)
                self.assertNotEqual(data, b"")
        self.assertTrue(self._refused(), "a new connection was served while partitioned")
        self.proxy.set_mode("up")
        with self._client() as healed:
            healed.sendall(b"c")
            self.assertEqual(healed.recv(10), b"c")


if __name__ == "__main__":
    unittest.main()
