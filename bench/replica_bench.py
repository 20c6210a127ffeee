#!/usr/bin/python3
"""Reads on replicas: pgbench through tern at each consistency level, beside the primary alone.

Starts a throwaway primary + streaming replica (synchronous_commit on, fsync off), initialises pgbench
tables, starts one tern in front of both (transaction pooling) and runs, interleaved and repeated:

  direct     pgbench against the primary itself
  primary    through tern, tern.consistency = primary (every read on the primary)
  eventual   through tern, eventual (any replica within the lag bounds)
  session    through tern, session (read-your-writes)
  strict     through tern, strict (every commit acknowledged before the read)

  split      through tern, level primary, tern.transaction_split = on (the `report` workload only)

for each workload: `select-only` (pgbench -S), `read-after-write` (an INSERT, then a SELECT that
must see it, or pgbench aborts: the read waits for the replica to replay the write, or the primary
serves it; `eventual` is left out there, as it does not promise read-your-writes), and `report` (a
report-like transaction: BEGIN, twelve SELECTs, an UPDATE, COMMIT; run direct, through tern with
splitting off (`primary`) and on (`split`)). Each run reports TPS, latency p50 / p99 (from pgbench's
per-transaction log), and the share of reads the replica served (tern's /metrics:
tern_route_reads_total, and for `report` tern_split_reads_total over its twelve reads a transaction),
the whole machine's busy CPU and tern's own per transaction (/proc), and the monitor's on-demand LSN
probes per transaction (tern_server_probes_total: the primary's, then the replica's). Prints medians
over the repeats.

usage: replica_bench.py [--clients 16] [--duration 10] [--repeat 3] [--scale 10]
                        [--tern-binary build-release/tern] [--workloads select-only,read-after-write]
                        [--protocol simple|extended|prepared] [--targets direct,primary,...,split]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_ROOT, "tests", "integration"))

from pgcluster import PgCluster, clean_env, free_port  # noqa: E402
from procs import TernProcess  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from syscall_profile import cpu_times, machine_times  # noqa: E402

TARGETS = ("direct", "primary", "eventual", "session", "strict", "split")
REPORT_READS = 12
REPORT = "\\set id random(1, 100000 * :scale)\nBEGIN;\n" + "".join(
    "SELECT abalance FROM pgbench_accounts WHERE aid = (:id + %d) %% (100000 * :scale) + 1;\n" % (i * 7919)
    for i in range(REPORT_READS)) + "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :id;\nCOMMIT;\n"
READ_AFTER_WRITE = """\\set v random(1, 1000000000000)
INSERT INTO bench_raw VALUES (:v) ON CONFLICT DO NOTHING;
SELECT 1 / (SELECT count(*) FROM bench_raw WHERE v = :v)::int;
"""


def log(msg):
    print(msg, flush=True)


def metrics(port, name="tern_route_reads_total"):
    """A routing counter by path (replica paths summed, primary fallbacks summed), and the monitor's
    on-demand probes (tern_server_probes_total) of the primary and of the replica."""
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    replica = primary = 0.0
    probes = {"primary": 0.0, "replica": 0.0}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            value = float(line.rsplit(" ", 1)[1])
            if 'path="primary"' in line:
                primary += value
            else:
                replica += value
        elif line.startswith("tern_server_probes_total{"):
            probes["replica" if 'server="replica"' in line else "primary"] += float(line.rsplit(" ", 1)[1])
    return replica, primary, probes


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


def run_pgbench(port, level, workload, args, workdir, script):
    """One pgbench run; returns (tps, p50_ms, p99_ms, transactions, failed)."""
    prefix = os.path.join(workdir, "log_%s_%s_%d" % (workload, level, time.monotonic_ns()))
    argv = ["pgbench", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-n", "-M", args.protocol,
            "-c", str(args.clients), "-j", str(args.jobs), "-T", str(args.duration), "-l", "--log-prefix", prefix]
    argv += ["-S"] if workload == "select-only" else ["-f", script]
    options = {"direct": None, "split": "-c tern.consistency=primary -c tern.transaction_split=on"}
    option = options.get(level, "-c tern.consistency=%s" % level)
    env = clean_env({"PGOPTIONS": option} if option else {})
    r = subprocess.run(argv + ["postgres"], capture_output=True, text=True, env=env, timeout=args.duration + 120)
    tps = transactions = failed = None
    for line in r.stdout.splitlines():
        if line.startswith("tps = "):
            tps = float(line.split()[2])
        elif line.startswith("number of transactions actually processed:"):
            transactions = int(line.split(":")[1].split("/")[0])
        elif line.startswith("number of failed transactions:"):
            failed = int(line.split(":")[1].split()[0])
    if r.returncode != 0 or tps is None:
        raise RuntimeError("pgbench %s/%s failed (%d): %s" % (workload, level, r.returncode, r.stderr[-1500:]))
    latencies = []
    for name in os.listdir(workdir):
        path = os.path.join(workdir, name)
        if name.startswith(os.path.basename(prefix)):
            with open(path) as f:
                for line in f:
                    fields = line.split()
                    if len(fields) >= 3:
                        latencies.append(int(fields[2]) / 1000.0)
            os.unlink(path)
    return tps, percentile(latencies, 50), percentile(latencies, 99), transactions, failed or 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--duration", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--scale", type=int, default=10)
    p.add_argument("--pool-size", type=int, default=20)
    p.add_argument("--workers", type=int, default=1, help="tern workers (1, tern's default; 0 = one per CPU)")
    p.add_argument("--tern-binary", default=os.path.join(REPO_ROOT, "build-release", "tern"))
    p.add_argument("--workloads", default="select-only,read-after-write,report")
    p.add_argument("--protocol", default="simple", choices=("simple", "extended", "prepared"),
                   help="pgbench -M: extended-protocol batches (unnamed or named statements) are routed too")
    p.add_argument("--targets", default=",".join(TARGETS))
    args = p.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    targets = [t for t in args.targets.split(",") if t]
    if not os.path.exists(args.tern_binary):
        log("no tern binary at %s (meson setup build-release --buildtype=release && ninja -C build-release)"
            % args.tern_binary)
        return 2
    with tempfile.TemporaryDirectory(prefix="tern-replica-bench-") as workdir, \
            PgCluster(with_replica=True, extra_conf={"synchronous_commit": "on", "max_connections": 200}) as pg:
        log("primary on %d, replica on %d; pgbench -i -s %d" % (pg.primary_port, pg.replica_port, args.scale))
        subprocess.run(["pgbench", "-i", "-q", "-s", str(args.scale), "-h", "127.0.0.1", "-p", str(pg.primary_port),
                        "-U", "postgres", "postgres"], check=True, capture_output=True, env=clean_env())
        pg.psql("create table bench_raw (v bigint primary key)")
        pg.wait_replica_caught_up()
        scripts = {}
        for workload, text in (("read-after-write", READ_AFTER_WRITE), ("report", REPORT)):
            scripts[workload] = os.path.join(workdir, workload + ".sql")
            with open(scripts[workload], "w") as f:
                f.write(text)
        http_port = free_port()
        config = ("[tern]\nlisten = 127.0.0.1:%d\nworkers = %d\npool_mode = transaction\n[servers]\n"
                  "primary = host=127.0.0.1 port=%d\nreplica = host=127.0.0.1 port=%d\n[routing]\n"
                  "default_consistency = primary\n[pool]\npool_size = %d\n[admin]\nhttp_listen = 127.0.0.1:%d\n"
                  "[limits]\nmax_client_conn = 1000\n"
                  % (free_port(), args.workers, pg.primary_port, pg.replica_port, args.pool_size, http_port))
        tern = TernProcess(args.tern_binary, config)
        tern.start()
        results = {}
        try:
            for round_no in range(args.repeat):
                order = targets[round_no % len(targets):] + targets[:round_no % len(targets)]  # interleaved
                for workload in workloads:
                    for target in order:
                        if workload == "read-after-write" and target == "eventual":
                            continue  # not read-your-writes: its stale reads abort pgbench (the checker shows them)
                        if (target == "split") != (workload == "report") and target not in ("direct", "primary"):
                            continue  # split is report's; the levels route autocommit reads only
                        port = pg.primary_port if target == "direct" else tern.port
                        counter = "tern_split_reads_total" if workload == "report" else "tern_route_reads_total"
                        time.sleep(0.3)  # tern publishes its counters every 100 ms
                        before = metrics(http_port, counter)
                        machine0, tern0 = machine_times(), sum(cpu_times(tern.proc.pid))
                        tps, p50, p99, n, failed = run_pgbench(port, target, workload, args, workdir,
                                                               scripts.get(workload))
                        machine1, tern1 = machine_times(), sum(cpu_times(tern.proc.pid))
                        time.sleep(0.3)
                        after = metrics(http_port, counter)
                        busy_us = 1e6 * (machine1["busy"] - machine0["busy"]) / max(n, 1)
                        tern_us = 1e6 * (tern1 - tern0) / max(n, 1)
                        probes = [(after[2][k] - before[2][k]) / max(n, 1) for k in ("primary", "replica")]
                        routed = (after[0] - before[0]) + (after[1] - before[1])
                        if workload == "report":
                            routed = n * REPORT_READS  # every read, split or not
                        share = (after[0] - before[0]) / routed if routed else 0.0
                        results.setdefault((workload, target), []).append(
                            (tps, p50, p99, share, failed, busy_us, tern_us, probes[0], probes[1]))
                        log("  round %d %-16s %-8s tps %8.0f  p50 %6.2f ms  p99 %6.2f ms  replica %5.1f%%  failed %d"
                            "  machine %6.0f us/txn  tern %5.0f us/txn  probes/txn %.2f + %.2f"
                            % (round_no + 1, workload, target, tps, p50, p99, 100 * share, failed, busy_us, tern_us,
                               probes[0], probes[1]))
        finally:
            tern.stop()
        log("\nmedians of %d runs, %d clients, %d s each (%s)" % (args.repeat, args.clients, args.duration,
                                                                  os.path.basename(args.tern_binary)))
        log("%-16s %-9s %9s %9s %9s %9s %9s %8s %10s %8s %8s %8s" % (
            "workload", "target", "tps", "vs_prim", "p50_ms", "p99_ms", "replica%", "failed", "machine_us", "tern_us",
            "probe_p", "probe_r"))
        for workload in workloads:
            base = statistics.median(r[0] for r in results.get((workload, "primary"), [(float("nan"),)]))
            for target in targets:
                rows = results.get((workload, target))
                if not rows:
                    continue
                tps = statistics.median(r[0] for r in rows)
                log("%-16s %-9s %9.0f %9.2f %9.2f %9.2f %9.1f %8d %10.0f %8.0f %8.2f %8.2f" % (
                    workload, target, tps, tps / base if base else float("nan"),
                    statistics.median(r[1] for r in rows), statistics.median(r[2] for r in rows),
                    100 * statistics.median(r[3] for r in rows), sum(r[4] for r in rows),
                    *(statistics.median(r[i] for r in rows) for i in (5, 6, 7, 8))))
        failed = sum(r[4] for rows in results.values() for r in rows)
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
