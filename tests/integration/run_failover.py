#!/usr/bin/env python3
"""Transaction Replay's failover battery: a real primary + streaming replica (started here), three terns
(tr_mode none, session, select) in front of both servers, raw wire clients. Each case puts a client of
every tern in a state (idle, in a transaction, a statement or a COMMIT running), then the connection is
lost in one of two ways: its backend terminated (pg_terminate_backend: the server stays the primary), or
the primary stopped with pg_ctl -m immediate and the replica promoted (pg_ctl promote), after which the
old primary is rebuilt as the new one's standby for the next case. Each case checks what the client saw
(SQLSTATE, rows, the session alive or closed, ReadyForQuery status) and the database's real state (no
duplicate write, nothing the client was told had failed, every acknowledged write present: the replica
here is a synchronous standby, so a promote loses nothing acknowledged).

usage: run_failover.py [-k SUBSTRING]...   (TERN_BINARY and TERN_SOURCE_ROOT from meson)"""
import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pgcluster import PgCluster, find_pg_bindir, free_port  # noqa: E402
from procs import TernProcess  # noqa: E402
from run_integration import check, wait_for  # noqa: E402
from wire import FLUSH, SYNC, Wire, bind, data_row, describe, error_fields, execute, message, parse  # noqa: E402

ROOT = os.environ.get("TERN_SOURCE_ROOT", os.path.dirname(os.path.dirname(HERE)))
TERN = os.environ.get("TERN_BINARY", os.path.join(ROOT, "build", "tern"))
SUITE_DEADLINE_S = 900
MODES = ("none", "session", "select", "transaction")
FAULTS = ("terminate", "promote")
SLEEP_S = 2  # how long a statement "in flight" runs on the server


class Outcome:
    """What a client read for one request: kind ok / error / closed, the SQLSTATE of the first error,
    the data rows, the ReadyForQuery status."""

    def __init__(self, kind, sqlstate=None, rows=(), status=None):
        self.kind, self.sqlstate, self.rows, self.status = kind, sqlstate, list(rows), status

    def __repr__(self):
        return "Outcome(%s, %s, rows=%r, status=%s)" % (self.kind, self.sqlstate, self.rows, self.status)


def read_outcome(w):
    sqlstate, rows = None, []
    while True:
        try:
            msg = w.read_message()
        except (ConnectionResetError, OSError):
            msg = None
        if msg is None:
            return Outcome("closed", sqlstate, rows)
        kind, body = msg
        if kind == b"E" and sqlstate is None:
            sqlstate = error_fields(body).get("C")
        elif kind == b"D":
            rows.append(data_row(body))
        elif kind == b"Z":
            return Outcome("error" if sqlstate else "ok", sqlstate, rows, body.decode())


def send_query(w, sql):
    w.send(message(b"Q", sql.encode() + b"\0"))


def run(w, sql):
    send_query(w, sql)
    return read_outcome(w)


class Battery:
    def __init__(self, pg):
        self.pg = pg
        self.terns = {}
        self.counts = {"cases": 0, "unknown_committed": 0, "unknown_absent": 0}
        pg.psql("create table if not exists tr(m text, n int);"
                "create table if not exists trc(m text);"
                "create sequence if not exists trs;"
                "create or replace function tr_pure(int) returns int language sql immutable as 'select $1';"
                "create or replace function tr_slow() returns trigger language plpgsql as "
                "$$ begin perform pg_sleep(%d); return null; end $$;"
                "drop trigger if exists tr_slow on trc;"
                "create constraint trigger tr_slow after insert on trc deferrable initially deferred "
                "for each row execute function tr_slow();" % SLEEP_S)
        pg.psql("drop database if exists tr_rr")
        pg.psql("create database tr_rr")
        pg.psql("alter database tr_rr set default_transaction_isolation = 'repeatable read'")
        ports = sorted([pg.primary_port, pg.replica_port])
        for mode in MODES:
            http = free_port()
            config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 2\npool_mode = transaction\n[servers]\n"
                      "primary = host=127.0.0.1 port=%d\nother = host=127.0.0.1 port=%d\n"
                      "[routing]\nmonitor_interval_ms = 100\n[pool]\npool_size = 8\n"
                      "[replay]\ntr_mode = %s\nwrite_timeout_secs = 20\n%s"
                      "[admin]\nhttp_listen = 127.0.0.1:%d\nadmin_users = postgres\n"
                      % (free_port(), ports[0], ports[1], mode,
                         "tr_read_functions = Tr_Pure\n" if mode == "select" else "", http))
            self.ports = {"primary": ports[0], "other": ports[1]}
            t = TernProcess(TERN, config)
            t.start()
            t.http_port = http
            self.terns[mode] = t

    def stop(self):
        for t in self.terns.values():
            t.stop()
        for mode, t in self.terns.items():
            check(t.returncode == 0, "tern (%s) exited with %s:\n%s" % (mode, t.returncode, t.log_tail(40)))

    def primary_sql(self, sql):
        return self.pg.psql(sql).strip()

    def count(self, table, marker):
        return int(self.primary_sql("select count(*) from %s where m = '%s'" % (table, marker)))

    def client(self, mode, database="postgres"):
        w = Wire(self.terns[mode].port, timeout=30)
        w.login("postgres", database)
        return w

    def wait_running(self, markers):
        """Every marked statement is running on the primary (pg_stat_activity says active)."""
        def running():
            out = self.primary_sql("select count(*) from pg_stat_activity where state = 'active' and (%s)" %
                                   " or ".join("query like '%%%s%%'" % m for m in markers)
                                   + " and pid <> pg_backend_pid()")
            return int(out) >= len(markers)
        wait_for(running, "the statements in flight to run: %r" % (markers,), timeout=15)

    def writes_go_to_port(self, mode):
        """The port of the server the tern of `mode` sends writes to (its /metrics)."""
        import urllib.request
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.terns[mode].http_port,
                                      timeout=10).read().decode()
        for line in text.splitlines():
            if line.startswith("tern_server_writes{") and line.endswith(" 1"):
                name = line.split('server="', 1)[1].split('"', 1)[0]
                return self.ports[name]
        return None

    def fault(self, fault, markers):
        if fault in ("down_then_promote",):
            self.pg.stop_primary("immediate")
            return
        if fault == "stale_primary":
            self.pg.promote_replica(stop_primary=None)
            self.primary_sql("alter system set synchronous_standby_names = ''")
            self.primary_sql("select pg_reload_conf()")
            return
        if fault == "terminate":
            cond = " or ".join("query like '%%%s%%'" % m for m in markers)
            self.primary_sql("select count(pg_terminate_backend(pid, 10000)) from pg_stat_activity where (%s) "
                             "and pid <> pg_backend_pid()" % cond)
        else:
            self.pg.promote_replica()
            # Until its standby is rebuilt, the new primary's commits must not wait for one.
            self.primary_sql("alter system set synchronous_standby_names = ''")
            self.primary_sql("select pg_reload_conf()")

    def after_fault(self, fault):
        if fault != "terminate":
            self.pg.rebuild_standby()
            self.primary_sql("alter system reset synchronous_standby_names")
            self.primary_sql("select pg_reload_conf()")


# ---- the cases: each returns a function that checks one client after the fault ----

def marker_of(case, fault, mode):
    return "m_%s_%s_%s" % (case, fault, mode)


def expect_closed(o, sqlstate, what):
    check(o.kind == "closed" and o.sqlstate == sqlstate, "%s: closed with %s, got %r" % (what, sqlstate, o))


def expect_session_goes_on(b, w, what):
    o = run(w, "select 1")
    check(o.kind == "ok" and o.rows == [["1"]] and o.status == "I", "%s: the session goes on: %r" % (what, o))


def case_idle_autocommit(b, w, mode, fault, m):
    """Idle, nothing in flight: the next write runs on the primary of the moment, in every mode (the
    session held no server connection; the pool drops the dead ones)."""
    check(run(w, "select 1 /*%s*/" % m).kind == "ok", "setup")
    yield
    o = run(w, "insert into tr values ('%s', 1)" % m)
    check(o.kind == "ok" and o.status == "I", "the write after the fault runs: %r" % o)
    check(b.count("tr", m) == 1, "written once")


def case_idle_in_transaction(b, w, mode, fault, m):
    """Idle inside a transaction that wrote: none closes (57P01); session and select tell the next
    statement 57P01 (the transaction is gone), then 25P02 until ROLLBACK, which tern answers; then the
    session goes on, and nothing of the transaction committed. transaction replays it on the new
    primary (its INSERT's answer checked): the next statement and the COMMIT work, both rows once."""
    check(run(w, "begin").kind == "ok", "begin")
    check(run(w, "insert into tr values ('%s', 1) /*%s*/" % (m, m)).kind == "ok", "insert")
    yield
    o = run(w, "insert into tr values ('%s', 2)" % m)
    if mode == "none":
        expect_closed(o, "57P01", "none")
    elif mode == "transaction":
        check(o.kind == "ok" and o.status == "T", "the transaction goes on: %r" % o)
        o = run(w, "commit")
        check(o.kind == "ok" and o.status == "I", "commit: %r" % o)
        check(b.count("tr", m) == 2, "both rows, once each: %d" % b.count("tr", m))
        return
    else:
        check(o.kind == "error" and o.sqlstate == "57P01" and o.status == "E", "57P01 in a failed block: %r" % o)
        o = run(w, "select 1")
        check(o.kind == "error" and o.sqlstate == "25P02" and o.status == "E", "then 25P02: %r" % o)
        o = run(w, "rollback")
        check(o.kind == "ok" and o.status == "I", "ROLLBACK ends it: %r" % o)
        expect_session_goes_on(b, w, mode)
    check(b.count("tr", m) == 0, "nothing of the lost transaction committed")


def inflight(sql):
    """A case whose statement is in flight at the fault."""
    def deco(fn):
        fn.inflight = sql
        return fn
    return deco


@inflight("insert into tr select '{m}', 1 from pg_sleep(%d)" % SLEEP_S)
def case_autocommit_write_running(b, w, mode, fault, m):
    """An autocommit write running: its outcome is unknown (08007), never run again; the session goes
    on except under none (57P01, closed)."""
    o = read_outcome(w)
    if mode == "none":
        expect_closed(o, "57P01", "none")
    else:
        check(o.kind == "error" and o.sqlstate == "08007" and o.status == "I", "08007: %r" % o)
        expect_session_goes_on(b, w, mode)
    n = b.count("tr", m)
    check(n <= 1, "never twice: %d" % n)
    b.counts["unknown_committed" if n else "unknown_absent"] += mode != "none"


@inflight("select 42 as answer, pg_sleep(%d) /*{m}*/" % SLEEP_S)
def case_autocommit_safe_read_running(b, w, mode, fault, m):
    """A side-effect-free read running: select runs it again on the new primary (its rows, once);
    session says 08007; none closes."""
    o = read_outcome(w)
    if mode == "none":
        expect_closed(o, "57P01", "none")
    elif mode == "session":
        check(o.kind == "error" and o.sqlstate == "08007" and o.status == "I", "08007: %r" % o)
        expect_session_goes_on(b, w, mode)
    else:  # select, transaction
        check(o.kind == "ok" and o.rows == [["42", ""]] and o.status == "I", "run again, rows once: %r" % o)
        expect_session_goes_on(b, w, mode)


@inflight("select nextval('trs'), pg_sleep(%d) /*{m}*/" % SLEEP_S)
def case_autocommit_opaque_read_running(b, w, mode, fault, m):
    """A read calling nextval (a side effect): never run twice, 08007 in session and select."""
    before = int(b.primary_sql("select last_value from trs"))
    o = read_outcome(w)
    if mode == "none":
        expect_closed(o, "57P01", "none")
    else:
        check(o.kind == "error" and o.sqlstate == "08007", "08007: %r" % o)
        expect_session_goes_on(b, w, mode)
    after = int(b.primary_sql("select last_value from trs"))
    check(after <= before + 1, "nextval ran at most once: %d -> %d" % (before, after))


@inflight("select public.tr_pure(5), pg_sleep(%d) /*{m}*/" % SLEEP_S)
def case_read_calling_a_function_in_tr_read_functions(b, w, mode, fault, m):
    """A read calling a user function: the select tern lists it in tr_read_functions (in another case,
    schema-qualified here), so it runs the read again; the transaction tern does not, so the read is
    opaque there: 08007, never run twice."""
    o = read_outcome(w)
    if mode == "none":
        expect_closed(o, "57P01", "none")
    elif mode == "select":
        check(o.kind == "ok" and o.rows == [["5", ""]], "run again: %r" % o)
    else:
        check(o.kind == "error" and o.sqlstate == "08007", "opaque: 08007: %r" % o)
    if mode != "none":
        expect_session_goes_on(b, w, mode)


@inflight("insert into tr select '{m}', 2 from pg_sleep(%d)" % SLEEP_S)
def case_write_running_in_transaction(b, w, mode, fault, m):
    """A write running inside a transaction: one error (57P01), the transaction aborted (25P02 until
    ROLLBACK); nothing of it committed. transaction: the transaction is replayed and the write runs
    again inside it; its COMMIT keeps both rows, once each."""
    o = read_outcome(w)
    if mode == "none":
        expect_closed(o, "57P01", "none")
    elif mode == "transaction":
        check(o.kind == "ok" and o.status == "T", "the write ran again in the replayed transaction: %r" % o)
        check(run(w, "commit").status == "I", "commit")
        check(b.count("tr", m) == 2, "both rows, once each: %d" % b.count("tr", m))
        return
    else:
        check(o.kind == "error" and o.sqlstate == "57P01" and o.status == "E", "57P01, aborted: %r" % o)
        o = run(w, "insert into tr values ('%s', 3)" % m)
        check(o.kind == "error" and o.sqlstate == "25P02" and o.status == "E", "25P02: %r" % o)
        check(run(w, "rollback").status == "I", "rollback")
        expect_session_goes_on(b, w, mode)
    check(b.count("tr", m) == 0, "nothing committed")


case_write_running_in_transaction.setup = ["begin", "insert into tr values ('{m}', 1)"]


@inflight("commit /*{m}*/")
def case_commit_running(b, w, mode, fault, m):
    """A COMMIT running (a deferred trigger sleeps in it): its outcome is unknown, 08007, never retried;
    the session goes on (none: closed)."""
    o = read_outcome(w)
    if mode == "none":
        expect_closed(o, "57P01", "none")
    else:
        check(o.kind == "error" and o.sqlstate == "08007", "08007: %r" % o)
        check(o.status in ("I",), "the transaction is over either way: %r" % o)
        expect_session_goes_on(b, w, mode)
    n = b.count("trc", m)
    check(n <= 1, "committed at most once: %d" % n)
    b.counts["unknown_committed" if n else "unknown_absent"] += mode != "none"


case_commit_running.setup = ["begin", "insert into trc values ('{m}')"]


def case_session_state_survives(b, w, mode, fault, m):
    """SET state (tracked parameters) and a named prepared statement survive the move in session and
    select modes."""
    check(run(w, "set application_name = 'app_%s'" % m[-20:]).kind == "ok", "set")
    w.send(parse("st_%s" % m[-8:], "select $1::int + 1 /*%s*/" % m) + SYNC)
    check(read_outcome(w).kind == "ok", "parse")
    w.send(bind("st_%s" % m[-8:], ["1"]) + execute() + SYNC)
    o = read_outcome(w)
    check(o.rows == [["2"]], "prepared before: %r" % o)
    yield
    w.send(bind("st_%s" % m[-8:], ["41"]) + execute() + SYNC)
    o = read_outcome(w)
    check(o.kind == "ok" and o.rows == [["42"]], "the prepared statement after the move: %r" % o)
    o = run(w, "show application_name")
    check(o.rows == [["app_%s" % m[-20:]]], "application_name restored: %r" % o)


def case_set_state_is_what_committed(b, w, mode, fault, m):
    """SET state restored on the new connection is what committed: a SET in a transaction rolled back, a
    SET rolled back to a savepoint, and a RESET ALL rolled back all leave the value set before them."""
    check(run(w, "set application_name = 'kept_%s'" % m[-12:]).kind == "ok", "set")
    for sql in ("begin", "set application_name = 'rolled_back'", "rollback",
                "begin", "savepoint s", "set application_name = 'to_savepoint'", "rollback to savepoint s", "commit",
                "begin", "reset all", "rollback", "select 1 /*%s*/" % m):
        o = run(w, sql)
        check(o.kind == "ok", "%s: %r" % (sql, o))
    yield
    o = run(w, "show application_name")
    if mode == "none":
        check(o.kind == "closed" or o.rows == [["kept_%s" % m[-12:]]], "none: %r" % o)
        return
    check(o.rows == [["kept_%s" % m[-12:]]], "the committed value: %r" % o)


SETTINGS_CHECK = ("select current_setting('statement_timeout'), current_setting('work_mem'), "
                  "current_setting('tern_test.v', true), current_setting('lock_timeout'), "
                  "current_setting('idle_in_transaction_session_timeout'), current_setting('maintenance_work_mem')")


def case_every_set_comes_back(b, w, mode, fault, m):
    """Every simple-protocol SET comes back on the connection the session moves to (issue 23 #2), with
    PostgreSQL's transactional rules: statement_timeout alone, work_mem and a custom variable in one
    Query of two statements, lock_timeout in a committed transaction; a SET rolled back, one rolled back
    to a savepoint, a rolled-back RESET ALL and a SET in a Query that failed leave what was there before;
    a committed RESET leaves the default. None of these is a parameter the server reports. The session
    is in a read-only transaction at the fault: select and transaction replay it (the check runs in it),
    session loses it (57P01, ROLLBACK) and the check runs next; none closes."""
    for sql in ("set statement_timeout = '1234s'", "set work_mem = '7MB'; set tern_test.v = 'kept'",
                "begin", "set lock_timeout = '3s'", "commit",
                "begin", "set work_mem = '9MB'", "rollback",
                "begin", "savepoint s", "set statement_timeout = '99s'", "rollback to savepoint s", "commit",
                "begin", "reset all", "rollback",
                "set idle_in_transaction_session_timeout = '77s'", "reset idle_in_transaction_session_timeout"):
        o = run(w, sql)
        check(o.kind == "ok", "%s: %r" % (sql, o))
    o = run(w, "set maintenance_work_mem = '99MB'; select 1/0")
    check(o.kind == "error" and o.sqlstate == "22012", "the failed Query: %r" % o)
    want = [["1234s", "7MB", "kept", "3s", "0", run(w, "show maintenance_work_mem").rows[0][0]]]
    check(want[0][5] != "99MB", "the failed Query's SET was rolled back: %r" % want)
    check(run(w, SETTINGS_CHECK).rows == want, "before the fault")
    for sql in ("begin", "select 1 /*%s*/" % m):
        check(run(w, sql).kind == "ok", sql)
    yield
    o = run(w, SETTINGS_CHECK)
    if mode == "none":
        expect_closed(o, "57P01", "none")
        return
    if o.kind == "error":
        check(mode == "session" and o.sqlstate == "57P01", "%s: 57P01 only in session mode: %r" % (mode, o))
        check(run(w, "rollback").status == "I", "rollback")
        o = run(w, SETTINGS_CHECK)
    check(o.kind == "ok" and o.rows == want, "%s: the settings after the move: %r, want %r" % (mode, o, want))
    if o.status == "T":
        check(run(w, "commit").status == "I", "commit")


def case_commit_of_a_lost_transaction_is_an_error(b, w, mode, fault, m):
    """The transaction was lost between statements and the client's next statement is its COMMIT: in
    session and select the COMMIT gets the loss's 57P01 (never a ROLLBACK that reads as success) and
    the transaction is over ('I'); in transaction it was replayed and the COMMIT commits."""
    check(run(w, "begin").kind == "ok", "begin")
    check(run(w, "insert into tr values ('%s', 1) /*%s*/" % (m, m)).kind == "ok", "insert")
    yield
    o = run(w, "commit")
    if mode == "none":
        expect_closed(o, "57P01", "none")
    elif mode == "transaction":
        check(o.kind == "ok" and o.status == "I", "committed after the replay: %r" % o)
        check(b.count("tr", m) == 1, "once")
        return
    else:
        check(o.kind == "error" and o.sqlstate == "57P01" and o.status == "I", "an error, not success: %r" % o)
        expect_session_goes_on(b, w, mode)
    check(b.count("tr", m) == 0, "nothing committed")


def case_a_transaction_begun_inside_a_query_is_not_replayed(b, w, mode, fault, m):
    """One Query that commits a transaction and begins the next ("INSERT ...; COMMIT; BEGIN"): the
    transaction open now began inside it, so transaction mode does not replay it (that would commit the
    first INSERT again): the next statement gets 57P01, and the first row is there once."""
    check(run(w, "begin").kind == "ok", "begin")
    check(run(w, "insert into tr values ('%s', 1); commit; begin /*%s*/" % (m, m)).kind == "ok", "the query")
    yield
    o = run(w, "select 1")
    if mode == "none":
        expect_closed(o, "57P01", "none")
    else:
        check(o.kind == "error" and o.sqlstate == "57P01", "not replayed: %r" % o)
        check(run(w, "rollback").status == "I", "rollback")
    check(b.count("tr", m) == 1, "the committed row once: %d" % b.count("tr", m))


def case_commit_and_chain_replays_the_chained_transaction(b, w, mode, fault, m):
    """COMMIT AND CHAIN ends a transaction and begins the next, ROLLBACK AND CHAIN drops one and begins
    the next (issue 23 #4): transaction mode replays the last chained one alone (it begins with a BEGIN of
    its own) and the committed row is there once; the other modes lose the chained transaction (57P01)
    and keep the committed row."""
    for sql in ("begin", "insert into tr values ('%s', 1)" % m, "commit and chain",
                "insert into tr values ('%s', 2)" % m, "rollback and chain",
                "insert into tr values ('%s', 3) /*%s*/" % (m, m)):
        o = run(w, sql)
        check(o.kind == "ok" and o.status == "T", "%s: %r" % (sql, o))
    yield
    o = run(w, "select n from tr where m = '%s' order by n" % m)
    if mode == "none":
        expect_closed(o, "57P01", "none")
    elif mode == "transaction":
        check(o.kind == "ok" and o.rows == [["1"], ["3"]] and o.status == "T", "replayed, goes on: %r" % o)
        check(run(w, "commit").status == "I", "commit")
        check(b.count("tr", m) == 2, "each row once: %d" % b.count("tr", m))
        return
    else:
        check(o.kind == "error" and o.sqlstate == "57P01", "the chained transaction is lost: %r" % o)
        check(run(w, "rollback").status == "I", "rollback")
    check(b.count("tr", m) == 1, "the committed row once: %d" % b.count("tr", m))


def case_read_only_transaction(b, w, mode, fault, m):
    """A read-only transaction, idle at the fault: select and transaction replay it (its read's answer
    checked) and it goes on; session: 57P01, then 25P02 until ROLLBACK."""
    check(run(w, "begin").kind == "ok", "begin")
    check(run(w, "select count(*) from tr where m = 'nothing' /*%s*/" % m).rows == [["0"]], "read")
    yield
    o = run(w, "select 7")
    if mode == "none":
        expect_closed(o, "57P01", "none")
    elif mode == "session":
        check(o.kind == "error" and o.sqlstate == "57P01" and o.status == "E", "57P01: %r" % o)
        check(run(w, "rollback").status == "I", "rollback")
    else:
        check(o.kind == "ok" and o.rows == [["7"]] and o.status == "T", "replayed, goes on: %r" % o)
        check(run(w, "commit").status == "I", "commit")


def case_notices_do_not_fail_a_replay(b, w, mode, fault, m):
    """A transaction whose statement raised a NOTICE (CREATE TABLE IF NOT EXISTS of a table that exists)
    replays under transaction although the replay's notice is not shown again: notices are not digested."""
    check(run(w, "begin").kind == "ok", "begin")
    check(run(w, "create table if not exists tr(m text, n int) /*%s*/" % m).kind == "ok", "a notice")
    check(run(w, "insert into tr values ('%s', 1)" % m).kind == "ok", "insert")
    yield
    o = run(w, "select 1")
    if mode == "none":
        expect_closed(o, "57P01", "none")
        return
    if mode == "transaction":
        check(o.kind == "ok" and o.status == "T", "replayed: %r" % o)
        check(run(w, "commit").status == "I", "commit")
        check(b.count("tr", m) == 1, "once")
    else:
        check(o.kind == "error" and o.sqlstate == "57P01", "57P01: %r" % o)
        check(run(w, "rollback").status == "I", "rollback")


def case_replay_that_differs_is_rolled_back_with_40001(b, w, mode, fault, m):
    """A transaction whose read gave a value the replay cannot give again (random()): select and
    transaction roll the replay back, and the client's next statement gets 40001, then 25P02 until
    ROLLBACK; session: 57P01."""
    check(run(w, "begin").kind == "ok", "begin")
    check(run(w, "select random() /*%s*/" % m).kind == "ok", "read")
    yield
    o = run(w, "select 1")
    if mode == "none":
        expect_closed(o, "57P01", "none")
        return
    want = "57P01" if mode == "session" else "40001"
    check(o.kind == "error" and o.sqlstate == want and o.status == "E", "%s: %r" % (want, o))
    o = run(w, "select 1")
    check(o.kind == "error" and o.sqlstate == "25P02", "then 25P02: %r" % o)
    check(run(w, "rollback").status == "I", "rollback")
    expect_session_goes_on(b, w, mode)


def expect_transaction_lost(w, o, mode, sqlstate):
    """The lost transaction's one error (none: the session closed with 57P01), then ROLLBACK ends it."""
    if mode == "none":
        expect_closed(o, "57P01", "none")
        return
    check(o.kind == "error" and o.sqlstate == sqlstate and o.status == "E", "%s: %r" % (sqlstate, o))
    check(run(w, "rollback").status == "I", "rollback")


def expect_replayed_or_lost(b, w, o, mode, m, rows, what):
    """transaction: the transaction was replayed and goes on (o ok, 'T'), COMMIT leaves `rows` rows of m;
    none: closed with 57P01; session and select: 57P01, then ROLLBACK. True when the session goes on
    without its transaction (the caller checks the rest)."""
    if mode == "transaction":
        check(o.kind == "ok" and o.status == "T", "%s: %r" % (what, o))
        check(run(w, "commit").status == "I", "commit")
        check(b.count("tr", m) == rows, "%d rows, once each: %d" % (rows, b.count("tr", m)))
        return False
    expect_transaction_lost(w, o, mode, "57P01")
    return mode != "none"


def case_repeatable_read_is_never_replayed(b, w, mode, fault, m):
    """A REPEATABLE READ transaction (named at BEGIN) is never replayed: 57P01 for its next statement
    in every mode that moves the session."""
    check(run(w, "begin isolation level repeatable read").kind == "ok", "begin")
    check(run(w, "select count(*) from tr /*%s*/" % m).kind == "ok", "read")
    yield
    expect_transaction_lost(w, run(w, "select 1"), mode, "57P01")


def case_default_repeatable_read_is_found_at_replay(b, w, mode, fault, m):
    """A transaction opened by a plain BEGIN in a database whose default isolation is REPEATABLE READ:
    nothing in its text says so, and the replay asks the new primary (a hidden SHOW
    transaction_isolation after the replayed statements): not read committed, so it is rolled back there
    and the client gets 40001 (select, transaction); session: 57P01."""
    check(run(w, "begin").kind == "ok", "begin")
    check(run(w, "select 1 /*%s*/" % m).kind == "ok", "read")
    yield
    expect_transaction_lost(w, run(w, "select 2"), mode, "57P01" if mode == "session" else "40001")


case_default_repeatable_read_is_found_at_replay.database = "tr_rr"


def case_extended_write_running(b, w, mode, fault, m):
    """An extended-protocol write running (Parse/Bind/Execute/Sync, autocommit): it may have run, so its
    outcome is unknown: 08007, never run again; the session goes on."""
    yield "send", (parse("", "insert into tr select '%s', 1 from pg_sleep(%d)" % (m, SLEEP_S)) + bind("") +
                   execute() + SYNC)
    o = read_outcome(w)
    if mode == "none":
        expect_closed(o, "57P01", "none")
    else:
        check(o.kind == "error" and o.sqlstate == "08007" and o.status == "I", "08007: %r" % o)
        expect_session_goes_on(b, w, mode)
    check(b.count("tr", m) <= 1, "never twice")


def case_extended_safe_read_running(b, w, mode, fault, m):
    """An extended-protocol read (unnamed, with a parameter) running: select and transaction send it again
    as the client did (Parse, Bind, Describe, Execute, Sync) and the client gets its answer once."""
    yield "send", (parse("", "select $1::int + 1, pg_sleep(%d) /*%s*/" % (SLEEP_S, m)) + bind("", ["41"]) +
                   message(b"D", b"P\0") + execute() + SYNC)
    o = read_outcome(w)
    if mode == "none":
        expect_closed(o, "57P01", "none")
    elif mode == "session":
        check(o.kind == "error" and o.sqlstate == "08007", "08007: %r" % o)
    else:
        check(o.kind == "ok" and o.rows == [["42", ""]] and o.status == "I", "run again, once: %r" % o)


def prepare_named(w, m, sql):
    """The client's named statement (outside any transaction: observer_stmts keeps it); its name."""
    name = "n_" + m[-12:]
    w.send(parse(name, sql) + SYNC)
    check(read_outcome(w).kind == "ok", "parse %s" % name)
    return name


def case_named_statements_in_a_transaction_are_replayed(b, w, mode, fault, m):
    """A transaction that ran named prepared statements (as pgbench -M prepared and JDBC past its
    prepareThreshold send them: Bind, Describe of the statement, a named portal, Execute): transaction
    replays it (tern prepares the statements on the new primary first) and it goes on to COMMIT, each row
    once; session and select (it wrote) say 57P01, then 25P02 until ROLLBACK; after it the statement
    works again (prepared anew)."""
    name = prepare_named(w, m, "insert into tr values ($1, $2::int) /*%s*/" % m)
    check(run(w, "begin").kind == "ok", "begin")
    w.send(bind(name, [m, "1"], portal="p1") + message(b"D", b"S" + name.encode() + b"\0") + execute("p1") + SYNC)
    check(read_outcome(w).kind == "ok", "insert through the named statement")
    yield
    w.send(bind(name, [m, "2"]) + execute() + SYNC)
    if not expect_replayed_or_lost(b, w, read_outcome(w), mode, m, 2, "the transaction goes on"):
        return
    w.send(bind(name, [m, "3"]) + execute() + SYNC)
    o = read_outcome(w)
    check(o.kind == "ok" and o.status == "I", "the named statement after the move: %r" % o)
    check(b.count("tr", m) == 1, "only the row after the move: %d" % b.count("tr", m))


def case_a_statement_named_inside_the_transaction_is_replayed(b, w, mode, fault, m):
    """A named statement parsed inside the transaction (pgbench -M prepared's first transaction, JDBC past
    its prepareThreshold; its Parse answered by the server, then by tern for a second name of the same
    text): transaction replays it (a Close and a Parse of its server name on the new primary, the Close's
    answer left out of the check) and goes on to COMMIT, each row once; session and
    select (it wrote) say 57P01, then 25P02 until ROLLBACK; after it the statement works (prepared anew)."""
    sql = "insert into tr values ($1, 1) /*%s*/" % m
    check(run(w, "begin").kind == "ok", "begin")
    name = prepare_named(w, m, sql)
    w.send(bind(name, [m]) + execute() + SYNC)
    check(read_outcome(w).kind == "ok", "insert through the named statement")
    # The same text under a second name: the connection holds it already, so tern answers this Parse.
    w.send(parse("again_" + name, sql) + bind("again_" + name, [m]) + execute() + SYNC)
    check(read_outcome(w).kind == "ok", "insert through the second name")
    yield
    o = run(w, "select 1")
    if expect_replayed_or_lost(b, w, o, mode, m, 2, "the transaction goes on"):
        check(b.count("tr", m) == 0, "nothing of it committed")
    if mode == "none":
        return
    w.send(bind(name, [m]) + execute() + SYNC)
    o = read_outcome(w)
    check(o.kind == "ok" and o.status == "I", "the named statement after the move: %r" % o)


def case_named_read_running(b, w, mode, fault, m):
    """A named statement's side-effect-free read running (autocommit): select and transaction run it again
    on the new primary (prepared there by tern) and the client gets its row once; session 08007."""
    name = prepare_named(w, m, "select $1::int + 1, pg_sleep(%d) /*%s*/" % (SLEEP_S, m))
    yield "send", bind(name, ["41"]) + execute() + SYNC
    o = read_outcome(w)
    if mode == "none":
        expect_closed(o, "57P01", "none")
    elif mode == "session":
        check(o.kind == "error" and o.sqlstate == "08007", "08007: %r" % o)
    else:
        check(o.kind == "ok" and o.rows == [["42", ""]] and o.status == "I", "run again, once: %r" % o)


def case_a_read_that_parses_its_named_statement_runs_again(b, w, mode, fault, m):
    """A side-effect-free autocommit read whose request parses the named statement it runs (Parse, Bind,
    Execute, Sync in flight): tern answers the Parse (no connection yet), so what was in flight is the
    Bind and Execute of a statement it keeps: select and transaction run it again on the new primary
    (prepared there by tern), the client gets its row once; session 08007."""
    name = "p_" + m[-12:]
    sql = "select $1::int + 1, pg_sleep(%d) /*%s*/" % (SLEEP_S, m)
    yield "send", parse(name, sql) + bind(name, ["41"]) + execute() + SYNC
    o = read_outcome(w)
    if mode == "none":
        expect_closed(o, "57P01", "none")
    elif mode == "session":
        check(o.kind == "error" and o.sqlstate == "08007" and o.status == "I", "08007: %r" % o)
    else:
        check(o.kind == "ok" and o.rows == [["42", ""]] and o.status == "I", "run again, once: %r" % o)
    if mode != "none":
        expect_session_goes_on(b, w, mode)


def case_named_write_running_in_transaction(b, w, mode, fault, m):
    """A named statement's write running inside a transaction: transaction replays the transaction and
    runs it again there (once, as the COMMIT's count shows); session and select 57P01."""
    name = prepare_named(w, m, "insert into tr select $1, 1 from pg_sleep(%d) /*%s*/" % (SLEEP_S, m))
    check(run(w, "begin").kind == "ok", "begin")
    check(run(w, "insert into tr values ('%s', 0)" % m).kind == "ok", "a first write")
    yield "send", bind(name, [m]) + execute() + SYNC
    if expect_replayed_or_lost(b, w, read_outcome(w), mode, m, 2, "run again in the replayed transaction"):
        check(b.count("tr", m) == 0, "nothing of it committed")


def case_after_an_extended_copy_with_its_sync_pipelined(b, w, mode, fault, m):
    """A COPY FROM STDIN sent as drivers pipeline it (Parse, Bind, Execute, Sync, then the data): the
    server ignores that Sync during the copy, so the ReadyForQuery it owes is counted from the leg, not from
    the messages; the next statement in flight is decided as any (08007 under session, run again under
    select and transaction), not as part of an answer already shown."""
    w.send(parse("", "copy tr from stdin /*%s_copy*/" % m) + bind("") + execute() + SYNC +
           message(b"d", ("%s\t1\n" % m).encode()) + message(b"c") + SYNC)
    o = read_outcome(w)
    check(o.kind == "ok" and o.status == "I", "the copy: %r" % o)
    yield "send", message(b"Q", ("select 5, pg_sleep(%d) /*%s*/" % (SLEEP_S, m)).encode() + b"\0")
    o = read_outcome(w)
    if mode == "none":
        expect_closed(o, "57P01", "none")
    elif mode == "session":
        check(o.kind == "error" and o.sqlstate == "08007", "08007: %r" % o)
    else:
        check(o.kind == "ok" and o.rows == [["5", ""]], "run again: %r" % o)
    check(b.count("tr", m) == 1, "the copied row")


def case_extended_in_transaction_then_extended_rollback(b, w, mode, fault, m):
    """An extended-protocol write (unnamed Parse/Bind/Execute/Sync, as pgbench -M extended sends it)
    running inside a transaction: session and select give it 57P01 and abort the transaction (25P02 to
    the next extended statement), and a ROLLBACK sent as drivers send it (Parse/Bind/Execute/Sync) is
    answered by tern (ParseComplete, BindComplete, ROLLBACK, ReadyForQuery I); transaction replays the
    transaction and runs the write again in it, and the same ROLLBACK reaches the server."""
    check(run(w, "begin").kind == "ok", "begin")
    yield "send", (parse("", "insert into tr select '%s', 1 from pg_sleep(%d)" % (m, SLEEP_S)) + bind("") +
                   execute() + SYNC)
    o = read_outcome(w)
    if mode == "none":
        expect_closed(o, "57P01", "none")
        return
    if mode == "transaction":
        check(o.kind == "ok" and o.status == "T", "replayed, the write ran again: %r" % o)
        kinds, rows, err, status = w.exchange(parse("", "select 1"), bind(""), execute(), SYNC)
        check(err is None and rows == [["1"]] and status == "T", "the transaction goes on: %r" % ((kinds, rows, err),))
    else:
        check(o.kind == "error" and o.sqlstate == "57P01" and o.status == "E", "57P01, aborted: %r" % o)
        kinds, rows, err, status = w.exchange(parse("", "select 1"), bind(""), execute(), SYNC)
        check(err == "25P02" and status == "E", "25P02 to an extended statement: %r" % ((kinds, err, status),))
    kinds, rows, err, status = w.exchange(parse("", "ROLLBACK"), bind(""), execute(), SYNC)
    check((kinds, err, status) == ("12CZ", None, "I"), "the ROLLBACK batch: %r" % ((kinds, err, status),))
    expect_session_goes_on(b, w, mode)
    check(b.count("tr", m) == 0, "nothing committed")


@inflight("select g, repeat('x', 9000), pg_sleep(case when g = 2 then %d else 0 end) /*{m}*/ "
          "from generate_series(1, 2) g" % SLEEP_S)
def case_partial_result(b, w, mode, fault, m):
    """Part of the answer (a first row of 9 kB, which the server flushes) reached the client: the read is
    never run again (a second answer would follow the first); it gets 08007 after what the client saw,
    and the session goes on; none: 57P01, closed."""
    o = read_outcome(w)
    if mode == "none":
        check(o.kind == "closed" and o.sqlstate == "57P01", "closed: %r" % o.kind)
    else:
        check(o.kind == "error" and o.sqlstate == "08007" and o.status == "I",
              "08007 after the rows shown: %s %s %s" % (o.kind, o.sqlstate, o.status))
        expect_session_goes_on(b, w, mode)
    check(len(o.rows) <= 1, "no row twice: %r" % len(o.rows))


def case_copy_in_progress(b, w, mode, fault, m):
    """A COPY FROM STDIN under way: 08006, closed (57P01 under none); nothing of it committed."""
    send_query(w, "copy tr from stdin /*%s*/" % m)
    msg = w.read_message()
    check(msg and msg[0] == b"G", "CopyInResponse: %r" % (msg,))
    w.send(message(b"d", ("%s\t1\n" % m).encode()))
    yield
    try:
        w.send(message(b"d", ("%s\t2\n" % m).encode()) + message(b"c"))
    except OSError:
        pass
    o = read_outcome(w)
    check(o.kind == "closed" and o.sqlstate == ("57P01" if mode == "none" else "08006"), "closed: %r" % o)
    check(b.count("tr", m) == 0, "nothing of the COPY committed")


def case_written_while_the_primary_is_down(b, w, mode, fault, m):
    """The primary is down (stopped, not yet replaced) when an autocommit write arrives: it never
    reached a server, so it waits for the next primary and runs there once, in every mode (a request
    parked for the primary of before follows the primary of the moment)."""
    check(run(w, "select 1").kind == "ok", "setup")
    yield
    send_query(w, "insert into tr values ('%s', 1)" % m)
    yield
    o = read_outcome(w)
    check(o.kind == "ok" and o.status == "I", "it ran on the new primary: %r" % o)
    check(b.count("tr", m) == 1, "once")


case_written_while_the_primary_is_down.faults = ("down_then_promote",)


def case_stale_primary_is_fenced(b, w, mode, fault, m):
    """A promote that leaves the old primary up (a lower timeline): writes go to the new one; a
    transaction still open on the old one is cut there (none: closed with 57P01; session, select: its
    next statement gets 57P01, then 25P02 until ROLLBACK) and nothing of it is written on either."""
    check(run(w, "begin").kind == "ok", "begin")
    check(run(w, "insert into tr values ('%s', 1)" % m).kind == "ok", "insert on the old primary")
    yield
    wait_for(lambda: b.writes_go_to_port(mode) == b.pg.primary_port, "tern to follow the promote", timeout=15)
    o = run(w, "insert into tr values ('%s', 2)" % m)
    if mode == "none":
        expect_closed(o, "57P01", "none")
    elif mode == "transaction":
        check(o.kind == "ok" and o.status == "T", "replayed on the new primary: %r" % o)
        check(run(w, "commit").status == "I", "commit")
        check(b.count("tr", m) == 2, "on the new primary: %d" % b.count("tr", m))
    else:
        check(o.kind == "error" and o.sqlstate == "57P01" and o.status == "E", "57P01: %r" % o)
        check(run(w, "rollback").status == "I", "rollback")
        o = run(w, "insert into tr values ('%s', 3)" % m)
        check(o.kind == "ok", "a write after it: %r" % o)
        check(b.count("tr", m) == 1, "on the new primary")
    old = int(b.pg.psql("select count(*) from tr where m = '%s'" % m, port=b.pg.replica_port).strip())
    check(old == 0, "nothing of it on the old primary: %d" % old)


case_stale_primary_is_fenced.faults = ("stale_primary",)


CASES = [case_idle_autocommit, case_idle_in_transaction, case_autocommit_write_running,
         case_autocommit_safe_read_running, case_autocommit_opaque_read_running,
         case_read_calling_a_function_in_tr_read_functions,
         case_write_running_in_transaction, case_commit_running, case_session_state_survives,
         case_set_state_is_what_committed, case_every_set_comes_back, case_commit_of_a_lost_transaction_is_an_error,
         case_a_transaction_begun_inside_a_query_is_not_replayed, case_commit_and_chain_replays_the_chained_transaction,
         case_read_only_transaction,
         case_replay_that_differs_is_rolled_back_with_40001, case_notices_do_not_fail_a_replay,
         case_repeatable_read_is_never_replayed, case_default_repeatable_read_is_found_at_replay,
         case_extended_write_running, case_extended_safe_read_running, case_named_statements_in_a_transaction_are_replayed,
         case_a_statement_named_inside_the_transaction_is_replayed, case_named_read_running,
         case_a_read_that_parses_its_named_statement_runs_again,
         case_named_write_running_in_transaction,
         case_after_an_extended_copy_with_its_sync_pipelined, case_extended_in_transaction_then_extended_rollback,
         case_partial_result,
         case_copy_in_progress, case_written_while_the_primary_is_down, case_stale_primary_is_fenced]


def run_case(b, case, fault):
    """The case on a client of each tern at once, one fault for all of them."""
    name = case.__name__[len("case_"):]
    clients, gens, markers, running = {}, {}, [], []
    try:
        for mode in MODES:
            m = marker_of(name, fault, mode)
            w = clients[mode] = b.client(mode, getattr(case, "database", "postgres"))
            for sql in getattr(case, "setup", []):
                o = run(w, sql.format(m=m))
                check(o.kind == "ok", "setup %r: %r" % (sql, o))
            sql = getattr(case, "inflight", None)
            if sql:
                send_query(w, sql.format(m=m))
                markers.append(m)
                gens[mode] = None
            else:
                gens[mode] = case(b, w, mode, fault, m)
                step = next(gens[mode])  # up to its yield: the state before the fault
                if step and step[0] == "send":
                    w.send(step[1])
                    running.append(m)
                markers.append(m)
        if getattr(case, "inflight", None):
            b.wait_running(markers)
        elif running:
            b.wait_running(running)
        b.fault(fault, markers)
        if fault == "down_then_promote":
            for mode in MODES:
                next(gens[mode])  # the request the down primary cannot take
            time.sleep(0.3)  # (it waits meanwhile; how long does not matter)
            b.pg.promote_replica(stop_primary=None)
            b.primary_sql("alter system set synchronous_standby_names = ''")
            b.primary_sql("select pg_reload_conf()")
        for mode in MODES:
            m = marker_of(name, fault, mode)
            if gens[mode] is None:
                case(b, clients[mode], mode, fault, m)
            else:
                try:
                    next(gens[mode])
                except StopIteration:
                    pass
            b.counts["cases"] += 1
    finally:
        for w in clients.values():
            w.close()
        b.after_fault(fault)


def no_primary_within_write_timeout_secs_ends_the_session_with_08006(b):
    """No primary comes back within write_timeout_secs (2 s here): the write that waited for one gets
    08006 and its session closes, after the deadline and not long after it."""
    pg = b.pg
    ports = sorted([pg.primary_port, pg.replica_port])
    config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 1\npool_mode = transaction\n[servers]\n"
              "primary = host=127.0.0.1 port=%d\nother = host=127.0.0.1 port=%d\n"
              "[routing]\nmonitor_interval_ms = 100\n[replay]\ntr_mode = session\nwrite_timeout_secs = 2\n"
              % (free_port(), ports[0], ports[1]))
    t = TernProcess(TERN, config)
    t.start()
    try:
        w = Wire(t.port, timeout=30)
        w.login("postgres")
        check(run(w, "select 1").kind == "ok", "setup")
        pg.stop_primary("immediate")
        started = time.monotonic()
        o = run(w, "insert into tr values ('deadline', 1)")
        waited = time.monotonic() - started
        check(o.kind == "closed" and o.sqlstate == "08006", "08006, closed: %r" % o)
        check(2.0 <= waited < 8.0, "after the deadline: %.1fs" % waited)
        w.close()
    finally:
        t.stop()
        pg.start_primary()
    check(t.returncode == 0, "tern exited with %s" % t.returncode)
    check(b.count("tr", "deadline") == 0, "the write never ran")


def a_replay_that_outlasts_write_timeout_secs_ends_the_session_with_08006(b):
    """One deadline for the whole recovery, not only the wait for a primary: a transaction whose replay
    takes longer than write_timeout_secs (2 s here; its recorded read sleeps 3 s) ends with 08006 once the
    deadline passes, not when the replay would have finished; on the same primary after a terminated
    backend, and on the new primary after a promote."""
    pg = b.pg
    for fault in ("terminate", "promote"):
        marker = "outlast_" + fault
        ports = sorted([pg.primary_port, pg.replica_port])
        config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 1\npool_mode = transaction\n[servers]\n"
                  "primary = host=127.0.0.1 port=%d\nother = host=127.0.0.1 port=%d\n"
                  "[routing]\nmonitor_interval_ms = 100\n[replay]\ntr_mode = transaction\nwrite_timeout_secs = 2\n"
                  % (free_port(), ports[0], ports[1]))
        t = TernProcess(TERN, config)
        t.start()
        try:
            w = Wire(t.port, timeout=30)
            w.login("postgres")
            check(run(w, "begin").kind == "ok", "begin")
            check(run(w, "select pg_sleep(3), '%s'" % marker).kind == "ok", "a read of 3 s, recorded")
            b.fault(fault, [marker])
            started = time.monotonic()
            o = run(w, "select 1")
            waited = time.monotonic() - started
            check(o.kind == "closed" and o.sqlstate == "08006", "%s: 08006, closed: %r" % (fault, o))
            check(waited < 8.0, "%s: at the deadline, not after: %.1fs" % (fault, waited))
            w.close()
        finally:
            t.stop()
            b.after_fault(fault)


def fault_at_every_byte_offset_of_an_answer_is_classified_as_the_contract_says(b):
    """Deterministic fault points (the fake server of tests/integration/polar_fake.py, cutting its
    connection after the first k bytes of an answer, once per statement): for every k, what reached the
    client decides. A read (RowDescription, DataRow, CommandComplete, ReadyForQuery): while the client has
    nothing of it (k within the RowDescription, which tern holds) select runs it again on the next
    connection and the client gets its row once, session says 08007; a cut at the end of a message the
    client has whole gives 08007 after it (and ReadyForQuery, the session goes on); a cut inside one
    closes the connection with nothing more (the client holds part of a frame). A write (CommandComplete,
    ReadyForQuery) and a COMMIT: k = 0 or a cut after CommandComplete gives 08007 (the COMMIT's
    transaction over: 'I'), a cut inside a message closes. No k gives a row twice, a second
    RowDescription, or a write run twice."""
    import re
    from polar_fake import FakePolarServer

    class Cutter:
        def __init__(self, conn, local):
            self.conn, self.local = conn, local

        def sendall(self, data):
            cut = getattr(self.local, "cut", None)
            if cut is None:
                return self.conn.sendall(data)
            self.local.cut = None
            self.conn.sendall(data[:cut])
            self.conn.shutdown(2)
            raise EOFError

        def __getattr__(self, name):
            return getattr(self.conn, name)

    class CuttingFake(FakePolarServer):
        def __init__(self):
            super().__init__(False, "primary")
            self.local = threading.local()
            self.cut_done = set()

        def _serve(self, conn, number):
            super()._serve(Cutter(conn, self.local), number)

        def _query(self, state, number, text):
            out = super()._query(state, number, text)
            m = re.search(r"cut:(\d+)", text)
            if m:
                with self.lock:
                    first = text not in self.cut_done
                    self.cut_done.add(text)
                if first:
                    self.local.cut = int(m.group(1))
            return out

    fake = CuttingFake()
    terns = {}
    try:
        for mode in ("session", "select"):
            config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 1\npool_mode = transaction\n[servers]\n"
                      "primary = host=127.0.0.1 port=%d sslmode=disable gssencmode=disable\n"
                      "[routing]\nmonitor_interval_ms = 100\n[replay]\ntr_mode = %s\nwrite_timeout_secs = 10\n"
                      % (free_port(), fake.port, mode))
            terns[mode] = TernProcess(TERN, config)
            terns[mode].start()
        def answer_of(sql):
            """What the fake answers sql with, and where each of its messages (T, D, C, Z) ends."""
            answer = fake._select({"settings": {}}, sql) + fake._msg(b"Z", b"I")
            ends, at = [], 0
            while at < len(answer):
                at += 1 + int.from_bytes(answer[at + 1:at + 5], "big")
                ends.append(at)
            return answer, ends

        cases = 0
        for mode, t in terns.items():
            for k in range(len(answer_of("select 'x' /*cut:%d %s*/" % (99, mode))[0])):
                sql = "select 'x' /*cut:%d %s*/" % (k, mode)
                answer, boundaries = answer_of(sql)
                head = boundaries[0]  # the RowDescription, which tern holds until the first row
                with Wire(t.port, timeout=20) as w:
                    w.login("postgres")
                    send_query(w, sql)
                    kinds, sqlstate = "", None
                    while True:
                        msg = w.read_message()
                        if msg is None:
                            break
                        kinds += msg[0].decode()
                        if msg[0] == b"E" and sqlstate is None:
                            sqlstate = error_fields(msg[1]).get("C")
                        if msg[0] == b"Z":
                            break
                    check(kinds.count("T") <= 1 and kinds.count("D") <= 1, "k=%d: nothing twice: %r" % (k, kinds))
                    if k <= head and mode == "select":
                        check(kinds == "TDCZ", "%s k=%d: run again, once: %r" % (mode, k, kinds))
                    elif k <= head:
                        check(kinds == "EZ" and sqlstate == "08007", "%s k=%d: 08007: %r %s" % (mode, k, kinds, sqlstate))
                    elif k in boundaries:
                        shown = "TDCZ"[:boundaries.index(k) + 1]
                        check(kinds == shown + "EZ" and sqlstate == "08007",
                              "%s k=%d: 08007 after %s: %r %s" % (mode, k, shown, kinds, sqlstate))
                        check(run(w, "select 'y'").rows == [["y"]], "%s k=%d: the session goes on" % (mode, k))
                    else:
                        # Cut inside a message: the client has half a frame and can only be cut off.
                        tail = w.read_message() if msg is not None else None
                        check(tail is None and sqlstate is None and "Z" not in kinds,
                              "%s k=%d: closed: %r %s" % (mode, k, kinds, sqlstate))
                    cases += 1
            for verb, tag in (("insert", b"INSERT 0 1\0"), ("commit", b"COMMIT\0")):
                for k in range(len(fake._msg(b"C", tag) + fake._msg(b"Z", b"I"))):
                    with Wire(t.port, timeout=20) as w:
                        w.login("postgres")
                        if verb == "commit":
                            check(run(w, "begin").kind == "ok", "begin")
                            sql = "commit /*cut:%d %s*/" % (k, mode)
                        else:
                            sql = "insert into t values (1) /*cut:%d %s*/" % (k, mode)
                        o = run(w, sql)
                        if k == 0 or k == len(fake._msg(b"C", tag)):
                            check(o.kind == "error" and o.sqlstate == "08007" and o.status == "I",
                                  "%s %s k=%d: 08007: %r" % (mode, verb, k, o))
                        else:
                            check(o.kind == "closed" and o.sqlstate is None,
                                  "%s %s k=%d: closed: %r" % (mode, verb, k, o))
                    check(fake.seen().count(sql) == 1, "%s k=%d: ran once: %d" % (verb, k, fake.seen().count(sql)))
                    cases += 1
        b.counts["cases"] += cases - 1  # (the caller counts one)
        print("  byte offsets: %d cases" % cases)
    finally:
        for t in terns.values():
            t.stop()
        fake.stop()


def read_kinds(w):
    """Messages to ReadyForQuery or the end: their types as one string, the first error's SQLSTATE, the
    data rows, and whether the connection ended (None for the status then)."""
    kinds, sqlstate, rows = "", None, []
    while True:
        try:
            msg = w.read_message()
        except OSError:
            msg = None
        if msg is None:
            return kinds, sqlstate, rows, None
        kinds += msg[0].decode()
        if msg[0] == b"E" and sqlstate is None:
            sqlstate = error_fields(msg[1]).get("C")
        elif msg[0] == b"D":
            rows.append(data_row(msg[1]))
        elif msg[0] == b"Z":
            return kinds, sqlstate, rows, msg[1].decode()


@contextlib.contextmanager
def terns_in_every_mode(primary_port, routing="", replay=""):
    """One tern per tr_mode (MODES) in transaction pooling over the primary at primary_port (a proxy in
    front of it, say), with `routing` and `replay` keys added to those sections; each must exit 0 at the
    end."""
    terns = {}
    try:
        for mode in MODES:
            config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 1\npool_mode = transaction\n[servers]\n"
                      "primary = host=127.0.0.1 port=%d sslmode=disable gssencmode=disable\n"
                      "[routing]\n%s[replay]\ntr_mode = %s\n%s" % (free_port(), primary_port, routing, mode, replay))
            terns[mode] = TernProcess(TERN, config)
            terns[mode].start()
        yield terns
    finally:
        for t in terns.values():
            t.stop()
        for mode, t in terns.items():
            check(t.returncode == 0, "tern (%s) exited with %s:\n%s" % (mode, t.returncode, t.log_tail(20)))


def a_lost_answer_cut_between_messages_gets_its_one_error_and_the_session_goes_on(b):
    """The primary's connection cut at an exact message of an answer (tests/integration/cutting_proxy.py,
    in front of the real primary): after ParseComplete, after BindComplete, after RowDescription (an
    extended batch with a Flush, so tern forwards them at once; synced, it holds them until the first row
    or completion), after some DataRows (a simple query), and inside a DataRow. Whatever whole messages
    reached the client, the request gets the one error its outcome calls for after them, 08007 outside a
    transaction (57P01 inside one, which is then aborted), then ReadyForQuery, and the session goes on;
    nothing runs twice, no row is shown twice. Only a cut inside a message closes the session (the client
    holds part of a frame). tr_mode none closes with 57P01. Before: every one of these closed with 08006."""
    from cutting_proxy import CuttingProxy
    pg = b.pg
    pg.psql("create table if not exists trcut(m text, n int)")
    with CuttingProxy(pg.primary_port) as proxy, terns_in_every_mode(proxy.port, "monitor_interval_ms = 100\n", "write_timeout_secs = 10\n") as terns:
        cases = 0
        for mode, t in terns.items():
            none = mode == "none"
            for name, after, kind in (("parse", "after=1", "insert"), ("bind", "after=2", "insert"),
                                      ("rowdesc", "after=T", "select")):
                marker = "%s-%s" % (name, mode)
                sql = ("insert into trcut values ('%s', 1)" % marker if kind == "insert"
                       else "select g from generate_series(1, 3) g")
                with Wire(t.port, timeout=20) as w:
                    w.login("postgres")
                    w.send(parse("", "%s /*cut:%s %s*/" % (sql, after, marker)) + bind("") +
                           describe("P", "") + execute() + FLUSH)
                    want_head = {"after=1": "1", "after=2": "12", "after=T": "12T"}[after]
                    kinds, sqlstate, rows, status = read_kinds_until_error(w)
                    if none:
                        check(kinds == want_head + "E" and sqlstate == "57P01" and read_kinds(w)[3] is None,
                              "%s %s: 57P01, closed: %r %s" % (mode, name, kinds, sqlstate))
                    else:
                        check(kinds == want_head + "E" and sqlstate == "08007",
                              "%s %s: what came, then 08007: %r %s" % (mode, name, kinds, sqlstate))
                        w.send(SYNC)
                        kinds, sqlstate, rows, status = read_kinds(w)
                        check(kinds == "Z" and status == "I", "%s %s: the Sync's ReadyForQuery: %r" % (mode, name, kinds))
                        check(w.query("select 7") == [["7"]], "%s %s: the session goes on" % (mode, name))
                if kind == "insert":
                    check(b.count("trcut", marker) <= 1, "%s %s: written at most once" % (mode, name))
                cases += 1
            # The same INSERT synced: tern holds ParseComplete and BindComplete until the first row or
            # completion, so the client sees the error alone.
            marker = "synced-%s" % mode
            with Wire(t.port, timeout=20) as w:
                w.login("postgres")
                w.send(parse("", "insert into trcut values ('%s', 1) /*cut:after=2 %s*/" % (marker, marker)) +
                       bind("") + describe("P", "") + execute() + SYNC)
                kinds, sqlstate, rows, status = read_kinds(w)
                check((kinds[-1:], sqlstate, status) == ("E", "57P01", None) if none else
                      (kinds, sqlstate, status) == ("EZ", "08007", "I"), "%s synced: %r %s %s" % (mode, kinds, sqlstate, status))
                if not none:
                    check(w.query("select 7") == [["7"]], "%s synced: the session goes on" % mode)
            check(b.count("trcut", marker) <= 1, "%s synced: written at most once" % mode)
            cases += 1
            # Rows: after two of five (a simple query), outside and inside a transaction; inside one.
            for where in ("autocommit", "transaction"):
                marker = "rows-%s-%s" % (where, mode)
                with Wire(t.port, timeout=20) as w:
                    w.login("postgres")
                    if where == "transaction":
                        check(w.query("begin") == [], "begin")
                    send_query(w, "select g from generate_series(1, 5) g /*cut:after=D2 %s*/" % marker)
                    kinds, sqlstate, rows, status = read_kinds(w)
                    if none:
                        check(kinds.startswith("TDD") and sqlstate == "57P01" and status is None,
                              "%s rows %s: 57P01, closed: %r" % (mode, where, kinds))
                    elif where == "autocommit":
                        check((kinds, sqlstate, status) == ("TDDEZ", "08007", "I") and rows == [["1"], ["2"]],
                              "%s rows: two rows, 08007: %r %s %s" % (mode, kinds, sqlstate, status))
                        check(w.query("select 7") == [["7"]], "%s rows: the session goes on" % mode)
                    else:
                        check((kinds, sqlstate, status) == ("TDDEZ", "57P01", "E"),
                              "%s rows in a transaction: 57P01, aborted: %r %s %s" % (mode, kinds, sqlstate, status))
                        check(run(w, "select 1").sqlstate == "25P02", "%s: 25P02 until ROLLBACK" % mode)
                        check(run(w, "rollback").status == "I", "%s: ROLLBACK ends it" % mode)
                        check(w.query("select 7") == [["7"]], "%s rows in a transaction: the session goes on" % mode)
                cases += 1
            marker = "torn-%s" % mode
            with Wire(t.port, timeout=20) as w:
                w.login("postgres")
                send_query(w, "select g, repeat('y', 200) from generate_series(1, 5) g /*cut:in=D2 %s*/" % marker)
                kinds, sqlstate, rows, status = read_kinds(w)
                check(kinds == "TD" and status is None and len(rows) == 1,
                      "%s inside a DataRow: one row, then the connection ends: %r %s" % (mode, kinds, sqlstate))
            cases += 1
        check(len(proxy.cuts) == cases, "every case was cut once: %d of %d" % (len(proxy.cuts), cases))
        b.counts["cases"] += cases - 1  # (the caller counts one)
        print("  cut between and inside messages: %d cases" % cases)


def a_message_split_across_two_receives_is_shown_whole(b):
    """The primary's answer read in two receives inside one message (tests/integration/cutting_proxy.py's
    split: its first three bytes, then the rest): what Transaction Replay holds or judges there (a
    RowDescription and a ParseComplete ahead of the first row, a notice, an error) reaches the client
    whole and once, in every tr_mode. Before: the message's hold was the receive's, so a held message whose
    end came in the next receive was shown to nobody (a query answered without its RowDescription, an
    error lost)."""
    from cutting_proxy import CuttingProxy
    pg = b.pg
    with CuttingProxy(pg.primary_port) as proxy, terns_in_every_mode(proxy.port, "", "") as terns:
        cases = 0
        for mode, t in terns.items():
            with Wire(t.port, timeout=20) as w:
                w.login("postgres")
                for kind, sql, want in (("T", "select 7 as a", ("TDCZ", None, [["7"]])),
                                        ("N", "do $$ begin raise notice 'split'; end $$", ("NCZ", None, [])),
                                        ("E", "select 1 / 0", ("EZ", "22012", []))):
                    send_query(w, "%s /*cut:split=%s simple-%s-%s*/" % (sql, kind, kind, mode))
                    kinds, sqlstate, rows, status = read_kinds(w)
                    check((kinds, sqlstate, rows) == want and status == "I",
                          "%s: a %s in two receives: %r %s %r" % (mode, kind, kinds, sqlstate, rows))
                    cases += 1
                for kind in "1T":
                    w.send(parse("", "select 8 as b /*cut:split=%s extended-%s-%s*/" % (kind, kind, mode)) +
                           bind("") + describe("P", "") + execute() + SYNC)
                    kinds, sqlstate, rows, status = read_kinds(w)
                    check((kinds, sqlstate, rows, status) == ("12TDCZ", None, [["8"]], "I"),
                          "%s: a synced batch's %s in two receives: %r %s %r" % (mode, kind, kinds, sqlstate, rows))
                    cases += 1
                check(w.query("select 9") == [["9"]], "%s: the session goes on" % mode)
        check(len(proxy.cuts) == cases, "every answer was split once: %d of %d" % (len(proxy.cuts), cases))
        b.counts["cases"] += cases - 1  # (the caller counts one)
        print("  messages split across receives: %d cases" % cases)


def read_kinds_until_error(w):
    """As read_kinds, but an ErrorResponse ends it too (an unsynced batch's error comes with no
    ReadyForQuery)."""
    kinds, sqlstate, rows = "", None, []
    while True:
        try:
            msg = w.read_message()
        except OSError:
            msg = None
        if msg is None:
            return kinds, sqlstate, rows, None
        kinds += msg[0].decode()
        if msg[0] == b"E":
            sqlstate = error_fields(msg[1]).get("C")
            return kinds, sqlstate, rows, "error"
        if msg[0] == b"D":
            rows.append(data_row(msg[1]))


def show_failovers_and_api_status_list_what_the_battery_did(b):
    """After the cases: the admin console's SHOW FAILOVERS and /api/status's replay section list the
    failovers each tern handled, newest first, with what it did (the transaction tern replayed some,
    the none tern only closed sessions), and the counters agree with /metrics."""
    import json
    import urllib.request
    for mode, t in b.terns.items():
        with Wire(t.port) as w:
            w.login("postgres", "tern")
            rows = w.query("show failovers")
        status = json.loads(urllib.request.urlopen("http://127.0.0.1:%d/api/status" % t.http_port,
                                                   timeout=10).read())["replay"]
        actions = {row[5] for row in rows}
        check(len(rows) > 0 and [r["action"] for r in status["recent"]] == [row[5] for row in rows],
              "%s: the console and /api/status list the same failovers: %r %r" % (mode, rows[:3], status["recent"][:3]))
        check(status["mode"] == mode, "%s: the mode: %r" % (mode, status["mode"]))
        if mode == "none":
            check(actions == {"close"} and status["failovers"] == 0, "none only closes: %r %r" % (actions, status))
        else:
            # (select replays read-only transactions, transaction any; session never)
            check(mode != "session" or "replay" not in actions, "%s: its actions: %r" % (mode, actions))
            check(status["failovers"] >= len([r for r in rows if r[5] != "close"]), "%s: counted: %r" % (mode, status))
        if mode == "transaction":
            unknown = len([r for r in rows if r[6] == "08007"])  # (the last 32 listed; the counter counts all)
            check(status["transactions_replayed"] > 0 and status["unknown_outcome_errors"] >= unknown,
                  "replayed and 08007 counted: %r" % status)


def backend_response_timeout_secs_closes_a_stuck_answer_and_the_session_goes_on(b):
    """[limits] backend_response_timeout_secs = 1: a statement whose answer has not ended a second after
    it went out (pg_sleep(30)) loses its connection there, decided as a lost connection: 08007 for it
    (session mode) after about a second, and the session goes on."""
    pg = b.pg
    config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 1\npool_mode = transaction\n[servers]\n"
              "primary = host=127.0.0.1 port=%d\n[replay]\ntr_mode = session\n[limits]\n"
              "backend_response_timeout_secs = 1\n" % (free_port(), pg.primary_port))
    t = TernProcess(TERN, config)
    t.start()
    try:
        with Wire(t.port, timeout=30) as w:
            w.login("postgres")
            started = time.monotonic()
            o = run(w, "select pg_sleep(30)")
            took = time.monotonic() - started
            check(o.kind == "error" and o.sqlstate == "08007" and o.status == "I", "08007: %r" % o)
            check(1.0 <= took < 5.0, "about a second (the worker's tick): %.1fs" % took)
            expect_session_goes_on(b, w, "backend_response_timeout_secs")
    finally:
        t.stop()
    check(t.returncode == 0, "tern exited with %s" % t.returncode)


def tr_max_session_set_statements_refuses_the_move_with_08006(b):
    """[limits] tr_max_session_set_statements at its default (256) counts distinct variables: a session
    that set 256 (custom variables, in Queries of 64 SETs, one of them set twice) and loses its primary
    connection inside a transaction moves (57P01 for its lost transaction) with all 256 back; one that
    set 257 is closed with 08006 instead of moving with part of its state, and is counted once; one
    that ran a SET tern could not keep as written (a comment in its value) is closed with 08006 too."""
    pg = b.pg
    config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 1\npool_mode = transaction\n[servers]\n"
              "primary = host=127.0.0.1 port=%d\n[replay]\ntr_mode = session\n[admin]\nhttp_listen = 127.0.0.1:%d\n"
              % (free_port(), pg.primary_port, free_port()))
    t = TernProcess(TERN, config)
    t.start()

    def sets(n):
        names = ["set cap.v%d = '%d'" % (i, i) for i in range(1, n + 1)] + ["set cap.v1 = 'again'"]
        return ["; ".join(names[i:i + 64]) for i in range(0, len(names), 64)]
    try:
        for name, queries, want in (("n256", sets(256), "57P01"), ("n257", sets(257), "08006"),
                                    ("comment", ["set work_mem = '8MB' /* why */"], "08006")):
            with Wire(t.port, timeout=30) as w:
                w.login("postgres")
                for sql in queries + ["begin"]:
                    check(run(w, sql).kind == "ok", sql[:60])
                marker = "setcap_%s" % name
                check(run(w, "select 1 /*%s*/" % marker).kind == "ok", "in the transaction")
                pg.psql("select pg_terminate_backend(pid, 10000) from pg_stat_activity where query like "
                        "'%%%s%%' and pid <> pg_backend_pid()" % marker)
                o = run(w, "select 2")
                if want == "08006":
                    check(o.kind == "closed" and o.sqlstate == "08006", "%s refused: %r" % (name, o))
                    continue
                check(o.kind == "error" and o.sqlstate == "57P01", "moved: %r\n%s" % (o, t.log_tail(8)))
                check(run(w, "rollback").status == "I", "rollback")
                o = run(w, "select current_setting('cap.v1'), current_setting('cap.v256'), "
                           "(select count(*) from generate_series(2, 256) i where current_setting('cap.v' || i, true) = i::text)")
                check(o.rows == [["again", "256", "255"]], "all 256 back: %r" % o)
        import urllib.request
        http = int(config.split("http_listen = 127.0.0.1:")[1].split("\n")[0])
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http, timeout=10).read().decode()
        check("tr_session_set_cap_exceeded_total 1" in text, "counted once")
    finally:
        t.stop()
    check(t.returncode == 0, "tern exited with %s" % t.returncode)


def terminated_backends_under_pgbench_never_bring_tern_down(b):
    """Chaos, bounded: pgbench tpcb-like (8 clients -M simple, 8 -M extended, 12 s) through the
    transaction tern while two random server backends are terminated every 50 to 400 ms. Clients get
    their errors (pgbench stops a client at its first); tern stays up, serves a new client afterwards,
    and exits 0 at the end (under ASan: no report)."""
    import random
    from pgcluster import clean_env
    pg = b.pg
    subprocess.run(["pgbench", "-i", "-q", "-s", "1", "-h", "127.0.0.1", "-p", str(pg.primary_port), "-U", "postgres",
                    "postgres"], check=True, env=clean_env(), capture_output=True, timeout=120)
    t = b.terns["transaction"]
    procs = [subprocess.Popen(["pgbench", "-c", "8", "-j", "1", "-T", "12", "-M", proto, "-h", "127.0.0.1", "-p",
                               str(t.port), "-U", "postgres", "postgres"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, env=clean_env()) for proto in ("simple", "extended")]
    kills = 0
    rng = random.Random(12)
    deadline = time.monotonic() + 11
    try:
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.05, 0.4))
            kills += int(b.primary_sql("select count(pg_terminate_backend(pid)) from (select pid from pg_stat_activity "
                                       "where backend_type = 'client backend' and application_name = 'pgbench' "
                                       "order by random() limit 2) x") or 0)
    finally:
        outs = [p.communicate(timeout=120)[0].decode() for p in procs]
    check(t.alive(), "tern is up after %d terminated backends" % kills)
    check(kills > 10, "backends were terminated: %d" % kills)
    processed = [int(l.split(":")[1]) for o in outs for l in o.splitlines()
                 if l.startswith("number of transactions actually processed")]
    check(len(processed) == 2 and min(processed) > 0, "both runs did work: %r" % processed)
    with Wire(t.port) as w:
        w.login("postgres")
        check(run(w, "select 1").rows == [["1"]], "a new client is served")
    print("  chaos: %d backends terminated, %r transactions" % (kills, processed))


def session_pooled_tern(b, mode, more=""):
    """A tern in session pooling (the default pool_mode) at tr_mode `mode`, one server, /metrics on."""
    import urllib.request
    http = free_port()
    config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 1\npool_mode = session\n[servers]\n"
              "primary = host=127.0.0.1 port=%d\n[replay]\ntr_mode = %s\n[admin]\nhttp_listen = 127.0.0.1:%d\n%s"
              % (free_port(), b.pg.primary_port, mode, http, more))
    t = TernProcess(TERN, config)
    t.start()

    def failovers():
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http, timeout=10).read().decode()
        return sum(int(l.split()[-1]) for l in text.splitlines() if l.startswith("tr_failovers_total"))
    t.failovers = failovers
    return t


def codes_after_terminate(b, w):
    """Terminates w's backend and reads to the close: the SQLSTATE of each error w got."""
    pid = w.query("select pg_backend_pid()")[0][0]
    b.primary_sql("select pg_terminate_backend(%s, 10000)" % pid)
    return [e["C"] for e in w.errors_until_close()]


def terminate_idle_backend(b, t, w, marker=None):
    """Terminates w's backend while w is idle (found by the marker its last statement carried, else
    asked), and waits until tern has taken the loss (counted)."""
    pid = (b.primary_sql("select pid from pg_stat_activity where query like '%%%s%%' and pid <> pg_backend_pid()"
                         % marker) if marker else w.query("select pg_backend_pid()")[0][0])
    before = t.failovers()
    b.primary_sql("select pg_terminate_backend(%s, 10000)" % pid)
    try:
        wait_for(lambda: t.failovers() > before, "tern to take the loss of backend %s" % pid, timeout=10)
    except AssertionError:
        print(t.log_tail(20))
        raise
    return pid


def a_session_pooled_client_moves_with_its_state_and_one_holding_server_state_gets_08006(b):
    """Session pooling (the default pool_mode), the default tr_mode session: the client's backend
    terminated while it is idle, the client sees nothing; its next statements run on a new backend with
    its SETs (statement_timeout, application_name, a custom variable) and its protocol-level named
    statement prepared again. Idle inside a transaction: 57P01, 25P02 until ROLLBACK, then the session
    goes on; under tr_mode transaction the transaction is replayed and commits once. Its autocommit
    LISTENs (less an UNLISTEN) are listened to again: NOTIFYs after the move reach it. A session that made
    a temporary table, a cursor WITH HOLD, a session advisory lock, an SQL PREPARE, a LISTEN inside a
    transaction, or (max_prepared_statements = 0) a named statement, cannot move: 08006, closed. tr_mode none: 57P01, closed. Before, every one of these ended with 08006."""
    marker = "sessmove"
    t = session_pooled_tern(b, "session")
    try:
        with Wire(t.port, timeout=30) as w:
            w.login("postgres")
            for sql in ("set statement_timeout = '7s'", "set application_name = 'movee'", "set app.x = 'kept'"):
                check(run(w, sql).kind == "ok", sql)
            kinds, _, sqlstate, _ = w.exchange(parse("s1", "select $1::int + 1"), SYNC)
            check(sqlstate is None and kinds == "1Z", "the named statement: %r %r" % (kinds, sqlstate))
            old = terminate_idle_backend(b, t, w)
            o = run(w, "select pg_backend_pid(), current_setting('statement_timeout'), "
                       "current_setting('application_name'), current_setting('app.x')")
            check(o.kind == "ok" and o.rows[0][0] != old and o.rows[0][1:] == ["7s", "movee", "kept"],
                  "a new backend with the session's settings: %r (old %s)" % (o, old))
            kinds, rows, sqlstate, _ = w.exchange(bind("s1", ["41"]), execute(), SYNC)
            check(sqlstate is None and rows == [["42"]], "the named statement, prepared again: %r %r" % (rows, sqlstate))
            check(run(w, "begin").kind == "ok" and run(w, "insert into tr values ('%s', 1)" % marker).kind == "ok",
                  "a transaction that wrote")
            terminate_idle_backend(b, t, w)
            o = run(w, "select 1")
            check(o.kind == "error" and o.sqlstate == "57P01" and o.status == "E", "57P01, the block failed: %r" % o)
            check(run(w, "select 1").sqlstate == "25P02", "25P02 until ROLLBACK")
            check(run(w, "rollback").kind == "ok", "ROLLBACK")
            expect_session_goes_on(b, w, "after the lost transaction")
            check(b.count("tr", marker) == 0, "nothing of the lost transaction committed")
            for sql in ('listen "Sess Ch"', "listen sessmove_a", "listen sessmove_b", "unlisten sessmove_a"):
                check(run(w, sql).kind == "ok", sql)
            terminate_idle_backend(b, t, w)
            wait_for(lambda: b.primary_sql("select count(*) from pg_stat_activity where state = 'idle' and "
                                           "query like 'LISTEN %%Sess Ch%%'") == "1",
                     "the session to listen again on its new backend, before its next statement", timeout=10)
            b.primary_sql("notify \"Sess Ch\", 'one'; notify sessmove_a, 'gone'; notify sessmove_b, 'two'")
            send_query(w, "select 1")
            heard = []
            while True:
                kind, body = w.read_message()
                if kind == b"A":
                    heard.append(body[4:].split(b"\0")[:2])
                if kind == b"Z":
                    break
            check(sorted(heard) == [[b"Sess Ch", b"one"], [b"sessmove_b", b"two"]],
                  "its LISTENs, listened to again on the new backend (not the one it left): %r" % heard)
        for name, sql in (("temp", "create temp table sessmove_t(a int)"),
                          ("hold", "declare sessmove_c cursor with hold for select 1"),
                          ("advisory", "select pg_advisory_lock(4242)"),
                          ("prepare", "prepare sessmove_p as select 1"),
                          ("listen in a transaction", "begin; listen sessmove_tx; commit")):
            with Wire(t.port, timeout=30) as w:
                w.login("postgres")
                check(run(w, sql).kind == "ok", sql)
                codes = codes_after_terminate(b, w)
                check(codes == ["08006"], "%s: 08006, closed: %r" % (name, codes))
    finally:
        t.stop()
    check(t.returncode == 0, "tern (session) exited with %s" % t.returncode)
    t = session_pooled_tern(b, "transaction")
    try:
        with Wire(t.port, timeout=30) as w:
            w.login("postgres")
            check(run(w, "begin").kind == "ok" and run(w, "insert into tr values ('%s', 2)" % marker).kind == "ok",
                  "a transaction that wrote")
            terminate_idle_backend(b, t, w, marker)  # (its pid asked of the transaction would differ at the replay)
            o = run(w, "insert into tr values ('%s', 3)" % marker)
            check(o.kind == "ok" and o.status == "T", "replayed, the transaction goes on: %r" % o)
            check(run(w, "commit").kind == "ok", "commit")
            check(b.count("tr", marker) == 2, "both rows, once each: %d" % b.count("tr", marker))
    finally:
        t.stop()
    check(t.returncode == 0, "tern (transaction) exited with %s" % t.returncode)
    t = session_pooled_tern(b, "none")
    try:
        with Wire(t.port, timeout=30) as w:
            w.login("postgres")
            codes = codes_after_terminate(b, w)
            check(codes and set(codes) == {"57P01"}, "none: 57P01, closed: %r" % codes)
    finally:
        t.stop()
    check(t.returncode == 0, "tern (none) exited with %s" % t.returncode)
    # With max_prepared_statements = 0 nothing keeps a named statement for a move: one is a refusal too.
    t = session_pooled_tern(b, "session", more="[pool]\nmax_prepared_statements = 0\n")
    try:
        with Wire(t.port, timeout=30) as w:
            w.login("postgres")
            kinds, _, sqlstate, _ = w.exchange(parse("s0", "select 1"), SYNC)
            check(sqlstate is None, "a named statement: %r" % kinds)
            codes = codes_after_terminate(b, w)
            check(codes == ["08006"], "a named statement nothing keeps: 08006, closed: %r" % codes)
    finally:
        t.stop()
    check(t.returncode == 0, "tern (max_prepared_statements = 0) exited with %s" % t.returncode)


def fencing_cuts_an_idle_session_pooled_connection_and_the_session_moves(b):
    """A promote that leaves the old primary up (stale_primary): a session-pooled client idle on the old
    primary holds its connection there; tern fences the old server and cuts that connection, and the
    client's next write runs on the new primary with no error, nothing of it on the old one. A client of
    a [databases] entry pinned to the old primary (server=) cannot move: its connection is cut too and it
    gets 08006. Before, fencing cut transaction-pooled sessions only and both kept writing to the old
    primary."""
    import urllib.request
    pg = b.pg
    marker = "fence_sess"
    http = free_port()
    ports = sorted([pg.primary_port, pg.replica_port])
    names = {ports[0]: "primary", ports[1]: "other"}
    config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 1\npool_mode = session\n[servers]\n"
              "primary = host=127.0.0.1 port=%d\nother = host=127.0.0.1 port=%d\n[routing]\nmonitor_interval_ms = 100\n"
              "[admin]\nhttp_listen = 127.0.0.1:%d\n[databases]\npinned = dbname=postgres server=%s\n* =\n"
              % (free_port(), ports[0], ports[1], http, names[pg.primary_port]))
    t = TernProcess(TERN, config)
    t.start()

    def writes_go_to():
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http, timeout=10).read().decode()
        return [l.split('server="', 1)[1].split('"', 1)[0] for l in text.splitlines()
                if l.startswith("tern_server_writes{") and l.endswith(" 1")]
    try:
        wait_for(lambda: writes_go_to() == [names[pg.primary_port]], "the monitor to know the primary", timeout=10)
        with Wire(t.port, timeout=30) as w, Wire(t.port, timeout=30) as pinned:
            w.login("postgres", params={"application_name": marker})
            check(run(w, "select 1").kind == "ok", "a first statement, on the old primary")
            pinned.login("postgres", "pinned")
            check(run(pinned, "select 1").kind == "ok", "the pinned client, on the old primary")
            b.fault("stale_primary", [])
            try:
                wait_for(lambda: writes_go_to() == [names[pg.primary_port]], "tern to follow the promote", timeout=15)
                old = pg.replica_port  # (the old primary, left up)
                wait_for(lambda: pg.psql("select count(*) from pg_stat_activity where application_name = '%s'"
                                         % marker, port=old).strip() == "0",
                         "the session's connection to the old primary cut", timeout=10)
                o = run(w, "insert into tr values ('%s', 1)" % marker)
                check(o.kind == "ok" and o.status == "I", "the write runs, with no error: %r" % o)
                check(b.count("tr", marker) == 1, "on the new primary")
                on_old = pg.psql("select count(*) from tr where m = '%s'" % marker, port=old).strip()
                check(on_old == "0", "nothing on the old primary: %s" % on_old)
                codes = [e["C"] for e in pinned.errors_until_close()]
                check(codes == ["08006"], "the pinned client's connection cut: 08006, closed: %r" % codes)
            finally:
                b.after_fault("stale_primary")
    finally:
        t.stop()
    check(t.returncode == 0, "tern exited with %s" % t.returncode)


def a_replay_lost_again_starts_over_and_the_transaction_goes_on(b):
    """The connection a transaction is being replayed on is lost too (a switchover's old primary that still
    answered as one, then terminated its backends): the replay starts over on the next connection, the
    client sees nothing of either loss, and its transaction goes on and commits once. Its recorded read
    sleeps 1.5 s, so the test finds the replay running (a new backend with the marker) and terminates it;
    before, that second loss ended the session (08006)."""
    pg = b.pg
    marker = "replay_again"
    config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 1\npool_mode = transaction\n[servers]\n"
              "primary = host=127.0.0.1 port=%d\n[replay]\ntr_mode = transaction\n" % (free_port(), pg.primary_port))
    t = TernProcess(TERN, config)
    t.start()
    try:
        with Wire(t.port, timeout=30) as w:
            w.login("postgres")
            for sql in ("begin", "insert into tr values ('%s', 1)" % marker, "select pg_sleep(1.5), '%s'" % marker):
                check(run(w, sql).kind == "ok", sql)
            find = ("select pid from pg_stat_activity where query like '%%%s%%' and query like '%%pg_sleep%%' "
                    "and pid <> pg_backend_pid()" % marker)
            first = b.primary_sql(find)
            check(first.isdigit(), "the client's backend: %r" % first)
            b.primary_sql("select pg_terminate_backend(%s, 10000)" % first)

            def replay_running():
                pids = b.primary_sql(find + " and state = 'active'").split()
                return [p for p in pids if p != first]
            wait_for(replay_running, "the replay's read running on a new backend", timeout=15)
            second = replay_running()[0]
            b.primary_sql("select pg_terminate_backend(%s, 10000)" % second)
            o = run(w, "insert into tr values ('%s', 2)" % marker)
            check(o.kind == "ok" and o.status == "T", "the transaction goes on after two losses: %r" % o)
            o = run(w, "commit")
            check(o.kind == "ok" and o.status == "I", "commit: %r" % o)
            check(b.count("tr", marker) == 2, "both rows, once each: %d" % b.count("tr", marker))
            check("the replay starts over" in t.log_tail(40), "the second loss restarted the replay (log)")
    finally:
        t.stop()
    check(t.returncode == 0, "tern exited with %s" % t.returncode)


def replay_bounds_make_a_transaction_unreplayable(b):
    """[limits] tr_max_replay_statements = 3 and tr_max_observation_bytes = 1kB, tr_mode = transaction: a
    transaction of four statements, and one whose answer was 5 kB, are not replayed (57P01 for the next
    statement, as under session); one within both bounds is (its third statement after the replay still
    within). tr_replay_cap_exceeded_total counts the two."""
    import urllib.request
    pg = b.pg
    http = free_port()
    config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 1\npool_mode = transaction\n[servers]\n"
              "primary = host=127.0.0.1 port=%d\n[replay]\ntr_mode = transaction\n[limits]\n"
              "tr_max_replay_statements = 3\ntr_max_observation_bytes = 1kB\n[admin]\nhttp_listen = 127.0.0.1:%d\n"
              % (free_port(), pg.primary_port, http))
    t = TernProcess(TERN, config)
    t.start()
    try:
        for name, statements, want in (("within", ["select 1"], "ok"),
                                       ("statements", ["select 1", "select 2", "select 3"], "57P01"),
                                       ("answer", ["select repeat('x', 5000)"], "57P01")):
            with Wire(t.port, timeout=30) as w:
                w.login("postgres")
                marker = "cap_%s" % name
                for sql in ["begin"] + statements[:-1] + [statements[-1] + " /*%s*/" % marker]:
                    check(run(w, sql).kind == "ok", sql)
                pg.psql("select pg_terminate_backend(pid, 10000) from pg_stat_activity where query like "
                        "'%%%s%%' and pid <> pg_backend_pid()" % marker)
                o = run(w, "select 3")
                if want == "ok":
                    check(o.kind == "ok" and o.status == "T", "%s: replayed: %r" % (name, o))
                else:
                    check(o.kind == "error" and o.sqlstate == want, "%s: not replayed: %r" % (name, o))
                run(w, "rollback")
        def counted():  # (the workers publish their counters at their tick)
            text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http, timeout=10).read().decode()
            return [l for l in text.splitlines() if l.startswith("tr_replay_cap")] == ["tr_replay_cap_exceeded_total 2"]
        wait_for(counted, "both counted (tr_replay_cap_exceeded_total 2)", 5)
    finally:
        t.stop()
    check(t.returncode == 0, "tern exited with %s" % t.returncode)


SPECIAL = [show_failovers_and_api_status_list_what_the_battery_did,
           a_replay_lost_again_starts_over_and_the_transaction_goes_on,
           a_session_pooled_client_moves_with_its_state_and_one_holding_server_state_gets_08006,
           fencing_cuts_an_idle_session_pooled_connection_and_the_session_moves,
           replay_bounds_make_a_transaction_unreplayable,
           terminated_backends_under_pgbench_never_bring_tern_down,
           tr_max_session_set_statements_refuses_the_move_with_08006,
           backend_response_timeout_secs_closes_a_stuck_answer_and_the_session_goes_on,
           no_primary_within_write_timeout_secs_ends_the_session_with_08006,
           a_replay_that_outlasts_write_timeout_secs_ends_the_session_with_08006,
           fault_at_every_byte_offset_of_an_answer_is_classified_as_the_contract_says,
           a_lost_answer_cut_between_messages_gets_its_one_error_and_the_session_goes_on,
           a_message_split_across_two_receives_is_shown_whole]


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
    passed = failed = 0
    started = time.monotonic()
    # The replica is a synchronous standby: an acknowledged commit is on it, so a promote loses none.
    with PgCluster(with_replica=True, extra_conf={"synchronous_commit": "on",
                                                  "synchronous_standby_names": "'*'"}) as pg:
        b = Battery(pg)
        try:
            for case in CASES:
                for fault in getattr(case, "faults", FAULTS):
                    name = "%s/%s" % (case.__name__[len("case_"):], fault)
                    if args.k and not any(k in name for k in args.k):
                        continue
                    t0 = time.monotonic()
                    try:
                        run_case(b, case, fault)
                        passed += len(MODES)  # (a case under one fault, in each mode)
                        print("PASS %s x %d modes (%.1fs)" % (name, len(MODES), time.monotonic() - t0), flush=True)
                    except Exception:
                        failed += len(MODES)
                        print("FAIL %s (%.1fs)\n%s" % (name, time.monotonic() - t0, traceback.format_exc()))
                        for mode, t in b.terns.items():
                            print("--- tern (%s) log tail ---\n%s" % (mode, t.log_tail(15)))
                        print(flush=True)
            for fn in SPECIAL:
                if args.k and not any(k in fn.__name__ for k in args.k):
                    continue
                t0 = time.monotonic()
                try:
                    before = b.counts["cases"]
                    fn(b)
                    b.counts["cases"] += 1
                    passed += b.counts["cases"] - before
                    print("PASS %s (%.1fs)" % (fn.__name__, time.monotonic() - t0), flush=True)
                except Exception:
                    failed += 1
                    print("FAIL %s (%.1fs)\n%s" % (fn.__name__, time.monotonic() - t0, traceback.format_exc()))
        finally:
            b.stop()
    print("failover battery: %d cases (mode x fault x state); outcome-unknown writes: %d committed, %d absent; "
          "%.0fs" % (b.counts["cases"], b.counts["unknown_committed"], b.counts["unknown_absent"],
                     time.monotonic() - started))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
