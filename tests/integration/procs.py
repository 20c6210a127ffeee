"""Start/stop tern and PgBouncer as measured processes (standard library only).

    from procs import TernProcess, PgBouncerProcess
    with TernProcess("build/tern", config_text) as t:
        before = t.cpu_seconds(); ...; used = t.cpu_seconds() - before

Each process runs in its own temp dir (config + log), the PID you hold is the
proxy process itself, start() polls a TCP connect with a deadline and fails
fast (with the log tail) if the process exits, stop() sends SIGTERM, waits
10 s, then SIGKILL.  stop() is registered with atexit and is idempotent.
"""

import atexit
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

try:
    from . import pgcluster as _pgc  # imported as a package
except ImportError:
    import sys as _sys
    _here = os.path.dirname(os.path.abspath(__file__))
    if _here not in _sys.path:
        _sys.path.insert(0, _here)
    import pgcluster as _pgc

free_port = _pgc.free_port

__all__ = ["proc_cpu_seconds", "proc_cpu_times", "TernProcess", "PgBouncerProcess", "RelayProcess",
           "ProcessError", "free_port"]

_CLK_TCK = os.sysconf("SC_CLK_TCK")


class ProcessError(RuntimeError):
    """A measured process failed to start or died."""


def _stat_fields(pid):
    """Fields of /proc/<pid>/stat after the command name, i.e. field 3 first."""
    with open("/proc/%d/stat" % pid) as f:
        data = f.read()
    return data.rsplit(")", 1)[1].split()


def proc_cpu_seconds(pid):
    """utime + stime (fields 14 and 15 of /proc/<pid>/stat, all threads) in
    seconds."""
    return sum(proc_cpu_times(pid))


def proc_cpu_times(pid):
    """(utime, stime) of /proc/<pid>/stat (all threads) in seconds."""
    rest = _stat_fields(pid)      # rest[0] is field 3 (state)
    return int(rest[11]) / _CLK_TCK, int(rest[12]) / _CLK_TCK


def _descendants(pid):
    """PIDs of the live descendants of pid (children, grandchildren, ...)."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            ppid = int(_stat_fields(int(name))[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for kid in children.get(todo.pop(), []):
            out.append(kid)
            todo.append(kid)
    return out


def _tail_file(path, n):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 256 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-n:])


def _can_connect(host, port, timeout=0.5):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class _MeasuredProcess:
    """Common start/stop/cpu/log plumbing.  Subclasses set self.workdir,
    self.port, self.host, self._argv, self._log_path and may override
    _popen_kwargs() and log_tail()."""

    name = "process"

    def __init__(self):
        self.proc = None
        self.pid = None
        self._stopped = False
        self._created_workdir = False
        self._log_cache = None
        self._log_fh = None

    # context manager
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def _popen_kwargs(self):
        return {}

    @property
    def returncode(self):
        if self.proc is None:
            return None
        return self.proc.poll()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout=15):
        if self.proc is not None:
            raise ProcessError("%s already started" % self.name)
        _pgc.install_sigterm_handler()
        atexit.register(self.stop)
        self._log_fh = open(self._log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                self._argv, cwd=self.workdir, stdin=subprocess.DEVNULL,
                stdout=self._log_fh, stderr=subprocess.STDOUT,
                env=_pgc.clean_env(), **self._popen_kwargs())
        except OSError as e:
            self.stop()
            raise ProcessError("cannot start %s (%s): %s"
                               % (self.name, " ".join(self._argv), e))
        self.pid = self.proc.pid
        deadline = time.monotonic() + timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                tail = self.log_tail()
                self.stop()
                raise ProcessError("%s exited with code %s during startup "
                                   "(%s)\n--- log tail ---\n%s"
                                   % (self.name, rc, " ".join(self._argv), tail))
            if _can_connect(self.host, self.port):
                return self
            if time.monotonic() >= deadline:
                tail = self.log_tail()
                self.stop()
                raise ProcessError("%s did not accept TCP connections on "
                                   "%s:%s within %ss\n--- log tail ---\n%s"
                                   % (self.name, self.host, self.port,
                                      timeout, tail))
            time.sleep(0.05)

    def cpu_seconds(self, include_descendants=True):
        """CPU seconds (user+system, all threads) used so far by the process
        and, by default, by its live descendant processes."""
        if self.pid is None:
            raise ProcessError("%s not started" % self.name)
        total = proc_cpu_seconds(self.pid)
        if include_descendants:
            for kid in _descendants(self.pid):
                try:
                    total += proc_cpu_seconds(kid)
                except (OSError, IndexError, ValueError):
                    pass
        return total

    def cpu_times(self):
        """(user, system) CPU seconds used so far by the process (every thread)."""
        if self.pid is None:
            raise ProcessError("%s not started" % self.name)
        return proc_cpu_times(self.pid)

    def _read_log(self, n):
        return _tail_file(self._log_path, n)

    def log_tail(self, n=50):
        if self._log_cache is not None:
            return "\n".join(self._log_cache.splitlines()[-n:])
        return self._read_log(n)

    def stop(self):
        """SIGTERM, wait up to 10 s, then SIGKILL.  Idempotent."""
        if self._stopped:
            return
        with _pgc._Cleanup():
            if self.proc is not None and self.proc.poll() is None:
                try:
                    self.proc.send_signal(signal.SIGTERM)
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    try:
                        self.proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        pass
                except ProcessLookupError:
                    pass
            if self._log_fh is not None:
                self._log_fh.close()
                self._log_fh = None
            self._log_cache = self._read_log(1000)
            if self._created_workdir and not os.environ.get("TERN_KEEP_TMP"):
                shutil.rmtree(self.workdir, ignore_errors=True)
            self._stopped = True
            try:
                atexit.unregister(self.stop)
            except Exception:
                pass


def _parse_listen(config_text):
    """(host, port) from the 'listen = host:port' line of a tern.ini."""
    for line in config_text.splitlines():
        line = re.split(r"\s[;#]", line, 1)[0].strip()
        m = re.match(r"listen\s*=\s*(.+)$", line)
        if m:
            value = m.group(1).split(",")[0].strip()  # the first of several addresses
            host, sep, port = value.rpartition(":")
            if not sep or not port.isdigit():
                break
            host = host.strip("[]")
            if host in ("", "*", "0.0.0.0"):
                host = "127.0.0.1"
            elif host == "::":
                host = "::1"
            return host, int(port)
    raise ValueError("no 'listen = host:port' line in tern config")


def with_io_backend(config_text):
    """config_text with [tern] io_backend = $TERN_IO_BACKEND when that is set
    (tests/run.sh runs integration cases once more with TERN_IO_BACKEND=epoll),
    unless the config names its own io_backend. A file a test rewrites for a
    reload lacks it: io_backend takes a restart, so tern stays on epoll."""
    backend = os.environ.get("TERN_IO_BACKEND", "")
    if not backend or re.search(r"(?m)^\s*io_backend\s*=", config_text):
        return config_text
    setting = "io_backend = %s\n" % backend
    lines = config_text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.strip() == "[tern]":
            head = "".join(lines[:i + 1])
            return head + ("" if head.endswith("\n") else "\n") + setting + "".join(lines[i + 1:])
    return "[tern]\n" + setting + config_text


class TernProcess(_MeasuredProcess):
    """binary -c tern.ini, run in workdir (a fresh temp dir by default, removed
    on stop() unless TERN_KEEP_TMP is set); output goes to workdir/tern.log.
    wrapper: argv run in front of the binary, which execs it (no_uring_exec).
    The config gets $TERN_IO_BACKEND (with_io_backend)."""

    name = "tern"

    def __init__(self, binary, config_text, workdir=None, extra_files=None, wrapper=()):
        super().__init__()
        self.binary = os.path.abspath(binary)
        config_text = with_io_backend(config_text)
        self.config_text = config_text
        self.host, self.port = _parse_listen(config_text)
        if workdir is None:
            workdir = tempfile.mkdtemp(prefix="tern-proc-")
            self._created_workdir = True
        else:
            os.makedirs(workdir, exist_ok=True)
        self.workdir = os.path.abspath(workdir)
        with open(os.path.join(self.workdir, "tern.ini"), "w") as f:
            f.write(config_text)
        for name, content in (extra_files or {}).items():
            path = os.path.join(self.workdir, name)
            mode = "wb" if isinstance(content, bytes) else "w"
            with open(path, mode) as f:
                f.write(content)
        self._log_path = os.path.join(self.workdir, "tern.log")
        self._argv = list(wrapper) + [self.binary, "-c", "tern.ini"]

    def start(self, timeout=15):
        if not os.access(self.binary, os.X_OK):
            raise ProcessError("tern binary not found or not executable: %s "
                               "(build it: meson compile -C build)"
                               % self.binary)
        return super().start(timeout)


class RelayProcess(_MeasuredProcess):
    """bench/relay.c (built by the caller) from a free port to 127.0.0.1:server_port."""

    name = "relay"

    def __init__(self, binary, server_port):
        super().__init__()
        self.host, self.port = "127.0.0.1", free_port()
        self.workdir = tempfile.mkdtemp(prefix="tern-relay-")
        self._created_workdir = True
        self._log_path = os.path.join(self.workdir, "relay.log")
        self._argv = [binary, str(self.port), str(server_port)]


class PgBouncerProcess(_MeasuredProcess):
    """pgbouncer in front of server_host:server_port (a host, or PostgreSQL's socket directory), trust auth, run as the
    postgres OS user when we are root (the PID held is pgbouncer itself).
    users: names written to auth_file with an empty password (trust auth
    still needs the user to be listed there)."""

    name = "pgbouncer"
    binary = "/usr/sbin/pgbouncer"

    def __init__(self, server_port, pool_size, pool_mode="transaction",
                 max_client_conn=1000, users=("postgres",), extra_settings=(), server_host="127.0.0.1"):
        super().__init__()
        self.server_port = server_port
        self.pool_size = pool_size
        self.pool_mode = pool_mode
        self.max_client_conn = max_client_conn
        self.host = "127.0.0.1"
        self.port = free_port()
        binary = self.binary if os.access(self.binary, os.X_OK) else \
            shutil.which("pgbouncer")
        if not binary:
            raise ProcessError("pgbouncer not found (install the Debian "
                               "'pgbouncer' package)")
        self._pg_user = None
        if os.geteuid() == 0:
            try:
                self._pg_user = pwd.getpwnam("postgres")
            except KeyError:
                raise ProcessError("pgbouncer refuses to run as root and "
                                   "there is no 'postgres' OS user")
        self.workdir = tempfile.mkdtemp(prefix="tern-pgbouncer-")
        self._created_workdir = True
        ini = os.path.join(self.workdir, "pgbouncer.ini")
        userlist = os.path.join(self.workdir, "userlist.txt")
        self._pgb_log = os.path.join(self.workdir, "pgbouncer.log")
        self._log_path = os.path.join(self.workdir, "pgbouncer.out")
        # auth_type=trust still requires the user name to be listed in
        # auth_file (pgbouncer: '"trust" authentication failed' otherwise).
        with open(userlist, "w") as f:
            for user in users:
                f.write('"%s" ""\n' % user.replace('"', '""'))
        with open(ini, "w") as f:
            f.write("\n".join([
                "[databases]",
                "* = host=%s port=%d" % (server_host, server_port),
                "",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                "listen_port = %d" % self.port,
                "unix_socket_dir =",
                "auth_type = trust",
                "auth_file = %s" % userlist,
                "pool_mode = %s" % pool_mode,
                "default_pool_size = %d" % pool_size,
                "max_client_conn = %d" % max_client_conn,
                "max_db_connections = 0",
                "logfile = %s" % self._pgb_log,
                "pidfile = %s" % os.path.join(self.workdir, "pgbouncer.pid"),
                "ignore_startup_parameters = extra_float_digits",
            ] + list(extra_settings) + [""]))
        if self._pg_user is not None:
            for path in (self.workdir, ini, userlist):
                os.chown(path, self._pg_user.pw_uid, self._pg_user.pw_gid)
        self._argv = [binary, ini]

    def _popen_kwargs(self):
        if self._pg_user is None:
            return {}
        return {"user": self._pg_user.pw_uid, "group": self._pg_user.pw_gid,
                "extra_groups": []}

    def _read_log(self, n):
        # pgbouncer logs to stderr (pgbouncer.out) and to its logfile; the
        # former also catches errors from before the logfile is opened.
        out = _tail_file(self._log_path, n)
        return out if out.strip() else _tail_file(self._pgb_log, n)
