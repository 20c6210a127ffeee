#!/usr/bin/python3
"""Self-test of tests/integration/pgcluster.py.

Starts a primary + streaming replica, checks that the primary answers, the
replica is in recovery and catches up with a write within a deadline (also
after a primary restart), then that stop() removes the temp dir, the
postmasters and their children are gone and a second stop() is harmless.
Also checks a primary-only cluster.

Exit 0 when every check passed; the last line is "N passed, N failed".
"""

import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pgcluster  # noqa: E402
from pgcluster import PgCluster  # noqa: E402

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


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:  # includes SystemExit from SIGTERM
        FAILED.append("harness: %r" % e)
        traceback.print_exc()
    print("%d passed, %d failed" % (len(PASSED), len(FAILED)), flush=True)
    sys.exit(1 if FAILED else 0)
