#!/usr/bin/python3
"""Where a proxy's system time goes, per transaction: tern and PgBouncer side by side under one pgbench
point, counted by perf stat on the proxy's process (every thread): task-clock (user and system), context
switches, syscalls in all and by name (io_uring_enter, sendto/recvfrom, epoll_wait, futex, ...), and
wakeups of its threads. Optionally a perf record -e cpu-clock profile of each, for perf report.
Beside the proxy, the whole machine per transaction (/proc/stat: busy, idle, softirq time, context
switches) and where its busy time went: the PostgreSQL backends (every process named postgres), pgbench
(this script's child), the proxy; so a proxy that costs less itself but more in the others shows it.

  python3 bench/syscall_profile.py [--workload select-only|tpcb-like] [--mode simple|extended|prepared]
                                   [--clients 16] [--duration 10] [--repeat 3] [--tern-binary build-release/tern]
                                   [--tern-set workers=1] [--record DIR] [--call-graph dwarf]

Starts its own PostgreSQL (primary only, not durable), pgbench -i -s 10, tern and PgBouncer in
transaction pooling with pool_size 20; runs are interleaved (tern, pgbouncer, tern, ...) and each count
is the median over the repetitions, divided by the transactions pgbench processed. Needs perf (Debian's
linux-perf) with access to tracepoints (root). Standard library only."""
import argparse
import contextlib
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pgbench_driver as driver  # noqa: E402
from pgcluster import PgCluster, free_port  # noqa: E402
from procs import PgBouncerProcess, TernProcess  # noqa: E402

# What perf counts; a tracepoint the kernel lacks is dropped (perf stat says "not supported").
EVENTS = ["task-clock", "context-switches", "cpu-migrations", "raw_syscalls:sys_enter",
          "syscalls:sys_enter_io_uring_enter", "syscalls:sys_enter_sendto", "syscalls:sys_enter_recvfrom",
          "syscalls:sys_enter_sendmsg", "syscalls:sys_enter_recvmsg", "syscalls:sys_enter_write",
          "syscalls:sys_enter_read", "syscalls:sys_enter_epoll_wait", "syscalls:sys_enter_futex",
          "sched:sched_wakeup"]


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_times(pid):
    """(user, system) seconds of the process, every thread (fields 14 and 15 of /proc/<pid>/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) / _CLK_TCK, int(rest[12]) / _CLK_TCK


def machine_times():
    """Whole-machine counters from /proc/stat: busy, idle and softirq seconds (all CPUs), context switches."""
    with open("/proc/stat") as f:
        lines = f.read().splitlines()
    cpu = [int(v) for v in lines[0].split()[1:]]  # user nice system idle iowait irq softirq steal ...
    ctxt = next(int(line.split()[1]) for line in lines if line.startswith("ctxt "))
    return {"busy": (sum(cpu[:8]) - cpu[3] - cpu[4]) / _CLK_TCK, "idle": (cpu[3] + cpu[4]) / _CLK_TCK,
            "softirq": cpu[6] / _CLK_TCK, "ctxt": ctxt}


def postgres_seconds():
    """User + system seconds of every live process named postgres (the backends the proxies hold)."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                raw = f.read()
        except OSError:
            continue
        if raw[raw.index("(") + 1:raw.rindex(")")] != "postgres":
            continue
        rest = raw.rsplit(")", 1)[1].split()
        total += (int(rest[11]) + int(rest[12])) / _CLK_TCK
    return total


def children_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def perf_stat(pid, seconds, out_path):
    """perf stat -p pid for `seconds` (all threads), CSV into out_path; returns the Popen."""
    return subprocess.Popen(["perf", "stat", "-x", ",", "--no-big-num", "-p", str(pid), "-o", out_path,
                             "-e", ",".join(EVENTS), "--", "sleep", str(seconds)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def parse_stat(path):
    counts = {}
    with open(path) as f:
        for line in f:
            parts = line.strip().split(",")
            if len(parts) < 3 or not parts[0] or parts[0].startswith("<"):
                continue
            try:
                value = float(parts[0])
            except ValueError:
                continue
            counts[parts[2]] = value
    return counts


def pgbench_argv(pgbench, port, workload, mode, clients, duration):
    argv = [pgbench, "-n", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-M", mode, "-c", str(clients),
            "-j", "2", "-T", str(duration)]
    if workload == "select-only":
        argv.append("-S")
    return argv + ["postgres"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="select-only", choices=driver.WORKLOADS)
    p.add_argument("--mode", default="simple", choices=driver.MODES)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--duration", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--pool-size", type=int, default=20)
    p.add_argument("--tern-binary", default="build-release/tern")
    p.add_argument("--tern-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a [tern] key for tern's config (workers=1, say)")
    p.add_argument("--call-graph", default="fp", choices=["fp", "dwarf", "lbr"],
                   help="perf record's call graph: fp (frame pointers; libc's callers are lost), dwarf")
    p.add_argument("--record", default=None, metavar="DIR",
                   help="also perf record -e cpu-clock (with --call-graph) each proxy's first run into DIR/<target>.data")
    args = p.parse_args()
    pgbench = driver.find_pgbench()
    tern_binary = driver.resolve_tern_binary(args.tern_binary)
    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(PgCluster(with_replica=False, extra_conf={"max_connections": 400}))
        rc, out = driver.run_cmd([pgbench, "-i", "-q", "-s", "10", "-h", "127.0.0.1", "-p", str(pg.primary_port),
                                  "-U", "postgres", "postgres"], timeout=600)
        if rc != 0:
            sys.exit("pgbench -i failed:\n" + out[-2000:])
        workers = [int(kv.split("=", 1)[1]) for kv in args.tern_set if kv.split("=", 1)[0].strip() == "workers"]
        tern = stack.enter_context(TernProcess(tern_binary, driver.tern_config(
            free_port(), pg.primary_port, workers[-1] if workers else 0, args.pool_size, None,
            [kv for kv in args.tern_set if kv.split("=", 1)[0].strip() != "workers"])))
        bouncer = stack.enter_context(PgBouncerProcess(pg.primary_port, args.pool_size, pool_mode="transaction",
                                                       max_client_conn=1000))
        targets = {"tern": tern, "pgbouncer": bouncer}
        results = {name: [] for name in targets}
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        for run in range(args.repeat):
            for name, proc in targets.items():
                stat_path = os.path.join(tmp, "%s-%d.csv" % (name, run))
                stat = perf_stat(proc.pid, args.duration, stat_path)
                record = None
                if args.record and run == 0:
                    os.makedirs(args.record, exist_ok=True)
                    record = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "--call-graph", args.call_graph,
                                               "-p", str(proc.pid),
                                               "-o", os.path.join(args.record, name + ".data"), "--", "sleep",
                                               str(args.duration)], stdout=subprocess.DEVNULL,
                                              stderr=subprocess.STDOUT)
                before = cpu_times(proc.pid)
                machine_before, postgres_before = machine_times(), postgres_seconds()
                children_before = children_seconds()
                rc, out = driver.run_cmd(pgbench_argv(pgbench, proc.port, args.workload, args.mode, args.clients,
                                                      args.duration), timeout=args.duration + 60)
                after = cpu_times(proc.pid)
                machine_after, postgres_after = machine_times(), postgres_seconds()
                children_after = children_seconds()
                stat.wait(timeout=60)
                if record:
                    record.wait(timeout=120)
                parsed = driver.parse_pgbench(out)
                if rc != 0 or not parsed["transactions"]:
                    sys.exit("pgbench against %s failed:\n%s" % (name, out[-2000:]))
                counts = parse_stat(stat_path)
                counts["user_s"], counts["system_s"] = after[0] - before[0], after[1] - before[1]
                for key in ("busy", "idle", "softirq", "ctxt"):
                    counts["machine_" + key] = machine_after[key] - machine_before[key]
                counts["postgres_s"] = postgres_after - postgres_before
                counts["pgbench_s"] = children_after - children_before  # (perf stat's sleep and perf too: ~0)
                counts["tps"] = parsed["tps"]
                counts["transactions"] = parsed["transactions"]
                results[name].append(counts)
                print("run %d %-9s %8.0f tps, %.1f us CPU/txn" % (
                    run + 1, name, parsed["tps"], counts.get("task-clock", 0) * 1000 / parsed["transactions"]),
                    flush=True)
    print("\n%s -M %s -c %d, %d s x %d interleaved runs: medians per transaction (tern / PgBouncer)" % (
        args.workload, args.mode, args.clients, args.duration, args.repeat))
    print("%-36s %12s %12s %8s" % ("event", "tern", "pgbouncer", "ratio"))

    def per_txn(name, event, scale):
        values = [r[event] * scale / r["transactions"] for r in results[name] if event in r]
        return statistics.median(values) if values else None

    rows = [("tps", None), ("task-clock", ("us CPU (perf)", 1000.0)), ("user_s", ("us user (/proc)", 1e6)),
            ("system_s", ("us system (/proc)", 1e6))] + [(e, None) for e in EVENTS[1:]] + [
            ("machine_busy", ("machine: us busy", 1e6)), ("machine_idle", ("machine: us idle", 1e6)),
            ("machine_softirq", ("machine: us softirq", 1e6)), ("machine_ctxt", ("machine: context switches", 1.0)),
            ("postgres_s", ("postgres backends: us CPU", 1e6)), ("pgbench_s", ("pgbench: us CPU", 1e6))]
    for event, unit in rows:
        if event == "tps":
            a, b = (statistics.median(r["tps"] for r in results[n]) for n in ("tern", "pgbouncer"))
            label = "tps"
        else:
            scale = unit[1] if unit else 1.0
            a, b = per_txn("tern", event, scale), per_txn("pgbouncer", event, scale)
            label = (unit[0] if unit else re.sub(r"^syscalls:sys_enter_", "", event)) + " /txn"
        if a is None and b is None:
            continue
        ratio = "%.2f" % (a / b) if a is not None and b else ""
        print("%-36s %12s %12s %8s" % (label, "" if a is None else "%.2f" % a, "" if b is None else "%.2f" % b,
                                       ratio))
    for name in targets:
        spread = [r["task-clock"] * 1000 / r["transactions"] for r in results[name] if "task-clock" in r]
        if len(spread) > 1:
            print("%s CPU/txn runs: %s (spread %.0f%%)" % (name, ", ".join("%.1f" % v for v in spread),
                                                           100 * (max(spread) - min(spread)) / min(spread)))
    if args.record:
        print("profiles: perf report -i %s/tern.data / pgbouncer.data --no-children" % args.record)


if __name__ == "__main__":
    main()
