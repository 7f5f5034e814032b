"""The system suite's fleet machinery: the PostgreSQL it talks to, one TCP proxy per host in front
of it (the harness partitions a host by pausing or resetting its proxy), `stagehand serve`
processes with their configs, logs, readiness, freezing, killing and resource counters, and the
watcher that sees when the last process of each run is dead.

Everything listens on 127.0.0.1 only, each daemon on a port it picks itself (port 0) and names in
its ready file (`serve --ready-file`): nothing probes for a free port that another process could
take first. Every process the harness starts is remembered by pid and ended by pid when the fleet
stops."""

import http.client
import json
import os
import select
import shlex
import signal
import socket
import struct
import subprocess
import threading
import time


def mono_ns():
    """CLOCK_MONOTONIC in ns: the clock the probe writes, comparable across processes."""
    return time.monotonic_ns()


def wait_for(predicate, timeout_s, interval_s=0.02):
    """Polls `predicate` until it returns a truthy value or the timeout passes; returns the value
    (None on timeout). Used to observe external processes, never to order threads of our own."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval_s)


class Postgres:
    """The test server exported by scripts/lib/postgres.sh (STAGEHAND_TEST_POSTGRES_*)."""

    name = "PostgreSQL"
    client = "pg"  # backend.database.client
    min_cadence_ms = 1  # times are kept to the microsecond

    def __init__(self):
        env = os.environ
        self.url = env["STAGEHAND_TEST_POSTGRES_URL"]
        self.port = int(env["STAGEHAND_TEST_POSTGRES_PORT"])
        self.data = env.get("STAGEHAND_TEST_POSTGRES_DATA", "")
        self.log = env.get("STAGEHAND_TEST_POSTGRES_LOG", "")
        self.pg_ctl = shlex.split(env.get("STAGEHAND_TEST_PG_CTL", ""))
        self.bin = env.get("STAGEHAND_TEST_PG_BIN", "/usr/lib/postgresql/15/bin")

    def can_restart(self):
        return bool(self.pg_ctl and self.data and self.log)

    def restart(self):
        """`pg_ctl restart -m fast`; returns the seconds it took."""
        began = time.monotonic()
        subprocess.run(self.pg_ctl + ["-D", self.data, "-l", self.log, "-m", "fast", "-w", "-t",
                                      "60", "restart"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return time.monotonic() - began

    def query(self, database, sql):
        """Runs `sql` in `database` with psql; returns the rows as lists of strings."""
        url = self.url.rsplit("/", 1)[0] + "/" + database
        env = dict(os.environ, PGPASSWORD="stagehand", PGCONNECT_TIMEOUT="5")
        out = subprocess.run([os.path.join(self.bin, "psql"), "-X", "-A", "-t", "-q", "-F", "\t",
                              url, "-c", sql], check=True, capture_output=True, text=True,
                             env=env, timeout=30).stdout
        return [line.split("\t") for line in out.splitlines() if line]

    def drop_database(self, database):
        self.query("postgres", f'drop database if exists "{database}" with (force)')

    @staticmethod
    def epoch_ms(column):
        """SQL for the epoch milliseconds of a timestamptz column of stagehand's tables."""
        return f"round(extract(epoch from {column}) * 1000)"


class Mariadb:
    """The test server exported by scripts/lib/mariadb.sh (STAGEHAND_TEST_MARIADB_*), in the role
    Postgres plays: the database a fleet's hosts share."""

    name = "MariaDB"
    client = "mysql2"
    # Backstage's datetime columns keep whole seconds on MySQL: a task runs at most once a second.
    min_cadence_ms = 1000

    def __init__(self):
        env = os.environ
        self.url = env["STAGEHAND_TEST_MARIADB_URL"]
        self.port = int(env["STAGEHAND_TEST_MARIADB_PORT"])
        self.pid_file = env.get("STAGEHAND_TEST_MARIADB_PIDFILE", "")

    def can_restart(self):
        return bool(self.pid_file)

    def restart(self):
        """Stops the server (SIGTERM, a clean shutdown) and starts it again with the same command
        line, as its owner; returns the seconds until it accepts connections again."""
        began = time.monotonic()
        with open(self.pid_file) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = [arg.decode() for arg in f.read().split(b"\0") if arg]
        os.kill(pid, signal.SIGTERM)
        while os.path.exists(f"/proc/{pid}"):
            time.sleep(0.02)
        if os.geteuid() == 0:
            command = ["runuser", "-u", "mysql", "--"] + command
        subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
        if not wait_for(lambda: self._answers(), 60, 0.05):
            raise RuntimeError("MariaDB did not come back after its restart")
        return time.monotonic() - began

    def _answers(self):
        try:
            self.query("mysql", "SELECT 1")
            return True
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            return False

    def query(self, database, sql):
        """Runs `sql` in `database` with the mariadb client; returns the rows as lists of
        strings."""
        out = subprocess.run(["mariadb", "--no-defaults", "-h", "127.0.0.1", "-P", str(self.port),
                              "-u", "stagehand", "-pstagehand", "-D", database, "-N", "-B",
                              "--connect-timeout=5", "-e", sql], check=True, capture_output=True,
                             text=True, timeout=30).stdout
        return [line.split("\t") for line in out.splitlines() if line]

    def drop_database(self, database):
        self.query("mysql", f"DROP DATABASE IF EXISTS `{database}`")

    @staticmethod
    def epoch_ms(column):
        """SQL for the epoch milliseconds of a UTC datetime column of stagehand's tables."""
        return f"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {column}) DIV 1000"


# Per kind of test server: the URL variable scripts/lib exports, its library, and its start and
# stop functions.
DATABASES = {
    "postgres": ("STAGEHAND_TEST_POSTGRES_URL", "postgres.sh", "stagehand_pg_start",
                 "stagehand_pg_stop"),
    "mysql": ("STAGEHAND_TEST_MARIADB_URL", "mariadb.sh", "stagehand_mariadb_start",
              "stagehand_mariadb_stop"),
}


def database_from_environment(kind):
    """The test server of `kind` ("postgres" or "mysql") that scripts/lib set up."""
    return Mariadb() if kind == "mysql" else Postgres()


def with_database(kind, script, argv):
    """Runs the Python `script` with `argv` under a throwaway server of `kind` from scripts/lib
    (for a script started without one); returns its exit code."""
    _, library, start, stop = DATABASES[kind]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    shell = (f'source "$1/scripts/lib/{library}"; trap {stop} EXIT; '
             f'{start} >&2 || exit 1; shift; python3 "$@"')
    return subprocess.call(["bash", "-c", shell, "bash", root, os.path.abspath(script)] + argv)


class _ProxyConnection:
    def __init__(self, proxy, client):
        self.proxy = proxy
        self.client = client
        self.upstream = None
        self.closed = False

    def start(self):
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        proxy = self.proxy
        with proxy.cond:
            while proxy.mode == "blackhole" and not self.closed:
                proxy.cond.wait(0.2)
            if proxy.mode == "reset" or self.closed:
                self.close(reset=True)
                return
        try:
            self.upstream = socket.create_connection(("127.0.0.1", proxy.upstream_port), 5)
            self.upstream.settimeout(None)
        except OSError:
            self.close(reset=True)
            return
        threading.Thread(target=self._pump, args=(self.upstream, self.client), daemon=True).start()
        self._pump(self.client, self.upstream)

    def _pump(self, source, sink):
        proxy = self.proxy
        try:
            while not self.closed:
                with proxy.cond:
                    while proxy.mode == "blackhole" and not self.closed:
                        proxy.cond.wait(0.2)
                if self.closed:
                    break
                readable, _, _ = select.select([source], [], [], 0.2)
                if not readable:
                    continue
                with proxy.cond:
                    if proxy.mode == "blackhole":
                        continue
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except (OSError, ValueError):
            pass
        self.close(reset=False)

    def close(self, reset):
        with self.proxy.cond:
            if self.closed:
                return
            self.closed = True
            self.proxy.connections.discard(self)
        for sock in (self.client, self.upstream):
            if sock is None:
                continue
            try:
                if reset:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
            except OSError:
                pass


class Proxy:
    """A threaded TCP proxy on 127.0.0.1 in front of PostgreSQL, one per host.

    Modes: `up` forwards; `blackhole` stops moving bytes in both directions on every connection,
    old and new, as a network partition does (TCP keeps the data; it flows again on heal);
    `reset` drops every connection with a RST and refuses new ones the same way. Thread-safe."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.cond = threading.Condition()
        self.mode = "up"
        self.connections = set()
        self.stopped = False
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(256)
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                client, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            client.settimeout(None)
            connection = _ProxyConnection(self, client)
            with self.cond:
                self.connections.add(connection)
            connection.start()

    def set_mode(self, mode):
        with self.cond:
            self.mode = mode
            victims = list(self.connections) if mode == "reset" else []
            self.cond.notify_all()
        for connection in victims:
            connection.close(reset=True)

    def stop(self):
        self.stopped = True
        self.set_mode("reset")
        self.listener.close()


def children_of(pid):
    """Every descendant pid of `pid` (from /proc/<pid>/task/*/children or a /proc scan)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        parents.setdefault(int(fields[1]), []).append(int(entry))
    result, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            result.append(child)
            todo.append(child)
    return result


def cpu_seconds(pid):
    """utime + stime of `pid` (and its reaped children) in seconds, from /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    ticks = os.sysconf("SC_CLK_TCK")
    own = (int(fields[11]) + int(fields[12])) / ticks
    children = (int(fields[13]) + int(fields[14])) / ticks
    return own, children


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def thread_count(pid, but=None):
    """Counts the threads of `pid`, leaving out those named `but` (e.g. "stagehand-run", the
    task executor pool, which grows lazily up to maxConcurrency and is not a leak)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        if but is None:
            return len(tasks)
        count = 0
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    count += f.read().strip() != but
            except OSError:
                pass
        return count
    except OSError:
        return None


def process_state(pid):
    """The state letter of `pid` from /proc/<pid>/stat (R, S, Z, ...), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()[0]


def is_probe(pid, probe):
    """Whether `pid` still runs the probe program (and is not a recycled pid)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0] == probe.encode()
    except OSError:
        return False


class TreeWatcher:
    """Sees when the last process of each run is dead, from the run locks the probes hold
    (STAGEHAND_SYSTEM_LOCKS, see probe.cc), through `stagehand_system_lock_watcher`
    (lock_watcher.cc): it finds each new `<run-id>.lock` through inotify, blocks in flock(2) on a
    thread per run until the run's last process (the setsid grandchild included) is gone, and then
    appends `<ns> gone <host> <run-id> <task> dead` to the event sink itself, natively, so that a
    busy interpreter here cannot date a death late. A run already dead when found is dated when
    found (later than the truth, never earlier).

    `finish` is called once the daemons have stopped: a run still holding its lock then has a
    process that outlived its daemon; it is recorded `gone ... survivor` and its processes are
    SIGKILLed (by pid, after checking that each pid still runs `probe`). Thread-safe."""

    def __init__(self, directory, sink, probe, lock_watcher):
        self.directory = directory
        self.sink = sink
        self.probe = probe
        os.makedirs(directory, exist_ok=True)
        self.cond = threading.Condition()
        self.live = {}  # lock name -> (host, run id, task)
        self.survivors = []  # run ids the watcher named in answer to `finish`
        self.ready = False
        self.finished = False
        self.helper = subprocess.Popen([lock_watcher, directory, sink], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, bufsize=1)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        with self.cond:
            if not self.cond.wait_for(lambda: self.ready, 10):
                raise RuntimeError(f"{lock_watcher} did not start watching {directory}")

    def _read(self):
        for line in self.helper.stdout:
            parts = line.split()
            with self.cond:
                if parts == ["ready"]:
                    self.ready = True
                elif len(parts) == 5 and parts[0] == "live":
                    self.live[parts[1]] = tuple(parts[2:])
                elif len(parts) == 2 and parts[0] == "dead":
                    self.live.pop(parts[1], None)
                elif len(parts) == 3 and parts[0] == "survivor":
                    self.survivors.append(parts[2])
                elif parts == ["finished"]:
                    self.finished = True
                self.cond.notify_all()

    def live_runs(self):
        with self.cond:
            return dict(self.live)

    def finish(self, timeout_s=2.0):
        """Waits up to `timeout_s` for the runs still alive, then records and kills the survivors;
        returns their run ids. Once finished, it returns [] at once."""
        if self.helper.stdin.closed:
            return []
        with self.cond:
            self.cond.wait_for(lambda: not self.live, timeout_s)
        self.helper.stdin.write("finish\n")
        self.helper.stdin.flush()
        with self.cond:
            if not self.cond.wait_for(lambda: self.finished, 10):
                raise RuntimeError("the lock watcher did not answer `finish`")
            survivors = list(self.survivors)
        pids = {}
        try:
            with open(self.sink, errors="replace") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 6 and parts[1] == "pid" and ":" in parts[5]:
                        pids.setdefault(parts[3], []).append(int(parts[5].split(":")[1]))
        except (OSError, ValueError):
            pass
        for run_id in survivors:
            for pid in pids.get(run_id, []):
                if is_probe(pid, self.probe):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        with self.cond:
            self.cond.wait_for(lambda: not self.live, 5)
        self.helper.stdin.close()
        self.helper.wait(10)
        self.reader.join(10)
        self.helper.stdout.close()
        return survivors


def http_request(port, method, path, body=None, headers=None, timeout=5):
    """One HTTP request to 127.0.0.1:`port` on a fresh connection; (status, body) or (None, error
    text)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException) as error:
        return None, str(error)
    finally:
        connection.close()


class Host:
    """One `stagehand serve` process: its port (known once it is ready), its proxy (None when the
    fleet is not proxied), its config, its log and its ready file."""

    def __init__(self, fleet, index):
        self.fleet = fleet
        self.index = index
        self.name = f"h{index + 1}"
        self.port = None
        self.proxy = Proxy(fleet.db.port) if fleet.proxied else None
        self.wrapper = []
        self.extra_env = {}
        self.process = None
        self.incarnation = 0
        self.exits = []  # (incarnation, return code, expected)
        self.config_path = os.path.join(fleet.workdir, f"{self.name}.yaml")
        self.ready_path = os.path.join(fleet.workdir, f"{self.name}.ready")
        if hasattr(fleet.db, "connection"):
            connection = fleet.db.connection()
        else:
            connection = {"host": "127.0.0.1",
                          "port": self.proxy.port if self.proxy else fleet.db.port,
                          "user": "stagehand", "password": "stagehand"}
        with open(self.config_path, "w") as f:
            json.dump({"backend": {
                "listen": {"host": "127.0.0.1", "port": 0},
                "database": {"client": fleet.db.client, "connection": connection}},
                "stagehand": {"database": fleet.database_settings} if fleet.database_settings
                else {}}, f, indent=1)

    @property
    def pid(self):
        return self.process.pid if self.process else None

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def start(self):
        self.incarnation += 1
        self.port = None
        try:
            os.unlink(self.ready_path)
        except FileNotFoundError:
            pass
        log = os.path.join(self.fleet.workdir, f"{self.name}.{self.incarnation}.log")
        env = dict(os.environ, STAGEHAND_SYSTEM_HOST=self.name, **self.fleet.probe_env,
                   **self.extra_env)
        argv = self.wrapper + [self.fleet.stagehand, "serve", "--config", self.fleet.common_config,
                               "--config", self.config_path, "--ready-file", self.ready_path,
                               "--log-level", getattr(self.fleet.ctx, "log_level", "info")]
        with open(log, "w") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        self.log_path = log
        return self

    def wait_ready(self, timeout_s=30):
        """Waits for the ready file (written by rename once the daemon listens and its plugins have
        started), takes the port from it and checks readiness 200."""
        def ready():
            if not self.alive():
                raise RuntimeError(f"{self.name} exited with {self.process.returncode} during "
                                   f"startup; log {self.log_path}:\n{self.log_tail()}")
            try:
                with open(self.ready_path) as f:
                    announced = json.load(f)
            except FileNotFoundError:
                return False
            if not self.wrapper and announced.get("pid") != self.pid:
                raise RuntimeError(f"{self.name}: ready file of another process: {announced}")
            self.port = int(announced["port"])
            status, _ = self.request("GET", "/.backstage/health/v1/readiness", timeout=1)
            return status == 200
        if not wait_for(ready, timeout_s, 0.02):
            raise RuntimeError(f"{self.name} not ready after {timeout_s} s; log:\n"
                               f"{self.log_tail()}")

    def log_tail(self, lines=30):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def request(self, method, path, body=None, headers=None, timeout=5):
        """One HTTP request on a fresh connection; (status, body) or (None, error text)."""
        if self.port is None:
            return None, f"{self.name} has no port (not started, or not ready yet)"
        return http_request(self.port, method, path, body, headers, timeout)

    def signal_tree(self, sig):
        """Sends `sig` to the daemon, then to every descendant (its running commands)."""
        os.kill(self.pid, sig)
        for child in children_of(self.pid):
            try:
                os.kill(child, sig)
            except ProcessLookupError:
                pass

    def freeze(self):
        """SIGSTOP of the daemon and its descendants: a paused machine. Returns the freeze time."""
        os.kill(self.pid, signal.SIGSTOP)
        for _ in range(2):
            for child in children_of(self.pid):
                try:
                    os.kill(child, signal.SIGSTOP)
                except ProcessLookupError:
                    pass
        return mono_ns()

    def thaw(self):
        """SIGCONT of the daemon, then of its descendants, back to back. Returns the wake time."""
        woke = mono_ns()
        self.signal_tree(signal.SIGCONT)
        return woke

    def kill(self):
        woke = mono_ns()
        os.kill(self.pid, signal.SIGKILL)
        code = self.process.wait(10)
        self.exits.append((self.incarnation, code, True))
        return woke

    def terminate(self, timeout_s=20):
        """SIGTERM and wait; returns (time sent, exit code)."""
        sent = mono_ns()
        os.kill(self.pid, signal.SIGTERM)
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            code = "timeout"
        self.exits.append((self.incarnation, code, True))
        return sent, code

    def cleanup(self):
        if self.process is not None and self.process.poll() is None:
            try:
                self.signal_tree(signal.SIGCONT)
                os.kill(self.pid, signal.SIGTERM)
                self.process.wait(15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                self.exits.append((self.incarnation, "no exit 15 s after SIGTERM", False))
                for pid in [self.pid] + children_of(self.pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self.process.wait(10)
            self.exits.append((self.incarnation, self.process.returncode, True))
        if self.proxy:
            self.proxy.stop()

    def unexpected_exits(self):
        out = [(inc, code) for inc, code, expected in self.exits if not expected]
        if self.process is not None and self.process.poll() is not None and not any(
                inc == self.incarnation for inc, _, _ in self.exits):
            out.append((self.incarnation, self.process.returncode))
        return out

    def metrics(self):
        status, body = self.request("GET", "/metrics")
        return body.decode(errors="replace") if status == 200 else ""


class Fleet:
    """N hosts sharing one plugin config. `tasks` maps task id → task config (schedule + command);
    `plugin` is the plugin id (one per scenario, so each scenario has its own database).
    `track_trees` gives the probes a lock directory and watches it (TreeWatcher), so each run's
    `gone` time is known; the load scenario turns it off (hundreds of runs a second). `proxied`
    puts each host's database connections through its Proxy (the network faults need it); without
    it the hosts talk to the database directly, and a stall of this process's threads cannot
    reach them."""

    def __init__(self, ctx, plugin, tasks, hosts=3, scheduler=None, track_trees=True,
                 proxied=True, db=None, database_settings=None):
        self.ctx = ctx
        self.db = db or ctx.db
        # A database that names its own connection (a PgCluster's multi-host URL) has proxies of
        # its own, per node.
        self.proxied = proxied and not hasattr(self.db, "connection")
        self.database_settings = database_settings
        self.stagehand = ctx.stagehand
        self.plugin = plugin
        self.workdir = os.path.join(ctx.out, plugin)
        os.makedirs(self.workdir, exist_ok=True)
        self.sink = os.path.join(self.workdir, "events.log")
        open(self.sink, "w").close()
        self.watcher = None
        self.probe_env = {}
        self.survivors = []
        if track_trees:
            locks = os.path.join(self.workdir, "locks")
            self.watcher = TreeWatcher(locks, self.sink, ctx.probe, ctx.lock_watcher)
            self.probe_env = {"STAGEHAND_SYSTEM_LOCKS": locks}
        self.common_config = os.path.join(self.workdir, "common.yaml")
        settings = {"lease": "2s", "pollInterval": "1s", "maxConcurrency": 64,
                    "shutdownGrace": "5s"}
        settings.update(scheduler or {})
        with open(self.common_config, "w") as f:
            json.dump({"backend": {"auth": {"dangerouslyDisableDefaultAuthPolicy": True}},
                       "stagehand": {"scheduler": settings,
                                     "plugins": {plugin: {
                                         # Tasks see only what they are given: the probe needs
                                         # its host's name and the run-lock directory.
                                         "inheritEnv": ["STAGEHAND_SYSTEM_HOST",
                                                        "STAGEHAND_SYSTEM_LOCKS"],
                                         "tasks": tasks}}}}, f, indent=1)
        self.hosts = [Host(self, i) for i in range(hosts)]

    def probe(self, task_id, work_ms):
        return [self.ctx.probe, self.sink, task_id, str(int(work_ms))]

    def start(self, count=None):
        """Starts the first host alone (it creates the plugin database), then the others (the
        first `count` hosts only, when given)."""
        hosts = self.hosts[:count] if count else self.hosts
        hosts[0].start().wait_ready()
        for host in hosts[1:]:
            host.start()
        for host in hosts[1:]:
            host.wait_ready()
        return self

    def stop(self):
        """Stops every host, then waits for the runs' last processes: any still alive is a
        survivor (recorded in the sink and killed)."""
        for host in self.hosts:
            host.cleanup()
        if self.watcher:
            self.survivors = self.watcher.finish()

    def api(self, path=""):
        return f"/api/{self.plugin}/.backstage/scheduler/v1/tasks{path}"

    def host(self, name):
        return next(h for h in self.hosts if h.name == name)

    def database(self):
        return "backstage_plugin_" + self.plugin

    def row(self, task_id):
        rows = self.db.query(self.database(), "select current_run_ticket from "
                             "backstage_backend_tasks__tasks where id = '" + task_id + "'")
        return rows[0][0] if rows else None
