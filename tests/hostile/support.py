"""The hostile-input suite's machinery: one `stagehand serve` process on SQLite (its config, log,
readiness, REST calls and its entries in /proc), raw HTTP exchanges with a total deadline, and a
local HTTP server that answers HTTP tasks with a huge body or a gzip bomb.

Everything listens on 127.0.0.1 only. The daemon listens on port 0 and names its port in its ready
file (`serve --ready-file`), so nothing probes for a free port. Every process the suite starts is
remembered by pid and ended by pid. When the suite runs as root, the daemon runs as `nobody`
(`unprivileged_identity`), so that its tasks run as an ordinary user would."""

import errno
import http.client
import http.server
import json
import os
import pwd
import selectors
import shutil
import signal
import socket
import subprocess
import threading
import time
import zlib

O_CLOEXEC_FLAG = 0o2000000  # O_CLOEXEC as /proc/<pid>/fdinfo/<fd> shows it in `flags` (octal).


class Timeout(Exception):
    """An awaited event did not happen in time; the message names the event."""


def wait_for(predicate, timeout_s, what, interval_s=0.02):
    """Polls `predicate` until it returns a truthy value and returns it; raises Timeout naming
    `what` after `timeout_s`. Used to observe another process (its files, /proc, its REST API),
    never to order threads of this one."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise Timeout(f"waited {timeout_s:g} s for {what}")
        time.sleep(interval_s)


def percentile(values, fraction):
    """The nearest-rank percentile of `values` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(fraction * len(ordered) + 0.5)) - 1))
    return ordered[rank]


# --- /proc readers --------------------------------------------------------------------------------

def status_kib(pid, field):
    """A `kB` field of /proc/<pid>/status (VmRSS, VmHWM), in KiB; None when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak_rss(pid):
    """Resets VmHWM of `pid` to its current RSS (`echo 5 > /proc/<pid>/clear_refs`, Linux 4.0+);
    returns whether the kernel took it."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def fd_targets(pid):
    """{fd: readlink target} of every open descriptor of `pid` ({} when it is gone)."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return {}
    out = {}
    for name in names:
        try:
            out[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            pass  # closed between the listing and the readlink
    return out


def proc_refused(pid):
    """Why this process may not list /proc/<pid>/fd (the error text), or None when it may or
    `pid` is gone. A non-dumpable process's /proc files belong to root: only a process with
    CAP_SYS_PTRACE (root) reads them, not one of the same user."""
    try:
        os.listdir(f"/proc/{pid}/fd")
    except PermissionError as error:
        return error.strerror
    except OSError:
        return None
    return None


def fd_flags(pid):
    """{fd: open flags} of every descriptor of `pid`, from the octal `flags` of its fdinfo."""
    out = {}
    try:
        names = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return out
    for name in names:
        try:
            with open(f"/proc/{pid}/fdinfo/{name}") as f:
                for line in f:
                    if line.startswith("flags:"):
                        out[int(name)] = int(line.split()[1], 8)
                        break
        except OSError:
            pass
    return out


def peer_ports(pid):
    """The remote ports of the TCP connections `pid` holds open (its socket descriptors matched by
    inode against /proc/net/tcp and tcp6, which this process shares with it)."""
    inodes = {target[8:-1] for target in fd_targets(pid).values()
              if target.startswith("socket:[")}
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if len(fields) > 9 and fields[9] in inodes:
                        ports.add(int(fields[2].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return ports


def environ_of(pid):
    """The environment strings of `pid` (as it was exec'd), or None when unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return [item.decode(errors="replace") for item in f.read().split(b"\0") if item]
    except OSError:
        return None


def parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2:].split()[1])


def session_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2:].split()[3])


def thread_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None


def processes_holding(marker):
    """Pids (this process left out) whose command line holds the bytes `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker in f.read():
                    found.append(int(entry))
        except OSError:
            pass
    return found


def descendants(pid):
    """Every descendant pid of `pid`, from the parent pid in each /proc/<pid>/stat."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = parent_of(int(entry))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_pids(pids, sig=signal.SIGKILL):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


# --- raw HTTP -------------------------------------------------------------------------------------

class Exchange:
    """The outcome of one raw HTTP exchange: `status` (None when no status line came), the
    response `head`, how many request bytes were sent, `error` (how it ended, when not by a whole
    response) and `seconds` from connect to the end."""

    def __init__(self):
        self.status = None
        self.head = b""
        self.body = b""
        self.sent = 0
        self.error = None
        self.seconds = None

    def summary(self):
        return self.status if self.status is not None else (self.error or "no answer")


def _parse_head(buffer):
    """(status, head, content_length) once `buffer` holds a whole response head, else None."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buffer[:end]
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    status = int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            length = int(value.strip())
    return status, head, length, end + 4


def exchange(port, payload, timeout_s, source=None, read_body=True):
    """Connects to 127.0.0.1:`port` (from `source` when given), sends `payload` while reading, and
    stops at the end of the first response (its Content-Length, or the close), at a connection
    error, or after `timeout_s` in all. Sending stops when the response has come, so a server that
    refuses a request before reading all of it is seen refusing it."""
    result = Exchange()
    began = time.monotonic()
    deadline = began + timeout_s
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    selector = selectors.DefaultSelector()
    try:
        if source:
            sock.bind((source, 0))
        code = sock.connect_ex(("127.0.0.1", port))
        if code not in (0, errno.EINPROGRESS):
            result.error = f"connect: {os.strerror(code)}"
            return result
        selector.register(sock, selectors.EVENT_WRITE)
        if not selector.select(max(0.0, deadline - time.monotonic())):
            result.error = "connect timed out"
            return result
        code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            result.error = f"connect: {os.strerror(code)}"
            return result
        view = memoryview(payload)
        buffer = b""
        parsed = None
        sending = True
        selector.modify(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                result.error = "timed out"
                break
            events = selector.select(remaining)
            if not events:
                continue
            mask = events[0][1]
            if mask & selectors.EVENT_READ:
                try:
                    data = sock.recv(65536)
                except (ConnectionResetError, BrokenPipeError) as error:
                    result.error = f"reset ({error.__class__.__name__})"
                    break
                if not data:
                    if parsed is None:
                        result.error = "closed without a response"
                    break
                buffer += data
                if parsed is None:
                    parsed = _parse_head(buffer)
                    if parsed is not None:
                        result.status, result.head = parsed[0], parsed[1]
                        if sending:
                            sending = False
                            selector.modify(sock, selectors.EVENT_READ)
                if parsed is not None:
                    body = buffer[parsed[3]:]
                    if not read_body or (parsed[2] is not None and len(body) >= parsed[2]):
                        result.body = body
                        break
            if sending and mask & selectors.EVENT_WRITE:
                try:
                    result.sent += sock.send(view[result.sent:result.sent + 65536])
                except BlockingIOError:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    sending = False  # the server stopped reading; its answer may still come
                    selector.modify(sock, selectors.EVENT_READ)
                    continue
                if result.sent >= len(payload):
                    sending = False
                    selector.modify(sock, selectors.EVENT_READ)
        if parsed is not None:
            result.body = result.body or buffer[parsed[3]:]
        return result
    except OSError as error:
        result.error = f"{error.__class__.__name__}: {error}"
        return result
    finally:
        result.seconds = time.monotonic() - began
        selector.close()
        sock.close()


def request_bytes(method, path, headers=(), close=True):
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in headers]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# --- the daemon's user ----------------------------------------------------------------------------

class Identity:
    """An unprivileged user to run the daemon as: `name`, `uid`, `gid`."""

    def __init__(self, name, uid, gid):
        self.name, self.uid, self.gid = name, uid, gid

    def setpriv_args(self):
        """setpriv's options that become this user, with no supplementary group and no
        capability (none permitted, effective, inheritable or ambient after the exec)."""
        return [f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--inh-caps=-all"]

    def can_run(self, path):
        """Whether this user may execute `path` (every directory on the way searchable)."""
        setpriv = shutil.which("setpriv")
        return setpriv is not None and subprocess.run(
            [setpriv] + self.setpriv_args() + ["--", "test", "-x", path],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=10).returncode == 0

    def own(self, *paths):
        for path in paths:
            os.chown(path, self.uid, self.gid, follow_symlinks=False)


def unprivileged_identity():
    """`nobody` (with its own primary group, `nogroup` on Debian) when this process runs as root,
    else None: the daemon then runs as the user running the suite. Root reads every process's
    /proc files (CAP_SYS_PTRACE), so a task running as root would prove nothing about what a task
    running as the daemon's user can read."""
    if os.geteuid() != 0:
        return None
    entry = pwd.getpwnam("nobody")
    return Identity("nobody", entry.pw_uid, entry.pw_gid)


def proc_uid(pid):
    """The real uid of `pid` (/proc/<pid>/status), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


# --- the daemon -----------------------------------------------------------------------------------

class Daemon:
    """One `stagehand serve` process with a JSON config (JSON is YAML), started in `workdir` with
    `env`, as `identity` when one is given (see `unprivileged_identity`). It reads its config from
    `workdir/config.yaml` and writes its ready file beside it, so that both are reachable by its
    user whoever runs the suite; a copy of the config and its log (JSON records) go to
    `<log_dir>/config.yaml` and `<log_dir>/daemon.log`. Not thread-safe, except `request`."""

    def __init__(self, binary, workdir, log_dir, config, env, identity=None):
        self.binary = binary
        self.workdir = workdir
        self.identity = identity
        self.config_path = os.path.join(workdir, "config.yaml")
        self.ready_path = os.path.join(workdir, "daemon.ready")
        self.log_path = os.path.join(log_dir, "daemon.log")
        self.env = env
        self.process = None
        self.port = None
        self.token = env.get("STAGEHAND_TOKEN")
        for path in (self.config_path, os.path.join(log_dir, "config.yaml")):
            with open(path, "w") as f:
                json.dump(config, f, indent=1)

    @property
    def pid(self):
        return self.process.pid

    def start(self):
        try:
            os.unlink(self.ready_path)
        except FileNotFoundError:
            pass
        # Dies with this process even when it is SIGKILLed (a CTest timeout): setpriv sets the
        # parent-death signal, which survives its exec of stagehand (same pid). It sets it after
        # changing the user, which would clear it.
        setpriv = shutil.which("setpriv")
        if self.identity is not None and setpriv is None:
            raise RuntimeError("setpriv (util-linux) is needed to start the daemon as "
                               f"{self.identity.name}")
        wrapper = []
        if setpriv:
            identity = self.identity.setpriv_args() if self.identity else []
            wrapper = [setpriv] + identity + ["--pdeathsig", "KILL", "--"]
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                wrapper + [self.binary, "serve", "--config", self.config_path, "--ready-file",
                           self.ready_path, "--log-format", "json"],
                cwd=self.workdir, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, timeout_s=30):
        """Waits for the ready file (written once the daemon listens and its plugins started),
        takes the port from it and waits for readiness 200."""
        def ready():
            if not self.alive():
                raise RuntimeError(f"stagehand serve exited with {self.process.returncode} during "
                                   f"startup; log {self.log_path}:\n{self.log_tail()}")
            try:
                with open(self.ready_path) as f:
                    announced = json.load(f)
            except (FileNotFoundError, json.JSONDecodeError):
                return False
            self.port = int(announced["port"])
            status, _ = self.request("GET", "/.backstage/health/v1/readiness", timeout=2)
            return status == 200
        wait_for(ready, timeout_s, "stagehand serve to write its ready file and answer readiness "
                 "200")

    def log_tail(self, lines=30):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def records(self):
        """The daemon's JSON log records so far."""
        out = []
        try:
            with open(self.log_path, errors="replace") as f:
                for line in f:
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(record, dict):
                        out.append(record)
        except OSError:
            pass
        return out

    def request(self, method, path, body=None, timeout=5, auth=False):
        """One HTTP request on a fresh connection: (status, body), or (None, error text)."""
        headers = {"Authorization": f"Bearer {self.token}"} if auth else {}
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as error:
            return None, str(error)
        finally:
            connection.close()

    def api(self, plugin, path=""):
        return f"/api/{plugin}/.backstage/scheduler/v1/tasks{path}"

    def task(self, plugin, task_id):
        """The REST listing entry of `task_id` (None when the listing fails)."""
        status, body = self.request("GET", self.api(plugin), auth=True)
        if status != 200:
            return None
        for task in json.loads(body)["tasks"]:
            if task["taskId"] == task_id:
                return task
        return None

    def trigger(self, plugin, task_id, timeout=60):
        status, body = self.request("POST", self.api(plugin, f"/{task_id}/trigger"),
                                    timeout=timeout, auth=True)
        if status != 200:
            raise RuntimeError(f"trigger of {task_id} answered {status}: {body[:300]!r}")

    def wait_run_ended(self, plugin, task_id, ended_before, timeout_s):
        """Waits until REST shows `task_id` idle with a lastRunEndedAt other than `ended_before`;
        returns its taskState."""
        def ended():
            state = (self.task(plugin, task_id) or {}).get("taskState") or {}
            if state.get("status") == "idle" and state.get("lastRunEndedAt") not in (
                    None, ended_before):
                return state
            return None
        return wait_for(ended, timeout_s, f"the run of task {task_id} to end (REST taskState "
                        f"idle with a new lastRunEndedAt)", 0.05)

    def metrics_lines(self):
        status, body = self.request("GET", "/metrics")
        if status != 200:
            raise RuntimeError(f"GET /metrics answered {status}: {body!r}")
        return body.decode(errors="replace").splitlines()

    def stop(self, timeout_s=20):
        """SIGTERM, then SIGKILL of the daemon and every descendant if it has not exited within
        `timeout_s`. Returns its exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            try:
                os.kill(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                kill_pids([self.process.pid] + descendants(self.process.pid))
                self.process.wait(10)
        return self.process.returncode


# --- the body server for HTTP tasks ---------------------------------------------------------------

def build_gzip_bomb(inflated_bytes, chunk=1 << 20):
    """`inflated_bytes` of zeros, gzip-compressed chunk by chunk (never held inflated)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(chunk)
    parts = [compressor.compress(zeros) for _ in range(inflated_bytes // chunk)]
    parts.append(compressor.flush())
    return b"".join(parts)


class BodyServer:
    """A local HTTP server for HTTP tasks: `GET /big` answers 200 with a `big_bytes` body streamed
    in 64 KiB chunks (never held in memory), `GET /bomb` answers 200 with `bomb` and
    `Content-Encoding: gzip`. `sent[path]` counts the body bytes each path got out before its
    client stopped reading. Runs on its own threads until `stop`."""

    def __init__(self, big_bytes, bomb):
        self.big_bytes = big_bytes
        self.bomb = bomb
        self.sent = {"/big": 0, "/bomb": 0}
        self.lock = threading.Lock()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == "/big":
                    self._send(owner.big_bytes, {}, None)
                elif self.path == "/bomb":
                    self._send(len(owner.bomb), {"Content-Encoding": "gzip"}, owner.bomb)
                else:
                    self.send_error(404)

            def _send(self, length, headers, payload):
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(length))
                self.send_header("Connection", "close")
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                chunk = bytes(65536)
                offset = 0
                try:
                    while offset < length:
                        size = min(65536, length - offset)
                        piece = payload[offset:offset + size] if payload is not None else (
                            chunk if size == 65536 else chunk[:size])
                        self.wfile.write(piece)
                        offset += size
                        with owner.lock:
                            owner.sent[self.path] += size
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading: that is what is measured
                self.close_connection = True

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="body-server")
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)
