"""Unit tests of the system suite's own machinery: the checker's rules and the partitioning proxy.
Run: python3 tests/system/harness_test.py"""

import os
import socket
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checker  # noqa: E402
from harness import Proxy  # noqa: E402

MS = 1_000_000


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
        excused = checker.cron_slots(runs, 0, 7 * s, s, 500 * MS, excused=[(5 * s, 6 * s)])
        self.assertEqual((excused["missed"], excused["excused"]), (1, 2))

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
