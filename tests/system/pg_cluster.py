"""A primary and a streaming standby of PostgreSQL for the failover scenarios, started by the suite
itself: `initdb` for the first node, `pg_basebackup -R` for the second, each node behind a TCP
proxy of its own (harness.Proxy) on 127.0.0.1, so that a node can be partitioned from everyone,
its standby included. Clients reach the pair through a multi-host URL
(`postgresql://...@127.0.0.1:<proxy a>,127.0.0.1:<proxy b>/postgres?target_session_attrs=read-write`),
as they would a Patroni cluster without a virtual IP.

Replication is synchronous (`synchronous_commit = on` with the other node named in
`synchronous_standby_names`, so a commit returns once the standby has flushed it) or asynchronous.
A failover kills (SIGKILL) or partitions the primary and promotes the standby, as Patroni does with
`synchronous_mode: true` (the new primary commits alone until a standby joins it); `rejoin` then
rebuilds the old primary as the new primary's standby, with a fresh `pg_basebackup`."""

import os
import shutil
import signal
import subprocess
import tempfile
import time

from harness import Proxy, children_of, wait_for

PG_BIN = "/usr/lib/postgresql/15/bin"
PASSWORD = "stagehand"


def _as_owner(argv):
    """`argv` run as the user that owns the data directories (postgres when we are root)."""
    return ["runuser", "-u", "postgres", "--"] + argv if os.geteuid() == 0 else argv


def _free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def kill_tree(pid):
    """SIGKILLs `pid` and every descendant of it, and waits (up to 10 s) until they are gone."""
    victims = [pid] + children_of(pid)
    for victim in victims:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_for(lambda: not any(os.path.exists(f"/proc/{v}") for v in victims), 10)


class Node:
    """One PostgreSQL server of the pair: its data directory, its own port and its proxy."""

    def __init__(self, cluster, name):
        self.cluster = cluster
        self.name = name
        self.data = os.path.join(cluster.dir, name)
        self.log = os.path.join(cluster.dir, f"{name}.log")
        self.port = _free_port()
        self.proxy = Proxy(self.port)

    def conf(self, synchronous_partner):
        """The node's settings; `synchronous_partner` is the other node's name when replication is
        synchronous and that node is its standby, else ''."""
        sock = os.path.join(self.cluster.dir, "sockets")
        return "\n".join([
            "listen_addresses = '127.0.0.1'",
            f"port = {self.port}",
            f"unix_socket_directories = '{sock}'",
            f"cluster_name = '{self.name}'",
            "max_connections = 200",
            "wal_level = replica",
            "max_wal_senders = 10",
            "wal_keep_size = '256MB'",
            "hot_standby = on",
            "wal_receiver_status_interval = '1s'",
            "wal_sender_timeout = '5s'",
            "wal_receiver_timeout = '5s'",
            "synchronous_commit = on",
            f"synchronous_standby_names = '{synchronous_partner}'",
            "fsync = off",
            "full_page_writes = off",
            "log_min_messages = warning",
            "log_line_prefix = '%m [%p] '",
            "",
        ])

    def write_conf(self, synchronous_partner):
        path = os.path.join(self.data, "postgresql.auto.conf")
        keep = []
        if os.path.exists(path):
            with open(path) as f:
                # pg_basebackup -R writes primary_conninfo here: keep it.
                keep = [line for line in f if line.startswith("primary_conninfo")]
        with open(path, "w") as f:
            f.write(self.conf(synchronous_partner) + "".join(keep))
        if os.geteuid() == 0:
            shutil.chown(path, "postgres", "postgres")

    def start(self):
        subprocess.run(_as_owner([os.path.join(PG_BIN, "pg_ctl"), "-D", self.data, "-l", self.log,
                                  "-w", "-t", "60", "start"]), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.readline().strip())
        except (OSError, ValueError):
            return None

    def kill(self):
        """SIGKILL of the postmaster and every backend: a crashed machine."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        kill_tree(pid)

    def stop(self):
        if self.postmaster_pid() is None:
            return
        subprocess.run(_as_owner([os.path.join(PG_BIN, "pg_ctl"), "-D", self.data, "-m",
                                  "immediate", "-w", "-t", "30", "stop"]),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def psql(self, sql, database="postgres", timeout=10):
        """Runs `sql` on this node directly (not through its proxy); returns the rows."""
        env = dict(os.environ, PGPASSWORD=PASSWORD, PGCONNECT_TIMEOUT="3")
        out = subprocess.run([os.path.join(PG_BIN, "psql"), "-X", "-A", "-t", "-q", "-F", "\t",
                              "-h", "127.0.0.1", "-p", str(self.port), "-U", "stagehand",
                              "-d", database, "-c", sql], check=True, capture_output=True,
                             text=True, env=env, timeout=timeout).stdout
        return [line.split("\t") for line in out.splitlines() if line]

    def in_recovery(self):
        try:
            return self.psql("select pg_is_in_recovery()")[0][0] == "t"
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            return None


class PgCluster:
    """The pair. `synchronous` chooses the replication; `primary` and `standby` are Nodes whose roles
    swap at each failover. `url` is the multi-host URL through both proxies. In the role of
    harness.Postgres for a Fleet (`Fleet(db=cluster)`): its hosts connect through `url`. Call stop()
    at the end (it removes the directories)."""

    name = "PostgreSQL (primary + streaming standby)"
    client = "pg"
    min_cadence_ms = 1

    def __init__(self, synchronous=True):
        self.synchronous = synchronous
        self.dir = tempfile.mkdtemp(prefix="stagehand-pg-ha.")
        os.makedirs(os.path.join(self.dir, "sockets"))
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            shutil.chown(os.path.join(self.dir, "sockets"), "postgres", "postgres")
        self.primary = Node(self, "node_a")
        self.standby = Node(self, "node_b")
        self._init_primary()
        self._build_standby()
        hosts = ",".join(f"127.0.0.1:{n.proxy.port}" for n in (self.primary, self.standby))
        self.url = (f"postgresql://stagehand:{PASSWORD}@{hosts}/postgres"
                    "?target_session_attrs=read-write")

    def connection(self):
        """backend.database.connection for the fleet's hosts."""
        return {"connectionString": self.url}

    def query(self, database, sql):
        """Runs `sql` on the current primary; returns the rows as lists of strings."""
        return self.primary.psql(sql, database)

    def drop_database(self, database):
        self.query("postgres", f'drop database if exists "{database}" with (force)')

    @staticmethod
    def epoch_ms(column):
        return f"round(extract(epoch from {column}) * 1000)"

    def partner_setting(self, node):
        other = self.standby if node is self.primary else self.primary
        return other.name if self.synchronous else ""

    def _init_primary(self):
        node = self.primary
        pwfile = os.path.join(self.dir, "pwfile")
        with open(pwfile, "w") as f:
            f.write(PASSWORD + "\n")
        if os.geteuid() == 0:
            shutil.chown(pwfile, "postgres", "postgres")
        subprocess.run(_as_owner([os.path.join(PG_BIN, "initdb"), "-D", node.data, "-U",
                                  "stagehand", f"--pwfile={pwfile}", "--auth-local=trust",
                                  "--auth-host=scram-sha-256", "-E", "UTF8",
                                  "--locale=C.UTF-8"]),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # The primary waits for no standby until one has been built.
        node.write_conf("")
        node.start()

    def _build_standby(self):
        """Builds the standby from the primary with pg_basebackup -R, through the primary's proxy
        (so that partitioning the primary cuts its replication too), and starts it; then the
        primary waits for it when replication is synchronous."""
        node = self.standby
        if os.path.exists(node.data):
            shutil.rmtree(node.data)
        env = dict(os.environ, PGPASSWORD=PASSWORD)
        subprocess.run(_as_owner(["env", f"PGPASSWORD={PASSWORD}",
                                  os.path.join(PG_BIN, "pg_basebackup"), "-h", "127.0.0.1", "-p",
                                  str(self.primary.proxy.port), "-U", "stagehand", "-D",
                                  node.data, "-R", "-X", "stream", "-c", "fast"]),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        node.write_conf(self.partner_setting(node))
        node.start()
        if not wait_for(lambda: self._streaming(node), 30, 0.1):
            raise RuntimeError(f"{node.name} does not stream from {self.primary.name}")
        self.primary.write_conf(self.partner_setting(self.primary))
        self.primary.psql("select pg_reload_conf()")
        if self.synchronous and not wait_for(lambda: self._sync_state(node) == "sync", 30, 0.1):
            raise RuntimeError(f"{node.name} did not become a synchronous standby")

    def _streaming(self, node):
        try:
            rows = self.primary.psql("select count(*) from pg_stat_replication where "
                                     f"application_name = '{node.name}' and state = 'streaming'")
            return rows[0][0] == "1"
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            return False

    def _sync_state(self, node):
        try:
            rows = self.primary.psql("select sync_state from pg_stat_replication where "
                                     f"application_name = '{node.name}'")
            return rows[0][0] if rows else None
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            return None

    def wait_caught_up(self, timeout_s=10):
        """Waits until the standby has replayed everything the primary has written."""
        def caught_up():
            try:
                lsn = self.primary.psql("select pg_current_wal_lsn()")[0][0]
                rows = self.standby.psql(f"select pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn")
                return rows[0][0] == "t"
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                return False
        return wait_for(caught_up, timeout_s, 0.05)

    def fail_over(self, mode="kill", lag_s=0.0, inspect=None):
        """Kills (`kill`: SIGKILL) or partitions (`partition`: its proxy stops moving bytes) the
        primary, then promotes the standby and lets it commit alone. With `lag_s` (asynchronous
        replication only), the standby stops streaming that long before the fault, so it lacks
        the commits of those seconds. With `inspect`, the promoted node is called with first,
        while its proxy still refuses every client, and its result is kept in
        `self.inspected`. Returns (fault_ns, writable_ns): when the primary went,
        and when the new one accepted writes."""
        from harness import mono_ns
        old, new = self.primary, self.standby
        if lag_s > 0:
            assert not self.synchronous, "a synchronous standby cannot lag behind commits"
            new.psql("alter system set primary_conninfo = 'host=127.0.0.1 port=1'")
            new.psql("select pg_reload_conf()")
            wait_for(lambda: not new.psql("select 1 from pg_stat_wal_receiver"), 10, 0.02)
            time.sleep(lag_s)
        fault_ns = mono_ns()
        if mode == "kill":
            old.kill()
        else:
            old.proxy.set_mode("blackhole")
        if inspect is not None:
            new.proxy.set_mode("reset")
        # As Patroni with synchronous_mode (not strict): the promoted node waits for no standby.
        new.write_conf("")
        subprocess.run(_as_owner([os.path.join(PG_BIN, "pg_ctl"), "-D", new.data, "-w", "-t",
                                  "60", "promote"]), check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        new.psql("select pg_reload_conf()")
        wait_for(lambda: new.in_recovery() is False, 30, 0.02)
        if inspect is not None:
            self.inspected = inspect(new)
            new.proxy.set_mode("up")
        writable_ns = mono_ns()
        self.primary, self.standby = new, old
        return fault_ns, writable_ns

    def rejoin(self):
        """Rebuilds the old primary as the new primary's standby (a partitioned one is stopped
        first and its proxy healed)."""
        self.standby.stop()
        self.standby.proxy.set_mode("up")
        self._build_standby()

    def stop(self):
        for node in (self.primary, self.standby):
            node.stop()
            node.proxy.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
