"""Hostile HTTP clients for the suite: a flood of slow-header and idle connections driven by one
thread, and a prober that times liveness on a fresh connection at a fixed rate."""

import errno
import os
import selectors
import socket
import threading
import time

from support import exchange, request_bytes

LIVENESS = "/.backstage/health/v1/liveness"


class _Attacker:
    """One connection slot of the flood; it reconnects whenever its connection is cut."""

    def __init__(self, kind, index, source):
        self.kind = kind  # "slow" or "idle"
        self.index = index
        self.source = source
        self.byte_mode = kind == "slow" and index % 2 == 1
        self.sock = None
        self.state = "waiting"  # waiting (to reconnect), connecting, open
        self.began = 0.0
        self.connected_at = 0.0
        self.next_at = 0.0
        self.pending = b""
        self.lines = 0
        self.reply = b""

    def next_piece(self):
        """The next bytes of an endless request head: one byte, or one header line."""
        if not self.pending:
            self.lines += 1
            self.pending = f"X-Slow-{self.lines}: {self.index}\r\n".encode()
        if self.byte_mode:
            piece, self.pending = self.pending[:1], self.pending[1:]
        else:
            piece, self.pending = self.pending, b""
        return piece


class Flood:
    """Holds `slow` slow-header connections (each sends a request line, then one header line, or
    one byte for every other connection, each `interval_s`, never ending the head) and `idle`
    connections that send nothing, to 127.0.0.1:`port` from the given source addresses
    (round-robin). A connection the server cuts is counted (kind, lifetime, how, what the server
    said) and opened again after `reconnect_s`. One thread drives every socket; thread-safe
    through `snapshot` and `stop`."""

    CONNECT_TIMEOUT_S = 3.0

    def __init__(self, port, slow, idle, slow_sources, idle_sources, interval_s=1.0,
                 reconnect_s=0.05):
        self.port = port
        self.interval_s = interval_s
        self.reconnect_s = reconnect_s
        self.attackers = [_Attacker("slow", i, slow_sources[i % len(slow_sources)])
                          for i in range(slow)]
        self.attackers += [_Attacker("idle", i, idle_sources[i % len(idle_sources)])
                           for i in range(idle)]
        self.lock = threading.Lock()
        self.cuts = []  # (kind, lifetime s, how, first line the server sent)
        self.connect_failures = {}
        self.connects = 0
        self.samples = []  # (monotonic s, open slow, open idle)
        self.stopping = threading.Event()
        self.selector = selectors.DefaultSelector()
        self.thread = threading.Thread(target=self._run, name="flood")

    def start(self):
        # First connections spread over one interval, so that the server's deadlines, which
        # count from each connect, cut them at different times and the flood never pauses.
        now = time.monotonic()
        for kind in ("slow", "idle"):
            group = [a for a in self.attackers if a.kind == kind]
            for i, attacker in enumerate(group):
                attacker.next_at = now + self.interval_s * i / len(group)
        self.thread.start()
        return self

    def stop(self):
        self.stopping.set()
        self.thread.join(10)

    def open_counts(self):
        with self.lock:
            return self._open_counts()

    def _open_counts(self):
        slow = sum(1 for a in self.attackers if a.kind == "slow" and a.state == "open")
        idle = sum(1 for a in self.attackers if a.kind == "idle" and a.state == "open")
        return slow, idle

    def snapshot(self):
        with self.lock:
            return {"cuts": list(self.cuts), "connect_failures": dict(self.connect_failures),
                    "connects": self.connects, "samples": list(self.samples)}

    def _run(self):
        next_sample = time.monotonic()
        try:
            while not self.stopping.is_set():
                now = time.monotonic()
                with self.lock:
                    for attacker in self.attackers:
                        if attacker.state == "waiting" and attacker.next_at <= now:
                            self._connect(attacker, now)
                        elif attacker.state == "connecting" and (
                                now - attacker.began > self.CONNECT_TIMEOUT_S):
                            self._fail(attacker, "connect timed out", now)
                        elif (attacker.state == "open" and attacker.kind == "slow"
                              and attacker.next_at <= now):
                            self._send(attacker, now)
                    if now >= next_sample:
                        self.samples.append((now,) + self._open_counts())
                        next_sample = now + 0.5
                events = self.selector.select(0.05)
                now = time.monotonic()
                with self.lock:
                    for key, mask in events:
                        attacker = key.data
                        if attacker.state == "connecting":
                            self._connected(attacker, now)
                        elif attacker.state == "open" and mask & selectors.EVENT_READ:
                            self._read(attacker, now)
        finally:
            with self.lock:
                for attacker in self.attackers:
                    self._close(attacker)
            self.selector.close()

    def _connect(self, attacker, now):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        attacker.sock = sock
        attacker.began = now
        attacker.pending = b""
        attacker.lines = 0
        attacker.reply = b""
        try:
            sock.bind((attacker.source, 0))
            code = sock.connect_ex(("127.0.0.1", self.port))
        except OSError as error:
            code = error.errno or errno.EIO
        if code not in (0, errno.EINPROGRESS):
            self._fail(attacker, os.strerror(code), now)
            return
        attacker.state = "connecting"
        self.selector.register(sock, selectors.EVENT_WRITE, attacker)

    def _connected(self, attacker, now):
        code = attacker.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            self._fail(attacker, os.strerror(code), now)
            return
        self.connects += 1
        attacker.state = "open"
        attacker.connected_at = now
        self.selector.modify(attacker.sock, selectors.EVENT_READ, attacker)
        if attacker.kind == "slow":
            # The request line and Host, without the blank line that would end the head.
            attacker.pending = request_bytes("GET", LIVENESS, close=False)[:-2]
            attacker.next_at = now

    def _send(self, attacker, now):
        try:
            attacker.sock.send(attacker.next_piece())
        except BlockingIOError:
            pass
        except OSError as error:
            self._cut(attacker, f"send failed ({error.__class__.__name__})", now)
            return
        attacker.next_at = now + self.interval_s

    def _read(self, attacker, now):
        try:
            data = attacker.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError as error:
            self._cut(attacker, f"reset ({error.__class__.__name__})", now)
            return
        if not data:
            self._cut(attacker, "closed", now)
            return
        attacker.reply = (attacker.reply + data)[:512]

    def _cut(self, attacker, how, now):
        said = attacker.reply.split(b"\r\n", 1)[0].decode(errors="replace")
        self.cuts.append((attacker.kind, now - attacker.connected_at, how, said))
        self._close(attacker)
        attacker.next_at = now + self.reconnect_s

    def _fail(self, attacker, why, now):
        self.connect_failures[why] = self.connect_failures.get(why, 0) + 1
        self._close(attacker)
        attacker.next_at = now + self.reconnect_s

    def _close(self, attacker):
        if attacker.sock is not None:
            try:
                self.selector.unregister(attacker.sock)
            except (KeyError, ValueError):
                pass
            attacker.sock.close()
            attacker.sock = None
        attacker.state = "waiting"


class Prober:
    """Requests liveness on a fresh connection every `interval_s` (at fixed ticks; a slow probe
    delays the next one) from `source`, each with `timeout_s` in all, until `stop`. `probes` holds
    (monotonic start, status or None, seconds, error)."""

    def __init__(self, port, interval_s=0.05, timeout_s=2.0, source="127.0.0.1"):
        self.port = port
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.source = source
        self.probes = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="prober")

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stopping.set()
        self.thread.join(self.timeout_s + 5)

    def _run(self):
        payload = request_bytes("GET", LIVENESS)
        tick = time.monotonic()
        while not self.stopping.is_set():
            began = time.monotonic()
            result = exchange(self.port, payload, self.timeout_s, source=self.source)
            self.probes.append((began, result.status, result.seconds, result.error))
            tick += self.interval_s
            self.stopping.wait(max(0.0, tick - time.monotonic()))
            tick = max(tick, time.monotonic() - self.interval_s)


def open_keepalive(port, count, source="127.0.0.1"):
    """Opens `count` connections that each send one keep-alive liveness request and stay open;
    returns the sockets (the caller closes them)."""
    payload = request_bytes("GET", LIVENESS, close=False)
    sockets = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5,
                                            source_address=(source, 0))
            sock.sendall(payload)
            sockets.append(sock)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets
