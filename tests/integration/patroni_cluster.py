"""Throwaway Patroni cluster (one etcd, Patroni-managed PostgreSQL nodes) for tern's tests.

Standard library only.  etcd (v3 API, Patroni's ``etcd3:`` DCS) and one Patroni per node listen
on 127.0.0.1 on free ports; all files live under one temp dir (``base_dir``).  As root, Patroni
and so PostgreSQL run as the ``postgres`` OS user (runuser).  Waits are bounded and fail with
/cluster and log tails; only processes started here are ended, by PID; ``close()`` is idempotent
and registered with atexit.  Usage: ``with PatroniCluster() as pc: pc.switchover(to="pg2");
killed = pc.kill_leader(); pc.wait_leader(); pc.restart_node(killed)``.
"""

import atexit
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

try:
    from . import pgcluster as _pgc  # imported as a package
except ImportError:
    import sys as _sys
    _here = os.path.dirname(os.path.abspath(__file__))
    if _here not in _sys.path:
        _sys.path.insert(0, _here)
    import pgcluster as _pgc

__all__ = ["PatroniCluster", "PatroniNode", "PatroniError"]

PATRONI, PATRONICTL, ETCD = "/usr/bin/patroni", "/usr/bin/patronictl", "/usr/bin/etcd"
# the timeline a primary currently writes, from its WAL file name
_TLI_SQL = "select ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int"


class PatroniError(RuntimeError):
    """The cluster could not be set up, or did not reach an expected state in time."""


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _kill(pids, sigs, timeout):
    """Send each signal in turn to those of pids still alive, then wait up to timeout for them."""
    for sig in sigs:
        pids = [p for p in pids if _pgc._pid_alive(p)]
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while any(_pgc._pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)


class PatroniNode:
    """One member: name, pg_port, api_port, its files, and the runuser process ``proc``
    whose only child is Patroni itself (``pid``; None while not running)."""

    def __init__(self, base_dir, name):
        self.name, self.pg_port, self.api_port = name, _pgc.free_port(), _pgc.free_port()
        self.dir = os.path.join(base_dir, name)
        self.data_dir = os.path.join(self.dir, "data")
        self.config = os.path.join(self.dir, "patroni.yml")
        self.log = os.path.join(self.dir, "patroni.log")  # Patroni's and PostgreSQL's stderr
        self.proc = self.pid = None

    def postmaster_pid(self):
        """PID in postmaster.pid if that process is alive and is this node's postgres."""
        try:
            with open(os.path.join(self.data_dir, "postmaster.pid")) as f:
                pid = int(f.readline().strip())
        except (OSError, ValueError):
            return None
        return pid if _pgc._pid_alive(pid) and self.data_dir in _cmdline(pid) else None


class PatroniCluster:
    """etcd + Patroni nodes ``names``: the first bootstraps and leads, the others clone from it.
    ttl / loop_wait / retry_timeout go to the DCS config (ttl >= loop_wait + 2 * retry_timeout);
    a killed leader is replaced about ttl seconds after it last renewed its lock."""

    scope = "tern"

    def __init__(self, names=("pg1", "pg2"), ttl=10, loop_wait=1, retry_timeout=3):
        if ttl < loop_wait + 2 * retry_timeout:
            raise PatroniError("ttl must be >= loop_wait + 2 * retry_timeout")
        for path in (PATRONI, PATRONICTL, ETCD):
            if not os.access(path, os.X_OK):
                raise PatroniError("%s missing (Debian packages patroni, etcd-server)" % path)
        self.names = list(names)
        self.ttl, self.loop_wait, self.retry_timeout = ttl, loop_wait, retry_timeout
        self.bindir = _pgc.find_pg_bindir()
        self.base_dir = self.etcd_port = self._etcd = self._etcd_log = self._last_killed = None
        self.nodes = []
        self._started = self._closed = False
        self._pg_user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
        return False

    @property
    def api_ports(self):
        return [n.api_port for n in self.nodes]

    def node(self, name):
        try:
            return next(n for n in self.nodes if n.name == name)
        except StopIteration:
            raise PatroniError("no node named %r" % name) from None

    # ------------------------------------------------------------ start

    def start(self):
        """Start etcd, bootstrap the first node as leader, then clone and start the others."""
        if self._started:
            raise PatroniError("PatroniCluster.start() called twice")
        self._started = True
        _pgc.install_sigterm_handler()
        atexit.register(self.close)
        self.base_dir = tempfile.mkdtemp(prefix="tern-patroni-")
        self._chown(self.base_dir)
        try:
            self._start_etcd()
            for name in self.names:
                node = PatroniNode(self.base_dir, name)
                self.nodes.append(node)
                os.mkdir(node.dir, 0o700)
                self._chown(node.dir)
                self._write_config(node)
                self._spawn(node)
                if len(self.nodes) == 1:
                    self.wait_leader(name, timeout=60)
                else:
                    self._wait_replica(node, timeout=60)
        except BaseException:
            self.close()
            raise
        return self

    def _chown(self, path):
        if self._pg_user is not None:
            os.chown(path, self._pg_user.pw_uid, self._pg_user.pw_gid)

    def _start_etcd(self):
        self.etcd_port, peer_port = _pgc.free_port(), _pgc.free_port()
        client, peer = "http://127.0.0.1:%d" % self.etcd_port, "http://127.0.0.1:%d" % peer_port
        self._etcd_log = os.path.join(self.base_dir, "etcd.log")
        argv = [ETCD, "--name", "etcd0", "--data-dir", os.path.join(self.base_dir, "etcd"),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", "etcd0=" + peer, "--initial-cluster-state", "new",
                "--logger", "zap", "--log-level", "warn"]
        with open(self._etcd_log, "ab") as log:
            self._etcd = subprocess.Popen(argv, cwd=self.base_dir, env=_pgc.clean_env(),
                                          stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                          start_new_session=True)

        def healthy():
            if self._etcd.poll() is not None:
                raise PatroniError("etcd exited (%s)\n%s" % (self._etcd.returncode, self.logs()))
            try:
                return self._http_json(self.etcd_port, "/health").get("health") == "true"
            except (OSError, ValueError):
                return False
        self._wait(healthy, 10, "etcd healthy")

    def _write_config(self, node):
        """Patroni config (JSON is YAML); cluster-wide settings go under bootstrap.dcs."""
        params = {"shared_buffers": "32MB", "max_connections": 100, "wal_level": "replica",
                  "hot_standby": "on", "max_wal_senders": 10, "max_replication_slots": 10}
        hba = ["local all all trust", "host all all 127.0.0.1/32 trust",
               "local replication all trust", "host replication all 127.0.0.1/32 trust"]
        conf = {
            "scope": self.scope, "name": node.name,
            "restapi": {"listen": "127.0.0.1:%d" % node.api_port,
                        "connect_address": "127.0.0.1:%d" % node.api_port},
            "etcd3": {"hosts": ["127.0.0.1:%d" % self.etcd_port]},
            "bootstrap": {
                # check_timeline: never promote a replica still on an older timeline (it would
                # fork the history under the same timeline id, which pg_rewind cannot detect)
                "dcs": {"ttl": self.ttl, "loop_wait": self.loop_wait,
                        "retry_timeout": self.retry_timeout, "check_timeline": True,
                        "maximum_lag_on_failover": 1048576,
                        "postgresql": {"use_pg_rewind": True, "parameters": params}},
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}]},
            "postgresql": {
                "listen": "127.0.0.1:%d" % node.pg_port,
                "connect_address": "127.0.0.1:%d" % node.pg_port,
                "data_dir": node.data_dir, "bin_dir": self.bindir,
                "pgpass": os.path.join(node.dir, "pgpass"),
                "authentication": {"superuser": {"username": "postgres"},
                                   "replication": {"username": "replicator"}},
                "parameters": {"unix_socket_directories": node.dir},
                "pg_hba": hba, "basebackup": [{"checkpoint": "fast"}], "use_pg_rewind": True,
                "remove_data_directory_on_rewind_failure": True,
                "remove_data_directory_on_diverged_timelines": True}}
        with open(node.config, "w") as f:
            json.dump(conf, f)

    def _spawn(self, node):
        """Start node's Patroni (via runuser as root) and find Patroni's own PID."""
        argv = [PATRONI, node.config]
        if self._pg_user is not None:
            argv = ["runuser", "-u", "postgres", "--"] + argv
        with open(node.log, "ab") as log:
            node.proc = subprocess.Popen(argv, cwd=node.dir, env=_pgc.clean_env({"LC_ALL": "C.UTF-8"}),
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True)
        if self._pg_user is None:
            node.pid = node.proc.pid
            return

        def found():
            kids = [p for p in _pgc._children_of(node.proc.pid) if PATRONI in _cmdline(p)]
            node.pid = kids[0] if kids else None
            return node.pid is not None or node.proc.poll() is not None
        self._wait(found, 10, "patroni %s process" % node.name)
        if node.pid is None:
            raise PatroniError("patroni %s exited at once (%s)\n%s"
                               % (node.name, node.proc.returncode, self.logs()))

    # ------------------------------------------------------------ queries

    def _http_json(self, port, path):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=3) as r:
            return json.loads(r.read())

    def cluster(self):
        """Parsed GET /cluster from the first node whose REST API answers."""
        errors = []
        for n in self.nodes:
            try:
                return self._http_json(n.api_port, "/cluster")
            except (OSError, ValueError) as e:
                errors.append("%s: %s" % (n.name, e))
        raise PatroniError("no Patroni REST API answered /cluster: %s" % "; ".join(errors))

    def members(self):
        """{name: member} from cluster(); {} if no REST API answers."""
        try:
            return {m["name"]: m for m in self.cluster().get("members", [])}
        except PatroniError:
            return {}

    def leader(self):
        """Name of the member with role leader in /cluster, or None."""
        return next((n for n, m in self.members().items() if m.get("role") == "leader"), None)

    def psql(self, name, sql, check=True, timeout=30):
        """Run sql with psql -X -A -t as postgres on node name's PostgreSQL; return stdout."""
        argv = [os.path.join(self.bindir, "psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                "-h", "127.0.0.1", "-p", str(self.node(name).pg_port), "-U", "postgres",
                "-d", "postgres", "-c", sql]
        try:
            r = subprocess.run(argv, env=_pgc.clean_env({"PGCONNECT_TIMEOUT": "5"}),
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise PatroniError("psql timed out after %ss on %s: %s" % (timeout, name, sql))
        if check and r.returncode != 0:
            raise PatroniError("psql failed (exit %d) on %s: %s\n%s" % (
                r.returncode, name, sql, r.stderr.decode("utf-8", "replace").strip()))
        return r.stdout.decode("utf-8", "replace").rstrip("\n")

    def _sql(self, name, sql):
        """psql's output, or None on any error (for polling)."""
        try:
            return self.psql(name, sql, timeout=10).strip()
        except PatroniError:
            return None

    # ------------------------------------------------------------ waits

    def _wait(self, cond, timeout, what):
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() >= deadline:
                try:
                    last = json.dumps(self.cluster())
                except PatroniError as e:
                    last = str(e)
                raise PatroniError("timed out after %.0fs waiting for %s\n/cluster: %s\n%s"
                                   % (timeout, what, last, self.logs()))
            time.sleep(0.1)

    def wait_leader(self, name=None, timeout=40):
        """Wait until /cluster shows name (None: any member but the one kill_leader last killed)
        as leader with state running and its PostgreSQL accepts writes; return its name."""
        found = []

        def ok():
            for n, m in self.members().items():
                if m.get("role") == "leader" and m.get("state") == "running" and \
                        (n == name if name else n != self._last_killed) and \
                        self._sql(n, "select pg_is_in_recovery()") == "f":
                    found.append(n)
                    return True
            return False
        self._wait(ok, timeout, "leader %s" % (name or "other than %s" % self._last_killed))
        return found[0]

    def _wait_replica(self, node, timeout):
        """Wait until node is a running replica in /cluster whose WAL receiver streams the
        leader's current timeline (a former leader shows "running" on its old timeline for a
        moment before Patroni stops it for pg_rewind)."""
        def ok():
            leader, m = self.leader(), self.members().get(node.name, {})
            if leader is None or m.get("role") != "replica" or m.get("state") != "running":
                return False
            tli = self._sql(node.name, "select received_tli from pg_stat_wal_receiver "
                                       "where status = 'streaming'")
            return bool(tli) and tli == self._sql(leader, _TLI_SQL)
        self._wait(ok, timeout, "replica %s streaming from the leader" % node.name)

    # ------------------------------------------------------------ control

    def switchover(self, to, timeout=30):
        """patronictl switchover from the current leader to ``to``; wait until it leads and every
        other running node streams from it (so that a failover right after is safe)."""
        current = self.leader()
        if current is None:
            raise PatroniError("switchover: no leader\n%s" % self.logs())
        argv = [PATRONICTL, "-c", self.node(to).config, "switchover", "--leader", current,
                "--candidate", to, "--force"]
        deadline = time.monotonic() + timeout
        try:
            r = subprocess.run(argv, env=_pgc.clean_env({"LC_ALL": "C.UTF-8"}), cwd=self.base_dir,
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise PatroniError("patronictl switchover timed out after %ss\n%s" % (timeout, self.logs()))
        if r.returncode != 0:
            raise PatroniError("patronictl switchover failed (exit %d):\n%s\n%s" % (
                r.returncode, (r.stdout + r.stderr).decode("utf-8", "replace"), self.logs()))
        self.wait_leader(to, max(1, deadline - time.monotonic()))
        for x in self.nodes:
            if x.name != to and x.pid is not None:
                self._wait_replica(x, max(1, deadline - time.monotonic()))

    def kill_leader(self):
        """SIGKILL the leader's Patroni, then its postmaster (by PID); wait until the postmaster's
        children have exited too; return the killed node's name."""
        name = self.leader()
        if name is None:
            raise PatroniError("kill_leader: no leader\n%s" % self.logs())
        node = self.node(name)
        postmaster = node.postmaster_pid()
        orphans = _pgc._children_of(postmaster) if postmaster else []
        _kill([node.pid], [signal.SIGKILL], 10)
        _kill([postmaster] if postmaster else [], [signal.SIGKILL], 10)
        node.proc.wait(timeout=10)
        node.pid, self._last_killed = None, name
        # backends notice the postmaster's death on their own; a restart needs them gone
        self._wait(lambda: not any(_pgc._pid_alive(p) for p in orphans), 10,
                   "children of %s's killed postmaster to exit" % name)
        return name

    def restart_node(self, name, timeout=60):
        """Start a killed node's Patroni again; wait until it streams as a replica (a former
        leader is rewound with pg_rewind, or re-cloned if that fails)."""
        node = self.node(name)
        if node.pid is not None and _pgc._pid_alive(node.pid):
            raise PatroniError("restart_node: patroni %s is still running" % name)
        self._spawn(node)
        self._wait_replica(node, timeout)

    def logs(self, n=40):
        """Tails of etcd's and every node's log, for failure messages."""
        parts = []
        for label, path in [("etcd", self._etcd_log)] + [("patroni " + x.name, x.log) for x in self.nodes]:
            if path and os.path.exists(path):
                parts.append("----- %s log (%s) -----\n%s" % (label, path, _pgc._tail(path, n)))
        return "\n".join(parts)

    # ------------------------------------------------------------ stop

    def close(self):
        """SIGTERM every Patroni (it stops its PostgreSQL; SIGKILL after 30 s), kill postmasters
        left behind, stop etcd, remove base_dir.  Idempotent; registered with atexit."""
        if self._closed:
            return
        with _pgc._Cleanup():
            _kill([x.pid for x in self.nodes if x.pid], [signal.SIGTERM, signal.SIGKILL], 30)
            _kill([p for p in (x.postmaster_pid() for x in self.nodes) if p],
                  [signal.SIGQUIT, signal.SIGKILL], 10)
            for x in self.nodes:
                if x.proc is not None:
                    try:
                        x.proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:  # Patroni PID never found: runuser
                        x.proc.terminate()             # passes SIGTERM on (SIGKILL after 2 s)
                        x.proc.wait(timeout=10)
                x.pid = None
            if self._etcd is not None:
                _kill([self._etcd.pid], [signal.SIGTERM, signal.SIGKILL], 10)
                self._etcd.wait(timeout=10)
            if self.base_dir and os.path.isdir(self.base_dir):
                shutil.rmtree(self.base_dir, ignore_errors=True)
            self._closed = True
            atexit.unregister(self.close)


if __name__ == "__main__":  # self-check: python3 patroni_cluster.py
    timings, t0 = {}, time.monotonic()

    def step(label):
        global t0
        timings[label], t0 = time.monotonic() - t0, time.monotonic()
        print("after %s: %s" % (label, json.dumps(pc.cluster())))
    with PatroniCluster() as pc:
        step("bootstrap")
        pc.switchover(to="pg2")
        step("switchover")
        assert pc.kill_leader() == "pg2"
        pc.wait_leader("pg1", timeout=40)
        step("killed-leader failover")
        pc.restart_node("pg2")
        step("rejoin")
        pc.psql("pg1", "create table t as select 1 as x")
    print("timings:", ", ".join("%s %.1fs" % kv for kv in timings.items()))
