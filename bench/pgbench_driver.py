#!/usr/bin/python3
"""tern benchmark driver: pgbench against tern, PgBouncer, PostgreSQL direct and a zero-logic relay.

Starts a throwaway PostgreSQL primary + replica (not durable) unless
--pg-port is given, initialises pgbench tables once on the primary, starts
tern and PgBouncer once each (same pool size, transaction pooling) and the
relay of bench/relay.c (compiled here: a connection to the server per client,
bytes copied, nothing else: what any proxy hop costs) in front of the primary,
then runs every workload x mode x clients x target with pgbench, repetitions
interleaved across targets, measuring throughput, p50/p99 latency (pgbench's
per-transaction log, sampled) and each proxy's user and system CPU time per
transaction.  Prints a table of medians (with the spread of the runs), and
writes the rows to a CSV, a markdown table and, with matplotlib (Debian's
python3-matplotlib), plots of TPS and CPU per transaction against clients.

  python3 bench/pgbench_driver.py --tern-binary build-release/tern            # the whole matrix
  python3 bench/pgbench_driver.py --tern-binary build-release/tern --quick    # the README's points
  python3 bench/pgbench_driver.py --tern-binary build-release/tern --quick --server-tls   # TLS to PostgreSQL

Exit status: 0 when every run succeeded, 1 when a pgbench run failed or
reported failed transactions, 2 on a setup error.
"""

import argparse
import contextlib
import csv
import datetime
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_ROOT, "tests", "integration"))

import pgcluster  # noqa: E402
from pgcluster import PgCluster, clean_env, free_port  # noqa: E402
from procs import PgBouncerProcess, ProcessError, RelayProcess, TernProcess  # noqa: E402
from tlscluster import ThrowawayCA, TlsHarnessError, certificate_directory, tls_only_cluster  # noqa: E402

# tern-tr-none: a second tern with [replay] tr_mode = none, for the cost of Transaction Replay's record.
# tern-journal-disk: [journal] dir in a temp folder with fsync = interval (the default tern journals in
# memory only); tern-tr-off: [replay] tr_enabled = false, no journal and no Transaction Replay.
# tern-1w, tern-2w, ...: tern with that many workers (whatever --tern-workers says).
# tern-b: a second tern binary (--tern-binary-b), to compare two builds side by side.
# tern-no-ssp: [pool] server_side_prepare = off (tern's default prepares unnamed statements once per server
# connection; this one passes them on unnamed, as PgBouncer does).
# relay: bench/relay.c, the zero-logic relay.
TARGETS = ("tern", "direct", "pgbouncer", "relay", "tern-tr-none", "tern-journal-disk", "tern-tr-off", "tern-1w",
           "tern-2w", "tern-4w", "tern-b", "tern-no-ssp")
DEFAULT_TARGETS = ("tern", "pgbouncer", "direct", "relay")
PROXIES = ("pgbouncer", "relay")  # besides the tern targets, the processes whose CPU is measured
WORKLOADS = ("select-only", "tpcb-like")
MODES = ("simple", "extended", "prepared")

TABLE_COLUMNS = ["workload", "mode", "clients", "target", "tps",
                 "latency_avg_ms", "proxy_cpu_us_per_txn", "tps_vs_direct",
                 "cpu_per_txn_vs_pgbouncer"]
CSV_COLUMNS = TABLE_COLUMNS + ["tps_vs_pgbouncer", "latency_p50_ms", "latency_p99_ms", "proxy_user_us_per_txn",
                               "proxy_system_us_per_txn", "tps_spread_pct", "cpu_spread_pct",
                               "status", "transactions", "failed_transactions",
                               "proxy_cpu_seconds", "duration_s", "jobs",
                               "pool_size", "scale", "runs", "tls", "server_tls"]
# pgbench's per-transaction log, sampled so a fast run writes at most about this many lines.
LATENCY_SAMPLES = 20000
QUICK = {"workloads": ["select-only", "tpcb-like"], "modes": ["simple", "extended"], "clients": [16, 64],
         "duration": 5, "repeat": 3}


class SetupError(Exception):
    pass


def log(msg):
    print(msg, flush=True)


def csv_list(kind, allowed=None, conv=str):
    def parse(text):
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty %s list" % kind)
        out = []
        for t in items:
            try:
                v = conv(t)
            except ValueError:
                raise argparse.ArgumentTypeError("bad %s: %r" % (kind, t))
            if allowed is not None and v not in allowed:
                raise argparse.ArgumentTypeError(
                    "unknown %s %r (choose from %s)"
                    % (kind, t, ", ".join(allowed)))
            if conv is int and v < 1:
                raise argparse.ArgumentTypeError("%s must be >= 1" % kind)
            if v not in out:
                out.append(v)
        return out
    return parse


def parse_args(argv):
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    p = argparse.ArgumentParser(
        description="Benchmark tern vs PgBouncer vs direct PostgreSQL with "
                    "pgbench.")
    p.add_argument("--targets", type=csv_list("target", TARGETS),
                   default=list(DEFAULT_TARGETS), help="comma list of %s (default %s)"
                   % (",".join(TARGETS), ",".join(DEFAULT_TARGETS)))
    p.add_argument("--workloads", type=csv_list("workload", WORKLOADS),
                   default=list(WORKLOADS),
                   help="comma list of %s" % ",".join(WORKLOADS))
    p.add_argument("--modes", type=csv_list("mode", MODES),
                   default=list(MODES),
                   help="pgbench -M modes, comma list of %s" % ",".join(MODES))
    p.add_argument("--clients", type=csv_list("client count", conv=int),
                   default=[1, 16, 64, 256], help="comma list of client counts")
    p.add_argument("--duration", type=int, default=10,
                   help="seconds per pgbench run (-T)")
    p.add_argument("--jobs", type=int, default=2,
                   help="pgbench threads (-j min(clients, jobs))")
    p.add_argument("--scale", type=int, default=10, help="pgbench -i -s")
    p.add_argument("--pool-size", type=int, default=20,
                   help="server connections per pool (tern and PgBouncer)")
    p.add_argument("--tern-workers", type=int, default=1,
                   help="tern worker threads (1, tern's default; 0 = one per CPU)")
    p.add_argument("--tern-set", action="append", default=[], metavar="KEY=VALUE",
                   help="an extra [tern] key for tern's config, e.g. pin_workers=false (repeatable)")
    p.add_argument("--tern-binary", default="build/tern",
                   help="path to tern (relative: to cwd, else the repo root)")
    p.add_argument("--tern-binary-b", default=None,
                   help="the tern-b target's binary (another build, for an A/B comparison)")
    p.add_argument("--repeat", type=int, default=3,
                   help="runs per (workload, mode, clients, target), interleaved across targets; "
                        "the table and CSV report medians (default 3)")
    p.add_argument("--quick", action="store_true",
                   help="the README's points: select-only and tpcb-like, simple and extended, 16 and 64 "
                        "clients, 5 s, 3 runs each (overrides those options)")
    p.add_argument("--plots", default=None,
                   help="folder for the PNG plots (default: beside the CSV; needs matplotlib)")
    p.add_argument("--csv", default=None,
                   help="CSV output (default bench/results/%s.csv)" % stamp)
    p.add_argument("--pg-port", type=int, default=None,
                   help="use the PostgreSQL server already on 127.0.0.1:PORT "
                        "(user postgres) instead of starting one")
    p.add_argument("--skip-init", action="store_true",
                   help="do not run pgbench -i (tables must exist)")
    p.add_argument("--no-replica", action="store_true",
                   help="start the primary only")
    p.add_argument("--fail-fast", action="store_true",
                   help="stop at the first failed run")
    p.add_argument("--server-socket", action="store_true",
                   help="tern and PgBouncer reach PostgreSQL over its Unix socket (host=DIR) instead of "
                        "loopback TCP; clients still connect over TCP, and direct and relay runs stay on TCP")
    p.add_argument("--tls", action="store_true",
                   help="clients reach tern and PgBouncer over TLS (sslmode=require, a self-signed "
                        "certificate made with the openssl command); direct stays plaintext, as the "
                        "PostgreSQL started here has no certificate")
    p.add_argument("--server-tls", action="store_true",
                   help="every connection to PostgreSQL is TLS: the PostgreSQL started here has ssl = on (a "
                        "throwaway CA made with the openssl command) and refuses TCP logins without it; tern and "
                        "PgBouncer get server_tls_sslmode = require, direct and relay runs sslmode=require (with "
                        "--pg-port, that server must take TLS)")
    args = p.parse_args(argv)
    if args.server_socket and args.pg_port:
        p.error("--server-socket needs the PostgreSQL this driver starts (its socket directory), not --pg-port")
    if args.server_socket and args.server_tls:
        p.error("--server-socket and --server-tls: PostgreSQL takes no TLS over its Unix socket")
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    if "tern-b" in args.targets and not args.tern_binary_b:
        p.error("the tern-b target needs --tern-binary-b")
    for name in ("duration", "jobs", "scale", "pool_size", "repeat"):
        if getattr(args, name) < 1:
            p.error("--%s must be >= 1" % name.replace("_", "-"))
    if args.tern_workers < 0:
        p.error("--tern-workers must be >= 0")
    if args.csv is None:
        args.csv = os.path.join(REPO_ROOT, "bench", "results", stamp + ".csv")
    return args


def resolve_tern_binary(path):
    if os.path.isabs(path):
        return path
    if os.path.exists(path):
        return os.path.abspath(path)
    return os.path.join(REPO_ROOT, path)


def find_pgbench():
    exe = shutil.which("pgbench")
    if exe:
        return exe
    try:
        cand = os.path.join(pgcluster.find_pg_bindir(), "pgbench")
    except pgcluster.PgClusterError:
        cand = None
    if cand and os.access(cand, os.X_OK):
        return cand
    raise SetupError("pgbench not found on PATH (install postgresql-contrib / "
                     "postgresql-client: tools/install-deps.sh)")


def pgbouncer_version():
    try:
        out = subprocess.run(["pgbouncer", "--version"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(rb"PgBouncer (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def make_tls_certificate(stack):
    """A self-signed certificate and key in a temp dir readable by PgBouncer's OS user."""
    directory = tempfile.mkdtemp(prefix="tern-bench-tls-")
    stack.callback(shutil.rmtree, directory, True)
    os.chmod(directory, 0o755)
    crt, key = os.path.join(directory, "server.crt"), os.path.join(directory, "server.key")
    rc, out = run_cmd(["openssl", "req", "-x509", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                       "-newkey", "rsa:2048", "-keyout", key, "-out", crt], 60)
    if rc != 0:
        raise SetupError("openssl req failed:\n%s" % tail(out))
    for path in (crt, key):
        os.chmod(path, 0o644)
    return crt, key


def make_server_tls(stack, cluster_args):
    """A TLS-only PostgreSQL (tests/integration/tlscluster.py: ssl = on, a certificate from a throwaway CA,
    TCP logins without TLS refused), not started; its certificates are removed with the stack."""
    directory = certificate_directory("tern-bench-server-tls-")
    stack.callback(shutil.rmtree, directory, True)
    try:
        ca = ThrowawayCA(os.path.join(directory, "ca"), "ca")
        server = ca.issue("server", "tern bench server", dns=("localhost",), ips=("127.0.0.1",))
    except TlsHarnessError as e:
        raise SetupError(str(e))
    return tls_only_cluster(ca, server, **cluster_args)


def client_sslmode(args, target):
    """PGSSLMODE for pgbench's connection to target: tern and PgBouncer take TLS from clients with --tls;
    direct and relay runs reach PostgreSQL itself (the relay copies bytes), which takes it with --server-tls.
    None leaves libpq's default (prefer)."""
    if target in ("direct", "relay"):
        return "require" if args.server_tls else None
    return "require" if args.tls else None


def tern_config(port, pg_port, workers, pool_size, tls=None, extra=(), pg_host="127.0.0.1", server_tls=False):
    tls_lines = [] if tls is None else [
        "client_tls_sslmode = require", "client_tls_cert_file = %s" % tls[0],
        "client_tls_key_file = %s" % tls[1]]
    if server_tls:
        tls_lines.append("server_tls_sslmode = require")
    return "\n".join((["[tls]"] + tls_lines if tls_lines else []) + [
        "[tern]",
        "listen = 127.0.0.1:%d" % port,
        "workers = %d" % workers,
    ] + ([] if any(kv.split("=", 1)[0].strip() == "pool_mode" for kv in extra) else ["pool_mode = transaction"]) + [
        "%s = %s" % tuple(part.strip() for part in kv.split("=", 1)) for kv in extra] + [
        "[servers]",
        "primary = host=%s port=%d" % (pg_host, pg_port),
        "[pool]",
        "pool_size = %d" % pool_size,
        "[auth]",
        "mode = trust",
        "[limits]",
        "max_client_conn = 1000",
        "",
    ])


def run_cmd(argv, timeout, env=None):
    """Run argv with a hard timeout; returns (returncode or None, output)."""
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           env=clean_env(dict({"PGCONNECT_TIMEOUT": "10"}, **(env or {}))),
                           timeout=timeout)
        return r.returncode, r.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode("utf-8", "replace")
        return None, out + "\n(killed after the %ss timeout)" % timeout


def tail(text, n=25):
    return "\n".join(text.rstrip().splitlines()[-n:])


_RE = {
    "tps": re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)",
                      re.M),
    "latency": re.compile(r"^latency average = ([0-9.]+) ms", re.M),
    "failed": re.compile(r"^number of failed transactions: (\d+)", re.M),
    "processed": re.compile(
        r"^number of transactions actually processed: (\d+)", re.M),
}


def parse_pgbench(out):
    """dict(tps, latency_ms, failed, transactions) or None for missing keys."""
    res = {}
    m = _RE["tps"].search(out)
    res["tps"] = float(m.group(1)) if m else None
    m = _RE["latency"].search(out)
    res["latency_ms"] = float(m.group(1)) if m else None
    m = _RE["failed"].search(out)
    res["failed"] = int(m.group(1)) if m else 0   # absent before PG 15
    m = _RE["processed"].search(out)
    res["transactions"] = int(m.group(1)) if m else None
    return res


def latency_percentiles(log_dir):
    """(p50, p99) in ms of the transactions pgbench logged in log_dir (-l: the third field of each line is
    the transaction's time in microseconds); (None, None) when it logged none."""
    times = []
    for name in os.listdir(log_dir):
        with open(os.path.join(log_dir, name)) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[2].isdigit():
                    times.append(int(parts[2]))
    if not times:
        return None, None
    times.sort()
    pick = lambda q: times[min(len(times) - 1, int(q * len(times)))] / 1000.0
    return pick(0.50), pick(0.99)


def fmt(v, spec):
    return "" if v is None else format(v, spec)


def add_ratios(rows):
    by_key = {(r["workload"], r["mode"], r["clients"], r["target"]): r
              for r in rows if r["status"] == "ok"}
    for r in rows:
        r["tps_vs_direct"] = None
        r["tps_vs_pgbouncer"] = None
        r["cpu_per_txn_vs_pgbouncer"] = None
        if r["status"] != "ok":
            continue
        k = (r["workload"], r["mode"], r["clients"])
        d = by_key.get(k + ("direct",))
        if d and d["tps"]:
            r["tps_vs_direct"] = r["tps"] / d["tps"]
        b = by_key.get(k + ("pgbouncer",))
        if b and b["tps"] and r["target"] != "pgbouncer":
            r["tps_vs_pgbouncer"] = r["tps"] / b["tps"]
        if r["target"].startswith("tern") or r["target"] == "relay":
            if b and b["proxy_cpu_us_per_txn"] and \
                    r["proxy_cpu_us_per_txn"] is not None:
                r["cpu_per_txn_vs_pgbouncer"] = \
                    r["proxy_cpu_us_per_txn"] / b["proxy_cpu_us_per_txn"]


def display_row(r):
    if r["status"] != "ok":
        return [r["workload"], r["mode"], str(r["clients"]), r["target"],
                r["status"].upper()] + [""] * 8
    return [r["workload"], r["mode"], str(r["clients"]), r["target"],
            fmt(r["tps"], ".1f"), fmt(r["latency_p50_ms"], ".2f"), fmt(r["latency_p99_ms"], ".2f"),
            fmt(r["proxy_cpu_us_per_txn"], ".2f"),
            "" if r["proxy_user_us_per_txn"] is None else "%.1f+%.1f" % (r["proxy_user_us_per_txn"],
                                                                      r["proxy_system_us_per_txn"]),
            fmt(r["tps_vs_direct"], ".3f"), fmt(r["tps_vs_pgbouncer"], ".3f"),
            fmt(r["cpu_per_txn_vs_pgbouncer"], ".3f"),
            "%s/%s" % (fmt(r.get("tps_spread_pct"), ".0f") or "-", fmt(r.get("cpu_spread_pct"), ".0f") or "-")]


def print_table(rows):
    header = ["workload", "mode", "clients", "target", "tps", "p50 ms", "p99 ms",
              "proxy us CPU/txn", "user+sys", "tps vs direct", "tps vs pgb",
              "CPU/txn vs pgbouncer", "spread% tps/cpu"]
    body = [display_row(r) for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
              for i, h in enumerate(header)]
    right = set(range(4, 13)) | {2}

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))
    log(line(header))
    log("  ".join("-" * w for w in widths))
    for b in body:
        log(line(b))


def write_csv(path, rows, args):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for r in rows:
            w.writerow([
                r["workload"], r["mode"], r["clients"], r["target"],
                fmt(r["tps"], ".3f"), fmt(r["latency_ms"], ".4f"),
                fmt(r["proxy_cpu_us_per_txn"], ".3f"),
                fmt(r["tps_vs_direct"], ".4f"),
                fmt(r["cpu_per_txn_vs_pgbouncer"], ".4f"),
                fmt(r["tps_vs_pgbouncer"], ".4f"), fmt(r["latency_p50_ms"], ".3f"),
                fmt(r["latency_p99_ms"], ".3f"), fmt(r["proxy_user_us_per_txn"], ".3f"),
                fmt(r["proxy_system_us_per_txn"], ".3f"), fmt(r.get("tps_spread_pct"), ".1f"),
                fmt(r.get("cpu_spread_pct"), ".1f"),
                r["status"], fmt(r["transactions"], "d"),
                fmt(r["failed"], "d"), fmt(r["proxy_cpu_s"], ".3f"),
                args.duration, r["jobs"], args.pool_size, args.scale, r.get("runs", 1),
                int(client_sslmode(args, r["target"]) == "require"), int(args.server_tls),
            ])


def write_markdown(path, rows, args):
    """The table of medians as markdown, with the command's shape and the spread of the runs."""
    with open(path, "w") as f:
        f.write("Medians of %d interleaved %d s runs (spread: (max - min) / min over them); pool_size %d, "
                "scale %d, tern workers %d%s%s.\n\n" % (args.repeat, args.duration, args.pool_size, args.scale,
                                                         args.tern_workers,
                                                         "; clients to tern and PgBouncer over TLS" if args.tls else "",
                                                         "; every connection to PostgreSQL over TLS (--server-tls)"
                                                         if args.server_tls else ""))
        f.write("| workload | mode | clients | target | TPS | ÷ PgBouncer | p50 ms | p99 ms | µs CPU/txn "
                "(user + system) | CPU ÷ PgBouncer | spread TPS / CPU |\n")
        f.write("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
        for r in rows:
            if r["status"] != "ok":
                f.write("| %s | %s | %d | %s | %s |  |  |  |  |  |  |\n" % (
                    r["workload"], r["mode"], r["clients"], r["target"], r["status"]))
                continue
            cpu = "" if r["proxy_cpu_us_per_txn"] is None else "%.1f (%.1f + %.1f)" % (
                r["proxy_cpu_us_per_txn"], r["proxy_user_us_per_txn"] or 0, r["proxy_system_us_per_txn"] or 0)
            spread = "%s / %s" % (fmt(r.get("tps_spread_pct"), ".0f") or "-", fmt(r.get("cpu_spread_pct"), ".0f") or "-")
            f.write("| %s | %s | %d | %s | %.0f | %s | %s | %s | %s | %s | %s%% |\n" % (
                r["workload"], r["mode"], r["clients"], r["target"], r["tps"], fmt(r["tps_vs_pgbouncer"], ".2f"),
                fmt(r["latency_p50_ms"], ".2f"), fmt(r["latency_p99_ms"], ".2f"), cpu,
                fmt(r["cpu_per_txn_vs_pgbouncer"], ".2f"), spread))


def write_plots(csv_path, folder):
    """bench/plot_results.py over the CSV, with Debian's python3 (where python3-matplotlib lives) when this
    is another Python; the PNG paths it wrote, or None."""
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    rc, out = run_cmd([python, os.path.join(REPO_ROOT, "bench", "plot_results.py"), csv_path, folder], 300)
    return out.split() if rc == 0 and out.strip() else None


def bench(args, stack):
    pgbench = find_pgbench()
    tern_binary = None
    if any(t.startswith("tern") for t in args.targets):
        tern_binary = resolve_tern_binary(args.tern_binary)
        if not os.access(tern_binary, os.X_OK):
            raise SetupError(
                "tern binary not found at %s: build it (meson setup build "
                "--buildtype=release && meson compile -C build), pass "
                "--tern-binary, or drop tern from --targets" % tern_binary)

    skipped_pairs = set()
    if "pgbouncer" in args.targets and "prepared" in args.modes:
        v = pgbouncer_version()
        if v is not None and v < (1, 21):
            log("note: PgBouncer %d.%d cannot keep protocol-level prepared "
                "statements in transaction pooling (added in 1.21): "
                "pgbouncer runs with -M prepared are SKIPPED" % v)
            skipped_pairs.add(("prepared", "pgbouncer"))

    # ------------------------------------------------------------ server
    # The driver's own connections to PostgreSQL (psql, pgbench -i) take TLS as the runs do.
    server_env = {"PGSSLMODE": "require"} if args.server_tls else None
    if args.pg_port is not None:
        pg_port = args.pg_port
        cluster = None
        log("using the existing PostgreSQL server on 127.0.0.1:%d" % pg_port)
        rc, out = run_cmd(["psql", "-X", "-A", "-t", "-h", "127.0.0.1", "-p",
                           str(pg_port), "-U", "postgres", "-d", "postgres",
                           "-c", "show max_connections"], 30, env=server_env)
        if rc != 0:
            raise SetupError("cannot connect to 127.0.0.1:%d:\n%s"
                             % (pg_port, tail(out)))
        maxconn = int(out.strip() or 0)
        if "direct" in args.targets and max(args.clients) + 5 > maxconn:
            log("warning: max_connections=%d on the server; direct runs with "
                "%d clients will fail" % (maxconn, max(args.clients)))
    else:
        max_conn = max(400, max(args.clients) + 2 * args.pool_size + 20)
        log("starting PostgreSQL (%s, not durable%s) ..."
            % ("primary only" if args.no_replica else "primary + replica",
               ", ssl = on, TCP logins over TLS only" if args.server_tls else ""))
        t0 = time.monotonic()
        cluster_args = dict(with_replica=not args.no_replica, durable=False,
                            extra_conf={"max_connections": max_conn})
        cluster = stack.enter_context(make_server_tls(stack, cluster_args) if args.server_tls
                                      else PgCluster(**cluster_args))
        pg_port = cluster.primary_port
        log("  primary on 127.0.0.1:%d%s (%.1fs, data in %s)" % (
            pg_port, "" if cluster.replica_port is None else
            ", replica on 127.0.0.1:%d" % cluster.replica_port,
            time.monotonic() - t0, cluster.base_dir))

    if not args.skip_init:
        log("pgbench -i -s %d on the primary ..." % args.scale)
        t0 = time.monotonic()
        rc, out = run_cmd([pgbench, "-i", "-q", "-s", str(args.scale),
                           "-h", "127.0.0.1", "-p", str(pg_port),
                           "-U", "postgres", "postgres"],
                          timeout=300 + 30 * args.scale, env=server_env)
        if rc != 0:
            raise SetupError("pgbench -i failed (exit %s):\n%s%s" % (
                rc, tail(out), "\n" + cluster.logs() if cluster else ""))
        log("  done in %.1fs" % (time.monotonic() - t0))

    # ------------------------------------------------------------ proxies
    ports = {"direct": pg_port}
    pg_host = cluster.base_dir if args.server_socket else "127.0.0.1"
    if args.server_socket:
        log("tern and PgBouncer reach PostgreSQL over its Unix socket in %s" % pg_host)
    procs = {}
    tls = make_tls_certificate(stack) if args.tls else None
    if tls:
        log("clients use TLS to tern and PgBouncer (sslmode=require)")
    if args.server_tls:
        log("every connection to PostgreSQL is TLS: tern and PgBouncer with server_tls_sslmode = require, "
            "direct and relay runs with sslmode=require")
    for target in [t for t in args.targets if t.startswith("tern")]:
        m = re.match(r"tern-(\d+)w$", target)
        workers = int(m.group(1)) if m else args.tern_workers
        cfg = tern_config(free_port(), pg_port, workers, args.pool_size, tls, args.tern_set, pg_host,
                          args.server_tls)
        if target == "tern-tr-none":
            cfg += "[replay]\ntr_mode = none\n"
        elif target == "tern-tr-off":
            cfg += "[replay]\ntr_enabled = false\n"
        elif target == "tern-no-ssp":
            cfg += "[pool]\nserver_side_prepare = off\n"
        elif target == "tern-journal-disk":
            cfg += "[journal]\ndir = %s\nfsync = interval\n" % stack.enter_context(tempfile.TemporaryDirectory())
        binary = resolve_tern_binary(args.tern_binary_b) if target == "tern-b" else tern_binary
        log("starting %s (%s, workers=%d, pool_size=%d) ..."
            % (target, binary, workers, args.pool_size))
        t = stack.enter_context(TernProcess(binary, cfg))
        procs[target], ports[target] = t, t.port
        log("  %s pid %d on 127.0.0.1:%d" % (target, t.pid, t.port))
    if "relay" in args.targets:
        relay_dir = stack.enter_context(tempfile.TemporaryDirectory())
        relay_binary = os.path.join(relay_dir, "relay")
        rc, out = run_cmd(["cc", "-O2", "-o", relay_binary, os.path.join(REPO_ROOT, "bench", "relay.c")], 120)
        if rc != 0:
            raise SetupError("cc bench/relay.c failed:\n%s" % tail(out))
        r = stack.enter_context(RelayProcess(relay_binary, pg_port))
        procs["relay"], ports["relay"] = r, r.port
        log("  relay pid %d on 127.0.0.1:%d" % (r.pid, r.port))
    if "pgbouncer" in args.targets:
        log("starting pgbouncer (pool_size=%d, transaction pooling) ..."
            % args.pool_size)
        b = stack.enter_context(PgBouncerProcess(
            pg_port, args.pool_size, pool_mode="transaction", server_host=pg_host,
            max_client_conn=max(1000, max(args.clients) + 10),
            extra_settings=(() if tls is None else (
                "client_tls_sslmode = require", "client_tls_cert_file = %s" % tls[0],
                "client_tls_key_file = %s" % tls[1])) + (
                ("server_tls_sslmode = require",) if args.server_tls else ())))
        procs["pgbouncer"], ports["pgbouncer"] = b, b.port
        log("  pgbouncer pid %d on 127.0.0.1:%d" % (b.pid, b.port))

    # ------------------------------------------------------------ runs
    # Repetitions interleave the targets, so a noisy neighbour hits them alike.
    plan = [(w, m, c, r, t) for w in args.workloads for m in args.modes
            for c in args.clients for r in range(args.repeat) for t in args.targets]
    rows, failures = [], []
    dead = set()
    last_tps = {}
    log("running %d pgbench runs of %ds each" % (len(plan), args.duration))
    for i, (workload, mode, clients, rep, target) in enumerate(plan, 1):
        jobs = min(clients, args.jobs)
        row = {"workload": workload, "mode": mode, "clients": clients,
               "target": target, "status": "ok", "tps": None,
               "latency_ms": None, "transactions": None, "failed": None,
               "proxy_cpu_s": None, "proxy_cpu_us_per_txn": None, "proxy_user_us_per_txn": None,
               "proxy_system_us_per_txn": None, "latency_p50_ms": None, "latency_p99_ms": None,
               "jobs": jobs}
        rows.append(row)
        prefix = "[%d/%d] %s %s c=%d %s%s ..." % (
            i, len(plan), workload, mode, clients, target,
            " (run %d/%d)" % (rep + 1, args.repeat) if args.repeat > 1 else "")
        if (mode, target) in skipped_pairs:
            row["status"] = "skipped"
            log(prefix + " skipped (unsupported by this PgBouncer)")
            continue
        if target in dead:
            row["status"] = "failed"
            log(prefix + " not run: %s is no longer running" % target)
            continue
        print(prefix, end=" ", flush=True)
        log_dir = tempfile.mkdtemp(prefix="tern-bench-log-")
        # (sampled from what the previous run of the point did, so a fast run writes a bounded log)
        rate = min(1.0, LATENCY_SAMPLES / max(1.0, (last_tps.get((workload, mode, clients)) or 1000.0) * args.duration))
        argv = [pgbench, "-n", "-T", str(args.duration), "-c", str(clients),
                "-j", str(jobs), "-M", mode, "-l", "--log-prefix", os.path.join(log_dir, "txn"),
                "--sampling-rate", "%.6f" % rate]
        if workload == "select-only":
            argv.append("-S")
        argv += ["-h", "127.0.0.1", "-p", str(ports[target]),
                 "-U", "postgres", "postgres"]
        proc = procs.get(target)
        cpu0 = proc.cpu_times() if proc else None
        sslmode = client_sslmode(args, target)
        rc, out = run_cmd(argv, timeout=args.duration + 60, env={"PGSSLMODE": sslmode} if sslmode else None)
        cpu1 = proc.cpu_times() if proc and proc.alive() else None
        row["latency_p50_ms"], row["latency_p99_ms"] = latency_percentiles(log_dir)
        shutil.rmtree(log_dir, ignore_errors=True)
        res = parse_pgbench(out)
        if res["tps"]:
            last_tps[(workload, mode, clients)] = res["tps"]
        row.update(tps=res["tps"], latency_ms=res["latency_ms"],
                   failed=res["failed"], transactions=res["transactions"])
        problems = []
        if rc is None:
            problems.append("pgbench timed out")
        elif rc != 0:
            problems.append("pgbench exit code %d" % rc)
        if res["failed"]:
            problems.append("%d failed transactions" % res["failed"])
        if res["tps"] is None or res["transactions"] is None:
            problems.append("could not parse tps / processed transactions")
        if proc and not proc.alive():
            dead.add(target)
            problems.append("%s exited (code %s)" % (target, proc.returncode))
        if cpu0 is not None and cpu1 is not None:
            user, system = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
            row["proxy_cpu_s"] = user + system
            if res["transactions"]:
                row["proxy_cpu_us_per_txn"] = row["proxy_cpu_s"] / res["transactions"] * 1e6
                row["proxy_user_us_per_txn"] = user / res["transactions"] * 1e6
                row["proxy_system_us_per_txn"] = system / res["transactions"] * 1e6
        if problems:
            row["status"] = "failed"
            log("FAILED: " + "; ".join(problems))
            msg = "%s: %s\n  %s\n--- pgbench output tail ---\n%s" % (
                prefix.rstrip(" ."), "; ".join(problems), " ".join(argv),
                tail(out))
            if proc:
                msg += "\n--- %s log tail ---\n%s" % (target, proc.log_tail(20))
            log(msg)
            failures.append(msg)
            if args.fail_fast:
                break
        else:
            cpu = "" if row["proxy_cpu_us_per_txn"] is None else \
                ", %.2f us proxy CPU/txn" % row["proxy_cpu_us_per_txn"]
            log("%.1f tps, %.3f ms avg%s" % (res["tps"], res["latency_ms"] or 0,
                                             cpu))
    return medians(rows), failures


def medians(rows):
    """One row per (workload, mode, clients, target): the median of each measure over its runs;
    failed if any run failed."""
    groups = {}
    for r in rows:
        groups.setdefault((r["workload"], r["mode"], r["clients"], r["target"]), []).append(r)
    out = []
    for runs in groups.values():
        row = dict(runs[0])
        row["runs"] = len(runs)
        if any(r["status"] != "ok" for r in runs):
            row["status"] = next(r["status"] for r in runs if r["status"] != "ok")
        for key in ("tps", "latency_ms", "proxy_cpu_us_per_txn", "proxy_cpu_s", "proxy_user_us_per_txn",
                    "proxy_system_us_per_txn", "latency_p50_ms", "latency_p99_ms"):
            values = [r[key] for r in runs if r.get(key) is not None]
            row[key] = statistics.median(values) if values else None
        for key, spread in (("tps", "tps_spread_pct"), ("proxy_cpu_us_per_txn", "cpu_spread_pct")):
            values = [r[key] for r in runs if r.get(key)]
            row[spread] = 100.0 * (max(values) - min(values)) / min(values) if len(values) > 1 else None
        for key in ("transactions", "failed"):
            values = [r[key] for r in runs if r[key] is not None]
            row[key] = sum(values) if values else None
        out.append(row)
    return out


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    pgcluster.install_sigterm_handler()
    rows, failures = [], []
    try:
        with contextlib.ExitStack() as stack:
            rows, failures = bench(args, stack)
            log("stopping servers ...")
    except (SetupError, pgcluster.PgClusterError, ProcessError, OSError) as e:
        log("setup error: %s" % e)
        return 2

    add_ratios(rows)
    log("")
    print_table(rows)
    write_csv(args.csv, rows, args)
    markdown = os.path.splitext(args.csv)[0] + ".md"
    write_markdown(markdown, rows, args)
    plots = write_plots(args.csv, args.plots or os.path.splitext(args.csv)[0] + "-plots")
    log("")
    log("CSV: %s" % args.csv)
    log("markdown: %s" % markdown)
    log("plots: %s" % (", ".join(plots) if plots else "none (install python3-matplotlib)"))
    if failures:
        log("%d of %d runs FAILED:" % (len(failures), len(rows)))
        for f in failures:
            log("  - " + f.splitlines()[0])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
