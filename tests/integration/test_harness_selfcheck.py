#!/usr/bin/python3
"""Self-test of tests/integration/pgcluster.py.

Starts a primary + streaming replica, checks that the primary answers, the
replica is in recovery and catches up with a write within a deadline (also
after a primary restart), then that stop() removes the temp dir, the
postmasters and their children are gone and a second stop() is harmless.
Also checks a primary-only cluster, and tlscluster.py's TLS-only primary + replica: verify-full
against the throwaway CA works for host=localhost and fails for host=127.0.0.1 (the certificate names
localhost alone), another CA fails verify-ca, a login without TLS is refused, the replica streams over
TLS, and a client certificate logs in a user whose hba line says cert.

Exit 0 when every check passed; the last line is "N passed, N failed".
"""

import os
import shutil
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pgcluster  # noqa: E402
from pgcluster import PgCluster  # noqa: E402
from tlscluster import ThrowawayCA, certificate_directory, tls_only_cluster  # noqa: E402

PASSED = []
FAILED = []


def check(name, fn):
    t0 = time.monotonic()
    try:
        fn()
    except Exception as e:  # report and go on
        FAILED.append(name)
        print("FAIL %s (%.1fs): %s" % (name, time.monotonic() - t0, e),
              flush=True)
        if not isinstance(e, AssertionError):
            traceback.print_exc()
        return False
    PASSED.append(name)
    print("PASS %s (%.1fs)" % (name, time.monotonic() - t0), flush=True)
    return True


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def procs_mentioning(text):
    """PIDs of live (non-zombie) processes whose command line contains text."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if text in cmd and pgcluster._pid_alive(int(name)):
            found.append((int(name), cmd.strip()))
    return found


def wait_gone(pids, timeout):
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if pgcluster._pid_alive(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def main():
    pgcluster.install_sigterm_handler()

    def bindir():
        d = pgcluster.find_pg_bindir()
        expect(os.access(os.path.join(d, "initdb"), os.X_OK),
               "no initdb in %s" % d)
    check("find_pg_bindir", bindir)

    def port():
        p = pgcluster.free_port()
        expect(1024 <= p <= 65535, "odd port %r" % p)
    check("free_port", port)

    c = PgCluster(with_replica=True)
    state = {}
    if not check("start primary + replica", c.start):
        c.stop()
        return

    def primary_answers():
        expect(c.host == "127.0.0.1", "host is %r" % c.host)
        expect(c.psql("select 40 + 2") == "42", "select 40 + 2 did not say 42")
        expect(c.psql("select pg_is_in_recovery()") == "f",
               "primary is in recovery")
        expect(c.psql("show fsync") == "off", "not durable but fsync is on")
        expect(c.psql("show listen_addresses") == "127.0.0.1",
               "listen_addresses is not 127.0.0.1")
    check("primary answers", primary_answers)

    def replica_in_recovery():
        expect(c.replica_port not in (None, c.primary_port),
               "replica_port is %r" % c.replica_port)
        expect(c.psql("select pg_is_in_recovery()", port=c.replica_port) == "t",
               "replica is not in recovery")
    check("replica in recovery", replica_in_recovery)

    def replica_catches_up(value):
        def run():
            c.psql("create table if not exists selfcheck(v int); "
                   "insert into selfcheck values (%d)" % value)
            t0 = time.monotonic()
            c.wait_replica_caught_up(timeout=30)
            got = c.psql("select count(*) from selfcheck where v = %d" % value,
                         port=c.replica_port)
            expect(got == "1", "replica sees %r rows with v=%d after catch-up"
                   % (got, value))
            expect(time.monotonic() - t0 < 30, "catch-up took too long")
        return run
    check("replica catches up with a write", replica_catches_up(1))

    def restart():
        c.restart_primary()
        expect(c.psql("select 1") == "1", "primary does not answer after restart")
    check("restart_primary", restart)
    check("replica catches up after a primary restart", replica_catches_up(2))

    def crash_and_start():
        c.stop_primary()
        c.start_primary()
        expect(c.psql("select count(*) from selfcheck") == "2",
               "lost rows after an immediate stop")
    check("stop_primary(immediate) + start_primary", crash_and_start)

    def logs():
        text = c.logs()
        expect("primary log" in text and "replica log" in text,
               "logs() lacks a server: %r" % text[:200])
    check("logs()", logs)

    state["pids"] = list(c.postmaster_pids().values())
    state["kids"] = [k for p in state["pids"] for k in pgcluster._children_of(p)]
    state["base"] = c.base_dir

    def stopped():
        expect(len(state["pids"]) == 2, "expected 2 postmasters, have %r"
               % state["pids"])
        c.stop()
        expect(not os.path.exists(state["base"]),
               "%s still exists" % state["base"])
        alive = wait_gone(state["pids"] + state["kids"], 10)
        expect(not alive, "processes still alive after stop(): %r" % alive)
        left = procs_mentioning(state["base"])
        expect(not left, "processes still mention %s: %r" % (state["base"], left))
        c.stop()  # second call must be harmless
    check("stop() removes dir and postmasters; twice is safe", stopped)

    def primary_only():
        with PgCluster(with_replica=False, extra_conf={"work_mem": "8MB"}) as p:
            expect(p.replica_port is None, "replica_port is %r" % p.replica_port)
            expect(p.psql("show work_mem") == "8MB", "extra_conf not applied")
            base, pids = p.base_dir, list(p.postmaster_pids().values())
        expect(not os.path.exists(base), "%s still exists" % base)
        expect(not wait_gone(pids, 10), "postmaster alive after exit")
    check("primary-only cluster as a context manager", primary_only)

    tls_checks()


def psql_conninfo(conninfo, sql):
    """psql -c sql with a conninfo string: (exit code, stdout, stderr)."""
    r = subprocess.run(["psql", "-X", "-A", "-t", "-c", sql, conninfo], capture_output=True, text=True,
                       timeout=60, env=pgcluster.clean_env({"PGCONNECT_TIMEOUT": "10"}))
    return r.returncode, r.stdout.strip(), r.stderr.strip()


def tls_checks():
    directory = certificate_directory("tern-tls-selfcheck-")
    try:
        ca = ThrowawayCA(os.path.join(directory, "ca"), "ca")
        wrong = ThrowawayCA(os.path.join(directory, "wrong"), "wrong")
        server = ca.issue("server", "tern test server", dns=("localhost",))
        client = ca.issue("cert_user", "cert_user")
        c = tls_only_cluster(ca, server, hba_lines=["hostssl all cert_user 127.0.0.1/32 cert"])
        if not check("start a TLS-only primary + replica", c.start):
            c.stop()
            return
        try:
            tls_cluster_checks(c, ca, wrong, client)
        finally:
            c.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def tls_cluster_checks(c, ca, wrong, client):
    base = "port=%d user=postgres dbname=postgres " % c.primary_port
    ssl_row = "select ssl, version from pg_stat_ssl where pid = pg_backend_pid()"

    def verify_full_by_name():
        rc, out, err = psql_conninfo(base + "host=localhost sslmode=verify-full sslrootcert=" + ca.crt, ssl_row)
        expect(rc == 0 and out.startswith("t|TLSv1."), "verify-full to localhost: %r %r" % (out, err))
    check("TLS: verify-full with host=localhost", verify_full_by_name)

    def verify_full_by_address():
        rc, out, err = psql_conninfo(base + "host=127.0.0.1 sslmode=verify-full sslrootcert=" + ca.crt, "select 1")
        expect(rc != 0 and 'does not match host name "127.0.0.1"' in err, "refused: %r %r" % (out, err))
        rc, out, err = psql_conninfo(base + "host=127.0.0.1 sslmode=verify-ca sslrootcert=" + ca.crt, "select 1")
        expect(rc == 0 and out == "1", "verify-ca does not check the name: %r" % err)
    check("TLS: verify-full with host=127.0.0.1 fails", verify_full_by_address)

    def other_ca():
        rc, out, err = psql_conninfo(base + "host=localhost sslmode=verify-ca sslrootcert=" + wrong.crt, "select 1")
        expect(rc != 0 and "certificate verify failed" in err, "refused: %r %r" % (out, err))
    check("TLS: verify-ca against another CA fails", other_ca)

    def no_tls():
        rc, out, err = psql_conninfo(base + "host=127.0.0.1 sslmode=disable", "select 1")
        expect(rc != 0 and 'no encryption' in err, "refused by pg_hba.conf: %r %r" % (out, err))
    check("TLS: a login without TLS is refused", no_tls)

    def replica_over_tls():
        expect(c.psql("select pg_is_in_recovery()", port=c.replica_port) == "t", "the replica is in recovery")
        got = c.psql("select s.ssl from pg_stat_replication r join pg_stat_ssl s using (pid)")
        expect(got == "t", "the walsender's connection is TLS: %r" % got)
        c.psql("create table tls_selfcheck(a int); insert into tls_selfcheck values (1)")
        c.wait_replica_caught_up(timeout=30)
        expect(c.psql("select count(*) from tls_selfcheck", port=c.replica_port) == "1", "replicated")
    check("TLS: the replica streams over TLS", replica_over_tls)

    def client_certificate():
        c.psql("create role cert_user login")
        user = "port=%d user=cert_user dbname=postgres host=localhost sslmode=verify-full sslrootcert=%s " % (
            c.primary_port, ca.crt)
        rc, out, err = psql_conninfo(user, "select 1")
        expect(rc != 0 and "connection requires a valid client certificate" in err,
               "no certificate: refused: %r %r" % (out, err))
        rc, out, err = psql_conninfo(user + "sslcert=%s sslkey=%s" % client,
                                     "select client_dn from pg_stat_ssl where pid = pg_backend_pid()")
        expect(rc == 0 and out == "/CN=cert_user", "the certificate's user: %r %r" % (out, err))
    check("TLS: a client certificate logs in its user", client_certificate)


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:  # includes SystemExit from SIGTERM
        FAILED.append("harness: %r" % e)
        traceback.print_exc()
    print("%d passed, %d failed" % (len(PASSED), len(FAILED)), flush=True)
    sys.exit(1 if FAILED else 0)
