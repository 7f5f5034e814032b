"""A Patroni cluster of two PostgreSQL nodes on one etcd, for the failover scenario that follows
docs/operations.md's "High availability" as written: Patroni with `synchronous_mode: true` and
`synchronous_commit: on`, the hosts on a multi-host URL through each node's proxy. Started by the
suite itself (Debian's patroni, etcd-server and PostgreSQL 15), on 127.0.0.1 only, removed by
stop(). A failover SIGKILLs the leader's Patroni and PostgreSQL (a machine that died); Patroni
promotes the other node once the leader key expires (the `ttl`, 20 s); `rejoin` starts the dead
node's Patroni on an empty data directory, which it rebuilds from the new leader.

The same interface as pg_cluster.PgCluster, so failover.scenario_failover drives either."""

import json
import os
import shutil
import subprocess
import tempfile
import urllib.request

from harness import mono_ns, wait_for
from pg_cluster import PASSWORD, PG_BIN, Node, _as_owner, _free_port, kill_tree

ETCD = "/usr/bin/etcd"
PATRONI = "/usr/bin/patroni"
SCOPE = "stagehand"


class PatroniNode(Node):
    """One node: its Patroni process, its PostgreSQL port and data directory, its proxy. Reads,
    the postmaster's pid and the kill of PostgreSQL are pg_cluster.Node's."""

    def __init__(self, cluster, name):
        super().__init__(cluster, name)
        self.config = os.path.join(cluster.dir, f"{name}.yml")
        self.api_port = _free_port()
        self.process = None

    def write_config(self):
        socket_dir = os.path.join(self.cluster.dir, "sockets")
        config = {
            "scope": SCOPE,
            "name": self.name,
            "log": {"level": "WARNING"},
            "restapi": {"listen": f"127.0.0.1:{self.api_port}",
                        "connect_address": f"127.0.0.1:{self.api_port}"},
            "etcd3": {"hosts": [f"127.0.0.1:{self.cluster.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": 20, "loop_wait": 2, "retry_timeout": 5,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    "postgresql": {
                        "use_pg_rewind": False,
                        "parameters": {
                            "synchronous_commit": "on", "max_connections": 200,
                            "wal_level": "replica", "hot_standby": "on", "max_wal_senders": 10,
                            "wal_keep_size": "256MB", "fsync": "off",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"},
                           {"auth-host": "scram-sha-256"}, {"auth-local": "trust"}],
                "pg_hba": ["local all all trust",
                           "host replication replicator 127.0.0.1/32 scram-sha-256",
                           "host all all 127.0.0.1/32 scram-sha-256"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.port}",
                "connect_address": f"127.0.0.1:{self.port}",
                "data_dir": self.data,
                "bin_dir": PG_BIN,
                "pgpass": os.path.join(self.cluster.dir, f"{self.name}.pgpass"),
                "authentication": {
                    "superuser": {"username": "stagehand", "password": PASSWORD},
                    "replication": {"username": "replicator", "password": PASSWORD},
                },
                "parameters": {"unix_socket_directories": socket_dir},
            },
            "tags": {"nofailover": False, "noloadbalance": False},
        }
        with open(self.config, "w") as f:
            json.dump(config, f)  # YAML is a superset of JSON
        if os.geteuid() == 0:
            shutil.chown(self.config, "postgres", "postgres")

    def start(self):
        self.write_config()
        log = open(self.log, "ab")
        self.process = subprocess.Popen(_as_owner([PATRONI, self.config]), stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)

    def role(self):
        """The node's role as its Patroni REST API tells it ("primary", "replica"), or None."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}/patroni",
                                        timeout=2) as response:
                state = json.load(response)
        except (OSError, ValueError):
            return None
        if state.get("state") != "running":
            return None
        role = state.get("role")
        return "primary" if role == "master" else role  # Patroni before 3.1 says "master"

    def kill(self):
        """SIGKILL of Patroni, then of the postmaster (which Patroni starts detached, no child of
        its process) and every backend: a machine that died."""
        if self.process is not None:
            kill_tree(self.process.pid)
            self.process.wait(10)
            self.process = None
        super().kill()

    def stop(self):
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
        self.process = None


class PatroniCluster:
    """etcd and two Patroni nodes. `primary` and `standby` follow Patroni's leader. In the role of
    harness.Postgres for a Fleet: its hosts connect through `url`. Call stop() at the end."""

    name = "PostgreSQL under Patroni (synchronous_mode)"
    client = "pg"
    min_cadence_ms = 1
    synchronous = True

    def __init__(self):
        for program in (ETCD, PATRONI):
            if not os.path.exists(program):
                raise RuntimeError(f"{program} is missing: scripts/bootstrap installs it")
        self.dir = tempfile.mkdtemp(prefix="stagehand-patroni.")
        os.makedirs(os.path.join(self.dir, "sockets"))
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            shutil.chown(os.path.join(self.dir, "sockets"), "postgres", "postgres")
        self.etcd_port = _free_port()
        self.etcd = self._start_etcd()
        self.nodes = [PatroniNode(self, "node_a"), PatroniNode(self, "node_b")]
        self.nodes[0].start()
        if not wait_for(lambda: self.nodes[0].role() == "primary", 60, 0.2):
            raise RuntimeError("Patroni did not bootstrap node_a: see " + self.nodes[0].log)
        self.nodes[1].start()
        self._wait_synchronous(self.nodes[1])
        hosts = ",".join(f"127.0.0.1:{n.proxy.port}" for n in self.nodes)
        self.url = (f"postgresql://stagehand:{PASSWORD}@{hosts}/postgres"
                    "?target_session_attrs=read-write")

    def _start_etcd(self):
        peer = _free_port()
        data = os.path.join(self.dir, "etcd")
        log = open(os.path.join(self.dir, "etcd.log"), "ab")
        process = subprocess.Popen(
            [ETCD, "--name", "etcd", "--data-dir", data,
             "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"etcd=http://127.0.0.1:{peer}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        def healthy():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.etcd_port}/health",
                                            timeout=1) as response:
                    return json.load(response).get("health") == "true"
            except (OSError, ValueError):
                return False
        if not wait_for(healthy, 30, 0.1):
            raise RuntimeError("etcd did not start: see " + os.path.join(self.dir, "etcd.log"))
        return process

    def _wait_synchronous(self, node):
        def synchronous():
            try:
                rows = self.primary.psql("select sync_state from pg_stat_replication where "
                                         f"application_name = '{node.name}'")
                return bool(rows) and rows[0][0] == "sync"
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                return False
        if not wait_for(synchronous, 90, 0.2):
            raise RuntimeError(f"{node.name} did not become the synchronous standby")

    @property
    def primary(self):
        return next((n for n in self.nodes if n.process is not None and n.role() == "primary"),
                    self.nodes[0])

    @property
    def standby(self):
        primary = self.primary
        return next(n for n in self.nodes if n is not primary)

    def connection(self):
        return {"connectionString": self.url}

    def query(self, database, sql):
        return self.primary.psql(sql, database)

    def drop_database(self, database):
        self.query("postgres", f'drop database if exists "{database}" with (force)')

    @staticmethod
    def epoch_ms(column):
        return f"round(extract(epoch from {column}) * 1000)"

    def fail_over(self, mode="kill", lag_s=0.0, inspect=None):
        """Kills the leader's node and waits until Patroni has promoted the other and it takes
        writes. Returns (fault_ns, writable_ns)."""
        if mode != "kill" or lag_s or inspect is not None:
            raise ValueError("the Patroni cluster is killed, with synchronous replication only")
        old = self.primary
        new = self.standby
        fault_ns = mono_ns()
        old.kill()
        if not wait_for(lambda: new.in_recovery() is False, 90, 0.05):
            raise RuntimeError(f"Patroni did not promote {new.name}: see {new.log}")
        return fault_ns, mono_ns()

    def rejoin(self):
        """Brings the dead node back as the new leader's standby: Patroni rebuilds it from an
        empty data directory."""
        dead = next(n for n in self.nodes if n.process is None)
        shutil.rmtree(dead.data, ignore_errors=True)
        dead.start()
        self._wait_synchronous(dead)

    def stop(self):
        for node in self.nodes:
            node.stop()
            node.proxy.stop()
        if self.etcd is not None:
            self.etcd.terminate()
            try:
                self.etcd.wait(10)
            except subprocess.TimeoutExpired:
                self.etcd.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
