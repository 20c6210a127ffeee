#!/usr/bin/env python3
"""tern's integration suite: a real PostgreSQL primary + streaming replica (started here, in a temp
dir, on free loopback ports), the real tern binary, real clients (psql, pgbench) and a raw wire
client for exact SQLSTATEs. Every wait polls with a deadline; every test is bounded in time.

usage: run_integration.py [-k SUBSTRING]...   (TERN_BINARY and TERN_SOURCE_ROOT from meson)"""
import argparse
import atexit
import contextlib
import datetime
import hashlib
import json
import os
import re
import select
import shutil
import signal
import socket
import stat
import ssl
import struct
import subprocess
import tempfile
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pgcluster import PgCluster, clean_env, find_pg_bindir, free_port  # noqa: E402
from procs import PgBouncerProcess, ProcessError, TernProcess  # noqa: E402
from tlscluster import ThrowawayCA, certificate_directory, tls_only_cluster  # noqa: E402
from wire import (FLUSH, SYNC, Wire, WireError, bind, close, data_row, describe, error_fields, execute,  # noqa: E402
                  message, parse, scram_secret, startup_packet)

ROOT = os.environ.get("TERN_SOURCE_ROOT", os.path.dirname(os.path.dirname(HERE)))
TERN = os.environ.get("TERN_BINARY", os.path.join(ROOT, "build", "tern"))
SUITE_DEADLINE_S = 1100
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def wait_for(predicate, what, timeout=30.0, interval=0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception as exc:  # a refused connection while something restarts, say
            last = exc
        time.sleep(interval)
    raise AssertionError("timed out waiting for %s (last error: %r)" % (what, last))


class Context:
    def __init__(self, pg):
        self.pg = pg
        self.terns = []
        self.workdir = None

    def tern(self, pool_mode="transaction", pool_size=4, workers=2, extra="", auth="trust", users=None,
             sections=None, files=None, auth_extra="", more=""):
        port = free_port()
        config = """[tern]
listen = 127.0.0.1:%d
workers = %d
pool_mode = %s
%s
[servers]
primary = host=127.0.0.1 port=%d
[pool]
pool_size = %d
%s
[auth]
mode = %s
%s
%s
[limits]
%s
%s
%s
""" % (port, workers, pool_mode, (sections or {}).get("tern", ""), self.pg.primary_port, pool_size, (sections or {}).get("pool", ""), auth,
            "auth_file = users.txt" if users is not None else "", auth_extra,
            "" if "max_client_conn" in extra else "max_client_conn = 1000", extra, more)
        files = dict(files or {})
        if users is not None:
            files["users.txt"] = users
        proc = TernProcess(TERN, config, extra_files=files)
        self.terns.append(proc)
        proc.start()
        return proc

    def cleanup(self, check_exit=False):
        """Stops every tern; with check_exit, a tern that did not exit 0 on SIGTERM (a crash, an
        assertion, a sanitizer report) fails the test."""
        procs, self.terns = self.terns, []
        for proc in procs:
            proc.stop()
        for proc in procs:
            if check_exit and proc.returncode != 0:
                raise AssertionError("tern exited with %s after SIGTERM:\n%s" % (proc.returncode, proc.log_tail(40)))


def env(password=None):
    extra = {"PGCONNECT_TIMEOUT": "10"}
    if password is not None:
        extra["PGPASSWORD"] = password
    return clean_env(extra)


def psql(port, sql, user="postgres", dbname="postgres", password=None, timeout=60, extra_args=()):
    """psql -c SQL; SQL over 64 kB goes through stdin (one argument may not exceed 128 kB)."""
    argv = ["psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(port), "-U", user,
            "-d", dbname] + list(extra_args)
    stdin = None
    if len(sql) > 65536:
        stdin = sql + ";\n"
    else:
        argv += ["-c", sql]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, env=env(password))


def psql_ok(port, sql, **kw):
    r = psql(port, sql, **kw)
    check(r.returncode == 0, "psql failed (%d): %s" % (r.returncode, r.stderr.strip()))
    return r.stdout.strip()


def pgbench(port, args, timeout=120):
    argv = ["pgbench", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres"] + args + ["postgres"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env())
    check(r.returncode == 0, "pgbench %s failed (%d): %s" % (" ".join(args), r.returncode, r.stderr[-2000:]))
    return r.stdout


def pgbench_summary(out):
    processed = failed = None
    for line in out.splitlines():
        if line.startswith("number of transactions actually processed:"):
            processed = int(line.split(":")[1].split("/")[0])
        if line.startswith("number of failed transactions:"):
            failed = int(line.split(":")[1].split()[0])
    return processed, failed


def expect_login_refused(port, user, sqlstate, **login_args):
    """Logs in with the raw client and expects an ErrorResponse with `sqlstate`; returns the error."""
    with Wire(port) as w:
        try:
            w.login(user, **login_args)
        except WireError as err:
            check(err.sqlstate == sqlstate, "%s for %s, got %r" % (sqlstate, user, err.fields))
            return err
    raise AssertionError("login as %s (%r) was accepted" % (user, login_args))


# tern's pool connections among a server's client backends: not the one asking, nor tern's own
# topology monitor and auth_query lookups (they log in as application "tern monitor", "tern auth_query").
POOL_BACKENDS = ("backend_type = 'client backend' and pid <> pg_backend_pid() "
                 "and application_name not in ('tern monitor', 'tern auth_query')")


def server_connections(pg):
    """tern's pool connections on the server (the harness makes no other connection)."""
    return int(pg.psql("select count(*) from pg_stat_activity where " + POOL_BACKENDS))


# ---------------------------------------------------------------- tests


@test
def psql_in_transaction_pooling(ctx):
    t = ctx.tern(pool_mode="transaction", pool_size=2)
    check(psql_ok(t.port, "select 1 + 1") == "2", "select 1 + 1")
    out = psql_ok(t.port, "create temp table if not exists x(a int); begin; insert into x values (1), (2); "
                          "select sum(a) from x; commit")
    check(out.splitlines()[-2:] == ["3", "COMMIT"] or "3" in out, "multi-statement transaction: %r" % out)
    # A transaction spanning several round trips stays on one server connection.
    r = subprocess.run(["psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(t.port),
                        "-U", "postgres", "-d", "postgres"],
                       input="begin;\nselect pg_backend_pid() as a \\gset\nselect pg_sleep(0.05);\n"
                             "select pg_backend_pid() = :a;\ncommit;\n",
                       capture_output=True, text=True, timeout=30, env=env())
    check(r.returncode == 0 and "t" in r.stdout.split(), "same backend inside a transaction: %r %r"
          % (r.stdout, r.stderr))
    check(server_connections(ctx.pg) <= 2, "at most pool_size server connections")


@test
def psql_in_session_pooling_and_reset(ctx):
    t = ctx.tern(pool_mode="session", pool_size=1)
    out = psql_ok(t.port, "set search_path = pg_catalog; show search_path")
    check(out.splitlines()[-1] == "pg_catalog", "SET holds within the session: %r" % out)
    # The next client gets the same (only) server connection, reset by DISCARD ALL.
    out = psql_ok(t.port, "show search_path")
    check(out == '"$user", public', "session state was reset for the next client: %r" % out)


@test
def large_result_is_forwarded_intact(ctx):
    t = ctx.tern(pool_size=2)
    sql = "select i, repeat(md5(i::text), (i % 7) + 1) from generate_series(1, 200000) i"
    through = psql_ok(t.port, sql, timeout=120)
    direct = psql_ok(ctx.pg.primary_port, sql, timeout=120)
    check(len(through) > 10_000_000, "large result (%d bytes)" % len(through))
    check(hashlib.sha256(through.encode()).digest() == hashlib.sha256(direct.encode()).digest(),
          "identical bytes through tern and direct")


@test
def a_tiny_buffer_ring_carries_big_queries_and_results_without_deadlock(ctx):
    # 16 buffers of 4 kB per worker: parked clients sending 200 kB queries and a client reading a
    # 10 MB result must all finish — parked clients may not take the buffers the others need.
    t = ctx.tern(pool_size=2, workers=1, sections={"tern": "buffer_count = 16\nbuffer_size = 4kB"})
    big = "x" * 200_000
    results = [None] * 12

    def run(i):
        if i == 0:
            results[i] = psql(t.port, "select i, md5(i::text) from generate_series(1, 150000) i", timeout=120)
        else:
            results[i] = psql(t.port, "select length('%s') + %d" % (big, i), timeout=120)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(results))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(150)
    check(results[0] is not None and results[0].returncode == 0 and len(results[0].stdout) > 5_000_000,
          "the large result arrived: %r" % (results[0] and results[0].stderr))
    for i in range(1, len(results)):
        check(results[i] is not None and results[i].returncode == 0
              and results[i].stdout.strip() == str(200_000 + i),
              "client %d: %r" % (i, results[i] and (results[i].stdout[:80], results[i].stderr)))


SANITIZED = None


def memory_slack_kib(kib):
    """A memory bound for tern, doubled for a build with AddressSanitizer, whose allocator keeps freed
    blocks and shadow pages a while (the bound then still catches what grows without end)."""
    global SANITIZED
    if SANITIZED is None:
        with open(TERN, "rb") as f:
            SANITIZED = b"__asan_init" in f.read()
    return kib * 2 if SANITIZED else kib


@contextlib.contextmanager
def allocator_returning_memory():
    """For a tern started inside: AddressSanitizer's allocator keeps its high-water mark (freed blocks
    wait in its quarantine, then on its free lists, never given back), so a flood's peak would read as
    growth; with no quarantine and a release to the OS every 100 ms, RSS follows what tern holds (plus
    the shadow of what it touched). Nothing changes for a build without it."""
    memory_slack_kib(0)
    saved = os.environ.get("ASAN_OPTIONS")
    if SANITIZED:
        os.environ["ASAN_OPTIONS"] = (saved + ":" if saved else "") + \
            "quarantine_size_mb=0:allocator_release_to_os_interval_ms=100"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("ASAN_OPTIONS", None)
        else:
            os.environ["ASAN_OPTIONS"] = saved


def proc_status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s in /proc/%d/status" % (field, pid))


@test
def a_1_gib_copy_out_keeps_tern_resident_memory_bounded(ctx):
    t = ctx.tern(pool_size=2)
    check(psql_ok(t.port, "select 1") == "1", "warm up")
    idle_kib = proc_status_kib(t.pid, "VmRSS")
    # 1 GiB of COPY data (1 KiB rows) streamed through tern to a client that reads as fast as it can.
    argv = ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(t.port), "-U", "postgres",
            "-d", "postgres", "-c",
            "copy (select repeat('x', 1023) from generate_series(1, 1048576)) to stdout"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env()) as p:
        total = 0
        while True:
            chunk = p.stdout.read(1 << 20)
            if not chunk:
                break
            total += len(chunk)
        p.wait(timeout=300)
        check(p.returncode == 0, "COPY TO STDOUT: %s" % p.stderr.read().decode())
    check(total == 1048576 * 1024, "every byte arrived: %d" % total)
    peak_kib = proc_status_kib(t.pid, "VmHWM")
    check(peak_kib - idle_kib < 64 * 1024, "peak RSS %d KiB is %d KiB above idle (%d KiB)"
          % (peak_kib, peak_kib - idle_kib, idle_kib))


@test
def a_100_mib_bind_of_a_named_statement_streams_through_tern(ctx):
    t = ctx.tern(pool_size=1, extra="\n[admin]\nadmin_users = postgres\n")
    holder, w = Wire(t.port), Wire(t.port)
    try:
        holder.login("postgres")
        w.login("postgres")
        check(w.exchange(parse("len", "select length($1::text)"), SYNC)[0] == "1Z", "prepared")
        idle_kib = proc_status_kib(t.pid, "VmRSS")
        size = 100 << 20
        message_bytes = bind("len", ["x" * size]) + execute() + SYNC
        holder.query("begin")  # the only connection is busy: the Bind waits, parked, behind back pressure
        sender = threading.Thread(target=w.send, args=(message_bytes,))
        sender.start()
        states = lambda: [line.split("|")[3] for line in psql_ok(t.port, "show clients", dbname="tern").splitlines()]
        wait_for(lambda: "waiting" in states(), "the Bind's client parked, waiting for the server")
        holder.query("commit")
        sender.join(timeout=120)
        check(not sender.is_alive(), "the Bind was taken whole")
        got = w.read_until_ready()
        rows = [m for m in got if m[0] == b"D"]
        check(len(rows) == 1 and rows[0][1].endswith(str(size).encode()), "the server saw every byte: %r" % (rows,))
        peak_kib = proc_status_kib(t.pid, "VmHWM")
        check(peak_kib - idle_kib < 64 * 1024, "peak RSS %d KiB is %d KiB above idle: the Bind was held, not streamed"
              % (peak_kib, peak_kib - idle_kib))
    finally:
        holder.close()
        w.close()


@test
def copy_in_and_out(ctx):
    t = ctx.tern(pool_size=2)
    psql_ok(t.port, "drop table if exists copy_t; create table copy_t(a int, b text)")
    rows = "".join("%d\tline %d\n" % (i, i) for i in range(50000))
    r = subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(t.port), "-U",
                        "postgres", "-d", "postgres", "-c", "\\copy copy_t from stdin"],
                       input=rows, capture_output=True, text=True, timeout=60, env=env())
    check(r.returncode == 0, "COPY FROM STDIN: %s" % r.stderr)
    out = psql_ok(t.port, "\\copy (select * from copy_t order by a) to stdout")
    check(out + "\n" == rows, "COPY TO STDOUT returns what went in")


@test
def pgbench_init_and_workloads_with_32_clients(ctx):
    t = ctx.tern(pool_mode="transaction", pool_size=8)
    pgbench(t.port, ["-i", "-s", "2", "-q"])
    check(psql_ok(ctx.pg.primary_port, "select count(*) from pgbench_accounts") == "200000", "pgbench -i rows")
    for args in (["-S", "-M", "simple"], ["-S", "-M", "extended"], ["-M", "simple"], ["-M", "extended"]):
        out = pgbench(t.port, ["-n", "-c", "32", "-j", "2", "-T", "4"] + args)
        processed, failed = pgbench_summary(out)
        check(processed and processed > 100, "pgbench %s processed %r" % (args, processed))
        check(failed in (0, None), "pgbench %s: %r failed transactions" % (args, failed))
    check(server_connections(ctx.pg) <= 8, "never more than pool_size server connections")


@test
def psql_and_pgbench_read_write_with_ten_times_more_clients_than_server_connections(ctx):
    """The issue's acceptance run for the two command-line stacks: 40 clients on 4 server connections."""
    t = ctx.tern(pool_mode="transaction", pool_size=4)
    pgbench(t.port, ["-i", "-s", "1", "-q"])
    for mode in ("extended", "prepared"):
        out = pgbench(t.port, ["-n", "-c", "40", "-j", "2", "-t", "50", "-M", mode])
        check(pgbench_summary(out) == (2000, 0), "pgbench -M %s: every transaction: %r" % (mode, pgbench_summary(out)))
    # tpcb-like keeps the branches, tellers and accounts in step with the history: nothing lost, nothing twice.
    sums = psql_ok(ctx.pg.primary_port, "select (select sum(abalance) from pgbench_accounts), "
                   "(select sum(bbalance) from pgbench_branches), (select sum(tbalance) from pgbench_tellers), "
                   "(select sum(delta) from pgbench_history), (select count(*) from pgbench_history)")
    a, b, tl, h, n = sums.split("|")
    check(a == b == tl == h and n == "4000", "balances agree with the history: %s" % sums)
    psql_ok(ctx.pg.primary_port, "drop table if exists tenfold; create table tenfold(client int, v int)")

    def client(i):
        sql = ("begin; insert into tenfold select %d, g from generate_series(1, %d) g; "
               "select count(*), sum(v) from tenfold where client = %d; commit" % (i, i, i))
        return psql_ok(t.port, sql).splitlines()

    results = {}
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, client(i))) for i in range(1, 41)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    for i in range(1, 41):
        check("%d|%d" % (i, i * (i + 1) // 2) in results.get(i, []), "client %d read its own writes: %r" % (
            i, results.get(i)))
    check(psql_ok(ctx.pg.primary_port, "select count(*) from tenfold") == str(sum(range(1, 41))), "every row")
    check(server_connections(ctx.pg) <= 4, "never more than pool_size server connections")


@test
def parked_clients_all_complete_when_the_pool_is_exhausted(ctx):
    t = ctx.tern(pool_mode="transaction", pool_size=2)
    results = [None] * 20

    def run(i):
        results[i] = psql(t.port, "select pg_sleep(0.2), %d" % i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(results))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    for i, r in enumerate(results):
        check(r is not None and r.returncode == 0 and r.stdout.strip().endswith("|%d" % i),
              "client %d completed: %r" % (i, r and (r.stdout, r.stderr)))
    check(server_connections(ctx.pg) <= 2, "pool_size respected")


@test
def min_pool_size_keeps_connections_open_for_a_used_database(ctx):
    ctx.pg.psql("select 1 from pg_database where datname = 'warm'") or ctx.pg.psql("create database warm")
    t = ctx.tern(pool_mode="transaction", pool_size=5, sections={"pool": "min_pool_size = 3"})
    count = lambda: int(ctx.pg.psql("select count(*) from pg_stat_activity where datname = 'warm'"))
    check(count() == 0, "nothing is opened for a database no client has used")
    check(psql_ok(t.port, "select 1", dbname="warm") == "1", "first use")
    wait_for(lambda: count() == 3, "three warm connections", timeout=15)


@test
def query_wait_timeout_gives_an_error_and_others_go_on(ctx):
    t = ctx.tern(pool_mode="transaction", pool_size=1, sections={"pool": "query_wait_timeout = 0.5"})
    holder = Wire(t.port)
    holder.login("postgres")
    holder.query("begin")  # holds the only server connection
    try:
        with Wire(t.port) as waiter:
            waiter.login("postgres")  # the welcome needs no server: parameters are known
            waiter.send(message(b"Q", b"select 1\0"))
            fields = waiter.expect_error_and_close()
            check(fields and fields["C"] == "08P01" and "query_wait_timeout" in fields["M"],
                  "08P01 query_wait_timeout: %r" % fields)
        check(holder.query("select 7") == [["7"]], "the holder goes on")
        holder.query("commit")
    finally:
        holder.close()
    check(psql_ok(t.port, "select 8") == "8", "new clients are served")


@test
def too_many_clients_get_53300(ctx):
    t = ctx.tern(extra="max_client_conn = 2")
    # The harness's readiness probe is a client too until tern has seen it leave: retry until two fit.
    held = []

    def admit_one():
        w = Wire(t.port)
        try:
            w.login("postgres")
        except WireError:
            w.close()
            return False
        held.append(w)
        return True

    try:
        for _ in range(2):
            wait_for(admit_one, "a client slot", timeout=10)
        expect_login_refused(t.port, "postgres", "53300")
    finally:
        for w in held:
            w.close()
    wait_for(lambda: psql(t.port, "select 1").returncode == 0, "a slot frees when a client leaves", timeout=10)


AUTH_USERS = None


def auth_users(ctx):
    global AUTH_USERS
    if AUTH_USERS is None:
        for role in ("alice", "bob", "carol"):
            ctx.pg.psql("do $$ begin create role %s login; exception when duplicate_object then null; end $$"
                        % role)
        carol_md5 = "md5" + hashlib.md5(b"carolpw" + b"carol").hexdigest()
        AUTH_USERS = ('"alice" "alicepw"\n"bob" "%s"\n"carol" "%s"\n'
                      % (scram_secret("bobpw"), carol_md5))
    return AUTH_USERS


@test
def md5_auth_accepts_the_right_password_and_refuses_a_wrong_one_with_28P01(ctx):
    t = ctx.tern(auth="md5", users=auth_users(ctx))
    check(psql_ok(t.port, "select current_user", user="alice", password="alicepw") == "alice", "plain, md5")
    check(psql_ok(t.port, "select current_user", user="carol", password="carolpw") == "carol", "md5 hash")
    # bob only has a SCRAM secret: md5 mode upgrades him to SCRAM, as PostgreSQL does.
    check(psql_ok(t.port, "select current_user", user="bob", password="bobpw") == "bob", "md5 → SCRAM")
    for user in ("alice", "carol", "nobody"):
        expect_login_refused(t.port, user, "28P01", password="wrong")


@test
def scram_auth_accepts_the_right_password_and_refuses_a_wrong_one_with_28P01(ctx):
    t = ctx.tern(auth="scram", users=auth_users(ctx))
    check(psql_ok(t.port, "select current_user", user="bob", password="bobpw") == "bob", "SCRAM secret")
    check(psql_ok(t.port, "select current_user", user="alice", password="alicepw") == "alice", "plaintext")
    with Wire(t.port) as w:
        w.login("bob", password="bobpw")  # verifies the server signature too
        check(w.query("select 1") == [["1"]], "query after SCRAM")
    for user in ("bob", "alice", "nobody"):
        expect_login_refused(t.port, user, "28P01", password="wrong")
    r = psql(t.port, "select 1", user="bob", password="wrong")
    check(r.returncode != 0 and "password authentication failed" in r.stderr, "psql sees it: %r" % r.stderr)


def edit_config_and_reload(t, old, new):
    """Replaces `old` with `new` in tern t's config file and sends it SIGHUP."""
    path = os.path.join(t.workdir, "tern.ini")
    with open(path) as f:
        text = f.read()
    check(old in text, "the config holds %r" % old)
    with open(path, "w") as f:
        f.write(text.replace(old, new))
    t.proc.send_signal(signal.SIGHUP)


def server_secret(ctx, role, password, encryption):
    """Creates `role` with `password` stored as the server stores it, and returns that secret."""
    ctx.pg.psql("set password_encryption = '%s'; drop role if exists %s; create role %s login password '%s'"
                % (encryption, role, role, password))
    return ctx.pg.psql("select rolpassword from pg_authid where rolname = '%s'" % role)


def pgbench_as(port, user, password, sql, clients=4, transactions=50, extra=()):
    """pgbench -n with a one-statement script as `user`; returns its stdout (fails the test on an error)."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write(sql + "\n")
        script.flush()
        argv = ["pgbench", "-n", "-h", "127.0.0.1", "-p", str(port), "-U", user, "-c", str(clients),
                "-t", str(transactions), "-f", script.name] + list(extra) + ["postgres"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env(password))
    check(r.returncode == 0, "pgbench as %s failed (%d): %s" % (user, r.returncode, r.stderr[-2000:]))
    return r.stdout


@test
def a_userlist_of_scram_secrets_logs_in_to_a_scram_server_with_the_clients_own_proof(ctx):
    secret = server_secret(ctx, "tern_scram", "scrampw", "scram-sha-256")
    check(secret.startswith("SCRAM-SHA-256$"), "the server stores a SCRAM secret: %r" % secret)
    r = psql(ctx.pg.primary_port, "select 1", user="tern_scram")
    check(r.returncode != 0 and "password" in r.stderr, "the server asks for a password: %r" % r.stderr)
    users = '"tern_scram" "%s"\n' % secret
    for mode in ("transaction", "session"):
        t = ctx.tern(pool_mode=mode, auth="scram", users=users)
        check(psql_ok(t.port, "select current_user", user="tern_scram", password="scrampw") == "tern_scram",
              "psql through tern (%s pooling)" % mode)
        out = pgbench_as(t.port, "tern_scram", "scrampw", "select 1", extra=["-M", "extended"])
        check("number of transactions actually processed: 200/200" in out, "pgbench (%s): %s" % (mode, out))
        expect_login_refused(t.port, "tern_scram", "28P01", password="wrong")
    # A connection tern logged in to itself is cancelled like any other.
    with Wire(t.port) as w:
        w.login("tern_scram", password="scrampw")
        pid, key = w.key
        start_sleep_absorbing_stray_cancels(ctx, w, 0)
        expect_cancelled(t.port, w, pid, key)


@test
def a_server_login_that_cannot_work_says_what_to_fix_and_never_the_servers_address(ctx):
    secret = server_secret(ctx, "tern_scram", "scrampw", "scram-sha-256")
    # The same password under another salt: the client gets in, the server cannot be answered.
    users = '"tern_scram" "%s"\n' % scram_secret("scrampw")
    t = ctx.tern(auth="scram", users=users)
    err = expect_login_refused(t.port, "tern_scram", "28P01", password="scrampw")
    check("pg_authid" in err.fields["M"] and "auth_file" in err.fields["M"], "names the fix: %r" % err.fields)
    # A SCRAM secret with clients trusted: there is no proof to recover a key from.
    t = ctx.tern(auth="trust", users='"tern_scram" "%s"\n' % secret)
    err = expect_login_refused(t.port, "tern_scram", "28000")
    check("mode = scram" in err.fields["M"], "names the fix: %r" % err.fields)
    # No userlist entry and no password anywhere: libpq's own words, without the address.
    t = ctx.tern(auth="trust")
    err = expect_login_refused(t.port, "tern_scram", "28P01")
    check("auth_file" in err.fields["M"], "names the fix: %r" % err.fields)
    for e in (err,):
        check("127.0.0.1" not in e.fields["M"] and str(ctx.pg.primary_port) not in e.fields["M"],
              "no server address: %r" % e.fields)


def scram_only_cluster():
    """A primary and streaming replica that ask every TCP login for scram-sha-256, postgres included (its
    password from initdb on): the setup of a user who keeps no plaintext password anywhere."""
    return PgCluster(with_replica=True, password="pgpw", hba_lines=["host all all 127.0.0.1/32 scram-sha-256"])


def scram_only_tern(ctx, pg, users, http_port):
    config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 2\npool_mode = transaction\n"
              "[servers]\nprimary = host=127.0.0.1 port=%d\nreplica = host=127.0.0.1 port=%d\n"
              "[routing]\nmonitor_interval_ms = 100\ndefault_consistency = session\n"
              "[auth]\nmode = scram\nauth_file = users.txt\n[admin]\nhttp_listen = 127.0.0.1:%d\n"
              % (free_port(), pg.primary_port, pg.replica_port, http_port))
    t = TernProcess(TERN, config, extra_files={"users.txt": users})
    ctx.terns.append(t)
    t.start()
    return t


def server_roles(http_port):
    status = json.loads(urllib.request.urlopen("http://127.0.0.1:%d/api/status" % http_port, timeout=10).read())
    return {server["name"]: server["role"] for server in status["servers"]}


@test
def a_userlist_of_verifiers_only_serves_psql_and_psycopg_and_the_monitor_learns_its_key(ctx):
    """A scram-sha-256 server for every login, a userlist with only the server's verifier for postgres,
    [auth] mode = scram: before any client the monitor cannot log in (both servers unmonitored, logged
    once each, writes to [servers] primary). psql with the right password gets in and its query runs (tern
    aborted here once: the login joined the wait for a primary). The monitor takes the ClientKey that
    login proved and sees the primary and the standby; reads go to the replica from then on; psycopg
    (extended protocol, a transaction) works; a wrong password is 28P01; a psycopg session survives a
    kill of the primary and the promotion of the standby (Transaction Replay's login with the same key)."""
    import psycopg
    with scram_only_cluster() as pg:
        secret = pg.psql("select rolpassword from pg_authid where rolname = 'postgres'")
        check(secret.startswith("SCRAM-SHA-256$"), "a verifier: %r" % secret[:20])
        http_port = free_port()
        t = scram_only_tern(ctx, pg, '"postgres" "%s"\n' % secret, http_port)
        check(server_roles(http_port) == {"primary": "unmonitored", "replica": "unmonitored"},
              "no credential yet: %r" % server_roles(http_port))
        check(psql_ok(t.port, "select 42", password="pgpw") == "42", "psql through tern")
        wait_for(lambda: server_roles(http_port) == {"primary": "primary", "replica": "standby"},
                 "the monitor logs in with the key the client proved", timeout=10)
        wait_for(lambda: psql_ok(t.port, "select pg_is_in_recovery()", password="pgpw") == "t",
                 "a read on the replica", timeout=10)
        dsn = "host=127.0.0.1 port=%d user=postgres dbname=postgres password=pgpw" % t.port
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("drop table if exists verifier_only; create table verifier_only(a int)")
            with conn.transaction():
                for i in range(5):
                    conn.execute("insert into verifier_only values (%s)", (i,))
            rows = conn.execute("select count(*), sum(a) from verifier_only where a >= %s", (0,)).fetchone()
        check(rows == (5, 10), "psycopg's rows: %r" % (rows,))
        expect_login_refused(t.port, "postgres", "28P01", password="wrong")
        # Transaction Replay logs in again with the key on the client's own pool entry; the monitor finds
        # the promoted standby with the key it learned.
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("insert into verifier_only values (5)")
            pg.wait_replica_caught_up()
            pg.promote_replica()
            rows = conn.execute("select count(*) from verifier_only").fetchone()
        check(rows == (6,), "the session moved to the promoted server: %r" % (rows,))
        # (the session moved on its own re-login; the monitor's next round sees the promotion)
        wait_for(lambda: server_roles(http_port)["replica"] == "primary", "the monitor follows", timeout=10)
        log = t.log_tail(1000)
        for name in ("primary", "replica"):
            check(log.count("server %s is unmonitored" % name) == 1, "logged once: %r" % log[-2000:])
        check(t.alive(), "tern is up")


@test
def a_monitor_without_a_usable_credential_leaves_reads_and_writes_on_the_primary(ctx):
    """The same setup, but clients log in as app (a verifier in the userlist) and nobody as postgres,
    whom the monitor logs in as: it never has a credential. Logins and queries work from the start;
    every read stays on the primary though a replica is configured (default_consistency = session);
    the servers stay unmonitored, logged once each over many monitor rounds; tern stays up."""
    import psycopg
    with scram_only_cluster() as pg:
        pg.psql("create role app login password 'apppw'; grant pg_read_all_data to app")
        secret = pg.psql("select rolpassword from pg_authid where rolname = 'app'")
        http_port = free_port()
        t = scram_only_tern(ctx, pg, '"app" "%s"\n' % secret, http_port)
        dsn = "host=127.0.0.1 port=%d user=app dbname=postgres password=apppw" % t.port
        started = time.monotonic()
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(20):
                check(conn.execute("select pg_is_in_recovery()").fetchone() == (False,), "read on the primary")
            conn.execute("create temp table t(a int)")  # a write goes through too
        check(psql_ok(t.port, "select pg_is_in_recovery()", user="app", password="apppw") == "f", "psql: primary")
        while time.monotonic() - started < 1.5:  # many rounds at monitor_interval_ms = 100
            time.sleep(0.1)
        check(server_roles(http_port) == {"primary": "unmonitored", "replica": "unmonitored"},
              "still unmonitored: %r" % server_roles(http_port))
        samples = scrape_metrics(http_port)
        check(metric(samples, "tern_server_role", server="replica", role="unmonitored") == 1, "the metric says so")
        log = t.log_tail(1000)
        for name in ("primary", "replica"):
            check(log.count("server %s is unmonitored" % name) == 1, "logged once: %r" % log[-2000:])
        check(t.alive(), "tern is up")


@test
def auth_query_finds_users_not_in_the_userlist_with_a_parameterized_query(ctx):
    server_secret(ctx, "tern_scram", "scrampw", "scram-sha-256")
    server_secret(ctx, "tern_md5", "md5pw", "md5")
    ctx.pg.psql("drop role if exists \"o'brien\"; create role \"o'brien\" login password 'x'; "
                "drop role if exists tern_nologin; create role tern_nologin nologin password 'nlpw'")
    # Only auth_user is in the file; everyone else is found on the server, with no plaintext anywhere.
    # md5 mode asks SCRAM of a user whose secret is SCRAM, as PostgreSQL does.
    t = ctx.tern(auth="md5", users='"postgres" "pgpw"\n', auth_extra="auth_user = postgres")
    check(psql_ok(t.port, "select current_user", user="tern_scram", password="scrampw") == "tern_scram",
          "a SCRAM user found by auth_query, logged in to the server with the client's proof")
    out = pgbench_as(t.port, "tern_scram", "scrampw", "select 1", extra=["-C"], transactions=20)
    check("number of transactions actually processed: 80/80" in out, "a login per transaction: %s" % out)
    check(psql_ok(t.port, "select current_user", user="tern_md5", password="md5pw") == "tern_md5",
          "an md5 user found by auth_query, md5 to the client and to the server")
    for user, password in (("tern_scram", "wrong"), ("no_such_role", "x"), ("tern_nologin", "nlpw"),
                           ("o'brien", "wrong"), ("x'; drop table t; --", "x")):
        expect_login_refused(t.port, user, "28P01", password=password)
    check(psql_ok(t.port, "select current_user", user="postgres", password="pgpw") == "postgres",
          "the userlist still counts")
    # A password changed on the server counts at the next login.
    ctx.pg.psql("alter role tern_scram password 'newpw'")
    expect_login_refused(t.port, "tern_scram", "28P01", password="scrampw")
    check(psql_ok(t.port, "select 1", user="tern_scram", password="newpw") == "1", "the new password")
    # A query that fails tells the client why, and tern goes on.
    bad = ctx.tern(auth="scram", users='"postgres" "pgpw"\n',
                   auth_extra="auth_user = postgres\nauth_query = SELECT usename, passwd FROM no_such_view WHERE usename = $1")
    err = expect_login_refused(bad.port, "tern_scram", "42P01", password="newpw")
    check("auth_query failed" in err.fields["M"], "names auth_query: %r" % err.fields)
    check(psql_ok(bad.port, "select 1", user="postgres", password="pgpw") == "1", "tern goes on")
    # auth_query is reloadable: PgBouncer's older query, over pg_shadow, by SIGHUP.
    edit_config_and_reload(bad, "no_such_view", "pg_catalog.pg_shadow")
    wait_for(lambda: psql(bad.port, "select 1", user="tern_scram", password="newpw").returncode == 0,
             "the reloaded auth_query finds the user", timeout=10)


@test
def a_client_gone_while_its_auth_query_runs_never_takes_tern_down(ctx):
    """A client whose lookup is in flight (auth_query takes 2 s) ends first: it sends a password
    before it was asked (a protocol violation), or client_login_timeout passes; the client keeps its
    socket open, so the ended session lingers. When the lookup answers, the answer is dropped. Before: an assertion ended the whole
    process (the session had ended, yet still owned the lookup). tern serves the next client."""
    server_secret(ctx, "tern_scram", "scrampw", "scram-sha-256")
    slow = "SELECT usename, passwd FROM pg_catalog.pg_shadow, pg_catalog.pg_sleep(2) WHERE usename = $1"
    t = ctx.tern(auth="scram", users='"postgres" "pgpw"\n', auth_extra="auth_user = postgres\nauth_query = %s" % slow,
                 extra="client_login_timeout = 1s")
    held = []
    for how in ("password unasked", "login timeout"):
        sock = socket.create_connection(("127.0.0.1", t.port), timeout=10)
        sock.sendall(startup_packet("tern_scram"))
        if how == "password unasked":
            sock.sendall(message(b"p", b"scrampw\0"))
        sock.settimeout(5)
        check(sock.recv(1) == b"E", "%s: the session ends while its lookup runs" % how)
        held.append(sock)  # open: the ended session lingers until the client closes
    lookups_running = ("select count(*) from pg_stat_activity where application_name = 'tern auth_query' "
                       "and state = 'active'")
    wait_for(lambda: ctx.pg.psql(lookups_running) != "0", "a lookup to run", timeout=10)
    wait_for(lambda: ctx.pg.psql(lookups_running) == "0", "the lookups to answer", timeout=10)
    for sock in held:
        sock.close()
    check(t.alive(), "tern is up")
    check(psql_ok(t.port, "select current_user", password="pgpw") == "postgres",
          "the next client gets in (one in auth_file: a lookup takes longer than client_login_timeout)")


@test
def an_md5_hash_in_the_userlist_logs_in_to_an_md5_server(ctx):
    secret = server_secret(ctx, "tern_md5", "md5pw", "md5")
    check(secret.startswith("md5"), "the server stores an md5 hash: %r" % secret)
    t = ctx.tern(auth="md5", users='"tern_md5" "%s"\n' % secret)
    check(psql_ok(t.port, "select current_user", user="tern_md5", password="md5pw") == "tern_md5", "md5 both ways")
    out = pgbench_as(t.port, "tern_md5", "md5pw", "select 1")
    check("number of transactions actually processed: 200/200" in out, "pgbench: %s" % out)
    # An md5 hash cannot answer a SCRAM server.
    scram = server_secret(ctx, "tern_scram", "scrampw", "scram-sha-256")
    t = ctx.tern(auth="md5", users='"tern_scram" "%s"\n' % ("md5" + hashlib.md5(b"scrampwtern_scram").hexdigest()))
    err = expect_login_refused(t.port, "tern_scram", "28000", password="scrampw")
    check("md5 hash" in err.fields["M"] and "127.0.0.1" not in err.fields["M"], "names the fix: %r" % err.fields)
    check(scram.startswith("SCRAM"), "the role is SCRAM on the server")


def connections_by_user(pg):
    rows = pg.psql("select usename, count(*) from pg_stat_activity where " + POOL_BACKENDS + " group by usename")
    return {u: int(n) for u, n in (line.split("|") for line in rows.splitlines() if line)}


def pgbench_in_background(port, user, seconds, clients, sql, extra=()):
    """pgbench -n -T seconds as `user`, started now; returns (Popen, script file) for the caller to wait on."""
    script = tempfile.NamedTemporaryFile("w", suffix=".sql")
    script.write(sql + "\n")
    script.flush()
    argv = ["pgbench", "-n", "-h", "127.0.0.1", "-p", str(port), "-U", user, "-c", str(clients), "-T", str(seconds),
            "-f", script.name] + list(extra) + ["postgres"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env()), script


def pgbench_finish(proc_script, what):
    proc, script = proc_script
    out, err = proc.communicate(timeout=120)
    script.close()
    check(proc.returncode == 0, "%s: pgbench failed (%d): %s" % (what, proc.returncode, err[-2000:]))
    processed, failed = pgbench_summary(out)
    check(processed and not failed, "%s: %r processed, %r failed" % (what, processed, failed))
    return processed


@test
def pool_size_is_per_user_and_database_and_max_db_connections_caps_a_database_across_users(ctx):
    auth_users(ctx)  # the roles alice and bob, trusted by the server
    t = ctx.tern(pool_size=2, workers=2)
    runs = [pgbench_in_background(t.port, user, 3, 6, "select pg_sleep(0.02)") for user in ("alice", "bob")]
    peak = {}
    while any(proc.poll() is None for proc, _ in runs):  # (sampled for as long as the load runs)
        for user, n in connections_by_user(ctx.pg).items():
            peak[user] = max(peak.get(user, 0), n)
        time.sleep(0.05)
    for run, user in zip(runs, ("alice", "bob")):
        pgbench_finish(run, user)
    check(peak.get("alice") == 2 and peak.get("bob") == 2, "two per pair, each pair its own: %r" % peak)
    t.stop()
    wait_for(lambda: server_connections(ctx.pg) == 0, "the first tern's connections are gone", timeout=10)
    t2 = ctx.tern(pool_size=2, workers=2, sections={"pool": "max_db_connections = 3"})
    runs = [pgbench_in_background(t2.port, user, 3, 6, "select pg_sleep(0.02)") for user in ("alice", "bob")]
    most = 0
    while any(proc.poll() is None for proc, _ in runs):
        most = max(most, sum(connections_by_user(ctx.pg).values()))
        time.sleep(0.05)
    for run, user in zip(runs, ("alice", "bob")):
        pgbench_finish(run, user)
    check(most == 3, "database postgres never past max_db_connections 3, and reaches it: %d" % most)


@test
def a_pool_size_lowered_by_reload_closes_connections_as_they_are_released_under_load(ctx):
    t = ctx.tern(pool_size=6, workers=2)
    run = pgbench_in_background(t.port, "postgres", 8, 10, "select pg_sleep(0.01)")
    wait_for(lambda: server_connections(ctx.pg) == 6, "six server connections under load", timeout=10)
    edit_config_and_reload(t, "pool_size = 6", "pool_size = 2")
    wait_for(lambda: server_connections(ctx.pg) == 2, "down to the new pool_size while pgbench runs", timeout=10)
    check(run[0].poll() is None, "pgbench still running: the size dropped under load")
    most_after = max(server_connections(ctx.pg) for _ in range(20))
    pgbench_finish(run, "pgbench across the reload")
    check(most_after <= 2, "stays at the new size: %d" % most_after)


def backend_pid(w):
    return w.query("select pg_backend_pid()")[0][0]


@test
def databases_section_maps_names_forces_users_and_sets_pool_mode_per_database_and_user(ctx):
    auth_users(ctx)
    t = ctx.tern(pool_size=1, more="""[databases]
shop = dbname=postgres pool_size=1
app = dbname=postgres user=alice pool_mode=session pool_size=2
reports = dbname=postgres server=standby
[users]
bob = pool_mode=session
[servers]
standby = host=127.0.0.1 port=%d
""" % ctx.pg.replica_port)
    check(psql_ok(t.port, "select current_database()", dbname="shop") == "postgres", "shop is postgres")
    check(psql_ok(t.port, "select pg_is_in_recovery()", dbname="reports") == "t", "reports goes to its server")
    check(psql_ok(t.port, "select pg_is_in_recovery()", dbname="shop") == "f", "shop to the primary")
    check(psql_ok(t.port, "select current_user", dbname="app") == "alice", "app logs every client in as alice")
    err = expect_login_refused(t.port, "postgres", "3D000", database="nosuch")
    check("no such database" in err.fields["M"], "PgBouncer's words: %r" % err.fields)
    expect_login_refused(t.port, "postgres", "3D000", database="postgres")  # not listed, no "*"
    # Transaction pooling (shop): two idle clients share the one connection of pool_size 1.
    with Wire(t.port) as a, Wire(t.port) as b:
        a.login("postgres", database="shop")
        b.login("postgres", database="shop")
        check(backend_pid(a) == backend_pid(b), "transaction pooling shares a connection")
    # Session pooling (app): a client keeps its connection while idle; the next gets another.
    with Wire(t.port) as a, Wire(t.port) as b:
        a.login("postgres", database="app")
        b.login("postgres", database="app")
        check(backend_pid(a) != backend_pid(b), "session pooling per database")
    t2 = ctx.tern(pool_size=2, more="[databases]\n* = \n[users]\nbob = pool_mode=session\n")
    check(psql_ok(t2.port, "select current_database()", dbname="postgres") == "postgres", "the \"*\" entry")
    with Wire(t2.port) as a, Wire(t2.port) as b:
        a.login("bob", database="postgres")
        b.login("bob", database="postgres")
        check(backend_pid(a) != backend_pid(b), "session pooling for user bob")
    with Wire(t2.port) as c, Wire(t2.port) as d:
        c.login("alice", database="postgres")
        d.login("alice", database="postgres")
        check(backend_pid(c) == backend_pid(d), "alice keeps [tern] pool_mode, transaction pooling")


@test
def a_pgbouncer_setup_with_scram_secrets_imports_and_serves_psql_pgbench_and_the_console(ctx):
    secret = server_secret(ctx, "tern_scram", "scrampw", "scram-sha-256")
    workdir = tempfile.mkdtemp(prefix="tern-import-")
    try:
        port = free_port()
        with open(os.path.join(workdir, "userlist.txt"), "w") as f:
            f.write('"tern_scram" "%s"\n' % secret)
        # As Debian's pgbouncer.ini is laid out, with the userlist beside it and SCRAM secrets only.
        with open(os.path.join(workdir, "pgbouncer.ini"), "w") as f:
            f.write("""[databases]
postgres = host=127.0.0.1 port=%d dbname=postgres
appdb = host=127.0.0.1 port=%d dbname=postgres pool_size=3 connect_query='select 1'
standby = host=127.0.0.1 port=%d dbname=postgres

[pgbouncer]
logfile = /var/log/postgresql/pgbouncer.log
pidfile = /var/run/postgresql/pgbouncer.pid
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir = sock
unix_socket_mode = 0770
unix_socket_group = root
auth_type = scram-sha-256
auth_file = userlist.txt
admin_users = tern_scram
pool_mode = transaction
default_pool_size = 4
server_idle_timeout = 60
""" % (ctx.pg.primary_port, ctx.pg.primary_port, ctx.pg.replica_port, port))
        sockdir = os.path.join(workdir, "sock")
        os.mkdir(sockdir)
        r = subprocess.run([TERN, "--import-pgbouncer", os.path.join(workdir, "pgbouncer.ini")],
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "import: %s" % r.stderr)
        for what in ("logfile", "pidfile", "connect_query"):
            check(what in r.stderr, "the notes name %s: %s" % (what, r.stderr))
        check("unix_socket" not in r.stderr, "the Unix socket's keys carry over: %s" % r.stderr)
        check("mode = scram" in r.stdout and "primary = host=127.0.0.1 port=%d" % ctx.pg.primary_port in r.stdout
              and "unix_socket_dir = %s" % sockdir in r.stdout and "unix_socket_mode = 0770" in r.stdout
              and "unix_socket_group = root" in r.stdout, "carried over: %s" % r.stdout)
        t = TernProcess(TERN, r.stdout)
        ctx.terns.append(t)
        t.start()
        st = os.stat(os.path.join(sockdir, ".s.PGSQL.%d" % port))
        check(stat.S_IMODE(st.st_mode) == 0o770 and st.st_gid == 0, "the socket's mode and group: %o, gid %d"
              % (stat.S_IMODE(st.st_mode), st.st_gid))
        check(psql_ok(t.port, "select current_user", user="tern_scram", password="scrampw") == "tern_scram", "psql")
        check(psql_ok(t.port, "select 1", user="tern_scram", password="scrampw", extra_args=["-h", sockdir]) == "1",
              "psql over the Unix socket")
        check(psql_ok(t.port, "select current_database()", user="tern_scram", password="scrampw",
                      dbname="appdb") == "postgres", "a [databases] entry")
        check(psql_ok(t.port, "select pg_is_in_recovery()", user="tern_scram", password="scrampw",
                      dbname="standby") == "t", "an entry on another server goes there")
        out = pgbench_as(t.port, "tern_scram", "scrampw", "select 1", extra=["-M", "extended"])
        check("number of transactions actually processed: 200/200" in out, "pgbench: %s" % out)
        pools = psql_ok(t.port, "show pools", user="tern_scram", password="scrampw", dbname="pgbouncer")
        check("tern_scram" in pools, "the admin console as PgBouncer's: %r" % pools)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


class Forwarder:
    """A TCP listener on `port` that relays each connection to 127.0.0.1:`target` once started: before
    that, nothing listens there (a server that is down)."""

    def __init__(self, port, target):
        self.port, self.target = port, target
        self.listener = None
        self.threads = []

    def start(self):
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(16)
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self.threads.append(t)

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((client, server), (server, client)):
                t = threading.Thread(target=self._pump, args=(a, b), daemon=True)
                t.start()
                self.threads.append(t)

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self):
        if self.listener:
            try:  # wakes the accept() under way, which would keep the port listening after a close
                self.listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.listener.close()
            self.listener = None


@test
def a_server_that_is_down_holds_requests_while_tern_retries_the_login(ctx):
    down_port = free_port()
    forwarder = Forwarder(down_port, ctx.pg.primary_port)
    try:
        def tern_on(extra_pool):
            config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 2\npool_mode = session\n[servers]\n"
                      "primary = host=127.0.0.1 port=%d\n[pool]\n%s\n" % (free_port(), down_port, extra_pool))
            t = TernProcess(TERN, config)
            ctx.terns.append(t)
            t.start()
            return t
        fast = tern_on("server_login_retry = 0")
        started = time.monotonic()
        expect_login_refused(fast.port, "postgres", "08006")
        check(time.monotonic() - started < 5, "server_login_retry = 0: refused at once, as before")
        t = tern_on("server_login_retry = 1s\nquery_wait_timeout = 30s")
        result = {}

        def login():
            started = time.monotonic()
            with Wire(t.port) as w:
                w.login("postgres")
                result["rows"] = w.query("select 7")
            result["seconds"] = time.monotonic() - started

        client = threading.Thread(target=login)
        client.start()
        time.sleep(0.5)  # the client is waiting; no server yet (the harness starts it now, not to pass)
        check(client.is_alive(), "the client waits while the server is down")
        forwarder.start()
        client.join(timeout=20)
        check(result.get("rows") == [["7"]], "served once the server answers: %r" % result)
        check(result["seconds"] < 10, "within a retry or two: %.1fs" % result["seconds"])
        # While it is down for longer than query_wait_timeout, the request ends with PgBouncer's error.
        forwarder.stop()
        short = tern_on("server_login_retry = 1s\nquery_wait_timeout = 2s")
        started = time.monotonic()
        expect_login_refused(short.port, "postgres", "08P01")
        check(1.5 < time.monotonic() - started < 10, "after query_wait_timeout")
    finally:
        forwarder.stop()


@test
def unknown_database_and_role_are_reported_as_the_server_reports_them(ctx):
    t = ctx.tern(pool_mode="transaction")
    err = expect_login_refused(t.port, "postgres", "3D000", database="no_such_db")
    check("no_such_db" in err.fields["M"], "names the database: %r" % err.fields)
    err = expect_login_refused(t.port, "no_such_role", "28000")
    check("no_such_role" in err.fields["M"], "names the role: %r" % err.fields)


@test
def ssl_and_gss_requests_are_answered_N(ctx):
    t = ctx.tern()
    for code in (80877103, 80877104):
        with Wire(t.port) as w:
            w.send(struct.pack("!II", 8, code))
            check(w.read_bytes(1) == b"N", "'N' for %d" % code)
            w.login("postgres")
            check(w.query("select 5") == [["5"]], "plain session after refusing encryption")
    r = psql(t.port, "select 1", extra_args=())  # psql's default sslmode=prefer falls back
    check(r.returncode == 0, "psql with sslmode=prefer: %r" % r.stderr)


@test
def bytes_after_ssl_request_before_the_answer_are_a_protocol_violation(ctx):
    t = ctx.tern()
    with Wire(t.port) as w:
        # CVE-2021-23214: data pipelined behind SSLRequest must not be processed.
        w.send(struct.pack("!II", 8, 80877103) + startup_packet("postgres"))
        fields = w.expect_error_and_close()
        check(fields and fields["C"] == "08P01", "08P01, got %r" % fields)
    check(psql_ok(t.port, "select 1") == "1", "others unaffected")


@test
def malformed_and_oversized_frames_close_only_that_connection(ctx):
    t = ctx.tern(extra="max_client_frame_bytes = 4kB")
    bystander = Wire(t.port)
    bystander.login("postgres")
    try:
        cases = {
            "startup length below 8": struct.pack("!I", 3) + b"\0" * 8,
            "startup length over 10000": struct.pack("!I", 100000) + b"\0" * 8,
            "protocol 2.0": startup_packet("postgres", version=131072),
        }
        for name, data in cases.items():
            with Wire(t.port) as w:
                w.send(data)
                fields = w.expect_error_and_close()
                check(fields and fields["C"] in ("08P01", "0A000"), "%s: %r" % (name, fields))
        for name, data in {"length below 4": b"Q" + struct.pack("!I", 2),
                           "frame over max_client_frame_bytes": message(b"Q", b"x" * 5000 + b"\0")}.items():
            with Wire(t.port) as w:
                w.login("postgres")
                w.send(data)
                fields = w.expect_error_and_close()
                check(fields and fields["C"] == "08P01", "%s: %r" % (name, fields))
        check(bystander.query("select 3") == [["3"]], "the other session goes on")
    finally:
        bystander.close()


@test
def a_server_killed_mid_query_gives_its_client_an_error_not_a_hang(ctx):
    """A backend terminated under a running query: with Transaction Replay's default (tr_mode = session)
    the query gets 08007 (its outcome unknown) and the session goes on; with tr_mode = none, or
    tr_enabled = false whatever the mode, the session ends with 57P01, as a plain pooler's would.
    Promptly, either way."""
    for mode, sqlstate, extra in (("session", "08007", ""), ("none", "57P01", ""),
                                  ("none", "57P01", "tr_mode = select\ntr_enabled = false")):
        t = ctx.tern(pool_mode="transaction", pool_size=2,
                     more="[replay]\n%s" % (extra or "tr_mode = %s" % mode))
        with Wire(t.port) as w:
            w.login("postgres")
            pid = w.query("select pg_backend_pid()")[0][0]
            w.send(message(b"Q", b"select pg_sleep(30)\0"))
            wait_for(lambda: ctx.pg.psql("select count(*) from pg_stat_activity where pid = %s and "
                                         "query like 'select pg_sleep%%'" % pid) == "1", "query running")
            ctx.pg.psql("select pg_terminate_backend(%s)" % pid)
            started = time.monotonic()
            if mode == "none":
                fields = w.expect_error_and_close()
                check(fields is not None and fields["C"] == sqlstate, "%s: closed with %s: %r" % (mode, sqlstate, fields))
            else:
                try:
                    w.read_until_ready()
                    raise AssertionError("no error")
                except WireError as e:
                    check(e.sqlstate == sqlstate, "%s: %s: %r" % (mode, sqlstate, e.fields))
                check(w.query("select 5") == [["5"]], "the session goes on")
            check(time.monotonic() - started < 10, "promptly")
        check(psql_ok(t.port, "select 4") == "4", "tern keeps serving")
        t.stop()


def absorb_stray_cancel(w):
    """PostgreSQL's postmaster signals a cancelled backend twice (its pid, then its process group);
    when the second SIGINT lands after the first was handled, it stays pending and cancels the next
    statement, through tern or not. One throwaway statement takes it."""
    try:
        w.query("select 1")
    except WireError as err:
        check(err.sqlstate == "57014", "only a stray cancel may fail the throwaway statement: %r" % err.fields)


def start_sleep_absorbing_stray_cancels(ctx, w, attempt, sql="select pg_sleep(30)"):
    """Sends `sql` (a sleep) and waits until the server runs it. A stray second SIGINT (see
    absorb_stray_cancel) may land late and cancel it first: then the client has its 57014 already,
    and the query is sent again."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        w.send(message(b"Q", sql.encode() + b"\0"))
        while time.monotonic() < deadline:
            if ctx.pg.psql("select count(*) from pg_stat_activity where query = '%s' and state = 'active'"
                           % sql) == "1":
                return
            if select.select([w.sock], [], [], 0.1)[0]:
                try:
                    w.read_until_ready()
                    raise AssertionError("%s ended without a cancel" % sql)
                except WireError as err:
                    check(err.sqlstate == "57014", "only a stray cancel may end it early: %r" % err.fields)
                break
    raise AssertionError("%s never ran on the server (attempt %d)" % (sql, attempt))


def send_cancel(port, pid, secret):
    """A CancelRequest on its own connection (`secret` an int: protocol 3.0's 4 bytes; bytes: 3.2's
    longer key); the server side closes it without an answer."""
    key = struct.pack("!I", secret) if isinstance(secret, int) else secret
    with Wire(port) as c:
        c.send(struct.pack("!III", 12 + len(key), 80877102, pid) + key)
        check(c.read_message() is None, "a cancel connection gets no answer")


def expect_cancelled(port, w, pid, key, what="cancelled"):
    """Sends the cancel for w's running pg_sleep(30) and expects 57014 well before it would finish."""
    started = time.monotonic()
    send_cancel(port, pid, key)
    try:
        w.read_until_ready()
        raise AssertionError("pg_sleep(30) was not cancelled (%s)" % what)
    except WireError as err:
        check(err.sqlstate == "57014", "57014 query_canceled, got %r (%s)" % (err.fields, what))
    check(time.monotonic() - started < 10, "cancelled, not finished (%s)" % what)


@test
def cancel_requests_reach_the_owning_worker_and_stop_only_a_running_query(ctx):
    t = ctx.tern(pool_mode="transaction", pool_size=2, workers=2)
    with Wire(t.port) as w:
        w.login("postgres")
        pid, secret = w.key
        check(pid >> 24 in (0, 1), "the key names a worker: %#x" % pid)
        for _ in range(4):  # connections land on either worker: each routes to the owner
            send_cancel(t.port, pid, secret)
        check(w.query("select 1") == [["1"]], "a cancel with no query running does nothing")
        for attempt in range(4):
            start_sleep_absorbing_stray_cancels(ctx, w, attempt)
            expect_cancelled(t.port, w, pid, secret, "attempt %d" % attempt)
            absorb_stray_cancel(w)
        check(w.query("select 2") == [["2"]], "the session goes on after its cancels")
        # (a stray SIGINT of the cancels above may still cancel it first: it is sent again then)
        start_sleep_absorbing_stray_cancels(ctx, w, 0, "select pg_sleep(2), 3")
        for _ in range(4):
            send_cancel(t.port, pid, secret ^ 1)
        rows = [m for m in w.read_until_ready() if m[0] == b"D"]
        check(len(rows) == 1, "a cancel with a wrong secret is ignored")


@test
def sigterm_drains_running_transactions_and_sigint_exits_at_once(ctx):
    psql_ok(ctx.pg.primary_port, "drop table if exists drain_t; create table drain_t(a int)")
    t = ctx.tern(pool_mode="transaction", pool_size=2)
    busy, idle = Wire(t.port), Wire(t.port)
    try:
        busy.login("postgres")
        idle.login("postgres")
        busy.query("begin")
        busy.query("insert into drain_t values (1)")
        t.proc.send_signal(signal.SIGTERM)
        fields = idle.expect_error_and_close()
        check(fields and fields["C"] == "57P01", "an idle client is told tern is shutting down: %r" % fields)
        wait_for(lambda: not can_login(t.port), "no new clients are accepted", timeout=10)
        check(t.alive(), "tern waits for the open transaction")
        busy.query("insert into drain_t values (2)")
        busy.query("commit")
        fields = busy.expect_error_and_close()
        check(fields and fields["C"] == "57P01", "the client is let go after its commit: %r" % fields)
        t.proc.wait(timeout=10)
        check(t.proc.returncode == 0, "tern exits 0 once drained, got %r" % t.proc.returncode)
        check(psql_ok(ctx.pg.primary_port, "select count(*) from drain_t") == "2", "the transaction committed")
    finally:
        busy.close()
        idle.close()
    t2 = ctx.tern(pool_mode="transaction", pool_size=2)
    with Wire(t2.port) as w:
        w.login("postgres")
        w.query("begin")
        t2.proc.send_signal(signal.SIGINT)
        fields = w.expect_error_and_close()
        check(fields and fields["C"] == "57P01", "SIGINT ends even a client in a transaction: %r" % fields)
    t2.proc.wait(timeout=10)
    check(t2.proc.returncode == 0, "tern exits 0 on SIGINT")


def can_login(port):
    try:
        with Wire(port, timeout=2) as w:
            w.login("postgres")
            return True
    except (OSError, EOFError, WireError):
        return False


@test
def client_timeouts_end_only_the_client_they_name(ctx):
    t = ctx.tern(pool_mode="transaction", pool_size=2,
                 extra="client_idle_timeout = 1\nidle_transaction_timeout = 1\nquery_timeout = 2")
    idle, in_tx, slow = Wire(t.port, timeout=20), Wire(t.port, timeout=20), Wire(t.port, timeout=20)
    try:
        for w in (idle, in_tx, slow):
            w.login("postgres")
        in_tx.query("begin")
        slow.send(message(b"Q", b"select pg_sleep(30)\0"))
        # Each waits for its own event: the error, then the close.
        fields = idle.expect_error_and_close()
        check(fields and fields["C"] == "57P05" and "client_idle_timeout" in fields["M"], "idle: %r" % fields)
        fields = in_tx.expect_error_and_close()
        check(fields and fields["C"] == "25P03" and "idle_transaction_timeout" in fields["M"],
              "idle in transaction: %r" % fields)
        fields = slow.expect_error_and_close()
        check(fields and fields["C"] == "57014" and "query_timeout" in fields["M"], "slow query: %r" % fields)
    finally:
        for w in (idle, in_tx, slow):
            w.close()
    # A busy client is not idle: queries every half second for 2.5 s outlive client_idle_timeout = 1.
    with Wire(t.port) as w:
        w.login("postgres")
        for i in range(5):
            check(w.query("select pg_sleep(0.5), %d" % i)[0][1] == str(i), "a working client stays")


@test
def server_idle_timeout_and_server_lifetime_close_server_connections(ctx):
    ctx.pg.psql("select 1 from pg_database where datname = 'srvto'") or ctx.pg.psql("create database srvto")
    count = lambda: int(ctx.pg.psql("select count(*) from pg_stat_activity where datname = 'srvto'"))
    t = ctx.tern(pool_mode="transaction", pool_size=2, sections={"pool": "server_idle_timeout = 1"})
    check(psql_ok(t.port, "select 1", dbname="srvto") == "1", "first use")
    check(count() == 1, "one server connection")
    wait_for(lambda: count() == 0, "the idle server connection is closed", timeout=10)
    t.stop()
    t2 = ctx.tern(pool_mode="transaction", pool_size=1, sections={"pool": "server_lifetime = 1"})
    with Wire(t2.port) as w:
        w.login("postgres", database="srvto")
        first = w.query("select pg_backend_pid()")[0][0]
        wait_for(lambda: w.query("select pg_backend_pid()")[0][0] != first,
                 "a new server connection replaces one past server_lifetime", timeout=10, interval=0.2)


@test
def a_listening_client_keeps_its_server_connection_until_unlisten(ctx):
    t = ctx.tern(pool_mode="transaction", pool_size=1, sections={"pool": "query_wait_timeout = 1"})
    with Wire(t.port) as listener:
        listener.login("postgres")
        listener.query("listen tern_channel")
        # The only server connection stays with the listener between its transactions.
        r = psql(t.port, "select 1")
        check(r.returncode != 0 and "query_wait_timeout" in r.stderr, "others wait: %r" % r.stderr)
        ctx.pg.psql("notify tern_channel, 'hello'")  # sent straight to PostgreSQL
        while True:
            msg = listener.read_message()
            check(msg is not None, "the connection stays open")
            if msg[0] == b"A":
                check(b"tern_channel\0hello\0" in msg[1], "the notification: %r" % msg[1])
                break
        check(listener.query("select 5") == [["5"]], "the listener still queries")
        listener.query("/* done */ unlisten *")
        check(psql_ok(t.port, "select 6") == "6", "after UNLISTEN * the connection serves others")
        listener.query("listen tern_channel")
    # The listener left while subscribed: its connection is closed, not handed to the next client.
    wait_for(lambda: psql(t.port, "select count(*) from pg_listening_channels()").stdout.strip() == "0",
             "the next client's connection listens to nothing", timeout=10)


@test
def each_client_keeps_its_own_parameters_on_a_shared_connection(ctx):
    t = ctx.tern(pool_mode="transaction", pool_size=1)
    a, b = Wire(t.port), Wire(t.port)
    try:
        a.login("postgres", params={"application_name": "app_a", "DateStyle": "SQL, DMY"})
        b.login("postgres", params={"application_name": "app_b"})
        check(a.params.get("DateStyle") == "SQL, DMY" and a.params.get("application_name") == "app_a",
              "the welcome reports what the client asked for: %r" % a.params)
        b.query("set timezone = 'Asia/Tokyo'")
        check(b.params.get("TimeZone") == "Asia/Tokyo", "the client sees its own SET reported")
        for _ in range(3):  # one server connection, taken in turn
            check(a.query("select current_setting('application_name'), current_setting('DateStyle'), "
                          "current_setting('TimeZone') <> 'Asia/Tokyo'") == [["app_a", "SQL, DMY", "t"]],
                  "a's settings on the shared connection")
            check(b.query("select current_setting('application_name'), current_setting('DateStyle'), "
                          "current_setting('TimeZone')") == [["app_b", "ISO, MDY", "Asia/Tokyo"]],
                  "b's settings on the shared connection")
            check(a.query("select application_name from pg_stat_activity where pid = pg_backend_pid()")
                  == [["app_a"]], "the server shows the client's application_name")
        b.query("begin; set datestyle = 'German'; rollback")
        check(b.query("select current_setting('DateStyle')") == [["ISO, MDY"]], "a rolled-back SET is not kept")
        check("DateStyle" in b.params and b.params["DateStyle"] == "ISO, MDY", "and the client was told")
    finally:
        a.close()
        b.close()


@test
def each_client_keeps_its_own_search_path_on_a_shared_connection(ctx):
    psql_ok(ctx.pg.primary_port, "drop schema if exists sp_a cascade; create schema sp_a; "
            "create table sp_a.which(v text); insert into sp_a.which values ('a'); "
            "drop table if exists public.which; create table public.which(v text); "
            "insert into public.which values ('public')")
    t = ctx.tern(pool_mode="transaction", pool_size=1)
    a, b = Wire(t.port), Wire(t.port)
    try:
        a.login("postgres")
        b.login("postgres")
        a.query("set search_path = sp_a, public")
        for _ in range(3):  # one server connection, taken in turn
            check(a.query("select v from which") == [["a"]], "a's search_path on the shared connection")
            check(b.query("select v from which") == [["public"]], "b's default search_path")
        b.query("begin; set search_path to sp_a; rollback")
        check(b.query("select v from which") == [["public"]], "a rolled-back SET search_path is not kept")
        try:
            b.query("set search_path to sp_a; select 1/0")
            check(False, "division by zero must fail")
        except WireError:
            pass
        check(b.query("select v from which") == [["public"]], "a SET in a failed implicit transaction is not kept")
        a.query("reset search_path")
        check(a.query("select v from which") == [["public"]], "RESET search_path")
        check(b.query("show search_path") == [['"$user", public']], "b sees the server's default")
    finally:
        a.close()
        b.close()


@test
def named_prepared_statements_need_no_free_server_to_prepare_and_run_on_any_connection(ctx):
    t = ctx.tern(pool_mode="transaction", pool_size=1)
    holder, a, b = Wire(t.port), Wire(t.port), Wire(t.port)
    try:
        for w in (holder, a, b):
            w.login("postgres")
        holder.query("begin")  # holds the only server connection
        # Preparing needs no server: tern answers while every connection is in a transaction.
        got = a.exchange(parse("add", "select $1::int + 1"), SYNC)
        check(got == ("1Z", [], None, "I"), "Parse+Sync answered with no free server: %r" % (got,))
        holder.query("commit")
        got = a.exchange(bind("add", ["41"]), execute(), SYNC)
        check(got == ("2DCZ", [["42"]], None, "I"), "the statement runs where the server connection is: %r" % (got,))
        # Another client's name for the same text uses the same server-side statement.
        check(b.exchange(parse("plus_one", "select $1::int + 1"), SYNC)[0] == "1Z", "b prepares")
        got = b.exchange(bind("plus_one", ["1"]), execute(), SYNC)
        check(got[1] == [["2"]], "b's statement runs: %r" % (got,))
        check(b.query("select count(*) from pg_prepared_statements") == [["1"]],
              "one server-side statement for one text")
        # Describe of a statement prepared nowhere yet goes to a server.
        a.exchange(parse("two", "select $1::text as t, 2 as n"), SYNC)
        got = a.exchange(describe("S", "two"), SYNC)
        check(got[0] == "tTZ" and got[2] is None, "Describe of a deferred statement: %r" % (got,))
        # A name in use is refused as PostgreSQL refuses it, and the rest of the batch is skipped.
        got = a.exchange(parse("add", "select 1"), bind("add", ["1"]), execute(), SYNC)
        check(got[0] == "EZ" and got[2] == "42P05", "duplicate name: 42P05: %r" % (got,))
        # Close forgets the client's name; the server keeps the statement for b.
        check(a.exchange(close("S", "add"), SYNC)[0] == "3Z", "Close answered")
        got = a.exchange(bind("add", ["1"]), execute(), SYNC)
        check(got[2] == "26000", "a closed statement does not exist: %r" % (got,))
        got = b.exchange(bind("plus_one", ["5"]), execute(), SYNC)
        check(got[1] == [["6"]], "b's statement survives a's Close: %r" % (got,))
        # A deferred Parse of bad SQL fails at its first use, with the server's error.
        check(a.exchange(parse("bad", "selec 1"), SYNC)[0] == "1Z", "deferred Parse")
        got = a.exchange(bind("bad"), execute(), SYNC)
        check(got[0] == "EZ" and got[2] == "42601", "the syntax error at first use: %r" % (got,))
        # In a transaction the Parse goes to the server at once: the error comes at the Parse, and the
        # name stays free, as in PostgreSQL.
        a.query("begin")
        got = a.exchange(parse("bad2", "selec 1"), SYNC)
        check(got[0] == "EZ" and got[2] == "42601" and got[3] == "E", "error at Parse in a transaction: %r" % (got,))
        a.query("rollback")
        got = a.exchange(parse("bad2", "select 7"), bind("bad2"), execute(), SYNC)
        check(got == ("12DCZ", [["7"]], None, "I"), "the name is free after a failed Parse: %r" % (got,))
        # An error in a pipelined batch skips the rest of it, tern's made-up replies too.
        got = a.exchange(bind("two", ["x"]), execute(), parse("later", "select 1"), bind("later"), execute(), SYNC,
                         bind("later"), execute(), SYNC)
        check(got == ("2DC12DCZ", [["x", "2"], ["1"]], None, "I"), "a pipelined batch: %r" % (got,))
        got = a.exchange()  # the second Sync's replies
        check(got == ("2DCZ", [["1"]], None, "I"), "the second batch: %r" % (got,))
        got = a.exchange(bind("nonexistent"), execute(), parse("skipped", "select 2"), SYNC)
        check(got[0] == "EZ", "the Parse after the error is skipped: %r" % (got,))
        got = a.exchange(parse("skipped", "select 2"), bind("skipped"), execute(), SYNC)
        check(got[1] == [["2"]] and got[2] is None, "and its name was never taken: %r" % (got,))
        # Unnamed statements pass through.
        got = a.exchange(parse("", "select 3"), bind(""), execute(), SYNC)
        check(got == ("12DCZ", [["3"]], None, "I"), "unnamed statement: %r" % (got,))
        # SQL DEALLOCATE of a protocol-level statement, as psycopg sends it, is answered by tern.
        a.exchange(parse("Gone", "select 4"), SYNC)
        got = a.exchange(parse("", 'deallocate prepare "Gone"'), bind(""), describe("P", ""), execute(), SYNC)
        check(got == ("12nCZ", [], None, "I"), "DEALLOCATE of the client's statement: %r" % (got,))
        check(a.exchange(bind("Gone"), execute(), SYNC)[2] == "26000", "and the statement is gone")
        got = a.exchange(parse("", "deallocate nothing_here"), bind(""), execute(), SYNC)
        check(got[2] == "26000", "DEALLOCATE of another name goes to the server: %r" % (got,))
    finally:
        for w in (holder, a, b):
            w.close()


@test
def max_prepared_statements_bounds_each_connection_least_recently_used_out(ctx):
    t = ctx.tern(pool_mode="transaction", pool_size=1, sections={"pool": "max_prepared_statements = 2"})
    with Wire(t.port) as w:
        w.login("postgres")
        for i in range(4):
            check(w.exchange(parse("s%d" % i, "select %d + $1::int" % i), SYNC)[0] == "1Z", "prepare s%d" % i)
        for _ in range(3):
            for i in (0, 1, 2, 3, 1, 0):
                got = w.exchange(bind("s%d" % i, ["10"]), execute(), SYNC)
                check(got == ("2DCZ", [[str(10 + i)]], None, "I"), "s%d runs: %r" % (i, got))
        check(w.query("select count(*) from pg_prepared_statements") == [["2"]],
              "the connection holds at most max_prepared_statements")


@test
def max_prepared_statements_0_passes_named_statements_through_unchanged(ctx):
    t = ctx.tern(pool_mode="transaction", pool_size=1, sections={"pool": "max_prepared_statements = 0"})
    with Wire(t.port) as w:
        w.login("postgres")
        got = w.exchange(parse("mine", "select 6"), bind("mine"), execute(), SYNC)
        check(got == ("12DCZ", [["6"]], None, "I"), "the server's own answers: %r" % (got,))
        check(w.query("select name from pg_prepared_statements") == [["mine"]],
              "the server holds the client's name, not tern's")


@test
def sql_prepare_pins_the_client_to_its_connection_until_deallocate_all(ctx):
    t = ctx.tern(pool_mode="transaction", pool_size=1, sections={"pool": "query_wait_timeout = 0.5"})
    with Wire(t.port) as a:
        a.login("postgres")
        a.query("prepare p(int) as select $1 * 2")
        check(a.query("execute p(21)") == [["42"]], "EXECUTE after PREPARE")
        with Wire(t.port) as waiter:
            waiter.login("postgres")
            waiter.send(message(b"Q", b"select 1\0"))
            fields = waiter.expect_error_and_close()
            check(fields and fields["C"] == "08P01", "the pinned connection is not shared: %r" % fields)
        check(a.query("execute p(4)") == [["8"]], "still there")
        a.query("deallocate all")
        check(psql_ok(t.port, "select 5") == "5", "after DEALLOCATE ALL the connection is shared again")
        try:
            a.query("execute p(1)")
            check(False, "EXECUTE after DEALLOCATE ALL must fail")
        except WireError as e:
            check(e.sqlstate == "26000", "26000 after DEALLOCATE ALL: %s" % e)


def q(sql):
    return message(b"Q", sql.encode() + b"\0")


def read_until(w, kind):
    """The reply types up to and including the first of `kind`."""
    kinds = ""
    while True:
        m = w.read_message()
        if m is None:
            return kinds + "<EOF>"
        kinds += m[0].decode()
        if m[0] == kind:
            return kinds


def read_n_ready(w, n):
    """Reply types and SQLSTATEs up to the n-th ReadyForQuery; "<hang>" when one does not come in 3 s."""
    kinds, errs = "", []
    w.sock.settimeout(3)
    for _ in range(n):
        while True:
            try:
                m = w.read_message()
            except TimeoutError:
                w.sock.settimeout(15)
                return kinds + "<hang>", errs
            if m is None:
                return kinds + "<EOF>", errs
            kinds += m[0].decode()
            if m[0] == b"E":
                errs.append(dict((chr(p[0]), p[1:].decode()) for p in m[1].split(b"\0") if p).get("C"))
            if m[0] == b"Z":
                break
    w.sock.settimeout(15)
    return kinds, errs


@test
def prepared_an_error_before_the_clients_sync_skips_what_it_sends_next(ctx):
    t = ctx.tern(pool_size=1)
    with Wire(t.port) as w:
        w.login("postgres")
        w.send(parse("", "select 1/0") + bind("") + execute() + FLUSH)
        got = read_until(w, b"E")
        print("  first write:", got)
        # PostgreSQL skips these until the Sync and answers only ReadyForQuery.
        try:
            got = w.exchange(describe("P", ""), close("P", ""), SYNC)
        except Exception as e:  # noqa: BLE001
            got = repr(e)
        print("  second write:", got)
        try:
            after = w.exchange(parse("", "select 5"), bind(""), execute(), SYNC)
        except Exception as e:  # noqa: BLE001
            after = repr(e)
        print("  next batch:", after)
        print("  tern log:", [l for l in t.log_tail(5).splitlines() if "WARNING" in l])
        check(after == ("12DCZ", [["5"]], None, "I"), "the session goes on: %r" % (after,))


@test
def prepared_a_name_in_use_fails_the_servers_batch_and_transaction_as_postgresql_does(ctx):
    psql_ok(ctx.pg.primary_port, "drop table if exists dup_t; create table dup_t(v int)")
    t = ctx.tern(pool_size=1)
    outcomes = {}
    for label, port in (("postgresql", ctx.pg.primary_port), ("tern", t.port)):
        with Wire(port) as w:
            w.login("postgres")
            check(w.exchange(parse("dup", "select 1"), SYNC)[0] == "1Z", "the first Parse")
            # The INSERT before the refused Parse is rolled back with the implicit transaction.
            batch = w.exchange(parse("", "insert into dup_t values (1)"), bind(""), execute(),
                               parse("dup", "select 2"), bind("dup"), execute(), SYNC)
            w.query("begin")
            w.query("insert into dup_t values (2)")
            in_block = w.exchange(parse("dup", "select 3"), SYNC)  # fails the transaction block
            after = w.exchange(bind("dup"), execute(), SYNC)      # 25P02 until ROLLBACK
            w.query("rollback")
            still = w.exchange(bind("dup"), execute(), SYNC)
            rows = psql_ok(ctx.pg.primary_port, "select count(*) from dup_t")
            outcomes[label] = (batch, in_block, after, still, rows)
    check(outcomes["tern"] == outcomes["postgresql"], "tern answers as PostgreSQL: %r" % (outcomes,))
    check(outcomes["tern"][0][2] == "42P05" and outcomes["tern"][4] == "0", "nothing committed: %r" % (outcomes,))


def replies(w, data, readies):
    """Sends data; the replies up to the readies-th ReadyForQuery, each as a short text: the type, with
    the SQLSTATE of an error, the values of a row, the status of a ReadyForQuery."""
    w.send(data)
    out = []
    while readies > 0:
        msg = w.read_message()
        if msg is None:
            return out + ["<EOF>"]
        kind, body = msg[0].decode(), msg[1]
        if kind == "E":
            kind += "(%s)" % error_fields(body).get("C")
        elif kind == "D":
            kind += repr(data_row(body))
        elif kind == "Z":
            kind += "(%s)" % body.decode()
            readies -= 1
        elif kind in "SN":
            continue  # ParameterStatus and notices differ between a server and tern by design
        out.append(kind)
    return out


@test
def prepared_pipelined_name_refusals_and_deallocate_all_answer_as_postgresql_does(ctx):
    # Found in review: each scenario once gave replies (or committed rows) PostgreSQL would not.
    psql_ok(ctx.pg.primary_port, "drop table if exists dup_q; create table dup_q(v int)")
    Q = q
    scenarios = {
        "a name in use behind a queued BEGIN and INSERT; COMMIT": [
            (parse("dup", "select 1") + SYNC, 1),
            (Q("BEGIN") + Q("insert into dup_q values (1)") + parse("dup", "select 2") + SYNC, 3),
            (Q("COMMIT"), 1), (Q("select count(*) from dup_q"), 1), (Q("truncate dup_q"), 1)],
        "a name in use in a failed transaction block": [
            (parse("dup", "select 1") + SYNC, 1), (Q("BEGIN"), 1), (Q("select 1/0"), 1),
            (parse("dup", "select 2") + SYNC, 1), (Q("ROLLBACK"), 1)],
        "DEALLOCATE ALL, then the same name again, in one write": [
            (parse("a", "select 1") + SYNC, 1),
            (Q("DEALLOCATE ALL") + parse("a", "select 2") + bind("a") + execute() + SYNC, 2),
            (bind("a") + execute() + SYNC, 1)],
        "in a block, DEALLOCATE ALL, then a new name for a text the connection had": [
            (parse("c", "select 11") + bind("c") + execute() + SYNC, 1), (Q("BEGIN"), 1),
            (Q("DEALLOCATE ALL") + parse("b", "select 11") + bind("b") + execute() + SYNC, 2), (Q("COMMIT"), 1)],
        "DEALLOCATE ALL through Parse/Bind/Execute with names behind it": [
            (parse("a", "select 1") + SYNC, 1),
            (parse("", "DEALLOCATE ALL") + bind("") + execute() + parse("b", "select 3") + SYNC, 1),
            (bind("a") + execute() + SYNC, 1), (bind("b") + execute() + SYNC, 1),
            (parse("", "DEALLOCATE ALL") + bind("") + execute() + parse("b", "select 4") + bind("b") + execute()
             + SYNC, 1)],
    }
    t = ctx.tern(pool_size=1)
    for label, steps in scenarios.items():
        seen = {}
        for who, port in (("postgresql", ctx.pg.primary_port), ("tern", t.port)):
            with Wire(port) as w:
                w.login("postgres")
                seen[who] = [replies(w, data, readies) for data, readies in steps]
        check(seen["tern"] == seen["postgresql"], "%s: %r" % (label, seen))


@test
def search_path_is_not_asked_for_after_a_set_local_that_cannot_change_it(ctx):
    t = ctx.tern(pool_size=1)
    with Wire(t.port) as w:
        w.login("postgres")
        pid = w.query("select pg_backend_pid()")[0][0]
        last = lambda: ctx.pg.psql("select query from pg_stat_activity where pid = %s" % pid)
        for send in (lambda sql: w.query(sql), lambda sql: w.exchange(parse("", sql), bind(""), execute(), SYNC)):
            send("begin")
            send("set local statement_timeout = '5s'")  # as row-level-security apps do in every transaction
            send("commit")
            check(last() == "commit", "no hidden SHOW after SET LOCAL: %r" % last())
        w.exchange(parse("", "set search_path to public"), bind(""), execute(), SYNC)
        wait_for(lambda: last() == "SHOW search_path", "a SET naming search_path is followed")


@test
def search_path_set_by_a_statement_prepared_earlier_does_not_leak(ctx):
    # Found in review: the Execute of a statement prepared in an earlier batch carries no text to read.
    psql_ok(ctx.pg.primary_port, "create schema if not exists tenant_a")
    t = ctx.tern(pool_size=1)
    for name in ("set_tenant", ""):  # a named statement, and the unnamed one kept across a Sync
        with Wire(t.port) as a:
            a.login("postgres")
            # Then nothing is in flight: tern's reading of the batch's texts starts afresh.
            check(a.exchange(parse(name, "SET search_path TO tenant_a"), SYNC)[0] == "1Z", "prepared")
            got = a.exchange(bind(name), execute(), SYNC)
            check(got[0] == "2CZ", "%r run later: %r" % (name, got))
            check(a.query("show search_path") == [["tenant_a"]], "a has its own")
        with Wire(t.port) as b:
            b.login("postgres")
            got = b.query("show search_path")
            check(got == [['"$user", public']], "%r statement: b keeps the default: %r" % (name, got))


@test
def search_path_learned_at_a_clients_exit_keeps_its_connection_in_the_pool(ctx):
    # Found in review: the hidden SHOW search_path in flight when the client left had its connection closed.
    t = ctx.tern(pool_size=1)
    pids = set()
    for i in range(8):
        with Wire(t.port) as w:
            w.login("postgres")
            pids.add(w.query("select pg_backend_pid()")[0][0])
            w.exchange(parse("", "set search_path to public"), bind(""), execute(), SYNC)
            w.send(message(b"X"))
    check(len(pids) == 1, "one server connection serves them all: %r" % pids)


@test
def prepared_deallocate_all_forgets_only_the_statements_sent_before_it(ctx):
    t = ctx.tern(pool_size=1)
    with Wire(t.port) as w:
        w.login("postgres")
        check(w.exchange(parse("old", "select 1"), SYNC)[0] == "1Z", "a statement before")
        # One write: DEALLOCATE ALL, then a Parse the client expects to survive it.
        w.send(q("deallocate all") + parse("kept", "select 41 + 1") + SYNC)
        kinds, errs = read_n_ready(w, 2)
        check(kinds == "CZ1Z" and not errs, "both answered: %r" % ((kinds, errs),))
        got = w.exchange(bind("kept"), execute(), SYNC)
        check(got == ("2DCZ", [["42"]], None, "I"), "the later statement stays: %r" % (got,))
        got = w.exchange(bind("old"), execute(), SYNC)
        check(got[2] == "26000", "the earlier one is gone: %r" % (got,))


@test
def prepared_a_deferred_parse_never_runs_ahead_of_earlier_pipelined_messages(ctx):
    psql_ok(ctx.pg.primary_port, "drop table if exists rv_new; drop table if exists rv_log; create table rv_log(v int)")
    t = ctx.tern(pool_size=1)
    with Wire(t.port) as w:
        w.login("postgres")
        w.query("select 1")  # connection released afterwards
        w.send(q("create table rv_new(v int)") + parse("s2", "select count(*) from rv_new") + bind("s2") +
               execute() + SYNC)
        got = read_n_ready(w, 2)
        print("  Query(CREATE) + Parse/Bind/Execute/Sync:", got)
    with Wire(t.port) as w:
        w.login("postgres")
        exists = w.query("select count(*) from pg_tables where tablename = 'rv_new'")
        print("  rv_new exists:", exists)
        # Two pipelined batches: the second one's statement is bad; batch 1 (an INSERT) must still run.
        w.send(parse("bad", "select nope from rv_log"))
        w.send(parse("", "insert into rv_log values (1)") + bind("") + execute() + SYNC +
               bind("bad") + execute() + SYNC)
        got2 = read_n_ready(w, 2)
        print("  batch1 INSERT, batch2 bad stmt:", got2)
        logged = w.query("select count(*) from rv_log")
        print("  rows in rv_log:", logged)
        check(got[0].startswith("CZ12") and exists == [["1"]], "the CREATE runs before the Parse: %r" % (got,))
        check(logged == [["1"]], "batch 1's INSERT ran")


@test
def prepared_a_skipped_eviction_close_does_not_break_the_statement(ctx):
    t = ctx.tern(pool_size=1, sections={"pool": "max_prepared_statements = 1"})
    with Wire(t.port) as w:
        w.login("postgres")
        check(w.exchange(parse("a", "select 'a'"), bind("a"), execute(), SYNC)[1] == [["a"]], "a runs")
        w.query("begin")
        got = w.exchange(parse("", "select 1/0"), bind(""), execute(), parse("b", "select 'b'"), SYNC)
        print("  error then Parse b (evicts a):", got)
        w.query("rollback")
        for i in range(2):
            got = w.exchange(bind("a"), execute(), SYNC)
            print("  bind a #%d:" % i, got)
        check(got[1] == [["a"]] and got[2] is None, "a still runs: %r" % (got,))


@test
def prepared_a_skipped_parse_forgets_only_its_own_statement(ctx):
    t = ctx.tern(pool_size=1)
    with Wire(t.port) as w:
        w.login("postgres")
        w.query("begin")
        got = w.exchange(parse("", "select 1/0"), bind(""), execute(), parse("s1", "select 'one'"), close("S", "s1"),
                         parse("s1", "select 'two'"), SYNC)
        print("  error, Parse s1, Close s1, Parse s1:", got)
        w.query("rollback")
        got = w.exchange(parse("x", "select 'one'"), bind("x"), execute(), SYNC)
        print("  Parse x (same text as the skipped Parse) + Bind x:", got)
        check(got[1] == [["one"]], "x runs: %r" % (got,))


@test
def search_path_set_in_a_transaction_block_does_not_leak_to_the_next_client(ctx):
    psql_ok(ctx.pg.primary_port, "create schema if not exists sp_r")
    t = ctx.tern(pool_size=1)
    a, b = Wire(t.port), Wire(t.port)
    try:
        a.login("postgres")
        b.login("postgres")
        a.query("begin")
        a.query("set search_path to sp_r")
        a.query("commit")
        seen_b = b.query("show search_path")
        print("  b after a's committed SET in a transaction:", seen_b)
        check(seen_b == [['"$user", public']], "b keeps the default")
    finally:
        a.close()
        b.close()


@test
def search_path_set_through_the_extended_protocol_does_not_leak(ctx):
    psql_ok(ctx.pg.primary_port, "create schema if not exists sp_r")
    t = ctx.tern(pool_size=1)
    a, b = Wire(t.port), Wire(t.port)
    try:
        a.login("postgres")
        b.login("postgres")
        print("  a SET via Parse/Bind/Execute:", a.exchange(parse("", "set search_path to sp_r"), bind(""), execute(), SYNC))
        seen_b = b.query("show search_path")
        print("  b sees:", seen_b)
        check(seen_b == [['"$user", public']], "b keeps the default")
    finally:
        a.close()
        b.close()


@test
def search_path_a_client_set_where_tern_cannot_read_it_follows_the_client(ctx):
    psql_ok(ctx.pg.primary_port, "create schema if not exists sp_x; create schema if not exists sp_y; "
            "create schema if not exists sp_z")
    t = ctx.tern(pool_size=1)
    a, b = Wire(t.port), Wire(t.port)
    try:
        a.login("postgres")
        b.login("postgres")

        def a_sees_after_b_used_the_connection():
            b.query("set search_path to public")  # the one connection now has b's value
            return a.query("show search_path")[0][0]

        # Through the extended protocol (JDBC's setSchema does this).
        got = a.exchange(parse("", "set search_path to sp_x"), bind(""), execute(), SYNC)
        check(got[0] == "12CZ", "SET through Parse/Bind/Execute: %r" % (got,))
        check(a_sees_after_b_used_the_connection() == "sp_x", "a keeps sp_x")
        # Two SETs in one query: the second is the one in effect.
        a.query("set search_path to sp_y; set search_path to sp_z")
        check(a_sees_after_b_used_the_connection() == "sp_z", "a keeps sp_z")
        # Inside a transaction block that commits, and one that rolls back.
        a.query("begin")
        a.query("set search_path to sp_x")
        a.query("commit")
        check(a_sees_after_b_used_the_connection() == "sp_x", "a keeps the committed sp_x")
        a.query("begin")
        a.query("set search_path to sp_y")
        a.query("rollback")
        check(a_sees_after_b_used_the_connection() == "sp_x", "a rolled sp_y back")
        # An empty search_path survives the round trip through SHOW.
        a.exchange(parse("", "set search_path to ''"), bind(""), execute(), SYNC)
        check(a_sees_after_b_used_the_connection() == '""', "a keeps the empty list")
        check(b.query("show search_path") == [["public"]], "b kept its own throughout")
    finally:
        a.close()
        b.close()


@test
def prepared_a_batch_using_more_statements_than_max_prepared_statements(ctx):
    t = ctx.tern(pool_size=1, sections={"pool": "max_prepared_statements = 1"})
    with Wire(t.port) as w:
        w.login("postgres")
        w.exchange(parse("a", "select 'a'"), parse("b", "select 'b'"), SYNC)
        got = w.exchange(bind("a"), execute(), bind("b"), execute(), SYNC)
        print("  one batch using a and b:", got)
        for i in range(3):
            got = w.exchange(bind("b"), execute(), SYNC)
            print("  bind b #%d:" % i, got)
        print("  server holds:", w.query("select count(*) from pg_prepared_statements"))
        check(got[1] == [["b"]], "b runs: %r" % (got,))


@test
def prepared_describe_suspend_empty_notice_and_copy_replies_stay_in_order(ctx):
    psql_ok(ctx.pg.primary_port, "drop table if exists rv_c; create table rv_c(v int)")
    t = ctx.tern(pool_size=1)
    with Wire(t.port) as w:
        w.login("postgres")
        w.exchange(parse("g", "select generate_series(1, $1::int)"), parse("e", ""),
                   parse("n", "do $$begin raise notice 'hi'; end$$"), parse("c", "copy rv_c from stdin"), SYNC)
        got = w.exchange(describe("S", "g"), bind("g", ["3"], portal="p"), describe("P", "p"), execute("p", 2),
                         execute("p", 2), close("P", "p"), bind("e"), execute(), bind("n"), execute(), SYNC)
        print("  describe/suspend/empty/notice:", got)
        check(got[0] == "tT2TDDsDC3" "2I" "2NCZ", "replies in order: %r" % (got,))
        w.send(bind("c") + execute() + SYNC)
        print("  copy in:", read_until(w, b"G"))
        got = w.exchange(message(b"d", b"1\n2\n"), message(b"c"), SYNC)
        print("  copy done:", got)
        check(got[0] == "CZ" and w.query("select count(*) from rv_c") == [["2"]], "copy in: %r" % (got,))
        w.send(bind("c") + execute() + SYNC)
        read_until(w, b"G")
        w.send(message(b"f", b"nope\0") + SYNC)
        print("  copy fail:", read_n_ready(w, 1))
        got = w.exchange(bind("g", ["1"]), execute(), SYNC)
        check(got[1] == [["1"]], "after CopyFail: %r" % (got,))


@test
def pgbench_prepared_tpcb_with_64_clients_on_a_pool_of_20(ctx):
    baseline = server_connections(ctx.pg)  # earlier tests' connections may still be on their way out
    t = ctx.tern(pool_mode="transaction", pool_size=20)
    pgbench(t.port, ["-i", "-s", "1", "-q"])
    peak, done = [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], server_connections(ctx.pg))
            done.wait(0.2)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for args in (["-M", "prepared"], ["-S", "-M", "prepared"]):
            out = pgbench(t.port, ["-n", "-c", "64", "-j", "2", "-T", "5"] + args, timeout=90)
            processed, failed = pgbench_summary(out)
            check(processed and processed > 100, "pgbench %s processed %r" % (args, processed))
            check(failed in (0, None), "pgbench %s: %r failed transactions" % (args, failed))
    finally:
        done.set()
        sampler.join(10)
    check(peak[0] - baseline <= 20, "never more than pool_size server connections (peak %d, %d before)"
          % (peak[0], baseline))


@test
def the_admin_console_shows_pools_servers_config_and_shuts_down(ctx):
    port = free_port()
    config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 2\npool_mode = transaction\n[servers]\n"
              "primary = host=127.0.0.1 port=%d\n[pool]\npool_size = 3\n[admin]\nadmin_users = ops, postgres\n"
              % (port, ctx.pg.primary_port))
    t = TernProcess(TERN, config)
    ctx.terns.append(t)
    t.start()
    holder = Wire(t.port)
    holder.login("postgres")
    holder.query("begin")  # one server connection in use
    try:
        admin = lambda sql: psql_ok(t.port, sql, dbname="tern")
        check(admin("show version") == "tern 0.1.0", "SHOW VERSION")
        config_rows = dict(line.split("|")[:2] for line in admin("show config").splitlines())
        check(config_rows.get("pool_size") == "3" and config_rows.get("pool_mode") == "transaction",
              "SHOW CONFIG: %r" % config_rows)
        pools = [line.split("|") for line in admin("SHOW POOLS;").splitlines()]
        row = [p for p in pools if p[0] == "postgres" and p[1] == "postgres"]
        check(len(row) == 1 and row[0][6] == "1" and row[0][15] == "transaction",
              "SHOW POOLS: one active server for postgres/postgres: %r" % pools)
        servers = [line.split("|") for line in admin("show servers").splitlines()]
        check(any(r[3] == "active" and r[2] == "postgres" for r in servers), "SHOW SERVERS: %r" % servers)
        # SHOW CLIENTS's link is the ptr of the server row its client holds, and the other way round.
        clients = [line.split("|") for line in admin("show clients").splitlines()]
        holder_row = [c for c in clients if c[3] == "active" and c[2] == "postgres" and c[14]]
        check(len(holder_row) == 1, "the holder's client row: %r" % clients)
        server_row = [r for r in servers if r[13] == holder_row[0][14]]
        check(len(server_row) == 1 and server_row[0][14] == holder_row[0][13], "link <-> ptr: %r %r" % (holder_row, servers))
        r = psql(t.port, "show nonsense", dbname="tern")
        check(r.returncode != 0 and "unknown admin command" in r.stderr, "unknown command: %r" % r.stderr)
        expect_login_refused(t.port, "alice", "28000", database="tern")
        check(holder.query("select 1") == [["1"]], "the console touched no client")
        psql(t.port, "shutdown", dbname="tern")
        fields = holder.expect_error_and_close()
        check(fields and fields["C"] == "57P01", "SHUTDOWN ends every session: %r" % fields)
        t.proc.wait(timeout=10)
        check(t.proc.returncode == 0, "tern exits 0 after SHUTDOWN")
    finally:
        holder.close()


@test
def sighup_applies_reloadable_keys_and_names_the_ones_that_need_a_restart(ctx):
    port = free_port()
    template = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = %%d\npool_mode = transaction\n[servers]\n"
                "primary = host=127.0.0.1 port=%d\n[pool]\npool_size = %%d\n[admin]\nadmin_users = postgres\n"
                % (port, ctx.pg.primary_port))
    t = TernProcess(TERN, template % (2, 3))
    ctx.terns.append(t)
    t.start()
    show = lambda: dict(line.split("|")[:2] for line in psql_ok(t.port, "show config", dbname="tern").splitlines())
    check(show()["pool_size"] == "3", "pool_size before")
    with open(os.path.join(t.workdir, "tern.ini"), "w") as f:
        f.write(template % (1, 7))
    t.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: show()["pool_size"] == "7", "pool_size reloaded", timeout=10)
    check(show()["workers"] == "2", "workers keeps its running value")
    wait_for(lambda: "[tern] workers changed to 1; it needs a restart" in t.log_tail(50), "the log names it")
    with open(os.path.join(t.workdir, "tern.ini"), "w") as f:
        f.write(template % (2, 7) + "[pool]\npool_sise = 9\n")
    t.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "pool_sise" in t.log_tail(50) and "nothing changed" in t.log_tail(50), "a bad file is refused")
    check(show()["pool_size"] == "7", "the running configuration stays")
    check(psql_ok(t.port, "select 1") == "1", "clients are served throughout")


def admin_tern(ctx, pool_size=2, pool=""):
    """A tern whose admin console is open to postgres, with two workers (so every SHOW that gathers
    from the workers gathers from more than the one it runs on)."""
    return ctx.tern(pool_mode="transaction", pool_size=pool_size, workers=2, sections={"pool": pool},
                    extra="[admin]\nadmin_users = postgres")


def admin_console(port):
    w = Wire(port)
    w.login("postgres", database="tern")
    return w


def admin_table(w, sql):
    """(column names, rows as dicts) of an admin SHOW."""
    w.send(message(b"Q", sql.encode() + b"\0"))
    names, rows = [], []
    for kind, body in w.read_until_ready():
        if kind == b"T":
            (count,) = struct.unpack("!H", body[:2])
            offset = 2
            for _ in range(count):
                end = body.index(b"\0", offset)
                names.append(body[offset:end].decode())
                offset = end + 1 + 18
        elif kind == b"D":
            (count,) = struct.unpack("!H", body[:2])
            offset, row = 2, []
            for _ in range(count):
                (length,) = struct.unpack("!i", body[offset:offset + 4])
                row.append(body[offset + 4:offset + 4 + length].decode())
                offset += 4 + length
            rows.append(dict(zip(names, row)))
    return names, rows


def admin_command(w, sql):
    """Sends an admin command and returns its CommandComplete tag; raises WireError for an error."""
    w.send(message(b"Q", sql.encode() + b"\0"))
    tags = [body[:-1].decode() for kind, body in w.read_until_ready() if kind == b"C"]
    return tags[-1] if tags else None


def in_thread(fn):
    """Runs fn in a thread; returns (thread, box) where box holds its result or its exception."""
    box = {}

    def run():
        try:
            box["result"] = fn()
        except Exception as exc:  # reported by the test that joins
            box["error"] = exc

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, box


PGBOUNCER_CLIENT_COLUMNS = ["type", "user", "database", "state", "addr", "port", "local_addr", "local_port",
                            "connect_time", "request_time", "wait", "wait_us", "close_needed", "ptr", "link",
                            "remote_pid", "tls", "application_name"]
PGBOUNCER_STATS_COLUMNS = ["database", "total_xact_count", "total_query_count", "total_received", "total_sent",
                           "total_xact_time", "total_query_time", "total_wait_time", "avg_xact_count",
                           "avg_query_count", "avg_recv", "avg_sent", "avg_xact_time", "avg_query_time",
                           "avg_wait_time"]


@test
def admin_show_clients_lists_every_worker_s_clients_with_user_database_and_state(ctx):
    t = admin_tern(ctx, pool_size=1)
    idle = [Wire(t.port) for _ in range(6)]  # enough that both workers have some
    holder, waiter = Wire(t.port), Wire(t.port)
    console = admin_console(t.port)
    try:
        for i, w in enumerate(idle):
            w.login("postgres", params={"application_name": "idle_%d" % i})
        holder.login("postgres", params={"application_name": "holder"})
        waiter.login("postgres", params={"application_name": "waiter"})
        holder.query("begin")  # holds the only server connection
        waiter.send(message(b"Q", b"select 1\0"))  # waits for it
        by_app = {}

        def waiter_waits():
            names, rows = admin_table(console, "SHOW CLIENTS")
            check(names == PGBOUNCER_CLIENT_COLUMNS, "PgBouncer's columns, in its order: %r" % names)
            by_app.clear()
            by_app.update({r["application_name"]: r for r in rows})
            return by_app.get("waiter", {}).get("state") == "waiting"

        wait_for(waiter_waits, "the waiting client shown as waiting", timeout=10)
        for i, w in enumerate(idle):
            row = by_app.get("idle_%d" % i)
            check(row and row["state"] == "idle" and row["user"] == "postgres" and row["database"] == "postgres",
                  "idle client %d: %r" % (i, row))
            check(row["type"] == "C" and row["addr"] == "127.0.0.1" and row["port"] == str(w.sock.getsockname()[1])
                  and row["local_port"] == str(t.port) and row["link"] == "", "idle client %d's addresses: %r" % (i, row))
            check(re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$", row["connect_time"]), "connect_time: %r" % row)
        row = by_app["holder"]
        check(row["state"] == "active" and row["link"] != "" and row["ptr"] != "", "the holder is active: %r" % row)
        row = by_app["waiter"]
        check(row["wait"].isdigit() and row["wait_us"].isdigit(), "the waiter's wait: %r" % row)
        consoles = [r for r in by_app.values() if r["database"] == "tern"]
        check(len(consoles) == 1 and consoles[0]["state"] == "active", "the console itself: %r" % consoles)
        check(len(by_app) == 9, "every client once: %r" % sorted(by_app))
        holder.query("commit")
        check(waiter.read_until_ready() and True, "the waiter runs once the holder commits")
        idle[0].close()
        wait_for(lambda: "idle_0" not in {r["application_name"] for r in admin_table(console, "show clients")[1]},
                 "a client that left is no longer listed", timeout=10)
    finally:
        for w in idle + [holder, waiter, console]:
            w.close()


@test
def admin_show_stats_counts_transactions_bytes_and_waits_per_database(ctx):
    t = admin_tern(ctx, pool_size=1)
    for i in range(3):  # clients that come and go: their counts outlive them
        check(psql_ok(t.port, "select %d" % i) == str(i), "psql %d" % i)
    holder, waiter = Wire(t.port), Wire(t.port)
    console = admin_console(t.port)
    try:
        holder.login("postgres")
        waiter.login("postgres")
        for i in range(5):  # a client that stays
            check(waiter.query("select %d" % i) == [[str(i)]], "query %d" % i)
        holder.query("begin")
        waiter.send(message(b"Q", b"select 'waited'\0"))
        wait_for(lambda: any(r["application_name"] == "" and r["state"] == "waiting"
                             for r in admin_table(console, "show clients")[1]), "a client waits", timeout=10)
        holder.query("commit")
        check(waiter.query_rows_after_send(), "the waiting client ran")
        names, rows = admin_table(console, "SHOW STATS")
        check(names == PGBOUNCER_STATS_COLUMNS, "PgBouncer's columns, in its order: %r" % names)
        row = [r for r in rows if r["database"] == "postgres"]
        check(len(row) == 1, "one row for postgres, summed over the workers: %r" % rows)
        row = row[0]
        # 3 psql sessions, 5 + 1 queries of the staying client, the holder's transaction.
        check(int(row["total_xact_count"]) >= 10, "transactions counted: %r" % row)
        check(int(row["total_query_count"]) >= 10 and int(row["total_query_time"]) > 0, "queries counted: %r" % row)
        check(int(row["total_received"]) > 0 and int(row["total_sent"]) > 0, "bytes counted: %r" % row)
        check(int(row["total_xact_time"]) > 0, "transaction time counted: %r" % row)
        check(int(row["total_wait_time"]) > 0, "the wait counted: %r" % row)
        before = int(row["total_xact_count"])
        check(waiter.query("select 1") == [["1"]], "one more")
        after = int([r for r in admin_table(console, "show stats")[1] if r["database"] == "postgres"][0]
                    ["total_xact_count"])
        check(after == before + 1, "one more transaction, one more count: %d then %d" % (before, after))
    finally:
        for w in (holder, waiter, console):
            w.close()


def row_description(port, sql, database):
    """(column name, type OID) of each column of `sql`'s answer on an admin console, and its tag."""
    with Wire(port) as w:
        w.login("postgres", database=database)
        w.send(message(b"Q", sql.encode() + b"\0"))
        columns, tag = [], None
        for kind, body in w.read_until_ready():
            if kind == b"T":
                (n,) = struct.unpack("!H", body[:2])
                at = 2
                for _ in range(n):
                    end = body.index(b"\0", at)
                    name = body[at:end].decode()
                    at = end + 1
                    (type_oid,) = struct.unpack("!I", body[at + 6:at + 10])
                    at += 18
                    columns.append((name, type_oid))
            elif kind == b"C":
                tag = body[:-1].decode()
        return columns, tag


@test
def the_admin_console_answers_pgbouncers_show_commands_with_its_columns_order_and_types(ctx):
    """Debian's PgBouncer beside tern: command by command, the same column names, order and types, so
    exporters and scripts written for PgBouncer read tern unchanged."""
    bouncer = PgBouncerProcess(ctx.pg.primary_port, 2, extra_settings=["admin_users = postgres"])
    bouncer.start()
    try:
        t = ctx.tern(extra="[admin]\nadmin_users = postgres\n")
        with Wire(t.port) as w, Wire(bouncer.port) as b:  # a client each, so every table has a row
            w.login("postgres")
            b.login("postgres")
            w.query("select 1")
            b.query("select 1")
            for command in ("SHOW POOLS", "SHOW SERVERS", "SHOW CLIENTS", "SHOW DATABASES", "SHOW LISTS",
                            "SHOW USERS", "SHOW STATS", "SHOW CONFIG", "SHOW VERSION", "SHOW HELP"):
                ours = row_description(t.port, command, "pgbouncer")
                theirs = row_description(bouncer.port, command, "pgbouncer")
                if command == "SHOW SERVERS":  # tern's own columns follow PgBouncer's: server, role, lag, LSN
                    extra = [c for c, _ in ours[0][len(theirs[0]):]]
                    check(extra == ["server", "role", "lag_bytes", "lsn"], "SHOW SERVERS adds %r" % extra)
                    ours = (ours[0][:len(theirs[0])], ours[1])
                check(ours == theirs, "%s: tern %r, PgBouncer %r" % (command, ours, theirs))
    finally:
        bouncer.stop()


@test
def admin_kill_disable_reconnect_wait_close_and_pause_of_one_database(ctx):
    auth_users(ctx)
    ctx.pg.psql("drop database if exists other")
    ctx.pg.psql("create database other")
    t = ctx.tern(extra="[admin]\nadmin_users = postgres\n", pool_size=2)
    admin = lambda sql: psql_ok(t.port, sql, dbname="pgbouncer")
    with Wire(t.port) as victim, Wire(t.port) as bystander:
        victim.login("postgres", database="other")
        bystander.login("postgres")
        before = backend_pid(bystander)
        # RECONNECT: the connections to postgres close as they are released; WAIT_CLOSE waits for that.
        check(admin("reconnect postgres") == "RECONNECT", "RECONNECT")
        check(admin("wait_close postgres") == "WAIT_CLOSE", "WAIT_CLOSE")
        check(backend_pid(bystander) != before, "a new server connection after RECONNECT")
        # PAUSE of one database holds its new transactions only.
        with Wire(t.port) as console:
            console.login("postgres", database="pgbouncer")
            console.query("pause other")
            victim.send(message(b"Q", b"select 5\0"))
            check(backend_pid(bystander), "another database is not paused")
            check(not select.select([victim.sock], [], [], 0.3)[0], "the paused database's query waits")
            console.query("resume other")
            check([m for m in victim.read_until_ready() if m[0] == b"D"], "RESUME lets it go")
        # KILL ends the database's clients now; its new clients wait until RESUME, as PgBouncer's.
        check(admin("kill other") == "KILL", "KILL")
        fields = victim.expect_error_and_close()
        check(fields and fields["C"] == "57P01", "KILL ends its clients: %r" % fields)
        check(backend_pid(bystander), "the other database's client goes on")
        check(psql_ok(t.port, "show databases", dbname="pgbouncer"), "SHOW DATABASES after KILL")
        check(admin("resume other") == "RESUME", "RESUME after KILL")
        check(psql_ok(t.port, "select 6", dbname="other") == "6", "served again after RESUME")
    # DISABLE refuses new clients of the database; ENABLE lets them in again.
    check(admin("disable other") == "DISABLE", "DISABLE")
    err = expect_login_refused(t.port, "postgres", "57P03", database="other")
    check("does not allow connections" in err.fields["M"], "PgBouncer's words: %r" % err.fields)
    dbs = {line.split("|")[0]: line.split("|") for line in admin("show databases").splitlines()}
    check(dbs.get("other", [""] * 13)[12] == "1", "SHOW DATABASES says disabled: %r" % dbs)
    check(admin("enable other") == "ENABLE", "ENABLE")
    check(psql_ok(t.port, "select 7", dbname="other") == "7", "enabled again")
    # SUSPEND holds every database like PAUSE; RESUME ends it. Lists count what tern has.
    check(admin("suspend") == "SUSPEND", "SUSPEND")
    check(admin("resume") == "RESUME", "RESUME after SUSPEND")
    lists = dict(line.split("|") for line in admin("show lists").splitlines())
    check(int(lists["used_clients"]) >= 1 and int(lists["databases"]) >= 2, "SHOW LISTS: %r" % lists)
    users = [line.split("|")[0] for line in admin("show users").splitlines()]
    check("postgres" in users, "SHOW USERS: %r" % users)


@test
def admin_reload_applies_a_changed_pool_size_before_it_answers(ctx):
    port = free_port()
    template = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 2\npool_mode = transaction\n[servers]\n"
                "primary = host=127.0.0.1 port=%d\n[pool]\npool_size = %%d\n[admin]\nadmin_users = postgres\n"
                % (port, ctx.pg.primary_port))
    t = TernProcess(TERN, template % 3)
    ctx.terns.append(t)
    t.start()
    with admin_console(t.port) as console:
        show = lambda: {r["key"]: r["value"] for r in admin_table(console, "show config")[1]}
        check(show()["pool_size"] == "3", "pool_size before")
        with open(os.path.join(t.workdir, "tern.ini"), "w") as f:
            f.write(template % 7)
        check(admin_command(console, "RELOAD;") == "RELOAD", "RELOAD answers RELOAD")
        check(show()["pool_size"] == "7", "the new pool_size is in effect when RELOAD answers")
        with open(os.path.join(t.workdir, "tern.ini"), "w") as f:
            f.write(template % 8 + "[pool]\npool_sise = 9\n")
        try:
            admin_command(console, "reload")
            raise AssertionError("RELOAD of a bad file answered without an error")
        except WireError as err:
            check(err.sqlstate == "F0000", "a bad file: F0000: %r" % err.fields)
        check(show()["pool_size"] == "7", "a bad file changes nothing")
    check(psql_ok(t.port, "select 1") == "1", "clients are served throughout")


@test
def admin_pause_waits_for_open_transactions_and_holds_new_ones_until_resume(ctx):
    t = admin_tern(ctx, pool_size=2)
    holder, late = Wire(t.port), Wire(t.port)
    console, other = admin_console(t.port), admin_console(t.port)
    try:
        holder.login("postgres")
        late.login("postgres")
        holder.query("begin")
        holder.query("select 1")  # an open transaction holds a server connection
        pausing, pause_box = in_thread(lambda: admin_command(console, "PAUSE"))
        pausing.join(0.5)
        check(pausing.is_alive(), "PAUSE waits while a transaction is open: %r" % pause_box)
        check(holder.query("select 2") == [["2"]], "the open transaction goes on during PAUSE")
        running, run_box = in_thread(lambda: late.query("select 42"))  # a new transaction: held
        wait_for(lambda: any(r["state"] == "waiting" for r in admin_table(other, "show clients")[1]),
                 "the new transaction waits at the gate", timeout=10)
        try:
            admin_command(other, "pause")
            raise AssertionError("a second PAUSE was accepted")
        except WireError as err:
            check(err.sqlstate == "55000", "a second PAUSE: 55000: %r" % err.fields)
        holder.query("commit")
        pausing.join(10)
        check(not pausing.is_alive() and pause_box.get("result") == "PAUSE",
              "PAUSE answers once the transaction ended: %r" % pause_box)
        check(running.is_alive(), "the new transaction still waits while paused: %r" % run_box)
        check(admin_command(other, "resume") == "RESUME", "RESUME")
        running.join(10)
        check(run_box.get("result") == [["42"]], "the held transaction runs after RESUME: %r" % run_box)
        try:
            admin_command(other, "resume")
            raise AssertionError("RESUME while not paused was accepted")
        except WireError as err:
            check(err.sqlstate == "55000", "RESUME while not paused: 55000: %r" % err.fields)
        check(psql_ok(t.port, "select 3") == "3", "new clients are served after RESUME")
    finally:
        for w in (holder, late, console, other):
            w.close()


@test
def admin_pause_keeps_query_wait_timeout_for_held_clients(ctx):
    t = admin_tern(ctx, pool_size=2, pool="query_wait_timeout = 0.5")
    check(psql_ok(t.port, "select 0") == "0", "a first client: the welcome needs no server from now on")
    with admin_console(t.port) as console:
        check(admin_command(console, "pause") == "PAUSE", "PAUSE with nothing running answers at once")
        with Wire(t.port) as w:
            w.login("postgres")
            started = time.monotonic()
            w.send(message(b"Q", b"select 1\0"))
            fields = w.expect_error_and_close()
            check(fields and fields["C"] == "08P01" and "query_wait_timeout" in fields["M"],
                  "08P01 query_wait_timeout behind PAUSE: %r" % fields)
            check(time.monotonic() - started < 5, "ended at query_wait_timeout, not later")
        # A login that needs a server (a database no client used yet) waits at the gate too.
        expect_login_refused(t.port, "postgres", "08P01", database="template1")
        check(admin_command(console, "resume") == "RESUME", "RESUME")
    check(psql_ok(t.port, "select 4") == "4", "served after RESUME")


@test
def admin_answers_pipelined_commands_in_order_and_survives_a_console_leaving_mid_answer(ctx):
    t = admin_tern(ctx)
    with admin_console(t.port) as console:
        # SHOW STATS and SHOW CLIENTS are answered by every worker: what comes behind them waits.
        console.send(b"".join(message(b"Q", sql + b"\0") for sql in
                              (b"show stats", b"show version", b"show clients", b"show version")))
        heads = []
        for _ in range(4):
            messages = console.read_until_ready()
            heads.append(messages[0][1][2:20] if messages[0][0] == b"T" else None)
        check([h.split(b"\0")[0] for h in heads] == [b"database", b"version", b"type", b"version"],
              "answers in the order asked: %r" % heads)
        for sql in (b"show clients", b"show stats"):
            leaving = admin_console(t.port)
            leaving.send(message(b"Q", sql + b"\0"))
            leaving.close()  # gone before the workers' answers are in
        check(admin_command(console, "show version") == "SHOW", "the console goes on")
        check(len(admin_table(console, "show clients")[1]) >= 1, "and so does SHOW CLIENTS")


@test
def a_half_sent_client_message_keeps_its_connection_and_never_reaches_another_client(ctx):
    # Found in review: the connection went back to the pool while the server still waited for the rest
    # of a CopyData, so the next client's query became that message's body, and the rest of the first
    # client's bytes ran as a query whose result went to a third client.
    port = free_port()
    t = TernProcess(TERN, "[tern]\nlisten = 127.0.0.1:%d\nworkers = 2\npool_mode = transaction\n[servers]\n"
                    "primary = host=127.0.0.1 port=%d\n[pool]\npool_size = 1\nquery_wait_timeout = 1\n"
                    "[admin]\nadmin_users = postgres\n" % (port, ctx.pg.primary_port))
    ctx.terns.append(t)
    t.start()
    active = lambda: [line.split("|")[6] for line in psql_ok(t.port, "show pools", dbname="tern").splitlines()
                      if line.startswith("postgres|postgres|")]
    with Wire(t.port) as a, Wire(t.port) as b:
        a.login("postgres")
        b.login("postgres")
        check(a.query("select 1") == [["1"]], "a has run")
        smuggled = message(b"Q", b"select 'SMUGGLED'\0")
        a.send(b"d" + struct.pack("!I", 4 + 100) + b"x" * 10)  # a CopyData: 10 of its 100 body bytes
        wait_for(lambda: active() == ["1"], "a's half message holds the only server connection", timeout=10)
        b.send(message(b"Q", b"select 2\0"))
        try:
            rows = b.query_rows_after_send()
            raise AssertionError("b was served while a's message was half sent: %r" % rows)
        except WireError as err:
            check(err.sqlstate == "08P01" and "query_wait_timeout" in err.fields["M"], "b waits: %r" % err.fields)
        a.send(smuggled + b"y" * (90 - len(smuggled)))  # the other 90, a query hidden inside
        check(a.query("select 3") == [["3"]], "a goes on; its CopyData was ignored by the server")
    with Wire(t.port) as d:
        d.login("postgres")
        check(d.query("select 4") == [["4"]], "the next client gets its own result")


@test
def extended_protocol_copy_from_stdin_gives_its_connection_back(ctx):
    # Found in review: libpq's extended COPY sends a Sync behind Execute (ignored by a server in
    # copy-in) and another after CopyDone; counting both kept the connection forever.
    psql_ok(ctx.pg.primary_port, "drop table if exists ecopy; create table ecopy(x int)")
    t = ctx.tern(pool_mode="transaction", pool_size=1, sections={"pool": "query_wait_timeout = 2"})
    with Wire(t.port) as a:
        a.login("postgres")
        a.send(message(b"P", b"\0COPY ecopy FROM STDIN\0\0\0") + message(b"B", b"\0\0\0\0\0\0\0\0")
               + message(b"E", b"\0\0\0\0\0") + message(b"S"))
        while True:
            msg = a.read_message()
            check(msg is not None, "copy-in starts")
            if msg[0] == b"G":
                break
        a.send(message(b"d", b"1\n2\n") + message(b"c") + message(b"S"))
        kinds = [m[0] for m in a.read_until_ready()]
        check(b"C" in kinds, "COPY completed: %r" % kinds)
        check(psql_ok(t.port, "select count(*) from ecopy") == "2", "another client gets the connection")
        check(a.query("select 5") == [["5"]], "and so does the copier again")


@test
def a_client_that_stops_reading_does_not_hold_the_server_buffers_others_need(ctx):
    # 16 buffers of 16 kB per direction: one client's back-pressure allowance (256 kB) is the whole ring.
    t = ctx.tern(pool_size=4, workers=1, sections={"tern": "buffer_count = 16\nbuffer_size = 16kB"})
    with Wire(t.port) as slow:
        slow.login("postgres")
        port = slow.sock.getsockname()[1]
        slow.send(q("select repeat('x', 1000) from generate_series(1, 100000)"))  # and never reads
        queued = [None]

        def send_stalled():
            now, queued[0] = queued[0], tern_socket_entry(port, t.port)[4]
            return now == queued[0]
        wait_for(send_stalled, "tern's send to the slow client to stall", interval=0.3)
        for i in range(3):  # other clients on the same worker get their (multi-buffer) results
            out = psql_ok(t.port, "select count(*), sum(length(r)) from (select repeat('y', 500) as r "
                                  "from generate_series(1, 2000)) s", timeout=20)
            check(out == "2000|1000000", "client %d served while the slow one waits: %r" % (i, out))


@test
def a_client_that_stops_reading_small_replies_does_not_hold_the_server_buffers(ctx):
    # Found in review: replies that arrive one by one fill a receive buffer each, so a client that stops
    # reading held the whole ring with far fewer bytes queued than any byte-based mark.
    t = ctx.tern(pool_size=4, workers=1, sections={"tern": "buffer_count = 16\nbuffer_size = 16kB"})
    hog = Wire.__new__(Wire)
    hog.buf, hog.params, hog.key = b"", {}, None
    hog.sock = socket.socket()
    hog.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
    hog.sock.settimeout(30)
    try:
        hog.sock.connect(("127.0.0.1", t.port))
        hog.login("postgres")
        port = hog.sock.getsockname()[1]
        n = 2500  # each reply flushed on its own by the server: one receive buffer each; never read
        hog.send(b"".join(q("select pg_sleep(0.001), repeat('x', 3000)") for _ in range(n)))
        queued = [None]

        def send_stalled():
            now, queued[0] = queued[0], tern_socket_entry(port, t.port)[4]
            return now == queued[0]
        wait_for(send_stalled, "tern's send to the hog to stall", interval=1.5, timeout=60)
        check(psql_ok(t.port, "select 1", timeout=20) == "1", "another client is served meanwhile")
        readies = 0
        while readies < n:
            m = hog.read_message()
            check(m is not None, "the hog's replies all arrive once it reads (%d of %d)" % (readies, n))
            readies += m[0] == b"Z"
    finally:
        hog.close()


@test
def a_session_ending_while_starved_of_buffers_is_freed_safely(ctx):
    # Found in review (ASan: heap-use-after-free): with the server-side buffers held by a client that
    # does not read, an idle client's end (its DISCARD ALL answer cannot be received) left the session
    # on the worker's starved list when it was freed.
    t = ctx.tern(pool_mode="session", pool_size=5, workers=1,
                 sections={"tern": "buffer_count = 16\nbuffer_size = 4kB"}, extra="client_idle_timeout = 1")
    idle, hog = Wire(t.port, timeout=20), Wire(t.port, timeout=20)
    try:
        idle.login("postgres")
        idle_pid = idle.query("select pg_backend_pid()")[0][0]
        hog.login("postgres")
        hog.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        hog.send(message(b"Q", b"select repeat('x', 2000) from generate_series(1, 200000)\0"))  # never read
        fields = idle.expect_error_and_close()
        check(fields and fields["C"] == "57P05", "the idle client is ended: %r" % fields)
        # tern copies the hog's rows out of the ring when the buffers run out, so the reset's answer
        # arrives and the connection goes back to the pool (before, it was dropped after the linger).
        wait_for(lambda: ctx.pg.psql("select count(*) from pg_stat_activity where pid = %s and "
                                     "(state <> 'idle' or query <> 'DISCARD ALL')" % idle_pid) == "0",
                 "its server connection is reset and idle, or gone", timeout=15)
        check(t.alive(), "tern survived the loop passes after that session was freed")
        hog.close()  # the hog held every server-side buffer of this tiny ring (see README)
        with Wire(t.port) as w:
            w.login("postgres")
            check(w.query("select 7") == [["7"]], "tern keeps serving")
        check(t.alive(), "tern is alive")
    finally:
        idle.close()
        hog.close()


@test
def a_second_ssl_request_is_a_protocol_violation(ctx):
    t = ctx.tern()
    with Wire(t.port) as w:
        w.send(struct.pack("!II", 8, 80877103))
        check(w.read_bytes(1) == b"N", "the first is answered")
        w.send(struct.pack("!II", 8, 80877103))
        fields = w.expect_error_and_close()
        check(fields and fields["C"] == "08P01", "the second ends the connection: %r" % fields)


# ---------------------------------------------------------------- TLS toward clients

SSL_REQUEST = struct.pack("!II", 8, 80877103)


def make_certificate(ctx, name, key="rsa:2048", cn="localhost"):
    """A self-signed certificate for localhost / 127.0.0.1 (its common name `cn`), made with the openssl
    command; returns the {"NAME.crt": ..., "NAME.key": ...} files for ctx.tern(files=...) and the
    certificate's path."""
    directory = os.path.join(ctx.pg.base_dir, "certs")
    os.makedirs(directory, exist_ok=True)
    crt, keyfile = os.path.join(directory, name + ".crt"), os.path.join(directory, name + ".key")
    if not os.path.exists(crt):
        argv = ["openssl", "req", "-x509", "-nodes", "-days", "2", "-subj", "/CN=" + cn,
                "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", keyfile, "-out", crt]
        argv += ["-newkey", key] if key != "ed25519" else ["-newkey", "ed25519"]
        subprocess.run(argv, check=True, capture_output=True, timeout=60)
    files = {}
    for path in (crt, keyfile):
        with open(path) as f:
            files[os.path.basename(path)] = f.read()
    return files, crt


def tls_tern(ctx, mode="prefer", cert="tern", key="rsa:2048", tls_extra="", **kw):
    files, crt = make_certificate(ctx, cert, key)
    extra = kw.pop("extra", "")
    extra += "\n[tls]\nclient_tls_sslmode = %s\nclient_tls_cert_file = %s.crt\nclient_tls_key_file = %s.key\n%s" % (
        mode, cert, cert, tls_extra)
    t = ctx.tern(extra=extra, files=files, **kw)
    t.crt = crt
    return t


def tls_client_context(alpn=("postgresql",)):
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    c.check_hostname = False
    c.verify_mode = ssl.CERT_NONE
    if alpn:
        c.set_alpn_protocols(list(alpn))
    return c


def tls_wire(port, direct=False, alpn=("postgresql",)):
    """A raw client over TLS: after SSLRequest and 'S', or a direct handshake (PostgreSQL 17)."""
    w = Wire(port)
    if not direct:
        w.send(SSL_REQUEST)
        check(w.read_bytes(1) == b"S", "SSLRequest answered S")
    w.sock = tls_client_context(alpn).wrap_socket(w.sock, server_hostname="localhost")
    return w


def tern_socket_entry(client_port, tern_port):
    """The /proc/net/tcp fields of tern's end of the connection from client_port (None when gone)."""
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local_port, remote_port = int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16)
            if local_port == tern_port and remote_port == client_port:
                return fields
    return None


def tern_holds_client_socket(t, client_port):
    """True while tern has a descriptor for its end of the connection from client_port."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % t.pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (t.pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    fields = tern_socket_entry(client_port, t.port)
    return fields is not None and fields[9] in inodes


@test
def tls_a_client_that_stops_reading_and_half_closes_is_let_go(ctx):
    t = tls_tern(ctx, mode="require")
    w = tls_wire(t.port)
    try:
        w.login("postgres")
        port = w.sock.getsockname()[1]
        w.send(q("select repeat('x', 1000) from generate_series(1, 100000)"))
        w.read_bytes(200000)  # then stops reading, with most of 100 MB still to come
        # Once the socket is full tern's send waits: the FIN must not leave the session waiting forever.
        queued = [None]

        def send_stalled():
            now, queued[0] = queued[0], tern_socket_entry(port, t.port)[4]
            return now == queued[0]
        wait_for(send_stalled, "tern's send to stall on the full socket", interval=0.3)
        check(tern_holds_client_socket(t, port), "tern holds the connection at first")
        w.sock.shutdown(socket.SHUT_WR)
        wait_for(lambda: not tern_holds_client_socket(t, port), "tern lets the client go", timeout=10)
    finally:
        w.close()
    check(psql_tls(t, "select 1").stdout.strip() == "1", "tern serves on")


def psql_tls(t, sql, sslmode="require", conninfo="", password=None, dbname="postgres"):
    """psql -c SQL with sslmode and more conninfo (later keys override earlier ones)."""
    argv = ["psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql,
            "host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=%s %s" % (t.port, dbname, sslmode, conninfo)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env(password))


@test
def tls_psql_with_sslmode_require_and_verify_full_gets_the_same_results(ctx):
    t = tls_tern(ctx, mode="prefer", pool_mode="transaction", pool_size=2)
    r = psql_tls(t, "\\conninfo", sslmode="verify-full", conninfo="host=localhost sslrootcert=%s" % t.crt)
    check(r.returncode == 0 and "SSL connection (protocol: TLSv1.3" in r.stdout, "verify-full over TLS 1.3: %r %r" % (
        r.stdout, r.stderr))
    sql = "select md5(string_agg(g::text || repeat('x', g % 300), ',')) from generate_series(1, 200000) g"
    direct = ctx.pg.psql(sql)
    r = psql_tls(t, sql)
    check(r.returncode == 0 and r.stdout.strip() == direct, "the same digest over TLS: %r" % (r.stderr,))
    # A result of many records (about 60 MB) comes through whole, behind the client's reading pace.
    r = psql_tls(t, "copy (select g, repeat('y', 300) from generate_series(1, 200000) g) to stdout")
    check(r.returncode == 0, "copy out over TLS: %r" % r.stderr)
    lines = r.stdout.splitlines()
    check(len(lines) == 200000 and lines[-1] == "200000\t" + "y" * 300, "every row, in order")
    # psql's default sslmode=prefer takes TLS; sslmode=disable still works in prefer mode.
    r = psql_tls(t, "select 1", sslmode="disable")
    check(r.returncode == 0 and r.stdout.strip() == "1", "plaintext in prefer mode: %r" % r.stderr)


@test
def tls_pgbench_prepared_over_tls_in_transaction_pooling(ctx):
    t = tls_tern(ctx, mode="require", pool_mode="transaction", pool_size=4)
    pgbench(t.port, ["-i", "-s", "1", "-q"])
    argv = ["pgbench", "-c", "16", "-j", "2", "-t", "100", "-M", "prepared", "-n",
            "host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=require" % t.port]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env())
    check(r.returncode == 0, "pgbench over TLS: %s" % r.stderr[-2000:])
    processed, failed = pgbench_summary(r.stdout)
    check(processed == 1600 and not failed, "every transaction: %r" % ((processed, failed),))


@test
def tls_require_refuses_clients_without_tls_with_28000(ctx):
    t = tls_tern(ctx, mode="require", extra="\n[admin]\nadmin_users = postgres\n")
    r = psql_tls(t, "show clients", dbname="tern")  # the admin console over TLS shows the TLS in use
    rows = [line.split("|") for line in r.stdout.splitlines()]
    check(r.returncode == 0 and len(rows) == 1 and rows[0][16].startswith("TLSv1.3/TLS_"),
          "SHOW CLIENTS names the protocol and cipher: %r %r" % (r.stdout, r.stderr))
    r = psql_tls(t, "select 1", sslmode="disable")
    check(r.returncode != 0 and "TLS is required" in r.stderr, "psql sslmode=disable refused: %r" % r.stderr)
    expect_login_refused(t.port, "postgres", "28000")
    with Wire(t.port) as w:  # after an SSLRequest answered S, the client went on in the clear
        w.send(SSL_REQUEST)
        check(w.read_bytes(1) == b"S", "S")
        w.send(startup_packet("postgres"))
        check(w.read_bytes(1) in (None, b"\x15"), "garbage instead of a ClientHello ends the connection")
    r = psql_tls(t, "select 2")
    check(r.returncode == 0 and r.stdout.strip() == "2", "TLS clients are served: %r" % r.stderr)


@test
def tls_direct_handshake_needs_alpn_postgresql(ctx):
    t = tls_tern(ctx, mode="require")
    with tls_wire(t.port, direct=True) as w:
        check(w.sock.selected_alpn_protocol() == "postgresql", "ALPN postgresql")
        w.login("postgres")
        check(w.query("select 40 + 2") == [["42"]], "a session over direct TLS")
    with tls_wire(t.port, direct=True, alpn=None) as w:  # no ALPN: a readable refusal, as PostgreSQL 17
        errors = w.errors_until_close()
        check(len(errors) == 1 and errors[0]["C"] == "08P01" and "ALPN" in errors[0]["M"],
              "one 08P01 naming ALPN: %r" % errors)
    try:
        tls_wire(t.port, direct=True, alpn=("http/1.1",)).close()
        raise AssertionError("a handshake offering only http/1.1 was accepted")
    except ssl.SSLError as err:
        check("no application protocol" in str(err).lower().replace("_", " "), "refused with no_application_protocol: %s" % err)
    # After an SSLRequest, ALPN is optional (libpq before 17 sends none).
    with tls_wire(t.port, alpn=None) as w:
        w.login("postgres")
        check(w.query("select 1") == [["1"]], "SSLRequest without ALPN")
    for request in (SSL_REQUEST, struct.pack("!II", 8, 80877104)):
        with tls_wire(t.port, direct=True) as w:
            w.send(request)  # inside TLS, an SSLRequest or GSSENCRequest is a protocol violation
            fields = w.expect_error_and_close()
            check(fields and fields["C"] == "08P01", "%r inside TLS: %r" % (request, fields))
    with Wire(t.port) as w:  # a direct handshake only as the connection's first bytes
        w.send(struct.pack("!II", 8, 80877104))
        check(w.read_bytes(1) == b"N", "GSSENCRequest answered N")
        try:
            w.sock = tls_client_context().wrap_socket(w.sock, server_hostname="localhost")
            raise AssertionError("a ClientHello after a GSSENCRequest was taken as direct TLS")
        except (ssl.SSLError, ConnectionResetError, OSError):
            pass
    with tls_wire(t.port) as w:  # the client's close_notify is answered with tern's
        w.login("postgres")
        w.sock.unwrap()
    plain = ctx.tern()  # TLS off: a direct handshake is closed without a word
    with Wire(plain.port) as w:
        try:
            w.sock = tls_client_context().wrap_socket(w.sock, server_hostname="localhost")
            raise AssertionError("a direct handshake succeeded with TLS off")
        except (ssl.SSLError, ConnectionResetError, OSError):
            pass
    check(psql_ok(plain.port, "select 3") == "3", "plain tern serves on")


@test
def tls_scram_sha_256_plus_binds_the_channel(ctx):
    users = '"postgres" "%s"\n' % scram_secret("s3cret")
    t = tls_tern(ctx, mode="prefer", auth="scram", users=users)
    r = psql_tls(t, "select 7", conninfo="channel_binding=require", password="s3cret")
    check(r.returncode == 0 and r.stdout.strip() == "7", "channel_binding=require: %r" % r.stderr)
    r = psql_tls(t, "select 8", conninfo="channel_binding=require", password="wrong")
    check(r.returncode != 0 and "password authentication failed" in r.stderr, "wrong password: %r" % r.stderr)
    r = psql_tls(t, "select 9", conninfo="channel_binding=disable", password="s3cret")
    check(r.returncode == 0 and r.stdout.strip() == "9", "plain SCRAM over TLS: %r" % r.stderr)
    r = psql_tls(t, "select 10", sslmode="disable", conninfo="channel_binding=require", password="s3cret")
    check(r.returncode != 0 and "channel binding" in r.stderr, "no PLUS without TLS: %r" % r.stderr)
    # The binding is the SHA-256 of tern's certificate; a client that saw another one is refused.
    for flip, want in ((0, None), (1, "SCRAM channel binding check failed")):
        with tls_wire(t.port) as w:
            binding = bytearray(hashlib.sha256(w.sock.getpeercert(binary_form=True)).digest())
            binding[0] ^= flip
            try:
                w.login("postgres", password="s3cret", channel_binding=bytes(binding))
                got = None
            except WireError as err:
                got = err.fields["M"] if err.sqlstate == "08P01" else err.fields
            check(got == want, "SCRAM-SHA-256-PLUS with %s binding: %r" % ("a wrong" if flip else "the right", got))
    # An Ed25519 certificate has no tls-server-end-point hash: SCRAM-SHA-256-PLUS is not offered.
    e = tls_tern(ctx, mode="prefer", cert="ed", key="ed25519", auth="scram", users=users)
    r = psql_tls(e, "select 11", conninfo="channel_binding=prefer", password="s3cret")
    check(r.returncode == 0 and r.stdout.strip() == "11", "Ed25519 without PLUS: %r" % r.stderr)


@test
def tls_min_protocol_and_ciphers_are_applied(ctx):
    def handshake(port, max_version=None, ciphers=None):
        """The (protocol, cipher) agreed after an SSLRequest, or the handshake's error."""
        c = tls_client_context(alpn=None)
        if max_version:
            c.maximum_version = max_version
        if ciphers:
            c.set_ciphers(ciphers)
        with Wire(port) as w:
            w.send(SSL_REQUEST)
            check(w.read_bytes(1) == b"S", "S")
            try:
                w.sock = c.wrap_socket(w.sock, server_hostname="localhost")
            except (ssl.SSLError, ConnectionResetError) as err:
                return err
            return w.sock.version(), w.sock.cipher()[0]

    tls12 = ssl.TLSVersion.TLSv1_2
    t = tls_tern(ctx, mode="require")  # the defaults: TLS 1.2 and newer, OpenSSL's ciphers
    check(handshake(t.port)[0] == "TLSv1.3", "TLS 1.3 by default")
    check(handshake(t.port, tls12)[0] == "TLSv1.2", "a TLS 1.2 client is served")
    t13 = tls_tern(ctx, mode="require", tls_extra="client_tls_min_protocol = TLSv1.3\n")
    check(isinstance(handshake(t13.port, tls12), ssl.SSLError), "TLS 1.2 refused with a TLS 1.3 floor")
    aes256 = "ECDHE-RSA-AES256-GCM-SHA384"
    only = tls_tern(ctx, mode="require", tls_extra="client_tls_ciphers = %s\n" % aes256)
    check(handshake(only.port, tls12, aes256) == ("TLSv1.2", aes256), "the configured cipher is used")
    check(isinstance(handshake(only.port, tls12, "ECDHE-RSA-AES128-GCM-SHA256"), ssl.SSLError),
          "a cipher outside client_tls_ciphers is refused")


@test
def tls_client_certificates_are_checked_against_client_tls_ca_file(ctx):
    _, other = make_certificate(ctx, "other")
    t = tls_tern(ctx, mode="require", tls_extra="client_tls_ca_file = tern.crt\n")
    key = t.crt[:-len(".crt")] + ".key"
    r = psql_tls(t, "select 1", conninfo="sslcert=%s sslkey=%s" % (t.crt, key))
    check(r.returncode == 0 and r.stdout.strip() == "1", "a certificate the CA file vouches for: %r" % r.stderr)
    r = psql_tls(t, "select 2", conninfo="sslcert=%s sslkey=%s" % (other, other[:-len(".crt")] + ".key"))
    check(r.returncode != 0 and ("unknown ca" in r.stderr or "certificate" in r.stderr),
          "a certificate from another issuer is refused: %r" % r.stderr)
    r = psql_tls(t, "select 3")
    check(r.returncode == 0 and r.stdout.strip() == "3", "a client without a certificate is served: %r" % r.stderr)


@test
def cert_auth_logs_in_the_user_a_verified_client_certificate_names(ctx):
    """[auth] mode = cert (PgBouncer's auth_type = cert): a client over TLS whose certificate
    client_tls_ca_file vouches for logs in as the user its CN names, with no password; a certificate
    naming another user, none, or no TLS at all gets 28000 "certificate authentication failed"; the
    admin console takes the same check. A config without client_tls_ca_file is refused at startup."""
    certs = {}
    long_user = "u" * 63  # PostgreSQL's longest name; its certificate's CN is one byte longer
    names = {"postgres": "postgres", "alice": "alice", "long": long_user + "x"}
    for name, cn in names.items():
        files, crt = make_certificate(ctx, "client-" + name, cn=cn)
        certs[name] = "sslcert=%s sslkey=%s" % (crt, crt[:-len(".crt")] + ".key")
    bundle = "".join(open(os.path.join(ctx.pg.base_dir, "certs", "client-%s.crt" % name)).read()
                     for name in names)
    files, crt = make_certificate(ctx, "tern")
    files["clients.crt"] = bundle
    t = ctx.tern(auth="cert", files=files, extra="[admin]\nadmin_users = postgres\n[tls]\nclient_tls_sslmode = prefer\n"
                 "client_tls_cert_file = tern.crt\nclient_tls_key_file = tern.key\nclient_tls_ca_file = clients.crt\n")
    r = psql_tls(t, "select current_user", conninfo=certs["postgres"])
    check(r.returncode == 0 and r.stdout.strip() == "postgres", "the certificate's user: %r" % r.stderr)
    r = psql_tls(t, "show pools", conninfo=certs["postgres"], dbname="pgbouncer")
    check(r.returncode == 0 and "postgres" in r.stdout, "the admin console with it: %r" % r.stderr)
    for what, conninfo, sslmode in (("another user's certificate", certs["alice"], "require"),
                                    ("no certificate", "", "require"), ("no TLS", "", "disable")):
        r = psql_tls(t, "select 1", sslmode=sslmode, conninfo=conninfo)
        check(r.returncode != 0 and 'certificate authentication failed for user "postgres"' in r.stderr,
              "%s is refused: %r" % (what, r.stderr))
    r = psql_tls(t, "select 1", conninfo=certs["long"] + " user=" + long_user)
    check(r.returncode != 0 and 'certificate authentication failed for user "%s"' % long_user in r.stderr,
          "a CN longer than the user is not cut to it: %r" % r.stderr)
    with Wire(t.port) as w:
        w.send(startup_packet("postgres"))
        fields = w.expect_error_and_close()
        check(fields is not None and fields["C"] == "28000", "28000 on the wire: %r" % fields)
    check(t.alive(), "tern is up")
    bad = TernProcess(TERN, "[tern]\nlisten = 127.0.0.1:%d\n[servers]\nprimary = host=127.0.0.1 port=%d\n"
                      "[auth]\nmode = cert\n" % (free_port(), ctx.pg.primary_port))
    try:
        bad.start(timeout=10)
        check(False, "a cert mode without client_tls_ca_file starts")
    except ProcessError as e:
        check("client_tls_ca_file" in str(e), "refused, naming client_tls_ca_file: %s" % e)


@test
def tls_sighup_swaps_the_certificate_and_mode(ctx):
    port = free_port()
    new_files, new_crt = make_certificate(ctx, "next")
    files, crt = make_certificate(ctx, "tern")
    files.update(new_files)
    template = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 2\n[servers]\nprimary = host=127.0.0.1 port=%d\n"
                "[tls]\nclient_tls_sslmode = %%s\nclient_tls_cert_file = %%s.crt\nclient_tls_key_file = %%s.key\n"
                % (port, ctx.pg.primary_port))
    t = TernProcess(TERN, template % ("prefer", "tern", "tern"), extra_files=files)
    ctx.terns.append(t)
    t.start()

    def served_certificate():
        with tls_wire(t.port) as w:
            return w.sock.getpeercert(binary_form=True)

    def pem_der(path):
        with open(path) as f:
            return ssl.PEM_cert_to_DER_cert(f.read())

    check(served_certificate() == pem_der(crt), "the first certificate")
    with open(os.path.join(t.workdir, "tern.ini"), "w") as f:
        f.write(template % ("require", "next", "next"))
    t.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: served_certificate() == pem_der(new_crt), "the new certificate after SIGHUP", timeout=10)
    expect_login_refused(t.port, "postgres", "28000")  # and require now refuses the clear
    with open(os.path.join(t.workdir, "tern.ini"), "w") as f:
        f.write(template % ("require", "missing", "missing"))
    t.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "nothing changed" in t.log_tail(50), "a missing certificate is refused")
    check(served_certificate() == pem_der(new_crt), "the running certificate stays")


# ---------------------------------------------------------------- TLS toward servers ([tls] server_tls_*)

# What PostgreSQL says of the connection that runs it: "t|TLSv1.3|TLS_AES_256_GCM_SHA384", "f||" in clear.
SERVER_TLS_ROW = "select ssl, version, cipher from pg_stat_ssl where pid = pg_backend_pid()"


class TlsServers:
    """The TLS-only primary and streaming replica (tlscluster.py) the server_tls tests share: its certificate,
    from a throwaway CA (`ca`), names localhost alone; `wrong_ca` is another CA; `client` a certificate
    for tls_cert_user, whom pg_hba.conf asks for one (cert), and `other_client` one for a name no role has;
    tls_scram is asked for SCRAM (password scrampw). Every other TCP login without TLS is refused."""

    def __init__(self):
        self.directory = certificate_directory("tern-server-tls-")
        try:
            self.ca = ThrowawayCA(os.path.join(self.directory, "ca"), "ca")
            self.wrong_ca = ThrowawayCA(os.path.join(self.directory, "wrong"), "wrong-ca")
            self.server = self.ca.issue("server", "tern test server", dns=("localhost",))
            self.client = self.ca.issue("tls_cert_user", "tls_cert_user")
            self.other_client = self.ca.issue("nobody", "nobody")
            self.pg = tls_only_cluster(self.ca, self.server, extra_conf={"synchronous_commit": "on"},
                                       hba_lines=["hostssl all tls_cert_user 127.0.0.1/32 cert",
                                                  "hostssl all tls_scram 127.0.0.1/32 scram-sha-256"])
            self.pg.start()
            self.pg.psql("create role tls_cert_user login; create role tls_scram login password 'scrampw'")
        except BaseException:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise

    def by_name(self, port=None):
        """The conninfo of the primary (or `port`) by the name its certificate holds."""
        return "host=localhost port=%d" % (port or self.pg.primary_port)

    def stop(self):
        self.pg.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


_tls_servers = []


def tls_servers():
    """The shared TlsServers, started by the first test that asks (a few seconds), stopped by main."""
    if not _tls_servers:
        _tls_servers.append(TlsServers())
        atexit.register(stop_tls_servers)
    return _tls_servers[0]


def stop_tls_servers():
    while _tls_servers:
        _tls_servers.pop().stop()


def server_tls_tern(ctx, servers, tls, pool_mode="transaction", pool="server_login_retry = 0\nquery_wait_timeout = 20s",
                    auth="[auth]\nmode = trust", more="", files=None):
    """A tern whose [servers] lines are `servers` and [tls] lines `tls`; by default a server login that fails
    is the waiting client's error at once (server_login_retry = 0)."""
    config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 2\npool_mode = %s\n[servers]\n%s\n"
              "[routing]\nmonitor_interval_ms = 100\ndefault_consistency = session\n[pool]\npool_size = 4\n%s\n"
              "%s\n[tls]\n%s\n%s\n" % (free_port(), pool_mode, servers, pool, auth, tls, more))
    t = TernProcess(TERN, config, extra_files=files)
    ctx.terns.append(t)
    t.start()
    return t


def verify_full(s):
    return "server_tls_sslmode = verify-full\nserver_tls_ca_file = %s" % s.ca.crt


def post_api(http_port, path, body, timeout=60):
    """POST a JSON body to tern's HTTP endpoint: (status, the JSON answer)."""
    request = urllib.request.Request("http://127.0.0.1:%d%s" % (http_port, path), data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


@test
def server_tls_verify_full_carries_big_results_a_big_bind_copy_in_and_pooled_pgbench(ctx):
    """[tls] server_tls_sslmode = verify-full with server_tls_ca_file, the server reached by the name its
    certificate holds: the pool's connections are TLS 1.3 (pg_stat_ssl); a 200 kB value, 100 000 rows, a
    4 MiB Bind parameter and pgbench -i's COPY in come through whole; pgbench -C (a new client login per
    transaction, 800 of them) runs on at most pool_size TLS connections, so they are reused across clients;
    SHOW SERVERS names each connection's protocol and cipher in its tls column."""
    s = tls_servers()
    t = server_tls_tern(ctx, "primary = " + s.by_name(), verify_full(s), more="[admin]\nadmin_users = postgres")
    row = psql_ok(t.port, SERVER_TLS_ROW)
    check(re.fullmatch(r"t\|TLSv1\.3\|TLS_[A-Z0-9_]+", row), "the pool's connection is TLS 1.3: %r" % row)
    check(psql_ok(t.port, "select repeat('x', 200000)") == "x" * 200000, "a 200 kB value, whole")
    rows = psql_ok(t.port, "select g from generate_series(1, 100000) g").split("\n")
    check(rows == [str(g) for g in range(1, 100001)], "100 000 rows in order: %d of them" % len(rows))
    value = hashlib.sha256(b"tern").hexdigest() * (4 * 1024 * 1024 // 64)
    with Wire(t.port) as w:
        w.login("postgres")
        kinds, got, sqlstate, _ = w.exchange(parse("", "select length($1), md5($1)"), bind("", [value]), execute(),
                                             SYNC)
        check(sqlstate is None and got == [[str(len(value)), hashlib.md5(value.encode()).hexdigest()]],
              "the server saw the 4 MiB parameter whole: %r %r" % (kinds, got))
    s.pg.psql("drop database if exists tls_bench")
    s.pg.psql("create database tls_bench")
    r = subprocess.run(["pgbench", "-i", "-s", "1", "-q", "-h", "127.0.0.1", "-p", str(t.port), "-U", "postgres",
                        "tls_bench"], capture_output=True, text=True, timeout=180, env=env())
    check(r.returncode == 0, "pgbench -i through tern: %s" % r.stderr[-2000:])
    check(s.pg.psql("select count(*) from pgbench_accounts", dbname="tls_bench") == "100000",
          "pgbench -i's COPY in, every row")
    s.pg.psql("create table tls_seen(pid int, ssl bool)", dbname="tls_bench")
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write("\\set aid random(1, 100000)\nbegin;\n"
                     "update pgbench_accounts set abalance = abalance + 1 where aid = :aid;\n"
                     "insert into tls_seen select pid, ssl from pg_stat_ssl where pid = pg_backend_pid();\nend;\n")
        script.flush()
        r = subprocess.run(["pgbench", "-n", "-C", "-c", "4", "-j", "2", "-t", "200", "-f", script.name, "-h",
                            "127.0.0.1", "-p", str(t.port), "-U", "postgres", "tls_bench"],
                           capture_output=True, text=True, timeout=180, env=env())
    check(r.returncode == 0, "pgbench -C through tern: %s" % r.stderr[-2000:])
    check(pgbench_summary(r.stdout) == (800, 0), "every transaction: %r" % (pgbench_summary(r.stdout),))
    seen = s.pg.psql("select count(*), count(distinct pid), bool_and(ssl), (select sum(abalance) from "
                     "pgbench_accounts) from tls_seen", dbname="tls_bench")
    count, pids, all_tls, balance = seen.split("|")
    check(count == "800" and balance == "800" and all_tls == "t", "800 transactions over TLS: %r" % seen)
    check(1 <= int(pids) <= 4, "800 client logins on at most pool_size server connections: %s" % pids)
    with admin_console(t.port) as w:
        names, servers = admin_table(w, "show servers")
    check("tls" in names and servers, "SHOW SERVERS has a tls column: %r" % names)
    check(all(re.fullmatch(r"TLSv1\.3/TLS_[A-Z0-9_]+", row["tls"]) for row in servers),
          "each server connection's protocol and cipher: %r" % [row.get("tls") for row in servers])


@test
def server_tls_refuses_a_wrong_name_a_wrong_ca_a_server_without_ssl_and_conninfo_keys_win(ctx):
    """Each server login that cannot be what [tls] asks is the client's error, naming why, and tern runs on:
    verify-full to 127.0.0.1 (the certificate names localhost), verify-ca against another CA, require against
    a server without ssl (the suite's own), and disable against a server that takes TLS logins only. A
    server's own sslmode and sslrootcert in its conninfo win over server_tls_sslmode and server_tls_ca_file."""
    s = tls_servers()
    port = s.pg.primary_port
    cases = (
        ("verify-full to an address the certificate does not name", "host=127.0.0.1 port=%d" % port, verify_full(s),
         ("certificate", 'does not match host name "127.0.0.1"')),
        ("verify-ca against another CA", s.by_name(),
         "server_tls_sslmode = verify-ca\nserver_tls_ca_file = %s" % s.wrong_ca.crt, ("certificate verify failed",)),
        ("require against a server without ssl", "host=127.0.0.1 port=%d" % ctx.pg.primary_port,
         "server_tls_sslmode = require", ("server does not support SSL",)),
        ("disable against a server that takes TLS logins only", "host=127.0.0.1 port=%d" % port,
         "server_tls_sslmode = disable", ("no encryption",)),
    )
    for what, conninfo, tls, words in cases:
        t = server_tls_tern(ctx, "primary = " + conninfo, tls)
        r = psql(t.port, "select 1", timeout=30)
        check(r.returncode != 0 and all(word in r.stderr for word in words),
              "%s: refused, saying %r: %r" % (what, words, r.stderr.strip()))
        check(t.alive(), "%s: tern is up" % what)
    t = server_tls_tern(ctx, "primary = %s sslmode=verify-full sslrootcert=%s" % (s.by_name(), s.ca.crt),
                        "server_tls_sslmode = disable\nserver_tls_ca_file = %s" % s.wrong_ca.crt)
    check(psql_ok(t.port, SERVER_TLS_ROW).startswith("t|TLSv1.3|"), "the conninfo's sslmode and sslrootcert win")


@test
def server_tls_carries_replica_reads_the_monitor_a_moved_session_shadow_and_operator_replay(ctx):
    """Over servers that take TLS logins only, with verify-full: the monitor finds the primary and the
    standby, a read-only transaction runs on the replica over TLS; in session pooling Transaction Replay
    moves a session whose backend is terminated to a new TLS connection, the client noticing nothing but a
    new pid; POST /api/shadow compares the primary and the replica; POST /api/replay applies the journaled
    transactions to a target conninfo with no sslmode of its own (server_tls_sslmode holds)."""
    s = tls_servers()
    servers = "primary = %s\nreplica = %s" % (s.by_name(), s.by_name(s.pg.replica_port))
    for mode in ("transaction", "session"):
        http_port = free_port()
        t = server_tls_tern(ctx, servers, verify_full(s), pool_mode=mode, pool="server_login_retry = 1s",
                            more="[admin]\nhttp_listen = 127.0.0.1:%d" % http_port)
        with Wire(t.port) as w:
            w.login("postgres")
            if mode == "transaction":
                wait_for(lambda: server_roles(http_port) == {"primary": "primary", "replica": "standby"},
                         "the monitor logs in to both over TLS", timeout=15)
                w.query("begin read only")
                rows = w.query("select pg_is_in_recovery(), ssl from pg_stat_ssl where pid = pg_backend_pid()")
                check(rows == [["t", "t"]], "the read-only transaction runs on the replica, over TLS: %r" % rows)
                w.query("commit")
                status, answer = post_api(http_port, "/api/shadow", {"sql": "select count(*) from pg_roles where "
                                                                      "rolname = 'tls_scram'", "shadow": "replica"})
                check(status == 200 and answer["is_clean"] is True and answer["source"]["error"] is None
                      and answer["shadow"]["error"] is None, "/api/shadow on both over TLS: %s %r" % (status, answer))
                continue
            pid = w.query("select pg_backend_pid()")[0][0]
            s.pg.psql("select pg_terminate_backend(%s)" % pid)
            wait_for(lambda: s.pg.psql("select count(*) from pg_stat_activity where pid = %s" % pid) == "0",
                     "the backend gone")
            rows = w.query("select pg_backend_pid(), pg_is_in_recovery(), ssl from pg_stat_ssl "
                           "where pid = pg_backend_pid()")
            check(rows[0][0] != pid and rows[0][1:] == ["f", "t"],
                  "the session moved to a new primary connection over TLS: %r (was %s)" % (rows, pid))
        check(t.alive(), "tern is up")
    for database in ("tls_replay_src", "tls_replay_dst"):
        s.pg.psql("drop database if exists %s" % database)
        s.pg.psql("create database %s" % database)
        s.pg.psql("create table replayed(a int)", dbname=database)
    http_port = free_port()
    t = server_tls_tern(ctx, "primary = " + s.by_name(), verify_full(s), more="[admin]\nhttp_listen = 127.0.0.1:%d"
                        % http_port)
    for a in (1, 2, 3):
        psql_ok(t.port, "insert into replayed values (%d)" % a, dbname="tls_replay_src")
    status_url = "http://127.0.0.1:%d/api/status" % http_port
    wait_for(lambda: json.loads(urllib.request.urlopen(status_url, timeout=10).read())["journal"]["commit_seq_high"]
             == 3, "the three inserts in committed history", timeout=10)
    target = "%s dbname=tls_replay_dst user=postgres" % s.by_name()
    status, answer = post_api(http_port, "/api/replay", {"mode": "committed_history", "target": target}, timeout=120)
    check(status == 200 and answer["applied"] == 3 and not answer["failed"],
          "/api/replay to a TLS-only target: %s %r" % (status, answer))
    check(s.pg.psql("select sum(a) from replayed", dbname="tls_replay_dst") == "6", "the three rows replayed")


@test
def server_tls_ciphers_and_protocols_refuse_a_server_outside_them(ctx):
    """The primary is made TLS 1.2 at most with the one cipher ECDHE-RSA-AES128-GCM-SHA256 (ALTER SYSTEM,
    reloaded; reset at the end): server_tls_ciphers without it refuses the connection, saying
    server_tls_ciphers; with it among others the connection uses it; server_tls_protocols = tlsv1.3 refuses
    the server; the default protocols (TLS 1.2 and 1.3) take it."""
    s = tls_servers()
    cipher = "ECDHE-RSA-AES128-GCM-SHA256"

    def server_tls():
        return s.pg.psql("select version || ' ' || cipher from pg_stat_ssl where pid = pg_backend_pid()")

    s.pg.psql("alter system set ssl_max_protocol_version = 'TLSv1.2'")
    s.pg.psql("alter system set ssl_ciphers = '%s'" % cipher)
    s.pg.psql("select pg_reload_conf()")
    try:
        wait_for(lambda: server_tls() == "TLSv1.2 " + cipher, "the primary's TLS 1.2 and one cipher", timeout=10)
        t = server_tls_tern(ctx, "primary = " + s.by_name(), verify_full(s) + "\nserver_tls_ciphers = "
                            "ECDHE-RSA-AES256-GCM-SHA384")
        r = psql(t.port, "select 1", timeout=30)
        check(r.returncode != 0 and "server_tls_ciphers" in r.stderr,
              "a cipher outside server_tls_ciphers is refused, naming the key: %r" % r.stderr.strip())
        check(t.alive(), "tern is up")
        t = server_tls_tern(ctx, "primary = " + s.by_name(), verify_full(s) + "\nserver_tls_ciphers = "
                            "%s:ECDHE-RSA-AES256-GCM-SHA384" % cipher)
        row = psql_ok(t.port, SERVER_TLS_ROW)
        check(row == "t|TLSv1.2|" + cipher, "the server's cipher, one of server_tls_ciphers: %r" % row)
        t = server_tls_tern(ctx, "primary = " + s.by_name(), verify_full(s) + "\nserver_tls_protocols = tlsv1.3")
        r = psql(t.port, "select 1", timeout=30)
        check(r.returncode != 0 and "protocol" in r.stderr.lower(),
              "a TLS 1.2 server is refused with server_tls_protocols = tlsv1.3: %r" % r.stderr.strip())
        check(t.alive(), "tern is up")
        t = server_tls_tern(ctx, "primary = " + s.by_name(), verify_full(s))
        check(psql_ok(t.port, SERVER_TLS_ROW) == "t|TLSv1.2|" + cipher, "the defaults take TLS 1.2")
    finally:
        s.pg.psql("alter system reset ssl_max_protocol_version")
        s.pg.psql("alter system reset ssl_ciphers")
        s.pg.psql("select pg_reload_conf()")
        wait_for(lambda: server_tls().startswith("TLSv1.3 "), "the primary's defaults again", timeout=10)


@test
def server_tls_presents_server_tls_cert_file_to_a_server_that_asks_for_a_certificate(ctx):
    """pg_hba.conf says cert for tls_cert_user: with server_tls_cert_file and server_tls_key_file (its CN
    tls_cert_user, from the server's CA) the pool logs in as that user and pg_stat_ssl shows the certificate's
    name; without them the server refuses; a conninfo's sslcert and sslkey win over another certificate in
    server_tls_cert_file."""
    s = tls_servers()
    sql = "select current_user, client_dn from pg_stat_ssl where pid = pg_backend_pid()"
    t = server_tls_tern(ctx, "primary = " + s.by_name(), verify_full(s) +
                        "\nserver_tls_cert_file = %s\nserver_tls_key_file = %s" % s.client)
    check(psql_ok(t.port, sql, user="tls_cert_user") == "tls_cert_user|/CN=tls_cert_user", "logged in by certificate")
    t = server_tls_tern(ctx, "primary = " + s.by_name(), verify_full(s))
    r = psql(t.port, "select 1", user="tls_cert_user", timeout=30)
    check(r.returncode != 0 and "certificate" in r.stderr, "no certificate, refused: %r" % r.stderr.strip())
    t = server_tls_tern(ctx, "primary = %s sslcert=%s sslkey=%s" % ((s.by_name(),) + tuple(s.client)),
                        verify_full(s) + "\nserver_tls_cert_file = %s\nserver_tls_key_file = %s" % s.other_client)
    check(psql_ok(t.port, sql, user="tls_cert_user") == "tls_cert_user|/CN=tls_cert_user",
          "the conninfo's certificate wins")


@test
def server_tls_carries_tern_s_own_scram_login_and_auth_query(ctx):
    """[auth] mode = scram with auth_user = postgres: postgres, whose plaintext password the userlist holds,
    logs in over TLS; tls_scram, not in the userlist, is found by auth_query (its own libpq connection, over
    TLS) and logged in to the server by tern itself with the client's proof (pool/login.c, not libpq), over
    TLS too: the server asks tls_scram for SCRAM over TLS only."""
    s = tls_servers()
    t = server_tls_tern(ctx, "primary = " + s.by_name(), verify_full(s),
                        auth="[auth]\nmode = scram\nauth_file = users.txt\nauth_user = postgres",
                        files={"users.txt": '"postgres" "pgpw"\n'})
    check(psql_ok(t.port, SERVER_TLS_ROW, password="pgpw").startswith("t|TLSv1.3|"), "postgres over TLS")
    check(psql_ok(t.port, SERVER_TLS_ROW, user="tls_scram", password="scrampw").startswith("t|TLSv1.3|"),
          "tls_scram, found by auth_query, logged in by tern over TLS")
    expect_login_refused(t.port, "tls_scram", "28P01", password="wrong")


@test
def server_tls_pooled_connections_are_dropped_when_the_server_ends_them_and_closed_when_they_expire(ctx):
    """A pooled TLS connection whose backend is terminated while idle is noticed and replaced: the next
    client gets a new backend over TLS. server_idle_timeout then closes the idle ones (Terminate and
    close_notify through tern's TLS state, then libpq's close into nothing): the server sees them go, and
    tern stays up (this case also runs under ASan by hand: TERN_BINARY=build-asan/tern)."""
    s = tls_servers()
    t = server_tls_tern(ctx, "primary = " + s.by_name(), verify_full(s),
                        pool="server_login_retry = 0\nquery_wait_timeout = 20s\nserver_idle_timeout = 1s")
    first = psql_ok(t.port, "select pg_backend_pid()")
    check(psql_ok(t.port, SERVER_TLS_ROW).startswith("t|TLSv1.3|"), "over TLS")
    check(psql_ok(t.port, "select pg_backend_pid()") == first, "the pooled connection is reused")
    s.pg.psql("select pg_terminate_backend(%s)" % first)
    wait_for(lambda: s.pg.psql("select count(*) from pg_stat_activity where pid = %s" % first) == "0",
             "the backend is gone", timeout=10)
    second = psql_ok(t.port, "select pg_backend_pid()")
    check(second != first, "a new backend after the idle one was terminated: %s" % second)
    check(psql_ok(t.port, SERVER_TLS_ROW).startswith("t|TLSv1.3|"), "the new one over TLS too")
    wait_for(lambda: s.pg.psql("select count(*) from pg_stat_activity where pid = %s" % second) == "0",
             "server_idle_timeout closes the idle TLS connection", timeout=15)
    log = s.pg.psql("select 1")  # the server still serves; tern too:
    check(log == "1" and t.alive() and psql_ok(t.port, "select 7") == "7", "tern serves on")


@test
def tern_s_own_login_under_require_refuses_a_server_without_tls_with_08004(ctx):
    """A user with only a SCRAM verifier in auth_file is logged in to the server by tern itself
    (pool/login.c); under server_tls_sslmode = require, the suite's server without TLS answers its
    SSLRequest with N: the client gets 08004 at once, and the same user logs in when TLS is preferred."""
    role = "own_login_%d" % os.getpid()
    ctx.pg.psql("drop role if exists %s; create role %s login password 'ownpw'" % (role, role))
    secret = ctx.pg.psql("select rolpassword from pg_authid where rolname = '%s'" % role)
    check(secret.startswith("SCRAM-SHA-256$"), "a verifier: %r" % secret[:20])
    users = {"users.txt": '"%s" "%s"\n' % (role, secret)}
    auth = "[auth]\nmode = scram\nauth_file = users.txt"
    servers = "primary = host=127.0.0.1 port=%d" % ctx.pg.primary_port
    t = server_tls_tern(ctx, servers, "server_tls_sslmode = require", auth=auth, files=users)
    r = psql(t.port, "select 1", user=role, password="ownpw")
    check(r.returncode != 0 and "server does not support SSL" in r.stderr, "refused: %r" % r.stderr)
    check("(08004)" in t.log_tail(200), "08004 in tern's log: %r" % t.log_tail(200)[-600:])
    t = server_tls_tern(ctx, servers, "server_tls_sslmode = prefer", auth=auth, files=users)
    check(psql_ok(t.port, "select 2", user=role, password="ownpw") == "2", "prefer: in the clear")


@test
def server_tls_carries_the_monitor_s_own_scram_login(ctx):
    """The monitor logs in as tls_scram (its servers' conninfo names the user), whose auth_file entry is the
    server's SCRAM verifier alone: before a client proved the password it has no credential (both servers
    unmonitored); once a tls_scram client logged in, the monitor logs in itself with the key that client
    proved (pool/login.c), over TLS, for the server refuses TCP logins without it, and sees the primary and
    the standby; a read then runs on the replica, over TLS too."""
    s = tls_servers()
    secret = s.pg.psql("select rolpassword from pg_authid where rolname = 'tls_scram'")
    check(secret.startswith("SCRAM-SHA-256$"), "a verifier: %r" % secret[:20])
    http_port = free_port()
    servers = "primary = %s user=tls_scram\nreplica = %s user=tls_scram" % (
        s.by_name(), s.by_name(s.pg.replica_port))
    t = server_tls_tern(ctx, servers, verify_full(s),
                        auth="[auth]\nmode = scram\nauth_file = users.txt\n[admin]\nhttp_listen = 127.0.0.1:%d"
                        % http_port, files={"users.txt": '"tls_scram" "%s"\n' % secret})
    check(server_roles(http_port) == {"primary": "unmonitored", "replica": "unmonitored"},
          "no credential yet: %r" % server_roles(http_port))
    check(psql_ok(t.port, SERVER_TLS_ROW, user="tls_scram", password="scrampw").startswith("t|TLSv1.3|"),
          "tls_scram over TLS, logged in by tern with its proof")
    wait_for(lambda: server_roles(http_port) == {"primary": "primary", "replica": "standby"},
             "the monitor logs in over TLS with the key the client proved", timeout=10)
    wait_for(lambda: psql_ok(t.port, "select pg_is_in_recovery()", user="tls_scram", password="scrampw") == "t",
             "a read on the replica", timeout=10)
    check(t.alive(), "tern is up")


@test
def server_tls_keys_of_a_pgbouncer_ini_carry_over_into_the_tls_section(ctx):
    """--import-pgbouncer writes server_tls_sslmode, _ca_file, _cert_file, _key_file, _protocols and _ciphers
    into [tls] (no note names them unsupported), and the tern it configures logs in over TLS 1.3 with the
    client certificate, verifying the server by name."""
    s = tls_servers()
    workdir = tempfile.mkdtemp(prefix="tern-import-tls-")
    try:
        settings = {"server_tls_sslmode": "verify-full", "server_tls_ca_file": s.ca.crt,
                    "server_tls_cert_file": s.client.crt, "server_tls_key_file": s.client.key,
                    "server_tls_protocols": "tlsv1.3", "server_tls_ciphers": "HIGH:!aNULL"}
        with open(os.path.join(workdir, "userlist.txt"), "w") as f:
            f.write('"tls_cert_user" "unused"\n')  # the server asks for its certificate, never this
        with open(os.path.join(workdir, "pgbouncer.ini"), "w") as f:
            f.write("[databases]\npostgres = host=localhost port=%d dbname=postgres\n\n[pgbouncer]\n"
                    "listen_addr = 127.0.0.1\nlisten_port = %d\nauth_type = trust\nauth_file = userlist.txt\n"
                    "pool_mode = transaction\n" % (s.pg.primary_port, free_port())
                    + "".join("%s = %s\n" % item for item in settings.items()))
        r = subprocess.run([TERN, "--import-pgbouncer", os.path.join(workdir, "pgbouncer.ini")],
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "import: %s" % r.stderr)
        check("server_tls" not in r.stderr, "no note names a server_tls key: %s" % r.stderr)
        section = re.search(r"(?ms)^\[tls\]\n(.*?)(?=^\[|\Z)", r.stdout)
        lines = section.group(1).splitlines() if section else []
        for key, value in settings.items():
            check("%s = %s" % (key, value) in lines, "%s = %s in [tls]: %s" % (key, value, r.stdout))
        t = TernProcess(TERN, r.stdout)
        ctx.terns.append(t)
        t.start()
        row = psql_ok(t.port, "select version, client_dn from pg_stat_ssl where pid = pg_backend_pid()",
                      user="tls_cert_user")
        check(row == "TLSv1.3|/CN=tls_cert_user", "the imported [tls] in use: %r" % row)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@test
def io_uring_blocked_falls_back_to_epoll_with_one_line_or_stops_when_required(ctx):
    helper = os.path.join(os.path.dirname(os.path.abspath(TERN)), "tests", "fuzz", "no_uring_exec")
    check(os.path.exists(helper), "no_uring_exec is built next to tern (%s)" % helper)
    workdir = ctx.pg.base_dir
    ini = os.path.join(workdir, "no_uring.ini")
    with open(ini, "w") as f:
        f.write("[tern]\nlisten = 127.0.0.1:%d\nworkers = 1\nio_backend = io_uring\n" % free_port())
    r = subprocess.run([helper, TERN, "-c", ini], capture_output=True, text=True, timeout=30)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    check(r.returncode != 0, "io_backend = io_uring: non-zero exit")
    check(len(lines) == 1 and "io_uring" in lines[0] and "seccomp" in lines[0], "one line: %r" % r.stderr)
    # auto (the default, written out so TERN_IO_BACKEND leaves it): epoll, and one line saying why.
    t = TernProcess(TERN, "[tern]\nlisten = 127.0.0.1:%d\nworkers = 2\npool_mode = transaction\nio_backend = auto\n"
                    "[servers]\nprimary = host=127.0.0.1 port=%d\n" % (free_port(), ctx.pg.primary_port),
                    wrapper=[helper])
    ctx.terns.append(t)
    t.start()
    check(psql_ok(t.port, "select 1") == "1", "served on epoll")
    log = t.log_tail(200)
    why = [line for line in log.splitlines() if "io_uring is unavailable" in line]
    check(len(why) == 1 and "seccomp" in why[0], "one line names why: %r" % log)
    check(sum(": epoll, " in line for line in log.splitlines()) == 2, "each worker says epoll: %r" % log)
    t.stop()


@test
def config_errors_stop_startup_with_file_and_line(ctx):
    workdir = ctx.pg.base_dir
    ini = os.path.join(workdir, "bad.ini")
    with open(ini, "w") as f:
        f.write("[tern]\nworkers = 2\n[pool]\npool_sise = 3\n")
    r = subprocess.run([TERN, "-c", ini], capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and "%s:4:" % ini in r.stderr and "pool_sise" in r.stderr, "file:line: %r" % r.stderr)
    r = subprocess.run([TERN, "--version"], capture_output=True, text=True, timeout=30)
    check(r.returncode == 0 and r.stdout.startswith("tern "), "--version: %r" % r.stdout)
    r = subprocess.run([TERN, "--help"], capture_output=True, text=True, timeout=30)
    check(r.returncode == 0 and "-c FILE" in r.stdout, "--help: %r" % r.stdout)
    r = subprocess.run([TERN], capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and "usage" in r.stderr, "no config is a usage error: %r" % r.stderr)
    r = subprocess.run([TERN, "--help-config"], capture_output=True, text=True, timeout=30)
    check(r.returncode == 0 and all(k in r.stdout for k in ("pool_size", "ring_entries", "admin_users")),
          "--help-config lists the keys")
    r = subprocess.run([TERN, "--help-config=markdown"], capture_output=True, text=True, timeout=30)
    readme = open(os.path.join(ROOT, "README.md")).read()
    check(r.returncode == 0 and r.stdout.strip() in readme, "README's config reference is --help-config's table")


@test
def the_server_restarted_mid_session_errors_the_client_and_tern_keeps_serving(ctx):
    """Session pooling under the default tr_mode session: the primary restarted while a statement runs
    gives that statement 08007 (its outcome unknown), and the session goes on on the restarted server
    (before Transaction Replay covered session pooling, the session ended)."""
    t = ctx.tern(pool_mode="session", pool_size=4)
    with Wire(t.port) as w:
        w.login("postgres")
        check(w.query("select 1") == [["1"]], "session is up")
        w.send(message(b"Q", b"select pg_sleep(20)\0"))
        time.sleep(0.3)  # not for correctness: lets the query reach the server before the restart
        ctx.pg.restart_primary(mode="fast")
        kinds, _, sqlstate, status = w.exchange()
        check(sqlstate == "08007" and status == "I", "the statement's outcome is unknown: %r %r" % (kinds, sqlstate))
        check(w.query("select 9") == [["9"]], "the session goes on after the restart")
    wait_for(lambda: psql(t.port, "select 9").stdout.strip() == "9", "new clients are served after the restart")


@test
def a_recovery_that_stalls_on_the_new_connection_ends_within_write_timeout_secs_with_08006(ctx):
    """write_timeout_secs is one deadline for the whole recovery, not only the wait for a primary: a
    transaction replayed on a new connection whose UPDATE waits behind another session's lock (queued
    before the old backend died, so it is granted first) ends the session with 08006 once the deadline
    passes, instead of holding the client for as long as the lock is held."""
    primary = ctx.pg.primary_port
    update = "update stall_t set v = v + 1 where id = 1"
    psql_ok(primary, "drop table if exists stall_t; create table stall_t(id int primary key, v int); "
            "insert into stall_t values (1, 0)")
    t = ctx.tern(pool_size=2, more="[replay]\ntr_mode = transaction\nwrite_timeout_secs = 2\n")
    holder = Wire(primary)
    try:
        holder.login("postgres")
        with Wire(t.port) as w:
            w.login("postgres")
            w.query("begin")
            w.query(update)
            pid = psql_ok(primary, "select pid from pg_stat_activity where query = '%s'" % update)
            holder.query("begin")
            holder.send(message(b"Q", b"lock table stall_t in access exclusive mode\0"))
            wait_for(lambda: psql_ok(primary, "select count(*) from pg_locks where not granted and "
                                     "relation = 'stall_t'::regclass") == "1", "the lock queued", timeout=10)
            ctx.pg.psql("select pg_terminate_backend(%s)" % pid)
            holder.read_until_ready()  # granted: the client's backend is gone
            started = time.monotonic()
            w.send(message(b"Q", b"select 1\0"))
            error = w.expect_error_and_close()
            elapsed = time.monotonic() - started
            check(error is not None and error["C"] == "08006" and "write_timeout_secs" in error["M"],
                  "the stalled recovery ends with 08006: %r" % error)
            check(elapsed < 8, "within the deadline and the once-a-second check: %.1fs" % elapsed)
        holder.query("rollback")
        check(psql_ok(primary, "select v from stall_t") == "0", "nothing of the lost transaction committed")
    finally:
        holder.close()


@test
def a_server_connection_killed_between_transactions_in_session_pooling_moves_the_session(ctx):
    """The primary leg loses its connection while the client is idle between two transactions: under the
    default tr_mode the session moves to a new connection and the client notices nothing but a new
    backend pid (Transaction Replay in session pooling; the failover battery covers its state). Under
    tr_mode = none it ends as the reference says: the server's own 57P01 (forwarded as it arrives), then
    tern's 57P01 (one decision, session_decide_lost), and the connection closes; other clients and later
    logins are served."""
    for mode in ("session", "none"):
        http_port = free_port()
        t = ctx.tern(pool_mode="session", pool_size=4,
                     more="[replay]\ntr_mode = %s\n[admin]\nhttp_listen = 127.0.0.1:%d\n" % (mode, http_port))
        with Wire(t.port) as bystander, Wire(t.port) as w:
            bystander.login("postgres")
            w.login("postgres")
            check(w.query("begin; select 1; commit") == [["1"]], "a first transaction")
            pid = w.query("select pg_backend_pid()")[0][0]
            ctx.pg.psql("select pg_terminate_backend(%s, 10000)" % pid)
            if mode == "session":
                wait_for(lambda: metric(scrape_metrics(http_port), "tr_failovers_total") == 1,
                         "tern to take the loss (tr_failovers_total)", timeout=10)
                now = w.query("select pg_backend_pid()")[0][0]
                check(now != pid, "the session goes on, on a new backend, with no error: %s then %s" % (pid, now))
            else:
                errors = w.errors_until_close()
                codes = [e["C"] for e in errors]
                check(codes == ["57P01", "57P01"], "the server's 57P01, then tern's: %r" % errors)
                check("connection to the primary was lost" in errors[-1]["M"], "tern says what happened: %r" % errors[-1])
            check(bystander.query("select 2") == [["2"]], "the other session goes on")
        check(psql_ok(t.port, "select 3") == "3", "new clients are served")


@test
def a_client_pipelining_a_million_parses_without_sync_is_ended_and_others_never_notice(ctx):
    """A million named Parse messages, no Sync, answers unread: tern answers the first
    max_client_prepared_statements itself, then ends that client with 54000; its memory stays bounded
    and another session goes on."""
    t = ctx.tern(pool_size=2, extra="max_client_prepared_statements = 10000")
    bystander, w = Wire(t.port), Wire(t.port)
    try:
        bystander.login("postgres")
        w.login("postgres")
        idle_kib = proc_status_kib(t.pid, "VmRSS")

        def flood():
            try:
                for k in range(1000):  # 1000 batches of 1000 distinct names
                    w.sock.sendall(b"".join(parse("s%d_%d" % (k, i), "select 1") for i in range(1000)))
            except OSError:
                pass  # tern ended the session: the rest goes nowhere

        sender = threading.Thread(target=flood)
        sender.start()
        completes, error = 0, None
        while True:
            msg = w.read_message()
            if msg is None:
                break
            if msg[0] == b"1":
                completes += 1
            elif msg[0] == b"E":
                error = error_fields(msg[1])
        sender.join(timeout=60)
        check(not sender.is_alive(), "the sender was let go")
        check(completes == 10000, "the first 10000 Parses were answered: %d" % completes)
        check(error is not None and error["C"] == "54000" and "max_client_prepared_statements" in error.get("H", ""),
              "then 54000 naming the limit: %r" % error)
        peak_kib = proc_status_kib(t.pid, "VmHWM")
        check(peak_kib - idle_kib < 64 * 1024, "peak RSS %d KiB is %d KiB above idle" % (peak_kib, peak_kib - idle_kib))
        check(bystander.query("select 7") == [["7"]], "the other session never noticed")
    finally:
        bystander.close()
        w.close()
    check(psql_ok(t.port, "select 8") == "8", "new clients are served")


@test
def a_client_that_pipelines_without_reading_is_paused_and_loses_nothing(ctx):
    """A million Parse/Close pairs that tern answers itself (2 million replies, 10 MB) sent by a client
    that reads nothing until it has sent them all: tern stops reading the client once its answers back
    up, as PostgreSQL does, so its memory stays bounded; then every answer arrives, in order."""
    t = ctx.tern(pool_size=2)
    w = Wire(t.port)
    try:
        w.login("postgres")
        check(w.query("select 1") == [["1"]], "warm")
        idle_kib = proc_status_kib(t.pid, "VmRSS")
        pairs = 1_000_000
        chunk = (parse("p", "select 1") + close("S", "p")) * 10_000
        progress = [0]

        def send_all():
            for _ in range(pairs // 10_000):
                w.sock.sendall(chunk)
                progress[0] += 1
            w.sock.sendall(SYNC)

        w.sock.settimeout(60)
        sender = threading.Thread(target=send_all, daemon=True)
        sender.start()
        # Wait (bounded) until the sender is stuck: tern stopped reading, the socket buffers are full.
        deadline, last, still = time.monotonic() + 60, -1, 0
        while sender.is_alive() and time.monotonic() < deadline and still < 10:
            time.sleep(0.1)
            still = still + 1 if progress[0] == last else 0
            last = progress[0]
        check(sender.is_alive(), "the sender is held back (%d of %d batches sent)" % (progress[0], pairs // 10_000))
        paused_kib = proc_status_kib(t.pid, "VmRSS")
        check(paused_kib - idle_kib < 64 * 1024, "RSS %d KiB above idle while the client does not read"
              % (paused_kib - idle_kib))
        expected = (b"1\0\0\0\x04" + b"3\0\0\0\x04") * pairs + b"Z\0\0\0\x05I"
        got = bytearray(w.buf)
        w.buf = b""
        while len(got) < len(expected):
            data = w.sock.recv(1 << 20)
            if not data:
                break
            got += data
        sender.join(timeout=60)
        check(not sender.is_alive(), "everything was sent once the client read")
        check(bytes(got) == expected, "every answer arrived in order: %d of %d bytes" % (len(got), len(expected)))
        check(w.query("select 9") == [["9"]], "the session goes on")
    finally:
        w.close()


@test
def clients_are_spread_over_the_workers_by_their_sessions_not_by_the_kernel(ctx):
    """Two workers: the kernel gives every client of the Unix socket to one worker's accept (and spreads TCP
    clients by a hash), so a worker with more sessions than another hands a client it accepted to the one
    with the fewest. 16 clients over the Unix socket, then 16 more over TCP, each held open: the workers'
    sessions (the console's own among them) differ by one at most, and the hand-overs are counted."""
    import psycopg
    sockdir = tempfile.mkdtemp(prefix="tern-sock-")
    os.chmod(sockdir, 0o755)
    conns = []
    http_port = free_port()
    try:
        t = ctx.tern(workers=2, sections={"tern": "unix_socket_dir = %s" % sockdir},
                     extra="\n[admin]\nadmin_users = postgres\nhttp_listen = 127.0.0.1:%d\n" % http_port)
        for host in (sockdir, "127.0.0.1"):
            for i in range(16):
                conns.append(psycopg.connect(host=host, port=t.port, user="postgres", dbname="postgres",
                                             autocommit=True))
                check(conns[-1].execute("select %d" % i).fetchone()[0] == i, "client %d over %s served" % (i, host))
            rows = [line.split("|") for line in psql_ok(t.port, "show workers", dbname="tern").splitlines()]
            sessions = sorted(int(r[1]) for r in rows)
            check(len(sessions) == 2 and sessions[1] - sessions[0] <= 1,
                  "after the clients over %s the workers hold %r sessions" % (host, sessions))
        accepted = [int(r[2]) for r in rows]
        handed = sum(int(r[12]) for r in rows)
        if max(accepted) - min(accepted) >= 4:  # (the epoll backend's workers race for the Unix socket's clients)
            check(handed > 0, "the hand-overs are counted (handed_over): %r" % rows)
        wait_for(lambda: metric(scrape_metrics(http_port), "tern_clients_handed_over_total") == handed,
                 "/metrics to count the %d hand-overs SHOW WORKERS counts (it has %s)"
                 % (handed, metric(scrape_metrics(http_port), "tern_clients_handed_over_total")), timeout=5)
    finally:
        for c in conns:
            c.close()
        shutil.rmtree(sockdir, ignore_errors=True)


@test
def admin_show_workers_and_show_ends_count_what_each_worker_did(ctx):
    t = ctx.tern(pool_size=2, workers=2, extra="\n[admin]\nadmin_users = postgres\n")
    for i in range(6):
        check(psql_ok(t.port, "select %d" % i) == str(i), "client %d served" % i)
    rows = [line.split("|") for line in psql_ok(t.port, "show workers", dbname="tern").splitlines()]
    check(len(rows) == 2 and sorted(r[0] for r in rows) == ["0", "1"], "a row per worker: %r" % rows)
    total = lambda column: sum(int(r[column]) for r in rows)
    check(total(2) >= 7, "accepted counts every connection (6 clients and this console): %r" % rows)
    check(total(3) + total(4) >= 6, "each transaction took a connection locally or from the pool: %r" % rows)
    check(all(int(r[8]) > 0 and int(r[10]) > 0 for r in rows), "each ring ran passes and completions: %r" % rows)
    ends = dict((line.split("|")[0], line.split("|")) for line in
                psql_ok(t.port, "show ends", dbname="tern").splitlines())
    check("client_terminate" in ends and int(ends["client_terminate"][2]) >= 6,
          "the clients that said goodbye are counted by reason: %r" % ends)
    check(ends["client_terminate"][1] == "", "a reason the client is not told has no SQLSTATE: %r" % ends)


@test
def negotiate_protocol_version_is_answered_as_postgresql_answers_it(ctx):
    """For startup packets asking for a newer minor version or naming protocol options, tern's
    NegotiateProtocolVersion is PostgreSQL 15's byte for byte but for the newest version offered, which
    is 3.2 (PostgreSQL 18's) where PostgreSQL 15 offers 3.0: the full version code (libpq 18 rejects a
    bare 0 as a downgrade), and every unknown _pq_. option named back. A client asking for 3.2 itself
    gets no NegotiateProtocolVersion and a 32-byte cancel key."""
    t = ctx.tern(pool_size=2)
    cases = [
        ("3.1 (never a version)", 196609, {}, 196608),
        ("3.9999 (libpq 19's default)", 196608 + 9999, {}, 196610),
        ("3.0 with an option", 196608, {"_pq_.compression": "on"}, 196608),
        ("3.5 with two options", 196613, {"_pq_.a": "1", "_pq_.b": "2"}, 196610),
        ("3.2 with an option", 196610, {"_pq_.x": "1"}, 196610),
    ]

    def first_message(port, packet):
        with Wire(port) as w:
            w.send(packet)
            return w.read_message()

    for name, version, params, offered in cases:
        packet = startup_packet("postgres", version=version, params=params)
        theirs = first_message(ctx.pg.primary_port, packet)
        ours = first_message(t.port, packet)
        check(theirs is not None and theirs[0] == b"v", "%s: PostgreSQL negotiates: %r" % (name, theirs))
        expected = (theirs[0], struct.pack("!I", offered) + theirs[1][4:])
        check(ours == expected, "%s: tern %r, PostgreSQL (newest version aside) %r" % (name, ours, theirs))
    with Wire(t.port) as w:
        w.send(startup_packet("postgres", version=196613))
        check(w.read_message()[0] == b"v", "negotiated")
        msgs = w.read_until_ready()
        check(msgs[-1][0] == b"Z", "then the login goes on at 3.2: %r" % msgs[-1:])
        keys = [body for kind, body in msgs if kind == b"K"]
        check(len(keys) == 1 and len(keys[0]) == 4 + 32, "a 32-byte cancel key: %r" % keys)


@test
def protocol_3_2_clients_get_long_cancel_keys_routed_like_short_ones(ctx):
    t = ctx.tern(pool_mode="transaction", pool_size=2, workers=2)
    with Wire(t.port) as w:
        w.send(startup_packet("postgres", version=196610))
        msgs = w.read_until_ready()
        check(not any(kind == b"v" for kind, _ in msgs), "3.2 as asked: no NegotiateProtocolVersion")
        body = [body for kind, body in msgs if kind == b"K"][0]
        pid, key = struct.unpack("!I", body[:4])[0], body[4:]
        check(isinstance(key, bytes) and len(key) == 32, "a 32-byte key: %r" % (w.key,))
        check(w.query("select 1") == [["1"]], "served at 3.2")
        start_sleep_absorbing_stray_cancels(ctx, w, 0)
        for wrong in (key[:4], key[:31] + bytes([key[31] ^ 1]), key + b"x"):
            send_cancel(t.port, pid, wrong)  # a wrong, short or long key is ignored
        # Half a second for a wrongly accepted cancel to show; the query runs 30 s.
        check(not select.select([w.sock], [], [], 0.5)[0], "no wrong key cancelled the query")
        expect_cancelled(t.port, w, pid, key)
    # psql (libpq 15) asks for 3.0 and gets 3.0's 4-byte key, as before.
    check(psql_ok(t.port, "select 2") == "2", "a 3.0 client")


@test
def sigterm_lets_a_busy_client_go_at_the_boundary_between_two_transactions(ctx):
    """A client that starts its next transaction as soon as its COMMIT is answered is never idle when
    the drain's periodic check looks: it is let go at the ReadyForQuery that leaves it idle, with 57P01,
    long before shutdown_timeout, and every transaction it saw committed is in the table."""
    psql_ok(ctx.pg.primary_port, "drop table if exists boundary_t; create table boundary_t(a int)")
    for pool_mode in ("transaction", "session"):
        psql_ok(ctx.pg.primary_port, "truncate boundary_t")
        t = ctx.tern(pool_mode=pool_mode, pool_size=2, sections={"tern": "shutdown_timeout = 60s"})
        committed, error, last = 0, None, None
        with Wire(t.port) as w:
            w.login("postgres")
            w.query("select 1")
            started = None
            while error is None and committed < 100000:
                if committed == 20:
                    t.proc.send_signal(signal.SIGTERM)
                    started = time.monotonic()
                try:
                    w.send(message(b"Q", b"begin; insert into boundary_t values (1); commit\0"))
                    msgs = w.read_until_ready()
                    last = [m[1] for m in msgs if m[0] == b"C"]
                    committed += 1
                except WireError as err:
                    error = err.fields
                except (OSError, EOFError):
                    break
            if error is None:
                error = w.expect_error_and_close()
        check(error is not None and error["C"] == "57P01", "%s: told tern is shutting down: %r" % (pool_mode, error))
        check(started is not None and time.monotonic() - started < 10, "%s: let go long before shutdown_timeout"
              % pool_mode)
        check(last and last[-1] == b"COMMIT\0", "%s: the last answer before it was a COMMIT: %r" % (pool_mode, last))
        t.proc.wait(timeout=15)
        check(t.proc.returncode == 0, "%s: tern exits 0 once drained" % pool_mode)
        rows = int(psql_ok(ctx.pg.primary_port, "select count(*) from boundary_t"))
        check(rows == committed, "%s: every acknowledged COMMIT, and nothing else, is there: %d rows, %d commits"
              % (pool_mode, rows, committed))


@test
def sigterm_serves_a_client_welcomed_just_before_it_and_a_query_that_waits_for_a_server(ctx):
    """Neither is between two transactions when the drain looks: a client welcomed that has yet to ask
    (pgbench -C's next connection) gets its first transaction, and a query parked for a server (sent,
    not yet run) is answered; each goes with 57P01 at its ReadyForQuery. A client idle after a
    transaction goes at once, which shows the drain has looked; one welcomed that stays silent goes
    a second later, not at shutdown_timeout."""
    t = ctx.tern(pool_size=1, workers=1, sections={"tern": "shutdown_timeout = 60s"},
                 extra="\n[admin]\nadmin_users = postgres\n")
    idle, holder, parked, welcomed, silent = (Wire(t.port) for _ in range(5))
    console = admin_console(t.port)
    try:
        for w in (idle, holder, parked):
            w.login("postgres")
        check(idle.query("select 1") == [["1"]], "the idle client ran a transaction")
        holder.query("begin")
        holder.query("select 1")  # the one server connection is the holder's
        parked.send(message(b"Q", b"select 2\0"))
        wait_for(lambda: any(r["state"] == "waiting" for r in admin_table(console, "show clients")[1]),
                 "the parked query waits for the server", timeout=10)
        console.close()
        welcomed.login("postgres")
        silent.login("postgres")
        t.proc.send_signal(signal.SIGTERM)
        error = idle.expect_error_and_close()
        check(error is not None and error["C"] == "57P01", "the idle client goes at once: %r" % error)
        check(holder.query("commit") == [], "the open transaction commits")
        error = holder.expect_error_and_close()
        check(error is not None and error["C"] == "57P01", "then the holder goes: %r" % error)
        rows = [data_row(body) for kind, body in parked.read_until_ready() if kind == b"D"]
        check(rows == [["2"]], "the parked query is answered once the server is free: %r" % rows)
        error = parked.expect_error_and_close()
        check(error is not None and error["C"] == "57P01", "then it goes: %r" % error)
        check(welcomed.query("select 3") == [["3"]], "the welcomed client's first transaction is served")
        error = welcomed.expect_error_and_close()
        check(error is not None and error["C"] == "57P01", "then it goes: %r" % error)
        error = silent.expect_error_and_close()
        check(error is not None and error["C"] == "57P01", "the silent client goes too: %r" % error)
        t.proc.wait(timeout=15)
        check(t.proc.returncode == 0, "tern exits 0 once drained")
    finally:
        for w in (idle, holder, parked, welcomed, silent, console):
            w.close()


@test
def the_admin_console_answers_as_pgbouncer_and_a_flush_gets_an_answer(ctx):
    """Exporters and scripts ask for database pgbouncer: it opens tern's console. A pipelining driver
    that sends Flush instead of Sync gets an answer instead of waiting for ever."""
    t = ctx.tern(pool_size=2, extra="\n[admin]\nadmin_users = postgres\n")
    check(psql_ok(t.port, "show version", dbname="pgbouncer").startswith("tern "), "pgbouncer is the console too")
    check(psql_ok(t.port, "show version", dbname="tern").startswith("tern "), "and tern still is")
    with Wire(t.port) as w:
        w.login("postgres", database="pgbouncer")
        w.send(parse("", "show version") + bind("") + execute() + FLUSH)
        try:
            msgs = w.read_until_ready()
            check(False, "the Flush is answered with an error: %r" % msgs)
        except WireError as err:
            check(err.sqlstate == "0A000", "the Flush is answered: %r" % err.fields)
        check(w.query("show version")[0][0].startswith("tern "), "the console goes on")


@test
def five_thousand_startup_packets_without_a_password_grow_nothing(ctx):
    """Clients that send a startup packet (distinct user and database names) and never authenticate
    make no pool entry: SHOW POOLS is where it was, and once they are gone tern's memory is too.
    A client that does authenticate gets its pool entry as before."""
    t = ctx.tern(auth="md5", users=auth_users(ctx), extra="max_client_conn = 6000\n[admin]\nadmin_users = alice\n")
    pools = lambda: psql_ok(t.port, "show pools", dbname="pgbouncer", user="alice", password="alicepw").splitlines()
    check(psql_ok(t.port, "select 1", user="alice", password="alicepw") == "1", "warm")
    rows_before = pools()
    idle_kib = proc_status_kib(t.pid, "VmRSS")
    for batch in range(10):
        socks = []
        for i in range(500):
            sock = socket.create_connection(("127.0.0.1", t.port), timeout=10)
            sock.sendall(startup_packet("u%d_%d" % (batch, i), database="d%d_%d" % (batch, i)))
            socks.append(sock)
        for sock in socks:
            check(sock.recv(1)[:1] == b"R", "asked for a password")
            sock.close()
    wait_for(lambda: len(pools()) == len(rows_before), "the pool rows are where they were", timeout=10)
    check(pools() == rows_before, "no row for a client that never authenticated: %r" % pools()[-3:])
    wait_for(lambda: proc_status_kib(t.pid, "VmRSS") - idle_kib < memory_slack_kib(16 * 1024),
             "tern's memory comes back (%d KiB above idle)" % (proc_status_kib(t.pid, "VmRSS") - idle_kib),
             timeout=20)
    check(psql_ok(t.port, "select current_user", user="carol", password="carolpw") == "carol", "a real client")
    check(any(r.startswith("postgres|carol|") for r in pools()), "gets its pool row: %r" % pools())


@test
def a_flood_of_unauthenticated_startups_leaves_tern_s_memory_flat(ctx):
    """5000 clients one after another, each sending only a startup packet with a user and database of its
    own, then closing: under md5 (never authenticated) and trust (the server refuses each login, or the
    client left before tern asked it) tern's resident memory 1 s after the last is within 5 MiB of where
    it was, and a second 5000 add nothing more (within 1 MiB). Under trust a login whose client has left
    is given up before it reaches the server (tern_pool_open_dropped_total), and the keys go at once.
    Before: trust grew 47 MB per 5000 (a queue of logins for clients long gone, 9 kB of key each)."""
    users = auth_users(ctx)  # (makes the roles)
    for mode in ("trust", "md5"):
        http_port = free_port()
        with allocator_returning_memory():
            t = ctx.tern(auth=mode, users=users if mode == "md5" else None,
                         extra="max_client_conn = 6000\n[admin]\nhttp_listen = 127.0.0.1:%d\n" % http_port)

        def flood(batch):
            for i in range(5000):
                with socket.create_connection(("127.0.0.1", t.port), timeout=10) as sock:
                    sock.sendall(startup_packet("u%d_%d" % (batch, i), database="d%d_%d" % (batch, i)))
                    check(sock.recv(1)[:1] == b"R", "an authentication message first")
            time.sleep(1)  # the issue's measure: RSS 1 s after the last client
            return proc_status_kib(t.pid, "VmRSS")

        check(psql_ok(t.port, "select 1", user="alice", password="alicepw") == "1", "warm (%s)" % mode)
        idle_kib = proc_status_kib(t.pid, "VmRSS")
        first_kib = flood(0)
        second_kib = flood(1)
        print("  %s: RSS %d KiB idle, +%d after 5000, +%d after 10000" % (
            mode, idle_kib, first_kib - idle_kib, second_kib - idle_kib), flush=True)
        # The issue's 5 MiB holds for the builds without a sanitizer; AddressSanitizer's shadow and
        # redzones triple what the flood's peak leaves (measured: +8 MiB, against +1.7 in release).
        bound_kib = 15 * 1024 if memory_slack_kib(1) > 1 else 5 * 1024
        check(first_kib - idle_kib <= bound_kib, "%s: 5000 startups grew RSS %d KiB (bound %d)" % (
            mode, first_kib - idle_kib, bound_kib))
        check(second_kib - first_kib <= memory_slack_kib(1024), "%s: the next 5000 grew RSS %d KiB more" % (
            mode, second_kib - first_kib))
        if mode == "trust":
            samples = scrape_metrics(http_port)
            check(metric(samples, "tern_pool_open_dropped_total", server="primary") > 0,
                  "logins of clients gone were given up: %r" % metric(samples, "tern_pool_open_dropped_total",
                                                                     server="primary"))
        check(psql_ok(t.port, "select current_user", user="carol", password="carolpw") == "carol", "a real client")
        t.stop()


@test
def pool_entries_with_no_clients_and_no_connections_are_freed(ctx):
    """Authenticated clients with 150 distinct keys (their startup options differ) each leave a pool
    entry and a server connection; once they are gone and server_idle_timeout closes the connections,
    the entries go too (SHOW POOLS back to where it was)."""
    t = ctx.tern(pool_mode="transaction", extra="[admin]\nadmin_users = postgres\n",
                 sections={"pool": "server_idle_timeout = 1s"})
    pools = lambda: psql_ok(t.port, "show pools", dbname="pgbouncer").splitlines()
    check(psql_ok(t.port, "select 1") == "1", "warm")
    rows_before = len(pools())
    clients = []
    try:
        for i in range(150):
            w = Wire(t.port)
            clients.append(w)
            w.login("postgres", params={"options": "-c work_mem=%dkB" % (64 + i)})
            check(w.query("show work_mem") == [["%dkB" % (64 + i)]], "its own key")
        # (The warm-up's own entry may already be gone: its connection idles past server_idle_timeout.)
        check(len(pools()) >= 150, "an entry per key while its client is there: %d" % len(pools()))
    finally:
        for w in clients:
            w.close()
    wait_for(lambda: len(pools()) <= rows_before, "the unused entries are freed (%d rows)" % len(pools()),
             timeout=15)
    check(psql_ok(t.port, "select 2") == "2", "tern serves on")


def tern_config_text(ctx, listen, more_tern="", pool_mode="transaction"):
    return ("[tern]\nlisten = %s\nworkers = 2\npool_mode = %s\n%s\n[servers]\nprimary = host=127.0.0.1 port=%d\n"
            "[pool]\npool_size = 4\n" % (listen, pool_mode, more_tern, ctx.pg.primary_port))


@test
def a_server_connection_is_reused_only_by_clients_of_the_listen_address_it_was_opened_for(ctx):
    """The client startup identity in the pool's match key is the endpoint the client came in on: a
    connection opened for a client of one listen address (or of the Unix socket) is never handed to a
    client of another, and is to the next client of its own."""
    ports = [free_port(), free_port()]
    sockdir = tempfile.mkdtemp(prefix="tern-sock-")
    os.chmod(sockdir, 0o755)
    try:
        config = tern_config_text(ctx, "127.0.0.1:%d, 127.0.0.1:%d" % tuple(ports), "unix_socket_dir = %s" % sockdir)
        t = TernProcess(TERN, config.replace("workers = 2", "workers = 1"))
        ctx.terns.append(t)
        t.start()

        def backend(port, host=()):
            return psql_ok(port, "select pg_backend_pid()", extra_args=host)

        first = backend(ports[0])
        second = backend(ports[1])
        over_unix = backend(ports[0], ["-h", sockdir])
        check(len({first, second, over_unix}) == 3, "each endpoint has its own connection: %s, %s, %s"
              % (first, second, over_unix))
        check(backend(ports[0]) == first and backend(ports[1]) == second,
              "and each endpoint's next client reuses its own")
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)


@test
def several_listen_addresses_a_unix_socket_a_pidfile_and_a_logfile(ctx):
    ports = [free_port(), free_port()]
    sockdir = tempfile.mkdtemp(prefix="tern-sock-")
    os.chmod(sockdir, 0o755)
    try:
        t = TernProcess(TERN, tern_config_text(
            ctx, "127.0.0.1:%d, 127.0.0.1:%d" % tuple(ports),
            "unix_socket_dir = %s\npidfile = tern.pid\nlogfile = tern-file.log" % sockdir))
        ctx.terns.append(t)
        t.start()
        for port in ports:
            check(psql_ok(port, "select 1") == "1", "served on %d" % port)
        r = subprocess.run(["psql", "-X", "-A", "-t", "-h", sockdir, "-p", str(ports[0]), "-U", "postgres", "-d",
                            "postgres", "-c", "select 2"], capture_output=True, text=True, timeout=30, env=env())
        check(r.returncode == 0 and r.stdout.strip() == "2", "served on the Unix socket: %r" % r.stderr)
        pidfile = os.path.join(t.workdir, "tern.pid")
        check(open(pidfile).read().strip() == str(t.pid), "the pidfile names tern")
        logfile = os.path.join(t.workdir, "tern-file.log")
        wait_for(lambda: "listening on" in open(logfile).read(), "the log goes to the logfile", timeout=10)
        # logrotate's way: move the file, SIGHUP, and the log starts a new one.
        os.rename(logfile, logfile + ".1")
        t.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: os.path.exists(logfile) and "reloaded" in open(logfile).read(), "a new logfile after SIGHUP",
                 timeout=10)
        # A second tern on any of the same addresses, or with the same pidfile, refuses to start and
        # names the first.
        # (The Unix socket is named by the port: the second listens on the same port elsewhere on loopback.)
        for listen, more in (("127.0.0.1:%d" % ports[1], ""), ("127.0.0.2:%d" % ports[0],
                                                                  "unix_socket_dir = %s" % sockdir),
                             ("127.0.0.1:%d" % free_port(), "pidfile = %s" % pidfile)):
            workdir = tempfile.mkdtemp(prefix="tern-second-")
            try:
                with open(os.path.join(workdir, "tern.ini"), "w") as f:
                    f.write(tern_config_text(ctx, listen, more))
                try:
                    r = subprocess.run([os.path.abspath(TERN), "-c", "tern.ini"], cwd=workdir, capture_output=True, text=True,
                                       timeout=10)
                except subprocess.TimeoutExpired:
                    raise AssertionError("a second tern started beside the first (%s %s)" % (listen, more))
                check(r.returncode != 0 and ("pid %d" % t.pid) in r.stderr and "--takeover" in r.stderr,
                      "a second tern refuses (%s): %r" % (listen + " " + more, r.stderr))
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
        t.stop()
        check(not os.path.exists(pidfile), "the pidfile goes at exit")
        check(not os.path.exists(os.path.join(sockdir, ".s.PGSQL.%d" % ports[0])), "so does the socket")
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)


@test
def a_rolling_restart_with_takeover_loses_no_transaction(ctx):
    """The new tern starts with --takeover beside the old one; the old one, sent SIGTERM, lets each
    client go between two transactions. Clients that reconnect when told 57P01 (or refused while a
    listener closes) commit every transaction they start, and every one they saw committed is there."""
    psql_ok(ctx.pg.primary_port, "drop table if exists rolling_t; create table rolling_t(id int primary key)")
    port = free_port()
    config = tern_config_text(ctx, "127.0.0.1:%d" % port, "shutdown_timeout = 20s")
    old = TernProcess(TERN, config)
    ctx.terns.append(old)
    old.start()
    committed, errors, stop = [], [], threading.Event()
    counter = iter(range(1, 1000000))
    lock = threading.Lock()

    def client():
        w = None
        while not stop.is_set():
            try:
                if w is None:
                    w = Wire(port)
                    w.login("postgres")
                with lock:
                    n = next(counter)
                w.query("begin")
                w.query("insert into rolling_t values (%d)" % n)
                w.query("commit")
                with lock:
                    committed.append(n)
            except (WireError, OSError, EOFError) as exc:
                fields = getattr(exc, "fields", {})
                # Told to go between transactions, or a connection refused or reset while a listener
                # closed: reconnect. Anything else (an error inside a transaction) is a lost one.
                if fields and fields.get("C") != "57P01":
                    errors.append(fields)
                if w is not None:
                    w.close()
                w = None
        if w is not None:
            w.close()

    threads = [threading.Thread(target=client) for _ in range(6)]
    for th in threads:
        th.start()
    # pgbench beside them, a connection per transaction (-C), as a pooler's clients often are.
    bench = pgbench_in_background(port, "postgres", 8, 2, "insert into rolling_t values (-(random() * 1e9)::int) "
                                  "on conflict do nothing", extra=["-C"])
    try:
        wait_for(lambda: len(committed) > 200, "traffic through the old tern", timeout=20)
        new = TernProcess(TERN, config)
        new._argv.append("--takeover")
        ctx.terns.append(new)
        new.start()
        wait_for(lambda: "takeover" in new.log_tail(20), "the new tern listens beside the old one", timeout=10)
        before = len(committed)
        old.proc.send_signal(signal.SIGTERM)
        old.proc.wait(timeout=30)
        check(old.proc.returncode == 0, "the old tern drained and exited 0")
        wait_for(lambda: len(committed) > before + 300, "traffic goes on through the new tern", timeout=20)
    finally:
        stop.set()
        for th in threads:
            th.join(timeout=30)
    processed = pgbench_finish(bench, "pgbench -C across the restart")
    check(processed > 0, "pgbench ran: %d" % processed)
    check(not errors, "no transaction failed: %r" % errors[:5])
    in_table = set(int(x) for x in psql_ok(ctx.pg.primary_port, "select id from rolling_t").split())
    missing = [n for n in committed if n not in in_table]
    check(not missing, "every acknowledged commit is in the table: %d missing" % len(missing))


@test
def writes_go_to_the_server_that_says_it_is_the_primary_whatever_its_name(ctx):
    """[servers] names the streaming replica `primary` and the real primary `main`: the topology monitor
    asks each (pg_is_in_recovery) and writes go to `main`; a third server that does not answer is down."""
    ctx.pg.wait_replica_caught_up()
    config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 2\npool_mode = transaction\n[servers]\n"
              "primary = host=127.0.0.1 port=%d\nmain = host=127.0.0.1 port=%d\ngone = host=127.0.0.1 port=%d\n"
              "[routing]\nmonitor_interval_ms = 100\n[pool]\npool_size = 2\n"
              % (free_port(), ctx.pg.replica_port, ctx.pg.primary_port, free_port()))
    t = TernProcess(TERN, config)
    ctx.terns.append(t)
    t.start()
    check("writes go to server main" in t.log_tail(20), "the monitor found the primary: %s" % t.log_tail(20))
    check(psql_ok(t.port, "select pg_is_in_recovery()") == "f", "served by the primary")
    psql_ok(t.port, "drop table if exists role_t; create table role_t(a int); insert into role_t values (1)")
    check(psql_ok(ctx.pg.primary_port, "select count(*) from role_t") == "1", "the write is on the primary")


# ---------------------------------------------------------------- reads on replicas (issue 10)


def routing_tern(ctx, level="primary", routing="", pool="", dbname=None, replica_port=None):
    """A tern in transaction pooling over the harness's primary and streaming replica (or what listens on
    replica_port in front of it)."""
    config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 2\npool_mode = transaction\n[servers]\n"
              "primary = host=127.0.0.1 port=%d\nreplica = host=127.0.0.1 port=%d\n"
              "[routing]\nmonitor_interval_ms = 100\ndefault_consistency = %s\n%s\n"
              "[pool]\npool_size = 8\nserver_login_retry = 1s\n%s\n"
              % (free_port(), ctx.pg.primary_port, replica_port or ctx.pg.replica_port, level, routing, pool))
    t = TernProcess(TERN, config)
    ctx.terns.append(t)
    t.start()
    return t


@test
def servers_reached_over_unix_sockets_serve_the_pool_the_monitor_and_a_moved_session(ctx):
    """[servers] at host=/dir (PostgreSQL's socket directory): the pool logs in over the Unix socket (the
    backend has no inet address); in transaction pooling the monitor finds the primary and the replica
    there (a read-only transaction runs on the replica); in session pooling Transaction Replay moves a
    session whose backend is terminated to a new connection over the socket, the client noticing nothing
    but a new pid."""
    sockdir = ctx.pg.base_dir
    for mode in ("transaction", "session"):
        config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 1\npool_mode = %s\n[servers]\n"
                  "primary = host=%s port=%d\nreplica = host=%s port=%d\n"
                  "[routing]\nmonitor_interval_ms = 100\ndefault_consistency = session\n"
                  "[pool]\npool_size = 4\nserver_login_retry = 1s\n"
                  % (free_port(), mode, sockdir, ctx.pg.primary_port, sockdir, ctx.pg.replica_port))
        t = TernProcess(TERN, config)
        ctx.terns.append(t)
        t.start()
        check(psql_ok(t.port, "select inet_server_addr() is null") == "t",
              "%s pooling: the pool's connection is a Unix socket's" % mode)
        with Wire(t.port) as w:
            w.login("postgres")
            if mode == "transaction":
                w.query("begin read only")
                check(w.query("select pg_is_in_recovery(), inet_server_addr() is null") == [["t", "t"]],
                      "the monitor saw the replica over its socket: the read-only transaction runs there")
                w.query("commit")
                continue
            pid = w.query("select pg_backend_pid()")[0][0]
            ctx.pg.psql("select pg_terminate_backend(%s)" % pid)
            wait_for(lambda: psql_ok(ctx.pg.primary_port,
                                     "select count(*) from pg_stat_activity where pid = %s" % pid) == "0",
                     "the backend gone")
            rows = w.query("select pg_backend_pid(), inet_server_addr() is null, pg_is_in_recovery()")
            check(rows[0][0] != pid and rows[0][1:] == ["t", "f"],
                  "the session moved to a new primary connection over the socket: %r (was %s)" % (rows, pid))
        check(t.alive(), "tern is up")


@test
def set_tern_behind_an_unsynced_batch_in_a_replica_transaction_ends_only_that_session(ctx):
    """In a BEGIN READ ONLY that runs on the replica, a client sends Parse, Bind, Execute without a Sync,
    then SET tern.consistency: tern cannot answer the SET in its turn among the replica's answers still to
    come. That session ends with 0A000 saying so; tern serves the next client. Before: an assertion ended
    the whole process."""
    t = routing_tern(ctx, level="session")
    with Wire(t.port) as w:
        w.login("postgres")
        w.query("begin read only")
        check(w.query("select pg_is_in_recovery()") == [["t"]], "the transaction runs on the replica")
        w.send(parse("", "select 1") + bind("") + execute() + message(b"Q", b"set tern.consistency = primary\0"))
        fields = w.expect_error_and_close()
        check(fields is not None and fields["C"] == "0A000" and "Sync" in fields["M"], "0A000, closed: %r" % fields)
    check(t.alive(), "tern is up")
    with Wire(t.port) as w:
        w.login("postgres")
        check(w.query("select 1") == [["1"]], "the next client")


@test
def server_side_prepare_runs_unnamed_statements_by_tern_s_name_and_stays_correct(ctx):
    """[pool] server_side_prepare = on: pgbench -M extended's unnamed statements are prepared once per
    server connection under tern's name (pg_prepared_statements on a pool connection lists them) and run
    by it. Correct across DDL (an added index, an added column a SELECT * reads: in autocommit tern runs
    the statement again, prepared anew, and the client sees no error), a changed search_path (the same text
    finds the other schema's table), two clients with different search_paths on one server connection,
    and a statement that fails to prepare (the client sees its error where PostgreSQL puts it, and the next
    one works)."""
    import psycopg
    ctx.pg.psql("drop schema if exists ssp_a cascade; drop schema if exists ssp_b cascade; "
                "create schema ssp_a; create schema ssp_b; create table ssp_a.t(id int, v text); "
                "create table ssp_b.t(id int, v text); insert into ssp_a.t values (1, 'a'); "
                "insert into ssp_b.t values (1, 'b'); drop table if exists ssp_ddl; "
                "create table ssp_ddl(id int); insert into ssp_ddl values (1)")
    pgbench(ctx.pg.primary_port, ["-i", "-q", "-s", "1"])
    t = ctx.tern(pool_size=1)  # server_side_prepare is on by default
    out = pgbench(t.port, ["-n", "-S", "-M", "extended", "-c", "4", "-t", "200"])
    check("actually processed: 800/800" in out, "pgbench -M extended: %s" % out[-300:])
    names = psql_ok(t.port, "select count(*) from pg_prepared_statements where name like 'tern\\_%'")
    check(int(names) >= 1, "the pool connection holds tern's statements: %r" % names)
    dsn = "host=127.0.0.1 port=%d user=postgres dbname=postgres" % t.port
    with psycopg.connect(dsn, autocommit=True) as a, psycopg.connect(dsn, autocommit=True) as b:
        query = "select v from t where id = %s"
        a.execute("set search_path = ssp_a")
        b.execute("set search_path = ssp_b")
        for _ in range(3):  # one server connection (pool_size 1): each client's search_path restored on it
            check(a.execute(query, (1,)).fetchone() == ("a",), "client a: schema ssp_a")
            check(b.execute(query, (1,)).fetchone() == ("b",), "client b: schema ssp_b")
        a.execute("set search_path = ssp_b")
        check(a.execute(query, (1,)).fetchone() == ("b",), "a changed search_path: the same text, the other table")
        ddl = "select * from public.ssp_ddl where id = %s"
        check(a.execute(ddl, (1,)).fetchone() == (1,), "before the DDL")
        a.execute("create index on public.ssp_ddl(id)")
        check(a.execute(ddl, (1,)).fetchone() == (1,), "after an index: replanned by the server")
        a.execute("alter table public.ssp_ddl add column w int default 7")
        row = a.execute(ddl, (1,)).fetchone()  # (0A000 on the server: hidden, and run again)
        check(row == (1, 7), "the new column, prepared again: %r" % (row,))
        try:
            a.execute("select no_such_column from public.ssp_ddl where id = %s", (1,))
            raise AssertionError("a bad statement ran")
        except psycopg.errors.UndefinedColumn:
            pass
        check(a.execute(ddl, (1,)).fetchone() == (1, 7), "the next statement works")


@test
def server_side_prepare_runs_a_stale_autocommit_statement_again_and_leaves_a_transaction_s_error(ctx):
    """server_side_prepare (the default): a SELECT * or an INSERT ... RETURNING * that tern keeps prepared
    on the server, whose table gained a column since, gets 0A000 "cached plan must not change result type"
    from PostgreSQL. In autocommit the request runs again, prepared anew: the client sees one answer, its
    ParseComplete once, the new columns, and the INSERT ran once (the error rolled its first try back);
    /metrics counts the re-runs. Inside a transaction the error is the client's (the transaction is
    aborted, as with a prepared statement of its own), and so is it when a Query was pipelined behind the
    request (its answer would come first); the next autocommit run prepares again. Before this change,
    each autocommit case got the 0A000."""
    ctx.pg.psql("drop table if exists ssp_stale; create table ssp_stale(id int)")
    http_port = free_port()
    t = ctx.tern(pool_size=1, sections={"pool": "server_side_prepare = on"},
                 more="[admin]\nhttp_listen = 127.0.0.1:%d" % http_port)
    select = "select * from ssp_stale order by id"
    insert = "insert into ssp_stale values ($1) returning *"

    def run(w, sql, *params):
        kinds, rows, err, _ = w.exchange(parse("", sql), bind("", params), describe("P", ""), execute(), SYNC)
        return kinds, rows, err

    with Wire(t.port) as w:
        w.login("postgres")
        for i in ("1", "2"):  # a text sent again is prepared under tern's name
            check(run(w, insert, i) == ("12TDCZ", [[i]], None), "insert %s" % i)
            got = run(w, select)
            check(got[0][:3] == "12T" and got[2] is None, "select %s: %r" % (i, got))
        ctx.pg.psql("alter table ssp_stale add column v int default 7")
        got = run(w, select)
        check(got == ("12TDDCZ", [["1", "7"], ["2", "7"]], None),
              "the select after the DDL: one answer, its ParseComplete once, the new column: %r" % (got,))
        ctx.pg.psql("alter table ssp_stale add column x int default 8")
        check(run(w, insert, "3") == ("12TDCZ", [["3", "7", "8"]], None), "the insert after the DDL: one answer")
        check(ctx.pg.psql("select count(*) from ssp_stale where id = 3") == "1", "the insert ran once")
        check(run(w, select)[2] is None, "the select, prepared again")
        ctx.pg.psql("alter table ssp_stale add column y int default 9")
        check(w.query("begin") == [], "a transaction")
        kinds, rows, err = run(w, select)
        check(kinds.endswith("EZ") and err == "0A000", "in a transaction the error is the client's: %r"
              % ((kinds, rows, err),))
        w.query("rollback")
        check(run(w, select) == ("12TDDDCZ", [[i, "7", "8", "9"] for i in ("1", "2", "3")], None),
              "autocommit afterwards: prepared again")
        # Pipelined: a Query sent behind the stale request is answered before a re-run could be, so the
        # error stays the client's, and the answers come in the order asked.
        ctx.pg.psql("alter table ssp_stale add column z int default 10")
        w.send(parse("", select) + bind("", ()) + describe("P", "") + execute() + SYNC +
               message(b"Q", b"select 42\0"))
        try:
            w.read_until_ready()
            raise AssertionError("the pipelined stale request was answered without its error")
        except WireError as err:
            check(err.sqlstate == "0A000", "the stale request's own error: %r" % err.fields)
        check([data_row(body) for kind, body in w.read_until_ready() if kind == b"D"] == [["42"]],
              "then the pipelined Query's answer")
        check(run(w, select)[1][0] == ["1", "7", "8", "9", "10"], "and the statement works after")
    metrics = lambda: urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http_port, timeout=10).read().decode()
    wait_for(lambda: "tern_stale_plan_reruns_total 2\n" in metrics(), "two re-runs counted: %s"
             % [line for line in metrics().splitlines() if line.startswith("tern_stale")], timeout=5)


def replica_commits(pg, dbname):
    """Transactions the replica counted for dbname (its own statistics, not tern's)."""
    return int(pg.psql("select pg_stat_clear_snapshot(); select xact_commit from pg_stat_database "
                       "where datname = '%s'" % dbname, port=pg.replica_port).splitlines()[-1])


@test
def replica_reads_are_never_stale_in_session_and_strict_mode(ctx):
    """The consistency checker (tests/integration/consistency.py, psycopg): writers commit through tern
    and read back on their own connection (session) or readers on other connections read what was
    acknowledged before (strict), in the simple and the extended protocol (psycopg's own Parse/Bind/
    Execute batches, its named statements past prepare_threshold): 20000 checked reads, none stale. The
    replica served most of them, as the replica itself counts them; the same check at `eventual` does
    find stale reads (the checker can fail)."""
    import consistency
    if ctx.pg.psql("select count(*) from pg_database where datname = 'routing'") == "0":
        ctx.pg.psql("create database routing")
    ctx.pg.wait_replica_caught_up()
    http_port = free_port()
    t = routing_tern(ctx, pool="[admin]\nhttp_listen = 127.0.0.1:%d" % http_port)
    replica_before = replica_commits(ctx.pg, "routing")
    all_reads = 0
    for level, protocol, reads in (("session", "simple", 7000), ("strict", "simple", 7000),
                                   ("session", "extended", 3000), ("strict", "extended", 3000)):
        probes_before = metric(scrape_metrics(http_port), "tern_server_probes_total", server="primary")
        r = consistency.run(t.port, level, protocol, reads, dbname="routing")
        if level == "strict":  # a probe of the primary per read that asked while none was waiting to go
            probes = metric(scrape_metrics(http_port), "tern_server_probes_total", server="primary") - probes_before
            print("  %s/%s: %d probes of the primary" % (level, protocol, probes), flush=True)
            check(0 < probes <= r["reads"], "%s/%s: the monitor probed the primary %d times for %d reads"
                  % (level, protocol, probes, r["reads"]))
        print("  %s/%s: %d reads, %d stale, %d writes in %.1fs" % (level, protocol, r["reads"], r["stale"],
                                                                   r["writes"], r["seconds"]), flush=True)
        check(not r["errors"], "%s/%s ran without errors: %s" % (level, protocol, r["errors"]))
        check(r["reads"] >= reads, "%s/%s checked %d reads" % (level, protocol, r["reads"]))
        check(r["stale"] == 0, "%s/%s: %d stale reads, e.g. %s" % (level, protocol, r["stale"], r["examples"]))
        all_reads += r["reads"]
    # Backends flush their statistics at most once a second, idle ones within ten.
    wait_for(lambda: replica_commits(ctx.pg, "routing") - replica_before >= all_reads // 2,
             "the replica to have served at least half of the %d reads (it counts %d)"
             % (all_reads, replica_commits(ctx.pg, "routing") - replica_before), timeout=20, interval=0.5)
    print("  the replica counted %d transactions for %d reads" % (replica_commits(ctx.pg, "routing") - replica_before,
                                                                  all_reads))
    stale = 0
    for _ in range(10):  # the control: eventual reads miss fresh writes now and then
        stale += consistency.run(t.port, "eventual", "simple", 2000, dbname="routing", check="own")["stale"]
        if stale:
            break
    check(stale > 0, "at eventual the same check finds stale reads (the checker can fail)")


@test
def writes_locking_reads_and_unsafe_functions_never_reach_a_replica(ctx):
    """At eventual (any replica), a plain read is the replica's, but a write, SELECT ... FOR UPDATE, a
    writing CTE, nextval, SELECT INTO, a user function not in read_functions, a quoted call, and every
    statement of an explicit transaction run on the primary (each names its server with
    pg_is_in_recovery() in the same statement; on a replica the writes would fail with 25006)."""
    ctx.pg.psql("drop table if exists routing_t; create table routing_t(a int); insert into routing_t values (1);"
                "drop sequence if exists routing_s; create sequence routing_s;"
                "create or replace function routing_f() returns int language sql as 'select 1';"
                "create or replace function routing_g() returns int language sql as 'select 2'")
    ctx.pg.wait_replica_caught_up()
    t = routing_tern(ctx, level="eventual", routing="read_functions = routing_g, other_fn")
    def on_replica(sql):  # the first row's first column ("t" or "f"), past psql's command tags
        return [line.split("|")[0] for line in psql_ok(t.port, sql).splitlines() if line[:1] in ("t", "f")][0]

    check(on_replica("select pg_is_in_recovery()") == "t", "a plain read goes to the replica")
    check(on_replica("select pg_is_in_recovery(), routing_g()") == "t", "a function in read_functions may")
    check(on_replica("select pg_is_in_recovery(), lower('X'), now() is not null") == "t", "built-ins may")
    for sql in ("select pg_is_in_recovery() from routing_t for update",
                "select pg_is_in_recovery() from routing_t for share",
                "with w as (insert into routing_t values (2) returning 1) select pg_is_in_recovery() from w",
                "select pg_is_in_recovery(), nextval('routing_s')",
                "select pg_is_in_recovery(), routing_f()",
                'select pg_is_in_recovery(), "routing_g"()',
                "select pg_is_in_recovery(), pg_advisory_lock(7), pg_advisory_unlock(7)",
                "select pg_is_in_recovery(), set_config('work_mem', '5MB', false)",
                "begin; select pg_is_in_recovery(); commit",
                "insert into routing_t values (3) returning pg_is_in_recovery()"):
        check(on_replica(sql) == "f", "the primary ran: %s" % sql)
    psql_ok(t.port, "drop table if exists routing_into; select 1 as a into routing_into")
    check(ctx.pg.psql("select count(*) from routing_into") == "1", "SELECT INTO ran on the primary")


@test
def tern_consistency_is_tern_s_own_setting(ctx):
    """SET/RESET/SHOW tern.consistency are answered by tern and never reach a server (its
    current_setting stays unset there); bad values and other tern.* names are refused with PostgreSQL's
    SQLSTATEs; the startup option -c tern.consistency=... sets it too, and a bad one refuses the login."""
    t = routing_tern(ctx, level="session")
    out = psql_ok(t.port, "show tern.consistency")
    check(out == "session", "the default shows: %r" % out)
    with Wire(t.port) as w:
        w.login("postgres")
        check(w.query("set tern.consistency = strict") == [], "SET answered")
        check(w.query("show tern.consistency") == [["strict"]], "the client's own level")
        check(w.query("SET SESSION tern.consistency TO 'eventual'") == [], "SET SESSION ... TO 'x'")
        # (once the monitor knows the replica's lag: right after tern starts it may not yet)
        wait_for(lambda: w.query("select pg_is_in_recovery()") == [["t"]], "eventual reads to go to the replica",
                 timeout=10)
        check(w.query("select current_setting('tern.consistency', true) is null") == [["t"]],
              "the server never saw the setting")
        check(w.query("reset tern.consistency") == [] and w.query("show tern.consistency") == [["session"]],
              "RESET goes back to the default")
        for sql, state in (("set tern.consistency = bogus", "22023"), ("set tern.other = 1", "42704"),
                           ("set local tern.consistency = strict", "0A000"),
                           ("set tern.consistency = strict; select 1", "0A000")):
            try:
                w.query(sql)
                raise AssertionError("%s was accepted" % sql)
            except WireError as err:
                check(err.sqlstate == state, "%s: %s, got %r" % (sql, state, err.fields))
        check(w.query("show tern.consistency") == [["session"]], "the refusals changed nothing")
    r = subprocess.run(["psql", "-X", "-A", "-t", "-h", "127.0.0.1", "-p", str(t.port), "-U", "postgres", "-c",
                        "show tern.consistency", "-c", "select pg_is_in_recovery()", "postgres"],
                       capture_output=True, text=True, timeout=30,
                       env=clean_env({"PGOPTIONS": "-c tern.consistency=eventual -c work_mem=7MB"}))
    check(r.returncode == 0 and r.stdout.split() == ["eventual", "t"], "the startup option: %r %r"
          % (r.stdout, r.stderr))
    r = subprocess.run(["psql", "-X", "-h", "127.0.0.1", "-p", str(t.port), "-U", "postgres", "-c", "select 1"],
                       capture_output=True, text=True, timeout=30,
                       env=clean_env({"PGOPTIONS": "--tern.consistency=sometimes"}))
    check(r.returncode != 0 and "tern.consistency" in r.stderr, "a bad startup level is refused: %s" % r.stderr)


@test
def pipelined_reads_writes_and_settings_are_answered_in_order(ctx):
    """A client sends reads, a write, SET tern.consistency and more reads in one go: routing takes the
    reads one at a time, the rest waits unread, and every answer comes back in the order sent (a read
    queued behind a write goes with it to the primary: it must not pass it)."""
    ctx.pg.psql("drop table if exists routing_p; create table routing_p(a int)")
    ctx.pg.wait_replica_caught_up()
    t = routing_tern(ctx, level="eventual")
    with Wire(t.port) as w:
        w.login("postgres")
        batch = ["select 1, pg_is_in_recovery()", "insert into routing_p values (1)",
                 "select 2, pg_is_in_recovery()", "set tern.consistency = primary", "select 3, pg_is_in_recovery()",
                 "show tern.consistency", "set tern.consistency = session", "insert into routing_p values (2)",
                 "select 4, count(*) from routing_p"]
        w.send(b"".join(message(b"Q", sql.encode() + b"\0") for sql in batch))
        rows = []
        for _ in batch:
            rows.append([data_row(body) for kind, body in w.read_until_ready() if kind == b"D"])
        check(rows == [[["1", "t"]], [], [["2", "f"]], [], [["3", "f"]], [["primary"]], [], [], [["4", "2"]]],
              "answers in order: %r" % rows)


@test
def reads_wait_while_replay_is_paused_then_the_primary_serves_them(ctx):
    """pg_wal_replay_pause() on the replica: a session read after a write waits wait_timeout_ms for the
    replica, then the primary serves it (with the write in it); resumed, the replica serves reads again."""
    ctx.pg.psql("drop table if exists routing_w; create table routing_w(a int)")
    ctx.pg.wait_replica_caught_up()
    t = routing_tern(ctx, level="session", routing="wait_timeout_ms = 600")
    try:
        with Wire(t.port) as w:
            w.login("postgres")
            check(w.query("select pg_is_in_recovery()") == [["t"]], "before: the replica serves reads")
            ctx.pg.psql("select pg_wal_replay_pause()", port=ctx.pg.replica_port)
            w.query("insert into routing_w values (1)")
            started = time.monotonic()
            rows = w.query("select count(*), pg_is_in_recovery() from routing_w")
            waited = time.monotonic() - started
            check(rows == [["1", "f"]], "the primary served the read with the write in it: %r" % rows)
            check(0.5 <= waited < 5, "the read waited about wait_timeout_ms first: %.2fs" % waited)
            ctx.pg.psql("select pg_wal_replay_resume()", port=ctx.pg.replica_port)
            wait_for(lambda: w.query("select count(*), pg_is_in_recovery() from routing_w") == [["1", "t"]],
                     "the replica to serve the read once it replayed the write", timeout=20)
    finally:
        ctx.pg.psql("select pg_wal_replay_resume()", port=ctx.pg.replica_port, check=False)


@test
def replica_lag_bounds_and_wait_timeout_zero_send_reads_to_the_primary(ctx):
    """Replay paused and WAL written past max_replica_lag_bytes: eventual reads go to the primary once the
    monitor sees the lag, and back to the replica once it replays; at session with wait_timeout_ms = 0 a
    read the replica is not known to have goes to the primary at once, not after a wait."""
    ctx.pg.psql("drop table if exists routing_lag; create table routing_lag(a int)")
    ctx.pg.wait_replica_caught_up()
    t = routing_tern(ctx, level="eventual", routing="max_replica_lag_bytes = 4kB\nmax_replica_lag_ms = 0\nwait_timeout_ms = 0")
    try:
        with Wire(t.port) as w:
            w.login("postgres")
            check(w.query("select pg_is_in_recovery()") == [["t"]], "before: the replica serves reads")
            ctx.pg.psql("select pg_wal_replay_pause()", port=ctx.pg.replica_port)
            w.query("insert into routing_lag select generate_series(1, 2000)")  # far more than 4 kB of WAL
            wait_for(lambda: w.query("select pg_is_in_recovery()") == [["f"]],
                     "eventual reads to leave the replica past max_replica_lag_bytes", timeout=4)
            w.query("set tern.consistency = session")
            w.query("insert into routing_lag values (0)")
            started = time.monotonic()
            check(w.query("select count(*), pg_is_in_recovery() from routing_lag") == [["2001", "f"]],
                  "session: the primary serves the read")
            check(time.monotonic() - started < 0.5, "with wait_timeout_ms = 0, at once")
            ctx.pg.psql("select pg_wal_replay_resume()", port=ctx.pg.replica_port)
            w.query("set tern.consistency = eventual")
            wait_for(lambda: w.query("select pg_is_in_recovery()") == [["t"]],
                     "eventual reads back on the replica once it caught up", timeout=20)
    finally:
        ctx.pg.psql("select pg_wal_replay_resume()", port=ctx.pg.replica_port, check=False)


@test
def a_stopped_replica_sends_reads_to_the_primary_without_errors_and_is_used_again(ctx):
    """The replica stopped: reads (eventual) go to the primary with no client error, whether tern still
    thinks the replica is up or not, simple queries and extended-protocol batches (a named statement the
    lost batch gave is the client's once); started again, the replica serves reads again."""
    t = routing_tern(ctx, level="eventual")
    with Wire(t.port) as w:
        w.login("postgres")
        check(w.query("select pg_is_in_recovery()") == [["t"]], "before: the replica serves reads")
        try:
            ctx.pg.stop_replica("immediate")
            # At once, on the pooled replica connection that is dead: a batch naming a statement.
            kinds, rows, err, _ = w.exchange(parse("lost", "select $1::int, pg_is_in_recovery()"), bind("lost", ["7"]),
                                             execute(), SYNC)
            check((kinds, rows, err) == ("12DCZ", [["7", "f"]], None), "the lost batch, on the primary: %r"
                  % ((kinds, rows, err),))
            for i in range(20):  # at once (pooled replica connections are dead), and after the monitor saw it
                check(w.query("select %d, pg_is_in_recovery()" % i) == [[str(i), "f"]], "read %d on the primary" % i)
                kinds, rows, err, _ = w.exchange(bind("lost", [str(i)]), execute(), SYNC)
                check((kinds, rows, err) == ("2DCZ", [[str(i), "f"]], None), "batch %d on the primary: %r"
                      % (i, (kinds, rows, err)))
                time.sleep(0.05)
        finally:
            ctx.pg.start_replica()
        wait_for(lambda: w.query("select pg_is_in_recovery()") == [["t"]], "the replica to serve reads again",
                 timeout=30, interval=0.2)
    check("replica is now down" in t.log_tail(200) or "server replica is now" in t.log_tail(200),
          "the monitor saw it go: %s" % t.log_tail(20))


@test
def a_read_whose_replica_connection_is_terminated_runs_again_on_the_primary(ctx):
    """A replica backend terminated (pg_terminate_backend: FATAL 57P01, then the connection closes) while
    it runs a read, before any row: tern hides what the replica said and the primary serves the read, in
    the simple protocol and in extended-protocol batches, unnamed and named (a named statement the lost
    batch gave is the client's once); the replica serves reads again after."""
    t = routing_tern(ctx, level="eventual")

    def sql(case):  # sleeps on the replica only, until terminated
        return "select pg_sleep(case when pg_is_in_recovery() then 30 else 0 end), '%s', pg_is_in_recovery()" % case

    def terminated(w, case, *messages):
        w.send(b"".join(messages))
        find = ("select pid from pg_stat_activity where query like '%%%s%%' and state = 'active' "
                "and pid <> pg_backend_pid()" % case)
        wait_for(lambda: ctx.pg.psql(find, port=ctx.pg.replica_port) != "", "the read %s on the replica" % case,
                 timeout=10)
        ctx.pg.psql("select pg_terminate_backend(pid) from (%s) r" % find, port=ctx.pg.replica_port)
        kinds, rows = "", []
        while not kinds.endswith("Z"):
            kind, body = w.read_message()
            kinds += kind.decode()
            if kind == b"D":
                rows.append(data_row(body)[1:])
        check(rows == [[case, "f"]], "%s: the primary served it: %r %r" % (case, kinds, rows))
        return kinds

    with Wire(t.port) as w:
        w.login("postgres")
        check(terminated(w, "lost_q", message(b"Q", sql("lost_q").encode() + b"\0")) == "TDCZ", "one answer")
        check(terminated(w, "lost_u", parse("", sql("lost_u")), bind(""), describe("P", ""), execute(), SYNC)
              == "12TDCZ", "one answer to the unnamed batch")
        check(terminated(w, "lost_n", parse("lost_n", sql("lost_n")), bind("lost_n"), execute(), SYNC) == "12DCZ",
              "one answer to the named batch")
        check(terminated(w, "lost_n", bind("lost_n"), execute(), SYNC) == "2DCZ", "the named statement again")
        kinds, _, err, _ = w.exchange(parse("lost_n", "select 1"), SYNC)
        check((kinds, err) == ("EZ", "42P05"), "the name is the client's once: %r" % ((kinds, err),))
        check(w.query("select pg_is_in_recovery()") == [["t"]], "the replica serves reads again")
        # The pooled replica connection, terminated while idle (its FATAL and FIN wait unread in the
        # pool): tern never hands it out, and a BEGIN READ ONLY gets a fresh one on the replica.
        tern_backends = ("select pid from pg_stat_activity where backend_type = 'client backend' "
                         "and application_name not in ('psql', 'tern monitor')")
        ctx.pg.psql("select pg_terminate_backend(pid, 10000) from (%s) r" % tern_backends, port=ctx.pg.replica_port)
        w.query("begin read only")
        check(w.query("select pg_is_in_recovery(), current_setting('transaction_read_only')") == [["t", "on"]],
              "the read-only transaction runs on the replica, on a live connection")
        w.query("commit")
        check(w.query("select pg_is_in_recovery()") == [["t"]], "the replica serves reads after it")
    lost = t.log_tail(400).count("was lost before it answered")
    check(lost == 4, "tern re-ran 4 reads (%d): %s" % (lost, t.log_tail(10)))


@test
def metrics_and_status_count_the_reads_sent_and_show_servers_names_roles(ctx):
    """/metrics on [admin] http_listen, parsed by prometheus_client's own text parser: servers up with
    their roles, pools per server, and the routing counters equal to the reads sent (eventual: straight to
    the replica; session after a write: to the replica, most after a wait, which the histogram counts);
    /api/status says the same in JSON; SHOW SERVERS gains server, role, lag and LSN columns."""
    import json
    import urllib.error
    import urllib.request
    ctx.pg.psql("drop table if exists routing_m; create table routing_m(a int)")
    ctx.pg.wait_replica_caught_up()
    http_port = free_port()
    t = routing_tern(ctx, level="eventual",
                     pool="[admin]\nhttp_listen = 127.0.0.1:%d\nadmin_users = postgres" % http_port)
    base = "http://127.0.0.1:%d" % http_port

    before = scrape_metrics(http_port)
    check(metric(before, "tern_server_up", server="primary") == 1 and metric(before, "tern_server_up", server="replica") == 1,
          "both servers up")
    check(metric(before, "tern_server_role", server="replica", role="standby") == 1, "the replica is a standby")
    check(metric(before, "tern_server_writes", server="primary") == 1, "writes go to the primary")
    eventual, session = 40, 30
    with Wire(t.port) as w:
        w.login("postgres")
        for i in range(eventual):
            check(w.query("select %d, pg_is_in_recovery()" % i) == [[str(i), "t"]], "eventual read %d" % i)
        w.query("set tern.consistency = session")
        for i in range(session):
            w.query("insert into routing_m values (%d)" % i)
            check(w.query("select count(*) from routing_m where a = %d" % i) == [["1"]], "session read %d" % i)

    def routed(samples):
        return (metric(samples, "tern_route_reads_total", path="replica") - metric(before, "tern_route_reads_total", path="replica"),
                metric(samples, "tern_route_reads_total", path="replica_after_wait")
                - metric(before, "tern_route_reads_total", path="replica_after_wait"))
    wait_for(lambda: sum(routed(scrape_metrics(http_port))) == eventual + session, "the counters to take in %d reads (have %r)"
             % (eventual + session, routed(scrape_metrics(http_port))), timeout=10)
    after = scrape_metrics(http_port)
    direct, waited = routed(after)
    check(direct >= eventual, "eventual reads went to the replica at once: %d" % direct)
    check(metric(after, "tern_route_wait_seconds_count") == metric(after, "tern_route_reads_total", path="replica_after_wait")
          + metric(after, "tern_route_reads_total", path="primary", reason="wait_timeout"),
          "every waited read is in the histogram")
    for reason in ("wait_timeout", "no_replica", "replica_lost"):
        check(metric(after, "tern_route_reads_total", path="primary", reason=reason) == 0, "no fallback: %s" % reason)
    check(metric(after, "tern_pool_connections", server="replica", state="free")
          + metric(after, "tern_pool_connections", server="replica", state="used") >= 1, "a pool on the replica")
    check(metric(after, "tern_pool_opened_total", server="replica") >= 1, "the replica's connections counted")
    status = json.loads(urllib.request.urlopen(base + "/api/status", timeout=10).read())
    roles = {server["name"]: server["role"] for server in status["servers"]}
    check(roles == {"primary": "primary", "replica": "standby"}, "status roles: %r" % roles)
    check(status["routing"]["replica"] + status["routing"]["replica_after_wait"]
          >= metric(before, "tern_route_reads_total", path="replica") + eventual + session, "status counts the reads")
    for path, method, code in (("/nope", "GET", 404), ("/metrics", "POST", 405)):
        try:
            urllib.request.urlopen(urllib.request.Request(base + path, method=method, data=b"" if method == "POST" else None),
                                   timeout=10)
            raise AssertionError("%s %s answered 200" % (method, path))
        except urllib.error.HTTPError as err:
            check(err.code == code, "%s %s: %d, expected %d" % (method, path, err.code, code))
    rows = [line.split("|") for line in psql_ok(t.port, "show servers", dbname="pgbouncer").splitlines()]
    check(any(r[18] == "replica" and r[19] == "standby" for r in rows) and
          any(r[18] == "primary" and r[19] == "primary" for r in rows), "SHOW SERVERS names servers and roles: %r" % rows)


@test
def a_replica_of_weight_zero_serves_no_reads(ctx):
    """[servers] replica = ... weight=0: tern knows it (its role shows) but routes no read to it."""
    config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 1\npool_mode = transaction\n[servers]\n"
              "primary = host=127.0.0.1 port=%d\nreplica = host=127.0.0.1 port=%d weight=0\n"
              "[routing]\ndefault_consistency = eventual\n[admin]\nadmin_users = postgres\n"
              % (free_port(), ctx.pg.primary_port, ctx.pg.replica_port))
    t = TernProcess(TERN, config)
    ctx.terns.append(t)
    t.start()
    for i in range(5):
        check(psql_ok(t.port, "select pg_is_in_recovery()") == "f", "read %d on the primary" % i)


@test
def a_read_the_replica_refuses_runs_again_on_the_primary_and_the_client_sees_one_answer(ctx):
    """A read_functions entry that writes: the replica refuses the read (25006) before any row, tern hides
    the refusal and what came before it and the primary serves the read; the client gets one answer and
    no error, in the simple protocol and in extended-protocol batches, unnamed and named. An error the
    primary would give too (division by zero) reaches the client from the replica."""
    ctx.pg.psql("drop table if exists routing_r; create table routing_r(a int);"
                "create or replace function routing_writer() returns int language sql as "
                "'insert into routing_r values (1) returning a'")
    ctx.pg.wait_replica_caught_up()
    http_port = free_port()
    t = routing_tern(ctx, level="eventual", routing="read_functions = routing_writer",
                     pool="[admin]\nhttp_listen = 127.0.0.1:%d" % http_port)
    with Wire(t.port) as w:
        w.login("postgres")
        w.send(message(b"Q", b"select routing_writer() as w, pg_is_in_recovery()\0"))
        messages = w.read_until_ready()
        kinds = "".join(kind.decode() for kind, _ in messages)
        rows = [data_row(body) for kind, body in messages if kind == b"D"]
        check(kinds == "TDCZ", "one answer, no error: %r" % kinds)
        check(rows == [["1", "f"]], "the primary served it: %r" % rows)
        try:
            w.query("select 1 / (a - a) from (select 1 as a) s, (select pg_is_in_recovery()) r")
            raise AssertionError("division by zero was answered")
        except WireError as err:
            check(err.sqlstate == "22012", "the replica's own error reaches the client: %r" % err.fields)
        check(w.query("select pg_is_in_recovery()") == [["t"]], "reads go on to the replica")
        # The same in extended-protocol batches: the replica's ParseComplete, BindComplete and
        # RowDescription (and the ParseComplete tern made up for a named statement) are hidden with the
        # refusal; the primary's answer is the only one, and a named statement is the client's once.
        sql = "select routing_writer() as w, pg_is_in_recovery()"
        kinds, rows, err, _ = w.exchange(parse("", sql), bind(""), describe("P", ""), execute(), SYNC)
        check((kinds, rows, err) == ("12TDCZ", [["1", "f"]], None), "an unnamed batch: %r" % ((kinds, rows, err),))
        kinds, rows, err, _ = w.exchange(parse("rw", sql), bind("rw"), execute(), SYNC)
        check((kinds, rows, err) == ("12DCZ", [["1", "f"]], None), "a named batch: %r" % ((kinds, rows, err),))
        kinds, rows, err, _ = w.exchange(bind("rw"), execute(), SYNC)
        check((kinds, rows, err) == ("2DCZ", [["1", "f"]], None), "the named statement again: %r" % ((kinds, rows, err),))
        kinds, rows, err, _ = w.exchange(parse("rr", "select pg_is_in_recovery()"), bind("rr"), execute(), SYNC)
        check((kinds, rows, err) == ("12DCZ", [["t"]], None), "a read the replica serves: %r" % ((kinds, rows, err),))
        kinds, _, err, _ = w.exchange(parse("rw", "select 1"), SYNC)
        check((kinds, err) == ("EZ", "42P05"), "the name given in a re-run batch is in use: %r" % ((kinds, err),))
    check(ctx.pg.psql("select count(*) from routing_r") == "4", "each write ran once, on the primary")
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http_port, timeout=10).read().decode()
    wait_for(lambda: 'tern_route_reads_total{path="primary",reason="replica_error"} 4' in
             urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http_port, timeout=10).read().decode(),
             "the re-run counted (%s)" % [line for line in text.splitlines() if "replica_error" in line], timeout=5)


@test
def extended_protocol_batches_of_reads_go_to_a_replica_and_any_write_keeps_the_batch_on_the_primary(ctx):
    """Extended-protocol batches are read up to their Sync before routing decides: unnamed and named
    statements that read go to the replica (a named one is prepared there as on the primary); a batch
    with a write in it, or that asks for a Flush, runs whole on the primary; pgbench -M extended and
    -M prepared select-only run on the replica."""
    ctx.pg.psql("drop sequence if exists routing_xs; create sequence routing_xs")
    ctx.pg.wait_replica_caught_up()
    http_port = free_port()
    t = routing_tern(ctx, level="eventual", pool="[admin]\nhttp_listen = 127.0.0.1:%d" % http_port)
    with Wire(t.port) as w:
        w.login("postgres")
        kinds, rows, err, _ = w.exchange(parse("", "select pg_is_in_recovery()"), bind(""), execute(), SYNC)
        check(err is None and rows == [["t"]], "an unnamed read on the replica: %r %r" % (kinds, rows))
        # A batch that arrives in two reads (split inside a message header): routing waits for the rest.
        batch = parse("", "select 7, pg_is_in_recovery()") + bind("") + execute() + SYNC
        w.send(batch[:3])
        time.sleep(0.2)  # two reads on tern's side, not one
        kinds, rows, err, _ = w.exchange(batch[3:])
        check(err is None and rows == [["7", "t"]], "a batch read in two parts: %r %r" % (kinds, rows))
        kinds, rows, err, _ = w.exchange(parse("r1", "select $1::int + 1, pg_is_in_recovery()"), bind("r1", ["41"]),
                                         execute(), SYNC)
        check(err is None and rows == [["42", "t"]], "a named read on the replica: %r" % rows)
        kinds, rows, err, _ = w.exchange(bind("r1", ["1"]), execute(), SYNC)
        check(err is None and rows == [["2", "t"]], "the named statement again, Bind alone: %r" % rows)
        kinds, rows, err, _ = w.exchange(parse("", "select pg_is_in_recovery()"), bind(""), execute(),
                                         parse("", "select nextval('routing_xs'), pg_is_in_recovery()"), bind(""),
                                         execute(), SYNC)
        check(err is None and [r[-1] for r in rows] == ["f", "f"], "a batch with a write runs whole on the primary: %r"
              % rows)
        kinds, rows, err, _ = w.exchange(bind("r1", ["5"]), execute(), SYNC)
        check(err is None and rows == [["6", "t"]], "the named statement, prepared on the primary too, still runs: %r"
              % rows)
        w.send(parse("", "select pg_is_in_recovery()") + describe("S", "") + FLUSH)
        got = "".join(w.read_message()[0].decode() for _ in range(3))  # ParseComplete, ParameterDescription, RowDescription
        check(got == "1tT", "a Flush is answered at once (the batch is not held for a Sync): %r" % got)
        kinds, rows, err, _ = w.exchange(bind(""), execute(), SYNC)
        check(err is None and rows == [["f"]], "the rest of a flushed batch: on the primary: %r" % rows)
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write("\\set n random(1, 1000)\nSELECT :n + 1, pg_is_in_recovery();\n")
        script.flush()
        for mode in ("extended", "prepared"):
            out = pgbench(t.port, ["-n", "-M", mode, "-c", "4", "-t", "200", "-f", script.name])
            processed, failed = pgbench_summary(out)
            check(processed == 800 and failed == 0, "pgbench -M %s: %r" % (mode, (processed, failed)))
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http_port, timeout=10).read().decode()
    wait_for(lambda: float(re.search(r'^tern_route_reads_total\{path="replica"\} (\S+)$',
                                     urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http_port,
                                                            timeout=10).read().decode(), re.M).group(1)) >= 1600,
             "pgbench's reads on the replica (%s)" % [l for l in text.splitlines() if "route_reads" in l], timeout=5)


@test
def digests_count_calls_time_and_rows_per_fingerprint(ctx):
    """SHOW DIGESTS and /api/digests: queries that differ only in constants (or comments) are one
    fingerprint, with their calls, rows and time, in the simple and the extended protocol (unnamed and
    named statements, several Executes in a batch); the text shown has '?' for literals."""
    import json
    http_port = free_port()
    t = ctx.tern(extra="[admin]\nadmin_users = postgres\nhttp_listen = 127.0.0.1:%d\n" % http_port)
    with Wire(t.port) as w:
        w.login("postgres")
        for i in range(5):
            w.query("select %d from generate_series(1, 3)" % i)
        w.query("/* a comment */ select 9 from generate_series(1, 3)")
        for _ in range(2):
            w.query("select pg_sleep(0.05)")
        for i in range(3):  # the extended protocol: the unnamed statement, and a named one bound twice
            w.exchange(parse("", "select $1::int + 0"), bind("", [str(i)]), execute(), SYNC)
        w.exchange(parse("n1", "select x from generate_series(1, $1::int) x"), bind("n1", ["4"]), execute(), SYNC)
        w.exchange(bind("n1", ["2"]), execute(), bind("n1", ["1"]), execute(), SYNC)

    def digests():
        rows = [line.split("|") for line in psql_ok(t.port, "show digests", dbname="pgbouncer").splitlines()]
        return {r[5]: r for r in rows}
    wait_for(lambda: "select ? from generate_series(?, ?)" in digests() and "select pg_sleep(?)" in digests(),
             "both digests (have %r)" % list(digests()), timeout=5)
    d = digests()
    series = d["select ? from generate_series(?, ?)"]
    check(series[1] == "6" and series[4] == "18", "6 calls of 3 rows, the commented one too: %r" % series)
    unnamed = d.get("select $1::int + ?")
    check(unnamed and unnamed[1] == "3" and unnamed[4] == "3", "three Executes of the unnamed statement: %r" % unnamed)
    named = d.get("select x from generate_series(?, $1::int) x")
    check(named and named[1] == "3" and named[4] == "7", "three Executes of the named one, 4+2+1 rows: %r" % named)
    sleep = d["select pg_sleep(?)"]
    check(sleep[1] == "2" and float(sleep[3]) >= 50.0 and float(sleep[2]) >= 100.0,
          "two calls of at least 50 ms: %r" % sleep)
    body = json.loads(urllib.request.urlopen("http://127.0.0.1:%d/api/digests" % http_port, timeout=10).read())
    by_query = {e["query"]: e for e in body["digests"]}
    check(body["enabled"] and by_query["select pg_sleep(?)"]["calls"] == 2 and
          by_query["select pg_sleep(?)"]["fingerprint"] == sleep[0], "/api/digests says the same: %r" % body)
    check(body["digests"][0]["query"] == "select pg_sleep(?)", "longest total time first")


@test
def a_read_only_transaction_runs_on_a_replica_and_what_follows_its_commit_does_not(ctx):
    """BEGIN READ ONLY goes to a replica (after its LSN wait) and every statement of the transaction follows
    it there, in both protocols, one request at a time: what the client pipelined behind the COMMIT runs
    where it belongs (a write on the primary). A write inside it fails as PostgreSQL fails it in a read-only
    transaction (25006); a text of several statements that are not all reads is refused (0A000); a
    plain BEGIN stays on the primary, unless its first statement is SET TRANSACTION READ ONLY (not
    serializable): then the empty transaction moves to the replica."""
    ctx.pg.psql("drop table if exists routing_tx; create table routing_tx(a int)")
    ctx.pg.wait_replica_caught_up()
    t = routing_tern(ctx, level="session")
    with Wire(t.port) as w:
        w.login("postgres")
        w.query("begin read only")
        check(w.query("select pg_is_in_recovery()") == [["t"]], "in the transaction: the replica")
        check(w.query("select 1; select pg_is_in_recovery()") == [["1"], ["t"]], "several reads in one query")
        try:
            w.query("select 1; commit")
            raise AssertionError("a mixed text was run")
        except WireError as err:
            check(err.sqlstate == "0A000", "a mixed text is refused: %r" % err.fields)
        kinds, rows, err, status = w.exchange(parse("", "select pg_is_in_recovery()"), bind(""), execute(), SYNC)
        check(err is None and rows == [["t"]] and status == "T", "the extended protocol too: %r" % ((rows, status),))
        try:
            w.query("insert into routing_tx values (1)")
            raise AssertionError("a write ran in a read-only transaction")
        except WireError as err:
            check(err.sqlstate == "25006", "as in any read-only transaction: %r" % err.fields)
        w.query("rollback")
        batch = ["begin read only", "select pg_is_in_recovery()", "commit",
                 "insert into routing_tx values (2) returning pg_is_in_recovery()", "select count(*) from routing_tx"]
        w.send(b"".join(message(b"Q", sql.encode() + b"\0") for sql in batch))
        rows = [[data_row(body) for kind, body in w.read_until_ready() if kind == b"D"] for _ in batch]
        check(rows == [[], [["t"]], [], [["f"]], [["1"]]], "pipelined behind the COMMIT: the primary's: %r" % rows)
        kinds, rows, err, status = w.exchange(parse("", "begin read only"), bind(""), execute(), SYNC)
        check(err is None and status == "T", "BEGIN READ ONLY through the extended protocol: %r" % status)
        kinds, rows, err, status = w.exchange(parse("", "select pg_is_in_recovery()"), bind(""), execute(), SYNC)
        check(rows == [["t"]], "on the replica: %r" % rows)
        kinds, rows, err, status = w.exchange(parse("", "commit"), bind(""), execute(), SYNC)
        check(err is None and status == "I", "COMMIT through the extended protocol ends it: %r" % status)
        check(w.query("insert into routing_tx values (3) returning pg_is_in_recovery()") == [["f"]], "then the primary")
        check(w.query("begin; select pg_is_in_recovery(); commit") == [["f"]], "a plain transaction: the primary")
        check(w.query("select count(*) from routing_tx") == [["2"]], "the session read sees both writes")
        # BEGIN, then SET TRANSACTION READ ONLY as its first statement (SQLAlchemy's way): it moves.
        w.query("begin")
        w.query("set transaction isolation level repeatable read, read only")
        check(w.query("select pg_is_in_recovery(), current_setting('transaction_read_only'), "
                      "current_setting('transaction_isolation')") == [["t", "on", "repeatable read"]],
              "SET TRANSACTION READ ONLY moved the transaction to the replica")
        w.query("commit")
        check(w.query("insert into routing_tx values (4) returning pg_is_in_recovery()") == [["f"]], "then the primary")
        for first in ("select 1", None):
            w.query("begin isolation level serializable" if first is None else "begin")
            if first:
                w.query(first)
            w.query("set transaction read only")
            check(w.query("select pg_is_in_recovery()") == [["f"]],
                  "after a statement, or serializable: the transaction stays on the primary (%s)" % first)
            w.query("commit")
        check(w.query("select count(*) from routing_tx") == [["3"]], "all three writes")


# ---------------------------------------------------------------- runner


def scrape_metrics(http_port):
    """/metrics on http_port, parsed by prometheus_client's own text parser: {(name, labels): value}."""
    import urllib.request
    from prometheus_client.parser import text_string_to_metric_families
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http_port, timeout=10).read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def metric(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0)


@contextlib.contextmanager
def split_tern_behind_a_cutting_proxy(ctx):
    """A tern splitting reads, its replica behind tests/integration/cutting_proxy.py, once the monitor knows
    the replica: (tern, proxy); both stop after."""
    from cutting_proxy import CuttingProxy
    ctx.pg.wait_replica_caught_up()
    http_port = free_port()
    with CuttingProxy(ctx.pg.replica_port) as proxy:
        t = routing_tern(ctx, level="primary", routing="transaction_split = on", replica_port=proxy.port,
                         pool="[admin]\nhttp_listen = 127.0.0.1:%d" % http_port)
        try:
            wait_for(lambda: metric(scrape_metrics(http_port), "tern_server_role", server="replica",
                                    role="standby") == 1, "the monitor to know the replica", timeout=10)
            yield t, proxy
        finally:
            t.stop()


@test
def a_replica_message_split_across_two_receives_is_shown_whole(ctx):
    """A replica's answer read in two receives inside one message (tests/integration/cutting_proxy.py's
    split, in front of the replica: the message's first three bytes, then the rest): what routing holds
    or rewrites there reaches the client whole and once: a split read's RowDescription (held until its
    first row) and its ReadyForQuery (shown with the primary's transaction status), an autocommit read's
    RowDescription and its error (judged) at level eventual. Before: the hold was the receive's, so a held
    message whose end came in the next receive was shown to nobody."""
    with split_tern_behind_a_cutting_proxy(ctx) as (t, proxy):
        with Wire(t.port) as w:
            w.login("postgres")
            w.query("begin")
            for kind in "TZ":
                w.send(message(b"Q", b"select pg_is_in_recovery() /*cut:split=%s tx*/\0" % kind.encode()))
                messages = w.read_until_ready()
                check(b"".join(k for k, _ in messages) == b"TDCZ" and data_row(messages[1][1]) == ["t"] and
                      messages[-1][1] == b"T", "a split read's %s in two receives: %r" % (kind, messages))
            w.query("rollback")
            w.query("set tern.consistency = eventual")
            w.send(message(b"Q", b"select pg_is_in_recovery() /*cut:split=T autocommit*/\0"))
            messages = w.read_until_ready()
            check(b"".join(k for k, _ in messages) == b"TDCZ" and data_row(messages[1][1]) == ["t"],
                  "an autocommit read's T in two receives: %r" % messages)
            kinds, rows, sqlstate, status = w.exchange(message(b"Q", b"select 1 / 0 /*cut:split=E autocommit*/\0"))
            check((kinds, sqlstate, status) == ("EZ", "22012", "I"),
                  "its E in two receives: %r %r %r" % (kinds, sqlstate, status))
            check(w.query("select 9") == [["9"]], "the session goes on")
        check(len(proxy.cuts) == 4, "every answer was split once: %r" % proxy.cuts)


@test
def a_split_read_whose_replica_dies_after_a_row_reached_the_client_is_never_run_again(ctx):
    """A split read's replica connection cut after its first DataRow reached the client
    (tests/integration/cutting_proxy.py in front of the replica): the read is not run again, on another
    replica or the primary, since a second answer would follow the first one's row; the client gets
    one 08006 and the connection closes."""
    with split_tern_behind_a_cutting_proxy(ctx) as (t, proxy):
        with Wire(t.port) as w:
            w.login("postgres")
            w.query("begin")
            check(w.query("select pg_is_in_recovery()") == [["t"]], "the transaction's reads split")
            w.send(message(b"Q", b"select g, pg_is_in_recovery() from generate_series(1, 3) g "
                                 b"/*cut:after=D1*/\0"))
            kinds, errors = b"", []
            while True:
                try:
                    msg = w.read_message()
                except (ConnectionResetError, socket.timeout):
                    break
                if msg is None:
                    break
                kinds += msg[0]
                if msg[0] == b"E":
                    errors.append(error_fields(msg[1]))
            check(kinds == b"TDE", "the first row, then one error, then the end: %r" % kinds)
            check(errors[0]["C"] == "08006", "08006: %r" % errors)
        check(len(proxy.cuts) == 1, "the replica's answer was cut once: %r" % proxy.cuts)


@test
def split_reads_of_a_read_committed_transaction_run_on_the_replica_until_its_first_write(ctx):
    """transaction_split = on: the plain SELECTs of a read-committed transaction's read-only prefix run on
    the replica (the server says where: pg_is_in_recovery()), the transaction stays on the primary (its
    write, its own rows, its COMMIT); after the first write its reads stay on the primary. A transaction
    under REPEATABLE READ (named, or the database's default), with FOR UPDATE, with a SET, through the
    extended protocol, or in several statements per query stays on the primary; /metrics counts why."""
    ctx.pg.psql("drop table if exists split_t; create table split_t(a int)")
    ctx.pg.psql("drop database if exists split_rr")
    ctx.pg.psql("create database split_rr")
    ctx.pg.psql("alter database split_rr set default_transaction_isolation = 'repeatable read'")
    ctx.pg.wait_replica_caught_up()
    http_port = free_port()
    t = routing_tern(ctx, level="primary", routing="transaction_split = on",
                     pool="[admin]\nhttp_listen = 127.0.0.1:%d" % http_port)
    where = "select pg_is_in_recovery()"
    wait_for(lambda: metric(scrape_metrics(http_port), "tern_server_role", server="replica", role="standby") == 1,
             "the monitor to know the replica", timeout=10)
    with Wire(t.port) as w:
        w.login("postgres")
        check(w.query(where) == [["f"]], "an autocommit read at level primary: the primary")
        w.query("begin")
        check(w.query(where) == [["t"]], "a split read: the replica")
        w.send(message(b"Q", b"select count(*), pg_is_in_recovery() from split_t\0"))
        messages = w.read_until_ready()
        check([data_row(b) for k, b in messages if k == b"D"] == [["0", "t"]], "again, the same")
        check(messages[-1][1] == b"T", "the client is told its transaction goes on: %r" % messages[-1][1])
        w.query("insert into split_t values (1)")
        check(w.query("select count(*), pg_is_in_recovery() from split_t") == [["1", "f"]],
              "after the first write: the primary, which sees the transaction's own row")
        w.query("commit")
        check(ctx.pg.psql("select count(*) from split_t") == "1", "the transaction committed on the primary")
        for begin, reads, why in (
                ("begin isolation level repeatable read", [where], "repeatable read"),
                ("begin", ["select pg_is_in_recovery() from split_t for update", where], "FOR UPDATE"),
                ("begin", ["set work_mem = '8MB'", where], "a SET"),
                ("begin", ["select 1; select pg_is_in_recovery()"], "two statements"),
                ("begin transaction isolation level serializable", [where], "serializable")):
            w.query(begin)
            for sql in reads:
                rows = w.query(sql)
            check(rows[-1] == ["f"], "%s: on the primary (%r)" % (why, rows))
            w.query("rollback")
        w.query("begin")
        kinds, rows, err, _ = w.exchange(parse("", where), bind(""), execute(), SYNC)
        check(rows == [["f"]], "the extended protocol: on the primary (%r %r)" % (kinds, err))
        w.query("rollback")
        # A named write prepared earlier, bound inside the transaction with a parameter too long for
        # routing to read (the Bind passes by head): the transaction may have written.
        kinds, _, err, _ = w.exchange(parse("ins", "insert into split_t select $1::int where length($2) > 0"), SYNC)
        check(err is None, "prepared: %r" % kinds)
        w.query("begin")
        kinds, _, err, _ = w.exchange(bind("ins", ["5", "x" * 4000]), execute(), SYNC)
        check(err is None, "bound long, executed: %r" % kinds)
        check(w.query("select count(*), pg_is_in_recovery() from split_t") == [["2", "f"]],
              "after a Bind routing could not read: the primary, which sees the row")
        w.query("rollback")
        # Splitting turned on inside a transaction that wrote while it was off.
        w.query("select 1")  # (seen idle, with splitting on: what follows is noted afresh)
        w.query("set tern.transaction_split = off")
        w.query("begin")
        w.query("insert into split_t values (6)")
        w.query("set tern.transaction_split = on")
        check(w.query("select count(*), pg_is_in_recovery() from split_t") == [["2", "f"]],
              "turned on after a write it did not see: the primary")
        w.query("rollback")
        w.query("reset tern.transaction_split")
        w.query("begin")
        w.query("set transaction isolation level repeatable read")  # allowed: tern's SHOW took no snapshot
        check(w.query(where) == [["f"]], "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ: on the primary")
        w.query("rollback")
    with Wire(t.port) as w:
        w.login("postgres", database="split_rr")
        w.query("begin")
        check(w.query(where) == [["f"]], "the database's default, repeatable read: on the primary")
        check(w.query("show transaction_isolation") == [["repeatable read"]], "as the server says")
        w.query("commit")
        w.query("begin isolation level read committed")
        check(w.query(where) == [["t"]], "read committed named in that database: the replica")
        w.query("commit")
    def split_reads():
        samples = scrape_metrics(http_port)
        return sum(metric(samples, "tern_split_reads_total", path=path) for path in ("replica", "replica_after_wait"))
    wait_for(lambda: split_reads() == 3, "three split reads counted (workers publish each tick)", timeout=5)
    samples = scrape_metrics(http_port)
    for reason, count in (("not_read_committed", 5), ("not_select", 2), ("set_in_transaction", 1),
                          ("not_one_command", 1), ("not_splittable", 4)):
        check(metric(samples, "tern_split_refused_total", reason=reason) == count, "%s counted %d times: %r"
              % (reason, count, {k: v for k, v in samples.items() if "split_refused" in k[0]}))


@test
def split_reads_see_every_commit_acknowledged_before_them(ctx):
    """The consistency checker's split mode: writers commit increasing values (autocommit, on the
    primary); readers run read-committed transactions of ten reads each with transaction_split on, and
    every read must see every value acknowledged before it was issued: 5000 checked reads, none stale,
    most of them served by the replica (it says so itself: pg_is_in_recovery() in the read)."""
    import consistency
    if ctx.pg.psql("select count(*) from pg_database where datname = 'routing'") == "0":
        ctx.pg.psql("create database routing")
    ctx.pg.wait_replica_caught_up()
    http_port = free_port()
    t = routing_tern(ctx, pool="[admin]\nhttp_listen = 127.0.0.1:%d" % http_port)
    wait_for(lambda: metric(scrape_metrics(http_port), "tern_server_role", server="replica", role="standby") == 1,
             "the monitor to know the replica", timeout=10)
    r = consistency.run(t.port, "primary", "simple", 5000, dbname="routing", check="split")
    print("  split: %d reads, %d stale, %d on the replica, %d writes in %.1fs"
          % (r["reads"], r["stale"], r["replica"], r["writes"], r["seconds"]), flush=True)
    check(not r["errors"], "ran without errors: %s" % r["errors"])
    check(r["reads"] >= 5000, "checked %d reads" % r["reads"])
    check(r["stale"] == 0, "%d stale reads, e.g. %s" % (r["stale"], r["examples"]))
    check(r["replica"] >= r["reads"] // 2, "the replica served most of them: %d of %d" % (r["replica"], r["reads"]))


@test
def split_reads_fall_back_to_the_primary_when_the_replica_lags_or_is_lost_and_the_transaction_commits(ctx):
    """Replay paused mid-transaction: the next split read waits wait_timeout_ms, then the primary serves
    it (it sees the row committed meanwhile), and the transaction goes on and commits. The replica's
    backend terminated between two split reads: the next read picks again (here the primary, or the
    replica afresh) with no client error, and the transaction commits; the same with the replica
    itself stopped (immediate) between two split reads. tern.transaction_split is the
    client's own setting (SET, SHOW, RESET, the startup option) and reaches no server."""
    ctx.pg.psql("drop table if exists split_f; create table split_f(a int)")
    ctx.pg.wait_replica_caught_up()
    http_port = free_port()
    t = routing_tern(ctx, routing="wait_timeout_ms = 600", pool="[admin]\nhttp_listen = 127.0.0.1:%d" % http_port)
    wait_for(lambda: metric(scrape_metrics(http_port), "tern_server_role", server="replica", role="standby") == 1,
             "the monitor to know the replica", timeout=10)
    count = "select count(*), pg_is_in_recovery() from split_f"
    try:
        with Wire(t.port) as w:
            w.login("postgres")
            check(w.query("show tern.transaction_split") == [["off"]], "off by default")
            w.query("begin")
            check(w.query(count) == [["0", "f"]], "off: the transaction's reads on the primary")
            w.query("commit")
            w.query("set tern.transaction_split = on")
            check(w.query("show tern.transaction_split") == [["on"]], "the client's own")
            w.query("begin")
            check(w.query(count) == [["0", "t"]], "on: the replica")
            ctx.pg.psql("select pg_wal_replay_pause()", port=ctx.pg.replica_port)
            ctx.pg.psql("insert into split_f values (1)")  # committed while the transaction runs
            started = time.monotonic()
            rows = w.query(count)
            waited = time.monotonic() - started
            check(rows == [["1", "f"]], "the primary served the read, with the row committed before it: %r" % rows)
            check(0.5 <= waited < 5, "after about wait_timeout_ms: %.2fs" % waited)
            w.query("insert into split_f values (2)")
            w.query("commit")
            check(ctx.pg.psql("select count(*) from split_f") == "2", "the transaction committed")
            ctx.pg.psql("select pg_wal_replay_resume()", port=ctx.pg.replica_port)
            ctx.pg.wait_replica_caught_up()
            w.query("begin")
            check(w.query(count) == [["2", "t"]], "the replica again")
            ctx.pg.psql("select pg_terminate_backend(pid) from pg_stat_activity where backend_type = 'client backend' "
                        "and application_name not in ('psql', 'tern monitor') and pid <> pg_backend_pid()",
                        port=ctx.pg.replica_port)
            rows = w.query(count)
            check(rows[0][0] == "2", "the read after the replica was lost: %r" % rows)
            w.query("insert into split_f values (3)")
            w.query("commit")
            check(ctx.pg.psql("select count(*) from split_f") == "3", "the transaction committed")
            ctx.pg.wait_replica_caught_up()
            w.query("begin")
            check(w.query(count) == [["3", "t"]], "the replica again")
            ctx.pg.stop_replica("immediate")  # the replica itself killed between two split reads
            try:
                check(w.query(count) == [["3", "f"]], "the next read: the primary (no other replica), no error")
                w.query("insert into split_f values (4)")
                w.query("commit")
                check(ctx.pg.psql("select count(*) from split_f") == "4", "the transaction committed")
            finally:
                ctx.pg.start_replica()
            w.query("reset tern.transaction_split")
            check(w.query("show tern.transaction_split") == [["off"]], "RESET: the configuration's default")
    finally:
        ctx.pg.psql("select pg_wal_replay_resume()", port=ctx.pg.replica_port, check=False)
    with Wire(t.port) as w:
        w.login("postgres", params={"options": "-c tern.transaction_split=on"})
        check(w.query("show tern.transaction_split") == [["on"]], "from the startup options")

        def split_read():
            w.query("begin")
            rows = w.query("select pg_is_in_recovery()")
            w.query("commit")
            return rows
        wait_for(lambda: split_read() == [["t"]], "a split read on the replica, back", timeout=30, interval=0.2)
    wait_for(lambda: metric(scrape_metrics(http_port), "tern_split_reads_total", path="primary",
                            reason="wait_timeout") == 1, "the read after the wait counted", timeout=5)
    check("an idle replica connection was lost" in t.log_tail(100), "tern saw the replica go")


@test
def strict_target_insert_covers_a_commit_acknowledged_before_it_was_flushed(ctx):
    """strict_target = insert: a commit acknowledged with synchronous_commit = off (its WAL not flushed
    yet: wal_writer_delay is 10 s here) is seen by a strict read that comes after it — the replica cannot
    have it, so the read waits wait_timeout_ms and the primary serves it (or the replica, if something
    flushed that WAL meanwhile): either way it sees the row. With the default (flush), the
    same read is the replica's at once: it need not see an asynchronous commit the WAL writer has not
    flushed (README: strict_target)."""
    ctx.pg.psql("drop table if exists strict_async; create table strict_async(a int)")
    ctx.pg.wait_replica_caught_up()
    ctx.pg.psql("alter system set wal_writer_delay = '10s'")
    ctx.pg.psql("select pg_reload_conf()")
    try:
        for target, expect in (("insert", "1"), ("flush", None)):
            t = routing_tern(ctx, level="strict", routing="strict_target = %s\nwait_timeout_ms = 300" % target)
            with Wire(t.port) as w:
                w.login("postgres")
                wait_for(lambda: w.query("select pg_is_in_recovery()") == [["t"]], "the replica to serve reads",
                         timeout=10)
                ctx.pg.psql("truncate strict_async")
                ctx.pg.wait_replica_caught_up()
                ctx.pg.psql("set synchronous_commit = off; insert into strict_async values (1)")
                rows = w.query("select count(*), pg_is_in_recovery() from strict_async")
                if expect:  # (on the primary after the wait, unless something flushed the WAL meanwhile)
                    check(rows[0][0] == expect, "%s: the read saw the acknowledged commit: %r" % (target, rows))
                else:
                    check(rows[0][1] == "t", "%s: the read went to the replica at once: %r" % (target, rows))
            t.stop()
    finally:
        ctx.pg.psql("alter system reset wal_writer_delay")
        ctx.pg.psql("select pg_reload_conf()")


@test
def the_failure_policy_sends_a_lost_read_to_another_replica_or_the_primary_and_an_error_where_configured(ctx):
    """[routing] on_replica_lost = replica (the default): a read whose replica backend is terminated under
    it runs again on another replica (here a second entry for the same standby), an autocommit read and
    a split read alike; = primary: on the primary. on_replica_error = client: a replica's 25006 reaches
    the client as it is (the default, primary, is tested with the re-run test)."""
    ctx.pg.psql("drop table if exists policy_r; create table policy_r(a int);"
                "create or replace function policy_writer() returns int language sql as "
                "'insert into policy_r values (1) returning a'")
    ctx.pg.wait_replica_caught_up()

    def tern(routing):
        http_port = free_port()
        config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 1\npool_mode = transaction\n[servers]\n"
                  "primary = host=127.0.0.1 port=%d\nreplica = host=127.0.0.1 port=%d\n"
                  "replica2 = host=127.0.0.1 port=%d\n[routing]\nmonitor_interval_ms = 100\n"
                  "default_consistency = eventual\ntransaction_split = on\n%s\n[admin]\nhttp_listen = 127.0.0.1:%d\n"
                  % (free_port(), ctx.pg.primary_port, ctx.pg.replica_port, ctx.pg.replica_port, routing, http_port))
        t = TernProcess(TERN, config)
        ctx.terns.append(t)
        t.start()
        for name in ("replica", "replica2"):
            wait_for(lambda: metric(scrape_metrics(http_port), "tern_server_role", server=name, role="standby") == 1,
                     "the monitor to know %s" % name, timeout=10)
        return t, http_port

    def terminated(w, case, sql):
        w.send(message(b"Q", sql.encode() + b"\0"))
        find = ("select pid from pg_stat_activity where query like '%%%s%%' and state = 'active' "
                "and pid <> pg_backend_pid()" % case)
        wait_for(lambda: ctx.pg.psql(find, port=ctx.pg.replica_port) != "", "the read %s on the replica" % case,
                 timeout=10)
        ctx.pg.psql("select pg_terminate_backend(pid) from (%s) r" % find, port=ctx.pg.replica_port)
        return [row[1:] for kind, row in ((k, data_row(b)) for k, b in w.read_until_ready() if k == b"D")]

    def sql(case):  # on a replica, sleeps until 1.5 s from now: the first run is terminated, the re-run ends
        until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1.5)
        return ("select pg_sleep(case when pg_is_in_recovery() then greatest(0, extract(epoch from ('%s'::timestamptz "
                "- clock_timestamp()))) else 0 end), '%s', pg_is_in_recovery()" % (until.isoformat(), case))

    for policy, where in (("replica", "t"), ("primary", "f")):
        t, http_port = tern("on_replica_lost = %s" % policy)
        with Wire(t.port) as w:
            w.login("postgres")
            rows = terminated(w, "pol_a_" + policy, sql("pol_a_" + policy))
            check(rows == [["pol_a_" + policy, where]], "%s: an autocommit read re-ran: %r" % (policy, rows))
            w.query("begin")
            rows = terminated(w, "pol_s_" + policy, sql("pol_s_" + policy))
            check(rows == [["pol_s_" + policy, where]], "%s: a split read re-ran: %r" % (policy, rows))
            w.query("commit")
        path = {"path": "replica", "reason": "replica_lost"} if policy == "replica" else \
            {"path": "primary", "reason": "replica_lost"}
        wait_for(lambda: metric(scrape_metrics(http_port), "tern_route_reads_total", **path) == 1 and
                 metric(scrape_metrics(http_port), "tern_split_reads_total", **path) == 1,
                 "%s: each re-run counted" % policy, timeout=5)
    t, _ = tern("on_replica_error = client\nread_functions = policy_writer")
    with Wire(t.port) as w:
        w.login("postgres")
        try:
            w.query("select policy_writer()")
            raise AssertionError("the replica's refusal was hidden")
        except WireError as err:
            check(err.sqlstate == "25006", "the replica's error reaches the client: %r" % err.fields)
    check(ctx.pg.psql("select count(*) from policy_r") == "0", "nothing ran on the primary")


def tern_before_fakes(ctx, primary, standby, profiles=("", ""), routing="transaction_split = on\nwait_timeout_ms = 700"):
    """A tern (one worker, transaction pooling) in front of two protocol-level fakes
    (tests/integration/polar_fake.py) with the given profile= of each, once the monitor knows the standby."""
    http_port = free_port()
    servers = "".join("%s = host=127.0.0.1 port=%d sslmode=disable gssencmode=disable%s\n"
                      % (name, fake.port, " profile=" + profile if profile else "")
                      for name, fake, profile in (("primary", primary, profiles[0]), ("replica", standby, profiles[1])))
    config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 1\npool_mode = transaction\n[servers]\n%s"
              "[routing]\nmonitor_interval_ms = 100\n%s\n[admin]\nhttp_listen = 127.0.0.1:%d\n"
              % (free_port(), servers, routing, http_port))
    t = TernProcess(TERN, config)
    ctx.terns.append(t)
    t.start()
    t.http_port = http_port
    wait_for(lambda: metric(scrape_metrics(http_port), "tern_server_role", server="replica", role="standby") == 1,
             "the monitor to know the fake standby", timeout=10)
    return t


def vanilla_standby_splits_until_the_first_write(t, read):
    """Through tern t, in front of a polar primary and a vanilla standby (fakes): a transaction's read
    (`read`, whose first column is pg_is_in_recovery()) goes to the standby before the first write, and
    to the primary after it (a vanilla standby cannot import XIDs)."""
    with Wire(t.port) as w:
        w.login("postgres")
        w.query("begin")
        check(w.query(read)[0][0] == "t", "a vanilla standby: before the first write, split")
        w.query("insert into t values (1)")
        check(w.query(read)[0][0] == "f", "after it: the primary (a vanilla standby cannot import XIDs)")
        w.query("commit")


@test
def polar_split_reads_import_the_transaction_s_xids_on_a_polar_replica(ctx):
    """The XID-import profile against a protocol-level fake of a polar primary and standby
    (tests/integration/polar_fake.py; no installable server speaks it): tern logs in with
    _polar_send_xact, reads the marker and XIDs off the primary's ReadyForQuery and shows the client a
    plain one; a split read before the first write (REPLICA_WITH_WAIT) and after it (REPLICA_TXN_SPLIT)
    goes to the standby behind the four hidden SETs (the XIDs, strict, the wait's bound, the LSN); a
    transaction whose WAL is not flushed ('w') keeps its reads on the primary unless the monitor has seen
    a replica replay past the primary's insert LSN, probed after the read arrived (condition 2's
    exception: then the standby serves it, waiting up to that LSN); the settings are reset
    before the standby's connection goes back. With a vanilla standby, reads after the first write stay
    on the primary."""
    from polar_fake import FakePolarServer
    fakes = [FakePolarServer(False, "primary"), FakePolarServer(True, "standby")]
    primary, standby = fakes
    read = ("select pg_is_in_recovery(), current_setting('polar_xact_split_xids'), "
            "current_setting('polar_consistency_mode'), current_setting('polar_proxy_wait_timeout_ms'), "
            "current_setting('polar_xact_split_wait_lsn')")
    lsn = str(0x3000000)  # the fake's LSN, 0/3000000, as the setting carries it

    def tern(standby_profile):
        return tern_before_fakes(ctx, primary, standby, ("polar", standby_profile))

    def query_plain(w, sql):  # rows, and the ReadyForQuery's body as the client got it
        w.send(message(b"Q", sql.encode() + b"\0"))
        messages = w.read_until_ready()
        return [data_row(b) for k, b in messages if k == b"D"], messages[-1][1]

    try:
        t = tern("polar")
        with Wire(t.port) as w:
            w.login("postgres")
            w.query("begin")
            rows, ready = query_plain(w, read)
            check(ready == b"T", "the client's ReadyForQuery is PostgreSQL's own: %r" % ready)
            check(rows == [["t", "", "strict", "700", lsn]], "before the first write: the standby, no XIDs: %r" % rows)
            rows, ready = query_plain(w, "insert into t values (1)")
            check(ready == b"T", "after a write too: %r" % ready)
            rows, _ = query_plain(w, read)
            check(rows == [["t", "1,1000", "strict", "700", lsn]], "after it: the standby imports the XIDs: %r" % rows)
            query_plain(w, "insert into wal_pending values (2)")
            primary.lsn = "0/3000100"  # its insert LSN (the transaction's own WAL) past the standby's
            rows, _ = query_plain(w, read)
            check(rows == [["f", "", "", "", ""]], "its WAL not flushed ('w'), no replica past it: the primary: %r"
                  % rows)
            standby.lsn = "0/3000100"
            wait_for(lambda: metric(scrape_metrics(t.http_port), "tern_server_lsn", server="replica") == 0x3000100,
                     "the monitor to see the standby past it", timeout=10)
            rows, _ = query_plain(w, read)
            check(rows == [["t", "2,1000", "strict", "700", str(0x3000100)]],
                  "still 'w', with a replica seen past the primary's insert LSN: the standby, up to it: %r" % rows)
            query_plain(w, "commit")
        check(primary.polar_connections >= 1 and standby.polar_connections >= 1, "tern asked both for the profile")
        wait_for(lambda: "RESET polar_xact_split_xids" in standby.seen(), "the settings reset before the connection "
                 "goes back: %r" % standby.seen()[-6:], timeout=5)
        check(not [text for text in primary.seen() if text.lower().startswith("set polar")],
              "the primary never got the settings")
        t.stop()
        vanilla_standby_splits_until_the_first_write(tern("vanilla"), read)
    finally:
        for fake in fakes:
            fake.stop()


@test
def a_profile_changed_by_sighup_holds_for_new_connections_and_the_clients_logging_in_after_it(ctx):
    """profile= is reloaded: a vanilla standby made polar by SIGHUP serves split reads after the first
    write, on connections opened with the profile (_polar_send_xact). The key's profile generation moves
    on, so the vanilla connection opened before the change is never handed to a client logging in after
    it (protocol-level fakes, tests/integration/polar_fake.py)."""
    from polar_fake import FakePolarServer
    fakes = [FakePolarServer(False, "primary"), FakePolarServer(True, "standby")]
    primary, standby = fakes
    read = "select pg_is_in_recovery(), current_setting('polar_xact_split_xids')"
    try:
        t = tern_before_fakes(ctx, primary, standby, ("polar", "vanilla"))
        vanilla_standby_splits_until_the_first_write(t, read)
        with standby.lock:
            vanilla = set(n for n, _ in standby.statements)
        check(vanilla and standby.polar_connections == 0, "a standby connection opened without the profile")
        edit_config_and_reload(t, "profile=vanilla", "profile=polar")
        wait_for(lambda: "replica: profile = polar" in t.log_tail(20), "the reload names the new profile", timeout=10)
        with Wire(t.port) as w:
            w.login("postgres")
            w.query("begin")
            w.query("insert into t values (2)")
            rows = w.query(read)
            check(rows[0][0] == "t" and rows[0][1] != "", "polar: after the first write, the standby imports the "
                  "XIDs: %r" % rows)
            w.query("commit")
        with standby.lock:
            split_on = set(n for n, text in standby.statements if text.lower().startswith("set polar_xact_split_xids"))
        check(split_on and not split_on & vanilla, "on a connection opened after the change: %r, vanilla %r"
              % (split_on, vanilla))
        check(standby.polar_connections >= 1, "which asked for the profile")
    finally:
        for fake in fakes:
            fake.stop()


@test
def a_postgresql_19_replica_not_yet_at_the_target_waits_in_band_with_wait_for_lsn(ctx):
    """A standby reporting server_version 19 (a protocol-level fake: tests/integration/polar_fake.py)
    whose replay LSN is behind a strict read's target: tern sends the read to it at once behind a hidden
    WAIT FOR LSN '<target>' WITH (TIMEOUT '<what is left of wait_timeout_ms>', NO_THROW) instead of waiting
    itself; success: the standby serves it; timeout: the primary does. A version-15 standby just as far
    behind gets no WAIT FOR: the read waits in tern, then the primary serves it."""
    from polar_fake import FakePolarServer
    primary = FakePolarServer(False, "primary", lsn="0/3000000")
    fakes = [primary]
    try:
        for version, status, where in (("19.0", "timeout", "f"), ("19.0", "success", "t"), ("15.0", None, "f")):
            standby = FakePolarServer(True, "standby", version=version, lsn="0/2000000", wait_status=status or "")
            fakes.append(standby)
            t = tern_before_fakes(ctx, primary, standby, routing="default_consistency = strict\nwait_timeout_ms = 400")
            with Wire(t.port) as w:
                w.login("postgres")
                started = time.monotonic()
                rows = w.query("select pg_is_in_recovery()")
                waited = time.monotonic() - started
            waits = [text for text in standby.seen() if text.startswith("WAIT FOR LSN")]
            check(rows == [[where]], "%s/%s: served by %s: %r %r" % (version, status, where, rows, standby.seen()[-4:]))
            if version == "19.0":
                check(len(waits) == 1 and waits[0].startswith("WAIT FOR LSN '0/03000000' WITH (TIMEOUT '")
                      and waits[0].endswith("ms', NO_THROW)"), "the in-band wait: %r" % waits)
                check(waited < 0.35, "tern did not wait itself: %.2fs" % waited)
            else:
                check(not waits and waited >= 0.35, "no WAIT FOR on 15; tern waited %.2fs" % waited)
            t.stop()
    finally:
        for fake in fakes:
            fake.stop()


def tables_a_row_apart(ctx, database, table, rows):
    """`table` (a, b) with `rows` rows in postgres, and one row fewer in a new `database`; the replica has
    caught up."""
    ctx.pg.psql("drop database if exists %s" % database)
    ctx.pg.psql("create database %s" % database)
    fill = "create table %s(a int, b text); insert into %s select g, 'r' || g from generate_series(1, %d) g"
    ctx.pg.psql("drop table if exists %s; " % table + fill % (table, table, rows))
    ctx.pg.psql(fill % (table, table, rows - 1), dbname=database)
    ctx.pg.wait_replica_caught_up()


def post_shadow(http_port, body, token=None):
    """POST /api/shadow: (status, the JSON answer)."""
    import json
    import urllib.error
    import urllib.request
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = token
    request = urllib.request.Request("http://127.0.0.1:%d/api/shadow" % http_port, data=json.dumps(body).encode(),
                                     headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


@test
def api_shadow_runs_one_statement_on_the_source_and_a_shadow_and_compares_them(ctx):
    """POST /api/shadow: a read on the primary and on the replica ([servers] key) is clean, its rows'
    hash the same whatever their order; against a database whose table holds other rows, or lacks it, it
    is not, with both row counts, timings and the error; a write is refused (400) unless allow_writes
    (then it runs on both); the bearer token is asked for when http_token is set (401)."""
    tables_a_row_apart(ctx, "shadow_other", "shadow_t", 50)
    http_port = free_port()
    t = routing_tern(ctx, pool="[admin]\nhttp_listen = 127.0.0.1:%d\nhttp_token = s3cret" % http_port)
    token = "Bearer s3cret"
    status, answer = post_shadow(http_port, {"sql": "select * from shadow_t", "shadow": "replica"})
    check(status == 401, "no token: 401 %r" % answer)
    status, answer = post_shadow(http_port, {"sql": "select * from shadow_t", "shadow": "replica"}, token)
    check(status == 200 and answer["is_clean"] is True, "the replica agrees: %r" % answer)
    check(answer["source"]["rows"] == 50 == answer["shadow"]["rows"] and answer["source"]["error"] is None,
          "both counted: %r" % answer)
    check(answer["source"]["hash"] == answer["shadow"]["hash"] and answer["source"]["ms"] >= 0, "%r" % answer)
    _, reversed_order = post_shadow(http_port, {"sql": "select * from shadow_t order by a desc", "shadow": "replica"},
                                    token)
    check(reversed_order["source"]["hash"] == answer["source"]["hash"], "the order does not change the hash")
    other = "host=127.0.0.1 port=%d dbname=shadow_other user=postgres" % ctx.pg.primary_port
    status, answer = post_shadow(http_port, {"sql": "select * from shadow_t", "shadow": other}, token)
    check(status == 200 and answer["is_clean"] is False and answer["shadow"]["rows"] == 49, "a row short: %r" % answer)
    status, answer = post_shadow(http_port, {"sql": "select * from shadow_missing", "shadow": other,
                                             "source": "replica"}, token)
    check(status == 200 and answer["is_clean"] is True and answer["shadow"]["error"]["sqlstate"] == "42P01",
          "the same error on both is clean, and reported: %r" % answer)
    status, answer = post_shadow(http_port, {"sql": "select 1 from pg_class limit 1", "shadow": other,
                                             "source": "replica"}, token)
    check(status == 200 and answer["is_clean"] is True, "a replica as the source: %r" % answer)
    status, answer = post_shadow(http_port, {"sql": "select count(*) from shadow_t", "shadow": other}, token)
    check(answer["is_clean"] is False, "counts differ: %r" % answer)
    status, answer = post_shadow(http_port, {"sql": "delete from shadow_t where a = 1", "shadow": other}, token)
    check(status == 400 and "allow_writes" in answer["error"], "a write without allow_writes: %r" % answer)
    status, answer = post_shadow(http_port, {"sql": "delete from shadow_t where a = 1", "shadow": other,
                                             "allow_writes": True}, token)
    check(status == 200 and answer["is_clean"] is True and answer["source"]["tag"] == "DELETE 1",
          "a write, allowed, on both: %r" % answer)
    check(ctx.pg.psql("select count(*) from shadow_t") == "49", "it ran on the source")
    status, answer = post_shadow(http_port, {"sql": "select 1", "shadow": "nowhere"}, token)
    check(status == 400 and "nowhere" in answer["error"], "an unknown target: %r" % answer)
    status, answer = post_shadow(http_port, {"sql": "select 1", "shadow": "replica", "colour": "red"}, token)
    check(status == 400 and "colour" in answer["error"], "an unknown key: %r" % answer)


@test
def shadow_sampling_runs_live_reads_again_on_a_shadow_and_counts_mismatches_per_query(ctx):
    """[shadow] sample_rate = 1, target = the replica ([servers] key): every autocommit read is run again
    there and agrees (compared = sampled = the reads, none mismatched); a write, a read inside a
    transaction and an extended-protocol read are not sampled. With the target a database whose table holds
    a row fewer, that query's reads are mismatched and a query both agree on is not, per fingerprint in
    /metrics and SHOW SHADOW. A shadow that accepts connections and never answers, queue = 2: the client's
    reads go on, and those past the queue are dropped and counted."""
    import socket
    tables_a_row_apart(ctx, "shadow_live", "shadow_s", 20)

    def tern_sampling(target, queue=1024):
        http_port = free_port()
        t = routing_tern(ctx, pool="[admin]\nadmin_users = postgres\nhttp_listen = 127.0.0.1:%d\n"
                                   "[shadow]\nsample_rate = 1\ntarget = %s\nqueue = %d\n" % (http_port, target, queue))
        return t, http_port

    def shadow_metric(http_port, name, **labels):
        return metric(scrape_metrics(http_port), name, **labels)

    t, http_port = tern_sampling("replica")
    with Wire(t.port) as w:
        w.login("postgres")
        for i in range(10):
            check(len(w.query("select * from shadow_s where a > %d" % i)) == 20 - i, "a read")
        w.query("insert into shadow_s select 0, 'w' where false")
        w.query("begin")
        w.query("select * from shadow_s")
        w.query("commit")
        w.exchange(parse("", "select * from shadow_s where a > $1"), bind("", ["3"]), execute(), SYNC)
    wait_for(lambda: shadow_metric(http_port, "tern_shadow_compared_total") == 10, "the ten reads compared", timeout=15)
    check(shadow_metric(http_port, "tern_shadow_sampled_total") == 10, "only the ten autocommit reads sampled")
    check(shadow_metric(http_port, "tern_shadow_mismatched_total") == 0, "the replica agrees")
    t.stop()

    t, http_port = tern_sampling("host=127.0.0.1 port=%d dbname=shadow_live user=postgres" % ctx.pg.primary_port)
    with Wire(t.port) as w:
        w.login("postgres")
        for _ in range(4):
            w.query("select * from shadow_s")
            w.query("select count(*) from pg_database where datname = 'postgres'")
    wait_for(lambda: shadow_metric(http_port, "tern_shadow_compared_total") == 8, "the eight reads compared", timeout=15)
    check(shadow_metric(http_port, "tern_shadow_mismatched_total") == 4, "the table's four reads differ")
    rows = {r[3]: r for r in (line.split("|") for line in psql_ok(t.port, "show shadow", dbname="pgbouncer").splitlines())}
    check(rows["select * from shadow_s"][1:3] == ["4", "4"], "SHOW SHADOW: compared 4, mismatched 4: %r" % rows)
    other = [r for q, r in rows.items() if q.startswith("select count(*) from pg_database")]
    check(len(other) == 1 and other[0][1:3] == ["4", "0"], "the query both agree on: %r" % rows)
    fingerprint = rows["select * from shadow_s"][0]
    check(shadow_metric(http_port, "tern_shadow_digest_mismatched_total", fingerprint=fingerprint) == 4,
          "/metrics per fingerprint")
    t.stop()

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # accepts (the kernel does), never answers
    try:
        t, http_port = tern_sampling("host=127.0.0.1 port=%d dbname=postgres connect_timeout=3"
                                     % silent.getsockname()[1], queue=2)
        started = time.monotonic()
        with Wire(t.port) as w:
            w.login("postgres")
            for _ in range(20):
                w.query("select 1")
        check(time.monotonic() - started < 10, "the client's reads never wait for the shadow")
        wait_for(lambda: shadow_metric(http_port, "tern_shadow_sampled_total") == 20, "twenty sampled", timeout=5)
        dropped = shadow_metric(http_port, "tern_shadow_dropped_total")
        check(17 <= dropped <= 18, "past the queue (2) and the one being run, dropped: %s" % dropped)
    finally:
        silent.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-k", action="append", default=[], help="run tests whose name contains this")
    args = parser.parse_args()
    selected = [fn for fn in TESTS if not args.k or any(k in fn.__name__ for k in args.k)]
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
    # The passthrough tests' users must prove themselves to the server; everyone else is trusted.
    # synchronous_commit on: a commit's WAL reaches the replica at once (with fsync off it costs nothing),
    # so the routing tests' reads wait for their LSN target microseconds, not wal_writer_delay.
    with PgCluster(with_replica=True, hba_lines=["host all tern_scram 127.0.0.1/32 scram-sha-256",
                                                 "host all tern_md5 127.0.0.1/32 md5"],
                   extra_conf={"synchronous_commit": "on"}) as pg:
        print("PostgreSQL primary on %d, replica on %s (%.1fs)" % (pg.primary_port, pg.replica_port,
                                                                time.monotonic() - started), flush=True)
        for fn in selected:
            ctx = Context(pg)
            t0 = time.monotonic()
            try:
                fn(ctx)
                ctx.cleanup(check_exit=True)
                passed += 1
                print("PASS %s (%.1fs)" % (fn.__name__, time.monotonic() - t0), flush=True)
            except Exception:
                failed += 1
                print("FAIL %s (%.1fs)\n%s" % (fn.__name__, time.monotonic() - t0, traceback.format_exc()))
                for proc in ctx.terns:
                    print("--- tern log tail ---\n%s" % proc.log_tail(40))
                print(flush=True)
            finally:
                ctx.cleanup()
        stop_tls_servers()
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
