#!/usr/bin/python3
"""Plots of a bench/pgbench_driver.py CSV: for each workload and mode, TPS and the proxies' CPU per
transaction against the number of clients, one line per target, as PNG files in FOLDER.

  /usr/bin/python3 bench/plot_results.py RESULTS.csv FOLDER     (needs Debian's python3-matplotlib)

Prints the paths it wrote; exits 1 without matplotlib."""
import csv
import os
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot_results.py RESULTS.csv FOLDER")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker  # noqa: F401
    except ImportError:
        sys.stderr.write("plot_results: no matplotlib (apt install python3-matplotlib)\n")
        return 1
    with open(sys.argv[1]) as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "ok"]
    folder = sys.argv[2]
    os.makedirs(folder, exist_ok=True)
    targets = sorted({r["target"] for r in rows})
    colors = {t: "C%d" % i for i, t in enumerate(targets)}  # one color a target in every plot
    for workload, mode in sorted({(r["workload"], r["mode"]) for r in rows}):
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        for target in targets:
            mine = sorted((r for r in rows if (r["workload"], r["mode"], r["target"]) == (workload, mode, target)),
                          key=lambda r: int(r["clients"]))
            if not mine:
                continue
            left.plot([int(r["clients"]) for r in mine], [float(r["tps"]) for r in mine], marker="o", label=target,
                      color=colors[target])
            cpu = [(int(r["clients"]), float(r["proxy_cpu_us_per_txn"])) for r in mine if r["proxy_cpu_us_per_txn"]]
            if cpu:
                right.plot([c for c, _ in cpu], [v for _, v in cpu], marker="o", label=target, color=colors[target])
        for ax, what in ((left, "TPS (median)"), (right, "proxy CPU per transaction, us (median)")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({int(r["clients"]) for r in rows}))
            ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.set_xlabel("pgbench clients")
            ax.set_ylabel(what)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle("pgbench %s, -M %s" % (workload, mode))
        fig.tight_layout()
        path = os.path.join(folder, "%s-%s.png" % (workload, mode))
        fig.savefig(path, dpi=90)
        plt.close(fig)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
