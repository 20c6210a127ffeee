#!/usr/bin/env python3
"""Real client stacks through tern: psycopg 3, node-postgres and JDBC (pgjdbc), each running a mixed
read/write workload that checks its own results, with 10x more clients than server connections.

Each case starts its own tern (pool_mode session or transaction, pool_size 4; mode `replicas` is transaction
pooling over the primary and a streaming replica with default_consistency = session, so every read is
routed and must still see the client's own writes; mode `tls` is transaction
pooling with client_tls_sslmode = require, each driver told to use TLS) in front of one
PostgreSQL primary started here (temp dir, free loopback port), runs one workload program from
clients/ with a timeout, and passes when the program exits 0, its RESULT line reports every step of
every client passed, the tables read directly on the primary hold exactly what the clients wrote,
tern never had more than pool_size server connections, and tern exits 0 on SIGTERM.

The tools come from Debian packages (tools/install-deps.sh): python3-psycopg, nodejs + npm,
openjdk-17-jdk-headless, libpostgresql-jdbc-java. node-postgres is installed with `npm ci` from
clients/node/package-lock.json into a cache directory (TERN_CLIENTS_CACHE, default
~/.cache/tern/clients) the first time; nothing else is downloaded.

usage: run_clients.py [-k SUBSTRING]... [--modes session,transaction,tls,replicas] [--clients N] [--pool-size N] [--verbose]
(TERN_BINARY and TERN_SOURCE_ROOT from meson; mode `direct` runs the workloads against PostgreSQL itself,
to tell a workload's own problem from tern's)"""
import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pgcluster import PgCluster, clean_env, find_pg_bindir, free_port  # noqa: E402
from procs import TernProcess  # noqa: E402

ROOT = os.environ.get("TERN_SOURCE_ROOT", os.path.dirname(os.path.dirname(HERE)))
TERN = os.environ.get("TERN_BINARY", os.path.join(ROOT, "build", "tern"))
CLIENTS_DIR = os.path.join(HERE, "clients")
SUITE_DEADLINE_S = 870       # under meson's 900 s, so the report still prints
WORKLOAD_TIMEOUT_S = 150     # one stack's run (1-3 s on 2 cores; the workloads give up at 100 s)
SETUP_TIMEOUT_S = 300        # npm ci (network) or javac
ROWS = 20                    # rows each client writes per step (passed to every workload)
COPY_ROWS = 200              # rows each psycopg client copies in and out
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
JDBC_JAR = "/usr/share/java/postgresql.jar"
INSTALL_HINT = "run tools/install-deps.sh (as root) to install it"


class CaseFailure(Exception):
    pass


class SuiteDeadline(BaseException):
    """Not an Exception: no per-case handler swallows it, so the run stops and everything is cleaned up."""


def check(condition, what):
    if not condition:
        raise CaseFailure(what)


def run(argv, timeout, what, **kw):
    """subprocess.run with a timeout that names what timed out."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"")
        out = out.decode("utf-8", "replace") if isinstance(out, bytes) else out
        raise CaseFailure("%s timed out after %ss; output tail:\n%s" % (what, timeout, out[-3000:]))


# ---------------------------------------------------------------- stacks
#
# prepare(workdir) returns the argv prefix that runs the workload (raising CaseFailure with an
# install hint when a tool is missing); expected(args, prefix) returns {SQL run on the primary:
# the exact value psql prints}.


def prepare_psycopg(workdir):
    r = run([PYTHON, "-c", "import psycopg; print(psycopg.__version__)"], 60, "import psycopg")
    check(r.returncode == 0, "psycopg 3 is not importable by %s (%s): %s (Debian package python3-psycopg)"
          % (PYTHON, " ".join(r.stderr.strip().splitlines()[-1:]), INSTALL_HINT))
    return ([PYTHON, os.path.join(CLIENTS_DIR, "psycopg_workload.py"), "--copy-rows", str(COPY_ROWS)],
            "psycopg " + r.stdout.strip(), {})


def expected_psycopg(args, p):
    n = args.clients
    return {
        "select count(*), count(distinct client) from %s_items" % p: "%d|%d" % (n * 3 * ROWS, n),
        "select sum(n), count(*) from %s_counters" % p: "%d|%d" % (n * 5, n),
        "select count(*), count(payload) from %s_copy" % p: "%d|%d" % (
            n * COPY_ROWS, n * sum(1 for s in range(COPY_ROWS) if s % 17)),
    }


def cache_dir(workdir):
    """Where node_modules trees are kept between runs; this run's temp dir when that is not writable."""
    base = os.environ.get("TERN_CLIENTS_CACHE")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "tern", "clients")
    try:
        os.makedirs(base, exist_ok=True)
        if os.access(base, os.W_OK):
            return base
    except OSError:
        pass
    return workdir


def prepare_node(workdir):
    node, npm = shutil.which("node"), shutil.which("npm")
    check(node and npm, "node-postgres needs node and npm (Debian packages nodejs and npm), missing %s: %s"
          % (" and ".join(name for name, path in (("node", node), ("npm", npm)) if not path), INSTALL_HINT))
    src = os.path.join(CLIENTS_DIR, "node")
    with open(os.path.join(src, "package-lock.json"), "rb") as f:
        lock = f.read()
    with open(os.path.join(src, "package.json"), "rb") as f:
        digest = hashlib.sha256(lock + f.read()).hexdigest()[:16]
    target = os.path.join(cache_dir(workdir), "node-" + digest)
    if not os.path.isdir(os.path.join(target, "node_modules", "pg")):
        # Install beside the final place, then rename: a concurrent run never sees half a tree.
        staging = tempfile.mkdtemp(prefix="node-staging-", dir=os.path.dirname(target))
        try:
            for name in ("package.json", "package-lock.json"):
                shutil.copy(os.path.join(src, name), staging)
            r = run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], SETUP_TIMEOUT_S, "npm ci",
                    cwd=staging, env=clean_env({"npm_config_update_notifier": "false"}))
            check(r.returncode == 0, "npm ci failed (%d) in %s:\n%s" % (r.returncode, staging, r.stderr[-3000:]))
            try:
                os.rename(staging, target)
                staging = None
            except OSError:
                check(os.path.isdir(os.path.join(target, "node_modules", "pg")), "cannot place %s" % target)
        finally:
            if staging:
                shutil.rmtree(staging, ignore_errors=True)
    r = run([node, "--version"], 60, "node --version")
    version = json.load(open(os.path.join(target, "node_modules", "pg", "package.json")))["version"]
    return ([node, os.path.join(src, "workload.js")], "node %s, pg %s" % (r.stdout.strip(), version),
            {"NODE_PATH": os.path.join(target, "node_modules")})


def expected_node(args, p):
    n = args.clients
    return {
        "select count(*), count(distinct client) from %s_items" % p: "%d|%d" % (n * 2 * ROWS, n),
        "select sum(n), count(*) from %s_counters" % p: "%d|%d" % (n * 5, n),
    }


def prepare_jdbc(workdir):
    java, javac = shutil.which("java"), shutil.which("javac")
    check(java and javac, "JDBC needs java and javac (Debian package openjdk-17-jdk-headless): %s" % INSTALL_HINT)
    check(os.path.exists(JDBC_JAR), "JDBC needs %s (Debian package libpostgresql-jdbc-java): %s"
          % (JDBC_JAR, INSTALL_HINT))
    classes = os.path.join(workdir, "jdbc-classes")
    os.makedirs(classes, exist_ok=True)
    r = run([javac, "-cp", JDBC_JAR, "-d", classes, os.path.join(CLIENTS_DIR, "jdbc", "Workload.java")],
            SETUP_TIMEOUT_S, "javac")
    check(r.returncode == 0, "javac failed (%d):\n%s" % (r.returncode, r.stderr[-3000:]))
    r = run([java, "-version"], 60, "java -version")
    version = (r.stderr.strip().splitlines() or ["java ?"])[0]
    return ([java, "-Xss512k", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-cp", os.pathsep.join([classes, JDBC_JAR]), "Workload"],
            "%s, %s" % (version, os.path.realpath(JDBC_JAR).rsplit("/", 1)[-1]), {})


def expected_jdbc(args, p):
    n = args.clients
    return {
        "select count(*), count(distinct client) from %s_items" % p: "%d|%d" % (n * 3 * ROWS, n),
        "select sum(n), count(*) from %s_counters" % p: "%d|%d" % (n * 5, n),
    }


STACKS = [
    ("psycopg", prepare_psycopg, expected_psycopg),
    ("node", prepare_node, expected_node),
    ("jdbc", prepare_jdbc, expected_jdbc),
]


# ---------------------------------------------------------------- cases


# How each driver is told to use TLS (without verifying tern's throwaway certificate).
TLS_ENV = {
    "psycopg": {"PGSSLMODE": "require"},
    "node": {"PGSSLMODE": "no-verify"},  # node-postgres reads it: TLS, certificate not checked
    "jdbc": {"TERN_JDBC_URL_EXTRA": "&sslmode=require"},
}


def make_certificate(workdir):
    """A self-signed certificate and key for tern (mode tls); their paths."""
    crt, key = os.path.join(workdir, "tern.crt"), os.path.join(workdir, "tern.key")
    if not os.path.exists(crt):
        run(["openssl", "req", "-x509", "-nodes", "-days", "2", "-subj", "/CN=localhost", "-newkey", "rsa:2048",
             "-keyout", key, "-out", crt], 60, "openssl req")
    return crt, key


def start_tern(pg, mode, pool_size, workdir):
    tls = ""
    replicas = ""
    if mode == "replicas":  # reads routed to the streaming replica, read-your-writes for every client
        replicas = "replica = host=127.0.0.1 port=%d\n[routing]\ndefault_consistency = session\n" % pg.replica_port
    if mode == "tls":
        crt, key = make_certificate(workdir)
        tls = ("[tls]\nclient_tls_sslmode = require\nclient_tls_cert_file = %s\nclient_tls_key_file = %s\n"
               % (crt, key))
    config = """[tern]
listen = 127.0.0.1:%d
workers = 2
pool_mode = %s
[servers]
primary = host=127.0.0.1 port=%d
%s[pool]
pool_size = %d
[auth]
mode = trust
[limits]
max_client_conn = 1000
%s""" % (free_port(), "transaction" if mode in ("tls", "replicas") else mode, pg.primary_port, replicas, pool_size, tls)
    return TernProcess(TERN, config).start()


class ServerConnectionSampler:
    """Polls pg_stat_activity on the primary and keeps the most client backends seen other than its own
    query's: tern's server connections (nothing else connects during a case)."""

    def __init__(self, pg):
        self.pg = pg
        self.most = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                n = int(self.pg.psql("select count(*) from pg_stat_activity where backend_type = 'client backend' "
                                     "and pid <> pg_backend_pid() and application_name <> 'tern monitor'",
                                     timeout=10))
                self.most = max(self.most, n)
                self.samples += 1
            except Exception:
                pass
            self._stop.wait(0.25)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=15)
        return False


def run_case(pg, args, stack, mode, command, env_extra, expected, workdir):
    """Returns (one-line detail, the workload's per-step table); raises CaseFailure."""
    tern = None
    output = ""
    try:
        if mode == "direct":
            port = pg.primary_port
        else:
            tern = start_tern(pg, mode, args.pool_size, workdir)
            port = tern.port
            if mode == "tls":
                env_extra = dict(env_extra, **TLS_ENV[stack])
        argv = command + ["--host", "127.0.0.1", "--port", str(port), "--clients", str(args.clients),
                          "--rows", str(ROWS), "--prefix", "%s_%s" % (stack, mode)]
        with ServerConnectionSampler(pg) as sampler:
            r = run(argv, WORKLOAD_TIMEOUT_S, "the %s workload" % stack, env=clean_env(env_extra),
                    stdin=subprocess.DEVNULL)
        stdout = "\n".join(line for line in r.stdout.splitlines() if not line.startswith("RESULT "))
        output = (stdout + ("\n--- stderr ---\n" + r.stderr[-3000:] if r.stderr.strip() else "")).rstrip()
        check_workload(pg, args, stack, mode, r, expected)
        summary = stdout.splitlines()
        if tern is not None:
            check(sampler.most <= args.pool_size, "%d server connections seen, pool_size is %d"
                  % (sampler.most, args.pool_size))
            check(tern.alive(), "tern died (exit %s)" % tern.returncode)
            tern.stop()
            check(tern.returncode == 0, "tern exited %s after SIGTERM" % tern.returncode)
        return "%d clients, %s server connections seen at most, workload %.1fs" % (
            args.clients, sampler.most if tern else "-", workload_result(r)["elapsed_s"]), summary
    except CaseFailure as exc:
        text = str(exc)
        if output:
            text += "\n--- workload output ---\n" + "\n".join(output.splitlines()[-40:])
        if tern is not None:
            tern.stop()
            text += "\n--- tern log tail ---\n" + tern.log_tail(30)
        raise CaseFailure(text) from None
    finally:
        if tern is not None:
            tern.stop()


def workload_result(r):
    for line in reversed(r.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise CaseFailure("the workload printed no RESULT line (exit %d)" % r.returncode)


def check_workload(pg, args, stack, mode, r, expected):
    """The workload's own verdict per step, its exit status, then the tables read on the primary."""
    result = workload_result(r)
    check(result["clients"] == args.clients, "the workload ran %r clients" % result["clients"])
    failed_steps = ["%s: %d of %d clients failed: %s" % (name, s["failed"], args.clients, " | ".join(s["errors"]))
                    for name, s in result["steps"].items() if s["failed"] or s["ok"] != args.clients]
    check(not failed_steps, "steps failed:\n    " + "\n    ".join(failed_steps))
    check(not result.get("totals_error"), result.get("totals_error", ""))
    check(result["ok"] and r.returncode == 0, "the workload exited %d" % r.returncode)
    for sql, want in expected(args, "%s_%s" % (stack, mode)).items():
        got = pg.psql(sql)
        check(got == want, "on the primary, %s gave %r, want %r" % (sql, got, want))


def on_suite_deadline(signum, frame):
    # An exception, not the default action: the cluster, tern and the running workload are cleaned up.
    raise SuiteDeadline("the suite ran past its %d s deadline" % SUITE_DEADLINE_S)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-k", action="append", default=[], help="run cases whose name contains this")
    parser.add_argument("--modes", default="session,transaction,tls,replicas",
                        help="comma list of session, transaction, tls (transaction pooling, clients over TLS), direct")
    parser.add_argument("--pool-size", type=int, default=4)
    parser.add_argument("--clients", type=int, default=0, help="default: 10 x pool size")
    parser.add_argument("--verbose", action="store_true", help="print each workload's per-step table")
    args = parser.parse_args()
    args.clients = args.clients or 10 * args.pool_size
    modes = [m for m in args.modes.split(",") if m]
    cases = [(stack, mode) for stack, _, _ in STACKS for mode in modes
             if not args.k or any(k in "%s_%s" % (stack, mode) for k in args.k)]
    if not os.path.exists(TERN):
        print("tern binary not found at %s" % TERN)
        return 1
    try:
        find_pg_bindir()
    except Exception as exc:
        print("SKIP: no PostgreSQL server binaries on this machine (%s)" % exc)
        return 77
    signal.signal(signal.SIGALRM, on_suite_deadline)
    signal.alarm(SUITE_DEADLINE_S)
    results = []
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="tern-clients-")
    try:
        # The replicas mode's standby; synchronous_commit on, so read-your-writes waits microseconds.
        with PgCluster(with_replica="replicas" in modes, extra_conf={"synchronous_commit": "on"}) as pg:
            print("PostgreSQL primary on %d (%.1fs)" % (pg.primary_port, time.monotonic() - started), flush=True)
            prepared = {}
            for stack, prepare, expected in STACKS:
                if not any(s == stack for s, _ in cases):
                    continue
                t0 = time.monotonic()
                try:
                    command, version, env_extra = prepare(workdir)
                    prepared[stack] = (command, env_extra)
                    print("%s ready: %s (%.1fs)" % (stack, version, time.monotonic() - t0), flush=True)
                except CaseFailure as exc:
                    prepared[stack] = exc
                    print("%s NOT READY: %s" % (stack, exc), flush=True)
            for stack, mode in cases:
                name = "%s_%s" % (stack, mode)
                expected = dict((s, e) for s, _, e in STACKS)[stack]
                t0 = time.monotonic()
                try:
                    if isinstance(prepared[stack], CaseFailure):
                        raise prepared[stack]
                    command, env_extra = prepared[stack]
                    detail, summary = run_case(pg, args, stack, mode, command, env_extra, expected, workdir)
                    results.append((name, True))
                    print("PASS %s (%.1fs): %s" % (name, time.monotonic() - t0, detail), flush=True)
                    if args.verbose:
                        print("    " + "\n    ".join(summary), flush=True)
                except SuiteDeadline as exc:
                    results.append((name, False))
                    print("FAIL %s (%.1fs): %s" % (name, time.monotonic() - t0, exc), flush=True)
                    break
                except Exception as exc:
                    results.append((name, False))
                    text = str(exc) if isinstance(exc, CaseFailure) else traceback.format_exc()
                    print("FAIL %s (%.1fs): %s\n" % (name, time.monotonic() - t0, text), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    failed = [name for name, ok in results if not ok]
    print("%d passed, %d failed%s (%.1fs)" % (len(results) - len(failed), len(failed),
                                               (": " + ", ".join(failed)) if failed else "",
                                               time.monotonic() - started))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
