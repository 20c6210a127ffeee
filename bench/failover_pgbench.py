#!/usr/bin/env python3
"""pgbench tpcb-like through tern while the primary is killed (pg_ctl stop -m immediate) and its
synchronous standby promoted: what the clients saw, and whether the database is whole.

  python3 bench/failover_pgbench.py [--tr-mode transaction] [--pool-mode transaction] [--protocol simple]
                                    [--clients 32] [--duration 20] [--fault-at 6] [--tern-binary build/tern]

Starts its own primary and streaming replica (synchronous_standby_names = '*', so an acknowledged
commit is on the standby), pgbench -i -s 10, and tern in front of both servers (pool_mode and [replay]
tr_mode as given; `--pool-mode session --tr-mode session` is a default install). pgbench runs with -c
clients; at --fault-at seconds the primary is stopped with -m immediate and the standby promoted. Prints pgbench's summary, every error a client got (by
SQLSTATE, from tern's messages), tern's tr_* counters, and the tpcb invariant on the new primary
(sum of account, teller and branch balances and of history deltas all equal)."""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from pgcluster import PgCluster, clean_env, free_port  # noqa: E402
from procs import TernProcess  # noqa: E402

# tern's messages (replay/recover.c) and PostgreSQL's, to the SQLSTATE they go with.
MESSAGES = [("transaction resolution unknown", "08007"), ("could not serialize access", "40001"),
            ("the connection to the primary was lost", "57P01"), ("current transaction is aborted", "25P02"),
            ("no primary answered within", "08006"), ("terminating connection", "57P01")]


def pgbench_errors(text):
    """{SQLSTATE: count} of the errors and aborted clients in pgbench's output."""
    errors = {}
    for line in text.splitlines():
        if "Run was aborted" in line:
            continue  # (pgbench's summary after a client aborted: the client's own line counts it)
        if "aborted" in line or "ERROR" in line or "FATAL" in line:
            state = next((code for words, code in MESSAGES if words in line), "other: " + line.strip()[:120])
            errors[state] = errors.get(state, 0) + 1
    return errors


def tpcb_invariant(psql):
    """The sums of account, teller and branch balances and of history deltas, the history row count, and
    whether the four sums are equal (every tpcb-like transaction is whole or absent)."""
    sums = psql("select (select sum(abalance) from pgbench_accounts), (select sum(tbalance) from "
                "pgbench_tellers), (select sum(bbalance) from pgbench_branches), (select coalesce(sum(delta), 0) "
                "from pgbench_history), (select count(*) from pgbench_history)").strip().split("|")
    return sums, len(set(sums[:4])) == 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tr-mode", default="transaction")
    p.add_argument("--pool-mode", default="transaction", choices=("session", "transaction"))
    p.add_argument("--protocol", default="simple", choices=("simple", "extended", "prepared"))
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--duration", type=int, default=20)
    p.add_argument("--fault-at", type=float, default=6.0)
    p.add_argument("--tern-binary", default=os.path.join(ROOT, "build", "tern"))
    p.add_argument("--async", dest="is_async", action="store_true",
                   help="an asynchronous standby: the acknowledged commits the promote lost are counted")
    args = p.parse_args()
    sync = "''" if args.is_async else "'*'"
    with PgCluster(with_replica=True, durable=True, extra_conf={"synchronous_commit": "on", "max_connections": 200,
                                                                "synchronous_standby_names": sync}) as pg:
        subprocess.run(["pgbench", "-i", "-q", "-s", "10", "-h", "127.0.0.1", "-p", str(pg.primary_port), "-U",
                        "postgres", "postgres"], check=True, env=clean_env(), capture_output=True)
        http = free_port()
        config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = 2\npool_mode = %s\n[servers]\n"
                  "primary = host=127.0.0.1 port=%d\nother = host=127.0.0.1 port=%d\n"
                  "[routing]\nmonitor_interval_ms = 100\n[pool]\npool_size = 40\n[limits]\nmax_client_conn = 1000\n"
                  "[replay]\ntr_mode = %s\n[admin]\nhttp_listen = 127.0.0.1:%d\n"
                  % (free_port(), args.pool_mode, pg.primary_port, pg.replica_port, args.tr_mode, http))
        with TernProcess(args.tern_binary, config) as t:
            out = tempfile.TemporaryFile()
            bench = subprocess.Popen(["pgbench", "-c", str(args.clients), "-j", "2", "-T", str(args.duration), "-M",
                                      args.protocol, "-P", "2", "-h", "127.0.0.1", "-p", str(t.port), "-U",
                                      "postgres", "postgres"], stdout=out, stderr=subprocess.STDOUT, env=clean_env())
            time.sleep(args.fault_at)
            started = time.monotonic()
            pg.promote_replica()
            print("primary stopped (immediate) and standby promoted in %.1fs" % (time.monotonic() - started))
            pg.psql("alter system set synchronous_standby_names = ''")
            pg.psql("select pg_reload_conf()")
            bench.wait(timeout=args.duration + 120)
            out.seek(0)
            text = out.read().decode("utf-8", "replace")
            metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http, timeout=10).read().decode()
        errors = pgbench_errors(text)
        summary = [l for l in text.splitlines() if re.match(r"^(number of|latency|tps|number of failed)", l)]
        print("pgbench -M %s -c %d -T %d through tern (pool_mode = %s, tr_mode = %s):"
              % (args.protocol, args.clients, args.duration, args.pool_mode, args.tr_mode))
        for line in summary:
            print("  " + line)
        print("client errors by SQLSTATE: %s" % (errors or "none"))
        for line in metrics.splitlines():
            if line.startswith("tr_"):
                print("  " + line)
        sums, whole = tpcb_invariant(pg.psql)
        print("tpcb invariant on the new primary (accounts, tellers, branches, history; history rows): %s -> %s"
              % (sums, "whole" if whole else "BROKEN"))
        processed = re.search(r"number of transactions actually processed: (\d+)", text)
        if processed:
            # Each acknowledged tpcb transaction inserts one history row; 08007 ones may or may not have.
            lost = int(processed.group(1)) - int(sums[4])
            print("acknowledged transactions missing on the new primary: %d (%s standby)"
                  % (max(lost, 0), "asynchronous" if args.is_async else "synchronous"))
            if not args.is_async and lost > 0:
                return 1
        return 0 if whole else 1


if __name__ == "__main__":
    sys.exit(main())
