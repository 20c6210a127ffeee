#!/usr/bin/env python3
"""psycopg 3 workload for tern's client tests (tests/integration/run_clients.py).

CLIENTS threads, each on its own connection, run the same steps and check every result:
server-side prepared statements (prepare=True, and prepare_threshold=0, and DEALLOCATE of the oldest
when more are prepared than prepared_max allows), a transaction that must stay
on one server connection, a rollback that must leave nothing behind, pipeline mode (with and without
prepared statements, across several Syncs), COPY FROM STDIN and COPY TO STDOUT (text and binary)
compared row by row with what was written. A step that fails records its SQLSTATE and the client
goes on with a fresh connection, so one run reports every step that breaks.

The last line printed is `RESULT {json}`; exit status 0 only when every step of every client passed
and the final table totals are exact.

usage: psycopg_workload.py --port PORT [--host H] [--clients N] [--rows N] [--prefix NAME]"""
import argparse
import datetime
import decimal
import json
import sys
import threading
import time
import traceback

try:
    import psycopg
    from psycopg import sql
except ImportError as exc:  # the runner turns this exit status into a clear message
    print("psycopg 3 is not installed (%s): run tools/install-deps.sh (Debian package python3-psycopg)"
          % exc, file=sys.stderr)
    sys.exit(3)

STEPS = ["connect", "prepared", "threshold0", "deallocate", "transaction", "rollback", "pipeline",
         "pipeline_prepared", "copy_in", "copy_out_text", "copy_out_binary", "verify"]
NEVER = 1 << 30  # a prepare_threshold no statement here reaches
COUNTER_UPDATES = 5  # the transaction step adds this many to the client's counter
EPOCH = datetime.datetime(2024, 2, 29, 12, 0, 0, tzinfo=datetime.timezone.utc)


def item_value(client, seq):
    """Text that COPY's text format must escape (tab, newline, backslash) and non-ASCII."""
    return "c%d\ts%d\n\\ \u00e9\u2603 %s" % (client, seq, "x" * (seq % 37))


def copy_row(client, seq):
    payload = None if seq % 17 == 0 else item_value(client, seq) + "|copy"
    amount = decimal.Decimal("%d.%02d" % (client * 1000 + seq, seq % 100))
    at = EPOCH + datetime.timedelta(seconds=client * 3600 + seq, microseconds=seq * 7)
    return (client, seq, payload, amount, at)


class Failure(Exception):
    pass


def check(condition, what):
    if not condition:
        raise Failure(what)


def describe(exc):
    """'SQLSTATE message' for a server error, the class and message otherwise."""
    sqlstate = getattr(exc, "sqlstate", None)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if sqlstate:
        return "%s %s" % (sqlstate, text)
    return "%s: %s" % (type(exc).__name__, text)


class Client:
    def __init__(self, args, index, table):
        self.args = args
        self.c = index
        self.t = table
        self.conn = None

    def connect(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        # Nothing is prepared unless a step asks (prepare=True, or threshold 0); None would also turn
        # prepare=True off.
        self.conn = psycopg.connect(host=self.args.host, port=self.args.port, user="postgres",
                                    dbname="postgres", connect_timeout=30, autocommit=True,
                                    prepare_threshold=NEVER, application_name="psycopg-%d" % self.c)

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None

    # -------------------------------------------------------------- steps

    def step_connect(self):
        self.connect()
        with self.conn.cursor() as cur:
            cur.execute("select 1")
            check(cur.fetchone() == (1,), "select 1")
            cur.execute(self.t["insert_counter"], (self.c,), prepare=False)

    def step_prepared(self):
        rows = self.args.rows
        with self.conn.cursor() as cur:
            for seq in range(rows):
                cur.execute(self.t["insert_item"], (self.c, seq, item_value(self.c, seq)), prepare=True)
                check(cur.rowcount == 1, "insert rowcount")
            for seq in reversed(range(rows)):
                cur.execute(self.t["select_item"], (self.c, seq), prepare=True)
                got = cur.fetchone()
                check(got == (item_value(self.c, seq),), "prepared select of seq %d returned %r" % (seq, got))

    def step_threshold0(self):
        self.conn.prepare_threshold = 0
        try:
            with self.conn.cursor() as cur:
                for k in range(5):
                    cur.execute("select %s::int * 1000 + %s::int, %s::text", (self.c, k, "k%d" % k))
                    got = cur.fetchone()
                    check(got == (self.c * 1000 + k, "k%d" % k), "threshold0 select returned %r" % (got,))
                cur.execute(self.t["select_counter"], (self.c,))
                check(cur.fetchone() == (0,), "the new counter is 0")
        finally:
            self.conn.prepare_threshold = NEVER

    def step_deallocate(self):
        # With room for 3 statements, psycopg sends DEALLOCATE _pg3_N for the oldest as it prepares more,
        # and prepares an evicted query again under a new name when it comes back.
        self.conn.prepared_max = 3
        try:
            with self.conn.cursor() as cur:
                for round_ in range(2):
                    for k in range(6):
                        cur.execute("select %s::int + " + str(k), (self.c * 100 + round_,), prepare=True)
                        got = cur.fetchone()
                        check(got == (self.c * 100 + round_ + k,), "query %d of round %d returned %r"
                              % (k, round_, got))
        finally:
            self.conn.prepared_max = 100

    def step_transaction(self):
        with self.conn.cursor() as cur:
            with self.conn.transaction():
                cur.execute("select pg_backend_pid()")
                pid = cur.fetchone()[0]
                for k in range(COUNTER_UPDATES):
                    cur.execute(self.t["bump_counter"], (1, self.c), prepare=True)
                    got = cur.fetchone()
                    check(got == (k + 1,), "counter after %d updates is %r" % (k + 1, got))
                cur.execute("select pg_backend_pid()")
                check(cur.fetchone()[0] == pid, "the transaction stayed on one server connection")
                cur.execute("select count(*) from pg_prepared_statements where not from_sql and "
                            "statement like 'update %%_counters set n = n + $1%%'")
                check(cur.fetchone()[0] >= 1, "psycopg prepared the update on this server connection")
            cur.execute(self.t["select_counter"], (self.c,), prepare=True)
            check(cur.fetchone() == (COUNTER_UPDATES,), "committed counter")

    def step_rollback(self):
        with self.conn.cursor() as cur:
            with self.conn.transaction() as tx:
                cur.execute(self.t["insert_item"], (self.c, 1_000_000, "rolled back"), prepare=True)
                cur.execute(self.t["bump_counter"], (100, self.c), prepare=True)
                check(cur.fetchone() == (COUNTER_UPDATES + 100,), "counter inside the transaction")
                raise psycopg.Rollback(tx)
            cur.execute("select count(*) from {} where client = %s and seq = 1000000".format(self.t["items"]),
                        (self.c,))
            check(cur.fetchone() == (0,), "the rolled-back insert is gone")
            cur.execute(self.t["select_counter"], (self.c,))
            check(cur.fetchone() == (COUNTER_UPDATES,), "the rolled-back update is gone")

    def _pipeline(self, first_seq, prepare):
        # executemany() prepares whenever the threshold is not None (psycopg 3.1).
        self.conn.prepare_threshold = 0 if prepare else None
        try:
            self._pipeline_run(first_seq, prepare)
        finally:
            self.conn.prepare_threshold = NEVER

    def _pipeline_run(self, first_seq, prepare):
        rows = self.args.rows
        seqs = list(range(first_seq, first_seq + rows))
        half = rows // 2
        selects = []
        with self.conn.pipeline() as p, self.conn.cursor() as cur, self.conn.cursor() as count_cur:
            cur.executemany(self.t["insert_item"], [(self.c, s, item_value(self.c, s)) for s in seqs[:half]])
            p.sync()  # a Sync in the middle: the first half is its own implicit transaction
            cur.executemany(self.t["insert_item"], [(self.c, s, item_value(self.c, s)) for s in seqs[half:]])
            count_cur.execute("select count(*) from {} where client = %s and seq >= %s and seq < %s"
                              .format(self.t["items"]), (self.c, first_seq, first_seq + rows), prepare=prepare)
            for s in seqs[::3]:
                sel = self.conn.cursor()
                sel.execute(self.t["select_item"], (self.c, s), prepare=prepare)
                selects.append((s, sel))
            p.sync()
            with self.conn.transaction(), self.conn.cursor() as counter_cur:  # a transaction in the pipeline
                counter_cur.execute(self.t["select_counter"], (self.c,), prepare=prepare)
                cur.execute(self.t["bump_counter"], (0, self.c), prepare=prepare)
                before = counter_cur.fetchone()
            check(count_cur.fetchone() == (rows,), "pipelined count")
            after = cur.fetchone()
            check(before is not None and after == before, "pipelined update in a transaction: %r then %r"
                  % (before, after))
        for s, sel in selects:
            got = sel.fetchone()
            check(got == (item_value(self.c, s),), "pipelined select of seq %d returned %r" % (s, got))
            sel.close()

    def step_pipeline(self):
        self._pipeline(self.args.rows, prepare=False)

    def step_pipeline_prepared(self):
        self._pipeline(2 * self.args.rows, prepare=True)

    def step_copy_in(self):
        n = self.args.copy_rows
        with self.conn.cursor() as cur:
            with cur.copy("copy {} (client, seq, payload, amount, at) from stdin".format(self.t["copy"])) as cp:
                for seq in range(n):
                    cp.write_row(copy_row(self.c, seq))
            check(cur.rowcount == n, "COPY FROM STDIN reported %r rows" % cur.rowcount)
            cur.execute("select count(*), count(payload), sum(amount) from {} where client = %s"
                        .format(self.t["copy"]), (self.c,))
            got = cur.fetchone()
            want = (n, sum(1 for s in range(n) if s % 17), sum(copy_row(self.c, s)[3] for s in range(n)))
            check(got == want, "copied rows: got %r want %r" % (got, want))

    def _copy_out(self, binary):
        n = self.args.copy_rows
        query = sql.SQL("copy (select client, seq, payload, amount, at from {} where client = {} order by seq) "
                        "to stdout{}").format(sql.Identifier(self.t["copy"]), sql.Literal(self.c),
                                              sql.SQL(" (format binary)" if binary else ""))
        with self.conn.cursor() as cur:
            with cur.copy(query) as cp:
                cp.set_types(["int4", "int4", "text", "numeric", "timestamptz"])
                got = list(cp.rows())
        want = [copy_row(self.c, s) for s in range(n)]
        check(len(got) == n, "COPY TO STDOUT returned %d rows, want %d" % (len(got), n))
        for g, w in zip(got, want):
            check(g == w, "COPY TO STDOUT row %r, want %r" % (g, w))

    def step_copy_out_text(self):
        self._copy_out(binary=False)

    def step_copy_out_binary(self):
        self._copy_out(binary=True)

    def step_verify(self):
        rows = self.args.rows
        with self.conn.cursor() as cur:
            cur.execute("select count(*), coalesce(sum(length(val)), 0) from {} where client = %s"
                        .format(self.t["items"]), (self.c,))
            want_len = sum(len(item_value(self.c, s)) for s in range(3 * rows))
            got = cur.fetchone()
            check(got == (3 * rows, want_len), "items of client %d: got %r want %r" % (self.c, got,
                                                                                     (3 * rows, want_len)))


def run_client(args, index, table, start, report, lock):
    client = Client(args, index, table)
    start.wait()
    try:
        for step in STEPS:
            fn = getattr(client, "step_" + step)
            try:
                if client.conn is None and step != "connect":
                    client.connect()
                fn()
                outcome = None
            except Exception as exc:  # record and go on with a fresh connection
                outcome = describe(exc)
                if args.verbose:
                    traceback.print_exc()
                client.close()
            with lock:
                entry = report["steps"][step]
                if outcome is None:
                    entry["ok"] += 1
                else:
                    entry["failed"] += 1
                    if len(entry["errors"]) < 5 and outcome not in entry["errors"]:
                        entry["errors"].append(outcome)
    finally:
        client.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--clients", type=int, default=40)
    parser.add_argument("--rows", type=int, default=10, help="rows each client inserts per step")
    parser.add_argument("--copy-rows", type=int, default=200)
    parser.add_argument("--prefix", default="psy")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()

    p = args.prefix
    table = {
        "items": p + "_items", "counters": p + "_counters", "copy": p + "_copy",
        "insert_item": "insert into %s_items (client, seq, val) values (%%s, %%s, %%s)" % p,
        "select_item": "select val from %s_items where client = %%s and seq = %%s" % p,
        "insert_counter": "insert into %s_counters (client, n) values (%%s, 0)" % p,
        "select_counter": "select n from %s_counters where client = %%s" % p,
        "bump_counter": "update %s_counters set n = n + %%s where client = %%s returning n" % p,
    }
    started = time.monotonic()
    with psycopg.connect(host=args.host, port=args.port, user="postgres", dbname="postgres",
                         connect_timeout=30, autocommit=True) as conn:
        conn.execute("drop table if exists {0}_items, {0}_counters, {0}_copy".format(p))
        conn.execute("create table {}_items (client int, seq int, val text not null, primary key (client, seq))"
                     .format(p))
        conn.execute("create table {}_counters (client int primary key, n int not null)".format(p))
        conn.execute("create table {}_copy (client int, seq int, payload text, amount numeric(12,2), "
                     "at timestamptz, primary key (client, seq))".format(p))

    report = {"stack": "psycopg", "clients": args.clients,
              "steps": {s: {"ok": 0, "failed": 0, "errors": []} for s in STEPS}}
    lock = threading.Lock()
    start = threading.Barrier(args.clients)
    threads = [threading.Thread(target=run_client, args=(args, i, table, start, report, lock), daemon=True)
               for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # Totals, read back through the same proxy on a fresh connection.
    totals_ok = True
    with psycopg.connect(host=args.host, port=args.port, user="postgres", dbname="postgres",
                         connect_timeout=30, autocommit=True) as conn:
        got = conn.execute("select (select count(*) from {0}_items), (select coalesce(sum(n), 0) from {0}_counters),"
                           " (select count(*) from {0}_copy)".format(p)).fetchone()
    want = (args.clients * 3 * args.rows, args.clients * COUNTER_UPDATES, args.clients * args.copy_rows)
    report["totals"] = {"items": got[0], "counter_sum": int(got[1]), "copy_rows": got[2]}
    if got != want:
        totals_ok = False
        report["totals_error"] = "totals %r, want %r" % (got, want)
    report["elapsed_s"] = round(time.monotonic() - started, 2)
    all_ok = totals_ok and all(s["failed"] == 0 and s["ok"] == args.clients for s in report["steps"].values())
    report["ok"] = all_ok
    for name, s in report["steps"].items():
        print("%-18s ok %3d failed %3d %s" % (name, s["ok"], s["failed"], "; ".join(s["errors"])))
    print("RESULT " + json.dumps(report, sort_keys=True), flush=True)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
