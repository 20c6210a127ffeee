#!/usr/bin/env python3
"""tern follows an HA manager instead of guessing: [routing] patroni_api, and the fencing of a server
that says it is a primary but must not take writes.

Two parts:
  - against this suite's own primary + streaming replica (pgcluster.py), a stand-in Patroni REST API
    whose /cluster answer each case sets (what no real Patroni shows on demand: its leader differing from
    the server that says it is the primary, an API that answers 500 or goes away), and a primary made
    read-only (default_transaction_read_only, which a write would meet as 25006);
  - a real Patroni 3.0.2 cluster on etcd (patroni_cluster.py, Debian's packages) under pgbench through
    tern: `patronictl switchover`, then the leader killed (SIGKILL to Patroni and its postmaster). tern
    writes only to Patroni's leader; pgbench's clients see at most 08007 for a commit in flight.

usage: run_patroni.py [-k SUBSTRING]...   (TERN_BINARY and TERN_SOURCE_ROOT from meson)"""
import argparse
import contextlib
import http.server
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pgcluster import PgCluster, clean_env, find_pg_bindir, free_port  # noqa: E402
from procs import TernProcess  # noqa: E402
from run_failover import read_outcome, run, send_query  # noqa: E402
from run_integration import check, wait_for  # noqa: E402
from wire import Wire  # noqa: E402

ROOT = os.environ.get("TERN_SOURCE_ROOT", os.path.dirname(os.path.dirname(HERE)))
TERN = os.environ.get("TERN_BINARY", os.path.join(ROOT, "build", "tern"))
SUITE_DEADLINE_S = 600


class StandInPatroni:
    """An HTTP server answering GET /cluster with what the case set: `leader` (a member name with the
    host and port of one of the cluster's servers, or None for no running leader) and `status`."""

    def __init__(self, members, leader):
        self.members, self.leader, self.status, self.asked = members, leader, 200, 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                outer.asked += 1
                body = json.dumps({"members": [
                    {"name": name, "role": "leader" if name == outer.leader else "replica", "state": "running",
                     "host": "127.0.0.1", "port": port, "timeline": 1} for name, port in outer.members.items()],
                    "scope": "stand-in"}).encode() if self.path == "/cluster" else b"{}"
                self.send_response(outer.status if self.path == "/cluster" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def set(self, leader, status=200):
        self.leader, self.status = leader, status

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def status(t):
    return json.loads(urllib.request.urlopen("http://127.0.0.1:%d/api/status" % t.http_port, timeout=10).read())


def roles(t):
    """{server: (role, writes)} from tern's /api/status."""
    return {s["name"]: (s["role"], s["writes"]) for s in status(t)["servers"]}


@contextlib.contextmanager
def tern_running(servers, extra, tr_mode="session", interval_ms=100):
    """tern in front of `servers` ({name: port}), transaction pooling; it must exit 0 at the end."""
    http = free_port()
    config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 2\npool_mode = transaction\n[servers]\n%s"
              "[routing]\nmonitor_interval_ms = %d\n%s[pool]\npool_size = 20\n[limits]\nmax_client_conn = 200\n"
              "[replay]\ntr_mode = %s\nwrite_timeout_secs = 20\n[admin]\nhttp_listen = 127.0.0.1:%d\n"
              % (free_port(), "".join("%s = host=127.0.0.1 port=%d\n" % (n, p) for n, p in servers.items()),
                 interval_ms, extra, tr_mode, http))
    t = TernProcess(TERN, config)
    t.start()
    t.http_port = http
    try:
        yield t
    finally:
        t.stop()
        check(t.returncode == 0, "tern exited with %s:\n%s" % (t.returncode, t.log_tail(20)))


def client(t):
    w = Wire(t.port, timeout=30)
    w.login("postgres", "postgres")
    return w


def write_once(t, marker):
    """One autocommit INSERT through tern; its outcome."""
    with client(t) as w:
        return run(w, "insert into pt values ('%s')" % marker)


def writes_wait_while_the_api_names_no_running_leader_and_go_to_the_leader_it_names(pg):
    """The stand-in names the primary its leader: writes go there. It then names no running leader (a
    switchover between its two halves): the primary is fenced, a write waits (it is not refused, and it
    does not reach the server), and runs once the leader is named again. Named as the replica (which is
    in recovery: Patroni mid-promotion), writes wait too. An API that answers 500, or none at all: the
    last leader stays (a warning in the log). Two APIs, the first gone: the second is asked."""
    gone = free_port()  # nothing listens there
    with StandInPatroni({"pg_a": pg.primary_port, "pg_b": pg.replica_port}, "pg_a") as api, \
            tern_running({"primary": pg.primary_port, "replica": pg.replica_port},
                         "patroni_api = 127.0.0.1:%d, 127.0.0.1:%d\n" % (gone, api.port)) as t:
        check(roles(t) == {"primary": ("primary", True), "replica": ("standby", False)}, "leader: %r" % roles(t))
        o = write_once(t, "a1")
        check(o.kind == "ok", "a write to Patroni's leader: %r" % o)
        for leader in (None, "pg_b"):
            api.set(leader)
            wait_for(lambda: roles(t)["primary"][0] == "fenced", "the primary fenced (leader %s)" % leader, 10)
            with client(t) as w:
                send_query(w, "insert into pt values ('a2-%s')" % leader)
                time.sleep(0.5)  # (how long it waits does not matter: that it has not run does)
                check(pg.psql("select count(*) from pt where m = 'a2-%s'" % leader).strip() == "0",
                      "no write reached the fenced server (leader %s)" % leader)
                api.set("pg_a")
                o = read_outcome(w)
                check(o.kind == "ok" and o.status == "I", "the waiting write ran once a leader was named: %r" % o)
            check(pg.psql("select count(*) from pt where m = 'a2-%s'" % leader).strip() == "1", "once")
        for broken in ("status 500", "no API"):
            if broken == "status 500":
                api.set("pg_a", status=500)
            else:
                api.stop()
            time.sleep(0.5)  # several monitor rounds without an answer
            check(roles(t)["primary"] == ("primary", True), "%s: the last leader stays: %r" % (broken, roles(t)))
            o = write_once(t, "a3")
            check(o.kind == "ok", "%s: writes go on: %r" % (broken, o))
        check("no Patroni API answered" in t.log_tail(60), "the log says Patroni is unreachable")
    return 6


def a_leader_named_by_its_member_name_or_by_an_address_of_no_server(pg):
    """Patroni's member is matched to a [servers] key by its name (host and port then do not matter),
    else by host and port; a leader matching no server means no writes (and a warning)."""
    with StandInPatroni({"primary": 1, "elsewhere": 2}, "primary") as api, \
            tern_running({"primary": pg.primary_port, "replica": pg.replica_port},
                         "patroni_api = 127.0.0.1:%d\n" % api.port) as t:
        check(roles(t)["primary"] == ("primary", True), "matched by name: %r" % roles(t))
        api.set("elsewhere")
        wait_for(lambda: roles(t)["primary"][0] == "fenced", "a leader of no server: the primary fenced", 10)
        wait_for(lambda: "is none of [servers]" in t.log_tail(30), "the log names the leader tern cannot find", 5)
    return 2


def set_read_only(pg, on):
    """default_transaction_read_only on the primary, reloaded."""
    pg.psql("alter system %s default_transaction_read_only%s" % (("set", " = on") if on else ("reset", "")))
    pg.psql("select pg_reload_conf()")
    # pg_reload_conf only signals the postmaster: once a new backend sees the value, the postmaster has
    # reloaded and signalled every backend, which then applies it before the next command it reads.
    wait_for(lambda: pg.psql("show default_transaction_read_only") == ("on" if on else "off"),
             "the primary reloaded default_transaction_read_only", 10)


def a_read_only_primary_is_fenced_and_its_open_transaction_cut(pg):
    """Without Patroni: a primary that turns read-only (default_transaction_read_only = on, which a write
    meets as 25006) is fenced: a transaction open on it is cut (session mode: 57P01 in the transaction,
    then 25P02 until ROLLBACK), new writes wait rather than get 25006, and run once it is writable."""
    try:
        with tern_running({"primary": pg.primary_port, "replica": pg.replica_port}, "") as t, client(t) as w:
            check(run(w, "begin").kind == "ok" and run(w, "insert into pt values ('r1')").kind == "ok", "open")
            set_read_only(pg, True)
            wait_for(lambda: roles(t)["primary"] == ("fenced", True), "the read-only primary fenced", 10)
            wait_for(lambda: "no longer a primary to write to" in t.log_tail(30), "the open transaction cut", 5)
            o = run(w, "insert into pt values ('r1')")
            check(o.kind == "error" and o.sqlstate == "57P01", "the cut transaction's next statement: %r" % o)
            check(run(w, "rollback").kind == "ok", "rollback")
            send_query(w, "insert into pt values ('r2')")
            time.sleep(0.5)
            check(pg.psql("select count(*) from pt where m like 'r%'").strip() == "0", "nothing written read-only")
            set_read_only(pg, False)
            o = read_outcome(w)
            check(o.kind == "ok" and o.status == "I", "the write ran once the primary was writable: %r" % o)
            check(pg.psql("select count(*) from pt where m like 'r%'").strip() == "1", "r2 once, r1 never")
    finally:
        set_read_only(pg, False)
    return 3


def tern_follows_a_real_patroni_through_a_switchover_and_a_killed_leader_under_pgbench():
    """Patroni 3.0.2 on etcd (patroni_cluster.py), two members; tern in front of both (named as
    Patroni names them), patroni_api = both REST APIs, tr_mode = transaction. pgbench tpcb-like, 8
    clients, runs through tern while `patronictl switchover` moves the leader to pg2, and then pg2 is
    killed (SIGKILL to Patroni and its postmaster: pg1 leads again after the ttl). After each, tern writes
    to the new leader; pgbench ends with no client error but 08007 (a COMMIT in flight), the tpcb
    invariant whole on the last leader. Acknowledged transactions the kill lost (asynchronous
    replication) are counted and printed, not failed on."""
    from patroni_cluster import PatroniCluster
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from failover_pgbench import pgbench_errors, tpcb_invariant
    with PatroniCluster() as pc:
        first = pc.wait_leader()
        other = next(n.name for n in pc.nodes if n.name != first)
        port = {n.name: n.pg_port for n in pc.nodes}
        subprocess.run(["pgbench", "-i", "-q", "-s", "2", "-h", "127.0.0.1", "-p", str(port[first]), "-U",
                        "postgres", "postgres"], check=True, env=clean_env(), capture_output=True)
        with tern_running(port, "patroni_api = %s\n" % ", ".join("127.0.0.1:%d" % p for p in pc.api_ports),
                          tr_mode="transaction") as t:
            def writes_to(name):
                wait_for(lambda: roles(t)[name] == ("primary", True), "tern writes to %s" % name, 30)
                with client(t) as w:
                    o = run(w, "select inet_server_port(), pg_is_in_recovery()")
                check(o.kind == "ok" and o.rows == [[str(port[name]), "f"]], "a statement lands on %s: %r" % (name, o))
            writes_to(first)
            out = tempfile.TemporaryFile()
            bench = subprocess.Popen(["pgbench", "-c", "8", "-j", "2", "-T", "40", "-M", "simple", "-h", "127.0.0.1",
                                      "-p", str(t.port), "-U", "postgres", "postgres"], stdout=out,
                                     stderr=subprocess.STDOUT, env=clean_env())
            time.sleep(4)
            pc.switchover(other)
            writes_to(other)
            print("  switchover to %s: tern followed" % other, flush=True)
            time.sleep(2)
            killed = pc.kill_leader()
            check(killed == other, "killed %s" % killed)
            pc.wait_leader(first, timeout=60)
            writes_to(first)
            print("  %s killed, %s leads again: tern followed" % (killed, first), flush=True)
            bench.wait(timeout=120)
            out.seek(0)
            text = out.read().decode("utf-8", "replace")
            errors = pgbench_errors(text)
            processed = re.search(r"number of transactions actually processed: (\d+)", text)
            check(processed and set(errors) <= {"08007"},
                  "pgbench's only errors are 08007: %r\n%s\ntern's log:\n%s" % (errors, text[-1500:], t.log_tail(60)))
            sums, whole = tpcb_invariant(lambda sql: pc.psql(first, sql))
            check(whole, "the tpcb invariant on %s: %r" % (first, sums))
            lost = int(processed.group(1)) - int(sums[4])
            print("  pgbench: %s transactions, errors %r, %s replayed; acknowledged transactions the kill lost "
                  "(asynchronous replication): %d" % (processed.group(1), errors or "none",
                                                      status(t)["replay"]["transactions_replayed"], max(lost, 0)))
    return 6


def a_write_refused_as_read_only_fences_at_once(pg):
    """A primary turned read-only between two monitor rounds (monitor_interval_ms is an hour here): the
    first write meets PostgreSQL's own 25006, which makes tern ask the monitor at once; the primary is
    fenced, and the next write waits for a writable primary instead of failing too."""
    try:
        with tern_running({"primary": pg.primary_port, "replica": pg.replica_port}, "",
                          interval_ms=3600000) as t, client(t) as w:
            set_read_only(pg, True)
            o = run(w, "insert into pt values ('w1')")
            check(o.kind == "error" and o.sqlstate == "25006", "the first write meets 25006: %r" % o)
            wait_for(lambda: roles(t)["primary"] == ("fenced", True), "fenced without waiting for the round", 5)
            send_query(w, "insert into pt values ('w2')")
            time.sleep(0.5)
            set_read_only(pg, False)
            o = read_outcome(w)
            check(o.kind == "ok" and o.status == "I", "the next write waited, then ran: %r" % o)
    finally:
        set_read_only(pg, False)
    return 3


STAND_IN = [writes_wait_while_the_api_names_no_running_leader_and_go_to_the_leader_it_names,
            a_leader_named_by_its_member_name_or_by_an_address_of_no_server,
            a_read_only_primary_is_fenced_and_its_open_transaction_cut, a_write_refused_as_read_only_fences_at_once]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-k", action="append", default=[], help="run cases whose name contains this")
    args = parser.parse_args()
    if not os.path.exists(TERN):
        print("tern binary not found at %s" % TERN)
        return 1
    try:
        find_pg_bindir()
    except Exception as exc:
        print("SKIP: no PostgreSQL server binaries on this machine (%s)" % exc)
        return 77
    signal.alarm(SUITE_DEADLINE_S)
    passed = failed = cases = 0

    def one(fn, *fn_args):
        nonlocal passed, failed, cases
        if args.k and not any(k in fn.__name__ for k in args.k):
            return
        t0 = time.monotonic()
        try:
            cases += fn(*fn_args)
            passed += 1
            print("PASS %s (%.1fs)" % (fn.__name__, time.monotonic() - t0), flush=True)
        except Exception:
            failed += 1
            print("FAIL %s (%.1fs)\n%s" % (fn.__name__, time.monotonic() - t0, traceback.format_exc()), flush=True)

    with PgCluster(with_replica=True) as pg:
        pg.psql("create table pt(m text)")
        for fn in STAND_IN:
            one(fn, pg)
    one(tern_follows_a_real_patroni_through_a_switchover_and_a_killed_leader_under_pgbench)
    print("patroni: %d passed, %d failed, %d checks" % (passed, failed, cases))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
