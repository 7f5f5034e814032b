#!/usr/bin/env python3
"""Runs the commands shown in README.md and docs/*.md, so that the docs cannot rot.

Convention (what a doc writer needs to know):

  ```sh        A shell block. It is run with bash (`set -euo pipefail`) and must exit 0. Its output
               is not compared. Blocks of one file share their shell variables, exports and working
               directory, in order, as if typed into one terminal.
  ```console   A transcript. Each line starting with `$ ` is a command (a line ending in `\\`
               continues it); the lines after it, up to the next `$ `, are its expected output
               (stdout and stderr together). The command is run and its output must have the same
               shape (see below). Its exit code is not checked: show it with `; echo "exit $?"`.
  other        ```yaml, ```text, ```json, ```cpp, ... are never run.

  Markers: an HTML comment line `<!-- doc-test: ... -->` (invisible when rendered) changes what
  happens to the next block, or acts where it stands:

    skip (reason)              the next block is not run; the reason is required (use it sparingly:
                               package installs, systemctl, commands that take minutes).
    background port=N          the next sh block runs in the background (a server); the test waits
                               until GET /.backstage/health/v1/readiness on port N answers 200.
    background port=N: CMD     the same for CMD, which is not shown (for prose such as "in another
                               terminal, run CMD" where CMD is quoted inline).
    stop port=N                sends SIGTERM to the background command on port N (`stop` alone:
                               all of them); it must exit 0 within 20 s. Whatever is still running
                               at the end of a file is stopped the same way.
    retry Ns                   the next block is run again until it passes, for at most N seconds
                               (for output that appears once a task has run).
    expect-log port=N          the next block (```text) holds log lines that must each appear in
                               the log of the background command on port N within 15 s, compared
                               by shape; a line ending in `...` need only match its beginning.
    postgres db=NAME[,NAME]    the rest of the file needs PostgreSQL: it is skipped when
                               STAGEHAND_TEST_POSTGRES_URL is unset (a failure when CI is set).
                               The listed databases are dropped before and after.

  Shape: timestamps, dates and times of day compare equal to any others, so do decimal numbers
  (`0.386`), relative times (`in 4s`, `1h2m ago`, `now`), durations (`2.004s`, `12ms`, `1m30s`),
  run ids (UUIDs) and runs of blanks; a date before a time may be absent; the machine's host name
  in the output reads as `web-1` (the host the docs show); other text, integers included (status
  codes, exit codes, counts), must be equal.
  A line `...` matches any number of lines. Output that is JSON (the whole output, or a line) is
  compared as JSON: the same keys, array lengths and value types, integers equal, strings equal
  up to the rules above.

The sandbox: each file runs in a fresh temporary directory laid out like a checkout: a copy of
examples/*.yaml, packaging/, scripts/run (without its bootstrap and build steps) and
build/release/apps/stagehand/stagehand (the binary under test), which is also on PATH. The ports
7007 and 7008 are replaced by free ports everywhere (commands, markers, expected output, the example
files; the client verbs' default address too), and
postgresql://stagehand:s3cret@127.0.0.1:5432/postgres by the test server's URL.
STAGEHAND_TOKEN and DATABASE_URL start unset.

Files: README.md and docs/*.md, except those named in NOT_RUN_HERE (whose commands another test
runs). Usage: doc_test.py --binary PATH --source DIR [--work DIR] [FILE...]
"""

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

NOT_RUN_HERE = {
    "embedding.md": "built and run by the embed_example test (tests/embed), which checks its snippets",
    "reliability.md": "its commands run the system suite itself (the system_reliability test)",
}
DOC_PORTS = ("7007", "7008")
DOC_HOST = "web-1"
DOC_POSTGRES_URL = "postgresql://stagehand:s3cret@127.0.0.1:5432/postgres"
MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 20.0
LOG_TIMEOUT = 15.0
COMMAND_TIMEOUT = 60.0


class DocError(Exception):
    """A failed check, with what the reader of the test log needs to fix it."""


class Block:
    def __init__(self, path, line, lang, text, markers):
        self.path = path
        self.line = line
        self.lang = lang
        self.text = text
        self.markers = markers

    def where(self):
        return f"{self.path}:{self.line}"


def parse_markdown(path, rel):
    """Returns the items of a file in order: ("block", Block) and ("marker", text, line)."""
    items = []
    pending = []
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = MARKER.match(line)
        if marker:
            text = marker.group(1)
            if text.startswith("background") and ":" in text:
                items.append(("marker", text, i + 1))
            elif text.startswith(("stop", "postgres")):
                items.append(("marker", text, i + 1))
            else:
                pending.append(text)
            i += 1
            continue
        fence = FENCE.match(line)
        if fence and fence.group(2) != "":
            indent, lang = fence.group(1), fence.group(2)
            body = []
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
                j += 1
            if j == len(lines):
                raise DocError(f"{rel}:{i + 1}: unclosed ``` block")
            items.append(("block", Block(rel, i + 1, lang, "\n".join(body), pending)))
            pending = []
            i = j + 1
            continue
        if fence:  # a bare ``` block: skip over it whole
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            if pending:
                raise DocError(f"{rel}:{i + 1}: a doc-test marker before a block with no language")
            i = j + 1
            continue
        i += 1
    if pending:
        raise DocError(f"{rel}: doc-test marker(s) {pending} with no block after them")
    return items


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


# ---- shape comparison -------------------------------------------------------------------------

RELATIVE_TIME = re.compile(r"\b(?:in (?:\d+[dhms])+|(?:\d+[dhms])+ ago|now)\b")
DATE_BEFORE_TIME = re.compile(r"\b\d{4}-\d\d-\d\d (?=\d\d:\d\d)")
TIMESTAMP = re.compile(r"\b\d{4}-\d\d-\d\d(?:T\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:\d\d)?)?"
                       r"|\b\d\d:\d\d(?::\d\d(?:\.\d+)?)?\b")
DECIMAL = re.compile(r"\b\d+\.\d+(?:e[+-]?\d+)?\b")
DURATION = re.compile(r"\b(?:\d+(?:\.\d+)?(?:ms|[dhms]))+\b")
UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def normalize(text):
    text = RELATIVE_TIME.sub("<when>", DATE_BEFORE_TIME.sub("", UUID.sub("<uuid>", text)))
    text = DURATION.sub("<span>", TIMESTAMP.sub("<time>", text))
    text = DECIMAL.sub("<num>", text)
    return re.sub(r"\s+", " ", text).strip()


def as_doc_host(text):
    """Returns `text` with this machine's host name written as the docs' DOC_HOST."""
    host = socket.gethostname()
    return re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", DOC_HOST, text) if host else text


def json_shape_diff(expected, actual, where="$"):
    """Returns None when `actual` has the shape of `expected`, else what differs."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{where}: expected an object, got {json.dumps(actual)[:80]}"
        if set(expected) != set(actual):
            return f"{where}: keys {sorted(actual)} instead of {sorted(expected)}"
        for key in expected:
            diff = json_shape_diff(expected[key], actual[key], f"{where}.{key}")
            if diff:
                return diff
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return f"{where}: expected an array of {len(expected)}, got {json.dumps(actual)[:80]}"
        for n, (e, a) in enumerate(zip(expected, actual)):
            diff = json_shape_diff(e, a, f"{where}[{n}]")
            if diff:
                return diff
        return None
    if isinstance(expected, bool) or expected is None:
        return None if expected == actual else f"{where}: {actual!r} instead of {expected!r}"
    if isinstance(expected, (int, float)):
        ok = isinstance(actual, (int, float)) and not isinstance(actual, bool)
        if isinstance(expected, int) and isinstance(actual, int):
            ok = expected == actual
        return None if ok else f"{where}: {actual!r} instead of {expected!r}"
    if isinstance(expected, str):
        if isinstance(actual, str) and normalize(actual) == normalize(expected):
            return None
        return f"{where}: {actual!r} instead of {expected!r}"
    return None


def parse_json(text):
    text = text.strip()
    if not text or text[0] not in "[{":
        return None, False
    try:
        return json.loads(text), True
    except ValueError:
        return None, False


def line_matches(expected, actual):
    e_json, e_is = parse_json(expected)
    if e_is:
        a_json, a_is = parse_json(actual)
        return a_is and json_shape_diff(e_json, a_json) is None
    if expected.rstrip().endswith("...") and expected.strip() != "...":
        return normalize(actual).startswith(normalize(expected.rstrip()[:-3]))
    return normalize(expected) == normalize(actual)


def lines_match(expected, actual):
    if not expected:
        return not actual
    if expected[0].strip() == "...":
        return any(lines_match(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and line_matches(expected[0], actual[0]) and lines_match(expected[1:], actual[1:])


def shape_diff(expected, actual):
    """Returns None when `actual` output has the shape of `expected`, else an explanation."""
    e_lines = [l.rstrip() for l in expected.rstrip().split("\n")] if expected.strip() else []
    a_lines = [l.rstrip() for l in actual.rstrip().split("\n")] if actual.strip() else []
    e_json, e_is = parse_json(expected)
    if e_is and len(e_lines) > 1:
        a_json, a_is = parse_json(actual)
        if not a_is:
            return "expected JSON output"
        return json_shape_diff(e_json, a_json)
    if lines_match(e_lines, a_lines):
        return None
    return "the output differs in shape"


# ---- running ----------------------------------------------------------------------------------

class Runner:
    def __init__(self, args, rel):
        self.args = args
        self.rel = rel
        self.sandbox = tempfile.mkdtemp(prefix="doc-" + re.sub(r"\W", "_", rel) + "-", dir=args.work)
        self.ports = {p: free_port() for p in DOC_PORTS}
        self.pg_url = os.environ.get("STAGEHAND_TEST_POSTGRES_URL", "")
        self.state = os.path.join(self.sandbox, ".doc-test-state")
        self.background = {}  # doc port -> (Popen, log path)
        self.pg_databases = []
        self.counts = {"passed": 0, "failed": 0, "skipped": 0}
        self.failures = []
        self.skip_rest = None
        self.make_sandbox()

    def subst(self, text):
        for doc_port, port in self.ports.items():
            text = re.sub(rf"(?<!\d){doc_port}(?!\d)", port, text)
        if self.pg_url:
            text = text.replace(DOC_POSTGRES_URL, self.pg_url)
        return text

    def make_sandbox(self):
        source = self.args.source
        os.makedirs(os.path.join(self.sandbox, "examples"))
        for name in os.listdir(os.path.join(source, "examples")):
            if name.endswith(".yaml"):
                text = open(os.path.join(source, "examples", name), encoding="utf-8").read()
                with open(os.path.join(self.sandbox, "examples", name), "w", encoding="utf-8") as f:
                    f.write(self.subst(text))
        if os.path.isdir(os.path.join(source, "packaging")):
            shutil.copytree(os.path.join(source, "packaging"), os.path.join(self.sandbox, "packaging"))
        os.makedirs(os.path.join(self.sandbox, "scripts"))
        run = open(os.path.join(source, "scripts", "run"), encoding="utf-8").read()
        for step in ("scripts/bootstrap\n", "cmake --preset release >/dev/null\n",
                     'cmake --build --preset release -j "${jobs}" --target stagehand\n'):
            if step not in run:
                raise DocError(f"scripts/run no longer has the line {step.strip()!r}: update "
                               "the doc test's copy of it (make_sandbox)")
            run = run.replace(step, "")
        with open(os.path.join(self.sandbox, "scripts", "run"), "w", encoding="utf-8") as f:
            f.write(run)
        os.chmod(os.path.join(self.sandbox, "scripts", "run"), 0o755)
        bindir = os.path.join(self.sandbox, "build", "release", "apps", "stagehand")
        os.makedirs(bindir)
        os.symlink(os.path.abspath(self.args.binary), os.path.join(bindir, "stagehand"))
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("STAGEHAND_TOKEN", "DATABASE_URL", "CDPATH", "BASH_ENV", "ENV")}
        self.env["PATH"] = bindir + os.pathsep + self.env.get("PATH", "/usr/bin:/bin")
        # The client verbs' default address, 127.0.0.1:7007, is the first substituted port here.
        self.env["STAGEHAND_URL"] = f"http://127.0.0.1:{self.ports['7007']}"
        self.env["HOME"] = self.env.get("HOME", self.sandbox)
        baseline = subprocess.run(["bash", "-c", "compgen -v"], env=self.env, cwd=self.sandbox,
                                  capture_output=True, text=True, check=True).stdout.split()
        self.baseline = set(baseline) - {"PATH"}
        with open(self.state, "w", encoding="utf-8") as f:
            f.write(f"cd {shlex.quote(self.sandbox)}\n")

    def script(self, body, save_state=True, strict=True):
        """A bash script that restores the shell state, runs `body` and saves the state again."""
        keep = " ".join(sorted(self.baseline))
        parts = [f"source {shlex.quote(self.state)}"]
        if save_state:
            parts.append(
                "__doc_save() { local __s=$?; {\n"
                "  for __v in $(compgen -v); do\n"
                f"    case \" {keep} \" in *\" $__v \"*) continue;; esac\n"
                "    case $__v in __*) continue;; esac\n"
                "    declare -p \"$__v\" 2>/dev/null | grep -v '^declare -[a-zA-Z]*r' || true\n"
                "  done\n"
                "  printf 'cd %q\\n' \"$PWD\"\n"
                f"}} > {shlex.quote(self.state)}.new && mv {shlex.quote(self.state)}.new "
                f"{shlex.quote(self.state)}; return $__s; }}\n"
                "trap __doc_save EXIT")
        parts.append("set -euo pipefail" if strict else "set -uo pipefail")
        parts.append(body)
        return "\n".join(parts) + "\n"

    def run_script(self, text, strict=True):
        proc = subprocess.run(["bash", "-c", self.script(text, strict=strict)], env=self.env,
                              cwd=self.sandbox, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, text=True, timeout=COMMAND_TIMEOUT,
                              errors="replace")
        return proc.returncode, proc.stdout

    # -- blocks ---------------------------------------------------------------------------------

    def run_sh(self, block):
        code, out = self.run_script(self.subst(block.text))
        if code != 0:
            raise DocError(f"exit code {code}\n--- commands\n{self.subst(block.text)}\n--- output\n{out}")

    def console_commands(self, block):
        commands = []
        lines = block.text.split("\n")
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                if lines[i].strip():
                    raise DocError(f"console block: output before the first '$ ' command: {lines[i]!r}")
                i += 1
                continue
            command = lines[i][2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command += "\n" + lines[i]
            i += 1
            output = []
            while i < len(lines) and not lines[i].startswith("$ "):
                output.append(lines[i])
                i += 1
            commands.append((command, "\n".join(output)))
        return commands

    def run_console(self, block):
        for command, expected in self.console_commands(block):
            command, expected = self.subst(command), self.subst(expected)
            _, out = self.run_script("{\n" + command + "\n} 2>&1", strict=False)
            out = as_doc_host(out)
            diff = shape_diff(expected, out)
            if diff:
                raise DocError(f"{diff}\n--- command\n$ {command}\n--- expected\n{expected}\n"
                               f"--- got\n{out}")

    def run_block(self, block):
        if block.lang == "sh":
            self.run_sh(block)
        elif block.lang == "console":
            self.run_console(block)

    # -- background commands --------------------------------------------------------------------

    def start_background(self, doc_port, text, where):
        if doc_port in self.background:
            raise DocError(f"{where}: a background command already runs on port {doc_port}")
        log = os.path.join(self.sandbox, f".doc-test-{doc_port}.log")
        handle = open(log, "w", encoding="utf-8")
        proc = subprocess.Popen(["bash", "-c", self.script(self.subst(text), save_state=False)],
                                env=self.env, cwd=self.sandbox, stdout=handle,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        handle.close()
        self.background[doc_port] = (proc, log)
        url = f"http://127.0.0.1:{self.ports[doc_port]}/.backstage/health/v1/readiness"
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                del self.background[doc_port]
                raise DocError(f"{where}: the background command exited with {proc.returncode}"
                               f" before it was ready\n--- log\n{open(log).read()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise DocError(f"{where}: not ready on {url} after {READY_TIMEOUT:.0f} s\n--- log\n"
                       f"{open(log).read()}")

    @staticmethod
    def children_of(parent):
        children = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if int(fields[1]) == parent:
                children.append(int(entry))
        return children

    def stop_background(self, doc_port, where):
        proc, log = self.background.pop(doc_port)
        if proc.poll() is not None:
            raise DocError(f"{where}: the background command on port {doc_port} had already "
                           f"exited with {proc.returncode}\n--- log\n{open(log).read()}")
        # SIGTERM to what bash runs (the daemon), not to bash itself, so that bash exits with the
        # daemon's exit code. Bash runs the script's last command in its own process (exec), and
        # then that process is the daemon; a daemon's own children (the shims of its command
        # runs) are never signalled, as a supervisor signals only the daemon.
        try:
            shell = os.path.basename(os.readlink(f"/proc/{proc.pid}/exe")) == "bash"
        except OSError:
            shell = False
        targets = self.children_of(proc.pid) if shell else [proc.pid]
        for pid in targets or [proc.pid]:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            code = proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise DocError(f"{where}: port {doc_port}: no exit {STOP_TIMEOUT:.0f} s after SIGTERM"
                           f"\n--- log\n{open(log).read()}")
        if code != 0:
            raise DocError(f"{where}: port {doc_port}: exit code {code} after SIGTERM (expected 0)"
                           f"\n--- log\n{open(log).read()}")

    def expect_log(self, doc_port, block):
        if doc_port not in self.background:
            raise DocError(f"no background command on port {doc_port}")
        _, log = self.background[doc_port]
        stamp = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z ")
        wanted = [self.subst(l) for l in block.text.split("\n") if l.strip()]
        deadline = time.monotonic() + LOG_TIMEOUT
        missing = wanted
        while True:
            lines = [stamp.sub("", as_doc_host(l))
                     for l in open(log, encoding="utf-8", errors="replace")]
            missing = [w for w in wanted
                       if not any(line_matches(stamp.sub("", w), l.rstrip("\n")) for l in lines)]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if missing:
            raise DocError("log lines not found:\n" + "\n".join(missing) +
                           f"\n--- log\n{open(log).read()}")

    # -- PostgreSQL -----------------------------------------------------------------------------

    def drop_databases(self):
        psql = shutil.which("psql") or os.path.join(os.environ.get("STAGEHAND_TEST_PG_BIN", ""), "psql")
        for name in self.pg_databases:
            subprocess.run([psql, "-q", "-v", "ON_ERROR_STOP=1", self.pg_url, "-c",
                            f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'],
                           check=True, capture_output=True, text=True, timeout=30)

    # -- the file -------------------------------------------------------------------------------

    def record(self, where, error=None, skipped=None):
        if skipped:
            self.counts["skipped"] += 1
            print(f"skip {where}: {skipped}")
        elif error:
            self.counts["failed"] += 1
            self.failures.append(where)
            print(f"FAIL {where}: {error}")
        else:
            self.counts["passed"] += 1
            print(f"ok   {where}")
        sys.stdout.flush()

    def param(self, text, name):
        match = re.search(rf"\b{name}=([^\s:]+)", text)
        if not match:
            raise DocError(f"marker '{text}' needs {name}=")
        return match.group(1)

    def run_marker(self, text, line):
        where = f"{self.rel}:{line}"
        if text.startswith("postgres"):
            if not self.pg_url:
                if os.environ.get("CI"):
                    raise DocError("STAGEHAND_TEST_POSTGRES_URL is not set (required under CI)")
                self.skip_rest = "needs PostgreSQL (STAGEHAND_TEST_POSTGRES_URL is not set)"
                return
            self.pg_databases = self.param(text, "db").split(",")
            self.drop_databases()
        elif text.startswith("background"):
            port = self.param(text, "port")
            self.start_background(port, text.split(":", 1)[1].strip(), where)
        elif text.startswith("stop"):
            ports = [self.param(text, "port")] if "port=" in text else list(self.background)
            for port in ports:
                if port not in self.background:
                    raise DocError(f"nothing runs in the background on port {port}")
                self.stop_background(port, where)
        else:
            raise DocError(f"unknown marker '{text}'")

    def run_item(self, item):
        if item[0] == "marker":
            _, text, line = item
            self.run_marker(text, line)
            return None
        block = item[1]
        if block.lang not in ("sh", "console") and not any(
                m.startswith("expect-log") for m in block.markers):
            return None
        skip = next((m for m in block.markers if m.startswith("skip")), None)
        if skip:
            reason = skip[len("skip"):].strip()
            if not re.fullmatch(r"\(.+\)", reason):
                raise DocError("'skip' needs a reason in parentheses")
            return reason[1:-1]
        background = next((m for m in block.markers if m.startswith("background")), None)
        expect = next((m for m in block.markers if m.startswith("expect-log")), None)
        retry = next((m for m in block.markers if m.startswith("retry")), None)
        unknown = [m for m in block.markers if not m.startswith(("skip", "background", "expect-log", "retry"))]
        if unknown:
            raise DocError(f"unknown marker(s) {unknown}")
        if background:
            self.start_background(self.param(background, "port"), block.text, block.where())
        elif expect:
            self.expect_log(self.param(expect, "port"), block)
        elif retry:
            seconds = float(re.fullmatch(r"retry\s+(\d+(?:\.\d+)?)s", retry).group(1))
            deadline = time.monotonic() + seconds
            while True:
                try:
                    self.run_block(block)
                    break
                except DocError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        else:
            self.run_block(block)
        return None

    def run(self, path):
        try:
            items = parse_markdown(path, self.rel)
        except DocError as error:
            self.record(self.rel, error=str(error))
            return
        try:
            for item in items:
                where = item[1].where() if item[0] == "block" else f"{self.rel}:{item[2]}"
                label = (f"{where} ```{item[1].lang}" if item[0] == "block"
                         else f"{where} <!-- doc-test: {item[1]} -->")
                if self.skip_rest:
                    if item[0] == "block" and item[1].lang in ("sh", "console"):
                        self.record(label, skipped=self.skip_rest)
                    continue
                try:
                    skipped = self.run_item(item)
                except (DocError, subprocess.TimeoutExpired) as error:
                    self.record(label, error=str(error))
                    if item[0] == "marker":
                        break
                    continue
                if item[0] == "block" and item[1].lang in ("sh", "console"):
                    self.record(label, skipped=skipped)
                elif item[0] == "block" and item[1].markers:
                    self.record(label)
        finally:
            for port in list(self.background):
                try:
                    self.stop_background(port, f"{self.rel} (end)")
                except DocError as error:
                    self.record(f"{self.rel} (end of file)", error=str(error))
            if self.pg_databases and self.pg_url:
                try:
                    self.drop_databases()
                except subprocess.CalledProcessError as error:
                    print(f"warning: cannot drop {self.pg_databases}: {error.stderr}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", required=True, help="the stagehand binary under test")
    parser.add_argument("--source", required=True, help="the repository root")
    parser.add_argument("--work", default=None, help="where sandboxes go (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the sandboxes")
    parser.add_argument("files", nargs="*", help="files to run (default: README.md, docs/*.md)")
    args = parser.parse_args()
    if args.work:
        os.makedirs(args.work, exist_ok=True)
    args.work = tempfile.mkdtemp(prefix="stagehand-doc-test-", dir=args.work)

    files = args.files or ["README.md"] + sorted(
        os.path.join("docs", n) for n in os.listdir(os.path.join(args.source, "docs"))
        if n.endswith(".md"))
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    failures = []
    started = time.monotonic()
    for rel in files:
        if os.path.basename(rel) in NOT_RUN_HERE:
            print(f"---- {rel}: not run here: {NOT_RUN_HERE[os.path.basename(rel)]}")
            continue
        print(f"---- {rel}")
        try:
            runner = Runner(args, rel)
        except DocError as error:
            print(f"FAIL {rel}: {error}")
            totals["failed"] += 1
            failures.append(rel)
            continue
        runner.run(os.path.join(args.source, rel))
        for key in totals:
            totals[key] += runner.counts[key]
        failures += runner.failures
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)
    print(f"---- {time.monotonic() - started:.1f} s")
    for failure in failures:
        print(f"failed: {failure}")
    print(f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
    return 1 if totals["failed"] or not totals["passed"] else 0


if __name__ == "__main__":
    sys.exit(main())
