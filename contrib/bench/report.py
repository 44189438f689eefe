#!/usr/bin/env python3
"""Markdown tables from compare.sh's median files (OUTDIR/PROGRAM-npN.csv).

    contrib/bench/report.py [--compact] [CSV...]

One table per file: size, each library's median, and weft / peer for every
peer. --compact prints one line per file instead: the ratio at each size
(weft / openmpi). Without files it reads every median file in compare.sh's
default directory, ${TMPDIR:-/tmp}/weft-bench. It writes only to stdout:
paste what a report needs into docs/PERFORMANCE.md, keep the raw runs out
of the repository.
"""
import argparse
import csv
import glob
import os
import re

RESULTS = os.path.join(os.environ.get("TMPDIR") or "/tmp", "weft-bench")


def load(path):
    rows = list(csv.DictReader(open(path)))
    med, libs = {}, []
    for r in rows:
        med[(int(r["size"]), r["library"])] = float(r["median"])
        if r["library"] not in libs:
            libs.append(r["library"])
    libs.sort(key=lambda l: (l != "weft", l))
    metric = rows[0]["metric"] if rows else "avg_us"
    return rows, med, libs, metric


def human(size):
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if size >= div and size % div == 0:
            return f"{size // div}{unit}"
    return str(size)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="*", help=f"median files (default: {RESULTS}/*-npN.csv)")
    ap.add_argument("--compact", action="store_true")
    args = ap.parse_args()
    files = args.files or sorted(
        p for p in glob.glob(os.path.join(RESULTS, "*-np*.csv")) if re.search(r"-np\d+\.csv$", p)
    )
    if not files:
        ap.error(f"no median files given and none in {RESULTS}")
    for path in files:
        rows, med, libs, metric = load(path)
        if not rows:
            continue
        name = os.path.basename(path)[:-4]
        sizes = sorted({s for s, _ in med})
        peers = [l for l in libs if l != "weft"]
        higher = metric == "bw_mbs"
        if args.compact:
            cells = []
            for s in sizes:
                w, p = med.get((s, "weft")), med.get((s, "openmpi"))
                cells.append(f"{human(s)}: {w / p:.2f}" if w and p else f"{human(s)}: -")
            print(f"| {name} | " + ", ".join(cells) + " |")
            continue
        unit = "MB/s" if higher else "us"
        print(f"\n**{name}** (median {metric}, {unit}; weft/peer {'above' if higher else 'below'} 1 = weft better)\n")
        head = "| size | " + " | ".join(libs) + " | " + " | ".join(f"weft/{p}" for p in peers) + " |"
        print(head)
        print("|" + " --- |" * (1 + len(libs) + len(peers)))
        for s in sizes:
            vals = [med.get((s, l)) for l in libs]
            w = med.get((s, "weft"))
            ratios = [
                f"{w / med[(s, p)]:.2f}" if w and med.get((s, p)) else "-" for p in peers
            ]
            print(
                f"| {human(s)} | "
                + " | ".join(f"{v:.2f}" if v is not None else "-" for v in vals)
                + " | "
                + " | ".join(ratios)
                + " |"
            )


if __name__ == "__main__":
    main()
