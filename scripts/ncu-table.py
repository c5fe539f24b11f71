#!/usr/bin/env python3
"""ncu-table.py — kernels from an Nsight Compute CSV (scripts/profile-gpu.sh),
grouped by kernel name, slowest total first: one decode token's (the
launches between the first two argmax kernels), or with --all every
launch in the file (a prefill)."""
import collections
import csv
import sys

UNIT = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
        "byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}


def value(rec, name):
    v, unit = rec.get(name, ("0", ""))
    return float(v.replace(",", "")) * UNIT.get(unit, 1.0)


def main(path, every):
    recs, hdr = collections.OrderedDict(), None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if row and row[0] == "ID":
                hdr = row
                continue
            if not hdr or len(row) != len(hdr):
                continue
            d = dict(zip(hdr, row))
            r = recs.setdefault(int(d["ID"]), {"name": d["Kernel Name"], "grid": d["Grid Size"]})
            r[d["Metric Name"]] = (d["Metric Value"], d["Metric Unit"])
    launches = list(recs.values())
    if every:
        token = launches
    else:
        marks = [i for i, r in enumerate(launches) if r["name"].startswith("argmax")
                 or " argmax" in r["name"]]
        if len(marks) < 2:
            sys.exit("ncu-table: fewer than two argmax launches: profile more launches")
        token = launches[marks[0] + 1: marks[1] + 1]
    agg = collections.defaultdict(lambda: [0, 0.0, 0.0, "", ""])
    for r in token:
        a = agg[r["name"].replace("void ", "")[:72]]
        a[0] += 1
        a[1] += value(r, "gpu__time_duration.sum")
        a[2] += value(r, "dram__bytes_read.sum")
        a[3] = r["grid"]
        a[4] = r.get("launch__registers_per_thread", ("", ""))[0]
    total = sum(a[1] for a in agg.values())
    what = "all" if every else "one token"
    print(f"{what}: {len(token)} launches, {total:.0f} us summed (ncu, each kernel alone)")
    print(f"{'n':>4} {'total us':>9} {'mean us':>8} {'MB':>7} {'GB/s':>6} {'grid':>14} {'reg':>4}  kernel")
    for name, (n, t, mb, grid, reg) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"{n:4d} {t:9.1f} {t / n:8.2f} {mb / n:7.2f} {mb / t * 1e3 if t else 0:6.0f} "
              f"{grid:>14} {reg:>4}  {name}")


if __name__ == "__main__":
    args = sys.argv[1:]
    every = "--all" in args
    args = [a for a in args if a != "--all"]
    if len(args) != 1:
        sys.exit("usage: ncu-table.py [--all] NCU.csv")
    main(args[0], every)
