"""Throwaway PostgreSQL primary (+ optional streaming replica) for tern's tests.

Standard library only.  Every server listens on 127.0.0.1 on a free port and
keeps its data, logs and unix sockets under one temp dir (``base_dir``) that
``stop()`` removes.  When running as root, initdb / pg_ctl / pg_basebackup run
as the ``postgres`` OS user (``runuser -u postgres -- ...``).

    from pgcluster import PgCluster
    with PgCluster() as pg:
        pg.psql("select 1")                       # primary
        pg.psql("select 1", port=pg.replica_port) # replica

Every wait polls with a deadline.  ``stop()`` is registered with atexit and is
safe to call twice; a SIGTERM to the test process raises SystemExit so that
atexit handlers and context managers run.
"""

import atexit
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

__all__ = [
    "find_pg_bindir",
    "free_port",
    "clean_env",
    "install_sigterm_handler",
    "PgCluster",
    "PgClusterError",
]

_PG_BASE = "/usr/lib/postgresql"


class PgClusterError(RuntimeError):
    """A server could not be set up / started / queried."""


def find_pg_bindir():
    """Return the highest /usr/lib/postgresql/<N>/bin that contains initdb."""
    candidates = []
    try:
        entries = os.listdir(_PG_BASE)
    except OSError:
        entries = []
    for name in entries:
        bindir = os.path.join(_PG_BASE, name, "bin")
        if not os.access(os.path.join(bindir, "initdb"), os.X_OK):
            continue
        try:
            version = tuple(int(p) for p in name.split("."))
        except ValueError:
            continue
        candidates.append((version, bindir))
    if not candidates:
        raise PgClusterError(
            "no PostgreSQL server binaries found: expected %s/<N>/bin/initdb "
            "(install the Debian 'postgresql' package, e.g. tools/install-deps.sh)"
            % _PG_BASE)
    candidates.sort()
    return candidates[-1][1]


_ports_given = set()


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (bind :0, read, close), and never one this
    process was given before: the kernel may hand a just-closed port out again, and two ports picked
    for one tern (listen and http_listen) came out the same once in CI."""
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        finally:
            s.close()
        if port not in _ports_given:
            _ports_given.add(port)
            return port


def clean_env(extra=None):
    """os.environ without PG* variables (they would redirect libpq clients)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    if extra:
        env.update(extra)
    return env


# ---------------------------------------------------------------- signals

_cleanup_depth = 0          # >0 while a stop() runs: SIGTERM is deferred
_pending_signal = None      # a SIGTERM that arrived during a stop()


def _sigterm_handler(signum, frame):
    global _pending_signal
    if _cleanup_depth > 0:
        _pending_signal = signum  # finish cleaning up first, then exit
        return
    raise SystemExit(128 + signum)


class _Cleanup:
    """Context manager: defer SIGTERM while cleaning up, re-raise it after."""

    def __enter__(self):
        global _cleanup_depth
        _cleanup_depth += 1

    def __exit__(self, *exc):
        global _cleanup_depth, _pending_signal
        _cleanup_depth -= 1
        if _cleanup_depth == 0 and _pending_signal is not None:
            signum, _pending_signal = _pending_signal, None
            if exc[0] is None:
                raise SystemExit(128 + signum)
        return False


def install_sigterm_handler():
    """Make SIGTERM raise SystemExit (so atexit/finally run).  Only replaces the
    default disposition, only in the main thread; returns True if installed or
    already ours."""
    try:
        current = signal.getsignal(signal.SIGTERM)
        if current is _sigterm_handler:
            return True
        if current not in (signal.SIG_DFL, None):
            return False  # somebody else's handler: leave it alone
        signal.signal(signal.SIGTERM, _sigterm_handler)
        return True
    except ValueError:  # not the main thread
        return False


# ---------------------------------------------------------------- helpers

def _is_root():
    return os.geteuid() == 0


def _pid_alive(pid):
    """True if pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except (OSError, ValueError):
        return False
    state = data.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def _children_of(pid):
    kids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(rest[1]) == pid:
            kids.append(int(name))
    return kids


def _tail(path, n):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError as e:
        return "(cannot read %s: %s)" % (path, e)
    lines = data.splitlines()
    return "\n".join(lines[-n:])


def _conf_value(value):
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (int, float)):
        return str(value)
    value = str(value)
    if len(value) >= 2 and value[0] == "'" and value[-1] == "'":
        return value
    return "'" + value.replace("'", "''") + "'"


def _conf_lines(extra_conf):
    """extra_conf may be a dict {name: value}, a string, or an iterable of lines."""
    if not extra_conf:
        return []
    if isinstance(extra_conf, dict):
        return ["%s = %s" % (k, _conf_value(v)) for k, v in extra_conf.items()]
    if isinstance(extra_conf, str):
        return extra_conf.splitlines()
    return [str(line) for line in extra_conf]


class _Server:
    def __init__(self, name, datadir, logfile, port):
        self.name = name
        self.datadir = datadir
        self.logfile = logfile
        self.port = port
        self.running = False

    def pid(self):
        """Postmaster PID from postmaster.pid, or None."""
        try:
            with open(os.path.join(self.datadir, "postmaster.pid")) as f:
                return int(f.readline().strip())
        except (OSError, ValueError):
            return None


class PgCluster:
    """A throwaway primary (+ streaming replica) on 127.0.0.1.

    extra_conf: dict / str / list of postgresql.conf lines, appended last.
    hba_lines:  pg_hba.conf lines placed *before* the trust lines.
    password:   the postgres role's password from initdb on (SCRAM), which the harness's own psql
                sends: hba_lines may then ask every TCP login for one (replication stays trusted).
    """

    host = "127.0.0.1"

    def __init__(self, with_replica=True, durable=False, extra_conf=None,
                 hba_lines=None, password=None):
        self.with_replica = with_replica
        self.password = password
        self.durable = durable
        self.extra_conf = extra_conf
        self.hba_lines = list(hba_lines or [])
        self.host = "127.0.0.1"
        self.bindir = find_pg_bindir()
        self.base_dir = None
        self.primary_port = None
        self.replica_port = None
        self._primary = None
        self._replica = None
        self._stopped = False
        self._started = False
        self._pg_user = None
        if _is_root():
            try:
                self._pg_user = pwd.getpwnam("postgres")
            except KeyError:
                raise PgClusterError(
                    "running as root but there is no 'postgres' OS user to run "
                    "the server as (install the postgresql package)")

    # ------------------------------------------------------------ context

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    # ------------------------------------------------------------ plumbing

    def _bin(self, name):
        return os.path.join(self.bindir, name)

    def _as_pg(self, argv):
        if self._pg_user is not None:
            return ["runuser", "-u", "postgres", "--"] + argv
        return argv

    def _run(self, argv, timeout, what, check=True):
        try:
            r = subprocess.run(self._as_pg(argv), cwd=self.base_dir,
                               env=clean_env({"LC_ALL": "C"}),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode("utf-8", "replace")
            raise PgClusterError("%s timed out after %ss: %s\n%s\n%s" % (
                what, timeout, " ".join(argv), out[-3000:], self.logs()))
        out = r.stdout.decode("utf-8", "replace")
        if check and r.returncode != 0:
            raise PgClusterError("%s failed (exit %d): %s\n%s\n%s" % (
                what, r.returncode, " ".join(argv), out[-3000:], self.logs()))
        return r.returncode, out

    def _nosync(self):
        return [] if self.durable else ["--no-sync"]

    def _chown(self, path):
        if self._pg_user is not None:
            os.chown(path, self._pg_user.pw_uid, self._pg_user.pw_gid)

    def _append(self, path, lines):
        with open(path, "a") as f:
            f.write("\n# --- added by tern tests/integration/pgcluster.py\n")
            for line in lines:
                f.write(line + "\n")

    # ------------------------------------------------------------ start

    def start(self):
        if self._started:
            raise PgClusterError("PgCluster.start() called twice")
        self._started = True
        install_sigterm_handler()
        atexit.register(self.stop)
        self.base_dir = tempfile.mkdtemp(prefix="tern-pg-")
        self._chown(self.base_dir)
        try:
            self._start_primary_fresh()
            if self.with_replica:
                self._start_replica_fresh()
        except BaseException:
            self.stop()
            raise
        return self

    def _server_conf(self, port):
        lines = [
            "listen_addresses = '127.0.0.1'",
            "port = %d" % port,
            "unix_socket_directories = %s" % _conf_value(self.base_dir),
            "max_connections = 400",
            "wal_level = replica",
            "max_wal_senders = 8",
            "hot_standby = on",
            "shared_buffers = 128MB",
            "password_encryption = 'scram-sha-256'",
        ]
        if not self.durable:
            lines += ["fsync = off", "synchronous_commit = off",
                      "full_page_writes = off"]
        lines += _conf_lines(self.extra_conf)
        return lines

    def _start_primary_fresh(self):
        datadir = os.path.join(self.base_dir, "primary")
        self._primary = _Server("primary", datadir,
                                os.path.join(self.base_dir, "primary.log"),
                                free_port())
        pwfile = []
        if self.password is not None:
            path = os.path.join(self.base_dir, "pwfile")
            with open(path, "w") as f:
                f.write(self.password + "\n")
            self._chown(path)
            pwfile = ["--pwfile=" + path]
        self._run([self._bin("initdb"), "-D", datadir, "-U", "postgres",
                   "--auth=trust", "-E", "UTF8", "--locale=C"] + pwfile + self._nosync(),
                  timeout=180, what="initdb")
        self._append(os.path.join(datadir, "postgresql.conf"),
                     self._server_conf(self._primary.port))
        hba = list(self.hba_lines) + [
            "local all all trust",
            "host all all 127.0.0.1/32 trust",
            "local replication all trust",
            "host replication all 127.0.0.1/32 trust",
        ]
        hba_path = os.path.join(datadir, "pg_hba.conf")
        with open(hba_path, "w") as f:
            f.write("# written by tern tests/integration/pgcluster.py\n")
            f.write("\n".join(hba) + "\n")
        self._chown(hba_path)
        self._pg_start(self._primary)
        self.primary_port = self._primary.port
        self._wait_sql(self._primary.port, "select 1", "1", 60, "primary up")

    def _start_replica_fresh(self):
        datadir = os.path.join(self.base_dir, "replica")
        self._replica = _Server("replica", datadir,
                                os.path.join(self.base_dir, "replica.log"),
                                free_port())
        self._run([self._bin("pg_basebackup"), "-R", "-X", "stream",
                   "--checkpoint=fast", "-h", self.host,
                   "-p", str(self.primary_port), "-U", "postgres",
                   "-D", datadir] + self._nosync(),
                  timeout=300, what="pg_basebackup")
        self._append(os.path.join(datadir, "postgresql.conf"),
                     ["port = %d" % self._replica.port, "hot_standby = on"])
        self._pg_start(self._replica)
        self.replica_port = self._replica.port
        self._wait_sql(self._replica.port, "select pg_is_in_recovery()", "t",
                       60, "replica in recovery")

    def _pg_start(self, srv, attempts=3):
        """pg_ctl start; on a port clash pick another port and retry."""
        for attempt in range(attempts):
            code, out = self._run(
                [self._bin("pg_ctl"), "-D", srv.datadir, "-l", srv.logfile,
                 "-w", "-t", "60", "start"],
                timeout=120, what="pg_ctl start (%s)" % srv.name, check=False)
            if code == 0:
                srv.running = True
                return
            # pg_ctl may have left a postmaster that is still starting
            self._pg_stop(srv, "immediate", force=True)
            log = _tail(srv.logfile, 30)
            if "Address already in use" in log and attempt + 1 < attempts:
                srv.port = free_port()
                self._append(os.path.join(srv.datadir, "postgresql.conf"),
                             ["port = %d" % srv.port])
                continue
            raise PgClusterError("pg_ctl start (%s) failed:\n%s\n%s" % (
                srv.name, out[-2000:], self.logs()))

    def _pg_stop(self, srv, mode, force=False):
        """pg_ctl -m <mode> stop; falls back to killing the postmaster."""
        if srv is None:
            return
        pid = srv.pid()
        code, out = self._run([self._bin("pg_ctl"), "-D", srv.datadir,
                               "-m", mode, "-w", "-t", "60", "stop"],
                              timeout=90, what="pg_ctl stop (%s)" % srv.name,
                              check=False)
        if pid is not None and _pid_alive(pid):
            # pg_ctl failed or timed out: the postmaster is ours, kill it
            for sig in (signal.SIGQUIT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + 10
                while _pid_alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not _pid_alive(pid):
                    break
        srv.running = False
        if code != 0 and not force and pid is not None and \
                "Is server running?" not in out:
            sys.stderr.write("pgcluster: pg_ctl stop (%s) exit %d: %s\n"
                             % (srv.name, code, out.strip()[-500:]))

    # ------------------------------------------------------------ queries

    def psql(self, sql, port=None, user="postgres", dbname="postgres",
             check=True, timeout=60, password=None):
        """Run sql through psql -X -A -t on 127.0.0.1; return stdout
        (trailing newlines stripped).  check=True raises on a non-zero exit.
        password: sent via PGPASSWORD (for users that hba_lines put behind
        scram-sha-256)."""
        if port is None:
            port = self.primary_port
        argv = [self._bin("psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                "-h", self.host, "-p", str(port), "-U", user, "-d", dbname,
                "-c", sql]
        if password is None and user == "postgres":
            password = self.password
        try:
            extra = {"PGCONNECT_TIMEOUT": "10"}
            if password is not None:
                extra["PGPASSWORD"] = password
            r = subprocess.run(argv, env=clean_env(extra),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise PgClusterError("psql timed out after %ss on port %s: %s"
                                 % (timeout, port, sql))
        out = r.stdout.decode("utf-8", "replace").rstrip("\n")
        if check and r.returncode != 0:
            raise PgClusterError("psql failed (exit %d) on port %s: %s\n%s" % (
                r.returncode, port, sql,
                r.stderr.decode("utf-8", "replace").strip()))
        return out

    def _wait_sql(self, port, sql, expected, timeout, what):
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                last = self.psql(sql, port=port, timeout=10)
                if last.strip() == expected:
                    return
            except PgClusterError as e:
                last = str(e)
            if time.monotonic() >= deadline:
                raise PgClusterError("timed out after %ss waiting for %s "
                                     "(last: %s)\n%s" % (timeout, what, last,
                                                         self.logs()))
            time.sleep(0.1)

    def wait_replica_caught_up(self, timeout=30):
        """Wait until the replica has replayed the primary's current WAL
        position (pg_current_wal_lsn() vs pg_last_wal_replay_lsn()), i.e.
        every transaction committed before the call, even asynchronously."""
        if self.replica_port is None:
            raise PgClusterError("no replica in this cluster")
        # With synchronous_commit=off (not durable) a just-committed record
        # may still sit in the WAL buffers, beyond pg_current_wal_lsn() (the
        # write position).  Commit a transaction that writes WAL (a
        # transactional logical message) with synchronous_commit=on: its
        # commit writes and flushes everything before it.
        self.psql("select set_config('synchronous_commit', 'on', false), "
                  "pg_logical_emit_message(true, 'tern-pgcluster', 'sync')")
        target = self.psql("select pg_current_wal_lsn()").strip()
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                last = self.psql(
                    "select coalesce(pg_last_wal_replay_lsn() >= '%s'::pg_lsn, "
                    "false) || ' ' || coalesce(pg_last_wal_replay_lsn()::text, "
                    "'none')" % target, port=self.replica_port, timeout=10)
                if last.startswith("true"):
                    return
            except PgClusterError as e:
                last = str(e)
            if time.monotonic() >= deadline:
                raise PgClusterError(
                    "replica did not reach primary LSN %s within %ss "
                    "(replica: %s)\n%s" % (target, timeout, last, self.logs()))
            time.sleep(0.05)

    # ------------------------------------------------------------ control

    def restart_primary(self, mode="fast"):
        srv = self._primary
        self._run([self._bin("pg_ctl"), "-D", srv.datadir, "-l", srv.logfile,
                   "-m", mode, "-w", "-t", "60", "restart"],
                  timeout=150, what="pg_ctl restart (primary)")
        srv.running = True
        self._wait_sql(srv.port, "select 1", "1", 60, "primary up")

    def stop_primary(self, mode="immediate"):
        self._pg_stop(self._primary, mode)

    def start_primary(self):
        self._pg_start(self._primary)
        self.primary_port = self._primary.port
        self._wait_sql(self._primary.port, "select 1", "1", 60, "primary up")

    def stop_replica(self, mode="fast"):
        self._pg_stop(self._replica, mode)

    def start_replica(self):
        self._pg_start(self._replica)
        self._wait_sql(self._replica.port, "select pg_is_in_recovery()", "t", 60, "replica up")

    def promote_replica(self, stop_primary="immediate"):
        """A failover as an HA manager does it: the primary stopped (``stop_primary``
        mode; None leaves it running, a stale primary), the replica promoted
        (pg_ctl promote -w). Afterwards the roles are swapped: ``primary_port``
        is the promoted server's, ``replica_port`` the old primary's (stopped,
        unless stop_primary is None; rebuild_standby makes it a standby)."""
        if self._replica is None:
            raise PgClusterError("no replica to promote")
        if stop_primary:
            self._pg_stop(self._primary, stop_primary)
            self._primary.running = False
        self._run([self._bin("pg_ctl"), "-D", self._replica.datadir, "-w", "-t", "60", "promote"],
                  timeout=90, what="pg_ctl promote")
        self._wait_sql(self._replica.port, "select pg_is_in_recovery()", "f", 60, "promoted")
        self._primary, self._replica = self._replica, self._primary
        self._primary.name, self._replica.name = "primary", "replica"
        self.primary_port, self.replica_port = self._primary.port, self._replica.port

    def rebuild_standby(self):
        """The server at ``replica_port`` (stopped, or a stale primary: stopped
        here) is made again a streaming standby of the primary, from a fresh
        base backup, on the same port."""
        srv = self._replica
        self._pg_stop(srv, "immediate", force=True)
        srv.running = False
        shutil.rmtree(srv.datadir)
        self._run([self._bin("pg_basebackup"), "-R", "-X", "stream", "--checkpoint=fast", "-h", self.host,
                   "-p", str(self.primary_port), "-U", "postgres", "-D", srv.datadir] + self._nosync(),
                  timeout=300, what="pg_basebackup (rebuild)")
        self._append(os.path.join(srv.datadir, "postgresql.conf"), ["port = %d" % srv.port, "hot_standby = on"])
        self._pg_start(srv)
        self._wait_sql(srv.port, "select pg_is_in_recovery()", "t", 60, "rebuilt standby in recovery")

    def postmaster_pids(self):
        """{'primary': pid, 'replica': pid} for servers with a postmaster.pid."""
        out = {}
        for srv in (self._primary, self._replica):
            if srv is not None:
                pid = srv.pid()
                if pid is not None:
                    out[srv.name] = pid
        return out

    def logs(self, n=40):
        """Tail of each server's log, for failure messages."""
        parts = []
        for srv in (self._primary, self._replica):
            if srv is not None and os.path.exists(srv.logfile):
                parts.append("----- %s log (%s) -----\n%s" % (
                    srv.name, srv.logfile, _tail(srv.logfile, n)))
        return "\n".join(parts)

    # ------------------------------------------------------------ stop

    def stop(self):
        """Immediate-stop every server we started, then remove base_dir.
        Idempotent; registered with atexit."""
        if self._stopped:
            return
        with _Cleanup():
            for srv in (self._replica, self._primary):
                if srv is not None and (srv.running or srv.pid() is not None):
                    self._pg_stop(srv, "immediate", force=True)
            if self.base_dir and os.path.isdir(self.base_dir):
                shutil.rmtree(self.base_dir, ignore_errors=True)
            self._stopped = True
            try:
                atexit.unregister(self.stop)
            except Exception:
                pass


if __name__ == "__main__":  # manual smoke test: python3 pgcluster.py
    with PgCluster() as c:
        print("primary", c.primary_port, c.psql("select version()"))
        print("replica", c.replica_port,
              c.psql("select pg_is_in_recovery()", port=c.replica_port))
