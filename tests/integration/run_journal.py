#!/usr/bin/env python3
"""The recovery journal end to end (issue 13): pgbench through tern writes committed history, and POST
/api/replay applies it to copies of the database it started from, which must then equal the source.

One PostgreSQL primary (pgcluster.py, no replica). Database jsrc is pgbench -i'd directly; jbase is a copy of
it as it started (CREATE DATABASE ... TEMPLATE: nothing ever connects to jbase, so copies of it can be made
at any time). Cases, in order (each a function; later ones use what earlier ones left):
  - round 1: tern with [journal] dir (fsync = interval), pgbench tpcb-like -M simple -n -c 4 -T 5 on jsrc;
    committed_history into jcopy (a copy of jsrc before the round): applied = the transactions pgbench
    processed = the history rows it added, and jcopy equals jsrc (accounts, tellers, branches row for row,
    history apart from mtime); the journal's metrics and /api/status coverage;
  - a target without the tables stops at the first transaction (partial, stopped_at 1, last_commit_seq 0);
    a target whose 11th transaction fails (a trigger) stops there with 10 applied and resumes, once fixed,
    from last_commit_seq: then it equals jsrc;
  - round 2 and 3: tern restarted on the same journal dir (the segments read back, commit_seq continues);
    pgbench -M extended, then -M prepared, each replayed into jcopy2 (a copy made while tern was down) with
    after_commit_seq = the last seq before the round; the whole history from the disk into a fresh copy of
    jbase; time_window over everything, and over round 3 alone;
  - access: with http_token, no or a wrong bearer is 401; http_listen 0.0.0.0 without a token is 403;
    tr_enabled = false is 503; bad bodies 400, a GET 405, a body over 64 kB 413;
  - a replay blocked on a lock stops at replay_deadline_secs (partial, "deadline"), a second replay meanwhile
    is 409 and /metrics keeps answering; an incomplete transaction (COPY FROM STDIN) makes committed_history
    answer 409 naming it, while time_window runs past it best effort.

usage: run_journal.py [-k SUBSTRING]...   (TERN_BINARY and TERN_SOURCE_ROOT from meson)"""
import argparse
import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pgcluster import PgCluster, clean_env, find_pg_bindir, free_port  # noqa: E402
from procs import TernProcess  # noqa: E402
from run_integration import wait_for  # noqa: E402
from wire import SYNC, Wire, cstr, execute, message, parse  # noqa: E402

ROOT = os.environ.get("TERN_SOURCE_ROOT", os.path.dirname(os.path.dirname(HERE)))
TERN = os.environ.get("TERN_BINARY", os.path.join(ROOT, "build", "tern"))
SUITE_DEADLINE_S = 540
PGBENCH_SECONDS = 5
CHECKS = 0


def check(condition, what):
    global CHECKS
    if not condition:
        raise AssertionError(what)
    CHECKS += 1


class State:
    """What the cases share: the cluster, the journal dir, the rounds' numbers."""

    def __init__(self, pg):
        self.pg = pg
        self.journal_dir = tempfile.mkdtemp(prefix="tern-journal-")
        self.processed = {}  # round -> transactions pgbench processed
        self.seq_before = {}  # round -> commit_seq_high before it
        self.round3_from = None  # an RFC 3339 time between rounds 2 and 3

    def target(self, dbname):
        return "host=127.0.0.1 port=%d dbname=%s user=postgres" % (self.pg.primary_port, dbname)


@contextlib.contextmanager
def tern_running(pg, journal_dir="", http_listen=None, token="", tr_enabled=True, deadline_s=300):
    """tern in front of the primary, transaction pooling, [admin] http_listen (loopback by default); it must
    exit 0 at the end."""
    http = free_port()
    config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 2\npool_mode = transaction\n[servers]\n"
              "primary = host=127.0.0.1 port=%d\n[pool]\npool_size = 8\n[limits]\nmax_client_conn = 100\n"
              "replay_deadline_secs = %d\n[journal]\ndir = %s\nfsync = interval\nfsync_interval_ms = 50\n"
              "[replay]\ntr_enabled = %s\n[admin]\nhttp_listen = %s\nhttp_token = %s\n"
              % (free_port(), pg.primary_port, deadline_s, journal_dir, "true" if tr_enabled else "false",
                 (http_listen or "127.0.0.1:%d") % http, token))
    t = TernProcess(TERN, config)
    t.start()
    t.http_port = http
    try:
        wait_for(lambda: http_get(t, "/api/status")[0] == 200, "the admin endpoint answers", 10)
        yield t
    finally:
        t.stop()
        check(t.returncode == 0, "tern exited with %s:\n%s" % (t.returncode, t.log_tail(30)))


def http_get(t, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (t.http_port, path), timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def replay(t, body, token=None, raw=None, timeout=120, method="POST"):
    """POST /api/replay: (status, the JSON answer or the text when it is not JSON)."""
    data = raw if raw is not None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = token
    request = urllib.request.Request("http://127.0.0.1:%d/api/replay" % t.http_port, data=data, headers=headers,
                                     method=method)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        answer = json.loads(text)
    except ValueError:
        answer = text
    if status == 200 and time.monotonic() - started > 1:
        print("  replay %s: applied %s, failed %s in %.1f s" % (body.get("mode", "time_window"), answer["applied"],
                                                              answer["failed"], time.monotonic() - started), flush=True)
    return status, answer


def metrics(t):
    status, text = http_get(t, "/metrics")
    check(status == 200, "/metrics: %s" % status)
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def journal_status(t):
    status, text = http_get(t, "/api/status")
    check(status == 200, "/api/status: %s" % status)
    return json.loads(text)["journal"]


def rfc3339_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pgbench(t, dbname, protocol):
    """pgbench tpcb-like through tern, no vacuum: the transactions it processed (it must report no error)."""
    r = subprocess.run(["pgbench", "-n", "-c", "4", "-j", "2", "-T", str(PGBENCH_SECONDS), "-M", protocol, "-h",
                        "127.0.0.1", "-p", str(t.port), "-U", "postgres", dbname], capture_output=True, text=True,
                       timeout=PGBENCH_SECONDS + 60, env=clean_env())
    out = r.stdout + r.stderr
    check(r.returncode == 0, "pgbench -M %s exited %d:\n%s" % (protocol, r.returncode, out[-2000:]))
    processed = re.search(r"number of transactions actually processed: (\d+)", out)
    failed = re.search(r"number of failed transactions: (\d+)", out)
    check(processed and int(processed.group(1)) > 0, "pgbench processed transactions:\n%s" % out[-2000:])
    check(not failed or failed.group(1) == "0", "pgbench -M %s: no failed transaction:\n%s" % (protocol, out[-2000:]))
    print("  pgbench -M %s through tern: %s transactions" % (protocol, processed.group(1)), flush=True)
    return int(processed.group(1))


# One fingerprint per table: every row in key order (history, which has no key, by all its columns; mtime is
# when the row was written, so never the same in a replay).
TABLES = {
    "pgbench_accounts": "select count(*) || ' ' || md5(string_agg(aid || ':' || bid || ':' || abalance, ',' "
                        "order by aid)) from pgbench_accounts",
    "pgbench_tellers": "select count(*) || ' ' || md5(string_agg(tid || ':' || bid || ':' || tbalance, ',' "
                       "order by tid)) from pgbench_tellers",
    "pgbench_branches": "select count(*) || ' ' || md5(string_agg(bid || ':' || bbalance, ',' order by bid)) "
                        "from pgbench_branches",
    "pgbench_history": "select count(*) || ' ' || coalesce(md5(string_agg(tid || ':' || bid || ':' || aid || ':' || "
                       "delta, ',' order by tid, bid, aid, delta)), '-') from pgbench_history",
}


def fingerprint(pg, dbname):
    return {table: pg.psql(sql, dbname=dbname).strip() for table, sql in TABLES.items()}


def check_equal(pg, source, copy, what):
    a, b = fingerprint(pg, source), fingerprint(pg, copy)
    for table in TABLES:
        check(a[table] == b[table], "%s: %s differs between %s and %s: %s / %s" % (what, table, source, copy,
                                                                                    a[table], b[table]))


def history_rows(pg, dbname):
    return int(pg.psql("select count(*) from pgbench_history", dbname=dbname).strip())


def copy_database(pg, name, template):
    pg.psql("drop database if exists %s" % name)
    pg.psql("create database %s template %s" % (name, template))


def check_answer(answer, applied, partial=False, what=""):
    """A 200's shape and its counts."""
    check(isinstance(answer, dict) and set(answer) >= {"applied", "failed", "partial", "stopped_at",
                                                       "last_commit_seq", "coverage"}, "%s: %r" % (what, answer))
    check(set(answer["coverage"]) == {"retained_transactions", "retained_bytes", "commit_seq_high",
                                      "dropped_transactions", "durable"}, "%s coverage: %r" % (what, answer))
    check(answer["applied"] == applied and answer["partial"] == partial,
          "%s: applied %s (expected %d), partial %s: %r" % (what, answer["applied"], applied, answer["partial"],
                                                            answer))


# ---------------------------------------------------------------- cases

def round_one_simple_protocol_replays_into_a_copy_that_then_equals_the_source(s):
    pg = s.pg
    copy_database(pg, "jcopy", "jsrc")
    with tern_running(pg, s.journal_dir) as t:
        check(journal_status(t) == {"retained_transactions": 0, "retained_bytes": 0, "commit_seq_high": 0,
                                    "dropped_transactions": 0, "durable": True, "enabled": True},
              "an empty journal: %r" % journal_status(t))
        s.seq_before[1] = 0
        before = history_rows(pg, "jsrc")
        s.processed[1] = pgbench(t, "jsrc", "simple")
        added = history_rows(pg, "jsrc") - before
        check(added == s.processed[1], "pgbench's history rows (%d) are its processed transactions (%d)"
              % (added, s.processed[1]))
        journal = journal_status(t)
        check(journal["commit_seq_high"] == s.processed[1] and journal["retained_transactions"] == s.processed[1],
              "every pgbench transaction entered committed history: %r (pgbench: %d)" % (journal, s.processed[1]))
        status, answer = replay(t, {"mode": "committed_history", "target": s.target("jcopy")})
        check(status == 200, "committed_history: %s %r" % (status, answer))
        check_answer(answer, s.processed[1], what="round 1")
        check(answer["last_commit_seq"] == s.processed[1] and answer["stopped_at"] is None and answer["failed"] == 0
              and "error" not in answer, "round 1: %r" % answer)
        check(answer["coverage"]["durable"] and answer["coverage"]["dropped_transactions"] == 0,
              "coverage: %r" % answer["coverage"])
        check_equal(pg, "jsrc", "jcopy", "round 1 (simple)")
        # Nothing after the last: nothing applied, and last_commit_seq stays where the request began.
        status, answer = replay(t, {"mode": "committed_history", "target": s.target("jcopy"),
                                    "after_commit_seq": s.processed[1]})
        check(status == 200, "after the last: %s %r" % (status, answer))
        check_answer(answer, 0, what="after the last")
        check(answer["last_commit_seq"] == s.processed[1], "last_commit_seq: %r" % answer)
        # The journal's counters: everything written to disk (fsync = interval), nothing dropped.
        wait_for(lambda: metrics(t)["tern_journal_disk_records_total"] == s.processed[1], "the writer caught up", 10)
        m = metrics(t)
        check(m["tern_journal_transactions_total"] == s.processed[1] and m["tern_journal_incomplete_total"] == 0
              and m["tern_journal_dropped_total"] == 0 and m["tern_journal_bytes_total"] > 0
              and m["tern_journal_disk_bytes_total"] >= m["tern_journal_bytes_total"]
              and m["tern_journal_fsyncs_total"] > 0 and m["tern_journal_write_errors_total"] == 0
              and m["tern_journal_replay_runs_total"] == 2 and m["tern_journal_queue_depth"] == 0
              and m["tern_journal_fsync_seconds_max"] <= m["tern_journal_fsync_seconds_total"],
              "journal metrics: %r" % {k: v for k, v in m.items() if k.startswith("tern_journal")})
        failure_stops_and_resumes(s, t)


def failure_stops_and_resumes(s, t):
    """(Inside round 1's tern.) A database without the tables: the first transaction fails, nothing applied.
    A copy of jbase whose 11th history insert fails (a trigger): 10 applied, the 11th rolled back whole;
    once the trigger lets it, after_commit_seq = last_commit_seq applies the rest."""
    pg = s.pg
    pg.psql("drop database if exists jempty")
    pg.psql("create database jempty")
    status, answer = replay(t, {"mode": "committed_history", "target": s.target("jempty")})
    check(status == 200, "a target without the tables: %s %r" % (status, answer))
    check_answer(answer, 0, partial=True, what="no tables")
    check(answer["stopped_at"] == 1 and answer["last_commit_seq"] == 0 and answer["failed"] == 1
          and "pgbench_" in answer.get("error", ""), "stopped at the first: %r" % answer)

    copy_database(pg, "jgate", "jbase")
    pg.psql("create table gate(x int); insert into gate values (1);"
            "create function gate_check() returns trigger language plpgsql as $$ begin "
            "if exists (select 1 from gate) and (select count(*) from pgbench_history) >= 10 then "
            "raise exception 'gate closed'; end if; return new; end $$;"
            "create trigger gate before insert on pgbench_history for each row execute function gate_check()",
            dbname="jgate")
    status, answer = replay(t, {"mode": "committed_history", "target": s.target("jgate")})
    check(status == 200, "the gate: %s %r" % (status, answer))
    check_answer(answer, 10, partial=True, what="the gate")
    last = answer["last_commit_seq"]
    check(last == 10 and answer["stopped_at"] == 11 and "gate closed" in answer.get("error", ""),
          "stopped at the 11th: %r" % answer)
    sums = pg.psql("select (select sum(abalance) from pgbench_accounts), (select sum(tbalance) from pgbench_tellers),"
                   " (select sum(delta) from pgbench_history), (select count(*) from pgbench_history)",
                   dbname="jgate").split("|")
    check(len(set(sums[:3])) == 1 and sums[3] == "10", "the 11th rolled back whole (its updates too): %r" % sums)
    pg.psql("delete from gate", dbname="jgate")
    status, answer = replay(t, {"mode": "committed_history", "target": s.target("jgate"), "after_commit_seq": last})
    check(status == 200, "resumed: %s %r" % (status, answer))
    check_answer(answer, s.processed[1] - 10, what="resumed")
    check_equal(pg, "jsrc", "jgate", "resumed after the gate")


def rounds_two_and_three_extended_and_prepared_after_a_restart(s):
    pg = s.pg
    copy_database(pg, "jcopy2", "jsrc")  # (tern is down: nothing is connected to jsrc)
    high = s.processed[1]
    with tern_running(pg, s.journal_dir) as t:
        journal = journal_status(t)
        check(journal["retained_transactions"] == high and journal["commit_seq_high"] == high and journal["durable"],
              "the segments read back at startup: %r (expected %d)" % (journal, high))
        for round_no, protocol in ((2, "extended"), (3, "prepared")):
            if round_no == 3:
                time.sleep(0.2)
                s.round3_from = rfc3339_now()
                time.sleep(0.2)
            s.seq_before[round_no] = journal_status(t)["commit_seq_high"]
            s.processed[round_no] = pgbench(t, "jsrc", protocol)
            status, answer = replay(t, {"mode": "committed_history", "target": s.target("jcopy2"),
                                        "after_commit_seq": s.seq_before[round_no]})
            check(status == 200, "round %d: %s %r" % (round_no, status, answer))
            check_answer(answer, s.processed[round_no], what="round %d (%s)" % (round_no, protocol))
            check(answer["last_commit_seq"] == s.seq_before[round_no] + s.processed[round_no],
                  "commit_seq continued after the restart: %r" % answer)
            check_equal(pg, "jsrc", "jcopy2", "round %d (%s)" % (round_no, protocol))
        total = sum(s.processed.values())
        # Everything, rounds 1 (read back from disk) to 3, into a fresh copy of the start.
        copy_database(pg, "jall", "jbase")
        status, answer = replay(t, {"mode": "committed_history", "target": s.target("jall"),
                                    "from": "2000-01-01T00:00:00Z", "to": "2999-01-01T01:00:00+01:00"})
        check(status == 200, "everything: %s %r" % (status, answer))
        check_answer(answer, total, what="everything")
        check_equal(pg, "jsrc", "jall", "every round from the journal")
        # time_window: every statement on its own, four a tpcb transaction (the SELECT is a read: not kept).
        copy_database(pg, "jtw", "jbase")
        status, answer = replay(t, {"target": s.target("jtw")})
        check(status == 200, "time_window: %s %r" % (status, answer))
        check_answer(answer, 4 * total, what="time_window (the default mode)")
        check(answer["failed"] == 0 and answer["last_commit_seq"] == total, "time_window: %r" % answer)
        check_equal(pg, "jsrc", "jtw", "time_window over everything")
        copy_database(pg, "jtw3", "jbase")
        status, answer = replay(t, {"mode": "time_window", "target": s.target("jtw3"), "from": s.round3_from})
        check(status == 200, "time_window from round 3: %s %r" % (status, answer))
        check_answer(answer, 4 * s.processed[3], what="time_window over round 3")
        check(history_rows(pg, "jtw3") == s.processed[3], "round 3's history rows")
        status, answer = replay(t, {"mode": "time_window", "target": s.target("jtw3"),
                                    "to": "2000-01-01T05:30:00+05:30"})
        check(status == 200, "an empty window: %s %r" % (status, answer))
        check_answer(answer, 0, what="an empty window")


def access_is_checked_and_bad_requests_refused(s):
    pg = s.pg
    body = {"mode": "committed_history", "target": s.target("jempty"), "after_commit_seq": 1 << 40}
    with tern_running(pg, token="s3cret") as t:
        for header, what in ((None, "no Authorization"), ("Bearer nope", "a wrong token"),
                             ("Bearer s3cret2", "a longer token"), ("Basic s3cret", "another scheme")):
            status, answer = replay(t, body, token=header)
            check(status == 401 and "error" in answer, "%s: %s %r" % (what, status, answer))
        status, answer = replay(t, body, token="Bearer s3cret")
        check(status == 200 and answer["applied"] == 0, "the right token: %s %r" % (status, answer))
        check(http_get(t, "/metrics")[0] == 200, "/metrics needs no token")
        good = "Bearer s3cret"
        for raw, what in ((b"{not json", "bad JSON"), (b"[1, 2]", "not an object"),
                          (b'{"mode": "everything", "target": "x"}', "an unknown mode"),
                          (b'{"mode": "time_window"}', "no target"), (b'{"target": ""}', "an empty target"),
                          (b'{"target": "x", "from": "yesterday"}', "a bad time"),
                          (b'{"target": "x", "to": "2024-02-30T00:00:00Z"}', "February 30th"),
                          (b'{"target": "x", "from": "2024-05-01T00:00:00Z", "to": "2024-04-01T00:00:00Z"}',
                           "from after to"),
                          (b'{"target": "x", "after_commit_seq": -1}', "a negative after_commit_seq"),
                          (b'{"target": "x", "after_seq": 5}', "an unknown key")):
            status, answer = replay(t, None, token=good, raw=raw)
            check(status == 400 and isinstance(answer, dict) and "error" in answer,
                  "%s: %s %r" % (what, status, answer))
        status, answer = replay(t, None, token=good, raw=b'{"target": "' + b"x" * 70000 + b'"}')
        check(status == 413, "a body over 64 kB: %s %r" % (status, answer))
        status, answer = replay(t, None, token=good, raw=None, method="GET")
        check(status == 405, "GET /api/replay: %s %r" % (status, answer))
    with tern_running(pg, http_listen="0.0.0.0:%d") as t:
        status, answer = replay(t, body)
        check(status == 403 and "http_token" in answer.get("error", ""), "not loopback, no token: %s %r"
              % (status, answer))
    with tern_running(pg, tr_enabled=False) as t:
        status, answer = replay(t, body)
        check(status == 503, "tr_enabled = false: %s %r" % (status, answer))
        check(journal_status(t) == {"enabled": False}, "no journal in /api/status: %r" % journal_status(t))
        check(not any(k.startswith("tern_journal_") for k in metrics(t)), "no journal metrics")


def a_replay_stops_at_its_deadline_one_at_a_time_and_incomplete_is_refused(s):
    pg = s.pg
    for name in ("jside", "jside2"):
        pg.psql("drop database if exists %s" % name)
        pg.psql("create database %s" % name)
        pg.psql("create table t(x int)", dbname=name)
    with tern_running(pg, deadline_s=2) as t:
        for x in (1, 2, 3):
            pg.psql("insert into t values (%d)" % x, port=t.port, dbname="jside")
        holder = subprocess.Popen(["psql", "-X", "-h", "127.0.0.1", "-p", str(pg.primary_port), "-U", "postgres",
                                   "-d", "jside2", "-c", "begin; lock table t; select pg_sleep(8); commit;"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env())
        try:
            wait_for(lambda: pg.psql("select count(*) from pg_locks l join pg_database d on d.oid = l.database "
                                     "where d.datname = 'jside2' and l.mode = 'AccessExclusiveLock' and l.granted")
                     .strip() != "0", "the lock held", 10)
            first = {}
            started = time.monotonic()
            runner = threading.Thread(target=lambda: first.update(
                answer=replay(t, {"mode": "committed_history", "target": s.target("jside2")}),
                took=time.monotonic() - started))
            runner.start()
            wait_for(lambda: pg.psql("select count(*) from pg_stat_activity where application_name = 'tern replay' "
                                     "and wait_event_type = 'Lock'").strip() == "1", "the replay waits on the lock",
                     10)
            status, answer = replay(t, {"mode": "committed_history", "target": s.target("jside2")})
            check(status == 409 and "already running" in answer.get("error", ""), "a second replay: %s %r"
                  % (status, answer))
            t0 = time.monotonic()
            check(http_get(t, "/metrics")[0] == 200 and time.monotonic() - t0 < 2, "/metrics answers meanwhile")
            runner.join(30)
            status, answer = first["answer"]
            check(status == 200, "the blocked replay: %s %r" % (status, answer))
            check_answer(answer, 0, partial=True, what="at the deadline")
            check(answer["stopped_at"] == 1 and answer["last_commit_seq"] == 0
                  and "deadline" in answer.get("error", ""), "stopped at its deadline: %r" % answer)
            check(1.5 < first["took"] < 8, "within the deadline and the cancel's grace: %.1f s" % first["took"])
        finally:
            holder.wait(20)
        status, answer = replay(t, {"mode": "committed_history", "target": s.target("jside2")})
        check(status == 200, "the lock gone: %s %r" % (status, answer))
        check_answer(answer, 3, what="the lock gone")
        subprocess.run(["psql", "-X", "-h", "127.0.0.1", "-p", str(t.port), "-U", "postgres", "-d", "jside", "-c",
                        "copy t from stdin"], input="4\n5\n", text=True, check=True, capture_output=True,
                       env=clean_env())
        pg.psql("insert into t values (6)", port=t.port, dbname="jside")
        status, answer = replay(t, {"mode": "committed_history", "target": s.target("jside2"), "after_commit_seq": 3})
        check(status == 409 and answer.get("commit_seq") == 4 and "commit_seq 4" in answer.get("error", "")
              and "coverage" in answer, "an incomplete transaction refused before anything ran: %s %r"
              % (status, answer))
        check(pg.psql("select count(*) from t", dbname="jside2").strip() == "3", "nothing ran")
        status, answer = replay(t, {"mode": "committed_history", "target": s.target("jside2"), "after_commit_seq": 4})
        check(status == 200 and answer["applied"] == 1, "past it: %s %r" % (status, answer))
        status, answer = replay(t, {"mode": "time_window", "target": s.target("jside2"), "after_commit_seq": 3})
        check(status == 200 and answer["partial"] and answer["failed"] == 1 and answer["applied"] == 1
              and "COPY" in answer.get("error", ""), "time_window runs past it, the COPY failed: %r" % answer)
        m = metrics(t)
        check(m["tern_journal_incomplete_total"] == 1 and m["tern_journal_disk_records_total"] == 0,
              "counted incomplete; memory only: %r" % {k: v for k, v in m.items() if k.startswith("tern_journal")})


def bind_formats(stmt, formats, values, result_formats=()):
    """A Bind with the parameter formats given (0 text, 1 binary; none, one for all, or one each)."""
    body = cstr("") + cstr(stmt) + struct.pack("!H", len(formats)) + b"".join(struct.pack("!h", f) for f in formats)
    body += struct.pack("!H", len(values))
    for v in values:
        body += struct.pack("!i", -1) if v is None else struct.pack("!i", len(v)) + v
    body += struct.pack("!H", len(result_formats)) + b"".join(struct.pack("!h", f) for f in result_formats)
    return message(b"B", body)


def binary_and_text_parameters_are_replayed_byte_for_byte(s):
    """Extended statements whose Bind carries no format (all text), one (all binary) and one per parameter,
    SQL NULLs, bytea with NUL bytes, a binary timestamptz, int8 and float8, binary result formats, a named
    statement bound twice inside BEGIN ... COMMIT: replayed by committed_history and by time_window into empty
    tables, the rows are the same."""
    pg = s.pg
    for name in ("jbin", "jbin2", "jbin3"):
        pg.psql("drop database if exists %s" % name)
        pg.psql("create database %s" % name)
        pg.psql("create table b(id int, n int8, txt text, bin bytea, f float8, ts timestamptz, nul text)", dbname=name)
    insert = "insert into b values ($1, $2, $3, $4, $5, $6, $7)"
    ts_us = 1714564800123456 - 946684800 * 1000000  # 2024-05-01 12:00:00.123456 UTC, from 2000-01-01

    def binary(i):
        return [struct.pack("!i", i), struct.pack("!q", 9000000000 + i), "bïnary %d" % i, b"\x00\x01\x00\xff",
                struct.pack("!d", i + 0.25), struct.pack("!q", ts_us + i), None]

    def as_bytes(values):
        return [v.encode() if isinstance(v, str) else v for v in values]

    text = ["1", "9000000001", "tëxt 1", "\\x00ff10", "1.5", "2024-05-01 12:00:00+00", None]
    mixed = binary(3)
    mixed[2], mixed[4] = "mïxed", "3.75"  # (formats 0 below)
    select = "select id, n, txt, encode(bin, 'hex'), f, ts, nul is null from b order by id"
    with tern_running(pg) as t:
        with Wire(t.port, timeout=30) as w:
            w.login("postgres", "jbin")
            for formats, values, results in (((), text, ()), ((1,), binary(2), (1,)),
                                             ((1, 1, 0, 1, 0, 1, 0), mixed, (0,))):
                _, _, sqlstate, _ = w.exchange(parse("", insert), bind_formats("", formats, as_bytes(values), results),
                                               execute(), SYNC)
                check(sqlstate is None, "insert with formats %r: %s" % (formats, sqlstate))
            w.query("begin")
            for i in (4, 5):  # a named statement, bound twice, in one transaction
                first = [parse("ins", insert)] if i == 4 else []
                _, _, sqlstate, _ = w.exchange(*(first + [bind_formats("ins", (1,), as_bytes(binary(i))), execute(),
                                                          SYNC]))
                check(sqlstate is None, "the named insert %d: %s" % (i, sqlstate))
            w.query("commit")
        source = pg.psql(select, dbname="jbin")
        check(len(source.splitlines()) == 5 and "000100ff" in source, "five rows: %s" % source)
        status, answer = replay(t, {"mode": "committed_history", "target": s.target("jbin2")})
        check(status == 200, "committed_history: %s %r" % (status, answer))
        check_answer(answer, 4, what="binary parameters, committed_history")
        check(pg.psql(select, dbname="jbin2") == source, "committed_history's rows:\n%s\nexpected:\n%s"
              % (pg.psql(select, dbname="jbin2"), source))
        status, answer = replay(t, {"mode": "time_window", "target": s.target("jbin3")})
        check(status == 200, "time_window: %s %r" % (status, answer))
        check_answer(answer, 5, what="binary parameters, time_window")
        check(pg.psql(select, dbname="jbin3") == source, "time_window's rows")


CASES = [round_one_simple_protocol_replays_into_a_copy_that_then_equals_the_source,
         rounds_two_and_three_extended_and_prepared_after_a_restart,
         binary_and_text_parameters_are_replayed_byte_for_byte,
         access_is_checked_and_bad_requests_refused,
         a_replay_stops_at_its_deadline_one_at_a_time_and_incomplete_is_refused]


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
    with PgCluster(with_replica=False) as pg:
        state = State(pg)
        try:
            pg.psql("create database jsrc")
            subprocess.run(["pgbench", "-i", "-q", "-s", "1", "-h", "127.0.0.1", "-p", str(pg.primary_port), "-U",
                            "postgres", "jsrc"], check=True, capture_output=True, env=clean_env(), timeout=120)
            pg.psql("create database jbase template jsrc")
            for fn in CASES:
                if args.k and not any(k in fn.__name__ for k in args.k):
                    continue
                t0 = time.monotonic()
                try:
                    fn(state)
                    passed += 1
                    print("PASS %s (%.1fs)" % (fn.__name__, time.monotonic() - t0), flush=True)
                except Exception:
                    failed += 1
                    print("FAIL %s (%.1fs)\n%s" % (fn.__name__, time.monotonic() - t0, traceback.format_exc()),
                          flush=True)
        finally:
            shutil.rmtree(state.journal_dir, ignore_errors=True)
    print("journal: %d passed, %d failed, %d checks" % (passed, failed, CHECKS))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
