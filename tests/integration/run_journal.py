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
    tr_enabled = false is 503, and so is --tr=false / --tr false on the command line over a file that says
    true (across a SIGHUP too; --tr=true wins over a file's false, --tr=maybe is refused with exit 2); bad
    bodies 400, a GET 405, a body over 64 kB 413;
  - a replay blocked on a lock stops at replay_deadline_secs (partial, "deadline"), a second replay meanwhile
    is 409 and /metrics keeps answering; an incomplete transaction (COPY FROM STDIN) makes committed_history
    answer 409 naming it, while time_window runs past it best effort;
  - a crash under each fsync policy (commit, interval, none): pgbench through tern with 64kB segments,
    SIGKILL mid-run; every frame on disk checks (length, CRC-32C computed here, commit_seq increasing), only
    the newest segment may end in a bad frame; a truncated frame appended there; a restart cuts the newest
    segment at its last intact frame, /api/status's coverage has exactly the intact records (the newest
    max_committed_transactions of them) and their highest commit_seq, and the next transaction takes the next.

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
from procs import ProcessError, TernProcess  # noqa: E402
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


def tern_config(pg, http, journal_dir="", http_listen=None, token="", tr_enabled=True, deadline_s=300,
                fsync="interval", journal_extra="", tr_mode="session"):
    """tern.ini: in front of the primary, transaction pooling, [admin] http_listen on port `http` (loopback by
    default); journal_extra: more [journal] lines."""
    return ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 2\npool_mode = transaction\n[servers]\n"
            "primary = host=127.0.0.1 port=%d\n[pool]\npool_size = 8\n[limits]\nmax_client_conn = 100\n"
            "replay_deadline_secs = %d\n[journal]\ndir = %s\nfsync = %s\nfsync_interval_ms = 50\n%s"
            "[replay]\ntr_enabled = %s\ntr_mode = %s\n[admin]\nhttp_listen = %s\nhttp_token = %s\n"
            % (free_port(), pg.primary_port, deadline_s, journal_dir, fsync, journal_extra,
               "true" if tr_enabled else "false", tr_mode, (http_listen or "127.0.0.1:%d") % http, token))


@contextlib.contextmanager
def tern_running(pg, journal_dir="", http_listen=None, token="", tr_enabled=True, deadline_s=300, fsync="interval",
                 journal_extra="", tr_mode="session", args=()):
    """tern (tern_config, then args on its command line) that must exit 0 at the end."""
    http = free_port()
    config = tern_config(pg, http, journal_dir, http_listen, token, tr_enabled, deadline_s, fsync, journal_extra,
                         tr_mode)
    t = TernProcess(TERN, config)
    t._argv += list(args)
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
    # The command line's --tr=false / --tr false, over a file that says true, and across a reload.
    for args in (["--tr=false"], ["--tr", "false"], ["--tr=OFF"]):
        with tern_running(pg, args=args) as t:
            status, answer = replay(t, body)
            check(status == 503, "%s: %s %r" % (" ".join(args), status, answer))
            check(journal_status(t) == {"enabled": False}, "%s: no journal: %r" % (args, journal_status(t)))
            t.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: "configuration reloaded" in t.log_tail(50), "the reload", 10)
            check(replay(t, body)[0] == 503, "%s: still off after a reload" % args)
    with tern_running(pg, tr_enabled=False, args=["--tr=true"]) as t:
        check(journal_status(t).get("enabled") is True, "--tr=true over a file that says false: %r"
              % journal_status(t))
    bad = subprocess.run([TERN, "-c", "/nonexistent.ini", "--tr=maybe"], capture_output=True, text=True, timeout=10)
    check(bad.returncode == 2 and "--tr maybe" in bad.stderr, "--tr=maybe is refused: %s %r"
          % (bad.returncode, bad.stderr))


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
    SQL NULLs, bytea with NUL bytes, a binary timestamptz, int8 and float8, a parameter typed by its Parse
    (int4 into an int8 column), binary result formats, a named
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
            # Typed by the Parse: $2 named int4 and sent as 4 binary bytes into the int8 column (the server
            # would infer int8 and refuse 4 bytes: replayed without its types, it fails with 08P01).
            typed = binary(6)
            typed[1] = struct.pack("!i", 6006)
            _, _, sqlstate, _ = w.exchange(parse("", insert, types=(23, 23)), bind_formats("", (1,), as_bytes(typed)),
                                           execute(), SYNC)
            check(sqlstate is None, "the typed insert: %s" % sqlstate)
            w.query("begin")
            for i in (4, 5):  # a named statement, bound twice, in one transaction
                first = [parse("ins", insert)] if i == 4 else []
                _, _, sqlstate, _ = w.exchange(*(first + [bind_formats("ins", (1,), as_bytes(binary(i))), execute(),
                                                          SYNC]))
                check(sqlstate is None, "the named insert %d: %s" % (i, sqlstate))
            w.query("commit")
        source = pg.psql(select, dbname="jbin")
        check(len(source.splitlines()) == 6 and "000100ff" in source and "|6006|" in source, "six rows: %s" % source)
        status, answer = replay(t, {"mode": "committed_history", "target": s.target("jbin2")})
        check(status == 200, "committed_history: %s %r" % (status, answer))
        check_answer(answer, 5, what="binary parameters, committed_history")
        check(pg.psql(select, dbname="jbin2") == source, "committed_history's rows:\n%s\nexpected:\n%s"
              % (pg.psql(select, dbname="jbin2"), source))
        status, answer = replay(t, {"mode": "time_window", "target": s.target("jbin3")})
        check(status == 200, "time_window: %s %r" % (status, answer))
        check_answer(answer, 6, what="binary parameters, time_window")
        check(pg.psql(select, dbname="jbin3") == source, "time_window's rows")


# ---------------------------------------------------------------- the crash case: frames read in Python

def _crc32c_table():
    """CRC-32C (Castagnoli), reflected polynomial 0x82F63B78."""
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC32C_TABLE = _crc32c_table()


def crc32c(data):
    crc, table = 0xFFFFFFFF, CRC32C_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


SEGMENT_HEADER = b"TRNJ" + struct.pack("!I", 1)
SEGMENT_NAME = re.compile(r"^journal-(\d{20})\.log$")
FRAME_PAYLOAD_MAX = 256 * 1024 * 1024  # JOURNAL_RECORD_BYTES_MAX


def read_segment(path):
    """One segment read frame by frame, as far as frames check (length, CRC-32C; a payload's first 8 bytes are
    its commit_seq): {size, frames: [(payload length, commit_seq)], intact_end (the file offset after the last
    intact frame), end: clean | torn (the bytes end inside a frame) | corrupt | short (under a header)}. No
    record decoding beyond the commit_seq."""
    with open(path, "rb") as f:
        data = f.read()
    seg = {"size": len(data), "frames": [], "intact_end": len(SEGMENT_HEADER), "end": "clean"}
    if len(data) < len(SEGMENT_HEADER):
        check(SEGMENT_HEADER.startswith(data), "%s: %d bytes, not the start of a header: %r" % (path, len(data), data))
        seg["end"] = "short"
        return seg
    check(data[:8] == SEGMENT_HEADER, "%s: header %r" % (path, data[:8]))
    offset = len(SEGMENT_HEADER)
    while offset < len(data):
        if len(data) - offset < 8:
            seg["end"] = "torn"
            break
        length, crc = struct.unpack_from("!II", data, offset)
        if length < 8 or length > FRAME_PAYLOAD_MAX:
            seg["end"] = "corrupt"
            break
        if length > len(data) - offset - 8:
            seg["end"] = "torn"
            break
        payload = data[offset + 8:offset + 8 + length]
        if crc32c(payload) != crc:
            seg["end"] = "corrupt"
            break
        seg["frames"].append((length, struct.unpack_from("!Q", payload)[0]))
        offset += 8 + length
        seg["intact_end"] = offset
    return seg


def read_journal(journal_dir, what):
    """Every segment of the directory, oldest first, checked: only segments there; every frame of every
    segment but the newest intact up to its end; commit_seq strictly increasing across frames and segments;
    a segment named after its first record's commit_seq; only the newest may be empty or end in a bad
    frame. [(name, segment)]."""
    names = sorted(os.listdir(journal_dir))
    check(names and all(SEGMENT_NAME.match(n) for n in names), "%s: the directory holds segments only: %r"
          % (what, names))
    segments = [(n, read_segment(os.path.join(journal_dir, n))) for n in names]
    last_seq = 0
    for i, (name, seg) in enumerate(segments):
        newest = i == len(segments) - 1
        check(newest or (seg["end"] == "clean" and seg["frames"]),
              "%s: %s, not the newest, is intact to its end and not empty: %s after %d frames (%d of %d bytes)"
              % (what, name, seg["end"], len(seg["frames"]), seg["intact_end"], seg["size"]))
        if seg["frames"]:
            check(int(SEGMENT_NAME.match(name).group(1)) == seg["frames"][0][1],
                  "%s: %s begins with commit_seq %d" % (what, name, seg["frames"][0][1]))
        for _, seq in seg["frames"]:
            check(seq > last_seq, "%s: commit_seq %d after %d in %s" % (what, seq, last_seq, name))
            last_seq = seq
    return segments


def journal_summary(segments):
    frames = [f for _, seg in segments for f in seg["frames"]]
    seqs = [seq for _, seq in frames]
    return {"records": len(frames), "high": seqs[-1] if seqs else 0, "lengths": [n for n, _ in frames],
            "gaps": sum(1 for a, b in zip(seqs, seqs[1:]) if b != a + 1), "first": seqs[0] if seqs else 0}


def append_torn_frame(path, intact_end):
    """The torn-tail path for sure: a frame cut short at the end of a segment (a length, a CRC, and fewer bytes
    than the length says), after whatever is there; read back here, the segment still ends at intact_end."""
    with open(path, "ab") as f:
        f.write(struct.pack("!II", 300, 0x12345678) + b"\xa5" * 100)
    seg = read_segment(path)
    check(seg["end"] in ("torn", "corrupt") and seg["intact_end"] == intact_end,
          "%s read back with the truncated frame: %s at %d (expected %d)" % (path, seg["end"], seg["intact_end"],
                                                                             intact_end))


def check_reloaded(t, journal_dir, fsync, sizes, newest_name, newest_end, before, cap, log_says):
    """Just after a restart: the same segments, the older untouched, the newest `newest_end` bytes long (tern
    logged `log_says`); the coverage is the intact records read before (the newest `cap` of them)."""
    now = {n: os.path.getsize(os.path.join(journal_dir, n)) for n in os.listdir(journal_dir)}
    check(set(now) == set(sizes), "%s: the same segments after the restart: %r / %r" % (fsync, sorted(now),
                                                                                         sorted(sizes)))
    check(now[newest_name] == newest_end, "%s: %s cut at its last intact frame: %d bytes, expected %d"
          % (fsync, newest_name, now[newest_name], newest_end))
    check(all(now[n] == sizes[n] for n in sizes if n != newest_name), "%s: the older segments untouched" % fsync)
    check(log_says in t.log_tail(200), "%s: tern logged %r:\n%s" % (fsync, log_says, t.log_tail(20)))
    kept = min(before["records"], cap)
    expected = {"retained_transactions": kept, "retained_bytes": sum(before["lengths"][-kept:]),
                "commit_seq_high": before["high"], "dropped_transactions": 0, "durable": True, "enabled": True}
    journal = journal_status(t)
    check(journal == expected, "%s: the coverage after the restart: %r, expected %r" % (fsync, journal, expected))


def crash_under(pg, fsync, protocol, cap):
    """One policy: pgbench through tern, SIGKILL, the frames read, a truncated frame appended, a restart."""
    journal_dir = tempfile.mkdtemp(prefix="tern-crash-%s-" % fsync)
    extra = "segment_bytes = 64kB\nmax_committed_transactions = %d\n" % cap
    try:
        http = free_port()
        t = TernProcess(TERN, tern_config(pg, http, journal_dir, fsync=fsync, journal_extra=extra))
        t.start()
        t.http_port = http
        bench = None
        try:
            wait_for(lambda: http_get(t, "/api/status")[0] == 200, "the admin endpoint answers", 10)
            bench = subprocess.Popen(["pgbench", "-n", "-c", "4", "-j", "2", "-T", "30", "-M", protocol, "-h",
                                      "127.0.0.1", "-p", str(t.port), "-U", "postgres", "jcrash"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_env())
            time.sleep(3)
            check(bench.poll() is None and t.alive(), "pgbench and tern still run at the kill: %s\n%s"
                  % (bench.poll(), t.log_tail(20)))
            seq_seen = journal_status(t)["commit_seq_high"]
            os.kill(t.pid, signal.SIGKILL)  # tern alone: its pid is the process itself
            t.proc.wait(10)
            check(t.proc.returncode == -signal.SIGKILL, "tern died of the SIGKILL: %s" % t.proc.returncode)
            out, _ = bench.communicate(timeout=30)  # it fails: its server went away
            check(bench.returncode != 0, "pgbench failed with tern gone:\n%s" % out[-1000:])
        finally:
            if bench is not None and bench.poll() is None:
                bench.kill()
                bench.wait(10)
            t.stop()  # (dead already: its work dir goes)
        processed = re.search(r"number of transactions actually processed: (\d+)", out or "")

        # (1) the frames as the kill left them.
        segments = read_journal(journal_dir, "%s, after the kill" % fsync)
        before = journal_summary(segments)
        newest_name, newest = segments[-1]
        torn_by_kill, segment_count = newest["end"], len(segments)
        check(len(segments) >= 3, "%s: several segments (64kB each): %d" % (fsync, len(segments)))
        check(before["first"] == 1, "%s: the first record is commit_seq 1: %d" % (fsync, before["first"]))
        sizes = {name: seg["size"] for name, seg in segments}
        if newest["end"] == "short":
            # (The kill came between the segment's creation and its header: the loader writes the header again.
            # The truncated frame goes after it at a second restart, below.)
            check(not newest["frames"], "a short segment has no frame")
        else:
            append_torn_frame(os.path.join(journal_dir, newest_name), newest["intact_end"])
        # (2) a restart on the same dir: the tail is cut at the last intact frame, the records are back.
        with tern_running(pg, journal_dir, fsync=fsync, journal_extra=extra) as t:
            check_reloaded(t, journal_dir, fsync, sizes, newest_name, newest["intact_end"], before, cap,
                           "header is written again" if newest["end"] == "short" else
                           "tail; cut at offset %d " % newest["intact_end"])
            # (3) one more transaction: the next commit_seq, and its frame on disk.
            pg.psql("update pgbench_branches set bbalance = bbalance + 1 where bid = 1", port=t.port,
                    dbname="jcrash")
            wait_for(lambda: journal_status(t)["commit_seq_high"] == before["high"] + 1,
                     "%s: one more transaction takes commit_seq %d" % (fsync, before["high"] + 1), 10)
            journal = journal_status(t)
            check(journal["retained_transactions"] == min(before["records"] + 1, cap),
                  "%s: one more transaction: %r (high was %d)" % (fsync, journal, before["high"]))
            wait_for(lambda: journal_summary(read_journal(journal_dir, fsync))["records"] == before["records"] + 1,
                     "%s: the writer appended it" % fsync, 10)
        segments = read_journal(journal_dir, "%s, after the restart" % fsync)
        after = journal_summary(segments)
        check(segments[-1][1]["end"] == "clean" and after["high"] == before["high"] + 1
              and after["records"] == before["records"] + 1,
              "%s: the new frame is intact and the newest: %s, high %d" % (fsync, segments[-1][1]["end"],
                                                                            after["high"]))
        if newest["end"] == "short":
            newest_name, newest = segments[-1]
            sizes = {name: seg["size"] for name, seg in segments}
            append_torn_frame(os.path.join(journal_dir, newest_name), newest["intact_end"])
            with tern_running(pg, journal_dir, fsync=fsync, journal_extra=extra) as t:
                check_reloaded(t, journal_dir, fsync, sizes, newest_name, newest["intact_end"], after, cap,
                               "tail; cut at offset %d " % newest["intact_end"])
        print("  fsync = %-8s pgbench -M %-8s: %d records intact in %d segments (commit_seq 1..%d, %d gaps), "
              "the kill left the newest segment %s; commit_seq in memory 3 s in: %d, pgbench reported %s; "
              "in memory after the restart: %d"
              % (fsync, protocol, before["records"], segment_count, before["high"], before["gaps"],
                 {"clean": "clean", "torn": "with a torn frame", "corrupt": "with a corrupt frame",
                  "short": "without its header (cut while created; the truncated frame went in at a second "
                           "restart)"}[torn_by_kill],
                 seq_seen, processed.group(1) if processed else "nothing", min(before["records"], cap)),
              flush=True)
    finally:
        shutil.rmtree(journal_dir, ignore_errors=True)


def a_sigkill_under_each_fsync_policy_leaves_intact_frames_and_a_cut_tail(s):
    """For fsync = commit, interval and none: pgbench through tern (64kB segments), SIGKILL mid-run; every
    frame on disk checks (CRC-32C here in Python), commit_seq increasing; a truncated frame appended to the
    newest segment; the restart cuts it, reloads exactly the intact records (under max_committed_transactions:
    1000 for none, so there the newest 1000) and the next transaction takes the next commit_seq."""
    check(crc32c(b"123456789") == 0xE3069283, "CRC-32C of '123456789' (RFC 3720)")
    check(crc32c(b"") == 0 and crc32c(bytes(32)) == 0x8A9136AA, "CRC-32C of nothing and of 32 zeros (RFC 3720)")
    copy_database(s.pg, "jcrash", "jbase")
    for fsync, protocol, cap in (("commit", "simple", 50000), ("interval", "extended", 50000),
                                 ("none", "prepared", 1000)):
        crash_under(s.pg, fsync, protocol, cap)


def an_unwritable_dir_or_an_unknown_format_stops_startup(s):
    """[journal] dir that cannot be made (a path under a regular file), and a segment of format version 99:
    tern does not start, and says why (naming the folder, or the file and its version)."""
    with tempfile.TemporaryDirectory() as tmp:
        blocker = os.path.join(tmp, "a-file")
        open(blocker, "w").close()
        future = os.path.join(tmp, "future")
        os.mkdir(future)
        with open(os.path.join(future, "journal-%020d.log" % 1), "wb") as f:
            f.write(b"TRNJ" + struct.pack("!I", 99))
        for journal_dir, says in ((os.path.join(blocker, "journal"), "a-file"), (future, "version 99")):
            t = TernProcess(TERN, tern_config(s.pg, free_port(), journal_dir))
            try:
                t.start(timeout=10)
                started = True
            except ProcessError as exc:
                started, text = False, str(exc)
            finally:
                t.stop()
            check(not started and says in text, "%s: startup refused, saying %r: %s"
                  % (journal_dir, says, "started" if started else text[-400:]))


def a_failover_in_flight_leaves_the_journal_in_step(s):
    """tr_mode = select: an autocommit read in flight when its backend is terminated runs again on a new
    connection (Transaction Replay, its request fed through tern a second time). The journal stays in step
    with what runs: the writes after it are journaled with their own texts, and committed_history replays
    them into an empty copy with the same rows. (Before, the lost request's entry stayed queued and each
    later write was journaled with the text of the statement before it.)"""
    from run_failover import read_outcome, run, send_query
    pg = s.pg
    for name in ("jfo", "jfo2"):
        pg.psql("drop database if exists %s" % name)
        pg.psql("create database %s" % name)
        pg.psql("create table f(id int, v text)", dbname=name)
    with tern_running(pg, tr_mode="select") as t:
        high = journal_status(t)["commit_seq_high"]
        with Wire(t.port, timeout=30) as w:
            w.login("postgres", "jfo")
            send_query(w, "select 1, pg_sleep(2) /*jfo_read*/")
            wait_for(lambda: pg.psql("select count(*) from pg_stat_activity where state = 'active' and query "
                                     "like '%jfo_read%' and pid <> pg_backend_pid()").strip() == "1", "the read runs", 10)
            pg.psql("select pg_terminate_backend(pid) from pg_stat_activity where query like '%jfo_read%' "
                    "and pid <> pg_backend_pid()")
            o = read_outcome(w)
            check(o.kind == "ok" and o.rows == [["1", ""]], "the read ran again: %r" % o)
            for sql in ("insert into f values (1, 'a')", "update f set v = 'b' where id = 1",
                        "insert into f values (2, 'c')"):
                check(run(w, sql).kind == "ok", sql)
        status, answer = replay(t, {"mode": "committed_history", "target": s.target("jfo2"), "after_commit_seq": high})
        check(status == 200, "committed_history: %s %r" % (status, answer))
        check_answer(answer, 3, what="the three writes after the failover")
        rows = "select id, v from f order by id"
        check(pg.psql(rows, dbname="jfo2") == pg.psql(rows, dbname="jfo") == "1|b\n2|c",
              "the same rows: %r %r" % (pg.psql(rows, dbname="jfo2"), pg.psql(rows, dbname="jfo")))


def journaled_into_a_copy(s, name, table, statements, applied, what):
    """Databases `name` and `name`2 with `table`; the (sql, kind) statements run on `name` through tern,
    then committed_history replays what they committed into `name`2 and applies `applied` transactions."""
    from run_failover import run
    pg = s.pg
    for db in (name, name + "2"):
        pg.psql("drop database if exists %s" % db)
        pg.psql("create database %s" % db)
        pg.psql(table, dbname=db)
    with tern_running(pg) as t:
        high = journal_status(t)["commit_seq_high"]
        with Wire(t.port, timeout=30) as w:
            w.login("postgres", name)
            for sql, kind in statements:
                o = run(w, sql)
                check(o.kind == kind, "%s: %r" % (sql, o))
        status, answer = replay(t, {"mode": "committed_history", "target": s.target(name + "2"),
                                    "after_commit_seq": high})
        check(status == 200, "committed_history: %s %r" % (status, answer))
        check_answer(answer, applied, what=what)


def only_what_committed_is_journaled(s):
    """Separate Queries, as an application sends them: a transaction with a savepoint rolled back to (the
    statement after it dropped, the one after the ROLLBACK TO kept), a rolled-back transaction, a failed
    autocommit statement, a transaction whose COMMIT the server answers ROLLBACK (an error in it), a read,
    and three writes whose tag is SELECT (CREATE TABLE AS, SELECT INTO, and one whose INTO is in mixed case,
    which the journal once took for a read). committed_history applies exactly four transactions, and the
    copy holds what the source holds."""
    pg = s.pg
    journaled_into_a_copy(s, "jcap", "create table f(id int primary key, v text)", (
        ("begin", "ok"), ("insert into f values (1, 'kept')", "ok"), ("savepoint s1", "ok"),
        ("insert into f values (2, 'dropped')", "ok"), ("rollback to savepoint s1", "ok"),
        ("insert into f values (3, 'kept')", "ok"), ("release s1", "ok"), ("commit", "ok"),
        ("begin", "ok"), ("insert into f values (4, 'rolled back')", "ok"), ("rollback", "ok"),
        ("insert into f values (5, 'x'), (1, 'duplicate')", "error"),
        ("begin", "ok"), ("insert into f values (6, 'failed')", "ok"), ("select 1/0", "error"),
        ("commit", "ok"), ("select * from f", "ok"),
        ("create table g as select 7 as a", "ok"), ("select 8 as a into h", "ok"), ("SELECT 9 AS a Into k", "ok")),
        4, "the savepoint transaction, CREATE TABLE AS, SELECT INTO twice")
    for sql, want in (("select id, v from f order by id", "1|kept\n3|kept"), ("select a from g", "7"),
                      ("select a from h", "8"), ("select a from k", "9")):
        got = pg.psql(sql, dbname="jcap2")
        check(got == want and got == pg.psql(sql, dbname="jcap"), "%s on the copy: %r" % (sql, got))


def a_chained_transaction_is_journaled_on_its_own(s):
    """COMMIT AND CHAIN commits one transaction and begins the next, ROLLBACK AND CHAIN drops one and
    begins the next (issue 23 #4): of begin; 1; COMMIT AND CHAIN; 2; ROLLBACK AND CHAIN; 3; COMMIT the
    journal holds two transactions, the first with row 1 and the last with row 3, and the copy equals the
    source."""
    pg = s.pg
    journaled_into_a_copy(s, "jchain", "create table f(id int primary key)", [
        (sql, "ok") for sql in ("begin", "insert into f values (1)", "commit and chain", "insert into f values (2)",
                                "rollback and chain", "insert into f values (3)", "commit")],
        2, "the two committed transactions of the chain")
    rows = "select string_agg(id::text, ',' order by id) from f"
    got = pg.psql(rows, dbname="jchain2")
    check(got == "1,3" and got == pg.psql(rows, dbname="jchain"), "the copy: %r" % got)


CASES = [an_unwritable_dir_or_an_unknown_format_stops_startup, a_failover_in_flight_leaves_the_journal_in_step,
         only_what_committed_is_journaled, a_chained_transaction_is_journaled_on_its_own,
         round_one_simple_protocol_replays_into_a_copy_that_then_equals_the_source,
         rounds_two_and_three_extended_and_prepared_after_a_restart,
         binary_and_text_parameters_are_replayed_byte_for_byte,
         access_is_checked_and_bad_requests_refused,
         a_replay_stops_at_its_deadline_one_at_a_time_and_incomplete_is_refused,
         a_sigkill_under_each_fsync_policy_leaves_intact_frames_and_a_cut_tail]


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
