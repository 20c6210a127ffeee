#!/usr/bin/python3
"""A consistency checker for reads routed to replicas (issue 10), with psycopg 3 (libpq).

Writers commit increasing values through tern; readers read right after and check they see them:
- `session` (read-your-writes): each writer reads its own value back on its own connection, right after
  the INSERT (autocommit) or the COMMIT of a BEGIN ... COMMIT;
- `strict`: readers on other connections note every value acknowledged so far, then read: the value
  they get must be at least the one noted for that writer.
- `split` (transaction_split): readers on other connections run read-committed transactions of ten
  reads each; every read must see every value acknowledged before it was issued (the count of reads
  the replica served is in "replica", from pg_is_in_recovery() in the read itself).
`protocol` is `simple` (psycopg's ClientCursor: one Query message) or `extended` (Parse/Bind/Execute).
A stale read is one that misses a value it must see. Used by run_integration.py and runnable alone:

  consistency.py PORT LEVEL PROTOCOL READS [DBNAME [own|others|split]]

prints one JSON line {"reads": N, "stale": N, "writes": N, "replica": N, "errors": [...], "seconds": S}."""
import json
import sys
import threading
import time

import psycopg

TABLE = "consistency_ck"


def connect(port, dbname, protocol, level, split=False):
    """A client at `level`, splitting its transactions or not (startup options tern takes as its own)."""
    options = "-c tern.consistency=%s -c tern.transaction_split=%s" % (level, "on" if split else "off")
    conn = psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname=dbname, autocommit=True,
                           connect_timeout=10, options=options,
                           cursor_factory=psycopg.ClientCursor if protocol == "simple" else psycopg.Cursor)
    return conn


def setup(port, dbname):
    """The table, on the primary (through tern: a write)."""
    with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname=dbname, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS %s (writer int, n bigint, PRIMARY KEY (writer, n))" % TABLE)


def run(port, level, protocol, reads, dbname="postgres", check=None, writers=4, readers=4, deadline_s=120):
    """Runs until `reads` reads are checked (or the deadline); returns the counts. `check`: "own" (each
    writer reads its own write back) or "others" (readers on other connections); by default the one
    `level` promises (session: own, strict: others)."""
    check = check or ("own" if level == "session" else "others")
    setup(port, dbname)
    stop = threading.Event()
    lock = threading.Lock()
    result = {"reads": 0, "stale": 0, "writes": 0, "replica": 0, "errors": [], "examples": []}
    acked = {}  # strict: writer -> highest n acknowledged
    base = int(time.time() * 1000) * 1000  # values never seen before in this table

    def count_read(ok, example):
        with lock:
            result["reads"] += 1
            if not ok:
                result["stale"] += 1
                if len(result["examples"]) < 5:
                    result["examples"].append(example)
            if result["reads"] >= reads:
                stop.set()

    def fail(exc):
        with lock:
            result["errors"].append(repr(exc))
        stop.set()

    def writer(w):
        try:
            with connect(port, dbname, protocol, level) as conn:
                n = base
                while not stop.is_set():
                    n += 1
                    if n % 5 == 0:  # a transaction: the read must see its COMMIT
                        with conn.transaction():
                            conn.execute("INSERT INTO %s VALUES (%%s, %%s)" % TABLE, (w, n))
                    else:
                        conn.execute("INSERT INTO %s VALUES (%%s, %%s)" % TABLE, (w, n))
                    with lock:
                        result["writes"] += 1
                        acked[w] = n
                    if check == "own":
                        got = conn.execute("SELECT count(*) FROM %s WHERE writer = %%s AND n = %%s" % TABLE,
                                           (w, n)).fetchone()[0]
                        count_read(got == 1, "writer %d wrote %d, read back %d rows" % (w, n, got))
        except Exception as exc:  # noqa: BLE001 - reported, and fails the check
            fail(exc)

    def read_one(conn, r, where):
        """One checked read of the highest value of the writer reader r follows (none acknowledged yet: a
        short sleep)."""
        with lock:
            snapshot = dict(acked)
        if not snapshot:
            time.sleep(0.001)
            return
        w = list(snapshot)[r % len(snapshot)]
        got, on_replica = conn.execute("SELECT coalesce(max(n), 0), pg_is_in_recovery() FROM %s WHERE writer = %%s"
                                       % TABLE, (w,)).fetchone()
        with lock:
            result["replica"] += on_replica
        count_read(got >= snapshot[w], "%s: writer %d had %d acknowledged, the read saw %d (on the %s)"
                   % (where, w, snapshot[w], got, "replica" if on_replica else "primary"))

    def reader(r):
        try:
            with connect(port, dbname, protocol, level) as conn:
                while not stop.is_set():
                    read_one(conn, r, "autocommit")
        except Exception as exc:  # noqa: BLE001
            fail(exc)

    def split_reader(r):
        try:
            with connect(port, dbname, "simple", level, split=True) as conn:
                while not stop.is_set():
                    with conn.transaction():  # BEGIN ... COMMIT, read committed
                        for _ in range(10):
                            read_one(conn, r, "in a transaction")
        except Exception as exc:  # noqa: BLE001
            fail(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    if check in ("others", "split"):
        threads += [threading.Thread(target=split_reader if check == "split" else reader, args=(r,))
                    for r in range(readers)]
    started = time.monotonic()
    for t in threads:
        t.start()
    stop.wait(deadline_s)
    stop.set()
    for t in threads:
        t.join(30)
    result["seconds"] = round(time.monotonic() - started, 2)
    return result


if __name__ == "__main__":
    port, level, protocol, reads = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    dbname = sys.argv[5] if len(sys.argv) > 5 else "postgres"
    print(json.dumps(run(port, level, protocol, reads, dbname, sys.argv[6] if len(sys.argv) > 6 else None)))
