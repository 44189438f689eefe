#!/usr/bin/env python3
"""Latency and bandwidth curves from the benchmarks' CSV files.

    contrib/bench/plot.py [-o OUTDIR] [CSV_OR_DIR...]

Reads the per-run CSV rows written with --csv (compare.sh keeps them as
OUTDIR/PROGRAM-npN-LIB-rK.csv; default input: compare.sh's default
directory, ${TMPDIR:-/tmp}/weft-bench; weft-nccl-tests' --csv file too,
one plot per collective, type and launch mode, time per call against
NCCL's), takes the median over runs per
library and size, and draws one PNG per (benchmark, ranks): time in us (or
MB/s for bw, bibw, mbw-mr) against message size, log-log, one curve per
library, with the weft/peer ratio in a lower panel. The PNGs go to -o
(default ${TMPDIR:-/tmp}/weft-bench/plots, outside the repository); only a
plot that docs/PERFORMANCE.md shows belongs in docs/perf/img/. Needs
matplotlib (pip install matplotlib, or Debian's python3-matplotlib).
"""
import argparse
import csv
import glob
import os
import statistics
import sys

BANDWIDTH = ("bw", "bibw", "mbw-mr")
RESULTS = os.path.join(os.environ.get("TMPDIR") or "/tmp", "weft-bench")


def metric_of(bench):
    if bench in BANDWIDTH:
        return "bw_mbs", "bandwidth (MB/s)"
    if bench.startswith("i"):
        return "overall_us", "overall time with overlap (us)"
    return "avg_us", "latency (us)"


def read_rows(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(glob.glob(os.path.join(p, "*-r*.csv")))
        else:
            files.append(p)
    rows = []
    for f in files:
        with open(f) as fh:
            reader = csv.DictReader(fh)
            fields = reader.fieldnames or []
            if "coll" in fields and "us" in fields:  # weft-nccl-tests: rounds of every collective in one file
                rows += [
                    {
                        "benchmark": f"{r['coll']}-{r['type']}-{'graph' if r['graph'] == '1' else 'launched'}",
                        "ranks": r["ranks"],
                        "library": r["lib"],
                        "size": r["bytes"],
                        "avg_us": r["us"],
                    }
                    for r in reader
                ]
            elif "benchmark" in fields and "avg_us" in fields:
                rows += list(reader)
            # else: a compare.sh summary or another file
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", default=[RESULTS], help=f"CSV files or directories of them (default {RESULTS})")
    ap.add_argument("-o", "--outdir", default=os.path.join(RESULTS, "plots"), help="where the PNGs go (default %(default)s)")
    args = ap.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot.py: matplotlib is missing (pip install matplotlib, or apt install python3-matplotlib)")
    rows = read_rows(args.inputs)
    if not rows:
        sys.exit("plot.py: no benchmark rows found in " + " ".join(args.inputs))
    os.makedirs(args.outdir, exist_ok=True)
    groups = {}
    for r in rows:
        groups.setdefault((r["benchmark"], int(r["ranks"])), []).append(r)
    for (bench, ranks), grp in sorted(groups.items()):
        metric, label = metric_of(bench)
        series = {}
        for r in grp:
            if r[metric]:
                series.setdefault(r["library"], {}).setdefault(int(r["size"]), []).append(float(r[metric]))
        libs = sorted(series, key=lambda l: (l != "weft", l))
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
        for lib in libs:
            sizes = sorted(s for s in series[lib] if s > 0)
            med = [statistics.median(series[lib][s]) for s in sizes]
            top.plot(sizes, med, marker="o", markersize=3, label=lib)
            if lib != "weft" and "weft" in series:
                common = [s for s in sizes if s in series["weft"]]
                ratio = [statistics.median(series["weft"][s]) / statistics.median(series[lib][s]) for s in common]
                bottom.plot(common, ratio, marker="o", markersize=3, label=f"weft / {lib}")
        top.set_xscale("log", base=2)
        top.set_yscale("log")
        top.set_ylabel(label)
        top.set_title(f"{bench}, {ranks} ranks (median over runs)")
        top.grid(True, which="both", alpha=0.3)
        top.legend()
        bottom.axhline(1.0, color="gray", linewidth=0.8)
        bottom.set_xscale("log", base=2)
        bottom.set_xlabel("message size (bytes)")
        bottom.set_ylabel("ratio" + (" (>1 better)" if metric == "bw_mbs" else " (<1 better)"))
        bottom.grid(True, which="both", alpha=0.3)
        if bottom.get_lines()[1:]:
            bottom.legend(fontsize=8)
        fig.tight_layout()
        out = os.path.join(args.outdir, f"{bench}-np{ranks}.png")
        fig.savefig(out, dpi=90)
        plt.close(fig)
        print(out)


if __name__ == "__main__":
    main()
